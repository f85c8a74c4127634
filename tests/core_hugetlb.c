/*
 * tests/core_hugetlb.c — the cache on hugetlbfs: hugetlb=required puts the data
 * plane on huge pages (no fallback reported) and an exec'd attacher reads it;
 * a pool too small is -KVS_ENOHUGE at open, leaving nothing behind; the plain
 * build refuses hugetlb=required with -EOPNOTSUPP.  RUN_SERIAL: it takes pages
 * from the machine's pool, which other tests measure.
 */
#include <stdlib.h>

#include "core/core.h"
#include "core_util.h"
#include "hugetlb_util.h"

static void huge_cfg(struct kvs_cache_config *cfg, const char *uid, uint64_t slots)
{
	core_cfg(cfg, "huge", slots, 1u << 20, 1);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->hugetlb = KVS_HUGETLB_REQUIRED;
}

/* exec'd: --child reader <uid>: block 5 has its bytes. */
static kvs_test_rc reader_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(5);
	struct kvs_slot s;
	void *p;
	int ok;

	if (argc != 1)
		KVS_FAILF("usage: --child reader <uid>");
	huge_cfg(&cfg, argv[0], 4);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	KVS_CHECK_ERR(kvs_cache_get(c, &k, 0, 0, &s), 0);
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	ok = kvs_slot_data(c, &s, &p) == 0 && core_verify(p, cfg.slot_bytes, 5, 0);
	kvs_slot_release(c, &s);
	kvs_cache_close(c);
	KVS_CHECK(ok);
	return KVS_TEST_PASS;
}

static int pool_check(long long want_pages)
{
	if (hugetlb_test_meminfo("Hugepagesize") != 2048)
		return -1;
	if (hugetlb_test_meminfo("HugePages_Free") - hugetlb_test_meminfo("HugePages_Rsvd") < want_pages)
		return -1;
	return 0;
}

static kvs_test_rc test_required(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_stats st;
	char uid[80];

	huge_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "req"), 4);
	if (!KVS_KERNEL) {
		KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), -EOPNOTSUPP);
		return KVS_TEST_PASS;
	}
	if (pool_check(4))
		KVS_SKIP("need 4 free 2 MiB huge pages and a 2 MiB default page size");
	int rc = kvs_cache_open(&cfg, &c);
	if (rc == -KVS_ENOHUGE)
		KVS_SKIP("no usable hugetlbfs mount for 2 MiB pages");
	KVS_CHECK_OK(rc);
	KVS_CHECK_EQ(c->hdr->segs[0].backing, KVS_NUMA_BACKING_HUGETLB);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.fallbacks & KVS_FALLBACK_HUGETLB, 0);
	KVS_TRY(core_put(c, 5));
	const char *av[] = { uid, NULL };
	KVS_CHECK_EQ(kvs_test_reap(kvs_test_spawn("reader", av), 20000), 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_enohuge(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[80], path[256];
	long long total = hugetlb_test_meminfo("HugePages_Total");

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	if (total < 0 || hugetlb_test_meminfo("Hugepagesize") != 2048)
		KVS_SKIP("no 2 MiB huge pages");
	/* More pages than the whole pool: short whatever the others do. */
	huge_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "nohuge"), (uint64_t)(total + 64) * 2);
	core_log_quiet = 1;
	int rc = kvs_cache_open(&cfg, &c);
	core_log_quiet = 0;
	KVS_CHECK_ERR(rc, -KVS_ENOHUGE);
	printf("  %s\n", core_last_log);
	/* the last line is the cause and the fix (before: "lower the capacity"):
	 * with no 2 MiB mount that one, else the pool too small */
	if (hugetlb_test_mount(path, sizeof(path)) != 0) {
		KVS_CHECK(strstr(core_last_log, "no hugetlbfs is mounted") != NULL);
		KVS_CHECK(strstr(core_last_log, "mount -t hugetlbfs") != NULL);
	} else {
		KVS_CHECK(strstr(core_last_log, "pages of 2048 kB") != NULL);
		KVS_CHECK(strstr(core_last_log, "vm.nr_hugepages") != NULL);
	}
	KVS_CHECK(strstr(core_last_log, "hugetlb=auto") != NULL);
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	KVS_CHECK(access(path, F_OK) != 0); /* nothing left behind */
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "required", test_required },
	{ "enohuge", test_enohuge },
};

static const struct kvs_test_child children[] = {
	{ "reader", reader_child },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
