/*
 * core/claim.c — block claims: the right to write, or to drop, one block the
 * ranks of a node dumped shard by shard (docs/store.md, "Dumps").
 *
 * What is to be written is not here: it is the DIRTY slots of the block
 * (core/layout.h, "Dumps"), which nothing evicts, drops or removes.  A claim
 * only says who may act on them now:
 *
 *   WRITING   the holder (rank entry and epoch) writes the block from its DIRTY
 *             slots and cleans them (READY); error is its last failed attempt's.
 *   DROPPING  the holder drops the DIRTY slots of a block that never completed,
 *             each once its protection is over (dirty_until_ns).  A dump that
 *             makes a shard of such a block DIRTY looks for this state before it
 *             reports the shard dumped, and dumps it again once the drop is over
 *             (store/dump.c settle): so nothing it acknowledges is dropped.
 *   STORED    the block is in the backend (a write ended, or a dump found a shard
 *             of it READY over a backend whose blocks are atomic): proof for a
 *             grace (KVS_CLAIM_GRACE_NS), not longer -- the stored copy may
 *             vanish (removed, a TTL) -- then the entry is free again.
 *
 * A claim is taken (kvs_core_claim_take) when the block has none, a STORED one
 * past its grace, or one whose holder died: a dead writer's or dropper's work is
 * taken over, from the DIRTY slots, by whoever takes it next.  Its end
 * (kvs_core_claim_end) rings every attached rank's bell, since any of them may
 * have a durable dump waiting on the block's slots; nothing registers.
 *
 * The table: claim_count entries (a power of two), hash chains by block id, a
 * free list; every field under one robust process-shared mutex in the header
 * (claims_lock).  It is bounded, and may be: entries are held only while a block
 * is written or dropped (and STORED a grace after).  An allocation reclaims what
 * proves nothing any more (a STORED record past its grace, a dead holder's
 * claim); a full table makes the taker wait for the claims bell -- its DIRTY
 * slots keep the block meanwhile.  A holder killed at any instruction leaves
 * states that say what each entry is; the next holder of the lock rebuilds
 * chains and the free list from them (claims_repair).
 *
 * Memory orders: every field is written under the lock and read under it
 * (relaxed: the mutex orders it), but for the state, which a dump reads
 * lock-free as a hint that a drop may be in progress (acquire, pairing with the
 * release of the state stores) and rechecks under the lock.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

uint32_t kvs_core_claim_chain(const struct kvs_cache *c, const struct kvs_block_id *block)
{
	/* a key of its own: no shard value is UINT32_MAX */
	return (uint32_t)(kvs_core_hash(block, UINT32_MAX) & c->claim_mask);
}

static uint64_t self_holder(const struct kvs_cache *c)
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

		if (st == KVS_SHM_CLAIM_FREE || st > KVS_SHM_CLAIM_STORED) {
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
		e->next = i < c->claim_mask ? i + 1 : KVS_IDX_NONE;
	}
	h->claims_free = 0;
	return kvs_core_mutex_init(&h->claims_lock);
}

/* ---- entries (lock held) ---- */

static bool holder_alive(struct kvs_cache *c, uint64_t h)
{
	return h != KVS_FILLER_NONE && kvs_core_rank_alive(c, (uint32_t)(h >> 32), (uint32_t)h);
}

/* May entry e be freed now?  A STORED record past its grace; a claim whose
 * holder died (its work is the next taker's, from the DIRTY slots). */
static bool reclaimable(struct kvs_cache *c, const struct kvs_shm_claim *e, uint64_t now)
{
	/* relaxed: under the lock */
	uint32_t st = atomic_load_explicit(&e->state, memory_order_relaxed);

	if (st == KVS_SHM_CLAIM_STORED)
		return now >= atomic_load_explicit(&e->expires_ns, memory_order_relaxed);
	return !holder_alive(c, atomic_load_explicit(&e->holder, memory_order_relaxed));
}

/* Unlink entry i from chain b (bounded walk) and put it on the free list. */
static void entry_free(struct kvs_cache *c, uint32_t b, uint32_t i)
{
	uint32_t *link = &c->claim_heads[b];

	/* FREE first: a death after this leaves an entry the repair puts back.
	 * release: pairs with the lock-free readers' acquire (kvs_core_claim_peek) */
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
}

/* A free entry (the free list, else the first reclaimable one a scan frees), or
 * KVS_IDX_NONE. */
static uint32_t entry_alloc(struct kvs_cache *c, uint64_t now)
{
	uint32_t i = c->hdr->claims_free;

	for (uint32_t b = 0; i == KVS_IDX_NONE && b <= c->claim_mask; b++) {
		for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
		     n <= c->claim_mask; n++) {
			uint32_t next = c->claims[k].next;

			if (reclaimable(c, &c->claims[k], now))
				entry_free(c, b, k);
			k = next;
		}
		i = c->hdr->claims_free;
	}
	if (i == KVS_IDX_NONE || i > c->claim_mask)
		return KVS_IDX_NONE; /* a corrupt head reads as full; check reports it */
	c->hdr->claims_free = c->claims[i].next;
	return i;
}

/* Block's entry on chain b, or KVS_IDX_NONE (bounded walk). */
static uint32_t entry_find(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block)
{
	for (uint32_t k = c->claim_heads[b], n = 0; k != KVS_IDX_NONE && k <= c->claim_mask &&
	     n <= c->claim_mask; k = c->claims[k].next, n++)
		if (memcmp(&c->claims[k].block, block, sizeof(*block)) == 0)
			return k;
	return KVS_IDX_NONE;
}

static void entry_view(struct kvs_cache *c, const struct kvs_shm_claim *e, struct kvs_claim_view *v)
{
	/* relaxed: under the lock */
	v->state = atomic_load_explicit(&e->state, memory_order_relaxed);
	v->error = atomic_load_explicit(&e->error, memory_order_relaxed);
	v->holder = atomic_load_explicit(&e->holder, memory_order_relaxed);
	v->holder_alive = (v->state == KVS_SHM_CLAIM_WRITING || v->state == KVS_SHM_CLAIM_DROPPING) &&
			  holder_alive(c, v->holder);
	if (v->state > KVS_SHM_CLAIM_STORED)
		v->state = KVS_SHM_CLAIM_FREE; /* any byte may be written: none */
}

/* Give entry e to us in state st (lock held). */
static void entry_hold(struct kvs_cache *c, struct kvs_shm_claim *e, uint32_t st,
		       struct kvs_claim_ref *ref)
{
	/* relaxed: under the lock */
	uint64_t gen = atomic_load_explicit(&e->gen, memory_order_relaxed) + 1;

	atomic_store_explicit(&e->gen, gen, memory_order_relaxed);
	atomic_store_explicit(&e->holder, self_holder(c), memory_order_relaxed);
	atomic_store_explicit(&e->error, 0, memory_order_relaxed);
	atomic_store_explicit(&e->expires_ns, 0, memory_order_relaxed);
	/* release: pairs with kvs_core_claim_peek's acquire */
	atomic_store_explicit(&e->state, st, memory_order_release);
	ref->idx = (uint32_t)(e - c->claims);
	ref->gen = gen;
}

/* Is ref still ours (the lock held)? */
static bool entry_ours(struct kvs_cache *c, const struct kvs_claim_ref *ref)
{
	const struct kvs_shm_claim *e;
	uint32_t st;

	if (ref->idx > c->claim_mask)
		return false;
	e = &c->claims[ref->idx];
	/* relaxed: under the lock */
	st = atomic_load_explicit(&e->state, memory_order_relaxed);
	return atomic_load_explicit(&e->gen, memory_order_relaxed) == ref->gen &&
	       (st == KVS_SHM_CLAIM_WRITING || st == KVS_SHM_CLAIM_DROPPING) &&
	       atomic_load_explicit(&e->holder, memory_order_relaxed) == self_holder(c);
}

/* ---- the claim API ---- */

int kvs_core_claim_take(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t st,
			struct kvs_claim_ref *ref, struct kvs_claim_view *v)
{
	uint32_t b = kvs_core_claim_chain(c, block), k;
	uint64_t now = kvs_now_ns();
	struct kvs_claim_view none = { .state = KVS_SHM_CLAIM_FREE };
	int rc;

	if (st != KVS_SHM_CLAIM_WRITING && st != KVS_SHM_CLAIM_DROPPING &&
	    st != KVS_SHM_CLAIM_STORED)
		return -EINVAL;
	*v = none;
	rc = claims_lock(c);
	if (rc)
		return rc;
	k = entry_find(c, b, block);
	if (k != KVS_IDX_NONE) {
		struct kvs_shm_claim *e = &c->claims[k];
		bool stored;

		entry_view(c, e, v);
		stored = v->state == KVS_SHM_CLAIM_STORED &&
			 now < atomic_load_explicit(&e->expires_ns, memory_order_relaxed);
		if (v->holder_alive || stored != (st == KVS_SHM_CLAIM_STORED)) {
			claims_unlock(c);
			return 0; /* a live holder's, or stored lately (or, for STORED, not) */
		}
		/* free, expired, or a dead holder's: taken over; STORED: held to
		 * clean the stored block's slots */
		entry_hold(c, e, stored ? KVS_SHM_CLAIM_WRITING : st, ref);
		claims_unlock(c);
		return 1;
	}
	if (st == KVS_SHM_CLAIM_STORED) {
		claims_unlock(c);
		return 0;
	}
	k = entry_alloc(c, now);
	if (k == KVS_IDX_NONE) {
		claims_unlock(c);
		return -ENOSPC;
	}
	c->claims[k].block = *block;
	entry_hold(c, &c->claims[k], st, ref);
	c->claims[k].next = c->claim_heads[b];
	c->claim_heads[b] = k;
	claims_unlock(c);
	return 1;
}

int kvs_core_claim_look(struct kvs_cache *c, const struct kvs_block_id *block,
			struct kvs_claim_view *v)
{
	struct kvs_claim_view none = { .state = KVS_SHM_CLAIM_FREE };
	uint32_t k;
	int rc;

	*v = none;
	rc = claims_lock(c);
	if (rc)
		return rc;
	k = entry_find(c, kvs_core_claim_chain(c, block), block);
	if (k != KVS_IDX_NONE) {
		entry_view(c, &c->claims[k], v);
		if (v->state == KVS_SHM_CLAIM_STORED &&
		    kvs_now_ns() >= atomic_load_explicit(&c->claims[k].expires_ns, memory_order_relaxed))
			v->state = KVS_SHM_CLAIM_FREE; /* its proof is over */
	}
	claims_unlock(c);
	return 0;
}

bool kvs_core_claim_peek(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t st)
{
	uint32_t b = kvs_core_claim_chain(c, block);

	/* Unlocked, bounded, every index checked: a hint that a claim of the
	 * block is in state st (acquire: pairs with entry_hold's release), to be
	 * confirmed by kvs_core_claim_look.  A chain changing under the walk may
	 * hide the entry: callers that must not miss it order their own write
	 * before (store/dump.c settle: a drop takes its claim before it scans the
	 * slots, the dump publishes its slot before it looks). */
	for (uint32_t k = __atomic_load_n(&c->claim_heads[b], __ATOMIC_ACQUIRE), n = 0;
	     k <= c->claim_mask && n <= c->claim_mask; n++) {
		const struct kvs_shm_claim *e = &c->claims[k];

		if (atomic_load_explicit(&e->state, memory_order_acquire) == st &&
		    memcmp(&e->block, block, sizeof(*block)) == 0)
			return true;
		k = __atomic_load_n(&e->next, __ATOMIC_RELAXED);
	}
	return false;
}

int kvs_core_claim_convert(struct kvs_cache *c, const struct kvs_claim_ref *ref, uint32_t st)
{
	int rc = claims_lock(c);

	if (rc)
		return rc;
	if (!entry_ours(c, ref))
		rc = -ESTALE;
	else /* release: as entry_hold */
		atomic_store_explicit(&c->claims[ref->idx].state, st, memory_order_release);
	claims_unlock(c);
	return rc;
}

/* Ring every attached rank's bell but ours: any may wait on the block. */
static void ring_all(struct kvs_cache *c)
{
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		/* relaxed: a wake, nothing read through it */
		if ((int)r != c->rank_idx &&
		    atomic_load_explicit(&c->ranks[r].state, memory_order_relaxed) == KVS_SHM_RANK_ATTACHED)
			kvs_wait_bump(&c->ranks[r].bell);
}

int kvs_core_claim_end(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err)
{
	int rc = claims_lock(c);

	if (rc)
		return rc;
	if (entry_ours(c, ref)) {
		struct kvs_shm_claim *e = &c->claims[ref->idx];

		/* relaxed: under the lock */
		if (err == 0 && atomic_load_explicit(&e->state, memory_order_relaxed) ==
					KVS_SHM_CLAIM_WRITING) {
			atomic_store_explicit(&e->expires_ns, kvs_now_ns() + KVS_CLAIM_GRACE_NS,
					      memory_order_relaxed);
			atomic_store_explicit(&e->holder, KVS_FILLER_NONE, memory_order_relaxed);
			atomic_store_explicit(&e->state, KVS_SHM_CLAIM_STORED, memory_order_release);
		} else {
			entry_free(c, kvs_core_claim_chain(c, &e->block), ref->idx);
		}
	}
	claims_unlock(c);
	kvs_wait_bump(&c->hdr->claims_bell);
	ring_all(c);
	return 0;
}

void kvs_core_claim_retry(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err)
{
	if (claims_lock(c))
		return; /* the error is the attempt's, not the block's: its next end tells */
	if (entry_ours(c, ref))
		atomic_store_explicit(&c->claims[ref->idx].error, err, memory_order_relaxed);
	claims_unlock(c);
	ring_all(c);
}

int kvs_core_claim_stored(struct kvs_cache *c, const struct kvs_block_id *block)
{
	struct kvs_claim_ref ref;
	struct kvs_claim_view v;
	int rc = kvs_core_claim_take(c, block, KVS_SHM_CLAIM_WRITING, &ref, &v);

	/* taken: nobody holds it, and it is stored: say so for the grace; held by
	 * a live writer (who finds it stored itself) or recorded already: nothing */
	return rc == 1 ? kvs_core_claim_end(c, &ref, 0) : rc == -ENOSPC ? 0 : rc;
}

uint32_t kvs_core_claim_designated(const struct kvs_cache *c, const struct kvs_block_id *block)
{
	/* another key than the chain's (shard UINT32_MAX - 1 names no shard) */
	return (uint32_t)(kvs_core_hash(block, UINT32_MAX - 1) % c->shards_per_block);
}

void kvs_core_claim_ring(struct kvs_cache *c, uint32_t rank)
{
	if (rank < KVS_MAX_RANKS)
		kvs_wait_bump(&c->ranks[rank].bell);
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
