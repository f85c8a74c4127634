/*
 * tests/store_ack.c — an acknowledged dump is stored (docs/store.md, "Dumps":
 * the contract and the rules that keep it).  A dump that returned 0 -- durable,
 * or cached and then written -- is loaded byte-exact by a fresh store on a new
 * cache afterwards, whatever closes, expiries, backend faults and slow writes
 * happened.  Each case is a way the second hostile review of the dump protocol
 * (issue 29) made a dump return 0 for a block that never reached the backend,
 * or crash, or wait on the wrong thing.
 *
 *   writes_fail         every write of 64-shard blocks fails (more shards than
 *                       the writes' share of the backend's queue): durable dumps
 *                       report the write's error, cached ones are retried and
 *                       then given up, logged; nothing crashes (before: a double
 *                       free of the block write)
 *   two_closes          cached mode: rank A dumps each block's designated shard
 *                       and closes; rank B dumps the rest and closes at once:
 *                       every block is written (before: 0 of 8); the last close
 *                       keeps the cache for a block nobody completed yet (its
 *                       dumped shard still protected), and says so
 *   durable_vanished    a durably dumped block's file is removed and its shards
 *                       evicted; a second durable dump writes it again (before:
 *                       0, nothing written)
 *   expired_between     shard 0 dumped, shard 1 dumped after shard 0's deadline
 *                       but within its protection (deadline + 1 s): the block is
 *                       written, cached or durable (before: never written);
 *                       shard 1 dumped once shard 0 was dropped (its protection
 *                       over, a sweep): never written, the flush and the durable
 *                       dump say -KVS_EINCOMPLETE
 *   slow_backend        cached dumps of 10 blocks over a backend that takes
 *                       200 ms a write, one at a time, with a 300 ms deadline:
 *                       all 10 written (before: the writes not started by the
 *                       deadline were dropped)
 *   loads_beside_writes a load of a cached block while this rank's block writes
 *                       of 4 x 512 shards are held: served at once (before:
 *                       -ETIMEDOUT, the writes' pins counted against the loads')
 *   stopped_claims      a peer stopped (SIGSTOP) holding the claim table's lock:
 *                       a rank's open, a load of a cached block and a 500 ms
 *                       durable dump each report by their time (before: 10 s,
 *                       20 s, 20 s), and once the peer is killed the table works
 *                       again
 */
#include "core/core.h"
#include "store_dump_util.h"

/* The store's log, counting the block writes its lines say were given up (a
 * line stands for itself and the "(and N more like it ...)" it was limited to;
 * the flush at close says "N more block writes given up") and the lines that
 * say a cache was kept for dumped bytes not in the backend yet. */
static _Atomic int given_up, kept_dirty;

static void ack_log(void *arg, int level, const char *msg)
{
	const char *more = strstr(msg, "(and ");
	unsigned n = 0;

	if (strstr(msg, "given up after"))
		atomic_fetch_add(&given_up, 1 + (more && sscanf(more, "(and %u more", &n) == 1
						     ? (int)n : 0));
	else if (strstr(msg, " more block writes given up") && sscanf(msg, "%u", &n) == 1)
		atomic_fetch_add(&given_up, (int)n);
	if (strstr(msg, "kept, not removed"))
		atomic_fetch_add(&kept_dirty, 1);
	st_log(arg, level, msg);
}

/* A rank over posix root with cfg's other fields from dump_cfg; kv applied. */
static kvs_test_rc ack_open(const char *uid, int32_t device, const char *root, uint32_t spb,
			    uint64_t slots, uint32_t lrs, const char *kv, struct kvs_store **s)
{
	struct kvs_store_config cfg;

	dump_cfg(&cfg, uid, device, root, spb, slots, lrs);
	cfg.log = ack_log;
	if (kv)
		KVS_TRY(st_parse(&cfg, kv));
	return st_open(&cfg, s);
}

/* ------------------------------------------------------------------------ */
/* Every write fails                                                         */

#define FAIL_TAG 60u
#define FAIL_SPB 64u
#define FAIL_BLOCKS 4u

static kvs_test_rc fail_round(const char *root, bool cached)
{
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0, t0;
	char uid[96];
	int rc;

	kvs_test_unique_id(uid, sizeof(uid), cached ? "failc" : "faild");
	/* the default io_queue_depth (64): writes take 48 of it, a block has 64 */
	KVS_TRY(ack_open(uid, 0, root, FAIL_SPB, FAIL_SPB * FAIL_BLOCKS + 64, 1,
			 cached ? "fault_error_ppm=1000000,timeout_ms=1000,dump_wait=cached"
				: "fault_error_ppm=1000000,timeout_ms=1000",
			 &s));
	KVS_TRY(shards_task(&t, FAIL_TAG, cached ? FAIL_BLOCKS : 0, FAIL_BLOCKS, 0, FAIL_SPB));
	t0 = kvs_now_ns();
	KVS_TRY(dump_submit(s, &t, &task));
	rc = st_wait(s, task, DUMP_WAIT_MS);
	printf("  %s dump of %u blocks x %u shards, every write failing: %d (%s) after %llu ms\n",
	       cached ? "cached" : "durable", FAIL_BLOCKS, FAIL_SPB, rc, kvs_strerror(rc),
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	if (cached)
		KVS_CHECK_EQ(rc, 0); /* in the cache: acknowledged */
	else
		KVS_CHECK_ERR(rc, -EIO); /* the write's error, never 0 */
	t0 = kvs_now_ns();
	kvs_store_close(s); /* the writes are retried, then given up: bounded */
	printf("  close: %llu ms; block writes given up (logged): %d\n",
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS), atomic_load(&given_up));
	KVS_CHECK_EQ(atomic_exchange(&given_up, 0), (int)FAIL_BLOCKS);
	KVS_CHECK_EQ(backend_count(root, FAIL_SPB, FAIL_TAG, cached ? FAIL_BLOCKS : 0, FAIL_BLOCKS),
		     0);
	KVS_CHECK_EQ(temp_files(root), 0);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_writes_fail(void)
{
	char root[256];

	KVS_TRY(st_root_init(root, sizeof(root), "fail"));
	KVS_TRY(fail_round(root, false));
	KVS_TRY(fail_round(root, true));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Two clean closes, cached                                                  */

#define CLOSE_TAG 61u
#define CLOSE_SPB 4u
#define CLOSE_BLOCKS 8u

/* A task of shard `which` of every block (designated: the block's designated
 * shard, else every other shard), for cache c. */
static kvs_test_rc close_task(struct kvs_cache *c, struct st_task *t, bool designated)
{
	uint32_t n = 0;

	KVS_TRY(st_task_whole(t, CLOSE_BLOCKS * CLOSE_SPB, 1, DUMP_SHARD));
	for (uint32_t k = 0; k < CLOSE_BLOCKS; k++) {
		struct kvs_block_id b = st_block(CLOSE_TAG, k);
		uint32_t d = kvs_core_claim_designated(c, &b);

		for (uint32_t i = 0; i < CLOSE_SPB; i++)
			if ((i == d) == designated)
				st_task_set(t, n++, &b, i);
	}
	t->n = n;
	return KVS_TEST_PASS;
}

static kvs_test_rc test_two_closes(void)
{
	struct kvs_store *a = NULL, *b = NULL;
	struct st_task ta, tb, half;
	char root[256], uid[96];
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "closes"));
	kvs_test_unique_id(uid, sizeof(uid), "closes");
	KVS_TRY(ack_open(uid, 0, root, CLOSE_SPB, 64, 2, "dump_wait=cached", &a));
	KVS_TRY(ack_open(uid, 1, root, CLOSE_SPB, 64, 2, "dump_wait=cached", &b));
	KVS_TRY(close_task(kvs_store_cache(a), &ta, true));
	KVS_TRY(close_task(kvs_store_cache(b), &tb, false));
	KVS_TRY(st_dump(a, &ta, DUMP_WAIT_MS));
	kvs_store_close(a);
	KVS_TRY(st_dump(b, &tb, DUMP_WAIT_MS)); /* completes every block, rings A */
	KVS_TRY(shards_task(&half, CLOSE_TAG, CLOSE_BLOCKS, 1, 0, 1));
	KVS_TRY(st_dump(b, &half, DUMP_WAIT_MS)); /* one shard of a block nobody completes */
	atomic_store(&kept_dirty, 0);
	kvs_store_close(b); /* the last rank: the cache is kept for that shard, and says */
	KVS_CHECK_EQ(atomic_load(&kept_dirty), 1);
	KVS_TRY(st_remove_dirty(uid, 1));
	have = backend_count(root, CLOSE_SPB, CLOSE_TAG, 0, CLOSE_BLOCKS);
	printf("  %d of %u blocks in the backend after both closes\n", have, CLOSE_BLOCKS);
	KVS_CHECK_EQ(have, (int)CLOSE_BLOCKS);
	KVS_TRY(verify_fresh(root, CLOSE_SPB, CLOSE_TAG, 0, CLOSE_BLOCKS, "closes_v"));
	st_task_free(&ta);
	st_task_free(&tb);
	st_task_free(&half);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A durable dump after the stored copy vanished                             */

#define VANISH_TAG 62u
#define VANISH_SPB 2u
#define VANISH_SLOTS 8u

static kvs_test_rc test_durable_vanished(void)
{
	struct kvs_store *s = NULL;
	struct st_task x, other;
	struct kvs_block_id xb = st_block(VANISH_TAG, 0);
	char root[256], uid[96];
	uint32_t resident = VANISH_SPB;

	KVS_TRY(st_root_init(root, sizeof(root), "vanish"));
	KVS_TRY(ack_open(kvs_test_unique_id(uid, sizeof(uid), "vanish"), 0, root, VANISH_SPB,
			 VANISH_SLOTS, 1, NULL, &s));
	KVS_TRY(shards_task(&x, VANISH_TAG, 0, 1, 0, VANISH_SPB));
	KVS_TRY(st_dump(s, &x, DUMP_WAIT_MS));
	KVS_TRY(check_durable(root, VANISH_SPB, VANISH_TAG, 0, 1, "first dump"));
	/* the stored copy goes (an operator, an expiry); then the cached one.
	 * Past the write's grace: what was seen stored within it is taken as
	 * stored (docs/store.md, "Dumps", rule 5). */
	usleep((KVS_CLAIM_GRACE_NS + 100 * ST_MS) / 1000);
	empty_root(root);
	KVS_CHECK_EQ(backend_count(root, VANISH_SPB, VANISH_TAG, 0, 1), 0);
	for (uint32_t k = 1; resident && k < 64; k++) { /* until no shard of X is left */
		KVS_TRY(shards_task(&other, VANISH_TAG, k, 1, 0, VANISH_SPB));
		KVS_TRY(st_dump(s, &other, DUMP_WAIT_MS));
		st_task_free(&other);
		resident = 0;
		for (uint32_t i = 0; i < VANISH_SPB; i++)
			resident += kvs_cache_exists(kvs_store_cache(s), &xb, i) == 1;
	}
	KVS_CHECK_EQ(resident, 0);
	KVS_TRY(st_dump(s, &x, DUMP_WAIT_MS)); /* durable: 0 only once it is stored again */
	KVS_TRY(check_durable(root, VANISH_SPB, VANISH_TAG, 0, 1, "second dump"));
	kvs_store_close(s);
	KVS_TRY(verify_fresh(root, VANISH_SPB, VANISH_TAG, 0, 1, "vanish_v"));
	st_task_free(&x);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* The claim expired between two shards of a block                           */

#define EXPIRE_TAG 63u

/* Shard 0 of block blk dumped (timeout_ms=300), then shard 1: late, once shard
 * 0 was dropped (its protection over, the node's sweep at most a second later),
 * else 500 ms after shard 0's deadline, within its protection. */
static kvs_test_rc expire_round(const char *root, uint32_t blk, bool cached, bool late)
{
	struct kvs_store *s = NULL;
	struct kvs_cache_stats cs;
	struct st_task t0, t1;
	uint64_t task = 0, deadline;
	char uid[96];
	int have, want = late ? -KVS_EINCOMPLETE : 0;

	kvs_test_unique_id(uid, sizeof(uid), cached ? "expc" : "expd");
	KVS_TRY(ack_open(uid, 0, root, 2, 16, 1,
			 cached ? "timeout_ms=300,dump_wait=cached" : "timeout_ms=300", &s));
	KVS_TRY(shards_task(&t0, EXPIRE_TAG, blk, 1, 0, 1));
	KVS_TRY(shards_task(&t1, EXPIRE_TAG, blk, 1, 1, 1));
	if (cached) {
		KVS_TRY(st_dump(s, &t0, DUMP_WAIT_MS));
	} else { /* a durable dump of half a block: incomplete at its deadline */
		KVS_TRY(dump_submit(s, &t0, &task));
		KVS_TRY(st_wait_expect(s, task, DUMP_WAIT_MS, -KVS_EINCOMPLETE, "shard 0 alone"));
	}
	if (late) { /* dropped: no slot of the node DIRTY any more */
		deadline = kvs_deadline_after(5 * ST_SEC);
		do {
			usleep(20 * 1000);
			KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
		} while (cs.slots_dirty && kvs_now_ns() < deadline);
		KVS_CHECK_EQ(cs.slots_dirty, 0);
	} else {
		usleep(800 * 1000); /* past shard 0's deadline (300 ms), not its protection */
	}
	KVS_TRY(dump_submit(s, &t1, &task));
	KVS_TRY(st_wait_expect(s, task, DUMP_WAIT_MS, cached ? 0 : want, "shard 1"));
	if (cached) /* every block acknowledged in the backend, or said lost */
		KVS_CHECK_ERR(kvs_store_flush(s, DUMP_WAIT_MS * ST_MS, NULL), want);
	have = wait_backend(root, 2, EXPIRE_TAG, blk, 1, late ? 0 : 5000);
	printf("  %s, shard 1 %s: block in the backend: %d\n", cached ? "cached" : "durable",
	       late ? "after shard 0 was dropped" : "within shard 0's protection", have);
	KVS_CHECK_EQ(have, late ? 0 : 1);
	kvs_store_close(s);
	if (late && !cached) /* shard 1, still protected: the cache is kept for it */
		KVS_TRY(st_remove_dirty(uid, 1));
	else if (!late)
		KVS_TRY(verify_fresh(root, 2, EXPIRE_TAG, blk, 1, cached ? "expc_v" : "expd_v"));
	st_task_free(&t0);
	st_task_free(&t1);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_expired_between(void)
{
	char root[256];

	KVS_TRY(st_root_init(root, sizeof(root), "expire"));
	KVS_TRY(expire_round(root, 0, true, false));
	KVS_TRY(expire_round(root, 1, false, false));
	KVS_TRY(expire_round(root, 2, true, true));
	KVS_TRY(expire_round(root, 3, false, true));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A slow backend                                                            */

#define SLOW_TAG 64u
#define SLOW_BLOCKS 10u

static kvs_test_rc test_slow_backend(void)
{
	struct kvs_store *s = NULL;
	struct st_task t;
	char root[256], uid[96];
	uint64_t t0;
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "slow"));
	/* one write at a time (a queue of 2 leaves writes 1), 200 ms each */
	KVS_TRY(ack_open(kvs_test_unique_id(uid, sizeof(uid), "slow"), 0, root, 1, 64, 1,
			 "timeout_ms=300,dump_wait=cached,io_queue_depth=2,fault_delay_us=200000,"
			 "fault_seed=2", &s));
	KVS_TRY(shards_task(&t, SLOW_TAG, 0, SLOW_BLOCKS, 0, 1));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	t0 = kvs_now_ns();
	kvs_store_close(s);
	have = wait_backend(root, 1, SLOW_TAG, 0, SLOW_BLOCKS, 10000);
	printf("  %d of %u cached blocks in the backend (close took %llu ms)\n", have, SLOW_BLOCKS,
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK_EQ(have, (int)SLOW_BLOCKS);
	KVS_TRY(verify_fresh(root, 1, SLOW_TAG, 0, SLOW_BLOCKS, "slow_v"));
	st_task_free(&t);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Loads beside this rank's block writes                                     */

#define BESIDE_TAG 65u
#define BESIDE_SPB 512u
#define BESIDE_BLOCKS 4u

static kvs_test_rc test_loads_beside_writes(void)
{
	static struct gate_conf gc;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task big, hot;
	uint64_t t0, ms;
	char root[256], uid[96], gate[320];

	KVS_TRY(st_root_init(root, sizeof(root), "beside"));
	snprintf(gate, sizeof(gate), "%s.gate", root);
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "beside"), 0, root, BESIDE_SPB,
		 BESIDE_SPB * (BESIDE_BLOCKS + 2), 1);
	st_gated(&cfg, &gc, root, gate);
	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	cfg.timeout_ns = 3 * ST_SEC;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&hot, BESIDE_TAG, BESIDE_BLOCKS, 1, 0, 1));
	KVS_TRY(st_dump(s, &hot, DUMP_WAIT_MS)); /* one shard: never complete, DIRTY in the cache */
	KVS_TRY(gate_set(gate, true));
	KVS_TRY(shards_task(&big, BESIDE_TAG, 0, BESIDE_BLOCKS, 0, BESIDE_SPB));
	KVS_TRY(st_dump(s, &big, DUMP_WAIT_MS));
	/* every block of it complete, this rank its writer, its writes held: 2048
	 * shards pinned by the writes */
	usleep(200 * 1000);
	t0 = kvs_now_ns();
	KVS_TRY(st_load(s, &hot, DUMP_WAIT_MS, 0));
	ms = (kvs_now_ns() - t0) / ST_MS;
	printf("  load of a cached shard beside %u held block writes of %u shards: %llu ms\n",
	       BESIDE_BLOCKS, BESIDE_SPB, (unsigned long long)ms);
	KVS_TRY(gate_set(gate, false));
	kvs_store_close(s);
	KVS_CHECK_EQ(wait_backend(root, BESIDE_SPB, BESIDE_TAG, 0, BESIDE_BLOCKS, DUMP_WAIT_MS),
		     (int)BESIDE_BLOCKS);
	KVS_TRY(st_remove_dirty(uid, 1)); /* the hot shard, never completed: kept */
	st_task_free(&big);
	st_task_free(&hot);
	unlink(gate);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* A peer stopped holding the claim table's lock                             */

#define STOP_TAG 66u

/* --child claims_holder <uid> <root> <ready fd>: a rank that takes the claim
 * table's lock, says so, and stops. */
static kvs_test_rc claims_holder(int argc, char **argv)
{
	struct kvs_store *s = NULL;
	char ch = 'h';

	if (argc != 3)
		KVS_FAILF("usage: --child claims_holder <uid> <root> <ready fd>");
	KVS_TRY(ack_open(argv[0], 2, argv[1], 2, 64, 4, NULL, &s));
	KVS_CHECK_OK(kvs_core_test_hold_claims(kvs_store_cache(s)));
	KVS_TRY(st_write_full((int)arg_l(argv[2]), &ch, 1));
	raise(SIGSTOP);
	pause();
	return KVS_TEST_FAIL;
}

static kvs_test_rc test_stopped_claims(void)
{
	struct kvs_store *a = NULL, *b = NULL;
	struct st_task x, y;
	uint64_t dump = 0, load = 0, t0, open_ms, load_ms, dump_ms;
	char root[256], uid[96], fd_s[16], ch;
	int sig[2], rc_load, rc_dump;
	pid_t holder;

	KVS_TRY(st_root_init(root, sizeof(root), "stopcl"));
	kvs_test_unique_id(uid, sizeof(uid), "stopcl");
	KVS_TRY(ack_open(uid, 0, root, 2, 64, 4, "timeout_ms=500", &a));
	KVS_TRY(shards_task(&x, STOP_TAG, 0, 1, 0, 2));
	KVS_TRY(st_dump(a, &x, DUMP_WAIT_MS)); /* X stored, READY in the cache */
	KVS_CHECK(pipe(sig) == 0);
	snprintf(fd_s, sizeof(fd_s), "%d", sig[1]);
	{
		const char *av[] = { uid, root, fd_s, NULL };
		holder = kvs_test_spawn("claims_holder", av);
		KVS_CHECK(holder > 0);
	}
	KVS_TRY(st_read_full(sig[0], &ch, 1, 20000));
	t0 = kvs_now_ns();
	KVS_TRY(ack_open(uid, 1, root, 2, 64, 4, "timeout_ms=500", &b));
	open_ms = (kvs_now_ns() - t0) / ST_MS;
	KVS_TRY(shards_task(&y, STOP_TAG, 1, 1, 0, 2));
	st_task_fill(&y);
	t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_store_dump(b, y.shards, y.n, NULL, &dump)); /* its claim: the lock */
	st_task_poison(&x);
	KVS_CHECK_OK(kvs_store_load(b, x.shards, x.n, &load)); /* needs no claim */
	rc_load = st_wait(b, load, DUMP_WAIT_MS);
	load_ms = (kvs_now_ns() - t0) / ST_MS;
	rc_dump = st_wait(b, dump, DUMP_WAIT_MS);
	dump_ms = (kvs_now_ns() - t0) / ST_MS;
	printf("  claim table's lock held by a stopped peer: open %llu ms; load of a cached "
	       "block %d (%s) after %llu ms; 500 ms durable dump %d (%s) after %llu ms\n",
	       (unsigned long long)open_ms, rc_load, kvs_strerror(rc_load),
	       (unsigned long long)load_ms, rc_dump, kvs_strerror(rc_dump),
	       (unsigned long long)dump_ms);
	kill(holder, SIGKILL);
	(void)kvs_test_reap(holder, 10000);
	KVS_CHECK_EQ(rc_load, 0);
	KVS_TRY(st_task_verify(&x));
	KVS_CHECK_ERR(rc_dump, -ETIMEDOUT);
	/* by their time, give or take this machine's scheduling */
	KVS_CHECK(open_ms < 2000 && load_ms < 1000 && dump_ms < 2000);
	/* the holder dead: its lock repaired by the next taker, the table works */
	KVS_TRY(st_dump(b, &y, DUMP_WAIT_MS));
	KVS_TRY(check_durable(root, 2, STOP_TAG, 1, 1, "after the holder died"));
	kvs_store_close(b);
	kvs_store_close(a);
	close(sig[0]);
	close(sig[1]);
	st_task_free(&x);
	st_task_free(&y);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "writes_fail", test_writes_fail },
	{ "two_closes", test_two_closes },
	{ "durable_vanished", test_durable_vanished },
	{ "expired_between", test_expired_between },
	{ "slow_backend", test_slow_backend },
	{ "loads_beside_writes", test_loads_beside_writes },
	{ "stopped_claims", test_stopped_claims },
};

static const struct kvs_test_child children[] = {
	{ "claims_holder", claims_holder },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
