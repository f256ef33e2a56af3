/* SPDX-License-Identifier: MIT */
/*
 * Cached files: the Cnode of each backing file a client registers, the
 * manager's own descriptor of it, and outside-writer detection.
 *
 * The manager reads and writes a backing file through descriptors it
 * opens itself, by the file's resolved path, and only after checking that
 * the path still names the Cnode's (dev, ino): a client's descriptor only
 * proves the client's access (auth.c), and is closed once checked.
 *
 * Descriptors are held only as long as needed, because a descriptor of a
 * file is visible to everyone: a write descriptor makes exec of the file
 * fail with ETXTBSY and a remount read-only fail with EBUSY, any
 * descriptor makes an unmount of the file system under a backing
 * directory fail with EBUSY and a file lease (F_SETLEASE) fail with
 * EAGAIN. So:
 *  - the manager's own descriptor of a file (f->fd) is read-only, for
 *    fills, sizes and noticing a deletion; it is held while a client has
 *    the file registered or the file has dirty blocks, and never for a
 *    file the manager bypasses;
 *  - write-back and TRUNCATE get a write descriptor for the job
 *    (cfile_wfd, a reopen of f->fd through /proc, so a rename since does
 *    not matter) and close it after;
 *  - at most cfg->max_fds descriptors of files nobody has registered are
 *    kept (they hold dirty data): past that, the least recently used such
 *    file is written back and its descriptor closed (cfile_fd).
 *
 * Opens use O_NONBLOCK: a file leased by an application (F_SETLEASE) makes
 * a conflicting open fail with EWOULDBLOCK at once (the lease is broken)
 * instead of stalling every client for the lease-break time.
 *
 * Outside writers: a process writing the backing file without Chell
 * changes its size, mtime or ctime. The Cnode records them when the last
 * registration closes and after each of the manager's own writes; when a
 * file nobody has registered is registered again and they differ, the
 * cached copy may be stale: dirty blocks are written back (the cache's
 * acknowledged writes win over the outside write for those blocks, as they
 * would have had they been written back earlier) and every chunk of the
 * file is dropped, so the next reads come from the backing file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <time.h>
#include <linux/magic.h>
#include <unistd.h>

#include "chelld/engine.h"
#include "chelld/modes.h"

static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

struct cfile *cfile_get(struct engine *c, uint32_t cnode)
{
	if (cnode >= c->pool.max_cnodes)
		return NULL;
	if (c->files[cnode])
		return c->files[cnode];
	struct meta_cnode_info ci;
	if (meta_cnode_info(c->m, cnode, &ci) < 0)
		return NULL;
	struct cfile *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->cnode = cnode;
	f->fd = -1;
	f->dev = ci.dev;
	f->ino = ci.ino;
	memcpy(f->path, ci.path, sizeof f->path);
	c->files[cnode] = f;
	modes_file_init(c, f);
	return f;
}

/* Open `path` with flags and check it is the Cnode's file: fd or -errno. */
static int open_checked(const struct cfile *f, const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino) {
		close(fd);
		return -ESTALE; /* the path now names another file */
	}
	return fd;
}

/* Keep the read-only descriptor fd as f's own. */
static int adopt_fd(struct engine *c, struct cfile *f, int fd)
{
	struct statvfs sv;
	/* data cached for writing must be writable back: not on a read-only mount */
	f->readonly = fstatvfs(fd, &sv) == 0 && (sv.f_flag & ST_RDONLY);
	struct statfs sf;
	f->fuse = fstatfs(fd, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC;
	f->fd = fd;
	f->fd_used = ++c->fd_clock;
	c->open_fds++;
	return fd;
}

static void close_fd(struct engine *c, struct cfile *f)
{
	if (f->fd < 0)
		return;
	close(f->fd);
	f->fd = -1;
	c->open_fds--;
}

/* Until `room` more descriptors fit under the bound: the least recently
 * used descriptor of a file nobody has registered is written back and
 * closed (caller holds the lock). */
static void trim_fds(struct engine *c, const struct cfile *keep, uint32_t room)
{
	while (c->open_fds + room > c->cfg->max_fds) {
		struct cfile *lru = NULL;
		for (uint32_t id = 0; id < c->pool.max_cnodes; id++) {
			struct cfile *g = c->files[id];
			if (g && g != keep && g->fd >= 0 && g->nregs == 0 && !g->trimming &&
			    (!lru || g->fd_used < lru->fd_used))
				lru = g;
		}
		if (!lru)
			return; /* every held descriptor is of a registered file */
		lru->trimming = true;
		int rc = wb_file(c, lru, NULL, NULL, NULL);
		lru->trimming = false;
		if (rc < 0) {
			chelld_log("file %s: write-back to release its descriptor failed: %s",
				   lru->path, strerror(-rc));
			return; /* its dirty blocks still need it */
		}
		close_fd(c, lru);
	}
}

int cfile_fd(struct engine *c, struct cfile *f)
{
	if (f->fd >= 0) {
		f->fd_used = ++c->fd_clock;
		return f->fd;
	}
	if (!f->path[0])
		return -ENOENT;
	trim_fds(c, f, 1);
	int fd = open_checked(f, f->path, O_RDONLY | O_NOFOLLOW);
	return fd < 0 ? fd : adopt_fd(c, f, fd);
}

int cfile_fd_via(struct engine *c, struct cfile *f, int client_fd)
{
	int fd = cfile_fd(c, f);
	if (fd >= 0 || client_fd < 0)
		return fd;
	/* Renamed since the path was recorded: reopen the client's file
	 * through /proc (the same inode, with the manager's own access). */
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", client_fd);
	int nfd = open_checked(f, p, O_RDONLY);
	return nfd < 0 ? fd : adopt_fd(c, f, nfd);
}

int cfile_wfd(struct engine *c, struct cfile *f)
{
	int fd = cfile_fd(c, f);
	if (fd < 0)
		return fd;
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
	int w = open_checked(f, p, O_RDWR);
	/* A deleted file that cannot be reopened (FUSE: ESTALE): a duplicate of
	 * our own descriptor lets the write-back see it deleted (wb_begin) and
	 * discard its blocks; nothing is written through it. */
	if ((w == -ESTALE || w == -ENOENT) && cfile_deleted(c, f)) {
		w = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (w < 0)
			w = -errno;
	}
	return w;
}

void cfile_record(struct engine *c, struct cfile *f)
{
	struct stat st;
	int fd = cfile_fd(c, f);
	if (fd < 0 || fstat(fd, &st) < 0)
		return;
	int rc = meta_cnode_set_attr(c->m, f->cnode, (uint64_t)st.st_size, ts_ns(&st.st_mtim),
				     ts_ns(&st.st_ctim));
	if (rc < 0)
		chelld_log("file %s: cannot record its attributes: %s", f->path, strerror(-rc));
}

/* A Cnode nobody uses (no chunk, no registration) to make room for one. */
static bool reclaim_cnode(struct engine *c)
{
	for (uint32_t id = 0; id < c->pool.max_cnodes; id++) {
		struct meta_cnode_info ci;
		if (meta_cnode_info(c->m, id, &ci) < 0 || ci.chunks)
			continue;
		struct cfile *f = c->files[id];
		if (f && (f->nregs || f->revalidating))
			continue;
		if (meta_cnode_remove(c->m, id) < 0)
			continue;
		if (f) {
			close_fd(c, f);
			free(f);
			c->files[id] = NULL;
		}
		return true;
	}
	return false;
}

/* The test hook of chelld.h: sleep without the lock, as a wait would. */
static void test_pause(struct engine *c, uint32_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	pthread_mutex_unlock(&c->lock);
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&c->lock);
}

/* Drop every chunk of a file that changed behind the cache. */
static void outside_change(struct engine *c, struct cfile *f, const struct meta_cnode_info *ci,
			   const struct stat *st)
{
	chelld_log("file %s changed outside the cache (size %llu -> %lld, mtime %lld -> %lld): "
		   "writing back its dirty blocks and dropping its %u chunk(s)",
		   f->path, (unsigned long long)ci->size, (long long)st->st_size,
		   (long long)ci->mtime_ns, (long long)ts_ns(&st->st_mtim), ci->chunks);
	c->st->outside_changes++;
	f->content_gen++;
	uint32_t *slots = malloc(c->nslots * sizeof *slots);
	if (!slots)
		return;
	uint32_t n = engine_file_slots(c, f->cnode, slots);
	uint64_t *incs = malloc((n ? n : 1) * sizeof *incs);
	if (!incs) {
		free(slots);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		incs[i] = c->slots[slots[i]].ctl->incarnation;
	/* the test hook (chelld.h) slows the first revalidation only */
	static bool paused;
	bool pause = c->cfg->test_revalidate_pause_ms && !paused;
	paused |= pause;
	/* Dirty bytes past the file's end as the outside writer left it are
	 * not written back (nobody has the file registered, so no client is
	 * between storing an extension and publishing its size: an ext_end
	 * mark past the end is stale, the file was truncated behind us).
	 * That clamp holds only for the chunks listed now: chunk_revoke may
	 * wait without the lock, and a slot it comes back to may hold another
	 * chunk since (of this file too, made by a client registered after
	 * this revalidation: cfile_register keeps them out until it is done,
	 * but the slot list is checked as well). */
	for (uint32_t i = 0; i < n; i++) {
		const struct slot *sl = &c->slots[slots[i]];
		if (pause)
			test_pause(c, c->cfg->test_revalidate_pause_ms);
		if (!sl->map || sl->cnode != f->cnode || sl->ctl->incarnation != incs[i])
			continue; /* evicted meanwhile, or another chunk now */
		uint64_t chunk = sl->file_chunk;
		int rc = chunk_revoke(c, slots[i], (uint64_t)st->st_size);
		if (rc < 0 && rc != -ENOENT) /* ENOENT: a worker evicted it meanwhile */
			chelld_log("file %s: chunk %llu kept (write-back failed: %s)", f->path,
				   (unsigned long long)chunk, strerror(-rc));
	}
	free(incs);
	free(slots);
}

int cfile_register(struct engine *c, int client_fd, const char *resolved, uint64_t dev,
		   uint64_t ino, char *detail, size_t dlen)
{
	bool created = false;
	int id = meta_cnode_get(c->m, dev, ino, false, NULL);
	if (id == -ENOENT) {
		id = meta_cnode_get(c->m, dev, ino, true, resolved);
		if (id == -ENOSPC && reclaim_cnode(c))
			id = meta_cnode_get(c->m, dev, ino, true, resolved);
		created = id >= 0;
	}
	if (id < 0) {
		snprintf(detail, dlen, "%s",
			 id == -ENAMETOOLONG ? "the path is too long to cache (limit 191 bytes)"
			 : id == -ENOSPC     ? "the cache tracks too many files"
					     : "cache metadata error");
		return id;
	}
	struct cfile *f = cfile_get(c, (uint32_t)id);
	if (!f) {
		snprintf(detail, dlen, "out of memory");
		return -ENOMEM;
	}
	/* The path the client used now is the one to open it by (the file
	 * may have been renamed since the Cnode was made). */
	if (strlen(resolved) < sizeof f->path && strcmp(resolved, f->path) != 0) {
		snprintf(f->path, sizeof f->path, "%s", resolved);
		close_fd(c, f);
	}
	struct stat st;
	if (f->revalidating) {
		/* Another registration is judging the file (outside_change waits
		 * without the lock): wait for its verdict, then look again. Not
		 * judging it twice at once matters: a client registered while the
		 * first still revokes chunks against the size it saw before would
		 * store and fsync into chunks that are then cut at that size (an
		 * acknowledged extension lost: test_cache_crash.py on GlusterFS,
		 * where killed writers leave times that move after their close). */
		while (f->revalidating)
			pthread_cond_wait(&c->idle, &c->lock);
		return cfile_register(c, client_fd, resolved, dev, ino, detail, dlen);
	}
	if (f->nregs == 0 && fstat(client_fd, &st) == 0) {
		struct meta_cnode_info ci;
		f->revalidating = true;
		if (!created && meta_cnode_info(c->m, f->cnode, &ci) == 0 &&
		    (ci.size != (uint64_t)st.st_size || ci.mtime_ns != ts_ns(&st.st_mtim) ||
		     ci.ctime_ns != ts_ns(&st.st_ctim)))
			outside_change(c, f, &ci, &st);
		meta_cnode_set_attr(c->m, f->cnode, (uint64_t)st.st_size, ts_ns(&st.st_mtim),
				    ts_ns(&st.st_ctim));
		f->revalidating = false;
		pthread_cond_broadcast(&c->idle);
	}
	/* its directory's mode, its pin, the per-file cap (modes.c) */
	modes_file_registered(c, f, fstat(client_fd, &st) == 0 ? (uint64_t)st.st_size : 0);
	return id;
}

/* The manager's descriptor stays open while the file is registered (not
 * bypassed) or has dirty blocks: it is how a deletion is noticed (st_nlink
 * 0), and how the data gets written back even after a rename. Clean
 * chunks need no descriptor: a fill reopens it. */
void cfile_release_fd(struct engine *c, struct cfile *f)
{
	if (f->fd < 0 || f->trimming || (f->nregs && !f->bypass))
		return;
	struct meta_cnode_info ci;
	if (meta_cnode_info(c->m, f->cnode, &ci) == 0 && ci.chunks) {
		for (uint32_t s = 0; s < c->nslots; s++)
			if (c->slots[s].map && c->slots[s].cnode == f->cnode &&
			    (chunk_ndirty(&c->slots[s]) || c->slots[s].busy))
				return;
	}
	close_fd(c, f);
}

bool cfile_deleted(struct engine *c, struct cfile *f)
{
	struct stat st;
	(void)c;
	if (f->fd < 0 || f->nregs != 0 || fstat(f->fd, &st) < 0)
		return false;
	if (st.st_nlink == 0 || !f->fuse)
		return st.st_nlink == 0;
	/* A FUSE file system (GlusterFS) may report st_nlink 1 for an open,
	 * deleted file; reopening it through our descriptor then fails with
	 * ESTALE (or ENOENT): the server no longer knows the file. */
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", f->fd);
	int fd = open(p, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd >= 0) {
		close(fd);
		return false;
	}
	return errno == ESTALE || errno == ENOENT;
}

void cfile_unregister(struct engine *c, struct cfile *f)
{
	if (f->nregs == 0 || --f->nregs > 0)
		return;
	f->bypass = false;
	cfile_record(c, f);
	cfile_release_fd(c, f);
	if (f->fd >= 0) /* kept for its dirty blocks: now one of the bounded ones */
		trim_fds(c, NULL, 0);
}
