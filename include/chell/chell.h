/* SPDX-License-Identifier: MIT */
/*
 * chell/chell.h - the application-facing API of libchell.so.
 *
 * Programs run unmodified under Chell. Programs that opt in can also skip
 * the copy of read() and write() on files served by the `direct` handler
 * (and of read() on cache hits of the `cache` handler).
 * Link with -lchell (pkg-config chell), or look the symbols up with
 * dlsym(RTLD_DEFAULT, ...) to work with and without the preload.
 */
#ifndef CHELL_CHELL_H
#define CHELL_CHELL_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library, e.g. "0.1.0". */
const char *chell_version(void);

/*
 * Zero-copy read. Like read(fd, buf, count), but instead of copying, sets
 * *buf to the file's bytes at the current offset and advances the offset by
 * the returned length. Returns the number of bytes available at *buf (at
 * most count, fewer at end of file or at a mapping chunk boundary; 0 at end
 * of file), or -1 with errno set as read() would.
 *
 * Lifetime: on a descriptor served by the direct handler, *buf points into
 * the shared mapping of the file. It stays valid until the descriptor's file
 * is closed by this process, or the file is truncated below the range by
 * anyone; the bytes are live (later writes to the file show through).
 * Accessing a range another process truncated away is caught by Chell only
 * inside Chell's own calls: do not touch the buffer after a truncation.
 *
 * On a descriptor served by the cache handler, a range whose blocks are all
 * in the cache (a hit) is served the same way from the cache's chunk of the
 * file: *buf points into it, up to the chunk boundary. It stays readable
 * until the file is closed by this process; once the cache manager takes
 * the chunk back, it holds the file's bytes as they were then (later
 * writes may not show). A miss is served as below (a copy), and fills the
 * cache, so a later call on the same bytes is a hit.
 *
 * On any other descriptor (not handled, or handled by a mode that keeps no
 * mapping) the bytes are read with read() into a per-thread buffer that
 * stays valid until the next chell_get_read_buf() call on the same thread:
 * correct, but a copy.
 */
ssize_t chell_get_read_buf(int fd, const void **buf, size_t count);

/*
 * Zero-copy write, in two steps. chell_get_write_buf() returns in *buf a
 * place to write up to `count` bytes that will land at the descriptor's
 * current offset (or at end of file for O_APPEND descriptors); the file is
 * extended if needed. chell_commit_write_buf() then publishes `len` bytes
 * (len <= the reserved count) exactly as write() would: the offset advances,
 * O_APPEND reservations are atomic with other writers. Until the commit the
 * reservation is private to the caller and other threads must not use the
 * descriptor's offset. Returns the reserved length or -1 with errno.
 *
 * On descriptors without a mapping, *buf is a per-thread staging buffer and
 * commit performs an ordinary write() of it.
 */
ssize_t chell_get_write_buf(int fd, void **buf, size_t count);
ssize_t chell_commit_write_buf(int fd, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
