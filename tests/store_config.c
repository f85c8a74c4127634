/*
 * tests/store_config.c — the store's key=value parser (store/parse.c): every
 * key of kvshare.h's list round-trips into its field and nothing else; every
 * key refuses an empty, malformed, overflowing or out-of-range value with
 * -EINVAL and an error (err buffer and log line, the same text) that names it;
 * unknown keys get a "did you mean"; duplicate keys and empty items are
 * refused.  Resolution is tests/store_resolve.c's.  No cache is opened.
 */
#include "store_config_util.h"

/* Every key kvshare.h lists for kvs_store_config_parse. */
static const char *const all_keys[] = {
	"unique_id", "device_id", "local_rank_size", "shard_size", "block_size",
	"tensor_size", "tensor_size_list", "cache_buffer_capacity_gb", "reserved_slots",
	"share_buffer_enable", "persist", "hugetlb", "numa", "numa_node", "wait", "spin_us",
	"backend", "backend_roots", "io_engine", "io_direct", "io_queue_depth", "io_threads",
	"fsync", "latency_us", "latency_queue_depth", "fault_error_ppm", "fault_short_ppm",
	"fault_delay_us", "fault_seed", "copy_engine", "cache_stream_number", "dispatch_order",
	"dump_wait", "prealloc", "waiting_queue_depth", "running_queue_depth", "timeout_ms",
	"copy_delay_us", "cpu_affinity_cores", "prefault_threads", "register_chunk_size",
	"register_delay_us", "copy_land_delay_us", "redis_endpoints", "redis_db", "redis_user",
	"redis_password",
	"redis_password_file", "redis_connections", "redis_connect_timeout_ms",
	"redis_command_timeout_ms", "redis_key_prefix", "redis_ttl_s", "redis_start_degraded",
	"redis_cluster", "redis_wait_replicas", "layout_tag",
};

/* Keys whose value is an integer (sizes included). */
static const char *const int_keys[] = {
	"device_id", "local_rank_size", "shard_size", "block_size", "tensor_size",
	"reserved_slots", "numa_node", "spin_us", "io_queue_depth", "io_threads", "latency_us",
	"latency_queue_depth", "fault_error_ppm", "fault_short_ppm", "fault_delay_us",
	"fault_seed", "cache_stream_number", "waiting_queue_depth", "running_queue_depth",
	"timeout_ms", "copy_delay_us", "prefault_threads", "register_chunk_size",
	"register_delay_us", "copy_land_delay_us", "redis_db", "redis_connections",
	"redis_connect_timeout_ms",
	"redis_command_timeout_ms", "redis_ttl_s", "redis_wait_replicas", "layout_tag",
};

static const char *const bool_keys[] = {
	"share_buffer_enable", "persist", "io_direct", "fsync", "prealloc", "redis_start_degraded",
	"redis_cluster",
};

static const char *const enum_keys[] = {
	"hugetlb", "numa", "wait", "backend", "io_engine", "copy_engine", "dispatch_order",
	"dump_wait",
};

/* kv (on a fresh config) fails with -EINVAL; err and the one log line are the
 * same text and contain want (and want2 when not NULL). */
static kvs_test_rc parse_bad2(const char *kv, const char *want, const char *want2)
{
	struct kvs_store_config cfg;
	char err[KVS_LOG_LINE_MAX];
	int before, rc;

	fresh(&cfg);
	memset(err, 'x', sizeof(err));
	last_log[0] = '\0';
	before = error_lines;
	rc = kvs_store_config_parse(&cfg, kv, err, sizeof(err));
	if (rc != -EINVAL)
		KVS_FAILF("parse '%s': got %d (%s), want -EINVAL", kv, rc, kvs_strerror(rc));
	if (!memchr(err, '\0', sizeof(err)))
		KVS_FAILF("parse '%s': err not NUL-terminated", kv);
	if (!strstr(err, want))
		KVS_FAILF("parse '%s': error \"%s\" lacks \"%s\"", kv, err, want);
	if (want2 && !strstr(err, want2))
		KVS_FAILF("parse '%s': error \"%s\" lacks \"%s\"", kv, err, want2);
	if (error_lines != before + 1)
		KVS_FAILF("parse '%s': %d error lines logged, want 1", kv, error_lines - before);
	if (strcmp(err, last_log) != 0)
		KVS_FAILF("parse '%s': err \"%s\" differs from the log \"%s\"", kv, err, last_log);
	return KVS_TEST_PASS;
}

/* kv fails naming key ("invalid <key>"; "= " when the value is shown). */
static kvs_test_rc parse_bad_key(const char *kv, const char *key)
{
	char want[96];

	snprintf(want, sizeof(want), "invalid %s = '", key);
	return parse_bad2(kv, want, NULL);
}

static kvs_test_rc test_defaults(void)
{
	struct kvs_store_config cfg;
	struct kvs_cache_config cache;
	struct kvs_backend_config backend;

	memset(&cfg, 0xa5, sizeof(cfg));
	kvs_store_config_init(&cfg);
	kvs_cache_config_init(&cache);
	kvs_backend_config_init(&backend);
	KVS_CHECK(memcmp(&cfg.cache, &cache, sizeof(cache)) == 0);
	KVS_CHECK(memcmp(&cfg.backend, &backend, sizeof(backend)) == 0);
	KVS_CHECK_EQ(cfg.cache.device_id, cache.device_id);
	KVS_CHECK_EQ(cfg.timeout_ns, 10ull * 1000000000ull);
	KVS_CHECK_EQ(cfg.waiting_queue_depth, 64);
	KVS_CHECK_EQ(cfg.running_queue_depth, 256);
	KVS_CHECK_EQ(cfg.cache_stream_number, 1);
	KVS_CHECK_EQ(cfg.prealloc, 1);
	KVS_CHECK_EQ(cfg.share_buffer, 1);
	KVS_CHECK_EQ(cfg.dispatch_order, KVS_DISPATCH_ROTATED);
	KVS_CHECK_EQ(cfg.dump_wait, KVS_DUMP_WAIT_DURABLE);
	KVS_CHECK_EQ(cfg.copy_engine, KVS_COPY_ENGINE_AUTO);
	KVS_CHECK_EQ(cfg.backend.kind, KVS_BACKEND_POSIX);
	KVS_CHECK_EQ(cfg.capacity_bytes | cfg.block_bytes | cfg.tensor_bytes | cfg.copy_delay_ns, 0);
	KVS_CHECK_EQ(cfg.register_chunk_bytes, 4ull << 30);
	KVS_CHECK_EQ(cfg.register_delay_ns | cfg.cache.prefault_threads, 0);
	KVS_CHECK_EQ(cfg.backend_roots[0], 0);
	for (size_t i = 0; i < KVS_ARRAY_LEN(cfg.cpu_affinity); i++)
		KVS_CHECK_EQ(cfg.cpu_affinity[i], 0);
	for (size_t i = 0; i < KVS_ARRAY_LEN(cfg.reserved); i++)
		KVS_CHECK_EQ(cfg.reserved[i], 0);
	KVS_CHECK(cfg.log == NULL && cfg.log_arg == NULL);
	kvs_store_config_init(NULL); /* no-op */
	return KVS_TEST_PASS;
}

/* One good value: after parsing kv on a fresh config, the field at off (width
 * 4 or 8 bytes) holds want, and no byte outside it changed. */
struct good_case {
	const char *kv;
	size_t off, width;
	uint64_t want;
};

#define AT(f) offsetof(struct kvs_store_config, f), sizeof(((struct kvs_store_config *)0)->f)
#define NEG(x) ((uint64_t)(int64_t)(x))

static const struct good_case good[] = {
	{ "device_id=3", AT(cache.device_id), 3 },
	{ "device_id=-1", AT(cache.device_id), NEG(-1) },
	{ "device_id=2147483647", AT(cache.device_id), INT32_MAX },
	{ "device_id=007", AT(cache.device_id), 7 },
	{ "local_rank_size=1", AT(cache.local_rank_size), 1 },
	{ "local_rank_size=64", AT(cache.local_rank_size), 64 },
	{ "shard_size=4096", AT(cache.slot_bytes), 4096 },
	{ "shard_size=4k", AT(cache.slot_bytes), 4096 },
	{ "shard_size=4K", AT(cache.slot_bytes), 4096 },
	{ "shard_size=2m", AT(cache.slot_bytes), 2u << 20 },
	{ "shard_size=1G", AT(cache.slot_bytes), GIB },
	{ "shard_size=1024g", AT(cache.slot_bytes), UINT64_C(1) << 40 },
	{ "block_size=8m", AT(block_bytes), 8u << 20 },
	{ "block_size=16777215g", AT(block_bytes), UINT64_C(16777215) << 30 },
	{ "tensor_size=32k", AT(tensor_bytes), 32768 },
	{ "cache_buffer_capacity_gb=12", AT(capacity_bytes), 12 * GIB },
	{ "cache_buffer_capacity_gb=0.5", AT(capacity_bytes), GIB / 2 },
	{ "cache_buffer_capacity_gb=12.25", AT(capacity_bytes), 12 * GIB + GIB / 4 },
	{ "cache_buffer_capacity_gb=1.500", AT(capacity_bytes), GIB + GIB / 2 },
	{ "cache_buffer_capacity_gb=3.000000000000000000000000", AT(capacity_bytes), 3 * GIB },
	/* 0.1 GiB = 107374182.4 bytes: rounded down, exactly */
	{ "cache_buffer_capacity_gb=0.1", AT(capacity_bytes), 107374182 },
	{ "cache_buffer_capacity_gb=0.000000001", AT(capacity_bytes), 1 },
	{ "cache_buffer_capacity_gb=0.123456789", AT(capacity_bytes), 132560717 },
	/* (2^34 - 1) GiB + 0.999999999 GiB = 2^64 - 2 bytes: the largest near the edge */
	{ "cache_buffer_capacity_gb=17179869183.999999999", AT(capacity_bytes), UINT64_MAX - 1 },
	{ "reserved_slots=7", AT(cache.reserved_slots), 7 },
	{ "reserved_slots=4294967295", AT(cache.reserved_slots), UINT32_MAX },
	{ "share_buffer_enable=0", AT(share_buffer), 0 },
	{ "share_buffer_enable=false", AT(share_buffer), 0 },
	{ "share_buffer_enable=1", AT(share_buffer), 1 },
	{ "persist=1", AT(cache.flags), KVS_CACHE_PERSIST },
	{ "persist=yes", AT(cache.flags), KVS_CACHE_PERSIST },
	{ "persist=off", AT(cache.flags), 0 },
	{ "hugetlb=auto", AT(cache.hugetlb), KVS_HUGETLB_AUTO },
	{ "hugetlb=required", AT(cache.hugetlb), KVS_HUGETLB_REQUIRED },
	{ "hugetlb=off", AT(cache.hugetlb), KVS_HUGETLB_OFF },
	{ "numa=auto", AT(cache.numa), KVS_NUMA_AUTO },
	{ "numa=off", AT(cache.numa), KVS_NUMA_OFF },
	{ "numa=required", AT(cache.numa), KVS_NUMA_REQUIRED },
	{ "numa_node=0", AT(cache.numa_node), 0 },
	{ "numa_node=63", AT(cache.numa_node), 63 },
	{ "numa_node=-1", AT(cache.numa_node), NEG(-1) },
	{ "wait=auto", AT(cache.wait), KVS_WAIT_AUTO },
	{ "wait=futex", AT(cache.wait), KVS_WAIT_FUTEX },
	{ "wait=spin", AT(cache.wait), KVS_WAIT_SPIN },
	{ "spin_us=0", AT(cache.spin_ns), 0 },
	{ "spin_us=5", AT(cache.spin_ns), 5000 },
	{ "spin_us=4294967", AT(cache.spin_ns), 4294967000u },
	{ "backend=posix", AT(backend.kind), KVS_BACKEND_POSIX },
	{ "backend=none", AT(backend.kind), KVS_BACKEND_NONE },
	{ "backend=latency", AT(backend.kind), KVS_BACKEND_LATENCY },
	{ "backend=redis", AT(backend.kind), KVS_BACKEND_REDIS },
	{ "io_engine=auto", AT(backend.io_engine), KVS_IO_ENGINE_AUTO },
	{ "io_engine=uring", AT(backend.io_engine), KVS_IO_ENGINE_URING },
	{ "io_engine=pool", AT(backend.io_engine), KVS_IO_ENGINE_POOL },
	{ "io_direct=1", AT(backend.flags), KVS_BACKEND_F_IO_DIRECT },
	{ "io_direct=ON", AT(backend.flags), KVS_BACKEND_F_IO_DIRECT },
	{ "io_direct=0", AT(backend.flags), 0 },
	{ "io_queue_depth=1", AT(backend.queue_depth), 1 },
	{ "io_queue_depth=4096", AT(backend.queue_depth), 4096 },
	{ "io_threads=1", AT(backend.pool_threads), 1 },
	{ "io_threads=64", AT(backend.pool_threads), 64 },
	{ "fsync=0", AT(backend.flags), KVS_BACKEND_F_NO_FSYNC },
	{ "fsync=False", AT(backend.flags), KVS_BACKEND_F_NO_FSYNC },
	{ "fsync=1", AT(backend.flags), 0 },
	{ "latency_us=0", AT(backend.latency_ns), 0 },
	{ "latency_us=250", AT(backend.latency_ns), 250000 },
	{ "latency_us=3600000000", AT(backend.latency_ns), UINT64_C(3600000000000) },
	{ "latency_queue_depth=0", AT(backend.latency_queue_depth), 0 },
	{ "latency_queue_depth=4294967295", AT(backend.latency_queue_depth), UINT32_MAX },
	{ "fault_error_ppm=0", AT(backend.fault_error_ppm), 0 },
	{ "fault_error_ppm=1000000", AT(backend.fault_error_ppm), 1000000 },
	{ "fault_short_ppm=5", AT(backend.fault_short_ppm), 5 },
	{ "fault_short_ppm=1000000", AT(backend.fault_short_ppm), 1000000 },
	{ "fault_delay_us=7", AT(backend.fault_delay_ns), 7000 },
	{ "fault_delay_us=3600000000", AT(backend.fault_delay_ns), UINT64_C(3600000000000) },
	{ "fault_seed=0", AT(backend.fault_seed), 0 },
	{ "fault_seed=18446744073709551615", AT(backend.fault_seed), UINT64_MAX },
	{ "copy_engine=auto", AT(copy_engine), KVS_COPY_ENGINE_AUTO },
	{ "copy_engine=host", AT(copy_engine), KVS_COPY_ENGINE_HOST },
	{ "copy_engine=cuda", AT(copy_engine), KVS_COPY_ENGINE_CUDA },
	{ "cache_stream_number=1", AT(cache_stream_number), 1 },
	{ "cache_stream_number=16", AT(cache_stream_number), 16 },
	{ "dispatch_order=rotated", AT(dispatch_order), KVS_DISPATCH_ROTATED },
	{ "dispatch_order=natural", AT(dispatch_order), KVS_DISPATCH_NATURAL },
	{ "dump_wait=durable", AT(dump_wait), KVS_DUMP_WAIT_DURABLE },
	{ "dump_wait=cached", AT(dump_wait), KVS_DUMP_WAIT_CACHED },
	{ "prealloc=0", AT(prealloc), 0 },
	{ "prealloc=no", AT(prealloc), 0 },
	{ "prealloc=FALSE", AT(prealloc), 0 },
	{ "prealloc=true", AT(prealloc), 1 },
	{ "waiting_queue_depth=1", AT(waiting_queue_depth), 1 },
	{ "waiting_queue_depth=4096", AT(waiting_queue_depth), 4096 },
	{ "running_queue_depth=1", AT(running_queue_depth), 1 },
	{ "running_queue_depth=65536", AT(running_queue_depth), 65536 },
	{ "timeout_ms=1", AT(timeout_ns), 1000000 },
	{ "timeout_ms=86400000", AT(timeout_ns), UINT64_C(86400000000000) },
	{ "copy_delay_us=0", AT(copy_delay_ns), 0 },
	{ "copy_delay_us=1000000", AT(copy_delay_ns), 1000000000 },
	{ "prefault_threads=0", AT(cache.prefault_threads), 0 },
	{ "prefault_threads=64", AT(cache.prefault_threads), 64 },
	{ "register_chunk_size=1m", AT(register_chunk_bytes), UINT64_C(1) << 20 },
	{ "register_chunk_size=32g", AT(register_chunk_bytes), UINT64_C(32) << 30 },
	{ "register_delay_us=0", AT(register_delay_ns), 0 },
	{ "register_delay_us=1000000", AT(register_delay_ns), 1000000000 },
	{ "redis_db=0", AT(backend.redis.db), 0 },
	{ "redis_db=2147483647", AT(backend.redis.db), INT32_MAX },
	{ "redis_connections=1", AT(backend.redis.connections), 1 },
	{ "redis_connections=64", AT(backend.redis.connections), 64 },
	{ "redis_connect_timeout_ms=1", AT(backend.redis.connect_timeout_ns), 1000000 },
	{ "redis_connect_timeout_ms=3600000", AT(backend.redis.connect_timeout_ns),
	  UINT64_C(3600000000000) },
	{ "redis_command_timeout_ms=250", AT(backend.redis.command_timeout_ns), 250000000 },
	{ "redis_ttl_s=0", AT(backend.redis.ttl_ms), 0 },
	{ "redis_ttl_s=86400", AT(backend.redis.ttl_ms), 86400000 },
	{ "redis_start_degraded=1", AT(backend.redis.start_degraded), 1 },
	{ "redis_start_degraded=false", AT(backend.redis.start_degraded), 0 },
	{ "redis_cluster=1", AT(backend.redis.cluster), 1 },
	{ "redis_wait_replicas=1", AT(backend.redis.wait_replicas), 1 },
	{ "layout_tag=0", AT(backend.layout_tag), 0 },
	{ "layout_tag=18446744073709551615", AT(backend.layout_tag), UINT64_MAX },
};
#undef AT

static kvs_test_rc check_good(const struct good_case *g)
{
	struct kvs_store_config before, cfg;
	const unsigned char *a = (const unsigned char *)&before, *b = (const unsigned char *)&cfg;
	uint64_t got = 0;

	fresh(&before);
	cfg = before;
	KVS_TRY(parse_ok(&cfg, g->kv));
	if (g->width == 4) {
		uint32_t w;
		memcpy(&w, b + g->off, 4);
		got = w;
		if (got != (uint32_t)g->want)
			KVS_FAILF("'%s': field holds %llu, want %llu", g->kv, (unsigned long long)got,
				  (unsigned long long)(uint32_t)g->want);
	} else {
		memcpy(&got, b + g->off, 8);
		if (got != g->want)
			KVS_FAILF("'%s': field holds %llu, want %llu", g->kv, (unsigned long long)got,
				  (unsigned long long)g->want);
	}
	for (size_t i = 0; i < sizeof(cfg); i++)
		if (a[i] != b[i] && (i < g->off || i >= g->off + g->width))
			KVS_FAILF("'%s': byte %zu changed, outside the field [%zu, %zu)", g->kv, i,
				  g->off, g->off + g->width);
	return KVS_TEST_PASS;
}

/* Every good value of the table, each on a fresh config: the key round-trips
 * into its field and touches no other byte (all_keys_at_once has them together). */
static kvs_test_rc test_good_values(void)
{
	for (size_t i = 0; i < KVS_ARRAY_LEN(good); i++)
		KVS_TRY(check_good(&good[i]));
	return KVS_TEST_PASS;
}

/* Every documented key is known to the parser: an empty value is "invalid
 * <key>", never "unknown key". */
static kvs_test_rc test_every_key_empty_value(void)
{
	char kv[64];

	for (size_t i = 0; i < KVS_ARRAY_LEN(all_keys); i++) {
		snprintf(kv, sizeof(kv), "%s=", all_keys[i]);
		KVS_TRY(parse_bad_key(kv, all_keys[i]));
		KVS_TRY(parse_bad2(kv, "empty value", NULL));
	}
	return KVS_TEST_PASS;
}

/* Integers are decimal digits only: no sign, space, base, exponent or fraction;
 * 64-bit overflow is detected, never wrapped. */
static kvs_test_rc test_int_malformed(void)
{
	static const char *const bad_values[] = {
		"99999999999999999999", "18446744073709551616", "+1", "1 2", "0x10",
		"1e3", "1.0", "abc", "--1", "1-", "-2", "1k5", "k", "1t", "1kb", "-", "1_000",
		"\xff", "1\x7f",
	};
	char kv[128];

	for (size_t i = 0; i < KVS_ARRAY_LEN(int_keys); i++)
		for (size_t j = 0; j < KVS_ARRAY_LEN(bad_values); j++) {
			snprintf(kv, sizeof(kv), "%s=%s", int_keys[i], bad_values[j]);
			KVS_TRY(parse_bad_key(kv, int_keys[i]));
		}
	/* overflow is named as such */
	KVS_TRY(parse_bad2("timeout_ms=99999999999999999999", "invalid timeout_ms", "overflows"));
	KVS_TRY(parse_bad2("fault_seed=18446744073709551616", "invalid fault_seed", "overflows"));
	KVS_TRY(parse_bad2("shard_size=17179869184g", "invalid shard_size", "overflows"));
	KVS_TRY(parse_bad2("block_size=18014398509481984k", "invalid block_size", "overflows"));
	KVS_TRY(parse_bad2("device_id=-99999999999999999999", "invalid device_id", "overflows"));
	/* values that would wrap to a valid one (2^64 + 1, 2^64 + 1024) */
	KVS_TRY(parse_bad2("fault_seed=18446744073709551617", "invalid fault_seed", "overflows"));
	KVS_TRY(parse_bad2("block_size=18014398509481985k", "invalid block_size", "overflows"));
	KVS_TRY(parse_bad2("cache_buffer_capacity_gb=17179869185", "cache_buffer_capacity_gb",
			   "overflows"));
	KVS_TRY(parse_bad2("device_id=9223372036854775808", "invalid device_id", "overflows"));
	KVS_TRY(parse_bad2("device_id=-9223372036854775808", "invalid device_id", NULL));
	KVS_TRY(parse_bad2("numa_node=-9223372036854775809", "invalid numa_node", NULL));
	return KVS_TEST_PASS;
}

/* Each integer key's range, one past each end. */
static kvs_test_rc test_int_range(void)
{
	static const struct {
		const char *kv, *key;
	} cases[] = {
		{ "device_id=-2", "device_id" },
		{ "device_id=2147483648", "device_id" },
		{ "local_rank_size=0", "local_rank_size" },
		{ "local_rank_size=65", "local_rank_size" },
		{ "shard_size=0", "shard_size" },
		{ "shard_size=1099511627777", "shard_size" },
		{ "shard_size=1025g", "shard_size" },
		{ "block_size=0", "block_size" },
		{ "block_size=0k", "block_size" },
		{ "tensor_size=0", "tensor_size" },
		{ "tensor_size=2048g", "tensor_size" },
		{ "reserved_slots=4294967296", "reserved_slots" },
		{ "numa_node=-2", "numa_node" },
		{ "numa_node=64", "numa_node" },
		{ "spin_us=4294968", "spin_us" },
		{ "io_queue_depth=0", "io_queue_depth" },
		{ "io_queue_depth=4097", "io_queue_depth" },
		{ "io_threads=0", "io_threads" },
		{ "io_threads=65", "io_threads" },
		{ "latency_us=3600000001", "latency_us" },
		{ "latency_queue_depth=4294967296", "latency_queue_depth" },
		{ "fault_error_ppm=1000001", "fault_error_ppm" },
		{ "fault_short_ppm=1000001", "fault_short_ppm" },
		{ "fault_delay_us=3600000001", "fault_delay_us" },
		{ "cache_stream_number=0", "cache_stream_number" },
		{ "cache_stream_number=17", "cache_stream_number" },
		{ "waiting_queue_depth=0", "waiting_queue_depth" },
		{ "waiting_queue_depth=4097", "waiting_queue_depth" },
		{ "running_queue_depth=0", "running_queue_depth" },
		{ "running_queue_depth=65537", "running_queue_depth" },
		{ "timeout_ms=0", "timeout_ms" },
		{ "timeout_ms=86400001", "timeout_ms" },
		{ "copy_delay_us=1000001", "copy_delay_us" },
		{ "prefault_threads=65", "prefault_threads" },
		{ "register_chunk_size=1048575", "register_chunk_size" },
		{ "register_chunk_size=33g", "register_chunk_size" },
		{ "register_delay_us=1000001", "register_delay_us" },
		{ "copy_land_delay_us=10000001", "copy_land_delay_us" },
		{ "redis_db=2147483648", "redis_db" },
		{ "redis_connections=0", "redis_connections" },
		{ "redis_connections=65", "redis_connections" },
		{ "redis_connect_timeout_ms=0", "redis_connect_timeout_ms" },
		{ "redis_connect_timeout_ms=3600001", "redis_connect_timeout_ms" },
		{ "redis_command_timeout_ms=0", "redis_command_timeout_ms" },
		{ "redis_ttl_s=9007199254741", "redis_ttl_s" },
		{ "redis_wait_replicas=17", "redis_wait_replicas" },
	};

	for (size_t i = 0; i < KVS_ARRAY_LEN(cases); i++)
		KVS_TRY(parse_bad_key(cases[i].kv, cases[i].key));
	KVS_TRY(parse_bad2("io_threads=65", "invalid io_threads = '65'", "want 1..64"));
	KVS_TRY(parse_bad2("device_id=-2", "invalid device_id = '-2'", "want -1..2147483647"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bool_and_enum_bad(void)
{
	static const char *const bad_bools[] = { "2", "yes!", "y", "tru", "10", "onn", "-1",
						 "1 0", "truefalse" };
	static const char *const bad_enums[] = { "bogus", "AUTO", "au to", "Posix",
						 "fault", "user", "3", "0", "spinn",
						 "durable\x01" };
	char kv[96];

	for (size_t i = 0; i < KVS_ARRAY_LEN(bool_keys); i++)
		for (size_t j = 0; j < KVS_ARRAY_LEN(bad_bools); j++) {
			snprintf(kv, sizeof(kv), "%s=%s", bool_keys[i], bad_bools[j]);
			KVS_TRY(parse_bad_key(kv, bool_keys[i]));
		}
	for (size_t i = 0; i < KVS_ARRAY_LEN(enum_keys); i++)
		for (size_t j = 0; j < KVS_ARRAY_LEN(bad_enums); j++) {
			snprintf(kv, sizeof(kv), "%s=%s", enum_keys[i], bad_enums[j]);
			KVS_TRY(parse_bad_key(kv, enum_keys[i]));
		}
	KVS_TRY(parse_bad2("hugetlb=on", "invalid hugetlb = 'on'", "want auto|required|off"));
	KVS_TRY(parse_bad2("backend=fault", "invalid backend", "want posix|none|latency"));
	KVS_TRY(parse_bad2("copy_engine=gpu", "invalid copy_engine", "want auto|host|cuda"));
	KVS_TRY(parse_bad2("persist=maybe", "invalid persist = 'maybe'", "true/false"));
	return KVS_TEST_PASS;
}

/* cache_buffer_capacity_gb: decimal GiB, integer arithmetic only. */
static kvs_test_rc test_capacity_gb_bad(void)
{
	static const char *const bad_values[] = {
		"abc", ".5", "5.", "-1", "+1", "0", "0.0", "00.000", "1.2.3", "1e3", "1 5",
		"0x1", "1.5g", "1g", "0.0000000001", "0.1234567891",
		"17179869184", "17179869183.9999999991", "99999999999999999999",
		"99999999999999999999.5", "1.99999999999999999999999",
	};
	char kv[96];

	for (size_t i = 0; i < KVS_ARRAY_LEN(bad_values); i++) {
		snprintf(kv, sizeof(kv), "cache_buffer_capacity_gb=%s", bad_values[i]);
		KVS_TRY(parse_bad_key(kv, "cache_buffer_capacity_gb"));
	}
	KVS_TRY(parse_bad2("cache_buffer_capacity_gb=17179869184", "cache_buffer_capacity_gb",
			   "overflows"));
	KVS_TRY(parse_bad2("cache_buffer_capacity_gb=0.0", "cache_buffer_capacity_gb", "want > 0"));
	KVS_TRY(parse_bad2("cache_buffer_capacity_gb=0.0000000001", "cache_buffer_capacity_gb",
			   "more than 9 decimals"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_unique_id(void)
{
	struct kvs_store_config cfg;
	char kv[128], id65[66];

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "unique_id=model-7B_tp8.v2"));
	KVS_CHECK(strcmp(cfg.cache.unique_id, "model-7B_tp8.v2") == 0);
	/* a shorter id replaces a longer one completely */
	KVS_TRY(parse_ok(&cfg, "unique_id=a"));
	KVS_CHECK(strcmp(cfg.cache.unique_id, "a") == 0);
	for (size_t i = 1; i < sizeof(cfg.cache.unique_id); i++)
		KVS_CHECK_EQ(cfg.cache.unique_id[i], 0);
	memset(id65, 'x', 64);
	id65[64] = '\0';
	snprintf(kv, sizeof(kv), "unique_id=%s", id65);
	KVS_TRY(parse_ok(&cfg, kv));
	KVS_CHECK(strcmp(cfg.cache.unique_id, id65) == 0);

	id65[64] = 'x';
	id65[65] = '\0';
	snprintf(kv, sizeof(kv), "unique_id=%s", id65);
	KVS_TRY(parse_bad2(kv, "invalid unique_id", "longer than 64"));
	KVS_TRY(parse_bad_key("unique_id=a b", "unique_id"));
	KVS_TRY(parse_bad_key("unique_id=a/b", "unique_id"));
	KVS_TRY(parse_bad_key("unique_id=.", "unique_id"));
	KVS_TRY(parse_bad_key("unique_id=..", "unique_id"));
	KVS_TRY(parse_bad_key("unique_id=caf\xc3\xa9", "unique_id"));
	KVS_TRY(parse_bad_key("unique_id=a:b", "unique_id"));
	/* unprintable bytes are quoted as '?' */
	KVS_TRY(parse_bad2("unique_id=a\tb", "invalid unique_id = 'a?b'", NULL));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_tensor_size_list(void)
{
	struct kvs_store_config cfg;
	char *kv;
	size_t len;

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "tensor_size_list=32768:4096"));
	KVS_CHECK_EQ(cfg.cache.tensor_count, 2);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[0], 32768);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[1], 4096);
	KVS_TRY(parse_ok(&cfg, "tensor_size_list=1k:2m:1g"));
	KVS_CHECK_EQ(cfg.cache.tensor_count, 3);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[0], 1024);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[1], 2u << 20);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[2], GIB);
	/* a shorter list clears the entries after it */
	KVS_TRY(parse_ok(&cfg, "tensor_size_list=5"));
	KVS_CHECK_EQ(cfg.cache.tensor_count, 1);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[0], 5);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[1], 0);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[2], 0);

	/* KVS_MAX_TENSORS entries, then one more */
	len = KVS_MAX_TENSORS * 2 + 32;
	kv = malloc(len + 8);
	KVS_CHECK(kv != NULL);
	strcpy(kv, "tensor_size_list=");
	for (int i = 0; i < KVS_MAX_TENSORS; i++)
		strcat(kv, i ? ":1" : "1");
	KVS_TRY(parse_ok(&cfg, kv));
	KVS_CHECK_EQ(cfg.cache.tensor_count, KVS_MAX_TENSORS);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[KVS_MAX_TENSORS - 1], 1);
	strcat(kv, ":1");
	{
		kvs_test_rc rc = parse_bad2(kv, "invalid tensor_size_list", "more than 256 entries");
		free(kv);
		KVS_TRY(rc);
	}

	/* a bad list changes nothing */
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "tensor_size_list=1:2"));
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "tensor_size_list=4:0", NULL, 0), -EINVAL);
	KVS_CHECK_EQ(cfg.cache.tensor_count, 2);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[0], 1);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[1], 2);

	static const char *const bad_lists[] = {
		"32768::4096", ":4096", "4096:", ":", "0", "4096:0", "4096:abc", "4096:-1",
		"4096:99999999999999999999", "2t", "4096,", "1099511627777", "1:1025g", "4096; 1",
		"4096 :1",
	};
	char buf[96];
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad_lists); i++) {
		snprintf(buf, sizeof(buf), "tensor_size_list=%s", bad_lists[i]);
		if (strchr(bad_lists[i], ','))
			KVS_TRY(parse_bad2(buf, "empty item", NULL)); /* "4096," then "" */
		else
			KVS_TRY(parse_bad_key(buf, "tensor_size_list"));
	}
	KVS_TRY(parse_bad2("tensor_size_list=1:2:99999999999999999999", "tensor_size_list",
			   "entry 3 overflows"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_backend_roots(void)
{
	struct kvs_store_config cfg;
	char kv[KVS_STORE_ROOTS_MAX + 64];
	const char *dummy = "/caller";

	fresh(&cfg);
	cfg.backend.nroots = 1;
	cfg.backend.roots[0] = dummy;
	KVS_TRY(parse_ok(&cfg, "backend_roots=/a:/mnt/nvme1/kv"));
	KVS_CHECK(strcmp(cfg.backend_roots, "/a:/mnt/nvme1/kv") == 0);
	/* the string replaces roots the caller set */
	KVS_CHECK_EQ(cfg.backend.nroots, 0);
	KVS_CHECK(cfg.backend.roots[0] == NULL);
	KVS_TRY(parse_ok(&cfg, "backend_roots=/"));
	KVS_CHECK(strcmp(cfg.backend_roots, "/") == 0);
	for (size_t i = 1; i < sizeof(cfg.backend_roots); i++)
		KVS_CHECK_EQ(cfg.backend_roots[i], 0);
	KVS_TRY(parse_ok(&cfg, "backend_roots=/1:/2:/3:/4:/5:/6:/7:/8"));

	/* the longest string that fits, then one more byte */
	strcpy(kv, "backend_roots=/");
	memset(kv + strlen(kv), 'r', KVS_STORE_ROOTS_MAX - 1);
	kv[strlen("backend_roots=") + KVS_STORE_ROOTS_MAX] = '\0';
	KVS_TRY(parse_ok(&cfg, kv));
	KVS_CHECK_EQ(strlen(cfg.backend_roots), KVS_STORE_ROOTS_MAX);
	strcat(kv, "r");
	KVS_TRY(parse_bad2(kv, "invalid backend_roots", "longer than 1023"));
	/* the shown value is cut ("...") and the message stays a line */
	KVS_CHECK(strstr(last_log, "...") != NULL);
	KVS_CHECK(strlen(last_log) < 200);

	static const char *const bad_roots[] = { "rel/path", "/a::/b", "/a:", ":/a", ":",
						 "/1:/2:/3:/4:/5:/6:/7:/8:/9", "./a", "~/a" };
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad_roots); i++) {
		snprintf(kv, sizeof(kv), "backend_roots=%s", bad_roots[i]);
		KVS_TRY(parse_bad_key(kv, "backend_roots"));
	}
	KVS_TRY(parse_bad2("backend_roots=/1:/2:/3:/4:/5:/6:/7:/8:/9", "backend_roots",
			   "more than 8 roots"));
	return KVS_TEST_PASS;
}

static int cpu_set(const struct kvs_store_config *cfg, unsigned c)
{
	return (int)((cfg->cpu_affinity[c / 64] >> (c % 64)) & 1);
}

static kvs_test_rc test_cpu_affinity(void)
{
	struct kvs_store_config cfg;
	int n = 0;

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "cpu_affinity_cores=2:4-7"));
	for (unsigned c = 0; c < KVS_STORE_MAX_CPUS; c++)
		n += cpu_set(&cfg, c);
	KVS_CHECK_EQ(n, 5);
	KVS_CHECK(cpu_set(&cfg, 2) && cpu_set(&cfg, 4) && cpu_set(&cfg, 7) && !cpu_set(&cfg, 3));
	/* a new value replaces the mask; ranges may cross words; duplicates are fine */
	KVS_TRY(parse_ok(&cfg, "cpu_affinity_cores=60-70:1023:1023:5-5"));
	n = 0;
	for (unsigned c = 0; c < KVS_STORE_MAX_CPUS; c++)
		n += cpu_set(&cfg, c);
	KVS_CHECK_EQ(n, 13);
	KVS_CHECK(!cpu_set(&cfg, 2) && cpu_set(&cfg, 64) && cpu_set(&cfg, 1023) && cpu_set(&cfg, 5));
	KVS_TRY(parse_ok(&cfg, "cpu_affinity_cores=0-1023"));
	for (size_t i = 0; i < KVS_ARRAY_LEN(cfg.cpu_affinity); i++)
		KVS_CHECK_EQ(cfg.cpu_affinity[i], UINT64_MAX);

	static const char *const bad_cpus[] = { "1024", "4-2", "a", "1-", "-1", "1:", ":1",
						"1--2", "0-1024", "99999999999999999999",
						"1-99999999999999999999", "+1", "1 -2", "0x1",
						"1::2" };
	char kv[96];
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad_cpus); i++) {
		snprintf(kv, sizeof(kv), "cpu_affinity_cores=%s", bad_cpus[i]);
		KVS_TRY(parse_bad_key(kv, "cpu_affinity_cores"));
	}
	KVS_TRY(parse_bad2("cpu_affinity_cores=1:4-2", "cpu_affinity_cores", "entry 2"));
	KVS_TRY(parse_bad2("cpu_affinity_cores=1024", "cpu_affinity_cores", "want < 1024"));
	return KVS_TEST_PASS;
}

/* A flag key sets and clears its own bit, leaving the others. */
static kvs_test_rc test_flag_bits(void)
{
	struct kvs_store_config cfg;

	fresh(&cfg);
	cfg.cache.flags = KVS_CACHE_ATTACH;
	KVS_TRY(parse_ok(&cfg, "persist=1,io_direct=1,fsync=0"));
	KVS_CHECK_EQ(cfg.cache.flags, KVS_CACHE_ATTACH | KVS_CACHE_PERSIST);
	KVS_CHECK_EQ(cfg.backend.flags, KVS_BACKEND_F_IO_DIRECT | KVS_BACKEND_F_NO_FSYNC);
	KVS_TRY(parse_ok(&cfg, "persist=0,fsync=1"));
	KVS_CHECK_EQ(cfg.cache.flags, KVS_CACHE_ATTACH);
	KVS_CHECK_EQ(cfg.backend.flags, KVS_BACKEND_F_IO_DIRECT);
	KVS_TRY(parse_ok(&cfg, "io_direct=no"));
	KVS_CHECK_EQ(cfg.backend.flags, 0);
	return KVS_TEST_PASS;
}

/* A string naming every key once. */
static kvs_test_rc test_all_keys_at_once(void)
{
	static const char kv[] =
		"unique_id=all,device_id=2,local_rank_size=4,shard_size=64k,block_size=256k,"
		"tensor_size=16k,tensor_size_list=16k:16k:16k:16k,cache_buffer_capacity_gb=0.25,"
		"reserved_slots=3,share_buffer_enable=1,persist=1,hugetlb=off,numa=off,"
		"numa_node=1,wait=spin,spin_us=20,backend=latency,backend_roots=/x:/y,"
		"io_engine=pool,io_direct=0,io_queue_depth=32,io_threads=2,fsync=0,latency_us=10,"
		"latency_queue_depth=8,fault_error_ppm=1,fault_short_ppm=2,fault_delay_us=3,"
		"fault_seed=4,copy_engine=host,cache_stream_number=2,dispatch_order=natural,"
		"dump_wait=cached,prealloc=0,waiting_queue_depth=16,running_queue_depth=128,"
		"timeout_ms=2000,copy_delay_us=5,cpu_affinity_cores=0-1,prefault_threads=3,"
		"register_chunk_size=2m,register_delay_us=7,copy_land_delay_us=8,"
		"redis_endpoints=/r.sock;h:1,"
		"redis_db=3,redis_user=u,redis_password=p,redis_password_file=/pw,"
		"redis_connections=4,redis_connect_timeout_ms=5,redis_command_timeout_ms=6,"
		"redis_key_prefix=kv:,redis_ttl_s=9,redis_start_degraded=1,redis_cluster=1,"
		"redis_wait_replicas=2,layout_tag=77";
	struct kvs_store_config cfg;
	size_t items = 1;

	for (const char *s = kv; *s; s++)
		items += *s == ',';
	KVS_CHECK_EQ(items, KVS_ARRAY_LEN(all_keys));
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, kv));
	KVS_CHECK(strcmp(cfg.cache.unique_id, "all") == 0);
	KVS_CHECK_EQ(cfg.cache.device_id, 2);
	KVS_CHECK_EQ(cfg.cache.local_rank_size, 4);
	KVS_CHECK_EQ(cfg.cache.slot_bytes, 65536);
	KVS_CHECK_EQ(cfg.block_bytes, 262144);
	KVS_CHECK_EQ(cfg.tensor_bytes, 16384);
	KVS_CHECK_EQ(cfg.cache.tensor_count, 4);
	KVS_CHECK_EQ(cfg.capacity_bytes, GIB / 4);
	KVS_CHECK_EQ(cfg.cache.reserved_slots, 3);
	KVS_CHECK_EQ(cfg.share_buffer, 1);
	KVS_CHECK_EQ(cfg.cache.flags, KVS_CACHE_PERSIST);
	KVS_CHECK_EQ(cfg.cache.hugetlb, KVS_HUGETLB_OFF);
	KVS_CHECK_EQ(cfg.cache.numa, KVS_NUMA_OFF);
	KVS_CHECK_EQ(cfg.cache.numa_node, 1);
	KVS_CHECK_EQ(cfg.cache.wait, KVS_WAIT_SPIN);
	KVS_CHECK_EQ(cfg.cache.spin_ns, 20000);
	KVS_CHECK_EQ(cfg.backend.kind, KVS_BACKEND_LATENCY);
	KVS_CHECK(strcmp(cfg.backend_roots, "/x:/y") == 0);
	KVS_CHECK_EQ(cfg.backend.io_engine, KVS_IO_ENGINE_POOL);
	KVS_CHECK_EQ(cfg.backend.flags, KVS_BACKEND_F_NO_FSYNC);
	KVS_CHECK_EQ(cfg.backend.queue_depth, 32);
	KVS_CHECK_EQ(cfg.backend.pool_threads, 2);
	KVS_CHECK_EQ(cfg.backend.latency_ns, 10000);
	KVS_CHECK_EQ(cfg.backend.latency_queue_depth, 8);
	KVS_CHECK_EQ(cfg.backend.fault_error_ppm, 1);
	KVS_CHECK_EQ(cfg.backend.fault_short_ppm, 2);
	KVS_CHECK_EQ(cfg.backend.fault_delay_ns, 3000);
	KVS_CHECK_EQ(cfg.backend.fault_seed, 4);
	KVS_CHECK_EQ(cfg.copy_engine, KVS_COPY_ENGINE_HOST);
	KVS_CHECK_EQ(cfg.cache_stream_number, 2);
	KVS_CHECK_EQ(cfg.dispatch_order, KVS_DISPATCH_NATURAL);
	KVS_CHECK_EQ(cfg.dump_wait, KVS_DUMP_WAIT_CACHED);
	KVS_CHECK_EQ(cfg.prealloc, 0);
	KVS_CHECK_EQ(cfg.waiting_queue_depth, 16);
	KVS_CHECK_EQ(cfg.running_queue_depth, 128);
	KVS_CHECK_EQ(cfg.timeout_ns, 2000000000ull);
	KVS_CHECK_EQ(cfg.copy_delay_ns, 5000);
	KVS_CHECK_EQ(cfg.cpu_affinity[0], 3);
	KVS_CHECK_EQ(cfg.cache.prefault_threads, 3);
	KVS_CHECK_EQ(cfg.register_chunk_bytes, 2u << 20);
	KVS_CHECK_EQ(cfg.register_delay_ns, 7000);
	KVS_CHECK_EQ(cfg.copy_land_delay_ns, 8000);
	KVS_CHECK(strcmp(cfg.backend.redis.endpoints, "/r.sock;h:1") == 0);
	KVS_CHECK_EQ(cfg.backend.redis.db, 3);
	KVS_CHECK(strcmp(cfg.backend.redis.user, "u") == 0);
	KVS_CHECK(strcmp(cfg.backend.redis.password, "p") == 0);
	KVS_CHECK(strcmp(cfg.backend.redis.password_file, "/pw") == 0);
	KVS_CHECK_EQ(cfg.backend.redis.connections, 4);
	KVS_CHECK_EQ(cfg.backend.redis.connect_timeout_ns, 5000000);
	KVS_CHECK_EQ(cfg.backend.redis.command_timeout_ns, 6000000);
	KVS_CHECK(strcmp(cfg.backend.redis.key_prefix, "kv:") == 0);
	KVS_CHECK_EQ(cfg.backend.redis.ttl_ms, 9000);
	KVS_CHECK_EQ(cfg.backend.redis.start_degraded, 1);
	KVS_CHECK_EQ(cfg.backend.redis.cluster, 1);
	KVS_CHECK_EQ(cfg.backend.redis.wait_replicas, 2);
	KVS_CHECK_EQ(cfg.backend.layout_tag, 77);
	return KVS_TEST_PASS;
}

/* The redis backend's string keys: stored whole (replacing the default prefix),
 * too long is an error naming the key, and a password is never shown. */
static kvs_test_rc test_redis_strings(void)
{
	struct kvs_store_config cfg;
	char kv[1200];

	fresh(&cfg);
	KVS_CHECK(strcmp(cfg.backend.redis.key_prefix, "kvshare:") == 0);
	KVS_TRY(parse_ok(&cfg, "redis_key_prefix=x,redis_endpoints=[::1]:6379;/run/r.sock"));
	KVS_CHECK(strcmp(cfg.backend.redis.key_prefix, "x") == 0);
	KVS_CHECK_EQ(cfg.backend.redis.key_prefix[2], 0); /* the old value cleared */
	KVS_CHECK(strcmp(cfg.backend.redis.endpoints, "[::1]:6379;/run/r.sock") == 0);
	snprintf(kv, sizeof(kv), "redis_endpoints=%0512d", 0);
	KVS_TRY(parse_bad2(kv, "invalid redis_endpoints = '0000", "longer than 511 characters"));
	snprintf(kv, sizeof(kv), "redis_key_prefix=%064d", 0);
	KVS_TRY(parse_bad2(kv, "invalid redis_key_prefix", "longer than 63 characters"));
	snprintf(kv, sizeof(kv), "redis_password=secret%0250d", 7);
	KVS_TRY(parse_bad2(kv, "invalid redis_password (longer than 255", "not shown"));
	KVS_CHECK(strstr(last_log, "secret") == NULL);
	KVS_TRY(parse_bad2("redis_endpoint=/x", "unknown key", "did you mean 'redis_endpoints'?"));
	KVS_TRY(parse_bad2("redis_pasword=x", "unknown key", "did you mean 'redis_password'?"));
	KVS_TRY(parse_bad2("redis_ttl=5", "unknown key", "did you mean 'redis_ttl_s'?"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_unknown_key(void)
{
	char kv[256];

	KVS_TRY(parse_bad2("timout_ms=5", "unknown key 'timout_ms'", "did you mean 'timeout_ms'?"));
	KVS_TRY(parse_bad2("devise_id=1", "unknown key 'devise_id'", "did you mean 'device_id'?"));
	KVS_TRY(parse_bad2("numa_mode=off", "unknown key", "did you mean 'numa_node'?"));
	KVS_TRY(parse_bad2("sharesize=4k", "unknown key", "did you mean 'shard_size'?"));
	/* prefixes either way */
	KVS_TRY(parse_bad2("cache_buffer=1", "unknown key 'cache_buffer'",
			   "did you mean 'cache_buffer_capacity_gb'?"));
	KVS_TRY(parse_bad2("hugetlb_mode=off", "unknown key 'hugetlb_mode'",
			   "did you mean 'hugetlb'?"));
	KVS_TRY(parse_bad2("cpu_affinity=1", "unknown key", "did you mean 'cpu_affinity_cores'?"));
	/* nothing close: no suggestion */
	KVS_TRY(parse_bad2("qqqqqq=1", "unknown key 'qqqqqq'", NULL));
	KVS_CHECK(strstr(last_log, "did you mean") == NULL);
	KVS_TRY(parse_bad2("x=1", "unknown key 'x'", NULL));
	KVS_CHECK(strstr(last_log, "did you mean") == NULL);
	/* keys are case-sensitive */
	KVS_TRY(parse_bad2("Device_Id=1", "unknown key 'Device_Id'", NULL));
	/* an unknown key without '=', and a very long one (quoted cut short) */
	KVS_TRY(parse_bad2("device_id=1,verbose", "unknown key 'verbose'", NULL));
	memset(kv, 'k', 200);
	strcpy(kv + 200, "=1");
	KVS_TRY(parse_bad2(kv, "unknown key 'kkkk", "...'"));
	/* after a good item: that item is applied, the error names the bad one */
	{
		struct kvs_store_config cfg;

		fresh(&cfg);
		KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "device_id=5,bogus_key=1", NULL, 0),
			     -EINVAL);
		KVS_CHECK_EQ(cfg.cache.device_id, 5);
		KVS_CHECK(strstr(last_log, "bogus_key") != NULL);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_duplicate_key(void)
{
	struct kvs_store_config cfg;

	KVS_TRY(parse_bad2("device_id=1,numa=off,device_id=2", "duplicate key device_id", NULL));
	KVS_TRY(parse_bad2("numa=off,numa=off", "duplicate key numa", NULL));
	KVS_TRY(parse_bad2("fsync=1,fsync", "duplicate key fsync", NULL));
	fresh(&cfg);
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "device_id=1,device_id=2", NULL, 0), -EINVAL);
	KVS_CHECK_EQ(cfg.cache.device_id, 1);
	/* once per string: a second string may set the key again */
	KVS_TRY(parse_ok(&cfg, "device_id=3"));
	KVS_CHECK_EQ(cfg.cache.device_id, 3);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_empty_items(void)
{
	struct kvs_store_config cfg, before;

	fresh(&cfg);
	before = cfg;
	KVS_TRY(parse_ok(&cfg, "")); /* no items */
	KVS_CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0);
	KVS_TRY(parse_bad2(",", "empty item at byte 0", NULL));
	KVS_TRY(parse_bad2(",device_id=1", "empty item at byte 0", NULL));
	KVS_TRY(parse_bad2("device_id=1,", "empty item at byte 12", NULL));
	KVS_TRY(parse_bad2("device_id=1,,numa=off", "empty item at byte 12", NULL));
	KVS_TRY(parse_bad2(",,", "empty item", NULL));
	KVS_TRY(parse_bad2("=5", "item '=5' has no key", NULL));
	KVS_TRY(parse_bad2("=", "has no key", NULL));
	KVS_TRY(parse_bad2("device_id", "invalid device_id (no '='", NULL));
	KVS_TRY(parse_bad2(" , ", "empty item at byte 0", NULL));
	KVS_TRY(parse_bad2("device_id=1, ,numa=off", "empty item at byte 12", NULL));
	return KVS_TEST_PASS;
}

/*
 * What users type: spaces around items and '=' (a config string wrapped over
 * lines), binary size spellings, a list written with commas, KB/GB.
 */
static kvs_test_rc test_user_spellings(void)
{
	static const struct {
		const char *kv;
		uint64_t shard;
	} sizes[] = {
		{ "shard_size=64k", 64 << 10 },   { "shard_size=64K", 64 << 10 },
		{ "shard_size=64KiB", 64 << 10 }, { "shard_size=2MiB", 2 << 20 },
		{ "shard_size=1GiB", 1ull << 30 }, { "shard_size=4096", 4096 },
	};
	struct kvs_store_config cfg;

	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, " unique_id = m ,\n\tdevice_id=1 , numa = off "));
	KVS_CHECK_EQ(strcmp(cfg.cache.unique_id, "m"), 0);
	KVS_CHECK_EQ(cfg.cache.device_id, 1);
	KVS_CHECK_EQ(cfg.cache.numa, KVS_NUMA_OFF);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		fresh(&cfg);
		KVS_TRY(parse_ok(&cfg, sizes[i].kv));
		KVS_CHECK_EQ(cfg.cache.slot_bytes, sizes[i].shard);
	}
	fresh(&cfg);
	KVS_TRY(parse_ok(&cfg, "tensor_size_list=32KiB:1m"));
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[0], 32 << 10);
	KVS_CHECK_EQ(cfg.cache.tensor_bytes[1], 1 << 20);
	KVS_TRY(parse_bad2("shard_size=64KB", "sizes are binary: write 64k or 64KiB", NULL));
	KVS_TRY(parse_bad2("shard_size=64kb", "sizes are binary", NULL));
	KVS_TRY(parse_bad2("shard_size=1GB", "sizes are binary", NULL));
	KVS_TRY(parse_bad2("shard_size=64Ki", "not a size", NULL));
	KVS_TRY(parse_bad2("shard_size=6 4k", "not a size", NULL));
	KVS_TRY(parse_bad2("tensor_size_list=32KB:32k", "entry 1: sizes are binary", NULL));
	KVS_TRY(parse_bad2("tensor_size_list=32k,32k",
			   "item '32k' has no '=': if it is one more entry of tensor_size_list, "
			   "entries are separated by ':' (tensor_size_list=a:b)", NULL));
	KVS_TRY(parse_bad2("backend_roots=/a,/b", "entry of backend_roots, entries are separated by ':'",
			   NULL));
	KVS_TRY(parse_bad2("redis_endpoints=h:1,h:2", "separated by ';'", NULL));
	/* not after a list: the usual unknown key */
	KVS_TRY(parse_bad2("device_id=1,32k", "unknown key '32k'", NULL));
	return KVS_TEST_PASS;
}

/* err may be NULL or short; it is always NUL-terminated, and cleared on success. */
static kvs_test_rc test_err_buffer(void)
{
	struct kvs_store_config cfg;
	char err[16], full[KVS_LOG_LINE_MAX];

	fresh(&cfg);
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", NULL, 0), -EINVAL);
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", err, 0), -EINVAL);
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", full, sizeof(full)), -EINVAL);
	memset(err, 'x', sizeof(err));
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", err, 1), -EINVAL);
	KVS_CHECK_EQ(err[0], 0);
	KVS_CHECK_EQ(err[1], 'x');
	memset(err, 'x', sizeof(err));
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", err, 10), -EINVAL);
	KVS_CHECK_EQ(strlen(err), 9);
	KVS_CHECK(strncmp(err, full, 9) == 0);
	KVS_CHECK_EQ(err[10], 'x');
	/* no log callback: still an error and the text */
	cfg.log = NULL;
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=bad", full, sizeof(full)), -EINVAL);
	KVS_CHECK(strstr(full, "invalid numa") != NULL);
	/* success clears it */
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, "numa=off", full, sizeof(full)), 0);
	KVS_CHECK_EQ(full[0], 0);
	/* NULL arguments */
	KVS_CHECK_EQ(kvs_store_config_parse(NULL, "numa=off", full, sizeof(full)), -EINVAL);
	KVS_CHECK(strstr(full, "NULL") != NULL);
	KVS_CHECK_EQ(kvs_store_config_parse(&cfg, NULL, full, sizeof(full)), -EINVAL);
	KVS_CHECK(strstr(full, "NULL") != NULL);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "defaults", test_defaults },
	{ "good_values", test_good_values },
	{ "every_key_empty_value", test_every_key_empty_value },
	{ "int_malformed", test_int_malformed },
	{ "int_range", test_int_range },
	{ "bool_and_enum_bad", test_bool_and_enum_bad },
	{ "capacity_gb_bad", test_capacity_gb_bad },
	{ "unique_id", test_unique_id },
	{ "tensor_size_list", test_tensor_size_list },
	{ "backend_roots", test_backend_roots },
	{ "cpu_affinity", test_cpu_affinity },
	{ "flag_bits", test_flag_bits },
	{ "all_keys_at_once", test_all_keys_at_once },
	{ "redis_strings", test_redis_strings },
	{ "unknown_key", test_unknown_key },
	{ "duplicate_key", test_duplicate_key },
	{ "empty_items", test_empty_items },
	{ "user_spellings", test_user_spellings },
	{ "err_buffer", test_err_buffer },
};

KVS_TEST_MAIN(cases)
