/* SPDX-License-Identifier: MIT */
/*
 * `--help` for Chell's small tools (benchmarks, seed makers, test
 * programs): every command answers -h/--help with its usage on stdout and
 * exit status 0, before it looks at any other argument. Without this, a
 * tool that takes a directory as its first argument would create one named
 * "--help" and run. tests/system/test_help.py runs every built tool with it.
 *
 * Header-only: the tools link no common library.
 */
#ifndef CHELL_TOOL_HELP_H
#define CHELL_TOOL_HELP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* If any argument is -h or --help, print `usage` and exit(0). */
static inline void chell_tool_help(int argc, char **argv, const char *usage)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			return; /* what follows is someone else's arguments */
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			exit(0);
		}
	}
}

#endif
