/* SPDX-License-Identifier: MIT */
/*
 * Undo-logged transactions and their recovery. The protocol, with the
 * reason for every drain, is in docs/PERSISTENCE.md; in short:
 *
 *   add_range: (first time) slot := gen|active; one undo record (header +
 *              raw lines of old data); DRAIN -- the caller may modify the
 *              range only after this.
 *   commit:    flush the modified ranges; DRAIN; slot := gen+1; DRAIN
 *              (the commit point).
 *   abort:     old contents back, flushed; DRAIN; slot := gen+1; DRAIN.
 *
 * Every store to the region goes through r->ops (the simulator's hook).
 */
#include "pmem_internal.h"

#include <errno.h>
#include <string.h>

/* Undo data after the header up to which a record is staged (16 lines):
 * longer tails stream their whole lines from the heap directly. */
#define PM_STAGE_TAIL (16u * PM_ENTRY)

static uint8_t *slot_ptr(struct chell_region *r, uint32_t j)
{
	return r->base + r->lay.master_off + PM_ENTRY + 8ull * j;
}

/* One aligned 8-byte store: x86 never tears it, so the slot is always
 * either the old or the new word, on media as in the cache. */
static void slot_store(struct chell_region *r, uint32_t j, uint64_t v)
{
	uint8_t *p = slot_ptr(r, j);

	__atomic_store_n((uint64_t *)p, v, __ATOMIC_RELEASE);
	r->ops.flush(r->ops.ctx, p, 8);
}

static uint8_t *entry_ptr(struct chell_region *r, uint32_t j, uint32_t i)
{
	return (uint8_t *)pm_entry_at(r->base, &r->lay, j, i);
}

int chell_tx_begin(struct chell_region *r, unsigned journal, struct chell_tx **out)
{
	if (!r || !out)
		return -EINVAL;
	*out = NULL;
	if (journal >= r->lay.journals)
		return -EINVAL;
	struct chell_tx *tx = &r->tx[journal];
	int idle = 0;
	if (!atomic_compare_exchange_strong(&tx->in_use, &idle, 1))
		return -EBUSY;
	/* The slot's generation is the one no record in this journal carries
	 * yet: every ended transaction moved it on. */
	tx->gen = PM_SLOT_GEN(pm_slot_load(r->base, &r->lay, journal));
	tx->next = 0;
	tx->last = PM_NONE;
	tx->slot_set = 0;
	tx->nranges = 0;
	tx->ranges_overflow = 0;
	*out = tx;
	return 0;
}

static void tx_release(struct chell_tx *tx)
{
	/* A release store, not a locked exchange: everything this
	 * transaction did is ordered before the next owner's CAS in begin,
	 * and a full barrier here would wait for the store buffer once more
	 * on every commit. */
	atomic_store_explicit(&tx->in_use, 0, memory_order_release);
}

/* Remember [off, off+len) for commit's flush, merged with the previous
 * range when they touch or overlap. */
static void note_range(struct chell_tx *tx, uint64_t off, uint64_t len)
{
	if (tx->nranges) {
		uint64_t lo = tx->ranges[tx->nranges - 1].off, hi = lo + tx->ranges[tx->nranges - 1].len;
		if (off <= hi && off + len >= lo) {
			uint64_t nlo = off < lo ? off : lo, nhi = off + len > hi ? off + len : hi;
			tx->ranges[tx->nranges - 1].off = nlo;
			tx->ranges[tx->nranges - 1].len = nhi - nlo;
			return;
		}
	}
	if (tx->nranges == sizeof(tx->ranges) / sizeof(tx->ranges[0])) {
		tx->ranges_overflow = 1;
		return;
	}
	tx->ranges[tx->nranges].off = off;
	tx->ranges[tx->nranges].len = len;
	tx->nranges++;
}

/* Write the undo record of [off, off+len); drained before returning when
 * `drain`, else by the caller's chell_tx_fence before it stores. */
static int add_range(struct chell_tx *tx, uint64_t off, size_t len, int drain)
{
	if (!tx || !atomic_load(&tx->in_use))
		return -EINVAL;
	struct chell_region *r = tx->r;
	if (off > r->lay.heap_size || len > r->lay.heap_size - off)
		return -EINVAL;
	if (len == 0)
		return 0;
	/* One record: its header and the lines after it. One entry stays free
	 * for the finish record, so a full journal can always still commit
	 * what it holds. */
	uint64_t need = 1 + pm_rec_lines(len);
	if (need + 1 > (uint64_t)r->lay.entries - tx->next)
		return -ENOSPC;

	if (!tx->slot_set) {
		/* No drain of its own: fence 1 below makes the slot durable with
		 * the record, before the caller may modify anything. Overwriting
		 * the previous transaction's records before then is safe because
		 * every transaction ended (commit, abort, recovery) with its slot
		 * reset drained, so the slot on media never names a generation
		 * whose records these stores can tear. (Until commit drained its
		 * reset, the crash simulator found single-journal crashes that
		 * rolled back the previous, committed transaction.) */
		slot_store(r, tx->journal, PM_SLOT(tx->gen, 1));
		tx->slot_set = 1;
	}
	const uint8_t *old = r->base + r->lay.heap_off + off;
	struct pm_entry h;
	memset(&h, 0, sizeof(h));
	h.type = PM_E_UNDO;
	h.off = off;
	h.len = (uint32_t)len; /* need < 2^24 lines: len < 2^31 */
	h.prev = tx->last;
	memcpy(h.data, old, len < PM_INLINE ? len : PM_INLINE);
	h.crc = pm_entry_crc(r->lay.uuid, tx->journal, tx->next, tx->gen, &h, len > PM_INLINE ? old + PM_INLINE : NULL);
	uint8_t *dst = entry_ptr(r, tx->journal, tx->next);
	if (len > PM_INLINE && len - PM_INLINE <= PM_STAGE_TAIL) {
		/* A short record goes out as whole lines from one staging
		 * buffer (what pads the last line is never read): whole
		 * aligned lines are streamed, cheaper to persist than stores
		 * and flushes. */
		_Alignas(64) uint8_t stage[PM_ENTRY + PM_STAGE_TAIL];
		uint64_t lines = pm_rec_lines(len);
		memcpy(stage, &h, sizeof(h));
		memcpy(stage + PM_ENTRY, old + PM_INLINE, len - PM_INLINE);
		memset(stage + PM_ENTRY + (len - PM_INLINE), 0, lines * PM_ENTRY - (len - PM_INLINE));
		r->ops.memcpy_nodrain(r->ops.ctx, dst, stage, (1 + lines) * PM_ENTRY);
	} else {
		r->ops.memcpy_nodrain(r->ops.ctx, dst, &h, sizeof(h));
		if (len > PM_INLINE) /* the rest straight from the heap, no staging copy */
			r->ops.memcpy_nodrain(r->ops.ctx, dst + PM_ENTRY, old + PM_INLINE, len - PM_INLINE);
	}
	/* The undo image is durable before add_range returns (or before
	 * chell_tx_fence does), hence before the caller's first store to the
	 * range. */
	if (drain)
		r->ops.drain(r->ops.ctx);
	tx->last = tx->next;
	tx->next += (uint32_t)need;
	note_range(tx, off, len);
	return 0;
}

int chell_tx_add_range(struct chell_tx *tx, uint64_t off, size_t len)
{
	return add_range(tx, off, len, 1);
}

int chell_tx_add_range_nodrain(struct chell_tx *tx, uint64_t off, size_t len)
{
	return add_range(tx, off, len, 0);
}

void chell_tx_fence(struct chell_tx *tx)
{
	if (tx && atomic_load(&tx->in_use))
		tx->r->ops.drain(tx->r->ops.ctx);
}

/* Read back the undo record whose header is at index i of journal j as we
 * wrote it (bounds checked again: the region memory is shared with the
 * caller, and recovery follows prev links). */
static int undo_record(struct chell_region *r, uint32_t j, uint32_t i, struct pm_entry *e)
{
	if (i >= r->lay.entries)
		return 0;
	memcpy(e, entry_ptr(r, j, i), sizeof(*e));
	return e->type == PM_E_UNDO && e->len >= 1 && e->off <= r->lay.heap_size &&
	       e->len <= r->lay.heap_size - e->off && pm_rec_lines(e->len) < (uint64_t)r->lay.entries - i &&
	       (e->prev == PM_NONE || e->prev < i);
}

/* Put back the old contents of the records from the one at `last` back
 * along the prev links (reverse order, so the oldest copy of a range
 * recorded twice wins), flushed, not drained. */
static void apply_undo(struct chell_region *r, uint32_t j, uint32_t last)
{
	uint8_t *heap = r->base + r->lay.heap_off;
	struct pm_entry e;

	for (uint32_t i = last; i != PM_NONE && undo_record(r, j, i, &e); i = e.prev) {
		r->ops.memcpy_nodrain(r->ops.ctx, heap + e.off, e.data, e.len < PM_INLINE ? e.len : PM_INLINE);
		if (e.len > PM_INLINE)
			r->ops.memcpy_nodrain(r->ops.ctx, heap + e.off + PM_INLINE, entry_ptr(r, j, i + 1),
					      e.len - PM_INLINE);
	}
}

int chell_tx_commit(struct chell_tx *tx)
{
	if (!tx || !atomic_load(&tx->in_use))
		return -EINVAL;
	struct chell_region *r = tx->r;
	uint32_t j = tx->journal;

	if (tx->next == 0) { /* nothing recorded, nothing on media to end */
		tx_release(tx);
		return 0;
	}
	/* 1. The new data must be durable before the slot reset says the
	 *    undo image is no longer needed. */
	uint8_t *heap = r->base + r->lay.heap_off;
	if (!tx->ranges_overflow) {
		for (uint32_t k = 0; k < tx->nranges; k++)
			r->ops.flush(r->ops.ctx, heap + tx->ranges[k].off, tx->ranges[k].len);
	} else {
		struct pm_entry e;
		for (uint32_t i = tx->last; i != PM_NONE && undo_record(r, j, i, &e); i = e.prev)
			r->ops.flush(r->ops.ctx, heap + e.off, e.len);
	}
	r->ops.drain(r->ops.ctx);

	/* 2. The commit point: the slot reset to the next generation, which
	 *    makes every record of this journal stale, drained. No finish
	 *    record is written: on media the reset alone already means
	 *    committed (an inactive slot is not scanned), and without it
	 *    recovery rolls back a transaction whose commit had not returned,
	 *    which is allowed. A finish record cost a second line in this
	 *    fence for nothing; recovery still honours one (images written
	 *    before). The drain also leaves the slot on media equal to the
	 *    one in memory, so the next transaction may overwrite these
	 *    records without draining its slot first. */
	slot_store(r, j, PM_SLOT(tx->gen + 1, 0));
	r->ops.drain(r->ops.ctx);
	tx_release(tx);
	return 0;
}

int chell_tx_abort(struct chell_tx *tx)
{
	if (!tx || !atomic_load(&tx->in_use))
		return -EINVAL;
	struct chell_region *r = tx->r;

	if (tx->next == 0) {
		tx_release(tx);
		return 0;
	}
	apply_undo(r, tx->journal, tx->last);
	r->ops.drain(r->ops.ctx);
	/* Drained now: with no finish record, a still-active slot would let a
	 * later recovery "restore" over what the caller writes after abort. */
	slot_store(r, tx->journal, PM_SLOT(tx->gen + 1, 0));
	r->ops.drain(r->ops.ctx);
	tx_release(tx);
	return 0;
}

/* Roll back journal j if its slot is active without a finish record, then
 * reset the slot (not drained: the caller drains). */
static int recover_one(struct chell_region *r, uint32_t j, struct pm_diag *d)
{
	struct pm_region_view v = {r->base, &r->lay};
	struct pm_scan s;
	uint64_t slot = pm_slot_load(r->base, &r->lay, j);
	int rolled = 0;

	if (!PM_SLOT_ACTIVE(slot))
		return 0;
	uint64_t gen = PM_SLOT_GEN(slot);
	pm_scan_journal(&v, j, gen, &s, d);
	if (!s.finished && s.undo) {
		apply_undo(r, j, s.last);
		/* The restored data before the reset that discards the undo
		 * image: a crash in between redoes the (idempotent) rollback. */
		r->ops.drain(r->ops.ctx);
		rolled = 1;
	}
	slot_store(r, j, PM_SLOT(gen + 1, 0));
	return rolled;
}

int chell_journal_recover(struct chell_region *r, unsigned journal)
{
	struct pm_region_view v;
	struct pm_scan s;
	struct pm_diag d;

	if (!r || journal >= r->lay.journals)
		return -EINVAL;
	if (atomic_load(&r->tx[journal].in_use))
		return -EBUSY;
	v = (struct pm_region_view){r->base, &r->lay};
	pm_diag_init(&d, NULL, 0, 0);
	uint64_t slot = pm_slot_load(r->base, &r->lay, journal);
	if (!PM_SLOT_ACTIVE(slot))
		return 0;
	pm_scan_journal(&v, journal, PM_SLOT_GEN(slot), &s, &d);
	if (s.bad)
		return -EUCLEAN;
	int rolled = recover_one(r, journal, &d);
	r->ops.drain(r->ops.ctx);
	return rolled;
}

int pm_recover(struct chell_region *r, struct pm_diag *d)
{
	struct pm_region_view v = {r->base, &r->lay};
	struct pm_scan s;
	int rolled = 0, rc = 0;

	/* Scan everything first: a journal we must not trust refuses the
	 * region before any byte of it has changed. */
	for (uint32_t j = 0; j < r->lay.journals; j++) {
		uint64_t slot = pm_slot_load(r->base, &r->lay, j);
		if (!PM_SLOT_ACTIVE(slot))
			continue;
		pm_scan_journal(&v, j, PM_SLOT_GEN(slot), &s, d);
		if (s.bad)
			rc = -EUCLEAN;
	}
	if (rc)
		return rc;
	for (uint32_t j = 0; j < r->lay.journals; j++)
		rolled += recover_one(r, j, d);
	r->ops.drain(r->ops.ctx);
	return rolled;
}

int chell_region_recover(struct chell_region *r, char *err, size_t errlen)
{
	struct pm_diag d;

	pm_diag_init(&d, err, errlen, 0);
	if (!r)
		return -EINVAL;
	for (uint32_t j = 0; j < r->lay.journals; j++)
		if (atomic_load(&r->tx[j].in_use)) {
			pm_diag(&d, "journal %u has an open transaction", j);
			return -EBUSY;
		}
	return pm_recover(r, &d);
}
