/* SPDX-License-Identifier: MIT */
/*
 * chelld: the cache manager daemon. Checks its configuration, takes the
 * pool's lock, binds the socket, daemonises (unless --foreground), writes
 * the pid file and serves (server.c) until SIGTERM/SIGINT.
 *
 * Errors that the operator must fix in the command line (bad option, size,
 * missing or unwritable pool directory, missing backing directory) exit 2;
 * a pool already served by another chelld, or a system failure, exits 1.
 * The daemonising parent exits only when the child is ready to serve, so
 * `chelld ... && client` never races the socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <sys/resource.h>

#include "chelld/engine.h"
#include "chelld/modes.h"
#include "chelld/mgr_registry.h"
#include "common/config.h" /* chell_parse_size: the one size parser */
#include "common/fstype.h"
#include "tier/internal.h" /* chell_tier_init */

void chelld_log(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	struct tm tm;
	gmtime_r(&ts.tv_sec, &tm);
	fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ chelld[%d]: %s\n", tm.tm_year + 1900,
		tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
		(int)getpid(), msg);
}

static void usage(FILE *f)
{
	fputs("Usage: chelld --pool DIR --size SIZE --backing DIR [--backing DIR...]\n"
	      "              [--socket PATH] [--foreground]\n"
	      "\n"
	      "The Chell cache manager: caches files of the backing directories in the\n"
	      "pool directory (on the fast tier) and serves libchell clients over a Unix\n"
	      "socket. Normally started with 'chell cache start'.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      directory for the cache, socket, pid, lock and log\n"
	      "                      files (must exist and be writable)\n"
	      "      --size SIZE     cache size; suffixes K, M, G, T (powers of 1024);\n"
	      "                      at least one 2M chunk\n"
	      "      --backing DIR   a directory whose files may be cached (repeatable;\n"
	      "                      at least one)\n"
	      "      --policy lru|fifo|blocks  replacement: lru (CLOCK over chunks, default),\n"
	      "                      fifo, or blocks (CLOCK over the 64 KB groups of chunks:\n"
	      "                      a chunk's cold groups leave, its hot ones stay), or arc\n"
	      "                      (CAR: ARC with reference bits, scan resistant)\n"
	      "      --dirty-high PCT  start background write-back when dirty blocks are\n"
	      "                      this percentage of the capacity (default 50); it\n"
	      "                      also keeps min(20, 100-PCT)% free or clean\n"
	      "      --dirty-low PCT   ... and stop at this percentage (default 25)\n"
	      "      --readahead SIZE  largest read-ahead window of a sequential reader\n"
	      "                      (default 64K; random misses read only what they ask)\n"
	      "      --max-fds N     descriptors of files no client has open that are kept\n"
	      "                      while they hold dirty data (default 256); past that the\n"
	      "                      least recently used is written back and closed\n"
	      "      --cache-mode MODE  the mode of every backing directory: write-back\n"
	      "                      (default), write-through, write-around, read-only,\n"
	      "                      pass-through (docs/CACHE.md, \"Cache modes\")\n"
	      "      --mode-rules DIR=MODE[:DIR=MODE...]  modes of directories below the\n"
	      "                      backing directories (the longest match wins)\n"
	      "      --seq-cutoff SIZE  sequential reads of files larger than this go around\n"
	      "                      the cache once the stream passes min(SIZE, 4M)\n"
	      "                      (default 0: the cache's capacity)\n"
	      "      --pin-max SIZE  bytes 'chell cache pin' may pin (default: half of SIZE)\n"
	      "      --file-max SIZE files larger than this are not cached (default 0: no cap)\n"
	      "      --workers N     threads serving requests (1 to 64, default 8): a miss\n"
	      "                      that waits for the backing store holds up only its\n"
	      "                      own client\n"
	      "      --socket PATH   listen here instead of DIR/" CHELLD_SOCK_NAME "\n"
	      "      --foreground    do not daemonise; log to stderr instead of\n"
	      "                      DIR/" CHELLD_LOG_NAME "\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "The cache lives in DIR/" CACHE_META_NAME " and DIR/" CACHE_CHUNKS_DIR "/, created on the first\n"
	      "start; a pool keeps the chunk slots it was created with (one per 256K of\n"
	      "SIZE), its capacity is the SIZE of each start.\n"
	      "\n"
	      "Exit status: 0 served and stopped cleanly (or: daemon started), 1 the pool\n"
	      "is already served or a system error, 2 usage or configuration error, or a\n"
	      "damaged pool.\n",
	      f);
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("chelld: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return code;
}

static char *join(const char *dir, const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return NULL;
	return p;
}

/* Who holds the pool, from its pid file (0 if unknown). */
static long pid_from_file(const char *pid_path)
{
	FILE *f = fopen(pid_path, "re");
	long pid = 0;
	if (f) {
		if (fscanf(f, "%ld", &pid) != 1)
			pid = 0;
		fclose(f);
	}
	return pid;
}

/* The process is gone or a zombie (its threads may still be releasing its
 * files, the pool lock among them). */
static bool dying(long pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return true;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Take the pool's lock. A chelld that was just killed holds it until its
 * last thread has exited, a moment after its main thread is a zombie:
 * wait for that (up to 2 s) rather than refuse a restart. */
static int lock_pool(int lfd, const char *pid_path)
{
	for (int i = 0; i < 200; i++) {
		if (flock(lfd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		int e = errno;
		long other = pid_from_file(pid_path);
		if (e != EWOULDBLOCK || other <= 0 || !dying(other))
			break;
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
	return flock(lfd, LOCK_EX | LOCK_NB);
}

static int bind_socket(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return fail(CHELLD_EXIT_USAGE, "socket path '%s' is too long (max %zu bytes)", path,
			    sizeof sa.sun_path - 1) * -1;
	strcpy(sa.sun_path, path);
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -fail(CHELLD_EXIT_USAGE, "'%s' exists and is not a socket", path);
		/* We hold the pool's lock, so our own old socket is stale; but a
		 * --socket path might belong to a daemon of another pool. */
		int probe = chelld_connect(path);
		if (probe >= 0) {
			close(probe);
			return -fail(CHELLD_EXIT_FAIL, "socket '%s' is in use by another daemon", path);
		}
		unlink(path);
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -fail(CHELLD_EXIT_FAIL, "socket: %s", strerror(errno));
	if (bind(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
		int e = errno;
		close(s);
		return -fail(CHELLD_EXIT_FAIL, "cannot bind '%s': %s", path, strerror(e));
	}
	/* Any user may connect: access is decided per file by the descriptors
	 * clients pass, not by who can reach the socket. */
	chmod(path, 0666);
	if (listen(s, 64) < 0) {
		int e = errno;
		close(s);
		unlink(path);
		return -fail(CHELLD_EXIT_FAIL, "listen: %s", strerror(e));
	}
	return s;
}

static int write_pid_file(const struct chelld_config *cfg)
{
	char *tmp = join(cfg->pool, CHELLD_PID_NAME ".tmp");
	if (!tmp)
		return -1;
	FILE *f = fopen(tmp, "we");
	int r = -1;
	if (f) {
		fprintf(f, "%d\n%s\n", (int)getpid(), cfg->sock_path);
		if (fclose(f) == 0 && rename(tmp, cfg->pid_path) == 0)
			r = 0;
	}
	if (r < 0)
		unlink(tmp);
	free(tmp);
	return r;
}

/*
 * What fsync means for the files it caches, said where it starts: fsync
 * on a cached file leaves the data in the pool (by design: the slow
 * device is written by write-back, docs/CACHE.md "Durability"). A pool in
 * memory (tmpfs, ramfs) therefore survives the death of programs and of
 * chelld, not a power loss or a reboot.
 */
static void print_durability(const char *pool)
{
	struct statfs sf;
	if (statfs(pool, &sf) == 0 && (sf.f_type == TMPFS_MAGIC || sf.f_type == RAMFS_MAGIC))
		printf("chelld: durability: fsync keeps data in this pool, which is in memory (%s):\n"
		       "chelld:   it survives programs and chelld dying, NOT a power loss or reboot.\n"
		       "chelld:   'chell cache flush' (or 'chell cache stop') writes it to the backing files.\n",
		       sf.f_type == TMPFS_MAGIC ? "tmpfs" : "ramfs");
	else
		printf("chelld: durability: fsync keeps data in this pool (not on the backing files):\n"
		       "chelld:   it survives a power loss only as far as the pool's own storage does\n"
		       "chelld:   (persistent memory with DAX); 'chell cache flush' writes it back.\n");
}

/* The tier model (docs/TIER.md): the pool is the emulated tier, so fills
 * into it and write-back out of it are charged. Its settings come from the
 * environment (CHELL_TIER_*, CHELL_CONFIG), as for the clients `chell
 * cache start` runs beside it. 0 or an exit status. */
static int configure_tier(void)
{
	struct chell_config tc = {0};
	char err[512] = "";
	if (chell_config_load(&tc, NULL, err, sizeof err) < 0)
		fprintf(stderr, "chelld: warning: %s (the other settings apply)\n", err);
	err[0] = 0;
	int r = chell_tier_init(&tc, err, sizeof err);
	chell_config_free(&tc);
	return r < 0 ? fail(CHELLD_EXIT_USAGE, "%s", err) : 0;
}

/* The directory where clients keep their lock stand-ins (docs/CACHE.md,
 * "Locks"): every user of the node locks there, so it is world-writable
 * and sticky, as /tmp. Never emptied: a stand-in removed while a process
 * holds a lock on it would let the next locker take a new, free one. A
 * pool without it keeps every client on the backing file's locks. */
static void make_locks_dir(const char *pool)
{
	char *d = join(pool, CHELLD_LOCKS_DIR);
	if (!d)
		return;
	if ((mkdir(d, 01777) < 0 && errno != EEXIST) || chmod(d, 01777) < 0)
		fprintf(stderr, "chelld: warning: %s: %s (byte-range locks stay on the backing files)\n",
			d, strerror(errno));
	free(d);
}

/* Validate the configuration into cfg; 0 or an exit status. */
struct cache_opts {
	const char *policy, *high, *low, *readahead, *max_fds, *workers;
	const char *mode, *mode_rules, *seq_cutoff, *pin_max, *file_max; /* modes.c */
};

/* A count from 1 to max: 0, or -1 with *out untouched. */
static int parse_count(const char *s, unsigned long max, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < 1 || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_pct(const char *s, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > 100)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* The cache modes' options (modes.c), defaults as cache.* in registry.def. */
static int configure_modes(struct chelld_config *cfg, const struct cache_opts *o)
{
	int mode = o->mode ? modes_parse(o->mode) : CHELLD_MODE_WRITE_BACK;
	if (mode < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --cache-mode '%s' (write-back, write-through, "
			    "write-around, read-only or pass-through)", o->mode);
	cfg->mode = (unsigned)mode;
	cfg->seq_cutoff = 0;
	if (o->seq_cutoff && chell_parse_size(o->seq_cutoff, &cfg->seq_cutoff) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --seq-cutoff '%s' (a size; 0: the capacity)",
			    o->seq_cutoff);
	if (o->pin_max && chell_parse_size(o->pin_max, &cfg->pin_max) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --pin-max '%s' (a size; 0: half the capacity)",
			    o->pin_max);
	if (cfg->pin_max > cfg->size)
		return fail(CHELLD_EXIT_USAGE, "--pin-max (%llu) is larger than --size (%llu)",
			    (unsigned long long)cfg->pin_max, (unsigned long long)cfg->size);
	if (o->file_max && chell_parse_size(o->file_max, &cfg->file_max) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --file-max '%s' (a size; 0: no cap)",
			    o->file_max);
	cfg->mode_rules = o->mode_rules;
	char err[PATH_MAX + 128];
	if (modes_check(cfg, err, sizeof err) < 0)
		return fail(CHELLD_EXIT_USAGE, "%s (--mode-rules)", err);
	return 0;
}

/* The cache options, with their defaults (those of cache.* in config.c). */
static int configure_cache(struct chelld_config *cfg, const struct cache_opts *o)
{
	cfg->policy = 0;
	if (o->policy && strcmp(o->policy, "fifo") == 0)
		cfg->policy = 1;
	else if (o->policy && strcmp(o->policy, "blocks") == 0)
		cfg->policy = 2;
	else if (o->policy && strcmp(o->policy, "arc") == 0)
		cfg->policy = 3;
	else if (o->policy && strcmp(o->policy, "lru") != 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --policy '%s' (lru, fifo, blocks or arc)",
			    o->policy);
	/* Every extending write reserves its space (docs/CACHE.md, "Appends"). */
	cfg->append_threshold = 0;
	cfg->readahead = 64 << 10;
	if (o->readahead && (chell_parse_size(o->readahead, &cfg->readahead) < 0 ||
			     cfg->readahead > CACHE_CHUNK_BYTES))
		return fail(CHELLD_EXIT_USAGE, "invalid --readahead '%s' (a size up to 2M)",
			    o->readahead);
	cfg->max_fds = 256;
	if (o->max_fds && parse_count(o->max_fds, 65536, &cfg->max_fds) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --max-fds '%s' (1 to 65536)", o->max_fds);
	const char *pause = getenv("CHELLD_TEST_REVALIDATE_PAUSE_MS"); /* chelld.h: a test hook */
	if (pause && parse_count(pause, 60000, &cfg->test_revalidate_pause_ms) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid CHELLD_TEST_REVALIDATE_PAUSE_MS '%s' (1 to 60000)",
			    pause);
	cfg->workers = 8;
	if (o->workers && parse_count(o->workers, 64, &cfg->workers) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --workers '%s' (1 to 64)", o->workers);
	cfg->dirty_high = 50;
	cfg->dirty_low = 25;
	if (o->high && parse_pct(o->high, &cfg->dirty_high) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --dirty-high '%s' (a percentage)", o->high);
	if (o->low && parse_pct(o->low, &cfg->dirty_low) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --dirty-low '%s' (a percentage)", o->low);
	if (cfg->dirty_low >= cfg->dirty_high)
		return fail(CHELLD_EXIT_USAGE, "--dirty-low (%u) must be below --dirty-high (%u)",
			    cfg->dirty_low, cfg->dirty_high);
	return configure_modes(cfg, o);
}

static int configure(struct chelld_config *cfg, const char *pool, const char *size,
		     char **backing, int nbacking, const char *sock)
{
	if (!pool || !size || nbacking == 0) {
		fail(CHELLD_EXIT_USAGE, "--pool, --size and at least one --backing are required");
		fputs("Try 'chelld --help'.\n", stderr);
		return CHELLD_EXIT_USAGE;
	}
	if (chell_parse_size(size, &cfg->size) < 0)
		return fail(CHELLD_EXIT_USAGE, "invalid --size '%s' (a number with K, M, G or T)",
			    size);
	if (cfg->size < CHELLD_CHUNK_SIZE)
		return fail(CHELLD_EXIT_USAGE, "--size '%s' is smaller than one chunk (2M)", size);
	struct stat st;
	if (stat(pool, &st) < 0)
		return fail(CHELLD_EXIT_USAGE, "pool directory '%s': %s", pool, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(CHELLD_EXIT_USAGE, "pool directory '%s' is not a directory", pool);
	if (access(pool, W_OK | X_OK) < 0)
		return fail(CHELLD_EXIT_USAGE, "pool directory '%s' is not writable: %s", pool,
			    strerror(errno));
	cfg->pool = realpath(pool, NULL);
	if (!cfg->pool)
		return fail(CHELLD_EXIT_USAGE, "pool directory '%s': %s", pool, strerror(errno));
	/* The pool is the node-local fast tier: clients map its chunk files
	 * and its metadata is persisted with cache-line flushes. On a
	 * distributed store that would be the distributed file system's page
	 * cache, neither fast nor the node's own (issue 13). */
	char type[128] = "";
	if (chell_fs_remote(cfg->pool, type, sizeof type) == 1)
		return fail(CHELLD_EXIT_USAGE,
			    "pool directory '%s' is on %s, a distributed file system: the pool is the "
			    "node-local fast tier (tmpfs or DAX) in front of it; put the pool on tmpfs "
			    "(e.g. --pool /dev/shm/chell-cache) and give the distributed directory as "
			    "--backing",
			    cfg->pool, type);
	cfg->backings = calloc((size_t)nbacking, sizeof *cfg->backings);
	if (!cfg->backings)
		return fail(CHELLD_EXIT_FAIL, "out of memory");
	for (int i = 0; i < nbacking; i++) {
		char *r = realpath(backing[i], NULL);
		if (!r)
			return fail(CHELLD_EXIT_USAGE, "backing directory '%s': %s", backing[i],
				    strerror(errno));
		if (stat(r, &st) < 0 || !S_ISDIR(st.st_mode)) {
			free(r);
			return fail(CHELLD_EXIT_USAGE, "backing directory '%s' is not a directory",
				    backing[i]);
		}
		if (access(r, R_OK | X_OK) < 0) {
			int e = errno;
			free(r);
			return fail(CHELLD_EXIT_USAGE, "backing directory '%s' is not readable: %s",
				    backing[i], strerror(e));
		}
		cfg->backings[cfg->nbackings++] = r;
	}
	cfg->sock_path = sock ? strdup(sock) : join(cfg->pool, CHELLD_SOCK_NAME);
	cfg->pid_path = join(cfg->pool, CHELLD_PID_NAME);
	if (!cfg->sock_path || !cfg->pid_path)
		return fail(CHELLD_EXIT_FAIL, "out of memory");
	return 0;
}

static void free_config(struct chelld_config *cfg)
{
	for (int i = 0; i < cfg->nbackings; i++)
		free(cfg->backings[i]);
	free(cfg->backings);
	free(cfg->pool);
	free(cfg->sock_path);
	free(cfg->pid_path);
}

/* Fork; the parent waits until the child reports ready (its pid) and exits.
 * Returns in the child with *ready_fd to write to; -1 on failure. */
static int daemonise(const struct chelld_config *cfg, int *ready_fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(p[1]);
		int child = 0;
		ssize_t n = read(p[0], &child, sizeof child);
		if (n != sizeof child) {
			fprintf(stderr, "chelld: the daemon failed to start; see %s/%s\n", cfg->pool,
				CHELLD_LOG_NAME);
			_exit(CHELLD_EXIT_FAIL);
		}
		printf("chelld: serving pool %s on %s (pid %d)\n", cfg->pool, cfg->sock_path, child);
		print_durability(cfg->pool);
		fflush(stdout);
		_exit(0);
	}
	close(p[0]);
	setsid();
	if (chdir("/") < 0)
		return -1;
	char *log = join(cfg->pool, CHELLD_LOG_NAME);
	int lf = log ? open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
	free(log);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (lf < 0 || nul < 0)
		return -1;
	dup2(nul, 0);
	dup2(lf, 1);
	dup2(lf, 2);
	close(lf);
	close(nul);
	*ready_fd = p[1];
	return 0;
}

int main(int argc, char **argv)
{
	enum { O_POOL = 256, O_SIZE, O_BACKING, O_SOCKET, O_FG, OPT_POLICY, OPT_HIGH, OPT_LOW,
	       OPT_RA, OPT_MAXFDS, OPT_MODE, OPT_MODE_RULES, OPT_SEQ_CUTOFF, OPT_PIN_MAX,
	       OPT_FILE_MAX, OPT_WORKERS };
	static const struct option longopts[] = {
		{"pool", required_argument, NULL, O_POOL},
		{"size", required_argument, NULL, O_SIZE},
		{"backing", required_argument, NULL, O_BACKING},
		{"socket", required_argument, NULL, O_SOCKET},
		{"foreground", no_argument, NULL, O_FG},
		{"policy", required_argument, NULL, OPT_POLICY},
		{"dirty-high", required_argument, NULL, OPT_HIGH},
		{"dirty-low", required_argument, NULL, OPT_LOW},
		{"readahead", required_argument, NULL, OPT_RA},
		{"max-fds", required_argument, NULL, OPT_MAXFDS},
		{"cache-mode", required_argument, NULL, OPT_MODE},
		{"mode-rules", required_argument, NULL, OPT_MODE_RULES},
		{"seq-cutoff", required_argument, NULL, OPT_SEQ_CUTOFF},
		{"pin-max", required_argument, NULL, OPT_PIN_MAX},
		{"file-max", required_argument, NULL, OPT_FILE_MAX},
		{"workers", required_argument, NULL, OPT_WORKERS},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *pool = NULL, *size = NULL, *sock = NULL;
	char **backing = calloc((size_t)argc + 1, sizeof *backing);
	int nbacking = 0, c;
	struct chelld_config cfg = {0};
	struct cache_opts co = {0};
	struct pool cpool = {.chunks_fd = -1};
	bool served = false;
	if (!backing)
		return CHELLD_EXIT_FAIL;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_POOL: pool = optarg; break;
		case O_SIZE: size = optarg; break;
		case O_BACKING: backing[nbacking++] = optarg; break;
		case O_SOCKET: sock = optarg; break;
		case O_FG: cfg.foreground = true; break;
		case OPT_POLICY: co.policy = optarg; break;
		case OPT_HIGH: co.high = optarg; break;
		case OPT_LOW: co.low = optarg; break;
		case OPT_RA: co.readahead = optarg; break;
		case OPT_MAXFDS: co.max_fds = optarg; break;
		case OPT_MODE: co.mode = optarg; break;
		case OPT_MODE_RULES: co.mode_rules = optarg; break;
		case OPT_SEQ_CUTOFF: co.seq_cutoff = optarg; break;
		case OPT_PIN_MAX: co.pin_max = optarg; break;
		case OPT_FILE_MAX: co.file_max = optarg; break;
		case OPT_WORKERS: co.workers = optarg; break;
		case 'h': usage(stdout); free(backing); return 0;
		default:
			fputs("Try 'chelld --help'.\n", stderr);
			free(backing);
			return CHELLD_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		free(backing);
		fail(CHELLD_EXIT_USAGE, "unexpected argument '%s'", argv[optind]);
		fputs("Try 'chelld --help'.\n", stderr);
		return CHELLD_EXIT_USAGE;
	}
	int rc = configure(&cfg, pool, size, backing, nbacking, sock);
	if (rc == 0)
		rc = configure_cache(&cfg, &co);
	if (rc == 0)
		rc = configure_tier();
	free(backing);
	if (rc) {
		free_config(&cfg);
		return rc;
	}

	/* The lock is the truth about who serves the pool; the pid file only
	 * says who. flock locks belong to the open file, which the daemonised
	 * child inherits, and die with the process however it ends. */
	char *lock_path = join(cfg.pool, CHELLD_LOCK_NAME);
	int lfd = lock_path ? open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
	if (lfd < 0) {
		rc = fail(CHELLD_EXIT_FAIL, "cannot open lock file %s: %s", lock_path ? lock_path : "",
			  strerror(errno));
		goto out;
	}
	if (lock_pool(lfd, cfg.pid_path) < 0) {
		long other = pid_from_file(cfg.pid_path);
		if (errno == EWOULDBLOCK && other > 0)
			rc = fail(CHELLD_EXIT_FAIL, "pool %s is already served by chelld (pid %ld)",
				  cfg.pool, other);
		else if (errno == EWOULDBLOCK)
			rc = fail(CHELLD_EXIT_FAIL, "pool %s is already served by another chelld",
				  cfg.pool);
		else
			rc = fail(CHELLD_EXIT_FAIL, "cannot lock %s: %s", lock_path, strerror(errno));
		goto out;
	}
	/* Open (or create) and check the pool before anything is served or
	 * daemonised, so a damaged pool is refused here, with exit status 2. */
	char perr[512];
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max; /* a descriptor per cached file and client */
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (pool_open(cfg.pool, cfg.size, &cpool, perr, sizeof perr) < 0) {
		rc = fail(CHELLD_EXIT_USAGE, "cannot use pool %s: %s", cfg.pool, perr);
		fprintf(stderr, "chelld: to recreate the pool (dirty data not yet written back is "
				"lost), stop using it and remove %s/%s and %s/%s/\n",
			cfg.pool, CACHE_META_NAME, cfg.pool, CACHE_CHUNKS_DIR);
		goto out;
	}
	if (cpool.resized)
		fprintf(stderr, "chelld: note: pool %s was created with %u chunk slots, which do not "
				"fit --size %llu; keeping the slots, capacity %llu bytes (to change the "
				"slots: stop chelld, remove %s/%s and %s/%s/, start again)\n",
			cfg.pool, cpool.nslots, (unsigned long long)cfg.size,
			(unsigned long long)cpool.capacity, cfg.pool, CACHE_META_NAME, cfg.pool,
			CACHE_CHUNKS_DIR);
	make_locks_dir(cfg.pool);
	int sfd = bind_socket(cfg.sock_path);
	if (sfd < 0) {
		rc = -sfd;
		goto out;
	}
	int ready = -1;
	if (!cfg.foreground && daemonise(&cfg, &ready) < 0) {
		rc = fail(CHELLD_EXIT_FAIL, "cannot daemonise: %s", strerror(errno));
		unlink(cfg.sock_path);
		goto out;
	}
	/* Block the stop signals before anyone can learn our pid: from here
	 * on they are only taken through the server's signalfd, so a stop
	 * always runs the graceful path. */
	sigset_t stopset;
	sigemptyset(&stopset);
	sigaddset(&stopset, SIGTERM);
	sigaddset(&stopset, SIGINT);
	sigprocmask(SIG_BLOCK, &stopset, NULL);
	if (write_pid_file(&cfg) < 0) {
		rc = fail(CHELLD_EXIT_FAIL, "cannot write %s: %s", cfg.pid_path, strerror(errno));
		unlink(cfg.sock_path);
		goto out;
	}
	/* Findable without --pool (mgr_registry.h); a daemon that is not is still
	 * a daemon, so a failure is only logged. */
	int reg = mgr_registry_add(getpid(), cfg.pool, cfg.sock_path);
	if (reg)
		chelld_log("not listed in the registry of running managers: %s", strerror(-reg));
	chelld_log("pool %s%s, size %llu bytes in %u chunk slots, %d backing director%s, "
		   "socket %s", cfg.pool, cpool.created ? " (new)" : "",
		   (unsigned long long)cpool.capacity, cpool.nslots, cfg.nbackings,
		   cfg.nbackings == 1 ? "y" : "ies", cfg.sock_path);
	for (int i = 0; i < cfg.nbackings; i++)
		chelld_log("backing directory %s", cfg.backings[i]);
	if (ready >= 0) {
		int me = (int)getpid();
		if (write(ready, &me, sizeof me) != sizeof me)
			chelld_log("could not report readiness to the starting process");
		close(ready);
	}
	served = true; /* the server owns the pool now */
	rc = chelld_serve(&cfg, sfd, &cpool) < 0 ? CHELLD_EXIT_FAIL : 0;
	/* The socket is gone already (stop() unlinks it first); the pid file
	 * goes last, while we still hold the lock. */
	unlink(cfg.sock_path);
	mgr_registry_remove(getpid());
	unlink(cfg.pid_path);
out:
	if (!served)
		pool_close(&cpool);
	if (lfd >= 0)
		close(lfd);
	free(lock_path);
	free_config(&cfg);
	return rc;
}
