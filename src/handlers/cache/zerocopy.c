/* SPDX-License-Identifier: MIT */
/*
 * Zero-copy reads on a hit (the get_read_buf method, chell/chell.h): the
 * buffer handed out is the chunk of the pool itself, once the hit protocol
 * found every block of the range valid in a LIVE chunk.
 *
 * The manager may revoke the chunk at any moment afterwards (eviction,
 * TRUNCATE, a shared mmap elsewhere): it writes the dirty blocks back to
 * the backing file and truncates the chunk file, so the application's next
 * touch of the buffer would raise SIGBUS. A chunk that was lent is therefore
 * "lent" for good in this process (CACHE_E_LENT in its record, and an entry
 * of the table below, which the fault hook reads without locks):
 *
 *  - a SIGBUS at an address of a lent chunk outside Chell's own copies maps
 *    the backing file's bytes of the chunk there (MAP_PRIVATE, read-only,
 *    from a descriptor of the file kept for this) and the access is retried:
 *    the application reads what the file holds once the chunk went, which
 *    is what the cache held (it was written back first);
 *  - a new mapping for the same (file, chunk) never goes over a lent
 *    chunk's address (map.c, install): it is made elsewhere, and the lent
 *    range stays reserved until the file's last close in the process.
 *
 * So the buffer never faults and never shows bytes of another chunk file;
 * past a truncation of the file it faults as direct mode's would
 * (chell/chell.h). The cache's own copies never read a rescued range as
 * cache data: its control page is the revoked chunk file's, which faults,
 * so they miss and map the chunk again.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "cache.h"
#include "../mapped/short.h"

#define LENT_MAX 1024

struct lent {
	unsigned char *_Atomic base; /* the lent chunk mapping; NULL: free */
	struct cache_file *cf;
	uint64_t k;                  /* its chunk */
	_Atomic int rescued;         /* the backing file is mapped over it */
};
static struct lent lent[LENT_MAX];

/* Map the backing file's bytes of the chunk over a lent range. */
static bool rescue(struct lent *l)
{
	if (atomic_exchange(&l->rescued, 1))
		return false; /* already: a fault there now is past the file's end */
	void *p = REAL(mmap64)(l->base, CACHE_CHUNK_BYTES, PROT_READ, MAP_PRIVATE | MAP_FIXED,
			       l->cf->zc_fd, (off_t)(l->k << CACHE_CHUNK_SHIFT));
	return p != MAP_FAILED;
}

bool cache_lent_fault(int sig, const void *addr)
{
	uintptr_t a = (uintptr_t)addr;
	if (sig != SIGBUS)
		return false;
	for (int i = 0; i < LENT_MAX; i++) {
		uintptr_t b = (uintptr_t)atomic_load_explicit(&lent[i].base, memory_order_acquire);
		if (b && a >= b && a < b + CACHE_CHUNK_BYTES)
			return rescue(&lent[i]);
	}
	return false;
}

/* A read-only descriptor of fd's file for the rescue, or -errno. Under
 * the descriptor-table lock, as map.c's reopen (a fork meanwhile must not
 * inherit it at a low number), so never with cache_lock held (lock order:
 * fdt_lock, then cache_lock). */
static int rescue_fd(int fd)
{
	char p[CHELL_FD_PATH_MAX];
	chell_fd_path(p, fd);
	fdt_lock();
	int nfd = chell_internal_openat(AT_FDCWD, p, O_RDONLY | O_CLOEXEC | O_NOCTTY, 0);
	if (nfd >= 0)
		nfd = chell_internal_fd(nfd, 1);
	fdt_unlock();
	return nfd;
}

/* Record chunk k's mapping as lent (caller holds cache_lock; cf->zc_fd is
 * open). 0, or -1 when the table is full. */
static int lend(struct cache_file *cf, struct mapped_chunk *e, uint64_t k)
{
	if (atomic_load(&e->flags) & CACHE_E_LENT)
		return 0;
	for (int i = 0; i < LENT_MAX; i++) {
		if (atomic_load(&lent[i].base))
			continue;
		lent[i].cf = cf;
		lent[i].k = k;
		atomic_store(&lent[i].rescued, 0);
		atomic_store_explicit(&lent[i].base, atomic_load(&e->base), memory_order_release);
		atomic_fetch_or(&e->flags, (uint32_t)CACHE_E_LENT);
		return 0;
	}
	return -1;
}

void cache_lent_settle(struct cache_file *cf)
{
	cache_lock();
	for (int i = 0; i < LENT_MAX; i++)
		if (atomic_load(&lent[i].base) && lent[i].cf == cf)
			rescue(&lent[i]);
	if (cf->zc_fd >= 0)
		chell_internal_close(cf->zc_fd);
	cf->zc_fd = -1;
	cache_unlock();
}

void cache_lent_forget(struct cache_file *cf)
{
	for (int i = 0; i < LENT_MAX; i++) {
		unsigned char *b = atomic_load(&lent[i].base);
		if (!b || lent[i].cf != cf)
			continue;
		struct mapped_chunk *e = mapped_chunk_of(&cf->chunks, lent[i].k);
		if (!e || atomic_load(&e->base) != b) /* replaced: the table no longer has it */
			munmap(b, CACHE_CHUNK_FILE_BYTES);
		atomic_store(&lent[i].base, NULL);
	}
	if (cf->zc_fd >= 0)
		chell_internal_close(cf->zc_fd);
	cf->zc_fd = -1;
}

ssize_t cache_get_read_buf(chell_ctx *c, const void **buf, size_t count)
{
	if (!mapped_active(c))
		return chell_down_get_read_buf(c, buf, count);
	if ((status(c) & O_ACCMODE) == O_WRONLY)
		return -EBADF;
	if (count > (size_t)MAPPED_MAX_RW_COUNT)
		count = MAPPED_MAX_RW_COUNT;
	struct cache_file *cf = L(c)->cf;
	uint64_t pos;
	size_t n = mapped_read_claim(c, count, CACHE_CHUNK_BYTES, &pos);
	if (n == 0) {
		*buf = NULL;
		return 0;
	}
	uint64_t k = pos >> CACHE_CHUNK_SHIFT;
	size_t in = (size_t)(pos & (CACHE_CHUNK_BYTES - 1));
	struct mapped_chunk *e = mapped_chunk_of(&cf->chunks, k);
	uintptr_t v = 0;
	/* Lent already: no lock. A new mapping clears the flag before it
	 * publishes its address (map.c), so an address read before a set flag
	 * is the lent one. */
	unsigned char *b = e ? atomic_load_explicit(&e->base, memory_order_acquire) : NULL;
	if (b && (atomic_load_explicit(&e->flags, memory_order_acquire) & CACHE_E_LENT)) {
		v = (uintptr_t)b;
	} else if (b) {
		int nfd = __atomic_load_n(&cf->zc_fd, __ATOMIC_ACQUIRE) < 0 ? rescue_fd(c->fd) : -1;
		cache_lock(); /* lending and (re)mapping exclude each other */
		if (cf->zc_fd < 0 && nfd >= 0) {
			cf->zc_fd = nfd;
			nfd = -1;
		}
		if (cf->zc_fd >= 0 && lend(cf, e, k) == 0)
			v = cache_entry_of(cf, k);
		cache_unlock();
		if (nfd >= 0) /* another thread's came first */
			chell_internal_close(nfd);
	}
	uint32_t slot;
	unsigned char *base = (unsigned char *)(v & ~CACHE_E_WRITABLE);
	if (!v || cache_copy_out(NULL, base, in, n, &slot) != COPY_HIT) {
		mapped_read_unclaim(c, pos, n);
		return CHELL_FAST_MISS; /* a miss: the library reads, which fills the chunk */
	}
	cache_hit_mark(slot, in);
	struct mapped_stats *s = cache_stats_tls();
	s->reads++;
	s->read_hits++;
	s->read_bytes += n;
	s->zero_copy++;
	cache_count(cf, CNT_RHIT, 1);
	cache_count(cf, CNT_RBYTES, n);
	*buf = base + in;
	return (ssize_t)n;
}
