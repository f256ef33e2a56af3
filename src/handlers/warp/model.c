/* SPDX-License-Identifier: MIT */
/*
 * WARP's benefit model (warp.md §IV-B) and its hysteresis (§IV-D).
 *
 * T = N_r*L_r + S_r/B_r + N_w*L_w + S_w/B_w per state, where each state's
 * latency includes the locating cost that state pays on this machine
 * (calib.c) and the per-byte cost is 1 / bandwidth:
 *
 *   normal    a system call per access, then the tier's latency; bytes at
 *             the tier's bandwidth (the kernel copies them to or from the
 *             file on the tier).
 *   mapped    reads: a TLB miss on the populated mapping instead of a
 *             system call. Writes still take the kernel path, and the next
 *             read of the page faults the mapping again: the system call
 *             plus a fault per write (the paper's "enlarged" write locating).
 *   buffered  writes: a buffer lookup and a DRAM store per access; each byte
 *             is copied into DRAM and later written back to the tier, so its
 *             cost is both (the write-back is part of T, as the paper has
 *             it), except that a checkpoint writes a block back once
 *             however often it was written: at most the node's bytes
 *             (wb_cap) pay the write-back per checkpoint interval. Reads look the block up and then copy from the buffer or,
 *             for a block it does not hold, from the mapping of the tier:
 *             the mapped read plus a lookup, never cheaper than mapped.
 *
 * Pure functions of plain data: the unit tests compute them by hand.
 */
#include "brain.h"

const char *warp_state_name(enum warp_state s)
{
	switch (s) {
	case WARP_NORMAL: return "normal";
	case WARP_MAPPED: return "mapped";
	case WARP_BUFFERED: return "buffered";
	default: return "?";
	}
}

/* ns per byte at `gbps` GB/s (1e9 bytes/s); a missing figure costs nothing
 * rather than dividing by zero. */
static double per_byte(double gbps)
{
	return gbps > 0 ? 1.0 / gbps : 0.0;
}

void warp_costs_from(struct warp_costs *c, const struct warp_tier_figures *t, const struct warp_locate *l)
{
	double tr = per_byte(t->read_gbps), tw = per_byte(t->write_gbps), dram = per_byte(l->dram_gbps);

	c->lat_r[WARP_NORMAL] = l->syscall_ns + t->read_ns;
	c->byte_r[WARP_NORMAL] = tr;
	c->lat_w[WARP_NORMAL] = l->syscall_ns + t->write_ns;
	c->byte_w[WARP_NORMAL] = tw;

	c->lat_r[WARP_MAPPED] = l->tlb_ns + t->read_ns;
	c->byte_r[WARP_MAPPED] = tr;
	c->lat_w[WARP_MAPPED] = l->syscall_ns + l->fault_ns + t->write_ns;
	c->byte_w[WARP_MAPPED] = tw;

	c->lat_r[WARP_BUFFERED] = l->lookup_ns + l->tlb_ns + t->read_ns;
	c->byte_r[WARP_BUFFERED] = tr;
	c->lat_w[WARP_BUFFERED] = l->lookup_ns;
	c->byte_w[WARP_BUFFERED] = dram + tw;
	c->wb_byte = tw;
	c->wb_cap = 0;
}

void warp_costs_init(struct warp_costs *c, const struct warp_tier_figures *t)
{
	warp_costs_from(c, t, warp_calibrate());
}

double warp_model_time(const struct warp_costs *c, enum warp_state s, const struct warp_node_stats *st)
{
	if ((unsigned)s >= WARP_NSTATES)
		s = WARP_NORMAL;
	double t = (double)st->nr * c->lat_r[s] + (double)st->sr * c->byte_r[s] +
		   (double)st->nw * c->lat_w[s] + (double)st->sw * c->byte_w[s];
	if (s == WARP_BUFFERED && c->wb_cap > 0 && (double)st->sw > c->wb_cap)
		t -= ((double)st->sw - c->wb_cap) * c->wb_byte; /* overwrites absorbed */
	return t;
}

enum warp_state warp_model_decide(const struct warp_costs *c, const struct warp_policy *p,
				  enum warp_state cur, struct warp_hyst *h,
				  const struct warp_node_stats *st)
{
	if ((unsigned)cur >= WARP_NSTATES)
		cur = WARP_NORMAL;
	/* Idle since the last checkpoint: nothing to judge by. The streak
	 * resets, so "consecutive" means consecutive checkpoints with
	 * accesses that all favoured the same state. */
	if (st->nr == 0 && st->nw == 0) {
		h->candidate = (uint8_t)cur;
		h->streak = 0;
		return cur;
	}
	double t[WARP_NSTATES];
	enum warp_state best = cur;
	for (int s = 0; s < WARP_NSTATES; s++) {
		t[s] = warp_model_time(c, (enum warp_state)s, st);
		if (t[s] < t[best])
			best = (enum warp_state)s;
	}
	/* Another state wins only by more than delta of the current T. */
	if (best == cur || !(t[best] < (1.0 - p->delta) * t[cur])) {
		h->candidate = (uint8_t)cur;
		h->streak = 0;
		return cur;
	}
	if (h->candidate != (uint8_t)best) {
		h->candidate = (uint8_t)best;
		h->streak = 0;
	}
	if (h->streak < UINT8_MAX)
		h->streak++;
	/* the streak saturates at 255: a longer period is 255 checkpoints */
	unsigned need = p->confirm == 0 ? 1 : p->confirm > UINT8_MAX ? UINT8_MAX : p->confirm;
	if (h->streak < need)
		return cur;
	h->candidate = (uint8_t)best;
	h->streak = 0;
	return best;
}
