/* SPDX-License-Identifier: MIT */
/*
 * The on-media format of WARP's patterns file (docs/WARP.md "Patterns
 * file") and the pieces of patterns.c the fuzz target and the crash test
 * drive directly. Everything lives in the heap of a Chell region
 * (chell/pmem.h); all fields are little-endian x86 integers.
 *
 *   heap offset 0     struct pat_root (64 bytes)
 *   heap offset 64    root.entries entries of PAT_ENTRY_SIZE bytes:
 *                     struct pat_entry, then states[PAT_NODES] (one byte
 *                     per node, enum warp_state), then succ[PAT_NODES]
 *                     (uint32_t, WARP_NODE_NONE for none)
 *
 * An entry with ino == 0 is empty. An entry's crc (CRC32C) covers its
 * header with crc = 0 and its first n states and successors; a store is one
 * transaction, so the crc only catches damage, never a torn store.
 */
#ifndef CHELL_WARP_PATTERNS_INTERNAL_H
#define CHELL_WARP_PATTERNS_INTERNAL_H

#include "brain.h"
#include "chell/pmem.h"

#define PAT_MAGIC 0x3154415050524157ULL /* "WARPPAT1" */
#define PAT_VERSION 1u
#define PAT_ENTRIES 1024u    /* files remembered (2.8 MB); the least recently stored goes */
#define PAT_MAX_ENTRIES 65536u /* what a file may declare */
#define PAT_NODES WARP_PATTERNS_NODES   /* nodes per file (1 GB of 2 MB nodes); later ones are not kept */
#define PAT_ROOT_SIZE 64u
#define PAT_ENTRY_SIZE (sizeof(struct pat_entry) + PAT_NODES + 4u * PAT_NODES)
#define PAT_HEAP_SIZE(entries) (PAT_ROOT_SIZE + (uint64_t)(entries) * PAT_ENTRY_SIZE)
#define PAT_JOURNAL_ENTRIES 4096u /* 256 KB of undo: ~90 entries per transaction (a file made with 256 takes 5) */

struct pat_root {
	uint64_t magic;
	uint32_t version, entries;
	uint32_t max_nodes, entry_size;
	uint32_t crc;      /* CRC32C of the 24 bytes above */
	uint32_t reserved0;
	uint64_t clock;    /* stamp of the latest store (not in crc) */
	uint8_t reserved[64 - 40];
};

struct pat_xf {
	uint64_t ctx, dev, ino;
	uint32_t hint, age;
};

struct pat_entry {
	uint64_t dev, ino;
	uint64_t stamp;
	uint32_t n, crc;
	uint8_t reserved[32];
	struct pat_xf xf[WARP_XFILE_SLOTS];
};

_Static_assert(sizeof(struct pat_root) == PAT_ROOT_SIZE, "root size");
_Static_assert(sizeof(struct pat_entry) == 192, "entry header size");
_Static_assert(PAT_ENTRY_SIZE % 64 == 0, "entries start on cache lines");

/* Format an empty patterns heap of `entries` entries on an open region
 * (one transaction). 0 or -errno. */
int pat_format(struct chell_region *r, uint32_t entries);
/* The region layout of a patterns file of `entries` entries. */
struct chell_region_layout pat_layout(uint32_t entries);
/* Check a heap: 0, or -EUCLEAN with the offending field named in field
 * ("root.magic", "entry[3].succ[17]", ...). */
int pat_validate(const uint8_t *heap, uint64_t heap_size, char *field, size_t len);
/* The root alone (magic, crc, version, sizes against the heap): enough to
 * walk the entries safely. */
int pat_validate_root(const uint8_t *heap, uint64_t heap_size, char *field, size_t len);
/* One store as a transaction on journal 0 of an open region whose root is
 * valid: the index of the entry written (or found unchanged), or -errno. */
int pat_store_region(struct chell_region *r, struct warp_file_id id, uint32_t n, const uint8_t *states,
		     const uint32_t *succ, const struct warp_xfile xf[WARP_XFILE_SLOTS]);
/* Several distinct files' entries in one transaction (as many as the
 * journal needs when it cannot hold them all: a file made with this
 * version's layout holds ~90). 0 or -errno. */
int pat_store_region_many(struct chell_region *r, const struct warp_pattern_rec *recs, size_t count);
/* The number of entries of a validated heap. */
static inline uint32_t pat_entries(const uint8_t *heap)
{
	return ((const struct pat_root *)heap)->entries;
}
/* The entry of id in a validated heap, or NULL. */
const struct pat_entry *pat_find(const uint8_t *heap, struct warp_file_id id);
static inline const uint8_t *pat_states(const struct pat_entry *e)
{
	return (const uint8_t *)(e + 1);
}
static inline const uint32_t *pat_succ(const struct pat_entry *e)
{
	return (const uint32_t *)((const uint8_t *)(e + 1) + PAT_NODES);
}
static inline const struct pat_entry *pat_entry_at(const uint8_t *heap, uint32_t i)
{
	return (const struct pat_entry *)(heap + PAT_ROOT_SIZE + (uint64_t)i * PAT_ENTRY_SIZE);
}
/* Open patterns from an image in memory (a copy is made; the fuzz target,
 * `chell warp show`). Damage is reported in err, never as a warning, and
 * nothing is rebuilt. 0, -EUCLEAN (damaged or foreign), or -errno. */
int warp_patterns_open_mem(const void *img, size_t len, struct warp_patterns **out, char *err, size_t errlen);
/* Open read-only from a file: as _mem, on a copy read under a shared lock. */
int warp_patterns_open_ro(const char *path, struct warp_patterns **out, char *err, size_t errlen);
/* Visit every stored file (chell warp show --all, tests). */
void warp_patterns_each(struct warp_patterns *p, void (*fn)(void *arg, const struct pat_entry *e), void *arg);

/* Crash-test fault injection (tests/crash/warp_patterns_crash.c --break):
 * the entry is written without its undo record. Never set in production. */
extern int pat_fault_skip_undo;

#endif
