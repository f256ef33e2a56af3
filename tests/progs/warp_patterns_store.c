/* SPDX-License-Identifier: MIT */
/*
 * warp_patterns_store PATTERNS FILE STATES SUCCESSORS [CTX,NEXTFILE,HINT]...
 *
 * Stores WARP patterns for FILE through the library's own calls
 * (warp_patterns_open, warp_patterns_store: src/handlers/warp/patterns.c),
 * as the warp handler does at a checkpoint; for tests/system/
 * test_warp_show.py. STATES is a comma-separated list of normal|mapped|
 * buffered (one per node), SUCCESSORS the same length of node numbers or
 * '-' for none; each further argument is a cross-file tuple (context as a
 * number, the next file's path, its hint node). Exit 0, or 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "brain.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: warp_patterns_store PATTERNS FILE STATES SUCCESSORS [CTX,NEXTFILE,HINT]...\n"
	"(a test program of Chell's suite; details: tests/progs/warp_patterns_store.c)\n";

#define MAXN 4096

static int file_id(const char *path, struct warp_file_id *id)
{
	struct stat st;
	if (stat(path, &st) < 0) {
		perror(path);
		return -1;
	}
	*id = (struct warp_file_id){(uint64_t)st.st_dev, (uint64_t)st.st_ino};
	return 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	static uint8_t states[MAXN];
	static uint32_t succ[MAXN];
	struct warp_xfile xf[WARP_XFILE_SLOTS] = {0};
	if (argc < 5) {
		fprintf(stderr, "usage: warp_patterns_store PATTERNS FILE STATES SUCCESSORS [CTX,NEXT,HINT]...\n");
		return 2;
	}
	struct warp_file_id id;
	if (file_id(argv[2], &id))
		return 1;
	uint32_t n = 0, m = 0;
	for (char *t = strtok(argv[3], ","); t && n < MAXN; t = strtok(NULL, ","), n++) {
		int s = -1;
		for (int k = 0; k < WARP_NSTATES; k++)
			if (strcmp(t, warp_state_name((enum warp_state)k)) == 0)
				s = k;
		if (s < 0) {
			fprintf(stderr, "unknown state %s\n", t);
			return 2;
		}
		states[n] = (uint8_t)s;
	}
	for (char *t = strtok(argv[4], ","); t && m < MAXN; t = strtok(NULL, ","), m++)
		succ[m] = strcmp(t, "-") == 0 ? WARP_NODE_NONE : (uint32_t)strtoul(t, NULL, 0);
	if (n != m) {
		fprintf(stderr, "%u states but %u successors\n", n, m);
		return 2;
	}
	for (int a = 5; a < argc && a - 5 < WARP_XFILE_SLOTS; a++) {
		char *ctx = strtok(argv[a], ","), *next = strtok(NULL, ","), *hint = strtok(NULL, ",");
		if (!ctx || !next || !hint)
			return 2;
		struct warp_file_id nid;
		if (file_id(next, &nid))
			return 1;
		warp_xfile_record(xf, strtoull(ctx, NULL, 0), nid, (uint32_t)strtoul(hint, NULL, 0));
	}
	struct warp_patterns *p;
	int rc = warp_patterns_open(argv[1], &p);
	if (rc) {
		fprintf(stderr, "warp_patterns_open %s: %s\n", argv[1], strerror(-rc));
		return 1;
	}
	rc = warp_patterns_store(p, id, n, states, succ, xf);
	warp_patterns_close(p);
	if (rc) {
		fprintf(stderr, "warp_patterns_store: %s\n", strerror(-rc));
		return 1;
	}
	return 0;
}
