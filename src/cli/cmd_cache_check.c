/* SPDX-License-Identifier: MIT */
/*
 * `chell cache check [--pool DIR] [--json]`: verify a cache pool.
 *
 * While chelld serves the pool (it holds the pool's lock), the daemon checks
 * it (CHECK): the files change under it, so only it can see them whole.
 * Otherwise the files are checked here (cmd_cache_check_files.c), with the
 * lock held so a daemon cannot start meanwhile, and without changing any
 * of them. Exit: 0 clean, 1 problems found, 2 usage error or unreadable
 * pool.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"
#include "cmd_cache_check.h"

enum { OPT_C_POOL = 700, OPT_C_JSON };

void cache_check_usage(FILE *f)
{
	fputs("Usage: chell cache check [--pool DIR] [--json]\n"
	      "\n"
	      "Verify a cache pool. If chelld serves it, the daemon checks its metadata\n"
	      "and chunks while serving; otherwise the files are checked directly,\n"
	      "without changing them: meta.pool (the region, then every invariant of\n"
	      "the cache metadata) and each chunk file's control page (magic, version,\n"
	      "slot, owner and backing-file identity against the metadata, state, dirty\n"
	      "blocks). Each problem is reported with its file and field. Notes are\n"
	      "leftovers of a fill or an eviction that a crash interrupted, which chelld\n"
	      "cleans up when it starts; they do not fail the check.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR   the pool directory (default: the cache.pool setting)\n"
	      "      --json       print one JSON object: {\"pool\", \"mode\" (online or\n"
	      "                   offline), \"ok\", \"problems\": [{\"file\", \"field\",\n"
	      "                   \"text\"}], \"notes\": [...], counts}\n"
	      "  -h, --help       show this help\n"
	      "\n"
	      "Exit status: 0 clean, 1 problems found, 2 usage error or the pool cannot\n"
	      "be read (not a directory, no meta.pool, served but not answering).\n",
	      f);
}

void cc_add(struct cc_result *res, bool problem, const char *file, const char *field,
	    const char *text)
{
	if (!res->json) {
		/* Text: each finding as it is found. */
		printf("%s: %s%s%s: %s\n", problem ? "problem" : "note", file ? file : "",
		       field ? ": " : "", field ? field : "", text);
		return;
	}
	if (res->n == res->cap) {
		size_t cap = res->cap ? res->cap * 2 : 16;
		struct cc_item *it = realloc(res->items, cap * sizeof *it);
		if (!it)
			return; /* counted, not listed */
		res->items = it;
		res->cap = cap;
	}
	struct cc_item *it = &res->items[res->n++];
	it->problem = problem;
	snprintf(it->file, sizeof it->file, "%s", file ? file : "");
	snprintf(it->field, sizeof it->field, "%s", field ? field : "");
	snprintf(it->text, sizeof it->text, "%s", text);
}

static void json_items(const struct cc_result *res, bool problems)
{
	bool first = true;
	printf("[");
	for (size_t i = 0; i < res->n; i++) {
		const struct cc_item *it = &res->items[i];
		if (it->problem != problems)
			continue;
		printf("%s{\"file\": ", first ? "" : ", ");
		first = false;
		if (it->file[0])
			cli_json_str(stdout, it->file);
		else
			printf("null");
		printf(", \"field\": ");
		if (it->field[0])
			cli_json_str(stdout, it->field);
		else
			printf("null");
		printf(", \"text\": ");
		cli_json_str(stdout, it->text);
		printf("}");
	}
	printf("]");
}

static void print_result(const struct cc_result *res)
{
	if (res->json) {
		printf("{\"pool\": ");
		cli_json_str(stdout, res->pool);
		printf(", \"mode\": \"%s\", \"ok\": %s, \"problems\": ", res->online ? "online" : "offline",
		       res->problems ? "false" : "true");
		json_items(res, true);
		printf(", \"notes\": ");
		json_items(res, false);
		printf(", \"problem_count\": %u, \"note_count\": %u, \"cnodes\": %" PRIu64
		       ", \"chunks\": %" PRIu64 ", \"chunks_used\": %" PRIu64
		       ", \"chunk_files\": %" PRIu64 ", \"unfinished_transactions\": %d",
		       res->problems, res->notes, res->cnodes, res->chunks, res->chunks_used,
		       res->chunk_files, res->unfinished_tx);
		if (res->online)
			printf(", \"pid\": %ld", res->pid);
		printf("}\n");
		return;
	}
	if (res->online)
		printf("pool %s (checked by chelld, pid %ld): %" PRIu64 " Cnodes, %" PRIu64
		       " chunks checked: %s\n",
		       res->pool, res->pid, res->cnodes, res->chunks_used,
		       res->problems ? "PROBLEMS FOUND" : "clean");
	else
		printf("pool %s: %" PRIu64 " Cnodes, %" PRIu64 " of %" PRIu64
		       " chunks in use, %" PRIu64 " chunk files: %u problem%s, %u note%s: %s\n",
		       res->pool, res->cnodes, res->chunks_used, res->chunks, res->chunk_files,
		       res->problems, res->problems == 1 ? "" : "s", res->notes,
		       res->notes == 1 ? "" : "s", res->problems ? "PROBLEMS FOUND" : "clean");
}

/* CHECK on the running daemon: 0/1 as the result, 2 if it cannot answer. */
static int check_online(struct cc_result *res)
{
	char sock[PATH_MAX];
	mgr_sock_path(res->pool, NULL, sock, sizeof sock);
	struct mgr_conn cn;
	res->online = true;
	res->pid = mgr_read_pid_file(res->pool, NULL, 0);
	if (mgr_connect(&cn, sock) < 0) {
		cli_err("cache check: chelld serves %s but does not answer at %s: %s", res->pool, sock,
			strerror(errno));
		return CLI_EXIT_USAGE;
	}
	struct chelld_check q;
	static struct chelld_check_reply r;
	bool answered;
	int rc = mgr_call(&cn, &q, sizeof q, CHELLD_MSG_CHECK, &r, sizeof r, -1, &answered);
	int e = errno;
	mgr_disconnect(&cn);
	if (rc < 0 && (!answered || e != EUCLEAN)) {
		cli_err("cache check: chelld (pid %ld) cannot check %s: %s%s", res->pid, res->pool,
			answered ? chelld_errname(e) : strerror(e),
			e == ENOSYS ? " (stop it to check the files offline)" : "");
		return CLI_EXIT_USAGE;
	}
	res->cnodes = r.cnodes_checked;
	res->chunks_used = r.chunks_checked;
	if (rc < 0) {
		res->problems++;
		r.detail[sizeof r.detail - 1] = '\0';
		cc_add(res, true, NULL, NULL, r.detail[0] ? r.detail : "chelld found a problem");
	}
	return res->problems ? 1 : 0;
}

int cache_check(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"json", no_argument, NULL, OPT_C_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *pool = NULL;
	bool json = false;
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_C_POOL: pool = optarg; break;
		case OPT_C_JSON: json = true; break;
		case 'h': cache_check_usage(stdout); return 0;
		default: return cli_bad_option("cache check", c, argv, opts);
		}
	}
	if (optind < argc) {
		cli_err("cache check: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("cache check");
		return CLI_EXIT_USAGE;
	}
	if (!(pool = pool_dir_default(pool)))
		return CLI_EXIT_USAGE;
	struct stat sb;
	if (stat(pool, &sb) < 0) {
		cli_err("cache check: pool %s: %s", pool, strerror(errno));
		return CLI_EXIT_USAGE;
	}
	if (!S_ISDIR(sb.st_mode)) {
		cli_err("cache check: pool %s: not a directory", pool);
		return CLI_EXIT_USAGE;
	}
	struct cc_result res = {.pool = pool, .json = json};
	int rc;
	if (mgr_serves_pool(pool))
		rc = check_online(&res);
	else
		rc = cc_check_files(&res);
	if (rc != CLI_EXIT_USAGE) {
		print_result(&res);
		rc = res.problems ? 1 : 0;
	}
	free(res.items);
	return rc;
}
