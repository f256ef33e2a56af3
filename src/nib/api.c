/* SPDX-License-Identifier: MIT */
/*
 * The zero-copy API of chell/chell.h. Each call goes to the handler stack
 * that serves the descriptor (the get_read_buf / get_write_buf /
 * commit_write_buf methods, handler.h): a handler that keeps the file in
 * memory hands out pointers into it. Where none does - a descriptor on the
 * kernel path, a stack without such a handler, or a handler that cannot
 * this time (CHELL_FAST_MISS) - a per-thread buffer and plain read()/write()
 * give the same results with a copy.
 */
#include <chell/chell.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "nib.h"

static __thread unsigned char *tls_buf;
static __thread size_t tls_buf_len;

/* The pending chell_get_write_buf reservation of this thread. */
static __thread struct {
	int fd;
	struct chell_file *f; /* served by a handler (a reference until the commit), or NULL */
	void *ptr;
	size_t len;
} tls_w = {-1};

static void *staging(size_t count)
{
	if (count > tls_buf_len) {
		void *p = realloc(tls_buf, count ? count : 1);
		if (!p)
			return NULL;
		tls_buf = p;
		tls_buf_len = count;
	}
	return tls_buf;
}

CHELL_EXPORT const char *chell_version(void)
{
	return CHELL_VERSION_STRING;
}

CHELL_EXPORT ssize_t chell_get_read_buf(int fd, const void **buf, size_t count)
{
	struct chell_file *f = file_get_fd(fd);
	if (f) {
		chell_ctx c = {f, fd, 0, CHELL_OP_READ, NULL};
		ssize_t r = hub_call_get_read_buf(&c, buf, count);
		file_put(f);
		if (r != CHELL_FAST_MISS)
			return hub_ret(r);
	}
	void *b = staging(count);
	if (!b) {
		errno = ENOMEM;
		return -1;
	}
	ssize_t r = read(fd, b, count);
	if (r >= 0)
		*buf = b;
	return r;
}

CHELL_EXPORT ssize_t chell_get_write_buf(int fd, void **buf, size_t count)
{
	if (tls_w.fd >= 0) { /* one reservation at a time per thread */
		errno = EBUSY;
		return -1;
	}
	struct chell_file *f = file_get_fd(fd);
	if (f) {
		chell_ctx c = {f, fd, 0, CHELL_OP_WRITE, NULL};
		void *p = NULL;
		ssize_t r = hub_call_get_write_buf(&c, &p, count);
		if (r != CHELL_FAST_MISS) {
			if (r < 0) {
				file_put(f);
				return hub_ret(r);
			}
			tls_w.fd = fd;
			tls_w.f = f; /* keeps the file alive until the commit */
			tls_w.ptr = p;
			tls_w.len = (size_t)r;
			*buf = p;
			return r;
		}
		file_put(f);
	}
	void *b = staging(count);
	if (!b) {
		errno = ENOMEM;
		return -1;
	}
	tls_w.fd = fd;
	tls_w.f = NULL;
	tls_w.len = count;
	tls_w.ptr = b;
	*buf = b;
	return (ssize_t)count;
}

CHELL_EXPORT ssize_t chell_commit_write_buf(int fd, const void *buf, size_t len)
{
	if (tls_w.fd != fd || buf != tls_w.ptr || len > tls_w.len) {
		errno = EINVAL;
		return -1;
	}
	struct chell_file *f = tls_w.f;
	tls_w.fd = -1;
	if (!f)
		return write(fd, buf, len);
	chell_ctx c = {f, fd, 0, CHELL_OP_WRITE, NULL};
	ssize_t r = hub_call_commit_write_buf(&c, buf, len);
	file_put(f);
	return hub_ret(r);
}
