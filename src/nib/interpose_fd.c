/* SPDX-License-Identifier: MIT */
/* Descriptor management: close, close_range, closefrom, dup*, fcntl. */
#include <linux/close_range.h>
#include <stdarg.h>

#include "dispatch.h"

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
	if (lo > hi) {
		errno = EINVAL;
		return -1;
	}
	/* CLOEXEC only marks descriptors; the kernel tracks that flag for us. */
	if (!(flags & CLOSE_RANGE_CLOEXEC)) {
		int max = atomic_load(&chell_fdt_max);
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
