/* SPDX-License-Identifier: MIT */
/*
 * Recovery at start, after pool_open has undone unfinished meta
 * transactions and checked every chunk file:
 *   - a mapped slot whose file is missing, empty, still INIT or of another
 *     incarnation was never handed out (or its eviction had finished its
 *     write-back): free it;
 *   - REVOKED: an eviction was interrupted: finish it (write back, free);
 *   - LIVE: blocks left checked out by an interrupted write-back go back
 *     to DIRTY (dirty_checkin_abort), the chunk rejoins the policy;
 *   - leftovers in chunks/ (temporary files of creations that never
 *     published) are removed;
 *   - then every dirty block is written back, with progress in the log.
 * Clean chunks stay: the cache is warm after a restart. A dirty chunk
 * whose backing file is gone or replaced is kept and reported, never
 * dropped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chelld/engine.h"

static void free_unused(struct engine *c, uint32_t slot)
{
	char name[16];
	pool_chunk_name(slot, name, sizeof name);
	unlinkat(c->pool.chunks_fd, name, 0);
	int rc = meta_chunk_unmap(c->m, slot);
	if (rc < 0)
		chelld_log("recovery: slot %u: cannot free it: %s", slot, strerror(-rc));
}

static void remove_leftovers(struct engine *c)
{
	int fd = dup(c->pool.chunks_fd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, ".new-", 5) == 0) {
			unlinkat(c->pool.chunks_fd, e->d_name, 0);
			continue;
		}
		char *end;
		unsigned long s = strtoul(e->d_name, &end, 10);
		if (e->d_name[0] == '.' || *end || end == e->d_name)
			continue;
		if (s >= c->nslots || !c->slots[s].map) {
			/* Not a slot's current file: evictions unlink before they
			 * free the slot, so this is an eviction's last step. */
			chelld_log("recovery: removing %s/%s/%s (no slot uses it)", c->pool.dir,
				   CACHE_CHUNKS_DIR, e->d_name);
			unlinkat(c->pool.chunks_fd, e->d_name, 0);
		}
	}
	closedir(d);
}

void engine_recover(struct engine *c)
{
	static struct cache_ctl ctl;
	char err[256];
	uint32_t live = 0, freed = 0, finished = 0;
	for (uint32_t s = 0; s < c->nslots; s++) {
		struct meta_chunk_info ci;
		if (meta_chunk_info(c->m, s, &ci) < 0)
			continue;
		int v = pool_check_chunk(&c->pool, s, &ci, &ctl, err, sizeof err);
		if (v == POOL_CHUNK_UNUSED) {
			free_unused(c, s);
			freed++;
			continue;
		}
		int rc = v < 0 ? v : chunk_attach(c, s, ci.cnode, ci.file_chunk);
		if (rc < 0) {
			/* pool_open checked it a moment ago; keep the slot. */
			chelld_log("recovery: slot %u: %s", s, v < 0 ? err : strerror(-rc));
			continue;
		}
		struct slot *sl = &c->slots[s];
		dirty_checkin_abort(sl->dt, 0);
		if (__atomic_load_n(&sl->ctl->state, __ATOMIC_ACQUIRE) == CACHE_CHUNK_REVOKED) {
			if (chunk_revoke(c, s, UINT64_MAX) == 0)
				finished++;
			continue;
		}
		policy_insert(c->pol, s);
		live++;
	}
	remove_leftovers(c);
	uint32_t dirty = engine_dirty_slots(c);
	chelld_log("recovery: %u chunk(s) kept (%u dirty), %u never handed out freed, %u "
		   "interrupted eviction(s) finished", live, dirty, freed, finished);
	if (dirty == 0)
		return;
	uint64_t blocks = 0, bytes = 0;
	uint32_t files = 0;
	int rc = wb_file(c, NULL, &blocks, &bytes, &files);
	uint32_t left = engine_dirty_slots(c);
	chelld_log("recovery: wrote back %llu dirty block(s), %llu bytes; %u chunk(s) still "
		   "dirty%s", (unsigned long long)blocks, (unsigned long long)bytes, left,
		   rc < 0 || left ? " (kept: their backing file is missing or failing; see above)" : "");
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map && dirty_chunk_flagged(c->slots[s].dt, 0))
			c->slots[s].stuck = true;
}
