/* SPDX-License-Identifier: MIT */
/*
 * rwf_compat.h - the test programs take the preadv2/pwritev2 and
 * close_range flags newer than some installed kernel headers from the same
 * header-only copy as the handlers (include/chell/rwf.h): they must build
 * against older headers and still ask the running kernel about the flags.
 */
#ifndef RWF_COMPAT_H
#define RWF_COMPAT_H

#include "../../include/chell/rwf.h"

#endif
