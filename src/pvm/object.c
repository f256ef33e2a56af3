/* SPDX-License-Identifier: MIT */
/*
 * Applications, objects, history and transactions.
 *
 * Locking (docs/PVM.md): the metadata mutex covers the application table,
 * the object tables, the page bitmap and the root; a transaction that
 * changes any of them holds it to its end, because a rollback puts back
 * the bytes it logged and nobody else may have changed them meanwhile
 * (deletion shifts table slots). Object data is covered by the object's
 * stripe mutex, held from the first change to the end of the transaction;
 * lookups take the metadata mutex only for the lookup.
 *
 * New pages (object data, tables, kept versions) are filled without undo
 * records: until the transaction commits nothing reachable points at them
 * and the bitmap that says they are in use is itself rolled back. Pages
 * freed inside a transaction are given back only at its end (deferred), so
 * they are never reused - and overwritten unlogged - by the same
 * transaction, whose rollback would need their old contents.
 */
#include "pvm_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>


/* Test builds narrow the name hash (tests/unit: test_pvm_narrow) so that
 * collisions, which 64 bits make practically impossible, happen all the
 * time there; everything else is the same code. */
/* 63 bits: an ID plus a collision step stays below 2^64 - 1, so pvm_iter's
 * cursor (the next ID to look for) never wraps. */
#ifndef PVM_NH_MASK
#define PVM_NH_MASK (UINT64_MAX >> 1)
#endif

static uint64_t pages_of(uint64_t bytes)
{
	return (bytes + PVM_PAGE - 1) / PVM_PAGE;
}

uint64_t pvm_name_hash(const struct pvm_guid *g, const char *name, size_t len)
{
	uint64_t g0, g1, h = 0xcbf29ce484222325ULL;
	memcpy(&g0, g->b, 8);
	memcpy(&g1, g->b + 8, 8);
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 0x100000001b3ULL;
	return chell_hash64(chell_hash64(g0, g1), h) & PVM_NH_MASK;
}

void pvm_guid_from_name(const char *name, struct pvm_guid *g)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (const char *s = name; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	uint64_t a = chell_hash64(h, 0x70766d), b = chell_hash64(h, a);
	memcpy(g->b, &a, 8);
	memcpy(g->b + 8, &b, 8);
	g->b[6] = (uint8_t)((g->b[6] & 0x0f) | 0x50); /* RFC 4122 version 5 style: name-based */
	g->b[8] = (uint8_t)((g->b[8] & 0x3f) | 0x80);
}

const struct pvm_guid *pvm_app_guid(const struct pvm_app *a)
{
	return &a->guid;
}

/* ------------------------------------------------------------ transactions */

/* Is this thread inside the handle's transaction? Other threads read
 * depth and owner while the owner changes them: atomically, and only the
 * owner ever sees its own id there. */
static int in_tx(const struct pvm_app *a)
{
	return __atomic_load_n(&a->depth, __ATOMIC_ACQUIRE) > 0 &&
	       pthread_equal(__atomic_load_n(&a->owner, __ATOMIC_RELAXED), pthread_self());
}

/* Enter the handle's transaction (begin or nest). Always paired with
 * tx_leave, even when it fails. */
static int tx_enter(struct pvm_app *a)
{
	if (in_tx(a)) {
		a->depth++;
		return a->err ? -ECANCELED : 0;
	}
	pthread_mutex_lock(&a->txm);
	__atomic_store_n(&a->owner, pthread_self(), __ATOMIC_RELAXED);
	__atomic_store_n(&a->depth, 1, __ATOMIC_RELEASE);
	a->err = chell_ptx_begin(&a->t, a->p->r, a->journal);
	return a->err;
}

static void unlock_all(struct pvm_app *a)
{
	struct pvm_pool *p = a->p;
	for (uint32_t w = 0; a->nheld && w < PVM_NLOCKS / 64; w++) {
		while (a->held[w]) {
			uint32_t b = (uint32_t)__builtin_ctzll(a->held[w]);
			a->held[w] &= a->held[w] - 1;
			pthread_mutex_unlock(pvm_mutex(p, PVM_M_OBJ(p, w * 64 + b)));
			a->nheld--;
		}
	}
	if (a->meta_held) {
		/* The commit or abort is done: the tables are whole. */
		uint64_t *seq = pvm_table_seq(p);
		a->seq_end = (*seq | 1) + 1;
		__atomic_store_n(seq, a->seq_end, __ATOMIC_RELEASE);
		pthread_mutex_unlock(pvm_mutex(p, PVM_M_META));
	}
	a->meta_held = 0;
}

/* ------------------------------------------------------------ pointer cache */

static uint32_t pc_home(uint64_t pg, uint32_t mask)
{
	return (uint32_t)((pg * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

/* The entry of first data page pg, or NULL. Called with txm held. */
static struct pvm_pcache *pc_find(struct pvm_app *a, uint64_t pg)
{
	if (!a->pc_cap)
		return NULL;
	uint32_t mask = a->pc_cap - 1;
	for (uint32_t i = pc_home(pg, mask);; i = (i + 1) & mask) {
		if (a->pc[i].page1 == pg + 1)
			return &a->pc[i];
		if (!a->pc[i].page1)
			return NULL;
	}
}

/* The entry of page pg, added if missing (entries are never removed:
 * an invalid one keeps its key with an odd seq). The map doubles at half
 * load and starts over empty at PVM_PCACHE_MAX, so its memory is bounded
 * (a handle that touched more objects than that finds some again through
 * the table). NULL if memory is short. */
static struct pvm_pcache *pc_put(struct pvm_app *a, uint64_t pg)
{
	struct pvm_pcache *e = pc_find(a, pg);
	if (e)
		return e;
	if ((a->pc_n + 1) * 2 > a->pc_cap) {
		uint32_t cap = a->pc_cap ? a->pc_cap * 2 : PVM_PCACHE_MIN;
		int keep = cap <= PVM_PCACHE_MAX;
		if (!keep)
			cap = PVM_PCACHE_MIN;
		struct pvm_pcache *n = calloc(cap, sizeof(*n));
		if (!n)
			return NULL;
		for (uint32_t i = 0; keep && i < a->pc_cap; i++) {
			if (!a->pc[i].page1)
				continue;
			uint32_t j = pc_home(a->pc[i].page1 - 1, cap - 1);
			while (n[j].page1)
				j = (j + 1) & (cap - 1);
			n[j] = a->pc[i];
		}
		free(a->pc);
		a->pc = n;
		if (!keep)
			a->pc_n = 0;
		a->pc_cap = cap;
	}
	uint32_t mask = a->pc_cap - 1, i = pc_home(pg, mask);
	while (a->pc[i].page1)
		i = (i + 1) & mask;
	a->pc_n++;
	a->pc[i].page1 = pg + 1;
	a->pc[i].seq = 1;
	return &a->pc[i];
}

/* Remember object d (name hash h) as valid at table sequence seq (odd:
 * created in the open transaction, valid once it commits). */
static void pc_note(struct pvm_app *a, const struct pvm_odesc *d, uint64_t h, uint64_t seq)
{
	if (!d->cap)
		return;
	uint64_t pg = d->off / PVM_PAGE;
	if ((seq & 1) && a->npend == sizeof(a->pend) / sizeof(a->pend[0]))
		return; /* not remembered: found again when used */
	struct pvm_pcache *e = pc_put(a, pg);
	if (!e)
		return;
	*e = (struct pvm_pcache){pg + 1, seq, h, d->nh, d->off, d->size, d->flags, d->hist_n};
	if (seq & 1)
		a->pend[a->npend++] = pg;
}

/* At the end of the transaction: the objects it created are valid at the
 * sequence its commit stored; after an abort they stay invalid (odd). */
static void pc_settle(struct pvm_app *a, int committed)
{
	for (uint32_t i = 0; committed && i < a->npend; i++) {
		struct pvm_pcache *e = pc_find(a, a->pend[i]);
		if (e && (e->seq & 1))
			e->seq = a->seq_end;
	}
	a->npend = 0;
}

static int tx_finish(struct pvm_app *a)
{
	int rc = 0;
	/* Deferred frees, in the same transaction (the bitmap words logged). */
	for (size_t i = 0; !a->err && i < a->nfrees; i++) {
		int r = chell_bm_set_run(&a->t, a->p->bm_off, (uint32_t)(a->frees[i].off / PVM_PAGE),
					 (uint32_t)pages_of(a->frees[i].len), 0);
		if (r)
			a->err = r;
	}
	/* New pages (and claimed table slots) were written without undo
	 * records - by us or, for objects created here, by the caller: their
	 * bytes must be durable with the commit (whose first drain orders
	 * these flushes). */
	for (size_t i = 0; !a->err && i < a->nfresh; i++)
		pvm_flush_new(a->p, a->p->heap + a->fresh[i].off, a->fresh[i].len);
	/* A transaction of PVM_TX_NO_SNAPSHOT ranges only has no record, and
	 * its commit then drains nothing: durable before it returns. */
	if (!a->err && a->nfresh && !a->t.nadd)
		chell_ptx_fence(&a->t);
	if (a->t.tx) {
		if (a->err && !a->t.err)
			a->t.err = a->err;
		rc = chell_ptx_end(&a->t);
	}
	if (a->err)
		rc = a->err;
	int had_meta = a->meta_held;
	unlock_all(a);
	if (a->npend)
		pc_settle(a, !rc && had_meta);
	a->nfrees = 0;
	a->nfresh = 0;
	a->ntouched = 0;
	a->err = 0;
	__atomic_store_n(&a->depth, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&a->txm);
	return rc;
}

static int tx_leave(struct pvm_app *a, int rc)
{
	if (rc < 0 && !a->err)
		a->err = rc;
	if (--a->depth > 0)
		return rc;
	int end = tx_finish(a);
	return rc < 0 ? rc : end;
}

static int meta_hold(struct pvm_app *a)
{
	if (a->meta_held)
		return 0;
	int rc = pvm_lock(a->p, pvm_mutex(a->p, PVM_M_META), a->nheld > 0);
	if (!rc) {
		a->meta_held = 1;
		uint64_t *seq = pvm_table_seq(a->p);
		__atomic_store_n(seq, *seq | 1, __ATOMIC_RELAXED);
		/* Odd before any change to the tables is visible. */
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		pvm_prot_sync(a->p);
	}
	return rc;
}

/* The metadata lock for a lookup only: not taken if this thread's
 * transaction holds it. *brief says whether to release it. */
static int meta_brief(struct pvm_app *a, int *brief)
{
	*brief = 0;
	if (in_tx(a) && a->meta_held)
		return 0;
	int rc = pvm_lock(a->p, pvm_mutex(a->p, PVM_M_META), in_tx(a) && a->nheld > 0);
	if (!rc) {
		*brief = 1;
		pvm_prot_sync(a->p);
	}
	return rc;
}
static void meta_unbrief(struct pvm_app *a, int brief)
{
	if (brief)
		pthread_mutex_unlock(pvm_mutex(a->p, PVM_M_META));
}

/* Lock the stripe of the object whose name hashes (before any collision
 * step) to h. */
static int stripe_hold(struct pvm_app *a, uint64_t h)
{
	uint32_t s = (uint32_t)chell_hash64(a->idx, h) & (PVM_NLOCKS - 1);
	if (a->held[s / 64] >> (s % 64) & 1)
		return 0;
	int rc = pvm_lock(a->p, pvm_mutex(a->p, PVM_M_OBJ(a->p, s)), a->nheld > 0 || a->meta_held);
	if (rc)
		return rc;
	a->held[s / 64] |= 1ull << (s % 64);
	a->nheld++;
	return 0;
}

/* ------------------------------------------------------------ pages */

/* Find n free pages (growing the pool if needed) without taking them:
 * the caller logs their bitmap words and sets them (alloc_pages, or
 * pvm_create's batch). */
static int find_pages(struct pvm_app *a, uint64_t n, uint64_t *page)
{
	struct pvm_pool *p = a->p;
	for (int tries = 0; tries < 2; tries++) {
		uint64_t cur = p->root->cur_pages;
		/* Next fit from where this process last allocated: the pages
		 * before it are mostly in use, scanning them each time made
		 * allocation linear in the pool's population. */
		uint64_t hint = p->alloc_hint < p->data_page || p->alloc_hint >= cur ? p->data_page : p->alloc_hint;
		uint32_t s = chell_bm_find_run(p->heap, p->bm_off, (uint32_t)cur, (uint32_t)hint, (uint32_t)n);
		if (s != CHELL_BM_NONE && s < p->data_page) /* wrapped into the reserved pages */
			s = chell_bm_find_run(p->heap, p->bm_off, (uint32_t)cur, (uint32_t)p->data_page, (uint32_t)n);
		if (s != CHELL_BM_NONE && s >= p->data_page) {
			*page = s;
			return 0;
		}
		int rc = pvm_grow(a, cur + n);
		if (rc)
			return rc;
	}
	return -ENOSPC;
}

/* Mark pages found by find_pages in use; their words are logged. */
static void take_pages(struct pvm_app *a, uint64_t page, uint64_t n)
{
	chell_bm_apply_run(a->p->heap, a->p->bm_off, (uint32_t)page, (uint32_t)n, 1);
	a->p->alloc_hint = page + n;
}

static int alloc_pages(struct pvm_app *a, uint64_t n, uint64_t *page)
{
	int rc = find_pages(a, n, page);
	if (!rc && (!chell_bm_log_run(&a->t, a->p->bm_off, (uint32_t)*page, (uint32_t)n) || chell_ptx_fence(&a->t)))
		rc = a->t.err;
	if (!rc)
		take_pages(a, *page, n);
	return rc;
}

static int push_extent(struct pvm_extent **v, size_t *n, size_t *cap, uint64_t off, uint64_t len)
{
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		struct pvm_extent *f = realloc(*v, nc * sizeof(*f));
		if (!f)
			return -ENOMEM;
		*v = f;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct pvm_extent){off, len};
	return 0;
}

static int free_pages(struct pvm_app *a, uint64_t off, uint64_t bytes)
{
	return bytes ? push_extent(&a->frees, &a->nfrees, &a->capfrees, off, bytes) : 0;
}

/* Fill new pages at heap offset off: from src (srclen bytes), then zeros
 * up to `bytes` (what lies past it in the last page is not part of
 * anything: a resize in place zeroes it, logged); they are flushed at the
 * commit. */
static int fill_new(struct pvm_app *a, uint64_t off, uint64_t bytes, const void *src, uint64_t srclen)
{
	uint8_t *d = a->p->heap + off;
	if (srclen)
		memcpy(d, src, srclen);
	memset(d + srclen, 0, bytes - srclen);
	return push_extent(&a->fresh, &a->nfresh, &a->capfresh, off, bytes);
}

/* Allocate pages for `bytes` and fill them (fill_new). *off = heap offset
 * (0 for 0 bytes). */
static int alloc_filled(struct pvm_app *a, uint64_t bytes, const void *src, uint64_t srclen, uint64_t *off)
{
	*off = 0;
	if (!bytes)
		return 0;
	uint64_t page;
	int rc = alloc_pages(a, pages_of(bytes), &page);
	if (rc)
		return rc;
	*off = page * PVM_PAGE;
	return fill_new(a, *off, bytes, src, srclen);
}

/* ------------------------------------------------------------ tables */

struct tab {
	struct pvm_odesc *d;
	uint64_t off;
	uint32_t mask;
};

static struct tab tab_of(struct pvm_app *a)
{
	struct pvm_aent *e = pvm_aent(a->p, a->idx);
	return (struct tab){(struct pvm_odesc *)(a->p->heap + e->table_off), e->table_off, e->slots - 1};
}

static uint32_t home_of(uint64_t nh)
{
	return (uint32_t)(nh ^ nh >> 32);
}
static uint32_t od_home(void *ctx, const void *s)
{
	(void)ctx;
	return home_of(((const struct pvm_odesc *)s)->nh);
}
static int od_used(const void *s)
{
	return ((const struct pvm_odesc *)s)->used != 0;
}
static struct chell_htab htab_of(struct pvm_app *a, const struct tab *t)
{
	return (struct chell_htab){a->p->heap, t->off, sizeof(struct pvm_odesc), t->mask, od_home, od_used, NULL};
}

/* The first free slot on nh's probe sequence (UINT32_MAX: none). */
static uint32_t free_slot(struct pvm_app *a, uint64_t nh)
{
	struct tab t = tab_of(a);
	uint32_t i = home_of(nh) & t.mask;
	for (uint32_t k = 0; k <= t.mask; k++, i = (i + 1) & t.mask)
		if (!t.d[i].used)
			return i;
	return UINT32_MAX;
}

/* Undo-log slot i's used word (with name_len: 8 bytes). */
static void *log_used(struct pvm_app *a, uint32_t i, int drain)
{
	struct tab t = tab_of(a);
	uint64_t off = t.off + (uint64_t)i * sizeof(struct pvm_odesc) + offsetof(struct pvm_odesc, name_len);
	return drain ? chell_ptx_add(&a->t, off, 8) : chell_ptx_log(&a->t, off, 8);
}

/* Zero slot i (its used word logged) for hash nh and a name of name_len
 * bytes; written without undo and flushed at the commit: the fields and
 * the name with its terminator only, nothing reads a descriptor past
 * that (pvm_app_validate neither), so the lines after it need not be
 * persisted (2 lines instead of 4 for names under 63 bytes). The first
 * line is not on the fresh list: it holds the used word, which every
 * caller has logged, and the commit flushes logged ranges anyway (a line
 * flushed twice costs a second write-back wait). NULL with the error in
 * t.err. */
static struct pvm_odesc *init_desc(struct pvm_app *a, uint32_t i, uint64_t nh, size_t name_len)
{
	_Static_assert(offsetof(struct pvm_odesc, name) == 64 && offsetof(struct pvm_odesc, used) < 64 &&
			       sizeof(struct pvm_odesc) % 64 == 0,
		       "the used word shares the descriptor's first line with the fields, the name starts the second");
	struct tab t = tab_of(a);
	struct pvm_odesc *d = &t.d[i];
	memset(d, 0, sizeof(*d));
	d->nh = nh;
	int rc = push_extent(&a->fresh, &a->nfresh, &a->capfresh,
			     t.off + (uint64_t)i * sizeof(*d) + offsetof(struct pvm_odesc, name), name_len + 1);
	if (rc) {
		a->t.err = rc;
		return NULL;
	}
	return d;
}

/* Claim a free slot for hash nh: only its `used` word is logged (a
 * rollback makes the slot free again; what else it then holds is ignored,
 * as in every free slot); the rest is written without undo and flushed
 * at the commit. Returns the zeroed slot, NULL with the error in t.err. */
static struct pvm_odesc *claim_desc(struct pvm_app *a, uint64_t nh, size_t name_len)
{
	uint32_t i = free_slot(a, nh);
	if (i == UINT32_MAX) {
		a->t.err = -EUCLEAN; /* full: the load bound was broken */
		return NULL;
	}
	if (!log_used(a, i, 1))
		return NULL;
	return init_desc(a, i, nh, name_len);
}

/* Slot holding hash nh, or UINT32_MAX. */
static uint32_t find_nh(const struct tab *t, uint64_t nh)
{
	uint32_t i = home_of(nh) & t->mask;
	for (uint32_t k = 0; k <= t->mask; k++, i = (i + 1) & t->mask) {
		if (!t->d[i].used)
			return UINT32_MAX;
		if (t->d[i].nh == nh)
			return i;
	}
	return UINT32_MAX;
}

/* Find by name. An object's ID is its name's hash h plus a collision
 * step k: the first of h, h+1, ... that no other object held when it was
 * created (or renamed to this name). Deleting an object frees its value
 * without moving anyone else's ID, so an absent value does not end the
 * search: it goes on to h + max_step, the largest step any object of the
 * application ever took (0 unless a collision ever happened, so a lookup
 * is one probe). *free_nh (if not NULL) gets the first value absent, where
 * a new object of this name goes. */
static uint32_t find_in(const struct tab *tp, uint64_t max, const char *name, size_t len, uint64_t h,
			uint64_t *free_nh)
{
	const struct tab t = *tp;
	int want_free = free_nh != NULL;
	for (uint64_t k = 0; k <= max || want_free; k++) {
		uint32_t s = find_nh(&t, h + k);
		if (s == UINT32_MAX) {
			if (want_free) {
				*free_nh = h + k;
				want_free = 0;
			}
			continue;
		}
		if (k <= max && t.d[s].name_len == len && !memcmp(t.d[s].name, name, len))
			return s;
	}
	return UINT32_MAX;
}
static uint32_t find_name_h(struct pvm_app *a, const char *name, size_t len, uint64_t h, uint64_t *free_nh)
{
	struct tab t = tab_of(a);
	return find_in(&t, pvm_aent(a->p, a->idx)->max_step, name, len, h, free_nh);
}
static uint32_t find_name(struct pvm_app *a, const char *name, size_t len, uint64_t *free_nh)
{
	return find_name_h(a, name, len, pvm_name_hash(&a->guid, name, len), free_nh);
}


static int check_name(const char *name, size_t *len)
{
	if (!name || !*name)
		return -EINVAL;
	*len = strnlen(name, PVM_NAME_MAX);
	return *len >= PVM_NAME_MAX ? -ENAMETOOLONG : 0;
}

static uint64_t heap_off(struct pvm_app *a, const void *at)
{
	return (uint64_t)((const uint8_t *)at - a->p->heap);
}

static void *log_field(struct pvm_app *a, const void *field, size_t len)
{
	return chell_ptx_add(&a->t, (uint64_t)((const uint8_t *)field - a->p->heap), len);
}

/* A new object takes ID nh for `name`: raise the application's max_step
 * (logged) if its step is the largest yet. */
static int note_step(struct pvm_app *a, const char *name, size_t len, uint64_t nh)
{
	struct pvm_aent *e = pvm_aent(a->p, a->idx);
	uint64_t k = nh - pvm_name_hash(&a->guid, name, len);
	if (k <= e->max_step)
		return 0;
	uint64_t *m = log_field(a, &e->max_step, 8);
	if (!m)
		return a->t.err;
	*m = k;
	return 0;
}

/* Double the object table when one more object would load it past 1/2.
 * The new table is new pages (no undo); the entry's table_off, slots and
 * crc are logged; the old table is freed at the end. */
static int table_room(struct pvm_app *a)
{
	struct pvm_aent *e = pvm_aent(a->p, a->idx);
	if ((e->objects + 1) * 2 <= e->slots)
		return 0;
	if (e->slots >= PVM_MAX_SLOTS)
		return -ENOSPC;
	struct tab old = tab_of(a);
	uint32_t slots = e->slots * 2;
	uint64_t off;
	int rc = alloc_filled(a, (uint64_t)slots * sizeof(struct pvm_odesc), NULL, 0, &off);
	if (rc)
		return rc;
	struct tab nt = {(struct pvm_odesc *)(a->p->heap + off), off, slots - 1};
	for (uint32_t i = 0; i <= old.mask; i++) {
		if (!old.d[i].used)
			continue;
		uint32_t j = home_of(old.d[i].nh) & nt.mask;
		while (nt.d[j].used)
			j = (j + 1) & nt.mask;
		nt.d[j] = old.d[i];
	}
	struct pvm_aent *le = log_field(a, e, offsetof(struct pvm_aent, objects));
	if (!le)
		return a->t.err;
	rc = free_pages(a, e->table_off, (uint64_t)e->slots * sizeof(struct pvm_odesc));
	le->table_off = off;
	le->slots = slots;
	le->crc = pvm_aent_crc(le);
	return rc;
}

static int count_objects(struct pvm_app *a, int delta)
{
	struct pvm_aent *e = pvm_aent(a->p, a->idx);
	uint64_t *c = log_field(a, &e->objects, 8);
	if (!c)
		return a->t.err;
	*c += (uint64_t)(int64_t)delta;
	return 0;
}

/* ------------------------------------------------------------ applications */

static int app_find_or_create(struct pvm_app *a, const char *name, const struct pvm_guid *guid, unsigned flags,
			      char *err, size_t errlen)
{
	struct pvm_pool *p = a->p;
	uint32_t free_i = UINT32_MAX;
	for (uint32_t i = 0; i < p->max_apps; i++) {
		struct pvm_aent *e = pvm_aent(p, i);
		if (!(e->flags & PVM_A_USED)) {
			if (free_i == UINT32_MAX)
				free_i = i;
			continue;
		}
		if (strncmp(e->name, name, PVM_APP_NAME_MAX))
			continue;
		int rc = pvm_app_validate(p, i, err, errlen);
		if (rc)
			return rc;
		if (guid && memcmp(guid->b, e->guid, 16)) {
			pvm_err(err, errlen, "application \"%s\": the given gUID differs from the stored one", name);
			return -EINVAL;
		}
		memcpy(a->guid.b, e->guid, 16);
		a->idx = i;
		return 0;
	}
	if (!(flags & PVM_APP_CREATE)) {
		pvm_err(err, errlen, "no application \"%s\" in the pool", name);
		return -ENOENT;
	}
	if (free_i == UINT32_MAX) {
		pvm_err(err, errlen, "the application table is full (%u entries)", p->max_apps);
		return -ENOSPC;
	}
	uint64_t off;
	int rc = alloc_filled(a, PVM_DEF_SLOTS * sizeof(struct pvm_odesc), NULL, 0, &off);
	if (rc) {
		pvm_err(err, errlen, "no space for the object table of \"%s\": %s", name, strerror(-rc));
		return rc;
	}
	struct pvm_aent *e = chell_ptx_add(&a->t, p->apps_off + (uint64_t)free_i * sizeof(*e), sizeof(*e));
	if (!e)
		return a->t.err;
	memset(e, 0, sizeof(*e));
	if (guid)
		a->guid = *guid;
	else
		pvm_guid_from_name(name, &a->guid);
	memcpy(e->guid, a->guid.b, 16);
	strncpy(e->name, name, PVM_APP_NAME_MAX - 1);
	e->table_off = off;
	e->slots = PVM_DEF_SLOTS;
	e->flags = PVM_A_USED;
	e->crc = pvm_aent_crc(e);
	a->idx = free_i;
	return 0;
}

/* Claim a free journal; one whose owner died is rolled back first. */
static int claim_journal(struct pvm_pool *p, uint32_t *out)
{
	pthread_mutex_lock(&p->local);
	for (uint32_t j = 0; j < p->journals; j++) {
		if (p->claimed[j])
			continue;
		pthread_mutex_t *cm = pvm_mutex(p, PVM_M_CLAIM(j));
		int rc = pthread_mutex_trylock(cm);
		if (rc == EOWNERDEAD) {
			pthread_mutex_t *rm = pvm_mutex(p, PVM_M_RECOVERY);
			if (pthread_mutex_lock(rm) == EOWNERDEAD)
				pthread_mutex_consistent(rm);
			pvm_writable_all(p);
			chell_journal_recover(p->r, j);
			pthread_mutex_consistent(cm);
			pthread_mutex_unlock(rm);
			rc = 0;
		}
		if (rc == 0) {
			*pvm_claim_pid(p, j) = (int32_t)getpid();
			p->claimed[j] = 1;
			pthread_mutex_unlock(&p->local);
			*out = j;
			return 0;
		}
	}
	pthread_mutex_unlock(&p->local);
	return -EBUSY;
}

static void release_journal(struct pvm_pool *p, uint32_t j)
{
	pthread_mutex_lock(&p->local);
	pthread_mutex_unlock(pvm_mutex(p, PVM_M_CLAIM(j)));
	p->claimed[j] = 0;
	pthread_mutex_unlock(&p->local);
}

int pvm_app_open(struct pvm_pool *p, const char *name, const struct pvm_guid *guid, unsigned flags,
		 struct pvm_app **out, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
	if (!p || !name || !*name || !out)
		return -EINVAL;
	*out = NULL;
	if (strnlen(name, PVM_APP_NAME_MAX) >= PVM_APP_NAME_MAX) {
		pvm_err(err, errlen, "application name longer than %d bytes", PVM_APP_NAME_MAX - 1);
		return -ENAMETOOLONG;
	}
	struct pvm_app *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->p = p;
	pthread_mutex_init(&a->txm, NULL);
	int rc = claim_journal(p, &a->journal);
	if (rc) {
		pvm_err(err, errlen, "every journal of the pool (%u) is in use", p->journals);
		pthread_mutex_destroy(&a->txm);
		free(a);
		return rc;
	}
	rc = tx_enter(a);
	if (!rc)
		rc = meta_hold(a);
	if (!rc)
		rc = app_find_or_create(a, name, guid, flags, err, errlen);
	rc = tx_leave(a, rc);
	if (rc) {
		if (err && errlen && !err[0])
			pvm_err(err, errlen, "cannot open application \"%s\": %s", name, strerror(-rc));
		release_journal(p, a->journal);
		pthread_mutex_destroy(&a->txm);
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

void pvm_app_close(struct pvm_app *a)
{
	if (!a)
		return;
	if (in_tx(a)) {
		a->err = a->err ? a->err : -ECANCELED;
		a->depth = 1;
		tx_leave(a, 0);
	}
	release_journal(a->p, a->journal);
	pthread_mutex_destroy(&a->txm);
	free(a->frees);
	free(a->fresh);
	free(a->touched);
	free(a->iter_nh);
	free(a->pc);
	free(a);
}

/* ------------------------------------------------------------ history */

static struct pvm_hent *hist_block(struct pvm_app *a, const struct pvm_odesc *d)
{
	return (struct pvm_hent *)(a->p->heap + d->hist_off);
}

/* Keep the current content of object slot s as a version before its
 * first change in this transaction, and advance its version. */
static int touch(struct pvm_app *a, uint32_t s)
{
	struct tab t = tab_of(a);
	struct pvm_odesc *d = &t.d[s];
	if (!d->hist_n)
		return 0;
	for (size_t i = 0; i < a->ntouched; i++)
		if (a->touched[i] == d->nh)
			return 0;
	if (a->ntouched == a->captouched) {
		size_t nc = a->captouched ? a->captouched * 2 : 8;
		uint64_t *n = realloc(a->touched, nc * sizeof(*n));
		if (!n)
			return -ENOMEM;
		a->touched = n;
		a->captouched = nc;
	}
	int rc = meta_hold(a);
	if (rc)
		return rc;
	struct pvm_hent *h = hist_block(a, d);
	uint32_t victim = 0, used = 0;
	for (uint32_t i = 0; i < PVM_HISTORY_MAX; i++) {
		if (!h[i].version)
			continue;
		if (!used++ || h[i].version < h[victim].version)
			victim = i;
	}
	if (used < d->hist_n) {
		for (victim = 0; h[victim].version; victim++)
			;
	} else {
		rc = free_pages(a, h[victim].off, h[victim].cap);
		if (rc)
			return rc;
	}
	uint64_t off;
	rc = alloc_filled(a, d->size, a->p->heap + d->off, d->size, &off);
	if (rc)
		return rc;
	t = tab_of(a); /* alloc may not move the table, but stay honest */
	d = &t.d[s];
	struct pvm_hent *e = log_field(a, &h[victim], sizeof(*e));
	uint64_t *v = log_field(a, &d->version, 8);
	if (!e || !v)
		return a->t.err;
	*e = (struct pvm_hent){d->version, off, d->size, pages_of(d->size) * PVM_PAGE};
	(*v)++;
	a->touched[a->ntouched++] = d->nh;
	return 0;
}

/* ------------------------------------------------------------ objects */

static void fill_info(struct pvm_app *a, const struct pvm_odesc *d, struct pvm_info *info)
{
	if (!info)
		return;
	memset(info, 0, sizeof(*info));
	memcpy(info->name, d->name, d->name_len);
	info->oid.guid = a->guid;
	info->oid.nh = d->nh;
	info->size = d->size;
	info->capacity = d->cap;
	info->version = d->version;
	info->history = d->hist_n;
	info->flags = d->flags;
}

int pvm_create(struct pvm_app *a, const char *name, uint64_t size, void **ptr)
{
	size_t len;
	uint64_t nh = 0, off = 0, np = pages_of(size), page = 0;
	uint32_t slot = UINT32_MAX;
	if (!a)
		return -EINVAL;
	int rc = check_name(name, &len);
	if (rc)
		return rc;
	uint64_t h = pvm_name_hash(&a->guid, name, len);
	rc = tx_enter(a);
	if (!rc)
		rc = meta_hold(a);
	if (!rc && find_name_h(a, name, len, h, &nh) != UINT32_MAX)
		rc = -EEXIST;
	if (!rc)
		rc = table_room(a);
	if (!rc && np)
		rc = find_pages(a, np, &page);
	if (!rc && (slot = free_slot(a, nh)) == UINT32_MAX)
		rc = -EUCLEAN; /* full: the load bound was broken */
	/* Every word this changes in place - the pages' bitmap words, the
	 * slot's used word, the count, the largest collision step - is logged
	 * under one fence instead of one each: small creates are mostly
	 * fences. Nothing is stored to them before it. */
	struct pvm_aent *e = pvm_aent(a->p, a->idx);
	int step_up = !rc && nh - h > e->max_step;
	/* The new pages are filled first: they are free (no other
	 * allocation runs while the metadata lock is held) and nothing
	 * reaches them, so they need no ordering against the records, and
	 * their first-touch misses then overlap the fence's wait. */
	if (!rc && np) {
		off = page * PVM_PAGE;
		rc = fill_new(a, off, size, NULL, 0);
	}
	if (!rc && ((np && !chell_bm_log_run(&a->t, a->p->bm_off, (uint32_t)page, (uint32_t)np)) ||
		    !log_used(a, slot, 0) || !chell_ptx_log(&a->t, heap_off(a, &e->objects), 8) ||
		    (step_up && !chell_ptx_log(&a->t, heap_off(a, &e->max_step), 8)) || chell_ptx_fence(&a->t)))
		rc = a->t.err;
	if (!rc && np)
		take_pages(a, page, np);
	struct pvm_odesc *d = rc ? NULL : init_desc(a, slot, nh, len);
	if (!rc && !d)
		rc = a->t.err;
	if (!rc) {
		d->off = off;
		d->size = size;
		d->cap = np * PVM_PAGE;
		d->version = 1;
		d->name_len = (uint32_t)len;
		d->used = PVM_O_USED;
		memcpy(d->name, name, len);
		e->objects++;
		pc_note(a, d, h, 1);
		if (step_up)
			e->max_step = nh - h;
	}
	rc = tx_leave(a, rc);
	if (!rc && ptr)
		*ptr = off ? a->p->heap + off : NULL;
	return rc;
}

/* The application's table as a lock-free reader sees it: the sequence
 * *s1 (even: no metadata transaction running) and the table, its fields
 * checked against the pool (another process may be changing them).
 * 0, or 1: not now (a transaction runs, or this thread holds the lock). A
 * reader copies what it needs, then fast_view_end says whether the copy
 * is whole. */
static int fast_view(struct pvm_app *a, uint64_t *s1, struct tab *t, uint64_t *max)
{
	struct pvm_pool *p = a->p;
	if (in_tx(a) && a->meta_held)
		return 1;
	*s1 = __atomic_load_n(pvm_table_seq(p), __ATOMIC_ACQUIRE);
	if (*s1 & 1)
		return 1;
	pvm_prot_sync(p);
	const struct pvm_aent *e = pvm_aent(p, a->idx);
	uint64_t toff = e->table_off, slots = e->slots;
	uint64_t end = p->root->cur_pages * PVM_PAGE;
	*max = e->max_step;
	if (slots < 2 || slots > PVM_MAX_SLOTS || (slots & (slots - 1)) || toff % PVM_PAGE ||
	    toff < p->data_page * PVM_PAGE || toff > end || slots * sizeof(struct pvm_odesc) > end - toff ||
	    *max >= PVM_MAX_SLOTS)
		return 1;
	*t = (struct tab){(struct pvm_odesc *)(p->heap + toff), toff, (uint32_t)slots - 1};
	return 0;
}
static int fast_view_end(struct pvm_app *a, uint64_t s1)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(pvm_table_seq(a->p), __ATOMIC_RELAXED) == s1 ? 0 : 1;
}

/* Optimistic lookup without the metadata mutex (see pvm_table_seq): copy
 * the descriptor of `name` (hash h) into *copy. 0: found; -ENOENT: not
 * there; 1: the tables were changing (or this thread's transaction holds
 * the mutex): look up under the mutex instead. Everything read may be torn
 * until the sequence check, so it is bounds-checked, never trusted. */
static int lookup_fast_seq(struct pvm_app *a, const char *name, size_t len, uint64_t h, struct pvm_odesc *copy,
			   uint64_t *seen)
{
	uint64_t s1, max;
	struct tab t;
	if (fast_view(a, &s1, &t, &max))
		return 1;
	uint32_t s = find_in(&t, max, name, len, h, NULL);
	if (s != UINT32_MAX)
		memcpy(copy, &t.d[s], sizeof(*copy));
	if (fast_view_end(a, s1))
		return 1;
	*seen = s1;
	return s == UINT32_MAX ? -ENOENT : 0;
}
static int lookup_fast(struct pvm_app *a, const char *name, size_t len, uint64_t h, struct pvm_odesc *copy)
{
	uint64_t seen;
	return lookup_fast_seq(a, name, len, h, copy, &seen);
}

/* Look `name` up with the metadata lock taken for the lookup (*brief:
 * release it with meta_unbrief once done with *d). */
static int lookup(struct pvm_app *a, const char *name, int *brief, struct pvm_odesc **d)
{
	size_t len;
	int rc = check_name(name, &len);
	if (rc)
		return rc;
	rc = meta_brief(a, brief);
	if (rc)
		return rc;
	uint32_t s = find_name(a, name, len, NULL);
	if (s == UINT32_MAX) {
		meta_unbrief(a, *brief);
		return -ENOENT;
	}
	*d = &tab_of(a).d[s];
	return 0;
}

int pvm_open(struct pvm_app *a, const char *name, void **ptr, struct pvm_info *info)
{
	int brief;
	struct pvm_odesc *d;
	if (!a)
		return -EINVAL;
	size_t len;
	struct pvm_odesc c;
	int rc = check_name(name, &len);
	if (rc)
		return rc;
	uint64_t h = pvm_name_hash(&a->guid, name, len), seen = 0;
	rc = lookup_fast_seq(a, name, len, h, &c, &seen);
	if (rc <= 0 && !(rc == 0 && (c.flags & PVM_F_PROTECTED))) { /* protected: mprotect under the lock */
		if (rc == 0) {
			/* For pvm_tx_add_ptr: by the transaction's thread, or
			 * by another when no transaction holds txm. */
			if (in_tx(a)) {
				pc_note(a, &c, h, seen);
			} else if (pthread_mutex_trylock(&a->txm) == 0) {
				pc_note(a, &c, h, seen);
				pthread_mutex_unlock(&a->txm);
			}
			fill_info(a, &c, info);
			if (ptr)
				*ptr = c.cap ? a->p->heap + c.off : NULL;
		}
		return rc;
	}
	rc = lookup(a, name, &brief, &d);
	if (rc)
		return rc;
	fill_info(a, d, info);
	uint8_t *data = d->cap ? a->p->heap + d->off : NULL;
	if (data && (d->flags & PVM_F_PROTECTED)) {
		__atomic_store_n(&a->p->ro_any, 1, __ATOMIC_RELAXED);
		mprotect(data, d->cap, PROT_READ);
	}
	meta_unbrief(a, brief);
	if (ptr)
		*ptr = data;
	return 0;
}

/* Lock the object for this transaction and look it up. The stripe comes
 * from the name's own hash (before any collision step), so it is known
 * without a lookup; *slot is valid while the metadata lock is held (always
 * on return when hold_meta), *copy (if not NULL) gets the descriptor. */
static int lock_object(struct pvm_app *a, const char *name, int hold_meta, uint32_t *slot, struct pvm_odesc *copy)
{
	size_t len;
	int brief;
	int rc = check_name(name, &len);
	uint64_t h = rc ? 0 : pvm_name_hash(&a->guid, name, len);
	if (!rc)
		rc = stripe_hold(a, h);
	if (!rc && !hold_meta && copy) {
		/* Only the copy is wanted: the stripe keeps this object's own
		 * fields still; the seqlock covers its slot moving. */
		int f = lookup_fast(a, name, len, h, copy);
		*slot = UINT32_MAX; /* not known without the lock */
		if (f <= 0)
			return f;
	}
	if (!rc && hold_meta)
		rc = meta_hold(a);
	if (!rc)
		rc = meta_brief(a, &brief);
	if (rc)
		return rc;
	uint32_t s = find_name_h(a, name, len, h, NULL);
	if (s != UINT32_MAX && copy)
		*copy = tab_of(a).d[s];
	meta_unbrief(a, brief);
	if (s == UINT32_MAX)
		return -ENOENT;
	*slot = s;
	return 0;
}

/* The transaction takes [off, off+len) of the heap: an undo record, or
 * with PVM_TX_NO_SNAPSHOT only a flush at commit (the fresh list). */
static int tx_range(struct pvm_app *a, uint64_t off, uint64_t len, unsigned flags)
{
	if (flags & PVM_TX_NO_SNAPSHOT)
		return push_extent(&a->fresh, &a->nfresh, &a->capfresh, off, len);
	return chell_ptx_add(&a->t, off, len) ? 0 : a->t.err;
}

/* pvm_tx_add of the object `name`; with at != UINT64_MAX the object's
 * data must start at heap offset `at` (pvm_tx_add_ptr: -EINVAL if the
 * pointer is no longer that object's). */
static int tx_add_named(struct pvm_app *a, const char *name, uint64_t at, uint64_t off, uint64_t len,
			unsigned flags)
{
	uint32_t s;
	struct pvm_odesc d;
	int rc = tx_enter(a);
	if (!rc)
		rc = lock_object(a, name, 0, &s, &d);
	if (!rc && at != UINT64_MAX && (!d.cap || d.off != at))
		rc = -EINVAL;
	if (!rc && (d.flags & PVM_F_PROTECTED))
		rc = -EPERM;
	if (!rc && (off > d.size || len > d.size - off))
		rc = -EINVAL;
	if (!rc && d.hist_n) {
		rc = meta_hold(a); /* the slot stays where it is from here */
		if (!rc) {
			s = find_nh(&(struct tab){tab_of(a).d, 0, tab_of(a).mask}, d.nh);
			rc = s == UINT32_MAX ? -ENOENT : touch(a, s);
		}
	}
	if (!rc && len)
		rc = tx_range(a, d.off + off, len, flags);
	return tx_leave(a, rc);
}

int pvm_tx_add(struct pvm_app *a, const char *name, uint64_t off, uint64_t len)
{
	if (!a || !in_tx(a))
		return -EINVAL;
	return tx_add_named(a, name, UINT64_MAX, off, len, 0);
}

/* The name of the object whose data starts at heap offset at, into name
 * (PVM_NAME_MAX bytes): looked up under the metadata lock, by the ID the
 * cache remembers (nh, if not 0) or else through the whole table. */
static int name_at(struct pvm_app *a, uint64_t at, uint64_t nh, char *name)
{
	int brief;
	int rc = meta_brief(a, &brief);
	if (rc)
		return rc;
	struct tab t = tab_of(a);
	rc = -EINVAL;
	uint32_t s = nh ? find_nh(&t, nh) : UINT32_MAX;
	if (s != UINT32_MAX && t.d[s].cap && t.d[s].off == at) {
		rc = 0;
	} else {
		for (s = 0; s <= t.mask; s++)
			if (t.d[s].used && t.d[s].cap && t.d[s].off == at) {
				rc = 0;
				break;
			}
	}
	if (!rc) {
		memcpy(name, t.d[s].name, t.d[s].name_len);
		name[t.d[s].name_len] = '\0';
	}
	meta_unbrief(a, brief);
	return rc;
}

/* The pointer cache's entry e is stale (a metadata transaction ran
 * somewhere since it was noted, in any process): read the object again by
 * its ID, without the metadata lock. Called with e's stripe held: an
 * object still at e's data page and still hashing to e's stripe cannot
 * change its offset, size, flags or history until this transaction ends
 * (every such change takes its stripe), whatever moved in the table
 * meanwhile. 0: e is current again; 1: not settled here (pvm_tx_add's way
 * finds the object under the lock). */
static int pc_refresh(struct pvm_app *a, struct pvm_pcache *e)
{
	uint64_t s1, max;
	struct tab t;
	struct pvm_odesc c;
	if (fast_view(a, &s1, &t, &max))
		return 1;
	uint32_t s = find_nh(&t, e->nh);
	if (s == UINT32_MAX)
		return 1;
	memcpy(&c, &t.d[s], sizeof(c));
	if (fast_view_end(a, s1))
		return 1;
	if (!c.used || !c.cap || c.off != e->off || c.name_len >= PVM_NAME_MAX ||
	    pvm_name_hash(&a->guid, c.name, c.name_len) != e->h)
		return 1;
	pc_note(a, &c, e->h, s1);
	return 0;
}

/*
 * pvm_tx_add by the data pointer, as libpmemobj's add_range by PMEMoid:
 * no name to hash, and for an object this handle created or opened, no
 * descriptor to read. The object's stripe (from the cached name hash) is
 * taken first; then, if the table sequence still has the value the entry
 * was seen at, no metadata transaction ran since in any process, so the
 * object still has the cached offset, size, flags and history, and
 * holding its stripe, nobody else can change them until this transaction
 * ends. If the sequence moved (any create, delete or resize in the pool
 * does that), pc_refresh reads the object again by its ID without the
 * lock. Otherwise (or with history, which needs the metadata lock) the
 * object is found again under the lock and the call is pvm_tx_add's.
 */
int pvm_tx_add_ptr(struct pvm_app *a, const void *ptr, uint64_t off, uint64_t len)
{
	return pvm_tx_xadd_ptr(a, ptr, off, len, 0);
}

int pvm_tx_xadd_ptr(struct pvm_app *a, const void *ptr, uint64_t off, uint64_t len, unsigned flags)
{
	if (!a || !in_tx(a) || !ptr || (flags & ~PVM_TX_NO_SNAPSHOT))
		return -EINVAL;
	struct pvm_pool *p = a->p;
	uint64_t at = (uint64_t)((const uint8_t *)ptr - p->heap);
	if ((const uint8_t *)ptr < p->heap || at >= p->heap_size || at % PVM_PAGE)
		return -EINVAL;
	int rc = tx_enter(a);
	if (rc)
		return tx_leave(a, rc);
	struct pvm_pcache *e = pc_find(a, at / PVM_PAGE);
	uint64_t nh = 0;
	if (e) {
		nh = e->nh;
		rc = stripe_hold(a, e->h);
		if (!rc && !(in_tx(a) && a->meta_held) &&
		    (__atomic_load_n(pvm_table_seq(p), __ATOMIC_ACQUIRE) == e->seq || pc_refresh(a, e) == 0) &&
		    !e->hist_n) {
			if (e->flags & PVM_F_PROTECTED)
				rc = -EPERM;
			else if (off > e->size || len > e->size - off)
				rc = -EINVAL;
			else {
				pvm_prot_sync(p);
				if (len)
					rc = tx_range(a, e->off + off, len, flags);
			}
			return tx_leave(a, rc);
		}
		if (rc)
			return tx_leave(a, rc);
	}
	char name[PVM_NAME_MAX];
	rc = name_at(a, at, nh, name);
	if (!rc)
		rc = tx_add_named(a, name, at, off, len, flags);
	if (!rc && !(in_tx(a) && a->meta_held)) {
		/* Remember it for the next time (as pvm_open would). */
		struct pvm_odesc c;
		uint64_t seen;
		size_t nl = strlen(name);
		uint64_t h = pvm_name_hash(&a->guid, name, nl);
		if (lookup_fast_seq(a, name, nl, h, &c, &seen) == 0 && c.cap && c.off == at)
			pc_note(a, &c, h, seen);
	}
	return tx_leave(a, rc);
}

int pvm_write(struct pvm_app *a, const char *name, uint64_t off, const void *buf, size_t len)
{
	void *ptr;
	struct pvm_info info;
	if (!a || (!buf && len))
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = pvm_tx_add(a, name, off, len);
	if (!rc)
		rc = pvm_open(a, name, &ptr, &info);
	if (!rc && len)
		memcpy((uint8_t *)ptr + off, buf, len);
	return tx_leave(a, rc);
}

/* Common start of the calls that change an object's description. */
static int begin_change(struct pvm_app *a, const char *name, uint32_t *s, struct pvm_odesc **d)
{
	int rc = lock_object(a, name, 1, s, NULL);
	if (rc)
		return rc;
	*d = &tab_of(a).d[*s];
	if ((*d)->flags & PVM_F_PROTECTED)
		return -EPERM;
	return 0;
}

int pvm_resize(struct pvm_app *a, const char *name, uint64_t size, void **ptr)
{
	uint32_t s;
	struct pvm_odesc *d;
	uint8_t *data = NULL;
	if (!a)
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = begin_change(a, name, &s, &d);
	if (!rc)
		rc = touch(a, s);
	if (!rc) {
		d = &tab_of(a).d[s];
		uint64_t old = d->size, cap = d->cap, off = d->off;
		if (pages_of(size) * PVM_PAGE <= cap) {
			/* In place: bytes past the old size read as zero. */
			if (size > old) {
				uint8_t *z = chell_ptx_add(&a->t, off + old, size - old);
				if (z)
					memset(z, 0, size - old);
				else
					rc = a->t.err;
			}
		} else {
			rc = alloc_filled(a, size, a->p->heap + off, old, &off);
			if (!rc)
				rc = free_pages(a, d->off, cap);
			cap = pages_of(size) * PVM_PAGE;
		}
		if (!rc && !log_field(a, &d->off, 3 * 8)) /* off, size, cap are adjacent */
			rc = a->t.err;
		if (!rc) {
			d->off = off;
			d->size = size;
			d->cap = cap;
			data = cap ? a->p->heap + off : NULL;
		}
	}
	rc = tx_leave(a, rc);
	if (!rc && ptr)
		*ptr = data;
	return rc;
}

static int drop_history(struct pvm_app *a, struct pvm_odesc *d, unsigned keep)
{
	if (!d->hist_off)
		return 0;
	struct pvm_hent *h = hist_block(a, d);
	for (;;) {
		uint32_t used = 0, victim = 0;
		for (uint32_t i = 0; i < PVM_HISTORY_MAX; i++)
			if (h[i].version && (!used++ || h[i].version < h[victim].version))
				victim = i;
		if (used <= keep)
			break;
		int rc = free_pages(a, h[victim].off, h[victim].cap);
		struct pvm_hent *e = rc ? NULL : log_field(a, &h[victim], sizeof(*e));
		if (!e)
			return rc ? rc : a->t.err;
		memset(e, 0, sizeof(*e));
	}
	return 0;
}

int pvm_delete(struct pvm_app *a, const char *name)
{
	uint32_t s;
	struct pvm_odesc *d;
	if (!a)
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = begin_change(a, name, &s, &d);
	if (!rc)
		rc = drop_history(a, d, 0);
	if (!rc && d->hist_off)
		rc = free_pages(a, d->hist_off, PVM_PAGE);
	if (!rc)
		rc = free_pages(a, d->off, d->cap);
	if (!rc) {
		struct tab t = tab_of(a);
		struct chell_htab h = htab_of(a, &t);
		rc = chell_htab_delete(&a->t, &h, s);
	}
	if (!rc)
		rc = count_objects(a, -1);
	return tx_leave(a, rc);
}

int pvm_rename(struct pvm_app *a, const char *from, const char *to)
{
	uint32_t s;
	struct pvm_odesc *d, keep;
	size_t len;
	uint64_t nh = 0;
	if (!a)
		return -EINVAL;
	int rc = check_name(to, &len);
	if (rc)
		return rc;
	rc = tx_enter(a);
	if (!rc)
		rc = begin_change(a, from, &s, &d);
	if (!rc && find_name(a, to, len, NULL) != UINT32_MAX)
		rc = -EEXIST;
	if (!rc) {
		keep = *d;
		struct tab t = tab_of(a);
		struct chell_htab h = htab_of(a, &t);
		rc = chell_htab_delete(&a->t, &h, s);
	}
	if (!rc) {
		find_name(a, to, len, &nh);
		rc = stripe_hold(a, pvm_name_hash(&a->guid, to, len));
	}
	if (!rc) {
		d = claim_desc(a, nh, len);
		if (!d) {
			rc = a->t.err;
		} else {
			*d = keep;
			d->nh = nh;
			memset(d->name, 0, sizeof(d->name));
			memcpy(d->name, to, len);
			d->name_len = (uint32_t)len;
			rc = note_step(a, to, len, nh);
		}
	}
	return tx_leave(a, rc);
}

int pvm_protect(struct pvm_app *a, const char *name, int on)
{
	uint32_t s;
	if (!a)
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = lock_object(a, name, 1, &s, NULL);
	struct pvm_odesc *d = rc ? NULL : &tab_of(a).d[s];
	if (!rc) {
		uint32_t *f = log_field(a, &d->flags, 4);
		if (!f)
			rc = a->t.err;
		else
			*f = on ? (*f | PVM_F_PROTECTED) : (*f & ~PVM_F_PROTECTED);
	}
	if (!rc && d->cap && on)
		__atomic_store_n(&a->p->ro_any, 1, __ATOMIC_RELAXED);
	if (!rc && !on)
		(*pvm_prot_gen(a->p))++; /* under the metadata lock (lock_object) */
	if (!rc && d->cap)
		mprotect(a->p->heap + d->off, d->cap, on ? PROT_READ : PROT_READ | PROT_WRITE);
	return tx_leave(a, rc);
}

int pvm_set_history(struct pvm_app *a, const char *name, unsigned n)
{
	uint32_t s;
	struct pvm_odesc *d;
	if (!a)
		return -EINVAL;
	if (n > PVM_HISTORY_MAX)
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = lock_object(a, name, 1, &s, NULL);
	d = rc ? NULL : &tab_of(a).d[s];
	if (!rc)
		rc = drop_history(a, d, n);
	uint64_t hoff = d ? d->hist_off : 0;
	if (!rc && n && !hoff)
		rc = alloc_filled(a, PVM_PAGE, NULL, 0, &hoff);
	if (!rc && !n && hoff) {
		rc = free_pages(a, hoff, PVM_PAGE);
		hoff = 0;
	}
	if (!rc) {
		d = &tab_of(a).d[s];
		if (!log_field(a, &d->hist_off, 8 + 4)) /* hist_off, hist_n are adjacent */
			rc = a->t.err;
		else {
			d->hist_off = hoff;
			d->hist_n = n;
		}
	}
	return tx_leave(a, rc);
}

int pvm_history(struct pvm_app *a, const char *name, struct pvm_version *v, unsigned max)
{
	int brief;
	struct pvm_odesc *d;
	if (!a || (!v && max))
		return -EINVAL;
	int rc = lookup(a, name, &brief, &d);
	if (rc)
		return rc;
	unsigned n = 0;
	if (d->hist_off) {
		struct pvm_hent *h = hist_block(a, d);
		uint64_t below = UINT64_MAX;
		/* Newest first: repeatedly the largest version below the last. */
		while (n < max) {
			int best = -1;
			for (uint32_t i = 0; i < PVM_HISTORY_MAX; i++)
				if (h[i].version && h[i].version < below && (best < 0 || h[i].version > h[best].version))
					best = (int)i;
			if (best < 0)
				break;
			v[n++] = (struct pvm_version){h[best].version, h[best].size};
			below = h[best].version;
		}
	}
	meta_unbrief(a, brief);
	return (int)n;
}

int pvm_restore(struct pvm_app *a, const char *name, uint64_t version)
{
	uint32_t s;
	struct pvm_odesc *d;
	if (!a || !version)
		return -EINVAL;
	int rc = tx_enter(a);
	if (!rc)
		rc = begin_change(a, name, &s, &d);
	struct pvm_hent he = {0};
	if (!rc) {
		if (d->hist_off) {
			struct pvm_hent *h = hist_block(a, d);
			for (uint32_t i = 0; i < PVM_HISTORY_MAX; i++)
				if (h[i].version == version)
					he = h[i];
		}
		if (!he.version)
			rc = -ENOENT;
	}
	if (!rc)
		rc = touch(a, s); /* may drop the version we restore: copy it first */
	uint64_t off = 0;
	if (!rc) {
		/* he's pages are freed at the end at the earliest: still intact. */
		rc = alloc_filled(a, he.size, a->p->heap + he.off, he.size, &off);
	}
	if (!rc) {
		d = &tab_of(a).d[s];
		rc = free_pages(a, d->off, d->cap);
	}
	if (!rc) {
		if (!log_field(a, &d->off, 3 * 8))
			rc = a->t.err;
		else {
			d->off = off;
			d->size = he.size;
			d->cap = pages_of(he.size) * PVM_PAGE;
		}
	}
	return tx_leave(a, rc);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
}

/* Iteration goes in the order of object IDs, not of table slots: deleting
 * an object shifts later slots back (and growing the table moves every
 * object), so a slot cursor would skip or repeat objects that were there
 * all along. The cursor is the smallest ID still to be returned; the IDs
 * come from a sorted snapshot taken when an iteration starts (cursor 0),
 * and each is looked up again before it is returned, so deleted objects
 * are not. Any snapshot serves any cursor, so iterations of several
 * threads on one handle do not disturb each other. Called with the
 * metadata lock held. */
static int iter_snapshot(struct pvm_app *a)
{
	struct tab t = tab_of(a);
	uint64_t n = pvm_aent(a->p, a->idx)->objects;
	uint64_t *v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	size_t k = 0;
	for (uint32_t i = 0; i <= t.mask && k < n; i++)
		if (t.d[i].used)
			v[k++] = t.d[i].nh;
	qsort(v, k, sizeof(*v), cmp_u64);
	free(a->iter_nh);
	a->iter_nh = v;
	a->iter_n = k;
	return 0;
}

int pvm_iter(struct pvm_app *a, uint64_t *cursor, struct pvm_info *info)
{
	int brief;
	if (!a || !cursor)
		return -EINVAL;
	int rc = meta_brief(a, &brief);
	if (rc)
		return rc;
	if (*cursor == 0 || !a->iter_nh)
		rc = iter_snapshot(a);
	int found = 0;
	if (!rc) {
		/* The first snapshot ID >= *cursor that still exists. */
		size_t lo = 0, hi = a->iter_n;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (a->iter_nh[mid] < *cursor)
				lo = mid + 1;
			else
				hi = mid;
		}
		struct tab t = tab_of(a);
		for (; lo < a->iter_n && !found; lo++) {
			uint32_t s = find_nh(&t, a->iter_nh[lo]);
			if (s == UINT32_MAX)
				continue;
			fill_info(a, &t.d[s], info);
			*cursor = a->iter_nh[lo] + 1; /* IDs are below 2^64 - 1 */
			found = 1;
		}
		if (!found)
			*cursor = UINT64_MAX;
	}
	meta_unbrief(a, brief);
	return rc ? rc : found;
}

int pvm_tx_begin(struct pvm_app *a)
{
	if (!a)
		return -EINVAL;
	int rc = tx_enter(a);
	if (rc && a->depth == 1)
		tx_leave(a, rc); /* could not even begin: nothing stays open */
	return rc;
}

int pvm_tx_commit(struct pvm_app *a)
{
	if (!a || !in_tx(a))
		return -EINVAL;
	return tx_leave(a, 0);
}

int pvm_tx_abort(struct pvm_app *a)
{
	if (!a || !in_tx(a))
		return -EINVAL;
	if (!a->err)
		a->err = -ECANCELED;
	int outer = a->depth == 1;
	int rc = tx_leave(a, 0);
	return outer ? 0 : rc;
}
