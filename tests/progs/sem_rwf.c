/* SPDX-License-Identifier: MIT */
/*
 * sem_rwf DIR - preadv2/pwritev2 flags, and user buffers that are partly or
 * wholly bad.
 *
 * Every RWF_* flag (and unknown bits, and RWF_APPEND with RWF_NOAPPEND) on
 * a descriptor with and without O_APPEND, at offset -1 and at an explicit
 * offset: which the file system accepts is the kernel's to say (on tmpfs
 * RWF_NOWAIT, RWF_ATOMIC and RWF_DONTCACHE are refused; unknown bits give
 * EOPNOTSUPP), and where the bytes land (RWF_NOAPPEND writes at the offset
 * on an O_APPEND descriptor, RWF_APPEND appends).
 *
 * Bad buffers: read, pread, readv, write, pwrite and writev into or from a
 * buffer whose second page is PROT_NONE give the kernel's partial count;
 * with nothing valid, EFAULT; never a signal. All inside the file size.
 */
#include <sys/mman.h>
#include <sys/uio.h>

#include "rwf_compat.h"
#include "sem_common.h"

#define PG 4096
#define FILE_SIZE (64 * 1024)

static const struct {
	const char *name;
	int bits;
} flags[] = {
	{"0", 0},
	{"HIPRI", RWF_HIPRI},
	{"DSYNC", RWF_DSYNC},
	{"SYNC", RWF_SYNC},
	{"NOWAIT", RWF_NOWAIT},
	{"APPEND", RWF_APPEND},
	{"NOAPPEND", RWF_NOAPPEND},
	{"ATOMIC", RWF_ATOMIC},
	{"DONTCACHE", RWF_DONTCACHE},
	{"0x100", 0x100},
	{"0x200", 0x200},
	{"0x40000000", 0x40000000},
	{"APPEND|NOAPPEND", RWF_APPEND | RWF_NOAPPEND},
	{"DSYNC|HIPRI", RWF_DSYNC | RWF_HIPRI},
	{"SYNC|NOAPPEND", RWF_SYNC | RWF_NOAPPEND},
};

static void fill(const char *name, size_t n)
{
	int fd = open(P(name), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char buf[PG];
	for (size_t off = 0; off < n; off += PG) {
		for (int i = 0; i < PG; i++)
			buf[i] = (char)('a' + (off / PG + (size_t)i) % 26);
		if (write(fd, buf, PG) != PG)
			say("fill: short write\n");
	}
	close(fd);
}

static void flag_cases(void)
{
	for (int app = 0; app < 2; app++) {
		for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
			for (int explicit = 0; explicit < 2; explicit++) {
				fill("f", 64);
				int fd = open(P("f"), O_RDWR | O_CLOEXEC | (app ? O_APPEND : 0));
				lseek(fd, 2, SEEK_SET);
				off_t off = explicit ? 10 : -1;
				say("[%s fd, %s, off %ld]\n", app ? "O_APPEND" : "plain", flags[i].name, (long)off);
				char w[4] = "XYZ";
				struct iovec wv = {w, 3};
				T(pwritev2(fd, &wv, 1, off, flags[i].bits));
				OFF(fd);
				sem_fsize("f", fd);
				char r[8] = {0};
				struct iovec rv = {r, 5};
				lseek(fd, 1, SEEK_SET);
				long n = T(preadv2(fd, &rv, 1, off, flags[i].bits));
				if (n > 0)
					sem_data("preadv2", r, n);
				OFF(fd);
				close(fd);
				sem_content("f");
			}
		}
	}
	/* zero-length: the kernel returns 0 before it looks at the flags */
	int fd = open(P("f"), O_RDWR | O_CLOEXEC);
	struct iovec z = {NULL, 0};
	T(preadv2(fd, &z, 1, 0, 0x40000000));
	T(pwritev2(fd, &z, 1, 0, 0x40000000));
	T(preadv2(fd, &z, 1, -5, 0x40000000)); /* negative offset comes first */
	close(fd);
	fd = open(P("f"), O_RDONLY | O_CLOEXEC);
	char b[4] = "abc";
	struct iovec v = {b, 3};
	T(pwritev2(fd, &v, 1, 0, 0x40000000)); /* EBADF before the flags */
	close(fd);
	fd = open(P("f"), O_WRONLY | O_CLOEXEC);
	T(pwritev2(fd, &v, 1, 0, RWF_NOWAIT)); /* a write-only descriptor */
	T(pwritev2(fd, &v, 1, 0, 0x40000000));
	T(pwritev2(fd, &v, 1, 0, RWF_DSYNC));
	close(fd);
	sem_content("f");
}

/* A two-page buffer whose second page is PROT_NONE; the first page holds
 * a known pattern so a write's good part is recognisable. */
static unsigned char *bad_buffer(void)
{
	unsigned char *p = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	for (int i = 0; i < PG; i++)
		p[i] = (unsigned char)('A' + i % 26);
	mprotect(p + PG, PG, PROT_NONE);
	return p;
}

static void bad_cases(void)
{
	unsigned char *p = bad_buffer();
	unsigned char *bad = p + PG;
	fill("g", FILE_SIZE);
	int fd = open(P("g"), O_RDWR | O_CLOEXEC);

	say("[reads]\n");
	lseek(fd, 100, SEEK_SET);
	T(read(fd, p + PG - 10, 100));   /* 10 valid bytes */
	OFF(fd);
	T(read(fd, bad, 100));           /* none */
	OFF(fd);
	T(read(fd, p + 100, 3 * PG));    /* page-crossing: PG - 100 valid */
	OFF(fd);
	T(pread(fd, p + PG - 1, 50, 7)); /* 1 valid byte */
	T(pread(fd, bad, 50, 7));
	T(pread(fd, (void *)-1L, 50, 7)); /* not even an address */
	T(pread(fd, p, 2 * PG, 3 * PG));  /* one valid page */
	struct iovec v2[3] = {{p, 20}, {bad, 20}, {p, 20}};
	T(readv(fd, v2, 3));              /* the first iovec only */
	OFF(fd);
	struct iovec v3[2] = {{bad, 20}, {p, 20}};
	T(readv(fd, v3, 2));              /* nothing */
	T(preadv(fd, v2, 3, 5 * PG - 7)); /* crosses a page of the file too */
	struct iovec v4[2] = {{p + PG - 30, 100}, {p, 10}};
	T(preadv(fd, v4, 2, 11));         /* partial first iovec stops there */
	T(preadv2(fd, v4, 2, 11, RWF_HIPRI));
	OFF(fd);

	say("[writes]\n");
	lseek(fd, 200, SEEK_SET);
	T(write(fd, p + PG - 10, 100));
	OFF(fd);
	T(write(fd, bad, 100));
	OFF(fd);
	T(write(fd, p + 100, 3 * PG));
	OFF(fd);
	T(pwrite(fd, p + PG - 1, 50, 9 * PG));
	T(pwrite(fd, bad, 50, 9 * PG));
	T(pwrite(fd, (void *)-1L, 50, 9 * PG));
	T(pwrite(fd, p, 2 * PG, 10 * PG - 5));
	T(writev(fd, v2, 3));
	OFF(fd);
	T(writev(fd, v3, 2));
	T(pwritev(fd, v4, 2, 12 * PG + 3));
	T(pwritev2(fd, v4, 2, 13 * PG + 3, RWF_DSYNC));
	OFF(fd);

	say("[iovec arrays that are bad]\n");
	struct iovec *edge = (struct iovec *)(bad - sizeof(struct iovec));
	edge->iov_base = p; /* the last good slot before the PROT_NONE page */
	edge->iov_len = 8;
	T(readv(fd, (struct iovec *)bad, 1));
	T(readv(fd, edge, 2)); /* the second entry is unreadable */
	T(readv(fd, edge, 1));
	T(preadv(fd, (struct iovec *)-1L, 1, 0));
	T(preadv2(fd, (struct iovec *)bad, 1, 0, RWF_HIPRI));
	T(preadv2(fd, (struct iovec *)bad, 1, 0, 0x40000000)); /* EFAULT before the flags */
	T(writev(fd, (struct iovec *)bad, 1));
	T(writev(fd, edge, 2));
	T(pwritev(fd, edge, 1, 64));
	T(pwritev2(fd, (struct iovec *)bad, 1, 0, RWF_DSYNC));
	T(readv(fd, NULL, 0));
	struct iovec neg[3] = {{p, 0x7ffff000}, {p, 0x7ffff000}, {p, (size_t)-1}};
	T(preadv(fd, neg, 3, 0)); /* a negative length after the clamp: EINVAL */
	OFF(fd);
	sem_fsize("g", fd);
	close(fd);
	sem_content("g");
	munmap(p, 2 * PG);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	flag_cases();
	bad_cases();
	unlink(P("f"));
	unlink(P("g"));
	say("done\n");
	return 0;
}
