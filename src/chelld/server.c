/* SPDX-License-Identifier: MIT */
/*
 * The request loop: a pool of worker threads (--workers) on one epoll set
 * (listening socket, a signalfd for SIGTERM/SIGINT, every client),
 * connections, message parsing, and the small requests (STATS, PATH,
 * BYE); the data path's requests are in datapath.c, the others in ops.c.
 *
 * Clients are registered EPOLLONESHOT: one worker at a time serves a
 * client, one message, and re-arms it, so a client's requests stay in
 * order and a busy client cannot starve the others. A worker holds the
 * cache lock while it serves (shared with the cleaner thread, cleaner.c);
 * the engine drops it for device I/O (fills, evictions' write-backs) with
 * the slot marked, so a miss that waits for the backing store holds up
 * only its own client, while the other workers serve the rest.
 * Replies are sent non-blocking: a client that does not read its replies
 * is disconnected rather than allowed to stall a worker.
 *
 * Graceful stop: the worker that reads the signal sets `quit` and makes an
 * eventfd readable (never read: level-triggered, it wakes every worker, and
 * each returns); then the main thread closes and unlinks the listening
 * socket (no new clients), serves every request already queued on each
 * client socket, closes the clients, writes back what is dirty and
 * returns.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sys/mman.h>

#include "chelld/modes.h"
#include "common/fdpass.h"

#define MAX_CLIENTS 1024
#define DRAIN_MAX 10000 /* requests served per client while stopping */

static uint64_t now_ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)(t.tv_sec - t0->tv_sec) * 1000u +
	       (uint64_t)((t.tv_nsec - t0->tv_nsec) / 1000000);
}

static void client_close(struct server *s, struct client *c)
{
	for (struct client **p = &s->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	/* A client that vanished closes every file it had registered. */
	while (c->nregs)
		client_unregister(s, c, &c->regs[c->nregs - 1], true);
	free(c->regs);
	if (c->access.flags)
		munmap(c->access.flags, c->access.nchunks);
	epoll_ctl(s->ep, EPOLL_CTL_DEL, c->sock, NULL);
	close(c->sock);
	s->nclients--;
	chelld_log("client %llu closed (pid %d)", (unsigned long long)c->serial, (int)c->pid);
	free(c);
}

static void accept_one(struct server *s)
{
	int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return; /* EAGAIN, or the peer went away before we got to it */
	struct ucred cr = {0};
	socklen_t cl = sizeof cr;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || s->nclients >= MAX_CLIENTS) {
		chelld_log("refusing a connection (pid %d): %s", (int)cr.pid,
			   s->nclients >= MAX_CLIENTS ? "too many clients" : "no peer credentials");
		close(fd);
		return;
	}
	struct client *c = calloc(1, sizeof *c);
	if (!c) {
		close(fd);
		return;
	}
	c->sock = fd;
	c->serial = ++s->st.clients_total;
	c->pid = cr.pid;
	c->uid = cr.uid;
	c->gid = cr.gid;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = c};
	if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		close(fd);
		free(c);
		return;
	}
	c->next = s->clients;
	s->clients = c;
	s->nclients++;
	chelld_log("client %llu connected: pid %d uid %d gid %d", (unsigned long long)c->serial,
		   (int)cr.pid, (int)cr.uid, (int)cr.gid);
}

bool chelld_reply_fds(struct client *c, void *msg, size_t len, uint16_t type, uint32_t seq,
		      int status, const int *fds, int nfds)
{
	struct chelld_rhdr *r = msg;
	chelld_hdr_init(&r->h, type | CHELLD_REPLY, (uint32_t)len, seq);
	r->status = status;
	if (fdpass_sendv(c->sock, msg, len, fds, nfds, MSG_DONTWAIT) < 0) {
		chelld_log("client %llu: cannot send a reply, dropping it", (unsigned long long)c->serial);
		return false;
	}
	return true;
}

bool chelld_reply(struct client *c, void *msg, size_t len, uint16_t type, uint32_t seq,
		  int status, int fd)
{
	return chelld_reply_fds(c, msg, len, type, seq, status, &fd, fd >= 0 ? 1 : 0);
}

static bool reply(struct client *c, void *msg, size_t len, uint16_t type, uint32_t seq, int status)
{
	return chelld_reply(c, msg, len, type, seq, status, -1);
}

static bool reply_error(struct server *s, struct client *c, uint32_t req_type, uint32_t seq,
			int status, const char *why)
{
	struct chelld_error_reply e = {0};
	s->st.malformed++;
	e.req_type = req_type;
	strncpy(e.detail, why, sizeof e.detail - 1);
	chelld_log("client %llu (pid %d uid %d): bad request type %u: %s",
		   (unsigned long long)c->serial, (int)c->pid, (int)c->uid, req_type, why);
	return reply(c, &e, sizeof e, CHELLD_MSG_ERROR, seq, status);
}

static size_t request_size(uint16_t type)
{
	switch (type) {
	case CHELLD_MSG_HELLO: return sizeof(struct chelld_hello);
	case CHELLD_MSG_OPEN_FILE: return sizeof(struct chelld_open);
	case CHELLD_MSG_MAP: return sizeof(struct chelld_map);
	case CHELLD_MSG_STATS: return sizeof(struct chelld_stats);
	case CHELLD_MSG_PATH: return sizeof(struct chelld_path);
	case CHELLD_MSG_BYE: return sizeof(struct chelld_bye);
	case CHELLD_MSG_SYNC: return sizeof(struct chelld_sync);
	case CHELLD_MSG_TRUNCATE: return sizeof(struct chelld_truncate);
	case CHELLD_MSG_FLUSH: return sizeof(struct chelld_flush);
	case CHELLD_MSG_CLOSE: return sizeof(struct chelld_close);
	case CHELLD_MSG_FILE_STAT: return sizeof(struct chelld_file_stat);
	case CHELLD_MSG_CHECK: return sizeof(struct chelld_check);
	case CHELLD_MSG_OVERWRITE: return sizeof(struct chelld_overwrite);
	case CHELLD_MSG_INVAL: return sizeof(struct chelld_inval);
	case CHELLD_MSG_SET_MODE: return sizeof(struct chelld_set_mode);
	case CHELLD_MSG_PIN: return sizeof(struct chelld_pin);
	case CHELLD_MSG_RULE: return sizeof(struct chelld_rule);
	default: return 0;
	}
}

struct reg *client_reg(struct client *c, uint32_t file_id)
{
	for (uint32_t i = 0; i < c->nregs; i++)
		if (c->regs[i].cnode == file_id)
			return &c->regs[i];
	return NULL;
}

void client_unregister(struct server *s, struct client *c, struct reg *r, bool all)
{
	struct cfile *f = cfile_get(&s->engine, r->cnode);
	do {
		r->count--;
		if (f)
			cfile_unregister(&s->engine, f);
	} while (all && r->count);
	if (r->count)
		return;
	if (f && f->nconns)
		f->nconns--;
	if (r->fd >= 0)
		close(r->fd);
	*r = c->regs[--c->nregs];
}

/* Fold every client's access table into the replacement policy: a byte a
 * client set on a hit becomes a reference. (Called before each victim.) */
static void fold_access(void *arg)
{
	struct server *s = arg;
	struct engine *k = &s->engine;
	for (struct client *c = s->clients; c; c = c->next) {
		if (!c->access.flags)
			continue;
		/* a byte per 64 KB group: eight at a time, most words are 0 */
		for (uint32_t i = 0; i + 8 <= c->access.nchunks; i += 8) {
			uint64_t w;
			memcpy(&w, c->access.flags + i, sizeof w);
			if (!w)
				continue;
			for (uint32_t j = i; j < i + 8; j++)
				if (access_test_clear(&c->access, j)) {
					uint32_t slot = j / CHELLD_ACCESS_GROUPS;
					policy_touch(k->pol, slot);
					k->slots[slot].hot |= 1u << (j % CHELLD_ACCESS_GROUPS);
				}
		}
	}
}

static bool do_stats(struct server *s, struct client *c, const struct chelld_stats *m)
{
	struct chelld_stats_reply r = s->st;
	struct engine *k = &s->engine;
	struct meta_stats ms;
	meta_stats(k->m, &ms);
	r.pid = (uint32_t)getpid();
	r.clients = s->nclients;
	r.backings = (uint32_t)s->cfg->nbackings;
	r.cache_size = k->pool.capacity;
	r.used_pages = (uint32_t)(k->used > UINT32_MAX ? UINT32_MAX : k->used);
	r.workers = s->cfg->workers;
	r.fills_inflight_max = k->fills_inflight_max;
	r.uptime_ms = now_ms_since(&s->start);
	r.slots = k->nslots;
	r.slots_used = ms.chunks_used;
	r.cnodes = ms.cnodes;
	r.dirty_chunks = 0;
	r.dirty_blocks = 0;
	for (uint32_t i = 0; i < k->nslots; i++)
		if (k->slots[i].map) {
			unsigned d = chunk_ndirty(&k->slots[i]);
			r.dirty_blocks += d;
			r.dirty_chunks += d > 0;
		}
	return reply(c, &r, sizeof r, CHELLD_MSG_STATS, m->h.seq, 0);
}

static bool do_path(struct server *s, struct client *c, const struct chelld_path *m)
{
	struct chelld_path_reply r = {0};
	int st = 0;
	const char *p = NULL;
	if (m->index == 0)
		p = s->cfg->pool;
	else if (m->index <= (uint32_t)s->cfg->nbackings)
		p = s->cfg->backings[m->index - 1];
	else
		st = ERANGE;
	if (p)
		snprintf(r.path, sizeof r.path, "%s", p);
	return reply(c, &r, sizeof r, CHELLD_MSG_PATH, m->h.seq, st);
}

/* Receive and serve one message. Returns 1 served, 0 nothing queued
 * (EAGAIN), -1 the client is gone or was dropped (already closed). */
static int serve_one(struct server *s, struct client *c)
{
	char buf[CHELLD_MSG_MAX + 1] __attribute__((aligned(8))); /* per worker */
	/* every descriptor that came along is in `in`, so none can leak */
	struct fdpass_in in;
	ssize_t n = fdpass_recv(c->sock, buf, sizeof buf, MSG_DONTWAIT, &in);
	if (n == -EAGAIN || n == -EINTR)
		return 0;
	if (n <= 0) {
		fdpass_close(in.fds, 0, in.nfds);
		client_close(s, c);
		return -1;
	}
	s->st.requests++;
	int *fds = in.fds, nfds = in.nfds;

	struct chelld_hdr h = {0};
	memcpy(&h, buf, (size_t)n < sizeof h ? (size_t)n : sizeof h);
	const char *bad = NULL;
	int st = EBADMSG;
	size_t want = request_size(h.type);
	if (in.trunc & MSG_TRUNC)
		st = EMSGSIZE, bad = "oversized message";
	else if ((size_t)n < sizeof h)
		bad = "short message";
	else if (h.magic != CHELLD_MAGIC)
		bad = "bad magic";
	else if (h.length != (uint32_t)n)
		bad = "length field does not match the message";
	else if (want == 0)
		st = ENOSYS, bad = "unknown message type";
	else if ((size_t)n != want)
		bad = "wrong size for the message type";
	else if (h.version != CHELLD_VERSION && h.type != CHELLD_MSG_HELLO)
		st = EPROTONOSUPPORT, bad = "unsupported protocol version";
	else if (in.trunc & MSG_CTRUNC)
		bad = "too many descriptors";
	else if (nfds > 1 || (nfds == 1 && h.type != CHELLD_MSG_OPEN_FILE))
		st = EBADF, bad = "unexpected descriptor";
	else if (!c->hello && h.type != CHELLD_MSG_HELLO && h.type != CHELLD_MSG_BYE)
		st = EPROTO, bad = "HELLO must come first";

	bool ok;
	if (bad) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		ok = reply_error(s, c, (size_t)n >= sizeof h ? h.type : 0, h.seq, st, bad);
	} else {
		switch (h.type) {
		case CHELLD_MSG_HELLO: ok = do_hello(s, c, (const void *)buf); break;
		case CHELLD_MSG_OPEN_FILE:
			ok = do_open(s, c, (const void *)buf, nfds ? fds[0] : -1);
			break;
		case CHELLD_MSG_MAP: ok = do_map(s, c, (const void *)buf); break;
		case CHELLD_MSG_STATS: ok = do_stats(s, c, (const void *)buf); break;
		case CHELLD_MSG_PATH: ok = do_path(s, c, (const void *)buf); break;
		case CHELLD_MSG_SYNC: ok = do_sync(s, c, (const void *)buf); break;
		case CHELLD_MSG_TRUNCATE: ok = do_truncate(s, c, (const void *)buf); break;
		case CHELLD_MSG_FLUSH: ok = do_flush(s, c, (const void *)buf); break;
		case CHELLD_MSG_CLOSE: ok = do_close(s, c, (const void *)buf); break;
		case CHELLD_MSG_FILE_STAT: ok = do_file_stat(s, c, (const void *)buf); break;
		case CHELLD_MSG_CHECK: ok = do_check(s, c, (const void *)buf); break;
		case CHELLD_MSG_OVERWRITE: ok = do_overwrite(s, c, (const void *)buf); break;
		case CHELLD_MSG_INVAL: ok = do_inval(s, c, (const void *)buf); break;
		case CHELLD_MSG_SET_MODE: ok = do_set_mode(s, c, (const void *)buf); break;
		case CHELLD_MSG_PIN: ok = do_pin(s, c, (const void *)buf); break;
		case CHELLD_MSG_RULE: ok = do_rule(s, c, (const void *)buf); break;
		default: { /* BYE */
			struct chelld_rhdr r = {0};
			const struct chelld_bye *b = (const void *)buf;
			counts_add(&s->st.counts, &b->counts);
			reply(c, &r, sizeof r, CHELLD_MSG_BYE, h.seq, 0);
			ok = false;
		}
		}
	}
	if (!ok) {
		client_close(s, c);
		return -1;
	}
	return 1;
}

static void stop(struct server *s)
{
	chelld_log("stopping: no new connections; finishing the requests of %u client(s)",
		   s->nclients);
	epoll_ctl(s->ep, EPOLL_CTL_DEL, s->lfd, NULL);
	close(s->lfd);
	unlink(s->cfg->sock_path);
	while (s->clients) {
		struct client *c = s->clients;
		int r, budget = DRAIN_MAX;
		/* The budget bounds a client that keeps sending during the stop. */
		while ((r = serve_one(s, c)) == 1 && --budget > 0)
			;
		if (r >= 0)
			client_close(s, c);
	}
	/* Leave the backing files complete: write back what is dirty (what
	 * cannot be written stays in the pool for the next start). */
	uint32_t dirty = engine_dirty_slots(&s->engine);
	if (dirty) {
		uint64_t bytes = 0;
		chelld_log("stopping: writing back %u dirty chunk(s)", dirty);
		wb_file(&s->engine, NULL, NULL, &bytes, NULL);
		chelld_log("stopping: wrote back %llu bytes; %u chunk(s) still dirty",
			   (unsigned long long)bytes, engine_dirty_slots(&s->engine));
	}
	chelld_log("stopped after %llu requests", (unsigned long long)s->st.requests);
}

/* A worker: wait for an event, serve it under the cache lock, re-arm. */
static void *worker(void *arg)
{
	struct server *s = arg;
	for (;;) {
		struct epoll_event ev;
		int n = epoll_wait(s->ep, &ev, 1, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			chelld_log("epoll_wait: %s", strerror(errno));
			break;
		}
		void *p = ev.data.ptr;
		if (n == 0 || p == &s->evfd)
			break; /* stopping */
		pthread_mutex_lock(&s->engine.lock);
		if (s->quit) {
			/* (a client event taken now stays disarmed: stop() drains
			 * every client anyway) */
			pthread_mutex_unlock(&s->engine.lock);
			break;
		}
		if (p == &s->lfd) {
			accept_one(s);
		} else if (p == &s->sfd) {
			struct signalfd_siginfo si;
			if (read(s->sfd, &si, sizeof si) == sizeof si) {
				chelld_log("signal %u from pid %u", si.ssi_signo, si.ssi_pid);
				s->quit = true;
				uint64_t one = 1;
				if (write(s->evfd, &one, sizeof one) != sizeof one)
					chelld_log("cannot wake the workers: %s", strerror(errno));
			}
		} else {
			struct client *c = p;
			if (serve_one(s, c) >= 0) {
				struct epoll_event re = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = c};
				epoll_ctl(s->ep, EPOLL_CTL_MOD, c->sock, &re);
			}
		}
		pthread_mutex_unlock(&s->engine.lock);
	}
	return NULL;
}

int chelld_serve(const struct chelld_config *cfg, int lfd, struct pool *pool)
{
	/* Large: the counters and the cache state live for the whole run. */
	static struct server s;
	s = (struct server){.cfg = cfg, .lfd = lfd, .sfd = -1, .evfd = -1};
	clock_gettime(CLOCK_MONOTONIC, &s.start);
	if (engine_init(&s.engine, cfg, pool, &s.st) < 0) {
		chelld_log("cannot set up the cache: out of memory");
		pool_close(pool);
		return -1;
	}
	s.engine.fold_access = fold_access;
	s.engine.fold_arg = &s;
	char merr[PATH_MAX + 128];
	if (modes_init(&s.engine, merr, sizeof merr) < 0) {
		chelld_log("cannot set up the cache modes: %s", merr);
		modes_fini(&s.engine);
		engine_fini(&s.engine);
		return -1;
	}
	engine_recover(&s.engine);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	/* blocked before any thread starts: every thread inherits the mask */
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	s.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	s.evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s.ep = epoll_create1(EPOLL_CLOEXEC);
	if (s.sfd < 0 || s.ep < 0 || s.evfd < 0) {
		chelld_log("cannot set up the event loop: %s", strerror(errno));
		return -1;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s.lfd};
	epoll_ctl(s.ep, EPOLL_CTL_ADD, lfd, &ev);
	ev.data.ptr = &s.sfd;
	epoll_ctl(s.ep, EPOLL_CTL_ADD, s.sfd, &ev);
	ev.data.ptr = &s.evfd;
	epoll_ctl(s.ep, EPOLL_CTL_ADD, s.evfd, &ev);
	int crc = engine_cleaner_start(&s.engine);
	if (crc < 0) {
		chelld_log("cannot start the cleaner thread: %s", strerror(-crc));
		return -1;
	}
	unsigned nw = cfg->workers ? cfg->workers : 1, started = 1;
	pthread_t *tids = calloc(nw, sizeof *tids);
	for (; tids && started < nw; started++)
		if (pthread_create(&tids[started], NULL, worker, &s) != 0) {
			chelld_log("started only %u of %u workers", started, nw);
			break;
		}
	chelld_log("serving on %s with %u worker(s)", cfg->sock_path, tids ? started : 1);
	worker(&s); /* this thread is worker 0 */
	for (unsigned i = 1; tids && i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	engine_cleaner_stop(&s.engine);
	pthread_mutex_lock(&s.engine.lock);
	stop(&s);
	pthread_mutex_unlock(&s.engine.lock);
	close(s.sfd);
	close(s.evfd);
	close(s.ep);
	modes_fini(&s.engine);
	engine_fini(&s.engine);
	return 0;
}
