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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"

static char **prefixes;
static size_t *prefix_len;
static int nprefixes;
static char *excluded[4];
static int nexcluded;

/* Mount points, longest first, with whether each is a fast tier (tmpfs, or
 * mounted with the dax option). Used by modes that serve the fast tier when
 * no prefix is configured. */
struct mount_ent {
	char *dir;
	size_t len;
	bool fast;
};
static struct mount_ent *mounts;
static int nmounts;
static bool route_by_mount;

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

static void load_mounts(void)
{
	int fd = sys_open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
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
	if (!buf)
		return;
	buf[len] = 0;
	int cap_m = 64;
	mounts = calloc((size_t)cap_m, sizeof(*mounts));
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
		if (!field[4] || !dash)
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
		m->fast = !strcmp(fstype, "tmpfs") || strstr(superopts, "dax") || strstr(field[5], "dax");
	}
	free(buf);
	if (mounts)
		qsort(mounts, (size_t)nmounts, sizeof(*mounts), cmp_mount);
}

static bool under(const char *abs, const char *prefix, size_t len);

static bool on_fast_mount(const char *abs)
{
	for (int i = 0; i < nmounts; i++) /* longest mount point containing abs */
		if (under(abs, mounts[i].dir, mounts[i].len))
			return mounts[i].fast;
	return false;
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
		load_mounts();
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
		char link[64];
		snprintf(link, sizeof(link), "/proc/self/fd/%d", dirfd);
		n = sys_readlink(link, out, outlen - 1);
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
