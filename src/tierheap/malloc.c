/* SPDX-License-Identifier: MIT */
/*
 * The malloc family of libchell-tier.so, where it is not jemalloc's own.
 * jemalloc (Debian's libjemalloc_pic.a) is linked into this library, so
 * `free`, `malloc_usable_size`, `mallocx`... are exported straight from
 * jemalloc: the hottest call, free, costs nothing more than under plain
 * jemalloc. The entry points below wrap jemalloc's (renamed chell_je_* in a
 * copy of the archive, src/tierheap/jemalloc.syms) where glibc 2.36 and
 * jemalloc differ; glibc's behaviour is kept, since glibc is what programs
 * were written against:
 *   - memalign/aligned_alloc with an alignment that is not a power of two:
 *     glibc 2.36 rounds it up, jemalloc fails;
 *   - realloc(p, 0) frees p and returns NULL;
 *   - pvalloc and reallocarray, which jemalloc does not have;
 *   - every block 16-byte aligned (glibc's MALLOC_ALIGNMENT, alignof
 *     max_align_t): jemalloc's 8-byte size class is only 8-aligned, so
 *     requests under 16 bytes ask for 16.
 * A wrapper is a compare and a direct jump: the policy is not consulted
 * here (placement is per extent, heap.c).
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <malloc.h>
#include <string.h>

#include <jemalloc/jemalloc.h>


#define EXPORT __attribute__((visibility("default")))
#define PAGE ((size_t)4096)
#define MIN_BLOCK ((size_t)16)

/* jemalloc's entry points under their renamed names (jemalloc.syms).
 * Declared hidden: the most constraining visibility wins at link time, so
 * they are not exported and the wrappers reach them without the PLT. */
#define HIDDEN __attribute__((visibility("hidden")))
HIDDEN void *chell_je_malloc(size_t n);
HIDDEN void *chell_je_calloc(size_t n, size_t m);
HIDDEN void *chell_je_realloc(void *p, size_t n);

EXPORT void *malloc(size_t n)
{
	return chell_je_malloc(n < MIN_BLOCK ? MIN_BLOCK : n);
}

EXPORT void *calloc(size_t n, size_t m)
{
	/* n * m < 16 only when both are small: no overflow in the product. */
	if (n < MIN_BLOCK && m < MIN_BLOCK && n * m < MIN_BLOCK)
		return chell_je_calloc(1, MIN_BLOCK);
	return chell_je_calloc(n, m);
}

EXPORT void *realloc(void *p, size_t n)
{
	if (p && n == 0) {
		free(p);
		return NULL;
	}
	return chell_je_realloc(p, n < MIN_BLOCK ? MIN_BLOCK : n);
}

EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
	size_t t;
	if (__builtin_mul_overflow(n, m, &t)) {
		errno = ENOMEM;
		return NULL;
	}
	return realloc(p, t);
}

static void *aligned(size_t align, size_t n)
{
	void *p = mallocx(n < MIN_BLOCK ? MIN_BLOCK : n, MALLOCX_ALIGN(align));
	if (!p)
		errno = ENOMEM;
	return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)))
		return EINVAL;
	int saved = errno;
	void *p = aligned(align, n);
	errno = saved;
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* glibc's _mid_memalign: small alignments are malloc's; others rounded up
 * to a power of two; absurd ones fail with EINVAL. */
EXPORT void *memalign(size_t align, size_t n)
{
	if (align <= 16)
		return malloc(n);
	if (align > SIZE_MAX / 2 + 1) {
		errno = EINVAL;
		return NULL;
	}
	if (align & (align - 1)) {
		size_t a = 32;
		while (a < align)
			a <<= 1;
		align = a;
	}
	return aligned(align, n);
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
	return memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
	return aligned(PAGE, n);
}

EXPORT void *pvalloc(size_t n)
{
	if (n > SIZE_MAX - PAGE) {
		errno = ENOMEM;
		return NULL;
	}
	size_t r = (n + PAGE - 1) & ~(PAGE - 1);
	return aligned(PAGE, r ? r : PAGE);
}
