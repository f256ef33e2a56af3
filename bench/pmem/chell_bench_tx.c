/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_tx: commit latency of one-range undo-logged transactions,
 * Chell's (include/chell/pmem.h) against libpmemobj's, in one process and
 * one run, on files in the same (tmpfs) directory.
 *
 * One transaction = begin, snapshot [off, off+size) (undo entry persisted),
 * overwrite that range in place, commit (range persisted, finish record
 * persisted). Offsets walk a 1 MiB window in size-aligned steps so both
 * arms touch the same amount of distinct memory.
 *
 * Timing: a batch of `--batch` transactions is timed as a whole (the clock
 * costs ~20 ns, as much as a small flush); ns per commit = batch time /
 * batch. `--reps` batches per arm and size, the arms alternating batch by
 * batch (the order flipping each round) so drift on a shared VM hits both
 * alike. Prints one JSON object with every batch's value; the driver
 * (scripts/bench_pmem.py) takes medians and ratios.
 *
 * libpmemobj on tmpfs: pmem_is_pmem() is false there, so libpmem would
 * msync() on every persist. PMEM_IS_PMEM_FORCE=1 makes it treat the mapping
 * as persistent memory and use cache-line flushes plus a fence, which is
 * what Chell does; libpmem reads the variable in its constructor, so this
 * program re-executes itself with it set rather than calling setenv().
 * Chell's arm likewise maps the region file itself and opens it with
 * chell_region_open_mem and the default ops (cache-line flushes + fence):
 * chell_region_open would see a non-DAX file and msync instead.
 *
 *   chell_bench_tx [--dir DIR] [--sizes 64,256,4096] [--batch N] [--reps N]
 *                  [--arms chell,pmemobj]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chell/pmem.h"

#ifdef CHELL_HAVE_PMEMOBJ
#include <libpmemobj.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_tx [--dir DIR] [--sizes 64,256,4096] [--batch N] [--reps N]\n"
	"                      [--arms chell,pmemobj]\n"
	"\n"
	"Transaction latency of the persistence core against libpmemobj on the same\n"
	"medium (DIR, default /dev/shm); one JSON object on stdout.\n";
#endif

#define WINDOW (1u << 20)          /* bytes of heap the offsets walk */
#define HEAP (WINDOW + 65536)      /* heap size of both pools */
#define MAX_SIZES 8
#define MAX_REPS 1000

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "chell_bench_tx: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

/* The bytes written into the range: changes every transaction, so no
 * store is ever a no-op and the compiler cannot hoist it. */
static uint8_t src[65536];

/* ------------------------------------------------------------ chell */

struct chell_arm {
	struct chell_region *r;
	uint8_t *heap;
	void *map;
	size_t len;
	char path[4096];
};

static void chell_setup(struct chell_arm *a, const char *dir)
{
	char err[512] = "";
	snprintf(a->path, sizeof a->path, "%s/chell_bench_tx.%d.chell", dir, (int)getpid());
	int fd = open(a->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die("create chell region file", strerror(errno));
	close(fd);
	struct chell_region_layout lay = {.journals = 1, .journal_entries = 1024, .heap_size = HEAP};
	int rc = chell_region_create(a->path, &lay, &a->r, err, sizeof err);
	if (rc < 0)
		die("chell_region_create", err[0] ? err : strerror(-rc));
	chell_region_close(a->r);
	/* The counterpart of PMEM_IS_PMEM_FORCE: map the file ourselves and
	 * open it with the default (cache-flush) persistence, since a file
	 * region on tmpfs, which is not DAX, would msync on every drain. */
	fd = open(a->path, O_RDWR);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		die("reopen chell region file", strerror(errno));
	a->len = (size_t)st.st_size;
	a->map = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (a->map == MAP_FAILED)
		die("mmap chell region file", strerror(errno));
	rc = chell_region_open_mem(a->map, a->len, NULL, &a->r, err, sizeof err);
	if (rc < 0)
		die("chell_region_open_mem", err[0] ? err : strerror(-rc));
	uint64_t size = 0;
	a->heap = chell_region_heap(a->r, &size);
	if (!a->heap || size < HEAP)
		die("chell_region_heap", "heap smaller than requested");
	memset(a->heap, 0, HEAP); /* fault every page in before timing */
}

static void chell_batch(struct chell_arm *a, size_t size, unsigned n, uint64_t *off)
{
	for (unsigned i = 0; i < n; i++) {
		struct chell_tx *tx;
		if (chell_tx_begin(a->r, 0, &tx) < 0)
			die("chell_tx_begin", NULL);
		if (chell_tx_add_range(tx, *off, size) < 0)
			die("chell_tx_add_range", NULL);
		src[0]++;
		memcpy(a->heap + *off, src, size);
		if (chell_tx_commit(tx) < 0)
			die("chell_tx_commit", NULL);
		*off = (*off + size) % WINDOW;
	}
}

static void chell_teardown(struct chell_arm *a)
{
	chell_region_close(a->r);
	munmap(a->map, a->len);
	unlink(a->path);
}

/* ------------------------------------------------------------ libpmemobj */

#ifdef CHELL_HAVE_PMEMOBJ
struct pobj_arm {
	PMEMobjpool *pop;
	PMEMoid root;
	uint8_t *heap;
	char path[4096];
};

static void pobj_setup(struct pobj_arm *a, const char *dir)
{
	snprintf(a->path, sizeof a->path, "%s/chell_bench_tx.%d.pmemobj", dir, (int)getpid());
	unlink(a->path);
	/* The pool holds the root object, libpmemobj's metadata and lanes,
	 * and the undo-log buffers a transaction allocates from the heap: at
	 * 8 MiB (PMEMOBJ_MIN_POOL) a 4 KB snapshot fails with ENOMEM. */
	size_t pool = 32 * (size_t)HEAP;
	if (pool < PMEMOBJ_MIN_POOL)
		pool = PMEMOBJ_MIN_POOL;
	a->pop = pmemobj_create(a->path, "chell_bench_tx", pool, 0600);
	if (!a->pop)
		die("pmemobj_create", pmemobj_errormsg());
	a->root = pmemobj_root(a->pop, HEAP);
	if (OID_IS_NULL(a->root))
		die("pmemobj_root", pmemobj_errormsg());
	a->heap = pmemobj_direct(a->root);
	memset(a->heap, 0, HEAP);
}

/* One transaction in its own function: TX_BEGIN is a setjmp, so the
 * caller's loop variables stay out of its reach (and -Wclobbered quiet). */
static __attribute__((noinline)) int pobj_tx(struct pobj_arm *a, uint64_t off, size_t size)
{
	volatile int failed = 0;
	TX_BEGIN(a->pop) {
		pmemobj_tx_add_range(a->root, off, size);
		src[0]++;
		memcpy(a->heap + off, src, size);
	} TX_ONABORT {
		failed = 1;
	} TX_END
	return failed;
}

static void pobj_batch(struct pobj_arm *a, size_t size, unsigned n, uint64_t *off)
{
	for (unsigned i = 0; i < n; i++) {
		if (pobj_tx(a, *off, size))
			die("libpmemobj transaction aborted", pmemobj_errormsg());
		*off = (*off + size) % WINDOW;
	}
}

static void pobj_teardown(struct pobj_arm *a)
{
	pmemobj_close(a->pop);
	unlink(a->path);
}
#endif

/* ------------------------------------------------------------ main */

static int parse_sizes(const char *s, size_t *out)
{
	int n = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t && n < MAX_SIZES; t = strtok_r(NULL, ",", &save)) {
		unsigned long v = strtoul(t, NULL, 10);
		if (v == 0 || v > sizeof src || v > WINDOW)
			die("--sizes", "each size must be 1..65536");
		out[n++] = v;
	}
	free(copy);
	return n;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *dir = "/dev/shm";
	const char *sizes_arg = "64,256,4096", *arms = "chell,pmemobj";
	unsigned batch = 2000, reps = 15;
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(argv[i], "--dir") && v)
			dir = v, i++;
		else if (!strcmp(argv[i], "--sizes") && v)
			sizes_arg = v, i++;
		else if (!strcmp(argv[i], "--batch") && v)
			batch = (unsigned)strtoul(v, NULL, 10), i++;
		else if (!strcmp(argv[i], "--reps") && v)
			reps = (unsigned)strtoul(v, NULL, 10), i++;
		else if (!strcmp(argv[i], "--arms") && v)
			arms = v, i++;
		else {
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (batch == 0 || reps == 0 || reps > MAX_REPS)
		die("--batch and --reps", "must be positive (reps at most 1000)");
	int want_pobj = strstr(arms, "pmemobj") != NULL, want_chell = strstr(arms, "chell") != NULL;
#ifdef CHELL_HAVE_PMEMOBJ
	if (want_pobj && !getenv("PMEM_IS_PMEM_FORCE")) {
		setenv("PMEM_IS_PMEM_FORCE", "1", 1);
		execv("/proc/self/exe", argv);
		die("re-exec with PMEM_IS_PMEM_FORCE=1", strerror(errno));
	}
#else
	want_pobj = 0;
#endif
	size_t sizes[MAX_SIZES];
	int nsizes = parse_sizes(sizes_arg, sizes);
	for (size_t i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 7);

	struct chell_arm ca;
	if (want_chell)
		chell_setup(&ca, dir);
#ifdef CHELL_HAVE_PMEMOBJ
	struct pobj_arm pa;
	if (want_pobj)
		pobj_setup(&pa, dir);
#endif
	static double ns[2][MAX_SIZES][MAX_REPS];
	uint64_t off[2] = {0, 0};
	for (int s = 0; s < nsizes; s++) {
		/* Warm-up batch per arm: page faults, the journals' first use. */
		if (want_chell)
			chell_batch(&ca, sizes[s], batch / 4 + 1, &off[0]);
#ifdef CHELL_HAVE_PMEMOBJ
		if (want_pobj)
			pobj_batch(&pa, sizes[s], batch / 4 + 1, &off[1]);
#endif
		for (unsigned r = 0; r < reps; r++) {
			for (int k = 0; k < 2; k++) {
				int arm = (int)((r + (unsigned)k) & 1); /* alternate who goes first */
				uint64_t t0 = now_ns();
				if (arm == 0 && want_chell)
					chell_batch(&ca, sizes[s], batch, &off[0]);
#ifdef CHELL_HAVE_PMEMOBJ
				else if (arm == 1 && want_pobj)
					pobj_batch(&pa, sizes[s], batch, &off[1]);
#endif
				else
					continue;
				ns[arm][s][r] = (double)(now_ns() - t0) / batch;
			}
		}
	}

	printf("{\"persist_kind\": \"%s\", \"dir\": \"%s\", \"batch\": %u, \"reps\": %u, "
	       "\"pmemobj_built\": %s, \"pmem_is_pmem_force\": \"%s\", \"results\": [",
	       chell_persist_kind(), dir, batch, reps,
#ifdef CHELL_HAVE_PMEMOBJ
	       "true",
#else
	       "false",
#endif
	       getenv("PMEM_IS_PMEM_FORCE") ? getenv("PMEM_IS_PMEM_FORCE") : "");
	int first = 1;
	static const char *names[2] = {"chell", "pmemobj"};
	for (int arm = 0; arm < 2; arm++) {
		if ((arm == 0 && !want_chell) || (arm == 1 && !want_pobj))
			continue;
		for (int s = 0; s < nsizes; s++) {
			printf("%s\n  {\"arm\": \"%s\", \"size\": %zu, \"ns_per_commit\": [", first ? "" : ",",
			       names[arm], sizes[s]);
			for (unsigned r = 0; r < reps; r++)
				printf("%s%.1f", r ? ", " : "", ns[arm][s][r]);
			printf("]}");
			first = 0;
		}
	}
	printf("\n]}\n");

	if (want_chell)
		chell_teardown(&ca);
#ifdef CHELL_HAVE_PMEMOBJ
	if (want_pobj)
		pobj_teardown(&pa);
#endif
	return 0;
}
