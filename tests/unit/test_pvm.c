/* SPDX-License-Identifier: MIT */
/* Unit tests of the pVM object store API (include/chell/pvm.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <chell/pvm.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* test_pvm_narrow builds this file and the library with a 3-bit name hash. */
#ifdef PVM_NH_MASK
#define PVM_TEST_NH_MASK PVM_NH_MASK
#else
#define PVM_TEST_NH_MASK UINT64_MAX
#endif
#include <stdint.h>

static char dir[256];
static char path[300];

static int setup(void **st)
{
	(void)st;
	snprintf(dir, sizeof(dir), "/dev/shm/test_pvm.%d", getpid());
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/pvm.pool", dir);
	unlink(path);
	return 0;
}
static int teardown(void **st)
{
	(void)st;
	unlink(path);
	rmdir(dir);
	return 0;
}

static struct pvm_pool *mkpool(uint64_t max, uint64_t initial)
{
	struct pvm_pool_opts o = {.max_size = max, .initial_size = initial, .journals = 8, .journal_entries = 4096};
	struct pvm_pool *p = NULL;
	char err[256];
	unlink(path);
	int rc = pvm_pool_create(dir, &o, &p, err, sizeof(err));
	if (rc)
		fprintf(stderr, "create: %s\n", err);
	assert_int_equal(rc, 0);
	return p;
}

static struct pvm_app *app(struct pvm_pool *p, const char *name)
{
	struct pvm_app *a = NULL;
	char err[256];
	int rc = pvm_app_open(p, name, NULL, PVM_APP_CREATE, &a, err, sizeof(err));
	if (rc)
		fprintf(stderr, "app: %s\n", err);
	assert_int_equal(rc, 0);
	return a;
}

static void test_basic(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "alpha");
	void *ptr;
	struct pvm_info info;
	assert_int_equal(pvm_create(a, "obj1", 100, &ptr), 0);
	assert_non_null(ptr);
	assert_int_equal((uintptr_t)ptr % PVM_PAGE, 0);
	assert_int_equal(pvm_create(a, "obj1", 100, NULL), -EEXIST);
	assert_int_equal(pvm_write(a, "obj1", 0, "hello", 5), 0);
	assert_int_equal(pvm_write(a, "obj1", 98, "xyz", 3), -EINVAL);
	assert_int_equal(pvm_open(a, "obj1", &ptr, &info), 0);
	assert_memory_equal(ptr, "hello", 5);
	assert_int_equal(info.size, 100);
	assert_int_equal(pvm_open(a, "nope", NULL, NULL), -ENOENT);
	/* Resize keeps data, new bytes read zero. */
	assert_int_equal(pvm_resize(a, "obj1", 10000, &ptr), 0);
	assert_memory_equal(ptr, "hello", 5);
	assert_int_equal(((char *)ptr)[9999], 0);
	assert_int_equal(pvm_rename(a, "obj1", "obj2"), 0);
	assert_int_equal(pvm_open(a, "obj1", NULL, NULL), -ENOENT);
	assert_int_equal(pvm_open(a, "obj2", &ptr, &info), 0);
	assert_memory_equal(ptr, "hello", 5);
	assert_int_equal(pvm_delete(a, "obj2"), 0);
	assert_int_equal(pvm_open(a, "obj2", NULL, NULL), -ENOENT);
	/* Same name, other application: a different object. */
	struct pvm_app *b = app(p, "beta");
	assert_int_equal(pvm_create(a, "shared-name", 10, NULL), 0);
	assert_int_equal(pvm_open(b, "shared-name", NULL, NULL), -ENOENT);
	pvm_app_close(b);
	pvm_app_close(a);
	/* Reopen: the data is there. */
	pvm_pool_close(p);
	char err[256];
	assert_int_equal(pvm_pool_open(path, &p, err, sizeof(err)), 0);
	a = app(p, "alpha");
	assert_int_equal(pvm_open(a, "shared-name", NULL, &info), 0);
	assert_int_equal(info.size, 10);
	assert_int_equal(pvm_pool_check(p, 0, err, sizeof(err)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

static void test_tx(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "tx");
	char *ptr;
	assert_int_equal(pvm_create(a, "o", 64, (void **)&ptr), 0);
	memcpy(ptr, "old", 4);
	/* Abort puts back stored bytes and undoes creates. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add(a, "o", 0, 4), 0);
	memcpy(ptr, "new", 4);
	assert_int_equal(pvm_create(a, "born", 4096, NULL), 0);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_string_equal(ptr, "old");
	assert_int_equal(pvm_open(a, "born", NULL, NULL), -ENOENT);
	/* Nested begins flatten: the inner commit does not commit. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add(a, "o", 0, 4), 0);
	memcpy(ptr, "mid", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_string_equal(ptr, "old");
	/* A failure inside makes the outer commit abort with that error. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add(a, "o", 0, 4), 0);
	memcpy(ptr, "bad", 4);
	assert_int_equal(pvm_create(a, "o", 1, NULL), -EEXIST);
	assert_int_equal(pvm_tx_commit(a), -EEXIST);
	assert_string_equal(ptr, "old");
	/* Commit keeps. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add(a, "o", 0, 4), 0);
	memcpy(ptr, "yes", 4);
	assert_int_equal(pvm_create(a, "kid", 10, NULL), 0);
	assert_int_equal(pvm_delete(a, "kid"), 0);
	assert_int_equal(pvm_tx_commit(a), 0);
	assert_string_equal(ptr, "yes");
	assert_int_equal(pvm_tx_commit(a), -EINVAL);
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* pvm_tx_add_ptr logs like pvm_tx_add, whether the handle remembers the
 * object (created or opened here, nothing changed since) or finds it
 * again (tables changed, another handle, history); a pointer that is no
 * longer an object's data is refused. */
static void test_tx_add_ptr(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "ptr"), *b = app(p, "ptr");
	char *x, *y;
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_create(a, "x", 100, (void **)&x), 0);
	memcpy(x, "old", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	/* Remembered since the create: logged, the abort puts it back. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), 0);
	memcpy(x, "new", 4);
	assert_int_equal(pvm_tx_add_ptr(a, x, 96, 5), -EINVAL); /* past its size */
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_string_equal(x, "old");
	/* The tables changed (another object created): found again. */
	assert_int_equal(pvm_create(a, "y", 10, (void **)&y), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), 0);
	memcpy(x, "two", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	/* Changed through another handle, which moves the table sequence
	 * (the entry this handle remembers is stale and is read again by the
	 * object's ID): a new size within its pages is the one checked, a
	 * rename keeps the pointer the object's. */
	assert_int_equal(pvm_resize(b, "x", 50, NULL), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 40, 20), -EINVAL); /* past the new size */
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_resize(b, "x", 100, NULL), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 40, 20), 0);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_rename(b, "x", "x2"), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), 0);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_rename(b, "x2", "x"), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), 0);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_string_equal(x, "two");
	/* Another handle that never saw it: found through the table. */
	assert_int_equal(pvm_tx_begin(b), 0);
	assert_int_equal(pvm_tx_add_ptr(b, x, 0, 4), 0);
	memcpy(x, "bbb", 4);
	assert_int_equal(pvm_tx_abort(b), 0);
	assert_string_equal(x, "two");
	/* Not an object's data pointer. */
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x + 8, 0, 4), -EINVAL);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	char local[8];
	assert_int_equal(pvm_tx_add_ptr(a, local, 0, 4), -EINVAL);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), -EINVAL); /* outside a transaction */
	/* History: the first change keeps a version, as by name. */
	assert_int_equal(pvm_set_history(a, "x", 2), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), 0);
	memcpy(x, "thr", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	struct pvm_version v[4];
	assert_int_equal(pvm_history(a, "x", v, 4), 1);
	/* Write-protected: refused. */
	assert_int_equal(pvm_protect(a, "x", 1), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), -EPERM);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_protect(a, "x", 0), 0);
	/* Deleted (and its page reused by another object): the old pointer
	 * is no longer "x"'s; the new object's own pointer works. */
	assert_int_equal(pvm_delete(a, "x"), 0);
	char *z;
	assert_int_equal(pvm_create(a, "z", 100, (void **)&z), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	int rc = pvm_tx_add_ptr(a, z, 0, 4);
	assert_int_equal(rc, 0);
	memcpy(z, "zzz", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	assert_int_equal(pvm_open(a, "z", (void **)&y, NULL), 0);
	assert_string_equal(y, "zzz");
	if (z != x) {
		assert_int_equal(pvm_tx_begin(a), 0);
		assert_int_equal(pvm_tx_add_ptr(a, x, 0, 4), -EINVAL);
		assert_int_equal(pvm_tx_abort(a), 0);
	}
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(b);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* PVM_TX_NO_SNAPSHOT: the range is taken (bounds, lock) but not logged:
 * an abort puts back the logged range only; a commit keeps both; a
 * transaction of such ranges alone commits; unknown flags are refused. */
static void test_tx_nosnap(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "nosnap");
	char *x;
	assert_int_equal(pvm_create(a, "x", 100, (void **)&x), 0);
	assert_int_equal(pvm_write(a, "x", 0, "aaaa-bbbb", 10), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 0, 4, 0), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 5, 4, PVM_TX_NO_SNAPSHOT), 0);
	memcpy(x, "AAAA", 4);
	memcpy(x + 5, "BBBB", 4);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_string_equal(x, "aaaa-BBBB");
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 5, 4, PVM_TX_NO_SNAPSHOT), 0);
	memcpy(x + 5, "cccc", 4);
	assert_int_equal(pvm_tx_commit(a), 0);
	assert_string_equal(x, "aaaa-cccc");
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 96, 5, PVM_TX_NO_SNAPSHOT), -EINVAL); /* past its size */
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_tx_begin(a), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 0, 4, 2), -EINVAL);
	assert_int_equal(pvm_tx_abort(a), 0);
	assert_int_equal(pvm_tx_xadd_ptr(a, x, 0, 4, PVM_TX_NO_SNAPSHOT), -EINVAL); /* outside a transaction */
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

static void test_history_iter(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "hist");
	assert_int_equal(pvm_create(a, "h", 8, NULL), 0);
	assert_int_equal(pvm_set_history(a, "h", 2), 0);
	assert_int_equal(pvm_write(a, "h", 0, "v2______", 8), 0);
	assert_int_equal(pvm_write(a, "h", 0, "v3______", 8), 0);
	assert_int_equal(pvm_write(a, "h", 0, "v4______", 8), 0);
	struct pvm_version v[8];
	int n = pvm_history(a, "h", v, 8);
	assert_int_equal(n, 2); /* N = 2: versions 3 and 2 kept, 1 dropped */
	assert_int_equal(v[0].version, 3);
	assert_int_equal(v[1].version, 2);
	assert_int_equal(pvm_restore(a, "h", 1), -ENOENT);
	assert_int_equal(pvm_restore(a, "h", 2), 0);
	char *ptr;
	struct pvm_info info;
	assert_int_equal(pvm_open(a, "h", (void **)&ptr, &info), 0);
	assert_memory_equal(ptr, "v2______", 8);
	assert_int_equal(info.version, 5);
	for (int i = 0; i < 300; i++) { /* forces table growth */
		char name[32];
		snprintf(name, sizeof(name), "it%03d", i);
		assert_int_equal(pvm_create(a, name, (uint64_t)i, NULL), 0);
	}
	uint64_t cur = 0;
	int count = 0;
	while (pvm_iter(a, &cur, &info) == 1)
		count++;
	assert_int_equal(count, 301);
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

static void test_protect(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "prot");
	char *ptr;
	assert_int_equal(pvm_create(a, "ro", 100, (void **)&ptr), 0);
	assert_int_equal(pvm_protect(a, "ro", 1), 0);
	assert_int_equal(pvm_write(a, "ro", 0, "x", 1), -EPERM);
	assert_int_equal(pvm_delete(a, "ro"), -EPERM);
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* not cmocka's handler */
		ptr[0] = 'x'; /* must fault */
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	assert_int_equal(pvm_protect(a, "ro", 0), 0);
	ptr[0] = 'y';
	assert_int_equal(pvm_delete(a, "ro"), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

static void test_growth(void **st)
{
	(void)st;
	/* 1 MiB at first, up to 64 MiB: 40 objects of 1 MiB need growth. */
	struct pvm_pool *p = mkpool(64 << 20, 1 << 20);
	struct pvm_app *a = app(p, "grow");
	struct pvm_pool_stat s0, s1;
	assert_int_equal(pvm_pool_stat(p, &s0), 0);
	char *first;
	assert_int_equal(pvm_create(a, "o0", 1 << 20, (void **)&first), 0);
	memset(first, 0x5a, 1 << 20);
	for (int i = 1; i < 40; i++) {
		char name[16];
		snprintf(name, sizeof(name), "o%d", i);
		assert_int_equal(pvm_create(a, name, 1 << 20, NULL), 0);
	}
	assert_int_equal(pvm_pool_stat(p, &s1), 0);
	assert_true(s1.size > s0.size);
	assert_int_equal(first[12345], 0x5a); /* no copy: the same mapping */
	assert_int_equal(pvm_create(a, "huge", 128ull << 20, NULL), -ENOSPC);
	/* Another process sees the grown pool. */
	pid_t pid = fork();
	if (pid == 0) {
		struct pvm_pool *q;
		struct pvm_app *b;
		char *ptr;
		if (pvm_pool_open(path, &q, NULL, 0) || pvm_app_open(q, "grow", NULL, 0, &b, NULL, 0) ||
		    pvm_open(b, "o39", (void **)&ptr, NULL) || pvm_create(b, "child", 8 << 20, NULL))
			_exit(1);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_int_equal(pvm_open(a, "child", NULL, NULL), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* Threads: four of them on two handles (two per handle: their
 * transactions on one handle take turns), each incrementing its own object
 * and a shared one in every transaction. */
struct thr {
	struct pvm_app *a;
	int id;
	int fails;
};
enum { TROUNDS = 3000 };
static void *thr_main(void *arg)
{
	struct thr *t = arg;
	char own[16];
	snprintf(own, sizeof(own), "own%d", t->id);
	uint64_t *o, *sh;
	if (pvm_open(t->a, own, (void **)&o, NULL) || pvm_open(t->a, "shared", (void **)&sh, NULL)) {
		t->fails++;
		return NULL;
	}
	for (int i = 0; i < TROUNDS; i++) {
		int rc = pvm_tx_begin(t->a);
		if (!rc)
			rc = pvm_tx_add(t->a, own, 0, 8);
		if (!rc)
			(*o)++;
		if (!rc)
			rc = pvm_tx_add(t->a, "shared", 0, 8);
		if (!rc)
			(*sh)++;
		int c = pvm_tx_commit(t->a);
		if (rc == -EDEADLK || c == -EDEADLK) {
			i--;
			continue;
		}
		if (rc || c)
			t->fails++;
	}
	return NULL;
}

/* Creates and deletes objects (their slots shift, the table grows) while
 * the other threads look theirs up without the metadata lock. */
static volatile int churn_stop;
static void *churn_main(void *arg)
{
	struct thr *t = arg;
	char name[32];
	for (int round = 0; !churn_stop; round++) {
		for (int i = 0; i < 200; i++) {
			snprintf(name, sizeof(name), "churn%d-%d", round % 2, i);
			if (pvm_create(t->a, name, 16, NULL) && !churn_stop)
				t->fails++;
		}
		for (int i = 0; i < 200; i++) {
			snprintf(name, sizeof(name), "churn%d-%d", round % 2, i);
			if (pvm_delete(t->a, name))
				t->fails++;
		}
	}
	return NULL;
}

static void test_threads(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *h[2] = {app(p, "thr"), app(p, "thr")};
	struct pvm_app *hc = app(p, "thr");
	struct thr ct = {hc, 9, 0};
	pthread_t cth;
	churn_stop = 0;
	assert_int_equal(pvm_create(h[0], "shared", 8, NULL), 0);
	struct thr t[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		char n[16];
		snprintf(n, sizeof(n), "own%d", i);
		assert_int_equal(pvm_create(h[0], n, 8, NULL), 0);
		t[i] = (struct thr){h[i % 2], i, 0};
	}
	pthread_create(&cth, NULL, churn_main, &ct);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, thr_main, &t[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(t[i].fails, 0);
	}
	churn_stop = 1;
	pthread_join(cth, NULL);
	assert_int_equal(ct.fails, 0);
	pvm_app_close(hc);
	uint64_t *v;
	assert_int_equal(pvm_open(h[1], "shared", (void **)&v, NULL), 0);
	assert_int_equal(*v, 4 * TROUNDS);
	for (int i = 0; i < 4; i++) {
		char n[16];
		snprintf(n, sizeof(n), "own%d", i);
		assert_int_equal(pvm_open(h[0], n, (void **)&v, NULL), 0);
		assert_int_equal(*v, TROUNDS);
	}
	pvm_app_close(h[0]);
	pvm_app_close(h[1]);
	pvm_pool_close(p);
}

/* Two processes, each its own journal: disjoint objects and one shared
 * counter object, updated concurrently in transactions. */
static void test_two_processes(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "mp");
	assert_int_equal(pvm_create(a, "counter", 8, NULL), 0);
	assert_int_equal(pvm_create(a, "own0", 8, NULL), 0);
	assert_int_equal(pvm_create(a, "own1", 8, NULL), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
	enum { ROUNDS = 2000 };
	pid_t kids[2];
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			struct pvm_pool *q;
			struct pvm_app *b;
			uint64_t *cnt, *own;
			char name[8];
			snprintf(name, sizeof(name), "own%d", k);
			if (pvm_pool_open(path, &q, NULL, 0) || pvm_app_open(q, "mp", NULL, 0, &b, NULL, 0) ||
			    pvm_open(b, "counter", (void **)&cnt, NULL) || pvm_open(b, name, (void **)&own, NULL))
				_exit(1);
			for (int i = 0; i < ROUNDS; i++) {
				if (pvm_tx_begin(b) || pvm_tx_add(b, name, 0, 8))
					_exit(2);
				(*own)++;
				if (pvm_tx_add(b, "counter", 0, 8))
					_exit(3);
				(*cnt)++;
				if (pvm_tx_commit(b))
					_exit(4);
			}
			pvm_app_close(b);
			pvm_pool_close(q);
			_exit(0);
		}
	}
	for (int k = 0; k < 2; k++) {
		int status;
		waitpid(kids[k], &status, 0);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	char err[256];
	assert_int_equal(pvm_pool_open(path, &p, err, sizeof(err)), 0);
	a = app(p, "mp");
	uint64_t *v;
	assert_int_equal(pvm_open(a, "counter", (void **)&v, NULL), 0);
	assert_int_equal(*v, 2 * ROUNDS);
	assert_int_equal(pvm_open(a, "own0", (void **)&v, NULL), 0);
	assert_int_equal(*v, ROUNDS);
	assert_int_equal(pvm_open(a, "own1", (void **)&v, NULL), 0);
	assert_int_equal(*v, ROUNDS);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* A process dies inside a transaction holding a lock while another one
 * has the pool open: the survivor takes the lock over after the dead
 * journal is rolled back. */
static void test_dead_holder(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "dead");
	uint64_t *v;
	assert_int_equal(pvm_create(a, "x", 8, (void **)&v), 0);
	*v = 7;
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct pvm_pool *q;
		struct pvm_app *b;
		uint64_t *w;
		if (pvm_pool_open(path, &q, NULL, 0) || pvm_app_open(q, "dead", NULL, 0, &b, NULL, 0) ||
		    pvm_open(b, "x", (void **)&w, NULL))
			_exit(1);
		pvm_tx_begin(b);
		pvm_tx_add(b, "x", 0, 8);
		*w = 999;
		pvm_create(b, "ghost", 4096, NULL);
		if (write(pipefd[1], "k", 1) != 1)
			_exit(2);
		pause();
		_exit(0);
	}
	char c;
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	assert_int_equal(pvm_write(a, "x", 0, &(uint64_t){8}, 8), 0); /* recovers, then writes */
	assert_int_equal(*v, 8);
	assert_int_equal(pvm_open(a, "ghost", NULL, NULL), -ENOENT);
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* A damaged application is refused with the structure and field named;
 * the others stay usable. */
/* Patch the closed pool file: write n bytes of `bytes` at `delta` from the
 * first occurrence of `needle` (the caller's anchor); returns what the
 * bytes there were (up to 8) for checks. */
static uint64_t patch_pool(const char *needle, size_t nlen, long delta, const void *bytes, size_t n)
{
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	char *buf = malloc((size_t)len);
	fseek(f, 0, SEEK_SET);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	char *hit = memmem(buf, (size_t)len, needle, nlen);
	assert_non_null(hit);
	uint64_t was = 0;
	memcpy(&was, hit + delta, n < 8 ? n : 8);
	fseek(f, (long)(hit - buf) + delta, SEEK_SET);
	assert_int_equal(fwrite(bytes, 1, n, f), n);
	fclose(f);
	free(buf);
	return was;
}

static void test_damaged_app(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "good"), *b = app(p, "bad");
	void *ptr;
	assert_int_equal(pvm_create(b, "victim", 100, &ptr), 0);
	assert_int_equal(pvm_create(a, "fine", 100, NULL), 0);
	pvm_app_close(a);
	pvm_app_close(b);
	/* Corrupt the "victim" descriptor's size field: it sits in the
	 * table page just before... find it by its name in the mapping. */
	struct pvm_info info;
	b = app(p, "bad");
	assert_int_equal(pvm_open(b, "victim", NULL, &info), 0);
	pvm_app_close(b);
	pvm_pool_close(p);
	uint64_t bogus = 1ull << 40; /* size: 16 bytes into the descriptor, name at 64 */
	patch_pool("victim", 7, -64 + 16, &bogus, 8);
	char err[512];
	assert_int_equal(pvm_pool_open(path, &p, err, sizeof(err)), 0);
	struct pvm_app *x = NULL;
	assert_int_equal(pvm_app_open(p, "bad", NULL, 0, &x, err, sizeof(err)), -EUCLEAN);
	assert_non_null(strstr(err, "field size"));
	assert_non_null(strstr(err, "victim"));
	a = app(p, "good");
	assert_int_equal(pvm_open(a, "fine", NULL, NULL), 0);
	assert_int_equal(pvm_create(a, "more", 100, NULL), 0);
	assert_true(pvm_pool_check(p, 0, err, sizeof(err)) > 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* A pool of another format version (1: before 63-bit IDs and max_step)
 * is refused with -ENOTSUP and a message naming both versions; the pool
 * is left as it was. */
static void test_old_version(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(8 << 20, 0);
	struct pvm_app *a = app(p, "v");
	assert_int_equal(pvm_create(a, "x", 10, NULL), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
	uint32_t v = 1;
	/* the version field, after the magic; it held the current format */
	assert_int_equal(patch_pool("CHELLPV1", 8, 8, &v, 4), 2);
	char err[512];
	assert_int_equal(pvm_pool_open(path, &p, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "field version is 1"));
	assert_non_null(strstr(err, "format version 2"));
	assert_non_null(strstr(err, "older format"));
}

/* Object IDs are the name's hash plus a collision step. Built as
 * test_pvm_narrow the hash has 3 bits (PVM_NH_MASK), so nearly every name
 * collides: deleting or renaming an object must not hide the objects
 * that took later steps of its hash, and a recreated name must not make a
 * second object. */
static void test_collisions(void **st)
{
	(void)st;
	enum { N = 64 };
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "coll");
	char name[32], *ptr;
	struct pvm_info info;
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "c%02d", i);
		assert_int_equal(pvm_create(a, name, 32, (void **)&ptr), 0);
		strcpy(ptr, name);
	}
	for (int i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "c%02d", i);
		assert_int_equal(pvm_delete(a, name), 0);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "c%02d", i);
		int rc = pvm_open(a, name, (void **)&ptr, NULL);
		if (i % 2) {
			assert_int_equal(rc, 0);
			assert_string_equal(ptr, name);
			assert_int_equal(pvm_create(a, name, 8, NULL), -EEXIST);
		} else {
			assert_int_equal(rc, -ENOENT);
		}
	}
	for (int i = 0; i < N; i += 2) {
		snprintf(name, sizeof(name), "c%02d", i);
		assert_int_equal(pvm_create(a, name, 32, (void **)&ptr), 0);
		strcpy(ptr, name);
	}
	assert_int_equal(pvm_rename(a, "c01", "renamed"), 0);
	assert_int_equal(pvm_open(a, "c01", NULL, NULL), -ENOENT);
	assert_int_equal(pvm_open(a, "renamed", (void **)&ptr, NULL), 0);
	assert_string_equal(ptr, "c01");
	assert_int_equal(pvm_rename(a, "renamed", "c01"), 0);
	assert_int_equal(pvm_rename(a, "c03", "c05"), -EEXIST);
	/* Iteration sees each object once; the IDs are distinct. */
	uint64_t cur = 0, nh[N];
	int n = 0;
#if PVM_TEST_NH_MASK != UINT64_MAX
	int displaced = 0;
#endif
	while (pvm_iter(a, &cur, &info) == 1) {
		assert_true(n < N);
		for (int k = 0; k < n; k++)
			assert_true(nh[k] != info.oid.nh);
		nh[n++] = info.oid.nh;
#if PVM_TEST_NH_MASK != UINT64_MAX
		if (info.oid.nh > PVM_TEST_NH_MASK)
			displaced++;
#endif
	}
	assert_int_equal(n, N);
#if PVM_TEST_NH_MASK != UINT64_MAX
	assert_true(displaced > N / 2); /* the narrow build really collides */
#endif
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
	assert_int_equal(pvm_pool_open(path, &p, rep, sizeof(rep)), 0);
	a = app(p, "coll");
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "c%02d", i);
		assert_int_equal(pvm_open(a, name, (void **)&ptr, NULL), 0);
		assert_string_equal(ptr, name);
	}
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* Iteration while the table changes: deleting what was just seen (the
 * table shifts slots back) and creating enough to double the table must
 * neither skip nor repeat an object that was there all along. */
static void test_iter_while_changing(void **st)
{
	(void)st;
	enum { N = 200 };
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "iter");
	char name[32];
	struct pvm_info info;
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "i%03d", i);
		assert_int_equal(pvm_create(a, name, 8, NULL), 0);
	}
	/* Pass 1: delete every object as it is seen. */
	uint64_t cur = 0;
	int seen = 0;
	while (pvm_iter(a, &cur, &info) == 1) {
		assert_int_equal(pvm_delete(a, info.name), 0);
		seen++;
	}
	assert_int_equal(seen, N);
	cur = 0;
	assert_int_equal(pvm_iter(a, &cur, &info), 0);
	/* Pass 2: create 3 new objects per object seen (the table doubles
	 * several times); each old one is seen exactly once. */
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "i%03d", i);
		assert_int_equal(pvm_create(a, name, 8, NULL), 0);
	}
	int count[N] = {0}, made = 0;
	cur = 0;
	while (pvm_iter(a, &cur, &info) == 1) {
		int k;
		if (sscanf(info.name, "i%d", &k) == 1 && info.name[0] == 'i') {
			assert_true(k >= 0 && k < N);
			count[k]++;
		}
		for (int j = 0; j < 3; j++) {
			snprintf(name, sizeof(name), "new%05d", made++);
			assert_int_equal(pvm_create(a, name, 8, NULL), 0);
		}
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(count[i], 1);
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

/* Run fn in a child (which inherits this process's mappings and their
 * protection); 1 if it exits 0, 0 if it dies (SIGSEGV) or fails. */
static int in_child(void (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* not cmocka's handler */
		fn(arg);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
static void store_page(void *ptr)
{
	((volatile char *)ptr)[0] = 'w';
}

/* Another process unprotects an object this one has mapped read-only,
 * deletes it, and its pages are used again: this process must not fault
 * on them, whether it writes through a pointer from pvm_open or the
 * library writes to them (a create, a table). */
static void test_protect_other_process(void **st)
{
	(void)st;
	struct pvm_pool *p = mkpool(64 << 20, 0);
	struct pvm_app *a = app(p, "prot2");
	char *ro;
	assert_int_equal(pvm_create(a, "ro", 3 * PVM_PAGE, (void **)&ro), 0);
	assert_int_equal(pvm_protect(a, "ro", 1), 0);
	assert_false(in_child(store_page, ro)); /* protected: faults */
	pid_t pid = fork();
	if (pid == 0) {
		struct pvm_pool *q;
		struct pvm_app *b;
		if (pvm_pool_open(path, &q, NULL, 0) || pvm_app_open(q, "prot2", NULL, 0, &b, NULL, 0) ||
		    pvm_protect(b, "ro", 0) || pvm_delete(b, "ro"))
			_exit(1);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The freed pages are the lowest free ones: the next objects get
	 * them (the library fills them in this process). */
	void *ptr;
	assert_int_equal(pvm_create(a, "n1", PVM_PAGE, &ptr), 0);
	assert_int_equal(pvm_create(a, "n2", 2 * PVM_PAGE, NULL), 0);
	assert_int_equal(pvm_open(a, "n2", &ptr, NULL), 0);
	assert_true(in_child(store_page, ptr));
	assert_true(in_child(store_page, ro)); /* whatever holds those pages now */
	char rep[1024];
	assert_int_equal(pvm_pool_check(p, 0, rep, sizeof(rep)), 0);
	pvm_app_close(a);
	pvm_pool_close(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_basic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tx, setup, teardown),
		cmocka_unit_test_setup_teardown(test_history_iter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_protect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_processes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_holder, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_app, setup, teardown),
		cmocka_unit_test_setup_teardown(test_old_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tx_add_ptr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tx_nosnap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collisions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_iter_while_changing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_protect_other_process, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
