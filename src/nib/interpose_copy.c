/* SPDX-License-Identifier: MIT */
/*
 * In-kernel copies: copy_file_range, sendfile and splice (tee and vmsplice
 * take only pipes, which Chell never handles, so they stay with the kernel).
 *
 * These calls move data inside the kernel, without read() or write(). When
 * one end is a handled file the data must flow through the handler (its
 * bytes may live in user space: cache mode's pool) and the offsets are the
 * handler's (direct and cache mode keep the OFD's offset in user space, the
 * kernel's own is stale). So the call is emulated with Chell's own
 * pread/pwrite (or read/write on a pipe or device end) through an aligned
 * buffer (O_DIRECT ends need one), after the kernel's argument checks in the
 * kernel's order (fs/read_write.c: sendfile64, do_sendfile, copy_file_range,
 * vfs_copy_file_range, generic_copy_file_checks; fs/splice.c: splice,
 * __do_splice, do_splice). Pointers are read and written without faulting
 * (EFAULT where the kernel gives it, at the same point), and a NULL offset
 * pointer uses and advances the descriptor's offset as the handler keeps it.
 * Calls where no end is handled go to libc unchanged.
 *
 * Known approximations, all on rare paths: a splice from a file into a pipe
 * moves as many bytes as the pipe has free pages (the kernel counts page
 * cache folios, which may give fewer for unaligned offsets of large
 * copies).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/uio.h>

#include "nib.h"

#define COPY_CHUNK (256 * 1024)
#define COPY_ALIGN 4096
#define PIPE_PAGE 4096
/* The kernel's cap on one transfer: INT_MAX rounded down to a page. */
#define MAX_RW_COUNT ((size_t)(INT_MAX & ~(PIPE_PAGE - 1)))

/* ------------------------------------------------ user memory, no faults */

/* *p into *v as copy_from_user would: 0, or -EFAULT for a bad pointer. */
static int peek_off(const void *p, int64_t *v)
{
	struct iovec local = {v, sizeof *v}, remote = {(void *)p, sizeof *v};
	long r = chell_syscall6(SYS_process_vm_readv, sys_getpid(), (long)&local, 1, (long)&remote, 1, 0);
	if (r == (long)sizeof *v)
		return 0;
	if (r == -EFAULT)
		return -EFAULT;
	*v = *(const volatile int64_t *)p; /* process_vm_readv unavailable */
	return 0;
}

/* *p = v as copy_to_user would: 0, or -EFAULT (a bad or read-only page). */
static int poke_off(void *p, int64_t v)
{
	struct iovec local = {&v, sizeof v}, remote = {p, sizeof v};
	long r = chell_syscall6(SYS_process_vm_writev, sys_getpid(), (long)&local, 1, (long)&remote, 1, 0);
	if (r == (long)sizeof v)
		return 0;
	if (r == -EFAULT)
		return -EFAULT;
	*(volatile int64_t *)p = v;
	return 0;
}

/* --------------------------------------------------------- one descriptor */

struct end {
	int fd;
	int fl;          /* F_GETFL */
	struct stat st;  /* through Chell: a handled file's size is the handler's */
};

/* What fdget() checks: a descriptor that is open and not O_PATH. */
static int end_get(struct end *e, int fd)
{
	e->fd = fd;
	e->fl = sys_fcntl(fd, F_GETFL, 0);
	if (e->fl < 0 || (e->fl & O_PATH))
		return -EBADF;
	if (fstat(fd, &e->st) < 0)
		return -errno;
	return 0;
}

static bool readable(const struct end *e) { return (e->fl & O_ACCMODE) != O_WRONLY; }
static bool writable(const struct end *e) { return (e->fl & O_ACCMODE) != O_RDONLY; }
static bool is_pipe(const struct end *e) { return S_ISFIFO(e->st.st_mode); }
static bool seekable(const struct end *e) { return S_ISREG(e->st.st_mode) || S_ISBLK(e->st.st_mode); }

/* The descriptor's offset (the handler's for a handled file); a stream's is 0. */
static int64_t end_pos(const struct end *e)
{
	off_t o = lseek(e->fd, 0, SEEK_CUR);
	return o < 0 ? 0 : o;
}

static void end_set_pos(const struct end *e, int64_t pos)
{
	if (seekable(e))
		lseek(e->fd, pos, SEEK_SET);
}

/* FMODE_PREAD: files and devices that take positional reads (not pipes,
 * sockets or ttys); the kernel answers ESPIPE for a zero-length pread. */
static bool has_pread(const struct end *e)
{
	if (S_ISREG(e->st.st_mode) || S_ISBLK(e->st.st_mode))
		return true;
	if (S_ISFIFO(e->st.st_mode) || S_ISSOCK(e->st.st_mode))
		return false;
	char c;
	return !(sys_pread(e->fd, &c, 0, 0) == -ESPIPE);
}

/* rw_verify_area's arithmetic: a negative position or one that count
 * carries past the largest offset. */
static int verify_area(int64_t pos, size_t count)
{
	if ((ssize_t)count < 0 || pos < 0 || (int64_t)count > INT64_MAX - pos)
		return -EINVAL;
	return 0;
}

/*
 * The largest file size of the file system holding fd (s_maxbytes): lseek
 * accepts exactly the positions up to it. Found once per device by a binary
 * search on a descriptor of our own (so the application's offset is never
 * touched); only needed for positions beyond 2 GiB. Shared with the mapped
 * handlers' lseek (nib.h).
 */
CHELL_EXPORT int64_t chell_maxbytes(int fd, dev_t dev)
{
	/* A small lock-free cache: a slot is claimed (state 0 -> 1), filled,
	 * then published (state 2); readers look only at published slots. */
	static struct { _Atomic int state; uint64_t dev; int64_t max; } known[8];
	for (int i = 0; i < 8; i++)
		if (atomic_load_explicit(&known[i].state, memory_order_acquire) == 2 &&
		    known[i].dev == (uint64_t)dev)
			return known[i].max;
	char path[CHELL_FD_PATH_MAX];
	chell_fd_path(path, fd); /* the calling thread's table: private tables too */
	int pfd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (pfd < 0)
		pfd = sys_open(path, O_WRONLY | O_CLOEXEC, 0);
	if (pfd < 0)
		return INT64_MAX;
	int64_t lo = 0, hi = INT64_MAX; /* lo is accepted; find the last one */
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2 + 1;
		if (sys_lseek(pfd, mid, SEEK_SET) >= 0)
			lo = mid;
		else
			hi = mid - 1;
	}
	sys_close(pfd);
	for (int i = 0; i < 8; i++) {
		int empty = 0;
		if (atomic_compare_exchange_strong(&known[i].state, &empty, 1)) {
			known[i].dev = (uint64_t)dev;
			known[i].max = lo;
			atomic_store_explicit(&known[i].state, 2, memory_order_release);
			break;
		}
	}
	return lo;
}

static int64_t maxbytes(const struct end *e)
{
	return S_ISREG(e->st.st_mode) ? chell_maxbytes(e->fd, e->st.st_dev) : INT64_MAX;
}

/* --------------------------------------------------------------- the copy */

/* generic_write_check_limits for RLIMIT_FSIZE: how much may be written at
 * pos (0 <= pos < limit), or SIZE_MAX without a limit. At or past the limit
 * the write itself answers (EFBIG and SIGXFSZ). */
static uint64_t fsize_room(int64_t pos)
{
	struct rlimit rl;
	if (pos < 0 || getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
	    (uint64_t)pos >= rl.rlim_cur)
		return UINT64_MAX;
	return rl.rlim_cur - (uint64_t)pos;
}

/*
 * Move up to len bytes from in to out through a page-aligned buffer. A
 * seekable end is accessed at *ipos / *opos (advanced by what was moved),
 * a stream end with read/write. Returns the count, or -errno if nothing
 * moved. One pass only (`once`) for the pipe ends of splice and sendfile.
 */
static ssize_t move(const struct end *in, int64_t *ipos, const struct end *out, int64_t *opos,
		    size_t len, bool once)
{
	/* the kernel's write path stops a copy at the file size limit; so
	 * does ours, whatever the handler below does with a write across it */
	if (S_ISREG(out->st.st_mode)) {
		if (len > fsize_room(*opos))
			len = (size_t)fsize_room(*opos);
		if (*opos >= 0 && (int64_t)len > INT_MAX - *opos) { /* past 2 GiB: s_maxbytes */
			int64_t max = maxbytes(out);
			if (*opos < max && (int64_t)len > max - *opos)
				len = (size_t)(max - *opos);
		}
	}
	size_t cap = len < COPY_CHUNK ? len : COPY_CHUNK;
	cap = (cap + COPY_ALIGN - 1) & ~(size_t)(COPY_ALIGN - 1);
	void *buf = NULL;
	if (posix_memalign(&buf, COPY_ALIGN, cap ? cap : COPY_ALIGN))
		return -ENOMEM;
	size_t done = 0;
	ssize_t err = 0;
	while (done < len) {
		size_t want = len - done < cap ? len - done : cap;
		ssize_t r = seekable(in) ? pread(in->fd, buf, want, *ipos) : read(in->fd, buf, want);
		if (r <= 0) {
			err = r < 0 ? -errno : 0;
			break;
		}
		ssize_t w = seekable(out) ? pwrite(out->fd, buf, (size_t)r, *opos)
					  : write(out->fd, buf, (size_t)r);
		if (w < 0) {
			err = -errno;
			break;
		}
		*ipos += w;
		*opos += w;
		done += (size_t)w;
		if (w < r || once)
			break;
	}
	free(buf);
	return done ? (ssize_t)done : err;
}

static bool handled(int a, int b)
{
	return fdt_peek(a) != NULL || fdt_peek(b) != NULL;
}

/* ------------------------------------------------------- copy_file_range */

static ssize_t emulate_copy_file_range(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out,
				       size_t len, unsigned int flags)
{
	struct end in, out;
	int64_t pin, pout;
	int r;
	if ((r = end_get(&in, fd_in)) < 0 || (r = end_get(&out, fd_out)) < 0)
		return r;
	if (off_in ? (r = peek_off(off_in, &pin)) < 0 : (pin = end_pos(&in), 0))
		return r;
	if (off_out ? (r = peek_off(off_out, &pout)) < 0 : (pout = end_pos(&out), 0))
		return r;
	if (flags != 0)
		return -EINVAL;
	/*
	 * The checks that need the kernel's own knowledge (file types, access
	 * modes, same file system, immutable and swap files, the file size
	 * limit at pout) come from the kernel itself: the same call with no
	 * length moves nothing. The length-dependent checks follow it here.
	 */
	off64_t ki = pin, ko = pout;
	long k = chell_syscall6(SYS_copy_file_range, fd_in, (long)&ki, fd_out, (long)&ko, 0, 0);
	bool late = k == -EFBIG || (k == -EINVAL && S_ISREG(in.st.st_mode) && S_ISREG(out.st.st_mode));
	if (k < 0 && !late)
		return k;
	uint64_t count = len;
	if ((uint64_t)pin + count < (uint64_t)pin || (uint64_t)pout + count < (uint64_t)pout)
		return -EOVERFLOW;
	/* shorten to the end of the input, as the handler sees it */
	if (pin >= in.st.st_size)
		count = 0;
	else if (count > (uint64_t)in.st.st_size - (uint64_t)pin)
		count = (uint64_t)in.st.st_size - (uint64_t)pin;
	if (k == -EFBIG)
		return -EFBIG;
	/* generic_write_check_limits; a negative pout fails rw_verify_area below */
	if (count > fsize_room(pout))
		count = fsize_room(pout);
	if (pout >= 0 && count > (uint64_t)(INT64_MAX - pout))
		count = (uint64_t)(INT64_MAX - pout);
	if (in.st.st_dev == out.st.st_dev && in.st.st_ino == out.st.st_ino &&
	    (uint64_t)pout + count > (uint64_t)pin && (uint64_t)pout < (uint64_t)pin + count)
		return -EINVAL;
	if (k == -EINVAL || verify_area(pin, count) < 0 || verify_area(pout, count) < 0)
		return -EINVAL;
	if (count == 0)
		return 0;
	if (count > MAX_RW_COUNT)
		count = MAX_RW_COUNT;
	ssize_t n = move(&in, &pin, &out, &pout, count, false);
	if (n <= 0)
		return n;
	if (off_in) {
		if (poke_off(off_in, pin) < 0)
			n = -EFAULT;
	} else {
		end_set_pos(&in, pin);
	}
	if (off_out) {
		if (poke_off(off_out, pout) < 0)
			n = -EFAULT;
	} else {
		end_set_pos(&out, pout);
	}
	return n;
}

CHELL_EXPORT ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off,
				     size_t len, unsigned int flags)
{
	static ssize_t (*next)(int, off64_t *, int, off64_t *, size_t, unsigned int);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "copy_file_range");
	if (likely(!handled(in, out)))
		return next(in, in_off, out, out_off, len, flags);
	return hub_ret(emulate_copy_file_range(in, in_off, out, out_off, len, flags));
}

/* ----------------------------------------------------- pipes (file side) */

/*
 * splice_file_to_pipe's wait_for_space: EPIPE (with SIGPIPE) when the pipe
 * has no reader, EAGAIN when it is full and the call must not block.
 * Returns the free room in bytes as whole pages (the kernel fills one pipe
 * slot per page), or -errno. A full pipe that may block is waited for by
 * the write itself, in the kernel, so a signal interrupts or restarts it
 * as the application's SA_RESTART says; it then gets one page.
 */
static long pipe_room(int fd, bool nonblock)
{
	struct pollfd p = {fd, POLLOUT, 0};
	if (poll(&p, 1, 0) < 0)
		return -errno;
	if (p.revents & POLLERR) {
		chell_syscall6(SYS_tgkill, sys_getpid(), sys_gettid(), SIGPIPE, 0, 0, 0);
		return -EPIPE;
	}
	if (!(p.revents & POLLOUT))
		return nonblock ? -EAGAIN : PIPE_PAGE;
	int size = sys_fcntl(fd, F_GETPIPE_SZ, 0), queued = 0;
	if (size < 0 || ioctl(fd, FIONREAD, &queued) < 0)
		return PIPE_PAGE;
	long free_pages = size / PIPE_PAGE - (queued + PIPE_PAGE - 1) / PIPE_PAGE;
	return free_pages > 0 ? free_pages * PIPE_PAGE : PIPE_PAGE;
}

/* A file into a pipe: what splice_file_to_pipe does for splice and sendfile. */
static ssize_t file_to_pipe(const struct end *in, int64_t *pos, const struct end *out, size_t len,
			    bool nonblock)
{
	long room = pipe_room(out->fd, nonblock);
	if (room < 0)
		return room;
	if (len == 0)
		return 0;
	size_t fit = (size_t)room - (size_t)((uint64_t)*pos % PIPE_PAGE);
	if (len > fit)
		len = fit;
	if (verify_area(*pos, len) < 0)
		return -EINVAL;
	int64_t scratch = 0;
	return move(in, pos, out, &scratch, len, true);
}

/* -------------------------------------------------------------- sendfile */

static ssize_t do_sendfile(int fd_out, int fd_in, int64_t *ppos, size_t count)
{
	struct end in, out;
	int r;
	if ((r = end_get(&in, fd_in)) < 0)
		return r;
	if (!readable(&in))
		return -EBADF;
	int64_t pos;
	if (!ppos)
		pos = end_pos(&in);
	else if (!has_pread(&in))
		return -ESPIPE;
	else
		pos = *ppos;
	if (verify_area(pos, count) < 0)
		return -EINVAL;
	if (count > MAX_RW_COUNT)
		count = MAX_RW_COUNT;
	if ((r = end_get(&out, fd_out)) < 0)
		return r;
	if (!writable(&out))
		return -EBADF;
	int64_t out_pos = end_pos(&out);
	int64_t max = INT64_MAX;
	if (pos + (int64_t)count > INT_MAX) { /* only then can a file system's limit matter */
		int64_t a = maxbytes(&in), b = maxbytes(&out);
		max = a < b ? a : b;
	}
	if (pos + (int64_t)count > max) {
		if (pos >= max)
			return -EOVERFLOW;
		count = (size_t)(max - pos);
	}
	ssize_t n;
	if (is_pipe(&out)) {
		n = file_to_pipe(&in, &pos, &out, count, out.fl & O_NONBLOCK);
	} else {
		if (verify_area(out_pos, count) < 0)
			return -EINVAL;
		if (out.fl & O_APPEND)
			return -EINVAL;
		/* Nothing to move ends the call before the input's type is
		 * looked at (a directory with count 0 gives 0, as the kernel). */
		if (count == 0)
			return 0;
		if (!S_ISREG(in.st.st_mode) && !S_ISBLK(in.st.st_mode))
			return -EINVAL;
		n = move(&in, &pos, &out, &out_pos, count, false);
	}
	if (n > 0) {
		end_set_pos(&out, out_pos);
		if (ppos)
			*ppos = pos;
		else
			end_set_pos(&in, pos);
	}
	return n;
}

CHELL_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	static ssize_t (*next)(int, int, off_t *, size_t);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "sendfile");
	if (likely(!handled(in, out)))
		return next(out, in, offset, count);
	if (!offset)
		return hub_ret(do_sendfile(out, in, NULL, count));
	int64_t pos;
	if (peek_off(offset, &pos) < 0)
		return hub_ret(-EFAULT);
	ssize_t n = do_sendfile(out, in, &pos, count);
	/* the kernel stores the position back whatever the outcome */
	if (poke_off(offset, pos) < 0)
		return hub_ret(-EFAULT);
	return hub_ret(n);
}
CHELL_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t count)
	__attribute__((alias("sendfile")));

/* ---------------------------------------------------------------- splice */

/*
 * A pipe into a file. The kernel takes from the pipe only what it writes,
 * so the bytes are first duplicated with tee() into a scratch pipe of the
 * same size (waiting for a writer's data unless the call must not block,
 * as splice does), written from there, and only then is as much consumed
 * from the application's pipe as the file took. Without a scratch pipe
 * (no descriptor left): read, then write.
 */
static ssize_t pipe_to_file(const struct end *in, const struct end *out, int64_t *pos, size_t len,
			    bool nonblock)
{
	int sp[2];
	if (chell_syscall6(SYS_pipe2, (long)sp, O_CLOEXEC, 0, 0, 0, 0) < 0) {
		if (nonblock) {
			struct pollfd p = {in->fd, POLLIN, 0};
			if (poll(&p, 1, 0) < 0)
				return -errno;
			if (!(p.revents & (POLLIN | POLLHUP)))
				return -EAGAIN;
		}
		int64_t scratch = 0;
		return move(in, &scratch, out, pos, len, true);
	}
	sp[0] = chell_internal_fd(sp[0], 1);
	sp[1] = chell_internal_fd(sp[1], 1);
	int size = sys_fcntl(in->fd, F_GETPIPE_SZ, 0);
	if (size > 0)
		sys_fcntl(sp[1], F_SETPIPE_SZ, size);
	ssize_t n = chell_syscall6(SYS_tee, in->fd, sp[1], (long)len,
				   nonblock ? SPLICE_F_NONBLOCK : 0, 0, 0);
	if (n > 0) {
		struct end copy = {.fd = sp[0], .fl = O_RDONLY, .st = {.st_mode = S_IFIFO}};
		int64_t scratch = 0;
		n = move(&copy, &scratch, out, pos, (size_t)n, false);
		char junk[4096];
		for (ssize_t taken = 0; taken < n;) {
			size_t want = (size_t)(n - taken) < sizeof junk ? (size_t)(n - taken) : sizeof junk;
			ssize_t r = sys_read(in->fd, junk, want);
			if (r == -EINTR)
				continue;
			if (r <= 0)
				break;
			taken += r;
		}
	}
	chell_internal_close(sp[0]);
	chell_internal_close(sp[1]);
	return n;
}

static ssize_t do_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			 unsigned int flags)
{
	if (!len)
		return 0;
	if (flags & ~(unsigned)(SPLICE_F_MOVE | SPLICE_F_NONBLOCK | SPLICE_F_MORE | SPLICE_F_GIFT))
		return -EINVAL;
	struct end in, out;
	int r;
	if ((r = end_get(&in, fd_in)) < 0 || (r = end_get(&out, fd_out)) < 0)
		return r;
	bool ipipe = is_pipe(&in), opipe = is_pipe(&out);
	if ((ipipe && off_in) || (opipe && off_out))
		return -ESPIPE;
	int64_t pos = 0;
	if (off_in && (r = peek_off(off_in, &pos)) < 0)
		return r;
	if (off_out && (r = peek_off(off_out, &pos)) < 0)
		return r;
	if (!readable(&in) || !writable(&out))
		return -EBADF;
	bool nonblock = flags & SPLICE_F_NONBLOCK;
	ssize_t n;
	if (ipipe && !opipe) {
		if (off_out && !has_pread(&out)) /* FMODE_PWRITE goes with FMODE_PREAD */
			return -EINVAL;
		if (!off_out)
			pos = end_pos(&out);
		if (out.fl & O_APPEND)
			return -EINVAL;
		if (verify_area(pos, len) < 0)
			return -EINVAL;
		n = pipe_to_file(&in, &out, &pos, len, nonblock || (in.fl & O_NONBLOCK));
		if (n >= 0 && !off_out)
			end_set_pos(&out, pos);
	} else if (opipe && !ipipe) {
		if (off_in && !has_pread(&in))
			return -EINVAL;
		if (!off_in)
			pos = end_pos(&in);
		n = file_to_pipe(&in, &pos, &out, len, nonblock || (out.fl & O_NONBLOCK));
		if (n >= 0 && !off_in)
			end_set_pos(&in, pos);
	} else {
		return -EINVAL; /* two pipes are never handled; two files need a pipe */
	}
	if (n < 0)
		return n;
	if (off_in && poke_off(off_in, pos) < 0)
		return -EFAULT;
	if (off_out && poke_off(off_out, pos) < 0)
		return -EFAULT;
	return n;
}

CHELL_EXPORT ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t len,
			    unsigned int flags)
{
	static ssize_t (*next)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "splice");
	if (likely(!handled(in, out)))
		return next(in, in_off, out, out_off, len, flags);
	return hub_ret(do_splice(in, in_off, out, out_off, len, flags));
}
