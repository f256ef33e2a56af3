/* SPDX-License-Identifier: MIT */
/*
 * Descriptors over a Unix socket (SCM_RIGHTS), one message at a time: the
 * cache handler's client (in libchell), the chelld protocol library (the
 * CLI, the test client) and chelld's server all pass descriptors this way.
 *
 * Raw system calls, no errno: libchell must not go through the interposed
 * sendmsg/recvmsg (they treat a descriptor that leaves as escaping Chell),
 * and chelld gets the same behaviour for free. EINTR is retried.
 */
#ifndef CHELL_FDPASS_H
#define CHELL_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

#define FDPASS_MAX 8 /* descriptors one received message may carry */

/* Send len bytes, with `fd` attached when fd >= 0, in one sendmsg (flags:
 * MSG_DONTWAIT, ...; MSG_NOSIGNAL is always added). Returns 0 when all of
 * it went, -EIO on a short send, or -errno. */
int fdpass_send(int sock, const void *buf, size_t len, int fd, int flags);
/* The same with n (at most FDPASS_MAX) descriptors attached. */
int fdpass_sendv(int sock, const void *buf, size_t len, const int *fds, int n, int flags);

/* What came with a received message. */
struct fdpass_in {
	int fds[FDPASS_MAX]; /* its descriptors (close-on-exec), in order */
	int nfds;
	int trunc;           /* MSG_TRUNC: longer than the buffer; MSG_CTRUNC:
	                      * more than FDPASS_MAX descriptors (the rest were
	                      * closed by the kernel) */
};

/* Receive one message of at most cap bytes (flags for recvmsg). Returns its
 * length (0: end of stream) or -errno; `in` tells what came with it. Every
 * descriptor in in->fds is the caller's to keep or close (fdpass_close). */
ssize_t fdpass_recv(int sock, void *buf, size_t cap, int flags, struct fdpass_in *in);

/* Close descriptors fds[from..n) (raw close). */
void fdpass_close(const int *fds, int from, int n);

#endif
