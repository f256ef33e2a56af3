/* SPDX-License-Identifier: MIT */
/*
 * sem_append DIR - concurrent O_APPEND writers.
 *
 * K processes with T threads each append M fixed-size records to one
 * O_APPEND file with plain write(). The kernel makes each append atomic
 * (position and write under the inode lock), so the file must end up exactly
 * K*T*M records long with every record intact and present once. Half the
 * processes share the description opened before fork(), the other half open
 * their own, so both the shared and the independent paths are exercised.
 * Only counts and the verdict are printed: the interleaving is not
 * deterministic, the outcome is.
 */
#include <pthread.h>
#include <sys/wait.h>

#include "sem_common.h"

enum { K = 4, TH = 4, M = 1500, RS = 64 };

static int shared_fd = -1;
static int proc_id;

struct targ {
	int fd, thread;
};

static void format_record(char *rec, int p, int t, int i)
{
	/* "P01 T02 N000123 " then filler derived from the id, then '\n' */
	int n = snprintf(rec, RS, "P%02d T%02d N%06d ", p, t, i);
	for (int j = n; j < RS - 1; j++)
		rec[j] = (char)('a' + (p * 7 + t * 3 + i + j) % 26);
	rec[RS - 1] = '\n';
}

static void *writer(void *arg)
{
	struct targ *ta = arg;
	char rec[RS];
	for (int i = 0; i < M; i++) {
		format_record(rec, proc_id, ta->thread, i);
		ssize_t w;
		while ((w = write(ta->fd, rec, RS)) < 0 && errno == EINTR)
			;
		if (w != RS) {
			/* not part of the transcript: stderr, and the verify step fails */
			fprintf(stderr, "short write %zd: %s\n", w, strerror(errno));
			return (void *)1;
		}
	}
	return NULL;
}

static int process_main(int p)
{
	proc_id = p;
	int fd = shared_fd;
	if (p % 2) {
		fd = open(P("log"), O_WRONLY | O_APPEND);
		if (fd < 0)
			return 1;
	}
	pthread_t th[TH];
	struct targ ta[TH];
	for (int t = 0; t < TH; t++) {
		ta[t] = (struct targ){fd, t};
		if (pthread_create(&th[t], NULL, writer, &ta[t]) != 0)
			return 1;
	}
	int bad = 0;
	for (int t = 0; t < TH; t++) {
		void *r;
		pthread_join(th[t], &r);
		bad |= r != NULL;
	}
	return bad;
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	shared_fd = (int)T(open(P("log"), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644));
	pid_t pids[K];
	for (int p = 0; p < K; p++) {
		pids[p] = fork();
		if (pids[p] == 0)
			_exit(process_main(p));
	}
	int failed = 0;
	for (int p = 0; p < K; p++) {
		int st;
		waitpid(pids[p], &st, 0);
		failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	say("writers failed: %d\n", failed);
	/* (the shared offset is where its last append ended: not deterministic) */
	T(close(shared_fd));

	/* Verify: read the file back through a fresh descriptor. */
	int fd = (int)T(open(P("log"), O_RDONLY));
	struct stat st;
	fstat(fd, &st);
	long long expect = (long long)K * TH * M * RS;
	say("size %lld, expected %lld\n", (long long)st.st_size, expect);
	static unsigned char seen[K][TH][M];
	long long records = 0, torn = 0, dup = 0, missing = 0;
	char rec[RS], want[RS];
	for (;;) {
		ssize_t n = read(fd, rec, RS);
		if (n == 0)
			break;
		if (n != RS) {
			torn++;
			break;
		}
		records++;
		int p, t, i;
		if (sscanf(rec, "P%02d T%02d N%06d ", &p, &t, &i) != 3 || p < 0 || p >= K || t < 0 ||
		    t >= TH || i < 0 || i >= M) {
			torn++;
			continue;
		}
		format_record(want, p, t, i);
		if (memcmp(rec, want, RS) != 0) {
			torn++;
			continue;
		}
		if (seen[p][t][i]++)
			dup++;
	}
	for (int p = 0; p < K; p++)
		for (int t = 0; t < TH; t++)
			for (int i = 0; i < M; i++)
				missing += !seen[p][t][i];
	T(close(fd));
	say("records %lld torn %lld duplicate %lld missing %lld\n", records, torn, dup, missing);
	int ok = failed == 0 && st.st_size == expect && torn == 0 && dup == 0 && missing == 0;
	say("verdict: %s\n", ok ? "OK" : "BROKEN");
	return 0;
}
