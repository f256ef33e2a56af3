/* SPDX-License-Identifier: MIT */
/* The cache manager for `chell run --mode cache` (cmd_cache_embed.c). */
#ifndef CHELL_CLI_CMD_CACHE_EMBED_H
#define CHELL_CLI_CMD_CACHE_EMBED_H

#include <stdbool.h>
#include <stddef.h>

struct chell_config;

/* Make sure a chelld serves cfg's cache.pool (its path into pool): use the
 * one that answers, else start one from the cache.* settings and wait
 * until it answers. 0 (*started: this call started it), or an exit status
 * after a message (2: no backing directory or a configuration chelld
 * refused). */
int mgr_ensure_running(const struct chell_config *cfg, bool *started, char *pool, size_t len);
/* Stop the daemon of pool (quietly): 0 or 1. */
int mgr_stop_quiet(const char *pool);
/* Run cmd with envp in a child, then stop the daemon of pool; returns the
 * command's exit status (or dies of its signal). */
int mgr_run_and_stop(char **cmd, char **envp, const char *pool);

#endif
