/* SPDX-License-Identifier: MIT */
/*
 * shadow - a checker handler. Every operation on a handled file runs twice:
 * on the file through the handler stack under test, and through the posix
 * handler on a shadow copy in shadow.dir. Results, returned bytes, file
 * offsets, sizes and written data are compared; the first difference writes
 * a report (what differed plus the recent operation history) and aborts.
 *
 * This file: configuration, the shared per-inode table, shadow copies,
 * descriptor lifetime (open/adopt/close/detach/release), path operations and
 * the divergence report. shadow_ops.c holds the per-descriptor operations.
 *
 * Locking. The table has one global lock (entry lookup/allocation, shadow
 * copy creation) and one lock per inode held around each primary+shadow pair,
 * so two descriptors on the same file - in different threads or processes -
 * never interleave between the two halves of an operation. Order: global
 * before inode, never the reverse. Both live in shared memory and use
 * shadow_lock (not the hub's chell_lock) because a waiter must also treat a
 * zombie holder as dead: a parent blocked on the lock does not reap the child
 * that died holding it.
 */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "chell/handler.h"
#include "chell/sys.h"
#include "shadow.h"
#include "../nib/nib.h" /* fdt_peek: is a descriptor still the file we were given? */

struct shadow_table *shadow_tab;
char shadow_dir[PATH_MAX];
static char report_tmpl[PATH_MAX];
static int keep_copies; /* shadow.keep */
static long shadow_dir_magic = -1; /* file system type of shadow.dir */

/* ------------------------------------------------------------ lock tracking */

/*
 * Locks this thread holds, so a divergence can release them before aborting
 * (other processes of the tree then go on, or report their own divergence,
 * instead of waiting for our death to be noticed).
 */
static __thread struct shadow_lock *held[4];
static __thread int nheld;

void shadow_lock_push(struct shadow_lock *l)
{
	shadow_lock_acquire(l);
	if (nheld < 4)
		held[nheld] = l;
	nheld++;
}

void shadow_lock_pop(struct shadow_lock *l)
{
	nheld--;
	shadow_lock_release(l);
}

static void release_all_held(void)
{
	while (nheld > 0) {
		nheld--;
		if (nheld < 4)
			shadow_lock_release(held[nheld]);
	}
}

/* ------------------------------------------------------------ configuration */

/*
 * mkdir -p with raw calls; 0 or -errno. The last component, if created
 * here, is made world-writable (0777, whatever the umask): every process of
 * the tree keeps its copies there, including one that has changed its user
 * or group since (setuid, seteuid, setgid) - like the file system it mirrors,
 * which let it create the file. A directory that already exists is left as
 * it is; a process that cannot create or open its copy there leaves that
 * file unchecked (logged), never reports a divergence for it.
 */
static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX];
	size_t n = strlen(dir);
	if (n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		char saved = buf[i];
		buf[i] = '\0';
		int r = sys_mkdir(buf, 0755);
		if (r < 0 && r != -EEXIST)
			return r;
		buf[i] = saved;
	}
	struct stat st;
	int r = sys_fstatat(AT_FDCWD, dir, &st, 0);
	if (r < 0)
		return r;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int make_shadow_dir(const char *dir)
{
	struct stat st;
	int existed = sys_fstatat(AT_FDCWD, dir, &st, 0) == 0;
	int r = mkdir_p(dir);
	if (r == 0 && !existed)
		CHELL_SC(SYS_fchmodat, AT_FDCWD, dir, 0777, 0, 0, 0);
	return r;
}

static long fs_magic(int fd);

static int shadow_proc_init(void)
{
	const char *d = chell_setting("shadow.dir");
	if (!d || !*d)
		d = "/tmp/chell-shadow";
	/*
	 * Every process of the tree must agree on the directory (the inode
	 * table names copies relative to it), so a relative setting is made
	 * absolute now and '%p' is not expanded here.
	 */
	if (d[0] != '/') {
		char cwd[PATH_MAX];
		long r = sys_getcwd(cwd, sizeof(cwd));
		if (r < 0 || (size_t)snprintf(shadow_dir, sizeof(shadow_dir), "%s/%s", cwd, d) >=
				     sizeof(shadow_dir)) {
			chell_log("shadow: cannot make shadow.dir '%s' absolute", d);
			return -1;
		}
	} else if ((size_t)snprintf(shadow_dir, sizeof(shadow_dir), "%s", d) >= sizeof(shadow_dir)) {
		chell_log("shadow: shadow.dir is too long");
		return -1;
	}
	if (strlen(shadow_dir) + SHADOW_NAME_BUF + 2 > PATH_MAX) {
		chell_log("shadow: shadow.dir %s is too long", shadow_dir);
		return -1;
	}
	int r = make_shadow_dir(shadow_dir);
	if (r < 0) {
		chell_log("shadow: cannot create shadow.dir %s: %s", shadow_dir, strerror(-r));
		return -1;
	}
	/* Writable? Try it: access(2) answers for the real uid, not for us. */
	char probe[PATH_MAX];
	if ((size_t)snprintf(probe, sizeof(probe), "%s/.chell-probe.%d", shadow_dir,
			     (int)sys_getpid()) >= sizeof(probe)) {
		chell_log("shadow: shadow.dir is too long");
		return -1;
	}
	int fd = sys_open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		chell_log("shadow: shadow.dir %s is not writable: %s", shadow_dir, strerror(-fd));
		return -1;
	}
	shadow_dir_magic = fs_magic(fd);
	sys_close(fd);
	sys_unlink(probe);
	keep_copies = chell_setting_bool("shadow.keep");

	uint64_t hist = chell_setting_uint("shadow.history");
	if (hist > 1000000)
		hist = 1000000;
	if (shadow_hist_init((unsigned)hist) < 0) {
		chell_log("shadow: no memory for a history of %lu operations", (unsigned long)hist);
		return -1;
	}

	const char *rp = chell_setting("shadow.report");
	int n;
	if (rp && *rp) {
		if (rp[0] == '/') {
			n = snprintf(report_tmpl, sizeof(report_tmpl), "%s", rp);
		} else {
			char cwd[PATH_MAX];
			if (sys_getcwd(cwd, sizeof(cwd)) < 0)
				cwd[0] = '\0';
			n = snprintf(report_tmpl, sizeof(report_tmpl), "%s/%s", cwd, rp);
		}
	} else {
		n = snprintf(report_tmpl, sizeof(report_tmpl), "%s/divergence.%%p.txt", shadow_dir);
	}
	if (n < 0 || (size_t)n >= sizeof(report_tmpl)) {
		chell_log("shadow: the shadow.report path is too long");
		return -1;
	}
	return 0;
}

/* --------------------------------------------------------------- the table */

struct shadow_table *shadow_table_get(void)
{
	/*
	 * Looked up lazily, not in proc_init: after exec the constructor runs
	 * proc_init before the inherited region is attached, and asking then
	 * would create a second, private region.
	 */
	struct shadow_table *t = __atomic_load_n(&shadow_tab, __ATOMIC_ACQUIRE);
	if (t)
		return t;
	t = chell_shared_area("shadow.inodes", sizeof(struct shadow_table));
	if (!t)
		chell_log("shadow: no room for the inode table in the shared region");
	__atomic_store_n(&shadow_tab, t, __ATOMIC_RELEASE);
	return t;
}

int chell_shadow_open_inodes(void)
{
	struct shadow_table *t = shadow_table_get();
	int n = 0;
	if (!t)
		return 0;
	for (int i = 0; i < SHADOW_INODES; i++)
		if (__atomic_load_n(&t->ent[i].opens, __ATOMIC_RELAXED))
			n++;
	return n;
}

void shadow_entry_path(const struct shadow_inode *e, char *out, size_t outlen)
{
	/* proc_init keeps shadow_dir short enough for any entry name. */
	size_t d = strlen(shadow_dir), n = strnlen(e->name, SHADOW_NAME_BUF - 1);
	if (d + 1 + n + 1 > outlen) {
		out[0] = '\0';
		return;
	}
	memcpy(out, shadow_dir, d);
	out[d] = '/';
	memcpy(out + d + 1, e->name, n);
	out[d + 1 + n] = '\0';
}

static struct shadow_inode *find_live(struct shadow_table *t, uint64_t dev, uint64_t ino)
{
	for (int i = 0; i < SHADOW_INODES; i++) {
		struct shadow_inode *e = &t->ent[i];
		if (e->opens && e->dev == dev && e->ino == ino)
			return e;
	}
	return NULL;
}

static int name_in_use(struct shadow_table *t, const char *name)
{
	for (int i = 0; i < SHADOW_INODES; i++)
		if (t->ent[i].opens && strcmp(t->ent[i].name, name) == 0)
			return 1;
	return 0;
}

/*
 * The shadow name for a new entry: the mangled path, unless a live entry
 * already uses it (the path was unlinked or renamed while open and a new
 * file now has that name), then "<mangled>~2", "~3", ...
 */
static void pick_name(struct shadow_table *t, const char *path, char name[SHADOW_NAME_BUF])
{
	char base[SHADOW_NAME_BUF];
	shadow_mangle(path, base);
	/* base is at most SHADOW_NAME_MAX (200) bytes: the suffix always fits. */
	memcpy(name, base, SHADOW_NAME_BUF);
	for (int k = 2; name_in_use(t, name); k++)
		if (snprintf(name, SHADOW_NAME_BUF, "%s~%d", base, k) >= SHADOW_NAME_BUF)
			break;
}

void shadow_mark_mapped(uint64_t dev, uint64_t ino)
{
	struct shadow_table *t = shadow_table_get();
	if (!t)
		return;
	uint32_t n = __atomic_fetch_add(&t->nmapped, 1, __ATOMIC_RELAXED);
	if (n >= SHADOW_MAPPED_MAX) {
		/* Full: this inode is unmarked once its entry is freed (logged). */
		chell_log("shadow: more than %d files mapped shared; a reopen of one may report"
			  " stores made through an old mapping", SHADOW_MAPPED_MAX);
		return;
	}
	t->mapped[n].dev = dev;
	t->mapped[n].ino = ino;
	__atomic_store_n(&t->mapped[n].ready, 1, __ATOMIC_RELEASE);
}

static int was_mapped(struct shadow_table *t, uint64_t dev, uint64_t ino)
{
	uint32_t n = __atomic_load_n(&t->nmapped, __ATOMIC_RELAXED);
	if (n > SHADOW_MAPPED_MAX)
		n = SHADOW_MAPPED_MAX;
	for (uint32_t i = 0; i < n; i++)
		if (__atomic_load_n(&t->mapped[i].ready, __ATOMIC_ACQUIRE) &&
		    t->mapped[i].dev == dev && t->mapped[i].ino == ino)
			return 1;
	return 0;
}

static struct shadow_inode *alloc_entry(struct shadow_table *t)
{
	for (int i = 0; i < SHADOW_INODES; i++)
		if (t->ent[i].opens == 0)
			return &t->ent[i];
	return NULL;
}

/* --------------------------------------------------------- shadow copies */

static void *map_anon(size_t len)
{
	long r = CHELL_SC(SYS_mmap, 0, len, 3 /* RW */, 0x22 /* PRIVATE|ANON */, -1, 0);
	return (r < 0 && r > -4096) ? NULL : (void *)r;
}

static void unmap(void *p, size_t len)
{
	CHELL_SC(SYS_munmap, p, len, 0, 0, 0, 0);
}

static void mirror_owner(int fd, const struct stat *st);

/*
 * Every file shadow opens for itself (copies, the file's read-only views,
 * transient descriptors) is opened here, so that one place decides where
 * Chell's own descriptors go: above the application's soft RLIMIT_NOFILE
 * (chell_internal_openat), so that shadow costs the application no
 * descriptor number and opens even when the application has used up its
 * limit. Where even that fails (a hard limit the process may not raise),
 * the file goes unchecked (see shadow_open), never a wrong answer.
 */
int shadow_own_open(const char *path, int flags, mode_t mode)
{
	return chell_internal_openat(AT_FDCWD, path, flags, mode);
}

int shadow_own_open_noatime(const char *path, int flags)
{
	int fd = shadow_own_open(path, flags | O_NOATIME, 0);
	return fd == -EPERM ? shadow_own_open(path, flags, 0) : fd;
}

/* Copy [pos, end) of in to out at the same offsets. 0 or -errno. */
static int copy_extent(int in, int out, off_t pos, off_t end)
{
	while (pos < end) {
		off_t ip = pos, op = pos;
		ssize_t n = sys_copy_file_range(in, &ip, out, &op, (size_t)(end - pos));
		if (n > 0) {
			pos += n;
			continue;
		}
		if (n == 0)
			return 0; /* the source shrank meanwhile */
		if (n != -EXDEV && n != -EINVAL && n != -ENOSYS && n != -EOPNOTSUPP)
			return (int)n;
		/* Different file systems (or none supports it): plain copy. */
		size_t cap = 1 << 20;
		char *buf = map_anon(cap);
		if (!buf)
			return -ENOMEM;
		int err = 0;
		while (pos < end && !err) {
			size_t want = (size_t)(end - pos) < cap ? (size_t)(end - pos) : cap;
			ssize_t r = sys_pread(in, buf, want, pos);
			if (r <= 0) {
				err = (int)r;
				break;
			}
			for (ssize_t w = 0; w < r;) {
				ssize_t k = sys_pwrite(out, buf + w, (size_t)(r - w), pos + w);
				if (k < 0) {
					err = (int)k;
					break;
				}
				w += k;
			}
			pos += r;
		}
		unmap(buf, cap);
		return err;
	}
	return 0;
}

/*
 * Make dst a fresh, exact copy of src: same size, same data, same holes
 * (data extents found with SEEK_DATA/SEEK_HOLE, so a sparse file stays
 * sparse), same permission bits. Created under a new inode (unlink first)
 * so a shadow still open under this name for an older file is untouched.
 */
static int copy_file(const char *src, int follow, const char *dst)
{
	int in = shadow_own_open(src, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW), 0);
	if (in < 0)
		return in;
	struct stat st;
	int r = sys_fstat(in, &st);
	if (r < 0) {
		sys_close(in);
		return r;
	}
	sys_unlink(dst);
	int out = shadow_own_open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
	if (out < 0) {
		sys_close(in);
		return out;
	}
	off_t pos = 0, size = st.st_size;
	while (pos < size && r == 0) {
		off_t data = sys_lseek(in, pos, SEEK_DATA);
		if (data == -ENXIO)
			break; /* only a hole remains */
		if (data < 0)
			data = pos; /* no SEEK_DATA support: everything is data */
		off_t hole = sys_lseek(in, data, SEEK_HOLE);
		if (hole < 0 || hole > size)
			hole = size;
		r = copy_extent(in, out, data, hole);
		pos = hole;
	}
	if (r == 0)
		r = sys_ftruncate(out, size);
	if (r == 0)
		mirror_owner(out, &st);
	sys_close(in);
	sys_close(out);
	if (r < 0)
		sys_unlink(dst);
	return r;
}

/*
 * Give the copy the file's owner, group and mode, so that a later open by a
 * process with other credentials (after setuid/setgid, or one that created
 * the file in a set-group-ID directory) meets the same permission checks on
 * both. The owner can be set only with the privilege to do so; without it
 * the copy is ours, like the file that we were allowed to create or open.
 * Mode last: chown clears the set-ID bits.
 */
static void mirror_owner(int fd, const struct stat *st)
{
	CHELL_SC(SYS_fchown, fd, st->st_uid, st->st_gid, 0, 0, 0);
	CHELL_SC(SYS_fchmod, fd, st->st_mode & 07777, 0, 0, 0, 0);
}

/* Remove a stale shadow (file or, from an older run, a directory). */
static void remove_shadow(const char *spath)
{
	if (sys_unlink(spath) == -EISDIR)
		CHELL_SC(SYS_unlinkat, AT_FDCWD, spath, AT_REMOVEDIR, 0, 0, 0);
}

static long fs_magic(int fd)
{
	struct statfs sf;
	if (CHELL_SC(SYS_fstatfs, fd, &sf, 0, 0, 0, 0) < 0)
		return -1;
	return (long)sf.f_type;
}

static const char *fs_name(long m)
{
	switch (m) {
	case TMPFS_MAGIC: return "tmpfs";
	case EXT4_SUPER_MAGIC: return "ext2/3/4";
	case XFS_SUPER_MAGIC: return "xfs";
	case BTRFS_SUPER_MAGIC: return "btrfs";
	case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
	default: return "other";
	}
}

/* ------------------------------------------------------------- operations */

static struct shadow_priv *priv_of(chell_ctx *c)
{
	return (struct shadow_priv *)c->f->ofd->priv[c->layer];
}

static struct shadow_local *local_of(chell_ctx *c)
{
	return (struct shadow_local *)c->f->local[c->layer];
}

struct shadow_inode *shadow_op_begin(chell_ctx *c, struct shadow_op *o)
{
	if (!c->f || !c->f->ofd)
		return NULL;
	struct shadow_priv *p = priv_of(c);
	if (!p->ent || !shadow_tab ||
	    atomic_load_explicit((_Atomic uint32_t *)&p->escaped, memory_order_relaxed))
		return NULL;
	struct shadow_local *l = local_of(c);
	o->c = c;
	o->e = &shadow_tab->ent[p->ent - 1];
	o->sfd = l && l->sfd >= 0 ? l->sfd : p->sfd;
	o->h = NULL;
	chell_crit_enter();
	shadow_lock_push(&o->e->lock);
	/*
	 * Another thread closed this descriptor between the hub's lookup and
	 * now (the close itself waits for this lock before the kernel close,
	 * but the number may already be gone or reused). Whatever the number
	 * names now, the shadow of *this* description cannot mirror it: pass
	 * the operation down unchecked. The same for a file whose copy could not
	 * follow it (SHADOW_F_OFF).
	 */
	if ((c->op != CHELL_OP_CLOSE && c->fd >= 0 && fdt_peek(c->fd) != c->f) ||
	    (o->e->flags & SHADOW_F_OFF)) {
		shadow_lock_pop(&o->e->lock);
		chell_crit_leave();
		return NULL;
	}
	return o->e;
}

void shadow_op_end(struct shadow_op *o)
{
	shadow_lock_pop(&o->e->lock);
	chell_crit_leave();
}

chell_ctx shadow_ref_ctx(const struct shadow_op *o)
{
	chell_ctx s = *o->c;
	s.fd = o->sfd;
	s.layer = 0;
	return s;
}

/* ------------------------------------------------------------------ report */

static void expand_report_path(char *out, size_t outlen)
{
	chell_expand_pid(report_tmpl, out, outlen);
}

static void __attribute__((noreturn)) diverge_text(const struct shadow_op *o, const char *msg)
{
	static char what[16384];
	struct shadow_buf b = {what, 0, sizeof(what)};
	chell_ctx *c = o ? o->c : NULL;
	char spath[PATH_MAX] = "?";
	if (o && o->e)
		shadow_entry_path(o->e, spath, sizeof(spath));
	if (c) {
		sb_printf(&b, "operation: %s on fd %d\n", chell_op_name(c->op), c->fd);
		const char *path = c->path ? c->path : (c->f && c->f->path ? c->f->path : "?");
		sb_printf(&b, "file:      %s\n", path);
		if (c->fd >= 0) {
			/* What the kernel thinks the descriptor is: a mismatch means
			 * the descriptor table is wrong, not the file's data. */
			char link[CHELL_FD_PATH_MAX], target[PATH_MAX];
			ssize_t n = sys_readlink(chell_fd_path(link, c->fd), target, sizeof(target) - 1);
			if (n > 0) {
				target[n] = '\0';
				sb_printf(&b, "kernel fd: %d -> %s%s\n", c->fd, target,
					  strcmp(target, path) ? "  (NOT the file above!)" : "");
			}
		}
		sb_printf(&b, "thread:    %d\n", (int)sys_gettid());
	}
	sb_printf(&b, "shadow:    %s\n", spath);
	/* the layer below shadow in this file's stack (posix itself if none) */
	const struct chell_stack *st = c && c->f ? c->f->stack : NULL;
	const char *under_test = st && c->layer + 1 < st->depth ? st->handlers[c->layer + 1]->name
								  : "posix";
	sb_printf(&b, "checking:  [%s] against posix on the shadow copy\n", under_test);
	if (o && o->e && !(o->e->flags & SHADOW_F_SAME_FS))
		sb_printf(&b, "note:      the file is on %s, its shadow on %s; results that depend"
			  " on the file system (holes, fallocate modes, O_DIRECT) may differ for"
			  " that reason alone\n",
			  c && c->fd >= 0 ? fs_name(fs_magic(c->fd)) : "?", fs_name(fs_magic(o->sfd)));
	if (o && o->e && (o->e->flags & SHADOW_F_MAPPED))
		sb_puts(&b, "note:      the file is mapped shared and writable: its data and holes are"
			" not compared\n");
	if (o && o->e && (o->e->flags & SHADOW_F_NODATA))
		sb_puts(&b, "note:      the copy could not follow a file-system-dependent result: its"
			" data is not compared\n");
	sb_puts(&b, "what:      ");
	sb_puts(&b, msg);
	sb_puts(&b, "\n");

	release_all_held();
	char rpath[PATH_MAX];
	expand_report_path(rpath, sizeof(rpath));
	shadow_report_and_abort(rpath, what, b.len);
}

void shadow_diverge(const struct shadow_op *o, const char *fmt, ...)
{
	static char msg[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	diverge_text(o, msg);
}

static void hex_window(struct shadow_buf *b, const unsigned char *p, size_t from, size_t n)
{
	for (size_t i = from; i < n && i < from + 16; i++)
		sb_printf(b, " %02x", p[i]);
}

void shadow_diverge_data(const struct shadow_op *o, const char *what, uint64_t at,
			 const unsigned char *want, const unsigned char *got, size_t n)
{
	static char msg[4096];
	struct shadow_buf b = {msg, 0, sizeof(msg)};
	size_t i = 0;
	while (i < n && want[i] == got[i])
		i++;
	sb_printf(&b, "%s: data differs at file offset %llu\n", what,
		  (unsigned long long)(at + i));
	sb_printf(&b, "           expected (shadow) at %llu:", (unsigned long long)(at + i));
	hex_window(&b, want, i, n);
	sb_printf(&b, "\n           got (under test) at %llu:", (unsigned long long)(at + i));
	hex_window(&b, got, i, n);
	diverge_text(o, msg);
}

static const char *rname(long r, char *buf, size_t n)
{
	if (r < 0 && r > -4096) {
		const char *e = shadow_errname(-r);
		snprintf(buf, n, "-%s", e ? e : "?");
	} else {
		snprintf(buf, n, "%ld", r);
	}
	return buf;
}

/* -------------------------------------------------------------------- open */

static int dir_exists(const char *path)
{
	char parent[PATH_MAX];
	size_t n = strlen(path);
	if (n >= sizeof(parent))
		return 0;
	memcpy(parent, path, n + 1);
	char *slash = strrchr(parent, '/');
	if (!slash)
		return 0;
	if (slash == parent)
		slash[1] = '\0';
	else
		*slash = '\0';
	struct stat st;
	return sys_fstatat(AT_FDCWD, parent, &st, 0) == 0 && S_ISDIR(st.st_mode);
}

static int unmirrored_err(int r)
{
	return r == -EACCES || r == -EPERM || r == -EMFILE || r == -ENFILE;
}

static int shadow_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	struct shadow_table *t = shadow_table_get();
	const char *abs = c->path;
	if (!t || !abs || !c->f || !c->f->ofd)
		return chell_down_open(c, dirfd, path, flags, mode);

	struct stat st;
	int follow = !(flags & O_NOFOLLOW);
	int sr = sys_fstatat(AT_FDCWD, abs, &st, follow ? 0 : AT_SYMLINK_NOFOLLOW);
	/*
	 * Only regular files, and missing files whose directory exists, can be
	 * mirrored. Anything else (a device, a FIFO, a bad path component)
	 * goes to the handler under test alone: a path error cannot be
	 * reproduced under shadow.dir, and the hub keeps non-regular files on
	 * the kernel path anyway.
	 */
	int missing = (sr == -ENOENT && dir_exists(abs));
	if (!(sr == 0 && S_ISREG(st.st_mode)) && !missing)
		return chell_down_open(c, dirfd, path, flags, mode);

	chell_crit_enter();
	shadow_lock_push(&t->glock);

	struct shadow_op o = {c, NULL, -1, NULL};
	struct shadow_inode *e = missing ? NULL : find_live(t, st.st_dev, st.st_ino);
	struct shadow_inode fresh;
	char spath[PATH_MAX];
	int err = 0;
	if (e) {
		shadow_lock_push(&e->lock); /* an O_TRUNC must not split another's op */
	} else {
		memset(&fresh, 0, sizeof(fresh));
		fresh.flags = SHADOW_F_SAME_FS; /* unknown yet: no file system note */
		pick_name(t, abs, fresh.name);
		shadow_entry_path(&fresh, spath, sizeof(spath));
		if (missing) {
			remove_shadow(spath);
		} else {
			/* First open of this inode in the tree: refresh the copy. */
			err = copy_file(abs, follow, spath);
			if (err < 0) {
				chell_log("shadow: cannot copy %s to %s (shadow.dir %s): %s; not checked",
					  abs, spath, shadow_dir, strerror(-err));
			}
		}
	}
	if (err < 0) {
		/* No copy (no room, no descriptor, no permission in shadow.dir
		 * for this process's credentials): the open is the application's
		 * business, only the checking is lost. */
		shadow_lock_pop(&t->glock);
		chell_crit_leave();
		return chell_down_open(c, dirfd, path, flags, mode);
	}
	if (e)
		shadow_entry_path(e, spath, sizeof(spath));

	int64_t a[2] = {flags, mode};
	o.e = e ? e : &fresh;
	o.h = shadow_hist_add(CHELL_OP_OPEN, -1, 2, a);
	int r1 = chell_down_open(c, dirfd, path, flags, mode);
	/*
	 * Permission errors come from the credentials against the owner and
	 * mode of the file and of the directories on its path; the flat
	 * shadow.dir mirrors none of the directories. Descriptor exhaustion is
	 * the process's. Neither can be reproduced on the copy: when the file
	 * says so, the copy is not asked.
	 */
	int r2 = unmirrored_err(r1) ? r1 : shadow_own_open(spath, flags, mode);
	if (r1 >= 0 && r2 == -EINVAL && (flags & O_DIRECT) && fs_magic(r1) != shadow_dir_magic) {
		/* O_DIRECT is a property of the file system: the copy does without. */
		chell_log("shadow: the file system of shadow.dir %s refuses O_DIRECT, which %s"
			  " accepts: the copy is opened without it", shadow_dir, abs);
		r2 = shadow_own_open(spath, flags & ~O_DIRECT, mode);
	}
	o.h->fd = r1;
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if (r1 >= 0 && r2 < 0 && unmirrored_err(r2)) {
		chell_log("shadow: cannot open the shadow copy %s: %s (uid %d, gid %d); %s is not"
			  " checked", spath, strerror(-r2), (int)CHELL_SC(SYS_geteuid, 0, 0, 0, 0, 0, 0),
			  (int)CHELL_SC(SYS_getegid, 0, 0, 0, 0, 0, 0), abs);
		goto out;
	}
	if ((r1 < 0) != (r2 < 0) || (r1 < 0 && r1 != r2)) {
		char b1[32], b2[32];
		shadow_diverge(&o, "open(flags=%#x, mode=%#o) returned %s under test, %s on the shadow",
			       flags, (unsigned)mode, rname(r1, b1, sizeof(b1)),
			       rname(r2, b2, sizeof(b2)));
	}
	if (r1 < 0)
		goto out;

	struct stat pst, sst;
	if (sys_fstat(r1, &pst) < 0 || !S_ISREG(pst.st_mode) || sys_fstat(r2, &sst) < 0 ||
	    (e && (pst.st_dev != e->dev || pst.st_ino != e->ino))) {
		/* Became something else meanwhile (a rename race): leave it unchecked. */
		char link[CHELL_FD_PATH_MAX], target[PATH_MAX];
		ssize_t tn = sys_readlink(chell_fd_path(link, r1), target, sizeof(target) - 1);
		target[tn > 0 ? tn : 0] = '\0';
		chell_log("shadow: %s changed while being opened (fd %d is %s, inode %llu, expected"
			  " %llu); not checked", abs, r1, target, (unsigned long long)pst.st_ino,
			  e ? (unsigned long long)e->ino : 0ull);
		sys_close(r2);
		goto out;
	}
	if (!e) {
		/* A created file, or a first open: the entry is born now. */
		struct shadow_inode *n = find_live(t, pst.st_dev, pst.st_ino);
		if (n) {
			/*
			 * The path named another inode when we looked (a
			 * race with a rename): that file is already shadowed,
			 * but our copy is of the other one. Nothing sane to
			 * compare against.
			 */
			chell_log("shadow: %s changed while being opened; not checked", abs);
			sys_close(r2);
			goto out;
		}
		e = alloc_entry(t);
		if (!e) {
			chell_log("shadow: more than %d files open at once; %s is not checked",
				  SHADOW_INODES, abs);
			sys_close(r2);
			goto out;
		}
		shadow_lock_push(&e->lock);
		e->dev = pst.st_dev;
		e->ino = pst.st_ino;
		long m1 = fs_magic(r1), m2 = fs_magic(r2);
		e->flags = 0;
		if (m1 == m2)
			e->flags |= SHADOW_F_SAME_FS;
		if (was_mapped(t, pst.st_dev, pst.st_ino))
			e->flags |= SHADOW_F_MAPPED; /* an old mapping may still store into it */
		if (missing) /* created by this open: owner, group (set-group-ID directory), mode */
			mirror_owner(r2, &pst);
		memcpy(e->name, fresh.name, sizeof(e->name));
		__atomic_store_n(&e->opens, 1, __ATOMIC_RELEASE);
	} else {
		e->opens++;
	}
	struct shadow_priv *p = priv_of(c);
	p->sfd = chell_internal_fd(r2, 0);
	p->ent = (uint32_t)(e - t->ent) + 1;
	p->sdev = sst.st_dev;
	p->sino = sst.st_ino;
	o.e = e;
	shadow_lock_pop(&e->lock);
	shadow_lock_pop(&t->glock);
	chell_crit_leave();
	return r1;
out:
	if (e)
		shadow_lock_pop(&e->lock);
	shadow_lock_pop(&t->glock);
	chell_crit_leave();
	return r1;
}

/* ------------------------------------------------------------- lifetime */

/* After exec: make sure the inherited shadow descriptor is still ours. */
static int shadow_adopt(chell_ctx *c)
{
	struct shadow_priv *p = priv_of(c);
	if (!p->ent || !shadow_table_get())
		return 0;
	struct stat st;
	if (sys_fstat(p->sfd, &st) == 0 && st.st_dev == p->sdev && st.st_ino == p->sino) {
		chell_internal_fd(p->sfd, -1); /* register it in this image */
		return 0;
	}
	/*
	 * Lost (closed before exec by something that bypassed Chell): reopen
	 * the shadow by name for this process, at the primary's offset. Its
	 * offset is then private to this process, unlike the primary's.
	 */
	struct shadow_inode *e = &shadow_tab->ent[p->ent - 1];
	char spath[PATH_MAX];
	shadow_entry_path(e, spath, sizeof(spath));
	int fl = c->f->ofd->status_flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC);
	int fd = shadow_own_open(spath, fl, 0);
	struct shadow_local *l = malloc(sizeof(*l));
	if (fd < 0 || !l) {
		chell_log("shadow: lost the shadow copy %s across exec; %s is no longer checked",
			  spath, c->f->path ? c->f->path : "?");
		if (fd >= 0)
			sys_close(fd);
		free(l);
		p->ent = 0; /* shared: the other processes stop checking too */
		return 0;
	}
	fd = chell_internal_fd(fd, 0);
	off_t cur = sys_lseek(c->fd, 0, SEEK_CUR);
	if (cur > 0)
		sys_lseek(fd, cur, SEEK_SET);
	l->sfd = fd;
	l->vfd = -2;
	l->vnoatime = 0;
	l->svfd = -2;
	c->f->local[c->layer] = l;
	chell_log("shadow: reopened lost shadow %s after exec (its offset is now per process)",
		  spath);
	return 0;
}

static int shadow_close(chell_ctx *c)
{
	struct shadow_op o;
	if (!shadow_op_begin(c, &o))
		return chell_down_close(c);
	o.h = shadow_hist_add(c->op, c->fd, 0, NULL);
	int r = chell_down_close(c);
	/* The shadow descriptor belongs to the OFD, not to this descriptor. */
	o.h->r_test = r;
	o.h->r_shadow = 0;
	shadow_op_end(&o);
	return r;
}

/*
 * Close this process's copy of the shared shadow descriptor - only if the
 * number still is that file: closing someone else's descriptor would
 * corrupt the application.
 */
static void close_shadow_fd(struct shadow_priv *p)
{
	struct stat st;
	if (sys_fstat(p->sfd, &st) == 0 && st.st_dev == p->sdev && st.st_ino == p->sino) {
		chell_internal_close(p->sfd);
		return;
	}
	chell_log("shadow: descriptor %d is no longer the shadow copy; not closing it", p->sfd);
}

static void drop_local(chell_ctx *c)
{
	struct shadow_local *l = local_of(c);
	if (!l)
		return;
	if (l->sfd >= 0)
		chell_internal_close(l->sfd);
	if (l->vfd >= 0)
		chell_internal_close(l->vfd);
	if (l->svfd >= 0)
		chell_internal_close(l->svfd);
	free(l);
	c->f->local[c->layer] = NULL;
}

/* The last descriptor of this OFD in this process is gone. */
static void shadow_detach(chell_ctx *c)
{
	struct shadow_priv *p = priv_of(c);
	if (!p->ent || c->f->release_pending)
		return; /* release (next, in this process) needs the descriptors */
	struct shadow_local *l = local_of(c);
	if (!(l && l->sfd >= 0))
		close_shadow_fd(p); /* this process's copy of it */
	drop_local(c);
}

/*
 * A process outside Chell got the descriptor: it moves the offset and may
 * write, and the shadow copy sees none of it. Operations on this
 * description are no longer checked, and the inode's data no longer
 * compared (as for a shared writable mapping); the rest still is.
 */
static void shadow_escape(chell_ctx *c)
{
	struct shadow_priv *p = priv_of(c);
	if (!p->ent || !shadow_tab || atomic_exchange((_Atomic uint32_t *)&p->escaped, 1))
		return;
	struct shadow_inode *e = &shadow_tab->ent[p->ent - 1];
	__atomic_or_fetch(&e->flags, SHADOW_F_MAPPED, __ATOMIC_RELAXED);
	shadow_mark_mapped(e->dev, e->ino); /* the outside process may keep writing after a reopen */
	chell_log("shadow: %s was handed to a process outside Chell; it is no longer compared",
		  c->f && c->f->path ? c->f->path : "?");
}

/*
 * The inode's last open description in the tree is gone: its copy is of no
 * further use (the next first open makes a fresh one), so it goes now -
 * whether the file still exists, was unlinked or renamed over while open,
 * or the tree is exiting (every process drops its descriptors at exit). Only
 * a process killed by SIGKILL, which runs no release, leaves copies behind;
 * the next first open of the same path replaces them. The name is removed
 * only if it still is this copy (same dev/ino).
 */
static void remove_copy(const struct shadow_inode *e, const struct shadow_priv *p)
{
	char spath[PATH_MAX];
	struct stat st;
	shadow_entry_path(e, spath, sizeof(spath));
	if (spath[0] && sys_fstatat(AT_FDCWD, spath, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    st.st_dev == p->sdev && st.st_ino == p->sino)
		sys_unlink(spath);
}

static void shadow_release(chell_ctx *c)
{
	struct shadow_priv *p = priv_of(c);
	struct shadow_table *t = shadow_table_get();
	if (!p->ent || !t)
		return;
	struct shadow_op o;
	struct shadow_local *l = local_of(c);
	chell_crit_enter();
	shadow_lock_push(&t->glock);
	o.c = c;
	o.e = &t->ent[p->ent - 1];
	o.sfd = l && l->sfd >= 0 ? l->sfd : p->sfd;
	o.h = NULL;
	shadow_lock_push(&o.e->lock);
	if (o.e->opens == 1 && c->f->path && !(o.e->flags & SHADOW_F_NOCONTENT)) {
		/*
		 * The inode's last open description: compare the whole files.
		 * The application's descriptor is gone, so reach the file by
		 * its path, if that still names the same inode.
		 */
		int fd = shadow_own_open_noatime(c->f->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		char spath[PATH_MAX];
		shadow_entry_path(o.e, spath, sizeof(spath));
		int sfd = shadow_own_open(spath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
		struct stat st, sst;
		if (fd >= 0 && sfd >= 0 && sys_fstat(fd, &st) == 0 && st.st_dev == o.e->dev &&
		    st.st_ino == o.e->ino && sys_fstat(sfd, &sst) == 0 && sst.st_dev == p->sdev &&
		    sst.st_ino == p->sino)
			shadow_check_whole(&o, fd, sfd, "at the last close");
		if (fd >= 0)
			sys_close(fd);
		if (sfd >= 0)
			sys_close(sfd);
	}
	if (!(l && l->sfd >= 0))
		close_shadow_fd(p);
	drop_local(c);
	if (o.e->opens == 1 && !keep_copies)
		remove_copy(o.e, p);
	o.e->opens--;
	p->ent = 0;
	shadow_lock_pop(&o.e->lock);
	shadow_lock_pop(&t->glock);
	chell_crit_leave();
}

/* --------------------------------------------------------- path operations */

/*
 * Find the live entry for a path and take its lock (global lock held only
 * while looking). NULL if the file is not open under shadow anywhere.
 */
static struct shadow_inode *path_entry(chell_ctx *c, int at_flags)
{
	struct shadow_table *t = shadow_table_get();
	struct stat st;
	if (!t || !c->path || sys_fstatat(AT_FDCWD, c->path, &st, at_flags) < 0)
		return NULL;
	chell_crit_enter();
	shadow_lock_push(&t->glock);
	struct shadow_inode *e = find_live(t, st.st_dev, st.st_ino);
	if (e)
		shadow_lock_push(&e->lock);
	shadow_lock_pop(&t->glock);
	if (e && (e->flags & SHADOW_F_OFF)) { /* no longer checked */
		shadow_lock_pop(&e->lock);
		e = NULL;
	}
	if (!e)
		chell_crit_leave();
	return e;
}

static int shadow_truncate(chell_ctx *c, const char *path, off_t len)
{
	struct shadow_op o = {c, NULL, -1, NULL};
	int64_t a[2] = {len, -1};
	struct shadow_inode *e = path_entry(c, 0);
	if (!e) {
		/*
		 * Not open anywhere: there is no up-to-date copy to run it on
		 * (copies are refreshed at first open). Check the effect on the
		 * file itself instead.
		 */
		o.h = shadow_hist_add(c->op, -1, 1, a);
		int r = chell_down_truncate(c, path, len);
		o.h->r_test = o.h->r_shadow = r;
		struct stat st;
		if (r == 0 && c->path && sys_fstatat(AT_FDCWD, c->path, &st, 0) == 0 &&
		    st.st_size != len)
			shadow_diverge(&o, "truncate to %lld succeeded but the file has %lld bytes",
				       (long long)len, (long long)st.st_size);
		return r;
	}
	o.e = e;
	char spath[PATH_MAX];
	shadow_entry_path(e, spath, sizeof(spath));
	struct stat sst, pst;
	if (sys_fstatat(AT_FDCWD, spath, &sst, 0) == 0)
		a[1] = sst.st_size;
	o.h = shadow_hist_add(c->op, -1, 2, a);
	int r1 = chell_down_truncate(c, path, len);
	/* Permission errors are not asked of the copy (see shadow_open). */
	int r2 = unmirrored_err(r1) ? r1 : (int)CHELL_SC(SYS_truncate, spath, len, 0, 0, 0, 0);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if (r1 != r2 && (unmirrored_err(r2) || (!(e->flags & SHADOW_F_SAME_FS) &&
						(shadow_fs_errno(r1) || shadow_fs_errno(r2))))) {
		/*
		 * The file's answer stands (another file system's limits, or
		 * a copy this process may not write): the copy takes the
		 * file's size - all a truncate changes - or, if it cannot, the
		 * file is no longer checked.
		 */
		int r = -ENOENT;
		if (sys_fstatat(AT_FDCWD, c->path, &pst, 0) == 0)
			r = (int)CHELL_SC(SYS_truncate, spath, pst.st_size, 0, 0, 0, 0);
		if (r < 0) {
			__atomic_or_fetch(&e->flags, SHADOW_F_OFF, __ATOMIC_RELAXED);
			chell_log("shadow: truncate of %s gave %s, its copy %s; the copy cannot follow"
				  " (%s), the file is no longer checked", c->path, strerror(-r1),
				  strerror(-r2), strerror(-r));
		}
		o.h->note = unmirrored_err(r2) ? SHADOW_NOTE_CREDS : SHADOW_NOTE_FS;
		r2 = r1;
	}
	if (r1 != r2) {
		char b1[32], b2[32];
		shadow_diverge(&o, "truncate(%lld) returned %s under test, %s on the shadow",
			       (long long)len, rname(r1, b1, sizeof(b1)), rname(r2, b2, sizeof(b2)));
	}
	if (sys_fstatat(AT_FDCWD, c->path, &pst, 0) == 0 &&
	    sys_fstatat(AT_FDCWD, spath, &sst, 0) == 0 && pst.st_size != sst.st_size)
		shadow_diverge(&o, "after truncate(%lld): size %lld under test, %lld on the shadow",
			       (long long)len, (long long)pst.st_size, (long long)sst.st_size);
	shadow_lock_pop(&e->lock);
	chell_crit_leave();
	return r1;
}

static int shadow_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags)
{
	struct shadow_op o = {c, NULL, -1, NULL};
	struct shadow_inode *e = path_entry(c, at_flags & AT_SYMLINK_NOFOLLOW);
	o.e = e;
	int64_t a[4] = {-1, -1, -1, -1};
	o.h = shadow_hist_add(c->op, -1, 2, a);
	int r1 = chell_down_stat(c, dirfd, path, st, at_flags);
	/*
	 * The reference for a path lookup is the kernel on the same path -
	 * and, when the handler said EFAULT, with the application's own
	 * buffer too, which then must fault the same way (and is not written).
	 */
	struct stat ref;
	int r2 = sys_fstatat(dirfd, path, r1 == -EFAULT ? st : &ref, at_flags);
	o.h->r_test = r1;
	o.h->r_shadow = r2;
	if (r1 == 0)
		o.h->args[0] = st->st_size;
	if (r2 == 0 && r1 != -EFAULT)
		o.h->args[1] = ref.st_size;
	if (r1 != r2) {
		char b1[32], b2[32];
		shadow_diverge(&o, "stat returned %s under test, %s from the kernel",
			       rname(r1, b1, sizeof(b1)), rname(r2, b2, sizeof(b2)));
	}
	if (r1 == 0 && r2 == 0) {
		if (st->st_ino != ref.st_ino || st->st_dev != ref.st_dev ||
		    (st->st_mode & S_IFMT) != (ref.st_mode & S_IFMT))
			shadow_diverge(&o, "stat: identity/type differs (ino %llu mode %#o under test,"
				       " ino %llu mode %#o from the kernel)",
				       (unsigned long long)st->st_ino, (unsigned)st->st_mode,
				       (unsigned long long)ref.st_ino, (unsigned)ref.st_mode);
		if (st->st_size != ref.st_size)
			shadow_diverge(&o, "stat: size %lld under test, %lld from the kernel",
				       (long long)st->st_size, (long long)ref.st_size);
		if (e && S_ISREG(st->st_mode)) {
			char spath[PATH_MAX];
			struct stat sst;
			shadow_entry_path(e, spath, sizeof(spath));
			if (sys_fstatat(AT_FDCWD, spath, &sst, 0) == 0 && sst.st_size != st->st_size)
				shadow_diverge(&o, "stat: size %lld under test, %lld on the shadow",
					       (long long)st->st_size, (long long)sst.st_size);
		}
	}
	if (e) {
		shadow_lock_pop(&e->lock);
		chell_crit_leave();
	}
	return r1;
}

/* ----------------------------------------------------------------- handler */

__attribute__((visibility("hidden"))) const struct chell_handler chell_shadow_handler = {
	.name = "shadow",
	CHELL_HANDLER_PRIV(struct shadow_priv), /* summary: src/common/registry.def */
	.proc_init = shadow_proc_init,
	.open = shadow_open,
	.adopt = shadow_adopt,
	.close = shadow_close,
	.detach = shadow_detach,
	.release = shadow_release,
	.escape = shadow_escape,
	.read = shadow_read,
	.write = shadow_write,
	.lseek = shadow_lseek,
	.fsync = shadow_fsync,
	.sync_file_range = shadow_sync_file_range,
	.ftruncate = shadow_ftruncate,
	.fallocate = shadow_fallocate,
	.fstat = shadow_fstat,
	.fcntl = shadow_fcntl,
	.mmap = shadow_mmap,
	.truncate = shadow_truncate,
	.stat = shadow_stat,
};
