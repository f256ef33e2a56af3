/* SPDX-License-Identifier: MIT */
/*
 * Cache modes per backing directory, pins, the sequential cutoff and the
 * per-file cap (modes.h; docs/CACHE.md, "Cache modes").
 *
 * Invariants the modes rely on:
 * - Under write-around and read-only no chunk of the file is ever handed
 *   out writable, so it never has a dirty block: a switch to them drains
 *   (writes back) and revokes first, and MAP for writing is answered
 *   WAROUND. That is why INVAL may revoke a chunk after the client's
 *   kernel write without writing stale blocks over it.
 * - A switch revokes every chunk of the directory's files after writing
 *   them back, with the new mode already set: a client's next touch of
 *   any of them misses, and the MAP reply carries the new mode. A store
 *   racing the revocation fails its LIVE check and is redone under the
 *   new mode (cache/layout.h).
 * - Everything runs under the engine lock (the request loop holds it).
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chelld/modes.h"
#include "chelld/modes_state.h"
#include "common/registry.h"

struct rule {
	char *dir;
	unsigned mode;
	bool runtime; /* set by SET_MODE: kept in the pool (modes_state.c) */
};
struct pin {
	char *path;
	uint64_t bytes;
};
struct modes {
	struct rule *rules;
	uint32_t nrules;
	struct pin *pins;
	uint32_t npins;
	uint64_t pinned_bytes;
	uint64_t seq_bypassed;
	bool switched; /* a SET_MODE to pass-through was served */
};

/* A sequential stream this long is one, whatever the cutoff (bcache's
 * default sequential_cutoff). */
#define SEQ_STREAM (4ull << 20)

static bool under(const char *path, const char *dir)
{
	return chell_path_under(path, dir, strlen(dir));
}

/* A backing directory or a directory below one. */
static bool in_backing(const struct chelld_config *cfg, const char *path)
{
	for (int i = 0; i < cfg->nbackings; i++)
		if (under(path, cfg->backings[i]))
			return true;
	return false;
}

/* Set (or replace) the rule of dir. 0 or -ENOMEM. */
static int set_rule(struct modes *md, const char *dir, unsigned mode, bool runtime)
{
	for (uint32_t i = 0; i < md->nrules; i++)
		if (strcmp(md->rules[i].dir, dir) == 0) {
			md->rules[i].mode = mode;
			md->rules[i].runtime |= runtime;
			return 0;
		}
	struct rule *n = realloc(md->rules, (md->nrules + 1) * sizeof *n);
	if (!n)
		return -ENOMEM;
	md->rules = n;
	if (!(n[md->nrules].dir = strdup(dir)))
		return -ENOMEM;
	n[md->nrules].runtime = runtime;
	n[md->nrules++].mode = mode;
	return 0;
}

/* Parse cfg->mode_rules into md (NULL: only check them). */
static int parse_rules(const struct chelld_config *cfg, struct modes *md, char *err, size_t len)
{
	const char *r = cfg->mode_rules;
	while (r && *r) {
		const char *end = strstr(r, ":/"); /* as routes: a ':' before the next '/' */
		size_t n = end ? (size_t)(end - r) : strlen(r);
		char item[PATH_MAX + 32], real[PATH_MAX];
		if (n == 0 || n >= sizeof item) {
			snprintf(err, len, "cache.mode_rules: an empty or too long entry");
			return -1;
		}
		memcpy(item, r, n);
		item[n] = 0;
		r += n + (end ? 1 : 0);
		char *eq = strrchr(item, '=');
		int mode = eq ? modes_parse(eq + 1) : -1;
		if (!eq || mode < 0) {
			snprintf(err, len,
				 "cache.mode_rules: '%s' is not DIR=MODE (MODE one of write-back, "
				 "write-through, write-around, read-only, pass-through)", item);
			return -1;
		}
		*eq = 0;
		struct stat st;
		if (item[0] != '/' || !realpath(item, real) || stat(real, &st) < 0 ||
		    !S_ISDIR(st.st_mode)) {
			snprintf(err, len, "cache.mode_rules: '%s' is not an existing absolute directory",
				 item);
			return -1;
		}
		if (!in_backing(cfg, real)) {
			snprintf(err, len, "cache.mode_rules: '%s' is not under a backing directory",
				 item);
			return -1;
		}
		if (md && set_rule(md, real, (unsigned)mode, false) < 0) {
			snprintf(err, len, "out of memory");
			return -1;
		}
	}
	return 0;
}

int modes_check(const struct chelld_config *cfg, char *err, size_t len)
{
	return parse_rules(cfg, NULL, err, len);
}

/* cache.pin_max, or half the capacity when it is 0 (the default). */
static uint64_t pin_limit(const struct engine *c)
{
	return c->cfg->pin_max ? c->cfg->pin_max : c->pool.capacity / 2;
}

static int check_path(const struct engine *c, const char *path, char *detail, size_t len,
		      struct stat *st);
static int pin_add(struct engine *c, const char *path, const struct stat *st, uint64_t pin_max,
		   uint64_t *bytes, char *detail, size_t len);
static void keep_state(struct engine *c);

/* One switch or pin of the last run (modes_state.c), checked as SET_MODE
 * and PIN check theirs: the directory may be gone or moved since. */
static int apply_kept(void *arg, const struct modes_state_item *it, char *detail, size_t len)
{
	struct engine *c = arg;
	char path[CHELLD_PATH_MAX] = {0};
	struct stat st;
	if (strlen(it->path) >= sizeof path) {
		snprintf(detail, len, "the path is too long");
		return -1;
	}
	memcpy(path, it->path, strlen(it->path));
	if (check_path(c, path, detail, len, &st) != 0)
		return -1;
	if (it->pin) {
		uint64_t bytes;
		return pin_add(c, path, &st, pin_limit(c), &bytes, detail, len) ? -1 : 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(detail, len, "not a directory");
		return -1;
	}
	if (set_rule(c->modes, path, it->mode, true) < 0) {
		snprintf(detail, len, "out of memory");
		return -1;
	}
	if (it->mode == CHELLD_MODE_PASS_THROUGH)
		c->modes->switched = true;
	return 0;
}

int modes_init(struct engine *c, char *err, size_t len)
{
	struct modes *md = calloc(1, sizeof *md);
	if (!md) {
		snprintf(err, len, "out of memory");
		return -1;
	}
	c->modes = md;
	if (parse_rules(c->cfg, md, err, len) < 0)
		return -1;
	modes_state_load(c->pool.dir, apply_kept, c);
	for (uint32_t id = 0; id < c->pool.max_cnodes; id++)
		if (c->files[id])
			modes_file_init(c, c->files[id]);
	return 0;
}

void modes_fini(struct engine *c)
{
	struct modes *md = c->modes;
	if (!md)
		return;
	for (uint32_t i = 0; i < md->nrules; i++)
		free(md->rules[i].dir);
	for (uint32_t i = 0; i < md->npins; i++)
		free(md->pins[i].path);
	free(md->rules);
	free(md->pins);
	free(md);
	c->modes = NULL;
}

/* The longest rule above path, else the default. */
static unsigned mode_for(const struct engine *c, const char *path)
{
	const struct modes *md = c->modes;
	unsigned mode = c->cfg->mode;
	size_t best = 0;
	for (uint32_t i = 0; md && i < md->nrules; i++) {
		size_t l = strlen(md->rules[i].dir);
		if (l > best && under(path, md->rules[i].dir)) {
			best = l;
			mode = md->rules[i].mode;
		}
	}
	return mode;
}

static bool pinned_path(const struct engine *c, const char *path)
{
	for (uint32_t i = 0; c->modes && i < c->modes->npins; i++)
		if (under(path, c->modes->pins[i].path))
			return true;
	return false;
}

void modes_file_init(struct engine *c, struct cfile *f)
{
	f->mode = (uint8_t)mode_for(c, f->path);
	f->pinned = pinned_path(c, f->path);
}

uint32_t modes_flags(const struct cfile *f)
{
	switch (f->mode) {
	case CHELLD_MODE_WRITE_THROUGH: return CHELLD_FILE_WTHROUGH;
	case CHELLD_MODE_WRITE_AROUND:
	case CHELLD_MODE_READ_ONLY: return CHELLD_FILE_WAROUND;
	default: return 0;
	}
}

/* Write back and revoke every chunk of f: 0 or an errno (the chunks that
 * could not be written back are kept). */
static int drain(struct engine *c, struct cfile *f, uint64_t *bytes, uint32_t *dropped)
{
	int rc = wb_file(c, f, NULL, bytes, NULL), err = 0;
	if (rc < 0)
		return -rc;
	uint32_t n = cfile_drop(c, f, &err);
	if (dropped)
		*dropped += n;
	return err;
}

/* f leaves the cache until its last registration closes (as for an
 * application's shared mapping: ops.c, FLUSH with BYPASS). */
static int leave(struct engine *c, struct cfile *f, const char *why)
{
	if (f->bypass)
		return 0;
	int rc = drain(c, f, NULL, NULL);
	if (rc)
		return rc;
	f->bypass = true;
	c->st->bypassed++;
	chelld_log("file %s: not cached (%s)", f->path, why);
	cfile_release_fd(c, f);
	return 0;
}

void modes_file_registered(struct engine *c, struct cfile *f, uint64_t size)
{
	modes_file_init(c, f);
	if (f->mode == CHELLD_MODE_PASS_THROUGH)
		leave(c, f, "pass-through");
	else if (c->cfg->file_max && size > c->cfg->file_max)
		leave(c, f, "larger than cache.file_max");
}

int modes_map(struct engine *c, struct cfile *f, const struct chelld_map *m,
	      struct chelld_map_reply *r, bool *read_only)
{
	uint64_t start = m->chunk * CHELLD_CHUNK_SIZE + (uint64_t)m->first_block * CACHE_BLOCK_BYTES;
	uint64_t end = start + (uint64_t)m->nblocks * CACHE_BLOCK_BYTES;
	bool read = m->want_write & CHELLD_MAP_READ;
	*read_only = false;
	r->flags |= modes_flags(f);
	if (f->mode == CHELLD_MODE_PASS_THROUGH || (c->cfg->file_max && end > c->cfg->file_max)) {
		/* a file that grew past the cap (or switched while registered) */
		int rc = leave(c, f, f->mode == CHELLD_MODE_PASS_THROUGH ? "pass-through"
								     : "it grew past cache.file_max");
		if (rc)
			return -rc;
		r->flags |= CHELLD_FILE_BYPASS;
		return 1;
	}
	if (r->flags & CHELLD_FILE_WAROUND) {
		if (!read) /* a write: the client writes the backing file, then INVAL */
			return 1;
		*read_only = true;
	}
	if (!read || f->pinned)
		return 0;
	/* The stream: a miss that starts within a read-ahead window of where
	 * the last one ended (hits in between never reach the manager; the
	 * window is up to the read-ahead setting or the request's size,
	 * chunk.c) and goes past it continues it; anything else starts anew. */
	uint64_t window = 2 * (c->cfg->readahead > end - start ? c->cfg->readahead : end - start);
	if (f->seq_run && start <= f->seq_next + window && end > f->seq_next)
		f->seq_run += end - f->seq_next;
	else
		f->seq_run = end - start;
	f->seq_next = end;
	/* A stream (past min(cutoff, 4M), as bcache's sequential_cutoff) on a
	 * file larger than the cutoff (0: the cache's capacity, a file the
	 * cache cannot hold), and only a chunk the cache holds nothing of: the
	 * backing file has every byte of it (no dirty block), so reading
	 * around the cache is exact. */
	uint64_t cutoff = c->cfg->seq_cutoff ? c->cfg->seq_cutoff : c->pool.capacity;
	uint64_t stream = cutoff < SEQ_STREAM ? cutoff : SEQ_STREAM;
	struct stat st;
	int bfd;
	if (f->seq_run > stream && meta_chunk_lookup(c->m, f->cnode, m->chunk) < 0 &&
	    (bfd = cfile_fd(c, f)) >= 0 && fstat(bfd, &st) == 0 && (uint64_t)st.st_size > cutoff) {
		c->modes->seq_bypassed++;
		r->flags |= CHELLD_FILE_SKIP;
		return 1;
	}
	return 0;
}

bool modes_declines(const struct engine *c)
{
	if (c->cfg->mode == CHELLD_MODE_PASS_THROUGH || c->cfg->file_max || c->modes->switched)
		return true;
	for (uint32_t i = 0; i < c->modes->nrules; i++)
		if (c->modes->rules[i].mode == CHELLD_MODE_PASS_THROUGH)
			return true;
	return false;
}

bool modes_slot_pinned(const struct engine *c, uint32_t slot)
{
	const struct slot *s = &c->slots[slot];
	const struct cfile *f = s->cnode < c->pool.max_cnodes ? c->files[s->cnode] : NULL;
	return f && f->pinned;
}

/* ------------------------------------------------------------- requests */

static bool privileged(const struct client *cl)
{
	return cl->uid == 0 || cl->uid == geteuid();
}

bool do_inval(struct server *s, struct client *cl, const struct chelld_inval *m)
{
	struct engine *c = &s->engine;
	struct chelld_inval_reply r = {0};
	const struct reg *g = client_reg(cl, m->file_id);
	struct cfile *f = g ? cfile_get(c, g->cnode) : NULL;
	int st = 0;
	if (!f) {
		st = EBADF;
	} else if (m->length && m->offset <= UINT64_MAX - m->length) {
		f->content_gen++;
		uint64_t k0 = m->offset / CHELLD_CHUNK_SIZE;
		uint64_t k1 = (m->offset + m->length - 1) / CHELLD_CHUNK_SIZE;
		/* a few chunks: looked up in the C2F map; more: one pass over
		 * the slots (a write's cost must not grow with the pool) */
		bool few = k1 - k0 < 64;
		for (uint64_t i = few ? k0 : 0; few ? i <= k1 : i < c->nslots; i++) {
			int sl = few ? meta_chunk_lookup(c->m, f->cnode, i) : (int)i;
			if (sl < 0 || !c->slots[sl].map || c->slots[sl].cnode != f->cnode ||
			    c->slots[sl].file_chunk < k0 || c->slots[sl].file_chunk > k1)
				continue;
			/* no dirty block under these modes (above): nothing stale
			 * is written over the client's kernel write */
			int rc = chunk_revoke(c, (uint32_t)sl, UINT64_MAX);
			if (rc == 0)
				r.chunks_dropped++;
			else if (rc != -ENOENT && !st) /* ENOENT: evicted meanwhile */
				st = -rc;
		}
	}
	if (f)
		r.flags = modes_flags(f) | (f->bypass ? CHELLD_FILE_BYPASS : 0);
	return chelld_reply(cl, &r, sizeof r, CHELLD_MSG_INVAL, m->h.seq, st, -1);
}

/* The path of a SET_MODE or PIN: absolute, already resolved (the CLI does
 * realpath), under a backing directory. 0 or an errno with detail. */
static int check_path(const struct engine *c, const char *path, char *detail, size_t len,
		      struct stat *st)
{
	char real[PATH_MAX];
	if (!memchr(path, '\0', CHELLD_PATH_MAX)) {
		snprintf(detail, len, "the path is not NUL-terminated");
		return EINVAL;
	}
	if (path[0] != '/') {
		snprintf(detail, len, "not an absolute path");
		return EINVAL;
	}
	if (!realpath(path, real)) {
		int e = errno;
		snprintf(detail, len, "%s", strerror(e));
		return e;
	}
	if (strcmp(real, path) != 0) {
		snprintf(detail, len, "not a resolved path (it resolves to %.200s)", real);
		return EINVAL;
	}
	if (stat(path, st) < 0) {
		snprintf(detail, len, "%s", strerror(errno));
		return errno;
	}
	if (!in_backing(c->cfg, path)) {
		snprintf(detail, len, "not under a backing directory of this manager");
		return EXDEV;
	}
	return 0;
}

bool do_set_mode(struct server *s, struct client *cl, const struct chelld_set_mode *m)
{
	struct engine *c = &s->engine;
	struct chelld_set_mode_reply r = {0};
	struct stat st;
	int rc = 0;
	if (!privileged(cl)) {
		rc = EPERM;
		snprintf(r.detail, sizeof r.detail, "only root or the manager's user");
	} else if (m->mode >= CHELLD_MODE_COUNT) {
		rc = EINVAL;
		snprintf(r.detail, sizeof r.detail, "unknown mode %u", m->mode);
	} else if ((rc = check_path(c, m->path, r.detail, sizeof r.detail, &st)) == 0 &&
		   !S_ISDIR(st.st_mode)) {
		rc = ENOTDIR;
		snprintf(r.detail, sizeof r.detail, "modes are per directory");
	}
	if (rc == 0 && set_rule(c->modes, m->path, m->mode, true) < 0)
		rc = ENOMEM;
	if (rc == 0 && m->mode == CHELLD_MODE_PASS_THROUGH)
		c->modes->switched = true; /* clients connecting from now on register at open */
	/* Drain every cached file below: written back, its chunks revoked,
	 * its new mode set (clients learn it at their next MAP). */
	for (uint32_t id = 0; rc == 0 && id < c->pool.max_cnodes; id++) {
		struct meta_cnode_info ci;
		if (meta_cnode_info(c->m, id, &ci) < 0)
			continue;
		struct cfile *f = cfile_get(c, id);
		if (!f || !under(f->path, m->path))
			continue;
		r.files++;
		f->mode = (uint8_t)mode_for(c, f->path);
		int e = drain(c, f, &r.bytes_written, &r.chunks_dropped);
		if (e) {
			rc = e;
			snprintf(r.detail, sizeof r.detail, "write-back failed (kept dirty in the pool)");
		}
		if (f->mode == CHELLD_MODE_PASS_THROUGH && !f->bypass && !rc) {
			f->bypass = true;
			cfile_release_fd(c, f);
		}
		f->seq_run = f->seq_next = 0;
	}
	if (rc == 0)
		keep_state(c);
	chelld_log("client %llu (pid %d): mode %s for %.200s: %u file(s), %llu bytes written back, "
		   "%u chunk(s) dropped: %s", (unsigned long long)cl->serial, (int)cl->pid,
		   modes_name(m->mode), memchr(m->path, 0, sizeof m->path) ? m->path : "?", r.files,
		   (unsigned long long)r.bytes_written, r.chunks_dropped, chelld_errname(rc));
	return chelld_reply(cl, &r, sizeof r, CHELLD_MSG_SET_MODE, m->h.seq, rc, -1);
}

/* Bytes of the regular files at or below a path (nftw has no argument). */
static uint64_t walk_bytes;
static int walk_one(const char *p, const struct stat *st, int type, struct FTW *w)
{
	(void)p, (void)w;
	if (type == FTW_F && S_ISREG(st->st_mode))
		walk_bytes += (uint64_t)st->st_size;
	return 0;
}

static void repin(struct engine *c)
{
	for (uint32_t id = 0; id < c->pool.max_cnodes; id++)
		if (c->files[id])
			c->files[id]->pinned = pinned_path(c, c->files[id]->path);
}

/* Pin path (checked: check_path filled st) within pin_max: 0 or an errno
 * with detail; *bytes gets the bytes it pins. */
static int pin_add(struct engine *c, const char *path, const struct stat *st, uint64_t pin_max,
		   uint64_t *bytes, char *detail, size_t len)
{
	struct modes *md = c->modes;
	for (uint32_t i = 0; i < md->npins; i++)
		if (strcmp(md->pins[i].path, path) == 0) {
			snprintf(detail, len, "already pinned");
			return EEXIST;
		}
	walk_bytes = 0;
	if (S_ISDIR(st->st_mode))
		nftw(path, walk_one, 16, FTW_PHYS);
	else
		walk_bytes = S_ISREG(st->st_mode) ? (uint64_t)st->st_size : 0;
	*bytes = walk_bytes;
	if (md->pinned_bytes + walk_bytes > pin_max) {
		snprintf(detail, len, "cache.pin_max is %llu bytes; %llu are pinned already",
			 (unsigned long long)pin_max, (unsigned long long)md->pinned_bytes);
		return ENOSPC;
	}
	struct pin *n = realloc(md->pins, (md->npins + 1) * sizeof *n);
	if (!n)
		return ENOMEM;
	md->pins = n;
	if (!(n[md->npins].path = strdup(path)))
		return ENOMEM;
	n[md->npins++].bytes = walk_bytes;
	md->pinned_bytes += walk_bytes;
	return 0;
}

/* Store the run-time switches and the pins in the pool (modes_state.c).
 * A failure leaves them in force until the manager stops, and says so. */
static void keep_state(struct engine *c)
{
	const struct modes *md = c->modes;
	struct modes_state_item *it = calloc(md->nrules + md->npins + 1, sizeof *it);
	size_t n = 0;
	int rc = -ENOMEM;
	if (it) {
		for (uint32_t i = 0; i < md->nrules; i++)
			if (md->rules[i].runtime)
				it[n++] = (struct modes_state_item){false, md->rules[i].mode,
								    md->rules[i].dir};
		for (uint32_t i = 0; i < md->npins; i++)
			it[n++] = (struct modes_state_item){true, 0, md->pins[i].path};
		rc = modes_state_save(c->pool.dir, it, n);
		free(it);
	}
	if (rc < 0)
		chelld_log("cannot keep the modes and pins in the pool (%s): they hold until this "
			   "manager stops", strerror(-rc));
}

bool do_pin(struct server *s, struct client *cl, const struct chelld_pin *m)
{
	struct engine *c = &s->engine;
	struct modes *md = c->modes;
	struct chelld_pin_reply r = {0};
	struct stat st;
	int rc = 0;
	r.pin_max = pin_limit(c);
	if (!privileged(cl)) {
		rc = EPERM;
		snprintf(r.detail, sizeof r.detail, "only root or the manager's user");
	} else if (m->flags & ~CHELLD_PIN_UNPIN) {
		rc = EINVAL;
	} else if (m->flags & CHELLD_PIN_UNPIN) {
		uint32_t i;
		rc = memchr(m->path, 0, sizeof m->path) ? ENOENT : EINVAL;
		for (i = 0; i < md->npins; i++)
			if (strcmp(md->pins[i].path, m->path) == 0)
				break;
		if (i < md->npins) {
			r.bytes = md->pins[i].bytes;
			md->pinned_bytes -= md->pins[i].bytes;
			free(md->pins[i].path);
			md->pins[i] = md->pins[--md->npins];
			rc = 0;
		} else if (rc == ENOENT) {
			snprintf(r.detail, sizeof r.detail, "not pinned");
		}
	} else if ((rc = check_path(c, m->path, r.detail, sizeof r.detail, &st)) == 0) {
		rc = pin_add(c, m->path, &st, r.pin_max, &r.bytes, r.detail, sizeof r.detail);
	}
	if (rc == 0) {
		repin(c);
		keep_state(c);
	}
	r.pinned_bytes = md->pinned_bytes;
	chelld_log("client %llu (pid %d): %s %.200s (%llu bytes; %llu pinned): %s",
		   (unsigned long long)cl->serial, (int)cl->pid,
		   m->flags & CHELLD_PIN_UNPIN ? "unpin" : "pin",
		   memchr(m->path, 0, sizeof m->path) ? m->path : "?", (unsigned long long)r.bytes,
		   (unsigned long long)md->pinned_bytes, chelld_errname(rc));
	return chelld_reply(cl, &r, sizeof r, CHELLD_MSG_PIN, m->h.seq, rc, -1);
}

bool do_rule(struct server *s, struct client *cl, const struct chelld_rule *m)
{
	struct engine *c = &s->engine;
	const struct modes *md = c->modes;
	static struct chelld_rule_reply r; /* 4 KB of path */
	memset(&r, 0, sizeof r);
	int rc = 0;
	if (m->index == 0) {
		r.kind = CHELLD_RULE_DEFAULTS;
		r.mode = c->cfg->mode;
		r.bytes = md->pinned_bytes;
		r.seq_cutoff = c->cfg->seq_cutoff;
		r.file_max = c->cfg->file_max;
		r.pin_max = pin_limit(c);
		r.seq_bypassed = md->seq_bypassed;
	} else if (m->index - 1 < md->nrules) {
		r.kind = CHELLD_RULE_MODE;
		r.mode = md->rules[m->index - 1].mode;
		snprintf(r.path, sizeof r.path, "%s", md->rules[m->index - 1].dir);
	} else if (m->index - 1 - md->nrules < md->npins) {
		const struct pin *p = &md->pins[m->index - 1 - md->nrules];
		r.kind = CHELLD_RULE_PIN;
		r.bytes = p->bytes;
		snprintf(r.path, sizeof r.path, "%s", p->path);
	} else {
		rc = ENOENT;
	}
	return chelld_reply(cl, &r, sizeof r, CHELLD_MSG_RULE, m->h.seq, rc, -1);
}
