/* SPDX-License-Identifier: MIT */
/* Shadow file names: readable, injective, bounded, never containing '/'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "handlers/shadow.h"

static void mangles_separators(void **state)
{
	char out[SHADOW_NAME_BUF];
	size_t n = shadow_mangle("/dev/shm/x", out);
	assert_string_equal(out, "%2Fdev%2Fshm%2Fx");
	assert_int_equal(n, strlen(out));
}

static void escapes_percent_and_hash(void **state)
{
	char out[SHADOW_NAME_BUF];
	shadow_mangle("/a%2Fb/#c", out);
	assert_string_equal(out, "%2Fa%252Fb%2F%23c");
	/* Without escaping '%', "/a%2Fb" and "/a/b" would share a name. */
	char other[SHADOW_NAME_BUF];
	shadow_mangle("/a/b/#c", other);
	assert_string_not_equal(out, other);
}

static void round_trips(void **state)
{
	const char *paths[] = {"/", "/x", "/dev/shm/data.bin", "/we ird/na%me/#1/ü", "/a//b/"};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		char name[SHADOW_NAME_BUF], back[4096];
		shadow_mangle(paths[i], name);
		assert_null(strchr(name, '/'));
		assert_int_equal(shadow_unmangle(name, back, sizeof(back)), 0);
		assert_string_equal(back, paths[i]);
	}
}

static void unmangle_rejects_foreign_names(void **state)
{
	char back[64];
	assert_int_equal(shadow_unmangle("%2", back, sizeof(back)), -1);
	assert_int_equal(shadow_unmangle("%41", back, sizeof(back)), -1); /* 'A' is never escaped */
	assert_int_equal(shadow_unmangle("#0123", back, sizeof(back)), -1);
}

static void long_paths_are_hashed_and_bounded(void **state)
{
	char p1[1200], p2[1200];
	memset(p1, 0, sizeof(p1));
	strcpy(p1, "/");
	for (int i = 0; i < 100; i++)
		strcat(p1, "dir/");
	strcat(p1, "file.dat");
	strcpy(p2, p1);
	p2[5] = 'X'; /* differs early, far from the kept tail */

	char n1[SHADOW_NAME_BUF], n2[SHADOW_NAME_BUF];
	size_t l1 = shadow_mangle(p1, n1), l2 = shadow_mangle(p2, n2);
	assert_true(l1 <= SHADOW_NAME_MAX);
	assert_true(l2 <= SHADOW_NAME_MAX);
	assert_int_equal(n1[0], '#');
	assert_null(strchr(n1, '/'));
	assert_string_not_equal(n1, n2); /* the hash covers the whole path */
	/* The readable tail ends with the file name. */
	const char *tail = "%2Ffile.dat";
	assert_string_equal(n1 + l1 - strlen(tail), tail);
	/* Hashed names cannot be unmangled. */
	char back[2048];
	assert_int_equal(shadow_unmangle(n1, back, sizeof(back)), -1);
	/* The tail after "#<hash>#" starts on a whole character: it decodes. */
	const char *second = strchr(n1 + 1, '#');
	assert_non_null(second);
	assert_int_equal(second - n1, 17);
	assert_int_equal(shadow_unmangle(second + 1, back, sizeof(back)), 0);
	assert_true(strlen(back) > 100);
	assert_string_equal(back + strlen(back) - 9, "/file.dat");
}

static void boundary_length(void **state)
{
	/* Exactly SHADOW_NAME_MAX encoded bytes stays readable; one more hashes. */
	char p[SHADOW_NAME_MAX + 2];
	p[0] = '/';
	memset(p + 1, 'a', SHADOW_NAME_MAX - 3);
	p[SHADOW_NAME_MAX - 2] = '\0'; /* "/" (3 bytes encoded) + 197 'a' = 200 */
	char n[SHADOW_NAME_BUF];
	assert_int_equal(shadow_mangle(p, n), SHADOW_NAME_MAX);
	assert_int_equal(n[0], '%');
	strcat(p, "a");
	shadow_mangle(p, n);
	assert_int_equal(n[0], '#');
}

static void fnv_known_values(void **state)
{
	/* Published FNV-1a 64 test vectors. */
	assert_true(shadow_fnv1a("") == 0xcbf29ce484222325ull);
	assert_true(shadow_fnv1a("a") == 0xaf63dc4c8601ec8cull);
	assert_true(shadow_fnv1a("foobar") == 0x85944171f73967e8ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mangles_separators),
		cmocka_unit_test(escapes_percent_and_hash),
		cmocka_unit_test(round_trips),
		cmocka_unit_test(unmangle_rejects_foreign_names),
		cmocka_unit_test(long_paths_are_hashed_and_bounded),
		cmocka_unit_test(boundary_length),
		cmocka_unit_test(fnv_known_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
