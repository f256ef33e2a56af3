/* SPDX-License-Identifier: MIT */
/*
 * chell/sys.h - raw system calls for Chell's own use.
 *
 * Inside libchell.so the names read, open, close, ... are the interposed
 * ones. Chell's own file accesses (config file, trace log, shadow copies)
 * must never go through them, or the library would recurse into itself and
 * trace its own work. These wrappers enter the kernel directly and return
 * -errno on failure instead of touching errno, so they are also safe in
 * signal handlers.
 */
#ifndef CHELL_SYS_H
#define CHELL_SYS_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static inline long chell_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define CHELL_SC(n, a, b, c, d, e, f) \
	chell_syscall6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

static inline int sys_openat(int dirfd, const char *path, int flags, mode_t mode)
{ return (int)CHELL_SC(SYS_openat, dirfd, path, flags, mode, 0, 0); }
static inline int sys_open(const char *path, int flags, mode_t mode)
{ return sys_openat(AT_FDCWD, path, flags, mode); }
#ifndef SYS_faccessat2
#define SYS_faccessat2 439
#endif
static inline int sys_faccessat2(int dirfd, const char *path, int mode, int flags)
{ return (int)CHELL_SC(SYS_faccessat2, dirfd, path, mode, flags, 0, 0); }
static inline int sys_close(int fd) { return (int)CHELL_SC(SYS_close, fd, 0, 0, 0, 0, 0); }
static inline ssize_t sys_read(int fd, void *b, size_t n) { return CHELL_SC(SYS_read, fd, b, n, 0, 0, 0); }
static inline ssize_t sys_write(int fd, const void *b, size_t n) { return CHELL_SC(SYS_write, fd, b, n, 0, 0, 0); }
static inline ssize_t sys_pread(int fd, void *b, size_t n, off_t o) { return CHELL_SC(SYS_pread64, fd, b, n, o, 0, 0); }
static inline ssize_t sys_pwrite(int fd, const void *b, size_t n, off_t o) { return CHELL_SC(SYS_pwrite64, fd, b, n, o, 0, 0); }
static inline ssize_t sys_preadv2(int fd, const struct iovec *iov, int cnt, off_t o, int fl)
{ return CHELL_SC(SYS_preadv2, fd, iov, cnt, o, 0, fl); }
static inline ssize_t sys_pwritev2(int fd, const struct iovec *iov, int cnt, off_t o, int fl)
{ return CHELL_SC(SYS_pwritev2, fd, iov, cnt, o, 0, fl); }
static inline off_t sys_lseek(int fd, off_t o, int wh) { return CHELL_SC(SYS_lseek, fd, o, wh, 0, 0, 0); }
static inline int sys_fstat(int fd, struct stat *st) { return (int)CHELL_SC(SYS_fstat, fd, st, 0, 0, 0, 0); }
static inline int sys_fstatat(int dirfd, const char *p, struct stat *st, int fl)
{ return (int)CHELL_SC(SYS_newfstatat, dirfd, p, st, fl, 0, 0); }
static inline int sys_ftruncate(int fd, off_t len) { return (int)CHELL_SC(SYS_ftruncate, fd, len, 0, 0, 0, 0); }
static inline int sys_fsync(int fd) { return (int)CHELL_SC(SYS_fsync, fd, 0, 0, 0, 0, 0); }
static inline int sys_fdatasync(int fd) { return (int)CHELL_SC(SYS_fdatasync, fd, 0, 0, 0, 0, 0); }
static inline int sys_fcntl(int fd, int cmd, long arg) { return (int)CHELL_SC(SYS_fcntl, fd, cmd, arg, 0, 0, 0); }
static inline int sys_dup3(int a, int b, int fl) { return (int)CHELL_SC(SYS_dup3, a, b, fl, 0, 0, 0); }
static inline int sys_mkdir(const char *p, mode_t m) { return (int)CHELL_SC(SYS_mkdirat, AT_FDCWD, p, m, 0, 0, 0); }
static inline int sys_unlink(const char *p) { return (int)CHELL_SC(SYS_unlinkat, AT_FDCWD, p, 0, 0, 0, 0); }
static inline ssize_t sys_readlink(const char *p, char *b, size_t n)
{ return CHELL_SC(SYS_readlinkat, AT_FDCWD, p, b, n, 0, 0); }

/*
 * The /proc name of descriptor fd in the calling thread's descriptor table,
 * written into out (CHELL_FD_PATH_MAX bytes), which is returned. Never
 * /proc/self/fd: that is the thread-group leader's table, and a thread may
 * have a table of its own (unshare(CLONE_FILES), close_range with
 * CLOSE_RANGE_UNSHARE), or the leader may have left the one the others
 * share; there the same number is another file, or none. Formatted by hand
 * (no libc): usable anywhere, signal handlers included.
 */
#define CHELL_FD_PATH_MAX 48
static inline char *chell_fd_path(char *out, int fd)
{
	static const char pre[] = "/proc/thread-self/fd/";
	char digits[12];
	unsigned v = fd < 0 ? 0u : (unsigned)fd, n = 0;
	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	char *p = out;
	for (const char *q = pre; *q; q++)
		*p++ = *q;
	while (n)
		*p++ = digits[--n];
	*p = 0;
	return out;
}
static inline long sys_getcwd(char *b, size_t n) { return CHELL_SC(SYS_getcwd, b, n, 0, 0, 0, 0); }
static inline pid_t sys_getpid(void) { return (pid_t)CHELL_SC(SYS_getpid, 0, 0, 0, 0, 0, 0); }
static inline pid_t sys_gettid(void) { return (pid_t)CHELL_SC(SYS_gettid, 0, 0, 0, 0, 0, 0); }
static inline ssize_t sys_copy_file_range(int in, off_t *io, int out, off_t *oo, size_t n)
{ return CHELL_SC(SYS_copy_file_range, in, io, out, oo, n, 0); }

/* Write all of buf (for logs); returns 0 or -errno. */
static inline int sys_write_all(int fd, const void *buf, size_t n)
{
	const char *p = (const char *)buf;
	while (n) {
		ssize_t w = sys_write(fd, p, n);
		if (w == -4 /* EINTR */)
			continue;
		if (w < 0)
			return (int)w;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

#endif
