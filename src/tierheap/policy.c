/* SPDX-License-Identifier: MIT */
/* The tiered heap's placement decisions (policy.h). */
#include "policy.h"

#include <stdlib.h>
#include <string.h>

static const char *const policy_names[] = {"revert", "preferred", "bind", "interleave"};

int th_policy_parse(const char *s, enum th_policy *out)
{
	for (unsigned i = 0; i < sizeof policy_names / sizeof policy_names[0]; i++)
		if (strcmp(s, policy_names[i]) == 0) {
			*out = (enum th_policy)i;
			return 0;
		}
	return -1;
}

const char *th_policy_name(enum th_policy p)
{
	return (unsigned)p < sizeof policy_names / sizeof policy_names[0] ? policy_names[p] : "?";
}

static int parse_weight(const char *s, const char *end, unsigned *out)
{
	unsigned v = 0;
	if (s == end)
		return -1;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		v = v * 10 + (unsigned)(*s - '0');
		if (v > 1000)
			return -1;
	}
	if (v == 0)
		return -1;
	*out = v;
	return 0;
}

int th_weights_parse(const char *s, unsigned *w_dram, unsigned *w_slow)
{
	const char *colon = strchr(s, ':');
	if (!colon)
		return -1;
	unsigned d, sl;
	if (parse_weight(s, colon, &d) || parse_weight(colon + 1, colon + 1 + strlen(colon + 1), &sl))
		return -1;
	*w_dram = d;
	*w_slow = sl;
	return 0;
}

int th_pick(const struct th_policy_cfg *c, uint64_t dram_bytes, uint64_t slow_bytes, size_t size,
	    enum th_tier order[2])
{
	enum th_tier first;
	switch (c->policy) {
	case TH_BIND:
		order[0] = TH_SLOW;
		return 1;
	case TH_PREFERRED:
		first = TH_SLOW;
		break;
	case TH_INTERLEAVE:
		/* Kernel weighted interleave hands out pages round-robin by
		 * weight; by bytes that is: DRAM while its share is behind
		 * w_dram / (w_dram + w_slow) of what both hold. */
		first = (unsigned __int128)dram_bytes * c->w_slow <=
				(unsigned __int128)slow_bytes * c->w_dram
			? TH_DRAM
			: TH_SLOW;
		break;
	case TH_REVERT:
	default:
		first = c->budget == 0 || (dram_bytes <= c->budget && size <= c->budget - dram_bytes)
			? TH_DRAM
			: TH_SLOW;
		break;
	}
	order[0] = first;
	order[1] = first == TH_DRAM ? TH_SLOW : TH_DRAM;
	return 2;
}

uint64_t th_bump_take(struct th_bump *b, uint64_t size, uint64_t align)
{
	uint64_t cur = atomic_load_explicit(&b->next, memory_order_relaxed);
	for (;;) {
		uint64_t start = (cur + align - 1) & ~(align - 1);
		if (start < cur || start > b->cap || size > b->cap - start)
			return UINT64_MAX;
		if (atomic_compare_exchange_weak_explicit(&b->next, &cur, start + size,
							  memory_order_relaxed, memory_order_relaxed))
			return start;
	}
}

int th_parse_memory_max(const char *text, uint64_t *out)
{
	if (strncmp(text, "max", 3) == 0 && (text[3] == '\0' || text[3] == '\n')) {
		*out = 0;
		return 0;
	}
	uint64_t v = 0;
	const char *p = text;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p != '\0' && *p != '\n')
		return -1;
	/* cgroup v1 says "no limit" with the largest page multiple below 2^63. */
	*out = v >= (UINT64_C(1) << 62) ? 0 : v;
	return 0;
}
