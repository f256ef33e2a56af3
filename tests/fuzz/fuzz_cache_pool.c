/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: arbitrary bytes as a cache pool - a meta.pool image and the
 * control page of one chunk file - through the code `chell cache check`
 * runs on them (src/cli/cmd_cache_verify.c: chell_region_open_mem,
 * meta_open, meta_check, then the control page against the metadata).
 *
 * Then the same bytes are written as a pool directory (meta.pool and
 * chunks/<slot>) and opened by chelld's own opener, pool_open of the
 * chelld_pool library (meta_open_path, meta_check, each allocated slot's
 * chunk file), which must not crash either; and what chelld refuses, the
 * check must report as a problem (it may report more: it also compares
 * backing identities and looks for dirty blocks that are not valid).
 *
 * Input: the last CACHE_CTL_BYTES bytes are the control page of the chunk
 * file of slot (its own slot field, modulo the pool's chunks), everything
 * before is the meta.pool image. Shorter inputs are an image alone.
 *
 * Oracles, beyond "no crash, no sanitizer report, no access outside the
 * image" (the persistence ops abort on a flush or copy outside it):
 *   - every finding has a file, a field and a sentence;
 *   - metadata that passes meta_check stays valid: a sequence of metadata
 *     operations chosen by the control page's bytes (new Cnodes, chunk
 *     allocation, valid/dirty marks, check-out/check-in, unmapping,
 *     removal), each followed by meta_check, must never break an
 *     invariant, and the image must reopen and check clean afterwards.
 *     The operations may fail (a full table, a journal too small): a failed
 *     transaction must leave everything as it was.
 *
 * Built two ways, like fuzz_region_open: with libFuzzer by scripts/fuzz.sh
 * --target cache_pool, and with regress_main.c over the committed corpus
 * by ctest (fuzz_cache_pool_corpus).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/layout.h"
#include "chelld/engine.h"
#include "cache/meta/meta.h"
#include "chell/pmem.h"
#include "fuzz_bounds.h"
#include "cmd_cache_verify.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Layout fields are what matter; large images only slow each run (the
 * checks are linear, some hash probes quadratic in the table size). */
#define MAX_IMAGE (256u << 10)
#define MAX_OPS 24

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_cache_pool: %s: %s\n", what, detail);
	abort();
}

/* FUZZ_CACHE_POOL_VERBOSE=1 prints the findings (to look at a corpus). */
static int verbose = -1;

static void on_finding(void *ctx, bool problem, const char *file, const char *field,
		       const char *text)
{
	(void)ctx;
	if (!file || !*file || !field || !*field || !text || !*text)
		fail("a finding without its file, field or text", text ? text : "(null)");
	if (verbose)
		fprintf(stderr, "  %s: %s: %s: %s\n", problem ? "problem" : "note", file, field, text);
}

static void must_check(struct meta *m, const char *after)
{
	char err[512] = "";
	if (meta_check(m, err, sizeof err) < 0)
		fail(after, err);
}

/* Operations steered by bytes of the input (bytes 1024.. of the control
 * page, which the layout leaves unused), on metadata that checked clean. */
static void run_ops(struct meta *m, const uint8_t *ops, size_t n)
{
	struct meta_stats st;
	meta_stats(m, &st);
	for (size_t i = 0; i + 4 <= n && i / 4 < MAX_OPS; i += 4) {
		uint8_t op = ops[i], a = ops[i + 1], b = ops[i + 2], c = ops[i + 3];
		uint32_t cnode = a % (st.max_cnodes + 1); /* sometimes one past the end */
		uint32_t slot = b % (st.chunks + 1);
		struct meta_blocks out;
		switch (op % 12) {
		case 0: meta_cnode_get(m, a % 7, b, true, c & 1 ? "/backing/file" : NULL); break;
		case 1: meta_chunk_map(m, cnode, c % 5); break;
		case 2: meta_mark_valid(m, slot, c % 600, a % 70); break;
		case 3: meta_mark_dirty(m, slot, c % 600, a % 70); break;
		case 4: meta_checkout(m, slot, &out); break;
		case 5: meta_checkin(m, slot); break;
		case 6: meta_checkout_cancel(m, slot); break;
		case 7: meta_chunk_unmap(m, slot); break;
		case 8: meta_cnode_remove(m, cnode); break;
		case 9: meta_cnode_set_attr(m, cnode, (uint64_t)c << 20, a, b); break;
		case 10: meta_cnode_set_flags(m, cnode, c & META_CN_STALE); break;
		default: {
			int v = meta_victim(m);
			if (v >= 0)
				meta_chunk_touch(m, (uint32_t)v);
			meta_chunk_lookup(m, cnode, c % 5);
		}
		}
		must_check(m, "meta_check after an operation on clean metadata");
	}
}

static int count_dirty(void *arg, const struct meta_chunk_info *c)
{
	(void)c;
	++*(unsigned *)arg;
	return 0;
}

/* Read every object the way chelld's recovery does (they passed meta_check). */
static void read_all(struct meta *m)
{
	struct meta_stats st;
	meta_stats(m, &st);
	for (uint32_t i = 0; i < st.max_cnodes; i++) {
		struct meta_cnode_info ci;
		if (meta_cnode_info(m, i, &ci) == 0 && !memchr(ci.path, '\0', sizeof ci.path))
			fail("meta_cnode_info", "path without its NUL");
	}
	for (uint32_t s = 0; s < st.chunks; s++) {
		struct meta_chunk_info ci;
		if (meta_chunk_info(m, s, &ci) == 0 && meta_chunk_lookup(m, ci.cnode, ci.file_chunk) != (int)s)
			fail("meta_chunk_lookup", "an allocated chunk is not found by its key");
	}
	unsigned dirty = 0;
	meta_foreach_dirty(m, count_dirty, &dirty);
}

/* The pool directory pool_open reads: made once, rewritten per input. */
static char pool_dir[256];
static char chunk_path[300];

static void remove_pool(void)
{
	char p[300];
	if (chunk_path[0])
		unlink(chunk_path);
	snprintf(p, sizeof p, "%s/" CACHE_META_NAME, pool_dir);
	unlink(p);
	snprintf(p, sizeof p, "%s/" CACHE_CHUNKS_DIR, pool_dir);
	rmdir(p);
	rmdir(pool_dir);
}

static void write_file(const char *path, const void *buf, size_t len, uint64_t size, off_t at)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		fail(path, strerror(errno));
	if ((size && ftruncate(fd, (off_t)size) < 0) ||
	    (len && pwrite(fd, buf, len, at) != (ssize_t)len))
		fail(path, strerror(errno));
	close(fd);
}

/* chelld's opener on the same bytes, as files. */
static void chelld_opens(const uint8_t *meta, size_t mlen, const struct cache_ctl *ctl,
			 uint32_t slot, uint64_t fsize, const struct cv *v)
{
	char p[300];
	if (!pool_dir[0]) {
		const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
		snprintf(pool_dir, sizeof pool_dir, "%s/fuzz-cache-pool-XXXXXX", base);
		snprintf(p, sizeof p, "%s/" CACHE_CHUNKS_DIR, mkdtemp(pool_dir) ? pool_dir : "");
		if (mkdir(p, 0700) < 0)
			fail(p, strerror(errno));
		atexit(remove_pool);
	}
	snprintf(p, sizeof p, "%s/" CACHE_META_NAME, pool_dir);
	write_file(p, meta, mlen, 0, 0);
	if (chunk_path[0])
		unlink(chunk_path);
	chunk_path[0] = '\0';
	if (ctl) {
		snprintf(chunk_path, sizeof chunk_path, "%s/" CACHE_CHUNKS_DIR "/%u", pool_dir, slot);
		write_file(chunk_path, ctl, fsize == CACHE_CHUNK_FILE_BYTES ? sizeof *ctl : 0, fsize,
			   (off_t)CACHE_CHUNK_BYTES);
	}
	struct pool pool;
	char err[512] = "";
	int rc = pool_open(pool_dir, 0, &pool, err, sizeof err);
	if (rc == 0)
		pool_close(&pool);
	else if (v->problems == 0)
		fail("chelld's pool_open refuses a pool the check found no problem in", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_IMAGE + CACHE_CTL_BYTES)
		return 0;
	if (verbose < 0) {
		const char *e = getenv("FUZZ_CACHE_POOL_VERBOSE");
		verbose = e && *e == '1';
	}
	bool have_ctl = size > CACHE_CTL_BYTES;
	size_t mlen = have_ctl ? size - CACHE_CTL_BYTES : size;
	static struct cache_ctl ctl;
	if (have_ctl)
		memcpy(&ctl, data + mlen, sizeof ctl);

	/* Exact-size, page-aligned copy (as a mapping would be): ASan sees any
	 * access past the image. */
	void *img = NULL;
	if (posix_memalign(&img, 4096, mlen ? mlen : 1) != 0)
		return 0;
	memcpy(img, data, mlen);
	struct fuzz_bounds b = {img, (const uint8_t *)img + mlen, "fuzz_cache_pool"};
	struct chell_persist_ops ops = fuzz_bounded_ops(&b);

	struct cv v = {.emit = on_finding};
	struct chell_region *r = NULL;
	struct meta *m = cv_meta_open(&v, img, mlen, &ops, &r);
	if (m && v.problems)
		fail("cv_meta_open", "returned metadata and reported a problem");
	uint32_t slot = have_ctl ? (v.chunks ? ctl.slot % v.chunks : ctl.slot % 64) : 0;
	/* The file as it would be: full size, and (steered by the input) odd
	 * sizes too, kept small so writing the file stays cheap. */
	uint64_t fsize = ctl.ext_end & 1 ? (ctl.ext_end >> 1) % (CACHE_CHUNK_FILE_BYTES + 1)
					   : CACHE_CHUNK_FILE_BYTES;
	if (have_ctl)
		cv_chunk_file(&v, m, "chunks/0", slot, fsize, &ctl);
	if (m) {
		for (uint32_t s = 0; s < v.chunks && s < 4096; s++)
			cv_slot(&v, m, s, s == slot && have_ctl);
		read_all(m);
		if (have_ctl)
			run_ops(m, (const uint8_t *)&ctl + 1024, 4 * MAX_OPS);
		if (verbose)
			fprintf(stderr, "  metadata opened and checked; operations kept it valid\n");
		meta_close(m);
		chell_region_close(r);
		/* Everything since the check went through the API. */
		char err[512] = "";
		if (chell_region_open_mem(img, mlen, &ops, &r, err, sizeof err) < 0)
			fail("reopen after operations", err);
		if (meta_open(r, 0, &m, err, sizeof err) < 0)
			fail("meta_open after operations", err);
		must_check(m, "meta_check after reopening");
		meta_close(m);
		chell_region_close(r);
	}
	free(img);
	chelld_opens(data, mlen, have_ctl ? &ctl : NULL, slot, fsize, &v);
	return 0;
}
