/* SPDX-License-Identifier: MIT */
/*
 * Copies that survive a vanished page, and cache-line flushing.
 *
 * Another process may truncate a file while we copy from its mapping; the
 * kernel then raises SIGBUS on the missing page. The kernel's own read()
 * would just return fewer bytes, so must we. Copies use glibc's memcpy (the
 * fastest for every size here; `rep movsb` measured 40-260 ns slower for
 * 64 B-4 KB on this class of machine) inside a guard: a thread-local flag
 * says "in a guarded copy" and a __builtin_setjmp buffer (a few stores, no
 * system call) says where to go back to. A SIGBUS/SIGSEGV raised while the
 * flag is set restores the interrupted signal mask and jumps back; the
 * caller then has the kernel redo the whole piece (reads and writes of the
 * same bytes are idempotent), so the answer is the kernel's. Faults anywhere
 * else go to the application's own handlers.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#include "chell/pmem.h"
#include "base.h"

static __thread int tls_fault;
static __thread volatile int tls_in_copy;
static __thread void *tls_jmp[5];

/* Run `copy` inside the guard: returns n, or 0 with *fault set when a
 * fault came back here. A macro, so that each copy function is its own
 * __builtin_setjmp frame and the hot one (mapped_copy) stays minimal. */
#define GUARDED(copy)                                                                 \
	do {                                                                          \
		tls_fault = 0;                                                        \
		if (__builtin_setjmp(tls_jmp)) {                                      \
			/* back from a fault inside the copy: nothing is known copied */ \
			tls_in_copy = 0;                                              \
			*fault = tls_fault;                                           \
			return 0;                                                     \
		}                                                                     \
		tls_in_copy = 1;                                                      \
		__asm__ volatile("" ::: "memory"); /* the flag is set before the copy */ \
		copy;                                                                 \
		__asm__ volatile("" ::: "memory");                                   \
		tls_in_copy = 0;                                                      \
		*fault = 0;                                                           \
	} while (0)

__attribute__((noinline)) size_t mapped_copy(void *dst, const void *src, size_t n, int *fault)
{
	GUARDED(mapped_guarded_memcpy(dst, src, n));
	return n;
}

/* The persistence core's non-temporal copy, then its drain: the stores
 * are ordered before the write returns, as a flushed copy's are. */
__attribute__((noinline)) size_t mapped_copy_nt(const struct chell_persist_ops *ops, void *dst,
						const void *src, size_t n, int *fault)
{
	GUARDED(ops->memcpy_nodrain(ops->ctx, dst, src, n));
	ops->drain(ops->ctx);
	return n;
}

/* In the signal layer's chain of fault hooks (chell_fault_hook_add): every
 * synchronous SIGBUS/SIGSEGV; true if it came from one of these copies. */
bool mapped_fault_fixup(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	if (!tls_in_copy)
		return false; /* not ours */
	tls_fault = sig;
	tls_in_copy = 0;
	/* leaving the handler by a jump: restore the mask it would have restored */
	pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
	__builtin_longjmp(tls_jmp, 1);
}

/* ------------------------------------------------------------- flushing */

/* The persistence core's primitives (include/chell/pmem.h): the flush
 * instruction chosen from CPUID once (clwb, clflushopt, clflush, or none
 * where the platform persists caches), overridable with CHELL_PMEM_FLUSH,
 * the same for direct, cache and every pmem user. Each mapping keeps the
 * pointer it was made with (direct_map, cache_file), so every flush of a
 * mapped handler goes through one set of operations that a test can
 * replace (the power-failure simulator, tests/unit/test_mapped_persist.c). */
const struct chell_persist_ops *mapped_persist(void)
{
	return chell_persist_default();
}

int mapped_copy_init(void)
{
	chell_persist_default(); /* chosen once, before any copy needs it */
	chell_fault_hook_add(mapped_fault_fixup);
	return 0;
}
