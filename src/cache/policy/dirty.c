/* Per-block dirty states with check-out/check-in (bankshot.md §4.3.2).
 *
 * Layout of the caller's memory (no pointers, so every process can map it
 * anywhere): a 64-byte header, then 16 words per chunk (512 blocks x 2
 * bits), then one maybe-dirty byte per chunk. Encoding per block:
 * CLEAN=00 DIRTY=01 PRE=10 POST=11 (low bit "written since the cleaner
 * last looked", high bit "checked out"). */
#include <string.h>

#include "cache/policy/policy.h"

#define DT_MAGIC 0x5452494443484c43ull /* "CLHCDIRT" */
#define WORDS_PER_CHUNK (CP_CHUNK_BLOCKS * 2 / 64) /* 16 */
#define BLOCKS_PER_WORD 32u
#define LO 0x5555555555555555ull
#define HI 0xaaaaaaaaaaaaaaaaull

struct dirty_table {
	uint64_t magic;
	uint32_t nchunks;
	uint32_t ndirty; /* atomic: chunks whose maybe-dirty byte is set */
	uint8_t pad[48];
	uint64_t words[]; /* nchunks * WORDS_PER_CHUNK, then the flag bytes */
};

_Static_assert(sizeof(struct dirty_table) == 64, "dirty table header is one line");

static uint8_t *flags(const dirty_table *t)
{
	return (uint8_t *)(uintptr_t)&t->words[(size_t)t->nchunks * WORDS_PER_CHUNK];
}

static uint64_t *chunk_words(dirty_table *t, uint32_t chunk)
{
	return &t->words[(size_t)chunk * WORDS_PER_CHUNK];
}

size_t dirty_table_bytes(uint32_t nchunks)
{
	return sizeof(struct dirty_table) + (size_t)nchunks * WORDS_PER_CHUNK * 8 + nchunks;
}

dirty_table *dirty_table_init(void *mem, uint32_t nchunks)
{
	dirty_table *t = mem;

	if (!mem || nchunks == 0 || ((uintptr_t)mem & 7))
		return NULL;
	memset(mem, 0, dirty_table_bytes(nchunks));
	t->nchunks = nchunks;
	__atomic_store_n(&t->magic, DT_MAGIC, __ATOMIC_SEQ_CST);
	return t;
}

dirty_table *dirty_table_open(void *mem)
{
	dirty_table *t = mem;

	if (!mem || ((uintptr_t)mem & 7) || __atomic_load_n(&t->magic, __ATOMIC_SEQ_CST) != DT_MAGIC)
		return NULL;
	return t;
}

uint32_t dirty_table_nchunks(const dirty_table *t)
{
	return t->nchunks;
}

uint32_t dirty_table_ndirty(const dirty_table *t)
{
	return __atomic_load_n(&t->ndirty, __ATOMIC_SEQ_CST);
}

bool dirty_chunk_flagged(const dirty_table *t, uint32_t chunk)
{
	return __atomic_load_n(&flags(t)[chunk], __ATOMIC_SEQ_CST);
}

/* Set the maybe-dirty byte if clear; only the winner of the 0->1 race
 * counts, so the count matches the bytes. */
static void flag_set(dirty_table *t, uint32_t chunk)
{
	uint8_t *f = &flags(t)[chunk], zero = 0;

	if (__atomic_load_n(f, __ATOMIC_SEQ_CST))
		return;
	if (__atomic_compare_exchange_n(f, &zero, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		__atomic_add_fetch(&t->ndirty, 1, __ATOMIC_SEQ_CST);
}

static void flag_clear(dirty_table *t, uint32_t chunk)
{
	if (__atomic_exchange_n(&flags(t)[chunk], 0, __ATOMIC_SEQ_CST))
		__atomic_sub_fetch(&t->ndirty, 1, __ATOMIC_SEQ_CST);
}

/* Mask of the low bits of blocks [from, to) within one word (0 <= from <
 * to <= 32). */
static uint64_t lo_mask(unsigned from, unsigned to)
{
	uint64_t m = to - from == 32 ? ~0ull : ((1ull << (2 * (to - from))) - 1);

	return (m << (2 * from)) & LO;
}

void dirty_mark(dirty_table *t, uint32_t chunk, unsigned first, unsigned n)
{
	uint64_t *w;
	unsigned end = first + n;

	if (chunk >= t->nchunks || n == 0 || first >= CP_CHUNK_BLOCKS)
		return;
	w = chunk_words(t, chunk);
	if (end > CP_CHUNK_BLOCKS)
		end = CP_CHUNK_BLOCKS;
	/* Setting the low bit is exactly CLEAN->DIRTY, PRE->POST and leaves
	 * DIRTY and POST alone, so a fetch-or does every transition at once.
	 * Every atomic here is seq_cst: the mark (word, then flag) and the
	 * check-out (flag, then word) form a store-buffer pattern that only
	 * sequential consistency orders; on x86-64 it costs nothing over
	 * acq_rel (the RMWs are locked anyway, loads stay plain). It also
	 * makes the data stored before the mark visible to the cleaner. */
	for (unsigned b = first; b < end;) {
		unsigned wi = b / BLOCKS_PER_WORD, from = b % BLOCKS_PER_WORD;
		unsigned to = end - wi * BLOCKS_PER_WORD;

		if (to > BLOCKS_PER_WORD)
			to = BLOCKS_PER_WORD;
		__atomic_fetch_or(&w[wi], lo_mask(from, to), __ATOMIC_SEQ_CST);
		b = wi * BLOCKS_PER_WORD + to;
	}
	/* After the bits: if the cleaner dropped the flag before our bits
	 * landed we set it again; if after, its check-out or check-in sees
	 * our bits (see dirty_checkin). */
	flag_set(t, chunk);
}

unsigned dirty_state(const dirty_table *t, uint32_t chunk, unsigned block)
{
	const uint64_t *w = &t->words[(size_t)chunk * WORDS_PER_CHUNK + block / BLOCKS_PER_WORD];

	return (__atomic_load_n(w, __ATOMIC_SEQ_CST) >> (2 * (block % BLOCKS_PER_WORD))) & 3;
}

/* Gather one bit per block from the 2-bit fields selected by `sel` (a mask
 * with at most the low bit of each field set) into a 32-bit value. */
static uint32_t compress(uint64_t sel)
{
	uint32_t r = 0;

	while (sel) {
		unsigned i = (unsigned)__builtin_ctzll(sel);

		r |= 1u << (i / 2);
		sel &= sel - 1;
	}
	return r;
}

static void put_bits(cp_bitmap *out, unsigned wi, uint32_t bits)
{
	out->w[wi / 2] |= (uint64_t)bits << (32 * (wi % 2));
}

unsigned dirty_count(const dirty_table *t, uint32_t chunk)
{
	unsigned n = 0;
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++)
		n += (unsigned)__builtin_popcountll(
			__atomic_load_n(&t->words[(size_t)chunk * WORDS_PER_CHUNK + wi], __ATOMIC_RELAXED) &
			LO);
	return n;
}

void dirty_peek(const dirty_table *t, uint32_t chunk, cp_bitmap *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++) {
		uint64_t v = __atomic_load_n(&t->words[(size_t)chunk * WORDS_PER_CHUNK + wi], __ATOMIC_SEQ_CST);

		put_bits(out, wi, compress(v & LO));
	}
}

unsigned dirty_checkout(dirty_table *t, uint32_t chunk, cp_bitmap *out)
{
	uint64_t *w;
	unsigned n = 0;

	memset(out, 0, sizeof(*out));
	if (chunk >= t->nchunks)
		return 0;
	w = chunk_words(t, chunk);
	/* Drop the flag first: a mark after this point either lands before
	 * our CAS (we take it) or after (POST, kept by the check-in, which
	 * then sets the flag again). */
	flag_clear(t, chunk);
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++) {
		uint64_t old = __atomic_load_n(&w[wi], __ATOMIC_SEQ_CST), dirty, nw;

		do {
			/* DIRTY = low set, high clear; 01 ^ 11 = 10 = PRE. */
			dirty = old & LO & ~(old >> 1);
			if (!dirty)
				break;
			nw = old ^ (dirty | dirty << 1);
		} while (!__atomic_compare_exchange_n(&w[wi], &old, nw, true, __ATOMIC_SEQ_CST,
						      __ATOMIC_SEQ_CST));
		if (dirty) {
			put_bits(out, wi, compress(dirty));
			n += (unsigned)__builtin_popcountll(dirty);
		}
	}
	return n;
}

/* Re-flag the chunk if any block is still (or again) dirty. */
static void reflag(dirty_table *t, uint32_t chunk)
{
	uint64_t *w = chunk_words(t, chunk);

	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++)
		if (__atomic_load_n(&w[wi], __ATOMIC_SEQ_CST) & LO) {
			flag_set(t, chunk);
			return;
		}
}

void dirty_checkin(dirty_table *t, uint32_t chunk)
{
	uint64_t *w;

	if (chunk >= t->nchunks)
		return;
	w = chunk_words(t, chunk);
	/* Clearing the high bit is exactly PRE->CLEAN and POST->DIRTY. */
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++)
		__atomic_fetch_and(&w[wi], ~HI, __ATOMIC_SEQ_CST);
	reflag(t, chunk);
}

void dirty_checkin_abort(dirty_table *t, uint32_t chunk)
{
	uint64_t *w;

	if (chunk >= t->nchunks)
		return;
	w = chunk_words(t, chunk);
	/* PRE and POST both become DIRTY: set every checked-out field's low
	 * bit, then clear the high bits. Two RMWs are fine: between them a
	 * block reads as POST, which every party treats as dirty. */
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++) {
		uint64_t hi = __atomic_load_n(&w[wi], __ATOMIC_SEQ_CST) & HI;

		__atomic_fetch_or(&w[wi], hi >> 1, __ATOMIC_SEQ_CST);
		__atomic_fetch_and(&w[wi], ~HI, __ATOMIC_SEQ_CST);
	}
	reflag(t, chunk);
}

void dirty_checkin_broken_for_test(dirty_table *t, uint32_t chunk)
{
	uint64_t *w = chunk_words(t, chunk);

	/* Clears both bits of every checked-out block: POST becomes CLEAN,
	 * losing the writes that raced with the write-back. */
	for (unsigned wi = 0; wi < WORDS_PER_CHUNK; wi++) {
		uint64_t old = __atomic_load_n(&w[wi], __ATOMIC_SEQ_CST), nw;

		do {
			uint64_t hi = old & HI;

			nw = old & ~(hi | hi >> 1);
		} while (!__atomic_compare_exchange_n(&w[wi], &old, nw, true, __ATOMIC_SEQ_CST,
						      __ATOMIC_SEQ_CST));
	}
	reflag(t, chunk);
}

unsigned cp_bitmap_count(const cp_bitmap *b)
{
	unsigned n = 0;

	for (unsigned i = 0; i < CP_BITMAP_WORDS; i++)
		n += (unsigned)__builtin_popcountll(b->w[i]);
	return n;
}
