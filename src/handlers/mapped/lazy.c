/* SPDX-License-Identifier: MIT */
/*
 * Sizes published lazily (base.h, lazy.c section; direct.lazy_size). The
 * shared entry keeps the exact size (`size`) and, while the file is grown
 * ahead of it, the kernel's (`ksize`, the step). Every change of either is
 * made under the entry's lock, so a stat made under it sees a consistent
 * pair (mapped_lazy_stat_fix).
 */
#include <stdlib.h>

#include "short.h"

int mapped_lazy_sizes;

int mapped_lazy_reserve(struct mapped_local *l, int fd, uint64_t end, uint64_t step, unsigned stats)
{
	struct mapped_inode *in = l->inode;
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (atomic_load((_Atomic uint32_t *)&in->nolazy)) {
		mapped_lazy_publish_locked(l, fd, NULL);
		return -EOPNOTSUPP;
	}
	if (end <= k)
		return 0;
	while (step < end / 8 && step < (1ull << 30))
		step <<= 1;
	uint64_t target = (end + step - 1) & ~(step - 1);
	uint64_t lim = mapped_fsize(); /* a step past RLIMIT_FSIZE would be SIGXFSZ */
	if (target > lim)
		target = lim > end ? lim : end;
	if (end > ((uint64_t)1 << 40) || target < end)
		return -EOPNOTSUPP; /* the exact path instead (the kernel's limits apply) */
	if (!k) {
		/* Nothing outstanding: the kernel's size should be ours. If a
		 * process outside grew the file, start from its size. */
		struct stat st;
		if (sys_fstat(fd, &st) == 0 && (uint64_t)st.st_size > isize(in))
			isize_set(in, (uint64_t)st.st_size);
		if (isize(in) >= target)
			return 0;
	}
	/* Set first: a refresh meanwhile keeps to the size as we have it. */
	atomic_store((_Atomic uint64_t *)&in->ksize, target);
	int r = sys_ftruncate(fd, (off_t)target); /* fd: a writer's */
	if (r < 0) {
		atomic_store((_Atomic uint64_t *)&in->ksize, k);
		return r;
	}
	MSTAT(stats, extends, 1);
	return 0;
}

/* A writable descriptor on (dev, ino) for ftruncate: fd itself if it is
 * writable (ftruncate changes neither its offset nor its locks), else a
 * short-lived reopen (through fd, or by the path it was opened with when
 * fd is already gone; checked to be the same file), which the caller
 * closes (*opened). -1 if there is none. */
static int pub_fd(uint64_t dev, uint64_t ino, int fd, const char *path, int *opened)
{
	*opened = 0;
	if (fd >= 0) {
		int fl = sys_fcntl(fd, F_GETFL, 0);
		if (fl >= 0 && (fl & O_ACCMODE) != O_RDONLY)
			return fd;
	}
	char p[CHELL_FD_PATH_MAX];
	if (fd >= 0) {
		chell_fd_path(p, fd);
		path = p;
	}
	if (!path)
		return -1;
	int w = chell_internal_openat(AT_FDCWD, path, O_WRONLY | O_CLOEXEC, 0);
	struct stat st;
	if (w >= 0 && (sys_fstat(w, &st) < 0 || (uint64_t)st.st_dev != dev || (uint64_t)st.st_ino != ino)) {
		sys_close(w); /* renamed meanwhile and the name reused: not our file */
		w = -1;
	}
	*opened = w >= 0;
	return w;
}

/* The exact size through a writable descriptor of the file, if the
 * kernel's size is still the step (a size someone else gave the file
 * meanwhile is left alone). Caller holds in->lock. */
static int publish(struct mapped_inode *in, int fd, const char *path)
{
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (!k)
		return 0;
	int opened;
	int pfd = pub_fd(in->dev, in->ino, fd, path, &opened);
	if (pfd < 0)
		return 0; /* not writable by us: the step's owner publishes at its close or exit */
	struct stat st;
	int r = 0;
	if (sys_fstat(pfd, &st) == 0 && (uint64_t)st.st_size == k)
		r = sys_ftruncate(pfd, (off_t)isize(in));
	if (r == 0)
		atomic_store((_Atomic uint64_t *)&in->ksize, 0);
	if (opened)
		sys_close(pfd);
	return r;
}

int mapped_lazy_publish_locked(struct mapped_local *l, int fd, const char *path)
{
	return publish(l->inode, fd, path);
}

int mapped_lazy_publish(struct mapped_local *l, int fd, const char *path)
{
	if (!atomic_load_explicit((_Atomic uint64_t *)&l->inode->ksize, memory_order_relaxed))
		return 0;
	chell_lock_acquire(&l->inode->lock);
	int r = publish(l->inode, fd, path);
	chell_lock_release(&l->inode->lock);
	return r;
}

/* At exit the kernel closes the descriptors without us: publish the lazy
 * sizes through them first. */
void mapped_lazy_publish_all(const struct chell_handler *h)
{
	for (int fd = 0; fd < fdt_max(); fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (!f || f == FILE_CLOSING)
			continue;
		for (int i = 0; i < f->stack->depth; i++) {
			if (f->stack->handlers[i] != h)
				continue;
			struct mapped_local *l = (struct mapped_local *)f->local[i];
			if (l && ((struct mapped_ofd *)f->ofd->priv[i])->active)
				mapped_lazy_publish(l, fd, NULL);
			break;
		}
	}
}

void mapped_lazy_kernel_user(uint64_t dev, uint64_t ino, int fd)
{
	if (!mapped_lazy_sizes || !mapped_inode_ready())
		return;
	struct mapped_inode *in = mapped_inode_find(dev, ino);
	if (!in)
		return;
	chell_lock_acquire(&in->lock);
	if (in->dev == dev && in->ino == ino) { /* still that file's entry */
		atomic_store((_Atomic uint32_t *)&in->nolazy, 1);
		publish(in, fd, NULL);
	}
	chell_lock_release(&in->lock);
}

void mapped_lazy_stat_fix(struct mapped_inode *in, int r, struct stat *st)
{
	uint64_t k = atomic_load((_Atomic uint64_t *)&in->ksize);
	if (r == 0 && k && (uint64_t)st->st_size == k)
		st->st_size = (off_t)isize(in);
}

/* Asked again under the file's lock if the tree has it open. */
int mapped_lazy_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags)
{
	int r = chell_down_stat(c, dirfd, path, st, at_flags);
	struct mapped_inode *in = r == 0 && mapped_lazy_sizes && S_ISREG(st->st_mode) && mapped_inode_ready()
					  ? mapped_inode_find(st->st_dev, st->st_ino)
					  : NULL;
	if (in) {
		uint64_t dev = st->st_dev, ino = st->st_ino;
		chell_lock_acquire(&in->lock);
		if (in->dev == dev && in->ino == ino) { /* still that file's entry */
			r = chell_down_stat(c, dirfd, path, st, at_flags);
			if (r == 0 && (uint64_t)st->st_dev == dev && (uint64_t)st->st_ino == ino)
				mapped_lazy_stat_fix(in, r, st);
		}
		chell_lock_release(&in->lock);
	}
	return r;
}
