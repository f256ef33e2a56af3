/* SPDX-License-Identifier: MIT */
/*
 * sem_lease DIR - file leases (F_SETLEASE/F_GETLEASE) around reads,
 * writes and truncation.
 *
 * The kernel grants a write lease only when the taker's descriptor is the
 * file's only one, a read lease only when nobody has the file open for
 * writing, and breaks a lease on any conflicting open. A library that
 * opens the file behind the application's back (a reopen to register it,
 * a manager's descriptor for write-back) changes what the application
 * sees: a refused lease, or one broken by its own next call. Each case
 * prints the F_SETLEASE result and F_GETLEASE after every operation. No
 * case makes a conflicting open of its own (that would wait for the
 * lease-break time).
 */
#include <sys/uio.h>

#include "sem_common.h"

static const char *lname(int l)
{
	return l == F_RDLCK ? "RDLCK" : l == F_WRLCK ? "WRLCK" : l == F_UNLCK ? "UNLCK" : "?";
}

static void getlease(const char *after, int fd)
{
	errno = 0;
	int l = fcntl(fd, F_GETLEASE);
	if (l < 0)
		say("  after %s: F_GETLEASE = -1 %s\n", after, ename(errno));
	else
		say("  after %s: F_GETLEASE = %s\n", after, lname(l));
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char buf[8192];
	memset(buf, 'L', sizeof buf);
	int fd, fd2;

	say("-- a write lease on a new file, then writes, reads, truncation\n");
	fd = T(open(P("w"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(fcntl(fd, F_SETLEASE, F_WRLCK));
	getlease("setlease", fd);
	T(write(fd, buf, 5000));
	getlease("write", fd);
	T(pwrite(fd, buf, 3000, 20000));
	getlease("extending pwrite", fd);
	T(pread(fd, buf, 100, 10));
	getlease("pread", fd);
	T(ftruncate(fd, 7000));
	getlease("ftruncate down", fd);
	T(ftruncate(fd, 30000));
	getlease("ftruncate up", fd);
	T(fsync(fd));
	getlease("fsync", fd);
	T(fcntl(fd, F_SETLEASE, F_RDLCK)); /* a write lease may be downgraded */
	getlease("downgrade", fd);
	T(fcntl(fd, F_SETLEASE, F_UNLCK));
	getlease("unlock", fd);
	close(fd);
	sem_content("w");

	say("-- a write lease on a file written before\n");
	fd = T(open(P("w"), O_RDWR | O_CLOEXEC));
	T(pwrite(fd, buf, 4096, 40000));
	T(fcntl(fd, F_SETLEASE, F_WRLCK));
	getlease("setlease", fd);
	T(pread(fd, buf, 4096, 0));
	getlease("pread", fd);
	T(pwrite(fd, buf, 100, 44000));
	getlease("pwrite", fd);
	T(fcntl(fd, F_SETLEASE, F_UNLCK));
	close(fd);
	sem_content("w");

	say("-- a read lease\n");
	fd = T(open(P("w"), O_RDONLY | O_CLOEXEC));
	T(read(fd, buf, 100));
	T(fcntl(fd, F_SETLEASE, F_RDLCK));
	getlease("setlease", fd);
	T(read(fd, buf, 5000));
	getlease("read", fd);
	T(pread(fd, buf, 4096, 40000));
	getlease("pread", fd);
	T(lseek(fd, 0, SEEK_END));
	getlease("lseek", fd);
	T(fcntl(fd, F_SETLEASE, F_WRLCK)); /* EAGAIN or granted: the kernel says */
	getlease("upgrade attempt", fd);
	T(fcntl(fd, F_SETLEASE, F_UNLCK));
	close(fd);

	say("-- a read lease beside another read-only descriptor that has read\n");
	fd = T(open(P("w"), O_RDONLY | O_CLOEXEC));
	fd2 = T(open(P("w"), O_RDONLY | O_CLOEXEC));
	T(pread(fd2, buf, 4096, 0));
	T(pread(fd, buf, 100, 0));
	T(fcntl(fd, F_SETLEASE, F_RDLCK));
	getlease("setlease", fd);
	T(pread(fd2, buf, 4096, 4096));
	T(read(fd, buf, 100));
	getlease("reads", fd);
	int fd3 = T(open(P("w"), O_RDONLY | O_CLOEXEC)); /* no conflict with a read lease */
	T(pread(fd3, buf, 100, 0));
	getlease("another read-only open", fd);
	close(fd3);
	T(fcntl(fd, F_SETLEASE, F_UNLCK));
	close(fd2);
	close(fd);

	say("-- leases refused while another descriptor is open\n");
	fd = T(open(P("w"), O_RDWR | O_CLOEXEC));
	fd2 = T(open(P("w"), O_RDONLY | O_CLOEXEC));
	T(fcntl(fd, F_SETLEASE, F_WRLCK));
	T(fcntl(fd2, F_SETLEASE, F_RDLCK));
	close(fd);
	T(fcntl(fd2, F_SETLEASE, F_RDLCK));
	getlease("writer closed", fd2);
	T(fcntl(fd2, F_SETLEASE, F_UNLCK));
	close(fd2);

	say("-- a read lease on a descriptor opened for writing\n");
	fd = T(open(P("w"), O_RDWR | O_CLOEXEC));
	T(fcntl(fd, F_SETLEASE, F_RDLCK));
	close(fd);
	sem_content("w");
	say("done\n");
	return 0;
}
