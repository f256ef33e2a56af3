/* SPDX-License-Identifier: MIT */
/* `chell version [--json]`: the version, and which libchell.so `run` would use. */
#include <limits.h>
#include <string.h>

#include "cli.h"

#ifndef CHELL_VERSION
#error "CHELL_VERSION must be defined by the build"
#endif

void cmd_version_usage(FILE *f)
{
	fputs("Usage: chell version [--json]\n"
	      "\n"
	      "Print the version of chell and the libchell.so that 'chell run' would preload.\n"
	      "\n"
	      "Options:\n"
	      "      --json    machine-readable output\n"
	      "  -h, --help    show this help\n",
	      f);
}

int cmd_version(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: json = 1; break;
		case 'h': cmd_version_usage(stdout); return 0;
		default: return cli_bad_option("version", c, argv, longopts);
		}
	}
	if (optind < argc) {
		cli_err("version: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("version");
		return CLI_EXIT_USAGE;
	}
	char lib[PATH_MAX], err[PATH_MAX * 2 + 128];
	int found = cli_find_lib(lib, sizeof lib, err, sizeof err) == 0;
	if (json) {
		fputs("{\"version\": ", stdout);
		cli_json_str(stdout, CHELL_VERSION);
		fputs(", \"library\": ", stdout);
		if (found)
			cli_json_str(stdout, lib);
		else
			fputs("null", stdout);
		fputs("}\n", stdout);
	} else {
		printf("chell %s\n", CHELL_VERSION);
		printf("library: %s\n", found ? lib : err);
	}
	return 0;
}
