/* SPDX-License-Identifier: MIT */
/* The per-user registry of running cache managers: see mgr_registry.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chelld/protocol.h"
#include "chelld/mgr_registry.h"

/* mkdir one level, then insist it is ours: a directory someone else made
 * in /tmp first must not collect (or feed us) manager entries. */
static int own_dir(const char *path)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	struct stat st;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
		return -EPERM;
	return 0;
}

int mgr_registry_dir(char *out, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char base[PATH_MAX];
	int n;
	if (xdg && xdg[0] == '/')
		n = snprintf(base, sizeof base, "%s/chell", xdg);
	else
		n = snprintf(base, sizeof base, "/tmp/chell-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= sizeof base)
		return -ENAMETOOLONG;
	int r = own_dir(base);
	if (r)
		return r;
	n = snprintf(out, len, "%s/managers", base);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return own_dir(out);
}

static int entry_path(long pid, char *out, size_t len)
{
	char dir[PATH_MAX];
	int r = mgr_registry_dir(dir, sizeof dir);
	if (r)
		return r;
	int n = snprintf(out, len, "%s/%ld", dir, pid);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int mgr_registry_add(long pid, const char *pool, const char *sock)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	int r = entry_path(pid, path, sizeof path);
	if (r)
		return r;
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	/* Written whole, then renamed: a reader sees no entry or all of it. */
	FILE *f = fopen(tmp, "we");
	if (!f)
		return -errno;
	fprintf(f, "pid %ld\npool %s\nsocket %s\n", pid, pool, sock);
	if (fclose(f) != 0 || rename(tmp, path) < 0) {
		r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

void mgr_registry_remove(long pid)
{
	char path[PATH_MAX];
	if (entry_path(pid, path, sizeof path) == 0)
		unlink(path);
}

/* The pid in POOL/chelld.pid, or 0. */
static long pool_pid(const char *pool)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/%s", pool, CHELLD_PID_NAME) >= (int)sizeof path)
		return 0;
	FILE *f = fopen(path, "re");
	long pid = 0;
	if (!f)
		return 0;
	if (fscanf(f, "%ld", &pid) != 1)
		pid = 0;
	fclose(f);
	return pid;
}

/* A path field; one that does not fit stays empty (the entry is refused). */
static void set_field(char *dst, size_t len, const char *v)
{
	size_t k = strlen(v);
	if (k < len)
		memcpy(dst, v, k + 1);
}

/* Does a chelld hold POOL's lock? The lock, not the pid, says a daemon
 * serves: a killed one that no one has reaped yet still answers kill(0). */
static bool pool_locked(const char *pool)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/%s", pool, CHELLD_LOCK_NAME) >= (int)sizeof path)
		return false;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* A shared lock conflicts only with the daemon's exclusive one. */
	bool held = flock(fd, LOCK_SH | LOCK_NB) < 0 && errno == EWOULDBLOCK;
	close(fd);
	return held;
}

static bool read_entry(int dfd, const char *name, struct mgr_entry *e)
{
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return false;
	}
	memset(e, 0, sizeof *e);
	char line[PATH_MAX + 16];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, "pid ", 4) == 0)
			e->pid = strtol(line + 4, NULL, 10);
		else if (strncmp(line, "pool ", 5) == 0)
			set_field(e->pool, sizeof e->pool, line + 5);
		else if (strncmp(line, "socket ", 7) == 0)
			set_field(e->sock, sizeof e->sock, line + 7);
	}
	fclose(f);
	/* The file's name is the pid: an entry that disagrees is not one. */
	char *end;
	long named = strtol(name, &end, 10);
	if (*end || named <= 0 || named != e->pid || e->pool[0] != '/' || !e->sock[0])
		return false;
	e->live = pool_pid(e->pool) == e->pid && pool_locked(e->pool);
	return true;
}

static int by_pool(const void *a, const void *b)
{
	const struct mgr_entry *x = a, *y = b;
	int c = strcmp(x->pool, y->pool);
	return c ? c : (x->pid > y->pid) - (x->pid < y->pid);
}

int mgr_registry_list(struct mgr_entry **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char dir[PATH_MAX];
	int r = mgr_registry_dir(dir, sizeof dir);
	if (r)
		return r;
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	size_t cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue; /* ".", "..", leftovers of a write */
		if (*n == cap) {
			size_t ncap = cap ? 2 * cap : 8;
			struct mgr_entry *g = realloc(*out, ncap * sizeof **out);
			if (!g) {
				closedir(d);
				free(*out);
				*out = NULL;
				*n = 0;
				return -ENOMEM;
			}
			*out = g;
			cap = ncap;
		}
		if (read_entry(dirfd(d), de->d_name, &(*out)[*n]))
			(*n)++;
	}
	closedir(d);
	if (*n > 1)
		qsort(*out, *n, sizeof **out, by_pool);
	return 0;
}
