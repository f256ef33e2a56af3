/* SPDX-License-Identifier: MIT */
/*
 * `chell stat [--json] FILE...`: the operation counters processes wrote at
 * exit (setting stats.file), one table row per process plus the total.
 *
 * The files hold one flat JSON object of numbers and strings, as written by
 * src/handlers/mapped/stats.c; this reader accepts exactly that shape and
 * names the file and the problem otherwise. Exit: 0, 1 if a file cannot be
 * read or parsed, 2 on usage errors.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define MAX_FIELDS 48 /* a handler's counters, the tier model's (docs/TIER.md) */

struct stat_rec {
	char *keys[MAX_FIELDS];
	char *vals[MAX_FIELDS]; /* numbers as text, strings unquoted */
	int n;
};

void cmd_stat_usage(FILE *f)
{
	fputs("Usage: chell stat [--json] FILE...\n"
	      "\n"
	      "Print the counters Chell wrote at exit for each process (enable with\n"
	      "'chell run --set stats.file=/tmp/chell-stats.%p.json ...'), and their total.\n"
	      "\n"
	      "Options:\n"
	      "      --json    machine-readable output (the records and the total)\n"
	      "  -h, --help    show this help\n"
	      "\n"
	      "Exit status: 0 ok, 1 a file could not be read or parsed, 2 usage error.\n",
	      f);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += n;
		if (len + 1 == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
			}
			buf = nb;
		}
	}
	fclose(f);
	if (buf)
		buf[len] = 0;
	return buf;
}

static const char *skip_ws(const char *p)
{
	while (isspace((unsigned char)*p))
		p++;
	return p;
}

/* A JSON string without escapes beyond \" and \\ (all our writer produces). */
static char *parse_string(const char **pp)
{
	const char *p = *pp;
	if (*p != '"')
		return NULL;
	p++;
	char *out = malloc(strlen(p) + 1), *o = out;
	while (out && *p && *p != '"') {
		if (*p == '\\' && p[1])
			p++;
		*o++ = *p++;
	}
	if (!out || *p != '"') {
		free(out);
		return NULL;
	}
	*o = 0;
	*pp = p + 1;
	return out;
}

static int parse_record(const char *text, struct stat_rec *r, const char **err)
{
	const char *p = skip_ws(text);
	r->n = 0;
	if (*p++ != '{')
		return *err = "expected '{'", -1;
	p = skip_ws(p);
	while (*p && *p != '}') {
		if (r->n == MAX_FIELDS)
			return *err = "too many fields", -1;
		char *k = parse_string(&p);
		if (!k)
			return *err = "expected a quoted field name", -1;
		p = skip_ws(p);
		if (*p++ != ':')
			return free(k), *err = "expected ':'", -1;
		p = skip_ws(p);
		char *v;
		if (*p == '"') {
			v = parse_string(&p);
		} else {
			const char *s = p;
			while (*p == '-' || isdigit((unsigned char)*p))
				p++;
			v = p > s ? strndup(s, (size_t)(p - s)) : NULL;
		}
		if (!v)
			return free(k), *err = "expected a number or a string", -1;
		r->keys[r->n] = k;
		r->vals[r->n++] = v;
		p = skip_ws(p);
		if (*p == ',')
			p = skip_ws(p + 1);
	}
	if (*p != '}')
		return *err = "unterminated object", -1;
	return 0;
}

static bool is_number(const char *s)
{
	if (*s == '-')
		s++;
	if (!*s)
		return false;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return false;
	return true;
}

/* One table row: key, each process's value ("-" if it has none), total. */
static void print_row(const struct stat_rec *recs, int nrec, const char *key, const char *total)
{
	printf("%-18s", key);
	for (int r = 0; r < nrec; r++) {
		const char *v = "-";
		for (int j = 0; j < recs[r].n; j++)
			if (!strcmp(recs[r].keys[j], key))
				v = recs[r].vals[j];
		printf(" %14s", v);
	}
	printf(" %14s\n", total);
}

/* A record's numeric field, or -1 if it has none. */
static double field(const struct stat_rec *r, const char *key)
{
	for (int j = 0; j < r->n; j++)
		if (!strcmp(r->keys[j], key) && is_number(r->vals[j]))
			return strtod(r->vals[j], NULL);
	return -1;
}

/* WARP's prediction accuracy (docs/WARP.md): accurate / accesses, in
 * percent with one decimal, derived here because a percentage does not
 * add up over processes; "-" without accesses. */
static void accuracy(char *out, size_t n, double accurate, double accesses)
{
	if (accurate < 0 || accesses <= 0)
		snprintf(out, n, "-");
	else
		snprintf(out, n, "%.1f", 100.0 * accurate / accesses);
}

int cmd_stat(int argc, char **argv)
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
		case 'h': cmd_stat_usage(stdout); return 0;
		default: return cli_bad_option("stat", c, argv, longopts);
		}
	}
	if (optind >= argc) {
		cli_err("stat: no stats file given");
		cli_usage_hint("stat");
		return CLI_EXIT_USAGE;
	}
	int nfiles = argc - optind, status = 0, nrec = 0;
	struct stat_rec *recs = calloc((size_t)nfiles, sizeof(*recs));
	if (!recs)
		return 1;
	for (int i = optind; i < argc; i++) {
		char *text = slurp(argv[i]);
		const char *err = NULL;
		if (!text) {
			cli_err("stat: cannot read '%s': %s", argv[i], strerror(errno));
			status = 1;
			continue;
		}
		if (parse_record(text, &recs[nrec], &err) < 0) {
			cli_err("stat: '%s' is not a Chell stats file: %s", argv[i], err);
			status = 1;
		} else {
			nrec++;
		}
		free(text);
	}
	/* The rows: every field any record has, in the order first seen. The
	 * processes of one run need not share a shape: a parent that touched
	 * no file under the handler writes only the tier model's counters, its
	 * children the handler's too, and those must still be totalled. */
	const char **keys = calloc((size_t)nrec * MAX_FIELDS + 1, sizeof(*keys));
	bool *numeric = calloc((size_t)nrec * MAX_FIELDS + 1, sizeof(*numeric));
	unsigned long long *tot = calloc((size_t)nrec * MAX_FIELDS + 1, sizeof(*tot));
	int nkeys = 0;
	if (!keys || !numeric || !tot)
		nrec = 0, status = 1;
	for (int r = 0; r < nrec; r++)
		for (int j = 0; j < recs[r].n; j++) {
			int k = 0;
			while (k < nkeys && strcmp(keys[k], recs[r].keys[j]))
				k++;
			if (k == nkeys) {
				keys[nkeys] = recs[r].keys[j];
				numeric[nkeys++] = is_number(recs[r].vals[j]) && strcmp(recs[r].keys[j], "pid");
			}
			if (numeric[k] && is_number(recs[r].vals[j]))
				tot[k] += strtoull(recs[r].vals[j], NULL, 10);
		}
	if (json) {
		printf("{\"processes\": [");
		for (int r = 0; r < nrec; r++) {
			printf("%s{", r ? ", " : "");
			for (int j = 0; j < recs[r].n; j++) {
				printf("%s", j ? ", " : "");
				cli_json_str(stdout, recs[r].keys[j]);
				printf(": ");
				if (is_number(recs[r].vals[j]))
					printf("%s", recs[r].vals[j]);
				else
					cli_json_str(stdout, recs[r].vals[j]);
			}
			printf("}");
		}
		printf("], \"total\": {");
		int printed = 0;
		for (int k = 0; k < nkeys; k++) {
			if (!numeric[k])
				continue;
			printf("%s", printed++ ? ", " : "");
			cli_json_str(stdout, keys[k]);
			printf(": %llu", tot[k]);
		}
		double ta = 0, tn = 0;
		for (int r = 0; r < nrec; r++)
			if (field(&recs[r], "accesses") > 0 && field(&recs[r], "accurate") >= 0) {
				ta += field(&recs[r], "accurate");
				tn += field(&recs[r], "accesses");
			}
		if (tn > 0)
			printf("%s\"accuracy_pct\": %.1f", printed ? ", " : "", 100.0 * ta / tn);
		printf("}}\n");
	} else if (nrec) {
		printf("%-18s", "counter");
		for (int r = 0; r < nrec; r++) {
			const char *pid = "?";
			for (int j = 0; j < recs[r].n; j++)
				if (!strcmp(recs[r].keys[j], "pid"))
					pid = recs[r].vals[j];
			printf(" %14s", pid);
		}
		printf(" %14s\n", "total");
		/* the words first (mode, handler, the tier model in force), then
		 * the counters with their total */
		for (int k = 0; k < nkeys; k++)
			if (!numeric[k] && strcmp(keys[k], "pid"))
				print_row(recs, nrec, keys[k], "");
		for (int k = 0; k < nkeys; k++) {
			if (!numeric[k])
				continue;
			char total[24];
			snprintf(total, sizeof total, "%llu", tot[k]);
			print_row(recs, nrec, keys[k], total);
		}
		double ta = 0, tn = 0;
		for (int r = 0; r < nrec; r++)
			if (field(&recs[r], "accesses") > 0 && field(&recs[r], "accurate") >= 0) {
				ta += field(&recs[r], "accurate");
				tn += field(&recs[r], "accesses");
			}
		if (tn > 0) {
			char v[24];
			printf("%-18s", "accuracy_pct");
			for (int r = 0; r < nrec; r++) {
				accuracy(v, sizeof v, field(&recs[r], "accurate"), field(&recs[r], "accesses"));
				printf(" %14s", v);
			}
			accuracy(v, sizeof v, ta, tn);
			printf(" %14s\n", v);
		}
	}
	free(keys);
	free(numeric);
	free(tot);
	for (int r = 0; r < nrec; r++)
		for (int j = 0; j < recs[r].n; j++)
			free(recs[r].keys[j]), free(recs[r].vals[j]);
	free(recs);
	return status;
}
