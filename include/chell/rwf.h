/* SPDX-License-Identifier: MIT */
/*
 * chell/rwf.h - preadv2/pwritev2 flags newer than some installed kernel
 * headers (linux/fs.h), and close_range's CLOSE_RANGE_UNSHARE.
 *
 * Chell builds against older headers and still asks the running kernel
 * about each flag, so the values come from here where the headers lack
 * them: one copy for the handlers (through mapped/mapped.h) and for the
 * test programs. Header-only, no dependency on libchell.
 */
#ifndef CHELL_RWF_H
#define CHELL_RWF_H

#include <sys/uio.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
#ifndef RWF_APPEND
#define RWF_APPEND 0x00000010
#endif
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
