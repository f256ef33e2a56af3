/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_bdb - Berkeley DB (Debian's libdb 5.3, unmodified) B-tree
 * workload as in the paper's section 3.3: one thread, no environment (the
 * database's own private buffer pool, default size, so pages are read and
 * written back through pread/pwrite on the file), --vsize byte records over a
 * fixed key space of --keys keys.
 *   load   insert every key once (sequential key order);
 *   mix    --ops operations on uniformly random keys, --read-pct % gets
 *          (each checked against the key it asked for), the rest puts that
 *          overwrite the record; then DB->sync, inside the timed region.
 * Prints one JSON object with the time and ops/s of each phase.
 *
 *   chell_bench_bdb --db /dev/shm/x/bench.bdb [--keys 100000] [--ops 200000]
 *       [--read-pct 35] [--vsize 500] [--cache-kb 0 (library default)] [--cpu N]
 */
#include <db.h>
#include <getopt.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_bdb --db /dev/shm/x/bench.bdb [--keys 100000] [--ops 200000]\n"
	"      [--read-pct 35] [--vsize 500] [--cache-kb 0 (library default)] [--cpu N]\n"
	"\n"
	"chell_bench_bdb - Berkeley DB (Debian's libdb 5.3, unmodified) B-tree\n"
	"workload as in the paper's section 3.3: one thread, no environment (the\n"
	"database's own private buffer pool, default size, so pages are read and\n"
	"written back through pread/pwrite on the file), --vsize byte records over a\n"
	"fixed key space of --keys keys. load   insert every key once (sequential key\n"
	"order); mix    --ops operations on uniformly random keys, --read-pct % gets\n"
	"(each checked against the key it asked for), the rest puts that overwrite\n"
	"the record; then DB->sync, inside the timed region. Prints one JSON object\n"
	"with the time and ops/s of each phase.\n"
	"(details: the comment at the top of chell_bench_bdb.c)\n";

static void dbcheck(int rc, const char *what)
{
	if (rc != 0) {
		fprintf(stderr, "chell_bench_bdb: %s: %s\n", what, db_strerror(rc));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *path = NULL;
	long keys = 100000, ops = 200000, read_pct = 35, vsize = 500, cache_kb = 0;
	int cpu = -1;
	static const struct option lo[] = {
		{ "db", 1, 0, 'd' }, { "keys", 1, 0, 'k' }, { "ops", 1, 0, 'o' },
		{ "read-pct", 1, 0, 'r' }, { "vsize", 1, 0, 'v' }, { "cache-kb", 1, 0, 'C' },
		{ "cpu", 1, 0, 'c' }, { 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'd': path = optarg; break;
		case 'k': keys = atol(optarg); break;
		case 'o': ops = atol(optarg); break;
		case 'r': read_pct = atol(optarg); break;
		case 'v': vsize = atol(optarg); break;
		case 'C': cache_kb = atol(optarg); break;
		case 'c': cpu = atoi(optarg); break;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!path || keys < 1 || ops < 0 || read_pct < 0 || read_pct > 100 || vsize < 16 || cache_kb < 0) {
		fprintf(stderr, "chell_bench_bdb: bad arguments (--db is required)\n");
		return 2;
	}
	bu_pin(cpu);
	unlink(path);

	DB *db;
	dbcheck(db_create(&db, NULL, 0), "db_create");
	if (cache_kb)
		dbcheck(db->set_cachesize(db, 0, (u_int32_t)cache_kb * 1024, 1), "set_cachesize");
	dbcheck(db->open(db, NULL, path, NULL, DB_BTREE, DB_CREATE, 0644), "open");

	unsigned char *val = malloc((size_t)vsize);
	if (!val)
		bu_fail("out of memory");
	uint64_t rng = 7;
	for (long i = 0; i < vsize; i++)
		val[i] = (unsigned char)bu_rand(&rng);
	char kbuf[32];
	DBT k, v;

	uint64_t t0 = bu_now_ns();
	for (long i = 0; i < keys; i++) {
		memset(&k, 0, sizeof k);
		memset(&v, 0, sizeof v);
		k.data = kbuf;
		k.size = (u_int32_t)snprintf(kbuf, sizeof kbuf, "key%012ld", i);
		memcpy(val, &i, sizeof i); /* the record names its key */
		v.data = val;
		v.size = (u_int32_t)vsize;
		dbcheck(db->put(db, NULL, &k, &v, 0), "load put");
	}
	dbcheck(db->sync(db, 0), "sync");
	uint64_t t_load = bu_now_ns() - t0;

	long gets = 0, puts = 0;
	t0 = bu_now_ns();
	for (long n = 0; n < ops; n++) {
		long i = (long)bu_below(&rng, (uint64_t)keys);
		memset(&k, 0, sizeof k);
		memset(&v, 0, sizeof v);
		k.data = kbuf;
		k.size = (u_int32_t)snprintf(kbuf, sizeof kbuf, "key%012ld", i);
		if ((long)bu_below(&rng, 100) < read_pct) {
			dbcheck(db->get(db, NULL, &k, &v, 0), "get");
			long got;
			if (v.size != (u_int32_t)vsize)
				bu_fail("get: wrong record size");
			memcpy(&got, v.data, sizeof got);
			if (got != i)
				bu_fail("get: wrong record");
			gets++;
		} else {
			memcpy(val, &i, sizeof i);
			val[sizeof i] = (unsigned char)n; /* the record changes */
			v.data = val;
			v.size = (u_int32_t)vsize;
			dbcheck(db->put(db, NULL, &k, &v, 0), "put");
			puts++;
		}
	}
	dbcheck(db->sync(db, 0), "sync");
	uint64_t t_mix = bu_now_ns() - t0;
	dbcheck(db->close(db, 0), "close");
	free(val);

	int maj, min, pat;
	db_version(&maj, &min, &pat);
	printf("{\"program\":\"chell_bench_bdb\",\"libdb_version\":\"%d.%d.%d\",\"keys\":%ld,"
	       "\"vsize\":%ld,\"read_pct\":%ld,\"cache_kb\":%ld,"
	       "\"provider\":{\"pread\":\"%s\",\"pwrite\":\"%s\"},\"phases\":{"
	       "\"load\":{\"ops\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f},"
	       "\"mix\":{\"ops\":%ld,\"gets\":%ld,\"puts\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f}}}\n",
	       maj, min, pat, keys, vsize, read_pct, cache_kb, bu_provider("pread"),
	       bu_provider("pwrite"), keys, (double)t_load / 1e9, (double)keys * 1e9 / (double)t_load,
	       ops, gets, puts, (double)t_mix / 1e9, ops ? (double)ops * 1e9 / (double)t_mix : 0.0);
	return 0;
}
