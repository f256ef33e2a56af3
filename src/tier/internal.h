/* SPDX-License-Identifier: MIT */
/*
 * The tier model's insides (include/chell/tier.h is its face): presets,
 * settings, DRAM calibration, the shared bandwidth budget, the charge and
 * its counters. Free of the Nib: libchell.so and chelld both link it.
 *
 *   presets.c    the named devices and where their figures come from
 *   settings.c   tier.* settings -> the device's figures (clear errors)
 *   calibrate.c  this machine's DRAM, measured once per boot and cached
 *   budget.c     the "device busy until" clocks shared by every process
 *   charge.c     chell_tier_charge: the arithmetic, the spin, the counters
 */
#ifndef CHELL_TIER_INTERNAL_H
#define CHELL_TIER_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chell/tier.h"
#include "common/config.h"

/* ---- presets.c */
struct tier_preset {
	const char *name;
	struct chell_tier_figures f;
};
extern const struct tier_preset tier_presets[]; /* ends with a NULL name */
const struct tier_preset *tier_preset_find(const char *name);

/* ---- settings.c: the model named by tier.model with the tier.* overrides.
 * *model = "none" (0 returned, *f untouched) or the preset/custom name;
 * -1 with a message naming the setting when a figure is missing or bad. */
int tier_settings(const struct chell_config *cfg, const char **model, struct chell_tier_figures *f,
		  char *err, size_t errlen);

/* ---- calibrate.c */
/* This machine's DRAM, for the transfers the tier model charges: latency
 * of a dependent load from memory not in any cache, bandwidth of 1 MB
 * copies from (read) and into (write) such memory, and clock_ns: the cost
 * of reading the clock (for the record). */
struct tier_dram {
	struct chell_tier_figures f;
	double clock_ns;
};
/* Measure (about 30 ms). */
void tier_measure(struct tier_dram *d);
/* The cached measurement of this boot in dir (chell-tier-dram.BOOTID), or
 * measure and cache it; 0, or -errno when it cannot be measured either. */
int tier_calibrate(const char *dir, struct tier_dram *d);
/* Parse/format the cache file's one line (tests use them). */
int tier_dram_parse(const char *text, struct tier_dram *d);
int tier_dram_format(char *buf, size_t len, const struct tier_dram *d);

/* ---- budget.c: the busy-until clocks, [0] reads, [TIER_WRITE_CLOCK] writes (a cache line apart), in
 * CLOCK_MONOTONIC ns, in a small shared file of dir. */
#define TIER_WRITE_CLOCK 8
_Atomic uint64_t *tier_budget_open(const char *dir, const char *model, char *err, size_t errlen);
/* A transfer that could start at t0 and keeps the device busy for dur ns:
 * starts at max(t0, busy), after every transfer reserved before it;
 * returns when it ends (busy's new value). */
uint64_t tier_reserve(_Atomic uint64_t *busy, uint64_t t0, uint64_t dur);

/* ---- charge.c */
/* The extra time a transfer costs on the device over DRAM, split as the
 * charge uses it: lat_ns (accesses x latency difference) and, for the
 * bandwidth budget, dev_ns (the device's transfer time, never shorter than
 * DRAM's) and dram_ns (DRAM's). Each difference is at least 0: a figure
 * better than this machine's DRAM is delivered at DRAM's. */
struct tier_cost {
	double lat_ns, dev_ns, dram_ns;
};
struct tier_cost tier_cost(const struct chell_tier_figures *dev, const struct chell_tier_figures *dram,
			   bool write, size_t bytes, unsigned accesses);
/* Start the model of this process from the settings; 0, or -1 with a
 * message (a bad setting, no state directory). Idempotent per image. */
int chell_tier_init(const struct chell_config *cfg, char *err, size_t errlen);
/* The counters, per direction: [0] reads, [1] writes. */
struct tier_counters {
	uint64_t ops[2], bytes[2], wait_ns[2];
};
void tier_counters(struct tier_counters *out);
/* Zero them (a forked child counts only its own charges). */
void tier_counters_reset(void);
/* ", \"tier_model\": \"pcm\", \"tier_reads\": N, ..." into buf: the keys
 * `chell stat` prints; "" when no model is active. Length written. */
size_t chell_tier_json_fields(char *buf, size_t len);
/* CLOCK_MONOTONIC in ns. */
uint64_t tier_now_ns(void);
/* The machine's boot id (36 characters), or "noboot". */
void tier_boot_id(char out[40]);

#endif
