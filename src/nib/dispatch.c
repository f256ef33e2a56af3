/* SPDX-License-Identifier: MIT */
/*
 * Dispatch down a handler stack.
 *
 * hub_call_OP(c, ...) runs OP on the first handler at or below c->layer that
 * implements it; chell_down_OP(c, ...) (for handlers) starts one layer lower.
 * The posix handler at the bottom of every stack implements every operation,
 * so a call always lands somewhere.
 */
#include "dispatch.h"

static const struct chell_stack *ctx_stack(const chell_ctx *c)
{
	if (c->f && c->f->stack)
		return c->f->stack;
	return c->stack ? c->stack : chell_mode_stack; /* a path call: its routed stack */
}

#define FIND_LAYER(c, start, member, d)                                               \
	const struct chell_stack *st_ = ctx_stack(c);                                 \
	chell_ctx d = *(c);                                                           \
	d.layer = (start);                                                            \
	while (d.layer < st_->depth && st_->handlers[d.layer]->member == NULL)        \
		d.layer++;                                                            \
	const struct chell_handler *h_ =                                              \
		d.layer < st_->depth ? st_->handlers[d.layer] : &chell_posix_handler;

#define DEFINE_DISPATCH(ret, member, params, args)                                    \
	ret hub_call_##member params                                                  \
	{                                                                             \
		FIND_LAYER(c, c->layer, member, d)                                    \
		return h_->member args;                                               \
	}                                                                             \
	CHELL_EXPORT ret chell_down_##member params                                   \
	{                                                                             \
		FIND_LAYER(c, c->layer + 1, member, d)                                \
		return h_->member args;                                               \
	}

DEFINE_DISPATCH(int, open, (chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode),
		(&d, dirfd, path, flags, mode))
DEFINE_DISPATCH(int, close, (chell_ctx *c), (&d))
DEFINE_DISPATCH(ssize_t, read,
		(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags),
		(&d, iov, iovcnt, off, flags))
DEFINE_DISPATCH(ssize_t, write,
		(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags),
		(&d, iov, iovcnt, off, flags))
DEFINE_DISPATCH(off_t, lseek, (chell_ctx *c, off_t off, int whence), (&d, off, whence))
DEFINE_DISPATCH(int, fsync, (chell_ctx *c, int datasync), (&d, datasync))
DEFINE_DISPATCH(int, sync_file_range, (chell_ctx *c, off_t off, off_t n, unsigned int flags),
		(&d, off, n, flags))
DEFINE_DISPATCH(int, ftruncate, (chell_ctx *c, off_t len), (&d, len))
DEFINE_DISPATCH(int, fallocate, (chell_ctx *c, int mode, off_t off, off_t len),
		(&d, mode, off, len))
DEFINE_DISPATCH(int, fstat, (chell_ctx *c, struct stat *st), (&d, st))
DEFINE_DISPATCH(int, fcntl, (chell_ctx *c, int cmd, unsigned long arg), (&d, cmd, arg))
DEFINE_DISPATCH(void *, mmap,
		(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off),
		(&d, addr, len, prot, flags, off))
DEFINE_DISPATCH(ssize_t, get_read_buf, (chell_ctx *c, const void **buf, size_t count), (&d, buf, count))
DEFINE_DISPATCH(ssize_t, get_write_buf, (chell_ctx *c, void **buf, size_t count), (&d, buf, count))
DEFINE_DISPATCH(ssize_t, commit_write_buf, (chell_ctx *c, const void *buf, size_t len), (&d, buf, len))
DEFINE_DISPATCH(int, truncate, (chell_ctx *c, const char *path, off_t len), (&d, path, len))
DEFINE_DISPATCH(int, stat,
		(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags),
		(&d, dirfd, path, st, at_flags))

CHELL_EXPORT const struct chell_handler *chell_layer(const chell_ctx *c)
{
	const struct chell_stack *st = ctx_stack(c);
	return c->layer < st->depth ? st->handlers[c->layer] : &chell_posix_handler;
}
