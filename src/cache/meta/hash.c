/* SPDX-License-Identifier: MIT */
/*
 * The I2C and C2F maps: open addressing with linear probing in tables of
 * a power-of-two size at least twice the number of keys they can ever
 * hold (every Cnode / every cache chunk), so the load stays <= 1/2 and a
 * probe sequence is short. Deletion shifts the rest of the cluster back
 * instead of leaving tombstones, so lookups never degrade over time; the
 * slots it moves form one contiguous run (two when it wraps), logged with
 * one add_range each - a transaction's size is bounded by the cluster
 * length, not by the table (docs/CACHE_METADATA.md).
 */
#include "meta_internal.h"

uint64_t meta_hash(uint64_t a, uint64_t b)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL) * 0xc2b2ae3d27d4eb4fULL;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 29;
	return x;
}

/* ------------------------------------------------------------ generic */

struct htab {
	uint64_t off;       /* heap offset of slot 0 */
	size_t esize;
	uint32_t mask;
	uint32_t (*home)(struct meta *m, const void *slot);
	int (*used)(const void *slot);
};

static void *hslot(struct meta *m, const struct htab *h, uint32_t i)
{
	return m->heap + h->off + (uint64_t)i * h->esize;
}

/* Undo-log the slots [from, from+n) (mod table size). */
static int hlog(struct mtx *t, const struct htab *h, uint32_t from, uint32_t n)
{
	uint32_t size = h->mask + 1, first = n < size - from ? n : size - from;
	if (!mtx_add(t, h->off + (uint64_t)from * h->esize, (size_t)first * h->esize))
		return t->err;
	if (n > first && !mtx_add(t, h->off, (size_t)(n - first) * h->esize))
		return t->err;
	return 0;
}

/* Remove slot i, shifting later members of its cluster back into holes
 * their home position allows (Knuth 6.4, algorithm R). */
static int hdelete(struct mtx *t, const struct htab *h, uint32_t i)
{
	struct meta *m = t->m;
	/* The cluster after i: it ends at the first empty slot. */
	uint32_t n = 1;
	while (n <= h->mask && h->used(hslot(m, h, (i + n) & h->mask)))
		n++;
	if (n > h->mask)
		return t->err = -EUCLEAN; /* no empty slot: the load bound was broken */
	int rc = hlog(t, h, i, n);
	if (rc)
		return rc;
	uint32_t hole = i;
	for (uint32_t k = 1; k < n; k++) {
		uint32_t j = (i + k) & h->mask;
		void *e = hslot(m, h, j);
		uint32_t home = h->home(m, e) & h->mask;
		/* e may move to the hole if its home is not cyclically in
		 * (hole, j]. */
		uint32_t dist_home = (j - home) & h->mask, dist_hole = (j - hole) & h->mask;
		if (dist_home >= dist_hole) {
			memcpy(hslot(m, h, hole), e, h->esize);
			hole = j;
		}
	}
	memset(hslot(m, h, hole), 0, h->esize);
	return 0;
}

/* ------------------------------------------------------------ I2C */

static uint32_t i2c_home(struct meta *m, const void *s)
{
	const struct mi2c *e = s;
	return (uint32_t)meta_hash(e->dev, e->ino);
}
static int i2c_used(const void *s)
{
	return ((const struct mi2c *)s)->cnode1 != 0;
}
static struct htab i2c_tab(struct meta *m)
{
	return (struct htab){m->i2c_off, sizeof(struct mi2c), m->i2c_mask, i2c_home, i2c_used};
}

uint32_t i2c_find(struct meta *m, uint64_t dev, uint64_t ino)
{
	uint32_t i = (uint32_t)meta_hash(dev, ino) & m->i2c_mask;
	for (uint32_t k = 0; k <= m->i2c_mask; k++, i = (i + 1) & m->i2c_mask) {
		struct mi2c *e = i2c_at(m, i);
		if (!e->cnode1)
			return META_NONE;
		if (e->dev == dev && e->ino == ino)
			return i;
	}
	return META_NONE;
}

int i2c_insert(struct mtx *t, uint64_t dev, uint64_t ino, uint32_t cnode)
{
	struct meta *m = t->m;
	uint32_t i = (uint32_t)meta_hash(dev, ino) & m->i2c_mask;
	for (uint32_t k = 0; k <= m->i2c_mask; k++, i = (i + 1) & m->i2c_mask) {
		if (!i2c_at(m, i)->cnode1) {
			struct mi2c *e = mtx_add(t, m->i2c_off + (uint64_t)i * sizeof(*e), sizeof(*e));
			if (!e)
				return t->err;
			*e = (struct mi2c){dev, ino, cnode + 1, 0};
			return 0;
		}
	}
	return t->err = -EUCLEAN; /* full: the load bound was broken */
}

int i2c_delete(struct mtx *t, uint32_t slot)
{
	struct htab h = i2c_tab(t->m);
	return hdelete(t, &h, slot);
}

/* ------------------------------------------------------------ C2F */

static uint32_t c2f_home(struct meta *m, const void *s)
{
	const struct mc2f *e = s;
	return (uint32_t)meta_hash(e->cnode1 - 1u, e->file_chunk);
}
static int c2f_used(const void *s)
{
	return ((const struct mc2f *)s)->cnode1 != 0;
}
static struct htab c2f_tab(struct meta *m)
{
	return (struct htab){m->c2f_off, sizeof(struct mc2f), m->c2f_mask, c2f_home, c2f_used};
}

uint32_t c2f_find(struct meta *m, uint32_t cnode, uint64_t file_chunk)
{
	uint32_t i = (uint32_t)meta_hash(cnode, file_chunk) & m->c2f_mask;
	for (uint32_t k = 0; k <= m->c2f_mask; k++, i = (i + 1) & m->c2f_mask) {
		struct mc2f *e = c2f_at(m, i);
		if (!e->cnode1)
			return META_NONE;
		if (e->cnode1 == cnode + 1 && e->file_chunk == file_chunk)
			return i;
	}
	return META_NONE;
}

int c2f_insert(struct mtx *t, uint32_t cnode, uint64_t file_chunk, uint32_t slot)
{
	struct meta *m = t->m;
	uint32_t i = (uint32_t)meta_hash(cnode, file_chunk) & m->c2f_mask;
	for (uint32_t k = 0; k <= m->c2f_mask; k++, i = (i + 1) & m->c2f_mask) {
		if (!c2f_at(m, i)->cnode1) {
			struct mc2f *e = mtx_add(t, m->c2f_off + (uint64_t)i * sizeof(*e), sizeof(*e));
			if (!e)
				return t->err;
			*e = (struct mc2f){cnode + 1, slot, file_chunk};
			return 0;
		}
	}
	return t->err = -EUCLEAN; /* full: the load bound was broken */
}

int c2f_delete(struct mtx *t, uint32_t slot)
{
	struct htab h = c2f_tab(t->m);
	return hdelete(t, &h, slot);
}
