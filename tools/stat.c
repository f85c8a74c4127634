/*
 * tools/stat.c — `kvshare stat UNIQUE_ID`: a live cache as a watcher sees it.
 *
 * It opens a watcher store on the cache (device_id -1, KVS_CACHE_ATTACH so the
 * geometry comes from the segment, backend none): a watcher maps the control
 * plane only, starts no thread, never pins a slot, and reads every counter
 * racily without locks, so the ranks are not disturbed.  The store handle is what
 * gives the store counters (kvs_store_stats) besides the cache's (kvs_cache_stats
 * on kvs_store_cache()); docs/core.md, "Looking without disturbing" has the
 * watcher store and what its attach and close do to a cache.
 *
 * Attaching is not free of effects, so stat first looks from outside
 * (kvs_cache_inspect: read-only).  A cache that is not READY, of another layout,
 * corrupt, or stale (no live process) is not attached: an open would adopt (repair
 * and reset) a stale cache, and its clean close would even remove a cache that is
 * not persistent.  A stale cache is described read-only instead and stat exits 1.
 * Two windows remain: if the last rank dies between the look and the attach, the
 * open adopts it (visible as adoptions + 1); if every rank leaves while stat
 * watches, stat is the last one attached.  Neither lets stat decide the cache's
 * fate: its close is a watcher's, which removes a cache only as the last process
 * of one that ended cleanly, and the last GPU rank's clean close removes a
 * non-persistent cache whatever watchers are attached (docs/core.md, "Looking
 * without disturbing"); --watch then sees it gone and waits for the next one.
 *
 * What stat's attach does is said: the entries of ranks that died (attached,
 * their liveness lock free) are reaped by the next attach, stat's included, so
 * stat notes them at its look (inspect lists them) and at every gather, and says
 * by pid which ones are gone since (reaped).  A rank is a GPU rank or a CPU-only
 * one by the copy engine its store recorded (host: CPU-only).  Load hits and
 * dump dedups are apart (a dump that finds its shard is not a read served).
 *
 *   --watch N     repeat every N seconds (absolute CLOCK_MONOTONIC deadlines,
 *                 clock_nanosleep) until SIGINT or SIGTERM; with no live cache,
 *                 wait for one
 *
 * The outputs, each in a file of its own, read only the snapshot (struct
 * stat_snap: the look's description, then gather's once attached; tools/stat.h
 * has what the files share):
 *   text          the default: tools/stat_text.c
 *   --json        tools/stat_json.c
 *   --prometheus  FILE: tools/stat_prom.c
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvshare.h"
#include "tools/cli.h"
#include "tools/stat.h"

#define WATCH_MIN_S 0.1
#define WATCH_MAX_S 86400.0

struct stat_opts {
	const char *uid;
	double watch_s;  /* 0: once */
	bool json;
	bool quiet;
	const char *prom;
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

/* ------------------------------------------------------------------------ */
/* What the outputs share (tools/stat.h)                                      */

const char *stat_backing_name(uint32_t b)
{
	return b == KVS_CACHE_BACKING_HUGETLB ? "hugetlb" : b == KVS_CACHE_BACKING_SHM ? "shm" : "none";
}

/* Upper bound (us) of the latency bucket holding quantile q of the tasks, or 0
 * with no task.  Bucket i counts [2^i, 2^(i+1)) us (bucket 0: < 2 us). */
uint64_t stat_lat_quantile_us(const struct kvs_store_stats *s, double q, uint64_t *count)
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

double stat_copy_gbps(const struct kvs_store_stats *s)
{
	return s->copy_ns ? (double)s->copy_bytes / (double)s->copy_ns : 0.0; /* bytes/ns = GB/s */
}

uint64_t stat_slots_empty(const struct kvs_cache_stats *c)
{
	/* DIRTY slots are in none of the other states (readers see them READY) */
	uint64_t used = c->slots_ready + c->slots_dirty + c->slots_loading + c->slots_failed;

	return c->slot_count > used ? c->slot_count - used : 0;
}

enum stat_kind stat_rank_kind(const struct kvs_cache_rank_info *ri)
{
	if (ri->device_id < 0)
		return STAT_KIND_WATCHER;
	return ri->copy_engine == KVS_COPY_ENGINE_HOST ? STAT_KIND_CPU : STAT_KIND_GPU;
}

static const char *const kind_name[] = { "gpu", "cpu", "watcher" };

const char *stat_kind_name(const struct kvs_cache_rank_info *ri)
{
	return kind_name[stat_rank_kind(ri)];
}

/* Live ranks of a kind (this stat is a watcher: not among them). */
uint32_t stat_live_of_kind(const struct stat_snap *s, enum stat_kind k)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += s->ranks[i].ri.alive && stat_rank_kind(&s->ranks[i].ri) == k;
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
	if (rc == -KVS_ECORRUPT) { /* no regular file at the name: never opened */
		char why[256];

		fprintf(stderr, "kvshare stat: %s: %s (remove it by hand once you know whose it is)\n",
			o->uid, kvs_cli_not_cache(why, sizeof(why), o->uid));
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
				stat_print_json(stdout, s, false);
			else
				stat_print_text(stdout, s);
		}
		fprintf(stderr, "kvshare stat: %s: stale (no live process attached): shown read-only, not "
			"attached (attaching would adopt it); kvshare clean %s removes it\n", o->uid, o->uid);
		/* the exporter says so too: its state, and the memory it holds */
		if (o->prom && (rc = stat_prom_publish(o->prom, s, stat_prom_write_down)))
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
	struct stat_rates rates = { .have = false };

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
			if (o.prom && (rc = stat_prom_publish(o.prom, s, stat_prom_write_down))) {
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
				stat_print_json(stdout, s, o.watch_s > 0);
			} else if (rates.have) {
				stat_print_rates(stdout, s, &rates);
			} else {
				stat_print_text(stdout, s);
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
			rc = stat_prom_publish(o.prom, s, stat_prom_write);
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
				(void)stat_prom_publish(o.prom, s, stat_prom_write_down); /* retried next tick */
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
