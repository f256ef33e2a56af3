/* SPDX-License-Identifier: MIT */
/*
 * `chell run [options] [--] CMD ARGS...`: validate the configuration the
 * command will see, preload libchell.so and exec the command in place (no
 * fork), so its exit status - or the signal that killed it - is the command's
 * own.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache_embed.h"
#include "common/config.h"
#include "common/registry.h"

extern char **environ;

void cmd_run_usage(FILE *f)
{
	fputs("Usage: chell run [OPTIONS] [--] COMMAND [ARGS...]\n"
	      "\n"
	      "Run COMMAND with libchell.so preloaded and the settings exported as CHELL_*\n"
	      "environment variables. The exit status is COMMAND's; 127 if it is not found,\n"
	      "126 if it cannot be executed, 2 for a usage or configuration error. '--' is\n"
	      "needed only if COMMAND starts with '-'.\n"
	      "\n"
	      "Options:\n"
	      "  -n, --dry-run            print the environment changes and the command; do not run\n"
	      "      --stop-cache         cache mode: stop the chelld this run started once\n"
	      "                           COMMAND exits (default: leave it running)\n"
	      "  -h, --help               show this help\n"
	      "\n"
	      "Setting options:\n",
	      f);
	cli_setting_options_usage(f);
	fputs("\nHandlers (their settings: chell config --keys):\n", f);
	for (const struct chell_handler_desc *h = chell_handler_descs; h->name; h++)
		fprintf(f, "  %-8s %s\n", h->name, h->summary);
	fputs("A stack is one handler over the kernel (posix), or shadow:NAME: shadow checking\n"
	      "NAME (",
	      f);
	cli_handler_list(f, " or ", 1);
	fputs(") against a posix copy.\n"
	      "Rules: --route PREFIX=STACK, repeatable; the longest prefix wins. --mode with\n"
	      "--path adds one rule per path; --mode alone takes the files no rule takes\n"
	      "(with routes: unless it is posix). 'chell config --which PATH' tells. Example:\n"
	      "  chell run --route /mnt/pmem=direct --route /data=cache -- ./app\n"
	      "\n"
	      "The whole configuration (defaults, config file, environment, options) is\n"
	      "checked before COMMAND starts. Unless on_error is set, the program runs with\n"
	      "CHELL_ON_ERROR=abort, so a setting the library cannot honour stops it (exit 2)\n"
	      "instead of silently running without Chell. libchell.so is $CHELL_LIB, else\n"
	      "../lib/libchell.so next to chell, else the install libdir.\n"
	      "\n"
	      "A cache stack uses the chelld serving cache.pool (not set: the default pool's,\n"
	      "else the only running one, see 'chell cache ls'); if none answers, one is\n"
	      "started with the cache.* settings (backing directories: cache.backing, else\n"
	      "the prefixes of the cache rules) before COMMAND runs, and keeps running after it.\n",
	      f);
}

/* Is `entry` (an LD_PRELOAD word) a libchell.so? */
static int is_chell_lib(const char *entry, size_t n, const char *lib)
{
	if (strlen(lib) == n && strncmp(entry, lib, n) == 0)
		return 1;
	const char *base = entry;
	for (size_t i = 0; i < n; i++)
		if (entry[i] == '/')
			base = entry + i + 1;
	size_t bn = n - (size_t)(base - entry);
	return bn >= 11 && strncmp(base, "libchell.so", 11) == 0;
}

/*
 * lib first, then the existing entries minus any libchell.so: a nested
 * `chell run` (or a user's own LD_PRELOAD of it) must not load two copies.
 * glibc splits LD_PRELOAD on both ' ' and ':'.
 */
static char *preload_value(const char *lib, const char *old)
{
	size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	size_t len = (size_t)snprintf(out, cap, "%s", lib);
	for (const char *p = old; p && *p;) {
		size_t n = strcspn(p, " :");
		if (n && !is_chell_lib(p, n, lib)) {
			out[len++] = ':';
			memcpy(out + len, p, n);
			len += n;
			out[len] = '\0';
		}
		p += n;
		if (*p)
			p++;
	}
	return out;
}

static void dry_run(const struct cli_env *env, char **cmd)
{
	static const char *const extra[] = {"CHELL_CONFIG", "LD_PRELOAD", NULL};
	/* Show what the program will see that the user's shell might not. */
	for (const char *const *x = extra; *x; x++) {
		const char *v = cli_env_get(env, *x);
		if (v) {
			printf("%s=", *x);
			cli_shell_quote(stdout, v);
			putchar('\n');
		}
	}
	for (const struct chell_setting_def *d = chell_setting_defs; d->key; d++) {
		const char *v = cli_env_get(env, d->env);
		if (v) {
			printf("%s=", d->env);
			cli_shell_quote(stdout, v);
			putchar('\n');
		}
	}
	for (char **a = cmd; *a; a++) {
		if (a != cmd)
			putchar(' ');
		cli_shell_quote(stdout, *a);
	}
	putchar('\n');
}

int cmd_run(int argc, char **argv)
{
	enum { OPT_STOP_CACHE = 600 };
	static const struct option longopts[] = {
		{"dry-run", no_argument, NULL, 'n'},
		{"stop-cache", no_argument, NULL, OPT_STOP_CACHE},
		{"help", no_argument, NULL, 'h'},
		CLI_SETTING_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct cli_settings s;
	struct cli_env env = {0};
	struct chell_config cfg = {0};
	struct chell_routes routes = {0};
	int dry = 0, stop_cache = 0, c, ret = CLI_EXIT_USAGE;
	char err[PATH_MAX * 2 + 256];
	if (cli_settings_init(&s)) {
		cli_err("out of memory");
		return CLI_EXIT_USAGE;
	}
	optind = 0;
	opterr = 0;
	/* '+': stop at the first non-option, which is the command (so '--' is optional). */
	while ((c = getopt_long(argc, argv, "+:hn", longopts, NULL)) != -1) {
		switch (c) {
		case 'n': dry = 1; continue;
		case OPT_STOP_CACHE: stop_cache = 1; continue;
		case 'h': cmd_run_usage(stdout); ret = 0; goto out;
		}
		int r = cli_settings_option(&s, c, optarg);
		if (r < 0)
			goto out;
		if (r == 0) {
			ret = cli_bad_option("run", c, argv, longopts);
			goto out;
		}
	}
	char **cmd = argv + optind;
	if (!*cmd) {
		cli_err("run: no command given");
		cli_usage_hint("run");
		goto out;
	}

	if (cli_env_init(&env, environ) || cli_settings_export(&s, &env))
		goto oom;
	/* Check exactly what the library will load from the environment it gets. */
	if (chell_config_load(&cfg, env.v, err, sizeof err)) {
		cli_settings_name_options(&s, err, sizeof err);
		cli_err("%s", err);
		goto out;
	}
	/* The rules, as the library will build them (external handlers found). */
	if (chell_routes_build(&cfg, &routes, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	const char *needs = chell_routes_needs_prefix(&routes);
	if (needs) {
		cli_err("mode %s needs the files to check: give --path PREFIX (or set paths), or "
			"--route PREFIX=%s",
			needs, needs);
		goto out;
	}
	if (strcmp(cfg.origins[chell_setting_index("on_error")], "default") == 0 &&
	    cli_env_set(&env, "CHELL_ON_ERROR", "abort"))
		goto oom;

	char lib[PATH_MAX];
	if (cli_find_lib(lib, sizeof lib, err, sizeof err)) {
		cli_err("%s", err);
		goto out;
	}
	char *preload = preload_value(lib, cli_env_get(&env, "LD_PRELOAD"));
	if (!preload || cli_env_set(&env, "LD_PRELOAD", preload)) {
		free(preload);
		goto oom;
	}
	free(preload);

	if (dry) {
		dry_run(&env, cmd);
		ret = 0;
		goto out;
	}
	if (chell_routes_use(&routes, "cache")) {
		char pool[PATH_MAX];
		bool started, found;
		int r = mgr_ensure_running(&cfg, &started, &found, pool, sizeof pool);
		if (r) {
			ret = r;
			goto out;
		}
		/* The program's libchell finds its manager by cache.pool. */
		if (found && cli_env_set(&env, "CHELL_CACHE_POOL", pool))
			goto oom;
		if (started && stop_cache) {
			ret = mgr_run_and_stop(cmd, env.v, pool);
			goto out;
		}
		if (started)
			cli_err("started chelld for cache pool %s; it keeps running (stop it with "
				"'chell cache stop --pool %s')",
				pool, pool);
	}
	ret = cli_exec(cmd, env.v);
	goto out;
oom:
	cli_err("out of memory");
out:
	chell_routes_free(&routes);
	chell_config_free(&cfg);
	cli_env_free(&env);
	cli_settings_free(&s);
	return ret;
}
