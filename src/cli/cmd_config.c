/* SPDX-License-Identifier: MIT */
/*
 * `chell config`: the effective configuration (value and origin of every
 * setting) as a program started now would see it, or with --keys the list of
 * settings. Accepts the same setting options as `chell run`.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common/config.h"

extern char **environ;

void cmd_config_usage(FILE *f)
{
	fputs("Usage: chell config [--json] [SETTING OPTIONS]\n"
	      "       chell config --keys [--json]\n"
	      "\n"
	      "Print the effective configuration: every setting with its value and where the\n"
	      "value comes from (default, the config file and line, the environment, or the\n"
	      "command line). Precedence, lowest first: default, config file (CHELL_CONFIG or\n"
	      "--config), environment, command line. Exits 2 if the configuration is invalid.\n"
	      "\n"
	      "Options:\n"
	      "      --json               machine-readable output\n"
	      "      --keys               list every setting: key, variable, type, default, help\n"
	      "  -h, --help               show this help\n"
	      "\n"
	      "Setting options (as for 'chell run'):\n",
	      f);
	fputs(cli_setting_options_help, f);
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
	}
	return "?";
}

static void print_keys(int json)
{
	const struct chell_setting_def *d;
	if (json) {
		fputs("[", stdout);
		for (d = chell_setting_defs; d->key; d++) {
			fputs(d == chell_setting_defs ? "\n  {\"key\": " : ",\n  {\"key\": ", stdout);
			cli_json_str(stdout, d->key);
			fputs(", \"env\": ", stdout);
			cli_json_str(stdout, d->env);
			fputs(", \"type\": ", stdout);
			cli_json_str(stdout, type_name(d->type));
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
			fputs(", \"help\": ", stdout);
			cli_json_str(stdout, d->help);
			fputs("}", stdout);
		}
		fputs("\n]\n", stdout);
		return;
	}
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

static void print_config(const struct chell_config *cfg, const struct cli_settings *s,
			 const char *file, int json)
{
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
		fputs("\n  }\n}\n", stdout);
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
}

int cmd_config(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"keys", no_argument, NULL, OPT_KEYS},
		{"help", no_argument, NULL, 'h'},
		CLI_SETTING_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct cli_settings s;
	struct cli_env env = {0};
	struct chell_config cfg = {0};
	int json = 0, keys = 0, c, ret = CLI_EXIT_USAGE;
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
	if (optind < argc) {
		cli_err("config: unexpected argument '%s'", argv[optind]);
		cli_usage_hint("config");
		goto out;
	}
	if (keys) {
		print_keys(json);
		ret = 0;
		goto out;
	}
	if (cli_env_init(&env, environ) || cli_settings_export(&s, &env)) {
		cli_err("out of memory");
		goto out;
	}
	char err[1024];
	if (chell_config_load(&cfg, env.v, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	const char *file = cli_env_get(&env, "CHELL_CONFIG");
	print_config(&cfg, &s, file && *file ? file : NULL, json);
	ret = 0;
out:
	chell_config_free(&cfg);
	cli_env_free(&env);
	cli_settings_free(&s);
	return ret;
}
