/* SPDX-License-Identifier: MIT */
/*
 * chell/handler.h - the Nib handler API.
 *
 * Every descriptor a program opens under Chell is routed, at open time, to a
 * *stack* of handlers (for example  trace -> posix,  or  shadow -> direct ->
 * posix). A handler implements the operations it cares about and passes the
 * others down with chell_down_OP(); the bottom of every stack is the `posix`
 * handler, which is the kernel.
 *
 * Everything a handler may use is declared here: the per-OFD state and
 * lock, process events (fork prepare/parent/child, exec, exit), background
 * threads, fault hooks, internal descriptors, shared areas, probes of
 * application pointers, settings and logs (docs/ARCHITECTURE.md, "Handler
 * interface"). The Nib's own bookkeeping stays in src/nib.
 *
 * Conventions (as in liburing): every operation returns a non-negative result
 * or a negative errno; the hub turns that into errno for the application.
 * Handlers never call the interposed libc names (read, open, ...): they call
 * the layer below or the raw system calls in chell/sys.h, so the library never
 * recurses into itself.
 */
#ifndef CHELL_HANDLER_H
#define CHELL_HANDLER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHELL_MAX_LAYERS 4   /* deepest handler stack */
#define CHELL_PRIV_BYTES 96  /* per-layer state shared by every process */
/*
 * Version of this interface (struct chell_handler, chell_ctx, the chell_down_*
 * calls). A handler records the version it was built against in .abi
 * (CHELL_HANDLER_PRIV does it); libchell.so refuses a handler of another one.
 */
#define CHELL_HANDLER_ABI 2 /* 2: the zero-copy methods (get_read_buf, ...) */

/*
 * One open file description (OFD) as the kernel defines it: created by open(),
 * shared by dup() and inherited by fork() and exec(). It lives in a shared
 * memory region inherited by the whole process tree, so per-OFD state that a
 * handler keeps in user space (a file offset, a shadow descriptor) is shared
 * exactly as the kernel shares its own.
 */
/*
 * A lock shared by every process of the tree (it lives in shared memory):
 * futex based, re-entrant for the owning thread, and recovered if the owner
 * dies holding it. While any Chell lock is held, asynchronous signals aimed
 * at the application's handlers are deferred until it is released, so an
 * interposed call made from a signal handler never deadlocks (the kernel
 * likewise delivers signals only when a system call returns).
 */
struct chell_lock {
	uint32_t word;   /* 0 free, 1 locked, 2 locked with waiters */
	int32_t owner;   /* tid of the holder */
	uint32_t depth;  /* re-entry count */
	uint32_t pad_;
};
void chell_lock_acquire(struct chell_lock *l);
void chell_lock_release(struct chell_lock *l);

struct chell_ofd {
	uint32_t in_use;        /* slot allocated (atomic) */
	uint32_t refs;          /* descriptors referring to it, all processes (atomic) */
	uint32_t gen;           /* generation, bumped on each reuse of the slot */
	uint32_t stack_id;      /* which handler stack serves it */
	int32_t status_flags;   /* O_ACCMODE|O_APPEND|O_NONBLOCK|... as F_GETFL (atomic) */
	uint64_t dev, ino;      /* identity of the file, checked when adopted after exec */
	uint64_t offset;        /* file offset, for handlers that keep it in user space (atomic) */
	struct chell_lock lock; /* serialises operations that must be atomic on this OFD */
	/* Free for the handler at layer i. Zeroed when the OFD is created. */
	unsigned char priv[CHELL_MAX_LAYERS][CHELL_PRIV_BYTES];
};

/*
 * Optional shortcuts for the hottest calls (read, pread, write, pwrite with
 * one buffer, lseek). Only the handler at layer 0 may install them, in
 * opened() or adopt(), by setting chell_file.fast. A shortcut either
 * completes the call exactly as the handler's operation would, or returns
 * CHELL_FAST_MISS having changed nothing, and the general path runs. Any
 * member may be NULL.
 */
#define CHELL_FAST_MISS ((ssize_t)INT64_MIN)
struct chell_file;
struct chell_fast_ops {
	ssize_t (*read)(struct chell_file *f, int fd, void *buf, size_t n);
	ssize_t (*pread)(struct chell_file *f, int fd, void *buf, size_t n, off_t off);
	ssize_t (*write)(struct chell_file *f, int fd, const void *buf, size_t n);
	ssize_t (*pwrite)(struct chell_file *f, int fd, const void *buf, size_t n, off_t off);
	/* lseek + read is what a program that seeks does instead of pread
	 * (fio's sync engine): on random offsets the general path's ~150
	 * instructions of dispatch are enough to keep the CPU from overlapping
	 * one call's cache misses with the next, so lseek has a shortcut too. */
	off_t (*lseek)(struct chell_file *f, int fd, off_t off, int whence);
};

/* Per-process view of an OFD: one per OFD per process. */
struct chell_file {
	struct chell_ofd *ofd;     /* shared state */
	uint32_t slot;             /* index of ofd in the shared region */
	const struct chell_stack *stack;
	char *path;                /* absolute path given at open (may be stale after rename) */
	void *local[CHELL_MAX_LAYERS]; /* process-local state of layer i, NULL until set */
	const struct chell_fast_ops *fast; /* shortcuts of layer 0, or NULL */
	/* Set by the hub when this process dropped the OFD's last reference in
	 * any process: detach() is then followed by release(). Read-only. */
	uint32_t release_pending;
	/* The hub's own bookkeeping (reference counts, recycling) follows in
	 * memory: a chell_file is only ever made by the hub, never copied. */
};

/* Which application call an operation came from (for tracing and checks). */
enum chell_op {
	CHELL_OP_OPEN, CHELL_OP_CLOSE,
	CHELL_OP_READ, CHELL_OP_PREAD, CHELL_OP_READV, CHELL_OP_PREADV, CHELL_OP_PREADV2,
	CHELL_OP_WRITE, CHELL_OP_PWRITE, CHELL_OP_WRITEV, CHELL_OP_PWRITEV, CHELL_OP_PWRITEV2,
	CHELL_OP_LSEEK, CHELL_OP_FSYNC, CHELL_OP_FDATASYNC, CHELL_OP_SYNC_FILE_RANGE,
	CHELL_OP_FTRUNCATE, CHELL_OP_FALLOCATE, CHELL_OP_FSTAT, CHELL_OP_FCNTL,
	CHELL_OP_DUP, CHELL_OP_MMAP, CHELL_OP_TRUNCATE, CHELL_OP_STAT,
	CHELL_OP_FORK, CHELL_OP_EXEC, CHELL_OP_STDIO, CHELL_OP_EXIT,
	CHELL_OP_FORK_PREPARE, CHELL_OP_FORK_PARENT,
	CHELL_OP_COUNT_
};

/*
 * Process events, as proc_event receives them (values of enum chell_op, so
 * handlers written against the older CHELL_OP_FORK keep working). A fork
 * (fork, vfork, a clone that makes a new process) gives, in this order:
 *   FORK_PREPARE  in the parent, before the kernel copies the process and
 *                 before Chell takes its own locks: take the handler's
 *                 locks here, so the child gets its state consistent;
 *   FORK_PARENT   in the parent afterwards, whether the fork succeeded or
 *                 not (arg 0): release them;
 *   FORK_CHILD    in the child (arg = parent's pid), after Chell's own
 *                 state is repaired: re-initialise the locks, drop
 *                 per-process state (connections, thread ids); Chell's
 *                 background threads restart after this event.
 * EXEC: before the kernel replaces the image (arg = path), after the
 * background threads stopped. EXIT: arg = status, or -1 from the library
 * destructor; background threads are stopped first.
 * A clone(CLONE_VM|CLONE_VFORK) child (posix_spawn style) gives no fork
 * events: it shares the parent's memory, and its exec and exit are not the
 * process's.
 */
#define CHELL_EV_FORK_PREPARE CHELL_OP_FORK_PREPARE
#define CHELL_EV_FORK_PARENT CHELL_OP_FORK_PARENT
#define CHELL_EV_FORK_CHILD CHELL_OP_FORK
#define CHELL_EV_EXEC CHELL_OP_EXEC
#define CHELL_EV_EXIT CHELL_OP_EXIT
const char *chell_op_name(enum chell_op op);

/* The context of one call as it travels down a stack. */
typedef struct chell_ctx {
	struct chell_file *f;  /* NULL for path operations on files not open */
	int fd;                /* the application's descriptor (a real kernel fd) */
	int layer;             /* index of the handler receiving this call */
	enum chell_op op;      /* the application call */
	const char *path;      /* open and path operations: absolute, normalised path */
	const struct chell_stack *stack; /* path operations (f == NULL): the routed stack */
} chell_ctx;

/*
 * A handler. Every pointer may be NULL, meaning "pass down unchanged".
 * Read/write take iovecs and an offset with preadv2() semantics: off == -1
 * means "at the current offset, and advance it"; the hub has already
 * validated arguments the way the kernel would (negative pread offsets,
 * access mode, iovec count), and the iovec array itself is readable (the
 * Nib probes it before dispatch: a bad one goes to the kernel, EFAULT), so
 * a layer may read the lengths without a guard of its own. The buffers the
 * iovecs point to are not checked: that is the copy's job.
 */
struct chell_handler {
	/* These four come first and stay first in every version of the ABI,
	 * so libchell.so can read them from a handler of any version. */
	const char *name;
	const char *summary;
	unsigned int abi;        /* CHELL_HANDLER_ABI it was built against */
	unsigned int priv_size;  /* bytes of ofd->priv[layer] it uses, <= CHELL_PRIV_BYTES */

	/* Once per process image, after configuration is loaded. <0 disables the mode. */
	int (*proc_init)(void);
	/* Process events: CHELL_EV_FORK_PREPARE / FORK_PARENT / FORK_CHILD,
	 * CHELL_EV_EXEC, CHELL_EV_EXIT (see above for order and `arg`). */
	void (*proc_event)(enum chell_op ev, long arg);

	/* Opens (dirfd, path) exactly as the application asked (c->path holds the
	 * absolute form, c->f the new file) and returns the kernel fd or -errno. */
	int (*open)(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode);
	/* The OFD was created by open() and is now registered (ofd->priv is set up here). */
	void (*opened)(chell_ctx *c);
	/* A new image (after exec) inherited this OFD: rebuild process-local state. */
	int (*adopt)(chell_ctx *c);
	/* One descriptor is being closed (the kernel fd is closed by the posix layer). */
	int (*close)(chell_ctx *c);
	/* Notification: c->fd was duplicated to newfd (dup, dup2, dup3, F_DUPFD*). */
	void (*dup)(chell_ctx *c, int newfd);
	/* The last descriptor of this OFD in this process went away (f->local cleanup). */
	void (*detach)(chell_ctx *c);
	/* The last descriptor of this OFD in every process went away (ofd->priv cleanup). */
	void (*release)(chell_ctx *c);
	/* The kernel is about to evaluate the descriptor's own state (the
	 * file offset): a lock relative to SEEK_CUR, lockf, an exec'd image
	 * that adopts the descriptor. Bring the kernel's view up to date. */
	int (*sync_out)(chell_ctx *c);
	/* The kernel moved the descriptor's offset in a call Chell passed to
	 * it (e.g. an in-kernel copy with a NULL offset): take it as ours. */
	int (*sync_in)(chell_ctx *c);
	/* The descriptor is handed to a process Chell does not serve (an
	 * exec'd program Chell does not load into, a descriptor sent over a
	 * socket, a spawn Chell cannot see). From now on the kernel's offset
	 * is the only one, in every process: a handler that keeps it in user
	 * space moves the OFD to the kernel path for good. NULL: sync_out. */
	void (*escape)(chell_ctx *c);

	ssize_t (*read)(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
	ssize_t (*write)(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
	off_t (*lseek)(chell_ctx *c, off_t off, int whence);
	int (*fsync)(chell_ctx *c, int datasync);
	int (*sync_file_range)(chell_ctx *c, off_t off, off_t n, unsigned int flags);
	int (*ftruncate)(chell_ctx *c, off_t len);
	int (*fallocate)(chell_ctx *c, int mode, off_t off, off_t len);
	int (*fstat)(chell_ctx *c, struct stat *st);
	/* fcntl commands other than F_DUPFD*: F_GETFL, F_SETFL, F_GETFD, locks, ...
	 * `arg` is the integer or pointer argument. For F_SETFL the hub refreshes
	 * ofd->status_flags from the kernel afterwards. */
	int (*fcntl)(chell_ctx *c, int cmd, unsigned long arg);
	/* The application maps the file itself; returns the address or (void*)-errno. */
	void *(*mmap)(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off);
	/* Zero-copy (chell/chell.h), c->op CHELL_OP_READ / CHELL_OP_WRITE.
	 * get_read_buf: *buf = the file's bytes at the current offset, the
	 * offset advanced by the count returned (0 at end of file), or -errno
	 * as read() would answer. get_write_buf: *buf = room for up to `count`
	 * bytes landing at the offset (at the end for O_APPEND), the file
	 * grown to hold them; commit_write_buf then publishes `len` of them as
	 * write() would (the hub checks the pair matches; a handler implements
	 * both or neither). CHELL_FAST_MISS, having changed nothing: no
	 * zero-copy here, the library copies through read()/write() instead
	 * (the posix layer always answers that). */
	ssize_t (*get_read_buf)(chell_ctx *c, const void **buf, size_t count);
	ssize_t (*get_write_buf)(chell_ctx *c, void **buf, size_t count);
	ssize_t (*commit_write_buf)(chell_ctx *c, const void *buf, size_t len);

	/* Path operations on a routed path (c->f == NULL, c->fd == -1; c->path is
	 * the absolute form; path/dirfd are what the application passed). */
	int (*truncate)(chell_ctx *c, const char *path, off_t len);
	int (*stat)(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags);
};

/*
 * Fills .abi and .priv_size of a handler definition and checks at build time
 * that its per-OFD state fits:
 *   const struct chell_handler chell_x_handler = {
 *       .name = "x", CHELL_HANDLER_PRIV(struct x_ofd), .read = x_read, ... };
 */
#define CHELL_HANDLER_PRIV(type)                                                       \
	.abi = CHELL_HANDLER_ABI,                                                      \
	.priv_size = sizeof(type) + 0 * sizeof(struct {                                \
		_Static_assert(sizeof(type) <= CHELL_PRIV_BYTES,                      \
			       #type " does not fit in CHELL_PRIV_BYTES");             \
		int ok_;                                                              \
	})
/* A handler that keeps no per-OFD state. */
#define CHELL_HANDLER_NO_PRIV .abi = CHELL_HANDLER_ABI, .priv_size = 0

/*
 * An external handler (a shared object named NAME.so in a directory of the
 * setting handlers.dir, used by naming NAME as a stack) exports its
 * definition under this name; libchell.so checks .abi, .priv_size and .name.
 */
#define CHELL_HANDLER_ENTRY chell_handler_entry

/* A handler stack: handlers[0] receives calls first. */
struct chell_stack {
	const char *mode;        /* configuration name, e.g. "trace", "shadow:direct" */
	int depth;
	const struct chell_handler *handlers[CHELL_MAX_LAYERS];
	uint32_t id;             /* stored in ofd->stack_id */
	unsigned char routes_stat, routes_truncate; /* a layer above posix implements it */
};

/* The handler at the layer of `c`. */
const struct chell_handler *chell_layer(const chell_ctx *c);

/*
 * Pass an operation to the first handler *below* c->layer that implements it
 * (the posix layer at the bottom implements everything). `c` is the caller's
 * own context; it is not modified.
 */
int chell_down_open(chell_ctx *c, int dirfd, const char *path, int flags, mode_t mode);
int chell_down_close(chell_ctx *c);
ssize_t chell_down_read(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
ssize_t chell_down_write(chell_ctx *c, const struct iovec *iov, int iovcnt, off_t off, int flags);
off_t chell_down_lseek(chell_ctx *c, off_t off, int whence);
int chell_down_fsync(chell_ctx *c, int datasync);
int chell_down_sync_file_range(chell_ctx *c, off_t off, off_t n, unsigned int flags);
int chell_down_ftruncate(chell_ctx *c, off_t len);
int chell_down_fallocate(chell_ctx *c, int mode, off_t off, off_t len);
int chell_down_fstat(chell_ctx *c, struct stat *st);
int chell_down_fcntl(chell_ctx *c, int cmd, unsigned long arg);
void *chell_down_mmap(chell_ctx *c, void *addr, size_t len, int prot, int flags, off_t off);
ssize_t chell_down_get_read_buf(chell_ctx *c, const void **buf, size_t count);
ssize_t chell_down_get_write_buf(chell_ctx *c, void **buf, size_t count);
ssize_t chell_down_commit_write_buf(chell_ctx *c, const void *buf, size_t len);
int chell_down_truncate(chell_ctx *c, const char *path, off_t len);
int chell_down_stat(chell_ctx *c, int dirfd, const char *path, struct stat *st, int at_flags);

/* The reference handler (the kernel). Usable directly, e.g. on a shadow fd. */
extern const struct chell_handler chell_posix_handler;

/*
 * For handlers that keep the file offset in ofd->offset (the kernel's own
 * offset of the descriptor then lags behind):
 *   chell_offset_to_kernel    store ours as the kernel's (0 or -errno); a
 *                             racing call may move ours meanwhile, so it
 *                             stores again until what it stored was
 *                             current afterwards: two racing syncs never
 *                             leave an older offset behind;
 *   chell_offset_from_kernel  take the kernel's as ours (0 or -errno);
 *   chell_offset_go_kernel    the description leaves user space for good:
 *                             clear the handler's shared `active` word and
 *                             store ours as the kernel's. False if it had
 *                             already left (someone else did it).
 */
int chell_offset_to_kernel(struct chell_ofd *ofd, int fd);
int chell_offset_from_kernel(struct chell_ofd *ofd, int fd);
int chell_offset_go_kernel(uint32_t *active, struct chell_ofd *ofd, int fd);

/* Per-OFD lock, shared by all processes (see struct chell_lock). */
static inline void chell_ofd_lock(struct chell_ofd *ofd) { chell_lock_acquire(&ofd->lock); }
static inline void chell_ofd_unlock(struct chell_ofd *ofd) { chell_lock_release(&ofd->lock); }

/* Enter/leave a region in which application signal handlers are deferred. */
void chell_crit_enter(void);
void chell_crit_leave(void);

/*
 * A named area in the shared region, zeroed on first use and shared by the
 * whole process tree (across fork and exec). `name` is at most 39 bytes.
 * Returns NULL if the name is too long or the region is out of space.
 */
void *chell_shared_area(const char *name, size_t size);

/* A descriptor for Chell's own use, moved above the application's soft
 * RLIMIT_NOFILE (out of its way) and registered; cloexec 1/0 sets the flag,
 * -1 registers fd as it is (inherited across exec). */
int chell_internal_fd(int fd, int cloexec);
/* Open a file for Chell's own use (raw openat semantics, -errno on error):
 * it opens even when the application has used up its RLIMIT_NOFILE, at a
 * number above the application's soft limit. Register it with
 * chell_internal_fd(fd, -1) to keep it, or just close it. */
int chell_internal_openat(int dirfd, const char *path, int flags, mode_t mode);
/* Around a system call that makes descriptors for Chell (socket, recvmsg
 * with SCM_RIGHTS): inside, the kernel's RLIMIT_NOFILE is raised above the
 * application's, so the call succeeds even when the application has used up
 * its limit. Keep it short and non-blocking: fork, exec and the
 * application's getrlimit/setrlimit wait for it. Nests. */
void chell_internal_window_enter(void);
void chell_internal_window_leave(void);
/* Close a descriptor returned by chell_internal_fd(). */
void chell_internal_close(int fd);
/* Around code of Chell's that reaches files through the ordinary libc names
 * (the persistence core opening a region, such as warp.patterns): inside,
 * the Nib routes no path on this thread, so Chell's own files always take
 * the kernel path, even when they lie under a routed --path; a handler
 * never recurses into itself (or waits on its own locks). Nests. */
void chell_internal_files_enter(void);
void chell_internal_files_leave(void);
/* The calling thread has a descriptor table of its own (it unshared it:
 * unshare(CLONE_FILES), close_range(CLOSE_RANGE_UNSHARE)). Descriptors a
 * handler keeps for the whole process were opened in the process's table:
 * in this one their numbers are closed, stale copies, or other files. */
bool chell_fdt_private(void);

/*
 * Background threads. chell_thread_start runs fn(t, arg) on a thread of
 * Chell's own:
 *   - every signal is blocked on it from the start, so no application
 *     signal handler ever runs there and process-directed signals go to the
 *     application's threads, as without Chell;
 *   - it works on the process's descriptor table; descriptors it keeps
 *     must be registered with chell_thread_fd (they become Chell internal
 *     descriptors, invisible to the application, closed when the thread
 *     stops);
 *   - in a forked child, its descriptors are closed and fn starts again
 *     from the beginning (after the FORK_CHILD events);
 *   - before exec and at exit (before the EXEC/EXIT events) it is asked to
 *     stop and joined; a failed exec starts it again.
 * fn must return soon after chell_thread_stopping(t) becomes true; it waits
 * with chell_thread_wait, which returns early (true) when asked to stop.
 * Keep its start cheap: a child that execs at once (posix_spawn, system)
 * starts it and stops it again.
 * Start threads from proc_init or later. NULL (errno set) on failure.
 */
struct chell_thread;
typedef void (*chell_thread_fn)(struct chell_thread *t, void *arg);
struct chell_thread *chell_thread_start(const char *name, chell_thread_fn fn, void *arg);
bool chell_thread_stopping(const struct chell_thread *t);
/* Sleep up to ns nanoseconds or until asked to stop; true if asked to stop. */
bool chell_thread_wait(struct chell_thread *t, uint64_t ns);
/* Make t's current or next chell_thread_wait return early (false): work
 * was posted for it. Never blocks; async-signal-safe. */
void chell_thread_wake(struct chell_thread *t);
/* Make fd (any new descriptor) one of t's: internal, close-on-exec, closed
 * with the thread. Returns its (possibly new) number, or -errno. */
int chell_thread_fd(struct chell_thread *t, int fd);
/* Stop for good: ask, wait for fn to return, close its descriptors. */
void chell_thread_stop(struct chell_thread *t);

/*
 * Fault hooks. A handler whose own code may fault on purpose (a copy from a
 * mapping of a file that shrank, a chunk the manager revoked) registers a
 * hook, once per process image (proc_init). Every synchronous SIGSEGV or
 * SIGBUS (si_code > 0) raised in any thread is offered to the hooks in
 * registration order; a hook returns true only if the fault is its own, and
 * then has either fixed up `uc` (the instruction resumes) or leaves the
 * signal handler by a jump (restoring uc's signal mask first). A fault no
 * hook claims goes to the application's handler, or takes the default
 * action, exactly as without Chell. Hooks run in a signal handler: only
 * async-signal-safe work, thread-local state to tell "mine" from "not mine".
 * Registering the same hook twice is a no-op; the chain never shrinks.
 * Returns 0, or -ENOSPC when CHELL_FAULT_HOOKS_MAX hooks are registered.
 */
#define CHELL_FAULT_HOOKS_MAX 8
typedef bool (*chell_fault_hook)(int sig, siginfo_t *si, void *uc);
int chell_fault_hook_add(chell_fault_hook hook);

/* Diagnostics: "chell: <msg>" on stderr, with no allocation and no recursion. */
void chell_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same at a level of the `log_level` setting: chell_info and chell_debug
 * cost one load and a branch when that level is off. */
enum { CHELL_LOG_QUIET, CHELL_LOG_ERROR, CHELL_LOG_INFO, CHELL_LOG_DEBUG };
extern int chell_log_level;
void chell_logv_level(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define chell_info(...) \
	do { if (chell_log_level >= CHELL_LOG_INFO) chell_logv_level(CHELL_LOG_INFO, __VA_ARGS__); } while (0)
#define chell_debug(...) \
	do { if (chell_log_level >= CHELL_LOG_DEBUG) chell_logv_level(CHELL_LOG_DEBUG, __VA_ARGS__); } while (0)

/* The calling thread's kernel id (cached; right after fork too). */
pid_t chell_tid(void);

/*
 * Application pointers a handler reads or fills before the kernel would
 * (an argument it interprets itself). The kernel answers a bad pointer with
 * EFAULT, never a signal; these probe under a guard, without a system call.
 * On -EFAULT (or -ENAMETOOLONG) give the whole call to the kernel, which
 * answers in its own order of checks.
 *   chell_user_check    0 if [p, p+len) can be read (write: written);
 *   chell_user_strnlen  strnlen(s, max), or -ENAMETOOLONG if no NUL within max.
 */
int chell_user_check(const void *p, size_t len, bool write);
long chell_user_strnlen(const char *s, size_t max);

/* The largest file size the file system holding fd allows (s_maxbytes;
 * dev is its st_dev, the key of a per-device cache), for handlers that
 * extend files themselves and must fail with EFBIG where the kernel would. */
int64_t chell_maxbytes(int fd, dev_t dev);

/*
 * Configuration lookup by key (`chell config --keys` lists them). Values were
 * validated against the setting's declared type when the configuration was
 * loaded, so the typed getters never fail on a value: they return 0 (and
 * log) only if the key is unknown or not of their type, a bug in the caller.
 *   chell_setting       the text ("" if unset)
 *   chell_setting_bool  BOOL settings: 1 or 0
 *   chell_setting_uint  UINT settings
 *   chell_setting_size  SIZE settings, in bytes (suffixes applied)
 *   chell_setting_shift a SIZE setting that must be a power of two between
 *                       4K and 1G (a chunk or node size): its log2, or -1
 *                       after a log line naming the setting
 */
const char *chell_setting(const char *key);
int chell_setting_bool(const char *key);
uint64_t chell_setting_uint(const char *key);
uint64_t chell_setting_size(const char *key);
int chell_setting_shift(const char *key);

#ifdef __cplusplus
}
#endif
#endif
