/* WARP's persisted patterns (src/handlers/warp/patterns.c): stored and
 * loaded back across handles (a restart), bounded and sanitised input,
 * replacement, sharing between handles, and damage: a damaged or foreign
 * file is ignored with one warning naming the file and the field, and
 * rebuilt. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "patterns_internal.h"

static char dir[128], path[192], errlog[192];

static int setup(void **state)
{
	snprintf(dir, sizeof dir, "/dev/shm/chell-unit-warp-patterns-%d", (int)getpid());
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/patterns", dir);
	snprintf(errlog, sizeof errlog, "%s/stderr", dir);
	unlink(path);
	return 0;
}

static int teardown(void **state)
{
	unlink(path);
	unlink(errlog);
	rmdir(dir);
	return 0;
}

static void fill(uint32_t n, uint8_t *st, uint32_t *succ, unsigned seed)
{
	for (uint32_t i = 0; i < n; i++) {
		st[i] = (uint8_t)((i + seed) % WARP_NSTATES);
		succ[i] = (i + 1 + seed) % n;
	}
}

static void test_store_load_restart(void **state)
{
	struct warp_patterns *p;
	uint8_t st[64], st2[64];
	uint32_t su[64], su2[64];
	struct warp_xfile xf[WARP_XFILE_SLOTS] = {{.ctx = 42, .next = {3, 99}, .hint_node = 5, .age = 1}}, xf2[WARP_XFILE_SLOTS];
	struct warp_file_id id = {3, 77};
	unlink(path);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_load(p, id, 64, st2, su2, xf2), 0);
	fill(64, st, su, 1);
	assert_int_equal(warp_patterns_store(p, id, 64, st, su, xf), 0);
	assert_int_equal(warp_patterns_load(p, id, 64, st2, su2, xf2), 64);
	warp_patterns_close(p);

	/* a restarted program: a new handle on the same file */
	assert_int_equal(warp_patterns_open(path, &p), 0);
	memset(st2, 0xff, sizeof st2);
	assert_int_equal(warp_patterns_load(p, id, 64, st2, su2, xf2), 64);
	assert_memory_equal(st, st2, 64);
	assert_memory_equal(su, su2, sizeof su);
	assert_int_equal(xf2[0].ctx, 42);
	assert_int_equal(xf2[0].next.ino, 99);
	assert_int_equal(xf2[0].hint_node, 5);
	assert_int_equal(xf2[1].ctx, 0);
	/* a caller that knows fewer nodes gets fewer, with successors beyond
	 * its count dropped */
	assert_int_equal(warp_patterns_load(p, id, 10, st2, su2, NULL), 10);
	for (int i = 0; i < 10; i++)
		assert_int_equal(su2[i], su[i] < 10 ? su[i] : WARP_NODE_NONE);

	/* an unchanged store does not write */
	struct stat a, b;
	assert_int_equal(stat(path, &a), 0);
	usleep(20000);
	assert_int_equal(warp_patterns_store(p, id, 64, st, su, xf), 0);
	assert_int_equal(stat(path, &b), 0);
	assert_true(a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec);
	warp_patterns_close(p);
}

static void test_sanitised(void **state)
{
	struct warp_patterns *p;
	static uint8_t st[PAT_NODES + 100];
	static uint32_t su[PAT_NODES + 100];
	struct warp_file_id id = {3, 78};
	for (uint32_t i = 0; i < PAT_NODES + 100; i++) {
		st[i] = i % 5; /* 3 and 4 are not states */
		su[i] = i + 1; /* the last ones point past the stored nodes */
	}
	unlink(path);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_store(p, id, PAT_NODES + 100, st, su, NULL), 0);
	static uint8_t st2[PAT_NODES + 100];
	static uint32_t su2[PAT_NODES + 100];
	assert_int_equal(warp_patterns_load(p, id, PAT_NODES + 100, st2, su2, NULL), PAT_NODES);
	for (uint32_t i = 0; i < PAT_NODES; i++) {
		assert_int_equal(st2[i], st[i] < WARP_NSTATES ? st[i] : WARP_NORMAL);
		assert_int_equal(su2[i], su[i] < PAT_NODES ? su[i] : WARP_NODE_NONE);
	}
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){3, 0}, 1, st, su, NULL), -EINVAL);
	warp_patterns_close(p);
}

/* More files than entries: the one stored least recently goes. */
static void test_replacement(void **state)
{
	struct warp_patterns *p;
	uint8_t st[4] = {1, 1, 1, 1};
	uint32_t su[4] = {1, 2, 3, WARP_NODE_NONE};
	unlink(path);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	for (uint64_t i = 1; i <= PAT_ENTRIES; i++)
		assert_int_equal(warp_patterns_store(p, (struct warp_file_id){9, i}, 4, st, su, NULL), 0);
	st[0] = 2; /* file 1 stored again: now file 2 is the oldest */
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){9, 1}, 4, st, su, NULL), 0);
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){9, 100000}, 4, st, su, NULL), 0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){9, 2}, 4, NULL, NULL, NULL), 0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){9, 1}, 4, NULL, NULL, NULL), 4);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){9, 3}, 4, NULL, NULL, NULL), 4);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){9, 100000}, 4, NULL, NULL, NULL), 4);
	warp_patterns_close(p);
}

/* Two handles (two processes) on one file see each other's stores. */
static void test_shared(void **state)
{
	struct warp_patterns *p, *q;
	uint8_t st[2] = {1, 2};
	uint32_t su[2] = {1, 0};
	unlink(path);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_open(path, &q), 0);
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){1, 1}, 2, st, su, NULL), 0);
	assert_int_equal(warp_patterns_store(q, (struct warp_file_id){1, 2}, 2, st, su, NULL), 0);
	/* q stored after p: q's copy has both; p sees q's at its next store */
	assert_int_equal(warp_patterns_load(q, (struct warp_file_id){1, 1}, 2, NULL, NULL, NULL), 2);
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){1, 3}, 2, st, su, NULL), 0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){1, 2}, 2, NULL, NULL, NULL), 2);
	warp_patterns_close(p);
	warp_patterns_close(q);
}

/* The file is replaced by one of another layout while a handle is open
 * (another process rebuilt it): the handle's next store goes to the new
 * file and its copy is read again. */
static void test_layout_change(void **state)
{
	struct chell_region *r;
	char err[256];
	struct chell_region_layout lay = pat_layout(4);
	uint8_t st[3] = {1, 2, 0};
	uint32_t su[3] = {1, 2, WARP_NODE_NONE};
	unlink(path);
	assert_int_equal(chell_region_create(path, &lay, &r, err, sizeof err), 0);
	assert_int_equal(pat_format(r, 4), 0);
	chell_region_close(r);
	struct warp_patterns *p, *q;
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){2, 1}, 3, st, su, NULL), 0);
	unlink(path); /* the next open makes a file of the default layout */
	assert_int_equal(warp_patterns_open(path, &q), 0);
	assert_int_equal(warp_patterns_store(q, (struct warp_file_id){2, 2}, 3, st, su, NULL), 0);
	alarm(20); /* reading the file again under the region's own lock would hang */
	assert_int_equal(warp_patterns_store(p, (struct warp_file_id){2, 3}, 3, st, su, NULL), 0);
	alarm(0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){2, 1}, 3, NULL, NULL, NULL), 0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){2, 2}, 3, NULL, NULL, NULL), 3);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){2, 3}, 3, NULL, NULL, NULL), 3);
	warp_patterns_close(p);
	warp_patterns_close(q);
}

static void poke(off_t off, uint8_t v)
{
	int fd = open(path, O_WRONLY);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &v, 1, off), 1);
	close(fd);
}

/* File offset of the patterns heap: where the root's magic is (the root
 * is 64-byte aligned at the heap's start). */
static off_t heap_offset(void)
{
	int fd = open(path, O_RDONLY);
	struct stat sb;
	fstat(fd, &sb);
	uint8_t *buf = malloc((size_t)sb.st_size);
	assert_int_equal(pread(fd, buf, (size_t)sb.st_size, 0), sb.st_size);
	close(fd);
	uint64_t magic = PAT_MAGIC;
	off_t found = -1;
	for (off_t o = 0; o + 8 <= sb.st_size; o += 64)
		if (memcmp(buf + o, &magic, 8) == 0) {
			found = o;
			break;
		}
	free(buf);
	assert_true(found >= 0);
	return found;
}

static int count_warnings(const char *needle)
{
	FILE *f = fopen(errlog, "r");
	char line[1024];
	int n = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strstr(line, "warning: warp patterns file") && strstr(line, path) && strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

static int count_all_warnings(void)
{
	return count_warnings("");
}

static void test_damage(void **state)
{
	struct warp_patterns *p;
	uint8_t st[8] = {1, 1, 1, 1, 2, 2, 2, 2};
	uint32_t su[8] = {1, 2, 3, 4, 5, 6, 7, WARP_NODE_NONE};
	struct warp_file_id id = {5, 5};
	unlink(path);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_store(p, id, 8, st, su, NULL), 0);
	warp_patterns_close(p);
	off_t heap = heap_offset();

	/* read-only opening reports the field and changes nothing */
	poke(heap + PAT_ROOT_SIZE + (off_t)sizeof(struct pat_entry) + PAT_NODES + 4 * 3, 0x77);
	char err[512];
	assert_int_equal(warp_patterns_open_ro(path, &p, err, sizeof err), -EUCLEAN);
	assert_non_null(strstr(err, "entry[0].crc"));

	/* the handler's open: one warning naming file and field, rebuilt */
	fflush(stderr);
	int saved = dup(2);
	int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 2);
	close(fd);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_load(p, id, 8, NULL, NULL, NULL), 0);
	assert_int_equal(warp_patterns_store(p, id, 8, st, su, NULL), 0);
	assert_int_equal(warp_patterns_load(p, id, 8, NULL, NULL, NULL), 8);
	warp_patterns_close(p);
	assert_int_equal(warp_patterns_open_ro(path, &p, err, sizeof err), 0);
	warp_patterns_close(p);

	/* a foreign file: ignored and rebuilt too, but the process has had
	 * its one warning */
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "not a region\n", 13), 13);
	close(fd);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	assert_int_equal(warp_patterns_load(p, id, 8, NULL, NULL, NULL), 0);
	warp_patterns_close(p);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	assert_int_equal(count_warnings("entry[0].crc"), 1);
	assert_int_equal(count_all_warnings(), 1);
	assert_int_equal(warp_patterns_open_ro(path, &p, err, sizeof err), 0);
	warp_patterns_close(p);
}

/* n records of 8 nodes for files {5, ino0 + i}, each with one tuple naming
 * the next file, in the caller's arrays. */
static void make_batch(struct warp_pattern_rec *recs, unsigned n, uint64_t ino0, uint8_t (*st)[8],
		       uint32_t (*su)[8], struct warp_xfile (*xf)[WARP_XFILE_SLOTS])
{
	for (unsigned i = 0; i < n; i++) {
		fill(8, st[i], su[i], i);
		memset(xf[i], 0, sizeof xf[i]);
		xf[i][0] = (struct warp_xfile){.ctx = 7, .next = {5, ino0 + i + 1}, .hint_node = i % 8};
		recs[i] = (struct warp_pattern_rec){{5, ino0 + i}, 8, st[i], su[i], xf[i]};
	}
}

/* A batch (the queue of learn.c): 300 new files in one call, more than one
 * transaction holds (~90), into a file sized for them
 * (warp_patterns_open_sized); then a second batch that changes some and
 * adds one, with the file full, so the oldest goes; a restart loads all. */
static void test_batch(void **state)
{
	enum { N = 300 };
	static uint8_t st[N][8];
	static uint32_t su[N][8];
	static struct warp_xfile xf[N][WARP_XFILE_SLOTS];
	struct warp_pattern_rec recs[N];
	struct warp_patterns *p;
	uint8_t st2[8];
	uint32_t su2[8];
	struct warp_xfile xf2[WARP_XFILE_SLOTS];
	unlink(path);
	assert_int_equal(warp_patterns_open_sized(path, N, &p), 0);
	make_batch(recs, N, 1000, st, su, xf);
	assert_int_equal(warp_patterns_store_many(p, recs, N), 0);
	warp_patterns_close(p);

	assert_int_equal(warp_patterns_open_sized(path, 16, &p), 0); /* an existing file keeps its size */
	for (unsigned i = 0; i < N; i++) {
		assert_int_equal(warp_patterns_load(p, (struct warp_file_id){5, 1000 + i}, 8, st2, su2, xf2), 8);
		assert_memory_equal(st2, st[i], 8);
		assert_memory_equal(su2, su[i], sizeof su2);
		assert_int_equal(xf2[0].next.ino, 1000 + i + 1);
		assert_int_equal(xf2[0].hint_node, i % 8);
	}
	/* the first ten changed, one new file: the file is full, the entry
	 * stored least recently goes (file 1010: the first ten were just
	 * stored again) */
	for (unsigned i = 0; i < 10; i++)
		xf[i][0].hint_node = 7 - i % 8;
	recs[10] = (struct warp_pattern_rec){{5, 99999}, 8, st[10], su[10], xf[10]};
	assert_int_equal(warp_patterns_store_many(p, recs, 11), 0);
	warp_patterns_close(p);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	for (unsigned i = 0; i < 10; i++) {
		assert_int_equal(warp_patterns_load(p, (struct warp_file_id){5, 1000 + i}, 8, st2, su2, xf2), 8);
		assert_int_equal(xf2[0].hint_node, 7 - i % 8);
	}
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){5, 99999}, 8, st2, su2, xf2), 8);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){5, 1010}, 8, st2, su2, xf2), 0);
	assert_int_equal(warp_patterns_load(p, (struct warp_file_id){5, 1011}, 8, st2, su2, xf2), 8);
	/* an id of 0 or no nodes is refused, nothing stored */
	recs[0].n = 0;
	assert_int_equal(warp_patterns_store_many(p, recs, 1), -EINVAL);
	warp_patterns_close(p);
}

/* One batch of more files than the file has entries (a program that
 * closed thousands of files between two stores: learn.c's queue): the
 * last ones are kept, none is stored out of bounds (before: a slot of
 * UINT32_MAX, a crash in store_batch). */
static void test_batch_larger_than_file(void **state)
{
	enum { N = 40, ENTRIES = 16 };
	static uint8_t st[N][8];
	static uint32_t su[N][8];
	static struct warp_xfile xf[N][WARP_XFILE_SLOTS];
	struct warp_pattern_rec recs[N];
	struct warp_patterns *p;
	uint8_t st2[8];
	uint32_t su2[8];
	struct warp_xfile xf2[WARP_XFILE_SLOTS];
	unlink(path);
	assert_int_equal(warp_patterns_open_sized(path, ENTRIES, &p), 0);
	make_batch(recs, N, 2000, st, su, xf);
	assert_int_equal(warp_patterns_store_many(p, recs, N), 0);
	warp_patterns_close(p);
	assert_int_equal(warp_patterns_open(path, &p), 0);
	for (unsigned i = 0; i < N; i++) {
		int got = warp_patterns_load(p, (struct warp_file_id){5, 2000 + i}, 8, st2, su2, xf2);
		assert_int_equal(got, i >= N - ENTRIES ? 8 : 0);
		if (got)
			assert_memory_equal(st2, st[i], 8);
	}
	warp_patterns_close(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_store_load_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_batch_larger_than_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sanitised, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replacement, setup, teardown),
		cmocka_unit_test_setup_teardown(test_shared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layout_change, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damage, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
