/* SPDX-License-Identifier: MIT */
/*
 * Mapped reads (the read-mapped state): node k of the tier file mapped in
 * this process, shared and read-only, through the application's descriptor
 * (a mapping keeps its file; no descriptor of Chell's own, which a lease
 * would count), in the base's chunk table (one record per node).
 *
 * As in direct mode (docs/DIRECT.md, "Holes"), a fault on a hole of a tmpfs
 * mapping allocates a page, even for a read: a node is read through its
 * mapping only while the kernel finds no hole in it (WARP_DENSE, checked
 * with SEEK_HOLE when mapped and again after any change that may have made
 * holes anywhere: the tree's hole_gen). Otherwise the kernel reads it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "warp.h"

static pthread_mutex_t tier_lock = PTHREAD_MUTEX_INITIALIZER;

static void clear_dense(struct mapped_chunk *e, void *arg)
{
	atomic_fetch_and(&e->flags, ~WARP_DENSE);
}

/* Under tier_lock: a light file's probe descriptor (warp.h), opened now if
 * need be; -1 if there is none to use on this thread. */
static int probe_fd(struct warp_file *w, int fd)
{
	if (w->probe_fd < 0 && !chell_fdt_private()) {
		char path[CHELL_FD_PATH_MAX];
		chell_fd_path(path, fd);
		int t = chell_internal_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOATIME, 0);
		if (t == -EPERM)
			t = chell_internal_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
		w->probe_fd = t >= 0 ? chell_internal_fd(t, 1) : -1;
	}
	return warp_own(w->probe_fd);
}

void warp_tier_probe_close(struct warp_file *w)
{
	pthread_mutex_lock(&tier_lock);
	if (w->probe_fd >= 0)
		chell_internal_close(w->probe_fd);
	w->probe_fd = -1;
	pthread_mutex_unlock(&tier_lock);
}

/* Under tier_lock, with w->hole_gen current. */
static bool dense(struct warp_file *w, int fd, uint64_t lo, uint64_t node_bytes)
{
	struct stat st;
	if (sys_fstat(fd, &st) < 0 || (uint64_t)st.st_size <= lo)
		return false;
	uint64_t hi = lo + node_bytes < (uint64_t)st.st_size ? lo + node_bytes : (uint64_t)st.st_size;
	if (lo >= w->data_lo && hi <= w->data_hi)
		return true; /* inside an extent an earlier probe found all data */
	off_t hole;
	if (atomic_load(&w->light)) {
		/* no koff_lock is shared with the other processes that may hold
		 * the application's description: probe through our own */
		int p = probe_fd(w, fd);
		hole = p >= 0 ? sys_lseek(p, (off_t)lo, SEEK_HOLE) : -1;
	} else {
		/* The probe moves the kernel's offset of fd's description: Chell
		 * keeps warp's offsets itself, but an append reads the kernel's
		 * back right after its write (warp.c: append), in any process
		 * sharing the description; koff_lock keeps the probe out of that
		 * window. */
		struct warp_hdr *h = warp_koff_lock(w);
		hole = sys_lseek(fd, (off_t)lo, SEEK_HOLE);
		chell_lock_release(&h->koff_lock);
	}
	if (hole < 0 || (uint64_t)hole < hi)
		return false;
	w->data_lo = lo;
	w->data_hi = (uint64_t)hole;
	return true;
}

static const unsigned char *map_node(struct warp_file *w, int fd, uint64_t k, uint32_t hole_gen)
{
	uint64_t nb = 1ull << w->hdr->node_shift;
	const unsigned char *res = NULL;
	pthread_mutex_lock(&tier_lock);
	if (w->retired || fd < 0)
		goto out;
	if (w->hole_gen != hole_gen) {
		mapped_table_each(&w->tier, clear_dense, NULL);
		w->data_lo = w->data_hi = 0; /* the extent too: holes may be anywhere now */
		w->hole_gen = hole_gen;
	}
	struct mapped_chunk *e = mapped_chunk_make(&w->tier, k);
	if (!e)
		goto out;
	unsigned char *base = atomic_load(&e->base);
	if (!base) {
		void *p = REAL(mmap64)(NULL, nb, PROT_READ, MAP_SHARED, fd, (off_t)(k * nb));
		if (p == MAP_FAILED)
			goto out;
		WSTAT(mmaps, 1);
		atomic_store(&w->kernel_reads_left, 0); /* mapped: no more kernel-first reads */
		atomic_store(&e->base, (unsigned char *)p);
		base = p;
	}
	if (!(atomic_load(&e->flags) & WARP_DENSE)) {
		if (!dense(w, fd, k * nb, nb))
			goto out;
		atomic_fetch_or(&e->flags, WARP_DENSE);
	}
	res = base;
out:
	pthread_mutex_unlock(&tier_lock);
	return res;
}

const unsigned char *warp_tier_addr(struct warp_file *w, int fd, uint64_t off, uint32_t hole_gen)
{
	uint64_t k = off >> w->hdr->node_shift, mask = (1ull << w->hdr->node_shift) - 1;
	struct mapped_chunk *e = mapped_chunk_of(&w->tier, k);
	if (e && w->hole_gen == hole_gen && (atomic_load_explicit(&e->flags, memory_order_relaxed) & WARP_DENSE)) {
		unsigned char *b = atomic_load_explicit(&e->base, memory_order_acquire);
		if (b)
			return b + (off & mask);
	}
	const unsigned char *b = map_node(w, fd, k, hole_gen);
	return b ? b + (off & mask) : NULL;
}

static void unmap_one(struct mapped_chunk *e, void *arg)
{
	struct warp_file *w = arg;
	munmap(e->base, 1ull << w->hdr->node_shift);
}

void warp_tier_unmap_all(struct warp_file *w)
{
	if (!w->hdr)
		return;
	mapped_table_each(&w->tier, unmap_one, w);
	mapped_table_free(&w->tier);
	for (size_t i = 0; i < w->nreserved; i++)
		munmap(w->reserved[i], 1ull << w->hdr->node_shift);
	free(w->reserved);
	w->reserved = NULL;
	w->nreserved = 0;
}

/* The application takes a lease (it counts the inode's open files and
 * mappings' files): every node's mapping is replaced at its address by an
 * inaccessible reservation (a copy in flight in another thread faults into
 * its guard, then the kernel serves it), and Chell's own descriptors go. */
static void retire_one(struct mapped_chunk *e, void *arg)
{
	struct warp_file *w = arg;
	size_t nb = 1ull << w->hdr->node_shift;
	void *a = atomic_load(&e->base);
	atomic_store(&e->base, NULL);
	void **r = realloc(w->reserved, (w->nreserved + 1) * sizeof(*r));
	if (r)
		w->reserved = r;
	void *p = REAL(mmap64)(a, nb, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (!r || p == MAP_FAILED) {
		munmap(a, nb);
		return;
	}
	w->reserved[w->nreserved++] = p;
}

void warp_tier_retire(struct warp_file *w)
{
	pthread_mutex_lock(&tier_lock);
	if (!w->retired) {
		w->retired = 1;
		mapped_table_each(&w->tier, retire_one, w);
	}
	pthread_mutex_unlock(&tier_lock);
}

void warp_tier_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	tier_lock = fresh;
}
