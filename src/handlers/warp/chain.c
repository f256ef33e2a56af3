/* SPDX-License-Identifier: MIT */
/*
 * The process's chain of files (warp.md §IV-C, predict.c): which file it
 * accessed last, and what that file's tuples predicted would come next.
 *
 * At the first access of the process to a file B, coming from file A:
 *  - the prediction A's tuples made for this context is checked against
 *    B and the node accessed (accuracy, brain.h: the first access of a
 *    file is accurate when the previous file predicted it);
 *  - {context, B, node} is recorded as A's tuple: in A's shared header if
 *    this process still has A open (kept with A's patterns), else queued
 *    for the patterns file (learn.c; `grep -r` and a compiler close each
 *    file before they open the next);
 *  - B's own tuple for this context becomes the prediction for the next
 *    file, and if this process has that file open its hint node is
 *    prefetched. A file it does not have open cannot be: the tuples name
 *    files by identity (device, inode), and a path is needed to open one.
 *
 * The chain is per process (a forked child continues its parent's, an exec
 * starts afresh with the new image's context); slow path only: once per
 * file per process.
 */
#include <pthread.h>

#include "warp.h"

static pthread_mutex_t chain_lock = PTHREAD_MUTEX_INITIALIZER;
static struct warp_file_id last;  /* ino 0: none yet */
static struct warp_xfile predicted_next; /* ctx 0: nothing predicted */

/* {ctx, to, node} into from's tuples, wherever they are now. */
static void record(struct warp_file_id from, uint64_t ctx, struct warp_file_id to, uint32_t node)
{
	struct warp_file *f = warp_file_listed(from.dev, from.ino);
	if (!f) {
		warp_learn_link(from, ctx, to, node);
		return;
	}
	warp_lock(f);
	warp_xfile_record(f->hdr->xf, ctx, to, node);
	chell_lock_release(&f->hdr->lock);
	warp_file_put(f);
}

/* Prefetch node `node` of file `id` if this process has it open and the
 * node is (or, never accessed, starts) mapped. */
static void prefetch_next(struct warp_file_id id, uint32_t node)
{
	struct warp_file *f = warp_file_listed(id.dev, id.ino);
	if (!f)
		return;
	if (node < WARP_MAX_NODES && warp_state_of(f, node) == WARP_MAPPED)
		warp_prefetch_post(f, node, WARP_MAPPED);
	warp_file_put(f); /* the queue forgets f before it is freed */
}

uint32_t warp_chain_enter(struct warp_file *w, uint32_t k)
{
	uint64_t ctx = warp_context_hash();
	struct warp_file_id me = {w->dev, w->ino};
	struct warp_xfile mine = {0};
	warp_lock(w);
	const struct warp_xfile *x = warp_xfile_predict(w->hdr->xf, ctx);
	if (x)
		mine = *x;
	chell_lock_release(&w->hdr->lock);

	pthread_mutex_lock(&chain_lock);
	struct warp_file_id from = last;
	uint32_t hit = predicted_next.ctx && warp_file_id_eq(predicted_next.next, me) ? predicted_next.hint_node
									       : WARP_NODE_NONE;
	last = me;
	predicted_next = mine;
	pthread_mutex_unlock(&chain_lock);

	if (from.ino && !warp_file_id_eq(from, me))
		record(from, ctx, me, k);
	if (mine.ctx && !warp_file_id_eq(mine.next, me))
		prefetch_next(mine.next, mine.hint_node);
	return hit;
}

void warp_chain_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	chain_lock = fresh;
}
