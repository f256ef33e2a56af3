/* SPDX-License-Identifier: MIT */
/*
 * The shared buffer of a WARP file (warp.h, docs/WARP.md "Buffer
 * coherence"): one file on /dev/shm per tier file, named by its identity,
 * /dev/shm/chell-warp.<dev>.<ino>, mapped whole by every process under
 * Chell that has the tier file open:
 *
 *   [header 4 KB][node records][valid bitmap][dirty bitmap][data ...]
 *
 * Block b of the tier file is buffered at data + b * 4 KB (the data area is
 * sparse: only valid blocks take memory). Every change of the bitmaps, of
 * the buffered bytes and of a node's state is made under the header's lock
 * (a chell_lock: futex based, shared, recovered if its holder died), so a
 * buffered write is visible at once to every process mapping the file.
 *
 * Liveness is an flock: every process that maps the buffer holds LOCK_SH on
 * its descriptor of it. An opener that gets LOCK_EX is alone: a buffer left
 * by a killed process is written back first (if it still belongs to the
 * same tier file: device, inode and birth time match), then reset. The
 * last user writes everything back and removes the file.
 *
 * Light files (warp.outside=lease only; docs/WARP.md "Light files"): a
 * process that attaches a file for which no buffer file exists keeps the
 * header and node records in private memory instead (no file made, sized,
 * locked, mapped and removed per open). Nothing of a light file is
 * buffered: buffering needs the write lease, and
 *  - the lease is granted only while its description is the file's only
 *    open one, so any other description a light process holds keeps
 *    everyone from buffering;
 *  - a light process that wants the lease moves its records to the buffer
 *    file first (warp_file_promote), and it takes the lease through a
 *    description that a light file was attached through (warp_ofd's
 *    light_seen) only while it holds the description's only descriptor,
 *    with forks held off (lease.c): so no other process, light or not,
 *    shares it;
 *  - a description that escapes to a process Chell does not serve is
 *    promoted first, so that "buffering off" reaches the buffer file.
 * A buffer file that exists (a live user, or dirty blocks a killed one
 * left) is joined as before.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <linux/falloc.h>
#include <linux/stat.h>

#include "warp.h"
#include "chell/tier.h"

__thread int warp_call_fd = -1;
static struct warp_file *files;
static struct warp_file *reaped; /* unlisted, to release (warp_files_reap); files_lock */
static void file_release(struct warp_file *w);
static void file_free(struct warp_file *w);
static void buf_name(char *out, size_t n, uint64_t dev, uint64_t ino);
static pthread_mutex_t files_lock = PTHREAD_MUTEX_INITIALIZER;
/* released light regions (light_region_get) */
#define LIGHT_POOL 8
static unsigned char *light_pool[LIGHT_POOL];
static int light_pooled;
static pthread_mutex_t light_pool_lock = PTHREAD_MUTEX_INITIALIZER;

static int sys_flock(int fd, int op)
{
	int r;
	do
		r = (int)CHELL_SC(SYS_flock, fd, op, 0, 0, 0, 0);
	while (r == -EINTR);
	return r;
}

/* In a forked child: the buffer files' descriptors are the parent's open
 * file descriptions, and flock locks belong to those, so the child would
 * count as the parent (and could think itself the last user while the
 * parent still works on the buffer). Each gets a description of its own,
 * with its own LOCK_SH, at the same number. */
static bool is_file(int fd, uint64_t dev, uint64_t ino)
{
	struct stat st;
	return fd >= 0 && sys_fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

void warp_files_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	files_lock = fresh;
	light_pool_lock = fresh;
	/* The child's table is the forking thread's: the process's, or one
	 * that thread unshared, where warp's numbers may be closed or other
	 * files. Each is checked; one that is not warp's is forgotten (never
	 * closed: the number is someone else's). */
	for (struct warp_file *w = reaped, *next; w; w = next) {
		next = w->next; /* the parent releases these; the child lets go of its copies */
		if (is_file(w->bfd, w->bdev, w->bino))
			chell_internal_close(w->bfd);
		w->bfd = -1;
		if (!is_file(w->rfd, w->dev, w->ino))
			w->rfd = -1;
		if (!is_file(w->wfd, w->dev, w->ino))
			w->wfd = -1;
		if (!is_file(w->lfd, w->dev, w->ino))
			w->lfd = -1;
		if (!is_file(w->probe_fd, w->dev, w->ino))
			w->probe_fd = -1;
		file_free(w);
	}
	reaped = NULL;
	for (struct warp_file *w = files; w; w = w->next) {
		if (!is_file(w->rfd, w->dev, w->ino))
			w->rfd = -1;
		if (!is_file(w->wfd, w->dev, w->ino))
			w->wfd = -1;
		if (!is_file(w->lfd, w->dev, w->ino)) {
			w->lfd = -1;
			w->lfd_ofd = NULL;
		}
		atomic_store(&w->detach_ofd, NULL);
		if (!is_file(w->probe_fd, w->dev, w->ino))
			w->probe_fd = -1; /* never closed: the number is someone else's */
		if (atomic_load(&w->light)) {
			/* the child's own copy of the records: a lock another
			 * thread of the parent held at the fork is free here */
			memset(&w->hdr->lock, 0, sizeof(w->hdr->lock));
			memset(&w->hdr->koff_lock, 0, sizeof(w->hdr->koff_lock));
			warp_lease_after_fork(w);
			continue;
		}
		char path[CHELL_FD_PATH_MAX], name[96];
		int n;
		if (is_file(w->bfd, w->bdev, w->bino)) {
			n = chell_internal_openat(AT_FDCWD, chell_fd_path(path, w->bfd), O_RDWR | O_CLOEXEC, 0);
			if (n < 0)
				continue; /* keeps the parent's: the last close may then be wrong about being last */
			sys_flock(n, LOCK_SH);
			sys_dup3(n, w->bfd, O_CLOEXEC);
			sys_close(n);
		} else {
			/* a new number for it, by its name if that is still it */
			buf_name(name, sizeof name, w->dev, w->ino);
			n = chell_internal_openat(AT_FDCWD, name, O_RDWR | O_CLOEXEC, 0);
			if (n >= 0 && !is_file(n, w->bdev, w->bino)) {
				sys_close(n);
				n = -1;
			}
			if (n >= 0)
				sys_flock(n, LOCK_SH);
			w->bfd = n >= 0 ? chell_internal_fd(n, -1) : -1;
		}
		warp_lease_after_fork(w);
	}
}


/* Size the buffer file. ftruncate obeys RLIMIT_FSIZE, which limits the
 * application's files, not Chell's: under a smaller limit the call fails
 * (the file is then not buffered) and the SIGXFSZ the kernel sends the
 * thread is taken back, unless one was pending already. */
static int size_buffer(int fd)
{
	sigset_t x, old, pend;
	sigemptyset(&x);
	sigaddset(&x, SIGXFSZ);
	sigpending(&pend);
	bool had = sigismember(&pend, SIGXFSZ);
	pthread_sigmask(SIG_BLOCK, &x, &old);
	int r = sys_ftruncate(fd, (off_t)WARP_MAP_BYTES);
	if (r == -EFBIG && !had) {
		struct timespec zero = {0, 0};
		sigtimedwait(&x, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

static void buf_name(char *out, size_t n, uint64_t dev, uint64_t ino)
{
	snprintf(out, n, "/dev/shm/chell-warp.%llx.%llu", (unsigned long long)dev, (unsigned long long)ino);
}

/* The tier file's birth time (its identity beyond dev/ino, which a new
 * file may reuse after a delete); 0 where the file system has none. */
static void birth(int fd, int64_t *sec, int64_t *nsec)
{
	struct statx sx;
	*sec = *nsec = 0;
	if (CHELL_SC(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_BTIME, &sx, 0) == 0 && (sx.stx_mask & STATX_BTIME)) {
		*sec = sx.stx_btime.tv_sec;
		*nsec = sx.stx_btime.tv_nsec;
	}
}

/* A descriptor of the tier file for Chell's own reads and write-backs
 * (fills, the checkpoint thread, which has no application descriptor):
 * read-write if the process may, else read-only; -1 if neither. */
static int tier_fd(int fd, bool *writable, bool *noatime)
{
	char path[CHELL_FD_PATH_MAX];
	chell_fd_path(path, fd);
	int t = chell_internal_openat(AT_FDCWD, path, O_RDWR | O_CLOEXEC | O_NOATIME, 0);
	*noatime = t >= 0;
	if (t == -EPERM)
		t = chell_internal_openat(AT_FDCWD, path, O_RDWR | O_CLOEXEC, 0);
	*writable = t >= 0;
	if (t < 0) {
		t = chell_internal_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOATIME, 0);
		*noatime = t >= 0;
		if (t == -EPERM)
			t = chell_internal_openat(AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
	}
	return t >= 0 ? chell_internal_fd(t, 1) : -1;
}

static void init_hdr(struct warp_file *w, int64_t bs, int64_t bn)
{
	struct warp_hdr *h = w->hdr;
	memset(h, 0, sizeof(*h));
	h->dev = w->dev;
	h->ino = w->ino;
	h->btime_sec = bs;
	h->btime_nsec = bn;
	h->node_shift = warp_node_shift; /* the node records were punched to zeros */
	h->version = WARP_VERSION;
	atomic_thread_fence(memory_order_release);
	h->magic = WARP_MAGIC;
}

/* Alone on the buffer file (LOCK_EX): write back what a killed user left,
 * if it is this tier file's, and start afresh. */
static void recover(struct warp_file *w, int fd, int64_t bs, int64_t bn, bool fresh)
{
	struct warp_hdr *h = w->hdr;
	if (h->magic == WARP_MAGIC && h->version == WARP_VERSION && atomic_load(&h->dirty_blocks)) {
		bool wr = false, na;
		int t = -1;
		if (h->dev == w->dev && h->ino == w->ino && (bs | bn) && h->btime_sec == bs &&
		    h->btime_nsec == bn)
			t = w->wfd >= 0 ? w->wfd : tier_fd(fd, &wr, &na);
		if (t >= 0 && t != w->wfd && !wr) {
			chell_internal_close(t);
			t = -1;
		}
		if (t >= 0) {
			uint64_t before = atomic_load(&h->dirty_blocks);
			int e = warp_writeback(w, t, 0, WARP_MAX_BLOCKS);
			if (t != w->wfd)
				chell_internal_close(t);
			if (e == 0) {
				WCTR(recovered_blocks, before);
				chell_info("warp: wrote back %llu blocks a killed process left buffered",
					   (unsigned long long)before);
			}
		} else {
			chell_log("warp: a buffer left by a killed process no longer matches its file; "
				  "dropped (%llu blocks)", (unsigned long long)atomic_load(&h->dirty_blocks));
		}
	}
	/* empty the data and bitmaps, keep the size (sparse); a file we just
	 * made has nothing to empty (the punch walks the whole 64 GiB range
	 * and every mapping of it: a sixth of a light open's cost) */
	if (!fresh)
		CHELL_SC(SYS_fallocate, w->bfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, WARP_MAP_BYTES, 0, 0);
	init_hdr(w, bs, bn);
}

/* Released light regions, zeroed, for the next light file: a mapping made
 * and unmapped per open and last close cost ~40% of a light open (the
 * unmapping's TLB shootdown in a process with other threads, the page
 * faults); a kept one costs a memset of the records that were used. */

static unsigned char *light_region_get(void)
{
	unsigned char *m = NULL;
	pthread_mutex_lock(&light_pool_lock);
	if (light_pooled)
		m = light_pool[--light_pooled];
	pthread_mutex_unlock(&light_pool_lock);
	if (m)
		return m;
	m = REAL(mmap64)(NULL, WARP_LIGHT_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			 -1, 0);
	return m == MAP_FAILED ? NULL : m;
}

/* w's light region, no longer used by anyone: zeroed where it was written
 * (the header, the records below light_top; a light file has no block
 * bits) and kept, or unmapped. */
static void light_region_put(struct warp_file *w)
{
	unsigned char *m = w->light_map;
	memset(m, 0, sizeof(struct warp_hdr));
	memset(m + WARP_NODES_OFF, 0, (size_t)atomic_load(&w->light_top) * sizeof(struct warp_node));
	pthread_mutex_lock(&light_pool_lock);
	if (light_pooled < LIGHT_POOL) {
		light_pool[light_pooled++] = m;
		m = NULL;
	}
	pthread_mutex_unlock(&light_pool_lock);
	if (m)
		munmap(m, WARP_LIGHT_BYTES);
}

static void file_free(struct warp_file *w)
{
	warp_tier_unmap_all(w);
	if (w->map && w->map != w->light_map)
		munmap(w->map, WARP_MAP_BYTES);
	if (w->light_map)
		light_region_put(w);
	if (w->bfd >= 0)
		chell_internal_close(w->bfd);
	if (w->rfd >= 0 && w->rfd != w->wfd && w->rfd != w->lfd)
		chell_internal_close(w->rfd);
	if (w->wfd >= 0 && w->wfd != w->lfd)
		chell_internal_close(w->wfd);
	if (w->lfd >= 0)
		chell_internal_close(w->lfd);
	if (w->probe_fd >= 0)
		chell_internal_close(w->probe_fd);
	free(w);
}

/* The regions of a buffer laid out from base (buf.h: header, node
 * records, bitmaps, data; a light file has no data area). */
static void set_layout(struct warp_file *w, unsigned char *base, bool with_data)
{
	w->hdr = (struct warp_hdr *)base;
	w->nodes = (struct warp_node *)(base + WARP_NODES_OFF);
	w->valid = (_Atomic uint64_t *)(base + WARP_VALID_OFF);
	w->dirty = (_Atomic uint64_t *)(base + WARP_DIRTY_OFF);
	w->data = with_data ? base + WARP_DATA_OFF : NULL;
	atomic_thread_fence(memory_order_release);
	w->map = base;
}

/* A light file's records: private, zero-filled, no buffer file. Returns
 * false if they cannot be had (the caller then makes a buffer file). */
static bool light_open(struct warp_file *w, int fd)
{
	unsigned char *m = light_region_get();
	if (!m)
		return false;
	w->light_map = m;
	w->light = 1;
	atomic_store(&w->kernel_reads_left, warp_map_after);
	set_layout(w, m, false);
	init_hdr(w, 0, 0);
	/* the first node records are read (state) before they are written: a
	 * store now makes their page at once (in a new region), instead of the
	 * zero page's read fault and then a copy-on-write fault */
	atomic_store(&w->nodes[0].want, 0);
	warp_light_touch(w, 1);
	int saved = warp_call_fd;
	warp_call_fd = fd;
	warp_patterns_apply(w); /* what earlier runs learnt, as a fresh buffer gets */
	warp_call_fd = saved;
	WCTR(light_files, 1);
	return true;
}

/* Open and map the buffer file of (dev, ino); fd is a descriptor of the
 * tier file. With `light`, a file with no buffer file yet is light (the
 * header comment). */
static struct warp_file *file_open(int fd, uint64_t dev, uint64_t ino, bool create, bool light)
{
	struct warp_file *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->dev = dev;
	w->ino = ino;
	w->refs = 1;
	w->bfd = w->rfd = w->wfd = w->probe_fd = -1;
	atomic_store(&w->prev_node, WARP_NODE_NONE);
	w->lfd = -1;
	if (fd >= 0 && !warp_lease_mode) {
		/* warp.outside=trust: descriptors of Chell's own for fills and the
		 * checkpoint thread's write-backs (a lease would count them) */
		bool wr, na;
		w->rfd = tier_fd(fd, &wr, &na);
		if (wr)
			w->wfd = w->rfd;
		w->fill_ok = w->rfd >= 0 && na;
	}
	char name[96];
	buf_name(name, sizeof(name), dev, ino);
	if (light && create && warp_lease_mode && fd >= 0) {
		int b = chell_internal_openat(AT_FDCWD, name, O_RDONLY | O_CLOEXEC, 0);
		if (b >= 0)
			sys_close(b); /* a buffer file exists: joined below */
		else if (b == -ENOENT && light_open(w, fd))
			return w;
	}
	bool mine = false; /* we hold LOCK_EX on the buffer file that has the name */
	for (int attempt = 0; attempt < 8; attempt++) {
		int b = chell_internal_openat(AT_FDCWD, name, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
		if (b < 0)
			break;
		w->bfd = chell_internal_fd(b, 1);
		if (w->bfd < 0)
			break;
		bool alone = sys_flock(w->bfd, LOCK_EX | LOCK_NB) == 0;
		if (!alone)
			sys_flock(w->bfd, LOCK_SH);
		/* the name may have been removed (and made again) by a last user
		 * between our open and our lock: then start over on the new one */
		struct stat a, n;
		if (sys_fstat(w->bfd, &a) == 0 && sys_fstatat(AT_FDCWD, name, &n, 0) == 0 &&
		    a.st_ino == n.st_ino && a.st_dev == n.st_dev) {
			w->bdev = a.st_dev;
			w->bino = a.st_ino;
			/* from here a failure leaves the name to no one if we are
			 * alone on it (a small RLIMIT_FSIZE refuses the sizing, a
			 * mapping fails): the last user removes it, which is us */
			mine = alone;
			bool fresh = a.st_size == 0;
			if ((uint64_t)a.st_size < WARP_MAP_BYTES && size_buffer(w->bfd) < 0)
				break;
			void *m = REAL(mmap64)(NULL, WARP_MAP_BYTES, PROT_READ | PROT_WRITE,
					       MAP_SHARED | MAP_NORESERVE, w->bfd, 0);
			if (m == MAP_FAILED)
				break;
			set_layout(w, m, true);
			int64_t bs = 0, bn = 0;
			if (fd >= 0)
				birth(fd, &bs, &bn);
			if (alone) {
				if (fd < 0 && w->hdr->magic != WARP_MAGIC)
					break; /* a path call found a stale name: nothing to do */
				if (fd >= 0) {
					int saved = warp_call_fd;
					warp_call_fd = fd;
					recover(w, fd, bs, bn, fresh);
					warp_patterns_apply(w); /* a fresh start: what earlier runs learnt */
					warp_call_fd = saved;
				}
				sys_flock(w->bfd, LOCK_SH);
			} else if (w->hdr->magic != WARP_MAGIC || w->hdr->version != WARP_VERSION) {
				break; /* someone else's file of another version: not ours to use */
			}
			return w;
		}
		chell_internal_close(w->bfd);
		w->bfd = -1;
	}
	if (mine) {
		/* a path call's stale name, or a buffer we could not set up: it
		 * goes with its last user, us - unless it may hold what a killed
		 * user left (sized, with dirty blocks), for the next opener */
		struct stat a, n;
		bool empty = w->hdr ? w->hdr->magic != WARP_MAGIC || !atomic_load(&w->hdr->dirty_blocks)
				    : sys_fstat(w->bfd, &a) == 0 && (uint64_t)a.st_size < WARP_MAP_BYTES;
		if (empty && sys_fstat(w->bfd, &a) == 0 && sys_fstatat(AT_FDCWD, name, &n, 0) == 0 &&
		    a.st_ino == n.st_ino && a.st_dev == n.st_dev)
			sys_unlink(name);
	}
	file_free(w);
	return NULL;
}

/* A light file's records move to the buffer file (warp.h). Nothing of the
 * file is buffered meanwhile: buffering starts only once the lease is
 * taken, after this. The light records stay mapped until the file is
 * freed: a thread that read the old pointers may still count itself there
 * (tier_ops: warp_set_state waits for those too) or wait on the old locks
 * (taken here, so a holder finishes first; warp_lock and warp_koff_lock
 * then move on to the new ones). */
_Atomic uint64_t warp_promote_ns = 100000;

int warp_file_promote(struct warp_file *w, int fd)
{
	if (!atomic_load(&w->light))
		return 0;
	uint64_t t0 = mapped_tick();
	struct warp_file *n = file_open(fd, w->dev, w->ino, true, false);
	if (!n)
		return -1;
	warp_tier_probe_close(w); /* a description of ours would keep the lease away */
	struct warp_hdr *old = w->hdr;
	chell_lock_acquire(&old->lock);
	chell_lock_acquire(&old->koff_lock);
	/* alone on the new buffer file: it is fresh, and what this process
	 * learnt is the best start; else the others' states stand */
	if (sys_flock(n->bfd, LOCK_EX | LOCK_NB) == 0) {
		uint32_t nn = warp_nnodes(w);
		for (uint32_t k = 0; k < nn; k++) {
			struct warp_node *f = &w->nodes[k], *t = &n->nodes[k];
			atomic_store(&t->state, atomic_load(&f->state));
			t->cand = f->cand;
			t->streak = f->streak;
			atomic_store(&t->want, atomic_load(&f->want));
			t->succ1 = f->succ1;
			t->last_use = f->last_use;
			t->st = f->st;
		}
		memcpy(n->hdr->xf, old->xf, sizeof(old->xf));
		atomic_store(&n->hdr->last_ckpt, atomic_load(&old->last_ckpt));
		atomic_store(&n->hdr->lease_try, atomic_load(&old->lease_try));
		sys_flock(n->bfd, LOCK_SH);
	}
	if (atomic_load(&old->no_buffer))
		atomic_store(&n->hdr->no_buffer, 1);
	w->bfd = n->bfd;
	w->bdev = n->bdev;
	w->bino = n->bino;
	set_layout(w, n->map, true);
	atomic_store(&w->kernel_reads_left, 0); /* buffered nodes may come: reads must see them */
	atomic_store(&w->light, 0);
	chell_lock_release(&old->koff_lock);
	chell_lock_release(&old->lock);
	free(n); /* its buffer file is w's now; it has nothing else */
	WCTR(light_promotions, 1);
	uint64_t d = mapped_tick() - t0, avg = atomic_load(&warp_promote_ns);
	atomic_store(&warp_promote_ns, (avg * 7 + d) / 8);
	return 0;
}

void warp_files_lock(void)
{
	pthread_mutex_lock(&files_lock);
}

void warp_files_unlock(void)
{
	pthread_mutex_unlock(&files_lock);
}

/* The process's warp_file of (dev, ino), a new reference; opened (and
 * listed) on first use: file_open(fd, dev, ino, create, light: create). */
static struct warp_file *file_reference(int fd, uint64_t dev, uint64_t ino, bool create)
{
	pthread_mutex_lock(&files_lock);
	struct warp_file *w;
	for (w = files; w; w = w->next)
		if (w->dev == dev && w->ino == ino)
			break;
	if (w) {
		w->refs++;
		pthread_mutex_unlock(&files_lock);
		return w;
	}
	if (chell_fdt_private()) {
		/* its descriptors would be opened in this thread's table, and
		 * every other thread would use the numbers in the process's:
		 * not served (the caller takes the kernel's path) */
		pthread_mutex_unlock(&files_lock);
		return NULL;
	}
	w = file_open(fd, dev, ino, create, create);
	if (w) {
		w->next = files;
		files = w;
	}
	pthread_mutex_unlock(&files_lock);
	return w;
}

struct warp_file *warp_file_get(int fd, uint64_t dev, uint64_t ino)
{
	return file_reference(fd, dev, ino, true);
}

struct warp_file *warp_file_listed(uint64_t dev, uint64_t ino)
{
	pthread_mutex_lock(&files_lock);
	struct warp_file *w;
	for (w = files; w; w = w->next)
		if (w->dev == dev && w->ino == ino) {
			w->refs++;
			break;
		}
	pthread_mutex_unlock(&files_lock);
	return w;
}

struct warp_file *warp_file_lookup(uint64_t dev, uint64_t ino)
{
	return file_reference(-1, dev, ino, false);
}

void warp_file_put(struct warp_file *w)
{
	pthread_mutex_lock(&files_lock);
	if (--w->refs > 0) {
		pthread_mutex_unlock(&files_lock);
		return;
	}
	for (struct warp_file **pp = &files; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	if (chell_fdt_private() && warp_ckpt_running()) {
		/* its descriptors are in the process's table, not this thread's:
		 * the checkpoint thread lets go of it (warp_files_reap) */
		w->next = reaped;
		reaped = w;
		pthread_mutex_unlock(&files_lock);
		return;
	}
	pthread_mutex_unlock(&files_lock);
	file_release(w);
}

/* The files put last on threads with a table of their own: released here,
 * on the checkpoint thread (the process's table). */
void warp_files_reap(void)
{
	pthread_mutex_lock(&files_lock);
	struct warp_file *w = reaped;
	reaped = NULL;
	pthread_mutex_unlock(&files_lock);
	while (w) {
		struct warp_file *next = w->next;
		file_release(w);
		w = next;
	}
}

static void file_release(struct warp_file *w)
{
	warp_prefetch_forget(w);
	if (w->lfd >= 0)
		warp_lease_detach(w, w->lfd_ofd);
	warp_buf_last_close(w);
	file_free(w);
}

/* fn on every file, each held by a reference meanwhile. The application
 * may close its last descriptor of w while fn runs: the reference the walk
 * puts back is then the last one, and warp_file_put does what that close
 * would have done (before, the count just went to 0 and the file stayed
 * listed, its buffer file, lease duplicate and descriptors never released). */
void warp_files_each(void (*fn)(struct warp_file *w, void *arg), void *arg)
{
	pthread_mutex_lock(&files_lock);
	struct warp_file *w = files;
	if (w)
		w->refs++;
	while (w) {
		pthread_mutex_unlock(&files_lock);
		fn(w, arg);
		pthread_mutex_lock(&files_lock);
		struct warp_file *next = w->next; /* w is still listed: we hold it */
		if (next)
			next->refs++;
		if (w->refs > 1) {
			w->refs--;
		} else {
			pthread_mutex_unlock(&files_lock);
			warp_file_put(w);
			pthread_mutex_lock(&files_lock);
		}
		w = next;
	}
	pthread_mutex_unlock(&files_lock);
}

/* The last process on the machine using the buffer writes everything back
 * and removes it; others leave it to whoever is last. */
void warp_buf_last_close(struct warp_file *w)
{
	if (w->hdr && atomic_load(&w->light)) {
		warp_patterns_keep(w); /* nothing was buffered; no file to remove */
		return;
	}
	if (!w->hdr || sys_flock(w->bfd, LOCK_EX | LOCK_NB) < 0)
		return;
	warp_patterns_keep(w);
	if (w->wfd >= 0 || !atomic_load(&w->hdr->dirty_blocks)) {
		warp_flush_all(w, true);
		char name[96];
		buf_name(name, sizeof(name), w->dev, w->ino);
		struct stat a, n;
		if (!atomic_load(&w->hdr->dirty_blocks) && sys_fstat(w->bfd, &a) == 0 &&
		    sys_fstatat(AT_FDCWD, name, &n, 0) == 0 && a.st_ino == n.st_ino)
			sys_unlink(name);
	}
	sys_flock(w->bfd, LOCK_SH);
}

/* --------------------------------------------------------------- blocks */

static void tree_bytes(int64_t d)
{
	if (warp_tree_bytes) {
		uint64_t now = atomic_fetch_add(warp_tree_bytes, (uint64_t)d) + (uint64_t)d;
		uint64_t max = atomic_load_explicit(&warp_ctr.buffer_bytes_max, memory_order_relaxed);
		if (d > 0 && now > max)
			atomic_store_explicit(&warp_ctr.buffer_bytes_max, now, memory_order_relaxed);
	}
}

void warp_blk_set_valid(struct warp_file *w, uint64_t b)
{
	uint64_t bit = 1ull << (b & 63);
	if (atomic_fetch_or(&w->valid[b >> 6], bit) & bit)
		return;
	atomic_fetch_add(&w->hdr->valid_blocks, 1);
	uint64_t k = (b << WARP_BLK_SHIFT) >> w->hdr->node_shift;
	if (k < WARP_MAX_NODES)
		w->nodes[k].valid++;
	tree_bytes((int64_t)WARP_BLK);
}

int warp_blk_fill(struct warp_file *w, uint64_t b)
{
	int fd = warp_rfd(w);
	if (fd < 0)
		return -EBADF;
	unsigned char *dst = w->data + b * WARP_BLK;
	size_t got = 0;
	while (got < WARP_BLK) {
		ssize_t r = sys_pread(fd, dst + got, WARP_BLK - got, (off_t)(b * WARP_BLK + got));
		if (r == -EINTR)
			continue;
		if (r < 0)
			return (int)r;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got < WARP_BLK) /* past the end: zeros, as the file reads when it grows */
		memset(dst + got, 0, WARP_BLK - got);
	chell_tier_read(got);
	WCTR(fills, 1);
	warp_blk_set_valid(w, b);
	return 0;
}

void warp_blk_mark_dirty(struct warp_file *w, uint64_t b)
{
	uint64_t bit = 1ull << (b & 63);
	if (!(atomic_fetch_or(&w->dirty[b >> 6], bit) & bit))
		atomic_fetch_add(&w->hdr->dirty_blocks, 1);
}

/* Store [from, from+len) of the tier file through a shared mapping: write()
 * obeys RLIMIT_FSIZE, which is the application's limit on its own writes,
 * not on bytes it wrote earlier inside it (a buffered write below the
 * limit whose block reaches past it). A fault (the file shrank meanwhile)
 * leaves the rest: those bytes are gone from the file anyway. */
static int store_mapped(int fd, uint64_t from, const unsigned char *src, size_t len)
{
	uint64_t base = from & ~(uint64_t)4095;
	size_t span = (size_t)(from - base) + len;
	void *m = REAL(mmap64)(NULL, span, PROT_WRITE, MAP_SHARED, fd, (off_t)base);
	if (m == MAP_FAILED)
		return -errno;
	int fault;
	mapped_copy((unsigned char *)m + (from - base), src, len, &fault);
	munmap(m, span);
	return 0;
}

/* The checkpoint thread's write-back waits for the modelled device (the
 * tier's charge) after it lets go of the buffer's lock, not under it: the
 * bytes of its extents add up here (warp_writeback_step) and are charged by
 * warp_writeback_settle. Every other write-back charges at once. */
static __thread struct {
	bool on;
	uint64_t bytes;
	unsigned extents;
} wb_defer;

static void wb_charge(size_t n)
{
	if (warp_bg)
		WCTR(writeback_bg_bytes, n);
	if (wb_defer.on) {
		wb_defer.bytes += n;
		wb_defer.extents++;
		return;
	}
	chell_tier_write(n);
}

void warp_writeback_settle(void)
{
	if (wb_defer.bytes && chell_tier_active)
		chell_tier_charge(true, (size_t)wb_defer.bytes, wb_defer.extents);
	wb_defer.bytes = 0;
	wb_defer.extents = 0;
}

/* Dirty blocks of [*cursor, hi) in order, each run of consecutive ones one
 * pwrite, cut at the tier file's size (a block past it was truncated away
 * and is dropped), until at least `most` blocks are written back; *cursor
 * is left where it stopped (hi: done). */
static int writeback(struct warp_file *w, int fd, uint64_t *cursor, uint64_t hi, uint64_t most)
{
	uint64_t lo = *cursor;
	*cursor = hi;
	if (!atomic_load(&w->hdr->dirty_blocks))
		return 0;
	if (fd < 0)
		return -EBADF;
	struct stat st;
	if (sys_fstat(fd, &st) < 0)
		return -EIO;
	uint64_t size = (uint64_t)st.st_size;
	/* a duplicate of an O_APPEND description (the lease's) appends: at pos */
	int rwf = (sys_fcntl(fd, F_GETFL, 0) & O_APPEND) ? RWF_NOAPPEND : 0;
	if (hi > WARP_MAX_BLOCKS)
		hi = WARP_MAX_BLOCKS;
	int err = 0;
	uint64_t b = lo, done = 0;
	while (b < hi) {
		if (done >= most) {
			*cursor = b;
			break;
		}
		uint64_t word = atomic_load(&w->dirty[b >> 6]) >> (b & 63);
		if (!word) {
			b = (b | 63) + 1;
			continue;
		}
		b += (uint64_t)__builtin_ctzll(word);
		if (b >= hi)
			break;
		uint64_t e = b;
		while (e < hi && warp_blk_dirty(w, e))
			e++;
		uint64_t from = b * WARP_BLK, to = e * WARP_BLK < size ? e * WARP_BLK : size;
		if (from < to && to > mapped_fsize()) {
			err = store_mapped(fd, from, w->data + from, (size_t)(to - from));
			if (err == 0) {
				wb_charge((size_t)(to - from));
				WCTR(writeback_bytes, to - from);
				from = to;
			}
		}
		while (from < to && !err) {
			struct iovec v = {w->data + from, (size_t)(to - from)};
			ssize_t r = rwf ? sys_pwritev2(fd, &v, 1, (off_t)from, rwf)
					: sys_pwrite(fd, w->data + from, (size_t)(to - from), (off_t)from);
			if (r == -EINTR)
				continue;
			if (r <= 0) {
				err = r < 0 ? (int)r : -EIO;
				break;
			}
			wb_charge((size_t)r);
			WCTR(writeback_bytes, (uint64_t)r);
			from += (uint64_t)r;
		}
		if (err) {
			*cursor = b;
			return err; /* the rest stays dirty */
		}
		WCTR(writeback_extents, 1);
		for (uint64_t i = b; i < e; i++) {
			uint64_t bit = 1ull << (i & 63);
			if (atomic_fetch_and(&w->dirty[i >> 6], ~bit) & bit)
				atomic_fetch_sub(&w->hdr->dirty_blocks, 1);
		}
		done += e - b;
		b = e;
	}
	return 0;
}

int warp_writeback(struct warp_file *w, int fd, uint64_t lo, uint64_t hi)
{
	return writeback(w, fd, &lo, hi, UINT64_MAX);
}

int warp_writeback_step(struct warp_file *w, int fd, uint64_t *cursor, uint64_t hi, uint64_t most)
{
	wb_defer.on = true;
	int r = writeback(w, fd, cursor, hi, most);
	wb_defer.on = false;
	return r;
}

void warp_invalidate(struct warp_file *w, uint64_t lo, uint64_t hi)
{
	if (hi > WARP_MAX_BLOCKS)
		hi = WARP_MAX_BLOCKS;
	if (lo >= hi || !atomic_load(&w->hdr->valid_blocks))
		return;
	uint64_t dropped = 0;
	for (uint64_t b = lo; b < hi;) {
		uint64_t word = atomic_load(&w->valid[b >> 6]) >> (b & 63);
		if (!word) {
			b = (b | 63) + 1;
			continue;
		}
		b += (uint64_t)__builtin_ctzll(word);
		if (b >= hi)
			break;
		uint64_t bit = 1ull << (b & 63);
		atomic_fetch_and(&w->valid[b >> 6], ~bit);
		if (atomic_fetch_and(&w->dirty[b >> 6], ~bit) & bit)
			atomic_fetch_sub(&w->hdr->dirty_blocks, 1);
		atomic_fetch_sub(&w->hdr->valid_blocks, 1);
		uint64_t k = (b << WARP_BLK_SHIFT) >> w->hdr->node_shift;
		if (k < WARP_MAX_NODES && w->nodes[k].valid)
			w->nodes[k].valid--;
		dropped++;
		b++;
	}
	if (!dropped)
		return;
	tree_bytes(-(int64_t)(dropped * WARP_BLK));
	WCTR(reclaims, 1);
	CHELL_SC(SYS_fallocate, w->bfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		 WARP_DATA_OFF + lo * WARP_BLK, (hi - lo) * WARP_BLK, 0, 0);
}

/* Blocks [lo, hi) of node k */
static void node_blocks(struct warp_file *w, uint64_t k, uint64_t *lo, uint64_t *hi)
{
	*lo = (k << w->hdr->node_shift) >> WARP_BLK_SHIFT;
	*hi = ((k + 1) << w->hdr->node_shift) >> WARP_BLK_SHIFT;
}

/* How long a change to buffered waits for tier calls in flight (a killed
 * process may have left the count up for good: then the node stays). */
#define WAIT_TIER_SPINS 20000

int warp_set_state(struct warp_file *w, uint64_t k, enum warp_state s)
{
	if (k >= WARP_MAX_NODES)
		return -EAGAIN;
	struct warp_node *n = &w->nodes[k];
	enum warp_state cur = (enum warp_state)atomic_load(&n->state);
	if (cur == s)
		return 0;
	if (s == WARP_BUFFERED) {
		/* with leases: only a process holding a duplicate of the leased
		 * description (which keeps the lease alive) starts buffering */
		if (atomic_load(&w->hdr->no_buffer) ||
		    (warp_lease_mode && (!atomic_load(&w->hdr->leased) || w->lfd < 0)))
			return -EAGAIN;
		/* Calls that saw the old state may still be moving bytes of the
		 * tier: the buffer may fill a block only after they are done.
		 * They count themselves in the node's tier_ops (or, spanning
		 * nodes, the header's) before they look at the state (seq_cst on
		 * both sides): either they see buffered, or we see them. Calls
		 * in other nodes do not matter: a file written all the time
		 * still gets its nodes buffered. */
		if (mapped_tick() < atomic_load(&w->hdr->refuse_until))
			return -EAGAIN;
		atomic_store(&n->state, (uint8_t)s);
		/* a call that read the light records' pointers before the file
		 * was promoted counts itself there (warp_file_promote) */
		struct warp_hdr *lh = NULL;
		struct warp_node *ln = NULL;
		if (w->light_map && w->light_map != w->map) {
			lh = (struct warp_hdr *)w->light_map;
			ln = (struct warp_node *)(w->light_map + WARP_NODES_OFF) + k;
		}
		int spins = 0;
		while (atomic_load(&n->tier_ops) != 0 || atomic_load(&w->hdr->tier_ops) != 0 ||
		       (lh && (atomic_load(&ln->tier_ops) != 0 || atomic_load(&lh->tier_ops) != 0))) {
			if (++spins > WAIT_TIER_SPINS) {
				atomic_store(&n->state, (uint8_t)cur);
				atomic_store(&w->hdr->refuse_until, mapped_tick() + 1000000000ull);
				return -EAGAIN;
			}
			sched_yield();
		}
	} else {
		if (cur == WARP_BUFFERED) {
			uint64_t lo, hi;
			node_blocks(w, k, &lo, &hi);
			if (warp_writeback(w, warp_wfd(w), lo, hi) < 0)
				return -EAGAIN; /* cannot write back from here: stays buffered */
			warp_invalidate(w, lo, hi);
		}
		atomic_store(&n->state, (uint8_t)s);
	}
	WCTR(transitions[cur][s], 1);
	return 0;
}

uint32_t warp_nnodes(struct warp_file *w)
{
	struct mapped_inode *in = mapped_inode_find(w->dev, w->ino);
	struct stat st;
	uint64_t size = in ? mapped_isize(in) : 0;
	int fd = warp_rfd(w);
	if (!in && fd >= 0 && sys_fstat(fd, &st) == 0)
		size = (uint64_t)st.st_size;
	uint64_t n = (size + ((1ull << w->hdr->node_shift) - 1)) >> w->hdr->node_shift;
	uint32_t nn = n < WARP_MAX_NODES ? (uint32_t)n : WARP_MAX_NODES;
	if (w->light_map)
		warp_light_touch(w, nn); /* callers walk and write records below nn */
	return nn;
}

int warp_flush_all(struct warp_file *w, bool drop)
{
	warp_lock(w);
	int r = warp_writeback(w, warp_wfd(w), 0, WARP_MAX_BLOCKS);
	if (r == 0 && drop)
		warp_invalidate(w, 0, WARP_MAX_BLOCKS);
	chell_lock_release(&w->hdr->lock);
	return r;
}

int warp_disable_buffer(struct warp_file *w)
{
	if (w->lfd >= 0)
		warp_lease_release(w); /* written back, nothing buffered */
	warp_lock(w);
	atomic_store(&w->hdr->no_buffer, 1);
	int r = warp_writeback(w, warp_wfd(w), 0, WARP_MAX_BLOCKS);
	if (r == 0) {
		warp_invalidate(w, 0, WARP_MAX_BLOCKS);
		uint32_t nn = warp_nnodes(w);
		for (uint32_t k = 0; k < nn; k++)
			if (atomic_load(&w->nodes[k].state) == WARP_BUFFERED)
				warp_set_state(w, k, WARP_NORMAL);
	}
	chell_lock_release(&w->hdr->lock);
	return r;
}
