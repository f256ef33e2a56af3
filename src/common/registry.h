/* SPDX-License-Identifier: MIT */
/*
 * The handler registry (registry.def) as data, and the routing rules built
 * from the configuration. Shared by libchell.so (which binds the handler
 * method tables and routes by these rules) and the CLI (which validates,
 * lists and explains them): no code from src/nib or src/handlers here.
 *
 * Like config.c, this runs in the preloaded library's constructor: no stdio
 * streams, raw system calls only, malloc is fine.
 */
#ifndef CHELL_REGISTRY_H
#define CHELL_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

struct chell_config;

struct chell_handler_desc {
	const char *name;      /* "direct": the stack name and the settings' key prefix */
	const char *summary;   /* one line for `chell run --help` and the docs */
	bool shadow_checkable; /* shadow.under_test / shadow:NAME may name it */
	const char *catch_all; /* what its catch-all rule serves (registry.def) */
	const char *own_dir;   /* setting of its own directory, never routed, or NULL */
};
/* Every built-in handler, in registry order; ends with name == NULL. */
extern const struct chell_handler_desc chell_handler_descs[];
int chell_handler_count(void);
/* The built-in handler called name[0..len), or NULL. */
const struct chell_handler_desc *chell_handler_find(const char *name, size_t len);

/* Longest handler name (external ones included). */
#define CHELL_HANDLER_NAME_MAX 31

/*
 * A stack as named in `mode`, `shadow.under_test` or a route: "NAME"
 * (NAME -> posix; posix alone) or "shadow:NAME" (shadow -> NAME -> posix,
 * shadow checking NAME against its posix copy). Plain "shadow" takes
 * shadow.under_test.
 */
struct chell_stack_spec {
	char top[CHELL_HANDLER_NAME_MAX + 1];
	char under[CHELL_HANDLER_NAME_MAX + 1]; /* shadow only: under test ("" = not set) */
};
/* Parse s[0..len); 0, or -1 with what is wrong in err (no setting name). */
int chell_stack_spec_parse(const char *s, size_t len, struct chell_stack_spec *out, char *err,
			   size_t errlen);
/* "direct", "shadow:cache" */
void chell_stack_spec_format(const struct chell_stack_spec *sp, char *buf, size_t len);

/*
 * Find an external handler NAME.so in handlers.dir: 0 and its path in out,
 * or -1 with why not in err (the caller names the setting).
 */
int chell_handler_locate(const struct chell_config *cfg, const char *name, char *out,
			 size_t outlen, char *err, size_t errlen);

/*
 * One routing rule. The rules of a configuration, in the order they are
 * tried: prefixes longest first, then the catch-all (prefix "/" with
 * catch_all set), at most one.
 */
struct chell_route {
	char *prefix;                 /* absolute, lexically normalised */
	size_t len;
	struct chell_stack_spec stack;
	bool catch_all;               /* from `mode` without `paths` */
	bool by_mount;                /* catch-all of direct: only files on tmpfs/DAX mounts */
	const char *from;             /* the setting it comes from: "route", "paths", "mode", "cache.backing" */
};
struct chell_routes {
	struct chell_route *r;
	int n;
	bool any_explicit; /* `route` was set */
};
/*
 * Build the rules of cfg (see the `mode`, `paths` and `route` settings):
 * `route` entries; `mode` for each of `paths`; `mode` as the catch-all when
 * `paths` is empty (with `route` rules: unless mode is posix); a catch-all
 * cache stack becomes one rule per cache.backing directory when that is set.
 * Plain `shadow` stacks get shadow.under_test. 0, or -1 with a message
 * naming the setting. Free with chell_routes_free.
 */
int chell_routes_build(const struct chell_config *cfg, struct chell_routes *out, char *err,
		       size_t errlen);
void chell_routes_free(struct chell_routes *rs);
/* The rule that takes the absolute, normalised path abs (mount types not
 * considered: a by_mount rule matches every path), or NULL. */
const struct chell_route *chell_routes_match(const struct chell_routes *rs, const char *abs);
/* Does any rule's stack use handler `name` (at the top or under test)? */
bool chell_routes_use(const struct chell_routes *rs, const char *name);
/* The own_dir settings of the built-in handlers the rules use, plus
 * shadow.dir always (never routed, as it always was): calls fn(key, arg). */
void chell_routes_own_dirs(const struct chell_routes *rs, void (*fn)(const char *key, void *arg),
			   void *arg);
/* A catch-all stack that would serve nothing (catch_all "none"): its name. */
const char *chell_routes_needs_prefix(const struct chell_routes *rs);
/* Lexical normalisation of an absolute path in place (0, or -1 if relative). */
int chell_path_normalise(char *p);
/* Is abs at or under prefix (of length len)? */
bool chell_path_under(const char *abs, const char *prefix, size_t len);

/* Split a `route` value: calls fn(entry, len, arg) for each PREFIX=STACK
 * entry (entries are separated by a ':' that starts the next absolute
 * prefix, so shadow:NAME needs no quoting). Stops at fn's first non-zero. */
int chell_route_entries(const char *v, int (*fn)(const char *e, size_t len, void *arg), void *arg);

#endif
