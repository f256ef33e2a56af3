/* SPDX-License-Identifier: MIT */
/*
 * A client that may write a backing file gets its chunk files O_RDWR (it
 * must, to map them writable), and so could also ftruncate one. Every
 * mapping of it then faults past the new end - the manager's too, the next
 * time it touches the chunk's control page or data. That must not kill the
 * manager: a SIGBUS inside a chunk mapping is caught here, the mapping is
 * replaced by anonymous zero pages (so the faulting access is retried and
 * completes on memory nobody shares) and the slot is marked broken. The
 * chunk's contents are gone with the truncation, so a broken slot is
 * dropped without write-back (writing the zeros would destroy the backing
 * file's data) at its next use, eviction or flush. Only that client's own
 * file is affected, which it could overwrite anyway.
 *
 * A SIGBUS anywhere else is a real error: the default action runs.
 */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "chelld/engine.h"

static struct engine *guarded;

static void on_sigbus(int sig, siginfo_t *si, void *uctx)
{
	(void)uctx;
	struct engine *c = guarded;
	uintptr_t a = (uintptr_t)si->si_addr;
	for (uint32_t i = 0; c && i < c->nslots; i++) {
		uint8_t *base = __atomic_load_n(&c->slots[i].map, __ATOMIC_RELAXED);
		if (!base || a < (uintptr_t)base || a >= (uintptr_t)base + CACHE_CHUNK_FILE_BYTES)
			continue;
		/* mmap is a plain system call: safe here in practice. */
		if (mmap(base, CACHE_CHUNK_FILE_BYTES, PROT_READ | PROT_WRITE,
			 MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
			break;
		__atomic_store_n(&c->slots[i].broken, true, __ATOMIC_RELEASE);
		return;
	}
	signal(sig, SIG_DFL);
	raise(sig);
}

void engine_guard_install(struct engine *c)
{
	guarded = c;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}
