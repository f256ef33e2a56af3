/* SPDX-License-Identifier: MIT */
/*
 * Moving bytes between the application's iovecs and the cache, one chunk
 * piece at a time: the hit protocol (copy.c) on the mapped chunk, and on a
 * miss a MAP of exactly the blocks the piece needs (map.c), then again.
 *
 * Whole blocks a write covers that are not in the cache yet need no fill
 * from the backing file: they are mapped with OVERWRITE, stored while still
 * invalid, and validated (and marked dirty) by the manager on OVERWRITE.
 * Any hitch - a block became valid (a reader's fill raced with us), the
 * chunk file changed, an older manager - and the piece is simply written
 * again the normal way, which is always correct.
 */
#include "cache.h"

/* A chunk that keeps being revoked under us this many times in one piece
 * means something is wrong with the manager: report EIO rather than spin. */
#define MAX_MISSES 1000

enum { PIECE_OK = 0, PIECE_KERNEL = 1, PIECE_AROUND = 2 };

/* [in, in+len) of chunk k <-> u through the hit protocol, missing until it
 * hits: PIECE_OK, PIECE_KERNEL (the descriptor must use the kernel path),
 * or -errno. */
/* A read that misses at the end of chunk k and goes on for `ahead` more
 * bytes: how many chunks one MAP should hand over (k and the following
 * ones not mapped in this process yet, at most CHELLD_MAP_BATCH), and
 * the blocks wanted of the last. 1: no batch. */
static unsigned batch_of(struct cache_file *cf, uint64_t k, size_t ahead, unsigned *last_n)
{
	unsigned n = 1;
	while (ahead && n < CHELLD_MAP_BATCH && k + n < CACHE_MAX_CHUNK && !cache_entry_of(cf, k + n)) {
		size_t take = ahead < CACHE_CHUNK_BYTES ? ahead : CACHE_CHUNK_BYTES;
		*last_n = (unsigned)((take + CACHE_BLOCK_BYTES - 1) / CACHE_BLOCK_BYTES);
		ahead -= take;
		n++;
	}
	return n;
}

static int piece(chell_ctx *c, struct cache_file *cf, uint64_t k, size_t in, unsigned char *u,
		 size_t len, int to_file, size_t ahead)
{
	/* an extending write: the bytes of this piece end here */
	uint64_t ext = to_file == CACHE_XFER_EXTEND ? (k << CACHE_CHUNK_SHIFT) + in + len : 0;
	struct mapped_stats *s = cache_stats_tls();
	for (int misses = 0;; misses++) {
		uintptr_t e = cache_entry_of(cf, k);
		unsigned char *base = (unsigned char *)(e & ~CACHE_E_WRITABLE);
		uint32_t slot = 0;
		int r = COPY_MISS;
		if (e && (!to_file || (e & CACHE_E_WRITABLE)))
			r = to_file ? cache_copy_in(base, in, u, len, &slot, ext)
				    : cache_copy_out(u, base, in, len, &slot);
		if (r == COPY_HIT) {
			cache_hit_mark(slot, in);
			if (misses == 0) {
				if (to_file)
					s->write_hits++;
				else
					s->read_hits++;
				cache_count(cf, to_file ? CNT_WHIT : CNT_RHIT, 1);
			}
			return PIECE_OK;
		}
		if (r == COPY_EFAULT)
			return -EFAULT;
		if (misses == 0) {
			if (to_file)
				s->write_misses++;
			else
				s->read_misses++;
			cache_count(cf, to_file ? CNT_WMISS : CNT_RMISS, 1);
		}
		if (misses == MAX_MISSES) {
			chell_log("cache: chunk %llu of %s was revoked %d times in a row; giving up with EIO",
				  (unsigned long long)k, c->f->path ? c->f->path : "?", MAX_MISSES);
			return -EIO;
		}
		unsigned first = (unsigned)(in / CACHE_BLOCK_BYTES);
		unsigned nb = (unsigned)((in + len - 1) / CACHE_BLOCK_BYTES) - first + 1;
		/* Reads across chunks: the neighbours not mapped yet come in the
		 * same round trip. */
		unsigned last_n = 0, nch = !to_file && misses == 0 && in + len == CACHE_CHUNK_BYTES
						  ? batch_of(cf, k, ahead, &last_n) : 1;
		int m = nch > 1 ? cache_miss_batch(cf, c->fd, k, first, nb, 0, nch, last_n)
				: cache_miss(cf, c->fd, k, first, nb, to_file ? 1 : 0);
		if (m == CACHE_MISS_KERNEL)
			return PIECE_KERNEL;
		if (m == CACHE_MISS_AROUND)
			return PIECE_AROUND; /* the rest of the write goes to the backing file */
		if (m == CACHE_MISS_SKIP) /* the manager holds nothing of the chunk */
			return cache_read_around(c->fd, u, len, (k << CACHE_CHUNK_SHIFT) + in);
		if (m < 0)
			return m;
	}
}

/* Whole blocks [in, in+len) of chunk k, none in the cache yet: stored
 * without a fill. true when done; false to write them the normal way. */
static bool overwrite(chell_ctx *c, struct cache_file *cf, uint64_t k, size_t in,
		      const unsigned char *u, size_t len, int *efault, bool extend)
{
	uint64_t ext = extend ? (k << CACHE_CHUNK_SHIFT) + in + len : 0;
	unsigned first = (unsigned)(in / CACHE_BLOCK_BYTES), n = (unsigned)(len / CACHE_BLOCK_BYTES);
	uint32_t slot;
	uint64_t inc;
	for (int tries = 0; tries < 2; tries++) {
		uintptr_t e = cache_entry_of(cf, k);
		int r = COPY_MISS;
		if (e & CACHE_E_WRITABLE)
			r = cache_copy_overwrite((unsigned char *)(e & ~CACHE_E_WRITABLE), in, u, len,
						 &slot, &inc, ext);
		if (r == COPY_EFAULT) {
			*efault = 1;
			return false;
		}
		if (r == COPY_HIT) {
			if (cache_overwrite(cf, k, slot, inc, first, n) != 0)
				return false;
			cache_hit_mark(slot, in);
			struct mapped_stats *s = cache_stats_tls();
			s->overwrites++;
			s->write_misses++; /* it took the manager, if not a fill */
			cache_count(cf, CNT_WMISS, 1);
			return true;
		}
		/* A LIVE chunk with some of the blocks valid: the normal way
		 * (mostly hits). Not mapped, not writable, revoked: a mapping
		 * without a fill, then one more look. */
		if (tries > 0 || (e & CACHE_E_WRITABLE && r == COPY_MISS &&
				  cache_ctl_live((const unsigned char *)(e & ~CACHE_E_WRITABLE))))
			return false;
		if (cache_miss(cf, c->fd, k, first, n, 1 | CACHE_WANT_OVERWRITE) != 0)
			return false;
	}
	return false;
}

/* A read piece whose user buffer turned out bad somewhere: the kernel's
 * copy_to_user stops at the first byte it cannot store, and read returns
 * what was stored before it (EFAULT only if nothing was). Find that point:
 * again piece by piece, cut at the buffer's page boundaries (a page that is
 * readable but not writable faults too, so cache_user_readable, the
 * write side's answer, would not do). */
static ssize_t read_to_fault(chell_ctx *c, struct cache_file *cf, uint64_t k, size_t in,
			     unsigned char *u, size_t len, size_t done)
{
	size_t at = 0;
	while (at < len) {
		size_t seg = 4096 - ((uintptr_t)(u + at) & 4095);
		if (seg > len - at)
			seg = len - at;
		if (piece(c, cf, k, in + at, u + at, seg, 0, 0) != PIECE_OK)
			break; /* the bad page, or anything else: stop before it */
		at += seg;
	}
	done += at;
	return done ? (ssize_t)done : -EFAULT;
}

ssize_t cache_transfer(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
		       int to_file, int *kernel)
{
	struct mapped_local *l = mapped_local(c);
	struct cache_file *cf = l->cf;
	size_t done = 0;
	*kernel = 0;
	/* An extending write's whole blocks at or past the size hold nothing
	 * to fill: a MAP makes them valid zeros without I/O, with the manager's
	 * zero-ahead (chelld/chunk.c, ZERO_AHEAD) after them, so the writes
	 * that follow hit. The overwrite protocol would validate only the
	 * blocks stored, one OVERWRITE round trip per write (4 KB extending
	 * writes: 20-50 us instead of 5). It pays only below the size, where
	 * it saves a fill. */
	uint64_t no_overwrite_from = to_file == CACHE_XFER_EXTEND ? mapped_isize(l->inode) : UINT64_MAX;
	for (int i = 0; i < cnt && done < n; i++) {
		size_t vlen = iov[i].iov_len < n - done ? iov[i].iov_len : n - done, vdone = 0;
		while (vdone < vlen) {
			uint64_t p = pos + done, k = p >> CACHE_CHUNK_SHIFT;
			size_t in = (size_t)(p & (CACHE_CHUNK_BYTES - 1));
			size_t len = CACHE_CHUNK_BYTES - in;
			if (len > vlen - vdone)
				len = vlen - vdone;
			unsigned char *u = (unsigned char *)iov[i].iov_base + vdone;
			int r = PIECE_OK;
			/* the whole blocks in the middle of a write piece */
			size_t head = (CACHE_BLOCK_BYTES - in % CACHE_BLOCK_BYTES) % CACHE_BLOCK_BYTES;
			head = head < len ? head : len;
			size_t mid = (len - head) / CACHE_BLOCK_BYTES * CACHE_BLOCK_BYTES;
			int efault = 0;
			if (to_file && mid && k < CACHE_MAX_CHUNK && p + head < no_overwrite_from &&
			    cache_overwrite_ok() &&
			    overwrite(c, cf, k, in + head, u + head, mid, &efault,
				      to_file == CACHE_XFER_EXTEND)) {
				if (head)
					r = piece(c, cf, k, in, u, head, to_file, 0);
				if (r == PIECE_OK && len - head - mid)
					r = piece(c, cf, k, in + head + mid, u + head + mid,
						  len - head - mid, to_file, 0);
			} else if (efault) {
				r = -EFAULT;
			} else {
				r = piece(c, cf, k, in, u, len, to_file, n - done - len);
			}
			if (r == -EFAULT && to_file) {
				/* The kernel stores what it can copy before the page
				 * that faults, and returns that count: so do we. */
				size_t ok = cache_user_readable(u, len);
				r = ok ? piece(c, cf, k, in, u, ok, to_file, 0) : -EFAULT;
				if (r == PIECE_OK)
					return (ssize_t)(done + ok);
			}
			if (r == PIECE_KERNEL || r == PIECE_AROUND) {
				*kernel = r == PIECE_KERNEL ? 1 : 2;
				return (ssize_t)done;
			}
			if (r == -EFAULT && !to_file)
				return read_to_fault(c, cf, k, in, u, len, done);
			if (r < 0)
				return done ? (ssize_t)done : r;
			done += len;
			vdone += len;
		}
	}
	cache_count(cf, to_file ? CNT_WBYTES : CNT_RBYTES, done);
	return (ssize_t)done;
}
