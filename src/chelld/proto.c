/* SPDX-License-Identifier: MIT */
/* Client side of the chelld protocol: connect, send, receive, one call. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "chelld/protocol.h"
#include "common/fdpass.h"

void chelld_hdr_init(struct chelld_hdr *h, uint16_t type, uint32_t length, uint32_t seq)
{
	h->magic = CHELLD_MAGIC;
	h->version = CHELLD_VERSION;
	h->type = type;
	h->length = length;
	h->seq = seq;
}

int chelld_connect(const char *sock_path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(sock_path) >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, sock_path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

int chelld_send(int sock, const void *msg, size_t len, int fd)
{
	int r = fdpass_send(sock, msg, len, fd, 0);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return 0;
}

/* Receive one datagram; with fd_out, also a descriptor sent with it (one
 * at most: any other is closed). */
static long recv_one(int sock, void *buf, size_t cap, int *fd_out)
{
	struct fdpass_in in;
	ssize_t n = fdpass_recv(sock, buf, cap, 0, &in);
	if (n < 0) {
		errno = (int)-n;
		return -1;
	}
	int keep = fd_out && in.nfds > 0 ? 1 : 0;
	fdpass_close(in.fds, keep, in.nfds);
	if (fd_out)
		*fd_out = keep ? in.fds[0] : -1;
	if (n == 0) {
		errno = ECONNRESET;
		goto fail;
	}
	if (in.trunc) {
		errno = EMSGSIZE;
		goto fail;
	}
	return (long)n;
fail:
	if (keep) {
		close(*fd_out);
		*fd_out = -1;
	}
	return -1;
}

long chelld_recv(int sock, void *buf, size_t cap)
{
	return recv_one(sock, buf, cap, NULL);
}

int chelld_call_fd(int sock, const void *req, size_t reqlen, int fd, void *rep, size_t replen,
		   int *fd_out)
{
	const struct chelld_hdr *rq = req;
	char buf[CHELLD_MSG_MAX + 1];
	int got = -1;
	if (fd_out)
		*fd_out = -1;
	if (chelld_send(sock, req, reqlen, fd) < 0)
		return -1;
	long n = recv_one(sock, buf, sizeof buf, &got);
	if (n < 0)
		return -1;
	const struct chelld_rhdr *r = (const struct chelld_rhdr *)buf;
	if ((size_t)n < sizeof *r || r->h.magic != CHELLD_MAGIC || r->h.length != (uint32_t)n ||
	    r->h.seq != rq->seq) {
		errno = EPROTO;
		goto fail;
	}
	memset(rep, 0, replen);
	if (r->h.type == (CHELLD_MSG_ERROR | CHELLD_REPLY)) {
		/* Keep the status (and what fits) so the caller sees why. */
		memcpy(rep, buf, (size_t)n < replen ? (size_t)n : replen);
		goto done;
	}
	if (r->h.type != (rq->type | CHELLD_REPLY) || (size_t)n != replen) {
		errno = EPROTO;
		goto fail;
	}
	memcpy(rep, buf, replen);
done:
	if (fd_out)
		*fd_out = got;
	else if (got >= 0)
		close(got);
	return 0;
fail:
	if (got >= 0)
		close(got);
	return -1;
}

int chelld_call(int sock, const void *req, size_t reqlen, int fd, void *rep, size_t replen)
{
	return chelld_call_fd(sock, req, reqlen, fd, rep, replen, NULL);
}

const char *chelld_errname(int e)
{
	static const struct {
		int e;
		const char *name;
	} names[] = {
		{0, "OK"},		{EACCES, "EACCES"},	  {EPERM, "EPERM"},
		{EINVAL, "EINVAL"},	{EBADF, "EBADF"},	  {ENOENT, "ENOENT"},
		{EPROTO, "EPROTO"},	{EBADMSG, "EBADMSG"},	  {EMSGSIZE, "EMSGSIZE"},
		{ENOSYS, "ENOSYS"},	{EMFILE, "EMFILE"},	  {ERANGE, "ERANGE"},
		{EPROTONOSUPPORT, "EPROTONOSUPPORT"}, {ENAMETOOLONG, "ENAMETOOLONG"},
		{ENOTDIR, "ENOTDIR"}, {ELOOP, "ELOOP"},	  {EAGAIN, "EAGAIN"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].e == e)
			return names[i].name;
	static _Thread_local char buf[24];
	snprintf(buf, sizeof buf, "E%d", e);
	return buf;
}
