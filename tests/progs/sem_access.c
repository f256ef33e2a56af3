/* SPDX-License-Identifier: MIT */
/*
 * sem_access DIR - access modes, argument checking, holes, sizes.
 *
 * Error cases a library reimplementing file I/O tends to get wrong: access
 * mode checks, negative offsets, SEEK_DATA/SEEK_HOLE, open flag combinations
 * on files and directories, iovec count limits, preadv2/pwritev2 with offset
 * -1, pwrite on O_APPEND (Linux appends), and every stat flavour after each
 * size change, including a truncate done by another process while we hold
 * the file open. Whatever the kernel answers is the expected answer.
 */
#include <limits.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "sem_common.h"

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

/* Every stat flavour on the same file; they must agree. */
static void sizes(const char *what, int fd, const char *name)
{
	struct stat st;
	struct statx stx;
	long long fs = -1, s = -1, ls = -1, xs = -1, as = -1;
	int dfd = open(sem_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fstat(fd, &st) == 0)
		fs = st.st_size;
	if (stat(P(name), &st) == 0)
		s = st.st_size;
	if (lstat(P(name), &st) == 0)
		ls = st.st_size;
	if (statx(AT_FDCWD, P(name), 0, STATX_SIZE, &stx) == 0)
		xs = (long long)stx.stx_size;
	if (fstatat(dfd, name, &st, 0) == 0)
		as = st.st_size;
	close(dfd);
	say("sizes after %s: fstat=%lld stat=%lld lstat=%lld statx=%lld fstatat=%lld\n", what, fs, s,
	    ls, xs, as);
}

static void zeros(const char *what, int fd, off_t off, size_t n)
{
	char buf[16384];
	if (n > sizeof buf)
		n = sizeof buf;
	ssize_t r = pread(fd, buf, n, off);
	size_t z = 0;
	for (ssize_t i = 0; i < r; i++)
		z += buf[i] == 0;
	say("%s: pread %zd bytes at %lld, %zu zero\n", what, r, (long long)off, z);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	/* zeroed: "tail" prints 8 bytes after a read of 6, and the other 2
	 * must not be whatever start-up code left on the stack */
	char buf[256] = {0};
	long n;

	say("# access modes\n");
	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "hello", 5));
	sizes("write 5", fd, "f");
	int r = (int)T(open(P("f"), O_RDONLY));
	int w = (int)T(open(P("f"), O_WRONLY));
	T(write(r, "x", 1));
	T(pwrite(r, "x", 1, 0));
	T(read(w, buf, 1));
	T(pread(w, buf, 1, 0));
	T(read(r, buf, 0));
	T(write(w, buf, 0));
	OFF(w);
	T(ftruncate(r, 0));
	T(fallocate(r, 0, 0, 10));
	sizes("failed ftruncate", fd, "f");
	int pth = (int)T(open(P("f"), O_PATH));
	T(read(pth, buf, 1));
	T(write(pth, "x", 1));
	T(lseek(pth, 0, SEEK_SET));
	sem_fsize("O_PATH", pth);
	T(close(pth));

	say("# negative offsets and bad whence\n");
	T(pread(r, buf, 1, -1));
	T(pwrite(w, "x", 1, -5));
	T(lseek(r, -1, SEEK_SET));
	T(lseek(r, -10, SEEK_CUR));
	T(lseek(r, -100, SEEK_END));
	T(lseek(r, 0, 99));
	OFF(r);
	T(lseek(r, -2, SEEK_END));
	T(lseek(r, 100, SEEK_SET)); /* past EOF is fine */
	T(read(r, buf, 10));
	T(lseek(r, 0, SEEK_SET));

	say("# SEEK_DATA / SEEK_HOLE\n");
	T(lseek(r, 0, SEEK_DATA));
	T(lseek(r, 0, SEEK_HOLE));
	T(lseek(r, 5, SEEK_DATA));
	T(lseek(r, 100, SEEK_DATA));
	T(lseek(r, 100, SEEK_HOLE));
	T(lseek(r, -1, SEEK_DATA));

	say("# writing past EOF leaves a hole that reads as zeros\n");
	T(lseek(fd, 3 * 4096 + 100, SEEK_SET));
	T(write(fd, "end", 3));
	sizes("write past EOF", fd, "f");
	zeros("hole", r, 5, 3 * 4096 + 95);
	T(pread(r, buf, 3, 3 * 4096 + 100));
	sem_data("tail", buf, 3);
	T(lseek(r, 0, SEEK_HOLE));
	T(lseek(r, 4096, SEEK_DATA));
	T(lseek(r, 4096 * 3 + 103, SEEK_DATA));

	say("# pwrite on O_APPEND appends and leaves the offset alone\n");
	int ap = (int)T(open(P("f"), O_WRONLY | O_APPEND));
	OFF(ap);
	T(pwrite(ap, "PW", 2, 0));
	OFF(ap);
	sizes("pwrite O_APPEND", fd, "f");
	T(lseek(ap, 0, SEEK_SET));
	T(write(ap, "W", 1));
	OFF(ap);
	T(pread(r, buf, 5, 0));
	sem_data("head", buf, 5);
	T(pread(r, buf, 8, 3 * 4096 + 100));
	sem_data("tail", buf, 8);

	say("# preadv2 / pwritev2 with offset -1 use and move the current offset\n");
	struct iovec iov[2] = {{buf, 2}, {buf + 2, 3}};
	T(lseek(r, 1, SEEK_SET));
	n = T(preadv2(r, iov, 2, -1, 0));
	sem_data("preadv2", buf, n);
	OFF(r);
	n = T(preadv2(r, iov, 2, 0, 0));
	sem_data("preadv2 at 0", buf, n);
	OFF(r);
	T(preadv2(r, iov, 2, -1, 0x7fff0000)); /* unknown RWF flag */
	T(preadv2(r, iov, 2, -2, 0));
	T(lseek(w, 2, SEEK_SET));
	struct iovec wv[2] = {{"ab", 2}, {"c", 1}};
	T(pwritev2(w, wv, 2, -1, 0));
	OFF(w);
	T(pwritev(w, wv, 2, 0));
	OFF(w);
	n = T(pread(r, buf, 8, 0));
	sem_data("head", buf, n);

	say("# readv/writev iovec counts\n");
	T(readv(r, iov, 0));
	T(writev(w, wv, 0));
	volatile int negative = -1; /* hidden from the compiler's bounds check */
	T(readv(r, iov, negative));
	static struct iovec many[IOV_MAX + 1];
	for (int i = 0; i <= IOV_MAX; i++)
		many[i] = (struct iovec){buf, 1};
	T(readv(r, many, IOV_MAX + 1));
	T(writev(w, many, IOV_MAX + 1));
	T(preadv(r, many, IOV_MAX + 1, 0));
	T(lseek(r, 0, SEEK_SET));
	T(readv(r, many, IOV_MAX));
	OFF(r);
	T(readv(-1, iov, 1));

	say("# open flags\n");
	T(open(P("f"), O_RDWR | O_CREAT | O_EXCL, 0644));
	int x = (int)T(open(P("new"), O_RDWR | O_CREAT | O_EXCL, 0600));
	T(close(x));
	T(open(P("missing"), O_RDONLY));
	T(open(P("f/x"), O_RDONLY));
	T(open(P("f"), O_RDONLY | O_DIRECTORY));
	T(open(sem_dir, O_RDWR));
	T(open(sem_dir, O_WRONLY));
	T(open(sem_dir, O_WRONLY | O_CREAT, 0644));
	int dd = (int)T(open(sem_dir, O_RDONLY));
	T(read(dd, buf, 1));
	T(write(dd, buf, 1));
	sem_fsize("dir", dd);
	T(close(dd));
	x = (int)T(open(P("f"), O_RDWR | O_TRUNC | O_NOFOLLOW));
	T(close(x));
	T(symlink("f", P("link")));
	T(open(P("link"), O_RDONLY | O_NOFOLLOW));
	x = (int)T(open(P("link"), O_RDONLY));
	sem_fsize("via link", x);
	T(close(x));
	struct stat st;
	T(lstat(P("link"), &st));
	say("lstat(link) islnk=%d size=%lld\n", S_ISLNK(st.st_mode), (long long)st.st_size);

	say("# O_TRUNC\n");
	sizes("before O_TRUNC", fd, "f");
	x = (int)T(open(P("f"), O_WRONLY | O_TRUNC));
	sizes("O_TRUNC", fd, "f");
	OFF(fd); /* other descriptors keep their offset past the new EOF */
	T(read(r, buf, 1));
	T(write(x, "0123456789", 10));
	T(close(x));

	say("# ftruncate, fallocate, relative paths\n");
	T(ftruncate(fd, 4));
	sizes("ftruncate 4", fd, "f");
	T(ftruncate(fd, -1));
	T(ftruncate(fd, 20000));
	sizes("ftruncate 20000", fd, "f");
	zeros("extension", r, 4, 19996);
	T(truncate(P("f"), 8));
	sizes("truncate 8", fd, "f");
	T(truncate(P("f"), -1));
	T(truncate(P("missing"), 0));
	T(fallocate(fd, 0, 0, 8192));
	sizes("fallocate 8192", fd, "f");
	T(fallocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 8192));
	sizes("fallocate keep size", fd, "f");
	T(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096));
	sizes("punch", fd, "f");
	zeros("punched", r, 0, 4096);
	T(fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)); /* needs KEEP_SIZE */
	T(fallocate(fd, 0, -1, 10));
	T(fallocate(fd, 0, 0, 0));
	T(posix_fallocate(fd, 0, 10000));
	sizes("posix_fallocate 10000", fd, "f");
	T(chdir(sem_dir));
	x = (int)T(open("f", O_RDONLY));
	sem_fsize("relative", x);
	T(lseek(x, 0, SEEK_END));
	T(close(x));
	T(stat("f", &st));
	say("stat(\"f\") size=%lld\n", (long long)st.st_size);
	T(stat("missing", &st));
	T(truncate("f", 6000));
	sizes("relative truncate", fd, "f");

	say("# another process truncates while we hold the file\n");
	T(ftruncate(fd, 0));
	T(lseek(fd, 0, SEEK_SET));
	for (int i = 0; i < 10; i++)
		T(write(fd, "0123456789", 10));
	T(lseek(r, 5, SEEK_SET));
	pid_t pid = fork();
	if (pid == 0)
		_exit(truncate(P("f"), 10) == 0 ? 0 : 1);
	int status;
	waitpid(pid, &status, 0);
	say("child truncate exit %d\n", WEXITSTATUS(status));
	sizes("child truncate", fd, "f");
	n = T(read(r, buf, 100)); /* short: 5 of the 10 left */
	sem_data("short read", buf, n);
	T(read(r, buf, 100));
	OFF(r);
	OFF(fd); /* the writer's offset stays past the new EOF */
	T(write(fd, "Z", 1));
	sizes("write after truncate", fd, "f");
	zeros("new hole", r, 10, 90);

	T(close(r));
	T(close(w));
	T(close(ap));
	T(close(fd));
	sem_content("f");
	return 0;
}
