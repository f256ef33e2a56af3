/* SPDX-License-Identifier: MIT */
/*
 * Per-process counters of the direct handler. Each thread counts in its own
 * block (no atomic instructions on the data path); blocks are linked so the
 * totals can be summed, and a thread's counts survive its exit. At process
 * exit the totals are written as JSON to stats.file ('%p' = pid), which
 * `chell stat FILE` prints.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "direct.h"

struct stats_block {
	struct direct_stats s;
	struct stats_block *next;
};

static struct stats_block *blocks;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
__thread struct direct_stats *direct_tls_stats;
static struct direct_stats dummy; /* if allocation fails, count into the void */

struct direct_stats *direct_stats_slow(void)
{
	struct stats_block *b = calloc(1, sizeof(*b));
	if (!b)
		return &dummy;
	pthread_mutex_lock(&blocks_lock);
	b->next = blocks;
	blocks = b;
	pthread_mutex_unlock(&blocks_lock);
	direct_tls_stats = &b->s;
	return &b->s;
}

void direct_stats_sum(struct direct_stats *out)
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

void direct_stats_dump(void)
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
	struct direct_stats t;
	direct_stats_sum(&t);
	char json[1024];
	int n = snprintf(json, sizeof(json),
			 "{\"pid\": %d, \"mode\": \"%s\", \"reads\": %llu, \"writes\": %llu, "
			 "\"read_bytes\": %llu, \"write_bytes\": %llu, \"kernel_fallbacks\": %llu, "
			 "\"mmaps\": %llu, \"faults_caught\": %llu, \"extends\": %llu, "
			 "\"fsyncs\": %llu, \"zero_copy\": %llu}\n",
			 (int)sys_getpid(), chell_mode_stack ? chell_mode_stack->mode : "?",
			 (unsigned long long)t.reads, (unsigned long long)t.writes,
			 (unsigned long long)t.read_bytes, (unsigned long long)t.write_bytes,
			 (unsigned long long)t.kernel_fallbacks, (unsigned long long)t.mmaps,
			 (unsigned long long)t.faults, (unsigned long long)t.extends,
			 (unsigned long long)t.fsyncs, (unsigned long long)t.zero_copy);
	int fd = sys_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		chell_log("cannot write stats.file '%s': %s", path, strerror(-fd));
		return;
	}
	sys_write_all(fd, json, (size_t)n);
	sys_close(fd);
}
