/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_pvm: the measurements of scripts/bench_pvm.py (docs/PVM.md,
 * docs/PERFORMANCE.md). One JSON object per line on stdout.
 *
 * Latencies (objects *_ns, kv *_us and *_ops) are those of the median batch
 * of 100 operations, so that a preemption on a shared machine spoils one
 * batch, not the result; objects *_ops and kv *_ops_phase are throughputs
 * over the whole phase.
 *
 *   objects --system pvm|pmemobj|files --dir DIR --size N --count C --threads T
 *       create+commit, transactional update, read, delete of C objects of
 *       N bytes per thread; ns per operation for each phase. Update goes
 *       through the pointer (pVM: pvm_tx_add_ptr) or PMEMoid (libpmemobj)
 *       the program got at create; read finds the object by name (pVM: pvm_open) or uses the
 *       held PMEMoid (libpmemobj has no names) or opens the file.
 *         pvm      one pool in DIR, one application handle per thread
 *         pmemobj  one libpmemobj pool in DIR (PMEM_IS_PMEM_FORCE=1: cache
 *                  flushes on tmpfs, as pVM), objects in a root array,
 *                  every phase a transaction as pVM's
 *         files    one file per object in DIR (the paper's "block"
 *                  baseline): create = open+write+fsync+close, update =
 *                  open+pwrite+fsync+close, read = open+read+close, delete =
 *                  unlink; run under `chell run --mode direct` for direct mode
 *   kv --system pvm|pvm-table|leveldb [--sync 0|1] --dir DIR --num N
 *       db_bench-style fillseq, fillrandom, fillsync (N/10 ops), overwrite,
 *       readrandom with 16-byte keys and 100-byte values; pvm: one object
 *       per key, named by the key; pvm-table: a hash table of 128-byte
 *       slots in one object (kvt_put); every pVM write a committed
 *       transaction; the pool is created at the size the run needs
 *       (allocated), as the libpmemobj pool of `objects` is.
 *   snappy --system pvm|pvm-grow|files --dir DIR --corpus LIST
 *       compress every file named in LIST (one path a line, read into
 *       memory first) with snappy and store the output as an object or a
 *       file (open+write+fsync+close); MB/s of input and the user and kernel
 *       CPU time of the storing phase (getrusage).
 *   pages --kind anon|tmpfs|pvm|tierheap --dir DIR --mb M
 *       touch every page of an M MiB mapping once in a random order (first
 *       touch: the fault and the page's allocation) and again (mapped):
 *       ns per page (the paper's figures 9 and 10). tierheap: npmalloc'd
 *       memory, the tiered heap's slow-tier pages (under chell tier run).
 */
#include <chell/pvm.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef CHELL_HAVE_PMEMOBJ
#include <libpmemobj.h>
#endif
#ifdef CHELL_HAVE_LEVELDB
#include <leveldb/c.h>
#endif
#ifdef CHELL_HAVE_SNAPPY
#include <snappy-c.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_bench_pvm COMMAND [options]\n"
	"  objects --system pvm|pmemobj|files --dir DIR --size N --count C --threads T\n"
	"  kv      --system pvm|leveldb [--sync 0|1] --dir DIR --num N\n"
	"  snappy  --system pvm|pvm-grow|files --dir DIR --corpus LIST\n"
	"  pages   --kind anon|tmpfs|pvm|tierheap --dir DIR --mb M\n"
	"\n"
	"The measurements of scripts/bench_pvm.py: object create/update/read/delete\n"
	"latency, a db_bench-style key-value workload, snappy output to objects or\n"
	"files, page access cost. One JSON object per line on stdout.\n"
	"(details: the comment at the top of chell_bench_pvm.c)\n";
#endif

static const char *sys_name = "pvm", *dir = "/dev/shm", *corpus;
static uint64_t size = 4096, count = 1000, num = 10000, mb = 64;
static int threads = 1, sync_on = 1;
static const char *kind = "anon";

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "chell_bench_pvm: %s: %s\n", what, strerror(err));
	exit(2);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* ------------------------------------------------------------ objects */

enum { P_CREATE, P_UPDATE, P_READ, P_DELETE, P_N };
static const char *phase_name[P_N] = {"create", "update", "read", "delete"};

struct worker {
	int id;
	double t[P_N];   /* seconds of the phase */
	double lat[P_N]; /* median batch: seconds per operation */
	pthread_barrier_t *bar;
	struct pvm_pool *pp;
#ifdef CHELL_HAVE_PMEMOBJ
	PMEMobjpool *pop;
#endif
};

/* Operations are timed in batches of BATCH; a phase reports the median
 * batch's ns per operation (a preemption on this shared machine spoils a
 * batch, not the phase) and its throughput over the whole phase. */
#define BATCH 100
static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}
static double median_of(double *v, size_t n)
{
	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cmp_dbl);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Batch timer: bt_tick after each operation. */
struct batches {
	double *v, tb;
	size_t n;
	uint64_t done;
};
static void bt_start(struct batches *b, uint64_t ops)
{
	b->v = realloc(b->v, (ops / BATCH + 2) * sizeof(*b->v));
	b->n = 0;
	b->done = 0;
	b->tb = now();
}
static void bt_tick(struct batches *b, uint64_t ops)
{
	if (++b->done % BATCH && b->done != ops)
		return;
	double t = now();
	uint64_t in = b->done % BATCH ? b->done % BATCH : BATCH;
	b->v[b->n++] = (t - b->tb) / (double)in;
	b->tb = t;
}

#define PHASE(w, ph, body)                                                                                        \
	do {                                                                                                       \
		struct batches bt_ = {0};                                                                          \
		pthread_barrier_wait((w)->bar);                                                                    \
		double t0_ = now();                                                                                \
		bt_start(&bt_, count);                                                                             \
		for (uint64_t i = 0; i < count; i++) {                                                             \
			body;                                                                                      \
			bt_tick(&bt_, count);                                                                      \
		}                                                                                                  \
		(w)->t[ph] = now() - t0_;                                                                          \
		(w)->lat[ph] = median_of(bt_.v, bt_.n);                                                            \
		free(bt_.v);                                                                                       \
	} while (0)

static void *run_pvm(void *arg)
{
	struct worker *w = arg;
	struct pvm_app *a;
	char err[256], name[64];
	uint8_t *buf = malloc(size), *out = malloc(size);
	void **ptrs = calloc(count, sizeof(*ptrs));
	memset(buf, 0xab, size);
	if (pvm_app_open(w->pp, "bench", NULL, PVM_APP_CREATE, &a, err, sizeof err))
		die(err, EINVAL);
	PHASE(w, P_CREATE, {
		snprintf(name, sizeof name, "t%d-o%" PRIu64, w->id, i);
		if (pvm_tx_begin(a) || pvm_create(a, name, size, &ptrs[i]))
			die("pvm create", ENOSPC);
		memcpy(ptrs[i], buf, size);
		if (pvm_tx_commit(a))
			die("pvm commit", EIO);
	});
	/* Update through the pointer the program holds (zero copy), as the
	 * libpmemobj arm holds its PMEMoid: pvm_tx_add_ptr locks and logs by
	 * it, as pmemobj_tx_add_range by the PMEMoid (no name). */
	PHASE(w, P_UPDATE, {
		buf[0] = (uint8_t)i;
		if (pvm_tx_begin(a) || pvm_tx_add_ptr(a, ptrs[i], 0, size))
			die("pvm update", EIO);
		memcpy(ptrs[i], buf, size);
		if (pvm_tx_commit(a))
			die("pvm commit", EIO);
	});
	PHASE(w, P_READ, {
		void *p;
		snprintf(name, sizeof name, "t%d-o%" PRIu64, w->id, i);
		if (pvm_open(a, name, &p, NULL))
			die("pvm open", ENOENT);
		memcpy(out, p, size);
	});
	PHASE(w, P_DELETE, {
		snprintf(name, sizeof name, "t%d-o%" PRIu64, w->id, i);
		if (pvm_delete(a, name))
			die("pvm delete", ENOENT);
	});
	pvm_app_close(a);
	free(ptrs);
	free(buf);
	free(out);
	return NULL;
}

#ifdef CHELL_HAVE_PMEMOBJ
/* One transaction each (out of line: TX_BEGIN is a setjmp). */
static void pmo_create(PMEMobjpool *pop, PMEMoid *slot, const void *buf)
{
	TX_BEGIN(pop) {
		PMEMoid o = pmemobj_tx_alloc(size, 1);
		memcpy(pmemobj_direct(o), buf, size); /* new: no undo needed */
		pmemobj_tx_add_range_direct(slot, sizeof(PMEMoid));
		*slot = o;
	} TX_ONABORT {
		die("pmemobj create", ENOSPC);
	} TX_END
}
static void pmo_update(PMEMobjpool *pop, const PMEMoid *slot, const void *buf)
{
	TX_BEGIN(pop) {
		pmemobj_tx_add_range(*slot, 0, size);
		memcpy(pmemobj_direct(*slot), buf, size);
	} TX_ONABORT {
		die("pmemobj update", EIO);
	} TX_END
}
static void pmo_delete(PMEMobjpool *pop, PMEMoid *slot)
{
	TX_BEGIN(pop) {
		pmemobj_tx_add_range_direct(slot, sizeof(PMEMoid));
		pmemobj_tx_free(*slot);
		*slot = OID_NULL;
	} TX_ONABORT {
		die("pmemobj delete", EIO);
	} TX_END
}

static void *run_pmemobj(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = malloc(size), *out = malloc(size);
	memset(buf, 0xab, size);
	PMEMoid root = pmemobj_root(w->pop, sizeof(PMEMoid) * count * (uint64_t)threads);
	PMEMoid *slots = (PMEMoid *)pmemobj_direct(root) + (uint64_t)w->id * count;
	PMEMobjpool *pop = w->pop;
	PHASE(w, P_CREATE, pmo_create(pop, &slots[i], buf));
	PHASE(w, P_UPDATE, {
		buf[0] = (uint8_t)i;
		pmo_update(pop, &slots[i], buf);
	});
	PHASE(w, P_READ, memcpy(out, pmemobj_direct(slots[i]), size));
	PHASE(w, P_DELETE, pmo_delete(pop, &slots[i]));
	free(buf);
	free(out);
	return NULL;
}
#endif

static void write_all(int fd, const void *b, size_t n, off_t off)
{
	for (size_t d = 0; d < n;) {
		ssize_t r = pwrite(fd, (const char *)b + d, n - d, off + (off_t)d);
		if (r < 0)
			die("pwrite", errno);
		d += (size_t)r;
	}
}

/* open + write + fsync + close: one object stored as a file. */
static void file_put(const char *name, int flags, const void *buf)
{
	int fd = open(name, O_WRONLY | flags, 0644);
	if (fd < 0)
		die(name, errno);
	write_all(fd, buf, size, 0);
	fsync(fd);
	close(fd);
}

static void *run_files(void *arg)
{
	struct worker *w = arg;
	char name[4200];
	uint8_t *buf = malloc(size), *out = malloc(size);
	memset(buf, 0xab, size);
	PHASE(w, P_CREATE, {
		snprintf(name, sizeof name, "%s/t%d-o%" PRIu64, dir, w->id, i);
		file_put(name, O_CREAT | O_TRUNC, buf);
	});
	PHASE(w, P_UPDATE, {
		snprintf(name, sizeof name, "%s/t%d-o%" PRIu64, dir, w->id, i);
		buf[0] = (uint8_t)i;
		file_put(name, 0, buf);
	});
	PHASE(w, P_READ, {
		snprintf(name, sizeof name, "%s/t%d-o%" PRIu64, dir, w->id, i);
		int fd = open(name, O_RDONLY);
		if (fd < 0 || read(fd, out, size) < 0)
			die(name, errno);
		close(fd);
	});
	PHASE(w, P_DELETE, {
		snprintf(name, sizeof name, "%s/t%d-o%" PRIu64, dir, w->id, i);
		if (unlink(name))
			die(name, errno);
	});
	free(buf);
	free(out);
	return NULL;
}

static int cmd_objects(void)
{
	struct worker ws[16];
	pthread_t th[16];
	pthread_barrier_t bar;
	char path[4200];
	void *(*fn)(void *) = NULL;
	struct pvm_pool *pp = NULL;
#ifdef CHELL_HAVE_PMEMOBJ
	PMEMobjpool *pop = NULL;
#endif
	if (threads < 1 || threads > 16)
		die("--threads 1..16", EINVAL);
	uint64_t need = (uint64_t)threads * count * ((size + 4095) / 4096 * 4096 + 4096) * 2 + (64 << 20);
	if (!strcmp(sys_name, "pvm")) {
		snprintf(path, sizeof path, "%s/bench.pvm", dir);
		unlink(path);
		/* Allocated at creation, like the libpmemobj pool. */
		struct pvm_pool_opts o = {.max_size = need, .initial_size = need, .journals = (uint32_t)threads + 2,
					  .journal_entries = (uint32_t)(size / 64 * 2 + 256)};
		char err[256];
		if (pvm_pool_create(path, &o, &pp, err, sizeof err))
			die(err, EINVAL);
		fn = run_pvm;
	}
#ifdef CHELL_HAVE_PMEMOBJ
	else if (!strcmp(sys_name, "pmemobj")) {
		setenv("PMEM_IS_PMEM_FORCE", "1", 1);
		snprintf(path, sizeof path, "%s/bench.pmemobj", dir);
		unlink(path);
		pop = pmemobj_create(path, "bench", need, 0644);
		if (!pop)
			die(pmemobj_errormsg(), EINVAL);
		fn = run_pmemobj;
	}
#endif
	else if (!strcmp(sys_name, "files")) {
		fn = run_files;
	} else {
		die("--system: pvm, pmemobj (if built with it) or files", EINVAL);
	}
	pthread_barrier_init(&bar, NULL, (unsigned)threads);
	for (int i = 0; i < threads; i++) {
		ws[i] = (struct worker){.id = i, .bar = &bar, .pp = pp};
#ifdef CHELL_HAVE_PMEMOBJ
		ws[i].pop = pop;
#endif
		pthread_create(&th[i], NULL, fn, &ws[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("{\"bench\": \"objects\", \"system\": \"%s\", \"size\": %" PRIu64 ", \"threads\": %d, \"count\": %" PRIu64,
	       sys_name, size, threads, count);
	for (int ph = 0; ph < P_N; ph++) {
		double slowest = 0, lat = 0;
		for (int i = 0; i < threads; i++) {
			if (ws[i].t[ph] > slowest)
				slowest = ws[i].t[ph];
			if (ws[i].lat[ph] > lat)
				lat = ws[i].lat[ph];
		}
		/* Throughput of all threads over the phase; latency of one
		 * operation (median batch, the slower thread's). */
		printf(", \"%s_ops\": %.1f, \"%s_ns\": %.1f", phase_name[ph], (double)count * threads / slowest,
		       phase_name[ph], lat * 1e9);
	}
	printf("}\n");
	if (pp) {
		pvm_pool_close(pp);
		unlink(path);
	}
#ifdef CHELL_HAVE_PMEMOBJ
	if (pop) {
		pmemobj_close(pop);
		unlink(path);
	}
#endif
	return 0;
}

/* ------------------------------------------------------------ kv */

static void key_of(uint64_t k, char *key)
{
	snprintf(key, 17, "%016" PRIu64, k % (uint64_t)10000000000000000ULL); /* 16 bytes */
}

struct kvops {
	void (*put)(void *ctx, const char *k, const char *v, int sync);
	int (*get)(void *ctx, const char *k, char *v);
	void *ctx;
};

static int pvm_get(void *ctx, const char *k, char *v)
{
	void *p;
	if (pvm_open(ctx, k, &p, NULL))
		return 0;
	memcpy(v, p, 100);
	return 1;
}

static void pvm_put(void *ctx, const char *k, const char *v, int sync)
{
	struct pvm_app *a = ctx;
	void *p;
	(void)sync; /* every pVM commit is durable */
	int rc = pvm_tx_begin(a);
	if (!rc && pvm_open(a, k, &p, NULL) == 0) {
		rc = pvm_tx_add_ptr(a, p, 0, 100); /* the object just opened */
	} else if (!rc) {
		rc = pvm_create(a, k, 100, &p);
	}
	if (!rc)
		memcpy(p, v, 100);
	if (rc)
		pvm_tx_abort(a);
	else if (pvm_tx_commit(a))
		die("pvm kv commit", EIO);
	if (rc)
		die("pvm kv put", -rc);
}

/* pvm-table: the store a database would build on pVM instead of an object
 * per key: one object holding an open-addressing hash table of 128-byte
 * slots, key and value inline (a persistent hash map, as pmemkv's engines
 * on libpmemobj). A put is one transaction that logs what it changes
 * through pvm_tx_add_ptr (the value's 100 bytes for an existing key; for
 * a new one the slot's first line, the second taken unlogged) and commits: durable when it
 * returns, as every pVM commit. The table is sized for the run (at least
 * 4 slots per key it can get, so probes stay short) and never grows. */
struct kvslot {
	uint8_t used, klen;
	uint16_t vlen;
	uint32_t pad;
	char key[16];
	char val[104];
};
_Static_assert(sizeof(struct kvslot) == 128, "a slot is two cache lines");
struct kvtab {
	struct pvm_app *a;
	struct kvslot *s;
	uint64_t mask;
};

static uint64_t key_hash(const char *k)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a, then a final mix */
	for (int i = 0; i < 16; i++)
		h = (h ^ (uint8_t)k[i]) * 1099511628211ULL;
	return (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ULL;
}

/* The slot of key k, or the empty slot where it goes. */
static struct kvslot *kvt_find(struct kvtab *t, const char *k)
{
	for (uint64_t i = key_hash(k) & t->mask, n = 0; n <= t->mask; i = (i + 1) & t->mask, n++)
		if (!t->s[i].used || !memcmp(t->s[i].key, k, 16))
			return &t->s[i];
	die("pvm-table full", ENOSPC);
	return NULL;
}

static void kvt_put(void *ctx, const char *k, const char *v, int sync)
{
	struct kvtab *t = ctx;
	(void)sync; /* every pVM commit is durable */
	/* The slot's cache miss overlaps the transaction's start. */
	__builtin_prefetch(&t->s[key_hash(k) & t->mask], 1);
	int rc = pvm_tx_begin(t->a);
	struct kvslot *e = kvt_find(t, k);
	uint64_t at = (uint64_t)((char *)e - (char *)t->s);
	if (!rc && e->used) {
		rc = pvm_tx_add_ptr(t->a, t->s, at + offsetof(struct kvslot, val), 100);
	} else if (!rc) {
		/* A free slot: only its first line (`used`, the key and the
		 * value's start) is logged; the rest of the value needs no old
		 * image (PVM_TX_NO_SNAPSHOT: flushed at commit). The split is on
		 * the line: a line in both kinds of range is flushed twice,
		 * which costs a second write-back wait (~130 ns here). */
		rc = pvm_tx_add_ptr(t->a, t->s, at, 64);
		if (!rc)
			rc = pvm_tx_xadd_ptr(t->a, t->s, at + 64, sizeof(*e) - 64, PVM_TX_NO_SNAPSHOT);
		if (!rc) {
			memcpy(e->key, k, 16);
			e->klen = 16;
			e->vlen = 100;
			e->used = 1;
		}
	}
	if (!rc)
		memcpy(e->val, v, 100);
	if (rc)
		pvm_tx_abort(t->a);
	else if (pvm_tx_commit(t->a))
		die("pvm-table commit", EIO);
	if (rc)
		die("pvm-table put", -rc);
}

static int kvt_get(void *ctx, const char *k, char *v)
{
	struct kvslot *e = kvt_find(ctx, k);
	if (!e->used)
		return 0;
	memcpy(v, e->val, 100);
	return 1;
}

#ifdef CHELL_HAVE_LEVELDB
struct ldb {
	leveldb_t *db;
	leveldb_writeoptions_t *wo, *wos;
	leveldb_readoptions_t *ro;
};
static void ldb_put(void *ctx, const char *k, const char *v, int sync)
{
	struct ldb *l = ctx;
	char *err = NULL;
	leveldb_put(l->db, sync ? l->wos : l->wo, k, 16, v, 100, &err);
	if (err)
		die(err, EIO);
}
static int ldb_get(void *ctx, const char *k, char *v)
{
	struct ldb *l = ctx;
	char *err = NULL;
	size_t len;
	char *r = leveldb_get(l->db, l->ro, k, 16, &len, &err);
	if (!r)
		return 0;
	memcpy(v, r, len < 100 ? len : 100);
	leveldb_free(r);
	return 1;
}
#endif

static int cmd_kv(void)
{
	struct kvops ops = {0};
	char path[4200], err[256];
	struct pvm_pool *pp = NULL;
	struct pvm_app *a = NULL;
#ifdef CHELL_HAVE_LEVELDB
	struct ldb l = {0};
#endif
	struct kvtab kt = {0};
	if (!strcmp(sys_name, "pvm") || !strcmp(sys_name, "pvm-table")) {
		snprintf(path, sizeof path, "%s/kv.pvm", dir);
		unlink(path);
		struct pvm_pool_opts o = {.max_size = (num * 2 + 1024) * 4096 * 2 + (64 << 20), .initial_size = (num * 2 + 1024) * 4096 * 2 + (64 << 20), .journals = 4,
					  .journal_entries = 4096};
		if (pvm_pool_create(path, &o, &pp, err, sizeof err) ||
		    pvm_app_open(pp, "kv", NULL, PVM_APP_CREATE, &a, err, sizeof err))
			die(err, EINVAL);
		ops = (struct kvops){pvm_put, pvm_get, a};
		if (!strcmp(sys_name, "pvm-table")) {
			/* Keys: num (fillseq) + num (fillrandom) + num/10 (fillsync). */
			uint64_t slots = 1;
			while (slots < num * 9)
				slots <<= 1;
			void *p;
			if (pvm_tx_begin(a) || pvm_create(a, "table", slots * sizeof(struct kvslot), &p) ||
			    pvm_tx_commit(a))
				die("pvm-table create", ENOSPC);
			kt = (struct kvtab){a, p, slots - 1};
			ops = (struct kvops){kvt_put, kvt_get, &kt};
		}
	}
#ifdef CHELL_HAVE_LEVELDB
	else if (!strcmp(sys_name, "leveldb")) {
		snprintf(path, sizeof path, "%s/kv.leveldb", dir);
		char cmd[4300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
		if (system(cmd) != 0)
			die("rm", EIO);
		leveldb_options_t *opt = leveldb_options_create();
		leveldb_options_set_create_if_missing(opt, 1);
		char *e = NULL;
		l.db = leveldb_open(opt, path, &e);
		if (!l.db)
			die(e, EIO);
		l.wo = leveldb_writeoptions_create();
		l.wos = leveldb_writeoptions_create();
		leveldb_writeoptions_set_sync(l.wos, 1);
		leveldb_writeoptions_set_sync(l.wo, (unsigned char)sync_on);
		l.ro = leveldb_readoptions_create();
		ops = (struct kvops){ldb_put, ldb_get, &l};
	}
#endif
	else {
		die("--system: pvm, pvm-table or leveldb (if built with it)", EINVAL);
	}
	char key[17], val[100];
	memset(val, 'v', sizeof val);
	uint64_t s = 88172645463325252ULL;
	struct {
		const char *name;
		uint64_t n;
		double t, lat;
	} r[5] = {{"fillseq", num, 0}, {"fillrandom", num, 0}, {"fillsync", num / 10, 0},
		  {"overwrite", num, 0}, {"readrandom", num, 0}};
	uint64_t found = 0;
	struct batches bt = {0};
	/* Each benchmark: seconds in r[b].t (throughput), the median batch in
	 * r[b].lat (latency, robust to preemption). */
#define KV_RUN(b, body)                                                                                            \
	do {                                                                                                       \
		double t0_ = now();                                                                                \
		bt_start(&bt, r[b].n);                                                                             \
		for (uint64_t i = 0; i < r[b].n; i++) {                                                            \
			body;                                                                                      \
			bt_tick(&bt, r[b].n);                                                                      \
		}                                                                                                  \
		r[b].t = now() - t0_;                                                                              \
		r[b].lat = median_of(bt.v, bt.n);                                                                  \
	} while (0)
	KV_RUN(0, { key_of(i, key); ops.put(ops.ctx, key, val, sync_on); });            /* fillseq: keys in order */
	KV_RUN(1, { key_of(num + rnd(&s) % (num * 8), key); ops.put(ops.ctx, key, val, sync_on); }); /* new keys */
	KV_RUN(2, { key_of(num * 10 + rnd(&s) % num, key); ops.put(ops.ctx, key, val, 1); });          /* fillsync */
	KV_RUN(3, { key_of(rnd(&s) % num, key); val[0] = (char)i; ops.put(ops.ctx, key, val, sync_on); }); /* overwrite */
	KV_RUN(4, { key_of(rnd(&s) % num, key); found += (uint64_t)ops.get(ops.ctx, key, val); });     /* readrandom */
	free(bt.v);
	if (found != num)
		die("readrandom missed keys", ENOENT);
	printf("{\"bench\": \"kv\", \"system\": \"%s\", \"sync\": %d, \"num\": %" PRIu64, sys_name, sync_on, num);
	for (int i = 0; i < 5; i++)
		printf(", \"%s_us\": %.3f, \"%s_ops\": %.1f, \"%s_ops_phase\": %.1f", r[i].name, r[i].lat * 1e6,
		       r[i].name, 1.0 / r[i].lat, r[i].name, (double)r[i].n / r[i].t);
	printf("}\n");
	if (a) {
		pvm_app_close(a);
		pvm_pool_close(pp);
		unlink(path);
	}
#ifdef CHELL_HAVE_LEVELDB
	if (l.db) {
		leveldb_close(l.db);
		char cmd[4300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
		if (system(cmd) != 0)
			die("rm", EIO);
	}
#endif
	return 0;
}

/* ------------------------------------------------------------ snappy */

#ifdef CHELL_HAVE_SNAPPY
static double tv(struct timeval t)
{
	return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

static int cmd_snappy(void)
{
	FILE *f = fopen(corpus, "r");
	if (!f)
		die(corpus, errno);
	char line[4096];
	size_t n = 0, cap = 0;
	struct {
		char *data;
		size_t len;
	} *in = NULL;
	uint64_t total = 0;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		int fd = open(line, O_RDONLY);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			in = realloc(in, cap * sizeof(*in));
		}
		in[n].len = (size_t)st.st_size;
		in[n].data = malloc(in[n].len + 1);
		ssize_t r = read(fd, in[n].data, in[n].len);
		close(fd);
		if (r != (ssize_t)in[n].len)
			continue;
		total += in[n].len;
		n++;
	}
	fclose(f);
	char path[4200], err[256];
	struct pvm_pool *pp = NULL;
	struct pvm_app *a = NULL;
	/* pvm: the pool allocated at creation (before the timed phase, as a
	 * libpmemobj pool would be); pvm-grow: it starts at 16 MiB and grows
	 * during the phase (the page allocation then counts as kernel time). */
	int use_pvm = !strncmp(sys_name, "pvm", 3), grow = !strcmp(sys_name, "pvm-grow");
	if (use_pvm) {
		snprintf(path, sizeof path, "%s/snappy.pvm", dir);
		unlink(path);
		uint64_t max = total * 2 + (uint64_t)n * 8192 + (256 << 20);
		struct pvm_pool_opts o = {.max_size = max, .initial_size = grow ? 0 : max};
		if (pvm_pool_create(path, &o, &pp, err, sizeof err) ||
		    pvm_app_open(pp, "snappy", NULL, PVM_APP_CREATE, &a, err, sizeof err))
			die(err, EINVAL);
	} else {
		snprintf(path, sizeof path, "%s/snappy.out", dir);
		mkdir(path, 0755);
	}
	size_t maxout = 0;
	for (size_t i = 0; i < n; i++)
		if (snappy_max_compressed_length(in[i].len) > maxout)
			maxout = snappy_max_compressed_length(in[i].len);
	char *cbuf = malloc(maxout);
	struct rusage r0, r1;
	uint64_t outbytes = 0;
	getrusage(RUSAGE_SELF, &r0);
	double t0 = now();
	for (size_t i = 0; i < n; i++) {
		size_t clen = maxout;
		if (snappy_compress(in[i].data, in[i].len, cbuf, &clen) != SNAPPY_OK)
			die("snappy", EIO);
		outbytes += clen;
		char name[64];
		snprintf(name, sizeof name, "c%zu.snappy", i);
		if (use_pvm) {
			void *p;
			if (pvm_tx_begin(a) || pvm_create(a, name, clen, &p))
				die("pvm create", ENOSPC);
			memcpy(p, cbuf, clen);
			if (pvm_tx_commit(a))
				die("pvm commit", EIO);
		} else {
			char fp[4300];
			snprintf(fp, sizeof fp, "%s/%s", path, name);
			int fd = open(fp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd < 0)
				die(fp, errno);
			write_all(fd, cbuf, clen, 0);
			fsync(fd);
			close(fd);
		}
	}
	double t = now() - t0;
	getrusage(RUSAGE_SELF, &r1);
	printf("{\"bench\": \"snappy\", \"system\": \"%s\", \"files\": %zu, \"in_bytes\": %" PRIu64
	       ", \"out_bytes\": %" PRIu64 ", \"seconds\": %.4f, \"mb_per_s\": %.1f, \"user_s\": %.4f, \"sys_s\": %.4f}\n",
	       sys_name, n, total, outbytes, t, (double)total / t / 1e6, tv(r1.ru_utime) - tv(r0.ru_utime),
	       tv(r1.ru_stime) - tv(r0.ru_stime));
	if (use_pvm) {
		pvm_app_close(a);
		pvm_pool_close(pp);
		unlink(path);
	} else {
		char cmd[4300];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
		if (system(cmd) != 0)
			die("rm", EIO);
	}
	return 0;
}
#endif

/* ------------------------------------------------------------ pages */

static int cmd_pages(void)
{
	size_t len = (size_t)mb << 20, npages = len / 4096;
	uint8_t *m = NULL;
	char path[4200], err[256];
	struct pvm_pool *pp = NULL;
	struct pvm_app *a = NULL;
	int fd = -1;
	if (!strcmp(kind, "anon")) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	} else if (!strcmp(kind, "tmpfs")) {
		snprintf(path, sizeof path, "%s/pages.tmp", dir);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || ftruncate(fd, (off_t)len) < 0)
			die(path, errno);
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	} else if (!strcmp(kind, "pvm")) {
		snprintf(path, sizeof path, "%s/pages.pvm", dir);
		unlink(path);
		/* The pool starts small and grows: the object's pages are new
		 * file pages, first touched here, as a fresh object's are. */
		struct pvm_pool_opts o = {.max_size = len * 2 + (64 << 20), .initial_size = 1 << 20};
		void *p;
		if (pvm_pool_create(path, &o, &pp, err, sizeof err) ||
		    pvm_app_open(pp, "pages", NULL, PVM_APP_CREATE, &a, err, sizeof err) ||
		    pvm_tx_begin(a) || pvm_create(a, "region", len, &p))
			die(err, EINVAL);
		m = p;
	} else if (!strcmp(kind, "tierheap")) {
		/* The tiered heap's non-persistent pages (npmalloc): run under
		 * `chell tier run`, whose launcher allocated the slow tier's
		 * pages before the program started. */
		void *(*npm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "npmalloc");
		if (!npm)
			die("--kind tierheap: npmalloc not found (run under chell tier run)", ENOENT);
		m = npm(len);
	} else {
		die("--kind anon|tmpfs|pvm|tierheap", EINVAL);
	}
	if (m == MAP_FAILED || !m)
		die("mmap", errno);
	uint32_t *order = malloc(npages * sizeof(*order));
	uint64_t s = 2463534242ULL;
	for (size_t i = 0; i < npages; i++)
		order[i] = (uint32_t)i;
	for (size_t i = npages - 1; i > 0; i--) {
		size_t j = rnd(&s) % (i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	/* pvm: the object was created with zeroed pages (its fill already
	 * touched them); measure a fresh file mapping's cost as the others by
	 * dropping them first. */
	if (pp)
		madvise(m, len, MADV_DONTNEED);
	double t0 = now();
	for (size_t i = 0; i < npages; i++)
		m[(size_t)order[i] * 4096] = 1;
	double first = now() - t0;
	t0 = now();
	for (size_t i = 0; i < npages; i++)
		m[(size_t)order[i] * 4096 + 64] = 2;
	double again = now() - t0;
	printf("{\"bench\": \"pages\", \"kind\": \"%s\", \"mb\": %" PRIu64 ", \"first_ns\": %.1f, \"mapped_ns\": %.1f}\n",
	       kind, mb, first / (double)npages * 1e9, again / (double)npages * 1e9);
	if (a) {
		pvm_tx_commit(a);
		pvm_app_close(a);
		pvm_pool_close(pp);
		unlink(path);
	} else if (strcmp(kind, "tierheap")) {
		munmap(m, len);
		if (fd >= 0) {
			close(fd);
			unlink(path);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	const char *cmd = argv[1];
	static const struct option lo[] = {{"system", required_argument, 0, 's'}, {"dir", required_argument, 0, 'd'},
					   {"size", required_argument, 0, 'z'},   {"count", required_argument, 0, 'c'},
					   {"threads", required_argument, 0, 't'}, {"num", required_argument, 0, 'n'},
					   {"sync", required_argument, 0, 'y'},   {"corpus", required_argument, 0, 'C'},
					   {"kind", required_argument, 0, 'k'},   {"mb", required_argument, 0, 'm'},
					   {0, 0, 0, 0}};
	int c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': sys_name = optarg; break;
		case 'd': dir = optarg; break;
		case 'z': size = strtoull(optarg, NULL, 0); break;
		case 'c': count = strtoull(optarg, NULL, 0); break;
		case 't': threads = atoi(optarg); break;
		case 'n': num = strtoull(optarg, NULL, 0); break;
		case 'y': sync_on = atoi(optarg); break;
		case 'C': corpus = optarg; break;
		case 'k': kind = optarg; break;
		case 'm': mb = strtoull(optarg, NULL, 0); break;
		default: return 2;
		}
	}
	if (!strcmp(cmd, "objects"))
		return cmd_objects();
	if (!strcmp(cmd, "kv"))
		return cmd_kv();
#ifdef CHELL_HAVE_SNAPPY
	if (!strcmp(cmd, "snappy"))
		return corpus ? cmd_snappy() : 2;
#endif
	if (!strcmp(cmd, "pages"))
		return cmd_pages();
	fprintf(stderr, "chell_bench_pvm: unknown or unavailable command '%s'\n", cmd);
	return 2;
}
