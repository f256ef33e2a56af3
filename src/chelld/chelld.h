/* SPDX-License-Identifier: MIT */
/* Internal interfaces of the cache manager daemon (see docs/CHELLD.md). */
#ifndef CHELLD_CHELLD_H
#define CHELLD_CHELLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "chelld/protocol.h"

/* Exit statuses of chelld (and `chell cache start`, which execs it). */
#define CHELLD_EXIT_FAIL 1  /* another chelld serves the pool, or a system error */
#define CHELLD_EXIT_USAGE 2 /* bad option, size, pool or backing directory */

struct chelld_config {
	char *pool;      /* realpath of the pool directory */
	uint64_t size;   /* cache size in bytes */
	char **backings; /* realpaths of the backing directories */
	int nbackings;
	char *sock_path;
	char *pid_path;
	bool foreground;
	/* the cache (docs/CHELLD.md, "Options") */
	unsigned policy;           /* 0 LRU (CLOCK), 1 FIFO, 2 blocks (CLOCK over 64 KB groups),
				    * 3 arc (CAR) */
	uint64_t append_threshold; /* sent in the HELLO reply */
	unsigned dirty_high, dirty_low; /* percent of the slots */
	uint64_t readahead;        /* bytes filled past what a MAP asks */
	uint32_t max_fds;          /* descriptors of unregistered dirty files (files.c) */
	/* cache modes (modes.c, docs/CACHE.md "Cache modes") */
	unsigned mode;             /* enum chelld_cache_mode of every backing directory */
	const char *mode_rules;    /* "DIR=MODE:DIR=MODE", checked by modes_init */
	uint64_t seq_cutoff;       /* sequential read streams past this bypass (0: never) */
	uint64_t pin_max;          /* bytes that may be pinned (0: half the capacity) */
	uint64_t file_max;         /* files larger than this are not cached (0: no cap) */
	uint32_t workers;          /* request threads (server.c) */
	/* Test hook, from the environment (CHELLD_TEST_REVALIDATE_PAUSE_MS):
	 * the first revalidation that finds a file changed behind the cache
	 * sleeps this long, without the lock, before each chunk it revokes, as
	 * a slow write-back makes it wait; tests/system/test_cache_crash.py
	 * uses it to let a second registration overtake the first. 0: none. */
	uint32_t test_revalidate_pause_ms;
};

/* One backing file a client registered with OPEN_FILE: the client's own
 * descriptor is the proof of access (auth.c); the daemon closes it once
 * checked (a descriptor it held would be visible to everyone: files.c). */
struct chelld_file {
	int fd;
	uint32_t access; /* CHELLD_ACC_* */
	dev_t dev;
	ino_t ino;
};

/* Check that descriptor fd, received from a client together with path,
 * names a regular file under one of the backing directories and is that
 * path's file; fill f (fd included) with what it grants. Returns 0, or the
 * errno to reply with and a reason in detail. (auth.c) */
int chelld_auth_file(const struct chelld_config *cfg, int fd, const char *path,
		     struct chelld_file *f, char *detail, size_t dlen);

/* Serve on listening socket lfd until SIGTERM or SIGINT, then stop
 * gracefully (server.c), caching in the pool (pool.c; taken over, closed
 * at the end). Returns 0, or -1 if the loop could not start. */
struct pool;
int chelld_serve(const struct chelld_config *cfg, int lfd, struct pool *pool);

/* Timestamped line on stderr (the log file when daemonised). (main.c) */
void chelld_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
