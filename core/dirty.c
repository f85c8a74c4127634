/*
 * core/dirty.c — a dump's slots after their publish (core/layout.h, "Dumps";
 * docs/store.md, "Dumps"): a DIRTY slot holds bytes of a block not yet in the
 * backend, is never evicted (clock.c), and leaves DIRTY only under its bucket
 * lock -- cleaned to READY by its block's writer once the block is stored, or
 * dropped to FAILED by the holder of its block's claim.  Here: a dump holding
 * or redirtying the slot it pins, the scan of a block's shards a writer makes,
 * clean and drop, and the peeks and looks by residency (index and generation)
 * the store's dump bookkeeping makes.  The publish that makes a slot DIRTY is
 * slot.c's (kvs_core_slot_publish_dirty), with the other publishes.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "wait/wait.h"

int kvs_core_dirty_hold(struct kvs_cache *c, struct kvs_slot *slot, uint64_t until_ns, bool redirty)
{
	uint32_t b, st;
	int rc = kvs_core_slot_lock_pinned(c, slot, &b);

	if (rc)
		return rc;
	/* relaxed: under the bucket lock, where a DIRTY slot's until changes and
	 * where it leaves DIRTY (kvs_core_dirty_clean, _drop) */
	st = kvs_core_state_value(c, slot->index, memory_order_relaxed);
	if (st == KVS_SHM_SLOT_READY && redirty) {
		/* its bytes are the block's, dumped: part of the block's record
		 * again, so the block's write writes it (a backend whose blocks are
		 * not atomic proves only this shard stored) */
		atomic_fetch_add_explicit(&c->hdr->dirty_hint, 1, memory_order_relaxed);
		atomic_store_explicit(&c->slots[slot->index].dirty_until_ns, until_ns, memory_order_relaxed);
		kvs_wait_publish(&c->states[slot->index], KVS_SHM_SLOT_DIRTY);
		st = KVS_SHM_SLOT_DIRTY;
	} else if (st == KVS_SHM_SLOT_DIRTY &&
		   atomic_load_explicit(&c->slots[slot->index].dirty_until_ns, memory_order_relaxed) <
			   until_ns) {
		atomic_store_explicit(&c->slots[slot->index].dirty_until_ns, until_ns, memory_order_relaxed);
	}
	kvs_core_bucket_unlock(c, b);
	slot->state = st;
	return (int)st;
}

/* Lock the bucket of the slot keyed (block, shard) and find it: 0 and *b, *i
 * (KVS_IDX_NONE: absent), or the lock's error. */
static int key_lock(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		    uint32_t *b, uint32_t *i)
{
	int rc;

	*b = kvs_core_bucket_of(c, kvs_core_hash(block, shard));
	rc = kvs_core_bucket_lock(c, *b);
	if (rc == 0)
		*i = kvs_core_find(c, *b, block, shard);
	return rc;
}

int kvs_core_dirty_scan(struct kvs_cache *c, const struct kvs_block_id *block, uint64_t now_ns,
			bool full, struct kvs_dirty_scan *out, struct kvs_dirty_shard *shards)
{
	memset(out, 0, sizeof(*out));
	/* From the last shard down: layer-wise dumps fill a block from its first
	 * shard up, so an incomplete block is found so at once */
	for (uint32_t s = c->shards_per_block; s-- > 0;) {
		uint32_t b, i, st = KVS_SHM_SLOT_EMPTY;
		int rc = key_lock(c, block, s, &b, &i);

		if (rc)
			return rc;
		if (i != KVS_IDX_NONE) {
			/* relaxed: under the bucket lock */
			uint64_t until = atomic_load_explicit(&c->slots[i].dirty_until_ns,
							      memory_order_relaxed);

			st = kvs_core_state_value(c, i, memory_order_relaxed);
			if (shards)
				shards[s] = (struct kvs_dirty_shard){
					i, atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed)
				};
			if (st == KVS_SHM_SLOT_DIRTY) {
				out->dirty++;
				out->fresh |= until > now_ns;
				if (until > out->until_ns)
					out->until_ns = until;
			}
		}
		kvs_core_bucket_unlock(c, b);
		if (st == KVS_SHM_SLOT_READY)
			out->ready++;
		else if (st != KVS_SHM_SLOT_DIRTY) {
			out->missing++;
			if (!full)
				break;
		}
	}
	return 0;
}

/* Lock slot i's bucket; is it still residency gen and DIRTY?  (The lock is
 * held when 1 or 0 is returned.) */
static int dirty_locked(struct kvs_cache *c, uint32_t i, uint32_t gen, uint32_t *b)
{
	int rc;

	if (i >= c->slot_count)
		return -EINVAL;
	rc = kvs_core_slot_lock(c, i, b);
	if (rc)
		return rc;
	/* relaxed: under the bucket lock */
	return atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed) == gen &&
	       kvs_core_state_value(c, i, memory_order_relaxed) == KVS_SHM_SLOT_DIRTY;
}

int kvs_core_dirty_clean(struct kvs_cache *c, uint32_t i, uint32_t gen)
{
	uint32_t b;
	int rc = dirty_locked(c, i, gen, &b);

	if (rc < 0)
		return rc;
	if (rc == 1) {
		atomic_store_explicit(&c->slots[i].dirty_until_ns, 0, memory_order_relaxed);
		/* release (the publish): a reader that sees READY sees the block stored */
		kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_READY);
		atomic_fetch_sub_explicit(&c->hdr->dirty_hint, 1, memory_order_relaxed); /* after */
	}
	kvs_core_bucket_unlock(c, b);
	return rc;
}

int kvs_core_dirty_drop(struct kvs_cache *c, uint32_t i, uint32_t gen, int err, uint64_t before_ns)
{
	uint32_t b;
	int rc = dirty_locked(c, i, gen, &b);

	if (rc < 0)
		return rc;
	/* relaxed: under the bucket lock, where dumps extend it */
	if (rc == 1 && before_ns &&
	    atomic_load_explicit(&c->slots[i].dirty_until_ns, memory_order_relaxed) >= before_ns)
		rc = 0; /* a dump protects it again: not dropped */
	if (rc == 1) {
		atomic_store_explicit(&c->slots[i].dirty_until_ns, 0, memory_order_relaxed);
		atomic_store_explicit(&c->slots[i].error, err, memory_order_relaxed);
		/* the heaviest CLOCK weight: FAILED lingers a little, for the durable
		 * dumps that look at it to read its error */
		atomic_store_explicit(&c->refbits[i], KVS_CLOCK_WEIGHT_MAX, memory_order_relaxed);
		/* release (the publish): the error before the state */
		kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_FAILED);
		atomic_fetch_sub_explicit(&c->hdr->dirty_hint, 1, memory_order_relaxed); /* after */
	}
	kvs_core_bucket_unlock(c, b);
	return rc;
}

bool kvs_core_dirty_peek(struct kvs_cache *c, uint32_t i, uint32_t gen)
{
	/* relaxed: a hint (acquire on the state: a slot that left DIRTY is looked
	 * at under the lock by kvs_core_dirty_look) */
	return i < c->slot_count &&
	       kvs_core_state_value(c, i, memory_order_acquire) == KVS_SHM_SLOT_DIRTY &&
	       atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed) == gen;
}

int kvs_core_dirty_key(struct kvs_cache *c, uint32_t i, struct kvs_block_id *block, uint32_t *shard)
{
	uint32_t b;
	int rc;

	if (i >= c->slot_count)
		return -EINVAL;
	rc = kvs_core_slot_lock(c, i, &b);
	if (rc)
		return rc;
	/* relaxed: under the bucket lock */
	kvs_core_key_read(&c->slots[i], block, shard);
	rc = kvs_core_state_value(c, i, memory_order_relaxed) == KVS_SHM_SLOT_DIRTY &&
	     *shard < c->shards_per_block;
	kvs_core_bucket_unlock(c, b);
	return rc;
}

int kvs_core_slot_filler_rank(struct kvs_cache *c, uint32_t i)
{
	/* relaxed: a hint (the gatherer of a DIRTY slot, for who writes its block) */
	uint64_t f = i < c->slot_count ? atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed)
				       : KVS_FILLER_NONE;

	return f == KVS_FILLER_NONE || (f >> 32) >= KVS_MAX_RANKS ? -1 : (int)(f >> 32);
}

int kvs_core_dirty_look(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
			uint32_t i, uint32_t gen, int32_t *err)
{
	uint32_t b, found;
	int rc = key_lock(c, block, shard, &b, &found);

	if (rc)
		return rc;
	/* relaxed: under the bucket lock */
	if (found != i || atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed) != gen) {
		rc = -ESTALE;
	} else {
		rc = (int)kvs_core_state_value(c, i, memory_order_relaxed);
		*err = atomic_load_explicit(&c->slots[i].error, memory_order_relaxed);
	}
	kvs_core_bucket_unlock(c, b);
	return rc;
}
