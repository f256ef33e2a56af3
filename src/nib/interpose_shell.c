/* SPDX-License-Identifier: MIT */
/*
 * system(), popen() and pclose().
 *
 * glibc runs the shell for these through its internal spawn, which bypasses
 * Chell's exec wrapper: the shell would inherit handled descriptors without
 * their handoff (and, in modes that keep state in user space, see stale
 * offsets). While Chell is active we run them through posix_spawn (our own,
 * see interpose_spawn.c), with glibc's semantics: system() ignores SIGINT and
 * SIGQUIT and blocks SIGCHLD while it waits; popen() streams are closed in
 * children started by later popen() calls, as POSIX requires.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nib.h"

extern char **environ;

/* glibc's own definition of fn (the one after libchell.so) */
#define NEXT_OF(fn) ({ static __typeof__(&fn) next_; if (!next_) *(void **)&next_ = dlsym(RTLD_NEXT, #fn); next_; })

CHELL_EXPORT int system(const char *cmd)
{
	if (!chell_active)
		return NEXT_OF(system)(cmd);
	if (!cmd)
		return access("/bin/sh", X_OK) == 0;

	struct sigaction ign, old_int, old_quit;
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigset_t chld, old_mask;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	REAL(sigaction)(SIGINT, &ign, &old_int);
	REAL(sigaction)(SIGQUIT, &ign, &old_quit);
	sigprocmask(SIG_BLOCK, &chld, &old_mask);

	posix_spawnattr_t attr;
	posix_spawnattr_init(&attr);
	sigset_t def;
	sigemptyset(&def);
	if (old_int.sa_handler != SIG_IGN)
		sigaddset(&def, SIGINT);
	if (old_quit.sa_handler != SIG_IGN)
		sigaddset(&def, SIGQUIT);
	posix_spawnattr_setsigdefault(&attr, &def);
	posix_spawnattr_setsigmask(&attr, &old_mask);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

	char *argv[] = {"sh", "-c", (char *)cmd, NULL};
	pid_t pid;
	int status;
	int err = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	if (err == 0) {
		while (waitpid(pid, &status, 0) < 0) {
			if (errno != EINTR) {
				status = -1;
				break;
			}
		}
	} else {
		status = 127 << 8; /* the shell could not be run */
	}
	int saved = errno;
	REAL(sigaction)(SIGINT, &old_int, NULL);
	REAL(sigaction)(SIGQUIT, &old_quit, NULL);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	errno = saved;
	return status;
}

struct popen_entry {
	FILE *fp;
	int fd;
	pid_t pid;
	struct popen_entry *next;
};
static struct popen_entry *popen_list;
static pthread_mutex_t popen_lock = PTHREAD_MUTEX_INITIALIZER;

CHELL_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	if (!chell_active)
		return NEXT_OF(popen)(cmd, mode);
	bool reading = mode[0] == 'r', cloexec = strchr(mode, 'e') != NULL;
	if ((mode[0] != 'r' && mode[0] != 'w') || (mode[1] && mode[1] != 'e')) {
		errno = EINVAL;
		return NULL;
	}
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return NULL;
	int mine = reading ? p[0] : p[1], theirs = reading ? p[1] : p[0];
	int target = reading ? 1 : 0;

	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	pthread_mutex_lock(&popen_lock);
	for (struct popen_entry *e = popen_list; e; e = e->next)
		posix_spawn_file_actions_addclose(&fa, e->fd);
	posix_spawn_file_actions_adddup2(&fa, theirs, target);
	char *argv[] = {"sh", "-c", (char *)cmd, NULL};
	pid_t pid;
	int err = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(theirs);
	FILE *fp = NULL;
	struct popen_entry *e = NULL;
	if (err == 0 && (e = malloc(sizeof(*e))) && (fp = REAL(fdopen)(mine, reading ? "r" : "w"))) {
		if (!cloexec)
			sys_fcntl(mine, F_SETFD, 0);
		e->fp = fp;
		e->fd = mine;
		e->pid = pid;
		e->next = popen_list;
		popen_list = e;
	} else {
		free(e);
		close(mine);
		if (err == 0)
			waitpid(pid, NULL, 0);
		else
			errno = err;
	}
	pthread_mutex_unlock(&popen_lock);
	return fp;
}

CHELL_EXPORT int pclose(FILE *fp)
{
	pthread_mutex_lock(&popen_lock);
	struct popen_entry *e = NULL;
	for (struct popen_entry **pp = &popen_list; *pp; pp = &(*pp)->next)
		if ((*pp)->fp == fp) {
			e = *pp;
			*pp = e->next;
			break;
		}
	pthread_mutex_unlock(&popen_lock);
	if (!e)
		return NEXT_OF(pclose)(fp);
	fclose(fp);
	int status;
	pid_t r;
	do
		r = waitpid(e->pid, &status, 0);
	while (r < 0 && errno == EINTR);
	free(e);
	return r < 0 ? -1 : status;
}
