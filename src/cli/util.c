/* SPDX-License-Identifier: MIT */
/* Messages, quoting and path helpers for the chell CLI. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

void cli_err(const char *fmt, ...)
{
	va_list ap;
	fputs("chell: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void cli_usage_hint(const char *cmd)
{
	if (cmd)
		fprintf(stderr, "Try 'chell %s --help'.\n", cmd);
	else
		fprintf(stderr, "Try 'chell --help'.\n");
}

/*
 * getopt_long runs with opterr=0 and ':' leading the option string, so every
 * problem comes back here and is reported in one format, naming the command.
 */
int cli_bad_option(const char *cmd, int c, char **argv, const struct option *longopts)
{
	const char *pfx = cmd ? cmd : "";
	const char *sep = cmd ? ": " : "";
	/* optopt is the short option (or the long option's val); argv[optind-1] is the word. */
	const char *word = optind > 0 ? argv[optind - 1] : "?";
	char shortopt[3] = {'-', (char)optopt, '\0'};
	const char *name = word;
	if (optopt > 0 && optopt < 256 && word[0] == '-' && word[1] != '-')
		name = shortopt;
	if (optopt >= 256) {
		for (const struct option *o = longopts; o && o->name; o++)
			if (o->val == optopt) {
				static char buf[64];
				snprintf(buf, sizeof buf, "--%s", o->name);
				name = buf;
				break;
			}
	}
	if (c == ':')
		cli_err("%s%soption '%s' needs a value", pfx, sep, name);
	else if (optopt == 0 && strncmp(word, "--", 2) == 0)
		cli_err("%s%sunknown or ambiguous option '%s'", pfx, sep, word);
	else
		cli_err("%s%sunknown option '%s'", pfx, sep, name);
	cli_usage_hint(cmd);
	return CLI_EXIT_USAGE;
}

void cli_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		switch (*p) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\t': fputs("\\t", f); break;
		case '\r': fputs("\\r", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\u%04x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('"', f);
}

void cli_shell_quote(FILE *f, const char *s)
{
	int plain = *s != '\0';
	for (const char *p = s; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=./:,@%",
			    *p))
			plain = 0;
	if (plain) {
		fputs(s, f);
		return;
	}
	fputc('\'', f);
	for (const char *p = s; *p; p++) {
		if (*p == '\'')
			fputs("'\\''", f);
		else
			fputc(*p, f);
	}
	fputc('\'', f);
}

/*
 * Lexical, not realpath(): the file may not exist yet (a trace log, a prefix
 * the program will create), and the user's spelling through symlinks is kept.
 */
char *cli_abspath(const char *path)
{
	if (path[0] == '/' || path[0] == '\0')
		return strdup(path);
	char *cwd = getcwd(NULL, 0);
	if (!cwd)
		return NULL;
	const char *rel = path;
	while (rel[0] == '.' && rel[1] == '/')
		rel += 2;
	if (strcmp(rel, ".") == 0)
		rel = "";
	size_t n = strlen(cwd) + 1 + strlen(rel) + 1;
	char *out = malloc(n);
	if (out) {
		if (*rel)
			snprintf(out, n, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", rel);
		else
			snprintf(out, n, "%s", cwd);
	}
	free(cwd);
	return out;
}

int cli_exec(char **cmd, char **envp)
{
	fflush(NULL);
	execvpe(cmd[0], cmd, envp);
	int e = errno;
	if (e == ENOENT && !strchr(cmd[0], '/')) {
		cli_err("%s: command not found", cmd[0]);
		return CLI_EXIT_NOTFOUND;
	}
	cli_err("cannot run %s: %s", cmd[0], strerror(e));
	return e == ENOENT || e == ENOTDIR ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
}

/* mkdir -p (0755 for what it creates): a pool directory that does not exist
 * yet (the default /dev/shm/chell-cache before the first start). */
int cli_mkdirs(const char *path)
{
	char *p = strdup(path);
	if (!p)
		return -1;
	for (char *s = p + 1;; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			int e = errno;
			free(p);
			errno = e;
			return -1;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return 0;
}
