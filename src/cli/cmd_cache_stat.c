/* SPDX-License-Identifier: MIT */
/*
 * `chell cache stat [--pool DIR | --socket PATH] [--json]`: cache-wide
 * statistics (STATS) and one row per cached file (FILE_STAT by index until
 * ENOENT). Hits are served by clients without the daemon, so hit counts
 * and ratios are what clients have reported so far (at CLOSE and BYE).
 * Exit: 0 ok, 1 not running, 2 usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/layout.h"
#include "cli.h"
#include "cmd_cache.h"


/* FILE_STAT rows asked at most (a bound against a misbehaving daemon). */
#define MAX_ROWS (1u << 20)

void cache_stat_usage(FILE *f)
{
	fputs("Usage: chell cache stat [--pool DIR | --socket PATH] [--json]\n"
	      "\n"
	      "Statistics of a running chelld: chunk slots used and occupancy, dirty\n"
	      "chunks and bytes, hits, misses and hit ratio (as reported by clients:\n"
	      "hits never reach the daemon), fills, evictions, write-back operations\n"
	      "and bytes, cleaner passes, throttled writers, the replacement policy;\n"
	      "then one row per cached file: size, chunks, valid and dirty bytes, hits,\n"
	      "misses, hit ratio, bytes written back, path.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (default: cache.pool)\n"
	      "      --socket PATH   the daemon's socket\n"
	      "      --json          print one JSON object ({\"running\": false} if none)\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 ok, 1 chelld not running, 2 usage error.\n",
	      f);
}

static uint64_t hits(const struct chelld_client_counts *c)
{
	return c->read_hits + c->write_hits;
}

static uint64_t misses(const struct chelld_client_counts *c)
{
	return c->read_misses + c->write_misses;
}

static void json_ratio(double r)
{
	if (r < 0)
		printf("null");
	else
		printf("%.4f", r);
}

static void json_counts(const struct chelld_client_counts *c)
{
	printf("{\"read_hits\": %" PRIu64 ", \"write_hits\": %" PRIu64 ", \"read_misses\": %" PRIu64
	       ", \"write_misses\": %" PRIu64 ", \"read_bytes\": %" PRIu64
	       ", \"write_bytes\": %" PRIu64 "}",
	       c->read_hits, c->write_hits, c->read_misses, c->write_misses, c->read_bytes,
	       c->write_bytes);
}

static void json_stats(const struct chelld_stats_reply *st, const char *pool)
{
	printf("{\"running\": true, \"pid\": %u, \"pool\": ", st->pid);
	cli_json_str(stdout, pool);
	printf(", \"policy\": \"%s\", \"size\": %" PRIu64 ", \"used_bytes\": %" PRIu64
	       ", \"slots\": %u, \"slots_used\": %u, \"occupancy\": %.4f, \"cnodes\": %u, \"clients\": %u, \"dirty_chunks\": %u, "
	       "\"dirty_blocks\": %" PRIu64 ", \"dirty_bytes\": %" PRIu64 ", \"hits\": %" PRIu64
	       ", \"misses\": %" PRIu64 ", \"hit_ratio\": ",
	       policy_display_name(st->policy), st->cache_size,
	       (uint64_t)st->used_pages * CACHE_BLOCK_BYTES, st->slots, st->slots_used,
	       st->slots ? (double)st->slots_used / st->slots : 0.0, st->cnodes,
	       st->clients ? st->clients - 1 : 0, st->dirty_chunks, st->dirty_blocks,
	       st->dirty_blocks * CACHE_BLOCK_BYTES, hits(&st->counts), misses(&st->counts));
	json_ratio(counts_hit_ratio(&st->counts));
	printf(", \"counts\": ");
	json_counts(&st->counts);
	printf(", \"fills\": %" PRIu64 ", \"fill_bytes\": %" PRIu64 ", \"evictions\": %" PRIu64
	       ", \"revocations\": %" PRIu64 ", \"writeback_ops\": %" PRIu64
	       ", \"writeback_bytes\": %" PRIu64 ", \"cleaner_passes\": %" PRIu64
	       ", \"throttle_waits\": %" PRIu64 ", \"syncs\": %" PRIu64 ", \"truncates\": %" PRIu64
	       ", \"bypassed\": %" PRIu64 ", \"outside_changes\": %" PRIu64,
	       st->fills, st->fill_bytes, st->evictions, st->revocations, st->writeback_ops,
	       st->writeback_bytes, st->cleaner_passes, st->throttle_waits, st->syncs, st->truncates,
	       st->bypassed, st->outside_changes);
	printf(", \"workers\": %u, \"fills_inflight_max\": %u, \"map_batches\": %" PRIu64
	       ", \"map_batched_chunks\": %" PRIu64 ", \"shrinks\": %" PRIu64,
	       st->workers, st->fills_inflight_max, st->map_batches, st->map_batched_chunks,
	       st->shrinks);
}

static void json_file(const struct chelld_file_stat_reply *r)
{
	printf("{\"path\": ");
	cli_json_str(stdout, r->path);
	printf(", \"cnode\": %u, \"size\": %" PRIu64 ", \"chunks\": %u, \"clients\": %u, "
	       "\"valid_bytes\": %" PRIu64 ", \"dirty_bytes\": %" PRIu64 ", \"hits\": %" PRIu64
	       ", \"misses\": %" PRIu64 ", \"hit_ratio\": ",
	       r->cnode, r->size, r->chunks, r->clients, r->valid_blocks * CACHE_BLOCK_BYTES,
	       r->dirty_blocks * CACHE_BLOCK_BYTES, hits(&r->counts), misses(&r->counts));
	json_ratio(counts_hit_ratio(&r->counts));
	printf(", \"counts\": ");
	json_counts(&r->counts);
	printf(", \"fills\": %" PRIu64 ", \"fill_bytes\": %" PRIu64 ", \"evictions\": %" PRIu64
	       ", \"writeback_bytes\": %" PRIu64 ", \"bypass\": %s}",
	       r->fills, r->fill_bytes, r->evictions, r->writeback_bytes,
	       r->flags & CHELLD_FILE_BYPASS ? "true" : "false");
}

static void text_stats(const struct chelld_stats_reply *st, const char *pool)
{
	printf("chelld (pid %u) on %s, policy %s\n", st->pid, pool, policy_display_name(st->policy));
	uint64_t used = (uint64_t)st->used_pages * CACHE_BLOCK_BYTES;
	printf("  used:         ");
	print_size_iec(stdout, used);
	printf(" of ");
	print_size_iec(stdout, st->cache_size);
	printf(" (%.1f%%; data blocks and control pages)\n",
	       st->cache_size ? 100.0 * (double)used / (double)st->cache_size : 0.0);
	printf("  slots:        %u of %u used (%.1f%%), %u files\n", st->slots_used, st->slots,
	       st->slots ? 100.0 * st->slots_used / st->slots : 0.0, st->cnodes);
	printf("  dirty:        %u chunks, ", st->dirty_chunks);
	print_size_iec(stdout, st->dirty_blocks * CACHE_BLOCK_BYTES);
	printf(" (%" PRIu64 " blocks)\n", st->dirty_blocks);
	double r = counts_hit_ratio(&st->counts);
	printf("  hits:         %" PRIu64 " (reads %" PRIu64 ", writes %" PRIu64 "), misses %" PRIu64
	       ", hit ratio ",
	       hits(&st->counts), st->counts.read_hits, st->counts.write_hits, misses(&st->counts));
	if (r < 0)
		printf("-");
	else
		printf("%.1f%%", 100 * r);
	printf(" (reported by clients)\n  fills:        %" PRIu64 " (", st->fills);
	print_size_iec(stdout, st->fill_bytes);
	printf(")\n  evictions:    %" PRIu64 " (revocations %" PRIu64 ")\n", st->evictions,
	       st->revocations);
	printf("  write-back:   %" PRIu64 " operations, ", st->writeback_ops);
	print_size_iec(stdout, st->writeback_bytes);
	printf("\n  cleaner:      %" PRIu64 " passes, %" PRIu64 " throttled writes\n",
	       st->cleaner_passes, st->throttle_waits);
	printf("  other:        %" PRIu64 " syncs, %" PRIu64 " truncates, %" PRIu64
	       " bypassed, %" PRIu64 " changed outside the cache\n",
	       st->syncs, st->truncates, st->bypassed, st->outside_changes);
	printf("  concurrency:  %u workers, at most %u fills at once; %" PRIu64
	       " batched misses (%" PRIu64 " chunks); %" PRIu64 " chunks shrunk to their hot groups\n",
	       st->workers, st->fills_inflight_max, st->map_batches, st->map_batched_chunks,
	       st->shrinks);
}

static void text_file(const struct chelld_file_stat_reply *r, bool header)
{
	if (header)
		printf("\n%10s %6s %10s %10s %9s %9s %6s %10s  %s\n", "SIZE", "CHUNKS", "VALID",
		       "DIRTY", "HITS", "MISSES", "RATIO", "WRITTEN", "PATH");
	char sz[4][32];
	uint64_t v[4] = {r->size, r->valid_blocks * CACHE_BLOCK_BYTES,
			 r->dirty_blocks * CACHE_BLOCK_BYTES, r->writeback_bytes};
	for (int i = 0; i < 4; i++) {
		FILE *m = fmemopen(sz[i], sizeof sz[i], "w");
		if (m) {
			print_size_iec(m, v[i]);
			fclose(m);
		} else {
			snprintf(sz[i], sizeof sz[i], "%" PRIu64, v[i]);
		}
	}
	double ratio = counts_hit_ratio(&r->counts);
	char rs[16] = "-";
	if (ratio >= 0)
		snprintf(rs, sizeof rs, "%.1f%%", 100 * ratio);
	printf("%10s %6u %10s %10s %9" PRIu64 " %9" PRIu64 " %6s %10s  %s%s\n", sz[0], r->chunks,
	       sz[1], sz[2], hits(&r->counts), misses(&r->counts), rs, sz[3], r->path,
	       r->flags & CHELLD_FILE_BYPASS ? " (bypassed)" : "");
}

int cache_stat(int argc, char **argv)
{
	bool json = false;
	char sock[PATH_MAX];
	struct mgr_conn cn;
	struct chelld_stats_reply st;
	int ret;
	if (!mgr_query_begin("cache stat", argc, argv, cache_stat_usage, &json, sock, sizeof sock, &cn,
			     &st, &ret))
		return ret;
	static struct chelld_path_reply pp;
	struct chelld_path pq = {.index = 0};
	if (mgr_call(&cn, &pq, sizeof pq, CHELLD_MSG_PATH, &pp, sizeof pp, -1, NULL) < 0) {
		cli_err("cache stat: the daemon at %s did not answer: %s", sock, strerror(errno));
		close(cn.sock);
		return CACHE_EXIT_DOWN;
	}
	if (json)
		json_stats(&st, pp.path);
	else
		text_stats(&st, pp.path);

	/* Rows as they come, so a cache of many files needs no buffer. */
	static struct chelld_file_stat_reply r;
	uint32_t i = 0;
	int rc = 0, e = 0;
	if (json)
		printf(", \"files\": [");
	for (; i < MAX_ROWS; i++) {
		struct chelld_file_stat q = {.index = i};
		bool answered;
		if (mgr_call(&cn, &q, sizeof q, CHELLD_MSG_FILE_STAT, &r, sizeof r, -1, &answered) < 0) {
			e = errno;
			rc = e == ENOENT ? 0 : answered ? 1 : CACHE_EXIT_DOWN;
			break;
		}
		if (json)
			printf("%s", i ? ", " : ""), json_file(&r);
		else
			text_file(&r, i == 0);
	}
	if (json)
		printf("]}\n");
	else if (i == 0 && e == ENOENT)
		printf("\nno files cached\n");
	fflush(stdout);
	if (rc)
		cli_err("cache stat: per-file statistics stopped at file %u: %s", i,
			e == ENOSYS ? "this chelld does not support them" : strerror(e));
	mgr_disconnect(&cn);
	return rc;
}
