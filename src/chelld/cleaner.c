/* SPDX-License-Identifier: MIT */
/*
 * The background cleaner: a thread that every CLEAN_MS counts the chunks
 * with dirty blocks (scanning the control pages); once they reach the high
 * watermark (--dirty-high, percent of the slots) it writes chunks back,
 * from a rotating cursor, until they are at or below the low watermark
 * (--dirty-low). It takes the cache lock like the request loop does, but
 * drops it for the I/O of each write-back (pwritev, fdatasync) with the
 * chunk marked busy: misses and other requests are served meanwhile, and
 * nothing evicts, truncates or flushes a busy chunk (they wait for it,
 * cache_wait_idle). When the cleaner falls behind, evictions of dirty
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

#include "chelld/cache.h"

#define CLEAN_MS 50
#define DELETED_EVERY 20 /* ticks */

uint32_t cache_dirty_slots(const struct cache *c)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map && dirty_chunk_flagged(c->slots[s].dt, 0))
			n++;
	return n;
}

void cache_wait_idle(struct cache *c, uint32_t slot)
{
	while (c->slots[slot].busy)
		pthread_cond_wait(&c->idle, &c->lock);
}

uint32_t cache_drop_deleted(struct cache *c)
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

static bool above(const struct cache *c, uint32_t dirty, unsigned pct)
{
	return (uint64_t)dirty * 100 > (uint64_t)pct * c->nslots;
}

/* The next dirty chunk from the cursor on, or -1. */
static int next_dirty(struct cache *c)
{
	for (uint32_t i = 0, s = c->clean_cursor; i < c->nslots; i++, s = (s + 1) % c->nslots) {
		const struct slot *sl = &c->slots[s];
		if (sl->map && !sl->stuck && !sl->busy && dirty_chunk_flagged(sl->dt, 0)) {
			c->clean_cursor = (s + 1) % c->nslots;
			return (int)s;
		}
	}
	return -1;
}

/* Write one chunk back, without the lock during the I/O (lock held). */
static void clean_one(struct cache *c, uint32_t slot)
{
	struct slot *s = &c->slots[slot];
	struct cfile *f = cfile_get(c, s->cnode);
	struct wb_job j;
	if (!f || wb_begin(c, f, &slot, 1, UINT64_MAX, &j) < 0) {
		s->stuck = true; /* retried by a FLUSH, not every tick */
		return;
	}
	s->busy = true;
	pthread_mutex_unlock(&c->lock);
	wb_io(c, &j);
	pthread_mutex_lock(&c->lock);
	s->busy = false;
	pthread_cond_broadcast(&c->idle);
	if (wb_end(c, &j, NULL) < 0)
		s->stuck = true;
}

static void tick(struct cache *c)
{
	if (++c->ticks % DELETED_EVERY == 0) {
		uint32_t n = cache_drop_deleted(c);
		if (n)
			chelld_log("dropped %u chunk(s) of deleted files or truncated behind "
				   "the manager's back", n);
	}
	uint32_t dirty = cache_dirty_slots(c);
	if (!c->cleaning) {
		if (!above(c, dirty, c->cfg->dirty_high))
			return;
		c->cleaning = true;
		c->st->cleaner_passes++;
	}
	while (!c->cleaner_stop && above(c, dirty, c->cfg->dirty_low)) {
		int s = next_dirty(c);
		if (s < 0)
			break;
		clean_one(c, (uint32_t)s);
		dirty = cache_dirty_slots(c);
	}
	if (!above(c, dirty, c->cfg->dirty_low))
		c->cleaning = false;
}

static void *cleaner_main(void *arg)
{
	struct cache *c = arg;
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
		if (rc == ETIMEDOUT)
			tick(c);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int cache_cleaner_start(struct cache *c)
{
	c->cleaner_stop = false;
	int rc = pthread_create(&c->cleaner, NULL, cleaner_main, c);
	if (rc)
		return -rc;
	c->cleaner_running = true;
	return 0;
}

/* Called without the lock. */
void cache_cleaner_stop(struct cache *c)
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
