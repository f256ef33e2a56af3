/* SPDX-License-Identifier: MIT */
/*
 * WARP's counters at exit (stats.file, `chell stat`): the base's (reads,
 * writes, bytes, fallbacks, mappings, faults, extensions, fsyncs) and
 * WARP's own: nodes and bytes per state at the last checkpoint, state
 * changes, buffer use, write-back, prefetches and prediction accuracy.
 */
#include <stdio.h>

#include "warp.h"

#define KEY(k, f) {k, offsetof(struct mapped_stats, f)}
static const struct mapped_stat_key keys[] = {
	KEY("reads", reads), KEY("writes", writes), KEY("read_bytes", read_bytes),
	KEY("write_bytes", write_bytes), KEY("kernel_fallbacks", kernel_fallbacks),
	KEY("mmaps", mmaps), KEY("faults_caught", faults), KEY("extends", extends),
	KEY("fsyncs", fsyncs), KEY("accesses", accesses), KEY("accurate", accurate),
};

static void more(char *json, size_t *n, size_t cap)
{
	struct warp_counters *c = &warp_ctr;
	uint64_t trans = 0;
	for (int a = 0; a < WARP_NSTATES; a++)
		for (int b = 0; b < WARP_NSTATES; b++)
			trans += atomic_load(&c->transitions[a][b]);
	struct warp_prefetch_counts pc;
	warp_prefetch_counts(&pc);
	uint64_t used = atomic_load(&c->prefetch_used);
	struct {
		const char *k;
		uint64_t v;
	} kv[] = {
		{"nodes_normal", atomic_load(&c->nodes[WARP_NORMAL])},
		{"nodes_mapped", atomic_load(&c->nodes[WARP_MAPPED])},
		{"nodes_buffered", atomic_load(&c->nodes[WARP_BUFFERED])},
		{"bytes_mapped", atomic_load(&c->node_bytes[WARP_MAPPED])},
		{"bytes_buffered", atomic_load(&c->node_bytes[WARP_BUFFERED])},
		{"transitions", trans},
		{"flips", atomic_load(&c->flips)},
		{"checkpoints", atomic_load(&c->checkpoints)},
		{"checkpoint_ns", atomic_load(&c->checkpoint_ns)},
		{"checkpoint_lock_ns", atomic_load(&c->checkpoint_lock_ns)},
		{"decide_ns", atomic_load(&c->decide_ns)},
		{"buffered_writes", atomic_load(&c->buffered_writes)},
		{"buffered_reads", atomic_load(&c->buffered_reads)},
		{"mapped_reads", atomic_load(&c->mapped_reads)},
		{"buffer_bytes_max", atomic_load(&c->buffer_bytes_max)},
		{"writeback_bytes", atomic_load(&c->writeback_bytes)},
		{"writeback_extents", atomic_load(&c->writeback_extents)},
		{"writeback_bg_bytes", atomic_load(&c->writeback_bg_bytes)},
		{"leases", atomic_load(&c->leases)},
		{"light_files", atomic_load(&c->light_files)},
		{"light_promotions", atomic_load(&c->light_promotions)},
		{"prefetch_issued", pc.posted},
		{"prefetch_used", used},
		{"prefetch_wasted", pc.posted > used ? pc.posted - used : 0},
		{"prefetch_dropped", pc.dropped},
	};
	for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && *n < cap; i++)
		*n += (size_t)snprintf(json + *n, cap - *n, ", \"%s\": %llu", kv[i].k, (unsigned long long)kv[i].v);
}

static const struct mapped_stats_spec spec = {
	MAPPED_STATS_WARP, "warp", keys, sizeof(keys) / sizeof(keys[0]), more,
};

void warp_stats_dump(void)
{
	mapped_stats_dump(&spec);
}
