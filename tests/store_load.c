/*
 * tests/store_load.c — the store's data path in one process (host copy engine);
 * its bookkeeping (tasks, lookups, counters) is tests/store_bookkeeping.c's:
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
 *   hints         a cold load's deferred misses are hinted to the backend
 *                 (kvs_backend_hint_read), nearest first, some before their
 *                 first read; a load of hits hints nothing;
 *   faults        fault backend at 100% (-EIO, slots FAILED, not hung, retried by
 *                 the next load) and at 10% errors+short reads over many tasks
 *                 (failed tasks say -EIO, the others carry the right bytes);
 *   head slices   four simulated ranks each copy a quarter of every tensor of
 *                 one stored block; bad slices and other bad tasks -EINVAL;
 *   tensor ranges kvs_store_load_tensors copies its range of each shard's
 *                 tensors only (the others' entries are not read), the first
 *                 range reading whole shards, the later ones hits; bad ranges;
 *                 range loads are visited one after another, in submit order.
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
	uint32_t streams;     /* cache_stream_number (0: the default, 1) */
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
	if (o->streams)
		cfg->cache_stream_number = o->streams;
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

/* The host engine's copy threads (cache_stream_number 3): the copier's passes
 * of 512 KiB and more (the working set's 125 shards of 16 KiB: 2 MiB) are
 * shared, gathers at the dump and scatters at the load, every byte checked. */
static kvs_test_rc test_roundtrip_copy_threads(void)
{
	struct rt_opts o = { .tag = "rtct", .tag_id = 6, .nblocks = 64, .spb = 4, .tcount = 8,
			     .streams = 3 };

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
/* Hints: the dispatcher tells the backend the blocks of the misses it defers */

/* A user backend over a latency backend of 2 reads in flight, recording the
 * blocks hinted (kvs_backend_hint_read) and each block's first read, in order
 * (the dispatcher is the only caller; read after the load). */
#define HINT_BLOCKS 16
#define HINT_SPB 4

static struct {
	pthread_mutex_t mu;
	uint32_t hints[256], nhints;
	uint64_t hint_seq[HINT_BLOCKS]; /* event number of the block's first hint, 0: none */
	uint64_t read_seq[HINT_BLOCKS]; /* of its first read */
	uint64_t seq;
} hr = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int hint_block_index(const struct kvs_block_id *id)
{
	for (uint32_t i = 0; i < HINT_BLOCKS; i++) {
		struct kvs_block_id b = st_block(12, i);

		if (!memcmp(&b, id, sizeof(b)))
			return (int)i;
	}
	return -1;
}

static int hr_open(const struct kvs_backend_config *cfg, void **state)
{
	struct kvs_backend_config inner = *cfg;

	inner.kind = KVS_BACKEND_LATENCY;
	inner.user_ops = NULL;
	inner.latency_ns = 1 * ST_MS;
	inner.latency_queue_depth = 2;
	return kvs_backend_open(&inner, (struct kvs_backend **)state);
}

static int hr_lookup(void *state, const struct kvs_block_id *block)
{
	return kvs_backend_lookup(state, block);
}

static int hr_submit_read(void *state, const struct kvs_backend_io *io)
{
	int rc = kvs_backend_submit_read(state, io), i = hint_block_index(&io->block);

	pthread_mutex_lock(&hr.mu);
	if (rc == 0 && i >= 0 && !hr.read_seq[i])
		hr.read_seq[i] = ++hr.seq;
	pthread_mutex_unlock(&hr.mu);
	return rc;
}

static int hr_submit_write(void *state, const struct kvs_backend_io *io)
{
	return kvs_backend_submit_write(state, io);
}

static int hr_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		   uint64_t timeout_ns)
{
	return kvs_backend_poll(state, out, max, timeout_ns);
}

static void hr_close(void *state)
{
	kvs_backend_close(state);
}

static int hr_wait_fd(void *state)
{
	return kvs_backend_wait_fd(state);
}

static void hr_hint_read(void *state, const struct kvs_block_id *blocks, size_t n)
{
	(void)state;
	pthread_mutex_lock(&hr.mu);
	for (size_t k = 0; k < n; k++) {
		int i = hint_block_index(&blocks[k]);

		if (hr.nhints < KVS_ARRAY_LEN(hr.hints))
			hr.hints[hr.nhints++] = i < 0 ? UINT32_MAX : (uint32_t)i;
		if (i >= 0 && !hr.hint_seq[i])
			hr.hint_seq[i] = ++hr.seq;
	}
	pthread_mutex_unlock(&hr.mu);
}

static const struct kvs_backend_ops hr_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = hr_open,
	.lookup = hr_lookup,
	.submit_read = hr_submit_read,
	.submit_write = hr_submit_write,
	.poll = hr_poll,
	.close = hr_close,
	.wait_fd = hr_wait_fd,
	.hint_read = hr_hint_read,
};

/*
 * A cold load of 16 blocks x 4 shards through a backend that takes 2 reads at
 * a time: the misses met while reads wait are deferred, and their blocks are
 * hinted to the backend, nearest first (block order: one task, one rank's
 * visiting order), only blocks
 * of this load, and some of them before their first read (what the hint is
 * for: a posix backend opens them meanwhile).  A second load of the same
 * blocks, all hits, hints nothing.
 */
static kvs_test_rc test_load_hints(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint32_t ahead = 0, nhints;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "hint"), 0, SHARD,
	       HINT_BLOCKS * HINT_SPB + 8, HINT_SPB);
	cfg.cache.local_rank_size = 1; /* visits in task order: block by block */
	cfg.backend.kind = KVS_BACKEND_USER;
	cfg.backend.user_ops = &hr_ops;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, HINT_BLOCKS * HINT_SPB, 1, SHARD));
	for (uint32_t i = 0; i < HINT_BLOCKS * HINT_SPB; i++) {
		struct kvs_block_id b = st_block(12, i / HINT_SPB);

		st_task_set(&t, i, &b, i % HINT_SPB);
	}
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	pthread_mutex_lock(&hr.mu);
	nhints = hr.nhints;
	for (uint32_t i = 0; i < nhints; i++) {
		KVS_CHECK(hr.hints[i] < HINT_BLOCKS);
		KVS_CHECK(i == 0 || hr.hints[i] >= hr.hints[i - 1]);
	}
	for (uint32_t i = 0; i < HINT_BLOCKS; i++)
		ahead += hr.hint_seq[i] && hr.hint_seq[i] < hr.read_seq[i];
	pthread_mutex_unlock(&hr.mu);
	printf("  %u hints, %u blocks hinted before their first read\n", nhints, ahead);
	KVS_CHECK(nhints > 0);
	KVS_CHECK(ahead > 0);

	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	pthread_mutex_lock(&hr.mu);
	KVS_CHECK_EQ(hr.nhints, nhints);
	pthread_mutex_unlock(&hr.mu);
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
/* Tensor ranges                                                             */

#define TR_TENSOR 4096
#define TR_TENSORS 4

/* Tensors [first, first + count) of every shard of t are the stored content, the
 * others still poison. */
static kvs_test_rc tr_verify(const struct st_task *t, uint32_t first, uint32_t count)
{
	for (uint32_t i = 0; i < t->n; i++) {
		for (uint32_t k = 0; k < t->tcount; k++) {
			const unsigned char *got = st_buf(t, i, k);
			unsigned char want[TR_TENSOR];

			if (k >= first && k < first + count) {
				kvs_pattern_fill(&t->shards[i].block, t->shards[i].shard,
						 t->base[k] + t->off[k], want, st_copy_len(t, k));
				if (memcmp(got, want, st_copy_len(t, k)))
					KVS_FAILF("shard %u tensor %u: not the stored bytes (range %u+%u)",
						  i, k, first, count);
				continue;
			}
			for (uint64_t q = 0; q < st_copy_len(t, k); q++)
				if (got[q] != ST_POISON)
					KVS_FAILF("shard %u tensor %u byte %llu written, outside the range "
						  "%u+%u", i, k, (unsigned long long)q, first, count);
		}
	}
	return KVS_TEST_PASS;
}

/* kvs_store_load_tensors: a range of each shard's tensors is copied, the others
 * are neither copied nor read; the first range reads whole shards from the
 * backend, the later ones hit; bad ranges -EINVAL. */
static kvs_test_rc test_tensor_ranges(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	struct kvs_store_tensor whole[6 * TR_TENSORS];
	char uid[96];
	uint64_t task = 0;
	const struct {
		uint32_t first, count;
	} ranges[] = { { 1, 2 }, { 3, 1 }, { 0, 4 } };

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "ranges"), 0, TR_TENSORS * TR_TENSOR, 16,
	       2);
	st_latency(&cfg, 1 * ST_MS);
	cfg.tensor_bytes = TR_TENSOR;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 6, TR_TENSORS, TR_TENSORS * TR_TENSOR));
	for (uint32_t i = 0; i < 6; i++) {
		struct kvs_block_id b = st_block(15, i / 2);
		st_task_set(&t, i, &b, i % 2);
	}
	memcpy(whole, t.tensors, sizeof(whole));
	for (size_t r = 0; r < KVS_ARRAY_LEN(ranges); r++) {
		uint32_t first = ranges[r].first, count = ranges[r].count;

		st_task_poison(&t);
		/* entries outside the range are not read: make them invalid */
		for (uint32_t i = 0; i < t.n; i++)
			for (uint32_t k = 0; k < TR_TENSORS; k++)
				if (k < first || k >= first + count)
					t.tensors[i * TR_TENSORS + k] =
						(struct kvs_store_tensor){ 0, UINT64_MAX, UINT64_MAX };
		KVS_CHECK_OK(kvs_store_load_tensors(s, t.shards, t.n, first, count, &task));
		KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "tensor range load"));
		KVS_TRY(tr_verify(&t, first, count));
		KVS_TRY(st_stats(s, st_rank(s), &st));
		printf("  tensors %u+%u: owner_reads %llu load_hits %llu copy_bytes %llu\n", first,
		       count, (unsigned long long)st.owner_reads, (unsigned long long)st.load_hits,
		       (unsigned long long)st.copy_bytes);
		KVS_CHECK_EQ(st.owner_reads, 6); /* the first range read the shards whole */
		KVS_CHECK_EQ(st.load_hits, 6 * r);
		memcpy(t.tensors, whole, sizeof(whole));
	}
	KVS_CHECK_EQ(st.copy_bytes, 6 * (2 + 1 + 4) * TR_TENSOR);
	/* bad ranges: -EINVAL at submit, nothing queued */
	const struct {
		uint32_t first, count;
	} bad[] = { { 0, 0 }, { 4, 1 }, { 2, 3 }, { 1, UINT32_MAX }, { UINT32_MAX, 2 } };
	for (size_t c = 0; c < KVS_ARRAY_LEN(bad); c++) {
		int rc = kvs_store_load_tensors(s, t.shards, t.n, bad[c].first, bad[c].count, &task);

		if (rc != -EINVAL)
			KVS_FAILF("tensors %u+%u of %d: got %d (%s), want -EINVAL", bad[c].first,
				  bad[c].count, TR_TENSORS, rc, kvs_strerror(rc));
	}
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.tasks_load, KVS_ARRAY_LEN(ranges));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* Range loads are sequenced: submitted back to back over the same 128 shards,
 * with a slow copier (copy_delay), the first is done before the second's
 * copies are well under way; visited round-robin, all three would have
 * copied most of their shards by then (3 x 128 - 2 x 16). */
static kvs_test_rc test_tensor_ranges_in_order(void)
{
	enum { N = 128, SPB = 8 };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	uint64_t task[3] = { 0 };
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "ranges_seq"), 0,
	       TR_TENSORS * TR_TENSOR, 2 * N + 16, SPB);
	cfg.tensor_bytes = TR_TENSOR;
	cfg.copy_delay_ns = 200 * 1000;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, N, TR_TENSORS, TR_TENSORS * TR_TENSOR));
	for (uint32_t i = 0; i < N; i++) {
		struct kvs_block_id b = st_block(16, i / SPB);
		st_task_set(&t, i, &b, i % SPB);
	}
	KVS_TRY(st_dump(s, &t, WAIT_MS));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	uint64_t loaded0 = st.shards_loaded;

	st_task_poison(&t);
	for (uint32_t r = 0; r < 3; r++)
		KVS_CHECK_OK(kvs_store_load_tensors(s, t.shards, t.n, r, 1, &task[r]));
	KVS_TRY(st_wait_expect(s, task[0], WAIT_MS, 0, "first range"));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	printf("  first range done: %llu shards loaded (first range %d, all three %d)\n",
	       (unsigned long long)(st.shards_loaded - loaded0), N, 3 * N);
	if (st.shards_loaded - loaded0 >= 2 * N)
		KVS_FAILF("the first range finished after %llu shard copies: the ranges were not "
			  "visited in order", (unsigned long long)(st.shards_loaded - loaded0));
	KVS_TRY(st_wait_expect(s, task[1], WAIT_MS, 0, "second range"));
	KVS_TRY(st_wait_expect(s, task[2], WAIT_MS, 0, "third range"));
	KVS_TRY(tr_verify(&t, 0, 3));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "roundtrip_one_tensor", test_roundtrip_one_tensor },
	{ "roundtrip_tensors", test_roundtrip_tensors },
	{ "roundtrip_tensor_list", test_roundtrip_tensor_list },
	{ "roundtrip_rotated", test_roundtrip_rotated },
	{ "roundtrip_layerwise", test_roundtrip_layerwise },
	{ "roundtrip_copy_threads", test_roundtrip_copy_threads },
	{ "backend_none", test_backend_none },
	{ "latency_content", test_latency_content },
	{ "load_hints", test_load_hints },
	{ "fault_all_eio", test_fault_all_eio },
	{ "fault_ten_percent", test_fault_ten_percent },
	{ "head_slices", test_head_slices },
	{ "tensor_ranges", test_tensor_ranges },
	{ "tensor_ranges_in_order", test_tensor_ranges_in_order },
};

KVS_TEST_MAIN(cases)
