/* SPDX-License-Identifier: MIT */
/* The tiered heap's placement decisions (src/tierheap/policy.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tierheap/policy.h"

#define MB (UINT64_C(1) << 20)

static int pick(enum th_policy p, uint64_t budget, uint64_t dram, uint64_t slow, size_t size,
		enum th_tier order[2])
{
	struct th_policy_cfg c = {.policy = p, .budget = budget, .w_dram = 3, .w_slow = 1};
	return th_pick(&c, dram, slow, size, order);
}

static void test_revert_dram_until_budget(void **state)
{
	enum th_tier o[2];
	assert_int_equal(pick(TH_REVERT, 64 * MB, 0, 0, 8 * MB, o), 2);
	assert_int_equal(o[0], TH_DRAM);
	assert_int_equal(o[1], TH_SLOW);
	/* Exactly filling the budget is still DRAM ... */
	pick(TH_REVERT, 64 * MB, 56 * MB, 0, 8 * MB, o);
	assert_int_equal(o[0], TH_DRAM);
	/* ... one byte past it is not: the budget is never exceeded by choice. */
	pick(TH_REVERT, 64 * MB, 56 * MB + 1, 0, 8 * MB, o);
	assert_int_equal(o[0], TH_SLOW);
	assert_int_equal(o[1], TH_DRAM);
	/* Already past it (metadata): slow. */
	pick(TH_REVERT, 64 * MB, 65 * MB, 0, 4096, o);
	assert_int_equal(o[0], TH_SLOW);
	/* An extent larger than the whole budget. */
	pick(TH_REVERT, 64 * MB, 0, 0, 65 * MB, o);
	assert_int_equal(o[0], TH_SLOW);
	/* No budget: always DRAM first. */
	pick(TH_REVERT, 0, UINT64_MAX / 2, 0, 8 * MB, o);
	assert_int_equal(o[0], TH_DRAM);
}

static void test_preferred_and_bind(void **state)
{
	enum th_tier o[2];
	assert_int_equal(pick(TH_PREFERRED, 64 * MB, 0, 0, 4096, o), 2);
	assert_int_equal(o[0], TH_SLOW);
	assert_int_equal(o[1], TH_DRAM);
	/* bind: the slow tier and nothing else, whatever the budget says. */
	assert_int_equal(pick(TH_BIND, 0, 0, 0, 4096, o), 1);
	assert_int_equal(o[0], TH_SLOW);
}

/* Interleave 3:1: over many equal extents, 3 in DRAM for each slow one. */
static void test_interleave_weights(void **state)
{
	uint64_t dram = 0, slow = 0;
	for (int i = 0; i < 400; i++) {
		enum th_tier o[2];
		pick(TH_INTERLEAVE, 0, dram, slow, 2 * MB, o);
		if (o[0] == TH_DRAM)
			dram += 2 * MB;
		else
			slow += 2 * MB;
	}
	assert_int_equal(dram / (2 * MB), 300);
	assert_int_equal(slow / (2 * MB), 100);
	/* 1:1 alternates. */
	struct th_policy_cfg c = {.policy = TH_INTERLEAVE, .w_dram = 1, .w_slow = 1};
	enum th_tier o[2];
	th_pick(&c, 4 * MB, 2 * MB, 2 * MB, o);
	assert_int_equal(o[0], TH_SLOW);
	th_pick(&c, 4 * MB, 4 * MB, 2 * MB, o);
	assert_int_equal(o[0], TH_DRAM);
}

static void test_parsers(void **state)
{
	enum th_policy p;
	assert_int_equal(th_policy_parse("interleave", &p), 0);
	assert_int_equal(p, TH_INTERLEAVE);
	assert_int_equal(th_policy_parse("nvmrevert", &p), -1);
	assert_string_equal(th_policy_name(TH_BIND), "bind");
	unsigned d, s;
	assert_int_equal(th_weights_parse("3:1", &d, &s), 0);
	assert_int_equal(d, 3);
	assert_int_equal(s, 1);
	assert_int_equal(th_weights_parse("0:1", &d, &s), -1);
	assert_int_equal(th_weights_parse("3", &d, &s), -1);
	assert_int_equal(th_weights_parse("3:", &d, &s), -1);
	assert_int_equal(th_weights_parse("1001:1", &d, &s), -1);
	assert_int_equal(th_weights_parse("2:x", &d, &s), -1);
	uint64_t v;
	assert_int_equal(th_parse_memory_max("max\n", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(th_parse_memory_max("134217728\n", &v), 0);
	assert_int_equal(v, 134217728);
	assert_int_equal(th_parse_memory_max("9223372036854771712\n", &v), 0); /* v1: none */
	assert_int_equal(v, 0);
	assert_int_equal(th_parse_memory_max("12k\n", &v), -1);
	assert_int_equal(th_parse_memory_max("", &v), -1);
}

static void test_bump(void **state)
{
	struct th_bump b = {.cap = 16 * MB};
	assert_int_equal(th_bump_take(&b, 4096, 4096), 0);
	/* Aligned up, never overlapping. */
	assert_int_equal(th_bump_take(&b, 8192, 2 * MB), 2 * MB);
	assert_int_equal(th_bump_take(&b, 100, 4096), 2 * MB + 8192);
	/* Full: refused, and the pointer does not move. */
	assert_int_equal(th_bump_take(&b, 15 * MB, 4096), UINT64_MAX);
	assert_int_equal(th_bump_take(&b, 4096, 4096), 2 * MB + 3 * 4096);
	/* Exactly to the end is fine; past it is not. */
	uint64_t rest = 16 * MB - (2 * MB + 4 * 4096);
	assert_int_equal(th_bump_take(&b, rest, 4096), 2 * MB + 4 * 4096);
	assert_int_equal(th_bump_take(&b, 4096, 4096), UINT64_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_revert_dram_until_budget),
		cmocka_unit_test(test_preferred_and_bind),
		cmocka_unit_test(test_interleave_weights),
		cmocka_unit_test(test_parsers),
		cmocka_unit_test(test_bump),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
