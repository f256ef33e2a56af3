/* SPDX-License-Identifier: MIT */
/* The request loop's state, shared by server.c (connections, parsing,
 * HELLO/OPEN_FILE/MAP/STATS/PATH/BYE) and ops.c (SYNC, TRUNCATE, FLUSH,
 * CLOSE, FILE_STAT, CHECK). */
#ifndef CHELLD_SERVER_H
#define CHELLD_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "chelld/engine.h"

#define MAX_FILES 4096 /* registrations per client */

/* A file a connection registered (OPEN_FILE), by Cnode: registering the
 * same file again adds to `count` and the access the descriptors prove. */
struct reg {
	uint32_t cnode;
	uint32_t access; /* CHELLD_ACC_* */
	uint32_t count;  /* OPEN_FILEs not yet CLOSEd */
	int fd;          /* the client's descriptor granting the most access */
};

struct client {
	int sock;
	uint64_t serial;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool hello;
	struct reg *regs;
	uint32_t nregs, cap;
	access_table access; /* the memfd sent with the HELLO reply, mapped */
	struct client *next;
};

struct server {
	const struct chelld_config *cfg;
	int ep, lfd, sfd, evfd;
	bool quit;          /* a worker read SIGTERM/SIGINT (under the cache lock) */
	struct client *clients;
	uint32_t nclients;
	struct timespec start;
	struct chelld_stats_reply st; /* counters, kept in reply form */
	struct engine engine;
};

/* Send a reply (with descriptor fd if >= 0); false if the client must be
 * dropped. */
bool chelld_reply(struct client *c, void *msg, size_t len, uint16_t type, uint32_t seq,
		  int status, int fd);
/* The same with nfds descriptors (at most FDPASS_MAX). */
bool chelld_reply_fds(struct client *c, void *msg, size_t len, uint16_t type, uint32_t seq,
		      int status, const int *fds, int nfds);
/* The registration of file_id (a Cnode id) on this connection, or NULL. */
struct reg *client_reg(struct client *c, uint32_t file_id);
/* Drop one count of a registration (all of them with `all`). */
void client_unregister(struct server *s, struct client *c, struct reg *r, bool all);

/* datapath.c */
bool do_hello(struct server *s, struct client *c, const struct chelld_hello *m);
/* Takes ownership of fd (kept on success, closed otherwise). */
bool do_open(struct server *s, struct client *c, const struct chelld_open *m, int fd);
bool do_map(struct server *s, struct client *c, const struct chelld_map *m);
bool do_overwrite(struct server *s, struct client *c, const struct chelld_overwrite *m);

/* ops.c */
bool do_sync(struct server *s, struct client *c, const struct chelld_sync *m);
bool do_truncate(struct server *s, struct client *c, const struct chelld_truncate *m);
bool do_flush(struct server *s, struct client *c, const struct chelld_flush *m);
bool do_close(struct server *s, struct client *c, const struct chelld_close *m);
bool do_file_stat(struct server *s, struct client *c, const struct chelld_file_stat *m);
bool do_check(struct server *s, struct client *c, const struct chelld_check *m);
void counts_add(struct chelld_client_counts *to, const struct chelld_client_counts *from);

#endif
