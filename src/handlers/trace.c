/* SPDX-License-Identifier: MIT */
/*
 * The trace handler: one strace-like line per operation, then passes the
 * operation down unchanged.
 *
 *   4242/4242 pread(3, 4096, 8192) = 4096 <1.2us>
 *   4242/4243 write(3, 10) = -1 EBADF (Bad file descriptor) <0.4us>
 *
 * Lines go to the file named by trace.file ('%p' becomes the pid; each
 * process of a tree then gets its own file) or to stderr, each with a single
 * O_APPEND write so lines from threads and processes never interleave.
 */
#include <string.h>
#include <stdarg.h>
#include <time.h>

#include "../nib/nib.h"

static int trace_fd = -1;
static bool per_pid_file;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int open_trace_file(void)
{
	const char *spec = chell_setting("trace.file");
	if (!spec[0]) {
		trace_fd = chell_internal_fd(sys_fcntl(2, F_DUPFD_CLOEXEC, 0), 1);
		return 0; /* no stderr at all is not an error: lines are dropped */
	}
	char path[4096];
	per_pid_file = chell_expand_pid(spec, path, sizeof(path));
	int fd = sys_open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		chell_log("cannot open trace.file '%s': %s", path, strerror(-fd));
		return fd;
	}
	trace_fd = chell_internal_fd(fd, 1);
	return 0;
}

static int trace_proc_init(void)
{
	return open_trace_file();
}

__attribute__((format(printf, 2, 3))) static void emit(uint64_t t0, const char *fmt, ...)
{
	if (trace_fd < 0)
		return;
	char line[1024];
	int n = snprintf(line, sizeof(line), "%d/%d ", (int)sys_getpid(), (int)chell_tid());
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
	if (len > sizeof(line) - 32)
		len = sizeof(line) - 32;
	if (t0) {
		uint64_t d = now_ns() - t0;
		len += (size_t)snprintf(line + len, sizeof(line) - len, " <%llu.%01lluus>",
					(unsigned long long)(d / 1000),
					(unsigned long long)(d % 1000 / 100));
	}
	line[len++] = '\n';
	chell_own_write(trace_fd, line, len);
}

/* " = 42" or " = -1 ENOENT (No such file or directory)" */
static const char *result(long r, char *buf, size_t n)
{
	if (r < 0 && r > -4096)
		snprintf(buf, n, "-1 %s (%s)", strerrorname_np((int)-r) ? strerrorname_np((int)-r) : "E?",
			 strerror((int)-r));
	else
		snprintf(buf, n, "%ld", r);
	return buf;
}

static const char *open_flags(int fl, char *buf, size_t n)
{
	static const struct { int bit; const char *name; } bits[] = {
		{O_CREAT, "O_CREAT"}, {O_EXCL, "O_EXCL"}, {O_TRUNC, "O_TRUNC"},
		{O_APPEND, "O_APPEND"}, {O_NONBLOCK, "O_NONBLOCK"}, {O_CLOEXEC, "O_CLOEXEC"},
		{O_DIRECT, "O_DIRECT"}, {O_SYNC, "O_SYNC"}, {O_NOFOLLOW, "O_NOFOLLOW"},
		{O_NOATIME, "O_NOATIME"},
	};
	const char *acc = (fl & O_ACCMODE) == O_RDONLY ? "O_RDONLY"
			  : (fl & O_ACCMODE) == O_WRONLY ? "O_WRONLY" : "O_RDWR";
	size_t o = (size_t)snprintf(buf, n, "%s", acc);
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]) && o < n; i++)
		if ((fl & bits[i].bit) == bits[i].bit)
			o += (size_t)snprintf(buf + o, n - o, "|%s", bits[i].name);
	return buf;
}

static size_t iov_bytes(const struct iovec *iov, int cnt)
{
	size_t t = 0;
	for (int i = 0; i < cnt && i < 1024; i++)
		t += iov[i].iov_len;
	return t;
}

static int trace_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode)
{
	uint64_t t0 = now_ns();
	int r = chell_down_open(c, dirfd, path, flags, mode);
	char fb[256], rb[96];
	emit(t0, "open(\"%s\", %s, 0%o) = %s", c->path, open_flags(flags, fb, sizeof(fb)),
	     (unsigned)mode, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_close(chell_ctx *c)
{
	uint64_t t0 = now_ns();
	int r = chell_down_close(c);
	char rb[96];
	emit(t0, "close(%d) = %s", c->fd, result(r, rb, sizeof(rb)));
	return r;
}

static void rw_line(chell_ctx *c, uint64_t t0, const struct iovec *iov, int cnt, off_t off,
		    int flags, long r)
{
	char rb[96];
	const char *name = chell_op_name(c->op);
	switch (c->op) {
	case CHELL_OP_READ: case CHELL_OP_WRITE:
		emit(t0, "%s(%d, %zu) = %s", name, c->fd, iov[0].iov_len, result(r, rb, sizeof(rb)));
		break;
	case CHELL_OP_PREAD: case CHELL_OP_PWRITE:
		emit(t0, "%s(%d, %zu, %lld) = %s", name, c->fd, iov[0].iov_len, (long long)off,
		     result(r, rb, sizeof(rb)));
		break;
	case CHELL_OP_READV: case CHELL_OP_WRITEV:
		emit(t0, "%s(%d, [%d iov, %zu bytes]) = %s", name, c->fd, cnt, iov_bytes(iov, cnt),
		     result(r, rb, sizeof(rb)));
		break;
	default:
		emit(t0, "%s(%d, [%d iov, %zu bytes], %lld, 0x%x) = %s", name, c->fd, cnt,
		     iov_bytes(iov, cnt), (long long)off, (unsigned)flags, result(r, rb, sizeof(rb)));
	}
}

static ssize_t trace_read(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	uint64_t t0 = now_ns();
	ssize_t r = chell_down_read(c, iov, cnt, off, flags);
	rw_line(c, t0, iov, cnt, off, flags, r);
	return r;
}

static ssize_t trace_write(chell_ctx *c, const struct iovec *iov, int cnt, off_t off, int flags)
{
	uint64_t t0 = now_ns();
	ssize_t r = chell_down_write(c, iov, cnt, off, flags);
	rw_line(c, t0, iov, cnt, off, flags, r);
	return r;
}

static off_t trace_lseek(chell_ctx *c, off_t off, int whence)
{
	static const char *const wh[] = {"SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"};
	uint64_t t0 = now_ns();
	off_t r = chell_down_lseek(c, off, whence);
	char rb[96], wb[16];
	if (whence >= 0 && whence <= 4)
		snprintf(wb, sizeof(wb), "%s", wh[whence]);
	else
		snprintf(wb, sizeof(wb), "%d", whence);
	emit(t0, "lseek(%d, %lld, %s) = %s", c->fd, (long long)off, wb, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_fsync(chell_ctx *c, int datasync)
{
	uint64_t t0 = now_ns();
	int r = chell_down_fsync(c, datasync);
	char rb[96];
	emit(t0, "%s(%d) = %s", datasync ? "fdatasync" : "fsync", c->fd, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags)
{
	uint64_t t0 = now_ns();
	int r = chell_down_sync_file_range(c, off, n, flags);
	char rb[96];
	emit(t0, "sync_file_range(%d, %lld, %lld, 0x%x) = %s", c->fd, (long long)off, (long long)n,
	     flags, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_ftruncate(chell_ctx *c, off_t len)
{
	uint64_t t0 = now_ns();
	int r = chell_down_ftruncate(c, len);
	char rb[96];
	emit(t0, "ftruncate(%d, %lld) = %s", c->fd, (long long)len, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_fallocate(chell_ctx *c, int mode, off_t off, off_t len)
{
	uint64_t t0 = now_ns();
	int r = chell_down_fallocate(c, mode, off, len);
	char rb[96];
	emit(t0, "fallocate(%d, 0x%x, %lld, %lld) = %s", c->fd, (unsigned)mode, (long long)off,
	     (long long)len, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_fstat(chell_ctx *c, struct stat *st)
{
	uint64_t t0 = now_ns();
	int r = chell_down_fstat(c, st);
	char rb[96];
	if (r == 0)
		emit(t0, "fstat(%d, {size=%lld}) = 0", c->fd, (long long)st->st_size);
	else
		emit(t0, "fstat(%d) = %s", c->fd, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_fcntl(chell_ctx *c, int cmd, unsigned long arg)
{
	uint64_t t0 = now_ns();
	int r = chell_down_fcntl(c, cmd, arg);
	char rb[96];
	const char *name = cmd == F_GETFL ? "F_GETFL" : cmd == F_SETFL ? "F_SETFL"
			 : cmd == F_GETFD ? "F_GETFD" : cmd == F_SETFD ? "F_SETFD" : NULL;
	if (name)
		emit(t0, "fcntl(%d, %s, 0x%lx) = %s", c->fd, name, arg, result(r, rb, sizeof(rb)));
	else
		emit(t0, "fcntl(%d, %d, 0x%lx) = %s", c->fd, cmd, arg, result(r, rb, sizeof(rb)));
	return r;
}

static void trace_dup(chell_ctx *c, int newfd)
{
	emit(0, "dup(%d) = %d", c->fd, newfd);
}

static void *trace_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off)
{
	uint64_t t0 = now_ns();
	void *p = chell_down_mmap(c, addr, len, prot, flags, off);
	char rb[96];
	if ((uintptr_t)p >= (uintptr_t)-4095)
		emit(t0, "mmap(%d, %zu, 0x%x, 0x%x, %lld) = %s", c->fd, len, (unsigned)prot,
		     (unsigned)flags, (long long)off, result((long)(intptr_t)p, rb, sizeof(rb)));
	else
		emit(t0, "mmap(%d, %zu, 0x%x, 0x%x, %lld) = %p", c->fd, len, (unsigned)prot,
		     (unsigned)flags, (long long)off, p);
	return p;
}

static int trace_truncate(chell_ctx *c, const char *path, off_t len)
{
	uint64_t t0 = now_ns();
	int r = chell_down_truncate(c, path, len);
	char rb[96];
	emit(t0, "truncate(\"%s\", %lld) = %s", c->path, (long long)len, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags)
{
	uint64_t t0 = now_ns();
	int r = chell_down_stat(c, dirfd, path, st, at_flags);
	char rb[96];
	if (r == 0)
		emit(t0, "%s(\"%s\", {size=%lld}) = 0",
		     (at_flags & AT_SYMLINK_NOFOLLOW) ? "lstat" : "stat", c->path,
		     (long long)st->st_size);
	else
		emit(t0, "%s(\"%s\") = %s", (at_flags & AT_SYMLINK_NOFOLLOW) ? "lstat" : "stat",
		     c->path, result(r, rb, sizeof(rb)));
	return r;
}

static int trace_adopt(chell_ctx *c)
{
	emit(0, "+++ inherited fd %d \"%s\" across exec", c->fd, c->f->path);
	return 0;
}

static void trace_proc_event(enum chell_op ev, long arg)
{
	if (ev == CHELL_OP_FORK) {
		if (per_pid_file) { /* the child gets its own file */
			chell_internal_close(trace_fd);
			trace_fd = -1;
			open_trace_file();
		}
		emit(0, "+++ forked from %ld", arg);
	} else if (ev == CHELL_OP_EXEC) {
		emit(0, "+++ exec \"%s\"", arg ? (const char *)arg : "?");
	}
}

const struct chell_handler chell_trace_handler = {
	.name = "trace",
	CHELL_HANDLER_NO_PRIV, /* summary: src/common/registry.def */
	.proc_init = trace_proc_init,
	.proc_event = trace_proc_event,
	.open = trace_open,
	.adopt = trace_adopt,
	.close = trace_close,
	.dup = trace_dup,
	.read = trace_read,
	.write = trace_write,
	.lseek = trace_lseek,
	.fsync = trace_fsync,
	.sync_file_range = trace_sync_file_range,
	.ftruncate = trace_ftruncate,
	.fallocate = trace_fallocate,
	.fstat = trace_fstat,
	.fcntl = trace_fcntl,
	.mmap = trace_mmap,
	.truncate = trace_truncate,
	.stat = trace_stat,
};
