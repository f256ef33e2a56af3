/* SPDX-License-Identifier: MIT */
/*
 * Carrying handled descriptors across exec.
 *
 * exec() keeps a descriptor's kernel state (offset, flags) but wipes
 * Chell's memory. Before exec we therefore pass, in CHELL_HANDOFF, the shared
 * region's memfd and, for every descriptor that survives (not close-on-exec),
 * which OFD slot it refers to:
 *
 *   CHELL_HANDOFF=v1;r=<memfd>;<fd>:<slot>:<gen>,...;-:<slot>:<gen>,...
 *
 * The "-" entries are OFDs whose last descriptors are close-on-exec: the new
 * image runs their release hooks. The new image checks each entry (the slot
 * is live, same generation, and the fd still names the same inode) before
 * trusting it. We also re-add LD_PRELOAD and every CHELL_* setting the
 * application's environment lacks, so a program that execs with a clean
 * environment keeps its descriptors' semantics.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"

extern char **environ;

static char libpath[PATH_MAX];

const char *chell_library_path(void)
{
	if (!libpath[0]) {
		Dl_info info;
		if (dladdr((void *)chell_library_path, &info) && info.dli_fname) {
			if (router_abspath(AT_FDCWD, info.dli_fname, libpath, sizeof(libpath)) < 0)
				snprintf(libpath, sizeof(libpath), "%s", info.dli_fname);
		}
	}
	return libpath;
}

/* Undo bookkeeping recorded while preparing, if exec fails. */
static __thread struct {
	int n;
	uint32_t slots[1024];
} dropped;
/* env[alloc_from..] are strings handoff_prepare_exec allocated. */
static __thread int alloc_from = -1;
/* LD_PRELOAD as this image started (ours plus e.g. a sanitizer runtime). */
static char *startup_preload;

void handoff_note_startup_env(void)
{
	const char *p = getenv("LD_PRELOAD");
	startup_preload = p ? strdup(p) : NULL;
}

static bool env_has(char *const envp[], const char *name)
{
	size_t n = strlen(name);
	for (int i = 0; envp && envp[i]; i++)
		if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
			return true;
	return false;
}

/* a + b + c, malloc'd */
static char *concat3(const char *a, const char *b, const char *c)
{
	size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
	char *s = malloc(la + lb + lc + 1);
	if (s) {
		memcpy(s, a, la);
		memcpy(s + la, b, lb);
		memcpy(s + la + lb, c, lc + 1);
	}
	return s;
}

char **handoff_prepare_exec(char *const envp[])
{
	if (!chell_active)
		return (char **)envp;
	if (!envp)
		envp = environ;

	/* 1. descriptors (none if this tree never handled a file: no region) */
	size_t cap = 256, len = 0;
	char *h = malloc(cap);
	if (!h)
		return (char **)envp;
	h[0] = 0;
	if (region_fd() >= 0)
		len = (size_t)snprintf(h, cap, "v1;r=%d;", region_fd());
	dropped.n = 0;
	char rel[8192];
	size_t rlen = 0;
	rel[0] = 0;
	int max = region_fd() >= 0 ? atomic_load(&chell_fdt_max) : -1;
	fdt_lock();
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (!f || f == FILE_CLOSING)
			continue;
		int fl = sys_fcntl(fd, F_GETFD, 0);
		if (fl >= 0 && (fl & FD_CLOEXEC)) {
			/* this descriptor dies with the exec */
			bool last = atomic_fetch_sub((_Atomic uint32_t *)&f->ofd->refs, 1) == 1;
			if (last && rlen + 32 >= sizeof(rel)) {
				/* no room to hand its release on: it stays alive (leaks) */
				atomic_fetch_add((_Atomic uint32_t *)&f->ofd->refs, 1);
				continue;
			}
			if (last)
				rlen += (size_t)snprintf(rel + rlen, sizeof(rel) - rlen, "-:%u:%u,",
							 f->slot, f->ofd->gen);
			if (dropped.n < 1024)
				dropped.slots[dropped.n++] = f->slot;
			continue;
		}
		if (fl < 0)
			continue;
		for (int i = 0; i < f->stack->depth; i++) /* e.g. direct: the kernel offset */
			if (f->stack->handlers[i]->sync_out) {
				chell_ctx c = {f, fd, i, CHELL_OP_EXEC, NULL};
				f->stack->handlers[i]->sync_out(&c);
			}
		if (len + 40 > cap) {
			char *nh = realloc(h, cap *= 2);
			if (!nh)
				break;
			h = nh;
		}
		len += (size_t)snprintf(h + len, cap - len, "%d:%u:%u,", fd, f->slot, f->ofd->gen);
	}
	fdt_unlock();
	if (len + rlen + 2 > cap) {
		char *nh = realloc(h, cap = len + rlen + 2);
		if (nh)
			h = nh;
	}
	if (len && len + rlen + 2 <= cap)
		len += (size_t)snprintf(h + len, cap - len, ";%s", rel);
	region_set_cloexec(0);

	/* 2. environment */
	int n = 0;
	while (envp[n])
		n++;
	int nsettings = 0;
	while (chell_setting_defs[nsettings].key)
		nsettings++;
	char **env = calloc((size_t)n + (size_t)nsettings + 4, sizeof(char *));
	if (!env) {
		free(h);
		return (char **)envp;
	}
	int k = 0;
	const char *lib = chell_library_path();
	/* An environment without LD_PRELOAD gets the one this image started
	 * with (Chell and whatever preceded it, e.g. a sanitizer runtime). */
	const char *old_preload = startup_preload ? startup_preload : "";
	for (int i = 0; i < n; i++) {
		if (strncmp(envp[i], "CHELL_HANDOFF=", 14) == 0)
			continue;
		if (strncmp(envp[i], "LD_PRELOAD=", 11) == 0) {
			old_preload = envp[i] + 11;
			continue;
		}
		env[k++] = envp[i];
	}
	alloc_from = k;
	/* LD_PRELOAD: ours first, then the application's other entries. */
	if (strstr(old_preload, lib))
		env[k++] = concat3("LD_PRELOAD=", old_preload, "");
	else if (old_preload[0]) {
		char *head = concat3("LD_PRELOAD=", lib, ":");
		env[k++] = head ? concat3(head, old_preload, "") : NULL;
		free(head);
	} else
		env[k++] = concat3("LD_PRELOAD=", lib, "");
	for (int i = 0; i < nsettings; i++) {
		const struct chell_setting_def *d = &chell_setting_defs[i];
		const char *v = chell_cfg.values[i];
		if (strcmp(chell_cfg.origins[i], "default") == 0 || env_has(envp, d->env))
			continue;
		env[k++] = concat3(d->env, "=", v);
	}
	if (len)
		env[k++] = concat3("CHELL_HANDOFF=", h, "");
	env[k] = NULL;
	free(h);
	return env;
}

void handoff_exec_failed(char **env)
{
	if (!chell_active)
		return;
	if (alloc_from >= 0 && env) {
		for (int i = alloc_from; env[i]; i++)
			free(env[i]);
		free(env);
		alloc_from = -1;
	}
	for (int i = 0; i < dropped.n; i++) {
		struct chell_ofd *o = region_slot(dropped.slots[i]);
		if (o)
			atomic_fetch_add((_Atomic uint32_t *)&o->refs, 1);
	}
	dropped.n = 0;
	region_set_cloexec(1);
}

void handoff_adopt_from_env(void)
{
	const char *h = getenv("CHELL_HANDOFF");
	if (!h)
		return;
	char *copy = strdup(h);
	unsetenv("CHELL_HANDOFF"); /* children started behind our back must not reuse it */
	if (!copy)
		return;
	int rfd = -1;
	if (strncmp(copy, "v1;r=", 5) != 0 || sscanf(copy + 5, "%d", &rfd) != 1 || rfd < 0 ||
	    region_attach(rfd) < 0) {
		chell_log("ignoring an unusable descriptor handoff from the previous image");
		free(copy);
		return;
	}
	char *p = strchr(copy + 5, ';');
	while (p && *++p && *p != ';') {
		int fd;
		unsigned slot, gen;
		if (sscanf(p, "%d:%u:%u", &fd, &slot, &gen) == 3) {
			if (hub_adopt(fd, slot, gen) < 0)
				chell_debug("descriptor %d from the previous image not adopted", fd);
		}
		p = strchr(p, ',');
	}
	p = p ? strchr(p, ';') : NULL;
	while (p && *++p) {
		unsigned slot, gen;
		if (sscanf(p, "-:%u:%u", &slot, &gen) == 2)
			hub_release_orphan(slot, gen);
		p = strchr(p, ',');
	}
	free(copy);
}
