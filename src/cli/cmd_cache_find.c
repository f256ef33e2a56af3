/* SPDX-License-Identifier: MIT */
/*
 * Finding a cache manager without being told its pool (chelld/mgr_registry.h), and
 * `chell cache ls [--json]`, which lists the running ones.
 *
 * The rule, for every command that needs a pool and got none:
 *   - cache.pool set (config file, environment, option): that pool, always;
 *   - else the default pool if a chelld serves it;
 *   - else the one pool a running chelld of this user serves;
 *   - several: refuse, naming them, rather than guess;
 *   - none: the default pool (chell run then starts a manager there).
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "chelld/mgr_registry.h"
#include "cli.h"
#include "cmd_cache.h"
#include "common/config.h"

int mgr_find_pool(const char *pool, bool pool_set, char *out, size_t len)
{
	snprintf(out, len, "%s", pool);
	if (pool_set || mgr_serves_pool(pool))
		return MGR_POOL_GIVEN;
	struct mgr_entry *e;
	size_t n, live = 0, pick = 0;
	if (mgr_registry_list(&e, &n) < 0)
		return MGR_POOL_GIVEN; /* no registry: the default, as before */
	for (size_t i = 0; i < n; i++)
		if (e[i].live)
			pick = i, live++;
	int ret = MGR_POOL_GIVEN;
	if (live == 1) {
		snprintf(out, len, "%s", e[pick].pool);
		ret = MGR_POOL_FOUND;
	} else if (live > 1) {
		cli_err("cache.pool is not set, nothing serves its default %s, and %zu cache "
			"managers run; choose one with --pool DIR (or cache.pool):",
			pool, live);
		for (size_t i = 0; i < n; i++)
			if (e[i].live)
				fprintf(stderr, "  %s (pid %ld)\n", e[i].pool, e[i].pid);
		ret = -1;
	}
	free(e);
	return ret;
}

const char *pool_dir_default(const char *given)
{
	static char pool[PATH_MAX];
	if (given)
		return given;
	struct chell_config cfg = {0};
	char err[4096 + 256], def[PATH_MAX];
	if (chell_config_load(&cfg, NULL, err, sizeof err)) {
		cli_err("%s", err);
		chell_config_free(&cfg);
		return NULL;
	}
	snprintf(def, sizeof def, "%s", chell_config_str(&cfg, "cache.pool"));
	bool set = cli_setting_given(&cfg, "cache.pool");
	chell_config_free(&cfg);
	return mgr_find_pool(def, set, pool, sizeof pool) < 0 ? NULL : pool;
}

/* ---- chell cache ls ---- */

enum { OPT_L_JSON = 700, OPT_L_ALL };

void cache_ls_usage(FILE *f)
{
	fputs("Usage: chell cache ls [--json] [--all]\n"
	      "\n"
	      "List the cache managers (chelld) this user runs: pid, pool and socket, from\n"
	      "the registry each daemon joins when it starts ($XDG_RUNTIME_DIR/chell/managers,\n"
	      "else /tmp/chell-UID/managers). Entries of daemons that died without leaving\n"
	      "it (killed) are removed. Commands given no --pool and no cache.pool use the\n"
	      "only running manager.\n"
	      "\n"
	      "Options:\n"
	      "      --json   print one JSON object\n"
	      "      --all    also show the stale entries before removing them\n"
	      "  -h, --help   show this help\n"
	      "\n"
	      "Exit status: 0 at least one manager runs, 1 none, 2 usage error.\n",
	      f);
}

int cache_ls(int argc, char **argv)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, OPT_L_JSON},
		{"all", no_argument, NULL, OPT_L_ALL},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	bool json = false, all = false;
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_L_JSON: json = true; break;
		case OPT_L_ALL: all = true; break;
		case 'h': cache_ls_usage(stdout); return 0;
		default: return cli_bad_option("cache ls", c, argv, opts);
		}
	}
	if (optind < argc) {
		cli_err("cache ls: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("cache ls");
		return CLI_EXIT_USAGE;
	}
	char dir[PATH_MAX];
	int r = mgr_registry_dir(dir, sizeof dir);
	struct mgr_entry *e = NULL;
	size_t n = 0, live = 0;
	if (r == 0)
		r = mgr_registry_list(&e, &n);
	if (r < 0) {
		cli_err("cache ls: cannot read the registry of running managers%s%s: %s",
			dir[0] && r != -ENAMETOOLONG ? " " : "", r != -ENAMETOOLONG ? dir : "",
			r == -EPERM ? "not a directory of this user" : strerror(-r));
		return 1;
	}
	if (json)
		printf("{\"registry\": "), cli_json_str(stdout, dir), printf(", \"managers\": [");
	else if (n)
		printf("%-8s %-6s %-40s %s\n", "PID", "STATE", "POOL", "SOCKET");
	bool first = true;
	for (size_t i = 0; i < n; i++) {
		live += e[i].live;
		if (!e[i].live)
			mgr_registry_remove(e[i].pid);
		if (!e[i].live && !all)
			continue;
		if (json) {
			printf("%s{\"pid\": %ld, \"live\": %s, \"pool\": ", first ? "" : ", ", e[i].pid,
			       e[i].live ? "true" : "false");
			cli_json_str(stdout, e[i].pool);
			printf(", \"socket\": ");
			cli_json_str(stdout, e[i].sock);
			printf("}");
		} else {
			printf("%-8ld %-6s %-40s %s\n", e[i].pid, e[i].live ? "live" : "stale",
			       e[i].pool, e[i].sock);
		}
		first = false;
	}
	if (json)
		printf("]}\n");
	else if (!live)
		printf("no cache manager runs (registry %s)\n", dir);
	free(e);
	return live ? 0 : CACHE_EXIT_DOWN;
}
