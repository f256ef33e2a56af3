/* SPDX-License-Identifier: MIT */
/*
 * Short names for the base's accessors (base.h), for the .c files of the
 * base and of the handlers on it, where they appear on nearly every line:
 * D(c) the per-OFD state, L(c) the per-process state, OFFSET(c) the shared
 * offset, status(c) the status flags, isize/isize_set the shared size.
 * Include last, and never from a header.
 */
#ifndef CHELL_MAPPED_SHORT_H
#define CHELL_MAPPED_SHORT_H

#include "base.h"

#define D mapped_ofd
#define L mapped_local
#define OFFSET mapped_offset
#define status mapped_status
#define isize mapped_isize
#define isize_set mapped_isize_set

#endif
