/* SPDX-License-Identifier: MIT */
/*
 * chell/chunk.h - the chunk: the unit in which the mapped handlers map a
 * file (direct: its default, direct.chunk_size), the cache pool stores it
 * (one chunk file per chunk), chelld talks about it and the cache metadata
 * counts it. One constant; every other chunk size in Chell derives from it.
 * 2 MiB: one huge page on x86-64, few mappings per file, and small enough
 * that mapping one costs little.
 */
#ifndef CHELL_CHUNK_H
#define CHELL_CHUNK_H

#define CHELL_CHUNK_SHIFT 21
#define CHELL_CHUNK_SIZE (1ull << CHELL_CHUNK_SHIFT)

#endif
