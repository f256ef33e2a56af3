/* SPDX-License-Identifier: MIT */
/*
 * Validation of a region image: the superblock, the layout it describes
 * against the image size, and every journal header. Shared by open (which
 * stops at the first problem and names it) and check (which lists them).
 * Nothing read from the image is used before it is checked.
 */
#include "pmem_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void pm_diag_init(struct pm_diag *d, char *buf, size_t cap, int multi)
{
	d->buf = buf;
	d->cap = cap;
	d->used = 0;
	d->count = 0;
	d->multi = multi;
	if (buf && cap)
		buf[0] = '\0';
}

void pm_diag(struct pm_diag *d, const char *fmt, ...)
{
	va_list ap;

	d->count++;
	if (!d->buf || !d->cap || (!d->multi && d->count > 1))
		return;
	if (d->used + 1 >= d->cap)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(d->buf + d->used, d->cap - d->used, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	d->used += (size_t)n;
	if (d->used >= d->cap)
		d->used = d->cap - 1;
	if (d->multi && d->used + 1 < d->cap) {
		d->buf[d->used++] = '\n';
		d->buf[d->used] = '\0';
	}
}

uint32_t pm_super_crc(const uint8_t *sb)
{
	static const uint8_t zero[4];
	uint32_t c = chell_crc32c(0, sb, PM_SB_CRC_OFF);

	c = chell_crc32c(c, zero, sizeof(zero));
	return chell_crc32c(c, sb + PM_SB_CRC_OFF + 4, PM_SB_SIZE - PM_SB_CRC_OFF - 4);
}

uint32_t pm_jhdr_crc(const struct pm_jhdr *h)
{
	return chell_crc32c(0, h, PM_HDR_CRC_OFF);
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static uint64_t master_size_for(uint32_t journals)
{
	return PM_ENTRY + round_up(8ull * journals, PM_ENTRY);
}

int pm_layout_plan(const struct chell_region_layout *in, struct pm_layout *out, struct pm_diag *d)
{
	if (in->journals < 1 || in->journals > PM_MAX_JOURNALS) {
		pm_diag(d, "journal count %u out of range 1..%u", in->journals, PM_MAX_JOURNALS);
		return -EINVAL;
	}
	if (in->journal_entries < PM_MIN_ENTRIES || in->journal_entries > PM_MAX_ENTRIES) {
		pm_diag(d, "journal entries %u out of range %u..%u", in->journal_entries, PM_MIN_ENTRIES,
			PM_MAX_ENTRIES);
		return -EINVAL;
	}
	/* 2^62 keeps every sum below overflowing u64. */
	if (in->heap_size == 0 || in->heap_size > (1ull << 62)) {
		pm_diag(d, "heap size %llu out of range 1..2^62", (unsigned long long)in->heap_size);
		return -EINVAL;
	}
	memset(out, 0, sizeof(*out));
	out->journals = in->journals;
	out->entries = in->journal_entries;
	out->master_off = PM_SB_SIZE;
	out->master_size = master_size_for(in->journals);
	out->journal_off = out->master_off + out->master_size;
	out->journal_size = (uint64_t)(in->journal_entries + 1ull) * PM_ENTRY;
	/* The heap starts on a page so it can be mapped or handed out by pages. */
	out->heap_off = round_up(out->journal_off + out->journal_size * in->journals, 4096);
	out->heap_size = in->heap_size;
	out->total_size = out->heap_off + in->heap_size;
	return 0;
}

struct area {
	const char *name;
	uint64_t off, size;
};

/* The superblock's magic, printable for the error sentence. */
static void show_magic(const uint8_t *m, char out[40])
{
	size_t o = 0;

	for (int i = 0; i < 8; i++) {
		if (m[i] >= 0x20 && m[i] < 0x7f && m[i] != '"' && m[i] != '\\')
			out[o++] = (char)m[i];
		else
			o += (size_t)snprintf(out + o, 5, "\\x%02x", m[i]);
	}
	out[o] = '\0';
}

static int check_layout(const struct pm_super *s, size_t len, struct pm_layout *lay, struct pm_diag *d)
{
	if (s->journals < 1 || s->journals > PM_MAX_JOURNALS) {
		pm_diag(d, "superblock journal count %u out of range 1..%u", s->journals, PM_MAX_JOURNALS);
		return -EUCLEAN;
	}
	if (s->journal_entries < PM_MIN_ENTRIES || s->journal_entries > PM_MAX_ENTRIES) {
		pm_diag(d, "superblock journal entries %u out of range %u..%u", s->journal_entries,
			PM_MIN_ENTRIES, PM_MAX_ENTRIES);
		return -EUCLEAN;
	}
	if (s->total_size > len) {
		pm_diag(d, "region size %llu exceeds the image (%zu bytes): truncated",
			(unsigned long long)s->total_size, len);
		return -EUCLEAN;
	}
	if (s->master_size != master_size_for(s->journals)) {
		pm_diag(d, "master journal size %llu does not match %u journals (expected %llu)",
			(unsigned long long)s->master_size, s->journals,
			(unsigned long long)master_size_for(s->journals));
		return -EUCLEAN;
	}
	if (s->journal_size != (uint64_t)(s->journal_entries + 1ull) * PM_ENTRY) {
		pm_diag(d, "journal size %llu does not match %u entries (expected %llu)",
			(unsigned long long)s->journal_size, s->journal_entries,
			(unsigned long long)((s->journal_entries + 1ull) * PM_ENTRY));
		return -EUCLEAN;
	}
	if (s->heap_size == 0) {
		pm_diag(d, "heap size is zero");
		return -EUCLEAN;
	}
	/* journal_size <= 2^30 and journals <= 4096: no overflow. */
	struct area a[4] = {
		{"superblock", 0, PM_SB_SIZE},
		{"master journal", s->master_off, s->master_size},
		{"client journals", s->journal_off, s->journal_size * s->journals},
		{"heap", s->heap_off, s->heap_size},
	};
	for (int i = 1; i < 4; i++) {
		if (a[i].off % PM_ENTRY) {
			pm_diag(d, "%s offset %llu is not 64-byte aligned", a[i].name, (unsigned long long)a[i].off);
			return -EUCLEAN;
		}
		if (a[i].off > s->total_size || a[i].size > s->total_size - a[i].off) {
			pm_diag(d, "%s [%llu, +%llu) lies outside the region (%llu bytes)", a[i].name,
				(unsigned long long)a[i].off, (unsigned long long)a[i].size,
				(unsigned long long)s->total_size);
			return -EUCLEAN;
		}
	}
	for (int i = 0; i < 4; i++)
		for (int k = i + 1; k < 4; k++)
			if (a[i].off < a[k].off + a[k].size && a[k].off < a[i].off + a[i].size) {
				pm_diag(d, "areas overlap: %s [%llu, %llu) and %s [%llu, %llu)", a[i].name,
					(unsigned long long)a[i].off, (unsigned long long)(a[i].off + a[i].size),
					a[k].name, (unsigned long long)a[k].off,
					(unsigned long long)(a[k].off + a[k].size));
				return -EUCLEAN;
			}
	memcpy(lay->uuid, s->uuid, 16);
	lay->journals = s->journals;
	lay->entries = s->journal_entries;
	lay->master_off = s->master_off;
	lay->master_size = s->master_size;
	lay->journal_off = s->journal_off;
	lay->journal_size = s->journal_size;
	lay->heap_off = s->heap_off;
	lay->heap_size = s->heap_size;
	lay->total_size = s->total_size;
	return 0;
}

/* One journal header (master when `j` is UINT32_MAX). */
static int check_jhdr(const uint8_t *p, const struct pm_layout *lay, uint32_t j, struct pm_diag *d)
{
	struct pm_jhdr h;
	char what[32];
	int master = j == UINT32_MAX;

	memcpy(&h, p, sizeof(h));
	if (master)
		snprintf(what, sizeof(what), "master journal");
	else
		snprintf(what, sizeof(what), "journal %u", j);
	if (memcmp(h.magic, master ? PM_MASTER_MAGIC : PM_JOURNAL_MAGIC, 8)) {
		char m[40];
		show_magic((const uint8_t *)h.magic, m);
		pm_diag(d, "%s header has a wrong magic \"%s\" (expected \"%s\")", what, m,
			master ? PM_MASTER_MAGIC : PM_JOURNAL_MAGIC);
		return -EUCLEAN;
	}
	uint32_t c = pm_jhdr_crc(&h);
	if (c != h.crc) {
		pm_diag(d, "%s header checksum mismatch: stored 0x%08x, computed 0x%08x", what, h.crc, c);
		return -EUCLEAN;
	}
	if (memcmp(h.uuid, lay->uuid, 16)) {
		pm_diag(d, "%s belongs to another region (its UUID differs from the superblock's)", what);
		return -EUCLEAN;
	}
	if (master ? (h.index != lay->journals || h.entries != 0) : (h.index != j || h.entries != lay->entries)) {
		pm_diag(d, "%s header says index %u, %u entries (expected %u, %u)", what, h.index, h.entries,
			master ? lay->journals : j, master ? 0 : lay->entries);
		return -EUCLEAN;
	}
	return 0;
}

int pm_validate(const uint8_t *base, size_t len, struct pm_layout *lay, struct pm_diag *d)
{
	struct pm_super s;

	if (len < PM_SB_SIZE) {
		pm_diag(d, "image too small for a superblock: %zu bytes, need %u (truncated?)", len, PM_SB_SIZE);
		return -EUCLEAN;
	}
	memcpy(&s, base, sizeof(s));
	if (memcmp(s.magic, CHELL_REGION_MAGIC, 8)) {
		char m[40];
		show_magic((const uint8_t *)s.magic, m);
		pm_diag(d, "not a Chell region (magic \"%s\", expected \"%s\")", m, CHELL_REGION_MAGIC);
		return -EINVAL;
	}
	/* Version before checksum: a later version may checksum differently,
	 * and "unsupported version" is the useful sentence then. */
	if (s.version != CHELL_REGION_VERSION) {
		pm_diag(d, "unsupported region version %u (this build reads version %u)", s.version,
			CHELL_REGION_VERSION);
		return -ENOTSUP;
	}
	uint32_t c = pm_super_crc(base);
	if (c != s.crc) {
		pm_diag(d, "superblock checksum mismatch: stored 0x%08x, computed 0x%08x", s.crc, c);
		return -EUCLEAN;
	}
	if (s.flags) {
		pm_diag(d, "unknown superblock flags 0x%08x", s.flags);
		return -ENOTSUP;
	}
	int rc = check_layout(&s, len, lay, d);
	if (rc)
		return rc;
	rc = check_jhdr(base + lay->master_off, lay, UINT32_MAX, d);
	for (uint32_t j = 0; j < lay->journals && (!rc || d->multi); j++) {
		int r2 = check_jhdr(pm_journal_base(base, lay, j), lay, j, d);
		if (!rc)
			rc = r2;
	}
	return rc;
}
