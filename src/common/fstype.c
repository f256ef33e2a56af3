/* SPDX-License-Identifier: MIT */
/*
 * Is a directory on a distributed (network or FUSE) file system? The fast
 * tier - cache mode's pool, the files direct mode maps - is node-local
 * memory (tmpfs, DAX); a mapping of a file on a distributed store is the
 * distributed file system's page cache, which is neither fast nor coherent
 * with the other nodes (FUSE without writeback caching sends each write()
 * to the server, but stores through a mapping only at its own write-back).
 * Chell refuses such a set-up with a message that says so (issue 13).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>

#include "fstype.h"

/* statfs f_type of network and cluster file systems (linux/magic.h and the
 * file systems' own headers). */
static const struct {
	unsigned long magic;
	const char *name;
} remote[] = {
	{0x65735546, "fuse"},     {0x6969, "nfs"},        {0x517b, "smb"},
	{0xfe534d42, "smb2"},     {0xff534d42, "cifs"},   {0x00c36400, "ceph"},
	{0x01021997, "9p"},       {0x5346414f, "afs"},    {0x6b414653, "afs"},
	{0x01161970, "gfs2"},     {0x7461636f, "ocfs2"},  {0x0bd00bd0, "lustre"},
	{0x19830326, "beegfs"},   {0x19920103, "orangefs"}, {0x73757245, "coda"},
};

/* The type of the mount holding `dir` (an existing, absolute, resolved
 * path) from /proc/self/mountinfo: the longest mount point containing it. */
static void mount_type(const char *dir, char *name, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	size_t best = 0;
	while (f && fgets(line, sizeof line, f)) {
		/* id parent maj:min root mountpoint options [optional...] - fstype ... */
		char mnt[4096], *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
			continue;
		size_t ml = strlen(mnt);
		bool under = strcmp(mnt, "/") == 0 ||
			     (strncmp(dir, mnt, ml) == 0 && (dir[ml] == '/' || dir[ml] == 0));
		char type[128];
		if (under && ml >= best && sscanf(dash + 3, "%127s", type) == 1) {
			best = ml;
			snprintf(name, len, "%s", type);
		}
	}
	if (f)
		fclose(f);
}

int chell_fs_remote(const char *path, char *name, size_t len)
{
	/* The nearest existing ancestor: a prefix may be created later. */
	char *p = strdup(path);
	struct statfs sf;
	int r = -1;
	while (p) {
		if (statfs(p, &sf) == 0) {
			r = 0;
			for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++)
				if ((uint32_t)sf.f_type == (uint32_t)remote[i].magic) {
					snprintf(name, len, "%s", remote[i].name);
					char *real = realpath(p, NULL);
					if (real)
						mount_type(real, name, len);
					free(real);
					r = 1;
				}
			break;
		}
		char *slash = strrchr(p, '/');
		if (!slash || strcmp(p, "/") == 0)
			break;
		slash[slash == p] = 0; /* "/a" becomes "/", "/a/b" "/a" */
	}
	free(p);
	return r;
}
