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
#include <sys/resource.h>

#include "nib.h"

#define FDT_HARD_CAP (1u << 20)

struct chell_file *_Atomic *chell_fdt;
unsigned int chell_fdt_cap;
_Atomic int chell_fdt_max = -1;

static pthread_mutex_t fdt_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t free_mutex = PTHREAD_MUTEX_INITIALIZER; /* guards free_files */
static pthread_mutex_t internal_mutex = PTHREAD_MUTEX_INITIALIZER; /* guards internal_fds */
static struct chell_file *free_files;

int fdt_init(void)
{
	struct rlimit rl;
	unsigned int cap = FDT_HARD_CAP;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < cap)
		cap = (unsigned int)rl.rlim_max;
	/* Untouched pages of an anonymous mapping cost nothing. Descriptors at or
	 * above the cap (only possible with huge limits) use the kernel path. */
	void *p = mmap(NULL, (size_t)cap * sizeof(void *), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -errno;
	chell_fdt = p;
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

void fdt_install(int fd, struct chell_file *f)
{
	atomic_store_explicit(&chell_fdt[fd], f, memory_order_release);
	int m = atomic_load(&chell_fdt_max);
	while (fd > m && !atomic_compare_exchange_weak(&chell_fdt_max, &m, fd))
		;
}

struct chell_file *fdt_remove(int fd)
{
	if ((unsigned int)fd >= chell_fdt_cap)
		return NULL;
	return atomic_exchange(&chell_fdt[fd], NULL);
}

struct chell_file *file_alloc(void)
{
	struct chell_file *f;
	pthread_mutex_lock(&free_mutex);
	f = free_files;
	if (f)
		free_files = f->next_free;
	pthread_mutex_unlock(&free_mutex);
	if (!f) {
		f = calloc(1, sizeof(*f));
		if (!f)
			return NULL;
	}
	/* refs may carry a transient reference of a racing reader: add, don't store */
	atomic_fetch_add((_Atomic uint32_t *)&f->refs, 1);
	f->ofd = NULL;
	f->stack = NULL;
	f->path = NULL;
	f->release_pending = 0;
	f->fast = NULL;
	memset(f->local, 0, sizeof(f->local));
	atomic_store((_Atomic uint32_t *)&f->live, 1);
	return f;
}

void file_ref(struct chell_file *f)
{
	atomic_fetch_add_explicit((_Atomic uint32_t *)&f->refs, 1, memory_order_relaxed);
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
			region_free_slot(f->slot);
		}
	}
	free(f->path);
	f->path = NULL;
	f->ofd = NULL;
	pthread_mutex_lock(&free_mutex);
	f->next_free = free_files;
	free_files = f;
	pthread_mutex_unlock(&free_mutex);
	chell_crit_leave();
}

void file_put(struct chell_file *f)
{
	if (atomic_fetch_sub_explicit((_Atomic uint32_t *)&f->refs, 1, memory_order_acq_rel) != 1)
		return;
	uint32_t one = 1;
	if (atomic_compare_exchange_strong((_Atomic uint32_t *)&f->live, &one, 0))
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
static int internal_floor(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1000;
	long cur = (long)rl.rlim_cur;
	/* Near the top of the soft limit, where applications rarely look. */
	long base = cur > 512 ? cur - 256 : cur / 2;
	return base < 10 ? 10 : (int)base;
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
			nfd = sys_fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, internal_floor());
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
