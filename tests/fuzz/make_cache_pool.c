/* SPDX-License-Identifier: MIT */
/*
 * chell_cache_pool_seeds OUTDIR: the seed corpus of fuzz_cache_pool
 * (tests/fuzz/corpus/cache_pool), made through the API and then damaged.
 *
 * Each seed is a meta.pool image followed by one chunk control page (the
 * input format of fuzz_cache_pool.c). Valid pools of three sizes, built
 * with cache/meta operations (Cnodes, chunk allocation, valid and dirty
 * blocks, a check-out, unmapping and removal so the hash tables have seen
 * deletions), each with the control page of one of its chunks as chelld
 * writes it; then copies with one field of the metadata root, a Cnode, an
 * I2C slot, a chunk descriptor, a C2F slot, a bitmap or the control page
 * changed, and truncated images. Bytes 1024.. of the control page (unused
 * by the layout) hold a pseudo-random operation script for the target.
 *
 * The corpus is committed; rerun this to remake it when a format changes:
 *   ninja -C build chell_cache_pool_seeds &&
 *   rm -rf tests/fuzz/corpus/cache_pool && build/bin/chell_cache_pool_seeds tests/fuzz/corpus/cache_pool
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cache/policy/policy.h"
#include "chell/pmem.h"
/* White-box: where each table lives, to damage one field at a time. */
#include "meta_internal.h"
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_cache_pool_seeds OUTDIR\n"
	"\n"
	"Writes the seed corpus of the cache pool fuzz target (valid and damaged\n"
	"cache metadata images) into OUTDIR.\n";

static const char *outdir;

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "chell_cache_pool_seeds: %s: %s\n", what, detail);
	exit(1);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct seed {
	uint8_t *img;
	size_t len;
	uint64_t heap; /* file offset of the heap */
	struct cache_ctl ctl;
};

static void put(const char *name, const uint8_t *img, size_t len, const struct cache_ctl *ctl)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", outdir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(img, 1, len, f) != len || (ctl && fwrite(ctl, 1, sizeof *ctl, f) != sizeof *ctl) ||
	    fclose(f) != 0)
		die(path, strerror(errno));
}

static void must(int rc, const char *what)
{
	if (rc < 0)
		die(what, strerror(-rc));
}

/* Build a pool: geometry, then `busy` rounds of operations. */
static void build(struct seed *s, uint32_t cnodes, uint32_t chunks, int busy, uint64_t seed)
{
	char tmp[4200], err[512];
	snprintf(tmp, sizeof tmp, "%s/.tmp-meta.pool", outdir);
	unlink(tmp);
	struct meta_geometry g = {cnodes, chunks};
	struct chell_region_layout lay = {1, 48, meta_heap_size(&g)};
	struct chell_region *r;
	struct meta *m;
	if (chell_region_create(tmp, &lay, &r, err, sizeof err) < 0)
		die("chell_region_create", err);
	if (meta_create(r, 0, &g, &m, err, sizeof err) < 0)
		die("meta_create", err);
	int slot0 = -1;
	for (int i = 0; i < busy; i++) {
		int c = meta_cnode_get(m, 8, 1000 + (uint64_t)i, true, "/backing/file");
		must(c, "meta_cnode_get");
		must(meta_cnode_set_attr(m, (uint32_t)c, (uint64_t)(i + 1) << 21, 1000 * i, 2000 * i),
		     "meta_cnode_set_attr");
		for (uint64_t k = 0; k < 2; k++) {
			int sl = meta_chunk_map(m, (uint32_t)c, k);
			if (sl == -ENOSPC)
				break;
			must(sl, "meta_chunk_map");
			if (slot0 < 0)
				slot0 = sl;
			must(meta_mark_valid(m, (uint32_t)sl, 0, 16), "meta_mark_valid");
			must(meta_mark_dirty(m, (uint32_t)sl, (unsigned)(rnd(&seed) % 16), 1),
			     "meta_mark_dirty");
		}
	}
	/* Deletions: the last Cnode's chunks are cleaned and unmapped, then it goes. */
	if (busy > 2) {
		uint32_t last = (uint32_t)meta_cnode_get(m, 8, 1000 + (uint64_t)busy - 1, false, NULL);
		for (uint64_t k = 0; k < 2; k++) {
			int sl = meta_chunk_lookup(m, last, k);
			if (sl < 0)
				continue;
			struct meta_blocks out;
			must(meta_checkout(m, (uint32_t)sl, &out), "meta_checkout");
			must(meta_checkin(m, (uint32_t)sl), "meta_checkin");
			must(meta_chunk_unmap(m, (uint32_t)sl), "meta_chunk_unmap");
		}
		must(meta_cnode_remove(m, last), "meta_cnode_remove");
	}
	/* One chunk left checked out, as a crash during write-back leaves it. */
	if (busy > 1) {
		struct meta_blocks out;
		int sl = meta_chunk_lookup(m, 1, 0);
		if (sl >= 0)
			must(meta_checkout(m, (uint32_t)sl, &out), "meta_checkout");
	}
	char cerr[512];
	if (meta_check(m, cerr, sizeof cerr) < 0)
		die("meta_check of a built pool", cerr);

	/* The control page of slot0 as chelld writes it (cache/layout.h). */
	memset(&s->ctl, 0, sizeof s->ctl);
	s->ctl.magic = CACHE_CTL_MAGIC;
	s->ctl.version = CACHE_CTL_VERSION;
	s->ctl.state = CACHE_CHUNK_LIVE;
	dirty_table *dt = dirty_table_init(s->ctl.dirty, 1);
	if (slot0 >= 0) {
		struct meta_chunk_info ci;
		struct meta_cnode_info cn;
		must(meta_chunk_info(m, (uint32_t)slot0, &ci), "meta_chunk_info");
		must(meta_cnode_info(m, ci.cnode, &cn), "meta_cnode_info");
		s->ctl.slot = (uint32_t)slot0;
		s->ctl.cnode = ci.cnode;
		s->ctl.dev = cn.dev;
		s->ctl.ino = cn.ino;
		s->ctl.file_chunk = ci.file_chunk;
		s->ctl.incarnation = ci.seq;
		s->ctl.valid[0] = 0xffff;
		dirty_mark(dt, 0, 3, 2);
	}
	/* The operation script of the fuzz target. */
	uint8_t *script = (uint8_t *)&s->ctl + 1024;
	for (size_t i = 0; i < 96; i++)
		script[i] = (uint8_t)rnd(&seed);
	meta_close(m);
	chell_region_close(r);

	FILE *f = fopen(tmp, "rb");
	struct stat st;
	if (!f || stat(tmp, &st) < 0)
		die(tmp, strerror(errno));
	s->len = (size_t)st.st_size;
	s->img = malloc(s->len);
	if (!s->img || fread(s->img, 1, s->len, f) != s->len)
		die(tmp, "cannot read it back");
	fclose(f);
	unlink(tmp);
	/* Where the heap starts: open a copy in memory and ask. */
	uint8_t *copy = malloc(s->len);
	if (!copy)
		die("malloc", "out of memory");
	memcpy(copy, s->img, s->len);
	if (chell_region_open_mem(copy, s->len, NULL, &r, err, sizeof err) < 0)
		die("chell_region_open_mem", err);
	uint64_t hs;
	s->heap = (uint64_t)((uint8_t *)chell_region_heap(r, &hs) - copy);
	chell_region_close(r);
	free(copy);
}

/* The seed with `len` bytes at image offset `off` xored with `mask`. */
static void damaged(const char *base, const char *what, const struct seed *s, uint64_t off,
		    size_t len, uint8_t mask)
{
	if (off + len > s->len)
		return;
	uint8_t *img = malloc(s->len);
	if (!img)
		die("malloc", "out of memory");
	memcpy(img, s->img, s->len);
	for (size_t i = 0; i < len; i++)
		img[off + i] ^= mask;
	char name[256];
	snprintf(name, sizeof name, "%s-%s", base, what);
	put(name, img, s->len, &s->ctl);
	free(img);
}

static void damaged_ctl(const char *base, const char *what, const struct seed *s, size_t off,
			uint8_t mask)
{
	struct cache_ctl c = s->ctl;
	((uint8_t *)&c)[off] ^= mask;
	char name[256];
	snprintf(name, sizeof name, "%s-ctl-%s", base, what);
	put(name, s->img, s->len, &c);
}

static void mutations(const char *base, const struct seed *s)
{
	const struct mroot *root = (const struct mroot *)(s->img + s->heap);
	uint64_t h = s->heap;
	static const struct {
		const char *name;
		size_t off, len;
	} rootf[] = {
		{"magic", offsetof(struct mroot, magic), 1},
		{"version", offsetof(struct mroot, version), 1},
		{"max_cnodes", offsetof(struct mroot, max_cnodes), 1},
		{"chunks", offsetof(struct mroot, chunks), 1},
		{"i2c_slots", offsetof(struct mroot, i2c_slots), 1},
		{"cnodes", offsetof(struct mroot, cnodes), 1},
		{"chunks_used", offsetof(struct mroot, chunks_used), 1},
		{"seq", offsetof(struct mroot, seq), 1},
		{"cnode_off", offsetof(struct mroot, cnode_off), 1},
		{"c2f_off", offsetof(struct mroot, c2f_off), 1},
		{"end", offsetof(struct mroot, end), 1},
	};
	for (size_t i = 0; i < sizeof rootf / sizeof rootf[0]; i++) {
		char what[64];
		snprintf(what, sizeof what, "root-%s", rootf[i].name);
		damaged(base, what, s, h + rootf[i].off, rootf[i].len, 0x01);
	}
	uint64_t cn = h + root->cnode_off, ch = h + root->chunk_off;
	damaged(base, "cnode0-dev", s, cn + offsetof(struct mcnode, dev), 1, 0x02);
	damaged(base, "cnode0-chunks", s, cn + offsetof(struct mcnode, chunks), 1, 0x01);
	damaged(base, "cnode0-path", s, cn + offsetof(struct mcnode, path), META_PATH_MAX, 0x41);
	damaged(base, "cnode-free", s, cn + (uint64_t)(root->max_cnodes - 1) * sizeof(struct mcnode), 1,
		0x10);
	damaged(base, "cnode-bitmap", s, h + root->cnode_bitmap_off, 1, 0x80);
	damaged(base, "chunk-bitmap", s, h + root->chunk_bitmap_off, 1, 0x02);
	damaged(base, "chunk0-owner", s, ch + offsetof(struct mchunk, cnode1), 1, 0x04);
	damaged(base, "chunk0-flags", s, ch + offsetof(struct mchunk, flags), 1, 0x01);
	damaged(base, "chunk0-seq", s, ch + offsetof(struct mchunk, seq), 8, 0xff);
	damaged(base, "chunk0-dstate", s, ch + offsetof(struct mchunk, dstate) + 8, 1, 0x0c);
	damaged(base, "chunk0-valid", s, ch + offsetof(struct mchunk, valid), 1, 0x01);
	/* The first used slot of each map. */
	for (uint32_t i = 0; i < root->i2c_slots; i++) {
		const struct mi2c *e = (const struct mi2c *)(s->img + h + root->i2c_off) + i;
		if (e->cnode1) {
			damaged(base, "i2c-key", s, h + root->i2c_off + i * sizeof *e, 1, 0x01);
			damaged(base, "i2c-cnode", s,
				h + root->i2c_off + i * sizeof *e + offsetof(struct mi2c, cnode1), 1, 0x20);
			break;
		}
	}
	for (uint32_t i = 0; i < root->c2f_slots; i++) {
		const struct mc2f *e = (const struct mc2f *)(s->img + h + root->c2f_off) + i;
		if (e->cnode1) {
			damaged(base, "c2f-slot", s,
				h + root->c2f_off + i * sizeof *e + offsetof(struct mc2f, slot), 1, 0x01);
			damaged(base, "c2f-chunk", s,
				h + root->c2f_off + i * sizeof *e + offsetof(struct mc2f, file_chunk), 1, 0x01);
			break;
		}
	}
	static const struct {
		const char *name;
		size_t off;
		uint8_t mask;
	} ctlf[] = {
		{"magic", offsetof(struct cache_ctl, magic), 0x03},
		{"version", offsetof(struct cache_ctl, version), 0x03},
		{"state", offsetof(struct cache_ctl, state), 0x04},
		{"state-init", offsetof(struct cache_ctl, state), 0x01},
		{"slot", offsetof(struct cache_ctl, slot), 0x03},
		{"cnode", offsetof(struct cache_ctl, cnode), 0x03},
		{"dev", offsetof(struct cache_ctl, dev), 0x03},
		{"ino", offsetof(struct cache_ctl, ino), 0x03},
		{"file_chunk", offsetof(struct cache_ctl, file_chunk), 0x03},
		{"incarnation", offsetof(struct cache_ctl, incarnation), 0x03},
		{"valid", offsetof(struct cache_ctl, valid), 0x08},      /* block 3 is dirty */
		{"dirty-magic", offsetof(struct cache_ctl, dirty), 0x03},
		{"dirty-nchunks", offsetof(struct cache_ctl, dirty) + 8, 0x03},
		{"dirty-word", offsetof(struct cache_ctl, dirty) + 64 + 8 + 2, 0x03}, /* block 40 */
		{"size", offsetof(struct cache_ctl, ext_end), 0x01}, /* the target's odd size */
	};
	for (size_t i = 0; i < sizeof ctlf / sizeof ctlf[0]; i++)
		damaged_ctl(base, ctlf[i].name, s, ctlf[i].off, ctlf[i].mask);
	/* Truncated images (no control page: the input is the image alone). */
	size_t cuts[] = {0, 100, 4096, (size_t)h, (size_t)h + 100, s->len - 1};
	for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
		char name[256];
		snprintf(name, sizeof name, "%s-trunc-%zu", base, cuts[i]);
		if (cuts[i] < s->len)
			put(name, s->img, cuts[i], NULL);
	}
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	outdir = argv[1];
	if (mkdir(outdir, 0755) < 0 && errno != EEXIST)
		die(outdir, strerror(errno));
	static const struct {
		const char *name;
		uint32_t cnodes, chunks;
		int busy;
	} pools[] = {
		{"empty", 4, 2, 0},
		{"small", 8, 4, 2},
		{"busy", 12, 8, 5},
	};
	for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
		struct seed s;
		build(&s, pools[i].cnodes, pools[i].chunks, pools[i].busy, 0x9e3779b9u + i);
		char name[64];
		snprintf(name, sizeof name, "valid-%s", pools[i].name);
		put(name, s.img, s.len, &s.ctl);
		if (pools[i].busy > 2) /* one damaged set is enough; small seeds mutate faster */
			mutations(pools[i].name, &s);
		free(s.img);
	}
	return 0;
}
