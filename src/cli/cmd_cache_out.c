/* SPDX-License-Identifier: MIT */
/*
 * `chell cache`: sizes, ratios and the progress display of flush and stop.
 *
 * Progress goes to stderr so stdout keeps only the result (and --json stays
 * parseable). On a terminal it is one line redrawn in place; otherwise (a
 * log, a pipe, CI) a plain line at most once a second, so long runs still
 * show life without flooding the log.
 */
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd_cache.h"

void print_size_iec(FILE *f, uint64_t b)
{
	static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int u = 0;
	double v = (double)b;
	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	fprintf(f, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

double counts_hit_ratio(const struct chelld_client_counts *c)
{
	double hits = (double)c->read_hits + (double)c->write_hits;
	double all = hits + (double)c->read_misses + (double)c->write_misses;
	return all > 0 ? hits / all : -1;
}

const char *policy_display_name(uint32_t policy)
{
	static const char *const names[] = {"lru", "fifo", "blocks", "arc"};
	return policy < sizeof names / sizeof names[0] ? names[policy] : "unknown";
}

double now_monotonic(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void progress_bar_init(struct progress_bar *p, bool quiet)
{
	memset(p, 0, sizeof *p);
	p->quiet = quiet;
	p->tty = isatty(STDERR_FILENO) == 1;
}

static void clear_bar(struct progress_bar *p)
{
	if (p->drawn) {
		fputs("\r\033[K", stderr);
		p->drawn = false;
	}
}

void progress_bar_show(struct progress_bar *p, uint64_t done, uint64_t total, const char *text)
{
	if (p->quiet)
		return;
	if (!p->tty) {
		double t = now_monotonic();
		if (t < p->next_line)
			return;
		p->next_line = t + 1;
		if (total)
			fprintf(stderr, "  %3.0f%%  %s\n", 100.0 * (double)done / (double)total, text);
		else
			fprintf(stderr, "  %s\n", text);
		fflush(stderr);
		return;
	}
	enum { WIDTH = 30 };
	char bar[WIDTH + 1];
	unsigned fill = total ? (unsigned)((double)done / (double)total * WIDTH) : 0;
	if (fill > WIDTH)
		fill = WIDTH;
	memset(bar, '#', fill);
	memset(bar + fill, '.', WIDTH - fill);
	bar[WIDTH] = '\0';
	clear_bar(p);
	if (total)
		fprintf(stderr, "[%s] %3.0f%%  %s", bar, 100.0 * (double)done / (double)total, text);
	else
		fprintf(stderr, "%s", text);
	fflush(stderr);
	p->drawn = true;
}

void progress_bar_note(struct progress_bar *p, const char *fmt, ...)
{
	if (p->quiet)
		return;
	clear_bar(p);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

void progress_bar_done(struct progress_bar *p)
{
	clear_bar(p);
	fflush(stderr);
}
