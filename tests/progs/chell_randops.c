/* SPDX-License-Identifier: MIT */
/*
 * chell_randops - seeded random file-operation generator.
 *
 *   chell_randops --seed S --ops N --dir DIR [--files K] [--threads T]
 *                 [--procs P] [--no-fork] [--no-exec] [--no-threads]
 *                 [--no-stdio] [--no-locks] [--no-rwf] [--no-copy]
 *                 [--no-limits] [--no-badwrite] [--no-unshare]
 *                 [--kernel K1:...] [--max-size BYTES] [--progress N]
 *                 [--dir2 DIR2] [--verbose]
 *   chell_randops --probe --dir DIR
 *
 * Performs N pseudo-random operations on K files in DIR using only plain
 * POSIX/glibc calls, so it runs unchanged both plainly and under
 * `chell run --mode shadow --path DIR -- chell_randops ...`.
 *
 * The program carries its own model of what the kernel must answer: file
 * contents and sizes, the offset and status flags of every open file
 * description (OFD), and which descriptor numbers are in use. Every
 * single-threaded operation is checked against it, byte for byte, so a plain
 * run validates the generator and a run under Chell validates Chell. Where the
 * outcome is not deterministic (threads, concurrent appenders) the checks are
 * the invariants that still hold: per-thread private regions, the sum of
 * concurrent read() advances of a shared offset, and fixed-format records in
 * an O_APPEND log that must all be present, whole and in per-writer order.
 *
 * The model lives in a memfd mapped MAP_SHARED, so forked children update it
 * while the parent waits, and a re-exec'd image (--resume) maps it again.
 * Descriptor tables are per process, as in the kernel.
 *
 * Beyond reads, writes, seeks, truncation, descriptors and stdio, each
 * with its own switch: byte-range locks (fcntl F_SETLK/F_GETLK/F_OFD_*,
 * lockf; every whence, SEEK_CUR from the generator-moved offset, probed
 * from a non-owner), preadv2/pwritev2 with each RWF flag, sendfile,
 * copy_file_range and splice (with pipes, bad and directory descriptors),
 * RLIMIT_NOFILE in a child (dup until EMFILE), writes from bad buffers
 * (EFAULT, short counts at EOF) and a thread that unshares its descriptor
 * table. The RWF model needs the bare kernel's answers for the file system
 * of DIR: a plain run probes them itself; under Chell pass the output of a
 * plain `chell_randops --probe --dir DIR` as --kernel (see kernel_answers()).
 *
 * --dir2 DIR2 puts the odd-numbered files in DIR2 instead of DIR, so one
 * run drives files that two routing rules send to two different stacks
 * (`chell run --route DIR=... --route DIR2=...`). Unless --no-rwf, DIR2 must
 * be on the file system the --kernel answers are for.
 *
 * Operations are counted in the shared model: "done" includes those made by
 * children and threads, and the main loop stops when it reaches N.
 *
 * Every SIDE_EVERY iterations the main loop also runs a side operation with
 * its own random stream (so adding them left each seed's main sequence as it
 * was): a call with a bad pointer argument (path, iovec array, struct flock,
 * stat buffer) that must fail with EFAULT and leave the offset alone, or a
 * small soft RLIMIT_NOFILE filled with dup() to exactly the model's free
 * numbers, followed by the kernel's EMFILE/EBADF/EINVAL at the limit.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rwf_compat.h"
#include "common/tool_help.h"

#define MAXF 16           /* files in the model */
#define MAXOFD 512        /* open file descriptions tracked */
#define MAXFD 256         /* descriptor numbers tracked per process */
#define FDLIM 128         /* random descriptor targets (dup2, close_range) stay below */
#define RESERVED_FD 200   /* our own bookkeeping descriptors live at or above */
#define MAXOPEN 40        /* open descriptors the generator keeps at most */
#define FULL_LIMIT 32768  /* the largest RLIMIT_NOFILE a limits child fills */
#define MAXIO 65536       /* largest single read/write */
#define MAXWRITERS 32768  /* append-log writers over a run */
#define RING 48           /* op log entries kept for failure reports */
#define MAGIC 0x52414e444f505331ULL

/* ------------------------------------------------------------------ */
/* Shared model                                                        */

struct mofd {
	int32_t used;
	int32_t file;
	int32_t acc;   /* O_RDONLY / O_WRONLY / O_RDWR */
	int32_t flags; /* O_APPEND | O_NONBLOCK */
	uint64_t off;
};

struct shm {
	uint64_t magic;
	uint64_t seed, nops, max_size, cap;
	int32_t nfiles;
	_Atomic uint64_t done;
	_Atomic uint64_t forks, execs, nthreads;
	_Atomic int failed;
	char failmsg[1024];
	uint64_t fsize[MAXF];
	int32_t fexists[MAXF];
	struct mofd ofd[MAXOFD];
	uint32_t nwriters, wbase, phases;
	char kspec[1024]; /* the bare kernel's RWF answers (--kernel / probed) */
	_Atomic uint32_t wrec[MAXWRITERS];
};

static struct shm *sh;
static unsigned char *content; /* nfiles * cap bytes after the header */

/* Per-process descriptor table, as the kernel keeps it. */
static struct {
	int ofd; /* index in sh->ofd, -1 if closed */
	int cloexec;
} fdt[MAXFD];
static char foreign[MAXFD]; /* open descriptors that are not the generator's */

/* Options. */
static struct {
	uint64_t seed, ops, max_size, progress;
	int files, threads, procs;
	int no_fork, no_exec, no_threads, no_stdio, verbose;
	int no_locks, no_rwf, no_copy, no_limits, no_badwrite, no_unshare, probe;
	const char *dir, *dir2;
	const char *resume;
	const char *kernel;
} opt = { .seed = 1, .ops = 1000, .max_size = 512 * 1024, .files = 4, .threads = 4, .procs = 3 };

static char dirpath[PATH_MAX], dir2path[PATH_MAX];
static char fpath[MAXF][PATH_MAX + 32];
static char logpath[PATH_MAX + 32];
static int memfd = -1, dfd = -1;
static int in_child;   /* a forked child: no nested forks, exec, threads */
static char **orig_argv;
static int orig_argc;

/* ------------------------------------------------------------------ */
/* PRNG: splitmix64 seeds xoshiro256**; every thread/process has its own stream */

struct rng {
	uint64_t s[4];
};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

static void rng_seed(struct rng *r, uint64_t seed, uint64_t stream)
{
	uint64_t x = seed ^ splitmix(&(uint64_t){ stream * 0xD1342543DE82EF95ULL + 1 });
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return res;
}

static struct rng main_rng;
static __thread struct rng *rg = &main_rng;

static uint64_t rnd(void)
{
	return rng_next(rg);
}
static uint64_t below(uint64_t n)
{
	return n ? rnd() % n : 0;
}
static int chance(unsigned pct)
{
	return below(100) < pct;
}

static void fill_random(unsigned char *p, size_t n, int newlines)
{
	size_t i = 0;
	while (i < n) {
		uint64_t v = rnd();
		for (int k = 0; k < 8 && i < n; k++, v >>= 8)
			p[i++] = (unsigned char)v;
	}
	/* stdio sessions want lines, so fgets() stops somewhere interesting */
	if (newlines)
		for (i = 0; i < n; i += 1 + below(120))
			p[i] = '\n';
}

#define RWF_UNKNOWN 0x40000000 /* a bit no kernel defines (yet) */

/* The kernel's verdict on preadv2/pwritev2 flags that every file system
 * shares, given after the access mode, a negative offset and a zero length
 * (which returns 0 whatever the flags): unknown bits EOPNOTSUPP, RWF_APPEND
 * with RWF_NOAPPEND EINVAL. */
static int rwf_err(int flags, size_t n)
{
	if (n == 0)
		return 0;
	if (flags & RWF_UNKNOWN)
		return EOPNOTSUPP;
	if ((flags & RWF_APPEND) && (flags & RWF_NOAPPEND))
		return EINVAL;
	return 0;
}

/* Flags for a read: mostly none, sometimes harmless or refused ones. */
static int read_flags(void)
{
	static const int fls[6] = {0, 0, 0, RWF_HIPRI, RWF_UNKNOWN, RWF_APPEND | RWF_NOAPPEND};
	return fls[below(6)];
}

static const int write_fls[9] = {0, 0, RWF_DSYNC, RWF_SYNC, RWF_APPEND, RWF_NOAPPEND,
				 RWF_NOAPPEND | RWF_DSYNC, RWF_APPEND | RWF_NOAPPEND, RWF_UNKNOWN};

/* Size of one I/O: often small, sometimes up to 64 KiB, sometimes empty. */
static size_t rsize(void)
{
	unsigned c = (unsigned)below(100);
	if (c < 8)
		return 0;
	if (c < 50)
		return 1 + below(512);
	if (c < 80)
		return 513 + below(8192 - 512);
	return 8193 + below(MAXIO - 8192 + 1);
}

/* ------------------------------------------------------------------ */
/* Op log and failure                                                   */

struct lent {
	uint64_t id;
	const char *op;
	int fd;
	long long a, b, c, ret;
	int err;
};
static __thread struct lent ring[RING];
static __thread unsigned ringn;
static __thread uint64_t cur_id;
static __thread const char *who = "main";

static void dump_ring(void)
{
	unsigned n = ringn < RING ? ringn : RING;
	dprintf(2, "randops: last %u operations of %s pid %d (oldest first):\n", n, who, (int)getpid());
	for (unsigned i = ringn - n; i != ringn; i++) {
		struct lent *l = &ring[i % RING];
		dprintf(2, "  op=%" PRIu64 " %s fd=%d a=%lld b=%lld c=%lld -> ret=%lld errno=%d (%s)\n",
			l->id, l->op, l->fd, l->a, l->b, l->c, l->ret, l->err,
			l->err ? strerror(l->err) : "-");
	}
}

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
	char msg[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	int first = 1;
	if (sh) {
		int z = 0;
		first = atomic_compare_exchange_strong(&sh->failed, &z, 1);
		if (first)
			snprintf(sh->failmsg, sizeof sh->failmsg, "[%s pid %d op %" PRIu64 "] %s", who,
				 (int)getpid(), cur_id, msg);
	}
	if (first) {
		dprintf(2, "randops: FAIL [%s pid %d op %" PRIu64 "] %s\n", who, (int)getpid(), cur_id, msg);
		dump_ring();
		dprintf(2, "randops: FAIL seed=%" PRIu64 " ops=%" PRIu64 "\n", opt.seed, opt.ops);
	}
	/* _exit: no atexit handlers, no stdio flush into the files under test */
	_exit(1);
}

static void rec(const char *op, int fd, long long a, long long b, long long c, long long ret, int err)
{
	struct lent *l = &ring[ringn++ % RING];
	l->id = cur_id;
	l->op = op;
	l->fd = fd;
	l->a = a;
	l->b = b;
	l->c = c;
	l->ret = ret;
	l->err = ret < 0 ? err : 0;
	if (opt.verbose)
		dprintf(2, "op=%" PRIu64 " %s:%d %s fd=%d a=%lld b=%lld c=%lld -> ret=%lld errno=%d\n", cur_id,
			who, (int)getpid(), op, fd, a, b, c, ret, l->err);
}

/* Compare a result with the model: exp_err != 0 means "must fail with it". */
static void want(const char *what, long long got, int gerr, long long exp, int exp_err)
{
	if (exp_err) {
		if (got == -1 && gerr == exp_err)
			return;
		fail("%s: got ret=%lld errno=%d (%s), model expects -1 errno=%d (%s)", what, got,
		     got < 0 ? gerr : 0, got < 0 ? strerror(gerr) : "-", exp_err, strerror(exp_err));
	}
	if (got != exp)
		fail("%s: got ret=%lld errno=%d (%s), model expects %lld", what, got, got < 0 ? gerr : 0,
		     got < 0 ? strerror(gerr) : "-", exp);
}

static void begin_op(void)
{
	cur_id = atomic_fetch_add(&sh->done, 1);
}

static uint64_t remaining(void)
{
	uint64_t d = atomic_load(&sh->done);
	return d >= opt.ops ? 0 : opt.ops - d;
}

/* ------------------------------------------------------------------ */
/* Model helpers                                                        */

static unsigned char *fdata(int f)
{
	return content + (size_t)f * sh->cap;
}

/* Invariant: bytes of fdata(f) at and beyond fsize[f] are zero. */
static void m_write(int f, uint64_t pos, const unsigned char *p, size_t n)
{
	if (!n)
		return;
	if (pos + n > sh->cap)
		fail("model overflow: write %zu at %" PRIu64 " (cap %" PRIu64 ")", n, pos, sh->cap);
	memcpy(fdata(f) + pos, p, n);
	if (pos + n > sh->fsize[f])
		sh->fsize[f] = pos + n;
}

static void m_truncate(int f, uint64_t len)
{
	if (len > sh->cap)
		fail("model overflow: truncate to %" PRIu64, len);
	if (len < sh->fsize[f])
		memset(fdata(f) + len, 0, sh->fsize[f] - len);
	sh->fsize[f] = len;
}

static size_t m_avail(int f, uint64_t pos, size_t n)
{
	uint64_t s = sh->fsize[f];
	if (pos >= s)
		return 0;
	return s - pos < n ? (size_t)(s - pos) : n;
}

static void check_bytes(const char *what, int f, uint64_t pos, const unsigned char *got, size_t n)
{
	if (!n)
		return;
	const unsigned char *m = fdata(f) + pos;
	if (pos + n > sh->cap)
		fail("%s: read %zu bytes at %" PRIu64 " beyond model cap", what, n, pos);
	if (memcmp(got, m, n) == 0)
		return;
	size_t i = 0;
	while (got[i] == m[i])
		i++;
	fail("%s: file %d content differs at offset %" PRIu64 " (+%zu of %zu): got 0x%02x, model 0x%02x "
	     "(model size %" PRIu64 ")",
	     what, f, pos + i, i, n, got[i], m[i], sh->fsize[f]);
}

static struct mofd *OF(int fd)
{
	return &sh->ofd[fdt[fd].ofd];
}

static int is_open(int fd)
{
	return fd >= 0 && fd < MAXFD && fdt[fd].ofd >= 0;
}

static int nopen(void)
{
	int n = 0;
	for (int i = 0; i < MAXFD; i++)
		n += fdt[i].ofd >= 0;
	return n;
}

/* Lowest free descriptor >= min, which is what open/dup/F_DUPFD must return. */
static int lowest_free(int min)
{
	for (int i = min < 0 ? 0 : min; i < MAXFD; i++)
		if (fdt[i].ofd < 0 && !foreign[i])
			return i;
	fail("no free descriptor below %d in the model", MAXFD);
}

static int rd_ok(int acc)
{
	return acc != O_WRONLY;
}
static int wr_ok(int acc)
{
	return acc != O_RDONLY;
}

/* need: 0 any, 1 readable, 2 writable, 3 writable without O_APPEND */
static int pick_fd_file(int need, int file)
{
	int c[MAXFD], n = 0;
	for (int i = 0; i < MAXFD; i++) {
		if (fdt[i].ofd < 0)
			continue;
		struct mofd *o = &sh->ofd[fdt[i].ofd];
		if (file >= 0 && o->file != file)
			continue;
		if ((need == 1 && !rd_ok(o->acc)) || (need >= 2 && !wr_ok(o->acc)) ||
		    (need == 3 && (o->flags & O_APPEND)))
			continue;
		c[n++] = i;
	}
	return n ? c[below(n)] : -1;
}

static int pick_fd(int need)
{
	return pick_fd_file(need, -1);
}

/* A closed descriptor number the generator may use to provoke EBADF. */
static int pick_closed(void)
{
	for (int tries = 0; tries < 64; tries++) {
		int fd = 3 + (int)below(FDLIM - 3);
		if (fdt[fd].ofd < 0 && !foreign[fd])
			return fd;
	}
	return -1;
}

static void gc_ofds(void)
{
	char used[MAXOFD] = { 0 };
	for (int i = 0; i < MAXFD; i++)
		if (fdt[i].ofd >= 0)
			used[fdt[i].ofd] = 1;
	for (int i = 0; i < MAXOFD; i++)
		if (!used[i])
			sh->ofd[i].used = 0;
}

static int new_ofd(int file, int acc, int flags)
{
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < MAXOFD; i++) {
			if (!sh->ofd[i].used) {
				sh->ofd[i] = (struct mofd){ .used = 1, .file = file, .acc = acc,
							    .flags = flags & (O_APPEND | O_NONBLOCK), .off = 0 };
				return i;
			}
		}
		/* A child must not reclaim slots: its parent may still use them. */
		if (in_child)
			break;
		gc_ofds();
	}
	fail("out of OFD slots");
}

static void install(int fd, int ofd, int cloexec)
{
	if (fd < 0 || fd >= MAXFD)
		fail("descriptor %d outside the model's table", fd);
	fdt[fd].ofd = ofd;
	fdt[fd].cloexec = cloexec;
}

static void uninstall(int fd)
{
	fdt[fd].ofd = -1;
	fdt[fd].cloexec = 0;
}

/* Split buf[0..n) into 1..maxcnt iovecs, some possibly empty. */
static int mkiov(struct iovec *iov, unsigned char *buf, size_t n, int maxcnt)
{
	int cnt = 1 + (int)below(maxcnt);
	size_t at = 0;
	for (int i = 0; i < cnt; i++) {
		size_t len = i == cnt - 1 ? n - at : below(n - at + 1);
		iov[i].iov_base = buf + at;
		iov[i].iov_len = len;
		at += len;
	}
	return cnt;
}

/* An offset for positional I/O: inside, near the end, at the start, or past EOF (a hole). */
static uint64_t roff(int f)
{
	uint64_t s = sh->fsize[f], m = sh->max_size;
	uint64_t o;
	switch (below(5)) {
	case 0:
		o = below(m + 1);
		break;
	case 1:
		o = s > 4096 ? s - below(4096) : below(s + 1);
		break;
	case 2:
		o = below(4097);
		break;
	case 3:
		o = s + below(MAXIO);
		break;
	default:
		o = below(s + 1);
		break;
	}
	return o > m ? m : o;
}

static __thread unsigned char *buf1, *buf2;

static void bufs_init(void)
{
	if (!buf1) {
		buf1 = malloc(MAXIO + 64);
		buf2 = malloc(MAXIO + 64);
		if (!buf1 || !buf2)
			fail("out of memory");
	}
}

/* ------------------------------------------------------------------ */
/* Single-step operations. Each returns 1 if it performed (and counted)   */
/* exactly one operation, 0 if it did nothing (the caller picks again).   */

static int op_close(void);

static int op_open(void)
{
	if (nopen() >= MAXOPEN)
		return op_close();
	int f = (int)below(sh->nfiles);
	static const int accs[3] = { O_RDONLY, O_WRONLY, O_RDWR };
	int acc = accs[below(3)], fl = acc;
	if (chance(60))
		fl |= O_CREAT;
	if ((fl & O_CREAT) && chance(15))
		fl |= O_EXCL;
	if (chance(6))
		fl |= O_TRUNC;
	if (chance(25))
		fl |= O_APPEND;
	if (chance(30))
		fl |= O_CLOEXEC;
	int exists = sh->fexists[f], experr = 0;
	if (!exists && !(fl & O_CREAT))
		experr = ENOENT;
	else if (exists && (fl & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
		experr = EEXIST;
	int expfd = lowest_free(0);
	begin_op();
	int fd = open(fpath[f], fl, 0644);
	int e = errno;
	rec("open", fd, f, fl, 0, fd, e);
	want("open", fd, e, expfd, experr);
	if (fd >= 0) {
		if (!exists) {
			sh->fexists[f] = 1;
			sh->fsize[f] = 0;
		}
		/* Linux truncates on O_TRUNC even when opened read-only */
		if (fl & O_TRUNC)
			m_truncate(f, 0);
		install(fd, new_ofd(f, acc, fl), !!(fl & O_CLOEXEC));
	}
	return 1;
}

static int op_close(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	begin_op();
	int r = close(fd), e = errno;
	rec("close", fd, 0, 0, 0, r, e);
	want("close", r, e, 0, 0);
	uninstall(fd);
	return 1;
}

/* read / readv / preadv2(-1) at the current offset */
static int op_read(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	size_t n = rsize();
	int v = (int)below(3), experr = rd_ok(o->acc) ? 0 : EBADF;
	int flags = v == 2 ? read_flags() : 0;
	if (!experr)
		experr = rwf_err(flags, n);
	uint64_t pos = o->off;
	size_t exp = experr ? 0 : m_avail(o->file, pos, n);
	struct iovec iov[8];
	int cnt = 0;
	ssize_t r;
	const char *name;
	begin_op();
	if (v == 0) {
		name = "read";
		r = read(fd, buf1, n);
	} else if (v == 1) {
		name = "readv";
		cnt = mkiov(iov, buf1, n, 8);
		r = readv(fd, iov, cnt);
	} else {
		name = "preadv2(-1)";
		cnt = mkiov(iov, buf1, n, 8);
		r = preadv2(fd, iov, cnt, -1, flags);
	}
	int e = errno;
	rec(name, fd, (long long)n, cnt, flags, r, e);
	want(name, r, e, (long long)exp, experr);
	if (r > 0) {
		check_bytes(name, o->file, pos, buf1, (size_t)r);
		o->off += (uint64_t)r;
	}
	return 1;
}

/* pread / preadv / preadv2(off) */
static int op_pread(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	size_t n = rsize();
	int v = (int)below(3), experr = 0;
	long long off = (long long)roff(o->file);
	if (chance(5))
		off = -2 - (long long)below(100000); /* -1 means "current offset" for preadv2 */
	/* the kernel rejects a negative offset before it looks at the access mode */
	if (off < 0)
		experr = EINVAL;
	else if (!rd_ok(o->acc))
		experr = EBADF;
	int flags = v == 2 ? read_flags() : 0;
	if (!experr)
		experr = rwf_err(flags, n);
	size_t exp = experr ? 0 : m_avail(o->file, (uint64_t)off, n);
	struct iovec iov[8];
	int cnt = 0;
	ssize_t r;
	const char *name;
	begin_op();
	if (v == 0) {
		name = "pread";
		r = pread(fd, buf1, n, off);
	} else if (v == 1) {
		name = "preadv";
		cnt = mkiov(iov, buf1, n, 8);
		r = preadv(fd, iov, cnt, off);
	} else {
		name = "preadv2";
		cnt = mkiov(iov, buf1, n, 8);
		r = preadv2(fd, iov, cnt, off, flags);
	}
	int e = errno;
	rec(name, fd, (long long)n, off, cnt, r, e);
	want(name, r, e, (long long)exp, experr);
	if (r > 0)
		check_bytes(name, o->file, (uint64_t)off, buf1, (size_t)r);
	return 1;
}

static int op_lseek_to(int fd, long long to);

/* write / writev / pwritev2(-1) at the current offset (or the end with O_APPEND / RWF_APPEND) */
static int op_write(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	int v = (int)below(3), experr = wr_ok(o->acc) ? 0 : EBADF;
	int flags = 0;
	if (v == 2)
		flags = write_fls[below(9)];
	/* RWF_NOAPPEND writes at the offset even on an O_APPEND descriptor */
	int append = ((o->flags & O_APPEND) && !(flags & RWF_NOAPPEND)) || (flags & RWF_APPEND);
	uint64_t pos = append ? sh->fsize[o->file] : o->off;
	size_t n = rsize();
	if (!append && pos >= sh->max_size)
		/* far past the end: seek back instead of growing the file without bound */
		return op_lseek_to(fd, (long long)below(sh->max_size + 1));
	if (pos + n > sh->cap)
		n = (size_t)(sh->cap - pos);
	if (!experr)
		experr = rwf_err(flags, n);
	fill_random(buf1, n, 0);
	struct iovec iov[8];
	int cnt = 0;
	ssize_t r;
	const char *name;
	begin_op();
	if (v == 0) {
		name = "write";
		r = write(fd, buf1, n);
	} else if (v == 1) {
		name = "writev";
		cnt = mkiov(iov, buf1, n, 8);
		r = writev(fd, iov, cnt);
	} else {
		name = "pwritev2(-1)";
		cnt = mkiov(iov, buf1, n, 8);
		r = pwritev2(fd, iov, cnt, -1, flags);
	}
	int e = errno;
	rec(name, fd, (long long)n, (long long)pos, flags, r, e);
	want(name, r, e, experr ? 0 : (long long)n, experr);
	if (r > 0) {
		m_write(o->file, pos, buf1, (size_t)r);
		o->off = pos + (uint64_t)r;
	}
	return 1;
}

/* pwrite / pwritev / pwritev2(off): the offset does not move; O_APPEND still appends (Linux) */
static int op_pwrite(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	int v = (int)below(3), experr = 0, flags = 0;
	if (v == 2)
		flags = write_fls[below(9)];
	long long off = (long long)roff(o->file);
	if (chance(5))
		off = -2 - (long long)below(100000);
	if (off < 0)
		experr = EINVAL;
	else if (!wr_ok(o->acc))
		experr = EBADF;
	int append = ((o->flags & O_APPEND) && !(flags & RWF_NOAPPEND)) || (flags & RWF_APPEND);
	uint64_t pos = append ? sh->fsize[o->file] : (uint64_t)(off < 0 ? 0 : off);
	size_t n = rsize();
	if (pos + n > sh->cap)
		n = pos >= sh->cap ? 0 : (size_t)(sh->cap - pos);
	if (!experr)
		experr = rwf_err(flags, n);
	fill_random(buf1, n, 0);
	struct iovec iov[8];
	int cnt = 0;
	ssize_t r;
	const char *name;
	begin_op();
	if (v == 0) {
		name = "pwrite";
		r = pwrite(fd, buf1, n, off);
	} else if (v == 1) {
		name = "pwritev";
		cnt = mkiov(iov, buf1, n, 8);
		r = pwritev(fd, iov, cnt, off);
	} else {
		name = "pwritev2";
		cnt = mkiov(iov, buf1, n, 8);
		r = pwritev2(fd, iov, cnt, off, flags);
	}
	int e = errno;
	rec(name, fd, (long long)n, off, flags, r, e);
	want(name, r, e, experr ? 0 : (long long)n, experr);
	if (r > 0)
		m_write(o->file, pos, buf1, (size_t)r);
	return 1;
}

static int op_lseek_to(int fd, long long to)
{
	begin_op();
	off_t r = lseek(fd, to, SEEK_SET);
	int e = errno;
	rec("lseek(SET)", fd, to, 0, 0, r, e);
	want("lseek(SET)", r, e, to, 0);
	OF(fd)->off = (uint64_t)to;
	return 1;
}

static int op_lseek(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	struct mofd *o = OF(fd);
	int f = o->file;
	long long size = (long long)sh->fsize[f], cur = (long long)o->off;
	long long off = 0, exp = 0;
	int whence, experr = 0;
	unsigned c = (unsigned)below(100);
	if (c < 30) {
		whence = SEEK_SET;
		off = chance(8) ? -1 - (long long)below(5000) : (long long)roff(f);
		exp = off;
	} else if (c < 50) {
		whence = SEEK_CUR;
		off = (long long)below(2 * MAXIO) - MAXIO;
		if (chance(10))
			off = -cur - 1 - (long long)below(100);
		exp = cur + off;
	} else if (c < 70) {
		whence = SEEK_END;
		off = (long long)below(MAXIO) - (long long)below((uint64_t)size + 1);
		if (chance(10))
			off = -size - 1 - (long long)below(100);
		exp = size + off;
	} else if (c < 80) {
		whence = SEEK_DATA;
		off = (long long)below((uint64_t)size + 200);
	} else if (c < 90) {
		whence = SEEK_HOLE;
		off = (long long)below((uint64_t)size + 200);
	} else {
		whence = 5 + (int)below(60); /* SEEK_MAX is SEEK_HOLE (4) */
		off = (long long)below(1000);
		experr = EINVAL;
	}
	if (whence <= SEEK_END && exp < 0)
		experr = EINVAL;
	if ((whence == SEEK_DATA || whence == SEEK_HOLE) && off >= size)
		experr = ENXIO;
	begin_op();
	off_t r = lseek(fd, off, whence);
	int e = errno;
	rec("lseek", fd, off, whence, 0, r, e);
	if (whence == SEEK_DATA || whence == SEEK_HOLE) {
		/* Where the kernel puts data/hole boundaries is its business (pages,
		 * extents); what must hold is that holes read as zeros. */
		if (experr) {
			want("lseek(DATA/HOLE)", r, e, 0, experr);
			return 1;
		}
		const unsigned char *d = fdata(f);
		if (whence == SEEK_DATA) {
			if (r < 0) {
				if (e != ENXIO)
					fail("lseek(SEEK_DATA, %lld): errno %d (%s)", off, e, strerror(e));
				for (long long i = off; i < size; i++)
					if (d[i])
						fail("lseek(SEEK_DATA, %lld) = ENXIO but model has data at %lld", off, i);
				return 1;
			}
			if (r < off || r >= size)
				fail("lseek(SEEK_DATA, %lld) = %lld outside [%lld, %lld)", off, (long long)r, off, size);
			for (long long i = off; i < r; i++)
				if (d[i])
					fail("lseek(SEEK_DATA, %lld) = %lld skips model data at %lld", off, (long long)r, i);
		} else {
			if (r < off || r > size)
				fail("lseek(SEEK_HOLE, %lld) = %lld outside [%lld, %lld]", off, (long long)r, off, size);
			if (r < size && d[r])
				fail("lseek(SEEK_HOLE, %lld) = %lld but model byte there is 0x%02x", off, (long long)r, d[r]);
		}
		o->off = (uint64_t)r;
		return 1;
	}
	want("lseek", r, e, exp, experr);
	if (!experr)
		o->off = (uint64_t)exp;
	return 1;
}

static long long rlen(int f)
{
	uint64_t s = sh->fsize[f];
	unsigned c = (unsigned)below(100);
	if (c < 40)
		return (long long)below(s + 1);
	if (c < 85)
		return (long long)below(sh->max_size + 1);
	if (c < 92)
		return (long long)s;
	return -1 - (long long)below(100);
}

static int op_ftruncate(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	struct mofd *o = OF(fd);
	long long len = rlen(o->file);
	/* Linux: EINVAL for a descriptor not open for writing, and for len < 0 */
	int experr = (len < 0 || !wr_ok(o->acc)) ? EINVAL : 0;
	begin_op();
	int r = ftruncate(fd, len), e = errno;
	rec("ftruncate", fd, len, 0, 0, r, e);
	want("ftruncate", r, e, 0, experr);
	if (!r)
		m_truncate(o->file, (uint64_t)len);
	return 1;
}

static int op_truncate(void)
{
	int f = (int)below(sh->nfiles);
	long long len = rlen(f);
	int experr = !sh->fexists[f] ? ENOENT : len < 0 ? EINVAL : 0;
	if (len < 0 && !sh->fexists[f])
		experr = EINVAL; /* the length is checked before the path is looked up */
	begin_op();
	int r = truncate(fpath[f], len), e = errno;
	rec("truncate", -1, f, len, 0, r, e);
	want("truncate", r, e, 0, experr);
	if (!r)
		m_truncate(f, (uint64_t)len);
	return 1;
}

static int op_fallocate(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	struct mofd *o = OF(fd);
	int f = o->file;
	long long off = (long long)roff(f), len = 1 + (long long)below(MAXIO);
	unsigned c = (unsigned)below(100);
	int mode = 0, posix = 0, experr = 0;
	if (c < 25)
		mode = 0;
	else if (c < 45)
		mode = FALLOC_FL_KEEP_SIZE;
	else if (c < 70)
		mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
	else
		posix = 1;
	if (chance(5))
		len = 0;
	if (chance(3))
		off = -1 - (long long)below(100);
	if ((uint64_t)(off + len) > sh->cap)
		len = (long long)sh->cap - off;
	if (off < 0 || len <= 0)
		experr = EINVAL;
	else if (!wr_ok(o->acc))
		experr = EBADF;
	begin_op();
	int r, e;
	if (posix) {
		/* posix_fallocate returns the error number instead of setting errno */
		int pr = posix_fallocate(fd, off, len);
		r = pr ? -1 : 0;
		e = pr;
		rec("posix_fallocate", fd, off, len, 0, r, e);
		want("posix_fallocate", r, e, 0, experr);
	} else {
		r = fallocate(fd, mode, off, len);
		e = errno;
		rec("fallocate", fd, off, len, mode, r, e);
		want("fallocate", r, e, 0, experr);
	}
	if (r == 0) {
		uint64_t end = (uint64_t)(off + len);
		if (mode & FALLOC_FL_PUNCH_HOLE) {
			uint64_t s = sh->fsize[f];
			if ((uint64_t)off < s)
				memset(fdata(f) + off, 0, (end < s ? end : s) - (uint64_t)off);
		} else if (!(mode & FALLOC_FL_KEEP_SIZE) && end > sh->fsize[f]) {
			sh->fsize[f] = end; /* the new range reads as zeros, already so in the model */
		}
	}
	return 1;
}

static int op_sync(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	int v = (int)below(3), r, e, experr = 0;
	begin_op();
	if (v == 0) {
		r = fsync(fd);
		e = errno;
		rec("fsync", fd, 0, 0, 0, r, e);
	} else if (v == 1) {
		r = fdatasync(fd);
		e = errno;
		rec("fdatasync", fd, 0, 0, 0, r, e);
	} else {
		long long off = (long long)below(sh->max_size), n = (long long)below(MAXIO);
		unsigned fl = (unsigned)below(8);
		if (chance(5)) {
			off = -1;
			experr = EINVAL;
		} else if (chance(5)) {
			fl = 8 + (unsigned)below(8);
			experr = EINVAL;
		}
		r = sync_file_range(fd, off, n, fl);
		e = errno;
		rec("sync_file_range", fd, off, n, fl, r, e);
	}
	want("sync", r, e, 0, experr);
	return 1;
}

static void check_size(const char *what, int f, long long got)
{
	if ((uint64_t)got != sh->fsize[f])
		fail("%s: file %d size %lld, model %" PRIu64, what, f, got, sh->fsize[f]);
}

static int op_stat(void)
{
	int v = (int)below(6);
	struct stat st;
	int r, e;
	if (v == 0) {
		int fd = pick_fd(0);
		if (fd < 0)
			return 0;
		begin_op();
		r = fstat(fd, &st);
		e = errno;
		rec("fstat", fd, 0, 0, 0, r ? r : st.st_size, e);
		want("fstat", r, e, 0, 0);
		if (!S_ISREG(st.st_mode))
			fail("fstat: not a regular file (mode %o)", st.st_mode);
		check_size("fstat", OF(fd)->file, st.st_size);
		return 1;
	}
	int f = (int)below(sh->nfiles), experr = sh->fexists[f] ? 0 : ENOENT;
	long long size = -1;
	const char *name;
	begin_op();
	if (v == 1) {
		name = "stat";
		r = stat(fpath[f], &st);
		size = st.st_size;
	} else if (v == 2) {
		name = "lstat";
		r = lstat(fpath[f], &st);
		size = st.st_size;
	} else if (v == 3) {
		name = "fstatat";
		char nm[16];
		snprintf(nm, sizeof nm, "f%d", f);
		/* dfd is DIR: a file of DIR2 goes by its absolute name */
		r = fstatat(dfd, opt.dir2 && f % 2 ? fpath[f] : nm, &st,
			    chance(50) ? AT_SYMLINK_NOFOLLOW : 0);
		size = st.st_size;
	} else if (v == 4) {
		name = "statx";
		struct statx sx;
		r = statx(AT_FDCWD, fpath[f], 0, STATX_BASIC_STATS, &sx);
		size = (long long)sx.stx_size;
		if (!r && !(sx.stx_mask & STATX_SIZE))
			fail("statx: STATX_SIZE missing from mask 0x%x", sx.stx_mask);
	} else {
		/* statx on a descriptor (AT_EMPTY_PATH) */
		int fd = pick_fd(0);
		name = "statx(fd)";
		struct statx sx;
		if (fd < 0) {
			fd = pick_closed();
			experr = EBADF;
		} else {
			f = OF(fd)->file;
			experr = 0;
		}
		r = statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
		size = (long long)sx.stx_size;
	}
	e = errno;
	rec(name, -1, f, 0, 0, r ? r : size, e);
	want(name, r, e, 0, experr);
	if (!r)
		check_size(name, f, size);
	return 1;
}

static int op_dup(void)
{
	if (nopen() >= MAXOPEN)
		return op_close();
	int src = pick_fd(0);
	if (src < 0)
		return 0;
	int v = (int)below(5), exp, experr = 0, cloexec = 0, tgt = -1, r;
	const char *name;
	if (v == 0) {
		name = "dup";
		exp = lowest_free(0);
	} else if (v == 1 || v == 2) {
		do
			tgt = 3 + (int)below(FDLIM - 3);
		while (foreign[tgt]);
		if (chance(10))
			tgt = src;
		exp = tgt;
		if (v == 1) {
			name = "dup2";
		} else {
			name = "dup3";
			cloexec = chance(50);
			if (tgt == src)
				experr = EINVAL;
		}
	} else {
		int min = (int)below(FDLIM);
		cloexec = v == 4;
		name = cloexec ? "F_DUPFD_CLOEXEC" : "F_DUPFD";
		exp = lowest_free(min);
		tgt = min;
	}
	begin_op();
	if (v == 0)
		r = dup(src);
	else if (v == 1)
		r = dup2(src, tgt);
	else if (v == 2)
		r = dup3(src, tgt, cloexec ? O_CLOEXEC : 0);
	else
		r = fcntl(src, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, tgt);
	int e = errno;
	rec(name, src, tgt, cloexec, 0, r, e);
	want(name, r, e, exp, experr);
	if (r >= 0 && r != src) {
		/* dup2/dup3 onto an open descriptor close it first */
		install(r, fdt[src].ofd, cloexec);
	}
	return 1;
}

static int op_fcntl(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	struct mofd *o = OF(fd);
	int v = (int)below(4), r, e;
	begin_op();
	if (v == 0) {
		r = fcntl(fd, F_GETFL);
		e = errno;
		rec("F_GETFL", fd, 0, 0, 0, r, e);
		if (r < 0)
			want("F_GETFL", r, e, 0, 0);
		int got = r & (O_ACCMODE | O_APPEND | O_NONBLOCK);
		want("F_GETFL (acc|append|nonblock)", got, 0, o->acc | o->flags, 0);
	} else if (v == 1) {
		int nf = o->flags;
		if (chance(50))
			nf ^= O_APPEND;
		if (chance(50))
			nf ^= O_NONBLOCK;
		/* the access mode bits are ignored by F_SETFL; pass junk there sometimes */
		int arg = nf | (chance(20) ? (int)below(3) : o->acc);
		r = fcntl(fd, F_SETFL, arg);
		e = errno;
		rec("F_SETFL", fd, arg, 0, 0, r, e);
		want("F_SETFL", r, e, 0, 0);
		o->flags = nf;
	} else if (v == 2) {
		r = fcntl(fd, F_GETFD);
		e = errno;
		rec("F_GETFD", fd, 0, 0, 0, r, e);
		want("F_GETFD", r, e, fdt[fd].cloexec ? FD_CLOEXEC : 0, 0);
	} else {
		int ce = chance(50);
		r = fcntl(fd, F_SETFD, ce ? FD_CLOEXEC : 0);
		e = errno;
		rec("F_SETFD", fd, ce, 0, 0, r, e);
		want("F_SETFD", r, e, 0, 0);
		fdt[fd].cloexec = ce;
	}
	return 1;
}

static int op_close_range(void)
{
	int lo = 3 + (int)below(FDLIM - 3), hi = lo + (int)below(8);
	if (hi >= FDLIM)
		hi = FDLIM - 1;
	for (int i = lo; i <= hi; i++)
		if (foreign[i])
			return 0;
	int v = (int)below(10), r, e;
	begin_op();
	if (v == 0) {
		r = close_range((unsigned)hi + 1, (unsigned)lo, 0);
		e = errno;
		rec("close_range", -1, hi + 1, lo, 0, r, e);
		want("close_range(first > last)", r, e, 0, EINVAL);
		return 1;
	}
	unsigned fl = v < 4 ? CLOSE_RANGE_CLOEXEC : 0;
	r = close_range((unsigned)lo, (unsigned)hi, fl);
	e = errno;
	rec("close_range", -1, lo, hi, fl, r, e);
	want("close_range", r, e, 0, 0);
	for (int i = lo; i <= hi; i++) {
		if (fdt[i].ofd < 0)
			continue;
		if (fl)
			fdt[i].cloexec = 1;
		else
			uninstall(i);
	}
	return 1;
}

/* Operations that must fail: closed/invalid descriptors. */
static int op_badfd(void)
{
	int fd;
	unsigned c = (unsigned)below(100);
	if (c < 5)
		fd = -1;
	else if (c < 10)
		fd = 100000;
	else
		fd = pick_closed();
	if (fd == -1 && c >= 5)
		return 0;
	bufs_init();
	int v = (int)below(12);
	long long r;
	struct stat st;
	struct iovec iov = { buf1, 16 };
	const char *names[12] = { "read", "write", "pread", "pwrite", "lseek", "fstat",
				  "fsync", "ftruncate", "F_GETFD", "dup", "close", "readv" };
	begin_op();
	switch (v) {
	case 0: r = read(fd, buf1, 16); break;
	case 1: r = write(fd, buf1, 16); break;
	case 2: r = pread(fd, buf1, 16, 0); break;
	case 3: r = pwrite(fd, buf1, 16, 0); break;
	case 4: r = lseek(fd, 0, SEEK_CUR); break;
	case 5: r = fstat(fd, &st); break;
	case 6: r = fsync(fd); break;
	case 7: r = ftruncate(fd, 0); break;
	case 8: r = fcntl(fd, F_GETFD); break;
	case 9: r = dup(fd); break;
	case 10: r = close(fd); break;
	default: r = readv(fd, &iov, 1); break;
	}
	int e = errno;
	rec(names[v], fd, 0, 0, 0, r, e);
	char what[64];
	snprintf(what, sizeof what, "%s on closed fd %d", names[v], fd);
	want(what, r, e, 0, EBADF);
	return 1;
}

/* Every descriptor's offset, flags and close-on-exec bit agree with the model. */
static void check_fds(const char *when)
{
	for (int fd = 0; fd < MAXFD; fd++) {
		if (fdt[fd].ofd < 0)
			continue;
		struct mofd *o = OF(fd);
		off_t r = lseek(fd, 0, SEEK_CUR);
		int e = errno;
		rec("lseek(CUR,0)", fd, 0, 0, 0, r, e);
		if (r < 0 || (uint64_t)r != o->off)
			fail("%s: fd %d offset %lld (errno %d), model %" PRIu64, when, fd, (long long)r,
			     r < 0 ? e : 0, o->off);
		int fl = fcntl(fd, F_GETFL);
		if (fl < 0 || (fl & (O_ACCMODE | O_APPEND | O_NONBLOCK)) != (o->acc | o->flags))
			fail("%s: fd %d F_GETFL 0x%x, model 0x%x", when, fd, fl, o->acc | o->flags);
		int fdf = fcntl(fd, F_GETFD);
		if (fdf != (fdt[fd].cloexec ? FD_CLOEXEC : 0))
			fail("%s: fd %d F_GETFD %d, model cloexec=%d", when, fd, fdf, fdt[fd].cloexec);
	}
}

/* Read a whole file through a fresh descriptor and compare with the model. */
static void verify_file(int f, const char *when)
{
	bufs_init();
	if (!sh->fexists[f]) {
		struct stat st;
		if (stat(fpath[f], &st) == 0 || errno != ENOENT)
			fail("%s: file %d should not exist", when, f);
		return;
	}
	int expfd = lowest_free(0);
	int fd = open(fpath[f], O_RDONLY);
	int e = errno;
	rec("open(verify)", fd, f, 0, 0, fd, e);
	want("open(verify)", fd, e, expfd, 0);
	struct stat st;
	if (fstat(fd, &st))
		fail("%s: fstat: %s", when, strerror(errno));
	check_size(when, f, st.st_size);
	uint64_t size = sh->fsize[f], pos = 0;
	while (pos <= size) {
		ssize_t r = pread(fd, buf1, MAXIO, (off_t)pos);
		e = errno;
		size_t exp = m_avail(f, pos, MAXIO);
		if (r < 0 || (size_t)r != exp)
			fail("%s: pread(%d, %d, %" PRIu64 ") = %zd (errno %d), model %zu", when, fd, MAXIO, pos, r,
			     r < 0 ? e : 0, exp);
		check_bytes(when, f, pos, buf1, (size_t)r);
		if (r == 0)
			break;
		pos += (uint64_t)r;
	}
	if (close(fd))
		fail("%s: close: %s", when, strerror(errno));
}

static int op_verify(void)
{
	begin_op();
	check_fds("check_fds");
	verify_file((int)below(sh->nfiles), "verify_file");
	return 1;
}

/* ------------------------------------------------------------------ */
/* POSIX edges: byte-range locks, RWF flags, sendfile/copy_file_range/  */
/* splice, descriptor limits, failed and short writes, unshared tables. */
/* Each class has its own switch (--no-locks, --no-rwf, --no-copy,      */
/* --no-limits, --no-badwrite, --no-unshare) so a test can isolate it.  */

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

static void wait_child(pid_t pid, const char *what);
static void become_child(const char *name, uint64_t stream);

/* ---- byte-range locks ---- */

/* The kernel's flock_to_posix_lock(): the absolute range [*s, *e] (e =
 * LLONG_MAX: to the end of all files) that l describes for an OFD whose
 * offset is cur in a file of size size, or the errno it fails with. */
static int lock_range(const struct flock *l, long long cur, long long size, long long *s, long long *e)
{
	long long base;
	switch (l->l_whence) {
	case SEEK_SET: base = 0; break;
	case SEEK_CUR: base = cur; break;
	case SEEK_END: base = size; break;
	default: return EINVAL;
	}
	if (l->l_start > LLONG_MAX - base)
		return EOVERFLOW;
	long long st = base + l->l_start;
	if (st < 0)
		return EINVAL;
	if (l->l_len > 0) {
		if (l->l_len - 1 > LLONG_MAX - st)
			return EOVERFLOW;
		*e = st + l->l_len - 1;
	} else if (l->l_len < 0) {
		if (st + l->l_len < 0)
			return EINVAL;
		*e = st - 1;
		st += l->l_len;
	} else {
		*e = LLONG_MAX;
	}
	*s = st;
	return 0;
}

/* A random lock description: whence, start and length around the file,
 * relative to the OFD's offset, negative or overflowing now and then. */
static void rand_flock(struct flock *l, long long cur, long long size)
{
	memset(l, 0, sizeof *l);
	unsigned c = (unsigned)below(100);
	l->l_whence = c < 30 ? SEEK_SET : c < 80 ? SEEK_CUR : c < 96 ? SEEK_END : (chance(50) ? SEEK_DATA : 7);
	long long base = l->l_whence == SEEK_CUR ? cur : l->l_whence == SEEK_END ? size : 0;
	long long target = (long long)below((uint64_t)size + 8192);
	c = (unsigned)below(100);
	if (c < 8)
		l->l_start = -base - 1 - (long long)below(100); /* before byte 0: EINVAL */
	else if (c < 10)
		l->l_start = LLONG_MAX - (long long)below(3); /* EOVERFLOW when base > 2 */
	else if (c < 25)
		l->l_start = 0; /* "from the current offset" */
	else
		l->l_start = target - base;
	c = (unsigned)below(100);
	if (c < 20)
		l->l_len = 0;
	else if (c < 75)
		l->l_len = 1 + (long long)below(8192);
	else
		l->l_len = -1 - (long long)below(8192); /* [start+len, start-1], EINVAL below 0 */
}

static long long rep_len(long long s, long long e)
{
	return e == LLONG_MAX ? 0 : e - s + 1;
}

/* Probe queries run from an independent OFD or a forked child. */
struct lq {
	int cmd;             /* F_GETLK or F_OFD_GETLK */
	long long seekto;    /* the probe descriptor's offset first (-1: leave it) */
	struct flock in;     /* the query */
	struct flock out;    /* the answer */
	int ret, err;
};
#define MAXLQ 8
static struct lq *lqs; /* MAXLQ entries in shared memory (a child answers there) */

static void run_queries(int pfd, int nq)
{
	for (int i = 0; i < nq; i++) {
		struct lq *q = &lqs[i];
		if (q->seekto >= 0 && lseek(pfd, q->seekto, SEEK_SET) != q->seekto) {
			q->ret = -2;
			q->err = errno;
			continue;
		}
		q->out = q->in;
		errno = 0;
		q->ret = fcntl(pfd, q->cmd, &q->out);
		q->err = errno;
	}
}

/* A query at byte p (length 1), sometimes expressed relative to the probe
 * descriptor's offset, which the probe moves there first. */
static void add_query(int *nq, int cmd, short type, long long p)
{
	struct lq *q = &lqs[(*nq)++];
	memset(q, 0, sizeof *q);
	q->cmd = cmd;
	q->seekto = -1;
	q->in.l_type = type;
	q->in.l_len = 1;
	if (chance(50)) {
		q->seekto = (long long)below(4096 + (uint64_t)(p < (1 << 20) ? p : (1 << 20)));
		q->in.l_whence = SEEK_CUR;
		q->in.l_start = p - q->seekto;
	} else {
		q->in.l_whence = SEEK_SET;
		q->in.l_start = p;
	}
}

/* Verify query i's answer: conflict with the held lock or none. */
static void check_query(int i, int conflict, short type, long long s, long long e, pid_t pid)
{
	struct lq *q = &lqs[i];
	char what[96];
	snprintf(what, sizeof what, "lock probe %d (%s type %d whence %d start %lld)", i,
		 q->cmd == F_OFD_GETLK ? "F_OFD_GETLK" : "F_GETLK", q->in.l_type, q->in.l_whence,
		 (long long)q->in.l_start);
	if (q->ret == -2)
		fail("%s: lseek of the probe descriptor to %lld: %s", what, q->seekto, strerror(q->err));
	want(what, q->ret, q->err, 0, 0);
	struct flock x = q->in;
	if (conflict) {
		x.l_type = type;
		x.l_whence = SEEK_SET;
		x.l_start = s;
		x.l_len = rep_len(s, e);
		x.l_pid = pid;
	} else {
		x.l_type = F_UNLCK; /* nothing else changes */
	}
	if (q->out.l_type != x.l_type || q->out.l_whence != x.l_whence || q->out.l_start != x.l_start ||
	    q->out.l_len != x.l_len || q->out.l_pid != x.l_pid)
		fail("%s: answer {type %d whence %d start %lld len %lld pid %d}, kernel model {type %d whence %d "
		     "start %lld len %lld pid %d}",
		     what, q->out.l_type, q->out.l_whence, (long long)q->out.l_start, (long long)q->out.l_len,
		     (int)q->out.l_pid, x.l_type, x.l_whence, (long long)x.l_start, (long long)x.l_len,
		     (int)x.l_pid);
}

/* Run lqs[0..nq) from a descriptor that is not the lock owner: a fresh open
 * of the file in this process (an OFD of its own) or, from_child, the same
 * from a forked child (another POSIX owner). */
static void probe_locks(int f, int nq, int from_child)
{
	if (from_child) {
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			fail("fork (lock probe): %s", strerror(errno));
		if (pid == 0) {
			in_child = 1;
			who = "lock-probe";
			int pfd = open(fpath[f], O_RDONLY);
			if (pfd < 0)
				fail("lock probe: open: %s", strerror(errno));
			run_queries(pfd, nq);
			_exit(0);
		}
		wait_child(pid, "lock probe");
		return;
	}
	int expfd = lowest_free(0);
	int pfd = open(fpath[f], O_RDONLY);
	int e = errno;
	rec("open(lock probe)", pfd, f, 0, 0, pfd, e);
	want("open(lock probe)", pfd, e, expfd, 0);
	run_queries(pfd, nq);
	int r = close(pfd);
	e = errno;
	want("close(lock probe)", r, e, 0, 0);
}

static const char *lock_cmd_name(int cmd)
{
	switch (cmd) {
	case F_SETLK: return "F_SETLK";
	case F_SETLKW: return "F_SETLKW";
	case F_GETLK: return "F_GETLK";
	case F_OFD_SETLK: return "F_OFD_SETLK";
	case F_OFD_SETLKW: return "F_OFD_SETLKW";
	case F_OFD_GETLK: return "F_OFD_GETLK";
	default: return "lock?";
	}
}

/* One fcntl lock command as drawn: the call, its record and its check
 * against experr. The kernel's answer (F_GETLK fills it in) goes to *ans,
 * the call's text to name. */
static int lock_call(int fd, int cmd, const struct flock *l, int experr, struct flock *ans,
		     char *name, size_t namelen)
{
	snprintf(name, namelen, "%s(type %d whence %d)", lock_cmd_name(cmd), l->l_type, l->l_whence);
	*ans = *l;
	begin_op();
	int r = fcntl(fd, cmd, ans);
	int err = errno;
	rec(lock_cmd_name(cmd), fd, l->l_start, l->l_len, l->l_whence, r, err);
	want(name, r, err, 0, experr);
	return r;
}

/*
 * One lock operation on a generator descriptor (whose offset the generator
 * has moved, so SEEK_CUR and lockf() use it), with the kernel's range
 * arithmetic and argument checks as the model. Nothing is locked between
 * operations: a lock that is set is probed from a non-owner at its first
 * and last byte (conflict, with the kernel's report of the range) and just
 * outside them (no conflict), then removed, and the file is checked to be
 * free of locks again.
 */
static int op_lock(void)
{
	if (opt.no_locks)
		return 0;
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	struct mofd *o = OF(fd);
	int f = o->file;
	long long cur = (long long)o->off, size = (long long)sh->fsize[f];
	struct flock l;
	rand_flock(&l, cur, size);
	int v = (int)below(10), cmd = 0, ofdlock = 0, experr = 0, lfcmd = 0;
	long long s = 0, e = 0, lflen = 0;
	short held = F_UNLCK;
	int r, err;
	char name[48];
	if (v < 6) {
		/* set: F_SETLK(W) / F_OFD_SETLK(W) */
		static const int cmds[4] = { F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW };
		cmd = cmds[below(4)];
		ofdlock = cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
		unsigned c = (unsigned)below(100);
		l.l_type = c < 40 ? F_WRLCK : c < 80 ? F_RDLCK : c < 96 ? F_UNLCK : 5;
		if (ofdlock && chance(4))
			l.l_pid = 1 + (pid_t)below(1000); /* OFD locks want l_pid 0 */
		/* fcntl_setlk(): the range and type, the access mode, then (OFD) l_pid */
		if ((experr = lock_range(&l, cur, size, &s, &e)))
			;
		else if (l.l_type != F_RDLCK && l.l_type != F_WRLCK && l.l_type != F_UNLCK)
			experr = EINVAL;
		else if ((l.l_type == F_RDLCK && !rd_ok(o->acc)) || (l.l_type == F_WRLCK && !wr_ok(o->acc)))
			experr = EBADF;
		else if (ofdlock && l.l_pid)
			experr = EINVAL;
		struct flock lc;
		r = lock_call(fd, cmd, &l, experr, &lc, name, sizeof name);
		if (!experr && l.l_type != F_UNLCK)
			held = l.l_type;
	} else if (v < 8) {
		/* lockf: a write lock from the current offset, len bytes (negative: before it) */
		static const int lcmds[5] = { F_LOCK, F_TLOCK, F_ULOCK, F_TEST, 9 };
		lfcmd = lcmds[chance(4) ? 4 : below(4)];
		lflen = l.l_len;
		if (chance(5))
			lflen = -cur - 1 - (long long)below(10);
		struct flock lk = { .l_whence = SEEK_CUR, .l_start = 0, .l_len = lflen };
		if (lfcmd == 9)
			experr = EINVAL;
		else if ((experr = lock_range(&lk, cur, size, &s, &e)))
			;
		else if ((lfcmd == F_LOCK || lfcmd == F_TLOCK) && !wr_ok(o->acc))
			experr = EBADF;
		snprintf(name, sizeof name, "lockf(cmd %d, len %lld)", lfcmd, lflen);
		begin_op();
		r = lockf(fd, lfcmd, lflen);
		err = errno;
		rec("lockf", fd, lfcmd, lflen, cur, r, err);
		/* F_TEST: no other process holds a lock here */
		want(name, r, err, 0, experr);
		if (!experr && (lfcmd == F_LOCK || lfcmd == F_TLOCK))
			held = F_WRLCK;
	} else {
		/* query with nothing locked: only l_type changes, to F_UNLCK */
		cmd = chance(50) ? F_GETLK : F_OFD_GETLK;
		unsigned c = (unsigned)below(100);
		l.l_type = c < 45 ? F_WRLCK : c < 90 ? F_RDLCK : c < 96 ? F_UNLCK : 5;
		if (cmd == F_OFD_GETLK && chance(4))
			l.l_pid = 1 + (pid_t)below(1000);
		/* fcntl_getlk(): F_GETLK wants F_RDLCK or F_WRLCK before all else;
		 * F_OFD_GETLK checks the range first, then the type (it also takes
		 * F_UNLCK: "any lock here?") and l_pid */
		if (cmd == F_GETLK && l.l_type != F_RDLCK && l.l_type != F_WRLCK)
			experr = EINVAL; /* F_GETLK checks the type first */
		else if ((experr = lock_range(&l, cur, size, &s, &e)))
			;
		else if (l.l_type != F_RDLCK && l.l_type != F_WRLCK && l.l_type != F_UNLCK)
			experr = EINVAL;
		else if (cmd == F_OFD_GETLK && l.l_pid)
			experr = EINVAL;
		struct flock lc;
		r = lock_call(fd, cmd, &l, experr, &lc, name, sizeof name);
		if (!r) {
			struct flock x = l;
			x.l_type = F_UNLCK;
			if (memcmp(&x, &lc, sizeof x))
				fail("%s with no lock held: answer {type %d whence %d start %lld len %lld pid %d}, "
				     "expected the query back with type F_UNLCK",
				     name, lc.l_type, lc.l_whence, (long long)lc.l_start, (long long)lc.l_len,
				     (int)lc.l_pid);
		}
	}
	if (held != F_UNLCK) {
		pid_t pid = ofdlock ? -1 : getpid();
		/* the owner itself sees no conflict with its own lock */
		struct flock self = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = s, .l_len = 1 };
		r = fcntl(fd, ofdlock ? F_OFD_GETLK : F_GETLK, &self);
		err = errno;
		want("self query of a held lock", r, err, 0, 0);
		if (self.l_type != F_UNLCK)
			fail("%s: the owner's own query at %lld reports a conflict (type %d pid %d)", name, s,
			     self.l_type, (int)self.l_pid);
		int child = !in_child && !opt.no_fork && chance(30);
		int nq = 0;
		int qcmd = child ? F_GETLK : F_OFD_GETLK;
		add_query(&nq, qcmd, F_WRLCK, s);
		add_query(&nq, qcmd, F_RDLCK, s); /* conflicts with a write lock only */
		if (e != LLONG_MAX)
			add_query(&nq, qcmd, F_WRLCK, e);
		if (s > 0)
			add_query(&nq, qcmd, F_WRLCK, s - 1);
		if (e < LLONG_MAX - 1)
			add_query(&nq, qcmd, F_WRLCK, e + 1);
		probe_locks(f, nq, child);
		int i = 0;
		check_query(i++, 1, held, s, e, pid);
		check_query(i++, held == F_WRLCK, held, s, e, pid);
		if (e != LLONG_MAX)
			check_query(i++, 1, held, s, e, pid);
		if (s > 0)
			check_query(i++, 0, held, s, e, pid);
		if (e < LLONG_MAX - 1)
			check_query(i++, 0, held, s, e, pid);
		struct flock un = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
		r = fcntl(fd, ofdlock ? F_OFD_SETLK : F_SETLK, &un);
		err = errno;
		want("unlock", r, err, 0, 0);
	}
	if (held != F_UNLCK || chance(10)) {
		/* nothing is locked any more, anywhere in the file */
		int nq = 0;
		add_query(&nq, F_OFD_GETLK, F_WRLCK, 0);
		lqs[0].in.l_len = 0;
		probe_locks(f, nq, 0);
		check_query(0, 0, 0, 0, 0, 0);
	}
	return 1;
}

/* ---- preadv2/pwritev2 flags, modelled on the bare kernel's answers ---- */

/* 0x100 is RWF_NOSIGNAL from Linux 6.18 on (unknown before); the last two
 * bits are unknown to every kernel so far */
static const int rwf_flags[] = { 0,          RWF_HIPRI,  RWF_DSYNC,     RWF_SYNC, RWF_NOWAIT, RWF_APPEND,
				 RWF_NOAPPEND, RWF_ATOMIC, RWF_DONTCACHE, 0x100,    0x10000000, (int)0x80000000 };
#define NRWF ((int)(sizeof rwf_flags / sizeof rwf_flags[0]))
/* answer index: [write][flag][access 0..2][O_APPEND][zero length] */
#define RWF_IDX(w, fl, acc, app, zero) (((((w) * NRWF + (fl)) * 3 + (acc)) * 2 + (app)) * 2 + (zero))
#define NRWF_ANS (2 * NRWF * 3 * 2 * 2)
#define KSPEC_TAG "K1:"

/*
 * The model cannot know how a file system answers each RWF flag (RWF_NOWAIT
 * on tmpfs, RWF_DONTCACHE, RWF_ATOMIC, unknown bits), so it asks the kernel
 * once: every flag, for reads and writes, on descriptors of each access
 * mode with and without O_APPEND, with empty and non-empty buffers, on a
 * scratch file in DIR. Under Chell that probe would go through Chell, so
 * there the answers come from a plain run: `chell_randops --probe --dir DIR`
 * prints them (one K1:... word) and `--kernel K1:...` passes them in.
 * Chell re-adds LD_PRELOAD to every exec, so a re-exec cannot escape it.
 * An entry is an errno (0: success). RWF_NOWAIT may also say EAGAIN where
 * the data is not at hand, so its success is "the full count or EAGAIN".
 */
static unsigned char rwf_ans[NRWF_ANS];
static unsigned rwf_usable; /* bit i: flag i has one answer whatever the geometry */

static void probe_kernel(const char *dir, char *out, size_t outsz)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/.randops-probe", dir);
	unsigned char b[8192];
	memset(b, 0x5a, sizeof b);
	unsigned usable = (1u << NRWF) - 1;
	static const int accs[3] = { O_RDONLY, O_WRONLY, O_RDWR };
	for (int a = 0; a < 3; a++)
		for (int app = 0; app < 2; app++)
			for (int fl = 0; fl < NRWF; fl++)
				for (int w = 0; w < 2; w++)
					for (int zero = 0; zero < 2; zero++) {
						int geo[2];
						for (int g = 0; g < 2; g++) {
							int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
							if (fd < 0 || pwrite(fd, b, sizeof b, 0) != (ssize_t)sizeof b)
								fprintf(stderr, "chell_randops: probe %s: %s\n", path,
									strerror(errno)),
									exit(2);
							close(fd);
							fd = open(path, accs[a] | (app ? O_APPEND : 0));
							if (fd < 0)
								fprintf(stderr, "chell_randops: probe %s: %s\n", path,
									strerror(errno)),
									exit(2);
							/* g 0: one aligned power-of-two buffer (what RWF_ATOMIC wants);
							 * g 1: two odd pieces at an odd offset */
							struct iovec iov[2] = { { b, zero ? 0 : 512 }, { b + 600, zero ? 0 : 77 } };
							off_t off = g ? 1001 : 4096;
							ssize_t r = w ? pwritev2(fd, iov, g ? 2 : 1, off, rwf_flags[fl])
								      : preadv2(fd, iov, g ? 2 : 1, off, rwf_flags[fl]);
							geo[g] = r < 0 ? errno : 0;
							close(fd);
						}
						if (geo[0] != geo[1])
							usable &= ~(1u << fl);
						rwf_ans[RWF_IDX(w, fl, a, app, zero)] = (unsigned char)geo[1];
					}
	unlink(path);
	size_t n = (size_t)snprintf(out, outsz, KSPEC_TAG "%x:", usable);
	for (int i = 0; i < NRWF_ANS && n + 3 < outsz; i++)
		n += (size_t)snprintf(out + n, outsz - n, "%02x", rwf_ans[i]);
}

static int parse_kernel(const char *spec)
{
	char *end;
	if (strncmp(spec, KSPEC_TAG, strlen(KSPEC_TAG)))
		return -1;
	spec += strlen(KSPEC_TAG);
	unsigned long u = strtoul(spec, &end, 16);
	if (*end != ':' || strlen(end + 1) != 2 * NRWF_ANS)
		return -1;
	rwf_usable = (unsigned)u;
	for (int i = 0; i < NRWF_ANS; i++) {
		char h[3] = { end[1 + 2 * i], end[2 + 2 * i], 0 };
		rwf_ans[i] = (unsigned char)strtoul(h, NULL, 16);
	}
	return 0;
}

static int acc_index(int acc)
{
	return acc == O_RDONLY ? 0 : acc == O_WRONLY ? 1 : 2;
}

/* preadv2/pwritev2 with one RWF flag, at the current offset (-1) or a given one. */
static int op_rwf(void)
{
	if (opt.no_rwf)
		return 0;
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	int fl = (int)below(NRWF);
	if (!(rwf_usable & (1u << fl)))
		return 0;
	int flags = rwf_flags[fl], w = chance(50);
	long long off = chance(40) ? -1 : (long long)roff(o->file);
	if (chance(4))
		off = -2 - (long long)below(1000);
	size_t n = rsize();
	int app = !!(o->flags & O_APPEND);
	int ans = rwf_ans[RWF_IDX(w, fl, acc_index(o->acc), app, n == 0)];
	int nowait = (flags & RWF_NOWAIT) && (ans == 0 || ans == EAGAIN);
	int experr = off < -1 ? EINVAL : nowait ? 0 : ans;
	uint64_t pos = off == -1 ? o->off : (uint64_t)(off < 0 ? 0 : off);
	if (w) {
		int append = (flags & RWF_APPEND) || (app && !(flags & RWF_NOAPPEND));
		if (append)
			pos = sh->fsize[o->file];
		if (pos >= sh->max_size) {
			if (off == -1 && !append)
				return op_lseek_to(fd, (long long)below(sh->max_size + 1));
			n = 0;
			experr = off < -1 ? EINVAL : rwf_ans[RWF_IDX(w, fl, acc_index(o->acc), app, 1)];
			nowait = (flags & RWF_NOWAIT) && (experr == 0 || experr == EAGAIN);
			if (nowait)
				experr = 0;
		} else if (pos + n > sh->cap) {
			n = (size_t)(sh->cap - pos);
		}
		fill_random(buf1, n, 0);
	}
	struct iovec iov[8];
	int cnt = mkiov(iov, buf1, n, 8);
	char name[48];
	snprintf(name, sizeof name, "%s(flags 0x%x, off %lld)", w ? "pwritev2" : "preadv2", (unsigned)flags, off);
	begin_op();
	ssize_t r = w ? pwritev2(fd, iov, cnt, off, flags) : preadv2(fd, iov, cnt, off, flags);
	int e = errno;
	rec(w ? "pwritev2(rwf)" : "preadv2(rwf)", fd, (long long)n, off, flags, r, e);
	if (nowait && r < 0 && e == EAGAIN)
		return 1; /* allowed: the data was not at hand */
	long long exp = experr ? 0 : w ? (long long)n : (long long)m_avail(o->file, pos, n);
	/* RWF_NOWAIT may also stop short where the rest is not at hand */
	if (nowait && r > 0 && r < exp)
		exp = r;
	want(name, r, e, exp, experr);
	if (r > 0) {
		if (w)
			m_write(o->file, pos, buf1, (size_t)r);
		else
			check_bytes(name, o->file, pos, buf1, (size_t)r);
	}
	/* an empty transfer never moves the offset, O_APPEND or not */
	if (r > 0 && off == -1)
		o->off = pos + (uint64_t)r;
	return 1;
}

/* ---- sendfile, copy_file_range, splice ---- */

/* Pick a descriptor for a copy: a generator fd mostly; sometimes -1, a
 * closed number, or the directory (dfd). *kind: 0 model fd, 1 bad, 2 dir. */
static int pick_copy_fd(int *kind)
{
	unsigned c = (unsigned)below(100);
	*kind = 0;
	if (c < 4) {
		*kind = 1;
		return chance(50) ? -1 : pick_closed();
	}
	if (c < 7) {
		*kind = 2;
		return dfd;
	}
	return pick_fd(0);
}

static long long copy_len(void)
{
	unsigned c = (unsigned)below(100);
	if (c < 5)
		return 0;
	if (c < 60)
		return 1 + (long long)below(4096);
	return 1 + (long long)below(MAXIO);
}

/* Apply a successful copy to the model: n bytes from (fi, pin) to (fo, pout). */
static void m_copy(int fi, uint64_t pin, int fo, uint64_t pout, size_t n)
{
	if (!n)
		return;
	unsigned char *tmp = malloc(n);
	if (!tmp)
		fail("out of memory");
	memcpy(tmp, fdata(fi) + pin, n);
	m_write(fo, pout, tmp, n);
	free(tmp);
}

static int op_sendfile(void)
{
	int ik, ok;
	int in = pick_copy_fd(&ik), out = pick_copy_fd(&ok);
	if ((ik == 0 && in < 0) || (ok == 0 && out < 0))
		return 0;
	struct mofd *oi = ik == 0 ? OF(in) : NULL, *oo = ok == 0 ? OF(out) : NULL;
	int useoff = chance(50);
	long long count = copy_len();
	off_t xoff = 0;
	if (useoff && ik != 1)
		xoff = chance(4) ? -1 - (long long)below(100) : (off_t)(oi ? roff(oi->file) : below(4096));
	int experr = 0;
	uint64_t pin = 0, pout = 0, n = 0;
	/* do_sendfile(): the input first (a readable descriptor, a valid
	 * position), then the output; splice refuses an O_APPEND output */
	if (ik == 1)
		experr = EBADF;
	else if (ik == 0 && !rd_ok(oi->acc))
		experr = EBADF;
	else if (useoff && xoff < 0)
		experr = EINVAL;
	else if (ok == 1)
		experr = EBADF;
	else if (ok == 2)
		experr = EBADF; /* the directory is open read-only */
	else if (!wr_ok(oo->acc))
		experr = EBADF;
	else if (oo->flags & O_APPEND)
		experr = EINVAL;
	else if (ik == 2 && count)
		experr = EINVAL; /* a directory cannot be spliced from, but nothing is not read */
	if (!experr && ik == 2) {
		begin_op();
		ssize_t r = sendfile(out, in, NULL, 0);
		int e = errno;
		rec("sendfile(dir, 0)", in, out, 0, 0, r, e);
		want("sendfile(directory input, count 0)", r, e, 0, 0);
		return 1;
	}
	if (!experr) {
		pin = useoff ? (uint64_t)xoff : oi->off;
		pout = oo->off;
		if (pout >= sh->max_size)
			return op_lseek_to(out, (long long)below(sh->max_size + 1));
		if (pout + (uint64_t)count > sh->cap)
			count = (long long)(sh->cap - pout);
		n = m_avail(oi->file, pin, (size_t)count);
		/* a copy within one file: only through two OFDs and between ranges
		 * that do not overlap even at the full count (the kernel copies
		 * through a pipe in pieces and reads on while the output grows) */
		uint64_t c = (uint64_t)count, sz = sh->fsize[oi->file];
		if (oi->file == oo->file &&
		    (fdt[in].ofd == fdt[out].ofd || (c && pout < pin + c && pin < pout + c) ||
		     (pin + c > sz && pout + c > sz) /* reading to an EOF the writes move */))
			return 0;
	}
	off_t xo = xoff;
	begin_op();
	ssize_t r = sendfile(out, in, useoff ? &xo : NULL, (size_t)count);
	int e = errno;
	rec(useoff ? "sendfile(off)" : "sendfile", in, out, xoff, count, r, e);
	want("sendfile", r, e, (long long)n, experr);
	if (r >= 0) {
		m_copy(oi->file, pin, oo->file, pout, (size_t)r);
		if (useoff) {
			if ((uint64_t)xo != pin + (uint64_t)r)
				fail("sendfile: *offset %lld after, model %" PRIu64, (long long)xo, pin + (uint64_t)r);
		} else {
			oi->off = pin + (uint64_t)r;
		}
		oo->off = pout + (uint64_t)r;
	} else if (useoff && xo != xoff) {
		fail("sendfile failed but moved *offset from %lld to %lld", (long long)xoff, (long long)xo);
	}
	return 1;
}

static int op_copy_file_range(void)
{
	int ik, ok;
	int in = pick_copy_fd(&ik), out = pick_copy_fd(&ok);
	if ((ik == 0 && in < 0) || (ok == 0 && out < 0))
		return 0;
	struct mofd *oi = ik == 0 ? OF(in) : NULL, *oo = ok == 0 ? OF(out) : NULL;
	int uin = chance(50), uout = chance(50);
	unsigned flags = chance(3) ? 1u + (unsigned)below(8) : 0;
	long long len = copy_len();
	loff_t xin = 0, xout = 0;
	if (uin && oi)
		xin = chance(3) ? -1 - (long long)below(100) : (loff_t)roff(oi->file);
	if (uout && oo)
		xout = chance(3) ? -1 - (long long)below(100) : (loff_t)roff(oo->file);
	int experr = 0;
	uint64_t n = 0;
	long long pin = uin ? xin : oi ? (long long)oi->off : 0;
	long long pout = uout ? xout : oo ? (long long)oo->off : 0;
	/* the syscall resolves both descriptors, then vfs_copy_file_range():
	 * flags, then generic_file_rw_checks() (directories, access modes,
	 * O_APPEND), the copy shortened to the input's EOF, overlap within one
	 * file, and rw_verify_area() (negative positions) */
	if (ik == 1 || ok == 1)
		experr = EBADF;
	else if (flags)
		experr = EINVAL;
	else if (ik == 2 || ok == 2)
		experr = EISDIR;
	else if (!rd_ok(oi->acc) || !wr_ok(oo->acc) || (oo->flags & O_APPEND))
		experr = EBADF;
	else {
		uint64_t size = sh->fsize[oi->file];
		n = pin >= 0 && (uint64_t)pin >= size ? 0 : size - (uint64_t)pin;
		if (n > (uint64_t)len)
			n = (uint64_t)len;
		/* "offsets don't wrap" adds the count to the offset as unsigned:
		 * a negative offset wraps when the count reaches its magnitude;
		 * otherwise it fails rw_verify_area() */
		if ((pin < 0 && len >= -pin) || (pout < 0 && len >= -pout))
			experr = EOVERFLOW;
		else if (pin < 0 || pout < 0)
			experr = EINVAL;
		else if (oi->file == oo->file && pout + (long long)n > pin && pout < pin + (long long)n)
			experr = EINVAL;
		else if ((uint64_t)pout >= sh->max_size && n) {
			if (!uout)
				return op_lseek_to(out, (long long)below(sh->max_size + 1));
			return 0;
		} else if ((uint64_t)pout + n > sh->cap) {
			return 0;
		}
	}
	loff_t ai = xin, ao = xout;
	begin_op();
	ssize_t r = copy_file_range(in, uin ? &ai : NULL, out, uout ? &ao : NULL, (size_t)len, flags);
	int e = errno;
	rec(uin || uout ? "copy_file_range(off)" : "copy_file_range", in, out, pin, len, r, e);
	char what[80];
	snprintf(what, sizeof what, "copy_file_range(%s, %s, len %lld, flags %u)", uin ? "off_in" : "NULL",
		 uout ? "off_out" : "NULL", len, flags);
	want(what, r, e, experr ? 0 : (long long)n, experr);
	if (r >= 0) {
		m_copy(oi->file, (uint64_t)pin, oo->file, (uint64_t)pout, (size_t)r);
		if (uin) {
			if (ai != xin + r)
				fail("%s: *off_in %lld after, model %lld", what, (long long)ai, (long long)xin + r);
		} else {
			oi->off = (uint64_t)pin + (uint64_t)r;
		}
		if (uout) {
			if (ao != xout + r)
				fail("%s: *off_out %lld after, model %lld", what, (long long)ao, (long long)xout + r);
		} else {
			oo->off = (uint64_t)pout + (uint64_t)r;
		}
	} else if (ai != xin || ao != xout) {
		fail("%s failed but moved an offset", what);
	}
	return 1;
}

/* A fresh pipe: its two descriptors are the lowest free, as the kernel allots. */
static void open_pipe(int p[2])
{
	int e0 = lowest_free(0);
	foreign[e0] = 1;
	int e1 = lowest_free(0);
	foreign[e0] = 0;
	int r = pipe2(p, O_CLOEXEC), e = errno;
	rec("pipe2", -1, 0, 0, 0, r, e);
	want("pipe2", r, e, 0, 0);
	if (p[0] != e0 || p[1] != e1)
		fail("pipe2 gave descriptors %d,%d; lowest free are %d,%d", p[0], p[1], e0, e1);
}

static void close_pipe(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (close(p[i]))
			fail("close(pipe %d): %s", p[i], strerror(errno));
}

/* sendfile and splice into a pipe, splice out of one, copy_file_range with one. */
static int op_pipe_copy(void)
{
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	struct mofd *o = OF(fd);
	int p[2];
	int v = (int)below(5), useoff = chance(50);
	size_t count = (size_t)below(16384 + 1); /* fits in an empty pipe */
	loff_t xoff = useoff ? (loff_t)roff(o->file) : 0, xo = xoff;
	uint64_t pos = useoff ? (uint64_t)xoff : o->off;
	ssize_t r;
	int e, experr = 0;
	const char *name;
	open_pipe(p);
	if (v <= 1) {
		/* file -> pipe: reads at the offset given or the OFD's, which then advances */
		name = v == 0 ? "sendfile(to pipe)" : "splice(file to pipe)";
		experr = rd_ok(o->acc) ? 0 : EBADF;
		size_t n = experr ? 0 : m_avail(o->file, pos, count);
		begin_op();
		if (v == 0) {
			off_t so = (off_t)xoff;
			r = sendfile(p[1], fd, useoff ? &so : NULL, count);
			xo = so;
		} else {
			r = splice(fd, useoff ? &xo : NULL, p[1], NULL, count, 0);
		}
		e = errno;
		rec(name, fd, (long long)count, useoff ? xoff : -1, 0, r, e);
		want(name, r, e, (long long)n, experr);
		if (r > 0) {
			ssize_t g = read(p[0], buf1, (size_t)r);
			if (g != r)
				fail("%s: read %zd of %zd bytes back from the pipe", name, g, r);
			check_bytes(name, o->file, pos, buf1, (size_t)r);
		}
		if (r >= 0 && !useoff)
			o->off = pos + (uint64_t)r;
	} else if (v == 2) {
		/* pipe -> file: writes at the offset given or the OFD's; never O_APPEND */
		name = "splice(pipe to file)";
		if (!useoff && pos >= sh->max_size) {
			close_pipe(p);
			return op_lseek_to(fd, (long long)below(sh->max_size + 1));
		}
		if (pos + count > sh->cap)
			count = pos >= sh->cap ? 0 : (size_t)(sh->cap - pos);
		fill_random(buf1, count, 0);
		if (count && write(p[1], buf1, count) != (ssize_t)count)
			fail("write to pipe: %s", strerror(errno));
		experr = !wr_ok(o->acc) ? EBADF : (o->flags & O_APPEND) ? EINVAL : 0;
		begin_op();
		r = splice(p[0], NULL, fd, useoff ? &xo : NULL, count, SPLICE_F_NONBLOCK);
		e = errno;
		rec(name, fd, (long long)count, useoff ? xoff : -1, 0, r, e);
		want(name, r, e, (long long)count, count ? experr : 0);
		if (r > 0)
			m_write(o->file, pos, buf1, (size_t)r);
		if (r >= 0 && !useoff)
			o->off = pos + (uint64_t)r;
	} else {
		/* copy_file_range wants regular files on both ends */
		name = v == 3 ? "copy_file_range(to pipe)" : "copy_file_range(from pipe)";
		begin_op();
		r = v == 3 ? copy_file_range(fd, NULL, p[1], NULL, count, 0)
			   : copy_file_range(p[0], NULL, fd, NULL, count, 0);
		e = errno;
		rec(name, fd, (long long)count, 0, 0, r, e);
		want(name, r, e, 0, EINVAL);
	}
	if (useoff && r >= 0 && xo != xoff + r)
		fail("%s: offset %lld after, model %lld", name, (long long)xo, (long long)xoff + r);
	if (useoff && r < 0 && xo != xoff)
		fail("%s failed but moved the offset", name);
	close_pipe(p);
	return 1;
}

static int op_copy(void)
{
	if (opt.no_copy)
		return 0;
	unsigned c = (unsigned)below(100);
	return c < 40 ? op_sendfile() : c < 80 ? op_copy_file_range() : op_pipe_copy();
}

/* ---- descriptor limits ---- */

/*
 * In a forked child: lower RLIMIT_NOFILE to L and allocate descriptors
 * (dup, F_DUPFD, open, by turns) until EMFILE. The count must be exactly
 * the free numbers below L, each call must return the lowest of them, and
 * numbers at or above L are refused as the kernel refuses them.
 */
static int op_limits(void)
{
	if (opt.no_limits || opt.no_fork || in_child)
		return 0;
	int src = pick_fd(0);
	if (src < 0)
		return 0;
	/* Mostly a limit among the generator's descriptors; sometimes the limit
	 * the process has (up to FULL_LIMIT), where a preloaded library keeps
	 * its own descriptors near the top: they must not count against it.
	 * That needs room above the soft limit: with soft == hard (and no
	 * CAP_SYS_RESOURCE to raise it) nothing can live above it, a case
	 * docs/ARCHITECTURE.md gives as a known limit, so it is not drawn. */
	struct rlimit rl0;
	if (getrlimit(RLIMIT_NOFILE, &rl0))
		fail("getrlimit: %s", strerror(errno));
	int L = 4 + (int)below(FDLIM - 4);
	int room = rl0.rlim_max == RLIM_INFINITY || rl0.rlim_cur + 256 <= rl0.rlim_max;
	if (chance(25) && room)
		L = rl0.rlim_cur == RLIM_INFINITY || rl0.rlim_cur > FULL_LIMIT ? FULL_LIMIT : (int)rl0.rlim_cur;
	int f = OF(src)->file;
	int exp = 0;
	for (int i = 0; i < L; i++)
		exp += i >= MAXFD || (fdt[i].ofd < 0 && !foreign[i]);
	begin_op();
	rec("limits", src, L, exp, 0, 0, 0);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		fail("fork (limits): %s", strerror(errno));
	if (pid == 0) {
		become_child("limits", 0x400000 + cur_id);
		struct rlimit rl;
		if (getrlimit(RLIMIT_NOFILE, &rl))
			fail("getrlimit: %s", strerror(errno));
		rl.rlim_cur = (rlim_t)L;
		int r = setrlimit(RLIMIT_NOFILE, &rl), e = errno;
		want("setrlimit(RLIMIT_NOFILE)", r, e, 0, 0);
		struct rlimit got;
		if (getrlimit(RLIMIT_NOFILE, &got) || got.rlim_cur != (rlim_t)L)
			fail("getrlimit after setrlimit(%d): %lld", L, (long long)got.rlim_cur);
		char *occ = calloc((size_t)L, 1);
		if (!occ)
			fail("out of memory");
		for (int i = 0; i < MAXFD && i < L; i++)
			occ[i] = fdt[i].ofd >= 0 || foreign[i];
		int count = 0, last = -1, low = 0;
		for (int k = 0;; k++) {
			int want_fd = -1;
			while (low < L && occ[low])
				low++;
			if (low < L)
				want_fd = low;
			/* opens only among the first: thousands of them add nothing */
			int v = k < 96 ? k % 3 : k % 2;
			const char *name = v == 0 ? "dup" : v == 1 ? "F_DUPFD" : "open";
			if (v == 0)
				r = dup(src);
			else if (v == 1)
				r = fcntl(src, F_DUPFD, 0);
			else
				r = open(fpath[f], O_RDONLY);
			e = errno;
			rec(name, src, L, count, 0, r, e);
			if (want_fd < 0) {
				want(name, r, e, 0, EMFILE);
				break;
			}
			want(name, r, e, want_fd, 0);
			occ[r] = 1;
			last = r;
			count++;
			if (count > L)
				fail("more than %d descriptors under RLIMIT_NOFILE %d", count, L);
		}
		if (count != exp)
			fail("RLIMIT_NOFILE %d: %d descriptors allocated, the model's free count is %d", L, count, exp);
		/* at and above the limit: dup2/dup3 EBADF, F_DUPFD EINVAL */
		/* (src itself may be at or above the limit: not as the target) */
		int hi = L + (int)below(64);
		if (hi == src)
			hi++;
		r = dup2(src, hi);
		e = errno;
		rec("dup2(>=limit)", src, hi, L, 0, r, e);
		want("dup2 at or above RLIMIT_NOFILE", r, e, 0, EBADF);
		r = dup3(src, L == src ? L + 1 : L, O_CLOEXEC);
		e = errno;
		rec("dup3(>=limit)", src, L, L, 0, r, e);
		want("dup3 at RLIMIT_NOFILE", r, e, 0, EBADF);
		r = fcntl(src, chance(50) ? F_DUPFD : F_DUPFD_CLOEXEC, hi);
		e = errno;
		rec("F_DUPFD(>=limit)", src, hi, L, 0, r, e);
		want("F_DUPFD at or above RLIMIT_NOFILE", r, e, 0, EINVAL);
		if (last >= 0) {
			/* a freed number below the limit is the next one given */
			r = close(last);
			e = errno;
			want("close", r, e, 0, 0);
			r = dup(src);
			e = errno;
			rec("dup(after close)", src, last, 0, 0, r, e);
			want("dup after a close at the limit", r, e, last, 0);
			int p[2];
			r = pipe(p);
			e = errno;
			rec("pipe(at limit)", -1, L, 0, 0, r, e);
			want("pipe at the limit", r, e, 0, EMFILE);
		}
		_exit(0);
	}
	wait_child(pid, "limits");
	atomic_fetch_add(&sh->forks, 1);
	return 1;
}

/* ---- failed and short writes ---- */

static unsigned char *badpg; /* two pages: readable-writable, then PROT_NONE */
static size_t pgsz;

static void badpg_init(void)
{
	if (badpg)
		return;
	pgsz = (size_t)sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, 2 * pgsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || mprotect((char *)p + pgsz, pgsz, PROT_NONE))
		fail("mmap/mprotect for bad buffers: %s", strerror(errno));
	badpg = p;
}

/*
 * write/pwrite/writev/pwritev whose buffer is bad from the first byte (EFAULT,
 * nothing written, the size unchanged), or whose later bytes are (a short
 * count: exactly the good bytes before the first bad one are written, the
 * size is position + count). Mostly at end of file, where a wrong size shows.
 */
static int op_badwrite(void)
{
	if (opt.no_badwrite)
		return 0;
	int fd = pick_fd(0);
	if (fd < 0)
		return 0;
	bufs_init();
	badpg_init();
	struct mofd *o = OF(fd);
	int f = o->file, posn = chance(50);
	uint64_t size = sh->fsize[f];
	long long off = chance(70) ? (long long)size : (long long)roff(f);
	int app = !!(o->flags & O_APPEND);
	uint64_t pos = app ? size : posn ? (uint64_t)off : o->off;
	if (pos >= sh->max_size) {
		if (!posn && !app)
			return op_lseek_to(fd, (long long)below(sh->max_size + 1));
		return 0;
	}
	int v = (int)below(5);
	size_t good = 0;
	int experr = wr_ok(o->acc) ? 0 : EBADF;
	struct iovec iov[3];
	int cnt = 1;
	const char *name;
	unsigned char *bad = badpg + pgsz;
	if (v == 0) {
		/* the whole buffer in the PROT_NONE page */
		iov[0] = (struct iovec){ bad, 1 + below(4096) };
	} else if (v == 1) {
		/* a pointer no process may use */
		iov[0] = (struct iovec){ (void *)-1L, 1 + below(4096) };
	} else if (v == 2) {
		/* good bytes, then an iovec in the PROT_NONE page */
		size_t n1 = below(4096);
		fill_random(buf1, n1, 0);
		iov[0] = (struct iovec){ buf1, n1 };
		iov[1] = (struct iovec){ bad + below(64), 1 + below(200) };
		cnt = 2;
		good = n1;
	} else {
		/* good bytes, then an iovec that runs off a good page into the bad one */
		size_t n1 = below(4200), g = 1 + below(pgsz - 1);
		fill_random(buf1, n1, 0);
		fill_random(bad - g, g, 0);
		iov[0] = (struct iovec){ buf1, n1 };
		iov[1] = (struct iovec){ bad - g, g + 1 + below(3000) };
		cnt = 2;
		if (chance(30)) {
			iov[2] = (struct iovec){ buf1, 10 };
			cnt = 3;
		}
		good = n1 + g;
		if (v == 4) {
			/* an unusable pointer in a later iovec: the kernel's import of the
			 * vector rejects the whole call */
			iov[1].iov_base = (void *)-1L;
			good = 0;
		}
	}
	if (pos + good > sh->cap)
		return 0;
	if (!experr && !good)
		experr = EFAULT;
	/* a fault on the first byte in a mapped but inaccessible page (not a
	 * pointer the kernel rejects outright) still ends the write with
	 * ->write_end(copied 0), which grows the file to the position */
	int grows = experr == EFAULT && v != 1 && v != 4;
	ssize_t r;
	begin_op();
	if (cnt == 1) {
		name = posn ? "pwrite(bad buffer)" : "write(bad buffer)";
		r = posn ? pwrite(fd, iov[0].iov_base, iov[0].iov_len, off) : write(fd, iov[0].iov_base, iov[0].iov_len);
	} else {
		name = posn ? "pwritev(bad iovec)" : "writev(bad iovec)";
		r = posn ? pwritev(fd, iov, cnt, off) : writev(fd, iov, cnt);
	}
	int e = errno;
	rec(name, fd, (long long)good, posn ? off : -1, v, r, e);
	want(name, r, e, (long long)good, experr);
	/* the model takes exactly the r good bytes, iovec by iovec */
	for (int i = 0, left = 0; i < cnt && r > 0; i++) {
		size_t k = iov[i].iov_len < (size_t)r - (size_t)left ? iov[i].iov_len : (size_t)r - (size_t)left;
		m_write(f, pos + (uint64_t)left, iov[i].iov_base, k);
		left += (int)k;
		if ((size_t)left == (size_t)r)
			break;
	}
	if (r > 0 && !posn)
		o->off = pos + (uint64_t)r;
	if (r < 0 && e == EFAULT && grows && pos > sh->fsize[f])
		m_truncate(f, pos);
	/* the size is the kernel's: fstat through the same descriptor */
	struct stat st;
	if (fstat(fd, &st))
		fail("fstat after %s: %s", name, strerror(errno));
	check_size(name, f, st.st_size);
	/* and the bytes around the write are exactly the model's, read through
	 * a descriptor of their own (the generator's may be write-only) */
	int expfd = lowest_free(0);
	int rfd = open(fpath[f], O_RDONLY);
	e = errno;
	want("open(check bad write)", rfd, e, expfd, 0);
	uint64_t from = pos > 64 ? pos - 64 : 0;
	size_t window = (size_t)(pos - from) + (r > 0 ? (size_t)r : 0) + 64;
	size_t want_n = m_avail(f, from, window);
	ssize_t g = pread(rfd, buf2, window, (off_t)from);
	e = errno;
	want("pread after a bad write", g, e, (long long)want_n, 0);
	check_bytes(name, f, from, buf2, (size_t)g);
	if (close(rfd))
		fail("close: %s", strerror(errno));
	return 1;
}

/* ---- a thread with a private descriptor table ---- */

struct ushare {
	int mode, lo, nclose, closed[8];
};

/* What the unsharing thread must see at fd: 0 closed, 1 open, 2 open+cloexec. */
static int ushare_state(const struct ushare *u, int fd)
{
	int open_ = fdt[fd].ofd >= 0 || foreign[fd];
	if (!open_)
		return 0;
	if (u->mode == 2) {
		for (int i = 0; i < u->nclose; i++)
			if (u->closed[i] == fd)
				return 0;
		return 1;
	}
	if (fd < u->lo)
		return 1;
	return u->mode == 1 ? 2 : 0;
}

static void *ushare_main(void *arg)
{
	struct ushare *u = arg;
	who = "unshare-thread";
	int r, e;
	if (u->mode == 2) {
		r = unshare(CLONE_FILES);
		e = errno;
		rec("unshare(CLONE_FILES)", -1, 0, 0, 0, r, e);
		want("unshare(CLONE_FILES)", r, e, 0, 0);
		for (int i = 0; i < u->nclose; i++) {
			r = close(u->closed[i]);
			e = errno;
			rec("close(unshared)", u->closed[i], 0, 0, 0, r, e);
			want("close in the unshared table", r, e, 0, 0);
		}
	} else {
		unsigned fl = CLOSE_RANGE_UNSHARE | (u->mode == 1 ? CLOSE_RANGE_CLOEXEC : 0);
		r = close_range((unsigned)u->lo, ~0U, fl);
		e = errno;
		rec("close_range(UNSHARE)", -1, u->lo, -1, fl, r, e);
		want("close_range(UNSHARE)", r, e, 0, 0);
	}
	/* the private table, as the model says */
	for (int fd = 0; fd < MAXFD; fd++) {
		int st = ushare_state(u, fd);
		r = fcntl(fd, F_GETFD);
		e = errno;
		if (!st) {
			if (r != -1 || e != EBADF)
				fail("unshared table: fd %d should be closed (F_GETFD=%d errno=%d)", fd, r, r < 0 ? e : 0);
		} else if (fdt[fd].ofd >= 0) {
			int ce = st == 2 || fdt[fd].cloexec;
			if (r != (ce ? FD_CLOEXEC : 0))
				fail("unshared table: fd %d F_GETFD=%d errno=%d, model cloexec=%d", fd, r, r < 0 ? e : 0, ce);
		}
	}
	/* descriptors kept still read the right bytes */
	bufs_init();
	for (int fd = 0; fd < MAXFD; fd++) {
		if (fdt[fd].ofd < 0 || !ushare_state(u, fd) || !rd_ok(OF(fd)->acc))
			continue;
		struct mofd *o = OF(fd);
		uint64_t pos = below(sh->fsize[o->file] + 1);
		size_t n = m_avail(o->file, pos, 4096);
		ssize_t g = pread(fd, buf1, 4096, (off_t)pos);
		e = errno;
		rec("pread(unshared)", fd, 4096, (long long)pos, 0, g, e);
		want("pread in the unshared table", g, e, (long long)n, 0);
		check_bytes("pread in the unshared table", o->file, pos, buf1, (size_t)g);
		break;
	}
	free(buf1);
	free(buf2);
	buf1 = buf2 = NULL;
	/* an open takes the lowest number free in the private table */
	int expfd = -1;
	for (int fd = 0; fd < MAXFD && expfd < 0; fd++)
		if (!ushare_state(u, fd))
			expfd = fd;
	int f = (int)below(sh->nfiles);
	if (sh->fexists[f]) {
		int nfd = open(fpath[f], O_RDONLY);
		e = errno;
		rec("open(unshared)", nfd, f, 0, 0, nfd, e);
		want("open in the unshared table", nfd, e, expfd, 0);
		r = close(nfd);
		e = errno;
		want("close in the unshared table", r, e, 0, 0);
	}
	return NULL;
}

/*
 * A thread takes a private copy of the descriptor table (close_range with
 * CLOSE_RANGE_UNSHARE, alone or with CLOSE_RANGE_CLOEXEC, or
 * unshare(CLONE_FILES) and closes) and changes it; the other threads'
 * table must be untouched: every descriptor open, at its offset, with its
 * flags, reading the right bytes.
 */
static int op_unshare(void)
{
	if (opt.no_unshare || in_child)
		return 0;
	struct ushare u = { .mode = (int)below(3), .lo = 3 + (int)below(FDLIM - 3) };
	if (u.mode == 2) {
		for (int fd = 3; fd < MAXFD && u.nclose < 8; fd++)
			if (fdt[fd].ofd >= 0 && chance(50))
				u.closed[u.nclose++] = fd;
	}
	begin_op();
	pthread_t th;
	if ((errno = pthread_create(&th, NULL, ushare_main, &u)))
		fail("pthread_create: %s", strerror(errno));
	pthread_join(th, NULL);
	check_fds("after a thread unshared its table");
	int fd = pick_fd(1);
	if (fd >= 0) {
		struct mofd *o = OF(fd);
		uint64_t pos = below(sh->fsize[o->file] + 1);
		size_t n = m_avail(o->file, pos, 4096);
		ssize_t g = pread(fd, buf1, 4096, (off_t)pos);
		int e = errno;
		rec("pread(after unshare)", fd, 4096, (long long)pos, 0, g, e);
		want("pread after another thread unshared", g, e, (long long)n, 0);
		check_bytes("pread after another thread unshared", o->file, pos, buf1, (size_t)g);
	}
	return 1;
}

/* One basic operation (the ones a forked child may also run). */
static int op_basic(void)
{
	static const struct {
		int (*fn)(void);
		int w;
	} tab[] = {
		{ op_open, 7 },     { op_close, 4 },   { op_read, 9 },     { op_pread, 9 },
		{ op_write, 9 },    { op_pwrite, 9 },  { op_lseek, 6 },    { op_ftruncate, 2 },
		{ op_truncate, 1 }, { op_fallocate, 3 }, { op_sync, 1 },   { op_stat, 4 },
		{ op_dup, 4 },      { op_fcntl, 4 },   { op_close_range, 1 }, { op_badfd, 2 },
		{ op_lock, 4 },     { op_rwf, 4 },     { op_copy, 4 },     { op_badwrite, 2 },
	};
	int total = 0;
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		total += tab[i].w;
	int x = (int)below((uint64_t)total);
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
		if (x < tab[i].w)
			return tab[i].fn();
		x -= tab[i].w;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Side operations: bad pointers and RLIMIT_NOFILE                     */
/*
 * They run every SIDE_EVERY iterations of the main loop, with their own
 * random stream, so the main sequence of every seed stays what it was. Each
 * leaves the model as it found it.
 */
#define SIDE_EVERY 50
static struct rng side_rng;

/* Bad pointer arguments: EFAULT (or EBADF first for the access mode), and
 * the descriptor's offset untouched. */
static int op_badptr(void)
{
	static char *none, *ronly;
	if (!none) {
		char *m = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED)
			fail("mmap: %s", strerror(errno));
		mprotect(m + 4096, 4096, PROT_READ);
		none = m;
		ronly = m + 4096;
	}
	int fd = pick_fd(0);
	int v = (int)below(fd < 0 ? 3 : 9);
	struct stat st;
	long long r;
	int experr = EFAULT;
	static const char *names[9] = { "open(bad path)", "stat(bad path)", "truncate(bad path)",
					"readv(bad iov)", "writev(bad iov)", "F_SETLK(bad flock)",
					"F_GETLK(read-only flock)", "fstat(bad buf)", "preadv(bad iov)" };
	int acc = fd >= 0 ? OF(fd)->acc : O_RDWR;
	begin_op();
	switch (v) {
	case 0: r = open(chance(50) ? none : (char *)-1, O_RDWR | O_CREAT, 0644); break;
	case 1: r = stat(none, &st); break;
	case 2: r = truncate((char *)-1, 0); break;
	case 3: r = readv(fd, (struct iovec *)none, 1 + (int)below(4)); experr = rd_ok(acc) ? EFAULT : EBADF; break;
	case 4: r = writev(fd, (struct iovec *)(void *)-1, 1); experr = wr_ok(acc) ? EFAULT : EBADF; break;
	case 5: r = fcntl(fd, F_SETLK, (struct flock *)none); break;
	case 6: r = fcntl(fd, F_GETLK, (struct flock *)ronly); break;
	case 7: r = fstat(fd, (struct stat *)(chance(50) ? none : ronly)); break;
	default: r = preadv(fd, (struct iovec *)none, 2, 0); experr = rd_ok(acc) ? EFAULT : EBADF; break;
	}
	int e = errno;
	rec(names[v], fd, v, 0, 0, r, e);
	want(names[v], r, e, 0, experr);
	if (fd >= 0) {
		off_t off = lseek(fd, 0, SEEK_CUR);
		if (off < 0 || (uint64_t)off != OF(fd)->off)
			fail("%s: offset of fd %d now %lld, model %" PRIu64, names[v], fd, (long long)off,
			     OF(fd)->off);
	}
	return 1;
}

/* A small soft RLIMIT_NOFILE: exactly the free numbers below it can be
 * filled (the tester's own descriptors excepted, none of Chell's), then the
 * kernel's errors; the limit is restored. */
static int op_fdlimit(void)
{
	int src = pick_fd(0);
	if (src < 0)
		return 0;
	int lim = lowest_free(0) + 1 + (int)below(8);
	if (lim > FDLIM)
		return 0;
	int freev[FDLIM], nfree = 0;
	for (int i = 0; i < lim; i++)
		if (fdt[i].ofd < 0 && !foreign[i])
			freev[nfree++] = i;
	struct rlimit old, rl;
	if (getrlimit(RLIMIT_NOFILE, &old))
		fail("getrlimit: %s", strerror(errno));
	rl = old;
	rl.rlim_cur = (rlim_t)lim;
	begin_op();
	int r = setrlimit(RLIMIT_NOFILE, &rl), e = errno;
	rec("setrlimit(NOFILE)", -1, lim, 0, 0, r, e);
	want("setrlimit(NOFILE)", r, e, 0, 0);
	for (int k = 0; k < nfree; k++) {
		r = dup(src);
		e = errno;
		rec("dup(below limit)", src, lim, k, 0, r, e);
		want("dup(below limit)", r, e, freev[k], 0);
	}
	int v = (int)below(6), tgt = lim + (int)below(40);
	if (tgt == src)
		tgt++; /* dup2(fd, fd) checks no limit (and dup3 says EINVAL) */
	switch (v) {
	case 0: r = dup(src); break;
	case 1: r = dup2(src, tgt); break;
	case 2: r = dup3(src, tgt, O_CLOEXEC); break;
	case 3: r = fcntl(src, F_DUPFD, tgt); break;
	case 4: r = fcntl(src, F_DUPFD_CLOEXEC, (int)below((uint64_t)lim)); break;
	default: {
		/* not open(): the shadow handler's first open of a file copies it
		 * with descriptors of its own, which fails at the limit (EIO) */
		int pfd[2];
		r = pipe(pfd);
		break;
	}
	}
	e = errno;
	static const int experr[6] = { EMFILE, EBADF, EBADF, EINVAL, EMFILE, EMFILE };
	rec("at the limit", src, v, tgt, lim, r, e);
	want("at the limit", r, e, 0, experr[v]);
	for (int k = 0; k < nfree; k++)
		close(freev[k]);
	r = setrlimit(RLIMIT_NOFILE, &old);
	e = errno;
	rec("setrlimit(restore)", -1, 0, 0, 0, r, e);
	want("setrlimit(restore)", r, e, 0, 0);
	return 1;
}

static void side_ops(void)
{
	static unsigned long iter;
	if (++iter % SIDE_EVERY)
		return;
	struct rng *saved = rg;
	rg = &side_rng;
	if (below(4) == 0)
		op_fdlimit();
	else
		op_badptr();
	rg = saved;
}

/* ------------------------------------------------------------------ */
/* stdio sessions                                                       */

struct sio {
	FILE *fp;
	int f, fd, rd, wr, app;
	long long pos; /* logical stream position, -1 if not known (append modes) */
	int last;      /* 0 none, 1 read, 2 write: a switch needs an fseek in between */
};

static void sio_seek(struct sio *s)
{
	long long size = (long long)sh->fsize[s->f];
	int whence = SEEK_SET;
	long long off = (long long)roff(s->f), exp = off;
	unsigned c = (unsigned)below(100);
	if (c < 25 && s->pos >= 0) {
		whence = SEEK_CUR;
		off = (long long)below(8192) - (long long)below((uint64_t)s->pos + 1);
		exp = s->pos + off;
	} else if (c < 45) {
		whence = SEEK_END;
		off = -(long long)below((uint64_t)size + 1);
		exp = size + off;
	}
	begin_op();
	int r = fseek(s->fp, off, whence), e = errno;
	rec("fseek", s->fd, off, whence, 0, r, e);
	want("fseek", r, e, 0, 0);
	s->pos = exp;
	s->last = 0;
}

static void sio_write(struct sio *s)
{
	if (s->last == 1 || (!s->app && s->pos < 0))
		sio_seek(s);
	long long at = s->app ? (long long)sh->fsize[s->f] : s->pos;
	size_t n = below(16384);
	if ((uint64_t)at >= sh->max_size) {
		sio_seek(s);
		return;
	}
	if ((uint64_t)at + n > sh->cap)
		n = (size_t)(sh->cap - (uint64_t)at);
	char line[160];
	int pf = chance(30);
	begin_op();
	long long r;
	int e;
	if (pf) {
		/* the model's copy of what fprintf must produce */
		int val = (int)below(100000);
		int k = snprintf(line, sizeof line, "op %" PRIu64 " seed %" PRIu64 " val %d\n", cur_id,
				 opt.seed, val);
		r = fprintf(s->fp, "op %" PRIu64 " seed %" PRIu64 " val %d\n", cur_id, opt.seed, val);
		e = errno;
		memcpy(buf1, line, (size_t)k);
		n = (size_t)k;
		rec("fprintf", s->fd, (long long)n, at, 0, r, e);
	} else {
		fill_random(buf1, n, 1);
		r = (long long)fwrite(buf1, 1, n, s->fp);
		e = errno;
		rec("fwrite", s->fd, (long long)n, at, 0, r, e);
	}
	want(pf ? "fprintf" : "fwrite", r, e, (long long)n, 0);
	m_write(s->f, (uint64_t)at, buf1, n);
	s->pos = s->app ? -1 : at + (long long)n;
	s->last = 2;
}

static void sio_read(struct sio *s)
{
	if (s->last == 2 || s->pos < 0)
		sio_seek(s);
	int fg = chance(35);
	size_t n = fg ? 2 + below(200) : below(16384);
	begin_op();
	if (fg) {
		char *p = fgets((char *)buf1, (int)n, s->fp);
		int e = errno;
		/* model: up to n-1 bytes, stopping after a newline */
		size_t avail = m_avail(s->f, (uint64_t)s->pos, n - 1);
		const unsigned char *d = fdata(s->f) + s->pos;
		size_t cnt = 0;
		while (cnt < avail && d[cnt++] != '\n')
			;
		rec("fgets", s->fd, (long long)n, s->pos, 0, p ? (long long)cnt : -1, e);
		if (!cnt) {
			if (p)
				fail("fgets at %lld (size %" PRIu64 "): expected EOF/NULL", s->pos, sh->fsize[s->f]);
		} else {
			if (!p)
				fail("fgets at %lld: NULL, model has %zu bytes (errno %d)", s->pos, cnt, e);
			if (buf1[cnt] != 0)
				fail("fgets at %lld: not terminated after %zu bytes", s->pos, cnt);
			check_bytes("fgets", s->f, (uint64_t)s->pos, buf1, cnt);
		}
		s->pos += (long long)cnt;
	} else {
		size_t r = fread(buf1, 1, n, s->fp);
		int e = errno;
		size_t exp = m_avail(s->f, (uint64_t)s->pos, n);
		rec("fread", s->fd, (long long)n, s->pos, 0, (long long)r, e);
		want("fread", (long long)r, e, (long long)exp, 0);
		check_bytes("fread", s->f, (uint64_t)s->pos, buf1, r);
		s->pos += (long long)r;
	}
	s->last = 1;
}

static void sio_misc(struct sio *s)
{
	int v = (int)below(3);
	if (v == 0) {
		if (s->pos < 0 || s->last == 2) {
			sio_seek(s);
			return;
		}
		begin_op();
		long r = ftell(s->fp);
		int e = errno;
		rec("ftell", s->fd, 0, 0, 0, r, e);
		want("ftell", r, e, s->pos, 0);
	} else if (v == 1) {
		begin_op();
		int r = fflush(s->fp), e = errno;
		rec("fflush", s->fd, 0, 0, 0, r, e);
		want("fflush", r, e, 0, 0);
	} else {
		/* fileno + fstat: after fflush the kernel has every byte written so far */
		begin_op();
		int fno = fileno(s->fp);
		if (fno != s->fd)
			fail("fileno = %d, expected %d", fno, s->fd);
		struct stat st;
		int r = fflush(s->fp);
		if (r == 0)
			r = fstat(fno, &st);
		int e = errno;
		rec("fileno+fstat", fno, 0, 0, 0, r ? r : st.st_size, e);
		want("fflush+fstat", r, e, 0, 0);
		check_size("fstat(fileno)", s->f, st.st_size);
	}
}

static int op_stdio(void)
{
	if (opt.no_stdio || remaining() < 8 || nopen() >= MAXOPEN)
		return 0;
	uint64_t rem = remaining();
	int k = 1 + (int)below(10);
	/* session = open (1-2) + k steps (+ implied seeks) + final fseek, fflush, fclose */
	if ((uint64_t)(2 * k + 6) > rem)
		k = (int)((rem - 6) / 2);
	if (k < 1)
		return 0;
	struct sio s = { .pos = 0 };
	int src = chance(40) ? pick_fd(0) : -1, dupfd = -1, srcofd = -1;
	if (src >= 0) {
		/* fdopen() on a dup: the stream shares the OFD (and its offset) with src */
		struct mofd *o = OF(src);
		srcofd = fdt[src].ofd;
		static const char *rdonly[] = { "r", "w" };                /* "w" must fail */
		static const char *wronly[] = { "w", "a", "r" };           /* "r" must fail */
		static const char *rdwr[] = { "r", "r+", "w", "w+", "a", "a+" };
		const char *mode;
		int bad = 0;
		if (o->acc == O_RDONLY) {
			mode = rdonly[chance(10)];
			bad = mode[0] == 'w';
		} else if (o->acc == O_WRONLY) {
			mode = wronly[below(chance(10) ? 3 : 2)];
			bad = mode[0] == 'r';
		} else {
			mode = rdwr[below(6)];
		}
		int expd = lowest_free(0);
		begin_op();
		dupfd = dup(src);
		int e = errno;
		rec("dup(fdopen)", src, 0, 0, 0, dupfd, e);
		want("dup(fdopen)", dupfd, e, expd, 0);
		install(dupfd, srcofd, 0);
		begin_op();
		s.fp = fdopen(dupfd, mode);
		e = errno;
		rec("fdopen", dupfd, mode[0], mode[1], 0, s.fp ? 0 : -1, e);
		if (bad) {
			if (s.fp || e != EINVAL)
				fail("fdopen(fd %d acc %d, \"%s\") should fail with EINVAL (got %p errno %d)", dupfd,
				     o->acc, mode, (void *)s.fp, e);
			begin_op();
			int r = close(dupfd);
			e = errno;
			rec("close", dupfd, 0, 0, 0, r, e);
			want("close", r, e, 0, 0);
			uninstall(dupfd);
			return 1;
		}
		if (!s.fp)
			fail("fdopen(%d, \"%s\"): %s", dupfd, mode, strerror(e));
		s.f = o->file;
		s.fd = dupfd;
		s.rd = mode[0] == 'r' || mode[1] == '+';
		s.wr = mode[0] != 'r' || mode[1] == '+';
		/* glibc's fdopen(.., "a") sets O_APPEND on the open file description;
		 * and an OFD with O_APPEND appends whatever the stream's mode says */
		if (mode[0] == 'a')
			o->flags |= O_APPEND;
		s.app = !!(o->flags & O_APPEND);
		s.pos = s.app ? -1 : (long long)o->off;
	} else {
		static const char *modes[] = { "r", "r+", "w", "w+", "a", "a+", "wx", "w+x" };
		const char *mode = modes[below(8)];
		int f = (int)below(sh->nfiles), experr = 0;
		int exists = sh->fexists[f];
		if (mode[0] == 'r' && !exists)
			experr = ENOENT;
		if (strchr(mode, 'x') && exists)
			experr = EEXIST;
		int expd = lowest_free(0);
		begin_op();
		s.fp = fopen(fpath[f], mode);
		int e = errno;
		rec("fopen", s.fp ? fileno(s.fp) : -1, f, mode[0], mode[1], s.fp ? 0 : -1, e);
		if (experr) {
			if (s.fp || e != experr)
				fail("fopen(f%d, \"%s\"): expected errno %d, got %p errno %d", f, mode, experr,
				     (void *)s.fp, e);
			return 1;
		}
		if (!s.fp)
			fail("fopen(f%d, \"%s\"): %s", f, mode, strerror(e));
		s.fd = fileno(s.fp);
		if (s.fd != expd)
			fail("fopen: descriptor %d, expected lowest free %d", s.fd, expd);
		if (!exists) {
			sh->fexists[f] = 1;
			sh->fsize[f] = 0;
		}
		if (mode[0] == 'w')
			m_truncate(f, 0);
		s.f = f;
		s.rd = mode[0] == 'r' || mode[1] == '+';
		s.wr = mode[0] != 'r' || mode[1] == '+';
		s.app = mode[0] == 'a';
		s.pos = s.app ? -1 : 0;
		int acc = s.rd && s.wr ? O_RDWR : s.rd ? O_RDONLY : O_WRONLY;
		install(s.fd, new_ofd(f, acc, s.app ? O_APPEND : 0), 0);
	}
	for (int i = 0; i < k; i++) {
		unsigned c = (unsigned)below(100);
		if (c < 40 && s.wr)
			sio_write(&s);
		else if (c < 80 && s.rd)
			sio_read(&s);
		else if (c < 88)
			sio_seek(&s);
		else
			sio_misc(&s);
	}
	/* End at a known position so the shared offset is known afterwards:
	 * fflush() on a seekable stream sets the OFD offset to the stream's. */
	sio_seek(&s);
	if (s.pos < 0)
		fail("stdio: position unknown after fseek");
	begin_op();
	int r = fflush(s.fp), e = errno;
	rec("fflush", s.fd, 0, 0, 0, r, e);
	want("fflush", r, e, 0, 0);
	sh->ofd[fdt[s.fd].ofd].off = (uint64_t)s.pos;
	begin_op();
	r = fclose(s.fp);
	e = errno;
	rec("fclose", s.fd, 0, 0, 0, r, e);
	want("fclose", r, e, 0, 0);
	uninstall(s.fd);
	if (src >= 0 && is_open(src)) {
		off_t o = lseek(src, 0, SEEK_CUR);
		if (o != s.pos)
			fail("after fdopen/fclose: fd %d offset %lld, stream ended at %lld", src, (long long)o,
			     s.pos);
	}
	return 1;
}

/* ------------------------------------------------------------------ */
/* Append log: fixed-format records from concurrent writers              */

static uint32_t fnv(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 16777619u;
	return h;
}

/* "@WWWWWW:SSSSSSSS:LLLL|payload|CCCCCCCC\n", total length L. */
static size_t make_record(char *out, uint32_t wid, uint32_t seq, size_t len)
{
	int h = snprintf(out, 32, "@%06x:%08x:%04zx|", wid, seq, len);
	size_t plen = len - (size_t)h - 10;
	uint32_t x = wid * 2654435761u ^ seq * 40503u;
	for (size_t i = 0; i < plen; i++) {
		x = x * 1103515245u + 12345u;
		out[h + i] = (char)('a' + (x >> 16) % 26);
	}
	uint32_t c = fnv(out, len - 10);
	snprintf(out + len - 10, 11, "|%08x", c);
	out[len - 1] = '\n';
	return len;
}

static void append_record(int fd, uint32_t wid, uint32_t seq)
{
	char rbuf[4096];
	size_t len = chance(5) ? 1000 + below(3000) : 40 + below(400);
	make_record(rbuf, wid, seq, len);
	ssize_t r;
	if (chance(50)) {
		r = write(fd, rbuf, len);
	} else {
		/* one writev is one atomic append, however it is split */
		struct iovec iov[3];
		int cnt = mkiov(iov, (unsigned char *)rbuf, len, 3);
		r = writev(fd, iov, cnt);
	}
	int e = errno;
	rec("append", fd, wid, seq, (long long)len, r, e);
	want("append record", r, e, (long long)len, 0);
	atomic_fetch_add(&sh->wrec[wid], 1);
}

static uint32_t new_writer(void)
{
	if (sh->nwriters >= MAXWRITERS)
		fail("too many append writers");
	return sh->nwriters++;
}

/* Every record whole, each writer's records all there and in order; then empty the log. */
static void verify_log(const char *when)
{
	int fd = open(logpath, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT && sh->nwriters == sh->wbase)
			return;
		fail("%s: open log: %s", when, strerror(errno));
	}
	struct stat st;
	if (fstat(fd, &st))
		fail("%s: fstat log: %s", when, strerror(errno));
	size_t size = (size_t)st.st_size, got = 0;
	char *d = malloc(size + 1);
	if (!d)
		fail("out of memory");
	while (got < size) {
		ssize_t r = read(fd, d + got, size - got);
		if (r <= 0)
			fail("%s: read log at %zu of %zu: %zd %s", when, got, size, r, strerror(errno));
		got += (size_t)r;
	}
	close(fd);
	uint32_t nw = sh->nwriters - sh->wbase;
	uint32_t *next = calloc(nw + 1, sizeof *next);
	size_t p = 0, nrec = 0;
	while (p < size) {
		unsigned w, sq, l;
		if (size - p < 24 || d[p] != '@' || sscanf(d + p, "@%6x:%8x:%4x|", &w, &sq, &l) != 3 ||
		    l < 40 || p + l > size)
			fail("%s: log corrupt at offset %zu of %zu (torn or lost record): \"%.40s\"", when, p,
			     size, d + p);
		char *r = d + p;
		char hex[9];
		memcpy(hex, r + l - 9, 8);
		hex[8] = 0;
		if (r[l - 1] != '\n' || r[l - 10] != '|' || strtoul(hex, NULL, 16) != fnv(r, l - 10))
			fail("%s: log record at offset %zu (writer %u seq %u) fails its checksum", when, p, w, sq);
		if (w < sh->wbase || w >= sh->nwriters)
			fail("%s: log record at %zu from unknown writer %u", when, p, w);
		if (sq != next[w - sh->wbase])
			fail("%s: writer %u: record seq %u at offset %zu, expected %u (lost or reordered)", when,
			     w, sq, p, next[w - sh->wbase]);
		next[w - sh->wbase]++;
		p += l;
		nrec++;
	}
	for (uint32_t i = 0; i < nw; i++)
		if (next[i] != atomic_load(&sh->wrec[sh->wbase + i]))
			fail("%s: writer %u: %u records in the log, %u written", when, sh->wbase + i, next[i],
			     atomic_load(&sh->wrec[sh->wbase + i]));
	free(next);
	free(d);
	if (truncate(logpath, 0))
		fail("%s: truncate log: %s", when, strerror(errno));
	sh->wbase = sh->nwriters;
}

static int open_log(int flags)
{
	int fd = open(logpath, O_WRONLY | O_APPEND | O_CREAT | flags, 0644);
	if (fd < 0)
		fail("open %s: %s", logpath, strerror(errno));
	return fd;
}

/* ------------------------------------------------------------------ */
/* Processes                                                             */

static void wait_child(pid_t pid, const char *what)
{
	int st;
	pid_t w;
	while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR)
		;
	if (w != pid)
		fail("%s: waitpid(%d): %s", what, (int)pid, strerror(errno));
	if (WIFSIGNALED(st))
		fail("%s: child %d killed by signal %d; child said: %s", what, (int)pid, WTERMSIG(st),
		     sh->failmsg[0] ? sh->failmsg : "(nothing)");
	if (WEXITSTATUS(st))
		fail("%s: child %d exited with %d; child said: %s", what, (int)pid, WEXITSTATUS(st),
		     sh->failmsg[0] ? sh->failmsg : "(nothing)");
}

static void become_child(const char *name, uint64_t stream)
{
	in_child = 1;
	who = name;
	ringn = 0;
	static struct rng child_rng;
	rng_seed(&child_rng, opt.seed, stream);
	rg = &child_rng;
}

/* A child runs a burst of ops on inherited descriptors (sharing their offsets). */
static int op_fork(void)
{
	if (opt.no_fork || in_child)
		return 0;
	uint64_t rem = remaining();
	if (rem < 2)
		return 0;
	uint64_t k = 5 + below(60);
	if (k > rem - 1)
		k = rem - 1;
	uint64_t stream = 0x100000 + atomic_load(&sh->forks);
	int trunc = chance(25);
	begin_op();
	fflush(NULL);
	pid_t pid = fork();
	int e = errno;
	rec(trunc ? "fork(truncate)" : "fork", -1, (long long)k, 0, 0, pid, e);
	if (pid < 0)
		fail("fork: %s", strerror(e));
	if (pid == 0) {
		become_child("child", stream);
		if (trunc) {
			/* truncate(path) from a second process while the parent keeps fds open */
			int f = (int)below(sh->nfiles);
			int pfd = pick_fd(0);
			if (pfd >= 0)
				f = OF(pfd)->file;
			long long len = (long long)below(sh->max_size + 1);
			int experr = sh->fexists[f] ? 0 : ENOENT;
			begin_op();
			int r = truncate(fpath[f], len);
			e = errno;
			rec("truncate(child)", -1, f, len, 0, r, e);
			want("truncate(child)", r, e, 0, experr);
			if (!r)
				m_truncate(f, (uint64_t)len);
			k--;
			if (pfd >= 0) {
				/* its descriptor sees the new size at once */
				struct stat st;
				if (fstat(pfd, &st))
					fail("fstat after truncate: %s", strerror(errno));
				check_size("fstat after truncate(child)", f, st.st_size);
			}
		}
		for (uint64_t i = 0; i < k;)
			i += (uint64_t)op_basic();
		check_fds("child end");
		_exit(0);
	}
	wait_child(pid, "fork");
	atomic_fetch_add(&sh->forks, 1);
	gc_ofds();
	/* the child moved shared offsets and changed files: the model must still match */
	check_fds("after child");
	return 1;
}

/* Several processes append records at once to one O_APPEND file. */
static int op_procs(void)
{
	if (opt.no_fork || in_child || opt.procs < 1)
		return 0;
	int P = opt.procs;
	uint64_t rem = remaining(), m = 10 + below(60);
	if (P * m > rem)
		m = rem / (uint64_t)P;
	if (m < 2)
		return 0;
	int lfd = open_log(O_CLOEXEC);
	if (lfd < MAXFD)
		foreign[lfd] = 1;
	pid_t pids[64];
	uint64_t base = 0x200000 + (uint64_t)sh->phases++ * 64;
	fflush(NULL);
	for (int i = 0; i < P && i < 64; i++) {
		uint32_t wid = new_writer();
		pids[i] = fork();
		if (pids[i] < 0)
			fail("fork: %s", strerror(errno));
		if (pids[i] == 0) {
			become_child("appender", base + (uint64_t)i);
			/* half share the parent's OFD, half open their own */
			int fd = (i & 1) ? open_log(0) : lfd;
			for (uint64_t j = 0; j < m; j++) {
				begin_op();
				append_record(fd, wid, (uint32_t)j);
			}
			_exit(0);
		}
	}
	for (int i = 0; i < P && i < 64; i++)
		wait_child(pids[i], "appender");
	atomic_fetch_add(&sh->forks, (uint64_t)P);
	close(lfd);
	if (lfd < MAXFD)
		foreign[lfd] = 0;
	verify_log("append procs");
	return 1;
}

/* ------------------------------------------------------------------ */
/* Threads                                                               */

struct tctx {
	pthread_t th;
	int t, f, nr, nw;
	int rfds[MAXOPEN], wfds[MAXOPEN];
	int lfd;
	uint32_t wid;
	uint64_t m, stream, base, R, size0, maxend;
	unsigned char *priv; /* the thread's own view of [base, base+R) */
};

static _Atomic uint64_t ofd_delta[MAXOFD];

static void *thread_main(void *arg)
{
	struct tctx *c = arg;
	struct rng r;
	rng_seed(&r, opt.seed, c->stream);
	rg = &r;
	char nm[16];
	snprintf(nm, sizeof nm, "thread%d", c->t);
	who = nm;
	bufs_init();
	uint32_t seq = 0;
	for (uint64_t i = 0; i < c->m; i++) {
		unsigned ch = (unsigned)below(100);
		uint64_t rel = below(c->R);
		size_t n = below((c->R - rel < 16384 ? c->R - rel : 16384) + 1);
		off_t off = (off_t)(c->base + rel);
		struct iovec iov[8];
		int cnt;
		begin_op();
		if (ch < 35) {
			int fd = c->wfds[below(c->nw)];
			fill_random(buf1, n, 0);
			ssize_t w;
			int v = (int)below(3);
			if (v == 0)
				w = pwrite(fd, buf1, n, off);
			else if (v == 1)
				w = pwritev(fd, iov, mkiov(iov, buf1, n, 8), off);
			else
				w = pwritev2(fd, iov, mkiov(iov, buf1, n, 8), off, chance(20) ? RWF_DSYNC : 0);
			int e = errno;
			rec("t-pwrite", fd, (long long)n, off, v, w, e);
			want("thread pwrite", w, e, (long long)n, 0);
			memcpy(c->priv + rel, buf1, n);
			if (n && (uint64_t)off + n > c->maxend)
				c->maxend = (uint64_t)off + n;
		} else if (ch < 65) {
			int fd = c->rfds[below(c->nr)];
			int v = (int)below(3);
			ssize_t g;
			if (v == 0) {
				g = pread(fd, buf1, n, off);
			} else {
				cnt = mkiov(iov, buf1, n, 8);
				g = v == 1 ? preadv(fd, iov, cnt, off) : preadv2(fd, iov, cnt, off, 0);
			}
			int e = errno;
			rec("t-pread", fd, (long long)n, off, v, g, e);
			/* others only ever grow the file: our bytes are known up to lb */
			uint64_t lb = c->size0 > c->maxend ? c->size0 : c->maxend;
			size_t min = (uint64_t)off >= lb ? 0 : (lb - (uint64_t)off < n ? (size_t)(lb - (uint64_t)off) : n);
			if (g < 0 || (size_t)g < min || (size_t)g > n)
				fail("thread pread(%d, %zu, %lld) = %zd (errno %d), expected %zu..%zu", fd, n,
				     (long long)off, g, g < 0 ? e : 0, min, n);
			if (memcmp(buf1, c->priv + rel, (size_t)g)) {
				size_t k = 0;
				while (buf1[k] == c->priv[rel + k])
					k++;
				fail("thread pread(%d, %zu, %lld): byte %lld is 0x%02x, thread model 0x%02x", fd, n,
				     (long long)off, (long long)off + (long long)k, buf1[k], c->priv[rel + k]);
			}
		} else if (ch < 80) {
			/* read() at the shared offset: only the sum of advances is predictable */
			int fd = c->rfds[below(c->nr)];
			size_t rn = below(4096);
			ssize_t g = read(fd, buf1, rn);
			int e = errno;
			rec("t-read", fd, (long long)rn, 0, 0, g, e);
			if (g < 0 || (size_t)g > rn)
				fail("thread read(%d, %zu) = %zd (errno %d)", fd, rn, g, g < 0 ? e : 0);
			atomic_fetch_add(&ofd_delta[fdt[fd].ofd], (uint64_t)g);
		} else if (ch < 88) {
			int fd = c->rfds[below(c->nr)];
			struct stat st;
			int g = fstat(fd, &st), e = errno;
			rec("t-fstat", fd, 0, 0, 0, g ? g : st.st_size, e);
			uint64_t lb = c->size0 > c->maxend ? c->size0 : c->maxend;
			if (g || (uint64_t)st.st_size < lb || (uint64_t)st.st_size > sh->cap)
				fail("thread fstat(%d): ret %d size %lld, expected >= %" PRIu64, fd, g,
				     (long long)st.st_size, lb);
		} else {
			append_record(c->lfd, c->wid, seq++);
		}
	}
	return NULL;
}

static int op_threads(void)
{
	if (opt.no_threads || in_child || opt.threads < 1)
		return 0;
	int T = opt.threads > 32 ? 32 : opt.threads;
	uint64_t rem = remaining(), m = 20 + below(150);
	if (rem < 3 || nopen() >= MAXOPEN)
		return 0;
	if (1 + T * m > rem)
		m = (rem - 1) / (uint64_t)T;
	if (m < 2)
		return 0;
	int f = (int)below(sh->nfiles);
	/* A fresh O_RDWR descriptor shared by every thread (counted as one op). */
	int expfd = lowest_free(0);
	begin_op();
	int nfd = open(fpath[f], O_RDWR | O_CREAT, 0644);
	int e = errno;
	rec("open(threads)", nfd, f, O_RDWR | O_CREAT, 0, nfd, e);
	want("open(threads)", nfd, e, expfd, 0);
	if (!sh->fexists[f]) {
		sh->fexists[f] = 1;
		sh->fsize[f] = 0;
	}
	install(nfd, new_ofd(f, O_RDWR, 0), 0);

	uint64_t R = sh->cap / (uint64_t)T;
	if (R > MAXIO)
		R = MAXIO;
	uint64_t B = below(sh->cap - R * (uint64_t)T + 1);
	int lfd = open_log(O_CLOEXEC);
	if (lfd < MAXFD)
		foreign[lfd] = 1;
	uint64_t phase = sh->phases++;
	struct tctx *c = calloc((size_t)T, sizeof *c);
	if (!c)
		fail("out of memory");
	for (int i = 0; i < MAXOFD; i++)
		atomic_store(&ofd_delta[i], 0);
	for (int t = 0; t < T; t++) {
		c[t].t = t;
		c[t].f = f;
		c[t].m = m;
		c[t].stream = 0x300000 + phase * 64 + (uint64_t)t;
		c[t].base = B + (uint64_t)t * R;
		c[t].R = R;
		c[t].size0 = sh->fsize[f];
		c[t].lfd = lfd;
		c[t].wid = new_writer();
		c[t].priv = malloc(R);
		if (!c[t].priv)
			fail("out of memory");
		memcpy(c[t].priv, fdata(f) + c[t].base, R);
		for (int fd = 0; fd < MAXFD; fd++) {
			if (fdt[fd].ofd < 0 || OF(fd)->file != f)
				continue;
			if (rd_ok(OF(fd)->acc))
				c[t].rfds[c[t].nr++] = fd;
			if (wr_ok(OF(fd)->acc) && !(OF(fd)->flags & O_APPEND))
				c[t].wfds[c[t].nw++] = fd;
		}
	}
	for (int t = 0; t < T; t++)
		if ((errno = pthread_create(&c[t].th, NULL, thread_main, &c[t])))
			fail("pthread_create: %s", strerror(errno));
	for (int t = 0; t < T; t++)
		pthread_join(c[t].th, NULL);
	atomic_fetch_add(&sh->nthreads, (uint64_t)T);
	uint64_t size = sh->fsize[f];
	for (int t = 0; t < T; t++) {
		memcpy(fdata(f) + c[t].base, c[t].priv, R);
		if (c[t].maxend > size)
			size = c[t].maxend;
		free(c[t].priv);
	}
	sh->fsize[f] = size;
	for (int i = 0; i < MAXOFD; i++)
		if (sh->ofd[i].used)
			sh->ofd[i].off += atomic_load(&ofd_delta[i]);
	free(c);
	close(lfd);
	if (lfd < MAXFD)
		foreign[lfd] = 0;
	check_fds("after threads");
	verify_file(f, "after threads");
	verify_log("append threads");
	return 1;
}

/* ------------------------------------------------------------------ */
/* exec                                                                   */

static int op_exec(void)
{
	if (opt.no_exec || in_child || remaining() < 2)
		return 0;
	begin_op();
	atomic_fetch_add(&sh->execs, 1);
	/* --resume MEMFD:S0,S1,S2,S3:FD.OFD.CLOEXEC,... (rng state taken after this op) */
	char *arg = malloc(256 + MAXFD * 24);
	if (!arg)
		fail("out of memory");
	int n = sprintf(arg, "%d:%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ":", memfd,
			main_rng.s[0], main_rng.s[1], main_rng.s[2], main_rng.s[3]);
	for (int fd = 0; fd < MAXFD; fd++)
		if (fdt[fd].ofd >= 0)
			n += sprintf(arg + n, "%d.%d.%d,", fd, fdt[fd].ofd, fdt[fd].cloexec);
	char **av = calloc((size_t)orig_argc + 3, sizeof *av);
	if (!av)
		fail("out of memory");
	int ac = 0;
	for (int i = 0; i < orig_argc; i++) {
		if (!strcmp(orig_argv[i], "--resume")) {
			i++;
			continue;
		}
		av[ac++] = orig_argv[i];
	}
	av[ac++] = "--resume";
	av[ac++] = arg;
	av[ac] = NULL;
	rec("execv", -1, nopen(), 0, 0, 0, 0);
	fflush(NULL);
	execv("/proc/self/exe", av);
	fail("execv(/proc/self/exe): %s", strerror(errno));
}

static void open_dirfd(void)
{
	int d = open(dirpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d < 0)
		fail("open %s: %s", dirpath, strerror(errno));
	dfd = fcntl(d, F_DUPFD_CLOEXEC, RESERVED_FD + 1);
	if (dfd < 0)
		fail("F_DUPFD_CLOEXEC: %s", strerror(errno));
	close(d);
}

/* Mark every open descriptor the generator does not own. */
static void scan_foreign(void)
{
	for (int i = 0; i < MAXFD; i++)
		foreign[i] = fdt[i].ofd < 0 && fcntl(i, F_GETFD) >= 0;
}

static void map_model(size_t total)
{
	void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (p == MAP_FAILED)
		fail("mmap model: %s", strerror(errno));
	sh = p;
	content = (unsigned char *)p + ((sizeof(struct shm) + 4095) & ~(size_t)4095);
}

static size_t model_bytes(uint64_t cap, int nfiles)
{
	return ((sizeof(struct shm) + 4095) & ~(size_t)4095) + (size_t)cap * (size_t)nfiles;
}

static void resume(const char *arg)
{
	char *end;
	memfd = (int)strtol(arg, &end, 10);
	struct stat st;
	if (*end != ':' || fstat(memfd, &st))
		fail("--resume: model descriptor %d unusable", memfd);
	map_model((size_t)st.st_size);
	if (sh->magic != MAGIC || sh->seed != opt.seed || sh->nops != opt.ops)
		fail("--resume: model does not match the arguments");
	for (int i = 0; i < 4; i++) {
		main_rng.s[i] = strtoull(end + 1, &end, 16);
		if (*end != (i < 3 ? ',' : ':'))
			fail("--resume: bad rng state");
	}
	const char *p = end + 1;
	struct { int fd, ofd, ce; } L[MAXFD];
	int nl = 0;
	while (*p) {
		int fd, o, ce, k;
		if (sscanf(p, "%d.%d.%d,%n", &fd, &o, &ce, &k) != 3 || fd < 0 || fd >= MAXFD || o < 0 ||
		    o >= MAXOFD)
			fail("--resume: bad descriptor list at \"%s\"", p);
		L[nl].fd = fd;
		L[nl].ofd = o;
		L[nl].ce = ce;
		nl++;
		p += k;
	}
	cur_id = atomic_load(&sh->done);
	fprintf(stderr, "randops: resumed after exec #%" PRIu64 " at op %" PRIu64 " with %d descriptors\n",
		atomic_load(&sh->execs), cur_id, nl);
	for (int i = 0; i < MAXFD; i++)
		fdt[i].ofd = -1;
	for (int i = 0; i < nl; i++) {
		int r = fcntl(L[i].fd, F_GETFD), e = errno;
		rec("F_GETFD(after exec)", L[i].fd, L[i].ce, 0, 0, r, e);
		if (L[i].ce) {
			/* close-on-exec descriptors must be gone */
			if (r != -1 || e != EBADF)
				fail("after exec: close-on-exec fd %d still open (F_GETFD=%d errno=%d)", L[i].fd, r,
				     r < 0 ? e : 0);
		} else {
			if (r != 0)
				fail("after exec: fd %d: F_GETFD=%d errno=%d, expected 0", L[i].fd, r, r < 0 ? e : 0);
			install(L[i].fd, L[i].ofd, 0);
		}
	}
	scan_foreign();
	gc_ofds();
	check_fds("after exec");
}

/* ------------------------------------------------------------------ */
/* main                                                                   */

static const char usage_text[] =
	"usage: chell_randops --seed S --ops N --dir DIR [--files K] [--threads T] [--procs P]\n"
	"       [--no-fork] [--no-exec] [--no-threads] [--no-stdio] [--no-locks] [--no-rwf]\n"
	"       [--no-copy] [--no-limits] [--no-badwrite] [--no-unshare] [--kernel K1:...]\n"
	"       [--max-size BYTES] [--progress N] [--dir2 DIR2] [--verbose]\n"
	"       chell_randops --probe --dir DIR   (plainly: print the kernel's RWF answers)\n"
	"\n"
	"Random file operations checked against a model of the kernel, or run\n"
	"twice (under Chell and plainly) and compared: the shadow differential.\n";

static void usage(void)
{
	fputs(usage_text, stderr);
	exit(2);
}

/* Where the RWF model's kernel answers come from: --kernel (a plain
 * `--probe` run's output), else a probe right here, which is only the
 * kernel's answer when no Chell is loaded into this process. */
static void kernel_answers(void)
{
	if (opt.no_rwf)
		return;
	if (opt.kernel) {
		if (strlen(opt.kernel) >= sizeof sh->kspec || parse_kernel(opt.kernel))
			fprintf(stderr, "chell_randops: --kernel: not the output of a `chell_randops --probe` of "
					"this version\n"),
				exit(2);
		strcpy(sh->kspec, opt.kernel);
		return;
	}
	const char *pre = getenv("LD_PRELOAD");
	if (pre && strstr(pre, "libchell")) {
		fprintf(stderr, "chell_randops: under Chell the RWF model needs the bare kernel's answers: pass\n"
				"  --kernel \"$(chell_randops --probe --dir DIR)\" (run plainly), or --no-rwf\n");
		exit(2);
	}
	probe_kernel(dirpath, sh->kspec, sizeof sh->kspec);
}

static uint64_t num(const char *s, const char *what)
{
	char *e;
	errno = 0;
	unsigned long long v = strtoull(s, &e, 0);
	if (errno || e == s || (*e && strcmp(e, "K") && strcmp(e, "M")))
		fprintf(stderr, "chell_randops: bad %s '%s'\n", what, s), exit(2);
	if (*e == 'K')
		v <<= 10;
	else if (*e == 'M')
		v <<= 20;
	return v;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	orig_argc = argc;
	orig_argv = argv;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && (v || (usage(), 0)) && ++i)
		if (ARG("--seed"))
			opt.seed = num(v, "seed");
		else if (ARG("--ops"))
			opt.ops = num(v, "ops");
		else if (ARG("--dir"))
			opt.dir = v;
		else if (ARG("--dir2"))
			opt.dir2 = v;
		else if (ARG("--files"))
			opt.files = (int)num(v, "files");
		else if (ARG("--threads"))
			opt.threads = (int)num(v, "threads");
		else if (ARG("--procs"))
			opt.procs = (int)num(v, "procs");
		else if (ARG("--max-size"))
			opt.max_size = num(v, "max-size");
		else if (ARG("--resume"))
			opt.resume = v;
		else if (!strcmp(a, "--no-fork"))
			opt.no_fork = 1;
		else if (!strcmp(a, "--no-exec"))
			opt.no_exec = 1;
		else if (!strcmp(a, "--no-threads"))
			opt.no_threads = 1;
		else if (!strcmp(a, "--no-stdio"))
			opt.no_stdio = 1;
		else if (!strcmp(a, "--no-locks"))
			opt.no_locks = 1;
		else if (!strcmp(a, "--no-rwf"))
			opt.no_rwf = 1;
		else if (!strcmp(a, "--no-copy"))
			opt.no_copy = 1;
		else if (!strcmp(a, "--no-limits"))
			opt.no_limits = 1;
		else if (!strcmp(a, "--no-badwrite"))
			opt.no_badwrite = 1;
		else if (!strcmp(a, "--no-unshare"))
			opt.no_unshare = 1;
		else if (!strcmp(a, "--probe"))
			opt.probe = 1;
		else if (ARG("--kernel"))
			opt.kernel = v;
		else if (ARG("--progress"))
			opt.progress = num(v, "progress");
		else if (!strcmp(a, "--verbose"))
			opt.verbose = 1;
		else
			usage();
#undef ARG
	}
	if (opt.probe && opt.dir && (opt.resume || opt.kernel))
		usage();
	if (!opt.dir || opt.files < 1 || opt.files > MAXF || opt.max_size < 4096 ||
	    opt.max_size > (1ULL << 30) || opt.procs > 64)
		usage();
	if (!realpath(opt.dir, dirpath)) {
		if (mkdir(opt.dir, 0755) && errno != EEXIST)
			fprintf(stderr, "chell_randops: %s: %s\n", opt.dir, strerror(errno)), exit(2);
		if (!realpath(opt.dir, dirpath))
			fprintf(stderr, "chell_randops: %s: %s\n", opt.dir, strerror(errno)), exit(2);
	}
	if (opt.probe) {
		char spec[1024];
		probe_kernel(dirpath, spec, sizeof spec);
		printf("%s\n", spec);
		return 0;
	}
	if (opt.dir2 && !realpath(opt.dir2, dir2path))
		fprintf(stderr, "chell_randops: %s: %s\n", opt.dir2, strerror(errno)), exit(2);
	for (int f = 0; f < opt.files; f++)
		snprintf(fpath[f], sizeof fpath[f], "%s/f%d", opt.dir2 && f % 2 ? dir2path : dirpath, f);
	snprintf(logpath, sizeof logpath, "%s/append.log", dirpath);
	for (int i = 0; i < MAXFD; i++)
		fdt[i].ofd = -1;

	if (opt.resume) {
		resume(opt.resume);
	} else {
		fprintf(stderr,
			"randops: seed=%" PRIu64 " ops=%" PRIu64 " dir=%s files=%d threads=%d procs=%d "
			"max_size=%" PRIu64 "%s%s%s%s%s%s%s%s%s%s\n",
			opt.seed, opt.ops, dirpath, opt.files, opt.no_threads ? 0 : opt.threads,
			opt.no_fork ? 0 : opt.procs, opt.max_size, opt.no_fork ? " no-fork" : "",
			opt.no_exec ? " no-exec" : "", opt.no_threads ? " no-threads" : "",
			opt.no_stdio ? " no-stdio" : "", opt.no_locks ? " no-locks" : "",
			opt.no_rwf ? " no-rwf" : "", opt.no_copy ? " no-copy" : "",
			opt.no_limits ? " no-limits" : "", opt.no_badwrite ? " no-badwrite" : "",
			opt.no_unshare ? " no-unshare" : "");
		/* Descriptors inherited from whoever started us (shells, CI runners
		 * leak some) would shift every descriptor number and so change the
		 * run: a seed must name the same run everywhere. Chell's own
		 * descriptors live near the top of RLIMIT_NOFILE, far above these. */
		for (int fd = 3; fd < MAXFD; fd++)
			if (fcntl(fd, F_GETFD) >= 0) {
				fprintf(stderr, "randops: closing inherited descriptor %d\n", fd);
				close(fd);
			}
		/* start from nothing, so opens without O_CREAT meet ENOENT */
		for (int f = 0; f < opt.files; f++)
			if (unlink(fpath[f]) && errno != ENOENT)
				fprintf(stderr, "chell_randops: unlink %s: %s\n", fpath[f], strerror(errno)), exit(2);
		unlink(logpath);
		uint64_t cap = opt.max_size + 2 * MAXIO;
		size_t total = model_bytes(cap, opt.files);
		int m = memfd_create("randops-model", 0);
		if (m < 0)
			fprintf(stderr, "chell_randops: memfd_create: %s\n", strerror(errno)), exit(2);
		/* out of the way of the descriptor numbers under test; survives exec */
		memfd = fcntl(m, F_DUPFD, RESERVED_FD);
		close(m);
		if (memfd < 0 || ftruncate(memfd, (off_t)total))
			fprintf(stderr, "chell_randops: model setup: %s\n", strerror(errno)), exit(2);
		map_model(total);
		sh->magic = MAGIC;
		sh->seed = opt.seed;
		sh->nops = opt.ops;
		sh->max_size = opt.max_size;
		sh->cap = cap;
		sh->nfiles = opt.files;
		rng_seed(&main_rng, opt.seed, 0);
		kernel_answers();
		scan_foreign();
	}
	if (!opt.no_rwf && parse_kernel(sh->kspec))
		fail("model: bad kernel answers \"%.40s...\"", sh->kspec);
	lqs = mmap(NULL, MAXLQ * sizeof *lqs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (lqs == MAP_FAILED)
		fail("mmap lock probe area: %s", strerror(errno));
	bufs_init();
	rng_seed(&side_rng, sh->seed, 0x51de);
	open_dirfd();
	foreign[memfd < MAXFD ? memfd : 0] |= memfd < MAXFD;
	if (dfd < MAXFD)
		foreign[dfd] = 1;

	static const struct {
		int (*fn)(void);
		int w; /* per 1000 */
	} tab[] = {
		{ op_basic, 951 }, { op_stdio, 25 }, { op_verify, 5 }, { op_fork, 8 },
		{ op_exec, 1 },    { op_threads, 3 }, { op_procs, 3 }, { op_limits, 2 },
		{ op_unshare, 2 },
	};
	/* --progress N: a line on stderr each time another N operations are done */
	uint64_t next_progress = opt.progress ? (atomic_load(&sh->done) / opt.progress + 1) * opt.progress : 0;
	while (remaining() > 0) {
		if (next_progress && atomic_load(&sh->done) >= next_progress) {
			fprintf(stderr, "randops: progress %" PRIu64 "/%" PRIu64 "\n", atomic_load(&sh->done), opt.ops);
			next_progress = (atomic_load(&sh->done) / opt.progress + 1) * opt.progress;
		}
		int x = (int)below(1000);
		for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
			if (x < tab[i].w) {
				tab[i].fn();
				break;
			}
			x -= tab[i].w;
		}
		if (remaining() > 0)
			side_ops();
	}

	check_fds("end");
	for (int f = 0; f < sh->nfiles; f++)
		verify_file(f, "end");
	verify_log("end");
	printf("randops: seed=%" PRIu64 " ops=%" PRIu64 " done=%" PRIu64 " forks=%" PRIu64 " execs=%" PRIu64
	       " threads=%" PRIu64 "\n",
	       opt.seed, opt.ops, atomic_load(&sh->done), atomic_load(&sh->forks), atomic_load(&sh->execs),
	       atomic_load(&sh->nthreads));
	return 0;
}
