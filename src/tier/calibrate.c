/* SPDX-License-Identifier: MIT */
/*
 * This machine's DRAM, as the tier model subtracts it: the charge of a
 * transfer is the modelled device's time minus DRAM's for the same bytes,
 * so DRAM's latency and bandwidth are measured, once per boot, and cached
 * for every later process (tier.state/chell-tier-dram.BOOTID, one line).
 *
 * What is measured, on a 96 MB buffer: a chain of 32 MB, then 64 MB that
 * the copies stream through (twice the last-level cache of the machines
 * this runs on, so the data comes from memory and the chain is evicted
 * before it is followed):
 *   latency    a chain of dependent loads, one cache line in each 4 KB page
 *              in a random order (no prefetcher can guess it): ns per load;
 *              used for reads and writes alike (a store's own latency is
 *              not observable, it retires into the store buffer);
 *   read bw    1 MB copies out of the buffer into a small hot one, the
 *              source walking the buffer: what a read() from the tier does;
 *   write bw   1 MB copies from a small hot buffer into the cold one;
 *   clock_ns   one CLOCK_MONOTONIC read (for the record: each process
 *              measures what a whole charge costs besides its wait,
 *              charge.c, and takes that off each wait).
 * Each figure is the median of many short samples (32 chains of 256 loads,
 * 64 copies), so a preemption on a shared machine does not move it.
 * Some 30-50 ms in all, most of it faulting the buffer in.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "chell/sys.h"
#include "internal.h"

#define CHAIN_BYTES (32u << 20)
#define STREAM_BYTES (64u << 20)
#define BUF_BYTES (CHAIN_BYTES + STREAM_BYTES)
#define COPY_BYTES (1u << 20)
#define PAGE 4096u

static void *raw_mmap(size_t n)
{
	void *p = (void *)CHELL_SC(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				   -1, 0);
	return (uintptr_t)p > (uintptr_t)-4096 ? NULL : p;
}

static void raw_munmap(void *p, size_t n)
{
	CHELL_SC(SYS_munmap, p, n, 0, 0, 0, 0);
}

/* The compiler must not drop or merge the copies being timed. */
static void copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	__asm__ volatile("" : : "r"(dst), "r"(src) : "memory");
}

/* Lay a chain of dependent loads in buf[0, CHAIN_BYTES); returns its head. */
static void **chain(unsigned char *buf)
{
	enum { NPAGES = CHAIN_BYTES / PAGE };
	static uint32_t order[NPAGES];
	for (uint32_t i = 0; i < NPAGES; i++)
		order[i] = i;
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (uint32_t i = NPAGES - 1; i > 0; i--) { /* Fisher-Yates with xorshift */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		uint32_t j = (uint32_t)(x % (i + 1));
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	/* one line per page, at a varying offset in it (no set conflicts) */
	for (uint32_t i = 0; i < NPAGES; i++) {
		uint32_t a = order[i], b = order[(i + 1) % NPAGES];
		void **slot = (void **)(buf + (size_t)a * PAGE + (a % 64) * 64);
		*slot = buf + (size_t)b * PAGE + (b % 64) * 64;
	}
	return (void **)(buf + (size_t)order[0] * PAGE + (order[0] % 64) * 64);
}

/* The median of n samples (sorts them). The machine may be shared: a
 * sample that a preemption or another process's burst lands in is far off,
 * and the median ignores it where a mean would not. */
static double median(double *v, int n)
{
	for (int i = 1; i < n; i++) /* insertion sort: n is small */
		for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define SEGMENTS 32
static double chase_ns(void **p)
{
	enum { HOPS = CHAIN_BYTES / PAGE / SEGMENTS };
	double ns[SEGMENTS];
	for (int s = 0; s < SEGMENTS; s++) {
		uint64_t t0 = tier_now_ns();
		for (uint32_t i = 0; i < HOPS; i++)
			p = (void **)*p;
		ns[s] = (double)(tier_now_ns() - t0) / HOPS;
	}
	__asm__ volatile("" : : "r"(p));
	return median(ns, SEGMENTS);
}

/* Median GB/s of 1 MB copies walking the stream (to: into it). */
static double stream_gbps(unsigned char *s, unsigned char *hot, bool to)
{
	enum { N = STREAM_BYTES / COPY_BYTES };
	double gbps[N];
	for (int i = 0; i < N; i++) {
		unsigned char *cold = s + (size_t)i * COPY_BYTES;
		uint64_t t0 = tier_now_ns();
		if (to)
			copy(cold, hot, COPY_BYTES);
		else
			copy(hot, cold, COPY_BYTES);
		uint64_t t = tier_now_ns() - t0;
		gbps[i] = (double)COPY_BYTES / (double)(t ? t : 1);
	}
	return median(gbps, N);
}

void tier_measure(struct tier_dram *d)
{
	unsigned char *buf = raw_mmap(BUF_BYTES), *hot = raw_mmap(COPY_BYTES);
	memset(d, 0, sizeof *d);
	/* the clock's own cost */
	uint64_t c0 = tier_now_ns(), c1 = c0;
	for (int i = 0; i < 1000; i++)
		c1 = tier_now_ns();
	d->clock_ns = (double)(c1 - c0) / 1000;
	if (!buf || !hot) {
		if (buf)
			raw_munmap(buf, BUF_BYTES);
		if (hot)
			raw_munmap(hot, COPY_BYTES);
		return;
	}
	CHELL_SC(SYS_madvise, buf, BUF_BYTES, MADV_HUGEPAGE, 0, 0, 0); /* fewer faults, fewer TLB misses */
	memset(buf, 1, BUF_BYTES);
	memset(hot, 2, COPY_BYTES);
	void **head = chain(buf);
	unsigned char *s = buf + CHAIN_BYTES;
	/* reads: walk the stream from its start, whose lines the memset wrote
	 * first and the cache has dropped since; each 1 MB evicts older ones */
	d->f.read_gbps = stream_gbps(s, hot, false);
	/* writes: into the stream again, from its start (evicted by the reads
	 * of its second half) */
	d->f.write_gbps = stream_gbps(s, hot, true);
	/* the chain was evicted by the 128 MB the copies moved */
	d->f.read_ns = d->f.write_ns = chase_ns(head);
	raw_munmap(buf, BUF_BYTES);
	raw_munmap(hot, COPY_BYTES);
}

int tier_dram_format(char *buf, size_t len, const struct tier_dram *d)
{
	return snprintf(buf, len, "chell-tier-dram 1 %.3f %.3f %.4f %.4f %.3f\n", d->f.read_ns,
			d->f.write_ns, d->f.read_gbps, d->f.write_gbps, d->clock_ns);
}

/* One field of the cache line: a number as chell_parse_number reads it. */
static const char *field(const char *p, double *out)
{
	char tok[32];
	size_t n = 0;
	while (*p == ' ')
		p++;
	while (*p && *p != ' ' && *p != '\n' && n < sizeof tok - 1)
		tok[n++] = *p++;
	tok[n] = 0;
	return n && chell_parse_number(tok, out) == 0 ? p : NULL;
}

int tier_dram_parse(const char *text, struct tier_dram *d)
{
	static const char magic[] = "chell-tier-dram 1 ";
	if (strncmp(text, magic, sizeof magic - 1) != 0)
		return -1;
	const char *p = text + sizeof magic - 1;
	double *v[5] = {&d->f.read_ns, &d->f.write_ns, &d->f.read_gbps, &d->f.write_gbps, &d->clock_ns};
	for (int i = 0; i < 5; i++)
		if (!(p = field(p, v[i])))
			return -1;
	/* a cache that measured nothing is no cache */
	return d->f.read_gbps > 0 && d->f.write_gbps > 0 ? 0 : -1;
}

int tier_calibrate(const char *dir, struct tier_dram *d)
{
	char boot[40], path[4096], tmp[4200], line[256];
	tier_boot_id(boot);
	snprintf(path, sizeof path, "%s/chell-tier-dram.%s", dir, boot);
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd >= 0) {
		ssize_t n = sys_read(fd, line, sizeof line - 1);
		sys_close(fd);
		if (n > 0) {
			line[n] = 0;
			if (tier_dram_parse(line, d) == 0)
				return 0;
		}
	}
	tier_measure(d);
	if (d->f.read_gbps <= 0)
		return -ENOMEM;
	/* publish whole: write a private file, then rename it over the name
	 * (a racing process measures too and one of the results stays) */
	int n = tier_dram_format(line, sizeof line, d);
	snprintf(tmp, sizeof tmp, "%s.%d", path, (int)sys_getpid());
	fd = sys_open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd >= 0) {
		int w = sys_write_all(fd, line, (size_t)n);
		sys_close(fd);
		if (w < 0 || CHELL_SC(SYS_rename, tmp, path, 0, 0, 0, 0) < 0)
			sys_unlink(tmp);
	}
	return 0;
}
