/* SPDX-License-Identifier: MIT */
/*
 * The cache handler (Chell-Cache / Bankshot, the client side): files under
 * the cache's backing directories are read and written with memcpy on
 * chunks of the cache pool that chelld maps into the process; a miss (no
 * mapping, blocks not valid yet, a revoked chunk) asks chelld. The contract
 * with the manager is cache/layout.h and chelld/protocol.h; docs/CACHE.md
 * ("The client") explains the design.
 *
 *   cache.c   the handler operations (offsets, sizes, O_APPEND, fallbacks)
 *   xfer.c    moving bytes between iovecs and the cache, chunk by chunk
 *   conn.c    the connection to chelld (one per process, lazily made)
 *   map.c     per-process files: registration and (chunk -> mapping) table
 *   copy.c    the hit protocol on one chunk, guarded against SIGBUS
 *   fast.c    the shortcut for read/pread/write/pwrite of one buffer
 *   stats.c   per-thread counters
 *
 * It sits on the mapped-file base (../mapped/base.h): offsets, sizes (a
 * size every process of the tree sees, refreshed from the kernel at the
 * cached end of file, and the tree-wide lock for extensions and O_APPEND),
 * argument checks, the chunk table, the fault guard and the counters are
 * the base's; this folder is the cache's policy (chunks of the pool, the
 * manager on a miss).
 */
#ifndef CHELL_CACHE_HANDLER_H
#define CHELL_CACHE_HANDLER_H

#include "../../nib/nib.h"
#include "../mapped/base.h"
#include "cache/layout.h"
#include "cache/policy/policy.h"
#include "chelld/protocol.h"

/* ---- conn.c: the connection to the manager ---- */
struct cache_hello {
	uint64_t cache_size;
	uint64_t append_threshold;
	uint32_t slots;
	uint32_t flags; /* CHELLD_HELLO_* */
};
/* Serialises every exchange with the manager and every change of the
 * mapping tables (the slow path). Lock order: fdt_lock, then this. */
void cache_lock(void);
void cache_unlock(void);
/* Connect if needed (caller holds cache_lock). Returns the connection's
 * generation (>0), or -errno when no manager answers (logged once). */
int cache_conn_ensure(void);
/* The pool directory holds a cache (DIR/meta.pool exists). */
bool cache_pool_exists(void);
/* No connection while the pool exists: wait for a manager (up to 30 s),
 * then -EIO. The connection generation, or -EIO. Without cache_lock. */
int cache_conn_wait(void);
/* One request/reply on the connection (caller holds cache_lock). fd >= 0 is
 * sent along; *fd_out (if not NULL) gets a descriptor sent back. 0 with the
 * reply's status in rep->status, or -errno when the connection failed (it
 * is then closed; the next cache_conn_ensure reconnects). */
int cache_call(void *req, size_t reqlen, uint16_t type, int fd, void *rep, size_t replen,
	       int *fd_out);
/* The same, up to nfds descriptors (fds_out gets -1 where none came). */
int cache_call_fds(void *req, size_t reqlen, uint16_t type, int fd, void *rep, size_t replen,
		   int *fds_out, int nfds);
extern struct cache_hello cache_hello;
extern uint32_t cache_conn_gen;       /* changes on every (re)connection */
extern access_table cache_access;     /* this connection's, nchunks 0 if none */
/* A hit at byte `in` of the chunk in `slot`: its 64 KB group's byte in the
 * access table (one load, and a store if it was clear). */
static inline void cache_hit_mark(uint32_t slot, size_t in)
{
	uint64_t i = (uint64_t)slot * CHELLD_ACCESS_GROUPS + (in >> CHELLD_ACCESS_GROUP_SHIFT);
	if (i < cache_access.nchunks)
		access_mark(&cache_access, (uint32_t)i);
}
void cache_conn_after_fork(void);     /* in the child: never use the parent's socket */
void cache_conn_bye(void);            /* at exit: report counters, say goodbye */
/* Backing directories of the running manager (PATH), for routing checks;
 * NULL-terminated, or NULL when unknown. Caller holds cache_lock. */
char **cache_conn_backings(void);
extern char cache_sock_path[108]; /* sizeof(sockaddr_un.sun_path) */

/* ---- locks.c: byte-range locks on node-local stand-ins (docs/CACHE.md, Locks) ---- */
int cache_locks_init(const char *pool);
/* The OFD was opened on a file under a backing directory; shared: under
 * cache.shared (the backing file's locks then apply). */
void cache_locks_opened(chell_ctx *c, bool shared);
void cache_locks_adopt(chell_ctx *c);
bool cache_locks_cmd(int cmd);
/* *done false: not served here (the kernel's locks); else the result. */
int cache_locks_fcntl(chell_ctx *c, int cmd, unsigned long arg, bool *done);
void cache_locks_close(chell_ctx *c);
int cache_locks_append(chell_ctx *c, short type);
void cache_locks_detach(chell_ctx *c);
void cache_locks_fork_prepare(void);

/* ---- map.c: per-process files and their chunk mappings ---- */
#define CACHE_MAX_CHUNK MAPPED_MAX_CHUNKS
/* A chunk's record (mapped_chunk): its mapping (chunk data, then its
 * control page), flagged CACHE_E_WRITABLE when mapped writable, and in
 * `state` the inode of the chunk file mapped there (slow path). The address
 * of (file, chunk) never changes once mapped: a new chunk file for the same
 * (file, chunk) replaces the old one in place (MAP_FIXED), so a racing copy
 * can only ever see chunk files of this very (file, chunk) and detects the
 * switch by the control page's identity. */
#define CACHE_E_WRITABLE ((uintptr_t)1)
/* Lent to the application for zero-copy (zerocopy.c): never mapped over. */
#define CACHE_E_LENT 2u
struct cache_counts {
	_Atomic uint64_t v[6]; /* struct chelld_client_counts order */
};
struct cache_file {
	uint64_t dev, ino;
	int refs;               /* chell_files of this process using it (cache_lock) */
	uint32_t conn_gen;      /* connection of the registration below */
	uint32_t file_id;       /* valid while nregs > 0 (0 is a valid id) */
	uint32_t access;        /* CHELLD_ACC_* of the registration(s) */
	uint32_t nregs;         /* registrations on conn_gen, one CLOSE each */
	_Atomic uint32_t need_sync; /* grown, or given a new chunk to write, since the last SYNC */
	_Atomic uint64_t synced_size; /* the size at this process's last SYNC (or first open) */
	struct cache_counts counts;
	struct cache_file *next;
	int zc_fd;              /* the backing file, read-only, once a chunk was lent (zerocopy.c) */
	_Atomic uint32_t mode;  /* CACHE_MODE_BITS of the last reply about it (modes.c) */
	_Atomic int fuse;       /* the backing file is on FUSE: 0 unknown, 1 yes, 2 no (cache.c, publish) */
	struct mapped_table chunks;
};
/* size: the file's size now (a new entry starts from it as "synced"). */
struct cache_file *cache_file_get(uint64_t dev, uint64_t ino, uint64_t size);
void cache_file_put(struct cache_file *cf);

/* Chunk k's mapping, with CACHE_E_WRITABLE or'ed in when it is writable;
 * 0 if not mapped. (The flag is set only after a writable mapping is in
 * place; a stale one makes a store fault, which the hit protocol's guard
 * turns into a miss.) */
static inline uintptr_t cache_entry_of(struct cache_file *cf, uint64_t k)
{
	struct mapped_chunk *e = mapped_chunk_of(&cf->chunks, k);
	if (unlikely(!e))
		return 0;
	uintptr_t base = (uintptr_t)atomic_load_explicit(&e->base, memory_order_acquire);
	return base ? base | (atomic_load_explicit(&e->flags, memory_order_acquire) & CACHE_E_WRITABLE) : 0;
}

/* Results of the miss path. AROUND: a write the manager wants on the
 * backing file (write-around, read-only: modes.c); SKIP: a read to serve
 * from the backing file (sequential cutoff). */
enum { CACHE_MISS_OK = 0, CACHE_MISS_KERNEL = 1, CACHE_MISS_AROUND = 2, CACHE_MISS_SKIP = 3 };
/* Make blocks [first, first+n) of chunk k valid and mapped (writable if
 * want_write), on behalf of descriptor fd. CACHE_MISS_OK, CACHE_MISS_KERNEL
 * (the manager says BYPASS, refuses the file, or does not answer: the
 * descriptor must use the kernel path), or -errno. */
int cache_miss(struct cache_file *cf, int fd, uint64_t k, unsigned first, unsigned n,
	       int want_write);
/* The same for a read across neighbouring chunks: chunks k..k+nchunks-1
 * (at most CHELLD_MAP_BATCH), the first with blocks [first, first+n), the
 * middle whole, the last with [0, last_n), in one round trip. The result
 * is chunk k's; the others are installed when the manager could map them. */
int cache_miss_batch(struct cache_file *cf, int fd, uint64_t k, unsigned first, unsigned n,
		     int want_write, unsigned nchunks, unsigned last_n);
/* want_write bit: the blocks will be stored whole (no fill needed). */
#define CACHE_WANT_OVERWRITE 2
int cache_overwrite(struct cache_file *cf, uint64_t k, uint32_t slot, uint64_t incarnation,
		    unsigned first, unsigned n);
/* false once the manager of this connection answered OVERWRITE with
 * "unknown message" (an older chelld): writes then fill as before. */
bool cache_overwrite_ok(void);
/* Make sure the file is registered on the current connection with at
 * least `need` access (CHELLD_ACC_*): 0, CACHE_MISS_KERNEL, or -errno.
 * Caller holds cache_lock; *id gets the file id. */
int cache_register(struct cache_file *cf, int fd, uint32_t need, uint32_t *id);
/* Ask the manager to flush the file (CHELLD_FLUSH_* flags). 0, or
 * CACHE_MISS_KERNEL if it cannot be reached or refuses. */
int cache_flush_file(struct cache_file *cf, int fd, uint32_t flags);
/* ensure_registered: registered with `need` on the current connection;
 * 0 with cache_lock held and *id set, else CACHE_MISS_KERNEL or -errno
 * (lock not held). */
int cache_registered_locked(struct cache_file *cf, int fd, uint32_t need, uint32_t *id);
/* TRUNCATE through the manager: 0, -errno from it, or CACHE_MISS_KERNEL. */
int cache_truncate_file(struct cache_file *cf, int fd, uint64_t size);
/* SYNC if this process got a new chunk to write since its last one, or the
 * size (shared by the tree: `size`) differs from the one it last synced. */
int cache_sync_file(struct cache_file *cf, int fd, uint64_t size);
void cache_map_after_fork(void);
/* Counts of the files still open (for BYE). Caller holds cache_lock. */
void cache_map_unreported(struct chelld_client_counts *out);
/* Mapped on DAX with MAP_SYNC: stores are flushed as written, through
 * the persistence core's operations (taken once, copy.c). */
extern int cache_dax;
/* cache.pool is on tmpfs or ramfs (set at start-up): fsync has nothing to
 * make durable there (cache_sync_file). */
extern bool cache_pool_in_memory;
extern const struct chell_persist_ops *cache_persist;

/* ---- modes.c: cache modes per backing directory (chelld/modes.c) ---- */
#define CACHE_MODE_BITS (CHELLD_FILE_WTHROUGH | CHELLD_FILE_WAROUND)
/* The file's mode bits (registering it first if needed: the manager
 * decides); 0 (write-back) when the manager does not cache it. */
uint32_t cache_file_mode(struct cache_file *cf, int fd);
/* At open: does the manager decline to cache the file (pass-through, the
 * per-file cap)? Asked only of a manager that says it may (HELLO). */
bool cache_declined_at_open(struct cache_file *cf, int fd);
/* The manager's mode of the file as this process last heard it. */
static inline uint32_t cache_mode_hint(struct cache_file *cf)
{
	return atomic_load_explicit(&cf->mode, memory_order_acquire);
}
/* A write around the cache: bytes [skip, n) of the iovecs written to the
 * backing file at pos + skip on the descriptor, the shared size moved
 * (caller holds the inode lock when it extends), then INVAL of the
 * range. The kernel's count or error. */
ssize_t cache_write_around(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos,
			   size_t skip, size_t n);
/* A read around the cache (SKIP): [off, off+len) of the backing file into
 * u; bytes past its end are zeros (the caller clamped to the size). */
int cache_read_around(int fd, unsigned char *u, size_t len, uint64_t off);
/* cache.c: the kernel moves bytes [skip, n) of the iovecs at pos + skip
 * (rwf: preadv2/pwritev2 flags). */
ssize_t cache_kernel_rest(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos,
			  size_t skip, size_t n, int to_file, int rwf);

/* ---- copy.c: the hit protocol on one chunk (layout.h) ---- */
enum { COPY_HIT = 1, COPY_MISS = 0, COPY_EFAULT = -1 };
/* Read [off, off+n) of the chunk mapped at base into dst: COPY_HIT when the
 * chunk was LIVE, of one identity and every block valid throughout;
 * COPY_MISS when not (or it faulted: a revoked, truncated chunk file);
 * COPY_EFAULT when dst is a bad address. *slot gets the slot on a hit. */
int cache_copy_out(void *dst, const unsigned char *base, size_t off, size_t n, uint32_t *slot);
/* Store src into [off, off+n) of a writable chunk: the write half of the
 * protocol (valid blocks, store, dirty mark, fence, still LIVE). */
int cache_copy_in(unsigned char *base, size_t off, const void *src, size_t n, uint32_t *slot,
		  uint64_t ext_end);
/* Store src into whole blocks [off, off+n) (block-aligned) of a writable
 * chunk that are all still invalid, without marking them (the manager
 * validates them on OVERWRITE): COPY_HIT with the chunk file's slot and
 * incarnation, COPY_MISS when it is not LIVE or some block is valid,
 * COPY_EFAULT on a bad buffer. */
int cache_copy_overwrite(unsigned char *base, size_t off, const void *src, size_t n,
			 uint32_t *slot, uint64_t *incarnation, uint64_t ext_end);
/* ext_end (both): 0, or the file offset where the bytes stored end when
 * they extend the file: the chunk's ext_end is raised to it before the
 * store (cache/layout.h, "Extending writes"). */
/* Put the ext_end mark of the chunk mapped at base back to `to` if it still
 * holds `expect` (a publication failed: cache.c, "Extending writes"). */
void cache_ext_lower(const unsigned char *base, uint64_t expect, uint64_t to);
/* Check a freshly mapped chunk's control page (magic, version, dirty
 * table); 0 or -EPROTO, -EFAULT if it faults. */
int cache_ctl_check(const unsigned char *base, uint64_t dev, uint64_t ino, uint64_t chunk);
/* 1 if the chunk mapped at base is LIVE (0 if revoked, or it faults). */
int cache_ctl_live(const unsigned char *base);
/* Bytes of the application's buffer [p, p+n) that can be read before the
 * first page that faults (n when all can): how much of a write the kernel
 * would have copied. */
size_t cache_user_readable(const void *p, size_t n);
int cache_copy_init(void);

/* ---- zerocopy.c: zero-copy reads on a hit ---- */
ssize_t cache_get_read_buf(chell_ctx *c, const void **buf, size_t count);
/* The fault hook's part: a SIGBUS at addr in a lent chunk the manager
 * revoked is repaired (the backing file mapped there): true. */
bool cache_lent_fault(int sig, const void *addr);
/* The file leaves the cache for a lease: every lent chunk gets the
 * backing file's bytes now, and the descriptor kept for that goes. */
void cache_lent_settle(struct cache_file *cf);
/* At the file's last close in the process (caller holds no lock). */
void cache_lent_forget(struct cache_file *cf);

/* ---- counters (mapped/stats.c) ---- */
#define CSTAT(field, n) MSTAT(MAPPED_STATS_CACHE, field, n)
static inline struct mapped_stats *cache_stats_tls(void)
{
	return mapped_stats_tls(MAPPED_STATS_CACHE);
}
/* Per-file counts for CLOSE (relaxed: statistics may drop a racing add). */
static inline void cache_count(struct cache_file *cf, int i, uint64_t n)
{
	atomic_store_explicit(&cf->counts.v[i],
			      atomic_load_explicit(&cf->counts.v[i], memory_order_relaxed) + n,
			      memory_order_relaxed);
}
enum { CNT_RHIT, CNT_WHIT, CNT_RMISS, CNT_WMISS, CNT_RBYTES, CNT_WBYTES };

/* ---- cache.c (per-OFD and per-process state: mapped/base.h) ---- */
extern const struct chell_handler chell_cache_handler;
extern const struct chell_fast_ops cache_fast_ops;

/* ---- xfer.c ---- */
/* Move n bytes between the iovecs and the file at pos (to_file: write).
 * Returns bytes moved or -errno; *kernel 1 when the descriptor must go
 * to the kernel path from now on, 2 when the rest of a write must go
 * around the cache (write-around, read-only: modes.c) (the bytes not
 * moved are for the caller to pass down). */
ssize_t cache_transfer(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n,
		       int to_file, int *kernel);
/* to_file value for a write that extends the file: the pieces past its
 * published size raise their chunk's ext_end (copy.c). */
#define CACHE_XFER_EXTEND MAPPED_XFER_EXTEND

#endif
