/* SPDX-License-Identifier: MIT */
/* `chell`: top-level options and dispatch to the subcommands. */
#include <string.h>

#include "cli.h"

static int cmd_help(int argc, char **argv);
static void cmd_help_usage(FILE *f);

static const struct cli_command commands[] = {
	{"run", "run a command with libchell.so preloaded", cmd_run, cmd_run_usage},
	{"config", "show the effective configuration, or all settings (--keys)", cmd_config,
	 cmd_config_usage},
	{"stat", "print the operation counters processes wrote (stats.file)", cmd_stat,
	 cmd_stat_usage},
	{"pool", "create, check and describe persistent regions", cmd_pool, cmd_pool_usage},
	{"cache", "start, stop and query the cache manager daemon (chelld)", cmd_cache,
	 cmd_cache_usage},
	{"warp", "show what WARP remembers of a file (its patterns file)", cmd_warp, cmd_warp_usage},
	{"pvm", "the pVM object store: stat, ls, cat, put, rm, import, export", cmd_pvm, cmd_pvm_usage},
	{"tier", "run a program on the tiered heap (DRAM + slow tier); its usage", cmd_tier,
	 cmd_tier_usage},
	{"version", "print the version and the library in use", cmd_version, cmd_version_usage},
	{"help", "show help for a command", cmd_help, cmd_help_usage},
	{NULL, NULL, NULL, NULL},
};

static const struct cli_command *find_command(const char *name)
{
	for (const struct cli_command *c = commands; c->name; c++)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

static void usage(FILE *f)
{
	fputs("Usage: chell [-h|--help] [-V|--version] COMMAND [ARGS...]\n"
	      "\n"
	      "Chell runs unmodified programs on a user-space storage stack: libchell.so is\n"
	      "preloaded and routes each file to handlers chosen by configuration.\n"
	      "\n"
	      "Commands:\n",
	      f);
	for (const struct cli_command *c = commands; c->name; c++)
		fprintf(f, "  %-9s %s\n", c->name, c->summary);
	fputs("\n"
	      "Run 'chell help COMMAND' or 'chell COMMAND --help' for details.\n"
	      "Example: chell run --mode trace --path /data -- cat /data/file\n",
	      f);
}

static void cmd_help_usage(FILE *f)
{
	fputs("Usage: chell help [COMMAND]\n"
	      "\n"
	      "Show the help of COMMAND, or the overview without one.\n",
	      f);
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		cmd_help_usage(stdout);
		return 0;
	}
	if (argc > 2) {
		cli_err("help: too many arguments");
		cli_usage_hint("help");
		return CLI_EXIT_USAGE;
	}
	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	const struct cli_command *c = find_command(argv[1]);
	if (!c) {
		cli_err("help: unknown command '%s'", argv[1]);
		cli_usage_hint(NULL);
		return CLI_EXIT_USAGE;
	}
	c->usage(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': usage(stdout); return 0;
		case 'V': {
			char *vargv[] = {"version", NULL};
			return cmd_version(1, vargv);
		}
		default: return cli_bad_option(NULL, c, argv, longopts);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return CLI_EXIT_USAGE;
	}
	const struct cli_command *cmd = find_command(argv[optind]);
	if (!cmd) {
		cli_err("unknown command '%s'", argv[optind]);
		cli_usage_hint(NULL);
		return CLI_EXIT_USAGE;
	}
	return cmd->run(argc - optind, argv + optind);
}
