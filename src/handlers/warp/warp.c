/* SPDX-License-Identifier: MIT */
/*
 * The WARP handler (warp.h, docs/WARP.md): its policy on the mapped-file
 * base and its operations. The base keeps the offset, the size, the
 * argument checks and the times; here each piece of a read or write goes
 * to its node's state:
 *
 *   normal    the kernel: pread/pwrite of the application's descriptor
 *   mapped    reads: memcpy from the tier's mapping (tier.c); writes: the
 *             kernel's (the page cache it writes is the mapping)
 *   buffered  the shared buffer under its lock (buf.c): reads from valid
 *             blocks, the rest from the tier; writes into blocks (filled
 *             first when partly written), marked dirty
 *
 * Invariants (docs/WARP.md, "Buffer coherence"):
 *  - a block is valid only in a buffered node; leaving buffered writes the
 *    node back and drops its blocks, under the lock;
 *  - calls on the tier path count themselves in their node's tier_ops (or
 *    hdr->tier_ops when they may span nodes) before they look at the state,
 *    so a node becomes buffered only once no call that saw it otherwise
 *    still moves bytes of it (warp_set_state);
 *  - no valid block lies wholly past the end of file: writes past the end
 *    of a buffered node grow the file in the kernel first, truncation drops
 *    the blocks past the new end and zeroes the tail of the last one, and
 *    appends (the kernel's) write back and drop the block at the end first.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <sys/uio.h>

#include "warp.h"
#include "chell/tier.h"
#include "../mapped/short.h"

unsigned warp_node_shift = 21;
uint64_t warp_budget;
uint64_t warp_checkpoint_ns;
uint64_t warp_idle_ns;
uint32_t warp_flip_ppm;
uint32_t warp_map_after = 8;
int warp_lease_mode = 1;
_Atomic uint64_t *warp_tree_bytes;
struct warp_counters warp_ctr;


static struct mapped_ops warp_mapped;

static inline struct warp_file *W(chell_ctx *c)
{
	return (struct warp_file *)L(c)->file;
}

static inline struct warp_ofd *WD(chell_ctx *c)
{
	return (struct warp_ofd *)c->f->ofd->priv[c->layer];
}

/* ------------------------------------------------------------ settings */

static int warp_proc_init(void)
{
	int shift = chell_setting_shift("warp.node_size");
	if (shift < 0)
		return -1;
	warp_node_shift = (unsigned)shift;
	warp_budget = chell_setting_size("warp.buffer_budget");
	warp_checkpoint_ns = chell_setting_uint("warp.checkpoint_ms") * 1000000ull;
	warp_idle_ns = chell_setting_uint("warp.idle_ms") * 1000000ull;
	uint64_t flip = chell_setting_uint("warp.test_flip");
	if (flip > 1000000) {
		chell_log("warp.test_flip is a probability per million operations (0 to 1000000)");
		return -1;
	}
	warp_flip_ppm = (uint32_t)flip;
	uint64_t after = chell_setting_uint("warp.map_after");
	warp_map_after = after > UINT32_MAX ? UINT32_MAX : (uint32_t)after;
	warp_lease_mode = strcmp(chell_setting("warp.outside"), "trust") != 0;
	return mapped_copy_init();
}

/* ------------------------------------------------------------ node path */

static inline uint64_t node_of(struct warp_file *w, uint64_t pos)
{
	return pos >> w->hdr->node_shift;
}

/* The checkpoint chose buffered for node k, which needs the tree's lease
 * (warp.outside=lease): taken here, on the application's description (at
 * most one try per checkpoint interval, warp_lease_ok). */
static void want_buffered(chell_ctx *c, struct warp_file *w, uint64_t k)
{
	struct warp_node *nd = &w->nodes[k];
	if (!warp_lease_ok(w, c))
		return;
	warp_lock(w);
	if (atomic_load(&nd->want) && warp_set_state(w, k, WARP_BUFFERED) == 0)
		atomic_store(&nd->want, 0);
	chell_lock_release(&w->hdr->lock);
}

/* An access to node k: the counters (plain stores, brain.h), the node's
 * first state, the successor record and prefetch of the predicted next. */
static void access_node(chell_ctx *c, struct warp_file *w, uint64_t k, size_t n, bool write)
{
	if (k >= WARP_MAX_NODES)
		return;
	struct warp_node *nd = &w->nodes[k];
	if (unlikely(!nd->last_use)) {
		if (w->light_map)
			warp_light_touch(w, (uint32_t)k + 1); /* a record written (buf.c: light pool) */
		uint32_t hint = WD(c)->hint;
		if (hint != WARP_NORMAL && atomic_load(&nd->state) == WARP_NORMAL &&
		    (hint != WARP_BUFFERED || warp_lease_ok(w, c))) {
			warp_lock(w);
			if (!nd->last_use)
				warp_set_state(w, k, (enum warp_state)hint);
			chell_lock_release(&w->hdr->lock);
		}
	}
	if (unlikely(atomic_load_explicit(&nd->want, memory_order_relaxed)) && write)
		want_buffered(c, w, k);
	nd->last_use = mapped_tick();
	if (write) {
		nd->st.nw++;
		nd->st.sw += n;
	} else {
		nd->st.nr++;
		nd->st.sr += n;
	}
	/* accuracy (warp.md §VI-D, brain.h): the node the records predicted
	 * (the same node, the previous one's successor, or at the process's
	 * first access to the file the previous file's tuple: chain.c),
	 * accessed as its recorded state accelerates */
	uint32_t prev = atomic_load_explicit(&w->prev_node, memory_order_relaxed);
	uint32_t predicted = prev == (uint32_t)k		? prev
			     : prev < WARP_MAX_NODES		? warp_next_of(&w->nodes[prev], prev)
			     : prev == WARP_NODE_NONE		? warp_chain_enter(w, (uint32_t)k)
								: WARP_NODE_NONE;
	struct mapped_stats *ms = mapped_stats_tls(MAPPED_STATS_WARP);
	ms->accesses++;
	ms->accurate += warp_access_accurate(predicted, (uint32_t)k, warp_state_of(w, k), write);
	if (prev == (uint32_t)k)
		return;
	atomic_store_explicit(&w->prev_node, (uint32_t)k, memory_order_relaxed);
	if (prev < WARP_MAX_NODES)
		warp_succ_set(&w->nodes[prev], (uint32_t)k);
	/* prefetch the predicted next node in its state, off this thread: a
	 * node never accessed yet is prefetched in the state it will start
	 * in (the open's hint) */
	uint32_t next = warp_next_of(nd, (uint32_t)k);
	if (next < WARP_MAX_NODES && next != (uint32_t)k &&
	    ((uint64_t)next << w->hdr->node_shift) < isize(L(c)->inode) &&
	    (warp_state_of(w, next) == WARP_MAPPED ||
	     (WD(c)->hint == WARP_MAPPED && !w->nodes[next].last_use && warp_state_of(w, next) == WARP_NORMAL)))
		warp_prefetch_post(w, next, WARP_MAPPED);
}

/* Buffered read of [p, p+len) into u, under the lock: valid blocks from the
 * buffer, runs of others from the tier. Bytes read, or -errno. */
static ssize_t buf_read(chell_ctx *c, struct warp_file *w, unsigned char *u, uint64_t p, size_t len)
{
	size_t done = 0;
	while (done < len) {
		uint64_t q = p + done, b = q >> WARP_BLK_SHIFT;
		bool v = warp_blk_valid(w, b);
		/* the run of blocks with the same validity */
		uint64_t end = (b + 1) << WARP_BLK_SHIFT;
		while (end < p + len && warp_blk_valid(w, end >> WARP_BLK_SHIFT) == v)
			end += WARP_BLK;
		size_t m = (size_t)((end < p + len ? end : p + len) - q);
		ssize_t r;
		if (v) {
			int fault;
			r = mapped_copy(u + done, w->data + q, m, &fault) ? (ssize_t)m : -EFAULT;
		} else {
			r = sys_pread(c->fd, u + done, m, (off_t)q);
			if (r > 0)
				chell_tier_read((size_t)r);
		}
		if (r < 0)
			return done ? (ssize_t)done : r;
		done += (size_t)r;
		if ((size_t)r < m)
			break;
	}
	WCTR(buffered_reads, 1);
	return (ssize_t)done;
}

/* Buffered write of [p, p+len) from u, under the lock. Bytes written;
 * -EAGAIN (nothing written) when the budget is used up or a block cannot
 * be filled: the caller demotes the node and writes through the tier. A
 * bad user buffer: -EFAULT with *partial set to the bytes before the
 * failing block (the node must then be written back: a block may be half
 * copied). */
static ssize_t buf_write(struct warp_file *w, const unsigned char *u, uint64_t p, size_t len, size_t *partial)
{
	uint64_t b0 = p >> WARP_BLK_SHIFT, b1 = (p + len - 1) >> WARP_BLK_SHIFT, need = 0;
	for (uint64_t b = b0; b <= b1; b++)
		need += !warp_blk_valid(w, b);
	if (need && warp_tree_bytes &&
	    atomic_load(warp_tree_bytes) + need * WARP_BLK > warp_budget)
		return -EAGAIN;
	size_t done = 0;
	*partial = 0;
	while (done < len) {
		uint64_t q = p + done, b = q >> WARP_BLK_SHIFT, bo = q & (WARP_BLK - 1);
		size_t m = WARP_BLK - bo < len - done ? (size_t)(WARP_BLK - bo) : len - done;
		bool v = warp_blk_valid(w, b);
		if (!v && m != WARP_BLK && !w->fill_ok) {
			/* A partial block not in the buffer, and no way to read the
			 * tier without touching its atime (which a write never does):
			 * these bytes go to the tier (the block stays invalid, so the
			 * tier has the last word on it). */
			struct iovec one = {(void *)(u + done), m};
			int fd = warp_wfd(w);
			ssize_t r = fd < 0 ? -EBADF : sys_pwritev2(fd, &one, 1, (off_t)q,
						   (sys_fcntl(fd, F_GETFL, 0) & O_APPEND) ? RWF_NOAPPEND : 0);
			if (r != (ssize_t)m)
				return done ? (ssize_t)done : -EAGAIN;
			chell_tier_write(m);
			done += m;
			continue;
		}
		if (!v && m != WARP_BLK && warp_blk_fill(w, b) < 0)
			return done ? (ssize_t)done : -EAGAIN;
		int fault;
		if (!mapped_copy(w->data + q, u + done, m, &fault)) {
			if (warp_blk_valid(w, b))
				warp_blk_mark_dirty(w, b); /* maybe half copied: written back with the node */
			*partial = done;
			return -EFAULT;
		}
		if (!v)
			warp_blk_set_valid(w, b);
		warp_blk_mark_dirty(w, b);
		done += m;
	}
	WCTR(buffered_writes, 1);
	return (ssize_t)done;
}

/* Leave buffered for node k (the budget, a failed fill, a fault). */
static void demote(struct warp_file *w, uint64_t k)
{
	warp_lock(w);
	warp_set_state(w, k, WARP_NORMAL);
	chell_lock_release(&w->hdr->lock);
}

static inline void tier_done(struct warp_hdr *h, _Atomic uint32_t *ops32)
{
	if (ops32)
		atomic_fetch_sub(ops32, 1);
	else
		atomic_fetch_sub(&h->tier_ops, 1);
}

/* One piece inside node k: the bytes moved (short at end of file), or
 * -errno if none. */
static ssize_t piece(chell_ctx *c, struct warp_file *w, unsigned char *u, uint64_t p, size_t len, int to_file,
		     bool unmapped)
{
	uint64_t k = node_of(w, p);
	if (unlikely(warp_flip_ppm))
		warp_maybe_flip(c, w, k);
	access_node(c, w, k, len, to_file);
	/* node k's count of calls on the tier path (past the last node with a
	 * record: the header's, which every change to buffered waits for) */
	_Atomic uint32_t *ops32 = k < WARP_MAX_NODES ? &w->nodes[k].tier_ops : NULL;
	for (int round = 0;; round++) {
		struct warp_hdr *h = w->hdr;
		if (ops32)
			atomic_fetch_add(ops32, 1);
		else
			atomic_fetch_add(&h->tier_ops, 1);
		enum warp_state s = warp_state_of(w, k);
		if (s != WARP_BUFFERED || round > 2) {
			ssize_t r;
			if (to_file) {
				struct iovec v = {u, len};
				r = sys_pwritev2(c->fd, &v, 1, (off_t)p, mapped_at_pos_flags(c));
				if (r > 0) {
					chell_tier_write((size_t)r);
					WCTR(kernel_writes, 1);
				}
			} else {
				const unsigned char *a = s == WARP_MAPPED && !unmapped ? warp_tier_addr(w, c->fd, p, atomic_load_explicit(
							(_Atomic uint32_t *)&L(c)->inode->hole_gen, memory_order_acquire)) : NULL;
				int fault = 0;
				if (a && mapped_copy_out(u, a, len, &fault)) {
					r = (ssize_t)len;
					WCTR(mapped_reads, 1);
				} else {
					if (fault)
						WSTAT(faults, 1);
					r = sys_pread(c->fd, u, len, (off_t)p);
					WCTR(kernel_reads, 1);
				}
				if (r > 0)
					chell_tier_read((size_t)r);
			}
			tier_done(h, ops32);
			return r;
		}
		tier_done(h, ops32);
		h = warp_lock(w);
		if (warp_state_of(w, k) != WARP_BUFFERED) {
			chell_lock_release(&h->lock);
			continue; /* changed meanwhile: the tier path */
		}
		ssize_t r;
		size_t partial = 0;
		if (!to_file) {
			r = buf_read(c, w, u, p, len);
			chell_lock_release(&h->lock);
			return r;
		}
		r = buf_write(w, u, p, len, &partial);
		chell_lock_release(&h->lock);
		if (r >= 0)
			return r;
		/* The buffer cannot take it: the node leaves buffered (written
		 * back), and the kernel writes the rest, with the last word on a
		 * bad buffer. */
		demote(w, k);
		if (r == -EFAULT) {
			struct iovec v = {u + partial, len - partial};
			ssize_t kr = sys_pwritev2(c->fd, &v, 1, (off_t)(p + partial), mapped_at_pos_flags(c));
			return kr < 0 ? (partial ? (ssize_t)partial : kr) : (ssize_t)(partial + (size_t)kr);
		}
	}
}

/* Move n bytes between the iovecs and the file at pos, node by node. */
static ssize_t transfer_(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n, int to_file);
static ssize_t transfer(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n, int to_file)
{
	int saved = warp_call_fd;
	warp_call_fd = c->fd;
	ssize_t r = transfer_(c, iov, cnt, pos, n, to_file);
	warp_call_fd = saved;
	return r;
}

static ssize_t transfer_(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t n, int to_file)
{
	struct warp_file *w = W(c);
	size_t done = 0, nb = (size_t)1 << w->hdr->node_shift;
	/* warp.map_after: a light file's first reads are the kernel's (no node
	 * of it can be buffered, so the kernel reads every byte and touches
	 * atime itself) */
	bool unmapped = !to_file && mapped_budget_take(&w->kernel_reads_left);
	mapped_read_by_kernel = unmapped;
	for (int i = 0; i < cnt && done < n; i++) {
		size_t vlen = iov[i].iov_len < n - done ? iov[i].iov_len : n - done, vdone = 0;
		while (vdone < vlen) {
			uint64_t p = pos + done;
			size_t len = nb - (size_t)(p & (nb - 1));
			if (len > vlen - vdone)
				len = vlen - vdone;
			ssize_t r = piece(c, w, (unsigned char *)iov[i].iov_base + vdone, p, len, to_file, unmapped);
			if (r < 0)
				return done ? (ssize_t)done : r;
			done += (size_t)r;
			vdone += (size_t)r;
			if ((size_t)r < len)
				return (ssize_t)done;
		}
	}
	return (ssize_t)done;
}

/* Does [pos, end) touch a buffered node? */
static bool any_buffered(struct warp_file *w, uint64_t pos, uint64_t end)
{
	for (uint64_t k = node_of(w, pos); k <= node_of(w, end - 1) && k < WARP_MAX_NODES; k++)
		if (warp_state_of(w, k) == WARP_BUFFERED)
			return true;
	return false;
}

static void drop_past(struct warp_file *w, uint64_t len);

/* A growing write into a buffered node moved fewer bytes than it grew the
 * file for (a bad buffer part of the way): the file ends where the
 * kernel's write would have left it, unless someone grew it further
 * meanwhile. */
static void shrink_back(chell_ctx *c, struct warp_file *w, uint64_t grown_to, uint64_t end)
{
	struct mapped_inode *in = L(c)->inode;
	warp_lock(w);
	chell_lock_acquire(&in->lock);
	if (isize(in) == grown_to && sys_ftruncate(c->fd, (off_t)end) == 0) {
		isize_set(in, end);
		drop_past(w, end);
	}
	chell_lock_release(&in->lock);
	chell_lock_release(&w->hdr->lock);
}

/* A write of `total` bytes at pos, the range claimed on the offset. */
static ssize_t write_at(chell_ctx *c, const struct iovec *iov, int cnt, uint64_t pos, size_t total)
{
	struct mapped_local *l = L(c);
	struct mapped_inode *in = l->inode;
	struct warp_file *w = W(c);
	uint64_t end = pos + (uint64_t)total;
	ssize_t r;
	if (end > isize(in)) {
		/* Growing. The first access decides a new node's state. */
		access_node(c, w, node_of(w, pos), 0, true);
		atomic_fetch_add(&w->hdr->tier_ops, 1);
		if (!any_buffered(w, pos, end)) {
			/* the kernel's write (one call, as without Chell), counted
			 * on the tier path: no node of it may become buffered meanwhile */
			chell_lock_acquire(&in->lock);
			if (pos > isize(in))
				atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
			r = sys_pwritev2(c->fd, iov, cnt, (off_t)pos, mapped_at_pos_flags(c));
			if (r > 0 && pos + (uint64_t)r > isize(in))
				isize_set(in, pos + (uint64_t)r);
			chell_lock_release(&in->lock);
			atomic_fetch_sub(&w->hdr->tier_ops, 1);
			if (r > 0) {
				chell_tier_write((size_t)r);
				WCTR(kernel_writes, 1);
			}
			WSTAT(extends, 1);
			return r;
		}
		atomic_fetch_sub(&w->hdr->tier_ops, 1);
		/* A buffered node: the kernel's size first (its blocks read as
		 * zeros), then the bytes into the buffer. */
		chell_lock_acquire(&in->lock);
		int e = 0;
		uint64_t before = isize(in);
		bool grew = false;
		if (end > before) {
			if (pos > before)
				atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
			e = mapped_grow(c->fd, in, pos, end - pos, end);
			if (e == 0 && end > isize(in)) {
				isize_set(in, end);
				grew = true;
			}
		}
		chell_lock_release(&in->lock);
		WSTAT(extends, 1);
		if (e < 0)
			return e;
		r = transfer(c, iov, cnt, pos, total, 1);
		if (r != (ssize_t)total && grew)
			shrink_back(c, w, end, before > pos + (uint64_t)(r > 0 ? r : 0) ? before
											 : pos + (uint64_t)(r > 0 ? r : 0));
		if (r > 0)
			mapped_write_done(&in->times, c->fd);
		return r;
	}
	r = transfer(c, iov, cnt, pos, total, 1);
	if (r > 0)
		mapped_write_done(&in->times, c->fd);
	return r;
}

/* The block holding the end of file, as the kernel has it, leaves the
 * buffer (written back): the kernel is about to write there (an append). */
static void settle_eof(chell_ctx *c, struct warp_file *w)
{
	struct stat st;
	if (!atomic_load(&w->hdr->valid_blocks) || sys_fstat(c->fd, &st) < 0)
		return;
	uint64_t b = (uint64_t)st.st_size >> WARP_BLK_SHIFT;
	if (b < WARP_MAX_BLOCKS && warp_blk_valid(w, b)) {
		warp_writeback(w, warp_wfd_or(w, c->fd), b, b + 1);
		warp_invalidate(w, b, b + 1);
	}
}

/* Appends are the kernel's (only it makes them atomic with every other
 * appender, inside Chell or not), under the buffer's lock so no buffered
 * write re-fills the block at the end meanwhile. */
static ssize_t append(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, size_t total, int flags)
{
	struct warp_file *w = W(c);
	struct mapped_inode *in = L(c)->inode;
	warp_lock(w);
	settle_eof(c, w);
	/* at the description's offset (off -1), the kernel moves it and ours
	 * follows, read back before any hole probe can move it (koff_lock) */
	chell_lock_acquire(&w->hdr->koff_lock);
	ssize_t r = chell_down_write(c, iov, cnt, off, flags);
	if (r > 0 && off == -1)
		chell_offset_from_kernel(c->f->ofd, c->fd);
	chell_lock_release(&w->hdr->koff_lock);
	chell_lock_release(&w->hdr->lock);
	if (r > 0) {
		uint64_t end = mapped_inode_refresh(in, c->fd);
		access_node(c, w, node_of(w, end ? end - 1 : 0), (size_t)r, true);
		chell_tier_write((size_t)r);
		WCTR(kernel_writes, 1);
	}
	return r;
}

/* RWF_NOWAIT / RWF_ATOMIC: only the kernel can honour them. The range's
 * buffered blocks go to the tier first (written back, dropped), under the
 * lock, so the kernel's bytes are the file's. */
static ssize_t kernel_io(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, ssize_t total, int flags,
			 bool write)
{
	struct warp_file *w = W(c);
	struct mapped_inode *in = L(c)->inode;
	_Atomic uint64_t *offp = OFFSET(c);
	WSTAT(kernel_fallbacks, 1);
	warp_lock(w);
	uint64_t pos = off >= 0 ? (uint64_t)off : atomic_load(offp);
	if (off < 0 && write)
		while (!atomic_compare_exchange_weak(offp, &pos, pos + (uint64_t)total))
			;
	uint64_t lo = pos >> WARP_BLK_SHIFT, hi = (pos + (uint64_t)total + WARP_BLK - 1) >> WARP_BLK_SHIFT;
	warp_writeback(w, warp_wfd_or(w, c->fd), lo, hi);
	warp_invalidate(w, lo, hi);
	ssize_t r;
	if (write) {
		if (pos + (uint64_t)total > isize(in))
			atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
		r = sys_pwritev2(c->fd, iov, cnt, (off_t)pos, flags | mapped_at_pos_flags(c));
		if (off < 0 && r != total) {
			uint64_t expect = pos + (uint64_t)total;
			atomic_compare_exchange_strong(offp, &expect, pos + (uint64_t)(r > 0 ? r : 0));
		}
		uint64_t cur = isize(in), end = pos + (uint64_t)(r > 0 ? r : 0);
		while (cur < end && !atomic_compare_exchange_weak((_Atomic uint64_t *)&in->size, &cur, end))
			;
	} else {
		r = sys_preadv2(c->fd, iov, cnt, (off_t)pos, flags);
		if (off < 0 && r > 0)
			atomic_compare_exchange_strong(offp, &pos, pos + (uint64_t)r);
	}
	chell_lock_release(&w->hdr->lock);
	return r;
}

/* warp_flush_all / warp_disable_buffer with the call's descriptor at hand
 * (warp_call_fd) for a process without one of its own. */
static int flush(chell_ctx *c, struct warp_file *w, bool drop)
{
	int saved = warp_call_fd;
	warp_call_fd = c->fd;
	int r = warp_flush_all(w, drop);
	warp_call_fd = saved;
	return r;
}

static void disable(chell_ctx *c, struct warp_file *w)
{
	int saved = warp_call_fd;
	warp_call_fd = c->fd;
	warp_disable_buffer(w);
	warp_call_fd = saved;
}

/* Before the kernel is asked for holes: it must hold every dirty byte. */
static void settle(chell_ctx *c)
{
	flush(c, W(c), false);
}

static void *wfile_get(chell_ctx *c, const struct stat *st)
{
	struct warp_file *w = warp_file_get(c->fd, st->st_dev, st->st_ino);
	if (w && atomic_load(&w->light) && (status(c) & O_ACCMODE) != O_RDONLY)
		atomic_store(&WD(c)->light_seen, 1); /* warp_ofd: the lease checks it */
	return w;
}

static void wfile_put(void *w)
{
	warp_file_put(w);
}

static struct mapped_ops warp_mapped = {
	.stats = MAPPED_STATS_WARP,
	.fast = NULL,
	.file_get = wfile_get,
	.file_put = wfile_put,
	.transfer = transfer,
	.kernel_flags = RWF_NOWAIT | RWF_ATOMIC,
	.kernel_io = kernel_io,
	.append = append,
	.write_at = write_at,
	.settle = settle,
	.kernel_offset = 0,
};

/* ------------------------------------------------------------- lifecycle */

static void warp_proc_event(enum chell_op ev, long arg)
{
	warp_lease_fork_event(ev);
	if (ev == CHELL_EV_FORK_CHILD) {
		warp_files_after_fork();
		warp_tier_after_fork();
		warp_learn_after_fork();
		warp_chain_after_fork();
	} else if (ev == CHELL_EV_EXIT) {
		warp_lease_proc_end();
		warp_learn_flush();
		warp_stats_dump();
	} else if (ev == CHELL_EV_EXEC) {
		warp_lease_proc_end(); /* the new image has no checkpoint thread polling it yet */
		warp_learn_flush();
	}
}

/* The file (dev, ino) is about to be truncated to len by the kernel (O_TRUNC,
 * truncate, ftruncate), under the buffer's lock held by the caller: blocks
 * past the new end leave the buffer (their bytes are gone), and the tail of
 * the last one is zeroed (the file reads zeros there if it grows again). */
static void drop_past(struct warp_file *w, uint64_t len)
{
	uint64_t b = len >> WARP_BLK_SHIFT, bo = len & (WARP_BLK - 1);
	if (bo && b < WARP_MAX_BLOCKS && warp_blk_valid(w, b)) {
		memset(w->data + len, 0, (size_t)(WARP_BLK - bo));
		b++;
	}
	warp_invalidate(w, b, WARP_MAX_BLOCKS);
}

static struct warp_file *file_by_path(int dirfd, const char *path, int at_flags)
{
	struct stat st;
	if (sys_fstatat(dirfd, path, &st, at_flags) < 0 || !S_ISREG(st.st_mode))
		return NULL;
	return warp_file_lookup(st.st_dev, st.st_ino);
}

/* The buffer of c's file whether or not this description is served by
 * warp (one that is not: O_DIRECT, escaped, or not mappable); a reference
 * the caller puts back with warp_file_put. */
static struct warp_file *file_of(chell_ctx *c)
{
	if (D(c)->active && L(c)) {
		struct warp_file *w = W(c);
		return warp_file_get(c->fd, w->dev, w->ino);
	}
	struct stat st;
	if (sys_fstat(c->fd, &st) < 0 || !S_ISREG(st.st_mode))
		return NULL;
	return warp_file_lookup(st.st_dev, st.st_ino);
}

/* A description of the file goes to the kernel's path (O_DIRECT, not
 * mappable, escaped): its writes bypass the buffer, so nothing of the
 * file may stay buffered, in any process. */
static void kernel_user(chell_ctx *c)
{
	struct warp_file *w = file_of(c);
	if (w) {
		disable(c, w);
		warp_file_put(w);
	}
}

static int warp_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	struct warp_file *w = NULL;
	/* Linux truncates on O_RDONLY | O_TRUNC too. With leases nothing is
	 * buffered unless the tree holds one, which this open breaks: the open
	 * waits until the holder wrote everything back (no lock may be held
	 * meanwhile). */
	if ((flags & O_TRUNC) && !warp_lease_mode)
		w = file_by_path(dirfd, path, 0);
	if (!w)
		return chell_down_open(c, dirfd, path, flags, mode);
	warp_lock(w);
	int r = chell_down_open(c, dirfd, path, flags, mode);
	if (r >= 0)
		drop_past(w, 0);
	chell_lock_release(&w->hdr->lock);
	warp_file_put(w);
	return r;
}

static void warp_opened(chell_ctx *c)
{
	struct mapped_ofd *d = D(c);
	d->active = 0;
	int acc = status(c) & O_ACCMODE;
	WD(c)->hint = acc == O_RDONLY ? WARP_MAPPED : acc == O_WRONLY ? WARP_BUFFERED : WARP_NORMAL;
	if (status(c) & O_DIRECT) {
		mapped_size_changed_by_kernel(c->fd);
		kernel_user(c);
		return; /* the application wants the kernel's I/O path */
	}
	if (!warp_tree_bytes)
		warp_tree_bytes = chell_shared_area("warp.budget", sizeof(uint64_t));
	if (mapped_attach(c, 1, &warp_mapped) == 0) {
		d->active = 1;
		warp_ckpt_start();
	} else {
		WSTAT(kernel_fallbacks, 1);
		kernel_user(c);
	}
}

static int warp_adopt(chell_ctx *c)
{
	if (!warp_tree_bytes)
		warp_tree_bytes = chell_shared_area("warp.budget", sizeof(uint64_t));
	int r = mapped_adopt(c, &warp_mapped);
	if (D(c)->active)
		warp_ckpt_start();
	return r;
}

static void warp_detach(chell_ctx *c)
{
	if (L(c) && W(c)->lfd >= 0)
		warp_lease_detach(W(c), c->f->ofd); /* or leaves it to the checkpoint thread */
	mapped_detach(c, &warp_mapped);
}

/* The description leaves Chell's view (a program Chell does not serve gets
 * it): the file is buffered no more, anywhere, and this description is the
 * kernel's from now on. */
static void warp_escape(chell_ctx *c)
{
	if (D(c)->active && L(c)) {
		/* "buffering off" must reach a process that may get the
		 * description and join the buffer file: a light file's records
		 * go there first (if that fails the description stays a light
		 * one's: light_seen keeps it from being leased alone) */
		warp_files_lock();
		warp_file_promote(W(c), c->fd);
		warp_files_unlock();
		disable(c, W(c));
	}
	mapped_go_kernel(c, &warp_mapped);
}

/* Every close writes the file's dirty blocks back: after close() the tier
 * has every byte written before it (docs/WARP.md). */
static int warp_close(chell_ctx *c)
{
	if (mapped_active(c) && atomic_load(&W(c)->hdr->dirty_blocks))
		flush(c, W(c), false);
	return mapped_close(c);
}

/* ------------------------------------------------------- sync and size */

static int warp_fsync(chell_ctx *c, int datasync)
{
	WSTAT(fsyncs, 1);
	if (mapped_active(c)) {
		struct warp_file *w = W(c);
		int e = flush(c, w, false);
		if (e < 0)
			return e == -EBADF ? -EIO : e;
		warp_checkpoint(w); /* a checkpoint at each sync call too */
	}
	return chell_down_fsync(c, datasync);
}

static int warp_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags)
{
	if (mapped_active(c) && off >= 0 && n >= 0 && (flags & SYNC_FILE_RANGE_WRITE)) {
		struct warp_file *w = W(c);
		uint64_t lo = (uint64_t)off >> WARP_BLK_SHIFT;
		uint64_t hi = n == 0 ? WARP_MAX_BLOCKS : ((uint64_t)off + (uint64_t)n + WARP_BLK - 1) >> WARP_BLK_SHIFT;
		warp_lock(w);
		warp_writeback(w, warp_wfd_or(w, c->fd), lo, hi);
		chell_lock_release(&w->hdr->lock);
	}
	return chell_down_sync_file_range(c, off, n, flags);
}

static int warp_ftruncate(chell_ctx *c, off_t len)
{
	if (!D(c)->active || !L(c)) {
		struct warp_file *w = len >= 0 ? file_of(c) : NULL;
		if (w)
			warp_lock(w);
		int r = chell_down_ftruncate(c, len);
		if (w) {
			if (r == 0)
				drop_past(w, (uint64_t)len);
			chell_lock_release(&w->hdr->lock);
			warp_file_put(w);
		}
		return r;
	}
	struct warp_file *w = W(c);
	struct mapped_inode *in = L(c)->inode;
	warp_lock(w);
	chell_lock_acquire(&in->lock);
	uint64_t before = isize(in);
	int r = chell_down_ftruncate(c, len);
	if (r == 0) {
		drop_past(w, (uint64_t)len);
		isize_set(in, (uint64_t)len);
		if ((uint64_t)len > before)
			atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	}
	chell_lock_release(&in->lock);
	chell_lock_release(&w->hdr->lock);
	return r;
}

static int warp_truncate(chell_ctx *c, const char *path, off_t len)
{
	/* with leases: it breaks the tree's lease, see warp_open */
	struct warp_file *w = len >= 0 && !warp_lease_mode ? file_by_path(AT_FDCWD, path, 0) : NULL;
	if (w)
		warp_lock(w);
	int r = chell_down_truncate(c, path, len);
	if (w) {
		if (r == 0)
			drop_past(w, (uint64_t)len);
		chell_lock_release(&w->hdr->lock);
		warp_file_put(w);
	}
	if (r == 0) {
		mapped_size_changed_by_path(path);
		struct stat st;
		if (sys_fstatat(AT_FDCWD, path, &st, 0) == 0) {
			struct mapped_inode *in = mapped_inode_find(st.st_dev, st.st_ino);
			if (in)
				atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
		}
	}
	return r;
}

/* fallocate in any mode moves or zeroes bytes the buffer may hold: the
 * file's blocks go to the tier first and leave the buffer. */
static int warp_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	if (!D(c)->active || !L(c)) {
		kernel_user(c); /* nothing buffered, then the kernel's (buffering is off already) */
		return chell_down_fallocate(c, mode, off, len);
	}
	struct warp_file *w = W(c);
	struct mapped_inode *in = L(c)->inode;
	warp_lock(w);
	int e = warp_writeback(w, warp_wfd_or(w, c->fd), 0, WARP_MAX_BLOCKS);
	if (e == 0)
		warp_invalidate(w, 0, WARP_MAX_BLOCKS);
	chell_lock_acquire(&in->lock);
	int r = e < 0 ? e : chell_down_fallocate(c, mode, off, len);
	if (r == 0) {
		mapped_inode_refresh(in, c->fd);
		atomic_fetch_add((_Atomic uint32_t *)&in->hole_gen, 1);
	}
	chell_lock_release(&in->lock);
	chell_lock_release(&w->hdr->lock);
	return r;
}

/* Commands that read or set what warp's lease uses on the description
 * (the lease itself, the signal owner and number, O_ASYNC): the tree's
 * lease goes first, so the application sees the kernel's answer as if
 * warp had never leased. */
static bool touches_lease(int cmd, unsigned long arg)
{
	return cmd == F_GETLEASE || cmd == F_SETLEASE || cmd == F_GETOWN || cmd == F_SETOWN ||
	       cmd == F_GETOWN_EX || cmd == F_SETOWN_EX || cmd == F_GETSIG || cmd == F_SETSIG ||
	       (cmd == F_SETFL && (arg & O_ASYNC));
}

static int warp_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	if (touches_lease(cmd, arg) && D(c)->active && L(c) && atomic_load(&W(c)->hdr->leased)) {
		int saved = warp_call_fd;
		warp_call_fd = c->fd;
		warp_lease_release(W(c));
		warp_call_fd = saved;
	}
	if (mapped_takes_lease(cmd, arg) && L(c)) {
		/* The lease counts the inode's open files and mappings: ours go,
		 * the file is the kernel's in this process from now on. */
		struct warp_file *w = W(c);
		disable(c, w);
		warp_tier_retire(w);
		warp_lock(w);
		/* (on a thread with a table of its own the numbers are not ours
		 * to close: the reopens stay, and the application's lease is
		 * then refused, as for any other open of the file) */
		if (warp_own(w->rfd) >= 0 && w->rfd != w->lfd)
			chell_internal_close(w->rfd); /* reopens (warp.outside=trust) count as opens */
		if (warp_own(w->wfd) >= 0 && w->wfd != w->rfd && w->wfd != w->lfd)
			chell_internal_close(w->wfd);
		w->rfd = w->wfd = w->lfd; /* a duplicate is no open of its own */
		w->fill_ok = 0;
		chell_lock_release(&w->hdr->lock);
		mapped_go_kernel(c, &warp_mapped);
	}
	int r = chell_down_fcntl(c, cmd, arg);
	/* While the tree holds the lease, this is the leased description (the
	 * only open of the file) and its O_ASYNC is the lease's: the
	 * application's own F_SETFL O_ASYNC releases the lease first. */
	if (cmd == F_GETFL && r >= 0 && D(c)->active && L(c) && atomic_load(&W(c)->hdr->leased))
		r &= ~O_ASYNC;
	if (cmd == F_SETFL && r >= 0 && D(c)->active && (arg & O_DIRECT)) {
		disable(c, W(c));
		mapped_go_kernel(c, &warp_mapped); /* the application asks for the kernel's I/O path */
	}
	return r;
}

/* The application maps the file itself: its loads and stores see the tier,
 * so the file is buffered no more (written back first). */
static void *warp_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off)
{
	if (D(c)->active && L(c))
		disable(c, W(c));
	return chell_down_mmap(c, addr, len, prot, flags, off);
}

const struct chell_handler chell_warp_handler = {
	.name = "warp",
	CHELL_HANDLER_PRIV(struct warp_ofd), /* summary: src/common/registry.def */
	.proc_init = warp_proc_init,
	.proc_event = warp_proc_event,
	.open = warp_open,
	.opened = warp_opened,
	.adopt = warp_adopt,
	.detach = warp_detach,
	.escape = warp_escape,
	/* MAPPED_METHODS, but close: */
	.release = mapped_release, .sync_out = mapped_sync_out, .sync_in = mapped_sync_in,
	.fstat = mapped_fstat, .read = mapped_read, .write = mapped_write, .lseek = mapped_lseek_op,
	.close = warp_close,
	.fsync = warp_fsync,
	.sync_file_range = warp_sync_file_range,
	.ftruncate = warp_ftruncate,
	.fallocate = warp_fallocate,
	.fcntl = warp_fcntl,
	.mmap = warp_mmap,
	.truncate = warp_truncate,
};
