/* SPDX-License-Identifier: MIT */
/*
 * A request that may run for a long time (FLUSH writes dirty data back to
 * slow storage) with progress: while its reply is outstanding, a second
 * connection asks STATS four times a second and the caller draws the dirty
 * bytes that remain.
 *
 * The second connection says HELLO before the long request is sent: a
 * daemon that serves requests one at a time could not answer a HELLO
 * during the flush, and a blocking HELLO would stall the progress. Its
 * STATS requests are sent without waiting and their replies read when they
 * come, so such a daemon just shows no figures until the flush is done.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cmd_cache.h"

#define TICK_S 0.25

/* The checks chelld_call makes on a reply (proto.c), for a reply read by
 * hand: 0, or -1 with errno (EPROTO when malformed, the daemon's status). */
static int take_reply(const char *buf, long n, const struct chelld_hdr *rq, void *rep,
		      size_t replen, bool *answered)
{
	const struct chelld_rhdr *r = (const struct chelld_rhdr *)buf;
	if ((size_t)n < sizeof *r || r->h.magic != CHELLD_MAGIC || r->h.length != (uint32_t)n ||
	    r->h.seq != rq->seq) {
		errno = EPROTO;
		return -1;
	}
	memset(rep, 0, replen);
	if (r->h.type == (CHELLD_MSG_ERROR | CHELLD_REPLY)) {
		memcpy(rep, buf, (size_t)n < replen ? (size_t)n : replen);
	} else if (r->h.type != (rq->type | CHELLD_REPLY) || (size_t)n != replen) {
		errno = EPROTO;
		return -1;
	} else {
		memcpy(rep, buf, replen);
	}
	if (answered)
		*answered = true;
	int st = r->status;
	if (st) {
		errno = st;
		return -1;
	}
	return 0;
}

int mgr_call_watch(struct mgr_conn *c, void *req, size_t reqlen,
		   uint16_t type, void *rep, size_t replen, int fd, bool *answered,
		     mgr_watch_fn fn, void *arg)
{
	if (answered)
		*answered = false;
	struct mgr_conn mon;
	bool have_mon = mgr_connect(&mon, c->path) == 0;
	chelld_hdr_init(req, type, (uint32_t)reqlen, ++c->seq);
	if (chelld_send(c->sock, req, reqlen, fd) < 0) {
		int e = errno;
		if (have_mon)
			close(mon.sock);
		errno = e;
		return -1;
	}
	static char buf[CHELLD_MSG_MAX + 1];
	struct chelld_stats sq = {0};
	struct chelld_stats_reply st;
	bool outstanding = false;
	uint64_t dirty = UINT64_MAX;
	double t0 = now_monotonic(), next = t0;
	int rc;
	for (;;) {
		double t = now_monotonic();
		if (have_mon && !outstanding && t >= next) {
			chelld_hdr_init(&sq.h, CHELLD_MSG_STATS, sizeof sq, ++mon.seq);
			if (chelld_send(mon.sock, &sq, sizeof sq, -1) == 0)
				outstanding = true;
			else
				have_mon = false, close(mon.sock);
		}
		if (t >= next) {
			if (fn)
				fn(arg, dirty, t - t0);
			next = t + TICK_S;
		}
		struct pollfd p[2] = {{c->sock, POLLIN, 0}, {have_mon ? mon.sock : -1, POLLIN, 0}};
		int wait_ms = (int)((next - now_monotonic()) * 1000) + 1;
		if (poll(p, 2, wait_ms < 1 ? 1 : wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			rc = -1;
			break;
		}
		if (p[0].revents) {
			long n = chelld_recv(c->sock, buf, sizeof buf);
			rc = n < 0 ? -1 : take_reply(buf, n, req, rep, replen, answered);
			break;
		}
		if (p[1].revents) {
			long n = chelld_recv(mon.sock, buf, sizeof buf);
			if (n >= 0 && take_reply(buf, n, &sq.h, &st, sizeof st, NULL) == 0)
				dirty = st.dirty_blocks * CACHE_BLOCK_BYTES;
			else if (n < 0)
				have_mon = false, close(mon.sock);
			outstanding = false;
		}
	}
	int e = errno;
	/* A STATS reply may still be on its way: just hang up. */
	if (have_mon)
		close(mon.sock);
	errno = e;
	return rc;
}
