/* SPDX-License-Identifier: MIT */
/*
 * Journal records: their checksum and the scan that recovery, abort and
 * check share. A record counts only if its CRC, seeded with the region's
 * UUID, the journal, the header's index and the transaction's generation,
 * matches over the header and every data byte in the lines after it: a
 * torn record (header or any line), one left from an earlier transaction,
 * or one copied from another place ends the scan. Records of a transaction
 * are written in index order and every add_range drains before returning,
 * so the valid prefix is exactly what was acknowledged (plus perhaps the
 * record of an add_range that had not returned: its range was not
 * modifiable yet).
 */
#include "pmem_internal.h"

#include <string.h>

uint32_t pm_entry_crc(const uint8_t uuid[16], uint32_t journal, uint32_t index, uint64_t gen,
		      const struct pm_entry *e, const void *tail)
{
	uint8_t seed[32];

	memcpy(seed, uuid, 16);
	memcpy(seed + 16, &journal, 4);
	memcpy(seed + 20, &index, 4);
	memcpy(seed + 24, &gen, 8);
	uint32_t c = chell_crc32c(0, seed, sizeof(seed));
	c = chell_crc32c(c, (const uint8_t *)e + 4, sizeof(*e) - 4);
	return chell_crc32c(c, tail, (size_t)pm_rec_tail(e->len));
}

void pm_scan_journal(const struct pm_region_view *v, uint32_t j, uint64_t gen, struct pm_scan *s,
		     struct pm_diag *d)
{
	const struct pm_layout *l = v->lay;

	memset(s, 0, sizeof(*s));
	s->last = PM_NONE;
	for (uint32_t i = 0; i < l->entries;) {
		struct pm_entry e;

		memcpy(&e, pm_entry_at(v->base, l, j, i), sizeof(e));
		/* A header whose lines would leave the journal is not one we
		 * wrote (we never do), and its CRC cannot even be computed. */
		uint64_t lines = pm_rec_lines(e.len);
		if (lines >= (uint64_t)l->entries - i)
			return;
		const uint8_t *tail = lines ? pm_entry_at(v->base, l, j, i + 1) : NULL;
		if (pm_entry_crc(l->uuid, j, i, gen, &e, tail) != e.crc)
			return; /* end of the transaction's records (or torn) */
		int zero = e.zero8 == 0 && e.zero16 == 0;
		if (e.type == PM_E_FINISH && zero && e.len == 0 && e.off == i && e.prev == s->last) {
			s->finished = 1;
			return;
		}
		if (e.type == PM_E_UNDO && zero && e.len >= 1 && e.off <= l->heap_size &&
		    e.len <= l->heap_size - e.off && e.prev == s->last) {
			s->records++;
			s->last = i;
			i += 1 + (uint32_t)lines;
			s->undo = i;
			continue;
		}
		/* A checksummed record we did not write that way: damage the CRC
		 * did not catch, or a bug. Never apply it. */
		s->bad = 1;
		s->bad_index = i;
		pm_diag(d, "journal %u entry %u has a valid checksum but is inconsistent (type %u, %u bytes at heap offset %llu)",
			j, i, e.type, e.len, (unsigned long long)e.off);
		return;
	}
}
