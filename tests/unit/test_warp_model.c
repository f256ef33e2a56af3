/* WARP's benefit model and hysteresis (src/handlers/warp/model.c) on
 * hand-computed cases, and the calibration's cache (calib.c).
 *
 * Locating figures used throughout (struct warp_locate): a system call
 * 200 ns, a mapping fault 300 ns, a TLB lookup 10 ns, a buffer lookup
 * 20 ns, DRAM copies at 10 GB/s (0.1 ns per byte). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "brain.h"

static const struct warp_locate loc = {.syscall_ns = 200, .fault_ns = 300, .tlb_ns = 10, .lookup_ns = 20,
				       .dram_gbps = 10};
/* The paper's preliminary experiment (warp.md §II): reads 50 ns at 10 GB/s,
 * writes 500 ns at 2 GB/s. */
static const struct warp_tier_figures pcm = {.read_ns = 50, .write_ns = 500, .read_gbps = 10, .write_gbps = 2};
/* DRAM itself (Table I): 15 ns, 15 GB/s reads, 10 GB/s writes. */
static const struct warp_tier_figures dram = {.read_ns = 15, .write_ns = 15, .read_gbps = 15, .write_gbps = 10};
static const struct warp_policy paper = {.delta = 0.20, .confirm = 3};

#define assert_near(a, b) assert_true(fabs((double)(a) - (double)(b)) <= 1e-6 * fabs((double)(b)) + 1e-9)

static void test_costs(void **state)
{
	struct warp_costs c;
	warp_costs_from(&c, &pcm, &loc);
	/* normal: system call + device latency; device bandwidth */
	assert_near(c.lat_r[WARP_NORMAL], 250);
	assert_near(c.byte_r[WARP_NORMAL], 0.1);
	assert_near(c.lat_w[WARP_NORMAL], 700);
	assert_near(c.byte_w[WARP_NORMAL], 0.5);
	/* mapped: a TLB lookup replaces the system call on reads; writes pay
	 * the system call and the fault of the next read */
	assert_near(c.lat_r[WARP_MAPPED], 60);
	assert_near(c.lat_w[WARP_MAPPED], 1000);
	/* buffered: lookup + mapped read; writes at DRAM plus the write-back */
	assert_near(c.lat_r[WARP_BUFFERED], 80);
	assert_near(c.lat_w[WARP_BUFFERED], 20);
	assert_near(c.byte_w[WARP_BUFFERED], 0.6);
	assert_string_equal(warp_state_name(WARP_NORMAL), "normal");
	assert_string_equal(warp_state_name(WARP_MAPPED), "mapped");
	assert_string_equal(warp_state_name(WARP_BUFFERED), "buffered");
}

/* 100 reads of 4 KB: T_normal = 100*250 + 409600*0.1 = 65960,
 * T_mapped = 100*60 + 40960 = 46960, T_buffered = 100*80 + 40960 = 48960. */
static const struct warp_node_stats read_heavy = {.nr = 100, .sr = 409600};
/* 100 writes of 512 B: T_normal = 100*700 + 51200*0.5 = 95600,
 * T_mapped = 100*1000 + 25600 = 125600, T_buffered = 100*20 + 51200*0.6 = 32720. */
static const struct warp_node_stats write_heavy = {.nw = 100, .sw = 51200};

static void test_time(void **state)
{
	struct warp_costs c;
	warp_costs_from(&c, &pcm, &loc);
	assert_near(warp_model_time(&c, WARP_NORMAL, &read_heavy), 65960);
	assert_near(warp_model_time(&c, WARP_MAPPED, &read_heavy), 46960);
	assert_near(warp_model_time(&c, WARP_BUFFERED, &read_heavy), 48960);
	assert_near(warp_model_time(&c, WARP_NORMAL, &write_heavy), 95600);
	assert_near(warp_model_time(&c, WARP_MAPPED, &write_heavy), 125600);
	assert_near(warp_model_time(&c, WARP_BUFFERED, &write_heavy), 32720);
}

/* A node of 64 KB written 1000 times 4 KB between checkpoints: each block
 * is written back once, so only 65536 bytes pay the write-back (0.5 ns/B):
 *   T_buffered = 1000*20 + 4096000*0.6 - (4096000-65536)*0.5 = 462368
 *   T_normal   = 1000*700 + 4096000*0.5                       = 2748000
 * and without the cap (every byte written back) T_buffered = 2477600. */
static void test_writeback_capped_at_node(void **state)
{
	struct warp_costs c;
	warp_costs_from(&c, &pcm, &loc);
	const struct warp_node_stats hot = {.nw = 1000, .sw = 4096000};
	assert_near(c.wb_byte, 0.5);
	assert_near(warp_model_time(&c, WARP_BUFFERED, &hot), 2477600);
	c.wb_cap = 65536;
	assert_near(warp_model_time(&c, WARP_BUFFERED, &hot), 462368);
	assert_near(warp_model_time(&c, WARP_NORMAL, &hot), 2748000);
	/* below the cap nothing changes */
	assert_near(warp_model_time(&c, WARP_BUFFERED, &write_heavy), 32720);
}

/* Run `k` checkpoints with the same counters; the state after each. */
static enum warp_state run(const struct warp_costs *c, const struct warp_policy *p, enum warp_state s,
			   struct warp_hyst *h, const struct warp_node_stats *st, int k, enum warp_state *trail)
{
	for (int i = 0; i < k; i++) {
		s = warp_model_decide(c, p, s, h, st);
		if (trail)
			trail[i] = s;
	}
	return s;
}

static void test_read_heavy_maps(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	enum warp_state t[4];
	warp_costs_from(&c, &pcm, &loc);
	/* mapped beats normal by 28.8% > 20%: exactly the third win moves */
	run(&c, &paper, WARP_NORMAL, &h, &read_heavy, 4, t);
	assert_int_equal(t[0], WARP_NORMAL);
	assert_int_equal(t[1], WARP_NORMAL);
	assert_int_equal(t[2], WARP_MAPPED);
	assert_int_equal(t[3], WARP_MAPPED);
}

static void test_write_heavy_buffers(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	enum warp_state t[3];
	warp_costs_from(&c, &pcm, &loc);
	run(&c, &paper, WARP_NORMAL, &h, &write_heavy, 3, t);
	assert_int_equal(t[1], WARP_NORMAL);
	assert_int_equal(t[2], WARP_BUFFERED);
	/* and from mapped too */
	h = (struct warp_hyst){0};
	assert_int_equal(run(&c, &paper, WARP_MAPPED, &h, &write_heavy, 3, NULL), WARP_BUFFERED);
}

/* On DRAM, 10 reads of 64 KB and 10 writes of 1 MB:
 *   T_normal   = 10*215 + 655360/15 + 10*215 + 10485760*0.1 = 1096566.67
 *   T_mapped   = 10*25  + 655360/15 + 10*515 + 1048576      = 1097666.67
 *   T_buffered = 10*45  + 655360/15 + 10*20  + 10485760*0.2 = 2141492.67
 * normal is best; the large writes make the buffer's extra copy dear. */
static void test_mixed_stays_normal(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	const struct warp_node_stats mixed = {.nr = 10, .sr = 655360, .nw = 10, .sw = 10485760};
	warp_costs_from(&c, &dram, &loc);
	assert_near(warp_model_time(&c, WARP_NORMAL, &mixed), 2150 + 655360.0 / 15 + 2150 + 1048576);
	assert_near(warp_model_time(&c, WARP_MAPPED, &mixed), 250 + 655360.0 / 15 + 5150 + 1048576);
	assert_near(warp_model_time(&c, WARP_BUFFERED, &mixed), 450 + 655360.0 / 15 + 200 + 2097152);
	assert_int_equal(run(&c, &paper, WARP_NORMAL, &h, &mixed, 10, NULL), WARP_NORMAL);
	assert_int_equal(h.streak, 0);
	/* normal beats mapped by 0.1%, far below delta: a mapped node stays */
	h = (struct warp_hyst){0};
	assert_int_equal(run(&c, &paper, WARP_MAPPED, &h, &mixed, 10, NULL), WARP_MAPPED);
}

/* A win below delta never moves: 10 reads of 1 MB on PCM, mapped beats
 * normal by (2500 - 600) / 1051076 = 0.18%. */
static void test_below_delta(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	const struct warp_node_stats big = {.nr = 10, .sr = 10485760};
	warp_costs_from(&c, &pcm, &loc);
	assert_true(warp_model_time(&c, WARP_MAPPED, &big) < warp_model_time(&c, WARP_NORMAL, &big));
	assert_int_equal(run(&c, &paper, WARP_NORMAL, &h, &big, 20, NULL), WARP_NORMAL);
	/* with delta 0.1% it would move after 3 */
	struct warp_policy loose = {.delta = 0.001, .confirm = 3};
	h = (struct warp_hyst){0};
	assert_int_equal(run(&c, &loose, WARP_NORMAL, &h, &big, 2, NULL), WARP_NORMAL);
	assert_int_equal(run(&c, &loose, WARP_NORMAL, &h, &big, 1, NULL), WARP_MAPPED);
}

/* The confirmation needs exactly `confirm` consecutive wins of the same
 * candidate: a different candidate in between starts the count again. */
static void test_candidate_change_resets(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	warp_costs_from(&c, &pcm, &loc);
	enum warp_state s = run(&c, &paper, WARP_NORMAL, &h, &read_heavy, 2, NULL);
	assert_int_equal(s, WARP_NORMAL);
	assert_int_equal(h.candidate, WARP_MAPPED);
	assert_int_equal(h.streak, 2);
	s = warp_model_decide(&c, &paper, s, &h, &write_heavy); /* buffered wins once */
	assert_int_equal(s, WARP_NORMAL);
	assert_int_equal(h.candidate, WARP_BUFFERED);
	assert_int_equal(h.streak, 1);
	s = run(&c, &paper, s, &h, &read_heavy, 2, NULL); /* mapped again: 1, 2 */
	assert_int_equal(s, WARP_NORMAL);
	s = run(&c, &paper, s, &h, &read_heavy, 1, NULL); /* 3 */
	assert_int_equal(s, WARP_MAPPED);
}

/* A checkpoint where the current state is best also breaks the streak. */
static void test_current_best_resets(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	const struct warp_node_stats big = {.nr = 10, .sr = 10485760};
	warp_costs_from(&c, &pcm, &loc);
	enum warp_state s = run(&c, &paper, WARP_NORMAL, &h, &read_heavy, 2, NULL);
	s = warp_model_decide(&c, &paper, s, &h, &big); /* no win above delta */
	assert_int_equal(h.streak, 0);
	s = run(&c, &paper, s, &h, &read_heavy, 2, NULL);
	assert_int_equal(s, WARP_NORMAL);
	s = run(&c, &paper, s, &h, &read_heavy, 1, NULL);
	assert_int_equal(s, WARP_MAPPED);
}

/* An idle node (no access since the last checkpoint) keeps its state, and
 * its streak starts again. */
static void test_idle_keeps_state(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	const struct warp_node_stats idle = {0};
	warp_costs_from(&c, &pcm, &loc);
	for (int s0 = 0; s0 < WARP_NSTATES; s0++) {
		h = (struct warp_hyst){0};
		assert_int_equal(run(&c, &paper, (enum warp_state)s0, &h, &idle, 5, NULL), s0);
	}
	h = (struct warp_hyst){0};
	enum warp_state s = run(&c, &paper, WARP_NORMAL, &h, &read_heavy, 2, NULL);
	s = warp_model_decide(&c, &paper, s, &h, &idle);
	assert_int_equal(s, WARP_NORMAL);
	assert_int_equal(h.streak, 0);
	s = run(&c, &paper, s, &h, &read_heavy, 2, NULL);
	assert_int_equal(s, WARP_NORMAL);
	assert_int_equal(run(&c, &paper, s, &h, &read_heavy, 1, NULL), WARP_MAPPED);
}

static void test_confirm_settings(void **state)
{
	struct warp_costs c;
	struct warp_hyst h = {0};
	warp_costs_from(&c, &pcm, &loc);
	struct warp_policy once = {.delta = 0.20, .confirm = 1};
	assert_int_equal(run(&c, &once, WARP_NORMAL, &h, &read_heavy, 1, NULL), WARP_MAPPED);
	struct warp_policy five = {.delta = 0.20, .confirm = 5};
	h = (struct warp_hyst){0};
	assert_int_equal(run(&c, &five, WARP_NORMAL, &h, &read_heavy, 4, NULL), WARP_NORMAL);
	assert_int_equal(run(&c, &five, WARP_NORMAL, &h, &read_heavy, 1, NULL), WARP_MAPPED);
	/* delta 0.3: mapped's 28.8% is not enough */
	struct warp_policy strict = {.delta = 0.30, .confirm = 3};
	h = (struct warp_hyst){0};
	assert_int_equal(run(&c, &strict, WARP_NORMAL, &h, &read_heavy, 10, NULL), WARP_NORMAL);
}

/* The measured figures are plausible and cached for the other processes
 * of this boot: the cache file holds what this process uses. */
static void test_calibration(void **state)
{
	const struct warp_locate *l = warp_calibrate();
	assert_true(l == warp_calibrate());
	assert_true(l->syscall_ns > 0 && l->syscall_ns < 1e6);
	assert_true(l->fault_ns > 0 && l->fault_ns < 1e6);
	assert_true(l->tlb_ns > 0 && l->tlb_ns < 1e6);
	assert_true(l->lookup_ns > 0 && l->lookup_ns < 1e6);
	assert_true(l->dram_gbps > 0.01 && l->dram_gbps < 1e4);
	char id[64] = "", path[160];
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	assert_non_null(f);
	assert_non_null(fgets(id, sizeof id, f));
	fclose(f);
	id[strcspn(id, "\n")] = '\0';
	snprintf(path, sizeof path, "/dev/shm/chell-warp-calib-%s", id);
	f = fopen(path, "r");
	assert_non_null(f);
	struct warp_locate c;
	assert_int_equal(fscanf(f, "warp-calib 2 %lf %lf %lf %lf %lf", &c.syscall_ns, &c.fault_ns, &c.tlb_ns,
				&c.lookup_ns, &c.dram_gbps), 5);
	fclose(f);
	assert_true(fabs(c.syscall_ns - l->syscall_ns) < 1e-3 && fabs(c.fault_ns - l->fault_ns) < 1e-3 &&
		    fabs(c.tlb_ns - l->tlb_ns) < 1e-3 && fabs(c.lookup_ns - l->lookup_ns) < 1e-3 &&
		    fabs(c.dram_gbps - l->dram_gbps) < 1e-3);
	struct warp_costs a, b;
	warp_costs_init(&a, &pcm);
	warp_costs_from(&b, &pcm, l);
	assert_memory_equal(&a, &b, sizeof a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_costs),
		cmocka_unit_test(test_time),
		cmocka_unit_test(test_writeback_capped_at_node),
		cmocka_unit_test(test_read_heavy_maps),
		cmocka_unit_test(test_write_heavy_buffers),
		cmocka_unit_test(test_mixed_stays_normal),
		cmocka_unit_test(test_below_delta),
		cmocka_unit_test(test_candidate_change_resets),
		cmocka_unit_test(test_current_best_resets),
		cmocka_unit_test(test_idle_keeps_state),
		cmocka_unit_test(test_confirm_settings),
		cmocka_unit_test(test_calibration),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
