/* The shared access table: one referenced byte per chunk (see policy.h). */
#include <string.h>

#include "cache/policy/policy.h"

size_t access_table_bytes(uint32_t nchunks)
{
	return nchunks;
}

void access_table_attach(access_table *t, void *mem, uint32_t nchunks, bool clear)
{
	t->flags = mem;
	t->nchunks = nchunks;
	if (clear)
		memset(mem, 0, nchunks);
}

/* Load, then clear only if set: an unset flag costs the manager no store,
 * so a sweep over a cold cache does not write every line of the table. */
bool access_test_clear(const access_table *t, uint32_t chunk)
{
	uint8_t *f = &t->flags[chunk];

	if (!__atomic_load_n(f, __ATOMIC_RELAXED))
		return false;
	__atomic_store_n(f, 0, __ATOMIC_RELAXED);
	return true;
}
