/* SPDX-License-Identifier: MIT */
/*
 * On-media structures of the cache metadata and the helpers the files of
 * src/cache/meta share. All offsets are heap offsets; zero bytes mean
 * "empty" everywhere, so a zeroed heap plus a root is an empty cache.
 */
#ifndef CHELL_CACHE_META_INTERNAL_H
#define CHELL_CACHE_META_INTERNAL_H

#include "meta.h"

#include <chell/pmtx.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Root, at heap offset 0 (one 256-byte object). */
struct mroot {
	uint64_t magic;
	uint32_t version, reserved0;
	uint32_t max_cnodes, chunks;
	uint32_t i2c_slots, c2f_slots;   /* powers of two */
	uint32_t cnodes, chunks_used;    /* counts */
	uint64_t seq;                    /* next chunk allocation number */
	uint64_t cnode_bitmap_off, cnode_off, i2c_off;
	uint64_t chunk_bitmap_off, chunk_off, c2f_off;
	uint64_t end;                    /* first byte after the tables */
	uint8_t reserved[256 - 104];
};

/* Cnode: 256 bytes. */
struct mcnode {
	uint64_t dev, ino;
	uint64_t size;
	int64_t mtime_ns, ctime_ns;
	uint32_t flags, chunks;
	uint8_t reserved[16];
	char path[META_PATH_MAX];
};

/* I2C slot: cnode1 = Cnode id + 1, 0 = empty. */
struct mi2c {
	uint64_t dev, ino;
	uint32_t cnode1, reserved;
};

/* Chunk descriptor: 256 bytes. cnode1 = owner + 1, 0 = free. */
struct mchunk {
	uint32_t cnode1, flags;
	uint64_t file_chunk;
	uint64_t seq;
	uint64_t reserved;
	uint64_t valid[META_BLOCKS / 64];
	uint64_t dstate[META_BLOCKS * 2 / 64]; /* 2 bits per block */
	uint8_t pad[256 - 32 - 64 - 128];
};

/* C2F slot: cnode1 = owner + 1, 0 = empty. */
struct mc2f {
	uint32_t cnode1, slot;
	uint64_t file_chunk;
};

_Static_assert(sizeof(struct mroot) == 256, "root size");
_Static_assert(sizeof(struct mcnode) == 256, "cnode size");
_Static_assert(sizeof(struct mi2c) == 24, "i2c slot size");
_Static_assert(sizeof(struct mchunk) == 256, "chunk size");
_Static_assert(sizeof(struct mc2f) == 16, "c2f slot size");

struct meta {
	struct chell_region *r;
	int own_region;
	unsigned journal;
	uint8_t *heap;
	uint64_t heap_size;
	struct mroot *root;
	/* The layout as validated at open (never re-read from media). */
	uint32_t max_cnodes, chunks, i2c_mask, c2f_mask;
	uint64_t cnode_bitmap_off, cnode_off, i2c_off;
	uint64_t chunk_bitmap_off, chunk_off, c2f_off;
	/* Volatile replacement state: last-access stamp per chunk. */
	uint64_t *lru;
	uint64_t clock;
	uint32_t alloc_hint;
};

/* The transaction of one metadata operation: the persistence core's
 * sticky-error wrapper (chell/pmtx.h) plus the metadata it works on. */
struct mtx {
	struct chell_ptx p;
	struct meta *m;
};

static inline int mtx_begin(struct meta *m, struct mtx *t)
{
	t->m = m;
	return chell_ptx_begin(&t->p, m->r, m->journal);
}
/* Undo-log [off, off+len) and return a pointer to modify it (NULL and
 * t->p.err set on failure; later calls then fail too). */
static inline void *mtx_add(struct mtx *t, uint64_t off, size_t len)
{
	return chell_ptx_add(&t->p, off, len);
}
/* Commit if everything succeeded, abort otherwise. */
static inline int mtx_end(struct mtx *t)
{
	return chell_ptx_end(&t->p);
}

static inline uint64_t meta_off(const struct meta *m, const void *p)
{
	return (uint64_t)((const uint8_t *)p - m->heap);
}
static inline struct mcnode *cnode_at(struct meta *m, uint32_t i)
{
	return (struct mcnode *)(m->heap + m->cnode_off) + i;
}
static inline struct mchunk *chunk_at(struct meta *m, uint32_t i)
{
	return (struct mchunk *)(m->heap + m->chunk_off) + i;
}
static inline struct mi2c *i2c_at(struct meta *m, uint32_t i)
{
	return (struct mi2c *)(m->heap + m->i2c_off) + i;
}
static inline struct mc2f *c2f_at(struct meta *m, uint32_t i)
{
	return (struct mc2f *)(m->heap + m->c2f_off) + i;
}

/* Persistent bitmaps (bit set = in use), chell/pmtx.h. */
static inline int bm_test(const struct meta *m, uint64_t bm_off, uint32_t i)
{
	return chell_bm_test(m->heap, bm_off, i);
}
static inline uint32_t bm_find_clear(const struct meta *m, uint64_t bm_off, uint32_t n, uint32_t hint)
{
	return chell_bm_find_clear(m->heap, bm_off, n, hint);
}
static inline int bm_set(struct mtx *t, uint64_t bm_off, uint32_t i, int on)
{
	return chell_bm_set(&t->p, bm_off, i, on);
}

/* hash.c: the two open-addressing maps (linear probing, backward-shift
 * deletion). Lookups return the slot index or META_NONE. */
uint32_t i2c_find(struct meta *m, uint64_t dev, uint64_t ino);
int i2c_insert(struct mtx *t, uint64_t dev, uint64_t ino, uint32_t cnode);
int i2c_delete(struct mtx *t, uint32_t slot);
uint32_t c2f_find(struct meta *m, uint32_t cnode, uint64_t file_chunk);
int c2f_insert(struct mtx *t, uint32_t cnode, uint64_t file_chunk, uint32_t slot);
int c2f_delete(struct mtx *t, uint32_t slot);
#define meta_hash chell_hash64

/* Dirty-state helpers (chunk.c). */
static inline unsigned dstate_get(const struct mchunk *c, unsigned b)
{
	return (unsigned)(c->dstate[b / 32] >> (2 * (b % 32))) & 3u;
}
static inline void dstate_set(struct mchunk *c, unsigned b, unsigned s)
{
	uint64_t sh = 2 * (b % 32);
	c->dstate[b / 32] = (c->dstate[b / 32] & ~(3ull << sh)) | ((uint64_t)s << sh);
}

#define meta_err(err, errlen, ...) do { if ((err) && (errlen)) snprintf((err), (errlen), __VA_ARGS__); } while (0)

#endif
