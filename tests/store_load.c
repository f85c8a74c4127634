/*
 * tests/store_load.c — the store in one process (host copy engine):
 *
 *   round trips   dump -> posix -> load on a NEW cache (cold): one tensor per
 *                 shard, several, variable sizes (tensor_size_list, configured by
 *                 a key=value string), layer-wise (one task per layer for dump and
 *                 load), and as rank 3 of 4 (rotated visiting order: the block's
 *                 writer still writes every shard); every dumped block is in the
 *                 backend; every byte checked; the cold load reads each shard once
 *                 (owner_reads), a second load reads nothing (all load_hits), a
 *                 second dump is deduplicated (dump_dedup, no backend write);
 *   none          dump then load from the cache (no backend read); an absent
 *                 block fails -ENOENT (submit failure), its neighbours still load;
 *   latency       loads equal kvs_pattern_fill;
 *   faults        fault backend at 100% (-EIO, slots FAILED, not hung, retried by
 *                 the next load) and at 10% errors+short reads over many tasks
 *                 (failed tasks say -EIO, the others carry the right bytes);
 *   head slices   four simulated ranks each copy a quarter of every tensor of
 *                 one stored block; bad slices and other bad tasks -EINVAL;
 *   tasks         -EAGAIN at waiting_queue_depth; a task past timeout_ms ends
 *                 -ETIMEDOUT at its deadline while its read drains (the slot
 *                 pinned until then), leaks nothing; check 1
 *                 while running; wait with a short timeout 1; unknown ids -ENOENT;
 *                 closing a store with a task running drains it; a task reports
 *                 only once its slots are released (hits and failed reads); a
 *                 cached dump submitted behind a load of 128 slow reads (the
 *                 backend's default queue depth) completes while that load
 *                 still runs (before: the reads' shards filled the copier's
 *                 working set and the dump waited for them);
 *   watcher       lookup / lookup_prefix from a watcher agree with the rank (in
 *                 cache, only in the backend after eviction or on a fresh cache,
 *                 absent); load/dump/prefetch from a watcher -EOPNOTSUPP;
 *   stats         the counters move as documented (prefetch, loads, hits, dumps,
 *                 dedup, latency histogram); the node total equals the one rank;
 *                 the cache's hits count loads only, a dump's gets are dump_gets;
 *   refused       a backend that refuses every read and write at submit: each
 *                 refusal is an attempt (owner_reads, backend_writes) and its
 *                 failure (read_errors, write_errors), never an error without
 *                 its attempt (was: owner reads 0 with read errors 2).
 *
 * Content is kvs_pattern_fill() of (block, shard, offset) (tests/store_util.h).
 * The fault generator's seed is fixed and printed.
 */
#include <stdlib.h>

#include "store_util.h"

#define SHARD (16 * 1024)
#define WAIT_MS 20000
#define FAULT_SEED 0xfa17u

/* ------------------------------------------------------------------------ */
/* Round trips through the posix backend                                     */

struct rt_opts {
	const char *tag;
	uint32_t tag_id;      /* block-id tag */
	uint32_t nblocks;
	uint32_t spb;
	uint32_t tcount;      /* tensors per shard (equal sizes) */
	bool tensor_list;     /* {32768, 4096}, configured by tensor_size_list */
	bool layerwise;       /* one task per shard index (layer), dump and load */
	int32_t device;       /* rank r of local_rank_size lrs (0 and 1 unless set):
				 its dispatcher visits a task's shards from slice r */
	uint32_t lrs;
};

/* A config for the round trip: by fields, or (tensor_list) all by string. */
static kvs_test_rc rt_cfg(struct kvs_store_config *cfg, const struct rt_opts *o, const char *uid,
			  const char *root, uint64_t *shard_bytes)
{
	if (o->tensor_list) {
		char kv[1024];

		*shard_bytes = 32768 + 4096;
		kvs_store_config_init(cfg);
		snprintf(kv, sizeof(kv),
			 "unique_id=%s,device_id=0,local_rank_size=1,shard_size=%llu,"
			 "tensor_size_list=32768:4096,block_size=%llu,cache_buffer_capacity_gb=0.05,"
			 "hugetlb=off,backend=posix,backend_roots=%s,fsync=0,copy_engine=host,"
			 "timeout_ms=20000",
			 uid, (unsigned long long)*shard_bytes,
			 (unsigned long long)(*shard_bytes * o->spb), root);
		KVS_TRY(st_parse(cfg, kv));
		cfg->cache.attach_timeout_ns = 20 * ST_SEC;
		cfg->log = st_log;
		return KVS_TEST_PASS;
	}
	*shard_bytes = SHARD;
	st_cfg(cfg, uid, o->device, SHARD, (uint64_t)o->nblocks * o->spb + 8, o->spb);
	cfg->cache.local_rank_size = o->lrs ? o->lrs : 1;
	st_posix(cfg, root);
	if (o->tcount > 1)
		cfg->tensor_bytes = SHARD / o->tcount;
	return KVS_TEST_PASS;
}

static kvs_test_rc rt_tasks(const struct rt_opts *o, uint64_t shard_bytes, struct st_task *t,
			    uint32_t *ntasks)
{
	static const uint64_t list[2] = { 32768, 4096 };
	uint32_t per = o->layerwise ? o->nblocks : o->nblocks * o->spb;

	*ntasks = o->layerwise ? o->spb : 1;
	for (uint32_t k = 0; k < *ntasks; k++) {
		if (o->tensor_list)
			KVS_TRY(st_task_init(&t[k], per, 2, list, NULL, NULL));
		else
			KVS_TRY(st_task_whole(&t[k], per, o->tcount, shard_bytes));
		for (uint32_t i = 0; i < per; i++) {
			uint32_t blk = o->layerwise ? i : i / o->spb;
			uint32_t sh = o->layerwise ? k : i % o->spb;
			struct kvs_block_id b = st_block(o->tag_id, blk);

			st_task_set(&t[k], i, &b, sh);
		}
	}
	return KVS_TEST_PASS;
}

/* Submit every task (dump or load), then wait for each. */
static kvs_test_rc rt_run(struct kvs_store *s, struct st_task *t, uint32_t ntasks, bool dump)
{
	uint64_t ids[16];

	for (uint32_t k = 0; k < ntasks; k++) {
		int rc;

		if (dump) {
			st_task_fill(&t[k]);
			rc = kvs_store_dump(s, t[k].shards, t[k].n, NULL, &ids[k]);
		} else {
			st_task_poison(&t[k]);
			rc = kvs_store_load(s, t[k].shards, t[k].n, &ids[k]);
		}
		if (rc)
			KVS_FAILF("%s task %u: %d (%s); log: %s", dump ? "dump" : "load", k, rc,
				  kvs_strerror(rc), st_last_log);
	}
	/* tasks complete in any order: wait for them last to first */
	for (uint32_t k = ntasks; k-- > 0;) {
		KVS_TRY(st_wait_expect(s, ids[k], WAIT_MS, 0, dump ? "dump" : "load"));
		if (!dump)
			KVS_TRY(st_task_verify(&t[k]));
	}
	return KVS_TEST_PASS;
}

/* Every dumped block is in the backend: a watcher of a fresh cache of the same
 * geometry on the root finds them all (the posix backend shows a block once all
 * its shards are in, and only to a reader of the geometry it was dumped with). */
static kvs_test_rc rt_backend_has(const struct rt_opts *o, const char *root)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct kvs_block_id blocks[64];
	bool hits[64];
	char uid[96], tag[64];
	uint64_t shard_bytes;
	int n;

	KVS_CHECK(o->nblocks <= 64);
	snprintf(tag, sizeof(tag), "%s_w", o->tag);
	KVS_TRY(rt_cfg(&cfg, o, kvs_test_unique_id(uid, sizeof(uid), tag), root, &shard_bytes));
	cfg.cache.device_id = -1;
	KVS_TRY(st_open(&cfg, &w));
	for (uint32_t i = 0; i < o->nblocks; i++)
		blocks[i] = st_block(o->tag_id, i);
	n = kvs_store_lookup(w, blocks, o->nblocks, hits);
	kvs_store_close(w);
	for (uint32_t i = 0; i < o->nblocks; i++)
		if (!hits[i])
			KVS_FAILF("block %u not in the backend after its durable dump (%d of %u blocks)",
				  i, n, o->nblocks);
	KVS_CHECK_EQ(n, o->nblocks);
	return KVS_TEST_PASS;
}

static kvs_test_rc roundtrip(const struct rt_opts *o)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL;
	struct kvs_store_stats st, st2;
	struct st_task t[16];
	uint32_t ntasks = 0;
	uint64_t shard_bytes = 0, shards = (uint64_t)o->nblocks * o->spb;
	char root[256], uid[96], tag[64];
	kvs_test_rc out = KVS_TEST_FAIL;

	printf("  %u blocks x %u shards, %u tensors%s%s, device %d of %u\n", o->nblocks, o->spb,
	       o->tensor_list ? 2 : o->tcount, o->tensor_list ? " {32768, 4096}" : "",
	       o->layerwise ? ", one task per layer" : "", o->device, o->lrs ? o->lrs : 1);
	KVS_TRY(st_root_init(root, sizeof(root), o->tag));
	snprintf(tag, sizeof(tag), "%s_a", o->tag);
	kvs_test_unique_id(uid, sizeof(uid), tag);
	KVS_TRY(rt_cfg(&cfg, o, uid, root, &shard_bytes));
	KVS_TRY(st_open(&cfg, &a));
	KVS_TRY(rt_tasks(o, shard_bytes, t, &ntasks));

	/* dump into cache A and the backend */
	KVS_TRY(rt_run(a, t, ntasks, true));
	KVS_TRY(st_stats(a, st_rank(a), &st));
	st_print("dump", &st);
	KVS_CHECK_EQ(st.tasks_dump, ntasks);
	KVS_CHECK_EQ(st.shards_dumped, shards);
	KVS_CHECK_EQ(st.dump_dedup, 0);
	KVS_CHECK_EQ(st.write_errors, 0);
	KVS_CHECK_EQ(st.owner_reads, 0);
	KVS_TRY(rt_backend_has(o, root));
	KVS_CHECK_EQ(st.backend_writes, shards); /* each shard written once */
	/* the same dump again: every shard READY, skipped, nothing written */
	KVS_TRY(rt_run(a, t, ntasks, true));
	KVS_TRY(st_stats(a, st_rank(a), &st2));
	KVS_CHECK_EQ(st2.tasks_dump, 2 * ntasks);
	KVS_CHECK_EQ(st2.shards_dumped, shards);
	KVS_CHECK_EQ(st2.dump_dedup, shards);
	KVS_CHECK_EQ(st2.backend_writes, shards);
	KVS_TRY(st_cache_clean(a, o->spb == 1));
	kvs_store_close(a);
	a = NULL;

	/* a new cache on the same root: every shard comes from the backend once */
	snprintf(tag, sizeof(tag), "%s_b", o->tag);
	kvs_test_unique_id(uid, sizeof(uid), tag);
	KVS_TRY(rt_cfg(&cfg, o, uid, root, &shard_bytes));
	KVS_TRY(st_open(&cfg, &b));
	KVS_TRY(rt_run(b, t, ntasks, false));
	KVS_TRY(st_stats(b, st_rank(b), &st));
	st_print("cold load", &st);
	KVS_CHECK_EQ(st.tasks_load, ntasks);
	KVS_CHECK_EQ(st.owner_reads, shards);
	KVS_CHECK_EQ(st.read_errors, 0);
	KVS_CHECK_EQ(st.load_hits, 0);
	KVS_CHECK_EQ(st.shards_loaded, shards);
	KVS_CHECK_EQ(st.tasks_failed, 0);
	/* the same blocks again: all hits, the backend sees nothing more */
	KVS_TRY(rt_run(b, t, ntasks, false));
	KVS_TRY(st_stats(b, st_rank(b), &st2));
	st_print("warm load", &st2);
	KVS_CHECK_EQ(st2.owner_reads, shards);
	KVS_CHECK_EQ(st2.load_hits, shards);
	KVS_CHECK_EQ(st2.shards_loaded, 2 * shards);
	KVS_CHECK_EQ(st2.tasks_load, 2 * ntasks);
	KVS_TRY(st_cache_clean(b, o->spb == 1));
	out = KVS_TEST_PASS;
	kvs_store_close(b);
	for (uint32_t k = 0; k < ntasks; k++)
		st_task_free(&t[k]);
	st_root_fini(root);
	return out;
}

static kvs_test_rc test_roundtrip_one_tensor(void)
{
	struct rt_opts o = { .tag = "rt1", .tag_id = 1, .nblocks = 8, .spb = 1, .tcount = 1 };

	return roundtrip(&o);
}

static kvs_test_rc test_roundtrip_tensors(void)
{
	struct rt_opts o = { .tag = "rt8", .tag_id = 2, .nblocks = 6, .spb = 2, .tcount = 8 };

	return roundtrip(&o);
}

static kvs_test_rc test_roundtrip_tensor_list(void)
{
	struct rt_opts o = { .tag = "rtl", .tag_id = 3, .nblocks = 5, .spb = 2, .tensor_list = true };

	return roundtrip(&o);
}

/* Rank 3 of 4 visits a block's shards 3, 0, 1, 2: it owns shard 0, so it is the
 * block's writer and must write every shard, whichever it visited first. */
static kvs_test_rc test_roundtrip_rotated(void)
{
	struct rt_opts o = { .tag = "rtrot", .tag_id = 5, .nblocks = 4, .spb = 4, .tcount = 1,
			     .device = 3, .lrs = 4 };

	return roundtrip(&o);
}

static kvs_test_rc test_roundtrip_layerwise(void)
{
	struct rt_opts o = { .tag = "rtlw", .tag_id = 4, .nblocks = 6, .spb = 4, .tcount = 2,
			     .layerwise = true };

	return roundtrip(&o);
}

/* ------------------------------------------------------------------------ */
/* Backend none: the cache is the only copy                                  */

static kvs_test_rc test_backend_none(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t, miss, mixed;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "none"), 0, SHARD, 32, 2);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 8, 1, SHARD));
	for (uint32_t i = 0; i < 8; i++) {
		struct kvs_block_id b = st_block(10, i / 2);
		st_task_set(&t, i, &b, i % 2);
	}
	KVS_TRY(st_dump(s, &t, WAIT_MS));
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("none", &st);
	KVS_CHECK_EQ(st.owner_reads, 0);
	KVS_CHECK_EQ(st.load_hits, 8);
	KVS_CHECK_EQ(st.shards_loaded, 8);
	KVS_CHECK_EQ(st.shards_dumped, 8);

	/* an absent block: the read fails at submit, the task says -ENOENT */
	KVS_TRY(st_task_whole(&miss, 2, 1, SHARD));
	for (uint32_t i = 0; i < 2; i++) {
		struct kvs_block_id b = st_block(10, 100);
		st_task_set(&miss, i, &b, i);
	}
	KVS_TRY(st_load(s, &miss, WAIT_MS, -ENOENT));
	/* a task mixing cached and absent shards fails; the cached ones are intact */
	KVS_TRY(st_task_whole(&mixed, 3, 1, SHARD));
	{
		struct kvs_block_id b0 = st_block(10, 0), b1 = st_block(10, 101), b3 = st_block(10, 3);
		st_task_set(&mixed, 0, &b0, 1);
		st_task_set(&mixed, 1, &b1, 0);
		st_task_set(&mixed, 2, &b3, 0);
	}
	KVS_TRY(st_load(s, &mixed, WAIT_MS, -ENOENT));
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("none after misses", &st);
	KVS_CHECK_EQ(st.tasks_failed, 2);
	/* the absent shards' reads, refused at submit: attempted and failed */
	KVS_CHECK(st.read_errors >= 2 && st.read_errors <= 3);
	KVS_CHECK_EQ(st.owner_reads, st.read_errors);
	/* the failed task's cached shards may be visited or not (2 at most) */
	KVS_CHECK(st.load_hits >= 8 + 8 && st.load_hits <= 8 + 2 + 8);
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);
	st_task_free(&t);
	st_task_free(&miss);
	st_task_free(&mixed);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Latency backend: the content of common/pattern.h                          */

static kvs_test_rc test_latency_content(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "lat"), 0, SHARD, 64, 4);
	st_latency(&cfg, 2 * ST_MS);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 32, 1, SHARD));
	for (uint32_t i = 0; i < 32; i++) {
		struct kvs_block_id b = st_block(11, i / 4);
		st_task_set(&t, i, &b, i % 4);
	}
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("latency", &st);
	KVS_CHECK_EQ(st.owner_reads, 32);
	KVS_CHECK_EQ(st.shards_loaded, 32);
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Faults                                                                    */

/* Every read fails (-EIO): every task fails, the slots are FAILED (not
 * LOADING, not pinned), and the next load of the same blocks reads again. */
static kvs_test_rc test_fault_all_eio(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct kvs_cache_stats cs;
	struct st_task t[4];
	char uid[96], kv[256];

	printf("  fault seed %u\n", FAULT_SEED);
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "eio"), 0, SHARD, 32, 2);
	snprintf(kv, sizeof(kv), "backend=latency,latency_us=1000,fault_error_ppm=1000000,fault_seed=%u",
		 FAULT_SEED);
	KVS_TRY(st_parse(&cfg, kv));
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < 4; k++) {
		KVS_TRY(st_task_whole(&t[k], 2, 1, SHARD));
		for (uint32_t i = 0; i < 2; i++) {
			struct kvs_block_id b = st_block(12, k);
			st_task_set(&t[k], i, &b, i);
		}
	}
	for (int round = 0; round < 2; round++) {
		uint64_t ids[4];

		for (uint32_t k = 0; k < 4; k++)
			KVS_CHECK_OK(kvs_store_load(s, t[k].shards, 2, &ids[k]));
		for (uint32_t k = 0; k < 4; k++)
			KVS_TRY(st_wait_expect(s, ids[k], WAIT_MS, -EIO, "load (fault 100%)"));
		KVS_TRY(st_stats(s, st_rank(s), &st));
		st_print("eio", &st);
		KVS_CHECK_EQ(st.owner_reads, 8 * (round + 1));
		KVS_CHECK_EQ(st.read_errors, 8 * (round + 1));
		KVS_CHECK_EQ(st.tasks_failed, 4 * (round + 1));
		KVS_CHECK_EQ(st.shards_loaded, 0);
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
		KVS_TRY(st_cache_clean(s, true));
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
		KVS_CHECK_EQ(cs.slots_failed, 8);
		KVS_CHECK_EQ(cs.slots_loading, 0);
		KVS_CHECK_EQ(cs.slots_pinned, 0);
	}
	kvs_store_close(s);
	for (uint32_t k = 0; k < 4; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* 5% errors + 5% short reads over many two-shard tasks, all queued at once:
 * failed tasks say -EIO, the others carry the right bytes; nothing hangs. */
static kvs_test_rc test_fault_ten_percent(void)
{
	enum { NT = 150 };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	static struct st_task t[NT];
	uint64_t ids[NT];
	int failed = 0;
	char uid[96], kv[256];

	printf("  fault seed %u, %d tasks x 2 shards, 5%% errors + 5%% short reads\n", FAULT_SEED, NT);
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "f10"), 0, SHARD, 2 * NT + 16, 2);
	snprintf(kv, sizeof(kv),
		 "backend=latency,latency_us=300,fault_error_ppm=50000,fault_short_ppm=50000,"
		 "fault_seed=%u,waiting_queue_depth=%d",
		 FAULT_SEED, NT + 1);
	KVS_TRY(st_parse(&cfg, kv));
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < NT; k++) {
		KVS_TRY(st_task_whole(&t[k], 2, 1, SHARD));
		for (uint32_t i = 0; i < 2; i++) {
			struct kvs_block_id b = st_block(13, k);
			st_task_set(&t[k], i, &b, i);
		}
		KVS_CHECK_OK(kvs_store_load(s, t[k].shards, 2, &ids[k]));
	}
	for (uint32_t k = 0; k < NT; k++) {
		int rc = st_wait(s, ids[k], WAIT_MS);

		if (rc == 1)
			KVS_FAILF("task %u still running after %d ms", k, WAIT_MS);
		if (rc == 0) {
			KVS_TRY(st_task_verify(&t[k]));
		} else if (rc == -EIO) {
			failed++;
		} else {
			KVS_FAILF("task %u: %d (%s), want 0 or -EIO", k, rc, kvs_strerror(rc));
		}
	}
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("fault 10%", &st);
	printf("  %d of %d tasks failed\n", failed, NT);
	/* P(shard fails) = 0.1: about 19% of tasks, seeded */
	KVS_CHECK(failed >= 5 && failed <= NT / 2);
	KVS_CHECK_EQ(st.tasks_failed, failed);
	KVS_CHECK_EQ(st.owner_reads, 2 * NT);
	KVS_CHECK(st.read_errors >= (uint64_t)failed && st.read_errors <= 2 * (uint64_t)failed);
	/* a failed task's good shard may or may not have been copied */
	KVS_CHECK(st.shards_loaded >= 2 * (NT - (uint64_t)failed));
	KVS_CHECK(st.shards_loaded <= 2 * NT - st.read_errors);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	for (uint32_t k = 0; k < NT; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Head slices                                                               */

#define HS_TENSOR 4096

static kvs_test_rc test_head_slices(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	static const uint64_t tsz[2] = { HS_TENSOR, HS_TENSOR };
	struct st_task q[4], tail;
	char uid[96];
	uint64_t task = 0;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "heads"), 0, 2 * HS_TENSOR, 16, 1);
	st_latency(&cfg, 1 * ST_MS);
	cfg.tensor_bytes = HS_TENSOR; /* two tensors of 4 KiB per shard */
	KVS_TRY(st_open(&cfg, &s));
	/* four "ranks", each copying its quarter of both tensors of 4 blocks */
	for (uint32_t r = 0; r < 4; r++) {
		uint64_t off[2] = { r * 1024, r * 1024 }, len[2] = { 1024, 1024 };

		KVS_TRY(st_task_init(&q[r], 4, 2, tsz, off, len));
		for (uint32_t i = 0; i < 4; i++) {
			struct kvs_block_id b = st_block(14, i);
			st_task_set(&q[r], i, &b, 0);
		}
		KVS_TRY(st_load(s, &q[r], WAIT_MS, 0));
	}
	/* len 0: from the offset to the end of the stored tensor */
	{
		uint64_t off[2] = { 3072, 2048 }, len[2] = { 0, 0 };

		KVS_TRY(st_task_init(&tail, 4, 2, tsz, off, len));
		for (uint32_t i = 0; i < 4; i++) {
			struct kvs_block_id b = st_block(14, i);
			st_task_set(&tail, i, &b, 0);
		}
		KVS_TRY(st_load(s, &tail, WAIT_MS, 0));
	}
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("slices", &st);
	KVS_CHECK_EQ(st.owner_reads, 4);
	KVS_CHECK_EQ(st.load_hits, 16);
	KVS_CHECK_EQ(st.copy_bytes, 4 * 4 * 2 * 1024 + 4 * (1024 + 2048));

	/* bad slices: -EINVAL at submit, nothing queued */
	struct kvs_store_tensor bad[2];
	struct kvs_store_shard sh = { .block = st_block(14, 0), .shard = 0, .tensor_count = 2,
				      .tensors = bad };
	static unsigned char sink[2 * HS_TENSOR + 64];
	const struct {
		uint64_t off, len;
	} cases[] = {
		{ 3072, 2048 },          /* past the end */
		{ 0, HS_TENSOR + 1 },    /* longer than the tensor */
		{ HS_TENSOR + 1, 0 },    /* offset past the end, to the end */
		{ HS_TENSOR, 1 },        /* starts at the end */
		{ UINT64_MAX - 10, 20 }, /* offset + len overflows */
	};
	for (size_t c = 0; c < KVS_ARRAY_LEN(cases); c++) {
		bad[0] = (struct kvs_store_tensor){ (uintptr_t)sink, 0, 0 };
		bad[1] = (struct kvs_store_tensor){ (uintptr_t)(sink + HS_TENSOR), cases[c].off,
						    cases[c].len };
		task = 0;
		int rc = kvs_store_load(s, &sh, 1, &task);
		if (rc != -EINVAL)
			KVS_FAILF("slice {%llu, %llu} of a %d-byte tensor: got %d (%s), want -EINVAL",
				  (unsigned long long)cases[c].off, (unsigned long long)cases[c].len,
				  HS_TENSOR, rc, kvs_strerror(rc));
	}
	/* other bad tasks: n = 0, shard out of range, tensor count not the cache's */
	bad[0] = (struct kvs_store_tensor){ (uintptr_t)sink, 0, 0 };
	bad[1] = (struct kvs_store_tensor){ (uintptr_t)(sink + HS_TENSOR), 0, 0 };
	KVS_CHECK_ERR(kvs_store_load(s, &sh, 0, &task), -EINVAL);
	sh.shard = 1;
	KVS_CHECK_ERR(kvs_store_load(s, &sh, 1, &task), -EINVAL);
	sh.shard = 0;
	sh.tensor_count = 1;
	KVS_CHECK_ERR(kvs_store_load(s, &sh, 1, &task), -EINVAL);
	sh.tensor_count = 3;
	KVS_CHECK_ERR(kvs_store_load(s, &sh, 1, &task), -EINVAL);
	sh.tensor_count = 2;
	/* dumps take whole tensors only */
	bad[1].offset = 1024;
	bad[1].len = 1024;
	KVS_CHECK_ERR(kvs_store_dump(s, &sh, 1, NULL, &task), -EINVAL);
	bad[1].offset = 0;
	bad[1].len = HS_TENSOR; /* whole, spelled out: fine */
	KVS_CHECK_OK(kvs_store_dump(s, &sh, 1, NULL, &task));
	KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "whole-tensor dump"));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.tasks_load, 5);
	KVS_CHECK_EQ(st.tasks_dump, 1);
	KVS_CHECK_EQ(st.dump_dedup, 1);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	for (uint32_t r = 0; r < 4; r++)
		st_task_free(&q[r]);
	st_task_free(&tail);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Tasks: queue depth, timeouts, check/wait, ids                             */

static kvs_test_rc one_block_task(struct st_task *t, uint32_t tag, uint64_t n)
{
	struct kvs_block_id b = st_block(tag, n);

	KVS_TRY(st_task_whole(t, 1, 1, SHARD));
	st_task_set(t, 0, &b, 0);
	return KVS_TEST_PASS;
}

/* A load of 128 shards whose reads take 300 ms (latency backend: all of them
 * would be in flight at once, the backend's default depth), then a cached dump
 * of another block: the dump completes while the load still runs.  The owned
 * reads in flight are capped (KVS_STORE_OWNED_READS_MAX), so the copier always
 * has room for shards that are ready. */
static kvs_test_rc test_slow_reads_leave_room(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task l, d;
	uint64_t load = 0;
	char uid[96];
	struct kvs_block_id b;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "room"), 0, SHARD, 512, 16);
	/* one rank: a pin budget of 256 (slots / 2), room for all 128 reads */
	KVS_TRY(st_parse(&cfg, "backend=latency,latency_us=300000,dump_wait=cached,"
			       "local_rank_size=1"));
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&l, 128, 1, SHARD));
	for (uint32_t i = 0; i < 128; i++) {
		b = st_block(40, i / 16);
		st_task_set(&l, i, &b, i % 16);
	}
	KVS_TRY(st_task_whole(&d, 16, 1, SHARD));
	b = st_block(41, 0);
	for (uint32_t i = 0; i < 16; i++)
		st_task_set(&d, i, &b, i);
	KVS_CHECK_OK(kvs_store_load(s, l.shards, l.n, &load));
	KVS_TRY(st_dump(s, &d, WAIT_MS));
	KVS_CHECK_EQ(kvs_store_check(s, load), 1); /* the dump was not held behind the reads */
	KVS_TRY(st_wait_expect(s, load, WAIT_MS, 0, "load"));
	KVS_TRY(st_task_verify(&l)); /* the latency backend's pattern */
	kvs_store_close(s);
	st_task_free(&l);
	st_task_free(&d);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_queue_full(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[3];
	uint64_t a = 0, b = 0, c = 0, x = 0;
	char uid[96];
	struct kvs_block_id pb = st_block(15, 9);

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "qfull"), 0, SHARD, 16, 1);
	st_latency(&cfg, 300 * ST_MS);
	cfg.waiting_queue_depth = 2;
	KVS_TRY(st_open(&cfg, &s));
	for (int k = 0; k < 3; k++)
		KVS_TRY(one_block_task(&t[k], 15, (uint64_t)k));
	KVS_CHECK_OK(kvs_store_load(s, t[0].shards, 1, &a));
	KVS_CHECK_OK(kvs_store_load(s, t[1].shards, 1, &b));
	KVS_CHECK_ERR(kvs_store_load(s, t[2].shards, 1, &c), -EAGAIN);
	KVS_CHECK_ERR(kvs_store_dump(s, t[2].shards, 1, NULL, &x), -EAGAIN);
	KVS_CHECK_ERR(kvs_store_prefetch(s, &pb, 1, &x), -EAGAIN);
	KVS_CHECK_EQ(kvs_store_check(s, a), 1); /* 300 ms latency: still running */
	KVS_TRY(st_wait_expect(s, a, WAIT_MS, 0, "first"));
	KVS_TRY(st_task_verify(&t[0]));
	KVS_CHECK_OK(kvs_store_load(s, t[2].shards, 1, &c)); /* a's place is free */
	KVS_CHECK_ERR(kvs_store_load(s, t[0].shards, 1, &x), -EAGAIN);
	KVS_TRY(st_wait_expect(s, b, WAIT_MS, 0, "second"));
	KVS_TRY(st_wait_expect(s, c, WAIT_MS, 0, "third"));
	KVS_TRY(st_task_verify(&t[1]));
	KVS_TRY(st_task_verify(&t[2]));
	struct kvs_store_stats st;
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.tasks_load, 3); /* refused submits are not tasks */
	KVS_CHECK_EQ(st.tasks_dump, 0);
	KVS_CHECK_EQ(st.tasks_prefetch, 0);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	for (int k = 0; k < 3; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* timeout_ms 50 against a 500 ms read: the task reports -ETIMEDOUT at its
 * deadline (not when the read drains), the slot stays pinned by the read until
 * it completes (never re-keyed under a transfer), then nothing is leaked, and
 * the read's bytes serve the next load. */
static kvs_test_rc test_task_timeout(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct kvs_cache_stats cs;
	struct st_task t;
	uint64_t task = 0, t0, elapsed;
	char uid[96];
	int rc;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "tmo"), 0, SHARD, 16, 1);
	KVS_TRY(st_parse(&cfg, "backend=latency,latency_us=500000,timeout_ms=50,waiting_queue_depth=1"));
	KVS_CHECK_EQ(cfg.timeout_ns, 50 * ST_MS);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(one_block_task(&t, 16, 0));
	t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_store_load(s, t.shards, 1, &task));
	KVS_CHECK_EQ(kvs_store_check(s, task), 1);
	rc = st_wait(s, task, WAIT_MS);
	elapsed = kvs_now_ns() - t0;
	printf("  timed-out task reported %d (%s) after %llu ms\n", rc, kvs_strerror(rc),
	       (unsigned long long)(elapsed / ST_MS));
	KVS_CHECK_ERR(rc, -ETIMEDOUT);
	KVS_CHECK(elapsed < 400 * ST_MS); /* at its deadline, not after the 500 ms read */
	KVS_CHECK_ERR(kvs_store_check(s, task), -ENOENT); /* reaped */
	/* the read still drains into the slot: pinned until then */
	KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
	KVS_CHECK_EQ(cs.slots_pinned, 1);
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("timeout", &st);
	KVS_CHECK_EQ(st.tasks_timedout, 1);
	KVS_CHECK_EQ(st.tasks_failed, 1);
	KVS_CHECK_EQ(st.owner_reads, 1);
	KVS_TRY(st_cache_clean(s, true)); /* waits (bounded) for the drain */
	/* the queue place is back (depth 1), and the read filled the slot: a hit */
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.owner_reads, 1);
	KVS_CHECK_EQ(st.load_hits, 1);
	KVS_CHECK_EQ(st.tasks_timedout, 1);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_task_ids(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[2];
	uint64_t a = 0, b = 0;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "ids"), 0, SHARD, 16, 1);
	st_latency(&cfg, 300 * ST_MS);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(one_block_task(&t[0], 17, 0));
	KVS_TRY(one_block_task(&t[1], 17, 1));
	KVS_CHECK_OK(kvs_store_load(s, t[0].shards, 1, &a));
	KVS_CHECK_OK(kvs_store_load(s, t[1].shards, 1, &b));
	KVS_CHECK(a != b);
	KVS_CHECK_EQ(kvs_store_check(s, a), 1);
	KVS_CHECK_EQ(kvs_store_wait(s, a, 1 * ST_MS), 1);
	KVS_CHECK_EQ(kvs_store_wait(s, b, 0), 1);
	KVS_CHECK_EQ(kvs_store_check(s, b), 1); /* still known after a wait said 1 */
	KVS_CHECK_ERR(kvs_store_check(s, a ^ 0x5a5a0000ull), -ENOENT);
	KVS_CHECK_ERR(kvs_store_check(s, UINT64_MAX), -ENOENT);
	KVS_CHECK_ERR(kvs_store_wait(s, UINT64_MAX, 1 * ST_MS), -ENOENT);
	/* complete in any order: b first */
	KVS_TRY(st_wait_expect(s, b, WAIT_MS, 0, "b"));
	KVS_TRY(st_task_verify(&t[1]));
	KVS_CHECK_ERR(kvs_store_check(s, b), -ENOENT);
	KVS_CHECK_ERR(kvs_store_wait(s, b, 1 * ST_MS), -ENOENT);
	/* a finished meanwhile: check (not wait) reaps it */
	uint64_t deadline = kvs_deadline_after(WAIT_MS * ST_MS);
	int rc;
	while ((rc = kvs_store_check(s, a)) == 1 && kvs_now_ns() < deadline)
		usleep(1000); /* polling check itself, with a deadline */
	KVS_CHECK_ERR(rc, 0);
	KVS_TRY(st_task_verify(&t[0]));
	KVS_CHECK_ERR(kvs_store_check(s, a), -ENOENT);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t[0]);
	st_task_free(&t[1]);
	return KVS_TEST_PASS;
}

/* Closing a store with tasks still running drains them (bounded by their
 * timeout) and leaves nothing pinned for the next user of the cache. */
static kvs_test_rc test_close_running(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL, *w = NULL;
	struct st_task t;
	uint64_t task = 0;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "closerun"), 0, SHARD, 16, 1);
	st_latency(&cfg, 200 * ST_MS);
	KVS_TRY(st_open(&cfg, &s));
	cfg.cache.device_id = -1;
	KVS_TRY(st_open(&cfg, &w)); /* its mapping outlives s's close (which removes the names) */
	KVS_TRY(one_block_task(&t, 18, 0));
	KVS_CHECK_OK(kvs_store_load(s, t.shards, 1, &task));
	uint64_t t0 = kvs_now_ns();
	kvs_store_close(s);
	printf("  close took %llu ms\n", (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK(kvs_now_ns() - t0 < 10 * ST_SEC);
	KVS_TRY(st_cache_clean(w, true));
	kvs_store_close(w);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* A task reports only after its slots are released
 * (docs/store.md, "Finished once, released once"; the header's copier: "syncs
 * ..., then finishes each shard and releases its slot"): right after every
 * wait, nothing is pinned.  Hits (the copier's release) and failed reads (the
 * dispatcher's) alike, many times, since a late release is a race. */
static kvs_test_rc test_release_before_done(void)
{
	enum { N = 200 };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL, *f = NULL;
	struct kvs_cache_stats cs;
	struct st_task t;
	char uid[96], kv[160];
	int late_hit = 0, late_err = 0;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "rel"), 0, SHARD, 16, 1);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(one_block_task(&t, 21, 0));
	KVS_TRY(st_dump(s, &t, WAIT_MS));
	for (int i = 0; i < N; i++) {
		KVS_TRY(st_load(s, &t, WAIT_MS, 0));
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
		late_hit += cs.slots_pinned != 0;
	}
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "rel_eio"), 0, SHARD, 16, 1);
	snprintf(kv, sizeof(kv), "backend=latency,latency_us=0,fault_error_ppm=1000000,fault_seed=%u",
		 FAULT_SEED);
	KVS_TRY(st_parse(&cfg, kv));
	KVS_TRY(st_open(&cfg, &f));
	for (int i = 0; i < N; i++) {
		KVS_TRY(st_load(f, &t, WAIT_MS, -EIO));
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(f), KVS_STATS_NODE, &cs));
		late_err += cs.slots_pinned != 0;
	}
	printf("  slot still pinned after the task reported: %d of %d hits, %d of %d failed reads\n",
	       late_hit, N, late_err, N);
	KVS_CHECK_EQ(late_hit, 0);
	KVS_CHECK_EQ(late_err, 0);
	kvs_store_close(f);
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Watcher lookups                                                           */

/* hits of both views and the cache's own, compared with want[] */
static kvs_test_rc lookups_agree(struct kvs_store *rank, struct kvs_store *watch,
				 const struct kvs_block_id *blocks, size_t n, const bool *want_store,
				 const bool *want_cache, int want_prefix)
{
	bool hr[32], hw[32], hc[32];
	int nr, nw, nc, want = 0;

	KVS_CHECK(n <= 32);
	for (size_t i = 0; i < n; i++)
		want += want_store[i];
	nr = kvs_store_lookup(rank, blocks, n, hr);
	nw = kvs_store_lookup(watch, blocks, n, hw);
	nc = kvs_cache_lookup(kvs_store_cache(watch), blocks, n, KVS_ALL_SHARDS, hc);
	KVS_CHECK_EQ(nr, want);
	KVS_CHECK_EQ(nw, want);
	KVS_CHECK_OK(nc);
	for (size_t i = 0; i < n; i++) {
		if (hr[i] != want_store[i] || hw[i] != want_store[i] || hc[i] != want_cache[i])
			KVS_FAILF("block %zu: rank %d watcher %d cache %d, want store %d cache %d", i,
				  hr[i], hw[i], hc[i], want_store[i], want_cache[i]);
	}
	KVS_CHECK_EQ(kvs_store_lookup_prefix(rank, blocks, n), want_prefix);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(watch, blocks, n), want_prefix);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_watcher_lookup(void)
{
	enum { NB = 10 };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL, *w = NULL, *fresh = NULL;
	struct kvs_store_stats sr, sw;
	struct kvs_block_id blocks[NB], order[NB];
	bool want_store[NB], want_cache[NB];
	struct st_task first, second;
	char root[256], uid[96], uid2[96];
	uint64_t task = 0;

	KVS_TRY(st_root_init(root, sizeof(root), "watch"));
	for (int i = 0; i < NB; i++)
		blocks[i] = st_block(19, (uint64_t)i);
	/* a 4-slot cache: blocks 0..3 dumped, then 4..7 evict them */
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "watch"), 0, SHARD, 4, 1);
	st_posix(&cfg, root);
	KVS_TRY(st_open(&cfg, &s));
	cfg.cache.device_id = -1;
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(st_task_whole(&first, 4, 1, SHARD));
	KVS_TRY(st_task_whole(&second, 4, 1, SHARD));
	for (uint32_t i = 0; i < 4; i++) {
		st_task_set(&first, i, &blocks[i], 0);
		st_task_set(&second, i, &blocks[4 + i], 0);
	}
	/* nothing yet */
	for (int i = 0; i < NB; i++)
		want_store[i] = want_cache[i] = false;
	KVS_TRY(lookups_agree(s, w, blocks, NB, want_store, want_cache, 0));
	KVS_TRY(st_dump(s, &first, WAIT_MS));
	for (int i = 0; i < 4; i++)
		want_store[i] = want_cache[i] = true;
	KVS_TRY(lookups_agree(s, w, blocks, NB, want_store, want_cache, 4));
	KVS_TRY(st_dump(s, &second, WAIT_MS));
	for (int i = 0; i < 8; i++) {
		want_store[i] = true;
		want_cache[i] = i >= 4; /* 0..3 evicted: in the backend only */
	}
	KVS_TRY(lookups_agree(s, w, blocks, NB, want_store, want_cache, 8));
	/* prefix stops at the first miss: 0, 1, absent 8, 2 */
	order[0] = blocks[0];
	order[1] = blocks[5];
	order[2] = blocks[8];
	order[3] = blocks[2];
	KVS_CHECK_EQ(kvs_store_lookup_prefix(s, order, 4), 2);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(w, order, 4), 2);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(w, order + 2, 2), 0);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(w, order, 0), 0);

	/* a fresh cache on the same root: nothing cached, the backend answers */
	st_cfg(&cfg, kvs_test_unique_id(uid2, sizeof(uid2), "watch_fresh"), -1, SHARD, 4, 1);
	st_posix(&cfg, root);
	KVS_TRY(st_open(&cfg, &fresh));
	{
		bool h[NB], hc[NB];
		KVS_CHECK_EQ(kvs_store_lookup(fresh, blocks, NB, h), 8);
		KVS_CHECK_EQ(kvs_cache_lookup(kvs_store_cache(fresh), blocks, NB, KVS_ALL_SHARDS, hc), 0);
		for (int i = 0; i < NB; i++)
			KVS_CHECK_EQ(h[i], i < 8);
		KVS_CHECK_EQ(kvs_store_lookup_prefix(fresh, blocks, NB), 8);
	}

	/* a watcher moves no data */
	KVS_CHECK_ERR(kvs_store_load(w, first.shards, 1, &task), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_store_dump(w, first.shards, 1, NULL, &task), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_store_prefetch(w, blocks, 1, &task), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_store_load(fresh, first.shards, 1, &task), -EOPNOTSUPP);
	/* ... but reads the rank's counters (shared memory) */
	KVS_TRY(st_stats(s, st_rank(s), &sr));
	KVS_TRY(st_stats(w, st_rank(s), &sw));
	KVS_CHECK_EQ(sw.tasks_dump, 2);
	KVS_CHECK_EQ(sw.tasks_dump, sr.tasks_dump);
	KVS_CHECK_EQ(sw.shards_dumped, sr.shards_dumped);
	KVS_CHECK_EQ(sw.backend_writes, 8);
	KVS_TRY(st_stats(w, st_rank(w), &sw));
	KVS_CHECK_EQ(sw.tasks_load + sw.tasks_dump + sw.tasks_prefetch, 0);
	KVS_CHECK_ERR(kvs_store_stats(w, 100000, &sw), -EINVAL);

	/* the rank loads an evicted block back: read from the backend */
	KVS_TRY(st_load(s, &first, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &sr));
	KVS_CHECK_EQ(sr.owner_reads, 4);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(fresh);
	kvs_store_close(w);
	kvs_store_close(s);
	st_task_free(&first);
	st_task_free(&second);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Stats                                                                     */

static kvs_test_rc test_stats(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st, node;
	struct kvs_block_id pre[2] = { st_block(20, 0), st_block(20, 1) };
	struct st_task a, b, d, dd;
	bool hits[2];
	uint64_t task = 0, lat = 0;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "stats"), 0, SHARD, 32, 2);
	st_latency(&cfg, 100 * 1000ull);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.tasks_load + st.tasks_dump + st.tasks_prefetch + st.owner_reads, 0);

	/* prefetch 2 blocks: 4 owner reads into the cache, no copy */
	KVS_CHECK_OK(kvs_store_prefetch(s, pre, 2, &task));
	KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "prefetch"));
	KVS_CHECK_EQ(kvs_cache_lookup(kvs_store_cache(s), pre, 2, KVS_ALL_SHARDS, hits), 2);
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("prefetch", &st);
	KVS_CHECK_EQ(st.tasks_prefetch, 1);
	KVS_CHECK_EQ(st.owner_reads, 4);
	KVS_CHECK_EQ(st.shards_loaded, 4);
	KVS_CHECK_EQ(st.copy_bytes, 0);

	/* load them: all hits */
	KVS_TRY(st_task_whole(&a, 4, 1, SHARD));
	for (uint32_t i = 0; i < 4; i++)
		st_task_set(&a, i, &pre[i / 2], i % 2);
	KVS_TRY(st_load(s, &a, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("load hits", &st);
	KVS_CHECK_EQ(st.tasks_load, 1);
	KVS_CHECK_EQ(st.load_hits, 4);
	KVS_CHECK_EQ(st.owner_reads, 4);
	KVS_CHECK_EQ(st.shards_loaded, 8);
	KVS_CHECK_EQ(st.copy_bytes, 4 * SHARD);

	/* load 2 new blocks: 4 more reads */
	KVS_TRY(st_task_whole(&b, 4, 1, SHARD));
	for (uint32_t i = 0; i < 4; i++) {
		struct kvs_block_id k = st_block(20, 2 + i / 2);
		st_task_set(&b, i, &k, i % 2);
	}
	KVS_TRY(st_load(s, &b, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.tasks_load, 2);
	KVS_CHECK_EQ(st.load_hits, 4);
	KVS_CHECK_EQ(st.owner_reads, 8);
	KVS_CHECK_EQ(st.shards_loaded, 12);

	/* dump a new block: gathered and written; dump what is cached: deduplicated */
	KVS_TRY(st_task_whole(&d, 2, 1, SHARD));
	for (uint32_t i = 0; i < 2; i++) {
		struct kvs_block_id k = st_block(20, 9);
		st_task_set(&d, i, &k, i);
	}
	KVS_TRY(st_dump(s, &d, WAIT_MS));
	KVS_TRY(st_task_whole(&dd, 4, 1, SHARD));
	for (uint32_t i = 0; i < 4; i++)
		st_task_set(&dd, i, &pre[i / 2], i % 2);
	KVS_TRY(st_dump(s, &dd, WAIT_MS));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("dumps", &st);
	KVS_CHECK_EQ(st.tasks_dump, 2);
	KVS_CHECK_EQ(st.shards_dumped, 2);
	KVS_CHECK_EQ(st.dump_dedup, 4);
	KVS_CHECK_EQ(st.backend_writes, 2);
	KVS_CHECK_EQ(st.write_errors, 0);
	KVS_CHECK_EQ(st.copy_bytes, 8 * SHARD + 2 * SHARD);
	/* and the dumped block loads back from the cache */
	KVS_TRY(st_load(s, &d, WAIT_MS, 0));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.owner_reads, 8);
	KVS_CHECK_EQ(st.load_hits, 6);
	/* the cache's gets: the loads' hits and misses (prefetch 4 misses, load a 4
	 * hits, load b 4 misses, load d 2 hits); the dumps' 6 gets (2 gathered, 4
	 * dedup) apart, in no hit ratio */
	{
		struct kvs_cache_stats cs;

		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), st_rank(s), &cs));
		printf("  cache: hits %llu joins %llu misses %llu dump_gets %llu\n",
		       (unsigned long long)cs.hits, (unsigned long long)cs.joins,
		       (unsigned long long)cs.misses, (unsigned long long)cs.dump_gets);
		KVS_CHECK_EQ(cs.hits, 6);
		KVS_CHECK_EQ(cs.joins, 0);
		KVS_CHECK_EQ(cs.misses, 8);
		KVS_CHECK_EQ(cs.dump_gets, 6);
		KVS_CHECK_EQ(cs.hits, st.load_hits);
	}

	KVS_CHECK_EQ(st.tasks_failed, 0);
	KVS_CHECK_EQ(st.tasks_timedout, 0);
	KVS_CHECK_EQ(st.read_errors, 0);
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
		lat += st.task_lat_us[i];
	KVS_CHECK_EQ(lat, 6); /* every task reaped so far */
	/* one rank: the node total is this rank's */
	KVS_TRY(st_stats(s, KVS_STATS_NODE, &node));
	KVS_CHECK_EQ(node.tasks_load, st.tasks_load);
	KVS_CHECK_EQ(node.owner_reads, st.owner_reads);
	KVS_CHECK_EQ(node.load_hits, st.load_hits);
	KVS_CHECK_EQ(node.dump_dedup, st.dump_dedup);
	KVS_CHECK_EQ(node.shards_loaded, st.shards_loaded);
	KVS_CHECK_ERR(kvs_store_stats(s, -2, &st), -EINVAL);
	KVS_CHECK_ERR(kvs_store_stats(s, st_rank(s), NULL), -EINVAL);
	KVS_CHECK(kvs_store_cache(NULL) == NULL);
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);
	kvs_store_close(NULL);
	st_task_free(&a);
	st_task_free(&b);
	st_task_free(&d);
	st_task_free(&dd);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A backend that refuses every transfer at submit                           */

static int refuse_open(const struct kvs_backend_config *cfg, void **state)
{
	(void)cfg;
	*state = NULL;
	return 0;
}

static int refuse_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state, (void)block;
	return 0;
}

static int refuse_submit(void *state, const struct kvs_backend_io *io)
{
	(void)state, (void)io;
	return -EACCES;
}

static int refuse_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		       uint64_t timeout_ns)
{
	(void)state, (void)out, (void)max, (void)timeout_ns;
	return 0; /* nothing is ever in flight */
}

static void refuse_close(void *state)
{
	(void)state;
}

static const struct kvs_backend_ops refuse_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = refuse_open,
	.lookup = refuse_lookup,
	.submit_read = refuse_submit,
	.submit_write = refuse_submit,
	.poll = refuse_poll,
	.close = refuse_close,
};

/* Every read and write refused at submit: each is counted as an attempt and as
 * its failure, so an error ratio (errors / attempts) is 1, not errors / 0. */
static kvs_test_rc test_refused(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t, d;
	uint64_t task = 0;
	char uid[96];
	int rc;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "refuse"), 0, SHARD, 32, 2);
	cfg.backend.kind = KVS_BACKEND_USER;
	cfg.backend.user_ops = &refuse_ops;
	cfg.timeout_ns = 300 * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 2, 1, SHARD));
	for (uint32_t i = 0; i < 2; i++) {
		struct kvs_block_id b = st_block(30, 0);
		st_task_set(&t, i, &b, i);
	}
	KVS_TRY(st_load(s, &t, WAIT_MS, -EACCES));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("refused reads", &st);
	KVS_CHECK_EQ(st.read_errors, 2);
	KVS_CHECK_EQ(st.owner_reads, 2); /* was 0: refused at submit, not counted */
	KVS_CHECK_EQ(st.tasks_failed, 1);
	KVS_CHECK_EQ(st.tasks_load, 1);

	/* a durable dump of a new block: its write refused (and retried) until the
	 * task's deadline */
	KVS_TRY(st_task_whole(&d, 2, 1, SHARD));
	for (uint32_t i = 0; i < 2; i++) {
		struct kvs_block_id b = st_block(30, 1);
		st_task_set(&d, i, &b, i);
	}
	KVS_CHECK_OK(kvs_store_dump(s, d.shards, 2, NULL, &task));
	rc = st_wait(s, task, WAIT_MS);
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("refused writes", &st);
	printf("  dump: %d (%s)\n", rc, kvs_strerror(rc));
	KVS_CHECK(rc < 0);
	KVS_CHECK(st.write_errors >= 1);
	KVS_CHECK_EQ(st.backend_writes, st.write_errors); /* was 0 and 0: uncounted */
	KVS_CHECK_EQ(st.shards_dumped, 2);
	KVS_CHECK(st.tasks_failed <= st.tasks_load + st.tasks_dump + st.tasks_prefetch);
	kvs_store_close(s);
	st_task_free(&t);
	st_task_free(&d);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "roundtrip_one_tensor", test_roundtrip_one_tensor },
	{ "roundtrip_tensors", test_roundtrip_tensors },
	{ "roundtrip_tensor_list", test_roundtrip_tensor_list },
	{ "roundtrip_rotated", test_roundtrip_rotated },
	{ "roundtrip_layerwise", test_roundtrip_layerwise },
	{ "backend_none", test_backend_none },
	{ "latency_content", test_latency_content },
	{ "fault_all_eio", test_fault_all_eio },
	{ "fault_ten_percent", test_fault_ten_percent },
	{ "head_slices", test_head_slices },
	{ "queue_full", test_queue_full },
	{ "task_timeout", test_task_timeout },
	{ "slow_reads_leave_room", test_slow_reads_leave_room },
	{ "task_ids", test_task_ids },
	{ "close_running", test_close_running },
	{ "release_before_done", test_release_before_done },
	{ "watcher_lookup", test_watcher_lookup },
	{ "stats", test_stats },
	{ "refused", test_refused },
};

KVS_TEST_MAIN(cases)
