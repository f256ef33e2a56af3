/* SPDX-License-Identifier: MIT */
/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
 * every superblock, journal header and journal entry. The SSE4.2 `crc32`
 * instruction computes exactly this polynomial, 8 bytes per instruction;
 * the byte-wise table is the fallback for CPUs without it.
 */
#include "pmem_internal.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u

static uint32_t crc_table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t chell_crc32c_table(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	pthread_once(&table_once, table_init);
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

#if defined(__x86_64__)
/* Long buffers run as three independent streams: the crc32 instruction
 * has a latency of 3 cycles and a throughput of 1, so one serial chain
 * uses a third of it. The streams are joined with the identity
 *   raw(s, A||B) = shift_|B|(raw(s, A)) ^ raw(0, B)
 * (raw = the instruction's unconditioned state, linear over GF(2)), where
 * shift_n(s) is the state after n zero bytes from s, a fixed linear map
 * applied with four byte tables. */
#define LANE 256u /* bytes per stream per round: 32 crc32q each */

static uint32_t shift_tab[4][256]; /* shift_LANE applied to one byte of s */
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

static uint32_t zeros_bitwise(uint32_t s, size_t n)
{
	for (size_t i = 0; i < 8 * n; i++)
		s = (s & 1) ? (s >> 1) ^ CRC32C_POLY : s >> 1;
	return s;
}

static void shift_init(void)
{
	uint32_t bit[32];

	for (int i = 0; i < 32; i++)
		bit[i] = zeros_bitwise(1u << i, LANE);
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++) {
			uint32_t v = 0;
			for (int i = 0; i < 8; i++)
				if (b & (1u << i))
					v ^= bit[8 * k + i];
			shift_tab[k][b] = v;
		}
}

static inline uint32_t shift_lane(uint32_t s)
{
	return shift_tab[0][s & 0xff] ^ shift_tab[1][(s >> 8) & 0xff] ^ shift_tab[2][(s >> 16) & 0xff] ^
	       shift_tab[3][s >> 24];
}

__attribute__((target("sse4.2"))) uint32_t chell_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;

	/* Byte steps up to 8-byte alignment, then whole words (memcpy keeps the
	 * load legal whatever the alignment), then the tail. */
	while (len && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		len--;
	}
	if (len >= 3 * LANE) {
		pthread_once(&shift_once, shift_init);
		while (len >= 3 * LANE) {
			uint64_t c1 = 0, c2 = 0;
			for (size_t i = 0; i < LANE; i += 8) {
				uint64_t w0, w1, w2;
				memcpy(&w0, p + i, 8);
				memcpy(&w1, p + LANE + i, 8);
				memcpy(&w2, p + 2 * LANE + i, 8);
				c = __builtin_ia32_crc32di(c, w0);
				c1 = __builtin_ia32_crc32di(c1, w1);
				c2 = __builtin_ia32_crc32di(c2, w2);
			}
			c = shift_lane(shift_lane((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
			p += 3 * LANE;
			len -= 3 * LANE;
		}
	}
	while (len >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c = __builtin_ia32_crc32di(c, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return ~(uint32_t)c;
}

int chell_crc32c_hw_available(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("sse4.2") ? 1 : 0;
}
#else
uint32_t chell_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	return chell_crc32c_table(crc, buf, len);
}

int chell_crc32c_hw_available(void)
{
	return 0;
}
#endif

/* 0 = not decided yet, 1 = table, 2 = hardware. A benign race: every thread
 * decides the same. */
static int crc_impl;

uint32_t chell_crc32c(uint32_t crc, const void *buf, size_t len)
{
	int impl = __atomic_load_n(&crc_impl, __ATOMIC_RELAXED);

	if (!impl) {
		impl = chell_crc32c_hw_available() ? 2 : 1;
		__atomic_store_n(&crc_impl, impl, __ATOMIC_RELAXED);
	}
	return impl == 2 ? chell_crc32c_hw(crc, buf, len) : chell_crc32c_table(crc, buf, len);
}
