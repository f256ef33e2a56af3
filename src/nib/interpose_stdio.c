/* SPDX-License-Identifier: MIT */
/*
 * stdio on handled files.
 *
 * glibc's FILE functions call glibc-internal read/write symbols that no
 * preloaded library can interpose, so a FILE opened the usual way would
 * bypass the handler. For routed files fopen/fdopen return fopencookie()
 * streams whose callbacks are Chell's own read/write/lseek/close, so every
 * byte reaches the handler. fileno() is taught to answer for those streams.
 * stdin/stdout/stderr are fixed FILE objects: when descriptor 0, 1 or 2 is a
 * handled file (inherited, dup2'ed or freopen'ed) the std variable is pointed
 * at a cookie stream on that descriptor, and back when it stops being one.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nib.h"

struct cookie {
	int fd;
	FILE *fp;
	struct cookie *next;
};

static struct cookie *cookies;
static _Atomic int ncookies;
static pthread_mutex_t cookies_lock = PTHREAD_MUTEX_INITIALIZER;

static struct cookie *find_cookie(FILE *fp)
{
	struct cookie *c;
	pthread_mutex_lock(&cookies_lock);
	for (c = cookies; c && c->fp != fp; c = c->next)
		;
	pthread_mutex_unlock(&cookies_lock);
	return c;
}

static void forget_cookie(struct cookie *ck)
{
	pthread_mutex_lock(&cookies_lock);
	for (struct cookie **pp = &cookies; *pp; pp = &(*pp)->next)
		if (*pp == ck) {
			*pp = ck->next;
			atomic_fetch_sub(&ncookies, 1);
			break;
		}
	pthread_mutex_unlock(&cookies_lock);
}

static ssize_t ck_read(void *p, char *buf, size_t n)
{
	return read(((struct cookie *)p)->fd, buf, n);
}

static ssize_t ck_write(void *p, const char *buf, size_t n)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(((struct cookie *)p)->fd, buf + done, n - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* errno is set; glibc marks the stream in error */
		done += (size_t)w;
	}
	/* glibc's file streams advance their cached offset (_offset) after a
	 * write, cookie streams don't, so a later fseek(SEEK_CUR) would be
	 * computed from the position before the write. Mark the cache unknown:
	 * glibc then asks our seek callback. */
	struct cookie *ck = p;
	if (ck->fp)
		ck->fp->_offset = -1;
	return (ssize_t)done;
}

static int ck_seek(void *p, off64_t *off, int whence)
{
	off_t r = lseek(((struct cookie *)p)->fd, *off, whence);
	if (r < 0)
		return -1;
	*off = r;
	return 0;
}

static int ck_close(void *p)
{
	struct cookie *ck = p;
	forget_cookie(ck);
	int r = ck->fd >= 0 ? close(ck->fd) : 0;
	free(ck);
	return r;
}

static const cookie_io_functions_t ck_funcs = {ck_read, ck_write, ck_seek, ck_close};

static FILE *cookie_stream(int fd, const char *mode)
{
	struct cookie *ck = calloc(1, sizeof(*ck));
	if (!ck)
		return NULL;
	ck->fd = fd;
	FILE *fp = fopencookie(ck, mode, ck_funcs);
	if (!fp) {
		free(ck);
		return NULL;
	}
	ck->fp = fp;
	pthread_mutex_lock(&cookies_lock);
	ck->next = cookies;
	cookies = ck;
	atomic_fetch_add(&ncookies, 1);
	pthread_mutex_unlock(&cookies_lock);
	return fp;
}

/* fopen mode -> open flags, as glibc parses it. -1 if invalid. */
static int mode_flags(const char *mode)
{
	int acc, flags;
	switch (mode[0]) {
	case 'r': acc = O_RDONLY; flags = 0; break;
	case 'w': acc = O_WRONLY; flags = O_CREAT | O_TRUNC; break;
	case 'a': acc = O_WRONLY; flags = O_CREAT | O_APPEND; break;
	default: return -1;
	}
	for (const char *m = mode + 1; *m && *m != ','; m++) {
		switch (*m) {
		case '+': acc = O_RDWR; break;
		case 'x': flags |= O_EXCL; break;
		case 'e': flags |= O_CLOEXEC; break;
		default: break; /* b, m, c, t: no effect on the descriptor */
		}
	}
	return acc | flags;
}

static FILE *open_stream(const char *path, const char *mode)
{
	char abs[PATH_MAX];
	int flags = mode ? mode_flags(mode) : -1;
	if (!chell_active || flags < 0 || !path || !router_route(AT_FDCWD, path, abs, sizeof(abs)))
		return REAL(fopen64)(path, mode);
	int fd = hub_open(AT_FDCWD, path, flags, 0666, CHELL_OP_OPEN);
	if (fd < 0)
		return NULL;
	/* glibc positions a write-only append stream at the end at open */
	if (mode[0] == 'a' && !strchr(mode, '+') && fdt_peek(fd))
		lseek(fd, 0, SEEK_END);
	FILE *fp = fdt_peek(fd) ? cookie_stream(fd, mode) : REAL(fdopen)(fd, mode);
	if (!fp) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return fp;
}

CHELL_EXPORT FILE *fopen(const char *path, const char *mode)
{
	return open_stream(path, mode);
}
CHELL_EXPORT FILE *fopen64(const char *path, const char *mode) __attribute__((alias("fopen")));

CHELL_EXPORT FILE *fdopen(int fd, const char *mode)
{
	if (likely(fdt_peek(fd) == NULL))
		return REAL(fdopen)(fd, mode);
	/* glibc checks the mode against the descriptor and sets O_APPEND for "a". */
	int want = mode ? mode_flags(mode) : -1;
	int have = fcntl(fd, F_GETFL);
	if (want < 0 || have < 0) {
		errno = want < 0 ? EINVAL : errno;
		return NULL;
	}
	int wacc = want & O_ACCMODE, hacc = have & O_ACCMODE;
	if ((wacc == O_RDWR && hacc != O_RDWR) || (wacc == O_RDONLY && hacc == O_WRONLY) ||
	    (wacc == O_WRONLY && hacc == O_RDONLY)) {
		errno = EINVAL;
		return NULL;
	}
	if ((want & O_APPEND) && !(have & O_APPEND)) {
		if (fcntl(fd, F_SETFL, have | O_APPEND) < 0)
			return NULL;
		if (mode[0] == 'a' && !strchr(mode, '+')) /* as glibc does after adding O_APPEND */
			lseek(fd, 0, SEEK_END);
	}
	return cookie_stream(fd, mode);
}

CHELL_EXPORT int fileno(FILE *fp)
{
	if (atomic_load_explicit(&ncookies, memory_order_relaxed) > 0) {
		struct cookie *ck = find_cookie(fp);
		if (ck)
			return ck->fd;
	}
	return REAL(fileno)(fp);
}

CHELL_EXPORT int fileno_unlocked(FILE *fp)
{
	if (atomic_load_explicit(&ncookies, memory_order_relaxed) > 0) {
		struct cookie *ck = find_cookie(fp);
		if (ck)
			return ck->fd;
	}
	return REAL(fileno_unlocked)(fp);
}

/* ------------------------------------------------------- standard streams */

static FILE *orig_std[3];
static FILE **const std_var[3] = {&stdin, &stdout, &stderr};

void stdio_fix_std_stream(int fd)
{
	if (fd < 0 || fd > 2)
		return;
	FILE *cur = *std_var[fd];
	struct cookie *ck = find_cookie(cur);
	if (!orig_std[fd] && !ck)
		orig_std[fd] = cur;
	if (fdt_peek(fd)) {
		if (ck && ck->fd == fd)
			return;
		FILE *fp = cookie_stream(fd, fd == 0 ? "r" : "w");
		if (!fp)
			return;
		if (fd == 2)
			setvbuf(fp, NULL, _IONBF, 0);
		fflush(cur);
		*std_var[fd] = fp;
	} else if (ck && orig_std[fd]) {
		/* fd no longer handled: hand the descriptor back to glibc's stream.
		 * The cookie stream is abandoned, not closed: closing would close fd. */
		fflush(cur);
		forget_cookie(ck);
		ck->fd = -1;
		*std_var[fd] = orig_std[fd];
	}
}

CHELL_EXPORT FILE *freopen(const char *path, const char *mode, FILE *stream)
{
	char abs[PATH_MAX];
	struct cookie *ck = find_cookie(stream);
	int flags = mode ? mode_flags(mode) : -1;
	int stdfd = -1;
	for (int i = 0; i < 3; i++)
		if (stream == *std_var[i])
			stdfd = i;
	bool routed = chell_active && path && flags >= 0 &&
		      router_route(AT_FDCWD, path, abs, sizeof(abs));
	if (!routed || (!ck && stdfd < 0)) {
		/* glibc reopens in place (a cookie stream becomes a plain one). */
		if (ck)
			forget_cookie(ck), ck->fd = (close(ck->fd), -1);
		return REAL(freopen64)(path, mode, stream);
	}
	/* Routed: reopen on the same descriptor number, through the hub. */
	fflush(stream);
	int oldfd = ck ? ck->fd : stdfd;
	int nfd = hub_open(AT_FDCWD, path, flags, 0666, CHELL_OP_OPEN);
	if (nfd < 0) {
		fclose(stream);
		return NULL;
	}
	if (nfd != oldfd) {
		if (dup3(nfd, oldfd, flags & O_CLOEXEC) < 0) {
			int e = errno;
			close(nfd);
			errno = e;
			return NULL;
		}
		close(nfd);
	}
	if (ck) {
		clearerr(stream);
		return stream;
	}
	stdio_fix_std_stream(stdfd); /* dup3 onto 0-2 already did this */
	return *std_var[stdfd];
}
CHELL_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *stream)
	__attribute__((alias("freopen")));
