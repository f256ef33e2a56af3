/* SPDX-License-Identifier: MIT */
/*
 * The cache client's hit protocol on one chunk (src/handlers/cache/copy.c,
 * cache/layout.h), on a chunk file built here the way chelld builds one:
 * a LIVE chunk with valid blocks is a hit, anything else - blocks not
 * valid, INIT or REVOKED, a chunk file truncated under the mapping (SIGBUS)
 * - is a miss; a bad application buffer is EFAULT (and a store that
 * faulted part-way still marks its blocks dirty); a store marks exactly its
 * blocks dirty, after the data; an overwrite stores only into blocks that
 * are all invalid, and marks nothing.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "handlers/cache/cache.h"
#include "pmem/sim/sim.h"

static int fd = -1;
static unsigned char *base;
static struct cache_ctl *ctl;
static char path[64];

static void set_valid(unsigned b)
{
	ctl->valid[b / 64] |= 1ull << (b % 64);
}

static int setup(void **state)
{
	snprintf(path, sizeof(path), "/dev/shm/chell-unit-cache-copy.%d", (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, CACHE_CHUNK_FILE_BYTES), 0);
	base = mmap(NULL, CACHE_CHUNK_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(base != MAP_FAILED);
	ctl = (struct cache_ctl *)(base + CACHE_CHUNK_BYTES);
	ctl->magic = CACHE_CTL_MAGIC;
	ctl->version = CACHE_CTL_VERSION;
	ctl->slot = 3;
	ctl->incarnation = 7;
	ctl->dev = 11;
	ctl->ino = 12;
	ctl->file_chunk = 5;
	assert_non_null(dirty_table_init(ctl->dirty, 1));
	for (unsigned b = 0; b < 4; b++)
		set_valid(b);
	memset(base, 'v', 4 * CACHE_BLOCK_BYTES);
	__atomic_store_n(&ctl->state, CACHE_CHUNK_LIVE, __ATOMIC_RELEASE);
	return 0;
}

static int teardown(void **state)
{
	munmap(base, CACHE_CHUNK_FILE_BYTES);
	close(fd);
	unlink(path);
	return 0;
}

static void test_hit_and_misses(void **state)
{
	char buf[3 * 4096];
	uint32_t slot = 0;
	assert_int_equal(cache_ctl_check(base, 11, 12, 5), 0);
	assert_int_equal(cache_ctl_check(base, 11, 13, 5), -EPROTO); /* another file */
	assert_int_equal(cache_ctl_live(base), 1);
	/* blocks 0..2, across block boundaries */
	assert_int_equal(cache_copy_out(buf, base, 100, 2 * 4096 + 50, &slot), COPY_HIT);
	assert_int_equal(slot, 3);
	assert_memory_equal(buf, base + 100, 2 * 4096 + 50);
	/* block 4 is not valid */
	assert_int_equal(cache_copy_out(buf, base, 3 * 4096, 4096 + 1, &slot), COPY_MISS);
	assert_int_equal(cache_copy_in(base, 4 * 4096, "x", 1, &slot, 0), COPY_MISS);
	/* not handed out yet, or revoked */
	__atomic_store_n(&ctl->state, CACHE_CHUNK_INIT, __ATOMIC_RELEASE);
	assert_int_equal(cache_copy_out(buf, base, 0, 10, &slot), COPY_MISS);
	__atomic_store_n(&ctl->state, CACHE_CHUNK_REVOKED, __ATOMIC_RELEASE);
	assert_int_equal(cache_copy_out(buf, base, 0, 10, &slot), COPY_MISS);
	assert_int_equal(cache_copy_in(base, 0, "x", 1, &slot, 0), COPY_MISS);
	assert_int_equal(cache_ctl_live(base), 0);
	assert_int_equal(base[0], 'v'); /* a refused store stores nothing */
	__atomic_store_n(&ctl->state, CACHE_CHUNK_LIVE, __ATOMIC_RELEASE);
}

static void test_store_marks_dirty_after_data(void **state)
{
	uint32_t slot = 0;
	dirty_table *dt = dirty_table_open(ctl->dirty);
	assert_non_null(dt);
	assert_int_equal(cache_copy_in(base, 4096 + 10, "hello", 5, &slot, 0), COPY_HIT);
	assert_memory_equal(base + 4096 + 10, "hello", 5);
	assert_int_equal(dirty_state(dt, 0, 0), BLK_CLEAN);
	assert_int_equal(dirty_state(dt, 0, 1), BLK_DIRTY);
	assert_int_equal(dirty_state(dt, 0, 2), BLK_CLEAN);
	/* a store across blocks 2 and 3 */
	char big[4096];
	memset(big, 'w', sizeof(big));
	assert_int_equal(cache_copy_in(base, 2 * 4096 + 2048, big, sizeof(big), &slot, 0), COPY_HIT);
	assert_int_equal(dirty_state(dt, 0, 2), BLK_DIRTY);
	assert_int_equal(dirty_state(dt, 0, 3), BLK_DIRTY);
	assert_true(dirty_chunk_flagged(dt, 0));
}

static void test_overwrite_only_invalid_blocks(void **state)
{
	uint32_t slot = 0;
	uint64_t inc = 0;
	static char blk[2 * 4096];
	memset(blk, 'o', sizeof(blk));
	/* blocks 8 and 9 were never filled: stored, not marked (the manager
	 * validates them on OVERWRITE) */
	assert_int_equal(cache_copy_overwrite(base, 8 * 4096, blk, sizeof(blk), &slot, &inc, 0), COPY_HIT);
	assert_int_equal(slot, 3);
	assert_int_equal(inc, 7);
	assert_memory_equal(base + 8 * 4096, blk, sizeof(blk));
	dirty_table *dt = dirty_table_open(ctl->dirty);
	assert_int_equal(dirty_state(dt, 0, 8), BLK_CLEAN);
	assert_int_equal(ctl->valid[0] & (3ull << 8), 0);
	/* block 3 is valid: an overwrite there must take the normal way */
	unsigned char before = base[3 * 4096];
	assert_int_equal(cache_copy_overwrite(base, 3 * 4096, blk, sizeof(blk), &slot, &inc, 0), COPY_MISS);
	assert_int_equal(base[3 * 4096], before);
	__atomic_store_n(&ctl->state, CACHE_CHUNK_REVOKED, __ATOMIC_RELEASE);
	assert_int_equal(cache_copy_overwrite(base, 10 * 4096, blk, 4096, &slot, &inc, 0), COPY_MISS);
	__atomic_store_n(&ctl->state, CACHE_CHUNK_LIVE, __ATOMIC_RELEASE);
}

static void test_bad_buffers(void **state)
{
	uint32_t slot = 0;
	void *bad = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(bad != MAP_FAILED);
	assert_int_equal(cache_copy_out(bad, base, 0, 100, &slot), COPY_EFAULT);
	/* the source faults after the first bytes are stored: still dirty */
	char *two = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(two != MAP_FAILED);
	memset(two, 'z', 4096);
	assert_int_equal(mprotect(two + 4096, 4096, PROT_NONE), 0);
	dirty_table *dt = dirty_table_open(ctl->dirty);
	assert_int_equal(dirty_state(dt, 0, 0), BLK_CLEAN);
	assert_int_equal(cache_copy_in(base, 0, two + 4000, 200, &slot, 0), COPY_EFAULT);
	assert_int_equal(dirty_state(dt, 0, 0), BLK_DIRTY);
	/* an extending store marks ext_end before the data; one whose buffer
	 * faults gives the mark back (those bytes are not the write's) */
	assert_int_equal(cache_copy_in(base, 0, two, 100, &slot, 5 * CACHE_CHUNK_BYTES + 100), COPY_HIT);
	assert_int_equal(ctl->ext_end, 5 * CACHE_CHUNK_BYTES + 100);
	assert_int_equal(cache_copy_in(base, 0, two + 4000, 200, &slot, 5 * CACHE_CHUNK_BYTES + 200),
			 COPY_EFAULT);
	assert_int_equal(ctl->ext_end, 5 * CACHE_CHUNK_BYTES + 100);
	/* never lowered by a store ending before it */
	assert_int_equal(cache_copy_in(base, 0, two, 50, &slot, 5 * CACHE_CHUNK_BYTES + 50), COPY_HIT);
	assert_int_equal(ctl->ext_end, 5 * CACHE_CHUNK_BYTES + 100);
	munmap(bad, 4096);
	munmap(two, 8192);
}

/* On DAX a store's lines and its dirty mark are flushed through the
 * persistence core's operations (the pool's, taken once: cache_persist),
 * so the power-failure simulator in their place sees them reach media. */
static void test_dax_store_flushes_through_the_core(void **state)
{
	struct chell_pmsim *sim = chell_pmsim_new(base, CACHE_CHUNK_FILE_BYTES);
	assert_non_null(sim);
	assert_ptr_equal(cache_persist, chell_persist_default());
	const struct chell_persist_ops *saved = cache_persist;
	cache_persist = chell_pmsim_ops(sim);
	cache_dax = 1;
	uint32_t slot = 0;
	assert_int_equal(cache_copy_in(base, 3 * 4096 + 100, "durable", 7, &slot, 0), COPY_HIT);
	struct chell_pmsim_stats st;
	chell_pmsim_stats(sim, &st);
	assert_int_equal(st.flushes, 2); /* the data, then the dirty table */
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.foreign_flushes, 0);
	assert_memory_equal((const char *)chell_pmsim_media(sim) + 3 * 4096 + 100, "durable", 7);
	cache_dax = 0;
	cache_persist = saved;
	chell_pmsim_free(sim);
}

static void test_truncated_chunk_is_a_miss(void **state)
{
	char buf[64];
	uint32_t slot = 0;
	/* what an eviction does to the chunk file under our mapping */
	assert_int_equal(ftruncate(fd, 0), 0);
	assert_int_equal(cache_copy_out(buf, base, 0, sizeof(buf), &slot), COPY_MISS);
	assert_int_equal(cache_copy_in(base, 0, "x", 1, &slot, 0), COPY_MISS);
	assert_int_equal(cache_ctl_live(base), 0);
	assert_int_equal(cache_ctl_check(base, 11, 12, 5), -EFAULT);
	/* and the guard is left cleanly: a later hit still works */
	assert_int_equal(ftruncate(fd, CACHE_CHUNK_FILE_BYTES), 0);
	teardown(state);
	setup(state);
	assert_int_equal(cache_copy_out(buf, base, 0, sizeof(buf), &slot), COPY_HIT);
}

int main(void)
{
	cache_copy_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_and_misses),
		cmocka_unit_test(test_store_marks_dirty_after_data),
		cmocka_unit_test(test_overwrite_only_invalid_blocks),
		cmocka_unit_test(test_bad_buffers),
		cmocka_unit_test(test_dax_store_flushes_through_the_core),
		cmocka_unit_test(test_truncated_chunk_is_a_miss),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
