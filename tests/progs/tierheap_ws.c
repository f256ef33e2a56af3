/* SPDX-License-Identifier: MIT */
/*
 * tierheap_ws MB [PASSES [THREADS]]: a memory-bound program for the tiered
 * heap's tests and capacity benchmark. Allocates MB MiB in 1 MiB blocks
 * with malloc (THREADS threads at once, default 1, each its share: with
 * several, jemalloc's arenas grow at the same time), fills them with a
 * pattern, then sweeps them PASSES times (reading and updating every word)
 * and prints one checksum, the same wherever the bytes live and whatever
 * THREADS. Optionally waits for a line on stdin before freeing
 * (TIERHEAP_WS_PAUSE=1), so a test can read its counters.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: tierheap_ws MB [PASSES [THREADS]]: a memory-bound program for the tiered\n"
	"heap's tests and capacity benchmark. Allocates MB MiB in 1 MiB blocks\n"
	"with malloc (THREADS threads at once, default 1, each its share: with\n"
	"several, jemalloc's arenas grow at the same time), fills them with a\n"
	"pattern, then sweeps them PASSES times (reading and updating every word)\n"
	"and prints one checksum, the same wherever the bytes live and whatever\n"
	"THREADS. Optionally waits for a line on stdin before freeing\n"
	"(TIERHEAP_WS_PAUSE=1), so a test can read its counters.\n"
	"(a test program of Chell's suite; details: tests/progs/tierheap_ws.c)\n";

#define BLOCK (1u << 20)
#define MAX_THREADS 16

static uint64_t **blk;
static size_t mb;
static unsigned nthreads = 1;

/* Thread t allocates and fills blocks t, t + nthreads, ... */
static void *fill(void *arg)
{
	for (size_t i = (size_t)(uintptr_t)arg; i < mb; i += nthreads) {
		blk[i] = malloc(BLOCK);
		if (!blk[i]) {
			fprintf(stderr, "tierheap_ws: malloc failed at block %zu\n", i);
			return (void *)1;
		}
		for (size_t w = 0; w < BLOCK / 8; w++)
			blk[i][w] = i * 0x9e3779b97f4a7c15ull + w;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 2) {
		fprintf(stderr, "usage: tierheap_ws MB [PASSES]\n");
		return 2;
	}
	mb = strtoul(argv[1], NULL, 10);
	int passes = argc > 2 ? atoi(argv[2]) : 1;
	if (argc > 3)
		nthreads = (unsigned)atoi(argv[3]);
	if (nthreads < 1 || nthreads > MAX_THREADS) {
		fprintf(stderr, "tierheap_ws: THREADS must be 1..%d\n", MAX_THREADS);
		return 2;
	}
	blk = calloc(mb, sizeof *blk);
	if (!blk)
		return 1;
	pthread_t t[MAX_THREADS];
	void *failed = NULL;
	for (unsigned i = 1; i < nthreads; i++)
		pthread_create(&t[i], NULL, fill, (void *)(uintptr_t)i);
	failed = fill((void *)0);
	for (unsigned i = 1; i < nthreads; i++) {
		void *r;
		pthread_join(t[i], &r);
		failed = failed ? failed : r;
	}
	if (failed)
		return 1;
	uint64_t sum = 0;
	for (int p = 0; p < passes; p++)
		for (size_t i = 0; i < mb; i++)
			for (size_t w = 0; w < BLOCK / 8; w += 8) {
				sum += blk[i][w];
				blk[i][w] ^= sum;
			}
	printf("checksum %016llx\n", (unsigned long long)sum);
	fflush(stdout);
	if (getenv("TIERHEAP_WS_PAUSE")) {
		char line[8];
		if (!fgets(line, sizeof line, stdin))
			return 1;
	}
	for (size_t i = 0; i < mb; i++)
		free(blk[i]);
	free(blk);
	return 0;
}
