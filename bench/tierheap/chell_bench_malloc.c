/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_malloc SIZE THREADS SECONDS: malloc/free throughput. Each
 * thread allocates a batch of 64 blocks of SIZE bytes, writes one byte of
 * each, frees them, and repeats for SECONDS; prints the total malloc+free
 * pairs per second, and per CPU-second of the threads (CLOCK_THREAD_CPUTIME_ID:
 * on a machine shared with other work, time the threads spent descheduled
 * does not count against the allocator). Run plainly, with jemalloc
 * preloaded and under `chell tier run` by scripts/bench_tierheap.py.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_malloc SIZE THREADS SECONDS\n"
	"\n"
	"malloc/free throughput of THREADS threads allocating SIZE-byte blocks for\n"
	"SECONDS; run plainly (jemalloc or glibc) and under `chell tier run` by\n"
	"scripts/bench_tierheap.py.\n";

#define BATCH 64

static size_t size;
static double seconds;

static double clock_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

struct result {
	unsigned long long pairs;
	double cpu;
};

static void *worker(void *arg)
{
	unsigned long long pairs = 0;
	void *b[BATCH];
	double cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	double end = now() + seconds;
	while (now() < end) {
		for (int r = 0; r < 64; r++) {
			for (int i = 0; i < BATCH; i++) {
				b[i] = malloc(size);
				*(volatile char *)b[i] = (char)i;
			}
			for (int i = 0; i < BATCH; i++)
				free(b[i]);
		}
		pairs += 64 * BATCH;
	}
	struct result *res = arg;
	res->pairs = pairs;
	res->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	return NULL;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 4) {
		fputs(usage_text, stderr);
		return 2;
	}
	size = strtoul(argv[1], NULL, 10);
	int n = atoi(argv[2]);
	seconds = atof(argv[3]);
	pthread_t t[64];
	struct result res[64] = {{0, 0}};
	unsigned long long total = 0;
	double cpu = 0;
	double t0 = now();
	for (int i = 0; i < n && i < 64; i++)
		pthread_create(&t[i], NULL, worker, &res[i]);
	for (int i = 0; i < n && i < 64; i++) {
		pthread_join(t[i], NULL);
		total += res[i].pairs;
		cpu += res[i].cpu;
	}
	double el = now() - t0;
	printf("{\"size\": %zu, \"threads\": %d, \"pairs\": %llu, \"seconds\": %.4f, "
	       "\"pairs_per_s\": %.0f, \"cpu_seconds\": %.4f, \"pairs_per_cpu_s\": %.0f}\n",
	       size, n, total, el, (double)total / el, cpu, cpu > 0 ? (double)total / cpu : 0.0);
	return 0;
}
