/* SPDX-License-Identifier: MIT */
/*
 * The sticky-error transaction wrapper, persistent bitmaps and
 * open-addressing tables of chell/pmtx.h (lifted from cache metadata so
 * the pVM object store uses the same code).
 *
 * The tables are sized by their owners at least twice the number of keys
 * they can hold, so the load stays <= 1/2 and probe sequences are short.
 * Deletion shifts the rest of the cluster back instead of leaving
 * tombstones; the slots it moves form one contiguous run (two when it
 * wraps), logged with one add_range each - a transaction's size is bounded
 * by the cluster length, not by the table.
 */
#include <chell/pmtx.h>

#include <errno.h>
#include <string.h>

int chell_ptx_fault_skip_undo;

int chell_ptx_begin(struct chell_ptx *t, struct chell_region *r, unsigned journal)
{
	struct chell_tx *tx = NULL;
	int rc = chell_tx_begin(r, journal, &tx);
	chell_ptx_wrap(t, r, tx);
	t->err = rc;
	return rc;
}

void chell_ptx_wrap(struct chell_ptx *t, struct chell_region *r, struct chell_tx *tx)
{
	t->r = r;
	t->tx = tx;
	t->heap = r ? chell_region_heap(r, &t->heap_size) : NULL;
	t->err = 0;
	t->nadd = 0;
}

static void *ptx_add(struct chell_ptx *t, uint64_t off, size_t len, int drain)
{
	if (t->err)
		return NULL;
	if (off > t->heap_size || len > t->heap_size - off) {
		t->err = -EUCLEAN;
		return NULL;
	}
	int rc = chell_ptx_fault_skip_undo && t->nadd == 1 ? 0
		 : drain ? chell_tx_add_range(t->tx, off, len)
			 : chell_tx_add_range_nodrain(t->tx, off, len);
	/* Only a range with bytes writes an undo record (an empty one is
	 * accepted and writes nothing): nadd counts records, which callers
	 * rely on to know whether the commit will drain at all. */
	if (len)
		t->nadd++;
	if (rc < 0) {
		t->err = rc;
		return NULL;
	}
	return t->heap + off;
}

void *chell_ptx_add(struct chell_ptx *t, uint64_t off, size_t len)
{
	return ptx_add(t, off, len, 1);
}

void *chell_ptx_log(struct chell_ptx *t, uint64_t off, size_t len)
{
	return ptx_add(t, off, len, 0);
}

int chell_ptx_fence(struct chell_ptx *t)
{
	if (!t->err)
		chell_tx_fence(t->tx);
	return t->err;
}

int chell_ptx_end(struct chell_ptx *t)
{
	if (t->err) {
		/* Nothing half-done stays: the undo log puts every byte back. */
		chell_tx_abort(t->tx);
		return t->err;
	}
	return chell_tx_commit(t->tx);
}

/* ------------------------------------------------------------ bitmaps */

int chell_bm_test(const uint8_t *heap, uint64_t bm_off, uint32_t i)
{
	const uint64_t *w = (const uint64_t *)(heap + bm_off);
	return (int)(w[i / 64] >> (i % 64) & 1);
}

uint32_t chell_bm_find_clear(const uint8_t *heap, uint64_t bm_off, uint32_t n, uint32_t hint)
{
	const uint64_t *w = (const uint64_t *)(heap + bm_off);
	uint32_t words = (n + 63) / 64;
	if (hint >= n)
		hint = 0;
	/* Word at a time from the hint's word, wrapping once. */
	for (uint32_t k = 0; k <= words; k++) {
		uint32_t wi = (hint / 64 + k) % words;
		uint64_t free = ~w[wi];
		if (k == 0)
			free &= ~0ull << (hint % 64);
		if (free) {
			uint32_t i = wi * 64 + (uint32_t)__builtin_ctzll(free);
			if (i < n)
				return i;
		}
	}
	return CHELL_BM_NONE;
}

uint32_t chell_bm_find_run(const uint8_t *heap, uint64_t bm_off, uint32_t n, uint32_t hint, uint32_t count)
{
	if (count == 0 || count > n)
		return CHELL_BM_NONE;
	if (hint >= n)
		hint = 0;
	/* Two passes: [hint, n) then [0, hint + count). Each run start is
	 * found word-wise; its length is measured bit by bit only while it
	 * grows, so a full scan stays linear. */
	for (int pass = 0; pass < 2; pass++) {
		uint32_t i = pass ? 0 : hint, end = pass ? (hint + count < n ? hint + count : n) : n;
		while (i + count <= end) {
			uint32_t s = chell_bm_find_clear(heap, bm_off, n, i);
			if (s == CHELL_BM_NONE || s < i || s + count > end)
				break;
			uint32_t len = 1;
			while (len < count && !chell_bm_test(heap, bm_off, s + len))
				len++;
			if (len == count)
				return s;
			i = s + len + 1;
		}
	}
	return CHELL_BM_NONE;
}

int chell_bm_set(struct chell_ptx *t, uint64_t bm_off, uint32_t i, int on)
{
	return chell_bm_set_run(t, bm_off, i, 1, on);
}

int chell_bm_set_run(struct chell_ptx *t, uint64_t bm_off, uint32_t i, uint32_t count, int on)
{
	if (!count)
		return t->err;
	if (!chell_bm_log_run(t, bm_off, i, count) || chell_ptx_fence(t))
		return t->err;
	chell_bm_apply_run(t->heap, bm_off, i, count, on);
	return 0;
}

void *chell_bm_log_run(struct chell_ptx *t, uint64_t bm_off, uint32_t i, uint32_t count)
{
	uint32_t w0 = i / 64, w1 = (i + count - 1) / 64;
	return chell_ptx_log(t, bm_off + 8ull * w0, 8ull * (w1 - w0 + 1));
}

void chell_bm_apply_run(uint8_t *heap, uint64_t bm_off, uint32_t i, uint32_t count, int on)
{
	uint64_t *w = (uint64_t *)(heap + bm_off);
	for (uint32_t b = i; b < i + count; b++) {
		if (on)
			w[b / 64] |= 1ull << (b % 64);
		else
			w[b / 64] &= ~(1ull << (b % 64));
	}
}

/* ------------------------------------------------------------ tables */

uint64_t chell_hash64(uint64_t a, uint64_t b)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL) * 0xc2b2ae3d27d4eb4fULL;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 29;
	return x;
}

/* Undo-log the slots [from, from+n) (mod table size). */
static int hlog(struct chell_ptx *t, const struct chell_htab *h, uint32_t from, uint32_t n)
{
	uint32_t size = h->mask + 1, first = n < size - from ? n : size - from;
	if (!chell_ptx_add(t, h->off + (uint64_t)from * h->esize, (size_t)first * h->esize))
		return t->err;
	if (n > first && !chell_ptx_add(t, h->off, (size_t)(n - first) * h->esize))
		return t->err;
	return 0;
}

void *chell_htab_claim(struct chell_ptx *t, const struct chell_htab *h, uint32_t home, uint32_t *slot)
{
	uint32_t i = home & h->mask;
	for (uint32_t k = 0; k <= h->mask; k++, i = (i + 1) & h->mask) {
		if (!h->used(chell_htab_slot(h, i))) {
			void *e = chell_ptx_add(t, h->off + (uint64_t)i * h->esize, h->esize);
			if (e && slot)
				*slot = i;
			return e;
		}
	}
	if (!t->err)
		t->err = -EUCLEAN; /* full: the load bound was broken */
	return NULL;
}

int chell_htab_delete(struct chell_ptx *t, const struct chell_htab *h, uint32_t i)
{
	/* The cluster after i: it ends at the first empty slot. */
	uint32_t n = 1;
	while (n <= h->mask && h->used(chell_htab_slot(h, (i + n) & h->mask)))
		n++;
	if (n > h->mask)
		return t->err = -EUCLEAN; /* no empty slot: the load bound was broken */
	int rc = hlog(t, h, i, n);
	if (rc)
		return rc;
	uint32_t hole = i;
	for (uint32_t k = 1; k < n; k++) {
		uint32_t j = (i + k) & h->mask;
		void *e = chell_htab_slot(h, j);
		uint32_t home = h->home(h->ctx, e) & h->mask;
		/* e may move to the hole if its home is not cyclically in
		 * (hole, j]. */
		uint32_t dist_home = (j - home) & h->mask, dist_hole = (j - hole) & h->mask;
		if (dist_home >= dist_hole) {
			memcpy(chell_htab_slot(h, hole), e, h->esize);
			hole = j;
		}
	}
	memset(chell_htab_slot(h, hole), 0, h->esize);
	return 0;
}
