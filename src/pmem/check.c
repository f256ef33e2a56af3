/* SPDX-License-Identifier: MIT */
/*
 * chell_region_check: the validation open does, plus a dry run of
 * recovery, on a read-only mapping: nothing is written, so a damaged image
 * can be examined before anyone decides what to do with it.
 */
#include "pmem_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int chell_region_check_mem(const void *base, size_t len, struct chell_region_report *rep)
{
	struct pm_diag d;
	struct pm_layout lay;

	if (!rep)
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	pm_diag_init(&d, rep->text, sizeof(rep->text), 1);
	if (!base)
		pm_diag(&d, "no image given");
	else if (pm_validate(base, len, &lay, &d) == 0) {
		struct pm_region_view v = {base, &lay};
		for (uint32_t j = 0; j < lay.journals; j++) {
			uint64_t slot;
			struct pm_scan s;
			/* memcpy, not the atomic load: this image may sit at any
			 * address (a fuzzer's buffer) and nobody writes it. */
			memcpy(&slot, (const uint8_t *)base + lay.master_off + PM_ENTRY + 8ull * j, 8);
			if (!PM_SLOT_ACTIVE(slot))
				continue;
			pm_scan_journal(&v, j, PM_SLOT_GEN(slot), &s, &d);
			if (!s.bad && !s.finished && s.undo)
				rep->unfinished_tx++;
		}
	}
	rep->problems = d.count;
	rep->ok = d.count == 0;
	return 0;
}

int chell_region_check(const char *path, struct chell_region_report *rep)
{
	struct stat st;

	if (!path || !rep)
		return -EINVAL;
	memset(rep, 0, sizeof(*rep));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	if (st.st_size < (off_t)PM_SB_SIZE) {
		struct pm_diag d;
		close(fd);
		pm_diag_init(&d, rep->text, sizeof(rep->text), 1);
		pm_diag(&d, "image too small for a superblock: %lld bytes, need %u (truncated?)",
			(long long)st.st_size, PM_SB_SIZE);
		rep->problems = d.count;
		return 0;
	}
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED)
		return -e;
	int rc = chell_region_check_mem(p, (size_t)st.st_size, rep);
	munmap(p, (size_t)st.st_size);
	return rc;
}
