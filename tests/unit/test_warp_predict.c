/* WARP's successor prediction (brain.h, src/handlers/warp/predict.c) on
 * synthetic traces, with the paper's accuracy definition (warp.md §V-D):
 * an access is an accurate prefetch when its node is the one the records
 * predicted and its type matches the node's recorded state.
 *
 * The test plays the data path's part as brain.h describes it: a file
 * opened read-only starts with its nodes mapped, write-only buffered; the
 * prediction for an access is looked up before the records are updated. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "brain.h"

#define NODE (2u << 20)
#define MAXN 512u

struct sfile {
	struct warp_file_id id;
	uint32_t succ[MAXN];
	uint8_t state[MAXN];
	struct warp_xfile xf[WARP_XFILE_SLOTS];
};

struct sim {
	uint64_t ctx;
	struct sfile *last;
	uint32_t prev;
	struct warp_accuracy acc;
};

static struct sfile *new_file(uint64_t ino, enum warp_state open_state)
{
	struct sfile *f = calloc(1, sizeof *f);
	f->id = (struct warp_file_id){.dev = 7, .ino = ino};
	for (unsigned i = 0; i < MAXN; i++) {
		f->succ[i] = WARP_NODE_NONE;
		f->state[i] = (uint8_t)open_state;
	}
	return f;
}

/* A new process (or a restart): the per-process "last file" is gone, the
 * per-file records stay. */
static void new_process(struct sim *s, uint64_t ctx)
{
	s->ctx = ctx;
	s->last = NULL;
	s->prev = WARP_NODE_NONE;
	memset(&s->acc, 0, sizeof s->acc);
}

static void access_at(struct sim *s, struct sfile *f, uint64_t off, bool write)
{
	uint32_t node = (uint32_t)(off / NODE), predicted = WARP_NODE_NONE;
	if (s->last == f) {
		predicted = node == s->prev ? s->prev : f->succ[s->prev];
	} else if (s->last) {
		const struct warp_xfile *x = warp_xfile_predict(s->last->xf, s->ctx);
		if (x && x->next.dev == f->id.dev && x->next.ino == f->id.ino)
			predicted = x->hint_node;
	}
	warp_accuracy_note(&s->acc, warp_access_accurate(predicted, node, (enum warp_state)f->state[node], write));
	if (s->last == f)
		warp_succ_record(f->succ, s->prev, node);
	else if (s->last)
		warp_xfile_record(s->last->xf, s->ctx, f->id, node);
	s->last = f;
	s->prev = node;
}

static double accuracy(const struct sim *s)
{
	return s->acc.accesses ? (double)s->acc.accurate / (double)s->acc.accesses : 0;
}

/* cat of a 1 GB file in 128 KB reads: 8192 accesses over 512 nodes. */
static void cat(struct sim *s, struct sfile *f)
{
	for (uint64_t off = 0; off < (uint64_t)MAXN * NODE; off += 128u << 10)
		access_at(s, f, off, false);
}

static void test_cat(void **state)
{
	struct sim s;
	struct sfile *f = new_file(1, WARP_MAPPED);
	new_process(&s, 11);
	cat(&s, f);
	/* first pass: within each node the node itself is predicted; the
	 * moves to a new node were never seen */
	assert_int_equal(s.acc.accesses, 8192);
	assert_int_equal(s.acc.accurate, 8192 - 512);
	new_process(&s, 11);
	cat(&s, f);
	printf("cat, second pass: %.4f\n", accuracy(&s));
	/* only the very first access had no prediction */
	assert_int_equal(s.acc.accurate, 8191);
	assert_true(accuracy(&s) >= 0.99);
	for (unsigned i = 0; i + 1 < MAXN; i++)
		assert_int_equal(f->succ[i], i + 1);
	free(f);
}

/* make: for each unit, read its source (512 KB in 4 KB reads), two
 * shared headers (64 KB each), write its object (32 KB in 4 KB writes). */
#define UNITS 40
static void make(struct sim *s, struct sfile **src, struct sfile **obj, struct sfile *ha, struct sfile *hb)
{
	for (int u = 0; u < UNITS; u++) {
		for (uint64_t off = 0; off < (512u << 10); off += 4096)
			access_at(s, src[u], off, false);
		for (uint64_t off = 0; off < (64u << 10); off += 4096)
			access_at(s, ha, off, false);
		for (uint64_t off = 0; off < (64u << 10); off += 4096)
			access_at(s, hb, off, false);
		for (uint64_t off = 0; off < (32u << 10); off += 4096)
			access_at(s, obj[u], off, true);
	}
}

static void test_make(void **state)
{
	struct sim s;
	struct sfile *src[UNITS], *obj[UNITS], *ha = new_file(1000, WARP_MAPPED), *hb = new_file(1001, WARP_MAPPED);
	for (int u = 0; u < UNITS; u++) {
		src[u] = new_file(100 + (uint64_t)u, WARP_MAPPED);
		obj[u] = new_file(200 + (uint64_t)u, WARP_BUFFERED);
	}
	new_process(&s, 22);
	make(&s, src, obj, ha, hb);
	double first = accuracy(&s);
	new_process(&s, 22);
	make(&s, src, obj, ha, hb);
	printf("make: first pass %.4f, second pass %.4f\n", first, accuracy(&s));
	/* second pass: every move between files is predicted except the
	 * first access and the move from the shared header to each object
	 * (its last successor was the previous unit's) */
	assert_int_equal(s.acc.accesses, UNITS * (128 + 16 + 16 + 8));
	assert_int_equal(s.acc.accesses - s.acc.accurate, 1 + UNITS);
	assert_true(accuracy(&s) >= 0.99);
	assert_true(accuracy(&s) > first);
	/* another program in the same files (another context) has its own
	 * tuples and does not disturb make's */
	struct sim o;
	new_process(&o, 33);
	access_at(&o, hb, 0, false);
	access_at(&o, src[5], 0, false);
	new_process(&s, 22);
	make(&s, src, obj, ha, hb);
	assert_int_equal(s.acc.accesses - s.acc.accurate, 1 + UNITS);
	for (int u = 0; u < UNITS; u++) {
		free(src[u]);
		free(obj[u]);
	}
	free(ha);
	free(hb);
}

/* Random accesses to random nodes of 8 files, reads and writes mixed:
 * the records cannot predict them. */
static void test_random(void **state)
{
	struct sim s;
	struct sfile *f[8];
	for (int i = 0; i < 8; i++)
		f[i] = new_file(300 + (uint64_t)i, i % 2 ? WARP_MAPPED : WARP_BUFFERED);
	uint64_t x = 88172645463325252ULL;
	for (int pass = 0; pass < 2; pass++) {
		new_process(&s, 44);
		for (int i = 0; i < 20000; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			access_at(&s, f[x % 8], ((x >> 8) % 64) * NODE, (x >> 20) & 1);
		}
	}
	printf("random, second pass: %.4f\n", accuracy(&s));
	assert_true(accuracy(&s) < 0.2);
	for (int i = 0; i < 8; i++)
		free(f[i]);
}

static void test_succ_record(void **state)
{
	uint32_t succ[4] = {WARP_NODE_NONE, WARP_NODE_NONE, WARP_NODE_NONE, WARP_NODE_NONE};
	warp_succ_record(succ, WARP_NODE_NONE, 2); /* no previous node */
	warp_succ_record(succ, 1, 1);              /* same node */
	for (int i = 0; i < 4; i++)
		assert_int_equal(succ[i], WARP_NODE_NONE);
	warp_succ_record(succ, 0, 3);
	warp_succ_record(succ, 0, 2); /* the last successor wins */
	assert_int_equal(succ[0], 2);
}

/* One tuple per context, the latest successor; a fifth context evicts the
 * one confirmed least recently. */
static void test_xfile_slots(void **state)
{
	struct warp_xfile xf[WARP_XFILE_SLOTS] = {0};
	struct warp_file_id a = {1, 10}, b = {1, 11};
	assert_null(warp_xfile_predict(xf, 5));
	warp_xfile_record(xf, 0, a, 0); /* context 0 is "empty": ignored */
	assert_null(warp_xfile_predict(xf, 0));
	for (uint64_t c = 1; c <= 4; c++)
		warp_xfile_record(xf, c, a, (uint32_t)c);
	warp_xfile_record(xf, 1, b, 9); /* context 1: new successor, most recent */
	const struct warp_xfile *p = warp_xfile_predict(xf, 1);
	assert_non_null(p);
	assert_true(p->next.ino == 11 && p->hint_node == 9);
	warp_xfile_record(xf, 3, a, 3); /* 3 confirmed */
	warp_xfile_record(xf, 5, b, 0); /* evicts 2, the least recently confirmed */
	assert_null(warp_xfile_predict(xf, 2));
	for (uint64_t c = 1; c <= 5; c++)
		if (c != 2)
			assert_non_null(warp_xfile_predict(xf, c));
}

static void test_context_hash(void **state)
{
	uint64_t h = warp_context_hash();
	assert_true(h != 0);
	assert_true(h == warp_context_hash());
}

static void test_accuracy_definition(void **state)
{
	/* right node, matching type */
	assert_true(warp_access_accurate(3, 3, WARP_MAPPED, false));
	assert_true(warp_access_accurate(3, 3, WARP_BUFFERED, true));
	/* right node, wrong type; a normal node was not prefetched */
	assert_false(warp_access_accurate(3, 3, WARP_MAPPED, true));
	assert_false(warp_access_accurate(3, 3, WARP_BUFFERED, false));
	assert_false(warp_access_accurate(3, 3, WARP_NORMAL, false));
	/* wrong node, or nothing predicted */
	assert_false(warp_access_accurate(2, 3, WARP_MAPPED, false));
	assert_false(warp_access_accurate(WARP_NODE_NONE, 3, WARP_MAPPED, false));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_succ_record),
		cmocka_unit_test(test_xfile_slots),
		cmocka_unit_test(test_context_hash),
		cmocka_unit_test(test_accuracy_definition),
		cmocka_unit_test(test_cat),
		cmocka_unit_test(test_make),
		cmocka_unit_test(test_random),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
