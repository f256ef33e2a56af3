/* CRC32C: the RFC 3720 (iSCSI) test vectors and the check value, for both
 * the SSE4.2 and the table implementation, plus agreement on odd lengths
 * and alignments (the hardware path steps bytes to an 8-byte boundary). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pmem_internal.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

static void vectors(crc_fn f)
{
	uint8_t b[32];

	assert_int_equal(f(0, "123456789", 9), 0xE3069283u);
	memset(b, 0, sizeof(b));
	assert_int_equal(f(0, b, 32), 0x8A9136AAu);
	memset(b, 0xff, sizeof(b));
	assert_int_equal(f(0, b, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	assert_int_equal(f(0, b, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	assert_int_equal(f(0, b, 32), 0x113FDB5Cu);
	assert_int_equal(f(0, b, 0), 0u);
	/* Chaining two calls equals one call over the whole buffer. */
	assert_int_equal(f(f(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void test_table(void **state)
{
	vectors(chell_crc32c_table);
}

static void test_hw(void **state)
{
	if (!chell_crc32c_hw_available()) {
		/* No SSE4.2: the dispatcher must be the table then. */
		vectors(chell_crc32c);
		return;
	}
	vectors(chell_crc32c_hw);
}

static void test_dispatch(void **state)
{
	vectors(chell_crc32c);
}

static void test_agree(void **state)
{
	uint8_t buf[300];

	srand(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len + off <= sizeof(buf); len += 7)
			assert_int_equal(chell_crc32c(0x1234, buf + off, len),
					 chell_crc32c_table(0x1234, buf + off, len));
}

/* Long buffers take the three-stream path (768-byte rounds joined with a
 * shift table): every length around and across round boundaries agrees. */
static void test_agree_long(void **state)
{
	static uint8_t buf[4 * 768 + 64];

	srand(11);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	for (size_t off = 0; off < 9; off += 3)
		for (size_t len = 700; len + off <= sizeof(buf); len += 13)
			assert_int_equal(chell_crc32c(0xdeadbeef, buf + off, len),
					 chell_crc32c_table(0xdeadbeef, buf + off, len));
	memset(buf, 0, sizeof(buf));
	assert_int_equal(chell_crc32c(0, buf, 3 * 768), chell_crc32c_table(0, buf, 3 * 768));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_hw),
		cmocka_unit_test(test_dispatch),
		cmocka_unit_test(test_agree),
		cmocka_unit_test(test_agree_long),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
