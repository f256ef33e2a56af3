/* SPDX-License-Identifier: MIT */
/*
 * cache/meta/meta.h - the persistent metadata of cache mode (issue 5).
 *
 * Cache mode keeps data of files on slow storage in a pool on the fast
 * tier: a data file of N chunks of 2 MB, and this metadata, which lives in
 * the heap of a Chell region (chell/pmem.h) and changes only inside
 * chell_tx transactions. docs/CACHE_METADATA.md has the layout, the choice
 * of open-addressing hash tables, the transaction bounds and recovery.
 *
 *   Cnode      one per cached backing file: (dev, ino), path, size,
 *              mtime/ctime as last seen, flags
 *   I2C map    (dev, ino) -> Cnode
 *   C2F map    (Cnode, file chunk index) -> cache chunk slot
 *   chunks     allocation bitmap over the N cache chunks; per chunk its
 *              owner, a 512-bit valid bitmap (4 KB blocks holding data) and
 *              2-bit dirty states per block (bankshot section 4.3.2)
 *
 * Conventions as in the rest of Chell: 0 / a count, or a negative errno;
 * nothing aborts on bad input; offsets, never pointers, are stored, and
 * every one read back is bounds-checked (-EUCLEAN when the image is bad).
 * A struct meta is not thread-safe: the cache manager serialises calls.
 */
#ifndef CHELL_CACHE_META_H
#define CHELL_CACHE_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chell/chunk.h"
#include "chell/pmem.h"

#define META_MAGIC 0x3154454d48434143ULL /* "CACHMET1" */
#define META_VERSION 1
#define META_CHUNK_SHIFT CHELL_CHUNK_SHIFT             /* 2 MB chunks */
#define META_CHUNK_SIZE (1ull << META_CHUNK_SHIFT)
#define META_BLOCK_SIZE 4096u
#define META_BLOCKS 512u                 /* 4 KB blocks per chunk */
#define META_PATH_MAX 192u               /* bytes stored, NUL included */
#define META_NONE UINT32_MAX

/* Dirty state of one 4 KB block (two bits; bankshot Figure 7). */
enum meta_dstate {
	META_CLEAN = 0,
	META_DIRTY = 1,
	META_DIRTY_PRE_CHECKOUT = 2,  /* dirty when the cleaner checked it out */
	META_DIRTY_POST_CHECKOUT = 3, /* written again while checked out */
};

/* Cnode flags. */
#define META_CN_STALE 0x1u   /* backing file changed behind the cache */

/* Chunk flags. */
#define META_CH_CHECKEDOUT 0x1u

struct meta_geometry {
	uint32_t max_cnodes;   /* Cnode table size (>= 1) */
	uint32_t chunks;       /* cache chunks in the data file (>= 1) */
};

/* A set of 4 KB blocks of one chunk. */
struct meta_blocks {
	uint64_t bits[META_BLOCKS / 64];
};

struct meta_cnode_info {
	uint32_t id;           /* Cnode index, stable while it exists */
	uint32_t flags;
	uint64_t dev, ino;
	uint64_t size;
	int64_t mtime_ns, ctime_ns;
	uint32_t chunks;       /* cache chunks mapped */
	char path[META_PATH_MAX];
};

struct meta_chunk_info {
	uint32_t slot;         /* cache chunk index in the data file */
	uint32_t cnode;
	uint64_t file_chunk;   /* backing offset / 2 MB */
	uint32_t flags;
	uint64_t seq;          /* FIFO order: allocation sequence number */
	struct meta_blocks valid;
	uint32_t nvalid, ndirty; /* blocks valid; blocks in any non-CLEAN state */
};

struct meta_stats {
	uint32_t max_cnodes, cnodes;
	uint32_t chunks, chunks_used;
	uint64_t seq;          /* next allocation sequence number */
};

struct meta;

/* Heap bytes the metadata needs for a geometry (0 if too large). */
uint64_t meta_heap_size(const struct meta_geometry *g);

/* Format the metadata at heap offset 0 of an open region (the heap must be
 * at least meta_heap_size(g)); `journal` is the client journal used for
 * every transaction. Refuses (-EEXIST) a heap that already holds metadata.
 * The region stays the caller's. */
int meta_create(struct chell_region *r, unsigned journal, const struct meta_geometry *g,
		struct meta **out, char *err, size_t errlen);
/* Validate the root and every table offset and attach. */
int meta_open(struct chell_region *r, unsigned journal, struct meta **out, char *err, size_t errlen);
/* The same on a region file the handle owns (created sized to fit). */
int meta_create_path(const char *path, const struct meta_geometry *g, struct meta **out, char *err,
		     size_t errlen);
int meta_open_path(const char *path, struct meta **out, char *err, size_t errlen);
/* Detach (and close the region if the handle owns it). */
void meta_close(struct meta *m);

void meta_stats(const struct meta *m, struct meta_stats *st);

/* ---- Cnodes and the I2C map */

/* Find the Cnode of (dev, ino); with `create`, make one (path may be NULL;
 * -ENAMETOOLONG if it does not fit). Returns the Cnode id (>= 0), -ENOENT,
 * or -ENOSPC when the table is full. */
int meta_cnode_get(struct meta *m, uint64_t dev, uint64_t ino, bool create, const char *path);
int meta_cnode_info(struct meta *m, uint32_t cnode, struct meta_cnode_info *out);
/* Record the backing file's size and times as last seen (one transaction). */
int meta_cnode_set_attr(struct meta *m, uint32_t cnode, uint64_t size, int64_t mtime_ns,
			int64_t ctime_ns);
int meta_cnode_set_size(struct meta *m, uint32_t cnode, uint64_t size);
int meta_cnode_set_flags(struct meta *m, uint32_t cnode, uint32_t flags);
/* Remove a Cnode that maps no chunk (-EBUSY otherwise). */
int meta_cnode_remove(struct meta *m, uint32_t cnode);

/* ---- chunks and the C2F map */

/* The cache slot holding file chunk `file_chunk` of `cnode`, or -ENOENT. */
int meta_chunk_lookup(struct meta *m, uint32_t cnode, uint64_t file_chunk);
/* Allocate a cache chunk for it (or return the one it has). -ENOSPC when
 * every chunk is in use (the caller evicts and retries). */
int meta_chunk_map(struct meta *m, uint32_t cnode, uint64_t file_chunk);
/* Free a chunk; -EBUSY if any block is not CLEAN. */
int meta_chunk_unmap(struct meta *m, uint32_t slot);
int meta_chunk_info(struct meta *m, uint32_t slot, struct meta_chunk_info *out);

/* Blocks [first, first+count) of chunk `slot` now hold data (read fill). */
int meta_mark_valid(struct meta *m, uint32_t slot, unsigned first, unsigned count);
/* ... and were written: valid, and CLEAN->DIRTY, PRE->POST (DIRTY and
 * POST stay). */
int meta_mark_dirty(struct meta *m, uint32_t slot, unsigned first, unsigned count);
/* Dirty state of one block (enum meta_dstate), or -errno. */
int meta_block_state(struct meta *m, uint32_t slot, unsigned block);
/* Check out the dirty blocks for write-back: DIRTY->PRE_CHECKOUT; the
 * blocks moved go to *out. Returns their count; -EBUSY if the chunk is
 * already checked out. */
int meta_checkout(struct meta *m, uint32_t slot, struct meta_blocks *out);
/* Write-back done: PRE_CHECKOUT->CLEAN, POST_CHECKOUT->DIRTY. -EINVAL if
 * the chunk is not checked out. */
int meta_checkin(struct meta *m, uint32_t slot);
/* Write-back abandoned (e.g. a checkout found after a crash): PRE and
 * POST -> DIRTY, as if the checkout never happened. */
int meta_checkout_cancel(struct meta *m, uint32_t slot);

/* Dirty chunks (any block not CLEAN) in (cnode, file chunk) order: calls
 * fn for each until it returns nonzero (which is returned). */
typedef int (*meta_chunk_fn)(void *arg, const struct meta_chunk_info *c);
int meta_foreach_dirty(struct meta *m, meta_chunk_fn fn, void *arg);

/* ---- replacement (volatile, see the doc) */

/* A hit on chunk `slot`: it becomes the most recently used. */
void meta_chunk_touch(struct meta *m, uint32_t slot);
/* The least recently used mapped chunk with no dirty block (clean ones are
 * cheap to evict), or -ENOENT. */
int meta_victim(struct meta *m);

/* ---- checking */

/* Verify every invariant (bitmaps, maps, owners, counts, states); 0 or
 * -EUCLEAN with the first problem in err. Reads only. */
int meta_check(struct meta *m, char *err, size_t errlen);

#endif
