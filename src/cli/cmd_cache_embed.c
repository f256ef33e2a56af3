/* SPDX-License-Identifier: MIT */
/*
 * The manager for `chell run --mode cache`: use the chelld that serves
 * cache.pool, or start one from the cache.* settings (an "embedded"
 * manager: an ordinary daemon, started for the user) and wait until it
 * answers.
 *
 * The started daemon outlives the command: other commands share it, and
 * what it caches stays warm. `--stop-cache` stops it after the command
 * (only a daemon this run started).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"
#include "cmd_cache_embed.h"
#include "cmd_cache_launch.h"
#include "common/config.h"

/* How long to wait for a daemon that another command is starting. */
#define ANSWER_WAIT_S 10.0

static bool answers(const char *pool)
{
	char sock[PATH_MAX];
	mgr_sock_path(pool, NULL, sock, sizeof sock);
	struct mgr_conn cn;
	if (mgr_connect(&cn, sock) < 0)
		return false;
	mgr_disconnect(&cn);
	return true;
}

/* Run chelld (it daemonises: its first process exits once the daemon
 * serves) and return that exit status, or -1. Its errors go to stderr; its
 * "serving" line is dropped (we print our own, with how to stop it), so
 * the command's stdout stays the command's. */
static int run_chelld(char **argv)
{
	char daemon[PATH_MAX];
	mgr_find_chelld(daemon, sizeof daemon);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, STDOUT_FILENO);
		execvp(daemon, argv);
		cli_err("cannot run chelld (not next to chell nor on PATH): %s", strerror(errno));
		_exit(CLI_EXIT_NOTFOUND);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int mgr_ensure_running(const struct chell_config *cfg, bool *started, bool *found, char *pool,
		       size_t len)
{
	*started = false;
	*found = false;
	int f = mgr_find_pool(chell_config_str(cfg, "cache.pool"), cli_setting_given(cfg, "cache.pool"),
			      pool, len);
	if (f < 0)
		return CLI_EXIT_USAGE;
	*found = f == MGR_POOL_FOUND;
	if (answers(pool))
		return 0;
	if (*found) {
		cli_err("the cache manager of pool %s does not answer (see %s/%s)", pool, pool,
			CHELLD_LOG_NAME);
		return 1;
	}
	struct mgr_launch o = {0};
	struct mgr_argv a;
	int r = mgr_launch_argv(&o, cfg, &a);
	if (r)
		return r < 0 ? 1 : CLI_EXIT_USAGE;
	int ret = 0;
	if (cli_mkdirs(pool) < 0) {
		cli_err("cannot create the cache pool directory %s: %s", pool, strerror(errno));
		ret = CLI_EXIT_USAGE;
		goto out;
	}
	int st = run_chelld(a.v);
	if (st == 0) {
		*started = true;
	} else if (st != 1) {
		/* chelld said why (bad size, missing backing directory...). */
		ret = st == CLI_EXIT_USAGE ? CLI_EXIT_USAGE : 1;
		goto out;
	}
	/* Exit 1: most likely another command started it first; it must
	 * answer soon either way. */
	struct timespec tick = {0, 20 * 1000000L};
	double t0 = now_monotonic();
	while (!answers(pool)) {
		if (now_monotonic() - t0 > ANSWER_WAIT_S) {
			cli_err("chelld for pool %s does not answer (see %s/%s)", pool, pool,
				CHELLD_LOG_NAME);
			ret = 1;
			goto out;
		}
		nanosleep(&tick, NULL);
	}
out:
	mgr_argv_free(&a);
	return ret;
}

int mgr_stop_quiet(const char *pool)
{
	char *argv[] = {"stop", "--pool", (char *)pool, "--quiet", NULL};
	return cache_stop(4, argv);
}

int mgr_run_and_stop(char **cmd, char **envp, const char *pool)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		cli_err("cannot fork: %s", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		execvpe(cmd[0], cmd, envp);
		int e = errno;
		if (e == ENOENT && !strchr(cmd[0], '/'))
			cli_err("%s: command not found", cmd[0]);
		else
			cli_err("cannot run %s: %s", cmd[0], strerror(e));
		_exit(e == ENOENT || e == ENOTDIR ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC);
	}
	/* The command owns the terminal's signals; we only wait for it. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			st = 1 << 8;
			break;
		}
	if (mgr_stop_quiet(pool) != 0)
		cli_err("could not stop chelld for pool %s", pool);
	if (WIFSIGNALED(st)) {
		/* Die the same way, so the caller sees what the command saw. */
		signal(WTERMSIG(st), SIG_DFL);
		raise(WTERMSIG(st));
		return 128 + WTERMSIG(st);
	}
	return WEXITSTATUS(st);
}
