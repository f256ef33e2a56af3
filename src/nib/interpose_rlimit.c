/* SPDX-License-Identifier: MIT */
/*
 * RLIMIT_NOFILE: Chell's own descriptors live above the application's soft
 * limit, so they never take a number the application could have had.
 *
 * The kernel enforces the limit for every call that allocates a descriptor,
 * including those Chell cannot see (glibc-internal opens, opendir, accept,
 * raw system calls, children); so the kernel's soft limit always stays the
 * application's own, and Chell never emulates EMFILE/EBADF/EINVAL. To put an
 * internal descriptor above it, the "window" raises the soft limit for the
 * length of one F_DUPFD (or one open, socket, recvmsg of Chell's: see
 * chell_internal_window_enter), and the hard limit too when it equals the
 * soft one and the process may raise it, then restores both. Existing
 * descriptors above a limit are allowed by the kernel; only new ones count.
 *
 * During that window the kernel's limit is not the application's, so every
 * way the application can observe or change it waits for the window to
 * close: getrlimit/setrlimit/prlimit (interposed here), fork (atfork
 * handlers), clone and exec (their wrappers) all take nofile_mutex.
 */
#include <limits.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "nib.h"

/* Room above the limit when the hard limit must be raised too. */
#define NOFILE_RESERVE 512

/* Recursive: exec holds it without deferring signals (a signal deferred
 * across a successful exec would stay blocked in the new image), so an
 * application handler that runs meanwhile may take it again. */
static pthread_mutex_t nofile_mutex = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

void chell_nofile_lock(void)
{
	chell_crit_enter();
	pthread_mutex_lock(&nofile_mutex);
}

void chell_nofile_unlock(void)
{
	pthread_mutex_unlock(&nofile_mutex);
	chell_crit_leave();
}

/* fork, clone and exec: no window is open while the kernel copies or
 * replaces the process (the caller may not be in a critical section). */
void chell_nofile_hold(void)
{
	pthread_mutex_lock(&nofile_mutex);
}

void chell_nofile_release(void)
{
	pthread_mutex_unlock(&nofile_mutex);
}

void chell_nofile_reinit_child(void)
{
	pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
	nofile_mutex = fresh;
}

static long prlim(pid_t pid, int res, const struct rlimit *nw, struct rlimit *old)
{
	return CHELL_SC(SYS_prlimit64, pid, res, nw, old, 0, 0);
}

int chell_nofile_soft(void)
{
	struct rlimit rl;
	if (prlim(0, RLIMIT_NOFILE, NULL, &rl) < 0 || rl.rlim_cur > INT_MAX)
		return INT_MAX;
	return (int)rl.rlim_cur;
}

/*
 * The window, re-entrant under the (recursive) lock: the outermost enter
 * raises the kernel's limit above the application's soft limit (win_soft,
 * as it was: where Chell's descriptors go), the outermost leave restores it.
 * win_ok is false when there is no room (the soft limit equals a hard limit
 * this process may not raise: CAP_SYS_RESOURCE).
 */
static int win_depth;
static bool win_ok;
static int win_soft;
static struct rlimit win_saved;
/* A hard limit the kernel refused to raise (EPERM: no CAP_SYS_RESOURCE),
 * so the window does not ask again on every internal open while it stays
 * the same (capabilities are not gained back without an exec). */
static rlim_t win_refused_hard = RLIM_INFINITY;

CHELL_EXPORT void chell_internal_window_enter(void)
{
	chell_nofile_lock();
	if (win_depth++ > 0)
		return;
	win_ok = false;
	if (prlim(0, RLIMIT_NOFILE, NULL, &win_saved) < 0 ||
	    win_saved.rlim_cur > INT_MAX - NOFILE_RESERVE)
		return;
	win_soft = (int)win_saved.rlim_cur;
	/* Only the window's limit: the number F_DUPFD picks is the lowest free
	 * one from win_soft up, whatever the limit allows above it. */
	struct rlimit up = win_saved;
	if (win_saved.rlim_max > win_saved.rlim_cur) {
		up.rlim_cur = win_saved.rlim_max;
	} else {
		if (win_saved.rlim_max == win_refused_hard)
			return;
		up.rlim_cur = up.rlim_max = win_saved.rlim_cur + NOFILE_RESERVE;
	}
	long r = prlim(0, RLIMIT_NOFILE, &up, NULL);
	win_ok = r == 0;
	if (r == -EPERM && up.rlim_max != win_saved.rlim_max)
		win_refused_hard = win_saved.rlim_max;
}

CHELL_EXPORT void chell_internal_window_leave(void)
{
	if (--win_depth == 0 && win_ok) {
		prlim(0, RLIMIT_NOFILE, &win_saved, NULL); /* lowering is always allowed */
		win_ok = false;
	}
	chell_nofile_unlock();
}

int chell_nofile_place(int fd, int cloexec)
{
	chell_nofile_lock();
	struct rlimit rl;
	int soft = win_depth > 0 ? win_soft
		   : prlim(0, RLIMIT_NOFILE, NULL, &rl) == 0 && rl.rlim_cur <= INT_MAX ? (int)rl.rlim_cur
											  : -1;
	int r = -1;
	if (soft >= 0 && fd >= soft) { /* already out of the application's range */
		r = sys_fcntl(fd, F_SETFD, cloexec ? FD_CLOEXEC : 0) < 0 ? -1 : fd;
	} else {
		chell_internal_window_enter();
		if (win_ok)
			r = sys_fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, win_soft);
		chell_internal_window_leave();
	}
	chell_nofile_unlock();
	return r;
}

/* A duplicate of fd (any descriptor, the application's too) at or above
 * the soft limit, without FD_CLOEXEC; -1 if there is no room. */
int chell_nofile_dup_high(int fd)
{
	chell_internal_window_enter();
	int r = win_ok ? sys_fcntl(fd, F_DUPFD, win_soft) : -1;
	chell_internal_window_leave();
	return r;
}

/* A file of Chell's own, opened inside the window: it opens even when the
 * application has used up its limit, and lands above it. */
CHELL_EXPORT int chell_internal_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	chell_internal_window_enter();
	int fd = sys_openat(dirfd, path, flags, mode);
	if (fd >= 0 && win_ok && fd < win_soft) {
		int nfd = sys_fcntl(fd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, win_soft);
		if (nfd >= 0) {
			sys_close(fd);
			fd = nfd;
		}
	}
	chell_internal_window_leave();
	return fd;
}

/* ----------------------------------------------------------- RLIMIT_FSIZE */

uint64_t chell_fsize_limit = UINT64_MAX;

/* Out of line: the wrappers below also run inside ASan's own start-up
 * (setlim), before its shadow memory exists; a stack object inlined into
 * them would be touched there. Only RLIMIT_FSIZE changes come here. */
__attribute__((noinline)) void chell_fsize_refresh(void)
{
	struct rlimit rl;
	uint64_t v = UINT64_MAX;
	if (prlim(0, RLIMIT_FSIZE, NULL, &rl) == 0 &&
	    rl.rlim_cur != RLIM_INFINITY)
		v = (uint64_t)rl.rlim_cur;
	__atomic_store_n(&chell_fsize_limit, v, __ATOMIC_RELAXED);
}

int chell_own_write(int fd, const void *buf, size_t n)
{
	uint64_t lim = __atomic_load_n(&chell_fsize_limit, __ATOMIC_RELAXED);
	struct stat st;
	if (lim != UINT64_MAX && sys_fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		int fl = sys_fcntl(fd, F_GETFL, 0);
		off_t pos = fl >= 0 && (fl & O_APPEND) ? st.st_size : sys_lseek(fd, 0, SEEK_CUR);
		if (pos >= 0 && (uint64_t)pos >= lim)
			return -EFBIG;
		if (pos >= 0 && n > lim - (uint64_t)pos)
			n = (size_t)(lim - (uint64_t)pos); /* cut short: no signal */
	}
	return sys_write_all(fd, buf, n);
}

/* ------------------------------------------------------------ interposed */

static bool own_nofile(pid_t pid, int res)
{
	return res == RLIMIT_NOFILE && (pid == 0 || pid == sys_getpid());
}

/* glibc's getrlimit/setrlimit/prlimit are this one system call on x86-64
 * (struct rlimit is struct rlimit64); errno convention as glibc's. */
static int do_prlimit(pid_t pid, int res, const struct rlimit *nw, struct rlimit *old)
{
	bool lock = own_nofile(pid, res);
	if (lock)
		chell_nofile_lock();
	long r = prlim(pid, res, nw, old);
	if (lock)
		chell_nofile_unlock();
	/* the mapped write paths cut writes at RLIMIT_FSIZE from a copy of
	 * the limit (nib.h), which follows every change made through libc */
	if (r == 0 && nw && res == RLIMIT_FSIZE)
		chell_fsize_refresh();
	return (int)hub_ret(r);
}

CHELL_EXPORT int getrlimit(__rlimit_resource_t res, struct rlimit *rl)
{
	return do_prlimit(0, (int)res, NULL, rl);
}
CHELL_EXPORT int getrlimit64(__rlimit_resource_t res, struct rlimit64 *rl)
{
	return do_prlimit(0, (int)res, NULL, (struct rlimit *)rl);
}

CHELL_EXPORT int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
	return do_prlimit(0, (int)res, rl, NULL);
}
CHELL_EXPORT int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl)
{
	return do_prlimit(0, (int)res, (const struct rlimit *)rl, NULL);
}

CHELL_EXPORT int prlimit(pid_t pid, enum __rlimit_resource res, const struct rlimit *nw,
			 struct rlimit *old)
{
	return do_prlimit(pid, (int)res, nw, old);
}
CHELL_EXPORT int prlimit64(pid_t pid, enum __rlimit_resource res, const struct rlimit64 *nw,
			   struct rlimit64 *old)
{
	return do_prlimit(pid, (int)res, (const struct rlimit *)nw, (struct rlimit *)old);
}
