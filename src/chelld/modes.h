/* SPDX-License-Identifier: MIT */
/*
 * Cache modes per backing directory, pins, the sequential cutoff and the
 * per-file cap (docs/CACHE.md, "Cache modes"). The manager decides; the
 * client learns a file's mode from the flags of every OPEN_FILE, MAP and
 * INVAL reply (protocol.h, CHELLD_FILE_*).
 *
 * The modes and pins a manager starts with come from its options
 * (cache.mode, cache.mode_rules) and from the switches and pins of its
 * last run, which SET_MODE and PIN keep in the pool (modes_state.c:
 * DIR/modes.state). A switch drains first (write-back, then revocation of
 * the directory's chunks), so nothing written under the old mode is lost
 * and every client remaps under the new one.
 */
#ifndef CHELLD_MODES_H
#define CHELLD_MODES_H

#include "chelld/modes_state.h"
#include "chelld/server.h"

/* Check cfg->mode_rules (DIR=MODE entries separated by ':' before a '/';
 * every DIR a backing directory or below one). 0, or -1 with a sentence
 * naming the setting in err. */
int modes_check(const struct chelld_config *cfg, char *err, size_t len);
/* Attach the modes to the engine (the rules parsed again). 0 or -1. */
int modes_init(struct engine *c, char *err, size_t len);
void modes_fini(struct engine *c);
/* modes_parse, modes_name: modes_state.h */

/* A file's mode and pin from its path (a new cfile, a new path). */
void modes_file_init(struct engine *c, struct cfile *f);
/* OPEN_FILE registered f (size: the backing file's now): pass-through,
 * or a file over the cap, leaves the cache (written back, dropped,
 * bypassed until its last registration closes). */
void modes_file_registered(struct engine *c, struct cfile *f, uint64_t size);
/* CHELLD_FILE_WTHROUGH / CHELLD_FILE_WAROUND of f's mode. */
uint32_t modes_flags(const struct cfile *f);
/* Before a MAP is served: 1 when the reply is decided here (r->flags set:
 * BYPASS for a file that reached the cap, WAROUND for a write under
 * write-around or read-only, SKIP for a sequential read past the cutoff;
 * no descriptor), 0 to serve it (r->flags has the mode; *read_only: hand
 * out a read-only chunk file even to a writable registration). */
int modes_map(struct engine *c, struct cfile *f, const struct chelld_map *m,
	      struct chelld_map_reply *r, bool *read_only);
/* Some file may not be cached at all (pass-through, cache.file_max):
 * HELLO tells clients to register at open (CHELLD_HELLO_MODES). */
bool modes_declines(const struct engine *c);
/* Eviction leaves the slot alone: its file is pinned. */
bool modes_slot_pinned(const struct engine *c, uint32_t slot);

bool do_inval(struct server *s, struct client *c, const struct chelld_inval *m);
bool do_set_mode(struct server *s, struct client *c, const struct chelld_set_mode *m);
bool do_pin(struct server *s, struct client *c, const struct chelld_pin *m);
bool do_rule(struct server *s, struct client *c, const struct chelld_rule *m);

#endif
