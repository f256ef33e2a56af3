/* SPDX-License-Identifier: MIT */
/*
 * Descriptors sent over a Unix socket (SCM_RIGHTS) leave Chell: the
 * receiver, in this tree or not, gets a new descriptor of the same open file
 * description that no handler knows, so it uses the kernel's offset. Before
 * the kernel passes them on, every handled one escapes (kernel_view.h): its
 * description uses the kernel's offset from then on, in every process.
 */
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "kernel_view.h"

/* Copy n bytes of the application's memory without risking a signal: a bad
 * pointer is the kernel's to report (EFAULT from the real call). */
static bool copy_in(void *dst, const void *src, size_t n)
{
	struct iovec l = {dst, n}, r = {(void *)src, n};
	return CHELL_SC(SYS_process_vm_readv, sys_getpid(), &l, 1, &r, 1, 0) == (long)n;
}

static void escape_rights(const struct msghdr *umsg)
{
	struct msghdr m;
	if (!copy_in(&m, umsg, sizeof(m)) || !m.msg_control || m.msg_controllen < sizeof(struct cmsghdr))
		return;
	/* The kernel takes at most SCM_MAX_FD (253) descriptors per message,
	 * in a control buffer bounded by net.core.optmem_max. */
	unsigned char buf[8192] __attribute__((aligned(sizeof(size_t))));
	size_t len = m.msg_controllen < sizeof(buf) ? m.msg_controllen : sizeof(buf);
	if (!copy_in(buf, m.msg_control, len))
		return;
	m.msg_control = buf;
	m.msg_controllen = len;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0) || (unsigned char *)c + c->cmsg_len > buf + len)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			chell_fd_escape(fd, CHELL_OP_DUP);
		}
	}
}

CHELL_EXPORT ssize_t sendmsg(int sock, const struct msghdr *msg, int flags)
{
	/* Nothing to look at until this process has handled a file. */
	if (likely(fdt_max() < 0))
		return REAL(sendmsg)(sock, msg, flags);
	escape_rights(msg);
	return REAL(sendmsg)(sock, msg, flags);
}

CHELL_EXPORT int sendmmsg(int sock, struct mmsghdr *vec, unsigned int vlen, int flags)
{
	if (likely(fdt_max() < 0))
		return REAL(sendmmsg)(sock, vec, vlen, flags);
	for (unsigned int i = 0; i < vlen && i < UIO_MAXIOV; i++)
		escape_rights(&vec[i].msg_hdr); /* address arithmetic only: copy_in reads */
	return REAL(sendmmsg)(sock, vec, vlen, flags);
}
