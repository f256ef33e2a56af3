/* SPDX-License-Identifier: MIT */
/*
 * `chell tier stat PID`: the tiered heap's counters of a running program
 * (the file it publishes, src/tierheap/stat.h), and its resident anonymous
 * memory from /proc as the kernel's side of the same story. Without a PID:
 * every process on the tiered heap, one line each.
 *
 * A process removes its file when it exits (exit or _exit); one that was
 * killed cannot. Whoever finds the file of a process that is gone removes
 * it: this command, for the PID it is asked about and for every file when
 * it lists them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_tier.h"
#include "tierheap/policy.h"
#include "tierheap/stat.h"

static void usage(FILE *f)
{
	fputs("Usage: chell tier stat [--json] [PID]\n"
	      "\n"
	      "DRAM and slow-tier bytes of process PID running on the tiered heap (under\n"
	      "'chell tier run' or with libchell-tier.so preloaded): what the heap holds in\n"
	      "each tier now and at its peak, the DRAM budget, and the process's resident\n"
	      "anonymous memory (/proc/PID/smaps_rollup). Without PID: one line per process\n"
	      "on the tiered heap. Counter files of processes that are gone (killed) are\n"
	      "removed on the way.\n"
	      "\n"
	      "  --json      one JSON object (a list without PID)\n"
	      "  -h, --help  this help\n"
	      "\n"
	      "Exit status: 0; 1 if PID is not running on the tiered heap; 2 usage.\n",
	      f);
}

/* "Anonymous:" of /proc/PID/smaps_rollup in bytes, or -1. */
static long long anon_bytes(int pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/smaps_rollup", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	char *a = strstr(buf, "\nAnonymous:");
	return a ? strtoll(a + 11, NULL, 10) * 1024 : -1;
}

static const char *slow_kind(uint32_t k)
{
	return k == 1 ? "file" : k == 2 ? "node" : "none";
}

static int pid_gone(long pid)
{
	return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Map the counter file of pid: the mapping, or NULL with *why set
 * ("absent", "gone": the process is gone and its file was removed,
 * "mismatch": not a counter file of this process). */
static struct th_stat *stat_map(long pid, const char **why)
{
	char path[128];
	snprintf(path, sizeof path, TH_STAT_DIR "/" TH_STAT_PREFIX "%ld", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		*why = "absent";
		return NULL;
	}
	struct stat sb;
	struct th_stat *st = MAP_FAILED;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && (size_t)sb.st_size >= sizeof *st)
		st = mmap(NULL, sizeof *st, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (pid_gone(pid)) {
		/* The process is gone: whatever the file holds, it is stale. */
		if (st != MAP_FAILED)
			munmap(st, sizeof *st);
		unlink(path);
		*why = "gone";
		return NULL;
	}
	if (st == MAP_FAILED || st->magic != TH_STAT_MAGIC || st->version != TH_STAT_VERSION ||
	    st->pid != (int32_t)pid) {
		if (st != MAP_FAILED)
			munmap(st, sizeof *st);
		*why = "mismatch";
		return NULL;
	}
	return st;
}

/* Every process with a counter file, one line (or one JSON object) each;
 * the files of processes that are gone are removed. */
static int list_all(int json)
{
	DIR *d = opendir(TH_STAT_DIR);
	if (!d) {
		cli_err("tier stat: cannot list %s: %s", TH_STAT_DIR, strerror(errno));
		return 1;
	}
	size_t plen = strlen(TH_STAT_PREFIX);
	int n = 0;
	if (json)
		printf("[");
	else
		printf("%8s  %-10s  %12s  %12s  %12s\n", "pid", "policy", "budget kB", "DRAM kB", "slow kB");
	for (struct dirent *e; (e = readdir(d));) {
		if (strncmp(e->d_name, TH_STAT_PREFIX, plen))
			continue;
		char *end;
		long pid = strtol(e->d_name + plen, &end, 10);
		if (*end || pid <= 0 || pid > 0x7fffffff)
			continue;
		const char *why;
		struct th_stat *st = stat_map(pid, &why);
		if (!st)
			continue;
		unsigned long long dram = atomic_load_explicit(&st->dram_bytes, memory_order_relaxed),
				   slow = atomic_load_explicit(&st->slow_bytes, memory_order_relaxed);
		const char *pol = th_policy_name((enum th_policy)st->policy);
		if (json)
			printf("%s{\"pid\": %ld, \"policy\": \"%s\", \"dram_budget\": %llu, \"dram_bytes\": %llu, "
			       "\"slow_bytes\": %llu}",
			       n ? ", " : "", pid, pol, (unsigned long long)st->budget, dram, slow);
		else
			printf("%8ld  %-10s  %12llu  %12llu  %12llu\n", pid, pol,
			       (unsigned long long)st->budget / 1024, dram / 1024, slow / 1024);
		munmap(st, sizeof *st);
		n++;
	}
	closedir(d);
	if (json)
		printf("]\n");
	return 0;
}

int cmd_tier_stat(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int json = 0, c;
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hj", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: return cli_bad_option("tier stat", c, argv, longopts);
		}
	}
	if (optind == argc)
		return list_all(json);
	if (optind + 1 != argc) {
		cli_err("tier stat: too many arguments");
		cli_usage_hint("tier");
		return CLI_EXIT_USAGE;
	}
	char *end;
	long pid = strtol(argv[optind], &end, 10);
	if (*end || pid <= 0 || pid > 0x7fffffff) {
		cli_err("tier stat: '%s' is not a process id", argv[optind]);
		return CLI_EXIT_USAGE;
	}
	const char *why = NULL;
	struct th_stat *st = stat_map(pid, &why);
	if (!st) {
		if (!strcmp(why, "absent"))
			cli_err("tier stat: process %ld is not on the tiered heap (no %s/%s%ld)", pid, TH_STAT_DIR,
				TH_STAT_PREFIX, pid);
		else if (!strcmp(why, "gone"))
			cli_err("tier stat: process %ld is gone (its stale %s/%s%ld was removed)", pid, TH_STAT_DIR,
				TH_STAT_PREFIX, pid);
		else
			cli_err("tier stat: %s/%s%ld is not a tiered-heap counter file of process %ld", TH_STAT_DIR,
				TH_STAT_PREFIX, pid, pid);
		return 1;
	}
#define LD(x) ((unsigned long long)atomic_load_explicit(&st->x, memory_order_relaxed))
	unsigned long long dram = LD(dram_bytes), dram_peak = LD(dram_peak), meta = LD(meta_bytes),
			   slow = LD(slow_bytes), slow_peak = LD(slow_peak), fb = LD(fallbacks),
			   fail = LD(failures);
#undef LD
	long long anon = anon_bytes((int)pid);
	const char *pol = th_policy_name((enum th_policy)st->policy);
	if (json) {
		printf("{\"pid\": %ld, \"policy\": \"%s\", \"weights\": \"%u:%u\", "
		       "\"dram_budget\": %llu, \"dram_bytes\": %llu, \"dram_peak\": %llu, "
		       "\"metadata_bytes\": %llu, \"slow_kind\": \"%s\", \"slow_node\": %d, "
		       "\"slow_capacity\": %llu, \"slow_bytes\": %llu, \"slow_peak\": %llu, "
		       "\"fallbacks\": %llu, \"failures\": %llu, \"anon_rss\": %lld}\n",
		       pid, pol, st->w_dram, st->w_slow, (unsigned long long)st->budget, dram,
		       dram_peak, meta, slow_kind(st->slow_kind), st->slow_node,
		       (unsigned long long)st->slow_capacity, slow, slow_peak, fb, fail, anon);
	} else {
		printf("pid:            %ld\n", pid);
		printf("policy:         %s", pol);
		if (st->policy == TH_INTERLEAVE)
			printf(" (weights %u:%u)", st->w_dram, st->w_slow);
		printf("\n");
		if (st->budget)
			printf("DRAM budget:    %llu kB\n", (unsigned long long)st->budget / 1024);
		else
			printf("DRAM budget:    none\n");
		printf("DRAM:           %llu kB (peak %llu kB; jemalloc metadata %llu kB)\n",
		       dram / 1024, dram_peak / 1024, meta / 1024);
		printf("slow tier:      %llu kB (peak %llu kB) of %llu kB, %s", slow / 1024,
		       slow_peak / 1024, (unsigned long long)st->slow_capacity / 1024,
		       slow_kind(st->slow_kind));
		if (st->slow_kind == 2)
			printf(" %d", st->slow_node);
		printf("\n");
		printf("fallbacks:      %llu extents on the policy's second choice, %llu refused\n",
		       fb, fail);
		if (anon >= 0)
			printf("anonymous RSS:  %lld kB\n", anon / 1024);
	}
	munmap(st, sizeof *st);
	return 0;
}
