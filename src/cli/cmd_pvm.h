/* SPDX-License-Identifier: MIT */
/* Shared pieces of the `chell pvm` subcommands (cmd_pvm.c, cmd_pvm_tree.c). */
#ifndef CHELL_CLI_CMD_PVM_H
#define CHELL_CLI_CMD_PVM_H

#include <stdbool.h>
#include <stdint.h>

#include "chell/pvm.h"

struct pvm_opts {
	const char *pool, *app;
	bool json, repair, quiet;
	int keep;                 /* -1: not given */
	uint64_t restore;         /* 0: not given */
	uint64_t max_size;        /* for a pool put/import creates */
	struct pvm_pool *p;
	struct pvm_app *a;
};

/* The pvm.pool setting (NULL after an error message). */
const char *pvm_default_pool(void);
/* Open o->pool (creating it with o->max_size if create and it does not
 * exist) / o->app (creating it if create); 0, or 1 after a message. */
int pvm_open_pool(struct pvm_opts *o, int create);
int pvm_open_app(struct pvm_opts *o, int create);
/* Store the bytes of fd (size_hint bytes of a regular file; UINT64_MAX:
 * read to the end) as object `name`, replacing it in one transaction. */
int pvm_store_fd(struct pvm_app *a, const char *name, int fd, uint64_t size_hint, char *err, size_t errlen);

/* cmd_pvm_tree.c */
int pvm_import(struct pvm_opts *o, int argc, char **argv);
int pvm_export(struct pvm_opts *o, int argc, char **argv);

#endif
