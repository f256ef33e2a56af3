/* SPDX-License-Identifier: MIT */
#ifndef CHELL_COMMON_FSTYPE_H
#define CHELL_COMMON_FSTYPE_H
#include <stdbool.h>
#include <stddef.h>

/* 1 when `path` (or, if it does not exist yet, its nearest existing
 * ancestor) is on a network or FUSE file system, with `name` set to the
 * mount's type ("fuse.glusterfs", "nfs4"); 0 when local; -1 unknown. */
int chell_fs_remote(const char *path, char *name, size_t len);

#endif
