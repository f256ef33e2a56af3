/* SPDX-License-Identifier: MIT */
/*
 * The shortcut for read/pread/write/pwrite of one buffer (chell_fast_ops),
 * as direct/fast.c: a buffer inside one mapped chunk, inside the known
 * size, no special flag, and a hit. Anything else returns CHELL_FAST_MISS
 * having changed nothing, and the general path (cache.c) does the call.
 */
#include "cache.h"

static inline bool one_chunk(uint64_t off, size_t n)
{
	return (off & (CACHE_CHUNK_BYTES - 1)) + n <= CACHE_CHUNK_BYTES;
}

static inline void hit(struct cache_file *cf, uint32_t slot, uint64_t off, int w, size_t n)
{
	cache_hit_mark(slot, (size_t)(off & (CACHE_CHUNK_BYTES - 1)));
	struct mapped_stats *s = cache_stats_tls();
	if (w) {
		s->writes++;
		s->write_hits++;
		s->write_bytes += n;
	} else {
		s->reads++;
		s->read_hits++;
		s->read_bytes += n;
	}
	cache_count(cf, w ? CNT_WHIT : CNT_RHIT, 1);
	cache_count(cf, w ? CNT_WBYTES : CNT_RBYTES, n);
}

/* Read [off, off+n) from the cache into buf: true on a hit. */
static inline bool try_read(struct mapped_local *l, void *buf, size_t n, uint64_t off)
{
	uintptr_t e = cache_entry_of(l->cf, off >> CACHE_CHUNK_SHIFT);
	uint32_t slot;
	if (!e || cache_copy_out(buf, (const unsigned char *)(e & ~CACHE_E_WRITABLE),
				 (size_t)(off & (CACHE_CHUNK_BYTES - 1)), n, &slot) != COPY_HIT)
		return false;
	hit(l->cf, slot, off, 0, n);
	return true;
}

static ssize_t fast_pread(struct chell_file *f, int fd, void *buf, size_t n, off_t off)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || off < 0 || n == 0 || (st & O_ACCMODE) == O_WRONLY || !one_chunk((uint64_t)off, n) ||
	    (uint64_t)off + n > mapped_cached_size(l) || !try_read(l, buf, n, (uint64_t)off))
		return CHELL_FAST_MISS; /* buf may hold bytes now: the general path overwrites them */
	mapped_read_done(&l->inode->times, fd, st, mapped_cached_size(l));
	return (ssize_t)n;
}

static ssize_t fast_read(struct chell_file *f, int fd, void *buf, size_t n)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || n == 0 || (st & O_ACCMODE) == O_WRONLY)
		return CHELL_FAST_MISS;
	uint64_t pos = mapped_fast_offset(f);
	/* Copy first, claim the range after: a claim that fails (the offset
	 * moved) leaves only bytes in buf, which the general path replaces. */
	if (!one_chunk(pos, n) || pos + n > mapped_cached_size(l) || !try_read(l, buf, n, pos) ||
	    !mapped_fast_claim(f, l, &pos, n, false))
		return CHELL_FAST_MISS;
	mapped_read_done(&l->inode->times, fd, st, mapped_cached_size(l));
	return (ssize_t)n;
}

/* Writes inside the current size need no extension. */
static inline unsigned char *writable(struct mapped_local *l, int st, uint64_t off, size_t n)
{
	if ((st & (O_APPEND | O_SYNC | O_DSYNC)) || (st & O_ACCMODE) == O_RDONLY ||
	    !one_chunk(off, n) || off + n > mapped_cached_size(l) ||
	    off + n > mapped_fsize() /* RLIMIT_FSIZE: the general path cuts or refuses */)
		return NULL;
	uintptr_t e = cache_entry_of(l->cf, off >> CACHE_CHUNK_SHIFT);
	/* write-through: the general path writes the backing file too. The
	 * mode after the entry: a mapping handed out under a new mode is
	 * installed after the mode is stored (map.c). */
	if (unlikely(cache_mode_hint(l->cf)))
		return NULL;
	return (e & CACHE_E_WRITABLE) ? (unsigned char *)(e & ~CACHE_E_WRITABLE) : NULL;
}

static ssize_t fast_pwrite(struct chell_file *f, int fd, const void *buf, size_t n, off_t off)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	uint32_t slot;
	unsigned char *base;
	if (!l || off < 0 || n == 0 || !(base = writable(l, st, (uint64_t)off, n)) ||
	    cache_copy_in(base, (size_t)((uint64_t)off & (CACHE_CHUNK_BYTES - 1)), buf, n, &slot, 0) !=
		    COPY_HIT)
		return CHELL_FAST_MISS; /* the general path stores the same bytes again */
	hit(l->cf, slot, (uint64_t)off, 1, n);
	mapped_write_done(&l->inode->times, fd);
	return (ssize_t)n;
}

static ssize_t fast_write(struct chell_file *f, int fd, const void *buf, size_t n)
{
	struct mapped_local *l = mapped_local0(f);
	int st = mapped_fast_status(f);
	if (!l || n == 0)
		return CHELL_FAST_MISS;
	uint64_t pos = mapped_fast_offset(f);
	unsigned char *base = writable(l, st, pos, n);
	if (!base || !mapped_fast_claim(f, l, &pos, n, true))
		return CHELL_FAST_MISS;
	uint32_t slot;
	if (cache_copy_in(base, (size_t)(pos & (CACHE_CHUNK_BYTES - 1)), buf, n, &slot, 0) == COPY_HIT) {
		hit(l->cf, slot, pos, 1, n);
		mapped_write_done(&l->inode->times, fd);
		return (ssize_t)n;
	}
	/* The range is claimed: finish it as a pwrite at pos through the
	 * general path, and give back the part of the claim it did not write. */
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = n};
	chell_ctx c = {f, fd, 0, CHELL_OP_PWRITE, NULL};
	ssize_t r = chell_cache_handler.write(&c, &iov, 1, (off_t)pos, 0);
	if (r != (ssize_t)n)
		mapped_fast_unclaim(f, pos, n, r);
	if (!mapped_local0(f)) /* it moved to the kernel path: the kernel's offset is the truth */
		sys_lseek(fd, (off_t)mapped_fast_offset(f), SEEK_SET);
	return r;
}

static off_t fast_lseek(struct chell_file *f, int fd, off_t off, int whence)
{
	struct mapped_local *l = mapped_local0(f);
	if (!l)
		return CHELL_FAST_MISS;
	uintptr_t e = whence == SEEK_SET && off >= 0 ? cache_entry_of(l->cf, (uint64_t)off >> CACHE_CHUNK_SHIFT)
						      : 0;
	return mapped_fast_seek(f, l, off, whence, (const unsigned char *)(e & ~CACHE_E_WRITABLE),
				CACHE_CHUNK_BYTES);
}

const struct chell_fast_ops cache_fast_ops = MAPPED_FAST_OPS;
