/* SPDX-License-Identifier: MIT */
/*
 * The prefetch queue and its background thread (warp.md §IV-D: the
 * `warp_prefetch` thread, one per process).
 *
 * The queue is a bounded ring of PF_CELLS cells in the style of Vyukov's
 * bounded queue: many producers (the application's threads, on the data
 * path) claim a position with one compare-and-swap on `tail` and publish
 * the cell by storing its sequence number; one consumer (the thread)
 * takes cells in order at `head`, which only it writes. A producer that
 * finds the next cell still unconsumed drops the hint and counts it: post
 * never blocks, never allocates, never enters the kernel unless the
 * thread is asleep (then one futex wake through chell_thread_wake).
 *
 * Cell sequence numbers (position p, cell p % PF_CELLS):
 *   seq == p              free for the producer of position p
 *   seq == p + 1          holds the hint of position p
 *   seq == p + PF_CELLS   consumed, free for position p + PF_CELLS
 *
 * forget(file) clears `file` out of every cell (compare-and-swap on the
 * cell's file pointer, so a cell the consumer takes at the same moment is
 * taken by exactly one of them), then waits while the thread is between
 * taking a cell and finishing its call: `current` is PF_BUSY from before
 * the take until the file is known, then the file, then NULL.
 *
 * Fork: the thread does not exist in the child and starts again from the
 * beginning there (chell_thread_start). Whatever it was doing at the fork
 * is repaired by the ring's rules: a cell it had taken but not released
 * is taken again (its file pointer is already NULL: skipped), a cell it
 * released before advancing `head` is recognised by its sequence number
 * (p + PF_CELLS or p + PF_CELLS + 1) and skipped. `current` left by the
 * parent's thread is ignored by forget until the child's thread runs
 * (worker_pid).
 */
#include "brain.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "chell/handler.h"
#include "chell/sys.h"

#define PF_CELLS 256u /* a power of two */
#define PF_BUSY ((void *)1)

struct pf_cell {
	_Atomic uint64_t seq;
	_Atomic(void *) file;
	uint32_t node;
	uint8_t want;
};

static struct pf_cell ring[PF_CELLS];
static _Atomic uint64_t tail;
static uint64_t head; /* consumer only */
static _Atomic(void *) current;
static _Atomic int sleeping;
static _Atomic pid_t worker_pid;
static __thread bool in_worker;
static _Atomic uint64_t n_posted, n_dropped, n_run;

static pthread_mutex_t start_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct chell_thread *_Atomic thr;
static warp_prefetch_fn callback;

static void ring_init(void)
{
	for (uint64_t i = 0; i < PF_CELLS; i++)
		atomic_store_explicit(&ring[i].seq, i, memory_order_relaxed);
}

/* Take the cell at head and run its hint. false when the ring is empty. */
static bool take_one(void)
{
	struct pf_cell *c = &ring[head % PF_CELLS];
	atomic_store(&current, PF_BUSY);
	uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
	if (seq == head + 1) {
		void *f = atomic_exchange(&c->file, NULL);
		uint32_t node = c->node;
		enum warp_state want = (enum warp_state)c->want;
		atomic_store_explicit(&c->seq, head + PF_CELLS, memory_order_release);
		head++;
		if (f) {
			atomic_store(&current, f);
			callback(f, node, want);
			atomic_fetch_add_explicit(&n_run, 1, memory_order_relaxed);
		}
		atomic_store(&current, NULL);
		return true;
	}
	atomic_store(&current, NULL);
	if (seq == head + PF_CELLS || seq == head + PF_CELLS + 1) { /* released before a fork moved head */
		head++;
		return true;
	}
	return false;
}

static bool ring_empty(void)
{
	return atomic_load(&ring[head % PF_CELLS].seq) != head + 1;
}

static void worker(struct chell_thread *t, void *arg)
{
	(void)arg;
	in_worker = true;
	atomic_store(&current, NULL);
	atomic_store(&worker_pid, sys_getpid());
	while (!chell_thread_stopping(t)) {
		if (take_one())
			continue;
		/* Dekker with post: either post sees sleeping (and wakes us) or
		 * we see its cell here; a wake before the wait is kept by
		 * chell_thread_wait. The timeout only bounds an unforeseen loss. */
		atomic_store(&sleeping, 1);
		if (ring_empty())
			chell_thread_wait(t, 1000000000u);
		atomic_store(&sleeping, 0);
	}
}

int warp_prefetch_start(warp_prefetch_fn fn)
{
	if (!fn)
		return -EINVAL;
	if (atomic_load(&thr))
		return 0;
	pthread_mutex_lock(&start_mutex);
	int rc = 0;
	if (!atomic_load(&thr)) {
		ring_init();
		callback = fn;
		struct chell_thread *t = chell_thread_start("warp", worker, NULL);
		if (t)
			atomic_store(&thr, t);
		else
			rc = errno ? -errno : -EAGAIN;
	}
	pthread_mutex_unlock(&start_mutex);
	return rc;
}

bool warp_prefetch_post(void *file, uint32_t node, enum warp_state want)
{
	struct chell_thread *t = atomic_load_explicit(&thr, memory_order_acquire);
	if (!t || !file)
		return false;
	uint64_t pos = atomic_load_explicit(&tail, memory_order_relaxed);
	struct pf_cell *c;
	for (;;) {
		c = &ring[pos % PF_CELLS];
		uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t diff = (int64_t)(seq - pos);
		if (diff == 0) {
			if (atomic_compare_exchange_weak_explicit(&tail, &pos, pos + 1, memory_order_relaxed,
								  memory_order_relaxed))
				break;
		} else if (diff < 0) {
			atomic_fetch_add_explicit(&n_dropped, 1, memory_order_relaxed);
			return false;
		} else {
			pos = atomic_load_explicit(&tail, memory_order_relaxed);
		}
	}
	c->node = node;
	c->want = (uint8_t)want;
	atomic_store_explicit(&c->file, file, memory_order_relaxed);
	atomic_store(&c->seq, pos + 1); /* seq_cst: ordered before the load of sleeping */
	atomic_fetch_add_explicit(&n_posted, 1, memory_order_relaxed);
	if (atomic_load(&sleeping))
		chell_thread_wake(t);
	return true;
}

void warp_prefetch_forget(void *file)
{
	if (!file || file == PF_BUSY)
		return;
	for (unsigned i = 0; i < PF_CELLS; i++) {
		void *f = file;
		/* a plain look first: a locked compare-and-swap on every cell cost
		 * microseconds at each last close of a file */
		if (atomic_load_explicit(&ring[i].file, memory_order_relaxed) == file)
			atomic_compare_exchange_strong(&ring[i].file, &f, NULL);
	}
	/* The callback itself forgetting its file would wait for itself. */
	if (in_worker)
		return;
	for (;;) {
		void *c = atomic_load(&current);
		if (c != PF_BUSY && c != file)
			return;
		if (atomic_load(&worker_pid) != sys_getpid())
			return; /* the parent's thread, before the fork: not running here */
		CHELL_SC(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
	}
}

void warp_prefetch_counts(struct warp_prefetch_counts *out)
{
	out->posted = atomic_load_explicit(&n_posted, memory_order_relaxed);
	out->dropped = atomic_load_explicit(&n_dropped, memory_order_relaxed);
	out->run = atomic_load_explicit(&n_run, memory_order_relaxed);
}
