/* SPDX-License-Identifier: MIT */
/*
 * nochell_reader FD N SKIP - a statically linked program, so Chell never
 * loads into it (LD_PRELOAD does not apply): it uses an inherited
 * descriptor exactly as the kernel has it. Reads N bytes at the
 * descriptor's offset, prints them and the offset, then moves the offset
 * SKIP bytes further (sem_locks: a descriptor handed out of Chell).
 */
#include "sem_common.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: nochell_reader FD N SKIP - a statically linked program, so Chell never\n"
	"loads into it (LD_PRELOAD does not apply): it uses an inherited\n"
	"descriptor exactly as the kernel has it. Reads N bytes at the\n"
	"descriptor's offset, prints them and the offset, then moves the offset\n"
	"SKIP bytes further (sem_locks: a descriptor handed out of Chell).\n"
	"(a test program of Chell's suite; details: tests/progs/nochell_reader.c)\n";

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 4)
		return 2;
	int fd = atoi(argv[1]);
	char buf[256];
	size_t n = (size_t)atoi(argv[2]);
	if (n > sizeof buf)
		n = sizeof buf;
	say("  [static] off = %lld\n", (long long)lseek(fd, 0, SEEK_CUR));
	long r = T(read(fd, buf, n));
	sem_data("[static] read", buf, r);
	T(lseek(fd, atoi(argv[3]), SEEK_CUR));
	return 0;
}
