/* SPDX-License-Identifier: MIT */
/* The cache engine's volatile state over an open pool (engine.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chelld/engine.h"

__thread int64_t engine_keep = -1;

/* On a pool that is not DAX (tmpfs, or a disk file system without DAX),
 * cache-line flushes make nothing more durable: tmpfs survives a process
 * kill as it is, and nothing survives a power cut there anyway. The chunk
 * data path then skips them (the metadata region keeps its own ops). */
static void no_flush(void *ctx, const void *addr, size_t len)
{
	(void)ctx;
	(void)addr;
	(void)len;
}

static void fence_only(void *ctx)
{
	(void)ctx;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

static void *plain_copy(void *ctx, void *dst, const void *src, size_t n)
{
	(void)ctx;
	return memcpy(dst, src, n);
}

static const struct chell_persist_ops volatile_ops = {no_flush, fence_only, plain_copy, NULL};

static bool pool_is_dax(const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/%s", dir, CACHE_META_NAME);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int dax = fd >= 0 ? chell_pmem_fd_is_dax(fd) : 0;
	if (fd >= 0)
		close(fd);
	return dax == 1;
}

int engine_init(struct engine *c, const struct chelld_config *cfg, struct pool *p,
		struct chelld_stats_reply *st)
{
	memset(c, 0, sizeof *c);
	c->cfg = cfg;
	c->pool = *p;
	c->m = p->m;
	c->nslots = p->nslots;
	c->st = st;
	/* The capacity, less what meta.pool takes of the same tmpfs. */
	c->cap = p->capacity / CACHE_BLOCK_BYTES;
	char mpath[PATH_MAX];
	struct stat ms;
	snprintf(mpath, sizeof mpath, "%s/%s", p->dir, CACHE_META_NAME);
	if (stat(mpath, &ms) == 0) {
		uint64_t mb = ((uint64_t)ms.st_blocks * 512 + CACHE_BLOCK_BYTES - 1) / CACHE_BLOCK_BYTES;
		c->cap = c->cap > mb ? c->cap - mb : 0;
	}
	c->pops = pool_is_dax(p->dir) ? chell_persist_default() : &volatile_ops;
	chelld_log("capacity %llu pages of 4 KB in %u chunk slots",
		   (unsigned long long)c->cap, c->nslots);
	chelld_log("pool on %s: chunk data and control pages are %s",
		   c->pops == &volatile_ops ? "a file system without DAX" : "DAX",
		   c->pops == &volatile_ops ? "not flushed by cache-line (no effect there)"
					    : "flushed by cache-line before they count");
	c->slots = calloc(c->nslots, sizeof *c->slots);
	c->files = calloc(p->max_cnodes, sizeof *c->files);
	c->pol = policy_create(cfg->policy == 1   ? POLICY_FIFO
			       : cfg->policy == 3 ? POLICY_CAR
						  : POLICY_LRU,
			       c->nslots);
	if (!c->slots || !c->files || !c->pol) {
		free(c->slots);
		free(c->files);
		if (c->pol)
			policy_destroy(c->pol);
		return -ENOMEM;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the cleaner's timed waits */
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->idle, NULL);
	pthread_cond_init(&c->wake, &ca);
	pthread_condattr_destroy(&ca);
	st->slots = c->nslots;
	st->policy = cfg->policy;
	engine_guard_install(c);
	return 0;
}

void engine_fini(struct engine *c)
{
	for (uint32_t s = 0; s < c->nslots; s++)
		if (c->slots[s].map)
			munmap(c->slots[s].map, CACHE_CHUNK_FILE_BYTES);
	for (uint32_t i = 0; i < c->pool.max_cnodes; i++)
		if (c->files[i]) {
			if (c->files[i]->fd >= 0)
				close(c->files[i]->fd);
			free(c->files[i]);
		}
	free(c->slots);
	free(c->shrink_buf);
	free(c->files);
	policy_destroy(c->pol);
	pthread_cond_destroy(&c->idle);
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	pool_close(&c->pool);
}
