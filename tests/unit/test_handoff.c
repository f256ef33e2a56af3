/* SPDX-License-Identifier: MIT */
/*
 * Descriptor handoff across exec: the environment handoff_prepare_exec()
 * builds, and adoption in the new image, tested for real by exec'ing this
 * binary (which carries the Nib layer) with a mode argument:
 *   --adopted A A2 SLOT GEN B   check the inherited descriptors were adopted
 *   --orphan SLOT GEN           check a close-on-exec-only OFD was released
 *   --expect FD 0|1             check whether FD is claimed
 * The new image exits 0 or with the number of the first failed check.
 * ctest routes /dev/shm/chell-unit-handoff (CHELL_PATHS).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

#define R "/dev/shm/chell-unit-handoff"

extern char **environ;

static char dir[128];
static char path_a[256], path_b[256], path_c[256];

static int setup_dirs(void **state)
{
	if (mkdir(R, 0700) < 0 && errno != EEXIST)
		return -1;
	snprintf(dir, sizeof(dir), R "/run-XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path_a, sizeof(path_a), "%s/a", dir);
	snprintf(path_b, sizeof(path_b), "%s/b", dir);
	snprintf(path_c, sizeof(path_c), "%s/c", dir);
	return 0;
}

static int teardown_dirs(void **state)
{
	unlink(path_a);
	unlink(path_b);
	unlink(path_c);
	rmdir(dir);
	rmdir(R); /* the last run out removes the root (ENOTEMPTY while another runs) */
	return 0;
}

static uint32_t refs_of(int fd)
{
	struct chell_file *f = fdt_peek(fd);
	assert_non_null(f);
	return atomic_load((_Atomic uint32_t *)&f->ofd->refs);
}

static const char *env_find(char **env, const char *name)
{
	size_t n = strlen(name);
	const char *found = NULL;
	for (int i = 0; env[i]; i++)
		if (strncmp(env[i], name, n) == 0 && env[i][n] == '=') {
			assert_null(found); /* at most once */
			found = env[i] + n + 1;
		}
	return found;
}

static int wait_exit(pid_t pid)
{
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

/* Run this binary again in a child: through the interposed execv (the real
 * path) or, with env != NULL, through the raw system call with exactly env. */
static int run_self(char *const argv[], char *const env[])
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (env) {
			ofd_table_set_cloexec(0);
			syscall(SYS_execve, "/proc/self/exe", argv, env);
		} else {
			execv("/proc/self/exe", argv);
		}
		_exit(120);
	}
	return wait_exit(pid);
}

/* ---------------------------------------------------------------- tests */

static void prepare_exec_environment(void **state)
{
	int a = open(path_a, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int b = open(path_b, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(a >= 0 && b >= 0);
	struct chell_file *fa = fdt_peek(a), *fb = fdt_peek(b);
	assert_non_null(fa);
	assert_non_null(fb);
	assert_int_equal(refs_of(b), 1);

	char *envp[] = {"X=1", "LD_PRELOAD=/other/lib.so", "CHELL_HANDOFF=stale", NULL};
	char **env = handoff_prepare_exec(envp, NULL);
	assert_ptr_not_equal(env, envp);
	assert_string_equal(env_find(env, "X"), "1");
	/* Chell's library first, then the application's preloads */
	char want[PATH_MAX + 64];
	snprintf(want, sizeof(want), "%s:/other/lib.so", chell_library_path());
	assert_true(chell_library_path()[0] == '/');
	assert_string_equal(env_find(env, "LD_PRELOAD"), want);
	/* settings the new environment lacks are carried over */
	assert_string_equal(env_find(env, "CHELL_MODE"), "posix");
	assert_string_equal(env_find(env, "CHELL_PATHS"), R);
	/* the stale handoff is replaced */
	const char *h = env_find(env, "CHELL_HANDOFF");
	assert_non_null(h);
	char head[64], ent_a[64], ent_b[64];
	snprintf(head, sizeof(head), "v1;r=%d;", ofd_table_fd());
	snprintf(ent_a, sizeof(ent_a), "%d:%u:%u,", a, fa->slot, fa->ofd->gen);
	snprintf(ent_b, sizeof(ent_b), ":%u:%u,", fb->slot, fb->ofd->gen);
	assert_true(strncmp(h, head, strlen(head)) == 0);
	assert_non_null(strstr(h, ent_a));
	/* b is close-on-exec and this was its last descriptor: a duplicate that
	 * survives carries it, and the new image closes it (";c=dup,") */
	char ent_b_fd[32];
	snprintf(ent_b_fd, sizeof(ent_b_fd), ";%d:", b);
	assert_null(strstr(h, ent_b_fd));
	const char *c = strstr(h, ";c=");
	assert_non_null(c);
	int dup = atoi(c + 3);
	assert_true(dup > b);
	char ent_dup[96];
	snprintf(ent_dup, sizeof(ent_dup), "%d%s", dup, ent_b);
	assert_non_null(strstr(h, ent_dup));
	assert_int_equal(fcntl(dup, F_GETFD), 0); /* survives the exec */
	assert_int_equal(refs_of(b), 1);          /* the duplicate holds it */
	/* the region memfd must survive the exec */
	assert_int_equal(fcntl(ofd_table_fd(), F_GETFD) & FD_CLOEXEC, 0);

	/* the exec failed: everything is as before */
	handoff_exec_failed(env);
	assert_true(fcntl(dup, F_GETFD) < 0 && errno == EBADF);
	assert_int_equal(refs_of(b), 1);
	assert_int_equal(refs_of(a), 1);
	assert_int_equal(fcntl(ofd_table_fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

	/* settings the application set itself are left alone, and an existing
	 * LD_PRELOAD that already names the library is kept as it is */
	char mode[] = "CHELL_MODE=trace";
	char pre[PATH_MAX + 32];
	snprintf(pre, sizeof(pre), "LD_PRELOAD=/x.so:%s", chell_library_path());
	char *envp2[] = {mode, pre, NULL};
	env = handoff_prepare_exec(envp2, NULL);
	assert_string_equal(env_find(env, "CHELL_MODE"), "trace");
	assert_string_equal(env_find(env, "LD_PRELOAD"), pre + strlen("LD_PRELOAD="));
	handoff_exec_failed(env);
	assert_int_equal(refs_of(b), 1);
	close(a);
	close(b);
}

static void exec_adopts_descriptors(void **state)
{
	int a = open(path_a, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(a >= 0);
	assert_int_equal(write(a, "hello world", 11), 11);
	assert_int_equal(lseek(a, 6, SEEK_SET), 6);
	int a2 = fcntl(a, F_DUPFD, 100);
	int b = open(path_b, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	assert_true(a2 >= 100 && b >= 0);
	struct chell_file *f = fdt_peek(a);
	assert_non_null(f);
	assert_int_equal(refs_of(a), 2);

	char s_a[16], s_a2[16], s_slot[16], s_gen[16], s_b[16];
	snprintf(s_a, sizeof(s_a), "%d", a);
	snprintf(s_a2, sizeof(s_a2), "%d", a2);
	snprintf(s_slot, sizeof(s_slot), "%u", f->slot);
	snprintf(s_gen, sizeof(s_gen), "%u", f->ofd->gen);
	snprintf(s_b, sizeof(s_b), "%d", b);
	char *argv[] = {"test_handoff", "--adopted", s_a, s_a2, s_slot, s_gen, s_b, NULL};
	assert_int_equal(run_self(argv, NULL), 0);

	/* the new image read 5 bytes through the shared offset, then exited
	 * still holding its two descriptors: their references are gone */
	assert_int_equal(lseek(a, 0, SEEK_CUR), 11);
	assert_int_equal(refs_of(a), 2);
	assert_int_equal(refs_of(b), 1);
	/* the parent is unaffected: the environment was built for the child */
	assert_null(getenv("CHELL_HANDOFF"));
	assert_int_equal(fcntl(ofd_table_fd(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	close(a);
	close(a2);
	close(b);
}

static void exec_releases_orphans(void **state)
{
	uint32_t *shared = chell_shared_area("unit-handoff-orphan", 2 * sizeof(uint32_t));
	assert_non_null(shared);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* only this process holds c, and only close-on-exec */
		int c = open(path_c, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		struct chell_file *f = fdt_peek(c);
		if (!f)
			_exit(90);
		shared[0] = f->slot;
		shared[1] = f->ofd->gen;
		char s_slot[16], s_gen[16];
		snprintf(s_slot, sizeof(s_slot), "%u", f->slot);
		snprintf(s_gen, sizeof(s_gen), "%u", f->ofd->gen);
		char *argv[] = {"test_handoff", "--orphan", s_slot, s_gen, NULL};
		execv("/proc/self/exe", argv);
		_exit(91);
	}
	assert_int_equal(wait_exit(pid), 0);
	struct chell_ofd *o = ofd_table_slot(shared[0]);
	assert_non_null(o);
	assert_true(o->in_use == 0 || o->gen != shared[1]);
}

/* Handoffs the new image must refuse, each next to the valid one (so a
 * refusal is for the stated reason, not because adoption never works). */
static void exec_rejects_bad_handoffs(void **state)
{
	int a = open(path_a, O_RDWR | O_CREAT, 0600);
	int other = open(path_b, O_RDWR | O_CREAT, 0600);
	assert_true(a >= 0 && other >= 0);
	struct chell_file *f = fdt_peek(a);
	assert_non_null(f);
	int plain = open("/dev/null", O_RDONLY);
	assert_true(plain >= 0);

	/* environment: ours without CHELL_HANDOFF, plus one handoff */
	int n = 0;
	while (environ[n])
		n++;
	char **env = calloc((size_t)n + 2, sizeof(char *));
	assert_non_null(env);
	int k = 0;
	for (int i = 0; i < n; i++)
		if (strncmp(environ[i], "CHELL_HANDOFF=", 14) != 0)
			env[k++] = environ[i];
	char h[256];
	env[k] = h;
	env[k + 1] = NULL;

	char s_a[16], s_other[16];
	snprintf(s_a, sizeof(s_a), "%d", a);
	snprintf(s_other, sizeof(s_other), "%d", other);
	char *expect_a_yes[] = {"test_handoff", "--expect", s_a, "1", NULL};
	char *expect_a_no[] = {"test_handoff", "--expect", s_a, "0", NULL};
	char *expect_other_no[] = {"test_handoff", "--expect", s_other, "0", NULL};
	int rfd = ofd_table_fd();
	uint32_t slot = f->slot, gen = f->ofd->gen;

	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:%u:%u,;", rfd, a, slot, gen);
	assert_int_equal(run_self(expect_a_yes, env), 0);
	/* a generation that does not match the slot: reused since */
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:%u:%u,;", rfd, a, slot, gen + 1);
	assert_int_equal(run_self(expect_a_no, env), 0);
	/* a descriptor that names another file than the slot's */
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:%u:%u,;", rfd, other, slot, gen);
	assert_int_equal(run_self(expect_other_no, env), 0);
	/* a slot out of range */
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:%u:%u,;", rfd, a, 999999u, gen);
	assert_int_equal(run_self(expect_a_no, env), 0);
	/* a region descriptor that is not a Chell region */
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:%u:%u,;", plain, a, slot, gen);
	assert_int_equal(run_self(expect_a_no, env), 0);
	/* not a handoff at all */
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v9;r=%d;%d:%u:%u,;", rfd, a, slot, gen);
	assert_int_equal(run_self(expect_a_no, env), 0);
	snprintf(h, sizeof(h), "CHELL_HANDOFF=garbage");
	assert_int_equal(run_self(expect_a_no, env), 0);
	snprintf(h, sizeof(h), "CHELL_HANDOFF=v1;r=%d;%d:xx,;-:zz", rfd, a);
	assert_int_equal(run_self(expect_a_no, env), 0);

	free(env);
	close(plain);
	close(a);
	close(other);
}

/* -------------------------------------------------------- the new image */

#define CHECK(n, cond)                                                        \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "check %d failed: %s\n", n, #cond);   \
			return n;                                             \
		}                                                             \
	} while (0)

static int image_adopted(char **argv)
{
	int a = atoi(argv[2]), a2 = atoi(argv[3]), b = atoi(argv[6]);
	uint32_t slot = (uint32_t)strtoul(argv[4], NULL, 10);
	uint32_t gen = (uint32_t)strtoul(argv[5], NULL, 10);
	CHECK(1, getenv("CHELL_HANDOFF") == NULL);
	struct chell_file *f = fdt_peek(a);
	CHECK(2, f != NULL);
	CHECK(3, f->slot == slot && f->ofd == ofd_table_slot(slot));
	CHECK(4, f->ofd->gen == gen);
	/* two descriptors of one OFD share one chell_file here too */
	CHECK(5, fdt_peek(a2) == f);
	/* parent: a, a2; this image: a, a2 */
	CHECK(6, atomic_load((_Atomic uint32_t *)&f->ofd->refs) == 4);
	CHECK(7, f->path != NULL && strstr(f->path, "/a") != NULL);
	/* b was close-on-exec: gone, and not in the table */
	CHECK(8, fdt_peek(b) == NULL && fcntl(b, F_GETFD) == -1);
	int rfd = ofd_table_fd();
	CHECK(9, rfd >= 0 && chell_is_internal_fd(rfd));
	CHECK(10, (fcntl(rfd, F_GETFD) & FD_CLOEXEC) == FD_CLOEXEC);
	CHECK(11, lseek(a, 0, SEEK_CUR) == 6);
	char buf[16] = {0};
	CHECK(12, read(a2, buf, sizeof(buf)) == 5 && memcmp(buf, "world", 5) == 0);
	return 0;
}

static int image_orphan(char **argv)
{
	uint32_t slot = (uint32_t)strtoul(argv[2], NULL, 10);
	uint32_t gen = (uint32_t)strtoul(argv[3], NULL, 10);
	struct chell_ofd *o = ofd_table_slot(slot);
	CHECK(1, o != NULL);
	CHECK(2, o->gen != gen || o->in_use == 0);
	return 0;
}

static int image_expect(char **argv)
{
	int fd = atoi(argv[2]);
	int want = atoi(argv[3]);
	CHECK(1, getenv("CHELL_HANDOFF") == NULL);
	CHECK(2, (fdt_peek(fd) != NULL) == want);
	/* claimed or not, the descriptor itself works */
	CHECK(3, fcntl(fd, F_GETFD) >= 0);
	return 0;
}

int main(int argc, char **argv)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	if (argc >= 7 && strcmp(argv[1], "--adopted") == 0)
		return image_adopted(argv);
	if (argc >= 4 && strcmp(argv[1], "--orphan") == 0)
		return image_orphan(argv);
	if (argc >= 4 && strcmp(argv[1], "--expect") == 0)
		return image_expect(argv);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(prepare_exec_environment),
		cmocka_unit_test(exec_adopts_descriptors),
		cmocka_unit_test(exec_releases_orphans),
		cmocka_unit_test(exec_rejects_bad_handoffs),
	};
	return cmocka_run_group_tests_name("handoff", tests, setup_dirs, teardown_dirs);
}
