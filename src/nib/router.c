/* SPDX-License-Identifier: MIT */
/*
 * Routing: which handler stack, if any, serves a path.
 *
 * The decision is made once, at open time, on the absolute, lexically
 * normalised path, by the routing rules of the configuration (registry.h:
 * `route` rules, `mode` for each of `paths`, or `mode` for every file): the
 * longest matching prefix names the stack. Kernel pseudo file systems
 * (/proc, /sys) and Chell's own files are never routed. The catch-all rule
 * of direct mode routes by mount type (tmpfs, DAX).
 */
#include <limits.h>
#include <pthread.h>
#include <sys/sysmacros.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"
#include "registry.h"

/* The rules, longest prefix first, and the stack of each (same index). */
static struct chell_routes routes;
static const struct chell_stack **rule_stack;
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

static bool on_fast_mount(const char *abs)
{
	struct mount_table *t = atomic_load_explicit(&mtab, memory_order_acquire);
	for (int i = 0; t && i < t->n; i++) /* longest mount point containing abs */
		if (chell_path_under(abs, t->m[i].dir, t->m[i].len))
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

bool router_dev_fast(const char *abs, dev_t dev)
{
	if (!atomic_load_explicit(&mtab, memory_order_relaxed))
		return true; /* no rule routes by mount type */
	const struct chell_route *rule = chell_routes_match(&routes, abs);
	if (!rule || !rule->by_mount)
		return true; /* routed by prefix: any file system */
	return router_dev_on_fast_mount(dev);
}

bool router_dev_on_fast_mount(dev_t dev)
{
	int r = dev_fast(atomic_load_explicit(&mtab, memory_order_acquire), dev);
	if (r >= 0)
		return r == 1;
	/* A device the table has never seen: something was mounted since (or
	 * no table yet: no rule routes by mount type, the tier model asks). */
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

static void exclude_setting(const char *key, void *arg)
{
	add_excluded(chell_setting(key));
}

int router_init(char *err, size_t errlen)
{
	if (chell_routes_build(&chell_cfg, &routes, err, errlen) < 0)
		return -1;
	rule_stack = calloc((size_t)routes.n + 1, sizeof(*rule_stack));
	if (!rule_stack) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	bool by_mount = false;
	for (int i = 0; i < routes.n; i++) {
		struct chell_route *r = &routes.r[i];
		const char *key = strcmp(r->from, "route") == 0 ? "route" : "mode";
		rule_stack[i] = stack_get(&r->stack, key, err, errlen);
		if (!rule_stack[i])
			return -1;
		by_mount |= r->by_mount;
		/* `mode`'s stack is the one the statistics name */
		if (!chell_mode_stack || strcmp(key, "mode") == 0)
			chell_mode_stack = rule_stack[i];
	}
	if (!chell_mode_stack) { /* no rule at all: nothing is routed */
		static const struct chell_stack_spec posix = {"posix", ""};
		chell_mode_stack = stack_get(&posix, "mode", err, errlen);
		if (!chell_mode_stack)
			return -1;
	}
	/* Chell's own directories (shadow copies, the cache pool): never routed. */
	chell_routes_own_dirs(&routes, exclude_setting, NULL);
	if (by_mount)
		atomic_store(&mtab, load_mounts());
	return 0;
}

/* Index of the rule routing abs, or -1 (never routed, excluded, no rule,
 * or not on a fast mount for a rule by mount type). */
static int route_index(const char *abs)
{
	if (chell_path_under(abs, "/proc", 5) || chell_path_under(abs, "/sys", 4))
		return -1;
	for (int i = 0; i < nexcluded; i++)
		if (chell_path_under(abs, excluded[i], strlen(excluded[i])))
			return -1;
	const struct chell_route *r = chell_routes_match(&routes, abs);
	if (!r || (r->by_mount && !on_fast_mount(abs)))
		return -1;
	return (int)(r - routes.r);
}

/* Depth of chell_internal_files_enter on this thread: inside, no path is
 * routed (Chell's own files take the kernel path). */
static __thread int tls_internal_files;

CHELL_EXPORT void chell_internal_files_enter(void)
{
	tls_internal_files++;
}

CHELL_EXPORT void chell_internal_files_leave(void)
{
	tls_internal_files--;
}

const struct chell_stack *router_route_abs(const char *abs)
{
	if (unlikely(tls_internal_files))
		return NULL;
	int i = route_index(abs);
	return i < 0 ? NULL : rule_stack[i];
}

/* Lexical normalisation (registry.c, shared with the CLI): collapse "//",
 * resolve "." and "..". Symlinks are not followed: routing is by the name
 * the application used. */
static int normalise(char *p)
{
	return chell_path_normalise(p) < 0 ? -EINVAL : 0;
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
