/* SPDX-License-Identifier: MIT */
/*
 * Handler stacks: built at start-up from the routing rules' stack names
 * (registry.h), one per distinct name, with the built-in handlers bound in
 * src/handlers/builtin.c and external ones loaded from handlers.dir.
 *
 * A stack's id (ofd->stack_id) is its index in the table plus a hash of its
 * name: a new image after exec builds the same table from the same settings
 * and so finds the same ids; if the settings changed in between, an
 * inherited descriptor whose stack is gone is not adopted (it stays on the
 * kernel path) instead of landing on the wrong handlers.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"
#include "registry.h"

extern const struct chell_handler *const chell_builtin_handlers[];

#define MAX_STACKS 32
static struct chell_stack stacks[MAX_STACKS];
static uint32_t nstacks;
/* Every handler of every stack, each once, in the order first met (top
 * down): proc_init and proc_event run once per handler whatever the number
 * of rules that use it (nib.h). */
const struct chell_handler *chell_handlers_in_use[MAX_IN_USE];
int chell_nhandlers_in_use;

const struct chell_stack *chell_mode_stack;
bool chell_stack_routes_stat;
bool chell_stack_routes_truncate;

static uint32_t name_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h & 0xffffff;
}

static const struct chell_handler *builtin(const char *name)
{
	for (int i = 0; chell_builtin_handlers[i]; i++)
		if (strcmp(chell_builtin_handlers[i]->name, name) == 0)
			return chell_builtin_handlers[i];
	return NULL;
}

/* Why handler h (asked for as `name`) cannot run here, or NULL if it can:
 * built against another ABI, more per-OFD state than a layer has, or not
 * the handler it was asked for. (Start-up is single-threaded: one buffer.) */
static const char *refused(const struct chell_handler *h, const char *name)
{
	static char buf[160];
	if (h->abi != CHELL_HANDLER_ABI)
		snprintf(buf, sizeof buf,
			 "it was built for handler ABI %u, this libchell.so has ABI %u (rebuild it "
			 "against this chell/handler.h)",
			 h->abi, CHELL_HANDLER_ABI);
	else if (h->priv_size > CHELL_PRIV_BYTES)
		snprintf(buf, sizeof buf, "its per-OFD state is %u bytes, more than CHELL_PRIV_BYTES (%d)",
			 h->priv_size, CHELL_PRIV_BYTES);
	else if (!h->name || strcmp(h->name, name) != 0)
		snprintf(buf, sizeof buf, "it calls itself '%.40s', not '%s'", h->name ? h->name : "",
			 name);
	else
		return NULL;
	return buf;
}

/* dlopen NAME.so from handlers.dir and check it is a handler we can run. */
static const struct chell_handler *external(const char *key, const char *name, char *err,
					    size_t errlen)
{
	char path[4096], why[512];
	if (chell_handler_locate(&chell_cfg, name, path, sizeof path, why, sizeof why)) {
		snprintf(err, errlen, "setting %s: %s", key, why);
		return NULL;
	}
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		snprintf(err, errlen, "setting %s: cannot load handler %s from %s: %s", key, name,
			 path, dlerror());
		return NULL;
	}
	const struct chell_handler *h = dlsym(dl, "chell_handler_entry");
	const char *refusal =
		h ? refused(h, name)
		  : "it exports no chell_handler_entry (CHELL_HANDLER_ENTRY in chell/handler.h)";
	if (refusal) {
		snprintf(err, errlen, "setting %s: handler %s (%s) refused: %s", key, name, path, refusal);
		dlclose(dl);
		return NULL;
	}
	return h; /* never closed: its code serves descriptors until exit */
}

static const struct chell_handler *handler(const char *key, const char *name, char *err,
					   size_t errlen)
{
	const struct chell_handler *h = builtin(name);
	const char *refusal = h ? refused(h, name) : NULL;
	if (refusal) { /* a built-in handler defined without CHELL_HANDLER_PRIV */
		snprintf(err, errlen, "setting %s: built-in handler %s refused: %s", key, name, refusal);
		return NULL;
	}
	for (int i = 0; !h && i < chell_nhandlers_in_use; i++)
		if (strcmp(chell_handlers_in_use[i]->name, name) == 0)
			h = chell_handlers_in_use[i];
	if (!h)
		h = external(key, name, err, errlen);
	return h;
}

static int note_in_use(const struct chell_handler *h, char *err, size_t errlen)
{
	for (int i = 0; i < chell_nhandlers_in_use; i++)
		if (chell_handlers_in_use[i] == h)
			return 0;
	if (chell_nhandlers_in_use == MAX_IN_USE) {
		snprintf(err, errlen, "too many handlers in use (at most %d)", MAX_IN_USE);
		return -1;
	}
	chell_handlers_in_use[chell_nhandlers_in_use++] = h;
	return 0;
}

const struct chell_stack *stack_get(const struct chell_stack_spec *sp, const char *key, char *err,
				    size_t errlen)
{
	char name[2 * CHELL_HANDLER_NAME_MAX + 2];
	chell_stack_spec_format(sp, name, sizeof name);
	for (uint32_t i = 0; i < nstacks; i++)
		if (strcmp(stacks[i].mode, name) == 0)
			return &stacks[i];
	if (nstacks == MAX_STACKS) {
		snprintf(err, errlen, "setting %s: too many different stacks (at most %d)", key,
			 MAX_STACKS);
		return NULL;
	}
	struct chell_stack st = {0};
	const struct chell_handler *top = handler(key, sp->top, err, errlen);
	if (!top)
		return NULL;
	st.handlers[st.depth++] = top;
	if (sp->under[0]) {
		const struct chell_handler *u = handler(key, sp->under, err, errlen);
		if (!u)
			return NULL;
		st.handlers[st.depth++] = u;
	}
	if (top != &chell_posix_handler)
		st.handlers[st.depth++] = &chell_posix_handler;
	for (int i = 0; i < st.depth; i++) {
		const struct chell_handler *h = st.handlers[i];
		if (note_in_use(h, err, errlen))
			return NULL;
		/* Path calls are routed (which may cost a getcwd) only if some
		 * handler above the kernel wants them. */
		if (h != &chell_posix_handler) {
			st.routes_stat |= h->stat != NULL;
			st.routes_truncate |= h->truncate != NULL;
		}
	}
	chell_stack_routes_stat |= st.routes_stat;
	chell_stack_routes_truncate |= st.routes_truncate;
	st.mode = strdup(name);
	if (!st.mode) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	st.id = nstacks | name_hash(name) << 8;
	stacks[nstacks] = st;
	return &stacks[nstacks++];
}

void chell_stack_unroute_stat(const struct chell_handler *h)
{
	chell_stack_routes_stat = false;
	for (uint32_t i = 0; i < nstacks; i++) {
		struct chell_stack *st = &stacks[i];
		st->routes_stat = 0;
		for (int j = 0; j < st->depth; j++)
			if (st->handlers[j] != h && st->handlers[j] != &chell_posix_handler)
				st->routes_stat |= st->handlers[j]->stat != NULL;
		chell_stack_routes_stat |= st->routes_stat;
	}
}

const struct chell_stack *stack_by_id(uint32_t id)
{
	uint32_t i = id & 0xff;
	return i < nstacks && stacks[i].id == id ? &stacks[i] : NULL;
}

int stacks_proc_init(char *err, size_t errlen)
{
	for (int i = 0; i < chell_nhandlers_in_use; i++) {
		const struct chell_handler *h = chell_handlers_in_use[i];
		if (h->proc_init && h->proc_init() < 0) {
			snprintf(err, errlen, "handler '%s' failed to start", h->name);
			return -1;
		}
		chell_info("handler %s started", h->name);
	}
	return 0;
}

void stacks_proc_event(enum chell_op ev, long arg)
{
	for (int i = 0; i < chell_nhandlers_in_use; i++)
		if (chell_handlers_in_use[i]->proc_event)
			chell_handlers_in_use[i]->proc_event(ev, arg);
}

/* "direct, cache" */
void stacks_names(char *buf, size_t len)
{
	buf[0] = 0;
	for (uint32_t i = 0; i < nstacks; i++)
		snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", i ? ", " : "", stacks[i].mode);
}
