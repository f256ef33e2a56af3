/* SPDX-License-Identifier: MIT */
/*
 * Cache chunks: allocation and the C2F map, valid bits, the two-bit dirty
 * states with check-out/check-in (bankshot section 4.3.2), dirty-chunk
 * iteration and the volatile replacement order.
 */
#include "meta_internal.h"

#include <stdlib.h>

/* A chunk slot the caller passed: in range and in use. */
static int chunk_valid(struct meta *m, uint32_t slot)
{
	if (!m || slot >= m->chunks)
		return -EINVAL;
	if (!bm_test(m, m->chunk_bitmap_off, slot))
		return -ENOENT;
	uint32_t owner = chunk_at(m, slot)->cnode1;
	if (owner == 0 || owner - 1 >= m->max_cnodes)
		return -EUCLEAN;
	return 0;
}

static int blocks_valid(unsigned first, unsigned count)
{
	return count >= 1 && first < META_BLOCKS && count <= META_BLOCKS - first;
}

static unsigned count_dirty(const struct mchunk *c)
{
	unsigned n = 0;
	for (unsigned w = 0; w < META_BLOCKS * 2 / 64; w++) {
		/* A block is dirty if either of its two bits is set. */
		uint64_t x = c->dstate[w];
		n += (unsigned)__builtin_popcountll((x | x >> 1) & 0x5555555555555555ull);
	}
	return n;
}

int meta_chunk_lookup(struct meta *m, uint32_t cnode, uint64_t file_chunk)
{
	if (!m || cnode >= m->max_cnodes)
		return -EINVAL;
	uint32_t i = c2f_find(m, cnode, file_chunk);
	if (i == META_NONE)
		return -ENOENT;
	uint32_t slot = c2f_at(m, i)->slot;
	if (slot >= m->chunks)
		return -EUCLEAN;
	return (int)slot;
}

int meta_chunk_map(struct meta *m, uint32_t cnode, uint64_t file_chunk)
{
	if (!m || cnode >= m->max_cnodes)
		return -EINVAL;
	if (!bm_test(m, m->cnode_bitmap_off, cnode))
		return -ENOENT;
	int have = meta_chunk_lookup(m, cnode, file_chunk);
	if (have != -ENOENT)
		return have;
	struct mroot *root = m->root;
	if (root->chunks_used >= m->chunks)
		return -ENOSPC;
	/* Sequence numbers are never reused (FIFO order, incarnations):
	 * after 2^64 - 2 allocations there is no next one. */
	if (root->seq == UINT64_MAX)
		return -EOVERFLOW;
	uint32_t slot = bm_find_clear(m, m->chunk_bitmap_off, m->chunks, m->alloc_hint);
	if (slot == META_NONE)
		return -EUCLEAN;
	struct mcnode *cn = cnode_at(m, cnode);

	struct mtx t;
	int rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	uint64_t seq = root->seq;
	bm_set(&t, m->chunk_bitmap_off, slot, 1);
	struct mchunk *c = mtx_add(&t, m->chunk_off + (uint64_t)slot * sizeof(*c), sizeof(*c));
	if (c) {
		memset(c, 0, sizeof(*c));
		c->cnode1 = cnode + 1;
		c->file_chunk = file_chunk;
		c->seq = seq;
	}
	if (!t.p.err)
		c2f_insert(&t, cnode, file_chunk, slot);
	if (mtx_add(&t, meta_off(m, &cn->chunks), sizeof(cn->chunks)))
		cn->chunks++;
	/* chunks_used and seq are neighbours: one range. */
	if (mtx_add(&t, meta_off(m, &root->chunks_used), offsetof(struct mroot, seq) + 8 -
						      offsetof(struct mroot, chunks_used))) {
		root->chunks_used++;
		root->seq = seq + 1;
	}
	rc = mtx_end(&t);
	if (rc < 0)
		return rc;
	m->alloc_hint = slot + 1;
	m->lru[slot] = ++m->clock;
	return (int)slot;
}

int meta_chunk_unmap(struct meta *m, uint32_t slot)
{
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	struct mchunk *c = chunk_at(m, slot);
	if (count_dirty(c) || (c->flags & META_CH_CHECKEDOUT))
		return -EBUSY;
	uint32_t cnode = c->cnode1 - 1;
	uint32_t i = c2f_find(m, cnode, c->file_chunk);
	struct mcnode *cn = cnode_at(m, cnode);
	if (i == META_NONE || c2f_at(m, i)->slot != slot || cn->chunks == 0 || m->root->chunks_used == 0)
		return -EUCLEAN;

	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	c2f_delete(&t, i);
	bm_set(&t, m->chunk_bitmap_off, slot, 0);
	if (mtx_add(&t, meta_off(m, c), sizeof(*c)))
		memset(c, 0, sizeof(*c));
	if (mtx_add(&t, meta_off(m, &cn->chunks), sizeof(cn->chunks)))
		cn->chunks--;
	if (mtx_add(&t, meta_off(m, &m->root->chunks_used), sizeof(uint32_t)))
		m->root->chunks_used--;
	rc = mtx_end(&t);
	if (rc == 0)
		m->lru[slot] = 0;
	return rc;
}

int meta_chunk_info(struct meta *m, uint32_t slot, struct meta_chunk_info *out)
{
	if (!out)
		return -EINVAL;
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	const struct mchunk *c = chunk_at(m, slot);
	out->slot = slot;
	out->cnode = c->cnode1 - 1;
	out->file_chunk = c->file_chunk;
	out->flags = c->flags;
	out->seq = c->seq;
	memcpy(out->valid.bits, c->valid, sizeof(out->valid.bits));
	out->nvalid = 0;
	for (unsigned w = 0; w < META_BLOCKS / 64; w++)
		out->nvalid += (uint32_t)__builtin_popcountll(c->valid[w]);
	out->ndirty = count_dirty(c);
	return 0;
}

/* valid[] and dstate[] are adjacent: log them as one range. */
static struct mchunk *log_bits(struct mtx *t, struct mchunk *c, int with_flags)
{
	size_t from = with_flags ? offsetof(struct mchunk, flags) : offsetof(struct mchunk, valid);
	size_t to = offsetof(struct mchunk, dstate) + sizeof(c->dstate);
	if (!mtx_add(t, meta_off(t->m, c) + from, to - from))
		return NULL;
	return c;
}

static int set_blocks(struct meta *m, uint32_t slot, unsigned first, unsigned count, int dirty)
{
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	if (!blocks_valid(first, count))
		return -EINVAL;
	struct mchunk *c = chunk_at(m, slot);
	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	if (log_bits(&t, c, 0)) {
		for (unsigned b = first; b < first + count; b++) {
			c->valid[b / 64] |= 1ull << (b % 64);
			if (!dirty)
				continue;
			/* The paper's write transitions: a block checked out
			 * for write-back and written again must stay dirty
			 * after check-in. */
			unsigned s = dstate_get(c, b);
			if (s == META_CLEAN)
				dstate_set(c, b, META_DIRTY);
			else if (s == META_DIRTY_PRE_CHECKOUT)
				dstate_set(c, b, META_DIRTY_POST_CHECKOUT);
		}
	}
	rc = mtx_end(&t);
	if (rc == 0)
		m->lru[slot] = ++m->clock;
	return rc;
}

int meta_mark_valid(struct meta *m, uint32_t slot, unsigned first, unsigned count)
{
	return set_blocks(m, slot, first, count, 0);
}

int meta_mark_dirty(struct meta *m, uint32_t slot, unsigned first, unsigned count)
{
	return set_blocks(m, slot, first, count, 1);
}

int meta_block_state(struct meta *m, uint32_t slot, unsigned block)
{
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	if (block >= META_BLOCKS)
		return -EINVAL;
	return (int)dstate_get(chunk_at(m, slot), block);
}

int meta_checkout(struct meta *m, uint32_t slot, struct meta_blocks *out)
{
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	struct mchunk *c = chunk_at(m, slot);
	if (c->flags & META_CH_CHECKEDOUT)
		return -EBUSY;
	if (out)
		memset(out, 0, sizeof(*out));
	int n = 0;
	for (unsigned b = 0; b < META_BLOCKS; b++)
		n += dstate_get(c, b) == META_DIRTY;
	if (n == 0)
		return 0; /* nothing to write back: no check-out to end */
	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	if (log_bits(&t, c, 1)) {
		c->flags |= META_CH_CHECKEDOUT;
		for (unsigned b = 0; b < META_BLOCKS; b++) {
			if (dstate_get(c, b) != META_DIRTY)
				continue;
			dstate_set(c, b, META_DIRTY_PRE_CHECKOUT);
			if (out)
				out->bits[b / 64] |= 1ull << (b % 64);
		}
	}
	rc = mtx_end(&t);
	return rc < 0 ? rc : n;
}

/* End a check-out: `pre` is what PRE_CHECKOUT blocks become (CLEAN after
 * a write-back, DIRTY when it is abandoned); POST_CHECKOUT always -> DIRTY. */
static int checkout_end(struct meta *m, uint32_t slot, unsigned pre)
{
	int rc = chunk_valid(m, slot);
	if (rc < 0)
		return rc;
	struct mchunk *c = chunk_at(m, slot);
	if (!(c->flags & META_CH_CHECKEDOUT))
		return -EINVAL;
	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	if (log_bits(&t, c, 1)) {
		c->flags &= ~META_CH_CHECKEDOUT;
		for (unsigned b = 0; b < META_BLOCKS; b++) {
			unsigned s = dstate_get(c, b);
			if (s == META_DIRTY_PRE_CHECKOUT)
				dstate_set(c, b, pre);
			else if (s == META_DIRTY_POST_CHECKOUT)
				dstate_set(c, b, META_DIRTY);
		}
	}
	return mtx_end(&t);
}

int meta_checkin(struct meta *m, uint32_t slot)
{
	return checkout_end(m, slot, META_CLEAN);
}

int meta_checkout_cancel(struct meta *m, uint32_t slot)
{
	return checkout_end(m, slot, META_DIRTY);
}

/* ------------------------------------------------------------ iteration */

static int by_owner_offset(const void *a, const void *b, void *arg)
{
	struct meta *m = arg;
	const struct mchunk *x = chunk_at(m, *(const uint32_t *)a), *y = chunk_at(m, *(const uint32_t *)b);
	if (x->cnode1 != y->cnode1)
		return x->cnode1 < y->cnode1 ? -1 : 1;
	if (x->file_chunk != y->file_chunk)
		return x->file_chunk < y->file_chunk ? -1 : 1;
	return 0;
}

int meta_foreach_dirty(struct meta *m, meta_chunk_fn fn, void *arg)
{
	if (!m || !fn)
		return -EINVAL;
	uint32_t *v = malloc(sizeof(uint32_t) * m->chunks), n = 0;
	if (!v)
		return -ENOMEM;
	for (uint32_t s = 0; s < m->chunks; s++)
		if (chunk_valid(m, s) == 0 && count_dirty(chunk_at(m, s)))
			v[n++] = s;
	qsort_r(v, n, sizeof(*v), by_owner_offset, m);
	int rc = 0;
	struct meta_chunk_info ci;
	for (uint32_t k = 0; k < n && rc == 0; k++) {
		meta_chunk_info(m, v[k], &ci);
		rc = fn(arg, &ci);
	}
	free(v);
	return rc;
}

/* ------------------------------------------------------------ replacement */

void meta_chunk_touch(struct meta *m, uint32_t slot)
{
	if (m && slot < m->chunks)
		m->lru[slot] = ++m->clock;
}

int meta_victim(struct meta *m)
{
	if (!m)
		return -EINVAL;
	uint32_t best = META_NONE;
	for (uint32_t s = 0; s < m->chunks; s++) {
		if (chunk_valid(m, s) < 0)
			continue;
		const struct mchunk *c = chunk_at(m, s);
		if ((c->flags & META_CH_CHECKEDOUT) || count_dirty(c))
			continue;
		if (best == META_NONE || m->lru[s] < m->lru[best])
			best = s;
	}
	return best == META_NONE ? -ENOENT : (int)best;
}
