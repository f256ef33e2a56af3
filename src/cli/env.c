/* SPDX-License-Identifier: MIT */
/*
 * The environment handed to the command: a private copy of ours, edited
 * without setenv() so the CLI's own environment (and the CHELL_LIB lookup)
 * stay untouched until exec.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int env_match(const char *entry, const char *name, size_t n)
{
	return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

int cli_env_init(struct cli_env *e, char **from)
{
	size_t n = 0;
	while (from && from[n])
		n++;
	e->cap = n + 16;
	e->n = 0;
	e->v = calloc(e->cap, sizeof *e->v);
	if (!e->v)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!strchr(from[i], '='))
			continue; /* not a variable; execve would pass it, but nothing can read it */
		if (!(e->v[e->n] = strdup(from[i])))
			return -1;
		e->n++;
	}
	return 0;
}

const char *cli_env_get(const struct cli_env *e, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < e->n; i++)
		if (env_match(e->v[i], name, n))
			return e->v[i] + n + 1;
	return NULL;
}

/* Replaces every occurrence (a hand-built environ may hold duplicates). */
int cli_env_set(struct cli_env *e, const char *name, const char *value)
{
	size_t n = strlen(name);
	size_t len = n + 1 + strlen(value) + 1;
	char *entry = malloc(len);
	if (!entry)
		return -1;
	snprintf(entry, len, "%s=%s", name, value);
	size_t w = 0;
	for (size_t i = 0; i < e->n; i++) {
		if (env_match(e->v[i], name, n))
			free(e->v[i]);
		else
			e->v[w++] = e->v[i];
	}
	e->n = w;
	if (e->n + 2 > e->cap) {
		char **nv = realloc(e->v, (e->cap * 2) * sizeof *nv);
		if (!nv) {
			free(entry);
			return -1;
		}
		e->v = nv;
		e->cap *= 2;
	}
	e->v[e->n++] = entry;
	e->v[e->n] = NULL;
	return 0;
}

void cli_env_free(struct cli_env *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->v[i]);
	free(e->v);
	e->v = NULL;
	e->n = e->cap = 0;
}
