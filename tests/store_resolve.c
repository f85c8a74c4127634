/*
 * tests/store_resolve.c — the store's config resolution (store/config.c,
 * kvs_store_config_resolve): the capacity, block and tensor derivations and
 * their errors, share_buffer_enable=0, the fault wrapper, the roots split and
 * the store fields' ranges, each error a log line naming the key.  No cache is
 * opened.  The parser itself is tests/store_config.c's.
 */
#include "store_config_util.h"

static kvs_test_rc resolve(const char *kv, struct kvs_store_config *out,
			   struct kvs_backend_config *inner)
{
	struct kvs_store_config cfg;

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, kv));
	memset(out, 0x5a, sizeof(*out));
	int rc = kvs_store_config_resolve(&cfg, out, inner, NULL);
	if (rc != 0)
		KVS_FAILF("resolve '%s': %d (%s); log: %s", kv, rc, kvs_strerror(rc), last_log);
	return KVS_TEST_PASS;
}

/* resolve of cfg fails with -EINVAL and a log line containing want. */
static kvs_test_rc resolve_bad_cfg(const struct kvs_store_config *cfg, const char *want)
{
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	struct kvs_log log = { test_log, NULL };
	int before = error_lines;
	int rc;

	last_log[0] = '\0';
	rc = kvs_store_config_resolve(cfg, &out, &inner, &log);
	if (rc != -EINVAL)
		KVS_FAILF("resolve: got %d (%s), want -EINVAL for \"%s\"", rc, kvs_strerror(rc), want);
	if (!strstr(last_log, want))
		KVS_FAILF("resolve: log \"%s\" lacks \"%s\"", last_log, want);
	KVS_CHECK_EQ(error_lines, before + 1);
	return KVS_TEST_PASS;
}

static kvs_test_rc resolve_bad(const char *kv, const char *want)
{
	struct kvs_store_config cfg;

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, kv));
	return resolve_bad_cfg(&cfg, want);
}

static kvs_test_rc test_resolve_geometry(void)
{
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	struct kvs_log log = { test_log, NULL };

	KVS_TRY(resolve("unique_id=m,device_id=1,shard_size=64k,block_size=256k,tensor_size=16k,"
			"cache_buffer_capacity_gb=0.5,backend_roots=/a:/b",
			&out, &inner));
	KVS_CHECK_EQ(out.cache.slot_bytes, 65536);
	KVS_CHECK_EQ(out.cache.slot_count, (GIB / 2) / 65536);
	KVS_CHECK_EQ(out.cache.shards_per_block, 4);
	KVS_CHECK_EQ(out.cache.tensor_count, 4);
	for (int i = 0; i < 4; i++)
		KVS_CHECK_EQ(out.cache.tensor_bytes[i], 16384);
	KVS_CHECK_EQ(out.cache.tensor_bytes[4], 0);
	KVS_CHECK_EQ(out.backend.shard_bytes, 65536);
	KVS_CHECK_EQ(out.backend.shards_per_block, 4);
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_POSIX);
	KVS_CHECK(strcmp(out.cache.unique_id, "m") == 0);
	KVS_CHECK_EQ(out.cache.local_rank_size, 8);
	/* the cache accepts what resolution made */
	KVS_CHECK_OK(kvs_core_config_validate(&out.cache, &log));

	/* capacity rounds down to whole slots */
	KVS_TRY(resolve("shard_size=3g,cache_buffer_capacity_gb=10", &out, &inner));
	KVS_CHECK_EQ(out.cache.slot_count, 3);
	/* tensor_size_list alone gives the shard size; both given must agree */
	KVS_TRY(resolve("tensor_size_list=32768:4096", &out, &inner));
	KVS_CHECK_EQ(out.cache.slot_bytes, 36864);
	KVS_CHECK_EQ(out.backend.shard_bytes, 36864);
	KVS_TRY(resolve("tensor_size_list=32768:4096,shard_size=36k", &out, &inner));
	KVS_TRY(resolve_bad("tensor_size_list=32768:4096,shard_size=40k",
			    "invalid tensor_size_list = 36864 bytes in all (shard_size is 40960)"));
	/* tensor_size and tensor_size_list agreeing, or not */
	KVS_TRY(resolve("tensor_size_list=4k:4k,tensor_size=4k", &out, &inner));
	KVS_CHECK_EQ(out.cache.tensor_count, 2);
	KVS_TRY(resolve_bad("tensor_size_list=4k:4k,tensor_size=2k", "invalid tensor_size"));
	KVS_TRY(resolve_bad("tensor_size_list=4k:2k,shard_size=6k,tensor_size=2k",
			    "invalid tensor_size"));
	/* one tensor of the whole shard */
	KVS_TRY(resolve("shard_size=8k,tensor_size=8k", &out, &inner));
	KVS_CHECK_EQ(out.cache.tensor_count, 1);
	/* exactly KVS_MAX_TENSORS tensors, then one too many */
	KVS_TRY(resolve("shard_size=256k,tensor_size=1k", &out, &inner));
	KVS_CHECK_EQ(out.cache.tensor_count, KVS_MAX_TENSORS);
	KVS_TRY(resolve_bad("shard_size=1m,tensor_size=2k", "invalid tensor_size = 2048 (512 tensors"));
	KVS_TRY(resolve_bad("shard_size=64k,tensor_size=24k", "invalid tensor_size = 24576 (does not divide"));
	KVS_TRY(resolve_bad("tensor_size=4k", "invalid tensor_size = 4096 (shard_size is not set)"));

	/* capacity and block errors */
	KVS_TRY(resolve_bad("shard_size=1g,cache_buffer_capacity_gb=0.5",
			    "invalid cache_buffer_capacity_gb = 536870912 bytes (less than one shard"));
	KVS_TRY(resolve_bad("cache_buffer_capacity_gb=1", "invalid shard_size = 0 (cache_buffer_capacity_gb"));
	KVS_TRY(resolve_bad("block_size=1m", "invalid shard_size = 0 (block_size"));
	KVS_TRY(resolve_bad("shard_size=3k,block_size=8k", "invalid block_size = 8192 (not a multiple"));
	KVS_TRY(resolve_bad("shard_size=1,block_size=65537", "invalid block_size = 65537 (65537 shards"));
	KVS_TRY(resolve("shard_size=1,block_size=65536", &out, &inner));
	KVS_CHECK_EQ(out.cache.shards_per_block, 65536);
	{
		struct kvs_store_config cfg;

		fresh(&cfg);
		KVS_TRY(parse_ok(&cfg, "shard_size=1m,cache_buffer_capacity_gb=1,block_size=2m"));
		cfg.cache.slot_count = 1024; /* set both ways, agreeing */
		cfg.cache.shards_per_block = 2;
		KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, &log), 0);
		cfg.cache.slot_count = 1000;
		KVS_TRY(resolve_bad_cfg(&cfg, "invalid cache_buffer_capacity_gb"));
		cfg.cache.slot_count = 0;
		cfg.cache.shards_per_block = 3;
		KVS_TRY(resolve_bad_cfg(&cfg, "invalid block_size"));
		/* tensor sizes set in the struct are checked before they are summed */
		fresh(&cfg);
		cfg.cache.tensor_count = KVS_MAX_TENSORS + 1;
		KVS_TRY(resolve_bad_cfg(&cfg, "invalid tensor_size_list = 257 entries"));
		cfg.cache.tensor_count = 2;
		cfg.cache.tensor_bytes[0] = UINT64_MAX;
		cfg.cache.tensor_bytes[1] = 1;
		KVS_TRY(resolve_bad_cfg(&cfg, "overflows"));
		cfg.cache.tensor_bytes[1] = 0;
		KVS_TRY(resolve_bad_cfg(&cfg, "invalid tensor_size_list = entry 2 is 0"));
	}
	/* nothing derived: resolution leaves the geometry to kvs_cache_open */
	KVS_TRY(resolve("", &out, &inner));
	KVS_CHECK_EQ(out.cache.slot_bytes, 0);
	KVS_CHECK_EQ(out.cache.slot_count, 0);
	KVS_CHECK_EQ(out.cache.tensor_count, 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_resolve_share_buffer(void)
{
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	char kv[160], id[80];

	KVS_TRY(resolve("unique_id=m,device_id=3,share_buffer_enable=0", &out, &inner));
	KVS_CHECK(strcmp(out.cache.unique_id, "m.rank3") == 0);
	KVS_CHECK_EQ(out.cache.local_rank_size, 1);
	KVS_TRY(resolve("unique_id=m,device_id=-1,share_buffer_enable=0", &out, &inner));
	KVS_CHECK(strcmp(out.cache.unique_id, "m.rank-1") == 0);
	KVS_TRY(resolve("unique_id=m,device_id=3", &out, &inner));
	KVS_CHECK(strcmp(out.cache.unique_id, "m") == 0);
	KVS_CHECK_EQ(out.cache.local_rank_size, 8);
	/* 58 + ".rank3" = 64 fits; 59 does not */
	memset(id, 'u', 58);
	id[58] = '\0';
	snprintf(kv, sizeof(kv), "unique_id=%s,device_id=3,share_buffer_enable=0", id);
	KVS_TRY(resolve(kv, &out, &inner));
	KVS_CHECK_EQ(strlen(out.cache.unique_id), 64);
	snprintf(kv, sizeof(kv), "unique_id=u%s,device_id=3,share_buffer_enable=0", id);
	KVS_TRY(resolve_bad(kv, "invalid unique_id"));
	KVS_CHECK(strstr(last_log, ".rank3") != NULL);
	/* no unique_id: refused by name, not hidden behind the suffix */
	KVS_TRY(resolve_bad("share_buffer_enable=0", "invalid unique_id = ''"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_resolve_fault(void)
{
	static struct kvs_store_config out;
	struct kvs_backend_config inner, user_inner;
	struct kvs_store_config cfg;
	struct kvs_log log = { test_log, NULL };

	memset(&inner, 0x5a, sizeof(inner));
	KVS_TRY(resolve("backend=latency,latency_us=5,latency_queue_depth=3,fault_error_ppm=10,"
			"fault_seed=7,shard_size=4k,block_size=8k",
			&out, &inner));
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_FAULT);
	KVS_CHECK(out.backend.fault_inner == &inner);
	KVS_CHECK_EQ(out.backend.fault_error_ppm, 10);
	KVS_CHECK_EQ(out.backend.fault_seed, 7);
	KVS_CHECK_EQ(out.backend.shard_bytes, 4096);
	KVS_CHECK_EQ(out.backend.shards_per_block, 2);
	KVS_CHECK_EQ(inner.kind, KVS_BACKEND_LATENCY);
	KVS_CHECK_EQ(inner.latency_ns, 5000);
	KVS_CHECK_EQ(inner.latency_queue_depth, 3);
	KVS_CHECK_EQ(inner.fault_error_ppm | inner.fault_short_ppm, 0);
	KVS_CHECK_EQ(inner.fault_delay_ns | inner.fault_seed, 0);
	KVS_CHECK(inner.fault_inner == NULL);
	KVS_CHECK_EQ(inner.shard_bytes, 4096);
	KVS_CHECK_EQ(inner.shards_per_block, 2);
	KVS_CHECK(inner.log == test_log);
	for (size_t i = 0; i < KVS_ARRAY_LEN(inner.reserved); i++)
		KVS_CHECK_EQ(inner.reserved[i], 0);

	/* each of the four wraps alone (the seed: any value but its default 1) */
	KVS_TRY(resolve("backend=none,fault_short_ppm=1", &out, &inner));
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_FAULT);
	KVS_CHECK_EQ(inner.kind, KVS_BACKEND_NONE);
	KVS_TRY(resolve("backend=none,fault_delay_us=1", &out, &inner));
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_FAULT);
	KVS_CHECK_EQ(out.backend.fault_delay_ns, 1000);
	KVS_TRY(resolve("backend=none,fault_seed=9,fault_error_ppm=0", &out, &inner));
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_FAULT);
	KVS_CHECK_EQ(out.backend.fault_seed, 9);
	KVS_CHECK_EQ(inner.kind, KVS_BACKEND_NONE);
	KVS_TRY(resolve("backend=none,fault_seed=1", &out, &inner));
	KVS_CHECK_EQ(out.backend.kind, KVS_BACKEND_NONE); /* the default: nothing asked */
	KVS_CHECK(out.backend.fault_inner == NULL);

	/* posix: the roots are split first, so the inner backend has them */
	KVS_TRY(resolve("backend_roots=/r1:/r2,fault_error_ppm=5,shard_size=1m", &out, &inner));
	KVS_CHECK_EQ(inner.kind, KVS_BACKEND_POSIX);
	KVS_CHECK_EQ(inner.nroots, 2);
	KVS_CHECK(strcmp(inner.roots[1], "/r2") == 0);
	KVS_CHECK(inner.roots[0] == out.backend_roots);

	/* a wrapper the caller built: its inner config is copied and given the geometry */
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "shard_size=2k,fault_error_ppm=3"));
	kvs_backend_config_init(&user_inner);
	user_inner.kind = KVS_BACKEND_NONE;
	user_inner.shard_bytes = 1;
	cfg.backend.kind = KVS_BACKEND_FAULT;
	cfg.backend.fault_inner = &user_inner;
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, &log), 0);
	KVS_CHECK(out.backend.fault_inner == &inner);
	KVS_CHECK_EQ(inner.kind, KVS_BACKEND_NONE);
	KVS_CHECK_EQ(inner.shard_bytes, 2048);
	KVS_CHECK_EQ(user_inner.shard_bytes, 1); /* the caller's stays as it was */

	/* no room for the inner config */
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "fault_error_ppm=3"));
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, NULL, &log), -EINVAL);
	KVS_CHECK(strstr(last_log, "fault") != NULL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_resolve_roots(void)
{
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	struct kvs_store_config cfg;
	struct kvs_log log = { test_log, NULL };
	const char *mine = "/mine";

	KVS_TRY(resolve("backend_roots=/a:/bb:/ccc", &out, &inner));
	KVS_CHECK_EQ(out.backend.nroots, 3);
	KVS_CHECK(strcmp(out.backend.roots[0], "/a") == 0);
	KVS_CHECK(strcmp(out.backend.roots[1], "/bb") == 0);
	KVS_CHECK(strcmp(out.backend.roots[2], "/ccc") == 0);
	/* they point into out itself */
	for (int i = 0; i < 3; i++)
		KVS_CHECK(out.backend.roots[i] >= out.backend_roots &&
			  out.backend.roots[i] < out.backend_roots + sizeof(out.backend_roots));
	KVS_TRY(resolve("backend_roots=/only", &out, &inner));
	KVS_CHECK_EQ(out.backend.nroots, 1);
	KVS_CHECK(strcmp(out.backend.roots[0], "/only") == 0);
	/* not split for another backend, nor when the caller set roots[] */
	KVS_TRY(resolve("backend=latency,backend_roots=/a:/b", &out, &inner));
	KVS_CHECK_EQ(out.backend.nroots, 0);
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "backend_roots=/a:/b"));
	cfg.backend.nroots = 1;
	cfg.backend.roots[0] = mine;
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, &log), 0);
	KVS_CHECK_EQ(out.backend.nroots, 1);
	KVS_CHECK(out.backend.roots[0] == mine);
	/* no string: left to kvs_backend_open */
	KVS_TRY(resolve("", &out, &inner));
	KVS_CHECK_EQ(out.backend.nroots, 0);

	/* a string set in the struct is checked as the parser would */
	static const char *const bad[] = { "rel", "/a::/b", "/a:", ":/a",
					   "/1:/2:/3:/4:/5:/6:/7:/8:/9" };
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		fresh(&cfg);
		strcpy(cfg.backend_roots, bad[i]);
		KVS_TRY(resolve_bad_cfg(&cfg, "invalid backend_roots"));
	}
	fresh(&cfg);
	memset(cfg.backend_roots, '/', sizeof(cfg.backend_roots));
	KVS_TRY(resolve_bad_cfg(&cfg, "invalid backend_roots"));
	return KVS_TEST_PASS;
}

/* The store's own fields, set in the struct: each out-of-range value by name. */
static kvs_test_rc test_resolve_store_fields(void)
{
	struct kvs_store_config cfg;
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	struct kvs_log log = { test_log, NULL };

#define FIELD_BAD(assign, want)                         	do {                                            		fresh(&cfg);                            		assign;                                 		KVS_TRY(resolve_bad_cfg(&cfg, want));   	} while (0)
	FIELD_BAD(cfg.timeout_ns = 0, "invalid timeout_ms = 0 ns");
	FIELD_BAD(cfg.timeout_ns = 86400ull * 1000000000ull + 1, "invalid timeout_ms");
	FIELD_BAD(cfg.copy_delay_ns = 1000000001, "invalid copy_delay_us");
	FIELD_BAD(cfg.copy_engine = 3, "invalid copy_engine = 3");
	FIELD_BAD(cfg.dispatch_order = 2, "invalid dispatch_order = 2");
	FIELD_BAD(cfg.dump_wait = 2, "invalid dump_wait = 2");
	FIELD_BAD(cfg.prealloc = 2, "invalid prealloc = 2");
	FIELD_BAD(cfg.share_buffer = 2, "invalid share_buffer_enable = 2");
	FIELD_BAD(cfg.waiting_queue_depth = 0, "invalid waiting_queue_depth = 0");
	FIELD_BAD(cfg.waiting_queue_depth = 4097, "invalid waiting_queue_depth = 4097");
	FIELD_BAD(cfg.running_queue_depth = 0, "invalid running_queue_depth = 0");
	FIELD_BAD(cfg.running_queue_depth = 65537, "invalid running_queue_depth = 65537");
	FIELD_BAD(cfg.cache_stream_number = 0, "invalid cache_stream_number = 0");
	FIELD_BAD(cfg.cache_stream_number = 17, "invalid cache_stream_number = 17");
	FIELD_BAD(cfg.register_chunk_bytes = (1ull << 20) - 1, "invalid register_chunk_size");
	FIELD_BAD(cfg.register_chunk_bytes = (32ull << 30) + 1, "invalid register_chunk_size");
	FIELD_BAD(cfg.register_delay_ns = 1000000001, "invalid register_delay_us");
	FIELD_BAD(cfg.register_delay_ns = 1000, "set copy_engine=host"); /* auto: cuda */
	FIELD_BAD(cfg.copy_land_delay_ns = 10000000001ull, "invalid copy_land_delay_us");
	FIELD_BAD(cfg.copy_land_delay_ns = 1000, "set copy_engine=host");
	FIELD_BAD(cfg.reserved[4] = 1, "invalid reserved");
#undef FIELD_BAD
	/* the edges are fine */
	fresh(&cfg);
	cfg.timeout_ns = 1;
	cfg.copy_delay_ns = 1000000000;
	cfg.waiting_queue_depth = 4096;
	cfg.running_queue_depth = 65536;
	cfg.cache_stream_number = 16;
	cfg.copy_engine = KVS_COPY_ENGINE_CUDA;
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, &log), 0);
	return KVS_TEST_PASS;
}

static void other_log(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	(void)msg;
}

static kvs_test_rc test_resolve_logs(void)
{
	struct kvs_store_config cfg;
	static struct kvs_store_config out;
	struct kvs_backend_config inner;
	int tag;

	fresh(&cfg);
	cfg.log_arg = &tag;
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, NULL), 0);
	KVS_CHECK(out.cache.log == test_log && out.cache.log_arg == &tag);
	KVS_CHECK(out.backend.log == test_log && out.backend.log_arg == &tag);
	/* their own callbacks are kept */
	cfg.cache.log = other_log;
	cfg.backend.log = other_log;
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, NULL), 0);
	KVS_CHECK(out.cache.log == other_log && out.cache.log_arg == NULL);
	KVS_CHECK(out.backend.log == other_log);
	/* with no log argument, errors go to cfg's callback */
	cfg.timeout_ns = 0;
	last_log[0] = '\0';
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, &out, &inner, NULL), -EINVAL);
	KVS_CHECK(strstr(last_log, "timeout_ms") != NULL);
	KVS_CHECK_EQ(kvs_store_config_resolve(NULL, &out, &inner, NULL), -EINVAL);
	KVS_CHECK_EQ(kvs_store_config_resolve(&cfg, NULL, &inner, NULL), -EINVAL);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "resolve_geometry", test_resolve_geometry },
	{ "resolve_share_buffer", test_resolve_share_buffer },
	{ "resolve_fault", test_resolve_fault },
	{ "resolve_roots", test_resolve_roots },
	{ "resolve_store_fields", test_resolve_store_fields },
	{ "resolve_logs", test_resolve_logs },
};

KVS_TEST_MAIN(cases)
