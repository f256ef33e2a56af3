/* SPDX-License-Identifier: MIT */
/*
 * Data-path calls: read, write and their positional/vector forms, lseek,
 * the sync calls, ftruncate, fallocate, mmap.
 *
 * Each export is "fdt_peek; if unclaimed, tail-call libc". Everything else
 * lives out of line so the unclaimed path stays a handful of instructions.
 */
#include <limits.h>
#include <stdint.h>

#include "dispatch.h"

#define UNCLAIMED(fd) likely(fdt_peek(fd) == NULL)

/* Run `expr` (which may use c) with a counted reference on the file. */
#define WITH_FILE(fd, op, fallback, expr)                                  \
	do {                                                               \
		struct chell_file *f_ = file_enter(fd);                    \
		if (!f_)                                                   \
			return fallback;                                   \
		chell_ctx c = hub_ctx(f_, fd, op);                         \
		long r_ = (long)(expr);                                    \
		file_leave(f_);                                            \
		return hub_ret(r_);                                        \
	} while (0)

/* The iovec array of a vector call is the application's, and handlers read
 * it before the kernel would: one that faults, or a count out of the
 * kernel's range, goes to the kernel, which rejects it before any I/O. */
static bool iov_arg_ok(enum chell_op op, const struct iovec *iov, int cnt)
{
	switch (op) {
	case CHELL_OP_READV: case CHELL_OP_PREADV: case CHELL_OP_PREADV2:
	case CHELL_OP_WRITEV: case CHELL_OP_PWRITEV: case CHELL_OP_PWRITEV2:
		if (cnt == 0)
			return true;
		if (cnt < 0 || cnt > IOV_MAX)
			return false;
		return chell_user_check(iov, (size_t)cnt * sizeof(*iov), false) == 0;
	default:
		return true; /* a single buffer: the iovec is Chell's own */
	}
}

/*
 * Everything but the unclaimed fast path: one protected lookup, the layer-0
 * shortcut for one-buffer read/pread/write/pwrite if the file has one
 * (chell_fast_ops), else the general path down the stack. A descriptor closed
 * meanwhile gets the kernel's answer through the posix handler, which calls
 * the libc function matching the original call.
 */
__attribute__((noinline)) static ssize_t slow_rw(int fd, enum chell_op op, const struct iovec *iov,
						 int cnt, off_t off, int flags, bool is_write)
{
	struct chell_file *f = file_enter(fd);
	if (f && unlikely(!iov_arg_ok(op, iov, cnt))) {
		file_leave(f); /* the kernel's answer: EFAULT, or EBADF/EINVAL first */
		f = NULL;
	}
	if (!f) {
		chell_ctx k = {NULL, fd, 0, op, NULL};
		return hub_ret(is_write ? chell_posix_handler.write(&k, iov, cnt, off, flags)
					: chell_posix_handler.read(&k, iov, cnt, off, flags));
	}
	ssize_t r = CHELL_FAST_MISS;
	const struct chell_fast_ops *fast = f->fast;
	if (fast) {
		switch (op) {
		case CHELL_OP_READ: if (fast->read) r = fast->read(f, fd, iov[0].iov_base, iov[0].iov_len); break;
		case CHELL_OP_PREAD: if (fast->pread) r = fast->pread(f, fd, iov[0].iov_base, iov[0].iov_len, off); break;
		case CHELL_OP_WRITE: if (fast->write) r = fast->write(f, fd, iov[0].iov_base, iov[0].iov_len); break;
		case CHELL_OP_PWRITE: if (fast->pwrite) r = fast->pwrite(f, fd, iov[0].iov_base, iov[0].iov_len, off); break;
		default: break;
		}
	}
	if (r == CHELL_FAST_MISS) {
		chell_ctx c = hub_ctx(f, fd, op);
		r = is_write ? hub_call_write(&c, iov, cnt, off, flags)
			     : hub_call_read(&c, iov, cnt, off, flags);
	}
	file_leave(f);
	return hub_ret(r);
}

static inline ssize_t slow_read(int fd, enum chell_op op, const struct iovec *iov, int cnt,
				off_t off, int flags)
{
	return slow_rw(fd, op, iov, cnt, off, flags, false);
}

static inline ssize_t slow_write(int fd, enum chell_op op, const struct iovec *iov, int cnt,
				 off_t off, int flags)
{
	return slow_rw(fd, op, iov, cnt, off, flags, true);
}

/* ------------------------------------------------------------------- read */

CHELL_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	if (UNCLAIMED(fd))
		return REAL(read)(fd, buf, n);
	struct iovec v = {buf, n};
	return slow_read(fd, CHELL_OP_READ, &v, 1, -1, 0);
}

CHELL_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	if (UNCLAIMED(fd))
		return REAL(pread64)(fd, buf, n, off);
	struct iovec v = {buf, n};
	return slow_read(fd, CHELL_OP_PREAD, &v, 1, off, 0);
}
CHELL_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off) __attribute__((alias("pread")));

CHELL_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	if (UNCLAIMED(fd))
		return REAL(readv)(fd, iov, cnt);
	return slow_read(fd, CHELL_OP_READV, iov, cnt, -1, 0);
}

CHELL_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (UNCLAIMED(fd))
		return REAL(preadv64)(fd, iov, cnt, off);
	return slow_read(fd, CHELL_OP_PREADV, iov, cnt, off, 0);
}
CHELL_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
	__attribute__((alias("preadv")));

CHELL_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (UNCLAIMED(fd))
		return REAL(preadv64v2)(fd, iov, cnt, off, flags);
	return slow_read(fd, CHELL_OP_PREADV2, iov, cnt, off, flags);
}
CHELL_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
	__attribute__((alias("preadv2")));

/* _FORTIFY_SOURCE entry points: check the buffer, then behave as read. */
extern void __chk_fail(void) __attribute__((noreturn));
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
CHELL_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}
CHELL_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return pread(fd, buf, n, off);
}
CHELL_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
	__attribute__((alias("__pread_chk")));

/* ------------------------------------------------------------------ write */

CHELL_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	if (UNCLAIMED(fd))
		return REAL(write)(fd, buf, n);
	struct iovec v = {(void *)buf, n};
	return slow_write(fd, CHELL_OP_WRITE, &v, 1, -1, 0);
}

CHELL_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	if (UNCLAIMED(fd))
		return REAL(pwrite64)(fd, buf, n, off);
	struct iovec v = {(void *)buf, n};
	return slow_write(fd, CHELL_OP_PWRITE, &v, 1, off, 0);
}
CHELL_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
	__attribute__((alias("pwrite")));

CHELL_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	if (UNCLAIMED(fd))
		return REAL(writev)(fd, iov, cnt);
	return slow_write(fd, CHELL_OP_WRITEV, iov, cnt, -1, 0);
}

CHELL_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
	if (UNCLAIMED(fd))
		return REAL(pwritev64)(fd, iov, cnt, off);
	return slow_write(fd, CHELL_OP_PWRITEV, iov, cnt, off, 0);
}
CHELL_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
	__attribute__((alias("pwritev")));

CHELL_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (UNCLAIMED(fd))
		return REAL(pwritev64v2)(fd, iov, cnt, off, flags);
	return slow_write(fd, CHELL_OP_PWRITEV2, iov, cnt, off, flags);
}
CHELL_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
	__attribute__((alias("pwritev2")));

/* ------------------------------------------------------- offset and sync */

/* As slow_rw: the layer-0 shortcut if there is one, else the stack. */
__attribute__((noinline)) static off_t slow_lseek(int fd, off_t off, int whence)
{
	struct chell_file *f = file_enter(fd);
	if (!f)
		return REAL(lseek64)(fd, off, whence);
	off_t r = CHELL_FAST_MISS;
	const struct chell_fast_ops *fast = f->fast;
	if (fast && fast->lseek)
		r = fast->lseek(f, fd, off, whence);
	if (r == CHELL_FAST_MISS) {
		chell_ctx c = hub_ctx(f, fd, CHELL_OP_LSEEK);
		r = hub_call_lseek(&c, off, whence);
	}
	file_leave(f);
	return (off_t)hub_ret(r);
}

CHELL_EXPORT off_t lseek(int fd, off_t off, int whence)
{
	if (UNCLAIMED(fd))
		return REAL(lseek64)(fd, off, whence);
	return slow_lseek(fd, off, whence);
}
CHELL_EXPORT off_t lseek64(int fd, off_t off, int whence) __attribute__((alias("lseek")));

CHELL_EXPORT int fsync(int fd)
{
	if (UNCLAIMED(fd))
		return REAL(fsync)(fd);
	WITH_FILE(fd, CHELL_OP_FSYNC, REAL(fsync)(fd), hub_call_fsync(&c, 0));
}

CHELL_EXPORT int fdatasync(int fd)
{
	if (UNCLAIMED(fd))
		return REAL(fdatasync)(fd);
	WITH_FILE(fd, CHELL_OP_FDATASYNC, REAL(fdatasync)(fd), hub_call_fsync(&c, 1));
}

CHELL_EXPORT int sync_file_range(int fd, off_t off, off_t n, unsigned int flags)
{
	if (UNCLAIMED(fd))
		return REAL(sync_file_range)(fd, off, n, flags);
	WITH_FILE(fd, CHELL_OP_SYNC_FILE_RANGE, REAL(sync_file_range)(fd, off, n, flags),
		  hub_call_sync_file_range(&c, off, n, flags));
}

CHELL_EXPORT int ftruncate(int fd, off_t len)
{
	if (UNCLAIMED(fd))
		return REAL(ftruncate64)(fd, len);
	WITH_FILE(fd, CHELL_OP_FTRUNCATE, REAL(ftruncate64)(fd, len), hub_call_ftruncate(&c, len));
}
CHELL_EXPORT int ftruncate64(int fd, off_t len) __attribute__((alias("ftruncate")));

CHELL_EXPORT int fallocate(int fd, int mode, off_t off, off_t len)
{
	if (UNCLAIMED(fd))
		return REAL(fallocate64)(fd, mode, off, len);
	WITH_FILE(fd, CHELL_OP_FALLOCATE, REAL(fallocate64)(fd, mode, off, len),
		  hub_call_fallocate(&c, mode, off, len));
}
CHELL_EXPORT int fallocate64(int fd, int mode, off_t off, off_t len)
	__attribute__((alias("fallocate")));

/* posix_fallocate returns an error number instead of setting errno. */
CHELL_EXPORT int posix_fallocate(int fd, off_t off, off_t len)
{
	struct chell_file *f = UNCLAIMED(fd) ? NULL : file_get_fd(fd);
	if (!f)
		return REAL(posix_fallocate64)(fd, off, len);
	chell_ctx c = hub_ctx(f, fd, CHELL_OP_FALLOCATE);
	int r = off < 0 || len <= 0 ? -EINVAL : hub_call_fallocate(&c, 0, off, len);
	file_put(f);
	if (r == -EOPNOTSUPP) /* glibc emulates by writing; so do we, through libc */
		return REAL(posix_fallocate64)(fd, off, len);
	return r < 0 ? -r : 0;
}
CHELL_EXPORT int posix_fallocate64(int fd, off_t off, off_t len)
	__attribute__((alias("posix_fallocate")));

/* ------------------------------------------------------------------- mmap */

CHELL_EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if ((flags & MAP_ANONYMOUS) || UNCLAIMED(fd))
		return REAL(mmap64)(addr, len, prot, flags, fd, off);
	struct chell_file *f = file_get_fd(fd);
	if (!f)
		return REAL(mmap64)(addr, len, prot, flags, fd, off);
	chell_ctx c = hub_ctx(f, fd, CHELL_OP_MMAP);
	void *r = hub_call_mmap(&c, addr, len, prot, flags, off);
	file_put(f);
	if ((uintptr_t)r >= (uintptr_t)-4095) {
		errno = (int)-(intptr_t)r;
		return MAP_FAILED;
	}
	return r;
}
CHELL_EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
	__attribute__((alias("mmap")));
