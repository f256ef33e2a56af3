/* SPDX-License-Identifier: MIT */
/*
 * cache/layout.h - what cache mode keeps in a pool directory, and the one
 * structure clients and the manager (chelld) share in memory: the control
 * page of a cache chunk. docs/CACHE.md explains the design; this header is
 * the contract between src/chelld (the manager) and src/handlers/cache (the
 * client side in libchell.so).
 *
 * Pool directory (chelld --pool DIR):
 *   DIR/meta.pool        Chell region with the cache metadata (cache/meta):
 *                        Cnodes, I2C, C2F, chunk allocation. Transactions.
 *   DIR/chunks/<slot>    one file per cache chunk slot, named by the slot
 *                        number in decimal: CACHE_CHUNK_BYTES of data, then
 *                        the control page (struct cache_ctl) at offset
 *                        CACHE_CHUNK_BYTES. Sparse: only filled 4 KB blocks
 *                        take memory.
 *   DIR/chelld.sock, chelld.pid, chelld.lock, chelld.log (chelld/protocol.h)
 *   DIR/modes.state      run-time mode switches and pins (chelld/modes_state.c)
 *
 * Why one file per chunk, and a new inode every time a slot is reused:
 * a mapping the kernel gave a client cannot be taken back without a kernel
 * module. So a chunk file only ever holds data of ONE (backing file, chunk
 * index): when the manager evicts it, it marks the control page REVOKED,
 * writes the dirty blocks back, truncates the file to 0 (clients' stale
 * mappings now fault, and the memory is freed at once) and unlinks it; the
 * slot's next use creates a new file. A client therefore can never see, let
 * alone write, another file's data through an old mapping: the worst it can
 * reach is a SIGBUS, which the client's guarded copy turns into a miss.
 *
 * Client protocol on a chunk (the manager's side is the mirror image; the
 * fences pair Dekker-style, so either the client sees REVOKED or the
 * manager sees the client's dirty bits):
 *   read:  state LIVE and every block of the range valid  -> guarded memcpy
 *          -> acquire fence -> state still LIVE, else discard and miss.
 *   write: state LIVE and every block valid -> guarded memcpy (flushed on
 *          DAX) -> dirty_mark(blocks) -> seq_cst fence -> state still LIVE,
 *          else redo the whole write through the miss path (writes are
 *          idempotent, so a redo is always safe).
 *   The manager: store REVOKED -> seq_cst fence -> dirty_checkout -> write
 *          back -> truncate + unlink. A block is made valid only by the
 *          manager (fill from the backing file, zeros past its end, or an
 *          OVERWRITE below), and clients store into valid blocks only - with
 *          the one exception of an overwrite - so a fill never races with a
 *          store that will count.
 *
 * Overwrites (chelld/protocol.h MAP with CHELLD_MAP_OVERWRITE, then the
 * OVERWRITE message): a write covering whole 4 KB blocks that are all
 * invalid needs no fill. The client reads (slot, incarnation) from the
 * control page, checks the state is LIVE and every block of the range is
 * invalid, stores the data (flushed on DAX), and only then asks the
 * manager to validate them. Under its lock the manager checks that the
 * slot still is the file's chunk, with that incarnation, LIVE, and that
 * none of the blocks is valid; then it sets the valid bits and marks the
 * blocks dirty (valid first: dirty blocks are always valid ones; nothing
 * evicts or cleans between the two, it holds the lock). Otherwise it
 * answers EAGAIN and the client redoes the whole write the normal way (a
 * MAP that fills, then a hit): writes are idempotent. The races:
 *   - a reader (another thread or process) sees the blocks invalid until
 *     the manager validates them, so it never sees bytes that are neither
 *     the old nor the new ones (e.g. the zeros of a fresh chunk file);
 *   - a fill of the same blocks for a reader, before the OVERWRITE: the
 *     fill's pread replaces the stored bytes (the reader gets the backing
 *     file's, i.e. the old, bytes), the blocks become valid, the OVERWRITE
 *     is refused and the redo stores the new bytes as a normal hit: neither
 *     the read nor the write is lost. A fill racing the stores themselves
 *     may leave a mix of old and new bytes in a valid block for a moment:
 *     a read concurrent with a write, then the redo writes the whole;
 *   - two overwrites of the same block (threads of one process, or two
 *     processes): the first OVERWRITE wins, the second is refused and
 *     redone as a normal hit, so the later of the two writes stands;
 *   - an eviction or TRUNCATE between the stores and the OVERWRITE: the
 *     stores went to a chunk file that is gone (or fault: a miss); the
 *     (slot, incarnation) check refuses, the redo goes to the new file;
 *   - the client dies before OVERWRITE: the blocks stay invalid and hold
 *     garbage nobody can read; the next fill of them overwrites it. (Zeros
 *     past the end of a file are only assumed of blocks that were never
 *     below it while the chunk file lived: only TRUNCATE - which revokes -
 *     shrinks a file, and an extending write publishes its size only after
 *     its blocks are valid and dirty, see "Extending writes".)
 *   - the manager dies between validating and replying: the client's call
 *     fails and it redoes the write on the restarted manager (the blocks
 *     are valid then: a normal hit). Recovery sees only valid dirty blocks.
 *   An acknowledged overwrite is valid and dirty in the chunk file, like a
 *   normal write after its dirty mark: written back before it is dropped.
 *
 * Capacity: chunk files are sparse, so what a pool holds is counted in
 * 4 KB pages - the valid blocks and one control page per chunk file - not
 * in slots; the manager evicts whole chunks (policy victims) when a fill,
 * an overwrite or a new chunk file would exceed the pool's size. There are
 * more slots than size / CACHE_CHUNK_BYTES (chelld/engine.h: a slot per
 * 256 KB of the size) so a scattered hot set keeps its blocks.
 *
 * Identity (client side, src/handlers/cache): (slot, incarnation) names
 * one chunk file for the life of the pool - incarnation grows every time
 * the slot's file is created, across restarts - so a client that maps a
 * new chunk file over an old one at the same address tells them apart by
 * reading the pair before and after a copy.
 *
 * Extending writes: a client publishes a file's new size only after the
 * bytes below it are stored, as the kernel does (a reader that reads up to
 * the size it sees must never see bytes that were not written). It
 * raises ext_end in the control page of each chunk it is about to store
 * into past the end, stores, then grows the backing file (a write of the
 * stored bytes, copied from the chunk; fallocate where that write fails;
 * if both fail, the marks go back to the published end) and the size
 * shared by its process tree. Clients shrink files only through
 * TRUNCATE. Write-back writes dirty bytes below max(the backing file's
 * size, the job's ext_end), never past: a dirty block past both belongs
 * to a file that was truncated since. So a chunk written back (by the
 * cleaner, or evicted) between a client's store and its publication puts
 * the stored bytes in the backing file, which then grows to end after
 * them: the size still never runs ahead of the bytes. Dirty blocks of a backing
 * file that no longer exists (unlinked, and no registration holds it open)
 * have nowhere to go and must be discarded, not kept: kept chunks that can
 * never be evicted fill the pool, and every client's MAP then fails with
 * ENOSPC (clients report that error rather than fall back to the kernel
 * path, which could serve bytes older than the cache's).
 *
 * Dirty states live in the control page (two bits per 4 KB block in the
 * format of cache/policy dirty.c, a one-chunk dirty_table) because clients
 * set them on the hit path without a system call; each change is a single
 * aligned 8-byte atomic, which is failure-atomic on persistent memory, so it
 * needs no journal. The maps and the allocation change only in meta
 * transactions.
 */
#ifndef CHELL_CACHE_LAYOUT_H
#define CHELL_CACHE_LAYOUT_H

#include <stdint.h>

#include "chell/chunk.h"

#define CACHE_CHUNK_SHIFT CHELL_CHUNK_SHIFT
#define CACHE_CHUNK_BYTES (1ull << CACHE_CHUNK_SHIFT) /* 2 MB */
#define CACHE_BLOCK_BYTES 4096u
#define CACHE_BLOCKS 512u                             /* per chunk */
#define CACHE_CTL_BYTES 4096u
#define CACHE_CHUNK_FILE_BYTES (CACHE_CHUNK_BYTES + CACHE_CTL_BYTES)

#define CACHE_META_NAME "meta.pool"
#define CACHE_CHUNKS_DIR "chunks"

#define CACHE_CTL_MAGIC 0x4c54434b4e484331ull /* "1CHNKCTL" */
#define CACHE_CTL_VERSION 1u

/* cache_ctl.state (atomic, monotonic: LIVE -> REVOKED, never back). */
enum cache_chunk_state {
	CACHE_CHUNK_INIT = 0,    /* being set up by the manager; not yet handed out */
	CACHE_CHUNK_LIVE = 1,
	CACHE_CHUNK_REVOKED = 2, /* being evicted or gone: take the miss path */
};

/* At offset CACHE_CHUNK_BYTES of every chunk file. Line 0 is written by the
 * manager only; line 1 (valid bits) by the manager only; from line 2 on, a
 * one-chunk dirty_table (cache/policy dirty.c), written by clients
 * (dirty_mark) and by the manager (check-out, check-in). Clients that may
 * only read get the whole file mapped read-only. */
struct cache_ctl {
	/* line 0: identity */
	uint64_t magic;
	uint32_t version;
	uint32_t state;      /* enum cache_chunk_state (atomic) */
	uint32_t slot;       /* the slot this file is the chunk of */
	uint32_t cnode;      /* cache/meta Cnode id of the backing file */
	uint64_t dev, ino;   /* backing file identity */
	uint64_t file_chunk; /* backing offset / CACHE_CHUNK_BYTES */
	uint64_t incarnation; /* how many times the slot was (re)used */
	/* The end (file offset) of the latest extending write a client stored
	 * into this chunk, raised (atomic max) before its store: bytes below it
	 * may lie past the backing file's size until the client publishes the
	 * size, and write-back writes them (see "Extending writes" above).
	 * 0 when none; also pads line 0 to 64 bytes so valid[] is line 1. */
	uint64_t ext_end;
	/* line 1: 4 KB blocks holding the backing file's data (bit b = block b) */
	uint64_t valid[CACHE_BLOCKS / 64];
	/* line 2 on: dirty_table_init(&dirty, 1) */
	uint64_t dirty[(4096 - 128) / 8];
};

_Static_assert(sizeof(struct cache_ctl) == CACHE_CTL_BYTES, "one page");
_Static_assert(__builtin_offsetof(struct cache_ctl, valid) == 64, "valid bits are line 1");
_Static_assert(__builtin_offsetof(struct cache_ctl, dirty) == 128, "dirty table from line 2");

#endif
