/* SPDX-License-Identifier: MIT */
/*
 * The SCM_RIGHTS helper shared by libchell, the CLI and chelld
 * (src/common/fdpass.h): a descriptor goes with a message and arrives as a
 * working, close-on-exec descriptor of the same file; oversized messages
 * and end of stream are reported; a message without a descriptor carries
 * none.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "fdpass.h"

static void same_file(int a, int b)
{
	struct stat sa, sb;
	assert_int_equal(fstat(a, &sa), 0);
	assert_int_equal(fstat(b, &sb), 0);
	assert_true(sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino);
}

static void passes_descriptors(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	int fd = open("/dev/null", O_RDONLY);
	assert_true(fd >= 0);

	assert_int_equal(fdpass_send(sv[0], "hello", 5, fd, 0), 0);
	char buf[16];
	struct fdpass_in in;
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), 0, &in), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(in.nfds, 1);
	assert_int_equal(in.trunc, 0);
	assert_true(in.fds[0] != fd);
	same_file(fd, in.fds[0]);
	assert_int_equal(fcntl(in.fds[0], F_GETFD), FD_CLOEXEC);
	fdpass_close(in.fds, 0, in.nfds);
	assert_int_equal(fcntl(in.fds[0], F_GETFD), -1);

	/* no descriptor */
	assert_int_equal(fdpass_send(sv[0], "x", 1, -1, 0), 0);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), 0, &in), 1);
	assert_int_equal(in.nfds, 0);

	/* longer than the buffer: MSG_TRUNC, the descriptor still handed over */
	assert_int_equal(fdpass_send(sv[0], "0123456789", 10, fd, 0), 0);
	assert_true(fdpass_recv(sv[1], buf, 4, 0, &in) >= 0);
	assert_true(in.trunc & MSG_TRUNC);
	assert_int_equal(in.nfds, 1);
	fdpass_close(in.fds, 0, in.nfds);

	/* nothing queued, non-blocking */
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT, &in), -EAGAIN);

	/* end of stream; a send to a closed peer is an error, not SIGPIPE */
	close(sv[0]);
	assert_int_equal(fdpass_recv(sv[1], buf, sizeof(buf), 0, &in), 0);
	assert_int_equal(fdpass_send(sv[1], "x", 1, fd, 0), -EPIPE);
	close(sv[1]);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(passes_descriptors),
	};
	return cmocka_run_group_tests_name("fdpass", tests, NULL, NULL);
}
