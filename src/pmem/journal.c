/* SPDX-License-Identifier: MIT */
/*
 * Journal entries: their checksum and the scan that recovery, abort and
 * check share. An entry counts only if its CRC, seeded with the region's
 * UUID, the journal, the entry's index and the transaction's generation,
 * matches: a torn entry, one left from an earlier transaction, or one
 * copied from another slot ends the scan. Entries of a transaction are
 * written in index order and every add_range drains before returning, so
 * the valid prefix is exactly what was acknowledged (plus perhaps part of a
 * batch whose ranges the caller had not been allowed to modify yet).
 */
#include "pmem_internal.h"

#include <string.h>

uint32_t pm_entry_crc(const uint8_t uuid[16], uint32_t journal, uint32_t index, uint64_t gen,
		      const struct pm_entry *e)
{
	uint8_t seed[32];

	memcpy(seed, uuid, 16);
	memcpy(seed + 16, &journal, 4);
	memcpy(seed + 20, &index, 4);
	memcpy(seed + 24, &gen, 8);
	uint32_t c = chell_crc32c(0, seed, sizeof(seed));
	return chell_crc32c(c, (const uint8_t *)e + 4, sizeof(*e) - 4);
}

void pm_scan_journal(const struct pm_region_view *v, uint32_t j, uint64_t gen, struct pm_scan *s,
		     struct pm_diag *d)
{
	const struct pm_layout *l = v->lay;

	memset(s, 0, sizeof(*s));
	for (uint32_t i = 0; i < l->entries; i++) {
		struct pm_entry e;

		memcpy(&e, pm_entry_at(v->base, l, j, i), sizeof(e));
		if (pm_entry_crc(l->uuid, j, i, gen, &e) != e.crc)
			return; /* end of the transaction's entries (or torn) */
		if (e.type == PM_E_FINISH && e.len == 0 && e.pad == 0 && e.off == s->undo) {
			s->finished = 1;
			return;
		}
		if (e.type == PM_E_UNDO && e.len >= 1 && e.len <= PM_ENTRY_DATA && e.pad == 0 &&
		    e.off <= l->heap_size && e.len <= l->heap_size - e.off) {
			s->undo++;
			continue;
		}
		/* A checksummed entry we did not write that way: damage the CRC
		 * did not catch, or a bug. Never apply it. */
		s->bad = 1;
		s->bad_index = i;
		pm_diag(d, "journal %u entry %u has a valid checksum but is inconsistent (type %u, %u bytes at heap offset %llu)",
			j, i, e.type, e.len, (unsigned long long)e.off);
		return;
	}
}
