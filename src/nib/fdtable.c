/* SPDX-License-Identifier: MIT */
/*
 * Per-process descriptor table: fd -> struct chell_file, and Chell's own
 * internal descriptors.
 *
 * Lookups are lock-free (one bounds check and one load): that is the whole
 * overhead Chell adds to a descriptor no handler claims. Updates happen under
 * a process-local mutex. struct chell_file objects are never returned to the
 * allocator but recycled through a free list, so a reader racing with close()
 * may touch a recycled object but never unmapped memory; file_get_fd()
 * re-checks the table after taking its reference.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "nib.h"

#define FDT_HARD_CAP (1u << 20)

struct fdt chell_fdt_proc = {.max = -1};
__thread struct fdt *chell_tls_fdt = &chell_fdt_proc;
unsigned int chell_fdt_cap;
static struct fdt *all_tables; /* every table (under fdt_mutex) */
static bool tables_final;      /* the process is exiting: tables stay as they are */
static pthread_key_t private_key; /* destructor: a thread with a private table exits */

static pthread_mutex_t fdt_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t free_mutex = PTHREAD_MUTEX_INITIALIZER; /* guards free_files */
static pthread_mutex_t internal_mutex = PTHREAD_MUTEX_INITIALIZER; /* guards internal_fds */
static struct nib_file *free_files;

static size_t table_bytes(unsigned int cap)
{
	return (size_t)cap * sizeof(void *);
}

/* Untouched pages of an anonymous mapping cost nothing. Descriptors at or
 * above the cap (only possible with huge limits) use the kernel path. */
static struct chell_file *_Atomic *entries_new(unsigned int cap)
{
	void *p = mmap(NULL, table_bytes(cap), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* A private table (the process's first one is chell_fdt_proc). */
static struct fdt *table_new(unsigned int cap)
{
	struct fdt *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->e = entries_new(cap);
	if (!t->e) {
		free(t);
		return NULL;
	}
	atomic_store(&t->max, -1);
	return t;
}

static void table_unmap(struct fdt *t)
{
	munmap((void *)t->e, table_bytes(chell_fdt_cap));
	if (t != &chell_fdt_proc)
		free(t);
}

static void thread_left(void *p);

int fdt_init(void)
{
	struct rlimit rl;
	unsigned int cap = FDT_HARD_CAP;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < cap)
		cap = (unsigned int)rl.rlim_max;
	struct chell_file *_Atomic *e = entries_new(cap);
	if (!e)
		return -ENOMEM;
	if (pthread_key_create(&private_key, thread_left) != 0) {
		munmap((void *)e, table_bytes(cap));
		return -EAGAIN;
	}
	chell_fdt_proc.e = e;
	all_tables = &chell_fdt_proc;
	chell_fdt_cap = cap;
	return 0;
}

void fdt_lock(void)
{
	chell_crit_enter();
	pthread_mutex_lock(&fdt_mutex);
}

void fdt_unlock(void)
{
	pthread_mutex_unlock(&fdt_mutex);
	chell_crit_leave();
}

void fdt_lock_reinit_child(void)
{
	/* Only the forking thread (the holder) exists in the child. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	fdt_mutex = fresh;
	free_mutex = fresh;
	internal_mutex = fresh;
	pthread_mutex_lock(&fdt_mutex);
}

static void table_install(struct fdt *t, int fd, struct chell_file *f)
{
	atomic_store_explicit(&t->e[fd], f, memory_order_release);
	int m = atomic_load(&t->max);
	while (fd > m && !atomic_compare_exchange_weak(&t->max, &m, fd))
		;
}

void fdt_install(int fd, struct chell_file *f)
{
	table_install(fdt_cur(), fd, f);
}

struct chell_file *fdt_remove(int fd)
{
	if ((unsigned int)fd >= chell_fdt_cap)
		return NULL;
	return atomic_exchange(&fdt_cur()->e[fd], NULL);
}

/* ------------------------------------------------------- private tables */

/*
 * Drop the descriptors of table t: the kernel closed them (its files struct
 * went away with its last thread, or the process exits). One entry at a
 * time under the lock; the last put outside it (see hub.c: forget_fd).
 */
static void table_drop(struct fdt *t)
{
	int max = atomic_load(&t->max);
	for (int fd = 0; fd <= max; fd++) {
		fdt_lock();
		struct chell_file *f = atomic_exchange(&t->e[fd], NULL);
		if (f == FILE_CLOSING)
			f = NULL;
		if (f && atomic_fetch_sub((_Atomic uint32_t *)&f->ofd->refs, 1) == 1)
			f->release_pending = 1;
		fdt_unlock();
		if (f)
			file_put(f);
	}
}

/* Unlink and unmap an emptied table (not the process's first one). */
static void table_free(struct fdt *t)
{
	fdt_lock();
	for (struct fdt **pp = &all_tables; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	fdt_unlock();
	table_unmap(t);
}

/* A thread with a private table exits: the kernel drops its files struct
 * with the last thread using it, and its descriptors with it. */
static void thread_left(void *p)
{
	struct fdt *t = p;
	if (t && chell_tls_fdt == t)
		chell_tls_fdt = &chell_fdt_proc;
	fdt_private_put(t);
}

/* One more thread will use the caller's private table (a thread it
 * creates shares its kernel table); NULL if the caller uses the process's. */
struct fdt *fdt_private_hold(void)
{
	struct fdt *t = chell_tls_fdt;
	if (t == &chell_fdt_proc)
		return NULL;
	fdt_lock();
	t->users++;
	fdt_unlock();
	return t;
}

/* A thread stops using private table t (it exited, or was never created). */
void fdt_private_put(struct fdt *t)
{
	if (!t)
		return;
	fdt_lock();
	bool last = !tables_final && --t->users == 0;
	fdt_unlock();
	if (last) {
		table_drop(t);
		table_free(t);
	}
}

/* The calling (new) thread uses t, held for it by fdt_private_hold. */
void fdt_private_join(struct fdt *t)
{
	chell_tls_fdt = t;
	pthread_setspecific(private_key, t);
}

/* A copy of table `from` holding its own references (caller holds fdt_lock,
 * so no close is half done: hub_close runs entirely under it). */
static struct fdt *table_copy(struct fdt *from)
{
	struct fdt *t = table_new(chell_fdt_cap);
	if (!t)
		return NULL;
	int max = atomic_load(&from->max);
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = atomic_load(&from->e[fd]);
		if (!f || f == FILE_CLOSING)
			continue;
		file_ref(f);
		atomic_fetch_add((_Atomic uint32_t *)&f->ofd->refs, 1);
		table_install(t, fd, f);
	}
	t->users = 1;
	t->next = all_tables;
	all_tables = t;
	return t;
}

/* Undo table_copy after the kernel refused to unshare (caller holds the
 * lock): the originals still hold every OFD, so no release can be due. */
static void table_uncopy(struct fdt *t)
{
	int max = atomic_load(&t->max);
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = atomic_exchange(&t->e[fd], NULL);
		if (!f)
			continue;
		atomic_fetch_sub((_Atomic uint32_t *)&f->ofd->refs, 1);
		file_put(f); /* not the last reference: the original entry holds one */
	}
	for (struct fdt **pp = &all_tables; *pp; pp = &(*pp)->next)
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	table_unmap(t);
}

/* Threads of this process, from /proc/self/stat (0 if unknown). */
static int thread_count(void)
{
	char buf[1024];
	int fd = sys_open("/proc/self/stat", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	ssize_t n = sys_read(fd, buf, sizeof(buf) - 1);
	sys_close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* the command name may hold anything */
	int field = 2, threads = 0;
	for (; p && *p; p++)
		if (*p == ' ' && ++field == 20) {
			threads = atoi(p + 1);
			break;
		}
	return threads;
}

/*
 * unshare(flags) with CLONE_FILES: the kernel gives the calling thread a
 * copy of the table it shared, and so does Chell - under the table lock,
 * so both copies are taken at the same point. A table nobody else uses
 * stays as it is (the kernel does not copy it either).
 */
int fdt_unshare_call(int flags)
{
	if (!chell_fdt_cap)
		return (int)CHELL_SC(SYS_unshare, flags, 0, 0, 0, 0, 0);
	struct fdt *old = fdt_cur();
	fdt_lock();
	bool alone = old == &chell_fdt_proc ? thread_count() == 1 : old->users == 1;
	struct fdt *t = alone ? NULL : table_copy(old);
	if (!alone && !t) {
		fdt_unlock();
		return -ENOMEM;
	}
	int r = (int)CHELL_SC(SYS_unshare, flags, 0, 0, 0, 0, 0);
	if (r < 0) {
		if (t)
			table_uncopy(t);
		fdt_unlock();
		return r;
	}
	if (t && old != &chell_fdt_proc)
		old->users--; /* others still use it (users was > 1) */
	if (t) {
		chell_tls_fdt = t;
		pthread_setspecific(private_key, t);
	}
	fdt_unlock();
	return 0;
}

int fdt_unshare(void)
{
	return fdt_unshare_call(CLONE_FILES);
}

/*
 * In the child of fork(): only the forking thread exists, and the kernel
 * copied its table. That table becomes the process's; every other table's
 * entries are references of this process's memory only (the child holds
 * none of their descriptors, the OFD counts never included it), so they
 * are put without touching the OFDs.
 */
void fdt_after_fork_child(void)
{
	struct fdt *cur = fdt_cur();
	if (!chell_fdt_cap || (cur == &chell_fdt_proc && !cur->next))
		return; /* the usual case: one table */
	/* the other tables: every one but cur (the process's own included) */
	struct fdt *others = NULL;
	for (struct fdt *t = all_tables, *nx; t; t = nx) {
		nx = t->next;
		if (t != cur) {
			t->next = others;
			others = t;
		}
	}
	struct fdt old_proc = chell_fdt_proc; /* its entries, if cur is private */
	if (cur != &chell_fdt_proc) {
		/* cur's entries become the process table's (threads start there) */
		chell_fdt_proc.e = cur->e;
		atomic_store(&chell_fdt_proc.max, atomic_load(&cur->max));
		free(cur);
		chell_tls_fdt = &chell_fdt_proc;
		pthread_setspecific(private_key, NULL);
	}
	chell_fdt_proc.next = NULL;
	chell_fdt_proc.users = 0;
	chell_fdt_proc.vm_child = 0;
	all_tables = &chell_fdt_proc;
	for (struct fdt *t = others, *nx; t; t = nx) {
		nx = t->next;
		struct fdt *src = t == &chell_fdt_proc ? &old_proc : t;
		int max = atomic_load(&src->max);
		for (int fd = 0; fd <= max; fd++) {
			struct chell_file *f = atomic_exchange(&src->e[fd], NULL);
			if (f && f != FILE_CLOSING)
				file_put(f);
		}
		munmap((void *)src->e, table_bytes(chell_fdt_cap));
		if (t != &chell_fdt_proc)
			free(t);
	}
}

struct fdt *fdt_vm_child_table(void)
{
	fdt_lock();
	struct fdt *t = table_copy(fdt_cur());
	if (t)
		t->vm_child = 1;
	fdt_unlock();
	return t;
}

/*
 * The vfork-like child no longer runs on t. If it exited through Chell
 * (_exit, or its function returned) its table is already dropped; if it
 * exec'd, the new image holds the surviving OFD references and the exec
 * wrapper already dropped the close-on-exec ones, so only this memory's
 * references remain. A failed clone undoes the copy.
 */
void fdt_vm_child_done(struct fdt *t, bool ok)
{
	if (!t)
		return;
	if (!ok) {
		fdt_lock();
		table_uncopy(t);
		fdt_unlock();
		return;
	}
	int max = atomic_load(&t->max);
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = atomic_exchange(&t->e[fd], NULL);
		if (f && f != FILE_CLOSING)
			file_put(f);
	}
	table_free(t);
}

/* Process exit: every kernel table goes away; the calling thread's last.
 * Tables stay mapped (other threads may still be peeking until the kernel
 * ends them), and no exiting thread frees one from now on. */
void fdt_drop_all(void)
{
	if (!chell_fdt_cap)
		return;
	if (fdt_cur()->vm_child) { /* a vfork-like child: only its own table */
		table_drop(fdt_cur());
		return;
	}
	fdt_lock();
	tables_final = true;
	struct fdt *head = all_tables; /* tables are only added at the head */
	fdt_unlock();
	for (struct fdt *t = head; t; t = t->next)
		if (t != fdt_cur())
			table_drop(t);
	table_drop(fdt_cur());
}

struct chell_file *file_alloc(void)
{
	struct nib_file *nf;
	pthread_mutex_lock(&free_mutex);
	nf = free_files;
	if (nf)
		free_files = nf->next_free;
	pthread_mutex_unlock(&free_mutex);
	if (!nf) {
		nf = calloc(1, sizeof(*nf));
		if (!nf)
			return NULL;
	}
	/* refs may carry a transient reference of a racing reader: add, don't store */
	atomic_fetch_add((_Atomic uint32_t *)&nf->refs, 1);
	struct chell_file *f = &nf->pub;
	f->ofd = NULL;
	f->stack = NULL;
	f->path = NULL;
	f->release_pending = 0;
	f->fast = NULL;
	memset(f->local, 0, sizeof(f->local));
	atomic_store((_Atomic uint32_t *)&nf->live, 1);
	return f;
}

void file_ref(struct chell_file *f)
{
	atomic_fetch_add_explicit((_Atomic uint32_t *)&nib_file(f)->refs, 1, memory_order_relaxed);
}

/* A close is in progress on fd (under the table lock): wait for it to end
 * and look again. */
struct chell_file *chell_wait_closing(int fd)
{
	fdt_lock();
	fdt_unlock();
	return fdt_peek(fd);
}

struct chell_file *file_get_fd(int fd)
{
	struct chell_file *f = fdt_peek(fd);
	while (unlikely(f == FILE_CLOSING))
		f = chell_wait_closing(fd);
	if (!f)
		return NULL;
	file_ref(f);
	if (unlikely(fdt_peek(fd) != f)) { /* closed or replaced meanwhile */
		file_put(f);
		return NULL;
	}
	return f;
}

/* Last reference: per-process detach, then the global release if this
 * process dropped the OFD's last descriptor, then recycle. */
static void file_destroy(struct chell_file *f)
{
	chell_hazard_wait(f); /* calls in other threads finish with f first */
	chell_crit_enter();
	f->fast = NULL;
	if (f->ofd && f->stack) {
		for (int i = f->stack->depth - 1; i >= 0; i--) {
			const struct chell_handler *h = f->stack->handlers[i];
			chell_ctx c = {f, -1, i, CHELL_OP_CLOSE};
			if (h->detach)
				h->detach(&c);
		}
		if (f->release_pending) {
			for (int i = f->stack->depth - 1; i >= 0; i--) {
				const struct chell_handler *h = f->stack->handlers[i];
				chell_ctx c = {f, -1, i, CHELL_OP_CLOSE};
				if (h->release)
					h->release(&c);
			}
			ofd_table_free_slot(f->slot);
		}
	}
	free(f->path);
	f->path = NULL;
	f->ofd = NULL;
	pthread_mutex_lock(&free_mutex);
	nib_file(f)->next_free = free_files;
	free_files = nib_file(f);
	pthread_mutex_unlock(&free_mutex);
	chell_crit_leave();
}

void file_put(struct chell_file *f)
{
	struct nib_file *nf = nib_file(f);
	if (atomic_fetch_sub_explicit((_Atomic uint32_t *)&nf->refs, 1, memory_order_acq_rel) != 1)
		return;
	uint32_t one = 1;
	if (atomic_compare_exchange_strong((_Atomic uint32_t *)&nf->live, &one, 0))
		file_destroy(f);
}

/* ------------------------------------------------------------ internal fds */

/* Descriptors Chell keeps for itself (the region memfd, shadow copies, the
 * trace log, chunk files, sockets). They live above the application's soft
 * RLIMIT_NOFILE (interpose_rlimit.c), and close()/close_range() from the
 * application skip them: to the application they do not exist. */
#define MAX_INTERNAL 256
static int internal_fds[MAX_INTERNAL];
static _Atomic int internal_count;

bool chell_is_internal_fd(int fd)
{
	int n = atomic_load_explicit(&internal_count, memory_order_acquire);
	for (int i = 0; i < n; i++)
		if (__atomic_load_n(&internal_fds[i], __ATOMIC_RELAXED) == fd)
			return true;
	return false;
}

/* Where internal descriptors go when there is no room above the soft limit
 * (it equals a hard limit this process may not raise). */
int chell_internal_floor(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1000;
	long cur = (long)rl.rlim_cur;
	/* Near the top of the soft limit, where applications rarely look. */
	long base = cur > 512 ? cur - 256 : cur / 2;
	return base < 10 ? 10 : (int)base;
}

CHELL_EXPORT bool chell_fdt_private(void)
{
	return fdt_cur() != &chell_fdt_proc;
}

/* cloexec: 1 or 0 moves fd high with that flag; -1 registers fd as it is
 * (an internal descriptor inherited across exec). */
CHELL_EXPORT int chell_internal_fd(int fd, int cloexec)
{
	if (fd < 0)
		return fd;
	if (cloexec >= 0) {
		int nfd = chell_nofile_place(fd, cloexec);
		if (nfd < 0)
			nfd = sys_fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, chell_internal_floor());
		if (nfd >= 0 && nfd != fd) {
			sys_close(fd);
			fd = nfd;
		}
	}
	pthread_mutex_lock(&internal_mutex);
	int n = atomic_load(&internal_count), i;
	for (i = 0; i < n; i++)
		if (internal_fds[i] == -1 || internal_fds[i] == fd)
			break;
	if (i < MAX_INTERNAL) {
		__atomic_store_n(&internal_fds[i], fd, __ATOMIC_RELAXED);
		if (i == n)
			atomic_store_explicit(&internal_count, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&internal_mutex);
	return fd;
}

CHELL_EXPORT void chell_internal_close(int fd)
{
	pthread_mutex_lock(&internal_mutex);
	int n = atomic_load(&internal_count);
	for (int i = 0; i < n; i++)
		if (internal_fds[i] == fd)
			__atomic_store_n(&internal_fds[i], -1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&internal_mutex);
	sys_close(fd);
}

/* Sorted copy of the internal descriptors (for close_range). */
int chell_internal_list(int *out, int max)
{
	int n = 0, cnt = atomic_load(&internal_count);
	for (int i = 0; i < cnt && n < max; i++) {
		int fd = __atomic_load_n(&internal_fds[i], __ATOMIC_RELAXED);
		if (fd >= 0)
			out[n++] = fd;
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
			int t = out[j];
			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}
