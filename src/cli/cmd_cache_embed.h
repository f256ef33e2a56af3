/* SPDX-License-Identifier: MIT */
/* The cache manager for `chell run --mode cache` (cmd_cache_embed.c). */
#ifndef CHELL_CLI_CMD_CACHE_EMBED_H
#define CHELL_CLI_CMD_CACHE_EMBED_H

#include <stdbool.h>
#include <stddef.h>

struct chell_config;

/* Make sure a chelld serves the cache pool (its path into pool): cfg's
 * cache.pool if it was given; else the default pool if a chelld serves it,
 * else the only pool a running chelld of this user serves (*found: the
 * command must be told, CHELL_CACHE_POOL), else the default. Uses the one
 * that answers, else starts one from the cache.* settings and waits until
 * it answers. 0 (*started: this call started it), or an exit status after
 * a message (2: no backing directory, a configuration chelld refused, or
 * several running managers and none named). */
int mgr_ensure_running(const struct chell_config *cfg, bool *started, bool *found, char *pool,
		       size_t len);
/* Stop the daemon of pool (quietly): 0 or 1. */
int mgr_stop_quiet(const char *pool);
/* Run cmd with envp in a child, then stop the daemon of pool; returns the
 * command's exit status (or dies of its signal). */
int mgr_run_and_stop(char **cmd, char **envp, const char *pool);

#endif
