/* SPDX-License-Identifier: MIT */
/*
 * chelld_client SOCKET OP...: a scripted client of chelld for
 * tests/system/test_chelld.py. Runs the operations in order on one
 * connection and prints one line per operation:
 *
 *   OP status=ENAME [field=value...]     the daemon's reply
 *   OP local=ENAME                       the client itself failed (e.g. open)
 *
 * Operations:
 *   hello[:VERSION]            HELLO (default: our version)
 *   open:PATH:MODE[:FDPATH]    OPEN_FILE with path PATH and a descriptor of
 *                              FDPATH (default PATH) opened with MODE: ro,
 *                              wo, rw or opath (O_PATH)
 *   open-nofd:PATH             OPEN_FILE without a descriptor
 *   map:ID:CHUNK:r|w[:FIRST:N] MAP (blocks FIRST..FIRST+N-1); the chunk file
 *                              received is mapped and kept; ID "last" = the
 *                              last file id (also in the operations below)
 *   read:ID:OFF:LEN:OUT        read through the mappings with the client
 *                              protocol of cache/layout.h (MAP on a miss or a
 *                              revoked chunk), bytes into file OUT
 *   write:ID:OFF:IN            write file IN's bytes the same way (extending
 *                              the backing file first through our descriptor)
 *                              and mark the blocks dirty
 *   overwrite:ID:OFF:IN[:READY:GO]  store IN (whole blocks) the overwrite
 *                              way: MAP with OVERWRITE, store into the
 *                              invalid blocks, [create READY, wait for GO,]
 *                              OVERWRITE; refused: redone as a write
 *   peek:ID:CHUNK:OFF          one byte through the kept mapping as it is (no
 *                              protocol): value=N or fault=SIGBUS|SIGSEGV
 *   poke:ID:CHUNK:OFF:VALUE    store one byte the same way
 *   state:ID:CHUNK             the control page seen through the mapping
 *   ctrunc:ID:CHUNK:SIZE       ftruncate the chunk file itself (a hostile
 *                              client with write access)
 *   sync:ID | truncate:ID:SIZE | close:ID | flush:ID|all[:drop|bypass]
 *   fstat:INDEX | check        FILE_STAT, CHECK
 *   stats | bye | sleep:MS
 *   wait:PATH                  wait until PATH exists (a test's go-ahead)
 *   raw:KIND                   a malformed message: short, badmagic,
 *                              oversize, unknown, badlen, wrongsize,
 *                              badversion, fd-on-stats, garbage
 * Exit: 0 done, 3 the connection failed or the daemon broke the protocol.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cache/policy/policy.h"
#include "chelld/protocol.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chelld_client SOCKET OP...: a scripted client of chelld for\n"
	"tests/system/test_chelld.py. Runs the operations in order on one\n"
	"connection and prints one line per operation:\n"
	"(a test program of Chell's suite; details: tests/progs/chelld_client.c)\n";

static uint32_t seq;

static int breakdown(const char *op)
{
	printf("%s fail=%s\n", op, chelld_errname(errno));
	return 3;
}

/* Print the status of a reply; an error reply (no fields of the request's
 * reply type) is printed whole, and then true is returned. */
static bool show_status(const char *op, const struct chelld_rhdr *r)
{
	printf("%s status=%s", op, chelld_errname(r->status));
	if (r->h.type != (CHELLD_MSG_ERROR | CHELLD_REPLY))
		return false;
	printf(" error_reply=1 detail=\"%s\"\n", ((const struct chelld_error_reply *)r)->detail);
	return true;
}

/* ---- the data path: mapped chunks and the client protocol of layout.h ---- */

#define MAXMAPS 256

struct cmap {
	uint32_t id;
	uint64_t chunk;
	uint8_t *p;     /* CACHE_CHUNK_FILE_BYTES, NULL = none */
	bool rw;
	uint32_t slot;
	int fd;         /* the chunk file, kept for ctrunc */
};

static struct cmap maps[MAXMAPS];
static int ownfd[4096]; /* the descriptor passed with OPEN_FILE, by file id (+1) */
static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_sig, guarded;

static void on_fault(int sig)
{
	if (!guarded) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	fault_sig = sig;
	siglongjmp(fault_jmp, 1);
}

static const char *signame(int sig)
{
	return sig == SIGBUS ? "SIGBUS" : sig == SIGSEGV ? "SIGSEGV" : "SIG?";
}

/* Copy n bytes with faults turned into a return of the signal number. */
static int guarded_copy(void *dst, const void *src, size_t n)
{
	fault_sig = 0;
	if (sigsetjmp(fault_jmp, 1) == 0) {
		guarded = 1;
		memcpy(dst, src, n);
		guarded = 0;
		return 0;
	}
	guarded = 0;
	return fault_sig;
}

static struct cmap *find_map(uint32_t id, uint64_t chunk)
{
	for (int i = 0; i < MAXMAPS; i++)
		if (maps[i].p && maps[i].id == id && maps[i].chunk == chunk)
			return &maps[i];
	return NULL;
}

static struct cache_ctl *ctl_of(const struct cmap *m)
{
	return (struct cache_ctl *)(m->p + CACHE_CHUNK_BYTES);
}

/* MAP request; on success the mapping replaces any older one of the chunk.
 * Returns the reply status (or -1 broken connection); *flags the reply's. */
static int do_map(int s, uint32_t id, uint64_t chunk, uint32_t w, unsigned first, unsigned n,
		  struct chelld_map_reply *r)
{
	struct chelld_map m = {0};
	chelld_hdr_init(&m.h, CHELLD_MSG_MAP, sizeof m, ++seq);
	m.file_id = id;
	m.chunk = chunk;
	m.want_write = w;
	m.first_block = first;
	m.nblocks = n;
	int fd = -1;
	if (chelld_call_fd(s, &m, sizeof m, -1, r, sizeof *r, &fd) < 0)
		return -1;
	if (r->r.status || fd < 0) {
		if (fd >= 0)
			close(fd);
		return r->r.status;
	}
	bool rw = r->access & CHELLD_ACC_WRITE;
	void *p = mmap(NULL, CACHE_CHUNK_FILE_BYTES, PROT_READ | (rw ? PROT_WRITE : 0), MAP_SHARED,
		       fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return e;
	}
	struct cmap *c = find_map(id, chunk);
	for (int i = 0; !c && i < MAXMAPS; i++)
		if (!maps[i].p)
			c = &maps[i];
	if (!c) {
		munmap(p, CACHE_CHUNK_FILE_BYTES);
		close(fd);
		return ENOMEM;
	}
	if (c->p) {
		munmap(c->p, CACHE_CHUNK_FILE_BYTES);
		close(c->fd);
	}
	*c = (struct cmap){id, chunk, p, rw, r->slot, fd};
	return 0;
}

/* A mapping of (id, chunk) that is LIVE with blocks [first, first+n)
 * valid (and writable if w), asking the manager when it is not. Returns
 * the mapping, or NULL with *st the status (misses counted). */
static struct cmap *ensure(int s, uint32_t id, uint64_t chunk, bool w, unsigned first, unsigned n,
			   int *st, unsigned *misses)
{
	for (int tries = 0; tries < 100; tries++) {
		struct cmap *m = find_map(id, chunk);
		if (m && (!w || m->rw)) {
			struct cache_ctl ctl;
			if (guarded_copy(&ctl, ctl_of(m), sizeof ctl) == 0 &&
			    ctl.state == CACHE_CHUNK_LIVE) {
				bool ok = true;
				for (unsigned b = first; b < first + n && ok; b++)
					ok = (ctl.valid[b / 64] >> (b % 64)) & 1;
				if (ok)
					return m;
			}
		}
		struct chelld_map_reply r;
		(*misses)++;
		*st = do_map(s, id, chunk, w, first, n, &r);
		if (*st == 0 && (r.flags & CHELLD_FILE_BYPASS))
			*st = EREMOTEIO; /* reported as "bypass" by the caller */
		if (*st)
			return NULL;
	}
	*st = EAGAIN;
	return NULL;
}

/* read:ID:OFF:LEN:OUT / write:ID:OFF:IN through the mappings; a hit that
 * finds the chunk revoked after the copy is retried through MAP. */
static int op_io(int s, bool write, char *args)
{
	char *ids = strtok(args, ":"), *offs = strtok(NULL, ":");
	char *third = strtok(NULL, ":"), *fourth = strtok(NULL, ":");
	if (!ids || !offs || !third || (!write && !fourth)) {
		fprintf(stderr, "chelld_client: bad read/write operation\n");
		exit(2);
	}
	uint32_t id = (uint32_t)strtoul(ids, NULL, 0);
	uint64_t off = strtoull(offs, NULL, 0), len;
	uint8_t *buf;
	const char *op = write ? "write" : "read";
	if (write) {
		FILE *in = fopen(third, "rb");
		if (!in) {
			printf("%s local=%s\n", op, chelld_errname(errno));
			return 0;
		}
		fseek(in, 0, SEEK_END);
		len = (uint64_t)ftell(in);
		rewind(in);
		buf = malloc(len + 1);
		if (!buf || fread(buf, 1, len, in) != len)
			len = 0;
		fclose(in);
		/* Extending writes extend the backing file first (layout.h). */
		struct stat sb;
		int fd = id < 4096 ? ownfd[id] - 1 : -1;
		if (fd >= 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < off + len &&
		    ftruncate(fd, (off_t)(off + len)) < 0) {
			printf("%s local=%s\n", op, chelld_errname(errno));
			free(buf);
			return 0;
		}
	} else {
		len = strtoull(third, NULL, 0);
		buf = calloc(1, len + 1);
	}
	unsigned misses = 0, redo = 0;
	int st = 0;
	uint64_t done = 0;
	while (done < len && st == 0) {
		uint64_t pos = off + done, chunk = pos / CACHE_CHUNK_BYTES;
		uint64_t in = pos % CACHE_CHUNK_BYTES, n = CACHE_CHUNK_BYTES - in;
		if (n > len - done)
			n = len - done;
		unsigned first = (unsigned)(in / CACHE_BLOCK_BYTES);
		unsigned nb = (unsigned)((in + n + CACHE_BLOCK_BYTES - 1) / CACHE_BLOCK_BYTES) - first;
		struct cmap *m = ensure(s, id, chunk, write, first, nb, &st, &misses);
		if (!m)
			break;
		struct cache_ctl *ctl = ctl_of(m);
		int sig = write ? guarded_copy(m->p + in, buf + done, n)
				: guarded_copy(buf + done, m->p + in, n);
		if (sig == 0 && write) {
			dirty_table *dt = dirty_table_open(ctl->dirty);
			if (dt)
				dirty_mark(dt, 0, first, nb);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
		} else {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
		}
		uint32_t state = 0;
		if (sig == 0 && guarded_copy(&state, &ctl->state, sizeof state) == 0 &&
		    state == CACHE_CHUNK_LIVE) {
			done += n;
			continue;
		}
		redo++; /* revoked under us: discard (read) or redo (write) */
		munmap(m->p, CACHE_CHUNK_FILE_BYTES);
		close(m->fd);
		m->p = NULL;
	}
	if (st == EREMOTEIO) {
		printf("%s status=OK bypass=1\n", op);
	} else if (st) {
		printf("%s status=%s\n", op, chelld_errname(st));
	} else {
		if (!write) {
			FILE *out = fopen(fourth, "wb");
			if (!out || fwrite(buf, 1, len, out) != len) {
				printf("%s local=%s\n", op, chelld_errname(errno));
				if (out)
					fclose(out);
				free(buf);
				return 0;
			}
			fclose(out);
		}
		printf("%s status=OK bytes=%llu misses=%u redo=%u\n", op, (unsigned long long)len,
		       misses, redo);
	}
	free(buf);
	return 0;
}

/* overwrite:ID:OFF:IN[:READY:GO]: IN's bytes (whole blocks, one chunk)
 * stored the overwrite way of cache/layout.h: MAP with OVERWRITE (no
 * fill), the stores into the still invalid blocks, then (after creating
 * READY and waiting for GO, when given) OVERWRITE. Refused (EAGAIN): the
 * write is redone the normal way (a "write" line follows). */
static int op_overwrite(int s, char *args)
{
	char *ids = strtok(args, ":"), *offs = strtok(NULL, ":"), *inp = strtok(NULL, ":");
	char *ready = strtok(NULL, ":"), *go = strtok(NULL, ":");
	if (!ids || !offs || !inp || (ready && !go)) {
		fprintf(stderr, "chelld_client: bad overwrite operation\n");
		exit(2);
	}
	uint32_t id = (uint32_t)strtoul(ids, NULL, 0);
	uint64_t off = strtoull(offs, NULL, 0);
	uint8_t buf[CACHE_CHUNK_BYTES / 8];
	FILE *in = fopen(inp, "rb");
	size_t len = in ? fread(buf, 1, sizeof buf, in) : 0;
	if (in)
		fclose(in);
	uint64_t chunk = off / CACHE_CHUNK_BYTES, at = off % CACHE_CHUNK_BYTES;
	if (!len || len % CACHE_BLOCK_BYTES || at % CACHE_BLOCK_BYTES || at + len > CACHE_CHUNK_BYTES) {
		printf("overwrite local=EINVAL\n");
		return 0;
	}
	struct stat sb;
	int fd = id < 4096 ? ownfd[id] - 1 : -1;
	if (fd >= 0 && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size < off + len &&
	    ftruncate(fd, (off_t)(off + len)) < 0) {
		printf("overwrite local=%s\n", chelld_errname(errno));
		return 0;
	}
	unsigned first = (unsigned)(at / CACHE_BLOCK_BYTES), nb = (unsigned)(len / CACHE_BLOCK_BYTES);
	struct chelld_map_reply r;
	int st = do_map(s, id, chunk, CHELLD_MAP_WRITE | CHELLD_MAP_OVERWRITE, first, nb, &r);
	if (st < 0)
		return breakdown("map");
	struct cmap *m = st ? NULL : find_map(id, chunk);
	struct cache_ctl ctl;
	if (!m || guarded_copy(&ctl, ctl_of(m), sizeof ctl) != 0 || ctl.state != CACHE_CHUNK_LIVE) {
		printf("overwrite status=%s\n", st ? chelld_errname(st) : "ENOENT");
		return 0;
	}
	for (unsigned b = first; b < first + nb; b++)
		if ((ctl.valid[b / 64] >> (b % 64)) & 1) {
			printf("overwrite local=VALID\n"); /* the normal way would do */
			return 0;
		}
	int sig = guarded_copy(m->p + at, buf, len);
	if (ready) {
		FILE *f = fopen(ready, "w");
		if (f)
			fclose(f);
		struct timespec ts = {0, 5 * 1000000L};
		while (access(go, F_OK) < 0)
			nanosleep(&ts, NULL);
	}
	struct chelld_overwrite o = {0};
	chelld_hdr_init(&o.h, CHELLD_MSG_OVERWRITE, sizeof o, ++seq);
	o.file_id = id;
	o.slot = ctl.slot;
	o.chunk = chunk;
	o.incarnation = ctl.incarnation;
	o.first_block = first;
	o.nblocks = nb;
	struct chelld_rhdr rr;
	if (chelld_call(s, &o, sizeof o, -1, &rr, sizeof rr) < 0)
		return breakdown("overwrite");
	printf("overwrite status=%s fault=%d\n", rr.status ? chelld_errname(rr.status) : "OK", sig);
	if (rr.status == EAGAIN) {
		char redo[64];
		snprintf(redo, sizeof redo, "%u:%llu:", id, (unsigned long long)off);
		char *a = malloc(strlen(redo) + strlen(inp) + 1);
		if (!a)
			exit(3);
		strcpy(a, redo);
		strcat(a, inp);
		int rc = op_io(s, true, a);
		free(a);
		return rc;
	}
	return 0;
}

/* peek:ID:CHUNK:OFF / poke:ID:CHUNK:OFF:VALUE on the mapping as it is,
 * without the protocol: what a stale mapping shows, or how it faults. */
static int op_raw_access(bool poke, char *args)
{
	char *ids = strtok(args, ":"), *chunks = strtok(NULL, ":"), *offs = strtok(NULL, ":");
	char *vals = strtok(NULL, ":");
	if (!ids || !chunks || !offs || (poke && !vals)) {
		fprintf(stderr, "chelld_client: bad peek/poke operation\n");
		exit(2);
	}
	const char *op = poke ? "poke" : "peek";
	struct cmap *m = find_map((uint32_t)strtoul(ids, NULL, 0), strtoull(chunks, NULL, 0));
	if (!m) {
		printf("%s local=ENOENT\n", op);
		return 0;
	}
	uint64_t off = strtoull(offs, NULL, 0);
	uint8_t v = poke ? (uint8_t)strtoul(vals, NULL, 0) : 0;
	int sig = poke ? guarded_copy(m->p + off, &v, 1) : guarded_copy(&v, m->p + off, 1);
	if (sig)
		printf("%s fault=%s\n", op, signame(sig));
	else
		printf("%s value=%u\n", op, v);
	return 0;
}

/* state:ID:CHUNK - the control page through the mapping. */
static int op_state(char *args)
{
	char *ids = strtok(args, ":"), *chunks = strtok(NULL, ":");
	struct cmap *m = ids && chunks ? find_map((uint32_t)strtoul(ids, NULL, 0),
						  strtoull(chunks, NULL, 0))
				       : NULL;
	if (!m) {
		printf("state local=ENOENT\n");
		return 0;
	}
	struct cache_ctl ctl;
	int sig = guarded_copy(&ctl, ctl_of(m), sizeof ctl);
	if (sig) {
		printf("state fault=%s\n", signame(sig));
		return 0;
	}
	unsigned valid = 0, dirty = 0;
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++)
		valid += (unsigned)__builtin_popcountll(ctl.valid[w]);
	dirty_table *dt = dirty_table_open(ctl_of(m)->dirty);
	for (unsigned b = 0; dt && b < CACHE_BLOCKS; b++)
		dirty += dirty_state(dt, 0, b) != BLK_CLEAN;
	printf("state state=%u slot=%u cnode=%u file_chunk=%llu incarnation=%llu valid=%u dirty=%u\n",
	       ctl.state, ctl.slot, ctl.cnode, (unsigned long long)ctl.file_chunk,
	       (unsigned long long)ctl.incarnation, valid, dirty);
	return 0;
}

/* ctrunc:ID:CHUNK:SIZE */
static int op_ctrunc(char *args)
{
	char *ids = strtok(args, ":"), *chunks = strtok(NULL, ":"), *sizes = strtok(NULL, ":");
	struct cmap *m = ids && chunks ? find_map((uint32_t)strtoul(ids, NULL, 0),
						  strtoull(chunks, NULL, 0))
				       : NULL;
	if (!m || !sizes) {
		printf("ctrunc local=ENOENT\n");
		return 0;
	}
	if (ftruncate(m->fd, (off_t)strtoull(sizes, NULL, 0)) < 0)
		printf("ctrunc local=%s\n", chelld_errname(errno));
	else
		printf("ctrunc done=1\n");
	return 0;
}

/* sync:ID, truncate:ID:SIZE, close:ID: bare replies. */
static int op_simple(int s, const char *op, char *args)
{
	char *ids = strtok(args, ":"), *arg = strtok(NULL, ":");
	uint32_t id = ids ? (uint32_t)strtoul(ids, NULL, 0) : 0;
	struct chelld_rhdr r;
	int rc;
	if (strcmp(op, "sync") == 0) {
		struct chelld_sync m = {0};
		chelld_hdr_init(&m.h, CHELLD_MSG_SYNC, sizeof m, ++seq);
		m.file_id = id;
		rc = chelld_call(s, &m, sizeof m, -1, &r, sizeof r);
	} else if (strcmp(op, "truncate") == 0) {
		struct chelld_truncate m = {0};
		chelld_hdr_init(&m.h, CHELLD_MSG_TRUNCATE, sizeof m, ++seq);
		m.file_id = id;
		m.size = arg ? strtoull(arg, NULL, 0) : 0;
		rc = chelld_call(s, &m, sizeof m, -1, &r, sizeof r);
	} else {
		struct chelld_close m = {0};
		chelld_hdr_init(&m.h, CHELLD_MSG_CLOSE, sizeof m, ++seq);
		m.file_id = id;
		m.counts.read_hits = 1; /* so the tests see counts arrive */
		rc = chelld_call(s, &m, sizeof m, -1, &r, sizeof r);
	}
	if (rc < 0)
		return breakdown(op);
	if (!show_status(op, &r))
		printf("\n");
	return 0;
}

/* flush:ID|all[:drop|bypass] */
static int op_flush(int s, char *args)
{
	char *ids = strtok(args, ":"), *how = strtok(NULL, ":");
	struct chelld_flush m = {0};
	struct chelld_flush_reply r;
	chelld_hdr_init(&m.h, CHELLD_MSG_FLUSH, sizeof m, ++seq);
	m.file_id = !ids || strcmp(ids, "all") == 0 ? CHELLD_ALL_FILES
						     : (uint32_t)strtoul(ids, NULL, 0);
	m.flags = !how ? 0 : strcmp(how, "drop") == 0 ? CHELLD_FLUSH_DROP
			 : strcmp(how, "bypass") == 0 ? CHELLD_FLUSH_BYPASS : 0;
	if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
		return breakdown("flush");
	if (!show_status("flush", &r.r))
		printf(" blocks=%llu bytes=%llu dropped=%u files=%u\n",
		       (unsigned long long)r.blocks_written, (unsigned long long)r.bytes_written,
		       r.chunks_dropped, r.files);
	return 0;
}

static int op_file_stat(int s, char *args)
{
	struct chelld_file_stat m = {0};
	static struct chelld_file_stat_reply r;
	chelld_hdr_init(&m.h, CHELLD_MSG_FILE_STAT, sizeof m, ++seq);
	m.index = args ? (uint32_t)strtoul(args, NULL, 0) : 0;
	if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
		return breakdown("fstat");
	if (!show_status("fstat", &r.r))
		printf(" cnode=%u flags=%u size=%llu chunks=%u clients=%u valid=%llu dirty=%llu "
		       "fills=%llu fill_bytes=%llu evictions=%llu wb_bytes=%llu read_hits=%llu "
		       "path=%s\n",
		       r.cnode, r.flags, (unsigned long long)r.size, r.chunks, r.clients,
		       (unsigned long long)r.valid_blocks, (unsigned long long)r.dirty_blocks,
		       (unsigned long long)r.fills, (unsigned long long)r.fill_bytes,
		       (unsigned long long)r.evictions, (unsigned long long)r.writeback_bytes,
		       (unsigned long long)r.counts.read_hits, r.path);
	return 0;
}

static int op_check(int s)
{
	struct chelld_check m = {0};
	struct chelld_check_reply r;
	chelld_hdr_init(&m.h, CHELLD_MSG_CHECK, sizeof m, ++seq);
	if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
		return breakdown("check");
	if (!show_status("check", &r.r))
		printf(" chunks=%llu cnodes=%llu detail=\"%s\"\n", (unsigned long long)r.chunks_checked,
		       (unsigned long long)r.cnodes_checked, r.detail);
	return 0;
}

static int op_open(int s, const char *op, char *args, int nofd, uint32_t *last)
{
	char *path = strtok(args, ":");
	char *mode = nofd ? NULL : strtok(NULL, ":");
	char *fdpath = nofd ? NULL : strtok(NULL, ":");
	if (!path || (!nofd && !mode)) {
		fprintf(stderr, "chelld_client: bad operation '%s'\n", op);
		exit(2);
	}
	int fd = -1;
	if (!nofd) {
		int fl = strcmp(mode, "rw") == 0   ? O_RDWR
			 : strcmp(mode, "wo") == 0 ? O_WRONLY
			 : strcmp(mode, "opath") == 0 ? O_PATH
						      : O_RDONLY;
		fd = open(fdpath ? fdpath : path, fl | O_CLOEXEC);
		if (fd < 0) {
			printf("open local=%s\n", chelld_errname(errno));
			return 0;
		}
	}
	static struct chelld_open m;
	memset(&m, 0, sizeof m);
	chelld_hdr_init(&m.h, CHELLD_MSG_OPEN_FILE, sizeof m, ++seq);
	snprintf(m.path, sizeof m.path, "%s", path);
	struct chelld_open_reply r;
	int rc = chelld_call(s, &m, sizeof m, fd, &r, sizeof r);
	if (rc < 0)
		return breakdown("open");
	/* Keep the descriptor: extending writes go through it. */
	if (r.r.status == 0 && r.r.h.type == (CHELLD_MSG_OPEN_FILE | CHELLD_REPLY) &&
	    r.file_id < 4096 && fd >= 0) {
		if (ownfd[r.file_id])
			close(ownfd[r.file_id] - 1);
		ownfd[r.file_id] = fd + 1;
	} else if (fd >= 0) {
		close(fd);
	}
	if (show_status("open", &r.r))
		return 0;
	if (r.r.status == 0) {
		*last = r.file_id;
		printf(" id=%u access=%s%s size=%llu bypass=%u", r.file_id,
		       r.access & CHELLD_ACC_READ ? "r" : "", r.access & CHELLD_ACC_WRITE ? "w" : "",
		       (unsigned long long)r.size, r.flags & CHELLD_FILE_BYPASS ? 1 : 0);
	} else if (r.r.h.type == (CHELLD_MSG_OPEN_FILE | CHELLD_REPLY)) {
		printf(" detail=\"%s\"", r.detail);
	}
	printf("\n");
	return 0;
}

static int op_raw(int s, const char *kind)
{
	static char buf[CHELLD_MSG_MAX + 256];
	memset(buf, 0, sizeof buf);
	struct chelld_stats *st = (struct chelld_stats *)buf;
	chelld_hdr_init(&st->h, CHELLD_MSG_STATS, sizeof *st, ++seq);
	size_t len = sizeof *st;
	int fd = -1;
	if (strcmp(kind, "short") == 0)
		len = 8;
	else if (strcmp(kind, "badmagic") == 0)
		st->h.magic = 0xdeadbeef;
	else if (strcmp(kind, "oversize") == 0)
		len = sizeof buf, st->h.length = (uint32_t)len;
	else if (strcmp(kind, "unknown") == 0)
		st->h.type = 99;
	else if (strcmp(kind, "badlen") == 0)
		st->h.length = 1000;
	else if (strcmp(kind, "wrongsize") == 0)
		st->h.type = CHELLD_MSG_MAP;
	else if (strcmp(kind, "badversion") == 0)
		st->h.version = 9;
	else if (strcmp(kind, "fd-on-stats") == 0)
		fd = 0;
	else if (strcmp(kind, "garbage") == 0) {
		for (size_t i = 0; i < 300; i++)
			buf[i] = (char)(i * 37 + 11);
		len = 300;
	} else {
		fprintf(stderr, "chelld_client: unknown raw kind '%s'\n", kind);
		exit(2);
	}
	if (chelld_send(s, buf, len, fd) < 0)
		return breakdown("raw");
	char rb[CHELLD_MSG_MAX + 1];
	long n = chelld_recv(s, rb, sizeof rb);
	if (n < 0)
		return breakdown("raw");
	const struct chelld_rhdr *r = (const void *)rb;
	if ((size_t)n < sizeof *r || r->h.magic != CHELLD_MAGIC || r->h.length != (uint32_t)n) {
		errno = EPROTO;
		return breakdown("raw");
	}
	if (!show_status("raw", r))
		printf(" type=0x%x\n", r->h.type);
	return 0;
}

/* Replace a leading "last" in the arguments by the last file id. */
static char *subst_last(char *rest, uint32_t last)
{
	static char buf[8192];
	if (!rest)
		return (char *)"";
	if (strncmp(rest, "last", 4) == 0 && (rest[4] == ':' || rest[4] == '\0')) {
		snprintf(buf, sizeof buf, "%u%s", last, rest + 4);
		return buf;
	}
	return rest;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc < 2) {
		fprintf(stderr, "usage: chelld_client SOCKET OP...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sigaction sa = {.sa_handler = on_fault};
	sigaction(SIGBUS, &sa, NULL);
	sigaction(SIGSEGV, &sa, NULL);
	int s = chelld_connect(argv[1]);
	if (s < 0)
		return breakdown("connect");
	uint32_t last = 0;
	for (int i = 2; i < argc; i++) {
		char *op = strdup(argv[i]);
		char *name = strtok(op, ":");
		char *rest = strtok(NULL, "");
		int rc = 0;
		if (!name) {
			rc = 2;
		} else if (strcmp(name, "hello") == 0) {
			struct chelld_hello m = {0};
			struct chelld_hello_reply r;
			chelld_hdr_init(&m.h, CHELLD_MSG_HELLO, sizeof m, ++seq);
			m.version = rest ? (uint32_t)strtoul(rest, NULL, 0) : CHELLD_VERSION;
			int afd = -1;
			if (chelld_call_fd(s, &m, sizeof m, -1, &r, sizeof r, &afd) < 0)
				rc = breakdown("hello");
			else {
				if (!show_status("hello", &r.r))
					printf(" version=%u chunk=%u slots=%u append=%llu access_fd=%d\n",
					       r.version, r.chunk_size, r.slots,
					       (unsigned long long)r.append_threshold, afd >= 0);
			}
			if (afd >= 0)
				close(afd);
		} else if (strcmp(name, "open") == 0 || strcmp(name, "open-nofd") == 0) {
			rc = op_open(s, argv[i], rest ? rest : "", strcmp(name, "open-nofd") == 0, &last);
		} else if (strcmp(name, "map") == 0) {
			char *id = strtok(rest, ":"), *chunk = strtok(NULL, ":"), *rw = strtok(NULL, ":");
			char *first = strtok(NULL, ":"), *nb = strtok(NULL, ":");
			if (!id || !chunk || !rw) {
				fprintf(stderr, "chelld_client: bad operation '%s'\n", argv[i]);
				return 2;
			}
			struct chelld_map_reply r;
			int st = do_map(s, strcmp(id, "last") == 0 ? last : (uint32_t)strtoul(id, NULL, 0),
					strtoull(chunk, NULL, 0), rw[0] == 'w',
					first ? (unsigned)strtoul(first, NULL, 0) : 0,
					nb ? (unsigned)strtoul(nb, NULL, 0) : 0, &r);
			if (st < 0)
				rc = breakdown("map");
			else if (!show_status("map", &r.r))
				printf(" size=%llu offset=%llu length=%llu chunk=%u slot=%u acc=%s%s "
				       "bypass=%u\n",
				       (unsigned long long)r.file_size,
				       (unsigned long long)r.backing_offset,
				       (unsigned long long)r.length, r.chunk_size, r.slot,
				       r.access & CHELLD_ACC_READ ? "r" : "",
				       r.access & CHELLD_ACC_WRITE ? "w" : "",
				       r.flags & CHELLD_FILE_BYPASS ? 1 : 0);
		} else if (strcmp(name, "read") == 0 || strcmp(name, "write") == 0) {
			rc = op_io(s, name[0] == 'w', subst_last(rest, last));
		} else if (strcmp(name, "overwrite") == 0) {
			rc = op_overwrite(s, subst_last(rest, last));
		} else if (strcmp(name, "peek") == 0 || strcmp(name, "poke") == 0) {
			rc = op_raw_access(name[1] == 'o', subst_last(rest, last));
		} else if (strcmp(name, "ctrunc") == 0) {
			rc = op_ctrunc(subst_last(rest, last));
		} else if (strcmp(name, "state") == 0) {
			rc = op_state(subst_last(rest, last));
		} else if (strcmp(name, "sync") == 0 || strcmp(name, "truncate") == 0 ||
			   strcmp(name, "close") == 0) {
			rc = op_simple(s, name, subst_last(rest, last));
		} else if (strcmp(name, "flush") == 0) {
			rc = op_flush(s, subst_last(rest, last));
		} else if (strcmp(name, "fstat") == 0) {
			rc = op_file_stat(s, rest);
		} else if (strcmp(name, "check") == 0) {
			rc = op_check(s);
		} else if (strcmp(name, "stats") == 0) {
			struct chelld_stats m = {0};
			struct chelld_stats_reply r;
			chelld_hdr_init(&m.h, CHELLD_MSG_STATS, sizeof m, ++seq);
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("stats");
			else {
				if (!show_status("stats", &r.r))
					printf(" pid=%u clients=%u requests=%llu opens=%llu opens_refused=%llu "
				       "maps=%llu maps_refused=%llu malformed=%llu slots=%u used=%u used_pages=%u "
				       "dirty_chunks=%u dirty_blocks=%llu cnodes=%u fills=%llu "
				       "fill_bytes=%llu evictions=%llu revocations=%llu wb_ops=%llu "
				       "wb_bytes=%llu syncs=%llu truncates=%llu bypassed=%llu "
				       "outside=%llu cleaner_passes=%llu throttle=%llu read_hits=%llu "
				       "policy=%u\n",
				       r.pid, r.clients, (unsigned long long)r.requests,
				       (unsigned long long)r.opens, (unsigned long long)r.opens_refused,
				       (unsigned long long)r.maps, (unsigned long long)r.maps_refused,
				       (unsigned long long)r.malformed, r.slots, r.slots_used, r.used_pages,
				       r.dirty_chunks, (unsigned long long)r.dirty_blocks, r.cnodes,
				       (unsigned long long)r.fills, (unsigned long long)r.fill_bytes,
				       (unsigned long long)r.evictions, (unsigned long long)r.revocations,
				       (unsigned long long)r.writeback_ops,
				       (unsigned long long)r.writeback_bytes, (unsigned long long)r.syncs,
				       (unsigned long long)r.truncates, (unsigned long long)r.bypassed,
				       (unsigned long long)r.outside_changes,
				       (unsigned long long)r.cleaner_passes,
				       (unsigned long long)r.throttle_waits,
				       (unsigned long long)r.counts.read_hits, r.policy);
			}
		} else if (strcmp(name, "bye") == 0) {
			struct chelld_bye m = {0};
			struct chelld_rhdr r;
			chelld_hdr_init(&m.h, CHELLD_MSG_BYE, sizeof m, ++seq);
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("bye");
			else {
				if (!show_status("bye", &r))
					printf("\n");
			}
		} else if (strcmp(name, "wait") == 0) {
			struct timespec ts = {0, 5 * 1000000L};
			while (rest && access(rest, F_OK) < 0)
				nanosleep(&ts, NULL);
		} else if (strcmp(name, "sleep") == 0) {
			long ms = rest ? strtol(rest, NULL, 10) : 0;
			struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		} else if (strcmp(name, "raw") == 0) {
			rc = op_raw(s, rest ? rest : "");
		} else {
			fprintf(stderr, "chelld_client: unknown operation '%s'\n", argv[i]);
			rc = 2;
		}
		free(op);
		if (rc)
			return rc;
	}
	close(s);
	return 0;
}
