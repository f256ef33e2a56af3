/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: arbitrary bytes as a WARP patterns file (a Chell region
 * whose heap holds the patterns: src/handlers/warp/patterns_internal.h),
 * through the code a process runs at open (warp_patterns_open_mem: region
 * validation and recovery on a copy, then the patterns checks) and at
 * store (pat_store_region).
 *
 * Each input runs twice: as given, and with its checksums made right (the
 * root's CRC and each entry's, when the region itself opens), so mutated
 * fields get past the CRCs into the field checks, the loads and the
 * stores.
 *
 * Oracles, beyond "no crash, no sanitizer report, no flush outside the
 * image":
 *   - a refused file has a sentence naming the field;
 *   - what a load returns is in range: at most the nodes asked for, states
 *     that are states, successors inside the file or none;
 *   - a heap that passes the checks stays valid through stores chosen by
 *     the input (any file identity, node count, states and successors,
 *     including out-of-range ones the store must sanitise), and each
 *     stored file loads back as stored.
 *
 * Built two ways, like fuzz_region_open: with libFuzzer by scripts/fuzz.sh
 * --target warp_patterns, and with regress_main.c over the committed
 * corpus by ctest (fuzz_warp_patterns_corpus). Seeds: chell_warp_patterns_seeds
 * (make_warp_patterns.c).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chell/pmem.h"
#include "fuzz_bounds.h"
#include "patterns_internal.h"
#include "pmem/pmem_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_IMAGE (1u << 20)
#define MAX_STORES 6

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_warp_patterns: %s: %s\n", what, detail);
	abort();
}

/* Every load of every stored file is in range. */
static void check_load(void *arg, const struct pat_entry *e)
{
	struct warp_patterns *p = arg;
	static uint8_t st[PAT_NODES + 8];
	static uint32_t su[PAT_NODES + 8];
	struct warp_xfile xf[WARP_XFILE_SLOTS];
	struct warp_file_id id = {e->dev, e->ino};
	for (uint32_t ask = 1; ask <= PAT_NODES + 8; ask = ask * 3 + 1) {
		uint32_t k = warp_patterns_load(p, id, ask, st, su, xf);
		if (k > ask || k > PAT_NODES)
			fail("load", "more nodes than asked for or stored");
		for (uint32_t j = 0; j < k; j++)
			if (st[j] >= WARP_NSTATES || (su[j] != WARP_NODE_NONE && su[j] >= ask))
				fail("load", "a state or successor out of range");
	}
}

static void exercise(const uint8_t *img, size_t len)
{
	struct warp_patterns *p;
	char err[512] = "";
	int rc = warp_patterns_open_mem(img, len, &p, err, sizeof err);
	if (rc == 0) {
		warp_patterns_each(p, check_load, p);
		warp_patterns_close(p);
	} else if (rc == -EUCLEAN && !err[0]) {
		fail("open", "a file refused without a sentence");
	}
}

/* Make the patterns checksums right (the root's, then each entry's when
 * its node count is in range). */
static void fix_crcs(uint8_t *heap, uint64_t size)
{
	if (size < PAT_ROOT_SIZE)
		return;
	struct pat_root *r = (struct pat_root *)heap;
	r->crc = chell_crc32c(0, r, 24);
	char err[256];
	if (pat_validate_root(heap, size, err, sizeof err))
		return;
	for (uint32_t i = 0; i < r->entries; i++) {
		struct pat_entry *e = (struct pat_entry *)pat_entry_at(heap, i);
		if (!e->ino || e->n > PAT_NODES)
			continue;
		struct pat_entry h = *e;
		h.crc = 0;
		uint32_t c = chell_crc32c(0, &h, sizeof h);
		c = chell_crc32c(c, pat_states(e), e->n);
		e->crc = chell_crc32c(c, pat_succ(e), 4u * e->n);
	}
}

/* Stores chosen by the input's bytes on a valid heap: it stays valid and
 * each file reads back as the store sanitised it. */
static void stores(struct chell_region *r, const uint8_t *data, size_t size)
{
	static uint8_t st[PAT_NODES + 8], got_st[PAT_NODES + 8];
	static uint32_t su[PAT_NODES + 8], got_su[PAT_NODES + 8];
	uint64_t hs;
	uint8_t *heap = chell_region_heap(r, &hs);
	char err[512];
	uint64_t x = 0x9e3779b97f4a7c15ULL ^ size;
	for (size_t i = 0; i < size && i < 64; i++)
		x = (x ^ data[i]) * 0x100000001b3ULL;
	for (int k = 0; k < MAX_STORES; k++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		struct warp_file_id id = {x & 3, 1 + ((x >> 2) & 15)};
		uint32_t n = 1 + (uint32_t)((x >> 8) % (PAT_NODES + 6));
		for (uint32_t j = 0; j < n; j++) {
			uint64_t y = x + j * 0x9e3779b97f4a7c15ULL;
			st[j] = (uint8_t)(y >> 17) % 5;
			su[j] = (uint32_t)((y >> 23) % (n + 3));
		}
		struct warp_xfile xf[WARP_XFILE_SLOTS] = {{.ctx = x | 1, .next = {1, (x >> 40) & 7}, .hint_node = 3}};
		int rc = pat_store_region(r, id, n, st, su, xf);
		if (rc < 0) {
			if (rc == -ENOSPC || rc == -EBUSY)
				continue; /* a journal too small: the transaction must have left nothing */
			snprintf(err, sizeof err, "store failed: %d", rc);
			fail("store", err);
		}
		if (pat_validate(heap, hs, err, sizeof err))
			fail("a store broke a valid heap", err);
		const struct pat_entry *e = pat_find(heap, id);
		if (!e)
			fail("store", "the stored file is not found");
		uint32_t m = n < PAT_NODES ? n : PAT_NODES;
		if (e->n != m)
			fail("store", "node count differs");
		memcpy(got_st, pat_states(e), m);
		memcpy(got_su, pat_succ(e), 4u * m);
		for (uint32_t j = 0; j < m; j++)
			if (got_st[j] != (st[j] < WARP_NSTATES ? st[j] : WARP_NORMAL) ||
			    got_su[j] != (su[j] < m ? su[j] : WARP_NODE_NONE))
				fail("store", "a node reads back differently");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_IMAGE || size == 0)
		return 0;
	exercise(data, size);

	size_t cap = (size + 63) & ~(size_t)63;
	uint8_t *img = aligned_alloc(64, cap);
	if (!img)
		return 0;
	memcpy(img, data, size);
	struct fuzz_bounds b = {img, img + size, "fuzz_warp_patterns"};
	const struct chell_persist_ops ops = fuzz_bounded_ops(&b);
	struct chell_region *r;
	char err[512];
	if (chell_region_open_mem(img, size, &ops, &r, err, sizeof err) == 0) {
		uint64_t hs;
		uint8_t *heap = chell_region_heap(r, &hs);
		fix_crcs(heap, hs);
		int rc = pat_validate(heap, hs, err, sizeof err);
		if (rc == -EUCLEAN && !err[0])
			fail("validate", "refused without a sentence");
		if (rc == 0)
			stores(r, data, size);
		chell_region_close(r);
		exercise(img, size);
	}
	free(img);
	return 0;
}
