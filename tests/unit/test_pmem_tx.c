/* Journaled transactions: commit keeps, abort restores, an abandoned
 * transaction is rolled back at the next open, several ranges and several
 * journals, a full journal says -ENOSPC and stays consistent, stale and
 * torn entries are never applied. The "media" ops copy only flushed cache
 * lines into a second image, so a crash (opening that image) keeps exactly
 * what the protocol flushed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "chell/pmtx.h"
#include "pmem_internal.h"

static const struct chell_region_layout LAYOUT = {4, 16, 8192};

struct img {
	uint8_t *base;
	size_t len;
	struct pm_layout lay;
};

static void img_new(struct img *m, const struct chell_region_layout *l)
{
	struct pm_diag d;

	pm_diag_init(&d, NULL, 0, 0);
	assert_int_equal(pm_layout_plan(l, &m->lay, &d), 0);
	m->len = m->lay.total_size;
	m->base = aligned_alloc(4096, (m->len + 4095) & ~(size_t)4095);
	memset(m->base, 0, m->len);
	assert_int_equal(chell_region_format_mem(m->base, m->len, l, NULL, NULL, 0), 0);
	memcpy(m->lay.uuid, m->base + 16, 16); /* the plan has no UUID; format made one */
}

static struct chell_region *open_img(struct img *m, const struct chell_persist_ops *ops)
{
	struct chell_region *r;
	char err[256];

	int rc = chell_region_open_mem(m->base, m->len, ops, &r, err, sizeof(err));
	if (rc)
		fail_msg("open: %d %s", rc, err);
	return r;
}

static uint8_t *heap(struct chell_region *r)
{
	return chell_region_heap(r, NULL);
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static int unfinished(struct img *m)
{
	struct chell_region_report rep;
	assert_int_equal(chell_region_check_mem(m->base, m->len, &rep), 0);
	if (!rep.ok)
		fail_msg("check: %s", rep.text);
	return rep.unfinished_tx;
}

static void test_commit(void **state)
{
	struct img m;
	struct chell_tx *tx;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	fill(heap(r), 8192, 1);
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 100, 200), 0);
	memset(heap(r) + 100, 0xEE, 200);
	assert_int_equal(unfinished(&m), 1); /* open and uncommitted */
	assert_int_equal(chell_tx_commit(tx), 0);
	assert_int_equal(unfinished(&m), 0);
	assert_int_equal(chell_tx_commit(tx), -EINVAL); /* ended */
	chell_region_close(r);

	r = open_img(&m, NULL);
	for (int i = 0; i < 200; i++)
		assert_int_equal(heap(r)[100 + i], 0xEE);
	assert_int_equal(heap(r)[99], (uint8_t)(1 + 99 * 7));
	assert_int_equal(chell_region_recover(r, NULL, 0), 0);
	chell_region_close(r);
	free(m.base);
}

/* The typed wrapper counts undo records, not calls: an empty range is
 * accepted and writes none, so a transaction of empty ranges still counts
 * as having no record (pVM drains such a transaction itself at its end). */
static void test_ptx_counts_records(void **state)
{
	struct img m;
	struct chell_ptx t;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	assert_int_equal(chell_ptx_begin(&t, r, 0), 0);
	assert_non_null(chell_ptx_add(&t, 64, 0));
	assert_non_null(chell_ptx_log(&t, 128, 0));
	assert_int_equal(t.nadd, 0);
	assert_int_equal(unfinished(&m), 0); /* nothing was logged */
	assert_non_null(chell_ptx_add(&t, 64, 8));
	assert_int_equal(t.nadd, 1);
	assert_int_equal(chell_ptx_end(&t), 0);
	chell_region_close(r);
	free(m.base);
}

static void test_abort(void **state)
{
	struct img m;
	struct chell_tx *tx;
	uint8_t before[8192];

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	fill(heap(r), 8192, 3);
	memcpy(before, heap(r), 8192);
	assert_int_equal(chell_tx_begin(r, 1, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 50), 0);
	assert_int_equal(chell_tx_add_range(tx, 8000, 192), 0);
	memset(heap(r), 0, 50);
	memset(heap(r) + 8000, 0, 192);
	assert_int_equal(chell_tx_abort(tx), 0);
	assert_memory_equal(heap(r), before, 8192);
	assert_int_equal(unfinished(&m), 0);
	/* The journal is reusable at once. */
	assert_int_equal(chell_tx_begin(r, 1, &tx), 0);
	assert_int_equal(chell_tx_abort(tx), 0);
	chell_region_close(r);
	free(m.base);
}

/* Abandon open transactions (no commit), reopen: old contents are back,
 * including ranges recorded twice and ranges spanning many entries. */
static void test_crash_multi_range(void **state)
{
	struct img m;
	struct chell_tx *tx;
	uint8_t before[8192];

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	fill(heap(r), 8192, 5);
	memcpy(before, heap(r), 8192);
	assert_int_equal(chell_tx_begin(r, 2, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 7, 333), 0); /* header + 5 lines, unaligned */
	memset(heap(r) + 7, 1, 333);
	assert_int_equal(chell_tx_add_range(tx, 100, 10), 0); /* already modified part */
	memset(heap(r) + 100, 2, 10);
	assert_int_equal(chell_tx_add_range(tx, 8191, 1), 0); /* last byte */
	heap(r)[8191] ^= 0xff;
	chell_region_close(r); /* the "crash": nothing committed */

	assert_int_equal(unfinished(&m), 1);
	r = open_img(&m, NULL);
	assert_memory_equal(heap(r), before, 8192);
	assert_int_equal(unfinished(&m), 0);
	assert_int_equal(chell_region_recover(r, NULL, 0), 0); /* already done */
	chell_region_close(r);
	free(m.base);
}

static void test_multi_journal(void **state)
{
	struct img m;
	struct chell_tx *a, *b, *c, *busy;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	memset(heap(r), 'o', 8192);
	assert_int_equal(chell_tx_begin(r, 0, &a), 0);
	assert_int_equal(chell_tx_begin(r, 0, &busy), -EBUSY);
	assert_int_equal(chell_tx_begin(r, 4, &busy), -EINVAL);
	assert_int_equal(chell_tx_begin(r, 3, &b), 0);
	assert_int_equal(chell_tx_begin(r, 1, &c), 0);
	assert_int_equal(chell_tx_add_range(a, 0, 100), 0);
	assert_int_equal(chell_tx_add_range(b, 1000, 100), 0);
	assert_int_equal(chell_tx_add_range(c, 2000, 100), 0);
	memset(heap(r), 'a', 100);
	memset(heap(r) + 1000, 'b', 100);
	memset(heap(r) + 2000, 'c', 100);
	assert_int_equal(chell_tx_commit(a), 0);
	assert_int_equal(chell_region_recover(r, NULL, 0), -EBUSY); /* b, c open */
	assert_int_equal(unfinished(&m), 2);
	chell_region_close(r); /* b and c abandoned */

	r = open_img(&m, NULL);
	assert_int_equal(heap(r)[0], 'a');
	assert_int_equal(heap(r)[99], 'a');
	assert_int_equal(heap(r)[1000], 'o');
	assert_int_equal(heap(r)[1099], 'o');
	assert_int_equal(heap(r)[2050], 'o');
	chell_region_close(r);
	free(m.base);
}

/* 16 entries: 15 for undo records (one of 936 bytes = header with 40 +
 * 14 lines of 64) plus the finish record. */
static void test_journal_full(void **state)
{
	struct img m;
	struct chell_tx *tx;
	uint8_t before[8192];

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	fill(heap(r), 8192, 9);
	memcpy(before, heap(r), 8192);
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 937), -ENOSPC);
	assert_int_equal(chell_tx_add_range(tx, 0, 872), 0); /* entries 0..13 */
	memset(heap(r), 0, 872);
	assert_int_equal(chell_tx_add_range(tx, 4000, 41), -ENOSPC); /* two: the 16th */
	assert_int_equal(chell_tx_add_range(tx, 4000, 20), 0);      /* the 15th */
	memset(heap(r) + 4000, 0, 20);
	assert_int_equal(chell_tx_add_range(tx, 5000, 1), -ENOSPC);
	assert_int_equal(chell_tx_add_range(tx, 0, 8193), -EINVAL);
	assert_int_equal(chell_tx_add_range(tx, 8192, 1), -EINVAL);
	assert_int_equal(chell_tx_add_range(tx, UINT64_MAX, 2), -EINVAL);
	assert_int_equal(unfinished(&m), 1);
	chell_region_close(r); /* crash with a full journal */

	r = open_img(&m, NULL);
	assert_memory_equal(heap(r), before, 8192);
	/* And a full journal commits. */
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 936), 0);
	memset(heap(r), 'z', 936);
	assert_int_equal(chell_tx_commit(tx), 0);
	chell_region_close(r);
	r = open_img(&m, NULL);
	assert_int_equal(heap(r)[935], 'z');
	assert_int_equal(heap(r)[936], before[936]);
	chell_region_close(r);
	free(m.base);
}

/* Entries of a committed transaction stay in the journal; a later
 * transaction's crash must restore only its own (new generation). */
static void test_stale_entries(void **state)
{
	struct img m;
	struct chell_tx *tx;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	memset(heap(r), 'o', 8192);
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 240), 0); /* entries 0..4: header + 4 lines */
	memset(heap(r), 'n', 240);
	assert_int_equal(chell_tx_commit(tx), 0);
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 4096, 10), 0); /* entry 0 only */
	memset(heap(r) + 4096, 'x', 10);
	chell_region_close(r);

	r = open_img(&m, NULL);
	assert_int_equal(heap(r)[0], 'n');
	assert_int_equal(heap(r)[239], 'n');
	assert_int_equal(heap(r)[4096], 'o');
	chell_region_close(r);
	free(m.base);
}

/* A torn entry ends the scan: what precedes it is rolled back, nothing
 * after it is applied. */
static void test_torn_entry(void **state)
{
	struct img m;
	struct chell_tx *tx;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	memset(heap(r), 'o', 8192);
	assert_int_equal(chell_tx_begin(r, 1, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 10), 0);    /* entry 0 */
	assert_int_equal(chell_tx_add_range(tx, 100, 10), 0);  /* entry 1: torn below */
	assert_int_equal(chell_tx_add_range(tx, 200, 10), 0);  /* entry 2 */
	memset(heap(r), 'x', 300);
	chell_region_close(r);
	m.base[m.lay.journal_off + m.lay.journal_size + 2 * PM_ENTRY + 20] ^= 0x40;

	r = open_img(&m, NULL);
	assert_int_equal(heap(r)[0], 'o');
	assert_int_equal(heap(r)[100], 'x');
	assert_int_equal(heap(r)[200], 'x');
	chell_region_close(r);
	free(m.base);
}

/* An entry with a valid checksum pointing outside the heap is refused:
 * open fails without changing anything, check names it. */
static void test_inconsistent_entry(void **state)
{
	struct img m;
	struct chell_tx *tx;

	img_new(&m, &LAYOUT);
	struct chell_region *r = open_img(&m, NULL);
	assert_int_equal(chell_tx_begin(r, 3, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 0, 10), 0);
	uint64_t slot = pm_slot_load(m.base, &m.lay, 3);
	chell_region_close(r);

	struct pm_entry e;
	uint8_t *p = m.base + m.lay.journal_off + 3 * m.lay.journal_size + PM_ENTRY;
	memcpy(&e, p, sizeof(e));
	e.off = 8190; /* 10 bytes from here leave the heap */
	e.crc = pm_entry_crc(m.lay.uuid, 3, 0, PM_SLOT_GEN(slot), &e, NULL);
	memcpy(p, &e, sizeof(e));
	uint8_t *copy = malloc(m.len);
	memcpy(copy, m.base, m.len);

	char err[256];
	assert_int_equal(chell_region_open_mem(m.base, m.len, NULL, &r, err, sizeof(err)), -EUCLEAN);
	assert_non_null(strstr(err, "journal 3 entry 0 has a valid checksum but is inconsistent"));
	assert_memory_equal(copy, m.base, m.len);
	struct chell_region_report rep;
	assert_int_equal(chell_region_check_mem(m.base, m.len, &rep), 0);
	assert_int_equal(rep.ok, 0);
	assert_non_null(strstr(rep.text, "journal 3 entry 0"));
	free(copy);
	free(m.base);
}

/* ---- flushed-lines-only media ---- */
struct media {
	uint8_t *work, *disk;
	size_t len;
	int flushes, drains;
};

static void m_flush(void *ctx, const void *addr, size_t len)
{
	struct media *md = ctx;
	uintptr_t a = (uintptr_t)addr & ~(uintptr_t)63, e = (uintptr_t)addr + len;

	md->flushes++;
	for (; a < e; a += 64) {
		size_t off = a - (uintptr_t)md->work;
		assert_true(off < md->len);
		memcpy(md->disk + off, (void *)a, 64);
	}
}

static void m_drain(void *ctx)
{
	((struct media *)ctx)->drains++;
}

static void *m_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	m_flush(ctx, dst, n);
	return dst;
}

static void test_only_flushed_lines(void **state)
{
	struct img m, disk;
	struct media md;
	struct chell_tx *tx;

	img_new(&m, &LAYOUT);
	disk.lay = m.lay;
	disk.len = m.len;
	disk.base = aligned_alloc(4096, (m.len + 4095) & ~(size_t)4095);
	memcpy(disk.base, m.base, m.len); /* the formatted state is on media */
	md = (struct media){m.base, disk.base, m.len, 0, 0};
	struct chell_persist_ops ops = {m_flush, m_drain, m_memcpy, &md};

	struct chell_region *r = open_img(&m, &ops);
	/* Old contents written and persisted through the ops. */
	memset(heap(r), 'o', 8192);
	m_flush(&md, heap(r), 8192);
	assert_int_equal(chell_tx_begin(r, 2, &tx), 0);
	int d0 = md.drains;
	assert_int_equal(chell_tx_add_range(tx, 1000, 300), 0);
	assert_int_equal(md.drains, d0 + 1); /* slot and record drained before returning */
	memset(heap(r) + 1000, 'n', 300);
	/* Crash now: media has the undo entries and the active slot, and the
	 * new data may or may not have been evicted: say it was. */
	memcpy(disk.base + m.lay.heap_off + 1000, heap(r) + 1000, 300);
	uint8_t *snap = malloc(m.len);
	memcpy(snap, disk.base, m.len);
	struct chell_region *rd = open_img(&disk, NULL);
	for (int i = 0; i < 300; i++)
		assert_int_equal(heap(rd)[1000 + i], 'o');
	chell_region_close(rd);
	memcpy(disk.base, snap, m.len);

	/* Commit: after it, media alone has the new data, committed. */
	d0 = md.drains;
	assert_int_equal(chell_tx_commit(tx), 0);
	assert_int_equal(md.drains, d0 + 2); /* data, then the slot */
	/* The slot reset is on media when commit returns (the next
	 * transaction's records may overwrite these at once); no finish
	 * record is needed for the new data to stay (checked below). */
	uint64_t mem_slot = pm_slot_load(m.base, &m.lay, 2), disk_slot = pm_slot_load(disk.base, &disk.lay, 2);
	assert_int_equal(disk_slot, mem_slot);
	assert_int_equal(PM_SLOT_ACTIVE(disk_slot), 0);
	memcpy(snap, disk.base, m.len);
	rd = open_img(&disk, NULL);
	for (int i = 0; i < 300; i++)
		assert_int_equal(heap(rd)[1000 + i], 'n');
	chell_region_close(rd);
	chell_region_close(r);
	free(snap);
	free(disk.base);
	free(m.base);
}

/* A commit persists the record lines, the data and the slot: with the
 * record streamed as whole lines, the first add_range flushes the slot and
 * the record (one memcpy), commit the range and the slot (no finish
 * record), and an 8-byte range needs no staged tail. */
static void test_lines_per_commit(void **state)
{
	struct img m;
	struct chell_tx *tx;
	struct media md;

	img_new(&m, &LAYOUT);
	md = (struct media){m.base, malloc(m.len), m.len, 0, 0};
	struct chell_persist_ops ops = {m_flush, m_drain, m_memcpy, &md};
	struct chell_region *r = open_img(&m, &ops);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(chell_tx_begin(r, 1, &tx), 0);
		int f0 = md.flushes, d0 = md.drains;
		assert_int_equal(chell_tx_add_range(tx, 64, 8), 0);
		assert_int_equal(md.flushes - f0, 2); /* the slot, the record */
		memset(heap(r) + 64, 'a' + round, 8);
		f0 = md.flushes;
		assert_int_equal(chell_tx_commit(tx), 0);
		assert_int_equal(md.flushes - f0, 2); /* the range, the slot */
		assert_int_equal(md.drains - d0, 3);
		assert_int_equal(PM_SLOT_ACTIVE(pm_slot_load(m.base, &m.lay, 1)), 0);
	}
	chell_region_close(r);
	r = open_img(&m, NULL);
	assert_int_equal(heap(r)[64], 'c');
	chell_region_close(r);
	free(md.disk);
	free(m.base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commit),
		cmocka_unit_test(test_ptx_counts_records),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_crash_multi_range),
		cmocka_unit_test(test_multi_journal),
		cmocka_unit_test(test_journal_full),
		cmocka_unit_test(test_stale_entries),
		cmocka_unit_test(test_torn_entry),
		cmocka_unit_test(test_inconsistent_entry),
		cmocka_unit_test(test_only_flushed_lines),
		cmocka_unit_test(test_lines_per_commit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
