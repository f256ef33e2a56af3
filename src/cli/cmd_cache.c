/* SPDX-License-Identifier: MIT */
/*
 * `chell cache SUBCOMMAND`: the cache manager daemon (chelld) and its pool.
 * Each subcommand lives in its own cmd_cache_<name>.c; shared pieces are in
 * cmd_cache.h.
 */
#include <string.h>

#include "cli.h"
#include "cmd_cache.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} subs[] = {
	{"start", cache_start}, {"status", cache_status}, {"stat", cache_stat},
	{"flush", cache_flush}, {"stop", cache_stop},     {"check", cache_check},
	{"ls", cache_ls},       {"mode", cache_mode},     {"pin", cache_pin},
	{"unpin", cache_unpin},
};

void cmd_cache_usage(FILE *f)
{
	fputs("Usage: chell cache start [--pool DIR] [--size SIZE] [--backing DIR...] [...]\n"
	      "       chell cache status [--pool DIR | --socket PATH] [--json]\n"
	      "       chell cache stat [--pool DIR] [--json]\n"
	      "       chell cache flush [--pool DIR] [--drop] [FILE...]\n"
	      "       chell cache stop [--pool DIR] [--timeout SECONDS]\n"
	      "       chell cache check [--pool DIR] [--json]\n"
	      "       chell cache ls [--json]\n"
	      "       chell cache mode [--pool DIR] [--json] [DIR [MODE]]\n"
	      "       chell cache pin|unpin [--pool DIR] PATH...\n"
	      "\n"
	      "The cache manager daemon (chelld) caches files of backing directories in\n"
	      "a pool directory on the fast tier and serves libchell clients over a Unix\n"
	      "socket (by default DIR/" CHELLD_SOCK_NAME "). Where --pool is optional, DIR\n"
	      "defaults to the cache.pool setting, else to the pool of the only running\n"
	      "chelld (see 'chell cache ls').\n"
	      "\n"
	      "  start    start chelld for a pool (one daemon per pool)\n"
	      "  status   show the daemon's configuration and counters\n"
	      "  stat     cache statistics: occupancy, dirty data, hit ratio, write-back,\n"
	      "           and per cached file\n"
	      "  flush    write dirty data back to the backing files (all, or FILEs)\n"
	      "  stop     stop it gracefully: no new clients, queued requests finish,\n"
	      "           dirty data is written back\n"
	      "  check    verify the pool: through chelld if it runs, else on the files\n"
	      "  ls       list the running managers of this user\n"
	      "  mode     show or switch a directory's cache mode (write-back,\n"
	      "           write-through, write-around, read-only, pass-through)\n"
	      "  pin      keep files or directories in the cache (unpin: no more)\n"
	      "\n"
	      "Run 'chell cache SUBCOMMAND --help' for the options of each.\n",
	      f);
}

int cmd_cache(int argc, char **argv)
{
	if (argc < 2) {
		cmd_cache_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
		cmd_cache_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (strcmp(sub, subs[i].name) == 0)
			return subs[i].run(argc - 1, argv + 1);
	cli_err("cache: unknown subcommand '%s' (start, status, stat, flush, stop, check, ls, mode, pin or unpin)", sub);
	cli_usage_hint("cache");
	return CLI_EXIT_USAGE;
}
