/*
 * core/stats.c — what the cache can say about itself: counters per rank and for
 * the node (kvs_cache_stats), and the invariant checker (kvs_cache_check): the
 * header and segment table, the rank table, then every bucket.
 *
 * Counters are relaxed atomics written by the rank that counts and summed racily
 * here: they are statistics.  The checker verifies each invariant of layout.h
 * bucket by bucket under that bucket's lock (what a lock guards is exact there),
 * using unlocked pre-pass counts only as hints that are recounted under the lock
 * before anything is called broken; it logs every violation it finds.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "wait/wait.h"

static void add_stats(struct kvs_cache_stats *o, struct kvs_shm_stats *s)
{
	/* relaxed: statistics */
#define ADD(f) o->f += atomic_load_explicit(&s->f, memory_order_relaxed)
	ADD(hits);
	ADD(misses);
	ADD(owner_fills);
	ADD(waits);
	ADD(wait_ns);
	ADD(failures);
	ADD(evictions);
	ADD(clock_sweeps);
	ADD(takeovers);
	ADD(lock_repairs);
	ADD(ranks_reaped);
	ADD(enospc);
#undef ADD
}

KVS_API int kvs_cache_stats(struct kvs_cache *c, int rank, struct kvs_cache_stats *o)
{
	if (!c || !o || rank < KVS_STATS_NODE || rank >= (int)KVS_MAX_RANKS)
		return -EINVAL;
	memset(o, 0, sizeof(*o));
	if (rank == KVS_STATS_NODE) {
		add_stats(o, &c->hdr->departed);
		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
			add_stats(o, &c->ranks[r].stats);
	} else {
		add_stats(o, &c->ranks[rank].stats);
	}
	/* relaxed: statistics */
	o->lrs_mismatch = atomic_load_explicit(&c->hdr->lrs_mismatch, memory_order_relaxed);
	o->fallbacks = c->hdr->fallbacks;
	o->adoptions = atomic_load_explicit(&c->hdr->adopt_count, memory_order_relaxed);
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		/* acquire: pairs with the release of attach (device_id) */
		if (atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) !=
		    KVS_SHM_RANK_ATTACHED)
			continue;
		o->ranks_attached++;
		if (c->ranks[r].device_id >= 0)
			o->gpu_ranks_attached++;
	}
	o->slot_count = c->slot_count;
	o->slot_bytes = c->slot_bytes;
	for (uint32_t i = 0; i < c->slot_count; i++) {
		/* relaxed: a census, not a snapshot */
		uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;

		o->slots_ready += st == KVS_SHM_SLOT_READY;
		o->slots_loading += st == KVS_SHM_SLOT_LOADING;
		o->slots_failed += st == KVS_SHM_SLOT_FAILED;
		o->slots_pinned += atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed) != 0;
	}
	return 0;
}

#define BROKEN(...)                                                                     \
	do {                                                                            \
		kvs_log_error(&c->log, "check: " __VA_ARGS__);                         \
		bad++;                                                                  \
	} while (0)

/* Exact number of pin entries naming slot i (its bucket locked: stable). */
static uint32_t pins_of(struct kvs_cache *c, uint32_t i)
{
	uint32_t n = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++)
			n += (atomic_load_explicit(&c->ranks[r].pins[p], memory_order_relaxed) &
			      KVS_PIN_SLOT_MASK) == i + 1;
	return n;
}

/* Exact number of slots whose bucket_idx is b (b locked: stable). */
static uint32_t members_of(struct kvs_cache *c, uint32_t b)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->slot_count; i++)
		n += atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed) == b;
	return n;
}

/* Bucket b's invariants, b locked.  pins and members are unlocked pre-pass
 * counts: a mismatch is recounted exactly under the lock before it is called
 * broken, so a busy cache gives no false reports. */
static int check_bucket(struct kvs_cache *c, uint32_t b, const uint32_t *pins,
			const uint32_t *members)
{
	uint32_t n = 0;
	int bad = 0;

	for (uint32_t i = c->buckets[b].head; i != KVS_IDX_NONE; i = c->slots[i].next) {
		if (i >= c->slot_count) {
			BROKEN("bucket %u: link to slot %u of %u", b, i, c->slot_count);
			return bad;
		}
		if (++n > c->slot_count) {
			BROKEN("bucket %u: chain has a cycle", b);
			return bad;
		}
		struct kvs_shm_slot *s = &c->slots[i];
		uint32_t sb = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed);
		uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
		uint32_t ref = atomic_load_explicit(&s->ref, memory_order_relaxed);

		if (sb != b)
			BROKEN("slot %u on bucket %u's chain says bucket %u", i, b, sb);
		if (ref != pins[i] && ref != pins_of(c, i))
			BROKEN("slot %u: ref %u but %u pin entries", i, ref, pins_of(c, i));
		if (st > KVS_SHM_SLOT_FAILED)
			BROKEN("slot %u: state %u", i, st);
		if (st == KVS_SHM_SLOT_EMPTY || st > KVS_SHM_SLOT_FAILED)
			continue;
		if (s->shard >= c->shards_per_block)
			BROKEN("slot %u: shard %u >= %u", i, s->shard, c->shards_per_block);
		if (kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard)) != b)
			BROKEN("slot %u: key hashes to bucket %u, sits on %u", i,
			       kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard)), b);
		if (st == KVS_SHM_SLOT_FAILED && atomic_load_explicit(&s->error, memory_order_relaxed) >= 0)
			BROKEN("slot %u: FAILED with error %d", i,
			       atomic_load_explicit(&s->error, memory_order_relaxed));
		for (uint32_t j = s->next, m = 0; j < c->slot_count && m < c->slot_count;
		     j = c->slots[j].next, m++) {
			uint32_t sj = atomic_load_explicit(&c->states[j], memory_order_relaxed) &
				      KVS_WAIT_VALUE_MASK;
			if (sj != KVS_SHM_SLOT_EMPTY && c->slots[j].shard == s->shard &&
			    memcmp(&c->slots[j].block, &s->block, 16) == 0)
				BROKEN("slots %u and %u hold the same key", i, j);
		}
	}
	if (n != members[b] && n != members_of(c, b))
		BROKEN("bucket %u: %u slots on its chain, %u say they are on it", b, n, members_of(c, b));
	return bad;
}

/* The header still says what it said at open: valid, and the geometry this
 * handle copied (a header rewritten under live ranks is corruption). */
static int check_header(struct kvs_cache *c)
{
	const struct kvs_shm_header *h = c->hdr;
	struct stat st;
	int bad = 0;

	if (fstat(c->ctl_fd, &st) != 0)
		return -errno;
	if (kvs_core_header_validate(h, (uint64_t)st.st_size, c->cfg.unique_id, &c->log))
		return 1;
	if (h->fp.slot_count != c->slot_count || h->fp.slot_bytes != c->slot_bytes ||
	    h->fp.bucket_count != c->bucket_mask + 1 || h->fp.shards_per_block != c->shards_per_block ||
	    h->fp.seg_count != c->seg_count)
		BROKEN("header geometry changed since this process attached");
	for (uint32_t s = 0; s < c->seg_count && s < h->fp.seg_count; s++)
		if (h->segs[s].first_slot != c->geo[s].first_slot ||
		    h->segs[s].slot_count != c->geo[s].slot_count ||
		    h->segs[s].reserved_count != c->geo[s].reserved_count)
			BROKEN("header segs[%u] changed since this process attached", s);
	return bad;
}

/* Pre-pass over the rank table, under the lifecycle lock: pins per slot (hints:
 * live ranks pin and release meanwhile), and entries that cannot be right
 * whatever is running (bad state, pins of free entries, pins naming no slot). */
static int check_ranks(struct kvs_cache *c, uint32_t *pins)
{
	int bad = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];
		uint32_t state = atomic_load_explicit(&e->state, memory_order_acquire);
		uint32_t held = 0;

		if (state > KVS_SHM_RANK_ATTACHED)
			BROKEN("rank %u: state %u", r, state);
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
			uint32_t v = atomic_load_explicit(&e->pins[p], memory_order_relaxed) &
				     KVS_PIN_SLOT_MASK;

			if (v == 0)
				continue;
			held++;
			if (v > c->slot_count)
				BROKEN("rank %u pin %u names slot %u of %u", r, p, v - 1, c->slot_count);
			else
				pins[v - 1]++;
		}
		/* A free entry's pins would hold refs nobody drops (entries go
		 * free and get taken under the lifecycle lock, which we hold). */
		if (held && state == KVS_SHM_RANK_FREE)
			BROKEN("rank %u is free but holds %u pins", r, held);
	}
	return bad;
}

KVS_API int kvs_cache_check(struct kvs_cache *c)
{
	uint32_t *pins, *members;
	int rc = 0, bad = 0;

	if (!c)
		return -EINVAL;
	rc = check_header(c);
	if (rc < 0)
		return rc;
	if (rc > 0)
		return -KVS_ECORRUPT; /* nothing below can be trusted */
	pins = calloc(c->slot_count, sizeof(*pins));
	members = calloc(c->bucket_mask + 1, sizeof(*members));
	if (!pins || !members) {
		free(pins);
		free(members);
		return -ENOMEM;
	}
	/* Pre-pass (relaxed: hints, verified under the bucket locks). */
	rc = kvs_core_lifecycle_enter(c);
	if (rc == 0) {
		bad += check_ranks(c, pins);
		kvs_core_lifecycle_exit(c);
	}
	for (uint32_t i = 0; i < c->slot_count; i++) {
		uint32_t b = atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed);

		if (b > c->bucket_mask)
			BROKEN("slot %u: bucket_idx %u of %llu", i, b,
			       (unsigned long long)c->bucket_mask + 1);
		else
			members[b]++;
	}
	/* One bucket at a time: what a bucket's lock guards is checked exactly. */
	for (uint64_t b = 0; b <= c->bucket_mask && rc == 0; b++) {
		rc = kvs_core_bucket_lock(c, (uint32_t)b);
		if (rc == 0) {
			bad += check_bucket(c, (uint32_t)b, pins, members);
			kvs_core_bucket_unlock(c, (uint32_t)b);
		}
	}
	free(pins);
	free(members);
	if (rc)
		return rc;
	return bad ? -KVS_ECORRUPT : 0;
}
