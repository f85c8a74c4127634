/*
 * tests/core_mp.c — the slot protocol across real processes: 8 processes (half
 * forked, half exec'd so the segments sit at other addresses) hammer the same
 * keys; every key has exactly one owner per residency and every waiter sees the
 * owner's bytes; an owner's FAILED reaches every waiting process with its code,
 * and a later get retries.
 */
#include <pthread.h>
#include <stdlib.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull
#define NPROC 8
#define BLOCKS 24
#define SHARDS 4
#define ROUNDS 30
#define SEED 12345u
#define GO_BLOCK 999999u
/* Contention: every process walks a round's keys in the same (seeded) order, and
 * an owner holds its slot for HOLD_YIELDS sched_yield()s before publishing, so
 * the peers arriving at the same key meanwhile wait on it.  Every FAIL_EVERY-th
 * key is published FAILED with -EIO; its waiters must see exactly that. */
#define HOLD_YIELDS 20
#define FAIL_EVERY 5
#define FAIL_CODE (-EIO)

static int key_fails(int key)
{
	return key % FAIL_EVERY == 2;
}

/* The same config in every process: the unique_id comes from the parent. */
static void mp_cfg(struct kvs_cache_config *cfg, const char *uid, uint64_t slots)
{
	core_cfg(cfg, "mp", slots, 2048, SHARDS);
	cfg->local_rank_size = NPROC + 1;
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
}

/* One process's share of the hammering: every key, ROUNDS times, in a
 * seeded per-process order.  Pass, or fail with the reason on stderr. */
static kvs_test_rc hammer(const char *uid, uint64_t slots, unsigned id)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	unsigned seed = SEED + id;
	int rc;

	struct kvs_block_id go = core_block(GO_BLOCK);
	struct kvs_slot gs;

	mp_cfg(&cfg, uid, slots);
	rc = kvs_cache_open(&cfg, &c);
	if (rc)
		KVS_FAILF("proc %u: open: %s", id, kvs_strerror(rc));
	/* Start line: the parent owns the "go" slot and publishes it once every
	 * process waits on it. */
	rc = kvs_cache_get(c, &go, 0, 0, &gs);
	if (rc || (gs.flags & KVS_SLOT_OWNER))
		KVS_FAILF("proc %u: go get %d", id, rc);
	rc = kvs_slot_wait(c, &gs, 0, 30000 * MS);
	kvs_slot_release(c, &gs);
	if (rc)
		KVS_FAILF("proc %u: go wait %s", id, kvs_strerror(rc));
	for (int r = 0; r < ROUNDS; r++) {
		int order[BLOCKS * SHARDS];

		unsigned rseed = SEED * 31u + (unsigned)r;

		(void)seed;
		/* fresh keys every round (every round races for owners), all
		 * processes in the same seeded order (Fisher-Yates), so they
		 * meet on the same keys */
		for (int k = 0; k < BLOCKS * SHARDS; k++)
			order[k] = k;
		for (int k = BLOCKS * SHARDS - 1; k > 0; k--) {
			int j = (int)(rand_r(&rseed) % (unsigned)(k + 1)), t = order[k];
			order[k] = order[j];
			order[j] = t;
		}
		for (int k = 0; k < BLOCKS * SHARDS; k++) {
			int key = r * BLOCKS * SHARDS + order[k];
			struct kvs_block_id b = core_block((uint64_t)key / SHARDS);
			uint32_t sh = (uint32_t)key % SHARDS;
			struct kvs_slot s;
			void *p;

			rc = kvs_cache_get(c, &b, sh, 0, &s);
			if (rc == -ENOSPC)
				continue; /* every slot pinned by peers at this instant */
			if (rc)
				KVS_FAILF("proc %u: get: %s", id, kvs_strerror(rc));
			if (kvs_slot_data(c, &s, &p))
				KVS_FAILF("proc %u: data", id);
			if (!(s.flags & KVS_SLOT_OWNER)) {
				rc = kvs_slot_wait(c, &s, 0, 10000 * MS);
				if (rc == KVS_SLOT_WAIT_OWNER)
					KVS_FAILF("proc %u: takeover with nobody dead", id);
				if (rc < 0)
					KVS_FAILF("proc %u: wait: %s", id, kvs_strerror(rc));
				if (key_fails(key)) {
					if (rc != KVS_SLOT_WAIT_FAILED || s.error != FAIL_CODE)
						KVS_FAILF("proc %u: key %d: wait %d error %d, want FAILED %d",
							  id, key, rc, s.error, FAIL_CODE);
				} else {
					if (rc != KVS_SLOT_WAIT_READY)
						KVS_FAILF("proc %u: key %d: wait %d error %d, want READY",
							  id, key, rc, s.error);
					if (!core_verify(p, cfg.slot_bytes, (uint64_t)key / SHARDS, sh))
						KVS_FAILF("proc %u: key %d: waiter saw other bytes", id, key);
				}
			} else {
				/* hold the slot a little: peers arrive and wait */
				for (int y = 0; y < HOLD_YIELDS; y++)
					sched_yield();
				if (key_fails(key)) {
					rc = kvs_slot_publish_failed(c, &s, FAIL_CODE);
				} else {
					core_fill(p, cfg.slot_bytes, (uint64_t)key / SHARDS, sh);
					rc = kvs_slot_publish_ready(c, &s);
				}
				if (rc)
					KVS_FAILF("proc %u: publish: %s", id, kvs_strerror(rc));
			}
			if (kvs_slot_release(c, &s))
				KVS_FAILF("proc %u: release", id);
		}
	}
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

struct hammer_arg {
	const char *uid;
	uint64_t slots;
	unsigned id;
};

static kvs_test_rc hammer_fork(void *arg)
{
	struct hammer_arg *h = arg;

	return hammer(h->uid, h->slots, h->id);
}

/* exec'd: --child hammer <uid> <slots> <id> */
static kvs_test_rc hammer_exec(int argc, char **argv)
{
	if (argc != 3)
		KVS_FAILF("usage: --child hammer <uid> <slots> <id>");
	return hammer(argv[0], strtoull(argv[1], NULL, 10), (unsigned)atoi(argv[2]));
}

static kvs_test_rc run_hammer(uint64_t slots, bool expect_single_fill)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct hammer_arg args[NPROC];
	char slots_s[32], ids[NPROC][16];
	pid_t pids[NPROC];
	struct kvs_cache_stats st;

	core_cfg(&cfg, expect_single_fill ? "hammer" : "hammer_evict", slots, 2048, SHARDS);
	cfg.local_rank_size = NPROC + 1;
	printf("seed %u, %d processes, %d keys, %llu slots\n", SEED, NPROC, BLOCKS * SHARDS,
	       (unsigned long long)slots);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	struct kvs_block_id go = core_block(GO_BLOCK);
	struct kvs_slot gs;
	KVS_CHECK_OK(kvs_cache_get(c, &go, 0, 0, &gs));
	KVS_CHECK_EQ(gs.flags, KVS_SLOT_OWNER);
	snprintf(slots_s, sizeof(slots_s), "%llu", (unsigned long long)slots);
	for (unsigned i = 0; i < NPROC; i++) {
		args[i] = (struct hammer_arg){ cfg.unique_id, slots, i };
		snprintf(ids[i], sizeof(ids[i]), "%u", i);
		if (i % 2) {
			const char *av[] = { cfg.unique_id, slots_s, ids[i], NULL };
			pids[i] = kvs_test_spawn("hammer", av);
		} else {
			pids[i] = kvs_test_fork(hammer_fork, &args[i]);
		}
		KVS_CHECK(pids[i] > 0);
	}
	uint64_t deadline = kvs_deadline_after(30000 * MS);
	while (atomic_load(&c->slots[gs.index].ref) < NPROC + 1 && kvs_now_ns() < deadline)
		sched_yield();
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &gs));
	KVS_CHECK_OK(kvs_slot_release(c, &gs));
	int bad = 0;
	for (unsigned i = 0; i < NPROC; i++) {
		int rc = kvs_test_reap(pids[i], 60000);
		if (rc != 0) {
			fprintf(stderr, "process %u exited %d\n", i, rc);
			bad++;
		}
	}
	KVS_CHECK_EQ(bad, 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	printf("fills %llu failures %llu misses %llu hits %llu waits %llu evictions %llu\n",
	       (unsigned long long)st.owner_fills, (unsigned long long)st.failures,
	       (unsigned long long)st.misses, (unsigned long long)st.hits,
	       (unsigned long long)st.waits, (unsigned long long)st.evictions);
	uint64_t good_keys = 0, bad_keys = 0;
	for (int k = 0; k < ROUNDS * BLOCKS * SHARDS; k++) {
		if (key_fails(k))
			bad_keys++;
		else
			good_keys++;
	}
	/* One owner per residency: every owner (a miss, or the retry of a
	 * FAILED slot) published once, READY or FAILED. */
	KVS_CHECK_EQ(st.owner_fills + st.failures, st.misses);
	KVS_CHECK_EQ(st.takeovers, 0);
	/* The mix contended: peers waited on owners, FAILED publishes reached
	 * waiters (each failing key failed at least once: the first owner). */
	KVS_CHECK(st.waits >= 300);
	KVS_CHECK(st.failures >= bad_keys);
	if (expect_single_fill) {
		/* no eviction: every good key was filled exactly once (plus the
		 * go slot), every failing key failed at least once */
		KVS_CHECK_EQ(st.owner_fills, good_keys + 1);
		KVS_CHECK_EQ(st.evictions, 0);
	} else {
		/* every residency ended evicted or is still there; a READY one
		 * was filled once, a FAILED one may have been retried */
		KVS_CHECK(st.evictions > 0);
		KVS_CHECK(st.evictions + st.slots_ready + st.slots_failed >= st.owner_fills);
		KVS_CHECK(st.evictions + st.slots_ready + st.slots_failed <= st.misses);
	}
	KVS_CHECK_EQ(st.slots_pinned, 0);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_hammer(void)
{
	return run_hammer(ROUNDS * BLOCKS * SHARDS + 1, true);
}

static kvs_test_rc test_hammer_eviction(void)
{
	return run_hammer(BLOCKS * SHARDS / 3, false);
}

/* A waiter process: pin (block 77, shard 0), which the parent owns, wait and
 * expect err.  Pass when it got exactly that. */
static kvs_test_rc failed_waiter(const char *uid, int want)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id b = core_block(77);
	struct kvs_slot s;
	int rc;

	mp_cfg(&cfg, uid, 32);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	rc = kvs_cache_get(c, &b, 0, 0, &s);
	if (rc || (s.flags & KVS_SLOT_OWNER))
		KVS_FAILF("waiter: get %d flags %u", rc, s.flags);
	rc = kvs_slot_wait(c, &s, 0, 20000 * MS);
	if (rc != KVS_SLOT_WAIT_FAILED || s.error != want)
		KVS_FAILF("waiter: wait %d (%s), error %d, want FAILED with %d", rc, kvs_strerror(rc),
			  s.error, want);
	kvs_slot_release(c, &s);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static const char *failed_uid;

static kvs_test_rc failed_fork(void *arg)
{
	(void)arg;
	return failed_waiter(failed_uid, -EIO);
}

static kvs_test_rc failed_exec(int argc, char **argv)
{
	if (argc != 1)
		KVS_FAILF("usage: --child failed_waiter <uid>");
	return failed_waiter(argv[0], -EIO);
}

static kvs_test_rc test_failed_reaches_every_waiter(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id b = core_block(77);
	struct kvs_slot s;
	pid_t pids[4];

	mp_cfg(&cfg, "", 32);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "failed");
	failed_uid = cfg.unique_id;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	for (int i = 0; i < 4; i++) {
		const char *av[] = { cfg.unique_id, NULL };
		pids[i] = i % 2 ? kvs_test_spawn("failed_waiter", av) : kvs_test_fork(failed_fork, NULL);
		KVS_CHECK(pids[i] > 0);
	}
	/* Publish once all four pinned (white-box: the slot's refcount). */
	uint64_t deadline = kvs_deadline_after(20000 * MS);
	while (atomic_load(&c->slots[s.index].ref) < 5 && kvs_now_ns() < deadline)
		sched_yield();
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].ref), 5);
	KVS_CHECK_OK(kvs_slot_publish_failed(c, &s, -EIO));
	for (int i = 0; i < 4; i++)
		KVS_CHECK_EQ(kvs_test_reap(pids[i], 30000), 0);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	/* A later get retries: owner again. */
	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

struct thread_arg {
	struct kvs_cache *c;
	unsigned id;
	int rc;
};

/* One thread of one process: the hammer loop on a shared handle. */
static void *hammer_thread(void *arg)
{
	struct thread_arg *t = arg;
	unsigned seed = SEED + 100 + t->id;

	t->rc = 0;
	for (int r = 0; r < ROUNDS && !t->rc; r++) {
		for (int k = 0; k < BLOCKS * SHARDS; k++) {
			int key = r * BLOCKS * SHARDS + (int)(rand_r(&seed) % (BLOCKS * SHARDS));
			struct kvs_block_id b = core_block((uint64_t)key / SHARDS);
			uint32_t sh = (uint32_t)key % SHARDS;
			struct kvs_slot s;
			void *p;

			if (kvs_cache_get(t->c, &b, sh, 0, &s) || kvs_slot_data(t->c, &s, &p)) {
				t->rc = 1;
				break;
			}
			if (s.flags & KVS_SLOT_OWNER) {
				core_fill(p, t->c->slot_bytes, (uint64_t)key / SHARDS, sh);
				t->rc |= kvs_slot_publish_ready(t->c, &s) != 0;
			} else {
				t->rc |= kvs_slot_wait(t->c, &s, 0, 10000 * MS) != KVS_SLOT_WAIT_READY ||
					 !core_verify(p, t->c->slot_bytes, (uint64_t)key / SHARDS, sh);
			}
			t->rc |= kvs_slot_release(t->c, &s) != 0;
		}
	}
	return NULL;
}

/* Threads of one process share one handle: every call is thread-safe.  (Two
 * handles in one process map the segment twice; TSan cannot tell that two
 * addresses are one mutex, so cross-handle sharing is left to the multi-process
 * cases.) */
static kvs_test_rc test_threads(void)
{
	enum { T = 4 };
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct thread_arg args[T];
	pthread_t th[T];
	struct kvs_cache_stats st;

	core_cfg(&cfg, "threads", 64, 2048, SHARDS);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	for (unsigned i = 0; i < T; i++) {
		args[i] = (struct thread_arg){ c, i, 0 };
		KVS_CHECK_OK(-pthread_create(&th[i], NULL, hammer_thread, &args[i]));
	}
	for (unsigned i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		KVS_CHECK_EQ(args[i].rc, 0);
	}
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.owner_fills, st.misses);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "threads", test_threads },
	{ "hammer", test_hammer },
	{ "hammer_eviction", test_hammer_eviction },
	{ "failed_reaches_every_waiter", test_failed_reaches_every_waiter },
};

static const struct kvs_test_child children[] = {
	{ "hammer", hammer_exec },
	{ "failed_waiter", failed_exec },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
