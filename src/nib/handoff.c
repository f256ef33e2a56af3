/* SPDX-License-Identifier: MIT */
/*
 * Carrying handled descriptors across exec.
 *
 * exec() keeps a descriptor's kernel state (offset, flags) but wipes
 * Chell's memory. Before exec we therefore pass, in CHELL_HANDOFF, the shared
 * region's memfd and, for every descriptor that survives (not close-on-exec),
 * which OFD slot it refers to:
 *
 *   CHELL_HANDOFF=v1;r=<memfd>;<fd>:<slot>:<gen>,...;-:<slot>:<gen>,...;c=<fd>,...
 *
 * An OFD whose last descriptor is close-on-exec gets a duplicate that
 * survives, listed like any other descriptor and in "c=": the new image
 * adopts it and closes it through the hub at once, so that last close runs
 * every layer's detach and release with a live descriptor, as a close
 * would. The "-" entries are such OFDs that could not get one (or whose
 * new image is not Chell's): the new image runs their release hooks only. The new image checks each entry (the slot
 * is live, same generation, and the fd still names the same inode) before
 * trusting it. We also re-add LD_PRELOAD and every CHELL_* setting the
 * application's environment lacks, so a program that execs with a clean
 * environment keeps its descriptors' semantics.
 */
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_view.h"

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
/* Duplicates of close-on-exec last descriptors, closed by the new image
 * (or here, if the exec fails). */
#define RECLOSE_MAX 64
static __thread struct {
	int n;
	int fds[RECLOSE_MAX];
} reclose;
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

/* ---------------------------------------------- will the new image be ours */

#if defined(__x86_64__)
#define CHELL_EM EM_X86_64
#elif defined(__aarch64__)
#define CHELL_EM EM_AARCH64
#else
#define CHELL_EM EM_NONE /* unknown target: every image counts as foreign */
#endif

/*
 * Does the program at (dirfd, path) load libchell.so? Only a dynamically
 * linked ELF image of our machine and class does (the exec wrappers always
 * put Chell in LD_PRELOAD), or a script whose interpreter does; not a
 * statically linked program, not a set-user/group-ID image that changes
 * the credentials (secure execution ignores LD_PRELOAD paths), not a
 * foreign format. When unsure, the answer is no: the descriptors then
 * escape, which is always correct, only slower.
 */
static bool image_loads_chell(int dirfd, const char *path, int at_flags, int depth)
{
	if (depth > 4) /* the kernel's own limit on #! nesting */
		return false;
	if (!path)
		return true; /* the exec fails (EFAULT): nothing leaves Chell */
	/* The kernel reads path (a bad pointer gives EFAULT here, no signal). */
	int fd = sys_openat(dirfd, path,
			    O_RDONLY | O_CLOEXEC | ((at_flags & AT_SYMLINK_NOFOLLOW) ? O_NOFOLLOW : 0), 0);
	if (fd == -ENOENT && (at_flags & AT_EMPTY_PATH)) {
		char self[CHELL_FD_PATH_MAX]; /* execveat(fd, "", AT_EMPTY_PATH), fexecve */
		fd = sys_open(chell_fd_path(self, dirfd), O_RDONLY | O_CLOEXEC, 0);
	}
	if (fd < 0)
		return false;
	unsigned char hdr[512];
	struct stat st;
	ssize_t n = sys_pread(fd, hdr, sizeof(hdr), 0);
	bool ok = false;
	if (n < 4 || sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    ((st.st_mode & S_ISUID) && st.st_uid != getuid()) ||
	    ((st.st_mode & S_ISGID) && st.st_gid != getgid())) {
		ok = false;
	} else if (hdr[0] == '#' && hdr[1] == '!') {
		/* "#! /path/interp [arg]": the interpreter decides */
		char interp[PATH_MAX];
		size_t i = 2, k = 0;
		while (i < (size_t)n && (hdr[i] == ' ' || hdr[i] == '\t'))
			i++;
		while (i < (size_t)n && hdr[i] != ' ' && hdr[i] != '\t' && hdr[i] != '\n' &&
		       k + 1 < sizeof(interp))
			interp[k++] = (char)hdr[i++];
		interp[k] = 0;
		ok = k > 0 && image_loads_chell(AT_FDCWD, interp, 0, depth + 1);
	} else if ((size_t)n >= sizeof(Elf64_Ehdr) && memcmp(hdr, ELFMAG, SELFMAG) == 0 &&
		   hdr[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		memcpy(&eh, hdr, sizeof(eh));
		if (eh.e_machine == CHELL_EM && eh.e_phentsize == sizeof(Elf64_Phdr) &&
		    eh.e_phnum > 0 && eh.e_phnum < 256) {
			/* dynamically linked = it names an interpreter (ld.so) */
			for (int i = 0; i < eh.e_phnum && !ok; i++) {
				Elf64_Phdr ph;
				if (sys_pread(fd, &ph, sizeof(ph),
					      (off_t)(eh.e_phoff + (uint64_t)i * sizeof(ph))) !=
				    (ssize_t)sizeof(ph))
					break;
				ok = ph.p_type == PT_INTERP;
			}
		}
	}
	sys_close(fd);
	return ok;
}

/* execvp's search: the first executable regular file named `file` in PATH. */
static bool searched_image_loads_chell(const char *file)
{
	if (strchr(file, '/'))
		return image_loads_chell(AT_FDCWD, file, 0, 0);
	const char *path = getenv("PATH");
	if (!path)
		path = "/bin:/usr/bin";
	char cand[PATH_MAX];
	for (const char *p = path;; p++) {
		const char *e = strchr(p, ':');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		int w = len ? snprintf(cand, sizeof(cand), "%.*s/%s", (int)len, p, file)
			    : snprintf(cand, sizeof(cand), "%s", file);
		struct stat st;
		if (w > 0 && (size_t)w < sizeof(cand) && access(cand, X_OK) == 0 &&
		    sys_fstatat(AT_FDCWD, cand, &st, 0) == 0 && S_ISREG(st.st_mode))
			return image_loads_chell(AT_FDCWD, cand, 0, 0);
		if (!e)
			return false;
		p = e;
	}
}

static bool target_loads_chell(const struct exec_target *t)
{
	if (!t)
		return true;
	if (t->search)
		return searched_image_loads_chell(t->path);
	if (!t->path)
		return image_loads_chell(t->dirfd, "", AT_EMPTY_PATH, 0);
	return image_loads_chell(t->dirfd, t->path, t->at_flags, 0);
}

/* ------------------------------------------------------------ the handoff */

char **handoff_prepare_exec(char *const envp[], const struct exec_target *target)
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
	if (ofd_table_fd() >= 0)
		len = (size_t)snprintf(h, cap, "v1;r=%d;", ofd_table_fd());
	dropped.n = 0;
	char rel[8192];
	size_t rlen = 0;
	rel[0] = 0;
	int max = ofd_table_fd() >= 0 ? fdt_max() : -1;
	/* A new image Chell does not load into uses the kernel's offsets of
	 * every descriptor it inherits, and keeps using them while this tree
	 * does too: those descriptions move to the kernel path for good. (The
	 * escape may talk to the cache manager: not under the table lock.) */
	int loads = -1; /* decided once, only if a descriptor needs it */
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (!f || f == FILE_CLOSING)
			continue;
		int fl = sys_fcntl(fd, F_GETFD, 0);
		if (fl < 0 || (fl & FD_CLOEXEC))
			continue;
		if (loads < 0)
			loads = target_loads_chell(target);
		if (loads)
			break;
		chell_fd_escape(fd, CHELL_OP_EXEC);
	}
	reclose.n = 0;
	fdt_lock();
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (!f || f == FILE_CLOSING)
			continue;
		int fl = sys_fcntl(fd, F_GETFD, 0);
		if (fl >= 0 && (fl & FD_CLOEXEC) &&
		    atomic_load((_Atomic uint32_t *)&f->ofd->refs) == 1 && reclose.n < RECLOSE_MAX &&
		    (loads >= 0 || (loads = target_loads_chell(target)) >= 0) && loads) {
			/* The OFD's last descriptor dies with the exec. Its last close
			 * must still run every layer's detach and release with a live
			 * descriptor (cache mode writes back for a checker there): a
			 * duplicate that survives carries the reference, and the new
			 * image adopts it and closes it through the hub at once. */
			int dup = chell_nofile_dup_high(fd); /* not one of the application's numbers */
			if (dup < 0)
				dup = sys_fcntl(fd, F_DUPFD, chell_internal_floor());
			if (dup >= 0) {
				hub_sync_out(f, fd, CHELL_OP_EXEC);
				if (len + 40 > cap) {
					char *nh = realloc(h, cap *= 2);
					if (!nh) {
						sys_close(dup);
						break;
					}
					h = nh;
				}
				len += (size_t)snprintf(h + len, cap - len, "%d:%u:%u,", dup, f->slot,
							f->ofd->gen);
				reclose.fds[reclose.n++] = dup;
				continue;
			}
		}
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
		hub_sync_out(f, fd, CHELL_OP_EXEC); /* e.g. direct: the kernel offset */
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
	for (int i = 0; i < reclose.n; i++) { /* ";c=fd,fd": adopt, then close */
		if (len + 16 > cap) {
			char *nh = realloc(h, cap *= 2);
			if (!nh)
				break;
			h = nh;
		}
		len += (size_t)snprintf(h + len, cap - len, "%s%d,", i ? "" : ";c=", reclose.fds[i]);
	}
	ofd_table_set_cloexec(0);

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
	for (int i = 0; i < reclose.n; i++)
		sys_close(reclose.fds[i]); /* plain duplicates: never in the table */
	reclose.n = 0;
	for (int i = 0; i < dropped.n; i++) {
		struct chell_ofd *o = ofd_table_slot(dropped.slots[i]);
		if (o)
			atomic_fetch_add((_Atomic uint32_t *)&o->refs, 1);
	}
	dropped.n = 0;
	ofd_table_set_cloexec(1);
}

/* This image runs without Chell (bad configuration): the region's memfd and
 * the duplicates the previous image made for its own bookkeeping ("c=")
 * are not the application's, so they go; the rest is left unused. */
void handoff_abandon(void)
{
	const char *h = getenv("CHELL_HANDOFF");
	int rfd;
	if (h && sscanf(h, "v1;r=%d;", &rfd) == 1 && rfd > 2)
		sys_close(rfd); /* the region's memfd */
	const char *p = h ? strstr(h, ";c=") : NULL;
	for (p = p ? p + 2 : NULL; p && *++p; p = strchr(p, ',')) {
		int fd;
		if (sscanf(p, "%d", &fd) == 1 && fd > 2)
			sys_close(fd);
		if (!strchr(p, ','))
			break;
	}
	if (h)
		unsetenv("CHELL_HANDOFF"); /* children must not close those numbers again */
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
	    ofd_table_attach(rfd) < 0) {
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
	while (p && *++p && *p != ';') {
		unsigned slot, gen;
		if (sscanf(p, "-:%u:%u", &slot, &gen) == 2)
			hub_release_orphan(slot, gen);
		p = strchr(p, ',');
	}
	/* the previous image's last descriptors of close-on-exec OFDs: their
	 * last close runs here, with the descriptor (see handoff_prepare_exec) */
	p = p && *p == ';' && strncmp(p, ";c=", 3) == 0 ? p + 2 : NULL;
	while (p && *++p) {
		int fd;
		if (sscanf(p, "%d", &fd) == 1 && fd >= 0) {
			if (fdt_peek(fd))
				hub_close(fd);
			else
				sys_close(fd);
		}
		p = strchr(p, ',');
	}
	free(copy);
}
