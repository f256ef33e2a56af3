/* SPDX-License-Identifier: MIT */
/*
 * The shared OFD table: every struct chell_ofd (open file description) of a
 * process tree, plus named areas handlers can share (chell_shared_area), in
 * one shared memory region. (Not to be confused with src/pmem/region.c, the
 * persistent region of the persistence core.)
 *
 * It is a memfd mapped MAP_SHARED. fork() inherits the mapping, so parent and
 * child see one copy; exec() does not, so the exec wrapper keeps the memfd
 * open across exec and names it in CHELL_HANDOFF, and the new image maps it
 * again (handoff.c). The region is created lazily, on the first descriptor a
 * handler claims, so programs that never touch a routed file pay nothing.
 *
 * Layout:  [header 4 KiB][slot 0][slot 1]...[slot N-1][areas ...]
 */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "nib.h"

#define OFD_TABLE_MAGIC 0x4348454c4c524731ull /* "CHELLRG1" */
#define OFD_TABLE_VERSION 1
#define OFD_TABLE_SLOTS 8192
#define OFD_TABLE_AREA_BYTES (8u << 20)
#define OFD_TABLE_MAX_AREAS 32

struct ofd_table_area {
	char name[40];
	uint64_t off;
	uint64_t size;
};

struct ofd_table_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t nslots;
	uint32_t slot_size;
	uint32_t slot_hint;      /* where the next allocation starts looking */
	uint64_t slots_off;
	uint64_t areas_off;
	uint64_t areas_used;
	struct chell_lock lock;  /* guards the area table */
	struct ofd_table_area areas[OFD_TABLE_MAX_AREAS];
};

#define SLOT_SIZE ((sizeof(struct chell_ofd) + 63) & ~(size_t)63)

static unsigned char *ofd_table_base;
static int ofd_table_memfd = -1;
static pthread_mutex_t ofd_table_init_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t ofd_table_bytes(void)
{
	return 4096 + (size_t)OFD_TABLE_SLOTS * SLOT_SIZE + OFD_TABLE_AREA_BYTES;
}

static int ofd_table_map(int fd)
{
	void *p = mmap(NULL, ofd_table_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	ofd_table_base = p;
	ofd_table_memfd = fd;
	return 0;
}

int ofd_table_ensure(void)
{
	if (likely(ofd_table_base != NULL))
		return 0;
	pthread_mutex_lock(&ofd_table_init_lock);
	int r = 0;
	if (ofd_table_base == NULL) {
		int fd = (int)CHELL_SC(SYS_memfd_create, "chell-state", MFD_CLOEXEC, 0, 0, 0, 0);
		if (fd < 0) {
			r = fd;
			goto out;
		}
		fd = chell_internal_fd(fd, 1);
		if (fd < 0 || (r = sys_ftruncate(fd, (off_t)ofd_table_bytes())) < 0 ||
		    (r = ofd_table_map(fd)) < 0) {
			if (fd >= 0)
				chell_internal_close(fd);
			r = r ? r : -EMFILE;
			goto out;
		}
		struct ofd_table_hdr *h = (struct ofd_table_hdr *)ofd_table_base;
		h->version = OFD_TABLE_VERSION;
		h->nslots = OFD_TABLE_SLOTS;
		h->slot_size = (uint32_t)SLOT_SIZE;
		h->slots_off = 4096;
		h->areas_off = 4096 + (uint64_t)OFD_TABLE_SLOTS * SLOT_SIZE;
		atomic_store((_Atomic uint64_t *)&h->magic, OFD_TABLE_MAGIC);
	}
out:
	pthread_mutex_unlock(&ofd_table_init_lock);
	if (r < 0)
		chell_log("cannot create the shared state region: %s", strerror(-r));
	return r;
}

int ofd_table_attach(int fd)
{
	struct stat st;
	if (sys_fstat(fd, &st) < 0 || (size_t)st.st_size != ofd_table_bytes())
		return -EINVAL;
	int r = ofd_table_map(fd);
	if (r < 0)
		return r;
	struct ofd_table_hdr *h = (struct ofd_table_hdr *)ofd_table_base;
	if (h->magic != OFD_TABLE_MAGIC || h->version != OFD_TABLE_VERSION || h->nslots != OFD_TABLE_SLOTS ||
	    h->slot_size != SLOT_SIZE) {
		/* not ours, or another Chell version: don't trust it */
		munmap(ofd_table_base, ofd_table_bytes());
		ofd_table_base = NULL;
		ofd_table_memfd = -1;
		return -EINVAL;
	}
	ofd_table_memfd = chell_internal_fd(fd, 1);
	return 0;
}

int ofd_table_fd(void)
{
	return ofd_table_memfd;
}

void ofd_table_set_cloexec(int cloexec)
{
	if (ofd_table_memfd >= 0)
		sys_fcntl(ofd_table_memfd, F_SETFD, cloexec ? FD_CLOEXEC : 0);
}

uint32_t ofd_table_slot_count(void)
{
	return OFD_TABLE_SLOTS;
}

struct chell_ofd *ofd_table_slot(uint32_t slot)
{
	if (ofd_table_base == NULL || slot >= OFD_TABLE_SLOTS)
		return NULL;
	return (struct chell_ofd *)(ofd_table_base + 4096 + (size_t)slot * SLOT_SIZE);
}

int ofd_table_alloc_slot(uint32_t *out)
{
	int r = ofd_table_ensure();
	if (r < 0)
		return r;
	struct ofd_table_hdr *h = (struct ofd_table_hdr *)ofd_table_base;
	uint32_t start = atomic_load((_Atomic uint32_t *)&h->slot_hint);
	for (uint32_t i = 0; i < OFD_TABLE_SLOTS; i++) {
		uint32_t s = (start + i) % OFD_TABLE_SLOTS;
		struct chell_ofd *o = ofd_table_slot(s);
		uint32_t expect = 0;
		if (atomic_load_explicit((_Atomic uint32_t *)&o->in_use, memory_order_relaxed) ||
		    !atomic_compare_exchange_strong((_Atomic uint32_t *)&o->in_use, &expect, 1))
			continue;
		uint32_t gen = o->gen + 1;
		memset((char *)o + sizeof(o->in_use), 0, sizeof(*o) - sizeof(o->in_use));
		o->gen = gen;
		atomic_store((_Atomic uint32_t *)&o->refs, 1);
		atomic_store((_Atomic uint32_t *)&h->slot_hint, (s + 1) % OFD_TABLE_SLOTS);
		*out = s;
		return 0;
	}
	chell_log("all %u open-file slots are in use; further files use the kernel path",
		  OFD_TABLE_SLOTS);
	return -ENFILE;
}

void ofd_table_free_slot(uint32_t slot)
{
	struct chell_ofd *o = ofd_table_slot(slot);
	if (o)
		atomic_store_explicit((_Atomic uint32_t *)&o->in_use, 0, memory_order_release);
}

CHELL_EXPORT void *chell_shared_area(const char *name, size_t size)
{
	if (!name || !name[0] || strlen(name) >= sizeof(((struct ofd_table_area *)0)->name))
		return NULL; /* names are stored whole, or not at all */
	if (ofd_table_ensure() < 0)
		return NULL;
	struct ofd_table_hdr *h = (struct ofd_table_hdr *)ofd_table_base;
	void *res = NULL;
	size = (size + 4095) & ~(size_t)4095;
	chell_lock_acquire(&h->lock);
	int i;
	for (i = 0; i < OFD_TABLE_MAX_AREAS && h->areas[i].name[0]; i++) {
		if (strncmp(h->areas[i].name, name, sizeof(h->areas[i].name)) == 0) {
			res = h->areas[i].size >= size ? ofd_table_base + h->areas[i].off : NULL;
			goto out;
		}
	}
	if (i < OFD_TABLE_MAX_AREAS && h->areas_used + size <= OFD_TABLE_AREA_BYTES) {
		struct ofd_table_area *a = &h->areas[i];
		snprintf(a->name, sizeof(a->name), "%s", name);
		a->off = h->areas_off + h->areas_used;
		a->size = size;
		h->areas_used += size;
		res = ofd_table_base + a->off; /* memfd pages start zeroed */
	}
out:
	chell_lock_release(&h->lock);
	return res;
}
