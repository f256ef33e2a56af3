/* SPDX-License-Identifier: MIT */
/* `chell cache check`: the result shared by the online and offline checks. */
#ifndef CHELL_CLI_CMD_CACHE_CHECK_H
#define CHELL_CLI_CMD_CACHE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cc_item {
	bool problem;
	char file[64], field[32], text[512];
};

struct cc_result {
	const char *pool;
	bool json, online;
	long pid;                 /* online: the daemon */
	unsigned problems, notes;
	uint64_t cnodes, chunks, chunks_used, chunk_files;
	int unfinished_tx;        /* offline: transactions the next open rolls back */
	struct cc_item *items;    /* --json: every finding, printed at the end */
	size_t n, cap;
};

/* Record one finding (text mode: print it now). Does not count it. */
void cc_add(struct cc_result *res, bool problem, const char *file, const char *field,
	    const char *text);

/* The offline check of res->pool's files (cmd_cache_check_files.c): 0 with
 * the findings in res, or 2 (reported) if the pool cannot be read. */
int cc_check_files(struct cc_result *res);

#endif
