/* SPDX-License-Identifier: MIT */
/*
 * The tier model: emulation of a memory tier slower than this machine's
 * DRAM (PCM, STT-RAM, memristor, Optane, CXL), for the handlers that move
 * bytes to or from the fast tier (docs/TIER.md).
 *
 * Every byte Chell moves to or from the emulated tier costs the difference
 * between the modelled device and DRAM (calibrated at start-up): latency
 * per access, and transfer time at the device's bandwidth, which is one
 * budget shared by every process on the tier. A handler calls
 * chell_tier_read / chell_tier_write after the copy (or the kernel call)
 * that moved the bytes; with no model set they are one predictable branch.
 *
 * What cannot be emulated: an application's own loads and stores on its
 * own mmap of a file (they never pass through Chell).
 */
#ifndef CHELL_TIER_H
#define CHELL_TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The modelled device's figures (tier.read_ns ... or a preset's). */
struct chell_tier_figures {
	double read_ns, write_ns;     /* latency of one access */
	double read_gbps, write_gbps; /* bandwidth, GB/s (1e9 bytes/s) */
};

/* Is a model active in this process? (tier.model != none) */
extern bool chell_tier_active;
/* Bytes this thread has been charged so far (both directions): a layer
 * that charges a whole operation subtracts what the layers below it
 * charged meanwhile (chell_tier_settle), so no byte is charged twice. */
extern __thread uint64_t chell_tier_tls_bytes;

/* The device's figures; DRAM's own as calibrated when no model is set. */
const struct chell_tier_figures *chell_tier_device(void);
/* This machine's DRAM, as calibrated at start-up. */
const struct chell_tier_figures *chell_tier_dram(void);

/* Charge `accesses` accesses moving `bytes` bytes in total, then return:
 * waits out the modelled extra time, reserving the transfer on the shared
 * bandwidth budget. No-ops when no model is active. */
void chell_tier_charge(bool write, size_t bytes, unsigned accesses);
static inline void chell_tier_read(size_t bytes)
{
	if (__builtin_expect(chell_tier_active, 0))
		chell_tier_charge(false, bytes, 1);
}
static inline void chell_tier_write(size_t bytes)
{
	if (__builtin_expect(chell_tier_active, 0))
		chell_tier_charge(true, bytes, 1);
}

/* The name of the model in force ("none", "pcm", ..., "custom"). */
const char *chell_tier_model(void);

/* For a layer that charges whole operations (direct mode: every byte of
 * its read or write moved to or from the tier, by a copy or by the
 * kernel): take a mark before the operation, then settle its result: the
 * bytes the layers below did not charge themselves (the posix handler
 * charges its own kernel calls) are charged as one access. */
static inline uint64_t chell_tier_mark(void)
{
	return __builtin_expect(chell_tier_active, 0) ? chell_tier_tls_bytes : 0;
}
void chell_tier_settle_slow(bool write, uint64_t mark, size_t bytes);
static inline void chell_tier_settle(bool write, uint64_t mark, long result)
{
	if (__builtin_expect(chell_tier_active, 0) && result > 0)
		chell_tier_settle_slow(write, mark, (size_t)result);
}

#endif
