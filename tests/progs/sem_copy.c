/* SPDX-License-Identifier: MIT */
/*
 * sem_copy DIR - in-kernel copies: copy_file_range, sendfile, splice.
 *
 * These calls move data inside the kernel, so a library that serves files in
 * user space must emulate them when one end is its file, and then give the
 * kernel's answer for every argument: the error and its order of checks
 * (bad descriptors, bad offset pointers, access modes, O_APPEND, file types,
 * overlapping ranges of one file, offsets near the maximum file size) and the
 * offsets afterwards (a NULL pointer uses and advances the descriptor's own
 * offset, a pointer is updated instead and the descriptor's offset stays).
 *
 * Every case runs with both ends handled and with one end outside Chell:
 * files named "h*" are opened by their path in DIR (routed), files named
 * "u*" through /proc/self/fd/DIRFD/NAME, which Chell never routes, so the
 * same scenario covers handled->unhandled, unhandled->handled and both. A
 * file is only ever accessed one way, so no mode sees it from both sides.
 */
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>

#include "sem_common.h"

static int dirfd_;

/* The name of a file in DIR as this scenario opens it: "h*" by its path,
 * "u*" through /proc (never routed). */
static const char *N(const char *name)
{
	static char bufs[4][4096];
	static unsigned next;
	if (name[0] == 'h')
		return P(name);
	char *b = bufs[next++ % 4];
	snprintf(b, sizeof bufs[0], "/proc/self/fd/%d/%s", dirfd_, name);
	return b;
}

static int op(const char *name, int flags)
{
	return open(N(name), flags | O_CLOEXEC, 0644);
}

/* Size and content hash, read through a fresh descriptor of the same kind. */
static void content(const char *name)
{
	sem_content_at(name, N(name));
}

/* A file of n bytes of a position-dependent pattern. */
static void make(const char *name, size_t n, int seed)
{
	int fd = op(name, O_RDWR | O_CREAT | O_TRUNC);
	char buf[4096];
	for (size_t o = 0; o < n;) {
		size_t k = n - o < sizeof buf ? n - o : sizeof buf;
		for (size_t i = 0; i < k; i++)
			buf[i] = (char)('A' + (o + i + (size_t)seed) % 23);
		if (write(fd, buf, k) != (ssize_t)k)
			say("make(%s): write failed %s\n", name, ename(errno));
		o += k;
	}
	close(fd);
}

/* Read what a pipe holds (it must hold less than 64 KB). */
static void drain(const char *what, int rfd)
{
	char buf[65536];
	int fl = fcntl(rfd, F_GETFL);
	fcntl(rfd, F_SETFL, fl | O_NONBLOCK);
	ssize_t n = read(rfd, buf, sizeof buf);
	fcntl(rfd, F_SETFL, fl);
	if (n < 0) {
		say("  %s: pipe empty (%s)\n", what, ename(errno));
		return;
	}
	say("  %s: pipe held %zd bytes fnv=%016llx\n", what, n,
	    (unsigned long long)fnv1a(FNV_INIT, buf, (size_t)n));
}

/* Offsets of the kernel's answer; "pos" is what the offset pointer holds. */
#define POS(v) say("  pos %s = %lld\n", #v, (long long)(v))

static void offsets_and_data(const char *in, const char *out)
{
	say("## %s -> %s: copy_file_range\n", in, out);
	int a = (int)T(op(in, O_RDONLY));
	int b = (int)T(op(out, O_RDWR | O_CREAT | O_TRUNC));
	off64_t pi, po;
	/* NULL offsets: the descriptors' offsets are used and advanced */
	T(lseek(a, 100, SEEK_SET));
	T(lseek(b, 50, SEEK_SET));
	T(copy_file_range(a, NULL, b, NULL, 300, 0));
	OFF(a);
	OFF(b);
	/* pointers: updated, the descriptors' offsets stay */
	pi = 1000, po = 2000;
	T(copy_file_range(a, &pi, b, &po, 500, 0));
	POS(pi);
	POS(po);
	OFF(a);
	OFF(b);
	/* one of each */
	po = 4000;
	T(copy_file_range(a, NULL, b, &po, 200, 0));
	POS(po);
	OFF(a);
	OFF(b);
	pi = 7000;
	T(copy_file_range(a, &pi, b, NULL, 100, 0));
	POS(pi);
	OFF(a);
	OFF(b);
	/* short at EOF, nothing past it, zero length */
	pi = 9990, po = 6000;
	T(copy_file_range(a, &pi, b, &po, 100, 0));
	POS(pi);
	POS(po);
	T(copy_file_range(a, &pi, b, &po, 100, 0));
	T(copy_file_range(a, &pi, b, &po, 0, 0));
	/* the next read continues where the copy left the offset */
	char buf[8];
	long n = T(read(a, buf, 8));
	sem_data("read(a)", buf, n);
	sem_fsize("b", b);
	T(close(a));
	T(close(b));
	content(out);

	say("## %s -> %s: sendfile\n", in, out);
	a = (int)T(op(in, O_RDONLY));
	b = (int)T(op(out, O_WRONLY | O_CREAT | O_TRUNC));
	off_t o;
	T(lseek(a, 200, SEEK_SET));
	T(lseek(b, 10, SEEK_SET));
	T(sendfile(b, a, NULL, 1000));
	OFF(a);
	OFF(b);
	o = 5000;
	T(sendfile(b, a, &o, 3000));
	POS(o);
	OFF(a);
	OFF(b);
	o = 9000;
	T(sendfile(b, a, &o, 3000)); /* short at EOF */
	POS(o);
	T(sendfile(b, a, &o, 3000));
	T(sendfile(b, a, &o, 0));
	n = T(read(a, buf, 8));
	sem_data("read(a)", buf, n);
	sem_fsize("b", b);
	T(close(a));
	T(close(b));
	content(out);
}

/* The descriptors and pages every error scenario uses: src and dst open in
 * each access mode, the test directory, a pipe, /dev/null, a PROT_NONE page
 * and a page the scenario makes read-only. */
struct fx {
	int a, b, ro, wo, ap, dir, pfd[2], null;
	size_t pg;
	void *none, *rdonly;
};

static void fx_open(struct fx *x, const char *src, const char *dst)
{
	x->a = (int)T(op(src, O_RDONLY));
	x->b = (int)T(op(dst, O_RDWR | O_CREAT | O_TRUNC));
	x->ro = (int)T(op(dst, O_RDONLY));
	x->wo = (int)T(op(src, O_WRONLY));
	x->ap = (int)T(op(dst, O_WRONLY | O_APPEND));
	x->dir = (int)T(open(sem_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	T(pipe2(x->pfd, O_CLOEXEC));
	x->null = (int)T(open("/dev/null", O_RDWR | O_CLOEXEC));
	x->pg = (size_t)sysconf(_SC_PAGESIZE);
	x->none = mmap(NULL, x->pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	x->rdonly = mmap(NULL, x->pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static void fx_unmap(struct fx *x)
{
	munmap(x->none, x->pg);
	munmap(x->rdonly, x->pg);
}

/* Argument checks of copy_file_range between `h` (the end under test) and
 * ordinary files; `src` is a 10000-byte file of the same kind. */
static void cfr_errors(const char *src, const char *dst)
{
	say("## copy_file_range errors, %s -> %s\n", src, dst);
	struct fx x;
	fx_open(&x, src, dst);
	int a = x.a, b = x.b, ro = x.ro, wo = x.wo, ap = x.ap, dir = x.dir, null = x.null;
	int *pfd = x.pfd;
	size_t pg = x.pg;
	off64_t *rdonly = x.rdonly, *bad = x.none;
	off64_t pi = 0, po = 0;

	T(copy_file_range(a, NULL, b, NULL, 10, 1));
	T(copy_file_range(-1, NULL, b, NULL, 10, 0));
	T(copy_file_range(a, NULL, -1, NULL, 10, 0));
	T(copy_file_range(a, NULL, 999, NULL, 10, 0));
	T(copy_file_range(-1, bad, b, NULL, 10, 1)); /* EBADF before EFAULT and flags */
	T(copy_file_range(a, bad, b, NULL, 10, 1));  /* EFAULT before flags */
	T(copy_file_range(a, NULL, b, bad, 10, 0));
	T(copy_file_range(a, (off64_t *)-1, b, NULL, 10, 0));
	T(copy_file_range(a, &pi, b, bad, 10, 0));
	OFF(b);
	/* a read-only offset: the copy happens, the update faults */
	rdonly[0] = 30;
	T(mprotect(rdonly, (size_t)pg, PROT_READ));
	T(copy_file_range(a, rdonly, b, NULL, 10, 0));
	POS(rdonly[0]);
	OFF(a);
	OFF(b);
	T(copy_file_range(a, NULL, b, rdonly, 10, 0));
	OFF(a);
	/* types and access modes */
	T(copy_file_range(dir, NULL, b, NULL, 10, 0));
	T(copy_file_range(a, NULL, dir, NULL, 10, 0));
	T(copy_file_range(dir, NULL, ro, NULL, 10, 0)); /* EISDIR before EBADF */
	T(copy_file_range(a, NULL, ro, NULL, 10, 0));
	T(copy_file_range(wo, NULL, b, NULL, 10, 0));
	T(copy_file_range(a, NULL, ap, NULL, 10, 0));
	T(copy_file_range(a, NULL, pfd[1], NULL, 10, 0));
	T(copy_file_range(pfd[0], NULL, b, NULL, 10, 0));
	T(copy_file_range(a, NULL, null, NULL, 10, 0));
	T(copy_file_range(null, NULL, b, NULL, 10, 0));
	T(copy_file_range(wo, NULL, pfd[1], NULL, 10, 0)); /* EINVAL before EBADF */
	drain("pipe", pfd[0]);
	/* offsets */
	pi = -1, po = 0;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = -100, po = 0;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = 0, po = -1;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = 0, po = -100;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = 1, po = 0;
	T(copy_file_range(a, &pi, b, &po, SIZE_MAX, 0));
	pi = 0, po = 1;
	T(copy_file_range(a, &pi, b, &po, SIZE_MAX, 0));
	pi = 0, po = LLONG_MAX;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = 0, po = LLONG_MAX - 5;
	T(copy_file_range(a, &pi, b, &po, 0, 0));
	pi = 10000, po = LLONG_MAX;
	T(copy_file_range(a, &pi, b, &po, 10, 0)); /* nothing to copy, still EFBIG */
	pi = LLONG_MAX, po = 0;
	T(copy_file_range(a, &pi, b, &po, 10, 0));
	pi = 0, po = 0;
	T(copy_file_range(a, &pi, b, &po, SIZE_MAX, 0)); /* all of it */
	POS(pi);
	POS(po);
	sem_fsize("b", b);
	T(close(ro));
	T(close(wo));
	T(close(ap));
	T(close(dir));
	T(close(pfd[0]));
	T(close(pfd[1]));
	T(close(null));

	say("## copy_file_range within one file (%s)\n", dst);
	pi = 0, po = 100;
	T(copy_file_range(b, &pi, b, &po, 200, 0)); /* overlap */
	pi = 100, po = 0;
	T(copy_file_range(b, &pi, b, &po, 200, 0));
	pi = 0, po = 0;
	T(copy_file_range(b, &pi, b, &po, 10, 0));
	pi = 0, po = 200;
	T(copy_file_range(b, &pi, b, &po, 200, 0)); /* adjacent: fine */
	POS(pi);
	POS(po);
	pi = 9900, po = 9950;
	T(copy_file_range(b, &pi, b, &po, 1000, 0)); /* shortened to EOF first: still overlaps */
	pi = 9950, po = 9900;
	T(copy_file_range(b, &pi, b, &po, 1000, 0)); /* 50 left: no overlap */
	POS(pi);
	POS(po);
	int b2 = (int)T(op(dst, O_RDWR));
	pi = 0, po = 50;
	T(copy_file_range(b, &pi, b2, &po, 100, 0)); /* another description, same file */
	T(lseek(b, 0, SEEK_SET));
	T(lseek(b2, 5000, SEEK_SET));
	T(copy_file_range(b, NULL, b2, NULL, 3000, 0));
	OFF(b);
	OFF(b2);
	T(close(b2));
	T(close(a));
	T(close(b));
	content(dst);
	fx_unmap(&x);
}

static void sendfile_errors(const char *src, const char *dst)
{
	say("## sendfile errors, %s -> %s\n", src, dst);
	struct fx x;
	fx_open(&x, src, dst);
	int a = x.a, b = x.b, ro = x.ro, wo = x.wo, ap = x.ap, dir = x.dir, null = x.null;
	int *pfd = x.pfd;
	size_t pg = x.pg;
	off_t *rdonly = x.rdonly, *bad = x.none;
	off_t o = 0;

	T(sendfile(-1, a, NULL, 10));
	T(sendfile(b, -1, NULL, 10));
	T(sendfile(ro, a, NULL, 10));
	T(sendfile(b, wo, NULL, 10));
	T(sendfile(-1, a, bad, 10)); /* EFAULT first */
	T(sendfile(b, a, bad, 10));
	T(sendfile(b, a, (off_t *)-1, 10));
	OFF(a);
	OFF(b);
	rdonly[0] = 40;
	T(mprotect(rdonly, (size_t)pg, PROT_READ));
	T(sendfile(b, a, rdonly, 10)); /* copied, then the update faults */
	POS(rdonly[0]);
	OFF(b);
	T(sendfile(-1, a, rdonly, 10)); /* the update faults after any error */
	T(sendfile(ap, a, NULL, 10));
	OFF(a);
	T(sendfile(b, dir, NULL, 10));
	T(sendfile(b, dir, NULL, 0)); /* count 0: 0 before the input type is checked */
	T(sendfile(dir, a, NULL, 10));
	T(sendfile(b, pfd[0], NULL, 10));
	o = 0;
	T(sendfile(b, pfd[0], &o, 10));
	T(sendfile(pfd[1], a, NULL, 10));
	OFF(a);
	drain("pipe", pfd[0]);
	o = 9995;
	T(sendfile(pfd[1], a, &o, 10));
	POS(o);
	drain("pipe", pfd[0]);
	T(sendfile(null, a, NULL, 20));
	OFF(a);
	o = -1;
	T(sendfile(b, a, &o, 10));
	o = LLONG_MAX;
	T(sendfile(b, a, &o, 10));
	T(sendfile(b, a, &o, 0));
	o = LLONG_MAX - 100;
	T(sendfile(b, a, &o, 10));
	POS(o);
	o = 0;
	T(sendfile(b, a, &o, SIZE_MAX));
	T(sendfile(b, a, &o, (size_t)SSIZE_MAX + 1));
	T(sendfile(b, a, &o, 1UL << 40)); /* whole file */
	POS(o);
	OFF(b);
	/* within one file (an overlap is allowed, but what it leaves depends
	 * on how the kernel pipes pages, so the ranges here are apart) */
	T(lseek(b, 5000, SEEK_SET));
	o = 0;
	T(sendfile(b, b, &o, 500));
	OFF(b);
	/* order of checks: the input's before the output's */
	o = -1;
	T(sendfile(-1, a, &o, 10));
	T(sendfile(ro, a, &o, 10));
	T(sendfile(ro, wo, &o, 10));
	T(sendfile(-1, pfd[0], &o, 10));
	o = LLONG_MAX - 3;
	T(sendfile(ap, a, &o, 10));
	int path = (int)T(op(src, O_PATH));
	T(sendfile(b, path, NULL, 10));
	T(sendfile(path, a, NULL, 10));
	T(copy_file_range(path, NULL, b, NULL, 10, 0));
	T(splice(path, NULL, pfd[1], NULL, 10, 0));
	T(close(path));
	/* a full pipe: EAGAIN when the call must not block */
	int fill = (int)T(fcntl(pfd[1], F_GETPIPE_SZ));
	char *junk = calloc(1, (size_t)fill);
	T(fcntl(pfd[1], F_SETFL, O_NONBLOCK));
	T(write(pfd[1], junk, (size_t)fill) == fill);
	T(sendfile(pfd[1], a, NULL, 10));
	T(splice(a, NULL, pfd[1], NULL, 10, 0));
	T(fcntl(pfd[1], F_SETFL, 0));
	T(splice(a, NULL, pfd[1], NULL, 10, SPLICE_F_NONBLOCK));
	OFF(a);
	T(read(pfd[0], junk, (size_t)fill) == fill);
	free(junk);
	T(close(ro));
	T(close(wo));
	T(close(ap));
	T(close(dir));
	T(close(null));
	T(close(a));
	T(close(b));
	content(dst);

	say("## sendfile to a pipe without readers\n");
	a = (int)T(op(src, O_RDONLY));
	T(close(pfd[0]));
	signal(SIGPIPE, SIG_IGN);
	T(sendfile(pfd[1], a, NULL, 10));
	T(splice(a, NULL, pfd[1], NULL, 10, 0));
	T(splice(a, NULL, pfd[1], NULL, 0, 0));
	OFF(a);
	signal(SIGPIPE, SIG_DFL);
	T(close(pfd[1]));
	T(close(a));
	fx_unmap(&x);
}

static void splice_cases(const char *src, const char *dst)
{
	say("## splice, %s and %s\n", src, dst);
	int a = (int)T(op(src, O_RDONLY));
	int b = (int)T(op(dst, O_RDWR | O_CREAT | O_TRUNC));
	int ro = (int)T(op(dst, O_RDONLY));
	int ap = (int)T(op(dst, O_WRONLY | O_APPEND));
	int pfd[2];
	T(pipe2(pfd, O_CLOEXEC));
	long pg = sysconf(_SC_PAGESIZE);
	char *none = mmap(NULL, (size_t)pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	loff_t *bad = (loff_t *)none;
	loff_t o;

	/* file -> pipe */
	T(lseek(a, 300, SEEK_SET));
	T(splice(a, NULL, pfd[1], NULL, 100, 0));
	OFF(a);
	drain("pipe", pfd[0]);
	o = 1000;
	T(splice(a, &o, pfd[1], NULL, 200, 0));
	POS(o);
	OFF(a);
	drain("pipe", pfd[0]);
	o = 9950;
	T(splice(a, &o, pfd[1], NULL, 200, 0));
	POS(o);
	T(splice(a, &o, pfd[1], NULL, 200, 0));
	drain("pipe", pfd[0]);
	T(splice(a, NULL, pfd[1], NULL, 0, 0));
	T(splice(a, NULL, pfd[1], NULL, 10, 0x100));
	T(splice(-1, NULL, pfd[1], NULL, 10, 0x100)); /* flags before descriptors */
	T(splice(-1, NULL, pfd[1], NULL, 0, 0));      /* nothing asked: nothing checked */
	T(splice(a, NULL, -1, NULL, 10, 0));
	T(splice(a, &o, b, NULL, 10, 0)); /* no pipe at all */
	T(splice(b, NULL, pfd[0], NULL, 10, 0)); /* the read end as output: EBADF */
	T(splice(a, bad, pfd[1], NULL, 10, 0));
	T(splice(a, NULL, pfd[1], bad, 10, 0)); /* ESPIPE before EFAULT */
	o = -1;
	T(splice(a, &o, pfd[1], NULL, 10, 0));
	T(splice(-1, NULL, pfd[1], NULL, 10, 0));
	T(splice(b, NULL, a, NULL, 10, 0)); /* no pipe: EBADF first (a is read-only) */
	T(splice(a, NULL, b, NULL, 10, 0)); /* no pipe */
	OFF(a);
	drain("pipe", pfd[0]);

	/* pipe -> file */
	T(write(pfd[1], "0123456789abcdefghij", 20));
	T(lseek(b, 30, SEEK_SET));
	T(splice(pfd[0], NULL, b, NULL, 5, 0));
	OFF(b);
	o = 100;
	T(splice(pfd[0], NULL, b, &o, 5, 0));
	POS(o);
	OFF(b);
	T(splice(pfd[0], NULL, ro, NULL, 5, 0));
	T(splice(pfd[0], NULL, ap, NULL, 5, 0));
	T(splice(pfd[0], bad, b, NULL, 5, 0));
	T(splice(pfd[0], NULL, b, bad, 5, 0));
	o = -1;
	T(splice(pfd[0], NULL, b, &o, 5, 0));
	T(splice(pfd[0], NULL, b, NULL, 100, 0)); /* what the pipe holds */
	OFF(b);
	T(splice(pfd[0], NULL, b, NULL, 5, SPLICE_F_NONBLOCK)); /* empty */
	T(close(pfd[1]));
	T(splice(pfd[0], NULL, b, NULL, 5, 0)); /* no writers: end of data */
	sem_fsize("b", b);
	T(close(pfd[0]));
	T(close(a));
	T(close(b));
	T(close(ro));
	T(close(ap));
	content(dst);
	munmap(none, (size_t)pg);
}

/* RLIMIT_FSIZE: copies stop at the limit, EFBIG at or past it, and what a
 * file did not take from a pipe stays in the pipe. The transcript itself may
 * go to a file, which the limit also stops: the results are kept in memory
 * (L) and printed once the limit is lifted. */
static char lim_log[4096];
static size_t lim_len;
static long lim_rec_(const char *txt, long r)
{
	int e = errno;
	int n = r < 0 ? snprintf(lim_log + lim_len, sizeof lim_log - lim_len, "%s = %ld %s\n", txt, r, ename(e))
		      : snprintf(lim_log + lim_len, sizeof lim_log - lim_len, "%s = %ld\n", txt, r);
	if (n > 0 && (size_t)n < sizeof lim_log - lim_len)
		lim_len += (size_t)n;
	errno = e;
	return r;
}
#define L(expr) (errno = 0, lim_rec_(#expr, (long)(expr)))

static void fsize_limit_cases(const char *src, const char *dst)
{
	say("## RLIMIT_FSIZE, %s -> %s\n", src, dst);
	struct rlimit old, lim;
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 1000;
	signal(SIGXFSZ, SIG_IGN);
	int a = (int)T(op(src, O_RDONLY));
	int b = (int)T(op(dst, O_RDWR | O_CREAT | O_TRUNC));
	int pfd[2];
	T(pipe2(pfd, O_CLOEXEC));
	lim_len = 0;
	L(setrlimit(RLIMIT_FSIZE, &lim));
	off64_t pi = 0, po = 990;
	L(copy_file_range(a, &pi, b, &po, 100, 0));
	L(po);
	L(copy_file_range(a, &pi, b, &po, 100, 0));
	po = 5000;
	L(copy_file_range(a, &pi, b, &po, 0, 0));
	off_t o = 0;
	L(lseek(b, 995, SEEK_SET));
	L(sendfile(b, a, &o, 100));
	L(sendfile(b, a, &o, 100));
	L(lseek(b, 0, SEEK_CUR));
	L(write(pfd[1], "0123456789", 10));
	loff_t lo = 996;
	L(splice(pfd[0], NULL, b, &lo, 10, 0));
	L(lo);
	L(splice(pfd[0], NULL, b, &lo, 10, 0));
	T(setrlimit(RLIMIT_FSIZE, &old));
	signal(SIGXFSZ, SIG_DFL);
	say("%s", lim_log);
	drain("pipe", pfd[0]);
	sem_fsize("b", b);
	T(close(pfd[0]));
	T(close(pfd[1]));
	T(close(a));
	T(close(b));
	content(dst);
}

/* Across file systems copy_file_range says EXDEV (an unnamed temporary file
 * on whichever of /dev/shm and /tmp is not DIR's file system). */
static void exdev_case(const char *name)
{
	say("## copy_file_range across file systems, %s\n", name);
	struct stat d, t;
	const char *dirs[] = {"/dev/shm", "/tmp"};
	int other = -1;
	if (stat(sem_dir, &d) < 0)
		return;
	for (int i = 0; i < 2 && other < 0; i++) {
		if (stat(dirs[i], &t) == 0 && t.st_dev != d.st_dev)
			other = open(dirs[i], O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	}
	if (other < 0) {
		say("  no other file system\n");
		return;
	}
	int a = (int)T(op(name, O_RDWR));
	T(write(other, "0123456789", 10));
	off64_t pi = 0, po = 0;
	T(copy_file_range(a, &pi, other, &po, 10, 0));
	T(copy_file_range(other, &pi, a, &po, 10, 0));
	T(copy_file_range(other, &pi, a, &po, 10, 1));
	off_t o = 0;
	T(sendfile(a, other, &o, 10)); /* sendfile may cross */
	T(sendfile(other, a, &o, 10));
	T(close(a));
	close(other);
}

/* Into an empty pipe, a large transfer moves what its free pages hold: one
 * page per pipe slot, the first one short by the offset within its page. */
static void pipe_room_cases(const char *src)
{
	say("## large transfers into a pipe, %s\n", src);
	int a = (int)T(op(src, O_RDONLY));
	int pfd[2];
	T(pipe2(pfd, O_CLOEXEC));
	loff_t o = 100;
	T(splice(a, &o, pfd[1], NULL, 100000, 0));
	POS(o);
	drain("pipe", pfd[0]);
	T(lseek(a, 5, SEEK_SET));
	T(sendfile(pfd[1], a, NULL, 100000));
	OFF(a);
	drain("pipe", pfd[0]);
	T(write(pfd[1], "abc", 3));
	o = 8192;
	T(splice(a, &o, pfd[1], NULL, 100000, 0)); /* one slot is taken */
	drain("pipe", pfd[0]);
	T(close(pfd[0]));
	T(close(pfd[1]));
	T(close(a));
}

static void direct_io(const char *src, const char *dst)
{
	say("## O_DIRECT, %s -> %s\n", src, dst);
	int a = open(N(src), O_RDONLY | O_DIRECT | O_CLOEXEC);
	int b = open(N(dst), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
	if (a < 0 || b < 0) {
		say("  no O_DIRECT on this file system\n");
		if (a >= 0)
			close(a);
		if (b >= 0)
			close(b);
		return;
	}
	off64_t pi = 0, po = 8192;
	T(copy_file_range(a, &pi, b, &po, 8192, 0));
	POS(pi);
	POS(po);
	T(lseek(a, 4096, SEEK_SET));
	T(copy_file_range(a, NULL, b, NULL, 4096, 0));
	OFF(a);
	OFF(b);
	off_t o = 0;
	T(sendfile(b, a, &o, 4096));
	POS(o);
	T(close(a));
	T(close(b));
	content(dst);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	dirfd_ = open(sem_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd_ < 0) {
		perror("open DIR");
		return 1;
	}
	make("hsrc", 10000, 0);
	make("usrc", 10000, 0);
	make("hbig", 65536, 1);
	make("ubig", 65536, 1);

	offsets_and_data("hsrc", "hdst");
	offsets_and_data("hsrc", "udst");
	offsets_and_data("usrc", "hdst2");
	offsets_and_data("usrc", "udst2");

	cfr_errors("hsrc", "hc1");
	cfr_errors("usrc", "hc2");
	cfr_errors("hsrc", "uc3");

	sendfile_errors("hsrc", "hs1");
	sendfile_errors("usrc", "hs2");
	sendfile_errors("hsrc", "us3");

	splice_cases("hsrc", "hp1");
	splice_cases("usrc", "up2");

	fsize_limit_cases("hsrc", "hl1");
	fsize_limit_cases("usrc", "hl2");
	fsize_limit_cases("hsrc", "ul3");

	pipe_room_cases("hbig");
	pipe_room_cases("ubig");

	exdev_case("hsrc");
	exdev_case("usrc");

	direct_io("hbig", "hd1");
	direct_io("ubig", "hd2");
	direct_io("hbig", "ud3");
	say("done\n");
	return 0;
}
