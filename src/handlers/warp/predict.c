/* SPDX-License-Identifier: MIT */
/*
 * Successor prediction across files (warp.md §IV-C, after Noah): each file
 * keeps WARP_XFILE_SLOTS tuples {context, next file, its first node}. The
 * context hashes the process's working directory and program, so two
 * programs working on the same file (a compiler and a linker) each keep
 * their own successor. Within a context the last successor wins (Noah's
 * "last successor"); a new context takes an empty slot, else evicts the
 * slot confirmed least recently.
 *
 * Within a file, warp_succ_record (brain.h, inline) keeps the last node
 * accessed after each node; accuracy is defined beside it.
 */
#include "brain.h"

#include <pthread.h>
#include <string.h>

#include "chell/sys.h"

/* FNV-1a, 64 bits. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t ctx_hash;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_compute(void)
{
	char buf[4096];
	uint64_t h = 0xcbf29ce484222325ULL;
	long n = sys_getcwd(buf, sizeof buf);
	if (n > 0)
		h = fnv(h, buf, strnlen(buf, sizeof buf));
	h = fnv(h, "\0", 1); /* cwd "/a" + exe "b/c" != cwd "/ab" + exe "/c" */
	ssize_t m = sys_readlink("/proc/self/exe", buf, sizeof buf);
	if (m > 0)
		h = fnv(h, buf, (size_t)m);
	ctx_hash = h ? h : 1; /* 0 marks an empty slot */
}

/* Once per process image: a new image (exec) starts with a fresh once. A
 * forked child that changes directory keeps its parent's context, which is
 * the program's identity as it was launched. */
uint64_t warp_context_hash(void)
{
	pthread_once(&ctx_once, ctx_compute);
	return ctx_hash;
}

void warp_xfile_record(struct warp_xfile slots[WARP_XFILE_SLOTS], uint64_t ctx,
		       struct warp_file_id next, uint32_t hint_node)
{
	if (ctx == 0)
		return;
	int pick = -1;
	for (int i = 0; i < WARP_XFILE_SLOTS; i++)
		if (slots[i].ctx == ctx) {
			pick = i;
			break;
		}
	if (pick < 0) {
		for (int i = 0; i < WARP_XFILE_SLOTS; i++)
			if (slots[i].ctx == 0) {
				pick = i;
				break;
			}
	}
	if (pick < 0) {
		pick = 0;
		for (int i = 1; i < WARP_XFILE_SLOTS; i++)
			if (slots[i].age > slots[pick].age)
				pick = i;
	}
	/* Every other tuple gets older; this one is the most recent. */
	for (int i = 0; i < WARP_XFILE_SLOTS; i++)
		if (i != pick && slots[i].ctx && slots[i].age < UINT32_MAX)
			slots[i].age++;
	if (!(slots[pick].ctx == ctx && warp_file_id_eq(slots[pick].next, next) && slots[pick].hint_node == hint_node)) {
		slots[pick].ctx = ctx;
		slots[pick].next = next;
		slots[pick].hint_node = hint_node;
	}
	slots[pick].age = 0;
}

const struct warp_xfile *warp_xfile_predict(const struct warp_xfile slots[WARP_XFILE_SLOTS], uint64_t ctx)
{
	if (ctx == 0)
		return NULL;
	for (int i = 0; i < WARP_XFILE_SLOTS; i++)
		if (slots[i].ctx == ctx)
			return &slots[i];
	return NULL;
}
