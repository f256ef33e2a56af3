/* SPDX-License-Identifier: MIT */
/*
 * The mapped-file base: what every handler that serves a file by memcpy on
 * a mapping of it shares (direct, cache, and the handlers built on them).
 * A handler on the base supplies only its policy - where a chunk's memory
 * comes from and what a miss does - through a struct mapped_ops, and takes
 * the rest from here:
 *
 *   base.h    this header: per-OFD and per-process state, the chunk table
 *   file.c    the handler operations they share: attach, adopt, release,
 *             offset sync, the argument checks and offset reservation of
 *             read and write, lseek, growing a file, the append lock
 *   inode.c   per-file state shared by the process tree (size, lock, times)
 *   table.c   the two-level chunk table of a file in one process
 *   copy.c    copies inside the fault guard, and the persistence core's
 *             flushes for mappings of persistent memory
 *   stats.c   per-thread counters and their JSON dump (stats.file)
 *   kernel.c  what the mapped path owes the kernel besides the bytes
 *             (mapped.h: preadv2 flags, file times, limits, lseek)
 *   lazy.c    sizes published lazily: a file grown in steps ahead of its
 *             size, the exact size published when someone could look
 *
 * Offsets live in the shared OFD (ofd->offset), so dup'ed descriptors,
 * forked children and exec'ed images share them as the kernel shares its
 * own; the kernel's offset of the descriptor is brought up to date only
 * when the descriptor may be used outside Chell (sync_out).
 */
#ifndef CHELL_MAPPED_BASE_H
#define CHELL_MAPPED_BASE_H

#include <string.h>

#include "../../nib/nib.h"
#include "chell/chunk.h"
#include "chell/pmem.h"
#include "chell/tier.h"
#include "mapped.h"

/* Newer than some installed kernel headers (linux/mman.h): chunks of
 * persistent memory are mapped with MAP_SYNC where the mount allows it. */
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif

/* ---- inode.c: one entry per file open on the base anywhere in the tree */
struct mapped_inode {
	uint64_t dev, ino;
	uint64_t size;          /* the file size as Chell last set or saw it (atomic) */
	uint32_t opens;         /* OFDs on the base on this file (tree-wide) */
	uint32_t used;          /* 0 never used, 1 in use, 2 removed */
	struct chell_lock lock; /* size changes and O_APPEND writes */
	uint32_t hole_gen;      /* bumped when Chell may have made holes (atomic) */
	struct mapped_times times; /* atime/mtime updates owed to the kernel (mapped.h) */
	/* Lazy sizes (lazy.c): the kernel's size while it is ahead of `size`
	 * (the file was grown in a step and the exact size is not published
	 * yet); 0 when the kernel's size is `size`. Changed under `lock`;
	 * while it is set the kernel's size is not asked (mapped_inode_refresh).
	 * (atomic) */
	uint64_t ksize;
	/* A descriptor of the tree writes this file through the kernel
	 * (O_DIRECT, escaped): it would append at the kernel's size, so no
	 * more steps. */
	uint32_t nolazy;
};

/* The shared table; 0 once it exists (idempotent), -1 if it cannot. */
int mapped_inode_init(void);
bool mapped_inode_ready(void);
struct mapped_inode *mapped_inode_get(uint64_t dev, uint64_t ino, uint64_t kernel_size);
void mapped_inode_put(struct mapped_inode *in);
/* Re-read the size from the kernel (another process may have changed it);
 * with a step outstanding (ksize), the size as Chell has it. */
uint64_t mapped_inode_refresh(struct mapped_inode *in, int fd);
void mapped_inode_set_size(uint64_t dev, uint64_t ino, uint64_t size);
/* The tree's entry of (dev, ino) if the file is open in the tree, without
 * a reference (entries never move; check dev/ino under its lock). */
struct mapped_inode *mapped_inode_find(uint64_t dev, uint64_t ino);

static inline uint64_t mapped_isize(struct mapped_inode *in)
{
	return atomic_load_explicit((_Atomic uint64_t *)&in->size, memory_order_acquire);
}

static inline void mapped_isize_set(struct mapped_inode *in, uint64_t v)
{
	atomic_store_explicit((_Atomic uint64_t *)&in->size, v, memory_order_release);
}

/* ---- table.c: the chunks of one file mapped in one process.
 * A record per chunk: where its memory is, the handler's flag bits, and
 * state of the handler's own (cache: the chunk file's inode; a handler
 * with per-region state keeps it here). Chunk k lives at
 * l1[k >> L2_BITS][k & (L2-1)]: two loads, no lock, never reallocated. */
#define MAPPED_L2_BITS 10
#define MAPPED_L1_SIZE 1024
#define MAPPED_MAX_CHUNKS ((uint64_t)MAPPED_L1_SIZE << MAPPED_L2_BITS)
struct mapped_chunk {
	unsigned char *_Atomic base; /* the chunk's memory; NULL until mapped */
	_Atomic uint32_t flags;      /* the handler's bits (direct: sparse; cache: writable) */
	uint32_t spare_;
	uint64_t state;              /* the handler's own, changed under its slow-path lock */
};
struct mapped_table {
	struct mapped_chunk *_Atomic l1[MAPPED_L1_SIZE];
	/* l1[] at and past it are NULL: the walks stop there (a small file's
	 * table was walked whole, 1024 entries, at every last close) */
	_Atomic uint32_t l1_used;
};

/* The record of chunk k, or NULL if none was ever made. */
static inline struct mapped_chunk *mapped_chunk_of(struct mapped_table *t, uint64_t k)
{
	if (unlikely(k >= MAPPED_MAX_CHUNKS))
		return NULL;
	struct mapped_chunk *l2 = atomic_load_explicit(&t->l1[k >> MAPPED_L2_BITS], memory_order_acquire);
	if (unlikely(!l2))
		return NULL;
	return &l2[k & ((1u << MAPPED_L2_BITS) - 1)];
}
/* The record of chunk k, made if needed (the caller serialises makers);
 * NULL past the table or out of memory. */
struct mapped_chunk *mapped_chunk_make(struct mapped_table *t, uint64_t k);
/* Call fn on every mapped chunk (the caller keeps others out). */
void mapped_table_each(struct mapped_table *t, void (*fn)(struct mapped_chunk *e, void *arg), void *arg);
/* Free the records (after the handler unmapped the chunks). */
void mapped_table_free(struct mapped_table *t);

/* ---- copy.c: copies inside the fault guard, persistence */
/*
 * The copy inside a fault guard. Under AddressSanitizer, memcpy is ASan's
 * interceptor, which checks both ranges first and aborts on exactly what the
 * guard is for (a bad user pointer, such as (void *)-1): there the copy is a
 * plain `rep movsb`, which faults like the real one.
 */
static inline void mapped_guarded_memcpy(void *dst, const void *src, size_t n)
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
size_t mapped_copy(void *dst, const void *src, size_t n, int *fault);
/* mapped_copy out of a mapping (a read): the lines of src asked for first
 * (mapped_prefetch_read), then the guarded copy. */
static inline size_t mapped_copy_out(void *dst, const unsigned char *src, size_t n, int *fault)
{
	mapped_prefetch_read(src, n);
	return mapped_copy(dst, src, n, fault);
}
/* Same, with the persistence core's non-temporal copy, then its drain:
 * large writes to persistent memory. */
size_t mapped_copy_nt(const struct chell_persist_ops *ops, void *dst, const void *src, size_t n,
		      int *fault);
/* The persistence core's operations, chosen once per process (clwb,
 * clflushopt, clflush or none; CHELL_PMEM_FLUSH overrides): every mapping
 * takes them when it is made and flushes through them. */
const struct chell_persist_ops *mapped_persist(void);
/* Write back the cache lines of [addr, addr+len) and drain; drain alone. */
static inline void mapped_flush(const struct chell_persist_ops *ops, const void *addr, size_t len)
{
	ops->flush(ops->ctx, addr, len);
	ops->drain(ops->ctx);
}
static inline void mapped_fence(const struct chell_persist_ops *ops)
{
	ops->drain(ops->ctx);
}
int mapped_copy_init(void);
/* The fault hook behind mapped_copy: true if the fault was its own. */
bool mapped_fault_fixup(int sig, siginfo_t *si, void *uc);

/* ---- stats.c: per-thread counters, summed on demand. One struct for
 * every handler on the base (each uses the fields it names in its JSON),
 * one block per thread and handler, no atomic instruction on the data path. */
struct mapped_stats {
	uint64_t reads, writes, read_bytes, write_bytes;
	uint64_t kernel_fallbacks, mmaps, faults, extends, fsyncs, zero_copy;
	uint64_t read_hits, write_hits, read_misses, write_misses;
	uint64_t remaps, syncs, bypassed, overwrites;
	uint64_t accesses, accurate; /* warp: node accesses, accurate prefetches */
};
enum { MAPPED_STATS_DIRECT, MAPPED_STATS_CACHE, MAPPED_STATS_WARP, MAPPED_STATS_HANDLERS };
extern __thread struct mapped_stats *mapped_tls_stats[MAPPED_STATS_HANDLERS];
struct mapped_stats *mapped_stats_slow(unsigned id);
static inline struct mapped_stats *mapped_stats_tls(unsigned id)
{
	struct mapped_stats *s = mapped_tls_stats[id];
	return likely(s != NULL) ? s : mapped_stats_slow(id);
}
#define MSTAT(id, field, n) (mapped_stats_tls(id)->field += (n))
/* One JSON key and the counter it prints. */
struct mapped_stat_key {
	const char *key;
	size_t off; /* offsetof(struct mapped_stats, ...) */
};
struct mapped_stats_spec {
	unsigned id;
	const char *handler; /* a "handler" key with this value; NULL: none */
	const struct mapped_stat_key *keys;
	unsigned nkeys;
	/* More keys of the handler's own, appended as ", \"k\": v" pairs
	 * into json[*n..cap) (NULL: none). */
	void (*more)(char *json, size_t *n, size_t cap);
};
void mapped_stats_sum(unsigned id, struct mapped_stats *out);
/* At exit: the totals as one JSON object into stats.file ('%p' = pid). */
void mapped_stats_dump(const struct mapped_stats_spec *spec);

/* ---- file.c: the shared operations */

/* Per-OFD state, in ofd->priv[layer]. */
struct mapped_ofd {
	uint32_t active; /* 1: served from the mapping; 0: the kernel path (atomic) */
	/* Status flags with which the kernel keeps this description's offset
	 * (mapped_kernel_offset; direct: O_APPEND), set at open from the
	 * handler's mapped_ops.kernel_offset. */
	uint32_t koff;
	uint64_t dev, ino; /* set once attached: the inode entry counts this OFD */
};
/* Per-process state of a handled file, in f->local[layer]. */
struct direct_map;
struct cache_file;
struct mapped_local {
	union { /* the handler's per-process object of the file */
		void *file;
		struct direct_map *map;
		struct cache_file *cf;
	};
	struct mapped_inode *inode;
	const struct mapped_ops *ops; /* the handler's policy */
	struct mapped_rwf rwf; /* the kernel's answers on preadv2/pwritev2 flags */
	/* The last read or write at the shared offset in this process was a
	 * write: what the lseek shortcut prefetches for (mapped_fast_seek). A
	 * hint only; threads may race on it. */
	bool seek_for_write;
	/* The tier model charges this file's reads and writes as whole
	 * operations (mapped_ops.tier_ops, the file on the tier). */
	bool tier;
};

/* A handler's policy, called by the shared operations. */
struct mapped_ops {
	unsigned stats; /* MAPPED_STATS_* */
	const struct chell_fast_ops *fast;
	/* This process's object for the file (st: the kernel's fstat of
	 * c->fd), or NULL when the file cannot be served from a mapping. */
	void *(*file_get)(chell_ctx *c, const struct stat *st);
	void (*file_put)(void *file);
	/* Move n bytes between the iovecs and the file at pos (to_file: write,
	 * MAPPED_XFER_EXTEND: a write past the published size); bytes moved, or
	 * -errno if none. Whatever the mapping cannot do, the kernel finishes. */
	ssize_t (*transfer)(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
			    int to_file);
	/* preadv2/pwritev2 flags the kernel must carry out itself, and how */
	int kernel_flags;
	ssize_t (*kernel_io)(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, ssize_t total,
			     int flags, bool write);
	/* A write at O_APPEND (or RWF_APPEND) of `total` bytes; moves the
	 * shared offset itself when off == -1. */
	ssize_t (*append)(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, size_t total,
			  int flags);
	/* A write of `total` bytes at pos, the range already claimed. */
	ssize_t (*write_at)(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t total);
	/* Before the kernel is asked for holes (SEEK_DATA/SEEK_HOLE); may be NULL. */
	void (*settle)(chell_ctx *c);
	/* Every byte of the policy's reads and writes moves to or from the
	 * file itself, by a copy or by the kernel (direct): for a file on the
	 * emulated tier, the base charges whole operations to the tier model
	 * (chell_tier_settle: what the posix layer below charged itself is
	 * not charged again). A policy that serves some bytes from elsewhere
	 * (cache's pool, a DRAM buffer) charges its own copies instead. */
	bool tier_ops;
	/* Status flags (O_APPEND or 0) with which the kernel keeps the
	 * description's offset: read, write and lseek at the position are
	 * the kernel's there (the handler's appends are the kernel's, which
	 * moves its own offset); positional calls still use the mapping. */
	int kernel_offset;
};
#define MAPPED_XFER_EXTEND 2

static inline struct mapped_ofd *mapped_ofd(const chell_ctx *c)
{
	return (struct mapped_ofd *)c->f->ofd->priv[c->layer];
}

static inline struct mapped_local *mapped_local(const chell_ctx *c)
{
	return (struct mapped_local *)c->f->local[c->layer];
}

static inline _Atomic uint64_t *mapped_offset(const chell_ctx *c)
{
	return (_Atomic uint64_t *)&c->f->ofd->offset;
}

static inline int mapped_status(const chell_ctx *c)
{
	return atomic_load_explicit((_Atomic int32_t *)&c->f->ofd->status_flags, memory_order_relaxed);
}

/* The kernel keeps the description's offset (mapped_ops.kernel_offset). */
static inline bool mapped_kernel_offset(const chell_ctx *c)
{
	return (mapped_status(c) & (int)mapped_ofd(c)->koff) != 0;
}

/* Served from the mapping in this process. */
static inline bool mapped_active(const chell_ctx *c)
{
	return atomic_load_explicit((_Atomic uint32_t *)&mapped_ofd(c)->active, memory_order_acquire) &&
	       mapped_local(c) != NULL;
}

static inline bool mapped_positional(enum chell_op op)
{
	return op == CHELL_OP_PREAD || op == CHELL_OP_PREADV || op == CHELL_OP_PWRITE ||
	       op == CHELL_OP_PWRITEV;
}

/* O_APPEND on the descriptor makes the kernel's pwrite append: a write that
 * must land at `pos` (RWF_NOAPPEND, or a piece of a mapped write) says so. */
static inline int mapped_at_pos_flags(chell_ctx *c)
{
	return (mapped_status(c) & O_APPEND) ? RWF_NOAPPEND : 0;
}

/* Set up process-local state (count_open: a new OFD, not an adoption);
 * 0 if the file can be served from a mapping. */
int mapped_attach(chell_ctx *c, int count_open, const struct mapped_ops *ops);
/* The kernel changed the size behind the shared one (O_TRUNC on a
 * descriptor the base does not serve, truncate by path). */
void mapped_size_changed_by_kernel(int fd);
void mapped_size_changed_by_path(const char *path);
int mapped_adopt(chell_ctx *c, const struct mapped_ops *ops);
void mapped_detach(chell_ctx *c, const struct mapped_ops *ops);
void mapped_release(chell_ctx *c);
int mapped_sync_out(chell_ctx *c);
int mapped_sync_in(chell_ctx *c);
int mapped_fstat(chell_ctx *c, struct stat *st);
int mapped_close(chell_ctx *c);
/* From now on this descriptor uses the kernel path, in every process. */
void mapped_go_kernel(chell_ctx *c, const struct mapped_ops *ops);
/* read, write and lseek of a handler on the base (its policy: the
 * attached file's mapped_local.ops) */
ssize_t mapped_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags);
ssize_t mapped_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags);
off_t mapped_lseek_op(chell_ctx *c, off_t off, int whence);
/* Zero-copy reads: reserve [*pos, *pos+n) of the shared offset for up to
 * `count` bytes, n cut at the end of file (refreshed from the kernel when
 * reached) and at the end of the `chunk`-byte chunk holding *pos; n (0 at
 * end of file). unclaim gives the range back when it cannot be lent. */
static inline size_t mapped_read_claim(chell_ctx *c, size_t count, size_t chunk, uint64_t *posp)
{
	struct mapped_inode *in = mapped_local(c)->inode;
	_Atomic uint64_t *offp = mapped_offset(c);
	uint64_t pos = atomic_load(offp), size = mapped_isize(in);
	size_t n;
	bool refreshed = false;
	for (;;) {
		if (pos + count > size && !refreshed) {
			size = mapped_inode_refresh(in, c->fd);
			refreshed = true;
		}
		n = pos >= size ? 0 : (count < size - pos ? count : (size_t)(size - pos));
		size_t to_chunk_end = chunk - (size_t)(pos & (chunk - 1));
		if (n > to_chunk_end)
			n = to_chunk_end;
		if (atomic_compare_exchange_weak(offp, &pos, pos + n))
			break;
	}
	*posp = pos;
	return n;
}

static inline void mapped_read_unclaim(chell_ctx *c, uint64_t pos, size_t n)
{
	uint64_t expect = pos + n;
	atomic_compare_exchange_strong(mapped_offset(c), &expect, pos);
}

/* A shortcut moved n bytes of a file (write: into it): the tier model's
 * charge when the file is on the tier (mapped_local.tier, never set
 * without a model: one test of a byte the shortcut has in cache). */
static inline void mapped_tier_fast(struct mapped_local *l, bool write, ssize_t n)
{
	if (unlikely(l->tier) && n > 0)
		chell_tier_charge(write, (size_t)n, 1);
}

/* ---- the shortcuts (chell_fast_ops) of the handlers on the base: what
 * each of them starts with. */
/* The per-process state of f's layer 0, or NULL when it is not served
 * from the mapping. */
static inline struct mapped_local *mapped_local0(struct chell_file *f)
{
	const struct mapped_ofd *d = (const struct mapped_ofd *)f->ofd->priv[0];
	return atomic_load_explicit((_Atomic uint32_t *)&d->active, memory_order_relaxed)
		       ? (struct mapped_local *)f->local[0]
		       : NULL;
}
static inline int mapped_fast_status(struct chell_file *f)
{
	return atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
}
static inline uint64_t mapped_cached_size(struct mapped_local *l)
{
	return mapped_isize(l->inode);
}
static inline uint64_t mapped_fast_offset(struct chell_file *f)
{
	return atomic_load_explicit((_Atomic uint64_t *)&f->ofd->offset, memory_order_relaxed);
}
/* The shortcut's claim of [*pos, *pos+n) at the shared offset for a read
 * or a write (`write`, also noted for the next seek's prefetch): true if
 * taken; false, nothing changed, if the offset moved. */
static inline bool mapped_fast_claim(struct chell_file *f, struct mapped_local *l, uint64_t *pos, size_t n,
				     bool write)
{
	if (unlikely(l->seek_for_write != write)) /* no store (and dirty line) while it holds */
		l->seek_for_write = write;
	return atomic_compare_exchange_strong((_Atomic uint64_t *)&f->ofd->offset, pos, *pos + n);
}
/* The shortcut claimed [pos, pos+n) and moved r: give back the rest. */
static inline void mapped_fast_unclaim(struct chell_file *f, uint64_t pos, size_t n, ssize_t r)
{
	uint64_t expect = pos + n;
	atomic_compare_exchange_strong((_Atomic uint64_t *)&f->ofd->offset, &expect,
				       pos + (uint64_t)(r > 0 ? r : 0));
}
/* The lseek shortcut: mapped_fast_lseek on the shared offset, then (after
 * SEEK_SET) a prefetch at the new position's address for what followed the
 * last seek (a read or a write), `chunk` being the memory of the chunk
 * holding it (NULL: not mapped) and chunk_bytes its size. */
static inline off_t mapped_fast_seek(struct chell_file *f, struct mapped_local *l, off_t off, int whence,
				     const unsigned char *chunk, uint64_t chunk_bytes)
{
	off_t r = mapped_fast_lseek(&f->ofd->offset, off, whence);
	if (r >= 0 && whence == SEEK_SET && chunk)
		mapped_prefetch(chunk + ((uint64_t)off & (chunk_bytes - 1)), l->seek_for_write);
	return r;
}

/* The methods every handler on the base takes as they are, for its
 * struct chell_handler. */
#define MAPPED_METHODS                                                                  \
	.release = mapped_release, .sync_out = mapped_sync_out, .sync_in = mapped_sync_in, \
	.close = mapped_close, .fstat = mapped_fstat, .read = mapped_read,               \
	.write = mapped_write, .lseek = mapped_lseek_op

/* The struct chell_handler members of a handler on the base named `h`:
 * its own policy as the functions h_proc_init, h_open, ... (every
 * handler on the base has each of these), then MAPPED_METHODS. The handler
 * adds what only it has (its own designated initialisers after this). */
#define MAPPED_HANDLER(h)                                                                         \
	.name = #h, CHELL_HANDLER_PRIV(struct mapped_ofd), /* summary: src/common/registry.def */ \
	.proc_init = h##_proc_init, .proc_event = h##_proc_event, .open = h##_open,               \
	.opened = h##_opened, .adopt = h##_adopt, .detach = h##_detach,                           \
	.escape = h##_escape, .fsync = h##_fsync, .ftruncate = h##_ftruncate,                     \
	.fallocate = h##_fallocate, .fcntl = h##_fcntl,                                           \
	.get_read_buf = h##_get_read_buf, .truncate = h##_truncate, MAPPED_METHODS

/* A handler's struct chell_fast_ops, from its shortcuts: the static
 * functions fast_read, fast_pread, fast_write, fast_pwrite and fast_lseek
 * of the file that uses it. */
#define MAPPED_FAST_OPS                                                                  \
	{                                                                                \
		.read = fast_read, .pread = fast_pread, .write = fast_write,             \
		.pwrite = fast_pwrite, .lseek = fast_lseek,                              \
	}

/* Make the file end at `end` (> its size) through the kernel: fallocate of
 * [off, off+len) (never shrinks; keeps holes before off as a write would),
 * or ftruncate where the file system has no fallocate. 0 or -errno. */
int mapped_grow(int fd, struct mapped_inode *in, uint64_t off, uint64_t len, uint64_t end);
/*
 * O_APPEND must be atomic across processes, including other process trees:
 * an OFD lock on one byte at 2^62 (far beyond any data) orders appenders of
 * different open file descriptions, the tree-wide inode lock those sharing
 * one. F_WRLCK / F_UNLCK; 0 or -errno.
 */
int mapped_append_lock(int fd, short type);

/* ---- lazy.c: sizes published lazily (direct.lazy_size). A write past the
 * end must find the kernel's size past its bytes (a store beyond it
 * faults), and publishing each new size is a system call as costly as the
 * kernel's own write. So a handler may grow the file in steps (ftruncate:
 * holes, no memory) of a chunk or an eighth of its size; the shared entry
 * keeps the exact size (`size`) and the step (`ksize`), and the exact size
 * goes to the kernel only when someone outside Chell's bookkeeping could
 * look: fsync, close, exit, exec, a descriptor leaving Chell, a lock or
 * copy the kernel evaluates, the calls that ask it about holes or
 * allocate (mapped_lazy_publish's callers). */
extern int mapped_lazy_sizes; /* set by a handler that takes steps (direct.lazy_size) */
/* Make the kernel's size at least `end`: if needed, a step of `step` (the
 * handler's chunk) or an eighth of the size, up to 1 GiB. Caller holds
 * in->lock. 0; -EOPNOTSUPP when no step may be taken (the exact path
 * instead: a kernel user of the file, past the limits); or -errno. */
int mapped_lazy_reserve(struct mapped_local *l, int fd, uint64_t end, uint64_t step, unsigned stats);
/* The exact size to the kernel, if a step is outstanding. fd: the
 * application's descriptor, or -1 (closing: then `path`, the name it was
 * opened by). The _locked form: caller holds in->lock. 0 or -errno. */
int mapped_lazy_publish(struct mapped_local *l, int fd, const char *path);
int mapped_lazy_publish_locked(struct mapped_local *l, int fd, const char *path);
/* At exit and exec: publish through every descriptor of handler h. */
void mapped_lazy_publish_all(const struct chell_handler *h);
/* A descriptor (fd, maybe not writable) of (dev, ino) uses the kernel's
 * path: publish the exact size if a step is outstanding, and take none
 * from now on. */
void mapped_lazy_kernel_user(uint64_t dev, uint64_t ino, int fd);
/* A stat made under in->lock: the kernel's size is our step, not the
 * file's: show ours. */
void mapped_lazy_stat_fix(struct mapped_inode *in, int r, struct stat *st);
/* stat(path) seen from the tree: as fstat does, with the exact size. */
int mapped_lazy_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags);

#endif
