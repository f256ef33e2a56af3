/* SPDX-License-Identifier: MIT */
/*
 * WARP's patterns persisted across restarts (warp.md §IV-D, §V): each
 * file's stable node states, successors and cross-file tuples, keyed by
 * file identity, in the heap of a Chell region (patterns_internal.h has
 * the format).
 *
 * A process reads the whole file once at open, under a shared lock, into
 * a private copy (recovery and every check run on the copy): loads are
 * then plain lookups in memory, and the file is locked only while it is
 * read or stored. A store opens the region (exclusive lock), writes the
 * entry in one transaction, refreshes the copy and closes it again, so
 * any number of processes share one patterns file. A store that would
 * change nothing is skipped without touching the file.
 *
 * Damage: a file that is not a region, not a patterns heap, or holds a
 * field out of range is ignored with one warning naming the file and the
 * field, and rebuilt empty. Patterns are hints: a lost or wrong one costs
 * speed, never correctness (the data path validates every node number it
 * is given against the file).
 *
 * Inside libchell.so the file is read with raw system calls (chell/sys.h);
 * the region itself is opened by the persistence core.
 */
#include "patterns_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>

#include "chell/sys.h"
#include "pmem/pmem_internal.h"

int pat_fault_skip_undo;

struct warp_patterns {
	pthread_mutex_t lock;
	char *path;      /* NULL: an image opened from memory (read-only) */
	uint8_t *img;    /* the whole region image (private copy) */
	size_t img_len;
	struct chell_region *mem; /* the copy, opened */
	uint32_t new_entries;      /* files a file made (or remade) here holds */
	uint8_t *heap;   /* its heap */
	/* (dev, ino) -> entry, open addressing over the copy: a load at
	 * every open must not walk a thousand entries. UINT32_MAX: empty. */
	uint32_t *idx;
	uint32_t icap;   /* a power of two, >= 2 * entries; 0: no index */
};

/* ------------------------------------------------------------ warnings */

/* libchell.so's log when linked into it; stderr in the CLI and the tests. */
__attribute__((weak)) void chell_log(const char *fmt, ...);

static int warned;

static void warn_once(const char *path, const char *what)
{
	if (__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		return;
	if (chell_log)
		chell_log("warning: warp patterns file %s: %s; ignored and rebuilt (costs speed, not correctness)",
			  path, what);
	else
		fprintf(stderr, "chell: warning: warp patterns file %s: %s; ignored and rebuilt (costs speed, not "
			"correctness)\n", path, what);
}

/* ------------------------------------------------------------ format */

static uint32_t root_crc(const struct pat_root *r)
{
	return chell_crc32c(0, r, 24);
}

static uint8_t *entry_ptr(uint8_t *heap, uint32_t i)
{
	return heap + PAT_ROOT_SIZE + (uint64_t)i * PAT_ENTRY_SIZE;
}

static uint32_t entry_crc(const struct pat_entry *e)
{
	struct pat_entry h = *e;
	h.crc = 0;
	uint32_t n = e->n <= PAT_NODES ? e->n : PAT_NODES;
	uint32_t c = chell_crc32c(0, &h, sizeof h);
	c = chell_crc32c(c, pat_states(e), n);
	return chell_crc32c(c, pat_succ(e), 4u * n);
}

struct chell_region_layout pat_layout(uint32_t entries)
{
	return (struct chell_region_layout){
		.journals = 1, .journal_entries = PAT_JOURNAL_ENTRIES, .heap_size = PAT_HEAP_SIZE(entries)};
}

int pat_format(struct chell_region *r, uint32_t entries)
{
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	if (entries == 0 || entries > PAT_MAX_ENTRIES || size < PAT_HEAP_SIZE(entries))
		return -ENOSPC;
	/* A new region's heap is zero (a new file, or memory the caller
	 * zeroed): empty entries need no writing, the root is the commit. */
	struct pat_root *root = (struct pat_root *)heap;
	root->magic = PAT_MAGIC;
	root->version = PAT_VERSION;
	root->entries = entries;
	root->max_nodes = PAT_NODES;
	root->entry_size = (uint32_t)PAT_ENTRY_SIZE;
	root->crc = root_crc(root);
	/* One transaction, so a crash leaves either the zero heap (not a
	 * patterns file: rebuilt) or the whole root. */
	struct chell_tx *tx;
	int rc = chell_tx_begin(r, 0, &tx);
	if (rc)
		return rc;
	struct pat_root copy = *root;
	memset(root, 0, sizeof *root);
	rc = chell_tx_add_range(tx, 0, sizeof *root);
	if (rc) {
		chell_tx_abort(tx);
		return rc;
	}
	*root = copy;
	return chell_tx_commit(tx);
}

static int bad(char *field, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(char *field, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(field, len, fmt, ap);
	va_end(ap);
	return -EUCLEAN;
}

int pat_validate_root(const uint8_t *heap, uint64_t heap_size, char *field, size_t len)
{
	if (heap_size < PAT_ROOT_SIZE)
		return bad(field, len, "region heap: %llu bytes, too small for the patterns root",
			   (unsigned long long)heap_size);
	const struct pat_root *r = (const struct pat_root *)heap;
	if (r->magic != PAT_MAGIC)
		return bad(field, len, "root.magic: 0x%016llx, not a patterns file (0x%016llx)",
			   (unsigned long long)r->magic, (unsigned long long)PAT_MAGIC);
	if (r->crc != root_crc(r))
		return bad(field, len, "root.crc: stored 0x%08x, computed 0x%08x", r->crc, root_crc(r));
	if (r->version != PAT_VERSION)
		return bad(field, len, "root.version: %u, this build reads %u", r->version, PAT_VERSION);
	if (r->max_nodes != PAT_NODES || r->entry_size != PAT_ENTRY_SIZE)
		return bad(field, len, "root.max_nodes/entry_size: %u/%u, this build has %u/%u", r->max_nodes,
			   r->entry_size, PAT_NODES, (unsigned)PAT_ENTRY_SIZE);
	if (r->entries == 0 || r->entries > PAT_MAX_ENTRIES)
		return bad(field, len, "root.entries: %u (1..%u)", r->entries, PAT_MAX_ENTRIES);
	if (heap_size < PAT_HEAP_SIZE(r->entries))
		return bad(field, len, "root.entries: %u entries need a heap of %llu bytes, the region has %llu",
			   r->entries, (unsigned long long)PAT_HEAP_SIZE(r->entries), (unsigned long long)heap_size);
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	if (x[1] != y[1])
		return x[1] < y[1] ? -1 : 1;
	return 0;
}

int pat_validate(const uint8_t *heap, uint64_t heap_size, char *field, size_t len)
{
	int rc = pat_validate_root(heap, heap_size, field, len);
	if (rc)
		return rc;
	const struct pat_root *r = (const struct pat_root *)heap;
	for (uint32_t i = 0; i < r->entries; i++) {
		const struct pat_entry *e = pat_entry_at(heap, i);
		if (e->ino == 0)
			continue;
		if (e->n == 0 || e->n > PAT_NODES)
			return bad(field, len, "entry[%u].n: %u nodes (1..%u)", i, e->n, PAT_NODES);
		if (e->stamp > r->clock)
			return bad(field, len, "entry[%u].stamp: %llu, after root.clock %llu", i,
				   (unsigned long long)e->stamp, (unsigned long long)r->clock);
		if (e->crc != entry_crc(e))
			return bad(field, len, "entry[%u].crc: stored 0x%08x, computed 0x%08x", i, e->crc, entry_crc(e));
		for (uint32_t j = 0; j < e->n; j++) {
			if (pat_states(e)[j] >= WARP_NSTATES)
				return bad(field, len, "entry[%u].states[%u]: %u", i, j, pat_states(e)[j]);
			uint32_t s = pat_succ(e)[j];
			if (s != WARP_NODE_NONE && s >= e->n)
				return bad(field, len, "entry[%u].succ[%u]: %u, the file has %u nodes", i, j, s, e->n);
		}
		for (unsigned k = 0; k < WARP_XFILE_SLOTS; k++)
			if (e->xf[k].ctx && e->xf[k].ino == 0)
				return bad(field, len, "entry[%u].xf[%u].ino: 0 in a used tuple", i, k);
	}
	/* No file twice: sort (dev, ino, index) of the used entries. */
	uint64_t (*ids)[3] = malloc(sizeof *ids * r->entries);
	if (!ids)
		return -ENOMEM;
	uint32_t used = 0;
	for (uint32_t i = 0; i < r->entries; i++) {
		const struct pat_entry *e = pat_entry_at(heap, i);
		if (e->ino) {
			ids[used][0] = e->dev;
			ids[used][1] = e->ino;
			ids[used++][2] = i;
		}
	}
	qsort(ids, used, sizeof *ids, id_cmp);
	rc = 0;
	for (uint32_t k = 1; k < used && !rc; k++)
		if (ids[k][0] == ids[k - 1][0] && ids[k][1] == ids[k - 1][1]) {
			uint64_t a = ids[k - 1][2] < ids[k][2] ? ids[k - 1][2] : ids[k][2];
			uint64_t b = ids[k - 1][2] < ids[k][2] ? ids[k][2] : ids[k - 1][2];
			rc = bad(field, len, "entry[%u]: the same file as entry[%u]", (unsigned)b, (unsigned)a);
		}
	free(ids);
	return rc;
}

const struct pat_entry *pat_find(const uint8_t *heap, struct warp_file_id id)
{
	if (id.ino == 0)
		return NULL;
	for (uint32_t i = 0; i < pat_entries(heap); i++) {
		const struct pat_entry *e = pat_entry_at(heap, i);
		if (e->ino == id.ino && e->dev == id.dev)
			return e;
	}
	return NULL;
}

/* Build the entry a store would write into buf (PAT_ENTRY_SIZE bytes,
 * stamp and crc left 0). Out-of-range input is made safe, not refused. */
static void build_entry(uint8_t *buf, struct warp_file_id id, uint32_t n, const uint8_t *states,
			const uint32_t *succ, const struct warp_xfile xf[WARP_XFILE_SLOTS])
{
	memset(buf, 0, PAT_ENTRY_SIZE);
	struct pat_entry *e = (struct pat_entry *)buf;
	uint8_t *st = buf + sizeof *e;
	uint32_t *su = (uint32_t *)(st + PAT_NODES);
	if (n > PAT_NODES)
		n = PAT_NODES;
	e->dev = id.dev;
	e->ino = id.ino;
	e->n = n;
	for (uint32_t j = 0; j < n; j++) {
		st[j] = states && states[j] < WARP_NSTATES ? states[j] : WARP_NORMAL;
		su[j] = succ && succ[j] < n ? succ[j] : WARP_NODE_NONE;
	}
	for (uint32_t j = n; j < PAT_NODES; j++)
		su[j] = 0;
	if (xf)
		for (unsigned k = 0; k < WARP_XFILE_SLOTS; k++) {
			if (!xf[k].ctx || !xf[k].next.ino)
				continue;
			e->xf[k].ctx = xf[k].ctx;
			e->xf[k].dev = xf[k].next.dev;
			e->xf[k].ino = xf[k].next.ino;
			e->xf[k].hint = xf[k].hint_node;
			e->xf[k].age = xf[k].age;
		}
}

/* Does the stored entry say what buf says (stamp and crc aside)? */
static bool same_entry(const struct pat_entry *e, const uint8_t *buf)
{
	struct pat_entry a = *e, b;
	memcpy(&b, buf, sizeof b);
	a.stamp = b.stamp = 0;
	a.crc = b.crc = 0;
	return memcmp(&a, &b, sizeof a) == 0 &&
	       memcmp(pat_states(e), buf + sizeof b, PAT_NODES + 4u * PAT_NODES) == 0;
}

/* The heap of r is one of patterns: -EUCLEAN if its root does not say so. */
static int region_ok(struct chell_region *r)
{
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	if (size < PAT_ROOT_SIZE || pat_entries(heap) == 0 || size < PAT_HEAP_SIZE(pat_entries(heap)))
		return -EUCLEAN;
	return 0;
}

/* ------------------------------------------------------------ the index */

static uint32_t id_hash(struct warp_file_id id)
{
	uint64_t x = id.dev * 0x9e3779b97f4a7c15ULL ^ id.ino * 0xc2b2ae3d27d4eb4fULL;
	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	return (uint32_t)(x ^ (x >> 32));
}

/* Rebuild the index over the copy (after it changed). Without memory the
 * lookups fall back to the linear search. */
static void index_build(struct warp_patterns *p)
{
	uint32_t n = pat_entries(p->heap), cap = 16;
	while (cap < 2 * n)
		cap <<= 1;
	if (cap != p->icap) {
		free(p->idx);
		p->idx = malloc(sizeof *p->idx * cap);
		p->icap = p->idx ? cap : 0;
	}
	if (!p->idx)
		return;
	memset(p->idx, 0xff, sizeof *p->idx * cap);
	for (uint32_t i = 0; i < n; i++) {
		const struct pat_entry *e = pat_entry_at(p->heap, i);
		if (!e->ino)
			continue;
		uint32_t h = id_hash((struct warp_file_id){e->dev, e->ino}) & (cap - 1);
		while (p->idx[h] != UINT32_MAX)
			h = (h + 1) & (cap - 1);
		p->idx[h] = i;
	}
}

static const struct pat_entry *index_find(const struct warp_patterns *p, struct warp_file_id id)
{
	if (!p->icap)
		return pat_find(p->heap, id);
	if (id.ino == 0)
		return NULL;
	for (uint32_t h = id_hash(id) & (p->icap - 1); p->idx[h] != UINT32_MAX; h = (h + 1) & (p->icap - 1)) {
		const struct pat_entry *e = pat_entry_at(p->heap, p->idx[h]);
		if (e->ino == id.ino && e->dev == id.dev)
			return e;
	}
	return NULL;
}

/* ------------------------------------------------------------ opening */

/* Recursive: a warp_patterns_each callback may load. */
static void lock_init(struct warp_patterns *p)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&p->lock, &a);
	pthread_mutexattr_destroy(&a);
}

static void free_patterns(struct warp_patterns *p)
{
	if (!p)
		return;
	if (p->mem)
		chell_region_close(p->mem);
	free(p->img);
	free(p->path);
	free(p->idx);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Adopt img (malloc'd, len bytes) as p's copy: open it in memory (recovery
 * on the copy) and check the patterns heap. On failure img is freed. */
static int adopt(struct warp_patterns *p, uint8_t *img, size_t len, char *err, size_t errlen)
{
	struct chell_region *r;
	int rc = chell_region_open_mem(img, len, NULL, &r, err, errlen);
	if (rc) {
		free(img);
		return rc == -ENOMEM ? rc : -EUCLEAN;
	}
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	rc = pat_validate(heap, size, err, errlen);
	if (rc) {
		chell_region_close(r);
		free(img);
		return rc;
	}
	if (p->mem)
		chell_region_close(p->mem);
	free(p->img);
	p->img = img;
	p->img_len = len;
	p->mem = r;
	p->heap = heap;
	index_build(p);
	return 0;
}

int warp_patterns_open_mem(const void *img, size_t len, struct warp_patterns **out, char *err, size_t errlen)
{
	*out = NULL;
	struct warp_patterns *p = calloc(1, sizeof *p);
	/* 64-byte aligned copy: the region code wants an aligned image */
	uint8_t *copy = aligned_alloc(64, (len + 63) & ~(size_t)63);
	if (!p || !copy) {
		free(p);
		free(copy);
		return -ENOMEM;
	}
	lock_init(p);
	memcpy(copy, img, len);
	int rc = adopt(p, copy, len, err, errlen);
	if (rc) {
		free_patterns(p);
		return rc;
	}
	*out = p;
	return 0;
}

/* Read the whole file under a shared lock (a store holds an exclusive one,
 * so the copy is never half a transaction). *img malloc'd. */
static int read_file(const char *path, uint8_t **img, size_t *len, char *err, size_t errlen)
{
	int fd = sys_open(path, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open: %s", strerror(-fd));
		return fd;
	}
	int rc = (int)CHELL_SC(SYS_flock, fd, LOCK_SH, 0, 0, 0, 0);
	struct stat st;
	if (!rc)
		rc = sys_fstat(fd, &st);
	if (rc) {
		snprintf(err, errlen, "cannot lock or stat: %s", strerror(-rc));
		sys_close(fd);
		return rc;
	}
	if (st.st_size <= 0 || st.st_size > (off_t)64 << 20) {
		snprintf(err, errlen, "file size: %lld bytes, not a patterns region", (long long)st.st_size);
		sys_close(fd);
		return -EUCLEAN;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *b = aligned_alloc(64, (n + 63) & ~(size_t)63);
	if (!b) {
		sys_close(fd);
		return -ENOMEM;
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = sys_pread(fd, b + got, n - got, (off_t)got);
		if (r <= 0) {
			snprintf(err, errlen, "short read at %zu of %zu bytes", got, n);
			free(b);
			sys_close(fd);
			return r < 0 ? (int)r : -EIO;
		}
		got += (size_t)r;
	}
	sys_close(fd); /* drops the lock */
	*img = b;
	*len = n;
	return 0;
}

int warp_patterns_open_ro(const char *path, struct warp_patterns **out, char *err, size_t errlen)
{
	*out = NULL;
	uint8_t *img;
	size_t len;
	int rc = read_file(path, &img, &len, err, errlen);
	if (rc)
		return rc;
	struct warp_patterns *p = calloc(1, sizeof *p);
	if (!p) {
		free(img);
		return -ENOMEM;
	}
	lock_init(p);
	rc = adopt(p, img, len, err, errlen);
	if (rc) {
		free_patterns(p);
		return rc;
	}
	*out = p;
	return 0;
}

static void nap(void)
{
	struct timespec ts = {0, 200000};
	CHELL_SC(SYS_nanosleep, &ts, NULL, 0, 0, 0, 0);
}

/* Open the region itself for a store, waiting a little for a reader's
 * shared lock or another store (the persistence core takes the lock
 * without blocking). */
static int region_open_wait(const char *path, struct chell_region **r, char *err, size_t errlen)
{
	int rc = -EAGAIN;
	for (int tries = 0; tries < 200; tries++) {
		rc = chell_region_open(path, r, err, errlen);
		if (rc != -EWOULDBLOCK && rc != -EAGAIN)
			break;
		nap();
	}
	return rc;
}

/* Make path an empty patterns file: a new file formatted under a
 * temporary name, then renamed over path, so no process ever reads a
 * half-formatted file and the damaged one is never written into (a
 * process still reading it keeps its inode). */
static int rebuild(const char *path, uint32_t entries)
{
	char err[256], tmp[4200];
	struct chell_region *r;
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.new.%d", path, (int)sys_getpid()) >= sizeof tmp)
		return -ENAMETOOLONG;
	sys_unlink(tmp);
	struct chell_region_layout lay = pat_layout(entries);
	int rc = chell_region_create(tmp, &lay, &r, err, sizeof err);
	if (rc)
		return rc;
	rc = pat_format(r, entries);
	chell_region_close(r);
	if (rc == 0)
		rc = (int)CHELL_SC(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path, 0, 0);
	if (rc)
		sys_unlink(tmp);
	return rc;
}

int warp_patterns_open(const char *path, struct warp_patterns **out)
{
	return warp_patterns_open_sized(path, PAT_ENTRIES, out);
}

int warp_patterns_open_sized(const char *path, uint32_t entries, struct warp_patterns **out)
{
	char err[512];
	*out = NULL;
	if (!path || !*path || entries == 0 || entries > PAT_MAX_ENTRIES)
		return -EINVAL;
	struct warp_patterns *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	lock_init(p);
	p->new_entries = entries;
	p->path = strdup(path);
	if (!p->path) {
		free_patterns(p);
		return -ENOMEM;
	}
	uint8_t *img;
	size_t len;
	int rc = read_file(path, &img, &len, err, sizeof err);
	if (rc == 0)
		rc = adopt(p, img, len, err, sizeof err);
	if (rc == -EUCLEAN) {
		warn_once(path, err);
		rc = rebuild(path, p->new_entries);
	} else if (rc == -ENOENT) {
		rc = rebuild(path, p->new_entries);
	}
	if (rc == 0 && !p->mem) {
		rc = read_file(path, &img, &len, err, sizeof err);
		if (rc == 0)
			rc = adopt(p, img, len, err, sizeof err);
	}
	if (rc) {
		free_patterns(p);
		return rc;
	}
	*out = p;
	return 0;
}

uint32_t warp_patterns_load(struct warp_patterns *p, struct warp_file_id id, uint32_t n, uint8_t *states,
			    uint32_t *succ, struct warp_xfile xf[WARP_XFILE_SLOTS])
{
	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	const struct pat_entry *e = index_find(p, id);
	uint32_t k = 0;
	if (e) {
		/* The copy's entries were checked at open, not after a refresh
		 * from another process's stores: bound and sanitise here. */
		k = e->n < n ? e->n : n;
		if (k > PAT_NODES)
			k = PAT_NODES;
		for (uint32_t j = 0; j < k; j++) {
			if (states)
				states[j] = pat_states(e)[j] < WARP_NSTATES ? pat_states(e)[j] : WARP_NORMAL;
			if (succ)
				succ[j] = pat_succ(e)[j] < n ? pat_succ(e)[j] : WARP_NODE_NONE;
		}
		if (xf)
			for (unsigned i = 0; i < WARP_XFILE_SLOTS; i++) {
				xf[i].ctx = e->xf[i].ctx;
				xf[i].next.dev = e->xf[i].dev;
				xf[i].next.ino = e->xf[i].ino;
				xf[i].hint_node = e->xf[i].hint;
				xf[i].age = e->xf[i].age;
			}
	}
	pthread_mutex_unlock(&p->lock);
	return k;
}

/* The slot a batch's store of id takes in the region's heap. When the copy
 * mirrors the region (no other process stored since it was made) the
 * copy's index finds id's own slot and a cursor the first empty one, so a
 * batch of new files costs no scan per store. UINT32_MAX otherwise, and
 * once the file is full: the caller scans (pick_slot_besides). The ids of
 * one batch are distinct. */
static uint32_t batch_slot(struct warp_patterns *p, bool mirror, const uint8_t *heap, struct warp_file_id id,
			   uint32_t *empty)
{
	uint32_t n = pat_entries(heap);
	if (!p || !mirror)
		return UINT32_MAX;
	const struct pat_entry *c = index_find(p, id);
	if (c)
		return (uint32_t)(((const uint8_t *)c - p->heap - PAT_ROOT_SIZE) / PAT_ENTRY_SIZE);
	for (; *empty < n; (*empty)++)
		if (!pat_entry_at(heap, *empty)->ino)
			return (*empty)++;
	return UINT32_MAX;
}

/* After a batch stored into the region `heap` (its slots): bring the copy
 * up to date. Only those entries and the clock when the copy mirrored the
 * region before the batch; the whole heap (its root checked) when someone
 * else stored meanwhile. False when the layout differs: the caller reads
 * the file again once it has closed the region (reading takes a shared
 * lock, which the region's exclusive one would refuse even in this
 * process). */
static bool refresh(struct warp_patterns *p, const uint8_t *heap, uint64_t size, bool mirror,
		    const uint32_t *slots, size_t nslots)
{
	uint64_t mine;
	chell_region_heap(p->mem, &mine);
	struct pat_root *cr = (struct pat_root *)p->heap;
	const struct pat_root *rr = (const struct pat_root *)heap;
	if (mine == size && mirror) {
		for (size_t i = 0; i < nslots; i++) {
			uint64_t off = PAT_ROOT_SIZE + (uint64_t)slots[i] * PAT_ENTRY_SIZE;
			memcpy(p->heap + off, heap + off, PAT_ENTRY_SIZE);
		}
		cr->clock = rr->clock;
	} else if (mine == size) {
		memcpy(p->heap, heap, size);
	} else {
		return false; /* another layout: the file was rebuilt */
	}
	return true;
}

/* One transaction over the entries group[0..n) (record index, slot): the
 * undo records of the clock and of every entry, one fence, the stores, the
 * commit. A transaction per group, not per entry: on a file without DAX
 * every fence is an msync that waits for the disk. */
struct grp {
	size_t rec;
	uint32_t slot;
};
static int store_group(struct chell_region *r, const struct warp_pattern_rec *recs, const struct grp *g, size_t n,
		       size_t *recorded)
{
	_Alignas(8) uint8_t buf[PAT_ENTRY_SIZE]; /* no static: a crash-test hook stores from inside a store */
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	struct pat_root *root = (struct pat_root *)heap;
	struct chell_tx *tx;
	*recorded = 0;
	int rc = chell_tx_begin(r, 0, &tx);
	if (rc)
		return rc;
	rc = chell_tx_add_range_nodrain(tx, offsetof(struct pat_root, clock), sizeof root->clock);
	size_t k = 0;
	for (; k < n && !rc; k++) {
		if (pat_fault_skip_undo)
			continue;
		rc = chell_tx_add_range_nodrain(tx, PAT_ROOT_SIZE + (uint64_t)g[k].slot * PAT_ENTRY_SIZE,
						PAT_ENTRY_SIZE);
		if (rc == -ENOSPC && k > 0) {
			rc = 0; /* the journal is full: these now, the rest in the next one */
			break;
		}
	}
	if (rc) {
		chell_tx_abort(tx);
		return rc;
	}
	chell_tx_fence(tx);
	for (size_t i = 0; i < k; i++) {
		const struct warp_pattern_rec *x = &recs[g[i].rec];
		build_entry(buf, x->id, x->n, x->states, x->succ, x->xf);
		root->clock++;
		struct pat_entry *ne = (struct pat_entry *)buf;
		ne->stamp = root->clock;
		ne->crc = entry_crc(ne);
		memcpy(entry_ptr(heap, g[i].slot), buf, PAT_ENTRY_SIZE);
	}
	rc = chell_tx_commit(tx);
	*recorded = rc ? 0 : k;
	return rc;
}

/* Store group[0..n) in as many transactions as the journal needs. */
static int store_groups(struct chell_region *r, const struct warp_pattern_rec *recs, const struct grp *g, size_t n)
{
	int rc = 0;
	for (size_t at = 0, done; at < n && rc == 0; at += done)
		rc = store_group(r, recs, g + at, n - at, &done);
	return rc;
}

/* The entry a store of id writes: its own, else an empty one, else the
 * one stored least recently; in a group not stored yet, none that an
 * earlier member took (the bits of `taken`, one per entry: a batch of
 * a thousand files against a list of the group was ~10^9 steps). */
static bool is_taken(const uint64_t *taken, uint32_t slot)
{
	return (taken[slot >> 6] >> (slot & 63)) & 1;
}
static uint32_t pick_slot_besides(const uint8_t *heap, struct warp_file_id id, const uint64_t *taken)
{
	uint32_t empty = UINT32_MAX, oldest = UINT32_MAX;
	for (uint32_t i = 0; i < pat_entries(heap); i++) {
		const struct pat_entry *e = pat_entry_at(heap, i);
		if (e->ino == id.ino && e->dev == id.dev)
			return i;
		if (is_taken(taken, i))
			continue;
		if (e->ino == 0) {
			if (empty == UINT32_MAX)
				empty = i;
		} else if (oldest == UINT32_MAX || e->stamp < pat_entry_at(heap, oldest)->stamp) {
			oldest = i;
		}
	}
	return empty != UINT32_MAX ? empty : oldest;
}

/* Store the batch into the region r: the slots written go to slots[]
 * (*nslots). p: the copy that mirrors r (*mirror set when it does), or
 * NULL. 0 or -errno (what was committed before a failure stays stored). */
static int store_batch(struct warp_patterns *p, struct chell_region *r, const struct warp_pattern_rec *recs,
		       size_t count, uint32_t *slots, size_t *nslots, bool *mirror)
{
	_Alignas(8) uint8_t buf[PAT_ENTRY_SIZE];
	uint64_t size;
	uint8_t *heap = chell_region_heap(r, &size);
	*mirror = false;
	if (p) {
		uint64_t mine;
		chell_region_heap(p->mem, &mine);
		*mirror = mine == size && ((struct pat_root *)p->heap)->clock == ((struct pat_root *)heap)->clock &&
			  pat_entries(p->heap) == pat_entries(heap);
	}
	uint32_t empty = 0;
	*nslots = 0;
	int rc = region_ok(r);
	if (rc)
		return rc;
	struct grp *g = malloc(sizeof *g * (count ? count : 1));
	uint64_t *taken = calloc((pat_entries(heap) + 63) / 64 + 1, sizeof *taken);
	if (!g || !taken) {
		free(g);
		free(taken);
		return -ENOMEM;
	}
	size_t ng = 0;
	/* A batch of more files than the file has entries keeps the last
	 * ones (the least recently stored go first, as across batches): each
	 * record needs a slot no other record of the batch took. */
	size_t first = count > pat_entries(heap) ? count - pat_entries(heap) : 0;
	for (size_t i = 0; i < count; i++) {
		const struct warp_pattern_rec *x = &recs[i];
		if (x->id.ino == 0 || x->n == 0) {
			rc = -EINVAL;
			break;
		}
		if (i < first)
			continue;
		uint32_t slot = batch_slot(p, *mirror, heap, x->id, &empty);
		if (slot == UINT32_MAX)
			slot = pick_slot_besides(heap, x->id, taken);
		if (slot == UINT32_MAX)
			continue; /* every slot holds a record of this batch */
		const struct pat_entry *e = pat_entry_at(heap, slot);
		build_entry(buf, x->id, x->n, x->states, x->succ, x->xf);
		if (!(e->ino == x->id.ino && e->dev == x->id.dev && same_entry(e, buf))) {
			g[ng++] = (struct grp){i, slot};
			taken[slot >> 6] |= 1ull << (slot & 63);
		}
		slots[(*nslots)++] = slot;
	}
	if (rc == 0)
		rc = store_groups(r, recs, g, ng);
	free(g);
	free(taken);
	return rc;
}

int pat_store_region_many(struct chell_region *r, const struct warp_pattern_rec *recs, size_t count)
{
	uint32_t *slots = malloc(sizeof *slots * (count ? count : 1));
	size_t n;
	bool mirror;
	if (!slots)
		return -ENOMEM;
	int rc = store_batch(NULL, r, recs, count, slots, &n, &mirror);
	free(slots);
	return rc;
}

int pat_store_region(struct chell_region *r, struct warp_file_id id, uint32_t n, const uint8_t *states,
		     const uint32_t *succ, const struct warp_xfile xf[WARP_XFILE_SLOTS])
{
	struct warp_pattern_rec one = {id, n, states, succ, xf};
	return pat_store_region_many(r, &one, 1);
}

int warp_patterns_store_many(struct warp_patterns *p, const struct warp_pattern_rec *recs, size_t count)
{
	_Alignas(8) uint8_t buf[PAT_ENTRY_SIZE]; /* no static: a crash-test hook stores from inside a store */
	char err[512];
	if (!p)
		return -EINVAL;
	if (!p->path)
		return -EROFS;
	pthread_mutex_lock(&p->lock);
	/* Only what changed since we last saw the file is written; nothing
	 * at all (the file untouched) when nothing did. */
	struct warp_pattern_rec *changed = malloc(sizeof *changed * (count ? count : 1));
	uint32_t *slots = malloc(sizeof *slots * (count ? count : 1));
	size_t nchanged = 0, nslots = 0;
	int rc = changed && slots ? 0 : -ENOMEM;
	for (size_t i = 0; i < count && rc == 0; i++) {
		if (recs[i].id.ino == 0 || recs[i].n == 0) {
			rc = -EINVAL;
			break;
		}
		build_entry(buf, recs[i].id, recs[i].n, recs[i].states, recs[i].succ, recs[i].xf);
		const struct pat_entry *old = index_find(p, recs[i].id);
		if (!old || !same_entry(old, buf))
			changed[nchanged++] = recs[i];
	}
	if (rc || nchanged == 0) {
		free(changed);
		free(slots);
		pthread_mutex_unlock(&p->lock);
		return rc;
	}
	struct chell_region *r;
	bool reread = false, mirror = false;
	rc = region_open_wait(p->path, &r, err, sizeof err);
	for (int again = 0; again < 2; again++) {
		if (rc == 0) {
			uint64_t size;
			uint8_t *heap = chell_region_heap(r, &size);
			rc = pat_validate_root(heap, size, err, sizeof err);
			if (rc == 0) {
				rc = store_batch(p, r, changed, nchanged, slots, &nslots, &mirror);
				if (nslots) {
					reread = !refresh(p, heap, size, mirror, slots, nslots);
					if (!reread)
						index_build(p);
				}
			}
			chell_region_close(r);
		}
		if (again || (rc != -EUCLEAN && rc != -ENOENT))
			break;
		/* Damaged (or removed) since we read it: start again empty. */
		if (rc == -EUCLEAN)
			warn_once(p->path, err);
		rc = rebuild(p->path, p->new_entries);
		if (rc == 0)
			rc = region_open_wait(p->path, &r, err, sizeof err);
	}
	uint8_t *img;
	size_t len;
	if (reread && read_file(p->path, &img, &len, err, sizeof err) == 0)
		adopt(p, img, len, err, sizeof err);
	free(changed);
	free(slots);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int warp_patterns_store(struct warp_patterns *p, struct warp_file_id id, uint32_t n, const uint8_t *states,
			const uint32_t *succ, const struct warp_xfile xf[WARP_XFILE_SLOTS])
{
	struct warp_pattern_rec one = {id, n, states, succ, xf};
	return warp_patterns_store_many(p, &one, 1);
}

void warp_patterns_each(struct warp_patterns *p, void (*fn)(void *arg, const struct pat_entry *e), void *arg)
{
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < pat_entries(p->heap); i++) {
		const struct pat_entry *e = pat_entry_at(p->heap, i);
		if (e->ino)
			fn(arg, e);
	}
	pthread_mutex_unlock(&p->lock);
}

void warp_patterns_close(struct warp_patterns *p)
{
	free_patterns(p);
}
