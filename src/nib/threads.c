/* SPDX-License-Identifier: MIT */
/*
 * Chell's background threads (chell_thread_start, chell/handler.h).
 *
 * A handler that owns work outside the application's calls (a flusher, a
 * prefetcher, a lease keeper) runs it on a thread that must stay invisible:
 *   - every signal is blocked on it from its first instruction (it is
 *     created while the creator blocks them all, and inherits that mask), so
 *     the kernel never picks it for a process-directed signal and no
 *     application handler ever runs on it;
 *   - it uses the process's own descriptor table, never a private one the
 *     creating thread may have made (the real pthread_create, not Chell's
 *     wrapper), and the descriptors it keeps are Chell's internal ones
 *     (chell_thread_fd), above the application's limit and out of its way;
 *   - threads do not survive fork: in the child, the thread's inherited
 *     descriptors are closed and fn starts again from the beginning, after
 *     every handler's FORK_CHILD event;
 *   - before exec and at exit it is asked to stop and joined (before the
 *     handlers' EXEC/EXIT events, so they may tear down what it uses); if
 *     the exec fails it starts again.
 * Records are never freed (a handful per process), so a pointer a handler
 * holds stays valid in every process of the tree.
 */
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>

#include "nib.h"

#define THREAD_MAX_FDS 8

struct chell_thread {
	char name[16];          /* "chell-" + the handler's name, for ps/top */
	chell_thread_fn fn;
	void *arg;
	pthread_t thr;
	_Atomic uint32_t stop;  /* futex word: 1 = asked to stop, 2 = woken (chell_thread_wake) */
	bool running;           /* a thread exists (joinable), under threads_mutex */
	bool wanted;            /* restart after fork / failed exec (not chell_thread_stop'ped) */
	int fds[THREAD_MAX_FDS];/* its internal descriptors, -1 when free */
	struct chell_thread *next;
};

static struct chell_thread *threads;
static pthread_mutex_t threads_mutex = PTHREAD_MUTEX_INITIALIZER;
static __thread struct chell_thread *tls_self;

static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

static void close_fds(struct chell_thread *t)
{
	for (int i = 0; i < THREAD_MAX_FDS; i++)
		if (t->fds[i] >= 0) {
			chell_internal_close(t->fds[i]);
			t->fds[i] = -1;
		}
}

static void *thread_main(void *p)
{
	struct chell_thread *t = p;
	tls_self = t;
	t->fn(t, t->arg);
	return NULL;
}

/* Create t's thread with every signal blocked. Under threads_mutex. */
static int launch(struct chell_thread *t)
{
	if (!real_create)
		*(void **)&real_create = dlsym(RTLD_NEXT, "pthread_create");
	sigset_t all, old;
	sigfillset(&all); /* glibc keeps its own SIGCANCEL/SIGSETXID open */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	atomic_store(&t->stop, 0);
	int r = real_create(&t->thr, NULL, thread_main, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		chell_log("background thread %s: pthread_create: %s", t->name, strerror(r));
		return -r;
	}
	pthread_setname_np(t->thr, t->name);
	t->running = true;
	return 0;
}

/* Ask t to stop, wake it, and join it (not under threads_mutex: the thread
 * may call chell_thread_fd, which takes it). */
static void halt(struct chell_thread *t)
{
	atomic_store(&t->stop, 1);
	CHELL_SC(SYS_futex, &t->stop, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
	if (t != tls_self)
		pthread_join(t->thr, NULL);
	close_fds(t);
}

CHELL_EXPORT struct chell_thread *chell_thread_start(const char *name, chell_thread_fn fn, void *arg)
{
	struct chell_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	snprintf(t->name, sizeof(t->name), "chell-%s", name);
	t->fn = fn;
	t->arg = arg;
	for (int i = 0; i < THREAD_MAX_FDS; i++)
		t->fds[i] = -1;
	pthread_mutex_lock(&threads_mutex);
	if (launch(t) < 0) {
		pthread_mutex_unlock(&threads_mutex);
		free(t);
		return NULL;
	}
	t->wanted = true;
	t->next = threads;
	threads = t;
	pthread_mutex_unlock(&threads_mutex);
	return t;
}

CHELL_EXPORT bool chell_thread_stopping(const struct chell_thread *t)
{
	return atomic_load_explicit(&((struct chell_thread *)t)->stop, memory_order_acquire) == 1;
}

CHELL_EXPORT bool chell_thread_wait(struct chell_thread *t, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	/* A wake that came before the wait is not lost: the word is 2 then,
	 * and FUTEX_WAIT (which sleeps only while it is 0) returns at once. */
	if (!chell_thread_stopping(t))
		CHELL_SC(SYS_futex, &t->stop, FUTEX_WAIT_PRIVATE, 0, &ts, 0, 0);
	uint32_t woken = 2;
	atomic_compare_exchange_strong(&t->stop, &woken, 0);
	return chell_thread_stopping(t);
}

CHELL_EXPORT void chell_thread_wake(struct chell_thread *t)
{
	uint32_t idle = 0;
	if (atomic_compare_exchange_strong(&t->stop, &idle, 2))
		CHELL_SC(SYS_futex, &t->stop, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

CHELL_EXPORT int chell_thread_fd(struct chell_thread *t, int fd)
{
	if (fd < 0)
		return fd;
	fd = chell_internal_fd(fd, 1);
	pthread_mutex_lock(&threads_mutex);
	int i;
	for (i = 0; i < THREAD_MAX_FDS && t->fds[i] >= 0; i++)
		;
	if (i < THREAD_MAX_FDS)
		t->fds[i] = fd;
	pthread_mutex_unlock(&threads_mutex);
	if (i == THREAD_MAX_FDS) {
		chell_log("background thread %s: more than %d descriptors", t->name, THREAD_MAX_FDS);
		chell_internal_close(fd);
		return -EMFILE;
	}
	return fd;
}

/* Stop t if it runs; `forever` (chell_thread_stop) or until resumed. */
static void stop_one(struct chell_thread *t, bool forever)
{
	pthread_mutex_lock(&threads_mutex);
	bool was = t->running;
	t->running = false;
	if (forever)
		t->wanted = false;
	pthread_mutex_unlock(&threads_mutex);
	if (was)
		halt(t);
}

CHELL_EXPORT void chell_thread_stop(struct chell_thread *t)
{
	stop_one(t, true);
}

/* ------------------------------------------------------ process events */

/* Stop every running thread (before exec, at exit). They stay wanted, so a
 * failed exec restarts them (chell_threads_resume). All are asked first,
 * so they wind down in parallel; then each is joined. */
void chell_threads_halt_all(void)
{
	pthread_mutex_lock(&threads_mutex);
	struct chell_thread *list = threads;
	for (struct chell_thread *t = list; t; t = t->next)
		if (t->running)
			atomic_store(&t->stop, 1);
	pthread_mutex_unlock(&threads_mutex);
	/* the list only grows at its head: walking from `list` is safe */
	for (struct chell_thread *t = list; t; t = t->next)
		stop_one(t, false);
}

/* After a failed exec, and in a forked child after the handlers'
 * FORK_CHILD events: start again what is wanted and not running. */
void chell_threads_resume(void)
{
	pthread_mutex_lock(&threads_mutex);
	for (struct chell_thread *t = threads; t; t = t->next)
		if (t->wanted && !t->running)
			launch(t);
	pthread_mutex_unlock(&threads_mutex);
}

/*
 * GCC 12's AddressSanitizer does not lock its allocator across fork: a child
 * forked while one of our threads is inside malloc inherits the allocator's
 * lock held, and hangs at its first allocation (its restarted threads, then
 * _exit joining them). In sanitizer builds the threads are therefore
 * stopped before a fork and started again after it, so the sanitized tests
 * keep covering fork; a fork then waits for a background call in progress
 * to finish. A release build needs none of it: glibc's malloc locks its
 * arenas across fork itself, and so does jemalloc.
 */
void chell_threads_fork_quiesce(void)
{
#if defined(__SANITIZE_ADDRESS__)
	chell_threads_halt_all();
#endif
}

void chell_threads_fork_unquiesce(void)
{
#if defined(__SANITIZE_ADDRESS__)
	chell_threads_resume();
#endif
}

/* fork: no thread changes the list while the kernel copies it. */
void chell_threads_fork_prepare(void)
{
	pthread_mutex_lock(&threads_mutex);
}

void chell_threads_fork_parent(void)
{
	pthread_mutex_unlock(&threads_mutex);
}

/* In the child (single-threaded): none of the threads exists; their
 * descriptors are copies of the parent's, which the new thread must not
 * share (a stream socket would interleave two processes' messages). */
void chell_threads_fork_child(void)
{
	pthread_mutex_init(&threads_mutex, NULL);
	tls_self = NULL;
	for (struct chell_thread *t = threads; t; t = t->next) {
		t->running = false;
		close_fds(t);
	}
}
