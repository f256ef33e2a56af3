/* SPDX-License-Identifier: MIT */
/*
 * chell_crashproc - the crash-test workload on a region file, for real
 * process crashes (tests/system/test_crash.py kills it with SIGKILL).
 *
 *   chell_crashproc run   --file F [--create] [--tx N] [--ack A] [--seed S]
 *   chell_crashproc check --file F [--ack A] [--seed S]
 *
 * run: open F (or create it), recovering what a killed run left, and go on
 * with the workload from the recorded transaction counter: N more
 * transactions, 0 = until killed. After every acknowledged commit it stores
 * the transaction number in the 8-byte file A (outside the region, on tmpfs
 * it survives the kill like the region does): "the last commit the
 * program was told about".
 *
 * check: report what recovery will find (chell_region_check), open F (which
 * recovers), then judge the heap: the workload's structural invariants, the
 * counter n against the acknowledged a (a <= n <= a+1: every acknowledged
 * transaction present, at most the one in flight beyond it), and the heap
 * byte for byte against a replay of transactions 1..n in memory (the
 * workload is deterministic, so a killed-and-resumed run must equal an
 * uninterrupted one). Exit 0 if all holds, 1 on a violation, 2 on errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "workload.h"

struct opts {
	const char *file, *ack;
	int create;
	int break_undo;           /* run: leave one range of every update unlogged */
	uint64_t tx, seed, heap;
	unsigned journals, entries;
};

static void nop_flush(void *ctx, const void *addr, size_t len) {}
static void nop_drain(void *ctx) {}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}
static const struct chell_persist_ops plain_ops = {nop_flush, nop_drain, plain_memcpy, NULL};

/* The acknowledgement word: a shared mapping of an 8-byte file. */
static volatile uint64_t *map_ack(const char *path, int create)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
	if (fd < 0 || (create && ftruncate(fd, 8) < 0)) {
		fprintf(stderr, "chell_crashproc: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	void *p = mmap(NULL, 8, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "chell_crashproc: map %s: %s\n", path, strerror(errno));
		return NULL;
	}
	return p;
}

static int cmd_run(const struct opts *o)
{
	char err[512];
	struct chell_region *r;
	struct wl w;
	int rc;

	if (o->create) {
		struct chell_region_layout lay = {o->journals, o->entries, o->heap};
		rc = chell_region_create(o->file, &lay, &r, err, sizeof(err));
	} else {
		rc = chell_region_open(o->file, &r, err, sizeof(err));
	}
	if (rc < 0) {
		fprintf(stderr, "chell_crashproc: %s\n", err);
		return 2;
	}
	rc = wl_init(&w, r, o->journals, o->seed, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "chell_crashproc: %s\n", err);
		chell_region_close(r);
		return 2;
	}
	if (o->break_undo)
		w.brk = WL_BREAK_MISSING_UNDO;
	volatile uint64_t *ack = NULL;
	if (o->ack) {
		ack = map_ack(o->ack, 1);
		if (!ack) {
			wl_fini(&w);
			chell_region_close(r);
			return 2;
		}
		*ack = w.acked;
	}
	for (uint64_t i = 0; (o->tx == 0 || i < o->tx) && rc == 0; i++) {
		rc = wl_step(&w, err, sizeof(err));
		if (ack)
			*ack = w.acked;
	}
	if (rc < 0)
		fprintf(stderr, "chell_crashproc: %s\n", err);
	else
		printf("done txcount=%" PRIu64 " commits=%" PRIu64 " aborts=%" PRIu64 "\n", w.acked, w.commits,
		       w.aborts);
	wl_fini(&w);
	chell_region_close(r);
	if (ack)
		munmap((void *)ack, 8);
	return rc < 0 ? 2 : 0;
}

/* The heap after transactions 1..n of the workload, into out (heap bytes). */
static int replay(const struct opts *o, uint64_t heap_size, uint64_t n, uint8_t *out, char *err, size_t errlen)
{
	struct chell_region_layout lay = {o->journals, o->entries, heap_size};
	size_t len = 4096 * 3 + (size_t)o->journals * ((o->entries + 1u) * 64 + 8) + heap_size + 65536;
	uint8_t *img = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	struct chell_region *r;
	struct wl w;
	int rc;

	if (!img) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	memset(img, 0, len);
	rc = chell_region_format_mem(img, len, &lay, &plain_ops, err, errlen);
	if (rc == 0)
		rc = chell_region_open_mem(img, len, &plain_ops, &r, err, errlen);
	if (rc < 0) {
		free(img);
		return rc;
	}
	rc = wl_init(&w, r, o->journals, o->seed, err, errlen);
	for (uint64_t i = 0; i < n && rc == 0; i++)
		rc = wl_step(&w, err, errlen);
	if (rc == 0)
		memcpy(out, w.heap, heap_size);
	wl_fini(&w); /* safe after a failed wl_init too */
	chell_region_close(r);
	free(img);
	return rc;
}

static int cmd_check(const struct opts *o)
{
	char err[512], msg[1024];
	struct chell_region_report rep;
	struct chell_region *r;
	int bad = 0;

	int rc = chell_region_check(o->file, &rep);
	int unfinished = rc == 0 ? rep.unfinished_tx : -1;
	rc = chell_region_open(o->file, &r, err, sizeof(err));
	if (rc < 0) {
		printf("VIOLATION: recovery failed: %s\n", err);
		return 1;
	}
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	uint64_t n = wl_txcount(heap, size);
	if (wl_check(heap, size, msg, sizeof(msg)) != 0) {
		printf("VIOLATION: heap invariants after recovery (transaction %" PRIu64 "):\n%s", n, msg);
		bad = 1;
	}
	uint64_t a = 0;
	if (o->ack) {
		volatile uint64_t *ack = map_ack(o->ack, 0);
		if (!ack) {
			chell_region_close(r);
			return 2;
		}
		a = *ack;
		munmap((void *)ack, 8);
		if (n < a || n > a + 1) {
			printf("VIOLATION: heap records transaction %" PRIu64 " but %" PRIu64
			       " was the last acknowledged (allowed: %" PRIu64 " or %" PRIu64 ")\n",
			       n, a, a, a + 1);
			bad = 1;
		}
	}
	uint8_t *want = malloc(size);
	rc = want ? replay(o, size, n, want, err, sizeof(err)) : -ENOMEM;
	if (rc < 0) {
		fprintf(stderr, "chell_crashproc: replay: %s\n", want ? err : "out of memory");
		free(want);
		chell_region_close(r);
		return 2;
	}
	if (memcmp(heap, want, size) != 0) {
		size_t d = 0;
		while (heap[d] == want[d])
			d++;
		printf("VIOLATION: heap differs from a replay of transactions 1..%" PRIu64
		       " at offset %zu (0x%02x, replay 0x%02x)\n", n, d, heap[d], want[d]);
		bad = 1;
	}
	free(want);
	chell_region_close(r);
	printf("%s txcount=%" PRIu64 " acked=%" PRIu64 " unfinished=%d\n", bad ? "FAILED" : "ok", n, a, unfinished);
	return bad;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: chell_crashproc run   --file F [--create] [--tx N] [--ack A] [options]\n"
		"       chell_crashproc check --file F [--ack A] [options]\n"
		"The crash-test workload on a region file. run: go on with the workload (N\n"
		"transactions, 0 = until killed), storing the last acknowledged transaction\n"
		"in A. check: recover F and verify it against A and a replay. Exit 0 ok,\n"
		"1 violation, 2 error.\n"
		"  --seed S        workload seed (default 1; run and check must agree)\n"
		"  --break missing-undo   run: a deliberate bug (one range of every update is\n"
		"                  changed unlogged), which check must catch after a kill\n"
		"  --heap BYTES    heap size for --create (default 65536)\n"
		"  --journals J    client journals (default 4)\n"
		"  --entries E     entries per journal (default 128)\n"
		"  -h, --help      this text\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"file", required_argument, 0, 'F'},    {"ack", required_argument, 0, 'a'},
		{"create", no_argument, 0, 'c'},        {"tx", required_argument, 0, 't'},
		{"seed", required_argument, 0, 's'},    {"heap", required_argument, 0, 'H'},
		{"journals", required_argument, 0, 'J'}, {"entries", required_argument, 0, 'E'},
		{"break", required_argument, 0, 'b'},   {"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	struct opts o = {.seed = 1, .heap = 65536, .journals = 4, .entries = 128};
	int c;
	char *end;

	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "check") != 0)) {
		usage(stderr);
		return 2;
	}
	optind = 2;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		unsigned long long v = 0;
		if (optarg) {
			errno = 0;
			v = strtoull(optarg, &end, 0);
			if (c != 'F' && c != 'a' && c != 'b' && (errno || end == optarg || *end || optarg[0] == '-')) {
				fprintf(stderr, "chell_crashproc: bad number '%s'\n", optarg);
				return 2;
			}
		}
		switch (c) {
		case 'F': o.file = optarg; break;
		case 'a': o.ack = optarg; break;
		case 'c': o.create = 1; break;
		case 'b':
			if (strcmp(optarg, "missing-undo") != 0) {
				fprintf(stderr, "chell_crashproc: unknown --break '%s'\n", optarg);
				return 2;
			}
			o.break_undo = 1;
			break;
		case 't': o.tx = v; break;
		case 's': o.seed = v; break;
		case 'H': o.heap = v; break;
		case 'J': o.journals = (unsigned)(v ? v : 1); break;
		case 'E': o.entries = (unsigned)v; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!o.file || optind < argc) {
		usage(stderr);
		return 2;
	}
	return strcmp(argv[1], "run") == 0 ? cmd_run(&o) : cmd_check(&o);
}
