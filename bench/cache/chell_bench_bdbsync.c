/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_bdbsync - Berkeley DB (Debian's libdb 5.3, unmodified) B-tree
 * where every update is made durable before the next, as in chell.md
 * section 5 (figure 11: 1..N threads doing lookups and updates, "Berkeley-DB
 * calls fdsync() for each write operation"). Two ways (--sync):
 *   txn     (default) transactional: each put is its own transaction; the
 *           commit writes the log records and calls fdatasync on the log
 *           file (libdb's __os_fsync uses fdatasync on Linux); data pages
 *           reach the file at eviction and at the final checkpoint;
 *   dbsync  no transactions: each put is followed by DB->sync, which writes
 *           the dirty pages with pwrite, then fdatasync's the database file.
 *           (libdb's sync sleeps a second when another thread pins a page it
 *           must write, so with several threads this mode stalls; kept for
 *           one-thread comparisons.)
 * On the page cache every fdatasync waits for the slow device; in cache mode
 * it only has to make the cache lines and the pool metadata durable.
 *
 * One process, one environment (DB_PRIVATE: the buffer pool, lock and
 * transaction tables live in the heap, so no region files are mapped in the
 * database directory; the log files and the database are ordinary files in
 * --dir), DB_THREAD handles shared by --threads threads, page locking with the
 * default deadlock detector (an operation that loses a deadlock is retried).
 *   load  insert --keys keys (key order) without syncing, then a checkpoint;
 *   mix   for --seconds, each thread repeats: a random key; --read-pct % of
 *         the time a get (checked: the record names its key), otherwise a
 *         durable put that changes the record.
 * Prints one JSON object (ops/s of each phase, per-thread counts).
 *
 *   chell_bench_bdbsync --dir D [--sync txn|dbsync] [--keys 20000] [--vsize 500]
 *       [--threads 1] [--seconds 5] [--read-pct 35] [--cache-kb 16384] [--cpu-base -1]
 */
#include <db.h>
#include <dirent.h>
#include <getopt.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../direct/bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_bdbsync --dir D [--sync txn|dbsync] [--keys 20000] [--vsize 500]\n"
	"      [--threads 1] [--seconds 5] [--read-pct 35] [--cache-kb 16384] [--cpu-base -1]\n"
	"\n"
	"chell_bench_bdbsync - Berkeley DB (Debian's libdb 5.3, unmodified) B-tree\n"
	"where every update is made durable before the next, as in chell.md section 5\n"
	"(figure 11: 1..N threads doing lookups and updates, \"Berkeley-DB calls\n"
	"fdsync() for each write operation\"). Two ways (--sync): txn     (default)\n"
	"transactional: each put is its own transaction; the commit writes the log\n"
	"records and calls fdatasync on the log file (libdb's __os_fsync uses\n"
	"fdatasync on Linux); data pages reach the file at eviction and at the final\n"
	"checkpoint; dbsync  no transactions: each put is followed by DB->sync, which\n"
	"writes the dirty pages with pwrite, then fdatasync's the database file.\n"
	"(libdb's sync sleeps a second when another thread pins a page it must write,\n"
	"so with several threads this mode stalls; kept for one-thread comparisons.)\n"
	"On the page cache every fdatasync waits for the slow device; in cache mode\n"
	"it only has to make the cache lines and the pool metadata durable.\n"
	"(details: the comment at the top of chell_bench_bdbsync.c)\n";

#define DB_NAME "bench.bdb"
#define MAX_THREADS 64

struct worker {
	pthread_t tid;
	int idx;
	uint64_t gets, puts, deadlocks;
	uint64_t put_ns; /* time in put + sync, summed */
	uint64_t max_put_ns;
};

static DB *g_db;
static int g_txn = 1; /* --sync txn */
static long g_keys, g_vsize, g_read_pct;
static int g_cpu_base = -1;
static int g_ncpu = 1;
static uint64_t g_deadline_ns;

static void dbcheck(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "chell_bench_bdbsync: %s: %s\n", what, db_strerror(rc));
		exit(1);
	}
}

static void make_key(char *kbuf, size_t len, DBT *k, long i)
{
	memset(k, 0, sizeof *k);
	k->data = kbuf;
	k->size = (u_int32_t)snprintf(kbuf, len, "key%012ld", i);
}

/* One get, checked; returns 0, or DB_LOCK_DEADLOCK to retry. */
static int do_get(long i, unsigned char *buf)
{
	char kbuf[32];
	DBT k, v;
	make_key(kbuf, sizeof kbuf, &k, i);
	memset(&v, 0, sizeof v);
	v.data = buf;
	v.ulen = (u_int32_t)g_vsize;
	v.flags = DB_DBT_USERMEM; /* required for DB_THREAD handles */
	int rc = g_db->get(g_db, NULL, &k, &v, 0);
	if (rc == DB_LOCK_DEADLOCK)
		return rc;
	dbcheck(rc, "get");
	long got;
	memcpy(&got, buf, sizeof got);
	if (v.size != (u_int32_t)g_vsize || got != i) {
		fprintf(stderr, "chell_bench_bdbsync: get of key %ld returned a wrong record\n", i);
		exit(1);
	}
	return 0;
}

static int do_put(long i, unsigned char *val, uint64_t stamp)
{
	char kbuf[32];
	DBT k, v;
	make_key(kbuf, sizeof kbuf, &k, i);
	memset(&v, 0, sizeof v);
	memcpy(val, &i, sizeof i); /* the record names its key */
	memcpy(val + sizeof i, &stamp, sizeof stamp); /* and changes every put */
	v.data = val;
	v.size = (u_int32_t)g_vsize;
	int rc = g_db->put(g_db, NULL, &k, &v, 0);
	if (rc == DB_LOCK_DEADLOCK)
		return rc;
	dbcheck(rc, "put");
	/* txn: the put was its own transaction, committed with a log flush and
	 * fdatasync. dbsync: dirty pages out, then fdatasync (DB->sync). */
	if (!g_txn)
		dbcheck(g_db->sync(g_db, 0), "sync");
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	if (g_cpu_base >= 0)
		bu_pin((g_cpu_base + w->idx) % g_ncpu);
	unsigned char *buf = malloc((size_t)g_vsize), *val = malloc((size_t)g_vsize);
	if (!buf || !val)
		bu_fail("out of memory");
	uint64_t rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(w->idx + 1);
	for (long j = 0; j < g_vsize; j++)
		val[j] = (unsigned char)bu_rand(&rng);
	uint64_t stamp = 0;
	while (bu_now_ns() < g_deadline_ns) {
		long i = (long)bu_below(&rng, (uint64_t)g_keys);
		if ((long)bu_below(&rng, 100) < g_read_pct) {
			while (do_get(i, buf) == DB_LOCK_DEADLOCK)
				w->deadlocks++;
			w->gets++;
		} else {
			uint64_t t0 = bu_now_ns();
			while (do_put(i, val, ++stamp) == DB_LOCK_DEADLOCK)
				w->deadlocks++;
			uint64_t dt = bu_now_ns() - t0;
			w->put_ns += dt;
			if (dt > w->max_put_ns)
				w->max_put_ns = dt;
			w->puts++;
		}
	}
	free(buf);
	free(val);
	return NULL;
}

/* A fresh start: the database and the log files of an earlier run go (an
 * old log would make the environment replay or continue it). */
static void remove_old(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		bu_die(dir);
	char p[4096];
	for (struct dirent *e; (e = readdir(d));) {
		if (strcmp(e->d_name, DB_NAME) && strncmp(e->d_name, "log.", 4))
			continue;
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		if (unlink(p) != 0)
			bu_die(p);
	}
	closedir(d);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *dir = NULL;
	long keys = 20000, vsize = 500, read_pct = 35, cache_kb = 16384;
	int threads = 1;
	double seconds = 5;
	static const struct option lo[] = {
		{ "dir", 1, 0, 'd' }, { "keys", 1, 0, 'k' }, { "vsize", 1, 0, 'v' },
		{ "threads", 1, 0, 't' }, { "seconds", 1, 0, 's' }, { "read-pct", 1, 0, 'r' },
		{ "cache-kb", 1, 0, 'C' }, { "cpu-base", 1, 0, 'c' }, { "sync", 1, 0, 'S' }, { 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'd': dir = optarg; break;
		case 'k': keys = atol(optarg); break;
		case 'v': vsize = atol(optarg); break;
		case 't': threads = atoi(optarg); break;
		case 's': seconds = atof(optarg); break;
		case 'r': read_pct = atol(optarg); break;
		case 'C': cache_kb = atol(optarg); break;
		case 'c': g_cpu_base = atoi(optarg); break;
		case 'S':
			if (!strcmp(optarg, "txn") || !strcmp(optarg, "dbsync")) {
				g_txn = !strcmp(optarg, "txn");
				break;
			}
			fprintf(stderr, "chell_bench_bdbsync: --sync is txn or dbsync\n");
			return 2;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!dir || keys < 1 || vsize < 16 || threads < 1 || threads > MAX_THREADS || seconds <= 0 ||
	    read_pct < 0 || read_pct > 100 || cache_kb < 64) {
		fprintf(stderr, "chell_bench_bdbsync: bad arguments (--dir is required; --threads 1..%d, "
				"--vsize >= 16, --cache-kb >= 64)\n", MAX_THREADS);
		return 2;
	}
	g_keys = keys;
	g_vsize = vsize;
	g_read_pct = read_pct;
	long nc = sysconf(_SC_NPROCESSORS_ONLN);
	g_ncpu = nc > 0 ? (int)nc : 1;

	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, DB_NAME);
	remove_old(dir);

	DB_ENV *env;
	dbcheck(db_env_create(&env, 0), "db_env_create");
	dbcheck(env->set_cachesize(env, 0, (u_int32_t)cache_kb * 1024, 1), "set_cachesize");
	dbcheck(env->set_lk_detect(env, DB_LOCK_DEFAULT), "set_lk_detect");
	u_int32_t eflags = DB_CREATE | DB_PRIVATE | DB_INIT_MPOOL | DB_INIT_LOCK | DB_THREAD;
	if (g_txn) {
		eflags |= DB_INIT_TXN | DB_INIT_LOG;
		dbcheck(env->set_lg_max(env, 10u << 20), "set_lg_max"); /* the paper's 10 MB logs */
		/* The load is not the measurement: its commits need not sync. */
		dbcheck(env->set_flags(env, DB_TXN_NOSYNC, 1), "set_flags");
	}
	dbcheck(env->open(env, dir, eflags, 0), "env open");
	dbcheck(db_create(&g_db, env, 0), "db_create");
	dbcheck(g_db->open(g_db, NULL, DB_NAME, NULL, DB_BTREE,
			   DB_CREATE | DB_THREAD | (g_txn ? DB_AUTO_COMMIT : 0), 0644), "open");

	unsigned char *val = malloc((size_t)vsize);
	if (!val)
		bu_fail("out of memory");
	uint64_t rng = 7;
	for (long j = 0; j < vsize; j++)
		val[j] = (unsigned char)bu_rand(&rng);
	/* Load: every key once, one sync at the end (not timed as a target). */
	uint64_t t0 = bu_now_ns();
	for (long i = 0; i < keys; i++) {
		char kbuf[32];
		DBT k, v;
		make_key(kbuf, sizeof kbuf, &k, i);
		memset(&v, 0, sizeof v);
		memcpy(val, &i, sizeof i);
		v.data = val;
		v.size = (u_int32_t)vsize;
		dbcheck(g_db->put(g_db, NULL, &k, &v, 0), "load put");
	}
	dbcheck(g_db->sync(g_db, 0), "load sync");
	if (g_txn) {
		dbcheck(env->txn_checkpoint(env, 0, 0, 0), "checkpoint");
		dbcheck(env->set_flags(env, DB_TXN_NOSYNC, 0), "set_flags"); /* every commit syncs */
	}
	uint64_t t_load = bu_now_ns() - t0;
	free(val);

	struct worker *ws = calloc((size_t)threads, sizeof *ws);
	if (!ws)
		bu_fail("out of memory");
	t0 = bu_now_ns();
	g_deadline_ns = t0 + (uint64_t)(seconds * 1e9);
	for (int t = 0; t < threads; t++) {
		ws[t].idx = t;
		if (pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]) != 0)
			bu_fail("pthread_create");
	}
	for (int t = 0; t < threads; t++)
		pthread_join(ws[t].tid, NULL);
	uint64_t t_mix = bu_now_ns() - t0;
	if (g_txn)
		dbcheck(env->txn_checkpoint(env, 0, 0, 0), "checkpoint");
	dbcheck(g_db->close(g_db, 0), "close");
	dbcheck(env->close(env, 0), "env close");

	uint64_t gets = 0, puts = 0, dl = 0, put_ns = 0, max_put = 0;
	for (int t = 0; t < threads; t++) {
		gets += ws[t].gets;
		puts += ws[t].puts;
		dl += ws[t].deadlocks;
		put_ns += ws[t].put_ns;
		if (ws[t].max_put_ns > max_put)
			max_put = ws[t].max_put_ns;
	}
	struct stat st;
	long long dbsize = stat(path, &st) == 0 ? (long long)st.st_size : -1;
	int maj, min, pat;
	db_version(&maj, &min, &pat);
	printf("{\"program\":\"chell_bench_bdbsync\",\"sync\":\"%s\",\"libdb_version\":\"%d.%d.%d\",\"keys\":%ld,"
	       "\"vsize\":%ld,\"read_pct\":%ld,\"cache_kb\":%ld,\"threads\":%d,\"db_bytes\":%lld,"
	       "\"provider\":{\"pread\":\"%s\",\"pwrite\":\"%s\",\"fdatasync\":\"%s\"},\"phases\":{"
	       "\"load\":{\"ops\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f},"
	       "\"mix\":{\"ops\":%llu,\"gets\":%llu,\"puts\":%llu,\"deadlocks\":%llu,"
	       "\"seconds\":%.6f,\"ops_per_s\":%.1f,\"put_sync_mean_us\":%.2f,\"put_sync_max_us\":%.2f}},"
	       "\"per_thread_ops\":[",
	       g_txn ? "txn" : "dbsync", maj, min, pat, keys, vsize, read_pct, cache_kb, threads, dbsize, bu_provider("pread"),
	       bu_provider("pwrite"), bu_provider("fdatasync"), keys, (double)t_load / 1e9,
	       (double)keys * 1e9 / (double)t_load, (unsigned long long)(gets + puts),
	       (unsigned long long)gets, (unsigned long long)puts, (unsigned long long)dl,
	       (double)t_mix / 1e9, (double)(gets + puts) * 1e9 / (double)t_mix,
	       puts ? (double)put_ns / (double)puts / 1e3 : 0.0, (double)max_put / 1e3);
	for (int t = 0; t < threads; t++)
		printf("%s%llu", t ? "," : "", (unsigned long long)(ws[t].gets + ws[t].puts));
	printf("]}\n");
	free(ws);
	return 0;
}
