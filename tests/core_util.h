/*
 * tests/core_util.h — helpers shared by the core_* tests: a small cache config,
 * block ids from integers, a log callback that keeps the last line (tests check
 * that an error names its field), and the slot-content pattern owners write.
 */
#ifndef KVS_TESTS_CORE_UTIL_H
#define KVS_TESTS_CORE_UTIL_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kvshare.h"

static char core_last_log[512];
static int core_log_quiet;

static inline void core_log(void *arg, int level, const char *msg)
{
	(void)arg;
	snprintf(core_last_log, sizeof(core_last_log), "%s", msg);
	if (!core_log_quiet && level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}

/* A cache of slots x slot_bytes with shards shards per block, named tag. */
static inline void core_cfg(struct kvs_cache_config *cfg, const char *tag, uint64_t slots,
			    uint64_t slot_bytes, uint32_t shards)
{
	kvs_cache_config_init(cfg);
	kvs_test_unique_id(cfg->unique_id, sizeof(cfg->unique_id), tag);
	cfg->slot_count = slots;
	cfg->slot_bytes = slot_bytes;
	cfg->shards_per_block = shards;
	cfg->hugetlb = KVS_HUGETLB_OFF; /* keep the machine's pool for the hugetlb tests */
	cfg->attach_timeout_ns = 10ull * 1000000000ull;
	cfg->log = core_log;
}

/* Whether cache uid's control file (ctl_exists) or first data file (data_exists) is in /dev/shm. */
static inline int ctl_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	return access(path, F_OK) == 0;
}

static inline int data_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", uid);
	return access(path, F_OK) == 0;
}

static inline struct kvs_block_id core_block(uint64_t n)
{
	struct kvs_block_id b;

	memset(&b, 0, sizeof(b));
	memcpy(b.bytes, &n, sizeof(n));
	b.bytes[15] = 0xb1;
	return b;
}

/* The bytes an owner writes into (block n, shard s). */
static inline void core_fill(void *p, uint64_t bytes, uint64_t n, uint32_t s)
{
	uint64_t *w = p;

	for (uint64_t k = 0; k < bytes / 8; k++)
		w[k] = n * 1000003u + s * 7919u + k;
}

static inline int core_verify(const void *p, uint64_t bytes, uint64_t n, uint32_t s)
{
	const uint64_t *w = p;

	for (uint64_t k = 0; k < bytes / 8; k++)
		if (w[k] != n * 1000003u + s * 7919u + k)
			return 0;
	return 1;
}

/* The fill helpers need the handle's geometry (core/core.h's struct kvs_cache):
 * only for the tests that include it first. */
#ifdef KVS_CORE_CORE_H
/* Fill the slot s owns with (block n, shard) and publish it READY. */
static inline kvs_test_rc core_fill_publish(struct kvs_cache *c, struct kvs_slot *s, uint64_t n,
					    uint32_t shard)
{
	void *p;

	KVS_CHECK_OK(kvs_slot_data(c, s, &p));
	core_fill(p, c->slot_bytes, n, shard);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, s));
	return KVS_TEST_PASS;
}

/* Put (block n, shard 0): get it as its owner, fill, publish READY, release. */
static inline kvs_test_rc core_put(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_slot s;

	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_TRY(core_fill_publish(c, &s, n, 0));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	return KVS_TEST_PASS;
}

/* 1 if (n, 0) is READY with its bytes. */
static inline int core_holds(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_slot s;
	void *p;
	int ok;

	if (kvs_cache_exists(c, &k, 0) != 1 || kvs_cache_get(c, &k, 0, 0, &s))
		return 0;
	ok = s.state == KVS_SLOT_READY && kvs_slot_data(c, &s, &p) == 0 &&
	     core_verify(p, c->slot_bytes, n, 0);
	kvs_slot_release(c, &s);
	return ok;
}
#endif

#endif
