/* SPDX-License-Identifier: MIT */
/*
 * Write-back: check out the dirty blocks of some chunks of one file (the
 * one-chunk dirty table in each control page), plan extents sorted by
 * backing offset and merged where contiguous (wb_plan_build), pwritev each
 * through the manager's own descriptor, fdatasync, and only then check the
 * blocks in clean. A client store racing with this marks its block again
 * after the data (PRE -> POST), so the check-in keeps it dirty: no write is
 * lost (bankshot.md §4.3.2). On any error the check-out is abandoned and
 * the blocks stay dirty.
 *
 * Extents are clamped to the backing file's size, or to the ext_end mark
 * of the chunks when it is beyond: a client stores an extending write
 * before it publishes the new size, and marks the chunk first (cache/
 * layout.h, "Extending writes"), so those bytes are written and the file
 * grows to end after them. Any other dirty block past the end belongs to
 * a file that was truncated since, and writing it would bring the
 * truncated bytes back.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "chell/tier.h"
#include "chelld/engine.h"

#define WB_MAX_EXTENT (1u << 20) /* 256 segments at most: under IOV_MAX */

/* pwritev the whole of iov, resuming after short writes. */
static int pwritev_all(int fd, struct iovec *iov, int n, uint64_t off)
{
	while (n > 0) {
		ssize_t w = pwritev(fd, iov, n, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		off += (uint64_t)w;
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

/* Write one extent, cut at `limit`; bytes written go to *bytes. */
static int write_extent(struct engine *c, int fd, const wb_plan *plan, const wb_extent *e,
			uint64_t limit, uint64_t *bytes)
{
	struct iovec iov[WB_MAX_EXTENT / CACHE_BLOCK_BYTES];
	int n = 0;
	uint64_t len = 0;
	for (uint32_t i = 0; i < e->nsegs && n < (int)(sizeof iov / sizeof iov[0]); i++) {
		const wb_seg *sg = &plan->segs[e->first_seg + i];
		uint64_t off = sg->backing_off, seglen = (uint64_t)sg->nblocks * CACHE_BLOCK_BYTES;
		if (off >= limit)
			break;
		if (off + seglen > limit)
			seglen = limit - off;
		iov[n].iov_base = c->slots[sg->chunk].map + (size_t)sg->first_block * CACHE_BLOCK_BYTES;
		iov[n].iov_len = (size_t)seglen;
		len += seglen;
		n++;
	}
	if (n == 0)
		return 0;
	int rc = pwritev_all(fd, iov, n, e->backing_off);
	if (rc == 0)
		*bytes += len;
	chell_tier_read(len); /* out of the pool, the emulated tier (docs/TIER.md) */
	return rc;
}

/* Dirty blocks the job leaves out (at or past its limit) are dropped from
 * the cache's point of view: say so in the log, with the numbers the limit
 * came from, so a loss can always be traced to its decision. */
static void log_cut(const struct cfile *f, const struct wb_job *j, uint64_t size, uint64_t end,
		    uint64_t clamp)
{
	uint64_t cut = 0, first = UINT64_MAX;
	for (size_t i = 0; i < j->n; i++)
		for (unsigned b = 0; j->in[i].backing_off + CACHE_CHUNK_BYTES > j->limit && b < CACHE_BLOCKS;
		     b++) {
			uint64_t off = j->in[i].backing_off + (uint64_t)b * CACHE_BLOCK_BYTES;
			if (off >= j->limit && cp_bitmap_test(&j->bits[i], b)) {
				cut++;
				first = off < first ? off : first;
			}
		}
	if (cut && end <= clamp) /* not a truncation's clamp */
		chelld_log("write-back of %s leaves out %" PRIu64 " dirty block(s) from offset %" PRIu64
			   ": past the file's size %" PRIu64 " and every extending write's mark (%" PRIu64
			   ")",
			   f->path, cut, first, size, end);
}

int wb_begin(struct engine *c, struct cfile *f, const uint32_t *slots, size_t n, uint64_t clamp,
	     struct wb_job *j)
{
	memset(j, 0, sizeof *j);
	j->fd = -1;
	for (size_t i = 0; i < n; i++)
		engine_wait_idle(c, slots[i]);
	/* While we waited (the lock released), the cleaner may have dropped
	 * chunks of a deleted file: keep only the slots still the file's. */
	uint32_t *keep = malloc((n ? n : 1) * sizeof *keep);
	if (!keep)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (c->slots[slots[i]].map && c->slots[slots[i]].cnode == f->cnode &&
		    !slot_broken(&c->slots[slots[i]]))
			keep[k++] = slots[i];
	slots = keep;
	n = k;
	int fd = cfile_fd(c, f);
	if (fd < 0) {
		free(keep);
		return fd;
	}
	j->f = f;
	j->n = n;
	j->slots = malloc((n ? n : 1) * sizeof *j->slots);
	j->bits = calloc(n ? n : 1, sizeof *j->bits);
	j->in = calloc(n ? n : 1, sizeof *j->in);
	/* its own write descriptor, for this job only (files.c): the cleaner
	 * writes without the lock, and f->fd is read-only and may close */
	j->fd = cfile_wfd(c, f);
	if (j->fd == -ENOMEM)
		j->fd = -1;
	else if (j->fd < 0) {
		free(keep);
		int e = j->fd;
		memset(j, 0, sizeof *j);
		j->fd = -1;
		return e;
	}
	if (!j->slots || !j->bits || !j->in || j->fd < 0) {
		free(j->slots);
		free(j->bits);
		free(j->in);
		if (j->fd >= 0)
			close(j->fd);
		memset(j, 0, sizeof *j);
		j->fd = -1;
		free(keep);
		return -ENOMEM;
	}
	memcpy(j->slots, slots, n * sizeof *slots);
	free(keep);
	slots = j->slots;
	unsigned total = 0;
	for (size_t i = 0; i < n; i++) {
		struct slot *s = &c->slots[slots[i]];
		total += dirty_checkout(s->dt, 0, &j->bits[i]);
		j->in[i] = (wb_chunk){slots[i], s->file_chunk * CACHE_CHUNK_BYTES, &j->bits[i]};
	}
	struct stat st;
	if (total == 0)
		return 0;
	if (fstat(j->fd, &st) < 0) {
		j->rc = -errno;
		return 0;
	}
	if (cfile_deleted(c, f)) {
		/* Unlinked and closed everywhere: nobody can ever read these
		 * bytes, and keeping them would pin the chunks for good. */
		chelld_log("file %s was deleted: discarding its %u dirty block(s)", f->path, total);
		return 0;
	}
	/* after the check-out: a client marks ext_end before its store and
	 * dirty_mark after it, so a block checked out here has its mark */
	uint64_t end = (uint64_t)st.st_size;
	for (size_t i = 0; i < n; i++) {
		uint64_t x = __atomic_load_n(&c->slots[slots[i]].ctl->ext_end, __ATOMIC_ACQUIRE);
		uint64_t chunk_end = (c->slots[slots[i]].file_chunk + 1) * CACHE_CHUNK_BYTES;
		x = x < chunk_end ? x : chunk_end; /* a client's word: bounded by its chunk */
		end = x > end ? x : end;
	}
	j->limit = end < clamp ? end : clamp;
	log_cut(f, j, (uint64_t)st.st_size, end, clamp);
	j->rc = wb_plan_build(j->in, n, WB_MAX_EXTENT, &j->plan);
	j->planned = j->rc == 0;
	return 0;
}

void wb_io(struct engine *c, struct wb_job *j)
{
	if (!j->planned)
		return;
	for (uint32_t e = 0; j->rc == 0 && e < j->plan.next; e++)
		j->rc = write_extent(c, j->fd, &j->plan, &j->plan.ext[e], j->limit, &j->written);
	/* Durable in the backing file before the cache forgets it is dirty. */
	if (j->rc == 0 && j->written && fdatasync(j->fd) < 0)
		j->rc = -errno;
	j->io_done = true;
}

int wb_end(struct engine *c, struct wb_job *j, uint64_t *bytes)
{
	if (!j->f)
		return -EBADF;
	for (size_t i = 0; i < j->n; i++) {
		struct slot *s = &c->slots[j->slots[i]];
		if (j->rc == 0) {
			dirty_checkin(s->dt, 0);
			if (__atomic_load_n(&s->ctl->state, __ATOMIC_ACQUIRE) == CACHE_CHUNK_LIVE)
				s->stuck = false;
		} else {
			dirty_checkin_abort(s->dt, 0);
		}
		chell_persist(c->pops, s->ctl->dirty, dirty_table_bytes(1));
	}
	if (j->planned)
		wb_plan_free(&j->plan);
	if (j->io_done)
		c->st->writeback_ops++;
	int rc = j->rc;
	if (rc == 0 && j->written) {
		c->st->writeback_bytes += j->written;
		j->f->writeback_bytes += j->written;
		if (bytes)
			*bytes += j->written;
		cfile_record(c, j->f); /* our own write is not an outside change */
	}
	struct cfile *f = j->f;
	free(j->slots);
	free(j->bits);
	free(j->in);
	close(j->fd);
	memset(j, 0, sizeof *j);
	j->fd = -1;
	if (rc == 0)
		cfile_release_fd(c, f); /* clean and nobody's: no descriptor needed */
	return rc;
}

int wb_slots(struct engine *c, struct cfile *f, const uint32_t *slots, size_t n, uint64_t clamp,
	     uint64_t *bytes)
{
	struct wb_job j;
	int rc = wb_begin(c, f, slots, n, clamp, &j);
	if (rc < 0)
		return rc;
	wb_io(c, &j);
	return wb_end(c, &j, bytes);
}

uint32_t engine_file_slots(const struct engine *c, uint32_t cnode, uint32_t *out)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map && c->slots[s].cnode == cnode)
			out[n++] = s;
	/* file-chunk order, for the log and for sequential write-back */
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && c->slots[out[j - 1]].file_chunk >
						  c->slots[out[j]].file_chunk; j--) {
			uint32_t t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

/* Write back one file's dirty slots; an eviction whose write-back had
 * failed (REVOKED, kept) is finished once it succeeds. Returns 0, 1 if the
 * file had dirty blocks, or -errno. */
static int wb_one_file(struct engine *c, struct cfile *f, uint32_t *slots, uint64_t *blocks,
		       uint64_t *bytes, bool progress)
{
	uint32_t n = engine_file_slots(c, f->cnode, slots), k = 0;
	uint64_t nd = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct slot *s = &c->slots[slots[i]];
		unsigned d = chunk_ndirty(s);
		if (d) {
			slots[k++] = slots[i];
			nd += d;
		}
	}
	if (k == 0)
		return 0;
	if (blocks)
		*blocks += nd;
	if (progress)
		chelld_log("writing back %llu dirty block(s) of %s", (unsigned long long)nd, f->path);
	int rc = wb_slots(c, f, slots, k, UINT64_MAX, bytes);
	for (uint32_t i = 0; rc == 0 && i < k; i++)
		if (c->slots[slots[i]].map &&
		    __atomic_load_n(&c->slots[slots[i]].ctl->state, __ATOMIC_ACQUIRE) ==
			    CACHE_CHUNK_REVOKED)
			chunk_revoke(c, slots[i], UINT64_MAX);
	return rc < 0 ? rc : 1;
}

int wb_file(struct engine *c, struct cfile *f, uint64_t *blocks, uint64_t *bytes, uint32_t *files)
{
	uint32_t *slots = malloc(((size_t)c->nslots + 1) * sizeof *slots);
	if (!slots)
		return -ENOMEM;
	int first = 0;
	for (uint32_t id = 0; id < c->pool.max_cnodes; id++) {
		struct cfile *g = f ? f : cfile_get(c, id);
		if (!g)
			continue;
		int rc = wb_one_file(c, g, slots, blocks, bytes, !f);
		if (rc < 0) {
			chelld_log("file %s: write-back failed: %s", g->path, strerror(-rc));
			if (!first)
				first = rc;
		}
		if (files && (f || rc))
			(*files)++;
		if (f)
			break;
	}
	free(slots);
	return first;
}
