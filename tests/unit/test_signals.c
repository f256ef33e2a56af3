/* SPDX-License-Identifier: MIT */
/*
 * Signal deferral: application handlers installed with sigaction()/signal()
 * are wrapped; inside a Chell critical section an asynchronous signal is held
 * back and delivered, with its original siginfo, when the section ends.
 * Synchronous faults are never held back. sigaction() reports what the
 * application installed, not the wrapper.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

#define MAXREC 64
static volatile sig_atomic_t nrec;
static struct {
	int sig;
	int code;
	int value;
	pid_t pid;
	pid_t tid;
	int crit; /* chell_tls_crit when the handler ran */
} rec[MAXREC];

static void on_info(int sig, siginfo_t *si, void *uc)
{
	int i = nrec;
	if (i < MAXREC) {
		rec[i].sig = sig;
		rec[i].code = si->si_code;
		rec[i].value = si->si_value.sival_int;
		rec[i].pid = si->si_pid;
		rec[i].tid = (pid_t)syscall(SYS_gettid);
		rec[i].crit = chell_tls_crit;
	}
	nrec = i + 1;
}

static void on_plain(int sig)
{
	int i = nrec;
	if (i < MAXREC) {
		rec[i].sig = sig;
		rec[i].crit = chell_tls_crit;
	}
	nrec = i + 1;
}

static void install(int sig, void (*fn)(int, siginfo_t *, void *), int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fn;
	sa.sa_flags = SA_SIGINFO | flags;
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(sig, &sa, NULL), 0);
}

static void restore_default(int sig)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	assert_int_equal(sigaction(sig, &sa, NULL), 0);
}

/* What the kernel really has installed (bypassing the wrapper). */
static void kernel_action(int sig, void **handler, unsigned long *flags)
{
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} k;
	assert_int_equal(syscall(SYS_rt_sigaction, sig, NULL, &k, 8), 0);
	*handler = k.handler;
	*flags = k.flags;
}

static int reset(void **state)
{
	nrec = 0;
	memset(rec, 0, sizeof(rec));
	return 0;
}

/* ----------------------------------------------------------------- tests */

static void runs_immediately_outside_section(void **state)
{
	install(SIGUSR1, on_info, 0);
	assert_int_equal(raise(SIGUSR1), 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].sig, SIGUSR1);
	assert_int_equal(rec[0].code, SI_TKILL);
	assert_int_equal(rec[0].crit, 0);
	restore_default(SIGUSR1);
}

static void deferred_sigqueue_keeps_siginfo(void **state)
{
	install(SIGUSR1, on_info, 0);
	chell_crit_enter();
	union sigval v = {.sival_int = 4242};
	assert_int_equal(pthread_sigqueue(pthread_self(), SIGUSR1, v), 0);
	int during = nrec;
	chell_crit_leave();
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].sig, SIGUSR1);
	assert_int_equal(rec[0].code, SI_QUEUE);
	assert_int_equal(rec[0].value, 4242);
	assert_int_equal(rec[0].pid, getpid());
	assert_int_equal(rec[0].crit, 0); /* the handler runs outside the section */
	restore_default(SIGUSR1);
}

static void deferred_until_outermost_leave(void **state)
{
	install(SIGUSR2, on_info, 0);
	chell_crit_enter();
	chell_crit_enter();
	assert_int_equal(raise(SIGUSR2), 0);
	chell_crit_leave();
	int inner = nrec;
	chell_crit_leave();
	assert_int_equal(inner, 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].code, SI_TKILL);
	restore_default(SIGUSR2);
}

/* Standard signals coalesce while held, as they do while blocked. */
static void standard_signals_coalesce(void **state)
{
	install(SIGUSR1, on_info, 0);
	chell_crit_enter();
	raise(SIGUSR1);
	raise(SIGUSR1);
	raise(SIGUSR1);
	int during = nrec;
	chell_crit_leave();
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 1);
	restore_default(SIGUSR1);
}

/* Real-time signals queue: each one is delivered, in order, with its value. */
static void realtime_signals_queue_in_order(void **state)
{
	int sig = SIGRTMIN + 1;
	install(sig, on_info, 0);
	chell_crit_enter();
	for (int i = 0; i < 5; i++) {
		union sigval v = {.sival_int = 100 + i};
		assert_int_equal(sigqueue(getpid(), sig, v), 0);
	}
	int during = nrec;
	chell_crit_leave();
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 5);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(rec[i].sig, sig);
		assert_int_equal(rec[i].code, SI_QUEUE);
		assert_int_equal(rec[i].value, 100 + i);
	}
	restore_default(sig);
}

/* The kernel queues real-time signals up to RLIMIT_SIGPENDING (thousands);
 * holding them back must not lose any. */
static void many_realtime_signals_not_lost(void **state)
{
	int sig = SIGRTMIN + 2;
	install(sig, on_info, 0);
	enum { N = 40 };
	chell_crit_enter();
	for (int i = 0; i < N; i++) {
		union sigval v = {.sival_int = i};
		assert_int_equal(sigqueue(getpid(), sig, v), 0);
	}
	chell_crit_leave();
	int got = nrec;
	restore_default(sig);
	assert_int_equal(got, N);
	for (int i = 0; i < N; i++)
		assert_int_equal(rec[i].value, i);
}

/* A kernel-generated siginfo (SIGCHLD from an exiting child) survives the
 * deferral with its code and sender. */
static void deferred_sigchld(void **state)
{
	install(SIGCHLD, on_info, 0);
	chell_crit_enter();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(7);
	siginfo_t si;
	/* wait for the exit without reaping, so the signal has been sent */
	assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	usleep(20 * 1000);
	int during = nrec;
	chell_crit_leave();
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	restore_default(SIGCHLD);
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].sig, SIGCHLD);
	assert_int_equal(rec[0].code, CLD_EXITED);
	assert_int_equal(rec[0].pid, pid);
}

/* A signal aimed at a thread inside a section is delivered to that thread. */
struct thr {
	volatile int in_section;
	volatile int go;
	volatile int during;
	pid_t tid;
};

static void *section_thread(void *p)
{
	struct thr *t = p;
	t->tid = (pid_t)syscall(SYS_gettid);
	chell_crit_enter();
	t->in_section = 1;
	while (!t->go)
		usleep(1000);
	usleep(20 * 1000);
	t->during = nrec;
	chell_crit_leave();
	return NULL;
}

static void deferred_to_same_thread(void **state)
{
	install(SIGUSR1, on_info, 0);
	struct thr t = {0};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, section_thread, &t), 0);
	while (!t.in_section)
		usleep(1000);
	union sigval v = {.sival_int = 9};
	assert_int_equal(pthread_sigqueue(th, SIGUSR1, v), 0);
	t.go = 1;
	pthread_join(th, NULL);
	restore_default(SIGUSR1);
	assert_int_equal(t.during, 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].tid, t.tid);
	assert_int_equal(rec[0].value, 9);
}

/* A real fault inside a section must run its handler at once (returning
 * would re-execute the faulting instruction forever). alarm() turns a hang
 * into a failure. */
static sigjmp_buf fault_jmp;
static volatile int fault_crit;
static void on_segv(int sig, siginfo_t *si, void *uc)
{
	fault_crit = chell_tls_crit;
	siglongjmp(fault_jmp, 1);
}

static void synchronous_fault_not_deferred(void **state)
{
	install(SIGSEGV, on_segv, SA_NODEFER);
	alarm(5);
	int crit = chell_tls_crit;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		chell_crit_enter();
		volatile uintptr_t addr = 16; /* unmapped page zero */
		*(volatile int *)addr = 1;
		fail_msg("the faulting store returned");
	}
	alarm(0);
	assert_int_equal(fault_crit, crit + 1); /* it ran inside the section */
	chell_crit_leave();
	restore_default(SIGSEGV);
}

/* raise(SIGSEGV) is asynchronous (si_code SI_TKILL): it may wait. */
static void raised_sigsegv_is_deferred(void **state)
{
	install(SIGSEGV, on_info, 0);
	chell_crit_enter();
	raise(SIGSEGV);
	int during = nrec;
	chell_crit_leave();
	restore_default(SIGSEGV);
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].code, SI_TKILL);
}

static void sigaction_reports_application_handler(void **state)
{
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_info;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR2);
	assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);

	/* the kernel runs Chell's trampoline ... */
	void *kh;
	unsigned long kf;
	kernel_action(SIGUSR1, &kh, &kf);
	assert_ptr_not_equal(kh, (void *)on_info);
	/* ... but the application is told what it installed */
	memset(&old, 0, sizeof(old));
	assert_int_equal(sigaction(SIGUSR1, NULL, &old), 0);
	assert_ptr_equal(old.sa_sigaction, on_info);
	assert_true(old.sa_flags & SA_SIGINFO);
	assert_true(old.sa_flags & SA_RESTART);
	assert_true(sigismember(&old.sa_mask, SIGUSR2));

	/* replacing it returns the previous application handler */
	struct sigaction plain;
	memset(&plain, 0, sizeof(plain));
	plain.sa_handler = on_plain;
	sigemptyset(&plain.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &plain, &old), 0);
	assert_ptr_equal(old.sa_sigaction, on_info);
	assert_int_equal(sigaction(SIGUSR1, NULL, &old), 0);
	assert_ptr_equal(old.sa_handler, on_plain);
	assert_false(old.sa_flags & SA_SIGINFO); /* not the trampoline's flags */
	/* the plain handler is wrapped too, and called with the signal number */
	raise(SIGUSR1);
	assert_int_equal(nrec, 1);
	assert_int_equal(rec[0].sig, SIGUSR1);

	/* SIG_DFL goes straight to the kernel; the old value is still the app's */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	assert_ptr_equal(old.sa_handler, on_plain);
	assert_int_equal(sigaction(SIGUSR1, NULL, &old), 0);
	assert_ptr_equal(old.sa_handler, SIG_DFL);
	kernel_action(SIGUSR1, &kh, &kf);
	assert_ptr_equal(kh, (void *)SIG_DFL);
}

static void signal_function_semantics(void **state)
{
	assert_ptr_equal(signal(SIGUSR2, on_plain), SIG_DFL);
	assert_ptr_equal(signal(SIGUSR2, SIG_IGN), on_plain);
	assert_ptr_equal(signal(SIGUSR2, on_plain), SIG_IGN);
	struct sigaction old;
	assert_int_equal(sigaction(SIGUSR2, NULL, &old), 0);
	assert_ptr_equal(old.sa_handler, on_plain);
	/* BSD semantics: restartable, and the handler stays after it runs */
	assert_true(old.sa_flags & SA_RESTART);
	assert_false(old.sa_flags & SA_RESETHAND);
	raise(SIGUSR2);
	raise(SIGUSR2);
	assert_int_equal(nrec, 2);
	assert_ptr_equal(signal(SIGUSR2, SIG_DFL), on_plain);
}

/* A one-shot handler is installed as is: after it runs the kernel resets the
 * disposition, which a wrapper could not reproduce. */
static void resethand_installed_untouched(void **state)
{
	install(SIGUSR2, on_info, SA_RESETHAND);
	void *kh;
	unsigned long kf;
	kernel_action(SIGUSR2, &kh, &kf);
	assert_ptr_equal(kh, (void *)on_info);
	assert_true(kf & SA_RESETHAND);
	struct sigaction old;
	assert_int_equal(sigaction(SIGUSR2, NULL, &old), 0);
	assert_ptr_equal(old.sa_sigaction, on_info);
	raise(SIGUSR2);
	assert_int_equal(nrec, 1);
	assert_int_equal(sigaction(SIGUSR2, NULL, &old), 0);
	assert_ptr_equal(old.sa_handler, SIG_DFL);
}

/* A lock is a critical section: signals wait for its release. */
static void lock_defers_signals(void **state)
{
	install(SIGUSR1, on_info, 0);
	struct chell_lock *l = chell_shared_area("unit-signals-lock", sizeof(*l));
	assert_non_null(l);
	chell_lock_acquire(l);
	raise(SIGUSR1);
	int during = nrec;
	chell_lock_release(l);
	restore_default(SIGUSR1);
	assert_int_equal(during, 0);
	assert_int_equal(nrec, 1);
}

/* Signals held back in the parent at fork time belong to the parent only. */
static void pending_not_inherited_by_fork_child(void **state)
{
	install(SIGUSR1, on_info, 0);
	chell_crit_enter();
	raise(SIGUSR1);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int pend = chell_tls_pending;
		chell_crit_leave();
		_exit(pend == 0 && nrec == 0 ? 0 : 1);
	}
	chell_crit_leave();
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	restore_default(SIGUSR1);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(nrec, 1);
}

#define T(f) cmocka_unit_test_setup(f, reset)

int main(void)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		T(runs_immediately_outside_section),
		T(deferred_sigqueue_keeps_siginfo),
		T(deferred_until_outermost_leave),
		T(standard_signals_coalesce),
		T(realtime_signals_queue_in_order),
		T(many_realtime_signals_not_lost),
		T(deferred_sigchld),
		T(deferred_to_same_thread),
		T(synchronous_fault_not_deferred),
		T(raised_sigsegv_is_deferred),
		T(sigaction_reports_application_handler),
		T(signal_function_semantics),
		T(resethand_installed_untouched),
		T(lock_defers_signals),
		T(pending_not_inherited_by_fork_child),
	};
	return cmocka_run_group_tests_name("signals", tests, NULL, NULL);
}
