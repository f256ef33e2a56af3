/* SPDX-License-Identifier: MIT */
/*
 * posix_spawn and posix_spawnp.
 *
 * glibc spawns with an internal clone + execve that Chell cannot see, so a
 * spawned program would inherit handled descriptors without their handoff.
 * We therefore record the file actions as the application adds them (the
 * object is opaque) and, when Chell is active, spawn with fork + the actions
 * + our exec. An actions object we did not see being built (none should
 * exist) is handed to glibc unchanged.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel_view.h"

extern char **environ;

enum act_kind { ACT_CLOSE, ACT_DUP2, ACT_OPEN, ACT_CHDIR, ACT_FCHDIR, ACT_CLOSEFROM };
struct act {
	enum act_kind kind;
	int fd, newfd, oflag;
	mode_t mode;
	char *path;
	struct act *next;
};
struct actions {
	const posix_spawn_file_actions_t *key;
	struct act *head, **tail;
	bool unknown; /* an action we cannot replay */
	struct actions *next;
};

static struct actions *all_actions;
static pthread_mutex_t actions_lock = PTHREAD_MUTEX_INITIALIZER;

static struct actions *find_actions(const posix_spawn_file_actions_t *fa, bool create)
{
	struct actions *a;
	for (a = all_actions; a; a = a->next)
		if (a->key == fa)
			return a;
	if (!create || !(a = calloc(1, sizeof(*a))))
		return NULL;
	a->key = fa;
	a->tail = &a->head;
	a->next = all_actions;
	all_actions = a;
	return a;
}

static void free_actions(const posix_spawn_file_actions_t *fa)
{
	for (struct actions **pp = &all_actions; *pp; pp = &(*pp)->next) {
		if ((*pp)->key != fa)
			continue;
		struct actions *a = *pp;
		*pp = a->next;
		for (struct act *x = a->head, *n; x; x = n) {
			n = x->next;
			free(x->path);
			free(x);
		}
		free(a);
		return;
	}
}

static void record(const posix_spawn_file_actions_t *fa, struct act tmpl)
{
	pthread_mutex_lock(&actions_lock);
	struct actions *a = find_actions(fa, true);
	struct act *x = a ? malloc(sizeof(*x)) : NULL;
	if (x) {
		*x = tmpl;
		x->next = NULL;
		*a->tail = x;
		a->tail = &x->next;
	} else if (a) {
		a->unknown = true;
	}
	pthread_mutex_unlock(&actions_lock);
}

#define NEXT(name, ...) ({                                                   \
	static int (*next_)(__VA_ARGS__);                                    \
	if (!next_)                                                          \
		*(void **)&next_ = dlsym(RTLD_NEXT, #name);                  \
	next_; })

#include <dlfcn.h>

CHELL_EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
	int r = NEXT(posix_spawn_file_actions_init, posix_spawn_file_actions_t *)(fa);
	if (r == 0) {
		pthread_mutex_lock(&actions_lock);
		free_actions(fa); /* a stale record at a reused address */
		find_actions(fa, true);
		pthread_mutex_unlock(&actions_lock);
	}
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
	pthread_mutex_lock(&actions_lock);
	free_actions(fa);
	pthread_mutex_unlock(&actions_lock);
	return NEXT(posix_spawn_file_actions_destroy, posix_spawn_file_actions_t *)(fa);
}

CHELL_EXPORT int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd)
{
	int r = NEXT(posix_spawn_file_actions_addclose, posix_spawn_file_actions_t *, int)(fa, fd);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_CLOSE, .fd = fd});
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
	int r = NEXT(posix_spawn_file_actions_adddup2, posix_spawn_file_actions_t *, int, int)(
		fa, fd, newfd);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_DUP2, .fd = fd, .newfd = newfd});
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int fd,
						  const char *path, int oflag, mode_t mode)
{
	int r = NEXT(posix_spawn_file_actions_addopen, posix_spawn_file_actions_t *, int,
		     const char *, int, mode_t)(fa, fd, path, oflag, mode);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_OPEN, .fd = fd, .oflag = oflag, .mode = mode,
					.path = strdup(path)});
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *fa,
						      const char *path)
{
	int r = NEXT(posix_spawn_file_actions_addchdir_np, posix_spawn_file_actions_t *,
		     const char *)(fa, path);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_CHDIR, .path = strdup(path)});
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_addfchdir_np(posix_spawn_file_actions_t *fa, int fd)
{
	int r = NEXT(posix_spawn_file_actions_addfchdir_np, posix_spawn_file_actions_t *, int)(fa,
											     fd);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_FCHDIR, .fd = fd});
	return r;
}

CHELL_EXPORT int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from)
{
	int r = NEXT(posix_spawn_file_actions_addclosefrom_np, posix_spawn_file_actions_t *,
		     int)(fa, from);
	if (r == 0)
		record(fa, (struct act){.kind = ACT_CLOSEFROM, .fd = from});
	return r;
}

/* In the child: apply attributes and actions as glibc does; 0 or errno. */
static int child_setup(const struct actions *acts, const posix_spawnattr_t *attr,
		       const sigset_t *parent_mask, sigset_t *final_mask)
{
	short flags = 0;
	*final_mask = *parent_mask;
	if (attr) {
		posix_spawnattr_getflags(attr, &flags);
		if (flags & POSIX_SPAWN_SETSID && setsid() < 0)
			return errno;
		if (flags & POSIX_SPAWN_SETPGROUP) {
			pid_t pg;
			posix_spawnattr_getpgroup(attr, &pg);
			if (setpgid(0, pg) < 0)
				return errno;
		}
		if (flags & (POSIX_SPAWN_SETSCHEDULER | POSIX_SPAWN_SETSCHEDPARAM)) {
			struct sched_param sp;
			int pol;
			posix_spawnattr_getschedparam(attr, &sp);
			posix_spawnattr_getschedpolicy(attr, &pol);
			if ((flags & POSIX_SPAWN_SETSCHEDULER) ? sched_setscheduler(0, pol, &sp) < 0
							       : sched_setparam(0, &sp) < 0)
				return errno;
		}
		if (flags & POSIX_SPAWN_RESETIDS) {
			if (seteuid(getuid()) < 0 || setegid(getgid()) < 0)
				return errno;
		}
		if (flags & POSIX_SPAWN_SETSIGMASK)
			posix_spawnattr_getsigmask(attr, final_mask);
	}
	/* Handlers of the parent must not run here; exec resets them anyway. */
	sigset_t sigdef;
	sigemptyset(&sigdef);
	if (attr && (flags & POSIX_SPAWN_SETSIGDEF))
		posix_spawnattr_getsigdefault(attr, &sigdef);
	for (int s = 1; s < NSIG; s++) {
		struct sigaction sa;
		if (s == SIGKILL || s == SIGSTOP || REAL(sigaction)(s, NULL, &sa) < 0)
			continue;
		if (sigismember(&sigdef, s) || (sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL)) {
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = SIG_DFL;
			REAL(sigaction)(s, &sa, NULL);
		}
	}
	for (const struct act *x = acts ? acts->head : NULL; x; x = x->next) {
		int r = 0;
		switch (x->kind) {
		case ACT_CLOSE:
			close(x->fd); /* glibc ignores errors of close actions */
			break;
		case ACT_DUP2:
			if (x->fd == x->newfd) /* POSIX: clear close-on-exec */
				r = fcntl(x->fd, F_SETFD, 0);
			else
				r = dup2(x->fd, x->newfd);
			break;
		case ACT_OPEN: {
			int fd = open(x->path, x->oflag, x->mode);
			if (fd < 0)
				return errno;
			if (fd != x->fd) {
				r = dup2(fd, x->fd);
				close(fd);
			}
			break;
		}
		case ACT_CHDIR:
			r = chdir(x->path);
			break;
		case ACT_FCHDIR:
			r = fchdir(x->fd);
			break;
		case ACT_CLOSEFROM:
			closefrom(x->fd);
			break;
		}
		if (r < 0)
			return errno;
	}
	return 0;
}

static int do_spawn(pid_t *pidp, const char *path, const posix_spawn_file_actions_t *fa,
		    const posix_spawnattr_t *attr, char *const argv[], char *const envp[],
		    bool search)
{
	const struct actions *acts = NULL;
	if (fa) {
		pthread_mutex_lock(&actions_lock);
		acts = find_actions(fa, false);
		pthread_mutex_unlock(&actions_lock);
	}
	if (chell_active && fa && (!acts || acts->unknown))
		/* glibc's child may get any handled descriptor (its actions may dup
		 * a close-on-exec one) without a handoff: the kernel's offsets of
		 * all of them must be the only ones from now on. */
		chell_escape_all(CHELL_OP_EXEC);
	if (!chell_active || (fa && (!acts || acts->unknown)))
		return search ? REAL(posix_spawnp)(pidp, path, fa, attr, argv, envp)
			      : REAL(posix_spawn)(pidp, path, fa, attr, argv, envp);

	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return errno;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t final;
		int err = child_setup(acts, attr, &old, &final);
		if (err == 0) {
			pthread_sigmask(SIG_SETMASK, &final, NULL);
			if (search)
				execvpe(path, argv, envp ? envp : environ);
			else
				execve(path, argv, envp ? envp : environ);
			err = errno;
		}
		sys_write(pipefd[1], &err, sizeof(err));
		_exit(127);
	}
	int saved = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(pipefd[1]);
	if (pid < 0) {
		close(pipefd[0]);
		return saved;
	}
	int err = 0;
	ssize_t n;
	do
		n = sys_read(pipefd[0], &err, sizeof(err));
	while (n == -EINTR);
	close(pipefd[0]);
	if (n == (ssize_t)sizeof(err) && err != 0) {
		/* like glibc: a child that failed before exec is reaped here */
		waitpid(pid, NULL, 0);
		return err;
	}
	if (pidp)
		*pidp = pid;
	return 0;
}

CHELL_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			     const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return do_spawn(pid, path, fa, attr, argv, envp, false);
}

CHELL_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			      const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	return do_spawn(pid, file, fa, attr, argv, envp, true);
}
