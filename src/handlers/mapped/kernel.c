/* SPDX-License-Identifier: MIT */
/*
 * Flags and file times for the mapped data paths (direct, cache): see
 * mapped.h for why each is asked of the kernel and how often.
 */
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "base.h"


/* The kernel's verdict on `flags` for a read of `fd`: preadv2 of one byte
 * so far beyond the end of file that nothing is read (flags are checked
 * before the read starts; atime is touched only if the flags pass, which
 * the caller's own read would do too). */
static int read_probe(int fd, int flags)
{
	char b;
	struct iovec v = {&b, 1};
	ssize_t r = sys_preadv2(fd, &v, 1, LLONG_MAX - 1, flags);
	return r < 0 ? (int)r : 0;
}

/*
 * What kiocb_set_rw_flags() checks is the same for reads and writes, except
 * RWF_ATOMIC (never on a read). Some file systems refuse a flag only on the
 * write path (ext4: RWF_NOWAIT on a buffered write; no FMODE_BUF_WASYNC:
 * EINVAL): for RWF_NOWAIT and RWF_ATOMIC on a write, where the read probe
 * let them through, a write probe asks too. It writes nothing: one byte
 * from a NULL buffer at LLONG_MAX - 1, which fails with EFAULT (or EAGAIN:
 * under RWF_NOWAIT the kernel will not stop to update the file times)
 * once the flags passed. Not with a finite RLIMIT_FSIZE (the kernel would
 * send SIGXFSZ) and not where the write would append (it would land at the
 * end of file): there the read probe's answer stands.
 */
static int write_probe(int fd, int status, int flags)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur != RLIM_INFINITY)
		return 0;
	/* Never where it would append: the read probe has answered for
	 * RWF_APPEND and O_APPEND already, so the probe writes at its offset. */
	int pf = flags & ~RWF_APPEND;
	bool added = (status & O_APPEND) && !(pf & RWF_NOAPPEND);
	if (added)
		pf |= RWF_NOAPPEND;
	struct iovec v = {NULL, 1};
	ssize_t r = sys_pwritev2(fd, &v, 1, LLONG_MAX - 1, pf);
	if (r == -EINVAL && (flags & RWF_ATOMIC))
		return 0; /* the size of this write, not the flag: the real write decides */
	if (r == -EPERM && added)
		return 0; /* an append-only file refusing our RWF_NOAPPEND, not theirs */
	return r < 0 ? (int)r : 0;
}

int mapped_rwf_check(struct mapped_rwf *m, int fd, int status, int flags, bool write)
{
	if (!flags)
		return 0;
	uint64_t key = (uint32_t)flags | ((status & O_APPEND) ? 1ull << 32 : 0) | (write ? 1ull << 33 : 0);
	for (unsigned i = 0; i < m->n; i++)
		if (m->key[i] == key)
			return m->res[i];
	int rflags = write ? flags & ~RWF_ATOMIC : flags;
	int r = 0;
	if (rflags) {
		/* For a read the probe runs on the application's descriptor: if
		 * the flags pass, it touches atime as the read itself will. A
		 * write must not touch atime, and a write-only descriptor cannot
		 * be read: those ask through a read-only reopen of the same file,
		 * with O_NOATIME where we may (owner or CAP_FOWNER). */
		int pfd = fd;
		if (write || (status & O_ACCMODE) == O_WRONLY) {
			char self[CHELL_FD_PATH_MAX];
			chell_fd_path(self, fd);
			int base = O_RDONLY | O_CLOEXEC | (status & O_APPEND);
			pfd = sys_open(self, base | O_NOATIME, 0);
			if (pfd == -EPERM)
				pfd = (status & O_ACCMODE) != O_WRONLY ? fd : sys_open(self, base, 0);
			if (pfd < 0)
				return 0; /* cannot ask: let the flags through */
		}
		r = read_probe(pfd, rflags);
		if (pfd != fd)
			sys_close(pfd);
	}
	if (r == 0 && write && (flags & (RWF_NOWAIT | RWF_ATOMIC)))
		r = write_probe(fd, status, flags);
	/* Only the kernel's flag errors are answers about the flags; anything
	 * else (EFAULT, EAGAIN, EIO) means they passed. */
	if (r != -EOPNOTSUPP && r != -EINVAL && r != -EPERM)
		r = 0;
	unsigned slot = m->n < MAPPED_RWF_MEMO ? m->n++ : (m->next++ % MAPPED_RWF_MEMO);
	m->key[slot] = key;
	m->res[slot] = r;
	return r;
}


/* The user address range of x86-64 with 4-level page tables
 * (TASK_SIZE_MAX): what the kernel's access_ok() accepts. */
#define USER_TOP 0x7ffffffff000ull

static inline bool user_range(const void *p, size_t n)
{
	return n <= USER_TOP && (uintptr_t)p <= USER_TOP - n;
}

ssize_t mapped_iov_total(const struct iovec *iov, int cnt)
{
	if (cnt < 0 || cnt > IOV_MAX)
		return -EINVAL;
	const size_t max = (size_t)MAPPED_MAX_RW_COUNT;
	struct iovec v[32];
	size_t total = 0;
	bool outside = false;
	/* The array is copied in with every length checked (EINVAL), then each
	 * segment must lie in the user range (EFAULT for the whole call,
	 * before a byte moves); the sum is clamped. */
	for (int i = 0; i < cnt; i += 32) {
		int k = cnt - i < 32 ? cnt - i : 32, fault;
		if (mapped_copy(v, iov + i, (size_t)k * sizeof(*v), &fault) == 0)
			return -EFAULT;
		for (int j = 0; j < k; j++) {
			if ((ssize_t)v[j].iov_len < 0)
				return -EINVAL;
			outside |= !user_range(v[j].iov_base, v[j].iov_len);
			total += v[j].iov_len < max ? v[j].iov_len : max;
			if (total > max)
				total = max;
		}
	}
	return outside ? -EFAULT : (ssize_t)total;
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
 * file_update_time() sets them. Setting mtime alone is for the owner
 * (EPERM otherwise); a writer that is not the owner may still set both
 * times to now (write permission), which moves atime too: the kernel's
 * next read would do that under relatime anyway. */
static void touch_mtime(int fd)
{
	struct timespec ts[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
	if (CHELL_SC(SYS_utimensat, fd, NULL, ts, 0, 0, 0) == -EPERM)
		CHELL_SC(SYS_utimensat, fd, NULL, NULL, 0, 0, 0);
}

void mapped_atime_slow(struct mapped_times *t, int fd, uint64_t tick, uint64_t eof)
{
	/* A write's time still owed goes first, as in mapped_times_flush: the
	 * kernel's read must see the mtime that write set, or relatime finds
	 * atime newer and leaves it (a write then a read in one tick showed
	 * "mtime advanced, atime same"). */
	if (__atomic_exchange_n(&t->mtime_pending, 0, __ATOMIC_RELAXED))
		mapped_mtime_slow(t, fd, tick);
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
	/* Whoever looks now makes the kernel stamp the next change finer than
	 * a tick (multigrain ctime), and may have changed the times itself
	 * (utimensat by path): the next read and write ask the kernel again. */
	__atomic_store_n(&t->atime_tick, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&t->mtime_tick, 0, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ limits */

ssize_t mapped_write_refused(ssize_t e)
{
	if (e == -EFBIG)
		CHELL_SC(SYS_tgkill, CHELL_SC(SYS_getpid, 0, 0, 0, 0, 0, 0),
			 CHELL_SC(SYS_gettid, 0, 0, 0, 0, 0, 0), SIGXFSZ, 0, 0, 0);
	return e;
}

/* Every file system takes at least 2 GiB - 1 (MAX_NON_LFS); only past
 * that is its own limit asked for. */
static bool past_maxbytes(int fd, uint64_t pos)
{
	if (pos <= (uint64_t)INT_MAX)
		return false;
	struct stat st;
	if (sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return false;
	return (int64_t)pos > chell_maxbytes(fd, st.st_dev);
}

off_t mapped_lseek(uint64_t *offp, int fd, off_t off, int whence, uint64_t size)
{
	_Atomic uint64_t *o = (_Atomic uint64_t *)offp;
	long long n;
	switch (whence) {
	case SEEK_SET:
		if (off < 0 || past_maxbytes(fd, (uint64_t)off))
			return -EINVAL;
		atomic_store_explicit(o, (uint64_t)off, memory_order_release); /* mapped_fast_lseek */
		return off;
	case SEEK_CUR: {
		uint64_t cur = atomic_load(o);
		if (off == 0)
			return (off_t)cur; /* the kernel answers this one unchecked */
		for (;;) {
			if (__builtin_add_overflow((long long)cur, (long long)off, &n) || n < 0 ||
			    past_maxbytes(fd, (uint64_t)n))
				return -EINVAL;
			if (atomic_compare_exchange_weak(o, &cur, (uint64_t)n))
				return (off_t)n;
		}
	}
	case SEEK_END:
		if (__builtin_add_overflow((long long)size, (long long)off, &n) || n < 0 ||
		    past_maxbytes(fd, (uint64_t)n))
			return -EINVAL;
		atomic_store_explicit(o, (uint64_t)n, memory_order_release);
		return (off_t)n;
	default:
		return -EINVAL;
	}
}
