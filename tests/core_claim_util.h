/*
 * tests/core_claim_util.h — what the dump record's tests (core_record.c: the
 * DIRTY slots, CLOCK's respect for them, removal and adoption, the backend
 * binding) and the claim table's (core_claim.c) share: a cache on a unique id
 * through the core API, DIRTY and READY shards made and checked, scans, takes
 * and looks with their expected results, and forked ranks that signal the
 * parent and wait to be killed -9.
 */
#ifndef KVS_TESTS_CORE_CLAIM_UTIL_H
#define KVS_TESTS_CORE_CLAIM_UTIL_H

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull
#define SHARDS 4u
/* A protection that outlives every case. */
#define LONG_NS (120000 * MS)

static inline struct kvs_cache *open_or_null(struct kvs_cache_config *cfg)
{
	struct kvs_cache *c = NULL;
	int rc = kvs_cache_open(cfg, &c);

	if (rc)
		fprintf(stderr, "kvs_cache_open(%s): %s\n", cfg->unique_id, kvs_strerror(rc));
	return c;
}

/* 16 slots of 4 shards: 4 whole blocks, so a claim table of KVS_CLAIMS_MIN. */
static inline void claim_cfg(struct kvs_cache_config *cfg, const char *tag, const char *uid)
{
	core_cfg(cfg, tag, 16, 4096, SHARDS);
	cfg->local_rank_size = 4;
	if (uid)
		snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
}

/* Let the clock pass t (STORED records expire by the clock). */
static inline void sleep_past(uint64_t t)
{
	struct timespec ts = kvs_ns_to_timespec(t + 1);

	while (kvs_now_ns() <= t)
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static inline uint64_t hint(struct kvs_cache *c)
{
	return atomic_load(&c->hdr->dirty_hint);
}

static inline uint64_t slot_until(struct kvs_cache *c, uint32_t i)
{
	return atomic_load(&c->slots[i].dirty_until_ns);
}

static inline uint64_t holder_of(struct kvs_cache *c)
{
	return kvs_core_filler((uint32_t)c->rank_idx, c->rank_epoch);
}

static inline uint32_t bell(_Atomic uint32_t *w)
{
	return atomic_load(w) & KVS_WAIT_VALUE_MASK;
}

/* Get shard s of block n as its owner, fill it and publish it DIRTY until
 * until_ns (what a dump's gather does); the slot stays pinned. */
static inline kvs_test_rc dirty_shard(struct kvs_cache *c, uint64_t n, uint32_t s,
				      uint64_t until_ns, struct kvs_slot *slot)
{
	struct kvs_block_id k = core_block(n);
	uint64_t h;
	void *p;

	KVS_CHECK_OK(kvs_core_get(c, &k, s, 0, slot));
	KVS_CHECK_EQ(slot->flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_data(c, slot, &p));
	core_fill(p, c->slot_bytes, n, s);
	h = hint(c);
	KVS_CHECK_OK(kvs_core_slot_publish_dirty(c, slot, until_ns));
	KVS_CHECK_EQ(hint(c), h + 1);
	KVS_CHECK_EQ(kvs_core_slot_state(c, slot), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(slot_until(c, slot->index), until_ns);
	return KVS_TEST_PASS;
}

/* Get shard s of block n as its owner, fill it and publish it READY (pinned). */
static inline kvs_test_rc ready_shard(struct kvs_cache *c, uint64_t n, uint32_t s,
				      struct kvs_slot *slot)
{
	struct kvs_block_id k = core_block(n);
	void *p;

	KVS_CHECK_OK(kvs_core_get(c, &k, s, 0, slot));
	KVS_CHECK_EQ(slot->flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_data(c, slot, &p));
	core_fill(p, c->slot_bytes, n, s);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, slot));
	return KVS_TEST_PASS;
}

/* Is (block n, shard s) resident with its bytes? */
static inline kvs_test_rc verify_shard(struct kvs_cache *c, uint64_t n, uint32_t s)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_slot sl;
	void *p;

	KVS_CHECK_OK(kvs_cache_get(c, &k, s, 0, &sl));
	KVS_CHECK_EQ(sl.flags, 0);
	KVS_CHECK_EQ(sl.state, KVS_SLOT_READY);
	KVS_CHECK_OK(kvs_slot_data(c, &sl, &p));
	KVS_CHECK(core_verify(p, c->slot_bytes, n, s));
	KVS_CHECK_OK(kvs_slot_release(c, &sl));
	return KVS_TEST_PASS;
}

static inline kvs_test_rc scan_expect(struct kvs_cache *c, uint64_t n, uint64_t now, bool full,
				      uint32_t dirty, uint32_t ready, uint32_t missing, bool fresh,
				      uint64_t until, struct kvs_dirty_shard *shards)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_dirty_scan sc;

	memset(&sc, 0xa5, sizeof(sc));
	KVS_CHECK_OK(kvs_core_dirty_scan(c, &k, now, full, &sc, shards));
	KVS_CHECK_EQ(sc.dirty, dirty);
	KVS_CHECK_EQ(sc.ready, ready);
	KVS_CHECK_EQ(sc.missing, missing);
	KVS_CHECK_EQ(sc.fresh, fresh);
	KVS_CHECK_EQ(sc.until_ns, until);
	return KVS_TEST_PASS;
}

/* take, expecting want (1, 0, -errno). */
static inline kvs_test_rc take_expect(struct kvs_cache *c, uint64_t n, uint32_t st, int want,
				      struct kvs_claim_ref *ref, struct kvs_claim_view *v)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_claim_ref r;
	struct kvs_claim_view w;

	if (want < 0)
		KVS_CHECK_ERR(kvs_core_claim_take(c, &k, st, ref ? ref : &r, v ? v : &w), want);
	else
		KVS_CHECK_EQ(kvs_core_claim_take(c, &k, st, ref ? ref : &r, v ? v : &w), want);
	return KVS_TEST_PASS;
}

/* look, expecting state want (and, when held, holder h and its liveness). */
static inline kvs_test_rc look_expect(struct kvs_cache *c, uint64_t n, uint32_t want, uint64_t h,
				      bool alive)
{
	struct kvs_block_id k = core_block(n);
	struct kvs_claim_view v;

	KVS_CHECK_ERR(kvs_core_claim_look(c, &k, &v), 0);
	KVS_CHECK_EQ(v.state, want);
	if (want == KVS_SHM_CLAIM_WRITING || want == KVS_SHM_CLAIM_DROPPING) {
		KVS_CHECK_EQ(v.holder, h);
		KVS_CHECK_EQ(v.holder_alive, alive);
	} else {
		KVS_CHECK(!v.holder_alive);
	}
	return KVS_TEST_PASS;
}

/* Read len bytes a child writes on fd (it says it is where the parent wants
 * it, and what it made). */
static inline kvs_test_rc wait_bytes(int fd, void *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, 20000) != 1 || read(fd, buf, len) != (ssize_t)len)
		KVS_FAILF("no word from the child within 20 s");
	return KVS_TEST_PASS;
}

/* ---- children: a rank of another process ---- */

#define REPAIR_LIVE 5u

struct child_arg {
	const char *uid;
	struct kvs_claim_ref live[REPAIR_LIVE]; /* lock_repair: the parent's claims */
	uint64_t until[SHARDS];                 /* removal_guard: DIRTY shards' protection */
	int up_w, up_r, hold_r, hold_w; /* up: child -> parent; hold: never written */
};

/* Tell the parent we are there (len bytes of buf), then block until killed
 * (bounded: the parent kills us well within 30 s, and PR_SET_PDEATHSIG covers
 * its death). */
static inline kvs_test_rc child_signal_and_block(const struct child_arg *ca, const void *buf,
						 size_t len)
{
	struct pollfd p = { .fd = ca->hold_r, .events = POLLIN };

	KVS_CHECK_EQ(write(ca->up_w, buf, len), (ssize_t)len);
	poll(&p, 1, 30000);
	KVS_FAILF("child not killed within 30 s");
}

static inline kvs_test_rc child_open(const struct child_arg *ca, struct kvs_cache **c)
{
	struct kvs_cache_config cfg;

	close(ca->up_r);
	close(ca->hold_w);
	claim_cfg(&cfg, "child", ca->uid);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, c), 0);
	return KVS_TEST_PASS;
}

static inline int child_pipes(struct child_arg *ca)
{
	int up[2], hold[2];

	if (pipe(up))
		return -errno;
	if (pipe(hold)) {
		close(up[0]);
		close(up[1]);
		return -errno;
	}
	ca->up_r = up[0];
	ca->up_w = up[1];
	ca->hold_r = hold[0];
	ca->hold_w = hold[1];
	return 0;
}

/* The parent's side after the fork: its ends only. */
static inline void parent_ends(struct child_arg *ca)
{
	close(ca->up_w);
	close(ca->hold_r);
}

static inline void parent_close(struct child_arg *ca)
{
	close(ca->up_r);
	close(ca->hold_w);
}

/* Fork fn, wait for its word (len bytes into buf), kill it -9 and reap it. */
static inline kvs_test_rc run_killed(kvs_test_rc (*fn)(void *), struct child_arg *ca, void *buf,
				     size_t len)
{
	pid_t pid;
	kvs_test_rc rc;

	KVS_CHECK_OK(child_pipes(ca));
	pid = kvs_test_fork(fn, ca);
	parent_ends(ca);
	if (pid <= 0) {
		parent_close(ca);
		KVS_FAILF("fork: %s", strerror(errno));
	}
	rc = wait_bytes(ca->up_r, buf, len);
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	parent_close(ca);
	return rc;
}

#endif
