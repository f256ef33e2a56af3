/* SPDX-License-Identifier: MIT */
/*
 * sem_fdlimit DIR - RLIMIT_NOFILE as the application sees it.
 *
 * Chell keeps descriptors of its own (the shared region, trace logs, shadow
 * copies, chunk mappings, sockets). They must not take numbers from the
 * application: with a soft limit of N the application fills exactly the
 * numbers below N, dup/open/F_DUPFD then say EMFILE, dup2/dup3 to N or
 * beyond EBADF, F_DUPFD with a minimum of N or beyond EINVAL, and forked and
 * exec'd children see the same limit and the same count.
 */
#include <sys/resource.h>
#include <sys/wait.h>

#include "sem_common.h"

#define LIMIT 64

/* A write-only descriptor: Chell may need a descriptor of its own to serve
 * it (a mapping needs read access), and must not take it from the
 * application, which is at its limit when this is used. */
static int wo_fd = -1;

/* dup fd until the kernel refuses; print how many and why; close them again */
static int fill(int fd, const char *who)
{
	int got[4096], n = 0;
	for (;;) {
		int d = dup(fd);
		if (d < 0) {
			say("%s: dup until full: %d more, then %s\n", who, n, ename(errno));
			break;
		}
		if (n == 4096)
			break;
		got[n++] = d;
	}
	/* the limit is reached: every allocating call says so */
	T(open(P("f"), O_RDONLY));
	T(fcntl(fd, F_DUPFD, 0));
	T(fcntl(fd, F_DUPFD_CLOEXEC, 10));
	int pfd[2];
	T(pipe(pfd));
	if (wo_fd >= 0) {
		/* I/O on handled files still works at the limit, far into a new
		 * part of the file, then the descriptors are still all used */
		T(pwrite(wo_fd, "wxyz", 4, 3 << 20));
		T(pwrite(wo_fd, "ab", 2, 1 << 20));
		T(write(wo_fd, "12345", 5));
		T(pwrite(fd, "Q", 1, 5 << 20));
		T(dup(fd));
	}
	for (int i = 0; i < n; i++)
		close(got[i]);
	return n;
}

static void limits(const char *who)
{
	struct rlimit rl;
	T(getrlimit(RLIMIT_NOFILE, &rl));
	say("%s: soft %s %d\n", who, rl.rlim_cur == LIMIT ? "==" : "!=", LIMIT);
	struct rlimit64 rl64;
	T(getrlimit64(RLIMIT_NOFILE, &rl64));
	say("%s: soft64 %s %d\n", who, rl64.rlim_cur == LIMIT ? "==" : "!=", LIMIT);
	T(prlimit(0, RLIMIT_NOFILE, NULL, &rl));
	say("%s: prlimit soft %s %d\n", who, rl.rlim_cur == LIMIT ? "==" : "!=", LIMIT);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[2], "child") == 0) {
		/* exec'd with a handled descriptor 3 */
		sem_init(argc, argv);
		limits("exec");
		fill(3, "exec");
		return 0;
	}
	sem_init(argc, argv);
	struct rlimit rl;
	T(getrlimit(RLIMIT_NOFILE, &rl));
	rlim_t hard = rl.rlim_max;
	say("# a small soft limit, the hard one unchanged\n");
	rl.rlim_cur = LIMIT;
	T(setrlimit(RLIMIT_NOFILE, &rl));
	limits("parent");
	struct rlimit bad = {hard + 1, hard};
	if (hard != RLIM_INFINITY)
		T(setrlimit(RLIMIT_NOFILE, &bad)); /* soft above hard: EINVAL */

	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "0123456789", 10));
	int fd2 = (int)T(open(P("g"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd2, "abc", 3));
	T(lseek(fd2, 1, SEEK_SET));
	wo_fd = (int)T(open(P("w"), O_WRONLY | O_CREAT | O_TRUNC, 0644));

	say("# dup to the limit\n");
	fill(fd, "parent");

	say("# numbers at and beyond the limit\n");
	T(dup2(fd, LIMIT - 1));
	T(close(LIMIT - 1));
	T(dup2(fd, LIMIT));
	T(dup2(fd, LIMIT + 100));
	T(dup2(fd, 100000));
	T(dup3(fd, LIMIT, 0));
	T(dup3(fd, LIMIT, O_CLOEXEC));
	T(dup3(fd, LIMIT + 1, O_CLOEXEC));
	T(fcntl(fd, F_DUPFD, LIMIT));
	T(fcntl(fd, F_DUPFD, LIMIT - 1));
	T(close(LIMIT - 1));
	T(fcntl(fd, F_DUPFD_CLOEXEC, LIMIT));
	T(fcntl(fd, F_DUPFD_CLOEXEC, LIMIT + 5));
	T(dup2(fd2, LIMIT));
	T(dup3(fd2, LIMIT + 2, 0));
	/* every number above the limit, wherever Chell keeps its own files */
	int ebadf = 0, other = 0;
	for (int k = LIMIT; k < LIMIT + 2048; k++) {
		if (dup2(fd, k) < 0 && errno == EBADF)
			ebadf++;
		else
			other++;
		if (dup3(fd2, k, O_CLOEXEC) < 0 && errno == EBADF)
			ebadf++;
		else
			other++;
	}
	say("dup2/dup3 above the limit: %d EBADF, %d other\n", ebadf, other);

	say("# fork: the child sees the same limit and count\n");
	pid_t pid = fork();
	if (pid == 0) {
		limits("child");
		fill(fd, "child");
		_exit(0);
	}
	int st;
	T(waitpid(pid, &st, 0) == pid);
	say("child status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	say("# exec: the new image sees the same limit and count\n");
	pid = fork();
	if (pid == 0) {
		if (fd != 3) {
			dup2(fd, 3);
		}
		execl("/proc/self/exe", argv[0], argv[1], "child", (char *)NULL);
		_exit(127);
	}
	T(waitpid(pid, &st, 0) == pid);
	say("exec status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	say("# a lower limit, then a higher one\n");
	rl.rlim_cur = LIMIT / 2;
	T(setrlimit(RLIMIT_NOFILE, &rl));
	limits("parent");
	fill(fd, "parent");
	rl.rlim_cur = LIMIT;
	T(prlimit(0, RLIMIT_NOFILE, &rl, NULL));
	limits("parent");
	fill(fd, "parent");
	T(fcntl(fd, F_DUPFD, LIMIT / 2 + 1));
	T(close(LIMIT / 2 + 1));

	OFF(fd);
	OFF(fd2);
	sem_content("f");
	sem_content("g");
	sem_content("w");
	OFF(wo_fd);
	T(close(fd2));
	T(close(fd));
	say("done\n");
	return 0;
}
