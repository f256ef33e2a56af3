/* SPDX-License-Identifier: MIT */
/*
 * pmem/sim/sim.h - power-failure simulator for the persistence core.
 *
 * A struct chell_persist_ops implementation that models what survives a
 * power failure. The code under test runs on a *working* image (ordinary
 * memory the caller owns); the simulator keeps a separate *media* image,
 * the bytes that would be found after the power comes back:
 *
 *   flush(addr, len)  snapshots the 64-byte lines of the working image that
 *                     [addr, addr+len) touches into the pending set (a later
 *                     flush of a pending line replaces its snapshot);
 *   drain()           writes every pending line to media, in flush order;
 *   memcpy_nodrain()  copies, then behaves like flush of the destination
 *                     (non-temporal stores: on their way, not yet ordered).
 *
 * Stores that were never flushed and drained never reach media (except in
 * CHELL_PMSIM_EVICT mode, which models the cache writing back dirty lines
 * on its own). Every drain - and, if asked, every flush - is a numbered
 * *persist point*; a hook is called at each one *before* it takes effect,
 * so a crash "at point k" loses drain k itself. chell_pmsim_crash_image()
 * then builds the image a crash right there would leave.
 *
 * Everything is deterministic: the random choices of the crash modes come
 * from the seed given to chell_pmsim_crash_image().
 */
#ifndef CHELL_PMSIM_H
#define CHELL_PMSIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chell/pmem.h"

#define CHELL_PMSIM_LINE 64

/* What a crash does to the lines flushed since the last completed drain. */
enum chell_pmsim_mode {
	CHELL_PMSIM_NONE,   /* none of them reached media */
	CHELL_PMSIM_SUBSET, /* a random subset of whole lines did */
	CHELL_PMSIM_TORN,   /* each 8-byte word of each line independently did */
	CHELL_PMSIM_EVICT,  /* SUBSET, plus a random subset of the dirty lines
			     * that were never flushed (cache evictions) */
	CHELL_PMSIM_MODES
};

const char *chell_pmsim_mode_name(enum chell_pmsim_mode m);
/* Returns the mode for a name, or -1. */
int chell_pmsim_mode_parse(const char *name);

struct chell_pmsim;

/* Simulate `work` (len bytes, the caller keeps owning it). Media starts as a
 * copy of the working image. Returns NULL if out of memory. */
struct chell_pmsim *chell_pmsim_new(void *work, size_t len);
void chell_pmsim_free(struct chell_pmsim *s);

/* The ops to hand to the code under test (valid while `s` lives). */
const struct chell_persist_ops *chell_pmsim_ops(struct chell_pmsim *s);

/* Media := working image, nothing pending (e.g. after formatting, which is
 * not under test). Counters and the persist-point number are kept. */
void chell_pmsim_sync(struct chell_pmsim *s);

/* Count flushes as persist points too (default: only drains). */
void chell_pmsim_set_flush_points(struct chell_pmsim *s, bool on);

/* Called at every persist point, before it takes effect; `point` counts from
 * 1. The hook may call chell_pmsim_crash_image() and the read-only getters,
 * nothing that flushes or drains. */
typedef void (*chell_pmsim_hook)(void *arg, struct chell_pmsim *s, uint64_t point);
void chell_pmsim_set_hook(struct chell_pmsim *s, chell_pmsim_hook hook, void *arg);

/* The image a power failure right now would leave, into out[0..len). */
void chell_pmsim_crash_image(const struct chell_pmsim *s, enum chell_pmsim_mode mode,
			     uint64_t seed, void *out);

struct chell_pmsim_stats {
	uint64_t points;          /* persist points so far */
	uint64_t flushes;         /* flush calls (memcpy_nodrain included) */
	uint64_t drains;          /* drain calls */
	uint64_t lines_flushed;   /* line snapshots taken */
	uint64_t lines_drained;   /* lines written to media */
	uint64_t foreign_flushes; /* flushes of memory outside the image */
	uint64_t pending;         /* lines pending right now */
};
void chell_pmsim_stats(const struct chell_pmsim *s, struct chell_pmsim_stats *st);

/* The media image (len bytes, read-only). */
const void *chell_pmsim_media(const struct chell_pmsim *s);
size_t chell_pmsim_len(const struct chell_pmsim *s);

#endif
