/* SPDX-License-Identifier: MIT */
/*
 * kernel_view.h - keeping the kernel's view of a handled descriptor right
 * where the kernel itself evaluates it.
 *
 * A handler may keep the file offset in user space (direct, cache: the
 * shared ofd->offset); the kernel's own offset of the descriptor is then
 * stale. Every call the kernel evaluates against its offset while the
 * descriptor stays under Chell (fcntl locks with l_whence = SEEK_CUR,
 * lockf, an exec'd image that adopts the descriptor) first brings it up to
 * date (sync_out); a call Chell lets the kernel do that moves the offset
 * (an in-kernel copy with a NULL offset) hands it back (sync_in). A
 * descriptor that leaves Chell for good (an image Chell does not load into,
 * SCM_RIGHTS, a spawn Chell cannot see) escapes: its description uses the
 * kernel's offset from then on, in every process.
 *
 * Each runs the matching hook of every layer of the file's stack; layers
 * without one keep nothing the kernel lacks.
 */
#ifndef CHELL_NIB_KERNEL_VIEW_H
#define CHELL_NIB_KERNEL_VIEW_H

#include "nib.h"

void hub_sync_out(struct chell_file *f, int fd, enum chell_op op);
void hub_sync_in(struct chell_file *f, int fd, enum chell_op op);
void hub_escape(struct chell_file *f, int fd, enum chell_op op);

/* By descriptor (no-ops on a descriptor Chell does not handle). */
void chell_fd_sync_out(int fd, enum chell_op op);
void chell_fd_sync_in(int fd, enum chell_op op);
void chell_fd_escape(int fd, enum chell_op op);

/* Every handled descriptor of this process escapes (a spawn whose file
 * actions Chell did not see may hand any of them to the new program). */
void chell_escape_all(enum chell_op op);

#endif
