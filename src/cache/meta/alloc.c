/* SPDX-License-Identifier: MIT */
/*
 * The transaction wrapper every metadata update goes through, and the
 * persistent allocation bitmaps (Cnodes, cache chunks).
 */
#include "meta_internal.h"

int meta_fault_skip_undo;

int mtx_begin(struct meta *m, struct mtx *t)
{
	t->m = m;
	t->nadd = 0;
	t->err = chell_tx_begin(m->r, m->journal, &t->tx);
	return t->err;
}

void *mtx_add(struct mtx *t, uint64_t off, size_t len)
{
	if (t->err)
		return NULL;
	/* Offsets come from the validated layout; this is the last line of
	 * defence against an index that escaped a bounds check. */
	if (off > t->m->heap_size || len > t->m->heap_size - off) {
		t->err = -EUCLEAN;
		return NULL;
	}
	int rc = meta_fault_skip_undo && t->nadd == 1 ? 0 : chell_tx_add_range(t->tx, off, len);
	t->nadd++;
	if (rc < 0) {
		t->err = rc;
		return NULL;
	}
	return t->m->heap + off;
}

int mtx_end(struct mtx *t)
{
	if (t->err) {
		/* Nothing half-done stays: the undo log puts every byte back. */
		chell_tx_abort(t->tx);
		return t->err;
	}
	return chell_tx_commit(t->tx);
}

int bm_test(const struct meta *m, uint64_t bm_off, uint32_t i)
{
	const uint64_t *w = (const uint64_t *)(m->heap + bm_off);
	return (int)(w[i / 64] >> (i % 64) & 1);
}

uint32_t bm_find_clear(const struct meta *m, uint64_t bm_off, uint32_t n, uint32_t hint)
{
	const uint64_t *w = (const uint64_t *)(m->heap + bm_off);
	uint32_t words = (n + 63) / 64;
	if (hint >= n)
		hint = 0;
	/* Word at a time from the hint's word, wrapping once. */
	for (uint32_t k = 0; k <= words; k++) {
		uint32_t wi = (hint / 64 + k) % words;
		uint64_t free = ~w[wi];
		if (k == 0)
			free &= ~0ull << (hint % 64);
		while (free) {
			uint32_t i = wi * 64 + (uint32_t)__builtin_ctzll(free);
			if (i >= n)
				break;
			return i;
		}
	}
	return META_NONE;
}

int bm_set(struct mtx *t, uint64_t bm_off, uint32_t i, int on)
{
	uint64_t *w = mtx_add(t, bm_off + 8ull * (i / 64), 8);
	if (!w)
		return t->err;
	if (on)
		*w |= 1ull << (i % 64);
	else
		*w &= ~(1ull << (i % 64));
	return 0;
}
