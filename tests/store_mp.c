/*
 * tests/store_mp.c — the store across real rank processes (host copy engine),
 * half of them forked and half exec'd (`--child`, so the segments sit at other
 * addresses).  The parent holds a watcher store on each cache: it keeps the
 * segment alive between phases and reads the node's counters (departed ranks
 * included) at the end.  Phases are separated by pipe barriers (a byte per
 * child "ready", a byte per child "go"), never by sleeps.
 *
 * The parent never starts a thread (its watchers use the none or latency
 * backend, which have none; rank stores, and posix backends with their pool
 * workers, live in children), so forking it stays safe, TSan included ("no
 * threads after a multi-threaded fork").
 *
 *   none_8ranks       8 ranks, backend none: rank 0 dumps 64 blocks, then all 8
 *                     load them; every byte right; no backend read on the node.
 *   posix_cold        8 ranks load the same 32 blocks x 4 shards from a cold cache
 *                     over a posix root another cache dumped: the node reads each
 *                     (block, shard) exactly once.
 *   head_slices_tp    a 2-rank group dumps 16 blocks (both dump all: each shard is
 *                     gathered once, the other dump deduplicated, each shard
 *                     written once); a 4-rank group on a new cache loads them, each
 *                     rank its quarter of every tensor: one backend read per shard.
 *   kill9_mid_load    4 ranks load the same blocks from a 300 ms latency backend;
 *                     one is killed (-9) while its owner reads are in flight; the
 *                     others' tasks end 0 (taken over) or -KVS_EOWNERDEAD before
 *                     their timeout; the cache is consistent and serves a new rank.
 *   watcher_process   watcher processes' lookups (cache and backend) agree with
 *                     the rank's, and a watcher cannot load.
 *   dead_pins_reaped  a rank holding 48 pins is killed -9 while a survivor is
 *                     attached and working: the survivor's store reaps it within
 *                     seconds, without any new attach (before: the 48 slots
 *                     stayed pinned until the next process attached).
 */
#include "store_proc.h"

#define SHARD (16 * 1024)
#define WAIT_MS 30000

/* ------------------------------------------------------------------------ */
/* 8 ranks, backend none: one dumps, all load                                */

#define NONE_RANKS 8
#define NONE_BLOCKS 64
#define NONE_SPB 2
#define NONE_SLOTS (NONE_BLOCKS * NONE_SPB + 16)
#define NONE_TAG 100u

static void none_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device)
{
	st_cfg(cfg, uid, device, SHARD, NONE_SLOTS, NONE_SPB);
	cfg->cache.local_rank_size = NONE_RANKS;
}

/* blocks [first, first + n) x every shard, one task */
static kvs_test_rc blocks_task(struct st_task *t, uint32_t tag, uint32_t first, uint32_t n,
			       uint32_t spb, uint32_t tcount, uint64_t shard_bytes)
{
	KVS_TRY(st_task_whole(t, n * spb, tcount, shard_bytes));
	for (uint32_t i = 0; i < n * spb; i++) {
		struct kvs_block_id b = st_block(tag, first + i / spb);
		st_task_set(t, i, &b, i % spb);
	}
	return KVS_TEST_PASS;
}

/* Submit every task, then wait for each (any order of completion). */
static kvs_test_rc run_tasks(struct kvs_store *s, struct st_task *t, uint32_t n, bool dump,
			     const char *who)
{
	uint64_t ids[64];

	KVS_CHECK(n <= 64);
	for (uint32_t k = 0; k < n; k++) {
		int rc;

		if (dump) {
			st_task_fill(&t[k]);
			rc = kvs_store_dump(s, t[k].shards, t[k].n, NULL, &ids[k]);
		} else {
			st_task_poison(&t[k]);
			rc = kvs_store_load(s, t[k].shards, t[k].n, &ids[k]);
		}
		if (rc)
			KVS_FAILF("%s: %s task %u: %d (%s); log: %s", who, dump ? "dump" : "load", k,
				  rc, kvs_strerror(rc), st_last_log);
	}
	for (uint32_t k = 0; k < n; k++) {
		KVS_TRY(st_wait_expect(s, ids[k], WAIT_MS, 0, who));
		if (!dump)
			KVS_TRY(st_task_verify(&t[k]));
	}
	return KVS_TEST_PASS;
}

/* --child none_rank <uid> <device> <ready fd> <go fd> */
static kvs_test_rc none_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t[8];
	char who[32];
	int device;

	if (argc != 4)
		KVS_FAILF("usage: --child none_rank <uid> <device> <ready fd> <go fd>");
	device = (int)arg_l(argv[1]);
	snprintf(who, sizeof(who), "rank %d", device);
	none_cfg(&cfg, argv[0], device);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < 8; k++)
		KVS_TRY(blocks_task(&t[k], NONE_TAG, k * 8, 8, NONE_SPB, 1, SHARD));
	if (device == 0)
		KVS_TRY(run_tasks(s, t, 8, true, who));
	KVS_TRY(barrier_child((int)arg_l(argv[2]), (int)arg_l(argv[3])));
	KVS_TRY(run_tasks(s, t, 8, false, who));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	KVS_CHECK_EQ(st.owner_reads, 0);
	KVS_CHECK_EQ(st.load_hits, NONE_BLOCKS * NONE_SPB);
	KVS_CHECK_EQ(st.shards_loaded, NONE_BLOCKS * NONE_SPB);
	kvs_store_close(s);
	for (uint32_t k = 0; k < 8; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_none_8ranks(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct kvs_store_stats node;
	struct barrier b;
	struct fork_args fa[NONE_RANKS];
	pid_t pids[NONE_RANKS] = { 0 };
	char uid[96], dev[NONE_RANKS][8];

	none_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "none8"), -1);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	for (int i = 0; i < NONE_RANKS; i++) {
		snprintf(dev[i], sizeof(dev[i]), "%d", i);
		const char *av[] = { uid, dev[i], b.ready_s, b.go_s, NULL };
		pids[i] = start_child(i % 2, "none_rank", none_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc r = barrier_release(&b, NONE_RANKS);
	if (r.code)
		kill_all(pids, NONE_RANKS);
	KVS_TRY(r);
	KVS_TRY(reap_all(pids, NONE_RANKS, REAP_MS));
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &node));
	st_print("node", &node);
	KVS_CHECK_EQ(node.owner_reads, 0);
	KVS_CHECK_EQ(node.shards_dumped, NONE_BLOCKS * NONE_SPB);
	KVS_CHECK_EQ(node.tasks_load, NONE_RANKS * 8);
	KVS_CHECK_EQ(node.load_hits, NONE_RANKS * NONE_BLOCKS * NONE_SPB);
	KVS_CHECK_EQ(node.tasks_failed, 0);
	/* rank 0's dump, then every rank's load: one get per shard each (the
	 * dump's counted apart: the loads' are all hits) */
	KVS_TRY(st_gets_add_up(w, (NONE_RANKS + 1) * NONE_BLOCKS * NONE_SPB, NONE_BLOCKS * NONE_SPB));
	KVS_TRY(st_cache_clean(w, false));
	kvs_store_close(w);
	barrier_fini(&b);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* 8 ranks, cold cache over posix: each (block, shard) read once on the node */

#define COLD_RANKS 8
#define COLD_BLOCKS 32
#define COLD_SPB 4
#define COLD_SLOTS (COLD_BLOCKS * COLD_SPB + 32)
#define COLD_TAG 200u

static void cold_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device, const char *root)
{
	st_cfg(cfg, uid, device, SHARD, COLD_SLOTS, COLD_SPB);
	cfg->cache.local_rank_size = COLD_RANKS;
	st_posix(cfg, root);
}

/* --child cold_rank <uid> <root> <device> <ready fd> <go fd> */
static kvs_test_rc cold_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	static struct st_task t[COLD_BLOCKS];
	char who[32];
	int device;

	if (argc != 5)
		KVS_FAILF("usage: --child cold_rank <uid> <root> <device> <ready fd> <go fd>");
	device = (int)arg_l(argv[2]);
	snprintf(who, sizeof(who), "rank %d", device);
	cold_cfg(&cfg, argv[0], device, argv[1]);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < COLD_BLOCKS; k++) /* one task per block */
		KVS_TRY(blocks_task(&t[k], COLD_TAG, k, 1, COLD_SPB, 1, SHARD));
	KVS_TRY(barrier_child((int)arg_l(argv[3]), (int)arg_l(argv[4])));
	KVS_TRY(run_tasks(s, t, COLD_BLOCKS, false, who));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	printf("  rank %d: owner_reads %llu load_hits %llu\n", device,
	       (unsigned long long)st.owner_reads, (unsigned long long)st.load_hits);
	KVS_CHECK_EQ(st.shards_loaded, COLD_BLOCKS * COLD_SPB);
	KVS_CHECK_EQ(st.read_errors, 0);
	kvs_store_close(s);
	for (uint32_t k = 0; k < COLD_BLOCKS; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* --child cold_dumper <uid> <root>: dump every block through cache uid. */
static kvs_test_rc cold_dumper(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *d = NULL;
	struct st_task all;

	if (argc != 2)
		KVS_FAILF("usage: --child cold_dumper <uid> <root>");
	cold_cfg(&cfg, argv[0], 0, argv[1]);
	KVS_TRY(st_open(&cfg, &d));
	KVS_TRY(blocks_task(&all, COLD_TAG, 0, COLD_BLOCKS, COLD_SPB, 1, SHARD));
	KVS_TRY(st_dump(d, &all, WAIT_MS));
	kvs_store_close(d);
	st_task_free(&all);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_posix_cold(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct kvs_store_stats node;
	struct barrier b;
	struct fork_args fa[COLD_RANKS];
	pid_t pids[COLD_RANKS] = { 0 };
	char root[256], uid[96], duid[96], dev[COLD_RANKS][8];

	KVS_TRY(st_root_init(root, sizeof(root), "cold"));
	/* the blocks, dumped by another cache (another process) */
	kvs_test_unique_id(duid, sizeof(duid), "cold_dump");
	{
		const char *av[] = { duid, root, NULL };
		KVS_TRY(run_child(false, "cold_dumper", cold_dumper, av));
	}

	cold_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "cold"), -1, root);
	watcher_of(&cfg);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	for (int i = 0; i < COLD_RANKS; i++) {
		snprintf(dev[i], sizeof(dev[i]), "%d", i);
		const char *av[] = { uid, root, dev[i], b.ready_s, b.go_s, NULL };
		pids[i] = start_child(i % 2, "cold_rank", cold_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc r = barrier_release(&b, COLD_RANKS);
	if (r.code)
		kill_all(pids, COLD_RANKS);
	KVS_TRY(r);
	KVS_TRY(reap_all(pids, COLD_RANKS, REAP_MS));
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &node));
	st_print("node", &node);
	KVS_CHECK_EQ(node.owner_reads, COLD_BLOCKS * COLD_SPB); /* each (block, shard) once */
	KVS_CHECK_EQ(node.read_errors, 0);
	KVS_CHECK_EQ(node.shards_loaded, COLD_RANKS * COLD_BLOCKS * COLD_SPB);
	KVS_CHECK_EQ(node.tasks_failed, 0);
	KVS_TRY(st_gets_add_up(w, COLD_RANKS * COLD_BLOCKS * COLD_SPB, 0));
	KVS_TRY(st_cache_clean(w, false));
	kvs_store_close(w);
	barrier_fini(&b);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Head slices across TP degrees: TP 2 dumps, TP 4 loads quarters            */

#define TP_BLOCKS 16
#define TP_SPB 2
#define TP_TENSOR 8192 /* two tensors per shard */
#define TP_SLOTS (TP_BLOCKS * TP_SPB + 16)
#define TP_TAG 300u

static void tp_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device, const char *root,
		   uint32_t ranks)
{
	st_cfg(cfg, uid, device, 2 * TP_TENSOR, TP_SLOTS, TP_SPB);
	cfg->cache.local_rank_size = ranks;
	cfg->tensor_bytes = TP_TENSOR;
	st_posix(cfg, root);
}

/* --child tp_dump <uid> <root> <device> <ready fd> <go fd>: dump every block,
 * one task per block, whole tensors. */
static kvs_test_rc tp_dump(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	static struct st_task t[TP_BLOCKS];
	char who[32];
	int device;

	if (argc != 5)
		KVS_FAILF("usage: --child tp_dump <uid> <root> <device> <ready fd> <go fd>");
	device = (int)arg_l(argv[2]);
	snprintf(who, sizeof(who), "tp2 rank %d", device);
	tp_cfg(&cfg, argv[0], device, argv[1], 2);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < TP_BLOCKS; k++)
		KVS_TRY(blocks_task(&t[k], TP_TAG, k, 1, TP_SPB, 2, 2 * TP_TENSOR));
	KVS_TRY(barrier_child((int)arg_l(argv[3]), (int)arg_l(argv[4])));
	KVS_TRY(run_tasks(s, t, TP_BLOCKS, true, who));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print(who, &st);
	/* a shard is gathered, skipped, or (the block's writer, a peer gathering
	 * it) neither: waited for and written */
	KVS_CHECK(st.shards_dumped + st.dump_dedup <= TP_BLOCKS * TP_SPB);
	kvs_store_close(s);
	for (uint32_t k = 0; k < TP_BLOCKS; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* --child tp_load <uid> <root> <device> <ready fd> <go fd>: load every block,
 * this rank's quarter of each tensor. */
static kvs_test_rc tp_load(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	static struct st_task t[TP_BLOCKS];
	static const uint64_t tsz[2] = { TP_TENSOR, TP_TENSOR };
	char who[32];
	int device;

	if (argc != 5)
		KVS_FAILF("usage: --child tp_load <uid> <root> <device> <ready fd> <go fd>");
	device = (int)arg_l(argv[2]);
	snprintf(who, sizeof(who), "tp4 rank %d", device);
	tp_cfg(&cfg, argv[0], device, argv[1], 4);
	KVS_TRY(st_open(&cfg, &s));
	uint64_t off[2] = { (uint64_t)device * TP_TENSOR / 4, (uint64_t)device * TP_TENSOR / 4 };
	uint64_t len[2] = { TP_TENSOR / 4, TP_TENSOR / 4 };
	for (uint32_t k = 0; k < TP_BLOCKS; k++) {
		KVS_TRY(st_task_init(&t[k], TP_SPB, 2, tsz, off, len));
		for (uint32_t i = 0; i < TP_SPB; i++) {
			struct kvs_block_id b = st_block(TP_TAG, k);
			st_task_set(&t[k], i, &b, i);
		}
	}
	KVS_TRY(barrier_child((int)arg_l(argv[3]), (int)arg_l(argv[4])));
	KVS_TRY(run_tasks(s, t, TP_BLOCKS, false, who));
	kvs_store_close(s);
	for (uint32_t k = 0; k < TP_BLOCKS; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

static kvs_test_rc tp_group(const char *uid, const char *root, uint32_t ranks, const char *name,
			    child_fn fn, struct kvs_store_stats *node)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct barrier b;
	struct fork_args fa[4];
	pid_t pids[4] = { 0 };
	char dev[4][8];

	tp_cfg(&cfg, uid, -1, root, ranks);
	watcher_of(&cfg);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	for (uint32_t i = 0; i < ranks; i++) {
		snprintf(dev[i], sizeof(dev[i]), "%u", i);
		const char *av[] = { uid, root, dev[i], b.ready_s, b.go_s, NULL };
		pids[i] = start_child(i % 2 == 0, name, fn, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc r = barrier_release(&b, (int)ranks);
	if (r.code)
		kill_all(pids, (int)ranks);
	KVS_TRY(r);
	KVS_TRY(reap_all(pids, (int)ranks, REAP_MS));
	KVS_TRY(st_stats(w, KVS_STATS_NODE, node));
	st_print(name, node);
	KVS_TRY(st_cache_clean(w, false));
	kvs_store_close(w);
	barrier_fini(&b);
	return KVS_TEST_PASS;
}

/* A watcher of a fresh cache of the TP cases' geometry (a block file is found
 * only by a reader of the geometry it was dumped with) on root finds blocks
 * 0..n-1 of tag in the backend (in a child: the posix backend's pool has threads). */
static kvs_test_rc backend_has_child(int argc, char **argv);

static kvs_test_rc backend_has(const char *root, uint32_t tag, uint32_t n)
{
	char tag_s[16], n_s[16];

	snprintf(tag_s, sizeof(tag_s), "%u", tag);
	snprintf(n_s, sizeof(n_s), "%u", n);
	const char *av[] = { root, tag_s, n_s, NULL };
	return run_child(false, "backend_has", backend_has_child, av);
}

/* --child backend_has <root> <tag> <n> */
static kvs_test_rc backend_has_child(int argc, char **argv)
{
	if (argc != 3)
		KVS_FAILF("usage: --child backend_has <root> <tag> <n>");
	const char *root = argv[0];
	uint32_t tag = (uint32_t)arg_l(argv[1]), n = (uint32_t)arg_l(argv[2]);
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct kvs_block_id blocks[64];
	bool hits[64];
	char uid[96];
	int got;

	KVS_CHECK(n <= 64);
	tp_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "has"), -1, root, 1);
	KVS_TRY(st_open(&cfg, &w));
	for (uint32_t i = 0; i < n; i++)
		blocks[i] = st_block(tag, i);
	got = kvs_store_lookup(w, blocks, n, hits);
	kvs_store_close(w);
	for (uint32_t i = 0; i < n; i++)
		if (!hits[i])
			KVS_FAILF("block %u not in the backend after the dumps (%d of %u blocks)", i, got,
				  n);
	KVS_CHECK_EQ(got, n);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_head_slices_tp(void)
{
	struct kvs_store_stats node;
	char root[256], uid2[96], uid4[96];

	KVS_TRY(st_root_init(root, sizeof(root), "tp"));
	kvs_test_unique_id(uid2, sizeof(uid2), "tp2");
	kvs_test_unique_id(uid4, sizeof(uid4), "tp4");
	KVS_TRY(tp_group(uid2, root, 2, "tp_dump", tp_dump, &node));
	KVS_TRY(backend_has(root, TP_TAG, TP_BLOCKS));
	KVS_CHECK_EQ(node.tasks_dump, 2 * TP_BLOCKS);
	KVS_CHECK_EQ(node.shards_dumped, TP_BLOCKS * TP_SPB); /* each shard gathered once */
	/* the other rank skipped it, unless it was the block's writer (shard > 0) */
	KVS_CHECK(node.dump_dedup >= TP_BLOCKS && node.dump_dedup <= TP_BLOCKS * TP_SPB);
	KVS_CHECK_EQ(node.backend_writes, TP_BLOCKS * TP_SPB); /* and written once */
	KVS_CHECK_EQ(node.write_errors, 0);
	KVS_CHECK_EQ(node.tasks_failed, 0);
	KVS_TRY(tp_group(uid4, root, 4, "tp_load", tp_load, &node));
	KVS_CHECK_EQ(node.tasks_load, 4 * TP_BLOCKS);
	KVS_CHECK_EQ(node.owner_reads, TP_BLOCKS * TP_SPB); /* one backend read per shard */
	KVS_CHECK_EQ(node.shards_loaded, 4 * TP_BLOCKS * TP_SPB);
	KVS_CHECK_EQ(node.copy_bytes, 4ull * TP_BLOCKS * TP_SPB * 2 * (TP_TENSOR / 4));
	KVS_CHECK_EQ(node.tasks_failed, 0);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* kill -9 of a rank with owner reads in flight                              */

#define K9_RANKS 4
#define K9_BLOCKS 8
#define K9_SPB 4
#define K9_SLOTS (K9_BLOCKS * K9_SPB + 16)
#define K9_TAG 400u
#define K9_LATENCY_MS 300

static kvs_test_rc k9_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device)
{
	st_cfg(cfg, uid, device, SHARD, K9_SLOTS, K9_SPB);
	cfg->cache.local_rank_size = K9_RANKS;
	KVS_TRY(st_parse(cfg, "backend=latency,latency_us=300000,timeout_ms=20000"));
	return KVS_TEST_PASS;
}

/* --child k9_rank <uid> <idx> <ready fd> <go fd> <result fd>: say {idx, rank
 * entry}, wait for go, load every block (one task per block), expect each task
 * 0 (bytes checked) or -KVS_EOWNERDEAD, send {idx, number of EOWNERDEAD}. */
static kvs_test_rc k9_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	static struct st_task t[K9_BLOCKS];
	uint64_t ids[K9_BLOCKS];
	unsigned char msg[2], ch;
	int idx, dead = 0;

	if (argc != 5)
		KVS_FAILF("usage: --child k9_rank <uid> <idx> <ready fd> <go fd> <result fd>");
	idx = (int)arg_l(argv[1]);
	KVS_TRY(k9_cfg(&cfg, argv[0], idx));
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < K9_BLOCKS; k++)
		KVS_TRY(blocks_task(&t[k], K9_TAG, k, 1, K9_SPB, 1, SHARD));
	msg[0] = (unsigned char)idx;
	msg[1] = (unsigned char)st_rank(s);
	KVS_TRY(st_write_full((int)arg_l(argv[2]), msg, 2));
	KVS_TRY(st_read_full((int)arg_l(argv[3]), &ch, 1, BARRIER_MS));
	for (uint32_t k = 0; k < K9_BLOCKS; k++) {
		st_task_poison(&t[k]);
		KVS_CHECK_OK(kvs_store_load(s, t[k].shards, t[k].n, &ids[k]));
	}
	uint64_t t0 = kvs_now_ns();
	for (uint32_t k = 0; k < K9_BLOCKS; k++) {
		/* the task timeout is 20 s: every task must end before it */
		int rc = st_wait(s, ids[k], 25000);

		if (rc == 0) {
			KVS_TRY(st_task_verify(&t[k]));
		} else if (rc == -KVS_EOWNERDEAD) {
			dead++;
		} else {
			KVS_FAILF("k9 rank %d: task %u: %d (%s), want 0 or -KVS_EOWNERDEAD", idx, k, rc,
				  kvs_strerror(rc));
		}
	}
	printf("  k9 rank %d: %d tasks -KVS_EOWNERDEAD, all done in %llu ms\n", idx, dead,
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	kvs_store_close(s);
	msg[1] = (unsigned char)dead;
	KVS_TRY(st_write_full((int)arg_l(argv[4]), msg, 2));
	for (uint32_t k = 0; k < K9_BLOCKS; k++)
		st_task_free(&t[k]);
	return KVS_TEST_PASS;
}

/* --child k9_check <uid>: a new rank loads every block (right bytes). */
static kvs_test_rc k9_check(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *r = NULL;
	struct st_task all;

	if (argc != 1)
		KVS_FAILF("usage: --child k9_check <uid>");
	KVS_TRY(k9_cfg(&cfg, argv[0], 0));
	KVS_TRY(st_open(&cfg, &r));
	KVS_TRY(blocks_task(&all, K9_TAG, 0, K9_BLOCKS, K9_SPB, 1, SHARD));
	KVS_TRY(st_load(r, &all, WAIT_MS, 0));
	st_task_free(&all);
	kvs_store_close(r);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_kill9_mid_load(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct kvs_store_stats st, node;
	struct kvs_cache_stats cs;
	struct barrier b;
	struct fork_args fa[K9_RANKS];
	pid_t pids[K9_RANKS] = { 0 };
	int rank_of[K9_RANKS], res[2], victim = -1, dead = 0;
	char uid[96], idx[K9_RANKS][8], res_s[16];
	unsigned char msg[2 * K9_RANKS];

	KVS_TRY(k9_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "k9"), -1));
	watcher_of(&cfg);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	if (pipe(res))
		KVS_FAILF("pipe: %s", strerror(errno));
	snprintf(res_s, sizeof(res_s), "%d", res[1]);
	for (int i = 0; i < K9_RANKS; i++) {
		snprintf(idx[i], sizeof(idx[i]), "%d", i);
		const char *av[] = { uid, idx[i], b.ready_s, b.go_s, res_s, NULL };
		pids[i] = start_child(i % 2, "k9_rank", k9_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc rr = st_read_full(b.ready[0], msg, sizeof(msg), BARRIER_MS);
	if (rr.code)
		kill_all(pids, K9_RANKS);
	KVS_TRY(rr);
	for (int i = 0; i < K9_RANKS; i++) {
		KVS_CHECK(msg[2 * i] < K9_RANKS);
		rank_of[msg[2 * i]] = msg[2 * i + 1];
	}
	memset(msg, 'g', sizeof(msg));
	KVS_TRY(st_write_full(b.go[1], msg, K9_RANKS));
	/* the first rank seen with an owner read submitted (300 ms in flight) dies */
	uint64_t deadline = kvs_deadline_after(20 * ST_SEC), seen = 0, late;
	while (victim < 0 && kvs_now_ns() < deadline) {
		for (int i = 0; i < K9_RANKS && victim < 0; i++) {
			seen = kvs_now_ns(); /* before the look: the reads began earlier */
			if (kvs_store_stats(w, rank_of[i], &st) == 0 && st.owner_reads > 0)
				victim = i;
		}
		if (victim < 0)
			sched_yield();
	}
	if (victim < 0) {
		kill_all(pids, K9_RANKS);
		KVS_FAILF("no rank submitted an owner read within 20 s");
	}
	kill(pids[victim], SIGKILL);
	late = kvs_now_ns() - seen;
	printf("  killed rank %d (entry %d) after %llu owner reads, %llu us after seeing them\n",
	       victim, rank_of[victim], (unsigned long long)st.owner_reads,
	       (unsigned long long)(late / 1000));
	KVS_CHECK_EQ(kvs_test_reap(pids[victim], 10000), 128 + SIGKILL);
	pids[victim] = 0;
	int bad = 0;
	for (int i = 0; i < K9_RANKS; i++) {
		if (i == victim)
			continue;
		int rc = kvs_test_reap(pids[i], REAP_MS);
		if (rc != 0) {
			fprintf(stderr, "survivor %d exited %d\n", i, rc);
			bad++;
		}
	}
	KVS_CHECK_EQ(bad, 0);
	KVS_TRY(st_read_full(res[0], msg, 2 * (K9_RANKS - 1), 1000));
	for (int i = 0; i < K9_RANKS - 1; i++)
		dead += msg[2 * i + 1];
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(w)));
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &node));
	KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
	st_print("node", &node);
	printf("  takeovers %llu, ranks reaped %llu, %d tasks -KVS_EOWNERDEAD\n",
	       (unsigned long long)cs.takeovers, (unsigned long long)cs.ranks_reaped, dead);
	/* the victim's reads were redone (takeover or a new owner) or failed for
	 * its waiters: the node read more than every shard once, or someone saw
	 * -KVS_EOWNERDEAD */
	if (late < (K9_LATENCY_MS - 50) * ST_MS) /* its reads were surely in flight */
		KVS_CHECK(node.owner_reads > K9_BLOCKS * K9_SPB || dead > 0);
	else
		printf("  (killed %llu ms late: its reads may have completed)\n",
		       (unsigned long long)(late / ST_MS));

	/* a new rank loads everything: no slot is stuck */
	{
		const char *av[] = { uid, NULL };
		KVS_TRY(run_child(true, "k9_check", k9_check, av));
	}
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(w)));
	KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
	KVS_CHECK_EQ(cs.slots_pinned, 0);
	kvs_store_close(w);
	barrier_fini(&b);
	close(res[0]);
	close(res[1]);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Watcher processes                                                         */

#define W_BLOCKS 16
#define W_TAG 500u

static void w_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device, const char *root)
{
	st_cfg(cfg, uid, device, SHARD, 32, 1);
	cfg->cache.local_rank_size = 2;
	st_posix(cfg, root);
}

/* What a view sends: store hits, cache hits, prefix, the rank's entry and its
 * tasks_dump. */
struct w_view {
	unsigned char store[W_BLOCKS], cache[W_BLOCKS];
	int32_t nstore, prefix, rank;
	uint64_t rank_dumps;
};

static kvs_test_rc w_look(struct kvs_store *st_, int rank, struct w_view *v)
{
	struct kvs_store_stats st;
	struct kvs_block_id blocks[W_BLOCKS];
	bool hs[W_BLOCKS], hc[W_BLOCKS];

	for (int i = 0; i < W_BLOCKS; i++)
		blocks[i] = st_block(W_TAG, (uint64_t)i);
	memset(v, 0, sizeof(*v));
	v->nstore = kvs_store_lookup(st_, blocks, W_BLOCKS, hs);
	KVS_CHECK_OK(v->nstore);
	KVS_CHECK_OK(kvs_cache_lookup(kvs_store_cache(st_), blocks, W_BLOCKS, KVS_ALL_SHARDS, hc));
	for (int i = 0; i < W_BLOCKS; i++) {
		v->store[i] = hs[i];
		v->cache[i] = hc[i];
	}
	v->prefix = kvs_store_lookup_prefix(st_, blocks, W_BLOCKS);
	KVS_TRY(st_stats(st_, rank, &st));
	v->rank = rank;
	v->rank_dumps = st.tasks_dump;
	return KVS_TEST_PASS;
}

/* --child w_dump <uid> <root> <first> <n>: dump blocks [first, first + n). */
static kvs_test_rc w_dump(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *x = NULL;
	struct st_task t;

	if (argc != 4)
		KVS_FAILF("usage: --child w_dump <uid> <root> <first> <n>");
	w_cfg(&cfg, argv[0], 0, argv[1]);
	KVS_TRY(st_open(&cfg, &x));
	KVS_TRY(blocks_task(&t, W_TAG, (uint32_t)arg_l(argv[2]), (uint32_t)arg_l(argv[3]), 1, 1,
			    SHARD));
	KVS_TRY(st_dump(x, &t, WAIT_MS));
	st_task_free(&t);
	kvs_store_close(x);
	return KVS_TEST_PASS;
}

/* --child w_rank <uid> <root> <result fd> <go fd>: the rank: dump blocks 0..7,
 * send its view, stay attached until go. */
static kvs_test_rc w_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	struct w_view v;
	char ch;

	if (argc != 4)
		KVS_FAILF("usage: --child w_rank <uid> <root> <result fd> <go fd>");
	w_cfg(&cfg, argv[0], 0, argv[1]);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_task(&t, W_TAG, 0, 8, 1, 1, SHARD));
	KVS_TRY(st_dump(s, &t, WAIT_MS));
	st_task_free(&t);
	KVS_TRY(w_look(s, st_rank(s), &v));
	KVS_TRY(st_write_full((int)arg_l(argv[2]), &v, sizeof(v)));
	KVS_TRY(st_read_full((int)arg_l(argv[3]), &ch, 1, BARRIER_MS));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

/* --child watcher <uid> <root> <rank entry> <result fd>: a watcher's view; a
 * watcher cannot load. */
static kvs_test_rc watcher(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct w_view v;
	struct st_task t;
	uint64_t task;

	if (argc != 4)
		KVS_FAILF("usage: --child watcher <uid> <root> <rank entry> <result fd>");
	w_cfg(&cfg, argv[0], -1, argv[1]);
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(w_look(w, (int)arg_l(argv[2]), &v));
	KVS_TRY(blocks_task(&t, W_TAG, 0, 1, 1, 1, SHARD));
	KVS_CHECK_ERR(kvs_store_load(w, t.shards, 1, &task), -EOPNOTSUPP);
	st_task_free(&t);
	kvs_store_close(w);
	KVS_TRY(st_write_full((int)arg_l(argv[3]), &v, sizeof(v)));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_watcher_process(void)
{
	struct w_view rv;
	struct fork_args fa;
	struct barrier b;
	pid_t rank;
	char root[256], uid[96], xuid[96], rank_s[16];

	KVS_TRY(st_root_init(root, sizeof(root), "wproc"));
	/* blocks 8..11: dumped through another cache, so in the backend only */
	kvs_test_unique_id(xuid, sizeof(xuid), "wproc_x");
	{
		const char *av[] = { xuid, root, "8", "4", NULL };
		KVS_TRY(run_child(false, "w_dump", w_dump, av));
	}
	/* blocks 0..7: dumped by the rank (cache and backend); 12..15 absent */
	kvs_test_unique_id(uid, sizeof(uid), "wproc");
	KVS_TRY(barrier_init(&b)); /* ready: the rank's view; go: it may leave */
	{
		const char *av[] = { uid, root, b.ready_s, b.go_s, NULL };
		rank = start_child(true, "w_rank", w_rank, av, &fa);
		KVS_CHECK(rank > 0);
	}
	kvs_test_rc r = st_read_full(b.ready[0], &rv, sizeof(rv), BARRIER_MS);
	if (r.code)
		kill_all(&rank, 1);
	KVS_TRY(r);
	KVS_CHECK_EQ(rv.nstore, 12);
	KVS_CHECK_EQ(rv.prefix, 12);
	KVS_CHECK_EQ(rv.rank_dumps, 1);
	for (int i = 0; i < W_BLOCKS; i++) {
		KVS_CHECK_EQ(rv.store[i], i < 12);
		KVS_CHECK_EQ(rv.cache[i], i < 8);
	}
	snprintf(rank_s, sizeof(rank_s), "%d", rv.rank);
	for (int e = 0; e < 2; e++) {
		const char *av[] = { uid, root, rank_s, b.ready_s, NULL };
		struct fork_args wfa;
		struct w_view v;
		pid_t pid = start_child(e, "watcher", watcher, av, &wfa);

		KVS_CHECK(pid > 0);
		KVS_CHECK_EQ(kvs_test_reap(pid, REAP_MS), 0);
		KVS_TRY(st_read_full(b.ready[0], &v, sizeof(v), 1000));
		printf("  %s watcher: %d store hits, prefix %d\n", e ? "exec'd" : "forked", v.nstore,
		       v.prefix);
		KVS_CHECK_EQ(v.nstore, rv.nstore);
		KVS_CHECK_EQ(v.prefix, rv.prefix);
		for (int i = 0; i < W_BLOCKS; i++) {
			if (v.store[i] != rv.store[i] || v.cache[i] != rv.cache[i])
				KVS_FAILF("block %d: watcher store %d cache %d, rank store %d cache %d", i,
					  v.store[i], v.cache[i], rv.store[i], rv.cache[i]);
		}
		KVS_CHECK_EQ(v.rank_dumps, rv.rank_dumps);
	}
	KVS_TRY(st_write_full(b.go[1], "g", 1));
	KVS_CHECK_EQ(kvs_test_reap(rank, REAP_MS), 0);
	barrier_fini(&b);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A dead rank's pins, reaped by a survivor already attached                  */

#define DP_SLOTS 64
#define DP_PINS 48
#define DP_TAG 140u

static void dp_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device)
{
	st_cfg(cfg, uid, device, SHARD, DP_SLOTS, 1);
	cfg->cache.local_rank_size = 2;
	st_latency(cfg, ST_MS);
}

/* --child dp_pinner <uid> <ready fd>: pin DP_PINS slots (READY, held), say so,
 * wait to be killed. */
static kvs_test_rc dp_pinner(int argc, char **argv)
{
	static struct kvs_slot slots[DP_PINS];
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char ch = 'p';

	if (argc != 2)
		KVS_FAILF("usage: --child dp_pinner <uid> <ready fd>");
	dp_cfg(&cfg, argv[0], 1);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t i = 0; i < DP_PINS; i++) {
		struct kvs_block_id b = st_block(DP_TAG, 1000 + i);

		KVS_CHECK_OK(kvs_cache_get(kvs_store_cache(s), &b, 0, 0, &slots[i]));
		KVS_CHECK_OK(kvs_slot_publish_ready(kvs_store_cache(s), &slots[i]));
	}
	KVS_TRY(st_write_full((int)arg_l(argv[1]), &ch, 1));
	pause();
	return KVS_TEST_FAIL;
}

/* --child dp_survivor <uid> <ready fd> <go fd>: attached before the pinner dies;
 * after it died, loads and waits (bounded) for no slot to be pinned. */
static kvs_test_rc dp_survivor(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_cache_stats cs;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t t0, deadline;

	if (argc != 3)
		KVS_FAILF("usage: --child dp_survivor <uid> <ready fd> <go fd>");
	dp_cfg(&cfg, argv[0], 0);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(blocks_task(&t, DP_TAG, 0, 8, 1, 1, SHARD));
	KVS_TRY(barrier_child((int)arg_l(argv[1]), (int)arg_l(argv[2]))); /* the pinner is dead */
	t0 = kvs_now_ns();
	deadline = kvs_deadline_after(5 * ST_SEC);
	do {
		KVS_TRY(st_load(s, &t, WAIT_MS, 0));
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
	} while (cs.slots_pinned > 0 && kvs_now_ns() < deadline && usleep(50 * 1000) == 0);
	printf("  a dead rank's %u pins: %llu left after %llu ms of a survivor's loads\n", DP_PINS,
	       (unsigned long long)cs.slots_pinned, (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK_EQ(cs.slots_pinned, 0);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_dead_pins_reaped(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	struct barrier b;
	pid_t pinner, survivor;
	char uid[96], ch;

	kvs_test_unique_id(uid, sizeof(uid), "deadpins");
	dp_cfg(&cfg, uid, 0);
	watcher_of(&cfg);
	cfg.cache.flags |= KVS_CACHE_PERSIST;
	KVS_TRY(st_open(&cfg, &w));
	KVS_TRY(barrier_init(&b));
	{
		const char *av[] = { uid, b.ready_s, b.go_s, NULL };
		survivor = kvs_test_spawn("dp_survivor", av);
		KVS_CHECK(survivor > 0);
	}
	KVS_TRY(st_read_full(b.ready[0], &ch, 1, BARRIER_MS)); /* attached */
	{
		const char *av[] = { uid, b.ready_s, NULL };
		pinner = kvs_test_spawn("dp_pinner", av);
		KVS_CHECK(pinner > 0);
	}
	KVS_TRY(st_read_full(b.ready[0], &ch, 1, BARRIER_MS)); /* pinned */
	kill(pinner, SIGKILL);
	(void)kvs_test_reap(pinner, 10000);
	KVS_TRY(st_write_full(b.go[1], "g", 1));
	KVS_TRY(reap_all(&survivor, 1, REAP_MS));
	barrier_fini(&b);
	KVS_TRY(st_close_kept(w, uid));
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "none_8ranks", test_none_8ranks },
	{ "posix_cold", test_posix_cold },
	{ "head_slices_tp", test_head_slices_tp },
	{ "kill9_mid_load", test_kill9_mid_load },
	{ "watcher_process", test_watcher_process },
	{ "dead_pins_reaped", test_dead_pins_reaped },
};

static const struct kvs_test_child children[] = {
	{ "none_rank", none_rank },
	{ "cold_rank", cold_rank },
	{ "tp_dump", tp_dump },
	{ "tp_load", tp_load },
	{ "k9_rank", k9_rank },
	{ "k9_check", k9_check },
	{ "cold_dumper", cold_dumper },
	{ "backend_has", backend_has_child },
	{ "w_dump", w_dump },
	{ "w_rank", w_rank },
	{ "watcher", watcher },
	{ "dp_pinner", dp_pinner },
	{ "dp_survivor", dp_survivor },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
