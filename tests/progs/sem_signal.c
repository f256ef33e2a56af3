/* SPDX-License-Identifier: MIT */
/*
 * sem_signal DIR - signal handlers and file I/O.
 *
 * Part 1: dispositions. Handlers installed with signal() and with
 * sigaction(SA_SIGINFO) must be reported back by sigaction() exactly as the
 * program installed them (a library that wraps handlers must not leak its
 * wrapper), SA_RESETHAND must reset, the signal must be blocked inside its
 * handler, siginfo must be genuine.
 *
 * Part 2: reentrancy. For about a second a second thread fires SIGUSR1 at
 * the main thread in a tight loop while an interval timer fires SIGALRM, and
 * the handler uses read/write/lseek/pread on the very descriptor the main
 * loop is hammering with lseek+write / lseek+read. The handler saves and
 * restores the offset, so for the interrupted thread its calls are
 * invisible: main's data must always land where it was aimed. It must
 * finish (no deadlock: the pytest timeout guards that) with a deterministic
 * final content.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include "sem_common.h"

/* ---- part 1 ---- */

static volatile sig_atomic_t h1_calls, h1_self_blocked, h2_calls, h2_info_ok, h3_calls;

static void h1(int sig)
{
	sigset_t cur;
	sigprocmask(SIG_SETMASK, NULL, &cur);
	h1_self_blocked = sigismember(&cur, sig);
	h1_calls++;
}

static void h2(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	h2_info_ok = si->si_signo == sig && si->si_code == SI_TKILL && si->si_pid == getpid();
	h2_calls++;
}

static void h3(int sig)
{
	(void)sig;
	h3_calls++;
}

static void hammer_handler(int sig);

static const char *hname(void *p)
{
	if (p == (void *)SIG_DFL)
		return "SIG_DFL";
	if (p == (void *)SIG_IGN)
		return "SIG_IGN";
	if (p == (void *)SIG_ERR)
		return "SIG_ERR";
	if (p == (void *)h1)
		return "h1";
	if (p == (void *)h2)
		return "h2";
	if (p == (void *)h3)
		return "h3";
	if (p == (void *)hammer_handler)
		return "hammer_handler";
	return "SOMETHING-ELSE";
}

static void query(const char *what, int sig)
{
	struct sigaction q;
	if (sigaction(sig, NULL, &q) < 0) {
		say("query %s: -1 %s\n", what, ename(errno));
		return;
	}
	void *h = (q.sa_flags & SA_SIGINFO) ? (void *)q.sa_sigaction : (void *)q.sa_handler;
	say("query %s: handler=%s SIGINFO=%d RESTART=%d RESETHAND=%d NODEFER=%d mask(USR1)=%d\n",
	    what, hname(h), !!(q.sa_flags & SA_SIGINFO), !!(q.sa_flags & SA_RESTART),
	    !!(q.sa_flags & SA_RESETHAND), !!(q.sa_flags & SA_NODEFER),
	    sigismember(&q.sa_mask, SIGUSR1));
}

static void dispositions(void)
{
	say("# dispositions\n");
	query("initial USR2", SIGUSR2);
	say("signal(USR2, h1) returned %s\n", hname((void *)signal(SIGUSR2, h1)));
	query("after signal()", SIGUSR2);
	T(raise(SIGUSR2));
	say("h1 calls=%d blocked-inside=%d\n", (int)h1_calls, (int)h1_self_blocked);
	say("signal(USR2, h1) again returned %s\n", hname((void *)signal(SIGUSR2, h1)));

	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = h2;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR1);
	T(sigaction(SIGUSR2, &sa, &old));
	say("old handler %s\n", hname((void *)old.sa_handler));
	query("after SA_SIGINFO", SIGUSR2);
	T(raise(SIGUSR2));
	say("h2 calls=%d siginfo ok=%d\n", (int)h2_calls, (int)h2_info_ok);

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = h3;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	T(sigaction(SIGUSR2, &sa, &old));
	say("old handler %s (SIGINFO=%d)\n",
	    hname((old.sa_flags & SA_SIGINFO) ? (void *)old.sa_sigaction : (void *)old.sa_handler),
	    !!(old.sa_flags & SA_SIGINFO));
	query("SA_RESETHAND installed", SIGUSR2);
	T(raise(SIGUSR2));
	say("h3 calls=%d\n", (int)h3_calls);
	query("after the reset", SIGUSR2);

	say("signal(USR2, SIG_IGN) returned %s\n", hname((void *)signal(SIGUSR2, SIG_IGN)));
	T(raise(SIGUSR2)); /* ignored: we survive */
	query("ignored", SIGUSR2);
	say("signal(USR2, SIG_DFL) returned %s\n", hname((void *)signal(SIGUSR2, SIG_DFL)));

	T(sigaction(SIGKILL, &sa, NULL));
	T(sigaction(SIGSTOP, &sa, NULL));
	T(sigaction(0, &sa, NULL));
	T(sigaction(1000, NULL, &old));
	errno = 0;
	void *prev = (void *)signal(SIGKILL, h1);
	int e = errno;
	say("signal(SIGKILL, h1) = %s %s\n", hname(prev), ename(e));

	sigset_t cur;
	sigprocmask(SIG_SETMASK, NULL, &cur);
	say("blocked in main: USR1=%d USR2=%d ALRM=%d\n", sigismember(&cur, SIGUSR1),
	    sigismember(&cur, SIGUSR2), sigismember(&cur, SIGALRM));
}

/* ---- part 2 ---- */

enum { HREGION = 64, HSLOT = 16, SLOTS = (4096 - HREGION) / HSLOT };
static int hfd = -1;
static volatile sig_atomic_t handled, handler_errors, stop;

static void slot_record(char *rec, int slot)
{
	snprintf(rec, HSLOT + 1, "slot%04d-%07d", slot % 10000, slot * 7919 % 10000000);
}

static void hammer_handler(int sig)
{
	(void)sig;
	int saved_errno = errno;
	static const char hrec[HSLOT + 1] = "HANDLER-HANDLER!";
	char buf[HSLOT];
	off_t cur = lseek(hfd, 0, SEEK_CUR);
	int k = (int)(handled % (HREGION / HSLOT));
	/* what is there is either the initial fill or the handler record */
	if (pread(hfd, buf, HSLOT, (off_t)k * HSLOT) != HSLOT ||
	    (memcmp(buf, hrec, HSLOT) != 0 && buf[0] != '.'))
		handler_errors++;
	if (lseek(hfd, (off_t)k * HSLOT, SEEK_SET) != (off_t)k * HSLOT ||
	    write(hfd, hrec, HSLOT) != HSLOT)
		handler_errors++;
	if (lseek(hfd, (off_t)k * HSLOT, SEEK_SET) != (off_t)k * HSLOT ||
	    read(hfd, buf, HSLOT) != HSLOT || memcmp(buf, hrec, HSLOT) != 0)
		handler_errors++;
	if (lseek(hfd, cur, SEEK_SET) != cur)
		handler_errors++;
	handled++;
	errno = saved_errno;
}

static void *sender(void *arg)
{
	pthread_t target = *(pthread_t *)arg;
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* the timer's SIGALRM goes to main */
	struct timespec t0, now, pause = {0, 20000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		pthread_kill(target, SIGUSR1);
		nanosleep(&pause, NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) < 1000000000L);
	stop = 1;
	return NULL;
}

static void reentrancy(void)
{
	say("# handler uses the descriptor the main loop is hammering\n");
	hfd = (int)T(open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	char fill[4096];
	memset(fill, '.', sizeof fill);
	T(write(hfd, fill, sizeof fill));

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = hammer_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	T(sigaction(SIGUSR1, &sa, NULL));
	T(sigaction(SIGALRM, &sa, NULL));
	query("USR1", SIGUSR1);

	/* The sender must never run the handler: a handler on another thread
	 * would race the main loop on the shared offset, which no file system
	 * serialises. A new thread starts with its creator's mask, so block
	 * both signals around pthread_create; the sender's own sigmask call
	 * alone would leave a window in which the timer's process-directed
	 * SIGALRM can land on it (seen about once in 50 loaded runs). */
	sigset_t both, before;
	sigemptyset(&both);
	sigaddset(&both, SIGUSR1);
	sigaddset(&both, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &both, &before);
	pthread_t self = pthread_self(), th;
	pthread_create(&th, NULL, sender, &self);
	pthread_sigmask(SIG_SETMASK, &before, NULL);
	struct itimerval it = {{0, 500}, {0, 500}};
	T(setitimer(ITIMER_REAL, &it, NULL));

	long mismatches = 0, misplaced = 0, passes = 0;
	char rec[HSLOT + 1], buf[HSLOT];
	while (!stop || passes < 2) {
		for (int s = 0; s < SLOTS; s++) {
			off_t pos = HREGION + (off_t)s * HSLOT;
			slot_record(rec, s);
			if (lseek(hfd, pos, SEEK_SET) != pos)
				misplaced++;
			if (write(hfd, rec, HSLOT) != HSLOT)
				mismatches++;
			if (lseek(hfd, 0, SEEK_CUR) != pos + HSLOT)
				misplaced++;
			if (lseek(hfd, pos, SEEK_SET) != pos || read(hfd, buf, HSLOT) != HSLOT ||
			    memcmp(buf, rec, HSLOT) != 0)
				mismatches++;
			if (pread(hfd, buf, HSLOT, pos) != HSLOT || memcmp(buf, rec, HSLOT) != 0)
				mismatches++;
		}
		passes++;
	}
	pthread_join(th, NULL);
	struct itimerval off = {{0, 0}, {0, 0}};
	T(setitimer(ITIMER_REAL, &off, NULL));
	/* The scenario is only meaningful if the handler really interrupted the loop. */
	say("more than 100 signals handled while hammering: %d\n", handled > 100);
	/* Make sure every handler slot was written at least once. */
	for (int i = 0; i < HREGION / HSLOT; i++)
		raise(SIGUSR1);
	say("handled >= 4: %d\n", handled >= 4);
	say("handler errors %d, main mismatches %ld, misplaced %ld\n", (int)handler_errors, mismatches,
	    misplaced);
	query("USR1 after", SIGUSR1);
	query("ALRM after", SIGALRM);
	OFF(hfd);
	T(close(hfd));
	sem_content("f");
	say("verdict: %s\n", handler_errors == 0 && mismatches == 0 && misplaced == 0 ? "OK" : "BROKEN");
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	dispositions();
	reentrancy();
	return 0;
}
