/* SPDX-License-Identifier: MIT */
/*
 * Persist operations for fuzz targets that open an image held in memory:
 * every flush and non-temporal copy the code under test asks for must lie
 * inside the image; anything else aborts with the target's name, so a
 * wild persist is a crash the fuzzer reports, not a silent write.
 */
#ifndef CHELL_FUZZ_BOUNDS_H
#define CHELL_FUZZ_BOUNDS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chell/pmem.h"

struct fuzz_bounds {
	const uint8_t *lo, *hi; /* the image: [lo, hi) */
	const char *target;     /* "fuzz_cache_pool", for the message */
};

static inline void fuzz_in_bounds(const struct fuzz_bounds *b, const void *addr, size_t len,
				  const char *what)
{
	const uint8_t *p = addr;
	if (len && (p < b->lo || p > b->hi || len > (size_t)(b->hi - p))) {
		fprintf(stderr, "%s: %s of %zu bytes at %p outside the image [%p, %p)\n", b->target,
			what, len, addr, (const void *)b->lo, (const void *)b->hi);
		abort();
	}
}

static inline void fuzz_op_flush(void *ctx, const void *addr, size_t len)
{
	fuzz_in_bounds(ctx, addr, len, "flush");
}

static inline void fuzz_op_drain(void *ctx)
{
	(void)ctx;
}

static inline void *fuzz_op_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	fuzz_in_bounds(ctx, dst, n, "non-temporal copy");
	return memcpy(dst, src, n);
}

/* The operations over b (which must outlive them). */
static inline struct chell_persist_ops fuzz_bounded_ops(struct fuzz_bounds *b)
{
	return (struct chell_persist_ops){fuzz_op_flush, fuzz_op_drain, fuzz_op_memcpy, b};
}

#endif
