/* SPDX-License-Identifier: MIT */
/*
 * `chell pvm ...`: the pVM object store (include/chell/pvm.h, docs/PVM.md)
 * from the command line.
 *
 *   stat [--app A] [--json]            capacity, use per application, free space
 *   ls --app A [--json]                objects of an application
 *   cat --app A NAME                   an object's bytes to stdout
 *   put --app A NAME [FILE]            an object from a file (or stdin), replaced atomically
 *   rm --app A NAME...                 delete objects
 *   history --app A NAME [--keep N] [--restore V]
 *   check [--repair] [--json]
 *   import --app A DIR / export --app A DEST   (cmd_pvm_tree.c)
 *
 * Every subcommand takes --pool PATH (default: the pvm.pool setting). put
 * and import create the pool (and the application) when they do not exist.
 * Exit: 0 ok, 1 failure or problems found, 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chell/pvm.h"
#include "cli.h"
#include "cmd_pvm.h"
#include "common/config.h"

void cmd_pvm_usage(FILE *f)
{
	fputs("Usage: chell pvm SUBCOMMAND [--pool PATH] [--app NAME] ...\n"
	      "\n"
	      "pVM, the persistent object store: named objects of applications in a pool\n"
	      "file on the fast tier (tmpfs or DAX), updated in undo-logged transactions.\n"
	      "\n"
	      "  stat      capacity, persistent use per application, free space,\n"
	      "            fragmentation and the largest free extent (--json)\n"
	      "  ls        list an application's objects (--json)\n"
	      "  cat       write an object's bytes to stdout\n"
	      "  put       store a file (or stdin) as an object, replacing it atomically\n"
	      "  rm        delete objects\n"
	      "  history   list the kept versions of an object, set how many are kept\n"
	      "            (--keep N) or restore one (--restore V)\n"
	      "  check     verify every application and the page bitmap (--repair, --json)\n"
	      "  import    store a directory tree as objects named by relative path\n"
	      "  export    write an application's objects back as a tree\n"
	      "\n"
	      "Every subcommand takes --pool PATH (a pool file, or a directory holding\n"
	      "pvm.pool; default: the pvm.pool setting). Run 'chell pvm SUBCOMMAND --help'\n"
	      "for the options of each.\n"
	      "\n"
	      "Exit status: 0 ok, 1 failure or problems found, 2 usage error.\n",
	      f);
}

/* ------------------------------------------------------------ options */

enum { O_POOL = 1, O_APP = 2, O_JSON = 4, O_REPAIR = 8, O_KEEP = 16, O_RESTORE = 32, O_QUIET = 64, O_MAX = 128 };

struct sub {
	const char *name;
	int (*run)(struct pvm_opts *o, int argc, char **argv);
	unsigned allowed, need_app;
	int min_args, max_args; /* positional */
	const char *usage;
};

static int run_stat(struct pvm_opts *o, int argc, char **argv);
static int run_ls(struct pvm_opts *o, int argc, char **argv);
static int run_cat(struct pvm_opts *o, int argc, char **argv);
static int run_put(struct pvm_opts *o, int argc, char **argv);
static int run_rm(struct pvm_opts *o, int argc, char **argv);
static int run_history(struct pvm_opts *o, int argc, char **argv);
static int run_check(struct pvm_opts *o, int argc, char **argv);

static const struct sub subs[] = {
	{"stat", run_stat, O_POOL | O_APP | O_JSON, 0, 0, 0,
	 "Usage: chell pvm stat [--pool PATH] [--app NAME] [--json]\n\n"
	 "Capacity (the size the pool may grow to), its current size, the bytes each\n"
	 "application holds (objects, tables, kept versions), free space, the number\n"
	 "of free extents (fragmentation) and the largest one.\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --app NAME   list only this application (exit 1 if it is not there)\n"
	 "      --json       machine-readable output\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 ok, 1 the pool (or the application) cannot be found, 2 usage\n"
	 "error.\n"},
	{"ls", run_ls, O_POOL | O_APP | O_JSON, 1, 0, 0,
	 "Usage: chell pvm ls [--pool PATH] --app NAME [--json]\n\n"
	 "List an application's objects: size, version, versions kept, flags, name.\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --app NAME   the application\n"
	 "      --json       machine-readable output\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 ok, 1 no such pool or application, 2 usage error.\n"},
	{"cat", run_cat, O_POOL | O_APP, 1, 1, 1,
	 "Usage: chell pvm cat [--pool PATH] --app NAME OBJECT\n\n"
	 "Write the object's bytes to standard output.\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --app NAME   the application\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 ok, 1 no such object (or a write error), 2 usage error.\n"},
	{"put", run_put, O_POOL | O_APP | O_MAX, 1, 1, 2,
	 "Usage: chell pvm put [--pool PATH] --app NAME [--max-size SIZE] OBJECT [FILE]\n\n"
	 "Store FILE (default: standard input) as OBJECT, replacing an existing one\n"
	 "in one transaction. Creates the pool and the application if needed.\n\n"
	 "Options:\n"
	 "      --pool PATH      the pool (default: the pvm.pool setting)\n"
	 "      --app NAME       the application\n"
	 "      --max-size SIZE  the size a new pool may grow to (default 1G)\n"
	 "  -h, --help           show this help\n\n"
	 "Exit status: 0 stored, 1 failed, 2 usage error.\n"},
	{"rm", run_rm, O_POOL | O_APP, 1, 1, 1 << 20,
	 "Usage: chell pvm rm [--pool PATH] --app NAME OBJECT...\n\n"
	 "Delete objects and their kept versions.\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --app NAME   the application\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 all deleted, 1 one could not be, 2 usage error.\n"},
	{"history", run_history, O_POOL | O_APP | O_KEEP | O_RESTORE | O_JSON, 1, 1, 1,
	 "Usage: chell pvm history [--pool PATH] --app NAME [--keep N] [--restore V] [--json] OBJECT\n\n"
	 "List the kept versions of an object (newest first), or with --keep N keep\n"
	 "the last N committed versions from now on (0 drops them), or with\n"
	 "--restore V make version V the current content.\n\n"
	 "Options:\n"
	 "      --pool PATH    the pool (default: the pvm.pool setting)\n"
	 "      --app NAME     the application\n"
	 "      --keep N       versions to keep (0..127)\n"
	 "      --restore V    restore version V\n"
	 "      --json         machine-readable output\n"
	 "  -h, --help         show this help\n\n"
	 "Exit status: 0 ok, 1 no such object or version, 2 usage error.\n"},
	{"check", run_check, O_POOL | O_REPAIR | O_JSON, 0, 0, 0,
	 "Usage: chell pvm check [--pool PATH] [--repair] [--json]\n\n"
	 "Verify the pool: every application's entry and object table, and the page\n"
	 "bitmap against what the applications reach. Opening the pool as its only\n"
	 "user already rolls back unfinished transactions and frees unreachable\n"
	 "pages when every application is valid; --repair also does it when other\n"
	 "processes are gone but left pages behind (refused while others use it).\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --repair     fix the page bitmap\n"
	 "      --json       machine-readable output: {\"pool\", \"ok\", \"problems\", \"report\"}\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 clean (after --repair: repaired), 1 problems found, 2 usage\n"
	 "error.\n"},
	{"import", pvm_import, O_POOL | O_APP | O_QUIET | O_MAX, 1, 1, 1,
	 "Usage: chell pvm import [--pool PATH] --app NAME [--max-size SIZE] [-q] DIR\n\n"
	 "Store every regular file under DIR as an object named by its path relative\n"
	 "to DIR (one transaction per file, replacing objects of the same name).\n"
	 "Creates the pool and the application if needed. Symbolic links and special\n"
	 "files are skipped (and reported); empty directories are not represented.\n"
	 "A progress bar is shown on standard error.\n\n"
	 "Options:\n"
	 "      --pool PATH      the pool (default: the pvm.pool setting)\n"
	 "      --app NAME       the application\n"
	 "      --max-size SIZE  the size a new pool may grow to (default 1G)\n"
	 "  -q, --quiet          no progress display\n"
	 "  -h, --help           show this help\n\n"
	 "Exit status: 0 every file stored, 1 a file could not be, 2 usage error.\n"},
	{"export", pvm_export, O_POOL | O_APP | O_QUIET, 1, 1, 1,
	 "Usage: chell pvm export [--pool PATH] --app NAME [-q] DEST\n\n"
	 "Write every object of the application as a file under DEST (created if\n"
	 "needed), at its name as a relative path: the tree import read, byte for\n"
	 "byte. Names that would leave DEST (absolute, or with a '..' component)\n"
	 "are refused.\n\n"
	 "Options:\n"
	 "      --pool PATH  the pool (default: the pvm.pool setting)\n"
	 "      --app NAME   the application\n"
	 "  -q, --quiet      no progress display\n"
	 "  -h, --help       show this help\n\n"
	 "Exit status: 0 every object written, 1 one could not be, 2 usage error.\n"},
};

const char *pvm_default_pool(void)
{
	static char pool[4096];
	return cli_setting_str("pvm.pool", pool, sizeof pool);
}

int pvm_open_pool(struct pvm_opts *o, int create)
{
	char err[1024];
	int rc = pvm_pool_open(o->pool, &o->p, err, sizeof err);
	if (rc == -ENOENT && create) {
		struct pvm_pool_opts po = {.max_size = o->max_size};
		rc = pvm_pool_create(o->pool, &po, &o->p, err, sizeof err);
	}
	if (rc) {
		cli_err("pvm: %s", err[0] ? err : strerror(-rc));
		return 1;
	}
	return 0;
}

int pvm_open_app(struct pvm_opts *o, int create)
{
	char err[1024];
	int rc = pvm_app_open(o->p, o->app, NULL, create ? PVM_APP_CREATE : 0, &o->a, err, sizeof err);
	if (rc) {
		cli_err("pvm: %s", err[0] ? err : strerror(-rc));
		return 1;
	}
	return 0;
}

static void close_all(struct pvm_opts *o)
{
	pvm_app_close(o->a);
	pvm_pool_close(o->p);
	o->a = NULL;
	o->p = NULL;
}

int cmd_pvm(int argc, char **argv)
{
	if (argc < 2) {
		cmd_pvm_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		cmd_pvm_usage(stdout);
		return 0;
	}
	const struct sub *s = NULL;
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++)
		if (!strcmp(subs[i].name, argv[1]))
			s = &subs[i];
	if (!s) {
		cli_err("pvm: unknown subcommand '%s'", argv[1]);
		cli_usage_hint("pvm");
		return CLI_EXIT_USAGE;
	}
	char cmdname[32];
	snprintf(cmdname, sizeof cmdname, "pvm %s", s->name);
	static const struct option lo[] = {
		{"pool", required_argument, NULL, 'p'}, {"app", required_argument, NULL, 'a'},
		{"json", no_argument, NULL, 'j'},       {"repair", no_argument, NULL, 'r'},
		{"keep", required_argument, NULL, 'k'}, {"restore", required_argument, NULL, 'R'},
		{"quiet", no_argument, NULL, 'q'},      {"max-size", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},       {NULL, 0, NULL, 0}};
	struct pvm_opts o = {.keep = -1, .max_size = 1ull << 30};
	unsigned used = 0;
	int c;
	argc--, argv++;
	optind = 0; /* full reinitialisation: main already ran getopt */
	while ((c = getopt_long(argc, argv, ":qh", lo, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'p': o.pool = optarg; used |= O_POOL; break;
		case 'a': o.app = optarg; used |= O_APP; break;
		case 'j': o.json = true; used |= O_JSON; break;
		case 'r': o.repair = true; used |= O_REPAIR; break;
		case 'q': o.quiet = true; used |= O_QUIET; break;
		case 'k':
			o.keep = (int)strtol(optarg, &end, 10);
			if (*end || o.keep < 0 || o.keep > PVM_HISTORY_MAX) {
				cli_err("%s: --keep needs a number 0..%d", cmdname, PVM_HISTORY_MAX);
				return CLI_EXIT_USAGE;
			}
			used |= O_KEEP;
			break;
		case 'R':
			o.restore = strtoull(optarg, &end, 10);
			if (*end || !o.restore) {
				cli_err("%s: --restore needs a version number", cmdname);
				return CLI_EXIT_USAGE;
			}
			used |= O_RESTORE;
			break;
		case 'm':
			if (chell_parse_size(optarg, &o.max_size) || !o.max_size) {
				cli_err("%s: --max-size needs a size (suffixes K, M, G)", cmdname);
				return CLI_EXIT_USAGE;
			}
			used |= O_MAX;
			break;
		case 'h': fputs(s->usage, stdout); return 0;
		default: return cli_bad_option(cmdname, c, argv, lo);
		}
	}
	if (used & ~s->allowed) {
		cli_err("%s: an option given does not apply to this subcommand", cmdname);
		cli_usage_hint(cmdname);
		return CLI_EXIT_USAGE;
	}
	int npos = argc - optind;
	if (npos < s->min_args || npos > s->max_args) {
		cli_err("%s: %s", cmdname, npos < s->min_args ? "missing argument" : "too many arguments");
		cli_usage_hint(cmdname);
		return CLI_EXIT_USAGE;
	}
	if (s->need_app && !o.app) {
		cli_err("%s: --app NAME is required", cmdname);
		cli_usage_hint(cmdname);
		return CLI_EXIT_USAGE;
	}
	if (!o.pool && !(o.pool = pvm_default_pool()))
		return CLI_EXIT_USAGE;
	int rc = s->run(&o, npos, argv + optind);
	close_all(&o);
	return rc;
}

/* ------------------------------------------------------------ subcommands */

static void print_size(uint64_t b)
{
	static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		printf("%" PRIu64 " B", b);
	else
		printf("%.1f %s", v, u[i]);
}

static int run_stat(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc, (void)argv;
	if (pvm_open_pool(o, 0))
		return 1;
	struct pvm_pool_stat st;
	int rc = pvm_pool_stat(o->p, &st);
	if (rc) {
		cli_err("pvm stat: %s", strerror(-rc));
		return 1;
	}
	/* Fragmentation: the share of free space outside the largest extent. */
	double frag = st.free ? 1.0 - (double)st.largest_free / (double)st.free : 0;
	struct pvm_app_info ai;
	uint32_t cur = 0;
	if (o->app) {
		int found = 0;
		while (!found && pvm_app_next(o->p, &cur, &ai) == 1)
			found = !strncmp(ai.name, o->app, sizeof ai.name);
		if (!found) {
			cli_err("pvm stat: no application \"%s\" in %s", o->app, o->pool);
			return 1;
		}
		cur = 0;
	}
	if (o->json) {
		printf("{\"pool\": ");
		cli_json_str(stdout, o->pool);
		printf(", \"capacity\": %" PRIu64 ", \"size\": %" PRIu64 ", \"used\": %" PRIu64 ", \"free\": %" PRIu64
		       ", \"largest_free_extent\": %" PRIu64 ", \"free_extents\": %" PRIu64
		       ", \"fragmentation\": %.4f, \"journals\": %u, \"dax\": %s, \"applications\": [",
		       st.capacity, st.size, st.used, st.free, st.largest_free, st.free_extents, frag, st.journals,
		       st.dax ? "true" : "false");
		int first = 1;
		while (pvm_app_next(o->p, &cur, &ai) == 1) {
			if (o->app && strncmp(ai.name, o->app, sizeof ai.name))
				continue;
			printf("%s{\"name\": ", first ? "" : ", ");
			cli_json_str(stdout, ai.name);
			printf(", \"objects\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"persistent\": %" PRIu64
			       ", \"damaged\": %s}",
			       ai.objects, ai.bytes, ai.pages_bytes, ai.damaged ? "true" : "false");
			first = 0;
		}
		printf("]}\n");
		return 0;
	}
	printf("Pool:              %s%s\n", o->pool, st.dax ? " (DAX)" : "");
	printf("Capacity:          ");
	print_size(st.capacity);
	printf("\nSize:              ");
	print_size(st.size);
	printf("\nUsed:              ");
	print_size(st.used);
	printf("\nFree:              ");
	print_size(st.free);
	printf("\nLargest free:      ");
	print_size(st.largest_free);
	printf("\nFree extents:      %" PRIu64 "\nFragmentation:     %.1f%%\n", st.free_extents, frag * 100);
	printf("Applications:      %u of %u\n", st.apps, st.max_apps);
	while (pvm_app_next(o->p, &cur, &ai) == 1) {
		if (o->app && strncmp(ai.name, o->app, sizeof ai.name))
			continue;
		printf("  %-24s ", ai.name);
		if (ai.damaged) {
			printf("DAMAGED (run chell pvm check)\n");
			continue;
		}
		printf("%8" PRIu64 " objects  ", ai.objects);
		print_size(ai.bytes);
		printf(" data, ");
		print_size(ai.pages_bytes);
		printf(" persistent\n");
	}
	return 0;
}

static int run_ls(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc, (void)argv;
	if (pvm_open_pool(o, 0) || pvm_open_app(o, 0))
		return 1;
	struct pvm_info info;
	uint64_t cur = 0;
	int first = 1;
	if (o->json)
		printf("[");
	while (pvm_iter(o->a, &cur, &info) == 1) {
		if (o->json) {
			printf("%s{\"name\": ", first ? "" : ", ");
			cli_json_str(stdout, info.name);
			printf(", \"size\": %" PRIu64 ", \"version\": %" PRIu64 ", \"history\": %u, \"protected\": %s}",
			       info.size, info.version, info.history, info.flags & PVM_F_PROTECTED ? "true" : "false");
		} else {
			printf("%12" PRIu64 "  v%-6" PRIu64 " %3u %s  %s\n", info.size, info.version, info.history,
			       info.flags & PVM_F_PROTECTED ? "ro" : "rw", info.name);
		}
		first = 0;
	}
	if (o->json)
		printf("]\n");
	return 0;
}

static int run_cat(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc;
	if (pvm_open_pool(o, 0) || pvm_open_app(o, 0))
		return 1;
	void *ptr;
	struct pvm_info info;
	int rc = pvm_open(o->a, argv[0], &ptr, &info);
	if (rc) {
		cli_err("pvm cat: %s: %s", argv[0], strerror(-rc));
		return 1;
	}
	fflush(stdout);
	const char *b = ptr;
	for (uint64_t done = 0; done < info.size;) {
		ssize_t n = write(STDOUT_FILENO, b + done, info.size - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			cli_err("pvm cat: writing: %s", strerror(errno));
			return 1;
		}
		done += (uint64_t)n;
	}
	return 0;
}

int pvm_store_fd(struct pvm_app *a, const char *name, int fd, uint64_t size_hint, char *err, size_t errlen)
{
	/* Read everything first when the size is unknown (a pipe). */
	char *buf = NULL;
	size_t len = 0;
	if (size_hint == UINT64_MAX) {
		size_t cap = 1 << 16;
		buf = malloc(cap);
		for (;;) {
			if (!buf) {
				snprintf(err, errlen, "out of memory");
				return -ENOMEM;
			}
			ssize_t n = read(fd, buf + len, cap - len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				snprintf(err, errlen, "reading: %s", strerror(errno));
				free(buf);
				return -errno;
			}
			if (n == 0)
				break;
			len += (size_t)n;
			if (len == cap) {
				char *nb = realloc(buf, cap *= 2);
				if (!nb)
					free(buf);
				buf = nb;
			}
		}
		size_hint = len;
	}
	/* One transaction: the old object goes, the new one (new pages, no
	 * undo needed) is filled and made durable by the commit. An object
	 * that keeps versions is changed in place instead. */
	void *ptr = NULL;
	int rc = pvm_tx_begin(a);
	if (rc) {
		free(buf);
		snprintf(err, errlen, "%s", strerror(-rc));
		return rc;
	}
	struct pvm_info info;
	if (pvm_open(a, name, NULL, &info) == 0 && info.history) {
		/* It keeps versions: change it in place, so the old content
		 * becomes a kept version (the undo image must fit the journal). */
		rc = pvm_resize(a, name, size_hint, &ptr);
		if (!rc)
			rc = pvm_tx_add(a, name, 0, size_hint);
	} else {
		if (pvm_open(a, name, NULL, NULL) == 0)
			rc = pvm_delete(a, name);
		if (!rc)
			rc = pvm_create(a, name, size_hint, &ptr);
	}
	if (!rc && buf) {
		memcpy(ptr, buf, size_hint);
	} else if (!rc) {
		for (uint64_t done = 0; done < size_hint;) {
			ssize_t n = pread(fd, (char *)ptr + done, size_hint - done, (off_t)done);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				rc = n < 0 ? -errno : -EIO; /* the file shrank */
				break;
			}
			done += (uint64_t)n;
		}
	}
	int c = 0;
	if (rc)
		pvm_tx_abort(a);
	else
		c = pvm_tx_commit(a);
	free(buf);
	if (rc || c)
		snprintf(err, errlen, "%s", strerror(-(rc ? rc : c)));
	return rc ? rc : c;
}

static int run_put(struct pvm_opts *o, int argc, char **argv)
{
	int fd = STDIN_FILENO;
	uint64_t size = UINT64_MAX;
	if (argc > 1) {
		fd = open(argv[1], O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			cli_err("pvm put: %s: %s", argv[1], strerror(errno));
			return 1;
		}
		if (S_ISREG(st.st_mode))
			size = (uint64_t)st.st_size;
	}
	if (pvm_open_pool(o, 1) || pvm_open_app(o, 1))
		return 1;
	char err[256];
	int rc = pvm_store_fd(o->a, argv[0], fd, size, err, sizeof err);
	if (fd != STDIN_FILENO)
		close(fd);
	if (rc) {
		cli_err("pvm put: %s: %s", argv[0], err);
		return 1;
	}
	return 0;
}

static int run_rm(struct pvm_opts *o, int argc, char **argv)
{
	if (pvm_open_pool(o, 0) || pvm_open_app(o, 0))
		return 1;
	int bad = 0;
	for (int i = 0; i < argc; i++) {
		int rc = pvm_delete(o->a, argv[i]);
		if (rc) {
			cli_err("pvm rm: %s: %s", argv[i], strerror(-rc));
			bad = 1;
		}
	}
	return bad;
}

static int run_history(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc;
	if (pvm_open_pool(o, 0) || pvm_open_app(o, 0))
		return 1;
	int rc = 0;
	if (o->keep >= 0)
		rc = pvm_set_history(o->a, argv[0], (unsigned)o->keep);
	if (!rc && o->restore)
		rc = pvm_restore(o->a, argv[0], o->restore);
	if (rc) {
		cli_err("pvm history: %s: %s", argv[0],
			rc == -ENOENT && o->restore ? "no such object or version not kept" : strerror(-rc));
		return 1;
	}
	struct pvm_version v[PVM_HISTORY_MAX];
	struct pvm_info info;
	rc = pvm_open(o->a, argv[0], NULL, &info);
	int n = rc ? rc : pvm_history(o->a, argv[0], v, PVM_HISTORY_MAX);
	if (n < 0) {
		cli_err("pvm history: %s: %s", argv[0], strerror(-n));
		return 1;
	}
	if (o->json) {
		printf("{\"name\": ");
		cli_json_str(stdout, argv[0]);
		printf(", \"version\": %" PRIu64 ", \"size\": %" PRIu64 ", \"keep\": %u, \"kept\": [", info.version,
		       info.size, info.history);
		for (int i = 0; i < n; i++)
			printf("%s{\"version\": %" PRIu64 ", \"size\": %" PRIu64 "}", i ? ", " : "", v[i].version, v[i].size);
		printf("]}\n");
		return 0;
	}
	printf("current  v%" PRIu64 "  %" PRIu64 " bytes  (keeps %u)\n", info.version, info.size, info.history);
	for (int i = 0; i < n; i++)
		printf("kept     v%" PRIu64 "  %" PRIu64 " bytes\n", v[i].version, v[i].size);
	return 0;
}

static int run_check(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc, (void)argv;
	char err[1024];
	int rc = pvm_pool_open(o->pool, &o->p, err, sizeof err);
	if (rc) {
		if (o->json) {
			printf("{\"pool\": ");
			cli_json_str(stdout, o->pool);
			printf(", \"ok\": false, \"problems\": 1, \"report\": ");
			cli_json_str(stdout, err);
			printf("}\n");
		} else {
			cli_err("pvm check: %s", err);
		}
		return rc == -ENOENT ? CLI_EXIT_USAGE : 1;
	}
	static char rep[65536];
	int n = pvm_pool_check(o->p, 0, rep, sizeof rep);
	int fixed = 0;
	if (n > 0 && o->repair) {
		static char rep2[65536];
		int m = pvm_pool_check(o->p, 1, rep2, sizeof rep2);
		if (m == -EBUSY) {
			cli_err("pvm check: --repair refused: other processes have the pool open");
			return 1;
		}
		fixed = m >= 0;
		int after = pvm_pool_check(o->p, 0, rep2, sizeof rep2);
		if (after == 0)
			fixed = 1;
		else
			fixed = 0;
	}
	if (n < 0) {
		cli_err("pvm check: %s", strerror(-n));
		return 1;
	}
	if (o->json) {
		printf("{\"pool\": ");
		cli_json_str(stdout, o->pool);
		printf(", \"ok\": %s, \"problems\": %d, \"report\": ", n == 0 || fixed ? "true" : "false", n);
		cli_json_str(stdout, rep);
		if (o->repair)
			printf(", \"repaired\": %s", fixed ? "true" : "false");
		printf("}\n");
	} else {
		if (n == 0)
			printf("%s: clean\n", o->pool);
		else
			printf("%s: %d problem%s\n%s%s", o->pool, n, n == 1 ? "" : "s", rep,
			       o->repair ? (fixed ? "repaired\n" : "not repaired (damaged applications are left alone)\n")
					 : "");
	}
	return n == 0 || fixed ? 0 : 1;
}
