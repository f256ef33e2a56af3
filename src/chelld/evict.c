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
 *
 * Policy blocks (evict_groups) replaces by the 64 KB group instead: a
 * second clock hand visits the chunks; a group that no client hit (and
 * that no fill brought in) since the hand's last visit is cold. A chunk
 * with no hot group goes whole; one with enough cold blocks is shrunk to
 * its hot groups (chunk_shrink: the same chunk in a new chunk file, so
 * clients go through the usual revocation); the others keep their
 * blocks for one more turn. So a victim's hot blocks stay, and the cold
 * blocks of a chunk kept for a few hot ones leave. Dirty chunks are left
 * to the cleaner and, if nothing else can go, to evict_one.
 */
#include <errno.h>

#include "chelld/engine.h"
#include "chelld/modes.h"

struct skip_arg {
	struct engine *c;
	bool allow_dirty;
	bool allow_pinned; /* pinned files' chunks: only when nothing else can go */
};

static bool skip(void *arg, uint32_t slot)
{
	struct skip_arg *a = arg;
	const struct slot *s = &a->c->slots[slot];
	if (!s->map || s->stuck || s->busy || s->filling || s->revoking || (int64_t)slot == engine_keep)
		return true;
	if (!a->allow_dirty && dirty_chunk_flagged(s->dt, 0))
		return true;
	return !a->allow_pinned && modes_slot_pinned(a->c, slot);
}

int evict_one(struct engine *c)
{
	if (c->fold_access)
		c->fold_access(c->fold_arg);
	struct skip_arg a = {c, false, false};
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
	if (rc == -EBUSY) {
		/* Only pinned chunks are left: the pins outgrew the pool (their
		 * files grew after cache.pin_max was checked). Evicting one is
		 * better than failing the miss. */
		a.allow_pinned = true;
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

/* The 64 KB groups holding a valid block, and how many valid blocks lie
 * in the groups of `mask`. */
static uint32_t valid_groups(const struct slot *s, uint32_t mask, unsigned *nblocks)
{
	enum { G = CACHE_BLOCKS / CHELLD_ACCESS_GROUPS };
	uint32_t out = 0;
	unsigned n = 0;
	for (unsigned w = 0; w < CACHE_BLOCKS / 64; w++) {
		uint64_t v = __atomic_load_n(&s->ctl->valid[w], __ATOMIC_ACQUIRE);
		for (unsigned g = 0; g < 64 / G; g++) {
			uint64_t part = (v >> (g * G)) & ((1ull << G) - 1);
			unsigned gi = w * (64 / G) + g;
			if (part)
				out |= 1u << gi;
			if (part && (mask >> gi & 1))
				n += (unsigned)__builtin_popcountll(part);
		}
	}
	*nblocks = n;
	return out;
}

int evict_groups(struct engine *c)
{
	if (c->fold_access)
		c->fold_access(c->fold_arg);
	for (uint32_t i = 0; i < c->nslots; i++) {
		uint32_t slot = c->trim_hand;
		c->trim_hand = (c->trim_hand + 1) % c->nslots;
		struct slot *s = &c->slots[slot];
		if (!s->map || s->stuck || s->busy || s->filling || s->revoking || (int64_t)slot == engine_keep ||
		    slot_broken(s) || dirty_chunk_flagged(s->dt, 0) ||
		    modes_slot_pinned(c, slot) /* pinned: neither evicted nor shrunk (evict_one's last resort only) */)
			continue;
		uint32_t hot = s->hot;
		s->hot = 0; /* the second chance is used up */
		unsigned ncold, nall;
		uint32_t valid = valid_groups(s, ~hot, &ncold);
		valid_groups(s, ~0u, &nall);
		if (!(valid & hot)) {
			if (chunk_evict(c, slot) == 0) {
				c->st->evictions++;
				return 0;
			}
			continue;
		}
		/* A shrink costs a new chunk file and a remap in every client
		 * that has the chunk: worth it for a good part of the chunk. */
		if (ncold < CACHE_BLOCKS / CHELLD_ACCESS_GROUPS || ncold * 4 < nall)
			continue;
		if (chunk_shrink(c, slot, valid & hot) == 0)
			return 0;
	}
	return -EBUSY;
}
