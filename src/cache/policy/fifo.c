/* FIFO: evict in insertion order; references are ignored (bankshot.md
 * §4.3.1). A skipped chunk keeps its place at the head, so it is the first
 * candidate again once it is no longer pinned. */
#include <errno.h>

#include "policy_impl.h"

int policy_victim_fifo(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg)
{
	uint32_t c = p->hand;

	for (uint32_t i = 0; i < p->count; i++, c = p->next[c]) {
		if (skip && skip(arg, c))
			continue;
		policy_unlink(p, c);
		*chunk = c;
		return 0;
	}
	return -EBUSY;
}
