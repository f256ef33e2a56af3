/* SPDX-License-Identifier: MIT */
/*
 * What every handler that serves a file from a memory mapping (direct,
 * cache) owes the kernel besides the bytes: the preadv2/pwritev2 flags the
 * file system accepts, and the file times a read or write would change.
 * Part of the mapped-file base (base.h), the one copy both use.
 *
 * Both are decided by the kernel itself, never by a table in Chell:
 *
 *  - Flags. kiocb_set_rw_flags() accepts or refuses a flag combination per
 *    file (FMODE_NOWAIT, FOP_DONTCACHE, DAX, FMODE_CAN_ATOMIC_WRITE, unknown
 *    bits, RWF_APPEND with RWF_NOAPPEND, NOAPPEND on an append-only inode)
 *    before any data moves. A preadv2 of one byte at offset LLONG_MAX - 1
 *    with the same flags asks exactly that question: it fails with the
 *    kernel's errno, or reads nothing (far beyond any end of file). The
 *    answer is remembered per file and combination, so a program that
 *    uses flags pays one probe per combination, not one per call.
 *
 *  - Times. A read through the kernel updates atime as the mount says
 *    (relatime, strictatime, noatime, lazytime) unless the descriptor has
 *    O_NOATIME; a write updates mtime and ctime. A mapped copy changes
 *    neither, so the handler asks the kernel to do it: a 1-byte pread at
 *    the end of file (reads nothing, applies the kernel's own atime rule on
 *    the application's descriptor) and futimens(UTIME_OMIT, UTIME_NOW) for
 *    writes. Once per coarse clock tick per file is enough: within one
 *    tick the kernel's timestamp does not move either, unless someone
 *    looked at it meanwhile (multigrain ctime): a later event in the same
 *    tick is left pending and done before an fstat through Chell, at the
 *    next tick's event, and when the descriptor is closed.
 */
#ifndef CHELL_HANDLERS_MAPPED_H
#define CHELL_HANDLERS_MAPPED_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <sys/uio.h>

#include "chell/handler.h"

/* What the kernel clamps one read or write to (fs.h MAX_RW_COUNT) */
#define MAPPED_MAX_RW_COUNT (INT_MAX & ~4095L)

/* preadv2/pwritev2 flags newer than some installed kernel headers: every
 * handler that looks at them takes them from here (chell/rwf.h). */
#include "chell/rwf.h"

/* ---- flags: a process-local memo of the kernel's answers for one file */
#define MAPPED_RWF_MEMO 6
struct mapped_rwf {
	uint64_t key[MAPPED_RWF_MEMO]; /* flags, and O_APPEND in bit 32 */
	int res[MAPPED_RWF_MEMO];
	unsigned n, next;
};
/* 0 if the kernel accepts `flags` on preadv2/pwritev2 of this file, else
 * -errno as it would answer. `fd` is the application's descriptor (its
 * O_APPEND and access mode matter); a write-only one is reopened
 * read-only through /proc/thread-self/fd for the question. For RWF_ATOMIC the answer is about the flag only (the
 * size rules are the real write's). */
int mapped_rwf_check(struct mapped_rwf *m, int fd, int status, int flags, bool write);

/* ---- iovecs: the kernel copies the array in first (EFAULT if it cannot),
 * rejects more than IOV_MAX entries and negative lengths (EINVAL, for every
 * entry), then a segment outside the user address range (EFAULT, access_ok)
 * and clamps the sum to MAX_RW_COUNT. The same here, reading the
 * array only inside a fault guard (copy.c), so a bad pointer is
 * EFAULT and never a signal. The sum, or -errno. */
ssize_t mapped_iov_total(const struct iovec *iov, int cnt);

/* ---- limits: what the kernel checks before a read or write moves a byte
 * (rw_verify_area, generic_write_check_limits), for the mapped path. */

/* RLIMIT_FSIZE's soft limit, kept by the Nib (chell_fsize_limit, nib.h):
 * a load, not a system call, on every write. */
static inline uint64_t mapped_fsize(void)
{
	extern uint64_t chell_fsize_limit;
	return __atomic_load_n(&chell_fsize_limit, __ATOMIC_RELAXED);
}

/* rw_verify_area: pos + count past LLONG_MAX is EINVAL. `count` is the
 * caller's (read/pread/write/pwrite: unclamped; vectors: the clamped sum,
 * as import_iovec leaves it). */
static inline int mapped_verify_area(uint64_t pos, uint64_t count)
{
	return pos > (uint64_t)LLONG_MAX || count > (uint64_t)LLONG_MAX - pos ? -EINVAL : 0;
}

/* The count rw_verify_area sees: read, pread, write and pwrite pass theirs
 * unclamped; the vector forms the sum import_iovec already clamped
 * (`total`, from mapped_iov_total). */
static inline uint64_t mapped_rw_count(const chell_ctx *c, const struct iovec *iov, ssize_t total)
{
	bool one = c->op == CHELL_OP_READ || c->op == CHELL_OP_PREAD || c->op == CHELL_OP_WRITE ||
		   c->op == CHELL_OP_PWRITE;
	return one ? (uint64_t)iov[0].iov_len : (uint64_t)total;
}

/* What a write of `count` bytes at `pos` may move: count cut at the
 * RLIMIT_FSIZE limit, or -EFBIG at or past it (the caller then raises
 * SIGXFSZ with mapped_write_refused, once). The file system's own largest
 * size cannot matter below the current end of file, and writes that extend
 * the file go through the kernel, which checks it. */
static inline ssize_t mapped_write_room(uint64_t pos, size_t count)
{
	uint64_t lim = mapped_fsize();
	if (__builtin_expect(pos + count <= lim, 1))
		return (ssize_t)count;
	if (pos >= lim)
		return -EFBIG;
	return (ssize_t)(lim - pos);
}
/* -EFBIG from mapped_write_room: SIGXFSZ to the calling thread, as the
 * kernel sends it (ignored, caught or fatal as the application set it). */
ssize_t mapped_write_refused(ssize_t e);

/* Where a non-appending write of `count` bytes lands and how much of it
 * the limit lets through: at `off`, or (off == -1) at the shared offset
 * *offp, which is advanced by that much atomically, so concurrent writers
 * of one description get disjoint ranges. The count (in *pos), or -EFBIG
 * after SIGXFSZ (call with no lock held: a handler may run). */
static inline ssize_t mapped_write_claim(uint64_t *offp, off_t off, size_t count, uint64_t *pos)
{
	uint64_t p = off >= 0 ? (uint64_t)off : __atomic_load_n(offp, __ATOMIC_RELAXED);
	for (;;) {
		ssize_t room = mapped_write_room(p, count);
		if (room < 0)
			return mapped_write_refused(room);
		if (off >= 0 || __atomic_compare_exchange_n(offp, &p, p + (uint64_t)room, true,
							    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			*pos = p;
			return room;
		}
	}
}

/* lseek SEEK_SET, SEEK_CUR and SEEK_END on an offset kept in user space
 * (*offp), as generic_file_llseek answers: a negative or overflowing result
 * is EINVAL, and so is one past the file system's largest size
 * (chell_maxbytes, asked only past 2 GiB). `size` is
 * the file's size (used by SEEK_END only); fd is the kernel descriptor. */
off_t mapped_lseek(uint64_t *offp, int fd, off_t off, int whence, uint64_t size);

/* The lseek shortcut (chell_fast_ops.lseek) of a handler that keeps the
 * offset in *offp: SEEK_SET to a position every file system accepts
 * (below 2 GiB, so no s_maxbytes question) and SEEK_CUR by 0; anything else
 * is CHELL_FAST_MISS and goes to mapped_lseek. A plain store, not an
 * exchange: a concurrent read or write of the description reserves its
 * range with a compare-and-swap, which either sees the new offset or fails
 * and retries, so the seek is ordered before or after it as in the kernel;
 * and a locked instruction would wait for the previous call's copy to
 * complete, where nothing needs it to. */
static inline off_t mapped_fast_lseek(uint64_t *offp, off_t off, int whence)
{
	if (whence == SEEK_SET && off >= 0 && off <= (off_t)INT_MAX) {
		__atomic_store_n(offp, (uint64_t)off, __ATOMIC_RELEASE);
		return off;
	}
	if (whence == SEEK_CUR && off == 0)
		return (off_t)__atomic_load_n(offp, __ATOMIC_ACQUIRE);
	return CHELL_FAST_MISS;
}

/* After a seek to `p`'s offset (SEEK_SET), a read or write there nearly
 * always follows. pread's offset is known to the CPU early, so out-of-order
 * execution starts the next call's cache and TLB misses while this one
 * finishes; behind lseek + read the address is only known deep inside
 * read, and each call pays the misses whole (measured: 512 B random
 * lseek + read 1.35x pread's time with a prefetch of two lines, 1.04x with
 * 512 bytes; 4 KB 0.85x). So before a read the seek prefetches up to 512
 * bytes, not past p's page (no second page walk for a guess).
 * Before a write, one line only: it starts the page walk, and the copy's
 * stores allocate their lines themselves; fetching 512 bytes a store will
 * overwrite costs more than it saves (measured on a 1 GB file, 4 KB random
 * lseek + write: 1.2x pwrite's time with 512 bytes, 1.0-1.05x with one
 * line; prefetchw no better). A prefetch never faults. */
static inline void mapped_prefetch(const unsigned char *p, bool for_write)
{
	/* asm: gcc 12 emitted no instruction for __builtin_prefetch here
	 * (checked with objdump: fast_lseek had none) */
	size_t room = 4096 - ((uintptr_t)p & 4095), n = for_write ? 1 : room < 512 ? room : 512;
	for (size_t i = 0; i < n; i += 64)
		__asm__ volatile("prefetcht0 %0" : : "m"(p[i]));
}

/* Before a copy of n bytes out of a mapping (a read): ask for every line
 * of [p, p+n) at once when n is 1-8 KB. The copy loads the lines in order
 * and the hardware prefetcher does not cross into a new 4 KB page, so a
 * read of a page that is not in cache waited for its lines a few at a
 * time; asked for together, their misses overlap. Measured with
 * chell_bench_lat (1 GB file on tmpfs, direct mode, 3 runs each):
 * sequential 4 KB reads 206-225 -> 131-143 ns, random 4 KB 395-521 ->
 * 392-471 ns (page walk first); 512 B and 64 KB unchanged (too few lines;
 * the stream prefetcher). Not before writes: prefetchw on the destination
 * made fio's 4 KB random writes 25-30 % slower (a store's read for
 * ownership allocates the line anyway, and these wait for it early). A
 * prefetch never faults. */
static inline void mapped_prefetch_read(const unsigned char *p, size_t n)
{
	if (n < 1024 || n > 8192)
		return;
	const unsigned char *end = p + n;
	for (const unsigned char *a = (const unsigned char *)((uintptr_t)p & ~(uintptr_t)63) + 64; a < end;
	     a += 64)
		__asm__ volatile("prefetcht0 %0" : : "m"(*a));
}

/* ---- leases. The kernel grants F_SETLEASE by counting the inode's open
 * files: a read lease only if none is open for writing, a write lease only
 * if the taker's is the only one; and any conflicting open breaks a lease.
 * A mapped file holds files of Chell's own (a writable reopen behind a
 * read-only descriptor, the mapping's reference on the file, a manager's
 * descriptor), so before the application takes a lease the file leaves the
 * mapped path in the process (cache: also in the manager) until its last
 * close there, and Chell opens it no more: the counts are the
 * application's own. Releasing (F_UNLCK) changes nothing. */
static inline bool mapped_takes_lease(int cmd, unsigned long arg)
{
	return cmd == F_SETLEASE && (int)arg != F_UNLCK;
}

/* ---- times: shared by the process tree, inside the per-file entry */
struct mapped_times {
	uint64_t atime_tick, mtime_tick; /* coarse ns of the last kernel update (atomic) */
	uint32_t atime_pending, mtime_pending;
};

static inline uint64_t mapped_tick(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME_COARSE, &ts); /* vDSO: no system call */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void mapped_atime_slow(struct mapped_times *t, int fd, uint64_t tick, uint64_t eof);
void mapped_mtime_slow(struct mapped_times *t, int fd, uint64_t tick);

/* A read of `fd` was served (or answered at end of file) from the mapping;
 * `eof` is the file size as last known (where the kernel touch reads). */
static inline void mapped_read_done(struct mapped_times *t, int fd, int status, uint64_t eof)
{
	if (status & O_NOATIME) /* the kernel never touches atime for it */
		return;
	uint64_t tick = mapped_tick();
	if (__builtin_expect(__atomic_load_n(&t->atime_tick, __ATOMIC_RELAXED) == tick, 1)) {
		if (!__atomic_load_n(&t->atime_pending, __ATOMIC_RELAXED))
			__atomic_store_n(&t->atime_pending, 1, __ATOMIC_RELAXED);
		return;
	}
	mapped_atime_slow(t, fd, tick, eof);
}

/* A file's budget of reads the kernel serves before anything is mapped
 * (direct.map_after, warp.map_after): a file opened for a read or two and
 * closed never pays for a mapping and its unmapping (~40 us against ~3 us
 * for an open, a small read and a close through the kernel). Takes one
 * read from *left; false once it is spent (or zeroed: something mapped). */
static inline bool mapped_budget_take(_Atomic uint32_t *left)
{
	uint32_t v = atomic_load_explicit(left, memory_order_relaxed);
	if (__builtin_expect(!v, 1))
		return false;
	while (v && !atomic_compare_exchange_weak_explicit(left, &v, v - 1, memory_order_relaxed,
							   memory_order_relaxed))
		;
	return v != 0;
}

/* A handler's transfer sets it when the kernel read every byte (direct's
 * first reads, direct.map_after): the kernel touched atime itself, and
 * read_op records that touch (mapped_kernel_read_done) instead of owing
 * one, which a later flush would make after a write moved mtime. */
extern __thread bool mapped_read_by_kernel;

static inline void mapped_kernel_read_done(struct mapped_times *t, int status)
{
	if (status & O_NOATIME)
		return;
	__atomic_store_n(&t->atime_tick, mapped_tick(), __ATOMIC_RELAXED);
	__atomic_store_n(&t->atime_pending, 0, __ATOMIC_RELAXED);
}

/* Before a read that may reach the kernel (a handler's fallback, WARP's
 * normal nodes): a write's mtime still owed goes first, or the kernel's
 * relatime finds atime newer than the old mtime and leaves atime alone. */
static inline void mapped_mtime_settle(struct mapped_times *t, int fd)
{
	if (__builtin_expect(__atomic_load_n(&t->mtime_pending, __ATOMIC_RELAXED) != 0, 0) &&
	    __atomic_exchange_n(&t->mtime_pending, 0, __ATOMIC_RELAXED))
		mapped_mtime_slow(t, fd, mapped_tick());
}

/* Bytes were stored into the file through the mapping. */
static inline void mapped_write_done(struct mapped_times *t, int fd)
{
	uint64_t tick = mapped_tick();
	if (__builtin_expect(__atomic_load_n(&t->mtime_tick, __ATOMIC_RELAXED) == tick, 1)) {
		if (!__atomic_load_n(&t->mtime_pending, __ATOMIC_RELAXED))
			__atomic_store_n(&t->mtime_pending, 1, __ATOMIC_RELAXED);
		return;
	}
	mapped_mtime_slow(t, fd, tick);
}

/* Before the times may be looked at (fstat through Chell, close): do what
 * is pending. */
void mapped_times_flush(struct mapped_times *t, int fd, int status, uint64_t eof);

#endif
