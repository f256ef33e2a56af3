/* SPDX-License-Identifier: MIT */
/*
 * rwf_compat.h - preadv2/pwritev2 flags and close_range flags newer than
 * some installed kernel headers, for the test programs (they must build
 * against older headers and still ask the running kernel about the flags).
 * The library's own copy is src/handlers/mapped.h: tests do not include
 * library internals.
 */
#ifndef RWF_COMPAT_H
#define RWF_COMPAT_H

#include <sys/uio.h>

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x00000020
#endif
#ifndef RWF_ATOMIC
#define RWF_ATOMIC 0x00000040
#endif
#ifndef RWF_DONTCACHE
#define RWF_DONTCACHE 0x00000080
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

#endif
