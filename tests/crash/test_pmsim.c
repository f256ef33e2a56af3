/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the power-failure simulator (src/pmem/sim): what reaches
 * media when, what each crash mode may leave, persist-point numbering and
 * reproducibility. The crash harness trusts these rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pmem/sim/sim.h"

#define LEN (8 * CHELL_PMSIM_LINE)

struct fx {
	uint8_t *work;
	uint8_t img[LEN];
	struct chell_pmsim *s;
	const struct chell_persist_ops *ops;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	f->work = aligned_alloc(CHELL_PMSIM_LINE, LEN);
	memset(f->work, 0, LEN);
	f->s = chell_pmsim_new(f->work, LEN);
	assert_non_null(f->s);
	f->ops = chell_pmsim_ops(f->s);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	chell_pmsim_free(f->s);
	free(f->work);
	free(f);
	return 0;
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static void test_unflushed_stores_never_reach_media(void **state)
{
	struct fx *f = *state;
	memset(f->work, 0xaa, LEN);
	f->ops->drain(f->ops->ctx);
	for (int m = CHELL_PMSIM_NONE; m <= CHELL_PMSIM_TORN; m++) {
		chell_pmsim_crash_image(f->s, m, 7, f->img);
		assert_true(all_bytes(f->img, LEN, 0));
	}
}

static void test_flush_then_drain_reaches_media(void **state)
{
	struct fx *f = *state;
	memset(f->work + 64, 0x11, 64);
	f->ops->flush(f->ops->ctx, f->work + 70, 1); /* one byte: the whole line */
	chell_pmsim_crash_image(f->s, CHELL_PMSIM_NONE, 1, f->img);
	assert_true(all_bytes(f->img, LEN, 0)); /* not drained yet */
	f->ops->drain(f->ops->ctx);
	chell_pmsim_crash_image(f->s, CHELL_PMSIM_NONE, 1, f->img);
	assert_true(all_bytes(f->img + 64, 64, 0x11));
	assert_true(all_bytes(f->img, 64, 0));
	assert_true(all_bytes(f->img + 128, LEN - 128, 0));
}

static void test_flush_snapshots_and_later_flush_replaces(void **state)
{
	struct fx *f = *state;
	memset(f->work, 0x01, 64);
	f->ops->flush(f->ops->ctx, f->work, 64);
	memset(f->work, 0x02, 64); /* stored after the flush: not in the snapshot */
	f->ops->drain(f->ops->ctx);
	assert_true(all_bytes(chell_pmsim_media(f->s), 64, 0x01));

	memset(f->work, 0x03, 64);
	f->ops->flush(f->ops->ctx, f->work, 64);
	memset(f->work, 0x04, 64);
	f->ops->flush(f->ops->ctx, f->work, 64);
	struct chell_pmsim_stats st;
	chell_pmsim_stats(f->s, &st);
	assert_int_equal(st.pending, 1); /* same line, one snapshot */
	f->ops->drain(f->ops->ctx);
	assert_true(all_bytes(chell_pmsim_media(f->s), 64, 0x04));
}

static void test_subset_applies_whole_lines(void **state)
{
	struct fx *f = *state;
	memset(f->work, 0x5a, LEN);
	f->ops->flush(f->ops->ctx, f->work, LEN);
	int seen_old = 0, seen_new = 0;
	for (uint64_t seed = 0; seed < 64; seed++) {
		chell_pmsim_crash_image(f->s, CHELL_PMSIM_SUBSET, seed, f->img);
		for (int l = 0; l < LEN / 64; l++) {
			const uint8_t *p = f->img + l * 64;
			assert_true(all_bytes(p, 64, 0) || all_bytes(p, 64, 0x5a));
			seen_old |= p[0] == 0;
			seen_new |= p[0] == 0x5a;
		}
	}
	assert_true(seen_old && seen_new);
}

static void test_torn_mixes_8_byte_words(void **state)
{
	struct fx *f = *state;
	memset(f->work, 0xee, 64);
	f->ops->flush(f->ops->ctx, f->work, 64);
	int mixed = 0;
	for (uint64_t seed = 0; seed < 64; seed++) {
		chell_pmsim_crash_image(f->s, CHELL_PMSIM_TORN, seed, f->img);
		int olds = 0;
		for (int w = 0; w < 8; w++) {
			assert_true(all_bytes(f->img + 8 * w, 8, 0) || all_bytes(f->img + 8 * w, 8, 0xee));
			olds += f->img[8 * w] == 0;
		}
		mixed |= olds > 0 && olds < 8;
	}
	assert_true(mixed);
}

static void test_evict_may_write_unflushed_lines(void **state)
{
	struct fx *f = *state;
	memset(f->work + 128, 0x77, 64);
	int evicted = 0;
	for (uint64_t seed = 0; seed < 16; seed++) {
		chell_pmsim_crash_image(f->s, CHELL_PMSIM_EVICT, seed, f->img);
		evicted |= all_bytes(f->img + 128, 64, 0x77);
		assert_true(all_bytes(f->img, 128, 0));
	}
	assert_true(evicted);
}

static void test_same_seed_same_image(void **state)
{
	struct fx *f = *state;
	static uint8_t again[LEN];
	for (int i = 0; i < LEN; i++)
		f->work[i] = (uint8_t)(i * 7 + 1);
	f->ops->flush(f->ops->ctx, f->work, LEN);
	for (int m = 0; m < CHELL_PMSIM_MODES; m++) {
		chell_pmsim_crash_image(f->s, m, 42, f->img);
		chell_pmsim_crash_image(f->s, m, 42, again);
		assert_memory_equal(f->img, again, LEN);
	}
}

struct seen {
	uint64_t points[16];
	size_t pending_at[16];
	int n;
};

static void hook(void *arg, struct chell_pmsim *s, uint64_t point)
{
	struct seen *sn = arg;
	struct chell_pmsim_stats st;
	chell_pmsim_stats(s, &st);
	sn->points[sn->n] = point;
	sn->pending_at[sn->n++] = st.pending;
}

static void test_points_are_numbered_before_they_take_effect(void **state)
{
	struct fx *f = *state;
	struct seen sn = {0};
	chell_pmsim_set_hook(f->s, hook, &sn);
	f->ops->flush(f->ops->ctx, f->work, 128);
	f->ops->drain(f->ops->ctx);
	f->ops->drain(f->ops->ctx);
	assert_int_equal(sn.n, 2);
	assert_int_equal(sn.points[0], 1);
	assert_int_equal(sn.pending_at[0], 2); /* the hook sees the drain not yet done */
	assert_int_equal(sn.points[1], 2);
	assert_int_equal(sn.pending_at[1], 0);

	chell_pmsim_set_flush_points(f->s, true);
	f->ops->flush(f->ops->ctx, f->work, 1);
	f->ops->drain(f->ops->ctx);
	assert_int_equal(sn.n, 4);
	assert_int_equal(sn.points[2], 3);
	assert_int_equal(sn.pending_at[2], 0); /* before the flush */

	struct chell_pmsim_stats st;
	chell_pmsim_stats(f->s, &st);
	assert_int_equal(st.points, 4);
	assert_int_equal(st.flushes, 2);
	assert_int_equal(st.drains, 3);
	assert_int_equal(st.lines_flushed, 3);
	assert_int_equal(st.lines_drained, 3);
}

static void test_memcpy_nodrain_and_foreign_flush(void **state)
{
	struct fx *f = *state;
	uint8_t src[100], outside[64];
	memset(src, 0x33, sizeof(src));
	f->ops->memcpy_nodrain(f->ops->ctx, f->work + 60, src, sizeof(src));
	assert_true(all_bytes(f->work + 60, 100, 0x33));
	f->ops->flush(f->ops->ctx, outside, sizeof(outside));
	f->ops->flush(f->ops->ctx, f->work + LEN - 8, 16); /* runs off the end */
	struct chell_pmsim_stats st;
	chell_pmsim_stats(f->s, &st);
	assert_int_equal(st.pending, 3); /* lines 0, 1, 2 */
	assert_int_equal(st.foreign_flushes, 2);
	f->ops->drain(f->ops->ctx);
	assert_true(all_bytes((const uint8_t *)chell_pmsim_media(f->s) + 60, 100, 0x33));
}

static void test_sync_and_mode_names(void **state)
{
	struct fx *f = *state;
	memset(f->work, 0x9, LEN);
	f->ops->flush(f->ops->ctx, f->work, 64);
	chell_pmsim_sync(f->s);
	assert_true(all_bytes(chell_pmsim_media(f->s), LEN, 0x9));
	struct chell_pmsim_stats st;
	chell_pmsim_stats(f->s, &st);
	assert_int_equal(st.pending, 0);
	for (int m = 0; m < CHELL_PMSIM_MODES; m++)
		assert_int_equal(chell_pmsim_mode_parse(chell_pmsim_mode_name(m)), m);
	assert_int_equal(chell_pmsim_mode_parse("bogus"), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_unflushed_stores_never_reach_media),
		T(test_flush_then_drain_reaches_media),
		T(test_flush_snapshots_and_later_flush_replaces),
		T(test_subset_applies_whole_lines),
		T(test_torn_mixes_8_byte_words),
		T(test_evict_may_write_unflushed_lines),
		T(test_same_seed_same_image),
		T(test_points_are_numbered_before_they_take_effect),
		T(test_memcpy_nodrain_and_foreign_flush),
		T(test_sync_and_mode_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
