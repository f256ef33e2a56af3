/* SPDX-License-Identifier: MIT */
/*
 * modes_state.c: the run-time mode switches and pins, kept in the pool
 * directory (DIR/modes.state) across restarts of the manager.
 */
#ifndef CHELLD_MODES_STATE_H
#define CHELLD_MODES_STATE_H

#include <stdbool.h>
#include <stddef.h>

#include "chelld/engine.h"

struct modes_state_item {
	bool pin;       /* a pin; else a directory's mode */
	unsigned mode;  /* enum chelld_cache_mode (not for a pin) */
	const char *path;
};

/* Replace the stored state with these items (atomically: the old state
 * or the new one survives a crash). 0 or -errno. */
int modes_state_save(struct engine *c, const struct modes_state_item *items, size_t n);

/* Apply one stored item: 0, or -1 with the reason in detail (the line is
 * then logged and skipped). */
typedef int (*modes_state_apply_fn)(struct engine *c, const struct modes_state_item *it,
				    char *detail, size_t len);
/* Read the stored state and apply every item; a missing file is an empty
 * state, a damaged line is logged (file, line number, reason) and
 * skipped. Returns how many items were applied. */
int modes_state_load(struct engine *c, modes_state_apply_fn apply);

#endif
