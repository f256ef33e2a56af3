/* SPDX-License-Identifier: MIT */
/*
 * Validation of an application's state (entry and object table), the page
 * collector run by recovery, pvm_pool_check and the application listing.
 * Every message names the structure and the field.
 */
#include "pvm_internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static int range_ok(struct pvm_pool *p, uint64_t off, uint64_t len)
{
	uint64_t end = p->root->cur_pages * PVM_PAGE;
	return off % PVM_PAGE == 0 && off >= p->data_page * PVM_PAGE && off <= end && len <= end - off;
}

int pvm_app_validate(struct pvm_pool *p, uint32_t i, char *err, size_t errlen)
{
	struct pvm_aent e;
	memcpy(&e, pvm_aent(p, i), sizeof(e));
	if (!(e.flags & PVM_A_USED))
		return 0;
	char an[PVM_APP_NAME_MAX];
	memcpy(an, e.name, sizeof(an));
	an[sizeof(an) - 1] = '\0';
	uint32_t c = pvm_aent_crc(&e);
	if (c != e.crc) {
		pvm_err(err, errlen, "application %u (\"%s\"): entry field crc 0x%08x, computed 0x%08x", i, an, e.crc, c);
		return -EUCLEAN;
	}
	if (e.slots < 2 || e.slots > PVM_MAX_SLOTS || (e.slots & (e.slots - 1))) {
		pvm_err(err, errlen, "application \"%s\": entry field slots %u is not a power of two in 2..%u", an,
			e.slots, PVM_MAX_SLOTS);
		return -EUCLEAN;
	}
	if (!range_ok(p, e.table_off, (uint64_t)e.slots * sizeof(struct pvm_odesc))) {
		pvm_err(err, errlen, "application \"%s\": entry field table_off %llu outside the object space", an,
			(unsigned long long)e.table_off);
		return -EUCLEAN;
	}
	/* A step is below the number of objects that existed at once. */
	if (e.max_step >= PVM_MAX_SLOTS) {
		pvm_err(err, errlen, "application \"%s\": entry field max_step %llu is not below %u", an,
			(unsigned long long)e.max_step, PVM_MAX_SLOTS);
		return -EUCLEAN;
	}
	const struct pvm_odesc *t = (const struct pvm_odesc *)(p->heap + e.table_off);
	struct pvm_guid g;
	memcpy(g.b, e.guid, 16);
	uint64_t used = 0;
	for (uint32_t s = 0; s < e.slots; s++) {
		const struct pvm_odesc *d = &t[s];
		const char *bad = NULL;
		if (d->used > 1)
			bad = "used";
		if (!d->used || bad) {
			if (bad)
				goto fail;
			continue;
		}
		used++;
		if (d->name_len == 0 || d->name_len >= PVM_NAME_MAX || d->name[d->name_len] ||
		    strnlen(d->name, d->name_len) != d->name_len)
			bad = "name_len";
		else if (d->nh - pvm_name_hash(&g, d->name, d->name_len) > e.max_step)
			bad = "nh";
		else if (d->cap % PVM_PAGE || d->size > d->cap)
			bad = "size";
		else if (d->cap ? !range_ok(p, d->off, d->cap) : d->off != 0)
			bad = "off";
		else if (d->hist_n > PVM_HISTORY_MAX)
			bad = "hist_n";
		else if (d->hist_off ? !range_ok(p, d->hist_off, PVM_PAGE) : d->hist_n != 0)
			bad = "hist_off";
		else if (d->flags & ~PVM_F_PROTECTED)
			bad = "flags";
		else if (d->hist_off) {
			const struct pvm_hent *h = (const struct pvm_hent *)(p->heap + d->hist_off);
			for (uint32_t k = 0; k < PVM_HISTORY_MAX && !bad; k++)
				if (h[k].version && (h[k].version >= d->version || h[k].size > h[k].cap ||
						     h[k].cap % PVM_PAGE ||
						     (h[k].cap ? !range_ok(p, h[k].off, h[k].cap) : h[k].off != 0)))
					bad = "history entry";
		}
		if (bad) {
		fail:
			pvm_err(err, errlen, "application \"%s\": object table slot %u (\"%.*s\"): field %s is invalid", an,
				s, (int)(d->name_len < PVM_NAME_MAX ? d->name_len : 0), d->name, bad);
			return -EUCLEAN;
		}
	}
	if (used != e.objects || used * 2 > e.slots) {
		pvm_err(err, errlen, "application \"%s\": entry field objects %llu, the table holds %llu", an,
			(unsigned long long)e.objects, (unsigned long long)used);
		return -EUCLEAN;
	}
	return 0;
}

/* ------------------------------------------------------------ reachability */

struct reach {
	uint64_t *bm;
	uint64_t pages;
	uint64_t twice;           /* pages reached more than once */
};

static void mark(struct reach *r, uint64_t off, uint64_t len)
{
	for (uint64_t pg = off / PVM_PAGE; pg < (off + len + PVM_PAGE - 1) / PVM_PAGE && pg < r->pages; pg++) {
		if (r->bm[pg / 64] >> (pg % 64) & 1)
			r->twice++;
		r->bm[pg / 64] |= 1ull << (pg % 64);
	}
}

/* The pages valid applications reach; -EUCLEAN (with bad = how many
 * applications are damaged) when one is not valid: nothing can be freed. */
static int reachable(struct pvm_pool *p, struct reach *r, int *bad, char *rep, size_t replen)
{
	r->pages = p->root->cur_pages;
	r->twice = 0;
	r->bm = calloc((r->pages + 63) / 64, 8);
	if (!r->bm)
		return -ENOMEM;
	*bad = 0;
	mark(r, 0, p->data_page * PVM_PAGE);
	for (uint32_t i = 0; i < p->max_apps; i++) {
		char msg[512];
		if (pvm_app_validate(p, i, msg, sizeof(msg))) {
			(*bad)++;
			if (rep) {
				size_t u = strlen(rep);
				snprintf(rep + u, replen - u, "%s\n", msg);
			}
			continue;
		}
		struct pvm_aent *e = pvm_aent(p, i);
		if (!(e->flags & PVM_A_USED))
			continue;
		mark(r, e->table_off, (uint64_t)e->slots * sizeof(struct pvm_odesc));
		const struct pvm_odesc *t = (const struct pvm_odesc *)(p->heap + e->table_off);
		for (uint32_t s = 0; s < e->slots; s++) {
			if (!t[s].used)
				continue;
			mark(r, t[s].off, t[s].cap);
			if (!t[s].hist_off)
				continue;
			mark(r, t[s].hist_off, PVM_PAGE);
			const struct pvm_hent *h = (const struct pvm_hent *)(p->heap + t[s].hist_off);
			for (uint32_t k = 0; k < PVM_HISTORY_MAX; k++)
				if (h[k].version)
					mark(r, h[k].off, h[k].cap);
		}
	}
	return *bad ? -EUCLEAN : 0;
}

/* Differences between the stored bitmap and the reachable pages. */
static void diff(struct pvm_pool *p, const struct reach *r, uint64_t *leaked, uint64_t *lost)
{
	*leaked = *lost = 0;
	for (uint64_t pg = 0; pg < r->pages; pg++) {
		int want = (int)(r->bm[pg / 64] >> (pg % 64) & 1), have = chell_bm_test(p->heap, p->bm_off, (uint32_t)pg);
		if (have && !want)
			(*leaked)++;
		if (want && !have)
			(*lost)++;
	}
}

/* Make the stored bitmap the reachable one, 64 words per transaction. */
static int fix_bitmap(struct pvm_pool *p, unsigned j, const struct reach *r)
{
	uint64_t words = (r->pages + 63) / 64;
	const uint64_t *have = (const uint64_t *)(p->heap + p->bm_off);
	for (uint64_t w0 = 0; w0 < words; w0 += 64) {
		uint64_t n = words - w0 < 64 ? words - w0 : 64;
		int differs = 0;
		for (uint64_t w = w0; w < w0 + n; w++) {
			uint64_t keep = w == words - 1 && r->pages % 64 ? ~0ull << (r->pages % 64) : 0;
			if ((have[w] & ~keep) != r->bm[w])
				differs = 1;
		}
		if (!differs)
			continue;
		struct chell_ptx t;
		chell_ptx_begin(&t, p->r, j);
		uint64_t *dst = chell_ptx_add(&t, p->bm_off + 8 * w0, 8 * n);
		for (uint64_t w = w0; dst && w < w0 + n; w++) {
			/* Bits past the current size are left as they are. */
			uint64_t keep = w == words - 1 && r->pages % 64 ? ~0ull << (r->pages % 64) : 0;
			dst[w - w0] = (dst[w - w0] & keep) | r->bm[w];
		}
		int rc = chell_ptx_end(&t);
		if (rc)
			return rc;
	}
	return 0;
}

int pvm_gc(struct pvm_pool *p, unsigned j, uint64_t *leaked_out, char *err, size_t errlen)
{
	struct reach r;
	int bad;
	uint64_t leaked = 0, lost = 0;
	(void)err, (void)errlen;
	int rc = reachable(p, &r, &bad, NULL, 0);
	if (rc == -EUCLEAN || (!rc && r.twice)) {
		/* A damaged application's pages are not known: free nothing. */
		free(r.bm);
		return 0;
	}
	if (rc)
		return rc;
	diff(p, &r, &leaked, &lost);
	if (leaked || lost)
		rc = fix_bitmap(p, j, &r);
	free(r.bm);
	if (leaked_out)
		*leaked_out = leaked;
	return rc ? rc : (int)(leaked > INT32_MAX ? INT32_MAX : leaked);
}

int pvm_pool_check(struct pvm_pool *p, int repair, char *rep, size_t replen)
{
	char dummy[8];
	if (!p)
		return -EINVAL;
	if (!rep || !replen) {
		rep = dummy;
		replen = sizeof(dummy);
	}
	rep[0] = '\0';
	if (repair && p->fd >= 0) {
		struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
		if (fcntl(p->fd, F_OFD_SETLK, &fl) < 0)
			return -EBUSY;
		fl.l_type = F_RDLCK;
		fcntl(p->fd, F_OFD_SETLK, &fl);
	}
	int rc = pvm_lock(p, pvm_mutex(p, PVM_M_META), 0);
	if (rc)
		return rc;
	struct reach r;
	int bad = 0, problems = 0;
	rc = reachable(p, &r, &bad, rep, replen);
	problems += bad;
	if (rc == -ENOMEM)
		goto out;
	if (r.twice) {
		size_t u = strlen(rep);
		snprintf(rep + u, replen - u, "page bitmap: %llu pages are reached by two owners\n",
			 (unsigned long long)r.twice);
		problems++;
	}
	if (!bad && !r.twice) {
		uint64_t leaked, lost;
		diff(p, &r, &leaked, &lost);
		size_t u = strlen(rep);
		if (leaked) {
			snprintf(rep + u, replen - u, "page bitmap: %llu pages in use that nothing reaches%s\n",
				 (unsigned long long)leaked, repair ? " (freed)" : "");
			problems++;
		}
		u = strlen(rep);
		if (lost) {
			snprintf(rep + u, replen - u, "page bitmap: %llu reached pages marked free%s\n",
				 (unsigned long long)lost, repair ? " (marked in use)" : "");
			problems++;
		}
		if (repair && (leaked || lost)) {
			uint32_t j = UINT32_MAX;
			pthread_mutex_lock(&p->local);
			for (uint32_t k = 0; k < p->journals && j == UINT32_MAX; k++)
				if (!p->claimed[k])
					j = k;
			pthread_mutex_unlock(&p->local);
			rc = j == UINT32_MAX ? -EBUSY : fix_bitmap(p, j, &r);
		}
	}
	free(r.bm);
	if (rc == -EUCLEAN)
		rc = 0;
out:
	pthread_mutex_unlock(pvm_mutex(p, PVM_M_META));
	return rc < 0 ? rc : problems;
}

int pvm_app_next(struct pvm_pool *p, uint32_t *cursor, struct pvm_app_info *info)
{
	if (!p || !cursor || !info)
		return -EINVAL;
	int rc = pvm_lock(p, pvm_mutex(p, PVM_M_META), 0);
	if (rc)
		return rc;
	int found = 0;
	for (uint32_t i = *cursor; i < p->max_apps && !found; i++) {
		struct pvm_aent *e = pvm_aent(p, i);
		if (!(e->flags & PVM_A_USED))
			continue;
		memset(info, 0, sizeof(*info));
		memcpy(info->name, e->name, PVM_APP_NAME_MAX - 1);
		memcpy(info->guid.b, e->guid, 16);
		info->damaged = pvm_app_validate(p, i, NULL, 0) != 0;
		if (!info->damaged) {
			const struct pvm_odesc *t = (const struct pvm_odesc *)(p->heap + e->table_off);
			info->pages_bytes = (uint64_t)e->slots * sizeof(*t);
			for (uint32_t s = 0; s < e->slots; s++) {
				if (!t[s].used)
					continue;
				info->objects++;
				info->bytes += t[s].size;
				info->pages_bytes += t[s].cap + (t[s].hist_off ? PVM_PAGE : 0);
				const struct pvm_hent *h = (const struct pvm_hent *)(p->heap + t[s].hist_off);
				for (uint32_t k = 0; t[s].hist_off && k < PVM_HISTORY_MAX; k++)
					if (h[k].version)
						info->pages_bytes += h[k].cap;
			}
		}
		*cursor = i + 1;
		found = 1;
	}
	pthread_mutex_unlock(pvm_mutex(p, PVM_M_META));
	return found;
}
