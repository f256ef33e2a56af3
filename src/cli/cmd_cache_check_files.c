/* SPDX-License-Identifier: MIT */
/*
 * The offline `chell cache check`: read the pool's files and hand them to
 * the verifier (cmd_cache_verify.c), changing nothing.
 *
 *   1. chelld.lock is taken (if it exists), so no daemon starts and
 *      changes the files while we read them.
 *   2. meta.pool: chell_region_check (read-only: superblock, journals,
 *      unfinished transactions), then the metadata is opened on a private
 *      copy-on-write mapping - opening runs recovery, which must not touch
 *      the real file - and every invariant checked (meta_check).
 *   3. chunks/<slot>: each file's control page against the metadata; then
 *      every slot the metadata allocates must have its file.
 *   4. chelld's own verdict on every allocated slot (pool_check_chunk of
 *      the chelld_pool library, what the daemon runs when it starts): a
 *      chunk it would refuse is a problem even if step 3 saw none, so the
 *      check never passes a pool the daemon then refuses.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/meta/meta.h"
#include "chelld/engine.h"
#include "cli.h"
#include "cmd_cache.h"
#include "cmd_cache_check.h"
#include "cmd_cache_verify.h"

/* The copy is private memory: nothing to make durable. */
static void nop_flush(void *ctx, const void *addr, size_t len)
{
	(void)ctx, (void)addr, (void)len;
}
static void nop_drain(void *ctx)
{
	(void)ctx;
}
static void *plain_memcpy(void *ctx, void *dst, const void *src, size_t n)
{
	(void)ctx;
	return memcpy(dst, src, n);
}
static const struct chell_persist_ops private_ops = {nop_flush, nop_drain, plain_memcpy, NULL};

static void emit(void *ctx, bool problem, const char *file, const char *field, const char *text)
{
	cc_add(ctx, problem, file, field, text);
}

/* Region-level findings, one per line of the report. */
static void region_findings(struct cv *v, const struct chell_region_report *rep)
{
	const char *p = rep->text;
	while (*p) {
		size_t n = strcspn(p, "\n");
		if (n)
			cv_report(v, true, CACHE_META_NAME, "region", "%.*s", (int)n, p);
		p += n;
		if (*p)
			p++;
	}
	if (!rep->ok && !rep->text[0])
		cv_report(v, true, CACHE_META_NAME, "region", "the region check failed");
}

/* Parse a chunk file name: decimal, no sign, no leading zero (the manager
 * writes "%u"). */
static bool slot_name(const char *s, uint32_t *slot)
{
	uint64_t v = 0;
	if (!*s || (s[0] == '0' && s[1]))
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > UINT32_MAX)
			return false;
	}
	*slot = (uint32_t)v;
	return true;
}

static void check_chunks(struct cv *v, struct meta *m, const char *pool)
{
	char *dir = pool_file_path(pool, CACHE_CHUNKS_DIR);
	int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	/* Per slot: 0 no file, 1 a file, 2 a file with a problem. */
	uint8_t *present = m ? calloc(v->chunks ? v->chunks : 1, 1) : NULL;
	DIR *d = NULL;
	if (dfd < 0) {
		/* No chunks directory: fine for an empty cache. */
		if (errno != ENOENT || v->chunks_used)
			cv_report(v, true, CACHE_CHUNKS_DIR, "directory", "%s: %s",
				  dir ? dir : CACHE_CHUNKS_DIR, strerror(errno));
		goto slots;
	}
	d = fdopendir(dfd);
	if (!d)
		goto slots;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char name[300];
		snprintf(name, sizeof name, CACHE_CHUNKS_DIR "/%s", e->d_name);
		uint32_t slot;
		if (!slot_name(e->d_name, &slot)) {
			/* chelld never opens it: harmless, but not ours. */
			cv_report(v, false, name, "name",
				  "not a chunk file (chunk files are named by slot number); chelld "
				  "ignores it");
			continue;
		}
		int fd = openat(dfd, e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		struct stat sb;
		if (fd < 0 || fstat(fd, &sb) < 0) {
			cv_report(v, true, name, "file", "cannot read: %s", strerror(errno));
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (!S_ISREG(sb.st_mode)) {
			cv_report(v, true, name, "file", "not a regular file");
			close(fd);
			continue;
		}
		static struct cache_ctl ctl;
		bool have = sb.st_size >= (off_t)CACHE_CHUNK_FILE_BYTES &&
			    pread(fd, &ctl, sizeof ctl, (off_t)CACHE_CHUNK_BYTES) == (ssize_t)sizeof ctl;
		close(fd);
		unsigned before = v->problems;
		cv_chunk_file(v, m, name, slot, (uint64_t)sb.st_size, have ? &ctl : NULL);
		if (present && slot < v->chunks)
			present[slot] = v->problems > before ? 2 : 1;
	}
slots:
	if (m && present) {
		struct pool p = {.dir = (char *)pool, .m = m, .chunks_fd = dfd, .nslots = v->chunks};
		for (uint32_t s = 0; s < v->chunks; s++) {
			cv_slot(v, m, s, present[s]);
			struct meta_chunk_info ci;
			static struct cache_ctl ctl;
			char err[512] = "", name[32];
			if (present[s] != 1 || dfd < 0 || meta_chunk_info(m, s, &ci) < 0 ||
			    pool_check_chunk(&p, s, &ci, &ctl, err, sizeof err) >= 0)
				continue;
			snprintf(name, sizeof name, CACHE_CHUNKS_DIR "/%u", s);
			cv_report(v, true, name, "chelld", "%s", err[0] ? err : "refused by chelld's check");
		}
	}
	if (d)
		closedir(d); /* closes dfd */
	else if (dfd >= 0)
		close(dfd);
	free(present);
	free(dir);
}

int cc_check_files(struct cc_result *res)
{
	const char *pool = res->pool;
	int ret = 0;
	char *lockp = pool_file_path(pool, CHELLD_LOCK_NAME);
	char *metap = pool_file_path(pool, CACHE_META_NAME);
	int lfd = lockp ? open(lockp, O_RDONLY | O_CLOEXEC) : -1;
	int mfd = -1;
	void *img = MAP_FAILED;
	size_t len = 0;
	if (!lockp || !metap) {
		cli_err("out of memory");
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		cli_err("cache check: chelld started on %s while checking; run the check again", pool);
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	mfd = open(metap, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	if (mfd < 0 || fstat(mfd, &sb) < 0) {
		cli_err("cache check: %s: %s%s", metap, strerror(errno),
			errno == ENOENT ? " (not a cache pool, or chelld never ran on it)" : "");
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	struct cv v = {.emit = emit, .ctx = res};
	static struct chell_region_report rep;
	if (chell_region_check(metap, &rep) < 0 || !rep.ok)
		region_findings(&v, &rep);
	res->unfinished_tx = rep.unfinished_tx;
	if (rep.unfinished_tx > 0)
		cv_report(&v, false, CACHE_META_NAME, "journal",
			  "%d unfinished transaction%s: chelld rolls %s back when it starts",
			  rep.unfinished_tx, rep.unfinished_tx == 1 ? "" : "s",
			  rep.unfinished_tx == 1 ? "it" : "them");
	struct meta *m = NULL;
	struct chell_region *r = NULL;
	len = (size_t)sb.st_size;
	if (rep.ok && len > 0) {
		/* Private and writable: recovery writes go to our copy only. */
		img = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, mfd, 0);
		if (img == MAP_FAILED) {
			cli_err("cache check: cannot map %s: %s", metap, strerror(errno));
			ret = CLI_EXIT_USAGE;
			goto out;
		}
		m = cv_meta_open(&v, img, len, &private_ops, &r);
	}
	check_chunks(&v, m, pool);
	if (m)
		meta_close(m);
	if (r)
		chell_region_close(r);
	res->problems = v.problems;
	res->notes = v.notes;
	res->cnodes = v.cnodes;
	res->chunks = v.chunks;
	res->chunks_used = v.chunks_used;
	res->chunk_files = v.chunk_files;
out:
	if (img != MAP_FAILED)
		munmap(img, len);
	if (mfd >= 0)
		close(mfd);
	if (lfd >= 0)
		close(lfd);
	free(lockp);
	free(metap);
	return ret;
}
