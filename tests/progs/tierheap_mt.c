/* SPDX-License-Identifier: MIT */
/*
 * tierheap_mt: threads allocate, fill, reallocate and free blocks of many
 * sizes, each thread with its own seeded generator, blocks handed between
 * threads through a shared pool (so frees cross threads and arenas).
 * While they run, the main thread forks FORKS times: each child allocates,
 * fills and frees blocks of every size class range (small, large, huge) and
 * exits, so a lock held by another thread at the fork (jemalloc's arena,
 * bin and extent locks; the tiered heap's slow-tier copy) would hang or
 * break the child. After they finish, a fork checks the child sees its
 * own copy of a block. Prints one line of checksums, identical under every
 * heap policy and on glibc.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/tool_help.h"

static const char usage_text[] =
	"usage: tierheap_mt: threads allocate, fill, reallocate and free blocks of many\n"
	"sizes, each thread with its own seeded generator, blocks handed between\n"
	"threads through a shared pool (so frees cross threads and arenas).\n"
	"While they run, the main thread forks FORKS times: each child allocates,\n"
	"fills and frees blocks of every size class range (small, large, huge) and\n"
	"exits, so a lock held by another thread at the fork (jemalloc's arena,\n"
	"bin and extent locks; the tiered heap's slow-tier copy) would hang or\n"
	"break the child. After they finish, a fork checks the child sees its\n"
	"own copy of a block. Prints one line of checksums, identical under every\n"
	"heap policy and on glibc.\n"
	"(a test program of Chell's suite; details: tests/progs/tierheap_mt.c)\n";

#define THREADS 4
#define ROUNDS 20000
#define POOL 64
#define FORKS 25

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *pool[POOL];
static size_t pool_len[POOL];
static unsigned char pool_v[POOL];

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t check(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(v + i))
			return 1;
	return 0;
}

static void *worker(void *arg)
{
	uint64_t s = 0x1234567ull + (uintptr_t)arg * 7919, bad = 0;
	uint64_t sum = 0;
	for (int r = 0; r < ROUNDS; r++) {
		size_t n = (size_t)(rnd(&s) % 4 == 0 ? rnd(&s) % (256 << 10) : rnd(&s) % 512) + 1;
		unsigned char *p = malloc(n);
		unsigned char v = (unsigned char)n;
		for (size_t i = 0; i < n; i++)
			p[i] = (unsigned char)(v + i);
		if (rnd(&s) % 3 == 0) {
			size_t m = n + rnd(&s) % 4096;
			p = realloc(p, m);
			bad += check(p, n, v);
			for (size_t i = n; i < m; i++)
				p[i] = (unsigned char)(v + i);
			n = m;
		}
		int slot = (int)(rnd(&s) % POOL);
		pthread_mutex_lock(&pool_lock);
		unsigned char *old = pool[slot];
		size_t on = pool_len[slot];
		unsigned char ov = pool_v[slot];
		pool[slot] = p;
		pool_len[slot] = n;
		pool_v[slot] = v;
		pthread_mutex_unlock(&pool_lock);
		sum += n; /* what this thread allocated: the same on every run */
		if (old) {
			bad += check(old, on, ov); /* another thread's block, freed here */
			free(old);
		}
	}
	return (void *)(uintptr_t)(sum * 2 + (bad ? 1 : 0));
}

/* A child forked while the workers allocate: the heap must work in it. */
static int child_allocates(void)
{
	static const size_t sizes[] = {1, 48, 700, 5000, 70000, 3 << 20};
	unsigned char *b[6];
	for (int i = 0; i < 6; i++) {
		b[i] = malloc(sizes[i]);
		if (!b[i])
			return 1;
		memset(b[i], i + 1, sizes[i]);
	}
	int bad = 0;
	for (int i = 0; i < 6; i++) {
		bad |= b[i][0] != i + 1 || b[i][sizes[i] - 1] != i + 1;
		free(b[i]);
	}
	return bad;
}

int main(int argc, char **argv)
{
	chell_tool_help(argc, argv, usage_text);
	pthread_t t[THREADS];
	uint64_t total = 0;
	int bad = 0, forks_ok = 0;
	for (uintptr_t i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, worker, (void *)i);
	for (int f = 0; f < FORKS; f++) {
		pid_t c = fork();
		if (c == 0)
			_exit(child_allocates());
		int cst;
		if (c > 0 && waitpid(c, &cst, 0) == c && WIFEXITED(cst) && WEXITSTATUS(cst) == 0)
			forks_ok++;
	}
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad |= (int)((uintptr_t)r & 1);
		total += (uintptr_t)r >> 1;
	}
	/* fork: the child changes a block and checks; the parent must not see it. */
	unsigned char *shared = malloc(1 << 20);
	memset(shared, 'p', 1 << 20);
	pid_t pid = fork();
	if (pid == 0) {
		memset(shared, 'c', 1 << 20);
		unsigned char *mine = malloc(3 << 20);
		memset(mine, 'x', 3 << 20);
		_exit(shared[12345] == 'c' && mine[(3 << 20) - 1] == 'x' ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	int fork_ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && shared[12345] == 'p';
	for (int i = 0; i < POOL; i++) {
		bad |= pool[i] && check(pool[i], pool_len[i], pool_v[i]);
		free(pool[i]);
	}
	free(shared);
	printf("threads %d allocated %llu content %s forks during the run %d/%d fork %s\n",
	       THREADS, (unsigned long long)total, bad ? "BAD" : "ok", forks_ok, FORKS,
	       fork_ok ? "ok" : "BAD");
	return bad || !fork_ok || forks_ok != FORKS;
}
