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

struct bench {
	int plain_fd;     /* regular file not handled by Chell */
	int handled_fd;   /* regular file under CHELL_PATHS (-1 if not given) */
	int null_fd;      /* /dev/null, write-only */
	int pipe_r, pipe_w;
	long pipe_avail;  /* bytes currently in the pipe */
	char *fill_buf;   /* source of the pipe refills */
	size_t fill_len;
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

/* Each case performs n calls and returns the nanoseconds they took. */
typedef uint64_t (*case_fn)(struct bench *b, long n);

static uint64_t case_pipe_read1(struct bench *b, long n)
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
			ssize_t r = read(b->pipe_r, &c, 1);
			if (__builtin_expect(r != 1, 0))
				fail_call("read(pipe, 1)", r);
		}
		total += now_ns() - t0;
		b->pipe_avail -= k;
		n -= k;
	}
	return total;
}

static uint64_t do_read0(int fd, long n)
{
	char c;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = read(fd, &c, 0);
		if (__builtin_expect(r != 0, 0))
			fail_call("read(file, 0)", r);
	}
	return now_ns() - t0;
}

static uint64_t do_pread1(int fd, long n)
{
	char c;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = pread(fd, &c, 1, 0);
		if (__builtin_expect(r != 1, 0))
			fail_call("pread(file, 1, 0)", r);
	}
	return now_ns() - t0;
}

static uint64_t do_fstat(int fd, long n)
{
	struct stat st;
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		int r = fstat(fd, &st);
		if (__builtin_expect(r != 0, 0))
			fail_call("fstat(file)", r);
	}
	return now_ns() - t0;
}

static uint64_t do_lseek(int fd, long n)
{
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		off_t r = lseek(fd, 0, SEEK_CUR);
		if (__builtin_expect(r != 0, 0))
			fail_call("lseek(file, 0, SEEK_CUR)", (long)r);
	}
	return now_ns() - t0;
}

static uint64_t case_file_read0(struct bench *b, long n) { return do_read0(b->plain_fd, n); }
static uint64_t case_file_pread1(struct bench *b, long n) { return do_pread1(b->plain_fd, n); }
static uint64_t case_file_fstat(struct bench *b, long n) { return do_fstat(b->plain_fd, n); }
static uint64_t case_file_lseek(struct bench *b, long n) { return do_lseek(b->plain_fd, n); }
static uint64_t case_handled_read0(struct bench *b, long n) { return do_read0(b->handled_fd, n); }
static uint64_t case_handled_pread1(struct bench *b, long n) { return do_pread1(b->handled_fd, n); }
static uint64_t case_handled_fstat(struct bench *b, long n) { return do_fstat(b->handled_fd, n); }
static uint64_t case_handled_lseek(struct bench *b, long n) { return do_lseek(b->handled_fd, n); }

static uint64_t case_devnull_write1(struct bench *b, long n)
{
	const char c = 'x';
	uint64_t t0 = now_ns();
	for (long i = 0; i < n; i++) {
		ssize_t r = write(b->null_fd, &c, 1);
		if (__builtin_expect(r != 1, 0))
			fail_call("write(/dev/null, 1)", r);
	}
	return now_ns() - t0;
}

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
		"                            [--warmup N] [--cpu C] [--case NAME]... [--calls N] [--list]\n");
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
	int selected[NCASES] = {0}, any_selected = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--list")) {
			for (size_t k = 0; k < NCASES; k++)
				printf("%s\t%s\n", cases[k].name, cases[k].desc);
			return 0;
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

	double *per_batch = malloc(sizeof(double) * (size_t)batches);
	if (!per_batch)
		die("malloc");

	printf("{\n  \"tool\": \"chell_bench_overhead\",\n");
	printf("  \"mode\": \"%s\",\n", calls >= 0 ? "count" : "timing");
	printf("  \"ld_preload\": \"%s\",\n", getenv("LD_PRELOAD") ? getenv("LD_PRELOAD") : "");
	printf("  \"providers\": {\n");
	static const char *const names[] = {"read", "pread", "write", "fstat", "lseek"};
	for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
		print_provider(names[k], k + 1 == sizeof(names) / sizeof(names[0]));
	printf("  },\n");
	printf("  \"cpu\": %ld,\n  \"pipe_capacity\": %d,\n", cpu, cap);
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
			uint64_t ns = cases[k].fn(&b, calls);
			printf(", \"calls\": %ld, \"ns\": %llu}", calls, (unsigned long long)ns);
		} else {
			/* Warm caches, branch predictors and the kernel paths before the clock counts. */
			cases[k].fn(&b, warmup);
			for (long j = 0; j < batches; j++)
				per_batch[j] = (double)cases[k].fn(&b, batch) / (double)batch;
			printf(", \"ns_per_call\": [");
			for (long j = 0; j < batches; j++)
				printf("%s%.3f", j ? ", " : "", per_batch[j]);
			qsort(per_batch, (size_t)batches, sizeof(double), cmp_double);
			double med = batches % 2 ? per_batch[batches / 2]
						 : (per_batch[batches / 2 - 1] + per_batch[batches / 2]) / 2;
			printf("], \"median\": %.3f, \"min\": %.3f}", med, per_batch[0]);
		}
		fflush(stdout);
	}
	printf("\n  ]\n}\n");
	free(per_batch);
	free(b.fill_buf);
	return 0;
}
