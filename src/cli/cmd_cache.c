/* SPDX-License-Identifier: MIT */
/*
 * `chell cache start|status|stop`: the cache manager daemon (chelld).
 *
 *   start  execs chelld (found next to this executable, else on PATH) with
 *          the same options, so the daemon does all checking and its exit
 *          status is ours: 0 started, 1 the pool is already served or a
 *          system error, 2 usage or configuration error.
 *   status asks the daemon over its socket (HELLO, STATS, PATH): 0 running,
 *          1 not running, 2 usage error.
 *   stop   sends SIGTERM to the pid in the pool's pid file and waits until
 *          the daemon has released the pool's lock (which it holds until it
 *          exits): 0 stopped, 1 not running or did not stop in time.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "chelld/protocol.h"
#include "cli.h"

enum { OPT_C_POOL = 700, OPT_C_SOCKET, OPT_C_JSON, OPT_C_TIMEOUT };

void cmd_cache_usage(FILE *f)
{
	fputs("Usage: chell cache start --pool DIR --size SIZE --backing DIR [--backing DIR...]\n"
	      "                         [--socket PATH] [--foreground]\n"
	      "       chell cache status (--pool DIR | --socket PATH) [--json]\n"
	      "       chell cache stop --pool DIR [--timeout SECONDS]\n"
	      "\n"
	      "The cache manager daemon (chelld) caches files of backing directories in\n"
	      "a pool directory on the fast tier and serves libchell clients over a Unix\n"
	      "socket (by default DIR/" CHELLD_SOCK_NAME ").\n"
	      "\n"
	      "  start    start chelld for a pool (one daemon per pool)\n"
	      "  status   show the daemon's configuration and counters\n"
	      "  stop     stop it gracefully: no new clients, queued requests finish\n"
	      "\n"
	      "Run 'chell cache SUBCOMMAND --help' for the options of each.\n",
	      f);
}

static void start_usage(FILE *f)
{
	fputs("Usage: chell cache start --pool DIR --size SIZE --backing DIR [--backing DIR...]\n"
	      "                         [--socket PATH] [--foreground]\n"
	      "\n"
	      "Start chelld for the pool directory DIR. It runs in the background unless\n"
	      "--foreground; its pid, lock, log and socket files live in DIR.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the pool directory (must exist and be writable)\n"
	      "      --size SIZE     cache size; suffixes K, M, G, T (powers of 1024),\n"
	      "                      at least 2M\n"
	      "      --backing DIR   a directory whose files may be cached (repeatable)\n"
	      "      --socket PATH   listen here instead of DIR/" CHELLD_SOCK_NAME "\n"
	      "      --foreground    stay in the foreground and log to stderr\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 started, 1 the pool is already served (or a system\n"
	      "error), 2 usage or configuration error (bad size, missing directory).\n",
	      f);
}

static void status_usage(FILE *f)
{
	fputs("Usage: chell cache status (--pool DIR | --socket PATH) [--json]\n"
	      "\n"
	      "Show the pid, pool, size, backing directories, uptime, connected clients\n"
	      "(not counting this query) and request counters of a running chelld.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (finds the socket)\n"
	      "      --socket PATH   the daemon's socket\n"
	      "      --json          print one JSON object\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 running, 1 not running, 2 usage error.\n",
	      f);
}

static void stop_usage(FILE *f)
{
	fputs("Usage: chell cache stop --pool DIR [--timeout SECONDS]\n"
	      "\n"
	      "Stop the chelld serving DIR: it stops accepting clients, serves the\n"
	      "requests already sent, removes its socket and pid file and exits.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR          the daemon's pool directory\n"
	      "      --timeout SECONDS   give up waiting after this long (default 30)\n"
	      "  -h, --help              show this help\n"
	      "\n"
	      "Exit status: 0 stopped, 1 not running or still running at the timeout,\n"
	      "2 usage error.\n",
	      f);
}

static char *pool_file(const char *pool, const char *name)
{
	char *p;
	return asprintf(&p, "%s/%s", pool, name) < 0 ? NULL : p;
}

/* The pid file: "PID\nSOCKET\n". Returns the pid (0 if unreadable); the
 * socket path into sock if given. */
static long read_pid_file(const char *pool, char *sock, size_t len)
{
	char *path = pool_file(pool, CHELLD_PID_NAME);
	FILE *f = path ? fopen(path, "re") : NULL;
	long pid = 0;
	free(path);
	if (!f)
		return 0;
	char line[PATH_MAX + 2];
	if (fgets(line, sizeof line, f))
		pid = strtol(line, NULL, 10);
	if (sock && fgets(line, sizeof line, f)) {
		size_t k = strcspn(line, "\n");
		if (k >= len)
			k = len - 1;
		memcpy(sock, line, k);
		sock[k] = '\0';
	}
	fclose(f);
	return pid;
}

/* Is the pool's lock held (by a running chelld)? */
static bool pool_locked(const char *pool)
{
	char *path = pool_file(pool, CHELLD_LOCK_NAME);
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	free(path);
	if (fd < 0)
		return false;
	/* A shared lock conflicts only with the daemon's exclusive one. */
	bool held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

static int cache_start(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			start_usage(stdout);
			return 0;
		}
	}
	char exe[PATH_MAX], daemon[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	char **nargv = calloc((size_t)argc + 1, sizeof *nargv);
	if (!nargv)
		return 1;
	nargv[0] = "chelld";
	for (int i = 1; i < argc; i++)
		nargv[i] = argv[i];
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(daemon, sizeof daemon, "%s/chelld", exe);
			if (access(daemon, X_OK) == 0)
				execv(daemon, nargv);
		}
	}
	execvp("chelld", nargv);
	cli_err("cache start: cannot run chelld (not next to chell nor on PATH): %s",
		strerror(errno));
	free(nargv);
	return 1;
}

/* Parse --pool/--socket/--json/--timeout for status and stop. */
static int parse_common(const char *cmd, int argc, char **argv, const char **pool,
			const char **sock, bool *json, double *timeout, void (*usage)(FILE *))
{
	static const struct option status_opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"socket", required_argument, NULL, OPT_C_SOCKET},
		{"json", no_argument, NULL, OPT_C_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	static const struct option stop_opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"timeout", required_argument, NULL, OPT_C_TIMEOUT},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const struct option *longopts = json ? status_opts : stop_opts;
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_C_POOL: *pool = optarg; break;
		case OPT_C_SOCKET: *sock = optarg; break;
		case OPT_C_JSON: *json = true; break;
		case OPT_C_TIMEOUT: {
			char *end;
			*timeout = strtod(optarg, &end);
			if (*end || end == optarg || !(*timeout > 0)) {
				cli_err("%s: --timeout needs a positive number of seconds, not '%s'", cmd,
					optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		}
		case 'h': usage(stdout); return -1;
		default: return cli_bad_option(cmd, c, argv, longopts);
		}
	}
	if (optind < argc) {
		cli_err("%s: unexpected argument '%s'", cmd, argv[optind]);
		cli_usage_hint(cmd);
		return CLI_EXIT_USAGE;
	}
	if (!*pool && !(sock && *sock)) {
		cli_err("%s: --pool DIR is required%s", cmd, json ? " (or --socket PATH)" : "");
		cli_usage_hint(cmd);
		return CLI_EXIT_USAGE;
	}
	return 0;
}

static int call(int s, void *req, size_t reqlen, uint16_t type, void *rep, size_t replen)
{
	static uint32_t seq;
	chelld_hdr_init(req, type, (uint32_t)reqlen, ++seq);
	if (chelld_call(s, req, reqlen, -1, rep, replen) < 0)
		return -1;
	int st = ((struct chelld_rhdr *)rep)->status;
	if (st) {
		errno = st;
		return -1;
	}
	return 0;
}

static void print_size(FILE *f, uint64_t b)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	double v = (double)b;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	fprintf(f, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static int cache_status(int argc, char **argv)
{
	const char *pool = NULL, *sockopt = NULL;
	bool json = false;
	int rc = parse_common("cache status", argc, argv, &pool, &sockopt, &json, NULL, status_usage);
	if (rc)
		return rc < 0 ? 0 : rc;
	char sock[PATH_MAX] = "";
	if (sockopt)
		snprintf(sock, sizeof sock, "%s", sockopt);
	else if (!read_pid_file(pool, sock, sizeof sock) || !sock[0])
		snprintf(sock, sizeof sock, "%s/%s", pool, CHELLD_SOCK_NAME);

	int s = chelld_connect(sock);
	if (s < 0) {
		if (json)
			printf("{\"running\": false, \"socket\": "), cli_json_str(stdout, sock),
				printf("}\n");
		else
			printf("chelld is not running (no daemon at %s: %s)\n", sock, strerror(errno));
		return 1;
	}
	struct chelld_hello hello = {.version = CHELLD_VERSION};
	struct chelld_hello_reply hr;
	struct chelld_stats sq = {0};
	struct chelld_stats_reply st;
	if (call(s, &hello, sizeof hello, CHELLD_MSG_HELLO, &hr, sizeof hr) < 0 ||
	    call(s, &sq, sizeof sq, CHELLD_MSG_STATS, &st, sizeof st) < 0) {
		cli_err("cache status: the daemon at %s did not answer: %s", sock, strerror(errno));
		close(s);
		return 1;
	}
	static struct chelld_path_reply paths[1 + 64];
	uint32_t npaths = st.backings + 1 < 65 ? st.backings + 1 : 65;
	for (uint32_t i = 0; i < npaths; i++) {
		struct chelld_path pq = {.index = i};
		if (call(s, &pq, sizeof pq, CHELLD_MSG_PATH, &paths[i], sizeof paths[i]) < 0) {
			cli_err("cache status: the daemon at %s did not answer: %s", sock,
				strerror(errno));
			close(s);
			return 1;
		}
	}
	struct chelld_bye bye = {0};
	struct chelld_rhdr br;
	call(s, &bye, sizeof bye, CHELLD_MSG_BYE, &br, sizeof br);
	close(s);
	uint32_t others = st.clients ? st.clients - 1 : 0; /* minus this query */

	if (json) {
		printf("{\"running\": true, \"pid\": %u, \"pool\": ", st.pid);
		cli_json_str(stdout, paths[0].path);
		printf(", \"socket\": ");
		cli_json_str(stdout, sock);
		printf(", \"size\": %" PRIu64 ", \"backings\": [", st.cache_size);
		for (uint32_t i = 1; i < npaths; i++) {
			if (i > 1)
				printf(", ");
			cli_json_str(stdout, paths[i].path);
		}
		printf("], \"protocol\": %u, \"uptime_ms\": %" PRIu64 ", \"clients\": %u, "
		       "\"clients_total\": %" PRIu64 ", \"requests\": %" PRIu64 ", \"opens\": %" PRIu64
		       ", \"opens_refused\": %" PRIu64 ", \"maps\": %" PRIu64
		       ", \"maps_refused\": %" PRIu64 ", \"malformed\": %" PRIu64 "}\n",
		       hr.version, st.uptime_ms, others, st.clients_total, st.requests, st.opens,
		       st.opens_refused, st.maps, st.maps_refused, st.malformed);
		return 0;
	}
	printf("chelld is running\n  pid:        %u\n  pool:       %s\n  socket:     %s\n"
	       "  size:       ",
	       st.pid, paths[0].path, sock);
	print_size(stdout, st.cache_size);
	printf(" (%" PRIu64 " bytes)\n", st.cache_size);
	for (uint32_t i = 1; i < npaths; i++)
		printf("  backing:    %s\n", paths[i].path);
	printf("  uptime:     %.1f s\n  clients:    %u connected, %" PRIu64 " since start\n"
	       "  requests:   %" PRIu64 " (opens %" PRIu64 " ok / %" PRIu64 " refused, maps %" PRIu64
	       " ok / %" PRIu64 " refused, malformed %" PRIu64 ")\n",
	       (double)st.uptime_ms / 1000.0, others, st.clients_total, st.requests, st.opens,
	       st.opens_refused, st.maps, st.maps_refused, st.malformed);
	return 0;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cache_stop(int argc, char **argv)
{
	const char *pool = NULL;
	double timeout = 30;
	int rc = parse_common("cache stop", argc, argv, &pool, NULL, NULL, &timeout, stop_usage);
	if (rc)
		return rc < 0 ? 0 : rc;
	long pid = read_pid_file(pool, NULL, 0);
	if (!pool_locked(pool)) {
		cli_err("cache stop: chelld is not running for pool %s", pool);
		return 1;
	}
	if (pid <= 0) {
		cli_err("cache stop: pool %s is locked but has no readable pid file (%s/%s)", pool,
			pool, CHELLD_PID_NAME);
		return 1;
	}
	if (kill((pid_t)pid, SIGTERM) < 0) {
		cli_err("cache stop: cannot signal chelld (pid %ld): %s", pid, strerror(errno));
		return 1;
	}
	printf("stopping chelld (pid %ld): no new clients, finishing queued requests\n", pid);
	fflush(stdout);
	double t0 = now_s(), next = t0 + 1;
	struct timespec tick = {0, 20 * 1000000L};
	while (pool_locked(pool)) {
		double t = now_s();
		if (t - t0 > timeout) {
			cli_err("cache stop: chelld (pid %ld) is still running after %.0f s", pid,
				timeout);
			return 1;
		}
		if (t >= next) {
			printf("  still waiting for chelld (pid %ld) after %.0f s\n", pid, t - t0);
			fflush(stdout);
			next += 1;
		}
		nanosleep(&tick, NULL);
	}
	printf("chelld stopped (%.2f s)\n", now_s() - t0);
	return 0;
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
	if (strcmp(sub, "start") == 0)
		return cache_start(argc - 1, argv + 1);
	if (strcmp(sub, "status") == 0)
		return cache_status(argc - 1, argv + 1);
	if (strcmp(sub, "stop") == 0)
		return cache_stop(argc - 1, argv + 1);
	cli_err("cache: unknown subcommand '%s' (start, status or stop)", sub);
	cli_usage_hint("cache");
	return CLI_EXIT_USAGE;
}
