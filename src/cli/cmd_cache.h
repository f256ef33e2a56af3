/* SPDX-License-Identifier: MIT */
/*
 * Shared pieces of the `chell cache` subcommands (cmd_cache*.c): finding a
 * pool's daemon, talking to it, the cache.* settings, output helpers.
 * mgr_* names are about the cache manager (chelld) of a pool: its pid file
 * and socket, a connection to it, starting and stopping it.
 *
 * Exit statuses of the subcommands that query a daemon: 0 ok, 1 not running
 * (or problems found, for check), 2 usage error.
 */
#ifndef CHELL_CLI_CMD_CACHE_H
#define CHELL_CLI_CMD_CACHE_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "chelld/protocol.h"

#define CACHE_EXIT_DOWN 1 /* no daemon answers */

/* Subcommands (argv[0] is the subcommand's name). */
int cache_start(int argc, char **argv);
int cache_status(int argc, char **argv);
int cache_stop(int argc, char **argv);
int cache_stat(int argc, char **argv);
int cache_flush(int argc, char **argv);
int cache_check(int argc, char **argv);
int cache_ls(int argc, char **argv);
int cache_mode(int argc, char **argv);
int cache_pin(int argc, char **argv);
int cache_unpin(int argc, char **argv);
void cache_start_usage(FILE *f);
void cache_status_usage(FILE *f);
void cache_stop_usage(FILE *f);
void cache_stat_usage(FILE *f);
void cache_flush_usage(FILE *f);
void cache_check_usage(FILE *f);
void cache_ls_usage(FILE *f);
void cache_mode_usage(FILE *f);
void cache_pin_usage(FILE *f);

/* ---- pool files (cmd_cache_conn.c) ---- */
/* "pool/name", malloc'd (NULL when out of memory). */
char *pool_file_path(const char *pool, const char *name);
/* The pid in pool's pid file (0 if unreadable); its socket path into sock. */
long mgr_read_pid_file(const char *pool, char *sock, size_t len);
/* Is the pool's lock held, i.e. does a chelld serve it? */
bool mgr_serves_pool(const char *pool);
/* The socket of the daemon of `pool`: sockopt if given, else the one its pid
 * file names, else pool/chelld.sock. */
void mgr_sock_path(const char *pool, const char *sockopt, char *out, size_t len);
/* The pool directory to use: `given`, else the cache.pool setting (config
 * file and environment), else the only pool a running chelld serves
 * (mgr_find_pool). NULL with a message on a bad configuration or when
 * several managers run and none was named. */
const char *pool_dir_default(const char *given);

/* ---- finding a manager (cmd_cache_find.c, chelld/mgr_registry.h) ---- */
enum { MGR_POOL_GIVEN = 0, MGR_POOL_FOUND = 1 };
/* The pool to use into out: `pool` when pool_set (cache.pool was given) or
 * a chelld serves it (MGR_POOL_GIVEN); else the pool of the only running
 * manager of this user (MGR_POOL_FOUND); else `pool` (MGR_POOL_GIVEN). -1
 * after a message naming them when several run. */
int mgr_find_pool(const char *pool, bool pool_set, char *out, size_t len);

/* ---- one connection to a daemon (cmd_cache_conn.c) ---- */
struct mgr_conn {
	int sock;
	uint32_t seq;
	char path[PATH_MAX];
	struct chelld_hello_reply hello;
};
/* Connect to `sock` and say HELLO: 0, or -1 with errno (the connection is
 * closed again). */
int mgr_connect(struct mgr_conn *c, const char *sock);
/* One request/reply with its type set; fd (or -1) goes along. 0 when the
 * daemon answered status 0; -1 with errno = the daemon's status, or the
 * transport's errno (then *answered is false, if given). */
int mgr_call(struct mgr_conn *c, void *req, size_t reqlen, uint16_t type, void *rep,
	     size_t replen, int fd, bool *answered);
/* The options of a command that queries one daemon: --pool DIR, --socket
 * PATH, --json (only when json is not NULL), --help (usage on stdout).
 * The index of the first operand, or -1 with *ret the exit status (0
 * after the help, 2 after a usage error). */
int mgr_query_options(const char *cmd, int argc, char **argv, const char **pool,
		      const char **sock, bool *json, void (*usage)(FILE *), int *ret);
/* The start of a command that reports on one daemon and takes no operand
 * (status, stat): its options, the socket, a connection and the daemon's
 * STATS. True with *cn connected, *st filled and the socket's path in
 * sock. False with *ret the exit status: after --help or a usage error,
 * or when no daemon answers (then "not running" is printed on stdout, as
 * JSON with --json: that is the command's answer, CACHE_EXIT_DOWN). */
bool mgr_query_begin(const char *cmd, int argc, char **argv, void (*usage)(FILE *), bool *json,
		     char *sock, size_t socklen, struct mgr_conn *cn, struct chelld_stats_reply *st,
		     int *ret);
/* BYE and close. */
void mgr_disconnect(struct mgr_conn *c);
/* STATS on c: 0 or -1/errno. */
int mgr_get_stats(struct mgr_conn *c, struct chelld_stats_reply *st);

/* ---- a long request with progress (cmd_cache_watch.c) ---- */
/* Called about every quarter second while the request runs: dirty_bytes is
 * the cache's dirty data as a second connection last saw it (UINT64_MAX if
 * it has not answered yet: a daemon busy with the request itself), secs the
 * time since the request was sent. */
typedef void (*mgr_watch_fn)(void *arg, uint64_t dirty_bytes, double secs);
/* mgr_call for a request that may take long (FLUSH): while waiting for
 * its reply, STATS is asked on a second connection to the same daemon and
 * fn called. Same result as mgr_call. */
int mgr_call_watch(struct mgr_conn *c, void *req, size_t reqlen,
		   uint16_t type, void *rep, size_t replen, int fd, bool *answered,
		     mgr_watch_fn fn, void *arg);

/* ---- cache modes and pins (cmd_cache_mode.c) ---- */
struct mgr_conn;
struct cache_modes_info {
	bool known; /* the manager answers RULE */
	struct chelld_rule_reply def;
	struct chelld_rule_reply *items;
	uint32_t n;
};
/* RULE by index on c: 0, or -1 for a manager without cache modes. */
int cache_modes_fetch(struct mgr_conn *c, struct cache_modes_info *mi);
void cache_modes_free(struct cache_modes_info *mi);
/* Lines for `status`, or JSON members (no braces) with json. */
void cache_modes_print(FILE *f, const struct cache_modes_info *mi, bool json);

/* ---- output (cmd_cache_out.c) ---- */
/* "1.5 MiB" */
void print_size_iec(FILE *f, uint64_t bytes);
/* hits / (hits + misses) of client-reported counts, or -1 when none. */
double counts_hit_ratio(const struct chelld_client_counts *c);
const char *policy_display_name(uint32_t policy);

/* Progress on stderr: a redrawn bar on a terminal, otherwise a plain line at
 * most once per second; nothing when quiet. */
struct progress_bar {
	bool tty, quiet, drawn;
	double next_line; /* monotonic seconds: when a plain line may be printed */
};
void progress_bar_init(struct progress_bar *p, bool quiet);
/* Show `done` of `total` (total 0: no bar, just the text) and a text. */
void progress_bar_show(struct progress_bar *p, uint64_t done, uint64_t total, const char *text);
/* A plain line that stays (clears the bar first). */
void progress_bar_note(struct progress_bar *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Remove the bar (end of the operation). */
void progress_bar_done(struct progress_bar *p);
double now_monotonic(void);

#endif
