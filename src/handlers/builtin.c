/* SPDX-License-Identifier: MIT */
/*
 * The built-in handlers' method tables, bound to the registry's rows
 * (src/common/registry.def) in registry order: the one place libchell.so
 * learns which handlers it has.
 */
#include "chell/handler.h"

#define CHELL_HANDLER(name, checkable, catch_all, own_dir, summary) \
	extern const struct chell_handler chell_##name##_handler;
#include "common/registry.def"

__attribute__((visibility("hidden"))) const struct chell_handler *const chell_builtin_handlers[] = {
#define CHELL_HANDLER(name, checkable, catch_all, own_dir, summary) &chell_##name##_handler,
#include "common/registry.def"
	NULL,
};
