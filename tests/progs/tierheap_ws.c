/* SPDX-License-Identifier: MIT */
/*
 * tierheap_ws MB [PASSES]: a memory-bound program for the tiered heap's
 * tests and capacity benchmark. Allocates MB MiB in 1 MiB blocks with
 * malloc, fills them with a pattern, then sweeps them PASSES times (reading
 * and updating every word) and prints one checksum, the same wherever the
 * bytes live. Optionally waits for a line on stdin before freeing
 * (TIERHEAP_WS_PAUSE=1), so a test can read its counters.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK (1u << 20)

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: tierheap_ws MB [PASSES]\n");
		return 2;
	}
	size_t mb = strtoul(argv[1], NULL, 10);
	int passes = argc > 2 ? atoi(argv[2]) : 1;
	uint64_t **blk = calloc(mb, sizeof *blk);
	if (!blk)
		return 1;
	for (size_t i = 0; i < mb; i++) {
		blk[i] = malloc(BLOCK);
		if (!blk[i]) {
			fprintf(stderr, "tierheap_ws: malloc failed at %zu MiB\n", i);
			return 1;
		}
		for (size_t w = 0; w < BLOCK / 8; w++)
			blk[i][w] = i * 0x9e3779b97f4a7c15ull + w;
	}
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
