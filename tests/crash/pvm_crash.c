/* SPDX-License-Identifier: MIT */
/*
 * chell_pvm_crash - simulated power failures at the persist points of a
 * workload of pVM object-store transactions (src/pvm; docs/PVM.md).
 *
 * The pool is an in-memory image whose persistence goes through the
 * simulator (src/pmem/sim). A deterministic workload (create, write in a
 * transaction, resize, rename, delete, and multi-object transactions that
 * also create and delete, some objects keeping history) runs against it
 * and against a model: the bytes of every object after each operation. At
 * every persist point the crash image of each crash mode is built, opened
 * (recovery: rollback and page collection) and checked:
 *
 *   - the pool and the application open, and pvm_pool_check finds nothing
 *     (no page leaked or lost, every table valid);
 *   - every object has exactly the model's bytes after the last finished
 *     operation, or - only for the operation in flight - after it, all
 *     objects from the same one of the two;
 *   - the recovered pool takes one more transaction.
 *
 * --break missing-undo makes the persistence core skip the undo record of
 * the second range of every transaction (chell_ptx_fault_skip_undo): the
 * checker must then find violations (tests/system/test_pvm.py).
 * Exit 0: no violation; 1: violations; 2: usage or setup error.
 */
#include <chell/pmtx.h>
#include <chell/pvm.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmem/sim/sim.h"

#define NOBJ 12
#define MAXSZ 12000

struct obj {
	int used;
	uint64_t size;
	uint8_t data[MAXSZ];
};
struct model {
	struct obj o[NOBJ];
	/* The range the operation took with PVM_TX_NO_SNAPSHOT (object
	 * loose_obj, -1: none): a crash that rolls the operation back may
	 * leave anything there, so "before" does not compare it. */
	int loose_obj;
	uint64_t loose_off, loose_len;
};

struct h {
	uint64_t ops, seed, every, point;
	int brk, show;
	size_t len;
	uint8_t *work, *img;
	struct chell_pmsim *sim;
	struct model prev, next;
	int in_op;
	uint64_t opno;
	uint64_t images, violations, checked_points;
	uint8_t *buf;
};

static uint64_t rng(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	uint64_t z = *s;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void name_of(int i, char *buf)
{
	snprintf(buf, 16, "obj-%02d", i);
}

static int differs(const uint8_t *got, const uint8_t *want, uint64_t size, int skip, uint64_t off, uint64_t len)
{
	if (!skip)
		return size && memcmp(got, want, size);
	return (off && memcmp(got, want, off)) ||
	       (off + len < size && memcmp(got + off + len, want + off + len, size - off - len));
}

/* Compare a recovered pool with a model; 0 if equal. `loose` (or NULL):
 * the model whose operation's PVM_TX_NO_SNAPSHOT range is not compared. */
static int matches(struct pvm_app *a, const struct model *m, const struct model *loose, char *why, size_t len)
{
	for (int i = 0; i < NOBJ; i++) {
		char n[16];
		name_of(i, n);
		void *ptr = NULL;
		struct pvm_info info;
		int rc = pvm_open(a, n, &ptr, &info);
		if (!m->o[i].used) {
			if (rc != -ENOENT) {
				snprintf(why, len, "%s exists, model: absent", n);
				return 1;
			}
			continue;
		}
		if (rc) {
			snprintf(why, len, "%s absent, model: %" PRIu64 " bytes", n, m->o[i].size);
			return 1;
		}
		int skip = loose && loose->loose_obj == i;
		if (info.size != m->o[i].size ||
		    differs(ptr, m->o[i].data, info.size, skip, skip ? loose->loose_off : 0, skip ? loose->loose_len : 0)) {
			snprintf(why, len, "%s: %" PRIu64 " bytes differ from the model's %" PRIu64, n, info.size,
				 m->o[i].size);
			return 1;
		}
	}
	return 0;
}

static void check_image(struct h *h, uint64_t k, enum chell_pmsim_mode md)
{
	char err[512], why[2048] = "";
	struct pvm_pool *p = NULL;
	struct pvm_app *a = NULL;
	int bad = 0;
	chell_pmsim_crash_image(h->sim, md, h->seed * 1000003 + k * 7 + (uint64_t)md, h->img);
	h->images++;
	int rc = pvm_pool_open_mem(h->img, h->len, NULL, 0, NULL, &p, err, sizeof(err));
	if (rc) {
		snprintf(why, sizeof(why), "pool refused: %s", err);
		bad = 1;
	}
	if (!bad && (rc = pvm_app_open(p, "crash", NULL, 0, &a, err, sizeof(err)))) {
		snprintf(why, sizeof(why), "application refused: %s", err);
		bad = 1;
	}
	if (!bad) {
		char w1[256], w2[256];
		if (matches(a, &h->prev, h->in_op ? &h->next : NULL, w1, sizeof(w1)) &&
		    (!h->in_op || matches(a, &h->next, NULL, w2, sizeof(w2)))) {
			snprintf(why, sizeof(why), "state is neither before (%s) nor after (%s)", w1, h->in_op ? w2 : "-");
			bad = 1;
		}
	}
	if (!bad) {
		char rep[1024];
		rc = pvm_pool_check(p, 0, rep, sizeof(rep));
		if (rc) {
			snprintf(why, sizeof(why), "check: %d problems: %s", rc, rep);
			bad = 1;
		}
	}
	if (!bad && (rc = pvm_create(a, "after-crash", 100, NULL))) {
		snprintf(why, sizeof(why), "no transaction after recovery: %s", strerror(-rc));
		bad = 1;
	}
	pvm_app_close(a);
	pvm_pool_close(p);
	if (bad) {
		if (h->violations < (uint64_t)h->show)
			printf("violation at point %" PRIu64 " (op %" PRIu64 ", %s, mode %s): %s\n"
			       "  reproduce: chell_pvm_crash --ops %" PRIu64 " --seed %" PRIu64 "%s --point %" PRIu64 "\n",
			       k, h->opno, h->in_op ? "in flight" : "done", chell_pmsim_mode_name(md), why, h->ops,
			       h->seed, h->brk ? " --break missing-undo" : "", k);
		h->violations++;
	}
}

static void hook(void *arg, struct chell_pmsim *s, uint64_t point)
{
	struct h *h = arg;
	(void)s;
	if (!h->in_op)
		return;
	if (h->point ? point != h->point : (point - 1) % h->every)
		return;
	h->checked_points++;
	for (int md = 0; md < CHELL_PMSIM_MODES; md++)
		check_image(h, point, (enum chell_pmsim_mode)md);
}

static void fill(uint8_t *d, uint64_t n, uint64_t seed)
{
	for (uint64_t i = 0; i < n; i++)
		d[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

/* One operation on the live pool and on h->next (h->prev = before). */
/* a NULL: only the model changes. Library calls go through LIB(). */
#define LIB(call) (a ? (call) : 0)
static int one_op(struct model *m, struct pvm_app *a, uint64_t *rs)
{
	int i = (int)(rng(rs) % NOBJ), j = (int)(rng(rs) % NOBJ);
	char n[16], n2[16];
	name_of(i, n);
	name_of(j, n2);
	uint64_t kind = rng(rs) % 8, sz = rng(rs) % MAXSZ;
	if (a && getenv("PVM_CRASH_DEBUG"))
		fprintf(stderr, "op kind %d i %d j %d used %d/%d\n", (int)kind, i, j, m->o[i].used, m->o[j].used);
	int rc = 0;
	m->loose_obj = -1;
	if (!m->o[i].used) {
		rc = LIB(pvm_create(a, n, sz, NULL));
		if (!rc && i % 3 == 0)
			rc = LIB(pvm_set_history(a, n, 2)); /* a second transaction: its own op below */
		m->o[i].used = 1;
		m->o[i].size = sz;
		memset(m->o[i].data, 0, sz);
		return rc;
	}
	switch (kind) {
	case 0: case 1: case 2: { /* transactional write of a range */
		uint64_t size = m->o[i].size;
		if (!size)
			return 0;
		uint64_t off = rng(rs) % size, len = 1 + rng(rs) % (size - off);
		void *ptr;
		uint64_t seed = rng(rs);
		rc = LIB(pvm_tx_begin(a));
		if (kind == 2) { /* by the data pointer (pvm_tx_add_ptr), every other one unlogged */
			unsigned flags = seed & 1 ? PVM_TX_NO_SNAPSHOT : 0;
			if (!rc)
				rc = LIB(pvm_open(a, n, &ptr, NULL));
			if (!rc)
				rc = LIB(pvm_tx_xadd_ptr(a, ptr, off, len, flags));
			if (flags) {
				m->loose_obj = i;
				m->loose_off = off;
				m->loose_len = len;
			}
		} else {
			if (!rc)
				rc = LIB(pvm_tx_add(a, n, off, len));
			if (!rc)
				rc = LIB(pvm_open(a, n, &ptr, NULL));
		}
		if (!rc)
			if (a)
				fill((uint8_t *)ptr + off, len, seed);
		int c = LIB(pvm_tx_commit(a));
		fill(m->o[i].data + off, len, seed);
		return rc ? rc : c;
	}
	case 3: /* resize */
		rc = LIB(pvm_resize(a, n, sz, NULL));
		if (sz > m->o[i].size)
			memset(m->o[i].data + m->o[i].size, 0, sz - m->o[i].size);
		m->o[i].size = sz;
		return rc;
	case 4: /* delete */
		rc = LIB(pvm_delete(a, n));
		m->o[i].used = 0;
		return rc;
	case 5: /* rename to a free name */
		if (m->o[j].used)
			return 0;
		rc = LIB(pvm_rename(a, n, n2));
		m->o[j] = m->o[i];
		m->o[i].used = 0;
		return rc;
	default: { /* one transaction: write i, write or create j, maybe delete j */
		void *pi, *pj;
		uint64_t s1 = rng(rs), s2 = rng(rs);
		int del = kind == 7 && i != j && m->o[j].used;
		rc = LIB(pvm_tx_begin(a));
		if (!rc && m->o[i].size && !(rc = LIB(pvm_tx_add(a, n, 0, m->o[i].size))) && !(rc = LIB(pvm_open(a, n, &pi, NULL))))
			if (a)
				fill(pi, m->o[i].size, s1);
		if (m->o[i].size)
			fill(m->o[i].data, m->o[i].size, s1);
		if (!rc && i != j) {
			if (del) {
				rc = LIB(pvm_delete(a, n2));
				m->o[j].used = 0;
			} else if (!m->o[j].used) {
				if (!(rc = LIB(pvm_create(a, n2, sz, &pj))) && sz)
					if (a)
						fill(pj, sz, s2); /* new object: no undo needed */
				m->o[j].used = 1;
				m->o[j].size = sz;
				fill(m->o[j].data, sz, s2);
			} else if (m->o[j].size) {
				if (!(rc = LIB(pvm_tx_add(a, n2, 0, m->o[j].size))) && !(rc = LIB(pvm_open(a, n2, &pj, NULL))))
					if (a)
						fill(pj, m->o[j].size, s2);
				fill(m->o[j].data, m->o[j].size, s2);
			}
		}
		int c = LIB(pvm_tx_commit(a));
		return rc ? rc : c;
	}
	}
}

static void usage(void)
{
	printf("usage: chell_pvm_crash [options]\n"
	       "Simulated power failures at every persist point of a workload of pVM\n"
	       "object-store transactions; each crash image is recovered and checked.\n"
	       "Exit 0: no violation, 1: violations, 2: usage or setup error.\n\n"
	       "  --ops N         operations (default 400)\n"
	       "  --seed S        workload and crash-mode seed (default 1)\n"
	       "  --every N       test persist points 1, 1+N, ... (default 1: all)\n"
	       "  --point K       test only point K\n"
	       "  --break missing-undo   the core skips one undo record per transaction\n"
	       "  --show N        violations printed in full (default 5)\n"
	       "  -h, --help      this text\n");
}

int main(int argc, char **argv)
{
	static struct h h;
	h = (struct h){.ops = 400, .seed = 1, .every = 1, .show = 5};
	static const struct option lo[] = {{"ops", required_argument, 0, 'o'}, {"seed", required_argument, 0, 's'},
					   {"every", required_argument, 0, 'e'}, {"point", required_argument, 0, 'p'},
					   {"break", required_argument, 0, 'b'}, {"show", required_argument, 0, 'w'},
					   {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		uint64_t v = optarg ? strtoull(optarg, NULL, 0) : 0;
		switch (c) {
		case 'o': h.ops = v; break;
		case 's': h.seed = v; break;
		case 'e': h.every = v ? v : 1; break;
		case 'p': h.point = v; break;
		case 'w': h.show = (int)v; break;
		case 'b':
			if (strcmp(optarg, "missing-undo")) {
				fprintf(stderr, "chell_pvm_crash: bad --break '%s'\n", optarg);
				return 2;
			}
			h.brk = 1;
			break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	struct pvm_pool_opts o = {.max_size = 1 << 20, .journals = 2, .journal_entries = 1024, .max_apps = 2};
	struct chell_region_layout rl = {.journals = o.journals, .journal_entries = o.journal_entries,
					 .heap_size = o.max_size};
	uint64_t total;
	if (chell_region_size(&rl, NULL, &total))
		return 2;
	h.len = (size_t)total;
	h.work = aligned_alloc(4096, h.len);
	h.img = aligned_alloc(4096, h.len);
	if (!h.work || !h.img)
		return 2;
	memset(h.work, 0, h.len);
	h.sim = chell_pmsim_new(h.work, h.len);
	char err[512];
	struct pvm_pool *p;
	struct pvm_app *a;
	if (!h.sim || pvm_pool_open_mem(h.work, h.len, chell_pmsim_ops(h.sim), 1, &o, &p, err, sizeof(err)) ||
	    pvm_app_open(p, "crash", NULL, PVM_APP_CREATE, &a, err, sizeof(err))) {
		fprintf(stderr, "chell_pvm_crash: setup: %s\n", err);
		return 2;
	}
	chell_pmsim_sync(h.sim);
	chell_pmsim_set_hook(h.sim, hook, &h);
	chell_ptx_fault_skip_undo = h.brk;
	uint64_t rs = h.seed, live_errors = 0;
	for (h.opno = 0; h.opno < h.ops; h.opno++) {
		/* The model first (the hook needs the state after the op while
		 * it runs), then the library on a scratch copy with the same
		 * random choices. */
		h.prev = h.next;
		struct model *scratch = malloc(sizeof(*scratch));
		if (!scratch)
			return 2;
		*scratch = h.next;
		uint64_t rs_model = rs;
		one_op(&h.next, NULL, &rs_model);
		h.in_op = 1;
		int rc = one_op(scratch, a, &rs);
		free(scratch);
		h.in_op = 0;
		if (rc && rc != -ENOSPC) {
			if (live_errors++ < 5)
				printf("live: op %" PRIu64 " failed: %s\n", h.opno, strerror(-rc));
		}
		if (rc == -ENOSPC) {
			/* The pool is full: the model cannot follow; stop here. */
			break;
		}
		char why[256];
		if (!h.brk && matches(a, &h.next, NULL, why, sizeof(why))) {
			printf("live mismatch after op %" PRIu64 ": %s\n", h.opno, why);
			return 1;
		}
	}
	chell_ptx_fault_skip_undo = 0;
	chell_pmsim_set_hook(h.sim, NULL, NULL);
	printf("pvm crash: %" PRIu64 " operations, %" PRIu64 " persist points checked, %" PRIu64
	       " crash images, %" PRIu64 " violations%s\n",
	       h.opno, h.checked_points, h.images, h.violations, h.brk ? " (broken variant)" : "");
	pvm_app_close(a);
	pvm_pool_close(p);
	chell_pmsim_free(h.sim);
	free(h.work);
	free(h.img);
	return h.violations || live_errors ? 1 : 0;
}
