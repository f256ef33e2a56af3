/* SPDX-License-Identifier: MIT */
/*
 * Persistence primitives: the cheapest cache write-back instruction the CPU
 * has, sfence as the drain, and a non-temporal bulk copy. Everything the
 * library persists goes through a struct chell_persist_ops, so the
 * power-failure simulator can substitute its own and see every flush and
 * fence; this file provides the default set. Why not libpmem2: see
 * docs/PERSISTENCE.md ("Why our own persist.c").
 */
#include "pmem_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

/* Every x86-64 CPU so far has 64-byte lines; a smaller stride would only
 * cost time, a larger one would skip lines, so we do not guess upward. */
#define LINE 64u
/* Below this a plain copy plus flush is cheaper than streaming stores,
 * except for whole aligned lines (below). */
#define NT_THRESHOLD 256u

typedef void (*flush_fn)(void *ctx, const void *addr, size_t len);

struct kind {
	const char *name;
	flush_fn flush;
};

#if defined(__x86_64__)
#define LINES(addr, len, insn)                                                     \
	do {                                                                       \
		uintptr_t p_ = (uintptr_t)(addr) & ~(uintptr_t)(LINE - 1);         \
		uintptr_t e_ = (uintptr_t)(addr) + (len);                          \
		for (; p_ < e_; p_ += LINE)                                        \
			__asm__ volatile(insn " %0" : "+m"(*(volatile char *)p_)); \
	} while (0)

static void flush_clwb(void *ctx, const void *addr, size_t len)
{
	LINES(addr, len, "clwb");
}

static void flush_clflushopt(void *ctx, const void *addr, size_t len)
{
	LINES(addr, len, "clflushopt");
}

static void flush_clflush(void *ctx, const void *addr, size_t len)
{
	LINES(addr, len, "clflush");
}

/* sfence orders the weakly-ordered clwb/clflushopt and non-temporal stores
 * before every later store: the drain the ops contract asks for. */
static void drain_sfence(void *ctx)
{
	_mm_sfence();
}
#else
static void drain_sfence(void *ctx)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif

/* eADR-style platforms (and the "none" override): caches are inside the
 * persistence domain, only ordering is needed. */
static void flush_none(void *ctx, const void *addr, size_t len)
{
}

static const struct kind kinds[] = {
#if defined(__x86_64__)
	{"clwb", flush_clwb},
	{"clflushopt", flush_clflushopt},
	{"clflush", flush_clflush},
#endif
	{"none", flush_none},
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* Copy with streaming stores for the 64-byte-aligned body of the
 * destination; the unaligned head and tail are copied normally and
 * flushed. Nothing is drained: the caller's drain (sfence) also orders the
 * streaming stores. */
static void *memcpy_nt(void *ctx, void *dst, const void *src, size_t n)
{
	const struct kind *k = ctx;
	uint8_t *d = dst;
	const uint8_t *s = src;

#if defined(__x86_64__)
	/* Whole aligned lines always stream: the journal's records are such
	 * lines, written once and read back only by recovery, and a streaming
	 * store persists with the next fence for less than a store + clwb
	 * (measured: 150-210 ns against 260-470 ns per fenced line on this
	 * KVM guest), and does not leave the line in the cache. */
	if (n >= NT_THRESHOLD || (n >= LINE && !(n & (LINE - 1)) && !((uintptr_t)d & (LINE - 1)))) {
		size_t head = (LINE - ((uintptr_t)d & (LINE - 1))) & (LINE - 1);
		if (head) {
			memcpy(d, s, head);
			k->flush(NULL, d, head);
			d += head;
			s += head;
			n -= head;
		}
		for (; n >= LINE; d += LINE, s += LINE, n -= LINE) {
			__m128i a = _mm_loadu_si128((const __m128i *)s);
			__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
			__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
			__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
			_mm_stream_si128((__m128i *)d, a);
			_mm_stream_si128((__m128i *)(d + 16), b);
			_mm_stream_si128((__m128i *)(d + 32), c);
			_mm_stream_si128((__m128i *)(d + 48), e);
		}
	}
#endif
	if (n) {
		memcpy(d, s, n);
		k->flush(NULL, d, n);
	}
	return dst;
}

static struct chell_persist_ops default_ops;
static const struct kind *default_kind;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static int cpu_has(const char *name)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;

	if (!strcmp(name, "clwb") || !strcmp(name, "clflushopt")) {
		if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
			return 0;
		return !!(b & (1u << (name[2] == 'w' ? 24 : 23)));
	}
	if (!strcmp(name, "clflush")) {
		if (!__get_cpuid(1, &a, &b, &c, &d))
			return 0;
		return !!(d & (1u << 19));
	}
#endif
	return !strcmp(name, "none");
}

static void default_init(void)
{
	/* CHELL_PMEM_FLUSH forces a kind (tests; "none" for eADR machines); an
	 * unknown name or an instruction this CPU lacks falls back to the
	 * best available rather than dying of SIGILL later. */
	const char *want = getenv("CHELL_PMEM_FLUSH");
	const struct kind *k = NULL;

	for (size_t i = 0; want && i < NKINDS; i++)
		if (!strcmp(want, kinds[i].name) && cpu_has(kinds[i].name))
			k = &kinds[i];
	for (size_t i = 0; !k && i < NKINDS; i++)
		if (cpu_has(kinds[i].name))
			k = &kinds[i];
	default_kind = k;
	default_ops.flush = k->flush;
	default_ops.drain = drain_sfence;
	default_ops.memcpy_nodrain = memcpy_nt;
	default_ops.ctx = (void *)k;
}

const struct chell_persist_ops *chell_persist_default(void)
{
	pthread_once(&default_once, default_init);
	return &default_ops;
}

const char *chell_persist_kind(void)
{
	pthread_once(&default_once, default_init);
	return default_kind->name;
}

void pm_nop_flush(void *ctx, const void *addr, size_t len)
{
}

void *pm_plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	return memcpy(dst, src, n);
}

int chell_pmem_fd_is_dax(int fd)
{
	long pg = sysconf(_SC_PAGESIZE);
	/* MAP_SHARED_VALIDATE makes the kernel refuse MAP_SYNC (EOPNOTSUPP)
	 * where the mapping is not DAX, instead of silently ignoring it.
	 * PROT_READ suffices for the question and works on read-only fds. */
	void *p = mmap(NULL, (size_t)pg, PROT_READ, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);

	if (p != MAP_FAILED) {
		munmap(p, (size_t)pg);
		return 1;
	}
	if (errno == EOPNOTSUPP || errno == EINVAL)
		return 0;
	return -errno;
}
