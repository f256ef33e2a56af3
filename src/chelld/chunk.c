/* SPDX-License-Identifier: MIT */
/*
 * Chunk files (cache/layout.h): one file per use of a slot, so an old
 * mapping can never show another file's data.
 *
 * Create: allocate the slot in the meta (a transaction), create the file
 * under a temporary name, size it, initialise the control page with state
 * INIT, fill, set the valid bits, persist, store LIVE, persist, and only
 * then rename it to chunks/<slot>. Recovery treats a missing file or one
 * still INIT as never handed out.
 *
 * Revoke: store REVOKED, seq_cst fence (pairs with the client's fence
 * between its dirty mark and its state re-check), check out and write back
 * the dirty blocks, then truncate the file to 0 (every client's mapping
 * now faults, and the memory is freed), unlink it and free the slot.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chell/tier.h"
#include "chelld/engine.h"

unsigned chunk_nvalid(const struct slot *s)
{
	unsigned n = 0;
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++)
		n += (unsigned)__builtin_popcountll(__atomic_load_n(&s->ctl->valid[w], __ATOMIC_RELAXED));
	return n;
}

unsigned chunk_ndirty(const struct slot *s)
{
	unsigned n = 0;
	for (unsigned b = 0; b < CACHE_BLOCKS; b++)
		n += dirty_state(s->dt, 0, b) != BLK_CLEAN;
	return n;
}

/* The 64 KB groups (access-table bits) of blocks [b, e), e > b. */
static uint32_t groups_of(unsigned b, unsigned e)
{
	enum { G = CACHE_BLOCKS / CHELLD_ACCESS_GROUPS };
	unsigned gb = b / G, ge = (e - 1) / G;
	return (uint32_t)(((2ull << ge) - 1) & ~((1ull << gb) - 1));
}

static bool block_valid(const struct cache_ctl *ctl, unsigned b)
{
	return (__atomic_load_n(&ctl->valid[b / 64], __ATOMIC_ACQUIRE) >> (b % 64)) & 1;
}

static int map_file(struct engine *c, uint32_t slot, int fd)
{
	void *p = mmap(NULL, CACHE_CHUNK_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	struct slot *s = &c->slots[slot];
	s->map = p;
	s->ctl = (struct cache_ctl *)(s->map + CACHE_CHUNK_BYTES);
	return 0;
}

int chunk_attach(struct engine *c, uint32_t slot, uint32_t cnode, uint64_t file_chunk)
{
	char name[16];
	pool_chunk_name(slot, name, sizeof name);
	int fd = openat(c->pool.chunks_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	int rc = map_file(c, slot, fd);
	close(fd);
	if (rc < 0)
		return rc;
	struct slot *s = &c->slots[slot];
	s->dt = dirty_table_open(s->ctl->dirty);
	s->cnode = cnode;
	s->file_chunk = file_chunk;
	s->stuck = false;
	if (!s->dt) {
		munmap(s->map, CACHE_CHUNK_FILE_BYTES);
		s->map = NULL;
		return -EUCLEAN;
	}
	s->charged = 1 + chunk_nvalid(s);
	c->used += s->charged;
	return 0;
}

/* Create the chunk file of a freshly allocated slot (state stays INIT
 * until chunk_fill's caller publishes it). */
static int create_file(struct engine *c, uint32_t slot, struct cfile *f, uint64_t file_chunk)
{
	char tmp[32];
	snprintf(tmp, sizeof tmp, ".new-%u", slot);
	unlinkat(c->pool.chunks_fd, tmp, 0);
	int fd = openat(c->pool.chunks_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (ftruncate(fd, (off_t)CACHE_CHUNK_FILE_BYTES) < 0)
		rc = -errno;
	if (rc == 0)
		rc = map_file(c, slot, fd);
	close(fd);
	if (rc < 0) {
		unlinkat(c->pool.chunks_fd, tmp, 0);
		return rc;
	}
	struct slot *s = &c->slots[slot];
	struct meta_chunk_info ci;
	meta_chunk_info(c->m, slot, &ci);
	struct cache_ctl *ctl = s->ctl;
	ctl->magic = CACHE_CTL_MAGIC;
	ctl->version = CACHE_CTL_VERSION;
	ctl->state = CACHE_CHUNK_INIT;
	ctl->slot = slot;
	ctl->cnode = f->cnode;
	ctl->dev = f->dev;
	ctl->ino = f->ino;
	ctl->file_chunk = file_chunk;
	ctl->incarnation = ci.seq;
	s->dt = dirty_table_init(ctl->dirty, 1);
	s->cnode = f->cnode;
	s->file_chunk = file_chunk;
	s->stuck = false;
	chell_persist(c->pops, ctl, sizeof *ctl);
	return 0;
}

/* Publish: LIVE, persisted, then the file takes the slot's name. */
static int publish(struct engine *c, uint32_t slot)
{
	struct slot *s = &c->slots[slot];
	__atomic_store_n(&s->ctl->state, CACHE_CHUNK_LIVE, __ATOMIC_RELEASE);
	chell_persist(c->pops, s->ctl, 64);
	char tmp[32], name[16];
	snprintf(tmp, sizeof tmp, ".new-%u", slot);
	pool_chunk_name(slot, name, sizeof name);
	if (renameat(c->pool.chunks_fd, tmp, c->pool.chunks_fd, name) < 0)
		return -errno;
	c->dir_dirty = true;
	return 0;
}

/* Undo a slot whose creation failed before it was published. */
static void discard_new(struct engine *c, uint32_t slot)
{
	struct slot *s = &c->slots[slot];
	char tmp[32];
	snprintf(tmp, sizeof tmp, ".new-%u", slot);
	if (s->map)
		munmap(s->map, CACHE_CHUNK_FILE_BYTES);
	memset(s, 0, sizeof *s);
	unlinkat(c->pool.chunks_fd, tmp, 0);
	meta_chunk_unmap(c->m, slot);
}

/* chunk_get; *created: the slot is new, made by this call (no client can
 * have mapped it yet while the caller keeps the lock). */
static int chunk_get_ex(struct engine *c, struct cfile *f, uint64_t file_chunk, bool *created)
{
	int slot;
	*created = false;
again:
	slot = meta_chunk_lookup(c->m, f->cnode, file_chunk);
	/* Being evicted by another thread (its write-back runs without the
	 * lock): wait for it to finish, then look again. */
	while (slot >= 0 && c->slots[slot].map && c->slots[slot].revoking) {
		engine_wait_quiet(c, (uint32_t)slot);
		slot = meta_chunk_lookup(c->m, f->cnode, file_chunk);
	}
	if (slot >= 0) {
		struct slot *s = &c->slots[slot];
		/* (this load is where a truncated chunk file shows: guard.c) */
		bool live = s->map &&
			    __atomic_load_n(&s->ctl->state, __ATOMIC_ACQUIRE) == CACHE_CHUNK_LIVE;
		if (s->map && slot_broken(s)) {
			chunk_revoke(c, (uint32_t)slot, 0);
			goto again;
		} else if (!live && !s->stuck) {
			/* REVOKED and being finished by another worker (it waits
			 * for a fill to end first): wait until the slot is freed */
			pthread_cond_wait(&c->idle, &c->lock);
			goto again;
		} else if (!live) {
			return -EIO; /* a revocation whose write-back failed */
		} else {
			return slot;
		}
	}
	if (slot != -ENOENT)
		return slot;
	/* Making room may release the lock (a write-back, a fill to wait
	 * for), and another worker may map this very chunk meanwhile: then
	 * it is the one to use (meta_chunk_map would return it, and creating
	 * its file again would throw its data away). */
	int room = engine_make_room(c, 1, -1); /* the new file's control page */
	if (room < 0)
		return room;
	if (meta_chunk_lookup(c->m, f->cnode, file_chunk) != -ENOENT)
		goto again;
	for (uint32_t tries = 0;; tries++) {
		slot = meta_chunk_map(c->m, f->cnode, file_chunk);
		if (slot != -ENOSPC)
			break;
		if (tries > c->nslots)
			return -ENOSPC;
		/* A failed write-back keeps its victim (stuck) and we try the
		 * next one; -EBUSY: nothing evictable (though the cleaner may
		 * have freed a slot while we waited for it: one more try). */
		int e = evict_one(c);
		if (meta_chunk_lookup(c->m, f->cnode, file_chunk) != -ENOENT)
			goto again;
		if (e == -EBUSY) {
			slot = meta_chunk_map(c->m, f->cnode, file_chunk);
			if (slot == -ENOSPC)
				return -ENOSPC;
			break;
		}
	}
	if (slot < 0)
		return slot;
	int rc = create_file(c, (uint32_t)slot, f, file_chunk);
	if (rc < 0) {
		meta_chunk_unmap(c->m, (uint32_t)slot);
		return rc;
	}
	rc = publish(c, (uint32_t)slot);
	if (rc < 0) {
		discard_new(c, (uint32_t)slot);
		return rc;
	}
	/* CAR recognises a chunk that comes back by what it is, not where */
	policy_insert_key(c->pol, (uint32_t)slot, ((uint64_t)f->cnode << 40) ^ file_chunk);
	c->slots[slot].charged = 1;
	c->used += 1;
	*created = true;
	return slot;
}

int chunk_get(struct engine *c, struct cfile *f, uint64_t file_chunk)
{
	bool created;
	return chunk_get_ex(c, f, file_chunk, &created);
}

/* Read [off, off+len) of the backing file into the chunk at the same
 * offset inside it; what lies past the end of the file stays zero. */
static int fill_range(int fd, uint8_t *dst, uint64_t off, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n = pread(fd, dst + done, len - done, (off_t)(off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* the file shrank meanwhile: the rest is a hole */
		done += (size_t)n;
	}
	chell_tier_write(done); /* the pool is the emulated tier (docs/TIER.md) */
	return 0;
}

/* Read-ahead as the page cache's on-demand read-ahead does it, per file: a
 * miss that starts inside the previous miss's fill or where it ended (its
 * blocks plus read-ahead: a sequential reader misses there), at the start
 * of the file, or at or past its end (an append) is sequential, and its
 * window starts at four times the request and doubles on each such miss,
 * up to --readahead (or the request's own size, when larger). Any other
 * miss is random and fills exactly the blocks it asks: random 4 KB reads
 * read 4 KB from the device. */
static unsigned ra_window(struct engine *c, struct cfile *f, uint64_t pos, unsigned n,
			  uint64_t eof_block)
{
	uint64_t max = c->cfg->readahead / CACHE_BLOCK_BYTES;
	uint64_t w = 0;
	bool seq = pos >= f->ra_prev && pos <= f->ra_next;
	if (max && seq && f->ra_window)
		w = 2ull * f->ra_window;
	else if (max && (seq || pos == 0 || pos >= eof_block))
		w = 4ull * n;
	if (max && max < n)
		max = n;
	if (w > max)
		w = max;
	return (unsigned)w; /* the caller records pos in f->ra_prev once it fills */
}

/* Blocks at or past the end of the file hold zeros and become valid
 * without I/O; past the blocks asked (and their read-ahead), this many
 * more, so appends and reads at the end miss once per window, not per
 * block. They count against the capacity like filled ones (a client may
 * store into them), so the window is bounded. */
#define ZERO_AHEAD 64u /* blocks: 256 KB */

/* The runs of blocks one fill reads, found with the lock held. */
struct fill_run {
	unsigned b, e;    /* blocks [b, e) of the chunk */
	uint64_t from, to; /* the part of the backing file below its end */
};

/* Read the runs into the chunk (no lock held: the slot is `filling`, so
 * nothing revokes, evicts or refills it, and no OVERWRITE validates its
 * blocks meanwhile). 0 or -errno. */
static int fill_io(struct engine *c, struct slot *s, int fd, const struct fill_run *runs,
		   unsigned nruns)
{
	for (unsigned i = 0; i < nruns; i++) {
		if (runs[i].to <= runs[i].from)
			continue;
		uint8_t *dst = s->map + (size_t)runs[i].b * CACHE_BLOCK_BYTES;
		int rc = fill_range(fd, dst, runs[i].from, (size_t)(runs[i].to - runs[i].from));
		if (rc < 0)
			return rc;
		/* The bytes live in the pool now: the backing file system's page
		 * cache copy would be a second, uncounted cache of the same data,
		 * and where the pool shares a memory limit with it (a cgroup)
		 * every fill would make the kernel reclaim. Dirty or mapped
		 * pages are left alone by the kernel. */
		posix_fadvise(fd, (off_t)runs[i].from, (off_t)(runs[i].to - runs[i].from),
			      POSIX_FADV_DONTNEED);
		/* The data must be durable before the bit that says so. */
		c->pops->flush(c->pops->ctx, dst, (size_t)(runs[i].to - runs[i].from));
	}
	c->pops->drain(c->pops->ctx);
	return 0;
}

int chunk_fill(struct engine *c, uint32_t slot, unsigned first, unsigned n)
{
	struct slot *s = &c->slots[slot];
	struct cfile *f = cfile_get(c, s->cnode);
	if (!f)
		return -EUCLEAN;
	if (first >= CACHE_BLOCKS)
		return -EINVAL;
	if (n == 0)
		return 0; /* just the mapping */
	if (!s->map)
		return -EAGAIN;
	uint64_t inc = s->ctl->incarnation;
	bool roomed = false;
again:
	/* One fill per chunk at a time (FILLING, with waiters): a second miss
	 * on the chunk waits and then finds its blocks valid, or fills the
	 * rest. Misses on other chunks are not held up. */
	while (s->map && s->filling)
		pthread_cond_wait(&c->idle, &c->lock);
	if (!s->map || slot_broken(s) || s->ctl->incarnation != inc || s->revoking ||
	    __atomic_load_n(&s->ctl->state, __ATOMIC_ACQUIRE) != CACHE_CHUNK_LIVE)
		return -EAGAIN; /* revoked while we waited: the caller maps again */
	unsigned end = n > CACHE_BLOCKS - first ? CACHE_BLOCKS : first + n;
	int fd = cfile_fd(c, f);
	struct stat st;
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		return -errno;
	uint64_t base = s->file_chunk * CACHE_CHUNK_BYTES, size = (uint64_t)st.st_size;
	uint64_t fblock = s->file_chunk * CACHE_BLOCKS;
	uint64_t eof_block = (size + CACHE_BLOCK_BYTES - 1) / CACHE_BLOCK_BYTES;
	/* Blocks asked that are all valid already (a client that had no
	 * mapping yet, or lost it, or waited for another fill): nothing to
	 * fill, and no read-ahead. */
	bool all_valid = true;
	for (unsigned i = first; i < end && all_valid; i++)
		all_valid = block_valid(s->ctl, i);
	if (all_valid)
		return 0;
	/* Room first: the blocks this fill makes valid, read or zero. The
	 * window is recomputed after a wait, so the read-ahead state moves
	 * only once, below. */
	unsigned ra = ra_window(c, f, fblock + first, end - first, eof_block);
	unsigned rend = end + ra > CACHE_BLOCKS ? CACHE_BLOCKS : end + ra;
	unsigned zend = rend + ZERO_AHEAD > CACHE_BLOCKS ? CACHE_BLOCKS : rend + ZERO_AHEAD;
	unsigned need = 0;
	for (unsigned i = first; i < zend; i++)
		if (!block_valid(s->ctl, i) && (i < rend || fblock + i >= eof_block))
			need++;
	if (need && !roomed && c->used + need > c->cap) {
		roomed = true;
		int rc = engine_make_room(c, need, slot);
		if (rc < 0)
			return rc;
		/* make_room may have waited (lock released): start over */
		goto again;
	}
	f->ra_prev = fblock + first;
	f->ra_window = ra;
	f->ra_next = fblock + rend;
	end = rend;
	struct fill_run runs[CACHE_BLOCKS / 2 + 1];
	unsigned nruns = 0;
	uint64_t newbits[CACHE_BLOCKS / 64] = {0};
	unsigned b = first;
	while (b < end) {
		if (block_valid(s->ctl, b)) {
			b++;
			continue;
		}
		unsigned e = b;
		while (e < end && !block_valid(s->ctl, e))
			e++;
		/* [b, e) is a run of invalid blocks; read the part below EOF. */
		uint64_t from = base + (uint64_t)b * CACHE_BLOCK_BYTES;
		uint64_t to = base + (uint64_t)e * CACHE_BLOCK_BYTES;
		if (to > size)
			to = size > from ? size : from;
		runs[nruns++] = (struct fill_run){b, e, from, to};
		for (unsigned i = b; i < e; i++)
			newbits[i / 64] |= 1ull << (i % 64);
		b = e;
	}
	for (unsigned i = end; i < zend; i++)
		if (fblock + i >= eof_block && !block_valid(s->ctl, i))
			newbits[i / 64] |= 1ull << (i % 64);
	/* The I/O without the lock, from a descriptor of our own (f->fd may
	 * be closed meanwhile: files.c), with the pages reserved so that
	 * concurrent fills do not overshoot the capacity together. */
	int rc = 0;
	bool io = false;
	for (unsigned i = 0; i < nruns && !io; i++)
		io = runs[i].to > runs[i].from;
	if (io) {
		int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (dfd < 0)
			return -errno;
		s->filling = true;
		c->used += need;
		if (++c->fills_inflight > c->fills_inflight_max)
			c->fills_inflight_max = c->fills_inflight;
		pthread_mutex_unlock(&c->lock);
		rc = fill_io(c, s, dfd, runs, nruns);
		close(dfd);
		pthread_mutex_lock(&c->lock);
		c->used -= need;
		c->fills_inflight--;
		s->filling = false;
		pthread_cond_broadcast(&c->idle);
		if (rc < 0)
			return rc;
		for (unsigned i = 0; i < nruns; i++)
			if (runs[i].to > runs[i].from) {
				f->fills++;
				f->fill_bytes += runs[i].to - runs[i].from;
				c->st->fills++;
				c->st->fill_bytes += runs[i].to - runs[i].from;
			}
	}
	unsigned added = 0;
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++)
		if (newbits[w]) {
			uint64_t old = __atomic_fetch_or(&s->ctl->valid[w], newbits[w], __ATOMIC_RELEASE);
			added += (unsigned)__builtin_popcountll(newbits[w] & ~old);
		}
	s->charged += added;
	c->used += added;
	s->hot |= groups_of(first, end);
	chell_persist(c->pops, s->ctl->valid, sizeof s->ctl->valid);
	return 0;
}

int chunk_overwrite(struct engine *c, uint32_t slot, uint64_t incarnation, unsigned first,
		    unsigned n)
{
	struct slot *s = &c->slots[slot];
	if (first >= CACHE_BLOCKS || n == 0 || n > CACHE_BLOCKS - first)
		return -EINVAL;
	for (int pass = 0; pass < 2; pass++) {
		/* A fill in progress writes invalid blocks without the lock:
		 * wait for it (it then makes them valid, and we answer EAGAIN). */
		while (s->map && s->filling)
			pthread_cond_wait(&c->idle, &c->lock);
		/* (Again after making room: an eviction may wait for the cleaner,
		 * with the lock released.) */
		if (!s->map || slot_broken(s) ||
		    __atomic_load_n(&s->ctl->state, __ATOMIC_ACQUIRE) != CACHE_CHUNK_LIVE ||
		    s->ctl->incarnation != incarnation)
			return -EAGAIN; /* the client stored into a chunk file that is gone */
		for (unsigned b = first; b < first + n; b++)
			if (block_valid(s->ctl, b))
				return -EAGAIN; /* a fill raced with the client's stores */
		if (pass == 0) {
			int rc = engine_make_room(c, n, slot);
			if (rc < 0)
				return rc;
		}
	}
	/* Valid, then dirty: dirty blocks are always valid ones (`chell cache
	 * check`), and nothing evicts or cleans between the two (the lock). */
	uint64_t bits[CACHE_BLOCKS / 64] = {0};
	for (unsigned b = first; b < first + n; b++)
		bits[b / 64] |= 1ull << (b % 64);
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++)
		if (bits[w])
			__atomic_fetch_or(&s->ctl->valid[w], bits[w], __ATOMIC_RELEASE);
	chell_persist(c->pops, s->ctl->valid, sizeof s->ctl->valid);
	dirty_mark(s->dt, 0, first, n);
	chell_persist(c->pops, s->ctl->dirty, dirty_table_bytes(1));
	s->charged += n;
	c->used += n;
	s->hot |= groups_of(first, first + n);
	return 0;
}

int engine_make_room(struct engine *c, uint64_t need, int64_t keep)
{
	/* This thread's evictions never take `keep` (engine_keep). Another
	 * worker's may, while we wait: the caller then finds its slot revoked
	 * (incarnation, state) and maps again. Pinning it for everyone would
	 * let eight workers filling eight big chunks pin a small pool whole. */
	int64_t was = engine_keep;
	engine_keep = keep;
	int rc = 0;
	for (uint32_t tries = 0; c->used + need > c->cap;) {
		int e = c->cfg->policy == 2 ? evict_groups(c) : -EBUSY;
		if (e != 0)
			e = evict_one(c);
		if (e == 0)
			continue;
		if (e == -EBUSY) {
			/* Nothing evictable now. Chunks the cleaner is writing
			 * back become evictable when it is done: wait for them. */
			if (engine_any_unquiet(c)) {
				pthread_cond_wait(&c->idle, &c->lock);
				continue;
			}
		}
		if (e == -EBUSY || ++tries > c->nslots) {
			/* Only the chunk being filled is left: let it go over
			 * (a pool smaller than one chunk); else nothing can go
			 * (write-backs failed: stuck chunks). */
			uint64_t mine = keep >= 0 ? c->slots[keep].charged : 0;
			if (c->used > mine)
				rc = -ENOSPC;
			break;
		}
	}
	engine_keep = was;
	return rc;
}

int chunk_open_fd(struct engine *c, uint32_t slot, int flags)
{
	char name[16];
	pool_chunk_name(slot, name, sizeof name);
	int fd = openat(c->pool.chunks_fd, name, flags | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

int chunk_revoke(struct engine *c, uint32_t slot, uint64_t keep_below)
{
	struct slot *s = &c->slots[slot];
	/* What the caller meant: the chunk file in the slot now. While we wait
	 * (a write-back, a fill or an eviction without the lock) another
	 * thread may free the slot and reuse it for another chunk. */
	uint64_t inc = s->map ? s->ctl->incarnation : 0;
	engine_wait_quiet(c, slot);
	if (!s->map || s->ctl->incarnation != inc)
		return -ENOENT;
	struct cfile *f = cfile_get(c, s->cnode);
	__atomic_store_n(&s->ctl->state, CACHE_CHUNK_REVOKED, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	chell_persist(c->pops, s->ctl, 64);
	c->st->revocations++;
	if (slot_broken(s)) {
		/* Its contents went with the truncation: nothing to write. */
		chelld_log("slot %u (%s chunk %llu): its chunk file was truncated by a client; "
			   "dropped without write-back", slot, f ? f->path : "?",
			   (unsigned long long)s->file_chunk);
		keep_below = 0;
	}
	if (keep_below > 0 && f) {
		uint64_t bytes = 0;
		int rc = wb_slots(c, f, &slot, 1, keep_below, &bytes);
		if (rc < 0) {
			/* Nothing acknowledged may be lost: keep the chunk (clients
			 * see REVOKED and get EIO from MAP) and report it. */
			s->stuck = true;
			pthread_cond_broadcast(&c->idle); /* waiting MAPs get EIO now */
			chelld_log("slot %u (%s chunk %llu): write-back failed (%s); kept with its "
				   "dirty data", slot, f->path, (unsigned long long)s->file_chunk,
				   strerror(-rc));
			return rc;
		}
	}
	char name[16];
	pool_chunk_name(slot, name, sizeof name);
	munmap(s->map, CACHE_CHUNK_FILE_BYTES);
	int fd = openat(c->pool.chunks_fd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		if (ftruncate(fd, 0) < 0)
			chelld_log("slot %u: cannot truncate its chunk file: %s", slot, strerror(errno));
		close(fd);
	}
	unlinkat(c->pool.chunks_fd, name, 0);
	c->dir_dirty = true;
	if (policy_contains(c->pol, slot))
		policy_remove(c->pol, slot);
	int rc = meta_chunk_unmap(c->m, slot);
	if (rc < 0)
		chelld_log("slot %u: cannot free it in the metadata: %s", slot, strerror(-rc));
	c->used -= s->charged;
	memset(s, 0, sizeof *s);
	pthread_cond_broadcast(&c->idle); /* a MAP may wait for the slot to go */
	if (f) {
		f->evictions++;
		cfile_release_fd(c, f);
	}
	return 0;
}

int chunk_evict(struct engine *c, uint32_t slot)
{
	struct slot *s = &c->slots[slot];
	engine_wait_quiet(c, slot);
	if (!s->map)
		return 0; /* another thread revoked it meanwhile */
	struct cfile *f = cfile_get(c, s->cnode);
	if (f && !slot_broken(s) && dirty_chunk_flagged(s->dt, 0)) {
		/* REVOKED first (as chunk_revoke): clients stop storing, and a
		 * crash from here on finishes the eviction at the next start. */
		__atomic_store_n(&s->ctl->state, CACHE_CHUNK_REVOKED, __ATOMIC_SEQ_CST);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		chell_persist(c->pops, s->ctl, 64);
		struct wb_job j;
		s->revoking = true;
		if (wb_begin(c, f, &slot, 1, UINT64_MAX, &j) == 0) {
			s->busy = true;
			pthread_mutex_unlock(&c->lock);
			wb_io(c, &j);
			pthread_mutex_lock(&c->lock);
			s->busy = false;
			wb_end(c, &j, NULL); /* on error chunk_revoke retries and keeps it stuck */
		}
		s->revoking = false;
		pthread_cond_broadcast(&c->idle);
	}
	/* What is left (blocks a client re-dirtied before it saw REVOKED, or
	 * all of them if the write-back above failed) is written under the
	 * lock, and the chunk file goes. */
	return chunk_revoke(c, slot, UINT64_MAX);
}

int chunk_shrink(struct engine *c, uint32_t slot, uint32_t keep)
{
	enum { G = CACHE_BLOCKS / CHELLD_ACCESS_GROUPS };
	struct slot *s = &c->slots[slot];
	struct cfile *f = cfile_get(c, s->cnode);
	if (!s->map || !f || slot_broken(s) || dirty_chunk_flagged(s->dt, 0))
		return -EAGAIN;
	uint64_t fc = s->file_chunk, gen = f->content_gen;
	/* Clients stop here: REVOKED, as an eviction. A store that raced in
	 * before it is in the copy below or redone by its writer after it
	 * sees REVOKED (into the new file); dirty marks that came meanwhile
	 * are written back by chunk_revoke, as for any eviction. */
	__atomic_store_n(&s->ctl->state, CACHE_CHUNK_REVOKED, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	chell_persist(c->pops, s->ctl, 64);
	uint64_t bits[CACHE_BLOCKS / 64];
	unsigned n = 0;
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++) {
		uint64_t g = 0;
		for (unsigned b = 0; b < 64; b++)
			if (keep >> ((w * 64 + b) / G) & 1)
				g |= 1ull << b;
		bits[w] = __atomic_load_n(&s->ctl->valid[w], __ATOMIC_ACQUIRE) & g;
		n += (unsigned)__builtin_popcountll(bits[w]);
	}
	if (!c->shrink_buf)
		c->shrink_buf = malloc(CACHE_CHUNK_BYTES);
	if (n == 0 || !c->shrink_buf)
		return chunk_revoke(c, slot, UINT64_MAX);
	for (unsigned b = 0; b < CACHE_BLOCKS; b++)
		if (bits[b / 64] >> (b % 64) & 1)
			memcpy(c->shrink_buf + (size_t)b * CACHE_BLOCK_BYTES, s->map + (size_t)b * CACHE_BLOCK_BYTES,
			       CACHE_BLOCK_BYTES);
	/* Blocks a client dirtied before it saw REVOKED go to the backing
	 * file with the old chunk; the new one then starts clean with what
	 * the copy has, and the writer's redo stores its bytes again. */
	int rc = chunk_revoke(c, slot, UINT64_MAX);
	if (rc < 0)
		return rc;
	/* chunk_revoke may have waited without the lock: a truncation (or a
	 * kernel write, a change behind the cache) since the copy makes it
	 * stale - put back, it would show bytes past a truncation point
	 * instead of its zeros. The chunk is gone; the room is freed. */
	if (cfile_get(c, f->cnode) != f || f->content_gen != gen)
		return 0;
	/* The same (file, chunk) in a new chunk file (a crash before it is
	 * published leaves the data uncached, and clean: nothing lost). */
	bool created;
	int ns = chunk_get_ex(c, f, fc, &created);
	if (ns < 0)
		return 0; /* the old one is gone, and that freed the room asked */
	/* ... and chunk_get may wait without the lock too (an eviction's
	 * write-back). Meanwhile a client may have mapped the chunk again
	 * (its MAP made the slot we got back, and it may be storing into
	 * blocks that are not valid yet, with OVERWRITE, or a fill may be in
	 * flight): the copy must not land under those. Only a slot this call
	 * made, with no bump of the file's contents since the copy, gets it;
	 * otherwise the chunk keeps what it has (misses fill the rest). */
	if (!created || cfile_get(c, f->cnode) != f || f->content_gen != gen)
		return 0;
	struct slot *t = &c->slots[ns];
	unsigned added = 0;
	for (unsigned b = 0; b < CACHE_BLOCKS; b++) {
		if (!(bits[b / 64] >> (b % 64) & 1) || block_valid(t->ctl, b)) {
			bits[b / 64] &= ~(1ull << (b % 64));
			continue;
		}
		memcpy(t->map + (size_t)b * CACHE_BLOCK_BYTES, c->shrink_buf + (size_t)b * CACHE_BLOCK_BYTES,
		       CACHE_BLOCK_BYTES);
		c->pops->flush(c->pops->ctx, t->map + (size_t)b * CACHE_BLOCK_BYTES, CACHE_BLOCK_BYTES);
		added++;
	}
	c->pops->drain(c->pops->ctx);
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++)
		if (bits[w])
			__atomic_fetch_or(&t->ctl->valid[w], bits[w], __ATOMIC_RELEASE);
	chell_persist(c->pops, t->ctl->valid, sizeof t->ctl->valid);
	t->charged += added;
	c->used += added;
	t->hot = keep;
	c->st->shrinks++;
	return 0;
}
