/* SPDX-License-Identifier: MIT */
/*
 * `chell pvm import DIR` / `chell pvm export DEST`: the file-to-object
 * converter. Each regular file under DIR becomes the object named by its
 * path relative to DIR; export writes every object back at its name under
 * DEST, so import then export reproduces the files byte for byte (not
 * modes, times, links or empty directories: objects have none).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h" /* progress_bar */
#include "cmd_pvm.h"

struct entry {
	char *rel;
	uint64_t size;
};

static struct {
	struct entry *v;
	size_t n, cap;
	uint64_t bytes;
	size_t root_len;
	int skipped;
} walk;

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_D || type == FTW_DP)
		return 0;
	const char *rel = path + walk.root_len;
	while (*rel == '/')
		rel++;
	if (type != FTW_F || !S_ISREG(st->st_mode)) {
		cli_err("pvm import: %s: not a regular file, skipped", path);
		walk.skipped++;
		return 0;
	}
	if (strlen(rel) >= PVM_NAME_MAX) {
		cli_err("pvm import: %s: the relative path is longer than %d bytes, skipped", path, PVM_NAME_MAX - 1);
		walk.skipped++;
		return 0;
	}
	if (walk.n == walk.cap) {
		size_t nc = walk.cap ? walk.cap * 2 : 256;
		struct entry *nv = realloc(walk.v, nc * sizeof(*nv));
		if (!nv)
			return -1;
		walk.v = nv;
		walk.cap = nc;
	}
	walk.v[walk.n].rel = strdup(rel);
	walk.v[walk.n].size = (uint64_t)st->st_size;
	if (!walk.v[walk.n].rel)
		return -1;
	walk.bytes += (uint64_t)st->st_size;
	walk.n++;
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->rel, ((const struct entry *)b)->rel);
}

int pvm_import(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc;
	const char *dir = argv[0];
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		cli_err("pvm import: %s: %s", dir, errno ? strerror(errno) : "not a directory");
		return CLI_EXIT_USAGE;
	}
	memset(&walk, 0, sizeof walk);
	walk.root_len = strlen(dir);
	if (nftw(dir, collect, 64, FTW_PHYS) != 0) {
		cli_err("pvm import: walking %s: %s", dir, strerror(errno));
		return 1;
	}
	qsort(walk.v, walk.n, sizeof(*walk.v), cmp_entry);
	if (pvm_open_pool(o, 1) || pvm_open_app(o, 1))
		return 1;
	struct progress_bar pg;
	progress_bar_init(&pg, o->quiet);
	uint64_t done = 0;
	int bad = walk.skipped ? 1 : 0;
	char path[8192], err[256], text[128];
	for (size_t i = 0; i < walk.n; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, walk.v[i].rel);
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		int rc = fd < 0 ? -errno : pvm_store_fd(o->a, walk.v[i].rel, fd, walk.v[i].size, err, sizeof err);
		if (fd >= 0)
			close(fd);
		if (rc) {
			progress_bar_note(&pg, "chell: pvm import: %s: %s", walk.v[i].rel, fd < 0 ? strerror(-rc) : err);
			bad = 1;
		}
		done += walk.v[i].size;
		snprintf(text, sizeof text, "%zu/%zu files", i + 1, walk.n);
		progress_bar_show(&pg, done, walk.bytes, text);
		free(walk.v[i].rel);
	}
	progress_bar_done(&pg);
	free(walk.v);
	if (!o->quiet)
		fprintf(stderr, "imported %zu files, %" PRIu64 " bytes into %s (application %s)\n", walk.n, walk.bytes,
			o->pool, o->app);
	return bad;
}

/* A name is written only if it stays under DEST: relative, no "." or ".."
 * component, no empty component. */
static int safe_name(const char *n)
{
	if (!*n || n[0] == '/')
		return 0;
	for (const char *c = n; *c;) {
		const char *e = strchr(c, '/');
		size_t len = e ? (size_t)(e - c) : strlen(c);
		if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
			return 0;
		c += len;
		if (*c == '/')
			c++;
		else
			break;
	}
	return n[strlen(n) - 1] != '/';
}

/* mkdir -p of the directories of dest/rel. */
static int make_parents(char *path, size_t from)
{
	for (char *s = path + from; (s = strchr(s, '/')); s++) {
		*s = '\0';
		int rc = mkdir(path, 0755);
		int e = errno;
		*s = '/';
		if (rc < 0 && e != EEXIST)
			return -e;
	}
	return 0;
}

int pvm_export(struct pvm_opts *o, int argc, char **argv)
{
	(void)argc;
	const char *dest = argv[0];
	if (pvm_open_pool(o, 0) || pvm_open_app(o, 0))
		return 1;
	if (mkdir(dest, 0755) < 0 && errno != EEXIST) {
		cli_err("pvm export: %s: %s", dest, strerror(errno));
		return 1;
	}
	/* Totals first, for the bar. */
	struct pvm_info info;
	uint64_t cur = 0, total = 0, count = 0, done = 0, n = 0;
	while (pvm_iter(o->a, &cur, &info) == 1) {
		total += info.size;
		count++;
	}
	struct progress_bar pg;
	progress_bar_init(&pg, o->quiet);
	int bad = 0;
	char path[8192], text[128];
	size_t dl = strlen(dest);
	cur = 0;
	while (pvm_iter(o->a, &cur, &info) == 1) {
		n++;
		if (!safe_name(info.name)) {
			progress_bar_note(&pg, "chell: pvm export: '%s': not a relative path under DEST, refused", info.name);
			bad = 1;
			continue;
		}
		snprintf(path, sizeof path, "%s/%s", dest, info.name);
		void *ptr;
		int rc = make_parents(path, dl + 1);
		if (!rc)
			rc = pvm_open(o->a, info.name, &ptr, &info);
		int fd = rc ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (!rc && fd < 0)
			rc = -errno;
		for (uint64_t off = 0; !rc && off < info.size;) {
			ssize_t w = write(fd, (const char *)ptr + off, info.size - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				rc = -errno;
			else
				off += (uint64_t)w;
		}
		if (fd >= 0 && close(fd) < 0 && !rc)
			rc = -errno;
		if (rc) {
			progress_bar_note(&pg, "chell: pvm export: %s: %s", path, strerror(-rc));
			bad = 1;
		}
		done += info.size;
		snprintf(text, sizeof text, "%" PRIu64 "/%" PRIu64 " objects", n, count);
		progress_bar_show(&pg, done, total, text);
	}
	progress_bar_done(&pg);
	if (!o->quiet)
		fprintf(stderr, "exported %" PRIu64 " objects, %" PRIu64 " bytes to %s\n", count, total, dest);
	return bad;
}
