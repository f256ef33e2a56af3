/* SPDX-License-Identifier: MIT */
/*
 * Regions: format an image (memory or file), open it (validate, then roll
 * back unfinished transactions), close it. The layout is in
 * pmem_internal.h and docs/PERSISTENCE.md.
 */
#include "pmem_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif

void *chell_pmem_map_shared(int fd, size_t len, int *dax)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
	*dax = p != MAP_FAILED;
	if (p == MAP_FAILED)
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return p;
}

/* Non-DAX file mappings sit in the page cache: cache-line flushes do not
 * make them durable, msync does. Flush is then a no-op and every drain
 * writes the mapping back (the kernel only writes the dirty pages). */
void pm_msync_drain(void *ctx)
{
	struct chell_region *r = ctx;

	(void)msync(r->base, r->len, MS_SYNC);
}

static void make_uuid(uint8_t u[16])
{
	size_t got = 0;

	while (got < 16) {
		ssize_t n = getrandom(u + got, 16 - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	if (got < 16) {
		/* No entropy source at all: still unique enough per process
		 * and time to tell regions apart, which is all it is for. */
		uint64_t a = (uint64_t)getpid() ^ ((uint64_t)time(NULL) << 20);
		uint64_t b = (uint64_t)(uintptr_t)u ^ (uint64_t)clock();
		memcpy(u, &a, 8);
		memcpy(u + 8, &b, 8);
	}
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x40); /* RFC 4122 version 4 */
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
}

static void put_jhdr(const struct chell_persist_ops *ops, uint8_t *dst, const char *magic, uint32_t index,
		     uint32_t entries, const uint8_t uuid[16])
{
	struct pm_jhdr h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, magic, 8);
	h.index = index;
	h.entries = entries;
	memcpy(h.uuid, uuid, 16);
	h.crc = pm_jhdr_crc(&h);
	ops->memcpy_nodrain(ops->ctx, dst, &h, sizeof(h));
}

int chell_region_format_mem(void *base, size_t len, const struct chell_region_layout *layout,
			    const struct chell_persist_ops *ops, char *err, size_t errlen)
{
	struct pm_diag d;
	struct pm_layout l;
	uint8_t *b = base;

	pm_diag_init(&d, err, errlen, 0);
	if (!base || !layout) {
		pm_diag(&d, "no image or no layout given");
		return -EINVAL;
	}
	if ((uintptr_t)base % 8) {
		pm_diag(&d, "image address %p is not 8-byte aligned", base);
		return -EINVAL;
	}
	int rc = pm_layout_plan(layout, &l, &d);
	if (rc)
		return rc;
	if (l.total_size > len) {
		pm_diag(&d, "image of %zu bytes is too small for the layout (needs %llu)", len,
			(unsigned long long)l.total_size);
		return -ENOSPC;
	}
	if (!ops)
		ops = chell_persist_default();

	/* 1. Kill the old superblock first: a crash in the middle of the format
	 *    must leave an image that is refused, never old-superblock-over-
	 *    half-new-journals. */
	static const uint8_t zero8[8];
	ops->memcpy_nodrain(ops->ctx, b, zero8, sizeof(zero8));
	ops->drain(ops->ctx);

	/* 2. Journals: zeroed, headers, every slot at generation 1, inactive. */
	make_uuid(l.uuid);
	memset(b + l.master_off, 0, l.heap_off - l.master_off);
	put_jhdr(ops, b + l.master_off, PM_MASTER_MAGIC, l.journals, 0, l.uuid);
	for (uint32_t j = 0; j < l.journals; j++) {
		uint64_t s = PM_SLOT(1, 0);
		memcpy(b + l.master_off + PM_ENTRY + 8ull * j, &s, 8);
		put_jhdr(ops, b + l.journal_off + (uint64_t)j * l.journal_size, PM_JOURNAL_MAGIC, j, l.entries,
			 l.uuid);
	}
	ops->flush(ops->ctx, b + l.master_off, l.heap_off - l.master_off);
	ops->drain(ops->ctx);

	/* 3. The superblock last, in one piece: it is what makes the image a
	 *    region, so it must not reach media before what it describes. */
	uint8_t sb[PM_SB_SIZE];
	struct pm_super s;
	memset(sb, 0, sizeof(sb));
	memset(&s, 0, sizeof(s));
	memcpy(s.magic, CHELL_REGION_MAGIC, 8);
	s.version = CHELL_REGION_VERSION;
	memcpy(s.uuid, l.uuid, 16);
	s.journals = l.journals;
	s.journal_entries = l.entries;
	s.master_off = l.master_off;
	s.master_size = l.master_size;
	s.journal_off = l.journal_off;
	s.journal_size = l.journal_size;
	s.heap_off = l.heap_off;
	s.heap_size = l.heap_size;
	s.total_size = l.total_size;
	memcpy(sb, &s, sizeof(s));
	s.crc = pm_super_crc(sb);
	memcpy(sb, &s, sizeof(s));
	ops->memcpy_nodrain(ops->ctx, b, sb, sizeof(sb));
	ops->drain(ops->ctx);
	return 0;
}

/* Validate r->base/r->len, set up the transactions, run recovery. */
static int attach(struct chell_region *r, unsigned flags, char *err, size_t errlen)
{
	struct pm_diag d;

	pm_diag_init(&d, err, errlen, 0);
	if ((uintptr_t)r->base % 8) {
		pm_diag(&d, "image address %p is not 8-byte aligned", (void *)r->base);
		return -EINVAL;
	}
	int rc = pm_validate(r->base, r->len, &r->lay, &d);
	if (rc)
		return rc;
	r->tx = calloc(r->lay.journals, sizeof(*r->tx));
	if (!r->tx) {
		pm_diag(&d, "out of memory for %u transactions", r->lay.journals);
		return -ENOMEM;
	}
	for (uint32_t j = 0; j < r->lay.journals; j++) {
		r->tx[j].r = r;
		r->tx[j].journal = j;
	}
	if (flags & CHELL_REGION_NO_RECOVER)
		return 0;
	rc = pm_recover(r, &d);
	return rc < 0 ? rc : 0;
}

void chell_region_close(struct chell_region *r)
{
	if (!r)
		return;
	if (r->mapped && r->base)
		munmap(r->base, r->len);
	if (r->fd >= 0)
		close(r->fd); /* also drops the flock */
	free(r->tx);
	free(r);
}

int chell_region_open_mem(void *base, size_t len, const struct chell_persist_ops *ops,
			  struct chell_region **out, char *err, size_t errlen)
{
	return chell_region_attach_mem(base, len, ops, 0, out, err, errlen);
}

int chell_region_attach_mem(void *base, size_t len, const struct chell_persist_ops *ops, unsigned flags,
			    struct chell_region **out, char *err, size_t errlen)
{
	struct chell_region *r;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!base) {
		if (err && errlen)
			snprintf(err, errlen, "no image given");
		return -EINVAL;
	}
	if (ops && (!ops->flush || !ops->drain || !ops->memcpy_nodrain)) {
		if (err && errlen)
			snprintf(err, errlen, "persistence ops lack a function");
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = base;
	r->len = len;
	r->ops = ops ? *ops : *chell_persist_default();
	r->fd = -1;
	int rc = attach(r, flags, err, errlen);
	if (rc) {
		chell_region_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

/* Open (or create) and lock the file, size it if asked, map it, and pick
 * the persistence ops the mapping needs. */
static int map_file(const char *path, int create, uint64_t size, struct chell_region **out, char *err,
		    size_t errlen)
{
	struct chell_region *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
	if (r->fd < 0) {
		rc = -errno;
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		goto fail;
	}
	/* One process at a time: two writers of one journal would corrupt it. */
	if (flock(r->fd, LOCK_EX | LOCK_NB) < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s is in use by another process (%s)", path, strerror(errno));
		goto fail;
	}
	if (create) {
		if (ftruncate(r->fd, (off_t)size) < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot size %s to %llu bytes: %s", path, (unsigned long long)size,
				 strerror(errno));
			goto fail;
		}
	} else {
		struct stat st;
		if (fstat(r->fd, &st) < 0) {
			rc = -errno;
			snprintf(err, errlen, "cannot stat %s: %s", path, strerror(errno));
			goto fail;
		}
		if (st.st_size < (off_t)PM_SB_SIZE) {
			snprintf(err, errlen, "image too small for a superblock: %lld bytes, need %u (truncated?)",
				 (long long)st.st_size, PM_SB_SIZE);
			rc = -EUCLEAN;
			goto fail;
		}
		size = (uint64_t)st.st_size;
	}
	r->len = (size_t)size;
	int dax;
	void *p = chell_pmem_map_shared(r->fd, r->len, &dax);
	if (p == MAP_FAILED) {
		rc = -errno;
		snprintf(err, errlen, "cannot map %s: %s", path, strerror(errno));
		goto fail;
	}
	if (dax) {
		r->ops = *chell_persist_default(); /* DAX: cache flushes reach media */
	} else {
		r->ops.flush = pm_nop_flush;
		r->ops.drain = pm_msync_drain;
		r->ops.memcpy_nodrain = pm_plain_memcpy;
		r->ops.ctx = r;
	}
	r->base = p;
	r->mapped = 1;
	*out = r;
	return 0;
fail:
	chell_region_close(r);
	return rc;
}

int chell_region_create(const char *path, const struct chell_region_layout *layout,
			struct chell_region **out, char *err, size_t errlen)
{
	char dummy[8];
	struct pm_diag d;
	struct pm_layout l;
	struct chell_region *r;

	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out || !path || !layout)
		return -EINVAL;
	*out = NULL;
	pm_diag_init(&d, err, errlen, 0);
	int rc = pm_layout_plan(layout, &l, &d);
	if (rc)
		return rc;
	if (l.total_size > (uint64_t)SIZE_MAX / 2) {
		snprintf(err, errlen, "region of %llu bytes is too large to map", (unsigned long long)l.total_size);
		return -EFBIG;
	}
	rc = map_file(path, 1, l.total_size, &r, err, errlen);
	if (rc)
		return rc;
	rc = chell_region_format_mem(r->base, r->len, layout, &r->ops, err, errlen);
	if (!rc)
		rc = attach(r, 0, err, errlen);
	if (rc) {
		chell_region_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

int chell_region_open(const char *path, struct chell_region **out, char *err, size_t errlen)
{
	char dummy[8];
	struct chell_region *r;

	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out || !path)
		return -EINVAL;
	*out = NULL;
	int rc = map_file(path, 0, 0, &r, err, errlen);
	if (rc)
		return rc;
	rc = attach(r, 0, err, errlen);
	if (rc) {
		chell_region_close(r);
		return rc;
	}
	*out = r;
	return 0;
}

void *chell_region_heap(struct chell_region *r, uint64_t *size)
{
	if (size)
		*size = r->lay.heap_size;
	return r->base + r->lay.heap_off;
}

const uint8_t *chell_region_uuid(const struct chell_region *r)
{
	return r->lay.uuid;
}

int chell_region_size(const struct chell_region_layout *layout, uint64_t *heap_off, uint64_t *total)
{
	struct pm_diag d;
	struct pm_layout l;

	if (!layout)
		return -EINVAL;
	pm_diag_init(&d, NULL, 0, 0);
	int rc = pm_layout_plan(layout, &l, &d);
	if (rc)
		return rc;
	if (heap_off)
		*heap_off = l.heap_off;
	if (total)
		*total = l.total_size;
	return 0;
}
