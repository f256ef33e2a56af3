/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: arbitrary bytes as a pVM pool image through the pool opener
 * (pvm_pool_open_mem: region validation, recovery, root validation, page
 * collection), then pvm_pool_check, every application (pvm_app_open
 * validates its table) and every object's bytes.
 *
 * Oracles, beyond "no crash, no sanitizer report": a refusal comes with a
 * sentence; an image that opens and checks clean takes a few operations
 * (create, transactional write, resize, rename, delete) and still checks
 * clean afterwards - a failed operation must leave everything as it was.
 *
 * Built with libFuzzer by scripts/fuzz.sh --target pvm_pool, and with
 * regress_main.c over the committed corpus by ctest (fuzz_pvm_pool_corpus).
 * Seeds: chell_pvm_pool_seeds (make_pvm_pool.c).
 */
#include <chell/pvm.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_IMAGE (1u << 20)

static void fail(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_pvm_pool: %s: %s\n", what, detail);
	abort();
}

static int clean(struct pvm_pool *p)
{
	char rep[4096];
	return pvm_pool_check(p, 0, rep, sizeof(rep)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_IMAGE || size < 8)
		return 0;
	size_t len = (size + 4095) & ~(size_t)4095;
	uint8_t *img = aligned_alloc(4096, len);
	if (!img)
		return 0;
	memset(img, 0, len);
	memcpy(img, data, size);
	struct pvm_pool *p = NULL;
	char err[512] = "";
	int rc = pvm_pool_open_mem(img, size, NULL, 0, NULL, &p, err, sizeof(err));
	if (rc) {
		if (!err[0])
			fail("refused without a sentence", "");
		free(img);
		return 0;
	}
	int was_clean = clean(p);
	struct pvm_app_info ai;
	uint32_t cur = 0;
	char names[8][PVM_APP_NAME_MAX];
	int napps = 0;
	while (pvm_app_next(p, &cur, &ai) == 1 && napps < 8)
		memcpy(names[napps++], ai.name, PVM_APP_NAME_MAX);
	volatile uint8_t sink = 0;
	for (int i = 0; i < napps; i++) {
		struct pvm_app *a = NULL;
		if (!names[i][0])
			continue;
		rc = pvm_app_open(p, names[i], NULL, 0, &a, err, sizeof(err));
		if (rc) {
			if (!err[0])
				fail("application refused without a sentence", names[i]);
			continue;
		}
		uint64_t oc = 0;
		struct pvm_info info;
		int nobj = 0;
		while (pvm_iter(a, &oc, &info) == 1 && nobj++ < 64) {
			uint8_t *ptr;
			if (pvm_open(a, info.name, (void **)&ptr, NULL) == 0 && ptr && info.size)
				sink ^= ptr[0] ^ ptr[info.size - 1];
		}
		if (was_clean) {
			void *np;
			int r = pvm_create(a, "fuzz-new", 100 + size % 9000, &np);
			if (!r)
				r = pvm_write(a, "fuzz-new", 0, data, size < 100 ? size : 100);
			if (!r)
				r = pvm_resize(a, "fuzz-new", 20000, NULL);
			if (!r)
				r = pvm_rename(a, "fuzz-new", "fuzz-renamed");
			if (!r)
				r = pvm_delete(a, "fuzz-renamed");
			(void)r;
			if (!clean(p)) {
				char rep[4096];
				pvm_pool_check(p, 0, rep, sizeof(rep));
				fail("a clean pool is no longer clean after operations", rep);
			}
		}
		pvm_app_close(a);
	}
	(void)sink;
	pvm_pool_close(p);
	free(img);
	return 0;
}
