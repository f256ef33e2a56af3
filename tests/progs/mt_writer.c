/* SPDX-License-Identifier: MIT */
/*
 * mt_writer - a multi-threaded file writer used by the system tests.
 *
 * Usage: mt_writer REGIONS_FILE APPEND_FILE [THREADS [CHUNKS [RECORDS]]]
 *
 * Phase 1 (concurrent): THREADS threads each
 *   - pwrite() CHUNKS chunks of CHUNK bytes into their own disjoint region of
 *     REGIONS_FILE through ONE descriptor shared by all threads, so the
 *     positional I/O must not depend on (or disturb) the shared file offset;
 *   - write() RECORDS newline-terminated records of RECSZ bytes to APPEND_FILE,
 *     opened with O_APPEND: even threads through one shared descriptor, odd
 *     threads through a descriptor of their own, so both "one open file
 *     description used by many threads" and "many descriptions appending to
 *     one file" are exercised. Each record must land whole and never overwrite
 *     another one.
 * Phase 2 (concurrent): each thread reads its region back with pread().
 * Phase 3 (single thread): the whole REGIONS_FILE is read sequentially with
 *   read() after an lseek(), and APPEND_FILE is parsed: every (thread, seq)
 *   record must appear exactly once, intact, and each thread's records in the
 *   order it wrote them.
 *
 * Chunks are written in a scrambled order so that a region is not simply
 * filled front to back. The regions content is deterministic; the order of
 * records in APPEND_FILE is not (it depends on scheduling).
 *
 * Prints one summary line on success and exits 0; prints what went wrong on
 * stderr and exits 1 on any mismatch or failed call.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: mt_writer - a multi-threaded file writer used by the system tests.\n"
	"(a test program of Chell's suite; details: tests/progs/mt_writer.c)\n";

#define CHUNK 4096
#define RECSZ 64
#define MAX_THREADS 64

static int nthreads = 8, nchunks = 64, nrecords = 200;
static int regions_fd = -1, shared_append_fd = -1;
static const char *append_path;
static int failed; /* set (atomically) by any thread that saw an error */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	__atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
}

/* The byte at absolute offset `off` of REGIONS_FILE: depends on the owning
 * thread and on the offset, so a misplaced or stale chunk is detected. */
static unsigned char pattern(long off)
{
	long t = off / ((long)nchunks * CHUNK);
	uint32_t x = (uint32_t)off * 2654435761u ^ (uint32_t)(t + 1) * 40503u;
	return (unsigned char)(x >> 13);
}

static void fill(unsigned char *buf, long off, size_t n)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pattern(off + (long)i);
}

/* Writes all of buf with pwrite, retrying short writes as the API allows. */
static int pwrite_all(int fd, const unsigned char *buf, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, buf, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static void format_record(char *rec, int t, int seq)
{
	/* "T03 S000042 " then filler derived from (t, seq), then '\n'. */
	int n = snprintf(rec, RECSZ, "T%02d S%06d ", t, seq);
	for (int i = n; i < RECSZ - 1; i++)
		rec[i] = (char)('a' + (t * 7 + seq * 3 + i) % 26);
	rec[RECSZ - 1] = '\n';
}

static void *worker(void *arg)
{
	int t = (int)(intptr_t)arg;
	long base = (long)t * nchunks * CHUNK;
	unsigned char buf[CHUNK];
	int afd = shared_append_fd;

	if (t % 2 == 1) {
		afd = open(append_path, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (afd < 0) {
			fail("T%d: open %s: %s", t, append_path, strerror(errno));
			return NULL;
		}
	}

	/* Interleave region chunks and append records so the two files are
	 * written concurrently by every thread. 37 is coprime with any power
	 * of two, so i*37 % nchunks visits every chunk when nchunks is one. */
	int rec = 0;
	for (int i = 0; i < nchunks; i++) {
		int c = (int)(((long)i * 37) % nchunks);
		long off = base + (long)c * CHUNK;
		fill(buf, off, CHUNK);
		if (pwrite_all(regions_fd, buf, CHUNK, off) < 0)
			fail("T%d: pwrite at %ld: %s", t, off, strerror(errno));
		int upto = (int)((long)(i + 1) * nrecords / nchunks);
		for (; rec < upto; rec++) {
			char r[RECSZ];
			format_record(r, t, rec);
			ssize_t w = write(afd, r, RECSZ);
			if (w != RECSZ)
				fail("T%d: append record %d: returned %zd (%s)", t, rec, w,
				     w < 0 ? strerror(errno) : "short");
		}
	}
	for (; rec < nrecords; rec++) { /* nchunks == 0: records only */
		char r[RECSZ];
		format_record(r, t, rec);
		if (write(afd, r, RECSZ) != RECSZ)
			fail("T%d: append record %d: %s", t, rec, strerror(errno));
	}
	if (afd != shared_append_fd && close(afd) < 0)
		fail("T%d: close: %s", t, strerror(errno));
	return NULL;
}

static void *verifier(void *arg)
{
	int t = (int)(intptr_t)arg;
	long base = (long)t * nchunks * CHUNK;
	unsigned char want[CHUNK], got[CHUNK];

	for (int c = 0; c < nchunks; c++) {
		long off = base + (long)c * CHUNK;
		ssize_t r = pread(regions_fd, got, CHUNK, off);
		if (r != CHUNK) {
			fail("T%d: pread at %ld returned %zd (%s)", t, off, r,
			     r < 0 ? strerror(errno) : "short");
			continue;
		}
		fill(want, off, CHUNK);
		if (memcmp(want, got, CHUNK) != 0)
			fail("T%d: pread at %ld: content mismatch", t, off);
	}
	return NULL;
}

static int run_threads(void *(*fn)(void *))
{
	pthread_t th[MAX_THREADS];
	for (int t = 0; t < nthreads; t++) {
		int e = pthread_create(&th[t], NULL, fn, (void *)(intptr_t)t);
		if (e) {
			fprintf(stderr, "pthread_create: %s\n", strerror(e));
			return -1;
		}
	}
	for (int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	return 0;
}

/* Sequential read of the whole regions file through the shared descriptor. */
static void verify_regions_sequential(void)
{
	long total = (long)nthreads * nchunks * CHUNK;
	struct stat st;
	if (fstat(regions_fd, &st) < 0) {
		fail("fstat regions: %s", strerror(errno));
		return;
	}
	if (st.st_size != total)
		fail("regions file size %lld, want %ld", (long long)st.st_size, total);
	if (lseek(regions_fd, 0, SEEK_SET) != 0) {
		fail("lseek regions: %s", strerror(errno));
		return;
	}
	static unsigned char buf[3 * CHUNK + 123]; /* odd size: reads straddle chunks */
	unsigned char want[sizeof buf];
	long off = 0;
	for (;;) {
		ssize_t r = read(regions_fd, buf, sizeof buf);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail("read regions at %ld: %s", off, strerror(errno));
			return;
		}
		if (r == 0)
			break;
		fill(want, off, (size_t)r);
		if (memcmp(want, buf, (size_t)r) != 0) {
			fail("read regions at %ld: content mismatch", off);
			return;
		}
		off += r;
	}
	if (off != total)
		fail("read %ld bytes of regions file, want %ld", off, total);
	/* The file offset must be where the reads left it. */
	off_t cur = lseek(regions_fd, 0, SEEK_CUR);
	if (cur != total)
		fail("offset after reading regions: %lld, want %ld", (long long)cur, total);
}

static void verify_appends(void)
{
	long total = (long)nthreads * nrecords * RECSZ;
	int fd = open(append_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fail("open %s for reading: %s", append_path, strerror(errno));
		return;
	}
	char *data = malloc((size_t)total + 1);
	int *next = calloc(MAX_THREADS, sizeof *next);
	if (!data || !next) {
		fail("out of memory");
		goto out;
	}
	long n = 0;
	for (;;) {
		ssize_t r = read(fd, data + n, (size_t)(total + 1 - n));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fail("read %s: %s", append_path, strerror(errno));
			goto out;
		}
		if (r == 0 || n + r > total) {
			n += r;
			break;
		}
		n += r;
	}
	if (n != total) {
		fail("append file has %ld bytes, want %ld", n, total);
		goto out;
	}
	for (long i = 0; i < total; i += RECSZ) {
		int t, seq;
		char want[RECSZ];
		if (sscanf(data + i, "T%2d S%6d ", &t, &seq) != 2 || t < 0 || t >= nthreads) {
			fail("append file: garbled record at offset %ld", i);
			goto out;
		}
		format_record(want, t, seq);
		if (memcmp(want, data + i, RECSZ) != 0) {
			fail("append file: torn record at offset %ld", i);
			goto out;
		}
		/* Each thread writes its records in order, one write() each, so
		 * they must appear in order: a missing, duplicated or reordered
		 * record shows up here. */
		if (seq != next[t]) {
			fail("append file: T%d record %d at offset %ld, want record %d", t, seq, i,
			     next[t]);
			goto out;
		}
		next[t]++;
	}
	for (int t = 0; t < nthreads; t++)
		if (next[t] != nrecords)
			fail("append file: T%d has %d records, want %d", t, next[t], nrecords);
out:
	free(data);
	free(next);
	close(fd);
}

static int parse_arg(const char *s, int lo, int hi, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "mt_writer: bad %s '%s' (%d..%d)\n", what, s, lo, hi);
		exit(2);
	}
	return (int)v;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 3 || argc > 6) {
		fprintf(stderr, "usage: %s REGIONS_FILE APPEND_FILE [THREADS [CHUNKS [RECORDS]]]\n",
			argv[0]);
		return 2;
	}
	append_path = argv[2];
	if (argc > 3)
		nthreads = parse_arg(argv[3], 1, MAX_THREADS, "thread count");
	if (argc > 4)
		nchunks = parse_arg(argv[4], 0, 1 << 16, "chunk count");
	if (nchunks % 37 == 0 && nchunks > 0) { /* the chunk order needs gcd(37, nchunks) == 1 */
		fprintf(stderr, "mt_writer: chunk count must not be a multiple of 37\n");
		return 2;
	}
	if (argc > 5)
		nrecords = parse_arg(argv[5], 0, 1 << 20, "record count");

	regions_fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (regions_fd < 0) {
		fprintf(stderr, "open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	shared_append_fd = open(append_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
				0644);
	if (shared_append_fd < 0) {
		fprintf(stderr, "open %s: %s\n", append_path, strerror(errno));
		return 1;
	}

	if (run_threads(worker) < 0 || run_threads(verifier) < 0)
		return 1;
	verify_regions_sequential();
	if (close(shared_append_fd) < 0)
		fail("close append file: %s", strerror(errno));
	verify_appends();
	if (close(regions_fd) < 0)
		fail("close regions file: %s", strerror(errno));

	if (failed)
		return 1;
	printf("ok threads=%d chunks=%d records=%d\n", nthreads, nchunks, nrecords);
	return 0;
}
