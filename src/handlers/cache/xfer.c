/* SPDX-License-Identifier: MIT */
/*
 * Moving bytes between the application's iovecs and the cache, one chunk
 * piece at a time: the hit protocol (copy.c) on the mapped chunk, and on a
 * miss a MAP of exactly the blocks the piece needs (map.c), then again.
 */
#include "cache.h"

/* A chunk that keeps being revoked under us this many times in one piece
 * means something is wrong with the manager: report EIO rather than spin. */
#define MAX_MISSES 1000

static inline void hit_mark(uint32_t slot)
{
	if (slot < cache_access.nchunks)
		access_mark(&cache_access, slot);
}

ssize_t cache_transfer(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
		       int to_file, int *kernel)
{
	struct cache_local *l = (struct cache_local *)c->f->local[c->layer];
	struct cache_file *cf = l->cf;
	struct cache_stats *s = cache_stats_tls();
	size_t done = 0;
	*kernel = 0;
	for (int i = 0; i < cnt && done < n; i++) {
		size_t vlen = iov[i].iov_len < n - done ? iov[i].iov_len : n - done, vdone = 0;
		while (vdone < vlen) {
			uint64_t p = pos + done, k = p >> CACHE_CHUNK_SHIFT;
			size_t in = (size_t)(p & (CACHE_CHUNK_BYTES - 1));
			size_t piece = CACHE_CHUNK_BYTES - in;
			if (piece > vlen - vdone)
				piece = vlen - vdone;
			unsigned char *u = (unsigned char *)iov[i].iov_base + vdone;
			for (int misses = 0;; misses++) {
				uintptr_t e = cache_entry_of(cf, k);
				unsigned char *base = (unsigned char *)(e & ~CACHE_E_WRITABLE);
				uint32_t slot = 0;
				int r = COPY_MISS;
				if (e && (!to_file || (e & CACHE_E_WRITABLE)))
					r = to_file ? cache_copy_in(base, in, u, piece, &slot)
						    : cache_copy_out(u, base, in, piece, &slot);
				if (r == COPY_HIT) {
					hit_mark(slot);
					if (misses == 0) {
						if (to_file)
							s->write_hits++;
						else
							s->read_hits++;
						cache_count(cf, to_file ? CNT_WHIT : CNT_RHIT, 1);
					}
					break;
				}
				if (r == COPY_EFAULT)
					return done ? (ssize_t)done : -EFAULT;
				if (misses == 0) {
					if (to_file)
						s->write_misses++;
					else
						s->read_misses++;
					cache_count(cf, to_file ? CNT_WMISS : CNT_RMISS, 1);
				}
				if (misses == MAX_MISSES) {
					chell_log("cache: chunk %llu of %s was revoked %d times in a row; "
						  "giving up with EIO", (unsigned long long)k,
						  c->f->path ? c->f->path : "?", MAX_MISSES);
					return done ? (ssize_t)done : -EIO;
				}
				unsigned first = (unsigned)(in / CACHE_BLOCK_BYTES);
				unsigned nb = (unsigned)((in + piece - 1) / CACHE_BLOCK_BYTES) - first + 1;
				int m = cache_miss(cf, c->fd, k, first, nb, to_file);
				if (m == CACHE_MISS_KERNEL) {
					*kernel = 1;
					return (ssize_t)done;
				}
				if (m < 0)
					return done ? (ssize_t)done : m;
			}
			done += piece;
			vdone += piece;
		}
	}
	cache_count(cf, to_file ? CNT_WBYTES : CNT_RBYTES, done);
	return (ssize_t)done;
}
