/* SPDX-License-Identifier: MIT */
/*
 * Per-process counters of the mapped handlers. Each thread counts in its own
 * block per handler (no atomic instructions on the data path); blocks are
 * linked so the totals can be summed, and a thread's counts survive its
 * exit. At process exit each handler writes its totals as JSON to
 * stats.file ('%p' = pid), which `chell stat FILE` prints; the keys are the
 * handler's (struct mapped_stats_spec).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "tier/internal.h"

struct stats_block {
	struct mapped_stats s;
	unsigned id;
	struct stats_block *next;
};

static struct stats_block *blocks;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
__thread struct mapped_stats *mapped_tls_stats[MAPPED_STATS_HANDLERS];
static struct mapped_stats dummy; /* if allocation fails, count into the void */

struct mapped_stats *mapped_stats_slow(unsigned id)
{
	struct stats_block *b = calloc(1, sizeof(*b));
	if (!b)
		return &dummy;
	b->id = id;
	pthread_mutex_lock(&blocks_lock);
	b->next = blocks;
	blocks = b;
	pthread_mutex_unlock(&blocks_lock);
	mapped_tls_stats[id] = &b->s;
	return &b->s;
}

void mapped_stats_sum(unsigned id, struct mapped_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&blocks_lock);
	for (struct stats_block *b = blocks; b; b = b->next) {
		if (b->id != id)
			continue;
		const uint64_t *src = (const uint64_t *)&b->s;
		uint64_t *dst = (uint64_t *)out;
		for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
			dst[i] += src[i];
	}
	pthread_mutex_unlock(&blocks_lock);
}

void mapped_stats_dump(const struct mapped_stats_spec *spec)
{
	const char *spec_path = chell_setting("stats.file");
	if (!spec_path || !spec_path[0] || !blocks)
		return;
	struct mapped_stats t;
	mapped_stats_sum(spec->id, &t);
	char json[4096];
	size_t n = (size_t)snprintf(json, sizeof(json), "{\"pid\": %d, \"mode\": \"%s\"", (int)sys_getpid(),
				    chell_mode_stack ? chell_mode_stack->mode : "?");
	if (spec->handler)
		n += (size_t)snprintf(json + n, sizeof(json) - n, ", \"handler\": \"%s\"", spec->handler);
	for (unsigned i = 0; i < spec->nkeys && n < sizeof(json); i++)
		n += (size_t)snprintf(json + n, sizeof(json) - n, ", \"%s\": %llu", spec->keys[i].key,
				      (unsigned long long)*(const uint64_t *)((const char *)&t + spec->keys[i].off));
	if (spec->more && n < sizeof(json))
		spec->more(json, &n, sizeof(json));
	if (n + 3 > sizeof(json))
		return; /* cannot happen: the keys are few and fixed */
	/* the tier model's counters beside the handler's (docs/TIER.md) */
	n += chell_tier_json_fields(json + n, sizeof(json) - n - 3);
	n += (size_t)snprintf(json + n, sizeof(json) - n, "}\n");
	chell_stats_write(json, n);
}
