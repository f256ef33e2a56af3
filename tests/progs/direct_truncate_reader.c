/* SPDX-License-Identifier: MIT */
/*
 * direct_truncate_reader: reads a file with plain read()/pread() while
 * another process (started by tests/system/test_direct.py, without Chell)
 * truncates and regrows it. Under `chell run --mode direct` the reads are
 * copies from a shared mapping, so a page truncated away raises SIGBUS in
 * the middle of a copy; Chell must turn that into exactly what the kernel's
 * read() returns (fewer bytes, 0 at end of file), never a crash.
 *
 * The file's content is a pattern known to every party: byte o is pat(o),
 * never 0, so a regrown range (zeros until rewritten) is told apart from
 * data, and bytes from the wrong offset are caught.
 *
 *   direct_truncate_reader fill FILE SIZE
 *       write the pattern (run plainly: the truncator's pristine copy)
 *   direct_truncate_reader loop FILE SECONDS MAXSIZE SEED
 *       random read()/pread() for SECONDS while the file changes under it;
 *       every byte read must be pat(offset) or 0, no read may end beyond
 *       MAXSIZE, no call may fail. Prints a summary line.
 *   direct_truncate_reader steps FILE
 *       deterministic: the test truncates/regrows FILE from outside between
 *       steps; each step waits for a line on stdin, prints what the reads
 *       returned (compared by the test with a plain run).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: direct_truncate_reader: reads a file with plain read()/pread() while\n"
	"another process (started by tests/system/test_direct.py, without Chell)\n"
	"truncates and regrows it. Under `chell run --mode direct` the reads are\n"
	"copies from a shared mapping, so a page truncated away raises SIGBUS in\n"
	"the middle of a copy; Chell must turn that into exactly what the kernel's\n"
	"read() returns (fewer bytes, 0 at end of file), never a crash.\n"
	"(a test program of Chell's suite; details: tests/progs/direct_truncate_reader.c)\n";

static unsigned char pat(uint64_t o)
{
	uint64_t x = o * 0x9e3779b97f4a7c15ull;
	return (unsigned char)(1 + ((x >> 32) ^ (o >> 12)) % 255);
}

static int do_fill(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	static unsigned char buf[1 << 16];
	for (uint64_t off = 0; off < size;) {
		size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pat(off + i);
		ssize_t w = pwrite(fd, buf, n, (off_t)off);
		if (w <= 0) {
			perror("pwrite");
			return 2;
		}
		off += (uint64_t)w;
	}
	return close(fd) ? 2 : 0;
}

static uint64_t rng_state;
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Every byte must be the pattern at its offset or a zero (a regrown range). */
static int check(const unsigned char *b, size_t n, uint64_t off, uint64_t *zeros)
{
	for (size_t i = 0; i < n; i++) {
		if (b[i] == 0) {
			(*zeros)++;
		} else if (b[i] != pat(off + i)) {
			printf("BAD byte at offset %llu: 0x%02x, pattern 0x%02x\n",
			       (unsigned long long)(off + i), b[i], pat(off + i));
			return -1;
		}
	}
	return 0;
}

static int do_loop(const char *path, double seconds, uint64_t maxsize, uint64_t seed)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	rng_state = seed * 2654435761u + 1;
	static unsigned char buf[1 << 20]; /* static: no leak report under LSan */
	size_t cap = sizeof(buf);
	uint64_t calls = 0, bytes = 0, zeros = 0, shorts = 0, eofs = 0;
	double end = now() + seconds;
	while (now() < end) {
		size_t want = 1 + (size_t)(rnd() % (rnd() % 4 ? 65536 : cap));
		ssize_t r;
		uint64_t off;
		if (rnd() % 2) {
			off_t cur = lseek(fd, 0, SEEK_CUR);
			if (cur < 0) {
				printf("BAD lseek: %s\n", strerror(errno));
				return 1;
			}
			off = (uint64_t)cur;
			r = read(fd, buf, want);
			if (r == 0) {
				eofs++;
				/* start again from a random place */
				if (lseek(fd, (off_t)(rnd() % maxsize), SEEK_SET) < 0) {
					printf("BAD lseek: %s\n", strerror(errno));
					return 1;
				}
			}
		} else {
			off = rnd() % (maxsize + 4096);
			r = pread(fd, buf, want, (off_t)off);
			if (r == 0)
				eofs++;
		}
		calls++;
		if (r < 0) {
			printf("BAD read at %llu len %zu: %s\n", (unsigned long long)off, want, strerror(errno));
			return 1;
		}
		if ((size_t)r > want || (r > 0 && off + (uint64_t)r > maxsize)) {
			printf("BAD read at %llu len %zu returned %zd: beyond any size the file had\n",
			       (unsigned long long)off, want, r);
			return 1;
		}
		if ((size_t)r < want && r > 0)
			shorts++;
		if (check(buf, (size_t)r, off, &zeros))
			return 1;
		bytes += (uint64_t)r;
	}
	printf("reader: calls=%llu bytes=%llu zeros=%llu short=%llu eof=%llu\n",
	       (unsigned long long)calls, (unsigned long long)bytes, (unsigned long long)zeros,
	       (unsigned long long)shorts, (unsigned long long)eofs);
	return 0;
}

/* What a read returned, as a line: result, then a content check. */
static void show(const char *what, ssize_t r, const unsigned char *b, uint64_t off)
{
	if (r < 0) {
		printf("%s = -1 %s\n", what, strerror(errno));
		return;
	}
	size_t pattern = 0, zero = 0, other = 0;
	for (ssize_t i = 0; i < r; i++) {
		if (b[i] == pat(off + (uint64_t)i))
			pattern++;
		else if (b[i] == 0)
			zero++;
		else
			other++;
	}
	printf("%s = %zd (pattern %zu, zero %zu, other %zu)\n", what, r, pattern, zero, other);
}

static int wait_line(void)
{
	char line[64];
	fflush(stdout);
	return fgets(line, sizeof(line), stdin) ? 0 : -1;
}

static int do_steps(const char *path)
{
	static unsigned char b[1 << 16];
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		perror("open");
		return 2;
	}
	ssize_t r;
	/* 1. map the first chunk: one byte through read() */
	r = read(fd, b, 1);
	show("read(1)", r, b, 0);
	r = pread(fd, b, 4096, (3 << 20) + 5); /* a second chunk, mapped too */
	show("pread(4096, 3M+5)", r, b, (3 << 20) + 5);
	printf("step 1 done\n");
	/* 2. the test truncates the file to 0 (plain `truncate -s 0`) */
	if (wait_line())
		return 2;
	r = read(fd, b, sizeof(b));
	show("read(64K) after truncate to 0", r, b, 1);
	r = pread(fd, b, 100, 10);
	show("pread(100, 10)", r, b, 10);
	r = pread(fd, b, 4096, (3 << 20) + 5);
	show("pread(4096, 3M+5)", r, b, (3 << 20) + 5);
	printf("lseek(0, SEEK_END) = %lld\n", (long long)lseek(fd, 0, SEEK_END));
	printf("step 2 done\n");
	/* 3. the test regrows it to 4 MiB with truncate (zeros) */
	if (wait_line())
		return 2;
	r = pread(fd, b, 8192, 4000);
	show("pread(8192, 4000) after regrow", r, b, 4000);
	r = pread(fd, b, sizeof(b), (4 << 20) - 100);
	show("pread(64K, 4M-100)", r, b, (4 << 20) - 100);
	printf("step 3 done\n");
	/* 4. the test writes the pattern back over the first 3 MiB, then
	 * truncates to 1 MiB + 10: a size inside the mapped chunk */
	if (wait_line())
		return 2;
	lseek(fd, 1000, SEEK_SET);
	r = read(fd, b, sizeof(b));
	show("read(64K) at 1000", r, b, 1000);
	r = pread(fd, b, sizeof(b), (1 << 20) - 100);
	show("pread(64K, 1M-100)", r, b, (1 << 20) - 100);
	r = pread(fd, b, sizeof(b), (2 << 20) + 1);
	show("pread(64K, 2M+1)", r, b, (2 << 20) + 1);
	lseek(fd, (1 << 20) + 5, SEEK_SET);
	r = read(fd, b, sizeof(b));
	show("read(64K) at 1M+5", r, b, (1 << 20) + 5);
	r = read(fd, b, sizeof(b));
	show("read(64K) at EOF", r, b, (1 << 20) + 10);
	printf("step 4 done\n");
	return close(fd) ? 2 : 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "fill"))
		return do_fill(argv[2], strtoull(argv[3], NULL, 0));
	if (argc == 6 && !strcmp(argv[1], "loop"))
		return do_loop(argv[2], atof(argv[3]), strtoull(argv[4], NULL, 0),
			       strtoull(argv[5], NULL, 0));
	if (argc == 3 && !strcmp(argv[1], "steps"))
		return do_steps(argv[2]);
	fprintf(stderr, "usage: direct_truncate_reader fill FILE SIZE | loop FILE SECONDS MAXSIZE SEED"
			" | steps FILE\n");
	return 2;
}
