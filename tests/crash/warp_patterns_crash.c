/* SPDX-License-Identifier: MIT */
/*
 * chell_warp_patterns_crash - simulated power failures at the persist
 * points of a sequence of WARP pattern stores (src/handlers/warp/
 * patterns.c, pat_store_region_many), in the manner of chell_cachemeta_crash.
 *
 * The patterns live in the heap of an in-memory region (8 entries, stores
 * to 12 files, so entries are replaced too) whose persistence goes through
 * the power-failure simulator. A counting run records the heap after each
 * store; the checking run repeats the deterministic workload and, at every
 * selected persist point, builds the crash image of each crash mode,
 * recovers a copy and checks:
 *
 *   - the region opens (recovery) and the heap passes pat_validate;
 *   - the heap is byte for byte the heap after the last acknowledged store
 *     or - only for the store in flight - after it;
 *   - the recovered patterns take one more store and stay valid.
 *
 * --break missing-undo makes the library write each entry without its undo
 * record (pat_fault_skip_undo): that must produce violations.
 *
 * Output: per-mode counts, "crash points tested: N" and
 * "total: N crash images, M with violations"; each violation (the first
 * --show of them) with a reproduce line. Exit 0 if none, 1 if any, 2 on
 * usage or setup errors.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patterns_internal.h"
#include "pmem/sim/sim.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_warp_patterns_crash - simulated power failures at the persist\n"
	"points of a sequence of WARP pattern stores (src/handlers/warp/\n"
	"patterns.c, pat_store_region_many), in the manner of chell_cachemeta_crash.\n"
	"(a test program of Chell's suite; details: tests/crash/warp_patterns_crash.c)\n";

#define ENTRIES 8u
#define FILES 12u

struct opts {
	uint64_t ops, seed, every, point;
	int mode, brk, flush_points;
	unsigned show;
};

struct harness {
	struct opts o;
	size_t len;
	uint8_t *work, *img;
	struct chell_pmsim *sim;
	struct chell_region *r;
	uint64_t heap_off, heap_len;
	uint8_t *heaps;       /* heap after store i, i = 0..ops (counting run) */
	int checking, in_op, img_bad;
	uint64_t opno, tested, in_flight_after, images[CHELL_PMSIM_MODES], viol[CHELL_PMSIM_MODES];
	unsigned shown;
};

static void nop_flush(void *ctx, const void *addr, size_t len) {}
static void nop_drain(void *ctx) {}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}
static const struct chell_persist_ops plain_ops = {nop_flush, nop_drain, plain_memcpy, NULL};

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL ^ c * 0x165667b19e3779f9ULL;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	return x ^ (x >> 29);
}

/* Store i of the workload: one to three distinct files' entries in one
 * batch (pat_store_region_many: one transaction). */
static int store(struct chell_region *r, uint64_t seed, uint64_t i)
{
	/* not static: the hook stores from inside a store, and a batch's
	 * entries are read again after its undo records are written */
	uint8_t st[3][PAT_NODES];
	uint32_t su[3][PAT_NODES];
	struct warp_xfile xf[3][WARP_XFILE_SLOTS];
	struct warp_pattern_rec recs[3];
	uint64_t x0 = mix(seed, i, 0);
	unsigned count = 1 + (unsigned)(x0 % 3), m = 0;
	for (unsigned b = 0; b < count; b++) {
		uint64_t x = mix(seed, i, 1 + 1000 * b);
		struct warp_file_id id = {1, 1 + x % FILES};
		bool dup = false;
		for (unsigned c = 0; c < m; c++)
			dup |= recs[c].id.ino == id.ino;
		if (dup)
			continue; /* the ids of a batch are distinct */
		uint32_t n = 1 + (uint32_t)((x >> 8) % 40);
		if ((x >> 20) % 16 == 0)
			n = PAT_NODES; /* now and then a large file: a long undo record */
		for (uint32_t j = 0; j < n; j++) {
			uint64_t y = mix(seed, i, j + 2 + 1000 * b);
			st[m][j] = (uint8_t)(y % WARP_NSTATES);
			su[m][j] = (uint32_t)((y >> 8) % (n + 1)); /* n: none */
		}
		memset(xf[m], 0, sizeof xf[m]);
		xf[m][0] = (struct warp_xfile){.ctx = x | 1, .next = {1, 1 + (x >> 30) % FILES},
					       .hint_node = (uint32_t)(x >> 40) % 4};
		recs[m] = (struct warp_pattern_rec){id, n, st[m], su[m], xf[m]};
		m++;
	}
	return pat_store_region_many(r, recs, m);
}

static void violation(struct harness *h, uint64_t k, int mode, const char *what)
{
	if (!h->img_bad) {
		h->img_bad = 1;
		h->viol[mode]++;
	}
	if (h->shown++ >= h->o.show)
		return;
	printf("VIOLATION at persist point %" PRIu64 " (store %" PRIu64 " %s), mode %s:\n  %s\n", k, h->opno,
	       h->in_op ? "in flight" : "done", chell_pmsim_mode_name(mode), what);
	printf("  reproduce: chell_warp_patterns_crash --ops %" PRIu64 " --seed %" PRIu64 "%s%s --point %" PRIu64
	       " --mode %s\n", h->o.ops, h->o.seed, h->o.flush_points ? " --flush-points" : "",
	       h->o.brk ? " --break missing-undo" : "", k, chell_pmsim_mode_name(mode));
}

static void check_image(struct harness *h, uint64_t k, int mode)
{
	char err[512], msg[700];
	struct chell_region *r;
	h->images[mode]++;
	h->img_bad = 0;
	chell_pmsim_crash_image(h->sim, mode, mix(h->o.seed, k, (uint64_t)mode), h->img);
	if (chell_region_open_mem(h->img, h->len, &plain_ops, &r, err, sizeof err)) {
		snprintf(msg, sizeof msg, "the region does not open: %s", err);
		violation(h, k, mode, msg);
		return;
	}
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	if (pat_validate(heap, size, err, sizeof err)) {
		snprintf(msg, sizeof msg, "the patterns do not check: %s", err);
		violation(h, k, mode, msg);
	} else {
		const uint8_t *before = h->heaps + h->opno * h->heap_len;
		const uint8_t *after = before + h->heap_len;
		bool is_before = memcmp(heap, before, h->heap_len) == 0;
		bool is_after = h->in_op && memcmp(heap, after, h->heap_len) == 0;
		if (!is_before && !is_after)
			violation(h, k, mode, h->in_op ? "the heap is neither the one before the store in flight nor "
							  "the one after it"
							: "the heap is not the one after the last store");
		else if (is_after && !is_before)
			h->in_flight_after++;
		if (store(r, h->o.seed, h->o.ops + 7) || pat_validate(heap, size, err, sizeof err))
			violation(h, k, mode, "the recovered patterns do not take one more store");
	}
	chell_region_close(r);
}

static void hook(void *arg, struct chell_pmsim *s, uint64_t point)
{
	struct harness *h = arg;
	if (!h->checking)
		return;
	if (h->o.point ? point != h->o.point : (point - 1) % h->o.every != 0)
		return;
	h->tested++;
	for (int m = 0; m < CHELL_PMSIM_MODES; m++)
		if (h->o.mode < 0 || h->o.mode == m)
			check_image(h, point, m);
}

/* One run of the workload on a fresh image; records heaps when counting. */
static int run(struct harness *h, bool counting)
{
	char err[512];
	struct chell_region_layout lay = pat_layout(ENTRIES);
	memset(h->work, 0, h->len);
	if (chell_region_format_mem(h->work, h->len, &lay, &plain_ops, err, sizeof err)) {
		fprintf(stderr, "format: %s\n", err);
		return -1;
	}
	h->sim = chell_pmsim_new(h->work, h->len);
	if (!h->sim)
		return -1;
	chell_pmsim_set_flush_points(h->sim, h->o.flush_points);
	if (chell_region_open_mem(h->work, h->len, chell_pmsim_ops(h->sim), &h->r, err, sizeof err) ||
	    pat_format(h->r, ENTRIES)) {
		fprintf(stderr, "open/format: %s\n", err);
		return -1;
	}
	uint64_t size;
	uint8_t *heap = chell_region_heap(h->r, &size);
	h->heap_off = (uint64_t)(heap - h->work);
	h->heap_len = size;
	chell_pmsim_sync(h->sim); /* formatting is not under test */
	if (counting) {
		h->heaps = malloc((h->o.ops + 1) * h->heap_len);
		if (!h->heaps)
			return -1;
		memcpy(h->heaps, heap, h->heap_len);
	}
	h->checking = !counting;
	chell_pmsim_set_hook(h->sim, hook, h);
	pat_fault_skip_undo = h->o.brk;
	for (uint64_t i = 0; i < h->o.ops; i++) {
		h->opno = i;
		h->in_op = 1;
		int rc = store(h->r, h->o.seed, i);
		h->in_op = 0;
		if (rc) {
			fprintf(stderr, "store %" PRIu64 " failed: %d\n", i, rc);
			return -1;
		}
		h->opno = i + 1;
		if (counting)
			memcpy(h->heaps + (i + 1) * h->heap_len, heap, h->heap_len);
	}
	pat_fault_skip_undo = 0;
	h->checking = 0;
	chell_region_close(h->r);
	struct chell_pmsim_stats st;
	chell_pmsim_stats(h->sim, &st);
	chell_pmsim_free(h->sim);
	return (int)(st.points > INT32_MAX ? INT32_MAX : st.points);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	struct harness h = {.o = {.ops = 300, .seed = 1, .every = 1, .mode = -1, .show = 5}};
	static const struct option lo[] = {
		{"ops", required_argument, NULL, 'o'},   {"seed", required_argument, NULL, 's'},
		{"every", required_argument, NULL, 'e'}, {"point", required_argument, NULL, 'p'},
		{"mode", required_argument, NULL, 'm'},  {"break", required_argument, NULL, 'b'},
		{"flush-points", no_argument, NULL, 'f'}, {"show", required_argument, NULL, 'S'},
		{NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'o': h.o.ops = strtoull(optarg, NULL, 10); break;
		case 's': h.o.seed = strtoull(optarg, NULL, 10); break;
		case 'e': h.o.every = strtoull(optarg, NULL, 10); break;
		case 'p': h.o.point = strtoull(optarg, NULL, 10); break;
		case 'm':
			h.o.mode = chell_pmsim_mode_parse(optarg);
			if (h.o.mode < 0) {
				fprintf(stderr, "unknown mode %s\n", optarg);
				return 2;
			}
			break;
		case 'b':
			if (strcmp(optarg, "missing-undo")) {
				fprintf(stderr, "unknown --break %s (missing-undo)\n", optarg);
				return 2;
			}
			h.o.brk = 1;
			break;
		case 'f': h.o.flush_points = 1; break;
		case 'S': h.o.show = (unsigned)strtoul(optarg, NULL, 10); break;
		default: return 2;
		}
	}
	if (!h.o.ops || !h.o.every)
		return 2;
	struct chell_region_layout lay = pat_layout(ENTRIES);
	h.len = (size_t)lay.heap_size + (1u << 16) + PAT_JOURNAL_ENTRIES * 64u * 2;
	h.len = (h.len + 4095) & ~(size_t)4095;
	h.work = aligned_alloc(64, h.len);
	h.img = aligned_alloc(64, h.len);
	if (!h.work || !h.img)
		return 2;
	int points = run(&h, true);
	if (points < 0)
		return 2;
	if (run(&h, false) < 0)
		return 2;
	uint64_t images = 0, viol = 0;
	for (int m = 0; m < CHELL_PMSIM_MODES; m++) {
		if (!h.images[m])
			continue;
		printf("mode %-6s: %" PRIu64 " crash images, %" PRIu64 " with violations\n", chell_pmsim_mode_name(m),
		       h.images[m], h.viol[m]);
		images += h.images[m];
		viol += h.viol[m];
	}
	printf("persist points: %d; crash points tested: %" PRIu64 "; %" PRIu64
	       " images recovered the store in flight\n", points, h.tested, h.in_flight_after);
	printf("total: %" PRIu64 " crash images, %" PRIu64 " with violations\n", images, viol);
	free(h.heaps);
	free(h.work);
	free(h.img);
	return viol ? 1 : 0;
}
