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
#include "direct.h"

size_t direct_nt_threshold = 256 * 1024;

extern const char direct_copy_nt_loop[], direct_copy_nt_after[];
static __thread int tls_fault;
static __thread volatile int tls_in_copy;
static __thread void *tls_jmp[5];

__attribute__((noinline)) size_t direct_copy(void *dst, const void *src, size_t n, int *fault)
{
	tls_fault = 0;
	if (__builtin_setjmp(tls_jmp)) {
		/* back from a fault inside memcpy: nothing is known to be copied */
		tls_in_copy = 0;
		*fault = tls_fault;
		return 0;
	}
	tls_in_copy = 1;
	__asm__ volatile("" ::: "memory"); /* the flag is set before the copy starts */
	direct_guarded_memcpy(dst, src, n);
	__asm__ volatile("" ::: "memory");
	tls_in_copy = 0;
	*fault = 0;
	return n;
}

/* Non-temporal copy: 8-byte movnti stores, then the tail with movsb. The
 * loop is one block of instructions; a fault inside it resumes after it
 * with RCX = bytes left (kept up to date by the loop). */
__attribute__((noinline)) size_t direct_copy_nt(void *dst, const void *src, size_t n, int *fault)
{
	size_t left = n;
	tls_fault = 0;
	__asm__ volatile(".globl direct_copy_nt_loop\n\t.hidden direct_copy_nt_loop\n"
			 "direct_copy_nt_loop:\n\t"
			 "cmp $8, %%rcx\n\t"
			 "jb 2f\n\t"
			 "mov (%%rsi), %%rax\n\t"
			 "movnti %%rax, (%%rdi)\n\t"
			 "add $8, %%rsi\n\t"
			 "add $8, %%rdi\n\t"
			 "sub $8, %%rcx\n\t"
			 "jmp direct_copy_nt_loop\n"
			 "2:\n\t"
			 "rep movsb\n\t"
			 "sfence\n"
			 ".globl direct_copy_nt_after\n\t.hidden direct_copy_nt_after\n"
			 "direct_copy_nt_after:\n\t"
			 : "+D"(dst), "+S"(src), "+c"(left)
			 :
			 : "rax", "memory", "cc");
	*fault = tls_fault;
	return n - left;
}

/* Called by the signal layer for every synchronous SIGBUS/SIGSEGV (in cache
 * mode through the cache's own hook, for mapped.c's guarded reads). */
bool direct_fault_fixup(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	greg_t ip = uc->uc_mcontext.gregs[REG_RIP];
	if (ip >= (greg_t)direct_copy_nt_loop && ip < (greg_t)direct_copy_nt_after) {
		/* the non-temporal loop: resume after it, RCX = bytes left */
		uc->uc_mcontext.gregs[REG_RIP] = (greg_t)direct_copy_nt_after;
		tls_fault = sig;
		return true;
	}
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
 * the same for direct, cache and every pmem user. */
static const struct chell_persist_ops *persist;

void direct_flush(const void *addr, size_t len)
{
	persist->flush(persist->ctx, addr, len);
	persist->drain(persist->ctx);
}

void direct_fence(void)
{
	persist->drain(persist->ctx);
}

int direct_copy_init(void)
{
	persist = chell_persist_default();
	chell_fault_hook_add(direct_fault_fixup);
	return 0;
}
