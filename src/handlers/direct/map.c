/* SPDX-License-Identifier: MIT */
/*
 * Per-process mappings of direct files, chunk by chunk.
 *
 * A file is mapped in fixed-size chunks (2 MB by default) as they are first
 * touched, each with one mmap(MAP_SHARED [| MAP_POPULATE] [| MAP_SYNC]).
 * Chunks make mapping cost proportional to what is used, let a growing file
 * gain one mapping per chunk instead of a remap per append, and keep the
 * number of VMAs low. The base's chunk table (mapped/table.c) finds the
 * chunk of any offset with two loads and no lock. Mappings of a file are shared by every descriptor of the
 * process and unmapped when its last descriptor goes (on tmpfs a mapped
 * deleted file would otherwise keep its memory).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "direct.h"


unsigned int direct_chunk_shift = CHELL_CHUNK_SHIFT;
int direct_populate = 1;
uint32_t direct_map_after = 8;
int direct_map_sync_mode = 1;
size_t direct_nt_threshold = 256 * 1024;

static struct direct_map *maps;
static struct direct_map *direct_map_get_locked(int fd, uint64_t dev, uint64_t ino, int want_write,
						int *err);
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

void direct_map_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	maps_lock = fresh;
}

/* A descriptor on the same file with the access the mapping needs: fd itself
 * if it allows it, else a reopen through /proc (closed by the caller). Not
 * an O_APPEND fd: the hole probe (SEEK_HOLE) moves the kernel's offset,
 * which is the description's own offset there (direct.c). */
static int mapping_fd(int fd, int writable, int *opened)
{
	int fl = sys_fcntl(fd, F_GETFL, 0);
	*opened = 0;
	if (fl >= 0 && !(fl & O_APPEND) &&
	    ((fl & O_ACCMODE) == O_RDWR || (!writable && (fl & O_ACCMODE) == O_RDONLY)))
		return fd;
	char path[CHELL_FD_PATH_MAX];
	chell_fd_path(path, fd);
	/* never at the cost of one of the application's descriptors */
	int nfd = chell_internal_openat(AT_FDCWD, path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
	if (nfd >= 0)
		*opened = 1;
	return nfd;
}

/* The descriptor a chunk is mapped through: a reopen with O_NOATIME where
 * the process may (the owner, CAP_FOWNER), because mmap() marks the file
 * accessed, and under relatime that moves an atime not newer than mtime:
 * a chunk first mapped by a write (direct.map_after leaves a file unmapped
 * until then) would show an atime the kernel's write leaves alone. Else
 * mapping_fd's. */
static int chunk_fd(int fd, int writable, int *opened)
{
	char path[CHELL_FD_PATH_MAX];
	chell_fd_path(path, fd);
	int nfd = chell_internal_openat(AT_FDCWD, path,
					(writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOATIME, 0);
	if (nfd >= 0) {
		*opened = 1;
		return nfd;
	}
	return mapping_fd(fd, writable, opened);
}

/* May this process map the file of fd writable? Asked without opening it
 * (an open, a close and the descriptor window cost ~2 us on every first
 * open of a file): fd itself if it allows writing, else the permission
 * check an O_RDWR open makes (AT_EACCESS: the effective ids; EROFS on a
 * read-only mount). What access() cannot see (an LSM's open hook, a file
 * being executed) makes the first chunk's reopen fail instead; that chunk
 * then falls back to read-only (chunk_slow_locked). -1: ask by reopening
 * (no faccessat2 before Linux 5.8). */
static int may_write(int fd)
{
	int fl = sys_fcntl(fd, F_GETFL, 0);
	if (fl >= 0 && !(fl & O_APPEND) && (fl & O_ACCMODE) == O_RDWR)
		return 1;
	char path[CHELL_FD_PATH_MAX];
	chell_fd_path(path, fd);
	int r = sys_faccessat2(AT_FDCWD, path, W_OK, AT_EACCESS);
	return r == 0 ? 1 : r == -ENOSYS ? -1 : 0;
}

/*
 * Reopening through /proc may briefly hold a low descriptor number (when the
 * application has free ones below its limit). A fork in
 * another thread at that moment would leave it open in the child, where the
 * application never opened it; so the window runs under the descriptor-table
 * lock, which fork() takes too. (Lock order: descriptor table, then maps.)
 */
struct direct_map *direct_map_get(int fd, uint64_t dev, uint64_t ino, int want_write, int *err)
{
	fdt_lock();
	struct direct_map *m = direct_map_get_locked(fd, dev, ino, want_write, err);
	fdt_unlock();
	return m;
}

static struct direct_map *direct_map_get_locked(int fd, uint64_t dev, uint64_t ino, int want_write,
						int *err)
{
	pthread_mutex_lock(&maps_lock);
	struct direct_map *m;
	for (m = maps; m; m = m->next)
		if (m->dev == dev && m->ino == ino)
			break;
	if (m) {
		m->refs++;
		pthread_mutex_unlock(&maps_lock);
		return m;
	}
	/* Can this process map the file read-write? Then every descriptor can
	 * share one writable mapping; otherwise read-only (or not at all). */
	int opened = 0, writable = may_write(fd), mfd;
	if (writable > 0) {
		mfd = fd; /* allowed: the first chunk's reopen has the last word */
	} else {
		mfd = writable < 0 ? mapping_fd(fd, 1, &opened) : -EACCES;
		writable = mfd >= 0;
		if (mfd < 0)
			mfd = mapping_fd(fd, 0, &opened);
	}
	if (mfd < 0) {
		pthread_mutex_unlock(&maps_lock);
		*err = mfd;
		return NULL; /* e.g. write-only and unreadable: the kernel path serves it */
	}
	if (opened)
		sys_close(mfd);
	m = calloc(1, sizeof(*m));
	if (!m) {
		pthread_mutex_unlock(&maps_lock);
		*err = -ENOMEM;
		return NULL;
	}
	m->dev = dev;
	m->ino = ino;
	m->refs = 1;
	m->writable = writable;
	m->map_sync = direct_map_sync_mode; /* 1 = not known yet: try it on the first chunk */
	atomic_init(&m->kernel_reads_left, direct_map_after);
	m->persist = mapped_persist();
	m->next = maps;
	maps = m;
	pthread_mutex_unlock(&maps_lock);
	if (want_write && !writable)
		*err = -EACCES;
	return m;
}

static void unmap_chunk(struct mapped_chunk *e, void *arg)
{
	munmap(e->base, (size_t)1 << direct_chunk_shift);
}

void direct_map_put(struct direct_map *m)
{
	pthread_mutex_lock(&maps_lock);
	if (--m->refs > 0) {
		pthread_mutex_unlock(&maps_lock);
		return;
	}
	for (struct direct_map **pp = &maps; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	pthread_mutex_unlock(&maps_lock);
	size_t chunk = (size_t)1 << direct_chunk_shift;
	mapped_table_each(&m->chunks, unmap_chunk, NULL);
	mapped_table_free(&m->chunks);
	for (size_t i = 0; i < m->nreserved; i++)
		munmap(m->reserved[i], chunk);
	free(m->reserved);
	free(m);
}

/*
 * Leases count the inode's open files (mapped.h), and every chunk mapping
 * holds the file it was mapped from (a writable reopen behind a read-only
 * descriptor, or an application descriptor the application may close). So
 * each chunk is replaced, at the same address, by an inaccessible anonymous
 * reservation: the file references go, and a copy still in flight in
 * another thread faults into its guard (the kernel then serves it) instead
 * of touching memory reused for something else. The slots are cleared and
 * the retired map maps nothing again: every descriptor of the file in this
 * process is served by the kernel at its offsets from now on, and a new
 * descriptor of it finds this map (no reopen that could break the lease)
 * until the last one is closed.
 */
static void retire_chunk(struct mapped_chunk *e, void *arg)
{
	struct direct_map *m = arg;
	size_t chunk = (size_t)1 << direct_chunk_shift;
	void *a = atomic_load(&e->base);
	atomic_store(&e->base, NULL);
	void **r = realloc(m->reserved, (m->nreserved + 1) * sizeof(*r));
	void *p = REAL(mmap64)(a, chunk, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
			       -1, 0);
	if (!r || p == MAP_FAILED) {
		/* cannot keep the address: let it go (a racing copy may then
		 * fault, guarded, or see reused memory only if it was still in
		 * flight) */
		if (r)
			m->reserved = r;
		munmap(a, chunk);
		return;
	}
	m->reserved = r;
	m->reserved[m->nreserved++] = p;
}

void direct_map_retire(uint64_t dev, uint64_t ino)
{
	pthread_mutex_lock(&maps_lock);
	struct direct_map *m;
	for (m = maps; m; m = m->next)
		if (m->dev == dev && m->ino == ino)
			break;
	if (!m || m->retired) {
		pthread_mutex_unlock(&maps_lock);
		return;
	}
	m->retired = 1;
	mapped_table_each(&m->chunks, retire_chunk, m);
	pthread_mutex_unlock(&maps_lock);
}

static unsigned char *chunk_slow_locked(struct direct_map *m, int fd, uint64_t k);

unsigned char *direct_map_chunk_slow(struct direct_map *m, int fd, uint64_t k)
{
	if (k >= MAPPED_MAX_CHUNKS)
		return NULL;
	fdt_lock(); /* see direct_map_get */
	unsigned char *r = chunk_slow_locked(m, fd, k);
	fdt_unlock();
	return r;
}

static unsigned char *chunk_slow_locked(struct direct_map *m, int fd, uint64_t k)
{
	size_t chunk = (size_t)1 << direct_chunk_shift;
	pthread_mutex_lock(&maps_lock);
	if (m->retired)
		goto fail; /* a lease: the kernel serves the file (direct_map_retire) */
	struct mapped_chunk *slot = mapped_chunk_make(&m->chunks, k);
	if (!slot)
		goto fail;
	if (!atomic_load(&slot->base)) {
		int opened;
		int mfd = chunk_fd(fd, m->writable, &opened);
		if (mfd < 0 && m->writable && !m->chunks_mapped) {
			/* may_write() said yes, the open says no: read-only */
			m->writable = 0;
			mfd = chunk_fd(fd, 0, &opened);
		}
		if (mfd < 0)
			goto fail;
		/* Dense if the kernel finds no hole before the chunk's end (or EOF).
		 * st_blocks proves nothing (fallocated-but-unwritten pages count
		 * as allocated, yet are holes), so ask SEEK_HOLE - but a probe
		 * walks the page cache up to the next hole, so remember the data
		 * extent it found: later chunks inside it need no probe. */
		uint64_t lo = k << direct_chunk_shift;
		struct stat st;
		bool dense = false;
		if (sys_fstat(mfd, &st) < 0 || st.st_dev != m->dev || st.st_ino != m->ino) {
			/* fd was closed and its number reused by another file while a
			 * call was still in flight: never map that file here */
			if (opened)
				sys_close(mfd);
			goto fail;
		}
		if ((uint64_t)st.st_size > lo) {
			uint64_t hi = lo + chunk < (uint64_t)st.st_size ? lo + chunk : (uint64_t)st.st_size;
			if (m->extent_gen == m->hole_gen && lo >= m->data_lo && hi <= m->data_hi) {
				dense = true;
			} else {
				off_t hole = sys_lseek(mfd, (off_t)lo, SEEK_HOLE);
				if (hole >= 0 && (uint64_t)hole >= hi) {
					dense = true;
					m->data_lo = lo;
					m->data_hi = (uint64_t)hole;
					m->extent_gen = m->hole_gen;
				}
			}
		}
		int prot = PROT_READ | (m->writable ? PROT_WRITE : 0);
		int flags = MAP_SHARED | (direct_populate && dense ? MAP_POPULATE : 0);
		void *p = MAP_FAILED;
		if (m->map_sync && m->writable) {
			p = REAL(mmap64)(NULL, chunk, prot, flags | MAP_SHARED_VALIDATE | MAP_SYNC, mfd,
					 (off_t)(k << direct_chunk_shift));
			if (p == MAP_FAILED && direct_map_sync_mode == 2)
				chell_log("direct: MAP_SYNC refused (%s); direct.map_sync=on needs DAX",
					  strerror(errno));
			m->map_sync = p != MAP_FAILED ? 2 : 0; /* 2: known to work */
		}
		if (p == MAP_FAILED)
			p = REAL(mmap64)(NULL, chunk, prot, flags, mfd, (off_t)(k << direct_chunk_shift));
		if (opened)
			sys_close(mfd);
		if (p == MAP_FAILED)
			goto fail;
		DSTAT(mmaps, 1);
		m->chunks_mapped++;
		atomic_store_explicit(&m->kernel_reads_left, 0, memory_order_relaxed);
		/* the flag before the address: a reader that sees the address
		 * sees the flag it was mapped with */
		atomic_store_explicit(&slot->flags, dense ? 0 : DIRECT_SPARSE, memory_order_relaxed);
		atomic_store_explicit(&slot->base, (unsigned char *)p, memory_order_release);
	}
	pthread_mutex_unlock(&maps_lock);
	return atomic_load(&slot->base);
fail:
	pthread_mutex_unlock(&maps_lock);
	return NULL;
}

static void mark_sparse(struct mapped_chunk *e, void *arg)
{
	atomic_fetch_or(&e->flags, DIRECT_SPARSE);
}

void direct_map_mark_all_sparse(struct direct_map *m)
{
	mapped_table_each(&m->chunks, mark_sparse, NULL);
}

void direct_map_set_dense(struct direct_map *m, uint64_t off)
{
	struct mapped_chunk *e = direct_entry(m, off);
	if (e && atomic_load(&e->base))
		atomic_fetch_and(&e->flags, ~DIRECT_SPARSE);
}
