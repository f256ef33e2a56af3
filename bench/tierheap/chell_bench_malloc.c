/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_malloc SIZE THREADS SECONDS: malloc/free throughput. Each
 * thread allocates a batch of 64 blocks of SIZE bytes, writes one byte of
 * each, frees them, and repeats for SECONDS; prints the total malloc+free
 * pairs per second. Run plainly, with jemalloc preloaded and under `chell
 * tier run` by scripts/bench_tierheap.py.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define BATCH 64

static size_t size;
static double seconds;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
	unsigned long long pairs = 0;
	void *b[BATCH];
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
	*(unsigned long long *)arg = pairs;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: chell_bench_malloc SIZE THREADS SECONDS\n");
		return 2;
	}
	size = strtoul(argv[1], NULL, 10);
	int n = atoi(argv[2]);
	seconds = atof(argv[3]);
	pthread_t t[64];
	unsigned long long pairs[64] = {0}, total = 0;
	double t0 = now();
	for (int i = 0; i < n && i < 64; i++)
		pthread_create(&t[i], NULL, worker, &pairs[i]);
	for (int i = 0; i < n && i < 64; i++) {
		pthread_join(t[i], NULL);
		total += pairs[i];
	}
	double el = now() - t0;
	printf("{\"size\": %zu, \"threads\": %d, \"pairs\": %llu, \"seconds\": %.4f, "
	       "\"pairs_per_s\": %.0f}\n",
	       size, n, total, el, (double)total / el);
	return 0;
}
