/* SPDX-License-Identifier: MIT */
/*
 * `chell cache mode [DIR [MODE]]`, `chell cache pin PATH...`, `chell cache
 * unpin PATH...`: the cache modes of backing directories and the pinned
 * files of a running chelld (SET_MODE, PIN, RULE; src/chelld/modes.c), and
 * what `chell cache status` shows of them.
 *
 * Exit: 0 ok, 1 not running, 2 usage error or a request the manager
 * refuses (unknown mode, not a directory, not under a backing directory,
 * not permitted), 3 for `mode`: the write-back of the directory's dirty
 * data failed (the data stays in the pool), for `pin`: cache.pin_max
 * would be exceeded.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"

#define EXIT_PARTIAL 3

static const char *const mode_names[CHELLD_MODE_COUNT] = {
	"write-back", "write-through", "write-around", "read-only", "pass-through",
};

static const char *mode_name(uint32_t m)
{
	return m < CHELLD_MODE_COUNT ? mode_names[m] : "?";
}

void cache_mode_usage(FILE *f)
{
	fputs("Usage: chell cache mode [--pool DIR | --socket PATH] [--json] [DIR [MODE]]\n"
	      "\n"
	      "Show or switch the cache mode of a directory under a backing directory\n"
	      "(docs/CACHE.md, \"Cache modes\"). MODE is one of:\n"
	      "  write-back     writes stay in the cache, written back later (default)\n"
	      "  write-through  writes reach the backing file before they return; reads cached\n"
	      "  write-around   writes go to the backing file and drop the cached chunks;\n"
	      "                 reads cached\n"
	      "  read-only      only reads are cached (writes as write-around)\n"
	      "  pass-through   nothing is cached: the kernel path\n"
	      "Without DIR: the default mode and every directory's. With DIR only: its\n"
	      "mode. A switch first writes back the dirty data of the directory's files\n"
	      "and drops their cached chunks, so programs that have them open continue\n"
	      "under the new mode. It lasts until chelld stops (cache.mode and\n"
	      "cache.mode_rules set the modes it starts with).\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (default: cache.pool)\n"
	      "      --socket PATH   the daemon's socket\n"
	      "      --json          print one JSON object\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 ok, 1 not running, 2 usage error or refused (unknown mode,\n"
	      "not a directory under a backing directory, not permitted), 3 the\n"
	      "directory's dirty data could not all be written back (kept in the pool).\n",
	      f);
}

void cache_pin_usage(FILE *f)
{
	fputs("Usage: chell cache pin [--pool DIR | --socket PATH] PATH...\n"
	      "       chell cache unpin [--pool DIR | --socket PATH] PATH...\n"
	      "\n"
	      "Pin files or directories (everything below them) in the cache: their\n"
	      "cached chunks are never evicted (only if nothing else is left to evict,\n"
	      "when pinned files grew past cache.pin_max). The bytes pinned - the\n"
	      "files' sizes when pinned - must fit cache.pin_max (default half the\n"
	      "cache). Pins last until chelld stops. `chell cache status` lists them.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (default: cache.pool)\n"
	      "      --socket PATH   the daemon's socket\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 ok, 1 not running, 2 usage error or refused (not under a\n"
	      "backing directory, not pinned, not permitted), 3 cache.pin_max exceeded.\n",
	      f);
}

int cache_modes_fetch(struct mgr_conn *c, struct cache_modes_info *mi)
{
	memset(mi, 0, sizeof *mi);
	struct chelld_rule q = {.index = 0};
	if (mgr_call(c, &q, sizeof q, CHELLD_MSG_RULE, &mi->def, sizeof mi->def, -1, NULL) < 0)
		return -1; /* a manager without modes (ENOSYS) */
	mi->known = true;
	for (q.index = 1;; q.index++) {
		struct chelld_rule_reply r;
		if (mgr_call(c, &q, sizeof q, CHELLD_MSG_RULE, &r, sizeof r, -1, NULL) < 0)
			break;
		struct chelld_rule_reply *n = realloc(mi->items, (mi->n + 1) * sizeof *n);
		if (!n)
			break;
		mi->items = n;
		r.path[sizeof r.path - 1] = 0;
		n[mi->n++] = r;
	}
	return 0;
}

void cache_modes_free(struct cache_modes_info *mi)
{
	free(mi->items);
	memset(mi, 0, sizeof *mi);
}

void cache_modes_print(FILE *f, const struct cache_modes_info *mi, bool json)
{
	if (!mi->known)
		return;
	const struct chelld_rule_reply *d = &mi->def;
	if (json) {
		fprintf(f, "\"mode\": \"%s\", \"mode_rules\": [", mode_name(d->mode));
		bool first = true;
		for (uint32_t i = 0; i < mi->n; i++) {
			if (mi->items[i].kind != CHELLD_RULE_MODE)
				continue;
			fprintf(f, "%s{\"dir\": ", first ? "" : ", ");
			cli_json_str(f, mi->items[i].path);
			fprintf(f, ", \"mode\": \"%s\"}", mode_name(mi->items[i].mode));
			first = false;
		}
		fprintf(f, "], \"pins\": [");
		first = true;
		for (uint32_t i = 0; i < mi->n; i++) {
			if (mi->items[i].kind != CHELLD_RULE_PIN)
				continue;
			fprintf(f, "%s{\"path\": ", first ? "" : ", ");
			cli_json_str(f, mi->items[i].path);
			fprintf(f, ", \"bytes\": %" PRIu64 "}", mi->items[i].bytes);
			first = false;
		}
		fprintf(f, "], \"pinned_bytes\": %" PRIu64 ", \"pin_max\": %" PRIu64
			   ", \"seq_cutoff\": %" PRIu64 ", \"file_max\": %" PRIu64
			   ", \"seq_bypassed\": %" PRIu64,
			d->bytes, d->pin_max, d->seq_cutoff, d->file_max, d->seq_bypassed);
		return;
	}
	fprintf(f, "  mode:       %s (default)\n", mode_name(d->mode));
	for (uint32_t i = 0; i < mi->n; i++)
		if (mi->items[i].kind == CHELLD_RULE_MODE)
			fprintf(f, "  mode:       %s %s\n", mode_name(mi->items[i].mode),
				mi->items[i].path);
	for (uint32_t i = 0; i < mi->n; i++)
		if (mi->items[i].kind == CHELLD_RULE_PIN) {
			fprintf(f, "  pinned:     %s (", mi->items[i].path);
			print_size_iec(f, mi->items[i].bytes);
			fprintf(f, ")\n");
		}
	fprintf(f, "  pins:       ");
	print_size_iec(f, d->bytes);
	fprintf(f, " of ");
	print_size_iec(f, d->pin_max);
	fprintf(f, " (cache.pin_max)\n  seq cutoff: ");
	if (d->seq_cutoff)
		print_size_iec(f, d->seq_cutoff);
	else
		fprintf(f, "the capacity");
	fprintf(f, " (%" PRIu64 " read misses around the cache)\n  file max:   ", d->seq_bypassed);
	if (d->file_max)
		print_size_iec(f, d->file_max);
	else
		fprintf(f, "no cap");
	fprintf(f, "\n");
}

/* Connect to the pool's (or socket's) daemon; false after a message. */
static bool connect_mgr(const char *cmd, const char *pool, const char *sockopt,
			struct mgr_conn *cn, int *ret)
{
	*ret = CLI_EXIT_USAGE;
	if (!sockopt && !(pool = pool_dir_default(pool)))
		return false;
	char sock[PATH_MAX];
	mgr_sock_path(pool, sockopt, sock, sizeof sock);
	if (mgr_connect(cn, sock) < 0) {
		cli_err("%s: chelld is not running (no daemon at %s: %s)", cmd, sock, strerror(errno));
		*ret = CACHE_EXIT_DOWN;
		return false;
	}
	return true;
}

/* realpath of an operand into out (the manager wants resolved paths). */
static bool resolve(const char *cmd, const char *p, char *out)
{
	if (!realpath(p, out)) {
		cli_err("%s: %s: %s", cmd, p, strerror(errno));
		return false;
	}
	return true;
}

/* The effective mode of dir: the longest rule above it, else the default. */
static uint32_t mode_of(const struct cache_modes_info *mi, const char *dir, const char **from)
{
	uint32_t m = mi->def.mode;
	size_t best = 0;
	*from = NULL;
	for (uint32_t i = 0; i < mi->n; i++) {
		const char *r = mi->items[i].path;
		size_t l = strlen(r);
		if (mi->items[i].kind == CHELLD_RULE_MODE && l > best && strncmp(dir, r, l) == 0 &&
		    (dir[l] == '/' || dir[l] == 0)) {
			best = l;
			m = mi->items[i].mode;
			*from = r;
		}
	}
	return m;
}

int cache_mode(int argc, char **argv)
{
	const char *pool = NULL, *sockopt = NULL;
	bool json = false;
	int ret = CLI_EXIT_USAGE;
	int at = mgr_query_options("cache mode", argc, argv, &pool, &sockopt, &json, cache_mode_usage, &ret);
	if (at < 0)
		return ret;
	if (argc - at > 2) {
		cli_err("cache mode: unexpected argument '%s'", argv[at + 2]);
		cli_usage_hint("cache mode");
		return CLI_EXIT_USAGE;
	}
	int mode = -1;
	if (argc - at == 2) {
		for (int i = 0; i < CHELLD_MODE_COUNT; i++)
			if (strcmp(argv[at + 1], mode_names[i]) == 0)
				mode = i;
		if (mode < 0) {
			cli_err("cache mode: unknown mode '%s' (write-back, write-through, "
				"write-around, read-only or pass-through)", argv[at + 1]);
			return CLI_EXIT_USAGE;
		}
	}
	static struct chelld_set_mode q;
	memset(&q, 0, sizeof q);
	if (argc - at >= 1 && !resolve("cache mode", argv[at], q.path))
		return CLI_EXIT_USAGE;
	struct mgr_conn cn;
	if (!connect_mgr("cache mode", pool, sockopt, &cn, &ret))
		return ret;
	if (mode >= 0) {
		struct chelld_set_mode_reply r;
		q.mode = (uint32_t)mode;
		bool answered;
		int rc = mgr_call(&cn, &q, sizeof q, CHELLD_MSG_SET_MODE, &r, sizeof r, -1, &answered);
		int e = errno;
		mgr_disconnect(&cn);
		r.detail[sizeof r.detail - 1] = 0;
		if (rc < 0 && !answered) {
			cli_err("cache mode: the daemon did not answer: %s", strerror(e));
			return CACHE_EXIT_DOWN;
		}
		if (rc < 0 && e != EIO) {
			cli_err("cache mode: %s: %s%s%s", q.path,
				e == ENOSYS ? "this chelld has no cache modes" : strerror(e),
				r.detail[0] ? ": " : "", r.detail);
			return CLI_EXIT_USAGE;
		}
		if (json)
			printf("{\"dir\": "), cli_json_str(stdout, q.path),
				printf(", \"mode\": \"%s\", \"files\": %u, \"bytes_written\": %" PRIu64
				       ", \"chunks_dropped\": %u, \"ok\": %s}\n",
				       mode_name(q.mode), r.files, r.bytes_written, r.chunks_dropped,
				       rc < 0 ? "false" : "true");
		else
			printf("%s: %s (%u cached file(s) drained: %" PRIu64
			       " bytes written back, %u chunk(s) dropped)\n",
			       q.path, mode_name(q.mode), r.files, r.bytes_written, r.chunks_dropped);
		if (rc < 0) {
			cli_err("cache mode: %s: %s", q.path, r.detail[0] ? r.detail : strerror(e));
			return EXIT_PARTIAL;
		}
		return 0;
	}
	struct cache_modes_info mi;
	int rc = cache_modes_fetch(&cn, &mi);
	mgr_disconnect(&cn);
	if (rc < 0) {
		cli_err("cache mode: this chelld has no cache modes");
		return CLI_EXIT_USAGE;
	}
	if (q.path[0]) {
		const char *from;
		uint32_t m = mode_of(&mi, q.path, &from);
		if (json)
			printf("{\"dir\": "), cli_json_str(stdout, q.path),
				printf(", \"mode\": \"%s\"}\n", mode_name(m));
		else
			printf("%s: %s (%s%s)\n", q.path, mode_name(m), from ? "set for " : "the default",
			       from ? from : "");
	} else if (json) {
		printf("{");
		cache_modes_print(stdout, &mi, true);
		printf("}\n");
	} else {
		cache_modes_print(stdout, &mi, false);
	}
	cache_modes_free(&mi);
	return 0;
}

static int pin_cmd(int argc, char **argv, bool unpin)
{
	const char *cmd = unpin ? "cache unpin" : "cache pin";
	const char *pool = NULL, *sockopt = NULL;
	int ret = CLI_EXIT_USAGE;
	int at = mgr_query_options(cmd, argc, argv, &pool, &sockopt, NULL, cache_pin_usage, &ret);
	if (at < 0)
		return ret;
	if (at == argc) {
		cli_err("%s: a PATH is required", cmd);
		cli_usage_hint(cmd);
		return CLI_EXIT_USAGE;
	}
	struct mgr_conn cn;
	if (!connect_mgr(cmd, pool, sockopt, &cn, &ret))
		return ret;
	static struct chelld_pin q;
	ret = 0;
	for (int i = at; i < argc; i++) {
		memset(&q, 0, sizeof q);
		q.flags = unpin ? CHELLD_PIN_UNPIN : 0;
		if (!resolve(cmd, argv[i], q.path)) {
			ret = CLI_EXIT_USAGE;
			continue;
		}
		struct chelld_pin_reply r;
		bool answered;
		int rc = mgr_call(&cn, &q, sizeof q, CHELLD_MSG_PIN, &r, sizeof r, -1, &answered);
		int e = errno;
		r.detail[sizeof r.detail - 1] = 0;
		if (rc < 0 && !answered) {
			cli_err("%s: the daemon did not answer: %s", cmd, strerror(e));
			close(cn.sock);
			return CACHE_EXIT_DOWN;
		}
		if (rc < 0 && e == ENOSPC) {
			cli_err("%s: %s: %" PRIu64 " bytes would exceed the pinning limit: %s",
				cmd, q.path, r.bytes, r.detail);
			ret = EXIT_PARTIAL;
		} else if (rc < 0) {
			cli_err("%s: %s: %s%s%s", cmd, q.path,
				e == ENOSYS ? "this chelld cannot pin" : strerror(e),
				r.detail[0] ? ": " : "", r.detail);
			if (!ret)
				ret = CLI_EXIT_USAGE;
		} else {
			printf("%s %s (", unpin ? "unpinned" : "pinned", q.path);
			print_size_iec(stdout, r.bytes);
			printf("; ");
			print_size_iec(stdout, r.pinned_bytes);
			printf(" of ");
			print_size_iec(stdout, r.pin_max);
			printf(" pinned)\n");
		}
	}
	mgr_disconnect(&cn);
	return ret;
}

int cache_pin(int argc, char **argv)
{
	return pin_cmd(argc, argv, false);
}

int cache_unpin(int argc, char **argv)
{
	return pin_cmd(argc, argv, true);
}
