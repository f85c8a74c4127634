/*
 * tests/core_record.c — the dump record (the DIRTY slots: core/slot.c's
 * kvs_core_dirty_*), CLOCK's respect for it (core/clock.c), the cache's
 * removal guard and adoption of the record (core/segment.c) and the backend
 * binding (core/header.c), through the core API: real caches on unique ids,
 * rank handles (device_id 0), and real processes where a process matters (a
 * rank killed -9 holding DIRTY slots, a binder exec'd so that its segment sits
 * at another address).  The claim table is tests/core_claim.c's.
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
 *
 * Processes are synchronised by pipes, read with poll timeouts.
 */
#include "core_claim_util.h"

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

/* What the removal_guard child made: its DIRTY shards and its READY one. */
struct guard_made {
	struct kvs_dirty_shard dirty[3], ready;
};

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
	{ "removal_guard", test_removal_guard },
	{ "backend_bind", test_backend_bind },
};

static const struct kvs_test_child children[] = {
	{ "binder", binder_child },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
