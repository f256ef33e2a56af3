/* SPDX-License-Identifier: MIT */
/*
 * Undo-logged transactions and their recovery. The protocol, with the
 * reason for every drain, is in docs/PERSISTENCE.md; in short:
 *
 *   add_range: (first time) slot := gen|active; undo entries; flush; DRAIN
 *              -- the caller may modify the range only after this.
 *   commit:    flush the modified ranges; DRAIN; finish record; DRAIN
 *              (the commit point); slot := gen+1, flushed, drained lazily.
 *   abort:     old contents back, flushed; DRAIN; slot := gen+1; DRAIN.
 *
 * Every store to the region goes through r->ops (the simulator's hook).
 */
#include "pmem_internal.h"

#include <errno.h>
#include <string.h>

#define BATCH 32 /* entries composed on the stack per memcpy_nodrain */

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
	/* The slot's generation is the one no entry in this journal carries
	 * yet: every ended transaction moved it on. */
	tx->gen = PM_SLOT_GEN(pm_slot_load(r->base, &r->lay, journal));
	tx->next = 0;
	tx->slot_set = 0;
	*out = tx;
	return 0;
}

static void tx_release(struct chell_tx *tx)
{
	atomic_store(&tx->in_use, 0);
}

int chell_tx_add_range(struct chell_tx *tx, uint64_t off, size_t len)
{
	if (!tx || !atomic_load(&tx->in_use))
		return -EINVAL;
	struct chell_region *r = tx->r;
	if (off > r->lay.heap_size || len > r->lay.heap_size - off)
		return -EINVAL;
	if (len == 0)
		return 0;
	uint64_t need = (len + PM_ENTRY_DATA - 1) / PM_ENTRY_DATA;
	/* One entry stays free for the finish record, so a full journal can
	 * always still commit what it holds. */
	if (need + 1 > (uint64_t)r->lay.entries - tx->next)
		return -ENOSPC;

	if (!tx->slot_set) {
		/* The slot naming this transaction's generation must reach media
		 * BEFORE any of its entries: the entries overwrite the previous
		 * transaction's, whose slot reset commit left undrained. If new
		 * entries could persist while the slot still named the previous
		 * generation, recovery would find a prefix of that committed
		 * transaction's undo log and no finish record, and roll it back
		 * (found by the crash simulator with a single journal). */
		slot_store(r, tx->journal, PM_SLOT(tx->gen, 1));
		r->ops.drain(r->ops.ctx);
		tx->slot_set = 1;
	}
	const uint8_t *heap = r->base + r->lay.heap_off;
	struct pm_entry batch[BATCH];
	uint32_t first = tx->next, n = 0;
	while (len) {
		struct pm_entry *e = &batch[n];
		size_t c = len < PM_ENTRY_DATA ? len : PM_ENTRY_DATA;
		memset(e, 0, sizeof(*e));
		e->type = PM_E_UNDO;
		e->len = (uint8_t)c;
		e->off = off;
		memcpy(e->data, heap + off, c);
		e->crc = pm_entry_crc(r->lay.uuid, tx->journal, first + n, tx->gen, e);
		off += c;
		len -= c;
		if (++n == BATCH || !len) {
			r->ops.memcpy_nodrain(r->ops.ctx, entry_ptr(r, tx->journal, first), batch, n * sizeof(*e));
			first += n;
			n = 0;
		}
	}
	/* The undo image is durable before add_range returns, hence before
	 * the caller's first store to the range. */
	r->ops.drain(r->ops.ctx);
	tx->next = first;
	return 0;
}

/* Read back entry i of journal j as we wrote it (bounds checked again:
 * the region memory is shared with the caller). */
static int undo_entry(struct chell_region *r, uint32_t j, uint32_t i, struct pm_entry *e)
{
	memcpy(e, entry_ptr(r, j, i), sizeof(*e));
	return e->type == PM_E_UNDO && e->len >= 1 && e->len <= PM_ENTRY_DATA && e->off <= r->lay.heap_size &&
	       e->len <= r->lay.heap_size - e->off;
}

/* Put back the old contents of entries [0, count) in reverse order (so
 * the oldest copy of a range recorded twice wins), flushed, not drained. */
static void apply_undo(struct chell_region *r, uint32_t j, uint32_t count)
{
	uint8_t *heap = r->base + r->lay.heap_off;

	for (uint32_t i = count; i-- > 0;) {
		struct pm_entry e;
		if (undo_entry(r, j, i, &e))
			r->ops.memcpy_nodrain(r->ops.ctx, heap + e.off, e.data, e.len);
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
	/* 1. The new data must be durable before the finish record says the
	 *    undo image is no longer needed. Adjacent entries are one range. */
	uint8_t *heap = r->base + r->lay.heap_off;
	uint64_t run_off = 0, run_len = 0;
	for (uint32_t i = 0; i < tx->next; i++) {
		struct pm_entry e;
		if (!undo_entry(r, j, i, &e))
			continue;
		if (run_len && e.off == run_off + run_len) {
			run_len += e.len;
			continue;
		}
		if (run_len)
			r->ops.flush(r->ops.ctx, heap + run_off, run_len);
		run_off = e.off;
		run_len = e.len;
	}
	if (run_len)
		r->ops.flush(r->ops.ctx, heap + run_off, run_len);
	r->ops.drain(r->ops.ctx);

	/* 2. The finish record: once it is on media the transaction is
	 *    committed and recovery leaves its ranges alone. */
	struct pm_entry f;
	memset(&f, 0, sizeof(f));
	f.type = PM_E_FINISH;
	f.off = tx->next;
	f.crc = pm_entry_crc(r->lay.uuid, j, tx->next, tx->gen, &f);
	r->ops.memcpy_nodrain(r->ops.ctx, entry_ptr(r, j, tx->next), &f, sizeof(f));
	r->ops.drain(r->ops.ctx);

	/* 3. Reset the journal: the next generation makes every entry stale.
	 *    No drain: if this store is lost, recovery finds the finish
	 *    record and only resets; the next add_range drains it anyway. */
	slot_store(r, j, PM_SLOT(tx->gen + 1, 0));
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
	apply_undo(r, tx->journal, tx->next);
	r->ops.drain(r->ops.ctx);
	/* Drained now: with no finish record, a still-active slot would let a
	 * later recovery "restore" over what the caller writes after abort. */
	slot_store(r, tx->journal, PM_SLOT(tx->gen + 1, 0));
	r->ops.drain(r->ops.ctx);
	tx_release(tx);
	return 0;
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
	for (uint32_t j = 0; j < r->lay.journals; j++) {
		uint64_t slot = pm_slot_load(r->base, &r->lay, j);
		if (!PM_SLOT_ACTIVE(slot))
			continue;
		uint64_t gen = PM_SLOT_GEN(slot);
		pm_scan_journal(&v, j, gen, &s, d);
		if (!s.finished && s.undo) {
			apply_undo(r, j, s.undo);
			/* The restored data before the reset that discards the
			 * undo image: a crash in between redoes the (idempotent)
			 * rollback. */
			r->ops.drain(r->ops.ctx);
			rolled++;
		}
		slot_store(r, j, PM_SLOT(gen + 1, 0));
	}
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
