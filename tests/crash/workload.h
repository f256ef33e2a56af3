/* SPDX-License-Identifier: MIT */
/*
 * tests/crash/workload.h - the transactional workload of the crash tests.
 *
 * A tiny persistent object store on a region's heap, every change of which
 * goes through chell_tx_*:
 *
 *   offset 0        header (64 B): magic, committed-transaction counter,
 *                   layout numbers
 *   bitmap_off      allocation bitmap, one bit per 64-byte data block
 *   slots_off       root table: WL_SLOTS slots {id, first block, blocks}
 *   data_off        data blocks; an object is a 32-byte header {id, len,
 *                   blocks, checksum} and `len` payload bytes
 *
 * Transaction t (t = 1, 2, ...) is a pure function of (seed, t, the heap
 * after t-1): it allocates, updates (several ranges at once) and frees
 * objects, and bumps the counter to t. With probability 1/16 a first
 * attempt is aborted explicitly before the real one. So the heap after n
 * committed transactions is the same however often the run was
 * interrupted and resumed - which is what the checks rely on.
 *
 * Alongside the region the workload keeps a volatile *model*: the heap as
 * it must be once the running transaction commits, and the heap as it was
 * when it began (what recovery must restore if it does not).
 */
#ifndef CHELL_CRASH_WORKLOAD_H
#define CHELL_CRASH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "chell/pmem.h"

#define WL_MAGIC 0x31574c4853415243ULL /* "CRASHWL1" */
#define WL_BLOCK 64u
#define WL_SLOTS 64u
#define WL_OBJ_HDR 32u
#define WL_MAX_BLOCKS 8u

/* Where the workload is, for the crash checks. */
enum wl_phase {
	WL_IDLE,       /* between transactions */
	WL_OPEN,       /* inside a transaction, commit not yet called */
	WL_COMMITTING, /* inside chell_tx_commit */
	WL_ABORTING,   /* inside chell_tx_abort */
};

/* Deliberate bugs, to show the checks can fail. */
enum wl_break {
	WL_BREAK_NONE,
	WL_BREAK_MISSING_UNDO, /* updates skip chell_tx_add_range of one range */
};

struct wl {
	struct chell_region *r;
	uint8_t *heap;
	uint64_t heap_size;
	unsigned journals;
	uint64_t seed;
	enum wl_break brk;

	/* Volatile bookkeeping: what a crash must leave. */
	uint64_t acked;        /* last transaction whose commit returned */
	enum wl_phase phase;
	uint8_t *model;        /* heap once the current transaction commits */
	uint8_t *prev;         /* heap before it (= model when idle) */
	uint64_t commits, aborts, allocs, updates, frees, ranges;
};

/* Attach to an open region (fresh, or holding a recovered workload). */
int wl_init(struct wl *w, struct chell_region *r, unsigned journals, uint64_t seed,
	    char *err, size_t errlen);
void wl_fini(struct wl *w);

/* Run the next transaction (number wl_txcount()+1). 0, or -errno with a
 * sentence in err (a library error, or the region diverging from the model). */
int wl_step(struct wl *w, char *err, size_t errlen);

/* Committed transactions recorded in a heap (0 before the first). */
uint64_t wl_txcount(const uint8_t *heap, uint64_t heap_size);

/* Structural invariants of a heap: header and layout, objects' checksums
 * and back-references, bitmap == union of the root table's blocks, no
 * overlap. Returns the number of problems, the first few as lines in out. */
int wl_check(const uint8_t *heap, uint64_t heap_size, char *out, size_t outlen);

#endif
