/* SPDX-License-Identifier: MIT */
/*
 * The zero-copy API of chell/chell.h. On direct files the buffers are the
 * mapping itself; on every other descriptor a per-thread buffer and plain
 * read()/write() give the same results with a copy.
 */
#include <chell/chell.h>
#include <stdlib.h>
#include <string.h>

#include "direct.h"

static __thread unsigned char *tls_buf;
static __thread size_t tls_buf_len;

/* The pending chell_get_write_buf reservation of this thread. */
static __thread struct {
	int fd;
	struct chell_file *f;
	int layer;
	uint64_t pos;
	size_t len;
	void *ptr;
	bool append_locked;
	bool extended;       /* the reservation grew the file ... */
	uint64_t old_size;   /* ... from this size */
} tls_w = {-1};

/*
 * Zero-copy appends cannot go through the kernel's atomic O_APPEND, so they
 * serialise with every other zero-copy appender of the file - in any process
 * tree - with an open-file-description lock on one byte at 2^62, far beyond
 * any data. (Ordinary write() appends use the kernel and need no lock.)
 */
static int append_lock(int fd, short type)
{
	struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = 1ll << 62, .l_len = 1};
	int r;
	do
		r = sys_fcntl(fd, F_OFD_SETLKW, (long)&fl);
	while (r == -EINTR);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return 0;
}

static void *staging(size_t count)
{
	if (count > tls_buf_len) {
		void *p = realloc(tls_buf, count ? count : 1);
		if (!p)
			return NULL;
		tls_buf = p;
		tls_buf_len = count;
	}
	return tls_buf;
}

CHELL_EXPORT const char *chell_version(void)
{
	return CHELL_VERSION_STRING;
}

CHELL_EXPORT ssize_t chell_get_read_buf(int fd, const void **buf, size_t count)
{
	int layer;
	struct chell_file *f = direct_file_get(fd, &layer);
	if (f) {
		ssize_t r = direct_read_ptr(f, layer, fd, buf, count);
		file_put(f);
		if (r != -ENODATA)
			return hub_ret(r);
	}
	void *b = staging(count);
	if (!b) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t r = read(fd, b, count);
	if (r >= 0)
		*buf = b;
	return r;
}

CHELL_EXPORT ssize_t chell_get_write_buf(int fd, void **buf, size_t count)
{
	if (tls_w.fd >= 0) { /* one reservation at a time per thread */
		errno = EBUSY;
		return -1;
	}
	int layer;
	struct chell_file *f = direct_file_get(fd, &layer);
	if (f) {
		chell_ctx c = {f, fd, layer, CHELL_OP_WRITE, NULL};
		struct direct_local *l = (struct direct_local *)f->local[layer];
		int st = atomic_load((_Atomic int32_t *)&f->ofd->status_flags);
		size_t chunk = (size_t)1 << direct_chunk_shift;
		if ((st & O_ACCMODE) == O_RDONLY || !l->map->writable) {
			file_put(f);
			errno = EBADF;
			return -1;
		}
		bool append = st & O_APPEND;
		struct direct_inode *in = l->inode;
		chell_lock_acquire(&in->lock); /* held until the commit for O_APPEND */
		if (append && append_lock(fd, F_WRLCK) < 0) {
			int e = errno;
			chell_lock_release(&in->lock);
			file_put(f);
			errno = e;
			return -1;
		}
		uint64_t pos = append ? direct_inode_refresh(in, fd)
				      : atomic_load((_Atomic uint64_t *)&f->ofd->offset);
		size_t n = count, to_end = chunk - (size_t)(pos & (chunk - 1));
		if (n > to_end)
			n = to_end;
		/* The reserved range must exist in the file before the caller
		 * stores into it (a store past the end faults on tmpfs). */
		uint64_t old_size = atomic_load((_Atomic uint64_t *)&in->size);
		bool extended = false;
		if (n && pos + n > old_size) {
			if (pos > old_size) /* a gap: a hole for every process */
				atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
			int e = (int)CHELL_SC(SYS_fallocate, fd, 0, pos, n, 0, 0);
			if (e == -EOPNOTSUPP)
				e = sys_ftruncate(fd, (off_t)(pos + n));
			if (e < 0) {
				if (append)
					append_lock(fd, F_UNLCK);
				chell_lock_release(&in->lock);
				file_put(f);
				errno = -e;
				return -1;
			}
			atomic_store((_Atomic uint64_t *)&in->size, pos + n);
			extended = true;
		}
		if (!append)
			chell_lock_release(&in->lock);
		unsigned char *a = n ? direct_addr(l->map, pos) : NULL; /* writes may fill holes */
		if (n && !a)
			a = direct_map_chunk_slow(l->map, fd, pos >> direct_chunk_shift),
			a = a ? a + (pos & (chunk - 1)) : NULL;
		if (n && !a) {
			if (append) {
				append_lock(fd, F_UNLCK);
				chell_lock_release(&in->lock);
			}
			file_put(f);
			errno = EIO;
			return -1;
		}
		(void)c;
		tls_w.fd = fd;
		tls_w.f = f; /* keeps the file alive until the commit */
		tls_w.layer = layer;
		tls_w.pos = pos;
		tls_w.len = n;
		tls_w.ptr = a;
		tls_w.append_locked = append;
		tls_w.extended = extended;
		tls_w.old_size = old_size;
		*buf = a;
		return (ssize_t)n;
	}
	void *b = staging(count);
	if (!b) {
		errno = ENOMEM;
		return -1;
	}
	tls_w.fd = fd;
	tls_w.f = NULL;
	tls_w.len = count;
	tls_w.ptr = b;
	*buf = b;
	return (ssize_t)count;
}

CHELL_EXPORT ssize_t chell_commit_write_buf(int fd, const void *buf, size_t len)
{
	if (tls_w.fd != fd || buf != tls_w.ptr || len > tls_w.len) {
		errno = EINVAL;
		return -1;
	}
	struct chell_file *f = tls_w.f;
	bool appended = tls_w.append_locked;
	tls_w.fd = -1;
	if (!f)
		return write(fd, buf, len);
	struct direct_local *l = (struct direct_local *)f->local[tls_w.layer];
	struct direct_inode *in = l->inode;
	ssize_t r = (ssize_t)len;
	uint64_t end = tls_w.pos + len;
	/* The bytes are already in place. If the reservation grew the file by
	 * more than was used, give the rest back - unless someone grew it
	 * further meanwhile. */
	if (!tls_w.append_locked)
		chell_lock_acquire(&in->lock);
	uint64_t now = atomic_load((_Atomic uint64_t *)&in->size);
	if (tls_w.extended && now == tls_w.pos + tls_w.len && end < now) {
		uint64_t keep = end > tls_w.old_size ? end : tls_w.old_size;
		int e = sys_ftruncate(fd, (off_t)keep);
		if (e < 0)
			r = e;
		else
			atomic_store((_Atomic uint64_t *)&in->size, keep);
	}
	if (tls_w.append_locked)
		append_lock(fd, F_UNLCK);
	chell_lock_release(&in->lock);
	if (r > 0) {
		if (l->map->map_sync == 2)
			direct_flush(buf, len);
		if (appended && !direct_lazy_size) /* the kernel keeps an O_APPEND offset */
			sys_lseek(fd, (off_t)end, SEEK_SET);
		else
			atomic_store((_Atomic uint64_t *)&f->ofd->offset, end);
		DSTAT(writes, 1);
		DSTAT(zero_copy, 1);
		DSTAT(write_bytes, len);
	}
	file_put(f);
	return hub_ret(r);
}
