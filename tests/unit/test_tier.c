/* SPDX-License-Identifier: MIT */
/*
 * The tier model's arithmetic (src/tier): presets, the settings and their
 * errors, the charge formula and the shared budget's reservations, on
 * hand-computed cases. No timing: scripts/bench_tier.py measures that.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tier/internal.h"

static void test_presets(void **state)
{
	(void)state;
	const struct tier_preset *p = tier_preset_find("pcm");
	assert_non_null(p);
	/* warp.md Table I: PCM 50 ns / 10 GB/s read, 350-1000 ns (500 taken) / 2 GB/s write */
	assert_true(p->f.read_ns == 50 && p->f.write_ns == 500 && p->f.read_gbps == 10 &&
		    p->f.write_gbps == 2);
	p = tier_preset_find("stt-ram");
	assert_true(p && p->f.read_ns == 40 && p->f.write_ns == 40 && p->f.read_gbps == 15 &&
		    p->f.write_gbps == 10);
	p = tier_preset_find("memristor");
	assert_true(p && p->f.read_ns == 100 && p->f.write_ns == 100 && p->f.read_gbps == 10 &&
		    p->f.write_gbps == 5);
	p = tier_preset_find("optane");
	assert_true(p && p->f.read_ns == 305 && p->f.write_gbps == 2.3);
	assert_non_null(tier_preset_find("cxl"));
	assert_null(tier_preset_find("none"));
	assert_null(tier_preset_find("custom"));
	/* every preset but none/custom is a choice of tier.model, and back */
	const char *choices = chell_setting_defs[chell_setting_index("tier.model")].choices;
	for (p = tier_presets; p->name; p++)
		assert_non_null(strstr(choices, p->name));
}

/* A config with the given "key=value" settings over the defaults. */
static int load(struct chell_config *cfg, const char *const *kv, char *err, size_t n)
{
	char *env[16], key[64];
	int i = 0;
	for (; kv[i]; i++) {
		const char *eq = strchr(kv[i], '=');
		snprintf(key, sizeof key, "%.*s", (int)(eq - kv[i]), kv[i]);
		int k = chell_setting_index(key);
		assert_true(k >= 0);
		size_t len = strlen(chell_setting_defs[k].env) + strlen(eq) + 1;
		env[i] = malloc(len);
		snprintf(env[i], len, "%s%s", chell_setting_defs[k].env, eq);
	}
	env[i] = NULL;
	int r = chell_config_load(cfg, env, err, n);
	while (i--)
		free(env[i]);
	return r;
}

/* tier_settings on a config of kv; *model copied into model_buf. */
static char model_buf[32];
static int settings(const char *const *kv, const char **model, struct chell_tier_figures *f,
		    char *err, size_t n)
{
	struct chell_config cfg = {0};
	int r = load(&cfg, kv, err, n);
	if (r == 0) {
		r = tier_settings(&cfg, model, f, err, n);
		if (r == 0) {
			snprintf(model_buf, sizeof model_buf, "%s", *model);
			*model = model_buf;
		}
	}
	chell_config_free(&cfg);
	return r;
}

static void test_settings(void **state)
{
	(void)state;
	char err[256];
	const char *model;
	struct chell_tier_figures f = {0};
	const char *none[] = {NULL};
	assert_int_equal(settings(none, &model, &f, err, sizeof err), 0);
	assert_string_equal(model, "none");
	/* a preset, one figure overridden */
	const char *over[] = {"tier.model=pcm", "tier.write_ns=1000", NULL};
	assert_int_equal(settings(over, &model, &f, err, sizeof err), 0);
	assert_string_equal(model, "pcm");
	assert_true(f.read_ns == 50 && f.write_ns == 1000 && f.read_gbps == 10 && f.write_gbps == 2);
	/* custom: all four, fractions allowed */
	const char *custom[] = {"tier.model=custom", "tier.read_ns=0", "tier.write_ns=12.5",
				"tier.read_gbps=0.5", "tier.write_gbps=3", NULL};
	assert_int_equal(settings(custom, &model, &f, err, sizeof err), 0);
	assert_true(f.read_ns == 0 && f.write_ns == 12.5 && f.read_gbps == 0.5 && f.write_gbps == 3);
	const char *missing[] = {"tier.model=custom", "tier.read_ns=1", "tier.write_ns=1",
				 "tier.write_gbps=1", NULL};
	assert_int_equal(settings(missing, &model, &f, err, sizeof err), -1);
	assert_string_equal(err, "setting tier.read_gbps is required with tier.model = custom");
	const char *zero[] = {"tier.model=cxl", "tier.write_gbps=0", NULL};
	assert_int_equal(settings(zero, &model, &f, err, sizeof err), -1);
	assert_non_null(strstr(err, "setting tier.write_gbps: a bandwidth must be more than 0"));
	/* the value parser refuses what is not a plain decimal */
	static const char *const bad[] = {"-1", "1e3", "inf", "nan", "0x10", "1.2.3", ".", "1,5", " 1"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		assert_int_equal(chell_config_check("tier.read_ns", bad[i], "env", err, sizeof err), -1);
		assert_non_null(strstr(err, "tier.read_ns (CHELL_TIER_READ_NS)"));
	}
	double x;
	assert_int_equal(chell_parse_number("2.25", &x), 0);
	assert_true(x == 2.25);
	assert_int_equal(chell_parse_number(".5", &x), 0);
	assert_true(x == 0.5);
	assert_int_equal(chell_parse_number("7.", &x), 0);
	assert_true(x == 7);
}

static void test_cost(void **state)
{
	(void)state;
	/* device: 500 ns, 2 GB/s writes; DRAM: 100 ns, 8 GB/s */
	struct chell_tier_figures dev = {50, 500, 10, 2}, dram = {100, 100, 20, 8};
	struct tier_cost c = tier_cost(&dev, &dram, true, 4096, 1);
	assert_true(c.lat_ns == 400);           /* 500 - 100 */
	assert_true(c.dev_ns == 2048);          /* 4096 B / 2 B/ns */
	assert_true(c.dram_ns == 512);          /* 4096 B / 8 B/ns */
	/* extra = 400 + 2048 - 512 */
	assert_true(c.lat_ns + c.dev_ns - c.dram_ns == 1936);
	c = tier_cost(&dev, &dram, true, 1 << 20, 3);
	assert_true(c.lat_ns == 1200 && c.dev_ns == 524288 && c.dram_ns == 131072);
	/* reads: 50 ns is better than this DRAM's 100 ns: no latency charge;
	 * 10 GB/s is worse than 20 GB/s: the bandwidth difference only */
	c = tier_cost(&dev, &dram, false, 1000, 1);
	assert_true(c.lat_ns == 0 && c.dev_ns == 100 && c.dram_ns == 50);
	/* a device faster than DRAM both ways costs nothing extra */
	struct chell_tier_figures fast = {10, 10, 100, 100};
	c = tier_cost(&fast, &dram, false, 4096, 1);
	assert_true(c.lat_ns == 0 && c.dev_ns == c.dram_ns);
	/* latency only (0 bytes, one access) */
	c = tier_cost(&dev, &dram, true, 0, 1);
	assert_true(c.lat_ns == 400 && c.dev_ns == 0 && c.dram_ns == 0);
}

static void test_reserve(void **state)
{
	(void)state;
	_Atomic uint64_t busy = 0;
	/* idle device: the transfer starts when it could */
	assert_int_equal(tier_reserve(&busy, 1000, 300), 1300);
	assert_int_equal(atomic_load(&busy), 1300);
	/* a second one that could start at 1100 waits for the first: 1300..1600 */
	assert_int_equal(tier_reserve(&busy, 1100, 300), 1600);
	/* one that comes after the device went idle starts at once */
	assert_int_equal(tier_reserve(&busy, 5000, 10), 5010);
	/* two processes each moving 4 transfers of 100 ns back to back, each
	 * ready at the same moments: the device is busy 800 ns in all, so each
	 * gets half the bandwidth */
	busy = 0;
	uint64_t end_a = 0, end_b = 0;
	for (int i = 0; i < 4; i++) {
		end_a = tier_reserve(&busy, end_a, 100);
		end_b = tier_reserve(&busy, end_b, 100);
	}
	assert_int_equal(end_b, 800);
	assert_int_equal(end_a, 700);
}

static void test_dram_cache_line(void **state)
{
	(void)state;
	struct tier_dram d = {{141.5, 141.5, 29.75, 34.8}, 19.5}, e;
	char line[256];
	tier_dram_format(line, sizeof line, &d);
	assert_int_equal(tier_dram_parse(line, &e), 0);
	assert_true(e.f.read_ns == 141.5 && e.f.write_gbps == 34.8 && e.clock_ns == 19.5);
	assert_int_equal(tier_dram_parse("chell-tier-dram 1 1 1 0 1 1\n", &e), -1); /* no bandwidth */
	assert_int_equal(tier_dram_parse("chell-tier-dram 2 1 1 1 1 1\n", &e), -1); /* other version */
	assert_int_equal(tier_dram_parse("chell-tier-dram 1 1 1 1\n", &e), -1);     /* short */
	assert_int_equal(tier_dram_parse("", &e), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presets),       cmocka_unit_test(test_settings),
		cmocka_unit_test(test_cost),          cmocka_unit_test(test_reserve),
		cmocka_unit_test(test_dram_cache_line),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
