/* SPDX-License-Identifier: MIT */
/*
 * The direct handler's operations: its policy on the mapped-file base
 * (mapped/base.h has offsets, sizes and the checks every call makes).
 * A chunk's memory is a shared mapping of the file itself; every size
 * change goes to the kernel first (fallocate/ftruncate), so fstat() and
 * other programs always see the true size - except with direct.lazy_size,
 * where writes past the end are copies into a file grown in steps, the
 * exact size published lazily (mapped/lazy.c).
 *
 * The kernel keeps the offset of O_APPEND descriptions (mapped_ops
 * .kernel_offset, unless direct.lazy_size): their writes are the kernel's
 * (only it makes an append atomic with every appender), which moves its
 * offset, so read(), lseek() and write() at the position go to the kernel
 * there. Positional reads and writes use the mapping either way.
 *
 * Whenever the mapping cannot serve a request (a page truncated away by
 * another process, a file we may not map writable) the kernel does the
 * rest, with the same arguments: the answer is the kernel's by construction.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <sys/uio.h>

#include "direct.h"
#include "../mapped/short.h"

static struct mapped_ops direct_mapped;
int direct_lazy_size;

static int direct_proc_init(void)
{
	int shift = chell_setting_shift("direct.chunk_size");
	if (shift < 0)
		return -1;
	direct_chunk_shift = (unsigned)shift;
	direct_populate = chell_setting_bool("direct.populate");
	uint64_t after = chell_setting_uint("direct.map_after");
	direct_map_after = after > UINT32_MAX ? UINT32_MAX : (uint32_t)after;
	const char *ms = chell_setting("direct.map_sync");
	direct_map_sync_mode = !strcmp(ms, "off") ? 0 : !strcmp(ms, "on") ? 2 : 1;
	direct_nt_threshold = chell_setting_size("direct.nt_threshold");
	direct_lazy_size = chell_setting_bool("direct.lazy_size");
	if (direct_lazy_size)
		mapped_lazy_sizes = 1;
	else
		direct_mapped.kernel_offset = O_APPEND;
	/* Our stat() only matters for lazy sizes; without them, routing every
	 * stat(path) through the stack would cost ~60 ns for nothing. */
	if (!direct_lazy_size)
		chell_stack_unroute_stat(&chell_direct_handler);
	return mapped_copy_init();
}

#define KEY(k, f) {k, offsetof(struct mapped_stats, f)}
static const struct mapped_stat_key direct_stat_keys[] = {
	KEY("reads", reads), KEY("writes", writes), KEY("read_bytes", read_bytes),
	KEY("write_bytes", write_bytes), KEY("kernel_fallbacks", kernel_fallbacks),
	KEY("mmaps", mmaps), KEY("faults_caught", faults), KEY("extends", extends),
	KEY("fsyncs", fsyncs), KEY("zero_copy", zero_copy),
};
static const struct mapped_stats_spec direct_stats_spec = {
	MAPPED_STATS_DIRECT, NULL, direct_stat_keys, sizeof(direct_stat_keys) / sizeof(direct_stat_keys[0])};

static void direct_proc_event(enum chell_op ev, long arg)
{
	if (ev == CHELL_OP_FORK) {
		direct_map_after_fork();
	} else if (ev == CHELL_OP_EXIT) {
		if (direct_lazy_size)
			mapped_lazy_publish_all(&chell_direct_handler);
		mapped_stats_dump(&direct_stats_spec);
	} else if (ev == CHELL_OP_EXEC && direct_lazy_size) {
		mapped_lazy_publish_all(&chell_direct_handler); /* the new image may not run Chell */
	}
}

/* ------------------------------------------------------------- lifecycle */

static int direct_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	return chell_down_open(c, dirfd, path, flags, mode);
}

/* This process's mapping of the file: NULL if the descriptor allows
 * writing and the file cannot be mapped writable (the kernel serves it). */
static void *map_get(chell_ctx *c, const struct stat *st)
{
	int err = 0;
	int acc = status(c) & O_ACCMODE;
	struct direct_map *m = direct_map_get(c->fd, st->st_dev, st->st_ino, acc != O_RDONLY, &err);
	if (m && err) {
		direct_map_put(m);
		return NULL;
	}
	return m;
}

static void map_put(void *m)
{
	direct_map_put(m);
}

static void direct_opened(chell_ctx *c)
{
	struct mapped_ofd *d = D(c);
	d->active = 0;
	struct stat st;
	if (status(c) & O_DIRECT) {
		/* lazy sizes: the kernel's must be exact from now on */
		if (direct_lazy_size && mapped_inode_ready() && sys_fstat(c->fd, &st) == 0)
			mapped_lazy_kernel_user(st.st_dev, st.st_ino, c->fd);
		mapped_size_changed_by_kernel(c->fd); /* it may have been opened with O_TRUNC */
		return; /* the application wants the kernel's I/O path */
	}
	if (mapped_attach(c, 1, &direct_mapped) == 0) {
		d->active = 1;
		if (c->layer == 0) /* nothing above us to bypass */
			c->f->fast = &direct_fast_ops;
	} else {
		DSTAT(kernel_fallbacks, 1);
		/* its writes are the kernel's: lazy sizes must be exact */
		if (direct_lazy_size && mapped_inode_ready() && sys_fstat(c->fd, &st) == 0)
			mapped_lazy_kernel_user(st.st_dev, st.st_ino, c->fd);
	}
}

static int direct_adopt(chell_ctx *c)
{
	return mapped_adopt(c, &direct_mapped);
}

static void direct_detach(chell_ctx *c)
{
	mapped_detach(c, &direct_mapped);
}

static void go_kernel(chell_ctx *c)
{
	mapped_go_kernel(c, &direct_mapped);
}

static void direct_escape(chell_ctx *c)
{
	go_kernel(c);
}

/* --------------------------------------------------------------- helpers */

/* Address of `pos` in the mapping, mapping its chunk first if needed. */
static inline unsigned char *addr_of(struct direct_map *m, int fd, uint64_t pos)
{
	unsigned char *a = direct_addr(m, pos);
	if (likely(a))
		return a;
	unsigned char *base = direct_map_chunk_slow(m, fd, pos >> direct_chunk_shift);
	return base ? base + (pos & ((1ull << direct_chunk_shift) - 1)) : NULL;
}

/* Holes made through Chell (in any process) invalidate this process's
 * "dense" marks. */
static inline void check_hole_gen(struct mapped_local *l)
{
	uint32_t g = atomic_load_explicit((_Atomic uint32_t *)&l->inode->hole_gen, memory_order_acquire);
	if (unlikely(g != l->map->hole_gen)) {
		direct_map_mark_all_sparse(l->map);
		l->map->hole_gen = g;
	}
}

static void made_holes(struct mapped_local *l)
{
	atomic_fetch_add((_Atomic uint32_t *)&l->inode->hole_gen, 1);
	check_hole_gen(l);
}

/* May a read of [p, p+len) in a possibly sparse chunk use the mapping?
 * Only if the kernel sees data all the way (so no fault allocates a page). */
static bool range_is_data(chell_ctx *c, uint64_t p, size_t len)
{
	if (mapped_kernel_offset(c))
		return false; /* the probe would move the description's offset: pread */
	off_t hole = sys_lseek(c->fd, (off_t)p, SEEK_HOLE);
	if (hole < 0 || (uint64_t)hole < p + len)
		return false;
	size_t chunk = (size_t)1 << direct_chunk_shift;
	uint64_t lo = p & ~(uint64_t)(chunk - 1);
	if ((uint64_t)hole >= lo + chunk) {
		off_t data = sys_lseek(c->fd, (off_t)lo, SEEK_DATA);
		if (data == (off_t)lo) /* the whole chunk is data now */
			direct_map_set_dense(L(c)->map, lo);
	}
	return true;
}

/*
 * Move n bytes between the iovecs and the file at pos. to_file: write.
 * Returns bytes moved (the kernel finishes what the mapping could not), or
 * -errno if nothing could be moved.
 */
static ssize_t transfer(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
			int to_file)
{
	struct direct_map *m = L(c)->map;
	if (!to_file)
		check_hole_gen(L(c)); /* before any chunk's sparse flag is looked at */
	size_t done = 0, chunk = (size_t)1 << direct_chunk_shift;
	bool nt = to_file && m->map_sync == 2 && n >= direct_nt_threshold;
	/* direct.map_after: the kernel serves the file's first reads (the
	 * budget is 0 once a chunk is mapped) */
	bool unmapped = !to_file && mapped_budget_take(&m->kernel_reads_left);
	mapped_read_by_kernel = unmapped;
	for (int i = 0; i < cnt && done < n; i++) {
		size_t vlen = iov[i].iov_len < n - done ? iov[i].iov_len : n - done, vdone = 0;
		while (vdone < vlen) {
			uint64_t p = pos + done;
			size_t piece = chunk - (size_t)(p & (chunk - 1));
			if (piece > vlen - vdone)
				piece = vlen - vdone;
			unsigned char *a = unmapped ? NULL : addr_of(m, c->fd, p);
			unsigned char *u = (unsigned char *)iov[i].iov_base + vdone;
			int fault = 0;
			size_t got = 0;
			if (a && !to_file && (atomic_load(&direct_entry(m, p)->flags) & DIRECT_SPARSE) &&
			    !range_is_data(c, p, piece))
				a = NULL; /* holes in range: the kernel reads them without filling */
			if (a && (!to_file || m->writable))
				got = to_file ? (nt ? mapped_copy_nt(m->persist, a, u, piece, &fault)
						    : mapped_copy(a, u, piece, &fault))
					      : mapped_copy_out(u, a, piece, &fault);
			if (got && to_file && m->map_sync == 2 && !nt)
				mapped_flush(m->persist, a, got); /* persistent on the next fence (fsync) */
			done += got;
			vdone += got;
			if (got == piece)
				continue;
			/* The mapping could not serve it: a page truncated away, a bad
			 * user buffer, no mapping. The kernel does the rest and has
			 * the last word. */
			if (fault)
				DSTAT(faults, 1);
			if (!unmapped)
				DSTAT(kernel_fallbacks, 1);
			if (to_file) /* the kernel may write past a shrunken end: a hole */
				atomic_fetch_add((_Atomic uint32_t *)&L(c)->inode->hole_gen, 1);
			struct iovec rest = {u + got, piece - got};
			ssize_t k = to_file ? sys_pwritev2(c->fd, &rest, 1, (off_t)(p + got), mapped_at_pos_flags(c))
					    : sys_pread(c->fd, u + got, piece - got, (off_t)(p + got));
			if (k < 0)
				return done ? (ssize_t)done : k;
			done += (size_t)k;
			vdone += (size_t)k;
			if ((size_t)k < piece - got) /* end of file (or disk full) */
				return (ssize_t)done;
		}
	}
	return (ssize_t)done;
}

/* Make the file at least `end` bytes long, through the kernel. Caller holds
 * the inode lock. fallocate never shrinks (another process may have grown
 * the file meanwhile) and keeps holes before `pos` as a write would. */
static int extend(chell_ctx *c, struct mapped_inode *in, uint64_t pos, uint64_t end)
{
	if (end <= isize(in))
		return 0;
	if (pos > isize(in)) /* writing past the end leaves a hole before pos */
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	int r = mapped_grow(c->fd, in, pos, end - pos, end);
	if (r < 0)
		return r;
	DSTAT(extends, 1);
	if (end > isize(in))
		isize_set(in, end);
	return 0;
}

/* Flags the mapped copy cannot honour itself: RWF_NOWAIT (a copy may fault
 * a page in, mapping a chunk may wait) and RWF_ATOMIC (no torn writes).
 * Where the kernel accepts them, the kernel moves the bytes at `pos`: the
 * page cache (or DAX memory) it uses is the mapping, so every reader sees
 * them, and its answer (EAGAIN, EINVAL for a bad atomic size) is exact:
 * at `off`, or at the shared offset, which then advances by what it moved. */
static ssize_t kernel_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	DSTAT(kernel_fallbacks, 1);
	if (off >= 0)
		return sys_preadv2(c->fd, iov, cnt, off, flags);
	_Atomic uint64_t *offp = OFFSET(c);
	uint64_t pos = atomic_load(offp);
	ssize_t r = sys_preadv2(c->fd, iov, cnt, (off_t)pos, flags);
	if (r > 0)
		atomic_compare_exchange_strong(offp, &pos, pos + (uint64_t)r);
	return r;
}

static ssize_t kernel_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, ssize_t total,
			    int flags)
{
	struct mapped_inode *in = L(c)->inode;
	_Atomic uint64_t *offp = OFFSET(c);
	uint64_t pos = off >= 0 ? (uint64_t)off : atomic_load(offp);
	DSTAT(kernel_fallbacks, 1);
	if (off < 0) /* reserve the range, as a mapped write would */
		while (!atomic_compare_exchange_weak(offp, &pos, pos + (uint64_t)total))
			;
	if (pos + (uint64_t)total > isize(in)) /* it may leave a hole before pos */
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	ssize_t r = sys_pwritev2(c->fd, iov, cnt, (off_t)pos, flags | mapped_at_pos_flags(c));
	if (off < 0 && r != total) {
		uint64_t expect = pos + (uint64_t)total;
		atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
	}
	/* the new size, without waiting for the lock (RWF_NOWAIT must not) */
	uint64_t cur = isize(in), end = pos + (uint64_t)(r > 0 ? r : 0);
	while (cur < end && !atomic_compare_exchange_weak((_Atomic uint64_t *)&in->size, &cur, end))
		;
	return r;
}

static ssize_t kernel_io(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, ssize_t total,
			 int flags, bool write)
{
	return write ? kernel_write(c, iov, cnt, off, total, flags) : kernel_read(c, iov, cnt, off, flags);
}

/* ----------------------------------------------------------------- write */

/*
 * Bytes of a lazy write past the old end land in pages nobody wrote yet. A
 * store into such a page through the mapping faults (allocate, zero, map:
 * ~2.5 us on this VM, measured; prefaulting with MADV_POPULATE_WRITE costs
 * the same per page), while the kernel's write allocates the page in about
 * 1 us. Small writes share a page and its fault (64 B: 1/64th of one), so
 * they are copies; from LAZY_COPY_MAX on, the kernel writes the bytes at
 * pos inside the step (one system call, no size change: as fast as a
 * write without Chell, and the page cache it fills is our mapping).
 */
#define LAZY_COPY_MAX 1024
static ssize_t lazy_store(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n)
{
	if (n < LAZY_COPY_MAX)
		return transfer(c, iov, cnt, pos, n, 1);
	struct iovec one[1];
	if (cnt > 1 || iov[0].iov_len > n) { /* the kernel must stop at n */
		if (iov[0].iov_len < n)
			return transfer(c, iov, cnt, pos, n, 1);
		one[0] = (struct iovec){iov[0].iov_base, n};
		iov = one;
		cnt = 1;
	}
	int rwf = mapped_at_pos_flags(c);
	return !rwf ? sys_pwrite(c->fd, iov[0].iov_base, n, (off_t)pos)
		    : sys_pwritev2(c->fd, iov, cnt, (off_t)pos, rwf);
}

/* A lazy write of n bytes at pos past the end (in->lock held): a step if
 * needed, then the bytes; the exact size follows. Like the kernel's
 * write_end, a write that reached the file but copied nothing (a bad
 * buffer: mapped_iov_total refused pointers outside user space) still
 * moves the end to pos. */
static ssize_t lazy_write(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n)
{
	struct mapped_inode *in = L(c)->inode;
	int e = mapped_lazy_reserve(L(c), c->fd, pos + n, (uint64_t)1 << direct_chunk_shift,
				    MAPPED_STATS_DIRECT);
	ssize_t r = e == 0 ? lazy_store(c, iov, cnt, pos, n)
		  : e == -EOPNOTSUPP ? sys_pwritev2(c->fd, iov, cnt, (off_t)pos, mapped_at_pos_flags(c))
				     : e;
	uint64_t new_end = pos + (uint64_t)(r > 0 ? r : 0);
	if ((r > 0 || r == -EFAULT) && new_end > isize(in))
		isize_set(in, new_end);
	return r;
}

/* Lazy sizes, not on DAX (where the extension path keeps the flush
 * policy), while no descriptor of the tree writes the file through the
 * kernel. */
static inline bool lazy(struct mapped_local *l)
{
	return direct_lazy_size && l->map->map_sync != 2 &&
	       !atomic_load((_Atomic uint32_t *)&l->inode->nolazy);
}

/* Appends. Exact sizes: the kernel's (only it can make them atomic with
 * every other appender, including programs that don't run Chell); the
 * page cache it writes is the memory we map, so mapped readers see the
 * bytes at once. On an O_APPEND description write() never comes here
 * (the kernel keeps its offset: mapped_write); this is pwritev2 with
 * RWF_APPEND, or an append with lazy sizes. */
static ssize_t append(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, size_t total, int flags)
{
	struct mapped_local *l = L(c);
	struct mapped_inode *in = l->inode;
	ssize_t r;
	if (lazy(l)) {
		/* Lazy sizes: an append is a copy at the end as the tree knows
		 * it, under the tree's lock (atomic for every appender of the
		 * tree; not for programs outside it, see docs/DIRECT.md). */
		chell_lock_acquire(&in->lock);
		uint64_t pos = isize(in);
		ssize_t room = mapped_write_room(pos, total);
		if (room < 0) {
			chell_lock_release(&in->lock);
			return mapped_write_refused(room); /* no lock held while a handler runs */
		}
		r = lazy_write(c, iov, cnt, pos, (size_t)room);
		chell_lock_release(&in->lock);
		if (r > 0) {
			if (off == -1) /* write(): the offset follows; pwrite(): unchanged */
				atomic_store(OFFSET(c), pos + (uint64_t)r);
			mapped_write_done(&in->times, c->fd);
		}
		return r;
	}
	DSTAT(kernel_fallbacks, 1);
	mapped_lazy_publish(l, c->fd, NULL); /* the kernel appends at its own size */
	r = chell_down_write(c, iov, cnt, off, flags);
	if (r > 0) {
		if (off == -1) /* the kernel moved its offset, ours follows */
			chell_offset_from_kernel(c->f->ofd, c->fd);
		mapped_inode_refresh(in, c->fd);
	}
	return r;
}

/* Growing the file needs a system call anyway: let it be the write itself
 * (one call, as without Chell) rather than an extension plus a copy. The
 * page cache it fills is what we map. (On DAX the extension path keeps our
 * flush policy.) The kernel cuts at RLIMIT_FSIZE itself. */
ssize_t direct_grow_write(struct mapped_inode *in, int fd, const struct iovec *iov, int cnt,
			  uint64_t pos, int rwf)
{
	chell_lock_acquire(&in->lock);
	if (pos > isize(in)) /* a hole before pos, for every process */
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	/* pwrite64 where it will do: the vector call's iovec import costs the
	 * kernel ~100 ns more than a plain write (measured at 64 B) */
	ssize_t r = cnt == 1 && !rwf ? sys_pwrite(fd, iov[0].iov_base, iov[0].iov_len, (off_t)pos)
				     : sys_pwritev2(fd, iov, cnt, (off_t)pos, rwf);
	if (r > 0 && pos + (uint64_t)r > isize(in))
		isize_set(in, pos + (uint64_t)r);
	chell_lock_release(&in->lock);
	DSTAT(extends, 1);
	return r;
}

/* A write at pos of `total` bytes, the range claimed on the offset. */
static ssize_t write_at(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t total)
{
	struct mapped_local *l = L(c);
	struct mapped_inode *in = l->inode;
	ssize_t r;
	uint64_t end = pos + (uint64_t)total;
	if (end > isize(in) && lazy(l)) {
		/* Lazy sizes: grow the kernel's size by a step when needed,
		 * copy, and keep the exact size in the shared entry. */
		chell_lock_acquire(&in->lock);
		if (pos > isize(in)) /* a hole before pos, for every process */
			atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
		r = lazy_write(c, iov, cnt, pos, total);
		chell_lock_release(&in->lock);
		if (r > 0)
			mapped_write_done(&in->times, c->fd);
	} else if (end > isize(in) && l->map->map_sync != 2) {
		r = direct_grow_write(in, c->fd, iov, cnt, pos, mapped_at_pos_flags(c));
	} else {
		int e = 0;
		if (end > isize(in)) {
			chell_lock_acquire(&in->lock);
			e = extend(c, in, pos, end);
			chell_lock_release(&in->lock);
		}
		r = e < 0 ? e : transfer(c, iov, cnt, pos, total, 1);
		if (r > 0)
			mapped_write_done(&in->times, c->fd);
	}
	return r;
}

static struct mapped_ops direct_mapped = {
	.stats = MAPPED_STATS_DIRECT,
	.fast = &direct_fast_ops,
	.file_get = map_get,
	.file_put = map_put,
	.transfer = transfer,
	.kernel_flags = RWF_NOWAIT | RWF_ATOMIC,
	.kernel_io = kernel_io,
	.append = append,
	.write_at = write_at,
	.tier_ops = true, /* every byte moves to or from the file itself */
};

/* ------------------------------------------------------- offset and size */

static int direct_ftruncate(chell_ctx *c, off_t len)
{
	if (!D(c)->active)
		return chell_down_ftruncate(c, len);
	struct mapped_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock);
	uint64_t before = isize(in);
	int r = chell_down_ftruncate(c, len);
	if (r == 0) {
		atomic_store((_Atomic uint64_t *)&in->ksize, 0); /* the kernel's size is exact */
		isize_set(in, (uint64_t)len);
		if ((uint64_t)len > before)
			made_holes(L(c)); /* growing by truncate leaves a hole */
	}
	chell_lock_release(&in->lock);
	return r;
}

static int direct_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	if (!D(c)->active)
		return chell_down_fallocate(c, mode, off, len);
	struct mapped_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock);
	mapped_lazy_publish_locked(L(c), c->fd, NULL); /* it extends from, and reports against, the exact size */
	int r = chell_down_fallocate(c, mode, off, len);
	if (r == 0) {
		mapped_inode_refresh(in, c->fd);
		/* Every mode leaves pages the kernel reports as holes: punched ones,
		 * and on tmpfs also allocated-but-unwritten ones, which a mapped
		 * fault (even a read) would turn into data. */
		made_holes(L(c));
	}
	chell_lock_release(&in->lock);
	return r;
}

/* truncate(path) from any process of the tree keeps the shared size exact */
static int direct_truncate(chell_ctx *c, const char *path, off_t len)
{
	int r = chell_down_truncate(c, path, len);
	if (r == 0)
		mapped_size_changed_by_path(path);
	return r;
}

static int direct_fsync(chell_ctx *c, int datasync)
{
	DSTAT(fsyncs, 1);
	if (mapped_active(c)) {
		int e = mapped_lazy_publish(L(c), c->fd, NULL); /* the size is durable too */
		if (e < 0)
			return e;
	}
	if (D(c)->active && L(c)->map->map_sync == 2) {
		/* MAP_SYNC on DAX: every write already wrote back its cache lines
		 * (clwb or non-temporal stores); the fence makes them durable, and
		 * the file system keeps metadata of mapped pages in sync. */
		mapped_fence(L(c)->map->persist);
		return 0;
	}
	return chell_down_fsync(c, datasync);
}

static int direct_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	if (mapped_takes_lease(cmd, arg) && L(c)) {
		if (D(c)->active)
			mapped_lazy_publish(L(c), c->fd, NULL); /* before its descriptor goes */
		direct_map_retire(D(c)->dev, D(c)->ino);
	}
	/* O_APPEND on or off moves the offset between us and the kernel
	 * (kernel_offset): on, the kernel gets ours first; off, we take the
	 * kernel's after. */
	bool app_was = mapped_kernel_offset(c), app_now = direct_kernel_offset((int)arg);
	bool flip = cmd == F_SETFL && D(c)->active && app_was != app_now;
	if (flip && app_now)
		chell_offset_to_kernel(c->f->ofd, c->fd);
	int r = chell_down_fcntl(c, cmd, arg);
	if (flip && r >= 0 && !app_now)
		chell_offset_from_kernel(c->f->ofd, c->fd);
	if (cmd == F_SETFL && r >= 0 && D(c)->active && (arg & O_DIRECT))
		go_kernel(c); /* the application asks for the kernel's I/O path */
	return r;
}


/* ------------------------------------------------------------ zero-copy */

/* get_read_buf on a direct file: a pointer into the mapping, up to the end
 * of the chunk, offset advanced like read(). */
static ssize_t direct_get_read_buf(chell_ctx *c, const void **buf, size_t count)
{
	if (!mapped_active(c))
		return chell_down_get_read_buf(c, buf, count);
	int fd = c->fd;
	if ((status(c) & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	if (mapped_kernel_offset(c))
		return CHELL_FAST_MISS; /* the offset is the kernel's: the library reads */
	if (count > (size_t)MAPPED_MAX_RW_COUNT)
		count = MAPPED_MAX_RW_COUNT;
	struct mapped_local *l = L(c);
	uint64_t pos;
	size_t n = mapped_read_claim(c, count, (size_t)1 << direct_chunk_shift, &pos);
	if (n == 0) {
		*buf = NULL;
		return 0;
	}
	check_hole_gen(l);
	unsigned char *a = addr_of(l->map, fd, pos);
	if (a && (atomic_load(&direct_entry(l->map, pos)->flags) & DIRECT_SPARSE) &&
	    !range_is_data(c, pos, n))
		a = NULL; /* a hole: touching it through the mapping would fill it */
	if (!a) {
		mapped_read_unclaim(c, pos, n);
		return CHELL_FAST_MISS; /* the library copies through read() instead */
	}
	DSTAT(zero_copy, 1);
	DSTAT(read_bytes, n);
	mapped_tier_fast(l, false, (ssize_t)n); /* the caller reads the tier's bytes */
	*buf = a;
	return (ssize_t)n;
}

const struct chell_handler chell_direct_handler = {
	MAPPED_HANDLER(direct),
	.stat = mapped_lazy_stat, /* only routed with direct.lazy_size (direct_proc_init) */
	.get_write_buf = direct_get_write_buf,
	.commit_write_buf = direct_commit_write_buf,
};
