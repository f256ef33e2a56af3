/* SPDX-License-Identifier: MIT */
/*
 * eof_race --threads|--procs DIR [MBYTES] - a reader racing a writer that
 * extends a file must never see a byte that was not written.
 *
 * The writer extends DIR/eof_race.dat with 4 KB pwrites (alternating with
 * write() at the offset) of a pattern derived from each byte's offset and
 * never zero. The reader, on its own descriptor, keeps reading up to the
 * end it can see, two ways: up to fstat's size (pread of every byte below
 * it), and with read() until it returns 0. Every byte it gets must be the
 * pattern of its offset: the kernel publishes a new size only after the
 * bytes below it are in place. With --threads the two are threads of one
 * process; with --procs the reader is a child process (forked, so under
 * Chell it is in the same process tree, sharing its state).
 *
 * This is a race, so not a deterministic transcript (not a sem_* program):
 * it prints one summary line and exits 0, or says where the first wrong
 * byte was and exits 1 (2: usage or a system error).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
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
	"usage: eof_race --threads|--procs DIR [MBYTES] - a reader racing a writer that\n"
	"extends a file must never see a byte that was not written.\n"
	"(a test program of Chell's suite; details: tests/progs/eof_race.c)\n";

#define BLOCK 4096

static char path[4096];
static uint64_t total;
/* shared with a forked reader: set by the writer when it is done */
static _Atomic int *done;

static inline unsigned char pattern(uint64_t off)
{
	return (unsigned char)(1 + (off * 131 + (off >> 12) * 7) % 255);
}

static void die(const char *what)
{
	fprintf(stderr, "eof_race: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void *writer(void *arg)
{
	(void)arg;
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		die("open for writing");
	unsigned char buf[BLOCK];
	for (uint64_t off = 0; off < total; off += BLOCK) {
		for (int i = 0; i < BLOCK; i++)
			buf[i] = pattern(off + (uint64_t)i);
		ssize_t w;
		if ((off / BLOCK) % 2) {
			if (lseek(fd, (off_t)off, SEEK_SET) < 0)
				die("lseek");
			w = write(fd, buf, BLOCK);
		} else {
			w = pwrite(fd, buf, BLOCK, (off_t)off);
		}
		if (w != BLOCK)
			die("write");
	}
	close(fd);
	atomic_store(done, 1);
	return NULL;
}

struct verdict {
	uint64_t checked, passes, bad;
};

/* Check n bytes read at off: 0, or 1 after reporting the first bad byte. */
static int check(const unsigned char *b, size_t n, uint64_t off, const char *how, struct verdict *v)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != pattern(off + i)) {
			size_t j = i;
			while (j < n && b[j] != pattern(off + j))
				j++;
			fprintf(stderr,
				"eof_race: %s: byte %llu is 0x%02x, written 0x%02x (%zu wrong bytes "
				"from there in this read of %zu at %llu)\n",
				how, (unsigned long long)(off + i), b[i], pattern(off + i), j - i, n,
				(unsigned long long)off);
			v->bad++;
			return 1;
		}
	v->checked += n;
	return 0;
}

/* Read until the writer is done and everything was seen: 0 or 1. */
static int reader(void)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die("open for reading");
	static unsigned char buf[1 << 16];
	struct verdict v = {0};
	uint64_t seen = 0;    /* pread pass: every byte below it checked */
	uint64_t seq_off = 0; /* read() pass: the descriptor's offset */
	for (;;) {
		int finished = atomic_load(done);
		v.passes++;
		/* 1. up to fstat's size */
		struct stat st;
		if (fstat(fd, &st) < 0)
			die("fstat");
		while (seen < (uint64_t)st.st_size) {
			size_t want = (uint64_t)st.st_size - seen < sizeof buf
					      ? (size_t)((uint64_t)st.st_size - seen)
					      : sizeof buf;
			ssize_t r = pread(fd, buf, want, (off_t)seen);
			if (r < 0)
				die("pread");
			if (r == 0) {
				fprintf(stderr, "eof_race: pread at %llu below the size %lld returned 0\n",
					(unsigned long long)seen, (long long)st.st_size);
				return 1;
			}
			if (check(buf, (size_t)r, seen, "pread below fstat's size", &v))
				return 1;
			seen += (uint64_t)r;
		}
		/* 2. read() until it says end of file */
		for (;;) {
			ssize_t r = read(fd, buf, sizeof buf);
			if (r < 0)
				die("read");
			if (r == 0)
				break;
			if (check(buf, (size_t)r, seq_off, "read() up to end of file", &v))
				return 1;
			seq_off += (uint64_t)r;
		}
		if (finished && seen >= total && seq_off >= total)
			break;
		if (finished && v.passes > 1000000) {
			fprintf(stderr, "eof_race: the writer is done but only %llu of %llu bytes are readable\n",
				(unsigned long long)(seen < seq_off ? seen : seq_off),
				(unsigned long long)total);
			return 1;
		}
	}
	close(fd);
	printf("eof_race: ok: %llu bytes checked in %llu passes, none unwritten\n",
	       (unsigned long long)v.checked, (unsigned long long)v.passes);
	fflush(stdout); /* a forked reader leaves with _exit */
	return 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 3 || (strcmp(argv[1], "--threads") && strcmp(argv[1], "--procs"))) {
		fprintf(stderr, "usage: %s --threads|--procs DIR [MBYTES]\n", argv[0]);
		return 2;
	}
	total = (argc > 3 ? strtoull(argv[3], NULL, 10) : 16) << 20;
	snprintf(path, sizeof path, "%s/eof_race.dat", argv[2]);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die("create");
	close(fd);
	done = mmap(NULL, sizeof *done, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (done == MAP_FAILED)
		die("mmap");
	if (!strcmp(argv[1], "--threads")) {
		pthread_t t;
		if (pthread_create(&t, NULL, writer, NULL))
			die("pthread_create");
		int r = reader();
		pthread_join(t, NULL);
		return r;
	}
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0)
		_exit(reader());
	writer(NULL);
	int status;
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	if (!WIFEXITED(status)) {
		fprintf(stderr, "eof_race: the reader died (status %#x)\n", status);
		return 1;
	}
	return WEXITSTATUS(status);
}
