/* SPDX-License-Identifier: MIT */
/*
 * The handler registry and the routing rules (see registry.h, registry.def).
 */
#include "registry.h"
#include "fstype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chell/sys.h"
#include "config.h"

const struct chell_handler_desc chell_handler_descs[] = {
#define CHELL_HANDLER(name, checkable, catch_all, own_dir, summary) \
	{#name, summary, checkable, catch_all, own_dir},
#include "registry.def"
	{NULL, NULL, false, NULL, NULL},
};

int chell_handler_count(void)
{
	int n = 0;
	while (chell_handler_descs[n].name)
		n++;
	return n;
}

const struct chell_handler_desc *chell_handler_find(const char *name, size_t len)
{
	for (const struct chell_handler_desc *d = chell_handler_descs; d->name; d++)
		if (strlen(d->name) == len && strncmp(d->name, name, len) == 0)
			return d;
	return NULL;
}

/* A handler name: [a-z0-9_-], starting with a letter (it is also a file name). */
static int name_ok(const char *s, size_t len)
{
	if (len == 0 || len > CHELL_HANDLER_NAME_MAX || s[0] < 'a' || s[0] > 'z')
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return 0;
	return 1;
}

int chell_stack_spec_parse(const char *s, size_t len, struct chell_stack_spec *out, char *err,
			   size_t errlen)
{
	memset(out, 0, sizeof(*out));
	const char *colon = memchr(s, ':', len);
	size_t tl = colon ? (size_t)(colon - s) : len;
	if (!name_ok(s, tl)) {
		snprintf(err, errlen, "'%.*s' is not a handler name", (int)(tl > 64 ? 64 : tl), s);
		return -1;
	}
	memcpy(out->top, s, tl);
	if (!colon)
		return 0;
	const char *u = colon + 1;
	size_t ul = len - tl - 1;
	if (strcmp(out->top, "shadow") != 0) {
		snprintf(err, errlen, "'%.*s': only shadow takes a handler under test (shadow:NAME)",
			 (int)(len > 64 ? 64 : len), s);
		return -1;
	}
	const struct chell_handler_desc *d = chell_handler_find(u, ul);
	if (!d || !d->shadow_checkable) {
		char list[256] = "";
		for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++)
			if (h->shadow_checkable)
				snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
					 list[0] ? ", " : "", h->name);
		snprintf(err, errlen, "shadow cannot check '%.*s': it checks one of %s",
			 (int)(ul > 64 ? 64 : ul), u, list);
		return -1;
	}
	memcpy(out->under, u, ul);
	return 0;
}

void chell_stack_spec_format(const struct chell_stack_spec *sp, char *buf, size_t len)
{
	if (sp->under[0])
		snprintf(buf, len, "%s:%s", sp->top, sp->under);
	else
		snprintf(buf, len, "%s", sp->top);
}

int chell_handler_locate(const struct chell_config *cfg, const char *name, char *out,
			 size_t outlen, char *err, size_t errlen)
{
	char **dirs = NULL;
	int n = chell_config_paths(cfg, "handlers.dir", &dirs);
	int found = -1;
	for (int i = 0; i < n && found < 0; i++) {
		int k = snprintf(out, outlen, "%s/%s.so", dirs[i], name);
		if (k < 0 || (size_t)k >= outlen)
			continue;
		struct stat st;
		if (sys_fstatat(AT_FDCWD, out, &st, 0) == 0 && S_ISREG(st.st_mode))
			found = 0;
	}
	for (int i = 0; i < n; i++)
		free(dirs[i]);
	free(dirs);
	if (found == 0)
		return 0;
	char list[256] = "";
	for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", list[0] ? ", " : "",
			 h->name);
	if (n <= 0)
		snprintf(err, errlen,
			 "'%s' is not a built-in handler (%s), and handlers.dir is empty so no "
			 "external handler %s.so can be found",
			 name, list, name);
	else
		snprintf(err, errlen,
			 "'%s' is not a built-in handler (%s), and no directory of handlers.dir "
			 "(%.200s) has %s.so",
			 name, list, chell_config_str(cfg, "handlers.dir"), name);
	return -1;
}

/* ---- routes --------------------------------------------------------------- */

bool chell_path_under(const char *abs, const char *prefix, size_t len)
{
	if (len == 1 && prefix[0] == '/')
		return true;
	return strncmp(abs, prefix, len) == 0 && (abs[len] == '/' || abs[len] == 0);
}

int chell_route_entries(const char *v, int (*fn)(const char *e, size_t len, void *arg), void *arg)
{
	const char *p = v;
	while (*p) {
		const char *end = p;
		while (*end && !(end[0] == ':' && end[1] == '/'))
			end++;
		if (end > p) {
			int r = fn(p, (size_t)(end - p), arg);
			if (r)
				return r;
		}
		p = *end ? end + 1 : end;
	}
	return 0;
}

/* Lexical normalisation as the router does it (collapse "//", resolve "."
 * and ".."; symlinks are not followed). p must be absolute. */
static void normalise(char *p)
{
	char *out = p, *in = p;
	while (*in) {
		while (*in == '/')
			in++;
		if (!*in)
			break;
		char *seg = in;
		while (*in && *in != '/')
			in++;
		size_t len = (size_t)(in - seg);
		if (len == 1 && seg[0] == '.')
			continue;
		if (len == 2 && seg[0] == '.' && seg[1] == '.') {
			while (out > p && *--out != '/')
				;
			continue;
		}
		*out++ = '/';
		memmove(out, seg, len);
		out += len;
	}
	if (out == p)
		*out++ = '/';
	*out = 0;
}

int chell_path_normalise(char *p)
{
	if (p[0] != '/')
		return -1;
	normalise(p);
	return 0;
}

/* The registry's catch_all of a stack: its handler's, the checked one's
 * for shadow:NAME; "" (every file) for an external handler. */
static const char *catch_all_policy(const struct chell_stack_spec *sp)
{
	const char *name = sp->under[0] ? sp->under : sp->top;
	const struct chell_handler_desc *d = chell_handler_find(name, strlen(name));
	return d ? d->catch_all : "";
}

struct build {
	const struct chell_config *cfg;
	struct chell_routes *rs;
	int cap;
	const char *from;
	char *err;
	size_t errlen;
};

static int add_rule(struct build *b, const char *prefix, size_t plen,
		    const struct chell_stack_spec *sp, bool catch_all)
{
	struct chell_routes *rs = b->rs;
	char *p = malloc(plen + 1);
	if (!p)
		goto oom;
	memcpy(p, prefix, plen);
	p[plen] = 0;
	normalise(p);
	size_t len = strlen(p);
	for (int i = 0; i < rs->n; i++) {
		if (rs->r[i].catch_all != catch_all || strcmp(rs->r[i].prefix, p) != 0)
			continue;
		char a[80], c[80];
		chell_stack_spec_format(&rs->r[i].stack, a, sizeof a);
		chell_stack_spec_format(sp, c, sizeof c);
		free(p);
		if (strcmp(a, c) == 0)
			return 0; /* the same rule twice */
		snprintf(b->err, b->errlen, "setting %s: %s is routed to both %s (%s) and %s", b->from,
			 catch_all ? "every file" : rs->r[i].prefix, a, rs->r[i].from, c);
		return -1;
	}
	if (rs->n == b->cap) {
		int cap = b->cap ? b->cap * 2 : 8;
		struct chell_route *nr = realloc(rs->r, sizeof(*nr) * (size_t)cap);
		if (!nr)
			goto oom;
		rs->r = nr;
		b->cap = cap;
	}
	struct chell_route *r = &rs->r[rs->n++];
	memset(r, 0, sizeof(*r));
	r->prefix = p;
	r->len = len;
	r->stack = *sp;
	r->catch_all = catch_all;
	r->by_mount = catch_all && strcmp(catch_all_policy(sp), "fast") == 0;
	r->from = b->from;
	return 0;
oom:
	free(p);
	snprintf(b->err, b->errlen, "out of memory building the routing rules");
	return -1;
}

/* Parse a stack spec of setting `key`, give plain shadow its under_test, and
 * find external handlers. */
static int spec_of(struct build *b, const char *key, const char *s, size_t len,
		   struct chell_stack_spec *sp)
{
	char why[256];
	if (chell_stack_spec_parse(s, len, sp, why, sizeof why)) {
		snprintf(b->err, b->errlen, "setting %s: %s", key, why);
		return -1;
	}
	if (strcmp(sp->top, "shadow") == 0 && !sp->under[0]) {
		const char *ut = chell_config_str(b->cfg, "shadow.under_test");
		snprintf(sp->under, sizeof sp->under, "%s", ut);
	}
	if (strcmp(sp->under, "posix") == 0)
		sp->under[0] = 0; /* shadow -> posix */
	if (!chell_handler_find(sp->top, strlen(sp->top))) {
		char path[4096];
		if (chell_handler_locate(b->cfg, sp->top, path, sizeof path, why, sizeof why)) {
			snprintf(b->err, b->errlen, "setting %s: %s", key, why);
			return -1;
		}
	}
	return 0;
}

static int route_entry(const char *e, size_t len, void *arg)
{
	struct build *b = arg;
	const char *eq = memchr(e, '=', len);
	if (!eq || eq == e || e[0] != '/') {
		snprintf(b->err, b->errlen,
			 "setting route: '%.*s' is not PREFIX=STACK with an absolute PREFIX",
			 (int)(len > 200 ? 200 : len), e);
		return -1;
	}
	struct chell_stack_spec sp;
	if (spec_of(b, "route", eq + 1, len - (size_t)(eq + 1 - e), &sp))
		return -1;
	return add_rule(b, e, (size_t)(eq - e), &sp, false);
}

/* One rule with stack sp per entry of the PATHLIST setting `key`: how many,
 * or -1 with a message. */
static int add_list_rules(struct build *b, const char *key, const struct chell_stack_spec *sp)
{
	char **list = NULL;
	int n = chell_config_paths(b->cfg, key, &list);
	if (n < 0) {
		snprintf(b->err, b->errlen, "out of memory building the routing rules");
		return -1;
	}
	int r = 0;
	b->from = key;
	for (int i = 0; i < n && r == 0; i++)
		r = add_rule(b, list[i], strlen(list[i]), sp, false);
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	return r ? -1 : n;
}

static int cmp_rule(const void *a, const void *b)
{
	const struct chell_route *x = a, *y = b;
	if (x->catch_all != y->catch_all)
		return x->catch_all ? 1 : -1;
	return x->len < y->len ? 1 : x->len > y->len ? -1 : strcmp(x->prefix, y->prefix);
}

/*
 * A handler that serves files from mappings of the files themselves (its
 * catch-all serves "fast" mounts: direct, warp) needs them on the
 * node-local fast tier. A prefix on a distributed file system would make
 * it map the distributed store itself: refused, saying what to do instead
 * (issue 13). Catch-all rules need no check: they serve fast mounts only.
 */
static int fast_tier_rules_local(const struct chell_routes *rs, char *err, size_t errlen)
{
	for (int i = 0; i < rs->n; i++) {
		const struct chell_route *r = &rs->r[i];
		char type[128] = "";
		if (r->catch_all || strcmp(catch_all_policy(&r->stack), "fast") != 0 ||
		    chell_fs_remote(r->prefix, type, sizeof type) != 1)
			continue;
		snprintf(err, errlen,
			 "setting %s: %s is on %s, a distributed file system, but mode %s maps the "
			 "files themselves, which must be on the node-local fast tier (tmpfs or DAX); "
			 "to accelerate a distributed store use --mode cache with the pool on tmpfs "
			 "and --set cache.backing=%s",
			 r->from, r->prefix, type, r->stack.top, r->prefix);
		return -1;
	}
	return 0;
}

int chell_routes_build(const struct chell_config *cfg, struct chell_routes *out, char *err,
		       size_t errlen)
{
	memset(out, 0, sizeof(*out));
	struct build b = {cfg, out, 0, "route", err, errlen};
	const char *routes = chell_config_str(cfg, "route");
	out->any_explicit = routes[0] != 0;
	if (chell_route_entries(routes, route_entry, &b))
		goto fail;

	b.from = "mode";
	struct chell_stack_spec mode;
	const char *m = chell_config_str(cfg, "mode");
	if (spec_of(&b, "mode", m, strlen(m), &mode))
		goto fail;
	int np = add_list_rules(&b, "paths", &mode);
	if (np < 0)
		goto fail;
	if (np == 0 && !(out->any_explicit && strcmp(mode.top, "posix") == 0)) {
		/* The catch-all: what the registry says the handler serves then
		 * (cache: the backing directories when they are configured, else
		 * every file, the handler asking chelld for each). */
		const char *policy = catch_all_policy(&mode);
		bool dirs = *policy && strcmp(policy, "fast") && strcmp(policy, "none");
		int nb = dirs ? add_list_rules(&b, policy, &mode) : 0;
		if (nb < 0)
			goto fail;
		b.from = "mode";
		if (nb == 0 && add_rule(&b, "/", 1, &mode, true))
			goto fail;
	}
	qsort(out->r, (size_t)out->n, sizeof(*out->r), cmp_rule);
	if (fast_tier_rules_local(out, err, errlen))
		goto fail;
	return 0;
fail:
	chell_routes_free(out);
	return -1;
}

void chell_routes_free(struct chell_routes *rs)
{
	for (int i = 0; i < rs->n; i++)
		free(rs->r[i].prefix);
	free(rs->r);
	rs->r = NULL;
	rs->n = 0;
}

const struct chell_route *chell_routes_match(const struct chell_routes *rs, const char *abs)
{
	for (int i = 0; i < rs->n; i++)
		if (chell_path_under(abs, rs->r[i].prefix, rs->r[i].len))
			return &rs->r[i];
	return NULL;
}

bool chell_routes_use(const struct chell_routes *rs, const char *name)
{
	for (int i = 0; i < rs->n; i++)
		if (strcmp(rs->r[i].stack.top, name) == 0 || strcmp(rs->r[i].stack.under, name) == 0)
			return true;
	return false;
}

void chell_routes_own_dirs(const struct chell_routes *rs, void (*fn)(const char *key, void *arg),
			   void *arg)
{
	fn("shadow.dir", arg);
	for (const struct chell_handler_desc *d = chell_handler_descs; d->name; d++)
		if (d->own_dir && strcmp(d->own_dir, "shadow.dir") && chell_routes_use(rs, d->name))
			fn(d->own_dir, arg);
}

const char *chell_routes_needs_prefix(const struct chell_routes *rs)
{
	for (int i = 0; i < rs->n; i++) {
		const struct chell_handler_desc *d =
			chell_handler_find(rs->r[i].stack.top, strlen(rs->r[i].stack.top));
		if (rs->r[i].catch_all && d && strcmp(d->catch_all, "none") == 0)
			return d->name;
	}
	return NULL;
}
