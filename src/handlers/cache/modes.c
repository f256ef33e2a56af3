/* SPDX-License-Identifier: MIT */
/*
 * The client's part of the cache modes (docs/CACHE.md, "Cache modes"; the
 * manager decides in src/chelld/modes.c and says so in the flags of every
 * OPEN_FILE, MAP and INVAL reply):
 *
 * - write-back: nothing here;
 * - write-through: cache.c writes the bytes a write stored in the cache to
 *   the backing file (from the cache's copy) before the write returns,
 *   and fsync also syncs the backing file;
 * - write-around and read-only: a write goes to the backing file on the
 *   application's own descriptor, then INVAL drops the chunks holding the
 *   range (the manager never hands out a writable chunk of such a file,
 *   so none of them has a dirty block to lose); reads are cached;
 * - pass-through: the manager answers BYPASS, the kernel path.
 *
 * INVAL comes after the kernel's write: a reader's fill that read the old
 * bytes before it is dropped with the chunk, one that reads after it reads
 * the new bytes. The sequential cutoff is a read miss the manager answers
 * SKIP (it holds nothing of that chunk): the piece is read from the
 * backing file here.
 */
#include "cache.h"

uint32_t cache_file_mode(struct cache_file *cf, int fd)
{
	if (__atomic_load_n(&cf->nregs, __ATOMIC_ACQUIRE) == 0 ||
	    __atomic_load_n(&cf->conn_gen, __ATOMIC_ACQUIRE) !=
		    __atomic_load_n(&cache_conn_gen, __ATOMIC_ACQUIRE)) {
		uint32_t id;
		/* registration is what a first miss would do anyway */
		if (cache_register(cf, fd, CHELLD_ACC_READ, &id) != 0)
			return 0; /* not cached: the write path finds out itself */
	}
	return cache_mode_hint(cf);
}

bool cache_declined_at_open(struct cache_file *cf, int fd)
{
	cache_lock();
	int gen = cache_conn_ensure();
	uint32_t flags = cache_hello.flags;
	cache_unlock();
	if (gen <= 0 || !(flags & CHELLD_HELLO_MODES))
		return false;
	uint32_t id;
	return cache_register(cf, fd, CHELLD_ACC_READ, &id) == CACHE_MISS_KERNEL;
}

/* INVAL of [off, off + len) after a write around the cache. */
static void inval(struct cache_file *cf, int fd, uint64_t off, uint64_t len)
{
	uint32_t id;
	int e0 = cache_registered_locked(cf, fd, CHELLD_ACC_READ, &id);
	if (e0) {
		chell_info("cache: a write went around the cache but the manager could not be told "
			   "(%s)", e0 < 0 ? strerror(-e0) : "not registered");
		return;
	}
	struct chelld_inval m = {0};
	struct chelld_inval_reply r;
	m.file_id = id;
	m.offset = off;
	m.length = len;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_INVAL, -1, &r, sizeof(r), NULL);
	if (e == 0 && r.r.status == 0)
		atomic_store_explicit(&cf->mode, r.flags & CACHE_MODE_BITS, memory_order_release);
	cache_unlock();
	if (e < 0 || r.r.status)
		chell_info("cache: invalidation after a write around the cache failed: %s",
			   strerror(e < 0 ? -e : r.r.status));
}

ssize_t cache_write_around(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos,
			   size_t skip, size_t n)
{
	struct mapped_local *l = mapped_local(c);
	ssize_t k = cache_kernel_rest(c, iov, cnt, pos, skip, n, 1, mapped_at_pos_flags(c));
	if (k > 0) {
		uint64_t end = pos + skip + (uint64_t)k;
		if (end > mapped_isize(l->inode))
			mapped_isize_set(l->inode, end); /* the kernel grew it (caller holds the lock) */
		inval(l->cf, c->fd, pos + skip, (uint64_t)k);
	}
	return k;
}

int cache_read_around(int fd, unsigned char *u, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = sys_pread(fd, u + got, len - got, (off_t)(off + got));
		if (r < 0)
			return (int)r;
		if (r == 0) {
			/* Truncated meanwhile: zeros, as the cache shows past an
			 * end it has not seen yet. Copied by the kernel from
			 * /dev/zero, so a bad buffer is EFAULT, not a crash. */
			int z = sys_open("/dev/zero", O_RDONLY | O_CLOEXEC, 0);
			if (z < 0)
				return z;
			r = sys_read(z, u + got, len - got);
			sys_close(z);
			return r < 0 ? (int)r : 0;
		}
		got += (size_t)r;
	}
	return 0;
}
