/* SPDX-License-Identifier: MIT */
/*
 * The background cleaner: a thread that every CLEAN_MS (or when an
 * eviction found no clean victim) scans the control pages. It writes back
 * when dirty blocks exceed --dirty-high percent of the capacity (down to
 * --dirty-low), and also when free capacity plus clean
 * chunks - what evictions take without a write-back - falls below
 * RESERVE_LOW percent (up to RESERVE_HIGH; both at most 100 minus the
 * dirty watermarks), so misses find clean victims ahead of need. Each write-back is a batch: up to BATCH_CHUNKS dirty
 * chunks of one file, from a rotating cursor, planned as one sorted set of
 * extents with one fdatasync. It takes the cache lock like the request
 * loop does, but drops it for the I/O (pwritev, fdatasync) with the chunks
 * marked busy: misses and other requests are served meanwhile, and
 * nothing evicts, truncates or flushes a busy chunk (they wait for it,
 * engine_wait_idle). When the cleaner falls behind, evictions of dirty
 * victims clean synchronously (evict.c).
 *
 * policy.h has a thread-based cleaner for one big dirty table; the pool's
 * dirty tables are one per chunk file (a control page each), so the
 * manager scans them itself with the same watermark rule.
 *
 * Once a second it also drops the chunks of deleted files (files.c).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "chelld/engine.h"

#define CLEAN_MS 20
#define DELETED_EVERY 50 /* timed ticks: about a second */
/* The reserve, percent of the capacity free or clean: at most what the
 * dirty watermarks leave (--dirty-high 100 turns it off). */
#define RESERVE_LOW 20
#define RESERVE_HIGH 30
#define BATCH_CHUNKS 64  /* chunks of one file per write-back (one fdatasync) */

uint32_t engine_dirty_slots(const struct engine *c)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map && dirty_chunk_flagged(c->slots[s].dt, 0))
			n++;
	return n;
}

void engine_wait_idle(struct engine *c, uint32_t slot)
{
	while (c->slots[slot].busy)
		pthread_cond_wait(&c->idle, &c->lock);
}

static bool unquiet(const struct slot *s)
{
	return s->busy || s->filling || s->revoking;
}

void engine_wait_quiet(struct engine *c, uint32_t slot)
{
	while (unquiet(&c->slots[slot]))
		pthread_cond_wait(&c->idle, &c->lock);
}

bool engine_any_unquiet(const struct engine *c)
{
	for (uint32_t i = 0; i < c->nslots; i++)
		if (c->slots[i].map && unquiet(&c->slots[i]))
			return true;
	return false;
}

uint32_t engine_drop_deleted(struct engine *c)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++) {
		struct cfile *f = c->slots[s].map ? c->files[c->slots[s].cnode] : NULL;
		if (f && (cfile_deleted(c, f) || slot_broken(&c->slots[s])) &&
		    chunk_revoke(c, s, 0) == 0)
			n++;
	}
	return n;
}

/* Dirty blocks (pages of the capacity, engine.h), and what an eviction can
 * take without a write-back: free capacity plus the pages of chunks with
 * no dirty block. */
static void scan(const struct engine *c, uint64_t *dirty, uint64_t *reclaimable)
{
	uint64_t d = 0, clean = 0;
	for (uint32_t i = 0; i < c->nslots; i++) {
		const struct slot *s = &c->slots[i];
		if (!s->map)
			continue;
		if (dirty_chunk_flagged(s->dt, 0))
			d += dirty_count(s->dt, 0);
		else if (!s->busy && !s->stuck)
			clean += s->charged;
	}
	*dirty = d;
	*reclaimable = clean + (c->cap > c->used ? c->cap - c->used : 0);
}

static bool above(const struct engine *c, uint64_t pages, unsigned pct)
{
	return pages * 100 > (uint64_t)pct * c->cap;
}

/* Dirty chunks of one file, for one write-back with one fdatasync: the
 * file of the next dirty chunk from the cursor on, then its other dirty
 * chunks in slot order from there, up to BATCH_CHUNKS. Returns how many. */
static size_t next_batch(struct engine *c, uint32_t *out)
{
	size_t n = 0;
	uint32_t cnode = 0;
	for (uint32_t i = 0, s = c->clean_cursor; i < c->nslots && n < BATCH_CHUNKS;
	     i++, s = (s + 1) % c->nslots) {
		const struct slot *sl = &c->slots[s];
		if (!sl->map || sl->stuck || sl->busy || sl->revoking || slot_broken(sl) ||
		    !dirty_chunk_flagged(sl->dt, 0) || (n && sl->cnode != cnode))
			continue;
		if (n == 0) {
			cnode = sl->cnode;
			c->clean_cursor = (s + 1) % c->nslots;
		}
		out[n++] = s;
	}
	return n;
}

/* Write a batch back, without the lock during the I/O (lock held). */
static void clean_batch(struct engine *c, uint32_t *slots, size_t n)
{
	struct cfile *f = cfile_get(c, c->slots[slots[0]].cnode);
	struct wb_job j;
	if (!f || wb_begin(c, f, slots, n, UINT64_MAX, &j) < 0) {
		for (size_t i = 0; i < n; i++)
			c->slots[slots[i]].stuck = true; /* retried by a FLUSH, not every tick */
		return;
	}
	for (size_t i = 0; i < j.n; i++)
		c->slots[j.slots[i]].busy = true;
	pthread_mutex_unlock(&c->lock);
	wb_io(c, &j);
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < j.n; i++)
		c->slots[j.slots[i]].busy = false;
	pthread_cond_broadcast(&c->idle);
	bool failed = wb_end(c, &j, NULL) < 0;
	for (size_t i = 0; failed && i < n; i++)
		if (c->slots[slots[i]].map)
			c->slots[slots[i]].stuck = true;
}

/* Clean while the dirty pages are above --dirty-high (down to
 * --dirty-low), or while what evictions can take without a write-back
 * is below RESERVE_LOW percent of the capacity (up to RESERVE_HIGH): a
 * miss should find a clean victim, not wait for a write-back. */
static void tick(struct engine *c, bool timed)
{
	if (timed && ++c->ticks % DELETED_EVERY == 0) {
		uint32_t n = engine_drop_deleted(c);
		if (n)
			chelld_log("dropped %u chunk(s) of deleted files or truncated behind "
				   "the manager's back", n);
	}
	uint64_t dirty, reclaim;
	unsigned lo = 100 - c->cfg->dirty_high, hi = 100 - c->cfg->dirty_low;
	lo = lo < RESERVE_LOW ? lo : RESERVE_LOW;
	hi = hi < RESERVE_HIGH ? hi : RESERVE_HIGH;
	scan(c, &dirty, &reclaim);
	if (!c->cleaning) {
		if (!above(c, dirty, c->cfg->dirty_high) &&
		    (lo == 0 || above(c, reclaim, lo) || dirty == 0))
			return;
		c->cleaning = true;
		c->st->cleaner_passes++;
	}
	uint32_t batch[BATCH_CHUNKS];
	while (!c->cleaner_stop && dirty &&
	       (above(c, dirty, c->cfg->dirty_low) || (lo && !above(c, reclaim, hi)))) {
		size_t n = next_batch(c, batch);
		if (n == 0)
			break;
		clean_batch(c, batch, n);
		scan(c, &dirty, &reclaim);
	}
	c->cleaning = false;
}

void engine_cleaner_kick(struct engine *c)
{
	pthread_cond_signal(&c->wake);
}

static void *cleaner_main(void *arg)
{
	struct engine *c = arg;
	pthread_mutex_lock(&c->lock);
	while (!c->cleaner_stop) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_nsec += CLEAN_MS * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		int rc = pthread_cond_timedwait(&c->wake, &c->lock, &t);
		if (c->cleaner_stop)
			break;
		tick(c, rc == ETIMEDOUT); /* or kicked: an eviction found no clean victim */
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int engine_cleaner_start(struct engine *c)
{
	c->cleaner_stop = false;
	int rc = pthread_create(&c->cleaner, NULL, cleaner_main, c);
	if (rc)
		return -rc;
	c->cleaner_running = true;
	return 0;
}

/* Called without the lock. */
void engine_cleaner_stop(struct engine *c)
{
	if (!c->cleaner_running)
		return;
	pthread_mutex_lock(&c->lock);
	c->cleaner_stop = true;
	pthread_cond_broadcast(&c->wake);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->cleaner, NULL);
	c->cleaner_running = false;
}
