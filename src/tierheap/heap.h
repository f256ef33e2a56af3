/* SPDX-License-Identifier: MIT */
/* Internals shared by the tiered heap's files (heap.c, malloc.c). */
#ifndef CHELL_TIERHEAP_HEAP_H
#define CHELL_TIERHEAP_HEAP_H

#include <stdbool.h>
#include <stdint.h>

void th_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool th_is_slow(const void *p);
/* memory.max of this process's cgroup v2 (0 = no limit); 0 or -1. */
int th_cgroup_memory_max(uint64_t *out);

#endif
