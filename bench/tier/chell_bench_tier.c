/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_tier FILE read|write SIZE COUNT: COUNT preads or pwrites of
 * SIZE bytes walking FILE (which must be at least 64 MB, or SIZE*COUNT),
 * timed in batches of COUNT/16; prints the median ns per call. A plain
 * program on the libc file API: scripts/bench_tier.py runs it under `chell
 * run` with and without a tier model and compares.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: chell_bench_tier FILE read|write SIZE COUNT\n");
		return 2;
	}
	int write_op = strcmp(argv[2], "write") == 0;
	size_t size = strtoull(argv[3], NULL, 10);
	long count = atol(argv[4]);
	int fd = open(argv[1], O_RDWR);
	off_t fsize = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	char *buf = aligned_alloc(4096, size);
	if (fd < 0 || fsize < (off_t)size || !buf || count < 16) {
		perror("chell_bench_tier");
		return 1;
	}
	memset(buf, 'w', size);
	enum { BATCHES = 16 };
	double per[BATCHES];
	long per_batch = count / BATCHES;
	off_t off = 0;
	for (int b = 0; b < BATCHES; b++) {
		double t0 = now_ns();
		for (long i = 0; i < per_batch; i++) {
			ssize_t r = write_op ? pwrite(fd, buf, size, off) : pread(fd, buf, size, off);
			if (r != (ssize_t)size) {
				perror("chell_bench_tier: I/O");
				return 1;
			}
			off += (off_t)size;
			if (off + (off_t)size > fsize)
				off = 0;
		}
		per[b] = (now_ns() - t0) / (double)per_batch;
	}
	qsort(per, BATCHES, sizeof *per, cmp);
	printf("%.1f\n", (per[BATCHES / 2 - 1] + per[BATCHES / 2]) / 2);
	return 0;
}
