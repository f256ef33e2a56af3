/* SPDX-License-Identifier: MIT */
/*
 * `chell warp show FILE [--json] [--patterns PATH]`: what WARP remembers of
 * a file in its patterns file (warp.patterns; src/handlers/warp/patterns.c):
 * each stored node's state and successor, and the file's cross-file tuples.
 *
 * The patterns file is only read (a private copy, recovered in memory:
 * warp_patterns_open_ro), so this is safe while programs under WARP run.
 * Exit: 0 ok (also when nothing is stored for FILE), 1 the patterns file is
 * damaged or not a patterns file, 2 usage error or an unreadable file.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common/config.h"
#include "patterns_internal.h"

enum { OPT_PATTERNS = 600 };

void cmd_warp_usage(FILE *f)
{
	fputs("Usage: chell warp show [--json] [--patterns PATH] FILE\n"
	      "\n"
	      "WARP (mode warp) keeps, per file, the state it settled on for each node\n"
	      "(normal, mapped or buffered), the node accessed after it, and a few\n"
	      "cross-file tuples {context, next file, its first node}, in its patterns\n"
	      "file, so a restarted program is accelerated from its first access.\n"
	      "\n"
	      "  show     print what is stored for FILE\n"
	      "\n"
	      "Run 'chell warp show --help' for its options.\n"
	      "\n"
	      "Exit status: 0 ok, 1 the patterns file is damaged or foreign, 2 usage\n"
	      "error or unreadable file.\n",
	      f);
}

static void show_usage(FILE *f)
{
	fputs("Usage: chell warp show [--json] [--patterns PATH] FILE\n"
	      "\n"
	      "Print each stored node of FILE with its state and successor, and the\n"
	      "file's cross-file tuples (context hash, next file as device:inode, hint\n"
	      "node, age). The patterns file is only read.\n"
	      "\n"
	      "Options:\n"
	      "      --patterns PATH   the patterns file (default: the warp.patterns setting\n"
	      "                        of the configuration: CHELL_CONFIG and the\n"
	      "                        environment)\n"
	      "      --json            machine-readable output: {\"file\", \"dev\", \"ino\",\n"
	      "                        \"patterns\", \"stored\", \"stamp\", \"nodes\": [{\"node\",\n"
	      "                        \"state\", \"successor\"}], \"tuples\": [{\"context\",\n"
	      "                        \"dev\", \"ino\", \"hint_node\", \"age\"}]}\n"
	      "  -h, --help            show this help\n"
	      "\n"
	      "Exit status: 0 ok (also when nothing is stored for FILE), 1 the patterns\n"
	      "file is damaged or not a patterns file, 2 usage error or unreadable file.\n",
	      f);
}

/* warp.patterns from the configuration, "" if unset or unknown to this
 * build. malloc'd, or NULL with a message printed. */
static char *patterns_setting(void)
{
	if (chell_setting_index("warp.patterns") < 0)
		return strdup("");
	struct chell_config cfg = {0};
	char err[1024];
	if (chell_config_load(&cfg, NULL, err, sizeof err)) {
		cli_err("%s", err);
		chell_config_free(&cfg);
		return NULL;
	}
	char *v = strdup(chell_config_str(&cfg, "warp.patterns"));
	chell_config_free(&cfg);
	return v;
}

struct found {
	struct warp_file_id id;
	const struct pat_entry *e;
};

static void find_cb(void *arg, const struct pat_entry *e)
{
	struct found *f = arg;
	if (e->dev == f->id.dev && e->ino == f->id.ino)
		f->e = e;
}

static void print_text(const char *file, const char *pat, struct warp_file_id id, const struct pat_entry *e)
{
	printf("file %s (device %" PRIu64 ", inode %" PRIu64 ") in %s\n", file, id.dev, id.ino, pat);
	if (!e) {
		printf("no patterns stored\n");
		return;
	}
	printf("%u nodes stored (store %" PRIu64 ")\n\n", e->n, e->stamp);
	printf("%-8s %-9s %s\n", "node", "state", "successor");
	for (uint32_t j = 0; j < e->n; j++) {
		uint32_t s = pat_succ(e)[j];
		char succ[16];
		if (s == WARP_NODE_NONE)
			snprintf(succ, sizeof succ, "-");
		else
			snprintf(succ, sizeof succ, "%u", s);
		printf("%-8u %-9s %s\n", j, warp_state_name((enum warp_state)pat_states(e)[j]), succ);
	}
	int any = 0;
	for (unsigned k = 0; k < WARP_XFILE_SLOTS; k++) {
		const struct pat_xf *x = &e->xf[k];
		if (!x->ctx)
			continue;
		if (!any++)
			printf("\ncross-file tuples:\n%-18s  %-24s %-9s %s\n", "context", "next file (dev:ino)", "hint node",
			       "age");
		char next[48];
		snprintf(next, sizeof next, "%" PRIu64 ":%" PRIu64, x->dev, x->ino);
		printf("0x%016" PRIx64 "  %-24s %-9u %u\n", x->ctx, next, x->hint, x->age);
	}
	if (!any)
		printf("\nno cross-file tuples\n");
}

static void print_json(const char *file, const char *pat, struct warp_file_id id, const struct pat_entry *e)
{
	fputs("{\"file\": ", stdout);
	cli_json_str(stdout, file);
	printf(", \"dev\": %" PRIu64 ", \"ino\": %" PRIu64 ", \"patterns\": ", id.dev, id.ino);
	cli_json_str(stdout, pat);
	printf(", \"stored\": %s", e ? "true" : "false");
	if (e) {
		printf(", \"stamp\": %" PRIu64 ", \"nodes\": [", e->stamp);
		for (uint32_t j = 0; j < e->n; j++) {
			uint32_t s = pat_succ(e)[j];
			printf("%s{\"node\": %u, \"state\": \"%s\", \"successor\": ", j ? ", " : "", j,
			       warp_state_name((enum warp_state)pat_states(e)[j]));
			if (s == WARP_NODE_NONE)
				fputs("null}", stdout);
			else
				printf("%u}", s);
		}
		fputs("], \"tuples\": [", stdout);
		int any = 0;
		for (unsigned k = 0; k < WARP_XFILE_SLOTS; k++) {
			const struct pat_xf *x = &e->xf[k];
			if (!x->ctx)
				continue;
			printf("%s{\"context\": \"0x%016" PRIx64 "\", \"dev\": %" PRIu64 ", \"ino\": %" PRIu64
			       ", \"hint_node\": %u, \"age\": %u}",
			       any++ ? ", " : "", x->ctx, x->dev, x->ino, x->hint, x->age);
		}
		fputs("]", stdout);
	}
	fputs("}\n", stdout);
}

static int cmd_warp_show(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"patterns", required_argument, NULL, OPT_PATTERNS},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, c;
	const char *pat_opt = NULL;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) { /* options after FILE too */
		switch (c) {
		case OPT_JSON: json = 1; break;
		case OPT_PATTERNS: pat_opt = optarg; break;
		case 'h': show_usage(stdout); return 0;
		default: return cli_bad_option("warp show", c, argv, longopts);
		}
	}
	if (optind >= argc) {
		cli_err("warp show: no FILE given");
		cli_usage_hint("warp");
		return CLI_EXIT_USAGE;
	}
	if (optind + 1 < argc) {
		cli_err("warp show: unexpected argument '%s'", argv[optind + 1]);
		cli_usage_hint("warp");
		return CLI_EXIT_USAGE;
	}
	const char *file = argv[optind];
	char *pat = pat_opt ? strdup(pat_opt) : patterns_setting();
	if (!pat)
		return CLI_EXIT_USAGE;
	if (!*pat) {
		cli_err("warp show: no patterns file: give --patterns PATH or set warp.patterns");
		free(pat);
		return CLI_EXIT_USAGE;
	}
	struct stat st;
	if (stat(file, &st) < 0) {
		cli_err("warp show: %s: %s", file, strerror(errno));
		free(pat);
		return CLI_EXIT_USAGE;
	}
	struct warp_patterns *p;
	char err[512] = "";
	int rc = warp_patterns_open_ro(pat, &p, err, sizeof err);
	if (rc) {
		cli_err("warp show: patterns file %s: %s", pat, err[0] ? err : strerror(-rc));
		free(pat);
		return rc == -EUCLEAN ? 1 : CLI_EXIT_USAGE;
	}
	struct found f = {.id = {(uint64_t)st.st_dev, (uint64_t)st.st_ino}};
	warp_patterns_each(p, find_cb, &f);
	if (json)
		print_json(file, pat, f.id, f.e);
	else
		print_text(file, pat, f.id, f.e);
	warp_patterns_close(p);
	free(pat);
	return 0;
}

int cmd_warp(int argc, char **argv)
{
	if (argc < 2) {
		cli_err("warp: no subcommand given");
		cli_usage_hint("warp");
		return CLI_EXIT_USAGE;
	}
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cmd_warp_usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "show") == 0)
		return cmd_warp_show(argc - 1, argv + 1);
	cli_err("warp: unknown subcommand '%s'", argv[1]);
	cli_usage_hint("warp");
	return CLI_EXIT_USAGE;
}
