/* Region format and validation: format/open round trips (memory and file)
 * and, for each kind of damage, the specific sentence open gives and the
 * report check gives. Layout damage is "re-sealed" (superblock CRC
 * recomputed) so it reaches the layout checks behind the checksum. */
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

#include "pmem_internal.h"

static const struct chell_region_layout LAYOUT = {3, 16, 65536};

struct img {
	uint8_t *base;
	size_t len;
	struct pm_layout lay;
};

static void img_new(struct img *m)
{
	struct pm_diag d;
	char err[256];

	pm_diag_init(&d, NULL, 0, 0);
	assert_int_equal(pm_layout_plan(&LAYOUT, &m->lay, &d), 0);
	m->len = m->lay.total_size;
	m->base = aligned_alloc(4096, (m->len + 4095) & ~(size_t)4095);
	memset(m->base, 0x5A, m->len);
	assert_int_equal(chell_region_format_mem(m->base, m->len, &LAYOUT, NULL, err, sizeof(err)), 0);
}

/* Open must fail with rc and an err containing want. */
static void expect_open(struct img *m, size_t len, int rc, const char *want)
{
	struct chell_region *r = (void *)1;
	char err[256];

	assert_int_equal(chell_region_open_mem(m->base, len, NULL, &r, err, sizeof(err)), rc);
	assert_null(r);
	if (!strstr(err, want))
		fail_msg("open said \"%s\", expected it to contain \"%s\"", err, want);
	/* check agrees, in the same words, without changing the image */
	struct chell_region_report rep;
	uint8_t *copy = malloc(len ? len : 1);
	memcpy(copy, m->base, len);
	assert_int_equal(chell_region_check_mem(m->base, len, &rep), 0);
	assert_memory_equal(copy, m->base, len);
	free(copy);
	assert_int_equal(rep.ok, 0);
	assert_true(rep.problems >= 1);
	if (!strstr(rep.text, want))
		fail_msg("check said \"%s\", expected \"%s\"", rep.text, want);
}

static void reseal(struct img *m)
{
	uint32_t c = pm_super_crc(m->base);
	memcpy(m->base + PM_SB_CRC_OFF, &c, 4);
}

static void put64(struct img *m, size_t off, uint64_t v)
{
	memcpy(m->base + off, &v, 8);
	reseal(m);
}

static void put32(struct img *m, size_t off, uint32_t v)
{
	memcpy(m->base + off, &v, 4);
	reseal(m);
}

static void test_roundtrip_mem(void **state)
{
	struct img m;
	struct chell_region *r;
	char err[256];
	uint64_t hs;
	uint8_t uuid[16], zero[16] = {0};

	img_new(&m);
	assert_int_equal(chell_region_open_mem(m.base, m.len, NULL, &r, err, sizeof(err)), 0);
	assert_string_equal(err, "");
	uint8_t *heap = chell_region_heap(r, &hs);
	assert_int_equal(hs, 65536);
	assert_ptr_equal(heap, m.base + m.lay.heap_off);
	assert_int_equal(m.lay.heap_off % 4096, 0);
	memcpy(uuid, chell_region_uuid(r), 16);
	assert_memory_not_equal(uuid, zero, 16);
	assert_int_equal(uuid[6] >> 4, 4); /* version-4 UUID */
	memset(heap, 0x42, 100);
	chell_region_close(r);

	assert_int_equal(chell_region_open_mem(m.base, m.len, NULL, &r, err, sizeof(err)), 0);
	assert_memory_equal(chell_region_uuid(r), uuid, 16);
	heap = chell_region_heap(r, NULL);
	assert_int_equal(heap[99], 0x42);
	chell_region_close(r);

	struct chell_region_report rep;
	assert_int_equal(chell_region_check_mem(m.base, m.len, &rep), 0);
	assert_int_equal(rep.ok, 1);
	assert_int_equal(rep.problems, 0);
	assert_int_equal(rep.unfinished_tx, 0);
	assert_string_equal(rep.text, "");

	/* A second format gives a new identity. */
	assert_int_equal(chell_region_format_mem(m.base, m.len, &LAYOUT, NULL, err, sizeof(err)), 0);
	assert_memory_not_equal(m.base + 16, uuid, 16);
	free(m.base);
}

static void test_format_errors(void **state)
{
	struct img m;
	char err[256];
	struct chell_region_layout bad = LAYOUT;

	img_new(&m);
	assert_int_equal(chell_region_format_mem(m.base, m.len - 1, &LAYOUT, NULL, err, sizeof(err)), -ENOSPC);
	assert_non_null(strstr(err, "too small for the layout"));
	assert_int_equal(chell_region_format_mem(m.base + 4, m.len - 8, &LAYOUT, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not 8-byte aligned"));
	bad.journals = 0;
	assert_int_equal(chell_region_format_mem(m.base, m.len, &bad, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "journal count 0 out of range"));
	bad = LAYOUT;
	bad.journal_entries = 1;
	assert_int_equal(chell_region_format_mem(m.base, m.len, &bad, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "journal entries 1 out of range"));
	bad = LAYOUT;
	bad.heap_size = 0;
	assert_int_equal(chell_region_format_mem(m.base, m.len, &bad, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "heap size 0"));
	free(m.base);
}

static void test_magic_version(void **state)
{
	struct img m;

	img_new(&m);
	m.base[0] = 'X';
	expect_open(&m, m.len, -EINVAL, "not a Chell region (magic \"XHELLPM1\", expected \"CHELLPM1\")");
	memset(m.base, 0, 8);
	expect_open(&m, m.len, -EINVAL, "magic \"\\x00\\x00");
	free(m.base);

	img_new(&m);
	m.base[8] ^= 0x01; /* version 2 -> 3 */
	expect_open(&m, m.len, -ENOTSUP, "unsupported region version 3 (this build reads version 2)");
	free(m.base);
}

/* A flip of any byte covered by the checksum names both values. */
static void test_checksum_each_field(void **state)
{
	static const size_t offs[] = {12, 16, 31, 32, 36, 40, 48, 56, 64, 72, 80, 88, 95, 96, 99, 100, 500, 4095};
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		struct img m;
		uint32_t stored;
		char want[128];

		img_new(&m);
		m.base[offs[i]] ^= 0x10;
		memcpy(&stored, m.base + PM_SB_CRC_OFF, 4);
		snprintf(want, sizeof(want), "superblock checksum mismatch: stored 0x%08x, computed 0x%08x", stored,
			 pm_super_crc(m.base));
		expect_open(&m, m.len, -EUCLEAN, want);
		free(m.base);
	}
}

static void test_layout_resealed(void **state)
{
	struct img m;

	img_new(&m);
	put32(&m, 12, 4);
	expect_open(&m, m.len, -ENOTSUP, "unknown superblock flags 0x00000004");
	free(m.base);

	img_new(&m);
	put32(&m, 32, 0);
	expect_open(&m, m.len, -EUCLEAN, "superblock journal count 0 out of range");
	free(m.base);

	img_new(&m);
	put32(&m, 36, 1u << 30);
	expect_open(&m, m.len, -EUCLEAN, "superblock journal entries 1073741824 out of range");
	free(m.base);

	img_new(&m);
	put64(&m, 88, m.len + 1);
	expect_open(&m, m.len, -EUCLEAN, "exceeds the image");
	free(m.base);

	img_new(&m);
	put64(&m, 48, m.lay.master_size + 64);
	expect_open(&m, m.len, -EUCLEAN, "master journal size");
	free(m.base);

	img_new(&m);
	put64(&m, 64, m.lay.journal_size - 64);
	expect_open(&m, m.len, -EUCLEAN, "journal size");
	free(m.base);

	img_new(&m);
	put64(&m, 72, m.lay.journal_off + 64); /* heap inside the journals */
	expect_open(&m, m.len, -EUCLEAN, "areas overlap: client journals");
	free(m.base);

	img_new(&m);
	put64(&m, 40, 0); /* master journal over the superblock */
	expect_open(&m, m.len, -EUCLEAN, "areas overlap: superblock [0, 4096) and master journal");
	free(m.base);

	img_new(&m);
	put64(&m, 72, m.lay.heap_off + 8);
	expect_open(&m, m.len, -EUCLEAN, "heap offset");
	free(m.base);

	img_new(&m);
	put64(&m, 80, m.lay.heap_size + 4096); /* heap past the region's end */
	expect_open(&m, m.len, -EUCLEAN, "heap [");
	free(m.base);

	img_new(&m);
	put64(&m, 56, UINT64_MAX - 63); /* offsets near 2^64 must not wrap */
	expect_open(&m, m.len, -EUCLEAN, "client journals [");
	free(m.base);

	img_new(&m);
	put64(&m, 80, 0);
	expect_open(&m, m.len, -EUCLEAN, "heap size is zero");
	free(m.base);
}

static void test_truncated(void **state)
{
	struct img m;

	img_new(&m);
	char want[128];
	snprintf(want, sizeof(want), "region size %zu exceeds the image (%zu bytes): truncated", m.len, m.len - 1);
	expect_open(&m, m.len - 1, -EUCLEAN, want);
	expect_open(&m, 100, -EUCLEAN, "image too small for a superblock: 100 bytes, need 4096");
	expect_open(&m, 0, -EUCLEAN, "image too small for a superblock: 0 bytes");
	free(m.base);
}

static void test_journal_headers(void **state)
{
	struct img m, other;

	img_new(&m);
	m.base[m.lay.journal_off + m.lay.journal_size + 20] ^= 1; /* journal 1's uuid */
	expect_open(&m, m.len, -EUCLEAN, "journal 1 header checksum mismatch: stored 0x");
	free(m.base);

	img_new(&m);
	m.base[m.lay.master_off + 3] = 'x';
	expect_open(&m, m.len, -EUCLEAN, "master journal header has a wrong magic \"CHExLMJ1\"");
	free(m.base);

	/* A well-formed header of another region's journal 2. */
	img_new(&m);
	img_new(&other);
	memcpy(m.base + m.lay.journal_off + 2 * m.lay.journal_size,
	       other.base + other.lay.journal_off + 2 * other.lay.journal_size, PM_ENTRY);
	expect_open(&m, m.len, -EUCLEAN, "journal 2 belongs to another region");
	free(other.base);

	/* Check lists every damaged header, one line each. */
	img_new(&other);
	other.base[other.lay.journal_off + 9] ^= 1;
	other.base[other.lay.journal_off + 2 * other.lay.journal_size + 9] ^= 1;
	struct chell_region_report rep;
	assert_int_equal(chell_region_check_mem(other.base, other.len, &rep), 0);
	assert_int_equal(rep.problems, 2);
	assert_non_null(strstr(rep.text, "journal 0 header checksum mismatch"));
	assert_non_null(strstr(rep.text, "\njournal 2 header checksum mismatch"));
	free(other.base);
	free(m.base);
}

static void test_file(void **state)
{
	char dir[] = "/dev/shm/chell-unit-pmem-XXXXXX";
	char path[128], err[256];
	struct chell_region *r, *r2;
	struct chell_tx *tx;
	struct chell_region_report rep;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/pool", dir);
	assert_int_equal(chell_region_create(path, &LAYOUT, &r, err, sizeof(err)), 0);
	uint64_t hs;
	uint8_t *heap = chell_region_heap(r, &hs);
	assert_int_equal(hs, 65536);
	assert_int_equal(chell_tx_begin(r, 0, &tx), 0);
	assert_int_equal(chell_tx_add_range(tx, 1000, 10), 0);
	memcpy(heap + 1000, "persistent", 10);
	assert_int_equal(chell_tx_commit(tx), 0);

	/* One process at a time. */
	assert_int_equal(chell_region_open(path, &r2, err, sizeof(err)), -EWOULDBLOCK);
	assert_non_null(strstr(err, "in use by another process"));
	chell_region_close(r);

	assert_int_equal(chell_region_check(path, &rep), 0);
	assert_int_equal(rep.ok, 1);
	assert_int_equal(chell_region_open(path, &r, err, sizeof(err)), 0);
	assert_memory_equal((uint8_t *)chell_region_heap(r, NULL) + 1000, "persistent", 10);
	chell_region_close(r);

	/* Truncated file: open and check say so. */
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(truncate(path, st.st_size - 4096), 0);
	assert_int_equal(chell_region_open(path, &r, err, sizeof(err)), -EUCLEAN);
	assert_non_null(strstr(err, "exceeds the image"));
	assert_int_equal(chell_region_check(path, &rep), 0);
	assert_int_equal(rep.ok, 0);
	assert_non_null(strstr(rep.text, "truncated"));
	assert_int_equal(truncate(path, 10), 0);
	assert_int_equal(chell_region_open(path, &r, err, sizeof(err)), -EUCLEAN);
	assert_non_null(strstr(err, "image too small for a superblock: 10 bytes"));
	assert_int_equal(chell_region_check(path, &rep), 0);
	assert_non_null(strstr(rep.text, "image too small for a superblock: 10 bytes"));

	/* A missing file is an errno, not a report. */
	unlink(path);
	assert_int_equal(chell_region_check(path, &rep), -ENOENT);
	assert_int_equal(chell_region_open(path, &r, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "cannot open"));
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_mem),
		cmocka_unit_test(test_format_errors),
		cmocka_unit_test(test_magic_version),
		cmocka_unit_test(test_checksum_each_field),
		cmocka_unit_test(test_layout_resealed),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_journal_headers),
		cmocka_unit_test(test_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
