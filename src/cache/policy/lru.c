/* Approximate LRU: CLOCK over the manager's touches and the clients' shared
 * access flags (chell.md §4.1.4 notes the manager cannot see hits; the
 * flags are how it learns about them cheaply). */
#include <errno.h>

#include "policy_impl.h"

int policy_victim_clock(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg)
{
	/* Two full turns: the first clears every reference, so the second
	 * finds an unreferenced chunk unless clients keep re-marking them all
	 * or everything is skipped. Then fall back to the first evictable
	 * chunk seen, so a busy cache still makes progress. */
	uint64_t steps = 2ull * p->count;
	uint32_t fallback = POLICY_NONE;

	for (uint64_t i = 0; i < steps; i++) {
		uint32_t c = p->hand;

		p->hand = p->next[c];
		if (skip && skip(arg, c))
			continue;
		if (policy_referenced(p, c)) {
			if (fallback == POLICY_NONE)
				fallback = c;
			continue;
		}
		policy_unlink(p, c);
		*chunk = c;
		return 0;
	}
	if (fallback == POLICY_NONE)
		return -EBUSY;
	policy_unlink(p, fallback);
	*chunk = fallback;
	return 0;
}
