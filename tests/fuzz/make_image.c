/* SPDX-License-Identifier: MIT */
/*
 * chell_pool_image: write a region file in a known state, through the API.
 *
 *   chell_pool_image OUT [--journals N] [--entries N] [--size BYTES]
 *                        [--committed K] [--unfinished U] [--seed S]
 *
 * Creates OUT (replacing it), runs K committed transactions (pseudo-random
 * offsets and lengths from S), then opens U transactions on journals
 * 0..U-1, snapshots a range in each, overwrites it, and exits without
 * committing or closing - what a process killed mid-transaction leaves
 * behind. Prints one JSON object: the layout and, for each unfinished
 * transaction, the range with its contents before (what recovery must
 * restore) and after (what the crash left), in hex.
 *
 * Used by tests/fuzz/make_corpus.py (seed images) and
 * tests/system/test_pool.py (`chell pool check --repair`).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chell/pmem.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_pool_image OUT [--journals N] [--entries N] [--size BYTES]\n"
	"                        [--committed K] [--unfinished U] [--seed S]\n"
	"\n"
	"Writes a persistence-core region image to OUT (a fuzz seed) with K\n"
	"committed and U unfinished transactions.\n";

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "chell_pool_image: %s: %s\n", what, detail);
	exit(1);
}

static uint64_t next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void hex(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	struct chell_region_layout lay = {.journals = 2, .journal_entries = 32, .heap_size = 4096};
	unsigned long committed = 0, unfinished = 0;
	uint64_t seed = 1;
	const char *out = NULL;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--journals") && v)
			lay.journals = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--entries") && v)
			lay.journal_entries = (uint32_t)strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--size") && v)
			lay.heap_size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--committed") && v)
			committed = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--unfinished") && v)
			unfinished = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--seed") && v)
			seed = strtoull(argv[++i], NULL, 0) | 1;
		else if (argv[i][0] != '-' && !out)
			out = argv[i];
		else {
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!out)
		die("usage", "no output file");
	if (unfinished > lay.journals)
		die("--unfinished", "at most one unfinished transaction per journal");
	if (unfinished > lay.heap_size)
		die("--unfinished", "more unfinished transactions than heap bytes");

	int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die(out, strerror(errno));
	close(fd);
	char err[512] = "";
	struct chell_region *r;
	int rc = chell_region_create(out, &lay, &r, err, sizeof err);
	if (rc < 0)
		die("chell_region_create", err[0] ? err : strerror(-rc));
	uint64_t heap_size;
	uint8_t *heap = chell_region_heap(r, &heap_size);

	/* Ranges of up to 3 entries' worth of undo data, so one transaction
	 * always fits the smallest journals the corpus uses. */
	size_t max_len = heap_size < 100 ? (size_t)heap_size : 100;
	for (unsigned long t = 0; t < committed; t++) {
		struct chell_tx *tx;
		uint64_t off = next(&seed) % heap_size;
		size_t len = 1 + next(&seed) % max_len;
		if (len > heap_size - off)
			len = (size_t)(heap_size - off);
		unsigned j = (unsigned)(t % lay.journals);
		if ((rc = chell_tx_begin(r, j, &tx)) < 0 || (rc = chell_tx_add_range(tx, off, len)) < 0)
			die("committed transaction", strerror(-rc));
		memset(heap + off, (int)(next(&seed) & 0xff), len);
		if ((rc = chell_tx_commit(tx)) < 0)
			die("chell_tx_commit", strerror(-rc));
	}

	printf("{\"path\": \"%s\", \"journals\": %u, \"journal_entries\": %u, \"heap_size\": %llu,"
	       " \"unfinished\": [",
	       out, lay.journals, lay.journal_entries, (unsigned long long)heap_size);
	for (unsigned long j = 0; j < unfinished; j++) {
		/* Each in its own slice of the heap: overlapping unfinished
		 * ranges would make "before" depend on the rollback order. */
		struct chell_tx *tx;
		uint64_t slice = heap_size / unfinished, end = (j + 1) * slice;
		uint64_t off = j * slice + next(&seed) % slice;
		size_t len = 1 + next(&seed) % max_len;
		if (len > end - off)
			len = (size_t)(end - off);
		if ((rc = chell_tx_begin(r, (unsigned)j, &tx)) < 0 ||
		    (rc = chell_tx_add_range(tx, off, len)) < 0)
			die("unfinished transaction", strerror(-rc));
		printf("%s{\"journal\": %lu, \"offset\": %llu, \"length\": %zu, \"before\": \"",
		       j ? ", " : "", j, (unsigned long long)off, len);
		hex(heap + off, len);
		for (size_t i = 0; i < len; i++)
			heap[off + i] = (uint8_t)~heap[off + i];
		printf("\", \"after\": \"");
		hex(heap + off, len);
		printf("\"}");
	}
	printf("]}\n");
	fflush(stdout);
	if (unfinished)
		_exit(0); /* the "crash": the shared mapping keeps what was stored */
	chell_region_close(r);
	return 0;
}
