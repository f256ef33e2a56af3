/* SPDX-License-Identifier: MIT */
/*
 * pmem/sim/sim.c - the power-failure simulator (see sim.h).
 *
 * Lines are numbered by their offset in the image, so the working image
 * should be 64-byte aligned for them to match the CPU's cache lines. The
 * pending set is an array in flush order plus a per-line index into it, so
 * flushing the same line again replaces its snapshot in O(1) and a drain is
 * a single pass.
 */
#include "pmem/sim/sim.h"

#include <stdlib.h>
#include <string.h>

struct chell_pmsim {
	struct chell_persist_ops ops;
	uint8_t *work;          /* the caller's image */
	uint8_t *media;         /* what survives */
	size_t len;
	size_t nlines;
	uint32_t *pend_line;    /* pending lines, in flush order */
	uint8_t *pend_data;     /* their snapshots, CHELL_PMSIM_LINE bytes each */
	int64_t *slot;          /* line -> index in pend_line, or -1 */
	size_t npend;
	bool flush_points;
	chell_pmsim_hook hook;
	void *hook_arg;
	struct chell_pmsim_stats st;
};

static const char *const mode_names[CHELL_PMSIM_MODES] = {
	[CHELL_PMSIM_NONE] = "none",
	[CHELL_PMSIM_SUBSET] = "subset",
	[CHELL_PMSIM_TORN] = "torn",
	[CHELL_PMSIM_EVICT] = "evict",
};

const char *chell_pmsim_mode_name(enum chell_pmsim_mode m)
{
	return (unsigned)m < CHELL_PMSIM_MODES ? mode_names[m] : "?";
}

int chell_pmsim_mode_parse(const char *name)
{
	for (int i = 0; i < CHELL_PMSIM_MODES; i++)
		if (strcmp(name, mode_names[i]) == 0)
			return i;
	return -1;
}

/* Bytes of line `l` (the last one may be short). */
static size_t line_bytes(const struct chell_pmsim *s, size_t l)
{
	size_t off = l * CHELL_PMSIM_LINE;
	return s->len - off < CHELL_PMSIM_LINE ? s->len - off : CHELL_PMSIM_LINE;
}

static void point(struct chell_pmsim *s)
{
	s->st.points++;
	if (s->hook)
		s->hook(s->hook_arg, s, s->st.points);
}

static void sim_flush(void *ctx, const void *addr, size_t len)
{
	struct chell_pmsim *s = ctx;
	uintptr_t a = (uintptr_t)addr, base = (uintptr_t)s->work;

	if (s->flush_points)
		point(s);
	s->st.flushes++;
	if (len == 0)
		return;
	/* Memory outside the image is not persistent here: a flush of it is
	 * harmless but worth counting (the code under test may be confused). */
	if (a < base || a - base >= s->len || len > s->len - (a - base)) {
		s->st.foreign_flushes++;
		return;
	}
	size_t first = (a - base) / CHELL_PMSIM_LINE;
	size_t last = (a - base + len - 1) / CHELL_PMSIM_LINE;
	for (size_t l = first; l <= last; l++) {
		int64_t i = s->slot[l];
		if (i < 0) {
			i = (int64_t)s->npend++;
			s->slot[l] = i;
			s->pend_line[i] = (uint32_t)l;
		}
		memcpy(s->pend_data + (size_t)i * CHELL_PMSIM_LINE,
		       s->work + l * CHELL_PMSIM_LINE, line_bytes(s, l));
		s->st.lines_flushed++;
	}
}

static void sim_drain(void *ctx)
{
	struct chell_pmsim *s = ctx;

	point(s);
	s->st.drains++;
	for (size_t i = 0; i < s->npend; i++) {
		size_t l = s->pend_line[i];
		memcpy(s->media + l * CHELL_PMSIM_LINE, s->pend_data + i * CHELL_PMSIM_LINE,
		       line_bytes(s, l));
		s->slot[l] = -1;
	}
	s->st.lines_drained += s->npend;
	s->npend = 0;
}

/* Non-temporal stores bypass the cache but are only ordered by the next
 * drain: exactly a copy followed by a flush of the destination. */
static void *sim_memcpy_nodrain(void *ctx, void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	sim_flush(ctx, dst, n);
	return dst;
}

struct chell_pmsim *chell_pmsim_new(void *work, size_t len)
{
	struct chell_pmsim *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->work = work;
	s->len = len;
	s->nlines = (len + CHELL_PMSIM_LINE - 1) / CHELL_PMSIM_LINE;
	s->media = malloc(len ? len : 1);
	s->pend_line = malloc((s->nlines ? s->nlines : 1) * sizeof(*s->pend_line));
	s->pend_data = malloc((s->nlines ? s->nlines : 1) * CHELL_PMSIM_LINE);
	s->slot = malloc((s->nlines ? s->nlines : 1) * sizeof(*s->slot));
	if (!s->media || !s->pend_line || !s->pend_data || !s->slot || s->nlines > UINT32_MAX) {
		chell_pmsim_free(s);
		return NULL;
	}
	memset(s->slot, 0xff, s->nlines * sizeof(*s->slot)); /* all -1 */
	memcpy(s->media, work, len);
	s->ops.flush = sim_flush;
	s->ops.drain = sim_drain;
	s->ops.memcpy_nodrain = sim_memcpy_nodrain;
	s->ops.ctx = s;
	return s;
}

void chell_pmsim_free(struct chell_pmsim *s)
{
	if (!s)
		return;
	free(s->media);
	free(s->pend_line);
	free(s->pend_data);
	free(s->slot);
	free(s);
}

const struct chell_persist_ops *chell_pmsim_ops(struct chell_pmsim *s)
{
	return &s->ops;
}

void chell_pmsim_sync(struct chell_pmsim *s)
{
	memcpy(s->media, s->work, s->len);
	for (size_t i = 0; i < s->npend; i++)
		s->slot[s->pend_line[i]] = -1;
	s->npend = 0;
}

void chell_pmsim_set_flush_points(struct chell_pmsim *s, bool on)
{
	s->flush_points = on;
}

void chell_pmsim_set_hook(struct chell_pmsim *s, chell_pmsim_hook hook, void *arg)
{
	s->hook = hook;
	s->hook_arg = arg;
}

/* splitmix64: tiny, seedable, good enough to pick lines and words. */
static uint64_t next_rand(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void chell_pmsim_crash_image(const struct chell_pmsim *s, enum chell_pmsim_mode mode,
			     uint64_t seed, void *out)
{
	uint8_t *img = out;
	uint64_t rng = seed;

	memcpy(img, s->media, s->len);
	if (mode == CHELL_PMSIM_NONE)
		return;
	for (size_t i = 0; i < s->npend; i++) {
		size_t l = s->pend_line[i], n = line_bytes(s, l);
		uint8_t *dst = img + l * CHELL_PMSIM_LINE;
		const uint8_t *src = s->pend_data + i * CHELL_PMSIM_LINE;
		if (mode == CHELL_PMSIM_TORN) {
			/* 8-byte stores are the unit the CPU never tears. */
			uint64_t bits = next_rand(&rng);
			for (size_t w = 0; w < n; w += 8)
				if (bits >> (w / 8) & 1)
					memcpy(dst + w, src + w, n - w < 8 ? n - w : 8);
		} else if (next_rand(&rng) & 1) {
			memcpy(dst, src, n);
		}
	}
	if (mode != CHELL_PMSIM_EVICT)
		return;
	/* The cache may write back any dirty line at any time, with whatever it
	 * holds now: half of the lines whose working bytes differ from what the
	 * image has so far. */
	for (size_t l = 0; l < s->nlines; l++) {
		size_t off = l * CHELL_PMSIM_LINE, n = line_bytes(s, l);
		if (memcmp(img + off, s->work + off, n) != 0 && (next_rand(&rng) & 1))
			memcpy(img + off, s->work + off, n);
	}
}

void chell_pmsim_stats(const struct chell_pmsim *s, struct chell_pmsim_stats *st)
{
	*st = s->st;
	st->pending = s->npend;
}

const void *chell_pmsim_media(const struct chell_pmsim *s)
{
	return s->media;
}

size_t chell_pmsim_len(const struct chell_pmsim *s)
{
	return s->len;
}
