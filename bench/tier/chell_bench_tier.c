/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_tier FILE read|write SIZE MS START_NS: preads or pwrites of
 * SIZE bytes walking FILE, for MS milliseconds from CLOCK_MONOTONIC time
 * START_NS (0: now), counted in 64 windows of MS/64; prints, for each
 * window in order, "NS:PRE": ns per call, and the involuntary context
 * switches the window suffered (a window another process preempted is
 * not the model's: the driver leaves such windows out). Processes given one START_NS run their
 * windows at the same moments, so a bandwidth they share is measured
 * while they all use it. A plain program on the libc file API:
 * scripts/bench_tier.py runs it under `chell run` with and without a tier
 * model and compares.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_tier FILE read|write SIZE MS START_NS\n"
	"\n"
	"preads or pwrites of SIZE bytes walking FILE for MS milliseconds from\n"
	"CLOCK_MONOTONIC time START_NS (0: now), in 64 windows; prints NS:PRE per\n"
	"window (ns per call, involuntary context switches). Run by\n"
	"scripts/bench_tier.py under `chell run` with and without a tier model.\n";

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static long preemptions(void)
{
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_nivcsw;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 6) {
		fputs(usage_text, stderr);
		return 2;
	}
	int write_op = strcmp(argv[2], "write") == 0;
	size_t size = strtoull(argv[3], NULL, 10);
	double window = atof(argv[4]) * 1e6 / 64, start = atof(argv[5]);
	int fd = open(argv[1], O_RDWR);
	off_t fsize = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;
	char *buf = aligned_alloc(4096, size);
	if (fd < 0 || fsize < (off_t)size || !buf || window <= 0) {
		perror("chell_bench_tier");
		return 1;
	}
	memset(buf, 'w', size);
	enum { BATCHES = 64 };
	long pre[BATCHES];
	double per[BATCHES];
	off_t off = 0;
	while (now_ns() < start)
		;
	double t0 = start > 0 ? start : now_ns();
	for (int b = 0; b < BATCHES; b++) {
		double end = t0 + window, t;
		long calls = 0, iv0 = preemptions();
		do {
			calls++;
			ssize_t r = write_op ? pwrite(fd, buf, size, off) : pread(fd, buf, size, off);
			if (r != (ssize_t)size) {
				perror("chell_bench_tier: I/O");
				return 1;
			}
			off += (off_t)size;
			if (off + (off_t)size > fsize)
				off = 0;
		} while ((t = now_ns()) < end);
		per[b] = (t - t0) / (double)calls;
		pre[b] = preemptions() - iv0;
		t0 = t;
	}
	for (int b = 0; b < BATCHES; b++)
		printf("%s%.1f:%ld", b ? " " : "", per[b], pre[b]);
	printf("\n");
	return 0;
}
