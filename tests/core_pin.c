/*
 * tests/core_pin.c — READY hits pinned without the bucket lock (core/pin.c,
 * "Lock-free pins"; model/pin.pml), in real processes:
 *   lockfree_hit        a READY hit holds its rank's bit and a KVS_PIN_READER
 *                       entry, no ref; a second pin by the same process is a
 *                       locked one; release clears both; the checker knows a
 *                       stray evictor bit;
 *   readers_kept        CLOCK never takes a slot pinned lock-free, a forced
 *                       reload does not rewrite it, nor a load retry its
 *                       FAILED bytes; released, it is evicted as any other;
 *   absent_unlocked     a deferring get (KVS_CORE_GET_DEFER) tells an absent
 *                       key without the bucket lock, and only an absent one;
 *   reader_killed       a process killed holding lock-free pins: the next
 *                       attach reaps its bits and entries, the slots evictable;
 *   race                readers (forked and exec'd) hold lock-free pins and
 *                       check every byte while other processes evict and
 *                       refill the same slots with other keys: never a byte of
 *                       another key under a pin.
 * (An evictor killed holding its bit: core_fault's lock_holder_killed.)
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull

/* The cache of a case (uid NULL: a new one named tag) or of its parent (uid). */
static void pin_cfg(struct kvs_cache_config *cfg, const char *tag, const char *uid, uint64_t slots)
{
	core_cfg(cfg, tag, slots, 4096, 1);
	cfg->local_rank_size = 16;
	if (uid)
		snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
}

static uint64_t bit_of(const struct kvs_cache *c)
{
	return UINT64_C(1) << c->rank_idx;
}

static uint64_t readers_of(struct kvs_cache *c, uint32_t i)
{
	return atomic_load(&c->slots[i].readers);
}

static kvs_test_rc test_lockfree_hit(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(1);
	struct kvs_slot a, b;
	struct kvs_cache_stats st;
	uint32_t v, apin;
	void *p;

	pin_cfg(&cfg, "lfhit", NULL, 8);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 1));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &a));
	KVS_CHECK_EQ(a.state, KVS_SLOT_READY);
	KVS_CHECK_EQ(a.flags, 0);
	KVS_CHECK_EQ(readers_of(c, a.index), bit_of(c));
	KVS_CHECK_EQ(atomic_load(&c->slots[a.index].ref), 0);
	v = atomic_load(&c->me->pins[a.pin]);
	KVS_CHECK_EQ(v, (a.index + 1) | KVS_PIN_READER);
	apin = a.pin;
	KVS_CHECK_OK(kvs_slot_data(c, &a, &p));
	KVS_CHECK(core_verify(p, cfg.slot_bytes, 1, 0));
	/* the same process again: its bit is held, so a locked pin */
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &b));
	KVS_CHECK_EQ(b.state, KVS_SLOT_READY);
	KVS_CHECK_EQ(atomic_load(&c->slots[b.index].ref), 1);
	KVS_CHECK_EQ(atomic_load(&c->me->pins[b.pin]), b.index + 1);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.hits, 2);
	KVS_CHECK_EQ(st.slots_pinned, 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_CHECK_OK(kvs_slot_release(c, &a));
	KVS_CHECK_EQ(readers_of(c, b.index), 0);
	KVS_CHECK_EQ(atomic_load(&c->me->pins[apin]), 0);
	KVS_CHECK_ERR(kvs_slot_release(c, &a), -EINVAL); /* released: the handle is spent */
	KVS_CHECK_OK(kvs_slot_release(c, &b));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, 0);
	/* An evictor's bit with nobody holding the lock is a leak: reported. */
	core_log_quiet = 1;
	atomic_fetch_or(&c->slots[b.index].readers, KVS_READERS_EV);
	KVS_CHECK_ERR(kvs_cache_check(c), -KVS_ECORRUPT);
	atomic_fetch_and(&c->slots[b.index].readers, ~KVS_READERS_EV);
	/* So is a free rank entry's bit: no entry of its would ever clear it. */
	atomic_fetch_or(&c->slots[b.index].readers, UINT64_C(1) << 40);
	KVS_CHECK_ERR(kvs_cache_check(c), -KVS_ECORRUPT);
	KVS_CHECK(strstr(core_last_log, "lock-free pin bits 0x10000000000 of free rank entries"));
	atomic_fetch_and(&c->slots[b.index].readers, ~(UINT64_C(1) << 40));
	core_log_quiet = 0;
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* A deferring get (KVS_CORE_GET_DEFER, the store's visit of a miss while its
 * reads wait for backend room) tells an absent key from the unlocked lookup:
 * -ENOENT with its bucket's lock held elsewhere, where a plain try is -EBUSY.
 * A key that is there still goes by the lock (a LOADING one: -EBUSY) or pins
 * lock-free (READY), and nothing is keyed for the absent one. */
static kvs_test_rc test_absent_unlocked(void)
{
	const uint32_t defer = KVS_CORE_GET_TRY | KVS_CORE_GET_NO_OWN | KVS_CORE_GET_DEFER;
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id absent = core_block(7), loading = core_block(8), ready = core_block(9);
	struct kvs_slot own, s;
	uint32_t ba, bl, br;

	pin_cfg(&cfg, "absent", NULL, 8);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 9));
	KVS_CHECK_OK(kvs_cache_get(c, &loading, 0, 0, &own));
	KVS_CHECK_EQ(own.flags, KVS_SLOT_OWNER);
	ba = kvs_core_bucket_of(c, kvs_core_hash(&absent, 0));
	bl = kvs_core_bucket_of(c, kvs_core_hash(&loading, 0));
	br = kvs_core_bucket_of(c, kvs_core_hash(&ready, 0));

	KVS_CHECK_OK(kvs_core_bucket_lock(c, ba));
	KVS_CHECK_ERR(kvs_core_get(c, &absent, 0, defer, &s), -ENOENT);
	KVS_CHECK_ERR(kvs_core_get(c, &absent, 0, defer & ~KVS_CORE_GET_DEFER, &s), -EBUSY);
	kvs_core_bucket_unlock(c, ba);
	KVS_CHECK_EQ(kvs_cache_exists(c, &absent, 0), 0);

	KVS_CHECK_OK(kvs_core_bucket_lock(c, bl));
	KVS_CHECK_ERR(kvs_core_get(c, &loading, 0, defer, &s), -EBUSY);
	kvs_core_bucket_unlock(c, bl);

	KVS_CHECK_OK(kvs_core_bucket_lock(c, br));
	KVS_CHECK_OK(kvs_core_get(c, &ready, 0, defer, &s));
	kvs_core_bucket_unlock(c, br);
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	KVS_CHECK_EQ(readers_of(c, s.index), bit_of(c));
	KVS_CHECK_OK(kvs_slot_release(c, &s));

	KVS_TRY(core_fill_publish(c, &own, 8, 0));
	KVS_CHECK_OK(kvs_slot_release(c, &own));
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* A cache of two slots: key 1 pinned lock-free, keys 2, 3, 4 come and go in
 * the other slot. */
static kvs_test_rc test_readers_kept(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *peer = NULL;
	struct kvs_block_id k1 = core_block(1), k4 = core_block(4);
	struct kvs_slot r, s;
	void *p;

	pin_cfg(&cfg, "kept", NULL, 2);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	cfg.device_id = 1;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &peer)); /* another rank: its own bit */
	KVS_TRY(core_put(c, 1));
	KVS_CHECK_OK(kvs_cache_get(c, &k1, 0, 0, &r));
	KVS_CHECK_EQ(readers_of(c, r.index), bit_of(c));
	/* CLOCK: keys 2 and 3 take the other slot, never key 1's */
	for (uint64_t n = 2; n <= 3; n++) {
		KVS_TRY(core_put(peer, n));
		KVS_CHECK_EQ(kvs_cache_exists(c, &k1, 0), 1);
	}
	/* both slots pinned (key 3 by a locked pin): no room */
	struct kvs_block_id k3 = core_block(3);
	KVS_CHECK_OK(kvs_cache_get(peer, &k3, 0, 0, &s));
	KVS_CHECK_ERR(kvs_cache_get(peer, &k4, 0, 0, &(struct kvs_slot){ 0 }), -ENOSPC);
	KVS_CHECK_OK(kvs_slot_release(peer, &s));
	/* a forced reload of key 1 while it is read lock-free: no owner, a pin */
	KVS_CHECK_OK(kvs_cache_get(peer, &k1, 0, KVS_GET_BYPASS_HIT, &s));
	KVS_CHECK_EQ(s.flags, 0);
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	KVS_CHECK_OK(kvs_slot_release(peer, &s));
	/* a load retry of FAILED bytes a reader holds: no owner either (the
	 * drop of a DIRTY slot, made here directly) */
	kvs_wait_publish(&c->states[r.index], KVS_SHM_SLOT_FAILED);
	atomic_store(&c->slots[r.index].error, -EIO);
	KVS_CHECK_OK(kvs_cache_get(peer, &k1, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, 0);
	KVS_CHECK_EQ(s.state, KVS_SLOT_FAILED);
	KVS_CHECK_OK(kvs_slot_release(peer, &s));
	KVS_CHECK_OK(kvs_slot_data(c, &r, &p));
	KVS_CHECK(core_verify(p, cfg.slot_bytes, 1, 0)); /* nobody wrote under the pin */
	KVS_CHECK_OK(kvs_slot_release(c, &r));
	/* released: the retry owns it, and key 1 can be evicted */
	KVS_CHECK_OK(kvs_cache_get(peer, &k1, 0, 0, &s));
	KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
	KVS_TRY(core_fill_publish(peer, &s, 1, 0));
	KVS_CHECK_OK(kvs_slot_release(peer, &s));
	for (uint64_t n = 4; n <= 9; n++)
		KVS_TRY(core_put(peer, n));
	KVS_CHECK_EQ(kvs_cache_exists(c, &k1, 0), 0);
	KVS_CHECK_EQ(readers_of(c, 0) | readers_of(c, 1), 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(peer);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

#define KILLED_KEYS 4u

/* exec'd: --child reader <uid> <fd>: pin keys 1..KILLED_KEYS lock-free, say
 * so, wait for the kill. */
static kvs_test_rc reader_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;

	if (argc != 2)
		KVS_FAILF("usage: --child reader <uid> <fd>");
	pin_cfg(&cfg, "killed", argv[0], 8);
	cfg.device_id = 3;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	for (uint64_t n = 1; n <= KILLED_KEYS; n++) {
		struct kvs_block_id k = core_block(n);
		struct kvs_slot s;

		KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
		KVS_CHECK_EQ(readers_of(c, s.index), bit_of(c));
	}
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	for (;;)
		pause();
}

static kvs_test_rc test_reader_killed(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL, *c2 = NULL;
	struct kvs_cache_stats st;
	struct kvs_slot fresh[8];
	pid_t reader;
	uint32_t held = 0;
	int rfd;
	char ch;

	pin_cfg(&cfg, "killed", NULL, 8);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	for (uint64_t n = 1; n <= KILLED_KEYS; n++)
		KVS_TRY(core_put(c, n));
	reader = kvs_test_spawn_piped("reader", cfg.unique_id, &rfd);
	KVS_CHECK(reader > 0);
	if (!kvs_test_read_within(rfd, &ch, 1, 20000))
		KVS_FAILF("no word from the reader within 20 s");
	close(rfd);
	for (uint32_t i = 0; i < cfg.slot_count; i++)
		held += readers_of(c, i) != 0;
	KVS_CHECK_EQ(held, KILLED_KEYS);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, KILLED_KEYS);
	kill(reader, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(reader, 10000), 128 + SIGKILL);
	cfg.device_id = 1;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c2)); /* the attach reaps the dead rank */
	for (uint32_t i = 0; i < cfg.slot_count; i++)
		KVS_CHECK_EQ(readers_of(c, i), 0);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_EQ(st.ranks_reaped, 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	/* evictable: eight new keys, pinned at once, take all eight slots */
	for (uint32_t n = 0; n < 8; n++) {
		struct kvs_block_id k = core_block(11 + n);

		KVS_CHECK_OK(kvs_cache_get(c2, &k, 0, 0, &fresh[n]));
		KVS_CHECK_EQ(fresh[n].flags, KVS_SLOT_OWNER);
	}
	for (uint32_t n = 0; n < 8; n++) {
		KVS_TRY(core_fill_publish(c2, &fresh[n], 11 + n, 0));
		KVS_CHECK_OK(kvs_slot_release(c2, &fresh[n]));
	}
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c2);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* ---- race ---- */

#define RACE_SLOTS 8u
#define RACE_KEYS 12u /* more keys than slots: the writers evict all the time */
#define RACE_READERS 4
#define RACE_WRITERS 2
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define RACE_MS 1000u
#else
#define RACE_MS 3000u
#endif

/* Shared with the forked children; the exec'd ones learn the deadline from
 * their arguments. */
struct race_out {
	_Atomic uint64_t lockfree, verified;
};

/* A race process's handle on the parent's cache, rank device id. */
static kvs_test_rc race_open(const char *uid, unsigned id, struct kvs_cache_config *cfg,
			     struct kvs_cache **c)
{
	pin_cfg(cfg, "race", uid, RACE_SLOTS);
	cfg->device_id = (int32_t)id;
	KVS_CHECK_OK(kvs_cache_open(cfg, c));
	return KVS_TEST_PASS;
}

/* A reader: hits on random keys, each pinned slot's bytes checked twice over
 * (the second pass long after the pin: a re-key under it would show). */
static kvs_test_rc race_reader(const char *uid, unsigned id, uint64_t until_ns,
			       struct race_out *out)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	unsigned seed = 4200u + id;
	uint64_t lockfree = 0, verified = 0;

	KVS_TRY(race_open(uid, id, &cfg, &c));
	while (kvs_now_ns() < until_ns) {
		uint64_t n = rand_r(&seed) % RACE_KEYS;
		struct kvs_block_id k = core_block(n);
		struct kvs_slot s;
		void *p;
		int rc = kvs_core_get(c, &k, 0, KVS_CORE_GET_NO_OWN, &s);

		if (rc == -ENOENT || rc == -ENOSPC)
			continue;
		KVS_CHECK_OK(rc);
		if (s.state == KVS_SLOT_READY) {
			lockfree += (atomic_load(&c->me->pins[s.pin]) & KVS_PIN_READER) != 0;
			KVS_CHECK_OK(kvs_slot_data(c, &s, &p));
			for (int pass = 0; pass < 2; pass++) {
				if (!core_verify(p, cfg.slot_bytes, n, 0))
					KVS_FAILF("reader %u: key %llu: other bytes under a pin (pass %d)",
						  id, (unsigned long long)n, pass);
				sched_yield();
			}
			verified++;
		}
		KVS_CHECK_OK(kvs_slot_release(c, &s));
	}
	printf("  reader %u: %llu hits verified, %llu of them lock-free\n", id,
	       (unsigned long long)verified, (unsigned long long)lockfree);
	if (out) {
		atomic_fetch_add(&out->lockfree, lockfree);
		atomic_fetch_add(&out->verified, verified);
	}
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* A writer: gets of random keys; owns the misses (evicting), fills them with
 * the key's bytes and publishes. */
static kvs_test_rc race_writer(const char *uid, unsigned id, uint64_t until_ns)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	unsigned seed = 9100u + id;

	KVS_TRY(race_open(uid, id, &cfg, &c));
	while (kvs_now_ns() < until_ns) {
		uint64_t n = rand_r(&seed) % RACE_KEYS;
		struct kvs_block_id k = core_block(n);
		struct kvs_slot s;
		int rc = kvs_cache_get(c, &k, 0, KVS_GET_BYPASS_HIT * (rand_r(&seed) % 8 == 0), &s);

		if (rc == -ENOSPC)
			continue;
		KVS_CHECK_OK(rc);
		if (s.flags & KVS_SLOT_OWNER)
			KVS_TRY(core_fill_publish(c, &s, n, 0));
		KVS_CHECK_OK(kvs_slot_release(c, &s));
	}
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

struct race_arg {
	const char *uid;
	unsigned id;
	uint64_t until_ns;
	struct race_out *out;
};

static kvs_test_rc reader_fork(void *arg)
{
	struct race_arg *a = arg;

	return race_reader(a->uid, a->id, a->until_ns, a->out);
}

static kvs_test_rc writer_fork(void *arg)
{
	struct race_arg *a = arg;

	return race_writer(a->uid, a->id, a->until_ns);
}

/* exec'd: --child race_reader <uid> <id> <until_ns> */
static kvs_test_rc reader_exec(int argc, char **argv)
{
	if (argc != 3)
		KVS_FAILF("usage: --child race_reader <uid> <id> <until_ns>");
	return race_reader(argv[0], (unsigned)atoi(argv[1]), strtoull(argv[2], NULL, 10), NULL);
}

static kvs_test_rc test_race(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_stats st;
	struct race_out *out;
	struct race_arg args[RACE_READERS + RACE_WRITERS];
	pid_t pids[RACE_READERS + RACE_WRITERS];
	char ids[RACE_READERS][16], until[32];
	uint64_t until_ns = kvs_deadline_after((uint64_t)RACE_MS * MS);
	int bad = 0;

	out = mmap(NULL, sizeof(*out), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	KVS_CHECK(out != MAP_FAILED);
	pin_cfg(&cfg, "race", NULL, RACE_SLOTS);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	printf("%d readers (half exec'd), %d writers, %u keys in %u slots, %u ms\n", RACE_READERS,
	       RACE_WRITERS, RACE_KEYS, RACE_SLOTS, RACE_MS);
	snprintf(until, sizeof(until), "%llu", (unsigned long long)until_ns);
	for (unsigned i = 0; i < RACE_READERS + RACE_WRITERS; i++) {
		args[i] = (struct race_arg){ cfg.unique_id, i + 1, until_ns, out };
		if (i >= RACE_READERS) {
			pids[i] = kvs_test_fork(writer_fork, &args[i]);
		} else if (i % 2) {
			snprintf(ids[i], sizeof(ids[i]), "%u", i + 1);
			pids[i] = kvs_test_spawn("race_reader",
						 (const char *const[]){ cfg.unique_id, ids[i], until, NULL });
		} else {
			pids[i] = kvs_test_fork(reader_fork, &args[i]);
		}
		KVS_CHECK(pids[i] > 0);
	}
	for (unsigned i = 0; i < RACE_READERS + RACE_WRITERS; i++) {
		int rc = kvs_test_reap(pids[i], (int)RACE_MS + 30000);

		if (rc != 0) {
			fprintf(stderr, "process %u exited %d\n", i, rc);
			bad++;
		}
	}
	KVS_CHECK_EQ(bad, 0);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	printf("forked readers: %llu hits verified, %llu lock-free; evictions %llu\n",
	       (unsigned long long)atomic_load(&out->verified),
	       (unsigned long long)atomic_load(&out->lockfree), (unsigned long long)st.evictions);
	/* it raced: hits pinned lock-free, slots evicted under the readers */
	KVS_CHECK(atomic_load(&out->lockfree) > 100);
	KVS_CHECK(st.evictions > 100);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	for (uint32_t i = 0; i < RACE_SLOTS; i++)
		KVS_CHECK_EQ(readers_of(c, i), 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	munmap(out, sizeof(*out));
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "lockfree_hit", test_lockfree_hit },
	{ "readers_kept", test_readers_kept },
	{ "absent_unlocked", test_absent_unlocked },
	{ "reader_killed", test_reader_killed },
	{ "race", test_race },
};

static const struct kvs_test_child children[] = {
	{ "reader", reader_child },
	{ "race_reader", reader_exec },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
