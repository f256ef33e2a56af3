/* SPDX-License-Identifier: MIT */
/*
 * sem_dup DIR - descriptor duplication semantics.
 *
 * dup/dup2/dup3/F_DUPFD/F_DUPFD_CLOEXEC create descriptors sharing one open
 * file description: one offset, one set of status flags (O_APPEND set through
 * one is seen through all), but per-descriptor FD_CLOEXEC. dup2 onto an open
 * descriptor silently closes it; the error cases are the kernel's.
 */
#include "sem_common.h"

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char buf[64];

	say("# shared offset\n");
	int fd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "0123456789", 10));
	int d1 = (int)T(dup(fd));
	OFF(fd);
	OFF(d1);
	T(lseek(d1, 3, SEEK_SET));
	OFF(fd);
	long n = T(read(fd, buf, 2));
	sem_data("read(fd)", buf, n);
	OFF(d1);

	say("# F_DUPFD / F_DUPFD_CLOEXEC and per-descriptor flags\n");
	int d2 = (int)T(fcntl(fd, F_DUPFD, 20));
	int d3 = (int)T(fcntl(fd, F_DUPFD_CLOEXEC, 30));
	T(fcntl(fd, F_DUPFD, -1));
	T(fcntl(d2, F_GETFD));
	T(fcntl(d3, F_GETFD));
	T(fcntl(fd, F_GETFD));
	OFF(d2);
	OFF(d3);
	T(fcntl(d3, F_SETFD, 0));
	T(fcntl(d3, F_GETFD));
	T(fcntl(fd, F_GETFD));

	say("# status flags are shared: O_APPEND set via fd, seen via d1/d2/d3\n");
	FL(fd);
	T(fcntl(fd, F_SETFL, O_APPEND));
	FL(d1);
	FL(d2);
	FL(d3);
	T(lseek(d1, 0, SEEK_SET));
	T(write(d2, "AB", 2)); /* appends at 10 despite offset 0 */
	OFF(fd);
	T(pread(d3, buf, 12, 0));
	sem_data("pread(d3)", buf, 12);
	T(fcntl(d3, F_SETFL, 0)); /* clear through another descriptor */
	FL(fd);
	T(lseek(fd, 1, SEEK_SET));
	T(write(d1, "x", 1)); /* now overwrites at 1 */
	OFF(d2);
	/* F_SETFL cannot change the access mode */
	T(fcntl(fd, F_SETFL, O_RDONLY));
	FL(d1);

	say("# dup2 onto an open descriptor closes it\n");
	int other = (int)T(open(P("g"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(other, "xyz", 3));
	OFF(other);
	T(dup2(fd, other));
	OFF(other); /* now fd's offset */
	n = T(read(other, buf, 4));
	sem_data("read(other)", buf, n);
	OFF(fd);
	sem_content("g"); /* the file behind the replaced descriptor is intact */
	sem_fsize("other", other);
	T(dup2(fd, fd));
	T(fcntl(fd, F_GETFD));
	T(dup2(fd, 40));
	T(fcntl(40, F_GETFD));
	OFF(40);
	T(dup2(fd, -1));
	T(dup2(fd, 99999999));
	T(dup2(-1, 41));
	T(dup2(77, 41)); /* 77 is not open */
	T(fcntl(41, F_GETFD));

	say("# dup3\n");
	T(dup3(fd, fd, 0));
	T(dup3(fd, fd, O_CLOEXEC));
	T(dup3(fd, 42, O_CLOEXEC));
	T(fcntl(42, F_GETFD));
	T(dup3(fd, 43, O_APPEND)); /* only O_CLOEXEC is allowed */
	T(fcntl(43, F_GETFD));
	T(dup3(fd, 42, 0)); /* replaces the existing 42, clearing CLOEXEC */
	T(fcntl(42, F_GETFD));
	T(dup3(-1, 44, 0));

	say("# bad descriptors\n");
	T(dup(-1));
	T(dup(1000));
	T(fcntl(1000, F_GETFD));
	T(fcntl(1000, F_DUPFD, 0));
	T(close(1000));
	T(close(-1));

	say("# close then use\n");
	T(close(d1));
	T(read(d1, buf, 1));
	T(write(d1, "q", 1));
	T(lseek(d1, 0, SEEK_SET));
	T(fcntl(d1, F_GETFL));
	T(close(d1));
	OFF(fd); /* the description survives while other descriptors refer to it */
	T(close(fd));
	T(close(other));
	T(close(40));
	T(close(42));
	T(close(d3));
	OFF(d2);
	T(lseek(d2, 0, SEEK_SET));
	n = T(read(d2, buf, sizeof buf));
	sem_data("read(d2)", buf, n);
	T(close(d2));
	T(read(d2, buf, 1));

	say("# dup after reopen reuses the lowest free number\n");
	int a = (int)T(open(P("f"), O_RDONLY));
	int b = (int)T(dup(a));
	say("b == a + 1: %d\n", b == a + 1);
	T(close(a));
	int c = (int)T(dup(b));
	say("c == a: %d\n", c == a);
	OFF(c);
	T(close(b));
	T(close(c));

	sem_content("f");
	sem_content("g");
	return 0;
}
