/* SPDX-License-Identifier: MIT */
/*
 * shadow: the per-descriptor operations. Each one, under the inode lock:
 *   1. runs on the handler under test (chell_down_*),
 *   2. runs with the same arguments through chell_posix_handler on the
 *      shadow descriptor,
 *   3. compares what the application can observe: the result or -errno,
 *      bytes read, the file offset afterwards, and for operations that change
 *      the file, the file size and the bytes of the range they touched.
 * The first difference is reported (shadow_diverge) and the process aborts.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chell/handler.h"
#include "mapped/mapped.h"
#include "chell/sys.h"
#include "shadow.h"
#include "../nib/nib.h" /* chell_info */

#ifndef FALLOC_FL_COLLAPSE_RANGE
#define FALLOC_FL_COLLAPSE_RANGE 0x08
#endif
#ifndef FALLOC_FL_INSERT_RANGE
#define FALLOC_FL_INSERT_RANGE 0x20
#endif

#define POSIX (&chell_posix_handler)
/* The kernel's cap on one read or write (MAX_RW_COUNT). */
#define MAX_RW 0x7ffff000L
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

static const char *rn(long r, char *buf, size_t n)
{
	if (r < 0 && r > -4096) {
		const char *e = shadow_errname(-r);
		buf[0] = '-';
		strncpy(buf + 1, e ? e : "?", n - 2);
		buf[n - 1] = '\0';
	} else {
		/* no snprintf needed for a decimal */
		char tmp[24];
		int i = 0, neg = r < 0;
		unsigned long v = neg ? (unsigned long)-r : (unsigned long)r;
		do
			tmp[i++] = (char)('0' + v % 10);
		while ((v /= 10) && i < 22);
		size_t k = 0;
		if (neg)
			buf[k++] = '-';
		while (i && k + 1 < n)
			buf[k++] = tmp[--i];
		buf[k] = '\0';
	}
	return buf;
}

static void check_result(const struct shadow_op *o, const char *what, long r1, long r2)
{
	if (r1 == r2)
		return;
	char b1[40], b2[40];
	shadow_diverge(o, "%s returned %s under test, %s on the shadow", what, rn(r1, b1, sizeof(b1)),
		       rn(r2, b2, sizeof(b2)));
}

/* ------------------------------------------------------------ scratch memory */

/* Small requests use the stack; larger ones an anonymous mapping, because
 * this runs on application threads whose stacks may be small. */
#define SMALL_BYTES 4096

struct scratch {
	void *map;
	size_t maplen;
	char small[SMALL_BYTES];
};

static void *scratch_get(struct scratch *s, size_t n)
{
	s->map = NULL;
	if (n <= sizeof(s->small))
		return s->small;
	s->maplen = (n + 4095) & ~(size_t)4095;
	long r = CHELL_SC(SYS_mmap, 0, s->maplen, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r < 0 && r > -4096)
		return NULL;
	s->map = (void *)r;
	return s->map;
}

static void scratch_put(struct scratch *s)
{
	if (s->map)
		CHELL_SC(SYS_munmap, s->map, s->maplen, 0, 0, 0, 0);
}

/* Total length, or SSIZE_MAX if it overflows (the kernel says EINVAL). */
static size_t iov_total(const struct iovec *iov, int cnt)
{
	size_t n = 0;
	if (cnt < 0 || cnt > IOV_MAX)
		return 0; /* the array itself was checked by the Nib (handler.h) */
	for (int i = 0; i < cnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - n)
			return SSIZE_MAX;
		n += iov[i].iov_len;
	}
	return n;
}

/* ----------------------------------------------------------------- checks */

/*
 * Written data is read back for comparison. A write-only open file
 * description cannot be read, and an O_DIRECT one only at block-aligned
 * offsets, counts and buffers (ranges of any alignment are checked); so for
 * those, data is read through read-only, buffered descriptors of our own:
 * on the primary inode (reopened through /proc/thread-self/fd, which works even if
 * the file was unlinked) and on the shadow. Opened on first need, kept per
 * process.
 */
static int reads_via_views(chell_ctx *c)
{
	int fl = __atomic_load_n(&c->f->ofd->status_flags, __ATOMIC_RELAXED);
	return (fl & O_ACCMODE) == O_WRONLY || (fl & O_DIRECT);
}

static int reopen_ro(int fd)
{
	char link[CHELL_FD_PATH_MAX];
	int r = shadow_own_open_noatime(chell_fd_path(link, fd), O_RDONLY | O_CLOEXEC);
	return r >= 0 ? chell_internal_fd(r, 1) : -1;
}

static struct shadow_local *local_of(chell_ctx *c)
{
	struct shadow_local *l = c->f->local[c->layer];
	if (!l) {
		l = malloc(sizeof(*l));
		if (!l)
			return NULL;
		l->sfd = -1;
		l->vfd = l->svfd = -2;
		l->vnoatime = 0;
		c->f->local[c->layer] = l;
	}
	return l;
}

/*
 * The view on the primary inode, or -1. A write lease counts every open
 * file of the inode (mapped.h): the view must not exist when the
 * application takes one (shadow_fcntl drops it), and opening it while one
 * is held would break the application's lease. Read leases care about
 * writers only, never about a read-only view.
 */
static int primary_view(chell_ctx *c)
{
	struct shadow_local *l = local_of(c);
	if (!l)
		return -1;
	if (l->vfd == -2) {
		if (sys_fcntl(c->fd, F_GETLEASE, 0) == F_WRLCK)
			return -1; /* not now: asked again after the lease */
		l->vfd = reopen_ro(c->fd);
	}
	return l->vfd;
}

static struct shadow_local *verify_fds(struct shadow_op *o)
{
	chell_ctx *c = o->c;
	struct shadow_local *l = local_of(c);
	if (!l || primary_view(c) < 0)
		return NULL;
	if (l->svfd == -2)
		l->svfd = reopen_ro(o->sfd);
	return l->svfd >= 0 ? l : NULL;
}

/* Read the primary at pos as the application would see it, and the shadow. */
/* The handler under test keeps written data where the kernel does not see
 * it yet (cache mode: in the pool until write-back; warp: in its buffer), so a write-only or
 * O_DIRECT description's data cannot be read back through a kernel
 * descriptor; the comparison at the last close (after cache mode's
 * write-back) checks it. */
extern const struct chell_handler chell_cache_handler, chell_warp_handler;
static int below_keeps_data(chell_ctx *c)
{
	if (c->layer + 1 >= c->f->stack->depth)
		return 0;
	const struct chell_handler *h = c->f->stack->handlers[c->layer + 1];
	return h == &chell_cache_handler || h == &chell_warp_handler; /* warp: its write buffer */
}

/*
 * A read through the layer under test touches atime as the application's
 * read would, which a write never does: where the kernel holds the written
 * bytes (every handler but cache, whose pool keeps them until write-back),
 * a check reads them through the primary view, opened O_NOATIME. It is
 * kept, not opened per check: closing any descriptor of a file drops the
 * process's POSIX record locks on it. -1 where that cannot be: O_NOATIME
 * not permitted (neither owner nor CAP_FOWNER: remembered per file; the
 * layer under test is read, and atime may move), a write lease held
 * (primary_view), or cache below. Not to be closed by the caller.
 */
static int noatime_fd(struct shadow_op *o)
{
	chell_ctx *c = o->c;
	struct shadow_local *l = local_of(c);
	if (!l || l->vnoatime < 0 || reads_via_views(c) || below_keeps_data(c))
		return -1;
	int fd = primary_view(c);
	if (fd >= 0 && !l->vnoatime)
		l->vnoatime = (sys_fcntl(fd, F_GETFL, 0) & O_NOATIME) ? 1 : -1;
	return l->vnoatime > 0 ? fd : -1;
}

/* Read the primary at pos as the application would see it: through tfd
 * (noatime_fd) if there is one. */
static ssize_t primary_pread(struct shadow_op *o, int tfd, void *buf, size_t n, off_t pos)
{
	chell_ctx *c = o->c;
	if (reads_via_views(c)) {
		struct shadow_local *l = verify_fds(o);
		return l ? sys_pread(l->vfd, buf, n, pos) : -EBADF;
	}
	if (tfd >= 0)
		return sys_pread(tfd, buf, n, pos);
	chell_ctx rc = *c;
	rc.op = CHELL_OP_PREAD;
	struct iovec v = {buf, n};
	return chell_down_read(&rc, &v, 1, pos, 0);
}

static ssize_t shadow_pread(struct shadow_op *o, void *buf, size_t n, off_t pos)
{
	if (reads_via_views(o->c)) {
		struct shadow_local *l = verify_fds(o);
		return l ? sys_pread(l->svfd, buf, n, pos) : -EBADF;
	}
	return sys_pread(o->sfd, buf, n, pos);
}

void shadow_check_range(struct shadow_op *o, const char *what, off_t start, off_t len)
{
	if (len <= 0 || (o->e->flags & SHADOW_F_NOCONTENT))
		return;
	if (reads_via_views(o->c) && (!verify_fds(o) || below_keeps_data(o->c)))
		return; /* cannot read it back (no /proc): results and sizes still checked */
	struct scratch s;
	size_t chunk = len <= SMALL_BYTES / 2 ? SMALL_BYTES / 2 : 256 * 1024;
	unsigned char *a = scratch_get(&s, 2 * chunk);
	if (!a)
		return;
	unsigned char *b = a + chunk;
	off_t pos = start, end = start + len;
	int tfd = noatime_fd(o);
	while (pos < end) {
		size_t want = (size_t)(end - pos) < chunk ? (size_t)(end - pos) : chunk;
		ssize_t r1 = primary_pread(o, tfd, b, want, pos);
		ssize_t r2 = shadow_pread(o, a, want, pos);
		if (r1 != r2) {
			char b1[40], b2[40];
			shadow_diverge(o, "%s: reading back %zu bytes at %lld returned %s under test,"
				       " %s on the shadow", what, want, (long long)pos,
				       rn(r1, b1, sizeof(b1)), rn(r2, b2, sizeof(b2)));
		}
		if (r1 <= 0)
			break;
		if (memcmp(a, b, (size_t)r1) != 0)
			shadow_diverge_data(o, what, (uint64_t)pos, a, b, (size_t)r1);
		pos += r1;
	}
	scratch_put(&s);
}

void shadow_check_whole(struct shadow_op *o, int pfd, int sfd, const char *what)
{
	struct stat s1, s2;
	if (sys_fstat(pfd, &s1) < 0 || sys_fstat(sfd, &s2) < 0)
		return;
	if (s1.st_size != s2.st_size)
		shadow_diverge(o, "%s: the file has %lld bytes, its shadow %lld", what,
			       (long long)s1.st_size, (long long)s2.st_size);
	struct scratch s;
	size_t chunk = 1 << 20;
	unsigned char *a = scratch_get(&s, 2 * chunk);
	if (!a)
		return;
	unsigned char *b = a + chunk;
	for (off_t pos = 0; pos < s1.st_size;) {
		ssize_t r1 = sys_pread(pfd, b, chunk, pos);
		ssize_t r2 = sys_pread(sfd, a, chunk, pos);
		if (r1 != r2)
			shadow_diverge(o, "%s: reading at %lld: %zd bytes from the file, %zd from the"
				       " shadow", what, (long long)pos, r1, r2);
		if (r1 <= 0)
			break;
		if (memcmp(a, b, (size_t)r1) != 0)
			shadow_diverge_data(o, what, (uint64_t)pos, a, b, (size_t)r1);
		pos += r1;
	}
	scratch_put(&s);
}

/* ------------------------------------------------- file-system differences */

int shadow_fs_errno(long r)
{
	return r == -EOPNOTSUPP || r == -EINVAL || r == -EFBIG || r == -ENOSPC || r == -EDQUOT;
}

int shadow_fs_dependent(struct shadow_op *o, const char *what, long r1, long r2, off_t lo,
			off_t hi)
{
	if (r1 == r2 || (o->e->flags & SHADOW_F_SAME_FS) || !(shadow_fs_errno(r1) || shadow_fs_errno(r2)))
		return 0;
	char b1[40], b2[40];
	chell_info("shadow: %s returned %s on %s, %s on its shadow: the file systems differ"
		   " (not a divergence); the shadow copy follows the file", what,
		   rn(r1, b1, sizeof(b1)), o->c->f && o->c->f->path ? o->c->f->path : "?",
		   rn(r2, b2, sizeof(b2)));
	if (o->h) {
		o->h->r_shadow = r2;
		o->h->note = SHADOW_NOTE_FS;
	}
	shadow_resync(o, lo, hi);
	return 1;
}

void shadow_resync(struct shadow_op *o, off_t lo, off_t hi)
{
	chell_ctx *c = o->c;
	chell_ctx fc = *c;
	fc.op = CHELL_OP_FSTAT;
	struct stat st, sst, wst;
	char spath[PATH_MAX];
	shadow_entry_path(o->e, spath, sizeof(spath));
	int wfd = -1, ok = 0, readable = 0;
	int have = chell_down_fstat(&fc, &st) == 0 && sys_fstat(o->sfd, &sst) == 0;
	if (have && st.st_size == sst.st_size && (hi >= 0 && lo >= hi)) {
		ok = 1; /* nothing but the offset to follow (a read) */
	} else if (have) {
		/* Bytes as the application would read them: the handler's view,
		 * or for a write-only description the kernel's; not when the
		 * layer below keeps data the kernel has not seen yet (cache
		 * mode's pool). The size is followed even then: sizes and
		 * counts stay comparable when the data no longer is. */
		readable = !(reads_via_views(c) && (!verify_fds(o) || below_keeps_data(c)));
		/* A transient descriptor: the shadow's own may be read-only or O_APPEND. */
		wfd = shadow_own_open(spath, O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		if (wfd >= 0 && (sys_fstat(wfd, &wst) < 0 || wst.st_dev != sst.st_dev ||
				 wst.st_ino != sst.st_ino)) {
			sys_close(wfd);
			wfd = -1;
		}
	}
	int tr = wfd >= 0 ? sys_ftruncate(wfd, st.st_size) : -EBADF;
	if (wfd >= 0 && tr < 0) {
		/* The file is larger than the shadow's file system allows: no
		 * comparison is meaningful any more (shadow_op_begin skips it). */
		__atomic_or_fetch(&o->e->flags, SHADOW_F_OFF, __ATOMIC_RELAXED);
		chell_log("shadow: the shadow copy %s cannot take the size %lld of %s (%s on the"
			  " file system of shadow.dir); the file is no longer checked", spath,
			  (long long)st.st_size, c->f && c->f->path ? c->f->path : "?", strerror(-tr));
		sys_close(wfd);
		return;
	}
	if (wfd >= 0) {
		if (hi < 0 || hi > st.st_size)
			hi = st.st_size;
		if (lo < 0)
			lo = 0;
	}
	if (wfd >= 0 && !readable) {
		ok = lo >= hi;
	} else if (wfd >= 0) {
		struct scratch s;
		size_t chunk = 256 * 1024;
		unsigned char *buf = lo < hi ? scratch_get(&s, chunk) : NULL;
		ok = lo >= hi || buf != NULL;
		/* Whole, aligned chunks (an O_DIRECT description reads nothing else). */
		int tfd = noatime_fd(o);
		for (off_t pos = lo & ~(off_t)4095; ok && pos < hi;) {
			ssize_t r = primary_pread(o, tfd, buf, chunk, pos);
			if (r <= 0) {
				ok = r == 0;
				break;
			}
			if (sys_pwrite(wfd, buf, (size_t)r, pos) != r)
				ok = 0;
			pos += r;
		}
		if (buf)
			scratch_put(&s);
	}
	if (wfd >= 0)
		sys_close(wfd);
	if (!ok && !(o->e->flags & SHADOW_F_NODATA)) {
		__atomic_or_fetch(&o->e->flags, SHADOW_F_NODATA, __ATOMIC_RELAXED);
		chell_log("shadow: cannot bring the shadow copy %s back in step with %s; its data is"
			  " no longer compared", spath, c->f && c->f->path ? c->f->path : "?");
	}
	chell_ctx lc = *c;
	lc.op = CHELL_OP_LSEEK;
	off_t cur = chell_down_lseek(&lc, 0, SEEK_CUR);
	if (cur >= 0 && sys_lseek(o->sfd, cur, SEEK_SET) != cur &&
	    !(o->e->flags & SHADOW_F_OFF)) {
		/* Past the largest file size of the copy's file system: offsets
		 * cannot be compared any more (shadow_op_begin skips it). */
		__atomic_or_fetch(&o->e->flags, SHADOW_F_OFF, __ATOMIC_RELAXED);
		chell_log("shadow: the shadow copy %s cannot take the offset %lld of %s (past the"
			  " largest file size of the file system of shadow.dir); the file is no"
			  " longer checked", spath, (long long)cur,
			  c->f && c->f->path ? c->f->path : "?");
	}
}

/* File offsets after the operation must agree. */
static void check_offsets(struct shadow_op *o)
{
	chell_ctx lc = *o->c;
	lc.op = CHELL_OP_LSEEK;
	off_t o1 = chell_down_lseek(&lc, 0, SEEK_CUR);
	off_t o2 = sys_lseek(o->sfd, 0, SEEK_CUR);
	if (o->h) {
		o->h->off_test = o1;
		o->h->off_shadow = o2;
	}
	if (o1 != o2) {
		char b1[40], b2[40];
		shadow_diverge(o, "file offset after the operation is %s under test, %s on the shadow",
			       rn(o1, b1, sizeof(b1)), rn(o2, b2, sizeof(b2)));
	}
}

/* Sizes must agree; returns the (common) size. */
static off_t check_sizes(struct shadow_op *o, const char *what)
{
	chell_ctx fc = *o->c;
	fc.op = CHELL_OP_FSTAT;
	struct stat s1, s2;
	int r1 = chell_down_fstat(&fc, &s1);
	int r2 = sys_fstat(o->sfd, &s2);
	if (r1 < 0 || r2 < 0) {
		check_result(o, "fstat after the operation", r1, r2);
		return -1;
	}
	if (s1.st_size != s2.st_size)
		shadow_diverge(o, "%s: file size is %lld under test, %lld on the shadow", what,
			       (long long)s1.st_size, (long long)s2.st_size);
	return s2.st_size;
}

/*
 * EBADF from the handler under test for a descriptor the hub had just
 * looked up means either the description does not allow the operation
 * (the shadow, opened with the same flags, must say EBADF too) or another
 * thread closed the descriptor meanwhile - which the shadow descriptor,
 * owned by the description, cannot reproduce. Tell them apart by asking the
 * kernel whether the number still names the file.
 */
static int closed_meanwhile(struct shadow_op *o, long r1)
{
	if (r1 != -EBADF)
		return 0;
	struct stat st;
	if (sys_fstat(o->c->fd, &st) < 0 || st.st_dev != o->e->dev || st.st_ino != o->e->ino) {
		if (o->h)
			o->h->r_shadow = r1; /* not run: nothing to compare */
		shadow_op_end(o);
		return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- read/write */

/*
 * Segment i of a read, restricted to [lo, hi) of its own bytes, may have
 * been overwritten by a later segment pointing at the same memory (readv
 * lets segments alias; the last write wins). Compare only what segment i
 * still owns: the parts no later segment (within the bytes read) covers.
 */
static void compare_piece(const struct shadow_op *o, const struct iovec *iov, const size_t *len,
			  int cnt, int i, size_t lo, size_t hi, const char *sdata, off_t fpos)
{
	const char *base = (const char *)iov[i].iov_base;
	for (int j = i + 1; j < cnt && lo < hi; j++) {
		const char *b = (const char *)iov[j].iov_base;
		if (!len[j] || b + len[j] <= base + lo || b >= base + hi)
			continue;
		/* Split around the overlap with segment j. */
		size_t olo = b > base + lo ? (size_t)(b - base) : lo;
		size_t ohi = b + len[j] < base + hi ? (size_t)(b + len[j] - base) : hi;
		if (olo > lo)
			compare_piece(o, iov, len, cnt, i, lo, olo, sdata, fpos);
		lo = ohi;
	}
	if (lo < hi && memcmp(base + lo, sdata + lo, hi - lo) != 0)
		shadow_diverge_data(o, "read", (uint64_t)(fpos + (off_t)lo),
				    (const unsigned char *)sdata + lo, (const unsigned char *)base + lo,
				    hi - lo);
}

static int by_base(const void *a, const void *b)
{
	const struct iovec *x = *(const struct iovec *const *)a, *y = *(const struct iovec *const *)b;
	return x->iov_base < y->iov_base ? -1 : x->iov_base > y->iov_base;
}

static void compare_read(const struct shadow_op *o, const struct iovec *iov, int cnt, size_t n,
			 const char *sdata, off_t start)
{
	/* Bytes each segment received. */
	size_t lenbuf[64], *len = cnt <= 64 ? lenbuf : malloc((size_t)cnt * sizeof(size_t));
	const struct iovec *ptrbuf[64], **sorted =
		cnt <= 64 ? ptrbuf : malloc((size_t)cnt * sizeof(*sorted));
	if (!len || !sorted)
		shadow_diverge(o, "out of memory comparing a read of %d segments", cnt);
	size_t done = 0;
	int used = 0;
	for (int i = 0; i < cnt; i++) {
		size_t k = iov[i].iov_len < n - done ? iov[i].iov_len : n - done;
		len[i] = k;
		done += k;
		if (k)
			sorted[used++] = &iov[i];
	}
	/* Do the segments alias? (Sort by address, look at neighbours.) */
	int alias = 0;
	if (used > 1) {
		qsort(sorted, (size_t)used, sizeof(*sorted), by_base);
		for (int i = 1; i < used && !alias; i++) {
			size_t pl = len[sorted[i - 1] - iov];
			alias = (const char *)sorted[i - 1]->iov_base + pl >
				(const char *)sorted[i]->iov_base;
		}
	}
	done = 0;
	for (int i = 0; i < cnt; i++) {
		if (!len[i])
			continue;
		if (alias)
			compare_piece(o, iov, len, cnt, i, 0, len[i], sdata + done,
				      start + (off_t)done);
		else if (memcmp(iov[i].iov_base, sdata + done, len[i]) != 0)
			compare_piece(o, iov, len, i + 1, i, 0, len[i], sdata + done,
				      start + (off_t)done);
		done += len[i];
	}
	if (len != lenbuf)
		free(len);
	if (sorted != ptrbuf)
		free(sorted);
}

/*
 * The read under test returned n bytes, the shadow's (into its own, good
 * buffer) more. Did the kernel stop at n because the application's buffer
 * is not writable there (a short read, where nothing was copied would have
 * been EFAULT)? Ask it: a one-byte read from the copy into the application's
 * buffer at byte n must fault. (If it does not, the byte written there is
 * the file's, and the difference is a divergence reported next.) r2 is the
 * shadow's count, to find where its read started for a read at the offset.
 */
static int faulted_at(struct shadow_op *o, const struct iovec *iov, int cnt, size_t n, off_t off,
		      ssize_t r2)
{
	off_t start = off >= 0 ? off : sys_lseek(o->sfd, 0, SEEK_CUR) - r2;
	size_t done = 0;
	for (int i = 0; i < cnt; i++) {
		if (n < done + iov[i].iov_len) {
			char *at = (char *)iov[i].iov_base + (n - done);
			return start >= 0 && sys_pread(o->sfd, at, 1, start + (off_t)n) == -EFAULT;
		}
		done += iov[i].iov_len;
	}
	return 0;
}

/* Which preadv2/pwritev2 flags a file accepts (RWF_NOWAIT, RWF_DONTCACHE,
 * RWF_ATOMIC) is the file system's choice: tmpfs refuses what ext4 takes.
 * A refusal under test says nothing the shadow copy, maybe on another file
 * system, can check. */
static int flags_refused(ssize_t r, int flags)
{
	return flags && r == -EOPNOTSUPP;
}

ssize_t shadow_read(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_read(c, iov, iovcnt, off, flags);
	size_t total = iov_total(iov, iovcnt);
	int64_t a[4] = {(int64_t)total, off, flags, iovcnt};
	o.h = shadow_hist_add(c->op, c->fd, 4, a);

	ssize_t r1 = chell_down_read(c, iov, iovcnt, off, flags);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	if (r1 == -EFAULT || (r1 == -EAGAIN && (flags & RWF_NOWAIT)) || flags_refused(r1, flags)) {
		/* A bad application buffer, a would-block, or flags the file
		 * system under test refuses: the shadow, with its own buffer,
		 * no such condition and maybe another file system, cannot
		 * reproduce it. */
		o.h->r_shadow = r1;
		shadow_op_end(&o);
		return r1;
	}
	/*
	 * The shadow gets its own buffer, cut in the same iovec shape. The
	 * kernel transfers at most MAX_RW_COUNT bytes per call, so clamping
	 * the segments there changes nothing. A request the kernel rejects
	 * before touching memory (bad count, lengths summing past
	 * SSIZE_MAX: EINVAL) is passed on as it is, to be rejected the same.
	 */
	struct scratch s = {0};
	const struct iovec *shadow_iov = iov;
	char *data = NULL;
	if (iovcnt >= 0 && iovcnt <= IOV_MAX && total != (size_t)SSIZE_MAX) {
		size_t vbytes = (size_t)iovcnt * sizeof(struct iovec);
		size_t dbytes = total < (size_t)MAX_RW ? total : (size_t)MAX_RW;
		/*
		 * O_DIRECT reads need the buffer aligned (to the logical block
		 * size, at most a page) like the application's, which was if the
		 * read succeeded: the data starts on a page, and the segments,
		 * whose lengths O_DIRECT requires to be block multiples, follow.
		 */
		int odirect = (__atomic_load_n(&c->f->ofd->status_flags, __ATOMIC_RELAXED) &
			       O_DIRECT) != 0;
		size_t pad = odirect ? 4096 : 0;
		char *mem = scratch_get(&s, vbytes + pad + dbytes);
		if (!mem)
			shadow_diverge(&o, "out of memory for the shadow read buffer (%zu bytes)",
				       dbytes);
		struct iovec *siov = (struct iovec *)mem;
		data = mem + vbytes;
		if (odirect)
			data = (char *)(((uintptr_t)data + 4095) & ~(uintptr_t)4095);
		char *q = data;
		for (int i = 0; i < iovcnt; i++) {
			size_t n = iov[i].iov_len;
			if (n > dbytes - (size_t)(q - data))
				n = dbytes - (size_t)(q - data);
			siov[i].iov_base = q;
			siov[i].iov_len = n;
			q += n;
		}
		shadow_iov = siov;
	}
	chell_ctx sc = shadow_ref_ctx(&o);
	ssize_t r2 = POSIX->read(&sc, shadow_iov, iovcnt, off, flags & ~RWF_NOWAIT);
	o.h->r_shadow = r2;
	if (r1 >= 0 && r2 > r1 && data && faulted_at(&o, iov, iovcnt, (size_t)r1, off, r2)) {
		/* The reference stops where the application's buffer does. */
		if (off < 0)
			sys_lseek(o.sfd, -(off_t)(r2 - r1), SEEK_CUR);
		o.h->r_shadow = r2 = r1;
	}
	if (shadow_fs_dependent(&o, chell_op_name(c->op), r1, r2, 0, 0)) {
		scratch_put(&s);
		shadow_op_end(&o);
		return r1;
	}
	check_result(&o, chell_op_name(c->op), r1, r2);
	check_offsets(&o);
	if (r1 > 0 && data && !(o.e->flags & SHADOW_F_NOCONTENT)) {
		/* Where the bytes came from, for the report. */
		off_t start = off >= 0 ? off : o.h->off_shadow - r2;
		compare_read(&o, iov, iovcnt, (size_t)r1, data, start);
	}
	scratch_put(&s);
	shadow_op_end(&o);
	return r1;
}

/*
 * The application's call failed with EFBIG at or past RLIMIT_FSIZE (`end`:
 * the first byte it would have needed), so the kernel sent it SIGXFSZ. The
 * reference call would fail the same way, and send a second SIGXFSZ: its
 * result is taken as EFBIG without making it. (A write that crosses the
 * limit is cut short without a signal, and is replayed.)
 */
static bool over_fsize(long r1, uint64_t end)
{
	return r1 == -EFBIG && end > mapped_fsize();
}

/* Where a write on the copy lands (its offset, or its end for an append). */
static uint64_t copy_write_pos(struct shadow_op *o, off_t off, int flags)
{
	int sfl = sys_fcntl(o->sfd, F_GETFL, 0);
	struct stat st;
	if ((((sfl >= 0 && (sfl & O_APPEND)) && !(flags & RWF_NOAPPEND)) || (flags & RWF_APPEND)) &&
	    sys_fstat(o->sfd, &st) == 0)
		return (uint64_t)st.st_size;
	off_t p = off >= 0 ? off : sys_lseek(o->sfd, 0, SEEK_CUR);
	return p >= 0 ? (uint64_t)p : 0;
}

ssize_t shadow_write(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_write(c, iov, iovcnt, off, flags);
	size_t total = iov_total(iov, iovcnt);
	int64_t a[4] = {(int64_t)total, off, flags, iovcnt};
	o.h = shadow_hist_add(c->op, c->fd, 4, a);

	/*
	 * With the copy on another kind of file system, the lowest byte this
	 * write may change on either side (its offset, the shadow's current
	 * offset, or the end for an append), for shadow_fs_dependent.
	 */
	off_t lo = off;
	if (!(o.e->flags & SHADOW_F_SAME_FS)) {
		struct stat sst;
		off_t cur = off >= 0 ? off : sys_lseek(o.sfd, 0, SEEK_CUR);
		off_t end = sys_fstat(o.sfd, &sst) == 0 ? sst.st_size : 0;
		lo = cur >= 0 && cur < end ? cur : end;
	}

	ssize_t r1 = chell_down_write(c, iov, iovcnt, off, flags);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	if ((r1 == -EAGAIN && (flags & RWF_NOWAIT)) || flags_refused(r1, flags)) {
		o.h->r_shadow = r1;
		shadow_op_end(&o);
		return r1;
	}
	/*
	 * Same iovecs for the shadow. (An application thread changing the
	 * buffer while the write is in progress would make the two copies
	 * differ; that program has a data race of its own.) An EFAULT is
	 * replayed too: a write past EOF from an unmapped (but user-range)
	 * buffer fails, yet the kernel has already moved the size up to the
	 * write's offset (tmpfs and ext4 alike), and the same bad buffer makes
	 * it do the same to the copy.
	 */
	chell_ctx sc = shadow_ref_ctx(&o);
	ssize_t r2 = over_fsize(r1, copy_write_pos(&o, off, flags) + 1)
			     ? -EFBIG
			     : POSIX->write(&sc, iov, iovcnt, off, flags & ~RWF_NOWAIT);
	o.h->r_shadow = r2;
	if (shadow_fs_dependent(&o, chell_op_name(c->op), r1, r2, lo, -1)) {
		shadow_op_end(&o);
		return r1;
	}
	check_result(&o, chell_op_name(c->op), r1, r2);
	check_offsets(&o);
	off_t size = check_sizes(&o, chell_op_name(c->op));
	if (r1 > 0) {
		off_t start;
		int sfl = sys_fcntl(o.sfd, F_GETFL, 0);
		int append = ((sfl >= 0 && (sfl & O_APPEND)) && !(flags & RWF_NOAPPEND)) ||
			     (flags & RWF_APPEND);
		if (off < 0)
			start = o.h->off_shadow - r2;
		else if (append)
			start = size - r2; /* Linux: pwrite on O_APPEND appends */
		else
			start = off;
		shadow_check_range(&o, chell_op_name(c->op), start, r1);
	}
	shadow_op_end(&o);
	return r1;
}

/* ------------------------------------------------------------------- others */

off_t shadow_lseek(chell_ctx *c, off_t off, int whence)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_lseek(c, off, whence);
	int64_t a[2] = {off, whence};
	o.h = shadow_hist_add(c->op, c->fd, 2, a);
	off_t r1 = chell_down_lseek(c, off, whence);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	off_t r2 = POSIX->lseek(&sc, off, whence);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if ((whence == SEEK_DATA || whence == SEEK_HOLE) &&
	    (!(o.e->flags & SHADOW_F_SAME_FS) || (o.e->flags & SHADOW_F_NOCONTENT)) && r1 != r2) {
		/*
		 * Where holes are is a property of the file system: with the
		 * shadow on a different kind, both answers can be right (tmpfs
		 * may see only holes where ext4 keeps zeroed blocks as data;
		 * the granularity differs). With stores through a shared
		 * mapping, or a copy resynced after such a difference, the
		 * copy's holes are not the file's either.
		 * What must hold either way: below EOF, the answer lies in
		 * [off, size] (SEEK_DATA may also say ENXIO); at or past EOF
		 * both say ENXIO. Then follow the file under test, so later
		 * operations stay comparable.
		 */
		struct stat st;
		off_t size = sys_fstat(o.sfd, &st) == 0 ? st.st_size : -1;
		int ok = off >= 0 && off < size &&
			 ((r1 >= off && r1 <= size) || (r1 == -ENXIO && whence == SEEK_DATA)) &&
			 ((r2 >= off && r2 <= size) || (r2 == -ENXIO && whence == SEEK_DATA));
		if (ok) {
			chell_ctx lc = *c;
			lc.op = CHELL_OP_LSEEK;
			off_t cur = chell_down_lseek(&lc, 0, SEEK_CUR);
			if (cur >= 0)
				sys_lseek(o.sfd, cur, SEEK_SET);
			r2 = r1;
		}
	}
	/* Positions past the largest file size are EINVAL, and that size is
	 * the file system's (tmpfs: LLONG_MAX; ext4: 16 TiB) */
	if (whence != SEEK_DATA && whence != SEEK_HOLE &&
	    shadow_fs_dependent(&o, "lseek", r1, r2, 0, 0)) {
		shadow_op_end(&o);
		return r1;
	}
	check_result(&o, "lseek", r1, r2);
	check_offsets(&o);
	shadow_op_end(&o);
	return r1;
}

int shadow_fsync(chell_ctx *c, int datasync)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_fsync(c, datasync);
	int64_t a[1] = {datasync};
	o.h = shadow_hist_add(c->op, c->fd, 1, a);
	int r1 = chell_down_fsync(c, datasync);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	int r2 = POSIX->fsync(&sc, datasync);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	check_result(&o, datasync ? "fdatasync" : "fsync", r1, r2);
	shadow_op_end(&o);
	return r1;
}

int shadow_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_sync_file_range(c, off, n, flags);
	int64_t a[3] = {off, n, flags};
	o.h = shadow_hist_add(c->op, c->fd, 3, a);
	int r1 = chell_down_sync_file_range(c, off, n, flags);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	int r2 = POSIX->sync_file_range(&sc, off, n, flags);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	check_result(&o, "sync_file_range", r1, r2);
	shadow_op_end(&o);
	return r1;
}

int shadow_ftruncate(chell_ctx *c, off_t len)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_ftruncate(c, len);
	struct stat st;
	off_t old = sys_fstat(o.sfd, &st) == 0 ? st.st_size : -1;
	int64_t a[2] = {len, old};
	o.h = shadow_hist_add(c->op, c->fd, 2, a);
	int r1 = chell_down_ftruncate(c, len);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	int r2 = over_fsize(r1, (uint64_t)len) ? -EFBIG : POSIX->ftruncate(&sc, len);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if (shadow_fs_dependent(&o, "ftruncate", r1, r2, old >= 0 && old < len ? old : len, -1)) {
		shadow_op_end(&o);
		return r1;
	}
	check_result(&o, "ftruncate", r1, r2);
	check_offsets(&o);
	check_sizes(&o, "ftruncate");
	if (r1 == 0 && old >= 0 && len > old)
		shadow_check_range(&o, "ftruncate (the extension must read as zeros)", old, len - old);
	shadow_op_end(&o);
	return r1;
}

int shadow_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_fallocate(c, mode, off, len);
	int64_t a[3] = {mode, off, len};
	o.h = shadow_hist_add(c->op, c->fd, 3, a);
	int r1 = chell_down_fallocate(c, mode, off, len);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	int r2 = off >= 0 && len > 0 && len <= LLONG_MAX - off && over_fsize(r1, (uint64_t)(off + len))
			 ? -EFBIG
			 : POSIX->fallocate(&sc, mode, off, len);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	int shifts = (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) != 0;
	if (shadow_fs_dependent(&o, "fallocate", r1, r2, off,
				shifts || off < 0 || len < 0 || len > LLONG_MAX - off ? -1 : off + len)) {
		shadow_op_end(&o);
		return r1;
	}
	check_result(&o, "fallocate", r1, r2);
	check_offsets(&o);
	off_t size = check_sizes(&o, "fallocate");
	if (r1 == 0 && size > off) {
		/* Collapse/insert move everything after off; other modes touch [off, off+len). */
		off_t end = (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) ||
					    len > size - off
				    ? size
				    : off + len;
		shadow_check_range(&o, "fallocate", off, end - off);
	}
	shadow_op_end(&o);
	return r1;
}

int shadow_fstat(chell_ctx *c, struct stat *st)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_fstat(c, st);
	int64_t a[4] = {-1, -1, -1, -1};
	o.h = shadow_hist_add(c->op, c->fd, 4, a);
	int r1 = chell_down_fstat(c, st);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	struct stat ref;
	/*
	 * A bad buffer: the reference is the kernel with the application's
	 * own buffer (it must say EFAULT too, and then writes nothing). With
	 * our buffer the shadow would succeed and report a false divergence.
	 */
	int r2 = sys_fstat(o.sfd, r1 == -EFAULT ? st : &ref);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	check_result(&o, "fstat", r1, r2);
	if (r1 == 0) {
		o.h->args[0] = st->st_size;
		o.h->args[1] = ref.st_size;
		o.h->args[2] = st->st_blocks;
		o.h->args[3] = ref.st_blocks;
		if (st->st_size != ref.st_size)
			shadow_diverge(&o, "fstat: st_size %lld under test, %lld on the shadow",
				       (long long)st->st_size, (long long)ref.st_size);
		if ((st->st_mode & S_IFMT) != (ref.st_mode & S_IFMT))
			shadow_diverge(&o, "fstat: file type %#o under test, %#o on the shadow",
				       (unsigned)(st->st_mode & S_IFMT), (unsigned)(ref.st_mode & S_IFMT));
		/*
		 * st_blocks is recorded in the history but not compared. Even
		 * with both files on tmpfs the counts differ on correct runs
		 * (chell_randops seed 202: 368 vs 288 blocks): the copy made at
		 * first open reproduces data and holes (SEEK_DATA/SEEK_HOLE),
		 * not the source's page allocation (e.g. fallocated but unwritten
		 * pages, partially punched pages), and disk file systems add
		 * delayed and speculative allocation. Allocation is not part of
		 * what a program reads back.
		 */
	}
	shadow_op_end(&o);
	return r1;
}

int shadow_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	struct shadow_op o;
	/*
	 * Only the status flags are a property of the open file description
	 * that the shadow mirrors; descriptor flags, locks, leases, seals and
	 * the rest pass down unchecked.
	 */
	struct shadow_local *l = c->f ? c->f->local[c->layer] : NULL;
	if (cmd == F_SETLEASE && (int)arg == F_WRLCK && l && l->vfd >= 0) {
		/* see primary_view; closing it drops the process's POSIX
		 * locks on the file, a known limit (a write lease with record
		 * locks held) */
		chell_internal_close(l->vfd);
		l->vfd = -2;
	}
	if ((cmd != F_SETFL && cmd != F_GETFL) || !shadow_op_begin(c, &o))
		return chell_down_fcntl(c, cmd, arg);
	int64_t a[1] = {cmd == F_SETFL ? (int64_t)arg : -1};
	o.h = shadow_hist_add(c->op, c->fd, 1, a);
	int r1 = chell_down_fcntl(c, cmd, arg);
	o.h->r_test = r1;
	if (closed_meanwhile(&o, r1))
		return r1;
	chell_ctx sc = shadow_ref_ctx(&o);
	int r2 = POSIX->fcntl(&sc, cmd, arg);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if (shadow_fs_dependent(&o, "fcntl(F_SETFL)", r1, r2, 0, 0)) {
		shadow_op_end(&o);
		return r1;
	}
	/* O_DIRECT is accepted or refused per file system (the shadow may
	 * have been opened without it, see shadow_open). */
	int fsmask = (o.e->flags & SHADOW_F_SAME_FS) ? ~0 : ~O_DIRECT;
	if (cmd == F_GETFL && r1 >= 0 && r2 >= 0 && (r1 & fsmask) == (r2 & fsmask))
		r2 = r1;
	check_result(&o, cmd == F_SETFL ? "fcntl(F_SETFL)" : "fcntl(F_GETFL)", r1, r2);
	if (cmd == F_SETFL) {
		chell_ctx gc = *c;
		int g1 = chell_down_fcntl(&gc, F_GETFL, 0);
		int g2 = sys_fcntl(o.sfd, F_GETFL, 0);
		if ((g1 & fsmask) != (g2 & fsmask))
			shadow_diverge(&o, "status flags after F_SETFL(%#lx): %#x under test, %#x on"
				       " the shadow", arg, g1, g2);
	}
	shadow_op_end(&o);
	return r1;
}

void *shadow_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_mmap(c, addr, len, prot, flags, off);
	int64_t a[4] = {(int64_t)len, prot, flags, off};
	o.h = shadow_hist_add(c->op, c->fd, 4, a);
	void *r = chell_down_mmap(c, addr, len, prot, flags, off);
	o.h->r_test = o.h->r_shadow = (int64_t)(intptr_t)r;
	long lr = (long)(intptr_t)r;
	/*
	 * Stores through a shared mapping reach the file but not the shadow,
	 * and no call tells us when they happen (nor when the mapping goes:
	 * it outlives close, munmap is not seen). Re-copying the file at every
	 * later operation would cost its size each time; instead, from now on
	 * and for the life of the tree, this inode's bytes and holes are not
	 * compared - results, offsets and sizes still are (a mapping cannot
	 * change the size). A shared mapping of a description opened for
	 * writing counts even without PROT_WRITE: mprotect can add it.
	 */
	int fl = __atomic_load_n(&c->f->ofd->status_flags, __ATOMIC_RELAXED);
	if (!(lr < 0 && lr > -4096) && (flags & MAP_TYPE) != MAP_PRIVATE &&
	    ((prot & PROT_WRITE) || (fl & O_ACCMODE) == O_RDWR) &&
	    !(o.e->flags & SHADOW_F_MAPPED)) {
		__atomic_or_fetch(&o.e->flags, SHADOW_F_MAPPED, __ATOMIC_RELAXED);
		shadow_mark_mapped(o.e->dev, o.e->ino);
		chell_log("shadow: %s is mapped writable; its data is no longer compared",
			  c->f && c->f->path ? c->f->path : "?");
	}
	shadow_op_end(&o);
	return r;
}
