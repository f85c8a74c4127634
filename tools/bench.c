/*
 * tools/bench.c — `kvshare bench`: one tensor-parallel node, simulated;
 * the options and the orchestration.
 *
 * N rank processes (fork; default 8) load a KV working set through the shared
 * tier, from a real posix store that the bench first fills by dumping (one
 * process, "rank 0", through the store API).  The same workload runs three ways
 * in one invocation and the results are printed side by side:
 *
 *   kernel shared  the kernel-assisted libkvshare.so.1, one shared cache
 *   plain shared   the plain libkvshare.so.1: the bench re-executes itself
 *                  (/proc/self/exe, LD_LIBRARY_PATH = the plain build's lib dir)
 *                  and the child checks kvs_variant() == "plain" before running:
 *                  the drop-in promise, exercised
 *   private        share_buffer_enable=0: a cache per rank, no sharing (the
 *                  baseline: what every rank reading for itself costs)
 *
 * A CLI built for the plain variant only runs plain shared and private (and says
 * so); a missing plain library skips that run (and says so).
 *
 * Process model.  The parent never opens a store and never starts a thread, so
 * it may fork at any time: the copy-engine probe, the fill and every rank run in
 * children.  Everything the processes share lives in one memfd mapped
 * MAP_SHARED (struct b_shm, then the workload arrays and the reference bytes):
 * forked ranks inherit the mapping, and the re-executed plain run maps the same
 * memfd (its number is passed on the hidden --internal-run option).  The
 * reference bytes are exactly what the fill dumped (kvs_pattern_fill of each
 * (block, shard), which is also what the latency backend serves), so every rank
 * verifies every shard it loads with one memcmp against them.
 *
 * The files (tools/bench.h lists them): this one parses the options, builds
 * the workload (bench_work.c), sizes the caches, sets up the shared block,
 * probes the copy engine (bench_dev.c), fills the store (bench_backend.c),
 * runs the configurations (bench_rank.c) and prints the report
 * (bench_report.c).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "tools/bench.h"
#include "tools/cli.h"

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvshare bench [options]\n"
"\n"
"Simulates one tensor-parallel node: --ranks processes load a KV working set\n"
"through the shared tier from a real posix store that the bench first fills by\n"
"dumping (one process, through the store API).  The same workload runs three\n"
"ways and is printed side by side: the kernel library with one shared cache,\n"
"the plain library with one shared cache (the bench re-executes itself with\n"
"LD_LIBRARY_PATH=" KVS_CLI_PLAIN_LIBDIR "),\n"
"and private per-rank caches (share_buffer_enable=0, no sharing: the baseline).\n"
"Each configuration runs --repeat times, alternating (kernel, plain, private,\n"
"kernel, ...); the table shows each number's median and its range (min-max).\n"
"Every rank verifies every shard it loads against the dumped bytes, in every run.\n"
"\n"
"Backing: shared and private caches use the same memory.  Kernel shared's first\n"
"run takes hugetlbfs when the pool has room (hugetlb=auto); the kernel library's\n"
"later runs, private included, ask for what it got (hugetlb=required or off).\n"
"When the pool holds the shared cache but not one per rank, every run is made\n"
"again on /dev/shm; a line above the table says which memory each run got and\n"
"why (plain shared is always on /dev/shm: the plain library has no hugetlbfs).\n"
"\n"
"Workload (--workload):\n"
"  prefix  (default) chat-like prefix sharing: a system prompt of blocks/32\n"
"          blocks starts every request; the rest belong to conversations of\n"
"          about 8 blocks that grow by 1..4 new blocks per turn; requests are\n"
"          the turns of randomly interleaved conversations (--seed): system\n"
"          prompt + the conversation so far + the turn's new blocks.  Every rank\n"
"          loads every request's blocks, as the ranks of a TP group do.\n"
"  scan    every block once, in order (no reuse within a rank)\n"
"  --trace FILE  a Mooncake trace (JSON Lines: timestamp, hash_ids): requests in\n"
"          timestamp order, each request's hash_ids its blocks; the whole trace,\n"
"          the caches sized from its distinct blocks (+25%%, said in one line);\n"
"          with --blocks N, requests are taken while their distinct blocks fit\n"
"          in N (`kvshare trace gen` writes one)\n"
"A request is loaded as tasks of at most %u shards; %u tasks in flight per rank.\n"
"\n"
"Backend (why the default is backend-bound): the posix store's files were just\n"
"written, so its reads come from the page cache; on a small machine such a run\n"
"is bound by memcpy, which compares CPUs, not the tier.  So by default every\n"
"read of the posix store is held --latency-us longer (the fault backend's\n"
"fault_delay) with at most --qd reads in flight per rank: a store reached over a\n"
"network at a bounded rate per client.  --latency-us 0 gives the raw store\n"
"(add --drop-cache for cold reads from the device).  --backend redis uses a real\n"
"Redis server instead (--redis-endpoint): the fill dumps into it under keys of\n"
"this invocation (kvshare-bench:<pid>.<nonce>:..., expiring after 1 h unless\n"
"--keep) and the runs load from it, nothing added to its reads unless\n"
"--latency-us is given.  Reads are counted at the backend, across processes.\n"
"\n"
"Options (sizes take k/m/g suffixes: KiB, MiB, GiB):\n"
"  --ranks N          rank processes, 1..64 (8)\n"
"  --blocks N         blocks in the working set (128; with --trace: a cap, default\n"
"                     the whole trace)\n"
"  --shards N         shards per block, 1..4096 (8)\n"
"  --shard-size SIZE  bytes per shard, 1k..1g (32k)\n"
"  --capacity SIZE    bytes of each cache (default: the working set + 25%%)\n"
"  --backend KIND     posix (default), latency (synthetic content, no fill) or\n"
"                     redis (a Redis server: --redis-endpoint)\n"
"  --redis-endpoint E the server, as the library's redis_endpoints takes it:\n"
"                     host:port, [v6addr]:port or an absolute unix socket path\n"
"                     (/run/redis/redis.sock); several separated by ';'\n"
"  --redis-cluster    the endpoints are seeds of a Redis Cluster (the library's\n"
"                     redis_cluster=1: blocks placed by the cluster's slots)\n"
"  --latency-us N     added to every backend read, 0..1000000 (2000; redis: 0)\n"
"  --qd N             backend reads in flight per rank, 0 = unbounded (2)\n"
"  --workload NAME    prefix (default) or scan\n"
"  --trace FILE       replay a Mooncake trace instead of --workload\n"
"  --copy-engine E    auto (cuda when a device per rank exists, else host), host, cuda\n"
"  --drop-cache       write back and drop the store's page cache before each run\n"
"  --root DIR         make the store's temporary directory under DIR (/tmp)\n"
"  --keep             keep the store's directory (it is removed otherwise); redis:\n"
"                     its keys never expire\n"
"  --seed N           workload seed (1)\n"
"  --repeat N         runs of each configuration, 1..20 (3)\n"
"  --json             one JSON document on stdout instead of the table\n"
"  --check            exit 1 unless every shared run read every unique shard exactly\n"
"                     once from the backend (and private: once per rank); needs a\n"
"                     capacity that holds the working set (the default)\n"
"  --verbose          library warnings and per-rank details on stderr\n"
"  -h, --help         this text\n"
"\n"
"Columns (medians; the min-max row under each: the range over its runs):\n"
"backing (the caches' memory: hugetlb or shm), wall (start to the last rank's\n"
"finish), GiB/s (bytes copied into the\n"
"ranks' tensors / wall), backend MiB and reads (counted at the backend), reuse\n"
"(in a rank: bytes delivered / the ranks' unique bytes) and shared (across ranks:\n"
"unique bytes / backend bytes; their product is the dedup of --json), hit%% and join%% (gets that found the\n"
"shard READY / that joined a read in flight, of all gets: hits + joins + misses,\n"
"from the ranks' kvs_cache_stats; the rest are misses, each one backend read),\n"
"cpu%%/rank (waiter CPU: the rank processes' CPU, all threads, / wall, per rank,\n"
"without the bench's own verification), p50/p99 (per task: submit to\n"
"kvs_store_wait's return), speedup (private's wall / this one's, run r of each),\n"
"fallbacks (shm: no hugetlbfs; numa: no binding;\n"
"pool: io_uring refused; host: a library without the CUDA engine copied on the\n"
"host).  Exit 0; 1 when a task fails, a byte differs or the store cannot be\n"
"reached (one line names it); 2 for bad options or sizes the machine cannot hold.\n",
		B_TASK_SHARDS, B_WINDOW);
}

static int bad_opt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_opt(const char *fmt, ...)
{
	va_list ap;

	fputs("kvshare bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (kvshare bench --help)\n", stderr);
	return KVS_CLI_USAGE;
}

/* A decimal number with an optional k/m/g suffix (mult 1024) when size. */
static int parse_num(const char *s, bool size, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0, m = 1;
	const char *p = s;

	if (!*p)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s)
		return -1;
	if (size && *p) {
		switch (*p) {
		case 'k': case 'K': m = 1ull << 10; break;
		case 'm': case 'M': m = 1ull << 20; break;
		case 'g': case 'G': m = 1ull << 30; break;
		default: return -1;
		}
		p++;
	}
	if (*p || (v && m > UINT64_MAX / v))
		return -1;
	v *= m;
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

enum {
	O_RANKS = 256, O_BLOCKS, O_SHARDS, O_SHARD_SIZE, O_CAPACITY, O_BACKEND, O_LATENCY, O_QD,
	O_WORKLOAD, O_TRACE, O_JSON, O_KEEP, O_ROOT, O_SEED, O_CHECK, O_ENGINE, O_DROP, O_VERBOSE,
	O_INTERNAL, O_REPEAT, O_REDIS, O_REDIS_CLUSTER,
};

static int parse_opts(int argc, char **argv, struct b_opts *o, bool *help)
{
	static const struct option lo[] = {
		{ "ranks", required_argument, NULL, O_RANKS },
		{ "blocks", required_argument, NULL, O_BLOCKS },
		{ "shards", required_argument, NULL, O_SHARDS },
		{ "shard-size", required_argument, NULL, O_SHARD_SIZE },
		{ "capacity", required_argument, NULL, O_CAPACITY },
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "latency-us", required_argument, NULL, O_LATENCY },
		{ "qd", required_argument, NULL, O_QD },
		{ "workload", required_argument, NULL, O_WORKLOAD },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "json", no_argument, NULL, O_JSON },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "root", required_argument, NULL, O_ROOT },
		{ "seed", required_argument, NULL, O_SEED },
		{ "check", no_argument, NULL, O_CHECK },
		{ "copy-engine", required_argument, NULL, O_ENGINE },
		{ "drop-cache", no_argument, NULL, O_DROP },
		{ "verbose", no_argument, NULL, O_VERBOSE },
		{ "internal-run", required_argument, NULL, O_INTERNAL },
		{ "repeat", required_argument, NULL, O_REPEAT },
		{ "redis-endpoint", required_argument, NULL, O_REDIS },
		{ "redis-cluster", no_argument, NULL, O_REDIS_CLUSTER },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct b_opts){ .ranks = 8, .blocks = 128, .shards = 8, .qd = 2,
			      .shard_bytes = 32 << 10, .latency_us = 2000, .seed = 1,
			      .repeat = 3 };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		uint64_t v;
		const char *name = optind > 1 && optind - 1 < argc ? argv[optind - 1] : "?";

		switch (c) {
		case 'h':
			*help = true;
			return 0;
		case ':':
			return bad_opt("option '%s' needs a value", name);
		case '?':
			if (optopt)
				return bad_opt("unknown option '-%c'", optopt);
			return bad_opt("unknown option '%s'", name);
		case O_RANKS:
			if (parse_num(optarg, false, 1, B_MAX_RANKS, &v) < 0)
				return bad_opt("--ranks '%s': want 1..%u", optarg, B_MAX_RANKS);
			o->ranks = (uint32_t)v;
			break;
		case O_BLOCKS:
			if (parse_num(optarg, false, 1, 1u << 24, &v) < 0)
				return bad_opt("--blocks '%s': want 1..16777216", optarg);
			o->blocks = (uint32_t)v;
			o->blocks_set = true;
			break;
		case O_SHARDS:
			if (parse_num(optarg, false, 1, 4096, &v) < 0)
				return bad_opt("--shards '%s': want 1..4096", optarg);
			o->shards = (uint32_t)v;
			break;
		case O_SHARD_SIZE:
			if (parse_num(optarg, true, 1024, 1ull << 30, &v) < 0)
				return bad_opt("--shard-size '%s': want 1k..1g (bytes, k/m/g)", optarg);
			o->shard_bytes = v;
			break;
		case O_CAPACITY:
			if (parse_num(optarg, true, 1, 1ull << 50, &v) < 0)
				return bad_opt("--capacity '%s': want a size (bytes, k/m/g)", optarg);
			o->capacity = v;
			break;
		case O_BACKEND:
			if (!strcmp(optarg, "posix"))
				o->backend = BACKEND_POSIX;
			else if (!strcmp(optarg, "latency"))
				o->backend = BACKEND_LATENCY;
			else if (!strcmp(optarg, "redis"))
				o->backend = BACKEND_REDIS;
			else
				return bad_opt("--backend '%s': want posix, latency or redis", optarg);
			break;
		case O_LATENCY:
			if (parse_num(optarg, false, 0, 1000000, &v) < 0)
				return bad_opt("--latency-us '%s': want 0..1000000", optarg);
			o->latency_us = v;
			o->latency_set = true;
			break;
		case O_QD:
			if (parse_num(optarg, false, 0, 4096, &v) < 0)
				return bad_opt("--qd '%s': want 0..4096 (0: unbounded)", optarg);
			o->qd = (uint32_t)v;
			break;
		case O_WORKLOAD:
			if (!strcmp(optarg, "prefix"))
				o->workload = WORK_PREFIX;
			else if (!strcmp(optarg, "scan"))
				o->workload = WORK_SCAN;
			else
				return bad_opt("--workload '%s': want prefix or scan", optarg);
			break;
		case O_TRACE:
			o->trace = optarg;
			break;
		case O_JSON:
			o->json = true;
			break;
		case O_KEEP:
			o->keep = true;
			break;
		case O_ROOT:
			o->root = optarg;
			break;
		case O_SEED:
			if (parse_num(optarg, false, 0, UINT64_MAX, &v) < 0)
				return bad_opt("--seed '%s': want a number", optarg);
			o->seed = v;
			break;
		case O_CHECK:
			o->check = true;
			break;
		case O_ENGINE:
			if (!strcmp(optarg, "auto"))
				o->engine = ENGINE_AUTO;
			else if (!strcmp(optarg, "host"))
				o->engine = ENGINE_HOST;
			else if (!strcmp(optarg, "cuda"))
				o->engine = ENGINE_CUDA;
			else
				return bad_opt("--copy-engine '%s': want auto, host or cuda", optarg);
			break;
		case O_DROP:
			o->drop_cache = true;
			break;
		case O_VERBOSE:
			o->verbose = true;
			break;
		case O_INTERNAL:
			o->internal = optarg;
			break;
		case O_REPEAT:
			if (parse_num(optarg, false, 1, B_REPEAT_MAX, &v) < 0)
				return bad_opt("--repeat '%s': want 1..%u", optarg, B_REPEAT_MAX);
			o->repeat = (uint32_t)v;
			break;
		case O_REDIS:
			if (!*optarg || strlen(optarg) >= KVS_REDIS_ENDPOINTS_LEN)
				return bad_opt("--redis-endpoint '%s': want host:port or a unix socket "
					       "path, at most %u characters", optarg,
					       KVS_REDIS_ENDPOINTS_LEN - 1);
			o->redis_endpoint = optarg;
			break;
		case O_REDIS_CLUSTER:
			o->redis_cluster = true;
			break;
		default:
			return bad_opt("unknown option '%s'", name);
		}
	}
	if (optind < argc)
		return bad_opt("unexpected argument '%s'", argv[optind]);
	if (o->trace)
		o->workload = WORK_TRACE;
	if (o->root) {
		struct stat st;

		if (stat(o->root, &st) < 0 || !S_ISDIR(st.st_mode))
			return bad_opt("--root '%s': not a directory", o->root);
	}
	if (o->backend != BACKEND_POSIX && o->drop_cache)
		return bad_opt("--drop-cache is for the posix backend");
	if (o->backend == BACKEND_REDIS && !o->redis_endpoint)
		return bad_opt("--backend redis needs --redis-endpoint (host:port or a unix socket "
			       "path)");
	if (o->redis_endpoint && o->backend != BACKEND_REDIS)
		return bad_opt("--redis-endpoint is for --backend redis");
	if (o->redis_cluster && o->backend != BACKEND_REDIS)
		return bad_opt("--redis-cluster is for --backend redis");
	if (o->backend == BACKEND_REDIS && !o->latency_set)
		o->latency_us = 0; /* a real remote store: nothing added to its reads */
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Sizes                                                                     */

/* Blocks whose working set, reference bytes and private caches (+25%) fit in
 * 90% of mem: what --blocks could be for a trace too large to take whole. */
static uint64_t fit_blocks(const struct b_opts *o, uint64_t mem)
{
	double per_block = (double)o->shards * (double)o->shard_bytes * (1.0 + 1.25 * o->ranks);

	return (uint64_t)((double)mem * 0.9 / per_block);
}

/* ------------------------------------------------------------------------ */
/* The configurations, --repeat times each, on one backing                   */

/* The first rank's own failure to open its store (not the others' abort). */
static int open_refused(const struct b_run *run, uint32_t ranks)
{
	for (uint32_t r = 0; r < ranks; r++)
		if (run->rank[r].rc < 0 && run->rank[r].rc != -ECANCELED)
			return run->rank[r].rc;
	return 0;
}

/* One run of configuration i, summarized into its next rep[]. */
static void run_one(struct b_report *rp, uint32_t i, int memfd, bool progress)
{
	struct b_shm *sh = rp->sh;
	struct b_run *run = &sh->run[i];
	struct b_conf *c = &rp->conf[i];
	struct b_sum *s = &c->rep[c->nrep++];

	b_run_reset(run);
	if (rp->o->drop_cache)
		b_store_drop_cache(sh->p.root);
	if (i == RUN_PLAIN && strcmp(KVS_CLI_VARIANT, "plain") != 0)
		b_run_exec(sh, memfd, i, KVS_CLI_PLAIN_LIBDIR, progress);
	else
		b_run_ranks(sh, i, progress);
	b_summarize(sh, i, s);
	snprintf(c->variant, sizeof(c->variant), "%s", run->variant);
	snprintf(c->version, sizeof(c->version), "%s", run->version);
	if (!s->ok) {
		c->ok = false;
		snprintf(c->err, sizeof(c->err), "%s", run->err);
	}
}

/*
 * The backing rule: shared and private caches on the same memory, never
 * hugetlbfs shared against /dev/shm private unsaid.  Kernel shared's first run
 * opens with hugetlb=auto; what it got (hugetlbfs, or /dev/shm after a
 * fallback) is then asked for explicitly (required / off) by every later run of
 * the kernel library, private included.  When hugetlb=required is refused
 * (-KVS_ENOHUGE: the pool holds one shared cache but not a cache per rank),
 * every configuration is run again on /dev/shm (hugetlb=off), and the backing
 * line says so.  The plain library has no hugetlbfs: plain shared is on
 * /dev/shm whatever the rule says (hugetlb=off), and the line says that too.
 *
 * The configurations alternate (kernel, plain, private, kernel, ...), so run r
 * of each saw about the same machine: the speedups are taken run by run.
 */
static void run_configs(struct b_report *rp, int memfd, bool progress)
{
	struct b_shm *sh = rp->sh;
	bool cli_plain = strcmp(KVS_CLI_VARIANT, "plain") == 0;
	char plainlib[PATH_MAX], refused[B_ERR] = "";
	uint32_t mode = cli_plain ? KVS_HUGETLB_OFF : KVS_HUGETLB_AUTO;

	snprintf(plainlib, sizeof(plainlib), "%s/libkvshare.so.1", KVS_CLI_PLAIN_LIBDIR);
	for (uint32_t i = 0; i < B_RUNS; i++) {
		struct b_conf *c = &rp->conf[i];

		if (i == RUN_KERNEL && cli_plain)
			c->skip = "the CLI was built for the plain variant only (KVS_VARIANT=plain)";
		else if (i == RUN_PLAIN && !cli_plain && access(plainlib, R_OK) != 0)
			c->skip = "no plain library next to this build (" KVS_CLI_PLAIN_LIBDIR
				  "/libkvshare.so.1; KVS_VARIANT=both builds it)";
		else
			c->ran = true;
	}
	for (int pass = 0; pass < 2; pass++) {
		bool again = false;

		for (uint32_t i = 0; i < B_RUNS; i++) {
			rp->conf[i].ok = rp->conf[i].ran;
			rp->conf[i].nrep = 0;
		}
		for (uint32_t r = 0; r < rp->repeat && !again && !b_interrupted; r++)
			for (uint32_t i = 0; i < B_RUNS && !again && !b_interrupted; i++) {
				struct b_conf *c = &rp->conf[i];
				struct b_run *run = &sh->run[i];

				if (!c->ran || !c->ok)
					continue;
				run->hugetlb = i == RUN_PLAIN ? KVS_HUGETLB_OFF : mode;
				run_one(rp, i, memfd, progress);
				if (i == RUN_KERNEL && mode == KVS_HUGETLB_AUTO)
					mode = c->ok && c->rep[0].backing == KVS_CACHE_BACKING_HUGETLB
						       ? KVS_HUGETLB_REQUIRED
						       : KVS_HUGETLB_OFF;
				if (!c->ok && run->hugetlb == KVS_HUGETLB_REQUIRED &&
				    open_refused(run, sh->p.ranks) == -KVS_ENOHUGE) {
					snprintf(refused, sizeof(refused), "%s, run %u", run->name, r + 1);
					again = true;
				}
			}
		if (!again)
			break;
		mode = KVS_HUGETLB_OFF;
	}
	for (uint32_t i = 0; i < B_RUNS; i++)
		if (rp->conf[i].ran && rp->conf[i].nrep == 0) {
			rp->conf[i].ok = false;
			snprintf(rp->conf[i].err, sizeof(rp->conf[i].err), "interrupted before it started");
		}

	/* The line above the table. */
	const struct b_conf *k = &rp->conf[RUN_KERNEL], *pl = &rp->conf[RUN_PLAIN];
	const char *plain_note = pl->ran ? "; plain shared on shm (the plain library has no "
					   "hugetlbfs)" : "";
	char cap[32];

	b_fmt_size(cap, sizeof(cap), sh->p.cap_slots * sh->p.shard_bytes);
	/* why kernel shared's hugetlb=auto fell back: the library's first numa:
	 * warning of any of its ranks (the one that made the cache) */
	const char *fell_back = "";
	for (uint32_t j = 0; j < sh->p.ranks && !fell_back[0]; j++)
		fell_back = sh->run[RUN_KERNEL].rank[j].libnuma;
	if (cli_plain)
		snprintf(rp->backing_note, sizeof(rp->backing_note),
			 "backing: every run on shm (/dev/shm: the plain library has no hugetlbfs)");
	else if (refused[0])
		snprintf(rp->backing_note, sizeof(rp->backing_note),
			 "backing: every run on shm (hugetlb=off, all made again): the hugepage pool "
			 "held one shared cache of %s but not %u private ones (%s: hugetlb=required "
			 "refused)", cap, sh->p.ranks, refused);
	else if (mode == KVS_HUGETLB_REQUIRED)
		snprintf(rp->backing_note, sizeof(rp->backing_note),
			 "backing: kernel shared and private on hugetlb (hugetlbfs; private with "
			 "hugetlb=required, as kernel shared got)%s", plain_note);
	else
		snprintf(rp->backing_note, sizeof(rp->backing_note),
			 "backing: kernel shared and private on shm (/dev/shm; %s%s%s, private with "
			 "hugetlb=off to match)%s",
			 k->nrep && k->rep[0].backing == KVS_CACHE_BACKING_SHM
				 ? "kernel shared's hugetlb=auto fell back"
				 : "kernel shared did not run to the end",
			 fell_back[0] ? ": " : "", fell_back, plain_note);
}

/* --check, on every run: backend reads are the unique shards (shared), once per
 * rank (private). */
static void check_reads(struct b_report *rp)
{
	const struct b_params *p = &rp->sh->p;

	for (uint32_t i = 0; i < B_RUNS && rp->o->check; i++) {
		const struct b_conf *c = &rp->conf[i];
		uint64_t want = i == RUN_PRIVATE ? rp->unique_shards * p->ranks : rp->unique_shards;

		for (uint32_t r = 0; r < c->nrep; r++) {
			const struct b_sum *s = &c->rep[r];

			if (!s->ok || (s->reads == want && s->read_bytes == want * p->shard_bytes))
				continue;
			rp->check_failed = true;
			snprintf(rp->check_err, sizeof(rp->check_err),
				 "%s, run %u: %" PRIu64 " backend reads (%" PRIu64 " bytes), want %"
				 PRIu64 " (%s)", rp->sh->run[i].name, r + 1, s->reads, s->read_bytes,
				 want, i == RUN_PRIVATE ? "every unique shard once per rank"
						       : "every unique shard once for the node");
			return;
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */

int kvs_cli_bench(int argc, char **argv)
{
	struct b_opts o;
	struct b_work w;
	struct b_report rp;
	struct b_shm *sh = MAP_FAILED;
	bool help = false, made_root = false, progress;
	char err[B_ERR] = "", desc[PATH_MAX + 64], root[PATH_MAX];
	int rc, memfd = -1, ret = KVS_CLI_FAIL;
	uint64_t total = 0;

	rc = parse_opts(argc, argv, &o, &help);
	if (rc)
		return rc;
	if (help) {
		usage(stdout);
		return KVS_CLI_OK;
	}
	if (o.internal)
		return b_internal_run(o.internal);
	b_verbose = o.verbose;
	memset(&w, 0, sizeof(w));
	memset(&rp, 0, sizeof(rp));
	rp.o = &o;

	/* The workload, in this process's memory first. */
	uint32_t per = B_TASK_SHARDS / o.shards ? B_TASK_SHARDS / o.shards : 1;
	if (o.workload == WORK_PREFIX)
		rc = b_work_prefix(&w, o.blocks, o.seed, per);
	else if (o.workload == WORK_SCAN)
		rc = b_work_scan(&w, o.blocks, per);
	else
		rc = b_work_trace(&w, o.trace, o.blocks_set ? o.blocks : 0, per, err);
	if (rc == 0 && o.workload != WORK_TRACE)
		rc = b_work_ids(&w, o.seed);
	if (rc == 0)
		rc = b_work_finish(&w);
	if (rc < 0) {
		fprintf(stderr, "kvshare bench: %s\n", err[0] ? err : "out of memory");
		b_work_free(&w);
		return o.workload == WORK_TRACE && rc == -EINVAL ? KVS_CLI_USAGE : KVS_CLI_FAIL;
	}
	if (o.workload == WORK_PREFIX)
		snprintf(desc, sizeof(desc), "workload prefix (seed %" PRIu64 ")", o.seed);
	else if (o.workload == WORK_SCAN)
		snprintf(desc, sizeof(desc), "workload scan");
	else if (w.nreq < w.trace_total)
		snprintf(desc, sizeof(desc), "trace %s (first %u of %u requests)", o.trace, w.nreq,
			 w.trace_total);
	else
		snprintf(desc, sizeof(desc), "trace %s (all %u requests)", o.trace, w.nreq);
	/* --trace without --blocks: the caches are sized from the whole trace. */
	bool trace_sized = o.workload == WORK_TRACE && !o.blocks_set && !o.capacity;
	rp.workload_desc = desc;

	/* Sizes. */
	uint64_t unique_shards = (uint64_t)w.nblocks * o.shards;
	uint32_t maxtb = 1; /* the largest task, in blocks */
	for (uint32_t t = 0; t < w.ntasks; t++)
		if (w.task[t + 1] - w.task[t] > maxtb)
			maxtb = w.task[t + 1] - w.task[t];
	uint64_t maxsh = (uint64_t)maxtb * o.shards;
	uint64_t slots = o.capacity ? o.capacity / o.shard_bytes : unique_shards + unique_shards / 4 + 64;
	if (!o.capacity && slots < 2 * B_WINDOW * maxsh)
		slots = 2 * B_WINDOW * maxsh;
	/* What to lower when a size is too large. */
	const char *lower = trace_sized ? "pass --blocks N to cap the trace" :
			    "lower --capacity, --blocks or --shard-size";
	if (unique_shards > (1ull << 40) / o.shard_bytes ||
	    unique_shards * o.shard_bytes > (1ull << 40)) {
		fprintf(stderr, "kvshare bench: a working set of %" PRIu64 " shards of %" PRIu64
				" bytes is over 1 TiB: %s\n", unique_shards, o.shard_bytes, lower);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (slots > (1ull << 31) - 1) {
		fprintf(stderr, "kvshare bench: %" PRIu64 " slots per cache is over the cache's "
				"2^31 - 1: %s, or a larger --shard-size\n", slots,
			trace_sized ? "pass --blocks N to cap the trace" : "a smaller --capacity");
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (slots < 2 * B_WINDOW * maxsh) {
		fprintf(stderr, "kvshare bench: --capacity holds %" PRIu64 " shards; a rank pins up to %"
				PRIu64 " at once: give at least %" PRIu64 " bytes (kvshare bench --help)\n",
			slots, B_WINDOW * maxsh, 2 * B_WINDOW * maxsh * o.shard_bytes);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (o.check && slots < unique_shards) {
		fprintf(stderr, "kvshare bench: --check needs a capacity that holds the working set "
				"(%" PRIu64 " shards; --capacity gives %" PRIu64 ")\n", unique_shards, slots);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	rp.unique_shards = unique_shards;
	rp.unique_bytes = unique_shards * o.shard_bytes;
	if (trace_sized) {
		char cb[32];

		b_fmt_size(cb, sizeof(cb), slots * o.shard_bytes);
		snprintf(rp.trace_note, sizeof(rp.trace_note),
			 "trace: %u requests, %u distinct blocks: caches sized from the trace, %u "
			 "blocks + 25%% (%" PRIu64 " slots, %s each; --blocks N caps the trace)",
			 w.nreq, w.nblocks, w.nblocks, slots, cb);
	}

	/* Memory at the peak (the private run: a cache per rank), against the
	 * machine's: refuse what can only end with the OOM killer. */
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t cache_bytes = slots * o.shard_bytes;
	uint64_t need = rp.unique_bytes + (uint64_t)o.ranks * cache_bytes +
			(uint64_t)o.ranks * B_WINDOW * maxsh * o.shard_bytes;
	if (pages > 0 && psize > 0 && need > (uint64_t)pages / 10 * 9 * (uint64_t)psize) {
		char a[32], b[32], c[32];

		b_fmt_size(a, sizeof(a), need);
		b_fmt_size(b, sizeof(b), cache_bytes);
		b_fmt_size(c, sizeof(c), (uint64_t)pages * (uint64_t)psize);
		uint64_t fit = fit_blocks(&o, (uint64_t)pages * (uint64_t)psize);

		if (trace_sized && fit)
			fprintf(stderr, "kvshare bench: --trace %s: its %u distinct blocks size each "
					"cache at %s, and the run needs about %s of memory (%u private "
					"caches, the reference bytes, the ranks' buffers); the machine has "
					"%s: pass --blocks N to take only the requests that fit in N "
					"distinct blocks (about %" PRIu64 " fit)\n", o.trace, w.nblocks, b,
				a, o.ranks, c, fit);
		else if (trace_sized)
			fprintf(stderr, "kvshare bench: --trace %s: the run needs about %s of memory "
					"(%u private caches of %s, the reference bytes, the ranks' "
					"buffers); the machine has %s, too little for even one block: "
					"lower --shards or --shard-size\n", o.trace, a, o.ranks, b, c);
		else
			fprintf(stderr, "kvshare bench: this run needs about %s of memory (%u private "
					"caches of %s, the reference bytes, the ranks' buffers); the "
					"machine has %s: %s\n", a, o.ranks, b, c, lower);
		ret = KVS_CLI_USAGE;
		goto out;
	}

	/* The shared block: header, workload, latency samples, reference bytes. */
	uint64_t off = (sizeof(struct b_shm) + 63) & ~63ull, off_ids, off_task, off_acc, off_lat, off_ref;
	off_ids = off;
	off += ((uint64_t)w.nblocks * sizeof(struct kvs_block_id) + 63) & ~63ull;
	off_task = off;
	off += ((uint64_t)(w.ntasks + 1) * 4 + 63) & ~63ull;
	off_acc = off;
	off += ((uint64_t)w.naccess * 4 + 63) & ~63ull;
	off_lat = off;
	off += ((uint64_t)B_RUNS * o.ranks * w.ntasks * 4 + 4095) & ~4095ull;
	off_ref = off;
	total = off + rp.unique_bytes;
	memfd = memfd_create("kvshare-bench", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, (off_t)total) < 0) {
		fprintf(stderr, "kvshare bench: memfd of %" PRIu64 " bytes: %s\n", total, strerror(errno));
		goto out;
	}
	sh = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, "kvshare bench: mmap of %" PRIu64 " bytes: %s\n", total, strerror(errno));
		goto out;
	}
	rp.sh = sh;
	sh->magic = B_MAGIC;
	sh->layout = sizeof(struct b_shm);
	sh->p = (struct b_params){
		.ranks = o.ranks, .shards = o.shards, .backend = o.backend, .workload = o.workload,
		.shard_bytes = o.shard_bytes, .cap_slots = slots, .latency_ns = o.latency_us * 1000,
		.qd = o.qd, .verbose = o.verbose, .task_max_blocks = maxtb, .nblocks = w.nblocks,
		.ntasks = w.ntasks, .naccess = w.naccess, .nreq = w.nreq, .seed = o.seed,
		.off_ids = off_ids, .off_task = off_task, .off_acc = off_acc, .off_lat = off_lat,
		.off_ref = off_ref, .total = total,
	};
	memcpy((char *)sh + off_ids, w.ids, (size_t)w.nblocks * sizeof(struct kvs_block_id));
	memcpy((char *)sh + off_task, w.task, (size_t)(w.ntasks + 1) * 4);
	memcpy((char *)sh + off_acc, w.acc, (size_t)w.naccess * 4);
	for (uint32_t b = 0; b < w.nblocks; b++)
		for (uint32_t s = 0; s < o.shards; s++)
			kvs_pattern_fill(&w.ids[b], s, 0, (void *)sh_ref(sh, b, s), o.shard_bytes);

	/* The runs' names and caches: unique per invocation. */
	static const char *const names[B_RUNS] = { "kernel shared", "plain shared", "private" };
	static const char tags[B_RUNS] = { 'k', 'p', 'v' };
	uint64_t nonce = kvs_mix64(kvs_now_ns() ^ ((uint64_t)getpid() << 32));
	char tag[32];
	snprintf(tag, sizeof(tag), "%d.%08" PRIx32, (int)getpid(), (uint32_t)nonce);
	for (uint32_t i = 0; i < B_RUNS; i++) {
		struct b_run *run = &sh->run[i];

		snprintf(run->name, sizeof(run->name), "%s", names[i]);
		snprintf(run->uid, sizeof(run->uid), "kvsbench.%s.%c", tag, tags[i]);
		run->share = i != RUN_PRIVATE;
		snprintf(run->want_variant, sizeof(run->want_variant), "%s",
			 i == RUN_PLAIN ? "plain" : KVS_CLI_VARIANT);
	}

	b_signals_block();
	progress = isatty(STDERR_FILENO);

	rc = b_probe_engine(sh, o.engine, rp.engine_note, sizeof(rp.engine_note));
	if (rc < 0) {
		fprintf(stderr, "kvshare bench: --copy-engine cuda: %s\n", rp.engine_note);
		goto out;
	}

	/* The store, filled by one process through the store API. */
	if (o.backend == BACKEND_POSIX) {
		snprintf(root, sizeof(root), "%s/kvshare-bench.XXXXXX", o.root ? o.root : "/tmp");
		if (!mkdtemp(root)) {
			fprintf(stderr, "kvshare bench: creating the store directory %s: %s\n", root,
				strerror(errno));
			goto out;
		}
		made_root = true;
		snprintf(sh->p.root, sizeof(sh->p.root), "%s", root);
	}
	if (o.backend == BACKEND_REDIS)
		b_redis_setup(&sh->p, o.redis_endpoint, o.redis_cluster, tag, o.keep);
	if (o.backend != BACKEND_LATENCY) {
		if (progress)
			fprintf(stderr, "  filling the store...");
		rc = b_run_fill(sh, err, &rp.fill_s);
		if (progress)
			fprintf(stderr, "\r%40s\r", "");
		if (rc < 0) {
			fprintf(stderr, "kvshare bench: %s\n", err[0] ? err : "fill failed");
			ret = rc == -EINVAL ? KVS_CLI_USAGE : KVS_CLI_FAIL;
			goto out;
		}
		rp.filled = true;
	}

	rp.repeat = o.repeat;
	run_configs(&rp, memfd, progress);
	check_reads(&rp);

	bool ok = !b_interrupted && !rp.check_failed;
	for (uint32_t i = 0; i < B_RUNS; i++)
		if (rp.conf[i].ran && !rp.conf[i].ok)
			ok = false;
	if (o.json)
		b_print_json(&rp, ok);
	else
		b_print_table(&rp);
	fflush(stdout);
	ret = ok ? KVS_CLI_OK : KVS_CLI_FAIL;
	/* One line naming the cause. */
	for (uint32_t i = 0; i < B_RUNS && !ok; i++)
		if (rp.conf[i].ran && !rp.conf[i].ok) {
			fprintf(stderr, "kvshare bench: %s: %s%s\n", sh->run[i].name, rp.conf[i].err,
				open_refused(&sh->run[i], o.ranks) == -ENOMEM
					? (o.workload == WORK_TRACE && !o.blocks_set
						   ? " (the trace sized the caches: pass --blocks N to cap it)"
						   : " (lower --capacity or --blocks)")
					: "");
			break;
		}
	if (ok == false && rp.check_failed)
		fprintf(stderr, "kvshare bench: --check: %s\n", rp.check_err);
out:
	if (made_root) {
		if (o.keep)
			fprintf(stderr, "kvshare bench: store kept in %s\n", root);
		else
			b_store_remove(root);
	}
	if (sh != MAP_FAILED)
		munmap(sh, total);
	if (memfd >= 0)
		close(memfd);
	b_work_free(&w);
	return ret;
}
