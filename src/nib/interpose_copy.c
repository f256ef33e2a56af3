/* SPDX-License-Identifier: MIT */
/*
 * In-kernel copies: copy_file_range and sendfile (splice and tee need a
 * pipe at one end, which Chell never handles, so they stay with the kernel).
 *
 * Programs such as cat and cp copy with these calls, which move data inside
 * the kernel without read() or write(). When either end is a handled file
 * the data must flow through the handler, so we copy through Chell's own
 * read/pread and write/pwrite in chunks, honouring the offset pointers
 * exactly as the kernel does (a NULL pointer means: use and advance the
 * descriptor's offset). For descriptors no handler claims: libc directly.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/sendfile.h>

#include "nib.h"

#define COPY_CHUNK (256 * 1024)

/* Copy up to len bytes; in_off/out_off NULL = descriptor offsets. */
static ssize_t copy_through(int in, off_t *in_off, int out, off_t *out_off, size_t len)
{
	char *buf = malloc(len < COPY_CHUNK ? (len ? len : 1) : COPY_CHUNK);
	if (!buf) {
		errno = ENOMEM;
		return -1;
	}
	size_t done = 0;
	while (done < len) {
		size_t want = len - done < COPY_CHUNK ? len - done : COPY_CHUNK;
		ssize_t r = in_off ? pread(in, buf, want, *in_off) : read(in, buf, want);
		if (r < 0) {
			if (done)
				break;
			free(buf);
			return -1;
		}
		if (r == 0)
			break;
		ssize_t w = out_off ? pwrite(out, buf, (size_t)r, *out_off) : write(out, buf, (size_t)r);
		if (w < 0) {
			int e = errno;
			/* unread what we could not write, so offsets stay exact */
			if (!in_off)
				lseek(in, -r, SEEK_CUR);
			if (done)
				break;
			free(buf);
			errno = e;
			return -1;
		}
		if (in_off)
			*in_off += w;
		else if (w < r)
			lseek(in, w - r, SEEK_CUR);
		if (out_off)
			*out_off += w;
		done += (size_t)w;
		if (w < r)
			break;
	}
	free(buf);
	return (ssize_t)done;
}

static bool handled(int a, int b)
{
	return fdt_peek(a) != NULL || fdt_peek(b) != NULL;
}

CHELL_EXPORT ssize_t copy_file_range(int in, off64_t *in_off, int out, off64_t *out_off,
				     size_t len, unsigned int flags)
{
	static ssize_t (*next)(int, off64_t *, int, off64_t *, size_t, unsigned int);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "copy_file_range");
	if (likely(!handled(in, out)))
		return next(in, in_off, out, out_off, len, flags);
	if (flags != 0 || (in_off && *in_off < 0) || (out_off && *out_off < 0)) {
		errno = EINVAL;
		return -1;
	}
	int fl_in = sys_fcntl(in, F_GETFL, 0), fl_out = sys_fcntl(out, F_GETFL, 0);
	if (fl_in < 0 || fl_out < 0 || (fl_in & O_ACCMODE) == O_WRONLY ||
	    (fl_out & O_ACCMODE) == O_RDONLY) {
		errno = EBADF;
		return -1;
	}
	if (fl_out & O_APPEND) { /* the kernel refuses appending destinations */
		errno = EBADF;
		return -1;
	}
	return copy_through(in, in_off, out, out_off, len);
}

CHELL_EXPORT ssize_t sendfile(int out, int in, off_t *offset, size_t count)
{
	static ssize_t (*next)(int, int, off_t *, size_t);
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "sendfile");
	if (likely(!handled(in, out)))
		return next(out, in, offset, count);
	if (offset && *offset < 0) {
		errno = EINVAL;
		return -1;
	}
	return copy_through(in, offset, out, NULL, count);
}
CHELL_EXPORT ssize_t sendfile64(int out, int in, off_t *offset, size_t count)
	__attribute__((alias("sendfile")));
