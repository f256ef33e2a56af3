/* SPDX-License-Identifier: MIT */
/*
 * Pools: create, open (recovery when alone), growth, the robust locks and
 * the journal claims; applications: open and close.
 *
 * Who runs recovery. Every process opening the pool holds an OFD read lock
 * on byte 1 of the file while it has the pool open; byte 0 is a gate held
 * (write) only during an open. An opener that gets a write lock on byte 1
 * is alone: it rolls back every journal, re-initialises the mutexes (their
 * state in the file means nothing after a restart) and collects garbage,
 * then downgrades to the read lock. Later openers find byte 1 read-locked
 * and just attach. Processes that die while others go on are handled by
 * the robust mutexes: whoever next takes one of the dead process's locks,
 * or its journal claim, gets EOWNERDEAD and first rolls back every journal
 * whose claim is owner-dead (pvm_recover_dead), under the recovery mutex,
 * so no one sees the dead transaction's half-done bytes.
 */
#include "pvm_internal.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#define DEF_MAX (1ull << 30)
#define DEF_INITIAL (16ull << 20)
#define DEF_JOURNALS 16u
#define DEF_ENTRIES 16384u
#define DEF_APPS 64u

static uint64_t pages_of(uint64_t bytes)
{
	return (bytes + PVM_PAGE - 1) / PVM_PAGE;
}

uint32_t pvm_aent_crc(const struct pvm_aent *a)
{
	return chell_crc32c(0, a, offsetof(struct pvm_aent, crc));
}

static uint32_t root_crc(const struct pvm_root *r)
{
	return chell_crc32c(0, r, offsetof(struct pvm_root, crc));
}

/* New pages (unreachable until the transaction that links them commits)
 * are written without undo records; they only have to be durable first. */
void pvm_flush_new(struct pvm_pool *p, void *addr, size_t len)
{
	p->ops.flush(p->ops.ctx, addr, len);
}

/* Non-DAX, non-tmpfs files: the page cache is not the medium. */
static void msync_drain(void *ctx)
{
	struct pvm_pool *p = ctx;
	/* Before the root exists (formatting) the whole mapping; pages past
	 * the end of the file are never dirty. */
	size_t len = p->root ? p->heap_file_off + p->root->cur_pages * PVM_PAGE : p->map_len;
	(void)msync(p->map, len, MS_SYNC);
}
static void nop_flush(void *ctx, const void *addr, size_t len)
{
	(void)ctx, (void)addr, (void)len;
}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	(void)ctx;
	return memcpy(dst, src, n);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Map the pages of [off, off+len) of the file into this process now: an
 * object's pages are then not faulted in one by one at first touch (one
 * fault per page-aligned object would dominate creating small ones). The
 * space was allocated (posix_fallocate), so this only maps it. Best effort:
 * kernels before 5.14 do not know the advice. */
static void populate(struct pvm_pool *p, uint64_t off, uint64_t len)
{
	if (p->map && len)
		(void)madvise(p->map + off, (size_t)len, MADV_POPULATE_WRITE);
}

void pvm_writable_all(struct pvm_pool *p)
{
	if (__atomic_load_n(&p->ro_any, __ATOMIC_RELAXED))
		(void)mprotect(p->heap, (size_t)p->heap_size, PROT_READ | PROT_WRITE);
}

/* Called with the metadata lock held, or before an optimistic lookup. */
void pvm_prot_sync(struct pvm_pool *p)
{
	if (!__atomic_load_n(&p->ro_any, __ATOMIC_RELAXED))
		return;
	uint64_t g = *pvm_prot_gen(p);
	if (g != __atomic_load_n(&p->prot_seen, __ATOMIC_RELAXED)) {
		pvm_writable_all(p);
		__atomic_store_n(&p->prot_seen, g, __ATOMIC_RELAXED);
	}
}

/* ------------------------------------------------------------ locks */

/* Roll back the journal of every client that died holding its claim.
 *
 * A lock of the dead process can report EOWNERDEAD before the kernel has
 * marked the rest of its robust list (the waker runs on another CPU while
 * the exit path goes on down the list), so a claim can still look held by
 * the dead process here. Its recorded pid tells: if that process is gone
 * or exiting, wait for the claim (the kernel hands it over owner-dead)
 * instead of skipping it - otherwise its stale undo image would be applied
 * later, over what others committed meanwhile. (Found by chell_pvm_killer.) */
static int pid_exiting(pid_t pid)
{
	char path[64], buf[512];
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "pid (comm) S ppid pgrp session tty tpgid flags ...": comm may hold
	 * anything, so count from its closing parenthesis. */
	char *q = strrchr(buf, ')');
	if (!q)
		return 0;
	char state = 0;
	unsigned long flags = 0;
	if (sscanf(q + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
		return 0;
	return state == 'Z' || state == 'X' || (flags & 0x4 /* PF_EXITING */);
}

static void recover_dead(struct pvm_pool *p)
{
	pthread_mutex_t *rm = pvm_mutex(p, PVM_M_RECOVERY);
	int rc = pthread_mutex_lock(rm);
	if (rc == EOWNERDEAD)
		pthread_mutex_consistent(rm); /* its recovery is idempotent: redone below */
	pthread_mutex_lock(&p->local);
	for (uint32_t j = 0; j < p->journals; j++) {
		if (p->claimed[j])
			continue;
		pthread_mutex_t *cm = pvm_mutex(p, PVM_M_CLAIM(j));
		int c = pthread_mutex_trylock(cm);
		if (c == EBUSY) {
			pid_t owner = (pid_t)*pvm_claim_pid(p, j);
			if (owner > 0 && owner != getpid() && pid_exiting(owner))
				c = pthread_mutex_lock(cm);
		}
		if (c == EOWNERDEAD) {
			pvm_writable_all(p);
			chell_journal_recover(p->r, j);
			pthread_mutex_consistent(cm);
		}
		if (c == 0 || c == EOWNERDEAD)
			pthread_mutex_unlock(cm);
	}
	pthread_mutex_unlock(&p->local);
	pthread_mutex_unlock(rm);
}

int pvm_lock(struct pvm_pool *p, pthread_mutex_t *m, int timed)
{
	/* Uncontended (the common case): no clock read for the deadline. */
	int rc = pthread_mutex_trylock(m);
	if (rc == EBUSY && timed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += PVM_LOCK_WAIT_MS / 1000;
		ts.tv_nsec += (long)(PVM_LOCK_WAIT_MS % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		rc = pthread_mutex_timedlock(m, &ts);
	} else if (rc == EBUSY) {
		rc = pthread_mutex_lock(m);
	}
	if (rc == EOWNERDEAD) {
		recover_dead(p);
		pthread_mutex_consistent(m);
		if (m == pvm_mutex(p, PVM_M_META)) { /* its tables are whole again */
			uint64_t *seq = pvm_table_seq(p);
			__atomic_store_n(seq, (__atomic_load_n(seq, __ATOMIC_RELAXED) | 1) + 1, __ATOMIC_RELEASE);
		}
		return 0;
	}
	if (rc == ETIMEDOUT || rc == EDEADLK)
		return -EDEADLK;
	return -rc;
}

static int init_mutexes(struct pvm_pool *p)
{
	pthread_mutexattr_t at;
	pthread_mutexattr_init(&at);
	pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
	pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);
	uint32_t n = 2 + p->journals + p->nlocks;
	for (uint32_t i = 0; i < n; i++) {
		int rc = pthread_mutex_init(pvm_mutex(p, i), &at);
		if (rc) {
			pthread_mutexattr_destroy(&at);
			return -rc;
		}
	}
	pthread_mutexattr_destroy(&at);
	return 0;
}

/* ------------------------------------------------------------ format */

struct plan {
	struct chell_region_layout lay;
	uint64_t shared_off, shared_size, bm_off, bm_bytes, apps_off, data_page, max_pages, initial_pages;
	uint32_t max_apps, journals;
};

static int make_plan(const struct pvm_pool_opts *o, struct plan *pl, char *err, size_t errlen)
{
	struct pvm_pool_opts d = {0};
	if (o)
		d = *o;
	if (!d.max_size)
		d.max_size = DEF_MAX;
	if (!d.initial_size)
		d.initial_size = d.max_size < DEF_INITIAL ? d.max_size : DEF_INITIAL;
	if (!d.journals)
		d.journals = DEF_JOURNALS;
	if (!d.journal_entries)
		d.journal_entries = DEF_ENTRIES;
	if (!d.max_apps)
		d.max_apps = DEF_APPS;
	if (d.max_apps > 4096 || d.journals > 1024) {
		pvm_err(err, errlen, "pool option out of range: max_apps %u (1..4096), journals %u (1..1024)",
			d.max_apps, d.journals);
		return -EINVAL;
	}
	memset(pl, 0, sizeof(*pl));
	pl->max_pages = d.max_size / PVM_PAGE;
	pl->journals = d.journals;
	pl->max_apps = d.max_apps;
	pl->shared_off = PVM_PAGE;
	pl->shared_size = (uint64_t)(2 + d.journals + PVM_NLOCKS) * PVM_MUTEX_STRIDE;
	pl->bm_off = pages_of(pl->shared_off + pl->shared_size) * PVM_PAGE;
	pl->bm_bytes = (pl->max_pages + 63) / 64 * 8;
	pl->apps_off = pages_of(pl->bm_off + pl->bm_bytes) * PVM_PAGE;
	pl->data_page = pages_of(pl->apps_off + (uint64_t)d.max_apps * sizeof(struct pvm_aent));
	if (pl->max_pages < pl->data_page + 16 || pl->max_pages > UINT32_MAX) {
		pvm_err(err, errlen, "pool option max_size %llu out of range (%llu bytes..16 TiB)",
			(unsigned long long)d.max_size, (unsigned long long)(pl->data_page + 16) * PVM_PAGE);
		return -EINVAL;
	}
	pl->initial_pages = pages_of(d.initial_size);
	if (pl->initial_pages < pl->data_page + 16)
		pl->initial_pages = pl->data_page + 16;
	if (pl->initial_pages > pl->max_pages)
		pl->initial_pages = pl->max_pages;
	pl->lay.journals = d.journals;
	pl->lay.journal_entries = d.journal_entries;
	pl->lay.heap_size = pl->max_pages * PVM_PAGE;
	return 0;
}

/* Write the root and the reserved pages' bitmap bits; the rest of the
 * heap's first data_page pages is zero already (a new file or image). */
static void format_heap(uint8_t *heap, const struct plan *pl, const struct chell_persist_ops *ops)
{
	struct pvm_root *r = (struct pvm_root *)heap;
	memset(heap, 0, pl->data_page * PVM_PAGE);
	memcpy(r->magic, PVM_MAGIC, 8);
	r->version = PVM_VERSION;
	r->page = PVM_PAGE;
	r->max_pages = pl->max_pages;
	r->shared_off = pl->shared_off;
	r->shared_size = pl->shared_size;
	r->bm_off = pl->bm_off;
	r->bm_bytes = pl->bm_bytes;
	r->apps_off = pl->apps_off;
	r->max_apps = pl->max_apps;
	r->nlocks = PVM_NLOCKS;
	r->data_page = pl->data_page;
	r->journals = pl->journals;
	r->crc = root_crc(r);
	r->cur_pages = pl->initial_pages;
	uint64_t *bm = (uint64_t *)(heap + pl->bm_off);
	for (uint64_t i = 0; i < pl->data_page; i++)
		bm[i / 64] |= 1ull << (i % 64);
	ops->flush(ops->ctx, heap, pl->data_page * PVM_PAGE);
	ops->drain(ops->ctx);
}

/* Validate the root against the heap; fill the pool's copies. */
static int check_root(struct pvm_pool *p, char *err, size_t errlen)
{
	struct pvm_root r;
	if (p->heap_size < sizeof(r)) {
		pvm_err(err, errlen, "pool root: heap of %llu bytes is too small", (unsigned long long)p->heap_size);
		return -EUCLEAN;
	}
	memcpy(&r, p->heap, sizeof(r));
	if (memcmp(r.magic, PVM_MAGIC, 8)) {
		pvm_err(err, errlen, "pool root: field magic is not \"%s\" (a region, but not a pVM pool)", PVM_MAGIC);
		return -EINVAL;
	}
	if (r.version != PVM_VERSION) {
		pvm_err(err, errlen,
			"pool root: field version is %u, this build reads pool format version %u only%s", r.version,
			PVM_VERSION,
			r.version < PVM_VERSION ? " (an older format: export its objects with the build that wrote it "
						  "and import them into a new pool)"
						: " (written by a newer build)");
		return -ENOTSUP;
	}
	uint32_t c = root_crc(&r);
	if (c != r.crc) {
		pvm_err(err, errlen, "pool root: field crc 0x%08x, computed 0x%08x", r.crc, c);
		return -EUCLEAN;
	}
	uint32_t journals = 0;
	/* The layout must be the one make_plan gives for these numbers. */
	struct pvm_pool_opts o = {.max_size = r.max_pages * PVM_PAGE, .max_apps = r.max_apps,
				  .journals = r.journals, .journal_entries = 2};
	struct plan pl;
	const char *bad = NULL;
	if (r.page != PVM_PAGE)
		bad = "page";
	else if (r.max_pages * PVM_PAGE != p->heap_size)
		bad = "max_pages";
	else if (r.nlocks != PVM_NLOCKS)
		bad = "nlocks";
	else if (r.max_apps == 0 || r.journals == 0 || make_plan(&o, &pl, NULL, 0))
		bad = "max_apps";
	else if (r.shared_off != pl.shared_off || r.shared_size != pl.shared_size)
		bad = "shared_off";
	else if (r.bm_off != pl.bm_off || r.bm_bytes != pl.bm_bytes)
		bad = "bm_off";
	else if (r.apps_off != pl.apps_off)
		bad = "apps_off";
	else if (r.data_page != pl.data_page)
		bad = "data_page";
	if (bad) {
		pvm_err(err, errlen, "pool root: field %s is inconsistent with the layout", bad);
		return -EUCLEAN;
	}
	journals = r.journals;
	p->root = (struct pvm_root *)p->heap;
	p->max_pages = r.max_pages;
	p->bm_off = r.bm_off;
	p->apps_off = r.apps_off;
	p->data_page = r.data_page;
	p->shared_off = r.shared_off;
	p->max_apps = r.max_apps;
	p->nlocks = r.nlocks;
	p->journals = journals;
	uint64_t cur = p->root->cur_pages;
	if (cur < p->data_page || cur > p->max_pages) {
		pvm_err(err, errlen, "pool root: field cur_pages %llu out of range %llu..%llu", (unsigned long long)cur,
			(unsigned long long)p->data_page, (unsigned long long)p->max_pages);
		return -EUCLEAN;
	}
	return 0;
}

static struct pvm_pool *pool_new(void)
{
	struct pvm_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->fd = -1;
	pthread_mutex_init(&p->local, NULL);
	return p;
}

void pvm_pool_close(struct pvm_pool *p)
{
	if (!p)
		return;
	chell_region_close(p->r);
	if (p->map)
		munmap(p->map, p->map_len);
	if (p->fd >= 0)
		close(p->fd); /* drops the OFD locks */
	pthread_mutex_destroy(&p->local);
	free(p->claimed);
	free(p);
}

/* Everything after the region is attached: root, journals table, and for
 * the process that is alone, recovery. */
static int pool_attach(struct pvm_pool *p, int alone, char *err, size_t errlen)
{
	p->heap = chell_region_heap(p->r, &p->heap_size);
	int rc = check_root(p, err, errlen);
	if (rc)
		return rc;
	p->claimed = calloc(p->journals, 1);
	if (!p->claimed)
		return -ENOMEM;
	if (!alone)
		return 0;
	rc = init_mutexes(p);
	*pvm_table_seq(p) = 0;
	if (rc) {
		pvm_err(err, errlen, "cannot initialise the pool's locks: %s", strerror(-rc));
		return rc;
	}
	/* Journal 0 does the collection: nobody else has the pool open. */
	rc = pvm_gc(p, 0, NULL, err, errlen);
	return rc < 0 ? rc : 0;
}

int pvm_pool_open_mem(void *base, size_t len, const struct chell_persist_ops *ops, int format,
		      const struct pvm_pool_opts *opts, struct pvm_pool **out, char *err, size_t errlen)
{
	if (!base || !out)
		return -EINVAL;
	*out = NULL;
	struct pvm_pool *p = pool_new();
	if (!p)
		return -ENOMEM;
	p->ops = ops ? *ops : *chell_persist_default();
	int rc = 0;
	if (format) {
		struct plan pl;
		rc = make_plan(opts, &pl, err, errlen);
		if (!rc)
			rc = chell_region_format_mem(base, len, &pl.lay, &p->ops, err, errlen);
		if (!rc)
			rc = chell_region_attach_mem(base, len, &p->ops, 0, &p->r, err, errlen);
		if (!rc) {
			uint64_t hs;
			uint8_t *heap = chell_region_heap(p->r, &hs);
			pl.initial_pages = pl.max_pages; /* memory images do not grow */
			format_heap(heap, &pl, &p->ops);
		}
	} else {
		rc = chell_region_attach_mem(base, len, &p->ops, 0, &p->r, err, errlen);
	}
	if (!rc)
		rc = pool_attach(p, 1, err, errlen);
	if (!rc && p->root->cur_pages * PVM_PAGE > p->heap_size) {
		pvm_err(err, errlen, "pool root: field cur_pages exceeds the image");
		rc = -EUCLEAN;
	}
	if (rc) {
		pvm_pool_close(p);
		return rc;
	}
	*out = p;
	return 0;
}

static int ofd_lock(int fd, short type, off_t start, int wait)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = 1};
	return fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) < 0 ? -errno : 0;
}

static void pool_path(const char *path, char *buf, size_t len)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(buf, len, "%s/pvm.pool", path);
	else
		snprintf(buf, len, "%s", path);
}

/* Map the whole maximum size of the region (beyond the end of the file
 * until it grows: never touched there) and pick the persistence ops. */
static int map_pool(struct pvm_pool *p, const char *path, uint64_t total, char *err, size_t errlen)
{
	p->map_len = (size_t)total;
	void *m = chell_pmem_map_shared(p->fd, p->map_len, &p->dax);
	if (m == MAP_FAILED) {
		int e = errno;
		pvm_err(err, errlen, "cannot map %s (%llu bytes): %s", path, (unsigned long long)total, strerror(e));
		return -e;
	}
	if (p->dax) {
		p->ops = *chell_persist_default();
	} else {
		struct statfs sf;
		if (fstatfs(p->fd, &sf) == 0 && sf.f_type == TMPFS_MAGIC) {
			/* tmpfs: memory is the medium; cache flushes order stores
			 * exactly as on persistent memory. */
			p->ops = *chell_persist_default();
		} else {
			p->ops = (struct chell_persist_ops){nop_flush, msync_drain, plain_memcpy, p};
		}
	}
	p->map = m;
	return 0;
}

int pvm_pool_create(const char *path, const struct pvm_pool_opts *opts, struct pvm_pool **out, char *err,
		    size_t errlen)
{
	char file[4096];
	struct plan pl;
	if (!path || !out)
		return -EINVAL;
	*out = NULL;
	int rc = make_plan(opts, &pl, err, errlen);
	if (rc)
		return rc;
	pool_path(path, file, sizeof(file));
	struct pvm_pool *p = pool_new();
	if (!p)
		return -ENOMEM;
	p->fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (p->fd < 0) {
		rc = -errno;
		pvm_err(err, errlen, "cannot create %s: %s", file, strerror(errno));
		goto fail;
	}
	ofd_lock(p->fd, F_WRLCK, 0, 1);
	ofd_lock(p->fd, F_WRLCK, 1, 1);
	/* The region's total size for the maximum heap; the file gets only
	 * the initial part. */
	uint64_t hdr = 0, total = 0;
	rc = chell_region_size(&pl.lay, &hdr, &total);
	if (rc)
		goto fail;
	/* Allocated, not just sized: a full tmpfs then fails here, not with
	 * SIGBUS at a later store (and the first touch of a page is cheap). */
	int fa = posix_fallocate(p->fd, 0, (off_t)(hdr + pl.initial_pages * PVM_PAGE));
	if (fa == EOPNOTSUPP || fa == EINVAL)
		fa = ftruncate(p->fd, (off_t)(hdr + pl.initial_pages * PVM_PAGE)) < 0 ? errno : 0;
	if (fa) {
		errno = fa;
		rc = -errno;
		pvm_err(err, errlen, "cannot size %s: %s", file, strerror(errno));
		goto fail;
	}
	rc = map_pool(p, file, total, err, errlen);
	if (!rc)
		rc = chell_region_format_mem(p->map, p->map_len, &pl.lay, &p->ops, err, errlen);
	if (!rc)
		rc = chell_region_attach_mem(p->map, p->map_len, &p->ops, 0, &p->r, err, errlen);
	if (rc)
		goto fail;
	{
		uint64_t hs;
		uint8_t *heap = chell_region_heap(p->r, &hs);
		p->heap_file_off = (uint64_t)(heap - p->map);
		if (p->heap_file_off != hdr) {
			pvm_err(err, errlen, "internal: region heap at %llu, expected %llu",
				(unsigned long long)p->heap_file_off, (unsigned long long)hdr);
			rc = -EPROTO;
			goto fail;
		}
		p->root = (struct pvm_root *)heap;
		format_heap(heap, &pl, &p->ops);
	}
	rc = pool_attach(p, 1, err, errlen);
	if (rc)
		goto fail;
	populate(p, 0, p->heap_file_off + p->root->cur_pages * PVM_PAGE);
	ofd_lock(p->fd, F_RDLCK, 1, 1);
	ofd_lock(p->fd, F_UNLCK, 0, 1);
	*out = p;
	return 0;
fail:
	pvm_pool_close(p);
	if (rc != -EEXIST)
		unlink(file);
	return rc;
}

int pvm_pool_open(const char *path, struct pvm_pool **out, char *err, size_t errlen)
{
	char file[4096];
	if (!path || !out)
		return -EINVAL;
	*out = NULL;
	pool_path(path, file, sizeof(file));
	struct pvm_pool *p = pool_new();
	if (!p)
		return -ENOMEM;
	int rc;
	p->fd = open(file, O_RDWR | O_CLOEXEC);
	if (p->fd < 0) {
		rc = -errno;
		pvm_err(err, errlen, "cannot open %s: %s", file, strerror(errno));
		goto fail;
	}
	ofd_lock(p->fd, F_WRLCK, 0, 1);
	int alone = ofd_lock(p->fd, F_WRLCK, 1, 0) == 0;
	if (!alone)
		ofd_lock(p->fd, F_RDLCK, 1, 1);
	/* Read the superblock's total size through a one-page mapping. */
	struct stat st;
	if (fstat(p->fd, &st) < 0 || st.st_size < 4096) {
		pvm_err(err, errlen, "%s: too small for a superblock (%lld bytes)", file, (long long)st.st_size);
		rc = -EINVAL;
		goto fail;
	}
	uint64_t total, heap_off;
	{
		uint8_t sb[104];
		if (pread(p->fd, sb, sizeof(sb), 0) != (ssize_t)sizeof(sb)) {
			rc = -EIO;
			pvm_err(err, errlen, "%s: cannot read the superblock", file);
			goto fail;
		}
		memcpy(&heap_off, sb + 72, 8);
		memcpy(&total, sb + 88, 8);
		if (memcmp(sb, CHELL_REGION_MAGIC, 8) || total < heap_off || heap_off > (uint64_t)st.st_size ||
		    total > (1ull << 46)) {
			pvm_err(err, errlen, "%s: superblock field magic/total_size: not a pVM pool", file);
			rc = -EINVAL;
			goto fail;
		}
	}
	rc = map_pool(p, file, total, err, errlen);
	if (rc)
		goto fail;
	rc = chell_region_attach_mem(p->map, p->map_len, &p->ops, alone ? 0 : CHELL_REGION_NO_RECOVER, &p->r, err,
				     errlen);
	if (rc)
		goto fail;
	p->heap_file_off = heap_off;
	p->heap = chell_region_heap(p->r, &p->heap_size);
	if ((uint64_t)st.st_size < heap_off + PVM_PAGE) {
		pvm_err(err, errlen, "%s: truncated before the pool root", file);
		rc = -EUCLEAN;
		goto fail;
	}
	rc = check_root(p, err, errlen);
	if (!rc && heap_off + p->root->cur_pages * PVM_PAGE > (uint64_t)st.st_size) {
		pvm_err(err, errlen, "pool root: field cur_pages %llu exceeds the file (%lld bytes): truncated?",
			(unsigned long long)p->root->cur_pages, (long long)st.st_size);
		rc = -EUCLEAN;
	}
	if (!rc)
		rc = pool_attach(p, alone, err, errlen);
	if (rc)
		goto fail;
	if (alone)
		ofd_lock(p->fd, F_RDLCK, 1, 1);
	ofd_lock(p->fd, F_UNLCK, 0, 1);
	populate(p, 0, p->heap_file_off + p->root->cur_pages * PVM_PAGE);
	*out = p;
	return 0;
fail:
	pvm_pool_close(p);
	return rc;
}

/* Grow the current size to at least `pages` (called with the metadata lock
 * held, inside the caller's transaction). The file grows first: a crash
 * before the commit leaves a longer file and the old size, which is fine. */
int pvm_grow(struct pvm_app *a, uint64_t pages)
{
	struct pvm_pool *p = a->p;
	uint64_t cur = p->root->cur_pages;
	if (pages <= cur)
		return 0;
	if (p->fd < 0 || pages > p->max_pages)
		return -ENOSPC;
	/* By a quarter (at least 1 MiB): every page added is allocated and
	 * zeroed now, so doubling would make up to half the pool's memory
	 * pages that nothing uses yet; a quarter keeps growth events few
	 * (19 from 16 MiB to 1 GiB) and the unused part under a fifth. */
	uint64_t step = cur / 4 > 256 ? cur / 4 : 256;
	uint64_t want = cur + step > pages ? cur + step : pages;
	if (want > p->max_pages)
		want = p->max_pages;
	struct stat st;
	if (fstat(p->fd, &st) < 0)
		return -errno;
	uint64_t len = p->heap_file_off + want * PVM_PAGE;
	if ((uint64_t)st.st_size < len) {
		/* Allocate the new space (see pvm_pool_create); file systems
		 * without fallocate just get a longer file. */
		int fa = posix_fallocate(p->fd, st.st_size, (off_t)len - st.st_size);
		if (fa == EOPNOTSUPP || fa == EINVAL)
			fa = ftruncate(p->fd, (off_t)len) < 0 ? errno : 0;
		if (fa)
			return -fa;
		populate(p, (uint64_t)st.st_size, len - (uint64_t)st.st_size);
	}
	uint64_t *c = chell_ptx_add(&a->t, offsetof(struct pvm_root, cur_pages), 8);
	if (!c)
		return a->t.err;
	*c = want;
	return 0;
}

int pvm_pool_stat(struct pvm_pool *p, struct pvm_pool_stat *st)
{
	if (!p || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	int rc = pvm_lock(p, pvm_mutex(p, PVM_M_META), 0);
	if (rc)
		return rc;
	uint64_t cur = p->root->cur_pages, used = 0, run = 0;
	for (uint64_t i = 0; i < cur; i++) {
		if (chell_bm_test(p->heap, p->bm_off, (uint32_t)i)) {
			used++;
			run = 0;
			continue;
		}
		if (run++ == 0)
			st->free_extents++;
		if (run * PVM_PAGE > st->largest_free)
			st->largest_free = run * PVM_PAGE;
	}
	for (uint32_t i = 0; i < p->max_apps; i++)
		if (pvm_aent(p, i)->flags & PVM_A_USED)
			st->apps++;
	pthread_mutex_unlock(pvm_mutex(p, PVM_M_META));
	st->capacity = p->max_pages * PVM_PAGE;
	st->size = cur * PVM_PAGE;
	st->used = used * PVM_PAGE;
	st->free = st->size - st->used;
	st->max_apps = p->max_apps;
	st->journals = p->journals;
	st->dax = (uint32_t)p->dax;
	return 0;
}
