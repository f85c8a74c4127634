/*
 * core/clock.c — CLOCK eviction: finding a slot for a new key.
 *
 * Per data segment and pool (main / reserved): the hand is a shared counter
 * advanced with fetch_add (no lock).  A candidate that is pinned is skipped; one
 * with a CLOCK weight loses one unit of it; one at weight 0 is taken if its
 * bucket can be locked: the caller already holds its own bucket B, and takes the
 * victim's bucket A only with trylock (A before B would be the usual order;
 * trylock cannot deadlock, a busy A just means "next candidate").  At most
 * KVS_CLOCK_WEIGHT_MAX + 1 sweeps (enough to bring every weight to 0 and find
 * one), then -ENOSPC: never spin under a bucket lock.
 *
 * A slot pinned lock-free (a bit in its readers word: core/pin.c) is skipped
 * like one with a ref; claim() takes it from them by a CAS of that word, which
 * also keeps new lock-free pins off it until its new key is published.
 *
 * A DIRTY slot (a dump's bytes, not yet in the backend) is never taken, whatever
 * its age: it is the record of what is to be written (core/layout.h, "Dumps");
 * only its block's writer (cleaned) or the holder of its block's claim
 * (dropped) makes it evictable.
 *
 * Pools: gets take the main pool, then (KVS_GET_ALLOW_RESERVED: prefetch) the
 * reserved one; prealloc takes only the reserved pool, so it never evicts READY
 * data for a guess (the main pool only in a cache with no reserved pool).
 *
 * Weights (refbits[], one byte per slot, core/layout.h) instead of a single
 * reference bit: allocation gives 1, a new use of a resident slot adds 1 up to
 * KVS_CLOCK_WEIGHT_MAX (core/slot.c: clock_alloc / clock_use), the hand takes 1
 * per pass.  A block read once survives one pass, a block reused survives two:
 * with one bit both survived one pass and CLOCK degraded towards FIFO when most
 * of the cache turns over between passes; on the public Mooncake traces this
 * loses up to 2 points of hit ratio to LRU, against 0.1 with weights
 * (docs/replay.md, "Results on the Mooncake traces").  A "use" is counted
 * once per use episode, not once per rank: a get that joins a slot other ranks
 * already pin (the TP ranks of one request) leaves the weight as it is
 * (slot.c).
 *
 * The pools' bounds come from the handle's copy of the segment table, validated
 * at open: the shared header's copy is never read here (another process could
 * rewrite it).  Only the hands live in shared memory, and a hand is used modulo
 * the pool size, so any value is harmless.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

/* Try to take slot v for bucket b (b locked).  true: v is EMPTY, unpinned and on
 * b's chain (its old key gone), its readers word closed to lock-free pins
 * (pin.c): the caller opens it once the slot is keyed. */
static bool claim(struct kvs_cache *c, uint32_t b, uint32_t v)
{
	struct kvs_shm_slot *s = &c->slots[v];
	/* relaxed: rechecked under the lock below */
	uint32_t a = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed), st;
	bool locked_a = false, ok = false;

	if (a > c->bucket_mask)
		return false;
	if (a != b) {
		if (kvs_core_bucket_trylock(c, a))
			return false;
		locked_a = true;
		if (atomic_load_explicit(&s->bucket_idx, memory_order_relaxed) != a)
			goto out;
	}
	if (atomic_load_explicit(&s->ref, memory_order_relaxed) != 0)
		goto out;
	/* relaxed: a DIRTY slot leaves DIRTY only under this bucket lock, held */
	st = atomic_load_explicit(&c->states[v], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
	if (st == KVS_SHM_SLOT_DIRTY)
		goto out; /* a dump's bytes, not in the backend yet: never ours */
	if (!kvs_core_readers_close(c, v))
		goto out; /* pinned lock-free */
	if (st != KVS_SHM_SLOT_EMPTY) {
		KVS_COUNT(c, evictions, 1);
		/* EMPTY first: from here the old key is gone even if we die.  No
		 * waiter can be sleeping (ref is 0): a plain publish suffices. */
		kvs_wait_publish(&c->states[v], KVS_SHM_SLOT_EMPTY);
	}
	if (a != b)
		kvs_core_chain_move(c, v, a, b);
	ok = true;
out:
	if (locked_a)
		kvs_core_bucket_unlock(c, a);
	return ok;
}

/*
 * How far ahead of the hand clock_pool prefetches, in candidates.  claim()
 * locks a victim's bucket: a line picked at random by the victim's old key,
 * missed in the caches at nearly every eviction (perf, hit_bench --path cold:
 * an eighth of the dispatcher's own time was its first touch, in
 * mutex_sane).  The slots themselves are read in hand order, which the
 * hardware prefetcher follows; their buckets are not.  At one candidate or
 * two per eviction, 8 ahead is several evictions (microseconds) before the
 * lock, long enough for the line to arrive.
 */
#define CLOCK_AHEAD 8

/* Prefetch, for writing, the bucket of the slot CLOCK_AHEAD candidates after
 * the pool's r-th, if that slot would be taken then: unpinned, weight 0 (a
 * slot with weight left is only aged on this pass).  Racy peeks, relaxed: a
 * hint, claim() decides; a bucket index out of range (written by someone else)
 * prefetches nothing. */
static void prefetch_ahead(struct kvs_cache *c, uint64_t first, uint64_t count, uint64_t r)
{
	uint64_t ra = r + CLOCK_AHEAD;
	uint32_t v, a;

	if (ra >= count) /* a division only at the wrap (or in a pool this small) */
		ra %= count;
	v = (uint32_t)(first + ra);

	if (atomic_load_explicit(&c->refbits[v], memory_order_relaxed) ||
	    atomic_load_explicit(&c->slots[v].ref, memory_order_relaxed) ||
	    atomic_load_explicit(&c->slots[v].readers, memory_order_relaxed))
		return;
	a = atomic_load_explicit(&c->slots[v].bucket_idx, memory_order_relaxed);
	if (a <= c->bucket_mask)
		__builtin_prefetch(&c->buckets[a], 1);
}

/* One pool: slots [first, first + count) with its hand. */
static int clock_pool(struct kvs_cache *c, uint32_t b, _Atomic uint64_t *hand, uint64_t first,
		      uint64_t count, uint32_t *victim)
{
	if (count == 0)
		return -ENOSPC;
	for (uint64_t n = 0; n < (KVS_CLOCK_WEIGHT_MAX + 1) * count; n++) {
		uint8_t w;

		/* relaxed: the hand only spreads candidates; the claim is decided
		 * under the bucket locks */
		uint64_t r = atomic_fetch_add_explicit(hand, 1, memory_order_relaxed) % count;
		uint32_t v = (uint32_t)(first + r);

		prefetch_ahead(c, first, count, r);
		if (r == count - 1)
			KVS_COUNT(c, clock_sweeps, 1);
		if (atomic_load_explicit(&c->slots[v].ref, memory_order_relaxed) != 0 ||
		    atomic_load_explicit(&c->slots[v].readers, memory_order_relaxed) != 0)
			continue; /* pinned: racy peeks, claim() rechecks */
		/* relaxed: the weight is a heuristic (layout.h); a racing use
		 * that this store overwrites costs one pass of protection, never
		 * correctness.  Not trusted: a byte above the maximum (another
		 * process wrote it) counts as the maximum, so the bound holds. */
		w = atomic_load_explicit(&c->refbits[v], memory_order_relaxed);
		if (w) {
			if (w > KVS_CLOCK_WEIGHT_MAX)
				w = KVS_CLOCK_WEIGHT_MAX;
			atomic_store_explicit(&c->refbits[v], (uint8_t)(w - 1), memory_order_relaxed);
			continue;
		}
		if (claim(c, b, v)) {
			*victim = v;
			return 0;
		}
	}
	return -ENOSPC;
}

int kvs_core_clock_victim(struct kvs_cache *c, uint32_t b, enum kvs_core_pool pool, uint32_t *victim)
{
	for (uint32_t k = 0; k < c->seg_count; k++) {
		uint32_t s = (c->home_seg + k) % c->seg_count;
		struct kvs_shm_seg *sg = &c->hdr->segs[s];
		const struct kvs_core_seg *g = &c->geo[s];
		uint64_t main_count = g->slot_count - g->reserved_count;
		/* prealloc: the reserved pool only, unless the cache has none */
		bool main_ok = pool != KVS_CORE_POOL_PREALLOC || g->reserved_count == 0;

		if (pool == KVS_CORE_POOL_PREALLOC &&
		    clock_pool(c, b, &sg->reserved_hand, g->first_slot + main_count,
			       g->reserved_count, victim) == 0)
			return 0;
		if (main_ok && clock_pool(c, b, &sg->hand, g->first_slot, main_count, victim) == 0)
			return 0;
		if (pool == KVS_CORE_POOL_ANY &&
		    clock_pool(c, b, &sg->reserved_hand, g->first_slot + main_count,
			       g->reserved_count, victim) == 0)
			return 0;
	}
	KVS_COUNT(c, enospc, 1);
	return -ENOSPC;
}
