/* The background cleaner (src/cache/policy/cleaner.c) against a fake slow
 * backing store (usleep per extent): writers that dirty data far faster
 * than it drains are throttled, the dirty count stays bounded by the limit,
 * writers are released a chunk at a time (not starved down to the low
 * watermark), nothing deadlocks, and a flush leaves the store holding the
 * latest version of every block. Bounds, not timings. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cache/policy/policy.h"

enum { NCH = 64, NBLK = 128, WRITERS = 2, WRITES = 6000 };

typedef struct {
	dirty_table *t;
	cleaner *c;
	uint64_t version[NCH][NBLK];
	uint64_t stored[NCH][NBLK];
	uint32_t max_dirty;      /* atomic */
	uint64_t waits, post_wait_sum; /* atomics: throttles that had to wait */
	int fail_chunk;          /* write-backs of this chunk fail once */
	uint64_t extents;        /* atomic */
} world;

/* The "pwrite" the manager would plug in: plan the chunk's extents, then
 * one slow write per extent. Chunk c lives at file offset c * 2 MB. */
static int slow_writeback(void *arg, uint32_t chunk, const cp_bitmap *blocks)
{
	world *w = arg;
	wb_chunk in = { chunk, (uint64_t)chunk * CP_CHUNK_SIZE, blocks };
	wb_plan p;

	if (__atomic_exchange_n(&w->fail_chunk, -1, __ATOMIC_ACQ_REL) == (int)chunk)
		return -EIO;
	assert_int_equal(wb_plan_build(&in, 1, 64 * CP_BLOCK_SIZE, &p), 0);
	for (uint32_t e = 0; e < p.next; e++) {
		for (uint32_t s = p.ext[e].first_seg; s < p.ext[e].first_seg + p.ext[e].nsegs; s++)
			for (uint32_t b = p.segs[s].first_block;
			     b < p.segs[s].first_block + p.segs[s].nblocks; b++)
				w->stored[chunk][b] = __atomic_load_n(&w->version[chunk][b], __ATOMIC_ACQUIRE);
		usleep(200);
		__atomic_fetch_add(&w->extents, 1, __ATOMIC_RELAXED);
	}
	wb_plan_free(&p);
	return 0;
}

static void *writer(void *arg)
{
	world *w = ((void **)arg)[0];
	uint64_t x = (uint64_t)(uintptr_t)((void **)arg)[1];

	for (int i = 0; i < WRITES; i++) {
		bool full = dirty_table_ndirty(w->t) >= (uint32_t)(0.75 * NCH);

		cleaner_throttle(w->c);
		if (full) {
			__atomic_fetch_add(&w->waits, 1, __ATOMIC_RELAXED);
			__atomic_fetch_add(&w->post_wait_sum, dirty_table_ndirty(w->t), __ATOMIC_RELAXED);
		}
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t c = (uint32_t)(x % NCH);
		unsigned b = (unsigned)((x >> 8) % NBLK), n = 1 + (unsigned)((x >> 24) % 8);

		if (b + n > NBLK)
			n = NBLK - b;
		for (unsigned k = b; k < b + n; k++)
			__atomic_fetch_add(&w->version[c][k], 1, __ATOMIC_RELEASE);
		dirty_mark(w->t, c, b, n);
		uint32_t d = dirty_table_ndirty(w->t), m = __atomic_load_n(&w->max_dirty, __ATOMIC_RELAXED);

		while (d > m && !__atomic_compare_exchange_n(&w->max_dirty, &m, d, true,
							     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
	}
	return NULL;
}

static world *new_world(void)
{
	world *w = calloc(1, sizeof(*w));
	void *mem = aligned_alloc(64, (dirty_table_bytes(NCH) + 63) & ~(size_t)63);

	w->t = dirty_table_init(mem, NCH);
	w->fail_chunk = -1;
	assert_non_null(w->t);
	return w;
}

static void rejects_bad_config(void **state)
{
	world *w = new_world();
	cleaner_config cfg = { .writeback = slow_writeback, .arg = w, .low = 0.5, .high = 0.5, .limit = 1 };

	assert_null(cleaner_start(w->t, &cfg));
	assert_int_equal(errno, EINVAL);
	cfg.high = 0.6;
	cfg.limit = 0.55;
	assert_null(cleaner_start(w->t, &cfg));
	cfg.limit = 1.5;
	assert_null(cleaner_start(w->t, &cfg));
	cfg.limit = 0.9;
	cfg.writeback = NULL;
	assert_null(cleaner_start(w->t, &cfg));
	free(w->t);
	free(w);
}

static void throttles_fast_writers(void **state)
{
	world *w = new_world();
	cleaner_config cfg = { .writeback = slow_writeback, .arg = w,
			       .low = 0.25, .high = 0.5, .limit = 0.75, .idle_ms = 5 };
	const uint32_t limit_n = 48, high_n = 32;
	pthread_t th[WRITERS];
	void *args[WRITERS][2];
	cleaner_stats st;

	alarm(50); /* a deadlock fails the test instead of hanging CI */
	w->c = cleaner_start(w->t, &cfg);
	assert_non_null(w->c);
	for (int i = 0; i < WRITERS; i++) {
		args[i][0] = w;
		args[i][1] = (void *)(uintptr_t)(0x9e3779b97f4a7c15ull * (uint64_t)(i + 1));
		assert_int_equal(pthread_create(&th[i], NULL, writer, args[i]), 0);
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
	cleaner_get_stats(w->c, &st);
	double mean_after_wait = w->waits ? (double)w->post_wait_sum / (double)w->waits : 0;

	printf("%d writers x %d writes over %d chunks: max dirty %u of %u (limit %u), "
	       "throttle waits %llu, mean dirty after a wait %.1f, cleaner passes %llu, "
	       "chunks cleaned %llu, extents %llu\n",
	       WRITERS, WRITES, NCH, w->max_dirty, NCH, limit_n,
	       (unsigned long long)st.throttle_waits, mean_after_wait,
	       (unsigned long long)st.passes, (unsigned long long)st.chunks_cleaned,
	       (unsigned long long)__atomic_load_n(&w->extents, __ATOMIC_RELAXED));
	/* The writers were faster than the store, and were held back... */
	assert_true(st.throttle_waits > 10);
	assert_true(st.chunks_cleaned > 50);
	/* ...to the limit: each writer can add at most one chunk after its
	 * throttle check passed. */
	assert_true(w->max_dirty <= limit_n + WRITERS);
	/* ...smoothly: released as soon as a chunk is cleaned, so the count
	 * hovers near the limit instead of draining to the low watermark. */
	assert_true(mean_after_wait >= high_n);

	/* A failed write-back leaves the blocks dirty; the flush retries. */
	dirty_mark(w->t, 5, 0, 1);
	__atomic_fetch_add(&w->version[5][0], 1, __ATOMIC_RELEASE);
	dirty_mark(w->t, 5, 0, 1);
	__atomic_store_n(&w->fail_chunk, 5, __ATOMIC_RELEASE);
	assert_int_equal(cleaner_clean_one(w->c, 5), -EIO);
	assert_int_equal(dirty_state(w->t, 5, 0), BLK_DIRTY);
	assert_true(dirty_chunk_flagged(w->t, 5));
	assert_int_equal(cleaner_flush(w->c), 0);
	assert_int_equal(dirty_table_ndirty(w->t), 0);
	for (uint32_t c = 0; c < NCH; c++)
		for (unsigned b = 0; b < NBLK; b++)
			assert_int_equal(w->stored[c][b], w->version[c][b]);
	cleaner_get_stats(w->c, &st);
	assert_true(st.writeback_errors >= 1);
	cleaner_stop(w->c);
	alarm(0);
	free(w->t);
	free(w);
}

/* Below the high watermark the thread leaves dirty data alone (it is a
 * write-back cache: no early write-back of a little dirty data). */
static void idle_below_high(void **state)
{
	world *w = new_world();
	cleaner_config cfg = { .writeback = slow_writeback, .arg = w,
			       .low = 0.25, .high = 0.5, .limit = 0.75, .idle_ms = 1 };
	cleaner_stats st;

	w->c = cleaner_start(w->t, &cfg);
	for (uint32_t c = 0; c < 31; c++)
		dirty_mark(w->t, c, 0, 1);
	cleaner_kick(w->c);
	usleep(20000);
	cleaner_get_stats(w->c, &st);
	assert_int_equal(st.chunks_cleaned, 0);
	assert_int_equal(dirty_table_ndirty(w->t), 31);
	/* At the high watermark it cleans down to the low one. */
	dirty_mark(w->t, 31, 0, 1);
	for (int i = 0; i < 2000 && dirty_table_ndirty(w->t) > 16; i++)
		usleep(1000);
	usleep(5000);
	assert_int_equal(dirty_table_ndirty(w->t), 16);
	cleaner_get_stats(w->c, &st);
	assert_int_equal(st.chunks_cleaned, 16);
	cleaner_stop(w->c);
	free(w->t);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rejects_bad_config),
		cmocka_unit_test(throttles_fast_writers),
		cmocka_unit_test(idle_below_high),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
