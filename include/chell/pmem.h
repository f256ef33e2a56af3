/* SPDX-License-Identifier: MIT */
/*
 * chell/pmem.h - persistence primitives and persistent regions with
 * journaled transactions (the persistence core used by cache mode and pVM).
 *
 * Conventions as in the rest of Chell: functions return 0 / a count, or a
 * negative errno; nothing aborts on bad input. Every pointer into a region
 * is derived from region-relative offsets that were checked.
 *
 * Three layers, one file each under src/pmem/:
 *
 *   persist.c  flush/drain/persist: the cheapest correct instruction the CPU
 *              has (clwb, clflushopt, clflush), fence only where the platform
 *              persists caches; non-temporal bulk copy; an indirection
 *              (struct chell_persist_ops) so the power-failure simulator can
 *              observe every flush and fence.
 *   region.c   the on-media format: superblock (magic, version, UUID, layout,
 *              CRC32C), create/open/validate with precise errors.
 *   tx.c       undo-logged transactions in 64-byte journal entries, several
 *              journals (one per client) plus a master journal, recovery.
 */
#ifndef CHELL_PMEM_H
#define CHELL_PMEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ persistence */

/* The operations every persistent write goes through. The default set uses
 * the CPU's cache-line instructions; the simulator installs its own. */
struct chell_persist_ops {
	/* Write back the cache lines of [addr, addr+len); no ordering promise. */
	void (*flush)(void *ctx, const void *addr, size_t len);
	/* Order: every flush before it reaches media before any store after it. */
	void (*drain)(void *ctx);
	/* Copy with non-temporal stores (or copy + flush); no drain. */
	void *(*memcpy_nodrain)(void *ctx, void *dst, const void *src, size_t n);
	void *ctx;
};

/* The process-wide default ops (chosen from CPUID at first use). */
const struct chell_persist_ops *chell_persist_default(void);
/* Name of the flush instruction in use: "clwb", "clflushopt", "clflush" or
 * "none" (platforms that persist caches on power loss: fence only). */
const char *chell_persist_kind(void);

static inline void chell_persist(const struct chell_persist_ops *ops, const void *addr, size_t len)
{
	ops->flush(ops->ctx, addr, len);
	ops->drain(ops->ctx);
}

/*
 * Is a mapping of `fd` truly persistent with cache flushes alone (DAX with
 * MAP_SYNC), or does durability need msync/fsync? Maps 1 page to find out.
 * Returns 1 (MAP_SYNC works), 0 (needs msync), or -errno.
 */
int chell_pmem_fd_is_dax(int fd);

/* Map len bytes of fd shared, read-write: with MAP_SYNC when the file
 * system allows it (*dax = 1: cache flushes make stores durable), else a
 * plain shared mapping (*dax = 0). MAP_FAILED with errno on failure. */
void *chell_pmem_map_shared(int fd, size_t len, int *dax);

/* ------------------------------------------------------------ regions */

#define CHELL_REGION_MAGIC "CHELLPM1"    /* 8 bytes at offset 0 */
#define CHELL_REGION_VERSION 2 /* 2: multi-line undo records */
#define CHELL_JOURNAL_ENTRY 64           /* bytes per journal entry */

struct chell_region;                      /* opaque */

struct chell_region_layout {
	uint32_t journals;        /* client journals (the master journal is extra) */
	uint32_t journal_entries; /* 64-byte entries per client journal */
	uint64_t heap_size;       /* bytes of user data area */
};

/* Where a layout puts the heap and how large the whole region is, without
 * creating anything (for callers that size the file themselves). */
int chell_region_size(const struct chell_region_layout *layout, uint64_t *heap_off, uint64_t *total);

/* Create a region in an existing file (it is sized to fit), or open one.
 * Opening validates everything (magic, version, CRC32C of the superblock and
 * of each journal header, layout against the file size) and runs recovery.
 * On failure returns -errno and writes a sentence naming the problem into
 * err ("superblock checksum mismatch: stored 0x..., computed 0x..."). */
int chell_region_create(const char *path, const struct chell_region_layout *layout,
			struct chell_region **out, char *err, size_t errlen);
int chell_region_open(const char *path, struct chell_region **out, char *err, size_t errlen);
/* The same on memory the caller owns (an image in a buffer: fuzzing, the
 * simulator). `ops` NULL = default persistence. */
int chell_region_open_mem(void *base, size_t len, const struct chell_persist_ops *ops,
			  struct chell_region **out, char *err, size_t errlen);
int chell_region_format_mem(void *base, size_t len, const struct chell_region_layout *layout,
			    const struct chell_persist_ops *ops, char *err, size_t errlen);
/* Attach to an image with flags. CHELL_REGION_NO_RECOVER validates but
 * leaves every journal alone: for an image several processes share, where
 * an active journal may belong to a live transaction of another process
 * (each then recovers the journals of dead clients one by one with
 * chell_journal_recover). */
#define CHELL_REGION_NO_RECOVER 1u
int chell_region_attach_mem(void *base, size_t len, const struct chell_persist_ops *ops, unsigned flags,
			    struct chell_region **out, char *err, size_t errlen);
void chell_region_close(struct chell_region *r);

/* The user data area: offsets in [0, heap_size). */
void *chell_region_heap(struct chell_region *r, uint64_t *size);
const uint8_t *chell_region_uuid(const struct chell_region *r); /* 16 bytes */

/* ------------------------------------------------------------ transactions */

struct chell_tx;

/* Begin a transaction on client journal `journal` (0..journals-1). One open
 * transaction per journal; different journals never contend. */
int chell_tx_begin(struct chell_region *r, unsigned journal, struct chell_tx **out);
/* Record the current contents of [off, off+len) of the heap (undo entry),
 * persisted before the caller may modify that range in place. */
int chell_tx_add_range(struct chell_tx *tx, uint64_t off, size_t len);
/* The same without making the record durable yet: several ranges of one
 * change can share one fence. The caller must not store into any range so
 * recorded before chell_tx_fence returns. */
int chell_tx_add_range_nodrain(struct chell_tx *tx, uint64_t off, size_t len);
void chell_tx_fence(struct chell_tx *tx);
/* Persist the modified ranges, then write and persist the finish record. */
int chell_tx_commit(struct chell_tx *tx);
/* Restore every recorded range now (an explicit abort). */
int chell_tx_abort(struct chell_tx *tx);

/* Roll back every unfinished transaction (also done by open). Returns the
 * number of transactions rolled back, or -errno. */
int chell_region_recover(struct chell_region *r, char *err, size_t errlen);

/* Roll back the unfinished transaction of one client journal, if any, and
 * reset it: for a journal whose client is known to be gone (its process
 * died) while others keep working. Returns 1 (rolled back), 0 (nothing to
 * do), -EBUSY (this process has a transaction open on it), -EINVAL, or
 * -EUCLEAN (the journal is damaged; nothing changed). */
int chell_journal_recover(struct chell_region *r, unsigned journal);

/* ------------------------------------------------------------ checking */

struct chell_region_report {
	int ok;                   /* 1 if no problem was found */
	int problems;             /* count */
	char text[4096];          /* one line per problem, plain words */
	int unfinished_tx;        /* transactions recovery would roll back */
};
/* Verify without changing anything (chell pool check). */
int chell_region_check(const char *path, struct chell_region_report *rep);

#ifdef __cplusplus
}
#endif
#endif
