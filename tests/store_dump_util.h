/*
 * tests/store_dump_util.h — what the dump tests (store_dump, store_ack) share:
 * rank configs over a posix root, tasks of block ranges, submits, and the checks
 * of the acknowledged-write contract: how many blocks the backend holds (its own
 * handle, as another node would see it), a durable dump's blocks there, every
 * block loaded byte-exact by a fresh cache, no temp file left behind.
 */
#ifndef KVS_TESTS_STORE_DUMP_UTIL_H
#define KVS_TESTS_STORE_DUMP_UTIL_H

#include <dirent.h>

#include "store_gate.h"
#include "store_proc.h"

#define DUMP_SHARD (4 * 1024)
#define DUMP_WAIT_MS 20000

/* ---- configs, tasks, checks ---- */

/* A rank over posix root: spb shards per block, slots slots, local_rank_size lrs. */
static inline void dump_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device,
		     const char *root, uint32_t spb, uint64_t slots, uint32_t lrs)
{
	st_cfg(cfg, uid, device, DUMP_SHARD, slots, spb);
	cfg->cache.local_rank_size = lrs;
	st_posix(cfg, root);
	cfg->prealloc = 0; /* no LOADING slots nobody asked for: the census stays exact */
}

/* Shards [shard0, shard0 + nshards) of blocks [first, first + n) of tag, one task. */
static inline kvs_test_rc shards_task(struct st_task *t, uint32_t tag, uint32_t first, uint32_t n,
			       uint32_t shard0, uint32_t nshards)
{
	KVS_TRY(st_task_whole(t, n * nshards, 1, DUMP_SHARD));
	for (uint32_t i = 0; i < n * nshards; i++) {
		struct kvs_block_id b = st_block(tag, first + i / nshards);

		st_task_set(t, i, &b, shard0 + i % nshards);
	}
	return KVS_TEST_PASS;
}

/* Submit a dump of t (content filled in); *task its id. */
static inline kvs_test_rc dump_submit(struct kvs_store *s, struct st_task *t, uint64_t *task)
{
	int rc;

	st_task_fill(t);
	rc = kvs_store_dump(s, t->shards, t->n, NULL, task);
	if (rc)
		KVS_FAILF("kvs_store_dump(%u shards): %d (%s); log: %s", t->n, rc, kvs_strerror(rc),
			  st_last_log);
	return KVS_TEST_PASS;
}

/* How many of blocks [first, first + n) of tag the posix backend at root holds
 * (its own handle: what any node would see). */
static inline int backend_count(const char *root, uint32_t spb, uint32_t tag, uint32_t first, uint32_t n)
{
	struct kvs_backend_config bc;
	struct kvs_backend *b = NULL;
	int count = 0, rc;

	kvs_backend_config_init(&bc);
	bc.nroots = 1;
	bc.roots[0] = root;
	bc.shard_bytes = DUMP_SHARD;
	bc.shards_per_block = spb;
	bc.io_engine = KVS_IO_ENGINE_POOL;
	rc = kvs_backend_open(&bc, &b);
	if (rc)
		return rc;
	for (uint32_t k = 0; k < n; k++) {
		struct kvs_block_id id = st_block(tag, first + k);

		rc = kvs_backend_lookup(b, &id);
		if (rc < 0)
			break;
		count += rc;
	}
	kvs_backend_close(b);
	return rc < 0 ? rc : count;
}

/* A durable dump returned 0: its blocks must be in the backend now. */
static inline kvs_test_rc check_durable(const char *root, uint32_t spb, uint32_t tag, uint32_t first,
				 uint32_t n, const char *who)
{
	int have = backend_count(root, spb, tag, first, n);

	if (have != (int)n)
		KVS_FAILF("%s: a durable dump returned 0 but the backend holds %d of its %u blocks",
			  who, have, n);
	return KVS_TEST_PASS;
}

/* Load every shard of blocks [first, first + n) of tag through a fresh cache
 * (its own unique_id) over root: byte-exact. */
static inline kvs_test_rc verify_fresh(const char *root, uint32_t spb, uint32_t tag, uint32_t first,
				uint32_t n, const char *utag)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char uid[96];

	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), utag), 0, root, spb,
		 (uint64_t)n * spb + 8, 1);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, tag, first, n, 0, spb));
	KVS_TRY(st_load(s, &t, DUMP_WAIT_MS, 0));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* Wait (bounded) until the cache of watcher w shows at least n slots in state
 * field (loading or failed). */
static inline kvs_test_rc wait_census(struct kvs_store *w, bool failed, uint64_t n, const char *what)
{
	struct kvs_cache_stats cs;
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	for (;;) {
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
		if ((failed ? cs.slots_failed : cs.slots_loading) >= n)
			return KVS_TEST_PASS;
		if (kvs_now_ns() >= deadline)
			KVS_FAILF("%s: %llu slots %s after 10 s, want %llu", what,
				  (unsigned long long)(failed ? cs.slots_failed : cs.slots_loading),
				  failed ? "FAILED" : "LOADING", (unsigned long long)n);
		usleep(1000);
	}
}

/* Wait (bounded) until every shard of block (tag, k) is in the cache of w. */
static inline kvs_test_rc wait_cached(struct kvs_store *w, uint32_t tag, uint32_t k)
{
	struct kvs_block_id b = st_block(tag, k);
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);
	bool hit = false;

	while (kvs_cache_lookup(kvs_store_cache(w), &b, 1, KVS_ALL_SHARDS, &hit) >= 0 && !hit) {
		if (kvs_now_ns() >= deadline)
			KVS_FAILF("block %u of tag %u not in the cache after 10 s", k, tag);
		usleep(1000);
	}
	KVS_CHECK(hit);
	return KVS_TEST_PASS;
}

/* A watcher store that creates cache uid and keeps it between children: a
 * watcher alone does not keep a cache (the last rank's close removes it), so
 * the cache is persistent, and st_close_kept removes it. */
static inline kvs_test_rc open_watcher(const char *uid, const char *root, uint32_t spb, uint64_t slots,
				uint32_t lrs, struct kvs_store **w)
{
	struct kvs_store_config cfg;

	dump_cfg(&cfg, uid, -1, root, spb, slots, lrs);
	watcher_of(&cfg);
	cfg.cache.flags |= KVS_CACHE_PERSIST;
	return st_open(&cfg, w);
}

static inline int rm_below(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	if (ftw->level > 0)
		remove(path);
	return 0;
}

/* Remove everything stored under root, root itself kept (a backend's handle on
 * it stays valid): the stored copies vanish, as an operator or an expiry does. */
static inline void empty_root(const char *root)
{
	nftw(root, rm_below, 16, FTW_DEPTH | FTW_PHYS);
}

/* Any temp file of a dump left under root? */
static inline int temp_files(const char *root)
{
	char cmd[512];
	int n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "find '%s' -name '*.tmp.*' | wc -l", root);
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	if (fscanf(p, "%d", &n) != 1)
		n = -EIO;
	pclose(p);
	return n;
}

/* Wait (bounded) until the backend at root holds n blocks of tag from first;
 * how many it holds then. */
static inline int wait_backend(const char *root, uint32_t spb, uint32_t tag, uint32_t first,
			       uint32_t n, uint64_t ms)
{
	uint64_t deadline = kvs_deadline_after(ms * ST_MS);
	int have;

	while ((have = backend_count(root, spb, tag, first, n)) != (int)n && have >= 0 &&
	       kvs_now_ns() < deadline)
		usleep(5000);
	return have;
}

#endif
