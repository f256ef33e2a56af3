/* SPDX-License-Identifier: MIT */
/*
 * WARP's data path (docs/WARP.md): a handler on the mapped-file base whose
 * files are divided into nodes (warp.node_size), each in one of three
 * states (brain.h, enum warp_state):
 *
 *   normal    the kernel path: pread/pwrite of the application's descriptor
 *   mapped    reads are memcpy from a shared mapping of the file (the page
 *             cache or DAX memory itself); writes are the kernel's
 *   buffered  a DRAM buffer absorbs reads and writes: 4 KB blocks, each
 *             valid (the buffer has the bytes) and maybe dirty (newer than
 *             the tier); written back in sorted, merged extents
 *
 * The buffer of a file and every node's state live in one shared file per
 * tier file, /dev/shm/chell-warp.<dev>.<ino> (buf.c): every process under
 * Chell on the machine that opens the file maps the same one, so a
 * buffered write is visible at once to all of them, across fork, exec and
 * separate `chell run` trees. Files:
 *
 *   warp.c    the handler: its mapped_ops policy and operations
 *   buf.c     the shared buffer file: header, node records, block bitmaps,
 *             fill, write-back, invalidation, recovery after a kill
 *   tiermap.c per-process mappings of the tier file (mapped reads)
 *   ckpt.c    the background thread: checkpoints (warp_model_decide),
 *             idle write-back, reclaim, forced flips (warp.test_flip)
 *   wstats.c  counters and their JSON (stats.file)
 */
#ifndef CHELL_WARP_H
#define CHELL_WARP_H

#include <stddef.h>

#include "../../nib/nib.h"
#include "../mapped/base.h"
#include "brain.h"

/* ---- the shared buffer file (buf.c) */
#define WARP_BLK_SHIFT 12
#define WARP_BLK ((uint64_t)1 << WARP_BLK_SHIFT)
#define WARP_MAX_NODES 32768u      /* nodes with a shared record; later ones stay normal */
#define WARP_MAX_BLOCKS (1u << 24) /* 64 GiB of a file can be buffered */
#define WARP_MAGIC 0x5057415250425546ull /* "FUBPRAWP" */
#define WARP_VERSION 2

/* One node's shared record. `state` is read without the lock on the data
 * path; it changes only under the header's lock (warp_set_state). The
 * counters are plain stores (brain.h). */
struct warp_node {
	_Atomic uint8_t state;     /* enum warp_state */
	uint8_t cand, streak;      /* struct warp_hyst, kept with the node */
	/* the last checkpoint chose buffered but could not apply it (no
	 * lease yet): the node's next write asks for the lease */
	_Atomic uint8_t want;
	uint32_t succ1;            /* 1 + the node accessed after this one; 0: none (zeroed records) */
	uint64_t last_use;         /* coarse ns of the last access */
	struct warp_node_stats st; /* since the last checkpoint */
	uint32_t valid;            /* blocks of the node valid in the buffer */
	/* calls on the tier path in this node in flight (warp.c: piece); the
	 * header's tier_ops counts those that may span nodes (growing writes) */
	_Atomic uint32_t tier_ops;
};

struct warp_hdr {
	uint64_t magic, version;
	uint64_t dev, ino;
	int64_t btime_sec, btime_nsec; /* the tier file's birth time: identity after a kill */
	uint32_t node_shift, pad_;
	struct chell_lock lock;        /* block bitmaps, buffer bytes, state changes */
	_Atomic uint64_t tier_ops;     /* calls on the tier path in flight (warp.c) */
	_Atomic uint64_t valid_blocks, dirty_blocks;
	_Atomic uint64_t last_ckpt;    /* coarse ns of the last checkpoint of this file */
	/* Buffering is off for good for this file (the application mapped it,
	 * took a lease, the descriptor escaped): every node is normal or mapped. */
	_Atomic uint32_t no_buffer;
	/* warp.outside=lease: the tree holds a write lease on the file (taken
	 * on one application description; any other open of the file, by
	 * anyone, breaks it): nodes may be buffered only while it is set. */
	_Atomic uint32_t leased;
	_Atomic uint64_t lease_try; /* coarse ns of the last attempt (one per checkpoint) */
	/* tier_ops did not drain (a process killed inside a call leaves it up
	 * for good): no node becomes buffered before this coarse ns */
	_Atomic uint64_t refuse_until;
	struct warp_xfile xf[WARP_XFILE_SLOTS];
	/* The kernel's offset of the file's descriptions: a SEEK_HOLE probe
	 * (tiermap.c) moves the offset of the description it goes through
	 * (the application's, or a duplicate of it under a lease), and an
	 * append (warp.c) is the kernel's write at the description's offset
	 * followed by reading that offset back. Held around both, so no probe
	 * in any process lands between an append and its read-back. A leaf:
	 * nothing else is taken under it. */
	struct chell_lock koff_lock;
};

#define WARP_HDR_BYTES 4096ull
#define WARP_NODES_OFF WARP_HDR_BYTES
#define WARP_VALID_OFF (WARP_NODES_OFF + (uint64_t)WARP_MAX_NODES * sizeof(struct warp_node))
#define WARP_DIRTY_OFF (WARP_VALID_OFF + WARP_MAX_BLOCKS / 8)
#define WARP_DATA_OFF (((WARP_DIRTY_OFF + WARP_MAX_BLOCKS / 8) + (2ull << 20) - 1) & ~((2ull << 20) - 1))
#define WARP_MAP_BYTES (WARP_DATA_OFF + (uint64_t)WARP_MAX_BLOCKS * WARP_BLK)
/* a light file's private records: the same layout without the data area */
#define WARP_LIGHT_BYTES WARP_DATA_OFF

/* Per-OFD state (ofd->priv, shared by every process holding the
 * description): the base's, and the state nodes start in (the open's
 * access mode, warp.md §III: read-only opens read-mapped, write-only ones
 * write-buffered). */
struct warp_ofd {
	struct mapped_ofd m;
	uint32_t hint; /* enum warp_state for nodes never accessed */
	/* A process attached this writable description to a light file (buf.c).
	 * Another process sharing it may still be light for the file (it got
	 * the description by fork, before the attach's process promoted), so
	 * the lease is taken through it only while the taker holds its only
	 * descriptor (lease.c). Set once, never cleared. */
	_Atomic uint32_t light_seen;
};

/* This process's view of one file (shared by its descriptors of it). */
struct warp_file {
	uint64_t dev, ino;
	int refs;                  /* chell_files of this process on it (warp_files_lock) */
	int bfd;                   /* the buffer file (internal descriptor); -1 while light */
	/* Light (buf.c): no buffer file; hdr and nodes are in light_map,
	 * private memory, and nothing of the file is buffered. Cleared once
	 * (warp_file_promote), never set again. */
	_Atomic int light;
	unsigned char *light_map;  /* WARP_LIGHT_BYTES, kept until the file is freed */
	/* node records [0, light_top) of light_map may be non-zero (every
	 * record written is of a node accessed, or below warp_nnodes): what
	 * is zeroed before the region is used again (buf.c: light pool) */
	_Atomic uint32_t light_top;
	/* A light file's hole probes (tiermap.c) go through a read-only
	 * description of Chell's own, opened at the first probe: the
	 * application's may be shared with another process whose light
	 * records (and koff_lock) are its own, and a probe moves the offset an
	 * append there reads back. Closed when the file is promoted (it would
	 * keep the lease from being granted) or freed. -1: none. */
	int probe_fd;
	/* warp.map_after: reads the kernel serves before a read-mapped node is
	 * mapped (light files only: no buffered node, so every byte of such a
	 * read comes from the kernel); 0 once any node is mapped */
	_Atomic uint32_t kernel_reads_left;
	uint64_t bdev, bino;       /* ... its identity (a forked child checks bfd is still it) */
	unsigned char *map;        /* the buffer file, WARP_MAP_BYTES */
	struct warp_hdr *hdr;
	struct warp_node *nodes;
	_Atomic uint64_t *valid, *dirty; /* bitmaps, 64 blocks a word */
	unsigned char *data;       /* block b at data + b * WARP_BLK */
	/* tier.c: the tier file's nodes mapped in this process */
	int rfd, wfd;              /* the tier file for Chell's own reads / write-backs (wfd -1: read-only) */
	/* warp.outside=lease: a duplicate of the application's description
	 * lfd_ofd (the leased one, or the one last leased), or -1. Closed
	 * only when the application's description goes from this process:
	 * closing any descriptor of a file drops the process's POSIX locks. */
	int lfd;
	struct chell_ofd *lfd_ofd;
	/* lfd_ofd left the process on a thread with a table of its own, where
	 * lfd cannot be closed: the checkpoint thread detaches it */
	struct chell_ofd *_Atomic detach_ofd;
	int lease_mine;            /* this process took the lease (releases it at exit and exec) */
	int fill_ok;               /* rfd reads without touching atime (O_NOATIME): fills allowed */
	int retired;               /* no mapping any more (a lease, an escape) */
	uint32_t hole_gen;         /* inode->hole_gen the dense marks were made against */
	/* [data_lo, data_hi): a hole probe (tiermap.c) found it all data, at
	 * hole_gen: later nodes inside it need no probe of their own (each
	 * SEEK_HOLE walks the page cache from its offset to the first hole,
	 * the end of a dense file: a probe per node of a 256 MB file was 60%
	 * of `cat`'s time). Under tiermap.c's lock. */
	uint64_t data_lo, data_hi;
	_Atomic uint32_t prev_node; /* the last node accessed in this process */
	/* nodes and their bytes per state at this process's last checkpoint
	 * of the file (under the lock): its share of warp_ctr.nodes */
	uint64_t ck_nodes[WARP_NSTATES], ck_bytes[WARP_NSTATES];
	struct mapped_table tier;  /* node k: its mapping; flags: WARP_DENSE */
	void **reserved;           /* retired mappings' address ranges */
	size_t nreserved;
	struct warp_file *next;
};
#define WARP_DENSE 1u

extern unsigned warp_node_shift;
extern uint64_t warp_budget;        /* warp.buffer_budget, bytes */
extern uint64_t warp_checkpoint_ns; /* warp.checkpoint_ms */
extern uint64_t warp_idle_ns;       /* warp.idle_ms */
extern uint32_t warp_flip_ppm;      /* warp.test_flip */
extern uint32_t warp_map_after;     /* warp.map_after */
extern int warp_lease_mode;         /* warp.outside=lease */
extern _Atomic uint64_t *warp_tree_bytes; /* buffer bytes of the tree (shared area) */

/* The process's warp_file of (dev, ino) for a description being attached
 * (fd); light if no buffer file exists for it (buf.c). */
struct warp_file *warp_file_get(int fd, uint64_t dev, uint64_t ino);
/* A light file's records move to the buffer file (made or joined through
 * fd, a descriptor of the tier file): before it may be buffered (the
 * lease), and before a description of it escapes. 0, or -1 (stays light).
 * With warp_files_lock held; never with the records' lock held. */
int warp_file_promote(struct warp_file *w, int fd);
/* What a promotion costs on this machine, ns (a moving average of the
 * ones made; 100 us before the first): the locating cost that the
 * buffered state has, once, for a light file (ckpt.c). */
extern _Atomic uint64_t warp_promote_ns;
/* The process's lock of its file list (warp_file_promote's callers). */
void warp_files_lock(void);
void warp_files_unlock(void);
void warp_file_put(struct warp_file *w);
/* The shared buffer file of (dev, ino) if one exists, for path calls by a
 * process that has the file open nowhere (truncate, O_TRUNC). */
struct warp_file *warp_file_lookup(uint64_t dev, uint64_t ino);
void warp_files_after_fork(void);
/* Release the files put last on threads with a table of their own (the
 * checkpoint thread, in the process's table). */
void warp_files_reap(void);
bool warp_ckpt_running(void);
/* Call fn on every file of this process (the checkpoint thread). */
void warp_files_each(void (*fn)(struct warp_file *w, void *arg), void *arg);

static inline enum warp_state warp_state_of(struct warp_file *w, uint64_t node)
{
	if (node >= WARP_MAX_NODES)
		return WARP_NORMAL;
	return (enum warp_state)atomic_load_explicit(&w->nodes[node].state, memory_order_acquire);
}
/* A lock of the header (at byte `off`: lock or koff_lock) of the records
 * that are w's now. A light file's records move once, under both locks
 * (buf.c: promote): a caller that waited on an old one takes the new one
 * instead. While it is held the records cannot move, so w->hdr stays the
 * returned header until the lock is released (chell_lock_release(&w->hdr->
 * lock) is then right). */
static inline struct warp_hdr *warp_lock_at(struct warp_file *w, size_t off)
{
	for (;;) {
		struct warp_hdr *h = __atomic_load_n(&w->hdr, __ATOMIC_ACQUIRE);
		struct chell_lock *l = (struct chell_lock *)((unsigned char *)h + off);
		chell_lock_acquire(l);
		if (h == __atomic_load_n(&w->hdr, __ATOMIC_ACQUIRE))
			return h;
		chell_lock_release(l);
	}
}
#define warp_lock(w) warp_lock_at((w), offsetof(struct warp_hdr, lock))
#define warp_koff_lock(w) warp_lock_at((w), offsetof(struct warp_hdr, koff_lock))

static inline uint32_t warp_succ(const struct warp_node *n)
{
	return n->succ1 ? n->succ1 - 1 : WARP_NODE_NONE;
}
static inline void warp_succ_set(struct warp_node *n, uint32_t k)
{
	if (n->succ1 != k + 1)
		n->succ1 = k + 1;
}
static inline bool warp_blk_valid(struct warp_file *w, uint64_t b)
{
	return (atomic_load_explicit(&w->valid[b >> 6], memory_order_relaxed) >> (b & 63)) & 1;
}
static inline bool warp_blk_dirty(struct warp_file *w, uint64_t b)
{
	return (atomic_load_explicit(&w->dirty[b >> 6], memory_order_relaxed) >> (b & 63)) & 1;
}

/* The application's descriptor of the call in progress on this thread
 * (-1 outside one): fills and write-backs use it where the process has no
 * descriptor of its own (a child forked before the lease was taken shares
 * the leased description without a duplicate of it). */
extern __thread int warp_call_fd;
/* A descriptor of warp's own (rfd, wfd, lfd, bfd), or -1 on a thread with
 * a descriptor table of its own (chell_fdt_private): they were opened in
 * the process's table, and in a private one the same numbers are closed,
 * stale copies or other files (a write-back through one would write
 * another file). Such a thread uses the application's descriptor. */
static inline int warp_own(int fd)
{
	return fd >= 0 && !chell_fdt_private() ? fd : -1;
}
static inline int warp_rfd(struct warp_file *w)
{
	int fd = warp_own(w->rfd);
	return fd >= 0 ? fd : warp_call_fd;
}
static inline int warp_wfd(struct warp_file *w)
{
	int fd = warp_own(w->wfd);
	return fd >= 0 ? fd : warp_call_fd;
}
/* Where the call on c's descriptor `fd` writes back: ours, else its own. */
static inline int warp_wfd_or(struct warp_file *w, int fd)
{
	int o = warp_own(w->wfd);
	return o >= 0 ? o : fd;
}

/* Under hdr->lock. */
/* Make block b valid (fill from the tier); 0 or -errno. */
int warp_blk_fill(struct warp_file *w, uint64_t b);
/* Block b's bytes are in the buffer (a whole-block write: no fill). */
void warp_blk_set_valid(struct warp_file *w, uint64_t b);
void warp_blk_mark_dirty(struct warp_file *w, uint64_t b);
/* Write back the dirty blocks of [lo, hi) (block numbers) through fd in
 * sorted, merged extents, cut at the tier file's size; 0 or -errno. */
int warp_writeback(struct warp_file *w, int fd, uint64_t lo, uint64_t hi);
/* The checkpoint's write-back, a step at a time: under the lock, dirty
 * blocks from *cursor until `most` are written back (*cursor: where it
 * stopped, hi when done); their charge waits for warp_writeback_settle,
 * called after the lock is released. */
int warp_writeback_step(struct warp_file *w, int fd, uint64_t *cursor, uint64_t hi, uint64_t most);
void warp_writeback_settle(void);
/* Drop blocks [lo, hi) from the buffer (no write-back: the caller did it
 * or the bytes are gone, truncated). */
void warp_invalidate(struct warp_file *w, uint64_t lo, uint64_t hi);
/* Move node k to state s (write-back and invalidation when leaving
 * buffered; waiting out tier calls in flight when entering it). Under the
 * lock. 0, or -EAGAIN when the change could not be made now (the node
 * stays as it was: a speed cost, never a correctness one). */
int warp_set_state(struct warp_file *w, uint64_t k, enum warp_state s);
/* A light file's records of nodes below n may be written (light_top). */
static inline void warp_light_touch(struct warp_file *w, uint32_t n)
{
	uint32_t t = atomic_load_explicit(&w->light_top, memory_order_relaxed);
	while (n > t && !atomic_compare_exchange_weak_explicit(&w->light_top, &t, n, memory_order_relaxed,
							      memory_order_relaxed))
		;
}
/* Nodes of the tier file as big as it is now (at most WARP_MAX_NODES). */
uint32_t warp_nnodes(struct warp_file *w);
/* Buffering off for good: write back and drop everything (takes the lock). */
int warp_disable_buffer(struct warp_file *w);
/* Write back (and with drop, invalidate) every block; takes the lock. */
int warp_flush_all(struct warp_file *w, bool drop);
/* This process lets go of the buffer: if it is the last on the machine,
 * everything is written back and the buffer file removed. */
void warp_buf_last_close(struct warp_file *w);

/* ---- lease.c: what a process outside Chell sees (docs/WARP.md) */
/* May node buffering start on this file (the lease is held, or taken now
 * through the application's descriptor fd with status flags st)? */
bool warp_lease_ok(struct warp_file *w, chell_ctx *c);
/* The application's description ofd leaves this process: the lease (if
 * held through it) is released and the duplicate closed. */
void warp_lease_detach(struct warp_file *w, struct chell_ofd *ofd);
/* The lease is broken (someone opened or truncated the file) or must go:
 * everything written back, nothing buffered, the lease released. */
void warp_lease_release(struct warp_file *w);
/* The checkpoint thread's poll: true if this process holds a lease dup. */
bool warp_lease_poll(struct warp_file *w);
/* Process events: a forked child polls but does not own; exit and exec
 * release what this process took. */
void warp_lease_after_fork(struct warp_file *w);
void warp_lease_proc_end(void);
/* Fork events: a lease is never taken across a fork (lease_ok). */
void warp_lease_fork_event(enum chell_op ev);

/* ---- tiermap.c: mapped reads */
/* Address of `off` in the tier's mapping if its node may be read through
 * it (dense), else NULL; fd: a readable descriptor of the file to map it. */
const unsigned char *warp_tier_addr(struct warp_file *w, int fd, uint64_t off, uint32_t hole_gen);
void warp_tier_unmap_all(struct warp_file *w);
void warp_tier_retire(struct warp_file *w);
void warp_tier_after_fork(void);
/* The light file's probe descriptor goes (promotion, release). */
void warp_tier_probe_close(struct warp_file *w);

/* ---- ckpt.c */
int warp_ckpt_start(void);
/* One checkpoint of w now (sync calls, the thread); fd: a descriptor of
 * the tier file (-1: none in hand, decisions only). */
void warp_checkpoint(struct warp_file *w);
/* Forced flips (warp.test_flip): maybe move node k to a random state. */
void warp_maybe_flip(chell_ctx *c, struct warp_file *w, uint64_t node);

/* ---- wstats.c: counters of this process (relaxed atomics, slow paths) */
struct warp_counters {
	_Atomic uint64_t transitions[WARP_NSTATES][WARP_NSTATES];
	_Atomic uint64_t buffered_reads, buffered_writes, mapped_reads, kernel_reads, kernel_writes;
	_Atomic uint64_t fills, writeback_bytes, writeback_extents, reclaims, flips, checkpoints;
	/* time in checkpoints: all of it (write-back and its wait for the
	 * modelled device included), the part holding the buffer's lock (what
	 * the application's buffered calls can wait for), and the part that
	 * judges the nodes (model, state changes, census; under the lock) */
	_Atomic uint64_t checkpoint_ns, checkpoint_lock_ns, decide_ns;
	/* of writeback_bytes, those the background thread wrote back (the
	 * application did not wait for them) */
	_Atomic uint64_t writeback_bg_bytes;
	_Atomic uint64_t nodes[WARP_NSTATES], node_bytes[WARP_NSTATES]; /* last checkpoint's census */
	_Atomic uint64_t buffer_bytes_max, recovered_blocks;
	_Atomic uint64_t accesses, accurate, prefetch_used;
	_Atomic uint64_t leases, lease_breaks;
	/* files attached light (no buffer file), and light files that a
	 * writable description moved to a buffer file */
	_Atomic uint64_t light_files, light_promotions;
};
extern struct warp_counters warp_ctr;
/* this thread is WARP's background thread (ckpt.c: loop) */
extern __thread bool warp_bg;
#define WCTR(f, n) atomic_fetch_add_explicit(&warp_ctr.f, (n), memory_order_relaxed)
void warp_stats_dump(void);

/* ---- learn.c: patterns (brain.h) of this process; warp_pat is NULL
 * without warp.patterns */
extern struct warp_patterns *warp_pat;
void warp_learn_open(void); /* opens warp.patterns once */
/* A fresh buffer (no other user): states, successors and tuples as kept. */
void warp_patterns_apply(struct warp_file *w);
/* Keep w's stable states, successors and tuples (checkpoints, last close):
 * queued, stored by warp_learn_flush. */
void warp_patterns_keep(struct warp_file *w);
/* The tuple {ctx, to, node} for file `from`, which this process no longer
 * has open (chain.c): queued as well. */
void warp_learn_link(struct warp_file_id from, uint64_t ctx, struct warp_file_id to, uint32_t node);
/* Store what is queued (the background thread's pass, exit, exec). */
void warp_learn_flush(void);
void warp_learn_after_fork(void);

/* ---- chain.c: the process's chain of files (warp.md §IV-C) */
/* The first access of this process to w, at node k: records that the
 * process went from the file it accessed before to w, posts the prefetch
 * of the file w's tuples predict next (when this process has it open), and
 * returns the node the previous file's tuples predicted for w
 * (WARP_NODE_NONE: none, or another file). */
uint32_t warp_chain_enter(struct warp_file *w, uint32_t k);
void warp_chain_after_fork(void);
/* This process's warp_file of (dev, ino) if it has one now, a new
 * reference; NULL otherwise (nothing is opened). buf.c */
struct warp_file *warp_file_listed(uint64_t dev, uint64_t ino);

/* The node predicted after node k: its successor record, else k + 1 (no
 * record yet: sequential access is the commonest pattern, and a record
 * replaces the guess at the first access that says otherwise). */
static inline uint32_t warp_next_of(const struct warp_node *n, uint32_t k)
{
	return n->succ1 ? n->succ1 - 1 : k + 1;
}

#define WSTAT(field, n) MSTAT(MAPPED_STATS_WARP, field, n)

#endif
