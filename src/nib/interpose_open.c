/* SPDX-License-Identifier: MIT */
/* The open family, including glibc's _FORTIFY_SOURCE entry points. */
#include <stdarg.h>

#include "nib.h"

static inline mode_t mode_arg(int flags, va_list ap)
{
	/* The mode argument exists only when the call creates a file. */
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
		return (mode_t)va_arg(ap, int);
	return 0;
}

CHELL_EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return hub_open(AT_FDCWD, path, flags, mode, CHELL_OP_OPEN);
}

CHELL_EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return hub_open(AT_FDCWD, path, flags | O_LARGEFILE, mode, CHELL_OP_OPEN);
}

CHELL_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return hub_open(dirfd, path, flags, mode, CHELL_OP_OPEN);
}

CHELL_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	va_start(ap, flags);
	mode_t mode = mode_arg(flags, ap);
	va_end(ap);
	return hub_open(dirfd, path, flags | O_LARGEFILE, mode, CHELL_OP_OPEN);
}

CHELL_EXPORT int creat(const char *path, mode_t mode)
{
	return hub_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode, CHELL_OP_OPEN);
}

CHELL_EXPORT int creat64(const char *path, mode_t mode)
{
	return hub_open(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC | O_LARGEFILE, mode,
			CHELL_OP_OPEN);
}

/* Fortified variants: called without a mode; creating without one is a
 * programming error glibc reports by aborting, which we leave to glibc. */
#define FORTIFY_OPEN(name, dirfd_expr, extra_flags)                                     \
	CHELL_EXPORT int name(FORTIFY_PARAMS_##name)                                   \
	{                                                                              \
		if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {            \
			int (*next)(FORTIFY_PARAMS_##name) = dlsym(RTLD_NEXT, #name);  \
			return next(FORTIFY_ARGS_##name);                              \
		}                                                                      \
		return hub_open(dirfd_expr, path, flags | (extra_flags), 0, CHELL_OP_OPEN); \
	}

#include <dlfcn.h>
#define FORTIFY_PARAMS___open_2 const char *path, int flags
#define FORTIFY_ARGS___open_2 path, flags
#define FORTIFY_PARAMS___open64_2 const char *path, int flags
#define FORTIFY_ARGS___open64_2 path, flags
#define FORTIFY_PARAMS___openat_2 int dirfd, const char *path, int flags
#define FORTIFY_ARGS___openat_2 dirfd, path, flags
#define FORTIFY_PARAMS___openat64_2 int dirfd, const char *path, int flags
#define FORTIFY_ARGS___openat64_2 dirfd, path, flags

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

FORTIFY_OPEN(__open_2, AT_FDCWD, 0)
FORTIFY_OPEN(__open64_2, AT_FDCWD, O_LARGEFILE)
FORTIFY_OPEN(__openat_2, dirfd, 0)
FORTIFY_OPEN(__openat64_2, dirfd, O_LARGEFILE)
