/* SPDX-License-Identifier: MIT */
/*
 * Copies that survive a vanished page, and cache-line flushing.
 *
 * Another process may truncate a file while we copy from its mapping; the
 * kernel then raises SIGBUS on the missing page. The kernel's own read()
 * would just return fewer bytes, so must we. The copy is a single
 * `rep movsb` at a known address: if a SIGBUS or SIGSEGV is raised by that
 * instruction, the fault hook moves the program counter past it and records
 * the fault; RCX still holds the bytes left, so we know exactly how much was
 * copied. No setjmp on the fast path, and no cost unless a fault happens.
 * Faults anywhere else go to the application's own handlers.
 */
#include <cpuid.h>
#include <signal.h>
#include <ucontext.h>

#include "direct.h"

size_t direct_nt_threshold = 256 * 1024;

extern const char direct_copy_insn[], direct_copy_after[];
extern const char direct_copy_nt_loop[], direct_copy_nt_after[];
static __thread int tls_fault;

__attribute__((noinline)) size_t direct_copy(void *dst, const void *src, size_t n, int *fault)
{
	size_t left = n;
	tls_fault = 0;
	__asm__ volatile(".globl direct_copy_insn\n\t.hidden direct_copy_insn\n"
			 "direct_copy_insn:\n\t"
			 "rep movsb\n"
			 ".globl direct_copy_after\n\t.hidden direct_copy_after\n"
			 "direct_copy_after:\n\t"
			 : "+D"(dst), "+S"(src), "+c"(left)
			 :
			 : "memory");
	*fault = tls_fault;
	return n - left;
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

/* Called by the signal layer for every synchronous SIGBUS/SIGSEGV. */
static bool fault_fixup(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	greg_t ip = uc->uc_mcontext.gregs[REG_RIP];
	greg_t resume;
	if (ip == (greg_t)direct_copy_insn)
		resume = (greg_t)direct_copy_after;
	else if (ip >= (greg_t)direct_copy_nt_loop && ip < (greg_t)direct_copy_nt_after)
		resume = (greg_t)direct_copy_nt_after;
	else
		return false; /* not ours */
	uc->uc_mcontext.gregs[REG_RIP] = resume;
	tls_fault = sig;
	return true;
}

/* ------------------------------------------------------------- flushing */

enum { FLUSH_CLFLUSH, FLUSH_CLFLUSHOPT, FLUSH_CLWB };
static int flush_kind = FLUSH_CLFLUSH;

void direct_flush(const void *addr, size_t len)
{
	uintptr_t p = (uintptr_t)addr & ~(uintptr_t)63, end = (uintptr_t)addr + len;
	switch (flush_kind) {
	case FLUSH_CLWB:
		for (; p < end; p += 64)
			__asm__ volatile("clwb (%0)" ::"r"(p) : "memory");
		break;
	case FLUSH_CLFLUSHOPT:
		for (; p < end; p += 64)
			__asm__ volatile("clflushopt (%0)" ::"r"(p) : "memory");
		break;
	default:
		for (; p < end; p += 64)
			__asm__ volatile("clflush (%0)" ::"r"(p) : "memory");
	}
	direct_fence();
}

void direct_fence(void)
{
	__asm__ volatile("sfence" ::: "memory");
}

int direct_copy_init(void)
{
	unsigned a, b, c, d;
	if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
		if (b & (1u << 24))
			flush_kind = FLUSH_CLWB;
		else if (b & (1u << 23))
			flush_kind = FLUSH_CLFLUSHOPT;
	}
	chell_set_fault_hook(fault_fixup);
	return 0;
}
