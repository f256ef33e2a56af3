/* SPDX-License-Identifier: MIT */
/*
 * The posix handler: the kernel, through glibc. It is the bottom of every
 * stack and the reference the shadow handler compares against. Each
 * operation calls the libc function matching the application's original
 * call (c->op), so errors come out exactly as without Chell.
 */
#include "../nib/nib.h"
#include "chell/tier.h"

#define RET(expr) ({ long r_ = (long)(expr); r_ < 0 ? -(long)errno : r_; })

/*
 * The tier model (docs/TIER.md): the kernel's reads and writes of a file on
 * the emulated tier cost the modelled device's time as well, so every mode
 * is compared on the same device. Whether the file is on the tier is asked
 * once per file and process and kept as a tag in this layer's local slot
 * (posix keeps nothing else there; the hub zeroes it for each new file).
 * Only the file's own bottom layer charges: shadow runs its reference
 * copy's calls through posix at its own layer, and they are not the
 * application's I/O.
 */
#define PX_TIER_NO ((void *)1)
#define PX_TIER_YES ((void *)2)
__attribute__((noinline)) static void px_tier_charge(chell_ctx *c, bool write, long r)
{
	if (r <= 0 || !c->f || c->layer != c->f->stack->depth - 1)
		return;
	void **tag = &c->f->local[c->layer];
	void *t = __atomic_load_n(tag, __ATOMIC_RELAXED);
	if (!t) { /* threads racing here store the same answer */
		t = chell_tier_file(c->f, c->fd) ? PX_TIER_YES : PX_TIER_NO;
		__atomic_store_n(tag, t, __ATOMIC_RELAXED);
	}
	if (t == PX_TIER_YES)
		chell_tier_charge(write, (size_t)r, 1);
}

static inline ssize_t px_tier(chell_ctx *c, bool write, ssize_t r)
{
	if (unlikely(chell_tier_active))
		px_tier_charge(c, write, r);
	return r;
}

static int px_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	return (int)RET(REAL(openat)(dirfd, path, flags, mode));
}

static int px_close(chell_ctx *c)
{
	return (int)RET(REAL(close)(c->fd));
}

static ssize_t px_kread(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	switch (c->op) {
	case CHELL_OP_READ: return RET(REAL(read)(c->fd, iov[0].iov_base, iov[0].iov_len));
	case CHELL_OP_PREAD: return RET(REAL(pread64)(c->fd, iov[0].iov_base, iov[0].iov_len, off));
	case CHELL_OP_READV: return RET(REAL(readv)(c->fd, iov, cnt));
	case CHELL_OP_PREADV: return RET(REAL(preadv64)(c->fd, iov, cnt, off));
	default: return RET(REAL(preadv64v2)(c->fd, iov, cnt, off, flags));
	}
}

static ssize_t px_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return px_tier(c, false, px_kread(c, iov, cnt, off, flags));
}

static ssize_t px_kwrite(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	switch (c->op) {
	case CHELL_OP_WRITE: return RET(REAL(write)(c->fd, iov[0].iov_base, iov[0].iov_len));
	case CHELL_OP_PWRITE: return RET(REAL(pwrite64)(c->fd, iov[0].iov_base, iov[0].iov_len, off));
	case CHELL_OP_WRITEV: return RET(REAL(writev)(c->fd, iov, cnt));
	case CHELL_OP_PWRITEV: return RET(REAL(pwritev64)(c->fd, iov, cnt, off));
	default: return RET(REAL(pwritev64v2)(c->fd, iov, cnt, off, flags));
	}
}

static ssize_t px_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return px_tier(c, true, px_kwrite(c, iov, cnt, off, flags));
}

static off_t px_lseek(chell_ctx *c, off_t off, int whence)
{
	return RET(REAL(lseek64)(c->fd, off, whence));
}

static int px_fsync(chell_ctx *c, int datasync)
{
	return (int)RET(datasync ? REAL(fdatasync)(c->fd) : REAL(fsync)(c->fd));
}

static int px_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags)
{
	return (int)RET(REAL(sync_file_range)(c->fd, off, n, flags));
}

static int px_ftruncate(chell_ctx *c, off_t len)
{
	return (int)RET(REAL(ftruncate64)(c->fd, len));
}

static int px_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	return (int)RET(REAL(fallocate64)(c->fd, mode, off, len));
}

static int px_fstat(chell_ctx *c, struct stat *st)
{
	return (int)RET(REAL(fstat64)(c->fd, st));
}

static int px_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	return (int)RET(REAL(fcntl64)(c->fd, cmd, arg));
}

static void *px_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off)
{
	void *p = REAL(mmap64)(addr, len, prot, flags, c->fd, off);
	return p == MAP_FAILED ? (void *)(intptr_t)-errno : p;
}

/* The kernel has no zero-copy buffers: the library copies (chell/chell.h). */
static ssize_t px_get_read_buf(chell_ctx *c, const void **buf, size_t count)
{
	return CHELL_FAST_MISS;
}

static ssize_t px_get_write_buf(chell_ctx *c, void **buf, size_t count)
{
	return CHELL_FAST_MISS;
}

static ssize_t px_commit_write_buf(chell_ctx *c, const void *buf, size_t len)
{
	return -EINVAL; /* no get_write_buf reservation can be the kernel's */
}

static int px_truncate(chell_ctx *c, const char *path, off_t len)
{
	return (int)RET(REAL(truncate64)(path, len));
}

static int px_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags)
{
	return (int)RET(REAL(fstatat64)(dirfd, path, st, at_flags));
}

CHELL_EXPORT const struct chell_handler chell_posix_handler = {
	.name = "posix",
	CHELL_HANDLER_NO_PRIV, /* summary: src/common/registry.def */
	.open = px_open,
	.close = px_close,
	.read = px_read,
	.write = px_write,
	.lseek = px_lseek,
	.fsync = px_fsync,
	.sync_file_range = px_sync_file_range,
	.ftruncate = px_ftruncate,
	.fallocate = px_fallocate,
	.fstat = px_fstat,
	.fcntl = px_fcntl,
	.mmap = px_mmap,
	.get_read_buf = px_get_read_buf,
	.get_write_buf = px_get_write_buf,
	.commit_write_buf = px_commit_write_buf,
	.truncate = px_truncate,
	.stat = px_stat,
};
