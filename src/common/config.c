/* SPDX-License-Identifier: MIT */
/*
 * Run-time configuration: the settings table, the config-file parser and the
 * typed lookups (see config.h for the contract).
 *
 * This file is linked into libchell.so and runs from its constructor, before
 * the interposition layer is ready. So: no stdio streams, no getenv (the
 * caller passes envp, or we walk `environ`), files are read with the raw
 * system calls of chell/sys.h. snprintf into caller buffers and malloc are
 * fine: neither is interposed.
 *
 * Error policy: loading does not stop at the first problem. The first error
 * is reported (return -1, message in err) but every other valid setting is
 * still applied, so a caller that must degrade gracefully (the preloaded
 * library reading `on_error`) gets the best configuration available. The
 * config must be released with chell_config_free() in both cases.
 */
#include "config.h"
#include "registry.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chell/sys.h"

extern char **environ;

/*
 * Longest value accepted from one source (one file line, one environment
 * variable). PATH_MAX-sized: every value is at most a path.
 */
#define CFG_VALUE_MAX 4095
/* A PATHLIST accumulated from many file lines may be longer than one value. */
#define CFG_PATHLIST_MAX 65535
/* Config files are small; refusing huge ones protects the constructor. */
#define CFG_FILE_MAX (1 << 20)

/* The settings of registry.def: the core ones, then each handler's. */
const struct chell_setting_def chell_setting_defs[] = {
#define CHELL_SETTING(key, env, type, def, choices, help) {key, env, type, def, choices, help},
#include "registry.def"
	{NULL, NULL, CHELL_T_STRING, NULL, NULL, NULL},
};

/* In a file, `path = X` is the singular spelling of `paths` (one entry per line). */
static const char *const PATH_ALIAS = "path";

static int n_settings(void)
{
	int n = 0;
	while (chell_setting_defs[n].key)
		n++;
	return n;
}

int chell_setting_index(const char *key)
{
	for (int i = 0; chell_setting_defs[i].key; i++)
		if (strcmp(chell_setting_defs[i].key, key) == 0)
			return i;
	return -1;
}

/* ---- messages ---------------------------------------------------------- */

/*
 * Prefix a message with where the value came from:
 *   "file:/etc/chell.conf:3" -> "/etc/chell.conf:3: ..."
 *   "env", "default", NULL   -> no prefix (env is named next to the key instead)
 *   anything else (the CLI passes "option --mode") -> "option --mode: ..."
 */
static void set_err(char *err, size_t errlen, const char *origin, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void set_err(char *err, size_t errlen, const char *origin, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	size_t off = 0;
	if (origin && strncmp(origin, "file:", 5) == 0)
		off = (size_t)snprintf(err, errlen, "%s: ", origin + 5);
	else if (origin && *origin && strcmp(origin, "env") != 0 && strcmp(origin, "default") != 0)
		off = (size_t)snprintf(err, errlen, "%s: ", origin);
	if (off >= errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + off, errlen - off, fmt, ap);
	va_end(ap);
}

/* "mode (CHELL_MODE)" when the value came from the environment, else "mode". */
static void setting_name(char *buf, size_t len, const struct chell_setting_def *d,
			 const char *origin)
{
	if (origin && strcmp(origin, "env") == 0)
		snprintf(buf, len, "%s (%s)", d->key, d->env);
	else
		snprintf(buf, len, "%s", d->key);
}

/* Edit distance capped at 3, for "did you mean" hints on misspelled keys. */
static int distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 40 || lb > 40)
		return 99;
	int row[41];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

static void unknown_key_err(char *err, size_t errlen, const char *origin, const char *key)
{
	const char *best = NULL;
	int bestd = 3; /* only suggest close matches */
	for (int i = 0; chell_setting_defs[i].key; i++) {
		int d = distance(key, chell_setting_defs[i].key);
		if (d < bestd) {
			bestd = d;
			best = chell_setting_defs[i].key;
		}
	}
	if (best)
		set_err(err, errlen, origin, "unknown setting '%s' (did you mean '%s'?)", key, best);
	else
		set_err(err, errlen, origin, "unknown setting '%s'", key);
}

/* ---- value parsers ----------------------------------------------------- */

static int parse_bool(const char *v, int *out)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off"};
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

#define CFG_U64_MAX ((uint64_t)INT64_MAX) /* 2^63-1: fits off_t and ssize_t */

/* Decimal digits only: no sign, no spaces, no hex (strtoull accepts all three). */
static int parse_digits(const char **pp, uint64_t *out)
{
	const char *p = *pp;
	uint64_t v = 0;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned dgt = (unsigned)(*p - '0');
		if (v > (CFG_U64_MAX - dgt) / 10)
			return -2;
		v = v * 10 + dgt;
	}
	*pp = p;
	*out = v;
	return 0;
}

static int parse_uint(const char *v, uint64_t *out)
{
	int r = parse_digits(&v, out);
	if (r)
		return r;
	return *v ? -1 : 0;
}

/*
 * The one size parser (settings, chelld and `chell pool` options): decimal
 * digits, then optionally K, M, G or T (powers of 1024, either case), then
 * optionally "B" or "iB" after the suffix ("64K", "64KB", "64KiB"). At most
 * 2^63-1. 0, -1 malformed, -2 too large.
 */
int chell_parse_size(const char *v, uint64_t *out)
{
	uint64_t n;
	int r = parse_digits(&v, &n);
	if (r)
		return r;
	unsigned shift = 0;
	switch (*v) {
	case '\0': break;
	case 'k': case 'K': shift = 10; v++; break;
	case 'm': case 'M': shift = 20; v++; break;
	case 'g': case 'G': shift = 30; v++; break;
	case 't': case 'T': shift = 40; v++; break;
	default: return -1;
	}
	if (shift && (strcmp(v, "B") == 0 || strcmp(v, "iB") == 0))
		v += strlen(v);
	if (*v)
		return -1;
	if (shift && n > (CFG_U64_MAX >> shift))
		return -2;
	*out = n << shift;
	return 0;
}

static int enum_has(const char *choices, const char *v)
{
	size_t len = strlen(v);
	const char *p = choices;
	while (*p) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		if (n == len && strncmp(p, v, n) == 0)
			return 1;
		if (!bar)
			break;
		p = bar + 1;
	}
	return 0;
}

struct route_check {
	const char *name, *origin;
	char *err;
	size_t errlen;
};

/* One PREFIX=STACK entry of a `route` value: syntax only (external
 * handlers are found when the rules are built, chell_routes_build). */
static int check_route_entry(const char *e, size_t len, void *arg)
{
	struct route_check *rc = arg;
	const char *eq = memchr(e, '=', len);
	char why[256];
	struct chell_stack_spec sp;
	if (!eq || eq == e || e[0] != '/')
		snprintf(why, sizeof why, "'%.*s' is not PREFIX=STACK with an absolute PREFIX",
			 (int)(len > 200 ? 200 : len), e);
	else if (chell_stack_spec_parse(eq + 1, len - (size_t)(eq + 1 - e), &sp, why, sizeof why) == 0)
		return 0;
	set_err(rc->err, rc->errlen, rc->origin, "bad value for setting %s: %s", rc->name, why);
	return -1;
}

static int check_routes(const char *v, const char *name, const char *origin, char *err,
			size_t errlen)
{
	struct route_check rc = {name, origin, err, errlen};
	return chell_route_entries(v, check_route_entry, &rc) ? -1 : 0;
}

/*
 * Validate one value against its definition. The empty string always passes:
 * it means "the default" (see apply()).
 */
static int check_value(const struct chell_setting_def *d, const char *v, const char *origin,
		       char *err, size_t errlen)
{
	char name[128];
	setting_name(name, sizeof name, d, origin);
	size_t len = strlen(v);
	size_t max = d->type == CHELL_T_PATHLIST || d->type == CHELL_T_ROUTES ? CFG_PATHLIST_MAX : CFG_VALUE_MAX;
	if (len > max) {
		set_err(err, errlen, origin, "value for setting %s is too long (%zu bytes, at most %zu)",
			name, len, max);
		return -1;
	}
	if (len == 0)
		return 0;
	uint64_t u;
	int b, r;
	switch (d->type) {
	case CHELL_T_STRING:
	case CHELL_T_PATH:
		return 0;
	case CHELL_T_PATHLIST: {
		/* Empty entries ("a::b", a trailing ':') are skipped, as by chell_config_paths. */
		const char *p = v;
		while (*p) {
			const char *colon = strchr(p, ':');
			size_t n = colon ? (size_t)(colon - p) : strlen(p);
			if (n && *p != '/') {
				set_err(err, errlen, origin,
					"bad value for setting %s: '%.*s' is not an absolute path", name,
					(int)(n > 200 ? 200 : n), p);
				return -1;
			}
			if (n > CFG_VALUE_MAX) {
				set_err(err, errlen, origin,
					"bad value for setting %s: a path is too long (%zu bytes, at most %d)",
					name, n, CFG_VALUE_MAX);
				return -1;
			}
			if (!colon)
				break;
			p = colon + 1;
		}
		return 0;
	}
	case CHELL_T_ENUM:
		if (enum_has(d->choices, v))
			return 0;
		set_err(err, errlen, origin, "bad value '%.200s' for setting %s: expected one of %s", v,
			name, d->choices);
		return -1;
	case CHELL_T_BOOL:
		if (parse_bool(v, &b) == 0)
			return 0;
		set_err(err, errlen, origin,
			"bad value '%.200s' for setting %s: expected a boolean (1/0, true/false, "
			"yes/no, on/off)",
			v, name);
		return -1;
	case CHELL_T_UINT:
		r = parse_uint(v, &u);
		if (r == 0)
			return 0;
		set_err(err, errlen, origin, "bad value '%.200s' for setting %s: %s", v, name,
			r == -2 ? "too large (at most 9223372036854775807)"
				: "expected an unsigned decimal integer");
		return -1;
	case CHELL_T_SIZE:
		r = chell_parse_size(v, &u);
		if (r == 0)
			return 0;
		set_err(err, errlen, origin, "bad value '%.200s' for setting %s: %s", v, name,
			r == -2 ? "too large (at most 2^63-1 bytes)"
				: "expected a size such as 4096, 64K, 16M, 2G or 1T");
		return -1;
	case CHELL_T_STACK:
	case CHELL_T_CHECKABLE: {
		struct chell_stack_spec sp;
		char why[256], spec[CHELL_HANDLER_NAME_MAX + 16];
		/* a CHECKABLE names the handler a plain `shadow` stack checks */
		int k = d->type == CHELL_T_CHECKABLE
				? snprintf(spec, sizeof spec, "shadow:%s", v)
				: snprintf(spec, sizeof spec, "%s", v);
		if (k < 0 || (size_t)k >= sizeof spec)
			snprintf(why, sizeof why, "not a handler name");
		else if (chell_stack_spec_parse(spec, (size_t)k, &sp, why, sizeof why) == 0)
			return 0;
		set_err(err, errlen, origin, "bad value '%.200s' for setting %s: %s", v, name, why);
		return -1;
	}
	case CHELL_T_ROUTES:
		return check_routes(v, name, origin, err, errlen);
	case CHELL_T_NUMBER: {
		double x;
		if (chell_parse_number(v, &x) == 0)
			return 0;
		set_err(err, errlen, origin,
			"bad value '%.200s' for setting %s: expected a non-negative decimal number "
			"such as 50, 0.5 or 2.25",
			v, name);
		return -1;
	}
	}
	set_err(err, errlen, origin, "setting %s has an unknown type", name);
	return -1;
}

int chell_config_check(const char *key, const char *value, const char *origin, char *err,
		       size_t errlen)
{
	int i = chell_setting_index(key);
	if (i < 0) {
		unknown_key_err(err, errlen, origin, key);
		return -1;
	}
	return check_value(&chell_setting_defs[i], value, origin, err, errlen);
}

/* ---- the config object ------------------------------------------------- */

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = malloc(n);
	if (p)
		memcpy(p, s, n);
	return p;
}

/* Replace value i and its origin; -1 if out of memory (the old value stays). */
static int set_value(struct chell_config *cfg, int i, const char *value, const char *origin)
{
	char *v = xstrdup(value), *o = xstrdup(origin);
	if (!v || !o) {
		free(v);
		free(o);
		return -1;
	}
	free(cfg->values[i]);
	free(cfg->origins[i]);
	cfg->values[i] = v;
	cfg->origins[i] = o;
	return 0;
}

/* Append entries to a PATHLIST value (file lines accumulate). */
static int append_paths(struct chell_config *cfg, int i, const char *more, const char *origin,
			char *err, size_t errlen)
{
	const char *cur = cfg->values[i];
	/* Appending to the default (or to an env value, which cannot happen: env comes last) */
	if (strncmp(cfg->origins[i], "file:", 5) != 0)
		cur = "";
	size_t a = strlen(cur), b = strlen(more);
	if (a + 1 + b > CFG_PATHLIST_MAX) {
		set_err(err, errlen, origin, "setting %s is too long (at most %d bytes in all)",
			chell_setting_defs[i].key, CFG_PATHLIST_MAX);
		return -1;
	}
	char *v = malloc(a + 1 + b + 1);
	if (!v)
		return -1;
	memcpy(v, cur, a);
	size_t n = a;
	if (a && b)
		v[n++] = ':';
	memcpy(v + n, more, b + 1);
	int r = set_value(cfg, i, v, origin);
	free(v);
	return r;
}

/*
 * Apply one value from a source. An empty value restores the default (so
 * `CHELL_MODE= prog` behaves like an unset variable, and a PATHLIST can be
 * cleared); the origin still records who asked for it.
 */
static int apply(struct chell_config *cfg, int i, const char *value, const char *origin,
		 int append, char *err, size_t errlen)
{
	const struct chell_setting_def *d = &chell_setting_defs[i];
	if (check_value(d, value, origin, err, errlen))
		return -1;
	int r;
	if (!*value)
		r = set_value(cfg, i, d->def, origin);
	else if (append && (d->type == CHELL_T_PATHLIST || d->type == CHELL_T_ROUTES))
		r = append_paths(cfg, i, value, origin, err, errlen);
	else
		r = set_value(cfg, i, value, origin);
	if (r && err && errlen && !*err)
		set_err(err, errlen, origin, "out of memory setting %s", d->key);
	return r;
}

void chell_config_free(struct chell_config *cfg)
{
	if (!cfg)
		return;
	for (int i = 0; i < cfg->count; i++) {
		if (cfg->values)
			free(cfg->values[i]);
		if (cfg->origins)
			free(cfg->origins[i]);
	}
	free(cfg->values);
	free(cfg->origins);
	cfg->values = NULL;
	cfg->origins = NULL;
	cfg->count = 0;
}

/* ---- config file ------------------------------------------------------- */

/* Read a whole file with raw syscalls into a NUL-terminated malloc'd buffer. */
static char *read_file(const char *path, size_t *lenp, char *err, size_t errlen)
{
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0) {
		set_err(err, errlen, NULL, "cannot open config file %s: %s", path, strerror(-fd));
		return NULL;
	}
	struct stat st;
	int r = sys_fstat(fd, &st);
	if (r == 0 && S_ISDIR(st.st_mode)) {
		sys_close(fd);
		set_err(err, errlen, NULL, "cannot read config file %s: %s", path, strerror(EISDIR));
		return NULL;
	}
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	if (!buf) {
		sys_close(fd);
		set_err(err, errlen, NULL, "cannot read config file %s: out of memory", path);
		return NULL;
	}
	for (;;) {
		if (len + 1 == cap) {
			if (cap > CFG_FILE_MAX) {
				set_err(err, errlen, NULL, "config file %s is too large (more than %d bytes)",
					path, CFG_FILE_MAX);
				goto fail;
			}
			char *nb = realloc(buf, cap * 2);
			if (!nb) {
				set_err(err, errlen, NULL, "cannot read config file %s: out of memory",
					path);
				goto fail;
			}
			buf = nb;
			cap *= 2;
		}
		ssize_t n = sys_read(fd, buf + len, cap - 1 - len);
		if (n == -EINTR)
			continue;
		if (n < 0) {
			set_err(err, errlen, NULL, "cannot read config file %s: %s", path,
				strerror((int)-n));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	sys_close(fd);
	buf[len] = '\0';
	*lenp = len;
	return buf;
fail:
	sys_close(fd);
	free(buf);
	return NULL;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Trim in place; returns the new start. */
static char *trim(char *s, char *end)
{
	while (s < end && is_space(*s))
		s++;
	while (end > s && is_space(end[-1]))
		end--;
	*end = '\0';
	return s;
}

/* Does any key start with "<section>."? (catches a misspelled [section] at its own line) */
static int section_known(const char *sec)
{
	size_t n = strlen(sec);
	for (int i = 0; chell_setting_defs[i].key; i++)
		if (strncmp(chell_setting_defs[i].key, sec, n) == 0 &&
		    chell_setting_defs[i].key[n] == '.')
			return 1;
	return 0;
}

static int parse_file(struct chell_config *cfg, const char *path, char *err, size_t errlen)
{
	size_t len;
	char *buf = read_file(path, &len, err, errlen);
	if (!buf)
		return -1;
	if (memchr(buf, '\0', len)) {
		free(buf);
		set_err(err, errlen, NULL, "config file %s is not a text file (it contains NUL bytes)",
			path);
		return -1;
	}
	char *p = buf;
	/* A UTF-8 byte order mark, as some editors write. */
	if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0)
		p += 3;

	char section[64] = "";
	char origin[CFG_VALUE_MAX + 32]; /* "file:<path>:<line>"; truncation is harmless */
	/* Later errors go to a scratch buffer so the first one is what the user sees. */
	char scratch[512];
	int nerr = 0;
	for (int line = 1; *p; line++) {
		char *nl = strchr(p, '\n');
		char *end = nl ? nl : p + strlen(p);
		char *next = nl ? nl + 1 : end;
		char *s = trim(p, end);
		p = next;

		char *e = nerr ? scratch : err;
		size_t elen = nerr ? sizeof scratch : errlen;
		snprintf(origin, sizeof origin, "file:%s:%d", path, line);

		if (*s == '\0' || *s == '#')
			continue;
		if (*s == '[') {
			char *close = strchr(s, ']');
			char *rest = close ? trim(close + 1, close + 1 + strlen(close + 1)) : NULL;
			if (!close || (*rest && *rest != '#')) {
				set_err(e, elen, origin, "malformed section header '%.200s'", s);
				nerr++;
				continue;
			}
			char *name = trim(s + 1, close);
			if (strlen(name) >= sizeof section) {
				set_err(e, elen, origin, "section name '%.200s' is too long", name);
				nerr++;
				section[0] = '\0';
				continue;
			}
			if (*name && !section_known(name)) {
				set_err(e, elen, origin, "unknown section [%s]", name);
				nerr++;
			}
			/* `[]` returns to top-level keys. */
			strcpy(section, name);
			continue;
		}
		char *eq = strchr(s, '=');
		if (!eq) {
			set_err(e, elen, origin, "expected 'key = value', got '%.200s'", s);
			nerr++;
			continue;
		}
		char *key = trim(s, eq);
		char *val = eq + 1;
		while (is_space(*val))
			val++;
		char *after = val; /* where a trailing comment may start */
		int quoted = 0;
		if (*val == '"') {
			/* "value" (as TOML users write it): quotes are removed, '#' inside kept */
			char *q = strchr(val + 1, '"');
			if (!q) {
				set_err(e, elen, origin, "missing closing '\"' in the value");
				nerr++;
				continue;
			}
			*q = '\0';
			val++;
			after = q + 1;
			quoted = 1;
		}
		/*
		 * Comments may follow a value after whitespace ("mode = trace  # why");
		 * a '#' glued to text is part of the value.
		 */
		for (char *h = after; (h = strchr(h, '#')) != NULL; h++) {
			if (h == after || is_space(h[-1])) {
				*h = '\0';
				break;
			}
		}
		if (quoted) {
			if (*trim(after, after + strlen(after))) {
				set_err(e, elen, origin, "unexpected text after the closing '\"'");
				nerr++;
				continue;
			}
		} else {
			val = trim(val, val + strlen(val));
		}
		if (!*key) {
			set_err(e, elen, origin, "missing setting name before '='");
			nerr++;
			continue;
		}
		char full[sizeof section + 128];
		if (strlen(key) > 100) {
			set_err(e, elen, origin, "unknown setting '%.100s...'", key);
			nerr++;
			continue;
		}
		if (section[0])
			snprintf(full, sizeof full, "%s.%s", section, key);
		else
			snprintf(full, sizeof full, "%s", key);
		int i = chell_setting_index(full);
		if (i < 0 && strcmp(full, PATH_ALIAS) == 0)
			i = chell_setting_index("paths");
		if (i < 0) {
			unknown_key_err(e, elen, origin, full);
			nerr++;
			continue;
		}
		if (strlen(val) > CFG_VALUE_MAX) {
			set_err(e, elen, origin, "value for setting %s is too long (%zu bytes, at most %d)",
				chell_setting_defs[i].key, strlen(val), CFG_VALUE_MAX);
			nerr++;
			continue;
		}
		if (apply(cfg, i, val, origin, 1, e, elen))
			nerr++;
	}
	free(buf);
	return nerr ? -1 : 0;
}

/* ---- loading ----------------------------------------------------------- */

/* Value of NAME in envp (the first match, as getenv does), or NULL. */
static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);
	for (; envp && *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

struct names_check {
	const struct chell_config *cfg;
	const struct chell_setting_def *d;
	const char *origin;
	char *err;
	size_t errlen;
};

/* A stack s[0..len) whose top handler is not built in names an external
 * handler: is there such a file? (The syntax was checked when applied.) */
static int stack_external_ok(const char *s, size_t len, void *arg)
{
	struct names_check *nc = arg;
	struct chell_stack_spec sp;
	char why[512], path[4096], name[128];
	if (chell_stack_spec_parse(s, len, &sp, why, sizeof why) ||
	    chell_handler_find(sp.top, strlen(sp.top)) ||
	    chell_handler_locate(nc->cfg, sp.top, path, sizeof path, why, sizeof why) == 0)
		return 0;
	setting_name(name, sizeof name, nc->d, nc->origin);
	set_err(nc->err, nc->errlen, nc->origin, "bad value '%.*s' for setting %s: %s",
		(int)(len > 200 ? 200 : len), s, name, why);
	return -1;
}

static int route_external_ok(const char *e, size_t len, void *arg)
{
	const char *eq = memchr(e, '=', len);
	return eq ? stack_external_ok(eq + 1, len - (size_t)(eq + 1 - e), arg) : 0;
}

int chell_config_load(struct chell_config *cfg, char *const *envp, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!envp)
		envp = environ;
	int n = n_settings();
	cfg->count = 0;
	cfg->values = calloc((size_t)n, sizeof *cfg->values);
	cfg->origins = calloc((size_t)n, sizeof *cfg->origins);
	if (!cfg->values || !cfg->origins)
		goto oom;
	cfg->count = n;
	for (int i = 0; i < n; i++)
		if (set_value(cfg, i, chell_setting_defs[i].def, "default"))
			goto oom;

	int nerr = 0;
	char scratch[512];
	const char *file = env_get(envp, "CHELL_CONFIG");
	if (file && *file && parse_file(cfg, file, err, errlen))
		nerr++;
	for (int i = 0; i < n; i++) {
		const char *v = env_get(envp, chell_setting_defs[i].env);
		if (!v)
			continue;
		char *e = nerr ? scratch : err;
		size_t elen = nerr ? sizeof scratch : errlen;
		if (apply(cfg, i, v, "env", 0, e, elen))
			nerr++;
	}
	/* Handler names that are not built in must be external handlers:
	 * checked once every source is in, since handlers.dir may come last. */
	for (int i = 0; i < n; i++) {
		const struct chell_setting_def *d = &chell_setting_defs[i];
		struct names_check nc = {cfg, d, cfg->origins[i], nerr ? scratch : err,
					 nerr ? sizeof scratch : errlen};
		if ((d->type == CHELL_T_STACK &&
		     stack_external_ok(cfg->values[i], strlen(cfg->values[i]), &nc)) ||
		    (d->type == CHELL_T_ROUTES &&
		     chell_route_entries(cfg->values[i], route_external_ok, &nc))) {
			nerr++;
			/* as for any bad value: not applied */
			if (set_value(cfg, i, d->def, "default"))
				goto oom;
		}
	}
	return nerr ? -1 : 0;
oom:
	chell_config_free(cfg);
	if (err && errlen)
		snprintf(err, errlen, "out of memory loading the configuration");
	return -1;
}

/* ---- lookups ----------------------------------------------------------- */

static int must_index(const struct chell_config *cfg, const char *key)
{
	int i = chell_setting_index(key);
	/* Asking for a key that is not in the table is a bug in the caller. */
	if (i < 0 || i >= cfg->count)
		abort();
	return i;
}

const char *chell_config_str(const struct chell_config *cfg, const char *key)
{
	return cfg->values[must_index(cfg, key)];
}

int chell_config_bool(const struct chell_config *cfg, const char *key)
{
	int i = must_index(cfg, key);
	int b = 0;
	if (chell_setting_defs[i].type != CHELL_T_BOOL)
		abort(); /* the caller's bug: the registry says otherwise */
	const char *v = cfg->values[i];
	/* Values were validated at load; "" (no default) reads as false. */
	if (*v && parse_bool(v, &b))
		abort();
	return b;
}

uint64_t chell_config_u64(const struct chell_config *cfg, const char *key)
{
	int i = must_index(cfg, key);
	const char *v = cfg->values[i];
	uint64_t u = 0;
	if (chell_setting_defs[i].type != CHELL_T_UINT && chell_setting_defs[i].type != CHELL_T_SIZE)
		abort(); /* the caller's bug: the registry says otherwise */
	if (!*v)
		return 0;
	int r = chell_setting_defs[i].type == CHELL_T_SIZE ? chell_parse_size(v, &u) : parse_uint(v, &u);
	if (r)
		abort();
	return u;
}

int chell_parse_number(const char *v, double *out)
{
	/* By hand rather than strtod: the locale may spell the decimal point
	 * ',', and strtod takes signs, exponents, hex, inf and nan. */
	double x = 0, scale = 1;
	bool dot = false, digits = false;
	for (const char *p = v; *p; p++) {
		if (*p == '.' && !dot) {
			dot = true;
		} else if (*p >= '0' && *p <= '9') {
			digits = true;
			if (dot)
				x += (*p - '0') * (scale /= 10);
			else
				x = x * 10 + (*p - '0');
		} else {
			return -1;
		}
	}
	if (!digits || x > 1e15)
		return -1;
	*out = x;
	return 0;
}

double chell_config_num(const struct chell_config *cfg, const char *key)
{
	int i = must_index(cfg, key);
	double x = -1;
	if (chell_setting_defs[i].type != CHELL_T_NUMBER)
		abort(); /* the caller's bug: the registry says otherwise */
	if (*cfg->values[i] && chell_parse_number(cfg->values[i], &x))
		abort(); /* validated at load */
	return x;
}

/*
 * The array and every entry are separate malloc'd blocks, so a caller may
 * replace an entry (the router swaps in a normalized path): release with
 * free() on each entry, then on the array. Empty entries are skipped.
 */
int chell_config_paths(const struct chell_config *cfg, const char *key, char ***out)
{
	const char *v = cfg->values[must_index(cfg, key)];
	int count = 0;
	for (const char *p = v; *p; p++)
		if (*p == ':')
			count++;
	char **arr = calloc((size_t)count + 2, sizeof *arr);
	if (!arr)
		goto oom;
	int k = 0;
	for (const char *p = v; *p;) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		if (n) {
			if (!(arr[k] = malloc(n + 1)))
				goto oom;
			memcpy(arr[k], p, n);
			arr[k++][n] = '\0';
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	arr[k] = NULL;
	*out = arr;
	return k;
oom:
	for (int i = 0; arr && arr[i]; i++)
		free(arr[i]);
	free(arr);
	*out = NULL;
	return -1;
}
