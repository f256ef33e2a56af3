/* SPDX-License-Identifier: MIT */
/*
 * tierheap_conform: the malloc family's contract, as a transcript that must
 * be the same on glibc's malloc and under libchell-tier.so
 * (tests/system/test_tierheap.py). Prints facts, never addresses.
 *   tierheap_conform        the transcript
 *   tierheap_conform np     npmalloc/npfree/nprealloc (needs the tier heap):
 *                           blocks on the slow tier, contents kept
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: tierheap_conform: the malloc family's contract, as a transcript that must\n"
	"be the same on glibc's malloc and under libchell-tier.so\n"
	"(tests/system/test_tierheap.py). Prints facts, never addresses.\n"
	"  tierheap_conform        the transcript\n"
	"  tierheap_conform np     npmalloc/npfree/nprealloc (needs the tier heap):\n"
	"                          blocks on the slow tier, contents kept\n"
	"(a test program of Chell's suite; details: tests/progs/tierheap_conform.c)\n";

#define SAY(...) printf(__VA_ARGS__)

/* Not a constant, so the compiler does not refuse the overflow we test. */
static volatile size_t huge = SIZE_MAX / 2;

static int aligned_to(const void *p, size_t a)
{
	return ((uintptr_t)p & (a - 1)) == 0;
}

static int filled(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static int np_mode(void)
{
	void *(*npm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "npmalloc");
	void (*npf)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "npfree");
	void *(*npr)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "nprealloc");
	int (*where)(const void *) = (int (*)(const void *))dlsym(RTLD_DEFAULT, "chell_tierheap_where");
	if (!npm || !npf || !npr || !where) {
		SAY("npmalloc: not loaded\n");
		return 1;
	}
	int ok = 1;
	size_t sizes[] = {0, 1, 100, 4096, 100000, 3 << 20};
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		unsigned char *p = npm(sizes[i]);
		ok &= p != NULL && where(p) == 1 && aligned_to(p, 16);
		memset(p, 0x5a, sizes[i]);
		p = npr(p, sizes[i] * 2 + 10);
		ok &= p != NULL && where(p) == 1 && filled(p, sizes[i], 0x5a);
		npf(p);
	}
	void *m = malloc(64);
	SAY("npmalloc: %s; malloc block in DRAM under revert: %s\n", ok ? "ok" : "BAD",
	    where(m) == 0 ? "yes" : "no");
	free(m);
	npf(NULL);
	SAY("nprealloc(p, 0): %s\n", npr(npm(10), 0) == NULL ? "NULL" : "not NULL");
	return !ok;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 1 && strcmp(argv[1], "np") == 0)
		return np_mode();

	/* malloc: alignment of every size up to 4 KiB, usable size covers it. */
	int ok = 1;
	void *keep[4097];
	for (size_t n = 1; n <= 4096; n++) {
		keep[n] = malloc(n);
		ok &= keep[n] && aligned_to(keep[n], 16) && malloc_usable_size(keep[n]) >= n;
		memset(keep[n], (int)(n & 0xff), n);
	}
	for (size_t n = 1; n <= 4096; n++) {
		ok &= filled(keep[n], n, (unsigned char)(n & 0xff));
		free(keep[n]);
	}
	SAY("malloc 1..4096: aligned 16, usable >= n, contents kept: %s\n", ok ? "yes" : "NO");

	/* malloc(0): a unique, freeable pointer. */
	void *z1 = malloc(0), *z2 = malloc(0);
	SAY("malloc(0): %s, %s\n", z1 && z2 ? "non-NULL" : "NULL", z1 != z2 ? "unique" : "same");
	free(z1);
	free(z2);
	free(NULL);
	SAY("free(NULL): ok\n");

	/* calloc: zeroed, overflow refused. */
	unsigned char *c = malloc(1 << 20);
	memset(c, 0xff, 1 << 20);
	free(c);
	c = calloc(1 << 10, 1 << 10);
	SAY("calloc 1M: zeroed %s\n", c && filled(c, 1 << 20, 0) ? "yes" : "NO");
	free(c);
	errno = 0;
	void *co = calloc(huge, 3);
	SAY("calloc overflow: %s errno %s\n", co ? "non-NULL" : "NULL",
	    errno == ENOMEM ? "ENOMEM" : "other");

	/* realloc: contents kept while growing and shrinking across size classes. */
	unsigned char *r = NULL;
	size_t prev = 0;
	ok = 1;
	size_t steps[] = {1, 17, 200, 4000, 70000, 1 << 20, 5 << 20, 3000, 8};
	for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
		size_t n = steps[i];
		r = realloc(r, n);
		size_t keepn = prev < n ? prev : n;
		ok &= r != NULL && filled(r, keepn, 0xa5);
		memset(r, 0xa5, n);
		prev = n;
	}
	SAY("realloc grow/shrink: contents kept %s\n", ok ? "yes" : "NO");
	void *r0 = realloc(r, 0);
	SAY("realloc(p, 0): %s\n", r0 ? "non-NULL" : "NULL");
	free(r0);
	void *rn = realloc(NULL, 10);
	SAY("realloc(NULL, 10): %s\n", rn ? "non-NULL" : "NULL");
	free(rn);
	errno = 0;
	void *ra = reallocarray(NULL, huge, 3);
	SAY("reallocarray overflow: %s errno %s\n", ra ? "non-NULL" : "NULL",
	    errno == ENOMEM ? "ENOMEM" : "other");

	/* posix_memalign: alignments, and the EINVAL cases. */
	ok = 1;
	for (size_t a = sizeof(void *); a <= (1 << 21); a <<= 1) {
		void *p = NULL;
		int e = posix_memalign(&p, a, 100);
		ok &= e == 0 && aligned_to(p, a) && malloc_usable_size(p) >= 100;
		free(p);
	}
	SAY("posix_memalign 8..2M: %s\n", ok ? "aligned" : "NO");
	/* glibc aligns every block to 16, whatever the alignment asked for. */
	ok = 1;
	void *small[64];
	for (int i = 0; i < 64; i++) {
		ok &= posix_memalign(&small[i], sizeof(void *), (size_t)(i % 8) + 1) == 0 &&
		      aligned_to(small[i], 16);
	}
	for (int i = 0; i < 64; i++)
		free(small[i]);
	SAY("posix_memalign(a=8, 1..8): aligned 16 %s\n", ok ? "yes" : "NO");
	void *pe = (void *)1;
	SAY("posix_memalign(a=24): %s\n", posix_memalign(&pe, 24, 10) == EINVAL ? "EINVAL" : "other");
	SAY("posix_memalign(a=4): %s, out untouched %s\n",
	    posix_memalign(&pe, 4, 10) == EINVAL ? "EINVAL" : "other", pe == (void *)1 ? "yes" : "no");
	void *p0 = NULL;
	SAY("posix_memalign(size 0): %d %s\n", posix_memalign(&p0, 64, 0), p0 ? "non-NULL" : "NULL");
	free(p0);

	/* aligned_alloc / memalign (glibc 2.36 rounds a bad alignment up). */
	void *aa = aligned_alloc(64, 640);
	SAY("aligned_alloc(64): aligned %s\n", aa && aligned_to(aa, 64) ? "yes" : "no");
	free(aa);
	void *m = memalign(4096, 10);
	SAY("memalign(4096): aligned %s\n", m && aligned_to(m, 4096) ? "yes" : "no");
	free(m);
	m = memalign(48, 10);
	SAY("memalign(48): %s, aligned to 64 %s\n", m ? "non-NULL" : "NULL",
	    m && aligned_to(m, 64) ? "yes" : "no");
	free(m);
	m = aligned_alloc(100, 10);
	SAY("aligned_alloc(100): %s, aligned to 128 %s\n", m ? "non-NULL" : "NULL",
	    m && aligned_to(m, 128) ? "yes" : "no");
	free(m);

	/* valloc / pvalloc. */
	long pg = sysconf(_SC_PAGESIZE);
	void *v = valloc(10);
	SAY("valloc: page aligned %s\n", v && aligned_to(v, (size_t)pg) ? "yes" : "no");
	free(v);
	void *pv = pvalloc(10);
	SAY("pvalloc(10): page aligned %s, usable >= page %s\n",
	    pv && aligned_to(pv, (size_t)pg) ? "yes" : "no",
	    pv && malloc_usable_size(pv) >= (size_t)pg ? "yes" : "no");
	free(pv);
	SAY("malloc_usable_size(NULL): %zu\n", malloc_usable_size(NULL));

	/* A large block: every page writable and kept. */
	size_t big = 64 << 20;
	unsigned char *b = malloc(big);
	for (size_t i = 0; i < big; i += 4096)
		b[i] = (unsigned char)(i >> 12);
	ok = 1;
	for (size_t i = 0; i < big; i += 4096)
		ok &= b[i] == (unsigned char)(i >> 12);
	free(b);
	SAY("malloc 64M: every page kept %s\n", ok ? "yes" : "NO");
	return 0;
}
