/* SPDX-License-Identifier: MIT */
/*
 * The tiered heap (libchell-tier.so, docs/TIERHEAP.md): jemalloc with extent
 * hooks that take each extent from DRAM or from the slow tier, as the policy
 * says (policy.c).
 *
 * jemalloc is Debian's, unmodified and unprefixed (libjemalloc_pic.a,
 * linked into this library: its exported names are free, mallocx,
 * mallctl..., and malloc.c's wrappers where glibc's behaviour is kept).
 * Preloaded, the library comes before glibc, so the program's calls (and
 * glibc's own) reach jemalloc; this file, at load time, puts our hooks on
 * every automatic arena, so every allocation jemalloc serves, through
 * whichever entry point, is placed by the policy.
 *
 * Invariants:
 *  - the slow tier is one reserved address range [slow_base, slow_base +
 *    slow_cap): a file mapped shared (pages the launcher allocated, charged
 *    to its memory cgroup, not the program's) or anonymous memory bound to
 *    a NUMA node. Whether an address is slow is one range compare.
 *  - jemalloc's metadata (its base allocator) asks the hooks for
 *    hugepage-aligned blocks; those always come from DRAM. Extents for
 *    data come from the retained-growth path, page-aligned.
 *  - no lock of ours: counters and the slow range's bump pointer are
 *    atomics, so the hooks (called under jemalloc's arena locks) cannot
 *    deadlock with jemalloc's own fork handlers.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jemalloc/jemalloc.h>
#include <numa.h>

#include "chell/tier_heap.h"
#include "common/config.h"
#include "heap.h"
#include "policy.h"
#include "stat.h"

#define EXPORT __attribute__((visibility("default")))
#define PAGE ((size_t)4096)
#define HUGEPAGE ((size_t)2 << 20)

enum slow_kind { SLOW_NONE = 0, SLOW_FILE = 1, SLOW_NODE = 2 };

static struct {
	bool ready;                 /* hooks installed */
	struct th_policy_cfg cfg;
	enum slow_kind kind;
	int node;
	int fd;                     /* SLOW_FILE: the file (kept for fork) */
	bool prefilled;             /* SLOW_FILE: the launcher allocated every page */
	char *slow_base;
	struct th_bump bump;
	unsigned np_arena;          /* npmalloc's arena: slow tier only */
	bool np_ok;
	struct th_stat *st;         /* the published counters (or `local`) */
	struct th_stat local;
	char stat_path[64];
	int fork_pipe[2];
} H = {.fd = -1, .st = &H.local, .fork_pipe = {-1, -1}};

void th_log(const char *fmt, ...)
{
	char buf[512];
	int n = snprintf(buf, sizeof buf, "chell-tier: ");
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof buf - 1)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	ssize_t w = write(2, buf, (size_t)n);
	(void)w;
}

bool th_is_slow(const void *p)
{
	return (const char *)p >= H.slow_base && (const char *)p < H.slow_base + H.bump.cap;
}

EXPORT int chell_tierheap_where(const void *ptr)
{
	return H.slow_base && th_is_slow(ptr) ? 1 : 0;
}

/* ---- counters ---- */

static void peak_raise(_Atomic uint64_t *peak, uint64_t v)
{
	uint64_t cur = atomic_load_explicit(peak, memory_order_relaxed);
	while (v > cur &&
	       !atomic_compare_exchange_weak_explicit(peak, &cur, v, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

static void count(enum th_tier t, int64_t delta)
{
	_Atomic uint64_t *c = t == TH_DRAM ? &H.st->dram_bytes : &H.st->slow_bytes;
	uint64_t v = atomic_fetch_add_explicit(c, (uint64_t)delta, memory_order_relaxed) +
		     (uint64_t)delta;
	if (delta > 0)
		peak_raise(t == TH_DRAM ? &H.st->dram_peak : &H.st->slow_peak, v);
}

/*
 * jemalloc's metadata blocks (its base allocator: one or more 2 MiB blocks
 * per arena, most of each never touched) are counted whole in dram_bytes,
 * which `chell tier stat` shows. Against the revert budget they count by
 * their resident pages (mincore): counted whole, a program with 8 arenas
 * would lose some 16 MiB of its budget to untouched address space. The
 * blocks are recorded here (never freed: jemalloc keeps its base for the
 * arena's life); past META_MAX, a block counts whole.
 */
#define META_MAX 256
static struct {
	_Atomic(char *) addr[META_MAX];
	size_t size[META_MAX];
	_Atomic unsigned n;
	_Atomic uint64_t untracked; /* bytes of blocks past META_MAX */
} M;

static void meta_record(char *p, size_t size)
{
	unsigned i = atomic_fetch_add_explicit(&M.n, 1, memory_order_relaxed);
	if (i >= META_MAX) {
		atomic_fetch_add_explicit(&M.untracked, size, memory_order_relaxed);
		return;
	}
	M.size[i] = size;
	atomic_store_explicit(&M.addr[i], p, memory_order_release);
}

/* Resident bytes of the metadata blocks; a block whose residency cannot be
 * read counts whole. */
static uint64_t meta_resident(void)
{
	unsigned n = atomic_load_explicit(&M.n, memory_order_relaxed);
	uint64_t res = atomic_load_explicit(&M.untracked, memory_order_relaxed);
	unsigned char vec[512];
	if (n > META_MAX)
		n = META_MAX;
	for (unsigned i = 0; i < n; i++) {
		char *a = atomic_load_explicit(&M.addr[i], memory_order_acquire);
		if (!a)
			continue; /* being recorded: its bytes are not yet in meta_bytes either */
		for (size_t off = 0; off < M.size[i]; off += sizeof vec * PAGE) {
			size_t len = M.size[i] - off < sizeof vec * PAGE ? M.size[i] - off
									 : sizeof vec * PAGE;
			if (mincore(a + off, len, vec) != 0) {
				res += len;
				continue;
			}
			for (size_t pg = 0; pg < (len + PAGE - 1) / PAGE; pg++)
				res += (vec[pg] & 1) ? PAGE : 0;
		}
	}
	return res;
}

/*
 * The DRAM the revert budget is checked against: the counted bytes, with
 * the metadata blocks at their resident size. Reading residency costs
 * system calls, so it is only done when the whole count would not fit.
 * *adj caches the metadata's untouched bytes across the calls of one
 * decision (UINT64_MAX: not read yet).
 */
static uint64_t dram_for_budget(uint64_t dram, uint64_t want, uint64_t *adj)
{
	if (dram + want <= H.cfg.budget)
		return dram;
	if (*adj == UINT64_MAX) {
		uint64_t meta = atomic_load_explicit(&H.st->meta_bytes, memory_order_relaxed);
		uint64_t res = meta_resident();
		*adj = res < meta ? meta - res : 0;
	}
	/* Another hook may have counted a block in meta_bytes after we read
	 * dram_bytes: never below zero. */
	return dram > *adj ? dram - *adj : 0;
}

static bool revert_budgeted(void)
{
	return H.cfg.policy == TH_REVERT && H.cfg.budget;
}

/*
 * Take `size` bytes of the revert budget, or fail: the check and the count
 * are one compare-and-swap, so hooks deciding at once on several arenas
 * cannot pass the budget together (each sees the other's bytes).
 */
static bool dram_reserve(uint64_t size)
{
	uint64_t adj = UINT64_MAX;
	uint64_t cur = atomic_load_explicit(&H.st->dram_bytes, memory_order_relaxed);
	for (;;) {
		if (dram_for_budget(cur, size, &adj) + size > H.cfg.budget)
			return false;
		if (atomic_compare_exchange_weak_explicit(&H.st->dram_bytes, &cur, cur + size,
							  memory_order_relaxed, memory_order_relaxed)) {
			peak_raise(&H.st->dram_peak, cur + size);
			return true;
		}
	}
}

/* ---- where an extent's memory comes from ---- */

static void *dram_map(size_t size, size_t align)
{
	if (align < PAGE)
		align = PAGE;
	size_t len = size + align - PAGE;
	if (len < size)
		return NULL;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + size < p + len)
		munmap(a + size, (size_t)(p + len - (a + size)));
	return a;
}

static void *slow_take(size_t size, size_t align)
{
	if (H.kind == SLOW_NONE)
		return NULL;
	uint64_t off = th_bump_take(&H.bump, size, align < PAGE ? PAGE : align);
	if (off == UINT64_MAX)
		return NULL;
	/* A file of our own is sparse: reserve its blocks now, so a full
	 * tmpfs is a fallback here and never a SIGBUS at the first store.
	 * (The range stays taken: the bump pointer never goes back.) */
	if (H.kind == SLOW_FILE && !H.prefilled && fallocate(H.fd, 0, (off_t)off, (off_t)size) != 0)
		return NULL;
	return H.slow_base + off;
}

static void *hook_alloc(extent_hooks_t *h, void *new_addr, size_t size, size_t align, bool *zero,
			bool *commit, unsigned arena_ind)
{
	/* In-place growth at a given address: not offered (jemalloc copies). */
	if (new_addr)
		return NULL;
	void *p = NULL;
	if (align >= HUGEPAGE) {
		/* jemalloc's base allocator: metadata stays in DRAM. */
		p = dram_map(size, align);
		if (p) {
			meta_record(p, size);
			count(TH_DRAM, (int64_t)size);
			atomic_fetch_add_explicit(&H.st->meta_bytes, size, memory_order_relaxed);
		}
	} else {
		enum th_tier order[2];
		int n;
		if (H.np_ok && arena_ind == H.np_arena) {
			order[0] = TH_SLOW;
			n = 1;
		} else {
			uint64_t dram = atomic_load_explicit(&H.st->dram_bytes, memory_order_relaxed);
			if (revert_budgeted()) {
				uint64_t adj = UINT64_MAX;
				dram = dram_for_budget(dram, size, &adj);
			}
			n = th_pick(&H.cfg, dram,
				    atomic_load_explicit(&H.st->slow_bytes, memory_order_relaxed), size,
				    order);
		}
		/* DRAM within the budget is reserved before it is mapped; if another
		 * arena took the room meanwhile, the slow tier comes first. */
		bool reserved = false;
		if (n == 2 && order[0] == TH_DRAM && revert_budgeted()) {
			reserved = dram_reserve(size);
			if (!reserved) {
				order[0] = TH_SLOW;
				order[1] = TH_DRAM;
			}
		}
		for (int i = 0; i < n && !p; i++) {
			p = order[i] == TH_DRAM ? dram_map(size, align) : slow_take(size, align);
			bool counted = reserved && i == 0;
			if (p) {
				if (!counted)
					count(order[i], (int64_t)size);
				if (i > 0)
					atomic_fetch_add_explicit(&H.st->fallbacks, 1, memory_order_relaxed);
			} else if (counted) {
				count(TH_DRAM, -(int64_t)size);
			}
		}
		if (!p)
			atomic_fetch_add_explicit(&H.st->failures, 1, memory_order_relaxed);
	}
	if (p) {
		/* Fresh anonymous memory and never-used slow range are zero. */
		*zero = true;
		*commit = true;
	}
	return p;
}

/*
 * Extents are never unmapped (true = refused): jemalloc then retains them,
 * as it does with its own hooks on Linux, after decommitting DRAM ones
 * (below), which gives their pages back. Unmapping DRAM extents from here
 * crashed jemalloc 5.3 under several arenas (tests/system/
 * test_tierheap.py::test_threads_and_fork_same_output_every_policy).
 */
static bool hook_dalloc(extent_hooks_t *h, void *addr, size_t size, bool committed,
			unsigned arena_ind)
{
	return true;
}

/* At arena destruction, which we never ask for: give DRAM back. */
static void hook_destroy(extent_hooks_t *h, void *addr, size_t size, bool committed,
			 unsigned arena_ind)
{
	if (th_is_slow(addr))
		return;
	if (committed)
		count(TH_DRAM, -(int64_t)size);
	munmap(addr, size);
}

/*
 * Decommit: a DRAM extent jemalloc retains loses its pages and stops
 * counting against the budget; commit takes it back into use and, under
 * revert, is refused past the budget, so jemalloc grows a new extent,
 * which the policy places on the slow tier. Slow extents are never
 * decommitted (a page freed and faulted again would be charged to the
 * program's cgroup, not the launcher's).
 */
static bool hook_decommit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
			  unsigned arena_ind)
{
	if (th_is_slow(addr))
		return true;
	if (madvise((char *)addr + off, len, MADV_DONTNEED) != 0)
		return true;
	count(TH_DRAM, -(int64_t)len);
	return false;
}

static bool hook_commit(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
			unsigned arena_ind)
{
	if (th_is_slow(addr))
		return false;
	if (revert_budgeted())
		return !dram_reserve(len);
	count(TH_DRAM, (int64_t)len);
	return false;
}

/*
 * Purging: DRAM pages go back to the kernel. Slow pages are not purged: on
 * the file tier a hole punched and faulted again would be charged to the
 * program's cgroup, not the launcher's (and a forced purge must read as
 * zeros, which a shared file page that stays does not).
 */
static bool hook_purge_lazy(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
			    unsigned arena_ind)
{
	if (th_is_slow(addr))
		return true;
	return madvise((char *)addr + off, len, MADV_FREE) != 0;
}

static bool hook_purge_forced(extent_hooks_t *h, void *addr, size_t size, size_t off, size_t len,
			      unsigned arena_ind)
{
	if (th_is_slow(addr))
		return true;
	return madvise((char *)addr + off, len, MADV_DONTNEED) != 0;
}

static bool hook_split(extent_hooks_t *h, void *addr, size_t size, size_t a, size_t b,
		       bool committed, unsigned arena_ind)
{
	return false;
}

/* An extent never spans both tiers. */
static bool hook_merge(extent_hooks_t *h, void *a, size_t sa, void *b, size_t sb, bool committed,
		       unsigned arena_ind)
{
	return th_is_slow(a) != th_is_slow(b);
}

static extent_hooks_t tier_hooks = {
	.alloc = hook_alloc,
	.dalloc = hook_dalloc,
	.destroy = hook_destroy,
	.commit = hook_commit,
	.decommit = hook_decommit,
	.purge_lazy = hook_purge_lazy,
	.purge_forced = hook_purge_forced,
	.split = hook_split,
	.merge = hook_merge,
};

/* ---- npmalloc: the slow tier on request ---- */

EXPORT void *npmalloc(size_t size)
{
	if (!H.np_ok) {
		errno = ENOMEM;
		return NULL;
	}
	void *p = mallocx(size < 16 ? 16 : size, MALLOCX_ARENA(H.np_arena) | MALLOCX_TCACHE_NONE);
	if (!p)
		errno = ENOMEM;
	return p;
}

EXPORT void npfree(void *ptr)
{
	if (ptr)
		dallocx(ptr, MALLOCX_TCACHE_NONE);
}

EXPORT void *nprealloc(void *ptr, size_t size)
{
	if (!ptr)
		return npmalloc(size);
	if (size == 0) {
		npfree(ptr);
		return NULL;
	}
	void *p = rallocx(ptr, size < 16 ? 16 : size, MALLOCX_ARENA(H.np_arena) | MALLOCX_TCACHE_NONE);
	if (!p)
		errno = ENOMEM;
	return p;
}

/* ---- set-up ---- */

static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* The line of /proc/self/cgroup for hierarchy `prefix` ("0::" for v2,
 * ":memory:" inside a v1 line): its path into buf. */
static int cgroup_path(const char *cg, const char *key, char *out, size_t len)
{
	for (const char *l = cg; *l;) {
		const char *nl = strchr(l, '\n');
		size_t ll = nl ? (size_t)(nl - l) : strlen(l);
		const char *k = memmem(l, ll, key, strlen(key));
		if (k && (key[0] != '0' || k == l)) {
			const char *p = k + strlen(key);
			size_t pl = ll - (size_t)(p - l);
			if (pl >= len)
				return -1;
			memcpy(out, p, pl);
			out[pl] = '\0';
			return 0;
		}
		l += ll + (nl ? 1 : 0);
	}
	return -1;
}

/*
 * The memory limit of this process's cgroup (0 = none), or -1: cgroup v1's
 * memory controller (memory.limit_in_bytes) when it is mounted, as on this
 * project's CI machines, else v2's memory.max. Limits of ancestors are not
 * looked at.
 */
int th_cgroup_memory_max(uint64_t *out)
{
	char cg[4096], path[4200], val[64], rel[4096];
	if (read_small("/proc/self/cgroup", cg, sizeof cg))
		return -1;
	if (cgroup_path(cg, ":memory:", rel, sizeof rel) == 0) {
		snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes",
			 strcmp(rel, "/") ? rel : "");
	} else if (cgroup_path(cg, "0::", rel, sizeof rel) == 0) {
		snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(rel, "/") ? rel : "");
	} else {
		return -1;
	}
	/* The root cgroup has no limit file: no limit. */
	if (read_small(path, val, sizeof val)) {
		*out = 0;
		return 0;
	}
	return th_parse_memory_max(val, out) ? -1 : 0;
}

/* tierheap.dram: a size, or "auto" = 3/4 of the cgroup's memory.max. */
static int budget_from(const char *v, uint64_t *out, char *err, size_t errlen)
{
	if (strcmp(v, "auto") == 0) {
		uint64_t max;
		if (th_cgroup_memory_max(&max)) {
			snprintf(err, errlen,
				 "setting tierheap.dram is 'auto' but this process's memory.max "
				 "cannot be read");
			return -1;
		}
		*out = max / 4 * 3;
		return 0;
	}
	if (chell_parse_size(v, out) != 0) {
		snprintf(err, errlen,
			 "bad value '%s' for setting tierheap.dram (CHELL_TIERHEAP_DRAM): expected "
			 "a size (e.g. 512M) or 'auto'",
			 v);
		return -1;
	}
	return 0;
}

static int slow_setup_node(int node, uint64_t cap, char *err, size_t errlen)
{
	if (numa_available() < 0 || node > numa_max_node()) {
		snprintf(err, errlen, "setting tierheap.node: NUMA node %d does not exist", node);
		return -1;
	}
	long long freeb = 0;
	long long size = numa_node_size64(node, &freeb);
	if (size <= 0) {
		snprintf(err, errlen, "setting tierheap.node: NUMA node %d has no memory", node);
		return -1;
	}
	if (cap == 0 || cap > (uint64_t)size)
		cap = (uint64_t)size;
	cap &= ~(uint64_t)(PAGE - 1);
	void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "setting tierheap.node: cannot reserve %llu bytes: %s",
			 (unsigned long long)cap, strerror(errno));
		return -1;
	}
	numa_tonode_memory(p, cap, node);
	H.slow_base = p;
	H.bump.cap = cap;
	H.kind = SLOW_NODE;
	H.node = node;
	return 0;
}

static int slow_map_fd(int fd, uint64_t cap, char *err, size_t errlen)
{
	void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the slow-tier file: %s", strerror(errno));
		return -1;
	}
	H.slow_base = p;
	H.bump.cap = cap;
	H.kind = SLOW_FILE;
	H.fd = fd;
	return 0;
}

/* The launcher's file (CHELL_TIERHEAP_SLOW_FD: every page allocated by
 * `chell tier run`, outside our cgroup), else a file of our own in the
 * tierheap.slow directory, sparse, blocks reserved as extents are taken. */
static int slow_setup_file(const char *dir, uint64_t size, char *err, size_t errlen)
{
	const char *fdv = getenv("CHELL_TIERHEAP_SLOW_FD");
	if (fdv && *fdv) {
		char *end;
		long fd = strtol(fdv, &end, 10);
		struct stat st;
		/* Only ours: exec'd descendants get a file of their own. */
		unsetenv("CHELL_TIERHEAP_SLOW_FD");
		if (*end || fd < 0 || fd > INT_MAX || fstat((int)fd, &st) || !S_ISREG(st.st_mode) ||
		    st.st_size < (off_t)PAGE) {
			snprintf(err, errlen,
				 "CHELL_TIERHEAP_SLOW_FD=%s is not an open slow-tier file", fdv);
			return -1;
		}
		int cfd = fcntl((int)fd, F_DUPFD_CLOEXEC, 3);
		close((int)fd);
		if (cfd < 0) {
			snprintf(err, errlen, "CHELL_TIERHEAP_SLOW_FD: %s", strerror(errno));
			return -1;
		}
		H.prefilled = true;
		return slow_map_fd(cfd, (uint64_t)st.st_size & ~(uint64_t)(PAGE - 1), err, errlen);
	}
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "setting tierheap.slow: cannot create a file in %s: %s", dir,
			 strerror(errno));
		return -1;
	}
	size &= ~(uint64_t)(PAGE - 1);
	if (size == 0 || ftruncate(fd, (off_t)size) != 0) {
		snprintf(err, errlen, "setting tierheap.slow_size: cannot size the file in %s: %s",
			 dir, size ? strerror(errno) : "size is 0");
		close(fd);
		return -1;
	}
	H.prefilled = false;
	if (slow_map_fd(fd, size, err, errlen)) {
		close(fd);
		return -1;
	}
	return 0;
}

static void stat_publish(void)
{
	snprintf(H.stat_path, sizeof H.stat_path, TH_STAT_DIR "/" TH_STAT_PREFIX "%d", (int)getpid());
	int fd = open(H.stat_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, sizeof(struct th_stat)) != 0) {
		close(fd);
		unlink(H.stat_path);
		goto fail;
	}
	struct th_stat *st =
		mmap(NULL, sizeof(struct th_stat), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (st == MAP_FAILED) {
		unlink(H.stat_path);
		goto fail;
	}
	/* Copy what was counted so far (the parent's, after a fork). */
	memcpy(st, H.st, sizeof *st);
	st->pid = (int32_t)getpid();
	atomic_thread_fence(memory_order_release);
	st->magic = TH_STAT_MAGIC;
	H.st = st;
	return;
fail:
	H.stat_path[0] = '\0';
}

static void stat_fill_static(void)
{
	struct th_stat *st = H.st;
	st->version = TH_STAT_VERSION;
	st->pid = (int32_t)getpid();
	st->policy = (uint32_t)H.cfg.policy;
	st->slow_kind = (uint32_t)H.kind;
	st->slow_node = H.kind == SLOW_NODE ? H.node : -1;
	st->w_dram = H.cfg.w_dram;
	st->w_slow = H.cfg.w_slow;
	st->budget = H.cfg.budget;
	st->slow_capacity = H.bump.cap;
}

/* ---- fork: the child's slow tier must be its own copy ---- */

/*
 * Anonymous DRAM and a NUMA node's pages are copied on write by the kernel;
 * a shared file mapping is not. In the child, the used part of the slow
 * range is copied into a fresh file of the child's own, mapped over the
 * same addresses, before the child goes on; the parent's forking thread
 * waits for it, so that thread cannot change the pages meanwhile.
 * (Other threads of the parent can: docs/TIERHEAP.md, limits.)
 */
static void fork_prepare(void)
{
	if (H.kind == SLOW_FILE && pipe2(H.fork_pipe, O_CLOEXEC) != 0)
		H.fork_pipe[0] = H.fork_pipe[1] = -1;
}

static void fork_parent(void)
{
	if (H.fork_pipe[0] < 0)
		return;
	close(H.fork_pipe[1]);
	char c;
	while (read(H.fork_pipe[0], &c, 1) < 0 && errno == EINTR)
		;
	close(H.fork_pipe[0]);
	H.fork_pipe[0] = H.fork_pipe[1] = -1;
}

static void fork_child(void)
{
	if (H.kind == SLOW_FILE) {
		uint64_t used = atomic_load_explicit(&H.bump.next, memory_order_relaxed);
		int fd = memfd_create("chell-tierheap-slow", MFD_CLOEXEC);
		bool ok = fd >= 0 && ftruncate(fd, (off_t)H.bump.cap) == 0;
		for (uint64_t done = 0; ok && done < used;) {
			ssize_t w = pwrite(fd, H.slow_base + done, used - done, (off_t)done);
			if (w <= 0) {
				if (w < 0 && errno == EINTR)
					continue;
				ok = false;
				break;
			}
			done += (uint64_t)w;
		}
		if (ok && mmap(H.slow_base, H.bump.cap, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd, 0) == MAP_FAILED)
			ok = false;
		if (!ok) {
			/* Going on would share the parent's heap pages. */
			th_log("fork: cannot copy the slow tier (%s); the child exits",
			       strerror(errno));
			_exit(127);
		}
		close(H.fd);
		H.fd = fd;
		H.prefilled = false;
		if (H.fork_pipe[1] >= 0) {
			close(H.fork_pipe[0]);
			ssize_t w = write(H.fork_pipe[1], "", 1);
			(void)w;
			close(H.fork_pipe[1]);
			H.fork_pipe[0] = H.fork_pipe[1] = -1;
		}
	}
	if (H.stat_path[0])
		stat_publish();
}

static void stat_remove(void)
{
	if (H.stat_path[0] && H.st->pid == (int32_t)getpid()) {
		unlink(H.stat_path);
		H.stat_path[0] = '\0';
	}
}

/*
 * _exit and _Exit skip atexit handlers, and that is how forked children
 * usually end (tests/progs/tierheap_mt.c's 25 children, Python's
 * multiprocessing, shells' subshells): each left its counter file behind.
 * The preloaded library's definitions come first in the symbol search
 * order, so the program's calls reach them; they remove this process's
 * file and end the process as glibc's would (exit_group). A vfork child
 * (posix_spawn) sharing the parent's memory has another pid than the file
 * names, so stat_remove leaves the parent's file alone. Killed processes
 * still leave theirs: `chell tier stat` reaps files whose process is gone.
 */
__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
	stat_remove();
	for (;;)
		syscall(SYS_exit_group, status);
}
__attribute__((visibility("default"), noreturn)) void _Exit(int status)
{
	_exit(status);
}

static int setup(char *err, size_t errlen)
{
	struct chell_config cfg;
	if (chell_config_load(&cfg, NULL, err, errlen) < 0)
		return -1;
	int rc = -1;
	const char *pol = chell_config_str(&cfg, "tierheap.policy");
	if (th_policy_parse(pol, &H.cfg.policy)) {
		snprintf(err, errlen, "bad value '%s' for setting tierheap.policy", pol);
		goto out;
	}
	const char *w = chell_config_str(&cfg, "tierheap.weights");
	if (th_weights_parse(w, &H.cfg.w_dram, &H.cfg.w_slow)) {
		snprintf(err, errlen,
			 "bad value '%s' for setting tierheap.weights (CHELL_TIERHEAP_WEIGHTS): "
			 "expected D:S, two integers 1..1000",
			 w);
		goto out;
	}
	if (budget_from(chell_config_str(&cfg, "tierheap.dram"), &H.cfg.budget, err, errlen))
		goto out;
	const char *node = chell_config_str(&cfg, "tierheap.node");
	uint64_t slow_size = chell_config_u64(&cfg, "tierheap.slow_size");
	if (*node) {
		char *end;
		long n = strtol(node, &end, 10);
		if (*end || n < 0 || n > 4095) {
			snprintf(err, errlen,
				 "bad value '%s' for setting tierheap.node (CHELL_TIERHEAP_NODE): "
				 "expected a NUMA node number",
				 node);
			goto out;
		}
		if (slow_setup_node((int)n, slow_size, err, errlen))
			goto out;
	} else if (slow_setup_file(chell_config_str(&cfg, "tierheap.slow"), slow_size, err,
				   errlen)) {
		goto out;
	}
	rc = 0;
out:
	chell_config_free(&cfg);
	return rc;
}

static void install_hooks(void)
{
	extent_hooks_t *hp = &tier_hooks;
	size_t grow = TH_GROW_LIMIT;
	unsigned narenas;
	size_t sz = sizeof narenas;
	char name[64];
	if (mallctl("opt.narenas", &narenas, &sz, NULL, 0) != 0)
		narenas = 1;
	/* Every automatic arena, initialised now with our hooks if it was not
	 * yet (so none is ever created later with jemalloc's defaults). */
	for (unsigned i = 0; i < narenas; i++) {
		snprintf(name, sizeof name, "arena.%u.extent_hooks", i);
		if (mallctl(name, NULL, NULL, &hp, sizeof hp) != 0)
			th_log("cannot set the extent hooks of arena %u", i);
		snprintf(name, sizeof name, "arena.%u.retain_grow_limit", i);
		mallctl(name, NULL, NULL, &grow, sizeof grow);
	}
	/* npmalloc's arena: created with the default hooks (its metadata
	 * block comes from them), then ours. */
	unsigned ind;
	sz = sizeof ind;
	if (H.kind != SLOW_NONE && mallctl("arenas.create", &ind, &sz, NULL, 0) == 0) {
		H.np_arena = ind;
		H.np_ok = true;
		snprintf(name, sizeof name, "arena.%u.extent_hooks", ind);
		if (mallctl(name, NULL, NULL, &hp, sizeof hp) != 0)
			H.np_ok = false;
		snprintf(name, sizeof name, "arena.%u.retain_grow_limit", ind);
		mallctl(name, NULL, NULL, &grow, sizeof grow);
	}
}

/*
 * jemalloc's start-up options, read from this symbol (ours wins over the
 * library's weak default). MALLOC_CONF in the environment still applies on
 * top.
 *  - oversize_threshold:0: no separate arena for huge allocations, which
 *    jemalloc would create with its default hooks, outside the policy.
 *  - tcache_max:65536 (jemalloc's default is 32 KiB): a large allocation
 *    that misses the thread cache splits an extent and its free merges it
 *    back, and with hooks that are not jemalloc's defaults every split and
 *    merge call is wrapped in jemalloc's re-entrancy guard
 *    (tsd_slow_update, te_recompute_fast_threshold: 11% of the samples of
 *    64 KiB malloc/free pairs, 0.90-0.93 of plain jemalloc's throughput).
 *    Caching the large classes up to 64 KiB per thread as well takes most
 *    of those calls off the path. The price: a thread may keep up to
 *    jemalloc's large-bin depth (20) of each class from 40 to 64 KiB
 *    cached, released by jemalloc's thread-cache GC when unused.
 */
__attribute__((visibility("default"))) const char *malloc_conf = "oversize_threshold:0,tcache_max:65536";

__attribute__((constructor)) static void tierheap_init(void)
{
	char err[512];
	H.cfg.w_dram = 3;
	H.cfg.w_slow = 1;
	if (setup(err, sizeof err) != 0) {
		/* Never stop the program: plain jemalloc in DRAM. */
		th_log("%s; running with the whole heap in DRAM", err);
		H.kind = SLOW_NONE;
		H.cfg.policy = TH_REVERT;
		H.cfg.budget = 0;
	}
	stat_fill_static();
	install_hooks();
	stat_publish();
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atexit(stat_remove);
	H.ready = true;
}
