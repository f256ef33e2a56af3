/* SPDX-License-Identifier: MIT */
/*
 * tests/crash/workload.c - the crash tests' transactional object store
 * (layout and rules in workload.h).
 *
 * Every byte the workload changes is first given to chell_tx_add_range and
 * then written through put(), which writes the heap and the model alike, so
 * the model is an independent record of what the heap must hold. Fresh
 * allocations are logged too: that keeps "recovered heap == model" an exact,
 * byte-for-byte check (free blocks included).
 */
#include "workload.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wl_hdr {
	uint64_t magic;
	uint64_t txcount;
	uint32_t nblocks, nslots, bitmap_off, slots_off, data_off, pad;
	uint8_t reserved[24];
};
_Static_assert(sizeof(struct wl_hdr) == 64, "header is one line");

struct wl_slot {
	uint64_t id;              /* 0: empty */
	uint32_t block, nblocks;
};

struct wl_obj {
	uint64_t id;
	uint32_t len, nblocks;
	uint64_t sum;             /* FNV-1a over id, len and the payload */
	uint64_t pad;
};
_Static_assert(sizeof(struct wl_obj) == WL_OBJ_HDR, "object header");

struct geo {
	uint32_t nblocks, bitmap_off, bitmap_bytes, slots_off, data_off;
};

static int plan(uint64_t heap_size, struct geo *g)
{
	uint64_t maxb = heap_size / WL_BLOCK;
	uint64_t bm = ((maxb + 7) / 8 + 63) / 64 * 64;
	uint64_t data = 64 + bm + WL_SLOTS * sizeof(struct wl_slot);
	if (heap_size > UINT32_MAX || heap_size < data + 4 * WL_MAX_BLOCKS * WL_BLOCK)
		return -EINVAL;
	g->bitmap_off = 64;
	g->bitmap_bytes = (uint32_t)bm;
	g->slots_off = (uint32_t)(64 + bm);
	g->data_off = (uint32_t)data;
	g->nblocks = (uint32_t)((heap_size - data) / WL_BLOCK);
	return 0;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

static uint64_t obj_sum(const struct wl_obj *o, const uint8_t *payload)
{
	uint64_t h = fnv(0xcbf29ce484222325ULL, &o->id, sizeof(o->id));
	h = fnv(h, &o->len, sizeof(o->len));
	return fnv(h, payload, o->len);
}

static int bit(const uint8_t *heap, const struct geo *g, uint32_t b)
{
	return heap[g->bitmap_off + b / 8] >> (b % 8) & 1;
}

uint64_t wl_txcount(const uint8_t *heap, uint64_t heap_size)
{
	struct wl_hdr h;
	if (heap_size < sizeof(h))
		return 0;
	memcpy(&h, heap, sizeof(h));
	return h.magic == WL_MAGIC ? h.txcount : 0;
}

/* ------------------------------------------------------------ checking */

struct out {
	char *buf;
	size_t cap, used;
	int n;
};

__attribute__((format(printf, 2, 3))) static void problem(struct out *o, const char *fmt, ...)
{
	o->n++;
	if (o->n > 8 || o->used + 2 >= o->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(o->buf + o->used, o->cap - o->used - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	o->used += (size_t)k < o->cap - o->used - 1 ? (size_t)k : o->cap - o->used - 2;
	o->buf[o->used++] = '\n';
	o->buf[o->used] = '\0';
}

int wl_check(const uint8_t *heap, uint64_t heap_size, char *outbuf, size_t outlen)
{
	struct out o = {outbuf, outlen, 0, 0};
	struct wl_hdr h;
	struct geo g;

	if (outlen)
		outbuf[0] = '\0';
	if (plan(heap_size, &g) < 0) {
		problem(&o, "heap of %llu bytes is too small for the workload", (unsigned long long)heap_size);
		return o.n;
	}
	memcpy(&h, heap, sizeof(h));
	if (h.magic != WL_MAGIC) {
		static const uint8_t zero[64];
		/* Before the first commit the heap is still the formatted zeros. */
		if (memcmp(heap, zero, sizeof(zero)) != 0)
			problem(&o, "header: bad magic 0x%016llx", (unsigned long long)h.magic);
		return o.n;
	}
	if (h.nblocks != g.nblocks || h.nslots != WL_SLOTS || h.bitmap_off != g.bitmap_off ||
	    h.slots_off != g.slots_off || h.data_off != g.data_off) {
		problem(&o, "header: layout fields do not match a heap of %llu bytes",
			(unsigned long long)heap_size);
		return o.n;
	}
	if (h.txcount == 0)
		problem(&o, "header: magic present but transaction counter 0");

	uint8_t *owner = calloc(g.nblocks, 1); /* slot+1 owning each block */
	if (!owner) {
		problem(&o, "out of memory");
		return o.n;
	}
	for (uint32_t s = 0; s < WL_SLOTS; s++) {
		struct wl_slot sl;
		memcpy(&sl, heap + g.slots_off + s * sizeof(sl), sizeof(sl));
		if (sl.id == 0) {
			if (sl.block || sl.nblocks)
				problem(&o, "slot %u: empty but points at block %u", s, sl.block);
			continue;
		}
		if (sl.nblocks < 1 || sl.nblocks > WL_MAX_BLOCKS || sl.block >= g.nblocks ||
		    sl.nblocks > g.nblocks - sl.block) {
			problem(&o, "slot %u: blocks [%u, +%u) out of range", s, sl.block, sl.nblocks);
			continue;
		}
		for (uint32_t b = sl.block; b < sl.block + sl.nblocks; b++) {
			if (owner[b])
				problem(&o, "block %u: referenced by slots %u and %u", b, owner[b] - 1u, s);
			owner[b] = (uint8_t)(s + 1);
			if (!bit(heap, &g, b))
				problem(&o, "block %u: referenced by slot %u but free in the bitmap", b, s);
		}
		const uint8_t *op = heap + g.data_off + (uint64_t)sl.block * WL_BLOCK;
		struct wl_obj ob;
		memcpy(&ob, op, sizeof(ob));
		if (ob.id != sl.id || ob.nblocks != sl.nblocks) {
			problem(&o, "slot %u: object at block %u is id %llu/%u blocks, slot says %llu/%u", s,
				sl.block, (unsigned long long)ob.id, ob.nblocks, (unsigned long long)sl.id,
				sl.nblocks);
			continue;
		}
		if (ob.len == 0 || ob.len > sl.nblocks * WL_BLOCK - WL_OBJ_HDR) {
			problem(&o, "slot %u: object length %u does not fit %u blocks", s, ob.len, sl.nblocks);
			continue;
		}
		uint64_t sum = obj_sum(&ob, op + WL_OBJ_HDR);
		if (sum != ob.sum)
			problem(&o, "slot %u: object %llu checksum 0x%016llx, contents give 0x%016llx", s,
				(unsigned long long)ob.id, (unsigned long long)ob.sum, (unsigned long long)sum);
	}
	for (uint32_t b = 0; b < g.nblocks; b++)
		if (bit(heap, &g, b) && !owner[b])
			problem(&o, "block %u: allocated in the bitmap but in no slot (leak)", b);
	for (uint32_t b = g.nblocks; b < g.bitmap_bytes * 8u; b++)
		if (bit(heap, &g, b))
			problem(&o, "bitmap: bit %u set beyond the %u blocks", b, g.nblocks);
	free(owner);
	if (o.n > 8)
		problem(&o, "... %d problems in all", o.n);
	return o.n > 8 ? o.n - 1 : o.n;
}

/* ------------------------------------------------------------ running */

struct txc {
	struct wl *w;
	struct chell_tx *tx;
	struct geo g;
	uint64_t rng;
	uint64_t t;
	int rc;
	char *err;
	size_t errlen;
};

static uint64_t rnd(struct txc *c, uint64_t n)
{
	return splitmix(&c->rng) % n;
}

static void fail(struct txc *c, int rc, const char *what)
{
	if (c->rc == 0) {
		c->rc = rc;
		snprintf(c->err, c->errlen, "transaction %llu: %s: %s", (unsigned long long)c->t, what,
			 strerror(-rc));
	}
}

static void log_range(struct txc *c, uint64_t off, size_t len)
{
	if (c->rc)
		return;
	int rc = chell_tx_add_range(c->tx, off, len);
	if (rc < 0)
		fail(c, rc, "chell_tx_add_range");
	c->w->ranges++;
}

static void put(struct txc *c, uint64_t off, const void *src, size_t len)
{
	if (c->rc)
		return;
	memcpy(c->w->heap + off, src, len);
	memcpy(c->w->model + off, src, len);
}

static void get_slot(struct txc *c, uint32_t s, struct wl_slot *sl)
{
	memcpy(sl, c->w->heap + c->g.slots_off + s * sizeof(*sl), sizeof(*sl));
}

static void set_slot(struct txc *c, uint32_t s, const struct wl_slot *sl)
{
	uint64_t off = c->g.slots_off + s * sizeof(*sl);
	log_range(c, off, sizeof(*sl));
	put(c, off, sl, sizeof(*sl));
}

static void set_bits(struct txc *c, uint32_t first, uint32_t n, int v)
{
	uint64_t lo = c->g.bitmap_off + first / 8, hi = c->g.bitmap_off + (first + n - 1) / 8;
	uint8_t buf[WL_MAX_BLOCKS / 8 + 2];
	log_range(c, lo, hi - lo + 1);
	memcpy(buf, c->w->heap + lo, hi - lo + 1);
	for (uint32_t b = first; b < first + n; b++) {
		uint32_t i = b / 8 - first / 8;
		buf[i] = (uint8_t)(v ? buf[i] | 1u << (b % 8) : buf[i] & ~(1u << (b % 8)));
	}
	put(c, lo, buf, hi - lo + 1);
}

/* The k-th used slot, or -1. */
static int nth_used(struct txc *c, uint32_t k)
{
	for (uint32_t s = 0; s < WL_SLOTS; s++) {
		struct wl_slot sl;
		get_slot(c, s, &sl);
		if (sl.id && k-- == 0)
			return (int)s;
	}
	return -1;
}

static int do_alloc(struct txc *c, int opno)
{
	uint32_t nb = 1 + (uint32_t)rnd(c, WL_MAX_BLOCKS);
	uint32_t len = 1 + (uint32_t)rnd(c, nb * WL_BLOCK - WL_OBJ_HDR);
	int slot = -1;
	for (uint32_t s = 0; s < WL_SLOTS && slot < 0; s++) {
		struct wl_slot sl;
		get_slot(c, s, &sl);
		if (!sl.id)
			slot = (int)s;
	}
	uint32_t run = 0, first = 0;
	for (uint32_t b = 0; b < c->g.nblocks && run < nb; b++) {
		if (bit(c->w->heap, &c->g, b)) {
			run = 0;
		} else if (run++ == 0) {
			first = b;
		}
	}
	if (slot < 0 || run < nb)
		return -1; /* full: the caller frees instead */

	uint8_t obj[WL_MAX_BLOCKS * WL_BLOCK];
	struct wl_obj ob = {.id = c->t << 8 | (uint64_t)opno, .len = len, .nblocks = nb};
	for (uint32_t i = 0; i < len; i++)
		obj[WL_OBJ_HDR + i] = (uint8_t)splitmix(&c->rng);
	ob.sum = obj_sum(&ob, obj + WL_OBJ_HDR);
	memcpy(obj, &ob, sizeof(ob));
	uint64_t off = c->g.data_off + (uint64_t)first * WL_BLOCK;
	log_range(c, off, WL_OBJ_HDR + len);
	put(c, off, obj, WL_OBJ_HDR + len);
	set_bits(c, first, nb, 1);
	struct wl_slot sl = {.id = ob.id, .block = first, .nblocks = nb};
	set_slot(c, (uint32_t)slot, &sl);
	c->w->allocs++;
	return 0;
}

static void do_update(struct txc *c, uint32_t s)
{
	struct wl_slot sl;
	struct wl_obj ob;
	get_slot(c, s, &sl);
	uint64_t off = c->g.data_off + (uint64_t)sl.block * WL_BLOCK;
	memcpy(&ob, c->w->heap + off, sizeof(ob));
	unsigned nr = 1 + (unsigned)rnd(c, 4);
	for (unsigned i = 0; i < nr; i++) {
		uint32_t at = (uint32_t)rnd(c, ob.len);
		uint32_t n = 1 + (uint32_t)rnd(c, ob.len - at < 96 ? ob.len - at : 96);
		uint8_t buf[96];
		for (uint32_t k = 0; k < n; k++)
			buf[k] = (uint8_t)splitmix(&c->rng);
		uint64_t p = off + WL_OBJ_HDR + at;
		/* The deliberate bug: the first range is changed in place unlogged. */
		if (!(c->w->brk == WL_BREAK_MISSING_UNDO && i == 0))
			log_range(c, p, n);
		put(c, p, buf, n);
	}
	ob.sum = obj_sum(&ob, c->w->heap + off + WL_OBJ_HDR);
	log_range(c, off + offsetof(struct wl_obj, sum), sizeof(ob.sum));
	put(c, off + offsetof(struct wl_obj, sum), &ob.sum, sizeof(ob.sum));
	c->w->updates++;
}

static void do_free(struct txc *c, uint32_t s)
{
	struct wl_slot sl, empty = {0};
	get_slot(c, s, &sl);
	set_bits(c, sl.block, sl.nblocks, 0);
	set_slot(c, s, &empty);
	c->w->frees++;
}

static void init_heap(struct txc *c)
{
	struct wl_hdr h = {
		.magic = WL_MAGIC,
		.nblocks = c->g.nblocks,
		.nslots = WL_SLOTS,
		.bitmap_off = c->g.bitmap_off,
		.slots_off = c->g.slots_off,
		.data_off = c->g.data_off,
	};
	/* The bitmap and the root table must be zero: make them so, logged, in
	 * case the heap was not (a region formatted over old bytes). */
	log_range(c, 0, c->g.data_off);
	uint8_t *z = calloc(1, c->g.data_off);
	if (!z) {
		fail(c, -ENOMEM, "init");
		return;
	}
	memcpy(z, &h, sizeof(h));
	put(c, 0, z, c->g.data_off);
	free(z);
}

static void ops(struct txc *c)
{
	unsigned nops = 1 + (unsigned)rnd(c, 3);
	for (unsigned i = 0; i < nops && !c->rc; i++) {
		uint32_t used = 0;
		for (uint32_t s = 0; s < WL_SLOTS; s++) {
			struct wl_slot sl;
			get_slot(c, s, &sl);
			used += sl.id != 0;
		}
		uint64_t r = rnd(c, 100);
		/* Grow while sparse, shrink when crowded: the heap keeps churning. */
		if (used == 0 || (r < 45 && used < WL_SLOTS * 3 / 4)) {
			if (do_alloc(c, (int)i) == 0 || used == 0)
				continue;
			r = 99;
		}
		uint32_t s = (uint32_t)nth_used(c, (uint32_t)rnd(c, used));
		if (r < 80)
			do_update(c, s);
		else
			do_free(c, s);
	}
}

/* One attempt at transaction t; `abort` ends it with chell_tx_abort. */
static int attempt(struct wl *w, uint64_t t, uint64_t rng, int abort, char *err, size_t errlen)
{
	struct txc c = {.w = w, .rng = rng, .t = t, .err = err, .errlen = errlen};
	plan(w->heap_size, &c.g);

	w->phase = WL_OPEN;
	int rc = chell_tx_begin(w->r, (unsigned)(t % w->journals), &c.tx);
	if (rc < 0) {
		w->phase = WL_IDLE;
		fail(&c, rc, "chell_tx_begin");
		return c.rc;
	}
	if (t == 1)
		init_heap(&c);
	else
		ops(&c);
	log_range(&c, offsetof(struct wl_hdr, txcount), sizeof(uint64_t));
	put(&c, offsetof(struct wl_hdr, txcount), &t, sizeof(t));

	if (abort || c.rc) {
		w->phase = WL_ABORTING;
		rc = chell_tx_abort(c.tx);
		memcpy(w->model, w->prev, w->heap_size);
		w->phase = WL_IDLE;
		if (rc < 0)
			fail(&c, rc, "chell_tx_abort");
		if (c.rc)
			return c.rc;
		w->aborts++;
		if (memcmp(w->heap, w->model, w->heap_size) != 0)
			fail(&c, -EIO, "heap differs from its state before the aborted transaction");
		return c.rc;
	}
	w->phase = WL_COMMITTING;
	rc = chell_tx_commit(c.tx);
	if (rc < 0) {
		w->phase = WL_IDLE;
		fail(&c, rc, "chell_tx_commit");
		return c.rc;
	}
	/* Acknowledged: from here on the transaction must survive any crash. */
	w->acked = t;
	memcpy(w->prev, w->model, w->heap_size);
	w->phase = WL_IDLE;
	w->commits++;
	if (memcmp(w->heap, w->model, w->heap_size) != 0)
		fail(&c, -EIO, "heap differs from the model after commit");
	return c.rc;
}

int wl_step(struct wl *w, char *err, size_t errlen)
{
	uint64_t t = wl_txcount(w->heap, w->heap_size) + 1;
	uint64_t base = w->seed * 0x9e3779b97f4a7c15ULL ^ t * 0xd1b54a32d192ed03ULL;
	uint64_t r0 = base, r1 = base ^ 0x5bd1e995ULL;

	/* An explicit abort now and then (not in the missing-undo variant: its
	 * own abort would already notice, and the point is that crashes do). */
	if (t > 1 && splitmix(&r0) % 16 == 0 && w->brk != WL_BREAK_MISSING_UNDO) {
		int rc = attempt(w, t, r0, 1, err, errlen);
		if (rc < 0)
			return rc;
	}
	return attempt(w, t, r1, 0, err, errlen);
}

int wl_init(struct wl *w, struct chell_region *r, unsigned journals, uint64_t seed,
	    char *err, size_t errlen)
{
	struct geo g;
	memset(w, 0, sizeof(*w));
	w->r = r;
	w->heap = chell_region_heap(r, &w->heap_size);
	w->journals = journals ? journals : 1;
	w->seed = seed;
	if (plan(w->heap_size, &g) < 0) {
		snprintf(err, errlen, "heap of %llu bytes is too small for the workload",
			 (unsigned long long)w->heap_size);
		return -EINVAL;
	}
	w->model = malloc(w->heap_size);
	w->prev = malloc(w->heap_size);
	if (!w->model || !w->prev) {
		wl_fini(w);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	memcpy(w->model, w->heap, w->heap_size);
	memcpy(w->prev, w->heap, w->heap_size);
	w->acked = wl_txcount(w->heap, w->heap_size);
	if (wl_check(w->heap, w->heap_size, err, errlen) != 0) {
		wl_fini(w);
		return -EUCLEAN;
	}
	return 0;
}

void wl_fini(struct wl *w)
{
	free(w->model);
	free(w->prev);
	w->model = w->prev = NULL;
}
