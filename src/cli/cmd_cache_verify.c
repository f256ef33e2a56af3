/* SPDX-License-Identifier: MIT */
/*
 * Verifying a cache pool: the metadata (meta_open + meta_check) and chunk
 * control pages against it. See cmd_cache_verify.h. Everything read here
 * comes from files that may be damaged or hostile: every field is checked
 * before it is used as an index, and nothing here writes to the images
 * except the metadata's own recovery, on the caller's private copy.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cache/meta/meta.h"
#include "cache/policy/policy.h"
#include "cmd_cache_verify.h"

void cv_report(struct cv *v, bool problem, const char *file, const char *field, const char *fmt,
	       ...)
{
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (problem)
		v->problems++;
	else
		v->notes++;
	if (v->emit)
		v->emit(v->ctx, problem, file, field, text);
}

struct meta *cv_meta_open(struct cv *v, void *img, size_t len, const struct chell_persist_ops *ops,
			  struct chell_region **region)
{
	char err[512] = "";
	struct chell_region *r = NULL;
	struct meta *m = NULL;
	*region = NULL;
	int rc = chell_region_open_mem(img, len, ops, &r, err, sizeof err);
	if (rc < 0) {
		cv_report(v, true, CACHE_META_NAME, "region", "not a usable region: %s", err);
		return NULL;
	}
	rc = meta_open(r, 0, &m, err, sizeof err);
	if (rc < 0) {
		cv_report(v, true, CACHE_META_NAME, "root", "%s", err[0] ? err : strerror(-rc));
		chell_region_close(r);
		return NULL;
	}
	struct meta_stats st;
	meta_stats(m, &st);
	v->cnodes = st.cnodes;
	v->chunks_used = st.chunks_used;
	v->chunks = st.chunks;
	err[0] = '\0';
	rc = meta_check(m, err, sizeof err);
	if (rc < 0) {
		/* The first broken invariant: the maps cannot be trusted, so the
		 * control pages are not compared with them. */
		cv_report(v, true, CACHE_META_NAME, "tables", "%s", err[0] ? err : strerror(-rc));
		meta_close(m);
		chell_region_close(r);
		return NULL;
	}
	*region = r;
	return m;
}

/* The dirty table every control page holds, whatever its state (the
 * manager formats it before the state says anything): NULL after a
 * problem. dirty_table_open reads the header only and never writes. */
static const dirty_table *dirty_of(struct cv *v, const char *file, const struct cache_ctl *ctl)
{
	dirty_table *t = dirty_table_open((void *)(uintptr_t)ctl->dirty);
	if (!t) {
		cv_report(v, true, file, "dirty", "no dirty table (bad magic)");
		return NULL;
	}
	if (dirty_table_nchunks(t) != 1) {
		cv_report(v, true, file, "dirty", "dirty table of %u chunks, a control page has one",
			  dirty_table_nchunks(t));
		return NULL;
	}
	return t;
}

/* Blocks with a dirty state that are not valid, in a chunk chelld uses:
 * a client stores only into valid blocks and the manager never clears a
 * valid bit, so write-back would write what was never filled. */
static void check_dirty_valid(struct cv *v, const char *file, const struct cache_ctl *ctl,
			      const dirty_table *t)
{
	unsigned bad = 0, first = 0;
	for (unsigned b = 0; b < CACHE_BLOCKS; b++)
		if (dirty_state(t, 0, b) != 0 && !(ctl->valid[b / 64] >> (b % 64) & 1))
			if (bad++ == 0)
				first = b;
	if (bad)
		cv_report(v, true, file, "dirty",
			  "%u blocks are dirty but not valid (first: block %u): their data is not "
			  "in the chunk",
			  bad, first);
}

/* The verdicts follow chelld's own pool opener (src/chelld/pool.c,
 * pool_check_chunk): what it refuses to serve is a problem here, and what it
 * treats as an unused slot - a missing or empty file, a chunk still INIT,
 * a file of another incarnation of the slot - is a note. Beyond it, this
 * check also compares the backing file's identity with the Cnode's, looks
 * for dirty blocks that are not valid, and reports files of free slots. */
void cv_chunk_file(struct cv *v, struct meta *m, const char *file, uint32_t slot,
		   uint64_t file_size, const struct cache_ctl *ctl)
{
	v->chunk_files++;
	struct meta_chunk_info ci;
	int mrc = m ? meta_chunk_info(m, slot, &ci) : -ENODATA;
	if (mrc == -EINVAL) {
		cv_report(v, false, file, "name",
			  "slot %u is beyond the pool's %u chunks: not used (chelld ignores it)",
			  slot, v->chunks);
		return;
	}
	if (mrc == -ENOENT) {
		/* chelld never reads it: the slot's next use replaces it. */
		cv_report(v, false, file, "slot",
			  "slot %u is free in " CACHE_META_NAME ": a leftover (an eviction or "
			  "fill a crash interrupted); chelld replaces it when the slot is used",
			  slot);
		return;
	}
	if (mrc < 0 && mrc != -ENODATA) {
		cv_report(v, true, file, "slot", "slot %u: %s in " CACHE_META_NAME, slot,
			  strerror(-mrc));
		return;
	}
	if (file_size == 0) {
		cv_report(v, false, file, "size",
			  "empty: an eviction was interrupted; chelld treats the slot as unused");
		return;
	}
	if (file_size != CACHE_CHUNK_FILE_BYTES || !ctl) {
		cv_report(v, true, file, "size", "%" PRIu64 " bytes, a chunk file has %llu", file_size,
			  (unsigned long long)CACHE_CHUNK_FILE_BYTES);
		if (!ctl)
			return;
	}
	if (ctl->magic != CACHE_CTL_MAGIC) {
		cv_report(v, true, file, "magic", "0x%016" PRIx64 ", expected 0x%016llx", ctl->magic,
			  (unsigned long long)CACHE_CTL_MAGIC);
		return; /* not a control page: its other fields mean nothing */
	}
	if (ctl->version != CACHE_CTL_VERSION) {
		cv_report(v, true, file, "version", "%u, this build reads %u", ctl->version,
			  CACHE_CTL_VERSION);
		return;
	}
	bool state_ok = ctl->state <= CACHE_CHUNK_REVOKED;
	if (!state_ok)
		cv_report(v, true, file, "state", "%u is not INIT (0), LIVE (1) or REVOKED (2)",
			  ctl->state);
	if (ctl->slot != slot)
		cv_report(v, true, file, "slot", "%u, but the file is the chunk of slot %u", ctl->slot,
			  slot);
	const dirty_table *dt = dirty_of(v, file, ctl);
	if (mrc < 0 || !state_ok) {
		/* No metadata to compare with: the page alone. */
		if (dt && state_ok)
			check_dirty_valid(v, file, ctl, dt);
		return;
	}
	if (ctl->state == CACHE_CHUNK_INIT) {
		cv_report(v, false, file, "state",
			  "INIT: never handed out (a fill a crash interrupted); chelld treats "
			  "the slot as unused");
		return;
	}
	if (ctl->cnode != ci.cnode || ctl->file_chunk != ci.file_chunk || ctl->incarnation != ci.seq) {
		cv_report(v, false, file, "incarnation",
			  "the file is of Cnode %u file chunk %" PRIu64 " (incarnation %" PRIu64
			  "), " CACHE_META_NAME " maps slot %u to Cnode %u file chunk %" PRIu64
			  " (incarnation %" PRIu64 "): another use of the slot; chelld treats it "
			  "as unused",
			  ctl->cnode, ctl->file_chunk, ctl->incarnation, slot, ci.cnode, ci.file_chunk,
			  ci.seq);
		return;
	}
	/* The chunk chelld attaches and serves. */
	if (dt)
		check_dirty_valid(v, file, ctl, dt);
	struct meta_cnode_info cn;
	if (meta_cnode_info(m, ci.cnode, &cn) == 0) {
		if (ctl->dev != cn.dev)
			cv_report(v, true, file, "dev", "%" PRIu64 ", but Cnode %u (%s) is on dev %" PRIu64,
				  ctl->dev, ci.cnode, cn.path, cn.dev);
		if (ctl->ino != cn.ino)
			cv_report(v, true, file, "ino", "%" PRIu64 ", but Cnode %u (%s) is inode %" PRIu64,
				  ctl->ino, ci.cnode, cn.path, cn.ino);
	}
}

void cv_slot(struct cv *v, struct meta *m, uint32_t slot, bool has_file)
{
	struct meta_chunk_info ci;
	if (has_file || meta_chunk_info(m, slot, &ci) < 0)
		return;
	/* A crash between the allocation and the file's creation: no data
	 * was handed out from it, and chelld treats the slot as unused. */
	cv_report(v, false, CACHE_CHUNKS_DIR, "missing",
		  "slot %u is allocated to Cnode %u (file chunk %" PRIu64 ") in " CACHE_META_NAME
		  " but " CACHE_CHUNKS_DIR "/%u does not exist: chelld treats the slot as unused",
		  slot, ci.cnode, ci.file_chunk, slot);
}
