/*
 * tests/store_dump.c — the dump protocol (docs/store.md, "Dumps"): what a
 * durable dump promises, across real rank processes (forked and exec'd), with
 * writers killed -9 mid-dump.  The invariant every case checks: a dump with
 * dump_wait=durable that returns 0 has its whole block in the backend, read back
 * byte-exact by a fresh cache (another unique_id) afterwards.
 *
 *   dump_meets_loading   B loads X and its read fails (-EIO) after 0.8 s; A dumps
 *                        X meanwhile: A waits for B's fill, then gathers its own
 *                        bytes; 0 only once X is in the backend.
 *   dump_meets_failed    as above, but A's dump comes while B's failed slot is
 *                        still pinned by B's task (B's copier is slow): A takes
 *                        the FAILED slot and dumps (no -EAGAIN).
 *   writer_killed_writes A completes block X (the writer) and its writes are held
 *                        (a gated backend: a stuck pwrite); B's durable dump of X
 *                        does not return 0 while X is not in the backend; A is
 *                        killed -9; B takes the claim over and writes X.
 *   writer_dead_evicted  A is killed writing X (held) while rank B, open since
 *                        before, dumps nothing: B's sweep takes the dead writer's
 *                        claim over and writes X; X's slots, READY then, are
 *                        evicted by B's loads, and a later durable dump of X by B
 *                        writes it again (its STORED record's grace over) and
 *                        returns 0 only then.
 *   writer_dead_adopted  A is killed writing X (held), nobody watches its claim;
 *                        rank B only opens the store later, past its deadline:
 *                        B's first sweep finds X DIRTY and complete, and writes it.
 *   stale_dirty_written  as writer_dead_adopted with nobody else attached: B's
 *                        open adopts the stale cache, keeping X's DIRTY slots (the
 *                        record of what is to be written), and B writes X.
 *   writer_killed_gather A owns X's slots and its gathers are held (copy delay);
 *                        B's dump waits; A is killed -9; B gathers its own bytes.
 *   split_shards         rank 0 dumps X.0, rank 1 dumps X.1 (at once, and one of
 *                        them cached first): whoever completes X writes it.
 *   partial_block        a durable dump of shard 0 of a 4-shard block alone fails
 *                        -KVS_EINCOMPLETE at its deadline; nothing in the backend;
 *                        the close keeps the cache for that shard (protected a
 *                        second past the deadline, for a peer's late dump).
 *   claims_many          one task of 1500 blocks x 2 shards: every block written.
 *   writes_many_pins     8 layer-wise tasks of 129 blocks x 64 shards (more than a
 *                        process's pin table holds), dump_wait=cached: every block
 *                        written, the writes waiting for pin room, not failing.
 *   claims_duplicate     layer-wise tasks X.0, X.1, X.1, X.2 (cached one by one,
 *                        and durable at once): the block is written once all
 *                        three distinct shards are in (a duplicate does not count
 *                        twice).
 *   dump_timeout         a durable dump whose write is held reports -ETIMEDOUT at
 *                        its deadline; close with the write still held is bounded,
 *                        and the store's threads end once the write lands.
 *   orphan_at_exit       an exec'd rank exits right after a close that left its
 *                        held write draining: the write lands, the cache goes.
 *   writes_spread        2 ranks (shards per block a multiple of local_rank_size)
 *                        each dump their half of the same 64 blocks at once: each
 *                        shard written once on the node, no rank writes most.
 */
#include <dirent.h>

#include "store_dump_util.h"

/* ------------------------------------------------------------------------ */
/* A dump meets a peer's failing load                                        */

#define MEET_TAG 10u
#define MEET_SLOTS 16

/* --child meet_loader <uid> <root> <copy_delay_us> <with_hit>: load [Y?] X through a
 * backend that fails every read (after 800 ms; 200 ms with the hit, whose copy
 * then holds the task past the failure); the load must fail -EIO. */
static kvs_test_rc meet_loader(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	bool with_hit;

	if (argc != 4)
		KVS_FAILF("usage: --child meet_loader <uid> <root> <copy_delay_us> <with_hit>");
	with_hit = arg_l(argv[3]) != 0;
	dump_cfg(&cfg, argv[0], 1, argv[1], 1, MEET_SLOTS, 2);
	KVS_TRY(st_parse(&cfg, with_hit ? "fault_error_ppm=1000000,fault_delay_us=200000"
				       : "fault_error_ppm=1000000,fault_delay_us=800000"));
	cfg.copy_delay_ns = (uint64_t)arg_l(argv[2]) * 1000;
	KVS_TRY(st_open(&cfg, &s));
	/* Y (block 1, cached by the parent's dumper) first: its copy holds the task */
	KVS_TRY(shards_task(&t, MEET_TAG, with_hit ? 0 : 1, with_hit ? 2 : 1, 0, 1));
	if (with_hit) {
		struct kvs_block_id y = st_block(MEET_TAG, 1), x = st_block(MEET_TAG, 0);

		st_task_set(&t, 0, &y, 0);
		st_task_set(&t, 1, &x, 0);
	} else {
		struct kvs_block_id x = st_block(MEET_TAG, 0);

		st_task_set(&t, 0, &x, 0);
	}
	KVS_TRY(st_load(s, &t, DUMP_WAIT_MS, -EIO));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* --child meet_dumper <uid> <root> <first block> <n blocks>: durable dump of the
 * blocks; 0, and then they are in the backend. */
static kvs_test_rc meet_dumper(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	uint32_t first, n;

	if (argc != 4)
		KVS_FAILF("usage: --child meet_dumper <uid> <root> <first> <n>");
	first = (uint32_t)arg_l(argv[2]);
	n = (uint32_t)arg_l(argv[3]);
	dump_cfg(&cfg, argv[0], 0, argv[1], 1, MEET_SLOTS, 2);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, MEET_TAG, first, n, 0, 1));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("dumper", &st);
	KVS_TRY(check_durable(argv[1], 1, MEET_TAG, first, n, "dumper"));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc meet_case(bool failed)
{
	struct kvs_store *w = NULL;
	struct fork_args fa;
	pid_t loader;
	char root[256], uid[96];

	KVS_TRY(st_root_init(root, sizeof(root), failed ? "meetf" : "meetl"));
	kvs_test_unique_id(uid, sizeof(uid), failed ? "meetf" : "meetl");
	KVS_TRY(open_watcher(uid, root, 1, MEET_SLOTS, 2, &w));
	if (failed) { /* Y in the cache and the backend, for the loader's hit */
		const char *av[] = { uid, root, "1", "1", NULL };
		KVS_TRY(run_child(true, "meet_dumper", meet_dumper, av));
	}
	{
		const char *av[] = { uid, root, failed ? "1000000" : "0", failed ? "1" : "0", NULL };
		loader = start_child(false, "meet_loader", meet_loader, av, &fa);
		KVS_CHECK(loader > 0);
	}
	/* B's read of X in flight (LOADING), or failed and still pinned (FAILED) */
	kvs_test_rc r = wait_census(w, failed, 1, "loader's slot");
	if (r.code)
		kill_all(&loader, 1);
	KVS_TRY(r);
	{
		const char *av[] = { uid, root, "0", "1", NULL };
		r = run_child(true, "meet_dumper", meet_dumper, av);
	}
	if (r.code)
		kill_all(&loader, 1);
	KVS_TRY(r);
	KVS_TRY(reap_all(&loader, 1, REAP_MS));
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	KVS_TRY(verify_fresh(root, 1, MEET_TAG, 0, 1, failed ? "meetf_v" : "meetl_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_dump_meets_loading(void)
{
	return meet_case(false);
}

static kvs_test_rc test_dump_meets_failed(void)
{
	return meet_case(true);
}

/* ------------------------------------------------------------------------ */
/* Writers killed -9 mid-dump                                                */

#define KILL_TAG 20u
#define KILL_SPB 2
#define KILL_SLOTS 16

/* --child kill_writer <uid> <root> <gate file or "-"> <copy_delay_us> <timeout_ms>:
 * durable dump of block 0 (both shards), then wait to be killed. */
static kvs_test_rc kill_writer(int argc, char **argv)
{
	static struct gate_conf gc;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0;

	if (argc != 5)
		KVS_FAILF("usage: --child kill_writer <uid> <root> <gate> <copy_delay_us> "
			  "<timeout_ms>");
	dump_cfg(&cfg, argv[0], 0, argv[1], KILL_SPB, KILL_SLOTS, 2);
	if (strcmp(argv[2], "-"))
		st_gated(&cfg, &gc, argv[1], argv[2]);
	cfg.copy_delay_ns = (uint64_t)arg_l(argv[3]) * 1000;
	cfg.timeout_ns = (uint64_t)arg_l(argv[4]) * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, KILL_TAG, 0, 1, 0, KILL_SPB));
	KVS_TRY(dump_submit(s, &t, &task));
	(void)st_wait(s, task, 60000);
	pause(); /* until killed */
	return KVS_TEST_FAIL;
}

/* --child kill_survivor <uid> <root> <signal fd>: durable dump of block 0; it
 * must not finish while the writer lives (held); say so on the fd, then (the
 * writer killed) finish 0 with the block in the backend; a repeated dump too. */
static kvs_test_rc kill_survivor(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	uint64_t task = 0;
	char ch = 'w';
	int rc;

	if (argc != 3)
		KVS_FAILF("usage: --child kill_survivor <uid> <root> <signal fd>");
	dump_cfg(&cfg, argv[0], 1, argv[1], KILL_SPB, KILL_SLOTS, 2);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, KILL_TAG, 0, 1, 0, KILL_SPB));
	KVS_TRY(dump_submit(s, &t, &task));
	rc = st_wait(s, task, 500);
	if (rc == 0) /* finished while the writer holds its writes: is it durable? */
		KVS_TRY(check_durable(argv[1], KILL_SPB, KILL_TAG, 0, 1, "survivor (writer alive)"));
	KVS_CHECK_EQ(rc, 1);
	KVS_TRY(st_write_full((int)arg_l(argv[2]), &ch, 1)); /* now kill the writer */
	KVS_TRY(st_wait_expect(s, task, DUMP_WAIT_MS, 0, "survivor's dump"));
	KVS_TRY(check_durable(argv[1], KILL_SPB, KILL_TAG, 0, 1, "survivor"));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS)); /* again: durable at once */
	KVS_TRY(check_durable(argv[1], KILL_SPB, KILL_TAG, 0, 1, "survivor, again"));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	st_print("survivor", &st);
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc kill_case(bool writes, const char *tag)
{
	struct kvs_store *w = NULL;
	struct fork_args fa;
	pid_t pids[2] = { 0, 0 };
	int sig[2];
	char root[256], uid[96], gate[320], fd_s[16], ch;

	KVS_TRY(st_root_init(root, sizeof(root), tag));
	kvs_test_unique_id(uid, sizeof(uid), tag);
	snprintf(gate, sizeof(gate), "%s.gate", root);
	KVS_TRY(open_watcher(uid, root, KILL_SPB, KILL_SLOTS, 2, &w));
	KVS_CHECK(pipe(sig) == 0);
	snprintf(fd_s, sizeof(fd_s), "%d", sig[1]);
	if (writes)
		KVS_TRY(gate_set(gate, true));
	{
		const char *av[] = { uid, root, writes ? gate : "-", writes ? "0" : "1000000", "60000",
				     NULL };
		pids[0] = start_child(true, "kill_writer", kill_writer, av, &fa);
		KVS_CHECK(pids[0] > 0);
	}
	/* the writer's shards are in the cache (writes held), or it owns both
	 * slots (gathers held) */
	kvs_test_rc r = writes ? wait_cached(w, KILL_TAG, 0) : wait_census(w, false, KILL_SPB, "writer");
	if (r.code == 0) {
		const char *av[] = { uid, root, fd_s, NULL };
		pids[1] = start_child(false, "kill_survivor", kill_survivor, av, &fa);
		KVS_CHECK(pids[1] > 0);
		r = st_read_full(sig[0], &ch, 1, 20000);
	}
	kill(pids[0], SIGKILL);
	(void)kvs_test_reap(pids[0], 10000);
	if (r.code == 0)
		r = reap_all(&pids[1], 1, REAP_MS);
	else if (pids[1] > 0)
		kill_all(&pids[1], 1);
	KVS_TRY(r);
	KVS_TRY(gate_set(gate, false));
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	close(sig[0]);
	close(sig[1]);
	KVS_TRY(verify_fresh(root, KILL_SPB, KILL_TAG, 0, 1, "kill_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_writer_killed_writes(void)
{
	return kill_case(true, "killw");
}

static kvs_test_rc test_writer_killed_gather(void)
{
	return kill_case(false, "killg");
}

/* The writer-dead cases' start: root, uid and gate of tag, the writes held, a
 * watcher holding the cache unless w is NULL, then rank A (kill_writer, 300 ms
 * deadline) dumping block 0 of KILL_TAG. */
static kvs_test_rc held_writer(const char *tag, char root[static 256], char uid[static 96],
			       char gate[static 320], struct kvs_store **w, pid_t *pid,
			       struct fork_args *fa)
{
	KVS_TRY(st_root_init(root, 256, tag));
	kvs_test_unique_id(uid, 96, tag);
	snprintf(gate, 320, "%s.gate", root);
	if (w)
		KVS_TRY(open_watcher(uid, root, KILL_SPB, KILL_SLOTS, 2, w));
	KVS_TRY(gate_set(gate, true));
	{
		const char *av[] = { uid, root, gate, "0", "300", NULL };
		*pid = start_child(true, "kill_writer", kill_writer, av, fa);
		KVS_CHECK(*pid > 0);
	}
	return KVS_TEST_PASS;
}

/* Block 0 of KILL_TAG reaches the backend within DUMP_WAIT_MS, written by who. */
static kvs_test_rc wait_written(const char *root, const char *who)
{
	if (wait_backend(root, KILL_SPB, KILL_TAG, 0, 1, DUMP_WAIT_MS) != 1)
		KVS_FAILF("%s: the block is not in the backend after %d ms", who, DUMP_WAIT_MS);
	return KVS_TEST_PASS;
}

/*
 * The writer is killed with its writes held; B, attached, dumps nothing: its
 * sweep finds X DIRTY and complete under a dead holder's claim, takes it over
 * and writes X.  X's slots, READY then, are evicted by B's loads of other
 * blocks; a later durable dump of X gathers fresh copies and returns 0 only
 * once they are written again (the STORED record's grace is over: it proves
 * nothing any more).  Before claims were taken over, every later dump of such
 * a block failed -ESTALE.
 */
static kvs_test_rc test_writer_dead_evicted(void)
{
	struct kvs_store_config cfg, wcfg;
	struct kvs_store *w = NULL, *s = NULL, *reaper = NULL;
	struct kvs_block_id x = st_block(KILL_TAG, 0);
	struct fork_args fa;
	struct st_task t, other;
	pid_t pid;
	char root[256], uid[96], gate[320];

	KVS_TRY(held_writer("kille", root, uid, gate, &w, &pid, &fa));
	kvs_test_rc r = wait_cached(w, KILL_TAG, 0);
	/* B opens while the writer lives (a rank that opens after it died would
	 * take the orphaned claim over at once: writer_dead_adopted) */
	dump_cfg(&cfg, uid, 1, root, KILL_SPB, KILL_SLOTS, 2);
	if (r.code == 0)
		r = st_open(&cfg, &s);
	kill(pid, SIGKILL);
	(void)kvs_test_reap(pid, 10000);
	KVS_TRY(r);
	KVS_TRY(gate_set(gate, false));
	/* a watcher's attach reaps A (its pins on X dropped) */
	dump_cfg(&wcfg, uid, -1, root, KILL_SPB, KILL_SLOTS, 2);
	watcher_of(&wcfg);
	KVS_TRY(st_open(&wcfg, &reaper));
	kvs_store_close(reaper);
	usleep(1500 * 1000); /* B's sweep wrote X meanwhile; its STORED record's grace over */
	KVS_TRY(shards_task(&other, KILL_TAG + 1, 0, 4 * KILL_SLOTS / KILL_SPB, 0, KILL_SPB));
	KVS_TRY(st_load(s, &other, DUMP_WAIT_MS, -ENOENT)); /* misses, each evicting */
	KVS_CHECK_EQ(kvs_cache_exists(kvs_store_cache(w), &x, 0), 0);
	KVS_CHECK_EQ(kvs_cache_exists(kvs_store_cache(w), &x, 1), 0);
	KVS_TRY(shards_task(&t, KILL_TAG, 0, 1, 0, KILL_SPB));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	KVS_TRY(check_durable(root, KILL_SPB, KILL_TAG, 0, 1, "the later dump"));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS)); /* again: durable at once */
	kvs_store_close(s);
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	KVS_TRY(verify_fresh(root, KILL_SPB, KILL_TAG, 0, 1, "kille_v"));
	st_task_free(&t);
	st_task_free(&other);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/*
 * The writer is killed with its writes held and nobody left watching (its dump
 * was the block's only one: dump_wait=cached had returned, say), and no rank
 * ever dumps the block again.  A rank that opens the store later, past the
 * dump's deadline, and does nothing else: its sweep finds the complete block
 * nobody writes and writes it from the cache (the second review: X stayed DIRTY in the
 * cache, served to loads, and was never written: gone with the cache).
 */
static kvs_test_rc test_writer_dead_adopted(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL, *s = NULL;
	struct fork_args fa;
	pid_t pid;
	char root[256], uid[96], gate[320];

	KVS_TRY(held_writer("killa", root, uid, gate, &w, &pid, &fa));
	kvs_test_rc r = wait_cached(w, KILL_TAG, 0);
	kill(pid, SIGKILL);
	(void)kvs_test_reap(pid, 10000);
	KVS_TRY(r);
	KVS_TRY(gate_set(gate, false));
	usleep(1500 * 1000); /* past A's deadline and grace */
	KVS_CHECK_EQ(backend_count(root, KILL_SPB, KILL_TAG, 0, 1), 0);
	dump_cfg(&cfg, uid, 1, root, KILL_SPB, KILL_SLOTS, 2);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(wait_written(root, "the rank that came later"));
	kvs_store_close(s);
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	KVS_TRY(verify_fresh(root, KILL_SPB, KILL_TAG, 0, 1, "killa_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/*
 * As writer_dead_adopted, but A was the cache's only process: its death leaves
 * the cache stale, and B's open adopts it, re-making the claim table (every
 * claim died with A) and keeping X's DIRTY slots, the record of what is to be
 * written; B's first sweep writes X (the second review: the slots stayed DIRTY,
 * loads served them, nothing wrote them).
 */
static kvs_test_rc test_stale_dirty_written(void)
{
	struct kvs_store_config cfg, wcfg;
	struct kvs_store *s = NULL, *w = NULL;
	struct kvs_block_id x = st_block(KILL_TAG, 0);
	struct fork_args fa;
	uint64_t deadline;
	bool hit = false;
	pid_t pid;
	char root[256], uid[96], gate[320];

	KVS_TRY(held_writer("kills", root, uid, gate, NULL, &pid, &fa));
	/* X in the cache (a watcher looks, and leaves before A dies: A is then
	 * the cache's only process) */
	dump_cfg(&wcfg, uid, -1, root, KILL_SPB, KILL_SLOTS, 2);
	watcher_of(&wcfg);
	deadline = kvs_deadline_after(10 * ST_SEC);
	while (kvs_store_open(&wcfg, &w) != 0 && kvs_now_ns() < deadline)
		usleep(2000);
	if (!w)
		fprintf(stderr, "  no cache made by A within 10 s\n");
	kvs_test_rc r = w ? wait_cached(w, KILL_TAG, 0) : KVS_TEST_FAIL;
	if (w)
		kvs_store_close(w);
	kill(pid, SIGKILL);
	(void)kvs_test_reap(pid, 10000);
	KVS_TRY(r);
	KVS_TRY(gate_set(gate, false));
	KVS_CHECK_EQ(backend_count(root, KILL_SPB, KILL_TAG, 0, 1), 0);
	dump_cfg(&cfg, uid, 1, root, KILL_SPB, KILL_SLOTS, 2);
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_OK(kvs_cache_lookup(kvs_store_cache(s), &x, 1, KVS_ALL_SHARDS, &hit));
	KVS_CHECK(hit); /* the dead rank's dumped bytes, kept */
	KVS_TRY(wait_written(root, "the rank that adopted the cache"));
	kvs_store_close(s); /* the last rank: the cache goes */
	KVS_TRY(verify_fresh(root, KILL_SPB, KILL_TAG, 0, 1, "kills_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Shards of one block dumped by different ranks                             */

#define SPLIT_TAG 30u
#define SPLIT_SPB 2
#define SPLIT_SLOTS 16

/* --child split_rank <uid> <root> <device> <block> <cached> <ready fd> <go fd>:
 * dump shard <device> of block <block>. */
static kvs_test_rc split_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	int device;
	uint32_t blk;
	bool cached;

	if (argc != 7)
		KVS_FAILF("usage: --child split_rank <uid> <root> <device> <block> <cached> <r> <g>");
	device = (int)arg_l(argv[2]);
	blk = (uint32_t)arg_l(argv[3]);
	cached = arg_l(argv[4]) != 0;
	dump_cfg(&cfg, argv[0], device, argv[1], SPLIT_SPB, SPLIT_SLOTS, 2);
	if (cached)
		cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, SPLIT_TAG, blk, 1, (uint32_t)device, 1));
	KVS_TRY(barrier_child((int)arg_l(argv[5]), (int)arg_l(argv[6])));
	KVS_TRY(st_dump(s, &t, DUMP_WAIT_MS));
	if (!cached)
		KVS_TRY(check_durable(argv[1], SPLIT_SPB, SPLIT_TAG, blk, 1, "split rank"));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/* Rank 0 dumps shard 0 and rank 1 shard 1 of block blk, at once (barrier); with
 * first_cached, rank 0 dumps cached and before rank 1 starts. */
static kvs_test_rc split_pair(const char *uid, const char *root, uint32_t blk, bool first_cached)
{
	struct barrier b;
	struct fork_args fa[2];
	pid_t pids[2] = { 0, 0 };
	char blk_s[16];

	snprintf(blk_s, sizeof(blk_s), "%u", blk);
	KVS_TRY(barrier_init(&b));
	for (int i = 0; i < 2; i++) {
		const char *av[] = { uid, root, i ? "1" : "0", blk_s, i == 0 && first_cached ? "1" : "0",
				     b.ready_s, b.go_s, NULL };
		pids[i] = start_child(i == 1, "split_rank", split_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
		if (first_cached) { /* one after the other */
			kvs_test_rc r = barrier_release(&b, 1);

			if (r.code == 0)
				r = reap_all(&pids[i], 1, REAP_MS);
			if (r.code)
				kill_all(pids, 2);
			KVS_TRY(r);
		}
	}
	if (!first_cached) {
		kvs_test_rc r = barrier_release(&b, 2);

		if (r.code)
			kill_all(pids, 2);
		KVS_TRY(r);
		KVS_TRY(reap_all(pids, 2, REAP_MS));
	}
	barrier_fini(&b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_split_shards(void)
{
	struct kvs_store *w = NULL;
	char root[256], uid[96];

	KVS_TRY(st_root_init(root, sizeof(root), "split"));
	kvs_test_unique_id(uid, sizeof(uid), "split");
	KVS_TRY(open_watcher(uid, root, SPLIT_SPB, SPLIT_SLOTS, 2, &w));
	KVS_TRY(split_pair(uid, root, 0, false));
	KVS_TRY(split_pair(uid, root, 1, true));
	KVS_TRY(check_durable(root, SPLIT_SPB, SPLIT_TAG, 0, 2, "split"));
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	KVS_TRY(verify_fresh(root, SPLIT_SPB, SPLIT_TAG, 0, 2, "split_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_partial_block(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0, t0;
	char root[256], uid[96];
	int rc;

	KVS_TRY(st_root_init(root, sizeof(root), "partial"));
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "partial"), 0, root, 4, 16, 1);
	cfg.timeout_ns = 300 * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, 40, 0, 1, 0, 1)); /* shard 0 of 4 */
	t0 = kvs_now_ns();
	KVS_TRY(dump_submit(s, &t, &task));
	rc = st_wait(s, task, DUMP_WAIT_MS);
	printf("  durable dump of 1 of 4 shards: %d (%s) after %llu ms\n", rc, kvs_strerror(rc),
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK_ERR(rc, -KVS_EINCOMPLETE);
	KVS_CHECK_EQ(backend_count(root, 4, 40, 0, 1), 0);
	KVS_CHECK_EQ(temp_files(root), 0);
	KVS_TRY(st_cache_clean(s, false));
	kvs_store_close(s);
	KVS_TRY(st_remove_dirty(uid, 1)); /* shard 0, still protected: the cache kept */
	st_task_free(&t);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Many blocks in one task; duplicate shards                                 */

#define MANY_BLOCKS 1500
#define MANY_TAG 50u

static kvs_test_rc test_claims_many(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char root[256], uid[96];
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "many"));
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "many"), 0, root, 2,
		 2 * MANY_BLOCKS + 512, 1);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, MANY_TAG, 0, MANY_BLOCKS, 0, 2));
	KVS_TRY(st_dump(s, &t, 60000));
	have = backend_count(root, 2, MANY_TAG, 0, MANY_BLOCKS);
	printf("  %d of %d blocks in the backend\n", have, MANY_BLOCKS);
	KVS_CHECK_EQ(have, MANY_BLOCKS);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	KVS_TRY(verify_fresh(root, 2, MANY_TAG, 0, MANY_BLOCKS, "many_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* The connector's save pattern: one dump task per "layer" l (the shards
 * [8l, 8l + 8) of all 129 blocks), all submitted, then all waited, with
 * dump_wait=cached.  The last layer completes the blocks in a burst that
 * elects this rank the writer of each, and each write pins its block's 64
 * shards: more than the pin table holds (KVS_RANK_PINS).  Every block is
 * written (before: 64 of 129; the writes past the table's room failed "pin
 * table full" while the dumps had reported 0). */
#define PINS_TAG 45u
#define PINS_SPB 64
#define PINS_LAYERS 8
#define PINS_BLOCKS 129

static kvs_test_rc test_writes_many_pins(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[PINS_LAYERS];
	uint64_t task[PINS_LAYERS];
	char root[256], uid[96];
	int have;

	KVS_TRY(st_root_init(root, sizeof(root), "pins"));
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "pins"), 0, root, PINS_SPB,
		 PINS_SPB * PINS_BLOCKS + 512, 8);
	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	cfg.waiting_queue_depth = 4 * PINS_LAYERS + 64;
	KVS_TRY(st_open(&cfg, &s));
	for (uint32_t l = 0; l < PINS_LAYERS; l++) {
		uint32_t per = PINS_SPB / PINS_LAYERS;

		KVS_TRY(shards_task(&t[l], PINS_TAG, 0, PINS_BLOCKS, l * per, per));
		KVS_TRY(dump_submit(s, &t[l], &task[l]));
	}
	for (uint32_t l = 0; l < PINS_LAYERS; l++)
		KVS_TRY(st_wait_expect(s, task[l], 60000, 0, "a layer's dump"));
	have = wait_backend(root, PINS_SPB, PINS_TAG, 0, PINS_BLOCKS, DUMP_WAIT_MS);
	printf("  %d of %d blocks in the backend\n", have, PINS_BLOCKS);
	KVS_CHECK_EQ(have, PINS_BLOCKS);
	kvs_store_close(s);
	for (uint32_t l = 0; l < PINS_LAYERS; l++)
		st_task_free(&t[l]);
	KVS_TRY(verify_fresh(root, PINS_SPB, PINS_TAG, 0, PINS_BLOCKS, "pins_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* Layer-wise tasks X.0, X.1, X.1, X.2 of a 3-shard block: cached, one after the
 * other (the block completes at the last; close lets its write finish), then
 * durable, all at once (each task waits for the whole block). */
static kvs_test_rc dup_round(const char *root, uint32_t blk, bool cached)
{
	static const uint32_t order[] = { 0, 1, 1, 2 };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t[4];
	uint64_t ids[4];
	char uid[96];

	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), cached ? "dupc" : "dupd"), 0, root, 3,
		 16, 1);
	if (cached)
		cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	KVS_TRY(st_open(&cfg, &s));
	for (int k = 0; k < 4; k++) {
		KVS_TRY(shards_task(&t[k], 60, blk, 1, order[k], 1));
		KVS_TRY(dump_submit(s, &t[k], &ids[k]));
		if (cached)
			KVS_TRY(st_wait_expect(s, ids[k], DUMP_WAIT_MS, 0, "cached layer-wise dump"));
	}
	for (int k = 0; !cached && k < 4; k++)
		KVS_TRY(st_wait_expect(s, ids[k], DUMP_WAIT_MS, 0, "durable layer-wise dump"));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	for (int k = 0; k < 4; k++)
		st_task_free(&t[k]);
	KVS_TRY(check_durable(root, 3, 60, blk, 1, cached ? "cached layer-wise" : "layer-wise"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_claims_duplicate(void)
{
	char root[256];

	KVS_TRY(st_root_init(root, sizeof(root), "dup"));
	KVS_TRY(dup_round(root, 0, true));
	KVS_TRY(dup_round(root, 1, false));
	KVS_TRY(verify_fresh(root, 3, 60, 0, 2, "dup_v"));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* timeout_ms bounds dumps and close                                         */

/* Forked: open the gate after ms (bounds the case on a store that hangs). */
static kvs_test_rc gate_opener(void *arg)
{
	const char *gate = arg;

	usleep(5000 * 1000);
	return gate_set(gate, false);
}

static kvs_test_rc test_dump_timeout(void)
{
	static struct gate_conf gc;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0, t0;
	char root[256], uid[96], gate[320];
	pid_t opener;
	int rc;

	KVS_TRY(st_root_init(root, sizeof(root), "dtmo"));
	snprintf(gate, sizeof(gate), "%s.gate", root);
	KVS_TRY(gate_set(gate, true));
	opener = kvs_test_fork(gate_opener, gate);
	KVS_CHECK(opener > 0);
	dump_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "dtmo"), 0, root, 1, 16, 1);
	st_gated(&cfg, &gc, root, gate);
	cfg.timeout_ns = 200 * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, 70, 0, 1, 0, 1));
	t0 = kvs_now_ns();
	KVS_TRY(dump_submit(s, &t, &task));
	rc = st_wait(s, task, 2000);
	printf("  dump with its write held: %d (%s) after %llu ms\n", rc, kvs_strerror(rc),
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK_ERR(rc, -ETIMEDOUT);
	t0 = kvs_now_ns();
	kvs_store_close(s);
	printf("  close with the write still held took %llu ms\n",
	       (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	KVS_CHECK(kvs_now_ns() - t0 < 2 * ST_SEC);
	KVS_TRY(reap_all(&opener, 1, REAP_MS));
	/* The gate is open: the held write lands and the store's last thread ends it. */
	KVS_TRY(st_library_threads_gone(5000));
	st_task_free(&t);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* --child orphan_exit <uid> <root> <gate>: a durable dump whose write is held
 * times out, close returns with the write in flight (the store is orphaned),
 * the gate opens and the process exits at once (a return from main). */
static kvs_test_rc orphan_exit(int argc, char **argv)
{
	static struct gate_conf gc;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint64_t task = 0;

	if (argc != 3)
		KVS_FAILF("usage: --child orphan_exit <uid> <root> <gate>");
	dump_cfg(&cfg, argv[0], 0, argv[1], 1, 16, 1);
	st_gated(&cfg, &gc, argv[1], argv[2]);
	/* Also what the process waits at exit for the write to land and the store
	 * to tear down: 300 ms was too short on a loaded 2-core machine (the cache
	 * stayed while vLLM engines ran beside the test). */
	cfg.timeout_ns = 2000 * ST_MS;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(shards_task(&t, 71, 0, 1, 0, 1));
	KVS_TRY(dump_submit(s, &t, &task));
	KVS_CHECK_ERR(st_wait(s, task, 5000), -ETIMEDOUT);
	kvs_store_close(s); /* the write still held: orphaned */
	st_task_free(&t); /* gathered: the write is from the cache */
	KVS_TRY(gate_set(argv[2], false));
	return KVS_TEST_PASS; /* exit: the write lands meanwhile, the store detaches */
}

/*
 * A process that exits right after a close that left a transfer draining
 * (orphan_exit) gives the store time to drain: its held write lands, the
 * store detaches and, as the only rank, removes the cache.  Before, the
 * process exited with the store orphaned and the cache stayed in /dev/shm,
 * stale, until `kvshare clean`.
 */
static kvs_test_rc test_orphan_at_exit(void)
{
	char root[256], uid[96], gate[320];
	const char *av[] = { uid, root, gate, NULL };

	KVS_TRY(st_root_init(root, sizeof(root), "orphx"));
	snprintf(gate, sizeof(gate), "%s.gate", root);
	KVS_TRY(gate_set(gate, true));
	kvs_test_unique_id(uid, sizeof(uid), "orphx");
	KVS_TRY(run_child(true, "orphan_exit", orphan_exit, av));
	KVS_TRY(st_no_segments(uid));
	st_root_fini(root);
	return KVS_TEST_PASS;
}

/* ------------------------------------------------------------------------ */
/* Who writes: spread over the ranks                                         */

#define SPREAD_RANKS 2
#define SPREAD_SPB 4
#define SPREAD_BLOCKS 64
#define SPREAD_TAG 80u
#define SPREAD_SLOTS (SPREAD_BLOCKS * SPREAD_SPB + 64)

/* --child spread_rank <uid> <root> <device> <ready fd> <go fd> <result fd>: dump
 * this rank's shards (device, device + ranks, ...) of every block, durable, and
 * report backend_writes on the result fd. */
static kvs_test_rc spread_rank(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_store_stats st;
	struct st_task t;
	uint64_t writes;
	uint32_t device, per = SPREAD_SPB / SPREAD_RANKS;

	if (argc != 6)
		KVS_FAILF("usage: --child spread_rank <uid> <root> <device> <r> <g> <result fd>");
	device = (uint32_t)arg_l(argv[2]);
	dump_cfg(&cfg, argv[0], (int)device, argv[1], SPREAD_SPB, SPREAD_SLOTS, SPREAD_RANKS);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, SPREAD_BLOCKS * per, 1, DUMP_SHARD));
	for (uint32_t i = 0; i < SPREAD_BLOCKS * per; i++) {
		struct kvs_block_id b = st_block(SPREAD_TAG, i / per);

		st_task_set(&t, i, &b, device + SPREAD_RANKS * (i % per));
	}
	KVS_TRY(barrier_child((int)arg_l(argv[3]), (int)arg_l(argv[4])));
	KVS_TRY(st_dump(s, &t, 60000));
	KVS_TRY(check_durable(argv[1], SPREAD_SPB, SPREAD_TAG, 0, SPREAD_BLOCKS, "spread rank"));
	KVS_TRY(st_stats(s, st_rank(s), &st));
	writes = st.backend_writes;
	printf("  rank %u: gathered %llu shards, wrote %llu\n", device,
	       (unsigned long long)st.shards_dumped, (unsigned long long)writes);
	KVS_TRY(st_write_full((int)arg_l(argv[5]), &writes, sizeof(writes)));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_writes_spread(void)
{
	struct kvs_store *w = NULL;
	struct barrier b;
	struct fork_args fa[SPREAD_RANKS];
	pid_t pids[SPREAD_RANKS] = { 0 };
	uint64_t writes[SPREAD_RANKS], sum = 0, most = 0;
	int res[2];
	char root[256], uid[96], dev[SPREAD_RANKS][8], res_s[16];

	KVS_TRY(st_root_init(root, sizeof(root), "spread"));
	kvs_test_unique_id(uid, sizeof(uid), "spread");
	KVS_TRY(open_watcher(uid, root, SPREAD_SPB, SPREAD_SLOTS, SPREAD_RANKS, &w));
	KVS_TRY(barrier_init(&b));
	KVS_CHECK(pipe(res) == 0);
	snprintf(res_s, sizeof(res_s), "%d", res[1]);
	for (int i = 0; i < SPREAD_RANKS; i++) {
		snprintf(dev[i], sizeof(dev[i]), "%d", i);
		const char *av[] = { uid, root, dev[i], b.ready_s, b.go_s, res_s, NULL };
		pids[i] = start_child(i % 2, "spread_rank", spread_rank, av, &fa[i]);
		KVS_CHECK(pids[i] > 0);
	}
	kvs_test_rc r = barrier_release(&b, SPREAD_RANKS);
	for (int i = 0; r.code == 0 && i < SPREAD_RANKS; i++)
		r = st_read_full(res[0], &writes[i], sizeof(writes[i]), 120000);
	if (r.code)
		kill_all(pids, SPREAD_RANKS);
	KVS_TRY(r);
	KVS_TRY(reap_all(pids, SPREAD_RANKS, REAP_MS));
	for (int i = 0; i < SPREAD_RANKS; i++) {
		sum += writes[i];
		most = writes[i] > most ? writes[i] : most;
	}
	KVS_CHECK_EQ(sum, SPREAD_BLOCKS * SPREAD_SPB); /* each shard written once */
	/* The rank that gathered a block's designated shard (a hash picks it)
	 * writes it: about half each; the rank that owns shard 0 never writes all. */
	KVS_CHECK(most <= 3 * sum / 4);
	KVS_TRY(st_cache_clean(w, true));
	KVS_TRY(st_close_kept(w, uid));
	barrier_fini(&b);
	close(res[0]);
	close(res[1]);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "dump_meets_loading", test_dump_meets_loading },
	{ "dump_meets_failed", test_dump_meets_failed },
	{ "writer_killed_writes", test_writer_killed_writes },
	{ "writer_dead_evicted", test_writer_dead_evicted },
	{ "writer_dead_adopted", test_writer_dead_adopted },
	{ "stale_dirty_written", test_stale_dirty_written },
	{ "writer_killed_gather", test_writer_killed_gather },
	{ "split_shards", test_split_shards },
	{ "partial_block", test_partial_block },
	{ "claims_many", test_claims_many },
	{ "writes_many_pins", test_writes_many_pins },
	{ "claims_duplicate", test_claims_duplicate },
	{ "dump_timeout", test_dump_timeout },
	{ "writes_spread", test_writes_spread },
	{ "orphan_at_exit", test_orphan_at_exit },
};

static const struct kvs_test_child children[] = {
	{ "meet_loader", meet_loader },
	{ "meet_dumper", meet_dumper },
	{ "kill_writer", kill_writer },
	{ "kill_survivor", kill_survivor },
	{ "split_rank", split_rank },
	{ "spread_rank", spread_rank },
	{ "orphan_exit", orphan_exit },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
