/* Shared state of the replacement policies: one circular doubly linked list
 * of resident chunks threaded through per-chunk arrays (no allocation after
 * creation). `hand` is the next chunk the policy examines: for FIFO the
 * oldest chunk, for CLOCK the clock hand. New chunks go just before the
 * hand, so they are examined last. */
#ifndef CHELL_CACHE_POLICY_IMPL_H
#define CHELL_CACHE_POLICY_IMPL_H

#include "cache/policy/policy.h"

#define POLICY_NONE UINT32_MAX

struct policy {
	policy_kind kind;
	uint32_t nchunks;
	uint32_t count;
	uint32_t hand;
	uint32_t *next, *prev;
	uint8_t *in;  /* resident */
	uint8_t *ref; /* manager-side reference (CLOCK) */
	const access_table *access;
	struct car *car; /* POLICY_CAR's lists (car.c) */
};

void policy_unlink(policy *p, uint32_t c);
/* Referenced since the hand last passed (a manager touch or a client's
 * access-table mark); consumes both, so one pass of a hand clears them. */
bool policy_referenced(policy *p, uint32_t c);
int policy_victim_clock(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg);
int policy_victim_fifo(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg);
int policy_victim_car(policy *p, uint32_t *chunk, policy_skip_fn skip, void *arg);
int car_init(policy *p);
void car_fini(policy *p);
int car_insert(policy *p, uint32_t chunk, uint64_t key);
void car_remove(policy *p, uint32_t chunk);
void car_touch(policy *p, uint32_t chunk);

#endif
