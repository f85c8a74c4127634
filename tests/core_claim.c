/*
 * tests/core_claim.c — the claim table (core/claim.c), through the core API:
 * real caches on unique ids, rank handles (device_id 0), and real processes
 * where a process matters (a rank killed -9 holding claims, the claim table's
 * lock holder killed -9 mid-edit).  The dump record itself is
 * tests/core_record.c's.
 *
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
 *
 * Time: STORED records expire by CLOCK_MONOTONIC deadlines, so the grace cases
 * wait for the clock to pass one (KVS_CLAIM_GRACE_NS, 1 s); processes are
 * synchronised by pipes, read with poll timeouts.
 */#include "core_claim_util.h"

#define DEAD_X 40u /* WRITING */
#define DEAD_Y 41u /* DROPPING */
#define DEAD_Z 42u /* WRITING */
#define REPAIR_BASE 10u

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

static const struct kvs_test_case cases[] = {
	{ "claims", test_claims },
	{ "table_full", test_table_full },
	{ "dead_holder", test_dead_holder },
	{ "lock_repair", test_lock_repair },
};

KVS_TEST_MAIN(cases)
