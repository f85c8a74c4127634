/*
 * core/stats.c — what the cache can say about itself: counters per rank and for
 * the node (kvs_cache_stats), and the invariant checker (kvs_cache_check).
 *
 * Counters are relaxed atomics written by the rank that counts and summed racily
 * here: they are statistics.  The checker instead wants a consistent snapshot:
 * it takes every bucket lock in index order (everyone else takes at most one
 * lock blocking, plus others only by trylock, so this cannot deadlock), verifies
 * each invariant of layout.h and logs every violation it finds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

/* Every invariant, all bucket locks held. */
static int check_locked(struct kvs_cache *c, uint32_t *pins, uint8_t *seen)
{
	int bad = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];
		uint32_t state = atomic_load_explicit(&e->state, memory_order_acquire);

		if (state > KVS_SHM_RANK_ATTACHED)
			BROKEN("rank %u: state %u", r, state);
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
			uint32_t v = atomic_load_explicit(&e->pins[p], memory_order_relaxed);

			if (v == 0)
				continue;
			if (state == KVS_SHM_RANK_FREE)
				BROKEN("rank %u is free but pins slot %u", r, v - 1);
			if (v - 1 >= c->slot_count)
				BROKEN("rank %u pin %u names slot %u of %u", r, p, v - 1, c->slot_count);
			else
				pins[v - 1]++;
		}
	}
	for (uint64_t b = 0; b <= c->bucket_mask; b++) {
		uint32_t n = 0;

		for (uint32_t i = c->buckets[b].head; i != KVS_IDX_NONE; i = c->slots[i].next) {
			if (i >= c->slot_count) {
				BROKEN("bucket %llu: link to slot %u of %u", (unsigned long long)b, i,
				       c->slot_count);
				break;
			}
			if (seen[i]++) {
				BROKEN("slot %u is on two chains (or a cycle, bucket %llu)", i,
				       (unsigned long long)b);
				break;
			}
			if (++n > c->slot_count)
				break;
			struct kvs_shm_slot *s = &c->slots[i];
			uint32_t sb = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed);
			uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) &
				      KVS_WAIT_VALUE_MASK;

			if (sb != b)
				BROKEN("slot %u on bucket %llu's chain says bucket %u", i,
				       (unsigned long long)b, sb);
			if (st > KVS_SHM_SLOT_FAILED)
				BROKEN("slot %u: state %u", i, st);
			if (st == KVS_SHM_SLOT_EMPTY)
				continue;
			if (kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard)) != b)
				BROKEN("slot %u: key hashes to bucket %u, sits on %llu", i,
				       kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard)),
				       (unsigned long long)b);
			if (s->shard >= c->hdr->fp.shards_per_block)
				BROKEN("slot %u: shard %u >= %u", i, s->shard, c->hdr->fp.shards_per_block);
			if (st == KVS_SHM_SLOT_FAILED &&
			    atomic_load_explicit(&s->error, memory_order_relaxed) >= 0)
				BROKEN("slot %u: FAILED with error %d", i,
				       atomic_load_explicit(&s->error, memory_order_relaxed));
			for (uint32_t j = s->next, m = 0; j != KVS_IDX_NONE && j < c->slot_count &&
			     m < c->slot_count; j = c->slots[j].next, m++) {
				uint32_t sj = atomic_load_explicit(&c->states[j], memory_order_relaxed) &
					      KVS_WAIT_VALUE_MASK;
				if (sj != KVS_SHM_SLOT_EMPTY && c->slots[j].shard == s->shard &&
				    memcmp(&c->slots[j].block, &s->block, 16) == 0)
					BROKEN("slots %u and %u hold the same key", i, j);
			}
		}
	}
	for (uint32_t i = 0; i < c->slot_count; i++) {
		uint32_t ref = atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed);

		if (!seen[i])
			BROKEN("slot %u is on no chain (bucket_idx %u)", i,
			       atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed));
		if (ref != pins[i])
			BROKEN("slot %u: ref %u but %u pin entries", i, ref, pins[i]);
	}
	return bad;
}

KVS_API int kvs_cache_check(struct kvs_cache *c)
{
	uint32_t *pins;
	uint8_t *seen;
	uint64_t locked = 0;
	int rc = 0, bad = 0;

	if (!c)
		return -EINVAL;
	pins = calloc(c->slot_count, sizeof(*pins));
	seen = calloc(c->slot_count, 1);
	if (!pins || !seen) {
		free(pins);
		free(seen);
		return -ENOMEM;
	}
	for (; locked <= c->bucket_mask; locked++) {
		rc = kvs_core_bucket_lock(c, (uint32_t)locked);
		if (rc)
			break;
	}
	if (rc == 0)
		bad = check_locked(c, pins, seen);
	while (locked-- > 0)
		kvs_core_bucket_unlock(c, (uint32_t)locked);
	free(pins);
	free(seen);
	if (rc)
		return rc;
	return bad ? -KVS_ECORRUPT : 0;
}
