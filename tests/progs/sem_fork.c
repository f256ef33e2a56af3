/* SPDX-License-Identifier: MIT */
/*
 * sem_fork DIR - descriptors across fork().
 *
 * A descriptor inherited through fork() refers to the same open file
 * description in parent and child: an offset moved by one is seen by the
 * other. Descriptors opened after the fork are independent, and a child
 * closing (or exiting with) an inherited descriptor leaves the parent's
 * intact. Parent and child take turns through pipes so the transcript order
 * is fixed.
 */
#include <sys/wait.h>

#include "sem_common.h"

static int to_child[2], to_parent[2];

static void post(int fd)
{
	char c = 'k';
	while (write(fd, &c, 1) < 0 && errno == EINTR)
		;
}

static void await(int fd)
{
	char c;
	ssize_t n;
	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n != 1) {
		say("sync pipe closed unexpectedly\n");
		_exit(3);
	}
}

static void reap(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st))
		say("child exit %d\n", WEXITSTATUS(st));
	else
		say("child killed by signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char buf[64];
	long n;

	if (pipe(to_child) < 0 || pipe(to_parent) < 0)
		return 1;

	say("# setup\n");
	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "abcdefghijklmnopqrstuvwxyz", 26));
	T(lseek(fd, 5, SEEK_SET));

	say("# inherited descriptor: offset shared both ways\n");
	pid_t pid = fork();
	if (pid == 0) {
		say("[child] start\n");
		OFF(fd);
		n = T(read(fd, buf, 3));
		sem_data("[child] read", buf, n);
		OFF(fd);
		post(to_parent[1]);
		await(to_child[0]); /* parent moves the offset to 20 */
		say("[child] after parent's lseek\n");
		OFF(fd);
		T(write(fd, "XY", 2));
		OFF(fd);
		/* a descriptor opened now is the child's own */
		int own = (int)T(open(P("f"), O_RDWR));
		T(lseek(own, 2, SEEK_SET));
		T(write(own, "C", 1));
		OFF(own);
		OFF(fd);
		post(to_parent[1]);
		await(to_child[0]);
		say("[child] closing inherited fd\n");
		T(close(fd));
		T(read(fd, buf, 1));
		post(to_parent[1]);
		await(to_child[0]);
		_exit(0);
	}
	await(to_parent[0]);
	say("[parent] child read 3 bytes\n");
	OFF(fd);
	T(lseek(fd, 20, SEEK_SET));
	int mine = (int)T(open(P("f"), O_RDONLY)); /* after the fork: parent-only */
	T(lseek(mine, 10, SEEK_SET));
	post(to_child[1]);
	await(to_parent[0]);
	say("[parent] child wrote XY and used its own descriptor\n");
	OFF(fd);
	OFF(mine);
	n = T(pread(mine, buf, 26, 0));
	sem_data("[parent] pread(mine)", buf, n);
	post(to_child[1]);
	await(to_parent[0]);
	say("[parent] child closed its copy\n");
	OFF(fd);
	n = T(read(fd, buf, 2));
	sem_data("[parent] read", buf, n);
	post(to_child[1]);
	reap(pid);
	OFF(fd); /* the child's exit does not close the parent's */
	T(write(fd, "!", 1));
	OFF(fd);

	say("# grandchild moves the offset, no synchronisation but wait()\n");
	T(lseek(fd, 0, SEEK_SET));
	pid = fork();
	if (pid == 0) {
		pid_t g = fork();
		if (g == 0) {
			lseek(fd, 7, SEEK_CUR);
			(void)!write(fd, "G", 1);
			_exit(0);
		}
		int st;
		waitpid(g, &st, 0);
		lseek(fd, 2, SEEK_CUR);
		_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 9);
	}
	reap(pid);
	OFF(fd); /* 0 + 7 + 1 + 2 */

	say("# O_APPEND set in the child is seen by the parent\n");
	pid = fork();
	if (pid == 0) {
		fcntl(fd, F_SETFL, O_APPEND);
		_exit(0);
	}
	reap(pid);
	FL(fd);
	T(lseek(fd, 0, SEEK_SET));
	T(write(fd, "$", 1));
	OFF(fd);

	say("# child exits without closing; parent closes last\n");
	int last = (int)T(open(P("h"), O_RDWR | O_CREAT | O_TRUNC, 0600));
	pid = fork();
	if (pid == 0) {
		(void)!write(last, "child-data\n", 11);
		_exit(0);
	}
	reap(pid);
	OFF(last);
	T(write(last, "parent-data\n", 12));
	T(close(last));
	T(close(mine));
	T(close(fd));

	sem_content("f");
	sem_content("h");
	return 0;
}
