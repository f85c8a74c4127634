/*
 * perf/store_load_bench.c — the C side of perf/python_load.py: one rank loads a
 * block set from a warm shared cache through kvs_store_load, the same workload
 * the script then drives from Python through the binding (python/kvshare), so
 * the two lines compare the binding's per-task cost with C's in one run.
 *
 * The workload.  A store (copy_engine host, latency backend with no latency,
 * /dev/shm) on a fresh cache of `blocks` blocks x `spb` shards of `shard_kib`
 * KiB, each shard `tensors` equal tensors; block i's id is the integer i + 1,
 * little-endian (what the binding makes of an int).  One untimed round fills the
 * cache (owner reads); then `rounds` timed rounds load every block again into
 * one host buffer of the whole set, as one task per block (mode block) or per
 * shard (mode shard), keeping `window` tasks in flight (submit, and when the
 * window is full wait for the oldest).  Prints one line:
 *
 *   store_load driver=c variant=<v> mode=<block|shard> blocks=<n> shards_per_block=<n>
 *     shard_bytes=<n> tensors_per_shard=<n> rounds=<n> window=<n> tasks=<n>
 *     seconds=<s> gib_per_s=<..> tasks_per_s=<..>
 *
 * Exit 1 on any failed call (after printing it).
 *
 * usage: store_load_bench <unique_id> <mode> <blocks> <spb> <shard_kib> <tensors>
 *                         <rounds> <window>
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kvshare.h"

struct bench {
	struct kvs_store *store;
	uint32_t blocks, spb, tensors, window, per_task;
	uint64_t shard_bytes;
	uint8_t *dst;
	struct kvs_store_shard *shards; /* every (block, shard) of the set, in order */
	struct kvs_store_tensor *tv;
	uint64_t *ring;                 /* task ids in flight, oldest first */
};

static int fail(const char *what, int rc)
{
	fprintf(stderr, "store_load_bench: %s: %d (%s)\n", what, rc, kvs_strerror(rc));
	return 1;
}

static int wait_task(struct bench *b, uint64_t id)
{
	int rc = kvs_store_wait(b->store, id, 60 * 1000000000ull);

	return rc ? fail("kvs_store_wait", rc == 1 ? -ETIMEDOUT : rc) : 0;
}

/* One pass over the set: tasks of per_task shards, window in flight. */
static int round_run(struct bench *b, uint64_t *tasks)
{
	uint32_t n = b->blocks * b->spb, head = 0, inflight = 0;

	for (uint32_t i = 0; i < n; i += b->per_task) {
		uint64_t id;
		int rc;

		if (inflight == b->window) {
			if (wait_task(b, b->ring[head % b->window]))
				return 1;
			head++;
			inflight--;
		}
		rc = kvs_store_load(b->store, &b->shards[i], b->per_task, &id);
		if (rc)
			return fail("kvs_store_load", rc);
		b->ring[(head + inflight) % b->window] = id;
		inflight++;
		++*tasks;
	}
	for (; inflight; inflight--, head++)
		if (wait_task(b, b->ring[head % b->window]))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct bench b = { 0 };
	char kv[512], err[256] = "";
	uint32_t rounds;
	uint64_t tasks = 0, t0, t1;
	int rc;

	if (argc != 9) {
		fprintf(stderr, "usage: store_load_bench <unique_id> <block|shard> <blocks> <spb> "
			"<shard_kib> <tensors> <rounds> <window>\n");
		return 2;
	}
	b.blocks = (uint32_t)atoi(argv[3]);
	b.spb = (uint32_t)atoi(argv[4]);
	b.shard_bytes = (uint64_t)atoi(argv[5]) * 1024;
	b.tensors = (uint32_t)atoi(argv[6]);
	rounds = (uint32_t)atoi(argv[7]);
	b.window = (uint32_t)atoi(argv[8]);
	b.per_task = strcmp(argv[2], "shard") ? b.spb : 1;
	if (!b.blocks || !b.spb || !b.shard_bytes || !b.tensors || !rounds || !b.window ||
	    b.shard_bytes % b.tensors)
		return fail("arguments", -EINVAL);

	kvs_store_config_init(&cfg);
	snprintf(kv, sizeof(kv),
		 "unique_id=%s,device_id=0,shard_size=%" PRIu64 ",block_size=%" PRIu64
		 ",tensor_size=%" PRIu64 ",cache_buffer_capacity_gb=%.6f,backend=latency,"
		 "latency_us=0,copy_engine=host,hugetlb=off,waiting_queue_depth=%u",
		 argv[1], b.shard_bytes, b.shard_bytes * b.spb, b.shard_bytes / b.tensors,
		 (double)(b.shard_bytes * b.spb * b.blocks) / (1u << 30) * 1.01, b.window);
	rc = kvs_store_config_parse(&cfg, kv, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "store_load_bench: %s\n", err);
		return fail("kvs_store_config_parse", rc);
	}
	rc = kvs_store_open(&cfg, &b.store);
	if (rc)
		return fail("kvs_store_open", rc);

	uint32_t n = b.blocks * b.spb;
	b.dst = calloc(n, b.shard_bytes);
	b.shards = calloc(n, sizeof(*b.shards));
	b.tv = calloc((size_t)n * b.tensors, sizeof(*b.tv));
	b.ring = calloc(b.window, sizeof(*b.ring));
	if (!b.dst || !b.shards || !b.tv || !b.ring)
		return fail("calloc", -ENOMEM);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t id = i / b.spb + 1;
		uint8_t *shard = b.dst + (uint64_t)i * b.shard_bytes;

		memcpy(b.shards[i].block.bytes, &id, sizeof(id)); /* little-endian, high half 0 */
		b.shards[i].shard = i % b.spb;
		b.shards[i].tensor_count = b.tensors;
		b.shards[i].tensors = &b.tv[(size_t)i * b.tensors];
		for (uint32_t t = 0; t < b.tensors; t++)
			b.tv[(size_t)i * b.tensors + t].addr =
				(uint64_t)(uintptr_t)(shard + t * (b.shard_bytes / b.tensors));
	}

	rc = round_run(&b, &tasks); /* fill the cache */
	tasks = 0;
	t0 = kvs_now_ns();
	for (uint32_t r = 0; !rc && r < rounds; r++)
		rc = round_run(&b, &tasks);
	t1 = kvs_now_ns();
	if (!rc) {
		double s = (double)(t1 - t0) / 1e9;
		double bytes = (double)rounds * n * b.shard_bytes;

		printf("store_load driver=c variant=%s mode=%s blocks=%u shards_per_block=%u "
		       "shard_bytes=%" PRIu64 " tensors_per_shard=%u rounds=%u window=%u "
		       "tasks=%" PRIu64 " seconds=%.4f gib_per_s=%.3f tasks_per_s=%.0f\n",
		       kvs_variant(), b.per_task == 1 ? "shard" : "block", b.blocks, b.spb,
		       b.shard_bytes, b.tensors, rounds, b.window, tasks, s,
		       bytes / s / (1u << 30), (double)tasks / s);
	}
	kvs_store_close(b.store);
	free(b.ring);
	free(b.tv);
	free(b.shards);
	free(b.dst);
	return rc;
}
