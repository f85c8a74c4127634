/*
 * tools/kvshare.c — the kvshare CLI: dispatch to a subcommand, and the small
 * formatting helpers the subcommands share (tools/cli.h).
 *
 *   kvshare bench [options]          the main job (tools/bench.c)
 *   kvshare stat UNIQUE_ID [options] a live cache, from a watcher (tools/stat.c)
 *   kvshare ls                       the node's segments (tools/ls.c)
 *   kvshare clean [--dry-run] [--discard-dirty] [ID]
 *                                    remove stale segments, never live ones, nor
 *                                    ones holding dirty slots unless told (tools/ls.c)
 *   kvshare replay TRACE [options]   trace replay, CLOCK vs FIFO/LRU/Belady (tools/replay.c)
 *   kvshare trace gen [options]      a synthetic Mooncake-format trace (tools/trace_gen.c)
 *
 * `kvshare SUBCOMMAND --help` describes each.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fd.h"
#include "kvshare.h"
#include "tools/cli.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} cmds[] = {
	{ "bench", kvs_cli_bench, "simulate a TP node: ranks load a KV working set through the shared tier" },
	{ "stat", kvs_cli_stat, "show a live cache (ranks, slots, hits, store counters) as a watcher" },
	{ "ls", kvs_cli_ls, "list this node's kvshare segments and their state" },
	{ "clean", kvs_cli_clean, "remove stale segments (no live rank); never live ones, nor dirty ones unless told" },
	{ "replay", kvs_cli_replay, "replay a Mooncake trace through the cache and FIFO/LRU/Belady" },
	{ "trace", kvs_cli_trace, "trace gen: write a synthetic Mooncake-format trace (shared prefixes)" },
};

const char *kvs_cli_human_bytes(char *buf, size_t len, uint64_t n)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

const char *kvs_cli_not_cache(char *buf, size_t len, const char *uid)
{
	struct stat st;
	char path[128];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
		snprintf(buf, len, "%s is a %s, not a regular file: not a kvshare cache", path,
			 kvs_fd_kind(st.st_mode));
	else /* replaced meanwhile */
		snprintf(buf, len, "%s is not a regular file: not a kvshare cache", path);
	return buf;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: kvshare SUBCOMMAND [options]   (kvshare SUBCOMMAND --help)\n\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-7s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\nlibkvshare %s (%s)\n", kvs_version(), kvs_variant());
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return KVS_CLI_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return KVS_CLI_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvshare %s (%s)\n", kvs_version(), kvs_variant());
		return KVS_CLI_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "kvshare: unknown subcommand '%s' (kvshare --help lists them)\n", argv[1]);
	return KVS_CLI_USAGE;
}
