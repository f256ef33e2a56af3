/* SPDX-License-Identifier: MIT */
/*
 * nib.h - internals of the Nib layer shared by the files of src/nib/.
 *
 *   interpose_*.c   the exported libc names; each looks the descriptor up in
 *                   the fd table and either calls REAL(name) (unclaimed) or
 *                   the hub.
 *   hub.c           open, close, dup, process events: descriptor lifetime.
 *   dispatch.c      hub_call_OP / chell_down_OP: down the handler stack.
 *   router.c        which stack (if any) serves a path.
 *   fdtable.c       per-process map  fd -> struct chell_file; internal fds.
 *   hazard.c        the data path's protection against a concurrent close.
 *   closing.c       the table entry of a descriptor being closed.
 *   ofd_table.c     the shared OFD table: every struct chell_ofd of the tree,
 *                   in one memfd region (plus handlers' named shared areas).
 *   handoff.c       carrying descriptors across exec.
 *   kernel_view.c   the kernel's offset brought up to date, escapes.
 *   signals.c       deferral of application signal handlers, locks, the
 *                   fault-hook chain, probes of application pointers.
 *   threads.c       Chell's background threads across fork, exec, exit.
 *   real.c, log.c   glibc's own functions (REAL), diagnostics.
 * What handlers may use is in chell/handler.h, not here.
 */
#ifndef CHELL_NIB_H
#define CHELL_NIB_H

#include <chell/handler.h>
#include <chell/sys.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "real.h"

#define CHELL_EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ---- log.c (chell_info, chell_debug: chell/handler.h) ---- */
__attribute__((noreturn, format(printf, 1, 2))) void chell_fatal(const char *fmt, ...);

/* ---- signals.c ---- */
extern __thread int chell_tls_crit;
extern __thread int chell_tls_pending;
void chell_signals_flush_pending(void);
void chell_signals_after_fork_child(void);
/* chell_user_check, chell_user_strnlen, chell_tid: chell/handler.h */
void chell_uaccess_init(void); /* at start-up: the guard needs the trampoline */
void chell_tid_reset(void);

/* ---- threads.c: Chell's background threads across fork, exec, exit ---- */
void chell_threads_halt_all(void);      /* before exec, at exit */
void chell_threads_resume(void);        /* failed exec; fork child, after its events */
void chell_threads_fork_quiesce(void);   /* sanitizer builds: stop them around fork */
void chell_threads_fork_unquiesce(void);
void chell_threads_fork_prepare(void);
void chell_threads_fork_parent(void);
void chell_threads_fork_child(void);    /* first thing in the child */

/* ---- ofd_table.c ---- */
int ofd_table_ensure(void);              /* create the table if this tree has none */
int ofd_table_attach(int memfd);         /* adopt an inherited one (after exec) */
int ofd_table_fd(void);                  /* -1 if none */
struct chell_ofd *ofd_table_slot(uint32_t slot);
uint32_t ofd_table_slot_count(void);
int ofd_table_alloc_slot(uint32_t *slot); /* in_use=1, refs=1, priv zeroed */
void ofd_table_free_slot(uint32_t slot);
void ofd_table_set_cloexec(int cloexec);  /* the memfd survives exec only via our wrapper */

/* ---- fdtable.c ---- */
/*
 * One descriptor table mirrors one kernel "files struct": the table the
 * threads of a process share, or the private copy of a thread that left it
 * (close_range(CLOSE_RANGE_UNSHARE), unshare(CLONE_FILES)) and of the
 * threads that thread creates. Each entry of each table holds one
 * reference on its chell_file and one on the shared OFD, as each kernel
 * table holds its own reference on the open file description.
 */
struct fdt {
	struct chell_file *_Atomic *e; /* chell_fdt_cap entries */
	_Atomic int max;          /* highest fd ever registered in this table */
	uint32_t users;           /* threads using a private table (under fdt_lock) */
	uint32_t vm_child;        /* the table of a clone(CLONE_VM|CLONE_VFORK) child */
	struct fdt *next;         /* every table of the process (under fdt_lock) */
};
extern struct fdt chell_fdt_proc;          /* the table of threads that never unshared */
/* The calling thread's table: &chell_fdt_proc (the TLS initial value, so
 * every new thread starts there) or a private one. */
extern __thread struct fdt *chell_tls_fdt;
extern unsigned int chell_fdt_cap;

static inline struct fdt *fdt_cur(void)
{
	return chell_tls_fdt;
}

/* The file behind `fd`, or NULL: the whole cost for unclaimed descriptors
 * (a bounds check, then the thread's table and the entry: three loads). */
static inline struct chell_file *fdt_peek(int fd)
{
	if (likely((unsigned int)fd >= chell_fdt_cap))
		return NULL;
	return atomic_load_explicit(&chell_tls_fdt->e[fd], memory_order_acquire);
}

/* Highest fd ever registered in the calling thread's table (-1: none). */
static inline int fdt_max(void)
{
	return chell_fdt_cap ? atomic_load_explicit(&fdt_cur()->max, memory_order_acquire) : -1;
}
int fdt_init(void);
/* The calling thread leaves its table for a private copy, and the kernel's
 * table with it (unshare(CLONE_FILES)); 0 or -errno. */
int fdt_unshare(void);
/* unshare(2) with CLONE_FILES in flags, keeping the tables in step. */
int fdt_unshare_call(int flags);
/* Threads created by a thread with a private table share it. */
struct fdt *fdt_private_hold(void);
void fdt_private_put(struct fdt *t);
void fdt_private_join(struct fdt *t);
/* clone(CLONE_VM | CLONE_VFORK) without CLONE_FILES: the child's table (a
 * copy of the caller's), and what the parent does once the child has
 * exec'd or exited (ok) or the clone failed (!ok). */
struct fdt *fdt_vm_child_table(void);
void fdt_vm_child_done(struct fdt *t, bool ok);
/* In a forked child: the forking thread's table becomes the process's. */
void fdt_after_fork_child(void);
/* Drop every table's descriptors (process exit). */
void fdt_drop_all(void);
void fdt_lock(void);
void fdt_unlock(void);
void fdt_lock_reinit_child(void);
/* Install f at fd (caller holds fdt_lock and gives one reference of f). */
void fdt_install(int fd, struct chell_file *f);
/* Remove fd and return its file (the table's reference passes to the caller). */
struct chell_file *fdt_remove(int fd);

/*
 * What the hub keeps per chell_file besides what handlers see: every
 * chell_file is the first member of one of these (file_alloc), so the
 * hub goes from one to the other with a cast and handlers never see the
 * reference counts. Objects are recycled through the free list, never
 * freed (a reader racing a close touches a recycled object, never freed
 * memory).
 */
struct nib_file {
	struct chell_file pub;
	uint32_t refs;             /* descriptors of this process + calls in flight (atomic) */
	uint32_t live;             /* 1 while allocated (atomic) */
	struct nib_file *next_free;
};
static inline struct nib_file *nib_file(struct chell_file *f)
{
	return (struct nib_file *)f;
}

/* Table entry of a descriptor being closed (see closing.c). */
extern struct nib_file chell_closing_file;
#define FILE_CLOSING (&chell_closing_file.pub)

/* ---- hazard.c: the data path's protection against a concurrent close ---- */
struct chell_hazard {
	struct chell_file *_Atomic f; /* the file this thread is using, or NULL */
	_Atomic int in_use;
	struct chell_hazard *next;
};
extern bool chell_hazard_enabled;
extern __thread struct chell_hazard *chell_tls_hz;
void chell_hazard_init(void);
void chell_hazard_after_fork_child(void);
struct chell_hazard *chell_hazard_slot(void);
void chell_hazard_wait(struct chell_file *f);

struct chell_file *file_alloc(void);
/* Take a reference on the file behind fd for one call; NULL if unclaimed. */
struct chell_file *file_get_fd(int fd);
void file_ref(struct chell_file *f);
void file_put(struct chell_file *f);

/*
 * Enter/leave a data-path call on fd: the file stays alive in between. With
 * hazard pointers: plain stores only (see hazard.c); otherwise a counted
 * reference. Signals are deferred in between, so calls never nest.
 */
struct chell_file *chell_wait_closing(int fd);

static inline struct chell_file *file_enter(int fd)
{
	struct chell_hazard *h = chell_tls_hz;
	/* The slot is free unless a signal handler that Chell could not defer
	 * interrupted a call of this thread: then take a counted reference. */
	if (likely(chell_hazard_enabled && h &&
		   atomic_load_explicit(&h->f, memory_order_relaxed) == NULL)) {
		chell_tls_crit++;
		struct chell_file *f = fdt_peek(fd);
		atomic_store_explicit(&h->f, f, memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst); /* the closer's membarrier orders the rest */
		if (likely(f && f != FILE_CLOSING && fdt_peek(fd) == f))
			return f;
		atomic_store_explicit(&h->f, NULL, memory_order_relaxed);
		chell_crit_leave();
		if (!f)
			return NULL;
	} else if (chell_hazard_enabled && !h) {
		chell_hazard_slot(); /* first call of this thread: next time fast */
	}
	chell_crit_enter();
	struct chell_file *f = file_get_fd(fd);
	if (!f)
		chell_crit_leave();
	return f;
}

static inline void file_leave(struct chell_file *f)
{
	struct chell_hazard *h = chell_tls_hz;
	if (likely(h && atomic_load_explicit(&h->f, memory_order_relaxed) == f))
		atomic_store_explicit(&h->f, NULL, memory_order_release);
	else
		file_put(f);
	chell_crit_leave();
}

/* ---- internal fds ---- */
/* interpose_rlimit.c: RLIMIT_NOFILE and Chell's descriptors above it. */
void chell_nofile_lock(void);
void chell_nofile_unlock(void);
void chell_nofile_hold(void);    /* fork, clone, exec */
void chell_nofile_release(void);
void chell_nofile_reinit_child(void);
int chell_nofile_soft(void);
/* fd moved to a number >= the soft limit (FD_CLOEXEC = cloexec), or -1. */
int chell_nofile_place(int fd, int cloexec);
/* A duplicate of fd above the soft limit (not close-on-exec), or -1. */
int chell_nofile_dup_high(int fd);
bool chell_is_internal_fd(int fd);
/* Where internal descriptors live: near the top of the soft limit. */
/* ---- file size limits (chell_maxbytes: chell/handler.h) */
/* RLIMIT_FSIZE's soft limit (UINT64_MAX: none), read at start-up and after
 * every setrlimit/prlimit through libc (interpose_rlimit.c), for the mapped
 * write paths (mapped.h). */
extern uint64_t chell_fsize_limit;
void chell_fsize_refresh(void);
/* Chell's own output (logs, traces) to fd: under a finite RLIMIT_FSIZE a
 * regular file gets only what fits below the limit, so the kernel never
 * sends the application a SIGXFSZ that only Chell's bytes caused. 0 or
 * -errno (-EFBIG: dropped at the limit). */
int chell_own_write(int fd, const void *buf, size_t n);

int chell_internal_floor(void);
int chell_internal_list(int *out, int max);

/* ---- hub.c ---- */
extern int chell_active;                 /* 1 when routing is on */
extern struct chell_config chell_cfg;
/* stacks.c: the stack of `mode` (else of the first rule), and whether any
 * stack routes path calls (stat, truncate): the cheap test before routing. */
extern const struct chell_stack *chell_mode_stack;
extern bool chell_stack_routes_stat;
/* Handler h's stat is of no use in this process (a setting turned off
 * what it would do): stat(path) is routed only for the other handlers
 * above the kernel that implement it (called from h's proc_init). */
void chell_stack_unroute_stat(const struct chell_handler *h);
extern bool chell_stack_routes_truncate;
void chell_hub_init(void);
void chell_fork_init(void); /* interpose_proc.c: pthread_atfork handlers */

int hub_open(int dirfd, const char *path, int flags, mode_t mode, enum chell_op op);
int hub_close(int fd);
/* dup family: dup(), F_DUPFD[_CLOEXEC] (arg = minimum), dup2/dup3 (arg = newfd). */
enum hub_dup_kind { HUB_DUP, HUB_DUPFD, HUB_DUP2, HUB_DUP3 };
int hub_dup(int oldfd, enum hub_dup_kind kind, int arg, int flags, enum chell_op op, int *err);
ssize_t hub_read(struct chell_file *f, int fd, enum chell_op op, const struct iovec *iov,
		 int cnt, off_t off, int flags);
ssize_t hub_write(struct chell_file *f, int fd, enum chell_op op, const struct iovec *iov,
		  int cnt, off_t off, int flags);
/* Drop every descriptor this process holds (exit paths). */
void hub_process_exit(void);
/* Run proc_event on every handler in use (once each). */
void hub_proc_event(enum chell_op ev, long arg);
/* Register a kernel fd that refers to an existing OFD slot (exec adoption). */
int hub_adopt(int fd, uint32_t slot, uint32_t gen);
void hub_release_orphan(uint32_t slot, uint32_t gen);

/* Start/finish a call on a handled descriptor. */
static inline chell_ctx hub_ctx(struct chell_file *f, int fd, enum chell_op op)
{
	chell_ctx c = {f, fd, 0, op};
	return c;
}

/* errno convention for the exported wrappers */
static inline long hub_ret(long r)
{
	if (r < 0 && r > -4096) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

/* ---- router.c ---- */
/* Absolute, lexically normalised form of path relative to dirfd. 0 or -errno. */
int router_abspath(int dirfd, const char *path, char *out, size_t outlen);
/* The stack that serves `abs`, or NULL. */
const struct chell_stack *router_route_abs(const char *abs);
/* Route a (dirfd, path) pair; fills abs. NULL if unrouted. */
const struct chell_stack *router_route(int dirfd, const char *path, char *abs, size_t abslen);
/* Build the rules and their stacks; 0, or -1 with a message naming the setting. */
int router_init(char *err, size_t errlen);
/* Is the file abs on device dev served? Always when routed by prefix; by
 * mount type, only on a fast-tier mount (re-reads the mount table for a new dev). */
bool router_dev_fast(const char *abs, dev_t dev);
/* Is dev a tmpfs or DAX mount (the fast tier)? */
bool router_dev_on_fast_mount(dev_t dev);

/* ---- tier.c: the tier model in the Nib (src/tier, docs/TIER.md) ---- */
/* Start it from chell_cfg; 0 or -1 with a message naming the setting. */
int nib_tier_init(char *err, size_t errlen);
/* Is the file open as f (kernel fd `fd`) on the emulated tier? tier.paths,
 * else a tmpfs or DAX mount. Asked once per file by the layers that charge. */
bool chell_tier_file(const struct chell_file *f, int fd);
/* At exit, after the handlers: the tier's counters into stats.file when no
 * handler wrote it (posix, trace). */
void nib_tier_exit(void);
/* Write one JSON record to stats.file ('%p' = pid): 0, or -1 (not set, or
 * it cannot be written: logged). Handlers' dumps and the tier's share it. */
int chell_stats_write(const char *json, size_t n);
/* A file-name setting's value with each "%p" replaced by the pid (cut at
 * outlen); true if it had one (stats.file, trace.file, shadow.report). */
bool chell_expand_pid(const char *tmpl, char *out, size_t outlen);

/* ---- stacks.c ---- */
struct chell_stack_spec;
/* The stack named by spec (built on first use; `key` names the setting in
 * errors), or NULL with a message. */
const struct chell_stack *stack_get(const struct chell_stack_spec *spec, const char *key,
				    char *err, size_t errlen);
/* The stack of ofd->stack_id, or NULL if this image has none such. */
const struct chell_stack *stack_by_id(uint32_t id);
/* Every handler of every stack, each once, in the order first met; the
 * unit tests put their own handlers here to see the events. */
#define MAX_IN_USE 16
extern const struct chell_handler *chell_handlers_in_use[MAX_IN_USE];
extern int chell_nhandlers_in_use;
/* proc_init / proc_event of every handler in use, each once. */
int stacks_proc_init(char *err, size_t errlen);
void stacks_proc_event(enum chell_op ev, long arg);
void stacks_names(char *buf, size_t len);

/* ---- handoff.c ---- */
/* Build the environment for a new image: CHELL_* settings, LD_PRELOAD and the
 * descriptor handoff. Returns a malloc'd envp (free with handoff_env_free). */
/* What an exec is about to run: `path` relative to `dirfd` with execveat's
 * `at_flags`, searched in PATH if `search` (execvp*), or the file open as
 * `dirfd` if `path` is NULL (fexecve). */
struct exec_target {
	int dirfd;
	const char *path;
	int at_flags;
	bool search;
};
char **handoff_prepare_exec(char *const envp[], const struct exec_target *target);
/* After a failed exec: undo the bookkeeping and free env. */
void handoff_exec_failed(char **env);
void handoff_note_startup_env(void);
void handoff_adopt_from_env(void);
void handoff_abandon(void);
const char *chell_library_path(void);

/* ---- interpose_stdio.c ---- */
void stdio_fix_std_stream(int fd);

/* handlers */
extern const struct chell_handler chell_trace_handler;
extern const struct chell_handler chell_shadow_handler;
extern const struct chell_handler chell_direct_handler;
extern const struct chell_handler chell_cache_handler;

#endif
