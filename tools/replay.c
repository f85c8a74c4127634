/*
 * tools/replay.c — `kvshare replay TRACE`: a Mooncake trace through the real
 * cache (CLOCK, libkvshare) and through reference policies simulated here
 * (FIFO, LRU, Belady), at the same capacities, with the same accounting.
 *
 * Accounting (the same for every policy; docs/replay.md).  Requests are taken
 * in timestamp order (tools/trace.c sorts them, stably).  For each request:
 *
 *   1. hits += the length of the longest prefix of its hash_ids whose blocks
 *      are all resident *before* the request (what a vLLM-style engine reuses:
 *      prefix caching stops at the first miss, since block i's KV depends on
 *      every block before it);
 *   2. then every block of the request, in order, is accessed: a resident one
 *      is touched (its policy's notion of use), a missing one is inserted,
 *      evicting one block when the cache is full.
 *
 * accesses = the number of hash_ids entries of the trace; hit_ratio = hits /
 * accesses.  With an infinite cache this is the trace's infinite-cache hit
 * ratio (prefix-chained ids: a resident block's prefix is resident too).
 *
 * The real cache is a libkvshare cache opened as a rank (device_id 0, hugetlb
 * and NUMA off, local_rank_size 1) under a unique_id of its own per run and
 * capacity, with slot_count = capacity x shards, shards_per_block = shards and
 * slot_bytes = --shard-size (4 KiB: only the index and CLOCK matter here, no
 * byte is written).  Step 1 is kvs_cache_lookup_prefix(KVS_ALL_SHARDS) (a
 * block is resident when every shard is READY); step 2 is, per shard,
 * kvs_cache_get: READY is a touch (the get sets the reference bit), absent
 * makes us the owner, who publishes READY without data; then release.  The
 * cache is closed (and so removed: not persistent, we are its only user) after
 * each capacity, also on SIGINT/SIGTERM/SIGHUP, so no segment is left behind.
 *
 * The reference simulators work on dense block indices (kvs_trace_dense):
 * LRU a doubly linked list, FIFO a ring, Belady (MIN) a max-heap on
 * the next access position (precomputed backwards), with lazy deletion.
 * Belady is the classic offline optimum for the access sequence; under prefix
 * accounting it is a strong reference, not a proven bound.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "kvshare.h"
#include "tools/cli.h"
#include "tools/trace.h"

#define PROG "kvshare replay"
#define NONE32 UINT32_MAX

enum policy { P_CLOCK, P_FIFO, P_LRU, P_BELADY, P_COUNT };
static const char *const policy_name[P_COUNT] = { "clock", "fifo", "lru", "belady" };

/* Capacities of the table run, in percent of the distinct blocks. */
static const unsigned table_pct[] = { 5, 10, 25, 50 };
#define NPCT (sizeof(table_pct) / sizeof(table_pct[0]))

struct opts {
	const char *path;
	uint64_t capacity_blocks; /* 0: not given */
	double capacity_gib;      /* 0: not given */
	uint32_t shards;
	uint64_t shard_bytes;
	bool json;
};

/* The trace as dense block indices, in replay order. */
struct replay {
	struct kvs_trace t;
	const char *name;  /* basename of the path */
	uint32_t *acc;     /* nids accesses: dense index of each hash_ids entry */
	uint32_t *next;    /* next access position of the same block, NONE32 if none */
	uint32_t *first;   /* per request: its first position in acc */
	uint32_t ndense;   /* distinct blocks */
	uint64_t infinite_hits;
};

struct result {
	uint64_t capacity;
	unsigned pct; /* 0: explicit capacity */
	uint64_t hits[P_COUNT];
	double seconds[P_COUNT];
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvshare replay TRACE [--capacity-blocks N | --capacity-gib G] [--shards S]\n"
		"                      [--shard-size SIZE] [--json] [--help]\n"
		"\n"
		"Replay a Mooncake-format trace (JSON Lines: timestamp, input_length, output_length,\n"
		"hash_ids) through a real kvshare cache (CLOCK) and through FIFO, LRU and Belady\n"
		"simulators at the same capacity.  Requests in timestamp order; per request, hits =\n"
		"the longest prefix of its blocks resident before it, then every block of it is\n"
		"touched or inserted.  One line per policy:\n"
		"  replay trace=NAME policy=clock|fifo|lru|belady capacity_blocks=N accesses=N hits=N hit_ratio=X\n"
		"Without a capacity: 5%%, 10%%, 25%% and 50%% of the distinct blocks, and a table.\n"
		"\n"
		"  --capacity-blocks N  cache capacity in blocks (1 .. 2^31-1 / shards)\n"
		"  --capacity-gib G     capacity in GiB (decimal): G GiB / (shards x shard size) blocks\n"
		"  --shards S           shards per block in the real cache (1 .. 65536, default 1)\n"
		"  --shard-size SIZE    slot bytes of the real cache, k/m/g suffix (default 4k); the\n"
		"                       cache allocates capacity x shards x SIZE bytes in /dev/shm\n"
		"  --json               one JSON object on stdout instead of the lines and table\n"
		"  --help               this text\n"
		"\n"
		"Exit: 0 done; 1 the trace or the cache failed; 2 bad command line.\n");
}

/* A decimal integer in [lo, hi], the whole string: 0, or -EINVAL. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Bytes with an optional k/m/g suffix (KiB, MiB, GiB), 1 .. 2^40. */
static int parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default:
		return -EINVAL;
	}
	if (*end || v == 0 || v > (UINT64_C(1) << 40) >> shift)
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "capacity-blocks", required_argument, NULL, 'b' },
		{ "capacity-gib", required_argument, NULL, 'g' },
		{ "shards", required_argument, NULL, 's' },
		{ "shard-size", required_argument, NULL, 'z' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t v;
	char *end;
	int c;

	memset(o, 0, sizeof(*o));
	o->shards = 1;
	o->shard_bytes = 4096;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (parse_u64(optarg, 1, INT32_MAX, &o->capacity_blocks)) {
				fprintf(stderr, PROG ": bad --capacity-blocks '%s' (want 1 .. %d)\n",
					optarg, INT32_MAX);
				return KVS_CLI_USAGE;
			}
			break;
		case 'g':
			errno = 0;
			o->capacity_gib = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(o->capacity_gib) ||
			    o->capacity_gib <= 0 || o->capacity_gib > 1048576.0) {
				fprintf(stderr, PROG ": bad --capacity-gib '%s' (want a number > 0, GiB)\n",
					optarg);
				return KVS_CLI_USAGE;
			}
			break;
		case 's':
			if (parse_u64(optarg, 1, 65536, &v)) {
				fprintf(stderr, PROG ": bad --shards '%s' (want 1 .. 65536)\n", optarg);
				return KVS_CLI_USAGE;
			}
			o->shards = (uint32_t)v;
			break;
		case 'z':
			if (parse_size(optarg, &o->shard_bytes)) {
				fprintf(stderr,
					PROG ": bad --shard-size '%s' (want bytes 1 .. 2^40, k/m/g suffix)\n",
					optarg);
				return KVS_CLI_USAGE;
			}
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			usage(stdout);
			return -1;
		case ':':
			fprintf(stderr, PROG ": option '%s' needs a value (kvshare replay --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		default:
			fprintf(stderr, PROG ": unknown option '%s' (kvshare replay --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, PROG ": no TRACE given (kvshare replay --help)\n");
		return KVS_CLI_USAGE;
	}
	if (argc - optind > 1) {
		fprintf(stderr, PROG ": one TRACE only (got '%s' and '%s')\n", argv[optind],
			argv[optind + 1]);
		return KVS_CLI_USAGE;
	}
	o->path = argv[optind];
	if (o->capacity_blocks && o->capacity_gib > 0) {
		fprintf(stderr, PROG ": --capacity-blocks and --capacity-gib exclude each other\n");
		return KVS_CLI_USAGE;
	}
	if (o->capacity_gib > 0) {
		double blocks = o->capacity_gib * 1073741824.0 / ((double)o->shards * (double)o->shard_bytes);

		if (blocks < 1) {
			fprintf(stderr, PROG ": --capacity-gib %g holds no block of %u x %llu bytes\n",
				o->capacity_gib, o->shards, (unsigned long long)o->shard_bytes);
			return KVS_CLI_USAGE;
		}
		o->capacity_blocks = blocks > (double)INT32_MAX ? (uint64_t)INT32_MAX + 1 : (uint64_t)blocks;
	}
	if (o->capacity_blocks && o->capacity_blocks * o->shards > INT32_MAX) {
		fprintf(stderr, PROG ": capacity of %llu blocks x %u shards is over the cache's %d slots\n",
			(unsigned long long)o->capacity_blocks, o->shards, INT32_MAX);
		return KVS_CLI_USAGE;
	}
	return 0;
}

/* --- the trace as dense indices ------------------------------------------ */

static int replay_prepare(struct replay *r, char *err, size_t errlen)
{
	const struct kvs_trace *t = &r->t;
	uint32_t *dense = NULL, *last = NULL;
	uint8_t *seen = NULL;
	size_t pos = 0;
	int rc = -ENOMEM;

	if (t->nids >= NONE32 || t->n >= NONE32 || t->distinct >= NONE32) {
		snprintf(err, errlen, "%s: too large (%zu block accesses; at most %u)", r->name,
			 t->nids, NONE32 - 1);
		return -EINVAL;
	}
	r->ndense = (uint32_t)t->distinct;
	dense = malloc((t->nids + 1) * sizeof(*dense));
	r->acc = malloc((t->nids + 1) * sizeof(*r->acc));
	r->next = malloc((t->nids + 1) * sizeof(*r->next));
	r->first = malloc((t->n + 1) * sizeof(*r->first));
	if (!dense || !r->acc || !r->next || !r->first || kvs_trace_dense(t, dense))
		goto out;
	/* replay order: the requests sorted, each request's ids in order */
	for (size_t i = 0; i < t->n; i++) {
		const struct kvs_trace_req *q = &t->reqs[i];

		r->first[i] = (uint32_t)pos;
		for (uint32_t j = 0; j < q->nblocks; j++)
			r->acc[pos++] = dense[(size_t)(q->hash_ids - t->ids) + j];
	}
	r->first[t->n] = (uint32_t)pos;
	/* next use, backwards; infinite-cache hits (the prefix seen before) */
	last = malloc((r->ndense + 1) * sizeof(*last));
	seen = calloc(r->ndense + 1, 1);
	if (!last || !seen)
		goto out;
	memset(last, 0xff, (r->ndense + 1) * sizeof(*last));
	for (size_t k = pos; k-- > 0;) {
		r->next[k] = last[r->acc[k]];
		last[r->acc[k]] = (uint32_t)k;
	}
	r->infinite_hits = 0;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t k = r->first[i], e = r->first[i + 1];

		while (k < e && seen[r->acc[k]])
			k++;
		r->infinite_hits += k - r->first[i];
		for (k = r->first[i]; k < e; k++)
			seen[r->acc[k]] = 1;
	}
	rc = 0;
out:
	if (rc)
		snprintf(err, errlen, "%s: out of memory", r->name);
	free(dense);
	free(last);
	free(seen);
	return rc;
}

static void replay_fini(struct replay *r)
{
	free(r->acc);
	free(r->next);
	free(r->first);
	kvs_trace_free(&r->t);
}

/* Hits of the longest resident prefix of request i. */
static inline uint64_t prefix_hits(const struct replay *r, size_t i, const uint8_t *resident)
{
	uint32_t k = r->first[i], e = r->first[i + 1];

	while (k < e && resident[r->acc[k]])
		k++;
	return k - r->first[i];
}

/* --- reference simulators ------------------------------------------------- */

/* LRU: a doubly linked list over dense indices, most recent at the head. */
static int sim_lru(const struct replay *r, uint64_t cap, uint64_t *hits)
{
	uint32_t n = r->ndense, head = NONE32, tail = NONE32, *prev, *next;
	uint8_t *res;
	uint64_t count = 0, h = 0;

	prev = malloc((n + 1) * sizeof(*prev));
	next = malloc((n + 1) * sizeof(*next));
	res = calloc(n + 1, 1);
	if (!prev || !next || !res) {
		free(prev), free(next), free(res);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->t.n; i++) {
		h += prefix_hits(r, i, res);
		for (uint32_t k = r->first[i]; k < r->first[i + 1]; k++) {
			uint32_t d = r->acc[k];

			if (res[d]) { /* unlink; re-pushed at the head below */
				if (d == head)
					continue;
				next[prev[d]] = next[d];
				if (next[d] != NONE32)
					prev[next[d]] = prev[d];
				else
					tail = prev[d];
			} else {
				if (count == cap) { /* evict the tail */
					uint32_t v = tail;

					res[v] = 0;
					tail = prev[v];
					if (tail != NONE32)
						next[tail] = NONE32;
					else
						head = NONE32;
					count--;
				}
				res[d] = 1;
				count++;
			}
			prev[d] = NONE32;
			next[d] = head;
			if (head != NONE32)
				prev[head] = d;
			head = d;
			if (tail == NONE32)
				tail = d;
		}
	}
	free(prev), free(next), free(res);
	*hits = h;
	return 0;
}

/* FIFO: a ring of the resident blocks in insertion order; hits change nothing. */
static int sim_fifo(const struct replay *r, uint64_t cap, uint64_t *hits)
{
	uint64_t ring_n = cap < r->ndense ? cap : r->ndense, head = 0, count = 0, h = 0;
	uint32_t *ring = malloc((ring_n + 1) * sizeof(*ring));
	uint8_t *res = calloc(r->ndense + 1, 1);

	if (!ring || !res) {
		free(ring), free(res);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->t.n; i++) {
		h += prefix_hits(r, i, res);
		for (uint32_t k = r->first[i]; k < r->first[i + 1]; k++) {
			uint32_t d = r->acc[k];

			if (res[d])
				continue;
			if (count == cap) {
				res[ring[head]] = 0;
				head = (head + 1) % ring_n;
				count--;
			}
			ring[(head + count) % ring_n] = d;
			res[d] = 1;
			count++;
		}
	}
	free(ring), free(res);
	*hits = h;
	return 0;
}

/* Belady (MIN): evict the resident block whose next access is farthest.  A
 * max-heap of (next position << 32 | block); an entry is live while the block
 * is resident with that next position (positions only grow: no stale entry
 * can look live). */
struct heap {
	uint64_t *v;
	size_t n;
};

static void heap_push(struct heap *hp, uint64_t x)
{
	size_t i = hp->n++;

	while (i > 0 && hp->v[(i - 1) / 2] < x) {
		hp->v[i] = hp->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	hp->v[i] = x;
}

static uint64_t heap_pop(struct heap *hp)
{
	uint64_t top = hp->v[0], x = hp->v[--hp->n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= hp->n)
			break;
		if (c + 1 < hp->n && hp->v[c + 1] > hp->v[c])
			c++;
		if (hp->v[c] <= x)
			break;
		hp->v[i] = hp->v[c];
		i = c;
	}
	if (hp->n)
		hp->v[i] = x;
	return top;
}

static int sim_belady(const struct replay *r, uint64_t cap, uint64_t *hits)
{
	struct heap hp = { malloc((r->t.nids + 1) * sizeof(uint64_t)), 0 };
	uint32_t *nu = malloc((r->ndense + 1) * sizeof(*nu));
	uint8_t *res = calloc(r->ndense + 1, 1);
	uint64_t count = 0, h = 0;

	if (!hp.v || !nu || !res) {
		free(hp.v), free(nu), free(res);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->t.n; i++) {
		h += prefix_hits(r, i, res);
		for (uint32_t k = r->first[i]; k < r->first[i + 1]; k++) {
			uint32_t d = r->acc[k];

			if (!res[d]) {
				if (count == cap) {
					for (;;) { /* the farthest live entry */
						uint64_t e = heap_pop(&hp);
						uint32_t v = (uint32_t)e, at = (uint32_t)(e >> 32);

						if (res[v] && nu[v] == at) {
							res[v] = 0;
							count--;
							break;
						}
					}
				}
				res[d] = 1;
				count++;
			}
			nu[d] = r->next[k];
			heap_push(&hp, (uint64_t)r->next[k] << 32 | d);
		}
	}
	free(hp.v), free(nu), free(res);
	*hits = h;
	return 0;
}

/* --- the real cache ------------------------------------------------------- */

static void cache_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, PROG ": libkvshare: %s\n", msg);
}

/* Is there room in /dev/shm for bytes?  (The cache pre-faults its data.) */
static int shm_room(uint64_t bytes, char *err, size_t errlen)
{
	struct statvfs vfs;

	if (statvfs("/dev/shm", &vfs) == 0 &&
	    (double)vfs.f_bavail * (double)vfs.f_frsize < (double)bytes * 1.05 + 16 * 1048576.0) {
		snprintf(err, errlen,
			 "the cache needs %.1f MiB of /dev/shm, %.1f MiB free: lower the capacity or "
			 "--shard-size",
			 (double)bytes / 1048576.0, (double)vfs.f_bavail * (double)vfs.f_frsize / 1048576.0);
		return -ENOSPC;
	}
	return 0;
}

static int sim_clock(const struct replay *r, const struct opts *o, uint64_t cap, unsigned seq,
		     uint64_t *hits, char *err, size_t errlen)
{
	struct kvs_cache_config cfg;
	struct kvs_cache_stats st;
	struct kvs_cache *c = NULL;
	struct kvs_block_id *blocks;
	struct timespec ts;
	uint64_t h = 0;
	int rc;

	rc = shm_room(cap * o->shards * o->shard_bytes, err, errlen);
	if (rc)
		return rc;
	blocks = malloc((r->t.max_blocks + 1) * sizeof(*blocks));
	if (!blocks) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	kvs_cache_config_init(&cfg);
	clock_gettime(CLOCK_REALTIME, &ts);
	/* unique per process, run and capacity: a fresh cache, never an adopted one */
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "kvshare-replay.%d.%llx.%u", (int)getpid(),
		 (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec, seq);
	cfg.device_id = 0;
	cfg.local_rank_size = 1;
	cfg.slot_bytes = o->shard_bytes;
	cfg.slot_count = cap * o->shards;
	cfg.shards_per_block = o->shards;
	cfg.hugetlb = KVS_HUGETLB_OFF;
	cfg.numa = KVS_NUMA_OFF;
	cfg.log = cache_log;
	rc = kvs_cache_open(&cfg, &c);
	if (rc) {
		snprintf(err, errlen, "cannot open a cache of %llu slots of %llu bytes: %s%s",
			 (unsigned long long)cfg.slot_count, (unsigned long long)cfg.slot_bytes,
			 kvs_strerror(rc),
			 rc == -ENOMEM || rc == -ENOSPC
				 ? " (the node cannot hold it now: lower --capacity-gib or "
				   "--capacity-blocks, or --shard-size)"
				 : "");
		free(blocks);
		return rc;
	}
	rc = kvs_cache_stats(c, KVS_STATS_NODE, &st);
	if (rc == 0 && (st.slots_ready || st.ranks_attached != 1)) {
		snprintf(err, errlen, "cache %s is not fresh (%llu READY slots, %u attached)",
			 cfg.unique_id, (unsigned long long)st.slots_ready, st.ranks_attached);
		rc = -EEXIST;
	}
	for (size_t i = 0; rc == 0 && i < r->t.n; i++) {
		const struct kvs_trace_req *q = &r->t.reqs[i];

		if (stop_signal) {
			snprintf(err, errlen, "interrupted (signal %d)", (int)stop_signal);
			rc = -EINTR;
			break;
		}
		if (q->nblocks == 0)
			continue;
		for (uint32_t j = 0; j < q->nblocks; j++)
			blocks[j] = kvs_trace_block(q->hash_ids[j]);
		rc = kvs_cache_lookup_prefix(c, blocks, q->nblocks, KVS_ALL_SHARDS);
		if (rc < 0) {
			snprintf(err, errlen, "kvs_cache_lookup_prefix: %s", kvs_strerror(rc));
			break;
		}
		h += (uint64_t)rc;
		rc = 0;
		for (uint32_t j = 0; rc == 0 && j < q->nblocks; j++) {
			for (uint32_t s = 0; s < o->shards; s++) {
				struct kvs_slot slot;

				rc = kvs_cache_get(c, &blocks[j], s, 0, &slot);
				if (rc) {
					snprintf(err, errlen, "kvs_cache_get: %s", kvs_strerror(rc));
					break;
				}
				if (slot.flags & KVS_SLOT_OWNER) {
					rc = kvs_slot_publish_ready(c, &slot);
					if (rc)
						snprintf(err, errlen, "kvs_slot_publish_ready: %s",
							 kvs_strerror(rc));
				} else if (slot.state != KVS_SLOT_READY) {
					/* we are the only user and always publish */
					snprintf(err, errlen, "slot of id %llu shard %u is in state %u",
						 (unsigned long long)q->hash_ids[j], s, slot.state);
					rc = -KVS_ECORRUPT;
				}
				int rc2 = kvs_slot_release(c, &slot);
				if (rc == 0 && rc2) {
					snprintf(err, errlen, "kvs_slot_release: %s", kvs_strerror(rc2));
					rc = rc2;
				}
				if (rc)
					break;
			}
		}
	}
	kvs_cache_close(c);
	free(blocks);
	*hits = h;
	return rc;
}

/* --- output ----------------------------------------------------------------- */

static double ratio(uint64_t hits, uint64_t accesses)
{
	return accesses ? (double)hits / (double)accesses : 0.0;
}

static void print_lines(const struct replay *r, const struct result *res)
{
	for (int p = 0; p < P_COUNT; p++)
		printf("replay trace=%s policy=%s capacity_blocks=%llu accesses=%zu hits=%llu "
		       "hit_ratio=%.4f\n",
		       r->name, policy_name[p], (unsigned long long)res->capacity, r->t.nids,
		       (unsigned long long)res->hits[p], ratio(res->hits[p], r->t.nids));
	fflush(stdout);
}

static void print_table(const struct replay *r, const struct result *res, size_t n)
{
	double worst = -1e9;

	printf("\n%s: hit ratio (%%) by capacity (%% of %u distinct blocks)\n", r->name, r->ndense);
	printf("%8s %9s %8s %8s %8s %8s %10s\n", "capacity", "blocks", "clock", "fifo", "lru",
	       "belady", "lru-clock");
	for (size_t i = 0; i < n; i++) {
		double c = 100 * ratio(res[i].hits[P_CLOCK], r->t.nids);
		double l = 100 * ratio(res[i].hits[P_LRU], r->t.nids);

		printf("%7u%% %9llu %8.2f %8.2f %8.2f %8.2f %7.2f pt\n", res[i].pct,
		       (unsigned long long)res[i].capacity, c,
		       100 * ratio(res[i].hits[P_FIFO], r->t.nids), l,
		       100 * ratio(res[i].hits[P_BELADY], r->t.nids), l - c);
		if (l - c > worst)
			worst = l - c;
	}
	printf("%8s %9s %8.2f (infinite cache)\n", "inf", "-", 100 * ratio(r->infinite_hits, r->t.nids));
	printf("clock vs lru: at most %.2f pt below (target: within 0.50 pt)\n", worst < 0 ? 0 : worst);
}

static int print_json(const struct replay *r, const struct opts *o, const struct result *res,
		      size_t n)
{
	json_t *root = json_object(), *arr = json_array();
	int rc;

	if (!root || !arr) {
		json_decref(root), json_decref(arr);
		return -ENOMEM;
	}
	json_object_set_new(root, "trace", json_string(r->name));
	json_object_set_new(root, "path", json_string(o->path));
	json_object_set_new(root, "requests", json_integer((json_int_t)r->t.n));
	json_object_set_new(root, "accesses", json_integer((json_int_t)r->t.nids));
	json_object_set_new(root, "distinct_blocks", json_integer((json_int_t)r->ndense));
	json_object_set_new(root, "infinite_hits", json_integer((json_int_t)r->infinite_hits));
	json_object_set_new(root, "infinite_hit_ratio", json_real(ratio(r->infinite_hits, r->t.nids)));
	json_object_set_new(root, "shards", json_integer(o->shards));
	json_object_set_new(root, "shard_bytes", json_integer((json_int_t)o->shard_bytes));
	json_object_set_new(root, "library", json_string(kvs_version()));
	json_object_set_new(root, "variant", json_string(kvs_variant()));
	for (size_t i = 0; i < n; i++) {
		for (int p = 0; p < P_COUNT; p++) {
			json_t *e = json_object();

			if (!e)
				continue;
			json_object_set_new(e, "policy", json_string(policy_name[p]));
			json_object_set_new(e, "capacity_blocks", json_integer((json_int_t)res[i].capacity));
			if (res[i].pct)
				json_object_set_new(e, "capacity_pct", json_integer(res[i].pct));
			json_object_set_new(e, "hits", json_integer((json_int_t)res[i].hits[p]));
			json_object_set_new(e, "hit_ratio", json_real(ratio(res[i].hits[p], r->t.nids)));
			json_object_set_new(e, "seconds", json_real(res[i].seconds[p]));
			json_array_append_new(arr, e);
		}
	}
	json_object_set_new(root, "results", arr);
	rc = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	if (rc)
		return -EIO;
	printf("\n");
	return 0;
}

/* --- main ------------------------------------------------------------------- */

int kvs_cli_replay(int argc, char **argv)
{
	struct sigaction sa, old[3];
	static const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
	struct replay r;
	struct result res[NPCT];
	struct opts o;
	size_t nres = 0;
	char err[512];
	int rc, ret = KVS_CLI_FAIL;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc < 0 ? KVS_CLI_OK : rc;
	memset(&r, 0, sizeof(r));
	r.name = strrchr(o.path, '/') ? strrchr(o.path, '/') + 1 : o.path;
	rc = kvs_trace_load(o.path, &r.t, err, sizeof(err));
	if (rc) {
		fprintf(stderr, PROG ": %s\n", err);
		return KVS_CLI_FAIL;
	}
	if (replay_prepare(&r, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		goto out;
	}
	if (o.capacity_blocks) {
		res[nres++] = (struct result){ .capacity = o.capacity_blocks };
	} else {
		for (size_t i = 0; i < NPCT; i++) {
			uint64_t b = ((uint64_t)r.ndense * table_pct[i] + 50) / 100;

			res[nres++] = (struct result){ .capacity = b ? b : 1, .pct = table_pct[i] };
		}
		if (res[nres - 1].capacity * o.shards > INT32_MAX) {
			fprintf(stderr, PROG ": %llu blocks x %u shards is over the cache's %d slots\n",
				(unsigned long long)res[nres - 1].capacity, o.shards, INT32_MAX);
			ret = KVS_CLI_USAGE;
			goto out;
		}
	}
	/* Close the cache on the way out of an interrupt: no segment left behind. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &sa, &old[i]);
	if (!o.json)
		printf("%s: %zu requests, %zu block accesses, %u distinct blocks; infinite-cache hit "
		       "ratio %.4f; clock = libkvshare %s (%s), %u shard(s) of %llu bytes per block\n",
		       r.name, r.t.n, r.t.nids, r.ndense, ratio(r.infinite_hits, r.t.nids), kvs_version(),
		       kvs_variant(), o.shards, (unsigned long long)o.shard_bytes);
	rc = 0;
	for (size_t i = 0; rc == 0 && i < nres; i++) {
		for (int p = 0; rc == 0 && p < P_COUNT; p++) {
			double t0 = now_s();

			switch (p) {
			case P_CLOCK:
				rc = sim_clock(&r, &o, res[i].capacity, (unsigned)i, &res[i].hits[p], err,
					       sizeof(err));
				break;
			case P_FIFO:
				rc = sim_fifo(&r, res[i].capacity, &res[i].hits[p]);
				break;
			case P_LRU:
				rc = sim_lru(&r, res[i].capacity, &res[i].hits[p]);
				break;
			case P_BELADY:
				rc = sim_belady(&r, res[i].capacity, &res[i].hits[p]);
				break;
			}
			if (rc && p != P_CLOCK)
				snprintf(err, sizeof(err), "%s: out of memory", policy_name[p]);
			res[i].seconds[p] = now_s() - t0;
		}
		if (rc == 0 && !o.json)
			print_lines(&r, &res[i]);
	}
	for (int i = 0; i < 3; i++)
		sigaction(sigs[i], &old[i], NULL);
	if (rc) {
		fprintf(stderr, PROG ": %s: %s\n", r.name, err);
		goto out;
	}
	if (o.json) {
		if (print_json(&r, &o, res, nres)) {
			fprintf(stderr, PROG ": cannot write the JSON output\n");
			goto out;
		}
	} else if (!o.capacity_blocks) {
		print_table(&r, res, nres);
	}
	if (fflush(stdout) == EOF || ferror(stdout)) {
		fprintf(stderr, PROG ": cannot write the output: %s\n", strerror(errno));
		goto out;
	}
	ret = stop_signal ? KVS_CLI_FAIL : KVS_CLI_OK;
out:
	replay_fini(&r);
	return ret;
}
