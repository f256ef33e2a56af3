/* SPDX-License-Identifier: MIT */
/*
 * Private to src/pmem: the on-media structures (see docs/PERSISTENCE.md for
 * the same layout as a table), CRC32C, and the helpers shared by region.c,
 * validate.c, journal.c, tx.c and check.c.
 *
 * Everything on media is little-endian (x86-64 native) and is read with
 * memcpy into local structs: an image handed to chell_region_open_mem may sit
 * at any address and every byte of it is untrusted until checked.
 */
#ifndef CHELL_PMEM_INTERNAL_H
#define CHELL_PMEM_INTERNAL_H

#include <chell/pmem.h>
#include <chell/pmtx.h>

#include <stdarg.h>
#include <stdatomic.h>

/* ------------------------------------------------------------ CRC32C */

/* chell_crc32c is declared in chell/pmtx.h (pVM checksums with it too). */
/* The two implementations, exposed so the tests can compare them. */
uint32_t chell_crc32c_table(uint32_t crc, const void *buf, size_t len);
uint32_t chell_crc32c_hw(uint32_t crc, const void *buf, size_t len); /* needs SSE4.2 */
int chell_crc32c_hw_available(void);

/* ------------------------------------------------------------ media format */

#define PM_SB_SIZE 4096u
#define PM_SB_CRC_OFF 96u                /* the crc field; CRC covers the rest */
#define PM_ENTRY CHELL_JOURNAL_ENTRY     /* 64 */
#define PM_INLINE 40u                    /* undo bytes inside a record header */
#define PM_NONE UINT32_MAX               /* "no previous record" */
#define PM_MAX_JOURNALS 4096u
#define PM_MIN_ENTRIES 2u                /* one one-entry undo record + the finish record */
#define PM_MAX_ENTRIES (1u << 24)
#define PM_MASTER_MAGIC "CHELLMJ1"
#define PM_JOURNAL_MAGIC "CHELLJN1"
#define PM_HDR_CRC_OFF 60u               /* journal headers: CRC of bytes 0..59 */

/* Superblock, offset 0, 4096 bytes (the rest of the block is reserved, zero,
 * and covered by the CRC). */
struct pm_super {
	char magic[8];            /*  0 "CHELLPM1" */
	uint32_t version;         /*  8 */
	uint32_t flags;           /* 12 no flag is defined: must be 0 */
	uint8_t uuid[16];         /* 16 */
	uint32_t journals;        /* 32 client journals */
	uint32_t journal_entries; /* 36 entries per client journal (header excluded) */
	uint64_t master_off;      /* 40 */
	uint64_t master_size;     /* 48 */
	uint64_t journal_off;     /* 56 first client journal */
	uint64_t journal_size;    /* 64 bytes per client journal: (entries + 1) * 64 */
	uint64_t heap_off;        /* 72 */
	uint64_t heap_size;       /* 80 */
	uint64_t total_size;      /* 88 */
	uint32_t crc;             /* 96 CRC32C of the 4096 bytes with this field as 0 */
	uint32_t pad;             /* 100 */
};
_Static_assert(sizeof(struct pm_super) == 104, "superblock fields");

/* Header of the master journal and of each client journal: one entry. */
struct pm_jhdr {
	char magic[8];            /*  0 PM_MASTER_MAGIC or PM_JOURNAL_MAGIC */
	uint32_t index;           /*  8 client journal number (master: journal count) */
	uint32_t entries;         /* 12 entries (master: 0) */
	uint8_t uuid[16];         /* 16 the region's: a journal from another region is refused */
	uint8_t reserved[28];     /* 32 zero */
	uint32_t crc;             /* 60 CRC32C of bytes 0..59 */
};
_Static_assert(sizeof(struct pm_jhdr) == PM_ENTRY, "journal header is one entry");

enum { PM_E_UNDO = 1, PM_E_FINISH = 2 };

/* A record header: one journal entry, followed (undo records longer than
 * PM_INLINE bytes) by pm_rec_lines(len) raw 64-byte lines holding the rest
 * of the old data, copied straight from the heap. The CRC is seeded with
 * (uuid, journal, header index, generation) and covers header bytes 4..63
 * and the pm_rec_tail(len) data bytes in the lines, so a record left over
 * from an older transaction, copied from another place, or torn anywhere
 * by a power failure never checks. */
struct pm_entry {
	uint32_t crc;             /*  0 */
	uint8_t type;             /*  4 PM_E_UNDO / PM_E_FINISH */
	uint8_t zero8;            /*  5 zero */
	uint16_t zero16;          /*  6 zero */
	uint64_t off;             /*  8 undo: heap offset; finish: its own index */
	uint32_t len;             /* 16 undo: bytes of old data (>= 1); finish: 0 */
	uint32_t prev;            /* 20 header index of the previous undo record, PM_NONE for the first */
	uint8_t data[PM_INLINE];  /* 24 undo: the first min(len, 40) old bytes */
};
_Static_assert(sizeof(struct pm_entry) == PM_ENTRY, "record header is a cache line");

/* Old-data bytes after the inline part, and the whole lines they fill. */
static inline uint64_t pm_rec_tail(uint64_t len)
{
	return len > PM_INLINE ? len - PM_INLINE : 0;
}
static inline uint64_t pm_rec_lines(uint64_t len)
{
	return (pm_rec_tail(len) + PM_ENTRY - 1) / PM_ENTRY;
}

/* Master journal slot (one 8-byte word per client journal, stored with a
 * single aligned store, so it is never torn): generation << 1 | active. */
#define PM_SLOT(gen, active) (((uint64_t)(gen) << 1) | ((active) ? 1u : 0u))
#define PM_SLOT_GEN(s) ((s) >> 1)
#define PM_SLOT_ACTIVE(s) ((s) & 1u)

/* ------------------------------------------------------------ diagnostics */

/* Collects problems: open keeps the first as its err sentence, check keeps
 * them all as report lines. */
struct pm_diag {
	char *buf;
	size_t cap;
	size_t used;
	int count;
	int multi;                /* 1: append lines; 0: keep the first only */
};
void pm_diag_init(struct pm_diag *d, char *buf, size_t cap, int multi);
__attribute__((format(printf, 2, 3))) void pm_diag(struct pm_diag *d, const char *fmt, ...);

/* ------------------------------------------------------------ validation */

/* Layout decoded from a superblock that passed every check. */
struct pm_layout {
	uint8_t uuid[16];
	uint32_t journals;
	uint32_t entries;
	uint64_t master_off, master_size;
	uint64_t journal_off, journal_size;
	uint64_t heap_off, heap_size;
	uint64_t total_size;
};

/* Compute the layout a format with `in` produces. -EINVAL + diag if the
 * request is out of range. */
int pm_layout_plan(const struct chell_region_layout *in, struct pm_layout *out, struct pm_diag *d);
/* Validate the superblock and both kinds of journal header of an image.
 * Returns 0, or -errno with at least one problem in d: -EINVAL (not a
 * Chell region), -ENOTSUP (version/flags this build does not know),
 * -EUCLEAN (damaged or inconsistent). With d->multi it goes on after a
 * journal header problem to report every damaged header. */
int pm_validate(const uint8_t *base, size_t len, struct pm_layout *lay, struct pm_diag *d);
uint32_t pm_super_crc(const uint8_t *sb);
uint32_t pm_jhdr_crc(const struct pm_jhdr *h);

/* ------------------------------------------------------------ journals */

/* CRC of the record whose header e sits at `index`; tail = its
 * pm_rec_tail(e->len) data bytes (the heap when writing, the lines after
 * the header when checking). */
uint32_t pm_entry_crc(const uint8_t uuid[16], uint32_t journal, uint32_t index, uint64_t gen,
		      const struct pm_entry *e, const void *tail);

/* What a scan of one journal finds (for recovery, abort and check). */
struct pm_scan {
	uint32_t undo;            /* entries used by valid undo records from index 0 */
	uint32_t records;         /* how many undo records */
	uint32_t last;            /* header index of the last one, PM_NONE if none */
	int finished;             /* a valid finish record follows them */
	int bad;                  /* a valid-checksum entry is inconsistent (index in bad_index) */
	uint32_t bad_index;
};
struct pm_region_view {       /* what journal.c needs, from a region or a read-only image */
	const uint8_t *base;
	const struct pm_layout *lay;
};
void pm_scan_journal(const struct pm_region_view *v, uint32_t j, uint64_t gen, struct pm_scan *s,
		     struct pm_diag *d);
static inline const uint8_t *pm_journal_base(const uint8_t *base, const struct pm_layout *l, uint32_t j)
{
	return base + l->journal_off + (uint64_t)j * l->journal_size;
}
static inline const uint8_t *pm_entry_at(const uint8_t *base, const struct pm_layout *l, uint32_t j, uint32_t i)
{
	return pm_journal_base(base, l, j) + (uint64_t)(i + 1) * PM_ENTRY;
}
static inline uint64_t pm_slot_load(const uint8_t *base, const struct pm_layout *l, uint32_t j)
{
	return __atomic_load_n((const uint64_t *)(base + l->master_off + PM_ENTRY + 8ull * j), __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------ the region */

struct chell_tx {
	struct chell_region *r;
	uint32_t journal;
	uint64_t gen;             /* generation of this transaction */
	uint32_t next;            /* next free entry */
	uint32_t last;            /* header index of the last undo record, PM_NONE */
	int slot_set;             /* the active slot was stored (first add_range) */
	/* The recorded heap ranges, merged when adjacent, so commit flushes
	 * them without reading the journal back (streaming stores evicted it
	 * from the cache). More ranges than fit: commit walks the records. */
	uint32_t nranges;
	int ranges_overflow;
	struct {
		uint64_t off, len;
	} ranges[8];
	atomic_int in_use;
};

struct chell_region {
	uint8_t *base;
	size_t len;
	struct pm_layout lay;
	struct chell_persist_ops ops;
	struct chell_tx *tx;      /* one per client journal */
	int fd;                   /* file regions: the mapping's file (flock held), else -1 */
	int mapped;               /* base is our mmap: munmap at close */
};

/* Roll back every unfinished transaction (tx.c). Returns the count or
 * -EUCLEAN with the problem in d (nothing is changed then). */
int pm_recover(struct chell_region *r, struct pm_diag *d);

/* Drain for non-DAX file mappings: msync the whole mapping (ctx = region). */
void pm_msync_drain(void *ctx);
void pm_nop_flush(void *ctx, const void *addr, size_t len);
void *pm_plain_memcpy(void *ctx, void *dst, const void *src, size_t n);

/* Read-only check of an image (what chell_region_check does after mapping
 * the file; also handy for fuzzing without a file). */
int chell_region_check_mem(const void *base, size_t len, struct chell_region_report *rep);

#endif
