/* SPDX-License-Identifier: MIT */
/*
 * Byte-range locks served in the node-local tier (issue 13; docs/CACHE.md,
 * "Locks").
 *
 * On a distributed backing store every fcntl lock command is a network
 * round trip (FUSE to the GlusterFS client, then to the brick's locks
 * translator): sqlite in WAL mode takes six per transaction. For a file the
 * node owns - under a backing directory that is not `cache.shared`, which
 * the coherence contract gives to one node at a time - no process on
 * another node may use the file meanwhile, so the locks only have to
 * exclude the processes of this node, which all reach the file through
 * Chell. They are taken on a **lock stand-in**: an empty file
 * `<cache.pool>/locks/<dev>.<ino>` on the pool's tmpfs, one per backing
 * inode. The kernel then applies its own rules to the stand-in - conflicts,
 * F_GETLK's answer, F_SETLKW's wait and deadlock detection (EDEADLK),
 * splitting and merging ranges, ownership by process (classic) or by open
 * file description (OFD locks), release when the owner goes - so every
 * semantic is the kernel's, not an emulation. What must be mapped:
 *
 * - The owner of an OFD lock is the open file description: each of the
 *   application's OFDs gets its own stand-in description (an internal,
 *   inheritable descriptor), opened at its first lock command; its number
 *   is kept in a shared table per OFD slot. Invariant: every process that
 *   holds the application's OFD holds that stand-in descriptor at that
 *   number. Processes only come to share an OFD by fork (posix_spawn,
 *   clone) and exec (a descriptor sent with SCM_RIGHTS leaves Chell), so
 *   before a fork every OFD of the process that has none gets its stand-in
 *   (FORK_PREPARE), fork copies the descriptor, exec keeps it (the new
 *   image registers it again in adopt), and the stand-in description dies
 *   with the OFD's last descriptor, which releases its OFD locks exactly
 *   when the kernel would.
 * - The owner of a classic (process-associated) lock is the process, and
 *   any stand-in descriptor of the inode serves it. The kernel releases a
 *   process's locks on a file when the process closes *any* descriptor of
 *   it: each close of a served descriptor does F_UNLCK over the whole file
 *   on a stand-in of the inode that the process holds (none held: it holds
 *   no lock). Exit closes the stand-ins; fork gives the child none of the
 *   parent's (it is another process on the same stand-in descriptor).
 * - The kernel evaluates l_whence against the descriptor's offset and the
 *   file's size: the request is rewritten to SEEK_SET from the backing
 *   descriptor's offset (made current by the Nib's sync_out) or size, with
 *   the kernel's checks in the kernel's order (fs/locks.c,
 *   flock64_to_posix_lock, check_fmode_for_setlk); the access mode checks
 *   are the application's descriptor's, since the stand-in is opened
 *   read-write. F_GETLK's answer is copied back as the kernel writes it
 *   (only l_type when there is no conflict).
 *
 * Files under `cache.shared` and `cache.locks = backing` keep the kernel's
 * locks on the backing file, which the distributed file system arbitrates
 * between nodes. Processes of the node outside Chell lock the backing file
 * and do not see the stand-ins (as they do not see the pool's dirty data).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache.h"

#define SLOTS 8192 /* the shared OFD table's slots (ofd_table.c) */

/* Per OFD slot, shared by the process tree (chell_shared_area). Valid for
 * the OFD whose generation is `gen`; `fd` is its stand-in descriptor's
 * number (or -1), the same in every process that holds the OFD. */
struct lock_slot {
	_Atomic uint32_t gen;
	_Atomic int32_t served; /* decided at open: locks on a stand-in */
	_Atomic int32_t fd;
	uint32_t pad;
	uint64_t sdev, sino; /* the stand-in's identity, checked after exec */
};

/* Per process: the served OFDs this process holds (fork copies it with the
 * descriptors; an exec'd image rebuilds it in adopt). Under cache_lock. */
struct held {
	struct chell_file *f;
	int fd; /* this process holds the stand-in descriptor fd (or -1) */
};

static struct lock_slot *slots;
static struct held *held;
static uint32_t held_hi;  /* slots below this may be in use */
static int standins;      /* stand-in descriptors this process holds */
static bool locks_local;  /* cache.locks = local and the pool has locks/ */
static char locks_dir[PATH_MAX];

int cache_locks_init(const char *pool)
{
	locks_local = strcmp(chell_setting("cache.locks"), "local") == 0;
	int n = snprintf(locks_dir, sizeof locks_dir, "%s/%s", pool, CHELLD_LOCKS_DIR);
	struct stat st;
	/* chelld makes the directory (mode 1777); an older manager did not,
	 * and then every process of the node keeps the kernel's locks. */
	if (n < 0 || (size_t)n >= sizeof locks_dir || stat(locks_dir, &st) < 0 || !S_ISDIR(st.st_mode))
		locks_local = false;
	return 0;
}

static struct lock_slot *slot_of(struct chell_file *f)
{
	if (!slots) {
		slots = chell_shared_area("cache.locks", SLOTS * sizeof(*slots));
		if (!slots)
			return NULL;
	}
	return f->slot < SLOTS ? &slots[f->slot] : NULL;
}

/* The entry of an OFD this process holds, or NULL. */
static struct held *held_of(struct chell_file *f)
{
	return held && f->slot < held_hi && held[f->slot].f == f ? &held[f->slot] : NULL;
}

static struct held *held_add(struct chell_file *f)
{
	if (!held && !(held = calloc(SLOTS, sizeof(*held))))
		return NULL;
	if (f->slot >= SLOTS)
		return NULL;
	held[f->slot] = (struct held){f, -1};
	if (f->slot >= held_hi)
		held_hi = f->slot + 1;
	return &held[f->slot];
}

/* The OFD was opened: decide once, for every process, whether its locks
 * are served on a stand-in. The file is under a backing directory. */
void cache_locks_opened(chell_ctx *c, bool shared)
{
	struct lock_slot *s;
	if (!locks_local || shared || !(s = slot_of(c->f)))
		return;
	atomic_store(&s->fd, -1);
	atomic_store(&s->served, 1);
	atomic_store(&s->gen, c->f->ofd->gen);
	cache_lock();
	held_add(c->f);
	cache_unlock();
}

static bool served(struct chell_file *f, struct lock_slot **sp)
{
	struct lock_slot *s = slots && f->slot < SLOTS ? &slots[f->slot] : NULL;
	if (!s || atomic_load(&s->gen) != f->ofd->gen || !atomic_load(&s->served))
		return false;
	*sp = s;
	return true;
}

/* A new image adopted the OFD: it holds the stand-in its previous image
 * held (exec keeps descriptors), if there was one. */
void cache_locks_adopt(chell_ctx *c)
{
	struct lock_slot *s;
	if (!slot_of(c->f) || !served(c->f, &s))
		return;
	cache_lock();
	struct held *h = held_add(c->f);
	int fd = atomic_load(&s->fd);
	struct stat st;
	if (h && fd >= 0 && sys_fstat(fd, &st) == 0 && (uint64_t)st.st_dev == s->sdev &&
	    (uint64_t)st.st_ino == s->sino) {
		chell_internal_fd(fd, -1);
		h->fd = fd;
		standins++;
	}
	cache_unlock();
}

/* Open the OFD's stand-in in this process (caller holds cache_lock). 0 or
 * -errno. */
static int standin_open(struct chell_file *f, struct lock_slot *s, struct held *h)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/%llu.%llu", locks_dir, (unsigned long long)f->ofd->dev,
		 (unsigned long long)f->ofd->ino);
	/* Inheritable (no O_CLOEXEC): the process's locks survive exec, as
	 * the kernel's do; above the application's descriptors. */
	int fd = chell_internal_openat(AT_FDCWD, path, O_RDWR | O_CREAT | O_NOFOLLOW, 0666);
	if (fd < 0)
		return fd;
	struct stat st;
	if (sys_fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		sys_close(fd);
		return -ENOLCK;
	}
	if ((st.st_mode & 0777) != 0666 && st.st_uid == geteuid())
		(void)CHELL_SC(SYS_fchmod, fd, 0666, 0, 0, 0, 0); /* past the umask: every user of the node locks here */
	fd = chell_internal_fd(fd, 0); /* high, where the application does not look */
	s->sdev = (uint64_t)st.st_dev;
	s->sino = (uint64_t)st.st_ino;
	atomic_store(&s->fd, fd);
	h->fd = fd;
	standins++;
	return 0;
}

/* The stand-in descriptor for a lock command on f: -errno, or the fd. */
static int standin_fd(struct chell_file *f, struct lock_slot *s)
{
	cache_lock();
	struct held *h = held_of(f);
	if (!h)
		h = held_add(f);
	int r = -ENOLCK;
	if (h && h->fd >= 0) {
		r = h->fd;
	} else if (h && atomic_load(&s->fd) < 0) {
		/* Only this process holds the OFD (else FORK_PREPARE had made the
		 * stand-in), and cache_lock orders its threads. */
		r = standin_open(f, s, h);
		if (r == 0)
			r = h->fd;
	}
	/* else another process made the stand-in while this one already held
	 * the OFD, which FORK_PREPARE rules out (an exec'd image that could not
	 * find its stand-in again): refused rather than served wrongly. */
	cache_unlock();
	if (r == -ENOLCK)
		chell_info("cache: no lock stand-in for %s (ENOLCK)", f->path ? f->path : "?");
	return r;
}

/* The kernel's flock64_to_posix_lock: *start becomes absolute. 0 or -errno. */
static int absolute(chell_ctx *c, struct flock *fl)
{
	int64_t base;
	struct stat st;
	switch (fl->l_whence) {
	case SEEK_SET: base = 0; break;
	case SEEK_CUR: /* the Nib's sync_out made the kernel's offset current */
		base = sys_lseek(c->fd, 0, SEEK_CUR);
		if (base < 0)
			return (int)base;
		break;
	case SEEK_END:
		if (sys_fstat(c->fd, &st) < 0)
			return -EBADF;
		base = st.st_size;
		break;
	default: return -EINVAL;
	}
	if (fl->l_start > INT64_MAX - base)
		return -EOVERFLOW;
	int64_t start = base + fl->l_start;
	if (start < 0)
		return -EINVAL;
	if (fl->l_len > 0 && fl->l_len - 1 > INT64_MAX - start)
		return -EOVERFLOW;
	if (fl->l_len < 0 && start + fl->l_len < 0)
		return -EINVAL;
	fl->l_whence = SEEK_SET;
	fl->l_start = start;
	return 0;
}

bool cache_locks_cmd(int cmd)
{
	switch (cmd) {
	case F_GETLK: case F_SETLK: case F_SETLKW:
	case F_OFD_GETLK: case F_OFD_SETLK: case F_OFD_SETLKW:
		return true;
	default:
		return false;
	}
}

/* A lock command on a served OFD: the result (0 or -errno), with *done
 * set; *done false: not served here, the kernel's locks apply. */
int cache_locks_fcntl(chell_ctx *c, int cmd, unsigned long arg, bool *done)
{
	struct lock_slot *s;
	*done = false;
	if (!served(c->f, &s))
		return 0;
	*done = true;
	struct flock *user = (struct flock *)arg, fl = *user; /* probed by the Nib */
	bool get = cmd == F_GETLK || cmd == F_OFD_GETLK;
	bool ofd = cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
	if (get && ofd && fl.l_pid != 0)
		return -EINVAL; /* fcntl_getlk checks it first */
	int r = absolute(c, &fl);
	if (r < 0)
		return r;
	if (fl.l_type != F_RDLCK && fl.l_type != F_WRLCK && fl.l_type != F_UNLCK)
		return -EINVAL;
	if (!get) { /* check_fmode_for_setlk, on the application's descriptor */
		int acc = atomic_load((_Atomic int32_t *)&c->f->ofd->status_flags) & O_ACCMODE;
		if ((fl.l_type == F_RDLCK && acc == O_WRONLY) || (fl.l_type == F_WRLCK && acc == O_RDONLY))
			return -EBADF;
	}
	int fd = standin_fd(c->f, s);
	if (fd < 0)
		return fd;
	r = sys_fcntl(fd, cmd, (long)&fl); /* F_SETLKW may wait here, interruptibly */
	if (r < 0 || !get)
		return r;
	user->l_type = fl.l_type;
	if (fl.l_type != F_UNLCK) {
		user->l_whence = fl.l_whence;
		user->l_start = fl.l_start;
		user->l_len = fl.l_len;
		user->l_pid = fl.l_pid;
	}
	return 0;
}

/* The append lock (mapped_append_lock: an OFD lock on one byte at 2^62
 * orders O_APPEND writers of different descriptions) on the OFD's
 * stand-in when its locks are served here: on a distributed backing store
 * it was two round trips per append. F_WRLCK / F_UNLCK; 0 or -errno. */
int cache_locks_append(chell_ctx *c, short type)
{
	struct lock_slot *s;
	if (!served(c->f, &s))
		return mapped_append_lock(c->fd, type);
	int fd = standin_fd(c->f, s);
	return fd < 0 ? fd : mapped_append_lock(fd, type);
}

/* One descriptor of a served OFD closes: the process's classic locks on
 * the file go, as the kernel drops them at any close of the file. */
void cache_locks_close(chell_ctx *c)
{
	struct lock_slot *s;
	if (!standins || !served(c->f, &s))
		return;
	int fd = -1;
	cache_lock();
	struct held *h = held_of(c->f);
	if (h && h->fd >= 0)
		fd = h->fd;
	for (uint32_t i = 0; fd < 0 && i < held_hi; i++) /* a stand-in of another OFD of the inode */
		if (held[i].f && held[i].fd >= 0 && held[i].f->ofd->dev == c->f->ofd->dev &&
		    held[i].f->ofd->ino == c->f->ofd->ino)
			fd = held[i].fd;
	if (fd >= 0) {
		struct flock all = {.l_type = F_UNLCK, .l_whence = SEEK_SET};
		sys_fcntl(fd, F_SETLK, (long)&all);
	}
	cache_unlock();
}

/* The process's last descriptor of the OFD went: so does its stand-in
 * descriptor (the stand-in description, with its OFD locks, goes with the
 * last process that held it). */
void cache_locks_detach(chell_ctx *c)
{
	cache_lock();
	struct held *h = held_of(c->f);
	if (h) {
		if (h->fd >= 0) {
			chell_internal_close(h->fd);
			standins--;
		}
		*h = (struct held){NULL, -1};
	}
	cache_unlock();
}

/* Before a fork: every served OFD of this process gets its stand-in, so
 * the child shares it (the invariant above). */
void cache_locks_fork_prepare(void)
{
	cache_lock();
	for (uint32_t i = 0; i < held_hi; i++) {
		struct held *h = &held[i];
		struct lock_slot *s;
		if (!h->f || h->fd >= 0 || !served(h->f, &s))
			continue;
		if (atomic_load(&s->fd) < 0 && standin_open(h->f, s, h) < 0)
			chell_info("cache: no lock stand-in for %s before fork",
				   h->f->path ? h->f->path : "?");
	}
	cache_unlock();
}
