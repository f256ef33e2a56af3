/* SPDX-License-Identifier: MIT */
/*
 * The pool directory (cache/layout.h): create or open meta.pool, make sure
 * chunks/ exists, and check every mapped slot's chunk file before anything
 * is served, so a damaged pool is refused with a sentence naming the
 * problem instead of being half-used. A static library (chelld_pool) so
 * the offline `chell cache check` can run the same checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chelld/engine.h"

static int perr(char *err, size_t n, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int perr(char *err, size_t n, int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return rc;
}

void pool_chunk_name(uint32_t slot, char *buf, size_t len)
{
	snprintf(buf, len, "%u", slot);
}

uint32_t pool_slots_for(uint64_t size)
{
	uint64_t n = size / POOL_SLOT_BYTES, whole = size / CACHE_CHUNK_BYTES;
	if (n > POOL_MAX_SLOTS)
		n = POOL_MAX_SLOTS;
	if (n < whole) /* a huge pool: at least one slot per 2 MB, as before */
		n = whole;
	if (n > UINT32_MAX / 4)
		n = UINT32_MAX / 4;
	return n ? (uint32_t)n : 1;
}

/* Cnodes: room for every slot to belong to a different file, and for as
 * many files again that are registered but hold no chunk. */
static uint32_t cnodes_for(uint32_t slots)
{
	uint64_t n = (uint64_t)slots * 2 + 64;
	return n > 65536 ? 65536 : (uint32_t)n;
}

int pool_check_chunk(const struct pool *p, uint32_t slot, const struct meta_chunk_info *ci,
		     struct cache_ctl *ctl, char *err, size_t errlen)
{
	char name[16];
	pool_chunk_name(slot, name, sizeof name);
	int fd = openat(p->chunks_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		if (errno == ENOENT)
			return POOL_CHUNK_UNUSED;
		return perr(err, errlen, -EUCLEAN, "chunk file %s/%s/%s cannot be opened: %s",
			    p->dir, CACHE_CHUNKS_DIR, name, strerror(errno));
	}
	struct stat st;
	int rc = POOL_CHUNK_OK;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = perr(err, errlen, -EUCLEAN, "chunk file %s/%s/%s is not a regular file",
			  p->dir, CACHE_CHUNKS_DIR, name);
	} else if (st.st_size == 0) {
		/* An eviction truncates before it unlinks and unmaps. */
		rc = POOL_CHUNK_UNUSED;
	} else if ((uint64_t)st.st_size != CACHE_CHUNK_FILE_BYTES) {
		rc = perr(err, errlen, -EUCLEAN,
			  "chunk file %s/%s/%s has %lld bytes, not %llu (data + control page)",
			  p->dir, CACHE_CHUNKS_DIR, name, (long long)st.st_size,
			  (unsigned long long)CACHE_CHUNK_FILE_BYTES);
	} else if (pread(fd, ctl, sizeof *ctl, CACHE_CHUNK_BYTES) != (ssize_t)sizeof *ctl) {
		rc = perr(err, errlen, -EUCLEAN, "chunk file %s/%s/%s: cannot read its control page",
			  p->dir, CACHE_CHUNKS_DIR, name);
	} else if (ctl->magic != CACHE_CTL_MAGIC || ctl->version != CACHE_CTL_VERSION) {
		rc = perr(err, errlen, -EUCLEAN,
			  "chunk file %s/%s/%s: bad control page (magic 0x%llx version %u)", p->dir,
			  CACHE_CHUNKS_DIR, name, (unsigned long long)ctl->magic, ctl->version);
	} else if (ctl->state > CACHE_CHUNK_REVOKED || ctl->slot != slot) {
		rc = perr(err, errlen, -EUCLEAN,
			  "chunk file %s/%s/%s: bad control page (state %u, slot %u)", p->dir,
			  CACHE_CHUNKS_DIR, name, ctl->state, ctl->slot);
	} else if (!dirty_table_open(ctl->dirty) || dirty_table_nchunks(dirty_table_open(ctl->dirty)) != 1) {
		rc = perr(err, errlen, -EUCLEAN, "chunk file %s/%s/%s: bad dirty table", p->dir,
			  CACHE_CHUNKS_DIR, name);
	} else if (ctl->state == CACHE_CHUNK_INIT || ctl->cnode != ci->cnode ||
		   ctl->file_chunk != ci->file_chunk || ctl->incarnation != ci->seq) {
		rc = POOL_CHUNK_UNUSED;
	}
	close(fd);
	return rc;
}

static int check_chunks(struct pool *p, char *err, size_t errlen)
{
	static struct cache_ctl ctl; /* one page; the opener is single-threaded */
	for (uint32_t s = 0; s < p->nslots; s++) {
		struct meta_chunk_info ci;
		int rc = meta_chunk_info(p->m, s, &ci);
		if (rc == -ENOENT)
			continue;
		if (rc < 0)
			return perr(err, errlen, rc, "slot %u: %s", s, strerror(-rc));
		rc = pool_check_chunk(p, s, &ci, &ctl, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int pool_open(const char *dir, uint64_t want_size, struct pool *p, char *err, size_t errlen)
{
	memset(p, 0, sizeof *p);
	p->chunks_fd = -1;
	p->dir = strdup(dir);
	char *meta_path = NULL, *chunks = NULL;
	int rc = -ENOMEM;
	if (!p->dir || asprintf(&meta_path, "%s/%s", dir, CACHE_META_NAME) < 0 ||
	    asprintf(&chunks, "%s/%s", dir, CACHE_CHUNKS_DIR) < 0) {
		meta_path = chunks = NULL;
		perr(err, errlen, rc, "out of memory");
		goto fail;
	}
	char merr[256] = "";
	struct stat st;
	if (stat(meta_path, &st) < 0 && errno == ENOENT) {
		if (want_size == 0) {
			rc = perr(err, errlen, -ENOENT, "%s does not exist (no pool here)", meta_path);
			goto fail;
		}
		if (mkdir(chunks, 0700) < 0 && errno != EEXIST) {
			rc = perr(err, errlen, -errno, "cannot create %s: %s", chunks, strerror(errno));
			goto fail;
		}
		uint32_t slots = pool_slots_for(want_size);
		struct meta_geometry g = {cnodes_for(slots), slots};
		rc = meta_create_path(meta_path, &g, &p->m, merr, sizeof merr);
		if (rc < 0) {
			unlink(meta_path);
			perr(err, errlen, rc, "cannot create %s: %s", meta_path, merr);
			goto fail;
		}
		p->created = true;
	} else {
		rc = meta_open_path(meta_path, &p->m, merr, sizeof merr);
		if (rc < 0) {
			perr(err, errlen, rc, "%s is damaged or not a cache pool: %s", meta_path, merr);
			goto fail;
		}
		rc = meta_check(p->m, merr, sizeof merr);
		if (rc < 0) {
			perr(err, errlen, rc, "%s fails its consistency check: %s", meta_path, merr);
			goto fail;
		}
	}
	/* It names the cached files: for the manager's eyes only. */
	if (chmod(meta_path, 0600) < 0) {
		rc = perr(err, errlen, -errno, "cannot restrict %s to its owner: %s", meta_path,
			  strerror(errno));
		goto fail;
	}
	struct meta_stats ms;
	meta_stats(p->m, &ms);
	p->nslots = ms.chunks;
	p->max_cnodes = ms.max_cnodes;
	/* Either geometry fits the size: this one, or one slot per 2 MB (pools
	 * created before the slots got smaller). */
	p->resized = want_size && ms.chunks != pool_slots_for(want_size) &&
		     ms.chunks != want_size / CACHE_CHUNK_BYTES;
	p->capacity = (uint64_t)ms.chunks * CACHE_CHUNK_BYTES;
	if (want_size && want_size < p->capacity)
		p->capacity = want_size;
	p->chunks_fd = open(chunks, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->chunks_fd < 0) {
		rc = perr(err, errlen, -errno, "cannot open %s: %s", chunks, strerror(errno));
		goto fail;
	}
	/* Only the manager may open chunk files by name: clients get them as
	 * descriptors, with the access their own descriptor proves. */
	if (fchmod(p->chunks_fd, 0700) < 0) {
		rc = perr(err, errlen, -errno, "cannot restrict %s to its owner: %s", chunks,
			  strerror(errno));
		goto fail;
	}
	rc = check_chunks(p, err, errlen);
	if (rc < 0)
		goto fail;
	free(meta_path);
	free(chunks);
	return 0;
fail:
	free(meta_path);
	free(chunks);
	pool_close(p);
	return rc < 0 ? rc : -EINVAL;
}

void pool_close(struct pool *p)
{
	if (p->m)
		meta_close(p->m);
	if (p->chunks_fd >= 0)
		close(p->chunks_fd);
	free(p->dir);
	memset(p, 0, sizeof *p);
	p->chunks_fd = -1;
}
