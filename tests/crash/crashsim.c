/* SPDX-License-Identifier: MIT */
/*
 * chell_crashsim - simulated power failures at persist points of a
 * transactional workload (see docs/CRASH_TESTING.md).
 *
 * The workload (workload.c) runs on an in-memory region whose persistence
 * goes through the simulator (src/pmem/sim). A counting run learns the
 * number P of persist points; the checking run then executes the very same
 * deterministic workload again and, at every selected point k, builds the
 * image a power failure there would leave in each crash mode, opens a copy
 * of it (chell_region_open_mem runs recovery) and checks it:
 *
 *   - recovery succeeds, and the heap is exactly the state after the last
 *     acknowledged commit - or, only while that commit was in progress,
 *     exactly the state after it (all or nothing, byte for byte);
 *   - the workload's structural invariants hold (wl_check: checksums,
 *     bitmap == root table, no overlap, no leak);
 *   - the recovered region takes one more transaction.
 *
 * Checking each point during one pass gives the same images as re-running
 * the workload up to that point every time (the run is deterministic, and
 * the checks work on copies and never touch the running region or the
 * simulator); --point K --mode M re-runs just one point, which is what the
 * reproducer line printed for a violation does.
 *
 * --break missing-fence[:N] drops the N-th drain of every commit (through a
 * wrapper ops table) and --break missing-undo leaves one range of every
 * update unlogged: both must produce violations.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmem/sim/sim.h"
#include "workload.h"

enum brk { BRK_NONE, BRK_FENCE, BRK_UNDO };

struct opts {
	uint64_t tx, seed, every, random, point;
	int mode;                 /* -1: all */
	int flush_points;
	enum brk brk;
	unsigned brk_drain;       /* which drain of a commit missing-fence drops */
	uint64_t heap;
	unsigned journals, entries;
	unsigned show;            /* violations printed in full */
	int no_continue;
};

struct harness {
	struct opts o;
	size_t len;
	uint8_t *work, *img;
	struct chell_pmsim *sim;
	struct chell_persist_ops wrap;  /* missing-fence: sim ops minus a drain */
	uint64_t fence_key;
	unsigned commit_drain;
	uint64_t dropped;
	struct wl w;
	uint64_t base;                  /* simulator points before the workload */
	int checking;
	uint8_t *sel;                   /* selected points (bitmap), checking run */
	uint64_t npoints;               /* P, from the counting run */
	uint64_t tested_points;
	uint64_t images[CHELL_PMSIM_MODES], viol[CHELL_PMSIM_MODES];
	uint64_t rolled_back, continued;
	int img_bad;                    /* the image being checked broke a rule */
	unsigned shown;                 /* violation messages printed */
	int fatal;
	char fatal_msg[600];
};

/* ------------------------------------------------------------ ops */

/* A recovered copy's own persistence is not under test: plain memory. */
static void nop_flush(void *ctx, const void *addr, size_t len) {}
static void nop_drain(void *ctx) {}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}
static const struct chell_persist_ops plain_ops = {nop_flush, nop_drain, plain_memcpy, NULL};

static void wrap_flush(void *ctx, const void *addr, size_t len)
{
	struct harness *h = ctx;
	const struct chell_persist_ops *s = chell_pmsim_ops(h->sim);
	s->flush(s->ctx, addr, len);
}

/* The deliberate bug: the brk_drain-th drain inside each commit is lost. */
static void wrap_drain(void *ctx)
{
	struct harness *h = ctx;
	const struct chell_persist_ops *s = chell_pmsim_ops(h->sim);
	if (h->w.phase == WL_COMMITTING) {
		if (h->fence_key != h->w.acked + 1) { /* a new commit */
			h->fence_key = h->w.acked + 1;
			h->commit_drain = 0;
		}
		if (++h->commit_drain == h->o.brk_drain) {
			h->dropped++;
			return;
		}
	}
	s->drain(s->ctx);
}

static void *wrap_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	struct harness *h = ctx;
	const struct chell_persist_ops *s = chell_pmsim_ops(h->sim);
	return s->memcpy_nodrain(s->ctx, dst, src, n);
}

/* ------------------------------------------------------------ checking */

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL ^ c * 0x165667b19e3779f9ULL;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	return x ^ (x >> 29);
}

static const char *phase_name(enum wl_phase p)
{
	switch (p) {
	case WL_IDLE: return "between transactions";
	case WL_OPEN: return "inside a transaction";
	case WL_COMMITTING: return "inside commit";
	case WL_ABORTING: return "inside abort";
	}
	return "?";
}

static const char *break_arg(const struct opts *o, char *buf, size_t n)
{
	if (o->brk == BRK_FENCE)
		snprintf(buf, n, " --break missing-fence:%u", o->brk_drain);
	else if (o->brk == BRK_UNDO)
		snprintf(buf, n, " --break missing-undo");
	else
		buf[0] = '\0';
	return buf;
}

static void violation(struct harness *h, uint64_t k, enum chell_pmsim_mode m, const char *what)
{
	/* One image may break several rules: count it once, print each. */
	if (!h->img_bad) {
		h->img_bad = 1;
		h->viol[m]++;
	}
	if (h->shown++ >= h->o.show)
		return;
	char b[64];
	const struct opts *o = &h->o;
	printf("VIOLATION at persist point %" PRIu64 " (%s, acked tx %" PRIu64 "), mode %s:\n%s%s",
	       k, phase_name(h->w.phase), h->w.acked, chell_pmsim_mode_name(m), what,
	       what[0] && what[strlen(what) - 1] == '\n' ? "" : "\n");
	printf("  reproduce: chell_crashsim --tx %" PRIu64 " --seed %" PRIu64 " --heap %" PRIu64
	       " --journals %u --entries %u%s%s --point %" PRIu64 " --mode %s\n",
	       o->tx, o->seed, o->heap, o->journals, o->entries, o->flush_points ? " --flush-points" : "",
	       break_arg(o, b, sizeof(b)), k, chell_pmsim_mode_name(m));
}

static size_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t i = 0;
	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* Recover a copy of the crash image and judge it. */
static void check_image(struct harness *h, uint64_t k, enum chell_pmsim_mode m)
{
	char err[512], msg[2048];
	struct chell_region *r;
	struct wl *w = &h->w;

	h->images[m]++;
	h->img_bad = 0;
	int rc = chell_region_open_mem(h->img, h->len, &plain_ops, &r, err, sizeof(err));
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "  recovery failed: %s (%s)", err, strerror(-rc));
		violation(h, k, m, msg);
		return;
	}
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	int bad = 0;
	if (size != w->heap_size) {
		snprintf(msg, sizeof(msg), "  heap size %" PRIu64 " after recovery, %" PRIu64 " before", size,
			 w->heap_size);
		violation(h, k, m, msg);
		chell_region_close(r);
		return;
	}
	int is_prev = memcmp(heap, w->prev, size) == 0;
	int is_next = w->phase == WL_COMMITTING && memcmp(heap, w->model, size) == 0;
	if (!is_prev && !is_next) {
		size_t d = first_diff(heap, w->prev, size);
		uint64_t n = wl_txcount(heap, size);
		snprintf(msg, sizeof(msg),
			 "  recovered heap is not the state after transaction %" PRIu64 "%s: it records "
			 "transaction %" PRIu64 ", first difference at heap offset %zu (0x%02x, expected 0x%02x)",
			 w->acked, w->phase == WL_COMMITTING ? " nor after the one being committed" : "", n, d,
			 heap[d], w->prev[d]);
		violation(h, k, m, msg);
		bad = 1;
	}
	if (wl_check(heap, size, msg + 2, sizeof(msg) - 2) != 0) {
		msg[0] = msg[1] = ' ';
		violation(h, k, m, msg);
		bad = 1;
	}
	if (is_prev && w->phase != WL_IDLE && memcmp(w->prev, w->model, size) != 0)
		h->rolled_back++;
	/* The recovered region must also work: one more transaction. */
	if (!bad && !h->o.no_continue) {
		struct wl w2;
		rc = wl_init(&w2, r, h->o.journals, h->o.seed, err, sizeof(err));
		if (rc == 0)
			rc = wl_step(&w2, err, sizeof(err));
		if (rc == 0 && wl_check(w2.heap, size, err, sizeof(err)) != 0)
			rc = -EUCLEAN;
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "  the recovered region fails the next transaction: %s", err);
			violation(h, k, m, msg);
		} else {
			h->continued++;
		}
		wl_fini(&w2);
	}
	chell_region_close(r);
}

static void check_point(struct harness *h, uint64_t k)
{
	h->tested_points++;
	for (int m = 0; m < CHELL_PMSIM_MODES; m++) {
		if (h->o.mode >= 0 && m != h->o.mode)
			continue;
		chell_pmsim_crash_image(h->sim, m, mix(h->o.seed, k, (uint64_t)m), h->img);
		check_image(h, k, m);
	}
}

static void hook(void *arg, struct chell_pmsim *s, uint64_t point)
{
	struct harness *h = arg;
	uint64_t k = point - h->base;
	if (h->checking && k <= h->npoints && (h->sel[k / 8] >> (k % 8) & 1))
		check_point(h, k);
}

/* ------------------------------------------------------------ runs */

static size_t image_size(const struct opts *o)
{
	/* Superblock, master journal, client journals, heap, and slack for the
	 * format's alignment: opening accepts an image longer than the layout. */
	size_t s = 4096 + 4096 + (size_t)o->journals * 8 + (size_t)o->journals * (o->entries + 1u) * 64 +
		   (size_t)o->heap + 65536;
	return (s + 4095) / 4096 * 4096;
}

/* One pass of the workload (counting when !h->checking). 0, or -1 after
 * setting h->fatal_msg (the harness itself could not run). */
static int run(struct harness *h)
{
	char err[512];
	struct chell_region *r = NULL;
	struct chell_region_layout lay = {h->o.journals, h->o.entries, h->o.heap};
	int rc;

	memset(h->work, 0, h->len);
	rc = chell_region_format_mem(h->work, h->len, &lay, &plain_ops, err, sizeof(err));
	if (rc < 0) {
		snprintf(h->fatal_msg, sizeof(h->fatal_msg), "format: %s", err);
		return -1;
	}
	h->sim = chell_pmsim_new(h->work, h->len);
	if (!h->sim) {
		snprintf(h->fatal_msg, sizeof(h->fatal_msg), "out of memory");
		return -1;
	}
	const struct chell_persist_ops *ops = chell_pmsim_ops(h->sim);
	if (h->o.brk == BRK_FENCE) {
		h->wrap = (struct chell_persist_ops){wrap_flush, wrap_drain, wrap_memcpy, h};
		ops = &h->wrap;
	}
	h->fence_key = 0;
	h->dropped = 0;
	rc = chell_region_open_mem(h->work, h->len, ops, &r, err, sizeof(err));
	if (rc == 0) {
		rc = wl_init(&h->w, r, h->o.journals, h->o.seed, err, sizeof(err));
		if (rc < 0)
			chell_region_close(r);
	}
	if (rc < 0) {
		snprintf(h->fatal_msg, sizeof(h->fatal_msg), "open: %s", err);
		chell_pmsim_free(h->sim);
		return -1;
	}
	if (h->o.brk == BRK_UNDO)
		h->w.brk = WL_BREAK_MISSING_UNDO;
	struct chell_pmsim_stats st;
	chell_pmsim_stats(h->sim, &st);
	h->base = st.points;
	chell_pmsim_set_flush_points(h->sim, h->o.flush_points);
	chell_pmsim_set_hook(h->sim, hook, h);

	for (uint64_t t = 0; t < h->o.tx && rc == 0; t++)
		rc = wl_step(&h->w, err, sizeof(err));
	chell_pmsim_set_hook(h->sim, NULL, NULL);
	if (rc < 0) {
		snprintf(h->fatal_msg, sizeof(h->fatal_msg), "workload: %s", err);
	} else {
		chell_pmsim_stats(h->sim, &st);
		h->npoints = st.points - h->base;
		/* The end of the run is a crash point too: everything acked. */
		if (h->checking && (h->o.point == 0 || h->o.point == h->npoints + 1))
			check_point(h, h->npoints + 1);
	}
	chell_region_close(r);
	wl_fini(&h->w);
	chell_pmsim_free(h->sim);
	h->sim = NULL;
	return rc < 0 ? -1 : 0;
}

/* Mark the points the checking run tests. */
static int select_points(struct harness *h)
{
	uint64_t P = h->npoints;
	h->sel = calloc(P / 8 + 2, 1);
	if (!h->sel)
		return -1;
#define SET(k) (h->sel[(k) / 8] |= (uint8_t)(1u << ((k) % 8)))
	if (h->o.point) {
		if (h->o.point <= P)
			SET(h->o.point);
	} else if (h->o.random) {
		uint64_t want = h->o.random < P ? h->o.random : P, got = 0, x = h->o.seed ^ 0xabcdefULL;
		while (got < want) {
			uint64_t k = 1 + mix(x++, 7, 11) % P;
			if (!(h->sel[k / 8] >> (k % 8) & 1)) {
				SET(k);
				got++;
			}
		}
	} else {
		for (uint64_t k = 1; k <= P; k += h->o.every)
			SET(k);
	}
#undef SET
	return 0;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: chell_crashsim [options]\n"
		"Simulated power failures at the persist points of a transactional workload;\n"
		"each crash image is recovered and checked. Exit 0: no violation, 1: violations\n"
		"(each with a reproducer line), 2: usage or setup error.\n"
		"\n"
		"  --tx N             workload transactions (default 300)\n"
		"  --seed S           workload and crash-mode seed (default 1)\n"
		"  --every N          test persist points 1, 1+N, 1+2N, ... (default 1: all)\n"
		"  --random K         test K random persist points instead\n"
		"  --point K          test only point K (P+1 = after the last transaction)\n"
		"  --mode M           only crash mode M: none, subset, torn, evict (default all)\n"
		"  --flush-points     every flush is a persist point too (default: drains only)\n"
		"  --break B          a deliberate bug: missing-fence[:N] (drop the N-th drain of\n"
		"                     every commit, default 1), missing-undo (one range unlogged)\n"
		"  --heap BYTES       heap size (default 65536)\n"
		"  --journals J       client journals (default 4)\n"
		"  --entries E        entries per journal (default 128)\n"
		"  --show N           violations printed in full (default 5)\n"
		"  --no-continue      skip the extra transaction on each recovered image\n"
		"  -h, --help         this text\n");
}

static int parse_u64(const char *s, uint64_t *v, uint64_t min)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-' || x < min)
		return -1;
	*v = x;
	return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{"tx", required_argument, 0, 't'},      {"seed", required_argument, 0, 's'},
		{"every", required_argument, 0, 'e'},   {"random", required_argument, 0, 'r'},
		{"point", required_argument, 0, 'p'},   {"mode", required_argument, 0, 'm'},
		{"flush-points", no_argument, 0, 'f'},  {"break", required_argument, 0, 'b'},
		{"heap", required_argument, 0, 'H'},    {"journals", required_argument, 0, 'J'},
		{"entries", required_argument, 0, 'E'}, {"show", required_argument, 0, 'S'},
		{"no-continue", no_argument, 0, 'n'},   {"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	*o = (struct opts){.tx = 300, .seed = 1, .every = 1, .mode = -1, .brk_drain = 1,
			   .heap = 65536, .journals = 4, .entries = 128, .show = 5};
	int c;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 't': if (parse_u64(optarg, &o->tx, 1)) goto bad; break;
		case 's': if (parse_u64(optarg, &o->seed, 0)) goto bad; break;
		case 'e': if (parse_u64(optarg, &o->every, 1)) goto bad; break;
		case 'r': if (parse_u64(optarg, &o->random, 1)) goto bad; break;
		case 'p': if (parse_u64(optarg, &o->point, 1)) goto bad; break;
		case 'm':
			o->mode = chell_pmsim_mode_parse(optarg);
			if (o->mode < 0) goto bad;
			break;
		case 'f': o->flush_points = 1; break;
		case 'b':
			if (strcmp(optarg, "missing-undo") == 0) {
				o->brk = BRK_UNDO;
			} else if (strncmp(optarg, "missing-fence", 13) == 0) {
				o->brk = BRK_FENCE;
				if (optarg[13] == ':') {
					if (parse_u64(optarg + 14, &v, 1) || v > 8) goto bad;
					o->brk_drain = (unsigned)v;
				} else if (optarg[13]) {
					goto bad;
				}
			} else {
				goto bad;
			}
			break;
		case 'H': if (parse_u64(optarg, &o->heap, 4096) || o->heap > (1u << 30)) goto bad; break;
		case 'J': if (parse_u64(optarg, &v, 1) || v > 4096) goto bad; o->journals = (unsigned)v; break;
		case 'E': if (parse_u64(optarg, &v, 2) || v > (1u << 20)) goto bad; o->entries = (unsigned)v; break;
		case 'S': if (parse_u64(optarg, &v, 0) || v > 1000000) goto bad; o->show = (unsigned)v; break;
		case 'n': o->no_continue = 1; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "chell_crashsim: unexpected argument '%s'\n", argv[optind]);
		return -1;
	}
	return 0;
bad:
	fprintf(stderr, "chell_crashsim: bad value '%s' (see --help)\n", optarg);
	return -1;
}

int main(int argc, char **argv)
{
	static struct harness h;
	struct timespec t0, t1;

	if (parse(argc, argv, &h.o) < 0)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	h.len = image_size(&h.o);
	h.work = aligned_alloc(4096, h.len);
	h.img = aligned_alloc(4096, h.len);
	if (!h.work || !h.img) {
		fprintf(stderr, "chell_crashsim: out of memory\n");
		return 2;
	}
	/* Counting run: how many persist points the workload has. */
	if (run(&h) < 0 || select_points(&h) < 0) {
		fprintf(stderr, "chell_crashsim: %s\n", h.fatal_msg[0] ? h.fatal_msg : "out of memory");
		return 2;
	}
	uint64_t P = h.npoints;
	h.checking = 1;
	if (run(&h) < 0) {
		fprintf(stderr, "chell_crashsim: %s\n", h.fatal_msg);
		return 2;
	}
	if (h.npoints != P) {
		fprintf(stderr, "chell_crashsim: the workload is not deterministic (%" PRIu64 " then %" PRIu64
			" persist points)\n", P, h.npoints);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	uint64_t images = 0, viol = 0;
	for (int m = 0; m < CHELL_PMSIM_MODES; m++) {
		images += h.images[m];
		viol += h.viol[m];
	}
	char b[64];
	printf("chell_crashsim: seed %" PRIu64 ", %" PRIu64 " transactions (%" PRIu64 " commits, %" PRIu64
	       " aborts; %" PRIu64 " allocs, %" PRIu64 " updates, %" PRIu64 " frees, %" PRIu64 " ranges logged)%s\n",
	       h.o.seed, h.o.tx, h.w.commits, h.w.aborts, h.w.allocs, h.w.updates, h.w.frees, h.w.ranges,
	       break_arg(&h.o, b, sizeof(b)));
	printf("persist points: %" PRIu64 " (%s)\n", P, h.o.flush_points ? "drains and flushes" : "drains");
	if (h.o.brk == BRK_FENCE)
		printf("drains dropped by the broken fence: %" PRIu64 "\n", h.dropped);
	printf("crash points tested: %" PRIu64 " of %" PRIu64 " (the persist points and the end of the run)\n",
	       h.tested_points, P + 1);
	printf("%-8s %10s %11s\n", "mode", "images", "violating");
	for (int m = 0; m < CHELL_PMSIM_MODES; m++)
		if (h.o.mode < 0 || m == h.o.mode)
			printf("%-8s %10" PRIu64 " %11" PRIu64 "\n", chell_pmsim_mode_name(m), h.images[m], h.viol[m]);
	printf("total: %" PRIu64 " crash images, %" PRIu64 " with violations; %" PRIu64
	       " rolled back an unfinished transaction, %" PRIu64 " took one more transaction; %.1f s\n",
	       images, viol, h.rolled_back, h.continued,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(h.sel);
	free(h.work);
	free(h.img);
	return viol ? 1 : 0;
}
