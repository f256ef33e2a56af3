/* SPDX-License-Identifier: MIT */
/*
 * Verifying a cache pool's contents (cmd_cache_verify.c): the metadata
 * image (meta.pool) and each chunk file's control page (cache/layout.h)
 * against it. No file I/O here - the caller reads the files - so the same
 * code runs in `chell cache check` and in the fuzz target
 * (tests/fuzz/fuzz_cache_pool.c).
 *
 * Findings are reported one by one through a callback with the file, the
 * field and a sentence. "problem" means damage (check exits 1); a "note"
 * is a leftover a restart of chelld cleans up by design (an eviction that a
 * crash interrupted), reported but not counted as damage.
 */
#ifndef CHELL_CLI_CMD_CACHE_VERIFY_H
#define CHELL_CLI_CMD_CACHE_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/layout.h"
#include "chell/pmem.h"

struct meta;

typedef void (*cv_emit_fn)(void *ctx, bool problem, const char *file, const char *field,
			   const char *text);

struct cv {
	cv_emit_fn emit; /* may be NULL: just count */
	void *ctx;
	unsigned problems, notes;
	uint64_t chunk_files;  /* control pages checked */
	uint32_t cnodes, chunks_used, chunks; /* from the metadata, once open */
};

void cv_report(struct cv *v, bool problem, const char *file, const char *field, const char *fmt,
	       ...) __attribute__((format(printf, 5, 6)));

/* Open the cache metadata in img, a private writable copy of meta.pool
 * (opening rolls back unfinished transactions, in the copy only), and run
 * meta_check. The handle (meta_close it, then chell_region_close the
 * region in *region), or NULL with the problem reported. */
struct meta *cv_meta_open(struct cv *v, void *img, size_t len, const struct chell_persist_ops *ops,
			  struct chell_region **region);

/* One chunk file named `file` (for messages), whose name says `slot`, of
 * file_size bytes; ctl is its control page (NULL if the file is too short
 * to have one). */
void cv_chunk_file(struct cv *v, struct meta *m, const char *file, uint32_t slot,
		   uint64_t file_size, const struct cache_ctl *ctl);

/* Slot allocated in the metadata: has_file says whether chunks/<slot>
 * exists. An allocated slot without its file is a note (chelld treats the
 * slot as unused). */
void cv_slot(struct cv *v, struct meta *m, uint32_t slot, bool has_file);

#endif
