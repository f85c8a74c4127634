/*
 * tests/core_claim.c — the dump claim table (core/claim.c) through the core API:
 * real caches on unique ids, rank handles (device_id 0), and real processes
 * where a process matters (a writer killed -9, the table's lock holder killed
 * -9 mid-edit).
 *
 *   count_distinct    a 4-shard block's DIRTY slots each count once (a second
 *                     count of a slot, by any rank, returns 0); elect is 0 until
 *                     the count is complete, then 1, then 0 again (same rank, or
 *                     a second one) while the writer lives; only the writer's end
 *                     counts; end(0) reads DURABLE, and a later join reports
 *                     DURABLE (the block is known written) within the grace,
 *                     and past it starts a new generation (the stored copy may
 *                     be gone by then).
 *   stale_generation  a claim whose deadline passed restarts at the next join
 *                     (same entry, generation + 1); count, read and elect with the
 *                     old ref are -ESTALE, and the old generation's counts are
 *                     void (every shard counts again in the new one).
 *   table_full        a table of KVS_CLAIMS_MIN entries: that many live claims of
 *                     distinct blocks, then -ENOSPC; an ended claim keeps its entry
 *                     for the grace, then a new join reuses it; so does an expired
 *                     OPEN claim; no live claim is ever dropped (every other ref
 *                     still reads, and joins find it at the same generation).
 *   protects          a DIRTY slot tagged in a live OPEN claim is protected from
 *                     CLOCK up to its expiry + grace (the exact boundary), not
 *                     after it (in real time too), nor once its generation
 *                     restarted; WRITING protects; DURABLE does not.
 *   dead_writer       a forked rank elects itself writer and is killed -9: the view
 *                     says its writer is dead, and the survivor's elect takes the
 *                     claim over (writer = its own rank entry and epoch; counted
 *                     as a takeover), then ends it DURABLE.
 *   lock_repair       a forked rank takes claims_lock, cuts a chain and points the
 *                     free list head at a live claim, and is killed -9 holding it:
 *                     the next join repairs (EOWNERDEAD, counted), succeeds on a
 *                     new block without reusing a live entry, the checker finds
 *                     nothing, and every previously live claim is found by join
 *                     at its generation.
 *
 * Time: claims expire by CLOCK_MONOTONIC deadlines, so the expiry cases wait for
 * the clock to pass a deadline (short ones: tens of ms, or the grace of 1 s);
 * processes are synchronised by pipes, read with poll timeouts.
 */
#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull
#define SHARDS 4u
/* Deadline of the claims that must stay live for the whole case. */
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

/* Let the clock pass t (claims expire by the clock; nothing to synchronise). */
static void sleep_past(uint64_t t)
{
	struct timespec ts = kvs_ns_to_timespec(t + 1);

	while (kvs_now_ns() <= t)
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

/* Get shard s of block n as its owner, fill it and publish it DIRTY (what a
 * dump's gather does: kvs_store_dump_settle). */
static kvs_test_rc dirty_shard(struct kvs_cache *c, uint64_t n, uint32_t s, struct kvs_slot *slot)
{
	struct kvs_block_id k = core_block(n);
	void *p;

	KVS_CHECK_OK(kvs_core_get(c, &k, s, 0, slot));
	KVS_CHECK_EQ(slot->flags, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_data(c, slot, &p));
	core_fill(p, c->slot_bytes, n, s);
	KVS_CHECK_OK(kvs_core_slot_publish_dirty(c, slot));
	KVS_CHECK_EQ(kvs_core_slot_state(c, slot), KVS_SHM_SLOT_DIRTY);
	return KVS_TEST_PASS;
}

/* Every shard of block n DIRTY and counted in ref (counts 1..SHARDS). */
static kvs_test_rc dirty_counted_block(struct kvs_cache *c, uint64_t n, const struct kvs_claim_ref *ref,
				       struct kvs_slot slots[SHARDS])
{
	for (uint32_t s = 0; s < SHARDS; s++) {
		KVS_TRY(dirty_shard(c, n, s, &slots[s]));
		KVS_CHECK_EQ(kvs_core_claim_count(c, &slots[s], ref, false), (int)s + 1);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc release_all(struct kvs_cache *c, struct kvs_slot *slots, uint32_t n)
{
	for (uint32_t s = 0; s < n; s++)
		KVS_CHECK_OK(kvs_slot_release(c, &slots[s]));
	return KVS_TEST_PASS;
}

/* join, expecting state want; *started as said (1 / 0). */
static kvs_test_rc join_expect(struct kvs_cache *c, uint64_t n, uint64_t deadline, int want,
			       bool want_started, struct kvs_claim_ref *ref)
{
	struct kvs_block_id k = core_block(n);
	bool started = !want_started;

	KVS_CHECK_ERR(kvs_core_claim_join(c, &k, deadline, ref, &started), want);
	KVS_CHECK_EQ(started, want_started);
	return KVS_TEST_PASS;
}

static kvs_test_rc read_state(struct kvs_cache *c, const struct kvs_claim_ref *ref, uint32_t want,
			      struct kvs_claim_view *v)
{
	KVS_CHECK_ERR(kvs_core_claim_read(c, ref, v), 0);
	KVS_CHECK_EQ(v->state, want);
	return KVS_TEST_PASS;
}

/* Wait for one byte on fd (a child saying it is where the parent wants it). */
static kvs_test_rc wait_byte(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char ch;

	if (poll(&p, 1, 20000) != 1 || read(fd, &ch, 1) != 1)
		KVS_FAILF("no word from the child within 20 s");
	return KVS_TEST_PASS;
}

/* ---- count_distinct ---- */

static kvs_test_rc test_count_distinct(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a, *b;
	struct kvs_slot sl[SHARDS], bs;
	struct kvs_claim_ref ref, rb;
	struct kvs_claim_view v;

	claim_cfg(&cfg, "count", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK((b = open_or_null(&cfg)) != NULL); /* a second rank entry */
	KVS_TRY(join_expect(a, 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true, &ref));
	for (uint32_t s = 0; s < SHARDS; s++) {
		KVS_TRY(dirty_shard(a, 1, s, &sl[s]));
		KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[s], &ref, false), (int)s + 1);
		KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[s], &ref, false), 0); /* counted already */
		KVS_CHECK_EQ(kvs_core_slot_tag(a, &sl[s]), kvs_core_claim_tag(&ref));
		if (s + 1 < SHARDS)
			KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 0); /* not complete */
		KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_OPEN, &v));
		KVS_CHECK_EQ(v.counted, s + 1);
	}
	/* The second rank joins the same generation; its count of a shard the
	 * first counted is no new shard either. */
	KVS_TRY(join_expect(b, 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, false, &rb));
	KVS_CHECK_EQ(rb.idx, ref.idx);
	KVS_CHECK_EQ(rb.gen, ref.gen);
	struct kvs_block_id k = core_block(1);
	KVS_CHECK_OK(kvs_core_get(b, &k, 2, 0, &bs));
	KVS_CHECK_EQ(bs.flags, 0);
	KVS_CHECK_EQ(kvs_core_claim_count(b, &bs, &rb, false), 0);
	KVS_CHECK_OK(kvs_slot_release(b, &bs));
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_OPEN, &v));
	KVS_CHECK_EQ(v.counted, SHARDS);

	/* Complete: one writer. */
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 1);
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_WRITING, &v));
	KVS_CHECK_EQ(v.writer, kvs_core_filler((uint32_t)a->rank_idx, a->rank_epoch));
	KVS_CHECK(kvs_core_claim_writer_alive(a, &v));
	KVS_CHECK(kvs_core_claim_writer_alive(b, &v));
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 0);  /* same rank again */
	KVS_CHECK_EQ(kvs_core_claim_elect(b, &rb), 0);   /* the other rank: writer alive */
	KVS_TRY(join_expect(b, 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_WRITING, false, &rb));
	KVS_CHECK_EQ(rb.gen, ref.gen);
	kvs_core_claim_end(b, &rb, -EIO);                 /* not the writer: no effect */
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_WRITING, &v));
	KVS_CHECK_EQ(v.writer, kvs_core_filler((uint32_t)a->rank_idx, a->rank_epoch));

	/* The writer writes (cleans) and ends DURABLE. */
	for (uint32_t s = 0; s < SHARDS; s++) {
		KVS_CHECK_OK(kvs_core_slot_clean(a, &sl[s]));
		KVS_CHECK_ERR(kvs_core_claim_count(a, &sl[s], &ref, false), -ENODATA); /* READY now */
	}
	kvs_core_claim_end(a, &ref, 0);
	KVS_TRY(read_state(b, &rb, KVS_SHM_CLAIM_DURABLE, &v));
	KVS_CHECK_EQ(v.error, 0);
	KVS_CHECK_EQ(v.counted, SHARDS);
	KVS_CHECK_EQ(kvs_core_claim_elect(b, &rb), 0);
	/* Later dumps of the block learn it is written, within the grace; past
	 * it the DURABLE claim proves nothing (the stored copy may be gone) and a
	 * join starts a new generation. */
	KVS_TRY(join_expect(b, 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_DURABLE, false, &rb));
	KVS_CHECK_EQ(rb.idx, ref.idx);
	KVS_CHECK_EQ(rb.gen, ref.gen);
	usleep((KVS_CLAIM_GRACE_NS + 50 * 1000000ull) / 1000);
	{
		struct kvs_claim_ref later;

		KVS_TRY(join_expect(b, 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true,
				    &later));
		KVS_CHECK(later.idx != ref.idx || later.gen != ref.gen);
	}
	KVS_TRY(release_all(a, sl, SHARDS));
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(b);
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- stale_generation ---- */

static kvs_test_rc test_stale_generation(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_slot sl[2];
	struct kvs_claim_ref r1, r2;
	struct kvs_claim_view v;
	uint64_t d1;

	claim_cfg(&cfg, "stale", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_TRY(dirty_shard(a, 2, 0, &sl[0]));
	KVS_TRY(dirty_shard(a, 2, 1, &sl[1]));
	d1 = kvs_deadline_after(30 * MS);
	KVS_TRY(join_expect(a, 2, d1, KVS_SHM_CLAIM_OPEN, true, &r1));
	KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[0], &r1, false), 1);
	KVS_TRY(read_state(a, &r1, KVS_SHM_CLAIM_OPEN, &v));
	KVS_CHECK_EQ(v.expires_ns, d1);

	/* The block never completed by its deadline: the next join restarts it. */
	sleep_past(d1);
	KVS_TRY(join_expect(a, 2, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true, &r2));
	KVS_CHECK_EQ(r2.idx, r1.idx);
	KVS_CHECK_EQ(r2.gen, r1.gen + 1);
	KVS_CHECK_ERR(kvs_core_claim_count(a, &sl[1], &r1, false), -ESTALE);
	KVS_CHECK_ERR(kvs_core_claim_read(a, &r1, &v), -ESTALE);
	KVS_CHECK_ERR(kvs_core_claim_elect(a, &r1), -ESTALE);
	/* The old generation's count is void: shard 0 counts again in the new one. */
	KVS_TRY(read_state(a, &r2, KVS_SHM_CLAIM_OPEN, &v));
	KVS_CHECK_EQ(v.counted, 0);
	KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[0], &r2, false), 1);
	KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[1], &r2, false), 2);
	KVS_CHECK_ERR(kvs_core_claim_count(a, &sl[0], &r1, false), -ESTALE); /* tagged in r2 now */
	KVS_TRY(read_state(a, &r2, KVS_SHM_CLAIM_OPEN, &v));
	KVS_CHECK_EQ(v.counted, 2);
	KVS_TRY(release_all(a, sl, 2));
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- table_full ---- */

static kvs_test_rc test_table_full(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_slot sl[SHARDS];
	struct kvs_claim_ref refs[KVS_CLAIMS_MIN], r, rnew, rexp;
	struct kvs_claim_view v;
	struct kvs_block_id k;
	bool started;
	uint64_t dshort;

	claim_cfg(&cfg, "full", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_CHECK_EQ(kvs_core_claims_size(&a->hdr->fp), KVS_CLAIMS_MIN);
	KVS_CHECK_EQ(a->claim_mask + 1, KVS_CLAIMS_MIN);
	/* Block 0 complete (it will end); blocks 1..63 live and open. */
	KVS_TRY(join_expect(a, 0, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true, &refs[0]));
	KVS_TRY(dirty_counted_block(a, 0, &refs[0], sl));
	for (uint32_t i = 1; i < KVS_CLAIMS_MIN; i++)
		KVS_TRY(join_expect(a, i, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true,
				    &refs[i]));
	k = core_block(KVS_CLAIMS_MIN);
	KVS_CHECK_ERR(kvs_core_claim_join(a, &k, kvs_deadline_after(LONG_NS), &r, &started), -ENOSPC);
	KVS_CHECK(!started);
	/* A full table still finds the claims it has. */
	KVS_TRY(join_expect(a, 0, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, false, &r));
	KVS_CHECK_EQ(r.idx, refs[0].idx);
	KVS_CHECK_EQ(r.gen, refs[0].gen);

	/* Block 0 written: its entry is kept for the grace, then reused. */
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &refs[0]), 1);
	kvs_core_claim_end(a, &refs[0], 0);
	KVS_TRY(read_state(a, &refs[0], KVS_SHM_CLAIM_DURABLE, &v));
	KVS_CHECK_ERR(kvs_core_claim_join(a, &k, kvs_deadline_after(LONG_NS), &r, &started), -ENOSPC);
	sleep_past(v.expires_ns);
	/* The new claim's deadline is short: it is the one to expire below. */
	dshort = kvs_deadline_after(300 * MS);
	KVS_TRY(join_expect(a, KVS_CLAIMS_MIN, dshort, KVS_SHM_CLAIM_OPEN, true, &rnew));
	KVS_CHECK_EQ(rnew.idx, refs[0].idx);
	KVS_CHECK_ERR(kvs_core_claim_read(a, &refs[0], &v), -ESTALE);
	k = core_block(KVS_CLAIMS_MIN + 1);
	KVS_CHECK_ERR(kvs_core_claim_join(a, &k, kvs_deadline_after(LONG_NS), &r, &started), -ENOSPC);
	for (uint32_t i = 1; i < KVS_CLAIMS_MIN; i++) {
		KVS_TRY(read_state(a, &refs[i], KVS_SHM_CLAIM_OPEN, &v));
		KVS_TRY(join_expect(a, i, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, false, &r));
		KVS_CHECK_EQ(r.idx, refs[i].idx);
		KVS_CHECK_EQ(r.gen, refs[i].gen);
	}

	/* The short one expires (an OPEN claim that never completed): reused. */
	sleep_past(dshort);
	KVS_TRY(join_expect(a, KVS_CLAIMS_MIN + 1, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN,
			    true, &rexp));
	KVS_CHECK_EQ(rexp.idx, rnew.idx);
	KVS_CHECK_ERR(kvs_core_claim_read(a, &rnew, &v), -ESTALE);
	for (uint32_t i = 1; i < KVS_CLAIMS_MIN; i++) {
		KVS_TRY(read_state(a, &refs[i], KVS_SHM_CLAIM_OPEN, &v));
		KVS_CHECK_EQ(v.counted, 0);
	}
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_TRY(release_all(a, sl, SHARDS));
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- protects ---- */

static kvs_test_rc test_protects(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_slot sl[SHARDS];
	struct kvs_claim_ref r1, r2;
	struct kvs_claim_view v;
	uint64_t d, tag1, tag2;

	claim_cfg(&cfg, "protect", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_TRY(dirty_shard(a, 4, 0, &sl[0]));
	KVS_CHECK(!kvs_core_claim_protects(a, kvs_core_slot_tag(a, &sl[0]), kvs_now_ns())); /* untagged */
	d = kvs_deadline_after(100 * MS);
	KVS_TRY(join_expect(a, 4, d, KVS_SHM_CLAIM_OPEN, true, &r1));
	KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[0], &r1, false), 1);
	tag1 = kvs_core_slot_tag(a, &sl[0]);
	KVS_CHECK_EQ(tag1, kvs_core_claim_tag(&r1));
	/* OPEN: protected up to expiry + grace, exactly. */
	KVS_CHECK(kvs_core_claim_protects(a, tag1, kvs_now_ns()));
	KVS_CHECK(kvs_core_claim_protects(a, tag1, d));
	KVS_CHECK(kvs_core_claim_protects(a, tag1, d + KVS_CLAIM_GRACE_NS - 1));
	KVS_CHECK(!kvs_core_claim_protects(a, tag1, d + KVS_CLAIM_GRACE_NS));
	/* In real time: past expiry + grace, nobody having joined again. */
	sleep_past(d + KVS_CLAIM_GRACE_NS);
	KVS_CHECK(!kvs_core_claim_protects(a, tag1, kvs_now_ns()));
	/* A restarted generation: the old tag protects nothing, the new one does. */
	KVS_TRY(join_expect(a, 4, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true, &r2));
	KVS_CHECK_EQ(r2.gen, r1.gen + 1);
	KVS_CHECK(!kvs_core_claim_protects(a, tag1, kvs_now_ns()));
	KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[0], &r2, false), 1);
	tag2 = kvs_core_slot_tag(a, &sl[0]);
	KVS_CHECK_EQ(tag2, kvs_core_claim_tag(&r2));
	KVS_CHECK(kvs_core_claim_protects(a, tag2, kvs_now_ns()));
	KVS_CHECK(!kvs_core_claim_protects(a, tag1, kvs_now_ns()));
	/* WRITING protects; DURABLE does not, within the grace or after it. */
	for (uint32_t s = 1; s < SHARDS; s++) {
		KVS_TRY(dirty_shard(a, 4, s, &sl[s]));
		KVS_CHECK_EQ(kvs_core_claim_count(a, &sl[s], &r2, false), (int)s + 1);
	}
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &r2), 1);
	KVS_CHECK(kvs_core_claim_protects(a, tag2, kvs_now_ns()));
	kvs_core_claim_end(a, &r2, 0);
	KVS_TRY(read_state(a, &r2, KVS_SHM_CLAIM_DURABLE, &v));
	KVS_CHECK(!kvs_core_claim_protects(a, tag2, kvs_now_ns()));
	KVS_CHECK(!kvs_core_claim_protects(a, tag2, v.expires_ns + KVS_CLAIM_GRACE_NS));
	KVS_TRY(release_all(a, sl, SHARDS));
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- children: a rank of another process ---- */

struct child_arg {
	const char *uid;
	uint64_t block;                 /* dead_writer: the block to elect on */
	struct kvs_claim_ref want;      /* dead_writer: the ref its join must find */
	struct kvs_claim_ref cut;       /* lock_repair: the claim whose chain is cut */
	uint64_t cut_block;
	uint32_t free_to;               /* lock_repair: the live entry the free list names */
	int up_w, up_r, hold_r, hold_w; /* up: child -> parent; hold: never written */
};

/* Tell the parent we are there, then block until killed (bounded: the parent
 * kills us well within 30 s, and PR_SET_PDEATHSIG covers its death). */
static kvs_test_rc child_signal_and_block(const struct child_arg *ca)
{
	struct pollfd p = { .fd = ca->hold_r, .events = POLLIN };

	KVS_CHECK_EQ(write(ca->up_w, "x", 1), 1);
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

/* ---- dead_writer ---- */

/* forked: join the complete claim, elect ourselves writer, signal, block. */
static kvs_test_rc writer_child(void *arg)
{
	const struct child_arg *ca = arg;
	struct kvs_cache *c = NULL;
	struct kvs_claim_ref r;

	KVS_TRY(child_open(ca, &c));
	KVS_TRY(join_expect(c, ca->block, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, false, &r));
	KVS_CHECK_EQ(r.idx, ca->want.idx);
	KVS_CHECK_EQ(r.gen, ca->want.gen);
	KVS_CHECK_EQ(kvs_core_claim_elect(c, &r), 1);
	return child_signal_and_block(ca);
}

static kvs_test_rc test_dead_writer(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_slot sl[SHARDS];
	struct kvs_claim_ref ref;
	struct kvs_claim_view v, v2;
	struct child_arg ca;
	uint64_t takeovers;
	pid_t pid;

	claim_cfg(&cfg, "dead", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	KVS_TRY(join_expect(a, 5, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN, true, &ref));
	KVS_TRY(dirty_counted_block(a, 5, &ref, sl));
	memset(&ca, 0, sizeof(ca));
	ca.uid = cfg.unique_id;
	ca.block = 5;
	ca.want = ref;
	KVS_CHECK_OK(child_pipes(&ca));
	pid = kvs_test_fork(writer_child, &ca);
	parent_ends(&ca);
	KVS_CHECK(pid > 0);
	KVS_TRY(wait_byte(ca.up_r));

	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_WRITING, &v));
	KVS_CHECK((uint32_t)(v.writer >> 32) != (uint32_t)a->rank_idx);
	KVS_CHECK(kvs_core_claim_writer_alive(a, &v));
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 0); /* its writer lives */

	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	parent_close(&ca);
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_WRITING, &v2));
	KVS_CHECK_EQ(v2.writer, v.writer);
	KVS_CHECK(!kvs_core_claim_writer_alive(a, &v2));

	takeovers = atomic_load(&a->me->stats.takeovers);
	core_log_quiet = 1; /* the reap of the dead rank is logged, as it should be */
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 1);
	core_log_quiet = 0;
	KVS_CHECK_EQ(atomic_load(&a->me->stats.takeovers), takeovers + 1);
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_WRITING, &v2));
	KVS_CHECK_EQ(v2.writer, kvs_core_filler((uint32_t)a->rank_idx, a->rank_epoch));
	KVS_CHECK(v2.writer != v.writer);
	KVS_CHECK(kvs_core_claim_writer_alive(a, &v2));
	KVS_CHECK_EQ(kvs_core_claim_elect(a, &ref), 0);
	for (uint32_t s = 0; s < SHARDS; s++)
		KVS_CHECK_OK(kvs_core_slot_clean(a, &sl[s]));
	kvs_core_claim_end(a, &ref, 0);
	KVS_TRY(read_state(a, &ref, KVS_SHM_CLAIM_DURABLE, &v2));
	KVS_TRY(release_all(a, sl, SHARDS));
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

/* ---- lock_repair ---- */

#define REPAIR_LIVE 5u
#define REPAIR_BASE 10u

/* forked: take claims_lock and leave the table half edited, as a holder killed
 * inside an edit would: one chain head cut (its claims on no chain), and the
 * free list head naming a live claim (an alloc would hand it out again). */
static kvs_test_rc holder_child(void *arg)
{
	const struct child_arg *ca = arg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(ca->cut_block);
	uint32_t b, n = 0;
	bool on_chain = false;

	KVS_TRY(child_open(ca, &c));
	b = kvs_core_claim_chain(c, &k);
	KVS_CHECK_ERR(-pthread_mutex_lock(&c->hdr->claims_lock), 0);
	for (uint32_t i = c->claim_heads[b]; i != KVS_IDX_NONE && i <= c->claim_mask &&
	     n <= c->claim_mask; i = c->claims[i].next, n++)
		on_chain |= i == ca->cut.idx;
	KVS_CHECK(on_chain);
	KVS_CHECK(c->hdr->claims_free != KVS_IDX_NONE);
	c->claim_heads[b] = KVS_IDX_NONE;
	c->hdr->claims_free = ca->free_to;
	return child_signal_and_block(ca);
}

static kvs_test_rc test_lock_repair(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *a;
	struct kvs_claim_ref refs[REPAIR_LIVE], r;
	struct child_arg ca;
	uint64_t repairs;
	pid_t pid;

	claim_cfg(&cfg, "repair", NULL);
	KVS_CHECK((a = open_or_null(&cfg)) != NULL);
	for (uint32_t i = 0; i < REPAIR_LIVE; i++)
		KVS_TRY(join_expect(a, REPAIR_BASE + i, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN,
				    true, &refs[i]));
	memset(&ca, 0, sizeof(ca));
	ca.uid = cfg.unique_id;
	ca.cut = refs[1];
	ca.cut_block = REPAIR_BASE + 1;
	ca.free_to = refs[0].idx;
	KVS_CHECK_OK(child_pipes(&ca));
	pid = kvs_test_fork(holder_child, &ca);
	parent_ends(&ca);
	KVS_CHECK(pid > 0);
	KVS_TRY(wait_byte(ca.up_r));
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	parent_close(&ca);

	/* The next holder gets EOWNERDEAD and rebuilds chains and free list. */
	core_log_quiet = 1; /* the repair's warning is expected */
	repairs = atomic_load(&a->me->stats.lock_repairs);
	KVS_TRY(join_expect(a, REPAIR_BASE + REPAIR_LIVE, kvs_deadline_after(LONG_NS),
			    KVS_SHM_CLAIM_OPEN, true, &r));
	core_log_quiet = 0;
	KVS_CHECK_EQ(atomic_load(&a->me->stats.lock_repairs), repairs + 1);
	for (uint32_t i = 0; i < REPAIR_LIVE; i++)
		KVS_CHECK(r.idx != refs[i].idx); /* no live entry handed out again */
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	for (uint32_t i = 0; i < REPAIR_LIVE; i++) {
		struct kvs_claim_ref f;
		struct kvs_claim_view v;

		KVS_TRY(read_state(a, &refs[i], KVS_SHM_CLAIM_OPEN, &v));
		KVS_TRY(join_expect(a, REPAIR_BASE + i, kvs_deadline_after(LONG_NS), KVS_SHM_CLAIM_OPEN,
				    false, &f));
		KVS_CHECK_EQ(f.idx, refs[i].idx);
		KVS_CHECK_EQ(f.gen, refs[i].gen);
	}
	KVS_CHECK_EQ(kvs_core_claims_check(a, 8), 0);
	KVS_CHECK_OK(kvs_cache_check(a));
	kvs_cache_close(a);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "count_distinct", test_count_distinct },
	{ "stale_generation", test_stale_generation },
	{ "table_full", test_table_full },
	{ "protects", test_protects },
	{ "dead_writer", test_dead_writer },
	{ "lock_repair", test_lock_repair },
};

KVS_TEST_MAIN(cases)
