/* SPDX-License-Identifier: MIT */
/*
 * Routing: router_abspath (lexical normalisation, cwd and dirfd relative
 * names, length limits) and router_route_abs (prefix matching, excluded
 * trees). The binary is linked with the Nib sources, so the constructor has
 * loaded the configuration from the environment ctest sets; argv[1] says
 * which configuration that is:
 *   prefixes  CHELL_PATHS=R/a/b:R/x//y/../z/:R/cwd, shadow dir R/shadow
 *   all       CHELL_PATHS empty (every file), shadow dir R/shadow/
 *   root      CHELL_PATHS=/ (default shadow dir /tmp/chell-shadow)
 * with R = /dev/shm/chell-unit-router.
 */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

#define R "/dev/shm/chell-unit-router"

static char out[PATH_MAX];

static void expect_abs(const char *in, const char *want)
{
	int r = router_abspath(AT_FDCWD, in, out, sizeof(out));
	assert_int_equal(r, 0);
	assert_string_equal(out, want);
}

/* ------------------------------------------------------ normalisation */

static void abs_normalise(void **state)
{
	expect_abs("/", "/");
	expect_abs("//", "/");
	expect_abs("///a///b//", "/a/b");
	expect_abs("/a/./b/.", "/a/b");
	expect_abs("/a/b/../c", "/a/c");
	expect_abs("/a/b/../../..", "/");
	expect_abs("/../../x", "/x");
	expect_abs("/a/b/c/../../d/./e/..", "/a/d");
	/* only "." and ".." are special: look-alike names stay */
	expect_abs("/a/..b/.c/.../b..", "/a/..b/.c/.../b..");
	expect_abs("/a/.", "/a");
	expect_abs("/.", "/");
	expect_abs("/..", "/");
}

static void abs_relative_cwd(void **state)
{
	char dir[] = "/dev/shm/chell-unit-router-cwd-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char old[PATH_MAX];
	assert_non_null(getcwd(old, sizeof(old)));
	assert_int_equal(chdir(dir), 0);

	char want[PATH_MAX * 2];
	expect_abs(".", dir);
	expect_abs("", dir); /* empty relative name: the directory itself */
	snprintf(want, sizeof(want), "%s/f", dir);
	expect_abs("f", want);
	expect_abs("./x/../f", want);
	expect_abs("x//..//f/", want);
	expect_abs("..", "/dev/shm");
	expect_abs("../../../../../..", "/");
	expect_abs("../chell-unit-router/../x", "/dev/shm/x");

	assert_int_equal(chdir("/"), 0);
	expect_abs("a/../../b", "/b");

	assert_int_equal(chdir(old), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void abs_relative_dirfd(void **state)
{
	char dir[] = "/dev/shm/chell-unit-router-dfd-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char sub[PATH_MAX];
	snprintf(sub, sizeof(sub), "%s/sub", dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	int dfd = open(sub, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	int pfd = open(dir, O_PATH);
	assert_true(pfd >= 0);

	char want[PATH_MAX * 2];
	/* the dirfd wins over the cwd (which is elsewhere) */
	snprintf(want, sizeof(want), "%s/sub/f", dir);
	assert_int_equal(router_abspath(dfd, "f", out, sizeof(out)), 0);
	assert_string_equal(out, want);
	assert_int_equal(router_abspath(pfd, "sub/./g/../f", out, sizeof(out)), 0);
	assert_string_equal(out, want);
	snprintf(want, sizeof(want), "%s/f", dir);
	assert_int_equal(router_abspath(dfd, "../f", out, sizeof(out)), 0);
	assert_string_equal(out, want);
	/* an absolute name ignores dirfd, as openat does */
	assert_int_equal(router_abspath(dfd, "/q/./r", out, sizeof(out)), 0);
	assert_string_equal(out, "/q/r");

	/* a descriptor that names no directory path: a pipe */
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(router_abspath(p[0], "f", out, sizeof(out)), -ENOTDIR);
	/* a closed descriptor cannot be resolved */
	int closed = p[1];
	close(p[0]);
	close(p[1]);
	assert_true(router_abspath(closed, "f", out, sizeof(out)) < 0);

	close(dfd);
	close(pfd);
	rmdir(sub);
	rmdir(dir);
}

static void abs_too_long(void **state)
{
	/* absolute: the name and its NUL must fit */
	char small[8];
	assert_int_equal(router_abspath(AT_FDCWD, "/abcdef", small, sizeof(small)), 0);
	assert_string_equal(small, "/abcdef");
	assert_int_equal(router_abspath(AT_FDCWD, "/abcdefg", small, sizeof(small)),
			 -ENAMETOOLONG);

	char *big = malloc(PATH_MAX + 16);
	assert_non_null(big);
	big[0] = '/';
	memset(big + 1, 'a', PATH_MAX + 8);
	big[PATH_MAX + 9] = 0;
	assert_int_equal(router_abspath(AT_FDCWD, big, out, sizeof(out)), -ENAMETOOLONG);

	/* relative: cwd + '/' + name + NUL must fit; check the exact boundary */
	char old[PATH_MAX];
	assert_non_null(getcwd(old, sizeof(old)));
	assert_int_equal(chdir("/dev/shm"), 0);
	size_t cwdlen = strlen("/dev/shm");
	char buf[64];
	const char *name = "abcd";
	size_t need = cwdlen + 1 + strlen(name) + 1;
	assert_true(need <= sizeof(buf));
	assert_int_equal(router_abspath(AT_FDCWD, name, buf, need), 0);
	assert_string_equal(buf, "/dev/shm/abcd");
	assert_int_equal(router_abspath(AT_FDCWD, name, buf, need - 1), -ENAMETOOLONG);
	/* a relative name that is by itself too long */
	memset(big, 'b', PATH_MAX + 8);
	big[PATH_MAX + 8] = 0;
	assert_int_equal(router_abspath(AT_FDCWD, big, out, sizeof(out)), -ENAMETOOLONG);
	assert_int_equal(chdir(old), 0);
	free(big);
}

/* ------------------------------------------------------------- routing */

static bool routed(const char *abs)
{
	return router_route_abs(abs) != NULL;
}

static void route_prefixes(void **state)
{
	assert_non_null(chell_mode_stack);
	assert_true(router_route_abs(R "/a/b") == chell_mode_stack);
	assert_true(routed(R "/a/b/c"));
	assert_true(routed(R "/a/b/c/d/e"));
	/* a sibling sharing the prefix's characters is not under it */
	assert_false(routed(R "/a/bc"));
	assert_false(routed(R "/a/b.c"));
	assert_false(routed(R "/a"));
	assert_false(routed(R));
	assert_false(routed("/"));
	assert_false(routed("/etc/passwd"));
	/* the second prefix was normalised when loaded: R/x//y/../z/ is R/x/z */
	assert_true(routed(R "/x/z"));
	assert_true(routed(R "/x/z/f"));
	assert_false(routed(R "/x/y"));
	assert_false(routed(R "/x/y/z"));
	assert_false(routed(R "/x"));
}

static void route_relative(void **state)
{
	char abs[PATH_MAX];
	/* router_route: names relative to the cwd and to a dirfd */
	assert_int_equal(mkdir(R, 0700) == 0 || errno == EEXIST, 1);
	assert_int_equal(mkdir(R "/cwd", 0700) == 0 || errno == EEXIST, 1);
	char old[PATH_MAX];
	assert_non_null(getcwd(old, sizeof(old)));
	assert_int_equal(chdir(R "/cwd"), 0);
	assert_true(router_route(AT_FDCWD, "f", abs, sizeof(abs)) == chell_mode_stack);
	assert_string_equal(abs, R "/cwd/f");
	assert_null(router_route(AT_FDCWD, "../f", abs, sizeof(abs)));
	assert_string_equal(abs, R "/f");
	assert_true(router_route(AT_FDCWD, "../a/b/g", abs, sizeof(abs)) != NULL);
	assert_string_equal(abs, R "/a/b/g");
	/* the empty name is never routed (open("") is ENOENT) */
	assert_null(router_route(AT_FDCWD, "", abs, sizeof(abs)));
	int dfd = open(R, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_int_equal(chdir("/"), 0);
	assert_non_null(router_route(dfd, "cwd/h", abs, sizeof(abs)));
	assert_string_equal(abs, R "/cwd/h");
	assert_null(router_route(dfd, "h", abs, sizeof(abs)));
	close(dfd);
	assert_int_equal(chdir(old), 0);
	rmdir(R "/cwd");
	rmdir(R);
}

static void route_all(void **state)
{
	/* no prefixes: every regular path ... */
	assert_true(routed("/"));
	assert_true(routed("/etc/passwd"));
	assert_true(routed("/procfs-lookalike"));
	assert_true(routed("/system"));
	assert_true(routed(R "/shadowy"));
	/* ... except the kernel's pseudo file systems */
	assert_false(routed("/proc"));
	assert_false(routed("/proc/self/fd/0"));
	assert_false(routed("/sys"));
	assert_false(routed("/sys/kernel/mm"));
	/* and the shadow checker's own copies (configured with a trailing '/') */
	assert_false(routed(R "/shadow"));
	assert_false(routed(R "/shadow/x/y"));
}

static void route_root(void **state)
{
	assert_true(routed("/"));
	assert_true(routed("/a"));
	assert_true(routed("/dev/shm/x/y"));
	assert_false(routed("/proc/1/status"));
	assert_false(routed("/sys/class"));
	/* the default shadow directory is excluded even in posix mode */
	assert_false(routed("/tmp/chell-shadow/f"));
	assert_true(routed("/tmp/chell-shadowy"));
}

int main(int argc, char **argv)
{
	const char *which = argc > 1 ? argv[1] : "prefixes";
	const struct CMUnitTest common[] = {
		cmocka_unit_test(abs_normalise),
		cmocka_unit_test(abs_relative_cwd),
		cmocka_unit_test(abs_relative_dirfd),
		cmocka_unit_test(abs_too_long),
	};
	const struct CMUnitTest prefixes[] = {
		cmocka_unit_test(route_prefixes),
		cmocka_unit_test(route_relative),
	};
	const struct CMUnitTest all[] = {cmocka_unit_test(route_all)};
	const struct CMUnitTest root[] = {cmocka_unit_test(route_root)};
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	if (strcmp(which, "prefixes") == 0) {
		int r = cmocka_run_group_tests_name("router_abspath", common, NULL, NULL);
		return r + cmocka_run_group_tests_name("router_prefixes", prefixes, NULL, NULL);
	}
	if (strcmp(which, "all") == 0)
		return cmocka_run_group_tests_name("router_all", all, NULL, NULL);
	if (strcmp(which, "root") == 0)
		return cmocka_run_group_tests_name("router_root", root, NULL, NULL);
	fprintf(stderr, "usage: %s prefixes|all|root\n", argv[0]);
	return 2;
}
