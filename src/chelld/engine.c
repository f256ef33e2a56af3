/* SPDX-License-Identifier: MIT */
/* The cache engine's volatile state over an open pool (cache.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "chelld/cache.h"

int cache_init(struct cache *c, const struct chelld_config *cfg, struct pool *p,
	       struct chelld_stats_reply *st)
{
	memset(c, 0, sizeof *c);
	c->cfg = cfg;
	c->pool = *p;
	c->m = p->m;
	c->nslots = p->nslots;
	c->st = st;
	c->pops = chell_persist_default();
	c->slots = calloc(c->nslots, sizeof *c->slots);
	c->files = calloc(p->max_cnodes, sizeof *c->files);
	c->pol = policy_create(cfg->policy == 1 ? POLICY_FIFO : POLICY_LRU, c->nslots);
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
	return 0;
}

void cache_fini(struct cache *c)
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
	free(c->files);
	policy_destroy(c->pol);
	pthread_cond_destroy(&c->idle);
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	pool_close(&c->pool);
}
