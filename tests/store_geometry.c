/*
 * tests/store_geometry.c — a stored block says what it holds, seen through the
 * store (issue 22, item 5).
 *
 * The defect: a store with 8 KiB shards, one per block, loaded a block that a
 * store with 4 KiB shards, two per block, had dumped, and reported success with
 * garbage bytes.  Here store A (4 KiB shards x 2 per block, tensors 2 x 2048, a
 * posix root under /tmp) dumps a block and closes; then, each with a cache of
 * its own (another unique_id, so nothing comes from A's shared memory):
 *
 *   store B  8 KiB x 1: the load fails -KVS_ECONFIG, the log line names the
 *            block, the root and both geometries, lookup says miss;
 *   store C  A's geometry: the load is byte-exact, lookup says hit;
 *   store D  A's geometry with another layout_tag: -KVS_ECONFIG, naming it.
 *
 * Each cache is checked clean after its load (no pin left, invariants hold).
 */
#include "store_util.h"

#define GEO_SLOTS 16u

static char g_logs[8192]; /* every line of the current store, under st_log_mu */

static void geo_log(void *arg, int level, const char *msg)
{
	size_t n;

	(void)arg;
	pthread_mutex_lock(&st_log_mu);
	n = strlen(g_logs);
	snprintf(g_logs + n, sizeof(g_logs) - n, "%s\n", msg);
	pthread_mutex_unlock(&st_log_mu);
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}

/* A rank store over root: shard_bytes x spb, tensors equal ones of tensor_bytes
 * (0: one), layout_tag tag; its log kept in g_logs. */
static kvs_test_rc geo_open(const char *tag, const char *root, uint64_t shard_bytes, uint32_t spb,
			    uint64_t tensor_bytes, uint64_t layout_tag, struct kvs_store **s)
{
	struct kvs_store_config cfg;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), tag), 0, shard_bytes, GEO_SLOTS, spb);
	st_posix(&cfg, root);
	cfg.tensor_bytes = tensor_bytes;
	cfg.backend.layout_tag = layout_tag;
	cfg.log = geo_log;
	g_logs[0] = '\0';
	return st_open(&cfg, s);
}

/* The log has want, or the case fails showing the log. */
static kvs_test_rc geo_log_has(const char *want)
{
	bool has;

	pthread_mutex_lock(&st_log_mu);
	has = strstr(g_logs, want) != NULL;
	pthread_mutex_unlock(&st_log_mu);
	if (!has)
		KVS_FAILF("the log lacks\n  %s\nlog:\n%s", want, g_logs);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_other_geometry(void)
{
	struct kvs_block_id id = st_block(22, 5);
	struct kvs_store *s = NULL;
	struct st_task a, b;
	char root[128], hex[33], want[700];
	bool hit;

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id.bytes[i]);
	KVS_TRY(st_root_init(root, sizeof(root), "geometry"));

	/* A: 4 KiB x 2, two tensors per shard, dumps the block and goes away. */
	KVS_TRY(geo_open("geoA", root, 4096, 2, 2048, 0, &s));
	KVS_TRY(st_task_whole(&a, 2, 2, 4096));
	st_task_set(&a, 0, &id, 0);
	st_task_set(&a, 1, &id, 1);
	KVS_TRY(st_dump(s, &a, 20000));
	kvs_store_close(s);

	/* B: 8 KiB x 1 -- the reader.  Refused, naming both geometries. */
	KVS_TRY(geo_open("geoB", root, 8192, 1, 0, 0, &s));
	KVS_TRY(st_task_whole(&b, 1, 1, 8192));
	st_task_set(&b, 0, &id, 0);
	KVS_TRY(st_load(s, &b, 20000, -KVS_ECONFIG));
	snprintf(want, sizeof(want), "backend: block %s in %s: stored with shard_size 4096 x 2 "
		 "shards per block, tensors 2x2048, layout_tag 0; this store has shard_size 8192 x "
		 "1 shards per block, tensors 1x8192, layout_tag 0", hex, root);
	KVS_TRY(geo_log_has(want));
	for (uint64_t k = 0; k < 8192; k++) /* no byte of the block reached the tensor */
		KVS_CHECK_EQ(b.mem[k], ST_POISON);
	KVS_CHECK_EQ(kvs_store_lookup(s, &id, 1, &hit), 0);
	KVS_CHECK(!hit);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);

	/* C: A's geometry, a cold cache of its own: every byte as dumped. */
	KVS_TRY(geo_open("geoC", root, 4096, 2, 2048, 0, &s));
	KVS_CHECK_EQ(kvs_store_lookup(s, &id, 1, &hit), 1);
	KVS_TRY(st_load(s, &a, 20000, 0));
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);

	/* D: A's geometry, another layout_tag. */
	KVS_TRY(geo_open("geoD", root, 4096, 2, 2048, 0x7, &s));
	KVS_TRY(st_load(s, &a, 20000, -KVS_ECONFIG));
	KVS_TRY(geo_log_has("stored with shard_size 4096 x 2 shards per block, tensors 2x2048, "
			    "layout_tag 0; this store has shard_size 4096 x 2 shards per block, "
			    "tensors 2x2048, layout_tag 0x7"));
	KVS_CHECK_EQ(kvs_store_lookup(s, &id, 1, &hit), 0);
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);

	st_task_free(&a);
	st_task_free(&b);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "other_geometry", test_other_geometry },
};

KVS_TEST_MAIN(cases)
