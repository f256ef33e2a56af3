/* SPDX-License-Identifier: MIT */
/*
 * chell/pvm.h - pVM: a persistent named-object store with undo-logged
 * transactions, shared by several processes, on the persistence core
 * (chell/pmem.h). Library: libchell-pvm (pkg-config chell-pvm).
 * Design, layout and invariants: docs/PVM.md.
 *
 * Conventions (as liburing): every call returns 0 or a count on success and
 * a negative errno on failure; nothing aborts on bad input. Calls that can
 * fail for a reason worth a sentence take (err, errlen) and write it there.
 *
 * Model.
 *   pool         one file on the fast tier (tmpfs or DAX; a directory means
 *                DIR/pvm.pool). The maximum size is reserved in the address
 *                space when the pool is opened; the file grows on demand up
 *                to it, in place, and every process sees the new space.
 *   application  an identity in the pool: a 16-byte gUID, given or derived
 *                from the application's name (pvm_guid_from_name). Each
 *                opened application handle owns one client journal of the
 *                pool's region (the region's master slot table is the
 *                master journal).
 *   object       named by (gUID, name); its ID is the gUID plus the 64-bit
 *                hash of the name (63 bits), moved to the next free value on a
 *                collision (pvm_info.oid). Data is page-aligned and takes
 *                whole pages (PVM_PAGE), so it can be write-protected.
 *   pointers     pvm_open gives a pointer into the shared mapping (zero
 *                copy). It stays valid until the object is resized, restored
 *                or deleted, or the handle is closed.
 *
 * Transactions. pvm_tx_begin .. pvm_tx_commit / pvm_tx_abort on a handle.
 * Inside, pvm_tx_add(name, off, len) undo-logs a range before the caller
 * stores to it; pvm_create / pvm_delete / pvm_resize / pvm_rename /
 * pvm_restore join the open transaction (allocation and free inside a
 * transaction). Outside a transaction each of those calls is a transaction
 * of its own. An object created inside a transaction may be filled through
 * its pointer without pvm_tx_add: its pages are new (nothing to undo) and
 * are made durable by the commit. Nested begins flatten: only the outermost commit commits, and
 * an error inside makes the outermost commit abort and return that error.
 *
 * Threads and processes. Every call is thread-safe. One transaction at a
 * time per handle (another thread's pvm_tx_begin waits); threads that want
 * parallel transactions open their own handles. Several processes may have
 * a pool open at once. Objects are locked by robust process-shared mutexes
 * (striped by object ID) from the first change in a transaction to its end;
 * the pool's metadata (tables, allocator) by one more. A lock whose holder
 * died is taken over after the dead process's journal has been rolled back.
 * A transaction that already holds locks waits at most PVM_LOCK_WAIT_MS for
 * another one, then the call fails with -EDEADLK: abort and retry.
 */
#ifndef CHELL_PVM_H
#define CHELL_PVM_H

#include <stddef.h>
#include <stdint.h>

#include <chell/pmem.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PVM_PAGE 4096u
#define PVM_NAME_MAX 192         /* bytes of a name including the NUL */
#define PVM_APP_NAME_MAX 64      /* bytes of an application name including the NUL */
#define PVM_HISTORY_MAX 127      /* versions kept per object at most */
#define PVM_LOCK_WAIT_MS 1000

struct pvm_pool;
struct pvm_app;

struct pvm_guid {
	uint8_t b[16];
};

/* An object ID: the application's gUID and the (collision-adjusted) name hash. */
struct pvm_oid {
	struct pvm_guid guid;
	uint64_t nh;
};

struct pvm_pool_opts {
	uint64_t max_size;        /* bytes the pool may grow to (0: 1 GiB) */
	uint64_t initial_size;    /* bytes of object space at creation (0: 16 MiB) */
	uint32_t journals;        /* handles open at once (0: 32) */
	uint32_t journal_entries; /* 64-byte entries per journal (0: 8192 = 512 KiB of undo) */
	uint32_t max_apps;        /* applications (0: 64) */
	uint32_t reserved;
};

/* ------------------------------------------------------------ pools */

/* Create a pool at path (a file, or DIR/pvm.pool when path is a directory);
 * the file must not exist. opts NULL: defaults. Errors: -EEXIST, -EINVAL
 * (an option out of range, named in err), -ENOSPC, and open(2)/mmap(2)
 * errors. */
int pvm_pool_create(const char *path, const struct pvm_pool_opts *opts, struct pvm_pool **out, char *err,
		    size_t errlen);
/* Open a pool. The first process to open it (nobody else has it open) runs
 * recovery: unfinished transactions are rolled back, allocated but
 * unreachable space is freed (only when every application validates), and
 * the locks are reset. Errors: -ENOENT, -EINVAL (not a pool), -ENOTSUP (a
 * version this build does not know), -EUCLEAN (damaged: err names the
 * structure and the field). */
int pvm_pool_open(const char *path, struct pvm_pool **out, char *err, size_t errlen);
/* The same on an image in memory the caller owns (fuzzing, the crash
 * simulator): always exclusive, never grows. format != 0 formats it first
 * with opts. ops NULL: the default persistence. */
int pvm_pool_open_mem(void *base, size_t len, const struct chell_persist_ops *ops, int format,
		      const struct pvm_pool_opts *opts, struct pvm_pool **out, char *err, size_t errlen);
/* Close: every handle of the pool must be closed before. */
void pvm_pool_close(struct pvm_pool *p);

struct pvm_pool_stat {
	uint64_t capacity;        /* bytes the pool may grow to (object space) */
	uint64_t size;            /* bytes of object space now */
	uint64_t used;            /* bytes allocated (tables, objects, history) */
	uint64_t free;            /* size - used */
	uint64_t largest_free;    /* largest free extent in the current size */
	uint64_t free_extents;    /* number of free extents */
	uint32_t apps, max_apps;
	uint32_t journals;
	uint32_t dax;             /* 1: MAP_SYNC mapping */
};
int pvm_pool_stat(struct pvm_pool *p, struct pvm_pool_stat *st);

struct pvm_app_info {
	char name[PVM_APP_NAME_MAX];
	struct pvm_guid guid;
	uint64_t objects;
	uint64_t bytes;           /* object data bytes (sizes) */
	uint64_t pages_bytes;     /* bytes of pages held: tables, data, history */
	int damaged;              /* 1: refused; why in pvm_check's report */
};
/* The application at index *cursor or later (start with 0); 1 if one was
 * found (cursor advanced), 0 at the end. */
int pvm_app_next(struct pvm_pool *p, uint32_t *cursor, struct pvm_app_info *info);

/* Check everything without changing it, or with repair != 0 also free
 * unreachable pages and reset the locks (needs the pool to be open by this
 * process only: -EBUSY otherwise). The report gets one line per problem.
 * Returns the number of problems found (0: clean), or -errno. */
int pvm_pool_check(struct pvm_pool *p, int repair, char *report, size_t len);

/* ------------------------------------------------------------ applications */

/* Derive a gUID from a name (a fixed hash: the same name, the same gUID). */
void pvm_guid_from_name(const char *name, struct pvm_guid *g);

#define PVM_APP_CREATE 1u         /* create the application if it does not exist */

/* Open application `name` (guid NULL: derived from the name; otherwise it
 * must match the stored one). Claims a free journal, rolling it back first
 * if its last owner died. Errors: -ENOENT (no such application and no
 * PVM_APP_CREATE), -ENAMETOOLONG, -ENOSPC (application table full), -EBUSY
 * (every journal in use), -EUCLEAN (its state is damaged: err says where;
 * other applications are not affected), -EINVAL (gUID mismatch). */
int pvm_app_open(struct pvm_pool *p, const char *name, const struct pvm_guid *guid, unsigned flags,
		 struct pvm_app **out, char *err, size_t errlen);
/* Close a handle; an open transaction is aborted. */
void pvm_app_close(struct pvm_app *a);
const struct pvm_guid *pvm_app_guid(const struct pvm_app *a);

/* ------------------------------------------------------------ objects */

#define PVM_F_PROTECTED 1u

struct pvm_info {
	char name[PVM_NAME_MAX];
	struct pvm_oid oid;
	uint64_t size;            /* bytes */
	uint64_t capacity;        /* bytes of pages held */
	uint64_t version;         /* committed changes since creation, from 1 */
	uint32_t history;         /* versions kept (N) */
	uint32_t flags;           /* PVM_F_* */
};

/* Create an object of `size` bytes (zero-filled; size 0 allowed). *ptr (if
 * ptr) receives its data. Errors: -EEXIST, -ENAMETOOLONG, -EINVAL (empty
 * name), -ENOSPC (object table or pool at its maximum), -EDEADLK. */
int pvm_create(struct pvm_app *a, const char *name, uint64_t size, void **ptr);
/* Look an object up: *ptr = its data (zero copy), *info its description
 * (either may be NULL). A write-protected object is mapped read-only in
 * this process. Errors: -ENOENT. */
int pvm_open(struct pvm_app *a, const char *name, void **ptr, struct pvm_info *info);
/* Change the size. Growing beyond the pages held moves the data (the old
 * pointer is invalid then); new bytes read as zero. Errors: -ENOENT,
 * -EPERM (write-protected), -ENOSPC. */
int pvm_resize(struct pvm_app *a, const char *name, uint64_t size, void **ptr);
/* Delete an object and its history. Errors: -ENOENT, -EPERM. */
int pvm_delete(struct pvm_app *a, const char *name);
/* Rename; the object ID changes with the name. Errors: -ENOENT, -EEXIST. */
int pvm_rename(struct pvm_app *a, const char *from, const char *to);
/* Write-protect (on != 0) or unprotect. While protected, stores through
 * pointers from pvm_open fault (SIGSEGV; the pages are mapped read-only in
 * every process that opens it afterwards, and in this one now), and the
 * calls that change it fail with -EPERM. */
int pvm_protect(struct pvm_app *a, const char *name, int on);

/* Store [buf, buf+len) at byte off of the object, transactionally
 * (convenience: pvm_tx_add + memcpy in a transaction). Errors: -ENOENT,
 * -EPERM, -EINVAL (range beyond the size). */
int pvm_write(struct pvm_app *a, const char *name, uint64_t off, const void *buf, size_t len);

/* Iterate over the application's objects, in the order of their IDs:
 * start with *cursor = 0; each call returns 1 and fills *info (if not
 * NULL) with the next object, advancing *cursor, or 0 at the end. Objects
 * that exist during the whole iteration are returned exactly once, even if
 * others are created, deleted or renamed meanwhile (by this or any
 * process); objects created or renamed during it may or may not be, and
 * deleted ones are not returned after their deletion. Errors: -ENOMEM. */
int pvm_iter(struct pvm_app *a, uint64_t *cursor, struct pvm_info *info);

/* ------------------------------------------------------------ history */

struct pvm_version {
	uint64_t version;
	uint64_t size;
};
/* Keep the last n (0..PVM_HISTORY_MAX) committed versions of an object;
 * 0 drops the history. Errors: -ENOENT, -EINVAL (n too large), -ENOSPC. */
int pvm_set_history(struct pvm_app *a, const char *name, unsigned n);
/* The versions kept, newest first, at most max of them; returns the count. */
int pvm_history(struct pvm_app *a, const char *name, struct pvm_version *v, unsigned max);
/* Make a kept version the current content (itself a new version; the
 * current one goes into the history). Errors: -ENOENT (no such object or
 * version not kept), -EPERM. */
int pvm_restore(struct pvm_app *a, const char *name, uint64_t version);

/* ------------------------------------------------------------ transactions */

/* Begin (or nest into) the handle's transaction. -EDEADLK if this thread
 * nests while another thread's transaction is open on the handle cannot
 * happen: the other thread's begin just waits. */
int pvm_tx_begin(struct pvm_app *a);
/* Undo-log [off, off+len) of the object (and lock it) before storing into
 * it through its pointer. Errors: -ENOENT, -EPERM, -EINVAL (out of the
 * object), -ENOSPC (the journal is full: the transaction is too large),
 * -EDEADLK, -ECANCELED (an earlier call of this transaction failed). */
int pvm_tx_add(struct pvm_app *a, const char *name, uint64_t off, uint64_t len);
/* The same for the object whose data pointer (what pvm_create or pvm_open
 * returned: the start of its data) is `data`, as libpmemobj's
 * pmemobj_tx_add_range takes a PMEMoid. For objects this handle created or
 * opened while no other change to the tables has happened since, it reads
 * no descriptor and hashes no name (the handle remembers them); otherwise
 * the object is found again, as by pvm_tx_add. Errors: -EINVAL (not the
 * data pointer of an object of this application, e.g. after the object
 * moved or was deleted, or out of the object), and pvm_tx_add's. */
int pvm_tx_add_ptr(struct pvm_app *a, const void *data, uint64_t off, uint64_t len);
/* pvm_tx_add_ptr with flags (0: the same call):
 * PVM_TX_NO_SNAPSHOT  the range's old bytes matter to nobody (an unused
 *     slot of the application's own structure, space past what it has
 *     published): no undo image is written, the range is locked and
 *     flushed at commit like any other, and an abort or a crash leaves
 *     in it whatever was stored (libpmemobj's POBJ_XADD_NO_SNAPSHOT). A
 *     transaction that publishes such bytes (sets the flag or the count
 *     that makes them reachable) logs that word normally. Keep such a
 *     range off the cache lines of logged ones where it matters: a line in
 *     both is flushed twice at commit, and the second write-back waits for
 *     the first.
 * Errors: pvm_tx_add_ptr's; -EINVAL also for an unknown flag. */
#define PVM_TX_NO_SNAPSHOT 1u
int pvm_tx_xadd_ptr(struct pvm_app *a, const void *data, uint64_t off, uint64_t len, unsigned flags);
/* End the outermost transaction: commit, or abort if a call inside it
 * failed (then that call's error is returned). Inner commits return 0. */
int pvm_tx_commit(struct pvm_app *a);
/* Abort: every byte added and every create/delete/... inside is undone. An
 * inner abort marks the transaction failed; the outermost end aborts. */
int pvm_tx_abort(struct pvm_app *a);

#ifdef __cplusplus
}
#endif
#endif
