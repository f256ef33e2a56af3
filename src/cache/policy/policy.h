/* Cache mode: replacement, access reporting, dirty tracking, write-back
 * planning and the background cleaner (issue 5, items 4-5).
 *
 * Clients serve cache hits in user space, so the cache manager learns about
 * accesses and writes only indirectly (chell.md §4.1.4-4.1.5, bankshot.md
 * §4.3.1-4.3.2). Everything here is unit-sized: a chunk is the 2 MB mapping
 * unit, a block the 4 KB write-back unit, and a chunk index is the slot of
 * the chunk in the cache (0 .. nchunks-1), not a file offset.
 *
 * The two tables clients write (access flags, dirty states) live in memory
 * the caller provides, so the manager can put them in a shared mapping both
 * sides map; they hold no pointers and use only lock-free, address-free
 * atomics. See docs/CACHE_POLICY.md. */
#ifndef CHELL_CACHE_POLICY_H
#define CHELL_CACHE_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chell/chunk.h"

#define CP_BLOCK_SIZE 4096u
#define CP_CHUNK_SIZE ((uint32_t)CHELL_CHUNK_SIZE)
#define CP_CHUNK_BLOCKS (CP_CHUNK_SIZE / CP_BLOCK_SIZE) /* 512 */
#define CP_BITMAP_WORDS (CP_CHUNK_BLOCKS / 64)          /* 8 */

/* A set of blocks of one chunk, bit b = block b. */
typedef struct {
	uint64_t w[CP_BITMAP_WORDS];
} cp_bitmap;

static inline bool cp_bitmap_test(const cp_bitmap *b, unsigned i)
{
	return (b->w[i / 64] >> (i % 64)) & 1;
}

static inline void cp_bitmap_set(cp_bitmap *b, unsigned i)
{
	b->w[i / 64] |= 1ull << (i % 64);
}

unsigned cp_bitmap_count(const cp_bitmap *b);

/* ---- 1. Access reporting (access.c) ---------------------------------------
 * One byte per chunk. A client that hits in a chunk calls access_mark():
 * a plain byte store (a relaxed atomic store, which is a plain `mov` on
 * x86-64, written as an atomic only so the C memory model and TSan accept
 * the deliberate race), skipped when the flag is already set so a hot chunk
 * does not keep dirtying a shared cache line. Bytes rather than bits so a
 * mark needs no read-modify-write: two clients marking neighbouring chunks
 * cannot undo each other. The manager's clock hand consumes flags with
 * access_test_clear(); a mark landing between its load and its clear is
 * lost, which only makes the LRU approximation slightly more FIFO-like. */
typedef struct {
	uint8_t *flags;
	uint32_t nchunks;
} access_table;

size_t access_table_bytes(uint32_t nchunks);
/* Attach to `mem` (access_table_bytes(nchunks) bytes); `clear` zeroes it
 * (the manager, once at creation); clients attach without clearing. */
void access_table_attach(access_table *t, void *mem, uint32_t nchunks, bool clear);

static inline void access_mark(const access_table *t, uint32_t chunk)
{
	uint8_t *f = &t->flags[chunk];

	if (!__atomic_load_n(f, __ATOMIC_RELAXED))
		__atomic_store_n(f, 1, __ATOMIC_RELAXED);
}

bool access_test_clear(const access_table *t, uint32_t chunk);

/* ---- 2. Replacement at chunk granularity (policy.c, lru.c, fifo.c) -------
 * POLICY_LRU is CLOCK (second chance): a chunk is referenced if the manager
 * touched it (policy_touch, e.g. on a miss) or a client marked it in the
 * attached access table since the hand last passed. POLICY_FIFO evicts in
 * insertion order and ignores references. All operations are O(1) except
 * policy_victim, which is O(1) amortised: every extra step of the hand
 * clears a reference some access paid for, or passes a skipped chunk. */
typedef enum { POLICY_LRU, POLICY_FIFO, POLICY_CAR } policy_kind;
/* POLICY_CAR is CAR (Clock with Adaptive Replacement, car.c): ARC's
 * adaptive split between chunks seen once and chunks seen again, with
 * reference bits fed like CLOCK's; scan resistant. It remembers evicted
 * chunks by key (policy_insert_key; policy_insert uses the slot number). */

typedef struct policy policy;

/* Returns NULL on bad arguments or allocation failure. */
policy *policy_create(policy_kind kind, uint32_t nchunks);
void policy_destroy(policy *p);
/* Optional: consult (and consume) a shared access table; NULL detaches.
 * The table must cover at least the policy's nchunks. */
void policy_attach_access(policy *p, const access_table *t);
policy_kind policy_get_kind(const policy *p);
uint32_t policy_count(const policy *p);
bool policy_contains(const policy *p, uint32_t chunk);

/* A chunk becomes resident: -EINVAL out of range, -EEXIST if already in.
 * It starts unreferenced (the caller touches it if the fill was an access). */
int policy_insert(policy *p, uint32_t chunk);
/* The same, naming what the slot now holds (CAR's ghost lists recognise a
 * chunk that comes back); key UINT64_MAX is reserved (-EINVAL). */
int policy_insert_key(policy *p, uint32_t chunk, uint64_t key);
/* A chunk leaves the cache outside eviction: -ENOENT if not resident. */
int policy_remove(policy *p, uint32_t chunk);
/* Manager-side access. No effect on FIFO or on a non-resident chunk. */
void policy_touch(policy *p, uint32_t chunk);

/* Return true to keep a chunk (pinned, checked out for cleaning, mapped
 * and busy...). */
typedef bool (*policy_skip_fn)(void *arg, uint32_t chunk);

/* Choose a victim, remove it from the policy and store it in *chunk.
 * `skip` may be NULL. Returns 0, -ENOENT if nothing is resident, -EBUSY if
 * every resident chunk was skipped. */
int policy_victim(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg);

/* ---- 3. Dirty tracking with check-out/check-in (dirty.c) -----------------
 * Two bits per 4 KB block (bankshot.md §4.3.2, Figure 7), 32 blocks per
 * 64-bit word, all transitions lock-free on the word:
 *   writer   dirty_mark:     CLEAN->DIRTY  DIRTY->DIRTY  PRE->POST  POST->POST
 *   cleaner  dirty_checkout: DIRTY->PRE (the returned set)
 *   cleaner  dirty_checkin:  PRE->CLEAN   POST->DIRTY
 *   cleaner  dirty_checkin_abort (write-back failed): PRE->DIRTY POST->DIRTY
 * With the encoding CLEAN=00 DIRTY=01 PRE=10 POST=11, mark is a fetch-or of
 * the low bits and check-in a fetch-and clearing the high bits; check-out is
 * a CAS loop. A writer must call dirty_mark AFTER its data store: a mark
 * that precedes a check-out then guarantees the cleaner sees the data, and
 * one that follows it turns PRE into POST, so the check-in keeps the block
 * dirty. One cleaner per chunk at a time (the cleaner owns PRE/POST).
 *
 * Per chunk there is also a "maybe dirty" byte and the table keeps a count
 * of such chunks, which the cleaner's watermarks use. The count may over-
 * state (a chunk cleaned while a writer re-flags it) but never understates
 * a chunk with dirty blocks that no cleaner holds. */
enum { BLK_CLEAN = 0, BLK_DIRTY = 1, BLK_PRE_CHECKOUT = 2, BLK_POST_CHECKOUT = 3 };

typedef struct dirty_table dirty_table;

size_t dirty_table_bytes(uint32_t nchunks);
/* Format `mem` (dirty_table_bytes(nchunks) bytes, 8-byte aligned) and
 * return it as a table; clients that map the same memory use
 * dirty_table_open. NULL on bad arguments. */
dirty_table *dirty_table_init(void *mem, uint32_t nchunks);
dirty_table *dirty_table_open(void *mem);
uint32_t dirty_table_nchunks(const dirty_table *t);
/* Chunks flagged maybe-dirty. */
uint32_t dirty_table_ndirty(const dirty_table *t);

/* Blocks [first, first+n) of `chunk` were written (call after the data). */
void dirty_mark(dirty_table *t, uint32_t chunk, unsigned first, unsigned n);
unsigned dirty_state(const dirty_table *t, uint32_t chunk, unsigned block);
bool dirty_chunk_flagged(const dirty_table *t, uint32_t chunk);
/* Dirty blocks of the chunk (DIRTY or POST), without changing anything. */
void dirty_peek(const dirty_table *t, uint32_t chunk, cp_bitmap *out);
/* How many blocks dirty_peek would return (a relaxed snapshot, for
 * watermarks: 16 loads and popcounts). */
unsigned dirty_count(const dirty_table *t, uint32_t chunk);
/* Move every DIRTY block to PRE and return them in *out; returns how many.
 * Also drops the chunk's maybe-dirty flag (check-in restores it if needed). */
unsigned dirty_checkout(dirty_table *t, uint32_t chunk, cp_bitmap *out);
void dirty_checkin(dirty_table *t, uint32_t chunk);
void dirty_checkin_abort(dirty_table *t, uint32_t chunk);
/* Test hook: a WRONG check-in that also clears POST blocks (loses writes
 * made during the write-back). Exists only so the tests can show that
 * they detect the lost writes; never call it elsewhere. */
void dirty_checkin_broken_for_test(dirty_table *t, uint32_t chunk);

/* ---- 4. Write-back planning (writeback.c) --------------------------------
 * Input: the dirty (checked-out) blocks of some chunks of one backing file
 * and where each chunk starts in that file. Output: segments (runs of
 * blocks inside one chunk) sorted by backing offset, grouped into extents
 * that are contiguous in the file and at most max_extent_bytes long, so one
 * pwritev per extent writes them (the segments are its iovecs). */
typedef struct {
	uint32_t chunk;
	uint64_t backing_off; /* file offset of block 0, block-aligned */
	const cp_bitmap *blocks;
} wb_chunk;

typedef struct {
	uint32_t chunk;
	uint32_t first_block;
	uint32_t nblocks;
	uint64_t backing_off;
} wb_seg;

typedef struct {
	uint64_t backing_off;
	uint64_t len;        /* bytes */
	uint32_t first_seg;  /* index into wb_plan.segs */
	uint32_t nsegs;
} wb_extent;

typedef struct {
	wb_seg *segs;
	uint32_t nsegs;
	wb_extent *ext;
	uint32_t next;
} wb_plan;

/* Returns 0, -EINVAL (misaligned offset, max_extent_bytes not a positive
 * multiple of the block size, or two dirty blocks at the same file
 * offset), -ENOMEM. max_extent_bytes 0 means no cap. */
int wb_plan_build(const wb_chunk *in, size_t n, uint64_t max_extent_bytes, wb_plan *plan);
void wb_plan_free(wb_plan *plan);

/* ---- 5. Cleaner (cleaner.c) ----------------------------------------------
 * A background thread that keeps the fraction of maybe-dirty chunks in
 * check: once it reaches `high` it cleans chunks (check-out, the caller's
 * write-back, check-in) until it is at or below `low`. Writers that would
 * push it past `limit` wait in cleaner_throttle() for one chunk's worth of
 * cleaning at a time, so a writer faster than the backing store is slowed
 * to the store's pace instead of stopping until the low watermark. */
typedef struct {
	/* Write back `blocks` of `chunk` (the manager plans extents and
	 * pwrite()s them). Return 0, or a negative errno: the blocks stay dirty
	 * and the cleaner moves on to other chunks. */
	int (*writeback)(void *arg, uint32_t chunk, const cp_bitmap *blocks);
	/* Optional: true to leave a chunk alone this pass (e.g. being evicted). */
	policy_skip_fn skip;
	void *arg;
	double low, high, limit; /* fractions of nchunks, low < high <= limit <= 1 */
	unsigned idle_ms;        /* poll period when not woken (0: 50 ms) */
} cleaner_config;

typedef struct {
	uint64_t passes;       /* times the high watermark started cleaning */
	uint64_t chunks_cleaned;
	uint64_t blocks_written;
	uint64_t writeback_errors;
	uint64_t throttle_waits; /* cleaner_throttle calls that had to wait */
} cleaner_stats;

typedef struct cleaner cleaner;

/* Starts the thread. NULL (errno set) on bad config or failure. */
cleaner *cleaner_start(dirty_table *t, const cleaner_config *cfg);
/* Stops the thread (waiters are released) and frees the cleaner. */
void cleaner_stop(cleaner *c);
/* Called by a writer before it dirties more data. */
void cleaner_throttle(cleaner *c);
/* Wake the thread early (e.g. after a burst of marks). */
void cleaner_kick(cleaner *c);
/* Clean every flagged chunk now, in the caller's thread (fsync, shutdown);
 * returns the first write-back error or 0. */
int cleaner_flush(cleaner *c);
void cleaner_get_stats(cleaner *c, cleaner_stats *s);

/* One chunk now, in the caller's thread (the manager's eviction path):
 * check out, write back, check in. Waits while the thread is cleaning the
 * same chunk (one cleaner per chunk). Returns the number of blocks
 * written (>= 0) or the write-back error (the blocks stay dirty). */
int cleaner_clean_one(cleaner *c, uint32_t chunk);

#endif
