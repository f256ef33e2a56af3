/* SPDX-License-Identifier: MIT */
/*
 * chell_cachemeta_crash - simulated power failures at the persist points of
 * a workload of mixed cache-metadata operations (src/cache/meta).
 *
 * Like chell_crashsim (read it first): the metadata lives on an in-memory
 * region whose persistence goes through the simulator; a counting run
 * learns the number P of persist points, the checking run repeats the
 * deterministic workload and, at every selected point, builds the crash
 * image of each crash mode, recovers a copy and checks it:
 *
 *   - the region opens (recovery), the metadata opens and meta_check finds
 *     the maps, allocators, counts and dirty bits mutually consistent;
 *   - the logical state (every Cnode, every mapping, every block's valid
 *     bit and dirty state, the check-out flags) equals the model after the
 *     last acknowledged operation, or - only for the operation in flight -
 *     the model after it; and the heap is byte for byte that state;
 *   - the recovered metadata takes one more operation.
 *
 * The model is an independent volatile description of what the operations
 * mean (it predicts results, errors and the allocation policy); the live
 * run compares the library with it after every operation.
 *
 * --break missing-undo makes the library skip the undo record of one range
 * per transaction (chell_ptx_fault_skip_undo): that must produce violations.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meta_internal.h"
#include "pmem/sim/sim.h"

#define NCN 12u      /* Cnode table */
#define NCH 24u      /* cache chunks */
#define NDEV 2u
#define NINO 10u     /* 20 keys for 12 Cnodes: creates can hit -ENOSPC */
#define NFC 12u      /* file chunks per file the workload uses */

/* ------------------------------------------------------------ keys */

/* The inode numbers and file chunk indices the workload uses: 0..N-1, or
 * with --collide values that all share one home slot near the end of
 * their table, so clusters are long and wrap around (the backward-shift
 * deletions then log two ranges). Filled after the tables exist. */
static uint64_t ino_key[NDEV + 1][NINO], fc_key[NCN][NFC];

static void fill_keys(const struct meta *m, int collide)
{
	for (uint64_t d = 1; d <= NDEV; d++) {
		uint64_t v = 0;
		for (unsigned k = 0; k < NINO; k++, v++) {
			while (collide && ((uint32_t)meta_hash(d, v) & m->i2c_mask) != m->i2c_mask - 1)
				v++;
			ino_key[d][k] = v;
		}
	}
	for (uint32_t c = 0; c < NCN; c++) {
		uint64_t v = 0;
		for (unsigned k = 0; k < NFC; k++, v++) {
			while (collide && ((uint32_t)meta_hash(c, v) & m->c2f_mask) != m->c2f_mask - 1)
				v++;
			fc_key[c][k] = v;
		}
	}
}

/* ------------------------------------------------------------ model */

struct mcn {
	int used;
	uint64_t dev, ino, size;
	int64_t mt, ct;
	uint32_t flags, nch;
	char path[32];
};
struct mch {
	int used, out;
	uint32_t cnode;
	uint64_t fc, seq;
	uint8_t valid[META_BLOCKS], st[META_BLOCKS];
};
struct model {
	struct mcn cn[NCN];
	struct mch ch[NCH];
	uint32_t ncn, nch, hint;
	uint64_t seq;
};

struct opts {
	uint64_t ops, seed, every, point;
	int mode;
	int brk, flush_points, collide;
	unsigned show;
};

struct harness {
	struct opts o;
	size_t len;
	uint8_t *work, *img;
	struct chell_pmsim *sim;
	struct meta *m;
	uint64_t heap_off, heap_len;   /* of the heap inside the image */
	struct model prev, next;       /* before / after the operation in flight */
	uint8_t *heaps;                /* counting run: the heap after op i, i = 0..ops */
	int in_op;
	uint64_t acked, opno, base, npoints, tested, images[CHELL_PMSIM_MODES], viol[CHELL_PMSIM_MODES];
	uint64_t as_next, continued, errors_expected;
	uint64_t count[12];
	uint32_t longest_i2c, longest_c2f;  /* longest cluster seen (live run) */
	int checking, img_bad;
	unsigned shown;
	uint8_t *sel;
};

static const char *op_names[12] = {"cnode_get", "cnode_remove", "set_attr", "chunk_map", "chunk_unmap",
				   "mark_dirty", "mark_valid", "checkout", "checkin", "cancel", "noop", "?"};

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL ^ c * 0x165667b19e3779f9ULL;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ULL;
	return x ^ (x >> 29);
}

static void nop_flush(void *ctx, const void *addr, size_t len) {}
static void nop_drain(void *ctx) {}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}
static const struct chell_persist_ops plain_ops = {nop_flush, nop_drain, plain_memcpy, NULL};

/* Does the metadata say exactly what the model says? 0, or -1 with a
 * sentence in msg. */
static int compare(struct meta *m, const struct model *md, char *msg, size_t n)
{
	struct meta_stats st;
	meta_stats(m, &st);
	if (st.cnodes != md->ncn || st.chunks_used != md->nch || st.seq != md->seq) {
		snprintf(msg, n, "counts: %u Cnodes, %u chunks, seq %" PRIu64 "; model %u, %u, %" PRIu64, st.cnodes,
			 st.chunks_used, st.seq, md->ncn, md->nch, md->seq);
		return -1;
	}
	for (uint32_t id = 0; id < NCN; id++) {
		const struct mcn *c = &md->cn[id];
		struct meta_cnode_info ci;
		int rc = meta_cnode_info(m, id, &ci);
		if (!c->used) {
			if (rc != -ENOENT) {
				snprintf(msg, n, "Cnode %u exists, the model has it free", id);
				return -1;
			}
			continue;
		}
		if (rc < 0 || ci.dev != c->dev || ci.ino != c->ino || ci.size != c->size || ci.mtime_ns != c->mt ||
		    ci.ctime_ns != c->ct || ci.flags != c->flags || ci.chunks != c->nch || strcmp(ci.path, c->path)) {
			snprintf(msg, n, "Cnode %u differs from the model (rc %d, size %" PRIu64 "/%" PRIu64
				 ", chunks %u/%u)", id, rc, ci.size, c->size, ci.chunks, c->nch);
			return -1;
		}
	}
	for (uint64_t d = 1; d <= NDEV; d++)
		for (uint64_t i = 0; i < NINO; i++) {
			int want = -ENOENT;
			for (uint32_t id = 0; id < NCN; id++)
				if (md->cn[id].used && md->cn[id].dev == d && md->cn[id].ino == ino_key[d][i])
					want = (int)id;
			int got = meta_cnode_get(m, d, ino_key[d][i], false, NULL);
			if (got != want) {
				snprintf(msg, n, "I2C (%" PRIu64 ", %" PRIu64 ") -> %d, model %d", d, ino_key[d][i], got,
					 want);
				return -1;
			}
		}
	for (uint32_t s = 0; s < NCH; s++) {
		const struct mch *c = &md->ch[s];
		struct meta_chunk_info ci;
		int rc = meta_chunk_info(m, s, &ci);
		if (!c->used) {
			if (rc != -ENOENT) {
				snprintf(msg, n, "chunk %u in use, the model has it free", s);
				return -1;
			}
			continue;
		}
		if (rc < 0 || ci.cnode != c->cnode || ci.file_chunk != c->fc || ci.seq != c->seq ||
		    !!(ci.flags & META_CH_CHECKEDOUT) != c->out) {
			snprintf(msg, n, "chunk %u differs from the model (rc %d)", s, rc);
			return -1;
		}
		for (unsigned b = 0; b < META_BLOCKS; b++) {
			int v = (int)(ci.valid.bits[b / 64] >> (b % 64) & 1), dst = meta_block_state(m, s, b);
			if (v != c->valid[b] || dst != c->st[b]) {
				snprintf(msg, n, "chunk %u block %u: valid %d state %d, model %d %d", s, b, v, dst,
					 c->valid[b], c->st[b]);
				return -1;
			}
		}
	}
	for (uint32_t id = 0; id < NCN; id++) {
		if (!md->cn[id].used)
			continue;
		for (unsigned k = 0; k < NFC; k++) {
			uint64_t fc = fc_key[id][k];
			int want = -ENOENT;
			for (uint32_t s = 0; s < NCH; s++)
				if (md->ch[s].used && md->ch[s].cnode == id && md->ch[s].fc == fc)
					want = (int)s;
			int got = meta_chunk_lookup(m, id, fc);
			if (got != want) {
				snprintf(msg, n, "C2F (Cnode %u, chunk %" PRIu64 ") -> %d, model %d", id, fc, got, want);
				return -1;
			}
		}
	}
	return 0;
}

/* ------------------------------------------------------------ crash checks */

static void violation(struct harness *h, uint64_t k, int mode, const char *what)
{
	if (!h->img_bad) {
		h->img_bad = 1;
		h->viol[mode]++;
	}
	if (h->shown++ >= h->o.show)
		return;
	printf("VIOLATION at persist point %" PRIu64 " (operation %" PRIu64 " %s, %" PRIu64 " acked), mode %s:\n  %s\n",
	       k, h->opno, h->in_op ? "in flight" : "done", h->acked, chell_pmsim_mode_name(mode), what);
	printf("  reproduce: chell_cachemeta_crash --ops %" PRIu64 " --seed %" PRIu64 "%s%s%s --point %" PRIu64
	       " --mode %s\n", h->o.ops, h->o.seed, h->o.flush_points ? " --flush-points" : "",
	       h->o.collide ? " --collide" : "",
	       h->o.brk ? " --break missing-undo" : "", k,
	       chell_pmsim_mode_name(mode));
}

static void check_image(struct harness *h, uint64_t k, int mode)
{
	char err[512], msg[1024];
	struct chell_region *r;
	struct meta *m;

	h->images[mode]++;
	h->img_bad = 0;
	int rc = chell_region_open_mem(h->img, h->len, &plain_ops, &r, err, sizeof(err));
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "region recovery failed: %s", err);
		violation(h, k, mode, msg);
		return;
	}
	rc = meta_open(r, 0, &m, err, sizeof(err));
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "meta_open failed: %s", err);
		violation(h, k, mode, msg);
		chell_region_close(r);
		return;
	}
	if (meta_check(m, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "meta_check: %s", err);
		violation(h, k, mode, msg);
	}
	/* All or nothing: the state after the last acknowledged operation,
	 * or after the one in flight. */
	char e1[300] = "", e2[300] = "";
	int is_prev = compare(m, &h->prev, e1, sizeof(e1)) == 0;
	int is_next = !is_prev && h->in_op && compare(m, &h->next, e2, sizeof(e2)) == 0;
	if (!is_prev && !is_next) {
		snprintf(msg, sizeof(msg), "recovered state is neither before nor after operation %" PRIu64
			 ": %s%s%s", h->opno, e1, h->in_op ? "; after: " : "", e2);
		violation(h, k, mode, msg);
	} else {
		const uint8_t *want = h->heaps + (is_prev ? h->acked : h->opno) * h->heap_len;
		if (memcmp(m->heap, want, h->heap_len) != 0) {
			snprintf(msg, sizeof(msg), "logical state right but heap bytes differ");
			violation(h, k, mode, msg);
		}
		h->as_next += is_next;
	}
	/* The recovered metadata must work: one more operation. */
	if (!h->img_bad) {
		int c = meta_cnode_get(m, 3, 1, true, "/after/crash");
		int s = c >= 0 ? meta_chunk_map(m, (uint32_t)c, 0) : c;
		if (s == -ENOSPC)
			s = meta_cnode_set_size(m, (uint32_t)c, 1);
		else if (s >= 0)
			s = meta_mark_dirty(m, (uint32_t)s, 0, 3);
		if (c == -ENOSPC)
			c = 0, s = 0;
		if (c < 0 || s < 0 || meta_check(m, err, sizeof(err)) < 0) {
			snprintf(msg, sizeof(msg), "the recovered metadata fails the next operation (%d, %d)", c, s);
			violation(h, k, mode, msg);
		} else {
			h->continued++;
		}
	}
	meta_close(m);
	chell_region_close(r);
}

static void check_point(struct harness *h, uint64_t k)
{
	h->tested++;
	for (int md = 0; md < CHELL_PMSIM_MODES; md++) {
		if (h->o.mode >= 0 && md != h->o.mode)
			continue;
		chell_pmsim_crash_image(h->sim, md, mix(h->o.seed, k, (uint64_t)md), h->img);
		check_image(h, k, md);
	}
}

static void hook(void *arg, struct chell_pmsim *s, uint64_t point)
{
	struct harness *h = arg;
	uint64_t k = point - h->base;
	if (h->checking && k <= h->npoints && (h->sel[k / 8] >> (k % 8) & 1))
		check_point(h, k);
}

/* ------------------------------------------------------------ workload */

static int pick_cnode(const struct model *md, uint64_t r)
{
	if (!md->ncn)
		return -1;
	uint32_t k = (uint32_t)(r % md->ncn);
	for (uint32_t id = 0; id < NCN; id++)
		if (md->cn[id].used && k-- == 0)
			return (int)id;
	return -1;
}

static int pick_chunk(const struct model *md, uint64_t r)
{
	if (!md->nch)
		return -1;
	uint32_t k = (uint32_t)(r % md->nch);
	for (uint32_t s = 0; s < NCH; s++)
		if (md->ch[s].used && k-- == 0)
			return (int)s;
	return -1;
}

static int dirty_any(const struct mch *c)
{
	for (unsigned b = 0; b < META_BLOCKS; b++)
		if (c->st[b])
			return 1;
	return 0;
}

/* Operation i: choose it, predict its result and the model after it
 * (h->next), run it, then compare. 0, or -1 with a message (a bug the live
 * run found, or a harness error). */
static int step(struct harness *h, uint64_t i, char *msg, size_t n)
{
	struct model *nx = &h->next;
	uint64_t r1 = mix(h->o.seed, i, 1), r2 = mix(h->o.seed, i, 2), r3 = mix(h->o.seed, i, 3);
	unsigned kind = (unsigned)(r1 % 100);
	int want = 0, got = 0, op;
	*nx = h->prev;
	int c = pick_cnode(&h->prev, r2), s = pick_chunk(&h->prev, r2);
	uint64_t key_d = 1 + r2 % NDEV, key_i = ino_key[key_d][(r2 / NDEV) % NINO];

	if (kind < 15 || c < 0) {
		op = 0;
	} else if (kind < 19) {
		op = 1;
	} else if (kind < 27) {
		op = 2;
	} else if (kind < 47) {
		op = 3;
	} else if (kind < 55) {
		op = s < 0 ? 10 : 4;
	} else if (kind < 72) {
		op = s < 0 ? 10 : 5;
	} else if (kind < 77) {
		op = s < 0 ? 10 : 6;
	} else if (kind < 88) {
		op = s < 0 ? 10 : 7;
	} else {
		op = s < 0 ? 10 : (r3 % 4 ? 8 : 9);
		/* Mostly end a real check-out (else -EINVAL, also tested). */
		for (uint32_t k = 0; s >= 0 && r3 % 8 && k < NCH; k++)
			if (h->prev.ch[(s + k) % NCH].used && h->prev.ch[(s + k) % NCH].out) {
				s = (int)((s + k) % NCH);
				break;
			}
	}
	/* Predict. */
	unsigned first = (unsigned)(r3 % META_BLOCKS), cnt = 1 + (unsigned)((r3 >> 16) % 48);
	if (cnt > META_BLOCKS - first)
		cnt = META_BLOCKS - first;
	char path[32];
	switch (op) {
	case 0: {
		snprintf(path, sizeof(path), "/slow/%" PRIu64 "/%" PRIu64, key_d, key_i);
		want = -ENOSPC;
		for (uint32_t id = 0; id < NCN; id++)
			if (nx->cn[id].used && nx->cn[id].dev == key_d && nx->cn[id].ino == key_i)
				want = (int)id;
		if (want == -ENOSPC && nx->ncn < NCN) {
			uint32_t id = 0;
			while (nx->cn[id].used)
				id++;
			want = (int)id;
			nx->cn[id] = (struct mcn){.used = 1, .dev = key_d, .ino = key_i};
			strcpy(nx->cn[id].path, path);
			nx->ncn++;
		}
		break;
	}
	case 1:
		want = nx->cn[c].nch ? -EBUSY : 0;
		if (!want) {
			nx->cn[c] = (struct mcn){0};
			nx->ncn--;
		}
		break;
	case 2:
		nx->cn[c].size = r3 % (1ull << 40);
		nx->cn[c].mt = (int64_t)(r3 >> 8);
		nx->cn[c].ct = (int64_t)(r3 >> 9);
		break;
	case 3: {
		uint64_t fc = c >= 0 ? fc_key[c][r3 % NFC] : 0;
		want = -ENOSPC;
		for (uint32_t k = 0; k < NCH; k++)
			if (nx->ch[k].used && nx->ch[k].cnode == (uint32_t)c && nx->ch[k].fc == fc)
				want = (int)k;
		if (want == -ENOSPC && nx->nch < NCH) {
			uint32_t k = nx->hint % NCH; /* next fit, as the library */
			while (nx->ch[k].used)
				k = (k + 1) % NCH;
			want = (int)k;
			memset(&nx->ch[k], 0, sizeof(nx->ch[k]));
			nx->ch[k].used = 1;
			nx->ch[k].cnode = (uint32_t)c;
			nx->ch[k].fc = fc;
			nx->ch[k].seq = nx->seq++;
			nx->nch++;
			nx->cn[c].nch++;
			nx->hint = k + 1;
		}
		break;
	}
	case 4:
		want = dirty_any(&nx->ch[s]) || nx->ch[s].out ? -EBUSY : 0;
		if (!want) {
			nx->cn[nx->ch[s].cnode].nch--;
			memset(&nx->ch[s], 0, sizeof(nx->ch[s]));
			nx->nch--;
		}
		break;
	case 5:
	case 6:
		for (unsigned b = first; b < first + cnt; b++) {
			nx->ch[s].valid[b] = 1;
			if (op == 5 && nx->ch[s].st[b] == META_CLEAN)
				nx->ch[s].st[b] = META_DIRTY;
			else if (op == 5 && nx->ch[s].st[b] == META_DIRTY_PRE_CHECKOUT)
				nx->ch[s].st[b] = META_DIRTY_POST_CHECKOUT;
		}
		break;
	case 7:
		if (nx->ch[s].out) {
			want = -EBUSY;
			break;
		}
		for (unsigned b = 0; b < META_BLOCKS; b++)
			if (nx->ch[s].st[b] == META_DIRTY) {
				nx->ch[s].st[b] = META_DIRTY_PRE_CHECKOUT;
				want++;
			}
		nx->ch[s].out = want > 0;
		break;
	case 8:
	case 9:
		if (!nx->ch[s].out) {
			want = -EINVAL;
			break;
		}
		for (unsigned b = 0; b < META_BLOCKS; b++) {
			if (nx->ch[s].st[b] == META_DIRTY_PRE_CHECKOUT)
				nx->ch[s].st[b] = op == 8 ? META_CLEAN : META_DIRTY;
			else if (nx->ch[s].st[b] == META_DIRTY_POST_CHECKOUT)
				nx->ch[s].st[b] = META_DIRTY;
		}
		nx->ch[s].out = 0;
		break;
	}
	/* Run. */
	h->opno = i;
	h->in_op = 1;
	switch (op) {
	case 0: got = meta_cnode_get(h->m, key_d, key_i, true, path); break;
	case 1: got = meta_cnode_remove(h->m, (uint32_t)c); break;
	case 2: got = meta_cnode_set_attr(h->m, (uint32_t)c, nx->cn[c].size, nx->cn[c].mt, nx->cn[c].ct); break;
	case 3: got = meta_chunk_map(h->m, (uint32_t)c, fc_key[c][r3 % NFC]); break;
	case 4: got = meta_chunk_unmap(h->m, (uint32_t)s); break;
	case 5: got = meta_mark_dirty(h->m, (uint32_t)s, first, cnt); break;
	case 6: got = meta_mark_valid(h->m, (uint32_t)s, first, cnt); break;
	case 7: got = meta_checkout(h->m, (uint32_t)s, NULL); break;
	case 8: got = meta_checkin(h->m, (uint32_t)s); break;
	case 9: got = meta_checkout_cancel(h->m, (uint32_t)s); break;
	default: break;
	}
	h->in_op = 0;
	h->count[op]++;
	if (got != want) {
		snprintf(msg, n, "operation %" PRIu64 " (%s) returned %d, the model says %d", i, op_names[op], got, want);
		return -1;
	}
	if (want < 0)
		h->errors_expected++;
	h->acked = i;
	h->prev = *nx;
	if (compare(h->m, &h->prev, msg, n) < 0)
		return -1;
	uint8_t *snap = h->heaps + i * h->heap_len;
	if (!h->checking)
		memcpy(snap, h->m->heap, h->heap_len);
	else if (memcmp(snap, h->m->heap, h->heap_len) != 0) {
		snprintf(msg, n, "operation %" PRIu64 " left other bytes than in the counting run", i);
		return -1;
	}
	char err[256];
	if (meta_check(h->m, err, sizeof(err)) < 0) {
		snprintf(msg, n, "after operation %" PRIu64 ": %s", i, err);
		return -1;
	}
	return 0;
}

/* Longest run of used slots, counted cyclically (the probe lengths the
 * workload really exercised). */
static uint32_t longest(struct meta *m, int c2f)
{
	uint32_t mask = c2f ? m->c2f_mask : m->i2c_mask, best = 0, cur = 0;
	for (uint32_t k = 0; k < 2 * (mask + 1); k++) {
		uint32_t i = k & mask;
		int used = c2f ? c2f_at(m, i)->cnode1 != 0 : i2c_at(m, i)->cnode1 != 0;
		cur = used ? cur + 1 : 0;
		if (cur > best)
			best = cur;
	}
	return best > mask + 1 ? mask + 1 : best;
}

static int run(struct harness *h, char *msg, size_t n)
{
	char err[512];
	struct meta_geometry g = {NCN, NCH};
	struct chell_region_layout lay = {1, 256, meta_heap_size(&g)};
	struct chell_region *r;

	memset(h->work, 0, h->len);
	if (chell_region_format_mem(h->work, h->len, &lay, &plain_ops, err, sizeof(err)) < 0) {
		snprintf(msg, n, "format: %s", err);
		return -1;
	}
	h->sim = chell_pmsim_new(h->work, h->len);
	if (!h->sim || chell_region_open_mem(h->work, h->len, chell_pmsim_ops(h->sim), &r, err, sizeof(err)) < 0 ||
	    meta_create(r, 0, &g, &h->m, err, sizeof(err)) < 0) {
		snprintf(msg, n, "setup: %s", err);
		return -1;
	}
	uint64_t hs;
	uint8_t *heap = chell_region_heap(r, &hs);
	h->heap_off = (uint64_t)(heap - h->work);
	h->heap_len = meta_heap_size(&g);
	fill_keys(h->m, h->o.collide);
	memset(&h->prev, 0, sizeof(h->prev));
	h->prev.seq = 1;
	h->acked = 0;
	memcpy(h->heaps, heap, h->heap_len);
	chell_ptx_fault_skip_undo = h->o.brk;
	struct chell_pmsim_stats st;
	chell_pmsim_stats(h->sim, &st);
	h->base = st.points;
	chell_pmsim_set_flush_points(h->sim, h->o.flush_points);
	chell_pmsim_set_hook(h->sim, hook, h);
	int rc = 0;
	for (uint64_t i = 1; i <= h->o.ops && rc == 0; i++) {
		rc = step(h, i, msg, n);
		uint32_t a = longest(h->m, 0), b = longest(h->m, 1);
		h->longest_i2c = a > h->longest_i2c ? a : h->longest_i2c;
		h->longest_c2f = b > h->longest_c2f ? b : h->longest_c2f;
	}
	chell_pmsim_set_hook(h->sim, NULL, NULL);
	chell_ptx_fault_skip_undo = 0;
	chell_pmsim_stats(h->sim, &st);
	h->npoints = st.points - h->base;
	if (rc == 0 && h->checking && (h->o.point == 0 || h->o.point == h->npoints + 1))
		check_point(h, h->npoints + 1);
	meta_close(h->m);
	chell_region_close(r);
	chell_pmsim_free(h->sim);
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: chell_cachemeta_crash [options]\n"
		   "Simulated power failures at the persist points of a workload of cache-metadata\n"
		   "operations; each crash image is recovered and checked. Exit 0: no violation,\n"
		   "1: violations or a live mismatch, 2: usage or setup error.\n\n"
		   "  --ops N         operations (default 3000)\n"
		   "  --seed S        workload and crash-mode seed (default 1)\n"
		   "  --every N       test persist points 1, 1+N, ... (default 1: all)\n"
		   "  --point K       test only point K\n"
		   "  --mode M        only crash mode M: none, subset, torn, evict\n"
		   "  --flush-points  every flush is a persist point too (default: drains)\n"
		   "  --collide       keys that share one home slot near the table's end\n"
		   "  --break missing-undo   the library skips one undo record per transaction\n"
		   "  --show N        violations printed in full (default 5)\n"
		   "  -h, --help      this text\n");
}

int main(int argc, char **argv)
{
	static struct harness h;
	static const struct option lo[] = {
		{"ops", required_argument, 0, 'o'},   {"seed", required_argument, 0, 's'},
		{"every", required_argument, 0, 'e'}, {"point", required_argument, 0, 'p'},
		{"mode", required_argument, 0, 'm'},  {"break", required_argument, 0, 'b'},
		{"show", required_argument, 0, 'S'},  {"help", no_argument, 0, 'h'},
		{"flush-points", no_argument, 0, 'f'}, {"collide", no_argument, 0, 'c'},
		{0, 0, 0, 0},
	};
	h.o = (struct opts){.ops = 3000, .seed = 1, .every = 1, .mode = -1, .show = 5};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		unsigned long long v = 0;
		if (c != 'm' && c != 'b' && c != 'h' && c != 'f' && c != 'c' && c != '?') {
			errno = 0;
			v = strtoull(optarg, &end, 0);
			if (errno || end == optarg || *end || optarg[0] == '-') {
				fprintf(stderr, "chell_cachemeta_crash: bad value '%s'\n", optarg);
				return 2;
			}
		}
		switch (c) {
		case 'o': h.o.ops = v; break;
		case 's': h.o.seed = v; break;
		case 'e': h.o.every = v ? v : 1; break;
		case 'p': h.o.point = v; break;
		case 'S': h.o.show = (unsigned)v; break;
		case 'm':
			h.o.mode = chell_pmsim_mode_parse(optarg);
			if (h.o.mode < 0) {
				fprintf(stderr, "chell_cachemeta_crash: bad mode '%s'\n", optarg);
				return 2;
			}
			break;
		case 'b':
			if (strcmp(optarg, "missing-undo") != 0) {
				fprintf(stderr, "chell_cachemeta_crash: bad --break '%s'\n", optarg);
				return 2;
			}
			h.o.brk = 1;
			break;
		case 'f': h.o.flush_points = 1; break;
		case 'c': h.o.collide = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct meta_geometry g = {NCN, NCH};
	h.len = (size_t)(meta_heap_size(&g) + 4096 * 3 + 257 * 64 + 65536 + 4095) / 4096 * 4096;
	h.work = aligned_alloc(4096, h.len);
	h.img = aligned_alloc(4096, h.len);
	h.heaps = malloc((h.o.ops + 1) * meta_heap_size(&g));
	if (!h.work || !h.img || !h.heaps)
		return 2;
	char msg[1024];
	/* Counting run. */
	if (run(&h, msg, sizeof(msg)) < 0) {
		printf("FAIL (live run): %s\n", msg);
		return 1;
	}
	uint64_t P = h.npoints;
	h.sel = calloc(P / 8 + 2, 1);
	if (!h.sel)
		return 2;
	for (uint64_t k = h.o.point ? h.o.point : 1; k <= P; k += h.o.point ? P + 1 : h.o.every)
		h.sel[k / 8] |= (uint8_t)(1u << (k % 8));
	h.checking = 1;
	memset(h.count, 0, sizeof(h.count));
	h.errors_expected = 0;
	if (run(&h, msg, sizeof(msg)) < 0) {
		printf("FAIL (live run): %s\n", msg);
		return 1;
	}
	if (h.npoints != P) {
		fprintf(stderr, "chell_cachemeta_crash: not deterministic (%" PRIu64 " then %" PRIu64 " points)\n", P,
			h.npoints);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("chell_cachemeta_crash: seed %" PRIu64 ", %" PRIu64 " operations (%" PRIu64 " refused as predicted)%s%s:",
	       h.o.seed, h.o.ops, h.errors_expected, h.o.collide ? " --collide" : "",
	       h.o.brk ? " --break missing-undo" : "");
	for (int k = 0; k < 11; k++)
		printf(" %s %" PRIu64, op_names[k], h.count[k]);
	printf("\nlongest hash cluster: I2C %u, C2F %u slots\n", h.longest_i2c, h.longest_c2f);
	printf("persist points: %" PRIu64 " (%s); crash points tested: %" PRIu64 "\n", P,
	       h.o.flush_points ? "drains and flushes" : "drains", h.tested);
	uint64_t images = 0, viol = 0;
	for (int m = 0; m < CHELL_PMSIM_MODES; m++) {
		if (h.o.mode >= 0 && m != h.o.mode)
			continue;
		printf("%-8s %8" PRIu64 " images %6" PRIu64 " violating\n", chell_pmsim_mode_name(m), h.images[m],
		       h.viol[m]);
		images += h.images[m];
		viol += h.viol[m];
	}
	printf("total: %" PRIu64 " crash images, %" PRIu64 " with violations; %" PRIu64
	       " recovered the in-flight operation, %" PRIu64 " took one more operation; %.1f s\n",
	       images, viol, h.as_next, h.continued,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(h.sel);
	free(h.work);
	free(h.img);
	free(h.heaps);
	return viol ? 1 : 0;
}
