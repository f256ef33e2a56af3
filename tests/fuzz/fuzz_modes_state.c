/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: arbitrary bytes as a pool's modes.state (src/chelld/
 * modes_state.c), the run-time mode switches and pins a restarted chelld
 * applies.
 *
 * Oracles, beyond "no crash, no sanitizer report":
 *   - every item handed to the apply callback is well formed: a path that
 *     is a NUL-terminated string without a newline, a mode that names one
 *     (pins carry none);
 *   - every line that is not applied is logged, with the file and its line
 *     number (a damaged file costs switches, silently never);
 *   - the items applied, saved again and loaded again, come back the same
 *     and in the same order (what chelld writes, it reads).
 * The callback refuses some items (chosen by the path's length), as the
 * manager refuses a directory gone since, to run that path too.
 *
 * Built two ways, like the other targets: with libFuzzer by scripts/fuzz.sh
 * --target modes_state, and with regress_main.c over the committed corpus
 * by ctest (fuzz_modes_state_corpus).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chelld/modes_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ITEMS 256
#define MAX_INPUT (64u << 10)

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_modes_state: %s\n", what);
	abort();
}

/* The log: how many lines named a line number of the file. */
static unsigned logged_lines;
void chelld_log(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (strstr(msg, "modes.state line ") && strstr(msg, "ignored"))
		logged_lines++;
}

struct seen {
	struct modes_state_item it[MAX_ITEMS];
	char *paths[MAX_ITEMS];
	size_t n;
	unsigned refused;
};

static int apply(void *arg, const struct modes_state_item *it, char *detail, size_t len)
{
	struct seen *s = arg;
	if (!it->path || strchr(it->path, '\n'))
		fail("an item's path holds a newline");
	if (!it->pin && !strcmp(modes_name(it->mode), "?"))
		fail("a mode item names no mode");
	if (strlen(it->path) % 7 == 3 || s->n == MAX_ITEMS) {
		snprintf(detail, len, "refused by the harness");
		s->refused++;
		return -1;
	}
	s->paths[s->n] = strdup(it->path);
	if (!s->paths[s->n])
		fail("out of memory");
	s->it[s->n] = *it;
	s->it[s->n].path = s->paths[s->n];
	s->n++;
	return 0;
}

static void seen_free(struct seen *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->paths[i]);
}

static int write_file(const char *dir, const uint8_t *data, size_t size)
{
	char p[256];
	snprintf(p, sizeof p, "%s/modes.state", dir);
	FILE *f = fopen(p, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(data, 1, size, f);
	return fclose(f) == 0 && w == size ? 0 : -1;
}

static void clean(const char *dir)
{
	char p[256];
	snprintf(p, sizeof p, "%s/modes.state", dir);
	unlink(p);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_INPUT)
		return 0;
	char dir[] = "/tmp/chell-fuzz-modes-XXXXXX";
	if (!mkdtemp(dir))
		fail("mkdtemp");
	if (write_file(dir, data, size) < 0)
		fail("cannot write the input");
	/* the lines of the input ended by a newline, the magic line included */
	unsigned lines = 0;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	struct seen *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
	if (!a || !b)
		fail("out of memory");
	logged_lines = 0;
	int n = modes_state_load(dir, apply, a);
	if (n < 0 || (size_t)n != a->n)
		fail("the count returned is not the items applied");
	/* a file whose first line is the magic: every later line is applied,
	 * refused by the callback, or logged */
	if (size >= 14 && !memcmp(data, "chell-modes 1\n", 14) && a->n + a->refused + logged_lines < lines - 1 &&
	    a->n < MAX_ITEMS)
		fail("a line was neither applied nor logged");
	/* round trip */
	if (modes_state_save(dir, a->it, a->n) < 0)
		fail("cannot save what was loaded");
	logged_lines = 0;
	if (modes_state_load(dir, apply, b) < 0)
		fail("cannot load what was saved");
	/* (the harness refused the same items the first time: none is left) */
	if (b->n != a->n || logged_lines)
		fail("saved items do not load back as they were");
	for (size_t i = 0; i < a->n; i++) {
		const struct modes_state_item *x = &a->it[i], *y = &b->it[i];
		if (x->pin != y->pin || (!x->pin && x->mode != y->mode) || strcmp(x->path, y->path))
			fail("an item changed through a save and a load");
	}
	seen_free(a);
	seen_free(b);
	free(a);
	free(b);
	clean(dir);
	return 0;
}
