/* SPDX-License-Identifier: MIT */
/*
 * The shortcut for read/pread/write/pwrite of one buffer (chell_fast_ops).
 *
 * Measured with callgrind, the general path costs ~450 instructions per
 * 64-byte pread (iovec building, dispatch down the stack, validation, the
 * chunk loop). On random offsets that much code keeps the CPU from starting
 * the next call's cache misses while this one waits. The common case - a
 * buffer inside one dense chunk, inside the known size, no special flag -
 * needs none of it. Anything else returns CHELL_FAST_MISS before changing
 * anything, and the general path (direct.c) handles it with full checks.
 */
#include "direct.h"

#define CHUNK_MASK(s) ((1ull << (s)) - 1)

/* The kernel keeps the offset of an O_APPEND description (direct.c). */
static inline bool kernel_offset(int st)
{
	return (st & O_APPEND) && !direct_lazy_size;
}

static inline struct direct_local *local0(struct chell_file *f)
{
	const struct direct_ofd *d = (const struct direct_ofd *)f->ofd->priv[0];
	return d->active ? (struct direct_local *)f->local[0] : NULL;
}

/* Address of [off, off+n) if it lies in one mapped chunk and may be read
 * through the mapping (no possible hole). */
static inline unsigned char *readable(struct direct_local *l, uint64_t off, size_t n)
{
	if (unlikely(l->map->hole_gen !=
		     atomic_load_explicit((_Atomic uint32_t *)&l->inode->hole_gen, memory_order_relaxed)))
		return NULL;
	if (unlikely((off & CHUNK_MASK(direct_chunk_shift)) + n > (1ull << direct_chunk_shift)))
		return NULL;
	unsigned char *e = direct_entry(l->map, off);
	if (unlikely(!e || ((uintptr_t)e & DIRECT_SPARSE)))
		return NULL;
	return e + (off & CHUNK_MASK(direct_chunk_shift));
}

static inline uint64_t cached_size(struct direct_local *l)
{
	return atomic_load_explicit((_Atomic uint64_t *)&l->inode->size, memory_order_acquire);
}

static ssize_t fast_pread(struct chell_file *f, int fd, void *buf, size_t n, off_t off)
{
	struct direct_local *l = local0(f);
	int st = atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
	if (!l || off < 0 || n == 0 || (st & O_ACCMODE) == O_WRONLY ||
	    (uint64_t)off + n > cached_size(l))
		return CHELL_FAST_MISS;
	unsigned char *a = readable(l, (uint64_t)off, n);
	int fault;
	if (!a || !direct_copy(buf, a, n, &fault))
		return CHELL_FAST_MISS; /* nothing was changed: the general path redoes it */
	mapped_read_done(&l->inode->times, fd, st, cached_size(l));
	struct direct_stats *s = direct_stats_tls();
	s->reads++;
	s->read_bytes += n;
	return (ssize_t)n;
}

static ssize_t fast_read(struct chell_file *f, int fd, void *buf, size_t n)
{
	struct direct_local *l = local0(f);
	int st = atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
	if (!l || n == 0 || (st & O_ACCMODE) == O_WRONLY || kernel_offset(st))
		return CHELL_FAST_MISS;
	_Atomic uint64_t *offp = (_Atomic uint64_t *)&f->ofd->offset;
	uint64_t pos = atomic_load_explicit(offp, memory_order_relaxed);
	if (pos + n > cached_size(l))
		return CHELL_FAST_MISS;
	unsigned char *a = readable(l, pos, n);
	if (!a || !atomic_compare_exchange_strong(offp, &pos, pos + n))
		return CHELL_FAST_MISS; /* moved meanwhile: the general path sorts it out */
	int fault;
	if (unlikely(!direct_copy(buf, a, n, &fault))) {
		/* the page went away after we claimed the range: the kernel answers */
		ssize_t k = sys_pread(fd, buf, n, (off_t)pos);
		uint64_t expect = pos + n;
		atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(k > 0 ? k : 0));
		DSTAT(faults, 1);
		DSTAT(kernel_fallbacks, 1);
		return k;
	}
	mapped_read_done(&l->inode->times, fd, st, cached_size(l));
	struct direct_stats *s = direct_stats_tls();
	s->reads++;
	s->read_bytes += n;
	return (ssize_t)n;
}

/* Writes inside the current size need no extension; holes don't matter
 * (a store allocates exactly the page write() would). */
static inline unsigned char *writable(struct direct_local *l, int st, uint64_t off, size_t n)
{
	if (!l->map->writable || (st & (O_APPEND | O_SYNC | O_DSYNC)) || (st & O_ACCMODE) == O_RDONLY ||
	    l->map->map_sync == 2 /* DAX: flushing and NT policy live in the general path */)
		return NULL;
	if ((off & CHUNK_MASK(direct_chunk_shift)) + n > (1ull << direct_chunk_shift) ||
	    off + n > cached_size(l) || off + n > mapped_fsize() /* RLIMIT_FSIZE: general path */)
		return NULL;
	unsigned char *e = direct_entry(l->map, off);
	return e ? (unsigned char *)((uintptr_t)e & ~DIRECT_SPARSE) + (off & CHUNK_MASK(direct_chunk_shift))
		 : NULL;
}

/* A plain write past the cached size (not O_APPEND, O_SYNC, DAX, lazy sizes,
 * nor near RLIMIT_FSIZE or the largest offset): the general path would make
 * the same single kernel pwrite (direct_grow_write) after ~300 instructions
 * of dispatch and checks, which a growing write of 64 B pays on top of the
 * kernel's own time. */
static inline bool growable(struct direct_local *l, int st, uint64_t off, size_t n)
{
	/* not with lazy sizes: a write the kernel refuses (EFAULT) inside the
	 * step must still move the size to off, as the lazy path does */
	return l->map->writable && l->map->map_sync != 2 && !direct_lazy_size &&
	       !(st & (O_APPEND | O_SYNC | O_DSYNC)) && (st & O_ACCMODE) != O_RDONLY &&
	       off + n > cached_size(l) && off + n >= off && off + n <= (uint64_t)LLONG_MAX &&
	       off + n <= mapped_fsize();
}

static ssize_t grow(struct direct_local *l, int fd, const void *buf, size_t n, uint64_t off)
{
	struct iovec v = {(void *)buf, n};
	ssize_t r = direct_grow_write(l->inode, fd, &v, 1, off, 0);
	struct direct_stats *s = direct_stats_tls();
	s->writes++;
	if (r > 0)
		s->write_bytes += (uint64_t)r;
	return r;
}

static ssize_t fast_pwrite(struct chell_file *f, int fd, const void *buf, size_t n, off_t off)
{
	struct direct_local *l = local0(f);
	int st = atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
	if (!l || off < 0 || n == 0)
		return CHELL_FAST_MISS;
	if (growable(l, st, (uint64_t)off, n))
		return grow(l, fd, buf, n, (uint64_t)off);
	unsigned char *a = writable(l, st, (uint64_t)off, n);
	int fault;
	if (!a || !direct_copy(a, buf, n, &fault))
		return CHELL_FAST_MISS; /* the general path rewrites the same bytes */
	mapped_write_done(&l->inode->times, fd);
	struct direct_stats *s = direct_stats_tls();
	s->writes++;
	s->write_bytes += n;
	return (ssize_t)n;
}

static ssize_t fast_write(struct chell_file *f, int fd, const void *buf, size_t n)
{
	struct direct_local *l = local0(f);
	int st = atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
	if (l && kernel_offset(st)) {
		/* An append on an O_APPEND description: what the general path
		 * does too (direct.c: the kernel's write, nothing else), without
		 * the dispatch down the stack. libc's write, as the posix layer
		 * calls it (a cancellation point). */
		ssize_t r = REAL(write)(fd, buf, n);
		struct direct_stats *s = direct_stats_tls();
		s->writes++;
		s->kernel_fallbacks++;
		if (r > 0)
			s->write_bytes += (uint64_t)r;
		return r < 0 ? -errno : r;
	}
	if (!l || n == 0)
		return CHELL_FAST_MISS;
	_Atomic uint64_t *offp = (_Atomic uint64_t *)&f->ofd->offset;
	uint64_t pos = atomic_load_explicit(offp, memory_order_relaxed);
	if (growable(l, st, pos, n)) {
		/* reserve [pos, pos+n) as the general path does; a short write
		 * gives back what it did not write */
		if (!atomic_compare_exchange_strong(offp, &pos, pos + n))
			return CHELL_FAST_MISS;
		ssize_t r = grow(l, fd, buf, n, pos);
		if (r != (ssize_t)n) {
			uint64_t expect = pos + n;
			atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
		}
		return r;
	}
	unsigned char *a = writable(l, st, pos, n);
	if (!a || !atomic_compare_exchange_strong(offp, &pos, pos + n))
		return CHELL_FAST_MISS;
	int fault;
	if (unlikely(!direct_copy(a, buf, n, &fault))) {
		ssize_t k = sys_pwrite(fd, buf, n, (off_t)pos);
		uint64_t expect = pos + n;
		atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(k > 0 ? k : 0));
		atomic_fetch_add((_Atomic uint32_t *)&l->inode->hole_gen, 1);
		DSTAT(faults, 1);
		DSTAT(kernel_fallbacks, 1);
		return k;
	}
	mapped_write_done(&l->inode->times, fd);
	struct direct_stats *s = direct_stats_tls();
	s->writes++;
	s->write_bytes += n;
	return (ssize_t)n;
}

static off_t fast_lseek(struct chell_file *f, int fd, off_t off, int whence)
{
	struct direct_local *l = local0(f);
	int st = atomic_load_explicit((_Atomic int32_t *)&f->ofd->status_flags, memory_order_relaxed);
	if (!l || kernel_offset(st))
		return CHELL_FAST_MISS;
	off_t r = mapped_fast_lseek(&f->ofd->offset, off, whence);
	if (r >= 0 && whence == SEEK_SET) {
		unsigned char *e = direct_entry(l->map, (uint64_t)off);
		if (e)
			mapped_prefetch((unsigned char *)((uintptr_t)e & ~DIRECT_SPARSE) +
					((uint64_t)off & CHUNK_MASK(direct_chunk_shift)));
	}
	return r;
}

const struct chell_fast_ops direct_fast_ops = {
	.read = fast_read,
	.pread = fast_pread,
	.write = fast_write,
	.pwrite = fast_pwrite,
	.lseek = fast_lseek,
};
