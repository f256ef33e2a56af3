/* SPDX-License-Identifier: MIT */
/*
 * What a process outside Chell sees (warp.outside=lease, the default;
 * docs/WARP.md, "Processes outside Chell").
 *
 * A buffered byte is not in the tier file, so a process that does not run
 * Chell must not be able to read the file while anything is buffered. The
 * kernel's write lease says exactly when that is: F_SETLEASE(F_WRLCK) is
 * granted only while the leased open file description is the only open of
 * the file, anywhere; any other open() (any process, any user allowed to)
 * or truncate() of the file breaks it, and the kernel holds that open or
 * truncate until the lease holder gives the lease up (or lease-break-time
 * runs out). So:
 *
 *   - a node may become buffered only while the tree holds a write lease on
 *     the file, taken on the application's own description (no descriptor
 *     of Chell's own is open then: they would count; the mapped reads map
 *     through the application's descriptor);
 *   - the lease is taken through a duplicate of that description (lfd), which
 *     is also what fills and write-backs use (so the description must be
 *     open for writing; write-only is enough: fills are never made through it);
 *   - every process holding the duplicate polls F_GETLEASE from its
 *     checkpoint thread (a broken lease reads as the type it is being broken
 *     to); the first to see the break writes every dirty block back, drops
 *     the buffer, moves every buffered node to normal and releases the
 *     lease, and only then does the other open return: it reads the bytes.
 *
 * The lease's break signal: F_SETSIG is set to SIGWINCH (ignored unless
 * handled) before F_SETLEASE and the owner cleared right after, so no
 * signal is sent on a break (polling, not signals, notices it); both are
 * put back to their defaults when the lease goes. A description the
 * application uses for signal-driven I/O or leases of its own (F_SETOWN,
 * F_SETSIG, O_ASYNC, F_SETLEASE) is never leased by warp (warp_fcntl).
 */
#include <pthread.h>
#include <signal.h>

#include "warp.h"

/* one attempt per file per checkpoint interval (a refused F_SETLEASE is a
 * system call on the data path) */
#define LEASE_RETRY_NS (warp_checkpoint_ns ? warp_checkpoint_ns : 100000000ull)

/* Held by a lease being taken through a description a light file was
 * attached through (from the only-holder check until the lease is held),
 * and by a fork from its prepare to its end: so a fork never shares the
 * description in between (lease_ok). Nothing else is taken under it but
 * the files lock and the records' lock; Chell's background threads never
 * take it (a fork's prepare waits for them). */
static pthread_mutex_t fork_gate = PTHREAD_MUTEX_INITIALIZER;

void warp_lease_fork_event(enum chell_op ev)
{
	if (ev == CHELL_EV_FORK_PREPARE) {
		pthread_mutex_lock(&fork_gate);
	} else if (ev == CHELL_EV_FORK_PARENT) {
		pthread_mutex_unlock(&fork_gate);
	} else if (ev == CHELL_EV_FORK_CHILD) {
		pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
		fork_gate = fresh;
	}
}

/* Take the lease through c's description (lease_ok). */
static bool take(struct warp_file *w, chell_ctx *c)
{
	int d = w->lfd;
	if (d < 0) {
		/* made above the application's limit at once: moving a low one
		 * there would close it, and closing any descriptor of the file
		 * drops the process's POSIX locks on it */
		d = chell_nofile_dup_high(c->fd);
		if (d < 0) /* no room above the limit: where Chell's own go then */
			d = sys_fcntl(c->fd, F_DUPFD_CLOEXEC, chell_internal_floor());
		if (d < 0)
			return false;
		sys_fcntl(d, F_SETFD, FD_CLOEXEC);
		chell_internal_fd(d, -1);
	}
	struct warp_hdr *h = warp_lock(w);
	bool ok = false;
	if (!atomic_load(&h->leased)) {
		sys_fcntl(d, F_SETSIG, SIGWINCH);
		if (sys_fcntl(d, F_SETLEASE, F_WRLCK) == 0) {
			sys_fcntl(d, F_SETOWN, 0); /* breaks send no signal: polled */
			atomic_store(&h->leased, 1);
			w->lease_mine = 1;
			ok = true;
			WCTR(leases, 1);
		} else {
			sys_fcntl(d, F_SETSIG, 0);
		}
	}
	if (w->lfd < 0) {
		w->lfd = d;
		w->lfd_ofd = c->f->ofd;
		if (w->rfd < 0)
			w->rfd = d;
		if (w->wfd < 0)
			w->wfd = d;
	}
	chell_lock_release(&h->lock);
	return ok;
}

bool warp_lease_ok(struct warp_file *w, chell_ctx *c)
{
	if (!warp_lease_mode)
		return true;
	struct warp_hdr *h = w->hdr;
	bool light = atomic_load(&w->light);
	if (!light && atomic_load(&h->leased))
		return w->lfd >= 0; /* only a holder of the leased description buffers */
	if (chell_fdt_private())
		return false; /* a duplicate made here would be in this thread's table only */
	int st = mapped_status(c);
	if ((st & O_ACCMODE) == O_RDONLY || (st & (O_ASYNC | O_DIRECT)) || atomic_load(&h->no_buffer))
		return false;
	if (w->lfd >= 0 && w->lfd_ofd != c->f->ofd)
		return false; /* our duplicate is of another description (kept: POSIX locks) */
	uint64_t now = mapped_tick(), last = atomic_load(&h->lease_try);
	if (now - last < LEASE_RETRY_NS || !atomic_compare_exchange_strong(&h->lease_try, &last, now))
		return false;
	/* the application's own signal-driven I/O set-up stays untouched */
	if (sys_fcntl(c->fd, F_GETOWN, 0) != 0 || sys_fcntl(c->fd, F_GETSIG, 0) != 0)
		return false;
	struct warp_ofd *wo = (struct warp_ofd *)c->f->ofd->priv[c->layer];
	bool seen = atomic_load(&wo->light_seen);
	if (!light && !seen)
		return take(w, c);
	/* A light file (buf.c) or a description a light file was attached
	 * through: another process may hold this description with the file
	 * light (a fork shared it), and would not see what is buffered. The
	 * lease is taken only while this process holds the description's only
	 * descriptor, anywhere (refs: every process of the tree), with forks
	 * held off (fork_gate) until it is taken. Then no other process holds
	 * it, and none can get it but through this one, whose file is
	 * promoted first. */
	bool ok = false;
	pthread_mutex_lock(&fork_gate);
	if (!seen || atomic_load((_Atomic uint32_t *)&c->f->ofd->refs) == 1) {
		warp_files_lock();
		int promoted = warp_file_promote(w, c->fd);
		warp_files_unlock();
		if (promoted == 0)
			ok = take(w, c);
	}
	pthread_mutex_unlock(&fork_gate);
	return ok;
}

void warp_lease_release(struct warp_file *w)
{
	/* any descriptor of the leased description will do (a process that
	 * shares it without a duplicate of ours: the call's) */
	int fd = warp_own(w->lfd) >= 0 ? w->lfd : warp_call_fd;
	struct warp_hdr *h = warp_lock(w);
	if (atomic_load(&h->leased) && fd >= 0) {
		/* everything to the tier, nothing buffered: then the lease goes */
		warp_writeback(w, fd, 0, WARP_MAX_BLOCKS);
		uint32_t nn = warp_nnodes(w);
		for (uint32_t k = 0; k < nn; k++)
			if (atomic_load(&w->nodes[k].state) == WARP_BUFFERED && warp_set_state(w, k, WARP_NORMAL) == 0)
				atomic_store(&w->nodes[k].want, 1); /* the lease's choice, not the model's */
		warp_invalidate(w, 0, WARP_MAX_BLOCKS);
		atomic_store(&h->leased, 0);
		sys_fcntl(fd, F_SETLEASE, F_UNLCK);
		sys_fcntl(fd, F_SETSIG, 0);
		WCTR(lease_breaks, 1);
	}
	w->lease_mine = 0;
	chell_lock_release(&h->lock);
}

void warp_lease_detach(struct warp_file *w, struct chell_ofd *ofd)
{
	if (w->lfd < 0 || w->lfd_ofd != ofd)
		return;
	if (chell_fdt_private()) {
		/* lfd is not in this thread's table: the lease goes now (through
		 * the call's descriptor), the duplicate when the checkpoint
		 * thread, in the process's table, closes it */
		warp_lease_release(w);
		atomic_store(&w->detach_ofd, ofd);
		return;
	}
	warp_lease_release(w);
	warp_lock(w);
	if (w->rfd == w->lfd)
		w->rfd = -1;
	if (w->wfd == w->lfd)
		w->wfd = -1;
	chell_internal_close(w->lfd);
	w->lfd = -1;
	w->lfd_ofd = NULL;
	chell_lock_release(&w->hdr->lock);
}

bool warp_lease_poll(struct warp_file *w)
{
	struct chell_ofd *gone = atomic_exchange(&w->detach_ofd, NULL);
	if (gone)
		warp_lease_detach(w, gone);
	if (w->lfd < 0 || !atomic_load(&w->hdr->leased))
		return false;
	if (sys_fcntl(w->lfd, F_GETLEASE, 0) != F_WRLCK)
		warp_lease_release(w);
	return atomic_load(&w->hdr->leased);
}

void warp_lease_after_fork(struct warp_file *w)
{
	w->lease_mine = 0; /* the parent releases it at its exit; the child polls too */
}

static void release_mine(struct warp_file *w, void *arg)
{
	if (w->lease_mine)
		warp_lease_release(w);
}

void warp_lease_proc_end(void)
{
	warp_files_each(release_mine, NULL);
}
