/* Default persistence ops: the flush kind honours CHELL_PMEM_FLUSH (CTest
 * runs this once per kind), memcpy_nodrain copies exactly (streaming body,
 * unaligned head and tail, nothing outside the destination), and the DAX
 * probe says "needs msync" for tmpfs. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <chell/pmem.h>

static void test_kind(void **state)
{
	const char *want = getenv("CHELL_PMEM_FLUSH");
	const char *kind = chell_persist_kind();
	const struct chell_persist_ops *ops = chell_persist_default();

	assert_non_null(ops->flush);
	assert_non_null(ops->drain);
	assert_non_null(ops->memcpy_nodrain);
	if (want && *want) {
		/* Every kind is available on the CI machines (x86-64 with clwb). */
		assert_string_equal(kind, want);
	} else {
		assert_true(!strcmp(kind, "clwb") || !strcmp(kind, "clflushopt") || !strcmp(kind, "clflush"));
	}
	assert_ptr_equal(chell_persist_default(), ops); /* chosen once */
}

static void test_memcpy_nodrain(void **state)
{
	const struct chell_persist_ops *ops = chell_persist_default();
	enum { MAX = 1216, PAD = 128 }; /* keeps every size a multiple of 64 */
	uint8_t *src = aligned_alloc(64, MAX + 64);
	uint8_t *dst = aligned_alloc(64, MAX + 2 * PAD + 64);

	for (size_t i = 0; i < MAX + 64; i++)
		src[i] = (uint8_t)(i * 131 + 7);
	static const size_t sizes[] = {0, 1, 7, 63, 64, 65, 255, 256, 257, 300, 511, 512, 1000, 1199};
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
		for (size_t doff = 0; doff < 64; doff += 5)
			for (size_t soff = 0; soff < 17; soff += 8) {
				size_t n = sizes[si];
				memset(dst, 0xA5, MAX + 2 * PAD + 64);
				void *r = ops->memcpy_nodrain(ops->ctx, dst + PAD + doff, src + soff, n);
				ops->drain(ops->ctx);
				assert_ptr_equal(r, dst + PAD + doff);
				assert_memory_equal(dst + PAD + doff, src + soff, n);
				for (size_t i = 0; i < PAD + doff; i++)
					assert_int_equal(dst[i], 0xA5);
				for (size_t i = PAD + doff + n; i < MAX + 2 * PAD + 64; i++)
					assert_int_equal(dst[i], 0xA5);
			}
	/* Flushing any range (unaligned, empty) is harmless. */
	chell_persist(ops, dst + 3, 200);
	chell_persist(ops, dst, 0);
	free(src);
	free(dst);
}

static void test_dax_probe(void **state)
{
	char path[] = "/dev/shm/chell-unit-pmem-daxXXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	assert_int_equal(chell_pmem_fd_is_dax(fd), 0); /* tmpfs has no MAP_SYNC */
	close(fd);
	unlink(path);
	assert_int_equal(chell_pmem_fd_is_dax(-1), -EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kind),
		cmocka_unit_test(test_memcpy_nodrain),
		cmocka_unit_test(test_dax_probe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
