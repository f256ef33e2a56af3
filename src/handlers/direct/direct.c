/* SPDX-License-Identifier: MIT */
/*
 * The direct handler's operations.
 *
 * Offsets live in the shared OFD (ofd->offset), so dup'ed descriptors,
 * forked children and exec'ed images share them as the kernel shares its
 * own; the kernel's offset of the descriptor is left behind and brought up
 * to date only when the descriptor may be used outside Chell (before exec).
 * Except on O_APPEND descriptions: their writes are the kernel's (only it
 * makes an append atomic with every appender), which moves its offset, so
 * there the kernel's offset is the one (kernel_offset()), and read(),
 * lseek() and write() at the position go to the kernel. Positional reads
 * and writes use the mapping either way.
 * Sizes come from the shared inode entry (inode.c). Every size change goes
 * to the kernel first (fallocate/ftruncate), so fstat() and other programs
 * always see the true size.
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


static int inode_ready;

static inline struct direct_ofd *D(const chell_ctx *c)
{
	return (struct direct_ofd *)c->f->ofd->priv[c->layer];
}

static inline struct direct_local *L(const chell_ctx *c)
{
	return (struct direct_local *)c->f->local[c->layer];
}

static inline _Atomic uint64_t *OFFSET(const chell_ctx *c)
{
	return (_Atomic uint64_t *)&c->f->ofd->offset;
}

static inline int status(const chell_ctx *c)
{
	return atomic_load_explicit((_Atomic int32_t *)&c->f->ofd->status_flags, memory_order_relaxed);
}

int direct_lazy_size;

/* The kernel keeps the offset of an O_APPEND description (see the top),
 * except with direct.lazy_size, where appends are copies too. */
static inline bool kernel_offset(int st)
{
	return (st & O_APPEND) && !direct_lazy_size;
}

static inline uint64_t isize(struct direct_inode *in)
{
	return atomic_load_explicit((_Atomic uint64_t *)&in->size, memory_order_acquire);
}

static inline void isize_set(struct direct_inode *in, uint64_t v)
{
	atomic_store_explicit((_Atomic uint64_t *)&in->size, v, memory_order_release);
}

/*
 * direct.lazy_size. A write past the end must find the kernel's size past
 * its bytes (a store beyond it faults), and publishing each new size is a
 * system call as costly as the kernel's own write. So the file is grown in
 * steps (ftruncate: holes, no memory) of a chunk or an eighth of its size,
 * the shared entry keeps the exact size (`size`) and the step (`ksize`),
 * and the exact size goes to the kernel only when someone outside Chell's
 * bookkeeping could look (lazy_publish callers: fsync, close, exit, exec,
 * a descriptor leaving Chell, a lock or copy the kernel evaluates, and the
 * calls that ask it about holes or allocate). Caller holds in->lock.
 */
static int lazy_publish_locked(struct direct_local *l, int fd, const char *path);

static int lazy_reserve(struct direct_local *l, int fd, uint64_t end)
{
	struct direct_inode *in = l->inode;
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (atomic_load((_Atomic uint32_t *)&in->nolazy)) {
		lazy_publish_locked(l, fd, NULL);
		return -EOPNOTSUPP;
	}
	if (end <= k)
		return 0;
	uint64_t step = 1ull << direct_chunk_shift;
	while (step < end / 8 && step < (1ull << 30))
		step <<= 1;
	uint64_t target = (end + step - 1) & ~(step - 1);
	uint64_t lim = mapped_fsize(); /* a step past RLIMIT_FSIZE would be SIGXFSZ */
	if (target > lim)
		target = lim > end ? lim : end;
	if (end > ((uint64_t)1 << 40) || target < end)
		return -EOPNOTSUPP; /* the exact path instead (the kernel's limits apply) */
	if (!k) {
		/* Nothing outstanding: the kernel's size should be ours. If a
		 * process outside grew the file, start from its size. */
		struct stat st;
		if (sys_fstat(fd, &st) == 0 && (uint64_t)st.st_size > isize(in))
			isize_set(in, (uint64_t)st.st_size);
		if (isize(in) >= target)
			return 0;
	}
	/* Set first: a refresh meanwhile keeps to the size as we have it. */
	atomic_store((_Atomic uint64_t *)&in->ksize, target);
	int r = sys_ftruncate(fd, (off_t)target); /* fd: a writer's */
	if (r < 0) {
		atomic_store((_Atomic uint64_t *)&in->ksize, k);
		return r;
	}
	DSTAT(extends, 1);
	return 0;
}

/* fd itself if it is open for writing, else a short-lived writable reopen
 * of its file (*opened: the caller closes it), or -1. */
static int writable_fd(int fd, int *opened)
{
	*opened = 0;
	int fl = sys_fcntl(fd, F_GETFL, 0);
	if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY)
		return fd;
	char p[CHELL_FD_PATH_MAX];
	chell_fd_path(p, fd);
	int w = chell_internal_openat(AT_FDCWD, p, O_WRONLY | O_CLOEXEC, 0);
	*opened = w >= 0;
	return w;
}

/* direct_inode_kernel_user through a descriptor that can publish. */
static void kernel_user(uint64_t dev, uint64_t ino, int fd)
{
	int opened, w = writable_fd(fd, &opened);
	direct_inode_kernel_user(dev, ino, w >= 0 ? w : fd);
	if (opened)
		sys_close(w);
}

/* A writable descriptor on the file for ftruncate: the application's fd
 * if it is writable (ftruncate changes neither its offset nor its locks),
 * else a short-lived reopen (through fd, or by the path it was opened with
 * when fd is already gone; checked to be the same file), which the caller
 * closes (*opened). -1 if there is none. */
static int pub_fd(struct direct_local *l, int fd, const char *path, int *opened)
{
	*opened = 0;
	if (fd >= 0) {
		int fl = sys_fcntl(fd, F_GETFL, 0);
		if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY)
			return fd;
	}
	char p[CHELL_FD_PATH_MAX];
	if (fd >= 0) {
		chell_fd_path(p, fd);
		path = p;
	}
	if (!path)
		return -1;
	int w = chell_internal_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0);
	struct stat st;
	if (w >= 0 && (sys_fstat(w, &st) < 0 || (uint64_t)st.st_dev != l->map->dev ||
		       (uint64_t)st.st_ino != l->map->ino)) {
		sys_close(w); /* renamed meanwhile and the name reused: not our file */
		w = -1;
	}
	*opened = w >= 0;
	return w;
}

/* The exact size to the kernel, if a step is outstanding. Caller holds
 * in->lock. A size someone else gave the file meanwhile (not our step) is
 * left alone. fd: the application's descriptor, or -1 (closing, exit). */
static int lazy_publish_locked(struct direct_local *l, int fd, const char *path)
{
	struct direct_inode *in = l->inode;
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (!k)
		return 0;
	int opened;
	int pfd = pub_fd(l, fd, path, &opened);
	if (pfd < 0)
		return 0; /* not writable by us: the step's owner publishes at its close or exit */
	struct stat st;
	int r = 0;
	if (sys_fstat(pfd, &st) == 0 && (uint64_t)st.st_size == k)
		r = sys_ftruncate(pfd, (off_t)isize(in));
	if (r == 0)
		atomic_store((_Atomic uint64_t *)&in->ksize, 0);
	if (opened)
		sys_close(pfd);
	return r;
}

static int lazy_publish(struct direct_local *l, int fd, const char *path)
{
	if (!atomic_load_explicit((_Atomic uint64_t *)&l->inode->ksize, memory_order_relaxed))
		return 0;
	chell_lock_acquire(&l->inode->lock);
	int r = lazy_publish_locked(l, fd, path);
	chell_lock_release(&l->inode->lock);
	return r;
}


static uint64_t parse_size(const char *s, uint64_t def)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s)
		return def;
	switch (*end) {
	case 'k': case 'K': v <<= 10; break;
	case 'm': case 'M': v <<= 20; break;
	case 'g': case 'G': v <<= 30; break;
	default: break;
	}
	return v;
}

static int direct_proc_init(void)
{
	uint64_t chunk = parse_size(chell_setting("direct.chunk_size"), 2u << 20);
	if (chunk < 4096 || (chunk & (chunk - 1)) || chunk > (1ull << 30)) {
		chell_log("direct.chunk_size must be a power of two between 4K and 1G");
		return -1;
	}
	direct_chunk_shift = (unsigned)__builtin_ctzll(chunk);
	const char *pop = chell_setting("direct.populate");
	direct_populate = !(pop[0] == '0' || pop[0] == 'f' || pop[0] == 'n' || !strcmp(pop, "off"));
	const char *ms = chell_setting("direct.map_sync");
	direct_map_sync_mode = !strcmp(ms, "off") ? 0 : !strcmp(ms, "on") ? 2 : 1;
	direct_nt_threshold = parse_size(chell_setting("direct.nt_threshold"), 256 * 1024);
	const char *lazy = chell_setting("direct.lazy_size");
	direct_lazy_size = lazy[0] == '1' || lazy[0] == 'y' || lazy[0] == 't' || !strcmp(lazy, "on");
	if (!direct_lazy_size && chell_mode_stack) {
		/* Our stat() only matters for lazy sizes; without them, routing
		 * every stat(path) through the stack would cost ~60 ns for
		 * nothing. Routed only if another layer above the kernel wants it
		 * (the hub set the flag from every layer's .stat). */
		bool others = false;
		for (int i = 0; i < chell_mode_stack->depth; i++) {
			const struct chell_handler *h = chell_mode_stack->handlers[i];
			if (h != &chell_direct_handler && h != &chell_posix_handler && h->stat)
				others = true;
		}
		chell_stack_routes_stat = others;
	}
	return direct_copy_init();
}

/* At exit the kernel closes the descriptors without us: publish the lazy
 * sizes through them first. */
static void publish_all(void)
{
	for (int fd = 0; fd < fdt_max(); fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (!f || f == FILE_CLOSING)
			continue;
		for (int i = 0; i < f->stack->depth; i++) {
			if (f->stack->handlers[i] != &chell_direct_handler)
				continue;
			struct direct_local *l = (struct direct_local *)f->local[i];
			if (l && ((struct direct_ofd *)f->ofd->priv[i])->active)
				lazy_publish(l, fd, NULL);
			break;
		}
	}
}

static void direct_proc_event(enum chell_op ev, long arg)
{
	if (ev == CHELL_OP_FORK) {
		direct_map_after_fork();
	} else if (ev == CHELL_OP_EXIT) {
		if (direct_lazy_size)
			publish_all();
		direct_stats_dump();
	} else if (ev == CHELL_OP_EXEC && direct_lazy_size) {
		publish_all(); /* the new image may not run Chell */
	}
}

/* ------------------------------------------------------------- lifecycle */

static int direct_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	return chell_down_open(c, dirfd, path, flags, mode);
}

/* Set up process-local state; 0 if the file can be served from a mapping. */
static int attach(chell_ctx *c, int count_open)
{
	struct direct_ofd *d = D(c);
	if (!inode_ready) {
		if (direct_inode_init() < 0)
			return -1;
		inode_ready = 1;
	}
	struct stat st;
	if (sys_fstat(c->fd, &st) < 0)
		return -1;
	int acc = status(c) & O_ACCMODE;
	int err = 0;
	struct direct_map *m = direct_map_get(c->fd, st.st_dev, st.st_ino, acc != O_RDONLY, &err);
	if (!m)
		return -1;
	if (err) { /* writable descriptor, but we cannot map the file writable */
		direct_map_put(m);
		return -1;
	}
	struct direct_inode *in = direct_inode_get(st.st_dev, st.st_ino, (uint64_t)st.st_size);
	if (!in) {
		direct_map_put(m);
		return -1;
	}
	if (!count_open)
		direct_inode_put(in); /* adoption: the OFD is already counted */
	if (count_open) {
		/* The kernel's size is exact (O_TRUNC too), unless it is a lazy
		 * step of the tree's (then ours is). */
		chell_lock_acquire(&in->lock);
		uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
		/* asked again under the lock: lazy size changes are made under it,
		 * and one made since the first fstat would be undone */
		if (direct_lazy_size)
			sys_fstat(c->fd, &st);
		if (!k || (uint64_t)st.st_size != k) {
			atomic_store((_Atomic uint64_t *)&in->ksize, 0);
			isize_set(in, (uint64_t)st.st_size);
		}
		chell_lock_release(&in->lock);
	}
	struct direct_local *l = calloc(1, sizeof(*l));
	if (!l) {
		if (count_open)
			direct_inode_put(in);
		direct_map_put(m);
		return -1;
	}
	l->map = m;
	l->inode = in;
	c->f->local[c->layer] = l;
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	return 0;
}

/* The kernel changed the size behind the cached one (O_TRUNC on a
 * descriptor we don't serve, truncate by path): tell the shared entry. */
static void size_changed_by_kernel(int fd)
{
	struct stat st;
	if (inode_ready && sys_fstat(fd, &st) == 0)
		direct_inode_set_size(st.st_dev, st.st_ino, (uint64_t)st.st_size);
}

static void direct_opened(chell_ctx *c)
{
	struct direct_ofd *d = D(c);
	d->active = 0;
	if (status(c) & O_DIRECT) {
		struct stat st; /* lazy sizes: the kernel's must be exact from now on */
		if (direct_lazy_size && inode_ready && sys_fstat(c->fd, &st) == 0)
			kernel_user(st.st_dev, st.st_ino, c->fd);
		size_changed_by_kernel(c->fd); /* it may have been opened with O_TRUNC */
		return; /* the application wants the kernel's I/O path */
	}
	if (attach(c, 1) == 0) {
		d->active = 1;
		if (c->layer == 0) /* nothing above us to bypass */
			c->f->fast = &direct_fast_ops;
	} else {
		DSTAT(kernel_fallbacks, 1);
		struct stat st; /* its writes are the kernel's: lazy sizes must be exact */
		if (direct_lazy_size && inode_ready && sys_fstat(c->fd, &st) == 0)
			kernel_user(st.st_dev, st.st_ino, c->fd);
	}
}

static int direct_adopt(chell_ctx *c)
{
	struct direct_ofd *d = D(c);
	if (d->active && attach(c, 0) < 0) {
		/* cannot map it in this image: give the offset back to the kernel */
		if (!kernel_offset(status(c)))
			sys_lseek(c->fd, (off_t)atomic_load(OFFSET(c)), SEEK_SET);
		d->active = 0;
		if (direct_lazy_size && inode_ready)
			kernel_user(d->dev, d->ino, c->fd);
	}
	if (d->active && c->layer == 0)
		c->f->fast = &direct_fast_ops;
	return 0;
}

static void direct_detach(chell_ctx *c)
{
	struct direct_local *l = L(c);
	if (l) {
		if (direct_lazy_size)
			lazy_publish(l, -1, c->f->path); /* its descriptor is gone already */
		direct_map_put(l->map);
		free(l);
		c->f->local[c->layer] = NULL;
	}
}

static void direct_release(chell_ctx *c)
{
	struct direct_ofd *d = D(c);
	/* Attached once (dev/ino set), the inode entry counts this OFD, even
	 * if it moved to the kernel path since (O_DIRECT, escape). */
	if ((d->dev | d->ino) && inode_ready) {
		/* The inode entry is found again by identity: the local state of
		 * the releasing process may already be gone. */
		struct direct_inode *in = direct_inode_get(d->dev, d->ino, 0);
		if (in) {
			direct_inode_put(in); /* the lookup's own count */
			direct_inode_put(in); /* this OFD's */
		}
	}
	d->active = 0;
}

/* Before the kernel evaluates the descriptor's offset (exec, SEEK_CUR
 * locks), the kernel's offset must be ours. */
static int direct_sync_out(chell_ctx *c)
{
	if (!D(c)->active)
		return 0;
	if (L(c)) {
		lazy_publish(L(c), c->fd, NULL); /* the kernel (or a program without Chell) looks */
		mapped_times_flush(&L(c)->inode->times, c->fd, status(c), isize(L(c)->inode));
	}
	return kernel_offset(status(c)) ? 0 : chell_offset_to_kernel(c->f->ofd, c->fd);
}

/* The kernel moved its offset (a call Chell let it do): it is ours now. */
static int direct_sync_in(chell_ctx *c)
{
	return D(c)->active ? chell_offset_from_kernel(c->f->ofd, c->fd) : 0;
}

/* From now on this descriptor uses the kernel path, in every process
 * (they see active == 0 and miss): the application asked for O_DIRECT, or
 * the descriptor escaped to a process Chell does not serve, which moves the
 * kernel's offset behind our back. */
static void go_kernel(chell_ctx *c)
{
	if (D(c)->active && L(c) && direct_lazy_size)
		kernel_user(D(c)->dev, D(c)->ino, c->fd);
	if (kernel_offset(status(c)) ? !atomic_exchange((_Atomic uint32_t *)&D(c)->active, 0)
				     : !chell_offset_go_kernel(&D(c)->active, c->f->ofd, c->fd))
		return;
	if (c->layer == 0)
		c->f->fast = NULL;
	DSTAT(kernel_fallbacks, 1);
}

static void direct_escape(chell_ctx *c)
{
	go_kernel(c);
}

/* A stat of a file the tree grows lazily, made under in->lock: the
 * kernel's size is our step, not the file's: show ours. */
static void lazy_stat_fix(struct direct_inode *in, int r, struct stat *st)
{
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (r == 0 && k && (uint64_t)st->st_size == k)
		st->st_size = (off_t)isize(in);
}

/* Times owed to the kernel are settled before anyone may look at them
 * through this descriptor, and before it goes away. */
static int direct_fstat(chell_ctx *c, struct stat *st)
{
	if (D(c)->active && L(c))
		mapped_times_flush(&L(c)->inode->times, c->fd, status(c), isize(L(c)->inode));
	if (!direct_lazy_size || !D(c)->active || !L(c))
		return chell_down_fstat(c, st);
	struct direct_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock); /* no step is taken or published meanwhile */
	int r = chell_down_fstat(c, st);
	lazy_stat_fix(in, r, st);
	chell_lock_release(&in->lock);
	return r;
}

/* stat(path) from inside the tree sees a lazy size as fstat does: asked
 * again under the file's lock if the tree has it open. */
static int direct_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags)
{
	int r = chell_down_stat(c, dirfd, path, st, at_flags);
	struct direct_inode *in = r == 0 && direct_lazy_size && S_ISREG(st->st_mode) && inode_ready
					  ? direct_inode_find(st->st_dev, st->st_ino)
					  : NULL;
	if (in) {
		uint64_t dev = st->st_dev, ino = st->st_ino;
		chell_lock_acquire(&in->lock);
		if (in->dev == dev && in->ino == ino) { /* still that file's entry */
			r = chell_down_stat(c, dirfd, path, st, at_flags);
			if (r == 0 && (uint64_t)st->st_dev == dev && (uint64_t)st->st_ino == ino)
				lazy_stat_fix(in, r, st);
		}
		chell_lock_release(&in->lock);
	}
	return r;
}

static int direct_close(chell_ctx *c)
{
	if (D(c)->active && L(c)) {
		lazy_publish(L(c), c->fd, NULL);
		mapped_times_flush(&L(c)->inode->times, c->fd, status(c), isize(L(c)->inode));
	}
	return chell_down_close(c);
}

/* --------------------------------------------------------------- helpers */

/*
 * preadv2/pwritev2 flags (mapped.h: the kernel is asked once per file and
 * combination). Kernel order: the flags are looked at after the access
 * mode, the iovecs and a zero length, so callers check them last.
 */
static int check_flags(chell_ctx *c, int flags, bool write)
{
	return mapped_rwf_check(&L(c)->rwf, c->fd, status(c), flags, write);
}

/* Flags the mapped copy cannot honour itself: RWF_NOWAIT (a copy may fault
 * a page in, mapping a chunk may wait) and RWF_ATOMIC (no torn writes).
 * Where the kernel accepts them, the kernel moves the bytes at `pos`: the
 * page cache (or DAX memory) it uses is the mapping, so every reader sees
 * them, and its answer (EAGAIN, EINVAL for a bad atomic size) is exact. */
static inline bool kernel_flags(int flags)
{
	return flags & (RWF_NOWAIT | RWF_ATOMIC);
}

/* O_APPEND on the descriptor makes the kernel's pwrite append: a write that
 * must land at `pos` (RWF_NOAPPEND, or a piece of a mapped write) says so. */
static inline int at_pos_flags(chell_ctx *c)
{
	return (status(c) & O_APPEND) ? RWF_NOAPPEND : 0;
}

static bool positional(enum chell_op op)
{
	return op == CHELL_OP_PREAD || op == CHELL_OP_PREADV || op == CHELL_OP_PWRITE ||
	       op == CHELL_OP_PWRITEV;
}

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
static inline void check_hole_gen(struct direct_local *l)
{
	uint32_t g = atomic_load_explicit((_Atomic uint32_t *)&l->inode->hole_gen, memory_order_acquire);
	if (unlikely(g != l->map->hole_gen)) {
		direct_map_mark_all_sparse(l->map);
		l->map->hole_gen = g;
	}
}

static void made_holes(struct direct_local *l)
{
	atomic_fetch_add((_Atomic uint32_t *)&l->inode->hole_gen, 1);
	check_hole_gen(l);
}

/* May a read of [p, p+len) in a possibly sparse chunk use the mapping?
 * Only if the kernel sees data all the way (so no fault allocates a page). */
static bool range_is_data(chell_ctx *c, uint64_t p, size_t len)
{
	if (kernel_offset(status(c)))
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
	size_t done = 0, chunk = (size_t)1 << direct_chunk_shift;
	bool nt = to_file && m->map_sync == 2 && n >= direct_nt_threshold;
	for (int i = 0; i < cnt && done < n; i++) {
		size_t vlen = iov[i].iov_len < n - done ? iov[i].iov_len : n - done, vdone = 0;
		while (vdone < vlen) {
			uint64_t p = pos + done;
			size_t piece = chunk - (size_t)(p & (chunk - 1));
			if (piece > vlen - vdone)
				piece = vlen - vdone;
			unsigned char *a = addr_of(m, c->fd, p);
			unsigned char *u = (unsigned char *)iov[i].iov_base + vdone;
			int fault = 0;
			size_t got = 0;
			if (a && !to_file && ((uintptr_t)direct_entry(m, p) & DIRECT_SPARSE) &&
			    !range_is_data(c, p, piece))
				a = NULL; /* holes in range: the kernel reads them without filling */
			if (a && (!to_file || m->writable))
				got = to_file ? (nt ? direct_copy_nt(a, u, piece, &fault)
						    : direct_copy(a, u, piece, &fault))
					      : direct_copy(u, a, piece, &fault);
			if (got && to_file && m->map_sync == 2 && !nt)
				direct_flush(a, got); /* persistent on the next fence (fsync) */
			done += got;
			vdone += got;
			if (got == piece)
				continue;
			/* The mapping could not serve it: a page truncated away, a bad
			 * user buffer, no mapping. The kernel does the rest and has
			 * the last word. */
			if (fault)
				DSTAT(faults, 1);
			DSTAT(kernel_fallbacks, 1);
			if (to_file) /* the kernel may write past a shrunken end: a hole */
				atomic_fetch_add((_Atomic uint32_t *)&L(c)->inode->hole_gen, 1);
			struct iovec rest = {u + got, piece - got};
			ssize_t k = to_file ? sys_pwritev2(c->fd, &rest, 1, (off_t)(p + got), at_pos_flags(c))
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
	return cnt == 1 && !at_pos_flags(c) ? sys_pwrite(c->fd, iov[0].iov_base, n, (off_t)pos)
					    : sys_pwritev2(c->fd, iov, cnt, (off_t)pos, at_pos_flags(c));
}

/* Growing the file needs a system call anyway: let it be the write itself
 * (one call, as without Chell) rather than an extension plus a copy. The
 * page cache it fills is what we map. (On DAX the extension path keeps our
 * flush policy.) The kernel cuts at RLIMIT_FSIZE itself. */
ssize_t direct_grow_write(struct direct_inode *in, int fd, const struct iovec *iov, int cnt,
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

/* Make the file at least `end` bytes long, through the kernel. Caller holds
 * the inode lock. fallocate never shrinks (another process may have grown
 * the file meanwhile) and keeps holes before `pos` as a write would. */
static int extend(chell_ctx *c, struct direct_inode *in, uint64_t pos, uint64_t end)
{
	if (end <= isize(in))
		return 0;
	if (pos > isize(in)) /* writing past the end leaves a hole before pos */
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	int r = (int)CHELL_SC(SYS_fallocate, c->fd, 0, pos, end - pos, 0, 0);
	if (r == -EOPNOTSUPP || r == -ENOSYS) {
		uint64_t now = direct_inode_refresh(in, c->fd);
		r = end > now ? sys_ftruncate(c->fd, (off_t)end) : 0;
	}
	if (r < 0)
		return r;
	DSTAT(extends, 1);
	if (end > isize(in))
		isize_set(in, end);
	return 0;
}

/* The kernel moves the bytes (kernel_flags): at `off`, or at the shared
 * offset, which then advances by what it moved. */
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
	struct direct_inode *in = L(c)->inode;
	_Atomic uint64_t *offp = OFFSET(c);
	uint64_t pos = off >= 0 ? (uint64_t)off : atomic_load(offp);
	DSTAT(kernel_fallbacks, 1);
	if (off < 0) /* reserve the range, as a mapped write would */
		while (!atomic_compare_exchange_weak(offp, &pos, pos + (uint64_t)total))
			;
	if (pos + (uint64_t)total > isize(in)) /* it may leave a hole before pos */
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	ssize_t r = sys_pwritev2(c->fd, iov, cnt, (off_t)pos, flags | at_pos_flags(c));
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

/* ------------------------------------------------------------------ read */

static ssize_t direct_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (!D(c)->active || (off == -1 && kernel_offset(status(c))))
		return chell_down_read(c, iov, cnt, off, flags);
	bool pos_call = positional(c->op);
	if ((pos_call && off < 0) || (!pos_call && off < -1))
		return -EINVAL;
	if ((status(c) & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	ssize_t total = mapped_iov_total(iov, cnt);
	struct direct_inode *in = L(c)->inode;
	if (total <= 0) {
		/* read()/pread() of 0 bytes reach the file system, which may
		 * touch atime (tmpfs does, ext4 does not); the vector forms
		 * stop before it. The kernel's own 0-byte read answers. */
		if (total == 0 && (c->op == CHELL_OP_READ || c->op == CHELL_OP_PREAD))
			sys_pread(c->fd, iov[0].iov_base, 0, 0);
		return total;
	}
	if (unlikely(mapped_verify_area(off >= 0 ? (uint64_t)off : atomic_load(OFFSET(c)),
					mapped_rw_count(c, iov, total)) < 0))
		return -EINVAL; /* rw_verify_area, before the flags */
	if (flags) {
		int e = check_flags(c, flags, false);
		if (e < 0)
			return e;
		if (kernel_flags(flags))
			return kernel_read(c, iov, cnt, off, flags);
	}
	check_hole_gen(L(c));
	DSTAT(reads, 1);
	if (off >= 0) {
		uint64_t size = isize(in);
		if ((uint64_t)off + (uint64_t)total > size) /* at the cached end: ask the kernel */
			size = direct_inode_refresh(in, c->fd);
		ssize_t r = 0;
		if ((uint64_t)off < size) {
			size_t n = (size_t)total < size - (uint64_t)off ? (size_t)total
									: (size_t)(size - (uint64_t)off);
			r = transfer(c, iov, cnt, (uint64_t)off, n, 0);
		}
		if (r > 0)
			DSTAT(read_bytes, (uint64_t)r);
		if (r >= 0)
			mapped_read_done(&in->times, c->fd, status(c), size);
		return r;
	}
	/* At the shared offset: reserve [pos, pos+n) atomically, so concurrent
	 * readers of one description get disjoint ranges, as with the kernel. */
	_Atomic uint64_t *offp = OFFSET(c);
	uint64_t pos = atomic_load(offp), size = isize(in);
	size_t n;
	bool refreshed = false;
	for (;;) {
		if (pos + (uint64_t)total > size && !refreshed) {
			size = direct_inode_refresh(in, c->fd);
			refreshed = true;
		}
		n = pos >= size ? 0 : ((size_t)total < size - pos ? (size_t)total : (size_t)(size - pos));
		if (atomic_compare_exchange_weak(offp, &pos, pos + n))
			break;
	}
	ssize_t r = n ? transfer(c, iov, cnt, pos, n, 0) : 0;
	if (r != (ssize_t)n) { /* short: give back what was not read */
		uint64_t expect = pos + n;
		atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
	}
	if (r > 0)
		DSTAT(read_bytes, (uint64_t)r);
	if (r >= 0)
		mapped_read_done(&in->times, c->fd, status(c), size);
	return r;
}

/* ----------------------------------------------------------------- write */

static ssize_t direct_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	/* At the position of an O_APPEND description: an append (or, with
	 * RWF_NOAPPEND, a write at the kernel's offset), all the kernel's. One
	 * system call, as without Chell: the page cache it writes is the
	 * memory we map, so mapped readers see the bytes at once, and they ask
	 * the kernel for the new size when they reach the cached one. */
	if (!D(c)->active)
		return chell_down_write(c, iov, cnt, off, flags);
	if (off == -1 && kernel_offset(status(c))) { /* as fast_write */
		DSTAT(writes, 1);
		DSTAT(kernel_fallbacks, 1);
		ssize_t r = chell_down_write(c, iov, cnt, off, flags);
		if (r > 0)
			DSTAT(write_bytes, (uint64_t)r);
		return r;
	}
	bool pos_call = positional(c->op);
	if ((pos_call && off < 0) || (!pos_call && off < -1))
		return -EINVAL;
	int st = status(c);
	if ((st & O_ACCMODE) == O_RDONLY)
		return -EBADF;
	ssize_t total = mapped_iov_total(iov, cnt);
	if (total <= 0)
		return total;
	if (mapped_verify_area(off >= 0 ? (uint64_t)off : atomic_load(OFFSET(c)),
			       mapped_rw_count(c, iov, total)) < 0)
		return -EINVAL; /* rw_verify_area, before the flags */
	if (flags) {
		int e = check_flags(c, flags, true);
		if (e < 0)
			return e;
	}
	struct direct_local *l = L(c);
	struct direct_inode *in = l->inode;
	if (!l->map->writable)
		return chell_down_write(c, iov, cnt, off, flags); /* cannot happen: opened() checks */
	DSTAT(writes, 1);
	_Atomic uint64_t *offp = OFFSET(c);
	bool append = ((st & O_APPEND) && !(flags & RWF_NOAPPEND)) || (flags & RWF_APPEND);
	ssize_t r;
	if (!append && kernel_flags(flags)) {
		r = kernel_write(c, iov, cnt, off, total, flags);
	} else if (append && direct_lazy_size && l->map->map_sync != 2 &&
		   !atomic_load((_Atomic uint32_t *)&in->nolazy)) {
		/* Lazy sizes: an append is a copy at the end as the tree knows
		 * it, under the tree's lock (atomic for every appender of the
		 * tree; not for programs outside it, see docs/DIRECT.md). */
		chell_lock_acquire(&in->lock);
		uint64_t pos = isize(in);
		ssize_t room = mapped_write_room(pos, (size_t)total);
		if (room < 0) {
			chell_lock_release(&in->lock);
			return mapped_write_refused(room); /* no lock held while a handler runs */
		}
		int e = lazy_reserve(l, c->fd, pos + (uint64_t)room);
		r = e == 0 ? lazy_store(c, iov, cnt, pos, (size_t)room)
		  : e == -EOPNOTSUPP ? sys_pwritev2(c->fd, iov, cnt, (off_t)pos, at_pos_flags(c)) : e;
		if (r > 0 && pos + (uint64_t)r > isize(in))
			isize_set(in, pos + (uint64_t)r);
		chell_lock_release(&in->lock);
		if (r > 0) {
			if (off == -1) /* write(): the offset follows; pwrite(): unchanged */
				atomic_store(offp, pos + (uint64_t)r);
			mapped_write_done(&in->times, c->fd);
		}
	} else if (append) {
		/* Appends go to the kernel: only it can make them atomic with every
		 * other appender, including programs that don't run Chell. The
		 * page cache it writes is the memory we map, so mapped readers see
		 * the bytes at once. (Appends already cost system calls to extend
		 * the file; this is what the paper measures too.) */
		DSTAT(kernel_fallbacks, 1);
		lazy_publish(l, c->fd, NULL); /* the kernel appends at its own size */
		r = chell_down_write(c, iov, cnt, off, flags);
		if (r > 0) {
			if (off == -1) /* RWF_APPEND: the kernel moved the offset, ours follows */
				chell_offset_from_kernel(c->f->ofd, c->fd);
			direct_inode_refresh(in, c->fd);
		}
	} else {
		uint64_t pos = 0;
		total = mapped_write_claim((uint64_t *)offp, off, (size_t)total, &pos);
		if (total < 0)
			return total;
		uint64_t end = pos + (uint64_t)total;
		if (end > isize(in) && direct_lazy_size && l->map->map_sync != 2) {
			/* Lazy sizes: grow the kernel's size by a step when needed,
			 * copy, and keep the exact size in the shared entry. */
			chell_lock_acquire(&in->lock);
			if (pos > isize(in)) /* a hole before pos, for every process */
				atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
			int e = lazy_reserve(l, c->fd, end);
			r = e == 0 ? lazy_store(c, iov, cnt, pos, (size_t)total)
			  : e == -EOPNOTSUPP ? sys_pwritev2(c->fd, iov, cnt, (off_t)pos, at_pos_flags(c)) : e;
			/* Like the kernel's write_end: a write that reached the file
			 * but copied nothing (a bad buffer) still moves the end to
			 * pos (mapped_iov_total refused pointers outside user space). */
			uint64_t new_end = pos + (uint64_t)(r > 0 ? r : 0);
			if ((r > 0 || r == -EFAULT) && new_end > isize(in))
				isize_set(in, new_end);
			chell_lock_release(&in->lock);
			if (r > 0)
				mapped_write_done(&in->times, c->fd);
		} else if (end > isize(in) && l->map->map_sync != 2) {
			r = direct_grow_write(in, c->fd, iov, cnt, pos, at_pos_flags(c));
		} else {
			int e = 0;
			if (end > isize(in)) {
				chell_lock_acquire(&in->lock);
				e = extend(c, in, pos, end);
				chell_lock_release(&in->lock);
			}
			r = e < 0 ? e : transfer(c, iov, cnt, pos, (size_t)total, 1);
			if (r > 0)
				mapped_write_done(&in->times, c->fd);
		}
		if (off < 0 && r != total) {
			uint64_t expect = end;
			atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
		}
	}
	if (r > 0) {
		DSTAT(write_bytes, (uint64_t)r);
		if ((st & (O_SYNC | O_DSYNC)) || (flags & (RWF_SYNC | RWF_DSYNC))) {
			int s = chell_layer(c)->fsync(c, !(st & O_SYNC) && !(flags & RWF_SYNC));
			if (s < 0)
				return s;
		}
	}
	return r;
}

/* ------------------------------------------------------- offset and size */

static off_t direct_lseek(chell_ctx *c, off_t off, int whence)
{
	if (!D(c)->active || kernel_offset(status(c)))
		return chell_down_lseek(c, off, whence);
	_Atomic uint64_t *offp = OFFSET(c);
	switch (whence) {
	case SEEK_SET:
	case SEEK_CUR:
	case SEEK_END:
		return mapped_lseek((uint64_t *)offp, c->fd, off, whence,
				    whence == SEEK_END ? direct_inode_refresh(L(c)->inode, c->fd) : 0);
	case SEEK_DATA:
	case SEEK_HOLE: {
		/* the kernel knows the holes; its answer becomes our offset */
		lazy_publish(L(c), c->fd, NULL); /* the implicit hole at the end is at the size */
		off_t r = sys_lseek(c->fd, off, whence);
		if (r >= 0)
			atomic_store(offp, (uint64_t)r);
		return r;
	}
	default:
		return -EINVAL;
	}
}

static int direct_ftruncate(chell_ctx *c, off_t len)
{
	if (!D(c)->active)
		return chell_down_ftruncate(c, len);
	struct direct_inode *in = L(c)->inode;
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
	struct direct_inode *in = L(c)->inode;
	chell_lock_acquire(&in->lock);
	lazy_publish_locked(L(c), c->fd, NULL); /* it extends from, and reports against, the exact size */
	int r = chell_down_fallocate(c, mode, off, len);
	if (r == 0) {
		direct_inode_refresh(in, c->fd);
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
	struct stat st;
	if (r == 0 && inode_ready && sys_fstatat(AT_FDCWD, path, &st, 0) == 0)
		direct_inode_set_size(st.st_dev, st.st_ino, (uint64_t)st.st_size);
	return r;
}

static int direct_fsync(chell_ctx *c, int datasync)
{
	DSTAT(fsyncs, 1);
	if (D(c)->active) {
		int e = lazy_publish(L(c), c->fd, NULL); /* the size is durable too */
		if (e < 0)
			return e;
	}
	if (D(c)->active && L(c)->map->map_sync == 2) {
		/* MAP_SYNC on DAX: every write already wrote back its cache lines
		 * (clwb or non-temporal stores); the fence makes them durable, and
		 * the file system keeps metadata of mapped pages in sync. */
		direct_fence();
		return 0;
	}
	return chell_down_fsync(c, datasync);
}

static int direct_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	if (mapped_takes_lease(cmd, arg) && L(c)) {
		if (D(c)->active)
			lazy_publish(L(c), c->fd, NULL); /* before its descriptor goes */
		direct_map_retire(D(c)->dev, D(c)->ino);
	}
	/* O_APPEND on or off moves the offset between us and the kernel
	 * (kernel_offset): on, the kernel gets ours first; off, we take the
	 * kernel's after. */
	bool app_was = kernel_offset(status(c)), app_now = (arg & O_APPEND) != 0;
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

const struct chell_handler chell_direct_handler = {
	.name = "direct",
	.summary = "files on tmpfs/DAX mapped in chunks; read/write are memcpy",
	.proc_init = direct_proc_init,
	.proc_event = direct_proc_event,
	.open = direct_open,
	.opened = direct_opened,
	.adopt = direct_adopt,
	.detach = direct_detach,
	.release = direct_release,
	.sync_out = direct_sync_out,
	.sync_in = direct_sync_in,
	.escape = direct_escape,
	.close = direct_close,
	.fstat = direct_fstat,
	.stat = direct_stat,
	.read = direct_read,
	.write = direct_write,
	.lseek = direct_lseek,
	.fsync = direct_fsync,
	.ftruncate = direct_ftruncate,
	.fallocate = direct_fallocate,
	.fcntl = direct_fcntl,
	.truncate = direct_truncate,
};

/* --------------------------------------------------------- for api.c */

struct chell_file *direct_file_get(int fd, int *layer)
{
	struct chell_file *f = file_get_fd(fd);
	if (!f)
		return NULL;
	for (int i = 0; i < f->stack->depth; i++) {
		if (f->stack->handlers[i] == &chell_direct_handler) {
			struct direct_ofd *d = (struct direct_ofd *)f->ofd->priv[i];
			if (d->active && f->local[i]) {
				*layer = i;
				return f;
			}
			break;
		}
	}
	file_put(f);
	return NULL;
}

/* get_read_buf on a direct file: a pointer into the mapping, up to the end
 * of the chunk, offset advanced like read(). */
ssize_t direct_read_ptr(struct chell_file *f, int layer, int fd, const void **buf, size_t count)
{
	chell_ctx cc = {f, fd, layer, CHELL_OP_READ, NULL};
	chell_ctx *c = &cc;
	if ((status(c) & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	if (kernel_offset(status(c)))
		return -ENODATA; /* the offset is the kernel's: the caller reads */
	if (count > (size_t)MAPPED_MAX_RW_COUNT)
		count = MAPPED_MAX_RW_COUNT;
	struct direct_local *l = L(c);
	_Atomic uint64_t *offp = OFFSET(c);
	size_t chunk = (size_t)1 << direct_chunk_shift;
	uint64_t pos = atomic_load(offp), size = isize(l->inode);
	size_t n;
	bool refreshed = false;
	for (;;) {
		if (pos + count > size && !refreshed) {
			size = direct_inode_refresh(l->inode, fd);
			refreshed = true;
		}
		n = pos >= size ? 0 : (count < size - pos ? count : (size_t)(size - pos));
		size_t to_chunk_end = chunk - (size_t)(pos & (chunk - 1));
		if (n > to_chunk_end)
			n = to_chunk_end;
		if (atomic_compare_exchange_weak(offp, &pos, pos + n))
			break;
	}
	if (n == 0) {
		*buf = NULL;
		return 0;
	}
	check_hole_gen(l);
	unsigned char *a = addr_of(l->map, fd, pos);
	if (a && ((uintptr_t)direct_entry(l->map, pos) & DIRECT_SPARSE) && !range_is_data(c, pos, n))
		a = NULL; /* a hole: touching it through the mapping would fill it */
	if (!a) {
		uint64_t expect = pos + n;
		atomic_compare_exchange_strong(offp, &expect, pos);
		return -ENODATA; /* the caller copies through read() instead */
	}
	DSTAT(zero_copy, 1);
	DSTAT(read_bytes, n);
	*buf = a;
	return (ssize_t)n;
}
