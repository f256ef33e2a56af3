/* SPDX-License-Identifier: MIT */
/*
 * The counters a process under the tiered heap publishes for `chell tier
 * stat PID`: one small file per process, TH_STAT_DIR/chell-tierheap.<pid>,
 * mapped shared and updated by the extent hooks with relaxed atomics (a
 * reader sees each counter whole, not all of them at one instant). Removed
 * at exit; a file whose process is gone is stale (the reader checks).
 */
#ifndef CHELL_TIERHEAP_STAT_H
#define CHELL_TIERHEAP_STAT_H

#include <stdatomic.h>
#include <stdint.h>

#define TH_STAT_DIR "/dev/shm"
#define TH_STAT_PREFIX "chell-tierheap."
#define TH_STAT_MAGIC 0x70616568726974ULL /* "tierheap" */
#define TH_STAT_VERSION 1

struct th_stat {
	uint64_t magic;
	uint32_t version;
	int32_t pid;
	uint32_t policy;            /* enum th_policy */
	uint32_t slow_kind;         /* 0 none, 1 file, 2 NUMA node */
	int32_t slow_node;          /* the node, slow_kind 2 */
	uint32_t w_dram, w_slow;    /* interleave weights */
	uint32_t pad;
	uint64_t budget;            /* DRAM budget, 0 = none */
	uint64_t slow_capacity;     /* bytes the slow tier can give */
	_Atomic uint64_t dram_bytes;     /* DRAM extents our hooks hold (metadata included) */
	_Atomic uint64_t dram_peak;
	_Atomic uint64_t meta_bytes;     /* of which jemalloc's own metadata */
	_Atomic uint64_t slow_bytes;     /* slow-tier extents handed to jemalloc */
	_Atomic uint64_t slow_peak;
	_Atomic uint64_t fallbacks;      /* extents placed on the policy's second choice */
	_Atomic uint64_t failures;       /* extents no tier could give */
};

#endif
