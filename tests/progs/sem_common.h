/* SPDX-License-Identifier: MIT */
/*
 * sem_common.h - helpers shared by the sem_* differential test programs.
 *
 * Each sem_* program runs a deterministic scenario and prints a transcript
 * that must be byte-identical whether it runs on the bare kernel or under
 * Chell. The transcript therefore never contains the test directory, pids,
 * timings or addresses: only call texts, return values, errno names, file
 * offsets, sizes and content hashes.
 *
 * Output goes straight to descriptor 1 with write() (no stdio buffer), so
 * lines printed by parents and children around fork()/exec() can neither be
 * duplicated nor lost, and their order is fixed by the scenario's own
 * synchronisation.
 */
#ifndef SEM_COMMON_H
#define SEM_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static const char *sem_dir; /* the test directory (argv[1]) */

__attribute__((format(printf, 1, 2), unused)) static void say(const char *fmt, ...)
{
	char buf[1024];
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof buf)
		n = sizeof buf - 1;
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, p, (size_t)n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		n -= (int)w;
	}
	errno = saved;
}

__attribute__((unused)) static const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

/*
 * T(expr): evaluate a call, print "expr = result" or "expr = -1 ENAME", and
 * return the result. errno is sampled before anything else runs.
 */
__attribute__((unused)) static long sem_t_(const char *txt, long r)
{
	int e = errno;
	if (r < 0)
		say("%s = %ld %s\n", txt, r, ename(e));
	else
		say("%s = %ld\n", txt, r);
	errno = e;
	return r;
}
#define T(expr) (errno = 0, sem_t_(#expr, (long)(expr)))

/* The current offset of fd, printed as "off(name) = N" (or the error). */
#define OFF(fd) sem_t_("off(" #fd ")", (long)lseek((fd), 0, SEEK_CUR))

/* F_GETFL with the bits a program can observe and set, in a readable form. */
__attribute__((unused)) static void sem_fl_(const char *name, int fd)
{
	errno = 0;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) {
		say("getfl(%s) = -1 %s\n", name, ename(errno));
		return;
	}
	const char *acc = (fl & O_ACCMODE) == O_RDONLY ? "RDONLY"
			  : (fl & O_ACCMODE) == O_WRONLY ? "WRONLY"
			  : (fl & O_ACCMODE) == O_RDWR	 ? "RDWR"
							 : "ACC?";
	say("getfl(%s) = %s%s%s%s raw=%#o\n", name, acc, fl & O_APPEND ? "|APPEND" : "",
	    fl & O_NONBLOCK ? "|NONBLOCK" : "", fl & O_DIRECT ? "|DIRECT" : "", fl);
}
#define FL(fd) sem_fl_(#fd, (fd))

/* An absolute path in the test directory; eight rotating buffers per thread
 * (shared buffers let one thread's path change under another's open()). */
__attribute__((unused)) static const char *P(const char *name)
{
	static __thread char bufs[8][4096];
	static __thread unsigned next;
	char *b = bufs[next++ % 8];
	snprintf(b, sizeof bufs[0], "%s/%s", sem_dir, name);
	return b;
}

/* FNV-1a, 64 bit: a content fingerprint for transcripts. */
__attribute__((unused)) static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}
#define FNV_INIT 0xcbf29ce484222325ULL

/*
 * Print the size and content hash of the file at path (shown as name), read
 * through a fresh descriptor (so under Chell the read goes through Chell too).
 */
__attribute__((unused)) static void sem_content_at(const char *name, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		say("content(%s) = -1 %s\n", name, ename(errno));
		return;
	}
	char buf[65536];
	uint64_t h = FNV_INIT;
	long long total = 0;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			say("content(%s) read = -1 %s\n", name, ename(errno));
			break;
		}
		if (n == 0)
			break;
		h = fnv1a(h, buf, (size_t)n);
		total += n;
	}
	close(fd);
	say("content(%s) = %lld bytes fnv=%016llx\n", name, total, (unsigned long long)h);
}

/* The same for a file of the test directory. */
__attribute__((unused)) static void sem_content(const char *name)
{
	sem_content_at(name, P(name));
}

/* Print a buffer returned by read(), escaping what is not printable. */
__attribute__((unused)) static void sem_data(const char *what, const void *p, long n)
{
	char out[512];
	size_t o = 0;
	const unsigned char *c = p;
	for (long i = 0; i < n && o + 5 < sizeof out; i++) {
		if (c[i] >= 0x20 && c[i] < 0x7f && c[i] != '\\')
			out[o++] = (char)c[i];
		else
			o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c[i]);
	}
	out[o] = 0;
	say("  %s data \"%s\"\n", what, out);
}

/* Print st_size (and the file type) as seen by fstat. */
__attribute__((unused)) static void sem_fsize(const char *what, int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		say("fstat(%s) = -1 %s\n", what, ename(errno));
	else
		say("fstat(%s) size=%lld type=%s\n", what, (long long)st.st_size,
		    S_ISREG(st.st_mode) ? "reg" : S_ISDIR(st.st_mode) ? "dir" : "other");
}

__attribute__((unused)) static void sem_init(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		/* a differential transcript: tests/system/test_semantics.py runs it
		 * plainly and under each mode and compares the outputs */
		fprintf(argc < 2 ? stderr : stdout,
			"usage: %s DIR\n\nRuns its calls in DIR and prints their transcript (the same on the\n"
			"bare kernel and under every Chell mode).\n",
			argv[0]);
		exit(argc < 2 ? 2 : 0);
	}
	sem_dir = argv[1];
}

#endif
