/* SPDX-License-Identifier: MIT */
/* hub_call_OP: run OP at or below c->layer (see dispatch.c). */
#ifndef CHELL_NIB_DISPATCH_H
#define CHELL_NIB_DISPATCH_H
#include "nib.h"

int hub_call_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode);
int hub_call_close(chell_ctx *c);
ssize_t hub_call_read(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
ssize_t hub_call_write(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
off_t hub_call_lseek(chell_ctx *c, off_t off, int whence);
int hub_call_fsync(chell_ctx *c, int datasync);
int hub_call_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags);
int hub_call_ftruncate(chell_ctx *c, off_t len);
int hub_call_fallocate(chell_ctx *c, int mode, off_t off, off_t len);
int hub_call_fstat(chell_ctx *c, struct stat *st);
int hub_call_fcntl(chell_ctx *c, int cmd, unsigned long arg);
void *hub_call_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off);
ssize_t hub_call_get_read_buf(chell_ctx *c, const void **buf, size_t count);
ssize_t hub_call_get_write_buf(chell_ctx *c, void **buf, size_t count);
ssize_t hub_call_commit_write_buf(chell_ctx *c, const void *buf, size_t len);
int hub_call_truncate(chell_ctx *c, const char *path, off_t len);
int hub_call_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags);
#endif
