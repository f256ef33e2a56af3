/* SPDX-License-Identifier: MIT */
/*
 * The shadow handler's memory of recent operations, and the divergence
 * report built from it.
 *
 * The history is a ring in anonymous private memory: per process, as the
 * report is (a child forked after some operations starts with a copy of its
 * parent's history, which is what one wants to read when the child diverges).
 * Threads claim slots with one atomic increment; a report written while
 * another thread is filling a slot may show that slot half-filled, which is
 * acceptable for a post-mortem.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "chell/handler.h"
#include "chell/sys.h"
#include "shadow.h"

static struct shadow_hist *ring;
static unsigned ring_n;
static _Atomic uint64_t ring_seq;
/* Used when the history is disabled or could not be allocated. */
static struct shadow_hist scratch;

static void *sys_mmap_anon(size_t len)
{
	long r = CHELL_SC(SYS_mmap, 0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			  -1, 0);
	if (r < 0 && r > -4096)
		return NULL;
	return (void *)r;
}

int shadow_hist_init(unsigned n)
{
	/* After exec this runs in a fresh image: nothing to unmap. */
	ring = NULL;
	ring_n = 0;
	atomic_store(&ring_seq, 0);
	if (n == 0)
		return 0;
	struct shadow_hist *r = sys_mmap_anon((size_t)n * sizeof(*r));
	if (!r)
		return -ENOMEM;
	ring = r;
	ring_n = n;
	return 0;
}

unsigned shadow_hist_size(void)
{
	return ring_n;
}

struct shadow_hist *shadow_hist_add(int op, int fd, int nargs, const int64_t *args)
{
	uint64_t seq = atomic_fetch_add(&ring_seq, 1) + 1;
	struct shadow_hist *h = ring_n ? &ring[(seq - 1) % ring_n] : &scratch;
	h->seq = 0; /* mark in progress: the formatter skips it until complete */
	h->tid = sys_gettid();
	h->op = op;
	h->fd = fd;
	h->nargs = nargs > 4 ? 4 : nargs;
	for (int i = 0; i < h->nargs; i++)
		h->args[i] = args[i];
	h->r_test = h->r_shadow = 0;
	h->off_test = h->off_shadow = -1;
	h->note = 0;
	h->seq = seq;
	return h;
}

void sb_puts(struct shadow_buf *b, const char *s)
{
	size_t n = strlen(s);
	if (b->len + n >= b->cap)
		n = b->cap > b->len + 1 ? b->cap - b->len - 1 : 0;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	if (b->cap)
		b->p[b->len] = '\0';
}

void sb_printf(struct shadow_buf *b, const char *fmt, ...)
{
	if (b->len + 1 >= b->cap)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	b->len += (size_t)n;
	if (b->len >= b->cap)
		b->len = b->cap - 1;
}

const char *shadow_errname(long err)
{
	return strerrorname_np((int)err);
}

/* Labels of the recorded arguments, by operation. */
static const char *const *arg_labels(int op)
{
	static const char *const rw[] = {"len", "off", "flags", "iovcnt"};
	static const char *const open_[] = {"flags", "mode"};
	static const char *const seek[] = {"off", "whence"};
	static const char *const sync_[] = {"datasync"};
	static const char *const sfr[] = {"off", "n", "flags"};
	static const char *const trunc_[] = {"len", "old_size"};
	static const char *const falloc[] = {"mode", "off", "len"};
	static const char *const stat_[] = {"size_test", "size_shadow", "blocks_test",
					    "blocks_shadow"};
	static const char *const setfl[] = {"flags"};
	static const char *const mmap_[] = {"len", "prot", "flags", "off"};
	static const char *const none[] = {"a0", "a1", "a2", "a3"};
	switch (op) {
	case CHELL_OP_READ: case CHELL_OP_PREAD: case CHELL_OP_READV: case CHELL_OP_PREADV:
	case CHELL_OP_PREADV2: case CHELL_OP_WRITE: case CHELL_OP_PWRITE: case CHELL_OP_WRITEV:
	case CHELL_OP_PWRITEV: case CHELL_OP_PWRITEV2:
		return rw;
	case CHELL_OP_OPEN: return open_;
	case CHELL_OP_LSEEK: return seek;
	case CHELL_OP_FSYNC: case CHELL_OP_FDATASYNC: return sync_;
	case CHELL_OP_SYNC_FILE_RANGE: return sfr;
	case CHELL_OP_FTRUNCATE: case CHELL_OP_TRUNCATE: return trunc_;
	case CHELL_OP_FALLOCATE: return falloc;
	case CHELL_OP_FSTAT: case CHELL_OP_STAT: return stat_;
	case CHELL_OP_FCNTL: return setfl;
	case CHELL_OP_MMAP: return mmap_;
	default: return none;
	}
}

static void fmt_result(struct shadow_buf *b, int64_t r)
{
	if (r < 0 && r > -4096) {
		const char *n = shadow_errname(-r);
		if (n)
			sb_printf(b, "-%s", n);
		else
			sb_printf(b, "%lld", (long long)r);
	} else {
		sb_printf(b, "%lld", (long long)r);
	}
}

void shadow_hist_format(struct shadow_buf *b)
{
	uint64_t last = atomic_load(&ring_seq);
	if (!ring_n) {
		sb_puts(b, "  (history disabled: shadow.history = 0)\n");
		return;
	}
	uint64_t first = last > ring_n ? last - ring_n + 1 : 1;
	sb_printf(b, "history of pid %d, operations %llu..%llu of %llu (oldest first):\n",
		  (int)sys_getpid(), (unsigned long long)first, (unsigned long long)last,
		  (unsigned long long)last);
	for (uint64_t s = first; s <= last; s++) {
		const struct shadow_hist *h = &ring[(s - 1) % ring_n];
		if (h->seq != s)
			continue; /* being overwritten by another thread right now */
		const char *const *lab = arg_labels(h->op);
		sb_printf(b, "  #%llu tid %d %s fd %d", (unsigned long long)h->seq, h->tid,
			  chell_op_name((enum chell_op)h->op), h->fd);
		for (int i = 0; i < h->nargs; i++) {
			/* Flag words read best in hex, modes in octal. */
			if (strcmp(lab[i], "flags") == 0 && h->args[i] > 0)
				sb_printf(b, " %s=%#llx", lab[i], (unsigned long long)h->args[i]);
			else if (strcmp(lab[i], "mode") == 0 && h->op == CHELL_OP_OPEN)
				sb_printf(b, " %s=%#llo", lab[i], (unsigned long long)h->args[i]);
			else
				sb_printf(b, " %s=%lld", lab[i], (long long)h->args[i]);
		}
		sb_puts(b, " -> test=");
		fmt_result(b, h->r_test);
		sb_puts(b, " shadow=");
		fmt_result(b, h->r_shadow);
		if (h->off_test != -1 || h->off_shadow != -1)
			sb_printf(b, " offset test=%lld shadow=%lld", (long long)h->off_test,
				  (long long)h->off_shadow);
		if (h->note == SHADOW_NOTE_FS)
			sb_puts(b, "  (differs by file system: the file's result stands, the copy"
				" follows it)");
		else if (h->note == SHADOW_NOTE_CREDS)
			sb_puts(b, "  (the copy may not be changed with these credentials: the"
				" file's result stands)");
		sb_puts(b, "\n");
	}
}

void shadow_report_and_abort(const char *report_path, const char *what, size_t what_len)
{
	size_t cap = what_len + (size_t)ring_n * 320 + 4096;
	struct shadow_buf b = {sys_mmap_anon(cap), 0, cap};
	if (!b.p) {
		/* No memory for the history: still say what diverged. */
		static char small[4096];
		b.p = small;
		b.cap = sizeof(small);
	}
	sb_printf(&b, "chell shadow: DIVERGENCE in pid %d\n", (int)sys_getpid());
	sb_puts(&b, what);
	if (what_len && what[what_len - 1] != '\n')
		sb_puts(&b, "\n");
	shadow_hist_format(&b);

	int where = -1;
	if (report_path && report_path[0]) {
		where = sys_open(report_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (where >= 0) {
			sys_write_all(where, b.p, b.len);
			sys_fsync(where);
			sys_close(where);
		}
	}
	sys_write_all(2, b.p, b.len);
	if (report_path && report_path[0]) {
		char line[512];
		int n;
		if (where >= 0)
			n = snprintf(line, sizeof(line), "chell shadow: report written to %s\n",
				     report_path);
		else
			n = snprintf(line, sizeof(line),
				     "chell shadow: could not write the report to %s\n",
				     report_path);
		if (n > 0)
			sys_write_all(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	}

	/*
	 * Die of SIGABRT whatever the application did with it: restore the
	 * default action and unblock it with raw calls (the interposed
	 * sigaction would only record an application handler).
	 */
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} ksa = {SIG_DFL, 0, NULL, 0};
	CHELL_SC(SYS_rt_sigaction, SIGABRT, &ksa, 0, 8, 0, 0);
	uint64_t unblock = 1ull << (SIGABRT - 1);
	CHELL_SC(SYS_rt_sigprocmask, SIG_UNBLOCK, &unblock, 0, 8, 0, 0);
	CHELL_SC(SYS_tgkill, sys_getpid(), sys_gettid(), SIGABRT, 0, 0, 0);
	abort();
}
