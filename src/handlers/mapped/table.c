/* SPDX-License-Identifier: MIT */
/*
 * The chunk table of one file in one process (base.h). Two levels of 1024
 * records: chunk k is found with two loads, no tree walk and no lock, and
 * the table is never reallocated, so readers need no lock; second-level
 * arrays are made on first use of their range and freed with the table.
 */
#include <stdlib.h>

#include "base.h"

struct mapped_chunk *mapped_chunk_make(struct mapped_table *t, uint64_t k)
{
	if (k >= MAPPED_MAX_CHUNKS)
		return NULL;
	struct mapped_chunk *l2 = atomic_load_explicit(&t->l1[k >> MAPPED_L2_BITS], memory_order_acquire);
	if (!l2) {
		l2 = calloc((size_t)1 << MAPPED_L2_BITS, sizeof(*l2));
		if (!l2)
			return NULL;
		atomic_store_explicit(&t->l1[k >> MAPPED_L2_BITS], l2, memory_order_release);
		uint32_t used = atomic_load(&t->l1_used), want = (uint32_t)(k >> MAPPED_L2_BITS) + 1;
		while (used < want && !atomic_compare_exchange_weak(&t->l1_used, &used, want))
			;
	}
	return &l2[k & ((1u << MAPPED_L2_BITS) - 1)];
}

void mapped_table_each(struct mapped_table *t, void (*fn)(struct mapped_chunk *e, void *arg), void *arg)
{
	uint32_t used = atomic_load(&t->l1_used);
	for (uint32_t i = 0; i < used; i++) {
		struct mapped_chunk *l2 = atomic_load(&t->l1[i]);
		if (!l2)
			continue;
		for (int j = 0; j < (1 << MAPPED_L2_BITS); j++)
			if (atomic_load(&l2[j].base))
				fn(&l2[j], arg);
	}
}

void mapped_table_free(struct mapped_table *t)
{
	uint32_t used = atomic_load(&t->l1_used);
	for (uint32_t i = 0; i < used; i++) {
		free(atomic_load(&t->l1[i]));
		t->l1[i] = NULL;
	}
	atomic_store(&t->l1_used, 0);
}
