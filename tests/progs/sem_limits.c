/* SPDX-License-Identifier: MIT */
/*
 * sem_limits DIR - file size limits: RLIMIT_FSIZE, the file system's
 * largest file size (s_maxbytes) and the largest offset (LLONG_MAX).
 *
 * With RLIMIT_FSIZE set, a write that crosses the limit is cut short at it;
 * one that starts at or past it fails with EFBIG and raises SIGXFSZ (ignored
 * here, and caught in a second part: the handler counts). lseek accepts
 * positions up to s_maxbytes only (tmpfs: LLONG_MAX; ext4: 16 TiB minus a
 * block), whatever the whence; positions that overflow are EINVAL. pwrite
 * with pos + count beyond LLONG_MAX is EINVAL (rw_verify_area); below it,
 * but past s_maxbytes, EFBIG. Results depend on the file system only, and
 * the plain run is on the same kind as the run under Chell.
 */
#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/uio.h>

#include "sem_common.h"

static volatile sig_atomic_t xfsz;

static void on_xfsz(int sig)
{
	(void)sig;
	xfsz++;
}

static void limited(int fd, const char *buf)
{
	struct iovec v[2] = {{(void *)buf, 3}, {(void *)buf, 10}};
	T(pwrite(fd, buf, 100, 995));
	sem_fsize("after a pwrite across the limit", fd);
	T(pwrite(fd, buf, 100, 1000));
	T(pwrite(fd, buf, 10, 5000));
	T(pwrite(fd, buf, 0, 5000));
	T(pwritev(fd, v, 2, 990));
	T(lseek(fd, 998, SEEK_SET));
	T(write(fd, buf, 100));
	OFF(fd);
	T(write(fd, buf, 1));
	OFF(fd);
	T(ftruncate(fd, 1001));
	T(ftruncate(fd, 1000));
	T(ftruncate(fd, 500));
	T(lseek(fd, 0, SEEK_END));
	T(write(fd, buf, 600));
	OFF(fd);
	sem_fsize("after the writes at the limit", fd);
	int afd = T(open(P("a"), O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(write(afd, buf, 700));
	T(write(afd, buf, 700));
	T(write(afd, buf, 700));
	sem_fsize("after appends", afd);
	close(afd);
}

/* A file longer than the limit, written before it was set: writes inside
 * the file are cut at the limit and refused past it all the same (the limit
 * is on the position, not on growth). */
static void inside(const char *name, const char *buf, const struct rlimit *rl)
{
	struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
	T(setrlimit(RLIMIT_FSIZE, &inf));
	int fd = T(open(P(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(write(fd, buf, 4096));
	T(write(fd, buf, 4096));
	T(pread(fd, (char *)buf, 100, 0));
	T(setrlimit(RLIMIT_FSIZE, rl));
	T(pwrite(fd, "y", 1, 10));
	T(pwrite(fd, buf, 100, 995));
	T(pwrite(fd, buf, 100, 1000));
	T(pwrite(fd, buf, 100, 2000));
	T(lseek(fd, 990, SEEK_SET));
	T(write(fd, buf, 100));
	OFF(fd);
	T(write(fd, buf, 100));
	OFF(fd);
	T(lseek(fd, 4000, SEEK_SET));
	T(write(fd, buf, 10));
	OFF(fd);
	T(read(fd, (char *)buf, 10));
	OFF(fd);
	T(pread(fd, (char *)buf, 100, 5000));
	sem_fsize("inside a longer file", fd);
	close(fd);
	T(setrlimit(RLIMIT_FSIZE, &inf));
	sem_content(name);
	T(setrlimit(RLIMIT_FSIZE, rl));
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char buf[4096];
	memset(buf, 'z', sizeof buf);

	say("-- lseek to huge positions\n");
	int fd = T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(write(fd, buf, 100));
	const long long tib16 = 16LL << 40;
	T(lseek(fd, tib16 - 4096, SEEK_SET));
	T(lseek(fd, tib16, SEEK_SET));
	T(lseek(fd, tib16 + 4096, SEEK_SET));
	OFF(fd);
	T(lseek(fd, LLONG_MAX, SEEK_SET));
	T(lseek(fd, LLONG_MAX - 1, SEEK_SET));
	OFF(fd);
	T(lseek(fd, 50, SEEK_SET));
	T(lseek(fd, LLONG_MAX, SEEK_CUR));
	OFF(fd);
	T(lseek(fd, LLONG_MAX - 50, SEEK_CUR));
	T(lseek(fd, 50, SEEK_SET));
	T(lseek(fd, tib16, SEEK_CUR));
	T(lseek(fd, 50, SEEK_SET));
	T(lseek(fd, LLONG_MAX, SEEK_END));
	T(lseek(fd, LLONG_MAX - 100, SEEK_END));
	T(lseek(fd, tib16, SEEK_END));
	OFF(fd);
	T(lseek(fd, -200, SEEK_END));
	OFF(fd);

	say("-- pwrite at huge offsets\n");
	T(pwrite(fd, buf, 100, LLONG_MAX - 10));
	T(pwrite(fd, buf, 10, LLONG_MAX - 10));
	T(pwrite(fd, buf, 10, LLONG_MAX - 9));
	T(pwrite(fd, buf, 1, LLONG_MAX));
	T(pwrite(fd, buf, 10, tib16));
	T(pwrite(fd, buf, 0, LLONG_MAX));
	T(pwrite(fd, buf, 10, -1));
	T(pread(fd, buf, 10, LLONG_MAX - 5));
	T(pread(fd, buf, 10, tib16));
	sem_fsize("after huge pwrites", fd);
	close(fd);

	struct rlimit rl = {1000, RLIM_INFINITY};
	say("-- RLIMIT_FSIZE 1000, SIGXFSZ ignored\n");
	signal(SIGXFSZ, SIG_IGN);
	fd = T(open(P("g"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(setrlimit(RLIMIT_FSIZE, &rl));
	limited(fd, buf);
	close(fd);
	inside("k", buf, &rl);
	struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
	T(setrlimit(RLIMIT_FSIZE, &inf));
	sem_content("g");

	say("-- RLIMIT_FSIZE 1000, SIGXFSZ caught\n");
	signal(SIGXFSZ, on_xfsz);
	fd = T(open(P("h"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(setrlimit(RLIMIT_FSIZE, &rl));
	limited(fd, buf);
	close(fd);
	inside("k", buf, &rl);
	T(setrlimit(RLIMIT_FSIZE, &inf));
	say("SIGXFSZ caught %d times\n", (int)xfsz);
	sem_content("h");
	unlink(P("f"));
	unlink(P("g"));
	unlink(P("h"));
	unlink(P("a"));
	unlink(P("k"));
	say("done\n");
	return 0;
}
