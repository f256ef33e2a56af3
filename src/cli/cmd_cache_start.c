/* SPDX-License-Identifier: MIT */
/*
 * `chell cache start [options]`: exec chelld for a pool. Options not given
 * come from the cache.* settings (config file, CHELL_CACHE_* environment),
 * so `chell cache start` alone starts the daemon `chell run --mode cache`
 * would use. The daemon checks everything itself and its exit status is
 * ours: 0 started, 1 already served or a system error, 2 usage or
 * configuration error.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"
#include "cmd_cache_launch.h"
#include "common/config.h"

extern char **environ;

enum {
	OPT_C_POOL = 700,
	OPT_C_SIZE,
	OPT_C_BACKING,
	OPT_C_SOCKET,
	OPT_C_FOREGROUND,
	OPT_C_CFG,
	OPT_C_TUNABLE, /* + CACHE_T_* */
};

void cache_start_usage(FILE *f)
{
	fputs("Usage: chell cache start [--pool DIR] [--size SIZE] [--backing DIR...]\n"
	      "                         [--policy lru|fifo|blocks|arc]\n"
	      "                         [--dirty-high PCT] [--dirty-low PCT] [--readahead SIZE]\n"
	      "                         [--max-fds N] [--cache-mode MODE] [--mode-rules RULES]\n"
	      "                         [--seq-cutoff SIZE] [--pin-max SIZE] [--file-max SIZE]\n"
	      "                         [--socket PATH] [--foreground] [--config FILE] [-n]\n"
	      "\n"
	      "Start chelld for the pool directory DIR. It runs in the background unless\n"
	      "--foreground; its pid, lock, log and socket files live in DIR. Each option\n"
	      "not given comes from its setting (config file, then environment):\n"
	      "\n"
	      "      --pool DIR              cache.pool: the pool directory (created if it\n"
	      "                              does not exist; must be writable)\n"
	      "      --size SIZE             cache.size: cache size; suffixes K, M, G, T\n"
	      "                              (powers of 1024), at least 2M\n"
	      "      --backing DIR           cache.backing, else paths: a directory whose\n"
	      "                              files may be cached (repeatable)\n"
	      "      --policy lru|fifo|blocks|arc cache.policy: replacement\n"
	      "      --dirty-high PCT        cache.dirty_high: background write-back starts\n"
	      "                              when this percent of chunks are dirty\n"
	      "      --dirty-low PCT         cache.dirty_low: ... and stops at this percent\n"
	      "      --readahead SIZE        cache.readahead: a miss fills at least this much\n"
	      "      --max-fds N             cache.max_fds: descriptors chelld keeps of files\n"
	      "                              no client has open, while they hold dirty data\n"
	      "      --cache-mode MODE       cache.mode: write-back, write-through,\n"
	      "                              write-around, read-only or pass-through\n"
	      "      --mode-rules RULES      cache.mode_rules: DIR=MODE[:DIR=MODE...]\n"
	      "      --seq-cutoff SIZE       cache.seq_cutoff: sequential reads of larger\n"
	      "                              files bypass the cache (0: the capacity)\n"
	      "      --pin-max SIZE          cache.pin_max: bytes 'chell cache pin' may pin\n"
	      "      --file-max SIZE         cache.file_max: larger files are not cached\n"
	      "\n"
	      "Other options:\n"
	      "      --socket PATH   listen here instead of DIR/" CHELLD_SOCK_NAME "\n"
	      "      --foreground    stay in the foreground and log to stderr\n"
	      "      --config FILE   read settings from FILE (as CHELL_CONFIG)\n"
	      "  -n, --dry-run       print the chelld command line; do not start it\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 started, 1 the pool is already served (or a system\n"
	      "error), 2 usage or configuration error (bad size, missing directory).\n",
	      f);
}

static const char *const tunable_keys[CACHE_T_COUNT] = {
	"cache.policy", "cache.dirty_high", "cache.dirty_low",
	"cache.readahead", "cache.max_fds",
	"cache.mode", "cache.mode_rules", "cache.seq_cutoff", "cache.pin_max", "cache.file_max",
};

int cache_start(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"size", required_argument, NULL, OPT_C_SIZE},
		{"backing", required_argument, NULL, OPT_C_BACKING},
		{"socket", required_argument, NULL, OPT_C_SOCKET},
		{"foreground", no_argument, NULL, OPT_C_FOREGROUND},
		{"config", required_argument, NULL, OPT_C_CFG},
		{"policy", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_POLICY},
		{"dirty-high", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_DIRTY_HIGH},
		{"dirty-low", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_DIRTY_LOW},
		{"readahead", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_READAHEAD},
		{"max-fds", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_MAX_FDS},
		{"cache-mode", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_MODE},
		{"mode-rules", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_MODE_RULES},
		{"seq-cutoff", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_SEQ_CUTOFF},
		{"pin-max", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_PIN_MAX},
		{"file-max", required_argument, NULL, OPT_C_TUNABLE + CACHE_T_FILE_MAX},
		{"dry-run", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct mgr_launch o = {0};
	const char *config = NULL;
	bool dry = false;
	int c, ret = CLI_EXIT_USAGE;
	char err[PATH_MAX + 256];
	o.backings = calloc((size_t)argc, sizeof *o.backings);
	if (!o.backings)
		return 1;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:hn", opts, NULL)) != -1) {
		switch (c) {
		case OPT_C_POOL: o.pool = optarg; break;
		case OPT_C_SIZE: o.size = optarg; break;
		case OPT_C_BACKING: o.backings[o.nbackings++] = optarg; break;
		case OPT_C_SOCKET: o.socket = optarg; break;
		case OPT_C_FOREGROUND: o.foreground = true; break;
		case OPT_C_CFG: config = optarg; break;
		case 'n': dry = true; break;
		case 'h': cache_start_usage(stdout); ret = 0; goto out;
		default:
			if (c >= OPT_C_TUNABLE && c < OPT_C_TUNABLE + CACHE_T_COUNT) {
				int t = c - OPT_C_TUNABLE;
				char origin[64];
				snprintf(origin, sizeof origin, "option %s",
					 mgr_tunable_option(tunable_keys[t]));
				/* The setting's own check: the same words as in a config file. */
				if (chell_config_check(tunable_keys[t], optarg, origin, err, sizeof err)) {
					cli_err("%s", err);
					goto out;
				}
				o.tunable[t] = optarg;
				break;
			}
			ret = cli_bad_option("cache start", c, argv, opts);
			goto out;
		}
	}
	if (optind < argc) {
		cli_err("cache start: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("cache start");
		goto out;
	}

	struct cli_env env = {0};
	struct chell_config cfg = {0};
	char *abs = config ? cli_abspath(config) : NULL;
	if (cli_env_init(&env, environ) || (config && (!abs || cli_env_set(&env, "CHELL_CONFIG", abs)))) {
		cli_err("out of memory");
		ret = 1;
	} else if (chell_config_load(&cfg, env.v, err, sizeof err)) {
		cli_err("%s", err);
	} else {
		struct mgr_argv a;
		int r = mgr_launch_argv(&o, &cfg, &a);
		if (r == 0 && dry) {
			for (size_t i = 0; i < a.n; i++) {
				if (i)
					putchar(' ');
				cli_shell_quote(stdout, a.v[i]);
			}
			putchar('\n');
			ret = 0;
		} else if (r == 0 && cli_mkdirs(o.pool ? o.pool : chell_config_str(&cfg, "cache.pool")) < 0) {
			cli_err("cache start: cannot create the pool directory %s: %s",
				o.pool ? o.pool : chell_config_str(&cfg, "cache.pool"), strerror(errno));
		} else if (r == 0) {
			char daemon[PATH_MAX];
			mgr_find_chelld(daemon, sizeof daemon);
			fflush(NULL);
			execvp(daemon, a.v);
			cli_err("cache start: cannot run chelld (not next to chell nor on PATH): %s",
				strerror(errno));
			ret = 1;
		} else {
			ret = r < 0 ? 1 : CLI_EXIT_USAGE;
		}
		if (r == 0)
			mgr_argv_free(&a);
	}
	free(abs);
	chell_config_free(&cfg);
	cli_env_free(&env);
out:
	free(o.backings);
	return ret;
}
