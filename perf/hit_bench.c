/*
 * perf/hit_bench.c — the store's hit path: what a load of shards already in the
 * shared cache (or read by their owner) costs beyond copying their bytes
 * (docs/store.md, "What a hit costs"; README.md, "Performance").  One line per
 * run:
 *
 *   hit_bench variant=<v> path=<ready|cold> ranks=<n> sharing=<same|disjoint>
 *     geometry=<name|none> layout=<layer-head|head|none> tp=<t> shard_bytes=<b>
 *     tensors=<per shard> shards=<per rank> per_task=<n>
 *     wall_ns_per_shard=<..> cpu_ns_per_shard=<..> overhead_cpu_ns_per_shard=<..>
 *     shards_per_s=<..> gb_per_s=<..> base=<memcpy|fill+memcpy|h2d>
 *     base_ns_per_shard=<..> base_gb_per_s=<..> ratio=<..> nt_ns_per_shard=<..>
 *     nt_gb_per_s=<..> ratio_nt=<..> switches_per_kshard=<..> streams=<n>
 *
 * The workload.  `ranks` processes (forked; device_id 0..n-1, local_rank_size n)
 * open stores on one fresh cache (copy_engine host: the "device" is a
 * page-aligned host buffer; cuda: device memory) over a latency backend with no
 * latency: a read fills its slot with the pattern of common/pattern.h, and every
 * loaded byte is checked after the last round.  Each rank loads `shards` shards
 * a round, `per_task` to a task, WINDOW tasks in flight:
 *
 *   sharing=same      every rank loads the same shards (MLA, or heads replicated
 *                     over ranks: each shard read once, copied by every rank);
 *   sharing=disjoint  rank r loads its own slice of every block's shards (GQA
 *                     heads: the ranks share blocks, not shards);
 *   --geometry        a vLLM model's KV blocks as the connector stores them
 *                     (docs/vllm.md): per layer and KV head 2 x 16 tokens x
 *                     head_dim bf16 values, each layer's in its own KV tensor
 *                     (the destination holds them layer-major); rank r of TP t
 *                     holds heads [r H/t, (r+1) H/t) of blocks enough for --mib
 *                     MiB per rank.  Rank 0's share runs (ranks = 1 process;
 *                     --tp sets the layout only).  --layout says how a block is
 *                     cut into shards:
 *                       head        (the connector's since layout version 2) one
 *                                   shard per KV head, a tensor per layer: one
 *                                   task of every block's heads of the rank;
 *                       layer-head  (version 1) one shard per (layer, KV head):
 *                                   one task per layer.
 *
 *   path=ready  one untimed round fills the cache (owner reads), then every
 *               timed round loads the same shards again: READY hits.
 *   path=cold   every round loads blocks nobody loaded before (the cache holds
 *               two rounds: from the third on, owner gets evict); one rank owns
 *               each shard and reads it (the backend's pattern fill, a write of
 *               the slot), the others wait for it and copy.
 *
 * Each rank first waits for its store's data plane to be registered with the
 * copy engine (kvs_store_ready: nothing to do for the host engine), so that no
 * copy is staged.  Timed per round, all ranks started together (a barrier of pipes): each
 * rank's wall time from its first submit to its last completion, and its CPU
 * (getrusage RUSAGE_SELF, user + sys: every thread of the process, the
 * submits included).  The baseline, in the same run and processes, all ranks at
 * once, is the work no pipeline can avoid, on the same memory: memcpy of the
 * same bytes from the same slots (their addresses taken through
 * kvs_store_cache) into the same destination (base=memcpy), and the same copies
 * as the host engine makes them (nt: non-temporal stores for a round of 256 KiB
 * or more, io/copy_nt.c), each round both, in turn first; on the cold path
 * the backend's fill of each slot first (base=fill+memcpy: the latency
 * backend's pattern, what its read costs); with copy_engine cuda the device's
 * pinned ceiling instead, one cudaMemcpy of the rank's bytes from
 * cudaHostAlloc'd memory (base=h2d).  A round's figures for the node: the
 * slowest rank's wall, the sum of the ranks' CPU; the line gives the medians
 * over the rounds:
 *
 *   wall_ns_per_shard          wall / shards (a rank's)
 *   cpu_ns_per_shard           CPU / (shards x ranks)
 *   base_ns_per_shard          the baseline's time, summed over the ranks, the
 *                              same way (one thread each: its CPU)
 *   nt_ns_per_shard            the host engine's copies, the same way
 *   overhead_cpu_ns_per_shard  cpu_ns_per_shard - the cheaper of base_ns and
 *                              nt_ns per shard: the CPU beyond the copy (cuda:
 *                              the whole CPU, the copy being the device's)
 *   shards_per_s, gb_per_s     shards x ranks (and their bytes) / wall
 *   base_gb_per_s              the baseline's bytes / its slowest rank's wall
 *   ratio                      gb_per_s / base_gb_per_s
 *   nt_gb_per_s, ratio_nt      the host engine's copies: bytes / their slowest
 *                              rank's wall, and gb_per_s / that (cuda: the
 *                              h2d ceiling again)
 *   switches_per_kshard        context switches of every thread of the ranks
 *                              (getrusage) per 1000 shards: the pipeline's
 *                              sleeps and wakes
 *   streams                    --streams
 *
 * usage: hit_bench [--shard-kib 8] [--shards 8192] [--per-task 0 (all)] [--spb 32]
 *                  [--ranks 1] [--sharing same|disjoint] [--path ready|cold]
 *                  [--rounds 7] [--geometry llama3-8b|llama3-70b|mha-72b]
 *                  [--layout head|layer-head] [--tp 1]
 *                  [--mib 64] [--copy-engine host|cuda] [--streams 1] [--verbose]
 * --streams sets cache_stream_number: CUDA streams, or the host engine's copy
 * threads sharing each large copy call (io/copy_crew.c; the memcpy baseline
 * stays one thread a rank).
 * Exit 1 on a failed call or a wrong byte (after printing it), 77 for
 * --copy-engine cuda without a device or a CUDA build.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "io/copy.h"
#include "kvshare.h"

#ifdef KVS_HIT_BENCH_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define MAX_RANKS 8u
#define MAX_ROUNDS 64u
#define WINDOW 16u                               /* tasks in flight per rank */
#define TASK_WAIT_NS (60ull * KVS_NSEC_PER_SEC)
#define STEP_TIMEOUT_NS (120ull * KVS_NSEC_PER_SEC) /* one barrier step */
#define BLOCK_TOKENS 16u
#define BF16_BYTES 2u
#define EXIT_SKIP 77

/* A model's KV geometry: the connector stores one shard per (layer, KV head). */
struct geometry {
	const char *name;
	uint32_t layers, kv_heads, head_dim;
};

static const struct geometry geometries[] = {
	{ "llama3-8b", 32, 8, 128 },  /* GQA: 8 KV heads */
	{ "llama3-70b", 80, 8, 128 }, /* GQA: 8 KV heads */
	{ "mha-72b", 80, 64, 128 },   /* MHA: every head a KV head (Qwen-72B's shape) */
};

enum layout { LAYOUT_HEAD, LAYOUT_LAYER_HEAD };

struct params {
	uint64_t shard_bytes;
	uint64_t tensor_bytes; /* a shard's tensors' (equal) size: shard_bytes / tensors */
	uint32_t tensors;      /* per shard: a geometry's layers (head layout), else 1 */
	enum layout layout;    /* with a geometry */
	uint32_t shards;   /* per rank per round (a geometry derives it) */
	uint32_t per_task; /* 0: the round in one task */
	uint32_t spb;
	uint32_t ranks, rounds, tp;
	uint32_t streams;  /* cache_stream_number: the host engine's copy threads */
	uint64_t mib;
	const struct geometry *geo;
	bool disjoint, cold, cuda, verbose;
};

/* One rank's figures, per round: written by the rank, read by the parent after
 * waitpid (mapped MAP_SHARED before the fork). */
struct rank_out {
	int32_t rc;
	uint32_t bad;                 /* shards with a wrong byte */
	uint64_t wall_ns[MAX_ROUNDS], cpu_ns[MAX_ROUNDS], base_ns[MAX_ROUNDS], nt_ns[MAX_ROUNDS];
	uint64_t switches[MAX_ROUNDS];      /* context switches, every thread */
};

/* The shards one rank loads in a round, in task order. */
struct plan {
	uint32_t n, spb, ntasks, tensors;
	uint32_t *task_start;         /* ntasks + 1 offsets into sh */
	uint32_t *blk;                /* each shard's block index (ids per round) */
	struct kvs_store_shard *sh;   /* tensors: tv[i * tensors ..] */
	struct kvs_store_tensor *tv;
};

static struct kvs_block_id block_id(uint32_t round, uint32_t b)
{
	struct kvs_block_id id;
	uint64_t lo = kvs_mix64(0x6869745f62656e63ull ^ ((uint64_t)round << 32 | b));
	uint64_t hi = kvs_mix64(lo ^ 0x6b7673ull);

	memcpy(id.bytes, &lo, 8);
	memcpy(id.bytes + 8, &hi, 8);
	return id;
}

/* The process's CPU time (every thread, user + sys) and context switches. */
static uint64_t rusage_ns(uint64_t *switches)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*switches = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * KVS_NSEC_PER_SEC +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
}

/* ---- the plan ---- */

static void plan_add(struct plan *pl, uint32_t b, uint32_t shard)
{
	pl->blk[pl->n] = b;
	pl->sh[pl->n] = (struct kvs_store_shard){ .shard = shard, .tensor_count = pl->tensors,
						  .tensors = &pl->tv[(size_t)pl->n * pl->tensors] };
	pl->n++;
}

static int plan_build(const struct params *p, uint32_t rank, struct plan *pl)
{
	const struct geometry *g = p->geo;
	uint32_t total = p->shards, per_task = p->per_task ? p->per_task : p->shards;
	uint32_t heads = 0, blocks = 0;

	memset(pl, 0, sizeof(*pl));
	pl->spb = p->spb;
	pl->tensors = p->tensors;
	if (g) {
		heads = g->kv_heads / p->tp;
		blocks = (uint32_t)(p->mib * (1u << 20) / ((uint64_t)g->layers * heads * p->tensor_bytes));
		blocks = blocks ? blocks : 1;
		total = blocks * heads * (p->layout == LAYOUT_HEAD ? 1 : g->layers);
	}
	pl->ntasks = !g ? (total + per_task - 1) / per_task : p->layout == LAYOUT_HEAD ? 1 : g->layers;
	pl->sh = calloc(total, sizeof(*pl->sh));
	pl->tv = calloc((size_t)total * p->tensors, sizeof(*pl->tv));
	pl->blk = calloc(total, sizeof(*pl->blk));
	pl->task_start = calloc(pl->ntasks + 1, sizeof(*pl->task_start));
	if (!pl->sh || !pl->tv || !pl->blk || !pl->task_start)
		return -ENOMEM;
	if (g && p->layout == LAYOUT_HEAD) { /* one task: every block's heads of this rank */
		for (uint32_t b = 0; b < blocks; b++)
			for (uint32_t h = rank * heads; h < (rank + 1) * heads; h++)
				plan_add(pl, b, h);
	} else if (g) { /* layer l's task: every block's heads of this rank, block-major */
		for (uint32_t l = 0; l < g->layers; l++) {
			pl->task_start[l] = pl->n;
			for (uint32_t b = 0; b < blocks; b++)
				for (uint32_t h = rank * heads; h < (rank + 1) * heads; h++)
					plan_add(pl, b, l * g->kv_heads + h);
		}
	} else { /* same: blocks of every shard; disjoint: rank r's slice of each */
		uint32_t slice = p->disjoint ? p->spb / p->ranks : p->spb;
		uint32_t first = p->disjoint ? rank * slice : 0;

		for (uint32_t b = 0; pl->n < total; b++)
			for (uint32_t s = first; s < first + slice && pl->n < total; s++)
				plan_add(pl, b, s);
		for (uint32_t t = 0; t < pl->ntasks; t++)
			pl->task_start[t] = t * per_task;
	}
	pl->task_start[pl->ntasks] = pl->n;
	return 0;
}

static void plan_free(struct plan *pl)
{
	free(pl->sh);
	free(pl->tv);
	free(pl->blk);
	free(pl->task_start);
}

/* Where tensor t of the plan's shard i goes, from the destination's start:
 * layer-major (tensor t of every shard, then t + 1: each layer's KV tensor
 * apart, as an engine holds them); with one tensor a shard, shard i at i
 * shards. */
static uint64_t dest_off(const struct params *p, const struct plan *pl, uint32_t i, uint32_t t)
{
	return ((uint64_t)t * pl->n + i) * p->tensor_bytes;
}

/* Point the plan at round's blocks and its shards' tensors at dst. */
static void plan_round(const struct params *p, struct plan *pl, uint32_t round, uint64_t dst)
{
	for (uint32_t i = 0; i < pl->n; i++) {
		pl->sh[i].block = block_id(p->cold ? round : 0, pl->blk[i]);
		for (uint32_t t = 0; t < pl->tensors; t++)
			pl->tv[(size_t)i * pl->tensors + t] = (struct kvs_store_tensor){
				.addr = dst + dest_off(p, pl, i, t) };
	}
}

/* ---- the destination: host memory, or the device's ---- */

struct dest {
	uint8_t *host;    /* copy_engine host: the "device" */
	void *dev;        /* cuda: device memory */
	uint8_t *pinned;  /* cuda: the ceiling's source, and the check's copy back */
	uint64_t bytes;
};

static int dest_open(const struct params *p, uint64_t bytes, struct dest *d)
{
	memset(d, 0, sizeof(*d));
	d->bytes = bytes;
	if (!p->cuda) {
		/* page-aligned, as device memory is: a misaligned one pays 4K
		 * aliasing in every copy, baseline and store alike */
		d->host = aligned_alloc(1u << 21, (bytes + (1u << 21) - 1) & ~(uint64_t)((1u << 21) - 1));
		if (!d->host)
			return -ENOMEM;
		memset(d->host, 0, bytes);
		return 0;
	}
#ifdef KVS_HIT_BENCH_CUDA
	int ndev = 0;

	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0)
		return -ENODEV;
	if (cudaMalloc(&d->dev, bytes) != cudaSuccess ||
	    cudaHostAlloc((void **)&d->pinned, bytes, cudaHostAllocDefault) != cudaSuccess)
		return -ENOMEM;
	memset(d->pinned, 0x5a, bytes);
	return cudaMemset(d->dev, 0, bytes) == cudaSuccess ? 0 : -EIO;
#else
	return -EOPNOTSUPP;
#endif
}

static uint64_t dest_addr(const struct dest *d)
{
	return (uint64_t)(uintptr_t)(d->host ? d->host : (uint8_t *)d->dev);
}

static void dest_close(struct dest *d)
{
	free(d->host);
#ifdef KVS_HIT_BENCH_CUDA
	if (d->dev)
		cudaFree(d->dev);
	if (d->pinned)
		cudaFreeHost(d->pinned);
#endif
}

/* One host baseline pass: memcpy from the slots, or (nt) the host engine's
 * own copies, streamed where it streams them; the time it took. */
static uint64_t host_pass(const struct params *p, const struct plan *pl, uint8_t *const *src,
			  struct dest *d, bool nt)
{
	uint64_t t0 = kvs_now_ns();

	nt = nt && kvs_copy_nt_wanted((uint64_t)pl->n * p->shard_bytes);
	for (uint32_t i = 0; i < pl->n; i++) {
		if (p->cold) /* the owner's read: the backend fills the slot */
			kvs_pattern_fill(&pl->sh[i].block, pl->sh[i].shard, 0, src[i],
					 p->shard_bytes);
		for (uint32_t t = 0; t < pl->tensors; t++)
			kvs_copy_bytes(d->host + dest_off(p, pl, i, t), src[i] + t * p->tensor_bytes,
				       p->tensor_bytes, nt);
	}
	if (nt)
		kvs_copy_nt_fence();
	return kvs_now_ns() - t0;
}

/* The baselines of round r: memcpy from the slots and the host engine's copy
 * (in turn first), or the pinned ceiling. */
static int base_round(const struct params *p, const struct plan *pl, uint8_t *const *src,
		      struct dest *d, uint32_t r, uint64_t *ns, uint64_t *nt_ns)
{
	if (!p->cuda) {
		bool nt_first = r % 2;

		if (nt_first)
			*nt_ns = host_pass(p, pl, src, d, true);
		*ns = host_pass(p, pl, src, d, false);
		if (!nt_first)
			*nt_ns = host_pass(p, pl, src, d, true);
		return 0;
	}
#ifdef KVS_HIT_BENCH_CUDA
	uint64_t t0 = kvs_now_ns();

	if (cudaMemcpy(d->dev, d->pinned, d->bytes, cudaMemcpyHostToDevice) != cudaSuccess)
		return -EIO;
	*ns = *nt_ns = kvs_now_ns() - t0;
	return 0;
#else
	return -EOPNOTSUPP;
#endif
}

/* Every shard's bytes against the backend's pattern for round's blocks: the
 * number of wrong shards. */
static uint32_t check(const struct params *p, const struct plan *pl, struct dest *d)
{
	uint8_t *want = malloc(p->shard_bytes), *got = d->host;
	uint32_t bad = 0;

	if (!got) {
#ifdef KVS_HIT_BENCH_CUDA
		got = d->pinned;
		if (cudaMemcpy(got, d->dev, d->bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
			got = NULL;
#endif
	}
	if (!want || !got) {
		free(want);
		return pl->n;
	}
	for (uint32_t i = 0; i < pl->n; i++) {
		uint32_t t = 0;

		kvs_pattern_fill(&pl->sh[i].block, pl->sh[i].shard, 0, want, p->shard_bytes);
		while (t < pl->tensors && memcmp(got + dest_off(p, pl, i, t),
						 want + t * p->tensor_bytes, p->tensor_bytes) == 0)
			t++;
		if (t < pl->tensors && bad++ == 0)
			fprintf(stderr, "hit_bench: shard %u of block %u, tensor %u: bytes differ "
					"from the backend's\n", pl->sh[i].shard, pl->blk[i], t);
	}
	free(want);
	return bad;
}

/* ---- one rank ---- */

static void log_cb(void *arg, int level, const char *msg)
{
	bool verbose = arg != NULL;

	if (level <= KVS_LOG_ERROR || (verbose && level <= KVS_LOG_WARN))
		fprintf(stderr, "hit_bench: %s\n", msg);
}

/* Load the plan, WINDOW tasks in flight: 0 or the first failure. */
static int load_round(struct kvs_store *st, const struct plan *pl)
{
	uint64_t ids[WINDOW];
	uint32_t next = 0, done = 0;

	while (done < pl->ntasks) {
		while (next < pl->ntasks && next - done < WINDOW) {
			uint32_t a = pl->task_start[next], n = pl->task_start[next + 1] - a;
			int rc = kvs_store_load(st, pl->sh + a, n, &ids[next % WINDOW]);

			if (rc) {
				fprintf(stderr, "hit_bench: kvs_store_load: %s\n", kvs_strerror(rc));
				return rc;
			}
			next++;
		}
		int rc = kvs_store_wait(st, ids[done % WINDOW], TASK_WAIT_NS);

		if (rc) {
			fprintf(stderr, "hit_bench: a load task: %s\n",
				rc == 1 ? "still running after 60 s" : kvs_strerror(rc));
			return rc == 1 ? -ETIMEDOUT : rc;
		}
		done++;
	}
	return 0;
}

/* The slots' addresses of the plan's shards (READY in the cache: loaded). */
static int slot_addrs(struct kvs_store *st, const struct plan *pl, uint8_t **src)
{
	struct kvs_cache *c = kvs_store_cache(st);

	for (uint32_t i = 0; i < pl->n; i++) {
		struct kvs_slot slot;
		void *data = NULL;
		int rc = kvs_cache_get(c, &pl->sh[i].block, pl->sh[i].shard, 0, &slot);

		if (rc == 0) {
			if (slot.flags & KVS_SLOT_OWNER) /* not loaded: give it back unfilled */
				rc = kvs_slot_publish_failed(c, &slot, -ENOENT) ?: -ENOENT;
			else
				rc = kvs_slot_data(c, &slot, &data);
			int rr = kvs_slot_release(c, &slot);

			rc = rc ? rc : rr;
		}
		if (rc) {
			fprintf(stderr, "hit_bench: shard %u of block %u in the cache: %s\n",
				pl->sh[i].shard, pl->blk[i], kvs_strerror(rc));
			return rc;
		}
		src[i] = data;
	}
	return 0;
}

/* A barrier: tell the parent we are here, wait for its go.  0, or -1 (the
 * parent is gone, or told us to stop). */
static int barrier(int up, int down)
{
	char c = 'R';

	if (write(up, &c, 1) != 1)
		return -1;
	while (read(down, &c, 1) < 0)
		if (errno != EINTR)
			return -1;
	return c == 'G' ? 0 : -1;
}

static void store_config(const struct params *p, const char *uid, uint32_t rank, uint64_t slots,
			 struct kvs_store_config *cfg)
{
	kvs_store_config_init(cfg);
	snprintf(cfg->cache.unique_id, sizeof(cfg->cache.unique_id), "%s", uid);
	cfg->cache.device_id = (int32_t)rank;
	cfg->cache.local_rank_size = p->ranks;
	cfg->cache.slot_bytes = p->shard_bytes;
	cfg->cache.slot_count = slots;
	cfg->cache.shards_per_block = p->spb;
	cfg->tensor_bytes = p->tensors > 1 ? p->tensor_bytes : 0;
	cfg->copy_engine = p->cuda ? KVS_COPY_ENGINE_CUDA : KVS_COPY_ENGINE_HOST;
	cfg->cache_stream_number = p->streams;
	cfg->backend.kind = KVS_BACKEND_LATENCY;
	cfg->backend.latency_ns = 0;
	cfg->timeout_ns = TASK_WAIT_NS;
	cfg->log = log_cb;
	cfg->log_arg = p->verbose ? (void *)1 : NULL;
}

/* The cache's slots: what the node loads in a round (ready) or two (cold),
 * plus room. */
static uint64_t cache_slots(const struct params *p, uint32_t per_rank)
{
	uint64_t round = p->disjoint ? (uint64_t)per_rank * p->ranks : per_rank;

	return (p->cold ? 2 * round : round) + 1024;
}

static int rank_run(const struct params *p, struct kvs_store *st, struct plan *pl, struct dest *d,
		    struct rank_out *o, int up, int down)
{
	uint8_t **src = calloc(pl->n, sizeof(*src));
	int rc = -ENOMEM;

	if (!src)
		goto out;
	/* warm-up: the ready path's fill; the cold path's first round, untimed */
	plan_round(p, pl, 0, dest_addr(d));
	rc = load_round(st, pl);
	if (rc == 0)
		rc = slot_addrs(st, pl, src);
	if (rc || barrier(up, down))
		goto out;
	for (uint32_t r = 0; r < p->rounds; r++) {
		if (barrier(up, down) || (rc = base_round(p, pl, src, d, r, &o->base_ns[r],
								 &o->nt_ns[r])))
			goto out;
	}
	for (uint32_t r = 0; r < p->rounds; r++) {
		uint64_t t0, c0, w0, w1;

		plan_round(p, pl, r + 1, dest_addr(d));
		if (barrier(up, down)) {
			rc = -ECANCELED;
			goto out;
		}
		c0 = rusage_ns(&w0);
		t0 = kvs_now_ns();
		rc = load_round(st, pl);
		o->wall_ns[r] = kvs_now_ns() - t0;
		o->cpu_ns[r] = rusage_ns(&w1) - c0;
		o->switches[r] = w1 - w0;
		if (rc)
			goto out;
	}
	o->bad = check(p, pl, d);
out:
	free(src);
	return rc;
}

static int rank_main(const struct params *p, const char *uid, uint32_t rank, struct rank_out *o,
		     int up, int down)
{
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	struct plan pl;
	struct dest d = { 0 };
	int rc = plan_build(p, rank, &pl);

	if (rc == 0)
		rc = dest_open(p, (uint64_t)pl.n * p->shard_bytes, &d);
	if (rc == 0) {
		store_config(p, uid, rank, cache_slots(p, pl.n), &cfg);
		rc = kvs_store_open(&cfg, &st);
		if (rc)
			fprintf(stderr, "hit_bench: rank %u: kvs_store_open: %s\n", rank, kvs_strerror(rc));
	}
	if (rc == 0 && kvs_store_ready(st, TASK_WAIT_NS) != 1)
		fprintf(stderr, "hit_bench: rank %u: the data plane is not registered yet: some "
				"copies are staged\n", rank); /* measured all the same */
	if (rc == 0 && barrier(up, down) == 0)
		rc = rank_run(p, st, &pl, &d, o, up, down);
	kvs_store_close(st);
	dest_close(&d);
	plan_free(&pl);
	o->rc = rc;
	return rc || o->bad ? 1 : 0;
}

/* ---- the parent ---- */

/* Release the ranks from barriers until they all exit; 0 when each exited 0. */
static int drive(pid_t *pids, uint32_t n, int up, int *down)
{
	uint64_t step_end = kvs_deadline_after(STEP_TIMEOUT_NS);
	uint32_t arrived = 0, alive = n;
	int bad = 0;

	while (alive) {
		struct pollfd pfd = { .fd = up, .events = POLLIN };
		int status;
		char buf[MAX_RANKS];

		for (uint32_t i = 0; i < n; i++) {
			if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i])
				continue;
			pids[i] = 0;
			alive--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				bad = 1;
		}
		if (bad || kvs_now_ns() >= step_end) {
			if (!bad)
				fprintf(stderr, "hit_bench: a rank did not reach its next step in %llu s\n",
					(unsigned long long)(STEP_TIMEOUT_NS / KVS_NSEC_PER_SEC));
			for (uint32_t i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			bad = 1;
			step_end = UINT64_MAX;
		}
		if (poll(&pfd, 1, 50) <= 0)
			continue;
		ssize_t k = read(up, buf, sizeof(buf));

		arrived += k > 0 ? (uint32_t)k : 0;
		if (arrived < alive || alive == 0 || bad)
			continue;
		arrived = 0;
		step_end = kvs_deadline_after(STEP_TIMEOUT_NS);
		for (uint32_t i = 0; i < n; i++)
			if (pids[i] > 0 && write(down[i], "G", 1) != 1)
				bad = 1;
	}
	return bad;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static double median(uint64_t *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
}

/* Per round: a field's largest value over the ranks (sum false), or its sum. */
static void node_rounds(const struct params *p, const struct rank_out *o, size_t field,
			bool sum, uint64_t *out)
{
	for (uint32_t r = 0; r < p->rounds; r++) {
		out[r] = 0;
		for (uint32_t k = 0; k < p->ranks; k++) {
			uint64_t v = ((const uint64_t *)((const char *)&o[k] + field))[r];

			out[r] = sum ? out[r] + v : (v > out[r] ? v : out[r]);
		}
	}
}

static void report(const struct params *p, const struct rank_out *o, uint32_t per_rank,
		   uint32_t per_task)
{
	uint64_t v[MAX_ROUNDS];
	double shards = (double)per_rank * p->ranks, bytes = shards * (double)p->shard_bytes;
	double wall, cpu, base, base_cpu, nt, nt_cpu, switches;

	node_rounds(p, o, offsetof(struct rank_out, wall_ns), false, v);
	wall = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, cpu_ns), true, v);
	cpu = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, base_ns), false, v);
	base = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, base_ns), true, v);
	base_cpu = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, nt_ns), false, v);
	nt = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, nt_ns), true, v);
	nt_cpu = median(v, p->rounds);
	node_rounds(p, o, offsetof(struct rank_out, switches), true, v);
	switches = median(v, p->rounds);
	printf("hit_bench variant=%s path=%s ranks=%u sharing=%s geometry=%s layout=%s tp=%u"
	       " shard_bytes=%" PRIu64 " tensors=%u"
	       " shards=%u per_task=%u wall_ns_per_shard=%.0f cpu_ns_per_shard=%.0f"
	       " overhead_cpu_ns_per_shard=%.0f shards_per_s=%.0f gb_per_s=%.3f base=%s"
	       " base_ns_per_shard=%.0f base_gb_per_s=%.3f ratio=%.3f nt_ns_per_shard=%.0f"
	       " nt_gb_per_s=%.3f ratio_nt=%.3f switches_per_kshard=%.1f streams=%u\n",
	       KVS_BENCH_VARIANT, p->cold ? "cold" : "ready", p->ranks,
	       p->disjoint ? "disjoint" : "same", p->geo ? p->geo->name : "none",
	       !p->geo ? "none" : p->layout == LAYOUT_HEAD ? "head" : "layer-head", p->tp,
	       p->shard_bytes, p->tensors, per_rank, per_task, wall / per_rank, cpu / shards,
	       cpu / shards - (p->cuda ? 0 : (nt_cpu < base_cpu ? nt_cpu : base_cpu) / shards),
	       shards / wall * 1e9, bytes / wall,
	       p->cuda ? "h2d" : p->cold ? "fill+memcpy" : "memcpy", base_cpu / shards, bytes / base,
	       base > 0 ? (bytes / wall) / (bytes / base) : 0, nt_cpu / shards, bytes / nt,
	       nt > 0 ? (bytes / wall) / (bytes / nt) : 0, switches * 1000 / shards,
	       p->streams);
	fflush(stdout);
}

static int run(const struct params *p)
{
	struct rank_out *o = mmap(NULL, sizeof(*o) * MAX_RANKS, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[MAX_RANKS] = { 0 };
	int up[2], down[MAX_RANKS][2], downw[MAX_RANKS];
	char uid[64];
	struct plan pl;
	int bad;

	if (o == MAP_FAILED || pipe(up) < 0)
		return 1;
	snprintf(uid, sizeof(uid), "hit_bench.%d", (int)getpid());
	for (uint32_t i = 0; i < p->ranks; i++) {
		if (pipe(down[i]) < 0)
			return 1;
		downw[i] = down[i][1];
		pids[i] = fork();
		if (pids[i] < 0)
			return 1;
		if (pids[i] == 0) {
			close(up[0]);
			close(down[i][1]);
			_exit(rank_main(p, uid, i, &o[i], up[1], down[i][0]));
		}
		close(down[i][0]);
	}
	close(up[1]);
	bad = drive(pids, p->ranks, up[0], downw);
	for (uint32_t i = 0; i < p->ranks; i++)
		close(downw[i]);
	close(up[0]);
	for (uint32_t i = 0; i < p->ranks; i++) {
		if (o[i].rc == -ENODEV && p->cuda) {
			printf("SKIP: hit_bench: --copy-engine cuda: no CUDA device or driver here\n");
			return EXIT_SKIP;
		}
		if (o[i].bad)
			fprintf(stderr, "hit_bench: rank %u: %u shards loaded wrong\n", i, o[i].bad);
		bad |= o[i].rc != 0 || o[i].bad;
	}
	if (!bad && plan_build(p, 0, &pl) == 0) {
		report(p, o, pl.n, pl.task_start[1]);
	} else {
		bad = 1;
	}
	plan_free(&pl);
	munmap(o, sizeof(*o) * MAX_RANKS);
	return bad;
}

/* ---- arguments ---- */

static int usage(void)
{
	fprintf(stderr, "usage: hit_bench [--shard-kib K] [--shards N] [--per-task N] [--spb N]\n"
			"                 [--ranks 1..%u] [--sharing same|disjoint] [--path ready|cold]\n"
			"                 [--rounds 1..%u] [--geometry llama3-8b|llama3-70b|mha-72b]\n"
			"                 [--layout head|layer-head] [--tp T] [--mib M] [--copy-engine host|cuda]\n"
			"                 [--streams 1..16] [--verbose]\n",
		MAX_RANKS, MAX_ROUNDS);
	return 2;
}

static bool num(const char *s, uint64_t lo, uint64_t hi, uint64_t *v)
{
	char *end;
	unsigned long long x = strtoull(s, &end, 10);

	*v = x;
	return *s && !*end && x >= lo && x <= hi;
}

int main(int argc, char **argv)
{
	struct params p = { .shard_bytes = 8192, .shards = 8192, .spb = 32, .ranks = 1, .rounds = 7,
			    .tp = 1, .mib = 64, .streams = 1 };
	uint64_t v;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *b = i + 1 < argc ? argv[i + 1] : "";
		bool ok = true;

		if (!strcmp(a, "--verbose")) {
			p.verbose = true;
			continue;
		}
		i++;
		if (!strcmp(a, "--shard-kib") && (ok = num(b, 1, 1u << 20, &v)))
			p.shard_bytes = v << 10;
		else if (!strcmp(a, "--shards") && (ok = num(b, 1, 1u << 24, &v)))
			p.shards = (uint32_t)v;
		else if (!strcmp(a, "--per-task") && (ok = num(b, 0, 1u << 20, &v)))
			p.per_task = (uint32_t)v;
		else if (!strcmp(a, "--spb") && (ok = num(b, 1, 65536, &v)))
			p.spb = (uint32_t)v;
		else if (!strcmp(a, "--ranks") && (ok = num(b, 1, MAX_RANKS, &v)))
			p.ranks = (uint32_t)v;
		else if (!strcmp(a, "--rounds") && (ok = num(b, 1, MAX_ROUNDS, &v)))
			p.rounds = (uint32_t)v;
		else if (!strcmp(a, "--tp") && (ok = num(b, 1, 64, &v)))
			p.tp = (uint32_t)v;
		else if (!strcmp(a, "--streams") && (ok = num(b, 1, 16, &v)))
			p.streams = (uint32_t)v;
		else if (!strcmp(a, "--mib") && (ok = num(b, 1, 1u << 20, &v)))
			p.mib = v;
		else if (!strcmp(a, "--sharing") && (ok = !strcmp(b, "same") || !strcmp(b, "disjoint")))
			p.disjoint = !strcmp(b, "disjoint");
		else if (!strcmp(a, "--path") && (ok = !strcmp(b, "ready") || !strcmp(b, "cold")))
			p.cold = !strcmp(b, "cold");
		else if (!strcmp(a, "--copy-engine") && (ok = !strcmp(b, "host") || !strcmp(b, "cuda")))
			p.cuda = !strcmp(b, "cuda");
		else if (!strcmp(a, "--geometry")) {
			p.geo = NULL;
			for (size_t g = 0; g < sizeof(geometries) / sizeof(geometries[0]); g++)
				if (!strcmp(b, geometries[g].name))
					p.geo = &geometries[g];
			ok = p.geo != NULL;
		} else if (!strcmp(a, "--layout") && (ok = !strcmp(b, "head") || !strcmp(b, "layer-head")))
			p.layout = !strcmp(b, "head") ? LAYOUT_HEAD : LAYOUT_LAYER_HEAD;
		else
			return usage();
		if (!ok) {
			fprintf(stderr, "hit_bench: %s %s: out of range\n", a, b);
			return usage();
		}
	}
	if (p.geo) {
		if (p.tp > p.geo->kv_heads || p.geo->kv_heads % p.tp) {
			fprintf(stderr, "hit_bench: --tp %u must divide %s's %u KV heads\n", p.tp,
				p.geo->name, p.geo->kv_heads);
			return 2;
		}
		p.tensor_bytes = 2ull * BLOCK_TOKENS * p.geo->head_dim * BF16_BYTES;
		p.tensors = p.layout == LAYOUT_HEAD ? p.geo->layers : 1;
		p.shard_bytes = p.tensor_bytes * p.tensors;
		p.spb = p.geo->kv_heads * (p.layout == LAYOUT_HEAD ? 1 : p.geo->layers);
		p.ranks = 1;
		p.disjoint = false;
	} else if (p.disjoint && (p.ranks < 2 || p.spb % p.ranks)) {
		fprintf(stderr, "hit_bench: --sharing disjoint wants --ranks >= 2 dividing --spb %u\n",
			p.spb);
		return 2;
	} else {
		p.tensors = 1;
		p.tensor_bytes = p.shard_bytes;
	}
#ifndef KVS_HIT_BENCH_CUDA
	if (p.cuda) {
		printf("SKIP: hit_bench: --copy-engine cuda: this build has no CUDA\n");
		return EXIT_SKIP;
	}
#endif
	return run(&p);
}
