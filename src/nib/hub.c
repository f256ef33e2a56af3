/* SPDX-License-Identifier: MIT */
/*
 * The hub: start-up, handler stacks, and the lifetime of handled descriptors
 * (open, close, dup, adoption after exec, process exit).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dispatch.h"

int chell_active;
struct chell_config chell_cfg;

static const char *const op_names[CHELL_OP_COUNT_] = {
	[CHELL_OP_OPEN] = "open", [CHELL_OP_CLOSE] = "close", [CHELL_OP_READ] = "read",
	[CHELL_OP_PREAD] = "pread", [CHELL_OP_READV] = "readv", [CHELL_OP_PREADV] = "preadv",
	[CHELL_OP_PREADV2] = "preadv2", [CHELL_OP_WRITE] = "write", [CHELL_OP_PWRITE] = "pwrite",
	[CHELL_OP_WRITEV] = "writev", [CHELL_OP_PWRITEV] = "pwritev",
	[CHELL_OP_PWRITEV2] = "pwritev2", [CHELL_OP_LSEEK] = "lseek", [CHELL_OP_FSYNC] = "fsync",
	[CHELL_OP_FDATASYNC] = "fdatasync", [CHELL_OP_SYNC_FILE_RANGE] = "sync_file_range",
	[CHELL_OP_FTRUNCATE] = "ftruncate", [CHELL_OP_FALLOCATE] = "fallocate",
	[CHELL_OP_FSTAT] = "fstat", [CHELL_OP_FCNTL] = "fcntl", [CHELL_OP_DUP] = "dup",
	[CHELL_OP_MMAP] = "mmap", [CHELL_OP_TRUNCATE] = "truncate", [CHELL_OP_STAT] = "stat",
	[CHELL_OP_FORK] = "fork", [CHELL_OP_EXEC] = "exec", [CHELL_OP_STDIO] = "stdio",
	[CHELL_OP_EXIT] = "exit", [CHELL_OP_FORK_PREPARE] = "fork-prepare", [CHELL_OP_FORK_PARENT] = "fork-parent",
};

CHELL_EXPORT const char *chell_op_name(enum chell_op op)
{
	return (unsigned)op < CHELL_OP_COUNT_ && op_names[op] ? op_names[op] : "?";
}

CHELL_EXPORT const char *chell_setting(const char *key)
{
	if (!chell_cfg.values)
		return "";
	return chell_config_str(&chell_cfg, key);
}

/* Is key a setting of type t? A handler asking otherwise has a bug: say so
 * on stderr, but never stop the application for it. */
static bool setting_typed(const char *key, enum chell_setting_type t)
{
	int i = chell_setting_index(key);
	if (!chell_cfg.values)
		return false; /* no configuration (Chell is off): every setting reads as 0 */
	if (i >= 0 && chell_setting_defs[i].type == t)
		return true;
	chell_log("bug: setting '%s' asked for as a %s: %s", key,
		  t == CHELL_T_BOOL ? "boolean" : t == CHELL_T_UINT ? "integer" : "size",
		  i < 0 ? "no such setting" : "it is not of that type");
	return false;
}

CHELL_EXPORT int chell_setting_bool(const char *key)
{
	return setting_typed(key, CHELL_T_BOOL) ? chell_config_bool(&chell_cfg, key) : 0;
}

CHELL_EXPORT uint64_t chell_setting_uint(const char *key)
{
	return setting_typed(key, CHELL_T_UINT) ? chell_config_u64(&chell_cfg, key) : 0;
}

CHELL_EXPORT uint64_t chell_setting_size(const char *key)
{
	return setting_typed(key, CHELL_T_SIZE) ? chell_config_u64(&chell_cfg, key) : 0;
}

CHELL_EXPORT int chell_setting_shift(const char *key)
{
	uint64_t v = chell_setting_size(key);
	if (v < 4096 || (v & (v - 1)) || v > (1ull << 30)) {
		chell_log("%s must be a power of two between 4K and 1G", key);
		return -1;
	}
	return __builtin_ctzll(v);
}

/* Bad configuration: say so, then either run the program untouched on the
 * kernel path (never hurt the application) or stop, as on_error asks. */
static void init_failed(const char *what)
{
	chell_log("%s", what);
	const char *policy = chell_cfg.values ? chell_config_str(&chell_cfg, "on_error") : "";
	if (strcmp(policy, "abort") == 0)
		REAL(_exit)(2);
	chell_log("continuing without Chell: every file uses the kernel path");
	chell_active = 0;
	handoff_abandon();
}

static void log_level_from_config(void)
{
	const char *lv = chell_config_str(&chell_cfg, "log.level");
	chell_log_level = !strcmp(lv, "quiet") ? CHELL_LOG_QUIET
			  : !strcmp(lv, "info") ? CHELL_LOG_INFO
			  : !strcmp(lv, "debug") ? CHELL_LOG_DEBUG
						  : CHELL_LOG_ERROR;
}

__attribute__((constructor(101))) static void chell_init(void)
{
	char err[512];
	chell_real_resolve();
	chell_fsize_refresh();
	if (fdt_init() < 0) {
		chell_log("cannot allocate the descriptor table; Chell is disabled");
		handoff_abandon();
		return;
	}
	if (chell_config_load(&chell_cfg, NULL, err, sizeof(err)) < 0) {
		init_failed(err);
		return;
	}
	log_level_from_config();
	/* The tier model before any handler starts: they ask it which files
	 * it charges. */
	if (nib_tier_init(err, sizeof(err)) < 0) {
		init_failed(err);
		return;
	}
	/* The routing rules and their stacks (stacks.c), then each handler in
	 * use starts, once, whatever the number of rules that use it. */
	err[0] = 0;
	if (router_init(err, sizeof(err)) < 0 || stacks_proc_init(err, sizeof(err)) < 0) {
		init_failed(err[0] ? err : "bad path configuration");
		return;
	}
	chell_hazard_init();
	chell_uaccess_init();
	chell_fork_init();
	chell_active = 1;
	handoff_note_startup_env();
	handoff_adopt_from_env();
	for (int fd = 0; fd <= 2; fd++)
		if (fdt_peek(fd))
			stdio_fix_std_stream(fd);
	if (chell_log_level >= CHELL_LOG_INFO) {
		char names[256];
		stacks_names(names, sizeof(names));
		chell_info("stacks %s active", names);
	}
}

__attribute__((destructor)) static void chell_fini(void)
{
	if (!chell_active)
		return;
	if (fdt_cur()->vm_child) { /* exit() in a vfork-like child: the process goes on */
		hub_process_exit();
		return;
	}
	fflush(NULL); /* stdio streams on handled files reach their handlers first */
	chell_threads_halt_all();
	hub_proc_event(CHELL_OP_EXIT, -1);
	hub_process_exit();
}

static struct chell_file *forget_fd(int fd);

/* ------------------------------------------------------------------- open */

int hub_open(int dirfd, const char *path, int flags, mode_t mode, enum chell_op op)
{
	char abs[PATH_MAX];
	const struct chell_stack *st = NULL;
	/* O_PATH and directories carry no file data; O_TMPFILE has no name to route. */
	if (chell_active && path && !(flags & (O_PATH | O_DIRECTORY)) &&
	    (flags & O_TMPFILE) != O_TMPFILE)
		st = router_route(dirfd, path, abs, sizeof(abs));
	if (!st)
		return REAL(openat)(dirfd, path, flags, mode);

	/* No table lock while the handler opens: open() may block (a FIFO) or
	 * take long (a shadow copy). The new number is ours until we return it. */
	struct chell_file *f = file_alloc();
	uint32_t slot;
	if (!f || ofd_table_alloc_slot(&slot) < 0) {
		/* Out of slots or memory: the kernel path is always correct. */
		if (f)
			file_put(f);
		return REAL(openat)(dirfd, path, flags, mode);
	}
	f->slot = slot;
	f->ofd = ofd_table_slot(slot);
	f->ofd->stack_id = st->id;
	f->stack = st;
	f->path = strdup(abs);

	chell_ctx c = {f, -1, 0, op, abs};
	int fd = hub_call_open(&c, dirfd, path, flags, mode);
	if (fd < 0) {
		ofd_table_free_slot(slot);
		f->ofd = NULL;
		file_put(f);
		return (int)hub_ret(fd);
	}
	struct stat sb;
	if ((unsigned)fd >= chell_fdt_cap || sys_fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) ||
	    !router_dev_fast(abs, sb.st_dev)) {
		/* Not a regular file (a device, a FIFO), or routed by mount type
		 * but on a file system mounted there since the mount table was
		 * read: handlers let go, the descriptor stays open on the plain
		 * kernel path. */
		f->release_pending = 1;
		atomic_store((_Atomic uint32_t *)&f->ofd->refs, 0);
		file_put(f);
		return fd;
	}
	f->ofd->dev = sb.st_dev;
	f->ofd->ino = sb.st_ino;
	atomic_store((_Atomic int32_t *)&f->ofd->status_flags, sys_fcntl(fd, F_GETFL, 0));
	c.fd = fd;
	for (int i = st->depth - 1; i >= 0; i--) {
		if (st->handlers[i]->opened) {
			c.layer = i;
			st->handlers[i]->opened(&c);
		}
	}
	fdt_lock();
	struct chell_file *stale = forget_fd(fd); /* the number was closed behind our back */
	fdt_install(fd, f);
	fdt_unlock();
	if (stale)
		file_put(stale);
	return fd;
}

/* ------------------------------------------------------------------ close */

/* Forget fd without a kernel close (the kernel already dropped it, e.g. as
 * the target of dup2). Caller holds fdt_lock and must file_put() the result
 * AFTER fdt_unlock(): the last put waits for calls in flight on the file,
 * and those may need the table lock (direct mode maps chunks under it). */
static struct chell_file *forget_fd(int fd)
{
	struct chell_file *f = fdt_remove(fd);
	if (!f || f == FILE_CLOSING)
		return NULL;
	if (atomic_fetch_sub((_Atomic uint32_t *)&f->ofd->refs, 1) == 1)
		f->release_pending = 1;
	return f;
}

/*
 * The whole close runs under the table lock, with the entry parked on the
 * "closing" sentinel until the kernel descriptor is gone and the entry is
 * cleared. A call racing with it finds the sentinel and waits for the lock
 * (file_get_fd, file_enter), then looks again: it never reaches the kernel
 * descriptor behind the handler's back, and a new descriptor the kernel
 * hands out with the same number (a pipe in another thread) is never
 * mistaken for the closing file.
 */
int hub_close(int fd)
{
	if (unlikely(chell_is_internal_fd(fd)))
		return (int)hub_ret(-EBADF); /* to the application it does not exist */
	fdt_lock();
	struct chell_file *f = fdt_peek(fd);
	if (!f || f == FILE_CLOSING) {
		fdt_unlock();
		return REAL(close)(fd); /* the kernel's answer (EBADF for a double close) */
	}
	atomic_store(&fdt_cur()->e[fd], FILE_CLOSING);
	chell_ctx c = {f, fd, 0, CHELL_OP_CLOSE, NULL};
	int r = hub_call_close(&c); /* the kernel descriptor is gone after this */
	atomic_store(&fdt_cur()->e[fd], NULL);
	fdt_unlock();
	if (atomic_fetch_sub((_Atomic uint32_t *)&f->ofd->refs, 1) == 1)
		f->release_pending = 1;
	file_put(f);
	return (int)hub_ret(r);
}

/* -------------------------------------------------------------------- dup */

int hub_dup(int oldfd, enum hub_dup_kind kind, int arg, int flags, enum chell_op op, int *err)
{
	int r;
	int newfd = kind == HUB_DUP2 || kind == HUB_DUP3 ? arg : -1;
	if (newfd >= 0 && chell_is_internal_fd(newfd)) {
		/* Chell holds that number for a file of its own (see docs). It
		 * lies above the application's soft limit, where the kernel
		 * would say EBADF; only if there was no room there is it a
		 * number the application could have, and then it is busy. */
		*err = newfd >= chell_nofile_soft() ? EBADF : EBUSY;
		return -1;
	}
	fdt_lock();
	struct chell_file *f = fdt_peek(oldfd);
	if (f == FILE_CLOSING) {
		fdt_unlock();
		*err = EBADF;
		return -1;
	}
	switch (kind) {
	case HUB_DUP: r = REAL(dup)(oldfd); break;
	case HUB_DUPFD:
		r = REAL(fcntl64)(oldfd, (flags & O_CLOEXEC) ? F_DUPFD_CLOEXEC : F_DUPFD, arg);
		break;
	case HUB_DUP2: r = REAL(dup2)(oldfd, newfd); break;
	default: r = REAL(dup3)(oldfd, newfd, flags); break;
	}
	*err = errno;
	struct chell_file *gone = NULL;
	if (r >= 0 && r != oldfd) {
		gone = forget_fd(r); /* the kernel closed whatever r was */
		if (f && (unsigned)r < chell_fdt_cap) {
			file_ref(f);
			atomic_fetch_add((_Atomic uint32_t *)&f->ofd->refs, 1);
			fdt_install(r, f);
		}
	}
	fdt_unlock();
	if (gone)
		file_put(gone);
	if (r >= 0 && r != oldfd && f) {
		for (int i = 0; i < f->stack->depth; i++)
			if (f->stack->handlers[i]->dup) {
				chell_ctx c = {f, oldfd, i, op, NULL};
				f->stack->handlers[i]->dup(&c, r);
			}
	}
	if (r >= 0 && r <= 2 && r != oldfd)
		stdio_fix_std_stream(r);
	return r;
}

/* -------------------------------------------------------------- lifecycle */

void hub_proc_event(enum chell_op ev, long arg)
{
	if (!chell_active)
		return;
	stacks_proc_event(ev, arg);
	if (ev == CHELL_OP_EXIT)
		nib_tier_exit(); /* after the handlers, which may have written stats.file */
}

void hub_process_exit(void)
{
	fdt_drop_all(); /* every table of the process, as forget_fd would */
}

int hub_adopt(int fd, uint32_t slot, uint32_t gen)
{
	static struct {
		uint32_t slot;
		struct chell_file *f;
	} seen[256];
	static int nseen;
	struct chell_ofd *o = ofd_table_slot(slot);
	struct stat sb;
	const struct chell_stack *st = o ? stack_by_id(o->stack_id) : NULL;
	if (!o || !atomic_load((_Atomic uint32_t *)&o->in_use) || o->gen != gen ||
	    !st || (unsigned)fd >= chell_fdt_cap ||
	    sys_fstat(fd, &sb) < 0 || sb.st_dev != o->dev || sb.st_ino != o->ino)
		return -ESTALE;
	struct chell_file *f = NULL;
	for (int i = 0; i < nseen; i++)
		if (seen[i].slot == slot)
			f = seen[i].f;
	fdt_lock();
	if (f) {
		file_ref(f);
		fdt_install(fd, f);
		fdt_unlock();
		return 0;
	}
	f = file_alloc();
	if (!f) {
		fdt_unlock();
		return -ENOMEM;
	}
	f->slot = slot;
	f->ofd = o;
	f->stack = st;
	char link[CHELL_FD_PATH_MAX], target[PATH_MAX];
	ssize_t n = sys_readlink(chell_fd_path(link, fd), target, sizeof(target) - 1);
	f->path = strdup(n > 0 ? (target[n] = 0, target) : "?");
	fdt_install(fd, f);
	fdt_unlock();
	if (nseen < 256) {
		seen[nseen].slot = slot;
		seen[nseen++].f = f;
	}
	for (int i = st->depth - 1; i >= 0; i--) {
		const struct chell_handler *h = st->handlers[i];
		chell_ctx c = {f, fd, i, CHELL_OP_EXEC, f->path};
		if (h->adopt)
			h->adopt(&c);
	}
	return 0;
}

/* An OFD whose last descriptors were close-on-exec in the previous image:
 * run the release hooks here, where the handlers live again. */
void hub_release_orphan(uint32_t slot, uint32_t gen)
{
	struct chell_ofd *o = ofd_table_slot(slot);
	const struct chell_stack *st = o ? stack_by_id(o->stack_id) : NULL;
	if (!o || !atomic_load((_Atomic uint32_t *)&o->in_use) || o->gen != gen || !st ||
	    atomic_load((_Atomic uint32_t *)&o->refs) != 0)
		return;
	struct chell_file *f = file_alloc();
	if (!f)
		return;
	f->slot = slot;
	f->ofd = o;
	f->stack = st;
	f->release_pending = 1;
	file_put(f);
}
