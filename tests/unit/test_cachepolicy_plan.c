/* Write-back planning (src/cache/policy/writeback.c): dirty blocks of a
 * file's chunks in any order -> segments sorted by file offset, merged into
 * contiguous extents (also across chunk boundaries), cut at the cap. Each
 * case is checked against an independent per-block reference: every dirty
 * block is written exactly once, at its own offset, from its own chunk. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cache/policy/policy.h"

#define B CP_BLOCK_SIZE
#define CH ((uint64_t)CP_CHUNK_SIZE)

static void set_range(cp_bitmap *bm, unsigned first, unsigned n)
{
	for (unsigned i = first; i < first + n; i++)
		cp_bitmap_set(bm, i);
}

/* The plan's invariants, and that it writes exactly the input's blocks. */
static void check_plan(const wb_chunk *in, size_t n, uint64_t cap, const wb_plan *p)
{
	size_t want = 0, got = 0;

	for (size_t i = 0; i < n; i++)
		want += cp_bitmap_count(in[i].blocks);
	for (uint32_t e = 0; e < p->next; e++) {
		const wb_extent *x = &p->ext[e];
		uint64_t off = x->backing_off, len = 0;

		assert_true(x->nsegs > 0);
		assert_true(x->first_seg + x->nsegs <= p->nsegs);
		if (cap)
			assert_true(x->len <= cap);
		if (e) {
			const wb_extent *prev = &p->ext[e - 1];

			assert_true(prev->backing_off + prev->len <= x->backing_off);
			/* Adjacent extents only where the cap cut them. */
			if (prev->backing_off + prev->len == x->backing_off)
				assert_true(cap && prev->len == cap);
		}
		for (uint32_t s = x->first_seg; s < x->first_seg + x->nsegs; s++) {
			const wb_seg *g = &p->segs[s];
			const wb_chunk *c = NULL;

			assert_int_equal(g->backing_off, off); /* contiguous */
			for (size_t i = 0; i < n; i++)
				if (in[i].chunk == g->chunk)
					c = &in[i];
			assert_non_null(c);
			assert_int_equal(g->backing_off, c->backing_off + (uint64_t)g->first_block * B);
			for (unsigned b = g->first_block; b < g->first_block + g->nblocks; b++)
				assert_true(cp_bitmap_test(c->blocks, b));
			off += (uint64_t)g->nblocks * B;
			len += (uint64_t)g->nblocks * B;
			got += g->nblocks;
		}
		assert_int_equal(len, x->len);
	}
	assert_int_equal(got, want);
}

static void empty_and_errors(void **state)
{
	cp_bitmap a = { { 0 } };
	wb_chunk in[2] = { { 0, 0, &a }, { 1, CH, &a } };
	wb_plan p;

	assert_int_equal(wb_plan_build(in, 2, 0, &p), 0);
	assert_int_equal(p.next, 0);
	wb_plan_free(&p);
	set_range(&a, 0, 1);
	in[1].backing_off = 100;
	assert_int_equal(wb_plan_build(in, 2, 0, &p), -EINVAL); /* misaligned */
	in[1].backing_off = 0;
	assert_int_equal(wb_plan_build(in, 2, 0, &p), -EINVAL); /* overlap */
	in[1].backing_off = CH;
	assert_int_equal(wb_plan_build(in, 2, B + 1, &p), -EINVAL); /* cap */
	assert_int_equal(wb_plan_build(in, 2, B, &p), 0);
	assert_int_equal(p.next, 2);
	wb_plan_free(&p);
}

/* Chunk 7 holds file offsets [0, 2M), chunk 3 [2M, 4M), chunk 9 [6M, 8M):
 * given in the wrong order, with a run crossing 7->3 and a gap before 9. */
static void sorted_merged_across_chunks(void **state)
{
	cp_bitmap b7 = { { 0 } }, b3 = { { 0 } }, b9 = { { 0 } };
	wb_chunk in[3] = { { 9, 3 * CH, &b9 }, { 3, CH, &b3 }, { 7, 0, &b7 } };
	wb_plan p;

	set_range(&b7, 0, 2);     /* [0, 8K) */
	set_range(&b7, 5, 1);     /* gap, then [20K, 24K) */
	set_range(&b7, 500, 12);  /* to the end of chunk 7 ... */
	set_range(&b3, 0, 4);     /* ... continued in chunk 3 */
	set_range(&b9, 0, 1);     /* 6M: not adjacent to 3's end */
	set_range(&b9, 511, 1);
	in[0].backing_off = 3 * CH;
	assert_int_equal(wb_plan_build(in, 3, 0, &p), 0);
	check_plan(in, 3, 0, &p);
	assert_int_equal(p.next, 5);
	assert_int_equal(p.ext[0].backing_off, 0);
	assert_int_equal(p.ext[0].len, 2 * B);
	assert_int_equal(p.ext[1].backing_off, 5 * B);
	assert_int_equal(p.ext[2].backing_off, 500 * B);
	assert_int_equal(p.ext[2].len, 16 * B); /* 12 + 4 across the boundary */
	assert_int_equal(p.ext[2].nsegs, 2);
	assert_int_equal(p.segs[p.ext[2].first_seg].chunk, 7);
	assert_int_equal(p.segs[p.ext[2].first_seg + 1].chunk, 3);
	assert_int_equal(p.ext[3].backing_off, 3 * CH);
	assert_int_equal(p.ext[4].backing_off, 3 * CH + 511 * B);
	wb_plan_free(&p);

	/* The cap cuts the long run (and only it) into 3-block pieces. */
	assert_int_equal(wb_plan_build(in, 3, 3 * B, &p), 0);
	check_plan(in, 3, 3 * B, &p);
	/* 2 + 1 + ceil(16/3)=6 + 1 + 1 */
	assert_int_equal(p.next, 10);
	wb_plan_free(&p);
}

/* Whole chunks of a file, adjacent, given shuffled: one extent per cap. */
static void shuffled_full_file(void **state)
{
	enum { N = 16 };
	cp_bitmap full;
	wb_chunk in[N];
	wb_plan p;
	uint64_t x = 88172645463325252ull;

	memset(&full, 0xff, sizeof(full));
	for (uint32_t i = 0; i < N; i++)
		in[i] = (wb_chunk){ 100 + i, (uint64_t)i * CH, &full };
	for (int i = N - 1; i > 0; i--) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int j = (int)(x % (uint64_t)(i + 1));
		wb_chunk t = in[i];

		in[i] = in[j];
		in[j] = t;
	}
	assert_int_equal(wb_plan_build(in, N, 0, &p), 0);
	check_plan(in, N, 0, &p);
	assert_int_equal(p.next, 1);
	assert_int_equal(p.ext[0].len, N * CH);
	assert_int_equal(p.nsegs, N);
	for (uint32_t s = 0; s < N; s++)
		assert_int_equal(p.segs[s].chunk, 100 + s);
	wb_plan_free(&p);
	assert_int_equal(wb_plan_build(in, N, 3 * CH, &p), 0);
	check_plan(in, N, 3 * CH, &p);
	assert_int_equal(p.next, 6); /* 16 chunks / 3 per extent */
	wb_plan_free(&p);
}

/* Random sparse dirty sets at random, non-overlapping chunk offsets
 * (some adjacent), random caps: the invariants always hold. */
static void random_plans(void **state)
{
	enum { N = 12 };
	uint64_t x = 0x1234567;
	cp_bitmap bm[N];
	wb_chunk in[N];

	for (int round = 0; round < 200; round++) {
		uint64_t off = 0;
		wb_plan p;

		for (uint32_t i = 0; i < N; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			memset(&bm[i], 0, sizeof(bm[i]));
			for (int k = 0; k < 20; k++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				unsigned f = (unsigned)(x % CP_CHUNK_BLOCKS), len = 1 + (unsigned)((x >> 16) % 40);

				set_range(&bm[i], f, f + len > CP_CHUNK_BLOCKS ? CP_CHUNK_BLOCKS - f : len);
			}
			in[i] = (wb_chunk){ i, off, &bm[i] };
			off += CH + ((x >> 30) % 3) * B * ((x >> 40) % 2); /* often adjacent */
		}
		/* Reverse, so input order never helps. */
		for (int i = 0; i < N / 2; i++) {
			wb_chunk t = in[i];

			in[i] = in[N - 1 - i];
			in[N - 1 - i] = t;
		}
		uint64_t cap = (x >> 50) % 3 == 0 ? 0 : B * (1 + (x >> 20) % 64);

		assert_int_equal(wb_plan_build(in, N, cap, &p), 0);
		check_plan(in, N, cap, &p);
		wb_plan_free(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_and_errors),
		cmocka_unit_test(sorted_merged_across_chunks),
		cmocka_unit_test(shuffled_full_file),
		cmocka_unit_test(random_plans),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
