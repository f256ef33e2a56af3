/* SPDX-License-Identifier: MIT */
/* `chell tier`: the tiered heap's commands (run, stat); docs/TIERHEAP.md. */
#include <string.h>

#include "cli.h"
#include "cmd_tier.h"

void cmd_tier_usage(FILE *f)
{
	fputs("Usage: chell tier run [OPTIONS] -- COMMAND [ARGS...]\n"
	      "       chell tier stat [--json] PID\n"
	      "\n"
	      "The tiered heap (libchell-tier.so): the program's malloc is jemalloc whose\n"
	      "memory comes from DRAM or from a slower tier (a CPU-less NUMA node, or a\n"
	      "file on tmpfs/DAX allocated outside the program's memory cgroup), placed by\n"
	      "a policy.\n"
	      "\n"
	      "Commands:\n"
	      "  run    run COMMAND on the tiered heap ('chell tier run --help')\n"
	      "  stat   DRAM and slow-tier bytes of a running program ('chell tier stat --help')\n",
	      f);
}

int cmd_tier(int argc, char **argv)
{
	if (argc < 2) {
		cmd_tier_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cmd_tier_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "run") == 0)
		return cmd_tier_run(argc - 1, argv + 1);
	if (strcmp(argv[1], "stat") == 0)
		return cmd_tier_stat(argc - 1, argv + 1);
	cli_err("tier: unknown command '%s'", argv[1]);
	cli_usage_hint("tier");
	return CLI_EXIT_USAGE;
}
