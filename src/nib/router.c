/* SPDX-License-Identifier: MIT */
/*
 * Routing: which handler stack, if any, serves a path.
 *
 * The decision is made once, at open time, on the absolute, lexically
 * normalised path: a file is routed when it lies under one of the configured
 * prefixes (setting `paths`), or under any prefix when none is configured.
 * Kernel pseudo file systems (/proc, /sys) and Chell's own files are never
 * routed. Later modes add routing by mount type (tmpfs, DAX).
 */
#include <limits.h>
#include <pthread.h>
#include <sys/sysmacros.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"

static char **prefixes;
static size_t *prefix_len;
static int nprefixes;
static char *excluded[4];
static int nexcluded;

/* Mount points, longest first, with their device and whether each is a fast
 * tier (tmpfs, or mounted with the dax option). Used by modes that serve the
 * fast tier when no prefix is configured. The program may mount and unmount
 * file systems while it runs: routing by path uses the table as last read,
 * and an open then checks the file's st_dev against it (router_dev_fast),
 * re-reading /proc/self/mountinfo when a device it has never seen shows up.
 * A table is published whole and never freed (re-reads are rare), so a
 * reader in another thread never sees one half built. */
struct mount_ent {
	char *dir;
	size_t len;
	dev_t dev;
	bool fast;
};
struct mount_table {
	struct mount_ent *m;
	int n;
};
static struct mount_table *_Atomic mtab;
static bool route_by_mount;
static pthread_mutex_t mtab_mutex = PTHREAD_MUTEX_INITIALIZER;
/* devices found in no mount even after a re-read (never fast): not again */
#define UNKNOWN_DEVS 16
static dev_t unknown_devs[UNKNOWN_DEVS];
static int nunknown;

/* mountinfo escapes space, tab, newline and backslash as \ooo */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] && s[3]) {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

static int cmp_mount(const void *a, const void *b)
{
	const struct mount_ent *x = a, *y = b;
	return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

/* A fresh table from /proc/self/mountinfo, or NULL. */
static struct mount_table *load_mounts(void)
{
	int fd = sys_open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	ssize_t n;
	while (buf && (n = sys_read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (len + 1 >= cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb)
				break;
			buf = nb;
		}
	}
	sys_close(fd);
	struct mount_table *t = calloc(1, sizeof(*t));
	if (!buf || !t) {
		free(buf);
		free(t);
		return NULL;
	}
	buf[len] = 0;
	int cap_m = 64, nmounts = 0;
	struct mount_ent *mounts = calloc((size_t)cap_m, sizeof(*mounts));
	for (char *line = buf, *next; mounts && line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		/* id parent maj:min root mountpoint options [optional...] - fstype source superopts */
		char *field[6] = {0};
		char *p = line;
		for (int i = 0; i < 6 && p; i++) {
			field[i] = p;
			p = strchr(p, ' ');
			if (p)
				*p++ = 0;
		}
		char *dash = p ? strstr(p, "- ") : NULL;
		unsigned int maj, min;
		if (!field[4] || !dash || sscanf(field[2], "%u:%u", &maj, &min) != 2)
			continue;
		char *fstype = dash + 2, *src = strchr(fstype, ' ');
		if (!src)
			continue;
		*src++ = 0;
		char *superopts = strchr(src, ' ');
		superopts = superopts ? superopts + 1 : (char *)"";
		if (nmounts == cap_m) {
			struct mount_ent *nm = realloc(mounts, sizeof(*mounts) * (size_t)(cap_m *= 2));
			if (!nm)
				break;
			mounts = nm;
		}
		unescape(field[4]);
		struct mount_ent *m = &mounts[nmounts++];
		m->dir = strdup(field[4]);
		m->len = strlen(field[4]);
		m->dev = makedev(maj, min);
		m->fast = !strcmp(fstype, "tmpfs") || strstr(superopts, "dax") || strstr(field[5], "dax");
	}
	free(buf);
	if (!mounts) {
		free(t);
		return NULL;
	}
	qsort(mounts, (size_t)nmounts, sizeof(*mounts), cmp_mount);
	t->m = mounts;
	t->n = nmounts;
	return t;
}

static bool under(const char *abs, const char *prefix, size_t len);

static bool on_fast_mount(const char *abs)
{
	struct mount_table *t = atomic_load_explicit(&mtab, memory_order_acquire);
	for (int i = 0; t && i < t->n; i++) /* longest mount point containing abs */
		if (under(abs, t->m[i].dir, t->m[i].len))
			return t->m[i].fast;
	return false;
}

/* 1 fast, 0 not, -1 unknown device. A device may appear more than once
 * (bind mounts); tmpfs instances each have their own. */
static int dev_fast(const struct mount_table *t, dev_t dev)
{
	int r = -1;
	for (int i = 0; t && i < t->n; i++)
		if (t->m[i].dev == dev) {
			if (t->m[i].fast)
				return 1;
			r = 0;
		}
	return r;
}

bool router_dev_fast(dev_t dev)
{
	if (!route_by_mount)
		return true; /* routed by prefix: any file system */
	int r = dev_fast(atomic_load_explicit(&mtab, memory_order_acquire), dev);
	if (r >= 0)
		return r == 1;
	/* A device the table has never seen: something was mounted since. */
	pthread_mutex_lock(&mtab_mutex);
	for (int i = 0; i < nunknown && i < UNKNOWN_DEVS; i++)
		if (unknown_devs[i] == dev) {
			pthread_mutex_unlock(&mtab_mutex);
			return false;
		}
	r = dev_fast(atomic_load(&mtab), dev);
	if (r < 0) {
		struct mount_table *t = load_mounts();
		if (t) {
			atomic_store_explicit(&mtab, t, memory_order_release); /* the old one stays */
			r = dev_fast(t, dev);
		}
		if (r < 0)
			unknown_devs[nunknown++ % UNKNOWN_DEVS] = dev;
	}
	pthread_mutex_unlock(&mtab_mutex);
	return r == 1;
}

static void add_excluded(const char *p)
{
	if (p && p[0] == '/' && nexcluded < 4) {
		char buf[PATH_MAX];
		if (router_abspath(AT_FDCWD, p, buf, sizeof(buf)) == 0)
			excluded[nexcluded++] = strdup(buf);
	}
}

/* Take list (n entries) as the routed prefixes, in absolute normalised form. */
static void set_prefixes(char **list, int n)
{
	free(prefixes);
	free(prefix_len);
	prefixes = list;
	nprefixes = n;
	prefix_len = calloc((size_t)nprefixes + 1, sizeof(size_t));
	for (int i = 0; i < nprefixes; i++) {
		char buf[PATH_MAX];
		if (router_abspath(AT_FDCWD, prefixes[i], buf, sizeof(buf)) == 0) {
			free(prefixes[i]);
			prefixes[i] = strdup(buf);
		}
		prefix_len[i] = strlen(prefixes[i]);
	}
}

int router_init(void)
{
	char **list = NULL;
	int n = chell_config_paths(&chell_cfg, "paths", &list);
	if (n < 0)
		return -1;
	set_prefixes(list, n);
	add_excluded(chell_setting("shadow.dir"));
	bool cache = strcmp(chell_mode_stack->mode, "cache") == 0 ||
		     (strcmp(chell_mode_stack->mode, "shadow") == 0 &&
		      strcmp(chell_setting("shadow.under_test"), "cache") == 0);
	if (cache) {
		/* The pool (chunk files, socket) is the manager's, never an
		 * application file; without `paths`, cache mode serves the
		 * backing directories (none set: the cache handler asks chelld
		 * for them as files open). */
		add_excluded(chell_setting("cache.pool"));
		char **b = NULL;
		int nb = nprefixes == 0 ? chell_config_paths(&chell_cfg, "cache.backing", &b) : 0;
		if (nb > 0)
			set_prefixes(b, nb);
		else
			free(b);
	}
	/* Without prefixes, direct mode serves exactly the fast tier. */
	if (nprefixes == 0 && strcmp(chell_mode_stack->mode, "direct") == 0) {
		route_by_mount = true;
		atomic_store(&mtab, load_mounts());
	}
	return 0;
}

static bool under(const char *abs, const char *prefix, size_t len)
{
	if (len == 1 && prefix[0] == '/')
		return true;
	return strncmp(abs, prefix, len) == 0 && (abs[len] == '/' || abs[len] == 0);
}

const struct chell_stack *router_route_abs(const char *abs)
{
	if (under(abs, "/proc", 5) || under(abs, "/sys", 4))
		return NULL;
	for (int i = 0; i < nexcluded; i++)
		if (under(abs, excluded[i], strlen(excluded[i])))
			return NULL;
	if (nprefixes == 0)
		return !route_by_mount || on_fast_mount(abs) ? chell_mode_stack : NULL;
	for (int i = 0; i < nprefixes; i++)
		if (under(abs, prefixes[i], prefix_len[i]))
			return chell_mode_stack;
	return NULL;
}

/* Lexical normalisation: collapse "//", resolve "." and "..". Symlinks are
 * not followed: routing is by the name the application used. */
static int normalise(char *p)
{
	char *out = p, *in = p;
	if (*in != '/')
		return -EINVAL;
	while (*in) {
		while (*in == '/')
			in++;
		if (!*in)
			break;
		char *seg = in;
		while (*in && *in != '/')
			in++;
		size_t len = (size_t)(in - seg);
		if (len == 1 && seg[0] == '.')
			continue;
		if (len == 2 && seg[0] == '.' && seg[1] == '.') {
			while (out > p && *--out != '/')
				;
			continue;
		}
		*out++ = '/';
		memmove(out, seg, len);
		out += len;
	}
	if (out == p)
		*out++ = '/';
	*out = 0;
	return 0;
}

int router_abspath(int dirfd, const char *path, char *out, size_t outlen)
{
	size_t plen = strlen(path);
	if (path[0] == '/') {
		if (plen >= outlen)
			return -ENAMETOOLONG;
		memcpy(out, path, plen + 1);
		return normalise(out);
	}
	long n;
	if (dirfd == AT_FDCWD) {
		n = sys_getcwd(out, outlen);
		if (n < 0)
			return (int)n;
		n = (long)strlen(out);
	} else {
		char link[CHELL_FD_PATH_MAX];
		n = sys_readlink(chell_fd_path(link, dirfd), out, outlen - 1);
		if (n < 0)
			return (int)n;
		out[n] = 0;
		if (out[0] != '/')
			return -ENOTDIR;
	}
	if ((size_t)n + 1 + plen >= outlen)
		return -ENAMETOOLONG;
	out[n] = '/';
	memcpy(out + n + 1, path, plen + 1);
	return normalise(out);
}

const struct chell_stack *router_route(int dirfd, const char *path, char *abs, size_t abslen)
{
	/* The application's pointer is read here, before the kernel sees it: a
	 * bad one (EFAULT), a name the kernel rejects as too long, or an empty
	 * one leaves the call unrouted, and the kernel gives its answer. */
	if (chell_user_strnlen(path, PATH_MAX) <= 0 || router_abspath(dirfd, path, abs, abslen) < 0)
		return NULL;
	return router_route_abs(abs);
}
