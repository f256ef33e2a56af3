/* SPDX-License-Identifier: MIT */
/*
 * The per-user registry of running cache managers, so that `chell run
 * --mode cache` and `chell cache ...` find a chelld without being told its
 * pool, and `chell cache ls` lists them.
 *
 * One small text file per daemon, named by its pid, in a directory only
 * the user can write: $XDG_RUNTIME_DIR/chell/managers, else
 * /tmp/chell-<uid>/managers. chelld adds its entry once it serves and
 * removes it when it stops. An entry whose daemon died without removing
 * it (SIGKILL) is stale; readers tell by the pool itself: its lock is held
 * while a chelld serves it, and its pid file (written under the lock) names
 * that chelld, so a recycled pid is never taken for a manager.
 *
 * Entry format (one "key value" per line, values to the end of the line):
 *   pid 1234
 *   pool /dev/shm/chell-cache      (absolute, resolved by chelld)
 *   socket /dev/shm/chell-cache/chelld.sock
 */
#ifndef CHELLD_MGR_REGISTRY_H
#define CHELLD_MGR_REGISTRY_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

struct mgr_entry {
	long pid;
	char pool[PATH_MAX];
	char sock[PATH_MAX];
	bool live; /* the pool's pid file names this pid, and the pool is locked */
};

/* The registry directory into out, created (mode 0700) if missing.
 * 0, or -errno: -ENAMETOOLONG, or -EPERM when the directory exists but is
 * not ours or is not a plain directory (never trusted). */
int mgr_registry_dir(char *out, size_t len);

/* Add (or replace) the entry of pid. 0 or -errno. */
int mgr_registry_add(long pid, const char *pool, const char *sock);

/* Remove the entry of pid (missing is fine). */
void mgr_registry_remove(long pid);

/* Every entry, live or stale, sorted by pool: *out is malloc'd (free it),
 * *n its length. Unreadable or malformed entries are skipped. 0 or -errno. */
int mgr_registry_list(struct mgr_entry **out, size_t *n);

#endif
