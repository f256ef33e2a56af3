/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_pagetouch KIND PAGES: the cost of touching fresh pages in
 * random order (the paper's figures 9 and 10: page allocation plus page
 * table update), in ns per page. KIND:
 *   anon      anonymous private memory (DRAM, the kernel's own heap pages)
 *   tmpfs     a new file on /dev/shm mapped shared (each touch allocates
 *             a page-cache page: the VFS path)
 *   heap      malloc under the tiered heap (DRAM extents)
 *   slow      npmalloc: the tiered heap's slow-tier pages (under `chell
 *             tier run` already allocated by the launcher, so a touch
 *             only maps the page)
 * Prints ns per page of wall time and of the thread's CPU time (user +
 * system: the page faults run in the thread's context, so on a machine
 * shared with other work the CPU figure is the steadier one).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_pagetouch anon|tmpfs|heap|slow PAGES\n"
	"\n"
	"ns per page to touch PAGES pages of anonymous memory, a tmpfs file mapping,\n"
	"or the tiered heap's DRAM (heap) or slow-tier (slow) pages.\n";

static double clock_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 3) {
		fputs(usage_text, stderr);
		return 2;
	}
	const char *kind = argv[1];
	size_t pages = strtoul(argv[2], NULL, 10), len = pages * 4096;
	char *p = NULL;
	if (strcmp(kind, "anon") == 0) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else if (strcmp(kind, "tmpfs") == 0) {
		int fd = open("/dev/shm", O_TMPFILE | O_RDWR, 0600);
		if (fd < 0 || ftruncate(fd, (off_t)len))
			return 1;
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
	} else if (strcmp(kind, "heap") == 0) {
		p = malloc(len);
	} else if (strcmp(kind, "slow") == 0) {
		void *(*npm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "npmalloc");
		if (!npm) {
			fprintf(stderr, "slow: run under chell tier run\n");
			return 1;
		}
		p = npm(len);
	}
	if (!p || p == MAP_FAILED)
		return 1;
	/* A random permutation of the pages. */
	uint32_t *order = malloc(pages * sizeof *order);
	for (size_t i = 0; i < pages; i++)
		order[i] = (uint32_t)i;
	uint64_t s = 88172645463325252ull;
	for (size_t i = pages - 1; i > 0; i--) {
		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		size_t j = s % (i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	for (size_t i = 0; i < pages; i++)
		p[(size_t)order[i] * 4096] = 1;
	double el = clock_s(CLOCK_MONOTONIC) - t0, cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	printf("{\"kind\": \"%s\", \"pages\": %zu, \"ns_per_page\": %.1f, "
	       "\"cpu_ns_per_page\": %.1f}\n",
	       kind, pages, el * 1e9 / (double)pages, cpu * 1e9 / (double)pages);
	return 0;
}
