/*
 * tests/tools_replay_clock.c — the CLOCK weights that `kvshare replay` measured
 * and core/clock.c implements (layout version 4, docs/core.md "CLOCK"), seen
 * through the public API only: allocation gives 1, a new use (a get that finds
 * the slot READY and unpinned, or kvs_cache_touch) adds 1 up to 2, a get that
 * joins a slot someone pins adds nothing, and the hand takes 1 per pass and
 * evicts at 0.  Each case fills a 4-slot cache and follows the hand by
 * hand (it starts at slot 0 and stops one past the slot it takes); residency
 * is read with kvs_cache_exists, which never changes a weight.  With a single
 * reference bit every case below evicts another block.
 */
#include "harness.h"

static kvs_test_rc open_cache(const char *tag, struct kvs_cache **c)
{
	struct kvs_cache_config cfg;
	int rc;

	kvs_cache_config_init(&cfg);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), tag);
	cfg.slot_bytes = 64;
	cfg.slot_count = 4;
	cfg.local_rank_size = 1;
	cfg.hugetlb = KVS_HUGETLB_OFF;
	cfg.numa = KVS_NUMA_OFF;
	rc = kvs_cache_open(&cfg, c);
	if (rc == -EOPNOTSUPP || rc == -EACCES)
		KVS_SKIP("kvs_cache_open: %s", kvs_strerror(rc));
	KVS_CHECK_OK(rc);
	return KVS_TEST_PASS;
}

static struct kvs_block_id blk(uint64_t n)
{
	struct kvs_block_id b;

	memset(&b, 0, sizeof(b));
	memcpy(b.bytes, &n, sizeof(n));
	b.bytes[15] = 0xc1;
	return b;
}

/* A miss: get (owner), publish, release. */
static kvs_test_rc put(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id b = blk(n);
	struct kvs_slot s;

	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	return KVS_TEST_PASS;
}

/* A hit: get (READY), release. */
static kvs_test_rc hit(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id b = blk(n);
	struct kvs_slot s;

	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, 0);
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	return KVS_TEST_PASS;
}

static int has(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id b = blk(n);

	return kvs_cache_exists(c, &b, 0);
}

/* A block hit once more than its peers survives one more pass. */
static kvs_test_rc body_use_survives_two_passes(struct kvs_cache *c)
{

	for (uint64_t n = 0; n < 4; n++)
		KVS_TRY(put(c, n)); /* s0..s3 = 0..3, weight 1 each */
	KVS_TRY(hit(c, 0));         /* block 0: weight 2 */
	/* 4: s0 2->1, s1 s2 s3 1->0, s0 1->0, s1 taken (block 1; one bit: s0) */
	KVS_TRY(put(c, 4));
	KVS_CHECK_EQ(has(c, 0), 1);
	KVS_CHECK_EQ(has(c, 1), 0);
	KVS_TRY(put(c, 5)); /* s2 taken (block 2) */
	KVS_TRY(put(c, 6)); /* s3 taken (block 3) */
	KVS_CHECK_EQ(has(c, 0), 1);
	KVS_CHECK_EQ(has(c, 2), 0);
	KVS_CHECK_EQ(has(c, 3), 0);
	KVS_TRY(put(c, 7)); /* s0 at weight 0: taken (block 0) */
	KVS_CHECK_EQ(has(c, 0), 0);
	for (uint64_t n = 4; n < 8; n++)
		KVS_CHECK_EQ(has(c, n), 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	return KVS_TEST_PASS;
}

/* Weights saturate at 2: three hits protect no longer than one. */
static kvs_test_rc body_weight_saturates(struct kvs_cache *c)
{

	for (uint64_t n = 0; n < 4; n++)
		KVS_TRY(put(c, n));
	for (int i = 0; i < 3; i++)
		KVS_TRY(hit(c, 0)); /* 1 -> 2, then stays 2 */
	KVS_TRY(put(c, 4));         /* as above: block 1 goes */
	KVS_TRY(put(c, 5));
	KVS_TRY(put(c, 6));
	KVS_CHECK_EQ(has(c, 0), 1);
	/* s0 at 0 now (2 - 2 passes): taken; with a weight of 4 it would
	 * survive and s1 (block 4) would go */
	KVS_TRY(put(c, 7));
	KVS_CHECK_EQ(has(c, 0), 0);
	KVS_CHECK_EQ(has(c, 4), 1);
	return KVS_TEST_PASS;
}

/* A get on a slot someone else pins joins the same use (the TP ranks of one
 * load): it keeps the weight at least 1 but does not add. */
static kvs_test_rc body_pinned_get_same_use(struct kvs_cache *c)
{
	struct kvs_block_id b1 = blk(1);
	struct kvs_slot a, b;

	for (uint64_t n = 0; n < 4; n++)
		KVS_TRY(put(c, n));
	/* 4: one pass brings s0..s3 to 0, s0 taken: s0 = 4 (1), s1..s3 = 1..3
	 * at 0, hand at s1 */
	KVS_TRY(put(c, 4));
	KVS_CHECK_EQ(has(c, 0), 0);
	KVS_CHECK_OK(kvs_cache_get(c, &b1, 0, 0, &a)); /* new use: 0 -> 1 */
	KVS_CHECK_OK(kvs_cache_get(c, &b1, 0, 0, &b)); /* pinned by a: stays 1 */
	KVS_CHECK_EQ(a.state, KVS_SLOT_READY);
	KVS_CHECK_EQ(b.state, KVS_SLOT_READY);
	KVS_CHECK_OK(kvs_slot_release(c, &b));
	KVS_CHECK_OK(kvs_slot_release(c, &a));
	KVS_TRY(put(c, 5)); /* s1 1->0, s2 taken (block 2) */
	KVS_TRY(put(c, 6)); /* s3 taken (block 3) */
	KVS_CHECK_EQ(has(c, 1), 1);
	/* 7: s0 (block 4) 1->0, s1 (block 1) at 0: taken.  Had the second get
	 * added, block 1 would be at 1 and block 4 would go instead. */
	KVS_TRY(put(c, 7));
	KVS_CHECK_EQ(has(c, 1), 0);
	KVS_CHECK_EQ(has(c, 4), 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	return KVS_TEST_PASS;
}

/* kvs_cache_touch is a use like a hit; kvs_cache_exists and
 * kvs_cache_lookup_prefix change nothing. */
static kvs_test_rc body_touch_is_a_use(struct kvs_cache *c)
{
	struct kvs_block_id b0 = blk(0), b1 = blk(1);

	for (uint64_t n = 0; n < 4; n++)
		KVS_TRY(put(c, n));
	KVS_CHECK_EQ(kvs_cache_touch(c, &b0, 1), 1); /* block 0: 2 */
	for (int i = 0; i < 5; i++) {                /* looks: no change */
		KVS_CHECK_EQ(has(c, 1), 1);
		KVS_CHECK_EQ(kvs_cache_lookup_prefix(c, &b1, 1, KVS_ALL_SHARDS), 1);
	}
	KVS_TRY(put(c, 4)); /* as in use_survives_two_passes: block 1 goes */
	KVS_CHECK_EQ(has(c, 0), 1);
	KVS_CHECK_EQ(has(c, 1), 0);
	return KVS_TEST_PASS;
}

/* Each case runs on a fresh cache that is closed (and so removed) whatever
 * the body's result: a failing case leaves no segment behind. */
#define CASE(name, tag)                                                          \
	static kvs_test_rc test_##name(void)                                     \
	{                                                                        \
		struct kvs_cache *c = NULL;                                      \
		kvs_test_rc rc;                                                  \
                                                                                 \
		KVS_TRY(open_cache(tag, &c));                                    \
		rc = body_##name(c);                                             \
		kvs_cache_close(c);                                              \
		return rc;                                                       \
	}
CASE(use_survives_two_passes, "w2pass")
CASE(weight_saturates, "wsat")
CASE(pinned_get_same_use, "wpin")
CASE(touch_is_a_use, "wtouch")

static const struct kvs_test_case cases[] = {
	{ "use_survives_two_passes", test_use_survives_two_passes },
	{ "weight_saturates", test_weight_saturates },
	{ "pinned_get_same_use", test_pinned_get_same_use },
	{ "touch_is_a_use", test_touch_is_a_use },
};

KVS_TEST_MAIN(cases)
