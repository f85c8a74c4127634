/*
 * core/index.c — the hash index: bucket locks, chains, repair, CLOCK eviction.
 *
 * Every slot is always on exactly one bucket chain: its bucket_idx field says
 * which (the truth), the chain links are a cache of it.  A keyed slot sits on
 * the bucket of its key's hash; an EMPTY slot may sit anywhere (initially slot i
 * sits on bucket i, buckets >= slots).  Chains, keys, refs and pins of a
 * bucket's slots change only under that bucket's lock.
 *
 * Locks are robust process-shared mutexes taken with a deadline
 * (pthread_mutex_timedlock).  EOWNERDEAD means the holder
 * died at some instruction of a chain edit, a re-key or a pin update; the new
 * holder rebuilds the chain from bucket_idx, recounts refs from the pin tables
 * (dead ranks' pins included: the reaper drops them later, one by one) and
 * only then marks the mutex consistent.  Nothing is ever "ignored".
 *
 * CLOCK, per data segment and pool (main / reserved): the hand is a shared
 * counter advanced with fetch_add (no lock).  A candidate that is pinned is
 * skipped; one with its reference bit set loses the bit; an unreferenced one is
 * taken if its bucket can be locked: the caller already holds its own bucket B,
 * and takes the victim's bucket A only with trylock (A before B would be the
 * usual order; trylock cannot deadlock, a busy A just means "next candidate").
 * At most two sweeps, then -ENOSPC: never spin under a bucket lock.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

int kvs_core_mutex_init(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int rc;

	pthread_mutexattr_init(&a);
	pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	rc = pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
	return -rc;
}

static inline bool key_eq(const struct kvs_shm_slot *s, const struct kvs_block_id *block,
			  uint32_t shard)
{
	return s->shard == shard && memcmp(s->block.bytes, block->bytes, 16) == 0;
}

static inline uint32_t state_of(struct kvs_cache *c, uint32_t i)
{
	/* relaxed: read under the bucket lock, which orders every re-key; the
	 * value bits only (WAITERS is the waiters' business) */
	return atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
}

void kvs_core_bucket_repair(struct kvs_cache *c, uint32_t b)
{
	struct kvs_shm_bucket *bk = &c->buckets[b];
	uint32_t head = KVS_IDX_NONE;

	/* Chain: every slot whose bucket_idx is b, nothing else.  bucket_idx of
	 * other slots cannot become b (that needs b's lock, which we hold).
	 * relaxed: stable under our lock. */
	for (uint32_t i = c->slot_count; i-- > 0;) {
		struct kvs_shm_slot *s = &c->slots[i];

		if (atomic_load_explicit(&s->bucket_idx, memory_order_relaxed) != b)
			continue;
		s->next = head;
		head = i;
		atomic_store_explicit(&s->ref, 0, memory_order_relaxed);
		/* A keyed slot whose key does not hash here was mid-re-key: the
		 * re-key sets EMPTY before writing the key, so this is only
		 * defensive; make it EMPTY so it is never found under a wrong key. */
		if (state_of(c, i) != KVS_SHM_SLOT_EMPTY &&
		    kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard)) != b)
			kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_EMPTY);
	}
	bk->head = head;
	/* Refs: the pin entries naming this bucket's slots, over every rank entry
	 * (dead ones too).  Pins of our slots change only under our lock. */
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
			/* relaxed: written under the bucket lock we hold (or by a
			 * dead process, whose writes the kernel made visible) */
			uint32_t v = atomic_load_explicit(&c->ranks[r].pins[p], memory_order_relaxed);

			if (v == 0 || v - 1 >= c->slot_count)
				continue;
			if (atomic_load_explicit(&c->slots[v - 1].bucket_idx, memory_order_relaxed) == b)
				atomic_fetch_add_explicit(&c->slots[v - 1].ref, 1, memory_order_relaxed);
		}
	}
}

static int bucket_acquired(struct kvs_cache *c, uint32_t b, int rc)
{
	if (rc == EOWNERDEAD) {
		kvs_log_warn(&c->log, "bucket %u: holder died; rebuilding its chain and refcounts", b);
		kvs_core_bucket_repair(c, b);
		rc = pthread_mutex_consistent(&c->buckets[b].lock);
		if (c->me)
			KVS_COUNT(c, lock_repairs, 1);
		if (rc) {
			pthread_mutex_unlock(&c->buckets[b].lock);
			return -rc;
		}
	} else if (rc == ENOTRECOVERABLE) {
		/* Only if a repairer died between EOWNERDEAD and consistent and glibc
		 * gave up on the mutex: the segment needs a clean. */
		kvs_log_error(&c->log, "bucket %u: lock not recoverable", b);
		return -KVS_ECORRUPT;
	} else if (rc) {
		if (rc == ETIMEDOUT)
			kvs_log_warn(&c->log, "bucket %u: lock not had within %llu ns (holder %u stopped?)",
				     b, (unsigned long long)c->cfg.lock_timeout_ns,
				     atomic_load_explicit(&c->buckets[b].holder, memory_order_relaxed));
		return -rc;
	}
	/* relaxed: diagnostics only */
	atomic_store_explicit(&c->buckets[b].holder, (uint32_t)(c->rank_idx + 1), memory_order_relaxed);
	return 0;
}

int kvs_core_bucket_lock(struct kvs_cache *c, uint32_t b)
{
	pthread_mutex_t *m = &c->buckets[b].lock;
	int rc = pthread_mutex_trylock(m);

	if (rc == EBUSY) {
		/* pthread_mutex_timedlock (CLOCK_REALTIME), not clocklock: the
		 * sanitizers intercept only the former, and this deadline is a
		 * safety bound (a stopped holder) that a clock step may stretch
		 * or shorten without harm. */
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts = kvs_ns_to_timespec((uint64_t)ts.tv_sec * KVS_NSEC_PER_SEC + (uint64_t)ts.tv_nsec +
					c->cfg.lock_timeout_ns);
		rc = pthread_mutex_timedlock(m, &ts);
#if defined(__SANITIZE_THREAD__)
		/* TSan's timedlock interceptor records the lock only for rc 0 (its
		 * trylock one handles EOWNERDEAD): tell it we hold the mutex. */
		if (rc == EOWNERDEAD) {
			__tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
			__tsan_mutex_post_lock(m, __tsan_mutex_try_lock, 0);
		}
#endif
	}
	return bucket_acquired(c, b, rc);
}

void kvs_core_bucket_unlock(struct kvs_cache *c, uint32_t b)
{
	atomic_store_explicit(&c->buckets[b].holder, 0, memory_order_relaxed); /* diagnostics */
	pthread_mutex_unlock(&c->buckets[b].lock);
}

int kvs_core_slot_lock(struct kvs_cache *c, uint32_t i, uint32_t *b)
{
	/* bucket_idx only changes under the old bucket's lock: lock what it says,
	 * then recheck (bounded: a slot is re-keyed at most once per eviction). */
	for (int tries = 0; tries < 1000; tries++) {
		/* relaxed: rechecked under the lock */
		uint32_t cur = atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed);
		int rc;

		if (cur > c->bucket_mask)
			return -KVS_ECORRUPT;
		rc = kvs_core_bucket_lock(c, cur);
		if (rc)
			return rc;
		if (atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed) == cur) {
			*b = cur;
			return 0;
		}
		kvs_core_bucket_unlock(c, cur);
	}
	return -EAGAIN;
}

uint32_t kvs_core_find(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		       uint32_t shard)
{
	uint32_t n = 0;

	for (uint32_t i = c->buckets[b].head; i != KVS_IDX_NONE; i = c->slots[i].next) {
		if (i >= c->slot_count || ++n > c->slot_count)
			return KVS_IDX_NONE; /* a corrupt chain: kvs_cache_check reports it */
		if (state_of(c, i) != KVS_SHM_SLOT_EMPTY && key_eq(&c->slots[i], block, shard))
			return i;
	}
	return KVS_IDX_NONE;
}

static void chain_unlink(struct kvs_cache *c, uint32_t b, uint32_t v)
{
	uint32_t *link = &c->buckets[b].head;

	for (uint32_t n = 0; *link != KVS_IDX_NONE && n <= c->slot_count; n++) {
		if (*link == v) {
			*link = c->slots[v].next;
			return;
		}
		link = &c->slots[*link].next;
	}
}

/* Try to take slot v for bucket b (b locked).  true: v is EMPTY, unpinned and on
 * b's chain (its old key gone). */
static bool claim(struct kvs_cache *c, uint32_t b, uint32_t v)
{
	struct kvs_shm_slot *s = &c->slots[v];
	/* relaxed: rechecked under the lock below */
	uint32_t a = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed);
	bool locked_a = false, ok = false;
	uint32_t st;

	if (a > c->bucket_mask)
		return false;
	if (a != b) {
		int rc = pthread_mutex_trylock(&c->buckets[a].lock);

		if (rc == EBUSY || bucket_acquired(c, a, rc))
			return false;
		locked_a = true;
		if (atomic_load_explicit(&s->bucket_idx, memory_order_relaxed) != a)
			goto out;
	}
	if (atomic_load_explicit(&s->ref, memory_order_relaxed) != 0)
		goto out;
	st = state_of(c, v);
	if (st != KVS_SHM_SLOT_EMPTY) {
		KVS_COUNT(c, evictions, 1);
		/* EMPTY first: from here the old key is gone even if we die.  No
		 * waiter can be sleeping (ref is 0): a plain publish suffices. */
		kvs_wait_publish(&c->states[v], KVS_SHM_SLOT_EMPTY);
	}
	if (a != b) {
		/* bucket_idx first (the truth), then the chains: a death in
		 * between is repaired from bucket_idx by both buckets' next holders. */
		atomic_store_explicit(&s->bucket_idx, b, memory_order_relaxed);
		chain_unlink(c, a, v);
		s->next = c->buckets[b].head;
		c->buckets[b].head = v;
	}
	ok = true;
out:
	if (locked_a)
		kvs_core_bucket_unlock(c, a);
	return ok;
}

/* One pool: slots [first, first + count) with its hand. */
static int clock_pool(struct kvs_cache *c, uint32_t b, _Atomic uint64_t *hand, uint64_t first,
		      uint64_t count, uint32_t *victim)
{
	if (count == 0)
		return -ENOSPC;
	for (uint64_t n = 0; n < 2 * count; n++) {
		/* relaxed: the hand only spreads candidates; the claim is decided
		 * under the bucket locks */
		uint64_t h = atomic_fetch_add_explicit(hand, 1, memory_order_relaxed);
		uint32_t v = (uint32_t)(first + h % count);

		if (h % count == count - 1)
			KVS_COUNT(c, clock_sweeps, 1);
		if (atomic_load_explicit(&c->slots[v].ref, memory_order_relaxed) != 0)
			continue; /* pinned: racy peek, claim() rechecks */
		/* relaxed: the reference bit is a heuristic (layout.h) */
		if (atomic_load_explicit(&c->refbits[v], memory_order_relaxed)) {
			atomic_store_explicit(&c->refbits[v], 0, memory_order_relaxed);
			continue;
		}
		if (claim(c, b, v)) {
			*victim = v;
			return 0;
		}
	}
	return -ENOSPC;
}

int kvs_core_clock_victim(struct kvs_cache *c, uint32_t b, bool allow_reserved, uint32_t *victim)
{
	for (uint32_t k = 0; k < c->seg_count; k++) {
		struct kvs_shm_seg *sg = &c->hdr->segs[(c->home_seg + k) % c->seg_count];
		uint64_t main_count = sg->slot_count - sg->reserved_count;

		if (clock_pool(c, b, &sg->hand, sg->first_slot, main_count, victim) == 0)
			return 0;
		if (allow_reserved &&
		    clock_pool(c, b, &sg->reserved_hand, sg->first_slot + main_count,
			       sg->reserved_count, victim) == 0)
			return 0;
	}
	KVS_COUNT(c, enospc, 1);
	return -ENOSPC;
}

int kvs_core_test_hold_bucket(struct kvs_cache *c, const struct kvs_block_id *block,
			      uint32_t shard)
{
	return kvs_core_bucket_lock(c, kvs_core_bucket_of(c, kvs_core_hash(block, shard)));
}
