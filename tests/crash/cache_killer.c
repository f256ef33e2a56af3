/* SPDX-License-Identifier: MIT */
/*
 * cache_killer: a workload to be killed, and its checker, for crash tests of
 * cache mode (tests/system/test_cache_crash.py, docs/CRASH_TESTING.md).
 *
 *   cache_killer run --file F --log L --seed S [--blocks N] [--batch K]
 *                    [--stripe I/N] [--grow] [--ops M]
 *   cache_killer verify --file F --log L [--log L2 ...]
 *
 * `run` writes stamped 4 KB blocks into F at random block numbers (only
 * those b with b % N == I, so concurrent writers never share a block) and,
 * with --grow, appends new blocks at the end. Every block it writes is
 * (magic, block number, version, then bytes generated from both), the
 * version a nanosecond clock reading, so versions from every process and
 * every restart are ordered. Before a write it logs an intent "I b v", and
 * after each fsync/fdatasync of a batch it logs "A b v" for every block of
 * the batch (and "S size" for the size) to L, a file on a file system Chell
 * does not handle, with O_APPEND writes that survive the writer's SIGKILL.
 * Some blocks are written in two pieces, some with writev, to give torn
 * states a chance.
 *
 * `verify` reads F and checks, against the union of the logs, what the
 * issue promises after any crash: every acknowledged block holds a version
 * at least as new as its last acknowledged one (never older, never another
 * block's, never garbage), a block in a torn or unstamped state is allowed
 * only if a newer write to it was in flight (an intent with no ack), every
 * stamped version is one that was really written to that block, blocks never
 * written are zero, and the file is at least as large as the acknowledged
 * size. Exit 0 clean, 1 with violations (each printed), 2 usage/system.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BLK 4096u
#define MAGIC 0x4b4c494b48434331ull /* "1CCHKILK" */

struct stamp {
	uint64_t magic, block, version;
};

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void make_block(unsigned char *buf, uint64_t b, uint64_t v)
{
	struct stamp s = {MAGIC, b, v};
	memcpy(buf, &s, sizeof s);
	uint64_t x = b * 0x100000001b3ull ^ v;
	for (size_t i = sizeof s; i < BLK; i += 8) {
		x = mix(x);
		memcpy(buf + i, &x, 8);
	}
}

/* Well-formed block of number b: its version; 0 all zeros; -1 anything else. */
static int64_t parse_block(const unsigned char *buf, uint64_t b)
{
	static unsigned char want[BLK];
	struct stamp s;
	memcpy(&s, buf, sizeof s);
	if (s.magic != MAGIC) {
		for (size_t i = 0; i < BLK; i++)
			if (buf[i])
				return -1;
		return 0;
	}
	if (s.block != b || s.version == 0 || s.version > INT64_MAX)
		return -1;
	make_block(want, b, s.version);
	return memcmp(want, buf, BLK) == 0 ? (int64_t)s.version : -1;
}

static uint64_t now_version(void)
{
	static uint64_t last;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t v = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	if (v <= last)
		v = last + 1;
	return last = v;
}

static void die(const char *what)
{
	fprintf(stderr, "cache_killer: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void log_line(int fd, const char *buf, size_t len)
{
	if (write(fd, buf, len) != (ssize_t)len)
		die("log write");
}

static void usage(FILE *f)
{
	fputs("usage: cache_killer run --file F --log L --seed S [--blocks N] [--batch K]\n"
	      "                        [--stripe I/N] [--grow] [--ops M]\n"
	      "       cache_killer verify --file F --log L [--log L2 ...]\n"
	      "A workload to SIGKILL and its checker for cache-mode crash tests:\n"
	      "`run` writes stamped 4 KB blocks, fsyncs in batches and logs what was\n"
	      "acknowledged; `verify` checks the file against the logs.\n",
	      f);
}

/* ---- run */

static int do_run(const char *file, const char *logp, uint64_t seed, uint64_t nblocks,
		  unsigned batch, unsigned stripe_i, unsigned stripe_n, bool grow, uint64_t ops)
{
	int fd = open(file, O_RDWR | O_CREAT, 0644);
	if (fd < 0)
		die(file);
	int lfd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (lfd < 0)
		die(logp);
	unsigned char buf[BLK];
	uint64_t *pend = calloc(batch, sizeof *pend * 2);
	if (!pend)
		die("calloc");
	uint64_t rng = mix(seed * 7919 + (uint64_t)getpid());
	for (uint64_t n = 0; !ops || n < ops;) {
		unsigned k = 0;
		uint64_t grown = 0;
		for (; k < batch; k++, n++) {
			struct stat st;
			if (fstat(fd, &st) < 0)
				die("fstat");
			uint64_t fblocks = (uint64_t)st.st_size / BLK;
			rng = mix(rng);
			uint64_t b;
			if (grow && fblocks < 2 * nblocks && rng % 32 == 0) {
				/* an append (up to twice --blocks): the first block past the
				 * end in this stripe */
				b = fblocks > nblocks ? fblocks : nblocks;
				while (b % stripe_n != stripe_i)
					b++;
			} else {
				b = (rng >> 8) % nblocks;
				b -= b % stripe_n;
				b += stripe_i;
				if (b >= nblocks)
					b = stripe_i;
			}
			uint64_t v = now_version();
			char line[64];
			int len = snprintf(line, sizeof line, "I %" PRIu64 " %" PRIu64 "\n", b, v);
			log_line(lfd, line, (size_t)len);
			make_block(buf, b, v);
			off_t off = (off_t)(b * BLK);
			ssize_t w;
			switch ((rng >> 40) % 4) {
			case 0: { /* two pieces, second first: a kill between them tears */
				size_t cut = 64 + (size_t)((rng >> 20) % (BLK - 128));
				w = pwrite(fd, buf + cut, BLK - cut, off + (off_t)cut);
				if (w == (ssize_t)(BLK - cut))
					w = pwrite(fd, buf, cut, off) + (ssize_t)(BLK - cut);
				break;
			}
			case 1: {
				struct iovec iov[2] = {{buf, 1000}, {buf + 1000, BLK - 1000}};
				w = pwritev(fd, iov, 2, off);
				break;
			}
			case 2:
				if (lseek(fd, off, SEEK_SET) != off)
					die("lseek");
				w = write(fd, buf, BLK);
				break;
			default:
				w = pwrite(fd, buf, BLK, off);
			}
			if (w != (ssize_t)BLK)
				die("write");
			pend[2 * k] = b;
			pend[2 * k + 1] = v;
			if ((b + 1) * BLK > grown)
				grown = (b + 1) * BLK;
		}
		if (((rng >> 50) & 1 ? fdatasync(fd) : fsync(fd)) < 0)
			die("fsync");
		/* acknowledged: log it (lines for one batch in one append) */
		char acks[BLK];
		size_t len = 0;
		for (unsigned i = 0; i < k; i++) {
			len += (size_t)snprintf(acks + len, sizeof acks - len, "A %" PRIu64 " %" PRIu64 "\n",
						pend[2 * i], pend[2 * i + 1]);
			if (len > sizeof acks - 96) {
				log_line(lfd, acks, len);
				len = 0;
			}
		}
		struct stat st;
		if (fstat(fd, &st) < 0)
			die("fstat");
		len += (size_t)snprintf(acks + len, sizeof acks - len, "S %" PRIu64 "\n",
					(uint64_t)st.st_size > grown ? (uint64_t)st.st_size : grown);
		log_line(lfd, acks, len);
	}
	close(fd);
	close(lfd);
	free(pend);
	return 0;
}

/* ---- verify */

struct vers {
	uint64_t acked;  /* newest acknowledged version */
	uint64_t *v;     /* every version written (intended) */
	size_t n, cap;
};

static struct vers *tab;
static uint64_t ntab;

static struct vers *at(uint64_t b)
{
	if (b >= ntab) {
		uint64_t nn = ntab ? ntab : 1024;
		while (nn <= b)
			nn *= 2;
		tab = realloc(tab, nn * sizeof *tab);
		if (!tab)
			die("realloc");
		memset(tab + ntab, 0, (nn - ntab) * sizeof *tab);
		ntab = nn;
	}
	return &tab[b];
}

static bool intended(const struct vers *x, uint64_t v)
{
	for (size_t i = 0; i < x->n; i++)
		if (x->v[i] == v)
			return true;
	return false;
}

static bool newer_intent(const struct vers *x)
{
	for (size_t i = 0; i < x->n; i++)
		if (x->v[i] > x->acked)
			return true;
	return false;
}

static uint64_t read_logs(char **logs, int nlogs, uint64_t *acked_size, uint64_t *nacks)
{
	uint64_t maxb = 0;
	*acked_size = 0;
	*nacks = 0;
	for (int i = 0; i < nlogs; i++) {
		FILE *f = fopen(logs[i], "r");
		if (!f)
			die(logs[i]);
		char line[128];
		while (fgets(line, sizeof line, f)) {
			size_t l = strlen(line);
			if (!l || line[l - 1] != '\n')
				break; /* a line cut by the kill: ignore it and what follows */
			uint64_t b, v;
			if (line[0] == 'I' && sscanf(line, "I %" SCNu64 " %" SCNu64, &b, &v) == 2) {
				struct vers *x = at(b);
				if (x->n == x->cap) {
					x->cap = x->cap ? 2 * x->cap : 4;
					x->v = realloc(x->v, x->cap * sizeof *x->v);
					if (!x->v)
						die("realloc");
				}
				x->v[x->n++] = v;
				if (b + 1 > maxb)
					maxb = b + 1;
			} else if (line[0] == 'A' && sscanf(line, "A %" SCNu64 " %" SCNu64, &b, &v) == 2) {
				struct vers *x = at(b);
				if (v > x->acked)
					x->acked = v;
				(*nacks)++;
			} else if (line[0] == 'S' && sscanf(line, "S %" SCNu64, &b) == 1) {
				if (b > *acked_size)
					*acked_size = b;
			}
		}
		fclose(f);
	}
	return maxb;
}

static int do_verify(const char *file, char **logs, int nlogs)
{
	uint64_t acked_size, nacks;
	uint64_t maxb = read_logs(logs, nlogs, &acked_size, &nacks);
	int fd = open(file, O_RDONLY);
	if (fd < 0)
		die(file);
	struct stat st;
	if (fstat(fd, &st) < 0)
		die("fstat");
	uint64_t size = (uint64_t)st.st_size, bad = 0, torn = 0, newer = 0, checked = 0;
	if (size < acked_size) {
		printf("VIOLATION: size %" PRIu64 " < acknowledged size %" PRIu64 "\n", size, acked_size);
		bad++;
	}
	unsigned char buf[BLK];
	uint64_t fblocks = (size + BLK - 1) / BLK;
	uint64_t last = fblocks > maxb ? fblocks : maxb;
	for (uint64_t b = 0; b < last; b++) {
		struct vers empty = {0}, *x = b < ntab ? &tab[b] : &empty;
		memset(buf, 0, sizeof buf);
		ssize_t r = b < fblocks ? pread(fd, buf, BLK, (off_t)(b * BLK)) : 0;
		if (r < 0)
			die("pread");
		checked++;
		int64_t v = parse_block(buf, b);
		if (v < 0) {
			if (newer_intent(x)) {
				torn++;
				continue;
			}
			printf("VIOLATION: block %" PRIu64 " is garbage or another block's (acked %" PRIu64
			       ", no write in flight)\n", b, x->acked);
			bad++;
		} else if (v == 0) {
			if (x->acked) {
				printf("VIOLATION: block %" PRIu64 " is zero, acked version %" PRIu64 "\n", b,
				       x->acked);
				bad++;
			}
		} else if (!intended(x, (uint64_t)v)) {
			printf("VIOLATION: block %" PRIu64 " holds version %" PRId64 " never written there\n", b,
			       v);
			bad++;
		} else if ((uint64_t)v < x->acked) {
			printf("VIOLATION: block %" PRIu64 " holds version %" PRId64
			       " older than acknowledged %" PRIu64 " (lost write)\n", b, v, x->acked);
			bad++;
		} else if ((uint64_t)v > x->acked) {
			newer++;
		}
	}
	close(fd);
	printf("verified %" PRIu64 " blocks (%" PRIu64 " acknowledgements), size %" PRIu64
	       " (acked %" PRIu64 "), %" PRIu64 " newer than acked, %" PRIu64
	       " torn in flight, %" PRIu64 " violations\n",
	       checked, nacks, size, acked_size, newer, torn, bad);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *file = NULL;
	char *logs[64];
	int nlogs = 0;
	uint64_t seed = 1, nblocks = 1024, ops = 0;
	unsigned batch = 8, si = 0, sn = 1;
	bool grow = false;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--grow")) {
			grow = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "cache_killer: %s needs a value\n", a);
			return 2;
		}
		i++;
		if (!strcmp(a, "--file"))
			file = v;
		else if (!strcmp(a, "--log") && nlogs < 64)
			logs[nlogs++] = (char *)v;
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--blocks"))
			nblocks = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--batch"))
			batch = (unsigned)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--ops"))
			ops = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--stripe") && sscanf(v, "%u/%u", &si, &sn) == 2 && sn && si < sn)
			;
		else {
			fprintf(stderr, "cache_killer: bad option %s %s\n", a, v);
			return 2;
		}
	}
	if (!file || !nlogs || !nblocks || !batch || batch > 64) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "run"))
		return do_run(file, logs[0], seed, nblocks, batch, si, sn, grow, ops);
	if (!strcmp(argv[1], "verify"))
		return do_verify(file, logs, nlogs);
	usage(stderr);
	return 2;
}
