/* SPDX-License-Identifier: MIT */
/* Starting chelld from the cache.* settings (cmd_cache_launch.c). */
#ifndef CHELL_CLI_CMD_CACHE_LAUNCH_H
#define CHELL_CLI_CMD_CACHE_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>

struct chell_config;

/* The tunables, in the order of mgr_launch.tunable[]. */
enum {
	CACHE_T_POLICY,
	CACHE_T_DIRTY_HIGH,
	CACHE_T_DIRTY_LOW,
	CACHE_T_READAHEAD,
	CACHE_T_MAX_FDS,
	/* cache modes (src/chelld/modes.c) */
	CACHE_T_MODE,
	CACHE_T_MODE_RULES,
	CACHE_T_SEQ_CUTOFF,
	CACHE_T_PIN_MAX,
	CACHE_T_FILE_MAX,
	CACHE_T_COUNT,
};

/* Options given explicitly (NULL / 0: take the configuration's). */
struct mgr_launch {
	const char *pool, *size, *socket;
	char **backings;
	int nbackings;
	const char *tunable[CACHE_T_COUNT];
	bool foreground;
};

/* A NULL-terminated argument vector, each string malloc'd. */
struct mgr_argv {
	char **v;
	size_t n, cap;
};

/* chelld's argv (v[0] "chelld") for o over cfg: 0, CLI_EXIT_USAGE when no
 * backing directory is known (o, cache.backing, paths), -1 out of memory
 * (both reported). */
int mgr_launch_argv(const struct mgr_launch *o, const struct chell_config *cfg,
		    struct mgr_argv *out);
void mgr_argv_free(struct mgr_argv *a);
/* The chelld option of a tunable setting key ("cache.policy" -> "--policy"). */
const char *mgr_tunable_option(const char *key);
/* chelld next to this executable, else "chelld" (for execvp). */
void mgr_find_chelld(char *buf, size_t len);

#endif
