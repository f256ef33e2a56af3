/* SPDX-License-Identifier: MIT */
/*
 * chelld_client SOCKET OP...: a scripted client of chelld for
 * tests/system/test_chelld.py. Runs the operations in order on one
 * connection and prints one line per operation:
 *
 *   OP status=ENAME [field=value...]     the daemon's reply
 *   OP local=ENAME                       the client itself failed (e.g. open)
 *
 * Operations:
 *   hello[:VERSION]            HELLO (default: our version)
 *   open:PATH:MODE[:FDPATH]    OPEN_FILE with path PATH and a descriptor of
 *                              FDPATH (default PATH) opened with MODE: ro,
 *                              wo, rw or opath (O_PATH)
 *   open-nofd:PATH             OPEN_FILE without a descriptor
 *   map:ID:CHUNK:r|w           MAP_REQUEST; ID "last" = the last file id
 *   stats | bye | sleep:MS
 *   raw:KIND                   a malformed message: short, badmagic,
 *                              oversize, unknown, badlen, wrongsize,
 *                              badversion, fd-on-stats, garbage
 * Exit: 0 done, 3 the connection failed or the daemon broke the protocol.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chelld/protocol.h"

static uint32_t seq;

static int breakdown(const char *op)
{
	printf("%s fail=%s\n", op, chelld_errname(errno));
	return 3;
}

/* Print the status of a reply; an error reply (no fields of the request's
 * reply type) is printed whole, and then true is returned. */
static bool show_status(const char *op, const struct chelld_rhdr *r)
{
	printf("%s status=%s", op, chelld_errname(r->status));
	if (r->h.type != (CHELLD_MSG_ERROR | CHELLD_REPLY))
		return false;
	printf(" error_reply=1 detail=\"%s\"\n", ((const struct chelld_error_reply *)r)->detail);
	return true;
}

static int op_open(int s, const char *op, char *args, int nofd, uint32_t *last)
{
	char *path = strtok(args, ":");
	char *mode = nofd ? NULL : strtok(NULL, ":");
	char *fdpath = nofd ? NULL : strtok(NULL, ":");
	if (!path || (!nofd && !mode)) {
		fprintf(stderr, "chelld_client: bad operation '%s'\n", op);
		exit(2);
	}
	int fd = -1;
	if (!nofd) {
		int fl = strcmp(mode, "rw") == 0   ? O_RDWR
			 : strcmp(mode, "wo") == 0 ? O_WRONLY
			 : strcmp(mode, "opath") == 0 ? O_PATH
						      : O_RDONLY;
		fd = open(fdpath ? fdpath : path, fl | O_CLOEXEC);
		if (fd < 0) {
			printf("open local=%s\n", chelld_errname(errno));
			return 0;
		}
	}
	static struct chelld_open m;
	memset(&m, 0, sizeof m);
	chelld_hdr_init(&m.h, CHELLD_MSG_OPEN_FILE, sizeof m, ++seq);
	snprintf(m.path, sizeof m.path, "%s", path);
	struct chelld_open_reply r;
	int rc = chelld_call(s, &m, sizeof m, fd, &r, sizeof r);
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		return breakdown("open");
	if (show_status("open", &r.r))
		return 0;
	if (r.r.status == 0) {
		*last = r.file_id;
		printf(" id=%u access=%s%s size=%llu", r.file_id,
		       r.access & CHELLD_ACC_READ ? "r" : "", r.access & CHELLD_ACC_WRITE ? "w" : "",
		       (unsigned long long)r.size);
	} else if (r.r.h.type == (CHELLD_MSG_OPEN_FILE | CHELLD_REPLY)) {
		printf(" detail=\"%s\"", r.detail);
	}
	printf("\n");
	return 0;
}

static int op_raw(int s, const char *kind)
{
	static char buf[CHELLD_MSG_MAX + 256];
	memset(buf, 0, sizeof buf);
	struct chelld_stats *st = (struct chelld_stats *)buf;
	chelld_hdr_init(&st->h, CHELLD_MSG_STATS, sizeof *st, ++seq);
	size_t len = sizeof *st;
	int fd = -1;
	if (strcmp(kind, "short") == 0)
		len = 8;
	else if (strcmp(kind, "badmagic") == 0)
		st->h.magic = 0xdeadbeef;
	else if (strcmp(kind, "oversize") == 0)
		len = sizeof buf, st->h.length = (uint32_t)len;
	else if (strcmp(kind, "unknown") == 0)
		st->h.type = 99;
	else if (strcmp(kind, "badlen") == 0)
		st->h.length = 1000;
	else if (strcmp(kind, "wrongsize") == 0)
		st->h.type = CHELLD_MSG_MAP;
	else if (strcmp(kind, "badversion") == 0)
		st->h.version = 9;
	else if (strcmp(kind, "fd-on-stats") == 0)
		fd = 0;
	else if (strcmp(kind, "garbage") == 0) {
		for (size_t i = 0; i < 300; i++)
			buf[i] = (char)(i * 37 + 11);
		len = 300;
	} else {
		fprintf(stderr, "chelld_client: unknown raw kind '%s'\n", kind);
		exit(2);
	}
	if (chelld_send(s, buf, len, fd) < 0)
		return breakdown("raw");
	char rb[CHELLD_MSG_MAX + 1];
	long n = chelld_recv(s, rb, sizeof rb);
	if (n < 0)
		return breakdown("raw");
	const struct chelld_rhdr *r = (const void *)rb;
	if ((size_t)n < sizeof *r || r->h.magic != CHELLD_MAGIC || r->h.length != (uint32_t)n) {
		errno = EPROTO;
		return breakdown("raw");
	}
	if (!show_status("raw", r))
		printf(" type=0x%x\n", r->h.type);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: chelld_client SOCKET OP...\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int s = chelld_connect(argv[1]);
	if (s < 0)
		return breakdown("connect");
	uint32_t last = 0;
	for (int i = 2; i < argc; i++) {
		char *op = strdup(argv[i]);
		char *name = strtok(op, ":");
		char *rest = strtok(NULL, "");
		int rc = 0;
		if (!name) {
			rc = 2;
		} else if (strcmp(name, "hello") == 0) {
			struct chelld_hello m = {0};
			struct chelld_hello_reply r;
			chelld_hdr_init(&m.h, CHELLD_MSG_HELLO, sizeof m, ++seq);
			m.version = rest ? (uint32_t)strtoul(rest, NULL, 0) : CHELLD_VERSION;
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("hello");
			else {
				if (!show_status("hello", &r.r))
					printf(" version=%u chunk=%u\n", r.version, r.chunk_size);
			}
		} else if (strcmp(name, "open") == 0 || strcmp(name, "open-nofd") == 0) {
			rc = op_open(s, argv[i], rest ? rest : "", strcmp(name, "open-nofd") == 0, &last);
		} else if (strcmp(name, "map") == 0) {
			char *id = strtok(rest, ":"), *chunk = strtok(NULL, ":"), *rw = strtok(NULL, ":");
			if (!id || !chunk || !rw) {
				fprintf(stderr, "chelld_client: bad operation '%s'\n", argv[i]);
				return 2;
			}
			struct chelld_map m = {0};
			struct chelld_map_reply r;
			chelld_hdr_init(&m.h, CHELLD_MSG_MAP, sizeof m, ++seq);
			m.file_id = strcmp(id, "last") == 0 ? last : (uint32_t)strtoul(id, NULL, 0);
			m.chunk = strtoull(chunk, NULL, 0);
			m.want_write = rw[0] == 'w';
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("map");
			else {
				if (!show_status("map", &r.r))
					printf(" size=%llu offset=%llu length=%llu chunk=%u\n",
				       (unsigned long long)r.file_size,
				       (unsigned long long)r.backing_offset,
				       (unsigned long long)r.length, r.chunk_size);
			}
		} else if (strcmp(name, "stats") == 0) {
			struct chelld_stats m = {0};
			struct chelld_stats_reply r;
			chelld_hdr_init(&m.h, CHELLD_MSG_STATS, sizeof m, ++seq);
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("stats");
			else {
				if (!show_status("stats", &r.r))
					printf(" pid=%u clients=%u requests=%llu opens=%llu opens_refused=%llu "
				       "maps=%llu maps_refused=%llu malformed=%llu\n",
				       r.pid, r.clients, (unsigned long long)r.requests,
				       (unsigned long long)r.opens, (unsigned long long)r.opens_refused,
				       (unsigned long long)r.maps, (unsigned long long)r.maps_refused,
				       (unsigned long long)r.malformed);
			}
		} else if (strcmp(name, "bye") == 0) {
			struct chelld_bye m = {0};
			struct chelld_rhdr r;
			chelld_hdr_init(&m.h, CHELLD_MSG_BYE, sizeof m, ++seq);
			if (chelld_call(s, &m, sizeof m, -1, &r, sizeof r) < 0)
				rc = breakdown("bye");
			else {
				if (!show_status("bye", &r))
					printf("\n");
			}
		} else if (strcmp(name, "sleep") == 0) {
			long ms = rest ? strtol(rest, NULL, 10) : 0;
			struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		} else if (strcmp(name, "raw") == 0) {
			rc = op_raw(s, rest ? rest : "");
		} else {
			fprintf(stderr, "chelld_client: unknown operation '%s'\n", argv[i]);
			rc = 2;
		}
		free(op);
		if (rc)
			return rc;
	}
	close(s);
	return 0;
}
