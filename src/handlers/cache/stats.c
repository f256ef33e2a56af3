/* SPDX-License-Identifier: MIT */
/*
 * Per-process counters of the cache handler, as in direct/stats.c: each
 * thread counts in its own block (no atomics on the hit path), blocks are
 * linked so totals can be summed, and at exit the totals go as JSON to
 * stats.file ('%p' = pid). The manager learns of hits per file from the
 * counts sent with CLOSE and BYE (map.c, conn.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"

struct stats_block {
	struct cache_stats s;
	struct stats_block *next;
};

static struct stats_block *blocks;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
__thread struct cache_stats *cache_tls_stats;
static struct cache_stats dummy; /* if allocation fails, count into the void */

struct cache_stats *cache_stats_slow(void)
{
	struct stats_block *b = calloc(1, sizeof(*b));
	if (!b)
		return &dummy;
	pthread_mutex_lock(&blocks_lock);
	b->next = blocks;
	blocks = b;
	pthread_mutex_unlock(&blocks_lock);
	cache_tls_stats = &b->s;
	return &b->s;
}

void cache_stats_sum(struct cache_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&blocks_lock);
	for (struct stats_block *b = blocks; b; b = b->next) {
		const uint64_t *src = (const uint64_t *)&b->s;
		uint64_t *dst = (uint64_t *)out;
		for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
			dst[i] += src[i];
	}
	pthread_mutex_unlock(&blocks_lock);
}

void cache_stats_dump(void)
{
	const char *spec = chell_setting("stats.file");
	if (!spec || !spec[0] || !blocks)
		return;
	char path[4096];
	size_t o = 0;
	for (const char *s = spec; *s && o + 16 < sizeof(path); s++) {
		if (s[0] == '%' && s[1] == 'p') {
			o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", (int)sys_getpid());
			s++;
		} else {
			path[o++] = *s;
		}
	}
	path[o] = 0;
	struct cache_stats t;
	cache_stats_sum(&t);
	char json[1536];
	int n = snprintf(json, sizeof(json),
			 "{\"pid\": %d, \"mode\": \"%s\", \"handler\": \"cache\", \"reads\": %llu, "
			 "\"writes\": %llu, \"read_bytes\": %llu, \"write_bytes\": %llu, "
			 "\"read_hits\": %llu, \"write_hits\": %llu, \"read_misses\": %llu, "
			 "\"write_misses\": %llu, \"kernel_fallbacks\": %llu, \"mmaps\": %llu, "
			 "\"remaps\": %llu, \"syncs\": %llu, \"fsyncs\": %llu, \"extends\": %llu, "
			 "\"bypassed\": %llu, \"overwrites\": %llu}\n",
			 (int)sys_getpid(), chell_mode_stack ? chell_mode_stack->mode : "?",
			 (unsigned long long)t.reads, (unsigned long long)t.writes,
			 (unsigned long long)t.read_bytes, (unsigned long long)t.write_bytes,
			 (unsigned long long)t.read_hits, (unsigned long long)t.write_hits,
			 (unsigned long long)t.read_misses, (unsigned long long)t.write_misses,
			 (unsigned long long)t.kernel_fallbacks, (unsigned long long)t.maps,
			 (unsigned long long)t.remaps, (unsigned long long)t.syncs,
			 (unsigned long long)t.fsyncs, (unsigned long long)t.extends,
			 (unsigned long long)t.bypassed, (unsigned long long)t.overwrites);
	int fd = sys_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		chell_log("cannot write stats.file '%s': %s", path, strerror(-fd));
		return;
	}
	sys_write_all(fd, json, (size_t)n);
	sys_close(fd);
}
