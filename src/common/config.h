/* SPDX-License-Identifier: MIT */
/*
 * Run-time configuration, shared by libchell.so and the chell CLI.
 *
 * Every setting has one key (used in the config file), one environment
 * variable and a type. Precedence, lowest first: built-in default, config
 * file (CHELL_CONFIG or --config), environment. The CLI turns its flags into
 * environment variables, so a program started by `chell run` and one started
 * with LD_PRELOAD and the same variables behave the same.
 *
 * This module must not use stdio or any interposed libc call: the preloaded
 * library loads it from its constructor. It reads files with raw system
 * calls (sys.h) and allocates with malloc only.
 */
#ifndef CHELL_CONFIG_H
#define CHELL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum chell_setting_type {
	CHELL_T_STRING,   /* any text */
	CHELL_T_PATH,     /* a path; "%p" is replaced by the pid when used */
	CHELL_T_PATHLIST, /* ':'-separated absolute paths; repeated keys in a file append */
	CHELL_T_ENUM,     /* one of `choices` ('|'-separated) */
	CHELL_T_BOOL,     /* 1/0, true/false, yes/no, on/off */
	CHELL_T_UINT,     /* decimal unsigned integer, at most 2^63-1 */
	CHELL_T_SIZE,     /* integer with optional K/M/G/T suffix (powers of 1024) */
	CHELL_T_STACK,    /* a handler stack: NAME or shadow:NAME (registry.h) */
	CHELL_T_CHECKABLE,/* a handler shadow can check (registry.def) */
	CHELL_T_ROUTES,   /* PREFIX=STACK rules, ':'-separated; repeated keys in a file append */
	CHELL_T_NUMBER,   /* non-negative decimal number, a fraction allowed: 0.5, 350, 2.25 */
};

struct chell_setting_def {
	const char *key;      /* "trace.file" */
	const char *env;      /* "CHELL_TRACE_FILE" */
	enum chell_setting_type type;
	const char *def;      /* default, as text ("" = unset) */
	const char *choices;  /* CHELL_T_ENUM only: "quiet|error|info|debug" */
	const char *help;     /* one line for `chell config --help` and docs */
};

/* The table of all settings, terminated by an entry with key == NULL. */
extern const struct chell_setting_def chell_setting_defs[];

struct chell_config {
	/* values[i] is the text of chell_setting_defs[i] (never NULL; "" if unset) */
	char **values;
	int count;
	/* where each value came from: "default", "file:<path>:<line>", "env" */
	char **origins;
};

/*
 * Load defaults, then the file named by CHELL_CONFIG (if set), then the
 * environment (`envp`, or the process environment if NULL). Every value is
 * validated. On error returns -1 and writes one line naming the setting, its
 * source and what is wrong into err, e.g.
 *   "bad value 'fast' for setting mode (CHELL_MODE): expected one of posix|trace|shadow"
 *   "/etc/chell.conf:3: unknown setting 'trace.fil'"
 */
int chell_config_load(struct chell_config *cfg, char *const *envp, char *err, size_t errlen);
void chell_config_free(struct chell_config *cfg);

/* Check one value for one key; 0 or -1 with a message as above. */
int chell_config_check(const char *key, const char *value, const char *origin, char *err, size_t errlen);

/* Lookups on a loaded config. Unknown keys are a programming error (abort). */
const char *chell_config_str(const struct chell_config *cfg, const char *key);
int chell_config_bool(const struct chell_config *cfg, const char *key);
uint64_t chell_config_u64(const struct chell_config *cfg, const char *key); /* UINT and SIZE */
/* A NUMBER; -1 when it is unset (""). */
double chell_config_num(const struct chell_config *cfg, const char *key);
/* Split a PATHLIST: returns the number of entries, *out is a malloc'd NULL-terminated array. */
int chell_config_paths(const struct chell_config *cfg, const char *key, char ***out);

/* The one number parser (NUMBER): digits, at most one '.', then digits;
 * 0 or -1 malformed. No sign, exponent, inf or nan, whatever the locale. */
int chell_parse_number(const char *v, double *out);
/* The one size parser (see config.c): 0, -1 malformed, -2 too large. */
int chell_parse_size(const char *v, uint64_t *out);

/* Index of a key in chell_setting_defs, or -1. */
int chell_setting_index(const char *key);

#endif
