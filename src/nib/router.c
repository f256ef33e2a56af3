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
#include <stdlib.h>
#include <string.h>

#include "nib.h"

static char **prefixes;
static size_t *prefix_len;
static int nprefixes;
static char *excluded[4];
static int nexcluded;

static void add_excluded(const char *p)
{
	if (p && p[0] == '/' && nexcluded < 4) {
		char buf[PATH_MAX];
		if (router_abspath(AT_FDCWD, p, buf, sizeof(buf)) == 0)
			excluded[nexcluded++] = strdup(buf);
	}
}

int router_init(void)
{
	nprefixes = chell_config_paths(&chell_cfg, "paths", &prefixes);
	if (nprefixes < 0)
		return -1;
	prefix_len = calloc((size_t)nprefixes + 1, sizeof(size_t));
	for (int i = 0; i < nprefixes; i++) {
		char buf[PATH_MAX];
		if (router_abspath(AT_FDCWD, prefixes[i], buf, sizeof(buf)) == 0) {
			free(prefixes[i]);
			prefixes[i] = strdup(buf);
		}
		prefix_len[i] = strlen(prefixes[i]);
	}
	add_excluded(chell_setting("shadow.dir"));
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
		return chell_mode_stack;
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
	if (!path[0] || router_abspath(dirfd, path, abs, abslen) < 0)
		return NULL;
	return router_route_abs(abs);
}
