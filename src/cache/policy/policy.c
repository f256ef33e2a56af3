/* Replacement policy bookkeeping common to CLOCK and FIFO. */
#include <errno.h>
#include <stdlib.h>

#include "policy_impl.h"

policy *policy_create(policy_kind kind, uint32_t nchunks)
{
	policy *p;

	if ((kind != POLICY_LRU && kind != POLICY_FIFO && kind != POLICY_CAR) || nchunks == 0 ||
	    nchunks >= (1u << 31))
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->kind = kind;
	p->nchunks = nchunks;
	p->hand = POLICY_NONE;
	p->next = malloc(nchunks * sizeof(uint32_t));
	p->prev = malloc(nchunks * sizeof(uint32_t));
	p->in = calloc(nchunks, 1);
	p->ref = calloc(nchunks, 1);
	if (!p->next || !p->prev || !p->in || !p->ref || (kind == POLICY_CAR && car_init(p) < 0)) {
		policy_destroy(p);
		return NULL;
	}
	return p;
}

void policy_destroy(policy *p)
{
	if (!p)
		return;
	free(p->next);
	free(p->prev);
	free(p->in);
	free(p->ref);
	car_fini(p);
	free(p);
}

void policy_attach_access(policy *p, const access_table *t)
{
	p->access = t;
}

policy_kind policy_get_kind(const policy *p)
{
	return p->kind;
}

uint32_t policy_count(const policy *p)
{
	return p->count;
}

bool policy_contains(const policy *p, uint32_t chunk)
{
	return chunk < p->nchunks && p->in[chunk];
}

int policy_insert(policy *p, uint32_t c)
{
	return policy_insert_key(p, c, c);
}

int policy_insert_key(policy *p, uint32_t c, uint64_t key)
{
	if (c >= p->nchunks || key == UINT64_MAX)
		return -EINVAL;
	if (p->in[c])
		return -EEXIST;
	p->in[c] = 1;
	p->ref[c] = 0;
	/* A stale client mark from the chunk's previous contents must not
	 * give the new contents a second chance. */
	if (p->access && c < p->access->nchunks)
		access_test_clear(p->access, c);
	if (p->kind == POLICY_CAR) {
		p->count++;
		return car_insert(p, c, key);
	}
	if (p->hand == POLICY_NONE) {
		p->next[c] = p->prev[c] = c;
		p->hand = c;
	} else {
		uint32_t h = p->hand, t = p->prev[h];

		p->next[t] = c;
		p->prev[c] = t;
		p->next[c] = h;
		p->prev[h] = c;
	}
	p->count++;
	return 0;
}

void policy_unlink(policy *p, uint32_t c)
{
	if (p->kind == POLICY_CAR) {
		car_remove(p, c); /* no ghost: it left outside replacement */
	} else if (p->next[c] == c) {
		p->hand = POLICY_NONE;
	} else {
		p->next[p->prev[c]] = p->next[c];
		p->prev[p->next[c]] = p->prev[c];
		if (p->hand == c)
			p->hand = p->next[c];
	}
	p->in[c] = 0;
	p->ref[c] = 0;
	p->count--;
}

bool policy_referenced(policy *p, uint32_t c)
{
	bool r = p->ref[c];

	p->ref[c] = 0;
	/* Consume the client flag even if the touch already counted. */
	if (p->access && c < p->access->nchunks && access_test_clear(p->access, c))
		r = true;
	return r;
}

int policy_remove(policy *p, uint32_t c)
{
	if (c >= p->nchunks || !p->in[c])
		return -ENOENT;
	policy_unlink(p, c);
	return 0;
}

void policy_touch(policy *p, uint32_t c)
{
	if (p->kind == POLICY_CAR && c < p->nchunks && p->in[c])
		car_touch(p, c);
	else if (p->kind == POLICY_LRU && c < p->nchunks && p->in[c])
		p->ref[c] = 1;
}

int policy_victim(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg)
{
	if (p->count == 0)
		return -ENOENT;
	return p->kind == POLICY_LRU  ? policy_victim_clock(p, chunk, skip, arg)
	       : p->kind == POLICY_CAR ? policy_victim_car(p, chunk, skip, arg)
				       : policy_victim_fifo(p, chunk, skip, arg);
}
