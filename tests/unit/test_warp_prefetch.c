/* WARP's prefetch queue and background thread (src/handlers/warp/
 * prefetch.c), under Chell (the Nib's threads): hints from several threads
 * all run or are counted as dropped, post never blocks on a full queue,
 * forget drops queued hints and waits for a call in progress, the thread
 * runs with signals blocked and comes back in a forked child. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "handlers/warp/brain.h"
#include "nib.h"

#define NFILES 4
static int files[NFILES];            /* their addresses are the "files" */
static _Atomic uint64_t calls[NFILES];
static _Atomic uint64_t node_sum[NFILES];
static _Atomic int gate_closed;      /* the callback waits while set */
static _Atomic int in_call;          /* the callback is running */
static _Atomic int mask_ok = 1;
static _Atomic int bad_args;

static int file_index(void *f)
{
	for (int i = 0; i < NFILES; i++)
		if (f == &files[i])
			return i;
	return -1;
}

static void cb(void *file, uint32_t node, enum warp_state want)
{
	int i = file_index(file);
	if (i < 0 || want != (enum warp_state)(node % WARP_NSTATES))
		bad_args++;
	sigset_t m;
	pthread_sigmask(SIG_BLOCK, NULL, &m);
	if (!sigismember(&m, SIGUSR1) || !sigismember(&m, SIGTERM))
		mask_ok = 0;
	in_call = 1;
	while (gate_closed)
		usleep(200);
	if (i >= 0) {
		node_sum[i] += node;
		calls[i]++;
	}
	in_call = 0;
}

static uint64_t total_calls(void)
{
	uint64_t n = 0;
	for (int i = 0; i < NFILES; i++)
		n += calls[i];
	return n;
}

static void reset(void)
{
	for (int i = 0; i < NFILES; i++)
		calls[i] = node_sum[i] = 0;
}

struct poster {
	int idx, n;
	uint64_t ok, dropped;
};

static void *post_many(void *arg)
{
	struct poster *p = arg;
	for (int k = 0; k < p->n; k++) {
		if (warp_prefetch_post(&files[p->idx], (uint32_t)k, (enum warp_state)(k % WARP_NSTATES)))
			p->ok++;
		else
			p->dropped++;
		if (k % 64 == 0)
			usleep(50); /* give the thread room: most hints fit */
	}
	return NULL;
}

static void start(void **state)
{
	assert_int_equal(warp_prefetch_start(cb), 0);
	assert_int_equal(warp_prefetch_start(cb), 0); /* idempotent */
	assert_false(warp_prefetch_post(NULL, 0, WARP_MAPPED));
}

/* Four threads post 20000 hints each: each one either runs exactly once,
 * with its own arguments, or is counted as dropped. */
static void many_posters(void **state)
{
	alarm(60);
	reset();
	struct warp_prefetch_counts before, after;
	warp_prefetch_counts(&before);
	pthread_t th[NFILES];
	struct poster p[NFILES];
	for (int i = 0; i < NFILES; i++) {
		p[i] = (struct poster){.idx = i, .n = 20000};
		pthread_create(&th[i], NULL, post_many, &p[i]);
	}
	for (int i = 0; i < NFILES; i++)
		pthread_join(th[i], NULL);
	uint64_t ok = 0, dropped = 0;
	for (int i = 0; i < NFILES; i++)
		ok += p[i].ok, dropped += p[i].dropped;
	while (total_calls() < ok)
		usleep(500);
	/* The thread counts a hint as run after its callback returns: wait for
	 * the counter too (a loaded machine can stall it past any fixed sleep;
	 * the alarm bounds the wait). */
	do {
		usleep(500);
		warp_prefetch_counts(&after);
	} while (after.run - before.run < ok);
	usleep(5000);
	warp_prefetch_counts(&after);
	assert_int_equal(total_calls(), ok);
	assert_int_equal(after.posted - before.posted, ok);
	assert_int_equal(after.dropped - before.dropped, dropped);
	assert_int_equal(after.run - before.run, ok);
	assert_int_equal(bad_args, 0);
	assert_true(mask_ok);
	printf("posted %llu, dropped %llu\n", (unsigned long long)ok, (unsigned long long)dropped);
	alarm(0);
}

/* A full queue drops (post returns false at once), never blocks. */
static void full_queue_drops(void **state)
{
	alarm(60);
	reset();
	gate_closed = 1;
	assert_true(warp_prefetch_post(&files[0], 0, WARP_NORMAL));
	while (!in_call)
		usleep(200);
	int ok = 0, dropped = 0;
	for (int k = 0; k < 2000; k++)
		warp_prefetch_post(&files[1], (uint32_t)k, (enum warp_state)(k % WARP_NSTATES)) ? ok++ : dropped++;
	assert_true(dropped > 0);
	assert_true(ok > 0 && ok < 2000);
	gate_closed = 0;
	while (total_calls() < (uint64_t)ok + 1)
		usleep(500);
	assert_int_equal(calls[1], ok);
	alarm(0);
}

struct forget_arg {
	_Atomic int returned;
};

static void *forget_it(void *arg)
{
	struct forget_arg *a = arg;
	warp_prefetch_forget(&files[2]);
	a->returned = 1;
	return NULL;
}

/* forget(file) waits for the call in progress on file and drops its
 * queued hints; the other files' hints still run. */
static void forget_in_flight(void **state)
{
	alarm(60);
	reset();
	gate_closed = 1;
	assert_true(warp_prefetch_post(&files[2], 1, WARP_MAPPED));
	while (!in_call)
		usleep(200);
	for (int k = 0; k < 50; k++) {
		assert_true(warp_prefetch_post(&files[2], (uint32_t)k, (enum warp_state)(k % WARP_NSTATES)));
		assert_true(warp_prefetch_post(&files[3], (uint32_t)k, (enum warp_state)(k % WARP_NSTATES)));
	}
	struct forget_arg a = {0};
	pthread_t th;
	pthread_create(&th, NULL, forget_it, &a);
	usleep(20000);
	assert_int_equal(a.returned, 0); /* the call on files[2] is still running */
	assert_int_equal(calls[2], 0);
	gate_closed = 0;
	pthread_join(th, NULL);
	assert_int_equal(calls[2], 1); /* the one in flight completed before forget returned */
	while (calls[3] < 50)
		usleep(500);
	usleep(10000);
	assert_int_equal(calls[2], 1); /* the 50 queued ones were dropped */
	assert_int_equal(calls[3], 50);
	/* forget of a file with nothing queued or running returns at once */
	warp_prefetch_forget(&files[0]);
	alarm(0);
}

/* Each post wakes the sleeping thread: 300 post-then-wait rounds finish
 * well within the guard (the thread's own timeout is a second). */
static void post_wakes_thread(void **state)
{
	alarm(60);
	reset();
	for (int k = 0; k < 300; k++) {
		assert_true(warp_prefetch_post(&files[0], 3, WARP_NORMAL));
		while (calls[0] < (uint64_t)k + 1)
			usleep(100);
		usleep(300); /* let it fall asleep again */
	}
	alarm(0);
}

/* In a forked child the thread comes back and runs the child's hints,
 * also when the parent forked while a call was in progress. */
#if defined(__SANITIZE_ADDRESS__)
static void *open_gate_later(void *arg)
{
	(void)arg;
	usleep(50000);
	gate_closed = 0;
	return NULL;
}
#endif

static void across_fork(void **state)
{
	alarm(60);
	reset();
	gate_closed = 1;
	assert_true(warp_prefetch_post(&files[1], 5, WARP_BUFFERED)); /* 5 % 3 == buffered */
	while (!in_call)
		usleep(200);
#if defined(__SANITIZE_ADDRESS__)
	/* Sanitizer builds stop Chell's threads before a fork and wait for the
	 * call in progress (src/nib/threads.c: ASan's allocator is not
	 * fork-safe): the gate must open for the fork to go on. */
	pthread_t opener;
	pthread_create(&opener, NULL, open_gate_later, NULL);
	pthread_detach(opener);
#endif
	pid_t pid = fork();
	if (pid == 0) {
		gate_closed = 0;
		in_call = 0;
		uint64_t base = calls[0];
		/* the parent's thread was inside a call on files[1]: no wait here */
		warp_prefetch_forget(&files[1]);
		for (int k = 0; k < 100; k++)
			if (!warp_prefetch_post(&files[0], (uint32_t)k, (enum warp_state)(k % WARP_NSTATES)))
				_exit(3);
		for (int w = 0; w < 20000 && calls[0] < base + 100; w++)
			usleep(500);
		if (calls[0] != base + 100 || bad_args) {
			struct warp_prefetch_counts c;
			warp_prefetch_counts(&c);
			fprintf(stderr, "child: calls %llu of %llu, posted %llu run %llu dropped %llu bad %d\n",
				(unsigned long long)(calls[0] - base), 100ull, (unsigned long long)c.posted,
				(unsigned long long)c.run, (unsigned long long)c.dropped, (int)bad_args);
			_exit(4);
		}
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	gate_closed = 0;
	while (calls[1] < 1)
		usleep(500);
	alarm(0);
}

int main(void)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(start),
		cmocka_unit_test(many_posters),
		cmocka_unit_test(full_queue_drops),
		cmocka_unit_test(forget_in_flight),
		cmocka_unit_test(post_wakes_thread),
		cmocka_unit_test(across_fork),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
