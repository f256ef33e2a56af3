/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_grb - zero-copy chell_get_read_buf() against read(), per call,
 * for sizes 4 KB..1 MB (the paper's Figure 14).
 *
 * The program links nothing from Chell: it looks chell_get_read_buf up with
 * dlsym(RTLD_DEFAULT, ...), so it runs with and without the preload. Under
 * the direct handler the call returns a pointer into the file's mapping; on
 * other descriptors it is a read() into a per-thread buffer. Without the
 * preload only the read() cases run ("get_read_buf_available": false).
 *
 * Cases per size, all streaming sequentially through the file with the
 * descriptor's own offset (lseek back to 0 at end of file, inside the timed
 * loop; once every file_size/size calls):
 *   grb          chell_get_read_buf(fd, &p, size), bytes not touched
 *   grb_touch    the same, then sum the returned bytes (8-byte words)
 *   read         read(fd, buf, size)
 *   read_touch   read(), then sum buf
 * The file is read once with 1 MB preads before timing (prefault_ms).
 * Calls that return fewer bytes than asked (a mapping-chunk boundary) are
 * counted and reported; the time is per call.
 *
 *   chell_bench_grb --file F [--cpu N] [--sizes 4k,16k,64k,256k,1m]
 *       [--batch-ms 20] [--batches 7]
 */
#include <fcntl.h>
#include <getopt.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_grb --file F [--cpu N] [--sizes 4k,16k,64k,256k,1m]\n"
	"      [--batch-ms 20] [--batches 7]\n"
	"\n"
	"chell_bench_grb - zero-copy chell_get_read_buf() against read(), per call,\n"
	"for sizes 4 KB..1 MB (the paper's Figure 14).\n"
	"(details: the comment at the top of chell_bench_grb.c)\n";

typedef ssize_t (*grb_fn)(int, const void **, size_t);

enum { C_GRB, C_GRB_TOUCH, C_READ, C_READ_TOUCH };
static const char *const case_names[] = { "grb", "grb_touch", "read", "read_touch" };

static grb_fn grb;
static char *rbuf;
static volatile uint64_t sink;
static uint64_t short_calls;

static inline uint64_t sum_bytes(const void *p, size_t len)
{
	const uint64_t *w = p;
	uint64_t s = 0;
	for (size_t i = 0; i < len / 8; i++)
		s += w[i];
	return s;
}

static void run(int fd, int kind, size_t size, uint64_t n)
{
	uint64_t acc = 0;
	for (uint64_t i = 0; i < n; i++) {
		const void *p;
		ssize_t r;
		if (kind == C_GRB || kind == C_GRB_TOUCH) {
			r = grb(fd, &p, size);
		} else {
			r = read(fd, rbuf, size);
			p = rbuf;
		}
		if (r < 0)
			bu_die(case_names[kind]);
		if (r == 0) { /* end of file: start over */
			if (lseek(fd, 0, SEEK_SET) != 0)
				bu_die("lseek");
			continue;
		}
		if ((size_t)r < size)
			short_calls++;
		if (kind == C_GRB_TOUCH || kind == C_READ_TOUCH)
			acc += sum_bytes(p, (size_t)r);
	}
	sink += acc;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *file = NULL;
	unsigned long long sizes[16] = { 4096, 16384, 65536, 262144, 1 << 20 };
	int nsizes = 5, cpu = -1, nbatches = 7;
	double batch_ms = 20;
	static const struct option lo[] = {
		{ "file", 1, 0, 'f' }, { "cpu", 1, 0, 'c' }, { "sizes", 1, 0, 's' },
		{ "batch-ms", 1, 0, 't' }, { "batches", 1, 0, 'b' }, { 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'f': file = optarg; break;
		case 'c': cpu = atoi(optarg); break;
		case 's': nsizes = bu_parse_sizes(optarg, sizes, 16); break;
		case 't': batch_ms = atof(optarg); break;
		case 'b': nbatches = atoi(optarg); break;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!file || nbatches < 1 || nbatches > 1000 || batch_ms <= 0) {
		fprintf(stderr, "chell_bench_grb: --file is required; --batches 1..1000\n");
		return 2;
	}
	bu_pin(cpu);
	grb = (grb_fn)dlsym(RTLD_DEFAULT, "chell_get_read_buf");
	int fd = open(file, O_RDONLY);
	if (fd < 0)
		bu_die(file);
	off_t fsz = lseek(fd, 0, SEEK_END);
	if (fsz <= 0)
		bu_fail("empty file");
	/* Warm-up: map (direct) every chunk before timing; see bu_prefault. */
	uint64_t prefault_ns = bu_prefault(fd, NULL, (size_t)fsz);
	size_t maxbs = 0;
	for (int i = 0; i < nsizes; i++)
		if (sizes[i] > maxbs)
			maxbs = sizes[i];
	if (posix_memalign((void **)&rbuf, 4096, maxbs))
		bu_fail("out of memory");
	memset(rbuf, 0, maxbs);

	printf("{\"program\":\"chell_bench_grb\",\"get_read_buf_available\":%s,\"cpu\":%d,\"prefault_ms\":%.3f,"
	       "\"provider\":{\"read\":\"%s\",\"chell_get_read_buf\":\"%s\"},\"cases\":[",
	       grb ? "true" : "false", cpu, (double)prefault_ns / 1e6, bu_provider("read"),
	       grb ? bu_provider("chell_get_read_buf") : "");
	double *v = calloc((size_t)nbatches, sizeof *v);
	if (!v)
		bu_fail("out of memory");
	const uint64_t batch_ns = (uint64_t)(batch_ms * 1e6);
	int first = 1;
	for (int si = 0; si < nsizes; si++) {
		size_t size = sizes[si];
		for (int kind = C_GRB; kind <= C_READ_TOUCH; kind++) {
			if (!grb && (kind == C_GRB || kind == C_GRB_TOUCH))
				continue;
			if (lseek(fd, 0, SEEK_SET) != 0)
				bu_die("lseek");
			uint64_t n = 1, t;
			for (;;) { /* calibrate, and warm up */
				uint64_t t0 = bu_now_ns();
				run(fd, kind, size, n);
				t = bu_now_ns() - t0;
				if (t >= batch_ns / 8)
					break;
				n *= 2;
			}
			n = (uint64_t)((double)n * (double)batch_ns / (double)(t ? t : 1));
			if (n < 1)
				n = 1;
			short_calls = 0;
			uint64_t calls = 0;
			for (int b = 0; b < nbatches; b++) {
				uint64_t t0 = bu_now_ns();
				run(fd, kind, size, n);
				v[b] = (double)(bu_now_ns() - t0) / (double)n;
				calls += n;
			}
			printf("%s{\"case\":\"%s\",\"size\":%zu,\"calls_per_batch\":%llu,"
			       "\"short_calls\":%llu,\"calls\":%llu,\"ns_per_call\":[",
			       first ? "" : ",", case_names[kind], size, (unsigned long long)n,
			       (unsigned long long)short_calls, (unsigned long long)calls);
			for (int b = 0; b < nbatches; b++)
				printf("%s%.2f", b ? "," : "", v[b]);
			printf("],\"median_ns\":%.2f}", bu_median(v, (size_t)nbatches));
			fflush(stdout);
			first = 0;
		}
	}
	printf("],\"maps_of_file\":%d}\n", bu_maps_of(file));
	free(v);
	return 0;
}
