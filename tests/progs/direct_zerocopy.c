/* SPDX-License-Identifier: MIT */
/*
 * direct_zerocopy: checks the zero-copy API of chell/chell.h
 * (chell_get_read_buf, chell_get_write_buf/chell_commit_write_buf) against
 * what read() and write() would do. Linked against libchell, so it runs
 * with the library loaded even without `chell run` (then no descriptor is
 * served by the direct handler and the API must fall back to copies).
 * Driven by tests/system/test_direct.py; exit 0 = every check passed, 1 =
 * a check failed (the line says which), 2 = usage or setup error.
 *
 *   direct_zerocopy read FILE direct|copy
 *       FILE holds pat(o) at offset o (written by `fill`). Reads it all with
 *       chell_get_read_buf, with counts that cross the 2 MiB chunk
 *       boundaries; checks bytes, lengths, offsets (lseek) and EOF.
 *       `direct`: the buffer must point into a mapping and stop at each
 *       chunk boundary; `copy`: a plain read() was done (full counts).
 *       `odirect`: as `copy`, opened O_DIRECT (a descriptor Chell leaves
 *       on the kernel path).
 *       `warm`: read() it all first (cache mode: then every chunk is a
 *       hit), then as `direct`.
 *   direct_zerocopy lend FILE
 *       (cache mode) two zero-copy reads on a warm file must be consecutive
 *       memory of the chunk; then a child process maps the file MAP_SHARED,
 *       which makes the manager revoke its chunks: the buffers must still
 *       hold the file's bytes (no SIGBUS)
 *   direct_zerocopy readfd N
 *       the same on descriptor 0 (a pipe), which carries pat(0..N-1)
 *   direct_zerocopy fill FILE SIZE
 *   direct_zerocopy write FILE inside|grow
 *       get_write_buf/commit inside a filled file, or at and beyond the
 *       end of a new one; checks file size, bytes (pread) and the offset
 *   direct_zerocopy append FILE ID RECORDS
 *       appends RECORDS fixed-size records "ID seq ...\n" through the API on
 *       an O_APPEND descriptor (run concurrently by several processes)
 */
#include <chell/chell.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: direct_zerocopy: checks the zero-copy API of chell/chell.h\n"
	"(chell_get_read_buf, chell_get_write_buf/chell_commit_write_buf) against\n"
	"what read() and write() would do. Linked against libchell, so it runs\n"
	"with the library loaded even without `chell run` (then no descriptor is\n"
	"served by the direct handler and the API must fall back to copies).\n"
	"Driven by tests/system/test_direct.py; exit 0 = every check passed, 1 =\n"
	"a check failed (the line says which), 2 = usage or setup error.\n"
	"(a test program of Chell's suite; details: tests/progs/direct_zerocopy.c)\n";

#define CHUNK (2u << 20) /* direct.chunk_size default */
#define RECLEN 64

static int failures;

#define CHECK(cond, ...)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			printf("FAIL line %d: ", __LINE__);       \
			printf(__VA_ARGS__);                      \
			printf("\n");                             \
			failures++;                               \
		}                                                 \
	} while (0)

static unsigned char pat(uint64_t o)
{
	uint64_t x = (o + 17) * 0x9e3779b97f4a7c15ull;
	return (unsigned char)(x >> 56);
}

static int fill(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 2;
	static unsigned char b[1 << 16];
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < sizeof(b) ? (size_t)(size - off) : sizeof(b);
		for (size_t i = 0; i < n; i++)
			b[i] = pat(off + i);
		if (write(fd, b, n) != (ssize_t)n)
			return 2;
		off += n;
	}
	return close(fd) ? 2 : 0;
}

static size_t mismatch(const unsigned char *p, size_t n, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pat(off + i))
			return i;
	return n;
}

/* Counts to ask for, in turn: small, page-sized, large, crossing chunks. */
static const size_t counts[] = { 1, 7, 4096, 65536, 1000003, 3u << 20, 12345, CHUNK + 1 };

static int read_all(int fd, uint64_t size, int direct, int is_file)
{
	uint64_t off = 0;
	unsigned k = 0, calls = 0, boundary_hits = 0;
	const void *prev = NULL;
	for (;;) {
		size_t want = counts[k++ % (sizeof(counts) / sizeof(counts[0]))];
		const void *p = NULL;
		ssize_t r = chell_get_read_buf(fd, &p, want);
		calls++;
		if (r < 0) {
			CHECK(0, "chell_get_read_buf(%zu) at %llu: -1 %s", want, (unsigned long long)off,
			      strerror(errno));
			return 1;
		}
		if (r == 0) {
			CHECK(off == size, "EOF at %llu, size %llu", (unsigned long long)off,
			      (unsigned long long)size);
			break;
		}
		CHECK(p != NULL, "no buffer for %zd bytes", r);
		CHECK((size_t)r <= want, "returned %zd > count %zu", r, want);
		uint64_t left = size - off;
		size_t expect = want < left ? want : (size_t)left;
		if (direct) {
			/* never across a chunk boundary; exactly up to it if the count
			 * reaches beyond */
			size_t to_boundary = CHUNK - (size_t)(off % CHUNK);
			if (expect > to_boundary) {
				expect = to_boundary;
				boundary_hits++;
			}
		}
		if (is_file || direct)
			CHECK((size_t)r == expect, "at %llu count %zu: returned %zd, expected %zu",
			      (unsigned long long)off, want, r, expect);
		size_t bad = mismatch(p, (size_t)r, off);
		CHECK(bad == (size_t)r, "bytes differ from the file at offset %llu",
		      (unsigned long long)(off + bad));
		if (direct && prev && off % CHUNK != 0)
			/* within one chunk consecutive buffers are consecutive memory */
			CHECK(p == prev, "buffer at %llu is not where the previous one ended",
			      (unsigned long long)off);
		prev = (const unsigned char *)p + r;
		off += (uint64_t)r;
		if (is_file) {
			off_t cur = lseek(fd, 0, SEEK_CUR);
			CHECK(cur == (off_t)off, "lseek says %lld after %llu bytes", (long long)cur,
			      (unsigned long long)off);
		}
		if (failures)
			return 1;
	}
	/* EOF again: still 0 */
	const void *p = (const void *)1;
	ssize_t r = chell_get_read_buf(fd, &p, 100);
	CHECK(r == 0, "second EOF returned %zd", r);
	if (is_file) {
		/* back to the middle: the offset moves like read() */
		CHECK(lseek(fd, CHUNK - 10, SEEK_SET) == (off_t)(CHUNK - 10), "lseek");
		r = chell_get_read_buf(fd, &p, 100);
		CHECK(r == (direct ? 10 : 100), "100 bytes from 10 before a boundary: %zd", r);
		if (r > 0)
			CHECK(mismatch(p, (size_t)r, CHUNK - 10) == (size_t)r, "bytes before the boundary");
		/* read() continues where the zero-copy read stopped */
		unsigned char b[16];
		ssize_t rr = read(fd, b, sizeof(b));
		CHECK(rr == 16 && mismatch(b, 16, CHUNK - 10 + (uint64_t)r) == 16,
		      "read() after chell_get_read_buf: %zd", rr);
	}
	printf("read: %u calls, %llu bytes, %u boundary stops, %s\n", calls, (unsigned long long)off,
	       boundary_hits, failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}

/* read() all of fd, then back to the start */
static int warm(int fd)
{
	static unsigned char b[1 << 16];
	ssize_t n;
	while ((n = read(fd, b, sizeof(b))) > 0)
		;
	return n < 0 || lseek(fd, 0, SEEK_SET) != 0 ? -1 : 0;
}

static int do_read(const char *path, const char *how)
{
	int direct = !strcmp(how, "direct") || !strcmp(how, "warm");
	int fd = open(path, O_RDONLY | (!strcmp(how, "odirect") ? O_DIRECT : 0));
	if (fd < 0) {
		perror("open");
		return 2;
	}
	struct stat st;
	if (fstat(fd, &st) || (!strcmp(how, "warm") && warm(fd) < 0))
		return 2;
	int r = read_all(fd, (uint64_t)st.st_size, direct, 1);
	close(fd);
	/* a write-only descriptor: EBADF, like read() */
	fd = open(path, O_WRONLY);
	const void *p;
	errno = 0;
	ssize_t w = chell_get_read_buf(fd, &p, 10);
	CHECK(w == -1 && errno == EBADF, "get_read_buf on O_WRONLY: %zd errno %d", w, errno);
	close(fd);
	return r || failures ? 1 : 0;
}

/* One reservation: fill it with the pattern, commit, check size, bytes and
 * offset. Returns the size of the file afterwards. */
static uint64_t write_step(int fd, uint64_t off, size_t len, uint64_t size)
{
	printf("write at %llu, %zu bytes:", (unsigned long long)off, len);
	CHECK(lseek(fd, (off_t)off, SEEK_SET) == (off_t)off, "lseek");
	void *p = NULL;
	ssize_t n = chell_get_write_buf(fd, &p, len);
	if (n <= 0 || !p) {
		CHECK(0, "get_write_buf(%zu) at %llu: %zd %s", len, (unsigned long long)off, n,
		      strerror(errno));
		return size;
	}
	/* may be shorter at a chunk boundary, never longer */
	CHECK((size_t)n <= len, "reserved %zd > %zu", n, len);
	printf(" reserved %zd,", n);
	for (ssize_t i = 0; i < n; i++) /* a crash here: the buffer is not backed by the file */
		((unsigned char *)p)[i] = pat(off + (uint64_t)i);
	ssize_t c = chell_commit_write_buf(fd, p, (size_t)n);
	CHECK(c == n, "commit(%zd) = %zd %s", n, c, strerror(errno));
	uint64_t end = off + (uint64_t)n;
	if (end > size)
		size = end;
	off_t cur = lseek(fd, 0, SEEK_CUR);
	CHECK(cur == (off_t)end, "offset after commit: %lld, want %llu", (long long)cur,
	      (unsigned long long)end);
	struct stat st;
	fstat(fd, &st);
	CHECK((uint64_t)st.st_size == size, "size %lld after commit, want %llu", (long long)st.st_size,
	      (unsigned long long)size);
	static unsigned char check[1 << 16];
	size_t got = (size_t)pread(fd, check, (size_t)n, (off_t)off);
	CHECK(got == (size_t)n && mismatch(check, got, off) == got,
	      "pread of the committed bytes at %llu", (unsigned long long)off);
	printf(" size now %llu\n", (unsigned long long)size);
	return size;
}

/* inside: FILE already holds pat() and is at least 3 MiB long; overwrite
 * parts of it. grow: FILE is new; reservations at and beyond its end. */
static int do_write(const char *path, const char *how)
{
	int grow = !strcmp(how, "grow");
	int fd = open(path, O_RDWR | O_CREAT | (grow ? O_TRUNC : 0), 0644);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	struct stat st;
	fstat(fd, &st);
	uint64_t size = (uint64_t)st.st_size;
	if (grow) {
		/* the empty file, appending at the end, beyond the end (a hole), and
		 * across a chunk boundary */
		size = write_step(fd, 0, 5000, size);
		size = write_step(fd, 5000, 10000, size);
		size = write_step(fd, 20000, 3000, size);
		size = write_step(fd, CHUNK - 100, 4000, size);
		unsigned char z[100];
		CHECK(pread(fd, z, 100, 16000) == 100, "pread in the hole");
		for (int i = 0; i < 100; i++)
			CHECK(z[i] == 0, "hole byte %d is %d", 16000 + i, z[i]);
	} else {
		CHECK(size >= 3u << 20, "the file must be prepared with `fill`");
		size = write_step(fd, 100, 50, size);
		size = write_step(fd, 12345, 60000, size);
		size = write_step(fd, CHUNK - 100, 4000, size); /* stops at the boundary */
		size = write_step(fd, CHUNK, 4000, size);
	}
	/* a commit of a buffer that was not reserved is refused */
	unsigned char other[16];
	errno = 0;
	CHECK(chell_commit_write_buf(fd, other, 10) == -1 && errno == EINVAL,
	      "unreserved commit not refused");
	/* a read-only descriptor: EBADF, when reserving (direct) or at the
	 * commit's write() (the copying fallback) */
	int ro = open(path, O_RDONLY);
	void *p;
	errno = 0;
	ssize_t n = chell_get_write_buf(ro, &p, 10);
	if (n >= 0) {
		errno = 0;
		ssize_t c = chell_commit_write_buf(ro, p, 10);
		CHECK(c == -1 && errno == EBADF, "commit on O_RDONLY: %zd errno %d", c, errno);
	} else {
		CHECK(errno == EBADF, "get_write_buf on O_RDONLY: errno %d", errno);
	}
	close(ro);
	close(fd);
	printf("write: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}

static int do_append(const char *path, const char *id, int records)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	for (int i = 0; i < records; i++) {
		/* "ID        seq      xxxx...x\n": 20 bytes of header, filler, newline */
		char rec[RECLEN + 32];
		snprintf(rec, sizeof(rec), "%-10.10s %8d ", id, i % 100000000);
		memset(rec + 20, 'a' + i % 26, RECLEN - 21);
		rec[RECLEN - 1] = '\n';
		void *p;
		ssize_t n = chell_get_write_buf(fd, &p, RECLEN);
		if (n < RECLEN) {
			/* the reservation stopped at a chunk boundary: a record must
			 * not be split, so commit nothing and write it whole */
			if (n >= 0)
				chell_commit_write_buf(fd, p, 0);
			CHECK(n >= 0, "get_write_buf: %s", strerror(errno));
			CHECK(write(fd, rec, RECLEN) == RECLEN, "write");
			continue;
		}
		memcpy(p, rec, RECLEN);
		ssize_t c = chell_commit_write_buf(fd, p, RECLEN);
		CHECK(c == RECLEN, "commit: %zd %s", c, strerror(errno));
		if (failures)
			break;
	}
	close(fd);
	return failures ? 1 : 0;
}

static int do_lend(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0 || warm(fd) < 0)
		return 2;
	const void *p = NULL, *q = NULL;
	ssize_t r1 = chell_get_read_buf(fd, &p, 4096);
	ssize_t r2 = chell_get_read_buf(fd, &q, 4096);
	CHECK(r1 == 4096 && r2 == 4096, "get_read_buf: %zd %zd", r1, r2);
	CHECK(q == (const unsigned char *)p + 4096, "the two buffers are not consecutive memory");
	if (failures)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		int cfd = open(path, O_RDWR);
		void *m = cfd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ, MAP_SHARED, cfd, 0);
		_exit(m == MAP_FAILED ? 3 : 0);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the child's mmap: status %d", status);
	CHECK(mismatch(p, 8192, 0) == 8192, "the buffers lost the file's bytes");
	unsigned char b[100];
	CHECK(read(fd, b, sizeof(b)) == (ssize_t)sizeof(b) && mismatch(b, sizeof(b), 8192) == sizeof(b),
	      "read() after the revocation");
	printf("lend: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	setvbuf(stdout, NULL, _IONBF, 0); /* no line lost to a crash */
	if (argc == 4 && !strcmp(argv[1], "fill"))
		return fill(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "read"))
		return do_read(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "lend"))
		return do_lend(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "readfd")) {
		int r = read_all(0, strtoull(argv[2], NULL, 0), 0, 0);
		return r ? r : failures ? 1 : 0;
	}
	if (argc == 4 && !strcmp(argv[1], "write"))
		return do_write(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "append"))
		return do_append(argv[2], argv[3], atoi(argv[4]));
	fprintf(stderr, "usage: direct_zerocopy fill FILE SIZE | read FILE direct|copy|odirect|warm |"
			" lend FILE |"
			" readfd N |"
			" write FILE inside|grow | append FILE ID RECORDS\n");
	return 2;
}
