/* SPDX-License-Identifier: MIT */
/*
 * The charge. A transfer of `bytes` in `accesses` accesses, which just
 * took DRAM's time, is made to take the modelled device's:
 *
 *   extra = accesses * (dev_lat - dram_lat) + bytes/dev_bw - bytes/dram_bw
 *
 * with each difference at least 0 (the model slows down, it cannot speed
 * up: a figure better than this machine's DRAM is delivered at DRAM's).
 * The bandwidth part is not a private delay: the device's transfer time
 * is reserved on the clock all processes share (budget.c), from when the
 * copy began (now - DRAM's time for the bytes), so a lone process waits
 * exactly `extra` and n processes moving data at once share the bandwidth.
 * The wait is a spin on CLOCK_MONOTONIC (the vDSO reads the TSC): sleeping
 * is tens of microseconds too coarse (timer slack, wake-up). Only a long
 * wait (a large transfer on a slow device) sleeps first, to SLEEP_MARGIN
 * before the deadline, then spins the rest: a process waiting for the
 * emulated device leaves its CPU to the others meanwhile, as a process
 * waiting for a real device would. What a call costs besides its wait
 * (clock reads, the reservation, the counters: ~50 ns) is measured at
 * start-up and taken off each wait.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chell/sys.h"
#include "internal.h"

/* Waits longer than this sleep until SLEEP_MARGIN before their end (the
 * default timer slack is 50 us, a wake-up some more). */
#define SLEEP_OVER_NS 200000
#define SLEEP_MARGIN_NS 100000
/* A reservation ending further ahead than this means a broken clock. */
#define MAX_BACKLOG_NS 10000000000ull
#define unlikely(x) __builtin_expect(!!(x), 0)

bool chell_tier_active;
__thread uint64_t chell_tier_tls_bytes;

static struct chell_tier_figures dev, dram;
static double overhead_ns; /* taken off each wait */
static char model_name[16] = "none";
static _Atomic uint64_t *budget;
/* process-wide counters: the charge is a slow path already (it spins) */
static _Atomic uint64_t n_ops[2], n_bytes[2], n_wait[2];

uint64_t tier_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const struct chell_tier_figures *chell_tier_device(void)
{
	return chell_tier_active ? &dev : &dram;
}

const struct chell_tier_figures *chell_tier_dram(void)
{
	return &dram;
}

const char *chell_tier_model(void)
{
	return model_name;
}

struct tier_cost tier_cost(const struct chell_tier_figures *d, const struct chell_tier_figures *m,
			   bool write, size_t bytes, unsigned accesses)
{
	double dl = write ? d->write_ns : d->read_ns, ml = write ? m->write_ns : m->read_ns;
	double db = write ? d->write_gbps : d->read_gbps, mb = write ? m->write_gbps : m->read_gbps;
	struct tier_cost c;
	c.lat_ns = dl > ml ? accesses * (dl - ml) : 0;
	c.dram_ns = (double)bytes / mb; /* GB/s = bytes per ns */
	c.dev_ns = db < mb ? (double)bytes / db : c.dram_ns;
	return c;
}

/* The charge against the clock `busy`. */
static void charge_on(_Atomic uint64_t *busy, bool write, size_t bytes, unsigned accesses)
{
	chell_tier_tls_bytes += bytes;
	uint64_t now = tier_now_ns();
	struct tier_cost c = tier_cost(&dev, &dram, write, bytes, accesses);
	uint64_t t0 = now - (uint64_t)(c.dram_ns + 0.5);
	uint64_t end = tier_reserve(busy, t0, (uint64_t)(c.dev_ns + 0.5));
	if (unlikely(end > now + MAX_BACKLOG_NS)) {
		/* no backlog of real transfers is that long: a clock another
		 * program wrote nonsense into (the file is shared). Restart it
		 * rather than wait for it. */
		atomic_store_explicit(busy, now, memory_order_relaxed);
		end = tier_reserve(busy, t0, (uint64_t)(c.dev_ns + 0.5));
	}
	uint64_t deadline = end + (uint64_t)(c.lat_ns + 0.5) - (uint64_t)(overhead_ns + 0.5);
	uint64_t t = now;
	if (deadline > now + SLEEP_OVER_NS) {
		/* raw: not a cancellation point; a signal (EINTR) just ends it early */
		uint64_t wake = deadline - SLEEP_MARGIN_NS;
		struct timespec ts = {(time_t)(wake / 1000000000u), (long)(wake % 1000000000u)};
		CHELL_SC(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL, 0, 0);
		t = tier_now_ns();
	}
	while (t < deadline) {
		__builtin_ia32_pause();
		t = tier_now_ns();
	}
	atomic_fetch_add_explicit(&n_ops[write], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_bytes[write], bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_wait[write], t - now, memory_order_relaxed);
}

void chell_tier_charge(bool write, size_t bytes, unsigned accesses)
{
	if (chell_tier_active)
		charge_on(&budget[write ? TIER_WRITE_CLOCK : 0], write, bytes, accesses);
}

/* What a charge costs besides its wait (clock reads, the reservation, the
 * counters): charges of nothing on a private clock, the median of 5
 * batches; taken off every wait. */
static double measure_overhead(void)
{
	_Atomic uint64_t busy = 0;
	double v[5];
	overhead_ns = 0;
	for (int b = 0; b < 5; b++) {
		uint64_t t0 = tier_now_ns();
		for (int i = 0; i < 200; i++)
			charge_on(&busy, false, 0, 0);
		v[b] = (double)(tier_now_ns() - t0) / 200;
	}
	for (int i = 1; i < 5; i++)
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	tier_counters_reset(); /* not the application's */
	return v[2];
}

void tier_counters_reset(void)
{
	for (int w = 0; w < 2; w++)
		atomic_store(&n_ops[w], 0), atomic_store(&n_bytes[w], 0), atomic_store(&n_wait[w], 0);
}

void chell_tier_settle_slow(bool write, uint64_t mark, size_t bytes)
{
	uint64_t below = chell_tier_tls_bytes - mark;
	if (below < bytes)
		chell_tier_charge(write, bytes - (size_t)below, below ? 0 : 1);
}

void tier_counters(struct tier_counters *o)
{
	for (int w = 0; w < 2; w++) {
		o->ops[w] = atomic_load(&n_ops[w]);
		o->bytes[w] = atomic_load(&n_bytes[w]);
		o->wait_ns[w] = atomic_load(&n_wait[w]);
	}
}

size_t chell_tier_json_fields(char *buf, size_t len)
{
	if (!chell_tier_active) {
		if (len)
			buf[0] = 0;
		return 0;
	}
	struct tier_counters t;
	tier_counters(&t);
	int n = snprintf(buf, len,
			 ", \"tier_model\": \"%s\", \"tier_reads\": %llu, \"tier_read_bytes\": %llu, "
			 "\"tier_read_wait_ns\": %llu, \"tier_writes\": %llu, \"tier_write_bytes\": %llu, "
			 "\"tier_write_wait_ns\": %llu",
			 model_name, (unsigned long long)t.ops[0], (unsigned long long)t.bytes[0],
			 (unsigned long long)t.wait_ns[0], (unsigned long long)t.ops[1],
			 (unsigned long long)t.bytes[1], (unsigned long long)t.wait_ns[1]);
	return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

int chell_tier_init(const struct chell_config *cfg, char *err, size_t errlen)
{
	const char *name;
	struct chell_tier_figures f;
	if (tier_settings(cfg, &name, &f, err, errlen) < 0)
		return -1;
	if (strcmp(name, "none") == 0)
		return 0;
	const char *dir = chell_config_str(cfg, "tier.state");
	struct tier_dram d;
	int r = tier_calibrate(dir, &d);
	if (r < 0) {
		snprintf(err, errlen, "tier.model %s: cannot measure this machine's DRAM: %s", name,
			 strerror(-r));
		return -1;
	}
	_Atomic uint64_t *b = tier_budget_open(dir, name, err, errlen);
	if (!b)
		return -1;
	dev = f;
	dram = d.f;
	budget = b;
	overhead_ns = measure_overhead();
	snprintf(model_name, sizeof model_name, "%s", name);
	chell_tier_active = true;
	return 0;
}
