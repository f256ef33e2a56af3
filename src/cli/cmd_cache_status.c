/* SPDX-License-Identifier: MIT */
/*
 * `chell cache status [--pool DIR | --socket PATH] [--json]`: the daemon's
 * configuration and request counters, over its socket (HELLO, STATS, PATH).
 * Exit: 0 running, 1 not running, 2 usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_cache.h"
#include "cache/layout.h"


void cache_status_usage(FILE *f)
{
	fputs("Usage: chell cache status [--pool DIR | --socket PATH] [--json]\n"
	      "\n"
	      "Show the pid, pool, size, backing directories, uptime, connected clients\n"
	      "(not counting this query) and request counters of a running chelld.\n"
	      "\n"
	      "Options:\n"
	      "      --pool DIR      the daemon's pool directory (finds the socket;\n"
	      "                      default: cache.pool)\n"
	      "      --socket PATH   the daemon's socket\n"
	      "      --json          print one JSON object\n"
	      "  -h, --help          show this help\n"
	      "\n"
	      "Exit status: 0 running, 1 not running, 2 usage error.\n",
	      f);
}

int cache_status(int argc, char **argv)
{
	bool json = false;
	char sock[PATH_MAX];
	struct mgr_conn cn;
	struct chelld_stats_reply st;
	int ret;
	if (!mgr_query_begin("cache status", argc, argv, cache_status_usage, &json, sock, sizeof sock,
			     &cn, &st, &ret))
		return ret;
	static struct chelld_path_reply paths[1 + 64];
	uint32_t npaths = st.backings + 1 < 65 ? st.backings + 1 : 65;
	for (uint32_t i = 0; i < npaths; i++) {
		struct chelld_path pq = {.index = i};
		if (mgr_call(&cn, &pq, sizeof pq, CHELLD_MSG_PATH, &paths[i], sizeof paths[i], -1,
			     NULL) < 0) {
			cli_err("cache status: the daemon at %s did not answer: %s", sock,
				strerror(errno));
			close(cn.sock);
			return CACHE_EXIT_DOWN;
		}
	}
	struct cache_modes_info mi;
	cache_modes_fetch(&cn, &mi); /* (an older chelld: none shown) */
	mgr_disconnect(&cn);
	uint32_t others = st.clients ? st.clients - 1 : 0; /* minus this query */

	if (json) {
		printf("{\"running\": true, \"pid\": %u, \"pool\": ", st.pid);
		cli_json_str(stdout, paths[0].path);
		printf(", \"socket\": ");
		cli_json_str(stdout, sock);
		printf(", \"size\": %" PRIu64 ", \"used_bytes\": %" PRIu64 ", \"slots\": %u, "
		       "\"slots_used\": %u, \"backings\": [",
		       st.cache_size, (uint64_t)st.used_pages * CACHE_BLOCK_BYTES, st.slots,
		       st.slots_used);
		for (uint32_t i = 1; i < npaths; i++) {
			if (i > 1)
				printf(", ");
			cli_json_str(stdout, paths[i].path);
		}
		printf("], \"protocol\": %u, \"uptime_ms\": %" PRIu64 ", \"clients\": %u, "
		       "\"clients_total\": %" PRIu64 ", \"requests\": %" PRIu64 ", \"opens\": %" PRIu64
		       ", \"opens_refused\": %" PRIu64 ", \"maps\": %" PRIu64
		       ", \"maps_refused\": %" PRIu64 ", \"malformed\": %" PRIu64,
		       cn.hello.version, st.uptime_ms, others, st.clients_total, st.requests, st.opens,
		       st.opens_refused, st.maps, st.maps_refused, st.malformed);
		if (mi.known)
			printf(", ");
		cache_modes_print(stdout, &mi, true);
		printf("}\n");
		cache_modes_free(&mi);
		return 0;
	}
	printf("chelld is running\n  pid:        %u\n  pool:       %s\n  socket:     %s\n"
	       "  size:       ",
	       st.pid, paths[0].path, sock);
	print_size_iec(stdout, st.cache_size);
	printf(" (%" PRIu64 " bytes)\n  used:       ", st.cache_size);
	print_size_iec(stdout, (uint64_t)st.used_pages * CACHE_BLOCK_BYTES);
	printf(" in %u of %u chunk slots\n", st.slots_used, st.slots);
	for (uint32_t i = 1; i < npaths; i++)
		printf("  backing:    %s\n", paths[i].path);
	printf("  uptime:     %.1f s\n  clients:    %u connected, %" PRIu64 " since start\n"
	       "  requests:   %" PRIu64 " (opens %" PRIu64 " ok / %" PRIu64 " refused, maps %" PRIu64
	       " ok / %" PRIu64 " refused, malformed %" PRIu64 ")\n",
	       (double)st.uptime_ms / 1000.0, others, st.clients_total, st.requests, st.opens,
	       st.opens_refused, st.maps, st.maps_refused, st.malformed);
	cache_modes_print(stdout, &mi, false);
	cache_modes_free(&mi);
	return 0;
}
