/* SPDX-License-Identifier: MIT */
/*
 * The locating costs of this machine (brain.h struct warp_locate), which
 * the benefit model adds to the tier's latencies: what finding the data
 * costs in each state, as opposed to moving it.
 *
 * Measured once per process, by the first caller (a few hundred
 * microseconds), and cached for the other processes of the same boot in
 * /dev/shm/chell-warp-calib-<boot id> (written to a temporary name and
 * renamed, so a reader sees a whole file or none). A cache file that does
 * not parse, or holds a figure out of range, is measured again.
 *
 * This code runs inside libchell.so, where open/read/mmap are the
 * interposed names: it enters the kernel directly (chell/sys.h).
 *
 * Each figure is the smallest of a few batch averages: the machine is
 * shared, and the minimum is the cost of the operation itself rather than
 * of whatever preempted it.
 */
#include "brain.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "chell/sys.h"

#define CALIB_PAGES 32u
#define CALIB_BATCHES 3
#define CALIB_CACHE_DIR "/dev/shm"
#define CALIB_VERSION "warp-calib 2"

static struct warp_locate calib;
static pthread_once_t calib_once = PTHREAD_ONCE_INIT;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	long r = CHELL_SC(SYS_mmap, addr, len, prot, flags, fd, off);
	return r < 0 && r > -4096 ? MAP_FAILED : (void *)r;
}
static void sys_munmap(void *p, size_t len)
{
	CHELL_SC(SYS_munmap, p, len, 0, 0, 0, 0);
}

/* The boot id (36 characters) into id, or -errno. */
static int boot_id(char id[40])
{
	int fd = sys_open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	ssize_t n = sys_read(fd, id, 39);
	sys_close(fd);
	if (n < 36)
		return -EIO;
	id[36] = '\0';
	for (int i = 0; i < 36; i++)
		if (!(id[i] == '-' || (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return -EIO;
	return 0;
}

/* A figure is plausible: finite, positive, below a second (or 10 TB/s). */
static bool plausible(double v)
{
	return isfinite(v) && v > 0 && v < 1e9;
}

static bool locate_plausible(const struct warp_locate *l)
{
	return plausible(l->syscall_ns) && plausible(l->fault_ns) && plausible(l->tlb_ns) &&
	       plausible(l->lookup_ns) && plausible(l->dram_gbps) && l->dram_gbps < 1e4;
}

static int cache_read(const char *path, struct warp_locate *l)
{
	char buf[256];
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
	if (fd < 0)
		return fd;
	ssize_t n = sys_read(fd, buf, sizeof buf - 1);
	sys_close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	if (strncmp(buf, CALIB_VERSION " ", sizeof CALIB_VERSION) != 0)
		return -EIO;
	if (sscanf(buf + sizeof CALIB_VERSION, "%lf %lf %lf %lf %lf", &l->syscall_ns, &l->fault_ns, &l->tlb_ns,
		   &l->lookup_ns, &l->dram_gbps) != 5 || !locate_plausible(l))
		return -EIO;
	return 0;
}

static void cache_write(const char *path, const struct warp_locate *l)
{
	char tmp[160], buf[256];
	snprintf(tmp, sizeof tmp, "%s.%d", path, (int)sys_getpid());
	int len = snprintf(buf, sizeof buf, CALIB_VERSION " %.3f %.3f %.3f %.3f %.3f\n", l->syscall_ns, l->fault_ns,
			   l->tlb_ns, l->lookup_ns, l->dram_gbps);
	int fd = sys_open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	int rc = sys_write_all(fd, buf, (size_t)len);
	sys_close(fd);
	if (rc < 0 || CHELL_SC(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path, 0, 0) < 0)
		sys_unlink(tmp);
}

/* pread of 1 byte from a tmpfs file: the fixed cost of the kernel path. */
static double measure_syscall(int fd)
{
	char c;
	double best = INFINITY;
	for (int b = 0; b < CALIB_BATCHES; b++) {
		double t0 = now_ns();
		for (int i = 0; i < 32; i++)
			(void)sys_pread(fd, &c, 1, i);
		double per = (now_ns() - t0) / 32;
		if (per < best)
			best = per;
	}
	return best;
}

/* Fresh shared mappings of the file's pages: the first touch of each page
 * (fault, with whatever fault-around the kernel does), then a second touch
 * of each page of the populated mapping (a new page, a TLB lookup, each
 * time). */
static void measure_mapping(int fd, double *fault_ns, double *tlb_ns)
{
	size_t len = (size_t)CALIB_PAGES * 4096;
	double fbest = INFINITY, tbest = INFINITY;
	for (int b = 0; b < 2; b++) {
		volatile uint8_t *p = sys_mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
		if ((void *)p == MAP_FAILED)
			break;
		unsigned sum = 0;
		double t0 = now_ns();
		for (size_t i = 0; i < len; i += 4096)
			sum += p[i];
		double t1 = now_ns();
		for (size_t i = 0; i < len; i += 4096)
			sum += p[i + 64];
		double t2 = now_ns();
		(void)sum;
		sys_munmap((void *)p, len);
		if ((t1 - t0) / CALIB_PAGES < fbest)
			fbest = (t1 - t0) / CALIB_PAGES;
		if ((t2 - t1) / CALIB_PAGES < tbest)
			tbest = (t2 - t1) / CALIB_PAGES;
	}
	*fault_ns = fbest;
	*tlb_ns = tbest;
}

/* What the write buffer does to find a block: index a node's block table
 * and test the block's dirty bit, at pseudo-random blocks. */
static double measure_lookup(void)
{
	static uint8_t *volatile table[512];
	static volatile uint64_t dirty[512 / 64];
	uint8_t dummy;
	for (unsigned i = 0; i < 512; i++)
		table[i] = (i & 1) ? &dummy : NULL;
	double best = INFINITY;
	uint32_t x = 2463534242u;
	for (int b = 0; b < CALIB_BATCHES; b++) {
		unsigned hits = 0;
		double t0 = now_ns();
		for (int i = 0; i < 256; i++) {
			x ^= x << 13, x ^= x >> 17, x ^= x << 5;
			unsigned blk = x & 511;
			hits += table[blk] != NULL && !(dirty[blk / 64] >> (blk % 64) & 1);
		}
		double per = (now_ns() - t0) / 256;
		(void)hits;
		if (per < best)
			best = per;
	}
	return best;
}

/* memcpy of 256 KB: larger than the first-level caches, small enough to
 * keep the calibration within a few hundred microseconds (a copy of a
 * whole node would take milliseconds, with its page faults). On a machine
 * with a large last-level cache this is the bandwidth of a copy into a
 * buffer that was recently touched, which is what a write into a busy
 * write buffer is. */
static double measure_dram(void)
{
	size_t len = 256u << 10;
	uint8_t *a = sys_mmap(NULL, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if ((void *)a == MAP_FAILED)
		return NAN;
	double best = INFINITY;
	for (int b = 0; b < 3; b++) {
		double t0 = now_ns();
		memcpy(a + len, a, len);
		__asm__ volatile("" ::: "memory");
		double dt = now_ns() - t0;
		if (dt < best)
			best = dt;
	}
	sys_munmap(a, 2 * len);
	return (double)len / best; /* bytes per ns = GB/s */
}

/* 0, or -errno if this machine gave no usable figure. */
static int measure(struct warp_locate *l)
{
	int fd = sys_open(CALIB_CACHE_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return fd;
	static const uint8_t pages[CALIB_PAGES * 4096];
	int rc = sys_pwrite(fd, pages, sizeof pages, 0) == (ssize_t)sizeof pages ? 0 : -EIO;
	if (rc == 0) {
		l->syscall_ns = measure_syscall(fd);
		measure_mapping(fd, &l->fault_ns, &l->tlb_ns);
		l->lookup_ns = measure_lookup();
		l->dram_gbps = measure_dram();
		if (!locate_plausible(l))
			rc = -EIO;
	}
	sys_close(fd);
	return rc;
}

static void calibrate_once(void)
{
	char id[40], path[128];
	bool cached = boot_id(id) == 0;
	if (cached) {
		snprintf(path, sizeof path, "%s/chell-warp-calib-%s", CALIB_CACHE_DIR, id);
		if (cache_read(path, &calib) == 0)
			return;
	}
	if (measure(&calib) == 0) {
		if (cached)
			cache_write(path, &calib);
		return;
	}
	/* Nothing measurable (no tmpfs): figures of the order of a current
	 * x86 server, so the model still ranks the states sensibly. */
	calib = (struct warp_locate){.syscall_ns = 250, .fault_ns = 250, .tlb_ns = 5, .lookup_ns = 5, .dram_gbps = 10};
}

const struct warp_locate *warp_calibrate(void)
{
	pthread_once(&calib_once, calibrate_once);
	return &calib;
}
