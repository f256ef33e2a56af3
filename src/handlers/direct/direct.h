/* SPDX-License-Identifier: MIT */
/*
 * The direct handler (Quill / Chell-Direct): files on a fast tier (tmpfs,
 * DAX) are mapped into the process in chunks, and read/write become memcpy
 * on the mapping with no system call in the common case.
 *
 *   direct.c   the handler operations (offsets, sizes, O_APPEND, fallbacks)
 *   inode.c    per-file state shared by the process tree (size, append lock)
 *   map.c      per-process chunk mappings of each file
 *   copy.c     fault-tolerant copies and cache-line flushing
 *   api.c      chell_get_read_buf / chell_get_write_buf
 *   stats.c    per-process counters
 */
#ifndef CHELL_DIRECT_H
#define CHELL_DIRECT_H

#include <string.h>

#include "../../nib/nib.h"
#include "../mapped.h"

/* ---- inode.c: one entry per file open in direct mode anywhere in the tree */
struct direct_inode {
	uint64_t dev, ino;
	uint64_t size;          /* the file size as Chell last set or saw it (atomic) */
	uint32_t opens;         /* OFDs in direct mode on this file (tree-wide) */
	uint32_t used;          /* 0 never used, 1 in use, 2 removed */
	struct chell_lock lock; /* size changes and O_APPEND writes */
	uint32_t hole_gen;      /* bumped when Chell may have made holes (atomic) */
	struct mapped_times times; /* atime/mtime updates owed to the kernel (mapped.h) */
	/* direct.lazy_size: the kernel's size while it is ahead of `size` (the
	 * file was grown in a step and the exact size is not published yet);
	 * 0 when the kernel's size is `size`. Changed under `lock`; while it is
	 * set the kernel's size is not asked (direct_inode_refresh). (atomic) */
	uint64_t ksize;
	/* A descriptor of the tree writes this file through the kernel (O_DIRECT,
	 * escaped): it would append at the kernel's size, so no more steps. */
	uint32_t nolazy;
};
int direct_inode_init(void);
struct direct_inode *direct_inode_get(uint64_t dev, uint64_t ino, uint64_t kernel_size);
void direct_inode_put(struct direct_inode *in);
/* Re-read the size from the kernel (another process may have changed it);
 * with a lazy size outstanding (ksize), the size as Chell has it. */
uint64_t direct_inode_refresh(struct direct_inode *in, int fd);
void direct_inode_set_size(uint64_t dev, uint64_t ino, uint64_t size);
/* The tree's entry of (dev, ino) if the file is open in the tree, without
 * a reference (entries never move; check dev/ino under its lock). */
struct direct_inode *direct_inode_find(uint64_t dev, uint64_t ino);
extern int direct_lazy_size; /* direct.lazy_size */
/* direct.lazy_size: writes past the end from this size on are the kernel's
 * pwrite inside the step, not copies (direct.c, lazy_store) */
#define LAZY_COPY_MAX 1024
/* A descriptor (fd, maybe not writable) of (dev, ino) uses the kernel's
 * path: publish the exact size if a step is outstanding, and take none
 * from now on (direct.lazy_size). */
void direct_inode_kernel_user(uint64_t dev, uint64_t ino, int fd);

/* ---- map.c: the chunks of one file mapped in this process */
#define DIRECT_L2_BITS 10
#define DIRECT_L1_SIZE 1024
typedef unsigned char *_Atomic direct_chunk_ptr;
struct direct_map {
	uint64_t dev, ino;
	int refs;                     /* chell_files of this process using it */
	int writable;                 /* mapped PROT_WRITE */
	int map_sync;                 /* MAP_SYNC: stores persist once flushed */
	uint32_t hole_gen;            /* inode->hole_gen the chunk flags were checked against */
	uint32_t extent_gen;          /* hole_gen when [data_lo, data_hi) was seen all data */
	uint64_t data_lo, data_hi;
	int retired;                  /* a lease was taken: no chunk is mapped any more */
	void **reserved;              /* retired chunks' address ranges (PROT_NONE) */
	size_t nreserved;
	struct direct_map *next;
	/* chunk k lives at l1[k >> L2_BITS][k & (L2-1)]: O(1) lookup, no realloc */
	direct_chunk_ptr *_Atomic l1[DIRECT_L1_SIZE];
};
extern unsigned int direct_chunk_shift;  /* log2(chunk size) */
extern int direct_populate;
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
 * chunk that may contain holes is tagged (bit 0 of its address): reads there
 * ask the kernel where the data is, and are served from the mapping only if
 * the whole range is data, else by the kernel, which reads holes as zeros
 * without allocating. Writes allocate exactly the pages they touch, as
 * write() does.
 */
#define DIRECT_SPARSE ((uintptr_t)1)

/* The chunk entry for `off`, possibly tagged DIRECT_SPARSE; NULL if unmapped. */
static inline unsigned char *direct_entry(struct direct_map *m, uint64_t off)
{
	uint64_t k = off >> direct_chunk_shift;
	if (unlikely(k >= ((uint64_t)DIRECT_L1_SIZE << DIRECT_L2_BITS)))
		return NULL;
	direct_chunk_ptr *l2 = atomic_load_explicit(&m->l1[k >> DIRECT_L2_BITS], memory_order_acquire);
	if (unlikely(!l2))
		return NULL;
	return atomic_load_explicit(&l2[k & ((1u << DIRECT_L2_BITS) - 1)], memory_order_acquire);
}
/* Re-tag every mapped chunk as possibly sparse (holes were made). */
void direct_map_mark_all_sparse(struct direct_map *m);
/* The range [off, off+n) of chunk-mapped data is known hole-free: untag. */
void direct_map_set_dense(struct direct_map *m, uint64_t off);

static inline unsigned char *direct_addr(struct direct_map *m, uint64_t off)
{
	uint64_t k = off >> direct_chunk_shift;
	if (unlikely(k >= ((uint64_t)DIRECT_L1_SIZE << DIRECT_L2_BITS)))
		return NULL;
	direct_chunk_ptr *l2 = atomic_load_explicit(&m->l1[k >> DIRECT_L2_BITS], memory_order_acquire);
	if (unlikely(!l2))
		return NULL;
	unsigned char *base =
		atomic_load_explicit(&l2[k & ((1u << DIRECT_L2_BITS) - 1)], memory_order_acquire);
	base = (unsigned char *)((uintptr_t)base & ~DIRECT_SPARSE);
	return base ? base + (off & ((1ull << direct_chunk_shift) - 1)) : NULL;
}

/* ---- copy.c */
/*
 * The copy inside a fault guard. Under AddressSanitizer, memcpy is ASan's
 * interceptor, which checks both ranges first and aborts on exactly what the
 * guard is for (a bad user pointer, such as (void *)-1): there the copy is a
 * plain `rep movsb`, which faults like the real one.
 */
static inline void direct_guarded_memcpy(void *dst, const void *src, size_t n)
{
#ifdef __SANITIZE_ADDRESS__
	__asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
#else
	memcpy(dst, src, n);
#endif
}
/* Copy n bytes; a fault on either side (a page truncated away by another
 * process, a bad user buffer) stops the copy: returns n, or 0 with *fault
 * set to the signal number (the caller has the kernel redo the piece). */
size_t direct_copy(void *dst, const void *src, size_t n, int *fault);
/* Same, with non-temporal stores (large writes to persistent memory). */
size_t direct_copy_nt(void *dst, const void *src, size_t n, int *fault);
/* Write back the cache lines of [addr, addr+len) and fence. */
void direct_flush(const void *addr, size_t len);
void direct_fence(void);
int direct_copy_init(void);
/* The fault hook behind direct_copy: true if the fault was its own. */
bool direct_fault_fixup(int sig, siginfo_t *si, void *uc);
extern size_t direct_nt_threshold;

/* ---- stats.c: per-thread counters, summed on demand */
struct direct_stats {
	uint64_t reads, writes, read_bytes, write_bytes;
	uint64_t kernel_fallbacks, mmaps, faults, extends, fsyncs, zero_copy;
};
extern __thread struct direct_stats *direct_tls_stats;
struct direct_stats *direct_stats_slow(void);
static inline struct direct_stats *direct_stats_tls(void)
{
	struct direct_stats *s = direct_tls_stats;
	return likely(s != NULL) ? s : direct_stats_slow();
}
#define DSTAT(field, n) (direct_stats_tls()->field += (n))
void direct_stats_sum(struct direct_stats *out);
void direct_stats_dump(void);

/* ---- direct.c: per-OFD state kept in ofd->priv[layer] */
struct direct_ofd {
	uint32_t active;        /* 1: served from the mapping; 0: passed to the kernel */
	uint32_t pad_;
	uint64_t dev, ino;
};
/* Per-process state of a handled file, in f->local[layer]. */
struct direct_local {
	struct direct_map *map;
	struct direct_inode *inode;
	struct mapped_rwf rwf;  /* the kernel's answers on preadv2/pwritev2 flags */
};
extern const struct chell_handler chell_direct_handler;
extern const struct chell_fast_ops direct_fast_ops; /* fast.c */
/* A write at pos that grows the file: the kernel's pwritev2 under the
 * inode lock, the shared size after it (direct.c; fast.c's shortcut too). */
ssize_t direct_grow_write(struct direct_inode *in, int fd, const struct iovec *iov, int cnt,
			  uint64_t pos, int rwf);
/* For api.c: the direct state of fd, or NULL when fd is not direct. */
struct chell_file *direct_file_get(int fd, int *layer);
ssize_t direct_read_ptr(struct chell_file *f, int layer, int fd, const void **buf, size_t count);

#endif
