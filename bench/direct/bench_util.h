/* SPDX-License-Identifier: MIT */
/*
 * bench_util.h - small helpers shared by the issue-3 (direct mode)
 * benchmark programs: clock, CPU pinning, a cheap PRNG, medians, and a
 * record of which shared object provides a libc symbol (so a run can prove
 * whether its calls went through libchell.so or straight to libc).
 *
 * These programs are ordinary applications: they call the plain libc file
 * API and are run with and without `chell run`. Header-only so every
 * benchmark is one translation unit.
 */
#ifndef CHELL_BENCH_UTIL_H
#define CHELL_BENCH_UTIL_H

#include <dlfcn.h>
#include <limits.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC through the vDSO: no system call, and not interposed. */
static inline uint64_t bu_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a few instructions per number, so the generator stays far
 * below the cost of the operations being timed. */
static inline uint64_t bu_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Uniform index in [0, n) without a division (Lemire's multiply-shift):
 * a 64-bit divide would add ~25 cycles to every random offset. */
static inline uint64_t bu_below(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)bu_rand(s) * n) >> 64);
}

/* Keeps the compiler from dropping a memcpy whose destination is never read
 * again: the mmap arm must really copy, like read() does. */
static inline void bu_clobber(void)
{
	__asm__ volatile("" ::: "memory");
}

static inline void bu_die(const char *what)
{
	fprintf(stderr, "bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static inline void bu_fail(const char *msg)
{
	fprintf(stderr, "bench: %s\n", msg);
	exit(1);
}

/* Pin the calling thread; a negative cpu leaves the affinity alone. */
static inline void bu_pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		bu_die("sched_setaffinity");
}

static inline int bu_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v in place). */
static inline double bu_median(double *v, size_t n)
{
	if (n == 0)
		return 0.0;
	qsort(v, n, sizeof *v, bu_cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Basename of the object that the program's own calls to `sym` bind to:
 * "libchell.so.0" under chell run, "libc.so.6" without it. */
static inline const char *bu_provider(const char *sym)
{
	void *p = dlsym(RTLD_DEFAULT, sym);
	Dl_info di;
	if (!p || !dladdr(p, &di) || !di.dli_fname)
		return "?";
	const char *slash = strrchr(di.dli_fname, '/');
	return slash ? slash + 1 : di.dli_fname;
}

/* Parse a size with an optional k/m/g suffix (powers of 1024). */
static inline unsigned long long bu_parse_size(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		bu_fail("bad size argument");
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (*end)
		bu_fail("bad size suffix");
	return v;
}

/* Parse a comma-separated list of sizes into out[], returns the count. */
static inline int bu_parse_sizes(const char *s, unsigned long long *out, int max)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", s);
	int n = 0;
	for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (n == max)
			bu_fail("too many sizes");
		out[n++] = bu_parse_size(tok);
	}
	return n;
}

/* How many mappings of `path` this process has (/proc/self/maps lines naming
 * it). Without --mmap the program maps nothing itself, so a non-zero count
 * under `chell run` shows the direct handler really mapped the file, rather
 * than falling back to system calls. -1 if the count is unavailable. */
static inline int bu_maps_of(const char *path)
{
	char want[4096];
	if (!realpath(path, want))
		return -1;
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[4096 + 256];
	int n = 0;
	size_t wl = strlen(want);
	while (fgets(line, sizeof line, f)) {
		size_t l = strlen(line);
		while (l && (line[l - 1] == '\n' || line[l - 1] == ' '))
			line[--l] = 0;
		if (l >= wl && !strcmp(line + l - wl, want) && (l == wl || line[l - wl - 1] == ' '))
			n++;
	}
	fclose(f);
	return n;
}

/* Read the whole file once in 1 MB pieces and return the time taken in ns:
 * the warm-up before timing, in every arm. Under the direct handler it maps
 * every chunk of the file (each first touch of a 2 MB chunk costs an mmap and
 * its page population, a one-off cost the steady state must not include).
 * On this VM it matters for the kernel and memcpy arms too: memory not
 * touched for a while is slow on its first touch (the host backs guest
 * memory lazily), and MAP_POPULATE sets up page tables without touching the
 * data. With map non-NULL the pass memcpy's from the mapping instead of
 * calling pread. The driver reports the time itself. */
static inline uint64_t bu_prefault(int fd, const char *map, size_t size)
{
	size_t chunk = 1 << 20;
	char *b = malloc(chunk);
	if (!b)
		bu_fail("out of memory");
	uint64_t t0 = bu_now_ns();
	for (size_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		if (map) {
			memcpy(b, map + off, n);
			__asm__ volatile("" ::: "memory");
		} else if (pread(fd, b, n, (off_t)off) != (ssize_t)n) {
			bu_die("prefault pread");
		}
	}
	uint64_t t = bu_now_ns() - t0;
	free(b);
	return t;
}

#endif
