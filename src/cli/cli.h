/* SPDX-License-Identifier: MIT */
/*
 * Internal interfaces of the `chell` command-line tool.
 *
 * The CLI is an ordinary program (it is not preloaded), so it uses stdio.
 * Exit statuses: 0 ok, 2 usage or configuration error; `chell run` execs the
 * command, so its status is the command's own (127/126 if it cannot start).
 */
#ifndef CHELL_CLI_H
#define CHELL_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CLI_EXIT_USAGE 2
#define CLI_EXIT_NOEXEC 126
#define CLI_EXIT_NOTFOUND 127

/* ---- subcommands (cmd_*.c) ---- */
struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
	void (*usage)(FILE *f);
};
int cmd_run(int argc, char **argv);
void cmd_run_usage(FILE *f);
int cmd_config(int argc, char **argv);
void cmd_config_usage(FILE *f);
int cmd_version(int argc, char **argv);
void cmd_version_usage(FILE *f);
int cmd_stat(int argc, char **argv);
void cmd_stat_usage(FILE *f);
int cmd_pool(int argc, char **argv);
void cmd_pool_usage(FILE *f);
int cmd_cache(int argc, char **argv);
void cmd_cache_usage(FILE *f);
int cmd_warp(int argc, char **argv);
void cmd_warp_usage(FILE *f);
int cmd_pvm(int argc, char **argv);
void cmd_pvm_usage(FILE *f);
int cmd_tier(int argc, char **argv);
void cmd_tier_usage(FILE *f);

/* ---- messages (util.c) ---- */
/* "chell: <message>\n" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Report a getopt error for subcommand `cmd` (NULL = top level) and return 2. */
int cli_bad_option(const char *cmd, int c, char **argv, const struct option *longopts);
/* "Try 'chell CMD --help'." on stderr. */
void cli_usage_hint(const char *cmd);
/* Print s as a JSON string literal, quotes included. */
void cli_json_str(FILE *f, const char *s);
/* Print s quoted for a POSIX shell if needed (for --dry-run output). */
void cli_shell_quote(FILE *f, const char *s);
/* exec cmd (PATH search) with envp; returns only on failure, with the
 * reason reported and the exit status to use (127 not found, 126 other). */
int cli_exec(char **cmd, char **envp);
/* Make a relative path absolute against the current directory (lexically). malloc'd. */
char *cli_abspath(const char *path);

/* ---- the child's environment (env.c) ---- */
struct cli_env {
	char **v; /* NULL-terminated "NAME=value" strings, each malloc'd */
	size_t n, cap;
};
int cli_env_init(struct cli_env *e, char **from);
const char *cli_env_get(const struct cli_env *e, const char *name);
int cli_env_set(struct cli_env *e, const char *name, const char *value);
void cli_env_free(struct cli_env *e);

/* ---- setting options shared by `run` and `config` (settings_opts.c) ---- */
/* The effective value of setting `key` (file, environment, defaults) into
 * buf; NULL after an error message. */
const char *cli_setting_str(const char *key, char *buf, size_t len);
/* mkdir -p: 0, or -1 with errno. */
int cli_mkdirs(const char *path);
struct chell_config;
/* Was `key` given (config file, environment, option) rather than left at
 * its default? */
bool cli_setting_given(const struct chell_config *cfg, const char *key);
enum {
	OPT_MODE = 256,
	OPT_PATH,
	OPT_CONFIG,
	OPT_TRACE_FILE,
	OPT_SHADOW_DIR,
	OPT_SHADOW_UNDER_TEST,
	OPT_SET,
	OPT_JSON,
	OPT_KEYS,
	OPT_DRY_RUN,
	OPT_ROUTE,
	OPT_MARKDOWN,
	OPT_WHICH,
};
#define CLI_SETTING_LONGOPTS                                                \
	{"mode", required_argument, NULL, OPT_MODE},                        \
	{"path", required_argument, NULL, OPT_PATH},                        \
	{"config", required_argument, NULL, OPT_CONFIG},                    \
	{"trace-file", required_argument, NULL, OPT_TRACE_FILE},            \
	{"shadow-dir", required_argument, NULL, OPT_SHADOW_DIR},            \
	{"shadow-under-test", required_argument, NULL, OPT_SHADOW_UNDER_TEST}, \
	{"route", required_argument, NULL, OPT_ROUTE},                      \
	{"set", required_argument, NULL, OPT_SET}
/* Help text for the options above, shared by the usage messages (the
 * handler names come from the registry). */
void cli_setting_options_usage(FILE *f);
/* "posix, trace, shadow, direct or cache" (conj "or"/"and"); only the ones
 * shadow can check if checkable. */
void cli_handler_list(FILE *f, const char *conj, int checkable);

struct cli_settings {
	char *config_file; /* --config, NULL if not given */
	char **values;     /* per chell_setting_defs index: value from the command line, or NULL */
	char **flags;      /* which option gave it ("option --mode", "option --set"), for messages */
	int count;
};
int cli_settings_init(struct cli_settings *s);
/* In a message of the configuration loader, a setting the command line set
 * is named by its option ("(option --mode)"), not by the variable the CLI
 * exported for it ("(CHELL_MODE)"). */
void cli_settings_name_options(const struct cli_settings *s, char *msg, size_t len);
/* Handle option `code` if it is a setting option: 1 handled, 0 not ours, -1 error (reported). */
int cli_settings_option(struct cli_settings *s, int code, const char *arg);
/* Export the command-line settings into env (CHELL_CONFIG and each key's variable). */
int cli_settings_export(const struct cli_settings *s, struct cli_env *env);
void cli_settings_free(struct cli_settings *s);

/* ---- locating libchell.so (locate.c) ---- */
/* Absolute path of the library into buf; -1 with a message in err if not found. */
int cli_find_lib(char *buf, size_t len, char *err, size_t errlen);
/* The same search for another library of the build (libchell-tier.so), $envvar first. */
int cli_find_named_lib(const char *name, const char *envvar, char *buf, size_t len, char *err,
		       size_t errlen);

#endif
