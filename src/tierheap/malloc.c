/* SPDX-License-Identifier: MIT */
/*
 * The malloc family of libchell-tier.so. Preloaded, these names come before
 * glibc's; each calls jemalloc's own entry point (taken by dlsym from
 * libjemalloc.so.2 at load, heap.c), whose fast paths (thread cache, no
 * flags to decode) are the ones plain jemalloc users get. Until then (a
 * call from another library's constructor) the portable mallocx/dallocx
 * calls serve. Where glibc and jemalloc differ, glibc's behaviour is kept,
 * since glibc is what programs were written against:
 *   - memalign/aligned_alloc with an alignment that is not a power of two:
 *     glibc 2.36 rounds it up, jemalloc fails;
 *   - realloc(p, 0) frees p and returns NULL;
 *   - pvalloc, which jemalloc does not have;
 *   - every block 16-byte aligned (glibc's MALLOC_ALIGNMENT, alignof
 *     max_align_t): jemalloc's 8-byte size class is only 8-aligned, so
 *     requests under 16 bytes ask for 16.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <malloc.h>
#include <string.h>
#include <dlfcn.h>

#include <jemalloc/jemalloc.h>

#include "heap.h"

#define EXPORT __attribute__((visibility("default")))
#define PAGE ((size_t)4096)
#define MIN_BLOCK ((size_t)16)

static void *fb_malloc(size_t n) { return mallocx(n ? n : 1, 0); } /* n >= 16 from malloc() */
static void fb_free(void *p) { if (p) dallocx(p, 0); }
static void *fb_calloc(size_t n, size_t m)
{
	size_t t;
	if (__builtin_mul_overflow(n, m, &t)) {
		errno = ENOMEM;
		return NULL;
	}
	return mallocx(t ? t : 1, MALLOCX_ZERO);
}
static void *fb_realloc(void *p, size_t n)
{
	if (!p)
		return fb_malloc(n);
	return rallocx(p, n ? n : 1, 0);
}
static size_t fb_usable(void *p) { return p ? sallocx(p, 0) : 0; }

static struct {
	void *(*malloc)(size_t);
	void (*free)(void *);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	size_t (*usable)(void *);
} J = {fb_malloc, fb_free, fb_calloc, fb_realloc, fb_usable};

void th_bind_entry_points(void *h)
{
	void *m = dlsym(h, "malloc"), *f = dlsym(h, "free"), *c = dlsym(h, "calloc"),
	     *r = dlsym(h, "realloc"), *u = dlsym(h, "malloc_usable_size");
	/* All or none, and never ourselves. */
	if (!m || !f || !c || !r || !u || m == (void *)malloc)
		return;
	J.malloc = (void *(*)(size_t))m;
	J.calloc = (void *(*)(size_t, size_t))c;
	J.realloc = (void *(*)(void *, size_t))r;
	J.usable = (size_t(*)(void *))u;
	J.free = (void (*)(void *))f;
}

EXPORT void *malloc(size_t n)
{
	return J.malloc(n < MIN_BLOCK ? MIN_BLOCK : n);
}

EXPORT void free(void *p)
{
	J.free(p);
}

EXPORT void *calloc(size_t n, size_t m)
{
	/* n * m < 16 only when both are small: no overflow in the product. */
	if (n < MIN_BLOCK && m < MIN_BLOCK && n * m < MIN_BLOCK)
		return J.calloc(1, MIN_BLOCK);
	return J.calloc(n, m);
}

EXPORT void *realloc(void *p, size_t n)
{
	if (p && n == 0) {
		J.free(p);
		return NULL;
	}
	return J.realloc(p, n < MIN_BLOCK ? MIN_BLOCK : n);
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

EXPORT size_t malloc_usable_size(void *p)
{
	return J.usable(p);
}

static void *aligned(size_t align, size_t n)
{
	void *p = mallocx(n ? n : 1, MALLOCX_ALIGN(align));
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
