/* SPDX-License-Identifier: MIT */
/*
 * The tiered heap's explicit calls (libchell-tier.so, docs/TIERHEAP.md).
 *
 * Under `chell tier run` (or with libchell-tier.so preloaded) every malloc
 * of the program is placed by the heap's policy. A program that wants to put
 * some data on the slow tier itself, whatever the policy, calls these; link
 * with -lchell-tier (the library must then be loaded, preloaded or linked).
 *
 * void *npmalloc(size_t size)
 *     `size` bytes on the slow tier (non-persistent: the contents do not
 *     outlive the process), aligned like malloc's. size 0 gives a unique
 *     pointer. Returns NULL with errno ENOMEM if the slow tier is full or
 *     there is none (no slow file and no slow NUMA node could be set up).
 * void npfree(void *ptr)
 *     Free a block of npmalloc/nprealloc; NULL is a no-op. free() of such
 *     a block is also correct (the heap is one jemalloc).
 * void *nprealloc(void *ptr, size_t size)
 *     Resize a block of npmalloc, the new block again on the slow tier;
 *     ptr NULL is npmalloc(size); size 0 frees ptr and returns NULL (like
 *     glibc's realloc). On failure NULL, errno ENOMEM, ptr untouched.
 * int chell_tierheap_where(const void *ptr)
 *     1 if ptr lies on the slow tier, 0 if in DRAM (or not ours).
 */
#ifndef CHELL_TIER_HEAP_H
#define CHELL_TIER_HEAP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

void *npmalloc(size_t size);
void npfree(void *ptr);
void *nprealloc(void *ptr, size_t size);
int chell_tierheap_where(const void *ptr);

#ifdef __cplusplus
}
#endif

#endif
