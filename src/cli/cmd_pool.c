/* SPDX-License-Identifier: MIT */
/*
 * `chell pool create|check|info`: persistent regions (include/chell/pmem.h)
 * from the command line.
 *
 *   create PATH [--journals N] [--entries N] [--size SIZE]
 *   check  [--json] [--repair] PATH
 *   info   [--json] PATH
 *
 * `check` never modifies the file (chell_region_check only reads). `--repair`
 * runs recovery, which chell_region_open does, and open refuses anything
 * whose superblock, journal headers or layout do not validate: recovery
 * writes through offsets those structures give, so it only runs when they
 * can be trusted ("safe"), and we pass open's sentence on as the reason.
 *
 * Exit: 0 ok, 1 problems found or the operation failed, 2 usage error or the
 * file cannot be read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chell/pmem.h"
#include "cli.h"
#include "common/config.h" /* chell_parse_size: the one size parser */
/* info decodes the layout with the persistence core's own validator: the
 * public header has no read-only layout query yet (asked for), and a second
 * decoder of the superblock here could drift from the real one. */
#include "pmem/pmem_internal.h"

#define POOL_ERRLEN 512

/* Defaults of `create`: room for a few clients and a 1 MiB heap. */
#define DEF_JOURNALS 4u
#define DEF_ENTRIES 1024u
#define DEF_HEAP (1u << 20)

enum { OPT_JOURNALS = 512, OPT_ENTRIES, OPT_SIZE, OPT_REPAIR };

void cmd_pool_usage(FILE *f)
{
	fputs("Usage: chell pool create PATH [--journals N] [--entries N] [--size SIZE]\n"
	      "       chell pool check [--json] [--repair] PATH\n"
	      "       chell pool info [--json] PATH\n"
	      "\n"
	      "Persistent regions: a file (normally on a DAX or tmpfs mount) holding a\n"
	      "superblock, journals for undo-logged transactions, and a data heap.\n"
	      "\n"
	      "  create   make a new region file (refuses to overwrite an existing file)\n"
	      "  check    verify the superblock, journals and layout without changing\n"
	      "           the file; --repair runs recovery when that is safe\n"
	      "  info     print the layout and UUID\n"
	      "\n"
	      "Run 'chell pool SUBCOMMAND --help' for the options of each.\n"
	      "\n"
	      "Exit status: 0 ok, 1 problems found or the operation failed, 2 usage\n"
	      "error or unreadable file.\n",
	      f);
}

static void create_usage(FILE *f)
{
	fprintf(f,
		"Usage: chell pool create PATH [--journals N] [--entries N] [--size SIZE]\n"
		"\n"
		"Create a new region file at PATH (it must not exist yet).\n"
		"\n"
		"Options:\n"
		"      --journals N   client journals, one per concurrent writer (default %u)\n"
		"      --entries N    64-byte entries per journal (default %u)\n"
		"      --size SIZE    bytes of data heap; suffixes K, M, G (powers of 1024)\n"
		"                     (default 1M)\n"
		"  -h, --help         show this help\n"
		"\n"
		"Exit status: 0 created, 1 failed, 2 usage error.\n",
		DEF_JOURNALS, DEF_ENTRIES);
}

static void check_usage(FILE *f)
{
	fputs("Usage: chell pool check [--json] [--repair] PATH\n"
	      "\n"
	      "Verify a region without modifying it: magic, version, superblock and\n"
	      "journal-header checksums, the layout against the file size, and the\n"
	      "journal contents. Transactions that did not finish are counted: the next\n"
	      "open rolls them back.\n"
	      "\n"
	      "Options:\n"
	      "      --json     machine-readable output: {\"path\", \"ok\", \"problems\",\n"
	      "                 \"unfinished_transactions\"} (and \"repair\" with --repair)\n"
	      "      --repair   run recovery (roll back unfinished transactions). Only\n"
	      "                 done when the superblock, journal headers and layout are\n"
	      "                 valid; otherwise refused, with the reason\n"
	      "  -h, --help     show this help\n"
	      "\n"
	      "Exit status: 0 ok (after --repair: ok once repaired), 1 problems found or\n"
	      "repair refused, 2 usage error or unreadable file.\n",
	      f);
}

static void info_usage(FILE *f)
{
	fputs("Usage: chell pool info [--json] PATH\n"
	      "\n"
	      "Print the UUID and layout of a region (journals, entries per journal, heap\n"
	      "size). The file is only read.\n"
	      "\n"
	      "Options:\n"
	      "      --json     machine-readable output\n"
	      "  -h, --help     show this help\n"
	      "\n"
	      "Exit status: 0 ok, 1 not a valid region, 2 usage error or unreadable file.\n",
	      f);
}

static int parse_u32(const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	if (*s == '-' || *s == '\0')
		return -1;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v == 0 || v > UINT32_MAX)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* The single PATH operand of a subcommand; prints the usage error itself. */
static const char *one_path(const char *sub, int argc, char **argv)
{
	if (optind >= argc) {
		cli_err("pool %s: no region file given", sub);
		cli_usage_hint("pool");
		return NULL;
	}
	if (optind + 1 < argc) {
		cli_err("pool %s: unexpected argument '%s'", sub, argv[optind + 1]);
		cli_usage_hint("pool");
		return NULL;
	}
	return argv[optind];
}

/* ------------------------------------------------------------ create */

static int pool_create(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"journals", required_argument, NULL, OPT_JOURNALS},
		{"entries", required_argument, NULL, OPT_ENTRIES},
		{"size", required_argument, NULL, OPT_SIZE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct chell_region_layout lay = {DEF_JOURNALS, DEF_ENTRIES, DEF_HEAP};
	int c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JOURNALS:
			if (parse_u32(optarg, &lay.journals) < 0) {
				cli_err("pool create: --journals needs a positive number, not '%s'", optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		case OPT_ENTRIES:
			if (parse_u32(optarg, &lay.journal_entries) < 0) {
				cli_err("pool create: --entries needs a positive number, not '%s'", optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		case OPT_SIZE:
			if (chell_parse_size(optarg, &lay.heap_size) < 0 || lay.heap_size == 0) {
				cli_err("pool create: --size needs a size such as 65536, 64K or 1M, not '%s'",
					optarg);
				return CLI_EXIT_USAGE;
			}
			break;
		case 'h': create_usage(stdout); return 0;
		default: return cli_bad_option("pool create", c, argv, longopts);
		}
	}
	const char *path = one_path("create", argc, argv);
	if (!path)
		return CLI_EXIT_USAGE;

	/* O_EXCL: creating a region over an existing file would destroy it. */
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		cli_err("pool create: cannot create '%s': %s%s", path, strerror(errno),
			errno == EEXIST ? " (remove it first; an existing file is never overwritten)" : "");
		return 1;
	}
	close(fd);

	char err[POOL_ERRLEN] = "";
	struct chell_region *r = NULL;
	int rc = chell_region_create(path, &lay, &r, err, sizeof err);
	if (rc < 0) {
		cli_err("pool create: '%s': %s", path, err[0] ? err : strerror(-rc));
		unlink(path);
		return 1;
	}
	uint64_t heap = 0;
	chell_region_heap(r, &heap);
	chell_region_close(r);
	struct stat st;
	long long fsize = stat(path, &st) == 0 ? (long long)st.st_size : -1;
	printf("created %s: %" PRIu32 " journals x %" PRIu32 " entries, heap %" PRIu64
	       " bytes, file %lld bytes\n",
	       path, lay.journals, lay.journal_entries, heap, fsize);
	return 0;
}

/* ------------------------------------------------------------ check */

/* Each line of rep->text as a JSON string array element. */
static void json_lines(FILE *f, const char *text)
{
	int first = 1;
	const char *p = text;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n) {
			char *line = strndup(p, n);
			if (line) {
				fputs(first ? "" : ", ", f);
				cli_json_str(f, line);
				first = 0;
				free(line);
			}
		}
		p += n + (nl ? 1 : 0);
	}
}

static void text_lines(FILE *f, const char *text)
{
	const char *p = text;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) : strlen(p);
		if (n)
			fprintf(f, "  - %.*s\n", (int)n, p);
		p += n + (nl ? 1 : 0);
	}
}

/* Has check found nothing and could read the file at all? */
static int check_file(const char *path, struct chell_region_report *rep)
{
	memset(rep, 0, sizeof *rep);
	return chell_region_check(path, rep);
}

static void print_report(const char *path, const struct chell_region_report *rep)
{
	if (rep->ok) {
		printf("%s: ok", path);
	} else {
		printf("%s: %d problem%s found\n", path, rep->problems, rep->problems == 1 ? "" : "s");
		text_lines(stdout, rep->text);
	}
	if (rep->unfinished_tx)
		printf("%s%d unfinished transaction%s (rolled back by the next open, or by"
		       " 'chell pool check --repair')\n",
		       rep->ok ? ", " : "", rep->unfinished_tx, rep->unfinished_tx == 1 ? "" : "s");
	else if (rep->ok)
		printf(", no unfinished transactions\n");
}

static int pool_check(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"repair", no_argument, NULL, OPT_REPAIR},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, repair = 0, c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: json = 1; break;
		case OPT_REPAIR: repair = 1; break;
		case 'h': check_usage(stdout); return 0;
		default: return cli_bad_option("pool check", c, argv, longopts);
		}
	}
	const char *path = one_path("check", argc, argv);
	if (!path)
		return CLI_EXIT_USAGE;

	static struct chell_region_report rep, after;
	int rc = check_file(path, &rep);
	/* A negative return with no problem written is "could not read it"
	 * (missing file, permissions): not a verdict on the region. */
	if (rc < 0 && rep.problems == 0 && !rep.text[0]) {
		cli_err("pool check: cannot read '%s': %s", path, strerror(-rc));
		return CLI_EXIT_USAGE;
	}
	if (rc < 0 && rep.problems == 0)
		rep.problems = 1; /* the text says what; count it */
	if (rc < 0)
		rep.ok = 0;

	/* --repair: open runs recovery, and refuses unless the structures it
	 * writes through validate. */
	enum { R_NONE, R_NOT_NEEDED, R_REPAIRED, R_REFUSED, R_FAILED } state = R_NONE;
	static const char *const state_name[] = {"", "not needed", "repaired", "refused", "failed"};
	char err[POOL_ERRLEN] = "";
	int rolled_back = 0;
	if (repair) {
		if (rep.ok && rep.unfinished_tx == 0) {
			state = R_NOT_NEEDED;
		} else {
			struct chell_region *r = NULL;
			int orc = chell_region_open(path, &r, err, sizeof err);
			if (orc < 0) {
				state = R_REFUSED;
				if (!err[0])
					snprintf(err, sizeof err, "%s", strerror(-orc));
			} else {
				chell_region_close(r);
				rolled_back = rep.unfinished_tx;
				/* Judge the result by checking again, not by trust. */
				int arc = check_file(path, &after);
				state = (arc == 0 && after.ok && after.unfinished_tx == 0) ? R_REPAIRED
											   : R_FAILED;
			}
		}
	}

	int status = rep.ok ? 0 : 1;
	if (state == R_REPAIRED)
		status = 0;
	else if (state == R_REFUSED || state == R_FAILED)
		status = 1;

	if (json) {
		printf("{\"path\": ");
		cli_json_str(stdout, path);
		printf(", \"ok\": %s, \"problems\": [", rep.ok ? "true" : "false");
		json_lines(stdout, rep.text);
		printf("], \"unfinished_transactions\": %d", rep.unfinished_tx);
		if (state != R_NONE) {
			printf(", \"repair\": {\"result\": ");
			cli_json_str(stdout, state_name[state]);
			printf(", \"rolled_back\": %d", rolled_back);
			if (err[0]) {
				printf(", \"reason\": ");
				cli_json_str(stdout, err);
			}
			if (state == R_FAILED) {
				printf(", \"problems_after\": [");
				json_lines(stdout, after.text);
				printf("]");
			}
			printf("}");
		}
		printf("}\n");
		return status;
	}

	print_report(path, &rep);
	if (state == R_REPAIRED) {
		printf("%s: repaired: recovery rolled back %d unfinished transaction%s; the region"
		       " now checks ok\n",
		       path, rolled_back, rolled_back == 1 ? "" : "s");
	} else if (state == R_REFUSED) {
		cli_err("pool check: refusing to repair '%s': %s", path, err);
		cli_err("pool check: recovery only runs when the superblock, journal headers and"
			" layout are valid (it writes where they point); the file was not changed");
	} else if (state == R_FAILED) {
		cli_err("pool check: '%s' was recovered but still has problems:", path);
		text_lines(stderr, after.text);
	}
	return status;
}

/* ------------------------------------------------------------ info */

static int pool_info(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, OPT_JSON},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON: json = 1; break;
		case 'h': info_usage(stdout); return 0;
		default: return cli_bad_option("pool info", c, argv, longopts);
		}
	}
	const char *path = one_path("info", argc, argv);
	if (!path)
		return CLI_EXIT_USAGE;

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		cli_err("pool info: cannot read '%s': %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return CLI_EXIT_USAGE;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		cli_err("pool info: '%s' is not a region: %s", path,
			S_ISREG(st.st_mode) ? "the file is empty" : "not a regular file");
		close(fd);
		return 1;
	}
	/* A read-only shared mapping: info never changes the file (no recovery). */
	size_t len = (size_t)st.st_size;
	void *base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (base == MAP_FAILED) {
		cli_err("pool info: cannot map '%s': %s", path, strerror(errno));
		return CLI_EXIT_USAGE;
	}
	char err[POOL_ERRLEN] = "";
	struct pm_diag diag;
	struct pm_layout lay;
	pm_diag_init(&diag, err, sizeof err, 0);
	int rc = pm_validate(base, len, &lay, &diag);
	uint32_t version = 0;
	if (rc == 0)
		memcpy(&version, (const uint8_t *)base + offsetof(struct pm_super, version), sizeof version);
	munmap(base, len);
	if (rc < 0) {
		cli_err("pool info: '%s' is not a valid region: %s (see 'chell pool check')", path,
			err[0] ? err : strerror(-rc));
		return 1;
	}
	char uuid[37];
	const uint8_t *u = lay.uuid;
	snprintf(uuid, sizeof uuid,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
		 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
		 u[15]);
	if (json) {
		printf("{\"path\": ");
		cli_json_str(stdout, path);
		printf(", \"uuid\": \"%s\", \"version\": %" PRIu32 ", \"journals\": %" PRIu32
		       ", \"journal_entries\": %" PRIu32 ", \"entry_size\": %d"
		       ", \"master_journal\": {\"offset\": %" PRIu64 ", \"size\": %" PRIu64 "}"
		       ", \"journal_offset\": %" PRIu64 ", \"journal_size\": %" PRIu64
		       ", \"heap_offset\": %" PRIu64 ", \"heap_size\": %" PRIu64
		       ", \"region_size\": %" PRIu64 ", \"file_size\": %zu}\n",
		       uuid, version, lay.journals, lay.entries, CHELL_JOURNAL_ENTRY, lay.master_off,
		       lay.master_size, lay.journal_off, lay.journal_size, lay.heap_off, lay.heap_size,
		       lay.total_size, len);
		return 0;
	}
	printf("path:             %s\n"
	       "uuid:             %s\n"
	       "format version:   %" PRIu32 "\n"
	       "journals:         %" PRIu32 " client journals + 1 master journal\n"
	       "journal entries:  %" PRIu32 " per client journal, %d bytes each\n"
	       "master journal:   offset %" PRIu64 ", %" PRIu64 " bytes\n"
	       "client journals:  offset %" PRIu64 ", %" PRIu64 " bytes each\n"
	       "heap:             offset %" PRIu64 ", %" PRIu64 " bytes\n"
	       "region size:      %" PRIu64 " bytes (file %zu bytes)\n",
	       path, uuid, version, lay.journals, lay.entries, CHELL_JOURNAL_ENTRY, lay.master_off,
	       lay.master_size, lay.journal_off, lay.journal_size, lay.heap_off, lay.heap_size,
	       lay.total_size, len);
	return 0;
}

/* ------------------------------------------------------------ dispatch */

int cmd_pool(int argc, char **argv)
{
	if (argc < 2) {
		cmd_pool_usage(stderr);
		return CLI_EXIT_USAGE;
	}
	const char *sub = argv[1];
	if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
		cmd_pool_usage(stdout);
		return 0;
	}
	if (strcmp(sub, "create") == 0)
		return pool_create(argc - 1, argv + 1);
	if (strcmp(sub, "check") == 0)
		return pool_check(argc - 1, argv + 1);
	if (strcmp(sub, "info") == 0)
		return pool_info(argc - 1, argv + 1);
	cli_err("pool: unknown subcommand '%s' (create, check or info)", sub);
	cli_usage_hint("pool");
	return CLI_EXIT_USAGE;
}
