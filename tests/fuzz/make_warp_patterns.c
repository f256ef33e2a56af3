/* SPDX-License-Identifier: MIT */
/*
 * chell_warp_patterns_seeds DIR: writes the seed corpus of
 * fuzz_warp_patterns - small patterns files (4 or 16 entries) that are
 * empty, filled, holding an unfinished transaction, and damaged in each
 * field the checks look at (with the checksums made right where the point
 * is the field behind them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "patterns_internal.h"
#include "pmem/pmem_internal.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_warp_patterns_seeds DIR\n"
	"\n"
	"Writes the seed corpus of the WARP patterns-file fuzz target into DIR.\n";

static void nop_flush(void *c, const void *a, size_t n) {}
static void nop_drain(void *c) {}
static void *cp(void *c, void *d, const void *s, size_t n)
{
	return memcpy(d, s, n);
}
static const struct chell_persist_ops plain = {nop_flush, nop_drain, cp, NULL};

struct image {
	uint8_t *base;
	size_t len;
	struct chell_region *r;
	uint8_t *heap;
	uint64_t heap_size;
};

static void make(struct image *im, uint32_t entries)
{
	char err[256];
	struct chell_region_layout lay = pat_layout(entries);
	im->len = 1u << 20;
	im->base = aligned_alloc(64, im->len);
	memset(im->base, 0, im->len);
	if (chell_region_format_mem(im->base, im->len, &lay, &plain, err, sizeof err) ||
	    chell_region_open_mem(im->base, im->len, &plain, &im->r, err, sizeof err) || pat_format(im->r, entries)) {
		fprintf(stderr, "make_warp_patterns: %s\n", err);
		exit(1);
	}
	im->heap = chell_region_heap(im->r, &im->heap_size);
	/* the image ends where the heap does */
	im->len = (size_t)(im->heap + im->heap_size - im->base);
}

static void fill(struct image *im, unsigned files)
{
	static uint8_t st[PAT_NODES];
	static uint32_t su[PAT_NODES];
	for (unsigned f = 0; f < files; f++) {
		uint32_t n = f == 0 ? PAT_NODES : 1 + f * 3;
		for (uint32_t j = 0; j < n; j++) {
			st[j] = (uint8_t)((j + f) % WARP_NSTATES);
			su[j] = j + 1 < n ? j + 1 : WARP_NODE_NONE;
		}
		struct warp_xfile xf[WARP_XFILE_SLOTS] = {
			{.ctx = 0x1234 + f, .next = {8, 100 + f + 1}, .hint_node = 0},
			{.ctx = 0x9999, .next = {8, 100}, .hint_node = 2, .age = 3}};
		if (pat_store_region(im->r, (struct warp_file_id){8, 100 + f}, n, st, su, xf) < 0) {
			fprintf(stderr, "make_warp_patterns: store failed\n");
			exit(1);
		}
	}
}

static void fix_entry_crc(struct pat_entry *e)
{
	struct pat_entry h = *e;
	h.crc = 0;
	uint32_t c = chell_crc32c(0, &h, sizeof h);
	c = chell_crc32c(c, pat_states(e), e->n);
	e->crc = chell_crc32c(c, pat_succ(e), 4u * e->n);
}

static void fix_root_crc(uint8_t *heap)
{
	struct pat_root *r = (struct pat_root *)heap;
	r->crc = chell_crc32c(0, r, 24);
}

static const char *dir;

static void save(const struct image *im, const char *name)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(im->base, 1, im->len, f) != im->len || fclose(f)) {
		fprintf(stderr, "make_warp_patterns: %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static struct pat_entry *entry(struct image *im, uint32_t i)
{
	return (struct pat_entry *)pat_entry_at(im->heap, i);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	dir = argv[1];
	mkdir(dir, 0755);
	struct image im;

	make(&im, 4);
	save(&im, "empty-4");
	fill(&im, 3);
	save(&im, "filled-4");
	fill(&im, 6); /* more files than entries: replacement */
	save(&im, "replaced-4");

	/* an unfinished transaction: recovery rolls the entry back */
	struct chell_tx *tx;
	if (chell_tx_begin(im.r, 0, &tx) == 0) {
		uint64_t off = (uint64_t)((uint8_t *)entry(&im, 1) - im.heap);
		chell_tx_add_range(tx, off, PAT_ENTRY_SIZE);
		memset(entry(&im, 1), 0x5a, 200);
		save(&im, "unfinished-tx");
		chell_tx_abort(tx);
	}

	struct image d;
	make(&d, 4);
	fill(&d, 3);
	uint8_t *keep = malloc(d.len);
	memcpy(keep, d.base, d.len);
#define VARIANT(name, code)                      \
	do {                                     \
		memcpy(d.base, keep, d.len);     \
		code;                            \
		save(&d, name);                  \
	} while (0)
	struct pat_root *root = (struct pat_root *)d.heap;
	VARIANT("bad-root-magic", root->magic ^= 1);
	VARIANT("bad-root-crc", root->entries ^= 2);
	VARIANT("bad-root-version", (root->version = 9, fix_root_crc(d.heap)));
	VARIANT("bad-root-entries", (root->entries = 5000, fix_root_crc(d.heap)));
	VARIANT("bad-entry-crc", ((uint8_t *)pat_succ(entry(&d, 0)))[5] ^= 1);
	VARIANT("bad-entry-n", (entry(&d, 1)->n = PAT_NODES + 1, fix_entry_crc(entry(&d, 1))));
	VARIANT("bad-entry-state", (((uint8_t *)pat_states(entry(&d, 1)))[0] = 7, fix_entry_crc(entry(&d, 1))));
	VARIANT("bad-entry-succ", (((uint32_t *)pat_succ(entry(&d, 2)))[0] = 999, fix_entry_crc(entry(&d, 2))));
	VARIANT("bad-entry-stamp", (entry(&d, 2)->stamp = 1000, fix_entry_crc(entry(&d, 2))));
	VARIANT("bad-entry-xf", (entry(&d, 0)->xf[0].ino = 0, fix_entry_crc(entry(&d, 0))));
	VARIANT("bad-entry-duplicate", (entry(&d, 2)->ino = entry(&d, 0)->ino, fix_entry_crc(entry(&d, 2))));
	VARIANT("foreign-text", (memset(d.base, 'x', 64)));
	chell_region_close(im.r);
	chell_region_close(d.r);
	free(im.base);
	free(d.base);
	free(keep);
	return 0;
}
