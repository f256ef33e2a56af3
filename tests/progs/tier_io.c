/* SPDX-License-Identifier: MIT */
/*
 * tier_io DIR: a fixed mix of reads and writes on DIR/f, every kind the
 * tier model charges (write past the end, write, pwrite, writev, pwritev,
 * read, pread, readv, preadv, a read at the end), then one line:
 *   reads R read_bytes RB writes W write_bytes WB
 * the calls that moved bytes and the bytes they moved, which the tier
 * model's counters must match exactly (tests/system/test_tier.py).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: tier_io DIR: a fixed mix of reads and writes on DIR/f, every kind the\n"
	"tier model charges (write past the end, write, pwrite, writev, pwritev,\n"
	"read, pread, readv, preadv, a read at the end), then one line:\n"
	"  reads R read_bytes RB writes W write_bytes WB\n"
	"the calls that moved bytes and the bytes they moved, which the tier\n"
	"model's counters must match exactly (tests/system/test_tier.py).\n"
	"(a test program of Chell's suite; details: tests/progs/tier_io.c)\n";

static unsigned long long ops[2], bytes[2]; /* [0] reads, [1] writes */

static void count(int write, ssize_t n)
{
	if (n < 0) {
		perror(write ? "write" : "read");
		exit(1);
	}
	if (n > 0)
		ops[write]++, bytes[write] += (unsigned long long)n;
}
#define rd(n) count(0, (n))
#define wr(n) count(1, (n))

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 2) {
		fprintf(stderr, "usage: tier_io DIR\n");
		return 2;
	}
	char path[4096], buf[1 << 16], a[512], b[1536];
	snprintf(path, sizeof path, "%s/f", argv[1]);
	memset(buf, 'x', sizeof buf);
	memset(a, 'a', sizeof a);
	memset(b, 'b', sizeof b);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror("open");
		return 1;
	}
	for (int i = 0; i < 10; i++) /* growing the file */
		wr(write(fd, buf, 4096));
	wr(write(fd, buf, 65536));
	for (int i = 0; i < 3; i++) /* inside it */
		wr(pwrite(fd, buf, 1000, 100 + 2000 * i));
	struct iovec v[2] = {{a, sizeof a}, {b, sizeof b}};
	wr(writev(fd, v, 2));
	wr(pwritev(fd, v, 2, 7));
	lseek(fd, 0, SEEK_SET);
	for (int i = 0; i < 4; i++)
		rd(read(fd, buf, 4096));
	rd(pread(fd, buf, 777, 5000));
	rd(pread(fd, buf, 777, 90000));
	rd(readv(fd, v, 2));
	rd(preadv(fd, v, 2, 12345));
	lseek(fd, 0, SEEK_END);
	rd(read(fd, buf, 100)); /* at the end: 0, nothing moved */
	lseek(fd, -300, SEEK_END);
	rd(read(fd, buf, 4096)); /* 300 */
	close(fd);
	printf("reads %llu read_bytes %llu writes %llu write_bytes %llu\n", ops[0], bytes[0], ops[1],
	       bytes[1]);
	return 0;
}
