/* SPDX-License-Identifier: MIT */
/*
 * The per-process descriptor table and OFD reference counts, driven through
 * the interposed calls (open, dup*, fcntl, close, close_range, fork) exactly
 * as an application drives them; and Chell's internal descriptors, which
 * the application must not be able to see or close. ctest routes
 * /dev/shm/chell-unit-fdtable (CHELL_PATHS); each run works in a fresh
 * directory below it.
 */
#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nib.h"

#define R "/dev/shm/chell-unit-fdtable"

static char dir[128];     /* routed */
static char outdir[128];  /* not routed */
static char path_a[256], path_b[256], path_out[256];

static uint32_t count_in_use(void)
{
	if (ofd_table_fd() < 0)
		return 0;
	uint32_t n = 0;
	for (uint32_t s = 0; s < ofd_table_slot_count(); s++)
		n += atomic_load((_Atomic uint32_t *)&ofd_table_slot(s)->in_use) != 0;
	return n;
}

static uint32_t ofd_refs(int fd)
{
	struct chell_file *f = fdt_peek(fd);
	assert_non_null(f);
	return atomic_load((_Atomic uint32_t *)&f->ofd->refs);
}

static int setup_dirs(void **state)
{
	if (mkdir(R, 0700) < 0 && errno != EEXIST)
		return -1;
	snprintf(dir, sizeof(dir), R "/run-XXXXXX");
	snprintf(outdir, sizeof(outdir), R "-out-XXXXXX");
	if (!mkdtemp(dir) || !mkdtemp(outdir))
		return -1;
	snprintf(path_a, sizeof(path_a), "%s/a", dir);
	snprintf(path_b, sizeof(path_b), "%s/b", dir);
	snprintf(path_out, sizeof(path_out), "%s/o", outdir);
	return 0;
}

static int teardown_dirs(void **state)
{
	unlink(path_a);
	unlink(path_b);
	unlink(path_out);
	rmdir(dir);
	rmdir(outdir);
	rmdir(R); /* the last run out removes the root (ENOTEMPTY while another runs) */
	return 0;
}

/* ----------------------------------------------------------------- tests */

static void unclaimed_lookups(void **state)
{
	assert_null(fdt_peek(-1));
	assert_null(fdt_peek(INT32_MAX));
	assert_null(fdt_peek((int)chell_fdt_cap));
	assert_null(file_get_fd(-5));
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_null(fdt_peek(p[0]));
	assert_null(fdt_peek(p[1]));
	close(p[0]);
	close(p[1]);
	/* a file outside the routed prefix stays with the kernel */
	int fd = open(path_out, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_null(fdt_peek(fd));
	assert_int_equal(close(fd), 0);
}

static void open_claims_routed_file(void **state)
{
	uint32_t base = count_in_use();
	int fd = open(path_a, O_RDWR | O_CREAT | O_APPEND, 0600);
	assert_true(fd >= 0);
	struct chell_file *f = fdt_peek(fd);
	assert_non_null(f);
	assert_true(f->stack == chell_mode_stack);
	assert_string_equal(f->path, path_a);
	assert_ptr_equal(f->ofd, ofd_table_slot(f->slot));
	assert_int_equal(f->ofd->in_use, 1);
	assert_int_equal(ofd_refs(fd), 1);
	assert_int_equal(nib_file(f)->refs, 1); /* one descriptor, no call in flight */
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(f->ofd->dev, st.st_dev);
	assert_int_equal(f->ofd->ino, st.st_ino);
	assert_int_equal(f->ofd->status_flags, fcntl(fd, F_GETFL));
	assert_true(f->ofd->status_flags & O_APPEND);
	assert_true(fdt_max() >= fd);
	assert_int_equal(count_in_use(), base + 1);

	/* file_get_fd takes a reference for the duration of a call */
	struct chell_file *g = file_get_fd(fd);
	assert_ptr_equal(g, f);
	assert_int_equal(nib_file(f)->refs, 2);
	file_put(g);
	assert_int_equal(nib_file(f)->refs, 1);

	/* fcntl(F_SETFL) keeps the shared copy of the status flags current */
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(f->ofd->status_flags, fcntl(fd, F_GETFL));
	assert_false(f->ofd->status_flags & O_APPEND);

	uint32_t slot = f->slot;
	assert_int_equal(close(fd), 0);
	assert_null(fdt_peek(fd));
	assert_int_equal(ofd_table_slot(slot)->in_use, 0);
	assert_int_equal(count_in_use(), base);
	/* the kernel descriptor is really gone */
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
}

static void open_relative_and_dirfd(void **state)
{
	int fd0 = open(path_a, O_RDWR | O_CREAT, 0600);
	assert_true(fd0 >= 0);
	close(fd0);
	char old[PATH_MAX];
	assert_non_null(getcwd(old, sizeof(old)));
	assert_int_equal(chdir(dir), 0);
	int fd = open("./x/../a", O_RDONLY);
	/* x does not exist: the kernel says ENOENT; nothing is claimed or leaked */
	assert_int_equal(fd, -1);
	assert_int_equal(errno, ENOENT);
	fd = open("a", O_RDONLY);
	assert_true(fd >= 0);
	assert_non_null(fdt_peek(fd));
	assert_string_equal(fdt_peek(fd)->path, path_a);
	close(fd);
	assert_int_equal(chdir(old), 0);

	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	assert_true(dfd >= 0);
	assert_null(fdt_peek(dfd)); /* directories are not claimed */
	fd = openat(dfd, "a", O_RDONLY);
	assert_true(fd >= 0);
	assert_non_null(fdt_peek(fd));
	assert_string_equal(fdt_peek(fd)->path, path_a);
	close(fd);
	/* O_PATH carries no data: not claimed */
	fd = openat(dfd, "a", O_PATH);
	assert_true(fd >= 0);
	assert_null(fdt_peek(fd));
	close(fd);
	close(dfd);
}

/* Non-regular files under the prefix are left to the kernel, and the slot
 * taken while opening them is given back. So are failed opens. */
static void non_regular_and_failed_opens_leak_nothing(void **state)
{
	uint32_t base = count_in_use();
	char fifo[256];
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	int fd = open(fifo, O_RDWR); /* O_RDWR: does not wait for a peer */
	assert_true(fd >= 0);
	assert_null(fdt_peek(fd));
	assert_int_equal(count_in_use(), base);
	assert_int_equal(write(fd, "x", 1), 1);
	char c;
	assert_int_equal(read(fd, &c, 1), 1);
	close(fd);
	unlink(fifo);

	fd = open(dir, O_RDONLY); /* a directory without O_DIRECTORY */
	assert_true(fd >= 0);
	assert_null(fdt_peek(fd));
	close(fd);
	assert_int_equal(count_in_use(), base);

	char missing[256];
	snprintf(missing, sizeof(missing), "%s/nope", dir);
	assert_int_equal(open(missing, O_RDONLY), -1);
	assert_int_equal(errno, ENOENT);
	fd = open(path_a, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(open(path_a, O_RDWR | O_CREAT | O_EXCL, 0600), -1);
	assert_int_equal(errno, EEXIST);
	assert_int_equal(count_in_use(), base);
}

static void dup_family_shares_ofd(void **state)
{
	uint32_t base = count_in_use();
	int fd = open(path_a, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	struct chell_file *f = fdt_peek(fd);
	assert_non_null(f);

	int d1 = dup(fd);
	assert_true(d1 >= 0);
	assert_ptr_equal(fdt_peek(d1), f);
	assert_int_equal(ofd_refs(fd), 2);
	assert_int_equal(nib_file(f)->refs, 2);

	int d2 = fcntl(fd, F_DUPFD_CLOEXEC, 200);
	assert_true(d2 >= 200);
	assert_ptr_equal(fdt_peek(d2), f);
	assert_int_equal(fcntl(d2, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

	int p[2];
	assert_int_equal(pipe(p), 0);
	/* dup2 onto an unclaimed descriptor */
	assert_int_equal(dup2(fd, p[0]), p[0]);
	assert_ptr_equal(fdt_peek(p[0]), f);
	assert_int_equal(dup3(fd, p[1], O_CLOEXEC), p[1]);
	assert_ptr_equal(fdt_peek(p[1]), f);
	assert_int_equal(ofd_refs(fd), 5);
	assert_int_equal(nib_file(f)->refs, 5);
	assert_int_equal(count_in_use(), base + 1);

	/* dup2 of a descriptor onto itself changes nothing */
	assert_int_equal(dup2(fd, fd), fd);
	assert_int_equal(ofd_refs(fd), 5);

	/* dup2 onto a claimed descriptor of another OFD: that OFD loses it,
	 * and being its last descriptor, is released */
	int other = open(path_b, O_RDWR | O_CREAT, 0600);
	assert_true(other >= 0);
	struct chell_file *g = fdt_peek(other);
	assert_non_null(g);
	uint32_t gslot = g->slot;
	assert_int_equal(count_in_use(), base + 2);
	assert_int_equal(dup2(fd, other), other);
	assert_ptr_equal(fdt_peek(other), f);
	assert_int_equal(ofd_table_slot(gslot)->in_use, 0);
	assert_int_equal(ofd_refs(fd), 6);
	assert_int_equal(count_in_use(), base + 1);

	/* closing descriptors one by one counts down; the OFD lives until the last */
	int all[] = {d1, d2, p[0], p[1], other};
	uint32_t slot = f->slot;
	for (int i = 0; i < 5; i++) {
		assert_int_equal(close(all[i]), 0);
		assert_null(fdt_peek(all[i]));
		assert_int_equal(ofd_refs(fd), 5 - (uint32_t)i);
		assert_int_equal(ofd_table_slot(slot)->in_use, 1);
	}
	/* a second close of a closed descriptor is EBADF, and changes nothing */
	assert_int_equal(close(d1), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(ofd_refs(fd), 1);
	assert_int_equal(close(fd), 0);
	assert_int_equal(ofd_table_slot(slot)->in_use, 0);
	assert_int_equal(count_in_use(), base);
}

/* Two open() calls of one file make two OFDs (as in the kernel). */
static void separate_opens_separate_ofds(void **state)
{
	int a = open(path_a, O_RDWR | O_CREAT, 0600);
	int b = open(path_a, O_RDWR);
	assert_true(a >= 0 && b >= 0);
	assert_ptr_not_equal(fdt_peek(a), fdt_peek(b));
	assert_int_not_equal(fdt_peek(a)->slot, fdt_peek(b)->slot);
	assert_int_equal(ofd_refs(a), 1);
	assert_int_equal(ofd_refs(b), 1);
	close(a);
	close(b);
}

static void fork_counts_the_child(void **state)
{
	uint32_t base = count_in_use();
	int fd = open(path_a, O_RDWR | O_CREAT, 0600);
	int fd2 = dup(fd);
	assert_true(fd >= 0 && fd2 >= 0);
	int go[2], done[2];
	assert_int_equal(pipe(go), 0);
	assert_int_equal(pipe(done), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		/* the child inherits the same OFD: same slot, both descriptors claimed */
		int ok = fdt_peek(fd) && fdt_peek(fd2) == fdt_peek(fd) && ofd_refs(fd) == 4;
		close(fd2);
		ok = ok && ofd_refs(fd) == 3;
		if (write(done[1], &ok, sizeof(ok)) != sizeof(ok))
			_exit(3);
		if (read(go[0], &c, 1) != 1)
			_exit(4);
		_exit(ok ? 0 : 1); /* exit still holding fd: the exit path drops it */
	}
	int ok = 0;
	assert_int_equal(read(done[0], &ok, sizeof(ok)), sizeof(ok));
	assert_int_equal(ok, 1);
	assert_int_equal(ofd_refs(fd), 3);
	assert_int_equal(write(go[1], "g", 1), 1);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(ofd_refs(fd), 2);
	uint32_t slot = fdt_peek(fd)->slot;
	close(fd);
	close(fd2);
	assert_int_equal(ofd_table_slot(slot)->in_use, 0);
	assert_int_equal(count_in_use(), base);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
}

/* The last holder may be the child: the OFD is released there. */
static void child_closes_last_descriptor(void **state)
{
	int fd = open(path_a, O_RDWR | O_CREAT, 0600);
	assert_true(fd >= 0);
	uint32_t slot = fdt_peek(fd)->slot;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		usleep(100 * 1000); /* the parent closes first */
		_exit(close(fd) == 0 ? 0 : 1);
	}
	assert_int_equal(close(fd), 0);
	assert_int_equal(ofd_table_slot(slot)->in_use, 1); /* the child still has it */
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(ofd_table_slot(slot)->in_use, 0);
}

static void close_range_drops_entries(void **state)
{
	uint32_t base = count_in_use();
	int fds[4];
	for (int i = 0; i < 4; i++) {
		fds[i] = fcntl(open(path_a, O_RDWR | O_CREAT, 0600), F_DUPFD, 300 + 2 * i);
		assert_int_equal(fds[i], 300 + 2 * i);
		assert_non_null(fdt_peek(fds[i]));
	}
	/* the open()ed low numbers are still open too: 8 descriptors, 4 OFDs */
	assert_int_equal(count_in_use(), base + 4);
	assert_int_equal(close_range(300, 305, 0), 0);
	for (int i = 0; i < 3; i++) {
		assert_null(fdt_peek(fds[i]));
		assert_int_equal(fcntl(fds[i], F_GETFD), -1);
	}
	assert_non_null(fdt_peek(fds[3]));
	/* CLOEXEC only marks them: they stay claimed */
	assert_int_equal(close_range(306, 306, CLOSE_RANGE_CLOEXEC), 0);
	assert_non_null(fdt_peek(306));
	assert_int_equal(fcntl(306, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	for (int i = 0; i <= fdt_max(); i++)
		if (fdt_peek(i))
			close(i);
	assert_int_equal(count_in_use(), base);
}

/* ------------------------------------------------------- internal fds */

static void internal_fd_invisible(void **state)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	int low = p[0];
	int fd = chell_internal_fd(p[0], 1);
	assert_true(fd > low);
	assert_true(fd >= 10);
	assert_true(chell_is_internal_fd(fd));
	assert_false(chell_is_internal_fd(p[1]));
	/* moved: the original number is free again, the new one close-on-exec */
	assert_int_equal(fcntl(low, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
	assert_int_equal(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

	/* the application cannot close it ... */
	assert_int_equal(close(fd), -1);
	assert_int_equal(errno, EBADF);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	/* ... nor replace it with dup2 ... */
	assert_int_equal(dup2(p[1], fd), -1);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	/* ... nor sweep it away with close_range/closefrom around it */
	int before = fcntl(p[1], F_DUPFD, p[1] + 1);
	assert_true(before > p[1] && before < fd);
	assert_int_equal(dup2(p[1], fd + 1), fd + 1);
	/* the range also covers the region memfd, the internal fd below ours */
	assert_int_equal(close_range((unsigned)before, (unsigned)fd + 1, 0), 0);
	assert_int_equal(fcntl(before, F_GETFD), -1);
	assert_int_equal(fcntl(fd + 1, F_GETFD), -1);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	assert_true(fcntl(ofd_table_fd(), F_GETFD) >= 0);
	assert_int_equal(write(p[1], "k", 1), 1); /* and it still works */
	char c = 0;
	assert_int_equal(sys_read(fd, &c, 1), 1);
	assert_int_equal(c, 'k');

	/* closefrom in a child keeps it too (and the region memfd) */
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		closefrom(3);
		int ok = sys_fcntl(fd, F_GETFD, 0) >= 0 &&
			 (ofd_table_fd() < 0 || sys_fcntl(ofd_table_fd(), F_GETFD, 0) >= 0) &&
			 sys_fcntl(p[1], F_GETFD, 0) < 0;
		_exit(ok ? 0 : 1);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(WEXITSTATUS(st), 0);

	/* released by Chell, the number is an ordinary one again */
	chell_internal_close(fd);
	assert_false(chell_is_internal_fd(fd));
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	int list[256];
	int n = chell_internal_list(list, 256);
	for (int i = 0; i < n; i++) {
		assert_int_not_equal(list[i], fd);
		if (i)
			assert_true(list[i - 1] < list[i]);
	}
	close(p[1]);
}

/* A thread that leaves the shared table holds its own reference on every
 * OFD; its closes only drop those, and its exit drops the rest. */
static int unshare_fd;
static void *unshare_thread(void *p)
{
	int *res = p;
	res[0] = close_range((unsigned)unshare_fd + 1, ~0u, CLOSE_RANGE_UNSHARE);
	res[1] = fdt_cur() != &chell_fdt_proc;
	res[2] = (int)ofd_refs(unshare_fd); /* ours and the main thread's table's */
	res[3] = close(unshare_fd);
	res[4] = fdt_peek(unshare_fd) == NULL;
	res[5] = open(path_b, O_RDWR | O_CREAT, 0600); /* only in this table */
	res[6] = fdt_peek(res[5]) != NULL;
	res[7] = dup(res[5]);
	return NULL;
}

static void unshare_takes_and_drops_references(void **state)
{
	uint32_t base = count_in_use();
	unshare_fd = open(path_a, O_RDWR | O_CREAT, 0600);
	int extra = open(path_a, O_RDONLY); /* above the range: closed in the thread only */
	assert_true(unshare_fd >= 0 && extra > unshare_fd);
	assert_int_equal(ofd_refs(unshare_fd), 1);
	int res[8];
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, unshare_thread, res), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], 1);
	assert_int_equal(res[2], 2);
	assert_int_equal(res[3], 0);
	assert_int_equal(res[4], 1);
	assert_true(res[5] >= 0);
	assert_int_equal(res[6], 1);
	assert_true(res[7] >= 0);
	/* the main thread's table is untouched; the thread's exit dropped its
	 * references: the file it opened is released, ours count one again */
	assert_ptr_equal(fdt_cur(), &chell_fdt_proc);
	assert_non_null(fdt_peek(extra));
	assert_int_equal(ofd_refs(unshare_fd), 1);
	assert_int_equal(ofd_refs(extra), 1);
	if (res[5] != unshare_fd && res[5] != extra)
		assert_null(fdt_peek(res[5]));
	assert_int_equal(count_in_use(), base + 2);
	close(unshare_fd);
	close(extra);
	assert_int_equal(count_in_use(), base);
}

int main(void)
{
	if (!chell_active) {
		fprintf(stderr, "chell is not active: run under ctest (it sets CHELL_MODE)\n");
		return 1;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unclaimed_lookups),
		cmocka_unit_test(open_claims_routed_file),
		cmocka_unit_test(open_relative_and_dirfd),
		cmocka_unit_test(non_regular_and_failed_opens_leak_nothing),
		cmocka_unit_test(dup_family_shares_ofd),
		cmocka_unit_test(separate_opens_separate_ofds),
		cmocka_unit_test(fork_counts_the_child),
		cmocka_unit_test(child_closes_last_descriptor),
		cmocka_unit_test(close_range_drops_entries),
		cmocka_unit_test(internal_fd_invisible),
		cmocka_unit_test(unshare_takes_and_drops_references),
	};
	return cmocka_run_group_tests_name("fdtable", tests, setup_dirs, teardown_dirs);
}
