/* SPDX-License-Identifier: MIT */
/*
 * The run-time changes of modes and pins, kept in the pool so that a
 * restarted manager (a crash, a reboot with a DAX pool, `chell cache stop`
 * and start) serves every directory in the mode an operator last set and
 * keeps the files pinned (docs/CACHE.md, "Cache modes").
 *
 * DIR/modes.state, text, rewritten whole after each successful SET_MODE,
 * PIN and UNPIN (a temporary file, fsync, rename, fsync of the directory:
 * a crash leaves the old state or the new one, never half of it):
 *
 *     chell-modes 1
 *     mode write-through /backing/dir
 *     pin /backing/dir/file
 *
 * Only what SET_MODE and PIN made is written: the rules from the options
 * (cache.mode_rules) come from the options at every start, and a switch
 * stored here is applied over them (the operator's last word wins). A
 * path is the rest of its line, so it may hold spaces; a path with a
 * newline is not kept (logged). Text rather than a region of meta.pool:
 * a handful of lines an operator may read, and a damaged file costs the
 * switches (each bad line is logged with its number and skipped), never
 * the cached data.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chelld/modes_state.h"

#define STATE_NAME "modes.state"
#define STATE_MAGIC "chell-modes 1"

static const char *const names[CHELLD_MODE_COUNT] = {
	"write-back", "write-through", "write-around", "read-only", "pass-through",
};

int modes_parse(const char *name)
{
	for (int i = 0; i < CHELLD_MODE_COUNT; i++)
		if (strcmp(name, names[i]) == 0)
			return i;
	return -1;
}

const char *modes_name(unsigned mode)
{
	return mode < CHELLD_MODE_COUNT ? names[mode] : "?";
}

static int state_path(const char *dir, const char *name, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/%s", dir, name);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int modes_state_save(const char *dir, const struct modes_state_item *items, size_t n)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	if (state_path(dir, STATE_NAME, path, sizeof path) < 0 ||
	    state_path(dir, STATE_NAME ".tmp", tmp, sizeof tmp) < 0)
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = -errno;
		close(fd);
		unlink(tmp);
		return e;
	}
	fprintf(f, "%s\n", STATE_MAGIC);
	for (size_t i = 0; i < n; i++) {
		if (strchr(items[i].path, '\n')) {
			chelld_log("%s: a path with a newline is not kept across restarts: %.200s",
				   STATE_NAME, items[i].path);
			continue;
		}
		if (items[i].pin)
			fprintf(f, "pin %s\n", items[i].path);
		else
			fprintf(f, "mode %s %s\n", modes_name(items[i].mode), items[i].path);
	}
	int rc = fflush(f) == 0 && fsync(fd) == 0 ? 0 : -errno;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		unlink(tmp);
		return rc;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd) < 0)
			rc = -errno;
		close(dfd);
	}
	return rc;
}

int modes_state_load(const char *dir, modes_state_apply_fn apply, void *arg)
{
	char path[PATH_MAX];
	if (state_path(dir, STATE_NAME, path, sizeof path) < 0)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno != ENOENT)
			chelld_log("%s: cannot open it (%s): starting with the options' modes only",
				   path, strerror(errno));
		return 0;
	}
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return 0;
	}
	char line[PATH_MAX + 64];
	unsigned no = 0, applied = 0;
	while (fgets(line, sizeof line, f)) {
		no++;
		size_t len = strlen(line);
		if (len == 0 || line[len - 1] != '\n') {
			chelld_log("%s line %u: too long or not ended by a newline: ignored", path, no);
			if (len == sizeof line - 1) /* skip the rest of the long line */
				for (int ch; (ch = fgetc(f)) != EOF && ch != '\n';)
					;
			continue;
		}
		line[len - 1] = 0;
		if (no == 1) {
			if (strcmp(line, STATE_MAGIC) != 0) {
				chelld_log("%s: not a modes file of this version (first line '%.60s', "
					   "expected '%s'): ignored", path, line, STATE_MAGIC);
				break;
			}
			continue;
		}
		struct modes_state_item it = {0};
		char *rest;
		if (strncmp(line, "pin ", 4) == 0) {
			it.pin = true;
			rest = line + 4;
		} else if (strncmp(line, "mode ", 5) == 0) {
			char *sp = strchr(line + 5, ' ');
			int m = -1;
			if (sp) {
				*sp = 0;
				m = modes_parse(line + 5);
			}
			if (m < 0) {
				chelld_log("%s line %u: not 'mode MODE PATH' with a known MODE: ignored",
					   path, no);
				continue;
			}
			it.mode = (unsigned)m;
			rest = sp + 1;
		} else {
			chelld_log("%s line %u: neither 'mode' nor 'pin': ignored", path, no);
			continue;
		}
		it.path = rest;
		char detail[160] = "";
		if (apply(arg, &it, detail, sizeof detail) < 0)
			chelld_log("%s line %u: %s %.200s: %s: ignored", path, no,
				   it.pin ? "pin" : "mode", it.path, detail);
		else
			applied++;
	}
	fclose(f);
	if (applied)
		chelld_log("%u mode switch(es) and pin(s) kept from the last run (%s)", applied, path);
	return (int)applied;
}
