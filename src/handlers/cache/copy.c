/* SPDX-License-Identifier: MIT */
/*
 * The hit protocol of cache/layout.h on one chunk, inside a fault guard.
 *
 * A chunk file can be truncated by the manager at any moment (eviction):
 * then every access to its mapping, control page included, raises SIGBUS.
 * As in the base's copies (mapped/copy.c), a thread-local flag and a jump buffer turn such a
 * fault into a return: the whole attempt (state check, valid
 * bits, memcpy, re-check) runs inside one guard, so a fault anywhere in it
 * is simply a miss, and the miss path asks the manager again. A fault on
 * the application's buffer is told apart by its address (outside the
 * chunk mapping) and becomes EFAULT, as the kernel would answer.
 *
 * Identity: the control page's (slot, incarnation) names one chunk file
 * for the life of the pool. A copy reads it before and after; if the
 * process replaced the mapping in between (map.c maps a new chunk file of
 * the same (file, chunk) at the same address), the two differ and the copy
 * is discarded.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#include "cache.h"
#include "chell/tier.h"

const struct chell_persist_ops *cache_persist;
static __thread volatile int tls_in;
static __thread sigjmp_buf tls_jmp;
static __thread uintptr_t tls_addr;
/* The jump buffer is a real sigsetjmp(buf, 0) (no system call: the mask
 * is not saved; the handler restores it itself). __builtin_setjmp was
 * tried first and is not safe here: GCC may place its receiver anywhere it
 * likes (seen at -O2: at the function's entry, re-running the prologue
 * after the jump) and keep values in registers across it. Even so, what
 * the code after a fault needs lives in thread-locals and is read by the
 * noinline verdict functions below, not by the guarded function. */
static __thread const unsigned char *tls_base;
static __thread unsigned tls_first, tls_nb;
static __thread uint64_t tls_ext_prev, tls_ext_new; /* ext_end before/after cache_copy_in raised it */

static bool fault_fixup(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	if (!tls_in) /* not a cache copy: a zero-copy buffer's chunk revoked
		      * (zerocopy.c), or not ours (the base's guard has its own hook) */
		return cache_lent_fault(sig, si->si_addr);
	tls_in = 0;
	tls_addr = (uintptr_t)si->si_addr;
	/* leaving the handler by a jump: restore the mask it would have restored */
	pthread_sigmask(SIG_SETMASK, &uc->uc_sigmask, NULL);
	siglongjmp(tls_jmp, 1);
}

static inline bool in_chunk(uintptr_t a, const unsigned char *base)
{
	return a >= (uintptr_t)base && a < (uintptr_t)base + CACHE_CHUNK_FILE_BYTES;
}

static inline const struct cache_ctl *ctl_of(const unsigned char *base)
{
	return (const struct cache_ctl *)(base + CACHE_CHUNK_BYTES);
}

static inline uint32_t state(const struct cache_ctl *ctl)
{
	return __atomic_load_n(&ctl->state, __ATOMIC_ACQUIRE);
}

/* Every block of [off, off+n) valid (acquire: the manager sets a bit with
 * release after the block's data). */
static inline bool valid(const struct cache_ctl *ctl, size_t off, size_t n)
{
	unsigned b = (unsigned)(off / CACHE_BLOCK_BYTES);
	unsigned e = (unsigned)((off + n - 1) / CACHE_BLOCK_BYTES);
	for (unsigned w = b / 64; w <= e / 64; w++) {
		unsigned lo = w == b / 64 ? b % 64 : 0, hi = w == e / 64 ? e % 64 : 63;
		uint64_t mask = (hi - lo == 63 ? ~0ull : ((1ull << (hi - lo + 1)) - 1)) << lo;
		if ((__atomic_load_n(&ctl->valid[w], __ATOMIC_ACQUIRE) & mask) != mask)
			return false;
	}
	return true;
}

/* After a fault in cache_copy_out: in the chunk (revoked) or the buffer. */
__attribute__((noinline)) static int verdict_out(void)
{
	return in_chunk(tls_addr, tls_base) ? COPY_MISS : COPY_EFAULT;
}

__attribute__((noinline)) int cache_copy_out(void *dst, const unsigned char *base, size_t off,
					     size_t n, uint32_t *slot)
{
	tls_base = base;
	if (sigsetjmp(tls_jmp, 0))
		return verdict_out();
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	const struct cache_ctl *ctl = ctl_of(base);
	int r = COPY_MISS;
	if (state(ctl) == CACHE_CHUNK_LIVE) {
		uint32_t s = __atomic_load_n(&ctl->slot, __ATOMIC_RELAXED);
		uint64_t inc = __atomic_load_n(&ctl->incarnation, __ATOMIC_RELAXED);
		if (valid(ctl, off, n)) {
			if (dst) { /* NULL: only the verdict (zero-copy lends the chunk) */
				mapped_prefetch_read(base + off, n);
				mapped_guarded_memcpy(dst, base + off, n);
			}
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (state(ctl) == CACHE_CHUNK_LIVE &&
			    __atomic_load_n(&ctl->slot, __ATOMIC_RELAXED) == s &&
			    __atomic_load_n(&ctl->incarnation, __ATOMIC_RELAXED) == inc) {
				*slot = s;
				r = COPY_HIT;
			}
		}
	}
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	if (r == COPY_HIT) /* out of the guard: the tier model's charge (docs/TIER.md) */
		chell_tier_read(n); /* zero-copy (dst NULL) lends the same bytes */
	return r;
}

/* The dirty table of the control page, and on DAX the lines it spans. */
static inline dirty_table *dirty_of(const struct cache_ctl *ctl)
{
	return (dirty_table *)(uintptr_t)ctl->dirty;
}

/* dirty_mark inside a guard of its own (the chunk may be gone too). */
__attribute__((noinline)) static void mark_guarded(const struct cache_ctl *ctl, unsigned first,
						   unsigned nb)
{
	if (sigsetjmp(tls_jmp, 0))
		return;
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	dirty_mark(dirty_of(ctl), 0, first, nb);
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
}

/* The application's buffer faulted in a store that had raised ext_end
 * (ext_raise): the mark goes back, unless another write raised it further
 * meanwhile. A mark left past the file's end would let a later write-back
 * of the block holding the end write all of it, growing the backing file
 * past the size (cache/layout.h: write-back stops at max(size, ext_end)). */
__attribute__((noinline)) static void ext_rollback(void)
{
	if (tls_ext_new && sigsetjmp(tls_jmp, 0) == 0) {
		tls_in = 1;
		__asm__ volatile("" ::: "memory");
		uint64_t cur = tls_ext_new;
		__atomic_compare_exchange_n(&((struct cache_ctl *)(uintptr_t)ctl_of(tls_base))->ext_end,
					    &cur, tls_ext_prev, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
		__asm__ volatile("" ::: "memory");
		tls_in = 0;
	}
}

/* A publication that failed (cache.c, "Extending writes"): chunk k's mark,
 * if it still holds `expect` (what this write raised it to), goes back to
 * `to` (where the published file ends). Guarded: a revoked chunk's control
 * page faults, and then there is nothing left to lower. */
void cache_ext_lower(const unsigned char *base, uint64_t expect, uint64_t to)
{
	if (sigsetjmp(tls_jmp, 0) == 0) {
		tls_in = 1;
		__asm__ volatile("" ::: "memory");
		uint64_t cur = expect;
		__atomic_compare_exchange_n(&((struct cache_ctl *)(uintptr_t)ctl_of(base))->ext_end, &cur, to, 0,
					    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
		__asm__ volatile("" ::: "memory");
	}
	tls_in = 0;
}

/* After a fault in cache_copy_in. */
__attribute__((noinline)) static int verdict_in(void)
{
	if (in_chunk(tls_addr, tls_base))
		return COPY_MISS; /* revoked and truncated: redo through the miss path */
	/* The application's buffer faulted part-way: bytes may have been
	 * stored already. Mark them dirty (writing back unchanged bytes is
	 * harmless) so no reader sees data that never reaches the backing
	 * file. */
	mark_guarded(ctl_of(tls_base), tls_first, tls_nb);
	/* and the extension mark goes back: these bytes are not the write's */
	ext_rollback();
	return COPY_EFAULT;
}

/* After a fault in cache_copy_overwrite: nothing to mark (the blocks stay
 * invalid), but the extension mark it raised goes back as in verdict_in. */
__attribute__((noinline)) static int verdict_overwrite(void)
{
	if (in_chunk(tls_addr, tls_base))
		return COPY_MISS;
	ext_rollback();
	return COPY_EFAULT;
}

/* Raise the chunk's ext_end to at least v (layout.h: before the store). */
static inline void ext_raise(const struct cache_ctl *ctl, uint64_t v)
{
	uint64_t *p = &((struct cache_ctl *)(uintptr_t)ctl)->ext_end;
	uint64_t cur = __atomic_load_n(p, __ATOMIC_ACQUIRE);
	while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 1, __ATOMIC_SEQ_CST,
							__ATOMIC_ACQUIRE))
		;
	if (cur < v) { /* raised by us from cur: verdict_in may put cur back */
		tls_ext_prev = cur;
		tls_ext_new = v;
	}
}

__attribute__((noinline)) int cache_copy_in(unsigned char *base, size_t off, const void *src,
					    size_t n, uint32_t *slot, uint64_t ext_end)
{
	unsigned first = (unsigned)(off / CACHE_BLOCK_BYTES);
	unsigned nb = (unsigned)((off + n - 1) / CACHE_BLOCK_BYTES) - first + 1;
	const struct cache_ctl *ctl = ctl_of(base);
	tls_base = base;
	tls_first = first;
	tls_nb = nb;
	tls_ext_new = 0;
	if (sigsetjmp(tls_jmp, 0))
		return verdict_in();
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	int r = COPY_MISS;
	if (state(ctl) == CACHE_CHUNK_LIVE) {
		uint32_t s = __atomic_load_n(&ctl->slot, __ATOMIC_RELAXED);
		uint64_t inc = __atomic_load_n(&ctl->incarnation, __ATOMIC_RELAXED);
		if (valid(ctl, off, n)) {
			if (ext_end)
				ext_raise(ctl, ext_end);
			mapped_guarded_memcpy(base + off, src, n);
			if (cache_dax)
				mapped_flush(cache_persist, base + off, n);
			/* after the data (policy.h: a mark that precedes a
			 * check-out guarantees the cleaner sees the data) */
			dirty_mark(dirty_of(ctl), 0, first, nb);
			if (cache_dax)
				mapped_flush(cache_persist, ctl->dirty, dirty_table_bytes(1));
			/* The layout's "seq_cst fence, then still LIVE": dirty_mark's
			 * RMWs are seq_cst (a locked instruction, a full barrier on
			 * x86-64), and so is this load, so no separate fence. */
			if (__atomic_load_n(&ctl->state, __ATOMIC_SEQ_CST) == CACHE_CHUNK_LIVE &&
			    __atomic_load_n(&ctl->slot, __ATOMIC_RELAXED) == s &&
			    __atomic_load_n(&ctl->incarnation, __ATOMIC_RELAXED) == inc) {
				*slot = s;
				r = COPY_HIT;
			}
		}
	}
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	if (r == COPY_HIT)
		chell_tier_write(n);
	return r;
}

/* Every block of [off, off+n) invalid. */
static inline bool all_invalid(const struct cache_ctl *ctl, size_t off, size_t n)
{
	for (size_t b = off / CACHE_BLOCK_BYTES; b < (off + n) / CACHE_BLOCK_BYTES; b++)
		if (__atomic_load_n(&ctl->valid[b / 64], __ATOMIC_ACQUIRE) & (1ull << (b % 64)))
			return false;
	return true;
}

__attribute__((noinline)) int cache_copy_overwrite(unsigned char *base, size_t off,
						   const void *src, size_t n, uint32_t *slot,
						   uint64_t *incarnation, uint64_t ext_end)
{
	tls_base = base;
	tls_ext_new = 0;
	if (sigsetjmp(tls_jmp, 0))
		return verdict_overwrite();
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	const struct cache_ctl *ctl = ctl_of(base);
	int r = COPY_MISS;
	if (state(ctl) == CACHE_CHUNK_LIVE && all_invalid(ctl, off, n)) {
		*slot = __atomic_load_n(&ctl->slot, __ATOMIC_RELAXED);
		*incarnation = __atomic_load_n(&ctl->incarnation, __ATOMIC_RELAXED);
		if (ext_end) /* a fault gives it back (verdict_overwrite) */
			ext_raise(ctl, ext_end);
		mapped_guarded_memcpy(base + off, src, n);
		if (cache_dax)
			mapped_flush(cache_persist, base + off, n);
		r = COPY_HIT;
	}
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	if (r == COPY_HIT)
		chell_tier_write(n);
	return r;
}

__attribute__((noinline)) int cache_ctl_check(const unsigned char *base, uint64_t dev,
					      uint64_t ino, uint64_t chunk)
{
	if (sigsetjmp(tls_jmp, 0))
		return -EFAULT;
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	const struct cache_ctl *ctl = ctl_of(base);
	dirty_table *dt = dirty_table_open((void *)(uintptr_t)ctl->dirty);
	int r = ctl->magic == CACHE_CTL_MAGIC && ctl->version == CACHE_CTL_VERSION &&
			ctl->dev == dev && ctl->ino == ino && ctl->file_chunk == chunk && dt &&
			dirty_table_nchunks(dt) == 1
		? 0
		: -EPROTO;
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	return r;
}

__attribute__((noinline)) int cache_ctl_live(const unsigned char *base)
{
	if (sigsetjmp(tls_jmp, 0))
		return 0;
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	int r = state(ctl_of(base)) == CACHE_CHUNK_LIVE;
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	return r;
}

__attribute__((noinline)) static size_t readable_verdict(const unsigned char *p)
{
	uintptr_t a = tls_addr & ~(uintptr_t)4095;
	return a > (uintptr_t)p ? (size_t)(a - (uintptr_t)p) : 0;
}

/* Bytes of [p, p+n) readable before the first page that faults, touching
 * one byte per page in order (a memcpy may fault on a later page first). */
__attribute__((noinline)) size_t cache_user_readable(const void *p, size_t n)
{
	const unsigned char *u = p;
	if (sigsetjmp(tls_jmp, 0))
		return readable_verdict((const unsigned char *)tls_base);
	tls_base = u;
	tls_in = 1;
	__asm__ volatile("" ::: "memory");
	for (uintptr_t a = (uintptr_t)u; a < (uintptr_t)u + n; a = (a & ~(uintptr_t)4095) + 4096)
		(void)*(volatile const unsigned char *)a;
	__asm__ volatile("" ::: "memory");
	tls_in = 0;
	return n;
}

int cache_copy_init(void)
{
	/* mapped_copy_init settles the persistence core's operations (DAX
	 * pools flush through them) and adds the base's fault hook to the
	 * chain; the cache's own comes after it. */
	mapped_copy_init();
	cache_persist = mapped_persist();
	chell_fault_hook_add(fault_fixup);
	return 0;
}
