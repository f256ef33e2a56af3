/* SPDX-License-Identifier: MIT */
/*
 * The shared OFD table (ofd_table.c): slot allocation (generations, zeroing, exhaustion,
 * cross-process exclusivity), named shared areas, and chell_lock (re-entry,
 * mutual exclusion between threads and processes, recovery from a dead
 * holder).
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint32_t count_in_use(void)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < ofd_table_slot_count(); s++)
		n += atomic_load((_Atomic uint32_t *)&ofd_table_slot(s)->in_use) != 0;
	return n;
}

static int wait_status(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* ------------------------------------------------------------- slots */

static void slot_alloc_basics(void **state)
{
	assert_int_equal(ofd_table_slot_count(), 8192);
	uint32_t s;
	assert_int_equal(ofd_table_alloc_slot(&s), 0);
	assert_true(s < 8192);
	struct chell_ofd *o = ofd_table_slot(s);
	assert_non_null(o);
	assert_int_equal(o->in_use, 1);
	assert_int_equal(o->refs, 1);
	assert_true(o->gen >= 1);
	assert_null(ofd_table_slot(8192));
	assert_null(ofd_table_slot(UINT32_MAX));
	/* slots are distinct and do not overlap */
	uint32_t t;
	assert_int_equal(ofd_table_alloc_slot(&t), 0);
	assert_int_not_equal(s, t);
	struct chell_ofd *p = ofd_table_slot(t);
	assert_true((char *)p >= (char *)(o + 1) || (char *)o >= (char *)(p + 1));
	ofd_table_free_slot(s);
	ofd_table_free_slot(t);
	assert_int_equal(o->in_use, 0);
	assert_int_equal(p->in_use, 0);

	/* the region memfd is one of Chell's internal, close-on-exec descriptors */
	int rfd = ofd_table_fd();
	assert_true(rfd >= 0);
	assert_true(chell_is_internal_fd(rfd));
	assert_int_equal(fcntl(rfd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

/* Fill every slot: the next allocation fails with ENFILE; a freed slot is
 * the one handed out next, with its generation bumped and its state zeroed. */
static void slot_exhaustion_and_reuse(void **state)
{
	uint32_t base = count_in_use();
	uint32_t n = ofd_table_slot_count() - base;
	uint32_t *got = malloc(n * sizeof(*got));
	assert_non_null(got);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(ofd_table_alloc_slot(&got[i]), 0);
	assert_int_equal(count_in_use(), ofd_table_slot_count());
	uint32_t extra = 12345;
	assert_int_equal(ofd_table_alloc_slot(&extra), -ENFILE);
	assert_int_equal(extra, 12345); /* untouched on failure */

	uint32_t victim = got[n / 2];
	struct chell_ofd *o = ofd_table_slot(victim);
	uint32_t gen = o->gen;
	/* dirty every field a previous user could leave behind */
	o->refs = 7;
	o->stack_id = 3;
	o->status_flags = O_APPEND;
	o->dev = 1;
	o->ino = 2;
	o->offset = 999;
	o->lock.word = 1;
	o->lock.owner = 42;
	o->lock.depth = 3;
	memset(o->priv, 0xa5, sizeof(o->priv));
	ofd_table_free_slot(victim);
	assert_int_equal(o->in_use, 0);

	uint32_t again;
	assert_int_equal(ofd_table_alloc_slot(&again), 0);
	assert_int_equal(again, victim);
	assert_int_equal(o->gen, gen + 1);
	assert_int_equal(o->in_use, 1);
	assert_int_equal(o->refs, 1);
	assert_int_equal(o->stack_id, 0);
	assert_int_equal(o->status_flags, 0);
	assert_int_equal(o->dev, 0);
	assert_int_equal(o->ino, 0);
	assert_int_equal(o->offset, 0);
	assert_int_equal(o->lock.word, 0);
	assert_int_equal(o->lock.owner, 0);
	assert_int_equal(o->lock.depth, 0);
	static const unsigned char zero[sizeof(o->priv)];
	assert_memory_equal(o->priv, zero, sizeof(zero));
	assert_int_equal(ofd_table_alloc_slot(&extra), -ENFILE);

	for (uint32_t i = 0; i < n; i++)
		ofd_table_free_slot(got[i]);
	assert_int_equal(count_in_use(), base);
	free(got);
}

/* Parent and child allocate concurrently from the one region: no slot is
 * handed out twice. */
static void slot_alloc_across_processes(void **state)
{
	enum { PER = 2000 };
	uint32_t base = count_in_use();
	uint32_t *child_slots = chell_shared_area("unit-region-child-slots", PER * sizeof(uint32_t));
	assert_non_null(child_slots);
	uint32_t *mine = malloc(PER * sizeof(uint32_t));
	assert_non_null(mine);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (int i = 0; i < PER; i++)
			if (ofd_table_alloc_slot(&child_slots[i]) < 0)
				_exit(1);
		_exit(0);
	}
	for (int i = 0; i < PER; i++) {
		assert_int_equal(ofd_table_alloc_slot(&mine[i]), 0);
		if ((i & 63) == 0)
			sched_yield();
	}
	assert_int_equal(wait_status(pid), 0);
	assert_int_equal(count_in_use(), base + 2 * PER);
	unsigned char *owner = calloc(ofd_table_slot_count(), 1);
	assert_non_null(owner);
	for (int i = 0; i < PER; i++) {
		assert_int_equal(owner[mine[i]], 0);
		owner[mine[i]] = 1;
	}
	for (int i = 0; i < PER; i++) {
		assert_int_equal(owner[child_slots[i]], 0);
		owner[child_slots[i]] = 2;
	}
	for (int i = 0; i < PER; i++) {
		ofd_table_free_slot(mine[i]);
		ofd_table_free_slot(child_slots[i]);
	}
	assert_int_equal(count_in_use(), base);
	free(owner);
	free(mine);
}

/* -------------------------------------------------------- shared areas */

static void area_same_name_same_memory(void **state)
{
	unsigned char *a = chell_shared_area("unit-a", 100);
	assert_non_null(a);
	/* zeroed on first use */
	for (int i = 0; i < 4096; i++)
		assert_int_equal(a[i], 0);
	memset(a, 0x5a, 100);
	assert_ptr_equal(chell_shared_area("unit-a", 100), a);
	/* sizes are rounded to pages: a later, larger request within the page fits */
	assert_ptr_equal(chell_shared_area("unit-a", 4096), a);
	/* but an area cannot grow beyond what it was given */
	assert_null(chell_shared_area("unit-a", 4097));
	unsigned char *b = chell_shared_area("unit-b", 8192);
	assert_non_null(b);
	assert_true(b >= a + 4096 || b + 8192 <= a);
	for (int i = 0; i < 8192; i++)
		assert_int_equal(b[i], 0);
	assert_int_equal(a[99], 0x5a);
}

/* Names are stored whole: one as long as the table's field (40 bytes) or
 * longer is refused, rather than truncated (two long names sharing a prefix
 * would otherwise share memory). 39 characters still work. */
static void area_long_name(void **state)
{
	const char *name = "unit-a-rather-long-area-name-of-48-characters-xx";
	assert_int_equal(strlen(name), 48);
	assert_null(chell_shared_area(name, 4096));
	const char *ok = "unit-a-name-of-exactly-39-characters-xx";
	assert_int_equal(strlen(ok), 39);
	void *a = chell_shared_area(ok, 4096);
	assert_non_null(a);
	assert_ptr_equal(a, chell_shared_area(ok, 4096));
}

static void area_shared_with_child(void **state)
{
	volatile int *v = chell_shared_area("unit-fork", sizeof(int));
	assert_non_null(v);
	*v = 1;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* the child finds the same area by name, and writes through it */
		volatile int *c = chell_shared_area("unit-fork", sizeof(int));
		if (c != v || *c != 1)
			_exit(1);
		volatile int *d = chell_shared_area("unit-made-by-child", sizeof(int));
		if (!d)
			_exit(2);
		*c = 2;
		*d = 3;
		_exit(0);
	}
	assert_int_equal(wait_status(pid), 0);
	assert_int_equal(*v, 2);
	/* an area the child created is visible to the parent */
	volatile int *d = chell_shared_area("unit-made-by-child", sizeof(int));
	assert_non_null(d);
	assert_int_equal(*d, 3);
}

/* Runs last among the area tests: uses up the space. */
static void area_too_big(void **state)
{
	assert_null(chell_shared_area("unit-huge", (8u << 20) + 1));
	/* a failed request reserves nothing: a fitting one still succeeds */
	assert_non_null(chell_shared_area("unit-huge", 1 << 20));
	/* the name table is finite too: creating many areas eventually fails,
	 * and every area handed out before that stays distinct */
	void *seen[64];
	int n = 0;
	for (; n < 64; n++) {
		char nm[32];
		snprintf(nm, sizeof(nm), "unit-many-%d", n);
		seen[n] = chell_shared_area(nm, 4096);
		if (!seen[n])
			break;
		for (int j = 0; j < n; j++)
			assert_ptr_not_equal(seen[j], seen[n]);
	}
	assert_true(n > 0 && n < 64);
}

/* ---------------------------------------------------------------- locks */

static void lock_reentrant(void **state)
{
	struct chell_lock *l = chell_shared_area("unit-lock-reentrant", sizeof(*l));
	assert_non_null(l);
	int crit = chell_tls_crit;
	chell_lock_acquire(l);
	assert_int_equal(l->word, 1);
	assert_int_equal(l->owner, (int32_t)gettid());
	assert_int_equal(l->depth, 1);
	assert_int_equal(chell_tls_crit, crit + 1); /* signals are deferred meanwhile */
	chell_lock_acquire(l);
	assert_int_equal(l->depth, 2);
	chell_lock_release(l);
	assert_int_equal(l->word, 1); /* still held */
	assert_int_equal(l->owner, (int32_t)gettid());
	chell_lock_release(l);
	assert_int_equal(l->word, 0);
	assert_int_equal(l->owner, 0);
	assert_int_equal(l->depth, 0);
	assert_int_equal(chell_tls_crit, crit);
}

struct contend {
	struct chell_lock lock;
	volatile long counter;
	volatile int inside;
	volatile int overlap;
};

static void contend_loop(struct contend *c, int iters)
{
	for (int i = 0; i < iters; i++) {
		chell_lock_acquire(&c->lock);
		if (c->inside)
			c->overlap = 1;
		c->inside = 1;
		long v = c->counter; /* a racy update, safe only under the lock */
		if ((i & 127) == 0)
			sched_yield();
		c->counter = v + 1;
		c->inside = 0;
		chell_lock_release(&c->lock);
	}
}

static void *contend_thread(void *p)
{
	contend_loop(p, 20000);
	return NULL;
}

static void lock_threads(void **state)
{
	struct contend *c = chell_shared_area("unit-lock-threads", sizeof(*c));
	assert_non_null(c);
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, contend_thread, c), 0);
	contend_loop(c, 20000);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(c->overlap, 0);
	assert_int_equal(c->counter, 4 * 20000);
	assert_int_equal(c->lock.word, 0);
}

static void lock_processes(void **state)
{
	struct contend *c = chell_shared_area("unit-lock-procs", sizeof(*c));
	assert_non_null(c);
	enum { PROCS = 3, ITERS = 20000 };
	pid_t pids[PROCS];
	for (int p = 0; p < PROCS; p++) {
		pids[p] = fork();
		assert_true(pids[p] >= 0);
		if (pids[p] == 0) {
			contend_loop(c, ITERS);
			_exit(0);
		}
	}
	contend_loop(c, ITERS);
	for (int p = 0; p < PROCS; p++)
		assert_int_equal(wait_status(pids[p]), 0);
	assert_int_equal(c->overlap, 0);
	assert_int_equal(c->counter, (PROCS + 1) * ITERS);
	assert_int_equal(c->lock.word, 0);
}

/* A holder in another process that is a live, non-main thread is not dead:
 * its lock must not be "recovered" from under it. */
struct held {
	struct chell_lock lock;
	volatile int holding;
	volatile int ready;
};

static void *hold_thread(void *p)
{
	struct held *h = p;
	chell_lock_acquire(&h->lock);
	h->holding = 1;
	h->ready = 1;
	usleep(700 * 1000); /* several of the waiter's 200 ms liveness checks */
	h->holding = 0;
	chell_lock_release(&h->lock);
	return NULL;
}

static void lock_not_stolen_from_live_thread(void **state)
{
	struct held *h = chell_shared_area("unit-lock-held", sizeof(*h));
	assert_non_null(h);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		pthread_t t;
		if (pthread_create(&t, NULL, hold_thread, h) != 0)
			_exit(1);
		pthread_join(t, NULL);
		_exit(0);
	}
	while (!h->ready)
		usleep(1000);
	chell_lock_acquire(&h->lock);
	int stolen = h->holding;
	chell_lock_release(&h->lock);
	assert_int_equal(wait_status(pid), 0);
	assert_int_equal(stolen, 0);
}

/* A child that takes the shared lock l and exits holding it. */
static pid_t fork_dying_holder(struct chell_lock *l)
{
	assert_non_null(l);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		chell_lock_acquire(l);
		_exit(0);
	}
	return pid;
}

/* The holder exits while holding the lock (and has been reaped). */
static void lock_recovered_after_holder_died(void **state)
{
	struct chell_lock *l = chell_shared_area("unit-lock-dead", sizeof(*l));
	pid_t pid = fork_dying_holder(l);
	assert_int_equal(wait_status(pid), 0);
	assert_int_equal(l->owner, pid);
	double t0 = now();
	chell_lock_acquire(l);
	double took = now() - t0;
	assert_int_equal(l->owner, (int32_t)gettid());
	assert_int_equal(l->depth, 1);
	chell_lock_release(l);
	assert_true(took < 2.0);
	/* and it works normally afterwards */
	chell_lock_acquire(l);
	chell_lock_release(l);
	assert_int_equal(l->word, 0);
}

/* The holder exits while holding the lock and is not reaped yet (a zombie):
 * a parent that touches the same file before wait() must not hang. The
 * acquisition runs in a thread so that a hang fails the test instead of
 * blocking it; the child is reaped afterwards, which unblocks the thread. */
struct zombie_try {
	struct chell_lock *l;
	volatile int done;
};

static void *zombie_acquire(void *p)
{
	struct zombie_try *z = p;
	chell_lock_acquire(z->l);
	chell_lock_release(z->l);
	z->done = 1;
	return NULL;
}

static void lock_recovered_from_zombie_holder(void **state)
{
	struct chell_lock *l = chell_shared_area("unit-lock-zombie", sizeof(*l));
	pid_t pid = fork_dying_holder(l);
	/* wait until the child is a zombie, without reaping it */
	siginfo_t si;
	assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0);
	struct zombie_try z = {l, 0};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, zombie_acquire, &z), 0);
	double t0 = now();
	while (!z.done && now() - t0 < 3.0)
		usleep(10 * 1000);
	int done_before_reap = z.done;
	assert_int_equal(wait_status(pid), 0);
	pthread_join(t, NULL);
	assert_int_equal(z.done, 1);
	assert_int_equal(done_before_reap, 1);
}

int main(void)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	/* the region is created lazily; count_in_use() needs it to exist */
	if (ofd_table_ensure() < 0)
		return 1;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(slot_alloc_basics),
		cmocka_unit_test(slot_exhaustion_and_reuse),
		cmocka_unit_test(slot_alloc_across_processes),
		cmocka_unit_test(area_same_name_same_memory),
		cmocka_unit_test(area_long_name),
		cmocka_unit_test(area_shared_with_child),
		cmocka_unit_test(lock_reentrant),
		cmocka_unit_test(lock_threads),
		cmocka_unit_test(lock_processes),
		cmocka_unit_test(lock_not_stolen_from_live_thread),
		cmocka_unit_test(lock_recovered_after_holder_died),
		cmocka_unit_test(lock_recovered_from_zombie_holder),
		cmocka_unit_test(area_too_big),
	};
	return cmocka_run_group_tests_name("region", tests, NULL, NULL);
}
