/* SPDX-License-Identifier: MIT */
/*
 * What this process learnt, for the patterns file (warp.patterns, brain.h):
 * node states, successors and cross-file tuples of its files.
 *
 * A file's entry is taken at its checkpoints and its last close
 * (warp_patterns_keep) and a cross-file tuple when the process moves from
 * a file it no longer has open to another (warp_learn_link, chain.c).
 * Neither writes the patterns file on the application's thread: both go
 * into a queue, one entry per file (a later keep replaces it), which the
 * background thread stores at its next pass and the process at exit and
 * exec, all of it in one opening of the file (warp_patterns_store_many).
 * Before, every last close opened, locked and mapped the patterns file
 * for its one entry: `grep -r` over 8,000 files ran 5x slower with
 * patterns than without.
 *
 * What is lost with the queue: the entries of a process killed before its
 * next pass (patterns are hints: a speed cost, never a correctness one).
 * A forked child starts with an empty queue (its parent stores what it
 * had queued).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "warp.h"

struct warp_patterns *warp_pat;

/* One queued entry; states and succ malloc'd, n of each. */
struct item {
	struct warp_file_id id;
	uint32_t n;
	uint8_t *states;
	uint32_t *succ;
	struct warp_xfile xf[WARP_XFILE_SLOTS];
};

/* The queue. A leaf lock, but for the patterns copy's own (taken under it
 * by loads); the flush holds `flushing` across the store so batches reach
 * the file in the order they were queued. */
#define LEARN_MAX 65536u /* entries queued at most; later ones are dropped */
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t flushing = PTHREAD_MUTEX_INITIALIZER;
static struct item *q;
static size_t qn, qcap;
static _Atomic size_t queued; /* qn, read without the lock */

static void open_once(void)
{
	const char *pp = chell_setting("warp.patterns");
	uint64_t files = chell_setting_uint("warp.patterns_files");
	if (!pp[0])
		return;
	if (files == 0 || files > 65536) {
		chell_log("warp.patterns_files is %llu: it must be 1 to 65536; patterns not kept",
			  (unsigned long long)files);
		return;
	}
	/* the persistence core opens the file by its libc names: it is
	 * Chell's own, never routed (it may lie under --path) */
	chell_internal_files_enter();
	if (warp_patterns_open_sized(pp, (uint32_t)files, &warp_pat) < 0)
		warp_pat = NULL; /* said once by warp_patterns_open; speed only */
	chell_internal_files_leave();
}

void warp_learn_open(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, open_once);
}

/* Under qlock: id's queued entry, or NULL. Searched from the newest: a link
 * is for the file the process just left, a keep for one it just used. */
static struct item *find(struct warp_file_id id)
{
	for (size_t i = qn; i-- > 0;)
		if (warp_file_id_eq(q[i].id, id))
			return &q[i];
	return NULL;
}

/* Under qlock: a new entry for id with n nodes (states and successors
 * unset), or NULL (no memory, the queue full). */
static struct item *add(struct warp_file_id id, uint32_t n)
{
	if (qn == qcap) {
		size_t cap = qcap ? 2 * qcap : 64;
		struct item *nq = cap <= LEARN_MAX ? realloc(q, cap * sizeof *q) : NULL;
		if (!nq)
			return NULL;
		q = nq;
		qcap = cap;
	}
	struct item *it = &q[qn];
	memset(it, 0, sizeof *it);
	it->id = id;
	it->n = n;
	it->states = calloc(n, 1);
	it->succ = malloc(n * sizeof *it->succ);
	if (!it->states || !it->succ) {
		free(it->states);
		free(it->succ);
		return NULL;
	}
	qn++;
	atomic_store(&queued, qn);
	return it;
}

/* Under qlock: id's entry, queued or as the copy of the file has it (a
 * file it holds nothing of gets one node, normal, no successor). */
static struct item *entry_of(struct warp_file_id id)
{
	struct item *it = find(id);
	if (it)
		return it;
	uint8_t st[WARP_PATTERNS_NODES];
	uint32_t su[WARP_PATTERNS_NODES];
	struct warp_xfile xf[WARP_XFILE_SLOTS] = {0};
	uint32_t n = warp_patterns_load(warp_pat, id, WARP_PATTERNS_NODES, st, su, xf);
	it = add(id, n ? n : 1);
	if (!it)
		return NULL;
	if (n) {
		memcpy(it->states, st, n);
		memcpy(it->succ, su, n * sizeof *su);
	} else {
		it->states[0] = WARP_NORMAL;
		it->succ[0] = WARP_NODE_NONE;
	}
	memcpy(it->xf, xf, sizeof xf);
	return it;
}

void warp_patterns_apply(struct warp_file *w)
{
	warp_learn_open(); /* the process's first file may come before its checkpoint thread */
	uint32_t n = warp_nnodes(w);
	if (!warp_pat || !n)
		return;
	uint8_t *states = calloc(n, 1);
	uint32_t *succ = calloc(n, sizeof(*succ));
	if (!states || !succ)
		goto out;
	struct warp_file_id id = {w->dev, w->ino};
	uint32_t k = 0;
	/* what this process queued (a file closed and opened again before
	 * the next pass), else what the file holds */
	pthread_mutex_lock(&qlock);
	struct item *it = find(id);
	bool queued_entry = it != NULL;
	if (it) {
		k = it->n < n ? it->n : n;
		memcpy(states, it->states, k);
		for (uint32_t j = 0; j < k; j++)
			succ[j] = it->succ[j] < n ? it->succ[j] : WARP_NODE_NONE;
		memcpy(w->hdr->xf, it->xf, sizeof it->xf);
	}
	pthread_mutex_unlock(&qlock);
	if (!queued_entry) /* (it may be gone: the lock is let go) */
		k = warp_patterns_load(warp_pat, id, n, states, succ, w->hdr->xf);
	/* Only states that need nothing else are applied at once: buffered
	 * needs the lease (warp.outside=lease) and so becomes the node's
	 * state only at its first write. */
	for (uint32_t j = 0; j < k; j++) {
		if (succ[j] != WARP_NODE_NONE && succ[j] < WARP_MAX_NODES)
			warp_succ_set(&w->nodes[j], succ[j]);
		if (states[j] == WARP_MAPPED || (states[j] == WARP_BUFFERED && !warp_lease_mode))
			atomic_store(&w->nodes[j].state, states[j]);
		else if (states[j] == WARP_BUFFERED && (!atomic_load(&w->light) || n > 1))
			atomic_store(&w->nodes[j].want, 1); /* its first write asks for the lease */
		/* (a light file of one node: buffering it would first make its
		 * buffer file, worth it only if the model says so again, with
		 * that cost counted: ckpt.c) */
	}
out:
	free(states);
	free(succ);
}

void warp_patterns_keep(struct warp_file *w)
{
	uint32_t n = warp_nnodes(w);
	if (!warp_pat || !n)
		return;
	if (n > WARP_PATTERNS_NODES)
		n = WARP_PATTERNS_NODES; /* the file keeps no more */
	struct warp_file_id id = {w->dev, w->ino};
	pthread_mutex_lock(&qlock);
	struct item *it = find(id);
	if (it && it->n != n) {
		/* the file grew or shrank: new arrays, both or neither (n and
		 * the arrays' lengths always agree) */
		uint8_t *st = malloc(n);
		uint32_t *su = malloc(n * sizeof *su);
		if (st && su) {
			free(it->states);
			free(it->succ);
			it->states = st;
			it->succ = su;
			it->n = n;
		} else {
			free(st);
			free(su);
		}
	}
	if (!it)
		it = add(id, n);
	if (it && it->n == n) {
		for (uint32_t k = 0; k < n; k++) {
			/* a node the model wants buffered but the lease keeps
			 * normal (not had yet, or broken) is kept as buffered */
			it->states[k] = atomic_load(&w->nodes[k].want) ? WARP_BUFFERED
								       : atomic_load(&w->nodes[k].state);
			it->succ[k] = warp_succ(&w->nodes[k]);
		}
		memcpy(it->xf, w->hdr->xf, sizeof it->xf);
	}
	pthread_mutex_unlock(&qlock);
}

void warp_learn_link(struct warp_file_id from, uint64_t ctx, struct warp_file_id to, uint32_t node)
{
	if (!warp_pat)
		return;
	pthread_mutex_lock(&qlock);
	struct item *it = entry_of(from);
	if (it)
		warp_xfile_record(it->xf, ctx, to, node);
	pthread_mutex_unlock(&qlock);
}

void warp_learn_flush(void)
{
	if (!warp_pat || !atomic_load(&queued))
		return;
	pthread_mutex_lock(&flushing);
	pthread_mutex_lock(&qlock);
	struct item *batch = q;
	size_t n = qn;
	q = NULL;
	qn = qcap = 0;
	atomic_store(&queued, 0);
	pthread_mutex_unlock(&qlock);
	struct warp_pattern_rec *recs = malloc((n ? n : 1) * sizeof *recs);
	if (recs) {
		for (size_t i = 0; i < n; i++)
			recs[i] = (struct warp_pattern_rec){batch[i].id, batch[i].n, batch[i].states, batch[i].succ,
							    batch[i].xf};
		chell_internal_files_enter(); /* see open_once */
		warp_patterns_store_many(warp_pat, recs, n);
		chell_internal_files_leave();
		free(recs);
	}
	for (size_t i = 0; i < n; i++) {
		free(batch[i].states);
		free(batch[i].succ);
	}
	free(batch);
	pthread_mutex_unlock(&flushing);
}

void warp_learn_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	qlock = fresh;
	flushing = fresh;
	for (size_t i = 0; i < qn; i++) {
		free(q[i].states);
		free(q[i].succ);
	}
	free(q);
	q = NULL;
	qn = qcap = 0;
	atomic_store(&queued, 0);
}
