/* SPDX-License-Identifier: MIT */
/*
 * The shadow handler's cross-process lock: mutual exclusion between
 * processes, re-entry, and recovery when the holder dies (including while
 * it is an unreaped zombie).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "handlers/shadow.h"

struct shared {
	struct shadow_lock lock;
	volatile long counter;
	volatile int inside;
	volatile int overlap;
};

static struct shared *map_shared(void)
{
	void *p = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(p != MAP_FAILED);
	return p;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void excludes_across_processes(void **state)
{
	struct shared *s = map_shared();
	enum { PROCS = 4, ITERS = 20000 };
	for (int p = 0; p < PROCS; p++) {
		if (fork() == 0) {
			for (int i = 0; i < ITERS; i++) {
				shadow_lock_acquire(&s->lock);
				if (s->inside)
					s->overlap = 1;
				s->inside = 1;
				long v = s->counter; /* a racy read-modify-write without the lock */
				if ((i & 255) == 0)
					sched_yield();
				s->counter = v + 1;
				s->inside = 0;
				shadow_lock_release(&s->lock);
			}
			_exit(0);
		}
	}
	for (int p = 0; p < PROCS; p++) {
		int st;
		wait(&st);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	assert_int_equal(s->counter, PROCS * ITERS);
	assert_int_equal(s->overlap, 0);
	assert_int_equal(s->lock.word, 0);
}

static void reentrant_for_owner(void **state)
{
	struct shared *s = map_shared();
	shadow_lock_acquire(&s->lock);
	shadow_lock_acquire(&s->lock);
	assert_int_equal(s->lock.depth, 2);
	shadow_lock_release(&s->lock);
	assert_true(s->lock.word != 0); /* still held once */
	pid_t c = fork();
	if (c == 0) {
		/* Another process must wait until the outer release. */
		double t0 = now();
		shadow_lock_acquire(&s->lock);
		_exit(now() - t0 >= 0.2 ? 0 : 1);
	}
	usleep(300 * 1000);
	shadow_lock_release(&s->lock);
	int st;
	waitpid(c, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void recovers_from_dead_holder(void **state)
{
	struct shared *s = map_shared();
	pid_t c = fork();
	if (c == 0) {
		shadow_lock_acquire(&s->lock);
		_exit(0); /* dies holding it */
	}
	int st;
	waitpid(c, &st, 0); /* reaped: kill(pid, 0) says ESRCH */
	unsigned long before = shadow_lock_recoveries();
	double t0 = now();
	shadow_lock_acquire(&s->lock);
	assert_true(now() - t0 < 5.0);
	assert_int_equal(shadow_lock_recoveries(), before + 1);
	assert_int_equal(s->lock.owner_pid, getpid());
	shadow_lock_release(&s->lock);
	assert_int_equal(s->lock.word, 0);
}

static void recovers_from_zombie_holder(void **state)
{
	struct shared *s = map_shared();
	pid_t c = fork();
	if (c == 0) {
		shadow_lock_acquire(&s->lock);
		_exit(0);
	}
	/* Do not reap it: the holder is a zombie, and we are its parent. */
	while (s->lock.owner_pid != c)
		usleep(1000);
	usleep(100 * 1000);
	unsigned long before = shadow_lock_recoveries();
	double t0 = now();
	shadow_lock_acquire(&s->lock);
	assert_true(now() - t0 < 5.0);
	assert_int_equal(shadow_lock_recoveries(), before + 1);
	shadow_lock_release(&s->lock);
	int st;
	waitpid(c, &st, 0);
}

static void live_holder_is_not_robbed(void **state)
{
	struct shared *s = map_shared();
	int go[2];
	assert_int_equal(pipe(go), 0);
	pid_t c = fork();
	if (c == 0) {
		shadow_lock_acquire(&s->lock);
		char b;
		if (read(go[0], &b, 1) != 1) /* hold until told */
			_exit(2);
		shadow_lock_release(&s->lock);
		_exit(0);
	}
	while (s->lock.owner_pid != c)
		usleep(1000);
	pid_t w = fork();
	if (w == 0) {
		shadow_lock_acquire(&s->lock); /* must block while c lives */
		_exit(0);
	}
	usleep(400 * 1000); /* several poll periods */
	int st;
	assert_int_equal(waitpid(w, &st, WNOHANG), 0); /* still waiting */
	assert_int_equal(write(go[1], "x", 1), 1);
	waitpid(c, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	waitpid(w, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(excludes_across_processes),
		cmocka_unit_test(reentrant_for_owner),
		cmocka_unit_test(recovers_from_dead_holder),
		cmocka_unit_test(recovers_from_zombie_holder),
		cmocka_unit_test(live_holder_is_not_robbed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
