/* SPDX-License-Identifier: MIT */
/*
 * meta_check: every invariant that ties the maps, the allocators, the
 * counts and the dirty states together (what a crash must never break).
 * Reads only; the first problem found is described in err.
 */
#include "meta_internal.h"

#include <stdlib.h>

#define FAIL(...) do { meta_err(err, errlen, __VA_ARGS__); return -EUCLEAN; } while (0)

static int zero(const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

static int tail_clear(const struct meta *m, uint64_t bm_off, uint32_t n)
{
	const uint64_t *w = (const uint64_t *)(m->heap + bm_off);
	return n % 64 == 0 || (w[n / 64] >> (n % 64)) == 0;
}

static int check_cnodes(struct meta *m, const uint32_t *owned, char *err, size_t errlen)
{
	uint32_t used = 0;
	if (!tail_clear(m, m->cnode_bitmap_off, m->max_cnodes))
		FAIL("Cnode bitmap has bits past Cnode %u", m->max_cnodes);
	for (uint32_t id = 0; id < m->max_cnodes; id++) {
		const struct mcnode *c = cnode_at(m, id);
		if (!bm_test(m, m->cnode_bitmap_off, id)) {
			if (!zero(c, sizeof(*c)))
				FAIL("free Cnode %u is not empty", id);
			continue;
		}
		used++;
		if (memchr(c->path, '\0', META_PATH_MAX) == NULL)
			FAIL("Cnode %u: path not terminated", id);
		uint32_t s = i2c_find(m, c->dev, c->ino);
		if (s == META_NONE || i2c_at(m, s)->cnode1 != id + 1)
			FAIL("Cnode %u (dev %llu ino %llu) is not in the I2C map", id, (unsigned long long)c->dev,
			     (unsigned long long)c->ino);
		if (owned[id] != c->chunks)
			FAIL("Cnode %u counts %u chunks, owns %u", id, c->chunks, owned[id]);
	}
	if (used != m->root->cnodes)
		FAIL("root counts %u Cnodes, bitmap has %u", m->root->cnodes, used);
	uint32_t slots = 0;
	for (uint32_t i = 0; i <= m->i2c_mask; i++) {
		const struct mi2c *e = i2c_at(m, i);
		if (!e->cnode1) {
			if (!zero(e, sizeof(*e)))
				FAIL("empty I2C slot %u is not zero", i);
			continue;
		}
		slots++;
		uint32_t id = e->cnode1 - 1;
		if (id >= m->max_cnodes || !bm_test(m, m->cnode_bitmap_off, id))
			FAIL("I2C slot %u names free or bad Cnode %u", i, e->cnode1 - 1);
		if (cnode_at(m, id)->dev != e->dev || cnode_at(m, id)->ino != e->ino)
			FAIL("I2C slot %u key differs from Cnode %u", i, id);
		if (i2c_find(m, e->dev, e->ino) != i)
			FAIL("I2C slot %u unreachable by probing", i);
	}
	if (slots != used)
		FAIL("I2C map has %u entries for %u Cnodes", slots, used);
	return 0;
}

static int check_chunks(struct meta *m, char *err, size_t errlen)
{
	uint32_t used = 0;
	if (!tail_clear(m, m->chunk_bitmap_off, m->chunks))
		FAIL("chunk bitmap has bits past chunk %u", m->chunks);
	for (uint32_t s = 0; s < m->chunks; s++) {
		const struct mchunk *c = chunk_at(m, s);
		if (!bm_test(m, m->chunk_bitmap_off, s)) {
			if (!zero(c, sizeof(*c)))
				FAIL("free chunk %u has a descriptor", s);
			continue;
		}
		used++;
		uint32_t owner = c->cnode1 - 1;
		if (c->cnode1 == 0 || owner >= m->max_cnodes || !bm_test(m, m->cnode_bitmap_off, owner))
			FAIL("chunk %u is allocated but owned by free or bad Cnode %u", s, c->cnode1 - 1);
		if (c->flags & ~META_CH_CHECKEDOUT)
			FAIL("chunk %u has unknown flags 0x%x", s, c->flags);
		if (c->seq == 0 || c->seq >= m->root->seq)
			FAIL("chunk %u sequence %llu outside [1, %llu)", s, (unsigned long long)c->seq,
			     (unsigned long long)m->root->seq);
		uint32_t i = c2f_find(m, owner, c->file_chunk);
		if (i == META_NONE || c2f_at(m, i)->slot != s)
			FAIL("chunk %u (Cnode %u, file chunk %llu) is not in the C2F map", s, owner,
			     (unsigned long long)c->file_chunk);
		int out = 0;
		for (unsigned b = 0; b < META_BLOCKS; b++) {
			unsigned st = dstate_get(c, b);
			if (st != META_CLEAN && !(c->valid[b / 64] >> (b % 64) & 1))
				FAIL("chunk %u block %u is dirty but not valid", s, b);
			out |= st == META_DIRTY_PRE_CHECKOUT || st == META_DIRTY_POST_CHECKOUT;
		}
		if (out != !!(c->flags & META_CH_CHECKEDOUT))
			FAIL("chunk %u: checked-out flag %u but %s checked-out blocks", s,
			     c->flags & META_CH_CHECKEDOUT, out ? "has" : "no");
	}
	if (used != m->root->chunks_used)
		FAIL("root counts %u chunks in use, bitmap has %u", m->root->chunks_used, used);
	uint32_t entries = 0;
	for (uint32_t i = 0; i <= m->c2f_mask; i++) {
		const struct mc2f *e = c2f_at(m, i);
		if (!e->cnode1) {
			if (!zero(e, sizeof(*e)))
				FAIL("empty C2F slot %u is not zero", i);
			continue;
		}
		entries++;
		if (e->slot >= m->chunks || !bm_test(m, m->chunk_bitmap_off, e->slot))
			FAIL("C2F slot %u names free or bad chunk %u", i, e->slot);
		const struct mchunk *c = chunk_at(m, e->slot);
		if (c->cnode1 != e->cnode1 || c->file_chunk != e->file_chunk)
			FAIL("C2F slot %u key differs from chunk %u", i, e->slot);
		if (c2f_find(m, e->cnode1 - 1, e->file_chunk) != i)
			FAIL("C2F slot %u unreachable by probing", i);
	}
	if (entries != used)
		FAIL("C2F map has %u entries for %u chunks", entries, used);
	return 0;
}

int meta_check(struct meta *m, char *err, size_t errlen)
{
	if (!m)
		return -EINVAL;
	/* Allocation numbers start at 1 (meta_create) and only grow: a next
	 * number of 0 would hand out 0, which no chunk may have. */
	if (m->root->seq == 0) {
		meta_err(err, errlen, "root sequence is 0 (allocation numbers start at 1)");
		return -EUCLEAN;
	}
	/* Chunks per owner in one pass (not one pass per Cnode). */
	uint32_t *owned = calloc(m->max_cnodes, sizeof(uint32_t));
	if (!owned)
		return -ENOMEM;
	for (uint32_t s = 0; s < m->chunks; s++) {
		uint32_t o = chunk_at(m, s)->cnode1;
		if (o && o - 1 < m->max_cnodes)
			owned[o - 1]++;
	}
	int rc = check_cnodes(m, owned, err, errlen);
	free(owned);
	return rc < 0 ? rc : check_chunks(m, err, errlen);
}
