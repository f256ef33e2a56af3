/* SPDX-License-Identifier: MIT */
/*
 * two_writers POOL [ROUNDS]: two processes on one pVM pool at the same
 * time (docs/PVM.md, "Several processes"). Each has its own application
 * handle, hence its own journal, and runs ROUNDS transactions that each
 * increment an object only it writes ("own-0" or "own-1": disjoint, so the
 * two never wait for each other there) and one object both write
 * ("counter": shared, its lock serialises them). The parent then checks
 * that nothing was lost: own-K = ROUNDS, counter = 2 * ROUNDS.
 *
 *   make && ./two_writers /dev/shm/demo.pool 10000
 */
#include <chell/pvm.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int writer(const char *pool, int k, long rounds)
{
	struct pvm_pool *p;
	struct pvm_app *a;
	char err[256], own[16];
	uint64_t *mine, *shared;
	snprintf(own, sizeof own, "own-%d", k);
	if (pvm_pool_open(pool, &p, err, sizeof err) || pvm_app_open(p, "demo", NULL, 0, &a, err, sizeof err)) {
		fprintf(stderr, "writer %d: %s\n", k, err);
		return 1;
	}
	if (pvm_open(a, own, (void **)&mine, NULL) || pvm_open(a, "counter", (void **)&shared, NULL))
		return 1;
	long retries = 0;
	for (long i = 0; i < rounds; i++) {
		int rc = pvm_tx_begin(a);
		if (!rc)
			rc = pvm_tx_add(a, own, 0, sizeof *mine); /* lock + undo-log, then store */
		if (!rc)
			(*mine)++;
		if (!rc)
			rc = pvm_tx_add(a, "counter", 0, sizeof *shared);
		if (!rc)
			(*shared)++;
		int c = rc ? pvm_tx_abort(a) : pvm_tx_commit(a);
		if (rc == -EDEADLK || c == -EDEADLK) { /* waited too long for a lock: all undone, retry */
			retries++;
			i--;
			continue;
		}
		if (rc || c) {
			fprintf(stderr, "writer %d: %s\n", k, strerror(-(rc ? rc : c)));
			return 1;
		}
	}
	printf("writer %d: %ld transactions committed (%ld retried)\n", k, rounds, retries);
	fflush(stdout); /* the child leaves with _exit */
	pvm_app_close(a);
	pvm_pool_close(p);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: two_writers POOL [ROUNDS]\n");
		return 2;
	}
	const char *pool = argv[1];
	long rounds = argc > 2 ? atol(argv[2]) : 10000;
	struct pvm_pool *p;
	struct pvm_app *a;
	char err[256];
	unlink(pool);
	if (pvm_pool_create(pool, NULL, &p, err, sizeof err) ||
	    pvm_app_open(p, "demo", NULL, PVM_APP_CREATE, &a, err, sizeof err)) {
		fprintf(stderr, "two_writers: %s\n", err);
		return 1;
	}
	/* Three 8-byte objects, zero-filled, in one transaction. */
	pvm_tx_begin(a);
	pvm_create(a, "own-0", 8, NULL);
	pvm_create(a, "own-1", 8, NULL);
	pvm_create(a, "counter", 8, NULL);
	if (pvm_tx_commit(a)) {
		fprintf(stderr, "two_writers: cannot create the objects\n");
		return 1;
	}
	fflush(stdout);
	pid_t kids[2];
	for (int k = 0; k < 2; k++)
		if ((kids[k] = fork()) == 0)
			_exit(writer(pool, k, rounds));
	int bad = 0;
	for (int k = 0; k < 2; k++) {
		int st;
		waitpid(kids[k], &st, 0);
		bad |= !WIFEXITED(st) || WEXITSTATUS(st);
	}
	uint64_t *v[3];
	const char *names[3] = {"own-0", "own-1", "counter"};
	for (int i = 0; i < 3; i++)
		if (pvm_open(a, names[i], (void **)&v[i], NULL))
			return 1;
	int ok = !bad && *v[0] == (uint64_t)rounds && *v[1] == (uint64_t)rounds && *v[2] == 2 * (uint64_t)rounds;
	printf("own-0 = %" PRIu64 ", own-1 = %" PRIu64 ", counter = %" PRIu64 ": %s\n", *v[0], *v[1], *v[2],
	       ok ? "ok, no update lost" : "LOST UPDATES");
	pvm_app_close(a);
	pvm_pool_close(p);
	unlink(pool);
	return ok ? 0 : 1;
}
