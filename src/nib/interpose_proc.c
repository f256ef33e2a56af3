/* SPDX-License-Identifier: MIT */
/*
 * Processes: fork, vfork, clone, the exec family, posix_spawn, _exit.
 *
 * fork: every handled descriptor gains a holder (the child), so the shared
 * OFD reference counts go up before the kernel copies the table. exec: see
 * handoff.c. posix_spawn: glibc spawns through an internal clone+execve that
 * we cannot see, so we run it ourselves as fork + the recorded file actions
 * + exec, which keeps handled descriptors' state in the new program.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nib.h"

extern char **environ;

static void refs_adjust(int delta)
{
	int max = fdt_max();
	for (int fd = 0; fd <= max; fd++) {
		struct chell_file *f = fdt_peek(fd);
		if (f && f != FILE_CLOSING)
			atomic_fetch_add((_Atomic uint32_t *)&f->ofd->refs, (uint32_t)delta);
	}
}

/*
 * The order of a fork, as pthread_atfork nests its handlers: the handlers'
 * FORK_PREPARE first (they may still open or close files), then Chell's
 * own locks; in the parent and the child Chell repairs its state first and
 * the handlers run last, then the background threads restart in the child.
 */
static void before_fork(void)
{
	chell_threads_fork_quiesce(); /* sanitizer builds only (threads.c) */
	hub_proc_event(CHELL_EV_FORK_PREPARE, 0);
	chell_threads_fork_prepare();
	fdt_lock();
	chell_nofile_hold(); /* the child gets the application's RLIMIT_NOFILE */
	refs_adjust(+1);
}

static void after_fork_parent(bool failed)
{
	if (failed)
		refs_adjust(-1);
	chell_nofile_release();
	fdt_unlock();
	chell_threads_fork_parent();
	hub_proc_event(CHELL_EV_FORK_PARENT, 0);
	chell_threads_fork_unquiesce();
}

static void after_fork_child(pid_t parent)
{
	chell_signals_after_fork_child();
	chell_hazard_after_fork_child();
	fdt_lock_reinit_child();
	chell_nofile_reinit_child();
	fdt_unlock();
	fdt_after_fork_child();
	chell_threads_fork_child(); /* after the internal-fd lock is fresh */
	hub_proc_event(CHELL_EV_FORK_CHILD, parent);
	chell_threads_resume();
}

/*
 * fork() takes the descriptor table lock (so no thread changes it while the
 * kernel copies it) and adds the child's references to every shared OFD -
 * in pthread_atfork handlers, not around the call: glibc runs the
 * application's own prepare handlers before ours and its parent/child
 * handlers after ours, so a handler of the application that opens or closes
 * a handled file never waits for a lock this thread already holds.
 */
static __thread int tls_fork_locked;
static __thread pid_t tls_fork_parent;

static void atfork_prepare(void)
{
	if (!chell_active)
		return;
	tls_fork_parent = sys_getpid();
	before_fork();
	tls_fork_locked = 1;
}

/* The references of a failed fork are taken back in fork() itself, where
 * the result is known. */
static void atfork_parent(void)
{
	if (tls_fork_locked) {
		tls_fork_locked = 0;
		after_fork_parent(false);
	}
}

static void atfork_child(void)
{
	if (tls_fork_locked) {
		tls_fork_locked = 0;
		after_fork_child(tls_fork_parent);
	}
}

void chell_fork_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

CHELL_EXPORT pid_t fork(void)
{
	pid_t pid = REAL(fork)();
	if (pid < 0 && chell_active) {
		/* no child: take back the references the prepare handler added */
		int e = errno;
		fdt_lock();
		refs_adjust(-1);
		fdt_unlock();
		errno = e;
	}
	return pid;
}

/* vfork's child may only exec or _exit, and Chell's exec wrapper allocates;
 * a plain fork is a valid vfork and keeps the parent's memory safe. */
CHELL_EXPORT pid_t vfork(void)
{
	return fork();
}

/* clone without CLONE_VM makes a new process: treat it like fork. */
struct clone_tramp {
	int (*fn)(void *);
	void *arg;
	pid_t parent;
};

static int clone_child(void *p)
{
	struct clone_tramp t = *(struct clone_tramp *)p;
	after_fork_child(t.parent);
	return t.fn(t.arg);
}

/*
 * clone(CLONE_VM | CLONE_VFORK) without CLONE_FILES (posix_spawn-style): the
 * child shares our memory, and our thread's TLS while we are suspended, but
 * has a copy of our kernel table. It gets a copy of our Chell table in the
 * same way, so its close/dup/open never touch ours; we take our table back
 * when it has exec'd or exited.
 */
struct vm_tramp {
	int (*fn)(void *);
	void *arg;
	struct fdt *table;
};

static int vm_child(void *p)
{
	struct vm_tramp *v = p; /* on the parent's stack: it waits for us */
	chell_tls_fdt = v->table;
	int r = v->fn(v->arg);
	hub_process_exit(); /* returning ends the child: its table goes (vm_child) */
	return r;
}

typedef int (*clone_fn)(int (*)(void *), void *, int, void *, ...);

static int vm_clone(clone_fn real_clone, int (*fn)(void *), void *stack, int flags, void *arg,
		    pid_t *ptid, void *tls, pid_t *ctid)
{
	struct vm_tramp v = {fn, arg, fdt_vm_child_table()};
	if (!v.table) /* no memory for the copy: the shared table, as before */
		return real_clone(fn, stack, flags, arg, ptid, tls, ctid);
	struct fdt *mine = chell_tls_fdt;
	int r = real_clone(vm_child, stack, flags, &v, ptid, tls, ctid);
	int e = errno;
	chell_tls_fdt = mine; /* the child ran on our TLS */
	fdt_vm_child_done(v.table, r >= 0);
	errno = e;
	return r;
}

CHELL_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	pid_t *ptid = va_arg(ap, pid_t *);
	void *tls = va_arg(ap, void *);
	pid_t *ctid = va_arg(ap, pid_t *);
	va_end(ap);
	static int (*real_clone)(int (*)(void *), void *, int, void *, ...);
	if (!real_clone)
		*(void **)&real_clone = dlsym(RTLD_NEXT, "clone");
	if (chell_active && (flags & (CLONE_VM | CLONE_FILES | CLONE_VFORK | CLONE_SETTLS)) ==
				    (CLONE_VM | CLONE_VFORK))
		return vm_clone(real_clone, fn, stack, flags, arg, ptid, tls, ctid);
	if (!chell_active || (flags & CLONE_VM))
		return real_clone(fn, stack, flags, arg, ptid, tls, ctid);
	struct clone_tramp t = {fn, arg, sys_getpid()};
	before_fork();
	int r = real_clone(clone_child, stack, flags, &t, ptid, tls, ctid);
	int e = errno;
	after_fork_parent(r < 0);
	errno = e;
	return r;
}

/* ------------------------------------------------- threads and fd tables */

/* unshare(CLONE_FILES): the calling thread leaves the table it shared
 * (fdtable.c). Other namespaces and attributes are the kernel's alone. */
CHELL_EXPORT int unshare(int flags)
{
	if (!(flags & CLONE_FILES))
		return (int)hub_ret(CHELL_SC(SYS_unshare, flags, 0, 0, 0, 0, 0));
	return (int)hub_ret(fdt_unshare_call(flags));
}

/* A thread created by a thread with a private table shares that table, as
 * the kernel's clone(CLONE_FILES) shares the creator's files struct. */
struct thread_start {
	void *(*fn)(void *);
	void *arg;
	struct fdt *table;
};

static void *thread_start(void *p)
{
	struct thread_start s = *(struct thread_start *)p;
	free(p);
	fdt_private_join(s.table);
	return s.fn(s.arg);
}

CHELL_EXPORT int pthread_create(pthread_t *thr, const pthread_attr_t *attr, void *(*fn)(void *),
				void *arg)
{
	static int (*real_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	if (!real_create)
		*(void **)&real_create = dlsym(RTLD_NEXT, "pthread_create");
	if (likely(chell_tls_fdt == &chell_fdt_proc))
		return real_create(thr, attr, fn, arg);
	struct thread_start *s = malloc(sizeof(*s));
	if (!s)
		return EAGAIN;
	s->fn = fn;
	s->arg = arg;
	s->table = fdt_private_hold();
	int r = real_create(thr, attr, thread_start, s);
	if (r != 0) {
		fdt_private_put(s->table);
		free(s);
	}
	return r;
}

/* ------------------------------------------------------------------- exec */

/* Chell reads the path (for the handlers' exec event) and the environment
 * (to build the new one) before the kernel would. If either would fault (or
 * the path is longer than the kernel takes), the call goes to the kernel as
 * it is, which fails it with EFAULT (ENAMETOOLONG) and execs nothing.
 * (Inactive, Chell reads neither, and the probes' guard is not installed.) */
static bool exec_args_ok(const char *path, char *const envp[])
{
	if (chell_user_strnlen(path, PATH_MAX) < 0)
		return false;
	for (size_t i = 0; envp; i++) {
		if (chell_user_check(&envp[i], sizeof(envp[i]), false) < 0)
			return false;
		if (!envp[i])
			break;
		if (chell_user_strnlen(envp[i], SIZE_MAX) < 0)
			return false;
	}
	return true;
}

/* Whether this exec replaces the process's own image, so that it stops the
 * background threads (restarted if it fails) and holds the RLIMIT_NOFILE
 * lock (no window of another thread open while the kernel replaces the
 * process, so the new image gets the application's limit). Not in a
 * clone(CLONE_VM|CLONE_VFORK) child: the threads are its parent's, and it
 * runs on its parent's memory and thread identity, so a successful exec
 * would leave the parent's lock taken for good (every other thread of the
 * parent then hangs on its next descriptor of Chell's own); and no window
 * of the parent's threads changes the child's limit (prlimit on the parent
 * process), nor can the child, single-threaded, have one open itself. */
static bool exec_is_process_own(void)
{
	return !chell_fdt_cap || !fdt_cur()->vm_child;
}

/* Run `call` (which uses `env`) with the descriptor handoff in place, and
 * undo the bookkeeping if the exec fails. */
#define EXEC_WITH_HANDOFF(what, target, envp, call)                        \
	do {                                                               \
		if (chell_active && !exec_args_ok(what, envp)) {           \
			char **env = (char **)(envp);                      \
			return (call);                                     \
		}                                                          \
		const struct exec_target t_ = target;                      \
		char **env = handoff_prepare_exec(envp, &t_);              \
		bool own_ = exec_is_process_own();                         \
		if (own_)                                                  \
			chell_threads_halt_all();                          \
		hub_proc_event(CHELL_OP_EXEC, (long)(what));               \
		if (own_)                                                  \
			chell_nofile_hold(); /* the application's limit */ \
		int r_ = (call);                                           \
		int e_ = errno;                                            \
		if (own_) {                                                \
			chell_nofile_release();                            \
			chell_threads_resume();                            \
		}                                                          \
		handoff_exec_failed(env);                                  \
		errno = e_;                                                \
		return r_;                                                 \
	} while (0)

CHELL_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	EXEC_WITH_HANDOFF(path, ((struct exec_target){AT_FDCWD, path, 0, false}), envp, REAL(execve)(path, argv, env));
}

CHELL_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	EXEC_WITH_HANDOFF(file, ((struct exec_target){AT_FDCWD, file, 0, true}), envp, REAL(execvpe)(file, argv, env));
}

CHELL_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	EXEC_WITH_HANDOFF("(fexecve)", ((struct exec_target){fd, NULL, 0, false}), envp, REAL(fexecve)(fd, argv, env));
}

CHELL_EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
			  int flags)
{
	EXEC_WITH_HANDOFF(path, ((struct exec_target){dirfd, path, flags, false}), envp, (int)syscall(SYS_execveat, dirfd, path, argv, env, flags));
}

CHELL_EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

CHELL_EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

/* execl*: collect the variadic list (and, for execle, the envp after NULL). */
static char **collect_args(const char *arg0, va_list ap, char ***envp_out)
{
	va_list cp;
	va_copy(cp, ap);
	size_t n = 1;
	while (va_arg(cp, char *))
		n++;
	va_end(cp);
	char **argv = malloc((n + 1) * sizeof(char *));
	if (!argv)
		return NULL;
	argv[0] = (char *)arg0;
	for (size_t i = 1; i <= n; i++)
		argv[i] = va_arg(ap, char *); /* the last one read is the NULL */
	if (envp_out)
		*envp_out = va_arg(ap, char **);
	return argv;
}

enum exec_list_kind { EXEC_L, EXEC_LP, EXEC_LE };

/* execl, execlp, execle: the list becomes an argv for our execve/execvpe. */
static int exec_list(enum exec_list_kind kind, const char *path, const char *arg, va_list ap)
{
	char **envp = environ;
	char **argv = collect_args(arg, ap, kind == EXEC_LE ? &envp : NULL);
	if (!argv)
		return errno = ENOMEM, -1;
	int r = kind == EXEC_LP ? execvpe(path, argv, environ) : execve(path, argv, envp);
	int e = errno;
	free(argv);
	errno = e;
	return r;
}

CHELL_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(EXEC_L, path, arg, ap);
	va_end(ap);
	return r;
}

CHELL_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(EXEC_LP, file, arg, ap);
	va_end(ap);
	return r;
}

CHELL_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	va_start(ap, arg);
	int r = exec_list(EXEC_LE, path, arg, ap);
	va_end(ap);
	return r;
}

/* ------------------------------------------------------------------- exit */

CHELL_EXPORT void _exit(int status)
{
	if (chell_active) {
		/* a vfork-like child shares the process's memory: the process
		 * (its connections, its statistics) goes on */
		if (!chell_fdt_cap || !fdt_cur()->vm_child) {
			chell_threads_halt_all();
			hub_proc_event(CHELL_OP_EXIT, status);
		}
		hub_process_exit();
	}
	REAL(_exit)(status);
	__builtin_unreachable();
}

CHELL_EXPORT void _Exit(int status)
{
	if (chell_active) {
		/* a vfork-like child shares the process's memory: the process
		 * (its connections, its statistics) goes on */
		if (!chell_fdt_cap || !fdt_cur()->vm_child) {
			chell_threads_halt_all();
			hub_proc_event(CHELL_OP_EXIT, status);
		}
		hub_process_exit();
	}
	REAL(_Exit)(status);
	__builtin_unreachable();
}
