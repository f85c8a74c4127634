/*
 * tests/store_tasks.c — what a task may ask of the pipeline (docs/store.md,
 * "Tasks"): any size against a small cache, no head-of-line blocking, one rank's
 * deadline not failing its peers, lookups that agree, the reserved pool, fork,
 * a backend that errs forever, a stopped peer, and a dispatcher that sleeps.
 *
 *   load_4x_cache      one load task of 4x the cache's slots (and 100 shards on 64
 *                      slots, 5000 on 8192: more than a rank's pin table)
 *   two_big_loads      two 2100-shard loads at once (running_queue_depth 4096)
 *   eight_ranks_2x     8 rank processes each load 2x the cache at once
 *   prefetch_releases  a prefetch of 4x the cache (pins dropped at READY)
 *   hol_writes         a load of a cached block behind 800 queued writes finishes
 *                      while the writes are still queued
 *   deadline_one_rank  A (50 ms) owns X's read, queued behind Y; B (10 s) waits on
 *                      X: B gets X (A's deadline does not fail X for B)
 *   misses_shared      A loads 8 blocks with one read in flight, B the same 10 ms
 *                      later: B owns some of the misses (A keeps no queue of them)
 *   lookup_prefix      lookup_prefix agrees with lookup when the cache holds a
 *                      later block and the backend an earlier one
 *   reserved_prefetch  16 slots, 12 reserved: a prefetch of 8 blocks succeeds
 *   prealloc_reserved  the idle prealloc takes the reserved pool, never the READY
 *                      data of the main pool
 *   fork_close         kvs_store_close in a fork()ed child: the child's copy only
 *   close_orphans      close with a read still in flight: bounded, said, and no
 *                      log call once it returned; the threads drain by themselves
 *   poll_error         a backend whose poll always fails: tasks end by their
 *                      deadline, the dispatcher neither spins nor floods the log;
 *                      healed after close, the orphaned store drains and goes
 *   stopped_lock       a stopped peer holds a bucket lock this rank's task needs:
 *                      this rank still publishes the read a second rank waits on
 *   copy_timeout       the copy engine's sync times out (its copies land later):
 *                      tasks report -ETIMEDOUT, slots stay pinned until the copies
 *                      landed, nothing is copied meanwhile, no slot is published
 *                      with bytes still to land
 *   sleeping           one read held 1 s: the dispatcher and copier wake a few
 *                      times, not thousands (context switches, CPU)
 */
#include <dirent.h>
#include <sys/resource.h>

#include "core/core.h"
#include "store_proc.h"

#define SHARD (4 * 1024)
#define WAIT_MS 30000

/* A rank over the latency backend (content = kvs_pattern_fill). */
static void lat_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device, uint64_t slots,
		    uint32_t spb, uint64_t latency_ns)
{
	st_cfg(cfg, uid, device, SHARD, slots, spb);
	cfg->cache.local_rank_size = 1;
	st_latency(cfg, latency_ns);
}

/* Shards of n distinct blocks of tag from first, shard 0 each. */
static kvs_test_rc blocks_of(struct st_task *t, uint32_t tag, uint32_t first, uint32_t n)
{
	KVS_TRY(st_task_whole(t, n, 1, SHARD));
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_block_id b = st_block(tag, first + i);

		st_task_set(t, i, &b, 0);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc load_n(uint64_t slots, uint32_t n, uint32_t tag)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char uid[96], name[32];

	snprintf(name, sizeof(name), "big%u", n);
	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), name), 0, slots, 1, 100 * 1000);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&t, tag, 0, n));
	KVS_TRY(st_load(s, &t, 120000, 0));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_load_4x_cache(void)
{
	KVS_TRY(load_n(64, 256, 1));
	KVS_TRY(load_n(64, 100, 2));
	KVS_TRY(load_n(8192, 5000, 3));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_two_big_loads(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[2];
	uint64_t ids[2];
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "two"), 0, 8192, 1, 100 * 1000);
	cfg.running_queue_depth = 4096;
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < 2; k++) {
		KVS_TRY(blocks_of(&t[k], 4, k * 2100, 2100));
		st_task_poison(&t[k]);
		KVS_CHECK_OK(kvs_store_load(s, t[k].shards, t[k].n, &ids[k]));
	}
	for (uint32_t k = 0; k < 2; k++) {
		KVS_TRY(st_wait_expect(s, ids[k], 120000, 0, "big load"));
		KVS_TRY(st_task_verify(&t[k]));
		st_task_free(&t[k]);
	}
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

#define EIGHT 8
#define EIGHT_SLOTS 128

/* --child eight_rank <uid> <device> <ready fd> <go fd>: load 2x the cache. */
static kvs_test_rc eight_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	int device;

	if (argc != 4)
		KVS_FAILF("usage: --child eight_rank <uid> <device> <ready fd> <go fd>");
	device = (int)arg_l(argv[1]);
	lat_cfg(&cfg, argv[0], device, EIGHT_SLOTS, 1, 200 * 1000);
	cfg.cache.local_rank_size = EIGHT;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&t, 5, (uint32_t)device * 1000, 2 * EIGHT_SLOTS));
	KVS_TRY(barrier_child((int)arg_l(argv[2]), (int)arg_l(argv[3])));
	KVS_TRY(st_load(s, &t, 120000, 0));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_eight_ranks_2x(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct barrier b;
	struct fork_args fa[EIGHT];
	pid_t pids[EIGHT] = { 0 };
	char uid[96], dev[EIGHT][8];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "eight"), -1, EIGHT_SLOTS, 1, 0);
	cfg.cache.local_rank_size = EIGHT;
	watcher_of(&cfg);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	for (int i = 0; i < EIGHT; i++) {
		snprintf(dev[i], sizeof(dev[i]), "%d", i);
		const char *av[] = { uid, dev[i], b.ready_s, b.go_s, NULL };
		pids[i] = start_child(i % 2, "eight_rank", eight_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc r = barrier_release(&b, EIGHT);
	if (r.code)
		kill_all(pids, EIGHT);
	KVS_TRY(r);
	KVS_TRY(reap_all(pids, EIGHT, REAP_MS));
	KVS_TRY(st_cache_clean(w, true));
	kvs_store_close(w);
	barrier_fini(&b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_prefetch_releases(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_block_id blocks[256];
	uint64_t task = 0;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "pref"), 0, 64, 1, 100 * 1000);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t i = 0; i < 256; i++)
		blocks[i] = st_block(6, i);
	KVS_CHECK_OK(kvs_store_prefetch(s, blocks, 256, &task));
	KVS_TRY(st_wait_expect(s, task, 60000, 0, "prefetch of 4x the cache"));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Head-of-line blocking                                                     */

static kvs_test_rc test_hol_writes(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task hot, cold;
	uint64_t dump = 0, t0, ms;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "hol"), 0, 1024, 1, 20 * ST_MS);
	cfg.backend.latency_queue_depth = 4; /* 800 writes: 4 s */
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&hot, 7, 0, 1));
	KVS_TRY(st_load(s, &hot, WAIT_MS, 0)); /* READY in the cache */
	KVS_TRY(blocks_of(&cold, 8, 0, 800));
	st_task_fill(&cold);
	KVS_CHECK_OK(kvs_store_dump(s, cold.shards, cold.n, NULL, &dump));
	t0 = kvs_now_ns();
	KVS_TRY(st_load(s, &hot, WAIT_MS, 0));
	ms = (kvs_now_ns() - t0) / ST_MS;
	KVS_TRY(st_stats(s, st_rank(s), &st));
	printf("  load of a cached block behind 800 writes: %llu ms, %llu writes done by then\n",
	       (unsigned long long)ms, (unsigned long long)st.backend_writes);
	KVS_CHECK(st.backend_writes < 100);
	KVS_TRY(st_wait_expect(s, dump, 60000, 0, "800 writes"));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&hot);
	st_task_free(&cold);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* One rank's deadline                                                       */

static kvs_test_rc test_deadline_one_rank(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL, *w = NULL;
	struct st_task ta, tb;
	struct kvs_block_id y = st_block(9, 0), x = st_block(9, 1);
	uint64_t ida = 0;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "dl"), 0, 16, 1, 200 * ST_MS);
	cfg.cache.local_rank_size = 2;
	cfg.backend.latency_queue_depth = 1; /* X's read waits for Y's */
	cfg.dispatch_order = KVS_DISPATCH_NATURAL;
	cfg.timeout_ns = 50 * ST_MS;
	KVS_TRY(st_open(&cfg, &a));
	cfg.cache.device_id = 1;
	cfg.timeout_ns = 10 * ST_SEC;
	KVS_TRY(st_open(&cfg, &b));
	cfg.cache.device_id = -1;
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(st_task_whole(&ta, 2, 1, SHARD));
	st_task_set(&ta, 0, &y, 0);
	st_task_set(&ta, 1, &x, 0);
	KVS_CHECK_OK(kvs_store_load(a, ta.shards, 2, &ida));
	{ /* A owns both */
		struct kvs_cache_stats cs;
		uint64_t deadline = kvs_deadline_after(5 * ST_SEC);

		do {
			KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
		} while (cs.slots_loading < 2 && kvs_now_ns() < deadline && usleep(500) == 0);
		KVS_CHECK_EQ(cs.slots_loading, 2);
	}
	KVS_TRY(st_task_whole(&tb, 1, 1, SHARD));
	st_task_set(&tb, 0, &x, 0);
	KVS_TRY(st_load(b, &tb, WAIT_MS, 0)); /* B has time: X must come */
	KVS_TRY(st_wait_expect(a, ida, WAIT_MS, -ETIMEDOUT, "A past its deadline"));
	KVS_TRY(st_cache_clean(w, true));
	kvs_store_close(a);
	kvs_store_close(b);
	kvs_store_close(w);
	st_task_free(&ta);
	st_task_free(&tb);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Misses shared between ranks                                               */

/*
 * Two ranks load the same 8 blocks in the same order (natural), one read in
 * flight each (50 ms): A first, B 10 ms later.  A must not own all 8 misses at
 * once (7 of them queued behind its one read while B sits idle waiting for
 * them): each block is read once on the node, and B owns some.
 */
static kvs_test_rc test_misses_shared(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL;
	struct kvs_store_stats sa, sb;
	struct st_task ta, tb;
	uint64_t ida = 0;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "share"), 0, 64, 1, 50 * ST_MS);
	cfg.cache.local_rank_size = 2;
	cfg.backend.latency_queue_depth = 1;
	cfg.dispatch_order = KVS_DISPATCH_NATURAL;
	KVS_TRY(st_open(&cfg, &a));
	cfg.cache.device_id = 1;
	KVS_TRY(st_open(&cfg, &b));
	KVS_TRY(blocks_of(&ta, 18, 0, 8));
	KVS_TRY(blocks_of(&tb, 18, 0, 8));
	KVS_CHECK_OK(kvs_store_load(a, ta.shards, 8, &ida));
	usleep(10 * 1000);
	KVS_TRY(st_load(b, &tb, WAIT_MS, 0));
	KVS_TRY(st_wait_expect(a, ida, WAIT_MS, 0, "A's load"));
	KVS_TRY(st_task_verify(&ta));
	KVS_TRY(st_task_verify(&tb));
	KVS_TRY(st_stats(a, st_rank(a), &sa));
	KVS_TRY(st_stats(b, st_rank(b), &sb));
	printf("  owner reads: A %llu, B %llu (8 blocks)\n", (unsigned long long)sa.owner_reads,
	       (unsigned long long)sb.owner_reads);
	KVS_CHECK_EQ(sa.owner_reads + sb.owner_reads, 8);
	KVS_CHECK(sb.owner_reads >= 2);
	kvs_store_close(a);
	kvs_store_close(b);
	st_task_free(&ta);
	st_task_free(&tb);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Lookups                                                                   */

/* Does the posix backend at root hold block b (1, 0, -errno)? */
static int posix_has(const char *root, const struct kvs_block_id *b)
{
	struct kvs_backend_config bc;
	struct kvs_backend *be = NULL;
	int rc;

	kvs_backend_config_init(&bc);
	bc.nroots = 1;
	bc.roots[0] = root;
	bc.shard_bytes = SHARD;
	bc.io_engine = KVS_IO_ENGINE_POOL;
	rc = kvs_backend_open(&bc, &be);
	if (rc)
		return rc;
	rc = kvs_backend_lookup(be, b);
	kvs_backend_close(be);
	return rc;
}

static kvs_test_rc test_lookup_prefix(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *d = NULL, *s = NULL;
	struct st_task tb, tc;
	struct kvs_block_id bc[2] = { st_block(10, 0), st_block(10, 1) };
	bool hits[2];
	uint64_t task = 0;
	char root[256], uid[96], uid2[96];

	KVS_TRY(st_root_init(root, sizeof(root), "lkp"));
	/* B in the backend only: dumped through another cache */
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "lkp_d"), 0, SHARD, 16, 1);
	st_posix(&cfg, root);
	KVS_TRY(st_open(&cfg, &d));
	KVS_TRY(blocks_of(&tb, 10, 0, 1));
	KVS_TRY(st_dump(d, &tb, WAIT_MS));
	kvs_store_close(d);
	/* C in this cache only: its write fails (cached dump: the task says 0) */
	st_cfg(&cfg, kvs_test_unique_id(uid2, sizeof(uid2), "lkp"), 0, SHARD, 16, 1);
	st_posix(&cfg, root);
	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	st_log_quiet = 1;
	KVS_TRY(st_parse(&cfg, "fault_error_ppm=1000000"));
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&tc, 10, 1, 1));
	st_task_fill(&tc);
	KVS_CHECK_OK(kvs_store_dump(s, tc.shards, 1, NULL, &task));
	KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "cached dump of C"));
	KVS_CHECK_EQ(kvs_cache_lookup(kvs_store_cache(s), &bc[1], 1, KVS_ALL_SHARDS, hits), 1);
	KVS_CHECK_EQ(posix_has(root, &bc[1]), 0);
	KVS_CHECK_EQ(kvs_store_lookup(s, bc, 2, hits), 2);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(s, bc, 2), 2);
	st_log_quiet = 0;
	kvs_store_close(s);
	st_task_free(&tb);
	st_task_free(&tc);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* The reserved pool                                                         */

static kvs_test_rc test_reserved_prefetch(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_block_id blocks[8];
	uint64_t task = 0;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "rsvp"), 0, 16, 1, 100 * 1000);
	cfg.cache.reserved_slots = 12;
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t i = 0; i < 8; i++)
		blocks[i] = st_block(11, i);
	KVS_CHECK_OK(kvs_store_prefetch(s, blocks, 8, &task));
	KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "prefetch into the reserved pool"));
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_prealloc_reserved(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[4];
	char uid[96];

	/* 4 main slots, 4 reserved; 2 shards per block, prealloc of shard 1 on */
	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "rsva"), 0, 8, 2, 100 * 1000);
	cfg.cache.reserved_slots = 4;
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < 4; k++) {
		KVS_TRY(blocks_of(&t[k], 12, k, 1));
		KVS_TRY(st_load(s, &t[k], WAIT_MS, 0)); /* then idle: prealloc of shard 1 */
		usleep(20000);
	}
	for (uint32_t k = 0; k < 4; k++) {
		struct kvs_block_id b = st_block(12, k);
		int rc = kvs_cache_exists(kvs_store_cache(s), &b, 0);

		if (rc != 1)
			KVS_FAILF("block %u's shard 0 (READY, main pool) evicted by a prealloc: %d", k, rc);
	}
	kvs_store_close(s);
	for (uint32_t k = 0; k < 4; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* fork                                                                      */

static kvs_test_rc fork_closer(void *arg)
{
	kvs_store_close(arg); /* the child's copy: memory only */
	return KVS_TEST_PASS;
}

static kvs_test_rc test_fork_close(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	pid_t pid;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "fork"), 0, 16, 1, 1000 * 1000);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&t, 13, 0, 4));
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	pid = kvs_test_fork(fork_closer, s);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 0);
	st_task_free(&t);
	KVS_TRY(blocks_of(&t, 13, 4, 4)); /* the parent's store goes on */
	KVS_TRY(st_load(s, &t, WAIT_MS, 0));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A close that outlives a transfer                                          */

static _Atomic uint32_t orphan_logs, orphan_said;

static void orphan_log(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	atomic_fetch_add(&orphan_logs, 1);
	if (strstr(msg, "still in flight"))
		atomic_store(&orphan_said, 1);
}

/*
 * A read of 3 s, tasks of 50 ms: close returns at the bound with the read still
 * in flight, says so, and from then on calls the caller's log callback no more
 * (the caller may have unloaded it: a Python callback is freed at exit); the
 * threads drain by themselves and release the rank (no live entry is left).
 */
static kvs_test_rc test_close_orphans(void)
{
	struct kvs_store_config cfg;
	struct kvs_cache_info info;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0;
	uint32_t at_close;
	char uid[96];
	int rc;

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "orphan"), 0, 16, 1, 3000 * ST_MS);
	cfg.timeout_ns = 50 * ST_MS;
	cfg.log = orphan_log;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&t, 17, 0, 1));
	KVS_CHECK_OK(kvs_store_load(s, t.shards, 1, &task));
	kvs_store_close(s);
	at_close = atomic_load(&orphan_logs);
	printf("  close returned: %u log lines, the orphan said so: %u\n", at_close,
	       (unsigned)atomic_load(&orphan_said));
	KVS_CHECK(atomic_load(&orphan_said));
	for (int i = 0; i < 200; i++) {
		rc = kvs_cache_inspect(uid, &info);
		if (rc == -ENOENT || (rc == 0 && info.ranks_live == 0))
			break;
		usleep(50 * 1000);
	}
	printf("  drained: inspect %d, %u live; %u log lines\n", rc, rc ? 0 : info.ranks_live,
	       (unsigned)atomic_load(&orphan_logs));
	KVS_CHECK(rc == -ENOENT || (rc == 0 && info.ranks_live == 0));
	KVS_CHECK_EQ(atomic_load(&orphan_logs), at_close);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A backend whose poll always fails                                         */

static _Atomic uint64_t perr_polls;

static int perr_open(const struct kvs_backend_config *cfg, void **state)
{
	(void)cfg;
	*state = &perr_polls;
	return 0;
}

static int perr_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state, (void)block;
	return 1;
}

/* The transfer submitted last, and whether poll may complete it (-EIO): the
 * test heals the backend after close, so the orphaned store drains. */
static _Atomic uint64_t perr_token;
static _Atomic bool perr_pending, perr_healed;

static int perr_submit(void *state, const struct kvs_backend_io *io)
{
	(void)state;
	atomic_store(&perr_token, io->token);
	atomic_store(&perr_pending, true);
	return 0;
}

static int perr_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		     uint64_t timeout_ns)
{
	(void)state, (void)timeout_ns;
	atomic_fetch_add(&perr_polls, 1);
	if (max == 0 || !atomic_load(&perr_healed) || !atomic_exchange(&perr_pending, false))
		return -EIO;
	out[0] = (struct kvs_backend_completion){ .token = atomic_load(&perr_token),
						   .result = -EIO };
	return 1;
}

static void perr_close(void *state)
{
	(void)state;
}

static const struct kvs_backend_ops perr_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = perr_open,
	.lookup = perr_lookup,
	.submit_read = perr_submit,
	.submit_write = perr_submit,
	.poll = perr_poll,
	.close = perr_close,
};

static _Atomic uint32_t perr_logs;

static void perr_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN && atomic_fetch_add(&perr_logs, 1) < 5)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}

static kvs_test_rc test_poll_error(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0, polls;
	char uid[96];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "perr"), 0, SHARD, 16, 1);
	cfg.backend.kind = KVS_BACKEND_USER;
	cfg.backend.user_ops = &perr_ops;
	cfg.timeout_ns = 300 * ST_MS;
	cfg.log = perr_log;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_of(&t, 14, 0, 1));
	atomic_store(&perr_polls, 0);
	KVS_CHECK_OK(kvs_store_load(s, t.shards, 1, &task));
	int rc = st_wait(s, task, 5000);
	polls = atomic_load(&perr_polls);
	printf("  task: %d (%s); %llu polls, %u log lines\n", rc, kvs_strerror(rc),
	       (unsigned long long)polls, (unsigned)atomic_load(&perr_logs));
	KVS_CHECK(rc < 0);
	KVS_CHECK(polls < 1000);
	KVS_CHECK(atomic_load(&perr_logs) < 10);
	kvs_store_close(s); /* the read never completes: orphaned */
	/* Healed, the read completes (-EIO) and the store's last thread tears it
	 * down, removing the cache (else a stale one stayed after every run). */
	atomic_store(&perr_healed, true);
	KVS_TRY(st_library_threads_gone(5000));
	KVS_TRY(st_no_segments(uid));
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A stopped peer holding a bucket lock                                      */

/* --child lock_holder <uid> <tag> <ready fd>: hold the bucket lock of block
 * (tag, 1) shard 0, say so, and stop. */
static kvs_test_rc lock_holder(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_block_id k;
	char ch = 'h';

	if (argc != 3)
		KVS_FAILF("usage: --child lock_holder <uid> <tag> <ready fd>");
	k = st_block((uint32_t)arg_l(argv[1]), 1);
	lat_cfg(&cfg, argv[0], 2, 16, 1, 200 * ST_MS);
	cfg.cache.local_rank_size = 3;
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_OK(kvs_core_test_hold_bucket(kvs_store_cache(s), &k, 0));
	KVS_TRY(st_write_full((int)arg_l(argv[2]), &ch, 1));
	raise(SIGSTOP);
	pause();
	return KVS_TEST_FAIL;
}

static kvs_test_rc test_stopped_lock(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL;
	struct st_task ta, tb;
	struct kvs_block_id k2 = st_block(15, 0), k = st_block(15, 1);
	uint64_t ida = 0, t0;
	int sig[2];
	pid_t holder;
	char uid[96], fd_s[16], ch;

	kvs_test_unique_id(uid, sizeof(uid), "stoplk");
	lat_cfg(&cfg, uid, 0, 16, 1, 200 * ST_MS);
	cfg.cache.local_rank_size = 3;
	cfg.cache.lock_timeout_ns = 3 * ST_SEC;
	cfg.dispatch_order = KVS_DISPATCH_NATURAL;
	KVS_TRY(st_open(&cfg, &a));
	cfg.cache.device_id = 1;
	KVS_TRY(st_open(&cfg, &b));
	KVS_CHECK(pipe(sig) == 0);
	snprintf(fd_s, sizeof(fd_s), "%d", sig[1]);
	{
		const char *av[] = { uid, "15", fd_s, NULL };
		holder = kvs_test_spawn("lock_holder", av);
		KVS_CHECK(holder > 0);
	}
	KVS_TRY(st_read_full(sig[0], &ch, 1, 20000));
	/* A: [K2 (owned: a 200 ms read), K (its bucket lock held by a stopped peer)] */
	KVS_TRY(st_task_whole(&ta, 2, 1, SHARD));
	st_task_set(&ta, 0, &k2, 0);
	st_task_set(&ta, 1, &k, 0);
	KVS_CHECK_OK(kvs_store_load(a, ta.shards, 2, &ida));
	usleep(20000); /* A got K2 (a hint only: B is also right as K2's owner) */
	KVS_TRY(st_task_whole(&tb, 1, 1, SHARD));
	st_task_set(&tb, 0, &k2, 0);
	t0 = kvs_now_ns();
	KVS_TRY(st_load(b, &tb, WAIT_MS, 0));
	printf("  B's load of K2 took %llu ms; A's task %s\n",
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS),
	       kvs_store_check(a, ida) == 1 ? "still waits for K's lock" : "is done");
	KVS_CHECK_EQ(kvs_store_check(a, ida), 1);
	kill(holder, SIGKILL);
	(void)kvs_test_reap(holder, 10000);
	int rc = st_wait(a, ida, WAIT_MS);
	printf("  A: %d (%s)\n", rc, kvs_strerror(rc));
	KVS_CHECK(rc != 1);
	kvs_store_close(a);
	kvs_store_close(b);
	close(sig[0]);
	close(sig[1]);
	st_task_free(&ta);
	st_task_free(&tb);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A copy engine that does not finish in time                               */

/* Pinned slots of s's cache now. */
static uint64_t pinned(struct kvs_store *s)
{
	struct kvs_cache_stats cs;

	return kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs) ? UINT64_MAX
									: cs.slots_pinned;
}

/* Wait (bounded) until s's cache pins nothing. */
static kvs_test_rc wait_unpinned(struct kvs_store *s, uint64_t ms)
{
	uint64_t deadline = kvs_deadline_after(ms * ST_MS);

	while (pinned(s) != 0 && kvs_now_ns() < deadline)
		usleep(1000);
	KVS_CHECK_EQ(pinned(s), 0);
	return KVS_TEST_PASS;
}

/* Copies that land 800 ms after they are queued, tasks of 100 ms: the copy
 * engine's sync times out.  The load reports -ETIMEDOUT, but its slot stays
 * pinned until the copy landed (no other rank re-keys a slot a late H2D still
 * reads), and a second load is copied only after the engine drained.  A dump's
 * gather times out likewise: its slot is never published READY or DIRTY with
 * bytes still to land; a peer waiting on it gets a failure, never wrong bytes,
 * and the slot is pinned until the late D2H landed. */
static kvs_test_rc test_copy_timeout(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL, *peer = NULL;
	struct st_task a, b, d, p;
	uint64_t ta = 0, tb = 0, td = 0, tp = 0, t0;
	char uid[96];
	int rc;

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "cptmo"), 0, 16, 1, 0);
	cfg.cache.local_rank_size = 2;
	cfg.timeout_ns = 100 * ST_MS;
	cfg.copy_land_delay_ns = 800 * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	cfg.cache.device_id = 1;
	cfg.copy_land_delay_ns = 0;
	cfg.timeout_ns = 10 * ST_SEC;
	KVS_TRY(st_open(&cfg, &peer));
	KVS_CHECK_EQ(kvs_store_ready(s, 5 * ST_SEC), 1);
	KVS_TRY(blocks_of(&a, 17, 0, 1));
	KVS_TRY(blocks_of(&b, 17, 1, 1));
	st_task_poison(&a);
	t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_store_load(s, a.shards, 1, &ta));
	rc = st_wait(s, ta, WAIT_MS);
	printf("  load whose copy lands late: %d (%s) after %llu ms, %llu slots pinned\n", rc,
	       kvs_strerror(rc), (unsigned long long)((kvs_now_ns() - t0) / ST_MS),
	       (unsigned long long)pinned(s));
	KVS_CHECK_ERR(rc, -ETIMEDOUT);
	KVS_CHECK(kvs_now_ns() - t0 < 700 * ST_MS); /* before the copy landed */
	KVS_CHECK_EQ(pinned(s), 1);                  /* its slot: the copy still reads it */
	/* A second load while poisoned: not copied before the engine drained. */
	st_task_poison(&b);
	KVS_CHECK_OK(kvs_store_load(s, b.shards, 1, &tb));
	rc = st_wait(s, tb, WAIT_MS);
	KVS_CHECK_ERR(rc, -ETIMEDOUT);
	KVS_TRY(wait_unpinned(s, 5000));
	/* Drained: the copier copies again (a task that reports after the drain is
	 * also what orders the late copy into a's buffer before we read it). */
	st_task_poison(&b);
	KVS_CHECK_OK(kvs_store_load(s, b.shards, 1, &tb));
	KVS_TRY(st_wait_expect(s, tb, WAIT_MS, -ETIMEDOUT, "a load of 100 ms, its copy 800 ms"));
	KVS_TRY(st_task_verify(&a)); /* the late copy landed whole */
	/* A dump whose gather lands late; a peer loads the same block meanwhile. */
	KVS_TRY(blocks_of(&d, 18, 0, 1));
	KVS_TRY(blocks_of(&p, 18, 0, 1));
	st_task_fill(&d);
	KVS_CHECK_OK(kvs_store_dump(s, d.shards, 1, NULL, &td));
	usleep(20000); /* the gather is queued: the slot LOADING, ours */
	st_task_poison(&p);
	KVS_CHECK_OK(kvs_store_load(peer, p.shards, 1, &tp));
	KVS_CHECK_ERR(st_wait(s, td, WAIT_MS), -ETIMEDOUT);
	rc = st_wait(peer, tp, WAIT_MS);
	printf("  peer's load of a block whose gather landed late: %d (%s)\n", rc, kvs_strerror(rc));
	if (rc == 0)
		KVS_TRY(st_task_verify(&p)); /* read from the latency backend: right bytes */
	else
		KVS_CHECK_ERR(rc, -ETIMEDOUT);
	KVS_TRY(wait_unpinned(s, 5000));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(peer);
	kvs_store_close(s);
	st_task_free(&a);
	st_task_free(&b);
	st_task_free(&d);
	st_task_free(&p);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Sleeping, not polling                                                     */

struct thread_use {
	uint64_t switches; /* voluntary + involuntary context switches */
	uint64_t ticks;    /* utime + stime, clock ticks */
};

/* This process's newest thread named name (comm; a failed case before may have
 * left a store behind), or -1. */
static int thread_of(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int tid = -1;

	while (d && (e = readdir(d))) {
		char path[300], comm[64] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "re");
		if (f && fgets(comm, sizeof(comm), f) && strncmp(comm, name, strlen(name)) == 0 &&
		    atoi(e->d_name) > tid)
			tid = atoi(e->d_name);
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return tid;
}

static kvs_test_rc thread_usage(int tid, struct thread_use *u)
{
	char path[128], line[256];
	unsigned long long ut = 0, stt = 0;
	FILE *f;

	memset(u, 0, sizeof(*u));
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "re");
	KVS_CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;

		if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
		    sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
			u->switches += v;
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "re");
	KVS_CHECK(f != NULL);
	if (fgets(line, sizeof(line), f)) {
		char *p = strrchr(line, ')');

		/* fields after comm: state(3) ... utime(14) stime(15) */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
				&stt) == 2)
			u->ticks = ut + stt;
	}
	fclose(f);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_sleeping(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	struct thread_use d0, d1, c0, c1;
	uint64_t task = 0;
	int dtid, ctid;
	char uid[96];

	lat_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "sleep"), 0, 16, 1, 1200 * ST_MS);
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_EQ(kvs_store_ready(s, 5 * ST_SEC), 1);
	dtid = thread_of("kvs-dispatch");
	ctid = thread_of("kvs-copier");
	KVS_CHECK(dtid > 0 && ctid > 0);
	KVS_TRY(blocks_of(&t, 16, 0, 1));
	KVS_CHECK_OK(kvs_store_load(s, t.shards, 1, &task));
	usleep(100000);
	KVS_TRY(thread_usage(dtid, &d0));
	KVS_TRY(thread_usage(ctid, &c0));
	usleep(1000000); /* the read is held: 1 s of waiting */
	KVS_TRY(thread_usage(dtid, &d1));
	KVS_TRY(thread_usage(ctid, &c1));
	printf("  over 1 s with one read in flight: dispatcher %llu switches %llu ticks, "
	       "copier %llu switches %llu ticks\n",
	       (unsigned long long)(d1.switches - d0.switches), (unsigned long long)(d1.ticks - d0.ticks),
	       (unsigned long long)(c1.switches - c0.switches), (unsigned long long)(c1.ticks - c0.ticks));
	KVS_TRY(st_wait_expect(s, task, WAIT_MS, 0, "held read"));
	KVS_CHECK(d1.switches - d0.switches <= 50);
	KVS_CHECK(c1.switches - c0.switches <= 200);
	KVS_CHECK(d1.ticks - d0.ticks <= 20);
	KVS_CHECK(c1.ticks - c0.ticks <= 20);
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "load_4x_cache", test_load_4x_cache },
	{ "two_big_loads", test_two_big_loads },
	{ "eight_ranks_2x", test_eight_ranks_2x },
	{ "prefetch_releases", test_prefetch_releases },
	{ "hol_writes", test_hol_writes },
	{ "deadline_one_rank", test_deadline_one_rank },
	{ "misses_shared", test_misses_shared },
	{ "lookup_prefix", test_lookup_prefix },
	{ "reserved_prefetch", test_reserved_prefetch },
	{ "prealloc_reserved", test_prealloc_reserved },
	{ "fork_close", test_fork_close },
	{ "close_orphans", test_close_orphans },
	{ "poll_error", test_poll_error },
	{ "stopped_lock", test_stopped_lock },
	{ "copy_timeout", test_copy_timeout },
	{ "sleeping", test_sleeping },
};

static const struct kvs_test_child children[] = {
	{ "eight_rank", eight_rank },
	{ "lock_holder", lock_holder },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
