/* SPDX-License-Identifier: MIT */
/* Unit tests of the configuration loader (src/common/config.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Included, not linked, to test the static parsers (see CMakeLists.txt). */
#include "common/config.c"
#include "common/registry.h"

/* ---- helpers ---- */

static char tmpdir[] = "/tmp/chell-test-config-XXXXXX";

static int setup_dir(void **state)
{
	(void)state;
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Write `text` to a fresh file in tmpdir; returns its (static) path. */
static const char *write_conf(const char *name, const char *text, size_t len)
{
	static char path[256];
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	return path;
}
#define CONF(name, text) write_conf((name), (text), sizeof(text) - 1)

/* Load with exactly these environment entries (NULL-terminated list). */
static int load_env(struct chell_config *cfg, char *err, size_t errlen, ...)
{
	char *envp[16];
	int n = 0;
	va_list ap;
	va_start(ap, errlen);
	for (char *e; (e = va_arg(ap, char *)) != NULL && n < 15;)
		envp[n++] = e;
	va_end(ap);
	envp[n] = NULL;
	return chell_config_load(cfg, envp, err, errlen);
}

static char *env_config(const char *path)
{
	static char buf[300];
	snprintf(buf, sizeof buf, "CHELL_CONFIG=%s", path);
	return buf;
}

static const char *origin(const struct chell_config *cfg, const char *key)
{
	return cfg->origins[chell_setting_index(key)];
}

static void free_paths(char **p)
{
	for (char **q = p; *q; q++)
		free(*q);
	free(p);
}

/* Load a file that must fail; returns the error message (static). */
static const char *file_error(const char *name, const char *text, size_t len)
{
	static char err[1024];
	struct chell_config cfg = {0};
	const char *path = write_conf(name, text, len);
	err[0] = '\0';
	assert_int_equal(load_env(&cfg, err, sizeof err, env_config(path), NULL), -1);
	chell_config_free(&cfg);
	/* Every file error names the file. */
	assert_non_null(strstr(err, path));
	return err;
}
#define FILE_ERROR(name, text) file_error((name), (text), sizeof(text) - 1)

static void assert_contains(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("'%s' does not contain '%s'", hay, needle);
}

/* ---- defaults and table ---- */

static void test_defaults(void **state)
{
	(void)state;
	struct chell_config cfg = {0};
	char err[256] = "";
	assert_int_equal(load_env(&cfg, err, sizeof err, "HOME=/root", NULL), 0);
	assert_string_equal(err, "");
	assert_int_equal(cfg.count, n_settings());
	for (int i = 0; i < cfg.count; i++) {
		assert_string_equal(cfg.values[i], chell_setting_defs[i].def);
		assert_string_equal(cfg.origins[i], "default");
	}
	assert_string_equal(chell_config_str(&cfg, "mode"), "posix");
	assert_string_equal(chell_config_str(&cfg, "shadow.dir"), "/tmp/chell-shadow");
	assert_string_equal(chell_config_str(&cfg, "on_error"), "passthrough");
	assert_string_equal(chell_config_str(&cfg, "log.level"), "error");
	assert_int_equal(chell_config_u64(&cfg, "shadow.history"), 64);
	char **paths;
	assert_int_equal(chell_config_paths(&cfg, "paths", &paths), 0);
	assert_null(paths[0]);
	free_paths(paths);
	chell_config_free(&cfg);
	assert_null(cfg.values);
	chell_config_free(&cfg); /* twice is harmless */
}

/* Every default passes its own validation, and every key is unique and has an env var. */
static void test_table_consistent(void **state)
{
	(void)state;
	char err[256];
	static const char *const required[] = {
		"mode", "paths", "trace.file", "shadow.dir", "shadow.under_test", "shadow.history",
		"shadow.report", "log.level", "on_error", "stats.file"};
	for (size_t i = 0; i < sizeof required / sizeof *required; i++)
		assert_true(chell_setting_index(required[i]) >= 0);
	for (int i = 0; chell_setting_defs[i].key; i++) {
		const struct chell_setting_def *d = &chell_setting_defs[i];
		assert_int_equal(chell_setting_index(d->key), i);
		assert_int_equal(strncmp(d->env, "CHELL_", 6), 0);
		assert_non_null(d->help);
		assert_int_equal(d->type == CHELL_T_ENUM, d->choices != NULL);
		if (d->type == CHELL_T_ENUM || d->type == CHELL_T_UINT)
			assert_true(*d->def); /* these always have a value */
		if (chell_config_check(d->key, d->def, "default", err, sizeof err))
			fail_msg("default of %s is invalid: %s", d->key, err);
	}
	assert_int_equal(chell_setting_index("nope"), -1);
}

static void test_environ_when_envp_null(void **state)
{
	(void)state;
	struct chell_config cfg = {0};
	char err[256];
	setenv("CHELL_MODE", "trace", 1);
	assert_int_equal(chell_config_load(&cfg, NULL, err, sizeof err), 0);
	unsetenv("CHELL_MODE");
	assert_string_equal(chell_config_str(&cfg, "mode"), "trace");
	assert_string_equal(origin(&cfg, "mode"), "env");
	chell_config_free(&cfg);
}

/* ---- file parsing ---- */

static void test_file_sections(void **state)
{
	(void)state;
	const char *path = CONF("good.conf",
				"# a comment\n"
				"\n"
				"mode = trace\n"                       /* 3 */
				"  log.level=debug  \n"                /* 4 */
				"[trace]\n"
				"file = /tmp/trace.%p.log\n"           /* 6 */
				"[ shadow ]\n"
				"dir=/dev/shm/sh\n"                    /* 8 */
				"history = 10   # inline comment\n"    /* 9 */
				"[]\n"
				"path = /data\n"                       /* 11 */
				"path = /scratch/a#b\n"                /* 12: '#' inside a value */
				"paths = /c::/d:\n");                  /* 13 */
	struct chell_config cfg = {0};
	char err[512] = "";
	if (load_env(&cfg, err, sizeof err, env_config(path), NULL))
		fail_msg("%s", err);
	assert_string_equal(chell_config_str(&cfg, "mode"), "trace");
	assert_string_equal(chell_config_str(&cfg, "log.level"), "debug");
	assert_string_equal(chell_config_str(&cfg, "trace.file"), "/tmp/trace.%p.log");
	assert_string_equal(chell_config_str(&cfg, "shadow.dir"), "/dev/shm/sh");
	assert_int_equal(chell_config_u64(&cfg, "shadow.history"), 10);
	assert_string_equal(chell_config_str(&cfg, "paths"), "/data:/scratch/a#b:/c::/d:");
	assert_string_equal(chell_config_str(&cfg, "on_error"), "passthrough");

	char expect[400];
	snprintf(expect, sizeof expect, "file:%s:3", path);
	assert_string_equal(origin(&cfg, "mode"), expect);
	snprintf(expect, sizeof expect, "file:%s:6", path);
	assert_string_equal(origin(&cfg, "trace.file"), expect);
	snprintf(expect, sizeof expect, "file:%s:9", path);
	assert_string_equal(origin(&cfg, "shadow.history"), expect);
	snprintf(expect, sizeof expect, "file:%s:13", path);
	assert_string_equal(origin(&cfg, "paths"), expect);
	assert_string_equal(origin(&cfg, "on_error"), "default");

	char **p;
	assert_int_equal(chell_config_paths(&cfg, "paths", &p), 4);
	assert_string_equal(p[0], "/data");
	assert_string_equal(p[1], "/scratch/a#b");
	assert_string_equal(p[2], "/c");
	assert_string_equal(p[3], "/d");
	assert_null(p[4]);
	/* Entries are separate blocks: a caller may replace one (the router does). */
	free(p[1]);
	p[1] = strdup("/normalized");
	free_paths(p);
	chell_config_free(&cfg);
}

static void test_file_crlf_bom_last_wins(void **state)
{
	(void)state;
	const char *path = CONF("crlf.conf", "\xef\xbb\xbfmode = trace\r\nmode = shadow\r\n"
					     "[shadow]\r\nunder_test = trace");
	struct chell_config cfg = {0};
	char err[512] = "";
	if (load_env(&cfg, err, sizeof err, env_config(path), NULL))
		fail_msg("%s", err);
	assert_string_equal(chell_config_str(&cfg, "mode"), "shadow");
	assert_string_equal(chell_config_str(&cfg, "shadow.under_test"), "trace");
	chell_config_free(&cfg);
}

static void test_file_quotes_and_comments(void **state)
{
	(void)state;
	const char *path = CONF("quotes.conf",
				"[trace]   # the trace handler\n"
				"file = \"/tmp/a # b.log\"   # quoted: '#' kept, comment dropped\n"
				"[]\n"
				"paths = # nothing yet\n"
				"mode=\"trace\"\n");
	struct chell_config cfg = {0};
	char err[512] = "";
	if (load_env(&cfg, err, sizeof err, env_config(path), NULL))
		fail_msg("%s", err);
	assert_string_equal(chell_config_str(&cfg, "trace.file"), "/tmp/a # b.log");
	assert_string_equal(chell_config_str(&cfg, "paths"), "");
	assert_string_equal(chell_config_str(&cfg, "mode"), "trace");
	chell_config_free(&cfg);
	const char *msg = FILE_ERROR("q1.conf", "mode = \"trace\n");
	assert_contains(msg, ":1: missing closing '\"'");
	msg = FILE_ERROR("q2.conf", "\nmode = \"trace\" x\n");
	assert_contains(msg, ":2: unexpected text after the closing '\"'");
}

/* An empty value restores the default; for a path list it clears what came before. */
static void test_empty_value_resets(void **state)
{
	(void)state;
	const char *path = CONF("reset.conf", "path = /a\npaths =\npath = /b\nmode = trace\n");
	struct chell_config cfg = {0};
	char err[512] = "";
	assert_int_equal(load_env(&cfg, err, sizeof err, env_config(path), "CHELL_MODE=", NULL), 0);
	assert_string_equal(chell_config_str(&cfg, "paths"), "/b");
	assert_string_equal(chell_config_str(&cfg, "mode"), "posix");
	assert_string_equal(origin(&cfg, "mode"), "env");
	chell_config_free(&cfg);
}

/* ---- environment overrides ---- */

static void test_env_overrides_file(void **state)
{
	(void)state;
	const char *path = CONF("env.conf", "mode = trace\npath = /a\n[shadow]\nhistory = 5\n");
	struct chell_config cfg = {0};
	char err[512] = "";
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_MODE=shadow",
				  "CHELL_PATHS=/x:/y", env_config(path), "CHELL_MODE=trace", NULL),
			 0);
	/* The first occurrence wins, as with getenv(). */
	assert_string_equal(chell_config_str(&cfg, "mode"), "shadow");
	assert_string_equal(origin(&cfg, "mode"), "env");
	/* The environment replaces the file's list rather than appending to it. */
	assert_string_equal(chell_config_str(&cfg, "paths"), "/x:/y");
	assert_int_equal(chell_config_u64(&cfg, "shadow.history"), 5);
	/* Variables that are not settings are ignored (CHELL_LIB is the CLI's, for one). */
	chell_config_free(&cfg);
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_LIB=/x.so", "CHELL_BOGUS=1", NULL), 0);
	chell_config_free(&cfg);
}

/* ---- errors ---- */

static void test_error_unknown_key(void **state)
{
	(void)state;
	const char *err = FILE_ERROR("unknown.conf", "mode = posix\n[trace]\nfil = x\n");
	assert_contains(err, ":3: unknown setting 'trace.fil'");
	assert_contains(err, "did you mean 'trace.file'");
	err = FILE_ERROR("unknown2.conf", "\n\nzzzzzzzzz = 1\n");
	assert_contains(err, ":3: unknown setting 'zzzzzzzzz'");
	/* no far-fetched suggestion */
	assert_null(strstr(err, "did you mean"));
}

static void test_error_bad_enum(void **state)
{
	(void)state;
	/* A name that is not built in must be an external handler in
	 * handlers.dir: the message names the setting, the built-in handlers
	 * and the search. */
	static const char *const cases[][2] = {
		{"mode = fast\n",
		 ":1: bad value 'fast' for setting mode: 'fast' is not a built-in handler (posix, "
		 "trace, shadow, direct, cache, warp), and handlers.dir is empty"},
		{"mode = POSIX\n", ":1: bad value 'POSIX' for setting mode: 'POSIX' is not a handler name"},
		{"mode = shadow:shadow\n",
		 ":1: bad value 'shadow:shadow' for setting mode: shadow cannot check 'shadow': it "
		 "checks one of posix, trace, direct, cache"},
		{"route = /a=direct\nroute = /b=trace:posix\n",
		 ":2: bad value for setting route: 'trace:posix': only shadow takes a handler under test"},
		{"route = /a=direct\nroute = b=cache\n",
		 ":2: bad value for setting route: 'b=cache' is not PREFIX=STACK"},
		{"handlers.dir = /nonexistent\nroute = /a=upper\n",
		 ":2: bad value 'upper' for setting route: 'upper' is not a built-in handler (posix, "
		 "trace, shadow, direct, cache, warp), and no directory of handlers.dir (/nonexistent) has "
		 "upper.so"},
		{"[shadow]\nunder_test = shadow\n", ":2: bad value 'shadow' for setting shadow.under_test"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		assert_contains(file_error("enum.conf", cases[i][0], strlen(cases[i][0])), cases[i][1]);
}

static void test_error_no_equals_and_sections(void **state)
{
	(void)state;
	const char *err = FILE_ERROR("noeq.conf", "# ok\nmode trace\n");
	assert_contains(err, ":2: expected 'key = value', got 'mode trace'");
	err = FILE_ERROR("sec.conf", "[trace\nfile = x\n");
	assert_contains(err, ":1: malformed section header");
	err = FILE_ERROR("sec2.conf", "[tracing]\n");
	assert_contains(err, ":1: unknown section [tracing]");
	err = FILE_ERROR("nokey.conf", "mode = posix\n = posix\n");
	assert_contains(err, ":2: missing setting name");
	err = FILE_ERROR("nul.conf", "mode = posix\n\0\n");
	assert_contains(err, "NUL");
}

static void test_error_pathlist_relative(void **state)
{
	(void)state;
	const char *err = FILE_ERROR("rel.conf", "path = /ok\npath = data/x\n");
	assert_contains(err, ":2: bad value for setting paths: 'data/x' is not an absolute path");
	err = FILE_ERROR("rel2.conf", "paths = /a:b\n");
	assert_contains(err, "'b' is not an absolute path");
	char msg[256];
	assert_int_equal(chell_config_check("paths", "/a:./b", "env", msg, sizeof msg), -1);
	assert_contains(msg, "paths (CHELL_PATHS)");
	assert_contains(msg, "'./b'");
}

static void test_error_overlong(void **state)
{
	(void)state;
	size_t n = CFG_VALUE_MAX + 10;
	char *text = malloc(n + 32);
	assert_non_null(text);
	int k = sprintf(text, "trace.file = /");
	memset(text + k, 'a', n);
	strcpy(text + k + n, "\n");
	const char *err = file_error("long.conf", text, strlen(text));
	assert_contains(err, ":1: value for setting trace.file is too long");
	free(text);

	/* From the environment: names the variable, and the rest still loads. */
	char *env = malloc(n + 32);
	assert_non_null(env);
	k = sprintf(env, "CHELL_SHADOW_DIR=/");
	memset(env + k, 'b', n);
	env[k + n] = '\0';
	struct chell_config cfg = {0};
	char msg[512];
	assert_int_equal(load_env(&cfg, msg, sizeof msg, env, "CHELL_MODE=trace", NULL), -1);
	assert_contains(msg, "shadow.dir (CHELL_SHADOW_DIR) is too long");
	assert_string_equal(chell_config_str(&cfg, "shadow.dir"), "/tmp/chell-shadow");
	assert_string_equal(chell_config_str(&cfg, "mode"), "trace");
	chell_config_free(&cfg);
	free(env);
}

static void test_error_bad_uint(void **state)
{
	(void)state;
	const char *err = FILE_ERROR("uint.conf", "[shadow]\nhistory = -1\n");
	assert_contains(err, ":2: bad value '-1' for setting shadow.history: expected an unsigned");
	err = FILE_ERROR("uint2.conf", "shadow.history = 9223372036854775808\n");
	assert_contains(err, "shadow.history: too large");
}

static void test_error_env_value(void **state)
{
	(void)state;
	struct chell_config cfg = {0};
	char err[512];
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_MODE=fast", NULL), -1);
	assert_string_equal(err, "bad value 'fast' for setting mode (CHELL_MODE): 'fast' is not a "
				 "built-in handler (posix, trace, shadow, direct, cache, warp), and "
				 "handlers.dir is empty so no external handler fast.so can be found");
	/* The bad value is not applied; the config is still complete and usable. */
	assert_string_equal(chell_config_str(&cfg, "mode"), "posix");
	chell_config_free(&cfg);
}

static void test_error_missing_file(void **state)
{
	(void)state;
	struct chell_config cfg = {0};
	char err[512];
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_CONFIG=/nonexistent/chell.conf",
				  "CHELL_ON_ERROR=abort", NULL),
			 -1);
	assert_contains(err, "cannot open config file /nonexistent/chell.conf");
	/* on_error must still be known to a library that has to decide what to do. */
	assert_string_equal(chell_config_str(&cfg, "on_error"), "abort");
	chell_config_free(&cfg);
	assert_int_equal(load_env(&cfg, err, sizeof err, env_config(tmpdir), NULL), -1);
	assert_contains(err, "Is a directory");
	chell_config_free(&cfg);
}

/* The first error is reported; later valid lines still apply, later bad ones do not. */
static void test_first_error_wins(void **state)
{
	(void)state;
	const char *path = CONF("multi.conf", "mode = Fast\non_error = abort\nlog.level = loud\n");
	struct chell_config cfg = {0};
	char err[512];
	assert_int_equal(load_env(&cfg, err, sizeof err, env_config(path), "CHELL_SHADOW_HISTORY=x",
				  NULL),
			 -1);
	assert_contains(err, ":1: bad value 'Fast' for setting mode");
	assert_string_equal(chell_config_str(&cfg, "on_error"), "abort");
	assert_string_equal(chell_config_str(&cfg, "log.level"), "error");
	assert_int_equal(chell_config_u64(&cfg, "shadow.history"), 64);
	chell_config_free(&cfg);
}

static void test_check_origins(void **state)
{
	(void)state;
	char err[256];
	assert_int_equal(chell_config_check("mode", "trace", NULL, err, sizeof err), 0);
	assert_int_equal(chell_config_check("mode", "X", "option --mode", err, sizeof err), -1);
	assert_contains(err, "option --mode: bad value 'X' for setting mode:");
	assert_int_equal(chell_config_check("mode", "X", "file:/f.conf:7", err, sizeof err), -1);
	assert_contains(err, "/f.conf:7: bad value 'X' for setting mode:");
	assert_int_equal(chell_config_check("mod", "x", NULL, err, sizeof err), -1);
	assert_string_equal(err, "unknown setting 'mod' (did you mean 'mode'?)");
	/* A tiny buffer is truncated, never overrun. */
	char small[8];
	memset(small, 'Z', sizeof small);
	assert_int_equal(chell_config_check("mode", "X", "file:/f.conf:7", small, 4), -1);
	assert_int_equal(strlen(small), 3);
	assert_int_equal(small[4], 'Z');
}

/* ---- typed parsers ---- */

static void test_size_suffixes(void **state)
{
	(void)state;
	static const struct {
		const char *in;
		uint64_t out;
	} ok[] = {
		{"0", 0},
		{"4096", 4096},
		{"64K", 64ull << 10},
		{"64k", 64ull << 10},
		{"16M", 16ull << 20},
		{"2g", 2ull << 30},
		{"1T", 1ull << 40},
		{"8388607T", 8388607ull << 40},
		{"9223372036854775807", 9223372036854775807ull},
		/* chelld and `chell pool` always took these; one parser now */
		{"1KB", 1ull << 10},
		{"16KiB", 16ull << 10},
		{"2GB", 2ull << 30},
	};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
		uint64_t v = 1234;
		if (chell_parse_size(ok[i].in, &v))
			fail_msg("'%s' rejected", ok[i].in);
		assert_int_equal(v, ok[i].out);
	}
	static const char *const bad[] = {"K", "1X", "1XB", "1B", "1KBB", "1Kib", " 1", "1 ", "-1", "+1", "0x10", "1.5M"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		uint64_t v;
		if (chell_parse_size(bad[i], &v) != -1)
			fail_msg("'%s' accepted", bad[i]);
	}
	uint64_t v;
	assert_int_equal(chell_parse_size("8388608T", &v), -2);
	assert_int_equal(chell_parse_size("9223372036854775808", &v), -2);

	/* The message names the setting and the accepted forms. */
	const struct chell_setting_def d = {"cache.size", "CHELL_CACHE_SIZE", CHELL_T_SIZE, "",
					    NULL, "test"};
	char err[256];
	assert_int_equal(check_value(&d, "12Q", "env", err, sizeof err), -1);
	assert_string_equal(err, "bad value '12Q' for setting cache.size (CHELL_CACHE_SIZE): "
				 "expected a size such as 4096, 64K, 16M, 2G or 1T");
	assert_int_equal(check_value(&d, "99999999T", NULL, err, sizeof err), -1);
	assert_contains(err, "cache.size: too large");
	assert_int_equal(check_value(&d, "1G", NULL, err, sizeof err), 0);
}

static void test_bools(void **state)
{
	(void)state;
	static const char *const yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
	static const char *const no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
		int b = 0;
		assert_int_equal(parse_bool(yes[i], &b), 0);
		assert_int_equal(b, 1);
	}
	for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
		int b = 1;
		assert_int_equal(parse_bool(no[i], &b), 0);
		assert_int_equal(b, 0);
	}
	static const char *const bad[] = {"2", "y", "enable", "truee", " on", ""};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		int b;
		if (parse_bool(bad[i], &b) == 0)
			fail_msg("'%s' accepted", bad[i]);
	}
	const struct chell_setting_def d = {"trace.data", "CHELL_TRACE_DATA", CHELL_T_BOOL, "0",
					    NULL, "test"};
	char err[256];
	assert_int_equal(check_value(&d, "maybe", "file:/c.conf:2", err, sizeof err), -1);
	assert_string_equal(err, "/c.conf:2: bad value 'maybe' for setting trace.data: expected a "
				 "boolean (1/0, true/false, yes/no, on/off)");
	assert_int_equal(check_value(&d, "off", NULL, err, sizeof err), 0);
}

static void test_uint(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(parse_uint("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse_uint("007", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(parse_uint("9223372036854775807", &v), 0);
	assert_int_equal(v, 9223372036854775807ull);
	assert_int_equal(parse_uint("9223372036854775808", &v), -2);
	assert_int_equal(parse_uint("18446744073709551616", &v), -2);
	assert_int_equal(parse_uint("1K", &v), -1);
	assert_int_equal(parse_uint("", &v), -1);
	assert_int_equal(parse_uint("0x1", &v), -1);

	struct chell_config cfg = {0};
	char err[256];
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_SHADOW_HISTORY=1000", NULL), 0);
	assert_int_equal(chell_config_u64(&cfg, "shadow.history"), 1000);
	chell_config_free(&cfg);
}

static void test_pathlist_split(void **state)
{
	(void)state;
	struct chell_config cfg = {0};
	char err[256];
	assert_int_equal(load_env(&cfg, err, sizeof err, "CHELL_PATHS=:/a/b::/c/:", NULL), 0);
	char **p;
	assert_int_equal(chell_config_paths(&cfg, "paths", &p), 2);
	assert_string_equal(p[0], "/a/b");
	assert_string_equal(p[1], "/c/");
	assert_null(p[2]);
	free_paths(p);
	chell_config_free(&cfg);
	assert_int_equal(chell_config_check("paths", "/", NULL, err, sizeof err), 0);
	assert_int_equal(chell_config_check("paths", "relative", NULL, err, sizeof err), -1);
}

static void test_enum_exact(void **state)
{
	(void)state;
	char err[256];
	/* Prefixes, supersets and case variants of a choice are not the choice:
	 * the ones that are not even handler names fail on their own; the
	 * others could be external handlers, and fail at load (no handlers.dir). */
	static const char *const bad[] = {"POSIX", "trace|shadow", "|", " posix", "trace:posix",
					  "shadow:", "shadow:pos"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		if (chell_config_check("mode", bad[i], NULL, err, sizeof err) == 0)
			fail_msg("mode '%s' accepted", bad[i]);
	static const char *const not_built_in[] = {"pos", "posixx"};
	for (size_t i = 0; i < sizeof not_built_in / sizeof *not_built_in; i++) {
		struct chell_config cfg = {0};
		char env[64];
		snprintf(env, sizeof env, "CHELL_MODE=%s", not_built_in[i]);
		if (load_env(&cfg, err, sizeof err, env, NULL) == 0)
			fail_msg("mode '%s' loaded", not_built_in[i]);
		chell_config_free(&cfg);
	}
	static const char *const good[] = {"posix", "trace", "shadow", "direct", "cache",
					   "shadow:direct", "shadow:cache", "shadow:trace"};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		assert_int_equal(chell_config_check("mode", good[i], NULL, err, sizeof err), 0);
}

/* ---- routing rules (registry.c) ---- */

/* The rules of an environment, as "PREFIX=STACK/from[*]" words ('*': by
 * mount type; "*" as PREFIX: the catch-all), or the error. */
static const char *rules_of(char *e1, char *e2, char *e3)
{
	static char out[1024];
	struct chell_config cfg = {0};
	struct chell_routes rs;
	char err[512];
	out[0] = 0;
	assert_int_equal(load_env(&cfg, err, sizeof err, e1, e2, e3, NULL), 0);
	if (chell_routes_build(&cfg, &rs, err, sizeof err)) {
		snprintf(out, sizeof out, "error: %s", err);
	} else {
		for (int i = 0; i < rs.n; i++) {
			char st[80];
			chell_stack_spec_format(&rs.r[i].stack, st, sizeof st);
			snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s=%s/%s%s",
				 i ? " " : "", rs.r[i].catch_all ? "*" : rs.r[i].prefix, st,
				 rs.r[i].from, rs.r[i].by_mount ? "*" : "");
		}
		chell_routes_free(&rs);
	}
	chell_config_free(&cfg);
	return out;
}

static void test_routes_build(void **state)
{
	(void)state;
	static const struct {
		char *env[3];
		const char *rules;
	} cases[] = {
		/* longest prefix first whatever the order given; normalised; the
		 * catch-all last; /a/bb is not under /a/b */
		{{"CHELL_ROUTE=/a=direct:/a/b//c/..=trace:/a/bb=cache", "CHELL_MODE=shadow:trace"},
		 "/a/bb=cache/route /a/b=trace/route /a=direct/route *=shadow:trace/mode"},
		/* the one-rule forms, as before: mode + paths; direct alone by
		 * mount type; cache alone on its backing directories; plain
		 * shadow takes shadow.under_test, and shadow:posix is shadow */
		{{"CHELL_MODE=trace", "CHELL_PATHS=/x:/y/z"}, "/y/z=trace/paths /x=trace/paths"},
		{{"CHELL_MODE=direct"}, "*=direct/mode*"},
		{{"CHELL_MODE=cache", "CHELL_CACHE_BACKING=/bk"}, "/bk=cache/cache.backing"},
		{{"CHELL_MODE=shadow", "CHELL_SHADOW_UNDER_TEST=direct", "CHELL_PATHS=/s"},
		 "/s=shadow:direct/paths"},
		{{"CHELL_MODE=shadow:posix", "CHELL_PATHS=/s"}, "/s=shadow/paths"},
		/* a shadow:NAME catch-all serves what NAME's would (registry.def) */
		{{"CHELL_MODE=shadow:cache", "CHELL_CACHE_BACKING=/bk"}, "/bk=shadow:cache/cache.backing"},
		{{"CHELL_MODE=shadow:direct"}, "*=shadow:direct/mode*"},
		/* with routes, posix (the default) takes nothing; another mode the rest */
		{{"CHELL_ROUTE=/a=direct"}, "/a=direct/route"},
		{{"CHELL_ROUTE=/a=direct", "CHELL_MODE=trace"}, "/a=direct/route *=trace/mode"},
		/* the same rule twice is one rule; two stacks for one prefix an error */
		{{"CHELL_ROUTE=/a/=direct:/a=direct"}, "/a=direct/route"},
		{{"CHELL_ROUTE=/a=direct", "CHELL_MODE=trace", "CHELL_PATHS=/a"},
		 "error: setting paths: /a is routed to both direct (route) and trace"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char *const *e = cases[i].env;
		const char *got = rules_of(e[0] ? e[0] : "X=1", e[1] ? e[1] : "X=1", e[2] ? e[2] : "X=1");
		if (strcmp(got, cases[i].rules))
			fail_msg("case %zu: '%s', expected '%s'", i, got, cases[i].rules);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_table_consistent),
		cmocka_unit_test(test_environ_when_envp_null),
		cmocka_unit_test(test_file_sections),
		cmocka_unit_test(test_file_crlf_bom_last_wins),
		cmocka_unit_test(test_file_quotes_and_comments),
		cmocka_unit_test(test_empty_value_resets),
		cmocka_unit_test(test_env_overrides_file),
		cmocka_unit_test(test_error_unknown_key),
		cmocka_unit_test(test_error_bad_enum),
		cmocka_unit_test(test_error_no_equals_and_sections),
		cmocka_unit_test(test_error_pathlist_relative),
		cmocka_unit_test(test_error_overlong),
		cmocka_unit_test(test_error_bad_uint),
		cmocka_unit_test(test_error_env_value),
		cmocka_unit_test(test_error_missing_file),
		cmocka_unit_test(test_first_error_wins),
		cmocka_unit_test(test_routes_build),
		cmocka_unit_test(test_check_origins),
		cmocka_unit_test(test_size_suffixes),
		cmocka_unit_test(test_bools),
		cmocka_unit_test(test_uint),
		cmocka_unit_test(test_pathlist_split),
		cmocka_unit_test(test_enum_exact),
	};
	return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
