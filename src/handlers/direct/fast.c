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

/* Address of [off, off+n) if it lies in one mapped chunk and may be read
 * through the mapping (no possible hole). */
static inline unsigned char *readable(struct mapped_local *l, uint64_t off, size_t n)
{
	if (unlikely(l->map->hole_gen !=
		     atomic_load_explicit((_Atomic uint32_t *)&l->inode->hole_gen, memory_order_relaxed)))
		return NULL;
	if (unlikely((off & CHUNK_MASK(direct_chunk_shift)) + n > (1ull << direct_chunk_shift)))
		return NULL;
	struct mapped_chunk *e = direct_entry(l->map, off);
	unsigned char *base = e ? atomic_load_explicit(&e->base, memory_order_acquire) : NULL;
	if (unlikely(!base || (atomic_load_explicit(&e->flags, memory_order_relaxed) & DIRECT_SPARSE)))
		return NULL;
	return base + (off & CHUNK_MASK(direct_chunk_shift));
}

static ssize_t fast_pread(struct chell_file *f, int fd, void *buf, size_t n, off_t off)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || off < 0 || n == 0 || (st & O_ACCMODE) == O_WRONLY ||
	    (uint64_t)off + n > mapped_cached_size(l))
		return CHELL_FAST_MISS;
	unsigned char *a = readable(l, (uint64_t)off, n);
	int fault;
	if (!a || !mapped_copy_out(buf, a, n, &fault))
		return CHELL_FAST_MISS; /* nothing was changed: the general path redoes it */
	mapped_read_done(&l->inode->times, fd, st, mapped_cached_size(l));
	struct mapped_stats *s = direct_stats_tls();
	s->reads++;
	s->read_bytes += n;
	mapped_tier_fast(l, false, (ssize_t)n);
	return (ssize_t)n;
}

static ssize_t fast_read(struct chell_file *f, int fd, void *buf, size_t n)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || n == 0 || (st & O_ACCMODE) == O_WRONLY || direct_kernel_offset(st))
		return CHELL_FAST_MISS;
	uint64_t pos = mapped_fast_offset(f);
	if (pos + n > mapped_cached_size(l))
		return CHELL_FAST_MISS;
	unsigned char *a = readable(l, pos, n);
	if (!a || !mapped_fast_claim(f, l, &pos, n, false))
		return CHELL_FAST_MISS; /* moved meanwhile: the general path sorts it out */
	int fault;
	if (unlikely(!mapped_copy_out(buf, a, n, &fault))) {
		/* the page went away after we claimed the range: the kernel answers */
		ssize_t k = sys_pread(fd, buf, n, (off_t)pos);
		mapped_fast_unclaim(f, pos, n, k);
		mapped_tier_fast(l, false, k);
		DSTAT(faults, 1);
		DSTAT(kernel_fallbacks, 1);
		return k;
	}
	mapped_read_done(&l->inode->times, fd, st, mapped_cached_size(l));
	struct mapped_stats *s = direct_stats_tls();
	s->reads++;
	s->read_bytes += n;
	mapped_tier_fast(l, false, (ssize_t)n);
	return (ssize_t)n;
}

/* Writes inside the current size need no extension; holes don't matter
 * (a store allocates exactly the page write() would). */
static inline unsigned char *writable(struct mapped_local *l, int st, uint64_t off, size_t n)
{
	if (!l->map->writable || (st & (O_APPEND | O_SYNC | O_DSYNC)) || (st & O_ACCMODE) == O_RDONLY ||
	    l->map->map_sync == 2 /* DAX: flushing and NT policy live in the general path */)
		return NULL;
	if ((off & CHUNK_MASK(direct_chunk_shift)) + n > (1ull << direct_chunk_shift) ||
	    off + n > mapped_cached_size(l) || off + n > mapped_fsize() /* RLIMIT_FSIZE: general path */)
		return NULL;
	struct mapped_chunk *e = direct_entry(l->map, off);
	unsigned char *base = e ? atomic_load_explicit(&e->base, memory_order_acquire) : NULL;
	return base ? base + (off & CHUNK_MASK(direct_chunk_shift)) : NULL;
}

/* A plain write past the cached size (not O_APPEND, O_SYNC, DAX, lazy sizes,
 * nor near RLIMIT_FSIZE or the largest offset): the general path would make
 * the same single kernel pwrite (direct_grow_write) after ~300 instructions
 * of dispatch and checks, which a growing write of 64 B pays on top of the
 * kernel's own time. */
static inline bool growable(struct mapped_local *l, int st, uint64_t off, size_t n)
{
	/* not with lazy sizes: a write the kernel refuses (EFAULT) inside the
	 * step must still move the size to off, as the lazy path does */
	return l->map->writable && l->map->map_sync != 2 && !direct_lazy_size &&
	       !(st & (O_APPEND | O_SYNC | O_DSYNC)) && (st & O_ACCMODE) != O_RDONLY &&
	       off + n > mapped_cached_size(l) && off + n >= off && off + n <= (uint64_t)LLONG_MAX &&
	       off + n <= mapped_fsize();
}

static ssize_t grow(struct mapped_local *l, int fd, const void *buf, size_t n, uint64_t off)
{
	struct iovec v = {(void *)buf, n};
	ssize_t r = direct_grow_write(l->inode, fd, &v, 1, off, 0);
	struct mapped_stats *s = direct_stats_tls();
	s->writes++;
	if (r > 0)
		s->write_bytes += (uint64_t)r;
	mapped_tier_fast(l, true, r);
	return r;
}

static ssize_t fast_pwrite(struct chell_file *f, int fd, const void *buf, size_t n, off_t off)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || off < 0 || n == 0)
		return CHELL_FAST_MISS;
	if (growable(l, st, (uint64_t)off, n))
		return grow(l, fd, buf, n, (uint64_t)off);
	unsigned char *a = writable(l, st, (uint64_t)off, n);
	int fault;
	if (!a || !mapped_copy(a, buf, n, &fault))
		return CHELL_FAST_MISS; /* the general path rewrites the same bytes */
	mapped_write_done(&l->inode->times, fd);
	struct mapped_stats *s = direct_stats_tls();
	s->writes++;
	s->write_bytes += n;
	mapped_tier_fast(l, true, (ssize_t)n);
	return (ssize_t)n;
}

static ssize_t fast_write(struct chell_file *f, int fd, const void *buf, size_t n)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (l && direct_kernel_offset(st)) {
		/* An append on an O_APPEND description: what the general path
		 * does too (mapped_write: the kernel's write, nothing else),
		 * without the dispatch down the stack. libc's write, as the
		 * posix layer calls it (a cancellation point). */
		ssize_t r = REAL(write)(fd, buf, n);
		struct mapped_stats *s = direct_stats_tls();
		s->writes++;
		s->kernel_fallbacks++;
		if (r > 0)
			s->write_bytes += (uint64_t)r;
		mapped_tier_fast(l, true, r);
		return r < 0 ? -errno : r;
	}
	if (!l || n == 0)
		return CHELL_FAST_MISS;
	uint64_t pos = mapped_fast_offset(f);
	if (growable(l, st, pos, n)) {
		/* claim [pos, pos+n) as the general path does; a short write
		 * gives back what it did not write */
		if (!mapped_fast_claim(f, l, &pos, n, true))
			return CHELL_FAST_MISS;
		ssize_t r = grow(l, fd, buf, n, pos);
		if (r != (ssize_t)n)
			mapped_fast_unclaim(f, pos, n, r);
		return r;
	}
	unsigned char *a = writable(l, st, pos, n);
	if (!a || !mapped_fast_claim(f, l, &pos, n, true))
		return CHELL_FAST_MISS;
	int fault;
	if (unlikely(!mapped_copy(a, buf, n, &fault))) {
		ssize_t k = sys_pwrite(fd, buf, n, (off_t)pos);
		mapped_fast_unclaim(f, pos, n, k);
		mapped_tier_fast(l, true, k);
		atomic_fetch_add((_Atomic uint32_t *)&l->inode->hole_gen, 1);
		DSTAT(faults, 1);
		DSTAT(kernel_fallbacks, 1);
		return k;
	}
	mapped_write_done(&l->inode->times, fd);
	struct mapped_stats *s = direct_stats_tls();
	s->writes++;
	s->write_bytes += n;
	mapped_tier_fast(l, true, (ssize_t)n);
	return (ssize_t)n;
}

static off_t fast_lseek(struct chell_file *f, int fd, off_t off, int whence)
{
	struct mapped_local *l = mapped_local0(f);
	if (!l || direct_kernel_offset(mapped_fast_status(f)))
		return CHELL_FAST_MISS;
	struct mapped_chunk *e = whence == SEEK_SET && off >= 0 ? direct_entry(l->map, (uint64_t)off) : NULL;
	return mapped_fast_seek(f, l, off, whence, e ? atomic_load_explicit(&e->base, memory_order_relaxed) : NULL,
				1ull << direct_chunk_shift);
}

const struct chell_fast_ops direct_fast_ops = MAPPED_FAST_OPS;
