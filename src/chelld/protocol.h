/* SPDX-License-Identifier: MIT */
/*
 * The chelld wire protocol (version 1), spoken over a SOCK_SEQPACKET Unix
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

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
/* The structures below are sent as they are in memory. A big-endian port
 * would byte-swap in chelld_send/chelld_recv (proto.c), nowhere else. */
#error "the chelld protocol is little-endian; add byte swapping for this target"
#endif

#define CHELLD_MAGIC 0x4c4c4843u /* "CHLL" in memory order */
#define CHELLD_VERSION 1u
#define CHELLD_PATH_MAX 4096u
#define CHELLD_DETAIL_MAX 96u
/* The paper's mapping granularity: chunks of 2 MiB of a backing file. */
#define CHELLD_CHUNK_SIZE (2u << 20)
/* Largest message of either direction; receivers use a buffer one byte
 * larger so an oversized datagram is detected rather than silently cut. */
#define CHELLD_MSG_MAX 4352u

/* Default names inside the pool directory. */
#define CHELLD_SOCK_NAME "chelld.sock"
#define CHELLD_PID_NAME "chelld.pid"
#define CHELLD_LOCK_NAME "chelld.lock"
#define CHELLD_LOG_NAME "chelld.log"

enum chelld_type {
	CHELLD_MSG_HELLO = 1,
	CHELLD_MSG_OPEN_FILE = 2, /* carries one descriptor (SCM_RIGHTS) */
	CHELLD_MSG_MAP = 3,
	CHELLD_MSG_STATS = 4,
	CHELLD_MSG_PATH = 5, /* the pool or a backing directory, by index */
	CHELLD_MSG_BYE = 6,
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
struct chelld_hello_reply {
	struct chelld_rhdr r;
	uint32_t version; /* the daemon's */
	uint32_t chunk_size;
	uint64_t cache_size;
};

struct chelld_open {
	struct chelld_hdr h;
	uint32_t flags; /* reserved, 0 */
	uint32_t pad;
	char path[CHELLD_PATH_MAX]; /* NUL-terminated, absolute */
};
struct chelld_open_reply {
	struct chelld_rhdr r;
	uint32_t file_id;
	uint32_t access; /* CHELLD_ACC_* */
	uint64_t size;
	uint64_t dev, ino;
	char detail[CHELLD_DETAIL_MAX]; /* why it was refused, for messages */
};

struct chelld_map {
	struct chelld_hdr h;
	uint32_t file_id;
	uint32_t want_write;
	uint64_t chunk;
};
struct chelld_map_reply {
	struct chelld_rhdr r;
	uint32_t chunk_size;
	uint32_t pad;
	uint64_t file_size;
	uint64_t backing_offset; /* chunk * chunk_size */
	uint64_t length;         /* bytes of the chunk inside the file */
};

struct chelld_stats {
	struct chelld_hdr h;
};
struct chelld_stats_reply {
	struct chelld_rhdr r;
	uint32_t pid;
	uint32_t clients;  /* connected now */
	uint32_t backings; /* number of backing directories */
	uint32_t pad;
	uint64_t cache_size;
	uint64_t uptime_ms;
	uint64_t clients_total; /* accepted since start */
	uint64_t requests;      /* every message received */
	uint64_t opens, opens_refused;
	uint64_t maps, maps_refused;
	uint64_t malformed;
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
};
/* BYE is answered with a bare struct chelld_rhdr, then the daemon closes. */

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
/* Name of a protocol errno value for messages ("EACCES"), or "E<n>". */
const char *chelld_errname(int e);

#endif
