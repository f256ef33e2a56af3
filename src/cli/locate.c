/* SPDX-License-Identifier: MIT */
/*
 * Finding libchell.so: $CHELL_LIB, else ../lib next to this executable (the
 * build tree and an installed prefix both have that layout), else the
 * configured install libdir. Only existence is checked: the CLI never loads
 * the library itself.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#ifndef CHELL_INSTALL_LIBDIR
#error "CHELL_INSTALL_LIBDIR must be defined by the build"
#endif

static int is_readable_file(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* Why p is not usable, for the CHELL_LIB message. */
static const char *why_not(const char *p)
{
	struct stat st;
	if (stat(p, &st))
		return strerror(errno);
	if (!S_ISREG(st.st_mode))
		return "not a regular file";
	if (access(p, R_OK))
		return strerror(errno);
	return "cannot resolve its absolute path";
}

/*
 * Absolute path of p with its directory resolved but its own name kept: the
 * build's libchell.so is a symlink to libchell.so.<version>, and the program
 * should see (and a rebuild should keep) the stable name.
 */
static int resolve(const char *p, char *buf, size_t len)
{
	char dir[PATH_MAX], real[PATH_MAX];
	if (!is_readable_file(p))
		return -1;
	const char *slash = strrchr(p, '/');
	const char *base = slash ? slash + 1 : p;
	if (slash) {
		size_t n = slash == p ? 1 : (size_t)(slash - p);
		if (n >= sizeof dir)
			return -1;
		memcpy(dir, p, n);
		dir[n] = '\0';
	} else {
		strcpy(dir, ".");
	}
	if (!realpath(dir, real))
		return -1;
	int n = snprintf(buf, len, "%s%s%s", real, strcmp(real, "/") ? "/" : "", base);
	return n > 0 && (size_t)n < len ? 0 : -1;
}

int cli_find_lib(char *buf, size_t len, char *err, size_t errlen)
{
	return cli_find_named_lib("libchell.so", "CHELL_LIB", buf, len, err, errlen);
}

int cli_find_named_lib(const char *name, const char *envvar, char *buf, size_t len, char *err,
		       size_t errlen)
{
	const char *env = getenv(envvar);
	if (env && *env) {
		if (resolve(env, buf, len) == 0)
			return 0;
		snprintf(err, errlen, "%s=%s: %s", envvar, env, why_not(env));
		return -1;
	}

	char exe[PATH_MAX], cand[PATH_MAX + 64];
	cand[0] = '\0';
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand, sizeof cand, "%s/../lib/%s", exe, name);
			if (resolve(cand, buf, len) == 0)
				return 0;
		}
	}
	char inst[PATH_MAX];
	snprintf(inst, sizeof inst, "%s/%s", CHELL_INSTALL_LIBDIR, name);
	if (resolve(inst, buf, len) == 0)
		return 0;
	snprintf(err, errlen, "cannot find %s (looked for %s%s%s); build it or set %s", name,
		 cand, *cand ? " and " : "", inst, envvar);
	return -1;
}
