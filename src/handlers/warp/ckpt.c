/* SPDX-License-Identifier: MIT */
/*
 * WARP's background thread (one per process, chell_thread_start: restarted
 * in a forked child, stopped before exec and at exit) and the checkpoint
 * (warp.md Algorithm 1, WARP CHECKPOINT):
 *
 *   every warp.checkpoint_ms, for each file this process has open (one
 *   process of all those mapping a buffer does it, hdr->last_ckpt):
 *     write back the dirty blocks;
 *     for each accessed node, warp_model_decide (brain.h: the benefit
 *     model with its hysteresis) and apply the state it returns;
 *     count the nodes per state (chell stat);
 *   and at each pass, buffered nodes unused for warp.idle_ms are written
 *   back and their buffer reclaimed.
 *
 * Sync calls (fsync, fdatasync) run a checkpoint of their file as well.
 * warp.test_flip forces state changes at random points (tests).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "warp.h"
#include "chell/tier.h"

__thread bool warp_bg;
static struct chell_thread *thread;
static struct warp_costs costs;
static bool have_costs;
static struct warp_policy policy;

/* Blocks the checkpoint writes back per hold of the buffer's lock: the
 * application's buffered calls wait for one step (1 MB), not for the whole
 * buffer, and the modelled device's time is waited out between steps. */
#define WB_STEP_BLOCKS 256

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void warp_checkpoint(struct warp_file *w)
{
	uint64_t t0 = now_ns(), held = 0;
	struct warp_hdr *h = w->hdr;
	uint64_t n[WARP_NSTATES] = {0}, bytes[WARP_NSTATES] = {0};
	atomic_store(&h->last_ckpt, mapped_tick());
	uint32_t nn = warp_nnodes(w);
	uint64_t hi = (uint64_t)nn << (h->node_shift - WARP_BLK_SHIFT);
	if (hi > WARP_MAX_BLOCKS || nn == WARP_MAX_NODES)
		hi = WARP_MAX_BLOCKS; /* blocks past the last node with a record */
	for (uint64_t b = 0; b < hi && atomic_load(&h->dirty_blocks);) {
		h = warp_lock(w);
		uint64_t a = now_ns();
		int e = warp_writeback_step(w, w->wfd, &b, hi, WB_STEP_BLOCKS);
		held += now_ns() - a;
		chell_lock_release(&h->lock);
		warp_writeback_settle();
		if (e < 0)
			break; /* stays dirty: the next checkpoint, fsync or close */
	}
	struct warp_costs fc = costs; /* this file's node size caps T_WriteBack */
	fc.wb_cap = (double)(1ull << h->node_shift);
	/* T is the application's time. A write-back this thread makes runs
	 * beside the application (on another CPU; only its device time is
	 * the tier's), one at fsync, close or a state change is waited for:
	 * T_WriteBack counts in the share of this process's write-back bytes
	 * the application waited for so far (none before the first: the
	 * checkpoint is where buffered bytes go by default). */
	uint64_t wb_all = atomic_load(&warp_ctr.writeback_bytes);
	uint64_t wb_bg = atomic_load(&warp_ctr.writeback_bg_bytes);
	double waited = wb_all > wb_bg ? (double)(wb_all - wb_bg) / (double)wb_all : 0.0;
	fc.byte_w[WARP_BUFFERED] -= (1.0 - waited) * fc.wb_byte;
	fc.wb_byte *= waited;
	h = warp_lock(w);
	uint64_t t1 = now_ns();
	bool light = atomic_load(&w->light);
	nn = warp_nnodes(w);
	for (uint32_t k = 0; k < nn; k++) {
		struct warp_node *nd = &w->nodes[k];
		enum warp_state cur = (enum warp_state)atomic_load(&nd->state);
		/* only a node accessed since the last checkpoint is judged: a
		 * checkpoint without accesses is no evidence either way, so a
		 * sparsely used node (large random I/O over many nodes) keeps its
		 * streak until its next access instead of starting it again */
		if (have_costs && (nd->st.nr | nd->st.nw)) {
			struct warp_hyst hy = {nd->cand, nd->streak};
			struct warp_node_stats st = nd->st;
			struct warp_costs nc = fc;
			/* A light file has no buffer yet: buffered costs its making
			 * once (buf.c: promotion, measured), spread over the node's
			 * writes of the interval, so a small file written once or
			 * twice is not worth one */
			if (light && st.nw)
				nc.lat_w[WARP_BUFFERED] += (double)atomic_load(&warp_promote_ns) / (double)st.nw;
			enum warp_state want = warp_model_decide(&nc, &policy, cur, &hy, &st);
			nd->cand = hy.candidate;
			nd->streak = hy.streak;
			/* Buffered needs the lease (warp.outside=lease), which only
			 * the application's description can take: the node's next
			 * write asks for it (warp.c: access_node), for as long as
			 * buffered stays the model's candidate */
			bool wb = want == WARP_BUFFERED ||
				  (atomic_load_explicit(&nd->want, memory_order_relaxed) &&
				   hy.candidate == WARP_BUFFERED);
			atomic_store_explicit(&nd->want, wb && cur != WARP_BUFFERED, memory_order_relaxed);
			if (want != cur && warp_set_state(w, k, want) == 0) {
				cur = want;
				atomic_store_explicit(&nd->want, 0, memory_order_relaxed);
			}
		}
		if (nd->st.nr | nd->st.nw)
			memset(&nd->st, 0, sizeof(nd->st));
		n[cur]++;
		bytes[cur] += 1ull << h->node_shift;
	}
	/* the process's counts are the sum over its files of each one's
	 * last checkpoint (unsigned: a negative change wraps and adds up) */
	for (int s = 0; s < WARP_NSTATES; s++) {
		WCTR(nodes[s], n[s] - w->ck_nodes[s]);
		WCTR(node_bytes[s], bytes[s] - w->ck_bytes[s]);
		w->ck_nodes[s] = n[s];
		w->ck_bytes[s] = bytes[s];
	}
	uint64_t t2 = now_ns();
	chell_lock_release(&h->lock);
	warp_patterns_keep(w);
	WCTR(checkpoints, 1);
	WCTR(decide_ns, t2 - t1);
	WCTR(checkpoint_lock_ns, held + (t2 - t1));
	WCTR(checkpoint_ns, now_ns() - t0);
}

/* Buffered nodes nobody touched for warp.idle_ms: written back, their
 * buffer reclaimed (the state stays: the next write fills again). */
static void idle_reclaim(struct warp_file *w, uint64_t now)
{
	struct warp_hdr *h = w->hdr;
	if (!atomic_load(&h->valid_blocks))
		return;
	h = warp_lock(w);
	uint32_t nn = warp_nnodes(w);
	for (uint32_t k = 0; k < nn; k++) {
		struct warp_node *nd = &w->nodes[k];
		/* last_use may be later than `now` (taken before this pass's
		 * checkpoint, which can take a while): not idle, no wrap-around */
		uint64_t used = nd->last_use;
		if (!nd->valid || used > now || now - used < warp_idle_ns)
			continue;
		uint64_t lo = ((uint64_t)k << h->node_shift) >> WARP_BLK_SHIFT;
		uint64_t hi = ((uint64_t)(k + 1) << h->node_shift) >> WARP_BLK_SHIFT;
		if (warp_writeback(w, w->wfd, lo, hi) == 0)
			warp_invalidate(w, lo, hi);
	}
	chell_lock_release(&h->lock);
}

static void pass(struct warp_file *w, void *arg)
{
	uint64_t now = *(uint64_t *)arg;
	struct warp_hdr *h = w->hdr;
	if (w->retired)
		return; /* let go (the application's lease): the kernel's */
	if (w->wfd < 0 && atomic_load(&h->dirty_blocks))
		return; /* the lease's holders write back and decide (lease.c) */
	uint64_t last = atomic_load(&h->last_ckpt);
	if (now - last >= warp_checkpoint_ns && atomic_compare_exchange_strong(&h->last_ckpt, &last, now))
		warp_checkpoint(w);
	if (warp_idle_ns)
		idle_reclaim(w, now);
}

static void poll_one(struct warp_file *w, void *arg)
{
	if (warp_lease_poll(w))
		*(bool *)arg = true;
}

/* How soon a lease break is noticed: the other process's open waits that
 * long (plus the write-back) before it reads the file. */
#define LEASE_POLL_NS 1000000ull

static void loop(struct chell_thread *t, void *arg)
{
	warp_bg = true;
	uint64_t period = warp_checkpoint_ns ? warp_checkpoint_ns : 100000000ull;
	if (warp_idle_ns && warp_idle_ns / 2 < period)
		period = warp_idle_ns / 2;
	uint64_t next = mapped_tick() + period;
	bool leases = false;
	while (!chell_thread_wait(t, leases && period > LEASE_POLL_NS ? LEASE_POLL_NS : period)) {
		leases = false;
		warp_files_reap();
		if (warp_lease_mode)
			warp_files_each(poll_one, &leases);
		uint64_t now = mapped_tick();
		if (now >= next) {
			warp_files_each(pass, &now);
			/* what the files taught since the last pass, after it (its
			 * checkpoints queue their entries); not at the lease polls */
			warp_learn_flush();
			next = now + period;
		}
	}
}

/* The prefetch thread's work (brain.h): prepare node k for state `want`
 * off the application's path. Mapped: map its node (and check it dense). */
static void prefetch(void *file, uint32_t node, enum warp_state want)
{
	struct warp_file *w = file;
	if (want == WARP_MAPPED && w->rfd >= 0 && warp_tier_addr(w, w->rfd, (uint64_t)node << w->hdr->node_shift, w->hole_gen))
		WCTR(prefetch_used, 1);
}

bool warp_ckpt_running(void)
{
	return thread != NULL;
}

int warp_ckpt_start(void)
{
	static _Atomic int started;
	if (atomic_exchange(&started, 1))
		return 0;
	/* the modelled tier's figures (DRAM's own without a model) */
	const struct chell_tier_figures *d = chell_tier_device();
	struct warp_tier_figures f = {d->read_ns, d->write_ns, d->read_gbps, d->write_gbps};
	warp_costs_init(&costs, &f);
	policy.delta = (double)chell_setting_uint("warp.delta") / 100.0;
	policy.confirm = (unsigned)chell_setting_uint("warp.confirm");
	have_costs = true;
	warp_prefetch_start(prefetch);
	warp_learn_open();
	thread = chell_thread_start("warp", loop, NULL);
	return thread ? 0 : -1;
}

void warp_maybe_flip(chell_ctx *c, struct warp_file *w, uint64_t k)
{
	static __thread uint64_t x;
	if (!x)
		x = 0x9e3779b97f4a7c15ull ^ ((uint64_t)chell_tid() << 17) ^ mapped_tick();
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	if (x % 1000000u >= warp_flip_ppm || k >= WARP_MAX_NODES)
		return;
	enum warp_state s = (enum warp_state)((x >> 32) % WARP_NSTATES);
	if (s == WARP_BUFFERED && !warp_lease_ok(w, c))
		return;
	warp_lock(w);
	if (warp_set_state(w, k, s) == 0)
		WCTR(flips, 1);
	chell_lock_release(&w->hdr->lock);
}
