/* SPDX-License-Identifier: MIT */
/*
 * The bandwidth budget every process on the tier shares. A device moves
 * one transfer at a time per direction at its bandwidth; its state is the
 * time until which it is busy, a "busy until" virtual clock per direction
 * (CLOCK_MONOTONIC ns, the same in every process of the machine). A
 * transfer that could start at t0 and lasts dur starts at max(t0, busy)
 * and moves the clock to its end, in one compare-and-swap: two processes
 * moving data as fast as they can each get half the bandwidth, and one
 * alone gets all of it.
 *
 * The clocks live in a small file of tier.state (on tmpfs: /dev/shm),
 * one per model (chell-tier-budget.MODEL.BOOTID): processes that model
 * the same device share it, a stale clock of another boot is never read
 * (the monotonic clock restarts at boot).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "chell/sys.h"
#include "internal.h"

#define BUDGET_BYTES 4096 /* two clocks, on a page of their own */

uint64_t tier_reserve(_Atomic uint64_t *busy, uint64_t t0, uint64_t dur)
{
	uint64_t b = atomic_load_explicit(busy, memory_order_relaxed), end;
	do
		end = (b > t0 ? b : t0) + dur;
	while (!atomic_compare_exchange_weak_explicit(busy, &b, end, memory_order_relaxed,
						      memory_order_relaxed));
	return end;
}

void tier_boot_id(char out[40])
{
	int fd = sys_open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC, 0);
	ssize_t n = fd >= 0 ? sys_read(fd, out, 36) : -1;
	if (fd >= 0)
		sys_close(fd);
	if (n != 36)
		snprintf(out, 40, "noboot");
	else
		out[36] = 0;
}

_Atomic uint64_t *tier_budget_open(const char *dir, const char *model, char *err, size_t errlen)
{
	char boot[40], path[4096];
	tier_boot_id(boot);
	snprintf(path, sizeof path, "%s/chell-tier-budget.%s.%s", dir, model, boot);
	/* 0666: every user's processes on the tier share the device */
	int fd = sys_open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0) {
		snprintf(err, errlen, "setting tier.state: cannot open %s: %s", path, strerror(-fd));
		return NULL;
	}
	struct stat st;
	int r = sys_fstat(fd, &st);
	if (r == 0 && st.st_size < BUDGET_BYTES) {
		r = sys_ftruncate(fd, BUDGET_BYTES); /* zero clocks: idle since boot */
		if (r == 0 && st.st_uid == (uid_t)CHELL_SC(SYS_geteuid, 0, 0, 0, 0, 0, 0))
			CHELL_SC(SYS_fchmod, fd, 0666, 0, 0, 0, 0); /* past the umask */
	}
	void *p = r < 0 ? NULL
			: (void *)CHELL_SC(SYS_mmap, NULL, BUDGET_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED,
					   fd, 0);
	sys_close(fd);
	if (!p || (uintptr_t)p > (uintptr_t)-4096) {
		snprintf(err, errlen, "setting tier.state: cannot map %s: %s", path,
			 strerror(r < 0 ? -r : -(int)(intptr_t)p));
		return NULL;
	}
	return (_Atomic uint64_t *)p;
}
