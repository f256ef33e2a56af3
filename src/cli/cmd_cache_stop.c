/* SPDX-License-Identifier: MIT */
/*
 * `chell cache stop [--pool DIR] [--timeout SECONDS] [--quiet]`: stop the
 * daemon of a pool and wait until it has exited (released the pool lock,
 * which it holds for its whole life).
 *
 * A daemon writes its dirty data back before it exits, which can take long
 * on slow storage. So when there is much of it, we first ask for that
 * write-back ourselves (FLUSH of every file) and show its progress, then
 * send SIGTERM: what the daemon still has to do after the signal is what
 * was written meanwhile. A daemon that refuses the flush (not our daemon's
 * user, or an older protocol) is just stopped.
 * Exit: 0 stopped, 1 not running or still running at the timeout, 2 usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cli.h"
#include "cmd_cache.h"

enum { OPT_C_POOL = 700, OPT_C_TIMEOUT };

/* Below this much dirty data the daemon's own write-back at exit is quick. */
#define STOP_FLUSH_MIN (16ull << 20)

void cache_stop_usage(FILE *f)
{
	fputs("Usage: chell cache stop [--pool DIR] [--timeout SECONDS] [--quiet]\n"
	      "\n"
	      "Stop the chelld serving DIR: it stops accepting clients, serves the\n"
	      "requests already sent, writes dirty data back, removes its socket and\n"
	      "pid file and exits. With more than 16 MiB of dirty data, the write-back\n"
	      "is asked for first and its progress shown (as by 'chell cache flush').\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR          the daemon's pool directory (default: cache.pool)\n"
	      "      --timeout SECONDS   give up waiting for the exit after this long\n"
	      "                          (default 30; the write-back before is not counted)\n"
	      "  -q, --quiet             no progress display\n"
	      "  -h, --help              show this help\n"
	      "\n"
	      "Exit status: 0 stopped, 1 not running or still running at the timeout,\n"
	      "2 usage error.\n",
	      f);
}

struct stop_watch {
	struct progress_bar *pg;
	uint64_t dirty0;
};

static void on_tick(void *arg, uint64_t dirty, double secs)
{
	struct stop_watch *w = arg;
	char text[128], rem[48] = "?";
	/* Until the monitor's first answer, what there was at the start. */
	if (dirty == UINT64_MAX)
		dirty = w->dirty0;
	{
		FILE *m = fmemopen(rem, sizeof rem, "w");
		if (m) {
			print_size_iec(m, dirty);
			fclose(m);
		}
	}
	snprintf(text, sizeof text, "writing back before the stop: %s dirty (%.0f s)", rem, secs);
	progress_bar_show(w->pg, dirty > w->dirty0 ? 0 : w->dirty0 - dirty, w->dirty0, text);
}

/* Write back first if there is much to write; never fails the stop. */
static void flush_first(const char *pool, struct progress_bar *pg)
{
	char sock[PATH_MAX];
	mgr_sock_path(pool, NULL, sock, sizeof sock);
	struct mgr_conn cn;
	struct chelld_stats_reply st;
	if (mgr_connect(&cn, sock) < 0)
		return;
	if (mgr_get_stats(&cn, &st) < 0 || st.dirty_blocks * CACHE_BLOCK_BYTES < STOP_FLUSH_MIN) {
		mgr_disconnect(&cn);
		return;
	}
	struct stop_watch w = {pg, st.dirty_blocks * CACHE_BLOCK_BYTES};
	progress_bar_note(pg, "chelld has %" PRIu64 " MiB of dirty data: writing it back first",
			  w.dirty0 >> 20);
	struct chelld_flush q = {.file_id = CHELLD_ALL_FILES};
	struct chelld_flush_reply r;
	bool answered;
	double t0 = now_monotonic();
	int rc = mgr_call_watch(&cn, &q, sizeof q, CHELLD_MSG_FLUSH, &r, sizeof r, -1, &answered,
				on_tick, &w);
	int e = errno;
	progress_bar_done(pg);
	if (rc == 0)
		progress_bar_note(pg, "wrote back %" PRIu64 " MiB (%u file%s) in %.1f s",
				  r.bytes_written >> 20, r.files, r.files == 1 ? "" : "s",
				    now_monotonic() - t0);
	else
		progress_bar_note(pg, "chelld did not write back first (%s); it will as it stops",
				  answered ? chelld_errname(e) : strerror(e));
	mgr_disconnect(&cn);
}

int cache_stop(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"timeout", required_argument, NULL, OPT_C_TIMEOUT},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *pool = NULL;
	double timeout = 30;
	bool quiet = false;
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:hq", opts, NULL)) != -1) {
		switch (c) {
		case OPT_C_POOL: pool = optarg; break;
		case OPT_C_TIMEOUT: {
			char *end;
			timeout = strtod(optarg, &end);
			if (*end || end == optarg || !(timeout > 0)) {
				cli_err("cache stop: --timeout needs a positive number of seconds, not '%s'",
					optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		}
		case 'q': quiet = true; break;
		case 'h': cache_stop_usage(stdout); return 0;
		default: return cli_bad_option("cache stop", c, argv, opts);
		}
	}
	if (optind < argc) {
		cli_err("cache stop: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("cache stop");
		return CLI_EXIT_USAGE;
	}
	if (!(pool = pool_dir_default(pool)))
		return CLI_EXIT_USAGE;
	if (!mgr_serves_pool(pool)) {
		cli_err("cache stop: chelld is not running for pool %s", pool);
		return CACHE_EXIT_DOWN;
	}
	long pid = mgr_read_pid_file(pool, NULL, 0);
	if (pid <= 0) {
		cli_err("cache stop: pool %s is locked but has no readable pid file (%s/%s)", pool,
			pool, CHELLD_PID_NAME);
		return 1;
	}
	struct progress_bar pg;
	progress_bar_init(&pg, quiet);
	flush_first(pool, &pg);
	if (kill((pid_t)pid, SIGTERM) < 0) {
		cli_err("cache stop: cannot signal chelld (pid %ld): %s", pid, strerror(errno));
		return 1;
	}
	if (!quiet)
		printf("stopping chelld (pid %ld): no new clients, finishing queued requests\n", pid);
	fflush(stdout);
	double t0 = now_monotonic(), next = t0 + 1;
	struct timespec tick = {0, 20 * 1000000L};
	while (mgr_serves_pool(pool)) {
		double t = now_monotonic();
		if (t - t0 > timeout) {
			cli_err("cache stop: chelld (pid %ld) is still running after %.0f s", pid,
				timeout);
			return 1;
		}
		if (t >= next && !quiet) {
			printf("  still waiting for chelld (pid %ld) after %.0f s\n", pid, t - t0);
			fflush(stdout);
			next += 1;
		}
		nanosleep(&tick, NULL);
	}
	if (!quiet)
		printf("chelld stopped (%.2f s)\n", now_monotonic() - t0);
	return 0;
}
