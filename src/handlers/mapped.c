/* SPDX-License-Identifier: MIT */
/*
 * Flags and file times for the mapped data paths (direct, cache): see
 * mapped.h for why each is asked of the kernel and how often.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/uio.h>

#include "../nib/nib.h"
#include "mapped.h"

#ifndef RWF_ATOMIC
#define RWF_ATOMIC 0x00000040
#endif

/* The kernel's verdict on `flags` for a read of `fd`: preadv2 of one byte
 * so far beyond the end of file that nothing is read (flags are checked
 * before the read starts; atime is touched only if the flags pass, which
 * the caller's own read would do too). */
static int probe(int fd, int flags)
{
	char b;
	struct iovec v = {&b, 1};
	ssize_t r = sys_preadv2(fd, &v, 1, LLONG_MAX - 1, flags);
	return r < 0 ? (int)r : 0;
}

int mapped_rwf_check(struct mapped_rwf *m, int fd, int status, const char *path, int flags,
		     bool write)
{
	if (write)
		flags &= ~RWF_ATOMIC;
	if (!flags)
		return 0;
	uint64_t key = (uint32_t)flags | ((status & O_APPEND) ? 1ull << 32 : 0);
	for (unsigned i = 0; i < m->n; i++)
		if (m->key[i] == key)
			return m->res[i];
	int r;
	if ((status & O_ACCMODE) != O_WRONLY) {
		r = probe(fd, flags);
	} else {
		/* a write-only descriptor cannot be read: ask through a read-only
		 * one of the same file (the mapping proved we may read it) */
		int rfd = path ? sys_open(path, O_RDONLY | O_CLOEXEC | O_NOATIME | (status & O_APPEND), 0)
			       : -EBADF;
		if (rfd == -EPERM && path) /* O_NOATIME needs ownership */
			rfd = sys_open(path, O_RDONLY | O_CLOEXEC | (status & O_APPEND), 0);
		if (rfd < 0)
			return 0; /* cannot ask: let the flags through, as before */
		r = probe(rfd, flags);
		sys_close(rfd);
	}
	/* Only the kernel's flag errors are answers about the flags; anything
	 * else (EFAULT, EIO) says nothing and is not remembered. */
	if (r != 0 && r != -EOPNOTSUPP && r != -EINVAL && r != -EPERM)
		return 0;
	unsigned slot = m->n < MAPPED_RWF_MEMO ? m->n++ : (m->next++ % MAPPED_RWF_MEMO);
	m->key[slot] = key;
	m->res[slot] = r;
	return r;
}

/* The kernel's own atime update for a read of fd: a 1-byte read at the end
 * of file reads nothing and calls file_accessed(), which applies the mount's
 * rule and O_NOATIME exactly as for the application's read. */
static void touch_atime(int fd, uint64_t eof)
{
	char b;
	sys_pread(fd, &b, 1, (off_t)(eof < (uint64_t)LLONG_MAX - 1 ? eof : (uint64_t)LLONG_MAX - 1));
}

/* mtime and ctime to the kernel's current time, as a write's
 * file_update_time() sets them. */
static void touch_mtime(int fd)
{
	struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
	CHELL_SC(SYS_utimensat, fd, NULL, ts, 0, 0, 0);
}

void mapped_atime_slow(struct mapped_times *t, int fd, uint64_t tick, uint64_t eof)
{
	__atomic_store_n(&t->atime_tick, tick, __ATOMIC_RELAXED);
	__atomic_store_n(&t->atime_pending, 0, __ATOMIC_RELAXED);
	touch_atime(fd, eof);
}

void mapped_mtime_slow(struct mapped_times *t, int fd, uint64_t tick)
{
	__atomic_store_n(&t->mtime_tick, tick, __ATOMIC_RELAXED);
	__atomic_store_n(&t->mtime_pending, 0, __ATOMIC_RELAXED);
	touch_mtime(fd);
}

void mapped_times_flush(struct mapped_times *t, int fd, int status, uint64_t eof)
{
	/* mtime first: under relatime an atime update is due when atime is not
	 * newer than mtime, which a pending write may have moved */
	if (__atomic_exchange_n(&t->mtime_pending, 0, __ATOMIC_RELAXED))
		mapped_mtime_slow(t, fd, mapped_tick());
	if (!(status & O_NOATIME) && __atomic_exchange_n(&t->atime_pending, 0, __ATOMIC_RELAXED))
		mapped_atime_slow(t, fd, mapped_tick(), eof);
}
