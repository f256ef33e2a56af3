/* SPDX-License-Identifier: MIT */
/*
 * Private to src/pvm: the on-media structures of a pVM pool (the same as a
 * table in docs/PVM.md) and the helpers pool.c, object.c and check.c share.
 *
 * A pool is one Chell region (superblock, master slot table, client
 * journals, heap). All pVM structures live in the region's heap, addressed
 * by heap offsets; the heap is cut in PVM_PAGE pages:
 *
 *   page 0           root (immutable part under a CRC, then cur_pages)
 *   shared_off..     process-shared robust mutexes: never logged, never
 *                    trusted after a restart (re-initialised by the first
 *                    process to open the pool)
 *   bm_off..         page bitmap over the whole maximum size (1 = in use)
 *   apps_off..       application table: max_apps entries of 256 bytes
 *   data_page..      allocated by pages: object tables, object data,
 *                    history blocks and kept versions
 *
 * Invariants (checked by pvm_pool_check): every page reachable from a valid
 * application (its table, its objects' data, history blocks and versions)
 * is in use in the bitmap and reachable once; after recovery with every
 * application valid, no other page below data_page..cur_pages is.
 */
#ifndef CHELL_PVM_INTERNAL_H
#define CHELL_PVM_INTERNAL_H

#include <chell/pmtx.h>
#include <chell/pvm.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define PVM_MAGIC "CHELLPV1"
/* On-media format version. 1: 64-bit object IDs, no max_step (the
 * application entry's bytes 112..119 were reserved, zero); 2: 63-bit IDs
 * and max_step, with lookups probing up to it. A version-1 pool read as
 * version 2 would look up with max_step 0 and IDs past 2^63, so other
 * versions are refused, naming the version. */
#define PVM_VERSION 2u
#define PVM_NLOCKS 1024u          /* object lock stripes */
#define PVM_MUTEX_STRIDE 64u
#define PVM_DEF_SLOTS 64u         /* initial object table slots (doubles) */
#define PVM_MAX_SLOTS (1u << 24)

struct pvm_root {
	char magic[8];            /*   0 */
	uint32_t version;         /*   8 */
	uint32_t page;            /*  12 PVM_PAGE */
	uint64_t max_pages;       /*  16 pages of the heap (the maximum size) */
	uint64_t shared_off;      /*  24 */
	uint64_t shared_size;     /*  32 */
	uint64_t bm_off;          /*  40 */
	uint64_t bm_bytes;        /*  48 */
	uint64_t apps_off;        /*  56 */
	uint32_t max_apps;        /*  64 */
	uint32_t nlocks;          /*  68 */
	uint64_t data_page;       /*  72 first allocatable page */
	uint32_t journals;        /*  80 the region's (lock table size) */
	uint32_t crc;             /*  84 CRC32C of bytes 0..83 */
	uint64_t cur_pages;       /*  88 pages of the current size (grows) */
};

#define PVM_A_USED 1u
struct pvm_aent {
	uint8_t guid[16];         /*   0 */
	char name[PVM_APP_NAME_MAX]; /* 16 */
	uint64_t table_off;       /*  80 heap offset of the object table */
	uint32_t slots;           /*  88 power of two */
	uint32_t flags;           /*  92 PVM_A_USED */
	uint32_t crc;             /*  96 CRC32C of bytes 0..95 */
	uint32_t pad;             /* 100 */
	uint64_t objects;         /* 104 */
	uint64_t max_step;        /* 112 largest collision step of any object
	                           *     ever created here (see find_name) */
	uint8_t reserved[256 - 120];
};

#define PVM_O_USED 1u
struct pvm_odesc {
	uint64_t nh;              /*   0 name hash + collision step (<= max_step) */
	uint64_t off;             /*   8 heap offset of the data (page-aligned; 0 if cap 0) */
	uint64_t size;            /*  16 */
	uint64_t cap;             /*  24 bytes of pages held */
	uint64_t version;         /*  32 */
	uint64_t hist_off;        /*  40 history block (one page), 0 if none */
	uint32_t hist_n;          /*  48 versions kept */
	uint32_t flags;           /*  52 PVM_F_PROTECTED */
	uint32_t name_len;        /*  56 */
	uint32_t used;            /*  60 PVM_O_USED */
	char name[PVM_NAME_MAX];  /*  64 NUL-terminated */
};

struct pvm_hent {             /* a kept version; version 0 = empty */
	uint64_t version, off, size, cap;
};

_Static_assert(sizeof(struct pvm_root) == 96, "root fields");
_Static_assert(sizeof(struct pvm_aent) == 256, "app entry size");
_Static_assert(sizeof(struct pvm_odesc) == 256, "object descriptor size");
_Static_assert(PVM_HISTORY_MAX * sizeof(struct pvm_hent) <= PVM_PAGE, "history block fits a page");

struct pvm_pool {
	struct chell_region *r;
	struct chell_persist_ops ops;
	uint8_t *map;             /* file pools: the whole reserved range */
	size_t map_len;
	int fd;                   /* -1 for memory pools */
	int dax;
	uint64_t heap_file_off;   /* file offset of heap byte 0 */
	uint8_t *heap;
	uint64_t heap_size;
	struct pvm_root *root;
	/* The root's immutable part as validated at open. */
	uint64_t max_pages, bm_off, apps_off, data_page, shared_off;
	uint32_t max_apps, nlocks, journals;
	uint8_t *claimed;         /* journals this process holds */
	uint64_t alloc_hint;      /* next-fit start (under the metadata lock) */
	int ro_any;               /* this process mapped pages read-only */
	uint64_t prot_seen;       /* the protection generation it last saw */
	pthread_mutex_t local;    /* claimed[] */
};

struct pvm_extent {           /* heap bytes [off, off+len) */
	uint64_t off, len;
};

struct pvm_app {
	struct pvm_pool *p;
	uint32_t idx;             /* application table entry */
	uint32_t journal;
	struct pvm_guid guid;
	/* The transaction of this handle. */
	pthread_mutex_t txm;      /* held by the owner thread while depth > 0 */
	pthread_t owner;
	int depth;
	int err;                  /* sticky error of the flattened transaction */
	struct chell_ptx t;
	int meta_held;
	uint32_t nheld;
	uint64_t held[PVM_NLOCKS / 64];
	struct pvm_extent *frees;   /* deferred to the end of the transaction */
	size_t nfrees, capfrees;
	struct pvm_extent *fresh;  /* new pages written without undo: flushed at commit */
	size_t nfresh, capfresh;
	uint64_t *touched;        /* name hashes snapshotted in this transaction */
	size_t ntouched, captouched;
	/* pvm_iter: the object IDs (nh) sorted, taken when an iteration
	 * starts; read and replaced under the metadata lock. */
	uint64_t *iter_nh;
	size_t iter_n;
	/* pvm_tx_add_ptr: what this handle last saw of the objects it
	 * created or opened, by first data page (direct-mapped), each valid
	 * while the table sequence still has the value it was seen at (no
	 * metadata transaction since, in any process). Read and written
	 * only with txm held: by the transaction's thread, or by pvm_open
	 * when it gets txm at once (else it does not fill it). */
	struct pvm_pcache *pc;     /* open addressing by first page, linear probing */
	uint32_t pc_cap, pc_n;     /* slots (a power of two, 0: none yet), used */
	uint32_t npend;            /* objects created in the open transaction */
	uint64_t pend[16];         /* their first pages */
	uint64_t seq_end;          /* the table sequence the last commit or abort stored */
};

/* One object as pvm_tx_add_ptr needs it (a copy of its descriptor's). */
struct pvm_pcache {
	uint64_t page1;           /* first data page + 1; 0: empty */
	uint64_t seq;             /* table sequence it is valid at (even); odd: not yet */
	uint64_t h;               /* name hash: its stripe */
	uint64_t nh, off, size;
	uint32_t flags, hist_n;
};
#define PVM_PCACHE_MIN 1024u
#define PVM_PCACHE_MAX (1u << 20) /* at half of it (56 MiB) it starts over */

static inline pthread_mutex_t *pvm_mutex(struct pvm_pool *p, uint32_t i)
{
	/* 0: metadata, 1: recovery, 2..: journal claims, then object stripes. */
	return (pthread_mutex_t *)(p->heap + p->shared_off + (uint64_t)i * PVM_MUTEX_STRIDE);
}
/* The pid of the process holding journal claim j, in the spare bytes of
 * the claim's mutex slot (kept after it dies: recovery needs it). */
static inline volatile int32_t *pvm_claim_pid(struct pvm_pool *p, uint32_t j)
{
	return (volatile int32_t *)((uint8_t *)pvm_mutex(p, 2u + j) + 48);
}
_Static_assert(sizeof(pthread_mutex_t) <= 48, "a mutex slot keeps 16 spare bytes");
#define PVM_M_META 0u
#define PVM_M_RECOVERY 1u
#define PVM_M_CLAIM(j) (2u + (j))
#define PVM_M_OBJ(p, s) (2u + (p)->journals + (s))

static inline struct pvm_aent *pvm_aent(struct pvm_pool *p, uint32_t i)
{
	return (struct pvm_aent *)(p->heap + p->apps_off) + i;
}

#define pvm_err(err, errlen, ...) do { if ((err) && (errlen)) snprintf((err), (errlen), __VA_ARGS__); } while (0)

/* pool.c */
uint32_t pvm_aent_crc(const struct pvm_aent *a);
int pvm_lock(struct pvm_pool *p, pthread_mutex_t *m, int timed);
void pvm_flush_new(struct pvm_pool *p, void *addr, size_t len);
/* Grow the current size to at least `pages`, inside a
 * transaction holding the metadata lock. */
int pvm_grow(struct pvm_app *a, uint64_t pages);
/* Write protection is an mprotect in each process, and another process may
 * unprotect an object, then delete it and reuse its pages for anything:
 * this process's read-only mapping of them must not outlive that. Every
 * unprotect bumps the pool's protection generation (pvm_prot_gen, in the
 * metadata mutex's spare bytes) under the metadata lock; a process that
 * has read-only pages and sees a new generation when it takes the lock
 * makes its whole heap writable again (pvm_writable_all) before it writes
 * anything or hands out a pointer; objects still protected become
 * read-only again when it opens them. Recovery of another process's
 * journal, which may write anywhere, does the same. */
void pvm_writable_all(struct pvm_pool *p);
void pvm_prot_sync(struct pvm_pool *p);
static inline volatile uint64_t *pvm_prot_gen(struct pvm_pool *p)
{
	return (volatile uint64_t *)((uint8_t *)pvm_mutex(p, PVM_M_META) + 48);
}
/* The table sequence: odd while a transaction holding the metadata mutex
 * may change the application or object tables (from meta_hold to the end
 * of its commit or abort), bumped to even after. Lookups copy what they
 * need without the mutex and keep it only if the sequence was even and
 * unchanged around the copy (a seqlock); otherwise they take the mutex. A
 * holder that dies leaves it odd: whoever next takes the mutex (owner
 * dead, journal rolled back) makes it even again (pvm_lock). */
static inline uint64_t *pvm_table_seq(struct pvm_pool *p)
{
	return (uint64_t *)((uint8_t *)pvm_mutex(p, PVM_M_META) + 56);
}

/* check.c: validate application i (entry and table); 0 or -EUCLEAN with a
 * sentence naming the structure and the field in err. */
int pvm_app_validate(struct pvm_pool *p, uint32_t i, char *err, size_t errlen);
/* Rebuild the page bitmap from what valid applications reach and fix the
 * stored one in transactions on journal j. Returns pages freed (>= 0),
 * or -errno. */
int pvm_gc(struct pvm_pool *p, unsigned j, uint64_t *leaked, char *err, size_t errlen);

/* object.c */
uint64_t pvm_name_hash(const struct pvm_guid *g, const char *name, size_t len);

#endif
