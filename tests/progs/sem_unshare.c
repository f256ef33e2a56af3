/* SPDX-License-Identifier: MIT */
/*
 * sem_unshare DIR - threads that leave the shared descriptor table.
 *
 * close_range(..., CLOSE_RANGE_UNSHARE) and unshare(CLONE_FILES) give the
 * calling thread a private copy of the table: what it closes, dups and
 * opens afterwards is invisible to the other threads, whose descriptors
 * keep working (same numbers, same files, the offsets of shared open file
 * descriptions still shared). A thread created by such a thread shares its
 * private table; a fork from it copies that table. A clone(CLONE_VM |
 * CLONE_VFORK) child without CLONE_FILES gets a copy too. Threads run one
 * at a time (each is joined before the next step), so the transcript is
 * deterministic.
 */
#include <linux/close_range.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "sem_common.h"

static int fa, fb; /* the main thread's descriptors */

static void readsome(const char *what, int fd, size_t n)
{
	char buf[64];
	errno = 0;
	long r = read(fd, buf, n);
	if (r < 0)
		say("  read(%s) = -1 %s\n", what, ename(errno));
	else {
		say("  read(%s) = %ld\n", what, r);
		sem_data(what, buf, r);
	}
}

static void check_main(const char *when)
{
	say("-- main after %s\n", when);
	T(fcntl(fa, F_GETFD));
	T(fcntl(fb, F_GETFD));
	OFF(fa);
	readsome("fa", fa, 6);
	OFF(fb);
	T(write(fb, "<main>", 6));
	OFF(fb);
	sem_fsize("fb", fb);
}

/* close_range(fb, fb, UNSHARE): fb goes in this thread only; fa stays,
 * and its offset is still the one the main thread shares. */
static void *t_close_range(void *p)
{
	say("-- thread: close_range(fb, fb, CLOSE_RANGE_UNSHARE)\n");
	T(close_range((unsigned)fb, (unsigned)fb, CLOSE_RANGE_UNSHARE));
	T(fcntl(fb, F_GETFD));
	readsome("fa", fa, 4); /* moves the offset main sees too */
	int n = (int)T(open(P("t1"), O_RDWR | O_CREAT | O_TRUNC, 0644)); /* reuses fb's number */
	say("  reused fb's number: %s\n", n == fb ? "yes" : "no");
	T(write(n, "thread-one", 10));
	T(lseek(n, 0, SEEK_SET));
	readsome("t1", n, 20);
	T(dup2(n, fa)); /* replaces fa in this thread only */
	T(lseek(fa, 0, SEEK_SET));
	readsome("fa(now t1)", fa, 5);
	return NULL;
}

/* A thread created by a thread with a private table shares that table. */
static int t3_fd;
static void *t_sub(void *p)
{
	say("-- sub-thread of the unsharing thread\n");
	T(fcntl(fa, F_GETFD)); /* closed in its creator's table */
	T(lseek(t3_fd, 0, SEEK_SET));
	readsome("t2 from sub", t3_fd, 10);
	T(close(t3_fd)); /* closes it for its creator too */
	return NULL;
}

static void *t_unshare(void *p)
{
	say("-- thread: unshare(CLONE_FILES)\n");
	T(unshare(CLONE_FILES));
	T(close(fa));
	T(fcntl(fa, F_GETFD));
	t3_fd = (int)T(open(P("t2"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(t3_fd, "thread-two", 10));
	pthread_t sub;
	pthread_create(&sub, NULL, t_sub, NULL);
	pthread_join(sub, NULL);
	T(fcntl(t3_fd, F_GETFD));
	T(write(fb, "<t2>", 4)); /* fb still shared with main's description */
	return NULL;
}

/* unshare, then fork: the child gets this thread's table. */
static int late_fd;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;

static void wait_stage(int s)
{
	pthread_mutex_lock(&m);
	while (stage < s)
		pthread_cond_wait(&cv, &m);
	pthread_mutex_unlock(&m);
}

static void set_stage(int s)
{
	pthread_mutex_lock(&m);
	stage = s;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&m);
}

static void *t_fork(void *p)
{
	say("-- thread: unshare(CLONE_FILES), then fork\n");
	T(unshare(CLONE_FILES));
	set_stage(1);
	wait_stage(2); /* main opened late_fd meanwhile */
	T(fcntl(late_fd, F_GETFD));
	T(close(fb));
	pid_t pid = fork();
	if (pid == 0) {
		T(fcntl(fb, F_GETFD));
		T(fcntl(late_fd, F_GETFD));
		readsome("fa in child", fa, 3);
		T(close(fa));
		int n = (int)T(open(P("t3"), O_RDWR | O_CREAT | O_TRUNC, 0644));
		T(write(n, "child", 5));
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	say("  child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	T(fcntl(fa, F_GETFD));
	return NULL;
}

/* clone(CLONE_VM | CLONE_VFORK) without CLONE_FILES */
static int vm_child_fn(void *p)
{
	/* no stdio here: the child shares our memory */
	T(close(fa));
	int n = (int)T(open(P("t4"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(n, "clone", 5));
	T(dup2(n, fb));
	T(write(fb, "-vm", 3));
	if (p)
		execl("/bin/true", "true", (char *)NULL);
	return 0;
}

static void vm_clone(const char *what, void *arg)
{
	say("-- clone(CLONE_VM|CLONE_VFORK) without CLONE_FILES: %s\n", what);
	size_t sz = 1 << 20;
	char *stack = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	pid_t pid = clone(vm_child_fn, stack + sz, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
	int st;
	waitpid(pid, &st, 0);
	say("  child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	munmap(stack, sz);
}

static void run_thread(void *(*fn)(void *))
{
	pthread_t t;
	pthread_create(&t, NULL, fn, NULL);
	pthread_join(t, NULL);
}

/* The first use of a file by this process, from a thread with a private
 * table, of a file another process wrote (under cache mode its bytes may
 * be only in the pool): what the thread writes must be what main reads
 * afterwards through a description of its own. Chell's reopens of the
 * descriptor (/proc/.../fd/N) must name the thread's table, not the
 * thread-group leader's. */
static void *t_first_touch(void *p)
{
	say("-- thread: unshare(CLONE_FILES), then the first write of a file another process wrote\n");
	T(unshare(CLONE_FILES));
	T(close(fa)); /* the next open takes a number that is another file in main's table */
	int n = (int)T(open(P("other"), O_RDWR));
	say("  took fa's number: %s\n", n == fa ? "yes" : "no");
	T(pwrite(n, "THREAD", 6, 4));
	T(close(n));
	return NULL;
}

static void first_touch(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		int n = open(P("other"), O_RDWR | O_CREAT | O_TRUNC, 0644);
		_exit(n >= 0 && write(n, "0123456789abcdefghij", 20) == 20 ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	say("-- a child wrote 'other': exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	run_thread(t_first_touch);
	int n = (int)T(open(P("other"), O_RDONLY));
	readsome("other in main", n, 20);
	T(close(n));
}

/* A new process whose first exchange with anything Chell keeps per
 * process (cache mode: the manager's socket) happens in a thread with a
 * private table: that table, and what was made in it, goes with the
 * thread; the main thread's own writes and reads must still be exact. */
static void *t_read_first(void *p)
{
	T(unshare(CLONE_FILES));
	int n = (int)T(open(P("other"), O_RDONLY));
	readsome("other in the child's thread", n, 20);
	T(close(n));
	return NULL;
}

static void first_in_thread(void)
{
	say("-- a child whose first read is in a thread with a private table\n");
	pid_t pid = fork();
	if (pid == 0) {
		run_thread(t_read_first);
		int n = (int)T(open(P("other"), O_RDWR));
		T(pwrite(n, "CHILD", 5, 12));
		T(close(n));
		n = (int)T(open(P("other"), O_RDONLY));
		readsome("other in the child's main thread", n, 20);
		T(close(n));
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	say("  child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	fa = open(P("a"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	fb = open(P("b"), O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644);
	say("fa=%d fb=%d\n", fa, fb);
	T(write(fa, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", 46));
	T(lseek(fa, 2, SEEK_SET));
	T(write(fb, "b-start", 7));

	run_thread(t_close_range);
	check_main("close_range(UNSHARE) in a thread");

	run_thread(t_unshare);
	check_main("unshare(CLONE_FILES) in a thread");

	pthread_t t;
	pthread_create(&t, NULL, t_fork, NULL);
	wait_stage(1);
	late_fd = (int)T(open(P("late"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	set_stage(2);
	pthread_join(t, NULL);
	T(write(late_fd, "late", 4));
	check_main("unshare + fork in a thread");

	vm_clone("exits", NULL);
	check_main("the clone child exited");
	vm_clone("execs", (void *)1);
	check_main("the clone child exec'd");

	first_touch();
	first_in_thread();

	/* closing in main after the others are gone */
	T(close(fa));
	T(close(fb));
	T(close(late_fd));
	T(close_range(3, ~0U, CLOSE_RANGE_UNSHARE)); /* single thread: nothing left to close */
	int n = (int)T(open(P("a"), O_RDONLY));
	readsome("a", n, 46);
	T(close(n));
	sem_content("a");
	sem_content("b");
	sem_content("t1");
	sem_content("t2");
	sem_content("t3");
	sem_content("t4");
	sem_content("late");
	sem_content("other");
	return 0;
}
