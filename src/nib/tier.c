/* SPDX-License-Identifier: MIT */
/*
 * The tier model's place in the Nib: started with the configuration,
 * which files are on the emulated tier, and its counters in stats.file.
 * The model itself (presets, calibration, the shared budget, the charge)
 * is src/tier, which chelld links as well.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nib.h"
#include "registry.h"
#include "tier/internal.h"

static char **tier_paths; /* tier.paths, or NULL: the fast-tier mounts */
static int ntier_paths;
static bool stats_written;

int nib_tier_init(char *err, size_t errlen)
{
	if (chell_tier_init(&chell_cfg, err, errlen) < 0)
		return -1;
	if (!chell_tier_active)
		return 0;
	/* each process's stats.file record counts its own charges only, so
	 * `chell stat` can add the records of a process tree */
	pthread_atfork(NULL, NULL, tier_counters_reset);
	char **p = NULL;
	int n = chell_config_paths(&chell_cfg, "tier.paths", &p);
	if (n < 0) {
		snprintf(err, errlen, "out of memory reading setting tier.paths");
		return -1;
	}
	if (n == 0)
		free(p);
	else
		tier_paths = p, ntier_paths = n;
	return 0;
}

bool chell_tier_file(const struct chell_file *f, int fd)
{
	if (ntier_paths) {
		for (int i = 0; f->path && i < ntier_paths; i++)
			if (chell_path_under(f->path, tier_paths[i], strlen(tier_paths[i])))
				return true;
		return false;
	}
	struct stat st;
	return sys_fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && router_dev_on_fast_mount(st.st_dev);
}

bool chell_expand_pid(const char *tmpl, char *out, size_t outlen)
{
	size_t n = 0;
	bool pid = false;
	for (const char *s = tmpl; *s && n + 1 < outlen; s++) {
		if (s[0] == '%' && s[1] == 'p') {
			n += (size_t)snprintf(out + n, outlen - n, "%d", (int)sys_getpid());
			if (n >= outlen)
				n = outlen - 1;
			pid = true;
			s++;
		} else {
			out[n++] = *s;
		}
	}
	out[n] = '\0';
	return pid;
}

int chell_stats_write(const char *json, size_t n)
{
	const char *spec = chell_setting("stats.file");
	if (!spec || !spec[0])
		return -1;
	char path[4096];
	chell_expand_pid(spec, path, sizeof path);
	int fd = sys_open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		chell_log("cannot write stats.file '%s': %s", path, strerror(-fd));
		return -1;
	}
	sys_write_all(fd, json, n);
	sys_close(fd);
	stats_written = true;
	return 0;
}

void nib_tier_exit(void)
{
	if (!chell_tier_active || stats_written)
		return;
	char json[1024];
	int n = snprintf(json, sizeof json, "{\"pid\": %d, \"mode\": \"%s\"", (int)sys_getpid(),
			 chell_mode_stack ? chell_mode_stack->mode : "?");
	n += (int)chell_tier_json_fields(json + n, sizeof json - (size_t)n - 3);
	n += snprintf(json + n, sizeof json - (size_t)n, "}\n");
	chell_stats_write(json, (size_t)n);
}
