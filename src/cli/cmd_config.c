/* SPDX-License-Identifier: MIT */
/*
 * `chell config`: the effective configuration (value and origin of every
 * setting) as a program started now would see it, or with --keys the list of
 * settings. Accepts the same setting options as `chell run`.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "chell/handler.h" /* CHELL_HANDLER_ABI */
#include "common/config.h"
#include "common/registry.h"

extern char **environ;

void cmd_config_usage(FILE *f)
{
	fputs("Usage: chell config [--json] [SETTING OPTIONS]\n"
	      "       chell config --which [SETTING OPTIONS] PATH...\n"
	      "       chell config --keys [--json|--markdown]\n"
	      "\n"
	      "Print the effective configuration: every setting with its value and where the\n"
	      "value comes from (default, the config file and line, the environment, or the\n"
	      "command line), then the routing rules in the order they are tried. Precedence,\n"
	      "lowest first: default, config file (CHELL_CONFIG or --config), environment,\n"
	      "command line. Exits 2 if the configuration is invalid.\n"
	      "\n"
	      "Options:\n"
	      "      --json               machine-readable output\n"
	      "      --keys               list every handler and every setting (key, variable,\n"
	      "                           type, default, help), from the registry\n"
	      "      --markdown           with --keys: the tables of docs/CONFIGURATION.md\n"
	      "      --which              for each PATH, the rule and stack that would serve it\n"
	      "  -h, --help               show this help\n"
	      "\n"
	      "Setting options (as for 'chell run'):\n",
	      f);
	cli_setting_options_usage(f);
}

static const char *type_name(enum chell_setting_type t)
{
	switch (t) {
	case CHELL_T_STRING: return "string";
	case CHELL_T_PATH: return "path";
	case CHELL_T_PATHLIST: return "pathlist";
	case CHELL_T_ENUM: return "enum";
	case CHELL_T_BOOL: return "bool";
	case CHELL_T_UINT: return "uint";
	case CHELL_T_SIZE: return "size";
	case CHELL_T_STACK: return "stack";
	case CHELL_T_CHECKABLE: return "handler";
	case CHELL_T_ROUTES: return "routes";
	case CHELL_T_NUMBER: return "number";
	}
	return "?";
}

/* The handler a setting belongs to ("trace.file" -> trace), or NULL (core). */
static const char *owner(const struct chell_setting_def *d)
{
	const char *dot = strchr(d->key, '.');
	const struct chell_handler_desc *h =
		dot ? chell_handler_find(d->key, (size_t)(dot - d->key)) : NULL;
	return h ? h->name : NULL;
}

/* Markdown cell: '|' would end the cell. */
static void md(const char *t)
{
	for (; *t; t++) {
		if (*t == '|')
			putchar('\\');
		putchar(*t);
	}
}

static void md_type(const struct chell_setting_def *d)
{
	switch (d->type) {
	case CHELL_T_ENUM:
		fputs("one of ", stdout);
		putchar('`');
		for (const char *p = d->choices; *p; p++) {
			if (*p == '|')
				fputs("`, `", stdout);
			else
				putchar(*p);
		}
		putchar('`');
		return;
	case CHELL_T_STACK: fputs("a stack: handler name or `shadow:NAME`", stdout); return;
	case CHELL_T_CHECKABLE: fputs("a handler shadow can check", stdout); return;
	case CHELL_T_ROUTES: fputs("rules `PREFIX=STACK`", stdout); return;
	case CHELL_T_PATHLIST: fputs("path list", stdout); return;
	case CHELL_T_UINT: fputs("unsigned integer", stdout); return;
	case CHELL_T_NUMBER: fputs("decimal number", stdout); return;
	case CHELL_T_BOOL: fputs("boolean", stdout); return;
	default: fputs(type_name(d->type), stdout); return;
	}
}

/* The tables of docs/CONFIGURATION.md (tests/system/test_registry.py
 * checks the document holds exactly this). */
static void print_markdown(void)
{
	printf("Handler ABI: %d (`CHELL_HANDLER_ABI`, include/chell/handler.h).\n\n",
	       CHELL_HANDLER_ABI);
	puts("| handler | shadow can check it | as `mode` without `paths` | settings | what it does |");
	puts("|---------|---------------------|---------------------------|----------|--------------|");
	for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++) {
		printf("| `%s` | %s | ", h->name, h->shadow_checkable ? "yes" : "no");
		if (!*h->catch_all)
			fputs("every regular file", stdout);
		else if (!strcmp(h->catch_all, "fast"))
			fputs("the files on tmpfs or DAX mounts", stdout);
		else if (!strcmp(h->catch_all, "none"))
			fputs("refused by `chell run`: give `paths` or a `route`", stdout);
		else
			printf("the `%s` directories, else every regular file", h->catch_all);
		if (h->own_dir)
			printf("; never `%s`", h->own_dir);
		fputs(" | ", stdout);
		int n = 0;
		for (const struct chell_setting_def *d = chell_setting_defs; d->key; d++)
			if (owner(d) == h->name)
				printf("%s`%s`", n++ ? ", " : "", d->key);
		if (!n)
			fputs("none", stdout);
		fputs(" | ", stdout);
		md(h->summary);
		puts(" |");
	}
	puts("");
	puts("| key | variable | type | default | meaning |");
	puts("|-----|----------|------|---------|---------|");
	for (const struct chell_setting_def *d = chell_setting_defs; d->key; d++) {
		printf("| `%s` | `%s` | ", d->key, d->env);
		md_type(d);
		if (*d->def)
			printf(" | `%s` | ", d->def);
		else
			fputs(" | empty | ", stdout);
		md(d->help);
		puts(" |");
	}
}

static void print_keys(int json, int markdown)
{
	const struct chell_setting_def *d;
	if (markdown) {
		print_markdown();
		return;
	}
	if (json) {
		fputs("[", stdout);
		for (d = chell_setting_defs; d->key; d++) {
			fputs(d == chell_setting_defs ? "\n  {\"key\": " : ",\n  {\"key\": ", stdout);
			cli_json_str(stdout, d->key);
			fputs(", \"env\": ", stdout);
			cli_json_str(stdout, d->env);
			fputs(", \"type\": ", stdout);
			cli_json_str(stdout, type_name(d->type));
			if (d->type == CHELL_T_STACK || d->type == CHELL_T_CHECKABLE) {
				/* the built-in handlers it may name (registry.def) */
				fputs(", \"choices\": [", stdout);
				int n = 0;
				for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++)
					if (d->type == CHELL_T_STACK || h->shadow_checkable) {
						fputs(n++ ? ", " : "", stdout);
						cli_json_str(stdout, h->name);
					}
				fputs("]", stdout);
			}
			if (d->choices) {
				fputs(", \"choices\": [", stdout);
				const char *p = d->choices;
				for (int first = 1;; first = 0) {
					const char *bar = strchr(p, '|');
					size_t n = bar ? (size_t)(bar - p) : strlen(p);
					char *one = strndup(p, n);
					if (!first)
						fputs(", ", stdout);
					cli_json_str(stdout, one ? one : "");
					free(one);
					if (!bar)
						break;
					p = bar + 1;
				}
				fputs("]", stdout);
			}
			fputs(", \"default\": ", stdout);
			cli_json_str(stdout, d->def);
			fputs(", \"handler\": ", stdout);
			if (owner(d))
				cli_json_str(stdout, owner(d));
			else
				fputs("null", stdout);
			fputs(", \"help\": ", stdout);
			cli_json_str(stdout, d->help);
			fputs("}", stdout);
		}
		fputs("\n]\n", stdout);
		return;
	}
	printf("Handlers (ABI %d; a stack is NAME, or shadow:NAME to check NAME against a posix "
	       "copy):\n",
	       CHELL_HANDLER_ABI);
	for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++)
		printf("  %-8s %s%s\n", h->name, h->summary,
		       h->shadow_checkable ? "" : " (shadow cannot check it)");
	printf("\nSettings:\n");
	for (d = chell_setting_defs; d->key; d++) {
		printf("%s (%s)\n", d->key, d->env);
		if (d->choices)
			printf("    type: one of %s; default: %s\n", d->choices, d->def);
		else
			printf("    type: %s; default: %s\n", type_name(d->type),
			       *d->def ? d->def : "(empty)");
		printf("    %s\n", d->help);
	}
	printf("\nCHELL_CONFIG names a file of 'key = value' lines ('#' comments, [section]\n"
	       "headers prefix the keys that follow). The environment overrides the file.\n");
}

/* Where a value came from, in words: the CLI knows which variables it set itself. */
static const char *origin_of(const struct chell_config *cfg, const struct cli_settings *s, int i)
{
	if (s->values[i] && strcmp(cfg->origins[i], "env") == 0)
		return s->flags[i];
	return cfg->origins[i];
}

/* What a rule says, in words: "/data -> cache (route)". */
static void rule_text(const struct chell_route *r, char *buf, size_t len)
{
	char st[80];
	chell_stack_spec_format(&r->stack, st, sizeof st);
	if (r->catch_all)
		snprintf(buf, len, "every other file%s -> %s (%s)",
			 r->by_mount ? " on a tmpfs or DAX mount" : "", st, r->from);
	else
		snprintf(buf, len, "%s -> %s (%s)", r->prefix, st, r->from);
}

struct own_dir_check {
	const struct chell_config *cfg;
	const char *abs;
	const char *key; /* the setting whose directory holds abs */
};

static void own_dir_has(const char *key, void *arg)
{
	struct own_dir_check *oc = arg;
	const char *dir = chell_config_str(oc->cfg, key);
	if (!oc->key && *dir && chell_path_under(oc->abs, dir, strlen(dir)))
		oc->key = key;
}

/* Never routed whatever the rules say: the kernel's pseudo file systems and
 * Chell's own directories (as src/nib/router.c). NULL if abs may be routed. */
static const char *excluded_by(const struct chell_config *cfg, const struct chell_routes *rs,
			       const char *abs)
{
	if (chell_path_under(abs, "/proc", 5) || chell_path_under(abs, "/sys", 4))
		return "a kernel pseudo file system";
	struct own_dir_check oc = {cfg, abs, NULL};
	chell_routes_own_dirs(rs, own_dir_has, &oc);
	return oc.key;
}

static int print_which(const struct chell_config *cfg, const struct chell_routes *rs, char **paths)
{
	for (; *paths; paths++) {
		char *abs = cli_abspath(*paths);
		if (!abs || chell_path_normalise(abs) < 0) {
			free(abs);
			cli_err("out of memory");
			return CLI_EXIT_USAGE;
		}
		const struct chell_route *r = chell_routes_match(rs, abs);
		const char *ex = excluded_by(cfg, rs, abs);
		char text[PATH_MAX + 128];
		if (ex)
			printf("%s: kernel (never routed: %s)\n", abs, ex);
		else if (!r)
			printf("%s: kernel (no rule)\n", abs);
		else {
			char st[80];
			chell_stack_spec_format(&r->stack, st, sizeof st);
			rule_text(r, text, sizeof text);
			printf("%s: %s%s (rule %s)\n", abs, st,
			       r->by_mount ? " if on a tmpfs or DAX mount, else kernel" : "", text);
		}
		free(abs);
	}
	return 0;
}

static void print_config(const struct chell_config *cfg, const struct cli_settings *s,
			 const struct chell_routes *rs, const char *file, int json)
{
	char text[PATH_MAX + 128];
	if (json) {
		fputs("{\n  \"config_file\": ", stdout);
		if (file)
			cli_json_str(stdout, file);
		else
			fputs("null", stdout);
		fputs(",\n  \"settings\": {", stdout);
		for (int i = 0; i < cfg->count; i++) {
			fputs(i ? ",\n    " : "\n    ", stdout);
			cli_json_str(stdout, chell_setting_defs[i].key);
			fputs(": {\"value\": ", stdout);
			cli_json_str(stdout, cfg->values[i]);
			fputs(", \"origin\": ", stdout);
			cli_json_str(stdout, origin_of(cfg, s, i));
			fputs(", \"env\": ", stdout);
			cli_json_str(stdout, chell_setting_defs[i].env);
			fputs("}", stdout);
		}
		fputs("\n  },\n  \"routes\": [", stdout);
		for (int i = 0; i < rs->n; i++) {
			char st[80];
			chell_stack_spec_format(&rs->r[i].stack, st, sizeof st);
			fputs(i ? ",\n    {\"prefix\": " : "\n    {\"prefix\": ", stdout);
			if (rs->r[i].catch_all)
				fputs("null", stdout);
			else
				cli_json_str(stdout, rs->r[i].prefix);
			fputs(", \"stack\": ", stdout);
			cli_json_str(stdout, st);
			fputs(", \"from\": ", stdout);
			cli_json_str(stdout, rs->r[i].from);
			printf(", \"by_mount\": %s}", rs->r[i].by_mount ? "true" : "false");
		}
		fputs(rs->n ? "\n  ]\n}\n" : "]\n}\n", stdout);
		return;
	}
	printf("# config file: %s\n", file ? file : "none (CHELL_CONFIG is not set)");
	int kw = 3, vw = 5;
	for (int i = 0; i < cfg->count; i++) {
		int k = (int)strlen(chell_setting_defs[i].key), v = (int)strlen(cfg->values[i]);
		if (k > kw)
			kw = k;
		if (v > vw && v <= 40)
			vw = v;
	}
	printf("%-*s  %-*s  %s\n", kw, "KEY", vw, "VALUE", "ORIGIN");
	for (int i = 0; i < cfg->count; i++) {
		/* "" would vanish between the columns */
		const char *v = *cfg->values[i] ? cfg->values[i] : "\"\"";
		printf("%-*s  %-*s  %s\n", kw, chell_setting_defs[i].key, vw, v, origin_of(cfg, s, i));
	}
	printf("\n# routing rules, tried in this order (chell config --which PATH explains one file)\n");
	for (int i = 0; i < rs->n; i++) {
		rule_text(&rs->r[i], text, sizeof text);
		printf("%s\n", text);
	}
	if (!rs->n)
		printf("none: every file uses the kernel path\n");
}

int cmd_config(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"keys", no_argument, NULL, OPT_KEYS},
		{"markdown", no_argument, NULL, OPT_MARKDOWN},
		{"which", no_argument, NULL, OPT_WHICH},
		{"help", no_argument, NULL, 'h'},
		CLI_SETTING_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct cli_settings s;
	struct cli_env env = {0};
	struct chell_config cfg = {0};
	struct chell_routes rs = {0};
	int json = 0, keys = 0, markdown = 0, which = 0, c, ret = CLI_EXIT_USAGE;
	if (cli_settings_init(&s)) {
		cli_err("out of memory");
		return CLI_EXIT_USAGE;
	}
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: json = 1; continue;
		case OPT_KEYS: keys = 1; continue;
		case OPT_MARKDOWN: markdown = 1; continue;
		case OPT_WHICH: which = 1; continue;
		case 'h': cmd_config_usage(stdout); ret = 0; goto out;
		}
		int r = cli_settings_option(&s, c, optarg);
		if (r < 0)
			goto out;
		if (r == 0) {
			ret = cli_bad_option("config", c, argv, longopts);
			goto out;
		}
	}
	if (which && optind == argc) {
		cli_err("config: --which needs at least one PATH");
		cli_usage_hint("config");
		goto out;
	}
	if (markdown && !keys) {
		cli_err("config: --markdown goes with --keys");
		cli_usage_hint("config");
		goto out;
	}
	if (optind < argc && !which) {
		cli_err("config: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("config");
		goto out;
	}
	if (keys) {
		print_keys(json, markdown);
		ret = 0;
		goto out;
	}
	if (cli_env_init(&env, environ) || cli_settings_export(&s, &env)) {
		cli_err("out of memory");
		goto out;
	}
	char err[1024];
	if (chell_config_load(&cfg, env.v, err, sizeof err)) {
		cli_settings_name_options(&s, err, sizeof err);
		cli_err("%s", err);
		goto out;
	}
	if (chell_routes_build(&cfg, &rs, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	const char *file = cli_env_get(&env, "CHELL_CONFIG");
	if (which)
		ret = print_which(&cfg, &rs, argv + optind);
	else {
		print_config(&cfg, &s, &rs, file && *file ? file : NULL, json);
		ret = 0;
	}
out:
	chell_routes_free(&rs);
	chell_config_free(&cfg);
	cli_env_free(&env);
	cli_settings_free(&s);
	return ret;
}
