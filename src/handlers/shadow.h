/* SPDX-License-Identifier: MIT */
/*
 * shadow.h - internals of the shadow handler, shared by src/handlers/shadow*.c
 * and by the unit tests (the name and lock modules depend only on chell/sys.h
 * so they can be linked into a test without the rest of the library).
 *
 *   shadow.c         the handler: open, every operation, compare, release.
 *   shadow_name.c    shadow file names (percent-encoding of the path).
 *   shadow_lock.c    a futex lock that works across processes and survives
 *                    the death of its holder.
 *   shadow_report.c  the operation history and the divergence report.
 */
#ifndef CHELL_SHADOW_H
#define CHELL_SHADOW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- shadow_name.c ---- */

/*
 * Longest shadow file name we produce. Below NAME_MAX (255) with room for the
 * "~<inode>" suffix that makes a name unique when two live inodes would share
 * one (a path unlinked and re-created while the old file is still open).
 */
#define SHADOW_NAME_MAX 200
#define SHADOW_NAME_BUF 240

/*
 * The shadow file name of absolute path `path`: '%' -> "%25", '/' -> "%2F",
 * other bytes unchanged, so the mapping is injective and readable. A name
 * that would exceed SHADOW_NAME_MAX keeps its last part (the file name, the
 * most useful bit when reading a shadow directory) behind a 64-bit FNV-1a
 * hash of the whole path: "#<16 hex>#<tail>". Returns the length written
 * into out (always < SHADOW_NAME_BUF, NUL-terminated).
 */
size_t shadow_mangle(const char *path, char out[SHADOW_NAME_BUF]);
/* Inverse of shadow_mangle for names that were not hashed; -1 if malformed or hashed. */
int shadow_unmangle(const char *name, char *out, size_t outlen);
uint64_t shadow_fnv1a(const char *s);

/* ---- shadow_lock.c ---- */

/*
 * A mutex living in memory shared by every process of the tree. The word
 * follows the classic three-state futex protocol (0 free, 1 held, 2 held with
 * waiters). Waiters sleep with a timeout and, if the holder's process no
 * longer exists (kill(pid, 0) == ESRCH), one of them takes the lock over, so a
 * program killed in the middle of an operation does not hang its siblings.
 * Re-entrant for the owning thread.
 */
struct shadow_lock {
	uint32_t word;
	int32_t owner_pid;
	int32_t owner_tid;
	uint32_t depth;
};

void shadow_lock_acquire(struct shadow_lock *l);
void shadow_lock_release(struct shadow_lock *l);
/* Number of times a dead holder's lock was taken over (for tests/diagnostics). */
unsigned long shadow_lock_recoveries(void);

/* ---- shadow_report.c ---- */

/* One remembered operation. */
struct shadow_hist {
	uint64_t seq;      /* per-process sequence number, 0 = empty slot */
	int32_t tid;
	int32_t op;        /* enum chell_op */
	int32_t fd;
	int32_t nargs;
	int64_t args[4];   /* sizes, offsets, flags: meaning depends on op */
	int64_t r_test;    /* result of the handler under test */
	int64_t r_shadow;  /* result on the shadow copy */
	int64_t off_test;  /* file offsets after the op (-1 if not applicable) */
	int64_t off_shadow;
	int32_t note;      /* SHADOW_NOTE_*: why differing results were accepted */
};

/* The results differ because the file systems differ; the file's stands and
 * the copy was brought back in step with it (shadow_fs_dependent). */
#define SHADOW_NOTE_FS 1
/* The copy may not be changed with this process's credentials; it was made
 * to follow the file where it could (path truncate). */
#define SHADOW_NOTE_CREDS 2

/* Allocate the ring (n entries, 0 disables the history). 0 or -errno. */
int shadow_hist_init(unsigned n);
/* Claim the next slot and fill the fixed part; returns it for the results. */
struct shadow_hist *shadow_hist_add(int op, int fd, int nargs, const int64_t *args);
/* Number of slots the ring holds. */
unsigned shadow_hist_size(void);

/* A small append-only text buffer for the report (no allocation). */
struct shadow_buf {
	char *p;
	size_t len, cap;
};
void sb_puts(struct shadow_buf *b, const char *s);
void sb_printf(struct shadow_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Write the divergence report (header text from the caller, then the
 * history oldest first) to report_path and to stderr, then abort the
 * process. Never returns.
 */
__attribute__((noreturn)) void shadow_report_and_abort(const char *report_path,
							const char *what, size_t what_len);
/* Append the history, oldest first, to b (used by the report and by tests). */
void shadow_hist_format(struct shadow_buf *b);

/* Name of an errno value ("ENOENT"), or NULL. */
const char *shadow_errname(long err);

/* ---- shadow.c / shadow_ops.c (need the library: handler.h) ---- */
#ifdef CHELL_HANDLER_H

/*
 * The shared per-inode table, in chell_shared_area("shadow.inodes"): one
 * entry per file (dev, ino) with at least one open file description under
 * shadow anywhere in the process tree. `opens` counts those descriptions;
 * an entry with opens == 0 is free, and the next first open of its inode
 * refreshes the shadow copy.
 */
#define SHADOW_INODES 2048

struct shadow_inode {
	struct shadow_lock lock;   /* serialises primary+shadow pairs on this file */
	uint64_t dev, ino;
	uint32_t opens;
	uint32_t flags;            /* SHADOW_F_* */
	char name[SHADOW_NAME_BUF]; /* shadow file name inside shadow.dir */
};

/* The file and its shadow are on the same file system type. */
#define SHADOW_F_SAME_FS 1u
/* Mapped shared through a description that allows writing (PROT_WRITE now or
 * after an mprotect): stores through the mapping reach the file but not its
 * shadow, and no call tells us when, so data and hole layout are no longer
 * compared (results, offsets and sizes still are). */
#define SHADOW_F_MAPPED 4u
/* The shadow copy could not be brought back in step with the file after a
 * result that depends on the file system (see shadow_fs_dependent): data is
 * no longer compared. */
#define SHADOW_F_NODATA 8u
/* The copy cannot even take the file's size (it is beyond what the shadow's
 * file system allows): the file is no longer checked at all. */
#define SHADOW_F_OFF 16u
/* Any: the bytes of the copy are not those of the file. */
#define SHADOW_F_NOCONTENT (SHADOW_F_MAPPED | SHADOW_F_NODATA | SHADOW_F_OFF)

/*
 * Files mapped shared and writable anywhere in the tree. A mapping outlives
 * the descriptor it was made from (and munmap is not seen), so the mark is
 * kept per inode for the life of the tree, not in the inode entry that is
 * freed at the last close: a reopen of the file starts out MAPPED.
 */
#define SHADOW_MAPPED_MAX 1024

struct shadow_table {
	struct shadow_lock glock;  /* guards allocation/lookup of entries */
	struct shadow_inode ent[SHADOW_INODES];
	uint32_t nmapped;          /* slots claimed (lock-free: taken under an inode lock) */
	struct {
		uint64_t dev, ino;
		uint32_t ready;    /* set (release) once dev and ino are stored */
	} mapped[SHADOW_MAPPED_MAX];
};

/* What the shadow layer keeps in ofd->priv[layer] (shared by all processes). */
struct shadow_priv {
	int32_t sfd;       /* shadow descriptor (internal, inherited like the OFD) */
	uint32_t ent;      /* 1 + index in the inode table; 0 = not shadowed */
	uint64_t sdev, sino; /* identity of the shadow file, to validate sfd after exec */
	uint32_t escaped;  /* handed to a process outside Chell: no longer compared */
	uint32_t pad_;
};
/* its size is checked against CHELL_PRIV_BYTES where the handler is defined (CHELL_HANDLER_PRIV) */

/* Process-local state (f->local[layer]), allocated on demand. */
struct shadow_local {
	int sfd;  /* reopened shadow fd after exec if the inherited one was lost, else -1 */
	int vfd;  /* read-only kernel fd on the primary inode (write-only and O_DIRECT
		   * OFDs; read-back without touching atime), -1/-2 */
	int vnoatime; /* vfd has O_NOATIME: 1, it could not (not the owner): -1, 0 unknown */
	int svfd; /* read-only fd on the shadow file (write-only OFDs), -1/-2 */
};

/* One operation in progress. */
struct shadow_op {
	chell_ctx *c;
	struct shadow_inode *e;
	int sfd;
	struct shadow_hist *h;
};

extern struct shadow_table *shadow_tab;
extern char shadow_dir[];

struct shadow_table *shadow_table_get(void);
/* Remember that (dev, ino) is mapped shared and writable (lock-free). */
void shadow_mark_mapped(uint64_t dev, uint64_t ino);
/* Start/finish an operation on an open file: NULL if the file is not shadowed. */
struct shadow_inode *shadow_op_begin(chell_ctx *c, struct shadow_op *o);
void shadow_op_end(struct shadow_op *o);
void shadow_lock_push(struct shadow_lock *l);
void shadow_lock_pop(struct shadow_lock *l);
/* Open a file for shadow's own use (raw openat from AT_FDCWD; -errno). */
int shadow_own_open(const char *path, int flags, mode_t mode);
/* shadow_own_open of a file only shadow reads (flags without O_NOATIME):
 * with O_NOATIME where permitted (owner or CAP_FOWNER), so that shadow's
 * own reads leave the file's atime as the application's calls leave it. */
int shadow_own_open_noatime(const char *path, int flags);
/* The shadow path of an entry. */
void shadow_entry_path(const struct shadow_inode *e, char *out, size_t outlen);
/* The context to run the reference operation through chell_posix_handler. */
chell_ctx shadow_ref_ctx(const struct shadow_op *o);

/* Report a divergence and abort (never returns). */
__attribute__((noreturn, format(printf, 2, 3))) void shadow_diverge(const struct shadow_op *o,
								  const char *fmt, ...);
/* Describe the first differing bytes of two buffers at file offset `at`. */
__attribute__((noreturn)) void shadow_diverge_data(const struct shadow_op *o, const char *what,
						   uint64_t at, const unsigned char *want,
						   const unsigned char *got, size_t n);

extern const struct chell_handler chell_shadow_handler;
/* Number of files currently mirrored by this tree (open inodes). */
int chell_shadow_open_inodes(void);

/* shadow_ops.c: data and metadata operations. */
ssize_t shadow_read(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
ssize_t shadow_write(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
off_t shadow_lseek(chell_ctx *c, off_t off, int whence);
int shadow_fsync(chell_ctx *c, int datasync);
int shadow_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags);
int shadow_ftruncate(chell_ctx *c, off_t len);
int shadow_fallocate(chell_ctx *c, int mode, off_t off, off_t len);
int shadow_fstat(chell_ctx *c, struct stat *st);
int shadow_fcntl(chell_ctx *c, int cmd, unsigned long arg);
void *shadow_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off);
/*
 * r1 (under test) and r2 (shadow) differ in a way the file system alone can
 * explain - the copy is on another kind of file system and one side answered
 * EOPNOTSUPP, EINVAL, EFBIG, ENOSPC or EDQUOT (fallocate modes, O_DIRECT
 * alignment, maximum file size). Then the file under test is right by
 * definition: the copy is brought back in step with it over [lo, hi)
 * (shadow_resync), the history notes it, and 1 is returned (the caller skips its other checks).
 * 0 if the difference is a divergence or there is none.
 */
int shadow_fs_dependent(struct shadow_op *o, const char *what, long r1, long r2, off_t lo,
			off_t hi);
/* -r is one of the errnos above, which a file system may give where another does not. */
int shadow_fs_errno(long r);
/*
 * Make the copy's size and offset those of the file, and its bytes in
 * [lo, hi) (hi < 0: to the end) - the range the operation may have changed
 * on either side; the rest was in step before it.
 */
void shadow_resync(struct shadow_op *o, off_t lo, off_t hi);
/* Compare [start, start+len) of the file as the handler under test and the shadow see it. */
void shadow_check_range(struct shadow_op *o, const char *what, off_t start, off_t len);
/* Compare the whole files: sizes, then content (kernel view: read-only fds on both). */
void shadow_check_whole(struct shadow_op *o, int pfd, int sfd, const char *what);

#endif /* CHELL_HANDLER_H */

#endif
