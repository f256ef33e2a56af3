/* SPDX-License-Identifier: MIT */
/*
 * Services the Nib gives handlers that own memory and threads
 * (chell/handler.h): the chain of fault hooks, the fork events, and
 * Chell's background threads. The test process runs under Chell
 * (CHELL_MODE=posix, CHELL_PATHS=/dev/shm/chell-unit-services).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

#define ROOT "/dev/shm/chell-unit-services"

/* ------------------------------------------------------------ fault hooks */

static __thread sigjmp_buf hook_jmp;
/* per hook (a, b): armed in this thread, asked, claimed */
static __thread volatile int armed[2];
static volatile int asked[2], claimed[2], app_got;

/* Claims the fault only when armed, as a real hook claims only a fault of
 * its own copy (a thread-local flag). */
static bool hook_n(int n)
{
	asked[n]++;
	if (!armed[n])
		return false;
	armed[n] = 0;
	claimed[n]++;
	siglongjmp(hook_jmp, n + 1);
}

static bool hook_a(int sig, siginfo_t *si, void *uc)
{
	return hook_n(0);
}

static bool hook_b(int sig, siginfo_t *si, void *uc)
{
	return hook_n(1);
}

static void app_segv(int sig, siginfo_t *si, void *uc)
{
	app_got++;
	siglongjmp(hook_jmp, 3);
}

static volatile unsigned char *noaccess_page(void)
{
	void *p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	return p;
}

static void reset_counts(void)
{
	asked[0] = asked[1] = claimed[0] = claimed[1] = app_got = 0;
}

/* Two hooks both stay registered (the second used to replace the first);
 * each claims only its own faults, and a fault neither claims reaches the
 * application's handler. */
static void fault_hooks_chain(void **state)
{
	assert_int_equal(chell_fault_hook_add(hook_a), 0);
	assert_int_equal(chell_fault_hook_add(hook_b), 0);
	assert_int_equal(chell_fault_hook_add(hook_a), 0); /* no second place */
	volatile unsigned char *p = noaccess_page();
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = app_segv;
	sa.sa_flags = SA_SIGINFO;
	assert_int_equal(sigaction(SIGSEGV, &sa, &old), 0);
	alarm(10);

	/* armed hook (-1: none), then who was asked and who got the fault */
	static const struct {
		int arm, asked_a, asked_b, claimed_a, claimed_b, app;
	} cases[] = {
		{0, 1, 0, 1, 0, 0},  /* a's: a asked once (registered twice), b never */
		{1, 1, 1, 0, 1, 0},  /* b's: a declines, b claims */
		{-1, 1, 1, 0, 0, 1}, /* nobody's: the application's handler */
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		reset_counts();
		if (cases[k].arm >= 0)
			armed[cases[k].arm] = 1;
		if (sigsetjmp(hook_jmp, 1) == 0) {
			(void)p[0];
			fail_msg("the faulting load returned");
		}
		assert_int_equal(asked[0], cases[k].asked_a);
		assert_int_equal(asked[1], cases[k].asked_b);
		assert_int_equal(claimed[0], cases[k].claimed_a);
		assert_int_equal(claimed[1], cases[k].claimed_b);
		assert_int_equal(app_got, cases[k].app);
	}
	alarm(0);
	assert_int_equal(sigaction(SIGSEGV, &old, NULL), 0);

	/* At SIG_DFL, a fault no hook claims kills the process as the kernel
	 * would. */
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);
		(void)p[0];
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSEGV);
	munmap((void *)p, 4096);
}

/* ------------------------------------------------------------ fork events */

#define MAXEV 16
static volatile int nev;
static int evs[MAXEV];
static long evargs[MAXEV];
static volatile int prepare_open_ok;

static void rec_event(enum chell_op ev, long arg)
{
	if (ev == CHELL_EV_FORK_PREPARE) {
		/* before Chell's own locks: a handler may still open and close
		 * routed files here (it would hang under the table lock) */
		int fd = open(ROOT "/prepare", O_CREAT | O_RDWR, 0600);
		prepare_open_ok = fd >= 0 && fdt_peek(fd) != NULL;
		if (fd >= 0)
			close(fd);
	}
	int i = nev;
	if (i < MAXEV) {
		evs[i] = ev;
		evargs[i] = arg;
	}
	nev = i + 1;
}

static const struct chell_handler ev_handler = {.name = "events", .proc_event = rec_event};

static int clone_fn(void *arg)
{
	int *pfd = arg;
	int rec[2 * MAXEV + 1];
	rec[0] = nev;
	for (int i = 0; i < nev && i < MAXEV; i++) {
		rec[1 + 2 * i] = evs[i];
		rec[2 + 2 * i] = (int)evargs[i];
	}
	(void)!write(pfd[1], rec, sizeof(rec));
	return 0;
}

/* What the child saw: its events up to now. */
static void child_events(int *pfd, int *out_n, int *out_ev, long *out_arg)
{
	int rec[2 * MAXEV + 1];
	assert_int_equal(read(pfd[0], rec, sizeof(rec)), (ssize_t)sizeof(rec));
	*out_n = rec[0];
	for (int i = 0; i < rec[0] && i < MAXEV; i++) {
		out_ev[i] = rec[1 + 2 * i];
		out_arg[i] = rec[2 + 2 * i];
	}
}

static void fork_events(void **state)
{
	/* process events reach every handler in use (stacks.c): ours alone */
	const struct chell_handler *saved = chell_handlers_in_use[0];
	int saved_n = chell_nhandlers_in_use;
	chell_handlers_in_use[0] = &ev_handler;
	chell_nhandlers_in_use = 1;
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	alarm(10);
	for (int how = 0; how < 2; how++) {
		nev = 0;
		prepare_open_ok = 0;
		pid_t pid;
		if (how == 0) {
			pid = fork();
			if (pid == 0) {
				clone_fn(pfd);
				_exit(0);
			}
		} else {
			static char stack[64 * 1024] __attribute__((aligned(16)));
			pid = clone(clone_fn, stack + sizeof(stack), SIGCHLD, pfd);
		}
		assert_true(pid > 0);
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st));
		int n, ev[MAXEV];
		long arg[MAXEV];
		child_events(pfd, &n, ev, arg);
		/* parent: prepare, then parent; child: prepare (copied), then child */
		assert_int_equal(nev, 2);
		assert_int_equal(evs[0], CHELL_EV_FORK_PREPARE);
		assert_int_equal(evs[1], CHELL_EV_FORK_PARENT);
		assert_int_equal(n, 2);
		assert_int_equal(ev[0], CHELL_EV_FORK_PREPARE);
		assert_int_equal(ev[1], CHELL_EV_FORK_CHILD);
		assert_int_equal(arg[1], getpid());
		assert_true(prepare_open_ok);
	}
	alarm(0);
	chell_handlers_in_use[0] = saved;
	chell_nhandlers_in_use = saved_n;
	close(pfd[0]);
	close(pfd[1]);
	unlink(ROOT "/prepare");
}

/* ------------------------------------------------------ background threads */

static _Atomic int starts;
static _Atomic pid_t ran_pid;
static _Atomic pid_t ran_tid;
static _Atomic int mask_ok;
static _Atomic int thr_fd = -1;
static int stop_pipe = -1; /* the thread writes 'S' here when it stops */

static void bg(struct chell_thread *t, void *arg)
{
	sigset_t m;
	pthread_sigmask(SIG_BLOCK, NULL, &m);
	int ok = 1;
	for (int s = 1; s < NSIG; s++) {
		if (s == SIGKILL || s == SIGSTOP || s == 32 || s == 33)
			continue; /* cannot be blocked / glibc's own */
		if (!sigismember(&m, s))
			ok = 0;
	}
	thr_fd = chell_thread_fd(t, open("/dev/null", O_RDONLY));
	ran_tid = (pid_t)syscall(SYS_gettid);
	mask_ok = ok;
	ran_pid = getpid();
	starts++;
	while (!chell_thread_wait(t, 1000000000ull))
		;
	if (stop_pipe >= 0)
		(void)!write(stop_pipe, "S", 1);
}

static void wait_started(int n)
{
	while (starts < n || ran_pid != getpid())
		usleep(1000);
}

/* A test thread, running (it made its descriptor) when this returns. */
static struct chell_thread *start_bg(void)
{
	starts = 0;
	struct chell_thread *t = chell_thread_start("test", bg, NULL);
	assert_non_null(t);
	wait_started(1);
	return t;
}

static int task_count(void)
{
	DIR *d = opendir("/proc/self/task");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static volatile pid_t usr1_tid;
static void on_usr1(int sig)
{
	usr1_tid = (pid_t)syscall(SYS_gettid);
}

/* The thread runs with every signal blocked: a process-directed signal
 * that the application's only thread has blocked waits for it, and is
 * never delivered on Chell's thread. Its descriptor is an internal one,
 * close-on-exec, and closed when the thread stops. */
static void thread_runs_signals_blocked(void **state)
{
	alarm(20);
	struct chell_thread *t = start_bg();
	assert_true(mask_ok);
	assert_int_equal(task_count(), 2);
	int fd = thr_fd;
	assert_true(fd >= 0);
	assert_true(chell_is_internal_fd(fd));
	assert_int_equal(fcntl(fd, F_GETFD), FD_CLOEXEC);

	signal(SIGUSR1, on_usr1);
	sigset_t one, old;
	sigemptyset(&one);
	sigaddset(&one, SIGUSR1);
	for (int i = 0; i < 20; i++) {
		usr1_tid = 0;
		pthread_sigmask(SIG_BLOCK, &one, &old);
		kill(getpid(), SIGUSR1);
		usleep(1000); /* room for a wrong delivery to happen */
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		while (!usr1_tid)
			usleep(100);
		assert_int_equal(usr1_tid, (pid_t)syscall(SYS_gettid));
	}
	signal(SIGUSR1, SIG_DFL);

	int p[2];
	assert_int_equal(pipe(p), 0);
	stop_pipe = p[1];
	chell_thread_stop(t);
	char c = 0;
	assert_int_equal(read(p[0], &c, 1), 1);
	assert_int_equal(c, 'S');
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(task_count(), 1);
	stop_pipe = -1;
	close(p[0]);
	close(p[1]);
	alarm(0);
}

/* In a forked child the thread runs again (threads do not survive fork);
 * before exec, and at exit or _exit, it is stopped (fn returns); a failed
 * exec starts it again. */
static void thread_across_fork_exec_exit(void **state)
{
	alarm(30);
	struct chell_thread *t = start_bg();
	int p[2];
	assert_int_equal(pipe(p), 0);
	for (int how = 0; how < 3; how++) {
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			stop_pipe = p[1];
			wait_started(2); /* restarted here, in the child */
			if (task_count() != 2)
				_exit(10);
			if (how == 0) {
				char *argv[] = {"/nonexistent/chell-test", NULL};
				execv(argv[0], argv); /* fails: the thread comes back */
				wait_started(3);
				if (task_count() != 2)
					_exit(11);
				dup2(open("/dev/null", O_WRONLY), 2); /* the test binary is no preload */
				execl("/bin/true", "true", (char *)NULL);
				_exit(12);
			}
			if (how == 1)
				exit(0);
			_exit(0);
		}
		int st;
		assert_int_equal(waitpid(pid, &st, 0), pid);
		assert_true(WIFEXITED(st));
		assert_int_equal(WEXITSTATUS(st), 0);
		/* stopped once before the failed exec, once at the end */
		char buf[4];
		int want = how == 0 ? 2 : 1;
		assert_int_equal(read(p[0], buf, (size_t)want), want);
		assert_memory_equal(buf, "SS", (size_t)want);
	}
	close(p[1]);
	char c;
	assert_int_equal(read(p[0], &c, 1), 0); /* nothing more */
	close(p[0]);
	assert_int_equal(ran_pid, getpid()); /* the parent's still runs */
	chell_thread_stop(t);
	alarm(0);
}

int main(void)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	mkdir(ROOT, 0700);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fault_hooks_chain),
		cmocka_unit_test(fork_events),
		cmocka_unit_test(thread_runs_signals_blocked),
		cmocka_unit_test(thread_across_fork_exec_exit),
	};
	int failed = cmocka_run_group_tests_name("services", tests, NULL, NULL);
	rmdir(ROOT);
	return failed;
}
