/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_openclose DIR [FILES [ROUNDS]] - the per-open cost: FILES
 * small files (16 KB) in DIR, then ROUNDS passes of open(O_RDONLY) + one
 * 4 KB read + close over all of them, as fileserver and varmail do. Prints
 * the mean ns per open+read+close (docs/PERFORMANCE.md, "WARP: per-open
 * cost"); run it plainly and under `chell run --mode M --path DIR`.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_openclose DIR [FILES [ROUNDS]] - the per-open cost: FILES\n"
	"small files (16 KB) in DIR, then ROUNDS passes of open(O_RDONLY) + one\n"
	"4 KB read + close over all of them, as fileserver and varmail do. Prints\n"
	"the mean ns per open+read+close (docs/PERFORMANCE.md, \"WARP: per-open\n"
	"cost\"); run it plainly and under `chell run --mode M --path DIR`.\n"
	"(details: bench/suite/chell_bench_openclose.c)\n";

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR [FILES [ROUNDS]]\n", argv[0]);
		return 2;
	}
	int nf = argc > 2 ? atoi(argv[2]) : 50, rounds = argc > 3 ? atoi(argv[3]) : 200;
	char path[4096], buf[4096];
	memset(buf, 'x', sizeof buf);
	for (int i = 0; i < nf; i++) {
		snprintf(path, sizeof path, "%s/oc%d", argv[1], i);
		int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0) {
			perror(path);
			return 1;
		}
		for (int k = 0; k < 4; k++)
			if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
				perror("write");
				return 1;
			}
		close(fd);
	}
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < nf; i++) {
			snprintf(path, sizeof path, "%s/oc%d", argv[1], i);
			int fd = open(path, O_RDONLY);
			if (fd < 0 || read(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
				perror(path);
				return 1;
			}
			close(fd);
		}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / ((double)rounds * nf);
	printf("{\"files\": %d, \"rounds\": %d, \"ns_per_open_read_close\": %.0f}\n", nf, rounds, ns);
	for (int i = 0; i < nf; i++) {
		snprintf(path, sizeof path, "%s/oc%d", argv[1], i);
		unlink(path);
	}
	return 0;
}
