/* SPDX-License-Identifier: MIT */
/*
 * chell/pmtx.h - building blocks for persistent data structures on a
 * region heap, shared by cache metadata (src/cache/meta) and the pVM object
 * store (src/pvm). Part of the persistence core (src/pmem/ptx.c).
 *
 *   chell_ptx   a transaction with a sticky error: every add after a failure
 *               fails too, and end() aborts (the undo log puts every byte
 *               back) instead of committing half an update.
 *   chell_bm_*  persistent allocation bitmaps (bit set = in use).
 *   chell_htab  open-addressing tables (linear probing, backward-shift
 *               deletion: no tombstones, lookups never degrade), each slot
 *               change undo-logged.
 *
 * All offsets are heap offsets (chell_region_heap); callers pass offsets
 * that came from their own validated layout. Each add is still bounds
 * checked against the heap: the last line of defence.
 */
#ifndef CHELL_PMTX_H
#define CHELL_PMTX_H

#include <chell/pmem.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHELL_BM_NONE UINT32_MAX

struct chell_ptx {
	struct chell_region *r;
	struct chell_tx *tx;
	uint8_t *heap;
	uint64_t heap_size;
	int err;                  /* first error; sticky */
	unsigned nadd;            /* non-empty ranges added so far: undo records written */
};

/* Fault injection for the crash tests' broken variants: when set, the
 * second range of every transaction is modified without an undo record.
 * Never set in production. */
extern int chell_ptx_fault_skip_undo;

/* Begin on client journal `journal`. Returns 0 or -errno (also in t->err). */
int chell_ptx_begin(struct chell_ptx *t, struct chell_region *r, unsigned journal);
/* The same on a transaction the caller already began. */
void chell_ptx_wrap(struct chell_ptx *t, struct chell_region *r, struct chell_tx *tx);
/* Undo-log [off, off+len) and return a pointer to modify it; NULL (with
 * t->err set) on failure, and every later call fails too. */
void *chell_ptx_add(struct chell_ptx *t, uint64_t off, size_t len);
/* Undo-log [off, off+len) without a fence of its own: log every range a
 * change touches, then chell_ptx_fence once, and only then store into
 * them (one fence instead of one per range). NULL with t->err on failure. */
void *chell_ptx_log(struct chell_ptx *t, uint64_t off, size_t len);
/* Make the ranges chell_ptx_log recorded durable; returns t->err. */
int chell_ptx_fence(struct chell_ptx *t);
/* Commit if everything succeeded, abort otherwise; returns t->err or the
 * commit's error. */
int chell_ptx_end(struct chell_ptx *t);

/* Bitmaps of n bits at heap offset bm_off. */
int chell_bm_test(const uint8_t *heap, uint64_t bm_off, uint32_t i);
/* First clear bit at or after hint (wrapping), or CHELL_BM_NONE. */
uint32_t chell_bm_find_clear(const uint8_t *heap, uint64_t bm_off, uint32_t n, uint32_t hint);
/* First run of `count` clear bits starting at or after hint (wrapping; a
 * run never wraps past bit n-1), or CHELL_BM_NONE. */
uint32_t chell_bm_find_run(const uint8_t *heap, uint64_t bm_off, uint32_t n, uint32_t hint, uint32_t count);
int chell_bm_set(struct chell_ptx *t, uint64_t bm_off, uint32_t i, int on);
/* Set or clear bits [i, i+count), logging the words they touch once. */
int chell_bm_set_run(struct chell_ptx *t, uint64_t bm_off, uint32_t i, uint32_t count, int on);
/* The halves of chell_bm_set_run: undo-log the words of bits [i, i+count)
 * as chell_ptx_log does (no fence: chell_ptx_fence before applying; NULL
 * with t->err on failure), and change the bits without logging. */
void *chell_bm_log_run(struct chell_ptx *t, uint64_t bm_off, uint32_t i, uint32_t count);
void chell_bm_apply_run(uint8_t *heap, uint64_t bm_off, uint32_t i, uint32_t count, int on);

/* A table of mask+1 slots of esize bytes at heap offset off. home() hashes
 * a used slot's key; used() tells an empty (all-zero) slot from a full one. */
struct chell_htab {
	uint8_t *heap;
	uint64_t off;
	size_t esize;
	uint32_t mask;
	uint32_t (*home)(void *ctx, const void *slot);
	int (*used)(const void *slot);
	void *ctx;
};
static inline void *chell_htab_slot(const struct chell_htab *h, uint32_t i)
{
	return h->heap + h->off + (uint64_t)i * h->esize;
}
/* Undo-log and return the first free slot probing from `home` (its index
 * in *slot if not NULL); NULL with t->err = -EUCLEAN if the table is full. */
void *chell_htab_claim(struct chell_ptx *t, const struct chell_htab *h, uint32_t home, uint32_t *slot);
/* Remove slot i, shifting later members of its cluster back into holes
 * their home position allows (Knuth 6.4, algorithm R). */
int chell_htab_delete(struct chell_ptx *t, const struct chell_htab *h, uint32_t i);

/* CRC32C (Castagnoli), the usual ~0 pre/post conditioning: crc32c(0, ...)
 * over "123456789" is 0xE3069283. Chain calls by passing the previous
 * result. Picks the SSE4.2 instruction when the CPU has it. */
uint32_t chell_crc32c(uint32_t crc, const void *buf, size_t len);

/* A 64-bit mix of two words (splitmix-style finaliser). */
uint64_t chell_hash64(uint64_t a, uint64_t b);

#ifdef __cplusplus
}
#endif
#endif
