/* SPDX-License-Identifier: MIT */
/*
 * Options that set configuration values (--mode, --path, --set key=value...).
 * `run` and `config` share them, so `chell config` with the same options shows
 * exactly what `chell run` would give the program. Values are checked against
 * the schema as they are parsed, and exported as the settings' environment
 * variables: the command line overrides the environment, which overrides the
 * config file.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/config.h"
#include "common/registry.h"

void cli_handler_list(FILE *f, const char *conj, int checkable)
{
	int n = 0, k = 0;
	for (const struct chell_handler_desc *d = chell_handler_descs; d->name; d++)
		n += !checkable || d->shadow_checkable;
	for (const struct chell_handler_desc *d = chell_handler_descs; d->name; d++) {
		if (checkable && !d->shadow_checkable)
			continue;
		fprintf(f, "%s%s", k == 0 ? "" : k == n - 1 ? conj : ", ", d->name);
		k++;
	}
}

void cli_setting_options_usage(FILE *f)
{
	fputs("      --mode STACK         ", f);
	cli_handler_list(f, ", ", 0);
	fputs(", shadow:NAME,\n"
	      "                           or an external handler from handlers.dir (CHELL_MODE)\n"
	      "      --path PREFIX        handle only files under PREFIX; repeatable (CHELL_PATHS)\n"
	      "      --route PREFIX=STACK files under PREFIX use STACK (as for --mode); repeatable,\n"
	      "                           the longest prefix wins (CHELL_ROUTE)\n"
	      "      --config FILE        read settings from FILE (CHELL_CONFIG)\n"
	      "      --trace-file FILE    trace log, '%p' = pid; default stderr (CHELL_TRACE_FILE)\n"
	      "      --shadow-dir DIR     where shadow copies and reports go (CHELL_SHADOW_DIR)\n"
	      "      --shadow-under-test NAME\n"
	      "                           what a plain shadow stack checks: ",
	      f);
	cli_handler_list(f, " or ", 1);
	fputs("\n                           (CHELL_SHADOW_UNDER_TEST)\n"
	      "      --set KEY=VALUE      any setting by key; repeatable (see 'chell config --keys')\n"
	      "  Relative paths given here are made absolute against the current directory.\n",
	      f);
}

int cli_settings_init(struct cli_settings *s)
{
	int n = 0;
	while (chell_setting_defs[n].key)
		n++;
	s->config_file = NULL;
	s->count = n;
	s->values = calloc((size_t)n, sizeof *s->values);
	s->flags = calloc((size_t)n, sizeof *s->flags);
	return s->values && s->flags ? 0 : -1;
}

void cli_settings_free(struct cli_settings *s)
{
	for (int i = 0; i < s->count; i++) {
		free(s->values[i]);
		free(s->flags[i]);
	}
	free(s->values);
	free(s->flags);
	free(s->config_file);
	s->values = s->flags = NULL;
	s->config_file = NULL;
}

/* PATH and PATHLIST values (and route prefixes) from the command line
 * become absolute (see help). */
static char *absolutize(enum chell_setting_type t, const char *v)
{
	if (t == CHELL_T_PATH)
		return cli_abspath(v);
	if (t == CHELL_T_ROUTES && v[0] && v[0] != '/' && strchr(v, '=')) {
		/* one relative PREFIX=STACK, as --route gives it */
		const char *eq = strchr(v, '=');
		char *one = strndup(v, (size_t)(eq - v));
		char *abs = one ? cli_abspath(one) : NULL;
		free(one);
		char *out = NULL;
		if (abs && asprintf(&out, "%s%s", abs, eq) < 0)
			out = NULL;
		free(abs);
		return out;
	}
	if (t != CHELL_T_PATHLIST)
		return strdup(v);
	size_t cap = strlen(v) + 1, len = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	out[0] = '\0';
	const char *p = v;
	for (;;) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		if (n) {
			char *one = strndup(p, n);
			char *abs = one ? cli_abspath(one) : NULL;
			free(one);
			if (!abs) {
				free(out);
				return NULL;
			}
			size_t need = len + 1 + strlen(abs) + 1;
			if (need > cap) {
				char *no = realloc(out, need);
				if (!no) {
					free(abs);
					free(out);
					return NULL;
				}
				out = no;
				cap = need;
			}
			len += (size_t)sprintf(out + len, "%s%s", len ? ":" : "", abs);
			free(abs);
		}
		if (!colon)
			break;
		p = colon + 1;
	}
	return out;
}

static int set_one(struct cli_settings *s, const char *key, const char *value, const char *flag)
{
	char err[512];
	char origin[64];
	snprintf(origin, sizeof origin, "option %s", flag);
	int i = chell_setting_index(key);
	if (i < 0) {
		chell_config_check(key, value, origin, err, sizeof err);
		cli_err("%s", err);
		return -1;
	}
	const struct chell_setting_def *d = &chell_setting_defs[i];
	char *v = absolutize(d->type, value);
	if (!v) {
		cli_err("out of memory");
		return -1;
	}
	if (chell_config_check(key, v, origin, err, sizeof err)) {
		cli_err("%s", err);
		free(v);
		return -1;
	}
	/* Repeated --path, --route (or --set paths=...) append, as repeated
	 * lines in a file do. */
	if ((d->type == CHELL_T_PATHLIST || d->type == CHELL_T_ROUTES) && s->values[i] &&
	    *s->values[i] && *v) {
		size_t n = strlen(s->values[i]) + 1 + strlen(v) + 1;
		char *joined = malloc(n);
		if (!joined) {
			free(v);
			cli_err("out of memory");
			return -1;
		}
		snprintf(joined, n, "%s:%s", s->values[i], v);
		free(v);
		v = joined;
		if (chell_config_check(key, v, origin, err, sizeof err)) {
			cli_err("%s", err);
			free(v);
			return -1;
		}
	}
	free(s->values[i]);
	free(s->flags[i]);
	s->values[i] = v;
	s->flags[i] = strdup(origin);
	return 0;
}

int cli_settings_option(struct cli_settings *s, int code, const char *arg)
{
	switch (code) {
	case OPT_MODE: return set_one(s, "mode", arg, "--mode") ? -1 : 1;
	case OPT_PATH:
		if (!*arg) {
			cli_err("option --path needs a non-empty prefix");
			return -1;
		}
		return set_one(s, "paths", arg, "--path") ? -1 : 1;
	case OPT_ROUTE:
		if (!strchr(arg, '=')) {
			cli_err("option --route needs PREFIX=STACK, got '%s'", arg);
			return -1;
		}
		return set_one(s, "route", arg, "--route") ? -1 : 1;
	case OPT_TRACE_FILE: return set_one(s, "trace.file", arg, "--trace-file") ? -1 : 1;
	case OPT_SHADOW_DIR: return set_one(s, "shadow.dir", arg, "--shadow-dir") ? -1 : 1;
	case OPT_SHADOW_UNDER_TEST:
		return set_one(s, "shadow.under_test", arg, "--shadow-under-test") ? -1 : 1;
	case OPT_SET: {
		const char *eq = strchr(arg, '=');
		if (!eq || eq == arg) {
			cli_err("option --set needs KEY=VALUE, got '%s'", arg);
			return -1;
		}
		char *key = strndup(arg, (size_t)(eq - arg));
		if (!key) {
			cli_err("out of memory");
			return -1;
		}
		/* --set path=X reads like the file's `path = X`; accept it the same way. */
		int r = set_one(s, strcmp(key, "path") == 0 ? "paths" : key, eq + 1, "--set");
		free(key);
		return r ? -1 : 1;
	}
	case OPT_CONFIG:
		if (!*arg) {
			cli_err("option --config needs a file name");
			return -1;
		}
		free(s->config_file);
		/* Absolute, so the program finds it even after it changes directory. */
		s->config_file = cli_abspath(arg);
		if (!s->config_file) {
			cli_err("out of memory");
			return -1;
		}
		return 1;
	}
	return 0;
}

int cli_settings_export(const struct cli_settings *s, struct cli_env *env)
{
	if (s->config_file && cli_env_set(env, "CHELL_CONFIG", s->config_file))
		return -1;
	for (int i = 0; i < s->count; i++)
		if (s->values[i] && cli_env_set(env, chell_setting_defs[i].env, s->values[i]))
			return -1;
	return 0;
}

void cli_settings_name_options(const struct cli_settings *s, char *msg, size_t len)
{
	for (int i = 0; i < s->count; i++) {
		if (!s->values[i] || !s->flags[i])
			continue;
		/* "(CHELL_MODE)" -> "(option --mode)": the variable is ours, not the user's */
		char var[80];
		snprintf(var, sizeof var, "(%s)", chell_setting_defs[i].env);
		char *at = strstr(msg, var);
		size_t vl = strlen(var), fl = strlen(s->flags[i]) + 2;
		if (!at || strlen(msg) - vl + fl >= len)
			continue;
		memmove(at + fl, at + vl, strlen(at + vl) + 1);
		at[0] = '(';
		memcpy(at + 1, s->flags[i], fl - 2);
		at[fl - 1] = ')';
	}
}

const char *cli_setting_str(const char *key, char *buf, size_t len)
{
	struct chell_config cfg = {0};
	char err[4096 + 256];
	if (chell_config_load(&cfg, NULL, err, sizeof err)) {
		cli_err("%s", err);
		chell_config_free(&cfg);
		return NULL;
	}
	snprintf(buf, len, "%s", chell_config_str(&cfg, key));
	chell_config_free(&cfg);
	return buf;
}

bool cli_setting_given(const struct chell_config *cfg, const char *key)
{
	int i = chell_setting_index(key);
	return i >= 0 && i < cfg->count && strcmp(cfg->origins[i], "default") != 0;
}
