/* CAR, Clock with Adaptive Replacement (Bansal and Modha, FAST 2004): ARC's
 * scan resistance and adaptivity with CLOCK's reference bits, which is what
 * cache mode can offer (clients report hits by a byte in the access table,
 * never by moving a list entry).
 *
 * Resident chunks are in one of two clocks: T1 (seen once recently) and T2
 * (seen at least twice). Evicted chunks leave their key in a ghost list,
 * B1 or B2 (FIFO, bounded so that |T1|+|B1| <= c and the four lists hold
 * at most 2c). A miss on a key in B1 means T1 was too small: the target
 * size p of T1 grows; a miss in B2 shrinks it; either way the chunk comes
 * back into T2. Replacement takes from T1 while it holds more than p (a
 * referenced T1 head is promoted to T2), else from T2 (a referenced head
 * goes round again). A one-time scan therefore only ever cycles through
 * T1 and never displaces T2, the chunks used more than once.
 *
 * Keys identify what a slot holds (the manager's (Cnode, chunk)); the
 * ghost lists are rings of keys and an open-addressing table finds a key's
 * ghost entry (linear probing, backward-shift deletion: no tombstones). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "policy_impl.h"

#define EMPTY UINT64_MAX

struct car_ghost {
	uint64_t *key;  /* ring of keys, oldest at head */
	uint32_t head, n;
};

struct car {
	uint32_t hand[2], count[2]; /* T1, T2 */
	uint8_t *list;              /* per chunk: 0 T1, 1 T2 */
	uint8_t *fresh;             /* per chunk: inserted, the miss's own touch not seen yet */
	uint64_t *key;              /* per chunk: what it holds */
	uint32_t p;                 /* target size of T1 */
	struct car_ghost b[2];      /* B1, B2 */
	uint64_t *hkey;             /* hash table: key ... */
	uint32_t *hval;             /* ... -> (list << 31) | ring index */
	uint32_t hmask;
};

static uint32_t hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k;
}

int car_init(policy *p)
{
	struct car *c = calloc(1, sizeof(*c));
	uint32_t n = p->nchunks, hs = 4;

	if (!c)
		return -ENOMEM;
	while (hs < 4ull * n)
		hs <<= 1;
	c->hand[0] = c->hand[1] = POLICY_NONE;
	c->list = calloc(n, 1);
	c->fresh = calloc(n, 1);
	c->key = calloc(n, sizeof(uint64_t));
	c->b[0].key = malloc(n * sizeof(uint64_t));
	c->b[1].key = malloc(n * sizeof(uint64_t));
	c->hkey = malloc((size_t)hs * sizeof(uint64_t));
	c->hval = malloc((size_t)hs * sizeof(uint32_t));
	c->hmask = hs - 1;
	p->car = c;
	if (!c->list || !c->fresh || !c->key || !c->b[0].key || !c->b[1].key || !c->hkey || !c->hval)
		return -ENOMEM;
	memset(c->hkey, 0xff, (size_t)hs * sizeof(uint64_t));
	return 0;
}

void car_fini(policy *p)
{
	struct car *c = p->car;

	if (!c)
		return;
	free(c->list);
	free(c->fresh);
	free(c->key);
	free(c->b[0].key);
	free(c->b[1].key);
	free(c->hkey);
	free(c->hval);
	free(c);
	p->car = NULL;
}

/* ---- the ghost table ---- */

static uint32_t *h_find(struct car *c, uint64_t k)
{
	for (uint32_t i = hash64(k) & c->hmask;; i = (i + 1) & c->hmask) {
		if (c->hkey[i] == EMPTY)
			return NULL;
		if (c->hkey[i] == k)
			return &c->hval[i];
	}
}

static void h_put(struct car *c, uint64_t k, uint32_t v)
{
	uint32_t i = hash64(k) & c->hmask;

	while (c->hkey[i] != EMPTY && c->hkey[i] != k)
		i = (i + 1) & c->hmask;
	c->hkey[i] = k;
	c->hval[i] = v;
}

static void h_del(struct car *c, uint64_t k)
{
	uint32_t i = hash64(k) & c->hmask;

	while (c->hkey[i] != k) {
		if (c->hkey[i] == EMPTY)
			return;
		i = (i + 1) & c->hmask;
	}
	/* backward shift: move later entries of the run into the hole */
	for (uint32_t j = (i + 1) & c->hmask; c->hkey[j] != EMPTY; j = (j + 1) & c->hmask) {
		uint32_t home = hash64(c->hkey[j]) & c->hmask;

		if (((j - home) & c->hmask) >= ((j - i) & c->hmask)) {
			c->hkey[i] = c->hkey[j];
			c->hval[i] = c->hval[j];
			i = j;
		}
	}
	c->hkey[i] = EMPTY;
}

/* The ghost of list l at ring position pos is live if the table points at it. */
static bool g_live(struct car *c, int l, uint32_t pos)
{
	const uint32_t *v = h_find(c, c->b[l].key[pos]);

	return v && *v == (((uint32_t)l << 31) | pos);
}

/* Drop the oldest live ghost of list l (stale ring entries on the way). */
static void g_pop(struct car *c, uint32_t cap, int l)
{
	struct car_ghost *g = &c->b[l];

	while (g->n) {
		uint32_t pos = g->head;
		bool live = g_live(c, l, pos);

		g->head = (g->head + 1) % cap;
		g->n--;
		if (live) {
			h_del(c, g->key[pos]);
			return;
		}
	}
}

static uint32_t g_live_count(struct car *c, int l)
{
	return c->b[l].n; /* counts stale entries too: an upper bound */
}

static void g_push(struct car *c, uint32_t cap, int l, uint64_t k)
{
	struct car_ghost *g = &c->b[l];

	if (g->n == cap)
		g_pop(c, cap, l);
	uint32_t pos = (g->head + g->n) % cap;

	g->key[pos] = k;
	g->n++;
	h_put(c, k, ((uint32_t)l << 31) | pos);
}

/* ---- the two clocks ---- */

static void ring_add(policy *p, int l, uint32_t x)
{
	struct car *c = p->car;
	uint32_t h = c->hand[l];

	c->list[x] = (uint8_t)l;
	if (h == POLICY_NONE) {
		p->next[x] = p->prev[x] = x;
		c->hand[l] = x;
	} else { /* at the tail: just before the hand */
		uint32_t t = p->prev[h];

		p->next[t] = x;
		p->prev[x] = t;
		p->next[x] = h;
		p->prev[h] = x;
	}
	c->count[l]++;
}

static void ring_del(policy *p, uint32_t x)
{
	struct car *c = p->car;
	int l = c->list[x];

	if (p->next[x] == x) {
		c->hand[l] = POLICY_NONE;
	} else {
		p->next[p->prev[x]] = p->next[x];
		p->prev[p->next[x]] = p->prev[x];
		if (c->hand[l] == x)
			c->hand[l] = p->next[x];
	}
	c->count[l]--;
}

int car_insert(policy *p, uint32_t x, uint64_t k)
{
	struct car *c = p->car;
	uint32_t cap = p->nchunks;
	uint32_t *v = h_find(c, k);

	if (!v) {
		/* A new key: keep the ghost lists within their bounds. */
		if (c->count[0] + g_live_count(c, 0) >= cap)
			g_pop(c, cap, 0);
		else if (c->count[0] + c->count[1] + g_live_count(c, 0) + g_live_count(c, 1) >= 2 * cap)
			g_pop(c, cap, 1);
		ring_add(p, 0, x);
	} else {
		int l = (int)(*v >> 31);
		uint32_t b1 = g_live_count(c, 0) ? g_live_count(c, 0) : 1;
		uint32_t b2 = g_live_count(c, 1) ? g_live_count(c, 1) : 1;

		if (l == 0) { /* T1 was too small */
			uint32_t d = b2 / b1 ? b2 / b1 : 1;

			c->p = c->p + d < cap ? c->p + d : cap;
		} else {      /* T2 was too small */
			uint32_t d = b1 / b2 ? b1 / b2 : 1;

			c->p = c->p > d ? c->p - d : 0;
		}
		h_del(c, k); /* its ring entry is stale now */
		ring_add(p, 1, x);
	}
	c->key[x] = k;
	c->fresh[x] = 1;
	return 0;
}

/* A manager-side access. The first after an insertion is the miss that
 * brought the chunk in: in CAR a new chunk starts unreferenced (else every
 * chunk of a scan would look used twice and go to T2). */
void car_touch(policy *p, uint32_t x)
{
	struct car *c = p->car;

	if (c->fresh[x])
		c->fresh[x] = 0;
	else
		p->ref[x] = 1;
}

void car_remove(policy *p, uint32_t x)
{
	ring_del(p, x);
}

int policy_victim_car(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg)
{
	struct car *c = p->car;
	/* Every step either clears a reference (which some access paid for),
	 * moves a chunk from T1 to T2, or passes a skipped chunk: bounded. */
	uint64_t steps = 4ull * p->count + 4;
	uint32_t fallback = POLICY_NONE, skipped[2] = { 0, 0 };

	for (uint64_t i = 0; i < steps; i++) {
		int l = c->count[0] >= (c->p ? c->p : 1) && c->count[0] ? 0 : 1;

		/* A list whose every chunk was skipped in a row (busy, being
		 * filled): take from the other one. */
		if (c->count[l] == 0 || skipped[l] >= c->count[l])
			l = !l;
		if (c->count[l] == 0 || skipped[l] >= c->count[l])
			break;
		uint32_t x = c->hand[l];

		c->hand[l] = p->next[x];
		if (skip && skip(arg, x)) {
			skipped[l]++;
			continue;
		}
		skipped[l] = 0;
		if (policy_referenced(p, x)) {
			if (fallback == POLICY_NONE)
				fallback = x;
			/* T1 -> tail of T2; T2 -> round again (the hand moved on) */
			if (l == 0) {
				ring_del(p, x);
				ring_add(p, 1, x);
			}
			continue;
		}
		ring_del(p, x);
		g_push(c, p->nchunks, l, c->key[x]);
		p->in[x] = 0;
		p->count--;
		*chunk = x;
		return 0;
	}
	if (fallback == POLICY_NONE)
		return -EBUSY;
	ring_del(p, fallback);
	g_push(c, p->nchunks, c->list[fallback], c->key[fallback]);
	p->in[fallback] = 0;
	p->ref[fallback] = 0;
	p->count--;
	*chunk = fallback;
	return 0;
}
