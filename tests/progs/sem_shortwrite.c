/* SPDX-License-Identifier: MIT */
/*
 * sem_shortwrite DIR - failed and short writes at and past the end of file.
 *
 * A write whose buffer is (partly) not readable: the kernel stores what it
 * could copy before the first unreadable page and returns that count (or
 * EFAULT when nothing was copied), and the file grows only by the bytes
 * stored. A library that reserves space before copying (cache mode grows
 * the backing file first) must give the size back. Cases: a bad pointer at
 * EOF, a writev whose second iovec is bad, a writev whose second iovec runs
 * into a PROT_NONE page part-way, the same inside the file, past the end
 * (a hole), through O_APPEND, and a write through (char *)-1. After each:
 * return value and errno, offset, fstat size and the content hash.
 */
#include <sys/mman.h>
#include <sys/uio.h>

#include "sem_common.h"

static long pg;
static char *good, *edge; /* edge: first byte of a PROT_NONE page */

static void after(const char *what, int fd, const char *name)
{
	say("after %s:\n", what);
	OFF(fd);
	sem_fsize(name, fd);
	sem_content(name);
}

static int fresh(const char *name, size_t size, int extra)
{
	int fd = open(P(name), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | extra, 0644);
	if (fd < 0) {
		say("open(%s) = -1 %s\n", name, ename(errno));
		exit(1);
	}
	char buf[8192];
	memset(buf, 'a', sizeof buf);
	for (size_t done = 0; done < size;) {
		size_t n = size - done < sizeof buf ? size - done : sizeof buf;
		if (pwrite(fd, buf, n, (off_t)done) != (ssize_t)n)
			exit(1);
		done += n;
	}
	lseek(fd, 0, SEEK_END);
	return fd;
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	pg = sysconf(_SC_PAGESIZE);
	/* four readable pages of non-zero bytes, then a PROT_NONE page */
	char *m = mmap(NULL, (size_t)pg * 5, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		return 1;
	for (long i = 0; i < pg * 4; i++)
		m[i] = (char)('A' + i % 26);
	mprotect(m + pg * 4, (size_t)pg, PROT_NONE);
	good = m;
	edge = m + pg * 4;
	int fd;

	say("-- write(bad pointer) at EOF\n");
	fd = fresh("a", 100, 0);
	T(write(fd, edge, 100));
	after("bad write at EOF", fd, "a");
	T(write(fd, (char *)-1, 100));
	after("write((char *)-1) at EOF", fd, "a");
	T(pwrite(fd, edge, 100, 20000));
	after("bad pwrite past EOF", fd, "a");
	T(pwrite(fd, edge, 50, 10));
	after("bad pwrite inside", fd, "a");
	T(pwrite(fd, (char *)-1, 100, 30000));
	after("pwrite((char *)-1) past EOF", fd, "a");
	{
		struct iovec v[2] = {{edge, 10}, {good, 100}};
		T(pwritev(fd, v, 2, 25000));
		after("pwritev bad+good past EOF", fd, "a");
	}
	close(fd);

	say("-- writev {156 good, 65 bad} at EOF\n");
	fd = fresh("b", 100, 0);
	{
		struct iovec v[2] = {{good, 156}, {edge, 65}};
		T(writev(fd, v, 2));
		after("writev good+bad", fd, "b");
		struct iovec w[3] = {{good, 100}, {edge, 10}, {good + 200, 100}};
		T(writev(fd, w, 3));
		after("writev good+bad+good", fd, "b");
		struct iovec x[2] = {{edge, 10}, {good, 100}};
		T(writev(fd, x, 2));
		after("writev bad+good", fd, "b");
	}
	close(fd);

	say("-- writev whose second iovec runs into a PROT_NONE page\n");
	fd = fresh("c", 0, 0);
	{
		struct iovec v[2] = {{good, 4096}, {edge - 4196, 6244}};
		T(writev(fd, v, 2));
		after("writev into PROT_NONE from 0", fd, "c");
		struct iovec w[2] = {{good + 7, 1000}, {edge - 300, 5000}};
		T(pwritev(fd, w, 2, 20001));
		after("pwritev into PROT_NONE past EOF", fd, "c");
		T(pwritev(fd, w, 2, 3));
		after("pwritev into PROT_NONE inside", fd, "c");
		T(pwrite(fd, edge - 3 * pg - 17, (size_t)(3 * pg + 500), 21000));
		after("pwrite into PROT_NONE across EOF", fd, "c");
		T(write(fd, edge - 5000, 9000));
		after("write into PROT_NONE at the offset", fd, "c");
	}
	close(fd);

	say("-- whole blocks across EOF after a truncation, the buffer ending in them\n");
	/* A truncation leaves no block of the file in the cache, so a write
	 * from inside the file past its end stores whole blocks without a
	 * fill; the buffer's bad page cuts the second iovec in the block that
	 * holds the new end. Then SEEK_HOLE, which under cache mode writes the
	 * file back first: the file still ends where the stored bytes end,
	 * not at the end of the block the failed store would have reached. */
	fd = fresh("e", 41060 + 5000, 0);
	{
		T(ftruncate(fd, 41060));
		struct iovec v[2] = {{good, 1000}, {edge - 5000, 8000}};
		T(pwritev(fd, v, 2, 41060 - 3608));
		T(lseek(fd, 0, SEEK_HOLE));
		after("pwritev into PROT_NONE across EOF after ftruncate", fd, "e");
	}
	close(fd);

	say("-- O_APPEND\n");
	fd = fresh("d", 300, O_APPEND);
	{
		T(write(fd, edge, 100));
		after("append bad", fd, "d");
		struct iovec v[2] = {{good, 50}, {edge, 50}};
		T(writev(fd, v, 2));
		after("append good+bad", fd, "d");
		T(write(fd, edge - 2 * pg - 9, (size_t)(3 * pg)));
		after("append into PROT_NONE", fd, "d");
	}
	close(fd);
	say("done\n");
	return 0;
}
