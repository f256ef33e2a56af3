/* SPDX-License-Identifier: MIT */
/*
 * chell_bench_sqlite - a fixed SQLite workload through the unmodified
 * system libsqlite3, run with and without Chell on a database on tmpfs.
 *
 * Default settings (rollback journal, synchronous=FULL, default page cache),
 * so every transaction does the journal create/write/fsync/unlink dance and
 * every autocommit SELECT takes and drops the file locks: the calls Chell
 * interposes.
 *   insert  --rows rows with random 64-bit keys (a fixed permutation) and
 *           --vsize byte values, in transactions of --txn rows;
 *   select  --selects point SELECTs by random existing key, one autocommit
 *           statement each (every value is checked);
 *   update  --updates single-row UPDATEs in autocommit transactions.
 * Prints one JSON object with the time and ops/s of each phase.
 *
 *   chell_bench_sqlite --db /dev/shm/x/bench.db [--rows 50000] [--txn 1000]
 *       [--selects 50000] [--updates 2000] [--vsize 100] [--cpu N]
 */
#include <getopt.h>
#include <sqlite3.h>
#include <unistd.h>

#include "bench_util.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage:\n"
	"  chell_bench_sqlite --db /dev/shm/x/bench.db [--rows 50000] [--txn 1000]\n"
	"      [--selects 50000] [--updates 2000] [--vsize 100] [--cpu N]\n"
	"\n"
	"chell_bench_sqlite - a fixed SQLite workload through the unmodified system\n"
	"libsqlite3, run with and without Chell on a database on tmpfs.\n"
	"(details: the comment at the top of chell_bench_sqlite.c)\n";

static sqlite3 *db;

static void check(int rc, const char *what)
{
	if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
		fprintf(stderr, "chell_bench_sqlite: %s: %s\n", what, sqlite3_errmsg(db));
		exit(1);
	}
}

static void exec(const char *sql)
{
	check(sqlite3_exec(db, sql, NULL, NULL, NULL), sql);
}

/* Key of row i: an odd multiplier makes i -> key a permutation, so inserts
 * land all over the b-tree and every key is distinct. */
static inline sqlite3_int64 key_of(uint64_t i)
{
	return (sqlite3_int64)((i * 0x9E3779B97F4A7C15ULL) >> 1);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	const char *path = NULL;
	long rows = 50000, txn = 1000, selects = 50000, updates = 2000, vsize = 100;
	int cpu = -1;
	static const struct option lo[] = {
		{ "db", 1, 0, 'd' }, { "rows", 1, 0, 'r' }, { "txn", 1, 0, 't' },
		{ "selects", 1, 0, 's' }, { "updates", 1, 0, 'u' }, { "vsize", 1, 0, 'v' },
		{ "cpu", 1, 0, 'c' }, { 0, 0, 0, 0 }
	};
	for (int o; (o = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (o) {
		case 'd': path = optarg; break;
		case 'r': rows = atol(optarg); break;
		case 't': txn = atol(optarg); break;
		case 's': selects = atol(optarg); break;
		case 'u': updates = atol(optarg); break;
		case 'v': vsize = atol(optarg); break;
		case 'c': cpu = atoi(optarg); break;
		default:
			fputs(usage_text, stderr);
			return 2;
		}
	}
	if (!path || rows < 1 || txn < 1 || selects < 0 || updates < 0 || vsize < 8 || vsize > 65536) {
		fprintf(stderr, "chell_bench_sqlite: bad arguments (--db is required)\n");
		return 2;
	}
	bu_pin(cpu);
	unlink(path);
	check(sqlite3_open(path, &db), "open");
	exec("CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB NOT NULL)");

	unsigned char *val = malloc((size_t)vsize);
	if (!val)
		bu_fail("out of memory");
	uint64_t rng = 42;
	for (long i = 0; i < vsize; i++)
		val[i] = (unsigned char)bu_rand(&rng);

	sqlite3_stmt *ins, *sel, *upd;
	check(sqlite3_prepare_v2(db, "INSERT INTO kv(k, v) VALUES(?, ?)", -1, &ins, NULL), "prepare insert");
	check(sqlite3_prepare_v2(db, "SELECT v FROM kv WHERE k = ?", -1, &sel, NULL), "prepare select");
	check(sqlite3_prepare_v2(db, "UPDATE kv SET v = ? WHERE k = ?", -1, &upd, NULL), "prepare update");

	uint64_t t0 = bu_now_ns();
	for (long i = 0; i < rows;) {
		exec("BEGIN");
		for (long j = 0; j < txn && i < rows; j++, i++) {
			/* The value's first 8 bytes carry the row number, so the
			 * selects can check they read the right row back. */
			memcpy(val, &i, sizeof i);
			sqlite3_bind_int64(ins, 1, key_of((uint64_t)i));
			sqlite3_bind_blob(ins, 2, val, (int)vsize, SQLITE_STATIC);
			check(sqlite3_step(ins), "insert");
			sqlite3_reset(ins);
		}
		exec("COMMIT");
	}
	uint64_t t_ins = bu_now_ns() - t0;

	t0 = bu_now_ns();
	for (long i = 0; i < selects; i++) {
		long r = (long)bu_below(&rng, (uint64_t)rows);
		sqlite3_bind_int64(sel, 1, key_of((uint64_t)r));
		if (sqlite3_step(sel) != SQLITE_ROW)
			bu_fail("select: row missing");
		long got;
		if (sqlite3_column_bytes(sel, 0) != vsize)
			bu_fail("select: wrong value size");
		memcpy(&got, sqlite3_column_blob(sel, 0), sizeof got);
		if (got != r)
			bu_fail("select: wrong row");
		sqlite3_reset(sel);
	}
	uint64_t t_sel = bu_now_ns() - t0;

	t0 = bu_now_ns();
	for (long i = 0; i < updates; i++) {
		long r = (long)bu_below(&rng, (uint64_t)rows);
		memcpy(val, &r, sizeof r);
		sqlite3_bind_blob(upd, 1, val, (int)vsize, SQLITE_STATIC);
		sqlite3_bind_int64(upd, 2, key_of((uint64_t)r));
		check(sqlite3_step(upd), "update");
		if (sqlite3_changes(db) != 1)
			bu_fail("update: row missing");
		sqlite3_reset(upd);
	}
	uint64_t t_upd = bu_now_ns() - t0;

	sqlite3_finalize(ins);
	sqlite3_finalize(sel);
	sqlite3_finalize(upd);
	check(sqlite3_close(db), "close");
	free(val);

	printf("{\"program\":\"chell_bench_sqlite\",\"sqlite_version\":\"%s\",\"rows\":%ld,\"txn\":%ld,"
	       "\"vsize\":%ld,\"provider\":{\"pread\":\"%s\",\"pwrite\":\"%s\"},\"phases\":{"
	       "\"insert\":{\"ops\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f},"
	       "\"select\":{\"ops\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f},"
	       "\"update\":{\"ops\":%ld,\"seconds\":%.6f,\"ops_per_s\":%.1f}}}\n",
	       sqlite3_libversion(), rows, txn, vsize, bu_provider("pread64"), bu_provider("pwrite64"),
	       rows, (double)t_ins / 1e9, (double)rows * 1e9 / (double)t_ins,
	       selects, (double)t_sel / 1e9, selects ? (double)selects * 1e9 / (double)t_sel : 0.0,
	       updates, (double)t_upd / 1e9, updates ? (double)updates * 1e9 / (double)t_upd : 0.0);
	return 0;
}
