/* SPDX-License-Identifier: MIT */
/*
 * Requests on registered files and on the whole cache: SYNC, TRUNCATE,
 * FLUSH, CLOSE, FILE_STAT and CHECK (protocol.h). SYNC, TRUNCATE and CLOSE
 * are answered with a bare struct chelld_rhdr.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chelld/server.h"

void counts_add(struct chelld_client_counts *to, const struct chelld_client_counts *from)
{
	to->read_hits += from->read_hits;
	to->write_hits += from->write_hits;
	to->read_misses += from->read_misses;
	to->write_misses += from->write_misses;
	to->read_bytes += from->read_bytes;
	to->write_bytes += from->write_bytes;
}

static bool bare(struct client *c, uint16_t type, uint32_t seq, int st)
{
	struct chelld_rhdr r = {0};
	return chelld_reply(c, &r, sizeof r, type, seq, st, -1);
}

bool do_sync(struct server *s, struct client *c, const struct chelld_sync *m)
{
	struct engine *k = &s->engine;
	const struct reg *g = client_reg(c, m->file_id);
	struct cfile *f = g ? cfile_get(k, g->cnode) : NULL;
	if (!f)
		return bare(c, CHELLD_MSG_SYNC, m->h.seq, EBADF);
	/* The client flushed its stores and dirty bits; the control pages are
	 * flushed again here for clients on a non-DAX pool, then the chunk
	 * directory (new chunk files must survive) and the file's size. */
	for (uint32_t i = 0; i < k->nslots; i++)
		if (k->slots[i].map && k->slots[i].cnode == f->cnode)
			chell_persist(k->pops, k->slots[i].ctl, sizeof *k->slots[i].ctl);
	int st = 0;
	if (k->dir_dirty) {
		if (fsync(k->pool.chunks_fd) < 0)
			st = errno;
		else
			k->dir_dirty = false;
	}
	cfile_record(k, f);
	s->st.syncs++;
	return bare(c, CHELLD_MSG_SYNC, m->h.seq, st);
}

bool do_truncate(struct server *s, struct client *c, const struct chelld_truncate *m)
{
	struct engine *k = &s->engine;
	const struct reg *g = client_reg(c, m->file_id);
	struct cfile *f = g ? cfile_get(k, g->cnode) : NULL;
	if (!f)
		return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, EBADF);
	if (!(g->access & CHELLD_ACC_WRITE))
		return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, EACCES);
	if (m->size > (uint64_t)INT64_MAX)
		return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, EFBIG);
	int fd = cfile_wfd(k, f); /* for this call only (files.c) */
	if (fd < 0)
		return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, -fd);
	uint32_t *slots = malloc(((size_t)k->nslots + 1) * sizeof *slots);
	if (!slots)
		return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, ENOMEM);
	uint64_t from = m->size / CACHE_CHUNK_BYTES;
	int st = 0;
	f->content_gen++;
	/* A revocation may wait (lock released) for a fill or a write-back,
	 * and another worker may map a chunk past the new size meanwhile:
	 * scan again until a pass revokes nothing, so the ftruncate below
	 * runs with no chunk past the size left (the lock held from the
	 * last scan on). */
	for (bool again = true; again && st == 0;) {
		again = false;
		uint32_t n = engine_file_slots(k, f->cnode, slots);
		for (uint32_t i = 0; i < n && st == 0; i++) {
			const struct slot *sl = &k->slots[slots[i]];
			if (!sl->map || sl->cnode != f->cnode || sl->file_chunk < from)
				continue;
			/* Dirty blocks below the new size are kept (written back);
			 * those past it are dropped with the chunk. */
			int rc = chunk_revoke(k, slots[i], sl->file_chunk == from ? m->size : 0);
			again = true;
			if (rc < 0 && rc != -ENOENT)
				st = -rc;
		}
	}
	free(slots);
	if (st == 0 && ftruncate(fd, (off_t)m->size) < 0)
		st = errno;
	close(fd);
	if (st == 0) {
		cfile_record(k, f);
		s->st.truncates++;
	}
	return bare(c, CHELLD_MSG_TRUNCATE, m->h.seq, st);
}

uint32_t cfile_drop(struct engine *k, const struct cfile *f, int *err)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < k->nslots; i++) {
		if (!k->slots[i].map || (f && k->slots[i].cnode != f->cnode))
			continue;
		int rc = chunk_revoke(k, i, UINT64_MAX);
		if (rc == 0)
			n++;
		else if (rc != -ENOENT && !*err) /* ENOENT: evicted meanwhile (by a
						    worker, without the lock): gone already */
			*err = -rc;
	}
	return n;
}

bool do_flush(struct server *s, struct client *c, const struct chelld_flush *m)
{
	struct engine *k = &s->engine;
	struct chelld_flush_reply r = {0};
	struct cfile *f = NULL;
	int st = 0;
	if (m->flags & ~(uint32_t)(CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS)) {
		st = EINVAL;
	} else if (m->file_id == CHELLD_ALL_FILES) {
		if (c->uid != 0 && c->uid != geteuid())
			st = EPERM;
		else if (m->flags & CHELLD_FLUSH_BYPASS)
			st = EINVAL; /* bypass is per file */
	} else {
		const struct reg *g = client_reg(c, m->file_id);
		f = g ? cfile_get(k, g->cnode) : NULL;
		if (!f)
			st = EBADF;
	}
	if (st == 0) {
		int rc = wb_file(k, f, &r.blocks_written, &r.bytes_written, &r.files);
		if (rc < 0)
			st = -rc;
		/* and what clients wrote on the kernel path meanwhile (a write-back
		 * of this file ended in fdatasync, which covered that already: a
		 * second sync would cost another round trip on a distributed
		 * file system, at every close under cache.shared) */
		int fd = f && r.bytes_written == 0 ? cfile_fd(k, f) : -1;
		if (st == 0 && fd >= 0 && fsync(fd) < 0)
			st = errno;
	}
	if (st == 0 && (m->flags & (CHELLD_FLUSH_DROP | CHELLD_FLUSH_BYPASS)))
		r.chunks_dropped = cfile_drop(k, f, &st);
	if (st == 0 && (m->flags & CHELLD_FLUSH_BYPASS)) {
		f->bypass = true;
		s->st.bypassed++;
		chelld_log("file %s: bypassing the cache until its last registration closes",
			   f->path);
		cfile_release_fd(k, f); /* the kernel's path has it: hold nothing of it */
	}
	chelld_log("client %llu (pid %d): flush %s%s: %llu blocks, %llu bytes written, %u chunk(s) "
		   "dropped: %s", (unsigned long long)c->serial, (int)c->pid,
		   f ? f->path : "all files", m->flags & CHELLD_FLUSH_BYPASS ? " (bypass)" : "",
		   (unsigned long long)r.blocks_written, (unsigned long long)r.bytes_written,
		   r.chunks_dropped, chelld_errname(st));
	return chelld_reply(c, &r, sizeof r, CHELLD_MSG_FLUSH, m->h.seq, st, -1);
}

bool do_close(struct server *s, struct client *c, const struct chelld_close *m)
{
	struct reg *g = client_reg(c, m->file_id);
	if (!g)
		return bare(c, CHELLD_MSG_CLOSE, m->h.seq, EBADF);
	struct cfile *f = cfile_get(&s->engine, g->cnode);
	if (f)
		counts_add(&f->counts, &m->counts);
	counts_add(&s->st.counts, &m->counts);
	client_unregister(s, c, g, false);
	return bare(c, CHELLD_MSG_CLOSE, m->h.seq, 0);
}

bool do_file_stat(struct server *s, struct client *c, const struct chelld_file_stat *m)
{
	struct engine *k = &s->engine;
	static struct chelld_file_stat_reply r; /* 4 KB of path */
	memset(&r, 0, sizeof r);
	struct meta_cnode_info ci;
	uint32_t seen = 0, id;
	for (id = 0; id < k->pool.max_cnodes; id++)
		if (meta_cnode_info(k->m, id, &ci) == 0 && seen++ == m->index)
			break;
	if (id == k->pool.max_cnodes)
		return chelld_reply(c, &r, sizeof r, CHELLD_MSG_FILE_STAT, m->h.seq, ENOENT, -1);
	const struct cfile *f = k->files[id];
	r.cnode = id;
	r.size = ci.size;
	r.chunks = ci.chunks;
	snprintf(r.path, sizeof r.path, "%s", f ? f->path : ci.path);
	for (uint32_t i = 0; i < k->nslots; i++)
		if (k->slots[i].map && k->slots[i].cnode == id) {
			r.valid_blocks += chunk_nvalid(&k->slots[i]);
			r.dirty_blocks += chunk_ndirty(&k->slots[i]);
		}
	if (f) {
		r.flags = f->bypass ? CHELLD_FILE_BYPASS : 0;
		r.clients = f->nconns;
		r.fills = f->fills;
		r.fill_bytes = f->fill_bytes;
		r.evictions = f->evictions;
		r.writeback_bytes = f->writeback_bytes;
		r.counts = f->counts;
		struct stat st;
		if (f->fd >= 0 && fstat(f->fd, &st) == 0)
			r.size = (uint64_t)st.st_size;
	}
	return chelld_reply(c, &r, sizeof r, CHELLD_MSG_FILE_STAT, m->h.seq, 0, -1);
}

/* Every mapped slot's chunk file agrees with the meta, and the manager's
 * view agrees with both; the first problem goes to err. */
static int check_slots(struct engine *k, uint64_t *checked, char *err, size_t len)
{
	static struct cache_ctl ctl;
	for (uint32_t i = 0; i < k->nslots; i++) {
		struct meta_chunk_info ci;
		int rc = meta_chunk_info(k->m, i, &ci);
		const struct slot *sl = &k->slots[i];
		if (rc == -ENOENT) {
			if (sl->map) {
				snprintf(err, len, "slot %u is in use but free in the metadata", i);
				return -EUCLEAN;
			}
			continue;
		}
		if (rc < 0) {
			snprintf(err, len, "slot %u: %s", i, strerror(-rc));
			return rc;
		}
		(*checked)++;
		rc = pool_check_chunk(&k->pool, i, &ci, &ctl, err, len);
		if (rc < 0)
			return rc;
		if (rc != POOL_CHUNK_OK || !sl->map) {
			snprintf(err, len, "slot %u is mapped in the metadata but has no live chunk file", i);
			return -EUCLEAN;
		}
		if (sl->cnode != ci.cnode || sl->file_chunk != ci.file_chunk) {
			snprintf(err, len, "slot %u: the manager holds Cnode %u chunk %llu, the metadata "
				 "Cnode %u chunk %llu", i, sl->cnode, (unsigned long long)sl->file_chunk,
				 ci.cnode, (unsigned long long)ci.file_chunk);
			return -EUCLEAN;
		}
		struct meta_cnode_info cn;
		if (meta_cnode_info(k->m, ci.cnode, &cn) < 0 || cn.dev != ctl.dev || cn.ino != ctl.ino) {
			snprintf(err, len, "slot %u: its control page names another file than Cnode %u",
				 i, ci.cnode);
			return -EUCLEAN;
		}
	}
	return 0;
}

bool do_check(struct server *s, struct client *c, const struct chelld_check *m)
{
	struct engine *k = &s->engine;
	struct chelld_check_reply r = {0};
	struct meta_stats ms;
	int rc = meta_check(k->m, r.detail, sizeof r.detail);
	if (rc == 0)
		rc = check_slots(k, &r.chunks_checked, r.detail, sizeof r.detail);
	meta_stats(k->m, &ms);
	r.cnodes_checked = ms.cnodes;
	if (rc < 0)
		chelld_log("check: %s", r.detail);
	return chelld_reply(c, &r, sizeof r, CHELLD_MSG_CHECK, m->h.seq, rc < 0 ? -rc : 0, -1);
}
