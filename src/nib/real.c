/* SPDX-License-Identifier: MIT */
/* Resolution of the libc functions Chell interposes (see real.h). */
#include <dlfcn.h>

#include "real.h"
#include "nib.h"

#define CHELL_REAL_DEF(name, ret, args) ret(*chell_real_##name) args;
CHELL_REAL_LIST(CHELL_REAL_DEF)
#undef CHELL_REAL_DEF

void chell_real_resolve(void)
{
	/* Idempotent and race-free enough: every thread stores the same values. */
#define CHELL_REAL_RESOLVE(name, ret, args)                                       \
	if (!chell_real_##name)                                                   \
		*(void **)(&chell_real_##name) = dlsym(RTLD_NEXT, #name);         \
	if (!chell_real_##name)                                                   \
		chell_fatal("cannot resolve libc symbol '" #name "'");
	CHELL_REAL_LIST(CHELL_REAL_RESOLVE)
#undef CHELL_REAL_RESOLVE
}
