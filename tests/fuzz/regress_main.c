/* SPDX-License-Identifier: MIT */
/*
 * Regression runner for the fuzz targets without libFuzzer: feeds every file
 * named on the command line (directories: every regular file in them, in
 * name order) to LLVMFuzzerTestOneInput once. Built with the ordinary
 * compiler and run by ctest, so each corpus file - the seeds and every crash
 * reproducer added later - is exercised in every CI run, ASan build included.
 * A finding aborts inside the target; a clean run prints how many inputs ran.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "regress: %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 16, len = 0, n;
	uint8_t *buf = malloc(cap);
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	fclose(f);
	if (!buf) {
		fprintf(stderr, "regress: %s: out of memory\n", path);
		return -1;
	}
	LLVMFuzzerTestOneInput(buf, len);
	free(buf);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	int ran = 0, bad = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) != 0) {
			fprintf(stderr, "regress: %s: %s\n", argv[i], strerror(errno));
			bad++;
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			bad += run_file(argv[i]) < 0;
			ran++;
			continue;
		}
		struct dirent **ents;
		int n = scandir(argv[i], &ents, NULL, by_name);
		if (n < 0) {
			fprintf(stderr, "regress: %s: %s\n", argv[i], strerror(errno));
			bad++;
			continue;
		}
		for (int k = 0; k < n; k++) {
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", argv[i], ents[k]->d_name);
			if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
				bad += run_file(path) < 0;
				ran++;
			}
			free(ents[k]);
		}
		free(ents);
	}
	printf("regress: %d inputs run, %d unreadable\n", ran, bad);
	/* No input at all is a broken corpus path, not a pass. */
	return (bad || ran == 0) ? 1 : 0;
}
