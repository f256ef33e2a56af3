/* SPDX-License-Identifier: MIT */
/*
 * The requests of the data path: HELLO (with the connection's access
 * table), OPEN_FILE (the access checks of auth.c, then the file's Cnode
 * and a registration on the connection) and MAP (a chunk of the file,
 * filled, handed over as a descriptor with the access the client proved).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chelld/modes.h"

/* The access table of a connection: a memfd of one byte per slot, mapped
 * here and sent to the client. Returns the memfd or -errno. */
static int make_access_table(struct server *s, struct client *c)
{
	uint32_t n = s->engine.nslots * CHELLD_ACCESS_GROUPS;
	int fd = memfd_create("chelld-access", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)access_table_bytes(n)) == 0)
		p = mmap(NULL, access_table_bytes(n), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (c->access.flags)
		munmap(c->access.flags, c->access.nchunks);
	access_table_attach(&c->access, p, n, true);
	return fd;
}

bool do_hello(struct server *s, struct client *c, const struct chelld_hello *m)
{
	struct chelld_hello_reply r = {0};
	r.version = CHELLD_VERSION;
	r.chunk_size = CHELLD_CHUNK_SIZE;
	r.cache_size = s->engine.pool.capacity;
	r.slots = s->engine.nslots;
	r.append_threshold = s->cfg->append_threshold;
	r.flags = modes_declines(&s->engine) ? CHELLD_HELLO_MODES : 0;
	int st = 0, fd = -1;
	if (m->version != CHELLD_VERSION || m->h.version != CHELLD_VERSION) {
		st = EPROTONOSUPPORT;
		chelld_log("client %llu (pid %d): speaks protocol version %u, this manager %u: "
			   "refused (use the libchell and chell of the same build)",
			   (unsigned long long)c->serial, (int)c->pid, m->version, CHELLD_VERSION);
	} else {
		fd = make_access_table(s, c);
		if (fd < 0)
			st = -fd;
		else
			c->hello = true;
	}
	bool ok = chelld_reply(c, &r, sizeof r, CHELLD_MSG_HELLO, m->h.seq, st, fd);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Add (or count again) a registration; 0 or an errno. Takes fd (the
 * checked proof), and closes it. */
static int add_reg(struct server *s, struct client *c, uint32_t cnode, int fd, uint32_t access)
{
	struct cfile *f = cfile_get(&s->engine, cnode);
	struct reg *r = client_reg(c, cnode);
	if (!f) {
		close(fd);
		return ENOMEM;
	}
	/* The proof was checked (auth.c); the manager reads through its own
	 * descriptor, opened now unless the file is bypassed (files.c: a
	 * held descriptor is visible to everyone, so none is kept). */
	if (!f->bypass)
		cfile_fd_via(&s->engine, f, fd);
	close(fd);
	fd = -1;
	if (r) {
		r->access |= access;
		r->count++;
		f->nregs++;
		return 0;
	}
	if (c->nregs == c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 16;
		struct reg *n = realloc(c->regs, cap * sizeof *n);
		if (!n)
			return ENOMEM;
		c->regs = n;
		c->cap = cap;
	}
	c->regs[c->nregs++] = (struct reg){cnode, access, 1, -1};
	f->nregs++;
	f->nconns++;
	return 0;
}

/* Takes ownership of fd (kept on success, closed otherwise). */
bool do_open(struct server *s, struct client *c, const struct chelld_open *m, int fd)
{
	struct chelld_open_reply r = {0};
	struct chelld_file f;
	int st;
	if (fd < 0) {
		st = EBADF;
		snprintf(r.detail, sizeof r.detail, "no descriptor attached");
	} else if (memchr(m->path, '\0', sizeof m->path) == NULL) {
		st = EINVAL;
		snprintf(r.detail, sizeof r.detail, "the path is not NUL-terminated");
	} else if (c->nregs >= MAX_FILES) {
		st = EMFILE;
		snprintf(r.detail, sizeof r.detail, "too many files for one client");
	} else {
		st = chelld_auth_file(s->cfg, fd, m->path, &f, r.detail, sizeof r.detail);
	}
	int id = -1;
	if (st == 0) {
		char resolved[PATH_MAX];
		if (!realpath(m->path, resolved)) {
			st = EACCES;
			snprintf(r.detail, sizeof r.detail, "the path does not resolve");
		} else {
			id = cfile_register(&s->engine, fd, resolved, (uint64_t)f.dev, (uint64_t)f.ino,
					    r.detail, sizeof r.detail);
			if (id < 0)
				st = -id;
		}
	}
	if (st == 0) {
		st = add_reg(s, c, (uint32_t)id, fd, f.access);
		fd = -1; /* taken */
		if (st)
			snprintf(r.detail, sizeof r.detail, "out of memory");
	}
	if (st == 0) {
		struct stat sb;
		const struct reg *g = client_reg(c, (uint32_t)id);
		struct cfile *cf = cfile_get(&s->engine, (uint32_t)id);
		int bfd = cf && !cf->bypass ? cfile_fd(&s->engine, cf) : -1;
		r.file_id = (uint32_t)id;
		r.access = g->access;
		r.dev = (uint64_t)f.dev;
		r.ino = (uint64_t)f.ino;
		r.size = bfd >= 0 && fstat(bfd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
		r.flags = cf ? (cf->bypass ? CHELLD_FILE_BYPASS : 0) | modes_flags(cf) : 0;
		s->st.opens++;
		chelld_log("client %llu (pid %d uid %d): open %s -> id %u access %s%s",
			   (unsigned long long)c->serial, (int)c->pid, (int)c->uid, m->path,
			   r.file_id, r.access & CHELLD_ACC_READ ? "r" : "",
			   r.access & CHELLD_ACC_WRITE ? "w" : "");
	} else {
		if (fd >= 0)
			close(fd);
		s->st.opens_refused++;
		chelld_log("client %llu (pid %d uid %d): open %.200s refused: %s (%s)",
			   (unsigned long long)c->serial, (int)c->pid, (int)c->uid,
			   memchr(m->path, '\0', sizeof m->path) ? m->path : "(unterminated)",
			   chelld_errname(st), r.detail);
	}
	return chelld_reply(c, &r, sizeof r, CHELLD_MSG_OPEN_FILE, m->h.seq, st, -1);
}

/* The cache part of MAP: the slot, filled, and a descriptor of its file. */
static int map_chunk(struct server *s, const struct reg *g, const struct chelld_map *m,
		     struct chelld_map_reply *r, int *fd_out)
{
	struct engine *c = &s->engine;
	struct cfile *f = cfile_get(c, g->cnode);
	if (!f)
		return EBADF;
	if (f->bypass) {
		r->flags |= CHELLD_FILE_BYPASS;
		return 0;
	}
	if (m->first_block >= CACHE_BLOCKS || m->nblocks > CACHE_BLOCKS - m->first_block)
		return EINVAL;
	bool read_only;
	int md = modes_map(c, f, m, r, &read_only);
	if (md)
		return md < 0 ? -md : 0; /* answered without a chunk (modes.c) */
	int bfd = cfile_fd(c, f);
	if (bfd < 0)
		return -bfd;
	/* Data written to the cache must be writable back. */
	if ((m->want_write & (CHELLD_MAP_WRITE | CHELLD_MAP_OVERWRITE)) && !read_only && f->readonly)
		return EROFS;
	int slot, rc;
	/* -EAGAIN: the slot was revoked while the fill waited (the lock
	 * released: another fill of it, or room being made); map it again. */
	for (int tries = 0;; tries++) {
		slot = chunk_get(c, f, m->chunk);
		if (slot < 0)
			return -slot;
		/* OVERWRITE: the client stores these blocks whole, then asks for
		 * them to be validated (do_overwrite): nothing to read. */
		rc = m->want_write & CHELLD_MAP_OVERWRITE
			     ? 0
			     : chunk_fill(c, (uint32_t)slot, m->first_block, m->nblocks);
		if (rc != -EAGAIN || tries == 1000) /* each retry: another worker's progress */
			break;
	}
	if (rc < 0)
		return -rc;
	policy_touch(c->pol, (uint32_t)slot);
	bool rw = (m->want_write & (CHELLD_MAP_WRITE | CHELLD_MAP_OVERWRITE)) && !read_only &&
		  (g->access & CHELLD_ACC_WRITE);
	int fd = chunk_open_fd(c, (uint32_t)slot, rw ? O_RDWR : O_RDONLY);
	if (fd < 0)
		return -fd;
	r->slot = (uint32_t)slot;
	r->access = rw ? CHELLD_ACC_READ | CHELLD_ACC_WRITE : CHELLD_ACC_READ;
	*fd_out = fd;
	return 0;
}

/* MAP of one chunk (m->chunk, its blocks) on the connection's registration. */
static int map_one(struct server *s, const struct reg *g, const struct chelld_map *m,
		   struct chelld_map_reply *r, int *fd)
{
	/* A mapping of cache pages is readable even when it is writable
	 * (there is no write-only mmap), so a write mapping needs both. */
	uint32_t need = m->want_write & (CHELLD_MAP_WRITE | CHELLD_MAP_OVERWRITE)
				? CHELLD_ACC_READ | CHELLD_ACC_WRITE
				: CHELLD_ACC_READ;
	if ((g->access & need) != need)
		return EACCES;
	if (m->chunk > UINT64_MAX / CHELLD_CHUNK_SIZE - 1)
		return ERANGE;
	return map_chunk(s, g, m, r, fd);
}

bool do_map(struct server *s, struct client *c, const struct chelld_map *m)
{
	struct chelld_map_reply r = {0};
	int st = 0, fds[CHELLD_MAP_BATCH];
	int nfds = 0;
	struct stat sb;
	const struct reg *g = client_reg(c, m->file_id);
	r.chunk_size = CHELLD_CHUNK_SIZE;
	uint32_t nchunks = m->nchunks ? m->nchunks : 1;
	if (!g) {
		st = EBADF;
	} else if (nchunks > CHELLD_MAP_BATCH ||
		   (nchunks > 1 && ((m->want_write & CHELLD_MAP_OVERWRITE) ||
				    m->last_nblocks > CACHE_BLOCKS ||
				    m->chunk > UINT64_MAX / CHELLD_CHUNK_SIZE - nchunks))) {
		st = EINVAL;
	} else {
		int fd = -1;
		st = map_one(s, g, m, &r, &fd);
		if (st == 0 && fd >= 0)
			fds[nfds++] = fd;
		if (st == 0 && !(r.flags & CHELLD_FILE_BYPASS)) {
			r.slots[0] = r.slot;
			/* The neighbours, while they map: a prefix of them. */
			for (uint32_t i = 1; i < nchunks; i++) {
				struct chelld_map one = *m;
				struct chelld_map_reply ro = {0};
				one.chunk = m->chunk + i;
				one.first_block = 0;
				one.nblocks = i + 1 == nchunks ? m->last_nblocks : CACHE_BLOCKS;
				fd = -1;
				if (map_one(s, g, &one, &ro, &fd) != 0 || fd < 0 ||
				    ro.access != r.access) {
					if (fd >= 0)
						close(fd);
					break;
				}
				r.slots[nfds] = ro.slot;
				fds[nfds++] = fd;
			}
			if (nfds > 1) {
				s->st.map_batches++;
				s->st.map_batched_chunks += (uint64_t)nfds;
			}
			/* The size after the fill. */
			struct cfile *f = cfile_get(&s->engine, g->cnode);
			int bfd = f ? cfile_fd(&s->engine, f) : -1;
			if (bfd >= 0 && fstat(bfd, &sb) == 0)
				r.file_size = (uint64_t)sb.st_size;
			r.backing_offset = m->chunk * CHELLD_CHUNK_SIZE;
			uint64_t left = r.file_size > r.backing_offset ? r.file_size - r.backing_offset : 0;
			r.length = left < CHELLD_CHUNK_SIZE ? left : CHELLD_CHUNK_SIZE;
		}
		r.nmapped = (uint32_t)nfds;
	}
	if (st == 0)
		s->st.maps++;
	else
		s->st.maps_refused++;
	if (st)
		chelld_log("client %llu (pid %d uid %d): map id %u chunk %llu %s refused: %s",
			   (unsigned long long)c->serial, (int)c->pid, (int)c->uid, m->file_id,
			   (unsigned long long)m->chunk, m->want_write ? "rw" : "r", chelld_errname(st));
	bool ok = chelld_reply_fds(c, &r, sizeof r, CHELLD_MSG_MAP, m->h.seq, st, fds, nfds);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return ok;
}

bool do_overwrite(struct server *s, struct client *c, const struct chelld_overwrite *m)
{
	struct engine *k = &s->engine;
	const struct reg *g = client_reg(c, m->file_id);
	struct cfile *f = g ? cfile_get(k, g->cnode) : NULL;
	int st = 0;
	if (!f)
		st = EBADF;
	else if ((g->access & (CHELLD_ACC_READ | CHELLD_ACC_WRITE)) !=
		 (CHELLD_ACC_READ | CHELLD_ACC_WRITE))
		st = EACCES;
	else if (m->first_block >= CACHE_BLOCKS || m->nblocks == 0 ||
		 m->nblocks > CACHE_BLOCKS - m->first_block || m->slot >= k->nslots)
		st = EINVAL;
	else if (f->bypass || f->readonly)
		st = EAGAIN; /* the redo finds out (BYPASS, EROFS) */
	else if (meta_chunk_lookup(k->m, f->cnode, m->chunk) != (int)m->slot)
		st = EAGAIN; /* that chunk file is gone: evicted, truncated */
	else
		st = -chunk_overwrite(k, m->slot, m->incarnation, m->first_block, m->nblocks);
	if (st == 0)
		policy_touch(k->pol, m->slot);
	s->st.overwrites += st == 0;
	struct chelld_rhdr r = {0};
	return chelld_reply(c, &r, sizeof r, CHELLD_MSG_OVERWRITE, m->h.seq, st, -1);
}
