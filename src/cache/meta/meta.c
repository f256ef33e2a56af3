/* SPDX-License-Identifier: MIT */
/*
 * Layout, create/open with validation, and the Cnode operations.
 */
#include "meta_internal.h"

#include <stdlib.h>

#define MAX_ENTRIES (1u << 24) /* Cnodes or chunks: keeps every size in range */

struct layout {
	uint32_t i2c_slots, c2f_slots;
	uint64_t cnode_bitmap_off, cnode_off, i2c_off;
	uint64_t chunk_bitmap_off, chunk_off, c2f_off, end;
};

static uint64_t align64(uint64_t x)
{
	return (x + 63) & ~63ull;
}

static uint32_t pow2_at_least(uint32_t x)
{
	uint32_t p = 2;
	while (p < x)
		p <<= 1;
	return p;
}

/* The one place offsets are derived: create stores them, open demands the
 * stored ones equal these. */
static int compute_layout(uint32_t cnodes, uint32_t chunks, struct layout *l)
{
	if (cnodes < 1 || chunks < 1 || cnodes > MAX_ENTRIES || chunks > MAX_ENTRIES)
		return -EINVAL;
	l->i2c_slots = pow2_at_least(2 * cnodes);
	l->c2f_slots = pow2_at_least(2 * chunks);
	uint64_t o = sizeof(struct mroot);
	l->cnode_bitmap_off = o;
	o = align64(o + 8ull * ((cnodes + 63) / 64));
	l->cnode_off = o;
	o += (uint64_t)cnodes * sizeof(struct mcnode);
	l->i2c_off = o;
	o = align64(o + (uint64_t)l->i2c_slots * sizeof(struct mi2c));
	l->chunk_bitmap_off = o;
	o = align64(o + 8ull * ((chunks + 63) / 64));
	l->chunk_off = o;
	o += (uint64_t)chunks * sizeof(struct mchunk);
	l->c2f_off = o;
	o += (uint64_t)l->c2f_slots * sizeof(struct mc2f);
	l->end = align64(o);
	return 0;
}

uint64_t meta_heap_size(const struct meta_geometry *g)
{
	struct layout l;
	if (!g || compute_layout(g->max_cnodes, g->chunks, &l) < 0)
		return 0;
	return l.end;
}

static int attach(struct chell_region *r, unsigned journal, struct meta **out, char *err, size_t errlen)
{
	uint64_t hs;
	uint8_t *heap = chell_region_heap(r, &hs);
	struct mroot *root = (struct mroot *)heap;
	struct layout l;

	if (hs < sizeof(struct mroot)) {
		meta_err(err, errlen, "heap of %llu bytes is smaller than the metadata root", (unsigned long long)hs);
		return -EUCLEAN;
	}
	if (root->magic != META_MAGIC) {
		meta_err(err, errlen, "no cache metadata in this region (root magic 0x%016llx)",
			 (unsigned long long)root->magic);
		return -ENOENT;
	}
	if (root->version != META_VERSION) {
		meta_err(err, errlen, "cache metadata version %u, this build reads %u", root->version, META_VERSION);
		return -EPROTO;
	}
	if (compute_layout(root->max_cnodes, root->chunks, &l) < 0) {
		meta_err(err, errlen, "bad geometry in the root: %u Cnodes, %u chunks", root->max_cnodes, root->chunks);
		return -EUCLEAN;
	}
	if (root->i2c_slots != l.i2c_slots || root->c2f_slots != l.c2f_slots ||
	    root->cnode_bitmap_off != l.cnode_bitmap_off || root->cnode_off != l.cnode_off ||
	    root->i2c_off != l.i2c_off || root->chunk_bitmap_off != l.chunk_bitmap_off ||
	    root->chunk_off != l.chunk_off || root->c2f_off != l.c2f_off || root->end != l.end) {
		meta_err(err, errlen, "table offsets in the root do not match its geometry");
		return -EUCLEAN;
	}
	if (l.end > hs) {
		meta_err(err, errlen, "metadata needs %llu heap bytes, the region has %llu",
			 (unsigned long long)l.end, (unsigned long long)hs);
		return -EUCLEAN;
	}
	if (root->cnodes > root->max_cnodes || root->chunks_used > root->chunks) {
		meta_err(err, errlen, "counts out of range: %u/%u Cnodes, %u/%u chunks", root->cnodes,
			 root->max_cnodes, root->chunks_used, root->chunks);
		return -EUCLEAN;
	}
	/* The journal must exist and be free now, not at the first update:
	 * an empty transaction records nothing and writes nothing. */
	struct chell_tx *probe;
	int prc = chell_tx_begin(r, journal, &probe);
	if (prc < 0) {
		meta_err(err, errlen, "client journal %u of the region is not usable (%s)", journal, strerror(-prc));
		return prc;
	}
	chell_tx_commit(probe);
	struct meta *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->lru = calloc(root->chunks, sizeof(uint64_t));
	if (!m->lru) {
		free(m);
		return -ENOMEM;
	}
	m->r = r;
	m->journal = journal;
	m->heap = heap;
	m->heap_size = hs;
	m->root = root;
	m->max_cnodes = root->max_cnodes;
	m->chunks = root->chunks;
	m->i2c_mask = l.i2c_slots - 1;
	m->c2f_mask = l.c2f_slots - 1;
	m->cnode_bitmap_off = l.cnode_bitmap_off;
	m->cnode_off = l.cnode_off;
	m->i2c_off = l.i2c_off;
	m->chunk_bitmap_off = l.chunk_bitmap_off;
	m->chunk_off = l.chunk_off;
	m->c2f_off = l.c2f_off;
	/* Recency starts as FIFO order: the persistent allocation sequence. */
	for (uint32_t i = 0; i < m->chunks; i++) {
		m->lru[i] = chunk_at(m, i)->seq;
		if (m->lru[i] > m->clock)
			m->clock = m->lru[i];
	}
	*out = m;
	return 0;
}

int meta_open(struct chell_region *r, unsigned journal, struct meta **out, char *err, size_t errlen)
{
	if (!r || !out)
		return -EINVAL;
	*out = NULL;
	return attach(r, journal, out, err, errlen);
}

static int all_zero(const uint8_t *p, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Zero [off, off+n) transactionally, in pieces a journal can hold. */
static int zero_heap(struct meta *tmp, uint64_t off, uint64_t n)
{
	uint64_t piece = 4096;
	while (n) {
		uint64_t len = n < piece ? n : piece;
		if (all_zero(tmp->heap + off, len)) {
			off += len;
			n -= len;
			continue;
		}
		struct mtx t;
		int rc = mtx_begin(tmp, &t);
		if (rc < 0)
			return rc;
		void *p = mtx_add(&t, off, len);
		if (p)
			memset(p, 0, len);
		rc = mtx_end(&t);
		if (rc == -ENOSPC && piece > 64) {
			piece /= 2;
			continue;
		}
		if (rc < 0)
			return rc;
		off += len;
		n -= len;
	}
	return 0;
}

int meta_create(struct chell_region *r, unsigned journal, const struct meta_geometry *g, struct meta **out,
		char *err, size_t errlen)
{
	struct layout l;
	uint64_t hs;

	if (!r || !g || !out)
		return -EINVAL;
	*out = NULL;
	if (compute_layout(g->max_cnodes, g->chunks, &l) < 0) {
		meta_err(err, errlen, "bad geometry: %u Cnodes, %u chunks (1..%u each)", g->max_cnodes, g->chunks,
			 MAX_ENTRIES);
		return -EINVAL;
	}
	uint8_t *heap = chell_region_heap(r, &hs);
	if (l.end > hs) {
		meta_err(err, errlen, "metadata needs %llu heap bytes, the region has %llu",
			 (unsigned long long)l.end, (unsigned long long)hs);
		return -ENOSPC;
	}
	if (((struct mroot *)heap)->magic == META_MAGIC) {
		meta_err(err, errlen, "the region already holds cache metadata");
		return -EEXIST;
	}
	/* Zero means empty in every table. The root goes first (so a crash
	 * never leaves an old root over half-zeroed tables) and is written
	 * last, in one transaction: a crash leaves no metadata or all of it. */
	struct meta tmp = {.r = r, .journal = journal, .heap = heap, .heap_size = hs};
	int rc = zero_heap(&tmp, 0, sizeof(struct mroot));
	if (rc == 0)
		rc = zero_heap(&tmp, sizeof(struct mroot), l.end - sizeof(struct mroot));
	struct mtx t;
	if (rc == 0)
		rc = mtx_begin(&tmp, &t);
	if (rc < 0) {
		meta_err(err, errlen, "cannot format the metadata: %s", strerror(-rc));
		return rc;
	}
	struct mroot *root = mtx_add(&t, 0, sizeof(*root));
	if (root) {
		memset(root, 0, sizeof(*root));
		root->magic = META_MAGIC;
		root->version = META_VERSION;
		root->max_cnodes = g->max_cnodes;
		root->chunks = g->chunks;
		root->i2c_slots = l.i2c_slots;
		root->c2f_slots = l.c2f_slots;
		root->seq = 1;
		root->cnode_bitmap_off = l.cnode_bitmap_off;
		root->cnode_off = l.cnode_off;
		root->i2c_off = l.i2c_off;
		root->chunk_bitmap_off = l.chunk_bitmap_off;
		root->chunk_off = l.chunk_off;
		root->c2f_off = l.c2f_off;
		root->end = l.end;
	}
	rc = mtx_end(&t);
	if (rc < 0) {
		meta_err(err, errlen, "cannot write the metadata root: %s", strerror(-rc));
		return rc;
	}
	return attach(r, journal, out, err, errlen);
}

static struct chell_region_layout path_layout(const struct meta_geometry *g)
{
	/* One journal; 1024 entries (64 KB) hold the largest update: a hash
	 * cluster shift plus a few small records. */
	return (struct chell_region_layout){1, 1024, meta_heap_size(g)};
}

int meta_create_path(const char *path, const struct meta_geometry *g, struct meta **out, char *err,
		     size_t errlen)
{
	struct chell_region *r;
	if (!path || !g || !out)
		return -EINVAL;
	*out = NULL;
	struct chell_region_layout lay = path_layout(g);
	if (!lay.heap_size) {
		meta_err(err, errlen, "bad geometry: %u Cnodes, %u chunks", g->max_cnodes, g->chunks);
		return -EINVAL;
	}
	int rc = chell_region_create(path, &lay, &r, err, errlen);
	if (rc < 0)
		return rc;
	rc = meta_create(r, 0, g, out, err, errlen);
	if (rc < 0) {
		chell_region_close(r);
		return rc;
	}
	(*out)->own_region = 1;
	return 0;
}

int meta_open_path(const char *path, struct meta **out, char *err, size_t errlen)
{
	struct chell_region *r;
	if (!path || !out)
		return -EINVAL;
	*out = NULL;
	int rc = chell_region_open(path, &r, err, errlen);
	if (rc < 0)
		return rc;
	rc = meta_open(r, 0, out, err, errlen);
	if (rc < 0) {
		chell_region_close(r);
		return rc;
	}
	(*out)->own_region = 1;
	return 0;
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	if (m->own_region)
		chell_region_close(m->r);
	free(m->lru);
	free(m);
}

void meta_stats(const struct meta *m, struct meta_stats *st)
{
	st->max_cnodes = m->max_cnodes;
	st->cnodes = m->root->cnodes;
	st->chunks = m->chunks;
	st->chunks_used = m->root->chunks_used;
	st->seq = m->root->seq;
}

/* ------------------------------------------------------------ Cnodes */

/* A Cnode id the caller passed, or read from a map: it must name an
 * allocated Cnode. */
static int cnode_valid(struct meta *m, uint32_t id)
{
	if (id >= m->max_cnodes)
		return -EINVAL;
	if (!bm_test(m, m->cnode_bitmap_off, id))
		return -ENOENT;
	return 0;
}

int meta_cnode_get(struct meta *m, uint64_t dev, uint64_t ino, bool create, const char *path)
{
	if (!m)
		return -EINVAL;
	uint32_t s = i2c_find(m, dev, ino);
	if (s != META_NONE) {
		uint32_t id = i2c_at(m, s)->cnode1 - 1;
		if (id >= m->max_cnodes || !bm_test(m, m->cnode_bitmap_off, id))
			return -EUCLEAN;
		return (int)id;
	}
	if (!create)
		return -ENOENT;
	size_t plen = path ? strlen(path) : 0;
	if (plen >= META_PATH_MAX)
		return -ENAMETOOLONG;
	if (m->root->cnodes >= m->max_cnodes)
		return -ENOSPC;
	uint32_t id = bm_find_clear(m, m->cnode_bitmap_off, m->max_cnodes, 0);
	if (id == META_NONE)
		return -EUCLEAN; /* the count said there was room */

	struct mtx t;
	int rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	bm_set(&t, m->cnode_bitmap_off, id, 1);
	struct mcnode *c = mtx_add(&t, m->cnode_off + (uint64_t)id * sizeof(*c), sizeof(*c));
	if (c) {
		memset(c, 0, sizeof(*c));
		c->dev = dev;
		c->ino = ino;
		if (plen)
			memcpy(c->path, path, plen);
	}
	if (!t.p.err)
		i2c_insert(&t, dev, ino, id);
	uint32_t *cnt = mtx_add(&t, meta_off(m, &m->root->cnodes), sizeof(uint32_t));
	if (cnt)
		(*cnt)++;
	rc = mtx_end(&t);
	return rc < 0 ? rc : (int)id;
}

int meta_cnode_info(struct meta *m, uint32_t id, struct meta_cnode_info *out)
{
	if (!m || !out)
		return -EINVAL;
	int rc = cnode_valid(m, id);
	if (rc < 0)
		return rc;
	const struct mcnode *c = cnode_at(m, id);
	out->id = id;
	out->flags = c->flags;
	out->dev = c->dev;
	out->ino = c->ino;
	out->size = c->size;
	out->mtime_ns = c->mtime_ns;
	out->ctime_ns = c->ctime_ns;
	out->chunks = c->chunks;
	memcpy(out->path, c->path, META_PATH_MAX);
	out->path[META_PATH_MAX - 1] = '\0'; /* never trust the image's NUL */
	return 0;
}

/* Update the 40 bytes from `size` to `flags` of a Cnode in one range. */
static int cnode_update(struct meta *m, uint32_t id, const uint64_t *size, const int64_t *mt,
			const int64_t *ct, const uint32_t *flags)
{
	if (!m)
		return -EINVAL;
	int rc = cnode_valid(m, id);
	if (rc < 0)
		return rc;
	struct mcnode *c = cnode_at(m, id);
	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	if (mtx_add(&t, meta_off(m, &c->size), offsetof(struct mcnode, chunks) - offsetof(struct mcnode, size))) {
		if (size)
			c->size = *size;
		if (mt)
			c->mtime_ns = *mt;
		if (ct)
			c->ctime_ns = *ct;
		if (flags)
			c->flags = *flags;
	}
	return mtx_end(&t);
}

int meta_cnode_set_attr(struct meta *m, uint32_t id, uint64_t size, int64_t mtime_ns, int64_t ctime_ns)
{
	return cnode_update(m, id, &size, &mtime_ns, &ctime_ns, NULL);
}

int meta_cnode_set_size(struct meta *m, uint32_t id, uint64_t size)
{
	return cnode_update(m, id, &size, NULL, NULL, NULL);
}

int meta_cnode_set_flags(struct meta *m, uint32_t id, uint32_t flags)
{
	return cnode_update(m, id, NULL, NULL, NULL, &flags);
}

int meta_cnode_remove(struct meta *m, uint32_t id)
{
	if (!m)
		return -EINVAL;
	int rc = cnode_valid(m, id);
	if (rc < 0)
		return rc;
	struct mcnode *c = cnode_at(m, id);
	if (c->chunks)
		return -EBUSY;
	uint32_t s = i2c_find(m, c->dev, c->ino);
	if (s == META_NONE || i2c_at(m, s)->cnode1 != id + 1)
		return -EUCLEAN;
	if (m->root->cnodes == 0)
		return -EUCLEAN;
	struct mtx t;
	rc = mtx_begin(m, &t);
	if (rc < 0)
		return rc;
	i2c_delete(&t, s);
	bm_set(&t, m->cnode_bitmap_off, id, 0);
	/* A free Cnode is all zero, like a never-used one (meta_check). */
	void *p = mtx_add(&t, meta_off(m, c), sizeof(*c));
	if (p)
		memset(p, 0, sizeof(*c));
	uint32_t *cnt = mtx_add(&t, meta_off(m, &m->root->cnodes), sizeof(uint32_t));
	if (cnt)
		(*cnt)--;
	return mtx_end(&t);
}
