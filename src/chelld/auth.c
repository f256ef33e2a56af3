/* SPDX-License-Identifier: MIT */
/*
 * Access control for OPEN_FILE. The daemon runs with more privilege than its
 * clients, so it must never act on a path a client merely names: the client
 * proves access by passing a descriptor it opened itself (SCM_RIGHTS), and
 * the kernel already checked permissions when it opened it. We then check:
 *   - the descriptor is a regular file opened for reading and/or writing
 *     (not O_PATH: an O_PATH descriptor only needs search permission on the
 *     directories, so it proves nothing about the file's mode bits);
 *   - the path, resolved with realpath, lies under a backing directory;
 *   - the resolved path's file is the descriptor's file (st_dev/st_ino), so
 *     a descriptor of one file cannot be passed off as another.
 * The access recorded is what the descriptor's open mode grants.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chelld/chelld.h"

static bool under(const char *dir, const char *path)
{
	size_t n = strlen(dir);
	if (n == 1 && dir[0] == '/')
		return path[0] == '/' && path[1] != '\0';
	return strncmp(dir, path, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

#define REFUSE(err, ...)                                 \
	do {                                             \
		snprintf(detail, dlen, __VA_ARGS__);     \
		return (err);                            \
	} while (0)

int chelld_auth_file(const struct chelld_config *cfg, int fd, const char *path,
		     struct chelld_file *f, char *detail, size_t dlen)
{
	struct stat fst, pst;
	if (fstat(fd, &fst) < 0)
		REFUSE(EBADF, "cannot fstat the descriptor: %s", strerror(errno));
	if (!S_ISREG(fst.st_mode))
		REFUSE(EINVAL, "the descriptor is not a regular file");
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		REFUSE(EBADF, "cannot read the descriptor's flags");
	if (fl & O_PATH)
		REFUSE(EACCES, "an O_PATH descriptor grants no access");
	if (path[0] != '/')
		REFUSE(EINVAL, "the path is not absolute");

	char resolved[PATH_MAX];
	/* Failures to resolve are all EACCES: the daemon may see paths the
	 * client cannot, and should not tell it which of them exist. */
	if (!realpath(path, resolved))
		REFUSE(EACCES, "the path does not resolve");
	int i;
	for (i = 0; i < cfg->nbackings; i++)
		if (under(cfg->backings[i], resolved))
			break;
	if (i == cfg->nbackings)
		REFUSE(EPERM, "the path is not under a backing directory");
	if (stat(resolved, &pst) < 0)
		REFUSE(EACCES, "the path does not resolve");
	if (pst.st_dev != fst.st_dev || pst.st_ino != fst.st_ino)
		REFUSE(EACCES, "the descriptor is not the file at the path (inode mismatch)");

	uint32_t acc = 0;
	switch (fl & O_ACCMODE) {
	case O_RDONLY: acc = CHELLD_ACC_READ; break;
	case O_WRONLY: acc = CHELLD_ACC_WRITE; break;
	case O_RDWR: acc = CHELLD_ACC_READ | CHELLD_ACC_WRITE; break;
	default: REFUSE(EACCES, "unknown access mode");
	}
	f->fd = fd;
	f->access = acc;
	f->dev = fst.st_dev;
	f->ino = fst.st_ino;
	detail[0] = '\0';
	return 0;
}
