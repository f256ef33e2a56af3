/* SPDX-License-Identifier: MIT */
/*
 * The tiered heap's placement decisions (docs/TIERHEAP.md), kept free of
 * jemalloc and of system calls so the unit tests drive them directly
 * (tests/unit/test_tierheap_policy.c).
 *
 * The decision is taken once per extent: jemalloc asks its extent hooks for
 * memory in chunks (at most TH_GROW_LIMIT bytes unless one allocation needs
 * more), and th_pick says which tier each chunk comes from, in order of
 * preference. Everything inside a chunk (small-object slabs, large
 * allocations) lives where the chunk lives.
 */
#ifndef CHELL_TIERHEAP_POLICY_H
#define CHELL_TIERHEAP_POLICY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum th_policy {
	TH_REVERT,     /* DRAM until the budget, then the slow tier */
	TH_PREFERRED,  /* the slow tier first, DRAM when it is full */
	TH_BIND,       /* the slow tier only */
	TH_INTERLEAVE, /* weighted: w_dram bytes in DRAM for every w_slow in the slow tier */
};

enum th_tier { TH_DRAM = 0, TH_SLOW = 1 };

/* jemalloc's retained-memory growth step on our arenas: the granularity of
 * a placement decision (arena.<i>.retain_grow_limit). */
#define TH_GROW_LIMIT ((size_t)8 << 20)

struct th_policy_cfg {
	enum th_policy policy;
	uint64_t budget;         /* DRAM budget in bytes; 0 = no limit */
	unsigned w_dram, w_slow; /* interleave weights, both >= 1 */
};

/*
 * Where a new extent of `size` bytes goes, given the DRAM and slow-tier
 * bytes our hooks hold now: the tiers to try, first choice first, in
 * order[0..n). Returns n (1 or 2). bind never falls back to DRAM; the others
 * fall back to the other tier when the first cannot give the memory (the
 * slow tier is full, or for revert and interleave, it is the budget that
 * was reached and the slow tier is full: DRAM past the budget rather than
 * a failed malloc, as the kernel's own policies fall back).
 */
int th_pick(const struct th_policy_cfg *c, uint64_t dram_bytes, uint64_t slow_bytes, size_t size,
	    enum th_tier order[2]);

/* Parse a policy name; 0 or -1. */
int th_policy_parse(const char *s, enum th_policy *out);
const char *th_policy_name(enum th_policy p);
/* Parse "D:S" interleave weights (each 1..1000); 0 or -1. */
int th_weights_parse(const char *s, unsigned *w_dram, unsigned *w_slow);

/*
 * The slow tier's space: one reserved range [0, cap) handed out by a
 * lock-free bump pointer (no lock: the hooks run under jemalloc's arena
 * locks and across fork, a lock of ours would order against jemalloc's).
 * Space is never given back to the range: jemalloc retains slow extents
 * and reuses them itself.
 */
struct th_bump {
	_Atomic uint64_t next;
	uint64_t cap;
};
/* Offset of `size` bytes aligned to `align` (a power of two), or UINT64_MAX if full. */
uint64_t th_bump_take(struct th_bump *b, uint64_t size, uint64_t align);

/* Parse a cgroup memory limit (v2 memory.max: "max" or a number; v1
 * memory.limit_in_bytes: a number, >= 2^62 meaning none): bytes, 0 for no
 * limit; 0, or -1 if malformed. */
int th_parse_memory_max(const char *text, uint64_t *out);

#endif
