/* SPDX-License-Identifier: MIT */
/*
 * sem_badptr DIR - bad pointer arguments give EFAULT (or the kernel's other
 * answer), never a signal.
 *
 * Chell reads some arguments before the kernel does: the path of every call
 * it routes (to decide the stack), struct flock of the lock commands, the
 * iovec array of the vector calls, and it fills stat buffers. Each of those
 * must fail exactly where the kernel fails: a pointer into a PROT_NONE page,
 * (void *)-1, a string running into an unreadable page, a path longer than
 * PATH_MAX (ENAMETOOLONG), a read-only page where the kernel writes. The
 * files touched must be unchanged afterwards.
 */
#include <limits.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "sem_common.h"

#define BAD1 ((void *)-1)

/* Built with AddressSanitizer, the program's own calls pass through ASan's
 * interceptors first, and some of those read the argument themselves (and
 * crash on it) before libc, Chell or the kernel see it: skip those calls. */
#ifdef __SANITIZE_ADDRESS__
#define ASAN_BUILD 1
#else
#define ASAN_BUILD 0
#endif

static char *none;     /* a PROT_NONE page */
static char *ronly;    /* a read-only page (zeros) */
static char *edge;     /* a string "f" + no NUL, ending where `none` starts */
static char *longpath; /* PATH_MAX non-NUL bytes, followed by PROT_NONE */

static void setup(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	/* [rw page][PROT_NONE page][ro page][rw x2 + PROT_NONE] */
	char *m = mmap(NULL, (size_t)pg * 7, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	none = m + pg;
	mprotect(none, (size_t)pg, PROT_NONE);
	ronly = m + 2 * pg;
	mprotect(ronly, (size_t)pg, PROT_READ);
	/* the tail of the first page: a path prefix without its NUL */
	edge = none - 8;
	memcpy(edge, "abcdefgh", 8);
	/* 4096 'a' ending exactly at a PROT_NONE page: the kernel reads
	 * PATH_MAX bytes, finds no NUL, and says ENAMETOOLONG */
	char *l = m + 3 * pg;
	mprotect(m + 6 * pg, (size_t)pg, PROT_NONE);
	longpath = m + 6 * pg - PATH_MAX;
	memset(l, 'a', (size_t)(3 * pg));
	longpath[0] = '/';
}

static void paths(void)
{
	struct stat st;
	struct statx stx;
	const char *bad[] = {NULL, NULL, NULL, NULL};
	const char *names[] = {"none", "-1", "edge", "long"};
	bad[0] = none;
	bad[1] = BAD1;
	bad[2] = edge;
	bad[3] = longpath;
	int dfd = (int)T(open(sem_dir, O_RDONLY | O_DIRECTORY));
	for (int i = 0; i < 4; i++) {
		const char *p = bad[i];
		say("# path %s\n", names[i]);
		T(open(p, O_RDONLY));
		T(open(p, O_RDWR | O_CREAT, 0644));
		T(open64(p, O_RDONLY));
		T(openat(AT_FDCWD, p, O_RDONLY));
		T(openat(dfd, p, O_RDWR | O_CREAT, 0644));
		T(openat64(dfd, p, O_RDONLY));
		T(creat(p, 0644));
		T(creat64(p, 0644));
		T(stat(p, &st));
		T(lstat(p, &st));
		T(fstatat(dfd, p, &st, 0));
		T(fstatat(AT_FDCWD, p, &st, AT_SYMLINK_NOFOLLOW));
		T(fstatat(dfd, p, &st, AT_EMPTY_PATH));
		T(statx(dfd, p, 0, STATX_BASIC_STATS, &stx));
		T(statx(AT_FDCWD, p, AT_EMPTY_PATH, STATX_BASIC_STATS, &stx));
		T(truncate(p, 0));
		T(truncate64(p, 0));
		T(access(p, F_OK));
		T(unlink(p));
		T(rename(p, P("x")));
		T(rename(P("x"), p));
		char *argv0[] = {"x", NULL};
		T(execve(p, argv0, environ));
		T(execv(p, argv0));
		if (ASAN_BUILD)
			continue;
		FILE *fp = fopen(p, "r");
		say("fopen(%s) = %s %s\n", names[i], fp ? "FILE" : "NULL", fp ? "" : ename(errno));
		if (fp)
			fclose(fp);
		fp = fopen(p, "w");
		say("fopen(%s, w) = %s %s\n", names[i], fp ? "FILE" : "NULL", fp ? "" : ename(errno));
		if (fp)
			fclose(fp);
	}
	close(dfd);
}

static void exec_env(void)
{
	say("# exec environments\n");
	char *argv0[] = {"true", NULL};
	char *bad_entry[] = {"A=1", none, NULL};
	char *edge_entry[] = {edge, NULL};
	T(execve("/bin/true", argv0, (char **)none));
	T(execve("/bin/true", argv0, BAD1));
	T(execve("/bin/true", argv0, bad_entry));
	T(execve("/bin/true", argv0, edge_entry));
	T(execle("/bin/true", "true", (char *)NULL, bad_entry));
}

static void locks(int fd)
{
	say("# struct flock\n");
	struct flock *bad[] = {(struct flock *)none, BAD1};
	for (int i = 0; i < 2; i++) {
		T(fcntl(fd, F_SETLK, bad[i]));
		T(fcntl(fd, F_SETLKW, bad[i]));
		T(fcntl(fd, F_GETLK, bad[i]));
		T(fcntl(fd, F_OFD_SETLK, bad[i]));
		T(fcntl(fd, F_OFD_SETLKW, bad[i]));
		T(fcntl(fd, F_OFD_GETLK, bad[i]));
	}
	/* readable but not writable: a set only reads it, a get writes it back */
	struct flock *ro = (struct flock *)ronly; /* l_type 0 = F_RDLCK, whole file */
	T(fcntl(fd, F_GETLK, ro));
	T(fcntl(fd, F_OFD_GETLK, ro));
	T(fcntl(fd, F_SETLK, ro));
	struct flock un = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
	T(fcntl(fd, F_SETLK, &un));
	/* a struct flock straddling into the PROT_NONE page */
	struct flock *straddle = (struct flock *)(none - 8);
	T(fcntl(fd, F_SETLK, straddle));
	T(fcntl(fd, F_GETLK, straddle));
}

static void iovecs(int fd, int wfd)
{
	say("# iovec arrays\n");
	char buf[16];
	struct iovec *bad[] = {(struct iovec *)none, BAD1};
	for (int i = 0; i < 2; i++) {
		T(readv(fd, bad[i], 1));
		T(writev(fd, bad[i], 1));
		T(preadv(fd, bad[i], 1, 0));
		T(pwritev(fd, bad[i], 1, 0));
		T(preadv2(fd, bad[i], 1, 0, 0));
		T(pwritev2(fd, bad[i], 1, 0, 0));
		T(preadv2(fd, bad[i], 1, -1, 0));
		T(pwritev2(fd, bad[i], 1, -1, 0));
		T(readv(fd, bad[i], 0));
		T(writev(fd, bad[i], 0));
		volatile int neg = -1; /* the compiler rejects a visible negative count */
		T(readv(fd, bad[i], neg));
		T(writev(fd, bad[i], 1025));
		T(preadv(fd, bad[i], 1, -5));
		T(readv(wfd, bad[i], 1));  /* O_WRONLY: EBADF comes first */
		T(pwritev(wfd, bad[i], 1, 0));
	}
	/* the first iovec is good, the second lies in the PROT_NONE page:
	 * the kernel copies the whole array first, so nothing happens */
	struct iovec *two = (struct iovec *)(none - sizeof(struct iovec));
	two[0].iov_base = buf;
	two[0].iov_len = 4;
	T(readv(fd, two, 2));
	memcpy(buf, "WXYZ", 4);
	T(writev(fd, two, 2));
	T(pwritev(fd, two, 2, 2));
	OFF(fd);
	sem_fsize("fd", fd);
}

static void statbufs(int fd)
{
	say("# stat buffers\n");
	void *bad[] = {none, BAD1, ronly, none - 16};
	const char *names[] = {"none", "-1", "ro", "straddle"};
	for (int i = 0; i < 4; i++) {
		say("# buffer %s\n", names[i]);
		T(fstat(fd, bad[i]));
		T(stat(P("f"), bad[i]));
		T(lstat(P("f"), bad[i]));
		T(fstatat(AT_FDCWD, P("f"), bad[i], 0));
		T(fstatat(fd, "", bad[i], AT_EMPTY_PATH));
		T(stat(P("missing"), bad[i]));
		T(fstat(-1, bad[i]));
		T(statx(AT_FDCWD, P("f"), 0, STATX_BASIC_STATS, bad[i]));
		T(statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, bad[i]));
	}
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	setup();
	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "0123456789", 10));
	int wfd = (int)T(open(P("f"), O_WRONLY));
	paths();
	exec_env();
	locks(fd);
	iovecs(fd, wfd);
	statbufs(fd);
	OFF(fd);
	sem_content("f");
	T(close(wfd));
	T(close(fd));
	say("done\n");
	return 0;
}
