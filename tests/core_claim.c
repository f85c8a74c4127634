/*
 * tests/core_claim.c — the dump record (the DIRTY slots: core/slot.c's
 * kvs_core_dirty_*), CLOCK's respect for it (core/clock.c), the claim table
 * (core/claim.c), the cache's removal guard and adoption of the record
 * (core/segment.c) and the backend binding (core/header.c), through the core
 * API: real caches on unique ids, rank handles (device_id 0), and real
 * processes where a process matters (a rank killed -9 holding claims or DIRTY
 * slots, the claim table's lock holder killed -9 mid-edit, a binder exec'd so
 * that its segment sits at another address).
 *
 *   dirty_record   publish_dirty records until_ns and raises dirty_hint (a
 *                  joiner's publish is -EPERM and leaves the hint); readers see
 *                  READY, the core DIRTY; the filler rank is the gatherer's
 *                  (either rank's).  scan counts dirty / ready / missing
 *                  (LOADING and absent are missing) from the last shard down,
 *                  stops at the first missing one unless full, reports each
 *                  slot (index, generation), fresh exactly while a protection
 *                  reaches past now_ns, and the latest until_ns.  hold (a
 *                  peer's handle) extends the protection and never shortens
 *                  it; with redirty a READY slot becomes DIRTY (hint + 1),
 *                  without it stays READY; LOADING is left alone; a stale
 *                  (released) handle is -ESTALE.  clean is generation-checked
 *                  (a wrong generation: 0, still DIRTY), READY after, hint - 1,
 *                  a second clean 0.  drop keeps a slot protected until
 *                  before_ns or later (the exact boundary), drops one protected
 *                  only before it, and any with before_ns 0: FAILED with the
 *                  error (look reads it), hint - 1.  peek, dirty_key, look
 *                  follow the state; out-of-range indices are -EINVAL / false /
 *                  -1; look is -ESTALE for another generation, another slot,
 *                  and once the cleaned slot was evicted and re-keyed by other
 *                  gets -- while every DIRTY slot survives those gets.
 *   clock_dirty    a cache all DIRTY (unpinned, half of them protected only
 *                  until long ago): every get of another key is -ENOSPC (counted);
 *                  after half are cleaned, (weight max + 1) x slots gets evict
 *                  every READY one and never a DIRTY one; after the others are
 *                  cleaned or dropped they are evicted too.
 *   claims         take: -EINVAL for FREE or no state; WRITING / DROPPING 1,
 *                  then 0 for any other take (another rank, the holder itself,
 *                  any state) while the holder lives; look and peek say who
 *                  holds it; convert, end and retry by another rank change
 *                  nothing (-ESTALE, 0); retry records the error; end(0) of a
 *                  write leaves STORED (holder none) for KVS_CLAIM_GRACE_NS,
 *                  bumps the claims bell and the other ranks' bells (not its
 *                  own); WRITING / DROPPING takes within the grace return 0
 *                  saying STORED.  A STORED take is 0 with no claim (nothing
 *                  allocated), with a live holder's, and past the grace; within
 *                  it, 1: the record held WRITING (the same entry, generation +
 *                  1), and its end(0) a new grace.  Past the grace look says
 *                  FREE and a take reuses the entry; end(err) frees at once;
 *                  DROPPING converts to WRITING and back, and a drop's end(0)
 *                  stores nothing (FREE); claim_stored leaves a live holder's
 *                  claim alone and records STORED otherwise; designated, ring.
 *   table_full     KVS_CLAIMS_MIN live claims: the next block is -ENOSPC (an
 *                  existing one still found); an end(err) makes room at once, a
 *                  STORED one only past its grace (its entry reused); no live
 *                  claim is ever handed out (each still converts as its holder's).
 *   dead_holder    a forked rank takes WRITING, DROPPING and WRITING claims and
 *                  is killed -9: look says holder_alive false; the survivor's
 *                  take returns 1 (taken over: the same entry, generation + 1,
 *                  the view naming the dead holder), a dead dropper's block
 *                  taken as a write, never by a STORED take; with the table
 *                  full, the dead holder's last claim is the entry a new block
 *                  gets.
 *   lock_repair    the checker finds a free list naming a live claim; a forked
 *                  rank holds claims_lock (kvs_core_test_hold_claims), cuts a
 *                  chain, points the free list at a live claim, scribbles a free
 *                  entry's state, and is killed -9: the next take repairs
 *                  (counted), hands out no live entry, claims_check finds
 *                  nothing, every live claim is still its holder's, and exactly
 *                  the free entries can be taken before -ENOSPC.
 *   removal_guard  a forked rank dirties 3 slots (one pinned), leaves a READY
 *                  and a LOADING one, the hint too high and a sweep not due, and
 *                  is killed -9: inspect counts 3 DIRTY, kvs_cache_remove is
 *                  -ENOTEMPTY; the next open adopts: hint exactly 3, sweep due
 *                  (0), each DIRTY slot kept in its residency with its until_ns,
 *                  the READY one READY, the LOADING one gone, the backend still
 *                  bound; the last rank's clean close keeps the cache (files
 *                  there, inspect 3); reopened, one cleaned, closed: kept with 2;
 *                  kvs_cache_remove with KVS_CACHE_DISCARD_DIRTY removes it.  A
 *                  cache whose DIRTY slots were all cleaned is removed by its
 *                  last close.
 *   backend_bind   the first id binds; the same id again 0 (any rank); another
 *                  id -KVS_ECONFIG with theirs naming the first (cut to len); a
 *                  hash with no text to match (a binder killed between the two)
 *                  is named by its hash; after an exec'd binder is killed -9 and
 *                  its cache (no DIRTY slot) adopted, a new id binds.
 *
 * Time: STORED records expire by CLOCK_MONOTONIC deadlines, so the grace cases
 * wait for the clock to pass one (KVS_CLAIM_GRACE_NS, 1 s); processes are
 * synchronised by pipes, read with poll timeouts.
 */
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

static struct kvs_cache *open_or_null(struct kvs_cache_config *cfg)
{
	struct kvs_cache *c = NULL;
	int rc = kvs_cache_open(cfg, &c);

	if (rc)
		fprintf(stderr, "kvs_cache_open(%s): %s\n", cfg->unique_id, kvs_strerror(rc));
	return c;
}

/* 16 slots of 4 shards: 4 whole blocks, so a claim table of KVS_CLAIMS_MIN. */
static void claim_cfg(struct kvs_cache_config *cfg, const char *tag, const char *uid)
{
	core_cfg(cfg, tag, 16, 4096, SHARDS);
	cfg->local_rank_size = 4;
	if (uid)
		snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
}

/* Let the clock pass t (STORED records expire by the clock). */
static void sleep_past(uint64_t t)
{
	struct timespec ts = kvs_ns_to_timespec(t + 1);

	while (kvs_now_ns() <= t)
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static uint64_t hint(struct kvs_cache *c)
{
	return atomic_load(&c->hdr->dirty_hint);
}

static uint64_t slot_until(struct kvs_cache *c, uint32_t i)
{
	return atomic_load(&c->slots[i].dirty_until_ns);
}

static uint64_t holder_of(struct kvs_cache *c)
{
	return kvs_core_filler((uint32_t)c->rank_idx, c->rank_epoch);
}

static uint32_t bell(_Atomic uint32_t *w)
{
	return atomic_load(w) & KVS_WAIT_VALUE_MASK;
}

/* Get shard s of block n as its owner, fill it and publish it DIRTY until
 * until_ns (what a dump's gather does); the slot stays pinned. */
static kvs_test_rc dirty_shard(struct kvs_cache *c, uint64_t n, uint32_t s, uint64_t until_ns,
			       struct kvs_slot *slot)
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
static kvs_test_rc ready_shard(struct kvs_cache *c, uint64_t n, uint32_t s, struct kvs_slot *slot)
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
static kvs_test_rc verify_shard(struct kvs_cache *c, uint64_t n, uint32_t s)
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

static kvs_test_rc scan_expect(struct kvs_cache *c, uint64_t n, uint64_t now, bool full,
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
static kvs_test_rc take_expect(struct kvs_cache *c, uint64_t n, uint32_t st, int want,
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
static kvs_test_rc look_expect(struct kvs_cache *c, uint64_t n, uint32_t want, uint64_t h,
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
static kvs_test_rc wait_bytes(int fd, void *buf, size_t len)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	if (poll(&p, 1, 20000) != 1 || read(fd, buf, len) != (ssize_t)len)
		KVS_FAILF("no word from the child within 20 s");
	return KVS_TEST_PASS;
}

/* ---- dirty_record ---- */

static kvs_test_rc test_dirty_record(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a, *b;
	struct kvs_slot s1[SHARDS], s2[SHARDS], j, old;
	struct kvs_dirty_shard sh[SHARDS];
	struct kvs_block_id k1 = core_block(1), k2 = core_block(2), kb;
	struct kvs_cache_stats st;
	uint64_t now = kvs_now_ns(), u[SHARDS], u0;
	uint32_t shard, i, g, i0, g0, i1, g1;
	int32_t err;

	claim_cfg(&cfg, "record", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK((b = open_or_null(&cfg)) != NULL); /* a second rank entry */
	KVS_CHECK_EQ(hint(a), 0);

	/* Block 1 whole, DIRTY, each shard protected until its own time (shard 1
	 * the latest: the scan reports the latest, not the last). */
	for (uint32_t s = 0; s < SHARDS; s++) {
		u[s] = now + LONG_NS + (s == 1 ? 50 : s) * MS;
		KVS_TRY(dirty_shard(a, 1, s, u[s], &s1[s]));
		KVS_CHECK_EQ(hint(a), s + 1);
		KVS_CHECK_EQ(kvs_core_slot_filler_rank(a, s1[s].index), a->rank_idx);
	}
	/* Readers see READY, the core DIRTY; only the owner publishes. */
	KVS_CHECK_OK(kvs_cache_get(b, &k1, 0, 0, &j));
	KVS_CHECK_EQ(j.flags, 0);
	KVS_CHECK_EQ(j.state, KVS_SLOT_READY);
	KVS_CHECK_EQ(kvs_slot_state(b, &j), KVS_SLOT_READY);
	KVS_CHECK_EQ(kvs_core_slot_state(b, &j), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_ERR(kvs_core_slot_publish_dirty(b, &j, now), -EPERM);
	KVS_CHECK_EQ(hint(a), SHARDS); /* a refused publish gives its raise back */
	KVS_CHECK_OK(kvs_cache_stats(a, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.slots_dirty, SHARDS);

	/* scan: every shard, its slot, fresh exactly while until > now. */
	memset(sh, 0xff, sizeof(sh));
	KVS_TRY(scan_expect(a, 1, now, true, SHARDS, 0, 0, true, u[1], sh));
	for (uint32_t s = 0; s < SHARDS; s++) {
		KVS_CHECK_EQ(sh[s].index, s1[s].index);
		KVS_CHECK_EQ(sh[s].generation, s1[s].generation);
	}
	KVS_TRY(scan_expect(a, 1, u[1] - 1, true, SHARDS, 0, 0, true, u[1], NULL));
	KVS_TRY(scan_expect(a, 1, u[1], true, SHARDS, 0, 0, false, u[1], NULL));

	/* hold by a peer's handle: extends the protection, never shortens it;
	 * redirty of a DIRTY slot changes nothing. */
	u0 = u[1] + 100 * MS;
	KVS_CHECK_EQ(kvs_core_dirty_hold(b, &j, u0, false), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(slot_until(a, s1[0].index), u0);
	KVS_CHECK_EQ(kvs_core_dirty_hold(b, &j, now, true), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(slot_until(a, s1[0].index), u0);
	KVS_CHECK_EQ(hint(a), SHARDS);
	KVS_TRY(scan_expect(a, 1, now, true, SHARDS, 0, 0, true, u0, NULL));
	old = j;
	KVS_CHECK_OK(kvs_slot_release(b, &j));
	KVS_CHECK_ERR(kvs_core_dirty_hold(b, &old, u0 + MS, false), -ESTALE); /* a stale handle */
	KVS_CHECK_EQ(slot_until(a, s1[0].index), u0);

	/* Block 2: shard 3 READY, 2 LOADING (ours), 1 DIRTY protected until long
	 * ago, 0 absent.  From the last shard down; without full, the scan stops
	 * at the LOADING one. */
	KVS_TRY(ready_shard(a, 2, 3, &s2[3]));
	KVS_CHECK_OK(kvs_core_get(a, &k2, 2, 0, &s2[2]));
	KVS_CHECK_EQ(s2[2].flags, KVS_SLOT_OWNER);
	KVS_TRY(dirty_shard(b, 2, 1, 1, &s2[1])); /* gathered by the other rank */
	KVS_CHECK_EQ(kvs_core_slot_filler_rank(a, s2[1].index), b->rank_idx);
	KVS_CHECK(b->rank_idx != a->rank_idx);
	KVS_TRY(scan_expect(a, 2, now, true, 1, 1, 2, false, 1, NULL));
	KVS_TRY(scan_expect(a, 2, now, false, 0, 1, 1, false, 0, NULL));
	/* hold of READY: DIRTY only with redirty (part of the block's record
	 * again); of LOADING: nothing. */
	KVS_CHECK_EQ(kvs_core_dirty_hold(a, &s2[3], u0, false), KVS_SHM_SLOT_READY);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s2[3]), KVS_SHM_SLOT_READY);
	KVS_CHECK_EQ(hint(a), SHARDS + 1);
	KVS_CHECK_EQ(kvs_core_dirty_hold(a, &s2[3], u0, true), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s2[3]), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(slot_until(a, s2[3].index), u0);
	KVS_CHECK_EQ(hint(a), SHARDS + 2);
	KVS_CHECK_EQ(kvs_core_dirty_hold(a, &s2[2], u0, true), KVS_SHM_SLOT_LOADING);
	KVS_CHECK_EQ(hint(a), SHARDS + 2);
	KVS_TRY(scan_expect(a, 2, now, true, 2, 0, 2, true, u0, NULL));
	KVS_TRY(scan_expect(a, 2, now, false, 1, 0, 1, true, u0, NULL));

	/* clean: only that residency of a DIRTY slot. */
	i = s1[0].index;
	g = s1[0].generation;
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, i, g + 1), 0);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[0]), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(hint(a), SHARDS + 2);
	KVS_CHECK_ERR(kvs_core_dirty_clean(a, a->slot_count, g), -EINVAL);
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, i, g), 1);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[0]), KVS_SHM_SLOT_READY);
	KVS_CHECK_EQ(slot_until(a, i), 0);
	KVS_CHECK_EQ(hint(a), SHARDS + 1);
	KVS_CHECK(!kvs_core_dirty_peek(a, i, g));
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, i, g), 0); /* READY: nothing to clean */
	KVS_CHECK_EQ(hint(a), SHARDS + 1);
	KVS_CHECK_EQ(kvs_core_dirty_look(a, &k1, 0, i, g, &err), KVS_SHM_SLOT_READY);

	/* drop: not while protected until before_ns or later (the boundary);
	 * then FAILED with the error. */
	i = s1[2].index;
	g = s1[2].generation;
	KVS_CHECK_EQ(slot_until(a, i), u[2]);
	KVS_CHECK_EQ(kvs_core_dirty_drop(a, i, g, -EIO, u[2]), 0);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[2]), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_EQ(kvs_core_dirty_drop(a, i, g + 1, -EIO, 0), 0);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[2]), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_ERR(kvs_core_dirty_drop(a, a->slot_count, g, -EIO, 0), -EINVAL);
	KVS_CHECK_EQ(hint(a), SHARDS + 1);
	KVS_CHECK_EQ(kvs_core_dirty_drop(a, i, g, -EIO, u[2] + 1), 1);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[2]), KVS_SHM_SLOT_FAILED);
	KVS_CHECK_EQ(s1[2].error, -EIO);
	KVS_CHECK_EQ(slot_until(a, i), 0);
	KVS_CHECK_EQ(hint(a), SHARDS);
	err = 0;
	KVS_CHECK_EQ(kvs_core_dirty_look(a, &k1, 2, i, g, &err), KVS_SHM_SLOT_FAILED);
	KVS_CHECK_EQ(err, -EIO);
	KVS_CHECK_EQ(kvs_core_dirty_drop(a, i, g, -EIO, 0), 0); /* FAILED already */
	/* before_ns 0: dropped whatever its protection. */
	KVS_CHECK_EQ(kvs_core_dirty_drop(a, s1[3].index, s1[3].generation, -ECANCELED, 0), 1);
	KVS_CHECK_EQ(kvs_core_slot_state(a, &s1[3]), KVS_SHM_SLOT_FAILED);
	KVS_CHECK_EQ(s1[3].error, -ECANCELED);
	KVS_CHECK_EQ(hint(a), SHARDS - 1);
	KVS_TRY(scan_expect(a, 1, now, true, 1, 1, 2, true, u[1], NULL));
	KVS_TRY(scan_expect(a, 1, now, false, 0, 0, 1, false, 0, NULL));

	/* peek (lock-free), dirty_key (under the lock), look. */
	i1 = s1[1].index;
	g1 = s1[1].generation;
	KVS_CHECK(kvs_core_dirty_peek(a, i1, g1));
	KVS_CHECK(!kvs_core_dirty_peek(a, i1, g1 + 1));
	KVS_CHECK(!kvs_core_dirty_peek(a, s1[2].index, s1[2].generation)); /* FAILED */
	KVS_CHECK(!kvs_core_dirty_peek(a, a->slot_count, 0));
	memset(&kb, 0, sizeof(kb));
	shard = UINT32_MAX;
	KVS_CHECK_EQ(kvs_core_dirty_key(a, i1, &kb, &shard), 1);
	KVS_CHECK(memcmp(&kb, &k1, sizeof(kb)) == 0);
	KVS_CHECK_EQ(shard, 1);
	KVS_CHECK_EQ(kvs_core_dirty_key(a, s1[0].index, &kb, &shard), 0); /* READY */
	KVS_CHECK_EQ(kvs_core_dirty_key(a, s1[2].index, &kb, &shard), 0); /* FAILED */
	KVS_CHECK_ERR(kvs_core_dirty_key(a, a->slot_count, &kb, &shard), -EINVAL);
	KVS_CHECK_EQ(kvs_core_slot_filler_rank(a, a->slot_count), -1);
	KVS_CHECK_EQ(kvs_core_dirty_look(a, &k1, 1, i1, g1, &err), KVS_SHM_SLOT_DIRTY);
	KVS_CHECK_ERR(kvs_core_dirty_look(a, &k1, 1, i1, g1 + 1, &err), -ESTALE);
	KVS_CHECK_ERR(kvs_core_dirty_look(a, &k1, 1, s1[0].index, s1[0].generation, &err), -ESTALE);

	/* Re-keyed: the cleaned slot of shard 0, unpinned, goes to other keys;
	 * the DIRTY slots (block 1 shard 1, block 2 shards 1 and 3) never. */
	i0 = s1[0].index;
	g0 = s1[0].generation;
	for (uint32_t s = 0; s < SHARDS; s++)
		KVS_CHECK_OK(kvs_slot_release(a, &s1[s]));
	for (uint32_t s = 1; s < SHARDS; s++)
		KVS_CHECK_OK(kvs_slot_release(s == 1 ? b : a, &s2[s]));
	for (uint64_t n = 100; n < 100 + (KVS_CLOCK_WEIGHT_MAX + 1) * a->slot_count &&
	     kvs_core_dirty_look(a, &k1, 0, i0, g0, &err) != -ESTALE; n++)
		KVS_TRY(core_put(a, n));
	KVS_CHECK_ERR(kvs_core_dirty_look(a, &k1, 0, i0, g0, &err), -ESTALE);
	KVS_CHECK(!kvs_core_dirty_peek(a, i0, g0));
	KVS_CHECK_EQ(kvs_core_dirty_key(a, i0, &kb, &shard), 0);
	KVS_CHECK(kvs_core_dirty_peek(a, i1, g1));
	KVS_CHECK(kvs_core_dirty_peek(a, sh[1].index, sh[1].generation));
	KVS_TRY(scan_expect(a, 2, now, true, 2, 0, 2, true, u0, sh));
	KVS_CHECK_EQ(hint(a), 3);
	KVS_TRY(verify_shard(a, 1, 1));
	KVS_TRY(verify_shard(a, 2, 1));
	KVS_TRY(verify_shard(a, 2, 3));
	KVS_CHECK_OK(kvs_cache_check(a));

	/* Written: cleaned, nothing left DIRTY, the last close removes it. */
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, i1, g1), 1);
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, sh[1].index, sh[1].generation), 1);
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, sh[3].index, sh[3].generation), 1);
	KVS_CHECK_EQ(hint(a), 0);
	kvs_cache_close(b);
	kvs_cache_close(a);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* ---- clock_dirty ---- */

#define CLOCK_SLOTS 16u

static kvs_test_rc test_clock_dirty(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_slot s;
	struct kvs_dirty_shard d[CLOCK_SLOTS];
	struct kvs_block_id k = core_block(1000);
	uint64_t now = kvs_now_ns(), enospc, ev, passes = (KVS_CLOCK_WEIGHT_MAX + 1) * CLOCK_SLOTS;

	core_cfg(&cfg, "clock", CLOCK_SLOTS, 4096, 1);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	/* Every slot DIRTY and unpinned; 0..7 protected only until long ago. */
	for (uint32_t n = 0; n < CLOCK_SLOTS; n++) {
		KVS_TRY(dirty_shard(a, n, 0, n < CLOCK_SLOTS / 2 ? 1 : now + LONG_NS, &s));
		d[n] = (struct kvs_dirty_shard){ s.index, s.generation };
		KVS_CHECK_OK(kvs_slot_release(a, &s));
	}
	KVS_CHECK_EQ(hint(a), CLOCK_SLOTS);
	enospc = atomic_load(&a->me->stats.enospc);
	ev = atomic_load(&a->me->stats.evictions);
	KVS_CHECK_ERR(kvs_cache_get(a, &k, 0, 0, &s), -ENOSPC);
	KVS_CHECK_ERR(kvs_cache_get(a, &k, 0, KVS_GET_ALLOW_RESERVED, &s), -ENOSPC);
	KVS_CHECK_EQ(atomic_load(&a->me->stats.enospc), enospc + 2);
	KVS_CHECK_EQ(atomic_load(&a->me->stats.evictions), ev);
	KVS_CHECK_EQ(kvs_cache_exists(a, &k, 0), 0);
	for (uint32_t n = 0; n < CLOCK_SLOTS; n++) {
		KVS_CHECK(kvs_core_dirty_peek(a, d[n].index, d[n].generation));
		KVS_TRY(verify_shard(a, n, 0));
	}

	/* 8..15 written (READY): evicted by new keys; 0..7 never. */
	for (uint32_t n = CLOCK_SLOTS / 2; n < CLOCK_SLOTS; n++)
		KVS_CHECK_EQ(kvs_core_dirty_clean(a, d[n].index, d[n].generation), 1);
	for (uint64_t n = 2000; n < 2000 + passes; n++) {
		KVS_TRY(core_put(a, n));
		for (uint32_t m = 0; m < CLOCK_SLOTS / 2; m++)
			KVS_CHECK(kvs_core_dirty_peek(a, d[m].index, d[m].generation));
	}
	for (uint32_t n = 0; n < CLOCK_SLOTS; n++) {
		struct kvs_block_id kn = core_block(n);

		KVS_CHECK_EQ(kvs_cache_exists(a, &kn, 0), n < CLOCK_SLOTS / 2);
	}
	KVS_CHECK(atomic_load(&a->me->stats.evictions) >= ev + passes - CLOCK_SLOTS / 2);
	KVS_CHECK_EQ(hint(a), CLOCK_SLOTS / 2);

	/* 0..3 written, 4..7 dropped: evictable now, and evicted. */
	for (uint32_t n = 0; n < CLOCK_SLOTS / 2; n++)
		KVS_CHECK_EQ(n < CLOCK_SLOTS / 4 ? kvs_core_dirty_clean(a, d[n].index, d[n].generation)
						 : kvs_core_dirty_drop(a, d[n].index, d[n].generation,
								       -EIO, now),
			     1);
	KVS_CHECK_EQ(hint(a), 0);
	for (uint64_t n = 3000; n < 3000 + passes; n++)
		KVS_TRY(core_put(a, n));
	for (uint32_t n = 0; n < CLOCK_SLOTS / 2; n++) {
		struct kvs_block_id kn = core_block(n);

		KVS_CHECK_EQ(kvs_cache_exists(a, &kn, 0), 0);
		KVS_CHECK(!kvs_core_dirty_peek(a, d[n].index, d[n].generation));
	}
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* ---- claims ---- */

static kvs_test_rc test_claims(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a, *b;
	struct kvs_claim_ref ra, rb, rd, r3, rs;
	struct kvs_claim_view v;
	struct kvs_block_id k = core_block(30), k3 = core_block(32);
	uint64_t ha, hb, t0, t1, exp;
	uint32_t cb, bella, bellb, seen = 0;

	claim_cfg(&cfg, "claims", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK((b = open_or_null(&cfg)) != NULL);
	ha = holder_of(a);
	hb = holder_of(b);
	KVS_CHECK(ha != hb);

	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_FREE, -EINVAL, NULL, NULL));
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_STORED + 1, -EINVAL, NULL, NULL));
	/* STORED takes only a STORED record: none here, and nothing made. */
	cb = a->hdr->claims_free;
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_STORED, 0, &ra, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_FREE);
	KVS_CHECK_EQ(a->hdr->claims_free, cb);
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_CHECK(!kvs_core_claim_peek(b, &k, KVS_SHM_CLAIM_WRITING));

	/* WRITING: the holder's, against every other take while it lives. */
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_WRITING, 1, &ra, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_FREE);
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_WRITING, ha, true));
	KVS_CHECK(kvs_core_claim_peek(b, &k, KVS_SHM_CLAIM_WRITING));
	KVS_CHECK(!kvs_core_claim_peek(b, &k, KVS_SHM_CLAIM_DROPPING));
	KVS_CHECK(!kvs_core_claim_peek(b, &k3, KVS_SHM_CLAIM_WRITING));
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_WRITING, 0, &rb, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_CHECK_EQ(v.holder, ha);
	KVS_CHECK(v.holder_alive);
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_DROPPING, 0, &rb, &v));
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_STORED, 0, &rb, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_WRITING, 0, &rb, &v)); /* not twice */
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_WRITING, ha, true));

	/* Only the holder acts on it. */
	KVS_CHECK_ERR(kvs_core_claim_convert(b, &ra, KVS_SHM_CLAIM_DROPPING), -ESTALE);
	KVS_CHECK_ERR(kvs_core_claim_end(b, &ra, -EIO), 0);
	kvs_core_claim_retry(b, &ra, -EIO);
	KVS_CHECK_OK(kvs_core_claim_look(b, &k, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_CHECK_EQ(v.holder, ha);
	KVS_CHECK_EQ(v.error, 0);
	bellb = bell(&b->ranks[b->rank_idx].bell);
	kvs_core_claim_retry(a, &ra, -EIO);
	KVS_CHECK_OK(kvs_core_claim_look(b, &k, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_CHECK_EQ(v.error, -EIO);
	KVS_CHECK_EQ(bell(&b->ranks[b->rank_idx].bell), (bellb + 1) & KVS_WAIT_VALUE_MASK);

	/* end(0): STORED for the grace; the bells rung (not the ender's own). */
	cb = bell(&a->hdr->claims_bell);
	bella = bell(&a->ranks[a->rank_idx].bell);
	bellb = bell(&b->ranks[b->rank_idx].bell);
	t0 = kvs_now_ns();
	KVS_CHECK_ERR(kvs_core_claim_end(a, &ra, 0), 0);
	t1 = kvs_now_ns();
	KVS_CHECK_EQ(bell(&a->hdr->claims_bell), (cb + 1) & KVS_WAIT_VALUE_MASK);
	KVS_CHECK_EQ(bell(&b->ranks[b->rank_idx].bell), (bellb + 1) & KVS_WAIT_VALUE_MASK);
	KVS_CHECK_EQ(bell(&a->ranks[a->rank_idx].bell), bella);
	exp = atomic_load(&a->claims[ra.idx].expires_ns);
	KVS_CHECK(exp >= t0 + KVS_CLAIM_GRACE_NS && exp <= t1 + KVS_CLAIM_GRACE_NS);
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_STORED, 0, false));
	KVS_CHECK_OK(kvs_core_claim_look(b, &k, &v));
	KVS_CHECK_EQ(v.holder, KVS_FILLER_NONE);
	KVS_CHECK(kvs_core_claim_peek(b, &k, KVS_SHM_CLAIM_STORED));
	KVS_CHECK(!kvs_core_claim_peek(b, &k, KVS_SHM_CLAIM_WRITING));
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_WRITING, 0, &rb, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_STORED);
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_DROPPING, 0, &rb, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_STORED);
	KVS_CHECK_ERR(kvs_core_claim_convert(a, &ra, KVS_SHM_CLAIM_WRITING), -ESTALE);
	KVS_CHECK_ERR(kvs_core_claim_end(a, &ra, -EIO), 0); /* not ours any more: nothing */
	KVS_CHECK_OK(kvs_core_claim_stored(b, &k));
	KVS_CHECK_EQ(atomic_load(&a->claims[ra.idx].expires_ns), exp); /* recorded already */
	KVS_TRY(look_expect(a, 30, KVS_SHM_CLAIM_STORED, 0, false));

	/* A STORED take within the grace holds the record WRITING (to clean the
	 * stored block's slots); its end(0) stores it again, a new grace. */
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_STORED, 1, &rs, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_STORED);
	KVS_CHECK_EQ(rs.idx, ra.idx);
	KVS_CHECK_EQ(rs.gen, ra.gen + 1);
	KVS_TRY(look_expect(a, 30, KVS_SHM_CLAIM_WRITING, hb, true));
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_STORED, 0, &rb, &v)); /* a live holder's */
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_WRITING, 0, &rb, &v));
	t0 = kvs_now_ns();
	KVS_CHECK_ERR(kvs_core_claim_end(b, &rs, 0), 0);
	t1 = kvs_now_ns();
	KVS_TRY(look_expect(a, 30, KVS_SHM_CLAIM_STORED, 0, false));
	exp = atomic_load(&a->claims[ra.idx].expires_ns);
	KVS_CHECK(exp >= t0 + KVS_CLAIM_GRACE_NS && exp <= t1 + KVS_CLAIM_GRACE_NS);

	/* Past the grace it proves nothing: no STORED take, and the entry is
	 * taken again for a write. */
	sleep_past(exp);
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_STORED, 0, &rb, &v));
	KVS_TRY(look_expect(b, 30, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_TRY(take_expect(b, 30, KVS_SHM_CLAIM_WRITING, 1, &rb, &v));
	KVS_CHECK_EQ(rb.idx, ra.idx);
	KVS_CHECK_EQ(rb.gen, rs.gen + 1);
	KVS_TRY(look_expect(a, 30, KVS_SHM_CLAIM_WRITING, hb, true));
	KVS_CHECK_ERR(kvs_core_claim_convert(a, &ra, KVS_SHM_CLAIM_WRITING), -ESTALE); /* old gen */

	/* end(err): freed at once. */
	KVS_CHECK_ERR(kvs_core_claim_end(b, &rb, -EIO), 0);
	KVS_TRY(look_expect(a, 30, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_CHECK_EQ(atomic_load(&a->claims[rb.idx].state), KVS_SHM_CLAIM_FREE);
	KVS_CHECK_EQ(a->hdr->claims_free, rb.idx);
	KVS_CHECK(!kvs_core_claim_peek(a, &k, KVS_SHM_CLAIM_WRITING));
	KVS_TRY(take_expect(a, 30, KVS_SHM_CLAIM_WRITING, 1, &ra, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_FREE);
	KVS_CHECK_ERR(kvs_core_claim_end(a, &ra, -ECANCELED), 0);

	/* DROPPING: converted into a write and back; a drop's end stores nothing. */
	KVS_TRY(take_expect(a, 31, KVS_SHM_CLAIM_DROPPING, 1, &rd, &v));
	KVS_TRY(look_expect(b, 31, KVS_SHM_CLAIM_DROPPING, ha, true));
	{
		struct kvs_block_id k31 = core_block(31);

		KVS_CHECK(kvs_core_claim_peek(b, &k31, KVS_SHM_CLAIM_DROPPING));
		KVS_TRY(take_expect(b, 31, KVS_SHM_CLAIM_WRITING, 0, &rb, &v));
		KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_DROPPING);
		KVS_CHECK(v.holder_alive);
		KVS_CHECK_OK(kvs_core_claim_convert(a, &rd, KVS_SHM_CLAIM_WRITING));
		KVS_TRY(look_expect(b, 31, KVS_SHM_CLAIM_WRITING, ha, true));
		KVS_CHECK(kvs_core_claim_peek(b, &k31, KVS_SHM_CLAIM_WRITING));
		KVS_CHECK(!kvs_core_claim_peek(b, &k31, KVS_SHM_CLAIM_DROPPING));
		KVS_CHECK_OK(kvs_core_claim_convert(a, &rd, KVS_SHM_CLAIM_DROPPING));
		KVS_TRY(look_expect(b, 31, KVS_SHM_CLAIM_DROPPING, ha, true));
		KVS_CHECK_ERR(kvs_core_claim_end(a, &rd, 0), 0);
		KVS_TRY(look_expect(b, 31, KVS_SHM_CLAIM_FREE, 0, false));
		KVS_CHECK(!kvs_core_claim_peek(b, &k31, KVS_SHM_CLAIM_STORED));
	}

	/* claim_stored: a live holder's claim is left alone; else STORED. */
	KVS_TRY(take_expect(a, 32, KVS_SHM_CLAIM_WRITING, 1, &r3, &v));
	KVS_CHECK_OK(kvs_core_claim_stored(b, &k3));
	KVS_TRY(look_expect(b, 32, KVS_SHM_CLAIM_WRITING, ha, true));
	KVS_CHECK_ERR(kvs_core_claim_end(a, &r3, -EIO), 0);
	KVS_TRY(look_expect(b, 32, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_CHECK_OK(kvs_core_claim_stored(b, &k3));
	KVS_TRY(look_expect(a, 32, KVS_SHM_CLAIM_STORED, 0, false));
	KVS_TRY(take_expect(a, 32, KVS_SHM_CLAIM_WRITING, 0, &r3, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_STORED);

	/* designated: a shard of the block, the same for every rank, spread. */
	for (uint64_t n = 0; n < 64; n++) {
		struct kvs_block_id kn = core_block(n);
		uint32_t d = kvs_core_claim_designated(a, &kn);

		KVS_CHECK(d < SHARDS);
		KVS_CHECK_EQ(kvs_core_claim_designated(b, &kn), d);
		seen |= 1u << d;
	}
	KVS_CHECK(__builtin_popcount(seen) >= 2);
	/* ring: that rank's bell only. */
	bella = bell(&a->ranks[a->rank_idx].bell);
	bellb = bell(&b->ranks[b->rank_idx].bell);
	kvs_core_claim_ring(a, (uint32_t)b->rank_idx);
	KVS_CHECK_EQ(bell(&b->ranks[b->rank_idx].bell), (bellb + 1) & KVS_WAIT_VALUE_MASK);
	KVS_CHECK_EQ(bell(&a->ranks[a->rank_idx].bell), bella);
	kvs_core_claim_ring(a, KVS_MAX_RANKS); /* no such entry: nothing */

	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(b);
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- table_full ---- */

#define FULL_BASE 1000u

static kvs_test_rc test_table_full(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_claim_ref refs[KVS_CLAIMS_MIN], r;
	struct kvs_claim_view v;
	uint64_t ha;

	claim_cfg(&cfg, "full", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK_EQ(kvs_core_claims_size(&a->hdr->fp), KVS_CLAIMS_MIN);
	KVS_CHECK_EQ(a->claim_mask + 1, KVS_CLAIMS_MIN);
	ha = holder_of(a);
	for (uint32_t i = 0; i < KVS_CLAIMS_MIN; i++)
		KVS_TRY(take_expect(a, FULL_BASE + i, KVS_SHM_CLAIM_WRITING, 1, &refs[i], &v));
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN, KVS_SHM_CLAIM_WRITING, -ENOSPC, &r, &v));
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN, KVS_SHM_CLAIM_DROPPING, -ENOSPC, &r, &v));
	/* A full table still finds the claims it has. */
	KVS_TRY(take_expect(a, FULL_BASE, KVS_SHM_CLAIM_WRITING, 0, &r, &v));
	KVS_CHECK_EQ(v.holder, ha);

	/* An end with an error makes room at once. */
	KVS_CHECK_ERR(kvs_core_claim_end(a, &refs[0], -EIO), 0);
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN, KVS_SHM_CLAIM_WRITING, 1, &r, &v));
	KVS_CHECK_EQ(r.idx, refs[0].idx);
	refs[0] = r;

	/* A STORED record keeps its entry for the grace, then gives it up. */
	KVS_CHECK_ERR(kvs_core_claim_end(a, &refs[1], 0), 0);
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN + 1, KVS_SHM_CLAIM_WRITING, -ENOSPC, &r, &v));
	sleep_past(atomic_load(&a->claims[refs[1].idx].expires_ns));
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN + 1, KVS_SHM_CLAIM_WRITING, 1, &r, &v));
	KVS_CHECK_EQ(r.idx, refs[1].idx);
	KVS_TRY(look_expect(a, FULL_BASE + 1, KVS_SHM_CLAIM_FREE, 0, false));
	refs[1] = r;
	KVS_TRY(take_expect(a, FULL_BASE + KVS_CLAIMS_MIN + 2, KVS_SHM_CLAIM_WRITING, -ENOSPC, &r, &v));

	/* No live claim was handed out: each is still its holder's. */
	for (uint32_t i = 2; i < KVS_CLAIMS_MIN; i++) {
		KVS_CHECK_OK(kvs_core_claim_convert(a, &refs[i], KVS_SHM_CLAIM_WRITING));
		KVS_TRY(look_expect(a, FULL_BASE + i, KVS_SHM_CLAIM_WRITING, ha, true));
	}
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	for (uint32_t i = 0; i < KVS_CLAIMS_MIN; i++)
		KVS_CHECK_ERR(kvs_core_claim_end(a, &refs[i], -ECANCELED), 0);
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- children: a rank of another process ---- */

#define DEAD_X 40u /* WRITING */
#define DEAD_Y 41u /* DROPPING */
#define DEAD_Z 42u /* WRITING */
#define REPAIR_LIVE 5u
#define REPAIR_BASE 10u

struct child_arg {
	const char *uid;
	struct kvs_claim_ref live[REPAIR_LIVE]; /* lock_repair: the parent's claims */
	uint64_t until[SHARDS];                 /* removal_guard: DIRTY shards' protection */
	int up_w, up_r, hold_r, hold_w; /* up: child -> parent; hold: never written */
};

/* What the removal_guard child made: its DIRTY shards and its READY one. */
struct guard_made {
	struct kvs_dirty_shard dirty[3], ready;
};

/* Tell the parent we are there (len bytes of buf), then block until killed
 * (bounded: the parent kills us well within 30 s, and PR_SET_PDEATHSIG covers
 * its death). */
static kvs_test_rc child_signal_and_block(const struct child_arg *ca, const void *buf, size_t len)
{
	struct pollfd p = { .fd = ca->hold_r, .events = POLLIN };

	KVS_CHECK_EQ(write(ca->up_w, buf, len), (ssize_t)len);
	poll(&p, 1, 30000);
	KVS_FAILF("child not killed within 30 s");
}

static kvs_test_rc child_open(const struct child_arg *ca, struct kvs_cache **c)
{
	struct kvs_cache_config cfg;

	close(ca->up_r);
	close(ca->hold_w);
	claim_cfg(&cfg, "child", ca->uid);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, c), 0);
	return KVS_TEST_PASS;
}

static int child_pipes(struct child_arg *ca)
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
static void parent_ends(struct child_arg *ca)
{
	close(ca->up_w);
	close(ca->hold_r);
}

static void parent_close(struct child_arg *ca)
{
	close(ca->up_r);
	close(ca->hold_w);
}

/* Fork fn, wait for its word (len bytes into buf), kill it -9 and reap it. */
static kvs_test_rc run_killed(kvs_test_rc (*fn)(void *), struct child_arg *ca, void *buf, size_t len)
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

/* ---- dead_holder ---- */

/* forked: hold X (WRITING), Y (DROPPING), Z (WRITING); send the refs; block. */
static kvs_test_rc holder_child(void *arg)
{
	const struct child_arg *ca = arg;
	struct kvs_cache *c = NULL;
	struct kvs_claim_ref r[3];
	struct kvs_claim_view v;

	KVS_TRY(child_open(ca, &c));
	KVS_TRY(take_expect(c, DEAD_X, KVS_SHM_CLAIM_WRITING, 1, &r[0], &v));
	KVS_TRY(take_expect(c, DEAD_Y, KVS_SHM_CLAIM_DROPPING, 1, &r[1], &v));
	KVS_TRY(take_expect(c, DEAD_Z, KVS_SHM_CLAIM_WRITING, 1, &r[2], &v));
	return child_signal_and_block(ca, r, sizeof(r));
}

/* While the holder lives: its claims are its own (its holder entry is *hx). */
static kvs_test_rc dead_holder_alive(struct kvs_cache *a, uint64_t *hx)
{
	struct kvs_block_id kx = core_block(DEAD_X);
	struct kvs_claim_ref r;
	struct kvs_claim_view v;

	KVS_CHECK_OK(kvs_core_claim_look(a, &kx, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_CHECK(v.holder_alive);
	*hx = v.holder;
	KVS_CHECK((uint32_t)(*hx >> 32) != (uint32_t)a->rank_idx);
	KVS_TRY(take_expect(a, DEAD_X, KVS_SHM_CLAIM_WRITING, 0, &r, &v));
	KVS_TRY(take_expect(a, DEAD_Y, KVS_SHM_CLAIM_WRITING, 0, &r, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_DROPPING);
	KVS_TRY(take_expect(a, DEAD_Z, KVS_SHM_CLAIM_DROPPING, 0, &r, &v));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_dead_holder(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_claim_ref cr[3], rx, ry, rw, r;
	struct kvs_claim_view v;
	struct child_arg ca;
	kvs_test_rc alive;
	uint64_t hx = 0, ha;
	uint32_t n = 0;
	pid_t pid;

	claim_cfg(&cfg, "dead", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	ha = holder_of(a);
	memset(&ca, 0, sizeof(ca));
	ca.uid = cfg.unique_id;
	KVS_CHECK_OK(child_pipes(&ca));
	pid = kvs_test_fork(holder_child, &ca);
	parent_ends(&ca);
	KVS_CHECK(pid > 0);
	alive = wait_bytes(ca.up_r, cr, sizeof(cr));
	if (alive.code == KVS_TEST_PASS.code)
		alive = dead_holder_alive(a, &hx);
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	parent_close(&ca);
	KVS_TRY(alive);
	/* Dead: said so, and taken over (the same entry, the next generation). */
	KVS_TRY(look_expect(a, DEAD_X, KVS_SHM_CLAIM_WRITING, hx, false));
	KVS_TRY(look_expect(a, DEAD_Y, KVS_SHM_CLAIM_DROPPING, hx, false));
	KVS_TRY(look_expect(a, DEAD_Z, KVS_SHM_CLAIM_WRITING, hx, false));
	KVS_TRY(take_expect(a, DEAD_Z, KVS_SHM_CLAIM_STORED, 0, &r, &v)); /* not a record */
	KVS_TRY(look_expect(a, DEAD_Z, KVS_SHM_CLAIM_WRITING, hx, false));
	KVS_TRY(take_expect(a, DEAD_X, KVS_SHM_CLAIM_WRITING, 1, &rx, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_WRITING);
	KVS_CHECK_EQ(v.holder, hx);
	KVS_CHECK(!v.holder_alive);
	KVS_CHECK_EQ(rx.idx, cr[0].idx);
	KVS_CHECK_EQ(rx.gen, cr[0].gen + 1);
	KVS_TRY(look_expect(a, DEAD_X, KVS_SHM_CLAIM_WRITING, ha, true));
	/* A dead dropper's block: a survivor may write it. */
	KVS_TRY(take_expect(a, DEAD_Y, KVS_SHM_CLAIM_WRITING, 1, &ry, &v));
	KVS_CHECK_EQ(v.state, KVS_SHM_CLAIM_DROPPING);
	KVS_CHECK_EQ(ry.idx, cr[1].idx);
	KVS_CHECK_EQ(ry.gen, cr[1].gen + 1);
	KVS_TRY(look_expect(a, DEAD_Y, KVS_SHM_CLAIM_WRITING, ha, true));

	/* Table full but for the dead holder's last claim: that is the entry a
	 * new block gets. */
	while (n < KVS_CLAIMS_MIN - 3) {
		KVS_TRY(take_expect(a, 500 + n, KVS_SHM_CLAIM_WRITING, 1, &r, &v));
		KVS_CHECK(r.idx != cr[2].idx && r.idx != rx.idx && r.idx != ry.idx);
		n++;
	}
	KVS_TRY(take_expect(a, 600, KVS_SHM_CLAIM_WRITING, 1, &rw, &v));
	KVS_CHECK_EQ(rw.idx, cr[2].idx);
	KVS_TRY(look_expect(a, DEAD_Z, KVS_SHM_CLAIM_FREE, 0, false));
	KVS_TRY(take_expect(a, 601, KVS_SHM_CLAIM_WRITING, -ENOSPC, &r, &v));
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	core_log_quiet = 1; /* the dead rank is reaped at close, as it should be */
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	core_log_quiet = 0;
	return KVS_TEST_PASS;
}

/* ---- lock_repair ---- */

/* forked: take claims_lock and leave the table half edited, as a holder killed
 * inside an edit would: live[1]'s chain head cut (its claims on no chain), the
 * free list head naming live[0] (an alloc would hand it out again), and the
 * free entry that was the head scribbled (a state no claim has). */
static kvs_test_rc lock_child(void *arg)
{
	const struct child_arg *ca = arg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(REPAIR_BASE + 1);
	uint32_t b, n = 0, f;
	bool on_chain = false;

	KVS_TRY(child_open(ca, &c));
	b = kvs_core_claim_chain(c, &k);
	KVS_CHECK_ERR(kvs_core_test_hold_claims(c), 0);
	for (uint32_t i = c->claim_heads[b]; i != KVS_IDX_NONE && i <= c->claim_mask &&
	     n <= c->claim_mask; i = c->claims[i].next, n++)
		on_chain |= i == ca->live[1].idx;
	KVS_CHECK(on_chain);
	f = c->hdr->claims_free;
	KVS_CHECK(f <= c->claim_mask);
	c->claim_heads[b] = KVS_IDX_NONE;
	c->hdr->claims_free = ca->live[0].idx;
	atomic_store(&c->claims[f].state, 77u);
	return child_signal_and_block(ca, &f, sizeof(f));
}

static kvs_test_rc test_lock_repair(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a, *b;
	struct kvs_claim_ref r;
	struct kvs_claim_view v;
	struct child_arg ca;
	uint64_t repairs, ha;
	uint32_t save, f, taken = 0;

	claim_cfg(&cfg, "repair", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK((b = open_or_null(&cfg)) != NULL);
	ha = holder_of(a);
	memset(&ca, 0, sizeof(ca));
	for (uint32_t i = 0; i < REPAIR_LIVE; i++)
		KVS_TRY(take_expect(a, REPAIR_BASE + i, KVS_SHM_CLAIM_WRITING, 1, &ca.live[i], &v));
	/* The checker sees a free list that names a live claim. */
	save = a->hdr->claims_free;
	a->hdr->claims_free = ca.live[0].idx;
	core_log_quiet = 1;
	KVS_CHECK(kvs_core_claims_check(a, 8) > 0);
	core_log_quiet = 0;
	a->hdr->claims_free = save;
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);

	ca.uid = cfg.unique_id;
	KVS_TRY(run_killed(lock_child, &ca, &f, sizeof(f)));
	KVS_CHECK(f <= a->claim_mask);

	/* The next holder gets EOWNERDEAD and rebuilds chains and free list. */
	core_log_quiet = 1; /* the repair's warning is expected */
	repairs = atomic_load(&a->me->stats.lock_repairs);
	KVS_TRY(take_expect(a, REPAIR_BASE + REPAIR_LIVE, KVS_SHM_CLAIM_WRITING, 1, &r, &v));
	core_log_quiet = 0;
	KVS_CHECK_EQ(atomic_load(&a->me->stats.lock_repairs), repairs + 1);
	for (uint32_t i = 0; i < REPAIR_LIVE; i++)
		KVS_CHECK(r.idx != ca.live[i].idx); /* no live entry handed out again */
	/* The scribbled entry is free again (or the one just handed out). */
	KVS_CHECK(r.idx == f || atomic_load(&a->claims[f].state) == KVS_SHM_CLAIM_FREE);
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	for (uint32_t i = 0; i < REPAIR_LIVE; i++) {
		KVS_TRY(look_expect(b, REPAIR_BASE + i, KVS_SHM_CLAIM_WRITING, ha, true));
		KVS_TRY(take_expect(b, REPAIR_BASE + i, KVS_SHM_CLAIM_WRITING, 0, NULL, &v));
		KVS_CHECK_OK(kvs_core_claim_convert(a, &ca.live[i], KVS_SHM_CLAIM_WRITING));
	}
	/* Exactly the free entries are left to take, none of them live. */
	for (;;) {
		struct kvs_block_id k = core_block(5000 + taken);
		int rc = kvs_core_claim_take(b, &k, KVS_SHM_CLAIM_WRITING, &r, &v);

		if (rc == -ENOSPC)
			break;
		KVS_CHECK_EQ(rc, 1);
		for (uint32_t i = 0; i < REPAIR_LIVE; i++)
			KVS_CHECK(r.idx != ca.live[i].idx);
		KVS_CHECK(++taken <= KVS_CLAIMS_MIN);
	}
	KVS_CHECK_EQ(taken, KVS_CLAIMS_MIN - REPAIR_LIVE - 1);
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(b);
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- removal_guard ---- */

/* forked: the cache's creator.  Block 1 shards 0..2 DIRTY (shard 2 still
 * pinned), block 2 shard 0 READY, block 3 shard 0 LOADING (ours); the hint too
 * high (a rank killed between its raise and its publish) and the sweep not
 * due; bound to backend "posix:/guard".  Send what it made; block. */
static kvs_test_rc guard_child(void *arg)
{
	const struct child_arg *ca = arg;
	struct kvs_cache *c = NULL;
	struct kvs_slot s[3], r, l;
	struct guard_made m;
	struct kvs_block_id k3 = core_block(3);
	char theirs[64];

	KVS_TRY(child_open(ca, &c));
	KVS_CHECK_OK(kvs_core_backend_bind(c, "posix:/guard", theirs, sizeof(theirs)));
	for (uint32_t i = 0; i < 3; i++) {
		KVS_TRY(dirty_shard(c, 1, i, ca->until[i], &s[i]));
		m.dirty[i] = (struct kvs_dirty_shard){ s[i].index, s[i].generation };
	}
	KVS_CHECK_OK(kvs_slot_release(c, &s[0]));
	KVS_CHECK_OK(kvs_slot_release(c, &s[1]));
	KVS_TRY(ready_shard(c, 2, 0, &r));
	m.ready = (struct kvs_dirty_shard){ r.index, r.generation };
	KVS_CHECK_OK(kvs_slot_release(c, &r));
	KVS_CHECK_OK(kvs_core_get(c, &k3, 0, 0, &l));
	KVS_CHECK_EQ(l.flags, KVS_SLOT_OWNER);
	atomic_fetch_add(&c->hdr->dirty_hint, 5);
	atomic_store(&c->hdr->sweep_ns, kvs_now_ns() + LONG_NS);
	return child_signal_and_block(ca, &m, sizeof(m));
}

/* The inspected cache: READY, its DIRTY slots counted. */
static kvs_test_rc inspect_dirty(const char *uid, uint64_t dirty, uint32_t dead)
{
	struct kvs_cache_info in;

	KVS_CHECK_OK(kvs_cache_inspect(uid, &in));
	KVS_CHECK_EQ(in.state, KVS_CACHE_INFO_READY);
	KVS_CHECK_EQ(in.ranks_live, 0);
	KVS_CHECK_EQ(in.ranks_dead, dead);
	KVS_CHECK_EQ(in.slots_dirty, dirty);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_removal_guard(void)
{
	struct kvs_cache_config cfg, discard;
	struct kvs_cache *a;
	struct kvs_cache_stats st;
	struct kvs_cache_info in;
	struct kvs_slot s;
	struct child_arg ca;
	struct guard_made m;
	struct kvs_block_id k1 = core_block(1), k2 = core_block(2), k3 = core_block(3);
	uint64_t now = kvs_now_ns();
	char theirs[KVS_SHM_BACKEND_ID_MAX];
	int32_t err;

	claim_cfg(&cfg, "guard", NULL);
	memset(&ca, 0, sizeof(ca));
	ca.uid = cfg.unique_id;
	for (uint32_t i = 0; i < 3; i++)
		ca.until[i] = i == 1 ? 1 : now + LONG_NS + i * MS; /* shard 1: long past */
	KVS_TRY(run_killed(guard_child, &ca, &m, sizeof(m)));

	/* Stale, holding DIRTY slots: not removed. */
	KVS_TRY(inspect_dirty(cfg.unique_id, 3, 1));
	core_log_quiet = 1; /* the refusal is logged, as it should be */
	KVS_CHECK_ERR(kvs_cache_remove(&cfg), -ENOTEMPTY);
	core_log_quiet = 0;
	KVS_CHECK(strstr(core_last_log, "3 slots") != NULL);
	KVS_CHECK(ctl_exists(cfg.unique_id));
	KVS_CHECK(data_exists(cfg.unique_id));

	/* Adopted: the record kept as it was. */
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK_OK(kvs_cache_stats(a, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 1);
	KVS_CHECK_EQ(st.slots_dirty, 3);
	KVS_CHECK_EQ(st.slots_ready, 1);
	KVS_CHECK_EQ(st.slots_loading, 0);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_EQ(hint(a), 3); /* exact again */
	KVS_CHECK_EQ(atomic_load(&a->hdr->sweep_ns), 0);
	for (uint32_t i = 0; i < 3; i++) {
		KVS_CHECK_EQ(kvs_core_dirty_look(a, &k1, i, m.dirty[i].index, m.dirty[i].generation, &err),
			     KVS_SHM_SLOT_DIRTY);
		KVS_CHECK_EQ(slot_until(a, m.dirty[i].index), ca.until[i]);
		KVS_TRY(verify_shard(a, 1, i));
	}
	KVS_CHECK_EQ(kvs_core_dirty_look(a, &k2, 0, m.ready.index, m.ready.generation, &err),
		     KVS_SHM_SLOT_READY);
	KVS_CHECK_EQ(slot_until(a, m.ready.index), 0);
	KVS_TRY(verify_shard(a, 2, 0));
	KVS_CHECK_EQ(kvs_cache_exists(a, &k3, 0), 0);
	KVS_TRY(scan_expect(a, 1, now, true, 3, 0, 1, true, ca.until[2], NULL));
	/* Its DIRTY slots are to be written where they were dumped for. */
	KVS_CHECK_ERR(kvs_core_backend_bind(a, "posix:/other", theirs, sizeof(theirs)), -KVS_ECONFIG);
	KVS_CHECK(strcmp(theirs, "posix:/guard") == 0);
	KVS_CHECK_OK(kvs_core_backend_bind(a, "posix:/guard", theirs, sizeof(theirs)));
	KVS_CHECK_OK(kvs_cache_check(a));

	/* The last rank's clean close keeps it. */
	core_log_quiet = 1;
	kvs_cache_close(a);
	core_log_quiet = 0;
	KVS_CHECK(strstr(core_last_log, "kept") != NULL);
	KVS_CHECK(ctl_exists(cfg.unique_id));
	KVS_CHECK(data_exists(cfg.unique_id));
	KVS_TRY(inspect_dirty(cfg.unique_id, 3, 0));
	core_log_quiet = 1;
	KVS_CHECK_ERR(kvs_cache_remove(&cfg), -ENOTEMPTY);
	core_log_quiet = 0;
	KVS_CHECK(ctl_exists(cfg.unique_id));

	/* Reopened: one block shard written; the others keep it. */
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK_OK(kvs_cache_stats(a, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 2);
	KVS_CHECK_EQ(hint(a), 3);
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, m.dirty[0].index, m.dirty[0].generation), 1);
	core_log_quiet = 1;
	kvs_cache_close(a);
	core_log_quiet = 0;
	KVS_CHECK(ctl_exists(cfg.unique_id));
	KVS_TRY(inspect_dirty(cfg.unique_id, 2, 0));

	/* Discarded as asked. */
	discard = cfg;
	discard.flags |= KVS_CACHE_DISCARD_DIRTY;
	core_log_quiet = 1;
	KVS_CHECK_OK(kvs_cache_remove(&discard));
	core_log_quiet = 0;
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	KVS_CHECK(!data_exists(cfg.unique_id));
	KVS_CHECK_ERR(kvs_cache_inspect(cfg.unique_id, &in), -ENOENT);

	/* Control: every DIRTY slot cleaned, the last close removes the cache. */
	claim_cfg(&cfg, "guard2", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_TRY(dirty_shard(a, 7, 0, now + LONG_NS, &s));
	KVS_CHECK_EQ(kvs_core_dirty_clean(a, s.index, s.generation), 1);
	KVS_CHECK_OK(kvs_slot_release(a, &s));
	kvs_cache_close(a);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	KVS_CHECK(!data_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* ---- backend_bind ---- */

/* exec'd: --child binder <uid> <fd> <id>: bind id, put block 5 READY, say so,
 * get killed. */
static kvs_test_rc binder_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char theirs[64];

	if (argc != 3)
		KVS_FAILF("usage: --child binder <uid> <fd> <id>");
	claim_cfg(&cfg, "binder", argv[0]);
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), 0);
	KVS_CHECK_OK(kvs_core_backend_bind(c, argv[2], theirs, sizeof(theirs)));
	KVS_TRY(core_put(c, 5));
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	for (;;)
		pause();
}

static kvs_test_rc test_backend_bind(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a, *b;
	struct kvs_cache_stats st;
	struct kvs_block_id k5 = core_block(5);
	char theirs[KVS_SHM_BACKEND_ID_MAX], t8[8], fdstr[16], ch;
	const char *first = "redis://10.0.0.1:6379/kv:llama", *other = "posix:/mnt/kv";
	int fds[2];
	pid_t pid;

	claim_cfg(&cfg, "bind", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK((b = open_or_null(&cfg)) != NULL);
	KVS_CHECK_EQ(atomic_load(&a->hdr->backend_hash), 0);
	KVS_CHECK_OK(kvs_core_backend_bind(a, first, theirs, sizeof(theirs)));
	KVS_CHECK(atomic_load(&a->hdr->backend_hash) != 0);
	KVS_CHECK_OK(kvs_core_backend_bind(a, first, theirs, sizeof(theirs)));
	KVS_CHECK_OK(kvs_core_backend_bind(b, first, theirs, sizeof(theirs)));
	memset(theirs, 0, sizeof(theirs));
	KVS_CHECK_ERR(kvs_core_backend_bind(b, other, theirs, sizeof(theirs)), -KVS_ECONFIG);
	KVS_CHECK(strcmp(theirs, first) == 0);
	KVS_CHECK_ERR(kvs_core_backend_bind(a, other, t8, sizeof(t8)), -KVS_ECONFIG);
	KVS_CHECK(strcmp(t8, "redis:/") == 0); /* cut to len */
	KVS_CHECK_OK(kvs_core_backend_bind(b, first, theirs, sizeof(theirs))); /* still the first */
	kvs_cache_close(b);
	kvs_cache_close(a);
	KVS_CHECK(!ctl_exists(cfg.unique_id));

	/* A hash whose text does not match (its binder died between the two):
	 * named by the hash. */
	claim_cfg(&cfg, "bindhash", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	atomic_store(&a->hdr->backend_hash, UINT64_C(0x1234));
	KVS_CHECK_ERR(kvs_core_backend_bind(a, other, theirs, sizeof(theirs)), -KVS_ECONFIG);
	KVS_CHECK(strstr(theirs, "0x0000000000001234") != NULL);
	kvs_cache_close(a);

	/* An exec'd binder killed -9, its cache (nothing DIRTY) adopted: unbound,
	 * a new id binds. */
	claim_cfg(&cfg, "bindadopt", NULL);
	KVS_CHECK_OK(pipe(fds));
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	{
		const char *av[] = { cfg.unique_id, fdstr, first, NULL };

		pid = kvs_test_spawn("binder", av);
	}
	close(fds[1]);
	KVS_CHECK(pid > 0);
	if (wait_bytes(fds[0], &ch, 1).code != KVS_TEST_PASS.code) {
		close(fds[0]);
		kvs_test_reap(pid, 1);
		KVS_FAILF("the binder never said it was there");
	}
	close(fds[0]);
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK_OK(kvs_cache_stats(a, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 1);
	KVS_CHECK_EQ(kvs_cache_exists(a, &k5, 0), 1);
	KVS_CHECK_EQ(hint(a), 0);
	KVS_CHECK_EQ(atomic_load(&a->hdr->backend_hash), 0);
	KVS_CHECK_OK(kvs_core_backend_bind(a, other, theirs, sizeof(theirs)));
	KVS_CHECK_ERR(kvs_core_backend_bind(a, first, theirs, sizeof(theirs)), -KVS_ECONFIG);
	KVS_CHECK(strcmp(theirs, other) == 0);
	kvs_cache_close(a);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "dirty_record", test_dirty_record },
	{ "clock_dirty", test_clock_dirty },
	{ "claims", test_claims },
	{ "table_full", test_table_full },
	{ "dead_holder", test_dead_holder },
	{ "lock_repair", test_lock_repair },
	{ "removal_guard", test_removal_guard },
	{ "backend_bind", test_backend_bind },
};

static const struct kvs_test_child children[] = {
	{ "binder", binder_child },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
