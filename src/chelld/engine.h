/* SPDX-License-Identifier: MIT */
/*
 * The cache engine of chelld: the pool (meta region + chunk files), the
 * files it caches, fills, eviction with revocation, write-back, the
 * cleaner and recovery. The server's worker threads and the cleaner
 * hold engine.lock while they touch this state and drop it only for
 * device I/O, with the slot marked (filling, busy, revoking) so that
 * nothing else frees or refills it meanwhile: a fill of one chunk never
 * holds up a miss on another. Clients touch only the chunk files' control
 * pages (atomics, cache/layout.h) and their access tables.
 */
#ifndef CHELLD_ENGINE_H
#define CHELLD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/layout.h"
#include "cache/meta/meta.h"
#include "cache/policy/policy.h"
#include "chell/pmem.h"
#include "chelld/chelld.h"

/* ---- pool.c (library chelld_pool: also for `chell cache check`) ---- */

struct pool {
	char *dir;          /* the pool directory */
	struct meta *m;
	int chunks_fd;      /* O_DIRECTORY of DIR/chunks */
	uint32_t nslots;
	uint32_t max_cnodes;
	uint64_t capacity;  /* bytes of tmpfs the pool may use (see pool_open) */
	bool created;       /* a new pool */
	bool resized;       /* the stored slot count does not fit the size asked */
};

/* Geometry: a slot per POOL_SLOT_BYTES of the pool (capped), so a pool
 * holds many more chunks than size / 2 MB and a scattered hot set keeps
 * its blocks: chunk files are sparse, and the capacity is counted in
 * filled 4 KB blocks (chunk.c: engine_make_room), not in slots. Pools made
 * before this (size / 2 MB slots) open as they are. */
#define POOL_SLOT_BYTES (256u << 10)
#define POOL_MAX_SLOTS (1u << 20)
uint32_t pool_slots_for(uint64_t size);

/* What the chunk file of a mapped slot says (pool_check_chunk). */
enum pool_chunk_verdict {
	POOL_CHUNK_OK = 0,     /* LIVE or REVOKED, identity matches the meta */
	POOL_CHUNK_UNUSED = 1, /* missing, empty, INIT or another incarnation:
				* never handed out (or its eviction finished) */
};

/* Open (or, with want_size > 0 and no meta.pool, create) the pool in dir:
 * meta.pool (recovered: unfinished transactions undone, then meta_check),
 * chunks/, and every mapped slot's control page checked. want_size 0 opens
 * only. The capacity is the size asked (at most what the slots can hold;
 * want_size 0: slots x 2 MB): a pool keeps its slot count, but what it may
 * fill is set at each start. Returns 0, or -errno with a sentence naming
 * the problem in err. */
int pool_open(const char *dir, uint64_t want_size, struct pool *p, char *err, size_t errlen);
void pool_close(struct pool *p);
/* Read and judge slot's chunk file against the meta (ci). ctl gets the
 * control page when the file has one. Returns a verdict (>= 0) or -EUCLEAN
 * (bad control page) with the problem in err. */
int pool_check_chunk(const struct pool *p, uint32_t slot, const struct meta_chunk_info *ci,
		     struct cache_ctl *ctl, char *err, size_t errlen);
/* "chunks/<slot>" into buf. */
void pool_chunk_name(uint32_t slot, char *buf, size_t len);

/* ---- the engine (struct engine: one per chelld) ---- */

struct slot {
	uint8_t *map;           /* the whole chunk file, MAP_SHARED; NULL = free */
	struct cache_ctl *ctl;  /* map + CACHE_CHUNK_BYTES */
	dirty_table *dt;        /* the one-chunk dirty table in ctl->dirty */
	uint32_t cnode;
	uint64_t file_chunk;
	bool stuck;             /* write-back failed: keep it, never evict */
	bool busy;              /* being written back without the lock (cleaner, eviction) */
	bool filling;           /* a fill reads into it without the lock (chunk_fill):
				 * other fills and OVERWRITEs of it wait, evictions
				 * skip it, revocations wait (engine_wait_quiet) */
	bool revoking;          /* REVOKED, its eviction's write-back in progress:
				 * a MAP of the same chunk waits for the new file */
	bool broken;            /* its file was truncated behind our back (guard.c) */
	uint32_t charged;       /* 4 KB pages counted in engine.used: control page + valid blocks */
	uint32_t hot;           /* 64 KB groups hit or filled since the trim hand's last
				 * visit (policy blocks: evict.c) */
};

/* Volatile state of a Cnode (a cached backing file). */
struct cfile {
	uint32_t cnode;
	int fd;                 /* the manager's own read-only descriptor, or -1 (files.c) */
	uint64_t fd_used;       /* when fd was last used (engine.fd_clock) */
	bool trimming;          /* being written back to release fd */
	bool readonly;          /* on a read-only mount: not writable back (EROFS) */
	bool fuse;              /* on FUSE (GlusterFS): deletion is seen by reopening */
	uint64_t dev, ino;
	char path[META_PATH_MAX];
	uint32_t nregs;         /* live registrations, all connections */
	uint32_t nconns;        /* connections holding a registration */
	bool bypass;            /* not cached until the last registration closes */
	/* A registration is comparing the file with its Cnode (and revoking
	 * its chunks if it changed behind the cache, which may wait without
	 * the lock): other registrations wait, and the Cnode is not reclaimed
	 * (files.c, cfile_register). */
	bool revalidating;
	/* Adaptive read-ahead (chunk.c), in file blocks: where the last miss
	 * started and where its fill ended, and its read-ahead window (0:
	 * random access). */
	uint64_t ra_prev, ra_next;
	uint32_t ra_window;
	uint64_t fills, fill_bytes, evictions, writeback_bytes;
	struct chelld_client_counts counts;
	/* cache modes (modes.c): the mode of its directory, pinned, and the
	 * sequential read stream (bytes missed in order, and where it goes on) */
	uint8_t mode;
	bool pinned;
	uint64_t seq_next, seq_run;
	/* Bumped (under the lock) whenever the file's bytes change outside
	 * the chunks: a truncation, a client's kernel write (INVAL), a change
	 * behind the cache. A copy of a chunk taken before a bump is stale:
	 * chunk_shrink puts none back across one (it waits without the lock). */
	uint64_t content_gen;
};

struct engine {
	const struct chelld_config *cfg;
	struct pool pool;
	struct meta *m;
	uint32_t nslots;
	struct slot *slots;
	/* Capacity in 4 KB pages of the pool's tmpfs: chunk data blocks that
	 * are valid (filled, zeros past the end of a file, or overwritten)
	 * plus one control page per chunk file; meta.pool is taken off at
	 * start. Fills, overwrites and new chunk files evict first when
	 * used + need would exceed cap (engine_make_room). */
	uint64_t cap, used;
	struct cfile **files;   /* by Cnode id */
	uint32_t open_fds;      /* cfile descriptors held (files.c), at most cfg->max_fds */
	uint64_t fd_clock;      /* ticks of cfile_fd, for its LRU */
	policy *pol;
	const struct chell_persist_ops *pops;
	struct chelld_stats_reply *st; /* the server's counters */
	uint32_t fills_inflight, fills_inflight_max; /* fills reading without the lock */
	uint32_t clean_cursor;  /* where the cleaner resumes */
	uint32_t trim_hand;     /* policy blocks: the next slot to look at (evict.c) */
	uint8_t *shrink_buf;    /* one chunk's data, for chunk_shrink */
	bool cleaning;          /* between the high and the low watermark */
	uint32_t ticks;
	pthread_mutex_t lock;   /* the cache state, between the two threads */
	pthread_cond_t idle;    /* a busy slot became idle */
	pthread_cond_t wake;    /* to the cleaner: stop */
	pthread_t cleaner;
	bool cleaner_running, cleaner_stop;
	bool dir_dirty;         /* chunks/ changed since the last fsync of it */
	/* Every client's access table, folded into the policy before a victim
	 * is chosen (server.c keeps the list). */
	void (*fold_access)(void *arg);
	void *fold_arg;
	struct modes *modes;    /* modes.c: mode rules and pins */
};

/* The slot this thread is making room for (engine_make_room's `keep`):
 * its own evictions skip it; -1 none. Per thread, as each worker makes
 * room for its own fill. */
extern __thread int64_t engine_keep;

/* engine.c: attach to an open pool, build the volatile state; recover. */
int engine_init(struct engine *c, const struct chelld_config *cfg, struct pool *p,
		struct chelld_stats_reply *st);
void engine_fini(struct engine *c);

/* guard.c: survive chunk files truncated by a client (SIGBUS). */
void engine_guard_install(struct engine *c);
static inline bool slot_broken(const struct slot *s)
{
	return __atomic_load_n(&s->broken, __ATOMIC_ACQUIRE);
}

/* recover.c: finish what a crash interrupted, write back dirty data. */
void engine_recover(struct engine *c);

/* files.c */
/* The cfile of a Cnode (created on first use); NULL if the id is bad. */
struct cfile *cfile_get(struct engine *c, uint32_t cnode);
/* The manager's descriptor of the backing file, opened by path and checked
 * against the Cnode's identity: >= 0, or -errno. */
int cfile_fd(struct engine *c, struct cfile *f);
/* The same, falling back to a reopen of a client's descriptor (the file
 * may have been renamed since the path was recorded). */
int cfile_fd_via(struct engine *c, struct cfile *f, int client_fd);
/* A new write descriptor of the file for one job (write-back, truncate):
 * the caller closes it. >= 0, or -errno. */
int cfile_wfd(struct engine *c, struct cfile *f);
/* Register a client's descriptor: find or create the Cnode, detect an
 * outside writer if nobody has it registered. Returns the Cnode id or
 * -errno with a reason in detail. */
int cfile_register(struct engine *c, int client_fd, const char *resolved, uint64_t dev,
		   uint64_t ino, char *detail, size_t dlen);
/* One registration closed; the last one records the file's attributes. */
void cfile_unregister(struct engine *c, struct cfile *f);
/* Record the backing file's size and times in the Cnode (a transaction). */
void cfile_record(struct engine *c, struct cfile *f);
/* Close the manager's descriptor once nobody has the file registered (or
 * it is bypassed) and it has no dirty block left. */
void cfile_release_fd(struct engine *c, struct cfile *f);
/* Revoke every chunk of one file (f) or of all files (NULL), writing
 * dirty blocks back: how many; the first error goes to *err. (ops.c) */
uint32_t cfile_drop(struct engine *k, const struct cfile *f, int *err);
/* The file was deleted (no name left) and nobody has it registered: its
 * data has nowhere to go and nobody can read it again. */
bool cfile_deleted(struct engine *c, struct cfile *f);

/* chunk.c */
/* The slot holding (cnode, file_chunk), allocating and creating its chunk
 * file if needed (evicting when full). Returns the slot or -errno. */
int chunk_get(struct engine *c, struct cfile *f, uint64_t file_chunk);
/* Make blocks [first, first+n) valid (plus adaptive read-ahead); 0 or -errno. */
int chunk_fill(struct engine *c, uint32_t slot, unsigned first, unsigned n);
/* A client stored whole blocks [first, first+n) of the slot's chunk file
 * `incarnation` while they were invalid (cache/layout.h, "Overwrites"):
 * mark them dirty and valid. 0; -EAGAIN if the chunk file is not that one
 * any more, is not LIVE, or any of the blocks became valid meanwhile (the
 * client redoes the write as a normal one); -ENOSPC. */
int chunk_overwrite(struct engine *c, uint32_t slot, uint64_t incarnation, unsigned first,
		    unsigned n);
/* Evict (policy victims, never `keep`) until `need` more pages fit in
 * the capacity. 0, or -ENOSPC when nothing else can go and the pool
 * would go over by more than the chunk being filled. */
int engine_make_room(struct engine *c, uint64_t need, int64_t keep);
/* A new descriptor of the slot's chunk file with the given open flags. */
int chunk_open_fd(struct engine *c, uint32_t slot, int flags);
/* Revoke and free a slot: REVOKED, fence, write back dirty blocks below
 * `keep_below` (UINT64_MAX: all; 0: none), truncate, unlink, unmap.
 * 0, or -errno with the slot kept (marked stuck) if write-back failed;
 * -ENOENT if the slot no longer held that chunk once it was quiet (another
 * thread evicted or revoked it meanwhile: nothing left to do). */
int chunk_revoke(struct engine *c, uint32_t slot, uint64_t keep_below);
/* Evict a victim: chunk_revoke, but the write-back of its dirty blocks
 * runs without the lock (the slot REVOKED and revoking meanwhile), so
 * other misses go on. 0, or -errno as chunk_revoke. */
int chunk_evict(struct engine *c, uint32_t slot);
/* Attach to an existing, checked chunk file (recovery). 0 or -errno. */
int chunk_attach(struct engine *c, uint32_t slot, uint32_t cnode, uint64_t file_chunk);
/* Blocks of the slot that are valid / dirty (any non-CLEAN state). */
unsigned chunk_nvalid(const struct slot *s);
unsigned chunk_ndirty(const struct slot *s);

/* evict.c */
/* Free one slot by policy (never a pinned one); 0, or -EBUSY when nothing
 * can be evicted. */
int evict_one(struct engine *c);
/* Policy blocks: free capacity by the 64 KB group. 0 when some went, or
 * -EBUSY when a turn of the hand found nothing (then evict_one). */
int evict_groups(struct engine *c);
/* chunk.c: replace the clean chunk in `slot` by a new chunk file of the
 * same (file, chunk) holding only the valid blocks of the groups in
 * `keep` (the others leave the cache). 0 or -errno. */
int chunk_shrink(struct engine *c, uint32_t slot, uint32_t keep);

/* writeback.c */
/* A write-back in three steps, so the cleaner thread can do the I/O
 * without the cache lock: wb_begin (lock held: check-out, plan), wb_io
 * (no lock needed: the slots are busy, the descriptor a dup), wb_end (lock
 * held: check-in, or abandon the check-out on error). */
struct wb_job {
	struct cfile *f;
	uint32_t *slots;
	size_t n;
	cp_bitmap *bits;
	wb_chunk *in;
	wb_plan plan;
	bool planned, io_done;
	int fd;
	int rc;
	uint64_t limit, written;
};
int wb_begin(struct engine *c, struct cfile *f, const uint32_t *slots, size_t n, uint64_t clamp,
	     struct wb_job *j);
void wb_io(struct engine *c, struct wb_job *j);
int wb_end(struct engine *c, struct wb_job *j, uint64_t *bytes);
/* Write back the dirty blocks of the given slots (all of one file) with
 * check-out/check-in; data at or past `clamp` (and past the backing file's
 * size) is not written. Adds bytes written to *bytes. 0 or -errno (the
 * blocks stay dirty). */
int wb_slots(struct engine *c, struct cfile *f, const uint32_t *slots, size_t n, uint64_t clamp,
	     uint64_t *bytes);
/* Every dirty slot of a file (or of all files: f NULL). Counts go to the
 * out parameters (may be NULL). 0 or the first error. */
int wb_file(struct engine *c, struct cfile *f, uint64_t *blocks, uint64_t *bytes, uint32_t *files);

/* cleaner.c: the background cleaner thread. It and the server's thread
 * hold c->lock while they touch the cache; the cleaner drops it for the
 * I/O of a write-back, with the slots marked busy. */
int engine_cleaner_start(struct engine *c);
void engine_cleaner_stop(struct engine *c);
/* Wake the cleaner now (lock held): evictions found no clean victim. */
void engine_cleaner_kick(struct engine *c);
/* Wait (lock held) until no write-back holds a slot (busy). */
void engine_wait_idle(struct engine *c, uint32_t slot);
/* Wait (lock held) until nothing works on a slot without the lock: no
 * write-back, fill or eviction (busy, filling, revoking). */
void engine_wait_quiet(struct engine *c, uint32_t slot);
/* Any slot that some thread works on without the lock (make_room waits
 * for one rather than fail). */
bool engine_any_unquiet(const struct engine *c);
/* Drop the chunks of deleted files (cfile_deleted); returns how many. */
uint32_t engine_drop_deleted(struct engine *c);
uint32_t engine_dirty_slots(const struct engine *c);

/* Slots of a file, in file-chunk order: count, with their numbers in out
 * (nslots entries). */
uint32_t engine_file_slots(const struct engine *c, uint32_t cnode, uint32_t *out);

#endif
