/* SPDX-License-Identifier: MIT */
/*
 * chell_filebench - the filebench workloads the WARP paper evaluates
 * (warp.md §VI), re-expressed as one ordinary C program so it runs under
 * LD_PRELOAD like any application: every file operation is a plain libc
 * call (open, read, write, lseek, pread, pwrite, fsync, fstat, stat,
 * unlink, mkdir, close), threads are pthreads.
 *
 * Personalities (flowop sequences, parameters and pick rules as in the
 * filebench 1.5 workload files workloads/{fileserver,webserver,webproxy,
 * varmail}.f and flowop_library.c; the published values are in the JSON
 * under params.published, the ones used under params.effective):
 *   fileserver  create, write whole (1 MB I/O), close, open, append random
 *               (up to 16 KB), close, open, read whole, close, delete, stat
 *   webserver   10 x (open, read whole, close) of a read-only set, then an
 *               append of up to 16 KB to a shared log file
 *   webproxy    delete, create, append up to 16 KB, close, 5 x (open, read
 *               whole, close)
 *   varmail     delete, create, append, fsync, close, open, read whole,
 *               append, fsync, close, open, read whole, close
 * and the paper's I/O-size sweeps (filemicro_seqread.f, randomwrite.f):
 *   seqread     sequential read()s of one file, wrapping at EOF
 *   randwrite   pwrite()s at random iosize-aligned offsets of one file
 * each for every --iosize in a list (default 4 KB .. 4 MB).
 *
 * Scaling for a small machine: file counts times --scale (default 0.1),
 * threads min(published, 2 x online CPUs), sweep file --file-size (256 MB
 * for filebench's 1 GB / 5 GB); all overridable. See docs/WORKLOADS.md.
 *
 * Data verification (--verify full, the default): every byte written is
 * drawn from one periodic pattern, at a phase fixed by (file, generation)
 * and the file offset, so the expected content of any byte that was ever
 * written is known without storing it. Each read is compared with memcmp
 * against the pattern (the sweeps' random writes are checked by reading the
 * whole file back at the end, untimed). A wrong byte under any mode is a
 * mismatch in the JSON and exit status 1.
 *
 * Output: one JSON object on stdout (ops/s, MB/s, per-flowop counts and
 * latency percentiles, the verification counts). Exit 0 ok, 1 an operation
 * failed or data did not verify, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../direct/bench_util.h"

#define KB (1024ull)
#define MB (1024ull * 1024)
#define MAXFD 3

/* ------------------------------------------------------------ the pattern */

/* Period of the pattern: 1 MB + 4 KB (257 pages), so an offset error of a
 * power of two up to 1 MB shows. A (file, generation) key picks a phase, a
 * multiple of 64 so aligned I/O copies from cache-line-aligned memory. */
#define PAT_PERIOD (MB + 4 * KB)
#define PAT_PHASES (PAT_PERIOD / 64)
static unsigned char *pat; /* PAT_PERIOD + pat_tail bytes, periodic */
static size_t pat_tail;    /* the largest single I/O */

static uint64_t mix64(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static void pat_init(size_t maxio, uint64_t seed)
{
	pat_tail = maxio;
	pat = malloc(PAT_PERIOD + maxio);
	if (!pat)
		bu_fail("out of memory (pattern)");
	for (size_t i = 0; i < PAT_PERIOD; i += 8) {
		uint64_t v = mix64(seed ^ (i * 0x100000001B3ull));
		memcpy(pat + i, &v, 8);
	}
	for (size_t i = PAT_PERIOD; i < PAT_PERIOD + maxio; i++)
		pat[i] = pat[i - PAT_PERIOD];
}

static uint32_t pat_phase(uint64_t key)
{
	return (uint32_t)(mix64(key) % PAT_PHASES) * 64;
}

/* The expected bytes at file offset `off` for phase `ph`: n <= pat_tail. */
static const unsigned char *pat_at(uint32_t ph, uint64_t off)
{
	return pat + (off + ph) % PAT_PERIOD;
}

/* ------------------------------------------------------------ histograms */

/* Log-linear latency histogram: 16 buckets per power of two (~6%). */
#define HB_SUB 4
#define HB_N ((64 - HB_SUB) << HB_SUB)
struct hist {
	uint64_t b[HB_N];
	uint64_t n, sum, max;
};

static unsigned hb_index(uint64_t v)
{
	if (v < (1u << HB_SUB))
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v);
	return ((e - HB_SUB + 1) << HB_SUB) + (unsigned)((v >> (e - HB_SUB)) & ((1u << HB_SUB) - 1));
}

/* The upper bound of a bucket (what a percentile reports). */
static uint64_t hb_value(unsigned i)
{
	if (i < (1u << HB_SUB))
		return i;
	unsigned e = (i >> HB_SUB) + HB_SUB - 1, s = i & ((1u << HB_SUB) - 1);
	return ((uint64_t)((1u << HB_SUB) + s + 1) << (e - HB_SUB)) - 1;
}

static void hist_add(struct hist *h, uint64_t v)
{
	h->b[hb_index(v)]++;
	h->n++;
	h->sum += v;
	if (v > h->max)
		h->max = v;
}

static void hist_merge(struct hist *to, const struct hist *from)
{
	for (unsigned i = 0; i < HB_N; i++)
		to->b[i] += from->b[i];
	to->n += from->n;
	to->sum += from->sum;
	if (from->max > to->max)
		to->max = from->max;
}

static double hist_pct(const struct hist *h, double p)
{
	if (!h->n)
		return 0;
	uint64_t want = (uint64_t)ceil(p / 100.0 * (double)h->n), seen = 0;
	if (want == 0)
		want = 1;
	for (unsigned i = 0; i < HB_N; i++) {
		seen += h->b[i];
		if (seen >= want) {
			uint64_t v = hb_value(i);
			return (double)(v < h->max ? v : h->max);
		}
	}
	return (double)h->max;
}

static void hist_json(const struct hist *h)
{
	printf("{\"count\": %llu, \"mean\": %.2f, \"p50\": %.2f, \"p90\": %.2f, \"p99\": %.2f, "
	       "\"p999\": %.2f, \"max\": %.2f}",
	       (unsigned long long)h->n, h->n ? (double)h->sum / (double)h->n / 1e3 : 0.0,
	       hist_pct(h, 50) / 1e3, hist_pct(h, 90) / 1e3, hist_pct(h, 99) / 1e3,
	       hist_pct(h, 99.9) / 1e3, (double)h->max / 1e3);
}

/* ------------------------------------------------------------ filesets */

struct entry {
	uint64_t size; /* fse_size: the size writewholefile writes */
	uint32_t gen;  /* bumped at every create: the pattern key */
	bool exists, busy;
	int open_cnt;
};

struct fileset {
	const char *name;
	char *root;
	size_t n;
	unsigned width, depth;
	bool readonly;
	unsigned id;
	struct entry *e;
	size_t nerotor; /* rotation over non-existing entries (global) */
	pthread_mutex_t lock;
};

static uint64_t entry_key(const struct fileset *fs, size_t i)
{
	return ((uint64_t)fs->id << 56) ^ ((uint64_t)i << 24) ^ fs->e[i].gen;
}

/* root/d<a>/d<b>/f<i>: files in leaf directories of `width` entries, the
 * leaf directories in a tree of the same width (filebench's dirwidth). */
static void entry_path(const struct fileset *fs, size_t i, char *out, size_t cap)
{
	int n = snprintf(out, cap, "%s", fs->root);
	size_t leaf = i / fs->width;
	unsigned digits[16];
	for (unsigned d = 0; d < fs->depth; d++) {
		digits[d] = (unsigned)(leaf % fs->width);
		leaf /= fs->width;
	}
	for (unsigned d = fs->depth; d-- > 0;)
		n += snprintf(out + n, cap - (size_t)n, "/d%u", digits[d]);
	snprintf(out + n, cap - (size_t)n, "/f%zu", i);
}

/* ------------------------------------------------------------ workloads */

enum fop { F_CREATE, F_WRITEWHOLE, F_CLOSE, F_OPEN, F_APPENDRAND, F_READWHOLE, F_DELETE, F_STAT, F_FSYNC };
static const char *const fop_kind[] = {"createfile", "writewholefile", "closefile", "openfile",
				       "appendfilerand", "readwholefile", "deletefile", "statfile", "fsync"};

struct flowop {
	const char *name;
	enum fop op;
	int fd;  /* descriptor slot (filebench fd=) */
	int set; /* fileset index */
	int io;  /* 0: $iosize, 1: $meanappendsize */
};

struct personality {
	const char *name, *source;
	size_t nfiles;
	unsigned width;
	uint64_t mean_size;
	unsigned threads;
	uint64_t iosize, appendsize;
	unsigned prealloc; /* percent */
	bool readonly, logfile;
	const struct flowop *flow;
	size_t nflow;
};

#define FLOW(a) a, sizeof a / sizeof a[0]
static const struct flowop fl_fileserver[] = {
	{"createfile1", F_CREATE, 1, 0, 0},	 {"wrtfile1", F_WRITEWHOLE, 1, 0, 0},
	{"closefile1", F_CLOSE, 1, 0, 0},	 {"openfile1", F_OPEN, 1, 0, 0},
	{"appendfilerand1", F_APPENDRAND, 1, 0, 1}, {"closefile2", F_CLOSE, 1, 0, 0},
	{"openfile2", F_OPEN, 1, 0, 0},		 {"readfile1", F_READWHOLE, 1, 0, 0},
	{"closefile3", F_CLOSE, 1, 0, 0},	 {"deletefile1", F_DELETE, 0, 0, 0},
	{"statfile1", F_STAT, 0, 0, 0},
};
/* openfileN, readfileN, closefileN: the unit webserver repeats 10 times and
 * webproxy 5 times. */
#define OPEN_READ_CLOSE(n)                                                                          \
	{"openfile" #n, F_OPEN, 1, 0, 0}, {"readfile" #n, F_READWHOLE, 1, 0, 0},                    \
	{                                                                                           \
		"closefile" #n, F_CLOSE, 1, 0, 0                                                    \
	}
static const struct flowop fl_webserver[] = {
	OPEN_READ_CLOSE(1), OPEN_READ_CLOSE(2), OPEN_READ_CLOSE(3), OPEN_READ_CLOSE(4),
	OPEN_READ_CLOSE(5), OPEN_READ_CLOSE(6), OPEN_READ_CLOSE(7), OPEN_READ_CLOSE(8),
	OPEN_READ_CLOSE(9), OPEN_READ_CLOSE(10), {"appendlog", F_APPENDRAND, 2, 1, 1},
};
static const struct flowop fl_webproxy[] = {
	{"deletefile1", F_DELETE, 0, 0, 0},
	{"createfile1", F_CREATE, 1, 0, 0},
	{"appendfilerand1", F_APPENDRAND, 1, 0, 1},
	{"closefile1", F_CLOSE, 1, 0, 0},
	OPEN_READ_CLOSE(2), OPEN_READ_CLOSE(3), OPEN_READ_CLOSE(4), OPEN_READ_CLOSE(5), OPEN_READ_CLOSE(6),
};
static const struct flowop fl_varmail[] = {
	{"deletefile1", F_DELETE, 0, 0, 0},   {"createfile2", F_CREATE, 1, 0, 0},
	{"appendfilerand2", F_APPENDRAND, 1, 0, 1}, {"fsyncfile2", F_FSYNC, 1, 0, 0},
	{"closefile2", F_CLOSE, 1, 0, 0},     {"openfile3", F_OPEN, 1, 0, 0},
	{"readfile3", F_READWHOLE, 1, 0, 0},  {"appendfilerand3", F_APPENDRAND, 1, 0, 1},
	{"fsyncfile3", F_FSYNC, 1, 0, 0},     {"closefile3", F_CLOSE, 1, 0, 0},
	{"openfile4", F_OPEN, 1, 0, 0},	      {"readfile4", F_READWHOLE, 1, 0, 0},
	{"closefile4", F_CLOSE, 1, 0, 0},
};

/* The published parameters (filebench workloads/NAME.f; webproxy's
 * $meaniosize is its append size). */
static const struct personality personalities[] = {
	{"fileserver", "filebench workloads/fileserver.f", 10000, 20, 128 * KB, 50, MB, 16 * KB, 80, false,
	 false, FLOW(fl_fileserver)},
	{"webserver", "filebench workloads/webserver.f", 1000, 20, 16 * KB, 100, MB, 16 * KB, 100, true, true,
	 FLOW(fl_webserver)},
	{"webproxy", "filebench workloads/webproxy.f", 10000, 1000000, 16 * KB, 100, MB, 16 * KB, 80, false,
	 false, FLOW(fl_webproxy)},
	{"varmail", "filebench workloads/varmail.f", 1000, 1000000, 16 * KB, 16, MB, 16 * KB, 80, false, false,
	 FLOW(fl_varmail)},
};

/* ------------------------------------------------------------ options */

static struct {
	const char *workload, *dir;
	double seconds, scale;
	long threads;
	long long files, mean_size, file_size;
	uint64_t seed;
	bool verify, keep;
	uint64_t sizes[32];
	size_t nsizes;
} opt = {.seconds = 15, .scale = 0.1, .threads = -1, .files = -1, .mean_size = -1,
	 .file_size = 256 * (long long)MB, .seed = 1, .verify = true};

static atomic_int stop_flag;
static atomic_ullong errors, mismatches, checked_bytes;
static char first_error[512];
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

static void note_error(const char *what, const char *path)
{
	int e = errno;
	atomic_fetch_add(&errors, 1);
	pthread_mutex_lock(&err_lock);
	if (!first_error[0]) {
		snprintf(first_error, sizeof first_error, "%s %s: %s", what, path ? path : "", strerror(e));
		fprintf(stderr, "chell_filebench: %s\n", first_error);
	}
	pthread_mutex_unlock(&err_lock);
}

/* Compare n bytes read at `off` with the pattern; count and report. */
static void verify(const unsigned char *buf, size_t n, uint32_t ph, uint64_t off, const char *path)
{
	if (!opt.verify || n == 0)
		return;
	atomic_fetch_add_explicit(&checked_bytes, n, memory_order_relaxed);
	const unsigned char *want = pat_at(ph, off);
	if (memcmp(buf, want, n) == 0)
		return;
	size_t k = 0;
	while (buf[k] == want[k])
		k++;
	atomic_fetch_add(&mismatches, 1);
	pthread_mutex_lock(&err_lock);
	if (!first_error[0]) {
		snprintf(first_error, sizeof first_error,
			 "data mismatch in %s at offset %llu: read 0x%02x, expected 0x%02x", path,
			 (unsigned long long)(off + k), buf[k], want[k]);
		fprintf(stderr, "chell_filebench: %s\n", first_error);
	}
	pthread_mutex_unlock(&err_lock);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'k': case 'K': v *= KB; end++; break;
	case 'm': case 'M': v *= MB; end++; break;
	case 'g': case 'G': v *= MB * KB; end++; break;
	}
	if (*end || v < 0 || end == s) {
		fprintf(stderr, "chell_filebench: bad size '%s'\n", s);
		exit(2);
	}
	return (uint64_t)v;
}

static void mkdirs(const char *path)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
			note_error("mkdir", tmp);
		*p = '/';
	}
	if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
		note_error("mkdir", tmp);
}

static void rm_tree(const char *root)
{
	/* nftw would be the obvious tool; a fork of rm keeps this program's own
	 * calls to the operations it measures. */
	pid_t p = fork();
	if (p == 0) {
		execlp("rm", "rm", "-rf", "--", root, (char *)NULL);
		_exit(127);
	}
	int st;
	if (p > 0)
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
}

/* Release the threads waiting at `start`, let them run for --seconds, raise
 * the stop flag; the start time (the caller joins the threads). */
static uint64_t timed_phase(pthread_barrier_t *start)
{
	pthread_barrier_wait(start);
	uint64_t t0 = bu_now_ns();
	struct timespec nap = {(time_t)opt.seconds, (long)((opt.seconds - floor(opt.seconds)) * 1e9)};
	while (nanosleep(&nap, &nap) != 0 && errno == EINTR)
		;
	atomic_store(&stop_flag, 1);
	return t0;
}

/* ------------------------------------------------------------ file I/O helpers */

/* Write [off, off+len) of a file with the pattern of phase ph, iosize at a
 * time, with write() from the current offset (which is off). */
static int write_pattern(int fd, uint32_t ph, uint64_t off, uint64_t len, uint64_t iosize, const char *path,
			 uint64_t *bytes)
{
	while (len > 0) {
		size_t n = (size_t)(len < iosize ? len : iosize);
		ssize_t r = write(fd, pat_at(ph, off), n);
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			note_error("write", path);
			return -1;
		}
		off += (uint64_t)r;
		len -= (uint64_t)r;
		*bytes += (uint64_t)r;
	}
	return 0;
}

/* ------------------------------------------------------------ personality run */

struct run {
	const struct personality *p;
	struct fileset sets[2];
	unsigned nsets;
	uint64_t iosize, appendsize;
	unsigned threads;
	pthread_barrier_t start;
};

struct tstate {
	struct run *r;
	unsigned id;
	pthread_t th;
	uint64_t rng;
	int fd[MAXFD];
	int fdset[MAXFD];
	size_t fdent[MAXFD];
	size_t exrotor[2];
	unsigned char *buf;
	struct hist *h; /* one per flowop */
	uint64_t *bytes;
	uint64_t rd_ops, wr_ops, rd_bytes, wr_bytes;
};

/* Pick an entry: existing (rotation per thread) or not (global rotation),
 * skipping busy ones, as filebench's fileset_pick does; marks it busy.
 * SIZE_MAX when none qualifies. */
static size_t pick(struct fileset *fs, struct tstate *t, unsigned set, bool exists)
{
	pthread_mutex_lock(&fs->lock);
	size_t start = exists ? t->exrotor[set] : fs->nerotor, got = SIZE_MAX;
	for (size_t k = 0; k < fs->n; k++) {
		size_t i = (start + k) % fs->n;
		if (fs->e[i].exists == exists && !fs->e[i].busy) {
			got = i;
			break;
		}
	}
	if (got != SIZE_MAX) {
		fs->e[got].busy = true;
		if (exists)
			t->exrotor[set] = got + 1;
		else
			fs->nerotor = got + 1;
	}
	pthread_mutex_unlock(&fs->lock);
	return got;
}

static void unbusy(struct fileset *fs, size_t i, int exists, int open_delta)
{
	pthread_mutex_lock(&fs->lock);
	fs->e[i].busy = false;
	if (exists >= 0)
		fs->e[i].exists = exists;
	fs->e[i].open_cnt += open_delta;
	pthread_mutex_unlock(&fs->lock);
}

/* A close: only the open count changes. The entry may be busy with another
 * thread's pick at this moment (a delete checking the open count), and that
 * pick's busy mark must stay: clearing it would let a third thread open the
 * file that the delete is about to unlink. */
static void closed(struct fileset *fs, size_t i)
{
	pthread_mutex_lock(&fs->lock);
	fs->e[i].open_cnt--;
	pthread_mutex_unlock(&fs->lock);
}

static uint32_t phase_of(struct fileset *fs, size_t i)
{
	pthread_mutex_lock(&fs->lock);
	uint32_t ph = pat_phase(entry_key(fs, i));
	pthread_mutex_unlock(&fs->lock);
	return ph;
}

/* createfile (create) or openfile: pick a file that does not exist / does
 * and open it into the flowop's descriptor slot, the open timed into h (NULL:
 * webserver's log, opened untimed on first use). False when nothing could
 * be picked. */
static bool open_flowop(struct tstate *t, const struct flowop *f, bool create, struct hist *h)
{
	struct fileset *fs = &t->r->sets[f->set];
	char path[4096];
	size_t i = pick(fs, t, (unsigned)f->set, !create);
	if (i == SIZE_MAX)
		return false;
	if (create) {
		pthread_mutex_lock(&fs->lock);
		fs->e[i].gen++;
		pthread_mutex_unlock(&fs->lock);
	}
	entry_path(fs, i, path, sizeof path);
	int flags = create ? O_RDWR | O_CREAT : fs->readonly ? O_RDONLY : O_RDWR;
	uint64_t t0 = bu_now_ns();
	int fd = open(path, flags, 0644);
	uint64_t dt = bu_now_ns() - t0;
	if (fd < 0) {
		note_error(create ? "create" : "open", path);
		unbusy(fs, i, create ? 0 : -1, 0);
		return true;
	}
	t->fd[f->fd] = fd;
	t->fdset[f->fd] = f->set;
	t->fdent[f->fd] = i;
	unbusy(fs, i, create ? 1 : -1, 1);
	if (h)
		hist_add(h, dt);
	return true;
}

/* One flowop; false when it could not run (nothing to pick: not an error,
 * filebench retries the flow). */
static bool do_flowop(struct tstate *t, size_t k)
{
	const struct flowop *f = &t->r->p->flow[k];
	struct fileset *fs = &t->r->sets[f->set];
	char path[4096];
	uint64_t bytes = 0, t0 = 0;
	bool rd = false, wr = false;
	int slot = f->fd;

	switch (f->op) {
	case F_CREATE:
		return open_flowop(t, f, true, &t->h[k]);
	case F_OPEN:
		return open_flowop(t, f, false, &t->h[k]);
	case F_CLOSE: {
		if (t->fd[slot] < 0)
			return false;
		struct fileset *ofs = &t->r->sets[t->fdset[slot]];
		t0 = bu_now_ns();
		if (close(t->fd[slot]) != 0)
			note_error("close", "");
		uint64_t dt = bu_now_ns() - t0;
		closed(ofs, t->fdent[slot]);
		t->fd[slot] = -1;
		hist_add(&t->h[k], dt);
		return true;
	}
	case F_DELETE: {
		size_t i = pick(fs, t, (unsigned)f->set, true);
		if (i == SIZE_MAX)
			return false;
		pthread_mutex_lock(&fs->lock);
		int others = fs->e[i].open_cnt;
		pthread_mutex_unlock(&fs->lock);
		if (others > 0) { /* filebench: "can't delete file opened by other threads" */
			unbusy(fs, i, -1, 0);
			return true;
		}
		entry_path(fs, i, path, sizeof path);
		t0 = bu_now_ns();
		if (unlink(path) != 0)
			note_error("unlink", path);
		uint64_t dt = bu_now_ns() - t0;
		unbusy(fs, i, 0, 0);
		hist_add(&t->h[k], dt);
		return true;
	}
	case F_STAT: {
		size_t i = pick(fs, t, (unsigned)f->set, true);
		if (i == SIZE_MAX)
			return false;
		entry_path(fs, i, path, sizeof path);
		struct stat st;
		t0 = bu_now_ns();
		if (stat(path, &st) != 0)
			note_error("stat", path);
		uint64_t dt = bu_now_ns() - t0;
		unbusy(fs, i, -1, 0);
		hist_add(&t->h[k], dt);
		return true;
	}
	case F_FSYNC: {
		if (t->fd[slot] < 0)
			return false;
		t0 = bu_now_ns();
		if (fsync(t->fd[slot]) != 0)
			note_error("fsync", "");
		hist_add(&t->h[k], bu_now_ns() - t0);
		return true;
	}
	case F_WRITEWHOLE:
	case F_APPENDRAND:
	case F_READWHOLE:
		break;
	}

	/* The I/O flowops work on an open descriptor slot; webserver's log
	 * append opens its file on first use and keeps it (filebench's
	 * filesetup). */
	if (t->fd[slot] < 0) {
		if (f->op != F_APPENDRAND || slot != 2 || !open_flowop(t, f, false, NULL) || t->fd[slot] < 0)
			return false;
	}
	struct fileset *ofs = &t->r->sets[t->fdset[slot]];
	size_t i = t->fdent[slot];
	int fd = t->fd[slot];
	uint32_t ph = phase_of(ofs, i);
	entry_path(ofs, i, path, sizeof path);
	uint64_t iosize = f->io ? t->r->appendsize : t->r->iosize;

	if (f->op == F_WRITEWHOLE) {
		uint64_t size = ofs->e[i].size;
		t0 = bu_now_ns();
		write_pattern(fd, ph, 0, size, iosize, path, &bytes);
		wr = true;
	} else if (f->op == F_APPENDRAND) {
		/* A uniform size in [1, iosize] at the end of the file
		 * (lseek + write, as filebench does). */
		uint64_t n = 1 + bu_below(&t->rng, iosize);
		t0 = bu_now_ns();
		off_t end = lseek(fd, 0, SEEK_END);
		if (end < 0)
			note_error("lseek", path);
		else
			write_pattern(fd, ph, (uint64_t)end, n, n, path, &bytes);
		wr = true;
	} else {
		t0 = bu_now_ns();
		uint64_t off = 0;
		if (lseek(fd, 0, SEEK_SET) != 0)
			note_error("lseek", path);
		for (;;) {
			ssize_t r = read(fd, t->buf, (size_t)iosize);
			if (r < 0) {
				note_error("read", path);
				break;
			}
			if (r == 0)
				break;
			verify(t->buf, (size_t)r, ph, off, path);
			off += (uint64_t)r;
		}
		bytes = off;
		rd = true;
	}
	hist_add(&t->h[k], bu_now_ns() - t0);
	t->bytes[k] += bytes;
	if (rd) {
		t->rd_ops++;
		t->rd_bytes += bytes;
	}
	if (wr) {
		t->wr_ops++;
		t->wr_bytes += bytes;
	}
	return true;
}

static void *pers_thread(void *arg)
{
	struct tstate *t = arg;
	size_t nflow = t->r->p->nflow;
	pthread_barrier_wait(&t->r->start);
	while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		bool any = false;
		for (size_t k = 0; k < nflow && !atomic_load_explicit(&stop_flag, memory_order_relaxed); k++)
			any |= do_flowop(t, k);
		if (!any) /* nothing to pick at all: let the others move */
			sched_yield();
	}
	for (int s = 0; s < MAXFD; s++)
		if (t->fd[s] >= 0) {
			close(t->fd[s]);
			closed(&t->r->sets[t->fdset[s]], t->fdent[s]);
			t->fd[s] = -1;
		}
	return NULL;
}

/* filebench's cvar-gamma (shape 1.5, the given mean): Marsaglia-Tsang. */
static double gamma_sample(uint64_t *rng, double shape, double mean)
{
	double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
	for (;;) {
		double u1 = ((double)(bu_rand(rng) >> 11) + 0.5) / 9007199254740992.0;
		double u2 = ((double)(bu_rand(rng) >> 11) + 0.5) / 9007199254740992.0;
		double x = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
		double v = 1.0 + c * x;
		if (v <= 0)
			continue;
		v = v * v * v;
		double u = ((double)(bu_rand(rng) >> 11) + 0.5) / 9007199254740992.0;
		if (log(u) < 0.5 * x * x + d - d * v + d * log(v))
			return d * v * mean / shape;
	}
}

static void fileset_init(struct fileset *fs, const char *name, unsigned id, size_t n, unsigned width,
			 uint64_t mean, unsigned prealloc, bool readonly, uint64_t *rng)
{
	fs->name = name;
	fs->id = id;
	fs->n = n;
	fs->width = width;
	fs->readonly = readonly;
	size_t leaves = (n + width - 1) / width;
	fs->depth = 0;
	for (size_t l = leaves; l > 1; l = (l + width - 1) / width)
		fs->depth++;
	if (asprintf(&fs->root, "%s/%s", opt.dir, name) < 0)
		bu_fail("out of memory");
	fs->e = calloc(n, sizeof *fs->e);
	if (!fs->e)
		bu_fail("out of memory");
	pthread_mutex_init(&fs->lock, NULL);
	for (size_t i = 0; i < n; i++) {
		double s = gamma_sample(rng, 1.5, (double)mean);
		fs->e[i].size = (uint64_t)s;
		/* prealloc percent of the entries exist at the start */
		fs->e[i].exists = bu_below(rng, 100) < prealloc;
	}
}

/* Create the directories and the preallocated files (untimed). */
static uint64_t fileset_populate(struct fileset *fs, uint64_t iosize)
{
	char path[4096];
	uint64_t total = 0;
	size_t leaves = (fs->n + fs->width - 1) / fs->width;
	for (size_t l = 0; l < leaves; l++) {
		entry_path(fs, l * fs->width, path, sizeof path);
		*strrchr(path, '/') = 0;
		mkdirs(path);
	}
	for (size_t i = 0; i < fs->n; i++) {
		if (!fs->e[i].exists)
			continue;
		entry_path(fs, i, path, sizeof path);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0) {
			note_error("prealloc open", path);
			fs->e[i].exists = false;
			continue;
		}
		write_pattern(fd, pat_phase(entry_key(fs, i)), 0, fs->e[i].size, iosize, path, &total);
		close(fd);
	}
	return total;
}

static unsigned default_threads(unsigned published)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned cap = (unsigned)(ncpu > 0 ? 2 * ncpu : 2);
	return published < cap ? published : cap;
}

static void print_personality_params(const struct personality *p, const struct run *r)
{
	printf("  \"params\": {\"published\": {\"source\": \"%s\", \"nfiles\": %zu, \"meandirwidth\": %u, "
	       "\"mean_filesize\": %llu, \"nthreads\": %u, \"iosize\": %llu, \"meanappendsize\": %llu, "
	       "\"prealloc_pct\": %u, \"readonly\": %s},\n",
	       p->source, p->nfiles, p->width, (unsigned long long)p->mean_size, p->threads,
	       (unsigned long long)p->iosize, (unsigned long long)p->appendsize, p->prealloc,
	       p->readonly ? "true" : "false");
	printf("    \"effective\": {\"nfiles\": %zu, \"meandirwidth\": %u, \"mean_filesize\": %llu, "
	       "\"nthreads\": %u, \"iosize\": %llu, \"meanappendsize\": %llu, \"prealloc_pct\": %u, "
	       "\"scale\": %g, \"logfile\": %s}},\n",
	       r->sets[0].n, r->sets[0].width,
	       (unsigned long long)(opt.mean_size > 0 ? (uint64_t)opt.mean_size : p->mean_size), r->threads,
	       (unsigned long long)r->iosize, (unsigned long long)r->appendsize, p->prealloc, opt.scale,
	       p->logfile ? "true" : "false");
}

static void print_common_tail(void)
{
	printf("  \"verify\": {\"mode\": \"%s\", \"bytes_checked\": %llu, \"mismatches\": %llu},\n",
	       opt.verify ? "full" : "none", (unsigned long long)atomic_load(&checked_bytes),
	       (unsigned long long)atomic_load(&mismatches));
	printf("  \"errors\": %llu,\n  \"first_error\": ", (unsigned long long)atomic_load(&errors));
	if (first_error[0]) {
		putchar('"');
		for (const char *c = first_error; *c; c++)
			if (*c == '"' || *c == '\\')
				printf("\\%c", *c);
			else if ((unsigned char)*c >= 0x20)
				putchar(*c);
		putchar('"');
	} else {
		printf("null");
	}
	bool ok = atomic_load(&errors) == 0 && atomic_load(&mismatches) == 0;
	printf(",\n  \"ok\": %s\n}\n", ok ? "true" : "false");
}

static int run_personality(const struct personality *p)
{
	struct run r = {.p = p};
	uint64_t rng = mix64(opt.seed);
	size_t n = opt.files > 0 ? (size_t)opt.files : (size_t)fmax(1.0, round((double)p->nfiles * opt.scale));
	uint64_t mean = opt.mean_size > 0 ? (uint64_t)opt.mean_size : p->mean_size;
	r.iosize = p->iosize;
	r.appendsize = p->appendsize;
	r.threads = opt.threads > 0 ? (unsigned)opt.threads : default_threads(p->threads);
	pat_init(r.iosize > r.appendsize ? r.iosize : r.appendsize, opt.seed);
	fileset_init(&r.sets[0], "bigfileset", 0, n, p->width, mean, p->prealloc, p->readonly, &rng);
	r.nsets = 1;
	if (p->logfile) {
		fileset_init(&r.sets[1], "logfiles", 1, 1, p->width, mean, 100, false, &rng);
		r.nsets = 2;
	}
	for (unsigned s = 0; s < r.nsets; s++)
		rm_tree(r.sets[s].root);
	uint64_t t0 = bu_now_ns(), prebytes = 0;
	for (unsigned s = 0; s < r.nsets; s++)
		prebytes += fileset_populate(&r.sets[s], r.iosize);
	double prealloc_s = (double)(bu_now_ns() - t0) / 1e9;

	struct tstate *ts = calloc(r.threads, sizeof *ts);
	pthread_barrier_init(&r.start, NULL, r.threads + 1);
	for (unsigned i = 0; i < r.threads; i++) {
		struct tstate *t = &ts[i];
		t->r = &r;
		t->id = i;
		t->rng = mix64(opt.seed * 0x9E37u + i + 1) | 1;
		for (int s = 0; s < MAXFD; s++)
			t->fd[s] = -1;
		t->h = calloc(p->nflow, sizeof *t->h);
		t->bytes = calloc(p->nflow, sizeof *t->bytes);
		if (posix_memalign((void **)&t->buf, 4096, r.iosize) || !t->h || !t->bytes)
			bu_fail("out of memory");
		if (pthread_create(&t->th, NULL, pers_thread, t))
			bu_fail("pthread_create");
	}
	uint64_t start = timed_phase(&r.start);
	for (unsigned i = 0; i < r.threads; i++)
		pthread_join(ts[i].th, NULL);
	double el = (double)(bu_now_ns() - start) / 1e9;

	struct hist *fh = calloc(p->nflow, sizeof *fh), all = {0};
	uint64_t *fb = calloc(p->nflow, sizeof *fb), rd_ops = 0, wr_ops = 0, rd_b = 0, wr_b = 0;
	for (unsigned i = 0; i < r.threads; i++) {
		for (size_t k = 0; k < p->nflow; k++) {
			hist_merge(&fh[k], &ts[i].h[k]);
			fb[k] += ts[i].bytes[k];
		}
		rd_ops += ts[i].rd_ops;
		wr_ops += ts[i].wr_ops;
		rd_b += ts[i].rd_bytes;
		wr_b += ts[i].wr_bytes;
	}
	for (size_t k = 0; k < p->nflow; k++)
		hist_merge(&all, &fh[k]);

	printf("{\n  \"tool\": \"chell_filebench\",\n  \"schema\": 1,\n  \"workload\": \"%s\",\n", p->name);
	printf("  \"seed\": %llu,\n  \"seconds\": %.3f,\n  \"prealloc_s\": %.3f,\n  \"prealloc_bytes\": %llu,\n",
	       (unsigned long long)opt.seed, el, prealloc_s, (unsigned long long)prebytes);
	print_personality_params(p, &r);
	printf("  \"ops\": %llu,\n  \"ops_s\": %.1f,\n  \"mb_s\": %.2f,\n", (unsigned long long)all.n,
	       (double)all.n / el, (double)(rd_b + wr_b) / el / 1e6);
	printf("  \"read_ops\": %llu,\n  \"write_ops\": %llu,\n  \"read_mb_s\": %.2f,\n  \"write_mb_s\": %.2f,\n",
	       (unsigned long long)rd_ops, (unsigned long long)wr_ops, (double)rd_b / el / 1e6,
	       (double)wr_b / el / 1e6);
	printf("  \"latency_us\": ");
	hist_json(&all);
	printf(",\n  \"flowops\": [\n");
	for (size_t k = 0; k < p->nflow; k++) {
		printf("    {\"name\": \"%s\", \"op\": \"%s\", \"ops_s\": %.1f, \"mb_s\": %.2f, \"latency_us\": ",
		       p->flow[k].name, fop_kind[p->flow[k].op], (double)fh[k].n / el, (double)fb[k] / el / 1e6);
		hist_json(&fh[k]);
		printf("}%s\n", k + 1 < p->nflow ? "," : "");
	}
	printf("  ],\n");
	print_common_tail();
	fflush(stdout);
	for (unsigned s = 0; s < r.nsets; s++) {
		if (!opt.keep)
			rm_tree(r.sets[s].root);
		free(r.sets[s].root);
		free(r.sets[s].e);
	}
	for (unsigned i = 0; i < r.threads; i++) {
		free(ts[i].h);
		free(ts[i].bytes);
		free(ts[i].buf);
	}
	free(ts);
	free(fh);
	free(fb);
	free(pat);
	return atomic_load(&errors) || atomic_load(&mismatches) ? 1 : 0;
}

/* ------------------------------------------------------------ the I/O-size sweeps */

struct sweep {
	bool write;
	char *path;
	uint64_t fsize, iosize;
	unsigned threads;
	uint32_t *blk_phase; /* randwrite: the phase of each 4 KB block's last write */
	uint32_t base_phase;
	pthread_barrier_t start;
	atomic_ullong key;
};

struct sthread {
	struct sweep *s;
	unsigned id;
	pthread_t th;
	uint64_t rng, ops, bytes;
	struct hist h;
	unsigned char *buf;
};

static void *sweep_thread(void *arg)
{
	struct sthread *t = arg;
	struct sweep *s = t->s;
	int fd = open(s->path, s->write ? O_RDWR : O_RDONLY);
	if (fd < 0)
		note_error("open", s->path);
	pthread_barrier_wait(&s->start);
	if (fd < 0)
		return NULL;
	uint64_t nblk = s->fsize / s->iosize, off = 0;
	/* randwrite: thread i owns the blocks b with b % threads == i, so no
	 * two threads write one block and each block's last phase is known. */
	uint64_t mine = (nblk + s->threads - 1 - t->id) / s->threads;
	if (s->write && mine == 0) { /* more threads than blocks: this one idles */
		close(fd);
		return NULL;
	}
	while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		uint64_t t0 = bu_now_ns();
		if (s->write) {
			uint64_t b = bu_below(&t->rng, mine) * s->threads + t->id;
			off = b * s->iosize;
			uint32_t ph = pat_phase(atomic_fetch_add(&s->key, 1));
			ssize_t r = pwrite(fd, pat_at(ph, off), (size_t)s->iosize, (off_t)off);
			hist_add(&t->h, bu_now_ns() - t0);
			if (r != (ssize_t)s->iosize) {
				note_error("pwrite", s->path);
				break;
			}
			for (uint64_t k = off / (4 * KB); k < (off + s->iosize) / (4 * KB); k++)
				s->blk_phase[k] = ph;
			t->bytes += (uint64_t)r;
		} else {
			ssize_t r = read(fd, t->buf, (size_t)s->iosize);
			if (r == 0) { /* EOF: filebench's read flowop rewinds */
				if (lseek(fd, 0, SEEK_SET) != 0)
					note_error("lseek", s->path);
				off = 0;
				continue;
			}
			hist_add(&t->h, bu_now_ns() - t0);
			if (r < 0) {
				note_error("read", s->path);
				break;
			}
			verify(t->buf, (size_t)r, s->base_phase, off, s->path);
			off += (uint64_t)r;
			t->bytes += (uint64_t)r;
		}
		t->ops++;
	}
	close(fd);
	return NULL;
}

static int run_sweep(bool write)
{
	struct sweep s = {.write = write};
	uint64_t maxio = 0;
	for (size_t i = 0; i < opt.nsizes; i++)
		if (opt.sizes[i] > maxio)
			maxio = opt.sizes[i];
	s.fsize = (uint64_t)opt.file_size / maxio * maxio;
	if (s.fsize == 0 || maxio % (4 * KB)) {
		fprintf(stderr, "chell_filebench: --file-size must hold the largest --iosize, and every "
				"--iosize must be a multiple of 4k\n");
		return 2;
	}
	s.threads = opt.threads > 0 ? (unsigned)opt.threads : 1;
	pat_init(maxio > MB ? maxio : MB, opt.seed);
	mkdirs(opt.dir);
	if (asprintf(&s.path, "%s/largefile1", opt.dir) < 0)
		bu_fail("out of memory");
	s.base_phase = pat_phase(0xF11E);
	uint64_t t0 = bu_now_ns(), pre = 0;
	int fd = open(s.path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		note_error("create", s.path);
		return 1;
	}
	write_pattern(fd, s.base_phase, 0, s.fsize, MB, s.path, &pre);
	close(fd);
	double prealloc_s = (double)(bu_now_ns() - t0) / 1e9;
	uint64_t nb4 = s.fsize / (4 * KB);
	s.blk_phase = malloc(nb4 * sizeof *s.blk_phase);
	if (!s.blk_phase)
		bu_fail("out of memory");
	for (uint64_t k = 0; k < nb4; k++)
		s.blk_phase[k] = s.base_phase;
	atomic_store(&s.key, mix64(opt.seed));

	printf("{\n  \"tool\": \"chell_filebench\",\n  \"schema\": 1,\n  \"workload\": \"%s\",\n",
	       write ? "randwrite" : "seqread");
	printf("  \"seed\": %llu,\n  \"prealloc_s\": %.3f,\n  \"prealloc_bytes\": %llu,\n",
	       (unsigned long long)opt.seed, prealloc_s, (unsigned long long)pre);
	printf("  \"params\": {\"published\": {\"source\": \"%s\", \"filesize\": %llu, \"iosize\": %llu, "
	       "\"nthreads\": 1},\n    \"effective\": {\"filesize\": %llu, \"nthreads\": %u, "
	       "\"seconds_per_size\": %g}},\n",
	       write ? "filebench workloads/randomwrite.f" : "filebench workloads/filemicro_seqread.f",
	       write ? 5 * MB * KB : MB * KB, write ? 8 * KB : MB, (unsigned long long)s.fsize, s.threads,
	       opt.seconds);
	printf("  \"sweep\": [\n");
	uint64_t tot_ops = 0, tot_bytes = 0;
	double tot_s = 0;
	struct sthread *ts = calloc(s.threads, sizeof *ts);
	for (size_t z = 0; z < opt.nsizes; z++) {
		s.iosize = opt.sizes[z];
		atomic_store(&stop_flag, 0);
		pthread_barrier_init(&s.start, NULL, s.threads + 1);
		for (unsigned i = 0; i < s.threads; i++) {
			struct sthread *t = &ts[i];
			memset(t, 0, sizeof *t);
			t->s = &s;
			t->id = i;
			t->rng = mix64(opt.seed * 31u + z * 7u + i + 1) | 1;
			if (!write && posix_memalign((void **)&t->buf, 4096, s.iosize))
				bu_fail("out of memory");
			if (pthread_create(&t->th, NULL, sweep_thread, t))
				bu_fail("pthread_create");
		}
		uint64_t start = timed_phase(&s.start);
		struct hist h = {0};
		uint64_t ops = 0, bytes = 0;
		for (unsigned i = 0; i < s.threads; i++) {
			pthread_join(ts[i].th, NULL);
			hist_merge(&h, &ts[i].h);
			ops += ts[i].ops;
			bytes += ts[i].bytes;
			free(ts[i].buf);
		}
		double el = (double)(bu_now_ns() - start) / 1e9;
		pthread_barrier_destroy(&s.start);
		tot_ops += ops;
		tot_bytes += bytes;
		tot_s += el;
		printf("    {\"iosize\": %llu, \"seconds\": %.3f, \"ops\": %llu, \"ops_s\": %.1f, \"mb_s\": %.2f, "
		       "\"latency_us\": ",
		       (unsigned long long)s.iosize, el, (unsigned long long)ops, (double)ops / el,
		       (double)bytes / el / 1e6);
		hist_json(&h);
		printf("}%s\n", z + 1 < opt.nsizes ? "," : "");
	}
	printf("  ],\n");
	/* randwrite: read the whole file back (untimed) against each 4 KB
	 * block's last written phase: a lost, misplaced or torn write shows. */
	double verify_s = 0;
	if (write && opt.verify) {
		uint64_t v0 = bu_now_ns();
		unsigned char *buf;
		if (posix_memalign((void **)&buf, 4096, 4 * KB))
			bu_fail("out of memory");
		fd = open(s.path, O_RDONLY);
		if (fd < 0)
			note_error("open", s.path);
		for (uint64_t k = 0; fd >= 0 && k < nb4; k++) {
			ssize_t r = pread(fd, buf, 4 * KB, (off_t)(k * 4 * KB));
			if (r != (ssize_t)(4 * KB)) {
				if (r >= 0)
					errno = EIO;
				note_error("pread (verify)", s.path);
				break;
			}
			verify(buf, 4 * KB, s.blk_phase[k], k * 4 * KB, s.path);
		}
		if (fd >= 0)
			close(fd);
		free(buf);
		verify_s = (double)(bu_now_ns() - v0) / 1e9;
	}
	printf("  \"seconds\": %.3f,\n  \"ops\": %llu,\n  \"ops_s\": %.1f,\n  \"mb_s\": %.2f,\n  \"verify_s\": %.3f,\n",
	       tot_s, (unsigned long long)tot_ops, tot_s > 0 ? (double)tot_ops / tot_s : 0.0,
	       tot_s > 0 ? (double)tot_bytes / tot_s / 1e6 : 0.0, verify_s);
	print_common_tail();
	fflush(stdout);
	if (!opt.keep && unlink(s.path) != 0)
		note_error("unlink", s.path);
	free(s.path);
	free(s.blk_phase);
	free(ts);
	free(pat);
	return atomic_load(&errors) || atomic_load(&mismatches) ? 1 : 0;
}

/* ------------------------------------------------------------ main */

static void usage(FILE *to)
{
	fprintf(to,
		"Usage: chell_filebench WORKLOAD --dir DIR [OPTIONS]\n"
		"\n"
		"The filebench workloads of the WARP paper as one program on the plain libc\n"
		"file API (runs under LD_PRELOAD / chell run). Prints one JSON object.\n"
		"\n"
		"Workloads:\n"
		"  fileserver webserver webproxy varmail   filebench personalities\n"
		"  seqread randwrite                       I/O-size sweeps (one file)\n"
		"\n"
		"Options:\n"
		"  --dir DIR          where the files go (created; the fileset is removed at the end)\n"
		"  --seconds S        run time; per I/O size for the sweeps (default 15)\n"
		"  --threads N        threads (default: min(published, 2 x CPUs); sweeps 1)\n"
		"  --scale F          personalities: file count = published x F (default 0.1)\n"
		"  --files N          personalities: file count (overrides --scale)\n"
		"  --mean-size SIZE   personalities: mean file size (default: published)\n"
		"  --iosize LIST      sweeps: comma-separated sizes (default 4k,8k,...,4m)\n"
		"  --file-size SIZE   sweeps: file size (default 256m)\n"
		"  --seed N           random seed (default 1)\n"
		"  --verify full|none compare every byte read with the written pattern (default full)\n"
		"  --keep             leave the files in place\n"
		"  -h, --help         this help\n"
		"\n"
		"Exit status: 0 ok, 1 an operation failed or data did not verify, 2 usage.\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"dir", required_argument, 0, 'd'},	  {"seconds", required_argument, 0, 's'},
		{"threads", required_argument, 0, 't'},	  {"scale", required_argument, 0, 'S'},
		{"files", required_argument, 0, 'n'},	  {"mean-size", required_argument, 0, 'm'},
		{"iosize", required_argument, 0, 'i'},	  {"file-size", required_argument, 0, 'f'},
		{"seed", required_argument, 0, 'r'},	  {"verify", required_argument, 0, 'v'},
		{"keep", no_argument, 0, 'k'},		  {"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'd': opt.dir = optarg; break;
		case 's': opt.seconds = atof(optarg); break;
		case 't': opt.threads = atol(optarg); break;
		case 'S': opt.scale = atof(optarg); break;
		case 'n': opt.files = atoll(optarg); break;
		case 'm': opt.mean_size = (long long)parse_size(optarg); break;
		case 'f': opt.file_size = (long long)parse_size(optarg); break;
		case 'r': opt.seed = strtoull(optarg, NULL, 0); break;
		case 'k': opt.keep = true; break;
		case 'v':
			if (strcmp(optarg, "full") && strcmp(optarg, "none")) {
				fprintf(stderr, "chell_filebench: --verify is full or none\n");
				return 2;
			}
			opt.verify = strcmp(optarg, "full") == 0;
			break;
		case 'i': {
			char *save, *tok, *list = strdup(optarg);
			opt.nsizes = 0;
			for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (opt.nsizes == sizeof opt.sizes / sizeof opt.sizes[0]) {
					fprintf(stderr, "chell_filebench: too many --iosize values\n");
					return 2;
				}
				opt.sizes[opt.nsizes++] = parse_size(tok);
			}
			free(list);
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 || !opt.dir) {
		usage(stderr);
		return 2;
	}
	opt.workload = argv[optind];
	if (opt.seconds <= 0 || opt.scale <= 0) {
		fprintf(stderr, "chell_filebench: --seconds and --scale must be positive\n");
		return 2;
	}
	if (opt.nsizes == 0)
		for (uint64_t z = 4 * KB; z <= 4 * MB; z *= 2)
			opt.sizes[opt.nsizes++] = z;
	for (size_t i = 0; i < sizeof personalities / sizeof personalities[0]; i++)
		if (strcmp(opt.workload, personalities[i].name) == 0) {
			mkdirs(opt.dir);
			return run_personality(&personalities[i]);
		}
	if (strcmp(opt.workload, "seqread") == 0 || strcmp(opt.workload, "randwrite") == 0)
		return run_sweep(strcmp(opt.workload, "randwrite") == 0);
	fprintf(stderr, "chell_filebench: unknown workload '%s' (fileserver, webserver, webproxy, varmail, "
			"seqread, randwrite)\n",
		opt.workload);
	return 2;
}
