/* The background cleaner: watermarks on the fraction of maybe-dirty chunks
 * and writer throttling (see policy.h). The write-back itself is the
 * caller's function, so the manager decides how (plan + pwritev). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "cache/policy/policy.h"

struct cleaner {
	dirty_table *t;
	cleaner_config cfg;
	uint32_t n, low_n, high_n, limit_n;
	uint8_t *busy; /* per chunk: someone is cleaning it */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t wake; /* the thread: writers are waiting, or stop */
	pthread_cond_t room; /* writers: a chunk was cleaned, or stop */
	bool stop;       /* under mu */
	uint32_t waiters; /* under mu */
	uint32_t cursor; /* the thread's own */
	cleaner_stats st; /* atomics */
};

static void stat_add(uint64_t *s, uint64_t v)
{
	__atomic_fetch_add(s, v, __ATOMIC_RELAXED);
}

static void claim(cleaner *c, uint32_t chunk)
{
	uint8_t zero = 0;

	while (!__atomic_compare_exchange_n(&c->busy[chunk], &zero, 1, false, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED)) {
		zero = 0;
		sched_yield();
	}
}

static bool try_claim(cleaner *c, uint32_t chunk)
{
	uint8_t zero = 0;

	return __atomic_compare_exchange_n(&c->busy[chunk], &zero, 1, false, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

static void release(cleaner *c, uint32_t chunk)
{
	__atomic_store_n(&c->busy[chunk], 0, __ATOMIC_RELEASE);
}

/* The chunk is claimed. */
static int clean_claimed(cleaner *c, uint32_t chunk)
{
	cp_bitmap blocks;
	unsigned n = dirty_checkout(c->t, chunk, &blocks);
	int rc;

	if (n == 0) {
		dirty_checkin(c->t, chunk);
		return 0;
	}
	rc = c->cfg.writeback(c->cfg.arg, chunk, &blocks);
	if (rc < 0) {
		dirty_checkin_abort(c->t, chunk);
		stat_add(&c->st.writeback_errors, 1);
		return rc;
	}
	dirty_checkin(c->t, chunk);
	stat_add(&c->st.chunks_cleaned, 1);
	stat_add(&c->st.blocks_written, n);
	return (int)n;
}

static void notify_room(cleaner *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->waiters)
		pthread_cond_broadcast(&c->room);
	pthread_mutex_unlock(&c->mu);
}

/* One cleaning pass: from the cursor on, clean flagged chunks until the
 * count is at or below the low watermark, or a whole turn found nothing
 * it could clean (all skipped, busy or failing: wait for the next tick
 * rather than spin). */
static void clean_pass(cleaner *c)
{
	uint32_t idle = 0;

	stat_add(&c->st.passes, 1);
	while (dirty_table_ndirty(c->t) > c->low_n && idle < c->n) {
		uint32_t ch = c->cursor;

		c->cursor = (c->cursor + 1) % c->n;
		idle++;
		if (!dirty_chunk_flagged(c->t, ch))
			continue;
		if (c->cfg.skip && c->cfg.skip(c->cfg.arg, ch))
			continue;
		if (!try_claim(c, ch))
			continue;
		if (clean_claimed(c, ch) > 0)
			idle = 0;
		release(c, ch);
		notify_room(c);
		pthread_mutex_lock(&c->mu);
		bool stop = c->stop;
		pthread_mutex_unlock(&c->mu);
		if (stop)
			return;
	}
}

static void *cleaner_main(void *arg)
{
	cleaner *c = arg;

	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		if (dirty_table_ndirty(c->t) >= c->high_n) {
			pthread_mutex_unlock(&c->mu);
			clean_pass(c);
			pthread_mutex_lock(&c->mu);
			if (c->waiters)
				pthread_cond_broadcast(&c->room);
			/* Still above high after a pass means nothing could be
			 * cleaned right now: fall through to a timed wait. */
			if (dirty_table_ndirty(c->t) <= c->low_n)
				continue;
		}
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)c->cfg.idle_ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&c->wake, &c->mu, &ts);
	}
	pthread_cond_broadcast(&c->room);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static uint32_t frac_ceil(double f, uint32_t n)
{
	double v = f * n;
	uint32_t r = (uint32_t)v;

	return (double)r < v ? r + 1 : r;
}

cleaner *cleaner_start(dirty_table *t, const cleaner_config *cfg)
{
	cleaner *c;
	pthread_condattr_t ca;
	int rc;

	if (!t || !cfg || !cfg->writeback || !(cfg->low >= 0 && cfg->low < cfg->high &&
					       cfg->high <= cfg->limit && cfg->limit <= 1)) {
		errno = EINVAL;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->t = t;
	c->cfg = *cfg;
	if (!c->cfg.idle_ms)
		c->cfg.idle_ms = 50;
	c->n = dirty_table_nchunks(t);
	c->low_n = (uint32_t)(cfg->low * c->n);
	c->high_n = frac_ceil(cfg->high, c->n);
	c->limit_n = frac_ceil(cfg->limit, c->n);
	if (c->high_n <= c->low_n)
		c->high_n = c->low_n + 1;
	if (c->limit_n < c->high_n)
		c->limit_n = c->high_n;
	c->busy = calloc(c->n, 1);
	if (!c->busy) {
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&c->room, NULL);
	rc = pthread_create(&c->thread, NULL, cleaner_main, c);
	if (rc) {
		pthread_cond_destroy(&c->wake);
		pthread_cond_destroy(&c->room);
		pthread_mutex_destroy(&c->mu);
		free(c->busy);
		free(c);
		errno = rc;
		return NULL;
	}
	return c;
}

void cleaner_stop(cleaner *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_broadcast(&c->wake);
	pthread_cond_broadcast(&c->room);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	/* Throttled writers must have left before the caller frees us; they
	 * were released above and never wait again once stop is set. */
	pthread_mutex_lock(&c->mu);
	while (c->waiters) {
		pthread_mutex_unlock(&c->mu);
		sched_yield();
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->room);
	pthread_mutex_destroy(&c->mu);
	free(c->busy);
	free(c);
}

void cleaner_kick(cleaner *c)
{
	pthread_mutex_lock(&c->mu);
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->mu);
}

void cleaner_throttle(cleaner *c)
{
	bool waited = false;

	if (dirty_table_ndirty(c->t) < c->limit_n)
		return;
	pthread_mutex_lock(&c->mu);
	c->waiters++;
	/* Wait for one cleaned chunk at a time (the thread broadcasts after
	 * each), not for the low watermark: the writer then runs at the
	 * backing store's pace instead of in stop-and-go bursts. */
	while (!c->stop && dirty_table_ndirty(c->t) >= c->limit_n) {
		waited = true;
		pthread_cond_signal(&c->wake);
		pthread_cond_wait(&c->room, &c->mu);
	}
	c->waiters--;
	pthread_mutex_unlock(&c->mu);
	if (waited)
		stat_add(&c->st.throttle_waits, 1);
}

int cleaner_clean_one(cleaner *c, uint32_t chunk)
{
	int rc;

	if (chunk >= c->n)
		return -EINVAL;
	claim(c, chunk);
	rc = clean_claimed(c, chunk);
	release(c, chunk);
	notify_room(c);
	return rc;
}

int cleaner_flush(cleaner *c)
{
	int first = 0;

	/* Claim before looking at the flag: the thread drops a chunk's flag
	 * when it checks it out, so a flag read while it is still writing
	 * back would let us return before that data is on the backing store. */
	for (uint32_t ch = 0; ch < c->n; ch++) {
		int rc = 0;

		claim(c, ch);
		if (dirty_chunk_flagged(c->t, ch))
			rc = clean_claimed(c, ch);
		release(c, ch);
		if (rc < 0 && !first)
			first = rc;
	}
	notify_room(c);
	return first;
}

void cleaner_get_stats(cleaner *c, cleaner_stats *s)
{
	s->passes = __atomic_load_n(&c->st.passes, __ATOMIC_RELAXED);
	s->chunks_cleaned = __atomic_load_n(&c->st.chunks_cleaned, __ATOMIC_RELAXED);
	s->blocks_written = __atomic_load_n(&c->st.blocks_written, __ATOMIC_RELAXED);
	s->writeback_errors = __atomic_load_n(&c->st.writeback_errors, __ATOMIC_RELAXED);
	s->throttle_waits = __atomic_load_n(&c->st.throttle_waits, __ATOMIC_RELAXED);
}
