/* SPDX-License-Identifier: MIT */
/*
 * The direct handler (Quill / Chell-Direct): files on a fast tier (tmpfs,
 * DAX) are mapped into the process in chunks, and read/write become memcpy
 * on the mapping with no system call in the common case.
 *
 * It sits on the mapped-file base (../mapped/base.h), which has the
 * offsets, sizes, argument checks, the chunk table, the fault guard and the
 * counters; this folder is direct's policy:
 *
 *   direct.c   the handler operations: where writes and appends go, holes,
 *              the kernel fallbacks, fsync on persistent memory
 *   map.c      per-process chunk mappings of each file (a chunk's memory)
 *   zerocopy.c chell_get_write_buf / chell_commit_write_buf (the reads:
 *              direct.c)
 */
#ifndef CHELL_DIRECT_H
#define CHELL_DIRECT_H

#include <string.h>

#include "../../nib/nib.h"
#include "../mapped/base.h"

/* ---- map.c: the chunks of one file mapped in this process */
struct direct_map {
	uint64_t dev, ino;
	int refs;                     /* chell_files of this process using it */
	int writable;                 /* mapped PROT_WRITE */
	int map_sync;                 /* MAP_SYNC: stores persist once flushed */
	const struct chell_persist_ops *persist; /* the persistence core's (copy.c) */
	uint32_t hole_gen;            /* inode->hole_gen the chunk flags were checked against */
	uint32_t extent_gen;          /* hole_gen when [data_lo, data_hi) was seen all data */
	uint64_t data_lo, data_hi;
	int retired;                  /* a lease was taken: no chunk is mapped any more */
	uint64_t chunks_mapped;       /* mmaps made (under maps_lock) */
	/* Reads the kernel still serves before the first chunk is mapped
	 * (direct.map_after): a file opened for a read or two and closed
	 * never pays for a mapping. Once any chunk is mapped (a write,
	 * zero-copy, the budget spent) it is 0 for good. */
	_Atomic uint32_t kernel_reads_left;
	void **reserved;              /* retired chunks' address ranges (PROT_NONE) */
	size_t nreserved;
	struct direct_map *next;
	struct mapped_table chunks;   /* chunk k: its mapping (base.h) */
};
extern unsigned int direct_chunk_shift;  /* log2(chunk size) */
extern int direct_populate;
extern uint32_t direct_map_after;       /* direct.map_after */
extern int direct_map_sync_mode;        /* 0 off, 1 auto, 2 on */
struct direct_map *direct_map_get(int fd, uint64_t dev, uint64_t ino, int want_write, int *err);
void direct_map_put(struct direct_map *m);
/* The application takes a lease on (dev, ino) (mapped_takes_lease): this
 * process's mapping of it, if any, lets go of the file for good. */
void direct_map_retire(uint64_t dev, uint64_t ino);
/* Address of file offset `off`, mapping its chunk if needed; NULL on failure. */
unsigned char *direct_map_chunk_slow(struct direct_map *m, int fd, uint64_t chunk);
void direct_map_after_fork(void);

/*
 * Holes. On tmpfs any fault on a mapped hole allocates a page, even a read,
 * and MAP_POPULATE on a writable mapping faults in every page: mapped reads
 * would silently fill sparse files (memory, SEEK_HOLE, st_blocks). So a
 * chunk that may contain holes is flagged DIRECT_SPARSE: reads there ask
 * the kernel where the data is, and are served from the mapping only if
 * the whole range is data, else by the kernel, which reads holes as zeros
 * without allocating. Writes allocate exactly the pages they touch, as
 * write() does.
 */
#define DIRECT_SPARSE 1u

/* The chunk record for `off`; NULL if no chunk near it was ever mapped. */
static inline struct mapped_chunk *direct_entry(struct direct_map *m, uint64_t off)
{
	return mapped_chunk_of(&m->chunks, off >> direct_chunk_shift);
}
/* Flag every mapped chunk as possibly sparse (holes were made). */
void direct_map_mark_all_sparse(struct direct_map *m);
/* The chunk holding `off` is known hole-free: unflag. */
void direct_map_set_dense(struct direct_map *m, uint64_t off);

static inline unsigned char *direct_addr(struct direct_map *m, uint64_t off)
{
	struct mapped_chunk *e = direct_entry(m, off);
	unsigned char *base = e ? atomic_load_explicit(&e->base, memory_order_acquire) : NULL;
	return base ? base + (off & ((1ull << direct_chunk_shift) - 1)) : NULL;
}

extern size_t direct_nt_threshold;

#define DSTAT(field, n) MSTAT(MAPPED_STATS_DIRECT, field, n)
static inline struct mapped_stats *direct_stats_tls(void)
{
	return mapped_stats_tls(MAPPED_STATS_DIRECT);
}

/* ---- direct.c */
extern const struct chell_handler chell_direct_handler;
extern const struct chell_fast_ops direct_fast_ops; /* fast.c */
/* The kernel keeps the offset of a description with these status flags
 * (O_APPEND, unless direct.lazy_size): mapped_ops.kernel_offset. */
extern int direct_lazy_size; /* direct.lazy_size */
static inline bool direct_kernel_offset(int st)
{
	return (st & O_APPEND) && !direct_lazy_size;
}
/* A write at pos that grows the file: the kernel's pwrite under the inode
 * lock, the shared size after it (direct.c; fast.c's shortcut too). */
ssize_t direct_grow_write(struct mapped_inode *in, int fd, const struct iovec *iov, int cnt,
			  uint64_t pos, int rwf);
/* zerocopy.c: the get_write_buf / commit_write_buf methods */
ssize_t direct_get_write_buf(chell_ctx *c, void **buf, size_t count);
ssize_t direct_commit_write_buf(chell_ctx *c, const void *buf, size_t len);

#endif
