/* SPDX-License-Identifier: MIT */
/* Descriptor management: close, close_range, closefrom, dup*, fcntl. */
#include <linux/close_range.h>
#include <stdarg.h>
#include <sys/ioctl.h>

#include "dispatch.h"
#include "kernel_view.h"

CHELL_EXPORT int close(int fd)
{
	if (likely(fdt_peek(fd) == NULL) && likely(!chell_is_internal_fd(fd)))
		return REAL(close)(fd);
	return hub_close(fd);
}

/* Close [lo, hi] with the kernel, skipping Chell's internal descriptors. */
static int kernel_close_range(unsigned int lo, unsigned int hi, int flags)
{
	int internal[256];
	int n = chell_internal_list(internal, 256);
	int r = 0;
	for (int i = 0; i < n && lo <= hi; i++) {
		unsigned int fd = (unsigned int)internal[i];
		if (fd < lo || fd > hi)
			continue;
		if (fd > lo && REAL(close_range)(lo, fd - 1, flags) < 0)
			r = -1;
		if (fd == ~0u)
			return r;
		lo = fd + 1;
	}
	if (lo <= hi && REAL(close_range)(lo, hi, flags) < 0)
		r = -1;
	return r;
}

CHELL_EXPORT int close_range(unsigned int lo, unsigned int hi, int flags)
{
	if (lo > hi || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC))) {
		errno = EINVAL;
		return -1;
	}
	if (flags & CLOSE_RANGE_UNSHARE) {
		/* The calling thread gets a table of its own first (the other
		 * threads keep theirs, descriptors included); then the range is
		 * closed in it. The kernel does the same, in one call. */
		int r = fdt_unshare();
		if (r < 0)
			return (int)hub_ret(r);
		flags &= ~CLOSE_RANGE_UNSHARE;
	}
	/* CLOEXEC only marks descriptors; the kernel tracks that flag for us. */
	if (!(flags & CLOSE_RANGE_CLOEXEC)) {
		int max = fdt_max();
		for (int fd = (int)lo; fd <= max && (unsigned)fd <= hi; fd++)
			if (fdt_peek(fd))
				hub_close(fd);
	}
	return kernel_close_range(lo, hi, flags);
}

CHELL_EXPORT void closefrom(int lo)
{
	if (lo < 0)
		lo = 0;
	close_range((unsigned int)lo, ~0u, 0);
}

CHELL_EXPORT int dup(int fd)
{
	if (likely(fdt_peek(fd) == NULL))
		return REAL(dup)(fd);
	int err, r = hub_dup(fd, HUB_DUP, 0, 0, CHELL_OP_DUP, &err);
	if (r < 0)
		errno = err;
	return r;
}

CHELL_EXPORT int dup2(int oldfd, int newfd)
{
	if (likely(fdt_peek(oldfd) == NULL && fdt_peek(newfd) == NULL) &&
	    !chell_is_internal_fd(newfd) && newfd > 2)
		return REAL(dup2)(oldfd, newfd);
	int err, r = hub_dup(oldfd, HUB_DUP2, newfd, 0, CHELL_OP_DUP, &err);
	if (r < 0)
		errno = err;
	return r;
}

CHELL_EXPORT int dup3(int oldfd, int newfd, int flags)
{
	if (likely(fdt_peek(oldfd) == NULL && fdt_peek(newfd) == NULL) &&
	    !chell_is_internal_fd(newfd) && newfd > 2)
		return REAL(dup3)(oldfd, newfd, flags);
	int err, r = hub_dup(oldfd, HUB_DUP3, newfd, flags, CHELL_OP_DUP, &err);
	if (r < 0)
		errno = err;
	return r;
}

/* Handlers may read (and for the get commands write) the struct flock of a
 * lock command: a pointer that would fault goes to the kernel instead. */
static bool flock_arg_ok(int cmd, unsigned long arg)
{
	switch (cmd) {
	case F_SETLK: case F_SETLKW: case F_OFD_SETLK: case F_OFD_SETLKW:
		return chell_user_check((const void *)arg, sizeof(struct flock), false) == 0;
	case F_GETLK: case F_OFD_GETLK:
		return chell_user_check((const void *)arg, sizeof(struct flock), true) == 0;
	default:
		return true;
	}
}

/* Commands the kernel evaluates against the descriptor's own offset (a
 * struct flock with l_whence = SEEK_CUR). F_GETLK64 and friends are the
 * same numbers on 64-bit targets. */
static bool fcntl_uses_offset(int cmd)
{
	switch (cmd) {
	case F_GETLK: case F_SETLK: case F_SETLKW:
	case F_OFD_GETLK: case F_OFD_SETLK: case F_OFD_SETLKW:
#if F_GETLK64 != F_GETLK
	case F_GETLK64: case F_SETLK64: case F_SETLKW64:
#endif
		return true;
	default:
		return false;
	}
}

static int do_fcntl(int fd, int cmd, unsigned long arg)
{
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		if (likely(fdt_peek(fd) == NULL))
			return REAL(fcntl64)(fd, cmd, arg);
		int err, r = hub_dup(fd, HUB_DUPFD, (int)arg, cmd == F_DUPFD_CLOEXEC ? O_CLOEXEC : 0,
				     CHELL_OP_FCNTL, &err);
		if (r < 0)
			errno = err;
		return r;
	}
	struct chell_file *f = fdt_peek(fd) ? file_get_fd(fd) : NULL;
	if (f && !flock_arg_ok(cmd, arg)) {
		file_put(f); /* the kernel's EFAULT, with no lock taken */
		f = NULL;
	}
	if (!f)
		return REAL(fcntl64)(fd, cmd, arg);
	chell_ctx c = hub_ctx(f, fd, CHELL_OP_FCNTL);
	/* The kernel reads the struct flock itself (its errors, EFAULT
	 * included, stay the kernel's); it only needs the right offset. */
	if (fcntl_uses_offset(cmd))
		hub_sync_out(f, fd, CHELL_OP_FCNTL);
	int r = hub_call_fcntl(&c, cmd, arg);
	if (cmd == F_SETFL && r >= 0) {
		/* Keep the shared copy of the status flags (O_APPEND, O_NONBLOCK)
		 * exactly as the kernel now reports them. */
		int fl = sys_fcntl(fd, F_GETFL, 0);
		if (fl >= 0)
			atomic_store((_Atomic int32_t *)&f->ofd->status_flags, fl);
	}
	file_put(f);
	return (int)hub_ret(r);
}

CHELL_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	/* Every fcntl argument is an int or a pointer; both fit unsigned long. */
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return do_fcntl(fd, cmd, arg);
}

CHELL_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	va_start(ap, cmd);
	unsigned long arg = va_arg(ap, unsigned long);
	va_end(ap);
	return do_fcntl(fd, cmd, arg);
}

/* lockf is fcntl locking relative to the current offset. glibc's lockf
 * calls fcntl internally (not through the interposed name), which would
 * reach the kernel's locks of the file even where a handler keeps them
 * (cache mode's stand-ins, handlers/cache/locks.c): on a handled
 * descriptor it is glibc's lockf64 (misc/lockf64.c) on the interposed
 * fcntl, command for command. */
CHELL_EXPORT int lockf64(int fd, int cmd, off_t len)
{
	if (likely(fdt_peek(fd) == NULL))
		return REAL(lockf64)(fd, cmd, len);
	struct flock fl = {.l_whence = SEEK_CUR, .l_start = 0, .l_len = len};
	switch (cmd) {
	case F_TEST:
		fl.l_type = F_RDLCK;
		if (do_fcntl(fd, F_GETLK, (unsigned long)&fl) < 0)
			return -1;
		if (fl.l_type == F_UNLCK || fl.l_pid == getpid())
			return 0;
		errno = EACCES;
		return -1;
	case F_ULOCK:
		fl.l_type = F_UNLCK;
		return do_fcntl(fd, F_SETLK, (unsigned long)&fl);
	case F_LOCK:
		fl.l_type = F_WRLCK;
		return do_fcntl(fd, F_SETLKW, (unsigned long)&fl);
	case F_TLOCK:
		fl.l_type = F_WRLCK;
		return do_fcntl(fd, F_SETLK, (unsigned long)&fl);
	}
	errno = EINVAL;
	return -1;
}

CHELL_EXPORT int lockf(int fd, int cmd, off_t len)
{
	return lockf64(fd, cmd, len);
}

/* ioctl is opaque to Chell and goes to the kernel; some requests use the
 * descriptor's offset (FIONREAD on a regular file answers size - offset),
 * so a handled descriptor's kernel offset is made current first. */
CHELL_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *); /* every ioctl argument fits a pointer */
	va_end(ap);
	if (unlikely(fdt_peek(fd) != NULL))
		chell_fd_sync_out(fd, CHELL_OP_FCNTL);
	return REAL(ioctl)(fd, req, arg);
}
