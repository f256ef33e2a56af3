/* SPDX-License-Identifier: MIT */
/*
 * chell_pvm_pool_seeds DIR: writes the seed images of fuzz_pvm_pool - small
 * pVM pools (empty; objects in two applications with history; an
 * unfinished transaction; a transaction half-way through a table growth)
 * and copies with one field of each on-media structure damaged.
 */
#include <chell/pvm.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: chell_pvm_pool_seeds DIR\n"
	"\n"
	"Writes the seed corpus of the pVM pool fuzz target into DIR.\n";

static const char *dir;
static size_t len;

static void save(const char *name, const uint8_t *img)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(img, 1, len, f) != len) {
		perror(path);
		exit(1);
	}
	fclose(f);
}

static uint8_t *fresh(struct pvm_pool **p, struct pvm_app **a)
{
	struct pvm_pool_opts o = {.max_size = 40 * 4096, .journals = 2, .journal_entries = 64, .max_apps = 2};
	uint8_t *img = aligned_alloc(4096, len);
	char err[256];
	memset(img, 0, len);
	if (pvm_pool_open_mem(img, len, NULL, 1, &o, p, err, sizeof(err)) ||
	    pvm_app_open(*p, "seed", NULL, PVM_APP_CREATE, a, err, sizeof(err))) {
		fprintf(stderr, "seed: %s\n", err);
		exit(1);
	}
	return img;
}

/* Damage 8 bytes at the first occurrence of `needle` + delta. */
static void damaged(const uint8_t *img, const char *name, const void *needle, size_t nlen, long delta)
{
	uint8_t *c = malloc(len);
	memcpy(c, img, len);
	uint8_t *hit = memmem(c, len, needle, nlen);
	if (hit && hit + delta >= c && hit + delta + 8 <= c + len) {
		for (int i = 0; i < 8; i++)
			hit[delta + i] ^= (uint8_t)(0x5a + i);
		save(name, c);
	}
	free(c);
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	if (argc != 2) {
		fputs(usage_text, stderr);
		return 2;
	}
	dir = argv[1];
	mkdir(dir, 0755);
	len = 4096 + 4096 + 2 * 65 * 64 + 40 * 4096;
	len = (len + 4095) / 4096 * 4096 + 4096;
	struct pvm_pool *p;
	struct pvm_app *a;
	uint8_t *img = fresh(&p, &a);
	save("empty", img);
	void *ptr;
	pvm_create(a, "alpha", 100, &ptr);
	pvm_write(a, "alpha", 0, "alpha-data", 10);
	pvm_set_history(a, "alpha", 2);
	pvm_write(a, "alpha", 0, "alpha-v2..", 10);
	pvm_create(a, "beta", 5000, NULL);
	pvm_create(a, "empty-object", 0, NULL);
	struct pvm_app *b;
	pvm_app_open(p, "second", NULL, PVM_APP_CREATE, &b, NULL, 0);
	pvm_create(b, "gamma", 300, NULL);
	pvm_app_close(b);
	save("objects", img);
	damaged(img, "bad-root-magic", "CHELLPV1", 8, 0);
	damaged(img, "bad-root-curpages", "CHELLPV1", 8, 88);
	damaged(img, "bad-app-crc", "seed", 5, 80);
	damaged(img, "bad-app-table", "seed", 5, 64);
	damaged(img, "bad-obj-size", "beta", 5, -48);
	damaged(img, "bad-obj-off", "beta", 5, -56);
	damaged(img, "bad-obj-nh", "beta", 5, -64);
	damaged(img, "bad-obj-hist", "alpha", 6, -24);
	damaged(img, "bad-region-super", "CHELLPM1", 8, 16);
	{ /* a pool of the previous format version (refused by its number) */
		uint8_t *c = malloc(len);
		memcpy(c, img, len);
		uint8_t *root = memmem(c, len, "CHELLPV1", 8);
		if (root) {
			uint32_t v = 1;
			memcpy(root + 8, &v, 4);
			save("old-version", c);
		}
		free(c);
	}
	/* An unfinished transaction: the image as a crash would leave it. */
	pvm_tx_begin(a);
	pvm_tx_add(a, "beta", 0, 64);
	pvm_open(a, "beta", &ptr, NULL);
	memset(ptr, 0x77, 64);
	pvm_create(a, "uncommitted", 8000, NULL);
	save("unfinished-tx", img);
	pvm_tx_abort(a);
	/* Many objects: a table that grew. */
	for (int i = 0; i < 40; i++) {
		char n[16];
		snprintf(n, sizeof(n), "o%d", i);
		if (pvm_create(a, n, 10, NULL))
			break;
	}
	save("grown-table", img);
	pvm_app_close(a);
	pvm_pool_close(p);
	free(img);
	return 0;
}
