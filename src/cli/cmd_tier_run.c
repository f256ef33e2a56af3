/* SPDX-License-Identifier: MIT */
/*
 * `chell tier run`: start a program on the tiered heap.
 *
 * The cgroup arrangement (docs/TIERHEAP.md): a memory cgroup charges a
 * tmpfs page to the task that first allocates it. So this launcher, still
 * in its own cgroup, creates the slow-tier file and allocates every page of
 * it (fallocate), then joins the program's cgroup (--cgroup) and execs the
 * program, which inherits the file as a descriptor and maps it shared:
 * its faults find the pages already there and charge nothing. The program
 * really gains the file's capacity beyond its cgroup's limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <numa.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_tier.h"
#include "common/config.h"
#include "tierheap/policy.h"

extern char **environ;

static void usage(FILE *f)
{
	fputs("Usage: chell tier run [--policy P] [--dram SIZE|auto] [--slow DIR]\n"
	      "                      [--slow-size SIZE] [--node N] [--weights D:S]\n"
	      "                      [--cgroup DIR] [--] COMMAND [ARGS...]\n"
	      "\n"
	      "Run COMMAND with libchell-tier.so preloaded: every heap allocation is\n"
	      "jemalloc's, from DRAM or from the slow tier as the policy says.\n"
	      "\n"
	      "Options (each sets the tierheap.* setting of the same name):\n"
	      "  --policy P       revert (default): DRAM until the budget, then the slow tier;\n"
	      "                   preferred: the slow tier first; bind: the slow tier only;\n"
	      "                   interleave: both, weighted by --weights\n"
	      "  --dram SIZE      the DRAM budget (e.g. 512M); auto (default) = 3/4 of the\n"
	      "                   memory.max of the program's cgroup (none if unlimited)\n"
	      "  --weights D:S    interleave: D bytes in DRAM for S on the slow tier (3:1)\n"
	      "  --node N         take the slow tier from NUMA node N (libnuma); by default a\n"
	      "                   CPU-less node with memory is used when there is one\n"
	      "  --slow DIR       else a file in DIR (tmpfs or DAX; default /dev/shm), which\n"
	      "                   this launcher allocates before the program starts\n"
	      "  --slow-size SIZE the slow tier's capacity (default 1G); the file's pages are\n"
	      "                   allocated up front, so this much memory is taken\n"
	      "  --cgroup DIR     run COMMAND in the cgroup directory DIR (v1 memory controller\n"
	      "                   or v2), joined after the file is allocated, so its pages\n"
	      "                   are charged outside DIR\n"
	      "  -n, --dry-run    print the settings and the command, run nothing\n"
	      "  -h, --help       this help\n"
	      "\n"
	      "Exit status: COMMAND's; 2 for a usage or setting error, 1 if the slow tier\n"
	      "cannot be set up, 126/127 if COMMAND cannot be run.\n"
	      "Example: chell tier run --policy revert --dram 256M --cgroup /sys/fs/cgroup/job \\\n"
	      "           -- python3 big.py\n",
	      f);
}

enum { O_POLICY = 300, O_DRAM, O_SLOW, O_SLOW_SIZE, O_NODE, O_WEIGHTS, O_CGROUP };

/* A CPU-less NUMA node with memory (CXL, KMEM DAX), or -1. */
static int cpuless_node(void)
{
	if (numa_available() < 0)
		return -1;
	int found = -1;
	struct bitmask *cpus = numa_allocate_cpumask();
	for (int n = 0; cpus && n <= numa_max_node() && found < 0; n++) {
		long long fr;
		if (numa_node_size64(n, &fr) <= 0 || numa_node_to_cpus(n, cpus) != 0)
			continue;
		if (numa_bitmask_weight(cpus) == 0)
			found = n;
	}
	if (cpus)
		numa_free_cpumask(cpus);
	return found;
}

static int join_cgroup(const char *dir)
{
	char path[PATH_MAX], pid[32];
	snprintf(path, sizeof path, "%s/cgroup.procs", dir);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		cli_err("tier run: --cgroup %s: %s", dir, strerror(errno));
		return -1;
	}
	int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
	if (write(fd, pid, (size_t)n) != n) {
		cli_err("tier run: --cgroup %s: cannot join: %s", dir, strerror(errno));
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* The slow-tier file: created unlinked in dir, every page allocated now. */
static int make_slow_file(const char *dir, uint64_t size)
{
	int fd = open(dir, O_TMPFILE | O_RDWR, 0600);
	if (fd < 0) {
		cli_err("tier run: --slow %s (setting tierheap.slow): cannot create a file: %s", dir,
			strerror(errno));
		return -1;
	}
	if (fallocate(fd, 0, 0, (off_t)size) != 0) {
		cli_err("tier run: --slow-size %llu (setting tierheap.slow_size): cannot allocate "
			"the file in %s: %s",
			(unsigned long long)size, dir, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int cmd_tier_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"policy", required_argument, NULL, O_POLICY},
		{"dram", required_argument, NULL, O_DRAM},
		{"slow", required_argument, NULL, O_SLOW},
		{"slow-size", required_argument, NULL, O_SLOW_SIZE},
		{"node", required_argument, NULL, O_NODE},
		{"weights", required_argument, NULL, O_WEIGHTS},
		{"cgroup", required_argument, NULL, O_CGROUP},
		{"dry-run", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct cli_env env = {0};
	struct chell_config cfg = {0};
	const char *cgroup = NULL;
	const char *opt_val[O_CGROUP - O_POLICY] = {0};
	static const char *const opt_env[] = {"CHELL_TIERHEAP_POLICY", "CHELL_TIERHEAP_DRAM",
					      "CHELL_TIERHEAP_SLOW", "CHELL_TIERHEAP_SLOW_SIZE",
					      "CHELL_TIERHEAP_NODE", "CHELL_TIERHEAP_WEIGHTS"};
	int dry = 0, c, ret = CLI_EXIT_USAGE;
	char err[512];
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:hn", longopts, NULL)) != -1) {
		if (c >= O_POLICY && c < O_CGROUP) {
			opt_val[c - O_POLICY] = optarg;
		} else if (c == O_CGROUP) {
			cgroup = optarg;
		} else if (c == 'n') {
			dry = 1;
		} else if (c == 'h') {
			usage(stdout);
			return 0;
		} else {
			return cli_bad_option("tier run", c, argv, longopts);
		}
	}
	char **cmd = argv + optind;
	if (!*cmd) {
		cli_err("tier run: no command given");
		cli_usage_hint("tier");
		return CLI_EXIT_USAGE;
	}
	if (cli_env_init(&env, environ))
		goto oom;
	for (int i = 0; i < O_CGROUP - O_POLICY; i++)
		if (opt_val[i] && cli_env_set(&env, opt_env[i], opt_val[i]))
			goto oom;
	if (cli_env_set(&env, "CHELL_TIERHEAP_SLOW_FD", ""))
		goto oom;
	if (chell_config_load(&cfg, env.v, err, sizeof err)) {
		cli_err("tier run: %s", err);
		goto out;
	}
	/* The values the library will parse, checked here first. */
	unsigned wd, ws;
	const char *w = chell_config_str(&cfg, "tierheap.weights");
	if (th_weights_parse(w, &wd, &ws)) {
		cli_err("tier run: bad value '%s' for setting tierheap.weights (--weights): expected "
			"D:S, two integers 1..1000",
			w);
		goto out;
	}
	const char *dram = chell_config_str(&cfg, "tierheap.dram");
	uint64_t v;
	if (strcmp(dram, "auto") != 0 && chell_parse_size(dram, &v) != 0) {
		cli_err("tier run: bad value '%s' for setting tierheap.dram (--dram): expected a size "
			"(e.g. 512M) or auto",
			dram);
		goto out;
	}
	const char *node = chell_config_str(&cfg, "tierheap.node");
	char nodebuf[16];
	if (*node) {
		char *end;
		long n = strtol(node, &end, 10);
		if (*end || n < 0 || numa_available() < 0 || n > numa_max_node()) {
			cli_err("tier run: bad value '%s' for setting tierheap.node (--node): no such "
				"NUMA node",
				node);
			goto out;
		}
	} else if (!opt_val[O_SLOW - O_POLICY]) {
		int n = cpuless_node();
		if (n >= 0) {
			snprintf(nodebuf, sizeof nodebuf, "%d", n);
			if (cli_env_set(&env, "CHELL_TIERHEAP_NODE", nodebuf))
				goto oom;
			node = nodebuf;
		}
	}
	char lib[PATH_MAX];
	if (cli_find_named_lib("libchell-tier.so", "CHELL_TIER_LIB", lib, sizeof lib, err,
			       sizeof err)) {
		cli_err("tier run: %s", err);
		ret = 1;
		goto out;
	}
	const char *old = cli_env_get(&env, "LD_PRELOAD");
	char *preload = malloc(strlen(lib) + (old ? strlen(old) : 0) + 2);
	if (!preload)
		goto oom;
	sprintf(preload, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "");
	int r = cli_env_set(&env, "LD_PRELOAD", preload);
	free(preload);
	if (r)
		goto oom;

	if (dry) {
		for (size_t i = 0; i < env.n; i++)
			if (strncmp(env.v[i], "CHELL_TIERHEAP_", 15) == 0 ||
			    strncmp(env.v[i], "LD_PRELOAD=", 11) == 0)
				printf("%s\n", env.v[i]);
		if (!*node)
			printf("# slow tier: a %s file in %s, allocated before the program starts\n",
			       chell_config_str(&cfg, "tierheap.slow_size"),
			       chell_config_str(&cfg, "tierheap.slow"));
		for (char **a = cmd; *a; a++) {
			cli_shell_quote(stdout, *a);
			fputc(a[1] ? ' ' : '\n', stdout);
		}
		ret = 0;
		goto out;
	}
	if (!*node) {
		int fd = make_slow_file(chell_config_str(&cfg, "tierheap.slow"),
					chell_config_u64(&cfg, "tierheap.slow_size"));
		if (fd < 0) {
			ret = 1;
			goto out;
		}
		char fdv[16];
		snprintf(fdv, sizeof fdv, "%d", fd);
		if (cli_env_set(&env, "CHELL_TIERHEAP_SLOW_FD", fdv))
			goto oom;
	}
	if (cgroup && join_cgroup(cgroup)) {
		ret = 1;
		goto out;
	}
	ret = cli_exec(cmd, env.v);
	goto out;
oom:
	cli_err("out of memory");
out:
	chell_config_free(&cfg);
	cli_env_free(&env);
	return ret;
}
