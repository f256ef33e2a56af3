/* SPDX-License-Identifier: MIT */
/*
 * Signal deferral and Chell's locks.
 *
 * The kernel never runs a signal handler in the middle of a system call: it
 * delivers signals when the call returns. Chell replaces some system calls
 * with user-space code that takes locks, so a handler that interrupts that
 * code and calls read() on the same file would deadlock. To keep the
 * kernel's behaviour we wrap every handler the application installs: while
 * a thread is inside a Chell critical section (chell_tls_crit > 0) an
 * asynchronous signal is blocked and re-queued to the same thread with its
 * original siginfo, and unblocked as soon as the section ends (see defer()).
 * Synchronous faults (SIGSEGV, SIGBUS, ... raised by the CPU) are never
 * deferred; those raised by Chell's own copies are claimed by one of the
 * fault hooks handlers register (chell_fault_hook_add); the others reach the
 * application's handler, or the default action, as on the bare kernel.
 */
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <ucontext.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nib.h"

__thread int chell_tls_crit;
__thread int chell_tls_pending;
static __thread pid_t tls_tid;
/* signals this thread blocked to defer them; unblocked when the section ends */
static __thread sigset_t tls_deferred;

CHELL_EXPORT pid_t chell_tid(void)
{
	if (unlikely(tls_tid == 0))
		tls_tid = sys_gettid();
	return tls_tid;
}

void chell_tid_reset(void)
{
	tls_tid = 0;
}

/* ---------------------------------------------------------------- deferral */

static struct sigaction app_act[NSIG];  /* what the application installed */
static _Atomic unsigned char wrapped[NSIG];

static bool deferrable(int sig, const siginfo_t *si)
{
	switch (sig) {
	case SIGSEGV: case SIGBUS: case SIGILL: case SIGFPE: case SIGTRAP: case SIGSYS:
		/* raised by the faulting instruction itself: must run now */
		return si == NULL || si->si_code <= 0;
	default:
		return true;
	}
}

/*
 * Deferral lets the kernel keep the signal: we block it in the interrupted
 * context's mask (restored when the trampoline returns), queue it again to
 * this thread with its original siginfo, and unblock it when the critical
 * section ends. The kernel then delivers it exactly as it would have, with
 * its own queueing rules (standard signals coalesce, real-time ones queue).
 */
static void defer(int sig, siginfo_t *si, void *uc)
{
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	/* blocked now, so an SA_NODEFER handler is not re-entered by the re-queue */
	pthread_sigmask(SIG_BLOCK, &one, NULL);
	if (uc)
		sigaddset(&((ucontext_t *)uc)->uc_sigmask, sig);
	sigaddset(&tls_deferred, sig);
	chell_tls_pending = 1;
	siginfo_t info;
	if (si)
		info = *si;
	else {
		memset(&info, 0, sizeof(info));
		info.si_code = SI_TKILL;
	}
	info.si_signo = sig;
	/* Same process, so the kernel accepts the original si_code. */
	if (CHELL_SC(SYS_rt_tgsigqueueinfo, sys_getpid(), chell_tid(), sig, &info, 0, 0) < 0)
		CHELL_SC(SYS_tgkill, sys_getpid(), chell_tid(), sig, 0, 0, 0);
}

/*
 * The chain of fault hooks (chell_fault_hook_add): handlers that may claim a
 * synchronous SIGBUS/SIGSEGV raised inside their own code (a copy from a
 * mapping whose file shrank, a chunk revoked by the manager). Append-only
 * and never shrinks: a slot is written before the count that publishes it
 * (release), and the trampoline reads the count (acquire) then the slots,
 * so a fault racing a registration sees either the old chain or the new
 * one, never a half-written slot. No lock: the trampoline runs in a signal
 * handler.
 */
static chell_fault_hook fault_hooks[CHELL_FAULT_HOOKS_MAX];
static _Atomic int fault_hook_count;
static pthread_mutex_t fault_hook_mutex = PTHREAD_MUTEX_INITIALIZER;
static bool faults_wrapped; /* the trampoline stays on SIGBUS/SIGSEGV */
/* a probe of an application pointer is running (see chell_user_check) */
static __thread volatile int tls_uguard;
static __thread void *tls_ujmp[5];

static bool is_fault_sig(int sig)
{
	return sig == SIGBUS || sig == SIGSEGV;
}

/* A fault nobody claimed, with the application at SIG_DFL or SIG_IGN: act as
 * the kernel would. */
static void fault_default(int sig, siginfo_t *si)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	if (si && si->si_code > 0) {
		/* a real fault: returning re-executes the instruction, which now
		 * kills the process with the right signal (even if ignored) */
		REAL(sigaction)(sig, &dfl, NULL);
		return;
	}
	if (app_act[sig].sa_handler == SIG_IGN)
		return; /* sent by someone and ignored */
	REAL(sigaction)(sig, &dfl, NULL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	CHELL_SC(SYS_tgkill, sys_getpid(), chell_tid(), sig, 0, 0, 0);
}

static void uguard_escape(ucontext_t *uc);

/* Offer a synchronous fault to each hook in registration order; the first
 * that claims it has handled it (or does not return). */
static bool fault_claimed(int sig, siginfo_t *si, void *uc)
{
	int n = atomic_load_explicit(&fault_hook_count, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (fault_hooks[i](sig, si, uc))
			return true;
	return false;
}

static void trampoline(int sig, siginfo_t *si, void *uc)
{
	if (is_fault_sig(sig) && si && si->si_code > 0 && tls_uguard)
		uguard_escape(uc); /* a probe of an application pointer: no return */
	if (is_fault_sig(sig) && si && si->si_code > 0 && fault_claimed(sig, si, uc))
		return; /* Chell's own copy faulted: it resumes and reports a short copy */
	if (chell_tls_crit > 0 && deferrable(sig, si)) {
		int saved = errno;
		defer(sig, si, uc);
		errno = saved;
		return;
	}
	struct sigaction *a = &app_act[sig];
	if (!(a->sa_flags & SA_SIGINFO) && (a->sa_handler == SIG_IGN || a->sa_handler == SIG_DFL)) {
		fault_default(sig, si); /* only fault signals are wrapped while at default */
		return;
	}
	if (is_fault_sig(sig) && (a->sa_flags & SA_RESETHAND)) {
		struct sigaction once = *a;
		memset(a, 0, sizeof(*a));
		a->sa_handler = SIG_DFL;
		if (once.sa_flags & SA_SIGINFO)
			once.sa_sigaction(sig, si, uc);
		else
			once.sa_handler(sig);
		return;
	}
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else
		a->sa_handler(sig);
}

/* Keep the trampoline installed for SIGBUS and SIGSEGV whatever the
 * application asks, so the hook sees faults first. */
static int install_fault_trampoline(int sig)
{
	struct sigaction k;
	memset(&k, 0, sizeof(k));
	k.sa_sigaction = trampoline;
	k.sa_mask = app_act[sig].sa_mask;
	k.sa_flags = SA_SIGINFO | (app_act[sig].sa_flags & (SA_ONSTACK | SA_RESTART | SA_NODEFER));
	return REAL(sigaction)(sig, &k, NULL);
}

/* Install the trampoline on SIGBUS and SIGSEGV for good (once per image). */
static void wrap_fault_signals(void)
{
	static const int sigs[] = {SIGBUS, SIGSEGV};
	faults_wrapped = true;
	for (int i = 0; i < 2; i++) {
		int sig = sigs[i];
		struct sigaction cur;
		if (REAL(sigaction)(sig, NULL, &cur) == 0 && !atomic_load(&wrapped[sig]))
			app_act[sig] = cur; /* what the application (or the default) has now */
		atomic_store(&wrapped[sig], 1);
		install_fault_trampoline(sig);
	}
}

CHELL_EXPORT int chell_fault_hook_add(chell_fault_hook hook)
{
	int r = 0;
	pthread_mutex_lock(&fault_hook_mutex);
	int n = atomic_load_explicit(&fault_hook_count, memory_order_relaxed), i;
	for (i = 0; i < n && fault_hooks[i] != hook; i++)
		;
	if (i == n) { /* not yet in the chain */
		if (n == CHELL_FAULT_HOOKS_MAX) {
			chell_log("fault hooks: all %d places taken (CHELL_FAULT_HOOKS_MAX)", n);
			r = -ENOSPC;
		} else {
			fault_hooks[n] = hook;
			atomic_store_explicit(&fault_hook_count, n + 1, memory_order_release);
		}
	}
	if (r == 0 && !faults_wrapped)
		wrap_fault_signals();
	pthread_mutex_unlock(&fault_hook_mutex);
	return r;
}

/* ------------------------------------------------- application pointers */

/*
 * Chell reads some arguments before the kernel would (a path to route it,
 * a struct flock, an iovec array) and fills some buffers itself (stat). The
 * kernel answers a bad pointer with EFAULT; a plain load in Chell would raise
 * SIGSEGV instead. So these arguments are probed first, under a guard: a
 * thread-local flag and a __builtin_setjmp buffer (a few stores, no system
 * call). A synchronous SIGSEGV/SIGBUS while the flag is set jumps back and
 * the probe reports -EFAULT; the caller then hands the whole call to the
 * kernel, which gives its own answer in its own order of checks (EBADF
 * before EFAULT, ENOENT before a bad stat buffer, ...). Asynchronous signals
 * are deferred during a probe (critical section), so an application handler
 * never runs inside the guard and its own faults are never mistaken for
 * ours. The trampoline is installed on SIGSEGV/SIGBUS at start-up in every
 * mode (chell_uaccess_init), so a probe never needs a system call.
 */
static void uguard_escape(ucontext_t *uc)
{
	tls_uguard = 0;
	/* leaving the handler by a jump: restore the mask it would have restored */
	pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
	__builtin_longjmp(tls_ujmp, 1);
}

void chell_uaccess_init(void)
{
	if (!faults_wrapped)
		wrap_fault_signals();
}

CHELL_EXPORT __attribute__((noinline, no_sanitize("address", "undefined"))) long
chell_user_strnlen(const char *s, size_t max)
{
	chell_crit_enter();
	if (__builtin_setjmp(tls_ujmp)) {
		chell_crit_leave();
		return -EFAULT;
	}
	tls_uguard = 1;
	__asm__ volatile("" ::: "memory"); /* the flag is set before the first load */
	/* glibc's strnlen reads aligned blocks that never cross into a page
	 * beyond the string's end or `max`: it faults exactly where the
	 * kernel's strncpy_from_user would. */
	size_t n = strnlen(s, max);
	__asm__ volatile("" ::: "memory");
	tls_uguard = 0;
	chell_crit_leave();
	return n < max ? (long)n : -ENAMETOOLONG;
}

CHELL_EXPORT __attribute__((noinline, no_sanitize("address", "undefined"))) int
chell_user_check(const void *p, size_t len, bool write)
{
	if (len == 0)
		return 0;
	uintptr_t a = (uintptr_t)p, last = a + len - 1;
	if (last < a)
		return -EFAULT; /* wraps around the address space */
	chell_crit_enter();
	if (__builtin_setjmp(tls_ujmp)) {
		chell_crit_leave();
		return -EFAULT;
	}
	tls_uguard = 1;
	__asm__ volatile("" ::: "memory");
	/* One byte per page. A write probe is an atomic add of zero: it needs
	 * write access like the kernel's copy_to_user, and leaves the byte as
	 * it is even if another thread stores to it meanwhile. */
	for (uintptr_t q = a;;) {
		if (write)
			__asm__ volatile("lock orb $0, (%0)" ::"r"(q) : "memory", "cc");
		else
			(void)*(volatile const char *)q;
		uintptr_t next = (q | 4095) + 1; /* the next page */
		if (next == 0 || next > last)
			break;
		q = next;
	}
	__asm__ volatile("" ::: "memory");
	tls_uguard = 0;
	chell_crit_leave();
	return 0;
}

void chell_signals_flush_pending(void)
{
	int saved = errno;
	sigset_t set = tls_deferred;
	sigemptyset(&tls_deferred);
	chell_tls_pending = 0;
	pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* the kernel delivers them now */
	errno = saved;
}

void chell_signals_after_fork_child(void)
{
	/* Pending signals are not inherited, but the mask is: undo our blocks. */
	if (chell_tls_pending) {
		sigset_t set = tls_deferred;
		sigemptyset(&tls_deferred);
		chell_tls_pending = 0;
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	}
	chell_tid_reset();
}

CHELL_EXPORT void chell_crit_enter(void)
{
	chell_tls_crit++;
	atomic_signal_fence(memory_order_seq_cst);
}

CHELL_EXPORT void chell_crit_leave(void)
{
	atomic_signal_fence(memory_order_seq_cst);
	if (--chell_tls_crit == 0 && unlikely(chell_tls_pending))
		chell_signals_flush_pending();
}

CHELL_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return REAL(sigaction)(sig, act, old);

	struct sigaction prev_app = app_act[sig];
	bool was_wrapped = atomic_load(&wrapped[sig]);
	struct sigaction kold;
	int r;
	if (act == NULL) {
		r = REAL(sigaction)(sig, NULL, &kold);
	} else if (faults_wrapped && is_fault_sig(sig)) {
		r = REAL(sigaction)(sig, NULL, &kold);
		app_act[sig] = *act;
		if (r == 0)
			r = install_fault_trampoline(sig);
	} else {
		bool wrap = act->sa_handler != SIG_DFL && act->sa_handler != SIG_IGN &&
			    !(act->sa_flags & SA_RESETHAND);
		if (wrap) {
			struct sigaction k = *act;
			k.sa_flags |= SA_SIGINFO;
			k.sa_sigaction = trampoline;
			/* publish the target before the kernel can call the trampoline */
			app_act[sig] = *act;
			atomic_store(&wrapped[sig], 1);
			r = REAL(sigaction)(sig, &k, &kold);
			if (r < 0) {
				app_act[sig] = prev_app;
				atomic_store(&wrapped[sig], was_wrapped);
			}
		} else {
			r = REAL(sigaction)(sig, act, &kold);
			if (r == 0)
				atomic_store(&wrapped[sig], 0);
		}
	}
	if (r == 0 && old) {
		*old = kold;
		if (was_wrapped && kold.sa_sigaction == trampoline)
			*old = prev_app; /* the application sees what it installed */
	}
	return r;
}

CHELL_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	/* glibc's signal() has BSD semantics: restart, handler stays installed. */
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

/* ------------------------------------------------------------------ locks */

static long futex(uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, w, op, val, ts, NULL, 0);
}

/* A holder is dead if its thread is gone or a zombie (kill(tid, 0) still
 * succeeds on a zombie that its parent has not reaped). */
static bool owner_dead(int32_t tid)
{
	if (tid <= 0)
		return false;
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)tid);
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd == -ENOENT || fd == -ESRCH;
	ssize_t n = sys_read(fd, buf, sizeof(buf) - 1);
	sys_close(fd);
	if (n <= 0)
		return true;
	buf[n] = 0;
	const char *p = strrchr(buf, ')'); /* the name may contain spaces and ')' */
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

CHELL_EXPORT void chell_lock_acquire(struct chell_lock *l)
{
	chell_crit_enter();
	pid_t me = chell_tid();
	if (atomic_load_explicit((_Atomic int32_t *)&l->owner, memory_order_relaxed) == me) {
		l->depth++;
		return;
	}
	_Atomic uint32_t *w = (_Atomic uint32_t *)&l->word;
	uint32_t expect = 0;
	if (!atomic_compare_exchange_strong(w, &expect, 1)) {
		int saved = errno;
		struct timespec ts = {0, 200 * 1000 * 1000};
		while (atomic_exchange(w, 2) != 0) {
			long r = futex(&l->word, FUTEX_WAIT, 2, &ts);
			if (r < 0 && errno == ETIMEDOUT) {
				int32_t o = atomic_load((_Atomic int32_t *)&l->owner);
				if (owner_dead(o) &&
				    atomic_compare_exchange_strong((_Atomic int32_t *)&l->owner, &o, me)) {
					/* the holder died inside a critical section: take over */
					chell_log("recovered a lock held by dead thread %d", o);
					atomic_store(w, 2);
					break;
				}
			}
		}
		errno = saved;
	}
	atomic_store_explicit((_Atomic int32_t *)&l->owner, me, memory_order_relaxed);
	l->depth = 1;
}

CHELL_EXPORT void chell_lock_release(struct chell_lock *l)
{
	if (--l->depth == 0) {
		atomic_store_explicit((_Atomic int32_t *)&l->owner, 0, memory_order_relaxed);
		if (atomic_exchange((_Atomic uint32_t *)&l->word, 0) == 2) {
			int saved = errno;
			futex(&l->word, FUTEX_WAKE, 1, NULL);
			errno = saved;
		}
	}
	chell_crit_leave();
}
