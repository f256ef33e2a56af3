/* SPDX-License-Identifier: MIT */
/*
 * sem_stdio DIR - stdio streams on files.
 *
 * fopen in every mode (with 'e' and 'x'), fdopen sharing the offset with
 * its descriptor, the formatted and unformatted calls, positioning
 * (fseek/ftell/rewind/fseeko/ftello, beyond 4 GiB too), ungetc, the three
 * buffering modes, freopen onto stdout, fflush followed by reads through the
 * descriptor, feof/ferror, and fclose closing the descriptor. Where the
 * standard leaves the descriptor's offset unspecified (in the middle of
 * buffered input), nothing is printed; after fflush/fseek it is defined.
 */
#include <sys/wait.h>

#include "sem_common.h"

static void st(const char *what, FILE *f)
{
	say("  %s: feof=%d ferror=%d\n", what, feof(f) != 0, ferror(f) != 0);
}

#define FOPEN(name, mode) fopen_(name, mode)
static FILE *fopen_(const char *name, const char *mode)
{
	errno = 0;
	FILE *f = fopen(P(name), mode);
	if (!f)
		say("fopen(%s, \"%s\") = NULL %s\n", name, mode, ename(errno));
	else
		say("fopen(%s, \"%s\") = stream fd %d cloexec %d\n", name, mode, fileno(f),
		    fcntl(fileno(f), F_GETFD));
	return f;
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char line[128];
	FILE *f;
	int fd;

	say("# fopen modes\n");
	FOPEN("missing", "r");
	f = FOPEN("a.txt", "w");
	FL(fileno(f));
	T(fputs("first line\n", f));
	T(fprintf(f, "%d %s %.2f\n", 42, "forty-two", 3.5));
	T(fwrite("0123456789", 1, 10, f));
	T(ftell(f));
	T(fclose(f));
	sem_content("a.txt");

	f = FOPEN("a.txt", "r");
	FL(fileno(f));
	T(fgets(line, sizeof line, f) != NULL);
	sem_data("fgets", line, (long)strlen(line));
	int num = 0;
	char word[32] = "";
	double dbl = 0;
	T(fscanf(f, "%d %31s %lf", &num, word, &dbl));
	say("  scanned %d %s %.2f\n", num, word, dbl);
	T(ftell(f));
	T(fgetc(f)); /* the newline */
	T(fread(line, 1, sizeof line, f));
	st("after short fread", f);
	T(fgetc(f));
	T(fwrite("x", 1, 1, f)); /* read-only stream */
	st("after fwrite on r", f);
	clearerr(f);
	st("after clearerr", f);
	T(fclose(f));

	f = FOPEN("a.txt", "r+");
	T(fputs("FIRST", f));
	T(fseek(f, 0, SEEK_CUR)); /* required between output and input */
	T(fgets(line, sizeof line, f) != NULL);
	sem_data("fgets r+", line, (long)strlen(line));
	T(fclose(f));
	sem_content("a.txt");

	f = FOPEN("a.txt", "w+"); /* truncates */
	T(ftell(f));
	T(fputs("w+ data\n", f));
	rewind(f);
	T(fgets(line, sizeof line, f) != NULL);
	sem_data("fgets w+", line, (long)strlen(line));
	T(fclose(f));

	f = FOPEN("a.txt", "a");
	FL(fileno(f));
	T(ftell(f));
	T(fseek(f, 0, SEEK_SET));
	T(fputs("appended\n", f)); /* at the end regardless of the seek */
	T(fflush(f));
	T(ftell(f));
	OFF(fileno(f));
	T(fclose(f));

	f = FOPEN("a.txt", "a+");
	FL(fileno(f));
	T(fgets(line, sizeof line, f) != NULL); /* reads from the start */
	sem_data("fgets a+", line, (long)strlen(line));
	T(fputs("a+ tail\n", f));
	T(fflush(f));
	T(ftell(f));
	rewind(f);
	while (fgets(line, sizeof line, f))
		sem_data("a+ line", line, (long)strlen(line));
	st("after reading all", f);
	T(fclose(f));
	sem_content("a.txt");

	f = FOPEN("a.txt", "re");
	T(fclose(f));
	f = FOPEN("a.txt", "wx"); /* exists */
	f = FOPEN("b.txt", "wxe");
	T(fputs("exclusive\n", f));
	T(fclose(f));
	f = FOPEN("b.txt", "a+e");
	T(fclose(f));
	sem_content("b.txt");

	say("# fdopen shares the offset with its descriptor\n");
	fd = (int)T(open(P("c.txt"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(fd, "abcdefghijklmnopqrstuvwxyz\n", 27));
	T(lseek(fd, 5, SEEK_SET));
	f = fdopen(fd, "r+");
	say("fdopen ok=%d fileno==fd %d\n", f != NULL, f && fileno(f) == fd);
	T(ftell(f));
	T(fread(line, 1, 3, f));
	sem_data("fread", line, 3);
	T(ftell(f));
	T(fflush(f)); /* POSIX: the descriptor's offset now matches the stream's */
	OFF(fd);
	T(fseek(f, 10, SEEK_SET)); /* (glibc leaves the fd offset where its buffer ended) */
	T(fputs("KLM", f));
	T(fflush(f));
	OFF(fd);
	T(pread(fd, line, 27, 0));
	sem_data("pread after fflush", line, 27);
	T(lseek(fd, 20, SEEK_SET)); /* move the descriptor, then resync the stream */
	T(fseek(f, 0, SEEK_CUR));
	T(ftell(f));
	T(fgetc(f));
	errno = 0;
	FILE *bad = fdopen(open(P("c.txt"), O_RDONLY), "w");
	say("fdopen(O_RDONLY fd, \"w\") = %s %s\n", bad ? "stream" : "NULL", ename(errno));
	if (bad)
		fclose(bad);
	T(fdopen(999, "r") != NULL);

	say("# ungetc\n");
	T(fseek(f, 3, SEEK_SET));
	T(fgetc(f));
	T(ungetc('Z', f));
	T(ftell(f));
	T(fgetc(f));
	T(fgetc(f));
	T(ungetc(EOF, f));

	say("# fclose closes the descriptor\n");
	T(fclose(f));
	T(fcntl(fd, F_GETFD));
	sem_content("c.txt");

	say("# large offsets\n");
	f = FOPEN("big", "w+");
	T(fseeko(f, 3LL << 30, SEEK_SET));
	T(ftello(f) == (3LL << 30));
	T(fputc('!', f));
	T(fflush(f));
	sem_fsize("big", fileno(f));
	OFF(fileno(f));
	T(fseeko(f, -1, SEEK_END));
	T(fgetc(f));
	T(fseek(f, -1, SEEK_SET));
	T(fseeko(f, 0, 99));
	T(fclose(f));

	say("# buffering modes\n");
	f = FOPEN("buf.txt", "w");
	fd = fileno(f);
	T(setvbuf(f, NULL, _IONBF, 0));
	T(fputs("unbuffered ", f));
	sem_fsize("after _IONBF fputs", fd);
	T(fclose(f));
	f = FOPEN("buf.txt", "a");
	fd = fileno(f);
	T(setvbuf(f, NULL, _IOLBF, 1024));
	T(fputs("line-buffered\n", f));
	sem_fsize("after _IOLBF newline", fd);
	T(fclose(f));
	f = FOPEN("buf.txt", "a");
	fd = fileno(f);
	static char fullbuf[8192];
	T(setvbuf(f, fullbuf, _IOFBF, sizeof fullbuf));
	for (int i = 0; i < 1000; i++)
		fprintf(f, "%04d\n", i); /* 5000 bytes: spills the buffer at most once */
	T(fflush(f));
	sem_fsize("after _IOFBF fflush", fd);
	T(fclose(f));
	sem_content("buf.txt");

	say("# freopen onto stdout in a child\n");
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen(P("out.txt"), "w", stdout))
			_exit(1);
		/* these go to the file, not the transcript */
		printf("to the file %d\n", 1);
		puts("second");
		fflush(stdout);
		(void)!write(STDOUT_FILENO, "via fd 1\n", 9);
		printf("fileno(stdout)=%d\n", fileno(stdout));
		_exit(fclose(stdout) == 0 ? 0 : 2);
	}
	int status;
	waitpid(pid, &status, 0);
	say("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	sem_content("out.txt");
	f = FOPEN("out.txt", "r");
	while (fgets(line, sizeof line, f))
		sem_data("out line", line, (long)strlen(line));
	T(fclose(f));

	say("# getline, getdelim, fputc, putc, fgetc loop\n");
	f = FOPEN("d.txt", "w+");
	for (int i = 0; i < 3; i++)
		fputc('a' + i, f), putc(';', f);
	T(fputs("\nsecond\n", f));
	rewind(f);
	char *lp = NULL;
	size_t cap = 0;
	ssize_t len;
	while ((len = getdelim(&lp, &cap, ';', f)) > 0)
		sem_data("getdelim", lp, len);
	st("after getdelim", f);
	rewind(f);
	while ((len = getline(&lp, &cap, f)) > 0)
		sem_data("getline", lp, len);
	free(lp);
	T(fclose(f));
	return 0;
}
