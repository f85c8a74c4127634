/*
 * tests/store_record.c — the dump record (docs/store.md, "Dumps"): a shard a
 * dump acknowledged stays DIRTY in the cache until its block is in the backend,
 * whoever dies, closes or watches, and kvs_store_flush says when a rank's
 * cached dumps got there.  Each case is one of the ways the third hostile
 * review of the dump protocol lost an acknowledged dump, with real rank processes (forked
 * and exec'd) killed -9, and the cache left stale for an adopter.  Every block
 * a dump acknowledged is loaded byte-exact by a fresh cache at the end.
 *
 *   survivor_writes     rank A's cached dump of X returned 0 (timeout_ms 300),
 *                       its writes held (a stuck pwrite), A killed -9 while rank
 *                       B runs; past A's deadline B dumps 300 other blocks (claims
 *                       churning on every hash chain); B's clean close, the
 *                       node's last: X is in the backend (before: a join of B
 *                       freed the dead writer's claim, the close removed the
 *                       cache with X)
 *   adoption_overflow   rank A (the cache's only process) dumped 200 partial
 *                       blocks over 4 steps of 300 ms and then one complete X,
 *                       cached, writes held, killed -9; the claim table has 128
 *                       entries.  B's open adopts the cache and writes X, and
 *                       drops the partial ones once their protection is over
 *                       (before: claims re-made in slot order, none for X)
 *   big_block           a block of 4200 shards (more than a process's 4096 pins):
 *                       a durable dump returns 0 with the block in the backend,
 *                       a cached one is flushed there (before: -KVS_EINCOMPLETE;
 *                       cached 0, never written, no ERROR line)
 *   watcher_close       a stale cache holding A's acknowledged X (A killed -9):
 *                       a watcher store's open and close, and a watcher that
 *                       stayed attached through A's death plus a stat-like
 *                       attach and detach, leave it in place; the next rank
 *                       writes X (before: removed with X)
 *   live_closes         two live ranks, timeout_ms=100, cached: A dumps each
 *                       block's designated shard, B the rest 150 ms later (past
 *                       A's deadline), A goes on with 4 more steps; both close
 *                       cleanly: every block is in the backend (before: 0 of 8,
 *                       A no longer watched those claims)
 *   last_close_slow     one rank exits right after cached dumps of 10 blocks x
 *                       8 shards over a backend taking 200 ms a write, 4 at a
 *                       time: kvs_store_flush(50 ms) says -ETIMEDOUT and how
 *                       many are left; the rank's close and exit leave the cache
 *                       stale with the rest, and the next rank writes them all;
 *                       a second run that flushes first finds all 10 written
 *                       before its close (before: the same blocks reached the
 *                       backend only through the next rank, and nothing told
 *                       the caller: close returns void, there was no flush)
 *   backend_mismatch    a rank whose backend_roots differ from the cache's ranks'
 *                       is refused (-KVS_ECONFIG) naming both; once the cache
 *                       is gone, it binds its own
 *   flush               flush with nothing dumped, from a watcher, after cached
 *                       dumps (0, all in the backend, pending 0), and NULL
 */
#include "core/core.h"
#include "store_dump_util.h"

#define REC_SPB 4u
#define REC_SLOTS 256u /* 64 whole blocks: a claim table of 128 */
#define REC_TAG 90u

/* A rank over posix root (or the gated backend over it, gate not "-"):
 * cached dumps with a timeout_ms of ms. */
static kvs_test_rc rec_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device,
			   const char *root, uint32_t spb, uint64_t slots, uint32_t lrs, uint64_t ms)
{
	dump_cfg(cfg, uid, device, root, spb, slots, lrs);
	cfg->dump_wait = KVS_DUMP_WAIT_CACHED;
	cfg->timeout_ns = ms * ST_MS;
	return KVS_TEST_PASS;
}

/* --child rec_dumper <uid> <root> <gate> <partial> <batch> <timeout_ms> <signal fd>:
 * a rank that dumps, cached, shard 0 of blocks 1..partial of REC_TAG (batch
 * blocks a task, each task's protection left to pass before the next: the
 * partial blocks of a run of steps, not of one), then every shard of block 0
 * (its writes held by the gate), says 'd' on the fd and waits to be killed. */
static kvs_test_rc rec_dumper(int argc, char **argv)
{
	static struct gate_conf gc;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task part, whole;
	uint32_t partial, batch;
	uint64_t ms;
	char ch = 'd';

	if (argc != 7)
		KVS_FAILF("usage: --child rec_dumper <uid> <root> <gate> <partial> <batch> <ms> <fd>");
	partial = (uint32_t)arg_l(argv[3]);
	batch = (uint32_t)arg_l(argv[4]);
	ms = (uint64_t)arg_l(argv[5]);
	KVS_TRY(rec_cfg(&cfg, argv[0], 0, argv[1], REC_SPB, REC_SLOTS, 2, ms));
	st_gated(&cfg, &gc, argv[1], argv[2]);
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t k = 0; k < partial; k += batch) {
		KVS_TRY(shards_task(&part, REC_TAG, 1 + k, partial - k < batch ? partial - k : batch,
				    0, 1));
		KVS_TRY(st_dump(s, &part, DUMP_WAIT_MS));
		st_task_free(&part);
		if (k + batch < partial)
			usleep((ms + 1300) * 1000); /* past its deadline and protection */
	}
	KVS_TRY(shards_task(&whole, REC_TAG, 0, 1, 0, REC_SPB));
	KVS_TRY(st_dump(s, &whole, DUMP_WAIT_MS)); /* acknowledged: in the cache */
	KVS_TRY(st_write_full((int)arg_l(argv[6]), &ch, 1));
	pause(); /* until killed */
	return KVS_TEST_FAIL;
}

/* Start rec_dumper over root (gate closed: its writes held; partial, batch and
 * ms as it says), wait until it said its dumps returned 0 (then, with wcfg,
 * open watcher *w beside it), kill it -9. */
static kvs_test_rc dumper_killed(const char *uid, const char *root, const char *gate, uint32_t partial,
				 uint32_t batch, uint64_t ms, const struct kvs_store_config *wcfg,
				 struct kvs_store **w)
{
	struct fork_args fa;
	char part_s[16], batch_s[16], ms_s[24], fd_s[16], ch;
	int sig[2];
	pid_t pid;

	KVS_CHECK(pipe(sig) == 0);
	snprintf(part_s, sizeof(part_s), "%u", partial);
	snprintf(batch_s, sizeof(batch_s), "%u", batch ? batch : 1);
	snprintf(ms_s, sizeof(ms_s), "%llu", (unsigned long long)ms);
	snprintf(fd_s, sizeof(fd_s), "%d", sig[1]);
	KVS_TRY(gate_set(gate, true));
	{
		const char *av[] = { uid, root, gate, part_s, batch_s, ms_s, fd_s, NULL };
		pid = start_child(true, "rec_dumper", rec_dumper, av, &fa);
		KVS_CHECK(pid > 0);
	}
	kvs_test_rc r = st_read_full(sig[0], &ch, 1, 60000);
	if (r.code == 0 && wcfg)
		r = st_open(wcfg, w);
	kill(pid, SIGKILL);
	(void)kvs_test_reap(pid, 10000);
	close(sig[0]);
	close(sig[1]);
	KVS_TRY(r);
	KVS_CHECK_EQ(backend_count(root, REC_SPB, REC_TAG, 0, 1), 0); /* X only in the cache */
	return gate_set(gate, false);
}

/* A root, a unique id and a gate path for tag. */
static kvs_test_rc rec_init(const char *tag, char root[static 256], char uid[static 96],
			    char gate[static 320])
{
	KVS_TRY(st_root_init(root, 256, tag));
	kvs_test_unique_id(uid, 96, tag);
	snprintf(gate, 320, "%s.gate", root);
	return KVS_TEST_PASS;
}

/* Within 10 s, no slot of s's node is DIRTY (the sweep's drops). */
static kvs_test_rc wait_no_dirty(struct kvs_store *s)
{
	struct kvs_cache_stats cs;
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	do {
		usleep(20 * 1000);
		KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(s), KVS_STATS_NODE, &cs));
	} while (cs.slots_dirty && kvs_now_ns() < deadline);
	KVS_CHECK_EQ(cs.slots_dirty, 0);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

static kvs_test_rc test_survivor_writes(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *b = NULL;
	struct st_task other;
	char root[256], uid[96], gate[320];

	KVS_TRY(rec_init("recsurv", root, uid, gate));
	KVS_TRY(rec_cfg(&cfg, uid, 1, root, REC_SPB, REC_SLOTS, 2, 300));
	/* B opens first (A attaches), so A's death leaves B running */
	KVS_TRY(st_open(&cfg, &b));
	KVS_TRY(dumper_killed(uid, root, gate, 0, 0, 300, NULL, NULL));
	usleep(1500 * 1000); /* past A's deadline (300 ms) and grace */
	/* B goes on: short dumps of many other blocks, claims on every chain */
	for (uint32_t k = 0; k < 300; k += 30) {
		KVS_TRY(shards_task(&other, REC_TAG + 1, k, 30, 0, REC_SPB));
		KVS_TRY(st_dump(b, &other, DUMP_WAIT_MS));
		/* written before the next batch: a cached dump's slots stay DIRTY
		 * (unevictable) until then, and the cache holds 2 batches */
		KVS_CHECK_OK(kvs_store_flush(b, DUMP_WAIT_MS * ST_MS, NULL));
		st_task_free(&other);
	}
	kvs_store_close(b); /* the node's last: nothing DIRTY is left, the cache goes */
	KVS_TRY(st_no_segments(uid));
	KVS_CHECK_EQ(backend_count(root, REC_SPB, REC_TAG, 0, 1), 1);
	KVS_TRY(verify_fresh(root, REC_SPB, REC_TAG, 0, 1, "recsurv_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

#define OVERFLOW_PARTIAL 200u

static kvs_test_rc test_adoption_overflow(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *b = NULL;
	struct kvs_cache_info in;
	char root[256], uid[96], gate[320];

	KVS_TRY(rec_init("recover", root, uid, gate));
	/* A alone (stale once killed): 4 steps of 50 partial blocks, 300 ms each */
	KVS_TRY(dumper_killed(uid, root, gate, OVERFLOW_PARTIAL, 50, 300, NULL, NULL));
	KVS_CHECK_OK(kvs_cache_inspect(uid, &in));
	printf("  stale cache: %llu slots dumped, not in the backend (X's %u, the rest of "
	       "partial blocks A's sweeps had not dropped yet)\n",
	       (unsigned long long)in.slots_dirty, REC_SPB);
	KVS_CHECK(in.slots_dirty >= REC_SPB + 50);
	KVS_TRY(rec_cfg(&cfg, uid, 0, root, REC_SPB, REC_SLOTS, 2, 300));
	KVS_TRY(st_open(&cfg, &b)); /* adopts */
	KVS_CHECK_EQ(wait_backend(root, REC_SPB, REC_TAG, 0, 1, DUMP_WAIT_MS), 1);
	KVS_TRY(wait_no_dirty(b)); /* the partial ones dropped past their protection */
	kvs_store_close(b);
	KVS_TRY(st_no_segments(uid));
	KVS_TRY(verify_fresh(root, REC_SPB, REC_TAG, 0, 1, "recover_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

#define BIG_SPB 4200u

static kvs_test_rc test_big_block(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0, pending = 1;
	char root[256], uid[96];

	KVS_TRY(st_root_init(root, sizeof(root), "recbig"));
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "recbig"), 0, root, BIG_SPB,
		 2 * BIG_SPB + 64, 1);
	cfg.timeout_ns = 60 * ST_SEC;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, REC_TAG + 2, 0, 1, 0, BIG_SPB));
	KVS_TRY(st_dump(s, &t, 60000)); /* durable */
	KVS_TRY(check_durable(root, BIG_SPB, REC_TAG + 2, 0, 1, "durable dump of 4200 shards"));
	kvs_store_close(s);
	st_task_free(&t);

	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, REC_TAG + 2, 1, 1, 0, BIG_SPB));
	KVS_TRY(dump_submit(s, &t, &task));
	KVS_TRY(st_wait_expect(s, task, 60000, 0, "cached dump of 4200 shards"));
	KVS_CHECK_OK(kvs_store_flush(s, 60 * ST_SEC, &pending));
	KVS_CHECK_EQ(pending, 0);
	KVS_TRY(check_durable(root, BIG_SPB, REC_TAG + 2, 1, 1, "flushed dump of 4200 shards"));
	kvs_store_close(s);
	st_task_free(&t);
	KVS_TRY(verify_fresh(root, BIG_SPB, REC_TAG + 2, 0, 2, "recbig_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

/* The cache uid is there, holding X's REC_SPB dirty slots. */
static kvs_test_rc still_kept(const char *uid, const char *after)
{
	struct kvs_cache_info in;
	int rc = kvs_cache_inspect(uid, &in);

	if (rc)
		KVS_FAILF("after %s: the cache %s is gone (%s): X's dumped shards with it", after,
			  uid, kvs_strerror(rc));
	KVS_CHECK_EQ(in.slots_dirty, REC_SPB);
	return KVS_TEST_PASS;
}

/* A rank (the geometry of cfg) opens the cache uid: blocks [0, n) of tag reach
 * the backend; its close, the node's last, removes the cache; a fresh cache
 * loads them byte-exact. */
static kvs_test_rc next_rank_writes(struct kvs_store_config *cfg, const char *root, uint32_t tag,
				    uint32_t n, const char *vtag)
{
	struct kvs_store *s = NULL;
	uint32_t spb = cfg->cache.shards_per_block;
	int have;

	KVS_TRY(st_open(cfg, &s));
	have = wait_backend(root, spb, tag, 0, n, DUMP_WAIT_MS);
	printf("  the next rank's open: %d of %u blocks in the backend\n", have, n);
	KVS_CHECK_EQ(have, (int)n);
	kvs_store_close(s);
	KVS_TRY(st_no_segments(cfg->cache.unique_id));
	return verify_fresh(root, spb, tag, 0, n, vtag);
}

/* X (block 0 of REC_TAG) written by the next rank of cache uid. */
static kvs_test_rc rank_writes(const char *uid, const char *root, const char *vtag)
{
	struct kvs_store_config cfg;

	KVS_TRY(rec_cfg(&cfg, uid, 0, root, REC_SPB, REC_SLOTS, 2, 300));
	return next_rank_writes(&cfg, root, REC_TAG, 1, vtag);
}

static kvs_test_rc test_watcher_close(void)
{
	struct kvs_store_config wcfg;
	struct kvs_cache_config cc;
	struct kvs_store *w = NULL;
	struct kvs_cache *stat_like = NULL;
	char root[256], uid[96], gate[320];

	/* (a) a watcher store opens the stale cache (adopting it) and closes */
	KVS_TRY(rec_init("recwa", root, uid, gate));
	KVS_TRY(dumper_killed(uid, root, gate, 0, 0, 30000, NULL, NULL));
	KVS_TRY(rec_cfg(&wcfg, uid, -1, root, REC_SPB, REC_SLOTS, 2, 300));
	watcher_of(&wcfg);
	KVS_TRY(st_open(&wcfg, &w));
	kvs_store_close(w);
	KVS_TRY(still_kept(uid, "a watcher's open and close"));
	KVS_TRY(rank_writes(uid, root, "recwa_v"));
	st_root_fini(root);

	/* (b) an exporter-style watcher attached before A died; a stat-like
	 * attach and detach (reaping A's entry) after; the watcher closes */
	KVS_TRY(rec_init("recwb", root, uid, gate));
	KVS_TRY(rec_cfg(&wcfg, uid, -1, root, REC_SPB, REC_SLOTS, 2, 300));
	watcher_of(&wcfg);
	KVS_TRY(dumper_killed(uid, root, gate, 0, 0, 30000, &wcfg, &w));
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%.64s", uid);
	cc.device_id = -1;
	cc.flags = KVS_CACHE_ATTACH;
	KVS_CHECK_OK(kvs_cache_open(&cc, &stat_like));
	kvs_cache_close(stat_like);
	kvs_store_close(w);
	KVS_TRY(still_kept(uid, "a watcher's close beside a dead rank"));
	KVS_TRY(rank_writes(uid, root, "recwb_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

#define LIVE_SPB 4u
#define LIVE_BLOCKS 8u
#define LIVE_TAG (REC_TAG + 3)

/* The designated shard of each block (designated) or all the others, for c. */
static kvs_test_rc live_task(struct kvs_store *s, struct st_task *t, bool designated)
{
	struct kvs_cache *c = kvs_store_cache(s);
	uint32_t n = 0;

	KVS_TRY(st_task_whole(t, LIVE_BLOCKS * LIVE_SPB, 1, DUMP_SHARD));
	for (uint32_t k = 0; k < LIVE_BLOCKS; k++) {
		struct kvs_block_id b = st_block(LIVE_TAG, k);
		uint32_t d;

		d = kvs_core_claim_designated(c, &b);
		for (uint32_t i = 0; i < LIVE_SPB; i++)
			if ((i == d) == designated)
				st_task_set(t, n++, &b, i);
	}
	t->n = n;
	return KVS_TEST_PASS;
}

static kvs_test_rc test_live_closes(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL;
	struct st_task ta, tb;
	char root[256], uid[96];
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "reclive"));
	kvs_test_unique_id(uid, sizeof(uid), "reclive");
	KVS_TRY(rec_cfg(&cfg, uid, 0, root, LIVE_SPB, REC_SLOTS, 2, 100));
	KVS_TRY(st_open(&cfg, &a));
	cfg.cache.device_id = 1;
	KVS_TRY(st_open(&cfg, &b));
	KVS_TRY(live_task(a, &ta, true));
	KVS_TRY(live_task(b, &tb, false));
	KVS_TRY(st_dump(a, &ta, DUMP_WAIT_MS));
	usleep(150 * 1000); /* past A's deadline (100 ms), within its protection */
	KVS_TRY(st_dump(b, &tb, DUMP_WAIT_MS)); /* completes every block */
	/* A goes on with other steps, each past the last's protection */
	usleep(1300 * 1000);
	for (uint32_t k = 0; k < 120; k += 30) {
		struct st_task other;

		KVS_TRY(shards_task(&other, LIVE_TAG + 1, k, 30, 0, LIVE_SPB));
		KVS_TRY(st_dump(a, &other, DUMP_WAIT_MS));
		KVS_CHECK_EQ(wait_backend(root, LIVE_SPB, LIVE_TAG + 1, k, 30, DUMP_WAIT_MS), 30);
		st_task_free(&other);
		usleep(1300 * 1000);
	}
	kvs_store_close(b);
	kvs_store_close(a);
	KVS_TRY(st_library_threads_gone(5000)); /* a close that outlived its bound */
	KVS_TRY(st_no_segments(uid));
	have = backend_count(root, LIVE_SPB, LIVE_TAG, 0, LIVE_BLOCKS);
	printf("  %d of %u blocks in the backend after both clean closes\n", have, LIVE_BLOCKS);
	KVS_CHECK_EQ(have, (int)LIVE_BLOCKS);
	KVS_TRY(verify_fresh(root, LIVE_SPB, LIVE_TAG, 0, LIVE_BLOCKS, "reclive_v"));
	st_task_free(&ta);
	st_task_free(&tb);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

#define SLOW_SPB 8u
#define SLOW_BLOCKS 10u
#define SLOW_TAG (REC_TAG + 4)

/* --child slow_rank <uid> <root> <flush first>: cached dumps of SLOW_BLOCKS over
 * a backend taking 200 ms a write, 4 writes at a time; a short flush (or, with
 * flush first, one that waits for them all); close; exit (a return from main). */
static kvs_test_rc slow_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t pending = 0, t0;
	bool all;
	int rc;

	if (argc != 3)
		KVS_FAILF("usage: --child slow_rank <uid> <root> <flush first>");
	all = arg_l(argv[2]) != 0;
	KVS_TRY(rec_cfg(&cfg, argv[0], 0, argv[1], SLOW_SPB, 128, 1, 1000));
	KVS_TRY(st_parse(&cfg, "io_queue_depth=4,fault_delay_us=200000"));
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, SLOW_TAG, 0, SLOW_BLOCKS, 0, SLOW_SPB));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	t0 = kvs_now_ns();
	rc = kvs_store_flush(s, (all ? 60000 : 50) * ST_MS, &pending);
	printf("  flush(%s): %d (%s), %llu blocks pending, after %llu ms\n", all ? "60 s" : "50 ms",
	       rc, kvs_strerror(rc), (unsigned long long)pending,
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	if (all) {
		KVS_CHECK_OK(rc);
		KVS_CHECK_EQ(pending, 0);
		KVS_TRY(check_durable(argv[1], SLOW_SPB, SLOW_TAG, 0, SLOW_BLOCKS, "after the flush"));
	} else {
		KVS_CHECK_ERR(rc, -ETIMEDOUT);
		KVS_CHECK(pending > 0 && pending <= SLOW_BLOCKS);
	}
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS; /* exit, whatever is still being written */
}

static kvs_test_rc test_last_close_slow(void)
{
	struct kvs_store_config cfg;
	struct kvs_cache_info in;
	char root[256], uid[96];
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "recslow"));
	kvs_test_unique_id(uid, sizeof(uid), "recslow");
	{
		const char *av[] = { uid, root, "0", NULL };
		KVS_TRY(run_child(true, "slow_rank", slow_rank, av));
	}
	have = backend_count(root, SLOW_SPB, SLOW_TAG, 0, SLOW_BLOCKS);
	KVS_CHECK_OK(kvs_cache_inspect(uid, &in)); /* kept: what the exit left unwritten */
	printf("  after the rank exited: %d of %u blocks in the backend, %llu slots kept dirty\n",
	       have, SLOW_BLOCKS, (unsigned long long)in.slots_dirty);
	KVS_CHECK(in.slots_dirty >= (uint64_t)(SLOW_BLOCKS - have) * SLOW_SPB);
	KVS_TRY(rec_cfg(&cfg, uid, 0, root, SLOW_SPB, 128, 1, 1000));
	KVS_TRY(next_rank_writes(&cfg, root, SLOW_TAG, SLOW_BLOCKS, "recslow_v"));
	st_root_fini(root);

	KVS_TRY(st_root_init(root, sizeof(root), "recslow2"));
	kvs_test_unique_id(uid, sizeof(uid), "recslow2");
	{
		const char *av[] = { uid, root, "1", NULL };
		KVS_TRY(run_child(true, "slow_rank", slow_rank, av));
	}
	KVS_TRY(st_no_segments(uid)); /* flushed: nothing left to keep */
	KVS_TRY(verify_fresh(root, SLOW_SPB, SLOW_TAG, 0, SLOW_BLOCKS, "recslow2_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

/* The refusal line, kept from the other lines of the process's stores. */
static char bind_line[1024];

static void bind_log(void *arg, int level, const char *msg)
{
	if (strstr(msg, "bound to another backend"))
		snprintf(bind_line, sizeof(bind_line), "%s", msg);
	st_log(arg, level, msg);
}

static kvs_test_rc test_backend_mismatch(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *a = NULL, *b = NULL;
	char root[256], other[256], uid[96];
	int rc;

	KVS_TRY(st_root_init(root, sizeof(root), "recbind"));
	KVS_TRY(st_root_init(other, sizeof(other), "recbind2"));
	kvs_test_unique_id(uid, sizeof(uid), "recbind");
	KVS_TRY(rec_cfg(&cfg, uid, 0, root, REC_SPB, REC_SLOTS, 2, 300));
	KVS_TRY(st_open(&cfg, &a));
	KVS_TRY(rec_cfg(&cfg, uid, 1, other, REC_SPB, REC_SLOTS, 2, 300));
	cfg.log = bind_log;
	rc = kvs_store_open(&cfg, &b);
	printf("  a rank with other backend_roots: %d (%s); log: %s\n", rc, kvs_strerror(rc),
	       bind_line);
	KVS_CHECK_ERR(rc, -KVS_ECONFIG);
	KVS_CHECK(strstr(bind_line, root) && strstr(bind_line, other));
	kvs_store_close(a); /* the cache goes: the next rank binds its own */
	KVS_TRY(st_open(&cfg, &b));
	kvs_store_close(b);
	st_root_fini(root);
	st_root_fini(other);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */

static kvs_test_rc test_flush(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL, *w = NULL;
	struct st_task t;
	uint64_t pending = 7;
	char root[256], uid[96];

	KVS_TRY(st_root_init(root, sizeof(root), "recflush"));
	kvs_test_unique_id(uid, sizeof(uid), "recflush");
	KVS_TRY(rec_cfg(&cfg, uid, 0, root, REC_SPB, REC_SLOTS, 1, 5000));
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_OK(kvs_store_flush(s, 0, &pending)); /* nothing dumped */
	KVS_CHECK_EQ(pending, 0);
	cfg.cache.device_id = -1;
	watcher_of(&cfg);
	KVS_TRY(st_open(&cfg, &w));
	KVS_CHECK_OK(kvs_store_flush(w, ST_SEC, NULL)); /* a watcher dumps nothing */
	kvs_store_close(w);
	KVS_TRY(shards_task(&t, REC_TAG + 5, 0, 32, 0, REC_SPB));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	pending = 7;
	KVS_CHECK_OK(kvs_store_flush(s, DUMP_WAIT_MS * ST_MS, &pending));
	KVS_CHECK_EQ(pending, 0);
	KVS_TRY(check_durable(root, REC_SPB, REC_TAG + 5, 0, 32, "after the flush"));
	KVS_CHECK_ERR(kvs_store_flush(NULL, 0, &pending), -EINVAL);
	kvs_store_close(s);
	st_task_free(&t);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "survivor_writes", test_survivor_writes },
	{ "adoption_overflow", test_adoption_overflow },
	{ "big_block", test_big_block },
	{ "watcher_close", test_watcher_close },
	{ "live_closes", test_live_closes },
	{ "last_close_slow", test_last_close_slow },
	{ "backend_mismatch", test_backend_mismatch },
	{ "flush", test_flush },
};

static const struct kvs_test_child children[] = {
	{ "rec_dumper", rec_dumper },
	{ "slow_rank", slow_rank },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
