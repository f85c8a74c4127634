/*
 * core/claim.c — dump claims: who writes a block the ranks of a node dump shard
 * by shard, and how the others learn that it is durable.
 *
 * A backend stores a block whole (the posix backend assembles it in one temp
 * file and renames it when every shard is in), but the shards of one block reach
 * the cache from any rank, in any order, in any number of tasks (layer-wise
 * dumps, per-rank parts, duplicates).  So the block has a claim in shared
 * memory, found by block id:
 *
 *   count     a dump that gathered a shard publishes its slot DIRTY (bytes valid,
 *             not durable) and counts it in the claim; a dump that finds the
 *             shard DIRTY already counts it too if it is not counted yet.  The
 *             slot's tag (kvs_shm_slot.claim) names the claim generation it was
 *             counted in, so each distinct shard counts once.
 *   elect     once the block is complete (counted == shards per block) one rank
 *             becomes its writer: state WRITING, writer = its rank entry and
 *             epoch.  It writes every shard from the cache and ends the claim
 *             DURABLE (or FAILED with the write's error); the slots go READY.
 *             Who: the rank that gathered the block's designated shard (a hash
 *             of the block picks the shard; with rotated visiting orders each
 *             rank gathers its own slice of the shards, so the writes spread
 *             over the ranks whatever their timing), which the completer
 *             rings; any rank that joined, once that one is dead or late (the
 *             store's policy).
 *   wait      every other dump of the block waits for that end (dump_wait =
 *             durable): its rank entry is in the claim's waiters mask, and the
 *             end bumps each waiter's bell (kvs_shm_rank.bell).  A writer that
 *             died (its liveness lock dropped) is replaced by the first waiter
 *             that elects itself; so is a completer that died before electing.
 *   found     a dump that finds a shard of the block READY (read from the backend,
 *             or written and cleaned) knows the block is in the backend: an OPEN
 *             claim of it ends DURABLE there and then, its waiters rung
 *             (kvs_core_claim_found), so dumps that cannot complete the count
 *             (a shard they skip as READY) still learn that they are durable.
 *   expire    a claim lives until the latest deadline of the tasks that joined
 *             it (expires_ns); past it, an OPEN claim (a block that never
 *             completed) is reclaimed and its DIRTY slots become evictable
 *             again.  Until then a DIRTY slot tagged with a live claim is never
 *             evicted (kvs_core_claim_protects, CLOCK).  An ended claim is kept a
 *             little (KVS_CLAIM_GRACE_NS) so that its waiters read the outcome;
 *             a DURABLE one then tells later dumps of the block that it is
 *             already in the backend.
 *
 * The table: claim_count entries (a power of two), hash chains by block id, a
 * free list; chains, free list, keys, waiters and expiry change under one robust
 * process-shared mutex in the header (claims_lock).  Counting does not take it:
 * gencount (generation << 32 | counted) is changed by CAS, so a count made on a
 * generation that was restarted meanwhile fails (-ESTALE) instead of landing in
 * another attempt's count.  A holder killed at any instruction leaves states
 * that say what each entry is; the next holder rebuilds chains and the free list
 * from them (claims_repair).
 *
 * Lock-free readers (CLOCK, waiters) read gencount, then state, then gencount
 * again: an entry reused for another generation always changes gencount before
 * its new state is published (release), so a stable generation means the state
 * read is that generation's.
 *
 * Memory orders are commented where they happen; fields written under the lock
 * are read under it relaxed.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"


static inline uint32_t gen_of(uint64_t gencount)
{
	return (uint32_t)(gencount >> 32);
}

static inline uint32_t count_of(uint64_t gencount)
{
	return (uint32_t)gencount;
}

uint64_t kvs_core_claim_tag(const struct kvs_claim_ref *ref)
{
	return (uint64_t)(ref->idx + 1) << 32 | ref->gen;
}

uint32_t kvs_core_claim_chain(const struct kvs_cache *c, const struct kvs_block_id *block)
{
	/* a key of its own: no shard value is UINT32_MAX */
	return (uint32_t)(kvs_core_hash(block, UINT32_MAX) & c->claim_mask);
}

static uint64_t self_writer(const struct kvs_cache *c)
{
	return kvs_core_filler((uint32_t)c->rank_idx, c->rank_epoch);
}

/* ---- the table lock ---- */

/* Rebuild chains and free list from the entries' states (lock held, its holder
 * died).  Each entry's state says what it is; a claim whose block sits on no
 * chain is linked, a FREE one popped but never used goes back to the free list. */
static void claims_repair(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	uint32_t free_head = KVS_IDX_NONE;

	for (uint32_t b = 0; b <= c->claim_mask; b++)
		c->claim_heads[b] = KVS_IDX_NONE;
	for (uint32_t i = c->claim_mask + 1; i-- > 0;) {
		struct kvs_shm_claim *e = &c->claims[i];
		/* relaxed: under the lock (the dead holder's writes are visible) */
		uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);

		if (st == KVS_SHM_CLAIM_FREE || st > KVS_SHM_CLAIM_FAILED) {
			atomic_store_explicit(&e->state, KVS_SHM_CLAIM_FREE, memory_order_relaxed);
			e->next = free_head;
			free_head = i;
		} else {
			uint32_t b = kvs_core_claim_chain(c, &e->block);

			e->next = c->claim_heads[b];
			c->claim_heads[b] = i;
		}
	}
	h->claims_free = free_head;
}

static int claims_lock(struct kvs_cache *c)
{
	int rc = kvs_core_mutex_lock(c, &c->hdr->claims_lock, "claim table", KVS_IDX_NONE);

	if (rc == EOWNERDEAD) {
		kvs_log_warn(&c->log, "claim table: holder died; rebuilding chains and free list");
		claims_repair(c);
		rc = pthread_mutex_consistent(&c->hdr->claims_lock);
		if (rc) {
			kvs_core_mutex_unlock(c, &c->hdr->claims_lock);
			return -rc;
		}
		KVS_COUNT(c, lock_repairs, 1);
		return 0;
	}
	if (rc == ENOTRECOVERABLE) {
		kvs_log_error(&c->log, "claim table: lock not recoverable");
		return -KVS_ECORRUPT;
	}
	if (rc == ETIMEDOUT && !kvs_core_lock_wait_short(c)) /* a short wait's caller retries */
		kvs_log_warn(&c->log, "claim table: lock not had within %llu ns (a stopped peer?)",
			     (unsigned long long)c->cfg.lock_timeout_ns);
	return rc > 0 ? -rc : rc;
}

static void claims_unlock(struct kvs_cache *c)
{
	kvs_core_mutex_unlock(c, &c->hdr->claims_lock);
}

int kvs_core_claims_init(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;

	/* Nobody else is attached: relaxed stores, published by the lifecycle lock. */
	for (uint32_t b = 0; b <= c->claim_mask; b++)
		c->claim_heads[b] = KVS_IDX_NONE;
	for (uint32_t i = 0; i <= c->claim_mask; i++) {
		struct kvs_shm_claim *e = &c->claims[i];

		memset(&e->block, 0, sizeof(e->block));
		atomic_store_explicit(&e->state, KVS_SHM_CLAIM_FREE, memory_order_relaxed);
		atomic_store_explicit(&e->waiters, 0, memory_order_relaxed);
		e->next = i < c->claim_mask ? i + 1 : KVS_IDX_NONE;
	}
	h->claims_free = 0;
	return kvs_core_mutex_init(&h->claims_lock);
}

/* ---- entries (lock held) ---- */

/* Is entry e's writer alive?  (A writer that never was is not.) */
static bool writer_alive(struct kvs_cache *c, const struct kvs_shm_claim *e)
{
	/* relaxed: under the lock, or a hint rechecked under it */
	uint64_t w = atomic_load_explicit(&e->writer, memory_order_relaxed);

	return w != KVS_FILLER_NONE && kvs_core_rank_alive(c, (uint32_t)(w >> 32), (uint32_t)w);
}

/* May entry e be freed now?  An ended claim past its grace, an OPEN one past
 * its expiry (the block never completed), a WRITING one whose writer died and
 * whose waiters are all past their deadlines. */
static bool reclaimable(struct kvs_cache *c, const struct kvs_shm_claim *e, uint64_t now)
{
	/* relaxed: under the lock */
	uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);
	uint64_t exp = atomic_load_explicit(&e->expires_ns, memory_order_relaxed);

	if (now < exp)
		return false;
	return st != KVS_SHM_CLAIM_WRITING || !writer_alive(c, e);
}

/* Unlink entry i from chain b (bounded walk) and put it on the free list. */
static void entry_free(struct kvs_cache *c, uint32_t b, uint32_t i)
{
	uint32_t *link = &c->claim_heads[b];

	/* FREE first: a death after this leaves an entry the repair puts back. */
	atomic_store_explicit(&c->claims[i].state, KVS_SHM_CLAIM_FREE, memory_order_release);
	for (uint32_t n = 0; *link != KVS_IDX_NONE && *link <= c->claim_mask && n <= c->claim_mask;
	     n++) {
		if (*link == i) {
			*link = c->claims[i].next;
			break;
		}
		link = &c->claims[*link].next;
	}
	c->claims[i].next = c->hdr->claims_free;
	c->hdr->claims_free = i;
	kvs_wait_bump(&c->hdr->claims_bell); /* room for a dump waiting for a claim */
}

/* Start generation gen + 1 of entry e for block, OPEN, with the waiters of
 * the mask (us, for a join). */
static void entry_start(struct kvs_cache *c, struct kvs_shm_claim *e, uint64_t deadline_ns,
			uint64_t waiters, struct kvs_claim_ref *ref)
{
	/* relaxed: under the lock; the generation is CASed by counters, so an
	 * atomic RMW keeps them from landing in the new one */
	uint64_t gc = atomic_load_explicit(&e->gencount, memory_order_relaxed);
	uint32_t gen = gen_of(gc) + 1;

	while (!atomic_compare_exchange_weak_explicit(&e->gencount, &gc, (uint64_t)gen << 32,
						      memory_order_relaxed, memory_order_relaxed))
		gen = gen_of(gc) + 1;
	atomic_store_explicit(&e->writer, KVS_FILLER_NONE, memory_order_relaxed);
	atomic_store_explicit(&e->designate, 0, memory_order_relaxed);
	atomic_store_explicit(&e->error, 0, memory_order_relaxed);
	atomic_store_explicit(&e->expires_ns, deadline_ns, memory_order_relaxed);
	atomic_store_explicit(&e->waiters, waiters, memory_order_relaxed);
	/* release: lock-free readers that see OPEN see the new generation (and
	 * reject the old one: claim_snapshot's double read of gencount) */
	atomic_store_explicit(&e->state, KVS_SHM_CLAIM_OPEN, memory_order_release);
	ref->idx = (uint32_t)(e - c->claims);
	ref->gen = gen;
}

/* A free entry (the free list, else the first reclaimable one found by a scan),
 * or KVS_IDX_NONE. */
static uint32_t entry_alloc(struct kvs_cache *c, uint64_t now)
{
	uint32_t i = c->hdr->claims_free;

	if (i == KVS_IDX_NONE) {
		for (uint32_t b = 0; b <= c->claim_mask && i == KVS_IDX_NONE; b++) {
			for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
			     n <= c->claim_mask; n++) {
				uint32_t next = c->claims[k].next;

				if (reclaimable(c, &c->claims[k], now))
					entry_free(c, b, k);
				k = next;
			}
			i = c->hdr->claims_free;
		}
	}
	if (i == KVS_IDX_NONE || i > c->claim_mask)
		return KVS_IDX_NONE; /* a corrupt head reads as full; check reports it */
	c->hdr->claims_free = c->claims[i].next;
	return i;
}

int kvs_core_claim_join(struct kvs_cache *c, const struct kvs_block_id *block, uint64_t deadline_ns,
			struct kvs_claim_ref *ref, bool *started)
{
	uint32_t b = kvs_core_claim_chain(c, block), found = KVS_IDX_NONE, st;
	uint64_t now = kvs_now_ns();
	struct kvs_shm_claim *e;
	int rc = claims_lock(c);

	*started = false;
	if (rc)
		return rc;
	/* The block's claim; expired ones on the way are freed, the block's own
	 * too: a DURABLE one is proof that the block is stored only within its
	 * grace (the stored copy it speaks of may have vanished since: removed, a
	 * TTL), so past it a dump starts a claim of its own. */
	for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
	     n <= c->claim_mask; n++) {
		uint32_t next = c->claims[k].next;

		if (reclaimable(c, &c->claims[k], now))
			entry_free(c, b, k);
		else if (memcmp(&c->claims[k].block, block, sizeof(*block)) == 0)
			found = k;
		k = next;
	}
	if (found == KVS_IDX_NONE) {
		found = entry_alloc(c, now);
		if (found == KVS_IDX_NONE) {
			claims_unlock(c);
			return -ENOSPC;
		}
		e = &c->claims[found];
		e->block = *block;
		entry_start(c, e, deadline_ns, UINT64_C(1) << c->rank_idx, ref);
		e->next = c->claim_heads[b];
		c->claim_heads[b] = found;
		claims_unlock(c);
		*started = true;
		return KVS_SHM_CLAIM_OPEN;
	}
	e = &c->claims[found];
	/* relaxed: under the lock */
	st = atomic_load_explicit(&e->state, memory_order_relaxed);
	if (st == KVS_SHM_CLAIM_FAILED || (st == KVS_SHM_CLAIM_OPEN && now >= atomic_load_explicit(
		&e->expires_ns, memory_order_relaxed))) {
		/* a new attempt: the failed or expired one's counts are void */
		entry_start(c, e, deadline_ns, UINT64_C(1) << c->rank_idx, ref);
		st = KVS_SHM_CLAIM_OPEN;
		*started = true;
	} else {
		if (st != KVS_SHM_CLAIM_DURABLE) { /* a DURABLE one keeps its grace, and no waiter */
			if (atomic_load_explicit(&e->expires_ns, memory_order_relaxed) < deadline_ns)
				atomic_store_explicit(&e->expires_ns, deadline_ns, memory_order_relaxed);
			atomic_fetch_or_explicit(&e->waiters, UINT64_C(1) << c->rank_idx,
						 memory_order_relaxed);
		}
		ref->idx = found;
		ref->gen = gen_of(atomic_load_explicit(&e->gencount, memory_order_relaxed));
	}
	claims_unlock(c);
	return (int)st;
}

int kvs_core_claims_from_dirty(struct kvs_cache *c, uint64_t expires_ns)
{
	uint32_t complete = 0;

	/* Nobody else is attached (relaxed: the lifecycle lock publishes it). */
	for (uint32_t i = 0; i < c->slot_count; i++) {
		struct kvs_shm_slot *s = &c->slots[i];
		uint32_t b, k, n = 0;
		struct kvs_claim_ref ref;
		uint64_t gc;

		if ((atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK) !=
		    KVS_SHM_SLOT_DIRTY)
			continue;
		b = kvs_core_claim_chain(c, &s->block);
		for (k = c->claim_heads[b]; k != KVS_IDX_NONE && k <= c->claim_mask && n <= c->claim_mask;
		     k = c->claims[k].next, n++)
			if (memcmp(&c->claims[k].block, &s->block, sizeof(s->block)) == 0)
				break;
		if (k == KVS_IDX_NONE || k > c->claim_mask) {
			k = c->hdr->claims_free; /* just re-made by kvs_core_claims_init */
			if (k == KVS_IDX_NONE || k > c->claim_mask)
				continue; /* no entry left: this one stays untagged, evictable */
			c->hdr->claims_free = c->claims[k].next;
			c->claims[k].block = s->block;
			entry_start(c, &c->claims[k], expires_ns, 0, &ref);
			c->claims[k].next = c->claim_heads[b];
			c->claim_heads[b] = k;
		}
		gc = atomic_fetch_add_explicit(&c->claims[k].gencount, 1, memory_order_relaxed) + 1;
		ref = (struct kvs_claim_ref){ .idx = k, .gen = gen_of(gc) };
		atomic_store_explicit(&s->claim, kvs_core_claim_tag(&ref), memory_order_relaxed);
		complete += count_of(gc) == c->shards_per_block;
	}
	return (int)complete;
}

/* Count slot i (its bucket b locked) in ref's generation: as
 * kvs_core_claim_count. */
static int count_locked(struct kvs_cache *c, uint32_t i, const struct kvs_claim_ref *ref,
			bool ready_counts)
{
	struct kvs_shm_claim *e = &c->claims[ref->idx];
	uint64_t tag = kvs_core_claim_tag(ref), gc;
	/* relaxed: under the slot's bucket lock (tags change only under it) */
	uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
	uint64_t f;

	if (st != KVS_SHM_SLOT_DIRTY && !(ready_counts && st == KVS_SHM_SLOT_READY))
		return -ENODATA; /* written and cleaned meanwhile (READY), or another state */
	if (atomic_load_explicit(&c->slots[i].claim, memory_order_relaxed) == tag)
		return 0; /* counted already, in this generation */
	/* The block's designated shard names its preferred writer: the rank that
	 * gathered it (the slot's filler, whoever counts it; relaxed: ordered for
	 * the completer by the count's release below).  A stale generation's store
	 * is harmless: the new generation's own count of that shard stores again. */
	f = atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed);
	if (c->slots[i].shard == kvs_core_claim_designated(c, &c->slots[i].block) &&
	    f != KVS_FILLER_NONE && (f >> 32) < KVS_MAX_RANKS)
		atomic_store_explicit(&e->designate, (uint32_t)(f >> 32) + 1, memory_order_relaxed);
	/* acq_rel: the completing count (the last RMW) sees every earlier counter's
	 * designate store; the CAS fails on another generation */
	gc = atomic_load_explicit(&e->gencount, memory_order_relaxed);
	do {
		if (gen_of(gc) != ref->gen ||
		    atomic_load_explicit(&e->state, memory_order_relaxed) != KVS_SHM_CLAIM_OPEN)
			return -ESTALE;
	} while (!atomic_compare_exchange_weak_explicit(&e->gencount, &gc, gc + 1, memory_order_acq_rel,
							memory_order_relaxed));
	atomic_store_explicit(&c->slots[i].claim, tag, memory_order_relaxed);
	return (int)count_of(gc + 1);
}

int kvs_core_claim_count(struct kvs_cache *c, struct kvs_slot *slot, const struct kvs_claim_ref *ref,
			 bool ready_counts)
{
	uint32_t b;
	int rc;

	if (ref->idx > c->claim_mask)
		return -EINVAL;
	rc = kvs_core_slot_lock_pinned(c, slot, &b);
	if (rc)
		return rc;
	rc = count_locked(c, slot->index, ref, ready_counts);
	kvs_core_bucket_unlock(c, b);
	return rc;
}

int kvs_core_claim_recount(struct kvs_cache *c, const struct kvs_claim_ref *ref,
			   const struct kvs_block_id *block, bool ready_counts, bool *stored)
{
	int counted = 0;

	*stored = false;
	if (ref->idx > c->claim_mask)
		return -EINVAL;
	for (uint32_t s = 0; s < c->shards_per_block; s++) {
		uint32_t b = kvs_core_bucket_of(c, kvs_core_hash(block, s)), i, st;
		int rc = kvs_core_bucket_lock(c, b);

		if (rc)
			return rc;
		i = kvs_core_find(c, b, block, s);
		/* relaxed: under the bucket lock */
		st = i == KVS_IDX_NONE ? KVS_SHM_SLOT_EMPTY
				       : atomic_load_explicit(&c->states[i], memory_order_relaxed) &
						 KVS_WAIT_VALUE_MASK;
		if (st == KVS_SHM_SLOT_READY && !ready_counts) {
			kvs_core_bucket_unlock(c, b);
			*stored = true; /* read from, or written whole to, an atomic backend */
			return counted;
		}
		rc = i == KVS_IDX_NONE ? -ENODATA : count_locked(c, i, ref, ready_counts);
		kvs_core_bucket_unlock(c, b);
		if (rc == -ESTALE)
			return rc;
		if (rc > 0)
			counted = rc;
	}
	return counted;
}

uint32_t kvs_core_claim_designated(const struct kvs_cache *c, const struct kvs_block_id *block)
{
	/* another key than the chain's (shard UINT32_MAX - 1 names no shard) */
	return (uint32_t)(kvs_core_hash(block, UINT32_MAX - 1) % c->shards_per_block);
}

/* Ring the bells of the rank entries in mask, ours excepted (the writer's rank
 * learns from its own hand). */
static void ring_mask(struct kvs_cache *c, uint64_t mask)
{
	mask &= ~(UINT64_C(1) << c->rank_idx);
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		if (mask >> r & 1)
			kvs_wait_bump(&c->ranks[r].bell);
}

void kvs_core_claim_ring(struct kvs_cache *c, uint32_t rank)
{
	if (rank < KVS_MAX_RANKS)
		kvs_wait_bump(&c->ranks[rank].bell);
}

int kvs_core_claim_elect(struct kvs_cache *c, const struct kvs_claim_ref *ref)
{
	struct kvs_shm_claim *e;
	bool takeover = false;
	uint64_t gc;
	uint32_t st;
	int rc;

	if (ref->idx > c->claim_mask)
		return -EINVAL;
	e = &c->claims[ref->idx];
	rc = claims_lock(c);
	if (rc)
		return rc;
	/* relaxed: under the lock */
	gc = atomic_load_explicit(&e->gencount, memory_order_relaxed);
	st = atomic_load_explicit(&e->state, memory_order_relaxed);
	if (gen_of(gc) != ref->gen || st == KVS_SHM_CLAIM_FREE) {
		rc = -ESTALE;
	} else if ((st == KVS_SHM_CLAIM_OPEN && count_of(gc) >= c->shards_per_block) ||
		   (st == KVS_SHM_CLAIM_WRITING && !writer_alive(c, e))) {
		if (st == KVS_SHM_CLAIM_WRITING) {
			KVS_COUNT(c, takeovers, 1);
			kvs_log_info(&c->log, "claim %u: writer rank %u died; taken over", ref->idx,
				     (uint32_t)(atomic_load_explicit(&e->writer, memory_order_relaxed) >> 32));
			takeover = true;
		}
		atomic_store_explicit(&e->writer, self_writer(c), memory_order_relaxed);
		/* release: a lock-free reader that sees WRITING sees the writer */
		atomic_store_explicit(&e->state, KVS_SHM_CLAIM_WRITING, memory_order_release);
		rc = 1;
	}
	claims_unlock(c);
	if (takeover)
		kvs_core_reap_try(c); /* its pins: the slots evictable once written */
	return rc;
}

int kvs_core_claim_end(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err)
{
	struct kvs_shm_claim *e;
	uint64_t mask = 0;
	int rc;

	if (ref->idx > c->claim_mask)
		return -EINVAL;
	rc = claims_lock(c);
	if (rc)
		return rc;
	e = &c->claims[ref->idx];
	/* relaxed: under the lock */
	if (gen_of(atomic_load_explicit(&e->gencount, memory_order_relaxed)) == ref->gen &&
	    atomic_load_explicit(&e->state, memory_order_relaxed) == KVS_SHM_CLAIM_WRITING &&
	    atomic_load_explicit(&e->writer, memory_order_relaxed) == self_writer(c)) {
		atomic_store_explicit(&e->error, err, memory_order_relaxed);
		atomic_store_explicit(&e->expires_ns, kvs_now_ns() + KVS_CLAIM_GRACE_NS,
				      memory_order_relaxed);
		/* release: a waiter that sees the end sees the error, and (DURABLE)
		 * the slots this writer cleaned before */
		atomic_store_explicit(&e->state, err ? KVS_SHM_CLAIM_FAILED : KVS_SHM_CLAIM_DURABLE,
				      memory_order_release);
		mask = atomic_exchange_explicit(&e->waiters, 0, memory_order_relaxed);
	}
	claims_unlock(c);
	ring_mask(c, mask);
	return 0;
}

void kvs_core_claim_retry(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err)
{
	struct kvs_shm_claim *e;
	uint64_t mask = 0;

	if (ref->idx > c->claim_mask || claims_lock(c))
		return; /* the waiters learn it at the end, or at their deadline */
	e = &c->claims[ref->idx];
	/* relaxed: under the lock; a waiter reads the error with the state it
	 * snapshots (still WRITING: the error is the last attempt's) */
	if (gen_of(atomic_load_explicit(&e->gencount, memory_order_relaxed)) == ref->gen &&
	    atomic_load_explicit(&e->state, memory_order_relaxed) == KVS_SHM_CLAIM_WRITING &&
	    atomic_load_explicit(&e->writer, memory_order_relaxed) == self_writer(c)) {
		atomic_store_explicit(&e->error, err, memory_order_relaxed);
		mask = atomic_load_explicit(&e->waiters, memory_order_relaxed);
	}
	claims_unlock(c);
	ring_mask(c, mask);
}

bool kvs_core_claim_wrote(struct kvs_cache *c, uint64_t tag, const struct kvs_block_id *block)
{
	struct kvs_shm_claim *e;
	bool wrote;

	if (tag == 0 || (tag >> 32) - 1 > c->claim_mask || claims_lock(c))
		return false; /* not known: the caller counts the shard again */
	e = &c->claims[(tag >> 32) - 1];
	/* relaxed: under the lock */
	wrote = gen_of(atomic_load_explicit(&e->gencount, memory_order_relaxed)) == (uint32_t)tag &&
		atomic_load_explicit(&e->state, memory_order_relaxed) == KVS_SHM_CLAIM_DURABLE &&
		memcmp(&e->block, block, sizeof(*block)) == 0;
	claims_unlock(c);
	return wrote;
}

/*
 * No claim of block is OPEN, and a READY shard of it says it is stored: keep
 * that for a grace (a DURABLE entry, or the grace of the one there renewed), so
 * that a dump of its other shards starting a moment later -- the next layer's
 * task, whose slot was evicted meanwhile -- learns it is stored from the join,
 * not from a shard that may be gone by then.  Only when the free list has an
 * entry: a record is worth no scan and no live claim's room.  (Lock held.)
 */
static void durable_record(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block)
{
	uint64_t until = kvs_now_ns() + KVS_CLAIM_GRACE_NS;
	struct kvs_claim_ref ref;
	uint32_t i;

	for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
	     n <= c->claim_mask; k = c->claims[k].next, n++) {
		struct kvs_shm_claim *e = &c->claims[k];

		/* relaxed: under the lock */
		if (memcmp(&e->block, block, sizeof(*block)) == 0 &&
		    atomic_load_explicit(&e->state, memory_order_relaxed) != KVS_SHM_CLAIM_FREE) {
			if (atomic_load_explicit(&e->state, memory_order_relaxed) ==
				    KVS_SHM_CLAIM_DURABLE &&
			    atomic_load_explicit(&e->expires_ns, memory_order_relaxed) < until)
				atomic_store_explicit(&e->expires_ns, until, memory_order_relaxed);
			return; /* the block's claim is there (WRITING, FAILED: theirs to end) */
		}
	}
	i = c->hdr->claims_free;
	if (i == KVS_IDX_NONE || i > c->claim_mask)
		return;
	c->hdr->claims_free = c->claims[i].next;
	c->claims[i].block = *block;
	entry_start(c, &c->claims[i], until, 0, &ref);
	/* release: as kvs_core_claim_end (nobody holds its generation yet) */
	atomic_store_explicit(&c->claims[i].state, KVS_SHM_CLAIM_DURABLE, memory_order_release);
	c->claims[i].next = c->claim_heads[b];
	c->claim_heads[b] = i;
}

int kvs_core_claim_found(struct kvs_cache *c, const struct kvs_block_id *block,
			 struct kvs_claim_ref *ref)
{
	uint32_t b = kvs_core_claim_chain(c, block);
	uint64_t mask = 0;
	int rc = claims_lock(c), found = 0;

	if (rc)
		return rc;
	for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
	     n <= c->claim_mask; k = c->claims[k].next, n++) {
		struct kvs_shm_claim *e = &c->claims[k];

		/* relaxed: under the lock */
		if (memcmp(&e->block, block, sizeof(*block)) ||
		    atomic_load_explicit(&e->state, memory_order_relaxed) != KVS_SHM_CLAIM_OPEN)
			continue;
		atomic_store_explicit(&e->error, 0, memory_order_relaxed);
		atomic_store_explicit(&e->expires_ns, kvs_now_ns() + KVS_CLAIM_GRACE_NS,
				      memory_order_relaxed);
		/* release: as kvs_core_claim_end */
		atomic_store_explicit(&e->state, KVS_SHM_CLAIM_DURABLE, memory_order_release);
		mask = atomic_exchange_explicit(&e->waiters, 0, memory_order_relaxed);
		ref->idx = k;
		ref->gen = gen_of(atomic_load_explicit(&e->gencount, memory_order_relaxed));
		found = 1;
		break;
	}
	if (!found)
		durable_record(c, b, block);
	claims_unlock(c);
	ring_mask(c, mask);
	return found;
}

int kvs_core_claims_orphaned(struct kvs_cache *c, uint64_t deadline_ns, struct kvs_claim_ref *refs,
			     struct kvs_block_id *blocks, uint32_t max)
{
	uint32_t n = 0;
	int rc = claims_lock(c);

	if (rc)
		return rc;
	for (uint32_t i = 0; i <= c->claim_mask && n < max; i++) {
		struct kvs_shm_claim *e = &c->claims[i];
		/* relaxed: under the lock */
		uint64_t gc = atomic_load_explicit(&e->gencount, memory_order_relaxed);
		uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);

		/* A complete OPEN one is taken whoever is designated: the entry it
		 * names may be ours now (a dead rank's, reused), and a live designated
		 * writer elects itself within the watchers' grace anyway. */
		if (st == KVS_SHM_CLAIM_WRITING ? writer_alive(c, e) :
		    st != KVS_SHM_CLAIM_OPEN || count_of(gc) < c->shards_per_block)
			continue; /* incomplete, ended, or being written */
		/* Ours to watch until deadline_ns: its DIRTY slots protected again
		 * (CLOCK reads expires_ns), our rank rung at its end. */
		if (atomic_load_explicit(&e->expires_ns, memory_order_relaxed) < deadline_ns)
			atomic_store_explicit(&e->expires_ns, deadline_ns, memory_order_relaxed);
		atomic_fetch_or_explicit(&e->waiters, UINT64_C(1) << c->rank_idx, memory_order_relaxed);
		refs[n] = (struct kvs_claim_ref){ .idx = i, .gen = gen_of(gc) };
		blocks[n++] = e->block;
	}
	claims_unlock(c);
	return (int)n;
}

/* A consistent (generation-checked) read of entry idx: see the top comment. */
static int claim_snapshot(struct kvs_cache *c, uint32_t idx, uint32_t gen, struct kvs_claim_view *v)
{
	struct kvs_shm_claim *e;
	uint64_t g1, g2;

	if (idx > c->claim_mask)
		return -EINVAL;
	e = &c->claims[idx];
	/* acquire, all three: pair with the release stores of entry_start and the
	 * state changes, so that the state is read between two equal generations */
	g1 = atomic_load_explicit(&e->gencount, memory_order_acquire);
	v->state = atomic_load_explicit(&e->state, memory_order_acquire);
	v->error = atomic_load_explicit(&e->error, memory_order_relaxed);
	v->writer = atomic_load_explicit(&e->writer, memory_order_relaxed);
	v->expires_ns = atomic_load_explicit(&e->expires_ns, memory_order_relaxed);
	v->designate = atomic_load_explicit(&e->designate, memory_order_relaxed);
	if (v->designate > KVS_MAX_RANKS)
		v->designate = 0; /* not a rank entry (any byte may be written): none */
	g2 = atomic_load_explicit(&e->gencount, memory_order_acquire);
	if (gen_of(g1) != gen || gen_of(g2) != gen || v->state == KVS_SHM_CLAIM_FREE)
		return -ESTALE;
	v->counted = count_of(g2);
	return 0;
}

int kvs_core_claim_read(struct kvs_cache *c, const struct kvs_claim_ref *ref, struct kvs_claim_view *v)
{
	return claim_snapshot(c, ref->idx, ref->gen, v);
}

bool kvs_core_claim_writer_alive(struct kvs_cache *c, const struct kvs_claim_view *v)
{
	return v->writer != KVS_FILLER_NONE &&
	       kvs_core_rank_alive(c, (uint32_t)(v->writer >> 32), (uint32_t)v->writer);
}

bool kvs_core_claim_protects(struct kvs_cache *c, uint64_t tag, uint64_t now_ns)
{
	struct kvs_claim_view v;

	if (tag == 0 || (tag >> 32) - 1 > c->claim_mask)
		return false;
	if (claim_snapshot(c, (uint32_t)(tag >> 32) - 1, (uint32_t)tag, &v))
		return false;
	return (v.state == KVS_SHM_CLAIM_OPEN || v.state == KVS_SHM_CLAIM_WRITING) &&
	       now_ns < v.expires_ns + KVS_CLAIM_GRACE_NS;
}

int kvs_core_test_hold_claims(struct kvs_cache *c)
{
	return claims_lock(c);
}

/* ---- kvs_cache_check ---- */

int kvs_core_claims_check(struct kvs_cache *c, int max_reports)
{
	uint32_t n = c->claim_mask + 1, on_chains = 0, free_n = 0;
	int bad = 0, rc = claims_lock(c);

	if (rc)
		return rc;
#define CBROKEN(...)                                                                    \
	do {                                                                            \
		if (bad++ < max_reports)                                                \
			kvs_log_error(&c->log, "check: " __VA_ARGS__);                  \
	} while (0)
	for (uint32_t b = 0; b < n; b++) {
		uint32_t steps = 0;

		for (uint32_t k = c->claim_heads[b]; k != KVS_IDX_NONE; k = c->claims[k].next) {
			if (k >= n || ++steps > n) {
				CBROKEN("claim chain %u: bad link or cycle", b);
				break;
			}
			/* relaxed: under the lock */
			if (atomic_load_explicit(&c->claims[k].state, memory_order_relaxed) ==
				    KVS_SHM_CLAIM_FREE ||
			    kvs_core_claim_chain(c, &c->claims[k].block) != b)
				CBROKEN("claim %u on chain %u: free or hashes elsewhere", k, b);
			on_chains++;
		}
	}
	for (uint32_t k = c->hdr->claims_free, steps = 0; k != KVS_IDX_NONE; k = c->claims[k].next) {
		if (k >= n || ++steps > n) {
			CBROKEN("claim free list: bad link or cycle");
			break;
		}
		if (atomic_load_explicit(&c->claims[k].state, memory_order_relaxed) != KVS_SHM_CLAIM_FREE)
			CBROKEN("claim %u on the free list is not free", k);
		free_n++;
	}
	if (bad == 0 && on_chains + free_n != n)
		CBROKEN("claims: %u on chains + %u free of %u", on_chains, free_n, n);
#undef CBROKEN
	claims_unlock(c);
	return bad;
}
