/* SPDX-License-Identifier: MIT */
/*
 * The handler operations every mapped handler shares (base.h). Each takes
 * the handler's policy (struct mapped_ops) for the parts that differ.
 *
 * Sizes come from the shared inode entry (inode.c). Every size change goes
 * to the kernel (fallocate/ftruncate), so fstat() and other programs
 * always see the true size; with lazy sizes (lazy.c) the kernel's may be a
 * step ahead until it is published, and the operations here publish it
 * wherever the kernel or another program could look.
 *
 * A handler may leave the offset of some descriptions to the kernel
 * (mapped_ops.kernel_offset: direct's O_APPEND descriptions, whose writes
 * are the kernel's appends and move its offset): read, write and lseek at
 * the position go to the kernel there, positional calls use the mapping. Whenever the mapping cannot serve a request the
 * kernel does the rest, with the same arguments: the answer is the kernel's
 * by construction.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <sys/uio.h>

#include "short.h"

/* ------------------------------------------------------------- lifecycle */

int mapped_attach(chell_ctx *c, int count_open, const struct mapped_ops *ops)
{
	struct mapped_ofd *d = D(c);
	if (mapped_inode_init() < 0)
		return -1;
	struct stat st;
	if (sys_fstat(c->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	void *file = ops->file_get(c, &st);
	if (!file)
		return -1;
	struct mapped_inode *in = mapped_inode_get(st.st_dev, st.st_ino, (uint64_t)st.st_size);
	if (!in) {
		ops->file_put(file);
		return -1;
	}
	if (!count_open) {
		mapped_inode_put(in); /* adoption: the OFD is already counted */
	} else {
		/* The kernel's size is exact (O_TRUNC too), unless it is a lazy
		 * step of the tree's (then ours is). */
		chell_lock_acquire(&in->lock);
		uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
		/* asked again under the lock: lazy size changes are made under it,
		 * and one made since the first fstat would be undone */
		if (mapped_lazy_sizes)
			sys_fstat(c->fd, &st);
		if (!k || (uint64_t)st.st_size != k) {
			atomic_store((_Atomic uint64_t *)&in->ksize, 0);
			isize_set(in, (uint64_t)st.st_size);
		}
		chell_lock_release(&in->lock);
		d->koff = (uint32_t)ops->kernel_offset;
	}
	struct mapped_local *l = calloc(1, sizeof(*l));
	if (!l) {
		if (count_open)
			mapped_inode_put(in);
		ops->file_put(file);
		return -1;
	}
	l->file = file;
	l->inode = in;
	l->ops = ops;
	l->tier = ops->tier_ops && chell_tier_active && chell_tier_file(c->f, c->fd);
	c->f->local[c->layer] = l;
	d->dev = st.st_dev;
	d->ino = st.st_ino;
	return 0;
}

void mapped_size_changed_by_kernel(int fd)
{
	struct stat st;
	if (mapped_inode_ready() && sys_fstat(fd, &st) == 0)
		mapped_inode_set_size(st.st_dev, st.st_ino, (uint64_t)st.st_size);
}

/* truncate(path) from any process of the tree keeps the shared size exact */
void mapped_size_changed_by_path(const char *path)
{
	struct stat st;
	if (mapped_inode_ready() && sys_fstatat(AT_FDCWD, path, &st, 0) == 0)
		mapped_inode_set_size(st.st_dev, st.st_ino, (uint64_t)st.st_size);
}

int mapped_adopt(chell_ctx *c, const struct mapped_ops *ops)
{
	struct mapped_ofd *d = D(c);
	if (d->active && mapped_attach(c, 0, ops) < 0) {
		/* cannot map it in this image: give the offset back to the kernel */
		if (!mapped_kernel_offset(c))
			sys_lseek(c->fd, (off_t)atomic_load(OFFSET(c)), SEEK_SET);
		d->active = 0;
		mapped_lazy_kernel_user(d->dev, d->ino, c->fd);
	}
	if (d->active && c->layer == 0)
		c->f->fast = ops->fast;
	return 0;
}

void mapped_detach(chell_ctx *c, const struct mapped_ops *ops)
{
	struct mapped_local *l = L(c);
	if (l) {
		if (mapped_lazy_sizes)
			mapped_lazy_publish(l, -1, c->f->path); /* its descriptor is gone already */
		ops->file_put(l->file);
		free(l);
		c->f->local[c->layer] = NULL;
	}
}

void mapped_release(chell_ctx *c)
{
	struct mapped_ofd *d = D(c);
	/* Attached once (dev/ino set), the inode entry counts this OFD, even
	 * if it moved to the kernel path since (O_DIRECT, escape). The entry
	 * is found again by identity: the local state of the releasing
	 * process may already be gone. */
	if ((d->dev | d->ino) && mapped_inode_ready()) {
		struct mapped_inode *in = mapped_inode_get(d->dev, d->ino, 0);
		if (in) {
			mapped_inode_put(in); /* the lookup's own count */
			mapped_inode_put(in); /* this OFD's */
		}
	}
	d->active = 0;
	d->dev = d->ino = 0;
}

/* Before the kernel evaluates the descriptor's offset (exec, SEEK_CUR
 * locks), the kernel's offset must be ours. */
int mapped_sync_out(chell_ctx *c)
{
	if (!D(c)->active)
		return 0;
	if (L(c)) {
		mapped_lazy_publish(L(c), c->fd, NULL); /* the kernel (or a program without Chell) looks */
		mapped_times_flush(&L(c)->inode->times, c->fd, status(c), isize(L(c)->inode));
	}
	return mapped_kernel_offset(c) ? 0 : chell_offset_to_kernel(c->f->ofd, c->fd);
}

/* The kernel moved its offset (a call Chell let it do): it is ours now. */
int mapped_sync_in(chell_ctx *c)
{
	return D(c)->active ? chell_offset_from_kernel(c->f->ofd, c->fd) : 0;
}

/* Times owed to the kernel are settled before anyone may look at them
 * through this descriptor, and before it goes away. */
int mapped_fstat(chell_ctx *c, struct stat *st)
{
	if (!mapped_active(c))
		return chell_down_fstat(c, st);
	struct mapped_inode *in = L(c)->inode;
	mapped_times_flush(&in->times, c->fd, status(c), isize(in));
	if (!mapped_lazy_sizes)
		return chell_down_fstat(c, st);
	chell_lock_acquire(&in->lock); /* no step is taken or published meanwhile */
	int r = chell_down_fstat(c, st);
	mapped_lazy_stat_fix(in, r, st);
	chell_lock_release(&in->lock);
	return r;
}

int mapped_close(chell_ctx *c)
{
	if (mapped_active(c)) {
		mapped_lazy_publish(L(c), c->fd, NULL);
		mapped_times_flush(&L(c)->inode->times, c->fd, status(c), isize(L(c)->inode));
	}
	return chell_down_close(c);
}

/* From now on this descriptor uses the kernel path, in every process
 * (they see active == 0 and miss): the application asked for O_DIRECT, the
 * descriptor escaped to a process Chell does not serve (which moves the
 * kernel's offset behind our back), or the handler cannot serve it. */
void mapped_go_kernel(chell_ctx *c, const struct mapped_ops *ops)
{
	if (D(c)->active && L(c))
		mapped_lazy_kernel_user(D(c)->dev, D(c)->ino, c->fd); /* its writes are the kernel's */
	if (mapped_kernel_offset(c) ? !atomic_exchange((_Atomic uint32_t *)&D(c)->active, 0)
				    : !chell_offset_go_kernel(&D(c)->active, c->f->ofd, c->fd))
		return;
	if (c->layer == 0)
		c->f->fast = NULL;
	MSTAT(ops->stats, kernel_fallbacks, 1);
}

/* ------------------------------------------------------ read and write */

/* What the kernel checks first, in its order: the offset argument, the
 * access mode (`wrong`: O_WRONLY for reads, O_RDONLY for writes), the
 * iovecs. Their total, or -errno. */
static ssize_t checked_total(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int wrong)
{
	bool pos_call = mapped_positional(c->op);
	if ((pos_call && off < 0) || (!pos_call && off < -1))
		return -EINVAL;
	if ((status(c) & O_ACCMODE) == wrong)
		return -EBADF;
	return mapped_iov_total(iov, cnt);
}

/* Then rw_verify_area, then the kernel's verdict on the preadv2/pwritev2
 * flags (mapped.h): 0 or -errno. */
static int checked_flags(chell_ctx *c, const struct iovec *iov, ssize_t total, off_t off, int flags,
			 bool write)
{
	if (unlikely(mapped_verify_area(off >= 0 ? (uint64_t)off : atomic_load(OFFSET(c)),
					mapped_rw_count(c, iov, total)) < 0))
		return -EINVAL;
	return flags ? mapped_rwf_check(&L(c)->rwf, c->fd, status(c), flags, write) : 0;
}

__thread bool mapped_read_by_kernel;

static ssize_t read_op(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (!mapped_active(c) || (off == -1 && mapped_kernel_offset(c)))
		return chell_down_read(c, iov, cnt, off, flags);
	const struct mapped_ops *ops = L(c)->ops;
	ssize_t total = checked_total(c, iov, cnt, off, O_WRONLY);
	struct mapped_inode *in = L(c)->inode;
	if (total <= 0) {
		/* read()/pread() of 0 bytes reach the file system, which may
		 * touch atime (tmpfs does, ext4 does not); the vector forms
		 * stop before it. The kernel's own 0-byte read answers. */
		if (total == 0 && (c->op == CHELL_OP_READ || c->op == CHELL_OP_PREAD))
			sys_pread(c->fd, iov[0].iov_base, 0, 0);
		return total;
	}
	int e = checked_flags(c, iov, total, off, flags, false);
	if (e < 0)
		return e;
	if (flags & ops->kernel_flags)
		return ops->kernel_io(c, iov, cnt, off, total, flags, false);
	MSTAT(ops->stats, reads, 1);
	mapped_mtime_settle(&in->times, c->fd);
	mapped_read_by_kernel = false;
	ssize_t r;
	uint64_t size = isize(in);
	if (off >= 0) {
		if ((uint64_t)off + (uint64_t)total > size) /* at the cached end: ask the kernel */
			size = mapped_inode_refresh(in, c->fd);
		r = 0;
		if ((uint64_t)off < size) {
			size_t n = (size_t)total < size - (uint64_t)off ? (size_t)total
									: (size_t)(size - (uint64_t)off);
			r = ops->transfer(c, iov, cnt, (uint64_t)off, n, 0);
		}
	} else {
		/* At the shared offset: reserve [pos, pos+n) atomically, so
		 * concurrent readers of one description get disjoint ranges, as
		 * with the kernel. */
		_Atomic uint64_t *offp = OFFSET(c);
		uint64_t pos = atomic_load(offp);
		size_t n;
		bool refreshed = false;
		for (;;) {
			if (pos + (uint64_t)total > size && !refreshed) {
				size = mapped_inode_refresh(in, c->fd);
				refreshed = true;
			}
			n = pos >= size ? 0 : ((size_t)total < size - pos ? (size_t)total : (size_t)(size - pos));
			if (atomic_compare_exchange_weak(offp, &pos, pos + n))
				break;
		}
		r = n ? ops->transfer(c, iov, cnt, pos, n, 0) : 0;
		if (r != (ssize_t)n) { /* short: give back what was not read */
			uint64_t expect = pos + n;
			atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
		}
		if (!mapped_active(c)) /* moved to the kernel meanwhile: its offset is the truth now */
			sys_lseek(c->fd, (off_t)atomic_load(offp), SEEK_SET);
	}
	if (r > 0)
		MSTAT(ops->stats, read_bytes, (uint64_t)r);
	if (r >= 0 && mapped_active(c)) {
		if (mapped_read_by_kernel)
			mapped_kernel_read_done(&in->times, status(c));
		else
			mapped_read_done(&in->times, c->fd, status(c), size);
	}
	return r;
}

/* ----------------------------------------------------------------- write */

static ssize_t write_op(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (!mapped_active(c))
		return chell_down_write(c, iov, cnt, off, flags);
	const struct mapped_ops *ops = L(c)->ops;
	int st = status(c);
	if (off == -1 && mapped_kernel_offset(c)) {
		/* At the position of a description whose offset the kernel
		 * keeps: an append (or, with RWF_NOAPPEND, a write at the
		 * kernel's offset), all the kernel's. One system call, as
		 * without Chell: the page cache it writes is the memory we map,
		 * so mapped readers see the bytes at once, and they ask the
		 * kernel for the new size when they reach the cached one. */
		MSTAT(ops->stats, writes, 1);
		MSTAT(ops->stats, kernel_fallbacks, 1);
		ssize_t r = chell_down_write(c, iov, cnt, off, flags);
		if (r > 0)
			MSTAT(ops->stats, write_bytes, (uint64_t)r);
		return r;
	}
	ssize_t total = checked_total(c, iov, cnt, off, O_RDONLY);
	if (total <= 0)
		return total;
	int e = checked_flags(c, iov, total, off, flags, true);
	if (e < 0)
		return e;
	_Atomic uint64_t *offp = OFFSET(c);
	MSTAT(ops->stats, writes, 1);
	bool append = ((st & O_APPEND) && !(flags & RWF_NOAPPEND)) || (flags & RWF_APPEND);
	ssize_t r;
	if (!append && (flags & ops->kernel_flags)) {
		r = ops->kernel_io(c, iov, cnt, off, total, flags, true);
	} else if (append) {
		r = ops->append(c, iov, cnt, off, (size_t)total, flags);
	} else {
		uint64_t pos = 0;
		total = mapped_write_claim((uint64_t *)offp, off, (size_t)total, &pos);
		if (total < 0)
			return total;
		uint64_t end = pos + (uint64_t)total;
		r = ops->write_at(c, iov, cnt, pos, (size_t)total);
		if (off < 0 && r != total) {
			uint64_t expect = end;
			atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
		}
	}
	if (off < 0 && !mapped_active(c)) /* moved to the kernel meanwhile */
		sys_lseek(c->fd, (off_t)atomic_load(offp), SEEK_SET);
	if (r > 0) {
		MSTAT(ops->stats, write_bytes, (uint64_t)r);
		if ((st & (O_SYNC | O_DSYNC)) || (flags & (RWF_SYNC | RWF_DSYNC))) {
			int s = chell_layer(c)->fsync(c, !(st & O_SYNC) && !(flags & RWF_SYNC));
			if (s < 0)
				return s;
		}
	}
	return r;
}

/* With the tier model on (docs/TIER.md): the operation, then the charge of
 * the bytes it moved that the posix layer below did not charge itself. */
__attribute__((noinline)) static ssize_t tier_op(chell_ctx *c, const struct iovec *iov, int cnt,
						 off_t off, int flags, bool write)
{
	uint64_t mark = chell_tier_mark();
	ssize_t r = write ? write_op(c, iov, cnt, off, flags) : read_op(c, iov, cnt, off, flags);
	struct mapped_local *l = L(c);
	if (l && l->tier)
		chell_tier_settle(write, mark, r);
	return r;
}

ssize_t mapped_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (likely(!chell_tier_active))
		return read_op(c, iov, cnt, off, flags);
	return tier_op(c, iov, cnt, off, flags, false);
}

ssize_t mapped_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	if (likely(!chell_tier_active))
		return write_op(c, iov, cnt, off, flags);
	return tier_op(c, iov, cnt, off, flags, true);
}

/* ------------------------------------------------------- offset and size */

off_t mapped_lseek_op(chell_ctx *c, off_t off, int whence)
{
	if (!mapped_active(c) || mapped_kernel_offset(c))
		return chell_down_lseek(c, off, whence);
	const struct mapped_ops *ops = L(c)->ops;
	_Atomic uint64_t *offp = OFFSET(c);
	switch (whence) {
	case SEEK_SET:
	case SEEK_CUR:
	case SEEK_END:
		return mapped_lseek((uint64_t *)offp, c->fd, off, whence,
				    whence == SEEK_END ? mapped_inode_refresh(L(c)->inode, c->fd) : 0);
	case SEEK_DATA:
	case SEEK_HOLE: {
		/* the kernel knows the holes (once the handler settled them);
		 * its answer becomes our offset */
		mapped_lazy_publish(L(c), c->fd, NULL); /* the implicit hole at the end is at the size */
		if (ops->settle)
			ops->settle(c);
		off_t r = sys_lseek(c->fd, off, whence);
		if (r >= 0)
			atomic_store(offp, (uint64_t)r);
		return r;
	}
	default:
		return -EINVAL;
	}
}

int mapped_grow(int fd, struct mapped_inode *in, uint64_t off, uint64_t len, uint64_t end)
{
	int r = (int)CHELL_SC(SYS_fallocate, fd, 0, off, len, 0, 0);
	if (r == -EOPNOTSUPP || r == -ENOSYS) {
		uint64_t now = mapped_inode_refresh(in, fd);
		r = end > now ? sys_ftruncate(fd, (off_t)end) : 0;
	}
	return r;
}

int mapped_append_lock(int fd, short type)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 1ll << 62, .l_len = 1};
	int r;
	do
		r = sys_fcntl(fd, F_OFD_SETLKW, (long)&fl);
	while (r == -EINTR);
	return r;
}
