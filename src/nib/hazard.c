/* SPDX-License-Identifier: MIT */
/*
 * Hazard pointers for the data path.
 *
 * A read or write on a handled descriptor must keep its struct chell_file
 * alive while a close() in another thread may drop it. A reference count
 * does that with two locked instructions per call; on x86 each is a full
 * barrier, and measured on random-offset reads they cost more than the copy
 * (they stop the CPU from overlapping one call's cache misses with the
 * next). Instead each thread publishes the file it is using in its own slot
 * with a plain store, and re-checks the table. The rare side - destroying a
 * file after its last close - pays: membarrier(PRIVATE_EXPEDITED) makes
 * every thread's earlier stores visible (the asymmetric fence), then it
 * waits until no slot names the file. Calls run inside a Chell critical
 * section, so a signal handler never nests a second call on the same thread.
 * Without membarrier (old kernels) the data path keeps reference counts.
 */
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "nib.h"

bool chell_hazard_enabled;
__thread struct chell_hazard *chell_tls_hz;

static struct chell_hazard *slots;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t slot_key;

static long membarrier(int cmd)
{
	return syscall(SYS_membarrier, cmd, 0, 0);
}

/* Thread exit: the slot goes back to the pool. This thread may still do
 * I/O in later key destructors, so it forgets the slot first and takes a
 * fresh one (or counted references) if it does. */
static void slot_release(void *p)
{
	struct chell_hazard *h = p;
	if (chell_tls_hz == h)
		chell_tls_hz = NULL;
	atomic_store(&h->f, NULL);
	atomic_store(&h->in_use, 0); /* recycled by the next thread */
}

void chell_hazard_init(void)
{
	long cmds = membarrier(MEMBARRIER_CMD_QUERY);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return;
	if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) < 0)
		return;
	if (pthread_key_create(&slot_key, slot_release) != 0)
		return;
	chell_hazard_enabled = true;
}

/* A forked child is a new memory space: register it, and forget the slots of
 * threads that do not exist in it. */
void chell_hazard_after_fork_child(void)
{
	if (!chell_hazard_enabled)
		return;
	if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) < 0) {
		chell_hazard_enabled = false;
		return;
	}
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	slots_lock = fresh;
	for (struct chell_hazard *h = slots; h; h = h->next)
		if (h != chell_tls_hz) {
			atomic_store(&h->f, NULL);
			atomic_store(&h->in_use, 0);
		}
}

struct chell_hazard *chell_hazard_slot(void)
{
	pthread_mutex_lock(&slots_lock);
	struct chell_hazard *h;
	for (h = slots; h; h = h->next)
		if (!atomic_load(&h->in_use))
			break;
	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h) {
			pthread_mutex_unlock(&slots_lock);
			return NULL;
		}
		h->next = slots;
		slots = h; /* slots are never freed: readers may scan them any time */
	}
	atomic_store(&h->in_use, 1);
	pthread_mutex_unlock(&slots_lock);
	pthread_setspecific(slot_key, h);
	chell_tls_hz = h;
	return h;
}

/* Wait until no thread is inside a call on f (f is already out of the table). */
void chell_hazard_wait(struct chell_file *f)
{
	if (!chell_hazard_enabled)
		return;
	membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
	for (struct chell_hazard *h = slots; h; h = h->next) {
		if (h == chell_tls_hz)
			continue; /* our own call is not in flight: we are closing */
		while (atomic_load(&h->f) == f)
			sched_yield();
	}
}
