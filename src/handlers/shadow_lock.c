/* SPDX-License-Identifier: MIT */
/*
 * A lock for memory shared by a whole process tree (see shadow.h).
 *
 * The futex calls are the shared (non-PRIVATE) variants: the kernel keys them
 * on the backing page, so processes that map the area at different addresses
 * still meet on the same futex. Only raw system calls are used: this runs in
 * the middle of interposed calls, and in tests linked without the library.
 */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "chell/sys.h"
#include "shadow.h"

/* How long a waiter sleeps before checking whether the holder still exists. */
#define SHADOW_LOCK_POLL_NS (50 * 1000 * 1000L)

static _Atomic unsigned long recoveries;

static void futex_wait(uint32_t *w, uint32_t val)
{
	struct timespec ts = {0, SHADOW_LOCK_POLL_NS};
	CHELL_SC(SYS_futex, w, FUTEX_WAIT, val, &ts, 0, 0);
}

static void futex_wake(uint32_t *w)
{
	CHELL_SC(SYS_futex, w, FUTEX_WAKE, 1, 0, 0, 0);
}

/*
 * Does process `pid` still run? A zombie counts as dead: its parent may be
 * the very process waiting for this lock, and it will not reap the child
 * before it gets the lock.
 */
static int pid_alive(pid_t pid)
{
	if (CHELL_SC(SYS_kill, pid, 0, 0, 0, 0, 0) == -ESRCH)
		return 0;
	char path[32], buf[256];
	/* "/proc/<pid>/stat" without snprintf: this file stays libc-free. */
	char digits[12];
	int nd = 0;
	for (unsigned v = (unsigned)pid; v; v /= 10)
		digits[nd++] = (char)('0' + v % 10);
	int n = 0;
	for (const char *s = "/proc/"; *s; s++)
		path[n++] = *s;
	while (nd)
		path[n++] = digits[--nd];
	for (const char *s = "/stat"; *s; s++)
		path[n++] = *s;
	path[n] = '\0';
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd != -ENOENT; /* no /proc: trust kill() */
	ssize_t r = sys_read(fd, buf, sizeof(buf) - 1);
	sys_close(fd);
	if (r <= 0)
		return 1;
	buf[r] = '\0';
	/* "pid (comm) S ...": the state follows the last ')'. */
	char *close_paren = NULL;
	for (char *q = buf; *q; q++)
		if (*q == ')')
			close_paren = q;
	if (!close_paren || close_paren[1] != ' ')
		return 1;
	char st = close_paren[2];
	return !(st == 'Z' || st == 'X');
}

#define A(x) ((_Atomic uint32_t *)&(x))
#define AI(x) ((_Atomic int32_t *)&(x))

static void take(struct shadow_lock *l, pid_t pid, pid_t tid)
{
	atomic_store_explicit(AI(l->owner_tid), tid, memory_order_relaxed);
	atomic_store_explicit(AI(l->owner_pid), pid, memory_order_release);
	l->depth = 1;
}

void shadow_lock_acquire(struct shadow_lock *l)
{
	pid_t tid = sys_gettid();
	pid_t pid = sys_getpid();

	/* Re-entry: only the owner itself can observe its own tid here. */
	if (atomic_load_explicit(A(l->word), memory_order_relaxed) != 0 &&
	    atomic_load_explicit(AI(l->owner_tid), memory_order_relaxed) == tid &&
	    atomic_load_explicit(AI(l->owner_pid), memory_order_relaxed) == pid) {
		l->depth++;
		return;
	}

	uint32_t c = 0;
	if (atomic_compare_exchange_strong_explicit(A(l->word), &c, 1, memory_order_acquire,
						    memory_order_relaxed)) {
		take(l, pid, tid);
		return;
	}
	if (c != 2)
		c = atomic_exchange_explicit(A(l->word), 2, memory_order_acquire);
	while (c != 0) {
		futex_wait(&l->word, 2);
		c = atomic_exchange_explicit(A(l->word), 2, memory_order_acquire);
		if (c == 0)
			break;
		/*
		 * Still held. If the holder's process is gone, the lock can
		 * never be released: claim ownership by swinging owner_pid
		 * from the dead pid to ours (only one waiter wins). The word
		 * stays non-zero, so we now hold it. owner_pid == 0 means the
		 * holder has the word but has not recorded itself yet.
		 */
		int32_t owner = atomic_load_explicit(AI(l->owner_pid), memory_order_acquire);
		if (owner > 0 && owner != pid && !pid_alive(owner) &&
		    atomic_compare_exchange_strong_explicit(AI(l->owner_pid), &owner, pid,
							    memory_order_acq_rel,
							    memory_order_relaxed)) {
			atomic_fetch_add(&recoveries, 1);
			take(l, pid, tid);
			return;
		}
	}
	take(l, pid, tid);
}

void shadow_lock_release(struct shadow_lock *l)
{
	if (--l->depth > 0)
		return;
	atomic_store_explicit(AI(l->owner_tid), 0, memory_order_relaxed);
	atomic_store_explicit(AI(l->owner_pid), 0, memory_order_relaxed);
	if (atomic_exchange_explicit(A(l->word), 0, memory_order_release) == 2)
		futex_wake(&l->word);
}

unsigned long shadow_lock_recoveries(void)
{
	return atomic_load(&recoveries);
}
