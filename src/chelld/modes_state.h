/* SPDX-License-Identifier: MIT */
/*
 * modes_state.c: the run-time mode switches and pins, kept in the pool
 * directory (DIR/modes.state) across restarts of the manager, and the
 * names of the modes. No engine here: a directory and a callback, so the
 * format is fuzzed on its own (tests/fuzz/fuzz_modes_state.c).
 */
#ifndef CHELLD_MODES_STATE_H
#define CHELLD_MODES_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "chelld/chelld.h" /* chelld_log (main.c; the fuzz harness has its own) */

struct modes_state_item {
	bool pin;       /* a pin; else a directory's mode */
	unsigned mode;  /* enum chelld_cache_mode (not for a pin) */
	const char *path;
};

/* "write-back" ... "pass-through" <-> enum chelld_cache_mode; -1 if unknown. */
int modes_parse(const char *name);
const char *modes_name(unsigned mode);

/* Replace the stored state with these items (atomically: the old state
 * or the new one survives a crash). 0 or -errno. */
int modes_state_save(const char *dir, const struct modes_state_item *items, size_t n);

/* Apply one stored item: 0, or -1 with the reason in detail (the line is
 * then logged and skipped). */
typedef int (*modes_state_apply_fn)(void *arg, const struct modes_state_item *it, char *detail,
				    size_t len);
/* Read the stored state and apply every item; a missing file is an empty
 * state, a damaged line is logged (file, line number, reason) and
 * skipped. Returns how many items were applied. */
int modes_state_load(const char *dir, modes_state_apply_fn apply, void *arg);

#endif
