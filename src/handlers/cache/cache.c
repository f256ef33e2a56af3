/* SPDX-License-Identifier: MIT */
/*
 * The cache handler's operations.
 *
 * The kernel opens the backing file: that descriptor is the proof of access
 * (the manager checks a reopen of it, map.c) and the kernel path whenever
 * the cache cannot serve. Offsets live in the shared OFD as in direct mode
 * (mapped/base.h explains why); the kernel's offset is brought up to date before
 * the descriptor may be used outside Chell. Sizes: the backing file's size
 * is always the true one, because a write that extends the file first grows
 * the backing file (fallocate, on the client's own descriptor) and only
 * then stores into the cache; so fstat and stat are simply the kernel's,
 * and reads clamp to a size shared by the process tree (mapped/inode.c)
 * that is refreshed from the kernel at the cached end of file.
 *
 * Whenever the cache cannot serve a descriptor - the manager does not run,
 * refuses the file, or stops caching it (BYPASS) - the descriptor moves to
 * the kernel path for good, with the same arguments for what is left of the
 * call.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#include "cache.h"
#include "registry.h"
#include "../mapped/short.h"

static bool route_check;          /* routing let every file through: check the backings */
static char **shared_dirs;        /* cache.shared: close-to-open directories (normalised) */
static int nshared_dirs;
static __thread int tls_open_trunc; /* open() -> opened(): the open had O_TRUNC */
static const struct mapped_ops cache_mapped;

static int cache_proc_init(void)
{
	const char *pool = chell_setting("cache.pool");
	int n = snprintf(cache_sock_path, sizeof(cache_sock_path), "%s/%s", pool, CHELLD_SOCK_NAME);
	if (!pool[0] || n < 0 || (size_t)n >= sizeof(cache_sock_path)) {
		chell_log("cache: the socket path '%s/%s' is too long for a Unix socket (cache.pool)",
			  pool, CHELLD_SOCK_NAME);
		return -1;
	}
	route_check = !chell_setting("paths")[0] && !chell_setting("cache.backing")[0];
	if (chell_setting("cache.shared")[0] && !shared_dirs) {
		int ns = chell_config_paths(&chell_cfg, "cache.shared", &shared_dirs);
		if (ns < 0) {
			chell_log("cache: out of memory reading setting cache.shared");
			return -1;
		}
		for (int i = 0; i < ns; i++)
			if (chell_path_normalise(shared_dirs[i]) < 0) {
				chell_log("cache: cache.shared: '%s' is not an absolute path",
					  shared_dirs[i]);
				return -1;
			}
		nshared_dirs = ns;
	}
	cache_locks_init(pool);
	struct statfs sf;
	cache_pool_in_memory = statfs(pool, &sf) == 0 &&
			       (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC);
	return cache_copy_init();
}

static bool under_backing(const char *abs);
static bool under_shared(const char *abs);

/*
 * exec of a file the cache holds dirty blocks of: the kernel reads the
 * program from the backing file, so they are written back first (one
 * FLUSH; nothing to do for a clean file). Only for a regular, executable
 * file that Chell routes to the cache (the router's decision, as at open)
 * under a backing directory: any other exec costs the path check alone.
 */
static void flush_before_exec(const char *path)
{
	char abs[4096];
	if (!path || path[0] == '(' || /* "(fexecve)": no path */
	    router_abspath(AT_FDCWD, path, abs, sizeof abs) < 0 || !router_route_abs(abs))
		return;
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
	if (fd < 0)
		return;
	fd = chell_internal_fd(fd, 1);
	struct stat st;
	if (sys_fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) &&
	    under_backing(abs)) {
		struct cache_file *cf = cache_file_get(st.st_dev, st.st_ino, (uint64_t)st.st_size);
		if (cf) {
			cache_flush_file(cf, fd, 0);
			cache_file_put(cf);
		}
	}
	chell_internal_close(fd);
}

#define KEY(k, f) {k, offsetof(struct mapped_stats, f)}
static const struct mapped_stat_key cache_stat_keys[] = {
	KEY("reads", reads), KEY("writes", writes), KEY("read_bytes", read_bytes),
	KEY("write_bytes", write_bytes), KEY("read_hits", read_hits), KEY("write_hits", write_hits),
	KEY("read_misses", read_misses), KEY("write_misses", write_misses),
	KEY("kernel_fallbacks", kernel_fallbacks), KEY("mmaps", mmaps), KEY("remaps", remaps),
	KEY("syncs", syncs), KEY("fsyncs", fsyncs), KEY("extends", extends), KEY("bypassed", bypassed),
	KEY("overwrites", overwrites), KEY("zero_copy", zero_copy),
};
static const struct mapped_stats_spec cache_stats_spec = {
	MAPPED_STATS_CACHE, "cache", cache_stat_keys, sizeof(cache_stat_keys) / sizeof(cache_stat_keys[0])};

static void cache_proc_event(enum chell_op ev, long arg)
{
	if (ev == CHELL_OP_EXEC) {
		flush_before_exec((const char *)arg);
	} else if (ev == CHELL_OP_FORK_PREPARE) {
		cache_locks_fork_prepare();
	} else if (ev == CHELL_OP_FORK) {
		cache_conn_after_fork();
		cache_map_after_fork();
	} else if (ev == CHELL_OP_EXIT) {
		mapped_stats_dump(&cache_stats_spec);
		cache_conn_bye();
	}
}

/* ------------------------------------------------------------- lifecycle */

static int cache_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	int fd = chell_down_open(c, dirfd, path, flags, mode);
	tls_open_trunc = fd >= 0 && (flags & O_TRUNC);
	return fd;
}

/* Without `paths` or cache.backing the router lets every file through:
 * only files under the manager's backing directories are cached. */
static bool under_backing(const char *abs)
{
	if (!route_check)
		return true;
	bool yes = false;
	cache_lock();
	if (cache_conn_ensure() > 0) {
		char **b = cache_conn_backings();
		for (; b && *b && !yes; b++) {
			size_t len = strlen(*b);
			yes = strncmp(abs, *b, len) == 0 && (abs[len] == '/' || abs[len] == 0);
		}
	}
	cache_unlock();
	return yes;
}

static void *cf_get(chell_ctx *c, const struct stat *st)
{
	struct cache_file *cf = cache_file_get(st->st_dev, st->st_ino, (uint64_t)st->st_size);
	struct statfs sf;
	if (cf && !atomic_load(&cf->fuse))
		atomic_store(&cf->fuse, fstatfs(c->fd, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC ? 1 : 2);
	return cf;
}

static void cf_put(void *cf)
{
	cache_file_put(cf);
}

static int attach(chell_ctx *c, int count_open)
{
	return mapped_attach(c, count_open, &cache_mapped);
}

static void cache_opened(chell_ctx *c)
{
	struct mapped_ofd *d = D(c);
	int trunc = tls_open_trunc;
	tls_open_trunc = 0;
	d->active = 0;
	if (!under_backing(c->path ? c->path : c->f->path)) {
		mapped_size_changed_by_kernel(c->fd); /* it may have been opened with O_TRUNC */
		return; /* the kernel's I/O path */
	}
	cache_locks_opened(c, under_shared(c->f->path));
	if (status(c) & O_DIRECT) {
		/* The application wants the kernel's I/O path, which must then see
		 * every byte: the file is written back and not cached while this
		 * process has it open (as for a shared mmap; the registration,
		 * held by the local state, keeps the manager's bypass on). */
		if (attach(c, 1) == 0)
			cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS);
		mapped_size_changed_by_kernel(c->fd);
		return;
	}
	if (attach(c, 1) < 0) {
		CSTAT(kernel_fallbacks, 1);
		return;
	}
	if (cache_declined_at_open(L(c)->cf, c->fd)) {
		/* pass-through, or over cache.file_max: the kernel's I/O path
		 * from the start (modes.c), as for a file outside the cache */
		mapped_size_changed_by_kernel(c->fd);
		return;
	}
	if (trunc) {
		/* The kernel truncated the backing file; chunks of the old
		 * contents (dirty ones too) must go before anyone reads them. */
		int r = cache_truncate_file(L(c)->cf, c->fd, 0);
		if (r != 0)
			chell_info("cache: could not drop the cached contents of %s after O_TRUNC (%s)",
				   c->f->path, r > 0 ? "no manager" : strerror(-r));
	}
	d->active = 1;
	if (c->layer == 0)
		c->f->fast = &cache_fast_ops;
}

static int cache_adopt(chell_ctx *c)
{
	cache_locks_adopt(c);
	return mapped_adopt(c, &cache_mapped);
}

/* Every close drops the process's byte-range locks on the file (locks.c). */
static int cache_close(chell_ctx *c)
{
	cache_locks_close(c);
	return mapped_close(c);
}

/* Is the file under a cache.shared directory (close-to-open with other nodes)? */
static bool under_shared(const char *abs)
{
	for (int i = 0; abs && i < nshared_dirs; i++)
		if (chell_path_under(abs, shared_dirs[i], strlen(shared_dirs[i])))
			return true;
	return false;
}

/*
 * The last close of an open file description writes the file's dirty
 * blocks back (FLUSH: write-back, then a sync of the backing file) before
 * close returns, in two cases:
 * - under a checker (shadow mode: a layer above this one), so the checker's
 *   final comparison of the backing file with its copy also proves the
 *   manager's write-back;
 * - for a file under a cache.shared directory opened for writing
 *   (close-to-open consistency with other nodes: another node's open then
 *   sees these bytes; its manager revalidates at that open, files.c
 *   cfile_register).
 * Otherwise cache mode keeps dirty data in the pool across closes: that is
 * the point of a write-back cache.
 */
static void flush_at_last_close(chell_ctx *c, struct mapped_local *l)
{
	if (!c->f->release_pending || !c->f->path)
		return;
	/* A read-only description wrote nothing: whatever is dirty came
	 * through another one, whose own last close writes it back. */
	if (c->layer == 0 &&
	    ((status(c) & O_ACCMODE) == O_RDONLY || !under_shared(c->f->path)))
		return;
	int fd = sys_open(c->f->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
	struct stat st;
	if (fd < 0)
		return;
	fd = chell_internal_fd(fd, 1);
	if (sys_fstat(fd, &st) == 0 && (uint64_t)st.st_dev == l->cf->dev &&
	    (uint64_t)st.st_ino == l->cf->ino)
		cache_flush_file(l->cf, fd, 0);
	chell_internal_close(fd);
}

static void cache_detach(chell_ctx *c)
{
	struct mapped_local *l = L(c);
	if (l)
		flush_at_last_close(c, l);
	cache_locks_detach(c);
	mapped_detach(c, &cache_mapped);
}

/* From now on this descriptor uses the kernel path (in every process). */
static void go_kernel(chell_ctx *c)
{
	mapped_go_kernel(c, &cache_mapped);
}

/* --------------------------------------------------------------- helpers */

/* Bytes [skip, n) of the iovecs as iovecs of their own: up to max of them
 * into v, starting at byte skip; *k gets their count. Returns the bytes
 * they hold. */
static size_t slice_iov(const struct iovec *iov, int cnt, size_t skip, size_t n, struct iovec *v, int max,
			int *k)
{
	size_t seen = 0, got = 0;
	*k = 0;
	for (int i = 0; i < cnt && seen < n && *k < max; i++) {
		size_t len = iov[i].iov_len < n - seen ? iov[i].iov_len : n - seen;
		if (seen + len > skip) {
			size_t from = skip > seen ? skip - seen : 0;
			v[*k].iov_base = (char *)iov[i].iov_base + from;
			v[(*k)++].iov_len = len - from;
			got += len - from;
		}
		seen += len;
	}
	return got;
}

ssize_t cache_kernel_rest(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos,
			  size_t skip, size_t n, int to_file, int rwf)
{
	struct iovec small[8], *v = cnt <= 8 ? small : malloc(sizeof(*v) * (size_t)cnt);
	int max = v ? cnt : 8;
	if (!v)
		v = small; /* no memory: the slice in windows of 8 iovecs, one call each */
	ssize_t done = 0;
	while (skip < n) {
		int k;
		size_t want = slice_iov(iov, cnt, skip, n, v, max, &k);
		ssize_t r = to_file ? sys_pwritev2(c->fd, v, k, (off_t)(pos + skip), rwf)
				    : sys_preadv2(c->fd, v, k, (off_t)(pos + skip), rwf);
		if (r < 0) {
			if (!done)
				done = r;
			break;
		}
		done += r;
		skip += (size_t)r;
		if ((size_t)r < want) /* short (end of file, a fault, no room): as the kernel's one call */
			break;
	}
	if (v != small)
		free(v);
	return done;
}

/* Cache transfer, finished by the kernel if the descriptor leaves the cache. */
static ssize_t move(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
		    int to_file)
{
	int kernel;
	ssize_t r = cache_transfer(c, iov, cnt, pos, n, to_file, &kernel);
	if (!kernel || r < 0)
		return r;
	if (kernel == 2) {
		/* the directory went write-around or read-only under the write */
		ssize_t k = cache_write_around(c, iov, cnt, pos, (size_t)r, n);
		return k < 0 ? (r ? r : k) : r + k;
	}
	go_kernel(c);
	/* at pos even on an O_APPEND descriptor (a pwrite with RWF_NOAPPEND) */
	ssize_t k = cache_kernel_rest(c, iov, cnt, pos, (size_t)r, n, to_file,
				      to_file ? mapped_at_pos_flags(c) : 0);
	if (k < 0)
		return r ? r : k;
	return r + k;
}

/*
 * Extending writes. The kernel publishes a new size only once the bytes
 * below it are in place, so a reader that reads up to the size it sees
 * never sees a byte that was not written. Cache mode does the same in
 * two steps, both under the tree-wide inode lock (which, like the
 * kernel's inode lock, orders extending writes of the tree, so a later
 * extension can never publish a size over an earlier one still storing):
 *
 *  1. store the bytes into the cache (move()), raising the ext_end mark
 *     of each chunk stored into first, so a write-back that comes between
 *     (the cleaner, an eviction) writes these bytes too, although they lie
 *     past the backing file's size (cache/layout.h, "Extending writes");
 *  2. publish the size with the kernel's own write: the new bytes written
 *     again through the client's descriptor, from the application's
 *     buffers (cache_kernel_rest). One system call that grows the backing file
 *     as a write without Chell does: its blocks allocated (or reserved by
 *     the file system's delayed allocation) and ENOSPC, EDQUOT or EFBIG
 *     reported now, by the same code that would report them to a write
 *     without Chell. From the application's buffers, not the cache's
 *     copy: chelld's workers evict without the lock, so the chunk holding
 *     the copy can be revoked between the store and this write (a copy
 *     out of it then fails, or reads a new instance of the chunk), and
 *     the bytes were then only in a write-back that may have run before
 *     the store (seen as zeros past the old end: test_cache_concurrent.py,
 *     1 run in 12-30 under load). An application that changes its buffer
 *     during its own write may see the backing file hold its later bytes
 *     until the write-back of the (dirty) cached copy, which wins.
 *     From PUBLISH_WRITE_MAX on, fallocate (mode 0) over the new range
 *     instead: the same size and the same errors, without the kernel
 *     copying the bytes a second time (the write-back writes them; until
 *     then the backing file reads zeros there). Measured on ext4 (client
 *     CPU time per extending write): the write costs 2.2 us at 2 KB, 3.6 at
 *     4 KB, 4.8 at 8 KB, 6.6 at 16 KB, 18 at 64 KB; fallocate ~6.3 us at
 *     any of these sizes.
 *     Then the size shared by the tree.
 *
 * One system call per extending write, no reservation. There used to be
 * one before every store into a new block (fallocate KEEP_SIZE, so that
 * ENOSPC came before the store), a block allocation outside delayed
 * allocation (~3-6 us for 4 KB on ext4, more than the kernel's whole 4 KB
 * extending write), and from 2 KB on the publication was a second
 * fallocate. Reserving ahead in large steps instead is not possible
 * without a trace: ext4 keeps blocks reserved past the end of file after
 * close, does not punch holes past it, and only a truncate frees them,
 * which moves mtime and ctime. The publication reports the errors the
 * reservation reported, and a failed one takes the marks back (below).
 *
 * Where that write cannot be made whole (a chunk revoked since the store:
 * its write-back, which ext_end made grow the backing file, has the
 * bytes; a file system that refuses a write), fallocate (mode 0, never
 * shrinking: another process tree may have grown the file) publishes the
 * rest. If that fails too (the file system is full), the write is short -
 * or fails with the kernel's error when nothing could be published - and
 * the ext_end marks it raised go back to the published end, so no later
 * write-back grows the file by bytes the application was told were not
 * written. A client killed between 1 and 2 leaves the stored bytes marked
 * by ext_end: the manager's write-back puts them in the backing file,
 * which then ends after them (as a write the kernel had copied before the
 * process died).
 */

/* Write [from, end) of the cache's copy to the backing file at the same
 * offsets: how far it got (from if nothing); *err gets the kernel's error
 * when it stopped on one. */
static uint64_t write_through(chell_ctx *c, uint64_t from, uint64_t end, int *err)
{
	struct cache_file *cf = L(c)->cf;
	int rwf = mapped_at_pos_flags(c); /* an O_APPEND descriptor must write at from */
	*err = 0;
	while (from < end) {
		uintptr_t e = cache_entry_of(cf, from >> CACHE_CHUNK_SHIFT);
		if (!e)
			break;
		size_t off = (size_t)(from & (CACHE_CHUNK_BYTES - 1)), n = CACHE_CHUNK_BYTES - off;
		if (n > end - from)
			n = (size_t)(end - from);
		struct iovec v = {(unsigned char *)(e & ~CACHE_E_WRITABLE) + off, n};
		/* a chunk revoked meanwhile makes the kernel's copy fail (EFAULT),
		 * not the process: the fallback publishes */
		ssize_t k = rwf ? sys_pwritev2(c->fd, &v, 1, (off_t)from, rwf)
				: sys_pwrite(c->fd, v.iov_base, n, (off_t)from);
		if (k <= 0) {
			*err = k < 0 ? (int)k : 0;
			break;
		}
		from += (uint64_t)k;
		if ((size_t)k < n)
			break;
	}
	return from;
}

/* A publication stopped at `done` short of new_end: the marks this write
 * raised (each chunk's to min(new_end, its end), xfer.c's piece) go back
 * to done. Only marks still holding that value: another tree's write may
 * have raised one further, and then it is that write's. */
static void ext_lower(chell_ctx *c, uint64_t done, uint64_t new_end)
{
	struct cache_file *cf = L(c)->cf;
	for (uint64_t k = done >> CACHE_CHUNK_SHIFT; k <= (new_end - 1) >> CACHE_CHUNK_SHIFT; k++) {
		uintptr_t e = cache_entry_of(cf, k);
		uint64_t chunk_end = (k + 1) << CACHE_CHUNK_SHIFT;
		if (e)
			cache_ext_lower((const unsigned char *)(e & ~CACHE_E_WRITABLE),
					new_end < chunk_end ? new_end : chunk_end, done);
	}
}

/* Where the file ends after a write at pos that stored r bytes (or
 * failed with r < 0). Like the kernel: the bytes stored; and a write that
 * got as far as the file but could copy nothing (EFAULT on a buffer in the
 * user address range) still moves the end up to pos, as the kernel's
 * write_end does for a copy of 0 bytes. (A pointer outside the user range
 * never reaches the file: mapped_iov_total refused the call before.) */
static uint64_t end_after(uint64_t pos, ssize_t r)
{
	return r > 0 ? pos + (uint64_t)r : r == -EFAULT ? pos : 0;
}

/* Extensions of this many bytes and more publish with fallocate (above). */
#define PUBLISH_WRITE_MAX (16 << 10)
/* 2. (above): publish the end of a write at pos that stored r bytes
 * (in->lock held); r, or the error that kept the size from moving. */
static ssize_t publish(chell_ctx *c, struct mapped_inode *in, uint64_t pos, ssize_t r,
		       const struct iovec *iov, int cnt)
{
	uint64_t size = isize(in), new_end = end_after(pos, r);
	if (new_end <= size)
		return r;
	if (r > 0 && !mapped_active(c)) {
		/* move() left the cache and the kernel wrote the rest: its write
		 * moved the backing file's end, which is the size. A fallocate
		 * there is not the same question: GlusterFS takes a write up to
		 * LLONG_MAX but refuses fallocate past its own limit (EFBIG). */
		mapped_inode_refresh(in, c->fd);
		return r;
	}
	uint64_t from = pos > size ? pos : size;
	int err = 0;
	/* On FUSE a write's position is the server's: GlusterFS's brick keeps
	 * the O_APPEND of the open whatever F_SETFL or RWF_NOAPPEND say since,
	 * so a write-through at `from` could land at the end of file. There
	 * fallocate publishes (the bytes follow with the write-back) - except
	 * in write-through mode (modes.c), where the bytes must reach the
	 * backing file now: that writes them unless the descriptor appends. */
	bool local = atomic_load(&L(c)->cf->fuse) == 2;
	bool wthrough = cache_mode_hint(L(c)->cf) & CHELLD_FILE_WTHROUGH;
	uint64_t done = from;
	if (r > 0 && mapped_active(c) &&
	    ((local && new_end - from < PUBLISH_WRITE_MAX) || (wthrough && (local || !mapped_at_pos_flags(c))))) {
		/* the application's buffers, not the cache's copy (above) */
		ssize_t k = cache_kernel_rest(c, iov, cnt, pos, (size_t)(from - pos), (size_t)(new_end - pos), 1,
					      mapped_at_pos_flags(c));
		if (k < 0)
			err = (int)k;
		else
			done = from + (uint64_t)k;
	}
	if (done < new_end || done == from) {
		/* the rest (or, for a write that copied nothing, the end at pos) */
		uint64_t off = done < new_end ? done : new_end - 1;
		int e = mapped_grow(c->fd, in, off, new_end - off, new_end);
		if (e < 0) {
			if (r > 0 && mapped_active(c))
				ext_lower(c, done, new_end);
			if (done == from)
				return r >= 0 ? (err ? err : e) : r;
			new_end = done; /* short: what the kernel wrote */
			r = (ssize_t)(done - pos);
		}
	}
	CSTAT(extends, 1);
	atomic_store_explicit(&L(c)->cf->need_sync, 1, memory_order_release);
	if (new_end > isize(in))
		isize_set(in, new_end);
	return r;
}

/* ----------------------------------------------------------------- write */

/* The kernel's end of file, for an append: lseek(SEEK_END) rather than
 * the base's statx (mapped_inode_refresh): the same size, ~200 ns cheaper
 * (measured on ext4 and tmpfs), and neither marks the inode's times as
 * seen as an fstat would (multigrain timestamps: the kernel's next write
 * would take a fine-grained time and dirty the inode, ~1 us more per 64 B
 * append on ext4). The kernel's offset of the
 * descriptor moves, which cache mode does not keep (mapped_ofd.koff is 0:
 * sync_out sets it from ours whenever the kernel could look). */
static uint64_t kernel_end(struct mapped_inode *in, int fd)
{
	off_t e = atomic_load((_Atomic uint64_t *)&in->ksize) ? -1 : sys_lseek(fd, 0, SEEK_END);
	if (e < 0)
		return mapped_inode_refresh(in, fd); /* a lazy size: the base's answer */
	isize_set(in, (uint64_t)e);
	return (uint64_t)e;
}

/* O_APPEND, atomic across processes and process trees: the base's append
 * lock (mapped_append_lock; on the OFD's lock stand-in where the node
 * serves its locks, locks.c) and the tree-wide inode lock. */
static ssize_t append(chell_ctx *c, const struct iovec *iov, int cnt, size_t total, uint64_t *endp)
{
	struct mapped_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock);
	int e = cache_locks_append(c, F_WRLCK);
	if (e < 0) {
		chell_lock_release(&in->lock);
		return e;
	}
	uint64_t pos = kernel_end(in, c->fd);
	ssize_t room = mapped_write_room(pos, total); /* at the end, where it lands */
	if (room < 0) {
		cache_locks_append(c, F_UNLCK);
		chell_lock_release(&in->lock);
		return mapped_write_refused(room); /* no lock held while a handler runs */
	}
	total = (size_t)room;
	int kernel = 0;
	ssize_t r, p;
	if (cache_file_mode(L(c)->cf, c->fd) & CHELLD_FILE_WAROUND) {
		r = p = cache_write_around(c, iov, cnt, pos, 0, total);
	} else {
		r = cache_transfer(c, iov, cnt, pos, total, CACHE_XFER_EXTEND, &kernel);
		p = publish(c, in, pos, r, iov, cnt);
	}
	if (kernel == 2 && r >= 0 && p == r) {
		/* the directory went write-around under the write: the rest at
		 * the end just published, around the cache */
		ssize_t k = cache_write_around(c, iov, cnt, pos, (size_t)r, total);
		r = k < 0 ? (r ? r : k) : r + k;
	} else if (kernel && r >= 0 && p == r) {
		/* The rest goes through the kernel's own O_APPEND, at the end
		 * just published. */
		go_kernel(c);
		ssize_t k = cache_kernel_rest(c, iov, cnt, pos, (size_t)r, total, 1, 0);
		r = k < 0 ? (r ? r : k) : r + k;
		kernel_end(in, c->fd);
	} else {
		r = p;
	}
	cache_locks_append(c, F_UNLCK);
	chell_lock_release(&in->lock);
	*endp = pos + (uint64_t)(r > 0 ? r : 0);
	return r;
}

/* The base's append method: the offset follows for write(), not pwrite(). */
static ssize_t append_op(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, size_t total,
			 int flags)
{
	uint64_t end;
	ssize_t r = append(c, iov, cnt, total, &end);
	if (r > 0 && off == -1)
		atomic_store(OFFSET(c), end);
	/* A pwrite leaves the offset alone, but the append read the end with
	 * lseek(SEEK_END) on the descriptor: if it moved to the kernel path
	 * meanwhile (the manager does not cache the file: pass-through, the
	 * per-file cap), the kernel's offset must be ours again. */
	if (off != -1 && !mapped_active(c))
		sys_lseek(c->fd, (off_t)atomic_load(OFFSET(c)), SEEK_SET);
	if (r > 0 && mapped_active(c))
		mapped_write_done(&L(c)->inode->times, c->fd);
	return r;
}

/* Write-through (modes.c): [pos, pos + r) stored in the cache below the
 * size `below` (what publish() does not write) goes to the backing file
 * too, from the cache's copy. r, or how much reached it, or its error. */
static ssize_t through(chell_ctx *c, uint64_t pos, ssize_t r, uint64_t below)
{
	if (r <= 0 || !mapped_active(c) || pos >= below ||
	    !(cache_mode_hint(L(c)->cf) & CHELLD_FILE_WTHROUGH))
		return r;
	uint64_t end = pos + (uint64_t)r < below ? pos + (uint64_t)r : below;
	int err = 0;
	uint64_t done = write_through(c, pos, end, &err);
	if (done == end)
		return r;
	/* The cache holds the bytes (dirty: a write-back writes them later);
	 * the application learns what the backing file got now. */
	return done > pos ? (ssize_t)(done - pos) : (err ? err : -EIO);
}

/* A write of `total` bytes at pos, the range claimed on the offset. */
static ssize_t write_at(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t total)
{
	struct mapped_inode *in = L(c)->inode;
	uint64_t end = pos + (uint64_t)total;
	bool around = cache_file_mode(L(c)->cf, c->fd) & CHELLD_FILE_WAROUND;
	ssize_t r;
	if (end > isize(in)) {
		/* extending: store, then publish the size */
		chell_lock_acquire(&in->lock);
		uint64_t size = isize(in);
		if (around) {
			r = cache_write_around(c, iov, cnt, pos, 0, total);
		} else {
			r = through(c, pos, move(c, iov, cnt, pos, total, CACHE_XFER_EXTEND), size);
			r = publish(c, in, pos, r, iov, cnt);
		}
		chell_lock_release(&in->lock);
	} else if (around) {
		r = cache_write_around(c, iov, cnt, pos, 0, total);
	} else {
		r = through(c, pos, move(c, iov, cnt, pos, total, 1), UINT64_MAX);
	}
	if (r > 0 && mapped_active(c))
		mapped_write_done(&in->times, c->fd);
	return r;
}

static void settle(chell_ctx *c)
{
	/* Only the backing file knows holes, and only once the cache's dirty
	 * blocks are written back to it. Rare: worth a flush. */
	cache_flush_file(L(c)->cf, c->fd, 0);
}

static const struct mapped_ops cache_mapped = {
	.stats = MAPPED_STATS_CACHE,
	.fast = &cache_fast_ops,
	.file_get = cf_get,
	.file_put = cf_put,
	.transfer = move,
	.append = append_op,
	.write_at = write_at,
	.settle = settle,
};

/* ------------------------------------------------------- offset and size */

static int cache_ftruncate(chell_ctx *c, off_t len)
{
	/* Past RLIMIT_FSIZE the kernel refuses (EFBIG and SIGXFSZ, after its
	 * other checks) where the manager, with its own limit, would not. */
	if (!mapped_active(c) || len < 0 || (status(c) & O_ACCMODE) == O_RDONLY ||
	    (uint64_t)len > mapped_fsize())
		return chell_down_ftruncate(c, len); /* the kernel's answer, errors included */
	struct mapped_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock);
	int r = cache_truncate_file(L(c)->cf, c->fd, (uint64_t)len);
	if (r == CACHE_MISS_KERNEL)
		r = chell_down_ftruncate(c, len);
	if (r == 0) {
		isize_set(in, (uint64_t)len);
	}
	chell_lock_release(&in->lock);
	return r;
}

static int cache_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	if (!mapped_active(c))
		return chell_down_fallocate(c, mode, off, len);
	struct mapped_inode *in = L(c)->inode;
	/* Modes that change data: the cached blocks must be written back and
	 * dropped first, so the kernel's change is what everyone reads next. */
	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE | FALLOC_FL_COLLAPSE_RANGE |
		    FALLOC_FL_INSERT_RANGE))
		cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP);
	chell_lock_acquire(&in->lock);
	uint64_t before = isize(in);
	int r = chell_down_fallocate(c, mode, off, len);
	if (r == 0 && (mode & ~FALLOC_FL_KEEP_SIZE))
	if (r == 0 && mapped_inode_refresh(in, c->fd) != before)
		atomic_store(&L(c)->cf->need_sync, 1); /* the manager records it at fsync */
	chell_lock_release(&in->lock);
	return r;
}

/* truncate(path) in any process of the tree goes through the manager too */
static int cache_truncate(chell_ctx *c, const char *path, off_t len)
{
	/* Also in a process that has not opened a cached file yet (a new
	 * image after exec, a shell): the cache may hold chunks of this file,
	 * dirty ones past the new end too, and only TRUNCATE drops them. */
	if (len >= 0)
		mapped_inode_init();
	/* past RLIMIT_FSIZE: the kernel's refusal (see cache_ftruncate) */
	int fd = len >= 0 && mapped_inode_ready() && (uint64_t)len <= mapped_fsize()
			 ? sys_open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK, 0)
			 : -1;
	int r = CACHE_MISS_KERNEL;
	struct stat st;
	if (fd >= 0 && sys_fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		fd = chell_internal_fd(fd, 1);
		struct cache_file *cf = cache_file_get(st.st_dev, st.st_ino, (uint64_t)st.st_size);
		if (cf) {
			r = cache_truncate_file(cf, fd, (uint64_t)len);
			cache_file_put(cf);
		}
		chell_internal_close(fd);
		fd = -1;
	}
	if (fd >= 0)
		sys_close(fd);
	if (r == CACHE_MISS_KERNEL)
		r = chell_down_truncate(c, path, len);
	if (r == 0)
		mapped_size_changed_by_path(path);
	return r;
}

/*
 * fsync/fdatasync: the data is in the pool already (stores into the mapped
 * chunk, flushed line by line on DAX; the dirty bits with it). What is left
 * on a persistent pool is the file size when this process grew it: SYNC
 * asks the manager to record it in the file's Cnode (and make new chunk
 * files' entries durable). Otherwise, and always on a pool in memory, no
 * system call at all (cache_sync_file).
 */
static int cache_fsync(chell_ctx *c, int datasync)
{
	if (!mapped_active(c))
		return chell_down_fsync(c, datasync);
	CSTAT(fsyncs, 1);
	if (cache_dax)
		mapped_fence(cache_persist);
	int r = cache_sync_file(L(c)->cf, c->fd, isize(L(c)->inode));
	/* No manager to record a new size: the kernel's fsync of the backing
	 * file makes the size (set there by fallocate) durable instead; the
	 * data itself is in the pool already. Under write-through,
	 * write-around and read-only the writes are in the backing file, and
	 * fsync makes them durable there as the kernel's would (modes.c). */
	if (r == CACHE_MISS_KERNEL || r == -EIO || (r == 0 && cache_mode_hint(L(c)->cf)))
		r = chell_down_fsync(c, datasync);
	return r;
}

static int cache_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags)
{
	if (!mapped_active(c))
		return chell_down_sync_file_range(c, off, n, flags);
	long long end;
	if ((flags & ~(SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
		       SYNC_FILE_RANGE_WAIT_AFTER)) ||
	    off < 0 || n < 0 || __builtin_add_overflow((long long)off, (long long)n, &end))
		return -EINVAL;
	if (cache_dax)
		mapped_fence(cache_persist); /* the lines were flushed as they were written */
	if (cache_mode_hint(L(c)->cf)) /* the writes are in the backing file (modes.c) */
		return chell_down_sync_file_range(c, off, n, flags);
	return 0;
}

/*
 * Leases (mapped.h, mapped_takes_lease): before the application takes one,
 * the file leaves the cache as for a shared mapping (written back, dropped,
 * bypassed until its last close in the process; the manager then holds no
 * descriptor of it, chelld/files.c) and this descriptor moves to the
 * kernel path: no later open by Chell, ours or the manager's, can break the
 * lease.
 */
static void leave_for_lease(chell_ctx *c)
{
	if (!mapped_active(c))
		return;
	cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS);
	cache_lent_settle(L(c)->cf); /* no descriptor of Chell's may stay open */
	go_kernel(c);
}

static int cache_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	if (cache_locks_cmd(cmd)) {
		bool done;
		int r = cache_locks_fcntl(c, cmd, arg, &done);
		if (done)
			return r;
	}
	if (mapped_takes_lease(cmd, arg))
		leave_for_lease(c);
	int r = chell_down_fcntl(c, cmd, arg);
	if (cmd == F_SETFL && r >= 0 && mapped_active(c) && (arg & O_DIRECT)) {
		/* the application asks for the kernel's I/O path from now on */
		cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS);
		go_kernel(c);
	}
	return r;
}

/*
 * The application maps the file itself. A shared mapping must see every
 * write and its stores must not be lost: the manager writes the file back,
 * drops its chunks and stops caching it until its last close (every client
 * then gets BYPASS and uses the kernel path); this descriptor moves to the
 * kernel path now. A private mapping only needs the data written back.
 */
static void *cache_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off)
{
	if (mapped_active(c)) {
		/* no manager (-EIO): the backing file may be older than the cache,
		 * so the mapping is refused rather than showing stale bytes */
		int r;
		if ((flags & MAP_TYPE) == MAP_PRIVATE) {
			r = cache_flush_file(L(c)->cf, c->fd, 0);
		} else {
			r = cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS);
			if (r >= 0)
				go_kernel(c);
		}
		if (r < 0)
			return (void *)(intptr_t)r;
	}
	return chell_down_mmap(c, addr, len, prot, flags, off);
}

/* A process Chell does not serve gets the descriptor: it reads and writes
 * the backing file and moves the kernel's offset, so the cached bytes go
 * there first and this description uses the kernel path from now on. */
static void cache_escape(chell_ctx *c)
{
	if (!mapped_active(c))
		return;
	cache_flush_file(L(c)->cf, c->fd, CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS);
	go_kernel(c);
}

/* .close replaces the base's (cache_close calls it): the lock stand-ins'
 * release is the cache's own. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverride-init"
const struct chell_handler chell_cache_handler = {
	MAPPED_HANDLER(cache),
	.sync_file_range = cache_sync_file_range,
	.mmap = cache_mmap,
	.close = cache_close,
};
#pragma GCC diagnostic pop
