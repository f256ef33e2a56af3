/* SPDX-License-Identifier: MIT */
/*
 * sem_locks DIR - everything the kernel evaluates against a descriptor's own
 * file offset.
 *
 * Byte-range locks with l_whence = SEEK_CUR (F_SETLK, F_SETLKW, F_OFD_SETLK,
 * F_GETLK, F_OFD_GETLK) with negative, zero and positive l_start after
 * read, write and lseek moved the offset; lockf (F_LOCK, F_TLOCK, F_TEST,
 * F_ULOCK), which is defined relative to the offset. A forked child lists
 * the locks it sees with F_GETLK on a descriptor of its own (SEEK_SET, so
 * the child's own offset plays no part). Then SEEK_DATA/SEEK_HOLE on a
 * sparse file, and descriptors handed to programs that are not under Chell:
 * a statically linked image (nochell_reader, next to this program) and a
 * descriptor sent over a Unix socket; each moves the shared offset, and the
 * parent must see it moved.
 */
#include <libgen.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "sem_common.h"

extern char **environ;

static const char *tname(short t)
{
	return t == F_RDLCK ? "RD" : t == F_WRLCK ? "WR" : t == F_UNLCK ? "UN" : "?";
}

/* The locks a new process sees on the file: one F_GETLK probe after another. */
static void show_locks(const char *what)
{
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(P("f"), O_RDWR);
		char line[512];
		size_t o = 0;
		off_t pos = 0;
		line[0] = 0;
		while (pos < 4096 && o + 40 < sizeof line) {
			struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = pos,
					   .l_len = 0};
			if (fcntl(fd, F_GETLK, &fl) < 0) {
				o += (size_t)snprintf(line + o, sizeof line - o, " GETLK %s", ename(errno));
				break;
			}
			if (fl.l_type == F_UNLCK)
				break;
			o += (size_t)snprintf(line + o, sizeof line - o, " %s[%lld,+%lld]%s",
					      tname(fl.l_type), (long long)fl.l_start,
					      (long long)fl.l_len, fl.l_pid == -1 ? "ofd" : "");
			if (fl.l_len == 0)
				break;
			pos = fl.l_start + fl.l_len;
		}
		say("  locks %s:%s\n", what, line[0] ? line : " none");
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
}

static int lk(int fd, int cmd, short type, short whence, off_t start, off_t len)
{
	struct flock fl = {.l_type = type, .l_whence = whence, .l_start = start, .l_len = len};
	return fcntl(fd, cmd, &fl);
}

static void unlock_all(int fd)
{
	lk(fd, F_SETLK, F_UNLCK, SEEK_SET, 0, 0);
	lk(fd, F_OFD_SETLK, F_UNLCK, SEEK_SET, 0, 0);
}

static void set_locks(int fd)
{
	char buf[64];
	say("-- F_SETLK / F_SETLKW / F_OFD_SETLK relative to the offset\n");
	T(read(fd, buf, 50));
	OFF(fd);
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -10, 5));
	show_locks("after F_SETLK(cur-10,5) at 50");
	T(lk(fd, F_SETLK, F_RDLCK, SEEK_CUR, 0, 3));
	show_locks("after F_SETLK(cur+0,3) at 50");
	T(lk(fd, F_SETLK, F_UNLCK, SEEK_CUR, -10, 0));
	show_locks("after F_UNLCK(cur-10,0) at 50");
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -51, 1)); /* before the start of the file */
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -50, -1));
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, 0, -20));
	show_locks("after F_SETLK(cur,-20) at 50");
	unlock_all(fd);

	T(write(fd, "0123456789", 10));
	OFF(fd);
	T(lk(fd, F_SETLKW, F_WRLCK, SEEK_CUR, 7, 2));
	show_locks("after F_SETLKW(cur+7,2) at 60");
	unlock_all(fd);

	T(lseek(fd, 100, SEEK_SET));
	T(lk(fd, F_OFD_SETLK, F_WRLCK, SEEK_CUR, -30, 4));
	T(lk(fd, F_OFD_SETLKW, F_RDLCK, SEEK_CUR, 5, 1));
	show_locks("after F_OFD_SETLK(cur-30,4), F_OFD_SETLKW(cur+5,1) at 100");
	T(lk(fd, F_OFD_SETLK, F_UNLCK, SEEK_CUR, -30, 0));
	show_locks("after F_OFD_SETLK(UN cur-30,0) at 100");
	unlock_all(fd);

	T(lseek(fd, 40, SEEK_CUR)); /* 140 */
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, 0, 0));
	show_locks("after F_SETLK(cur,0) at 140");
	unlock_all(fd);
}

/* Someone else holds [60,70) for writing; where do our probes hit it? */
static void get_locks(int fd)
{
	say("-- F_GETLK / F_OFD_GETLK relative to the offset\n");
	int go[2], done[2];
	if (pipe(go) < 0 || pipe(done) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		int cfd = open(P("f"), O_RDWR);
		lk(cfd, F_SETLK, F_WRLCK, SEEK_SET, 60, 10);
		char c = 1;
		write(go[1], &c, 1);
		read(done[0], &c, 1);
		_exit(0);
	}
	char c;
	read(go[0], &c, 1);
	static const struct {
		off_t pos, start, len;
	} probes[] = {{65, -5, 1}, {62, 0, 1}, {10, 0, 1}, {10, 55, 0}, {75, -6, 2}, {75, -5, 1}, {0, -1, 1}};
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
		for (int ofd = 0; ofd < 2; ofd++) {
			lseek(fd, probes[i].pos, SEEK_SET);
			struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_CUR,
					   .l_start = probes[i].start, .l_len = probes[i].len};
			errno = 0;
			int r = fcntl(fd, ofd ? F_OFD_GETLK : F_GETLK, &fl);
			if (r < 0)
				say("  %s at %lld (cur%+lld,%lld) = -1 %s\n", ofd ? "F_OFD_GETLK" : "F_GETLK",
				    (long long)probes[i].pos, (long long)probes[i].start,
				    (long long)probes[i].len, ename(errno));
			else
				say("  %s at %lld (cur%+lld,%lld) = %s whence=%d [%lld,+%lld]\n",
				    ofd ? "F_OFD_GETLK" : "F_GETLK", (long long)probes[i].pos,
				    (long long)probes[i].start, (long long)probes[i].len, tname(fl.l_type),
				    fl.l_whence, fl.l_type == F_UNLCK ? 0LL : (long long)fl.l_start,
				    fl.l_type == F_UNLCK ? 0LL : (long long)fl.l_len);
		}
	}
	/* lockf(F_TEST) against the same lock */
	static const off_t tests[][2] = {{55, 5}, {55, 6}, {70, 1}, {69, 1}, {80, -11}, {80, -10}};
	for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
		lseek(fd, tests[i][0], SEEK_SET);
		errno = 0;
		int r = lockf(fd, F_TEST, tests[i][1]);
		say("  lockf(F_TEST,%lld) at %lld = %d%s%s\n", (long long)tests[i][1],
		    (long long)tests[i][0], r, r < 0 ? " " : "", r < 0 ? ename(errno) : "");
	}
	write(done[1], &c, 1);
	int st;
	waitpid(pid, &st, 0);
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
}

static void lockf_calls(int fd)
{
	char buf[64];
	say("-- lockf relative to the offset\n");
	T(lseek(fd, 20, SEEK_SET));
	T(read(fd, buf, 10));
	T(lockf(fd, F_LOCK, 10));
	show_locks("after lockf(F_LOCK,10) at 30");
	T(write(fd, "abcde", 5));
	T(lockf(fd, F_ULOCK, 3));
	show_locks("after lockf(F_ULOCK,3) at 35");
	T(lseek(fd, 200, SEEK_SET));
	T(lockf(fd, F_TLOCK, -50));
	show_locks("after lockf(F_TLOCK,-50) at 200");
	T(lseek(fd, -20, SEEK_END));
	OFF(fd);
	T(lockf(fd, F_TLOCK, 0));
	show_locks("after lockf(F_TLOCK,0) at end-20");
	T(lockf(fd, F_TEST, 0));
	T(lseek(fd, 10, SEEK_SET));
	T(lockf(fd, F_TLOCK, -11));
	T(lockf(fd, F_ULOCK, 0));
	show_locks("after lockf(F_ULOCK,0) at 10");
	T(lseek(fd, 0, SEEK_SET));
	T(lockf(fd, F_ULOCK, 0));
	show_locks("after lockf(F_ULOCK,0) at 0");
}

static void holes(void)
{
	say("-- SEEK_DATA / SEEK_HOLE\n");
	int fd = open(P("sparse"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	char page[4096];
	memset(page, 'x', sizeof page);
	T(write(fd, page, sizeof page));
	T(pwrite(fd, page, sizeof page, 1 << 20));
	T(lseek(fd, 3 << 20, SEEK_SET));
	T(write(fd, page, 100));
	static const off_t at[] = {0, 100, 4096, 8192, 1 << 20, (1 << 20) + 4095, (1 << 20) + 4096,
				   (2 << 20), (3 << 20) + 50, (3 << 20) + 100, (3 << 20) + 200, -1};
	for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
		errno = 0;
		off_t d = lseek(fd, at[i], SEEK_DATA);
		int ed = errno;
		off_t cur1 = lseek(fd, 0, SEEK_CUR);
		errno = 0;
		off_t h = lseek(fd, at[i], SEEK_HOLE);
		int eh = errno;
		off_t cur2 = lseek(fd, 0, SEEK_CUR);
		say("  at %lld: data %lld%s%s (off %lld) hole %lld%s%s (off %lld)\n", (long long)at[i],
		    (long long)d, d < 0 ? " " : "", d < 0 ? ename(ed) : "", (long long)cur1,
		    (long long)h, h < 0 ? " " : "", h < 0 ? ename(eh) : "", (long long)cur2);
	}
	/* the offset SEEK_DATA left is where the next read starts */
	T(lseek(fd, 5000, SEEK_DATA));
	long n = T(read(fd, page, 3));
	sem_data("read after SEEK_DATA", page, n);
	OFF(fd);
	T(lseek(fd, 10, SEEK_HOLE));
	OFF(fd);
	T(write(fd, "hole", 4));
	T(lseek(fd, 4096, SEEK_DATA));
	T(lseek(fd, 4100, SEEK_HOLE));
	close(fd);
	sem_content("sparse");
}

/* FIONREAD on a regular file: the bytes between the offset and the end. */
static void fionread(int fd)
{
	say("-- FIONREAD\n");
	char buf[32];
	int n = -1;
	T(lseek(fd, 0, SEEK_SET));
	T(read(fd, buf, 25));
	T(ioctl(fd, FIONREAD, &n));
	say("  FIONREAD = %d\n", n);
	T(lseek(fd, -7, SEEK_END));
	T(ioctl(fd, FIONREAD, &n));
	say("  FIONREAD = %d\n", n);
}

/* The static reader, next to this program; NULL if it was not built. */
static char reader[4096];

static void static_image(int fd)
{
	say("-- a program Chell does not load into\n");
	if (access(reader, X_OK) != 0) {
		say("  (nochell_reader not built)\n");
		return;
	}
	char buf[64];
	T(lseek(fd, 50, SEEK_SET));
	T(read(fd, buf, 10));
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, 0, 1));
	pid_t pid = fork();
	if (pid == 0) {
		char a[16];
		snprintf(a, sizeof a, "%d", fd);
		execl(reader, reader, a, "10", "5", (char *)NULL);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	say("  reader exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	OFF(fd); /* the reader moved the shared offset: 60 + 10 + 5 */
	long n = T(read(fd, buf, 10));
	sem_data("read after the reader", buf, n);
	T(lk(fd, F_SETLK, F_WRLCK, SEEK_CUR, -1, 1));
	show_locks("after the reader");
	unlock_all(fd);
	T(write(fd, "W", 1));
	OFF(fd);
	/* and once more: a second image started after the first one */
	pid = fork();
	if (pid == 0) {
		char a[16];
		snprintf(a, sizeof a, "%d", fd);
		execl(reader, reader, a, "4", "0", (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	OFF(fd);

	/* posix_spawn with a file actions object Chell did not see being made
	 * (a bitwise copy): glibc spawns it; the reader gets fd as 9 */
	int g = (int)T(open(P("f"), O_RDWR)); /* a description that never left */
	posix_spawn_file_actions_t made, copy;
	posix_spawn_file_actions_init(&made);
	posix_spawn_file_actions_adddup2(&made, g, 9);
	memcpy(&copy, &made, sizeof copy);
	T(lseek(g, 30, SEEK_SET));
	T(read(g, buf, 2));
	char *av[] = {reader, "9", "3", "1", NULL};
	int e = posix_spawn(&pid, reader, &copy, NULL, av, environ);
	if (e == 0)
		waitpid(pid, &st, 0);
	say("  posix_spawn = %d\n", e); /* after the reader's lines */
	posix_spawn_file_actions_destroy(&made);
	OFF(g); /* 32 + 3 + 1 */
	n = T(read(g, buf, 4));
	sem_data("read after the spawned reader", buf, n);
	T(close(g));
}

static void socket_pass(int fd)
{
	say("-- a descriptor sent over a Unix socket\n");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return;
	T(lseek(fd, 120, SEEK_SET));
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char c, cbuf[CMSG_SPACE(sizeof(int))];
		struct iovec iov = {&c, 1};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				   .msg_controllen = sizeof cbuf};
		if (recvmsg(sv[1], &m, 0) != 1 || read(sv[1], &c, 1) != 1) /* then "go" */
			_exit(1);
		int got;
		memcpy(&got, CMSG_DATA(CMSG_FIRSTHDR(&m)), sizeof got);
		char buf[16];
		say("  [receiver] off = %lld\n", (long long)lseek(got, 0, SEEK_CUR));
		long n = T(read(got, buf, 6));
		sem_data("[receiver] read", buf, n);
		write(sv[1], "k", 1); /* not T(): the parent prints as soon as it arrives */
		_exit(0);
	}
	close(sv[1]);
	char c = 'x', cbuf[CMSG_SPACE(sizeof(int))];
	memset(cbuf, 0, sizeof cbuf);
	struct iovec iov = {&c, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			   .msg_controllen = sizeof cbuf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	T(sendmsg(sv[0], &m, 0));
	write(sv[0], "g", 1); /* the receiver prints after this line */
	read(sv[0], &c, 1);   /* the receiver has read */
	OFF(fd);
	char buf[16];
	long n = T(read(fd, buf, 6));
	sem_data("read after the receiver", buf, n);
	int st;
	waitpid(pid, &st, 0);
	close(sv[0]);
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	char self[4096];
	snprintf(self, sizeof self, "%s", argv[0]);
	snprintf(reader, sizeof reader, "%s/nochell_reader", dirname(self));

	int fd = open(P("f"), O_RDWR | O_CREAT | O_TRUNC, 0644);
	char data[300];
	for (int i = 0; i < (int)sizeof data; i++)
		data[i] = (char)('A' + i % 26);
	T(write(fd, data, sizeof data));
	T(lseek(fd, 0, SEEK_SET));
	set_locks(fd);
	get_locks(fd);
	lockf_calls(fd);
	unlock_all(fd);
	holes();
	fionread(fd);
	static_image(fd);
	socket_pass(fd);
	T(close(fd));
	sem_content("f");
	return 0;
}
