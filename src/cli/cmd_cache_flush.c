/* SPDX-License-Identifier: MIT */
/*
 * `chell cache flush [--pool DIR] [--drop] [--quiet] [--json] [FILE...]`:
 * write dirty cached data back to the backing files.
 *
 * Without FILE, one FLUSH of every file (the daemon allows that to root and
 * to its own user). With FILEs, each is opened here and registered with
 * OPEN_FILE: the daemon checks the descriptor like any client's, so a user
 * can flush exactly the files they could open - then FLUSH by its id and
 * CLOSE. Progress (stderr) while the daemon writes; results on stdout.
 * Exit: 0 flushed, 1 not running or a file could not be flushed, 2 usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cli.h"
#include "cmd_cache.h"

enum { OPT_C_POOL = 700, OPT_C_SOCKET, OPT_C_JSON, OPT_C_DROP, OPT_C_QUIET };

/* Progress is drawn only once the command has run a while (a flush of many
 * small files takes long even if each one is quick). */
#define QUIET_FOR_S 0.5

void cache_flush_usage(FILE *f)
{
	fputs("Usage: chell cache flush [--pool DIR] [--drop] [--quiet] [--json] [FILE...]\n"
	      "\n"
	      "Write the dirty cached data of FILEs (default: of every cached file) back\n"
	      "to the backing store and fsync it there. Each FILE is opened by this\n"
	      "command and its descriptor passed to chelld, which checks it as it checks\n"
	      "any client's: you can flush the files you can open. Flushing every file\n"
	      "needs root or chelld's user.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (default: cache.pool)\n"
	      "      --socket PATH   the daemon's socket (default: found from the pool)\n"
	      "      --drop          also evict the files' chunks from the cache (clean\n"
	      "                      data too)\n"
	      "  -q, --quiet         no progress display\n"
	      "      --json          print the result as one JSON object\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Progress (on stderr, after half a second): a bar on a terminal, else a\n"
	      "line per second: files done and dirty data remaining.\n"
	      "\n"
	      "Exit status: 0 flushed, 1 chelld not running or a file could not be\n"
	      "flushed, 2 usage error.\n",
	      f);
}

struct flush_watch {
	struct progress_bar *pg;
	const char *name; /* file being flushed, NULL for all */
	unsigned done, total;
	uint64_t dirty0;  /* dirty bytes before the flush */
	double t0;        /* when the command started */
};

static void on_tick(void *arg, uint64_t dirty, double req_secs)
{
	struct flush_watch *w = arg;
	(void)req_secs; /* the whole command's time is what the user waits for */
	double secs = now_monotonic() - w->t0;
	if (secs < QUIET_FOR_S)
		return;
	char text[PATH_MAX + 128], rem[64] = "";
	if (dirty != UINT64_MAX) {
		FILE *m = fmemopen(rem, sizeof rem, "w");
		if (m) {
			fputs(", ", m);
			print_size_iec(m, dirty);
			fputs(" dirty", m);
			fclose(m);
		}
	}
	if (w->name)
		snprintf(text, sizeof text, "file %u/%u %s%s (%.0f s)", w->done + 1, w->total,
			 w->name, rem, secs);
	else
		snprintf(text, sizeof text, "writing back%s (%.0f s)", rem, secs);
	if (w->name)
		progress_bar_show(w->pg, w->done, w->total, text);
	else
		progress_bar_show(w->pg, dirty == UINT64_MAX || dirty > w->dirty0 ? 0 : w->dirty0 - dirty,
				  w->dirty0, text);
}

struct flush_total {
	uint64_t blocks, bytes, dropped, files;
	unsigned failed;
};

static void add(struct flush_total *t, const struct chelld_flush_reply *r)
{
	t->blocks += r->blocks_written;
	t->bytes += r->bytes_written;
	t->dropped += r->chunks_dropped;
	t->files += r->files;
}

/* Register FILE on the connection: 0 and its file id (a Cnode id: 0 is a
 * valid one), or an errno value after a message (*down: the daemon did not
 * answer). */
static int register_file(struct mgr_conn *cn, const char *file, uint32_t *id, bool *down)
{
	char *real = realpath(file, NULL);
	int e;
	if (!real) {
		e = errno;
		cli_err("cache flush: %s: %s", file, strerror(e));
		return e;
	}
	/* Write access is not needed to write back, but ask for the most the
	 * caller has: it is what a client of the file would have. */
	int fd = open(real, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fd = open(real, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = errno;
		cli_err("cache flush: %s: %s", file, strerror(e));
		free(real);
		return e;
	}
	struct chelld_open q = {0};
	struct chelld_open_reply r;
	if (strlen(real) >= sizeof q.path) {
		cli_err("cache flush: %s: path too long", file);
		close(fd);
		free(real);
		return ENAMETOOLONG;
	}
	strcpy(q.path, real);
	bool answered;
	int rc = mgr_call(cn, &q, sizeof q, CHELLD_MSG_OPEN_FILE, &r, sizeof r, fd, &answered);
	e = errno;
	close(fd); /* the daemon keeps its own copy */
	free(real);
	if (rc < 0) {
		if (answered)
			cli_err("cache flush: %s: refused by chelld: %s%s%.*s", file, chelld_errname(e),
				r.detail[0] ? ": " : "", (int)sizeof r.detail, r.detail);
		else
			cli_err("cache flush: %s: chelld did not answer: %s", file, strerror(e));
		*down = !answered;
		return e ? e : EIO;
	}
	*id = r.file_id;
	return 0;
}

static void json_result(const char *name, const struct chelld_flush_reply *r, int err, bool *first)
{
	printf("%s{\"file\": ", *first ? "" : ", ");
	*first = false;
	if (name)
		cli_json_str(stdout, name);
	else
		printf("null");
	if (err)
		printf(", \"error\": \"%s\"}", chelld_errname(err));
	else
		printf(", \"blocks_written\": %" PRIu64 ", \"bytes_written\": %" PRIu64
		       ", \"chunks_dropped\": %u, \"files\": %u}",
		       r->blocks_written, r->bytes_written, r->chunks_dropped, r->files);
}

int cache_flush(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pool", required_argument, NULL, OPT_C_POOL},
		{"socket", required_argument, NULL, OPT_C_SOCKET},
		{"drop", no_argument, NULL, OPT_C_DROP},
		{"quiet", no_argument, NULL, 'q'},
		{"json", no_argument, NULL, OPT_C_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *pool = NULL, *sockopt = NULL;
	bool json = false, quiet = false;
	uint32_t flags = 0;
	int c;
	optind = 0;
	opterr = 0;
	/* Not '+': options may follow the files. */
	while ((c = getopt_long(argc, argv, ":hq", opts, NULL)) != -1) {
		switch (c) {
		case OPT_C_POOL: pool = optarg; break;
		case OPT_C_SOCKET: sockopt = optarg; break;
		case OPT_C_DROP: flags |= CHELLD_FLUSH_DROP; break;
		case 'q': quiet = true; break;
		case OPT_C_JSON: json = true; break;
		case 'h': cache_flush_usage(stdout); return 0;
		default: return cli_bad_option("cache flush", c, argv, opts);
		}
	}
	if (!sockopt && !(pool = pool_dir_default(pool)))
		return CLI_EXIT_USAGE;
	char sock[PATH_MAX];
	mgr_sock_path(pool, sockopt, sock, sizeof sock);
	struct mgr_conn cn;
	if (mgr_connect(&cn, sock) < 0) {
		cli_err("cache flush: chelld is not running (no daemon at %s: %s)", sock,
			strerror(errno));
		return CACHE_EXIT_DOWN;
	}
	struct chelld_stats_reply st;
	uint64_t dirty0 = mgr_get_stats(&cn, &st) == 0 ? st.dirty_blocks * CACHE_BLOCK_BYTES : 0;

	struct progress_bar pg;
	progress_bar_init(&pg, quiet || json);
	struct flush_total tot = {0};
	unsigned nfiles = (unsigned)(argc - optind);
	struct flush_watch w = {&pg, NULL, 0, nfiles, dirty0, now_monotonic()};
	bool first = true, down = false;
	if (json)
		printf("{\"results\": [");
	if (nfiles == 0) {
		struct chelld_flush q = {.file_id = CHELLD_ALL_FILES, .flags = flags};
		struct chelld_flush_reply r;
		bool answered;
		int rc = mgr_call_watch(&cn, &q, sizeof q, CHELLD_MSG_FLUSH, &r, sizeof r, -1,
					&answered, on_tick, &w);
		int e = errno;
		progress_bar_done(&pg);
		if (rc == 0)
			add(&tot, &r);
		else if (!answered)
			down = true, cli_err("cache flush: chelld did not answer: %s", strerror(e));
		else
			cli_err("cache flush: chelld refused to flush every file: %s%s", chelld_errname(e),
				e == EPERM ? " (only root or chelld's user may; name the FILEs)" : "");
		if (rc < 0)
			tot.failed++;
		if (json && answered)
			json_result(NULL, &r, rc < 0 ? e : 0, &first);
	}
	for (int i = optind; i < argc && !down; i++, w.done++) {
		const char *file = argv[i];
		w.name = file;
		uint32_t id = 0;
		int re = register_file(&cn, file, &id, &down);
		if (re) {
			tot.failed++;
			if (json)
				json_result(file, NULL, re, &first);
			continue;
		}
		struct chelld_flush q = {.file_id = id, .flags = flags};
		struct chelld_flush_reply r;
		bool answered;
		int rc = mgr_call_watch(&cn, &q, sizeof q, CHELLD_MSG_FLUSH, &r, sizeof r, -1,
					&answered, on_tick, &w);
		int e = errno;
		if (rc == 0) {
			add(&tot, &r);
			if (!json) {
				progress_bar_done(&pg);
				printf("flushed %s: ", file);
				print_size_iec(stdout, r.bytes_written);
				printf(" written%s\n", r.chunks_dropped ? ", chunks dropped" : "");
				fflush(stdout);
			}
		} else {
			tot.failed++;
			progress_bar_done(&pg);
			cli_err("cache flush: %s: %s", file,
				answered ? chelld_errname(e) : strerror(e));
			down = !answered;
		}
		if (json)
			json_result(file, &r, rc < 0 ? e : 0, &first);
		struct chelld_close cq = {.file_id = id};
		struct chelld_rhdr cr;
		if (!down)
			mgr_call(&cn, &cq, sizeof cq, CHELLD_MSG_CLOSE, &cr, sizeof cr, -1, NULL);
	}
	progress_bar_done(&pg);
	mgr_disconnect(&cn);
	if (json) {
		printf("], \"files\": %" PRIu64 ", \"blocks_written\": %" PRIu64
		       ", \"bytes_written\": %" PRIu64 ", \"chunks_dropped\": %" PRIu64
		       ", \"failed\": %u}\n",
		       tot.files, tot.blocks, tot.bytes, tot.dropped, tot.failed);
	} else {
		printf("flushed %" PRIu64 " file%s: ", tot.files, tot.files == 1 ? "" : "s");
		print_size_iec(stdout, tot.bytes);
		printf(" written (%" PRIu64 " blocks)", tot.blocks);
		if (flags & CHELLD_FLUSH_DROP)
			printf(", %" PRIu64 " chunks dropped", tot.dropped);
		if (tot.failed)
			printf(", %u failed", tot.failed);
		printf("\n");
	}
	return tot.failed ? 1 : 0;
}
