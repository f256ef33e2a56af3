/* SPDX-License-Identifier: MIT */
/*
 * Zero-copy writes on direct files (the get_write_buf / commit_write_buf
 * methods, chell/chell.h): the buffer is the mapping itself, up to the end
 * of its chunk. (Zero-copy reads are direct_get_read_buf, direct.c.)
 */
#include "direct.h"
#include "../mapped/short.h"

/* The pending reservation of this thread (the library allows one). */
static __thread struct {
	uint64_t pos;
	size_t len;
	bool append_locked;  /* O_APPEND: inode lock and append lock held until the commit */
	bool extended;       /* the reservation grew the file ... */
	uint64_t old_size;   /* ... from this size */
} tls_w;

ssize_t direct_get_write_buf(chell_ctx *c, void **buf, size_t count)
{
	if (!mapped_active(c))
		return chell_down_get_write_buf(c, buf, count);
	struct mapped_local *l = L(c);
	int fd = c->fd, st = status(c);
	size_t chunk = (size_t)1 << direct_chunk_shift;
	if ((st & O_ACCMODE) == O_RDONLY || !l->map->writable)
		return -EBADF;
	/*
	 * Zero-copy appends cannot go through the kernel's atomic O_APPEND,
	 * so they serialise with every other appender of the file that Chell
	 * serves - in any process tree - with the base's append lock.
	 * (Ordinary write() appends in direct mode use the kernel.)
	 */
	bool append = st & O_APPEND;
	struct mapped_inode *in = l->inode;
	chell_lock_acquire(&in->lock); /* held until the commit for O_APPEND */
	int e = append ? mapped_append_lock(fd, F_WRLCK) : 0;
	if (e < 0) {
		chell_lock_release(&in->lock);
		return e;
	}
	uint64_t pos = append ? mapped_inode_refresh(in, fd) : atomic_load(OFFSET(c));
	size_t n = count, to_end = chunk - (size_t)(pos & (chunk - 1));
	if (n > to_end)
		n = to_end;
	/* The reserved range must exist in the file before the caller
	 * stores into it (a store past the end faults on tmpfs). */
	uint64_t old_size = isize(in);
	bool extended = false;
	if (n && pos + n > old_size) {
		if (pos > old_size) /* a gap: a hole for every process */
			atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
		e = mapped_grow(fd, in, pos, n, pos + n);
		if (e < 0) {
			if (append)
				mapped_append_lock(fd, F_UNLCK);
			chell_lock_release(&in->lock);
			return e;
		}
		isize_set(in, pos + n);
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
			mapped_append_lock(fd, F_UNLCK);
			chell_lock_release(&in->lock);
		}
		return -EIO;
	}
	tls_w.pos = pos;
	tls_w.len = n;
	tls_w.append_locked = append;
	tls_w.extended = extended;
	tls_w.old_size = old_size;
	*buf = a;
	return (ssize_t)n;
}

/* The library checked that buf and len are this thread's reservation. */
ssize_t direct_commit_write_buf(chell_ctx *c, const void *buf, size_t len)
{
	struct mapped_local *l = L(c);
	struct mapped_inode *in = l->inode;
	ssize_t r = (ssize_t)len;
	uint64_t end = tls_w.pos + len;
	/* The bytes are already in place. If the reservation grew the file by
	 * more than was used, give the rest back - unless someone grew it
	 * further meanwhile. */
	if (!tls_w.append_locked)
		chell_lock_acquire(&in->lock);
	uint64_t now = isize(in);
	if (tls_w.extended && now == tls_w.pos + tls_w.len && end < now) {
		uint64_t keep = end > tls_w.old_size ? end : tls_w.old_size;
		int e = sys_ftruncate(c->fd, (off_t)keep);
		if (e < 0)
			r = e;
		else
			isize_set(in, keep);
	}
	if (tls_w.append_locked)
		mapped_append_lock(c->fd, F_UNLCK);
	chell_lock_release(&in->lock);
	if (r > 0) {
		if (l->map->map_sync == 2)
			mapped_flush(l->map->persist, buf, len);
		if (tls_w.append_locked && mapped_kernel_offset(c)) /* the kernel keeps an O_APPEND offset */
			sys_lseek(c->fd, (off_t)end, SEEK_SET);
		else
			atomic_store(OFFSET(c), end);
		DSTAT(writes, 1);
		DSTAT(zero_copy, 1);
		DSTAT(write_bytes, len);
		mapped_tier_fast(l, true, r); /* the caller stored them in the tier */
	}
	return r;
}
