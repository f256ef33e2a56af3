/* SPDX-License-Identifier: MIT */
/*
 * The stat family and truncate(path).
 *
 * A handler that keeps file data in user space (direct, cache) may know a
 * size or time the kernel does not have yet, so stat calls on handled files
 * go through the stack. Path calls are routed only when some handler of the
 * mode implements path operations; otherwise they go straight to libc.
 */
#include <limits.h>
#include <string.h>

#include "dispatch.h"

static int path_stat(int dirfd, const char *path, struct stat *st, int at_flags)
{
	char abs[PATH_MAX];
	const struct chell_stack *rs;
	/* A buffer the handlers could not fill: the kernel says EFAULT, or
	 * first whatever is wrong with the path. */
	if (chell_active && chell_stack_routes_stat && path &&
	    (rs = router_route(dirfd, path, abs, sizeof(abs))) && rs->routes_stat &&
	    chell_user_check(st, sizeof(*st), true) == 0) {
		chell_ctx c = {NULL, -1, 0, CHELL_OP_STAT, abs, rs};
		return (int)hub_ret(hub_call_stat(&c, dirfd, path, st, at_flags));
	}
	return REAL(fstatat64)(dirfd, path, st, at_flags);
}

static int fd_stat(int fd, struct stat *st)
{
	struct chell_file *f = fdt_peek(fd) ? file_get_fd(fd) : NULL;
	if (f && chell_user_check(st, sizeof(*st), true) < 0) {
		file_put(f); /* the kernel's EFAULT */
		f = NULL;
	}
	if (!f)
		return REAL(fstat64)(fd, st);
	chell_ctx c = hub_ctx(f, fd, CHELL_OP_FSTAT);
	int r = hub_call_fstat(&c, st);
	file_put(f);
	return (int)hub_ret(r);
}

CHELL_EXPORT int fstat(int fd, struct stat *st)
{
	if (likely(fdt_peek(fd) == NULL))
		return REAL(fstat64)(fd, st);
	return fd_stat(fd, st);
}
CHELL_EXPORT int fstat64(int fd, struct stat64 *st)
{
	return fstat(fd, (struct stat *)st);
}

CHELL_EXPORT int stat(const char *path, struct stat *st)
{
	return path_stat(AT_FDCWD, path, st, 0);
}
CHELL_EXPORT int stat64(const char *path, struct stat64 *st)
{
	return stat(path, (struct stat *)st);
}

CHELL_EXPORT int lstat(const char *path, struct stat *st)
{
	return path_stat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}
CHELL_EXPORT int lstat64(const char *path, struct stat64 *st)
{
	return lstat(path, (struct stat *)st);
}

CHELL_EXPORT int fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	/* probed: a bad pointer goes to the kernel through path_stat */
	if ((flags & AT_EMPTY_PATH) && path && chell_user_strnlen(path, 1) == 0)
		return fstat(dirfd, st);
	return path_stat(dirfd, path, st, flags);
}
CHELL_EXPORT int fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
	return fstatat(dirfd, path, (struct stat *)st, flags);
}

/* statx: the kernel's answer, with size and blocks from the stack when the
 * call names a handled file. */
CHELL_EXPORT int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
	int r = REAL(statx)(dirfd, path, flags, mask, stx);
	if (r < 0 || !chell_active || !path)
		return r;
	struct stat st;
	int s;
	if (path[0] == 0 && (flags & AT_EMPTY_PATH)) {
		if (likely(fdt_peek(dirfd) == NULL))
			return r;
		s = fd_stat(dirfd, &st);
	} else {
		if (!chell_stack_routes_stat)
			return r;
		s = path_stat(dirfd, path, &st, flags & (AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT));
	}
	if (s == 0 && S_ISREG(st.st_mode)) {
		stx->stx_size = (uint64_t)st.st_size;
		stx->stx_blocks = (uint64_t)st.st_blocks;
	}
	return r;
}

/* Entry points of binaries built against glibc < 2.33 (x86-64: one struct
 * layout for stat and stat64, version argument unused). */
_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat64 layout");
int __fxstat(int ver, int fd, struct stat *st);
int __fxstat64(int ver, int fd, struct stat *st);
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat *st, int flags);
CHELL_EXPORT int __fxstat(int ver, int fd, struct stat *st)
{
	(void)ver;
	return fstat(fd, st);
}
CHELL_EXPORT int __fxstat64(int ver, int fd, struct stat *st) __attribute__((alias("__fxstat")));
CHELL_EXPORT int __xstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return stat(path, st);
}
CHELL_EXPORT int __xstat64(int ver, const char *path, struct stat *st) __attribute__((alias("__xstat")));
CHELL_EXPORT int __lxstat(int ver, const char *path, struct stat *st)
{
	(void)ver;
	return lstat(path, st);
}
CHELL_EXPORT int __lxstat64(int ver, const char *path, struct stat *st) __attribute__((alias("__lxstat")));
CHELL_EXPORT int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags)
{
	(void)ver;
	return fstatat(dirfd, path, st, flags);
}
CHELL_EXPORT int __fxstatat64(int ver, int dirfd, const char *path, struct stat *st, int flags)
	__attribute__((alias("__fxstatat")));

CHELL_EXPORT int truncate(const char *path, off_t len)
{
	char abs[PATH_MAX];
	const struct chell_stack *rs;
	if (chell_active && chell_stack_routes_truncate && path &&
	    (rs = router_route(AT_FDCWD, path, abs, sizeof(abs))) && rs->routes_truncate) {
		chell_ctx c = {NULL, -1, 0, CHELL_OP_TRUNCATE, abs, rs};
		return (int)hub_ret(hub_call_truncate(&c, path, len));
	}
	return REAL(truncate64)(path, len);
}
CHELL_EXPORT int truncate64(const char *path, off_t len) __attribute__((alias("truncate")));
