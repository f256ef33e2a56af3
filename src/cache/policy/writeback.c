/* Write-back planning: dirty blocks of a file's chunks -> file-ordered,
 * merged extents (each a list of per-chunk segments, i.e. the iovecs of
 * one pwritev). Sorting by backing offset turns a cleaner's scattered
 * chunks into sequential writes for the disk or SSD underneath. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/policy/policy.h"

static int seg_cmp(const void *a, const void *b)
{
	const wb_seg *x = a, *y = b;

	return x->backing_off < y->backing_off ? -1 : x->backing_off > y->backing_off;
}

/* Append the runs of set bits of one chunk as segments. */
static uint32_t chunk_runs(const wb_chunk *c, wb_seg *out)
{
	uint32_t n = 0;
	unsigned b = 0;

	while (b < CP_CHUNK_BLOCKS) {
		unsigned e;

		if (!cp_bitmap_test(c->blocks, b)) {
			b++;
			continue;
		}
		for (e = b + 1; e < CP_CHUNK_BLOCKS && cp_bitmap_test(c->blocks, e); e++)
			;
		out[n++] = (wb_seg){ .chunk = c->chunk, .first_block = b, .nblocks = e - b,
				     .backing_off = c->backing_off + (uint64_t)b * CP_BLOCK_SIZE };
		b = e;
	}
	return n;
}

int wb_plan_build(const wb_chunk *in, size_t n, uint64_t max_extent_bytes, wb_plan *plan)
{
	uint64_t cap_blocks = max_extent_bytes / CP_BLOCK_SIZE;
	size_t total = 0, maxsegs;
	uint32_t ns = 0, ne = 0;
	wb_seg *segs, *split;
	wb_extent *ext;

	memset(plan, 0, sizeof(*plan));
	if (max_extent_bytes % CP_BLOCK_SIZE)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (in[i].backing_off % CP_BLOCK_SIZE || !in[i].blocks)
			return -EINVAL;
		total += cp_bitmap_count(in[i].blocks);
	}
	if (total == 0)
		return 0;
	if (total > UINT32_MAX / 2)
		return -EINVAL;
	/* Every segment and every extent holds at least one block, before
	 * and after splitting at the cap, so `total` bounds all three arrays. */
	maxsegs = total;
	segs = malloc(maxsegs * sizeof(*segs));
	split = malloc(maxsegs * sizeof(*split));
	ext = malloc(maxsegs * sizeof(*ext));
	if (!segs || !split || !ext) {
		free(segs);
		free(split);
		free(ext);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		ns += chunk_runs(&in[i], segs + ns);
	qsort(segs, ns, sizeof(*segs), seg_cmp);

	/* Walk in file order: overlap is an error, adjacency extends the
	 * current extent (across chunk boundaries too), the cap cuts it. */
	uint32_t out = 0;
	uint64_t ext_blocks = 0;

	for (uint32_t i = 0; i < ns; i++) {
		wb_seg s = segs[i];

		if (i && s.backing_off < segs[i - 1].backing_off + (uint64_t)segs[i - 1].nblocks * CP_BLOCK_SIZE) {
			free(segs);
			free(split);
			free(ext);
			return -EINVAL;
		}
		while (s.nblocks) {
			bool adjacent = ne && ext[ne - 1].backing_off + ext[ne - 1].len == s.backing_off;
			uint64_t room;
			uint32_t take;

			if (!adjacent || (cap_blocks && ext_blocks == cap_blocks)) {
				ext[ne++] = (wb_extent){ .backing_off = s.backing_off, .first_seg = out };
				ext_blocks = 0;
			}
			room = cap_blocks ? cap_blocks - ext_blocks : s.nblocks;
			take = s.nblocks < room ? s.nblocks : (uint32_t)room;
			split[out++] = (wb_seg){ .chunk = s.chunk, .first_block = s.first_block,
						 .nblocks = take, .backing_off = s.backing_off };
			ext[ne - 1].len += (uint64_t)take * CP_BLOCK_SIZE;
			ext[ne - 1].nsegs++;
			ext_blocks += take;
			s.first_block += take;
			s.nblocks -= take;
			s.backing_off += (uint64_t)take * CP_BLOCK_SIZE;
		}
	}
	free(segs);
	plan->segs = split;
	plan->nsegs = out;
	plan->ext = ext;
	plan->next = ne;
	return 0;
}

void wb_plan_free(wb_plan *plan)
{
	free(plan->segs);
	free(plan->ext);
	memset(plan, 0, sizeof(*plan));
}
