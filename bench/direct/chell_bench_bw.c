/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_bw - aggregate bandwidth of T threads doing 4 KB (--bs)
 * pread/pwrite on one preallocated file, xdd-style: every thread opens the
 * file itself, and picks read or write per operation with probability
 * --read-pct. Random: uniform block offsets over the whole file. Sequential:
 * thread i streams through its own 1/T of the file, wrapping around.
 *
 * The main thread first reads the whole file once (1 MB preads, reported as
 * prefault_ms) so a handler's one-off mapping cost is not timed.
 * Run for --seconds after all threads are ready; prints one JSON object with
 * the operation and byte counts and GB/s (10^9 bytes/s). --mmap maps the file
 * once (MAP_SHARED|MAP_POPULATE) and memcpy's instead: the physical limit.
 * Threads are pinned round-robin over the online CPUs (--no-pin to disable).
 *
 *   chell_bench_bw --file F --threads 2 --pattern rand --read-pct 50 --seconds 1
 */
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_bw --file F --threads 2 --pattern rand --read-pct 50 --seconds 1\n"
	"\n"
	"chell_bench_bw - aggregate bandwidth of T threads doing 4 KB (--bs)\n"
	"pread/pwrite on one preallocated file, xdd-style: every thread opens the\n"
	"file itself, and picks read or write per operation with probability --read-\n"
	"pct. Random: uniform block offsets over the whole file. Sequential: thread i\n"
	"streams through its own 1/T of the file, wrapping around.\n"
	"(details: the comment at the top of chell_bench_bw.c)\n";

struct shared {
	const char *file;
	char *map;
	size_t fsz, bs;
	int rnd, read_pct, pin, ncpu;
	atomic_int ready, go, stop;
};

struct worker {
	struct shared *sh;
	int id, nthreads;
	pthread_t tid;
	uint64_t reads, writes;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	if (sh->pin)
		bu_pin(w->id % sh->ncpu);
	int fd = -1;
	if (!sh->map) {
		fd = open(sh->file, O_RDWR);
		if (fd < 0)
			bu_die(sh->file);
	}
	char *buf;
	if (posix_memalign((void **)&buf, 4096, sh->bs))
		bu_fail("out of memory");
	memset(buf, w->id + 1, sh->bs);
	uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(w->id + 1);
	uint64_t nblocks = sh->fsz / sh->bs;
	uint64_t per = nblocks / (uint64_t)w->nthreads;
	uint64_t first = per * (uint64_t)w->id, blk = 0;
	uint64_t reads = 0, writes = 0;

	atomic_fetch_add(&sh->ready, 1);
	while (!atomic_load_explicit(&sh->go, memory_order_acquire))
		;
	while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
		/* 32 operations between looks at the stop flag. */
		for (int k = 0; k < 32; k++) {
			uint64_t b;
			if (sh->rnd) {
				b = bu_below(&rng, nblocks);
			} else {
				b = first + blk;
				if (++blk == per)
					blk = 0;
			}
			off_t off = (off_t)(b * sh->bs);
			int rd = (int)bu_below(&rng, 100) < sh->read_pct;
			if (sh->map) {
				if (rd)
					memcpy(buf, sh->map + off, sh->bs);
				else
					memcpy(sh->map + off, buf, sh->bs);
				bu_clobber();
			} else if (rd) {
				if (pread(fd, buf, sh->bs, off) != (ssize_t)sh->bs)
					bu_die("pread");
			} else {
				if (pwrite(fd, buf, sh->bs, off) != (ssize_t)sh->bs)
					bu_die("pwrite");
			}
			reads += (uint64_t)rd;
			writes += (uint64_t)!rd;
		}
	}
	w->reads = reads;
	w->writes = writes;
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	struct shared sh = { .bs = 4096, .rnd = 1, .read_pct = 100, .pin = 1 };
	int nthreads = 1, mmap_mode = 0;
	double seconds = 1.0;
	static const struct option lo[] = {
		{ "file", 1, 0, 'f' }, { "threads", 1, 0, 't' }, { "bs", 1, 0, 'b' },
		{ "pattern", 1, 0, 'p' }, { "read-pct", 1, 0, 'r' }, { "seconds", 1, 0, 's' },
		{ "mmap", 0, 0, 'm' }, { "no-pin", 0, 0, 'n' }, { 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'f': sh.file = optarg; break;
		case 't': nthreads = atoi(optarg); break;
		case 'b': sh.bs = bu_parse_size(optarg); break;
		case 'p':
			if (strcmp(optarg, "rand") && strcmp(optarg, "seq"))
				bu_fail("--pattern rand|seq");
			sh.rnd = !strcmp(optarg, "rand");
			break;
		case 'r': sh.read_pct = atoi(optarg); break;
		case 's': seconds = atof(optarg); break;
		case 'm': mmap_mode = 1; break;
		case 'n': sh.pin = 0; break;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!sh.file || nthreads < 1 || nthreads > 256 || sh.bs == 0 ||
	    sh.read_pct < 0 || sh.read_pct > 100 || seconds <= 0) {
		fprintf(stderr, "chell_bench_bw: bad arguments (--file is required)\n");
		return 2;
	}
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	sh.ncpu = ncpu > 0 ? (int)ncpu : 1;

	int fd = open(sh.file, O_RDWR);
	if (fd < 0)
		bu_die(sh.file);
	struct stat st;
	if (fstat(fd, &st) != 0)
		bu_die("fstat");
	sh.fsz = (size_t)st.st_size;
	if (sh.fsz / sh.bs < (size_t)nthreads)
		bu_fail("file too small");
	if (mmap_mode) {
		sh.map = mmap(NULL, sh.fsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
		if (sh.map == MAP_FAILED)
			bu_die("mmap");
	}
	/* Warm-up: touch (and, under direct, map) the whole file; see bu_prefault. */
	uint64_t prefault_ns = bu_prefault(fd, sh.map, sh.fsz);

	struct worker *w = calloc((size_t)nthreads, sizeof *w);
	if (!w)
		bu_fail("out of memory");
	for (int i = 0; i < nthreads; i++) {
		w[i] = (struct worker){ .sh = &sh, .id = i, .nthreads = nthreads };
		if (pthread_create(&w[i].tid, NULL, work, &w[i]) != 0)
			bu_fail("pthread_create");
	}
	while (atomic_load(&sh.ready) < nthreads)
		usleep(100);
	uint64_t t0 = bu_now_ns();
	atomic_store_explicit(&sh.go, 1, memory_order_release);
	struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	atomic_store(&sh.stop, 1);
	uint64_t reads = 0, writes = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(w[i].tid, NULL);
		reads += w[i].reads;
		writes += w[i].writes;
	}
	double el = (double)(bu_now_ns() - t0) / 1e9;
	/* The main thread's descriptor is still open: a handler's mapping, if
	 * any, is still there. */
	int maps = bu_maps_of(sh.file);
	double bytes = (double)(reads + writes) * (double)sh.bs;
	printf("{\"program\":\"chell_bench_bw\",\"mode\":\"%s\",\"threads\":%d,\"bs\":%zu,"
	       "\"pattern\":\"%s\",\"read_pct\":%d,\"seconds\":%.4f,\"reads\":%llu,\"writes\":%llu,"
	       "\"gbps\":%.4f,\"prefault_ms\":%.3f,\"maps_of_file\":%d,\"provider\":{\"pread\":\"%s\",\"pwrite\":\"%s\"}}\n",
	       mmap_mode ? "mmap" : "syscall", nthreads, sh.bs, sh.rnd ? "rand" : "seq",
	       sh.read_pct, el, (unsigned long long)reads, (unsigned long long)writes,
	       bytes / el / 1e9, (double)prefault_ns / 1e6, maps, bu_provider("pread"), bu_provider("pwrite"));
	free(w);
	close(fd);
	return 0;
}
