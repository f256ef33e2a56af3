/* SPDX-License-Identifier: MIT */
/*
 * Per-process state of cached files: the registration with the manager and
 * the table (chunk -> mapping of its chunk file), modeled on direct/map.c.
 *
 * One struct cache_file per backing file (dev, ino) open in the process,
 * shared by every descriptor of it. The two-level table finds a chunk's
 * mapping with two loads and is never reallocated, so hits take no lock.
 * An entry, once mapped, keeps its address until the file's last
 * descriptor in the process goes: a new chunk file for the same (file,
 * chunk) - after an eviction, or to upgrade a read-only mapping - is mapped
 * over the old one with MAP_FIXED. A racing copy therefore only ever sees a
 * chunk file of this (file, chunk), and its identity check (copy.c) catches
 * the switch; an unmapped hole that another mmap could reuse never appears.
 *
 * Registration (OPEN_FILE) is lazy, per connection, and uses a descriptor
 * reopened through /proc/thread-self/fd: the kernel checks the process's access
 * again on the reopen, so it proves access like the application's own
 * descriptor would, and the manager never holds the application's open
 * file description (its OFD and flock locks, its O_APPEND, its offset stay
 * the application's). A writable descriptor is reopened O_RDWR, since
 * there is no write-only mapping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache.h"
#include "common/fdpass.h"


int cache_dax;
bool cache_pool_in_memory;
static int dax_known;
static struct cache_file *files; /* under cache_lock */
static _Atomic int reg_fd = -1;   /* a reopened descriptor in flight (fork child closes it) */

struct cache_file *cache_file_get(uint64_t dev, uint64_t ino, uint64_t size)
{
	cache_lock();
	struct cache_file *cf;
	for (cf = files; cf; cf = cf->next)
		if (cf->dev == dev && cf->ino == ino)
			break;
	if (!cf) {
		cf = calloc(1, sizeof(*cf));
		if (cf) {
			cf->dev = dev;
			cf->ino = ino;
			cf->synced_size = size;
			cf->zc_fd = -1;
			cf->next = files;
			files = cf;
		}
	}
	if (cf)
		cf->refs++;
	cache_unlock();
	return cf;
}

static void counts_take(struct cache_file *cf, struct chelld_client_counts *out)
{
	uint64_t *o = (uint64_t *)out;
	for (int i = 0; i < 6; i++)
		o[i] = atomic_exchange_explicit(&cf->counts.v[i], 0, memory_order_relaxed);
}

/* End this connection's registrations of cf (caller holds cache_lock). */
static void unregister(struct cache_file *cf)
{
	if (cf->conn_gen != cache_conn_gen || cf->conn_gen == 0)
		cf->nregs = 0; /* made on a connection that is gone */
	for (; cf->nregs > 0; cf->nregs--) {
		struct chelld_close m = {0};
		struct chelld_rhdr r;
		m.file_id = cf->file_id;
		counts_take(cf, &m.counts); /* once: the rest are zeros */
		if (cache_call(&m, sizeof(m), CHELLD_MSG_CLOSE, -1, &r, sizeof(r), NULL) < 0)
			break;
	}
	cf->nregs = 0;
	cf->file_id = 0;
	cf->access = 0;
}

static void unmap_chunk(struct mapped_chunk *e, void *arg)
{
	munmap(e->base, CACHE_CHUNK_FILE_BYTES);
}

void cache_file_put(struct cache_file *cf)
{
	cache_lock();
	if (--cf->refs > 0) {
		cache_unlock();
		return;
	}
	for (struct cache_file **pp = &files; *pp; pp = &(*pp)->next)
		if (*pp == cf) {
			*pp = cf->next;
			break;
		}
	unregister(cf);
	cache_unlock();
	cache_lent_forget(cf); /* before the table's own mappings go */
	mapped_table_each(&cf->chunks, unmap_chunk, NULL);
	mapped_table_free(&cf->chunks);
	free(cf);
}

void cache_map_unreported(struct chelld_client_counts *out)
{
	memset(out, 0, sizeof(*out));
	for (struct cache_file *cf = files; cf; cf = cf->next) {
		struct chelld_client_counts c;
		counts_take(cf, &c);
		uint64_t *o = (uint64_t *)out, *s = (uint64_t *)&c;
		for (int i = 0; i < 6; i++)
			o[i] += s[i];
	}
}

void cache_map_after_fork(void)
{
	/* The registrations were the parent's connection's; so are the counts. */
	int fd = atomic_exchange(&reg_fd, -1);
	if (fd >= 0)
		chell_internal_close(fd);
	for (struct cache_file *cf = files; cf; cf = cf->next) {
		struct chelld_client_counts c;
		counts_take(cf, &c);
		cf->nregs = 0;
		cf->file_id = 0;
		cf->access = 0;
	}
}

static bool registered(const struct cache_file *cf, uint32_t gen, uint32_t need)
{
	return cf->conn_gen == gen && cf->nregs > 0 && (cf->access & need) == need;
}

/*
 * A descriptor of fd's file for the manager: reopened through /proc with
 * O_RDWR when writing is needed or fd may write, else O_RDONLY. Under the
 * descriptor-table lock (fork takes it too), so a child forked meanwhile
 * never inherits it at a low number; it is moved high and internal.
 */
static int reopen(int fd, uint32_t need)
{
	char p[CHELL_FD_PATH_MAX];
	chell_fd_path(p, fd);
	int fl = sys_fcntl(fd, F_GETFL, 0);
	bool try_rw = (need & CHELLD_ACC_WRITE) || (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY);
	fdt_lock();
	/* never at the cost of one of the application's descriptors */
	int nfd = try_rw ? chell_internal_openat(AT_FDCWD, p, O_RDWR | O_CLOEXEC | O_NOCTTY, 0) : -EACCES;
	if (nfd < 0 && !(need & CHELLD_ACC_WRITE))
		nfd = chell_internal_openat(AT_FDCWD, p, O_RDONLY | O_CLOEXEC | O_NOCTTY, 0);
	if (nfd >= 0) {
		nfd = chell_internal_fd(nfd, 1);
		atomic_store(&reg_fd, nfd);
	}
	fdt_unlock();
	return nfd;
}

static void reopen_done(int nfd)
{
	if (nfd >= 0) {
		int expect = nfd;
		atomic_compare_exchange_strong(&reg_fd, &expect, -1);
		chell_internal_close(nfd);
	}
}

/* OPEN_FILE with descriptor rfd (caller holds cache_lock, connected). */
static int register_locked(struct cache_file *cf, int rfd, uint32_t gen)
{
	char link[CHELL_FD_PATH_MAX], path[CHELLD_PATH_MAX];
	ssize_t n = sys_readlink(chell_fd_path(link, rfd), path, sizeof(path) - 1);
	if (n <= 0 || path[0] != '/')
		return CACHE_MISS_KERNEL;
	static struct chelld_open m; /* 4 KB: not on the stack; cache_lock guards it */
	memset(&m, 0, sizeof(m));
	memcpy(m.path, path, (size_t)n);
	struct chelld_open_reply r;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_OPEN_FILE, rfd, &r, sizeof(r), NULL);
	if (e < 0)
		return e;
	if (r.r.status || (r.flags & CHELLD_FILE_BYPASS) || r.dev != cf->dev || r.ino != cf->ino) {
		if (r.r.status == 0) { /* registered, but not to be cached: end it */
			struct chelld_close cm = {0};
			struct chelld_rhdr cr;
			cm.file_id = r.file_id;
			cache_call(&cm, sizeof(cm), CHELLD_MSG_CLOSE, -1, &cr, sizeof(cr), NULL);
		}
		r.detail[sizeof(r.detail) - 1] = 0;
		chell_info("cache: %s stays on the kernel path: %s%s%s", path,
			   r.r.status ? strerror(r.r.status) : "the manager does not cache it",
			   r.detail[0] ? ": " : "", r.detail);
		CSTAT(bypassed, 1);
		return CACHE_MISS_KERNEL;
	}
	if (cf->conn_gen != gen) {
		cf->nregs = 0;
		cf->access = 0;
	}
	cf->conn_gen = gen;
	cf->file_id = r.file_id;
	cf->access |= r.access;
	atomic_store_explicit(&cf->mode, r.flags & CACHE_MODE_BITS, memory_order_release);
	cf->nregs++;
	return 0;
}

/* Map chunk file mfd at entry (cf, k). Caller holds cache_lock. */
static int install(struct cache_file *cf, uint64_t k, int mfd, int writable)
{
	struct stat st;
	if (sys_fstat(mfd, &st) < 0)
		return -EPROTO;
	struct mapped_chunk *e = mapped_chunk_make(&cf->chunks, k);
	if (!e)
		return -ENOMEM;
	uintptr_t cur = cache_entry_of(cf, k);
	/* A chunk lent for zero-copy keeps its address for the application's
	 * buffer (zerocopy.c): the new mapping goes elsewhere. */
	bool lent = cur && (atomic_load(&e->flags) & CACHE_E_LENT);
	/* The chunk file we have, with enough access? (The inode number alone
	 * is not proof: tmpfs reuses the numbers of unlinked files.) */
	if (cur && e->state == (uint64_t)st.st_ino && (!writable || (cur & CACHE_E_WRITABLE)) &&
	    cache_ctl_live((const unsigned char *)(cur & ~CACHE_E_WRITABLE)))
		return 0;
	void *addr = cur ? (void *)(cur & ~CACHE_E_WRITABLE) : NULL;
	int prot = PROT_READ | (writable ? PROT_WRITE : 0);
	int fixed = cur && !lent ? MAP_FIXED : 0;
	if (lent)
		addr = NULL;
	void *p = MAP_FAILED;
	if (writable && (!dax_known || cache_dax)) {
		p = REAL(mmap64)(addr, CACHE_CHUNK_FILE_BYTES, prot,
				 MAP_SHARED_VALIDATE | MAP_SYNC | fixed, mfd, 0);
		if (!dax_known) {
			dax_known = 1;
			cache_dax = p != MAP_FAILED;
		}
	}
	if (p == MAP_FAILED)
		p = REAL(mmap64)(addr, CACHE_CHUNK_FILE_BYTES, prot, MAP_SHARED | fixed, mfd, 0);
	if (p == MAP_FAILED) {
		if (cur && !lent) {
			/* The old mapping may be gone: keep the range reserved and
			 * inaccessible, so copies fault (a miss) and no other mapping
			 * can appear at this address. */
			REAL(mmap64)(addr, CACHE_CHUNK_FILE_BYTES, PROT_NONE,
				     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
			e->state = 0;
			atomic_fetch_and(&e->flags, ~(uint32_t)CACHE_E_WRITABLE);
		}
		return -ENOMEM;
	}
	CSTAT(mmaps, 1);
	if (cur)
		CSTAT(remaps, 1);
	e->state = (uint64_t)st.st_ino;
	if (writable) /* its directory entry is the manager's to make durable: SYNC */
		atomic_store_explicit(&cf->need_sync, 1, memory_order_release);
	/* The address is the old one (MAP_FIXED) or a new one; the writable
	 * flag is published after the mapping it describes. */
	if (!writable || lent) /* (a new address: not lent, not writable yet) */
		atomic_fetch_and(&e->flags, ~(uint32_t)(CACHE_E_WRITABLE | (lent ? CACHE_E_LENT : 0)));
	atomic_store_explicit(&e->base, (unsigned char *)p, memory_order_release);
	if (writable)
		atomic_fetch_or_explicit(&e->flags, (uint32_t)CACHE_E_WRITABLE, memory_order_release);
	int c = cache_ctl_check(p, cf->dev, cf->ino, k);
	if (c == -EPROTO) {
		chell_log("cache: the manager handed out a chunk file with a bad control page "
			  "(file %llu:%llu chunk %llu)", (unsigned long long)cf->dev,
			  (unsigned long long)cf->ino, (unsigned long long)k);
		e->state = 0; /* never trusted: the copies check it again anyway */
		return -EPROTO;
	}
	return 0; /* -EFAULT: already revoked; the next copy misses again */
}

/*
 * cache_lock held and a connection: its generation (> 0). Otherwise the
 * lock is not held and: -EAGAIN, a manager answered after a wait (try
 * again); -ENOTCONN, no pool exists, so nothing was ever cached and the
 * kernel path is exact; -EIO, no manager came back (conn.c says why the
 * kernel path would not be safe then).
 */
static int lock_connected(void)
{
	cache_lock();
	int gen = cache_conn_ensure();
	if (gen >= 0)
		return gen;
	cache_unlock();
	if (!cache_pool_exists())
		return -ENOTCONN;
	return cache_conn_wait() < 0 ? -EIO : -EAGAIN;
}

/* The exchange of one MAP, with the registration it needs. */
int cache_miss(struct cache_file *cf, int fd, uint64_t k, unsigned first, unsigned n,
	       int want_write)
{
	return cache_miss_batch(cf, fd, k, first, n, want_write, 1, 0);
}

int cache_miss_batch(struct cache_file *cf, int fd, uint64_t k, unsigned first, unsigned n,
		     int want_write, unsigned nchunks, unsigned last_n)
{
	if (nchunks > CHELLD_MAP_BATCH || k + nchunks > CACHE_MAX_CHUNK ||
	    (want_write & CACHE_WANT_OVERWRITE))
		nchunks = 1;
	if (k >= CACHE_MAX_CHUNK)
		return CACHE_MISS_KERNEL;
	uint32_t need = want_write ? CHELLD_ACC_READ | CHELLD_ACC_WRITE : CHELLD_ACC_READ;
	int rfd = -1, r = CACHE_MISS_KERNEL;
	for (int tries = 0; tries < 4; tries++) {
		int gen = lock_connected();
		if (gen == -EAGAIN)
			continue;
		if (gen < 0) {
			r = gen == -EIO ? -EIO : CACHE_MISS_KERNEL;
			break;
		}
		if (!registered(cf, (uint32_t)gen, need)) {
			if (rfd < 0) {
				cache_unlock(); /* reopen takes the table lock: never under ours */
				rfd = reopen(fd, need);
				if (rfd < 0)
					break; /* we may not read (or write) it: the kernel decides */
				continue;
			}
			r = register_locked(cf, rfd, (uint32_t)gen);
			if (r < 0) { /* lost the connection: reconnect once more */
				cache_unlock();
				r = CACHE_MISS_KERNEL;
				continue;
			}
			if (r != 0) {
				cache_unlock();
				break;
			}
		}
		struct chelld_map m = {0};
		struct chelld_map_reply rep;
		int mfds[CHELLD_MAP_BATCH];
		int w = (cf->access & CHELLD_ACC_WRITE) != 0; /* one writable mapping serves all */
		m.file_id = cf->file_id;
		/* OVERWRITE: the blocks are about to be stored whole; a manager
		 * that predates it fills them as for a write (correct, slower) */
		m.want_write = (uint32_t)w | (w && (want_write & CACHE_WANT_OVERWRITE)
						  ? CHELLD_MAP_OVERWRITE : 0) |
			       (want_write ? 0 : CHELLD_MAP_READ);
		m.chunk = k;
		m.first_block = first;
		m.nblocks = n;
		m.nchunks = nchunks;
		m.last_nblocks = nchunks > 1 ? last_n : 0;
		int e = cache_call_fds(&m, sizeof(m), CHELLD_MSG_MAP, -1, &rep, sizeof(rep), mfds,
				       (int)nchunks);
		int mfd = mfds[0];
		if (e < 0) {
			cache_unlock();
			r = CACHE_MISS_KERNEL;
			continue;
		}
		if (rep.r.status == EBADF) { /* the manager forgot the id (restarted?) */
			cf->nregs = 0;
			cf->access = 0;
			cache_unlock();
			fdpass_close(mfds, 0, (int)nchunks);
			continue;
		}
		if (rep.r.status && rep.r.status != EACCES) {
			/* The manager cannot give us the chunk now (ENOSPC: nothing
			 * evictable; EIO: its write-back failed). Other chunks of the
			 * file may hold data the backing file lacks, so the kernel
			 * path would serve stale bytes: the call fails instead. */
			chell_log("cache: map of chunk %llu of %llu:%llu refused: %s",
				  (unsigned long long)k, (unsigned long long)cf->dev,
				  (unsigned long long)cf->ino, strerror(rep.r.status));
			cache_unlock();
			fdpass_close(mfds, 0, (int)nchunks);
			r = -rep.r.status;
			break;
		}
		if (rep.r.status == 0) /* before the mapping it applies to is installed */
			atomic_store_explicit(&cf->mode, rep.flags & CACHE_MODE_BITS,
					      memory_order_release);
		if (rep.r.status == 0 && mfd < 0 && !(rep.flags & CHELLD_FILE_BYPASS) &&
		    (rep.flags & (want_write ? CHELLD_FILE_WAROUND : CHELLD_FILE_SKIP))) {
			/* not through the cache: the caller uses the backing file */
			cache_unlock();
			r = want_write ? CACHE_MISS_AROUND : CACHE_MISS_SKIP;
			break;
		}
		if (rep.r.status || (rep.flags & CHELLD_FILE_BYPASS) || mfd < 0) {
			/* BYPASS: written back and not cached until its last close;
			 * EACCES: this process may not map it so (the kernel decides) */
			if (rep.flags & CHELLD_FILE_BYPASS)
				CSTAT(bypassed, 1);
			cache_unlock();
			fdpass_close(mfds, 0, (int)nchunks);
			r = CACHE_MISS_KERNEL;
			break;
		}
		if (want_write && !(rep.access & CHELLD_ACC_WRITE)) {
			/* our registration grants writing, the manager's answer not:
			 * out of step; never spin on a read-only mapping */
			chell_log("cache: chunk %llu handed out read-only for a write",
				  (unsigned long long)k);
			cache_unlock();
			fdpass_close(mfds, 0, (int)nchunks);
			r = -EIO;
			break;
		}
		e = install(cf, k, mfd, w && (rep.access & CHELLD_ACC_WRITE));
		sys_close(mfd);
		/* The neighbours of a batch: each is a chunk of its own, and one
		 * that cannot be installed is simply asked again on its miss. */
		for (unsigned i = 1; i < nchunks; i++)
			if (mfds[i] >= 0) {
				if (i < rep.nmapped)
					install(cf, k + i, mfds[i], w && (rep.access & CHELLD_ACC_WRITE));
				sys_close(mfds[i]);
				mfds[i] = -1;
			}
		cache_unlock();
		r = e == -EPROTO || e == -ENOMEM ? CACHE_MISS_KERNEL : CACHE_MISS_OK;
		break;
	}
	if (rfd >= 0)
		reopen_done(rfd);
	return r;
}

/* Registered with `need` on the current connection, for the small calls. */
int cache_registered_locked(struct cache_file *cf, int fd, uint32_t need, uint32_t *id)
{
	int rfd = -1, r = CACHE_MISS_KERNEL;
	for (int tries = 0; tries < 3; tries++) {
		int gen = lock_connected();
		if (gen == -EAGAIN)
			continue;
		if (gen < 0) {
			r = gen == -EIO ? -EIO : CACHE_MISS_KERNEL;
			break;
		}
		if (registered(cf, (uint32_t)gen, need)) {
			*id = cf->file_id;
			r = 0;
			break; /* returns holding the lock */
		}
		if (rfd < 0) {
			cache_unlock();
			rfd = reopen(fd, need);
			if (rfd < 0)
				break;
			continue;
		}
		r = register_locked(cf, rfd, (uint32_t)gen);
		if (r == 0) {
			*id = cf->file_id;
			break;
		}
		cache_unlock();
		if (r > 0)
			break;
		r = CACHE_MISS_KERNEL;
	}
	if (rfd >= 0)
		reopen_done(rfd);
	return r; /* 0: cache_lock is held */
}

int cache_register(struct cache_file *cf, int fd, uint32_t need, uint32_t *id)
{
	int r = cache_registered_locked(cf, fd, need, id);
	if (r == 0)
		cache_unlock();
	return r;
}

int cache_flush_file(struct cache_file *cf, int fd, uint32_t flags)
{
	uint32_t id;
	int e0;
	if ((e0 = cache_registered_locked(cf, fd, CHELLD_ACC_READ, &id)))
		return e0 < 0 ? e0 : CACHE_MISS_KERNEL;
	struct chelld_flush m = {0};
	struct chelld_flush_reply r;
	m.file_id = id;
	m.flags = flags;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_FLUSH, -1, &r, sizeof(r), NULL);
	cache_unlock();
	if (e < 0 || r.r.status) {
		chell_info("cache: flush refused: %s", e < 0 ? strerror(-e) : strerror(r.r.status));
		return CACHE_MISS_KERNEL;
	}
	return 0;
}

int cache_truncate_file(struct cache_file *cf, int fd, uint64_t size)
{
	uint32_t id;
	int e0;
	if ((e0 = cache_registered_locked(cf, fd, CHELLD_ACC_READ | CHELLD_ACC_WRITE, &id)))
		return e0 < 0 ? e0 : CACHE_MISS_KERNEL;
	struct chelld_truncate m = {0};
	struct chelld_rhdr r;
	m.file_id = id;
	m.size = size;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_TRUNCATE, -1, &r, sizeof(r), NULL);
	cache_unlock();
	/* EWOULDBLOCK: the manager could not open the file for writing without
	 * breaking a lease; it changed nothing. The kernel's truncate breaks
	 * the lease the way the kernel does (it waits for the holder). */
	if (e < 0 || r.status == EPROTO || r.status == ENOSYS || r.status == EBADMSG ||
	    r.status == EWOULDBLOCK)
		return CACHE_MISS_KERNEL;
	return -r.status;
}

/* SYNC when the file's size differs from the one this process last had
 * recorded (any process of the tree may have grown it: the size is shared)
 * or this process was handed a new chunk file to write since: the manager
 * records the size and makes new chunk files' directory entries durable.
 * Otherwise there is nothing the manager must do, and fsync costs no
 * system call at all. */
int cache_sync_file(struct cache_file *cf, int fd, uint64_t size)
{
	/* A pool in memory (tmpfs, ramfs) survives what it survives - the
	 * death of programs and of chelld, not a power loss - the moment the
	 * stores are done: a directory entry there is as durable as it will
	 * get, and the size is the backing file's, which the kernel's own
	 * write set. Only the manager's record of the file's attributes
	 * would change, and it is taken again at the last close. So SYNC is
	 * for a persistent pool; on a distributed backing store it was a
	 * round trip per transaction (the record is an fstat there). */
	if (cache_pool_in_memory)
		return 0;
	if (!atomic_load_explicit(&cf->need_sync, memory_order_acquire) &&
	    atomic_load_explicit(&cf->synced_size, memory_order_relaxed) == size)
		return 0;
	uint32_t id;
	if (cache_registered_locked(cf, fd, CHELLD_ACC_READ, &id) != 0)
		return CACHE_MISS_KERNEL;
	atomic_store(&cf->need_sync, 0); /* before the call: a racing extension sets it again */
	atomic_store(&cf->synced_size, size);
	struct chelld_sync m = {0};
	struct chelld_rhdr r;
	m.file_id = id;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_SYNC, -1, &r, sizeof(r), NULL);
	cache_unlock();
	CSTAT(syncs, 1);
	if (e < 0 || r.status) {
		atomic_store(&cf->need_sync, 1);
		return e < 0 ? CACHE_MISS_KERNEL : -r.status;
	}
	return 0;
}

/* OVERWRITE: blocks [first, first+n) of chunk k were stored whole into the
 * chunk file (slot, incarnation) while invalid; the manager validates them
 * and marks them dirty. 0 done; anything else (EAGAIN: a fill raced, the
 * chunk file changed; an old manager; no connection): redo normally. */
static uint32_t no_overwrite_gen; /* connection whose manager predates OVERWRITE */

bool cache_overwrite_ok(void)
{
	return __atomic_load_n(&no_overwrite_gen, __ATOMIC_RELAXED) != cache_conn_gen ||
	       cache_conn_gen == 0;
}

int cache_overwrite(struct cache_file *cf, uint64_t k, uint32_t slot, uint64_t incarnation,
		    unsigned first, unsigned n)
{
	cache_lock();
	if (cache_conn_ensure() != (int)cf->conn_gen || cf->nregs == 0 ||
	    !(cf->access & CHELLD_ACC_WRITE)) {
		cache_unlock();
		return -EAGAIN; /* registered on another connection: redo normally */
	}
	struct chelld_overwrite m = {0};
	struct chelld_rhdr r;
	m.file_id = cf->file_id;
	m.slot = slot;
	m.chunk = k;
	m.incarnation = incarnation;
	m.first_block = first;
	m.nblocks = n;
	int e = cache_call(&m, sizeof(m), CHELLD_MSG_OVERWRITE, -1, &r, sizeof(r), NULL);
	if (e == 0 && (r.status == ENOSYS || r.status == EBADMSG))
		__atomic_store_n(&no_overwrite_gen, cache_conn_gen, __ATOMIC_RELAXED);
	cache_unlock();
	return e < 0 ? e : -r.status;
}
