/* SPDX-License-Identifier: MIT */
/*
 * sem_times DIR - atime, mtime and ctime after reads and writes.
 *
 * Only relations are printed ("atime advanced: yes"), never times. Old or
 * future times are set first with utimensat/futimens, so the mount's
 * relatime rule (update when atime <= mtime or ctime, or a day old) is
 * exercised deterministically: a future atime is newer than everything and
 * is left alone; an old one is updated. Each "before" is an fstat (a look
 * at the times: on a multigrain file system the next change then gets a
 * finer timestamp, so a change is always visible); each "after" is seen
 * three ways: fstat in this process, statx by raw system call in a forked
 * child (no library involved), and /usr/bin/stat run by a child.
 */
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#include "sem_common.h"

struct times {
	struct timespec a, m, c;
};

static int cmp(struct timespec x, struct timespec y)
{
	if (x.tv_sec != y.tv_sec)
		return x.tv_sec < y.tv_sec ? -1 : 1;
	return x.tv_nsec < y.tv_nsec ? -1 : x.tv_nsec > y.tv_nsec;
}

static struct times by_fstat(int fd)
{
	struct stat st;
	struct times t = {{0, 0}, {0, 0}, {0, 0}};
	if (fstat(fd, &st) == 0) {
		t.a = st.st_atim;
		t.m = st.st_mtim;
		t.c = st.st_ctim;
	}
	return t;
}

/* A child reports the times through a pipe: by a raw statx (kind 0) or by
 * running /usr/bin/stat (kind 1). */
static struct times by_child(const char *path, int kind)
{
	struct times t = {{0, 0}, {0, 0}, {0, 0}};
	int p[2];
	if (pipe(p) != 0)
		return t;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (kind == 0) {
			struct statx sx;
			char out[128];
			if (syscall(SYS_statx, AT_FDCWD, path, 0, STATX_BASIC_STATS, &sx) != 0)
				_exit(1);
			int n = snprintf(out, sizeof out, "%lld.%09u %lld.%09u %lld.%09u\n",
					 (long long)sx.stx_atime.tv_sec, sx.stx_atime.tv_nsec,
					 (long long)sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec,
					 (long long)sx.stx_ctime.tv_sec, sx.stx_ctime.tv_nsec);
			if (write(p[1], out, (size_t)n) != n)
				_exit(1);
			_exit(0);
		}
		dup2(p[1], 1);
		execl("/usr/bin/stat", "stat", "-c", "%.9X %.9Y %.9Z", path, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char buf[256] = {0};
	size_t got = 0;
	ssize_t n;
	while (got < sizeof buf - 1 && (n = read(p[0], buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	close(p[0]);
	waitpid(pid, NULL, 0);
	long long s[3];
	unsigned ns[3];
	if (sscanf(buf, "%lld.%u %lld.%u %lld.%u", &s[0], &ns[0], &s[1], &ns[1], &s[2], &ns[2]) == 6) {
		t.a = (struct timespec){s[0], ns[0]};
		t.m = (struct timespec){s[1], ns[1]};
		t.c = (struct timespec){s[2], ns[2]};
	}
	return t;
}

static void relation(const char *what, const char *how, struct times b, struct times a)
{
	say("  %s (%s): atime %s, mtime %s, ctime %s\n", what, how,
	    cmp(a.a, b.a) > 0 ? "advanced" : cmp(a.a, b.a) == 0 ? "same" : "went back",
	    cmp(a.m, b.m) > 0 ? "advanced" : cmp(a.m, b.m) == 0 ? "same" : "went back",
	    cmp(a.c, b.c) > 0 ? "advanced" : cmp(a.c, b.c) == 0 ? "same" : "went back");
}

/* after: the three views against `before` */
static void after(const char *what, int fd, struct times before)
{
	relation(what, "fstat", before, by_fstat(fd));
	relation(what, "raw statx in a child", before, by_child(P("f"), 0));
	relation(what, "/usr/bin/stat", before, by_child(P("f"), 1));
}

/* atime and mtime relative to now: old (1000 s after the epoch) or a day
 * in the future */
static void set_times(int fd, int atime_future, int mtime_future)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct timespec ts[2] = {{atime_future ? now.tv_sec + 86400 : 1000, 0},
				 {mtime_future ? now.tv_sec + 86400 : 1000, 0}};
	if (futimens(fd, ts) != 0)
		say("futimens = -1 %s\n", ename(errno));
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char buf[8192];
	memset(buf, 'x', sizeof buf);
	int fd = open(P("f"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	T(write(fd, buf, sizeof buf));
	struct times b;

	say("[read, atime old: relatime updates it]\n");
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	T(pread(fd, buf, 100, 0));
	after("after pread", fd, b);

	say("[read, atime in the future: newer than mtime and ctime, left alone]\n");
	set_times(fd, 1, 0);
	b = by_fstat(fd);
	T(pread(fd, buf, 100, 0));
	T(read(fd, buf, 100));
	after("after reads", fd, b);

	say("[read at end of file and of 0 bytes]\n");
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	T(pread(fd, buf, 100, 8192));
	after("after pread at EOF", fd, b);
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	T(read(fd, buf, 0));
	after("after read of 0 bytes", fd, b);
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	struct iovec z = {buf, 0};
	T(preadv(fd, &z, 1, 0));
	after("after preadv of 0 bytes", fd, b);

	say("[O_NOATIME]\n");
	int na = open(P("f"), O_RDONLY | O_NOATIME | O_CLOEXEC);
	if (na < 0)
		na = T(open(P("f"), O_RDONLY | O_CLOEXEC)); /* not the owner: plain */
	set_times(fd, 0, 0);
	b = by_fstat(na);
	T(pread(na, buf, 100, 0));
	T(read(na, buf, 4096));
	after("after O_NOATIME reads", na, b);
	b = by_fstat(fd);
	T(pread(fd, buf, 100, 0));
	after("then a read without it", fd, b);
	close(na);

	/* atime old: a write leaves it alone although a read would update
	 * it, so a read hidden in the write (such as shadow mode's check of
	 * the written bytes) would show */
	say("[writes]\n");
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	T(pwrite(fd, "abc", 3, 10));
	after("after pwrite", fd, b);
	b = by_fstat(fd);
	T(pwrite(fd, "def", 3, 20));
	after("after a second pwrite", fd, b);
	b = by_fstat(fd);
	T(write(fd, buf, 0));
	after("after write of 0 bytes", fd, b);
	b = by_fstat(fd);
	struct iovec v[2] = {{"gh", 2}, {"ij", 2}};
	T(pwritev(fd, v, 2, 30));
	after("after pwritev", fd, b);

	say("[preadv2/pwritev2 with flags: the flags change no time rule]\n");
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	struct iovec fv = {"mn", 2};
	T(pwritev2(fd, &fv, 1, 50, RWF_DSYNC));
	after("after pwritev2(RWF_DSYNC)", fd, b);
	set_times(fd, 0, 1);
	b = by_fstat(fd);
	struct iovec rv = {buf, 10};
	T(preadv2(fd, &rv, 1, 0, RWF_HIPRI));
	after("after preadv2(RWF_HIPRI)", fd, b);
	set_times(fd, 0, 0);
	b = by_fstat(fd);
	T(preadv2(fd, &rv, 1, 0, 0x40000000));
	T(pwritev2(fd, &fv, 1, 0, 0x40000000));
	after("after refused flags", fd, b);

	say("[write, then read: relatime sees atime <= mtime]\n");
	set_times(fd, 0, 0);
	T(pread(fd, buf, 10, 0));
	b = by_fstat(fd);
	T(pwrite(fd, "kl", 2, 40));
	T(pread(fd, buf, 10, 0));
	after("after pwrite and pread", fd, b);

	close(fd);
	unlink(P("f"));
	say("done\n");
	return 0;
}
