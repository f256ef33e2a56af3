/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the cache-mode metadata (src/cache/meta): Cnodes and the
 * I2C map, chunk mapping and the C2F map, a full cache, many files, hash
 * collisions, the dirty-state machine, dirty iteration, the replacement
 * order, reopening a pool file, and damaged images.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "meta_internal.h"

struct fx {
	void *img;
	size_t len;
	struct chell_region *r;
	struct meta *m;
};

static void fx_open(struct fx *f, uint32_t cnodes, uint32_t chunks)
{
	struct meta_geometry g = {cnodes, chunks};
	struct chell_region_layout lay = {1, 1024, meta_heap_size(&g)};
	char err[256];
	assert_true(lay.heap_size > 0);
	f->len = (lay.heap_size + 4096 * 4 + 1025 * 64 + 65536 + 4095) / 4096 * 4096;
	f->img = aligned_alloc(4096, f->len);
	assert_non_null(f->img);
	memset(f->img, 0, f->len);
	assert_int_equal(chell_region_format_mem(f->img, f->len, &lay, NULL, err, sizeof(err)), 0);
	assert_int_equal(chell_region_open_mem(f->img, f->len, NULL, &f->r, err, sizeof(err)), 0);
	assert_int_equal(meta_create(f->r, 0, &g, &f->m, err, sizeof(err)), 0);
}

static void fx_check(struct fx *f)
{
	char err[256] = "";
	int rc = meta_check(f->m, err, sizeof(err));
	if (rc)
		print_error("meta_check: %s\n", err);
	assert_int_equal(rc, 0);
}

static void fx_close(struct fx *f)
{
	meta_close(f->m);
	chell_region_close(f->r);
	free(f->img);
}

/* Close and reattach to the same image (volatile state starts over). */
static void fx_reattach(struct fx *f)
{
	char err[256];
	meta_close(f->m);
	chell_region_close(f->r);
	assert_int_equal(chell_region_open_mem(f->img, f->len, NULL, &f->r, err, sizeof(err)), 0);
	assert_int_equal(meta_open(f->r, 0, &f->m, err, sizeof(err)), 0);
}

static void test_create_empty(void **state)
{
	struct fx f;
	struct meta_stats st;
	struct meta *m2;
	char err[256];
	fx_open(&f, 8, 4);
	meta_stats(f.m, &st);
	assert_int_equal(st.cnodes, 0);
	assert_int_equal(st.chunks_used, 0);
	assert_int_equal(st.max_cnodes, 8);
	assert_int_equal(st.chunks, 4);
	fx_check(&f);
	struct meta_geometry g = {8, 4};
	assert_int_equal(meta_create(f.r, 0, &g, &m2, err, sizeof(err)), -EEXIST);
	g.chunks = 0;
	assert_int_equal(meta_heap_size(&g), 0);
	fx_reattach(&f);
	fx_check(&f);
	fx_close(&f);
}

static void test_cnodes(void **state)
{
	struct fx f;
	struct meta_cnode_info ci;
	char longpath[300];
	fx_open(&f, 4, 4);
	assert_int_equal(meta_cnode_get(f.m, 1, 100, false, NULL), -ENOENT);
	int a = meta_cnode_get(f.m, 1, 100, true, "/data/a");
	assert_true(a >= 0);
	assert_int_equal(meta_cnode_get(f.m, 1, 100, false, NULL), a);
	assert_int_equal(meta_cnode_get(f.m, 1, 100, true, "/other"), a); /* exists: no second */
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = 0;
	assert_int_equal(meta_cnode_get(f.m, 1, 101, true, longpath), -ENAMETOOLONG);
	assert_int_equal(meta_cnode_set_attr(f.m, (uint32_t)a, 12345, 111, 222), 0);
	assert_int_equal(meta_cnode_set_size(f.m, (uint32_t)a, 777), 0);
	assert_int_equal(meta_cnode_set_flags(f.m, (uint32_t)a, META_CN_STALE), 0);
	assert_int_equal(meta_cnode_info(f.m, (uint32_t)a, &ci), 0);
	assert_int_equal(ci.dev, 1);
	assert_int_equal(ci.ino, 100);
	assert_int_equal(ci.size, 777);
	assert_int_equal(ci.mtime_ns, 111);
	assert_int_equal(ci.ctime_ns, 222);
	assert_int_equal(ci.flags, META_CN_STALE);
	assert_string_equal(ci.path, "/data/a");
	/* Full table. */
	for (int i = 1; i < 4; i++)
		assert_true(meta_cnode_get(f.m, 2, (uint64_t)i, true, NULL) >= 0);
	assert_int_equal(meta_cnode_get(f.m, 3, 1, true, NULL), -ENOSPC);
	/* Remove frees the id and the key. */
	assert_int_equal(meta_cnode_remove(f.m, (uint32_t)a), 0);
	assert_int_equal(meta_cnode_info(f.m, (uint32_t)a, &ci), -ENOENT);
	assert_int_equal(meta_cnode_get(f.m, 1, 100, false, NULL), -ENOENT);
	assert_int_equal(meta_cnode_remove(f.m, 99), -EINVAL);
	assert_int_equal(meta_cnode_get(f.m, 3, 1, true, NULL), a);
	fx_check(&f);
	fx_close(&f);
}

static void test_many_files(void **state)
{
	struct fx f;
	enum { N = 2000 };
	fx_open(&f, N, 64);
	for (uint64_t i = 0; i < N; i++)
		assert_true(meta_cnode_get(f.m, i % 7, i * 1000003, true, NULL) >= 0);
	for (uint64_t i = 0; i < N; i++) {
		int id = meta_cnode_get(f.m, i % 7, i * 1000003, false, NULL);
		assert_true(id >= 0);
		struct meta_cnode_info ci;
		assert_int_equal(meta_cnode_info(f.m, (uint32_t)id, &ci), 0);
		assert_int_equal(ci.ino, i * 1000003);
	}
	/* Remove every other one: the rest stays reachable. */
	for (uint64_t i = 0; i < N; i += 2)
		assert_int_equal(meta_cnode_remove(f.m, (uint32_t)meta_cnode_get(f.m, i % 7, i * 1000003, false, NULL)), 0);
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(meta_cnode_get(f.m, i % 7, i * 1000003, false, NULL) >= 0, i % 2 == 1);
	fx_check(&f);
	struct meta_stats st;
	meta_stats(f.m, &st);
	assert_int_equal(st.cnodes, N / 2);
	fx_close(&f);
}

/* Keys that all hash to the same home slot: one long cluster, then
 * deletions from its middle (backward shift must keep the rest). */
static void test_collisions(void **state)
{
	struct fx f;
	fx_open(&f, 16, 16);
	uint32_t mask = f.m->i2c_mask, home = (uint32_t)meta_hash(5, 0) & mask;
	uint64_t keys[12];
	int n = 0;
	for (uint64_t ino = 0; n < 12; ino++)
		if (((uint32_t)meta_hash(5, ino) & mask) == home)
			keys[n++] = ino;
	for (int i = 0; i < 12; i++)
		assert_true(meta_cnode_get(f.m, 5, keys[i], true, NULL) >= 0);
	/* Also a key whose home is inside the cluster. */
	uint64_t other = 0;
	while (((uint32_t)meta_hash(6, other) & mask) != ((home + 3) & mask))
		other++;
	assert_true(meta_cnode_get(f.m, 6, other, true, NULL) >= 0);
	fx_check(&f);
	for (int i = 1; i < 12; i += 3) {
		assert_int_equal(meta_cnode_remove(f.m, (uint32_t)meta_cnode_get(f.m, 5, keys[i], false, NULL)), 0);
		fx_check(&f);
	}
	for (int i = 0; i < 12; i++)
		assert_int_equal(meta_cnode_get(f.m, 5, keys[i], false, NULL) >= 0, i % 3 != 1);
	assert_true(meta_cnode_get(f.m, 6, other, false, NULL) >= 0);
	/* C2F collisions: file chunks of one Cnode that share a home. */
	int c = meta_cnode_get(f.m, 6, other, false, NULL);
	uint32_t cm = f.m->c2f_mask, ch = (uint32_t)meta_hash((uint64_t)c, 0) & cm;
	uint64_t fcs[8];
	n = 0;
	for (uint64_t fc = 0; n < 8; fc++)
		if (((uint32_t)meta_hash((uint64_t)c, fc) & cm) == ch)
			fcs[n++] = fc;
	int slots[8];
	for (int i = 0; i < 8; i++)
		assert_true((slots[i] = meta_chunk_map(f.m, (uint32_t)c, fcs[i])) >= 0);
	assert_int_equal(meta_chunk_unmap(f.m, (uint32_t)slots[2]), 0);
	assert_int_equal(meta_chunk_unmap(f.m, (uint32_t)slots[5]), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)c, fcs[i]), i == 2 || i == 5 ? -ENOENT : slots[i]);
	fx_check(&f);
	fx_close(&f);
}

static void test_chunks_full(void **state)
{
	struct fx f;
	struct meta_chunk_info ci;
	fx_open(&f, 4, 8);
	int a = meta_cnode_get(f.m, 1, 1, true, NULL), b = meta_cnode_get(f.m, 1, 2, true, NULL);
	assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)a, 0), -ENOENT);
	assert_int_equal(meta_chunk_map(f.m, 3, 0), -ENOENT); /* no such Cnode */
	int s0 = meta_chunk_map(f.m, (uint32_t)a, 0);
	assert_true(s0 >= 0);
	assert_int_equal(meta_chunk_map(f.m, (uint32_t)a, 0), s0); /* mapped already */
	assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)a, 0), s0);
	assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)b, 0), -ENOENT);
	for (uint64_t i = 1; i < 4; i++)
		assert_true(meta_chunk_map(f.m, (uint32_t)a, i * 1000) >= 0);
	for (uint64_t i = 0; i < 4; i++)
		assert_true(meta_chunk_map(f.m, (uint32_t)b, i) >= 0);
	assert_int_equal(meta_chunk_map(f.m, (uint32_t)b, 99), -ENOSPC);
	assert_int_equal(meta_chunk_info(f.m, (uint32_t)s0, &ci), 0);
	assert_int_equal(ci.cnode, a);
	assert_int_equal(ci.file_chunk, 0);
	assert_int_equal(meta_cnode_remove(f.m, (uint32_t)a), -EBUSY);
	struct meta_cnode_info cn;
	assert_int_equal(meta_cnode_info(f.m, (uint32_t)b, &cn), 0);
	assert_int_equal(cn.chunks, 4);
	fx_check(&f);
	/* Evict one: the freed chunk serves the next map. */
	assert_int_equal(meta_chunk_unmap(f.m, (uint32_t)s0), 0);
	assert_int_equal(meta_chunk_unmap(f.m, (uint32_t)s0), -ENOENT);
	assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)a, 0), -ENOENT);
	assert_int_equal(meta_chunk_map(f.m, (uint32_t)b, 99), s0);
	assert_int_equal(meta_chunk_unmap(f.m, 8), -EINVAL);
	fx_check(&f);
	fx_close(&f);
}

static void test_dirty_states(void **state)
{
	struct fx f;
	struct meta_blocks out;
	fx_open(&f, 2, 2);
	int c = meta_cnode_get(f.m, 1, 1, true, NULL);
	uint32_t s = (uint32_t)meta_chunk_map(f.m, (uint32_t)c, 0);
	assert_int_equal(meta_mark_valid(f.m, s, 0, 0), -EINVAL);
	assert_int_equal(meta_mark_valid(f.m, s, 500, 13), -EINVAL);
	assert_int_equal(meta_mark_valid(f.m, s, 0, 8), 0);
	assert_int_equal(meta_block_state(f.m, s, 0), META_CLEAN);
	assert_int_equal(meta_checkout(f.m, s, &out), 0); /* nothing dirty */
	assert_int_equal(meta_checkin(f.m, s), -EINVAL);
	assert_int_equal(meta_mark_dirty(f.m, s, 4, 8), 0); /* blocks 4..11 */
	assert_int_equal(meta_block_state(f.m, s, 3), META_CLEAN);
	assert_int_equal(meta_block_state(f.m, s, 11), META_DIRTY);
	assert_int_equal(meta_chunk_unmap(f.m, s), -EBUSY);
	/* Check out: DIRTY -> PRE, the list is exactly blocks 4..11. */
	assert_int_equal(meta_checkout(f.m, s, &out), 8);
	assert_int_equal(out.bits[0], 0xff0ull);
	for (int w = 1; w < 8; w++)
		assert_int_equal(out.bits[w], 0);
	assert_int_equal(meta_block_state(f.m, s, 4), META_DIRTY_PRE_CHECKOUT);
	assert_int_equal(meta_checkout(f.m, s, &out), -EBUSY);
	/* Writes during write-back: PRE -> POST, CLEAN -> DIRTY. */
	assert_int_equal(meta_mark_dirty(f.m, s, 10, 4), 0); /* 10,11 PRE; 12,13 CLEAN */
	assert_int_equal(meta_block_state(f.m, s, 10), META_DIRTY_POST_CHECKOUT);
	assert_int_equal(meta_block_state(f.m, s, 12), META_DIRTY);
	assert_int_equal(meta_mark_dirty(f.m, s, 10, 1), 0); /* POST stays POST */
	assert_int_equal(meta_block_state(f.m, s, 10), META_DIRTY_POST_CHECKOUT);
	fx_check(&f);
	/* Survives a reopen in the middle of a check-out. */
	fx_reattach(&f);
	assert_int_equal(meta_block_state(f.m, s, 4), META_DIRTY_PRE_CHECKOUT);
	/* Check in: PRE -> CLEAN, POST -> DIRTY, DIRTY stays. */
	assert_int_equal(meta_checkin(f.m, s), 0);
	for (unsigned b = 4; b < 10; b++)
		assert_int_equal(meta_block_state(f.m, s, b), META_CLEAN);
	assert_int_equal(meta_block_state(f.m, s, 10), META_DIRTY);
	assert_int_equal(meta_block_state(f.m, s, 11), META_DIRTY);
	assert_int_equal(meta_block_state(f.m, s, 12), META_DIRTY);
	assert_int_equal(meta_block_state(f.m, s, 14), META_CLEAN);
	assert_int_equal(meta_checkin(f.m, s), -EINVAL);
	/* Cancel: everything checked out is dirty again. */
	assert_int_equal(meta_checkout(f.m, s, &out), 4);
	assert_int_equal(meta_mark_dirty(f.m, s, 10, 1), 0);
	assert_int_equal(meta_checkout_cancel(f.m, s), 0);
	for (unsigned b = 10; b < 14; b++)
		assert_int_equal(meta_block_state(f.m, s, b), META_DIRTY);
	/* Clean everything, then eviction is allowed. */
	assert_int_equal(meta_checkout(f.m, s, NULL), 4);
	assert_int_equal(meta_checkin(f.m, s), 0);
	struct meta_chunk_info ci;
	assert_int_equal(meta_chunk_info(f.m, s, &ci), 0);
	assert_int_equal(ci.ndirty, 0);
	assert_int_equal(ci.nvalid, 14);
	fx_check(&f);
	assert_int_equal(meta_chunk_unmap(f.m, s), 0);
	fx_check(&f);
	fx_close(&f);
}

struct seen {
	int n;
	uint32_t cnode[16];
	uint64_t fc[16];
};

static int collect(void *arg, const struct meta_chunk_info *c)
{
	struct seen *s = arg;
	s->cnode[s->n] = c->cnode;
	s->fc[s->n++] = c->file_chunk;
	return s->n == 16;
}

static void test_dirty_order(void **state)
{
	struct fx f;
	struct seen sn = {0};
	fx_open(&f, 4, 16);
	int a = meta_cnode_get(f.m, 1, 1, true, NULL), b = meta_cnode_get(f.m, 1, 2, true, NULL);
	/* Mapped out of order; every other one dirty. */
	uint64_t fcs[] = {9, 3, 7, 1, 5, 2};
	for (int i = 0; i < 6; i++) {
		int sb = meta_chunk_map(f.m, (uint32_t)b, fcs[i]), sa = meta_chunk_map(f.m, (uint32_t)a, fcs[i]);
		assert_true(sa >= 0 && sb >= 0);
		if (fcs[i] % 2) {
			assert_int_equal(meta_mark_dirty(f.m, (uint32_t)sa, 0, 1), 0);
			assert_int_equal(meta_mark_dirty(f.m, (uint32_t)sb, 7, 2), 0);
		}
	}
	assert_int_equal(meta_foreach_dirty(f.m, collect, &sn), 0);
	assert_int_equal(sn.n, 10);
	uint64_t odd[] = {1, 3, 5, 7, 9};
	for (int i = 0; i < 10; i++) {
		assert_int_equal(sn.cnode[i], i < 5 ? (uint32_t)a : (uint32_t)b);
		assert_int_equal(sn.fc[i], odd[i % 5]);
	}
	fx_close(&f);
}

static void test_victim(void **state)
{
	struct fx f;
	fx_open(&f, 2, 4);
	assert_int_equal(meta_victim(f.m), -ENOENT);
	int c = meta_cnode_get(f.m, 1, 1, true, NULL);
	int s[4];
	for (int i = 0; i < 4; i++)
		s[i] = meta_chunk_map(f.m, (uint32_t)c, (uint64_t)i);
	assert_int_equal(meta_victim(f.m), s[0]); /* FIFO until touched */
	meta_chunk_touch(f.m, (uint32_t)s[0]);
	assert_int_equal(meta_victim(f.m), s[1]);
	assert_int_equal(meta_mark_dirty(f.m, (uint32_t)s[1], 0, 1), 0); /* dirty: not a victim */
	assert_int_equal(meta_victim(f.m), s[2]);
	/* After a reopen recency restarts from the persistent FIFO order. */
	fx_reattach(&f);
	assert_int_equal(meta_victim(f.m), s[0]);
	fx_close(&f);
}

static void test_reopen_path(void **state)
{
	char path[128], err[256];
	struct meta *m;
	struct meta_geometry g = {64, 32};
	snprintf(path, sizeof(path), "/dev/shm/chell-unit-cachemeta-%d", (int)getpid());
	unlink(path);
	FILE *fp = fopen(path, "w");
	assert_non_null(fp);
	fclose(fp);
	assert_int_equal(meta_create_path(path, &g, &m, err, sizeof(err)), 0);
	int c = meta_cnode_get(m, 8, 9, true, "/slow/file");
	int s = meta_chunk_map(m, (uint32_t)c, 42);
	assert_int_equal(meta_mark_dirty(m, (uint32_t)s, 1, 3), 0);
	assert_int_equal(meta_cnode_set_size(m, (uint32_t)c, 88 << 20), 0);
	meta_close(m);
	assert_int_equal(meta_open_path(path, &m, err, sizeof(err)), 0);
	assert_int_equal(meta_cnode_get(m, 8, 9, false, NULL), c);
	assert_int_equal(meta_chunk_lookup(m, (uint32_t)c, 42), s);
	assert_int_equal(meta_block_state(m, (uint32_t)s, 2), META_DIRTY);
	struct meta_cnode_info ci;
	assert_int_equal(meta_cnode_info(m, (uint32_t)c, &ci), 0);
	assert_int_equal(ci.size, 88 << 20);
	assert_string_equal(ci.path, "/slow/file");
	assert_int_equal(meta_check(m, err, sizeof(err)), 0);
	meta_close(m);
	unlink(path);
}

static void test_damaged(void **state)
{
	struct fx f;
	char err[256];
	struct meta *m2;
	fx_open(&f, 4, 4);
	int c = meta_cnode_get(f.m, 1, 1, true, NULL);
	int s = meta_chunk_map(f.m, (uint32_t)c, 3);
	/* A C2F entry naming a chunk past the end: lookup refuses it. */
	uint32_t i = c2f_find(f.m, (uint32_t)c, 3);
	c2f_at(f.m, i)->slot = 1000;
	assert_int_equal(meta_chunk_lookup(f.m, (uint32_t)c, 3), -EUCLEAN);
	assert_int_equal(meta_check(f.m, err, sizeof(err)), -EUCLEAN);
	c2f_at(f.m, i)->slot = (uint32_t)s;
	fx_check(&f);
	/* An I2C entry naming a free Cnode. */
	uint32_t k = i2c_find(f.m, 1, 1);
	i2c_at(f.m, k)->cnode1 = 4;
	assert_int_equal(meta_cnode_get(f.m, 1, 1, false, NULL), -EUCLEAN);
	i2c_at(f.m, k)->cnode1 = (uint32_t)c + 1;
	/* Root offsets and geometry are checked at open. */
	f.m->root->c2f_off += 64;
	assert_int_equal(meta_open(f.r, 0, &m2, err, sizeof(err)), -EUCLEAN);
	f.m->root->c2f_off -= 64;
	f.m->root->chunks = 1u << 30;
	assert_int_equal(meta_open(f.r, 0, &m2, err, sizeof(err)), -EUCLEAN);
	f.m->root->chunks = 4;
	f.m->root->magic ^= 1;
	assert_int_equal(meta_open(f.r, 0, &m2, err, sizeof(err)), -ENOENT);
	f.m->root->magic ^= 1;
	assert_int_equal(meta_open(f.r, 1, &m2, err, sizeof(err)), -EINVAL); /* one journal only */
	assert_int_equal(meta_open(f.r, 0, &m2, err, sizeof(err)), 0);
	meta_close(m2);
	fx_close(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_empty), cmocka_unit_test(test_cnodes),
		cmocka_unit_test(test_many_files),   cmocka_unit_test(test_collisions),
		cmocka_unit_test(test_chunks_full),  cmocka_unit_test(test_dirty_states),
		cmocka_unit_test(test_dirty_order),  cmocka_unit_test(test_victim),
		cmocka_unit_test(test_reopen_path),  cmocka_unit_test(test_damaged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
