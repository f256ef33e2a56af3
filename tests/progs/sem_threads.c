/* SPDX-License-Identifier: MIT */
/*
 * sem_threads DIR - descriptors shared between threads.
 *
 * Three groups of threads run at once:
 *  - region threads: each owns a region of one file and fills it through its
 *    own descriptor (lseek+write), through the shared descriptor (pwrite),
 *    and through short-lived dup()s, while opening and closing scratch files
 *    so descriptor numbers are constantly reused;
 *  - reader threads: read() fixed-size records from ONE shared description
 *    until EOF; the kernel serialises the shared offset, so every record is
 *    read by exactly one thread;
 *  - writer threads: write() records through ONE shared description without
 *    O_APPEND; again each write gets its own range, nothing overlaps.
 * Then a close-while-reading race: threads read from a descriptor another
 * thread closes; they must see EBADF and nothing worse.
 * The transcript holds only deterministic outcomes.
 */
#include <pthread.h>
#include <time.h>

#include "sem_common.h"

enum { NT = 4, REGION = 65536, CHUNK = 512, NREC = 4000, RECSZ = 32, WREC = 1000 };

static int shared_region_fd, shared_read_fd, shared_write_fd;
static long errors; /* updated with __atomic */

static void err(void)
{
	__atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
}

static void fill_chunk(char *buf, int t, int c)
{
	for (int i = 0; i < CHUNK; i++)
		buf[i] = (char)('A' + (t * 31 + c * 7 + i) % 26);
}

static void *region_thread(void *arg)
{
	int t = (int)(long)arg;
	char buf[CHUNK], back[CHUNK];
	char scratch[32];
	snprintf(scratch, sizeof scratch, "scratch%d", t);
	int own = open(P("regions"), O_RDWR);
	if (own < 0) {
		err();
		return NULL;
	}
	for (int c = 0; c < REGION / CHUNK; c++) {
		off_t pos = (off_t)t * REGION + (off_t)c * CHUNK;
		fill_chunk(buf, t, c);
		switch (c % 3) {
		case 0: /* own descriptor, own offset */
			if (lseek(own, pos, SEEK_SET) != pos || write(own, buf, CHUNK) != CHUNK)
				err();
			break;
		case 1: /* the shared descriptor, positional */
			if (pwrite(shared_region_fd, buf, CHUNK, pos) != CHUNK)
				err();
			break;
		case 2: { /* a private duplicate of the shared descriptor */
			int d = dup(shared_region_fd);
			if (d < 0 || pwrite(d, buf, CHUNK, pos) != CHUNK || close(d) != 0)
				err();
			break;
		}
		}
		if (pread(own, back, CHUNK, pos) != CHUNK || memcmp(buf, back, CHUNK) != 0)
			err();
		/* descriptor churn: numbers get reused by other threads immediately */
		int s = open(P(scratch), O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (s < 0 || write(s, buf, 16) != 16 || close(s) != 0)
			err();
	}
	if (close(own) != 0)
		err();
	return NULL;
}

static unsigned char rec_seen[NREC];

static void *reader_thread(void *arg)
{
	(void)arg;
	char rec[RECSZ];
	for (;;) {
		ssize_t n = read(shared_read_fd, rec, RECSZ);
		if (n == 0)
			break;
		int i;
		if (n != RECSZ || sscanf(rec, "rec%06d", &i) != 1 || i < 0 || i >= NREC) {
			err();
			break;
		}
		__atomic_add_fetch(&rec_seen[i], 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *writer_thread(void *arg)
{
	int t = (int)(long)arg;
	char rec[RECSZ + 1];
	for (int i = 0; i < WREC; i++) {
		snprintf(rec, sizeof rec, "w%02d-%06d---------------------\n", t, i);
		if (write(shared_write_fd, rec, RECSZ) != RECSZ)
			err();
	}
	return NULL;
}

static int race_fd;
static volatile int race_stop;

static void *race_reader(void *arg)
{
	int *result = arg;
	char buf[64];
	long iters = 0;
	for (;;) {
		ssize_t n = (iters & 1) ? read(race_fd, buf, sizeof buf) : pread(race_fd, buf, sizeof buf, 0);
		if (n < 0) {
			*result = errno;
			return NULL;
		}
		if (n == 0)
			lseek(race_fd, 0, SEEK_SET);
		iters++;
		if (race_stop && iters > 1000000) { /* never saw the close: report it */
			*result = -1;
			return NULL;
		}
	}
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);

	say("# setup\n");
	shared_region_fd = (int)T(open(P("regions"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(ftruncate(shared_region_fd, (off_t)NT * REGION));
	int rf = (int)T(open(P("records"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	for (int i = 0; i < NREC; i++) {
		char rec[RECSZ + 1];
		snprintf(rec, sizeof rec, "rec%06d----------------------\n", i);
		if (write(rf, rec, RECSZ) != RECSZ)
			err();
	}
	T(close(rf));
	shared_read_fd = (int)T(open(P("records"), O_RDONLY));
	shared_write_fd = (int)T(open(P("written"), O_WRONLY | O_CREAT | O_TRUNC, 0644));

	say("# concurrent phase\n");
	pthread_t th[3 * NT];
	for (long t = 0; t < NT; t++) {
		pthread_create(&th[t], NULL, region_thread, (void *)t);
		pthread_create(&th[NT + t], NULL, reader_thread, NULL);
		pthread_create(&th[2 * NT + t], NULL, writer_thread, (void *)t);
	}
	for (int t = 0; t < 3 * NT; t++)
		pthread_join(th[t], NULL);
	say("errors %ld\n", errors);
	sem_content("regions");
	long once = 0, other = 0;
	for (int i = 0; i < NREC; i++) {
		if (rec_seen[i] == 1)
			once++;
		else
			other++;
	}
	say("shared reads: %ld records read exactly once, %ld not\n", once, other);
	OFF(shared_read_fd);
	OFF(shared_write_fd);

	/* every written record intact and present once (their order is free) */
	int wf = (int)T(open(P("written"), O_RDONLY));
	static unsigned char wseen[NT][WREC];
	long wbad = 0, wdup = 0, wmissing = 0, wcount = 0;
	char rec[RECSZ];
	ssize_t n;
	while ((n = read(wf, rec, RECSZ)) == RECSZ) {
		int t, i;
		char want[RECSZ + 1];
		if (sscanf(rec, "w%02d-%06d", &t, &i) != 2 || t < 0 || t >= NT || i < 0 || i >= WREC) {
			wbad++;
			continue;
		}
		snprintf(want, sizeof want, "w%02d-%06d---------------------\n", t, i);
		if (memcmp(rec, want, RECSZ) != 0)
			wbad++;
		else if (wseen[t][i]++)
			wdup++;
		wcount++;
	}
	if (n != 0)
		wbad++;
	for (int t = 0; t < NT; t++)
		for (int i = 0; i < WREC; i++)
			wmissing += !wseen[t][i];
	T(close(wf));
	say("shared writes: %ld records, %ld torn, %ld duplicate, %ld missing\n", wcount, wbad, wdup,
	    wmissing);

	say("# close while other threads read\n");
	race_fd = (int)T(open(P("records"), O_RDONLY));
	int results[2] = {0, 0};
	pthread_t rt[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&rt[i], NULL, race_reader, &results[i]);
	struct timespec ms = {0, 20000000};
	nanosleep(&ms, NULL);
	T(close(race_fd));
	race_stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(rt[i], NULL);
	say("race readers ended with: %s, %s\n", results[0] > 0 ? ename(results[0]) : "no error",
	    results[1] > 0 ? ename(results[1]) : "no error");
	T(close(race_fd));

	T(close(shared_region_fd));
	T(close(shared_read_fd));
	T(close(shared_write_fd));
	for (int t = 0; t < NT; t++) {
		char s[32];
		snprintf(s, sizeof s, "scratch%d", t);
		sem_content(s);
	}
	say("verdict: %s\n", errors == 0 && other == 0 && wbad == 0 && wdup == 0 && wmissing == 0
				     ? "OK"
				     : "BROKEN");
	return 0;
}
