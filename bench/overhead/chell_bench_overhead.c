/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_overhead - cost of one cheap file call, in ns per call.
 *
 * The same binary is run with and without LD_PRELOAD=libchell.so by
 * scripts/bench_overhead.py; the difference is what Chell's layer adds. This
 * program only times calls and prints JSON; it knows nothing about Chell
 * except that it reports which object provides each libc name, so a run that
 * was meant to be preloaded but is not (or a name Chell does not interpose)
 * is visible in the output instead of silently measuring plain libc.
 *
 * Cases (each one libc call per iteration, return value checked):
 *   pipe_read1       read(2) of 1 byte from a pipe. The pipe is filled
 *                    outside the timed region and then drained one byte per
 *                    call, so a read never blocks and no write is timed.
 *   file_read0       read of 0 bytes from a regular file (--plain-file)
 *   file_pread1      pread of 1 byte at offset 0 from the same file
 *   file_fstat       fstat on it
 *   file_lseek       lseek(fd, 0, SEEK_CUR) on it
 *   devnull_write1   write of 1 byte to /dev/null
 *   handled_*        read0/pread1/fstat/lseek on --handled-file, which the
 *                    driver places under CHELL_PATHS so that the posix
 *                    handler serves it (without preload it is a plain file)
 *
 * Two ways to run:
 *   timing (default): per case, a warm-up, then --batches batches of --batch
 *                     calls, each batch timed with CLOCK_MONOTONIC;
 *   --calls N:        per case exactly N calls, no warm-up, for instruction
 *                     counting under callgrind (the driver runs N1 and N2 and
 *                     divides the difference of the totals by N2 - N1, which
 *                     cancels start-up and everything outside the loops).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*read_fn)(int, void *, size_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*write_fn)(int, const void *, size_t);
typedef int (*fstat_fn)(int, struct stat *);
typedef off_t (*lseek_fn)(int, off_t, int);
struct ops {
	read_fn read;
	pread_fn pread;
	write_fn write;
	fstat_fn fstat;
	lseek_fn lseek;
};

struct bench {
	int plain_fd;     /* regular file not handled by Chell */
	int handled_fd;   /* regular file under CHELL_PATHS (-1 if not given) */
	int null_fd;      /* /dev/null, write-only */
	int pipe_r, pipe_w;
	long pipe_avail;  /* bytes currently in the pipe */
	char *fill_buf;   /* source of the pipe refills */
	size_t fill_len;
	/* paired mode: [0] the names as this program resolves them, [1] libc's own */
	const struct ops *ops[2];
};

static void die(const char *what)
{
	/* stderr through stdio: this is the application side, interposition is fine */
	fprintf(stderr, "chell_bench_overhead: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void fail_call(const char *call, long got)
{
	fprintf(stderr, "chell_bench_overhead: %s returned %ld (errno %d: %s)\n", call, got, errno,
		strerror(errno));
	exit(1);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Fill the pipe as far as it goes. The write end is non-blocking, so this
 * stops at the pipe's capacity (set to the maximum in setup) with EAGAIN.
 */
static void pipe_fill(struct bench *b)
{
	for (;;) {
		ssize_t w = write(b->pipe_w, b->fill_buf, b->fill_len);
		if (w < 0) {
			if (errno == EAGAIN)
				break;
			die("write(pipe)");
		}
		b->pipe_avail += w;
	}
	if (b->pipe_avail <= 0) {
		errno = EIO;
		die("pipe did not accept any data");
	}
}

/*
 * The calls a case makes. Each case body is written once, always inlined, and
 * instantiated twice:
 *   - with `plt_ops` (a constant), the compiler emits ordinary direct calls
 *     through the PLT, exactly as an application calls libc: this is the
 *     measurement compared across processes with and without preload;
 *   - with a run-time table (`b->ops[]`), every call is an indirect call. The
 *     paired mode (--paired) alternates batches through the symbol the program
 *     sees (libchell's when preloaded) and through libc's own function found
 *     with dlopen("libc.so.6"): both arms in one process, on the same
 *     descriptors and pages, both equally indirect, so the difference is the
 *     layer and nothing else (without preload both point to libc: A/A).
 */
static const struct ops plt_ops = {read, pread, write, fstat, lseek};

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE uint64_t body_pipe_read1(struct bench *b, const struct ops *o, long n)
{
	uint64_t total = 0;
	char c;
	while (n > 0) {
		/* Refill only when empty, outside the clock: the fill is not what we measure. */
		if (b->pipe_avail == 0)
			pipe_fill(b);
		long k = n < b->pipe_avail ? n : b->pipe_avail;
		uint64_t t0 = now_ns();
		for (long i = 0; i < k; i++) {
			ssize_t r = o->read(b->pipe_r, &c, 1);
			if (__builtin_expect(r != 1, 0))
				fail_call("read(pipe, 1)", r);
		}
		total += now_ns() - t0;
		b->pipe_avail -= k;
		n -= k;
	}
	return total;
}

ALWAYS_INLINE uint64_t body_read0(const struct ops *o, int fd, long n)
{
	char c;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = o->read(fd, &c, 0);
		if (__builtin_expect(r != 0, 0))
			fail_call("read(file, 0)", r);
	}
	return now_ns() - t0;
}

ALWAYS_INLINE uint64_t body_pread1(const struct ops *o, int fd, long n)
{
	char c;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = o->pread(fd, &c, 1, 0);
		if (__builtin_expect(r != 1, 0))
			fail_call("pread(file, 1, 0)", r);
	}
	return now_ns() - t0;
}

ALWAYS_INLINE uint64_t body_fstat(const struct ops *o, int fd, long n)
{
	struct stat st;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		int r = o->fstat(fd, &st);
		if (__builtin_expect(r != 0, 0))
			fail_call("fstat(file)", r);
	}
	return now_ns() - t0;
}

ALWAYS_INLINE uint64_t body_lseek(const struct ops *o, int fd, long n)
{
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		off_t r = o->lseek(fd, 0, SEEK_CUR);
		if (__builtin_expect(r != 0, 0))
			fail_call("lseek(file, 0, SEEK_CUR)", (long)r);
	}
	return now_ns() - t0;
}

ALWAYS_INLINE uint64_t body_devnull_write1(struct bench *b, const struct ops *o, long n)
{
	const char c = 'x';
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = o->write(b->null_fd, &c, 1);
		if (__builtin_expect(r != 1, 0))
			fail_call("write(/dev/null, 1)", r);
	}
	return now_ns() - t0;
}

/* Each case performs n calls (through ops table `which`, see below) and returns the ns they took. */
typedef uint64_t (*case_fn)(struct bench *b, int which, long n);

/* which < 0: direct PLT calls; otherwise indirect calls through b->ops[which]. */
#define DEFINE_CASE(name, expr)                                                  \
	static uint64_t case_##name(struct bench *b, int which, long n)          \
	{                                                                        \
		if (which < 0) {                                                 \
			const struct ops *o = &plt_ops;                          \
			return expr;                                             \
		} else {                                                         \
			const struct ops *o = b->ops[which];                     \
			return expr;                                             \
		}                                                                \
	}
DEFINE_CASE(pipe_read1, body_pipe_read1(b, o, n))
DEFINE_CASE(file_read0, body_read0(o, b->plain_fd, n))
DEFINE_CASE(file_pread1, body_pread1(o, b->plain_fd, n))
DEFINE_CASE(file_fstat, body_fstat(o, b->plain_fd, n))
DEFINE_CASE(file_lseek, body_lseek(o, b->plain_fd, n))
DEFINE_CASE(devnull_write1, body_devnull_write1(b, o, n))
DEFINE_CASE(handled_read0, body_read0(o, b->handled_fd, n))
DEFINE_CASE(handled_pread1, body_pread1(o, b->handled_fd, n))
DEFINE_CASE(handled_fstat, body_fstat(o, b->handled_fd, n))
DEFINE_CASE(handled_lseek, body_lseek(o, b->handled_fd, n))

static const struct {
	const char *name;
	case_fn fn;
	int handled; /* needs --handled-file */
	const char *desc;
} cases[] = {
	{"pipe_read1", case_pipe_read1, 0, "read 1 byte from a prefilled pipe"},
	{"file_read0", case_file_read0, 0, "read 0 bytes, unhandled regular file"},
	{"file_pread1", case_file_pread1, 0, "pread 1 byte, unhandled regular file"},
	{"file_fstat", case_file_fstat, 0, "fstat, unhandled regular file"},
	{"file_lseek", case_file_lseek, 0, "lseek(0, SEEK_CUR), unhandled regular file"},
	{"devnull_write1", case_devnull_write1, 0, "write 1 byte to /dev/null"},
	{"handled_read0", case_handled_read0, 1, "read 0 bytes, file routed to the posix handler"},
	{"handled_pread1", case_handled_pread1, 1, "pread 1 byte, file routed to the posix handler"},
	{"handled_fstat", case_handled_fstat, 1, "fstat, file routed to the posix handler"},
	{"handled_lseek", case_handled_lseek, 1, "lseek(0, SEEK_CUR), file routed to the posix handler"},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median of v[0..n), n >= 1 (sorts a copy). */
static double median(const double *v, long n)
{
	double *s = malloc(sizeof(double) * (size_t)n);
	if (!s)
		die("malloc");
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_double);
	double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	free(s);
	return m;
}

static double min_of(const double *v, long n)
{
	double m = v[0];
	for (long i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

static void print_series(const char *key, const double *v, long n)
{
	printf("\"%s\": [", key);
	for (long i = 0; i < n; i++)
		printf("%s%.3f", i ? ", " : "", v[i]);
	printf("]");
}

/* Which loaded object provides `name` to this program (what its PLT will bind to). */
static void print_provider(const char *name, int last)
{
	void *p = dlsym(RTLD_DEFAULT, name);
	Dl_info info;
	const char *obj = "?";
	if (p && dladdr(p, &info) && info.dli_fname)
		obj = info.dli_fname;
	printf("    \"%s\": \"%s\"%s\n", name, obj, last ? "" : ",");
}

static int open_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path);
	/* pread of 1 byte at 0 must succeed: the file needs at least one byte. */
	char c;
	if (pread(fd, &c, 1, 0) != 1) {
		errno = EINVAL;
		die("benchmark file is empty");
	}
	return fd;
}

static void usage(FILE *to)
{
	fprintf(to,
		"usage: chell_bench_overhead --plain-file F [--handled-file H] [--batch N] [--batches K]\n"
		"                            [--warmup N] [--cpu C] [--case NAME]... [--paired]\n"
		"                            [--calls N] [--list]\n");
}

static long parse_long(const char *opt, const char *s, long min)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < min) {
		fprintf(stderr, "chell_bench_overhead: bad value '%s' for %s\n", s, opt);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	const char *plain = NULL, *handled = NULL;
	long batch = 1000000, batches = 5, warmup = -1, cpu = -1, calls = -1;
	int selected[NCASES] = {0}, any_selected = 0, paired = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--list")) {
			for (size_t k = 0; k < NCASES; k++)
				printf("%s\t%s\n", cases[k].name, cases[k].desc);
			return 0;
		}
		if (!strcmp(a, "--paired")) {
			paired = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			usage(stderr);
			return 2;
		}
		const char *v = argv[++i];
		if (!strcmp(a, "--plain-file"))
			plain = v;
		else if (!strcmp(a, "--handled-file"))
			handled = v;
		else if (!strcmp(a, "--batch"))
			batch = parse_long(a, v, 1);
		else if (!strcmp(a, "--batches"))
			batches = parse_long(a, v, 1);
		else if (!strcmp(a, "--warmup"))
			warmup = parse_long(a, v, 0);
		else if (!strcmp(a, "--cpu"))
			cpu = parse_long(a, v, 0);
		else if (!strcmp(a, "--calls"))
			calls = parse_long(a, v, 0);
		else if (!strcmp(a, "--case")) {
			size_t k;
			for (k = 0; k < NCASES; k++)
				if (!strcmp(cases[k].name, v))
					break;
			if (k == NCASES) {
				fprintf(stderr, "chell_bench_overhead: unknown case '%s' (see --list)\n", v);
				return 2;
			}
			selected[k] = any_selected = 1;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!plain) {
		usage(stderr);
		return 2;
	}
	if (warmup < 0)
		warmup = batch / 10;

	/* One CPU: no migrations between batches, and the other core keeps the noise. */
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((int)cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set) != 0)
			die("sched_setaffinity");
	}

	struct bench b = {.handled_fd = -1};
	b.plain_fd = open_file(plain);
	if (handled)
		b.handled_fd = open_file(handled);
	b.null_fd = open("/dev/null", O_WRONLY);
	if (b.null_fd < 0)
		die("/dev/null");
	int p[2];
	if (pipe2(p, 0) != 0)
		die("pipe2");
	b.pipe_r = p[0];
	b.pipe_w = p[1];
	/* Only the write end is non-blocking: fills stop at capacity, reads stay ordinary. */
	if (fcntl(b.pipe_w, F_SETFL, O_NONBLOCK) != 0)
		die("fcntl(F_SETFL)");
	/* A large pipe means fewer refills (each one a pause in the timed loop). */
	int cap = fcntl(b.pipe_w, F_SETPIPE_SZ, 1 << 20);
	if (cap < 0)
		cap = fcntl(b.pipe_w, F_GETPIPE_SZ);
	if (cap <= 0)
		die("F_GETPIPE_SZ");
	b.fill_len = 65536;
	b.fill_buf = malloc(b.fill_len);
	if (!b.fill_buf)
		die("malloc");
	memset(b.fill_buf, 'p', b.fill_len);

	/*
	 * Paired mode: the functions this program's calls bind to (libchell's when
	 * preloaded) against libc's own, looked up in libc.so.6 itself.
	 */
	struct ops sym_ops, libc_ops;
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	if (!libc) {
		errno = ENOENT;
		die("dlopen(libc.so.6)");
	}
	sym_ops.read = (read_fn)dlsym(RTLD_DEFAULT, "read");
	sym_ops.pread = (pread_fn)dlsym(RTLD_DEFAULT, "pread");
	sym_ops.write = (write_fn)dlsym(RTLD_DEFAULT, "write");
	sym_ops.fstat = (fstat_fn)dlsym(RTLD_DEFAULT, "fstat");
	sym_ops.lseek = (lseek_fn)dlsym(RTLD_DEFAULT, "lseek");
	libc_ops.read = (read_fn)dlsym(libc, "read");
	libc_ops.pread = (pread_fn)dlsym(libc, "pread");
	libc_ops.write = (write_fn)dlsym(libc, "write");
	libc_ops.fstat = (fstat_fn)dlsym(libc, "fstat");
	libc_ops.lseek = (lseek_fn)dlsym(libc, "lseek");
	if (!sym_ops.read || !sym_ops.pread || !sym_ops.write || !sym_ops.fstat || !sym_ops.lseek ||
	    !libc_ops.read || !libc_ops.pread || !libc_ops.write || !libc_ops.fstat || !libc_ops.lseek) {
		errno = ENOENT;
		die("dlsym");
	}
	b.ops[0] = &sym_ops;
	b.ops[1] = &libc_ops;

	double *per_batch = malloc(sizeof(double) * (size_t)batches * 4);
	if (!per_batch)
		die("malloc");
	double *pair_sym = per_batch + batches, *pair_libc = pair_sym + batches,
	       *pair_diff = pair_libc + batches;

	printf("{\n  \"tool\": \"chell_bench_overhead\",\n");
	printf("  \"mode\": \"%s\",\n", calls >= 0 ? "count" : "timing");
	printf("  \"ld_preload\": \"%s\",\n", getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
	printf("  \"providers\": {\n");
	static const char *const names[] = {"read", "pread", "write", "fstat", "lseek"};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		print_provider(names[k], k + 1 == sizeof(names) / sizeof(names[0]));
	printf("  },\n");
	printf("  \"cpu\": %ld,\n  \"pipe_capacity\": %d,\n  \"paired\": %s,\n", cpu, cap,
	       paired ? "true" : "false");
	if (calls >= 0)
		printf("  \"calls\": %ld,\n", calls);
	else
		printf("  \"batch\": %ld,\n  \"batches\": %ld,\n  \"warmup\": %ld,\n", batch, batches, warmup);
	printf("  \"cases\": [");
	fflush(stdout);

	int first = 1;
	for (size_t k = 0; k < NCASES; k++) {
		if (any_selected && !selected[k])
			continue;
		if (cases[k].handled && b.handled_fd < 0)
			continue;
		printf("%s\n    {\"name\": \"%s\", \"desc\": \"%s\"", first ? "" : ",", cases[k].name,
		       cases[k].desc);
		first = 0;
		if (calls >= 0) {
			/* Instruction counting: exactly `calls` calls, nothing else in the loop. */
			uint64_t ns = cases[k].fn(&b, -1, calls);
			printf(", \"calls\": %ld, \"ns\": %llu}", calls, (unsigned long long)ns);
		} else {
			/* Warm caches, branch predictors and the kernel paths before the clock counts. */
			cases[k].fn(&b, -1, warmup);
			for (long j = 0; j < batches; j++)
				per_batch[j] = (double)cases[k].fn(&b, -1, batch) / (double)batch;
			printf(", ");
			print_series("ns_per_call", per_batch, batches);
			printf(", \"median\": %.3f, \"min\": %.3f", median(per_batch, batches),
			       min_of(per_batch, batches));
			if (paired) {
				/*
				 * Alternate batches through both tables, swapping which goes
				 * first each time, so slow drifts of the machine cancel.
				 */
				cases[k].fn(&b, 0, warmup);
				cases[k].fn(&b, 1, warmup);
				for (long j = 0; j < batches; j++) {
					int first_arm = (int)(j & 1);
					double t[2];
					t[first_arm] = (double)cases[k].fn(&b, first_arm, batch) / (double)batch;
					t[!first_arm] = (double)cases[k].fn(&b, !first_arm, batch) / (double)batch;
					pair_sym[j] = t[0];
					pair_libc[j] = t[1];
					pair_diff[j] = t[0] - t[1];
				}
				printf(", \"paired\": {");
				print_series("via_symbol", pair_sym, batches);
				printf(", ");
				print_series("via_libc", pair_libc, batches);
				printf(", \"diff_median\": %.3f, \"symbol_median\": %.3f, \"libc_median\": %.3f}",
				       median(pair_diff, batches), median(pair_sym, batches),
				       median(pair_libc, batches));
			}
			printf("}");
		}
		fflush(stdout);
	}
	printf("\n  ]\n}\n");
	free(per_batch);
	free(b.fill_buf);
	return 0;
}
