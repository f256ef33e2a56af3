/* SPDX-License-Identifier: MIT */
/*
 * sem_exec DIR - descriptors across exec.
 *
 * The parent opens files with and without close-on-exec (O_CLOEXEC at open,
 * FD_CLOEXEC set later, dup of a close-on-exec descriptor), moves offsets and
 * sets O_APPEND, then starts new images of itself through every exec flavour
 * (execve, execvp with a PATH search, execl, execle with an empty
 * environment, fexecve, posix_spawn with file actions) and through the shell
 * (system, popen running cat on an inherited descriptor). Each new image
 * reports which descriptors it has, their offsets and status flags, and moves
 * offsets; the parent then checks it sees the moved offsets. Finally the
 * program replaces itself (no fork) and the new image carries on with the
 * inherited descriptors.
 *
 *   sem_exec DIR                               the scenario
 *   sem_exec DIR --child VARIANT name=fd,...   a new image (internal)
 */
#include <libgen.h>
#include <spawn.h>
#include <sys/wait.h>

#include "sem_common.h"

extern char **environ;

#define MAXFD 16
static const char *names[MAXFD];
static int fds[MAXFD];
static int nfds;

static void add_fd(const char *name, int fd)
{
	names[nfds] = name;
	fds[nfds++] = fd;
}

static int fd_named(const char *name)
{
	for (int i = 0; i < nfds; i++)
		if (strcmp(names[i], name) == 0)
			return fds[i];
	return -1;
}

/* "a=7,b=8,..." */
static void fd_list(char *out, size_t len)
{
	size_t o = 0;
	out[0] = 0;
	for (int i = 0; i < nfds; i++)
		o += (size_t)snprintf(out + o, len - o, "%s%s=%d", i ? "," : "", names[i], fds[i]);
}

static void parse_fd_list(char *s)
{
	for (char *tok = strtok(s, ","); tok && nfds < MAXFD; tok = strtok(NULL, ",")) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = 0;
		add_fd(tok, atoi(eq + 1));
	}
}

/* The new image: report the inherited descriptors, then use them. */
static int child_main(const char *variant)
{
	char buf[64];
	long n;
	say("[%s] new image\n", variant);
	for (int i = 0; i < nfds; i++) {
		errno = 0;
		int fdfl = fcntl(fds[i], F_GETFD);
		if (fdfl < 0) {
			say("  %s: F_GETFD = -1 %s\n", names[i], ename(errno));
			continue;
		}
		say("  %s: F_GETFD = %d, offset = %lld\n", names[i], fdfl,
		    (long long)lseek(fds[i], 0, SEEK_CUR));
		sem_fl_(names[i], fds[i]);
	}
	int a = fd_named("a"), d = fd_named("d"), e = fd_named("e"), g = fd_named("g");
	int cd = fd_named("cd"), s50 = fd_named("s50"), s60 = fd_named("s60");
	if (fcntl(a, F_GETFD) >= 0) {
		n = T(read(a, buf, 7));
		sem_data("read(a)", buf, n);
		OFF(a);
		if (fcntl(d, F_GETFD) >= 0)
			OFF(d);
	}
	if (fcntl(e, F_GETFD) >= 0) {
		char line[64];
		int len = snprintf(line, sizeof line, "from %s\n", variant);
		T(lseek(e, 0, SEEK_SET));
		T(write(e, line, (size_t)len)); /* O_APPEND survived exec: lands at the end */
		OFF(e);
	}
	if (fcntl(g, F_GETFD) >= 0)
		T(lseek(g, 7, SEEK_CUR));
	if (fcntl(cd, F_GETFD) >= 0) {
		n = T(read(cd, buf, sizeof buf));
		T(lseek(cd, 0, SEEK_SET));
		n = T(read(cd, buf, sizeof buf));
		sem_data("read(cd)", buf, n);
	}
	if (s50 >= 0 && fcntl(s50, F_GETFD) >= 0) {
		n = T(read(s50, buf, 7));
		sem_data("read(s50)", buf, n);
		OFF(s50);
	}
	if (s60 >= 0 && fcntl(s60, F_GETFD) >= 0) {
		T(write(s60, "spawned\n", 8));
		OFF(s60);
		sem_fsize("s60", s60);
	}
	if (strcmp(variant, "final") == 0) {
		/* The replaced image keeps going with what it inherited. */
		n = T(pread(a, buf, 13, 17));
		sem_data("pread(a)", buf, n);
		T(lseek(a, 0, SEEK_END));
		T(write(a, "final\n", 6));
		T(close(a));
		OFF(d);
		T(close(d));
		sem_content("f1");
		sem_content("f4");
		sem_content("f5");
	}
	say("[%s] done\n", variant);
	return 0;
}

static char exe[4096];
static char list[512];

static void reap(pid_t pid, const char *what)
{
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st))
		say("%s: exit %d\n", what, WEXITSTATUS(st));
	else
		say("%s: signal %d\n", what, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
}

static void after(void)
{
	int a = fd_named("a"), d = fd_named("d"), g = fd_named("g"), cd = fd_named("cd");
	say("[parent] after the child\n");
	OFF(a);
	OFF(d);
	OFF(g);
	OFF(cd);
	sem_content("f4");
}

static void fork_exec(const char *variant)
{
	say("# fork + %s\n", variant);
	pid_t pid = fork();
	if (pid == 0) {
		char *args[] = {exe, (char *)sem_dir, "--child", (char *)variant, list, NULL};
		char *empty[] = {NULL};
		if (strcmp(variant, "execve") == 0) {
			args[0] = "/proc/self/exe";
			execve("/proc/self/exe", args, environ);
		} else if (strcmp(variant, "execvp") == 0) {
			/* a PATH search for the bare name */
			char dirbuf[4096], base[4096];
			strcpy(dirbuf, exe);
			strcpy(base, exe);
			setenv("PATH", dirname(dirbuf), 1);
			args[0] = basename(base);
			execvp(args[0], args);
		} else if (strcmp(variant, "execl") == 0) {
			execl(exe, "sem_exec", sem_dir, "--child", variant, list, (char *)NULL);
		} else if (strcmp(variant, "execle-empty-env") == 0) {
			execle(exe, "sem_exec", sem_dir, "--child", variant, list, (char *)NULL, empty);
		} else if (strcmp(variant, "fexecve") == 0) {
			int xfd = open(exe, O_RDONLY | O_CLOEXEC);
			fexecve(xfd, args, environ);
		}
		say("[%s] exec failed: %s\n", variant, ename(errno));
		_exit(127);
	}
	reap(pid, variant);
	after();
}

int main(int argc, char **argv)
{
	sem_init(argc, argv);
	if (argc >= 5 && strcmp(argv[2], "--child") == 0) {
		parse_fd_list(argv[4]);
		return child_main(argv[3]);
	}

	ssize_t xl = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (xl <= 0)
		return 1;
	exe[xl] = 0;

	say("# setup\n");
	int a = (int)T(open(P("f1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	for (int i = 0; i < 10; i++) {
		char line[8];
		snprintf(line, sizeof line, "line%02d\n", i);
		if (write(a, line, 7) != 7)
			return 1;
	}
	T(lseek(a, 7, SEEK_SET));
	int b = (int)T(open(P("f2"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
	T(write(b, "b-data", 6));
	int c = (int)T(open(P("f3"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	T(write(c, "c-data", 6));
	T(fcntl(c, F_SETFD, FD_CLOEXEC));
	int cd = (int)T(dup(c)); /* the duplicate does not inherit FD_CLOEXEC */
	int d = (int)T(dup(a));
	int e = (int)T(open(P("f4"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	T(write(e, "log0\n", 5));
	T(fcntl(e, F_SETFL, O_APPEND));
	int g = (int)T(open(P("f1"), O_RDONLY));
	T(lseek(g, 35, SEEK_SET));
	int h = (int)T(fcntl(a, F_DUPFD_CLOEXEC, 0)); /* same OFD as a, gone after exec */
	add_fd("a", a);
	add_fd("b", b);
	add_fd("c", c);
	add_fd("cd", cd);
	add_fd("d", d);
	add_fd("e", e);
	add_fd("g", g);
	add_fd("h", h);
	fd_list(list, sizeof list);

	fork_exec("execve");
	fork_exec("execvp");
	fork_exec("execl");
	fork_exec("execle-empty-env");
	fork_exec("fexecve");

	say("# posix_spawn with file actions\n");
	{
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, a, 50);
		posix_spawn_file_actions_addclose(&fa, cd);
		posix_spawn_file_actions_addopen(&fa, 60, P("f5"), O_RDWR | O_CREAT | O_TRUNC, 0644);
		char slist[600];
		snprintf(slist, sizeof slist, "%s,s50=50,s60=60", list);
		char *args[] = {exe, (char *)sem_dir, "--child", "posix_spawn", slist, NULL};
		pid_t pid;
		int rc = posix_spawn(&pid, exe, &fa, NULL, args, environ);
		posix_spawn_file_actions_destroy(&fa);
		if (rc == 0)
			reap(pid, "posix_spawn"); /* before printing: the child runs concurrently */
		say("posix_spawn = %d\n", rc);
		after();
		sem_content("f5");
		T(fcntl(50, F_GETFD)); /* the file actions ran in the child only */
		T(fcntl(60, F_GETFD));
	}

	char cmd[128];
	say("# system(): cat reads the rest of f1 through the inherited descriptor\n");
	T(lseek(a, 56, SEEK_SET));
	snprintf(cmd, sizeof cmd, "cat <&%d", a);
	say("system = %d\n", system(cmd));
	OFF(a);
	OFF(d);
	snprintf(cmd, sizeof cmd, "echo via system >&%d", e);
	say("system = %d\n", system(cmd));
	sem_content("f4");

	say("# popen(): cat through inherited descriptors\n");
	T(lseek(a, 49, SEEK_SET));
	snprintf(cmd, sizeof cmd, "cat <&%d", a);
	FILE *p = popen(cmd, "r");
	if (p) {
		char line[64];
		while (fgets(line, sizeof line, p))
			sem_data("popen line", line, (long)strlen(line));
		say("pclose = %d\n", pclose(p));
	}
	OFF(a);
	snprintf(cmd, sizeof cmd, "cat >&%d", e);
	p = popen(cmd, "w");
	if (p) {
		fputs("via popen\n", p);
		say("pclose = %d\n", pclose(p));
	}
	sem_content("f4");

	say("# pre-exec marker\n");
	char mark[16];
	T(pread(a, mark, 11, 19));
	T(lseek(a, 14, SEEK_SET));
	say("# execve without fork: the new image continues\n");
	char *args[] = {"/proc/self/exe", (char *)sem_dir, "--child", "final", list, NULL};
	execve("/proc/self/exe", args, environ);
	say("execve failed: %s\n", ename(errno));
	return 1;
}
