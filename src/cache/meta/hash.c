/* SPDX-License-Identifier: MIT */
/*
 * The I2C and C2F maps: the persistence core's open-addressing tables
 * (chell/pmtx.h) in tables of a power-of-two size at least twice the
 * number of keys they can ever hold (every Cnode / every cache chunk), so
 * the load stays <= 1/2 and a probe sequence is short
 * (docs/CACHE_METADATA.md).
 */
#include "meta_internal.h"

/* ------------------------------------------------------------ I2C */

static uint32_t i2c_home(void *ctx, const void *s)
{
	const struct mi2c *e = s;
	(void)ctx;
	return (uint32_t)meta_hash(e->dev, e->ino);
}
static int i2c_used(const void *s)
{
	return ((const struct mi2c *)s)->cnode1 != 0;
}
static struct chell_htab i2c_tab(struct meta *m)
{
	return (struct chell_htab){m->heap, m->i2c_off, sizeof(struct mi2c), m->i2c_mask, i2c_home, i2c_used, m};
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
	struct chell_htab h = i2c_tab(t->m);
	struct mi2c *e = chell_htab_claim(&t->p, &h, (uint32_t)meta_hash(dev, ino), NULL);
	if (!e)
		return t->p.err;
	*e = (struct mi2c){dev, ino, cnode + 1, 0};
	return 0;
}

int i2c_delete(struct mtx *t, uint32_t slot)
{
	struct chell_htab h = i2c_tab(t->m);
	return chell_htab_delete(&t->p, &h, slot);
}

/* ------------------------------------------------------------ C2F */

static uint32_t c2f_home(void *ctx, const void *s)
{
	const struct mc2f *e = s;
	(void)ctx;
	return (uint32_t)meta_hash(e->cnode1 - 1u, e->file_chunk);
}
static int c2f_used(const void *s)
{
	return ((const struct mc2f *)s)->cnode1 != 0;
}
static struct chell_htab c2f_tab(struct meta *m)
{
	return (struct chell_htab){m->heap, m->c2f_off, sizeof(struct mc2f), m->c2f_mask, c2f_home, c2f_used, m};
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
	struct chell_htab h = c2f_tab(t->m);
	struct mc2f *e = chell_htab_claim(&t->p, &h, (uint32_t)meta_hash(cnode, file_chunk), NULL);
	if (!e)
		return t->p.err;
	*e = (struct mc2f){cnode + 1, slot, file_chunk};
	return 0;
}

int c2f_delete(struct mtx *t, uint32_t slot)
{
	struct chell_htab h = c2f_tab(t->m);
	return chell_htab_delete(&t->p, &h, slot);
}
