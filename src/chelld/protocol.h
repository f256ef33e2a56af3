/* SPDX-License-Identifier: MIT */
/*
 * The chelld wire protocol (version 2: the cache data path), spoken over a SOCK_SEQPACKET Unix
 * socket between clients (libchell.so in cache mode, `chell cache`, tests)
 * and the cache manager daemon. See docs/CHELLD.md.
 *
 * Every message is one datagram: a 16-byte header followed by a payload
 * whose size is fixed by the message type, so the daemon can reject short,
 * oversized and mislabelled messages by size alone before reading a field.
 * Integers are little-endian. Replies carry the request's type with
 * CHELLD_REPLY set and the request's seq, and start with a status: 0 or a
 * positive errno value. A message the daemon cannot parse gets a
 * CHELLD_MSG_ERROR reply and the connection stays open.
 *
 * SOCK_SEQPACKET keeps message boundaries (no reassembly, a datagram larger
 * than the receive buffer shows up as MSG_TRUNC) and carries SCM_RIGHTS
 * descriptors with the message they belong to.
 */
#ifndef CHELLD_PROTOCOL_H
#define CHELLD_PROTOCOL_H

#include <stdint.h>

#include "chell/chunk.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The structures below are sent as they are in memory. A big-endian port
 * would byte-swap in chelld_send/chelld_recv (proto.c), nowhere else. */
#error "the chelld protocol is little-endian; add byte swapping for this target"
#endif

#define CHELLD_MAGIC 0x4c4c4843u /* "CHLL" in memory order */
/* 3: MAP hands over up to CHELLD_MAP_BATCH neighbouring chunks at once
 * (nchunks), STATS counts concurrent fills and batches. A client of
 * another version gets EPROTONOSUPPORT at HELLO, and the manager logs
 * both versions. */
#define CHELLD_VERSION 3u
#define CHELLD_PATH_MAX 4096u
#define CHELLD_DETAIL_MAX 96u
/* The paper's mapping granularity: chunks of 2 MiB of a backing file. */
#define CHELLD_CHUNK_SIZE ((uint32_t)CHELL_CHUNK_SIZE)
/* Largest message of either direction; receivers use a buffer one byte
 * larger so an oversized datagram is detected rather than silently cut. */
#define CHELLD_MSG_MAX 4352u

/* Default names inside the pool directory. */
#define CHELLD_SOCK_NAME "chelld.sock"
#define CHELLD_PID_NAME "chelld.pid"
#define CHELLD_LOCK_NAME "chelld.lock"
#define CHELLD_LOG_NAME "chelld.log"
/* Clients' byte-range lock stand-ins, one empty file per backing inode
 * (src/handlers/cache/locks.c); mode 1777, made by chelld at start. */
#define CHELLD_LOCKS_DIR "locks"

enum chelld_type {
	CHELLD_MSG_HELLO = 1,
	CHELLD_MSG_OPEN_FILE = 2, /* carries one descriptor (SCM_RIGHTS) */
	CHELLD_MSG_MAP = 3,
	CHELLD_MSG_STATS = 4,
	CHELLD_MSG_PATH = 5, /* the pool or a backing directory, by index */
	CHELLD_MSG_BYE = 6,
	CHELLD_MSG_SYNC = 7,      /* fsync: make the file's cache metadata durable */
	CHELLD_MSG_TRUNCATE = 8,  /* ftruncate through the manager */
	CHELLD_MSG_FLUSH = 9,     /* write back (and optionally drop) a file or all */
	CHELLD_MSG_CLOSE = 10,    /* the client is done with a file id */
	CHELLD_MSG_FILE_STAT = 11, /* per-file statistics, by index */
	CHELLD_MSG_CHECK = 12,    /* verify the pool while serving */
	CHELLD_MSG_OVERWRITE = 13, /* whole blocks stored while invalid: validate them */
	/* cache modes per backing directory (src/chelld/modes.c) */
	CHELLD_MSG_INVAL = 40,    /* a write went around the cache: drop its chunks */
	CHELLD_MSG_SET_MODE = 41, /* switch a directory's cache mode (drains it first) */
	CHELLD_MSG_PIN = 42,      /* pin (or unpin) a file or directory */
	CHELLD_MSG_RULE = 43,     /* the modes, pins and their settings, by index */
	CHELLD_MSG_ERROR = 0x7fff, /* reply only: the request could not be parsed */
};
#define CHELLD_REPLY 0x8000u

/* Access a client proved by the descriptor it passed (bit set). */
#define CHELLD_ACC_READ 1u
#define CHELLD_ACC_WRITE 2u

struct chelld_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length; /* of the whole message, header included */
	uint32_t seq;    /* chosen by the client, echoed in the reply */
};

/* The part every reply starts with. */
struct chelld_rhdr {
	struct chelld_hdr h;
	int32_t status; /* 0 or a positive errno value */
	uint32_t pad;
};

struct chelld_hello {
	struct chelld_hdr h;
	uint32_t version; /* the client's protocol version */
	uint32_t pad;
};
/* The reply to a successful HELLO carries one descriptor (SCM_RIGHTS): a
 * memfd of `slots` bytes, this client's access table (cache/policy
 * access_table): the client sets byte s on a hit in slot s, the manager
 * folds every client's table into its replacement policy. One table per
 * connection, so a client can only disturb replacement, never data. */
struct chelld_hello_reply {
	struct chelld_rhdr r;
	uint32_t version; /* the daemon's */
	uint32_t chunk_size;
	uint64_t cache_size; /* the capacity in bytes */
	uint32_t slots;   /* cache chunk slots (a pool holds more slots than
			   * cache_size / chunk_size: capacity is in 4 KB blocks) */
	uint32_t flags;   /* CHELLD_HELLO_* */
	/* Extending writes of at least this many bytes reserve backing space
	 * with fallocate and go to the cache only (chell.md §4.1.2). Always 0
	 * from this chelld: every extending write does (docs/CACHE.md). */
	uint64_t append_threshold;
};

/* HELLO reply flags. MODES: this manager may decline to cache a file
 * (pass-through, cache.file_max: modes.c), so clients register a file
 * when it is opened, and a file it declines starts on the kernel path
 * rather than moving there under a running call. */
#define CHELLD_HELLO_MODES 1u

struct chelld_open {
	struct chelld_hdr h;
	uint32_t flags; /* reserved, 0 */
	uint32_t pad;
	char path[CHELLD_PATH_MAX]; /* NUL-terminated, absolute */
};
/* File flags in replies. BYPASS: the file is not cached right now (an
 * application maps it, or it changed behind the cache and still had dirty
 * data): the client uses the kernel path on its own descriptor. */
#define CHELLD_FILE_BYPASS 1u
/* The file's cache mode (docs/CACHE.md, "Cache modes"), in OPEN_FILE, MAP
 * and INVAL replies. WTHROUGH: a write stored in the cache is also written
 * to the backing file (from the cache's copy) before it returns. WAROUND
 * (write-around and read-only): writes go to the backing file on the
 * client's own descriptor, then INVAL; a MAP for writing is answered with
 * this flag and no descriptor, one for reading (CHELLD_MAP_READ) with a
 * read-only chunk file. SKIP (a MAP reply only, no descriptor): serve this
 * read from the backing file, the cache holds nothing of the chunk
 * (sequential cutoff). */
#define CHELLD_FILE_WTHROUGH 2u
#define CHELLD_FILE_WAROUND 4u
#define CHELLD_FILE_SKIP 8u

/* (libchell sends a descriptor it reopened through /proc/thread-self/fd from the
 * application's - O_RDWR when that one may write - so the manager never
 * holds the application's own open file description: its OFD and flock
 * locks, O_APPEND and offset stay the application's; the kernel checks the
 * reopen like any open.)
 * OPEN_FILE registers the client's descriptor for the file; file_id is the
 * file's Cnode id (0 is a valid id), the same for every client, valid on
 * this connection until CLOSE (a forked child reconnects and registers
 * again). Registering a file again on a connection counts (one CLOSE each)
 * and the access is the union of what the descriptors grant. A path the
 * pool cannot record (over 191 bytes) is refused with ENAMETOOLONG. */
struct chelld_open_reply {
	struct chelld_rhdr r;
	uint32_t file_id;
	uint32_t access; /* CHELLD_ACC_* */
	uint64_t size;
	uint64_t dev, ino;
	uint32_t flags;  /* CHELLD_FILE_* */
	uint32_t pad;
	char detail[CHELLD_DETAIL_MAX]; /* why it was refused, for messages */
};

/* MAP: make blocks [first_block, first_block + nblocks) of file chunk
 * `chunk` valid in the cache (filling from the backing file, or zeros past
 * its end) and hand the chunk file over. A successful reply without
 * CHELLD_FILE_BYPASS carries one descriptor (SCM_RIGHTS) of the chunk file
 * (cache/layout.h), opened O_RDWR if want_write and the registered
 * descriptor allows writing, else O_RDONLY. nblocks 0: just the mapping.
 * The manager may fill more than asked (read-ahead), but only blocks not
 * yet valid (clients store into valid blocks without asking). EIO: the chunk's
 * eviction could not write its dirty data back (it is kept, revoked). */
/* want_write bits. OVERWRITE (implies a write mapping): the client will
 * store whole blocks [first_block, first_block + nblocks) itself, so the
 * manager reads none of them (no fill, no read-ahead); the client then
 * sends OVERWRITE (below). A manager that predates it fills them as for a
 * write: correct, only slower. */
#define CHELLD_MAP_WRITE 1u
#define CHELLD_MAP_OVERWRITE 2u
/* The miss is a read (the client may still ask for a writable mapping,
 * which then serves its later writes): for the cache modes and the
 * sequential cutoff. Older clients never set it. */
#define CHELLD_MAP_READ 4u
struct chelld_map {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t want_write; /* CHELLD_MAP_* (any nonzero: a write mapping) */
	uint64_t chunk;
	uint32_t first_block;
	uint32_t nblocks;
	/* Batch (v3): 0 or 1, the one chunk above; N > 1 (at most
	 * CHELLD_MAP_BATCH, not with OVERWRITE): chunks chunk..chunk+N-1, the
	 * first with the blocks above, the middle ones whole, the last with
	 * blocks [0, last_nblocks): a read across neighbouring chunks none of
	 * which the client has mapped takes one round trip. */
	uint32_t nchunks;
	uint32_t last_nblocks;
};
#define CHELLD_MAP_BATCH 8u
/* Access tables (the memfd of HELLO): one byte per 64 KB of each slot, so
 * replacement sees which parts of a chunk are hot (v3; before: one per
 * slot). A hit at byte `in` of the chunk in slot s marks
 * s * CHELLD_ACCESS_GROUPS + (in >> CHELLD_ACCESS_GROUP_SHIFT). */
#define CHELLD_ACCESS_GROUP_SHIFT 16u
#define CHELLD_ACCESS_GROUPS (CHELLD_CHUNK_SIZE >> CHELLD_ACCESS_GROUP_SHIFT)
struct chelld_map_reply {
	struct chelld_rhdr r;
	uint32_t chunk_size;
	uint32_t slot;
	uint64_t file_size;      /* the backing file's size now */
	uint64_t backing_offset; /* chunk * chunk_size */
	uint64_t length;         /* bytes of the chunk inside the file */
	uint32_t access;         /* CHELLD_ACC_* the descriptor sent grants */
	uint32_t flags;          /* CHELLD_FILE_* */
	/* v3: chunks handed over, a prefix of those asked (1 without a batch;
	 * a later chunk that could not be mapped ends it), one descriptor each,
	 * in order, all with `access`; and their slots. */
	uint32_t nmapped;
	uint32_t pad;
	uint32_t slots[CHELLD_MAP_BATCH];
};

/* OVERWRITE: the client stored whole blocks [first_block, first_block +
 * nblocks) of chunk `chunk` into the chunk file (slot, incarnation) (read
 * from its control page before the stores) while every one of them was
 * invalid, flushed them on DAX, and asks the manager to make them valid
 * and dirty (cache/layout.h, "Overwrites"). Reply: bare chelld_rhdr, 0
 * when done (the write is complete); EAGAIN when that chunk file is no
 * longer the file's chunk or not LIVE, or any of the blocks became valid
 * meanwhile (a fill raced with the stores): the client redoes the write as
 * a normal one (a hit on valid blocks, or a MAP). Needs write access. */
struct chelld_overwrite {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t slot;
	uint64_t chunk;
	uint64_t incarnation;
	uint32_t first_block;
	uint32_t nblocks;
};

/* SYNC (fsync/fdatasync after the client flushed its stores and dirty
 * bits): the manager records the backing file's size and times in the
 * file's Cnode in one transaction, so a crash cannot lose an extension. */
struct chelld_sync {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t pad;
};
/* SYNC and CLOSE are answered with a bare struct chelld_rhdr too. */

/* TRUNCATE: revoke the file's chunks from the one holding `size` on (dirty
 * blocks below `size` are written back first), truncate the backing file,
 * record the size. Needs write access. Reply: bare chelld_rhdr. */
struct chelld_truncate {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t pad;
	uint64_t size;
};

#define CHELLD_ALL_FILES UINT32_MAX
#define CHELLD_FLUSH_DROP 1u   /* also evict the file's chunks (clean data too) */
#define CHELLD_FLUSH_BYPASS 2u /* ... and stop caching it until its last close */
/* FLUSH: write the dirty blocks of file_id (or of every file) back to the
 * backing store and fsync it. FLUSH of one file needs it registered on this
 * connection; of all files, that the caller is root or the manager's user.
 * CHELLD_FLUSH_BYPASS is what a client sends before an application mmap()s
 * a cached file. */
struct chelld_flush {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t flags;
};
struct chelld_flush_reply {
	struct chelld_rhdr r;
	uint64_t blocks_written;
	uint64_t bytes_written;
	uint32_t chunks_dropped;
	uint32_t files;
};

/* Counters a client reports for one file (CLOSE) or for all (BYE): hits are
 * served without the manager, which learns of them only this way. */
struct chelld_client_counts {
	uint64_t read_hits, write_hits;
	uint64_t read_misses, write_misses;
	uint64_t read_bytes, write_bytes;
};

struct chelld_close {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t pad;
	struct chelld_client_counts counts;
};

/* FILE_STAT: the index-th cached file (0, 1, ...), ENOENT past the last. */
struct chelld_file_stat {
	struct chelld_hdr h;
	uint32_t index;
	uint32_t pad;
};
struct chelld_file_stat_reply {
	struct chelld_rhdr r;
	uint32_t cnode;
	uint32_t flags;      /* CHELLD_FILE_* */
	uint64_t size;
	uint32_t chunks;     /* cache chunks held */
	uint32_t clients;    /* connections that registered it */
	uint64_t valid_blocks, dirty_blocks;
	uint64_t fills, fill_bytes;
	uint64_t evictions, writeback_bytes;
	struct chelld_client_counts counts; /* reported by clients so far */
	char path[CHELLD_PATH_MAX];
};

struct chelld_check {
	struct chelld_hdr h;
};
struct chelld_check_reply {
	struct chelld_rhdr r; /* 0, or EUCLEAN with the first problem in detail */
	uint64_t chunks_checked;
	uint64_t cnodes_checked;
	char detail[CHELLD_DETAIL_MAX * 2];
};

struct chelld_stats {
	struct chelld_hdr h;
};
struct chelld_stats_reply {
	struct chelld_rhdr r;
	uint32_t pid;
	uint32_t clients;  /* connected now */
	uint32_t backings; /* number of backing directories */
	uint32_t overwrites; /* OVERWRITE requests done, modulo 2^32 (was pad: 0) */
	uint64_t cache_size; /* the capacity in bytes (the pool's chunk files may use) */
	uint64_t uptime_ms;
	uint64_t clients_total; /* accepted since start */
	uint64_t requests;      /* every message received */
	uint64_t opens, opens_refused;
	uint64_t maps, maps_refused;
	uint64_t malformed;
	/* the cache (v2) */
	uint32_t slots, slots_used;
	uint32_t dirty_chunks, cnodes;
	uint64_t dirty_blocks;
	uint64_t fills, fill_bytes;
	uint64_t evictions, revocations;
	uint64_t writeback_ops, writeback_bytes;
	uint64_t syncs, truncates, bypassed, outside_changes;
	uint64_t cleaner_passes, throttle_waits;
	struct chelld_client_counts counts; /* reported by clients so far */
	uint32_t policy;       /* 0 LRU (CLOCK), 1 FIFO */
	uint32_t used_pages;   /* of the capacity, in 4 KB pages: valid blocks and
				* control pages of the chunk files (was pad2: 0) */
	/* v3 */
	uint32_t workers;            /* request threads */
	uint32_t fills_inflight_max; /* most fills reading the backing store at once */
	uint64_t map_batches;        /* MAPs that handed over more than one chunk */
	uint64_t map_batched_chunks; /* chunks they handed over */
	uint64_t shrinks;            /* chunks whose cold 64 KB groups left alone (policy blocks) */
};

struct chelld_path {
	struct chelld_hdr h;
	uint32_t index; /* 0: the pool directory, 1..n: backing directory n */
	uint32_t pad;
};
struct chelld_path_reply {
	struct chelld_rhdr r;
	char path[CHELLD_PATH_MAX];
};

struct chelld_bye {
	struct chelld_hdr h;
	struct chelld_client_counts counts; /* for files not reported by CLOSE */
};
/* BYE is answered with a bare struct chelld_rhdr, then the daemon closes. */

/* ---- cache modes, pins, sequential cutoff, per-file cap (modes.c) ---- */
enum chelld_cache_mode {
	CHELLD_MODE_WRITE_BACK = 0,
	CHELLD_MODE_WRITE_THROUGH = 1,
	CHELLD_MODE_WRITE_AROUND = 2,
	CHELLD_MODE_READ_ONLY = 3,
	CHELLD_MODE_PASS_THROUGH = 4,
	CHELLD_MODE_COUNT
};

/* INVAL: the client wrote [offset, offset + length) of the file on its own
 * descriptor (write-around, read-only): the chunks holding the range are
 * revoked, so every later read fills from the backing file. Needs the
 * file registered (read access is enough: it only drops clean copies).
 * Reply: struct chelld_inval_reply with the file's CHELLD_FILE_* flags. */
struct chelld_inval {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t pad;
	uint64_t offset, length;
};
struct chelld_inval_reply {
	struct chelld_rhdr r;
	uint32_t flags;
	uint32_t chunks_dropped;
};

/* SET_MODE: the directory `path` (absolute, resolved, a backing directory
 * or below one) gets `mode` (enum chelld_cache_mode). Every cached file
 * under it is written back and its chunks revoked first, so clients that
 * have it open remap and learn the new mode. Root or the manager's user
 * only. */
struct chelld_set_mode {
	struct chelld_hdr h;
	uint32_t mode;
	uint32_t pad;
	char path[CHELLD_PATH_MAX];
};
struct chelld_set_mode_reply {
	struct chelld_rhdr r;
	uint32_t files;   /* cached files under the directory */
	uint32_t chunks_dropped;
	uint64_t bytes_written; /* drained */
	char detail[CHELLD_DETAIL_MAX];
};

/* PIN: pin (flags 0) or unpin (CHELLD_PIN_UNPIN) a file or directory
 * (absolute, resolved, under a backing directory): chunks of pinned files
 * are never evicted. The bytes pinned (the sizes of the files when pinned)
 * must stay within cache.pin_max, else ENOSPC. Root or the manager's user. */
#define CHELLD_PIN_UNPIN 1u
struct chelld_pin {
	struct chelld_hdr h;
	uint32_t flags;
	uint32_t pad;
	char path[CHELLD_PATH_MAX];
};
struct chelld_pin_reply {
	struct chelld_rhdr r;
	uint64_t bytes;        /* of this path */
	uint64_t pinned_bytes; /* all pins, after the request */
	uint64_t pin_max;
	char detail[CHELLD_DETAIL_MAX];
};

/* RULE: index 0 is the settings (kind DEFAULTS: the default mode, the
 * sequential cutoff, the per-file cap, pin_max and pinned bytes), then the
 * mode rules (kind MODE), then the pins (kind PIN); ENOENT past the last. */
enum { CHELLD_RULE_DEFAULTS = 0, CHELLD_RULE_MODE = 1, CHELLD_RULE_PIN = 2 };
struct chelld_rule {
	struct chelld_hdr h;
	uint32_t index;
	uint32_t pad;
};
struct chelld_rule_reply {
	struct chelld_rhdr r;
	uint32_t kind;
	uint32_t mode;   /* DEFAULTS, MODE */
	uint64_t bytes;  /* PIN: bytes pinned; DEFAULTS: all pinned bytes */
	uint64_t seq_cutoff, file_max, pin_max; /* DEFAULTS */
	uint64_t seq_bypassed; /* DEFAULTS: read misses served around the cache */
	char path[CHELLD_PATH_MAX];
};

struct chelld_error_reply {
	struct chelld_rhdr r;
	uint32_t req_type; /* the type field as received (0 if none) */
	uint32_t pad;
	char detail[CHELLD_DETAIL_MAX];
};

_Static_assert(sizeof(struct chelld_hdr) == 16, "wire layout");
_Static_assert(sizeof(struct chelld_rhdr) == 24, "wire layout");
_Static_assert(sizeof(struct chelld_open) == 24 + CHELLD_PATH_MAX, "wire layout");
_Static_assert(sizeof(struct chelld_path_reply) <= CHELLD_MSG_MAX, "wire layout");
_Static_assert(sizeof(struct chelld_open) <= CHELLD_MSG_MAX, "wire layout");
_Static_assert(sizeof(struct chelld_file_stat_reply) <= CHELLD_MSG_MAX, "wire layout");

/* ---- client helpers (proto.c), used by `chell cache` and the test client ---- */
#include <stddef.h>

/* Fill in a request header. */
void chelld_hdr_init(struct chelld_hdr *h, uint16_t type, uint32_t length, uint32_t seq);
/* Connect to the daemon's socket: the descriptor, or -1 with errno. */
int chelld_connect(const char *sock_path);
/* Send one message, with descriptor fd attached if fd >= 0: 0 or -1/errno. */
int chelld_send(int sock, const void *msg, size_t len, int fd);
/* Receive one reply into buf (at least CHELLD_MSG_MAX + 1 bytes): its length,
 * or -1 with errno (ECONNRESET for end of stream, EMSGSIZE if oversized). */
long chelld_recv(int sock, void *buf, size_t cap);
/* Send req and wait for a well-formed reply of the matching type into rep
 * (replen bytes exactly): 0, or -1 with errno (EPROTO if malformed; an
 * error reply from the daemon becomes its status in rep->status, return 0
 * only if the sizes match). */
int chelld_call(int sock, const void *req, size_t reqlen, int fd, void *rep, size_t replen);
/* chelld_call for replies that may carry one descriptor: *fd_out gets it
 * (close-on-exec), or -1 if the reply had none. */
int chelld_call_fd(int sock, const void *req, size_t reqlen, int fd, void *rep, size_t replen,
		   int *fd_out);
/* Name of a protocol errno value for messages ("EACCES"), or "E<n>". */
const char *chelld_errname(int e);

#endif
