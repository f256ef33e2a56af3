/* SPDX-License-Identifier: MIT */
/*
 * The libc functions Chell interposes, resolved with dlsym(RTLD_NEXT).
 *
 * REAL(name) is the next definition of `name` after libchell.so (normally
 * glibc's). Calls on descriptors no handler claims go straight there, so the
 * application keeps glibc's exact behaviour (errno, cancellation points).
 * Pointers are resolved in the constructor; a call that arrives earlier (from
 * another library's constructor) resolves them on the spot.
 */
#ifndef CHELL_NIB_REAL_H
#define CHELL_NIB_REAL_H

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#define CHELL_REAL_LIST(X)                                                                \
	X(open, int, (const char *, int, ...))                                             \
	X(openat, int, (int, const char *, int, ...))                                      \
	X(close, int, (int))                                                               \
	X(close_range, int, (unsigned int, unsigned int, int))                             \
	X(closefrom, void, (int))                                                          \
	X(read, ssize_t, (int, void *, size_t))                                            \
	X(write, ssize_t, (int, const void *, size_t))                                     \
	X(pread64, ssize_t, (int, void *, size_t, off_t))                                  \
	X(pwrite64, ssize_t, (int, const void *, size_t, off_t))                           \
	X(readv, ssize_t, (int, const struct iovec *, int))                                \
	X(writev, ssize_t, (int, const struct iovec *, int))                               \
	X(preadv64, ssize_t, (int, const struct iovec *, int, off_t))                      \
	X(pwritev64, ssize_t, (int, const struct iovec *, int, off_t))                     \
	X(preadv64v2, ssize_t, (int, const struct iovec *, int, off_t, int))               \
	X(pwritev64v2, ssize_t, (int, const struct iovec *, int, off_t, int))              \
	X(lseek64, off_t, (int, off_t, int))                                               \
	X(fsync, int, (int))                                                               \
	X(fdatasync, int, (int))                                                           \
	X(sync_file_range, int, (int, off_t, off_t, unsigned int))                         \
	X(ftruncate64, int, (int, off_t))                                                  \
	X(truncate64, int, (const char *, off_t))                                          \
	X(fallocate64, int, (int, int, off_t, off_t))                                      \
	X(posix_fallocate64, int, (int, off_t, off_t))                                     \
	X(dup, int, (int))                                                                 \
	X(dup2, int, (int, int))                                                           \
	X(dup3, int, (int, int, int))                                                      \
	X(fcntl64, int, (int, int, ...))                                                   \
	X(lockf64, int, (int, int, off_t))                                                 \
	X(ioctl, int, (int, unsigned long, ...))                                           \
	X(fstat64, int, (int, struct stat *))                                              \
	X(stat64, int, (const char *, struct stat *))                                      \
	X(lstat64, int, (const char *, struct stat *))                                     \
	X(fstatat64, int, (int, const char *, struct stat *, int))                         \
	X(statx, int, (int, const char *, int, unsigned int, struct statx *))              \
	X(mmap64, void *, (void *, size_t, int, int, int, off_t))                          \
	X(fork, pid_t, (void))                                                             \
	X(execve, int, (const char *, char *const[], char *const[]))                       \
	X(execvpe, int, (const char *, char *const[], char *const[]))                      \
	X(fexecve, int, (int, char *const[], char *const[]))                               \
	X(posix_spawn, int, (pid_t *, const char *, const posix_spawn_file_actions_t *,    \
			     const posix_spawnattr_t *, char *const[], char *const[]))     \
	X(posix_spawnp, int, (pid_t *, const char *, const posix_spawn_file_actions_t *,   \
			      const posix_spawnattr_t *, char *const[], char *const[]))    \
	X(_exit, void, (int))                                                              \
	X(_Exit, void, (int))                                                              \
	X(sigaction, int, (int, const struct sigaction *, struct sigaction *))             \
	X(fopen64, FILE *, (const char *, const char *))                                   \
	X(fdopen, FILE *, (int, const char *))                                             \
	X(freopen64, FILE *, (const char *, const char *, FILE *))                         \
	X(fileno, int, (FILE *))                                                           \
	X(fileno_unlocked, int, (FILE *))                                                  \
	X(fclose, int, (FILE *))                                                           \
	X(sendmsg, ssize_t, (int, const struct msghdr *, int))                             \
	X(sendmmsg, int, (int, struct mmsghdr *, unsigned int, int))

#define CHELL_REAL_DECL(name, ret, args) extern ret(*chell_real_##name) args;
CHELL_REAL_LIST(CHELL_REAL_DECL)
#undef CHELL_REAL_DECL

void chell_real_resolve(void);

/* The next definition of `name`, resolving lazily if called very early. */
#define REAL(name) \
	(__builtin_expect(chell_real_##name != NULL, 1) ? chell_real_##name \
							: (chell_real_resolve(), chell_real_##name))

#endif
