/* SPDX-License-Identifier: MIT */
/*
 * Eviction: choose a victim with the replacement policy (CLOCK or FIFO,
 * policy.h) after folding every client's access table into it, and revoke
 * it (chunk.c). Clean chunks go first: a victim with dirty blocks costs a
 * synchronous write-back, so it is taken only when every resident chunk is
 * dirty (the cache is full of dirty data and the cleaner has not caught
 * up). That write-back is the throttle: a writer faster than the backing
 * store waits for one chunk's write-back per miss instead of failing, and
 * throughput falls to the store's pace without a cliff or a deadlock.
 */
#include <errno.h>

#include "chelld/engine.h"

struct skip_arg {
	struct engine *c;
	bool allow_dirty;
};

static bool skip(void *arg, uint32_t slot)
{
	struct skip_arg *a = arg;
	const struct slot *s = &a->c->slots[slot];
	if (!s->map || s->stuck || s->busy || s->filling || s->revoking || a->c->pins[slot])
		return true;
	if (!a->allow_dirty && dirty_chunk_flagged(s->dt, 0))
		return true;
	return false;
}

int evict_one(struct engine *c)
{
	if (c->fold_access)
		c->fold_access(c->fold_arg);
	struct skip_arg a = {c, false};
	uint32_t victim;
	int rc = policy_victim(c->pol, &victim, skip, &a);
	if (rc == -EBUSY) {
		a.allow_dirty = true;
		c->st->throttle_waits++;
		engine_cleaner_kick(c);
		rc = policy_victim(c->pol, &victim, skip, &a);
	}
	/* Everything left is being written back or filled by another
	 * thread: wait for one such chunk rather than fail the miss. */
	for (uint32_t s = 0; rc == -EBUSY && s < c->nslots; s++)
		if (c->slots[s].map && (c->slots[s].busy || c->slots[s].filling)) {
			engine_wait_quiet(c, s);
			rc = policy_victim(c->pol, &victim, skip, &a);
		}
	if (rc < 0)
		return -EBUSY;
	rc = chunk_evict(c, victim);
	if (rc < 0)
		return rc; /* kept as stuck; the caller tries again */
	c->st->evictions++;
	return 0;
}
