/* SPDX-License-Identifier: MIT */
/*
 * The named devices of tier.model. Sources (docs/TIER.md has the
 * citations and what each figure means):
 *   pcm, stt-ram, memristor  WARP paper (../shared/papers/warp.md), Table I;
 *                            PCM's write latency is a range there
 *                            (350-1000 ns): 500 ns, the value the paper's
 *                            own motivating experiment uses (Section II);
 *   optane                   Izraelevitz et al. 2019 and Yang et al. FAST'20:
 *                            one Optane DC PMM, random 64 B load 305 ns,
 *                            store + flush about 90 ns (it lands in the
 *                            memory controller's ADR queue), 6.6 GB/s read,
 *                            2.3 GB/s write;
 *   cxl                      Sun et al. MICRO'23: one CXL 1.1 memory
 *                            expander, loads about twice local DRAM's
 *                            latency; indicative figures, see docs/TIER.md.
 * Bandwidths are GB/s = 10^9 bytes/s.
 */
#include <string.h>

#include "internal.h"

const struct tier_preset tier_presets[] = {
	/* name        read_ns write_ns read_gbps write_gbps */
	{"pcm",       {50, 500, 10, 2}},
	{"stt-ram",   {40, 40, 15, 10}},
	{"memristor", {100, 100, 10, 5}},
	{"optane",    {305, 90, 6.6, 2.3}},
	{"cxl",       {250, 250, 20, 15}},
	{NULL, {0, 0, 0, 0}},
};

const struct tier_preset *tier_preset_find(const char *name)
{
	for (const struct tier_preset *p = tier_presets; p->name; p++)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}
