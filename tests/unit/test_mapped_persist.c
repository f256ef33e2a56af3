/* SPDX-License-Identifier: MIT */
/*
 * One persistence path: a direct-mode mapping carries the persistence
 * core's operations (include/chell/pmem.h), chosen once per process and
 * honouring CHELL_PMEM_FLUSH (CTest runs this once per kind), and every
 * flush and fence direct makes goes through them. Shown with the
 * power-failure simulator (src/pmem/sim) put in the mapping's place on a
 * file that direct serves as if it were persistent memory (MAP_SYNC):
 * a write's lines are flushed and drained before write() returns, a large
 * write's non-temporal copy too, fsync is a drain, and after each the
 * simulator's media image holds the bytes.
 *
 * Runs under Chell in direct mode (ENVIRONMENT in CMakeLists.txt), linked
 * with the library's own sources to reach the mapping.
 */
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

#include "handlers/direct/direct.h"
#include "pmem/sim/sim.h"

#define DIR "/dev/shm/chell-unit-mapped_persist"
#define FILE_BYTES (1u << 20)

static char path[128];

/* The direct handler's per-process state of fd (layer 0 of the stack). */
static struct mapped_local *direct_local_of(int fd)
{
	struct chell_file *f = file_get_fd(fd);
	assert_non_null(f);
	assert_ptr_equal(f->stack->handlers[0], &chell_direct_handler);
	struct mapped_local *l = f->local[0];
	file_put(f);
	assert_non_null(l);
	return l;
}

static int open_file(void)
{
	mkdir(DIR, 0700);
	snprintf(path, sizeof(path), DIR "/f.%d", (int)getpid());
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	return fd;
}

static void close_file(int fd)
{
	assert_int_equal(close(fd), 0);
	unlink(path);
	rmdir(DIR); /* ENOTEMPTY while another run uses it */
}

static void test_kind(void **state)
{
	const char *want = getenv("CHELL_PMEM_FLUSH");
	int fd = open_file();
	assert_int_equal(write(fd, "x", 1), 1);
	struct mapped_local *l = direct_local_of(fd);
	/* the mapping flushes with the process's one choice */
	assert_ptr_equal(l->map->persist, chell_persist_default());
	if (want && *want) /* every kind exists on the CI machines (x86-64 with clwb) */
		assert_string_equal(chell_persist_kind(), want);
	close_file(fd);
}

static void test_simulator_sees_direct(void **state)
{
	int fd = open_file();
	assert_int_equal(ftruncate(fd, FILE_BYTES), 0);
	assert_int_equal(pwrite(fd, "start", 5, 0), 5); /* maps chunk 0 */
	struct mapped_local *l = direct_local_of(fd);
	unsigned char *base = direct_addr(l->map, 0);
	assert_non_null(base);

	struct chell_pmsim *sim = chell_pmsim_new(base, FILE_BYTES);
	assert_non_null(sim);
	const struct chell_persist_ops *saved = l->map->persist;
	int saved_sync = l->map->map_sync;
	l->map->persist = chell_pmsim_ops(sim);
	l->map->map_sync = 2; /* as on DAX with MAP_SYNC */
	struct chell_pmsim_stats st;

	/* a small write: copied, its lines flushed and drained */
	assert_int_equal(pwrite(fd, "hello", 5, 4096), 5);
	chell_pmsim_stats(sim, &st);
	assert_true(st.flushes >= 1);
	assert_true(st.drains >= 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.foreign_flushes, 0);
	assert_memory_equal((const char *)chell_pmsim_media(sim) + 4096, "hello", 5);

	/* fsync: the core's drain, no system call */
	uint64_t drains = st.drains;
	assert_int_equal(fsync(fd), 0);
	chell_pmsim_stats(sim, &st);
	assert_int_equal(st.drains, drains + 1);

	/* a write of direct.nt_threshold or more: the core's non-temporal copy */
	size_t big = direct_nt_threshold + 4096;
	unsigned char *buf = malloc(big);
	assert_non_null(buf);
	for (size_t i = 0; i < big; i++)
		buf[i] = (unsigned char)(i * 7 + 1);
	uint64_t flushes = st.flushes;
	assert_int_equal(pwrite(fd, buf, big, 65536), (ssize_t)big);
	chell_pmsim_stats(sim, &st);
	assert_true(st.flushes > flushes);
	assert_int_equal(st.pending, 0);
	assert_memory_equal((const char *)chell_pmsim_media(sim) + 65536, buf, big);
	free(buf);

	l->map->persist = saved;
	l->map->map_sync = saved_sync;
	chell_pmsim_free(sim);
	close_file(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kind),
		cmocka_unit_test(test_simulator_sees_direct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
