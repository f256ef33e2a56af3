/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_lat - latency per read/write/append operation, in ns/op.
 *
 * The same binary is run three ways by scripts/bench_direct.py:
 *   kernel  plain pread/pwrite/write on a file on tmpfs, no Chell;
 *   chell   the same calls under `chell run --mode direct --path DIR`;
 *   memcpy  (--mmap) the binary maps the file itself (MAP_SHARED |
 *           MAP_POPULATE) and memcpy's: the physical limit a user-space
 *           handler can approach, with no call layer at all.
 *
 * Cases: for each size, read and write at random or sequential offsets of a
 * preallocated file (--file), and appends to a second file (--append-file)
 * that every batch starts empty (the kernel and Chell both allocate pages as
 * it grows). Before any case the whole file is read once with 1 MB preads
 * (memcpy's through the mapping with --mmap; timed and reported as
 * prefault_ms; --no-prefault skips it). Each case is calibrated to about --batch-ms per batch, warmed
 * up with one untimed batch, then timed over --batches batches; the result
 * per batch is ns/op and the case's value is the median batch.
 *
 * Prints one JSON object on stdout.
 *
 *   chell_bench_lat --prepare 1g --file F            # create F (no Chell!)
 *   chell_bench_lat --file F --append-file A [--mmap] [--cpu N]
 *       [--sizes 64,512,4k,64k,1m] [--ops read,write,sread,swrite,append,extend]
 *       [--patterns rand,seq] [--batch-ms 20] [--batches 7] [--append-cap 64m] [--no-prefault]
 */
#include <fcntl.h>
#include <getopt.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_lat --prepare 1g --file F            # create F (no Chell!)\n"
	"  chell_bench_lat --file F --append-file A [--mmap] [--cpu N]\n"
	"      [--sizes 64,512,4k,64k,1m] [--ops read,write,sread,swrite,append,extend]\n"
	"      [--patterns rand,seq] [--batch-ms 20] [--batches 7] [--append-cap 64m] [--no-prefault]\n"
	"\n"
	"chell_bench_lat - latency per read/write/append operation, in ns/op.\n"
	"(details: the comment at the top of chell_bench_lat.c)\n";

/* read/write: pread/pwrite. sread/swrite: read()/write() at the file
 * position, moved there with lseek(SEEK_SET) first when it is not already
 * there (what fio's sync engine does). append: write() on an O_APPEND
 * descriptor; extend: write() at the end of a file that is growing, on a
 * descriptor without O_APPEND. */
enum { OP_READ, OP_WRITE, OP_SREAD, OP_SWRITE, OP_APPEND, OP_EXTEND, OP_NOPS };
static const char *const op_names[] = { "read", "write", "sread", "swrite", "append", "extend" };

struct ctx {
	int fd, afd, efd;       /* efd: the append file again, without O_APPEND */
	char *map, *amap;     /* non-NULL in --mmap mode */
	size_t fsz, cap;      /* file size; append bytes per batch at most */
	char *dst, *src;      /* user buffers, max size bytes each */
	uint64_t rng, seq, aoff, pos; /* pos: the descriptor's offset (sread/swrite) */
};

static inline uint64_t next_off(struct ctx *c, int rnd, size_t bs, uint64_t nblocks)
{
	if (rnd)
		return bu_below(&c->rng, nblocks) * bs;
	uint64_t off = c->seq;
	c->seq += bs;
	if (c->seq + bs > c->fsz)
		c->seq = 0;
	return off;
}

/* n operations of one case. The mode tests sit outside the loops so each
 * loop body is the call (or memcpy), the offset arithmetic and a check. */
static void run_ops(struct ctx *c, int op, int rnd, size_t bs, uint64_t n)
{
	uint64_t nblocks = c->fsz / bs;
	switch (op) {
	case OP_READ:
		if (c->map) {
			for (uint64_t i = 0; i < n; i++) {
				memcpy(c->dst, c->map + next_off(c, rnd, bs, nblocks), bs);
				bu_clobber();
			}
		} else {
			for (uint64_t i = 0; i < n; i++) {
				uint64_t off = next_off(c, rnd, bs, nblocks);
				if (pread(c->fd, c->dst, bs, (off_t)off) != (ssize_t)bs)
					bu_die("pread");
			}
		}
		break;
	case OP_WRITE:
		if (c->map) {
			for (uint64_t i = 0; i < n; i++) {
				memcpy(c->map + next_off(c, rnd, bs, nblocks), c->src, bs);
				bu_clobber();
			}
		} else {
			for (uint64_t i = 0; i < n; i++) {
				uint64_t off = next_off(c, rnd, bs, nblocks);
				if (pwrite(c->fd, c->src, bs, (off_t)off) != (ssize_t)bs)
					bu_die("pwrite");
			}
		}
		break;
	case OP_SREAD:
	case OP_SWRITE:
		if (c->map) { /* the limit is the same memcpy as for pread/pwrite */
			run_ops(c, op == OP_SREAD ? OP_READ : OP_WRITE, rnd, bs, n);
			break;
		}
		for (uint64_t i = 0; i < n; i++) {
			uint64_t off = next_off(c, rnd, bs, nblocks);
			if (off != c->pos && lseek(c->fd, (off_t)off, SEEK_SET) != (off_t)off)
				bu_die("lseek");
			ssize_t r = op == OP_SREAD ? read(c->fd, c->dst, bs) : write(c->fd, c->src, bs);
			if (r != (ssize_t)bs)
				bu_die(op == OP_SREAD ? "read" : "write");
			c->pos = off + bs;
		}
		break;
	case OP_EXTEND:
		if (c->amap) {
			run_ops(c, OP_APPEND, rnd, bs, n);
			break;
		}
		for (uint64_t i = 0; i < n; i++)
			if (write(c->efd, c->src, bs) != (ssize_t)bs)
				bu_die("write (extend)");
		break;
	case OP_APPEND:
		if (c->amap) {
			for (uint64_t i = 0; i < n; i++) {
				memcpy(c->amap + c->aoff, c->src, bs);
				c->aoff += bs;
				bu_clobber();
			}
		} else {
			for (uint64_t i = 0; i < n; i++)
				if (write(c->afd, c->src, bs) != (ssize_t)bs)
					bu_die("write (append)");
		}
		break;
	}
}

/* Appends restart from an empty file (or the start of the preallocated
 * mapping) before every batch; outside the timed region. */
static void reset_append(struct ctx *c)
{
	if (c->amap)
		c->aoff = 0;
	else if (ftruncate(c->afd, 0) != 0 || lseek(c->efd, 0, SEEK_SET) != 0)
		bu_die("ftruncate (append file)");
}

static uint64_t time_batch(struct ctx *c, int op, int rnd, size_t bs, uint64_t n)
{
	if (op == OP_APPEND || op == OP_EXTEND)
		reset_append(c);
	uint64_t t0 = bu_now_ns();
	run_ops(c, op, rnd, bs, n);
	return bu_now_ns() - t0;
}

/* Operations per batch for about batch_ns per batch. First doubling runs
 * until a quarter of a batch has elapsed in total (a rate from many
 * operations, so one slow early operation cannot shrink the batch to a few
 * calls), then one batch at that estimate corrects it. Also the warm-up of
 * the case's cache and TLB state. */
static uint64_t calibrate(struct ctx *c, int op, int rnd, size_t bs, uint64_t batch_ns, uint64_t maxn)
{
	uint64_t n = 1, done = 0, spent = 0;
	while (spent < batch_ns / 4 && n < maxn) {
		spent += time_batch(c, op, rnd, bs, n);
		done += n;
		n = n * 2 > maxn ? maxn : n * 2;
	}
	if (n >= maxn)
		return maxn;
	for (int pass = 0; pass < 2; pass++) {
		double est = (double)done * (double)batch_ns / (double)(spent ? spent : 1);
		n = est < 1 ? 1 : est > (double)maxn ? maxn : (uint64_t)est;
		spent = time_batch(c, op, rnd, bs, n);
		done = n;
	}
	return n;
}

static void prepare(const char *path, unsigned long long bytes)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		bu_die(path);
	size_t chunk = 1 << 20;
	char *b = malloc(chunk);
	if (!b)
		bu_fail("out of memory");
	uint64_t s = 0x9E3779B97F4A7C15ULL;
	for (size_t i = 0; i < chunk; i += 8) {
		uint64_t v = bu_rand(&s);
		memcpy(b + i, &v, 8);
	}
	for (unsigned long long done = 0; done < bytes;) {
		size_t n = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
		ssize_t w = write(fd, b, n);
		if (w <= 0)
			bu_die("prepare write");
		done += (unsigned long long)w;
	}
	if (close(fd) != 0)
		bu_die("prepare close");
	free(b);
}

static int has_word(const char *list, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = list; (p = strstr(p, w)); p += n)
		if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *file = NULL, *afile = NULL, *ops = "read,write,append", *pats = "rand,seq";
	unsigned long long sizes[16] = { 64, 512, 4096, 65536, 1 << 20 };
	int nsizes = 5, cpu = -1, mmap_mode = 0, nbatches = 7, no_prefault = 0;
	double batch_ms = 20;
	unsigned long long cap = 64ull << 20, prep = 0;
	static const struct option lo[] = {
		{ "file", 1, 0, 'f' }, { "append-file", 1, 0, 'a' }, { "mmap", 0, 0, 'm' },
		{ "cpu", 1, 0, 'c' }, { "sizes", 1, 0, 's' }, { "ops", 1, 0, 'o' },
		{ "patterns", 1, 0, 'p' }, { "batch-ms", 1, 0, 't' }, { "batches", 1, 0, 'b' },
		{ "append-cap", 1, 0, 'A' }, { "prepare", 1, 0, 'P' }, { "no-prefault", 0, 0, 'N' },
		{ 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'f': file = optarg; break;
		case 'a': afile = optarg; break;
		case 'm': mmap_mode = 1; break;
		case 'c': cpu = atoi(optarg); break;
		case 's': nsizes = bu_parse_sizes(optarg, sizes, 16); break;
		case 'o': ops = optarg; break;
		case 'p': pats = optarg; break;
		case 't': batch_ms = atof(optarg); break;
		case 'b': nbatches = atoi(optarg); break;
		case 'A': cap = bu_parse_size(optarg); break;
		case 'P': prep = bu_parse_size(optarg); break;
		case 'N': no_prefault = 1; break;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!file || nbatches < 1 || nbatches > 1000 || batch_ms <= 0) {
		fprintf(stderr, "chell_bench_lat: --file is required; --batches 1..1000\n");
		return 2;
	}
	if (prep) {
		prepare(file, prep);
		return 0;
	}
	int want_append = has_word(ops, "append") || has_word(ops, "extend");
	if (want_append && !afile) {
		fprintf(stderr, "chell_bench_lat: appends need --append-file\n");
		return 2;
	}
	bu_pin(cpu);

	struct ctx c = { .fd = -1, .afd = -1, .efd = -1, .cap = cap, .rng = 0x853c49e6748fea9bULL };
	c.fd = open(file, O_RDWR);
	if (c.fd < 0)
		bu_die(file);
	struct stat st;
	if (fstat(c.fd, &st) != 0)
		bu_die("fstat");
	c.fsz = (size_t)st.st_size;
	size_t maxbs = 0;
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > maxbs)
			maxbs = sizes[i];
	if (maxbs == 0 || c.fsz < maxbs * 2 || cap < maxbs)
		bu_fail("file (or --append-cap) too small for the largest size");
	/* Page-aligned buffers, touched once, so no first-touch fault is timed. */
	if (posix_memalign((void **)&c.dst, 4096, maxbs) || posix_memalign((void **)&c.src, 4096, maxbs))
		bu_fail("out of memory");
	memset(c.dst, 0, maxbs);
	for (size_t i = 0; i < maxbs; i++)
		c.src[i] = (char)(i * 131 + 7);

	if (mmap_mode) {
		c.map = mmap(NULL, c.fsz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c.fd, 0);
		if (c.map == MAP_FAILED)
			bu_die("mmap");
	}
	uint64_t prefault_ns = no_prefault ? 0 : bu_prefault(c.fd, c.map, c.fsz);
	if (want_append) {
		c.afd = open(afile, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, 0644);
		c.efd = open(afile, O_RDWR);
		if (c.afd < 0 || c.efd < 0)
			bu_die(afile);
		if (mmap_mode) {
			/* The limit for appends: copies into already allocated,
			 * already mapped pages of a file long enough for a batch. */
			for (size_t done = 0; done < cap; done += maxbs)
				if (write(c.afd, c.src, maxbs) != (ssize_t)maxbs)
					bu_die("preallocate append file");
			c.amap = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, c.afd, 0);
			if (c.amap == MAP_FAILED)
				bu_die("mmap append file");
		}
	}

	printf("{\"program\":\"chell_bench_lat\",\"mode\":\"%s\",\"file_size\":%zu,\"cpu\":%d,"
	       "\"batch_ms\":%g,\"batches\":%d,\"append_cap\":%llu,\"prefault_ms\":%.3f,",
	       mmap_mode ? "mmap" : "syscall", c.fsz, cpu, batch_ms, nbatches, cap, (double)prefault_ns / 1e6);
	printf("\"provider\":{\"pread\":\"%s\",\"pwrite\":\"%s\",\"write\":\"%s\",\"read\":\"%s\","
	       "\"lseek\":\"%s\"},\"cases\":[",
	       bu_provider("pread"), bu_provider("pwrite"), bu_provider("write"), bu_provider("read"),
	       bu_provider("lseek"));

	double *v = calloc((size_t)nbatches, sizeof *v);
	if (!v)
		bu_fail("out of memory");
	const uint64_t batch_ns = (uint64_t)(batch_ms * 1e6);
	int first = 1;
	for (int si = 0; si < nsizes; si++) {
		size_t bs = sizes[si];
		for (int op = OP_READ; op < OP_NOPS; op++) {
			if (!has_word(ops, op_names[op]))
				continue;
			for (int rnd = 1; rnd >= 0; rnd--) {
				/* Appends have one pattern: the end of the file. */
				int grows = op == OP_APPEND || op == OP_EXTEND;
				if (grows && rnd)
					continue;
				if (!grows && !has_word(pats, rnd ? "rand" : "seq"))
					continue;
				uint64_t maxn = grows ? cap / bs : UINT64_MAX;
				uint64_t n = calibrate(&c, op, rnd, bs, batch_ns, maxn);
				time_batch(&c, op, rnd, bs, n); /* warm-up */
				for (int b = 0; b < nbatches; b++)
					v[b] = (double)time_batch(&c, op, rnd, bs, n) / (double)n;
				printf("%s{\"op\":\"%s\",\"pattern\":\"%s\",\"bs\":%zu,\"ops_per_batch\":%llu,\"ns_per_op\":[",
				       first ? "" : ",", op_names[op],
				       grows ? "append" : rnd ? "rand" : "seq", bs, (unsigned long long)n);
				for (int b = 0; b < nbatches; b++)
					printf("%s%.2f", b ? "," : "", v[b]);
				printf("],\"median_ns\":%.2f}", bu_median(v, (size_t)nbatches));
				fflush(stdout);
				first = 0;
			}
		}
	}
	/* Counted while both files are still open: a handler may unmap on close. */
	printf("],\"maps_of_file\":%d,\"maps_of_append_file\":%d}\n",
	       bu_maps_of(file), want_append ? bu_maps_of(afile) : 0);
	free(v);
	return 0;
}
