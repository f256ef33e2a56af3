/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: arbitrary bytes as a region image.
 *
 *   1. chell_region_open_mem on a private copy (validation + recovery).
 *   2. If it opened: one small transaction (snapshot, modify, commit or
 *      abort, chosen by the input), a range outside the heap that must be
 *      refused, close; then the image must open again and check clean,
 *      since everything we did to it was through the API.
 *   3. chell_region_check on the same bytes through a memfd (no files on
 *      disk, one write per input), and "check says ok => open succeeds".
 *
 * Each input runs twice: as given, and with its checksums made right. A
 * mutated byte almost always breaks a CRC32C, so the raw run mostly tests
 * the checksum gate; the fixed-up copy (superblock CRC, then the journal
 * headers and the undo/finish entries the layout points at) carries the
 * mutated layout fields, slot words and undo offsets past it, into layout
 * validation and recovery - the code that writes where the image says.
 *
 * The persistence ops are a bounds-checking no-op table: the buffer is
 * ordinary memory, so flushing it proves nothing, but a flush or copy that
 * lands outside the image is a bug ASan would not see (a flush reads no
 * byte), so it aborts here.
 *
 * Built two ways: with libFuzzer (clang -fsanitize=fuzzer,address,undefined,
 * scripts/fuzz.sh) and, with regress_main.c, as a plain program that runs
 * every corpus file under ctest.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "chell/pmem.h"
#include "fuzz_bounds.h"
/* White-box: the on-media structures and their checksum functions, for the
 * fix-up pass only. */
#include "pmem/pmem_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bigger inputs add nothing the small ones do not reach (layout fields are
 * what matter) and make each execution slower. */
#define MAX_IMAGE (1u << 20)


static void fail(const char *what, const char *err)
{
	fprintf(stderr, "fuzz_region_open: %s: %s\n", what, err);
	abort();
}

/* The image through a path, for chell_region_check (it takes a path). */
static int image_fd = -1;

static int check_bytes(const uint8_t *data, size_t size, struct chell_region_report *rep)
{
	char path[64];
	if (image_fd < 0) {
		image_fd = memfd_create("fuzz_region_image", MFD_CLOEXEC);
		if (image_fd < 0)
			return -errno;
	}
	if (ftruncate(image_fd, 0) < 0 || pwrite(image_fd, data, size, 0) != (ssize_t)size)
		return -EIO;
	snprintf(path, sizeof path, "/proc/self/fd/%d", image_fd);
	memset(rep, 0, sizeof *rep);
	return chell_region_check(path, rep);
}

static void run_tx(struct chell_region *r, const uint8_t *data, size_t size)
{
	uint64_t heap_size = 0;
	uint8_t *heap = chell_region_heap(r, &heap_size);
	if (!heap || heap_size == 0)
		return;
	/* Offset and length from the input's last bytes, so the fuzzer can
	 * steer them, kept inside the heap. */
	uint8_t k = size ? data[size - 1] : 0;
	uint64_t off = (size > 1 ? data[size - 2] : 0) * 8u % heap_size;
	size_t len = (size_t)(1 + k % 200);
	if (len > heap_size - off)
		len = (size_t)(heap_size - off);

	struct chell_tx *tx;
	if (chell_tx_begin(r, 0, &tx) < 0)
		return;
	/* Outside the heap: must be refused, whatever the layout says. */
	if (chell_tx_add_range(tx, heap_size, 1) == 0)
		fail("add_range past the heap", "accepted");
	if (chell_tx_add_range(tx, UINT64_MAX - 7, 16) == 0)
		fail("add_range wrapping around", "accepted");
	if (chell_tx_add_range(tx, off, len) == 0)
		memset(heap + off, k, len);
	if (k & 1)
		chell_tx_abort(tx);
	else
		chell_tx_commit(tx);
}

/* Recompute every checksum the image's own fields point at, each read
 * checked against `size` here (this is harness code: the library is what
 * must not trust the image). */
static void fix_checksums(uint8_t *img, size_t size)
{
	if (size < PM_SB_SIZE)
		return;
	uint32_t crc = pm_super_crc(img);
	memcpy(img + PM_SB_CRC_OFF, &crc, sizeof crc);
	struct pm_super sb;
	memcpy(&sb, img, sizeof sb);
	/* Journal headers: the master's, and each client journal's that fits. */
	uint64_t hdrs[1 + 64];
	unsigned nh = 0;
	hdrs[nh++] = sb.master_off;
	for (uint32_t j = 0; j < sb.journals && j < 64; j++)
		hdrs[nh++] = sb.journal_off + (uint64_t)j * sb.journal_size;
	for (unsigned k = 0; k < nh; k++) {
		if (hdrs[k] > size || size - hdrs[k] < PM_ENTRY)
			continue;
		struct pm_jhdr h;
		memcpy(&h, img + hdrs[k], sizeof h);
		h.crc = pm_jhdr_crc(&h);
		memcpy(img + hdrs[k], &h, sizeof h);
	}
	/* Entries: only once the layout validates (then every offset below is
	 * inside the image); entries typed undo or finish get the CRC of the
	 * generation in their journal's master slot, so recovery and check
	 * see them as written by a transaction. */
	struct pm_layout lay;
	struct pm_diag diag;
	char msg[256];
	pm_diag_init(&diag, msg, sizeof msg, 0);
	if (pm_validate(img, size, &lay, &diag) != 0)
		return;
	for (uint32_t j = 0; j < lay.journals && j < 64; j++) {
		uint64_t gen = PM_SLOT_GEN(pm_slot_load(img, &lay, j));
		for (uint32_t i = 0; i < lay.entries && i < 256;) {
			uint8_t *at = (uint8_t *)pm_entry_at(img, &lay, j, i);
			struct pm_entry e;
			memcpy(&e, at, sizeof e);
			if (e.type != PM_E_UNDO && e.type != PM_E_FINISH)
				break;
			/* A record's data lines must stay inside the journal. */
			uint64_t lines = pm_rec_lines(e.len);
			if (lines >= (uint64_t)lay.entries - i)
				break;
			e.crc = pm_entry_crc(lay.uuid, j, i, gen, &e, lines ? at + PM_ENTRY : NULL);
			memcpy(at, &e, sizeof e);
			i += 1 + (uint32_t)lines;
		}
	}
}

static void one_image(const uint8_t *data, size_t size, int fix)
{
	/* Exact-size allocation (page-aligned, as a mapping would be): ASan
	 * reports any access past `size`. */
	void *img = NULL;
	if (posix_memalign(&img, 4096, size ? size : 1) != 0)
		return;
	memcpy(img, data, size);
	if (fix)
		fix_checksums(img, size);
	/* What check sees: the bytes before this run's open changes them. */
	uint8_t *orig = malloc(size ? size : 1);
	if (!orig) {
		free(img);
		return;
	}
	memcpy(orig, img, size);
	struct fuzz_bounds b = {img, (const uint8_t *)img + size, "fuzz_region_open"};
	struct chell_persist_ops ops = fuzz_bounded_ops(&b);

	char err[512] = "";
	struct chell_region *r = NULL;
	int opened = chell_region_open_mem(img, size, &ops, &r, err, sizeof err) == 0;
	if (opened) {
		run_tx(r, data, size);
		chell_region_close(r);
		/* Everything since open went through the API: it must reopen and
		 * check clean. */
		err[0] = 0;
		if (chell_region_open_mem(img, size, &ops, &r, err, sizeof err) != 0)
			fail("reopen after open + transaction + close", err);
		chell_region_close(r);
		struct chell_region_report rep;
		if (check_bytes(img, size, &rep) == 0 && (!rep.ok || rep.unfinished_tx))
			fail("check after open + transaction + close", rep.text);
	}

	struct chell_region_report rep;
	int crc = check_bytes(orig, size, &rep);
	if (crc == 0 && rep.ok && !opened)
		fail("check said ok but open refused the same bytes", err);
	free(orig);
	free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_IMAGE)
		return 0;
	one_image(data, size, 0);
	if (size >= PM_SB_SIZE)
		one_image(data, size, 1);
	return 0;
}
