/* SPDX-License-Identifier: MIT */
/*
 * `chell cache`: finding a pool's daemon (pid file, lock, socket) and one
 * connection to it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"
#include "common/config.h"

char *pool_file_path(const char *pool, const char *name)
{
	char *p;
	return asprintf(&p, "%s/%s", pool, name) < 0 ? NULL : p;
}

/* The pid file: "PID\nSOCKET\n". */
long mgr_read_pid_file(const char *pool, char *sock, size_t len)
{
	char *path = pool_file_path(pool, CHELLD_PID_NAME);
	FILE *f = path ? fopen(path, "re") : NULL;
	long pid = 0;
	free(path);
	if (!f)
		return 0;
	char line[PATH_MAX + 2];
	if (fgets(line, sizeof line, f))
		pid = strtol(line, NULL, 10);
	if (sock && len && fgets(line, sizeof line, f)) {
		size_t k = strcspn(line, "\n");
		if (k >= len)
			k = len - 1;
		memcpy(sock, line, k);
		sock[k] = '\0';
	}
	fclose(f);
	return pid;
}

bool mgr_serves_pool(const char *pool)
{
	char *path = pool_file_path(pool, CHELLD_LOCK_NAME);
	int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	free(path);
	if (fd < 0)
		return false;
	/* A shared lock conflicts only with the daemon's exclusive one. */
	bool held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

void mgr_sock_path(const char *pool, const char *sockopt, char *out, size_t len)
{
	out[0] = '\0';
	if (sockopt)
		snprintf(out, len, "%s", sockopt);
	else if (!mgr_read_pid_file(pool, out, len) || !out[0])
		snprintf(out, len, "%s/%s", pool, CHELLD_SOCK_NAME);
}

int mgr_call(struct mgr_conn *c, void *req, size_t reqlen, uint16_t type, void *rep,
	     size_t replen, int fd, bool *answered)
{
	if (answered)
		*answered = false;
	chelld_hdr_init(req, type, (uint32_t)reqlen, ++c->seq);
	if (chelld_call(c->sock, req, reqlen, fd, rep, replen) < 0)
		return -1;
	if (answered)
		*answered = true;
	int st = ((struct chelld_rhdr *)rep)->status;
	if (st) {
		errno = st;
		return -1;
	}
	return 0;
}

int mgr_connect(struct mgr_conn *c, const char *sock)
{
	memset(c, 0, sizeof *c);
	snprintf(c->path, sizeof c->path, "%s", sock);
	c->sock = chelld_connect(sock);
	if (c->sock < 0)
		return -1;
	struct chelld_hello hello = {.version = CHELLD_VERSION};
	if (mgr_call(c, &hello, sizeof hello, CHELLD_MSG_HELLO, &c->hello, sizeof c->hello, -1,
		     NULL) < 0) {
		int e = errno;
		close(c->sock);
		c->sock = -1;
		errno = e;
		return -1;
	}
	return 0;
}

void mgr_disconnect(struct mgr_conn *c)
{
	if (c->sock < 0)
		return;
	struct chelld_bye bye = {0};
	struct chelld_rhdr br;
	mgr_call(c, &bye, sizeof bye, CHELLD_MSG_BYE, &br, sizeof br, -1, NULL);
	close(c->sock);
	c->sock = -1;
}

int mgr_get_stats(struct mgr_conn *c, struct chelld_stats_reply *st)
{
	struct chelld_stats q = {0};
	return mgr_call(c, &q, sizeof q, CHELLD_MSG_STATS, st, sizeof *st, -1, NULL);
}

enum { OPT_Q_POOL = 700, OPT_Q_SOCKET, OPT_Q_JSON };

int mgr_query_options(const char *cmd, int argc, char **argv, const char **pool, const char **sock,
		 bool *json, void (*usage)(FILE *), int *ret)
{
	static const struct option opts[] = {
		{"pool", required_argument, NULL, OPT_Q_POOL},
		{"socket", required_argument, NULL, OPT_Q_SOCKET},
		{"json", no_argument, NULL, OPT_Q_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_Q_POOL: *pool = optarg; break;
		case OPT_Q_SOCKET: *sock = optarg; break;
		case OPT_Q_JSON:
			if (json) {
				*json = true;
				break;
			}
			*ret = cli_bad_option(cmd, c, argv, opts);
			return -1;
		case 'h': usage(stdout); *ret = 0; return -1;
		default: *ret = cli_bad_option(cmd, c, argv, opts); return -1;
		}
	}
	return optind;
}

bool mgr_query_begin(const char *cmd, int argc, char **argv, void (*usage)(FILE *), bool *json,
		     char *sock, size_t socklen, struct mgr_conn *cn, struct chelld_stats_reply *st,
		     int *ret)
{
	const char *pool = NULL, *sockopt = NULL;
	int at = mgr_query_options(cmd, argc, argv, &pool, &sockopt, json, usage, ret);
	if (at < 0)
		return false;
	if (at < argc) {
		cli_err("%s: unexpected argument '%s'", cmd, argv[at]);
		cli_usage_hint(cmd);
		*ret = CLI_EXIT_USAGE;
		return false;
	}
	if (!sockopt && !(pool = pool_dir_default(pool))) {
		*ret = CLI_EXIT_USAGE;
		return false;
	}
	mgr_sock_path(pool, sockopt, sock, socklen);
	*ret = CACHE_EXIT_DOWN;
	if (mgr_connect(cn, sock) < 0) {
		if (*json)
			printf("{\"running\": false, \"socket\": "), cli_json_str(stdout, sock),
				printf("}\n");
		else
			printf("chelld is not running (no daemon at %s: %s)\n", sock, strerror(errno));
		return false;
	}
	if (mgr_get_stats(cn, st) < 0) {
		cli_err("%s: the daemon at %s did not answer: %s", cmd, sock, strerror(errno));
		close(cn->sock);
		return false;
	}
	return true;
}
