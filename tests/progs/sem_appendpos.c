/* SPDX-License-Identifier: MIT */
/*
 * sem_appendpos DIR - the file position of O_APPEND descriptions.
 *
 * An append moves the description's position to the end of the bytes it
 * wrote; read(), readv() and lseek() then work from there, positional calls
 * leave it alone, and dup'ed descriptors and forked children share it. The
 * position survives O_APPEND being switched off and on with F_SETFL, and
 * RWF_APPEND / RWF_NOAPPEND on either kind of descriptor. (Under direct mode
 * the kernel keeps the position of O_APPEND descriptions, since it makes
 * their appends: every switch between the two owners is exercised here.)
 */
#include <sys/uio.h>
#include <sys/wait.h>

#include "sem_common.h"
#include "rwf_compat.h"

static void show_read(int fd, const char *what, size_t n)
{
	char buf[64];
	long r = T(read(fd, buf, n));
	if (r > 0)
		sem_data(what, buf, r);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);

	say("# appends move the position; read follows it\n");
	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644));
	T(write(fd, "0123456789", 10));
	OFF(fd);
	T(lseek(fd, 2, SEEK_SET));
	show_read(fd, "read@2", 3);
	OFF(fd);
	T(write(fd, "abc", 3)); /* appends at 10, position to 13 */
	OFF(fd);
	show_read(fd, "read@end", 4); /* nothing left */
	T(lseek(fd, -5, SEEK_END));
	show_read(fd, "read@-5", 8);
	OFF(fd);
	T(lseek(fd, 4, SEEK_CUR));
	OFF(fd);
	T(lseek(fd, 1, SEEK_SET));
	char a[3], b[4];
	struct iovec v[2] = {{a, 3}, {b, 4}};
	long n = T(readv(fd, v, 2));
	if (n > 0)
		sem_data("readv a", a, n < 3 ? n : 3);
	OFF(fd);

	say("# positional calls leave it alone\n");
	T(lseek(fd, 4, SEEK_SET));
	char p[4];
	n = T(pread(fd, p, 4, 0));
	sem_data("pread@0", p, n);
	T(pwrite(fd, "PW", 2, 0)); /* Linux: pwrite on O_APPEND appends */
	OFF(fd);
	sem_content("f");

	say("# dup shares it\n");
	int d = (int)T(dup(fd));
	T(write(d, "D", 1));
	OFF(fd);
	T(lseek(fd, 3, SEEK_SET));
	OFF(d);
	show_read(d, "read(d)", 2);
	OFF(fd);

	say("# F_SETFL: O_APPEND off and on keep the position\n");
	T(lseek(fd, 6, SEEK_SET));
	T(fcntl(fd, F_SETFL, O_RDWR));
	OFF(fd);
	OFF(d);
	show_read(fd, "read off", 2);
	T(write(fd, "mid", 3)); /* at the position now */
	OFF(d);
	T(fcntl(d, F_SETFL, O_APPEND));
	OFF(fd);
	show_read(fd, "read on", 2);
	T(write(fd, "end", 3));
	OFF(fd);
	sem_content("f");

	say("# RWF_APPEND and RWF_NOAPPEND at the position\n");
	struct iovec w = {"nw", 2};
	T(lseek(fd, 1, SEEK_SET));
	T(pwritev2(fd, &w, 1, -1, RWF_NOAPPEND)); /* at 1, position 3 */
	OFF(fd);
	int plain = (int)T(open(P("f"), O_RDWR));
	T(lseek(plain, 2, SEEK_SET));
	struct iovec w2 = {"ra", 2};
	T(pwritev2(plain, &w2, 1, -1, RWF_APPEND)); /* appends, position to the end */
	OFF(plain);
	T(pwritev2(plain, &w2, 1, 1, RWF_APPEND)); /* appends, position unchanged */
	OFF(plain);
	OFF(fd);
	sem_content("f");

	say("# a forked child appends; the parent's position follows\n");
	T(lseek(fd, 0, SEEK_SET));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		OFF(fd);
		T(write(fd, "child", 5));
		OFF(fd);
		fflush(stdout);
		_exit(0);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	say("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	OFF(fd);
	T(lseek(fd, -7, SEEK_CUR));
	show_read(fd, "read back", 7);
	T(close(plain));
	T(close(d));
	T(close(fd));
	sem_content("f");
	return 0;
}
