/*
 * tools/stat.c — `kvshare stat UNIQUE_ID`: a live cache as a watcher sees it.
 *
 * It opens a watcher store on the cache (device_id -1, KVS_CACHE_ATTACH so the
 * geometry comes from the segment, backend none): a watcher maps the control
 * plane only, starts no thread, never pins a slot, and reads every counter
 * racily without locks, so the ranks are not disturbed.  The store handle is what
 * gives the store counters (kvs_store_stats) besides the cache's (kvs_cache_stats
 * on kvs_store_cache()); DESIGN.md §5 has watcher stores for exactly this.
 *
 * Attaching is not free of effects, so stat first looks from outside
 * (kvs_cache_inspect: read-only).  A cache that is not READY, of another layout,
 * corrupt, or stale (no live process) is not attached: an open would adopt (repair
 * and reset) a stale cache, and its clean close would even remove a cache that is
 * not persistent.  A stale cache is described read-only instead and stat exits 1.
 * Two windows remain, both closed by how stat leaves: if the last rank dies
 * between the look and the attach, the open adopts it (visible as adoptions + 1);
 * if every rank leaves while stat watches, stat is the last one attached.  In both
 * cases stat exits without detaching when the cache is not persistent, so it is
 * not removed: its rank entry looks dead once the process is gone, and the next
 * rank adopts the cache (or `kvshare clean` removes it).
 *
 * What stat's attach does is said: the entries of ranks that died (attached,
 * their liveness lock free) are reaped by the next attach, stat's included, so
 * stat notes them at its look (inspect lists them) and at every gather, and says
 * by pid which ones are gone since (reaped).  A rank is a GPU rank or a CPU-only
 * one by the copy engine its store recorded (host: CPU-only).  Load hits and
 * dump dedups are apart (a dump that finds its shard is not a read served).
 * With no live cache (absent, being created, stale), --prometheus still writes
 * kvshare_up 0 and the cache's state; for a stale one its sizes and dead ranks.
 *
 *   text          the default: one block per interval
 *   --json        one JSON object (jansson); with --watch one per line
 *   --prometheus  node-exporter textfile format, written to FILE.tmp and renamed
 *                 over FILE each interval (atomic for the collector)
 *   --watch N     repeat every N seconds (absolute CLOCK_MONOTONIC deadlines,
 *                 clock_nanosleep) until SIGINT or SIGTERM
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvshare.h"
#include "tools/cli.h"

#define WATCH_MIN_S 0.1
#define WATCH_MAX_S 86400.0

struct stat_opts {
	const char *uid;
	double watch_s;  /* 0: once */
	bool json;
	bool quiet;
	const char *prom;
};

/* One attached rank-table entry and its counters. */
struct stat_rank {
	struct kvs_cache_rank_info ri;
	struct kvs_cache_stats cs;
	struct kvs_store_stats ss;
	int cpu_node; /* node of the CPU the process last ran on (/proc), -1 unknown */
};

/* Everything one interval shows. */
struct stat_snap {
	int look_rc;                /* kvs_cache_inspect's result at the last look */
	struct kvs_cache_info info; /* the header as inspected before attaching */
	struct kvs_cache_stats node;
	struct kvs_store_stats store;
	struct kvs_cache_seg_info segs[KVS_CACHE_MAX_SEGS];
	uint32_t nsegs;
	struct stat_rank ranks[KVS_CACHE_MAX_RANKS];
	uint32_t nranks;
	int self;          /* our entry */
	bool attached;     /* false: a read-only description (stale cache) */
	struct timespec when;
	/* Entries seen dead (attached, process gone) at the last look or gather,
	 * and those of them gone since: reaped (by stat's attach or a peer's). */
	struct kvs_cache_info_rank dead[KVS_CACHE_MAX_RANKS];
	uint32_t ndead;
	struct kvs_cache_info_rank reaped[KVS_CACHE_MAX_RANKS];
	uint32_t nreaped;
};

static const char *const stat_usage =
	"usage: kvshare stat UNIQUE_ID [--watch SECONDS] [--json] [--prometheus FILE] [--quiet]\n"
	"\n"
	"Show a live cache as a watcher sees it (attached read-mostly: no slot is pinned,\n"
	"no rank is disturbed): ranks attached (pid, device, kind: gpu, or cpu for a\n"
	"CPU-only rank copying with the host engine, NUMA node, alive), the dead ranks its\n"
	"attach reaped (by pid), capacity, slots by state, backing of each data segment,\n"
	"the gets of loads (hits, joins, misses) and of dumps (gathered, dedup) apart,\n"
	"owner fills, waits, failures, evictions and CLOCK sweeps, takeovers, the store\n"
	"counters (tasks, latency percentiles, copy GB/s; every error count within its\n"
	"attempts), local_rank_size against the ranks seen, and fallbacks.  A stale cache\n"
	"(no live process) is not attached (that would adopt it): it is described\n"
	"read-only (its dead ranks by pid; --prometheus: kvshare_up 0, its state, bytes\n"
	"and dead ranks) and stat exits 1.  stat is a watcher: it never keeps a cache (the\n"
	"last rank's close removes it whoever watches).\n"
	"\n"
	"  -w, --watch SECONDS     repeat every SECONDS (0.1 .. 86400) until SIGINT/SIGTERM:\n"
	"                          the whole block once, then a line per interval of its\n"
	"                          rates (gets/s and their split, reads, writes, shards\n"
	"                          loaded, tasks, failures per second, p99), as vmstat;\n"
	"                          runs before, between and after caches: with no live\n"
	"                          cache it waits for one (kvshare_up 0 in --prometheus)\n"
	"  -j, --json              JSON (with --watch: one object per line)\n"
	"  -p, --prometheus FILE   write node-exporter textfile metrics (kvshare_*) to FILE\n"
	"                          (FILE.tmp, then renamed: atomic), every interval\n"
	"  -q, --quiet             nothing on stdout (with --prometheus)\n"
	"  -h, --help              this text\n"
	"\n"
	"Exit: 0 ok, 1 failure (no such cache, stale, not attachable), 2 bad usage.\n";

/* ------------------------------------------------------------------------ */
/* Small helpers                                                              */

static volatile sig_atomic_t stat_stop;

static void on_signal(int sig)
{
	(void)sig;
	stat_stop = 1;
}

/* The library's last error line, for a one-line message naming the cause. */
static char last_log[512];

static void stat_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_ERROR)
		snprintf(last_log, sizeof(last_log), "%s", msg);
}

static const char *human_ns(char *buf, size_t len, double ns)
{
	if (ns < 1e3)
		snprintf(buf, len, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.1f ms", ns / 1e6);
	else
		snprintf(buf, len, "%.2f s", ns / 1e9);
	return buf;
}

static const char *backing_name(uint32_t b)
{
	return b == KVS_CACHE_BACKING_HUGETLB ? "hugetlb" : b == KVS_CACHE_BACKING_SHM ? "shm" : "none";
}

/* Parse SECONDS: a finite decimal in [WATCH_MIN_S, WATCH_MAX_S], nothing after it. */
static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < WATCH_MIN_S || v > WATCH_MAX_S)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The NUMA node of the CPU pid last ran on (field 39 of /proc/<pid>/stat), or -1. */
static int pid_cpu_node(int32_t pid)
{
	char path[96], line[1024], *p;
	int cpu = -1, node = -1;
	FILE *f;
	DIR *d;
	struct dirent *de;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	p = fgets(line, sizeof(line), f);
	fclose(f);
	if (!p || !(p = strrchr(line, ')')))
		return -1;
	/* after ")": field 3 (state) onwards; processor is field 39 */
	for (int field = 2; field < 39 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%d", &cpu) != 1 || cpu < 0)
		return -1;
	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d", cpu);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "node", 4) == 0 && sscanf(de->d_name + 4, "%d", &node) == 1)
			break;
	closedir(d);
	return node;
}

/* Upper bound (us) of the latency bucket holding quantile q of the tasks, or 0
 * with no task.  Bucket i counts [2^i, 2^(i+1)) us (bucket 0: < 2 us). */
static uint64_t lat_quantile_us(const struct kvs_store_stats *s, double q, uint64_t *count)
{
	uint64_t n = 0, seen = 0, want;

	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
		n += s->task_lat_us[i];
	if (count)
		*count = n;
	if (n == 0)
		return 0;
	want = (uint64_t)ceil(q * (double)n);
	if (want == 0)
		want = 1;
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		seen += s->task_lat_us[i];
		if (seen >= want)
			return UINT64_C(1) << (i + 1);
	}
	return UINT64_C(1) << KVS_STORE_LAT_BUCKETS;
}

static double copy_gbps(const struct kvs_store_stats *s)
{
	return s->copy_ns ? (double)s->copy_bytes / (double)s->copy_ns : 0.0; /* bytes/ns = GB/s */
}

static uint64_t slots_empty(const struct kvs_cache_stats *c)
{
	uint64_t used = c->slots_ready + c->slots_loading + c->slots_failed;

	return c->slot_count > used ? c->slot_count - used : 0;
}

/* What an entry is: a GPU rank (its store copies with cuda, or it has no
 * store: a device_id names a GPU), a CPU-only rank (its store copies with the
 * host engine: device addresses are host memory), or a watcher. */
enum rank_kind { KIND_GPU, KIND_CPU, KIND_WATCHER };

static enum rank_kind rank_kind(const struct kvs_cache_rank_info *ri)
{
	if (ri->device_id < 0)
		return KIND_WATCHER;
	return ri->copy_engine == KVS_COPY_ENGINE_HOST ? KIND_CPU : KIND_GPU;
}

static const char *const kind_name[] = { "gpu", "cpu", "watcher" };

/* Live ranks of a kind (this stat is a watcher: not among them). */
static uint32_t live_of_kind(const struct stat_snap *s, enum rank_kind k)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += s->ranks[i].ri.alive && rank_kind(&s->ranks[i].ri) == k;
	return n;
}

/* ------------------------------------------------------------------------ */
/* Gathering                                                                  */

/* The dead entries seen before (s->dead) that the snapshot no longer shows
 * dead with the same pid were reaped: into s->reaped.  Then s->dead becomes
 * the snapshot's dead entries. */
static void note_reaped(struct stat_snap *s)
{
	s->nreaped = 0;
	for (uint32_t k = 0; k < s->ndead; k++) {
		bool still = false;

		for (uint32_t i = 0; i < s->nranks && !still; i++)
			still = s->ranks[i].ri.entry == s->dead[k].entry && !s->ranks[i].ri.alive &&
				s->ranks[i].ri.pid == s->dead[k].pid;
		if (!still)
			s->reaped[s->nreaped++] = s->dead[k];
	}
	s->ndead = 0;
	for (uint32_t i = 0; i < s->nranks; i++)
		if (!s->ranks[i].ri.alive)
			s->dead[s->ndead++] = (struct kvs_cache_info_rank){
				.entry = s->ranks[i].ri.entry, .pid = s->ranks[i].ri.pid,
				.device_id = s->ranks[i].ri.device_id, .recorded = 1,
			};
}

/* The dead entries inspect listed (after the live ones), as seen before attaching. */
static void note_dead_inspected(struct stat_snap *s)
{
	const struct kvs_cache_info *in = &s->info;

	s->ndead = 0;
	for (uint32_t k = 0; k < in->ranks_dead && in->ranks_live + k < KVS_CACHE_MAX_RANKS; k++)
		s->dead[s->ndead++] = in->live[in->ranks_live + k];
}

static int gather(struct kvs_store *store, struct stat_snap *s)
{
	struct kvs_cache *c = kvs_store_cache(store);
	int rc;

	clock_gettime(CLOCK_REALTIME, &s->when);
	s->attached = true;
	s->self = kvs_cache_rank(c);
	rc = kvs_cache_stats(c, KVS_STATS_NODE, &s->node);
	if (rc == 0)
		rc = kvs_store_stats(store, KVS_STATS_NODE, &s->store);
	if (rc)
		return rc;
	s->nsegs = 0;
	while (s->nsegs < KVS_CACHE_MAX_SEGS && kvs_cache_seg_info(c, s->nsegs, &s->segs[s->nsegs]) == 0)
		s->nsegs++;
	s->nranks = 0;
	for (int r = 0; r < KVS_CACHE_MAX_RANKS; r++) {
		struct stat_rank *e = &s->ranks[s->nranks];

		rc = kvs_cache_rank_info(c, r, &e->ri);
		if (rc)
			return rc;
		if (!e->ri.attached)
			continue;
		rc = kvs_cache_stats(c, r, &e->cs);
		if (rc == 0)
			rc = kvs_store_stats(store, r, &e->ss);
		if (rc)
			return rc;
		e->cpu_node = e->ri.alive ? pid_cpu_node(e->ri.pid) : -1;
		s->nranks++;
	}
	note_reaped(s);
	return 0;
}

/* Live entries other than ours. */
static uint32_t others_alive(const struct stat_snap *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += s->ranks[i].ri.alive && !s->ranks[i].ri.self;
	return n;
}

/* Entries still attached whose process died (reaped at the next attach). */
static uint32_t dead_entries(const struct stat_snap *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += !s->ranks[i].ri.alive;
	return n;
}

/* ------------------------------------------------------------------------ */
/* Text                                                                       */

/* "  reaped     1 rank: pid 1234 (entry 3, device 0) -- why" (nothing for none). */
static void print_dead(FILE *f, const char *label, const char *why,
		       const struct kvs_cache_info_rank *v, uint32_t n)
{
	if (!n)
		return;
	fprintf(f, "  %-10s %u rank%s:", label, n, n == 1 ? "" : "s");
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%s pid %d (entry %u, %s %d)", i ? "," : "", (int)v[i].pid, v[i].entry,
			v[i].device_id >= 0 ? "device" : "watcher", (int)v[i].device_id);
	fprintf(f, " -- %s\n", why);
}

static void print_text(FILE *f, const struct stat_snap *s)
{
	const struct kvs_cache_info *in = &s->info;
	const struct kvs_cache_stats *n = &s->node;
	const struct kvs_store_stats *st = &s->store;
	char b1[32], b2[32], b3[32], b4[32], tbuf[64];
	uint32_t gpu = 0, cpu = 0, watchers = 0, dead = 0;
	char who[96];
	size_t k = 0;
	struct tm tm;

	localtime_r(&s->when.tv_sec, &tm);
	strftime(tbuf, sizeof(tbuf), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(f, "kvshare stat %s   %s   (libkvshare %s, %s)\n", in->unique_id, tbuf,
		kvs_version(), kvs_variant());
	if (!s->attached) {
		fprintf(f, "  state      stale: no live process attached; not attached (attaching would adopt it)\n");
		fprintf(f, "  capacity   %" PRIu64 " slots x %s = %s (%u shard%s/block, %u reserved)\n",
			in->slot_count, kvs_cli_human_bytes(b1, sizeof(b1), in->slot_bytes),
			kvs_cli_human_bytes(b2, sizeof(b2), in->slot_count * in->slot_bytes), in->shards_per_block,
			in->shards_per_block == 1 ? "" : "s",
			in->reserved_slots);
		fprintf(f, "  size       control %s + data %s (%u segment%s on %s)\n",
			kvs_cli_human_bytes(b1, sizeof(b1), in->ctl_bytes), kvs_cli_human_bytes(b2, sizeof(b2), in->data_bytes),
			in->seg_count, in->seg_count == 1 ? "" : "s",
			in->flags & KVS_CACHE_INFO_HUGETLB ? in->hugetlb_dir : "/dev/shm");
		fprintf(f, "  lifetime   layout %u, persist %s, adopted %u time(s), owner uid %u mode %04o\n",
			in->layout_version, in->flags & KVS_CACHE_INFO_PERSIST ? "on" : "off",
			in->adoptions, in->uid, in->mode);
		print_dead(f, "dead", "died, not reaped (the next attach reaps them)", s->dead, s->ndead);
		return;
	}
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct kvs_cache_rank_info *ri = &s->ranks[i].ri;

		if (!ri->alive)
			dead++;
		else if (rank_kind(ri) == KIND_GPU)
			gpu++;
		else if (rank_kind(ri) == KIND_CPU)
			cpu++;
		else
			watchers++;
	}
	/* "2 GPU ranks", "2 CPU-only ranks", "1 GPU rank + 1 CPU-only rank" */
	if (gpu || !cpu)
		k = (size_t)snprintf(who, sizeof(who), "%u GPU rank%s", gpu, gpu == 1 ? "" : "s");
	if (cpu && k < sizeof(who))
		snprintf(who + k, sizeof(who) - k, "%s%u CPU-only rank%s", k ? " + " : "", cpu,
			 cpu == 1 ? "" : "s");
	fprintf(f, "  state      live: %s + %u watcher%s attached (this stat included)%s; "
		"layout %u, persist %s, adopted %u time(s)\n",
		who, watchers, watchers == 1 ? "" : "s",
		dead ? ", dead entries not reaped yet" : "", in->layout_version,
		in->flags & KVS_CACHE_INFO_PERSIST ? "on" : "off", n->adoptions);
	print_dead(f, "reaped", "died; reaped (its pins dropped) since stat looked: by stat's attach "
		   "or a peer's", s->reaped, s->nreaped);
	fprintf(f, "  ranks      local_rank_size %u, ranks seen %u%s%s\n", in->local_rank_size,
		n->gpu_ranks_attached,
		n->gpu_ranks_attached > in->local_rank_size ? " (MORE than local_rank_size)" :
		n->gpu_ranks_attached < in->local_rank_size ? " (fewer than local_rank_size)" : "",
		n->lrs_mismatch ? "; attaches beyond it so far: see lrs_mismatch" : "");
	fprintf(f, "  capacity   %" PRIu64 " slots x %s = %s (%u shard%s/block, %u reserved); control %s\n",
		n->slot_count, kvs_cli_human_bytes(b1, sizeof(b1), n->slot_bytes),
		kvs_cli_human_bytes(b2, sizeof(b2), n->slot_count * n->slot_bytes), in->shards_per_block,
		in->shards_per_block == 1 ? "" : "s",
		in->reserved_slots, kvs_cli_human_bytes(b3, sizeof(b3), in->ctl_bytes));
	fprintf(f, "  slots      ready %" PRIu64 ", loading %" PRIu64 ", failed %" PRIu64 ", empty %" PRIu64
		"; pinned %" PRIu64 "\n",
		n->slots_ready, n->slots_loading, n->slots_failed, slots_empty(n), n->slots_pinned);
	for (uint32_t i = 0; i < s->nsegs; i++) {
		const struct kvs_cache_seg_info *g = &s->segs[i];
		char node[16] = "none", bound[24] = "not bound";

		if (g->node >= 0)
			snprintf(node, sizeof(node), "%d", g->node);
		if (g->bound_node >= 0)
			snprintf(bound, sizeof(bound), "bound to %d", g->bound_node);
		fprintf(f, "  %-10s segment %u: %s, %s pages, node %s (%s), %s, slots %" PRIu64 "-%" PRIu64
			", %s\n", i == 0 ? "backing" : "", g->seg, backing_name(g->backing),
			kvs_cli_human_bytes(b1, sizeof(b1), g->page_bytes), node, bound, kvs_cli_human_bytes(b2, sizeof(b2), g->bytes),
			g->first_slot, g->first_slot + g->slot_count - 1, g->path[0] ? g->path : "?");
	}
	fprintf(f, "  startup    pre-fault %s in %s by up to %u threads (%.1f ms/GiB); registered %s of %s"
		" (%.1f ms/GiB), %s; %" PRIu64 " shard copies staged\n",
		kvs_cli_human_bytes(b1, sizeof(b1), n->data_bytes),
		human_ns(b2, sizeof(b2), (double)n->prefault_ns), n->prefault_threads,
		n->prefault_ms_per_gib, kvs_cli_human_bytes(b3, sizeof(b3), st->registered_bytes),
		kvs_cli_human_bytes(b4, sizeof(b4), st->register_total_bytes), st->register_ms_per_gib,
		n->gpu_ranks_attached == 0 ? "no live rank"
		: st->ready ? "every live rank ready"
			    : "NOT ready (a live rank's registration in progress or failed)",
		st->staged_shards);
	fprintf(f, "  fallbacks  %s%s%s\n", n->fallbacks ? "" : "none",
		n->fallbacks & KVS_FALLBACK_HUGETLB ? "hugetlb (data plane on /dev/shm, not hugetlbfs) " : "",
		n->fallbacks & KVS_FALLBACK_NUMA ? "numa (no NUMA binding)" : "");
	uint64_t queries = n->hits + n->joins + n->misses;
	fprintf(f, "  gets       %" PRIu64 " (loads) = %" PRIu64 " hits (READY) + %" PRIu64 " joins (a read "
		"in flight) + %" PRIu64 " misses (owner: read it); served by the tier %.1f%% "
		"(hits + joins), hit ratio %.1f%%; %" PRIu64 " owner fills\n",
		queries, n->hits, n->joins, n->misses,
		queries ? 100.0 * (double)(n->hits + n->joins) / (double)queries : 0.0,
		queries ? 100.0 * (double)n->hits / (double)queries : 0.0, n->owner_fills);
	fprintf(f, "  dumps      %" PRIu64 " gets (not in the loads' above): %" PRIu64 " shards "
		"gathered, %" PRIu64 " dedup (already READY, or a peer's dump)\n", n->dump_gets,
		st->shards_dumped, st->dump_dedup);
	fprintf(f, "  waits      %" PRIu64 " kvs_slot_wait calls, %s in all (mean %s)\n", n->waits,
		human_ns(b1, sizeof(b1), (double)n->wait_ns),
		human_ns(b2, sizeof(b2), n->waits ? (double)n->wait_ns / (double)n->waits : 0.0));
	fprintf(f, "  failures   %" PRIu64 " fills failed; %" PRIu64 " takeovers of dead fillers; %" PRIu64
		" gets refused (every slot pinned)\n", n->failures, n->takeovers, n->enospc);
	fprintf(f, "  eviction   %" PRIu64 " evictions, %" PRIu64 " CLOCK sweeps\n", n->evictions,
		n->clock_sweeps);
	fprintf(f, "  recovery   %" PRIu64 " lock repairs, %" PRIu64 " dead ranks reaped, %" PRIu64
		" attaches beyond local_rank_size\n", n->lock_repairs, n->ranks_reaped, n->lrs_mismatch);
	uint64_t ntasks = 0;
	uint64_t p50 = lat_quantile_us(st, 0.50, &ntasks), p90 = lat_quantile_us(st, 0.90, NULL);
	uint64_t p99 = lat_quantile_us(st, 0.99, NULL), p999 = lat_quantile_us(st, 0.999, NULL);
	fprintf(f, "  store      tasks: %" PRIu64 " load, %" PRIu64 " dump, %" PRIu64 " prefetch; %" PRIu64
		" failed (%" PRIu64 " timed out)\n", st->tasks_load, st->tasks_dump, st->tasks_prefetch,
		st->tasks_failed, st->tasks_timedout);
	fprintf(f, "             shards: %" PRIu64 " loaded (%" PRIu64 " READY at get), %" PRIu64
		" dumped, %" PRIu64 " dump dedup; owner reads %" PRIu64 " (%" PRIu64 " errors), backend "
		"writes %" PRIu64 " (%" PRIu64 " errors); prealloc %" PRIu64 " (%" PRIu64 " hit)\n",
		st->shards_loaded, st->load_hits, st->shards_dumped, st->dump_dedup, st->owner_reads,
		st->read_errors, st->backend_writes, st->write_errors, st->prealloc, st->prealloc_hits);
	if (ntasks)
		fprintf(f, "             latency (%" PRIu64 " tasks, log2 buckets): p50 <= %" PRIu64
			" us, p90 <= %" PRIu64 " us, p99 <= %" PRIu64 " us, p99.9 <= %" PRIu64 " us\n",
			ntasks, p50, p90, p99, p999);
	else
		fprintf(f, "             latency: no task finished yet\n");
	fprintf(f, "             copy %s in %s = %.2f GB/s\n", kvs_cli_human_bytes(b1, sizeof(b1), st->copy_bytes),
		human_ns(b2, sizeof(b2), (double)st->copy_ns), copy_gbps(st));
	fprintf(f, "  per rank   %-5s %-8s %-7s %-7s %-4s %-5s %5s %9s %9s %9s %9s %9s %9s %7s %9s\n",
		"ENTRY", "PID", "DEVICE", "KIND", "NODE", "ALIVE", "PINS", "HITS", "JOINS", "MISSES",
		"DEDUP", "FILLS", "WAITS", "TASKS", "SHARDS");
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		char dev[16], node[16] = "-";

		if (e->ri.device_id >= 0)
			snprintf(dev, sizeof(dev), "%d", e->ri.device_id);
		else
			snprintf(dev, sizeof(dev), "-");
		if (e->cpu_node >= 0)
			snprintf(node, sizeof(node), "%d", e->cpu_node);
		fprintf(f, "  %-10s %-5u %-8d %-7s %-7s %-4s %-5s %5u %9" PRIu64 " %9" PRIu64 " %9" PRIu64
			" %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %7" PRIu64 " %9" PRIu64 "\n", "",
			e->ri.entry, (int)e->ri.pid, dev, kind_name[rank_kind(&e->ri)], node,
			e->ri.self ? "self" : e->ri.alive ? "yes" : "DEAD", e->ri.pins, e->cs.hits,
			e->cs.joins, e->cs.misses, e->ss.dump_dedup, e->cs.owner_fills, e->cs.waits,
			e->ss.tasks_load + e->ss.tasks_dump + e->ss.tasks_prefetch, e->ss.shards_loaded);
	}
}

/*
 * --watch in text: the whole block once (at each attach), then one line per
 * interval of what happened in it, as vmstat does: rates per second over the
 * interval and its latency percentile, a header every RATE_HEADER_EVERY lines.
 */
#define RATE_HEADER_EVERY 20

struct rates {
	struct kvs_cache_stats node;
	struct kvs_store_stats store;
	struct timespec when;
	unsigned lines;
	bool have;
};

/* now - before of a counter read racily twice: never negative. */
static uint64_t delta(uint64_t now, uint64_t before)
{
	return now > before ? now - before : 0;
}

static double per_s(uint64_t now, uint64_t before, double secs)
{
	return secs > 0 ? (double)delta(now, before) / secs : 0;
}

static void print_rates(FILE *f, const struct stat_snap *s, struct rates *r)
{
	const struct kvs_cache_stats *n = &s->node, *p = &r->node;
	const struct kvs_store_stats *st = &s->store, *q = &r->store;
	double secs = (double)(s->when.tv_sec - r->when.tv_sec) +
		      (double)(s->when.tv_nsec - r->when.tv_nsec) / 1e9;
	uint64_t gets = n->hits + n->joins + n->misses, gets0 = p->hits + p->joins + p->misses;
	uint64_t tasks = 0;
	struct kvs_store_stats d = { 0 };
	struct tm tm;
	char when[16];

	if (r->lines++ % RATE_HEADER_EVERY == 0)
		fprintf(f, "%-8s %9s %6s %6s %6s %9s %9s %10s %8s %6s %9s %5s\n", "time", "gets/s",
			"hit%", "join%", "miss%", "reads/s", "writes/s", "loaded/s", "tasks/s",
			"fail/s", "p99<=ms", "ranks");
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		d.task_lat_us[i] = delta(st->task_lat_us[i], q->task_lat_us[i]);
		tasks += d.task_lat_us[i];
	}
	localtime_r(&s->when.tv_sec, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fprintf(f, "%-8s %9.0f %6.1f %6.1f %6.1f %9.0f %9.0f %10.0f %8.1f %6.1f %9.3f %5u\n", when,
		per_s(gets, gets0, secs),
		gets > gets0 ? 100.0 * (double)delta(n->hits, p->hits) / (double)(gets - gets0) : 0,
		gets > gets0 ? 100.0 * (double)delta(n->joins, p->joins) / (double)(gets - gets0) : 0,
		gets > gets0 ? 100.0 * (double)delta(n->misses, p->misses) / (double)(gets - gets0) : 0,
		per_s(st->owner_reads, q->owner_reads, secs),
		per_s(st->backend_writes, q->backend_writes, secs),
		per_s(st->shards_loaded, q->shards_loaded, secs), (double)tasks / (secs > 0 ? secs : 1),
		per_s(st->tasks_failed, q->tasks_failed, secs),
		tasks ? (double)lat_quantile_us(&d, 0.99, NULL) / 1e3 : 0.0, n->gpu_ranks_attached);
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                       */

#define JSET(o, k, v) json_object_set_new((o), (k), (v))
#define JU(v) json_integer((json_int_t)(v))

static json_t *json_cache_stats(const struct kvs_cache_stats *c)
{
	json_t *o = json_object();

	JSET(o, "queries", JU(c->hits + c->joins + c->misses));
	JSET(o, "hits", JU(c->hits));
	JSET(o, "joins", JU(c->joins));
	JSET(o, "misses", JU(c->misses));
	JSET(o, "owner_fills", JU(c->owner_fills));
	JSET(o, "dedup_hits", JU(c->hits + c->joins)); /* of loads: dumps' are dump_gets */
	JSET(o, "dump_gets", JU(c->dump_gets));
	JSET(o, "waits", JU(c->waits));
	JSET(o, "wait_ns", JU(c->wait_ns));
	JSET(o, "failures", JU(c->failures));
	JSET(o, "evictions", JU(c->evictions));
	JSET(o, "clock_sweeps", JU(c->clock_sweeps));
	JSET(o, "takeovers", JU(c->takeovers));
	JSET(o, "lock_repairs", JU(c->lock_repairs));
	JSET(o, "ranks_reaped", JU(c->ranks_reaped));
	JSET(o, "enospc", JU(c->enospc));
	JSET(o, "data_bytes", JU(c->data_bytes));
	JSET(o, "prefault_ns", JU(c->prefault_ns));
	JSET(o, "prefault_ms_per_gib", json_real(c->prefault_ms_per_gib));
	JSET(o, "prefault_threads", JU(c->prefault_threads));
	return o;
}

static json_t *json_store_stats(const struct kvs_store_stats *s)
{
	json_t *o = json_object(), *lat = json_object(), *hist = json_array();
	uint64_t n = 0;

	JSET(o, "tasks_load", JU(s->tasks_load));
	JSET(o, "tasks_dump", JU(s->tasks_dump));
	JSET(o, "tasks_prefetch", JU(s->tasks_prefetch));
	JSET(o, "tasks_failed", JU(s->tasks_failed));
	JSET(o, "tasks_timedout", JU(s->tasks_timedout));
	JSET(o, "shards_loaded", JU(s->shards_loaded));
	JSET(o, "shards_dumped", JU(s->shards_dumped));
	JSET(o, "dump_dedup", JU(s->dump_dedup));
	JSET(o, "load_hits", JU(s->load_hits));
	JSET(o, "owner_reads", JU(s->owner_reads));
	JSET(o, "read_errors", JU(s->read_errors));
	JSET(o, "backend_writes", JU(s->backend_writes));
	JSET(o, "write_errors", JU(s->write_errors));
	JSET(o, "prealloc", JU(s->prealloc));
	JSET(o, "prealloc_hits", JU(s->prealloc_hits));
	JSET(o, "copy_bytes", JU(s->copy_bytes));
	JSET(o, "copy_ns", JU(s->copy_ns));
	JSET(o, "copy_gbps", json_real(copy_gbps(s)));
	JSET(o, "register_total_bytes", JU(s->register_total_bytes));
	JSET(o, "registered_bytes", JU(s->registered_bytes));
	JSET(o, "register_ns", JU(s->register_ns));
	JSET(o, "register_ms_per_gib", json_real(s->register_ms_per_gib));
	JSET(o, "staged_shards", JU(s->staged_shards));
	JSET(o, "ready", json_boolean(s->ready));
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
		json_array_append_new(hist, JU(s->task_lat_us[i]));
	JSET(lat, "p50_us_max", JU(lat_quantile_us(s, 0.50, &n)));
	JSET(lat, "p90_us_max", JU(lat_quantile_us(s, 0.90, NULL)));
	JSET(lat, "p99_us_max", JU(lat_quantile_us(s, 0.99, NULL)));
	JSET(lat, "p999_us_max", JU(lat_quantile_us(s, 0.999, NULL)));
	JSET(lat, "tasks", JU(n));
	JSET(lat, "log2_us_buckets", hist);
	JSET(o, "task_latency", lat);
	return o;
}

static json_t *json_dead(const struct kvs_cache_info_rank *v, uint32_t n)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:i, s:i, s:i}", "entry", (int)v[i].entry, "pid",
						   (int)v[i].pid, "device_id", (int)v[i].device_id));
	return a;
}

static json_t *json_snap(const struct stat_snap *s)
{
	const struct kvs_cache_info *in = &s->info;
	const struct kvs_cache_stats *n = &s->node;
	json_t *o = json_object(), *slots, *segs, *ranks, *fb;
	char mode[8];

	JSET(o, "unique_id", json_string(in->unique_id));
	JSET(o, "time", json_real((double)s->when.tv_sec + (double)s->when.tv_nsec / 1e9));
	JSET(o, "library", json_pack("{s:s, s:s}", "version", kvs_version(), "variant", kvs_variant()));
	JSET(o, "state", json_string(s->attached ? "live" : "stale"));
	JSET(o, "attached", json_boolean(s->attached));
	JSET(o, "layout_version", JU(in->layout_version));
	JSET(o, "persist", json_boolean(in->flags & KVS_CACHE_INFO_PERSIST));
	JSET(o, "owner_uid", JU(in->uid));
	snprintf(mode, sizeof(mode), "%04o", in->mode);
	JSET(o, "mode", json_string(mode));
	JSET(o, "local_rank_size", JU(in->local_rank_size));
	JSET(o, "shards_per_block", JU(in->shards_per_block));
	JSET(o, "reserved_slots", JU(in->reserved_slots));
	JSET(o, "ctl_bytes", JU(in->ctl_bytes));
	JSET(o, "data_bytes", JU(in->data_bytes));
	if (!s->attached) {
		JSET(o, "ranks_attached", JU(0));
		JSET(o, "ranks_dead", JU(s->ndead));
		JSET(o, "dead_ranks", json_dead(s->dead, s->ndead)); /* not reaped: not attached */
		JSET(o, "slot_count", JU(in->slot_count));
		JSET(o, "slot_bytes", JU(in->slot_bytes));
		JSET(o, "capacity_bytes", JU(in->slot_count * in->slot_bytes));
		JSET(o, "adoptions", JU(in->adoptions));
		return o;
	}
	JSET(o, "ranks_attached", JU(n->ranks_attached));
	/* device_id >= 0, then by copy engine: GPU (cuda, or no store) or CPU-only (host) */
	JSET(o, "device_ranks_attached", JU(n->gpu_ranks_attached));
	JSET(o, "gpu_ranks_attached", JU(live_of_kind(s, KIND_GPU)));
	JSET(o, "cpu_ranks_attached", JU(live_of_kind(s, KIND_CPU)));
	JSET(o, "reaped", json_dead(s->reaped, s->nreaped)); /* since the last look or gather */
	JSET(o, "lrs_mismatch", JU(n->lrs_mismatch));
	JSET(o, "adoptions", JU(n->adoptions));
	JSET(o, "slot_count", JU(n->slot_count));
	JSET(o, "slot_bytes", JU(n->slot_bytes));
	JSET(o, "capacity_bytes", JU(n->slot_count * n->slot_bytes));
	slots = json_object();
	JSET(slots, "ready", JU(n->slots_ready));
	JSET(slots, "loading", JU(n->slots_loading));
	JSET(slots, "failed", JU(n->slots_failed));
	JSET(slots, "empty", JU(slots_empty(n)));
	JSET(slots, "pinned", JU(n->slots_pinned));
	JSET(o, "slots", slots);
	fb = json_array();
	if (n->fallbacks & KVS_FALLBACK_HUGETLB)
		json_array_append_new(fb, json_string("hugetlb"));
	if (n->fallbacks & KVS_FALLBACK_NUMA)
		json_array_append_new(fb, json_string("numa"));
	JSET(o, "fallbacks", fb);
	segs = json_array();
	for (uint32_t i = 0; i < s->nsegs; i++) {
		const struct kvs_cache_seg_info *g = &s->segs[i];

		json_array_append_new(segs, json_pack("{s:i, s:s, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:s}",
			"segment", (int)g->seg, "backing", backing_name(g->backing),
			"page_bytes", (json_int_t)g->page_bytes, "node", (int)g->node,
			"bound_node", (int)g->bound_node, "bytes", (json_int_t)g->bytes,
			"first_slot", (json_int_t)g->first_slot, "slot_count", (json_int_t)g->slot_count,
			"reserved_count", (json_int_t)g->reserved_count, "path", g->path));
	}
	JSET(o, "segments", segs);
	JSET(o, "cache", json_cache_stats(n));
	JSET(o, "store", json_store_stats(&s->store));
	ranks = json_array();
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		json_t *r = json_object();

		JSET(r, "entry", JU(e->ri.entry));
		JSET(r, "pid", json_integer(e->ri.pid));
		JSET(r, "device_id", json_integer(e->ri.device_id));
		JSET(r, "watcher", json_boolean(e->ri.device_id < 0));
		JSET(r, "kind", json_string(kind_name[rank_kind(&e->ri)]));
		JSET(r, "copy_engine", e->ri.copy_engine == KVS_COPY_ENGINE_HOST ? json_string("host")
				       : e->ri.copy_engine == KVS_COPY_ENGINE_CUDA ? json_string("cuda")
										    : json_null());
		JSET(r, "numa_node", e->cpu_node >= 0 ? json_integer(e->cpu_node) : json_null());
		JSET(r, "alive", json_boolean(e->ri.alive));
		JSET(r, "self", json_boolean(e->ri.self));
		JSET(r, "pins", JU(e->ri.pins));
		JSET(r, "cache", json_cache_stats(&e->cs));
		JSET(r, "store", json_store_stats(&e->ss));
		json_array_append_new(ranks, r);
	}
	JSET(o, "ranks", ranks);
	return o;
}

static int print_json(FILE *f, const struct stat_snap *s, bool compact)
{
	json_t *o = json_snap(s);
	int rc = json_dumpf(o, f, compact ? JSON_COMPACT : JSON_INDENT(2));

	json_decref(o);
	fputc('\n', f);
	return rc ? -EIO : 0;
}

/* ------------------------------------------------------------------------ */
/* Prometheus textfile                                                        */

struct prom {
	FILE *f;
	const char *uid;
};

static void prom_head(struct prom *p, const char *name, const char *type, const char *help)
{
	fprintf(p->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name{unique_id="..."<extra>} value.  extra: "" or ",k=\"v\"...". */
static void prom_val(struct prom *p, const char *name, const char *extra, double v)
{
	fprintf(p->f, "%s{unique_id=\"%s\"%s} %.17g\n", name, p->uid, extra, v);
}

static void prom_one(struct prom *p, const char *name, const char *type, const char *help, double v)
{
	prom_head(p, name, type, help);
	prom_val(p, name, "", v);
}

/* Per-rank series are of live ranks (GPU or CPU-only), labelled by what an
 * operator knows: device (a rank-table entry is reused by whoever attaches
 * next; watchers, this exporter included, have no series). */
static bool prom_rank(const struct stat_rank *e)
{
	return e->ri.alive && e->ri.device_id >= 0;
}

static void prom_rank_counter(struct prom *p, const struct stat_snap *s, const char *name,
			      const char *help, size_t off_cache, size_t off_store, bool seconds)
{
	char lab[64];

	prom_head(p, name, "counter", help);
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		uint64_t v = off_cache != SIZE_MAX ? *(const uint64_t *)((const char *)&e->cs + off_cache)
						   : *(const uint64_t *)((const char *)&e->ss + off_store);

		if (!prom_rank(e))
			continue;
		snprintf(lab, sizeof(lab), ",device=\"%d\"", e->ri.device_id);
		prom_val(p, name, lab, seconds ? (double)v / 1e9 : (double)v);
	}
}

/* An exact le bound: 2^(i+1) microseconds in seconds, every digit. */
static void prom_le(char *buf, size_t len, int i)
{
	uint64_t us = UINT64_C(2) << i;

	snprintf(buf, len, ",le=\"%" PRIu64 ".%06" PRIu64 "\"", us / 1000000, us % 1000000);
}

/* The cache's state, one series per value (1: the current one). */
static const char *const prom_states[] = { "live", "stale", "creating", "absent", "other" };

/* kvshare_up: the first metric of every file, attached (1) or waiting (0);
 * then the state (live when attached). */
static void prom_up(struct prom *p, int up, const char *state)
{
	char lab[48];

	prom_one(p, "kvshare_up", "gauge", "1: the cache is live and this exporter is attached to it.", up);
	prom_head(p, "kvshare_cache_state", "gauge",
		  "1 for the cache's state: live (attached), stale (no live process: its memory "
		  "is held until a rank adopts it or kvshare clean removes it), creating, absent, "
		  "other (another layout, corrupt).");
	for (size_t i = 0; i < sizeof(prom_states) / sizeof(prom_states[0]); i++) {
		snprintf(lab, sizeof(lab), ",state=\"%s\"", prom_states[i]);
		prom_val(p, "kvshare_cache_state", lab, strcmp(state, prom_states[i]) == 0);
	}
}

static void prom_write(FILE *f, const struct stat_snap *s)
{
	struct prom p = { f, s->info.unique_id };
	const struct kvs_cache_stats *n = &s->node;
	const struct kvs_store_stats *st = &s->store;
	char lab[160];
	uint64_t cum = 0;

	snprintf(lab, sizeof(lab), ",layout_version=\"%u\",persist=\"%d\",library=\"%s\",variant=\"%s\"",
		 s->info.layout_version, !!(s->info.flags & KVS_CACHE_INFO_PERSIST), kvs_version(),
		 kvs_variant());
	prom_up(&p, 1, "live");
	prom_head(&p, "kvshare_cache_info", "gauge", "The cache is attached and described (value 1).");
	prom_val(&p, "kvshare_cache_info", lab, 1);
	prom_one(&p, "kvshare_ranks_attached", "gauge",
		 "Live processes attached (liveness lock held: GPU ranks and watchers, this exporter "
		 "not counted).", (double)others_alive(s));
	prom_one(&p, "kvshare_gpu_ranks_attached", "gauge",
		 "Live GPU ranks attached (device_id >= 0, copying with cuda, or without a store).",
		 (double)live_of_kind(s, KIND_GPU));
	prom_one(&p, "kvshare_cpu_ranks_attached", "gauge",
		 "Live CPU-only ranks attached (device_id >= 0, their store copying with the host "
		 "engine).", (double)live_of_kind(s, KIND_CPU));
	prom_one(&p, "kvshare_ranks_dead", "gauge",
		 "Entries of ranks that died and are not reaped yet (the next attach reaps them).",
		 (double)dead_entries(s));
	prom_one(&p, "kvshare_local_rank_size", "gauge", "Ranks per node the cache was made for.",
		 (double)s->info.local_rank_size);
	prom_one(&p, "kvshare_capacity_bytes", "gauge", "Data plane capacity: slot_count x slot_bytes.",
		 (double)(n->slot_count * n->slot_bytes));
	prom_one(&p, "kvshare_data_bytes", "gauge", "Size of the data segments together.",
		 (double)n->data_bytes);
	prom_one(&p, "kvshare_slot_bytes", "gauge", "Bytes of one slot (one shard).", (double)n->slot_bytes);
	prom_one(&p, "kvshare_control_bytes", "gauge", "Size of the control segment.",
		 (double)s->info.ctl_bytes);
	prom_head(&p, "kvshare_slots", "gauge", "Slots by state (a racy census).");
	prom_val(&p, "kvshare_slots", ",state=\"ready\"", (double)n->slots_ready);
	prom_val(&p, "kvshare_slots", ",state=\"loading\"", (double)n->slots_loading);
	prom_val(&p, "kvshare_slots", ",state=\"failed\"", (double)n->slots_failed);
	prom_val(&p, "kvshare_slots", ",state=\"empty\"", (double)slots_empty(n));
	prom_one(&p, "kvshare_slots_pinned", "gauge", "Slots pinned by at least one process.",
		 (double)n->slots_pinned);
	prom_head(&p, "kvshare_fallback", "gauge", "1 when the cache runs on a fallback: hugetlb (the "
		  "data plane on /dev/shm, hugetlb=auto), numa (a segment made for a node could "
		  "not be bound to it on a machine of several nodes, numa=auto).");
	prom_val(&p, "kvshare_fallback", ",kind=\"hugetlb\"", !!(n->fallbacks & KVS_FALLBACK_HUGETLB));
	prom_val(&p, "kvshare_fallback", ",kind=\"numa\"", !!(n->fallbacks & KVS_FALLBACK_NUMA));
	prom_head(&p, "kvshare_segment_bytes", "gauge", "Size of each data segment.");
	for (uint32_t i = 0; i < s->nsegs; i++) {
		snprintf(lab, sizeof(lab), ",segment=\"%u\",backing=\"%s\",node=\"%d\",page_bytes=\"%" PRIu64 "\"",
			 s->segs[i].seg, backing_name(s->segs[i].backing), s->segs[i].node,
			 s->segs[i].page_bytes);
		prom_val(&p, "kvshare_segment_bytes", lab, (double)s->segs[i].bytes);
	}
#define NODE_COUNTER(name, field, help) prom_one(&p, name, "counter", help, (double)n->field)
	NODE_COUNTER("kvshare_hits_total", hits, "Gets of loads that found the slot READY (node, departed ranks included; dumps' gets are kvshare_dump_gets_total).");
	NODE_COUNTER("kvshare_joins_total", joins, "Gets of loads that joined a read in flight (served without a backend read of their own).");
	NODE_COUNTER("kvshare_misses_total", misses, "Gets of loads that made the caller the slot's owner.");
	prom_one(&p, "kvshare_queries_total", "counter", "Gets of loads: hits + joins + misses.",
		 (double)(n->hits + n->joins + n->misses));
	NODE_COUNTER("kvshare_dump_gets_total", dump_gets, "Gets of dumps (in no hit ratio): kvshare_store_dump_dedup_total of them found their shard.");
	NODE_COUNTER("kvshare_owner_fills_total", owner_fills, "Slots filled and published READY by their owner.");
	NODE_COUNTER("kvshare_waits_total", waits, "kvs_slot_wait calls for a slot being filled.");
	prom_one(&p, "kvshare_wait_seconds_total", "counter", "Time spent in those waits.",
		 (double)n->wait_ns / 1e9);
	NODE_COUNTER("kvshare_failures_total", failures, "Fills published FAILED.");
	NODE_COUNTER("kvshare_evictions_total", evictions, "Slots taken by CLOCK from another key.");
	NODE_COUNTER("kvshare_clock_sweeps_total", clock_sweeps, "Complete CLOCK passes over a pool.");
	NODE_COUNTER("kvshare_takeovers_total", takeovers, "Slots of dead fillers taken over.");
	NODE_COUNTER("kvshare_lock_repairs_total", lock_repairs, "Bucket locks recovered from a dead holder.");
	NODE_COUNTER("kvshare_ranks_reaped_total", ranks_reaped, "Dead ranks whose pins were dropped.");
	NODE_COUNTER("kvshare_enospc_total", enospc, "Gets refused because every candidate slot was pinned.");
	NODE_COUNTER("kvshare_lrs_mismatch_total", lrs_mismatch, "GPU rank attaches beyond local_rank_size.");
	NODE_COUNTER("kvshare_adoptions_total", adoptions, "Times the cache was adopted after its users died.");
#undef NODE_COUNTER
	prom_head(&p, "kvshare_store_tasks_total", "counter", "Store tasks submitted, by operation.");
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"load\"", (double)st->tasks_load);
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"dump\"", (double)st->tasks_dump);
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"prefetch\"", (double)st->tasks_prefetch);
#define STORE_COUNTER(name, field, help) prom_one(&p, name, "counter", help, (double)st->field)
	STORE_COUNTER("kvshare_store_tasks_failed_total", tasks_failed, "Of the tasks, those finished with an error (timeouts included).");
	STORE_COUNTER("kvshare_store_tasks_timedout_total", tasks_timedout, "Tasks finished past their deadline.");
	STORE_COUNTER("kvshare_store_shards_loaded_total", shards_loaded, "Shards copied into tensors (or prefetched).");
	STORE_COUNTER("kvshare_store_shards_dumped_total", shards_dumped, "Shards gathered into the cache.");
	STORE_COUNTER("kvshare_store_dump_dedup_total", dump_dedup, "Dump shards skipped: already READY.");
	STORE_COUNTER("kvshare_store_load_hits_total", load_hits, "Load shards READY at get.");
	STORE_COUNTER("kvshare_store_owner_reads_total", owner_reads, "Backend reads attempted as owner (submitted, or refused at submit).");
	STORE_COUNTER("kvshare_store_read_errors_total", read_errors, "Of the owner reads, those that failed (at submit or completion): never more than them.");
	STORE_COUNTER("kvshare_store_backend_writes_total", backend_writes, "Backend writes attempted (submitted, or refused at submit).");
	STORE_COUNTER("kvshare_store_write_errors_total", write_errors, "Of the backend writes, those that failed (at submit or completion): never more than them.");
	STORE_COUNTER("kvshare_store_prealloc_total", prealloc, "Slots preallocated.");
	STORE_COUNTER("kvshare_store_prealloc_hits_total", prealloc_hits, "Owned gets of a preallocated key.");
	STORE_COUNTER("kvshare_store_copy_bytes_total", copy_bytes, "Bytes moved by the copy engines.");
	STORE_COUNTER("kvshare_store_staged_shards_total", staged_shards,
		      "Shard copies made through the staging buffer (slot not registered yet).");
#undef STORE_COUNTER
	prom_one(&p, "kvshare_store_register_bytes", "gauge",
		 "Data plane bytes the ranks register with their copy engines (node total).",
		 (double)st->register_total_bytes);
	prom_one(&p, "kvshare_store_registered_bytes", "gauge",
		 "Of those, registered (pinned) so far.", (double)st->registered_bytes);
	prom_one(&p, "kvshare_store_register_seconds_total", "counter",
		 "Time in the copy engines' registration calls.", (double)st->register_ns / 1e9);
	prom_one(&p, "kvshare_store_ready", "gauge",
		 "1 when every live rank's data plane is registered (direct DMA everywhere; 1 "
		 "with no live rank).", st->ready);
	prom_one(&p, "kvshare_prefault_seconds", "gauge",
		 "Time the creator took to pre-fault the data segments.", (double)n->prefault_ns / 1e9);
	prom_one(&p, "kvshare_store_copy_seconds_total", "counter", "Time in the copy engines.",
		 (double)st->copy_ns / 1e9);
	/* log2 microsecond buckets, exact bounds, and the sum of the times. */
	prom_head(&p, "kvshare_store_task_latency_seconds", "histogram",
		  "Task latency, submit to completion (log2 buckets).");
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		cum += st->task_lat_us[i];
		if (i == KVS_STORE_LAT_BUCKETS - 1)
			break; /* the last bucket is open-ended: +Inf below */
		prom_le(lab, sizeof(lab), i);
		prom_val(&p, "kvshare_store_task_latency_seconds_bucket", lab, (double)cum);
	}
	prom_val(&p, "kvshare_store_task_latency_seconds_bucket", ",le=\"+Inf\"", (double)cum);
	prom_val(&p, "kvshare_store_task_latency_seconds_sum", "",
		 (double)st->task_lat_ns_sum / 1e9);
	prom_val(&p, "kvshare_store_task_latency_seconds_count", "", (double)cum);

	/* Per live GPU rank, by device (prom_rank). */
	prom_head(&p, "kvshare_rank_info", "gauge",
		  "A live rank attached (value 1); kind gpu, or cpu (CPU-only: host copies).");
	for (uint32_t i = 0; i < s->nranks; i++)
		if (prom_rank(&s->ranks[i])) {
			snprintf(lab, sizeof(lab), ",device=\"%d\",kind=\"%s\"", s->ranks[i].ri.device_id,
				 kind_name[rank_kind(&s->ranks[i].ri)]);
			prom_val(&p, "kvshare_rank_info", lab, 1);
		}
	prom_head(&p, "kvshare_rank_pins", "gauge", "Slots the rank pins now.");
	for (uint32_t i = 0; i < s->nranks; i++)
		if (prom_rank(&s->ranks[i])) {
			snprintf(lab, sizeof(lab), ",device=\"%d\"", s->ranks[i].ri.device_id);
			prom_val(&p, "kvshare_rank_pins", lab, s->ranks[i].ri.pins);
		}
#define OC(f) offsetof(struct kvs_cache_stats, f), SIZE_MAX
#define OS(f) SIZE_MAX, offsetof(struct kvs_store_stats, f)
	prom_rank_counter(&p, s, "kvshare_rank_hits_total", "Gets of loads that hit, per rank.", OC(hits), false);
	prom_rank_counter(&p, s, "kvshare_rank_joins_total", "Gets of loads that joined a read in flight, per rank.", OC(joins), false);
	prom_rank_counter(&p, s, "kvshare_rank_misses_total", "Gets of loads that made it owner, per rank.", OC(misses), false);
	prom_rank_counter(&p, s, "kvshare_rank_store_dump_dedup_total", "Dump shards found READY or being dumped (not gathered), per rank.", OS(dump_dedup), false);
	prom_rank_counter(&p, s, "kvshare_rank_owner_fills_total", "Slots it filled, per rank.", OC(owner_fills), false);
	prom_rank_counter(&p, s, "kvshare_rank_waits_total", "kvs_slot_wait calls, per rank.", OC(waits), false);
	prom_rank_counter(&p, s, "kvshare_rank_wait_seconds_total", "Time waiting, per rank.", OC(wait_ns), true);
	prom_rank_counter(&p, s, "kvshare_rank_store_shards_loaded_total", "Shards loaded, per rank.", OS(shards_loaded), false);
	prom_rank_counter(&p, s, "kvshare_rank_store_owner_reads_total", "Backend reads as owner, per rank.", OS(owner_reads), false);
#undef OC
#undef OS
}

/* With no live cache to attach to (--watch waiting, or a stale cache):
 * kvshare_up 0 and the state; a stale cache's memory, which stays held until
 * it is adopted or cleaned, and its dead ranks, from the look (inspect). */
static void prom_write_down(FILE *f, const struct stat_snap *s)
{
	struct prom p = { f, s->info.unique_id };
	const struct kvs_cache_info *in = &s->info;
	const char *state = s->look_rc == -ENOENT ? "absent"
			    : s->look_rc ? "other"
			    : in->state == KVS_CACHE_INFO_CREATING ? "creating"
			    : in->state != KVS_CACHE_INFO_READY ? "other"
			    : in->ranks_live == 0 ? "stale" : "absent"; /* live: went meanwhile */

	prom_up(&p, 0, state);
	if (strcmp(state, "stale") != 0)
		return;
	prom_one(&p, "kvshare_control_bytes", "gauge", "Size of the control segment.",
		 (double)in->ctl_bytes);
	prom_one(&p, "kvshare_data_bytes", "gauge", "Size of the data segments together.",
		 (double)in->data_bytes);
	prom_one(&p, "kvshare_capacity_bytes", "gauge", "Data plane capacity: slot_count x slot_bytes.",
		 (double)(in->slot_count * in->slot_bytes));
	prom_one(&p, "kvshare_ranks_dead", "gauge",
		 "Entries of ranks that died and are not reaped yet (the next attach reaps them).",
		 (double)in->ranks_dead);
	prom_one(&p, "kvshare_adoptions_total", "counter",
		 "Times the cache was adopted after its users died.", (double)in->adoptions);
}

/* Write FILE.tmp, then rename it over FILE: the collector sees the old file or
 * the new one, never a half-written one. */
static int prom_publish(const char *path, const struct stat_snap *s,
			void (*emit)(FILE *, const struct stat_snap *))
{
	char tmp[4096];
	FILE *f;
	int fd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	emit(f, s);
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* The command                                                                */

static int parse_args(int argc, char **argv, struct stat_opts *o)
{
	static const struct option longopts[] = {
		{ "watch", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", required_argument, NULL, 'p' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	memset(o, 0, sizeof(*o));
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":w:jp:qh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			if (parse_seconds(optarg, &o->watch_s)) {
				fprintf(stderr, "kvshare stat: bad --watch '%s' (want seconds, %.1f .. %.0f)\n",
					optarg, WATCH_MIN_S, WATCH_MAX_S);
				return KVS_CLI_USAGE;
			}
			break;
		case 'j':
			o->json = true;
			break;
		case 'p':
			if (!optarg[0]) {
				fprintf(stderr, "kvshare stat: --prometheus needs a file name\n");
				return KVS_CLI_USAGE;
			}
			o->prom = optarg;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			fputs(stat_usage, stdout);
			return -1;
		case ':':
			fprintf(stderr, "kvshare stat: option '%s' needs a value (kvshare stat --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		default:
			fprintf(stderr, "kvshare stat: unknown option '%s' (kvshare stat --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "kvshare stat: missing UNIQUE_ID (kvshare stat --help)\n");
		return KVS_CLI_USAGE;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "kvshare stat: one UNIQUE_ID only (unexpected '%s')\n", argv[optind + 1]);
		return KVS_CLI_USAGE;
	}
	o->uid = argv[optind];
	if (o->quiet && !o->prom) {
		fprintf(stderr, "kvshare stat: --quiet without --prometheus would show nothing\n");
		return KVS_CLI_USAGE;
	}
	return 0;
}

/* look(): no live cache to attach to now, and --watch waits for one. */
#define STAT_ABSENT (-1)

/* Look before attaching: 0 (live and READY: attach), or the exit code after
 * saying why not (a stale cache is described read-only); with --watch, a cache
 * that is absent, being created or stale is STAT_ABSENT, said by the caller. */
static int look(const struct stat_opts *o, struct stat_snap *s)
{
	struct kvs_cache_info *in = &s->info;
	int rc = kvs_cache_inspect(o->uid, in);

	s->look_rc = rc;
	note_dead_inspected(s); /* whom an attach would reap */
	if (rc == -EINVAL) {
		fprintf(stderr, "kvshare stat: invalid unique_id '%s' (want [A-Za-z0-9_.-]{1,64})\n", o->uid);
		return KVS_CLI_USAGE;
	}
	if (o->watch_s > 0 && (rc == -ENOENT || (rc == 0 && (in->state == KVS_CACHE_INFO_CREATING ||
							     (in->state == KVS_CACHE_INFO_READY &&
							      in->ranks_live == 0)))))
		return STAT_ABSENT;
	if (rc == -ENOENT) {
		fprintf(stderr, "kvshare stat: no cache '%s' on this node (no /dev/shm/kvshare.%s.ctl; "
			"kvshare ls lists them)\n", o->uid, o->uid);
		return KVS_CLI_FAIL;
	}
	if (rc) {
		fprintf(stderr, "kvshare stat: %s: cannot read its control segment: %s\n", o->uid,
			kvs_strerror(rc));
		return KVS_CLI_FAIL;
	}
	switch (in->state) {
	case KVS_CACHE_INFO_READY:
		break;
	case KVS_CACHE_INFO_CREATING:
		fprintf(stderr, "kvshare stat: %s: %s\n", o->uid, in->ranks_live ?
			"being created (its creator has not published READY yet): try again" :
			"its creator died during initialisation (stale): kvshare clean removes it");
		return KVS_CLI_FAIL;
	case KVS_CACHE_INFO_LAYOUT:
		fprintf(stderr, "kvshare stat: %s: made by a kvshare build of another layout (%s)%s\n", o->uid,
			in->detail, in->ranks_live ? "" : "; stale: kvshare clean removes it");
		return KVS_CLI_FAIL;
	default:
		fprintf(stderr, "kvshare stat: %s: corrupt control segment (%s)%s\n", o->uid, in->detail,
			in->ranks_live ? "; live ranks are attached: stop them, then kvshare clean" :
					 "; stale: kvshare clean removes it");
		return KVS_CLI_FAIL;
	}
	if (in->ranks_live == 0) {
		s->attached = false;
		clock_gettime(CLOCK_REALTIME, &s->when);
		if (!o->quiet) {
			if (o->json)
				print_json(stdout, s, false);
			else
				print_text(stdout, s);
		}
		fprintf(stderr, "kvshare stat: %s: stale (no live process attached): shown read-only, not "
			"attached (attaching would adopt it); kvshare clean %s removes it\n", o->uid, o->uid);
		/* the exporter says so too: its state, and the memory it holds */
		if (o->prom && (rc = prom_publish(o->prom, s, prom_write_down)))
			fprintf(stderr, "kvshare stat: writing %s: %s\n", o->prom, kvs_strerror(rc));
		return KVS_CLI_FAIL;
	}
	return 0;
}

static int attach(const struct stat_opts *o, struct kvs_store **store)
{
	struct kvs_store_config cfg;
	int rc;

	kvs_store_config_init(&cfg);
	memcpy(cfg.cache.unique_id, o->uid, strlen(o->uid) + 1);
	cfg.cache.device_id = -1;             /* a watcher: control plane only */
	cfg.cache.flags = KVS_CACHE_ATTACH;   /* never create; geometry from the segment */
	cfg.cache.attach_timeout_ns = 5ull * 1000000000ull;
	cfg.backend.kind = KVS_BACKEND_NONE;  /* no backend I/O from a watcher */
	cfg.log = stat_log;
	last_log[0] = '\0';
	rc = kvs_store_open(&cfg, store);
	if (rc == 0)
		return 0;
	if (rc == -ENOENT)
		fprintf(stderr, "kvshare stat: %s: the cache went away before stat could attach\n", o->uid);
	else
		fprintf(stderr, "kvshare stat: %s: cannot attach as a watcher: %s%s%s\n", o->uid,
			kvs_strerror(rc), last_log[0] ? ": " : "", last_log);
	return KVS_CLI_FAIL;
}

/* Sleep until *next (CLOCK_MONOTONIC, absolute), or a stop signal. */
static void sleep_until(struct timespec *next, double interval)
{
	struct timespec now;
	long long ns = (long long)(interval * 1e9);

	next->tv_sec += ns / 1000000000LL;
	next->tv_nsec += ns % 1000000000LL;
	if (next->tv_nsec >= 1000000000L) {
		next->tv_sec++;
		next->tv_nsec -= 1000000000L;
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec > next->tv_sec || (now.tv_sec == next->tv_sec && now.tv_nsec > next->tv_nsec))
		*next = now; /* fell behind (a slow interval): no burst of catch-up ticks */
	while (!stat_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) == EINTR)
		;
}

int kvs_cli_stat(int argc, char **argv)
{
	struct stat_opts o;
	struct stat_snap *s;
	struct kvs_store *store = NULL;
	struct sigaction sa;
	struct timespec next;
	int rc, code = KVS_CLI_OK;
	bool adopted = false, waiting = false;
	struct rates rates = { .have = false };

	rc = parse_args(argc, argv, &o);
	if (rc)
		return rc < 0 ? KVS_CLI_OK : rc;
	s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "kvshare stat: out of memory\n");
		return KVS_CLI_FAIL;
	}
	rc = look(&o, s);
	if (rc && rc != STAT_ABSENT) {
		free(s);
		return rc;
	}
	/* Signals end --watch between intervals; no SA_RESTART, so a sleep ends. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A closed stdout (`| head`) ends the watch like a signal, through EPIPE:
	 * killed by SIGPIPE, stat could not leave the cache as it found it. */
	signal(SIGPIPE, SIG_IGN);
	if (rc == 0)
		rc = attach(&o, &store);
	if (rc && o.watch_s <= 0) {
		free(s);
		return rc;
	}
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		if (!store) {
			/* --watch with no live cache: say so once, export "down" */
			if (!waiting) {
				fprintf(stderr, "kvshare stat: %s: no live cache; waiting for one (every "
					"%g s)\n", o.uid, o.watch_s);
				waiting = true;
			}
			if (o.prom && (rc = prom_publish(o.prom, s, prom_write_down))) {
				fprintf(stderr, "kvshare stat: writing %s: %s\n", o.prom, kvs_strerror(rc));
				code = KVS_CLI_FAIL;
				break;
			}
			goto tick;
		}
		rc = gather(store, s);
		if (rc) {
			fprintf(stderr, "kvshare stat: %s: reading the counters: %s\n", o.uid, kvs_strerror(rc));
			code = KVS_CLI_FAIL;
			break;
		}
		if (s->node.adoptions > s->info.adoptions && !adopted) {
			/* the last rank died between the look and the attach: our open adopted it */
			adopted = true;
			fprintf(stderr, "kvshare stat: %s: went stale just before stat attached (its last "
				"process died), so stat's attach adopted it\n", o.uid);
		}
		/* Whom an attach (ours, or a peer's) reaped since the last look: in
		 * the block and the JSON; on stderr where stdout does not show it. */
		for (uint32_t i = 0; i < s->nreaped && (o.quiet || (!o.json && rates.have)); i++)
			fprintf(stderr, "kvshare stat: %s: rank pid %d (entry %u, device %d) died; "
				"reaped (its pins dropped)\n", o.uid, (int)s->reaped[i].pid,
				s->reaped[i].entry, (int)s->reaped[i].device_id);
		if (!o.quiet) {
			if (o.json) {
				print_json(stdout, s, o.watch_s > 0);
			} else if (rates.have) {
				print_rates(stdout, s, &rates);
			} else {
				print_text(stdout, s);
				if (o.watch_s > 0)
					fputc('\n', stdout);
			}
			if (fflush(stdout) || ferror(stdout))
				break; /* the reader went away: stop quietly */
		}
		rates.node = s->node;
		rates.store = s->store;
		rates.when = s->when;
		rates.have = true;
		if (o.prom) {
			rc = prom_publish(o.prom, s, prom_write);
			if (rc) {
				fprintf(stderr, "kvshare stat: writing %s: %s\n", o.prom, kvs_strerror(rc));
				code = KVS_CLI_FAIL;
				break;
			}
		}
		/* Its last rank closed (or kvshare clean): let go, wait for the next. */
		if (o.watch_s > 0 && kvs_cache_removed(kvs_store_cache(store)) == 1) {
			fprintf(stderr, "kvshare stat: %s: the cache was removed (its last rank left); "
				"waiting for the next one\n", o.uid);
			kvs_store_close(store);
			store = NULL;
			waiting = true;
			s->look_rc = -ENOENT; /* what the exporter says until the next look */
			s->ndead = 0;
			rates.have = false; /* the next cache starts with its whole block */
			if (o.prom)
				(void)prom_publish(o.prom, s, prom_write_down); /* retried next tick */
		}
tick:
		if (o.watch_s <= 0 || stat_stop)
			break;
		sleep_until(&next, o.watch_s);
		if (stat_stop)
			break;
		if (!store && look(&o, s) == 0 && attach(&o, &store) == 0) {
			fprintf(stderr, "kvshare stat: %s: attached\n", o.uid);
			waiting = false;
			adopted = false;
		}
	}
	/* Closing as a watcher leaves a cache with dead ranks' entries (killed -9)
	 * stale for adoption, and one whose ranks left is gone already
	 * (kvs_cache_close). */
	kvs_store_close(store);
	free(s);
	return code;
}
