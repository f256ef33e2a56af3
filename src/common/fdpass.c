/* SPDX-License-Identifier: MIT */
/* SCM_RIGHTS send and receive shared by libchell, the CLI and chelld (fdpass.h). */
#include "fdpass.h"

#include <chell/sys.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>

union fdpass_ctl {
	char buf[CMSG_SPACE(FDPASS_MAX * sizeof(int))];
	struct cmsghdr align;
};

int fdpass_sendv(int sock, const void *buf, size_t len, const int *fds, int nfds, int flags)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	union fdpass_ctl ctl;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > FDPASS_MAX)
		return -EINVAL;
	if (nfds > 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	long n;
	do
		n = CHELL_SC(SYS_sendmsg, sock, &mh, flags | MSG_NOSIGNAL, 0, 0, 0);
	while (n == -EINTR);
	if (n < 0)
		return (int)n;
	return (size_t)n == len ? 0 : -EIO;
}

int fdpass_send(int sock, const void *buf, size_t len, int fd, int flags)
{
	return fdpass_sendv(sock, buf, len, &fd, fd >= 0 ? 1 : 0, flags);
}

void fdpass_close(const int *fds, int from, int n)
{
	for (int i = from; i < n; i++)
		if (fds[i] >= 0)
			sys_close(fds[i]);
}

ssize_t fdpass_recv(int sock, void *buf, size_t cap, int flags, struct fdpass_in *in)
{
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	union fdpass_ctl ctl;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	long n;
	in->nfds = 0;
	in->trunc = 0;
	do
		n = CHELL_SC(SYS_recvmsg, sock, &mh, flags | MSG_CMSG_CLOEXEC, 0, 0, 0);
	while (n == -EINTR);
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (in->nfds < FDPASS_MAX)
				in->fds[in->nfds++] = got;
			else
				sys_close(got); /* cannot happen: the buffer holds FDPASS_MAX */
		}
	}
	in->trunc = mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC);
	return n;
}
