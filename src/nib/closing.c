/* SPDX-License-Identifier: MIT */
/*
 * The "closing" sentinel.
 *
 * While a handled descriptor is being closed (under the table lock, see
 * hub_close), its table entry points here. Lookups that find it wait for the
 * table lock and look again (file_get_fd, file_enter), so no call is
 * dispatched on it in normal operation. Its stack answers every operation
 * with EBADF - one of the kernel's own answers to a call racing with close()
 * - so that a lookup path added later that forgets to wait still fails
 * safely instead of dereferencing a half-closed file.
 */
#include "nib.h"

#define EBADF_OP(name, ret, params) static ret closed_##name params { return (ret)-EBADF; }
EBADF_OP(open, int, (chell_ctx *c, int dirfd, const char *p, int fl, mode_t m))
EBADF_OP(close, int, (chell_ctx *c))
EBADF_OP(read, ssize_t, (chell_ctx *c, const struct iovec *v, int n, off_t o, int fl))
EBADF_OP(write, ssize_t, (chell_ctx *c, const struct iovec *v, int n, off_t o, int fl))
EBADF_OP(lseek, off_t, (chell_ctx *c, off_t o, int w))
EBADF_OP(fsync, int, (chell_ctx *c, int d))
EBADF_OP(sync_file_range, int, (chell_ctx *c, off_t o, off_t n, unsigned int fl))
EBADF_OP(ftruncate, int, (chell_ctx *c, off_t l))
EBADF_OP(fallocate, int, (chell_ctx *c, int m, off_t o, off_t l))
EBADF_OP(fstat, int, (chell_ctx *c, struct stat *st))
EBADF_OP(fcntl, int, (chell_ctx *c, int cmd, unsigned long arg))
EBADF_OP(truncate, int, (chell_ctx *c, const char *p, off_t l))
EBADF_OP(stat, int, (chell_ctx *c, int dirfd, const char *p, struct stat *st, int fl))
static void *closed_mmap(chell_ctx *c, void *a, size_t l, int p, int fl, off_t o)
{
	return (void *)(intptr_t)-EBADF;
}

static const struct chell_handler closed_handler = {
	.name = "closing",
	.summary = "a descriptor being closed: every call fails with EBADF",
	CHELL_HANDLER_NO_PRIV,
	.open = closed_open, .close = closed_close, .read = closed_read, .write = closed_write,
	.lseek = closed_lseek, .fsync = closed_fsync, .sync_file_range = closed_sync_file_range,
	.ftruncate = closed_ftruncate, .fallocate = closed_fallocate, .fstat = closed_fstat,
	.fcntl = closed_fcntl, .mmap = closed_mmap, .truncate = closed_truncate, .stat = closed_stat,
};
static const struct chell_stack closing_stack = {"closing", 1, {&closed_handler}};
static struct chell_ofd closing_ofd;

/* Never destroyed: its reference count starts far from zero and live is 0. */
struct nib_file chell_closing_file = {
	.pub = {.ofd = &closing_ofd, .stack = &closing_stack, .path = "(closing)"},
	.refs = 1u << 30,
};
