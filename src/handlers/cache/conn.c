/* SPDX-License-Identifier: MIT */
/*
 * The connection to the cache manager: one SOCK_SEQPACKET socket per
 * process, made on the first miss and kept for the life of the process.
 *
 * Every exchange is one request and its reply, under one mutex (misses are
 * rare next to hits; chelld serves requests one at a time anyway). The
 * socket is a Chell-internal descriptor (high, hidden from the
 * application's close). A forked child never touches the parent's socket:
 * it closes its copy and connects on its own first miss, and every
 * registration is redone there (the generation changes). A manager that
 * stops or restarts shows up as a failed call: the socket is closed and
 * the next miss reconnects once; if nobody answers, the caller puts the
 * descriptor on the kernel path, and the process says so once on stderr.
 *
 * Only raw system calls are used here (chell/sys.h): the interposed names
 * would route our own descriptors back into Chell.
 */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "cache.h"
#include "common/fdpass.h"

char cache_sock_path[108];
struct cache_hello cache_hello;
uint32_t cache_conn_gen;
access_table cache_access;

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static int sock = -1;
static uint32_t seq;
static uint64_t retry_after_ms;
static bool told;
static char **backings;
static void *access_mem;
static size_t access_len;

#define RETRY_MS 1000      /* after a failed connect, try again this much later */
#define REPLY_TIMEOUT_S 300 /* a manager this slow is treated as gone */

void cache_lock(void)
{
	pthread_mutex_lock(&conn_lock);
}

void cache_unlock(void)
{
	pthread_mutex_unlock(&conn_lock);
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t); /* vDSO: no system call */
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void drop_access_table(void)
{
	if (access_mem)
		munmap(access_mem, access_len);
	access_mem = NULL;
	access_len = 0;
	memset(&cache_access, 0, sizeof(cache_access));
}

static void free_backings(void)
{
	for (char **p = backings; p && *p; p++)
		free(*p);
	free(backings);
	backings = NULL;
}

/*
 * The socket's number names it only in the descriptor table it was made in,
 * and in tables copied from that one afterwards. A thread with a table of
 * its own (unshare(CLONE_FILES), close_range with CLOSE_RANGE_UNSHARE) that
 * connects leaves the socket in its table only, and it goes with that
 * table; a table copied before the connection never had it. There the
 * number is nothing, or another descriptor of Chell's (a reopen for a
 * registration took it: a request sent there fails, and closing it would
 * close that one). So before each use: is this our socket, here (its inode)?
 * If not, the connection is forgotten, never closed (it is not ours in this
 * table), and the caller connects anew in its own table; the generation
 * changes, so registrations are redone on the new connection.
 */
static uint64_t sock_dev, sock_ino;

static bool sock_here(void)
{
	struct stat st;
	if (sys_fstat(sock, &st) == 0 && (uint64_t)st.st_dev == sock_dev &&
	    (uint64_t)st.st_ino == sock_ino)
		return true;
	sock = -1;
	drop_access_table();
	free_backings();
	return false;
}

static void disconnect(void)
{
	if (sock >= 0)
		chell_internal_close(sock);
	sock = -1;
	drop_access_table();
	free_backings();
}

static ssize_t send_msg(const void *msg, size_t len, int fd)
{
	return fdpass_send(sock, msg, len, fd, 0);
}

/* One datagram into buf; the descriptors that came with it into fds
 * (nfds slots, -1 where none came; any beyond are closed). */
static ssize_t recv_msg(void *buf, size_t cap, int *fds, int nfds)
{
	ssize_t n;
	for (int i = 0; i < nfds; i++)
		fds[i] = -1;
	/* Wait for the reply outside the descriptor window (fork and the
	 * application's getrlimit wait for it), then take it inside, so a
	 * descriptor that comes with it is installed even when the application
	 * has used up its RLIMIT_NOFILE (the kernel would drop it: MSG_CTRUNC). */
	struct pollfd pfd = {.fd = sock, .events = POLLIN};
	do
		n = CHELL_SC(SYS_poll, &pfd, 1, REPLY_TIMEOUT_S * 1000, 0, 0, 0);
	while (n == -EINTR);
	if (n == 0)
		return -EAGAIN; /* as the receive timeout (SO_RCVTIMEO) said before */
	if (n < 0)
		return n;
	struct fdpass_in in;
	chell_internal_window_enter();
	n = fdpass_recv(sock, buf, cap, MSG_DONTWAIT, &in);
	chell_internal_window_leave();
	if (n < 0)
		return n;
	int keep = in.nfds < nfds ? in.nfds : nfds;
	fdpass_close(in.fds, keep, in.nfds); /* more than the reply may carry */
	if (n == 0)
		n = -ECONNRESET;
	else if (in.trunc)
		n = -EMSGSIZE;
	if (n < 0)
		fdpass_close(in.fds, 0, keep);
	else
		for (int i = 0; i < keep; i++)
			fds[i] = in.fds[i];
	return n;
}

static void hdr_init(void *msg, uint16_t type, uint32_t length, uint32_t sq)
{
	struct chelld_hdr *h = msg;
	h->magic = CHELLD_MAGIC;
	h->version = CHELLD_VERSION;
	h->type = type;
	h->length = length;
	h->seq = sq;
}

/* The exchange itself, on a connected socket. */
static int call_raw(void *req, size_t reqlen, uint16_t type, int fd, void *rep, size_t replen,
		    int *fds_out, int nfds)
{
	char buf[CHELLD_MSG_MAX + 1] __attribute__((aligned(8)));
	int got[CHELLD_MAP_BATCH];
	int ngot = nfds > 1 ? (nfds < (int)CHELLD_MAP_BATCH ? nfds : (int)CHELLD_MAP_BATCH) : 1;
	hdr_init(req, type, (uint32_t)reqlen, ++seq);
	int r = (int)send_msg(req, reqlen, fd);
	if (r < 0)
		return r;
	ssize_t n = recv_msg(buf, sizeof(buf), got, ngot);
	if (n < 0)
		return (int)n;
	const struct chelld_rhdr *rh = (const struct chelld_rhdr *)buf;
	bool error_reply = (size_t)n >= sizeof(*rh) &&
			   rh->h.type == (CHELLD_MSG_ERROR | CHELLD_REPLY);
	if ((size_t)n < sizeof(*rh) || rh->h.magic != CHELLD_MAGIC || rh->h.length != (uint32_t)n ||
	    rh->h.seq != seq || (!error_reply && (rh->h.type != (type | CHELLD_REPLY) ||
						  (size_t)n != replen))) {
		fdpass_close(got, 0, ngot);
		return -EPROTO; /* out of step with the manager: start over */
	}
	memset(rep, 0, replen);
	memcpy(rep, buf, (size_t)n < replen ? (size_t)n : replen);
	if (error_reply && ((struct chelld_rhdr *)rep)->status == 0)
		((struct chelld_rhdr *)rep)->status = EPROTO;
	for (int i = 0; i < ngot; i++) {
		if (fds_out && i < nfds)
			fds_out[i] = got[i];
		else if (got[i] >= 0)
			sys_close(got[i]);
	}
	return 0;
}

int cache_call_fds(void *req, size_t reqlen, uint16_t type, int fd, void *rep, size_t replen,
		   int *fds_out, int nfds)
{
	for (int i = 0; fds_out && i < nfds; i++)
		fds_out[i] = -1;
	if (sock < 0)
		return -ENOTCONN;
	int r = call_raw(req, reqlen, type, fd, rep, replen, fds_out, nfds);
	if (r < 0) {
		chell_info("cache: lost the cache manager at %s (%s)", cache_sock_path, strerror(-r));
		disconnect();
	}
	return r;
}

int cache_call(void *req, size_t reqlen, uint16_t type, int fd, void *rep, size_t replen,
	       int *fd_out)
{
	return cache_call_fds(req, reqlen, type, fd, rep, replen, fd_out, fd_out ? 1 : 0);
}

static int hello(void)
{
	struct chelld_hello m = {0};
	struct chelld_hello_reply r;
	int tfd;
	m.version = CHELLD_VERSION;
	int e = call_raw(&m, sizeof(m), CHELLD_MSG_HELLO, -1, &r, sizeof(r), &tfd, 1);
	if (e < 0)
		return e;
	if (r.r.status == EPROTONOSUPPORT)
		chell_log("cache: the cache manager at %s speaks protocol version %u, this libchell "
			  "%u: run the chell and chelld of this build (chell cache stop; chell cache start)",
			  cache_sock_path, r.version, CHELLD_VERSION);
	if (r.r.status) {
		if (tfd >= 0)
			sys_close(tfd);
		return -r.r.status;
	}
	if (r.chunk_size != CACHE_CHUNK_BYTES) {
		if (tfd >= 0)
			sys_close(tfd);
		return -EPROTO;
	}
	cache_hello.cache_size = r.cache_size;
	cache_hello.append_threshold = r.append_threshold;
	cache_hello.slots = r.slots;
	cache_hello.flags = r.flags;
	if (tfd >= 0 && r.slots) {
		uint32_t entries = r.slots * CHELLD_ACCESS_GROUPS; /* one per 64 KB (protocol.h) */
		size_t len = access_table_bytes(entries);
		void *p = REAL(mmap64)(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
		if (p != MAP_FAILED) {
			access_mem = p;
			access_len = len;
			access_table_attach(&cache_access, p, entries, false);
		}
	}
	if (tfd >= 0)
		sys_close(tfd);
	return 0;
}

int cache_conn_ensure(void)
{
	if (sock >= 0 && sock_here())
		return (int)cache_conn_gen;
	uint64_t now = now_ms();
	if (retry_after_ms && now < retry_after_ms)
		return -ECONNREFUSED;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, cache_sock_path, sizeof(sa.sun_path));
	/* in the window: the socket is never one of the application's descriptors */
	chell_internal_window_enter();
	int s = (int)CHELL_SC(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, 0, 0, 0);
	if (s >= 0)
		s = chell_internal_fd(s, 1);
	chell_internal_window_leave();
	int e = s;
	if (s >= 0) {
		sock = s;
		struct stat st;
		sock_dev = sock_ino = 0;
		if (sys_fstat(s, &st) == 0) {
			sock_dev = (uint64_t)st.st_dev;
			sock_ino = (uint64_t)st.st_ino;
		}
		struct timeval tv = {.tv_sec = REPLY_TIMEOUT_S};
		CHELL_SC(SYS_setsockopt, sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv), 0);
		do
			e = (int)CHELL_SC(SYS_connect, sock, &sa, sizeof(sa), 0, 0, 0);
		while (e == -EINTR);
		if (e == 0)
			e = hello();
		if (e < 0)
			disconnect();
	}
	if (e < 0) {
		retry_after_ms = now + RETRY_MS;
		if (!told) {
			told = true;
			chell_log("cache: no cache manager answers at %s (%s); files use the kernel "
				  "path (start one with 'chell cache start')",
				  cache_sock_path, strerror(-e));
		}
		return e;
	}
	retry_after_ms = 0;
	if (++cache_conn_gen == 0)
		cache_conn_gen = 1;
	chell_debug("cache: connected to %s (generation %u, %u slots)", cache_sock_path,
		    cache_conn_gen, cache_hello.slots);
	return (int)cache_conn_gen;
}

char **cache_conn_backings(void)
{
	if (backings || sock < 0)
		return backings;
	char **list = calloc(1, sizeof(char *));
	for (uint32_t i = 1; list && i < 4096; i++) {
		struct chelld_path m = {0};
		struct chelld_path_reply r;
		m.index = i;
		if (cache_call(&m, sizeof(m), CHELLD_MSG_PATH, -1, &r, sizeof(r), NULL) < 0) {
			for (char **p = list; *p; p++)
				free(*p);
			free(list);
			return NULL;
		}
		if (r.r.status)
			break; /* ERANGE past the last one */
		char **nl = realloc(list, (i + 1) * sizeof(char *));
		if (!nl)
			break;
		list = nl;
		r.path[sizeof(r.path) - 1] = 0;
		list[i - 1] = strdup(r.path);
		list[i] = NULL;
	}
	backings = list;
	return backings;
}

void cache_conn_after_fork(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	conn_lock = fresh;
	/* The parent's socket and access table stay the parent's (the child's
	 * copy is closed where the forking thread's table has it). */
	if (sock >= 0 && sock_here())
		chell_internal_close(sock);
	sock = -1;
	drop_access_table();
	free_backings();
	if (++cache_conn_gen == 0)
		cache_conn_gen = 1;
	retry_after_ms = 0;
}

void cache_conn_bye(void)
{
	cache_lock();
	if (sock >= 0 && sock_here()) {
		struct chelld_bye m = {0};
		struct chelld_rhdr r;
		cache_map_unreported(&m.counts);
		if (call_raw(&m, sizeof(m), CHELLD_MSG_BYE, -1, &r, sizeof(r), NULL, 0) == 0)
			chell_debug("cache: said goodbye to the manager");
		disconnect();
	}
	cache_unlock();
}

/*
 * The manager is gone (killed, restarting) but the pool exists: the cache
 * may hold dirty data of any file under the backing directories, so the
 * kernel path could serve stale bytes, and a write through it would later
 * be overwritten by the write-back of an older cached block. So a client
 * waits for a manager (the recovery of a restarted one takes a moment) and
 * then gives up with EIO; only when there is no pool at all (nothing was
 * ever cached) is the kernel path exact. Caller does not hold cache_lock.
 */
#define MANAGER_WAIT_MS 30000

bool cache_pool_exists(void)
{
	char meta[sizeof(cache_sock_path) + 16];
	size_t n = strlen(cache_sock_path);
	const char *slash = strrchr(cache_sock_path, '/');
	if (!slash || n == 0)
		return false;
	snprintf(meta, sizeof(meta), "%.*s/%s", (int)(slash - cache_sock_path), cache_sock_path,
		 CACHE_META_NAME);
	struct stat st;
	return sys_fstatat(AT_FDCWD, meta, &st, 0) == 0;
}

int cache_conn_wait(void)
{
	static bool told_wait;
	uint64_t until = now_ms() + MANAGER_WAIT_MS;
	if (!told_wait) {
		told_wait = true;
		chell_log("cache: the cache manager at %s is gone; waiting up to %d s for it "
			  "(cached data may be newer than the backing files)",
			  cache_sock_path, MANAGER_WAIT_MS / 1000);
	}
	for (;;) {
		cache_lock();
		retry_after_ms = 0;
		int gen = cache_conn_ensure();
		cache_unlock();
		if (gen >= 0)
			return gen;
		if (now_ms() >= until) {
			chell_log("cache: no cache manager at %s after %d s: I/O on cached files "
				  "fails with EIO until one runs",
				  cache_sock_path, MANAGER_WAIT_MS / 1000);
			return -EIO;
		}
		struct timespec ts = {0, 50 * 1000 * 1000};
		CHELL_SC(SYS_nanosleep, &ts, NULL, 0, 0, 0, 0);
	}
}
