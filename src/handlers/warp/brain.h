/* SPDX-License-Identifier: MIT */
/*
 * WARP's decision side: the benefit model with its hysteresis, successor
 * prediction (within a file and across files), the prefetch queue and its
 * background thread, and the patterns persisted across restarts
 * (warp.md §IV). Pure functions over plain data wherever possible, so they
 * are unit-tested on hand-computed cases; the data path (warp.c and the
 * files beside it) owns the memory, gathers the counters and applies the
 * states these functions choose.
 *
 * This header is the contract between the two halves. Files:
 *   model.c     costs, T per state, the decision with hysteresis
 *   calib.c     locating costs measured on this machine (system call,
 *               mapping fault, buffer lookup) folded into struct warp_costs
 *   predict.c   successor records, cross-file tuples, accuracy
 *   prefetch.c  the queue and the per-process background thread
 *   patterns.c  the persisted patterns (persistence core region)
 */
#ifndef CHELL_WARP_BRAIN_H
#define CHELL_WARP_BRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- node states (warp.md §III): one per node (2 MB by default) */
enum warp_state {
	WARP_NORMAL = 0,   /* served by the kernel path */
	WARP_MAPPED = 1,   /* reads by memcpy from a mapping of the tier */
	WARP_BUFFERED = 2, /* a DRAM buffer absorbs writes, written back later */
	WARP_NSTATES
};
const char *warp_state_name(enum warp_state s); /* "normal", "mapped", "buffered" */

/* ---- per-node counters since the last checkpoint. Plain (relaxed) stores
 * on the data path; a lost increment between two threads costs accuracy,
 * never correctness. Zeroed by the checkpoint after the decision. */
struct warp_node_stats {
	uint64_t nr, sr; /* reads: count and bytes */
	uint64_t nw, sw; /* writes: count and bytes */
};

/* ---- the cost of each state, in nanoseconds: per access (latency,
 * including the locating cost of that state on this machine) and per byte
 * (1 / bandwidth), for reads and writes. For WARP_BUFFERED the per-byte
 * write cost includes the write-back of the byte to the tier (wb_byte of
 * it) - but a checkpoint writes each dirty block back once, however often
 * it was written since the last one: with wb_cap set (the node's bytes),
 * at most wb_cap bytes of a node pay the write-back between checkpoints
 * (T_WriteBack, warp.md Table II). wb_cap 0: every byte pays it. */
struct warp_costs {
	double lat_r[WARP_NSTATES], byte_r[WARP_NSTATES];
	double lat_w[WARP_NSTATES], byte_w[WARP_NSTATES];
	double wb_byte, wb_cap;
};
/* The tier being modelled (the tier model's effective figures: latency in
 * ns, bandwidth in GB/s; DRAM's own when no model is set). */
struct warp_tier_figures {
	double read_ns, write_ns, read_gbps, write_gbps;
};
/* Fill *c from the tier figures and the locating costs measured once per
 * process on this machine (calib.c; cached). */
void warp_costs_init(struct warp_costs *c, const struct warp_tier_figures *t);
/* The locating costs of this machine (calib.c): measured at the first call
 * of the process (a few hundred microseconds), or read from the cache file
 * /dev/shm/chell-warp-calib-<boot id> another process of this boot wrote. */
struct warp_locate {
	double syscall_ns; /* a system call that moves 1 byte (pread on tmpfs) */
	double fault_ns;   /* first touch of a page of a fresh shared mapping */
	double tlb_ns;     /* a load from a populated mapping, new page each time */
	double lookup_ns;  /* finding a block in a DRAM buffer (index + dirty bit) */
	double dram_gbps;  /* memcpy bandwidth of DRAM, GB/s */
};
const struct warp_locate *warp_calibrate(void);
/* The same costs from given locating figures (unit tests, hand-computed). */
void warp_costs_from(struct warp_costs *c, const struct warp_tier_figures *t, const struct warp_locate *l);

/* T = N_r*L_r + S_r/B_r + N_w*L_w + S_w/B_w for state s (warp.md eq. 1). */
double warp_model_time(const struct warp_costs *c, enum warp_state s, const struct warp_node_stats *st);

/* Hysteresis (warp.md §IV-D): a node moves to another state only when that
 * state's T beats the current one's by more than delta (0.20 = 20%) at
 * `confirm` consecutive checkpoints, the same candidate each time. */
struct warp_policy {
	double delta;     /* warp.delta */
	unsigned confirm; /* warp.confirm */
};
struct warp_hyst {
	uint8_t candidate; /* enum warp_state being confirmed */
	uint8_t streak;    /* consecutive checkpoints it has won */
};
/* One checkpoint for one node with counters *st: the state it is in after
 * the checkpoint (cur, or the confirmed candidate). A node with no access
 * since the last checkpoint keeps its state and its streak resets. */
enum warp_state warp_model_decide(const struct warp_costs *c, const struct warp_policy *p,
				  enum warp_state cur, struct warp_hyst *h,
				  const struct warp_node_stats *st);

/* ---- successor prediction (warp.md §IV-C, after Noah) */
#define WARP_NODE_NONE UINT32_MAX
/* A file's identity, stable across restarts of programs. */
struct warp_file_id {
	uint64_t dev, ino;
};
static inline bool warp_file_id_eq(struct warp_file_id a, struct warp_file_id b)
{
	return a.dev == b.dev && a.ino == b.ino;
}
/* Within a file: each node records the last node accessed after it
 * (uint32_t succ[node], WARP_NODE_NONE if none). Called on every access
 * that moves to another node: succ[prev] = node. */
static inline void warp_succ_record(uint32_t *succ, uint32_t prev, uint32_t node)
{
	if (prev != WARP_NODE_NONE && prev != node && succ[prev] != node)
		succ[prev] = node;
}
/* Across files: a few tuples per file {context, next file, its first
 * node}, where context hashes the process's working directory and program. */
#define WARP_XFILE_SLOTS 4
struct warp_xfile {
	uint64_t ctx; /* 0: empty slot */
	struct warp_file_id next;
	uint32_t hint_node;
	uint32_t age; /* replacement: least recently confirmed goes first */
};
uint64_t warp_context_hash(void); /* cwd + /proc/self/exe, computed once per exec */
void warp_xfile_record(struct warp_xfile slots[WARP_XFILE_SLOTS], uint64_t ctx,
		       struct warp_file_id next, uint32_t hint_node);
const struct warp_xfile *warp_xfile_predict(const struct warp_xfile slots[WARP_XFILE_SLOTS], uint64_t ctx);

/* Accuracy (warp.md §V-D): an access is an accurate prefetch when the node
 * accessed is the one the previous node's record predicted AND the access
 * type matches that node's recorded state. */
struct warp_accuracy {
	uint64_t accesses, accurate; /* accuracy = accurate / accesses */
	uint64_t issued, used, wasted; /* prefetches */
};
/* `predicted` is the node the records named for this access, looked up
 * BEFORE warp_succ_record updates them: the previous node itself when the
 * access stays in it, succ[prev] when it moves to another node, the
 * cross-file hint node on the first access to a file (WARP_NODE_NONE when
 * nothing was predicted). The type matches when a read finds the node
 * recorded as mapped and a write finds it buffered; a node recorded normal
 * was not prefetched, so no access to it is an accurate prefetch. */
static inline bool warp_access_accurate(uint32_t predicted, uint32_t node, enum warp_state recorded, bool write)
{
	return predicted == node && node != WARP_NODE_NONE &&
	       recorded == (write ? WARP_BUFFERED : WARP_MAPPED);
}
static inline void warp_accuracy_note(struct warp_accuracy *a, bool accurate)
{
	a->accesses++;
	a->accurate += accurate;
}

/* ---- prefetch: one background thread per process (chell_thread_start:
 * signals blocked, restarted in a forked child). The data path posts
 * (file, node, wanted state); the thread calls fn off the critical path.
 * post never blocks and never allocates: when the queue is full the hint
 * is dropped. The data path keeps `file` alive until warp_prefetch_forget
 * (file) has returned, which drops its queued hints and waits for a call in
 * progress on it. */
/* fn runs on the prefetch thread with every signal blocked; it must check
 * node against the file's current size (a hint may be stale) and must not
 * call warp_prefetch_forget. */
typedef void (*warp_prefetch_fn)(void *file, uint32_t node, enum warp_state want);
int warp_prefetch_start(warp_prefetch_fn fn); /* 0 or -errno; idempotent */
bool warp_prefetch_post(void *file, uint32_t node, enum warp_state want);
void warp_prefetch_forget(void *file);
/* Counters of this process (a forked child inherits its parent's):
 * hints posted, dropped because the queue was full, and run. */
struct warp_prefetch_counts {
	uint64_t posted, dropped, run;
};
void warp_prefetch_counts(struct warp_prefetch_counts *out);

/* ---- patterns persisted across restarts: stable states, successors and
 * cross-file tuples keyed by file identity, in a small region on the
 * persistence core (warp.patterns). A damaged or foreign pattern file is
 * ignored with one warning and rebuilt: it can cost speed, never
 * correctness. */
struct warp_patterns;
#define WARP_PATTERNS_NODES 512u /* nodes kept per file (1 GB of 2 MB nodes) */
/* Read path (created if missing; a damaged or foreign file is rebuilt
 * after the one warning of the process). 0 or -errno. The path must not be
 * handled by warp itself (it is Chell's own file). */
int warp_patterns_open(const char *path, struct warp_patterns **out);
/* The same; a file made here (missing, or rebuilt after damage) holds
 * `entries` files (1 .. 65536; warp_patterns_open: 1024). An existing
 * file keeps the number it was made with. */
int warp_patterns_open_sized(const char *path, uint32_t entries, struct warp_patterns **out);
/* Fill up to n nodes' states and successors (any pointer may be NULL) and
 * the file's tuples; returns the number of nodes filled, min(n, stored), 0
 * when nothing is stored for this file (then nothing is written). States
 * are valid states, successors < n or WARP_NODE_NONE. At most 512 nodes
 * per file are kept (1 GB of 2 MB nodes); a store of more keeps the first
 * 512, and a store that changes nothing does not touch the file. The
 * handle may be shared by threads; a callback of the prefetch thread may
 * store. Other processes' stores become visible at open and at this
 * process's next store. */
uint32_t warp_patterns_load(struct warp_patterns *p, struct warp_file_id id, uint32_t n,
			    uint8_t *states, uint32_t *succ, struct warp_xfile xf[WARP_XFILE_SLOTS]);
int warp_patterns_store(struct warp_patterns *p, struct warp_file_id id, uint32_t n,
			const uint8_t *states, const uint32_t *succ,
			const struct warp_xfile xf[WARP_XFILE_SLOTS]);
/* Several files' entries at once: the file is opened and locked once for
 * all of them (each entry is its own transaction). The ids are distinct. */
struct warp_pattern_rec {
	struct warp_file_id id;
	uint32_t n;
	const uint8_t *states;
	const uint32_t *succ;
	const struct warp_xfile *xf; /* WARP_XFILE_SLOTS, or NULL */
};
int warp_patterns_store_many(struct warp_patterns *p, const struct warp_pattern_rec *recs, size_t count);
void warp_patterns_close(struct warp_patterns *p);

#endif
