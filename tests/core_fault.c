/*
 * tests/core_fault.c — peers die at bad moments (kill -9): an owner mid-fill
 * (its waiters take over, or fail with -KVS_EOWNERDEAD when they ask to), a
 * process holding a bucket lock in the middle of a chain edit and an eviction
 * (the next locker repairs, the slot's evictor bit cleared), and a randomised loop killing one of several hammering processes at
 * a random instant.  Nobody hangs, nothing is corrupt, pins are reclaimed.
 */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull
#define KEY 4242u

static void fault_cfg(struct kvs_cache_config *cfg, const char *uid, uint64_t slots)
{
	core_cfg(cfg, "fault", slots, 4096, 2);
	cfg->local_rank_size = 16;
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
}

/* Wait for one byte on fd (a child saying "I am where you want me"). */
static kvs_test_rc wait_byte(int fd)
{
	char ch;

	if (!kvs_test_read_within(fd, &ch, 1, 20000))
		KVS_FAILF("no word from the child within 20 s");
	return KVS_TEST_PASS;
}

/* exec'd: --child owner <uid> <fd>: own KEY, say so, never publish. */
static kvs_test_rc owner_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	void *p;

	if (argc != 2)
		KVS_FAILF("usage: --child owner <uid> <fd>");
	fault_cfg(&cfg, argv[0], 16);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	KVS_CHECK_ERR(kvs_cache_get(c, &k, 0, 0, &s), 0);
	KVS_CHECK(s.flags & KVS_SLOT_OWNER);
	kvs_slot_data(c, &s, &p);
	memset(p, 0xee, 100); /* half-written bytes */
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	for (;;)
		pause();
}

/* exec'd: --child holder <uid> <fd>: hold KEY's bucket lock mid-"edit": the
 * chain head lost, a refcount off and an evictor's bit left, as a death inside
 * an edit or an eviction leaves them. */
static kvs_test_rc holder_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	uint32_t b;

	if (argc != 2)
		KVS_FAILF("usage: --child holder <uid> <fd>");
	fault_cfg(&cfg, argv[0], 16);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	KVS_CHECK_ERR(kvs_core_test_hold_bucket(c, &k, 0), 0);
	b = kvs_core_bucket_of(c, kvs_core_hash(&k, 0));
	if (c->buckets[b].head != KVS_IDX_NONE) {
		atomic_fetch_add(&c->slots[c->buckets[b].head].ref, 1);
		/* an evictor's bit too, as one killed past its CAS leaves it */
		atomic_fetch_or(&c->slots[c->buckets[b].head].readers, KVS_READERS_EV);
	}
	c->buckets[b].head = KVS_IDX_NONE;
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	for (;;)
		pause();
}

static const char *peer_uid;

/* The peer waiter's exit status when it took over and filled the slot. */
#define PEER_TOOK_OVER 3

/* forked waiter on KEY: pass = saw READY with the right bytes, PEER_TOOK_OVER =
 * took over and filled it, fail = anything else. */
static kvs_test_rc peer_waiter(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	void *p;
	int rc;
	kvs_test_rc out = KVS_TEST_FAIL;

	(void)arg;
	fault_cfg(&cfg, peer_uid, 16);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	KVS_CHECK_ERR(kvs_cache_get(c, &k, 0, 0, &s), 0);
	KVS_CHECK(!(s.flags & KVS_SLOT_OWNER));
	kvs_slot_data(c, &s, &p);
	rc = kvs_slot_wait(c, &s, 0, 20000 * MS);
	if (rc == KVS_SLOT_WAIT_READY && core_verify(p, cfg.slot_bytes, KEY, 0))
		out = KVS_TEST_PASS;
	if (rc == KVS_SLOT_WAIT_OWNER) {
		core_fill(p, cfg.slot_bytes, KEY, 0);
		if (kvs_slot_publish_ready(c, &s) == 0)
			out = KVS_TEST_EXIT(PEER_TOOK_OVER);
	}
	if (out.code == KVS_TEST_FAIL.code)
		fprintf(stderr, "%s:%d: peer waiter: wait %d (%s)%s\n", __FILE__, __LINE__, rc,
			kvs_strerror(rc), rc == 0 ? ", other bytes" : "");
	kvs_slot_release(c, &s);
	kvs_cache_close(c);
	return out;
}

static kvs_test_rc test_owner_killed_mid_fill(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	struct kvs_cache_stats st;
	pid_t owner, peer;
	int rfd, took = 0;
	void *p;

	fault_cfg(&cfg, "", 16);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "ownerdie");
	peer_uid = cfg.unique_id;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	owner = kvs_test_spawn_piped("owner", cfg.unique_id, &rfd);
	KVS_CHECK(owner > 0);
	KVS_TRY(wait_byte(rfd));
	close(rfd);
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, 0);
	peer = kvs_test_fork(peer_waiter, NULL);
	uint64_t deadline = kvs_deadline_after(20000 * MS);
	while (atomic_load(&c->slots[s.index].ref) < 3 && kvs_now_ns() < deadline)
		sched_yield();
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].ref), 3);
	kill(owner, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(owner, 10000), 128 + SIGKILL);
	int rc = kvs_slot_wait(c, &s, 0, 20000 * MS);
	KVS_CHECK_OK(kvs_slot_data(c, &s, &p));
	if (rc == KVS_SLOT_WAIT_OWNER) {
		took = 1;
		core_fill(p, cfg.slot_bytes, KEY, 0);
		KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	} else {
		KVS_CHECK_EQ(rc, 0);
		KVS_CHECK(core_verify(p, cfg.slot_bytes, KEY, 0));
	}
	rc = kvs_test_reap(peer, 30000);
	KVS_CHECK(rc == 0 || rc == PEER_TOOK_OVER);
	KVS_CHECK_EQ(took + (rc == PEER_TOOK_OVER), 1); /* exactly one new owner */
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_EQ(kvs_cache_exists(c, &k, 0), 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.takeovers, 1);
	KVS_CHECK(st.ranks_reaped >= 1);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_owner_killed_no_takeover(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *c2 = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	struct kvs_cache_stats st;
	pid_t owner;
	int rfd;

	fault_cfg(&cfg, "", 16);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "notakeover");
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	/* 1: a waiter that refuses takeover gets -KVS_EOWNERDEAD */
	owner = kvs_test_spawn_piped("owner", cfg.unique_id, &rfd);
	KVS_TRY(wait_byte(rfd));
	close(rfd);
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	kill(owner, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(owner, 10000), 128 + SIGKILL);
	KVS_CHECK_EQ(kvs_slot_wait(c, &s, KVS_SLOT_WAIT_NO_TAKEOVER, 20000 * MS), KVS_SLOT_WAIT_FAILED);
	KVS_CHECK_EQ(s.error, -KVS_EOWNERDEAD);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	/* the next get retries */
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_release(c, &s)); /* -> FAILED(-ECANCELED) */

	/* 2: nobody waiting; the next attacher reaps the dead owner and the slot
	 * is FAILED(-KVS_EOWNERDEAD), retried by the next get */
	owner = kvs_test_spawn_piped("owner", cfg.unique_id, &rfd);
	KVS_TRY(wait_byte(rfd));
	close(rfd);
	kill(owner, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(owner, 10000), 128 + SIGKILL);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c2));
	uint32_t b = kvs_core_bucket_of(c, kvs_core_hash(&k, 0));
	uint32_t i = kvs_core_find(c, b, &k, 0);
	KVS_CHECK(i != KVS_IDX_NONE);
	KVS_CHECK_EQ(atomic_load(&c->states[i]), KVS_SLOT_FAILED);
	KVS_CHECK_EQ(atomic_load(&c->slots[i].error), -KVS_EOWNERDEAD);
	KVS_CHECK_EQ(atomic_load(&c->slots[i].ref), 0);
	KVS_CHECK_OK(kvs_cache_get(c2, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_publish_ready(c2, &s));
	KVS_CHECK_OK(kvs_slot_release(c2, &s));
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.ranks_reaped, 2);
	kvs_cache_close(c2);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_lock_holder_killed(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	struct kvs_cache_stats st;
	pid_t holder;
	int rfd;

	fault_cfg(&cfg, "", 16);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "lockdie");
	cfg.lock_timeout_ns = 20000 * MS;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	holder = kvs_test_spawn_piped("holder", cfg.unique_id, &rfd);
	KVS_TRY(wait_byte(rfd));
	close(rfd);
	kill(holder, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(holder, 10000), 128 + SIGKILL);
	/* The next locker gets EOWNERDEAD, rebuilds the chain (the key is found
	 * again) and recounts the ref from the pin tables. */
	KVS_CHECK_EQ(kvs_cache_exists(c, &k, 0), 1);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.lock_repairs, 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	/* a READY hit: pinned lock-free, this rank's bit and no ref */
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].ref), 0);
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].readers), UINT64_C(1) << c->rank_idx);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].readers), 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* A hammering worker for the random kill loop: handles takeovers. */
static kvs_test_rc worker(const char *uid, unsigned seed)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	int rc;

	fault_cfg(&cfg, uid, 12);
	rc = kvs_cache_open(&cfg, &c);
	if (rc)
		KVS_FAILF("worker: open %s", kvs_strerror(rc));
	for (int n = 0; n < 20000; n++) {
		uint64_t blk = rand_r(&seed) % 10;
		uint32_t sh = rand_r(&seed) % 2;
		struct kvs_block_id k = core_block(blk);
		struct kvs_slot s;
		void *p;

		rc = kvs_cache_get(c, &k, sh, 0, &s);
		if (rc == -ENOSPC)
			continue;
		if (rc)
			KVS_FAILF("worker: get %s", kvs_strerror(rc));
		kvs_slot_data(c, &s, &p);
		if (!(s.flags & KVS_SLOT_OWNER)) {
			rc = kvs_slot_wait(c, &s, 0, 20000 * MS);
			if (rc == KVS_SLOT_WAIT_READY && !core_verify(p, cfg.slot_bytes, blk, sh))
				KVS_FAILF("worker: bad bytes");
			if (rc == KVS_SLOT_WAIT_FAILED && s.error != -ECANCELED)
				KVS_FAILF("worker: slot failed %s", kvs_strerror(s.error));
			if (rc < 0)
				KVS_FAILF("worker: wait %s", kvs_strerror(rc));
		}
		if (s.flags & KVS_SLOT_OWNER) {
			core_fill(p, cfg.slot_bytes, blk, sh);
			if (kvs_slot_publish_ready(c, &s))
				KVS_FAILF("worker: publish");
		}
		if (kvs_slot_release(c, &s))
			KVS_FAILF("worker: release");
	}
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static unsigned worker_seed;

static kvs_test_rc worker_fork(void *arg)
{
	return worker((const char *)arg, worker_seed);
}

static kvs_test_rc worker_exec(int argc, char **argv)
{
	if (argc != 2)
		KVS_FAILF("usage: --child worker <uid> <seed>");
	return worker(argv[0], (unsigned)atoi(argv[1]));
}

static kvs_test_rc test_kill_random(void)
{
#if defined(__SANITIZE_THREAD__)
	enum { ITER = 12, W = 3 }; /* TSan: every exec and map is slow */
#else
	enum { ITER = 30, W = 3 };
#endif
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *c2 = NULL;
	struct kvs_cache_stats st;
	unsigned seed = 777;

	fault_cfg(&cfg, "", 12);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "killrand");
	printf("seed %u, %d iterations of %d workers, one killed\n", seed, ITER, W);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	for (int it = 0; it < ITER; it++) {
		pid_t pids[W];
		int victim = (int)(rand_r(&seed) % W);
		char seeds[W][16];

		for (int w = 0; w < W; w++) {
			snprintf(seeds[w], sizeof(seeds[w]), "%u", seed + (unsigned)w);
			if (w % 2) {
				const char *av[] = { cfg.unique_id, seeds[w], NULL };
				pids[w] = kvs_test_spawn("worker", av);
			} else {
				worker_seed = seed + (unsigned)w;
				pids[w] = kvs_test_fork(worker_fork, cfg.unique_id);
			}
			KVS_CHECK(pids[w] > 0);
		}
		/* fault injection: kill at a random instant (not synchronisation) */
		struct timespec ts = { 0, (long)(rand_r(&seed) % 10000) * 1000 };
		nanosleep(&ts, NULL);
		kill(pids[victim], SIGKILL);
		for (int w = 0; w < W; w++) {
			int rc = kvs_test_reap(pids[w], 30000);

			if (w == victim)
				KVS_CHECK(rc == 0 || rc == 128 + SIGKILL);
			else if (rc != 0)
				KVS_FAILF("iteration %d: worker %d exited %d", it, w, rc);
		}
		KVS_CHECK_OK(kvs_cache_check(c));
	}
	/* A fresh attacher reaps whatever the dead left pinned. */
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c2));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	printf("reaped %llu, takeovers %llu, lock repairs %llu, fills %llu\n",
	       (unsigned long long)st.ranks_reaped, (unsigned long long)st.takeovers,
	       (unsigned long long)st.lock_repairs, (unsigned long long)st.owner_fills);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_EQ(st.ranks_attached, 2);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c2);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* A thread of the test process holding a bucket lock while the handle that
 * pins a slot of that bucket closes: close cannot drop the pin, so it keeps
 * its rank entry (with the pin) for a reaper instead of freeing it and
 * leaking the ref. */
struct bucket_hold {
	struct kvs_cache *c;
	struct kvs_block_id k;
	int go[2], done[2];
};

static void *hold_bucket_thread(void *arg)
{
	struct bucket_hold *h = arg;
	char ch;

	if (kvs_core_test_hold_bucket(h->c, &h->k, 0) == 0 && write(h->go[1], "x", 1) == 1 &&
	    read(h->done[0], &ch, 1) == 1)
		kvs_core_bucket_unlock(h->c, kvs_core_bucket_of(h->c, kvs_core_hash(&h->k, 0)));
	return NULL;
}

static kvs_test_rc test_close_keeps_unreleased_pins(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *d = NULL, *e = NULL;
	struct kvs_cache_stats st;
	struct bucket_hold h;
	struct kvs_slot s;
	pthread_t t;
	char ch;

	fault_cfg(&cfg, "", 16);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "closepins");
	cfg.lock_timeout_ns = 50 * MS;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &d));
	h.c = c;
	h.k = core_block(KEY);
	KVS_CHECK_OK(pipe(h.go));
	KVS_CHECK_OK(pipe(h.done));
	KVS_CHECK_OK(kvs_cache_get(d, &h.k, 0, 0, &s));
	KVS_CHECK_OK(kvs_slot_publish_ready(d, &s));
	KVS_CHECK_OK(-pthread_create(&t, NULL, hold_bucket_thread, &h));
	KVS_CHECK_EQ(read(h.go[0], &ch, 1), 1);
	core_log_quiet = 1;
	kvs_cache_close(d); /* its pin's bucket is held: the pin cannot be dropped */
	core_log_quiet = 0;
	KVS_CHECK_EQ(write(h.done[1], "x", 1), 1);
	pthread_join(t, NULL);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, 1);
	KVS_CHECK_OK(kvs_cache_check(c)); /* a dead entry with its pin: consistent */
	/* the next attacher reaps the entry and its pin */
	KVS_CHECK_OK(kvs_cache_open(&cfg, &e));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_EQ(st.ranks_reaped, 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(e);
	kvs_cache_close(c);
	for (int i = 0; i < 2; i++) {
		close(h.go[i]);
		close(h.done[i]);
	}
	return KVS_TEST_PASS;
}

/* A free rank entry holding pins (left by a broken or hostile peer): check
 * reports it, and the attach that takes the entry gives the pins back with
 * their refs. */
static kvs_test_rc test_free_entry_pins_cleared(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *d = NULL;
	struct kvs_cache_stats st;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	uint32_t b, free_r;

	fault_cfg(&cfg, "", 16);
	kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "freepins");
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	/* forge: the next free entry names our slot, with its ref */
	free_r = (uint32_t)kvs_cache_rank(c) + 1;
	KVS_CHECK_OK(kvs_core_slot_lock(c, s.index, &b));
	atomic_store(&c->ranks[free_r].pins[7], s.index + 1);
	atomic_fetch_add(&c->slots[s.index].ref, 1);
	kvs_core_bucket_unlock(c, b);
	core_log_quiet = 1;
	KVS_CHECK_ERR(kvs_cache_check(c), -KVS_ECORRUPT);
	core_log_quiet = 0;
	KVS_CHECK(strstr(core_last_log, "free but holds") != NULL);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &d)); /* takes entry free_r */
	KVS_CHECK_EQ(kvs_cache_rank(d), free_r);
	KVS_CHECK_EQ(atomic_load(&c->slots[s.index].ref), 1);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(d);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* forked: open, own KEY, fork a child that keeps the inherited descriptors
 * (and would keep this rank's OFD locks), say so, wait to be killed. */
static const char *forker_uid;
static int forker_fd;
static pid_t *forker_grandchild; /* shared page: the grandchild's pid */

static kvs_test_rc forker(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	pid_t g;

	(void)arg;
	fault_cfg(&cfg, forker_uid, 16);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK(s.flags & KVS_SLOT_OWNER);
	g = fork();
	if (g == 0) {
		for (;;)
			pause(); /* holds every descriptor it inherited */
	}
	*forker_grandchild = g;
	KVS_CHECK_EQ(write(forker_fd, "x", 1), 1);
	for (;;)
		pause();
}

/* A rank that forked dies: its child must not keep it alive, so a waiter takes
 * its slot over instead of waiting out its timeout. */
static kvs_test_rc test_forked_child_keeps_no_liveness(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(KEY);
	struct kvs_slot s;
	int fds[2];
	pid_t pid;

	fault_cfg(&cfg, "", 16);
	forker_uid = kvs_test_unique_id(cfg.unique_id, sizeof(cfg.unique_id), "forkalive");
	forker_grandchild = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	KVS_CHECK(forker_grandchild != MAP_FAILED);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(pipe(fds));
	forker_fd = fds[1];
	pid = kvs_test_fork(forker, NULL);
	KVS_TRY(wait_byte(fds[0]));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, 0);
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	/* the grandchild is alive, holding the dead rank's descriptors */
	KVS_CHECK_EQ(kill(*forker_grandchild, 0), 0);
	int rc = kvs_slot_wait(c, &s, 0, 3000 * MS);
	kill(*forker_grandchild, SIGKILL);
	KVS_CHECK_EQ(rc, KVS_SLOT_WAIT_OWNER);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	close(fds[0]);
	close(fds[1]);
	munmap(forker_grandchild, 4096);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "close_keeps_unreleased_pins", test_close_keeps_unreleased_pins },
	{ "free_entry_pins_cleared", test_free_entry_pins_cleared },
	{ "forked_child_keeps_no_liveness", test_forked_child_keeps_no_liveness },
	{ "owner_killed_mid_fill", test_owner_killed_mid_fill },
	{ "owner_killed_no_takeover", test_owner_killed_no_takeover },
	{ "lock_holder_killed", test_lock_holder_killed },
	{ "kill_random", test_kill_random },
};

static const struct kvs_test_child children[] = {
	{ "owner", owner_child },
	{ "holder", holder_child },
	{ "worker", worker_exec },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
