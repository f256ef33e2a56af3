/* SPDX-License-Identifier: MIT */
/*
 * The background cleaner: a timer in the server's loop (every
 * CHELLD_CLEAN_MS) counts the chunks with dirty blocks by scanning the
 * control pages; once they reach the high watermark (--dirty-high, percent
 * of the slots) it writes chunks back, oldest slot position first from a
 * rotating cursor, until they are at or below the low watermark
 * (--dirty-low). It runs in the server's thread, between requests, so it
 * needs no lock against the request handlers; each pass is bounded
 * (CLEAN_BATCH chunks) so clients are served between batches, and the next
 * tick continues. When the cleaner falls behind, evictions of dirty
 * victims clean synchronously (evict.c).
 *
 * policy.h has a thread-based cleaner for one big dirty table; the pool's
 * dirty tables are one per chunk file (a control page each), so the
 * manager scans them itself with the same watermark rule.
 */
#include "chelld/cache.h"

#define CLEAN_BATCH 16

uint32_t cache_dirty_slots(const struct cache *c)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map && dirty_chunk_flagged(c->slots[s].dt, 0))
			n++;
	return n;
}

static bool above(const struct cache *c, uint32_t dirty, unsigned pct)
{
	return (uint64_t)dirty * 100 > (uint64_t)pct * c->nslots;
}

uint32_t cache_drop_deleted(struct cache *c)
{
	uint32_t n = 0;
	for (uint32_t s = 0; s < c->nslots; s++) {
		struct cfile *f = c->slots[s].map ? c->files[c->slots[s].cnode] : NULL;
		if (f && cfile_deleted(c, f) && chunk_revoke(c, s, 0) == 0)
			n++;
	}
	return n;
}

void cleaner_tick(struct cache *c)
{
	/* Once a second: chunks of deleted files are garbage. */
	if (++c->ticks % 20 == 0) {
		uint32_t n = cache_drop_deleted(c);
		if (n)
			chelld_log("dropped %u chunk(s) of deleted files", n);
	}
	uint32_t dirty = cache_dirty_slots(c);
	if (!above(c, dirty, c->cfg->dirty_high) && !c->cleaning)
		return;
	if (!c->cleaning) {
		c->cleaning = true;
		c->st->cleaner_passes++;
	}
	for (unsigned done = 0; done < CLEAN_BATCH && above(c, dirty, c->cfg->dirty_low);) {
		uint32_t scanned = 0, s = c->clean_cursor;
		while (scanned < c->nslots &&
		       (!c->slots[s].map || c->slots[s].stuck || !dirty_chunk_flagged(c->slots[s].dt, 0))) {
			s = (s + 1) % c->nslots;
			scanned++;
		}
		if (scanned == c->nslots)
			break;
		c->clean_cursor = (s + 1) % c->nslots;
		struct cfile *f = cfile_get(c, c->slots[s].cnode);
		if (f && wb_slots(c, f, &s, 1, UINT64_MAX, NULL) < 0)
			c->slots[s].stuck = true; /* retried by a flush, not every tick */
		done++;
		dirty = cache_dirty_slots(c);
	}
	if (!above(c, dirty, c->cfg->dirty_low))
		c->cleaning = false;
}
