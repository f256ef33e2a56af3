/* SPDX-License-Identifier: MIT */
/*
 * Starting chelld from the cache.* settings: the command line of the daemon
 * (`chell cache start` execs it; `chell run --mode cache` starts one when no
 * daemon answers), and finding its executable.
 *
 * Options given explicitly win; the rest come from the configuration (file
 * and environment). The pool, size and backing directories are always
 * passed. The tunables (policy, watermarks, read-ahead)
 * are passed only when the configuration sets them, so the daemon's own
 * defaults - the same values, documented in both places - apply otherwise.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache_launch.h"
#include "common/config.h"
#include "common/registry.h"

/* setting key -> chelld option, for the tunables. */
static const struct {
	const char *key, *opt;
} tunables[] = {
	{"cache.policy", "--policy"},
	{"cache.dirty_high", "--dirty-high"},
	{"cache.dirty_low", "--dirty-low"},
	{"cache.readahead", "--readahead"},
	{"cache.max_fds", "--max-fds"},
	{"cache.mode", "--cache-mode"},
	{"cache.mode_rules", "--mode-rules"},
	{"cache.seq_cutoff", "--seq-cutoff"},
	{"cache.pin_max", "--pin-max"},
	{"cache.file_max", "--file-max"},
};

static int push(struct mgr_argv *a, const char *s)
{
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		char **v = realloc(a->v, cap * sizeof *v);
		if (!v)
			return -1;
		a->v = v;
		a->cap = cap;
	}
	if (!(a->v[a->n] = strdup(s)))
		return -1;
	a->v[++a->n] = NULL;
	return 0;
}

static int push2(struct mgr_argv *a, const char *opt, const char *val)
{
	return push(a, opt) || push(a, val) ? -1 : 0;
}

void mgr_argv_free(struct mgr_argv *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof *a);
}

const char *mgr_tunable_option(const char *key)
{
	for (size_t i = 0; i < sizeof tunables / sizeof tunables[0]; i++)
		if (strcmp(tunables[i].key, key) == 0)
			return tunables[i].opt;
	return NULL;
}

/* The prefixes of the routing rules whose stack uses the cache handler, as
 * chell_config_paths returns a list (the rules were checked by the caller;
 * none if they do not build). */
static int cache_rule_prefixes(const struct chell_config *cfg, char ***out)
{
	struct chell_routes rs;
	char err[256];
	if (chell_routes_build(cfg, &rs, err, sizeof err))
		rs.n = 0;
	int n = 0;
	*out = calloc((size_t)rs.n + 1, sizeof(char *));
	for (int i = 0; *out && i < rs.n; i++) {
		const struct chell_route *r = &rs.r[i];
		if (r->catch_all || (strcmp(r->stack.top, "cache") && strcmp(r->stack.under, "cache")))
			continue;
		if (!((*out)[n++] = strdup(r->prefix))) {
			while (n > 0)
				free((*out)[--n]);
			free(*out);
			*out = NULL;
		}
	}
	chell_routes_free(&rs);
	return *out ? n : -1;
}

int mgr_launch_argv(const struct mgr_launch *o, const struct chell_config *cfg,
		    struct mgr_argv *out)
{
	memset(out, 0, sizeof *out);
	const char *pool = o->pool ? o->pool : chell_config_str(cfg, "cache.pool");
	const char *size = o->size ? o->size : chell_config_str(cfg, "cache.size");
	char **from_cfg = NULL;
	int nb = 0;
	bool fail = push(out, "chelld") || push2(out, "--pool", pool) || push2(out, "--size", size);
	if (o->nbackings) {
		for (int i = 0; i < o->nbackings && !fail; i++)
			fail = push2(out, "--backing", o->backings[i]);
	} else {
		/* cache.backing, else the prefixes of the rules that route to a
		 * cache stack (`paths` of mode cache, `route` PREFIX=cache), else
		 * the files Chell handles (`paths`, for `chell cache start`). */
		nb = chell_config_paths(cfg, "cache.backing", &from_cfg);
		if (nb == 0) {
			free(from_cfg);
			from_cfg = NULL;
			nb = cache_rule_prefixes(cfg, &from_cfg);
		}
		if (nb == 0) {
			free(from_cfg);
			from_cfg = NULL;
			nb = chell_config_paths(cfg, "paths", &from_cfg);
		}
		if (nb < 0) {
			cli_err("out of memory");
			mgr_argv_free(out);
			return -1;
		}
		for (int i = 0; i < nb && !fail; i++)
			fail = push2(out, "--backing", from_cfg[i]);
		for (int i = 0; i < nb; i++)
			free(from_cfg[i]);
		free(from_cfg);
		if (nb == 0 && !fail) {
			cli_err("cache mode needs a backing directory: set cache.backing (or paths), "
				"or give chell cache start --backing DIR");
			mgr_argv_free(out);
			return CLI_EXIT_USAGE;
		}
	}
	for (size_t i = 0; i < sizeof tunables / sizeof tunables[0] && !fail; i++) {
		const char *v = o->tunable[i];
		int k = chell_setting_index(tunables[i].key);
		if (!v && k >= 0 && strcmp(cfg->origins[k], "default") != 0 &&
		    *chell_config_str(cfg, tunables[i].key))
			v = chell_config_str(cfg, tunables[i].key);
		if (v)
			fail = push2(out, tunables[i].opt, v);
	}
	if (!fail && o->socket)
		fail = push2(out, "--socket", o->socket);
	if (!fail && o->foreground)
		fail = push(out, "--foreground");
	if (fail) {
		cli_err("out of memory");
		mgr_argv_free(out);
		return -1;
	}
	return 0;
}

void mgr_find_chelld(char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(buf, len, "%s/chelld", exe);
			if (access(buf, X_OK) == 0)
				return;
		}
	}
	snprintf(buf, len, "chelld"); /* on PATH */
}
