/*
 * core/slot.c — the slot protocol (the get table in the comment of
 * kvs_cache_get in include/kvshare.h; docs/core.md, "API"): get, wait,
 * publish, release, and the read-only questions (exists, lookup,
 * lookup_prefix) plus prealloc and touch.  A dump's DIRTY slots, once
 * published, are dirty.c's.
 *
 * Every get records a pin (pin.c); the pin of the get that made the slot
 * LOADING carries the owner bit.  A struct kvs_slot is the caller's memory, so
 * every kvs_slot_* call checks it against shared state before acting: its pin
 * entry, the slot's generation, and for publishing the owner bit, the slot's
 * filler and state.  A stale or forged handle gets -ESTALE or -EPERM and never
 * touches another key's slot.
 *
 * The state word lives in its own array (layout.h), away from the slot line
 * that get and release write.  The owner publishes READY or FAILED with one
 * exchange (kvs_wait_publish: release order, wakes sleepers if WAITERS was set);
 * waiters read it with acquire order through kvs_wait_while.  The error code is
 * stored before the FAILED publish, so the release orders it for the waiters.
 *
 * A waiter whose filler died (its rank entry unlocked, or reused with another
 * epoch) learns it from the per-slice check hook; it reaps the dead rank and
 * takes the slot over under the bucket lock: it becomes the owner
 * (KVS_SLOT_WAIT_OWNER) and re-reads.  It never waits out a timeout that cannot
 * end well.  The owner's error and the wait's own failure have separate
 * channels: a FAILED slot is the positive KVS_SLOT_WAIT_FAILED with the code in
 * slot->error; a negative return is always the wait's own (-ETIMEDOUT ...).
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

/* Bytes valid: READY, or DIRTY (a dump's, not yet in the backend). */
static inline bool ready_like(uint32_t st)
{
	return st == KVS_SHM_SLOT_READY || st == KVS_SHM_SLOT_DIRTY;
}

/* What the public interface says of a state: DIRTY is READY to every reader
 * (kvshare.h's enum kvs_slot_state has no DIRTY; the store asks the core). */
static inline uint32_t public_state(uint32_t st)
{
	return st == KVS_SHM_SLOT_DIRTY ? KVS_SHM_SLOT_READY : st;
}

/* CLOCK weights (core/clock.c, layout.h): allocation and any get that does
 * not start a new use keep the slot's weight at least 1 (a just-filled slot
 * survives until copied); a new use adds 1 up to KVS_CLOCK_WEIGHT_MAX.
 * relaxed: a heuristic; load-then-store, not an RMW, and no store when nothing
 * changes (keeps the line shared on the hit path).  A racing update lost costs
 * one eviction choice, never correctness. */
static void clock_alloc(struct kvs_cache *c, uint32_t i)
{
	if (!atomic_load_explicit(&c->refbits[i], memory_order_relaxed))
		atomic_store_explicit(&c->refbits[i], 1, memory_order_relaxed);
}

static void clock_use(struct kvs_cache *c, uint32_t i)
{
	uint8_t w = atomic_load_explicit(&c->refbits[i], memory_order_relaxed);

	if (w < KVS_CLOCK_WEIGHT_MAX)
		atomic_store_explicit(&c->refbits[i], (uint8_t)(w + 1), memory_order_relaxed);
}

static void fill_slot(struct kvs_cache *c, struct kvs_slot *slot, uint32_t i, uint32_t pin,
		      uint32_t flags, uint32_t state)
{
	memset(slot, 0, sizeof(*slot));
	slot->index = i;
	/* relaxed: under the bucket lock */
	slot->generation = atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed);
	slot->flags = flags;
	slot->state = state;
	slot->pin = pin;
	if (state == KVS_SHM_SLOT_FAILED)
		slot->error = atomic_load_explicit(&c->slots[i].error, memory_order_relaxed);
}

/* Make us the filler of slot i (locked). */
static void set_filler(struct kvs_cache *c, uint32_t i)
{
	/* relaxed: the filler is read by waiters' liveness checks only as a hint,
	 * rechecked under the lock before any takeover */
	atomic_store_explicit(&c->slots[i].filler, kvs_core_filler((uint32_t)c->rank_idx, c->rank_epoch),
			      memory_order_relaxed);
	atomic_store_explicit(&c->slots[i].error, 0, memory_order_relaxed);
}

/* Become the owner of unpinned slot i (locked): LOADING, filler = us.  No
 * waiter sleeps on an unpinned slot, so the exchange wakes nobody; it keeps
 * one publisher code path. */
static void make_owner(struct kvs_cache *c, uint32_t i)
{
	set_filler(c, i);
	kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_LOADING);
}

static int get_lockfree(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
			uint32_t shard, uint32_t flags, struct kvs_slot *slot);
static int get_once(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		    uint32_t shard, uint32_t flags, struct kvs_slot *slot);

/* Count a get that pinned a slot in state st (owner: it fills it).  A dump's
 * get is counted apart: a dump that finds its shard READY is a dedup, not a
 * read served by the tier, and hit ratios are of reads. */
static void count_get(struct kvs_cache *c, uint32_t flags, bool owner, uint32_t st)
{
	if (flags & KVS_CORE_GET_DUMP)
		KVS_COUNT(c, dump_gets, 1);
	else if (owner)
		KVS_COUNT(c, misses, 1);
	else if (flags & KVS_CORE_GET_QUIET)
		return;
	else if (ready_like(st))
		KVS_COUNT(c, hits, 1);
	else
		KVS_COUNT(c, joins, 1); /* a read in flight serves this get too */
}

int kvs_core_get(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		 uint32_t flags, struct kvs_slot *slot)
{
	if (!block)
		return -EINVAL;
	return kvs_core_get_hashed(c, block, shard, kvs_core_hash(block, shard), flags, slot);
}

/* A get that found every candidate slot pinned: if a dead rank's pins are among
 * them, they go (reaped; not for a get that must not block), and it tries again. */
int kvs_core_get_hashed(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
			uint64_t hash, uint32_t flags, struct kvs_slot *slot)
{
	uint32_t b;
	int rc;

	if (!c || !block || !slot || shard >= c->shards_per_block)
		return -EINVAL;
	if (c->cfg.device_id < 0)
		return -EOPNOTSUPP;
	b = kvs_core_bucket_of(c, hash);
	rc = get_lockfree(c, b, block, shard, flags, slot);
	if (rc <= 0)
		return rc;
	rc = get_once(c, b, block, shard, flags, slot);
	if (rc == -ENOSPC && !(flags & KVS_CORE_GET_TRY) && kvs_core_reap_try(c) > 0)
		rc = get_once(c, b, block, shard, flags, slot);
	return rc;
}

/*
 * A READY or DIRTY hit pinned without the bucket lock (pin.c, "Lock-free
 * pins"; model/pin.pml): 0 and *slot, or 1 when the locked path is to decide
 * (absent, not readable, being evicted, contended, or a get that may own: a
 * forced reload, a dump's).  The lookup's reads are candidates only: after the
 * bit is set, and no evictor was in the word it replaced, the slot cannot be
 * re-keyed, so the rechecks read the residency the pin holds.  An absent key
 * is -ENOENT here for a get that only defers a miss (KVS_CORE_GET_DEFER): a
 * key keyed meanwhile, or one a peer's re-link hid from the walk, costs that
 * caller a later look, nothing else (store/dispatch.c: a miss met while the
 * backend is full is visited again once it has room).
 */
static int get_lockfree(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
			uint32_t shard, uint32_t flags, struct kvs_slot *slot)
{
	uint32_t i, st, gen, pin;
	uint64_t others;

	if (c->rank_idx < 0 || (uint32_t)c->rank_idx >= KVS_READER_RANKS ||
	    (flags & (KVS_GET_BYPASS_HIT | KVS_CORE_GET_REFILL | KVS_CORE_GET_DUMP)))
		return 1;
	i = kvs_core_find_unlocked(c, b, block, shard);
	if (i == KVS_IDX_NONE)
		return (flags & KVS_CORE_GET_DEFER) && (flags & KVS_CORE_GET_NO_OWN) ? -ENOENT : 1;
	/* acquire: pairs with the publish (the bytes); the generation relaxed,
	 * rechecked below */
	st = kvs_core_state_value(c, i, memory_order_acquire);
	gen = atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed);
	if (!ready_like(st) || kvs_core_reader_pin(c, i, &pin, &others))
		return 1;
	/* after the fetch_or (acquire): acquire again for the bytes of a
	 * DIRTY -> READY clean or a publish since; relaxed for the rest */
	st = kvs_core_state_value(c, i, memory_order_acquire);
	if (!ready_like(st) || !kvs_core_key_eq(&c->slots[i], block, shard) ||
	    atomic_load_explicit(&c->slots[i].generation, memory_order_relaxed) != gen) {
		kvs_core_reader_unpin(c, i, pin);
		return 1;
	}
	/* a new use when nobody else pins it (a hint: relaxed, see clock_use) */
	if (others == 0 && atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed) == 0)
		clock_use(c, i);
	else
		clock_alloc(c, i);
	count_get(c, flags, false, st);
	fill_slot(c, slot, i, pin, 0, st);
	return 0;
}

/* Is slot i (locked) pinned by nobody: no locked pin, no lock-free one (a hint
 * for CLOCK's weight: the lock-free bits are read relaxed)? */
static bool unpinned(struct kvs_cache *c, uint32_t i, uint32_t ref)
{
	return ref == 0 && atomic_load_explicit(&c->slots[i].readers, memory_order_relaxed) == 0;
}

static int get_once(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		    uint32_t shard, uint32_t flags, struct kvs_slot *slot)
{
	uint32_t i, pin, st, ref;
	bool owner, closed = false;
	int rc;

	rc = (flags & KVS_CORE_GET_TRY) ? kvs_core_bucket_trylock(c, b) : kvs_core_bucket_lock(c, b);
	if (rc)
		return rc;
	i = kvs_core_find(c, b, block, shard);
	if (i == KVS_IDX_NONE && (flags & KVS_CORE_GET_NO_OWN)) {
		rc = -ENOENT;
		goto out;
	}
	if (i == KVS_IDX_NONE) {
		rc = kvs_core_clock_victim(c, b, (flags & KVS_GET_ALLOW_RESERVED) ? KVS_CORE_POOL_ANY
									      : KVS_CORE_POOL_MAIN, &i);
		if (rc)
			goto out;
		rc = kvs_core_pin_add(c, i, KVS_PIN_OWNER, &pin);
		if (rc) {
			kvs_core_readers_open(c, i); /* EMPTY on our chain: free again */
			goto out;
		}
		/* i is EMPTY on our chain: key it (EMPTY while the key is
		 * written, so a death here leaves nothing half-keyed). */
		kvs_core_key_write(&c->slots[i], block, shard);
		atomic_fetch_add_explicit(&c->slots[i].generation, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&c->slots[i].ref, 1, memory_order_relaxed);
		make_owner(c, i);
		kvs_core_readers_open(c, i);
		clock_alloc(c, i);
		count_get(c, flags, true, KVS_SHM_SLOT_LOADING);
		fill_slot(c, slot, i, pin, KVS_SLOT_OWNER, KVS_SHM_SLOT_LOADING);
		goto out;
	}
	/* relaxed: ref and state are stable under the bucket lock except for
	 * the owner's publish, which only moves LOADING to READY/FAILED */
	ref = atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed);
	st = kvs_core_state_value(c, i, memory_order_acquire); /* acquire: pairs with the publish */
	/* LOADING or FAILED unpinned (retry, or preallocated), or a forced reload
	 * (of READY bytes: DIRTY ones are in no backend); a refill takes FAILED
	 * whoever pins it (a dump holds the bytes a failed load lacked) */
	owner = (ref == 0 && (!ready_like(st) ||
			      (st == KVS_SHM_SLOT_READY && (flags & KVS_GET_BYPASS_HIT)))) ||
		(st == KVS_SHM_SLOT_FAILED && (flags & KVS_CORE_GET_REFILL));
	if (owner && (flags & KVS_CORE_GET_NO_OWN)) {
		rc = -ENOENT; /* there, but not filled: nothing to pin */
		goto out;
	}
	/* Bytes a lock-free pin may be reading (READY; FAILED by the drop of a
	 * DIRTY slot one pinned) are refilled only once no such pin is left,
	 * as an evictor takes them (pin.c); else this get joins as a reader.  A
	 * dump's refill is exempt, as it is from locked pins: it writes the
	 * block's own bytes. */
	if (owner && (st == KVS_SHM_SLOT_READY ||
		      (st == KVS_SHM_SLOT_FAILED && !(flags & KVS_CORE_GET_REFILL)))) {
		closed = kvs_core_readers_close(c, i);
		owner = closed;
	}
	rc = kvs_core_pin_add(c, i, owner ? KVS_PIN_OWNER : 0, &pin);
	if (rc) {
		if (closed)
			kvs_core_readers_open(c, i);
		goto out;
	}
	atomic_store_explicit(&c->slots[i].ref, ref + 1, memory_order_relaxed);
	/* A new use: a hit on a READY slot nobody pins.  A get that joins a
	 * pinned slot (the other TP ranks of the same load) is the same use, and
	 * a refill (owner) is an allocation: neither raises the weight. */
	if (!owner && unpinned(c, i, ref) && ready_like(st))
		clock_use(c, i);
	else
		clock_alloc(c, i);
	if (owner) {
		make_owner(c, i);
		st = KVS_SHM_SLOT_LOADING;
	}
	if (closed)
		kvs_core_readers_open(c, i);
	count_get(c, flags, owner, st);
	fill_slot(c, slot, i, pin, owner ? KVS_SLOT_OWNER : 0, st);
out:
	kvs_core_bucket_unlock(c, b);
	return rc;
}

KVS_API int kvs_cache_get(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
			  uint32_t flags, struct kvs_slot *slot)
{
	int rc;

	if (flags & ~(KVS_GET_BYPASS_HIT | KVS_GET_ALLOW_RESERVED))
		return -EINVAL;
	rc = kvs_core_get(c, block, shard, flags, slot);
	if (rc == 0)
		slot->state = public_state(slot->state);
	return rc;
}

/*
 * The handle is checked against shared state, never trusted: its pin entry
 * must name its slot (else it was released, or never got: -ESTALE), and the
 * slot's generation must be the handle's (a pinned slot is never re-keyed, so a
 * difference means the handle is older than the residency: -ESTALE).  Returns
 * the pin entry's value.  The entry is this process's own, read relaxed: only
 * the thread that owns the handle changes it.
 */
static int slot_check(struct kvs_cache *c, const struct kvs_slot *slot, uint32_t *pinv)
{
	uint32_t v;

	if (!c || !slot || slot->index >= c->slot_count || slot->pin >= KVS_RANK_PINS)
		return -EINVAL;
	v = atomic_load_explicit(&c->me->pins[slot->pin], memory_order_relaxed);
	if ((v & KVS_PIN_SLOT_MASK) != slot->index + 1 ||
	    atomic_load_explicit(&c->slots[slot->index].generation, memory_order_relaxed) !=
		    slot->generation)
		return -ESTALE;
	*pinv = v;
	return 0;
}

/* Is the handle whose pin entry is v the unpublished owner of its slot?  Its
 * pin must carry the owner bit, the slot's filler must be this rank, and the
 * slot must still be LOADING. */
static bool slot_owned(struct kvs_cache *c, const struct kvs_slot *slot, uint32_t v)
{
	uint32_t i = slot->index;

	/* relaxed: the filler and state of a slot we pin as its owner change
	 * only by our own publish or a takeover (which needs us dead) */
	return (v & KVS_PIN_OWNER) &&
	       kvs_core_state_value(c, i, memory_order_relaxed) == KVS_SHM_SLOT_LOADING &&
	       atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed) ==
		       kvs_core_filler((uint32_t)c->rank_idx, c->rank_epoch);
}

int kvs_core_slot_state(struct kvs_cache *c, struct kvs_slot *slot)
{
	uint32_t v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	/* acquire: pairs with the owner's publish (the bytes and error code) */
	slot->state = kvs_core_state_value(c, slot->index, memory_order_acquire);
	if (slot->state == KVS_SHM_SLOT_FAILED)
		slot->error = atomic_load_explicit(&c->slots[slot->index].error, memory_order_relaxed);
	return (int)slot->state;
}

KVS_API int kvs_slot_state(struct kvs_cache *c, struct kvs_slot *slot)
{
	int rc = kvs_core_slot_state(c, slot);

	if (rc < 0)
		return rc;
	slot->state = public_state(slot->state);
	return (int)slot->state;
}

int kvs_core_slot_refill(struct kvs_cache *c, struct kvs_slot *slot)
{
	uint32_t b, v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	if (v & KVS_PIN_READER)
		return -EPERM; /* counted in no ref: never an owner's pin (a dump's gets lock) */
	rc = kvs_core_slot_lock(c, slot->index, &b);
	if (rc)
		return rc;
	/* relaxed: under the bucket lock, where a FAILED slot changes */
	if (kvs_core_state_value(c, slot->index, memory_order_relaxed) == KVS_SHM_SLOT_FAILED) {
		make_owner(c, slot->index);
		kvs_core_pin_set_owner(c, slot->pin);
		slot->flags |= KVS_SLOT_OWNER;
		slot->state = KVS_SHM_SLOT_LOADING;
	} else {
		rc = -EAGAIN; /* refilled by another meanwhile: look at it again */
	}
	kvs_core_bucket_unlock(c, b);
	return rc;
}

int kvs_core_slot_lock_pinned(struct kvs_cache *c, struct kvs_slot *slot, uint32_t *b)
{
	uint32_t v;
	int rc = slot_check(c, slot, &v);

	return rc ? rc : kvs_core_slot_lock(c, slot->index, b);
}

struct takeover {
	struct kvs_cache *c;
	struct kvs_slot *slot;
	uint32_t flags;
	bool owner; /* set when this waiter took the slot over */
};

/* Wait check hook, once per slice: is the filler alive?  If not, reap it and
 * take its slot over (or fail it, KVS_SLOT_WAIT_NO_TAKEOVER). */
static int filler_check(void *arg)
{
	struct takeover *t = arg;
	struct kvs_cache *c = t->c;
	uint32_t i = t->slot->index, b;
	bool failed = false;
	/* relaxed: a hint, rechecked under the lock */
	uint64_t f = atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed);
	int rc;

	if (kvs_core_rank_alive(c, (uint32_t)(f >> 32), (uint32_t)f))
		return 0;
	kvs_core_reap_try(c); /* its pins; the takeover below needs none of it */
	rc = kvs_core_slot_lock(c, i, &b);
	if (rc)
		return 0; /* try again next slice; the deadline still bounds us */
	if (kvs_core_state_value(c, i, memory_order_relaxed) != KVS_SHM_SLOT_LOADING ||
	    atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed) != f) {
		/* published meanwhile, or already taken over by a peer */
	} else if (t->flags & KVS_SLOT_WAIT_NO_TAKEOVER) {
		/* relaxed: the publish (release) orders it */
		atomic_store_explicit(&c->slots[i].error, -KVS_EOWNERDEAD, memory_order_relaxed);
		kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_FAILED);
		kvs_log_info(&c->log, "slot %u: filler rank %u died; failed", i, (uint32_t)(f >> 32));
		failed = true;
	} else {
		/* Only the filler changes: the word stays LOADING with its WAITERS
		 * bit, so the other sleepers are woken by our publish later. */
		set_filler(c, i);
		kvs_core_pin_set_owner(c, t->slot->pin);
		t->owner = true;
		KVS_COUNT(c, takeovers, 1);
		kvs_log_info(&c->log, "slot %u: filler rank %u died; taken over", i, (uint32_t)(f >> 32));
	}
	kvs_core_bucket_unlock(c, b);
	return t->owner || failed ? -KVS_EOWNERDEAD : 0;
}

int kvs_core_slot_recover(struct kvs_cache *c, struct kvs_slot *slot, uint32_t flags)
{
	struct takeover t = { .c = c, .slot = slot, .flags = flags, .owner = false };
	uint32_t v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	/* relaxed: a hint; filler_check rechecks under the bucket lock */
	if (kvs_core_state_value(c, slot->index, memory_order_relaxed) != KVS_SHM_SLOT_LOADING ||
	    slot_owned(c, slot, v))
		return 0;
	filler_check(&t);
	if (!t.owner)
		return 0;
	slot->flags |= KVS_SLOT_OWNER;
	slot->state = KVS_SHM_SLOT_LOADING;
	return KVS_SLOT_WAIT_OWNER;
}

/* What a wait that saw state st returns. */
static int wait_result(struct kvs_cache *c, struct kvs_slot *slot, int st)
{
	slot->state = public_state((uint32_t)st);
	if (ready_like((uint32_t)st))
		return KVS_SLOT_WAIT_READY;
	if (st == KVS_SHM_SLOT_FAILED) {
		/* relaxed: ordered by the acquire that saw FAILED */
		slot->error = atomic_load_explicit(&c->slots[slot->index].error, memory_order_relaxed);
		return KVS_SLOT_WAIT_FAILED;
	}
	/* LOADING -> EMPTY (or garbage) cannot happen while we pin it */
	kvs_log_error(&c->log, "slot %u: pinned slot left LOADING for state %d", slot->index, st);
	return -KVS_ECORRUPT;
}

/*
 * A wait that timed out on a live filler: name it (rank entry and pid) for the
 * operator, as a bucket lock timeout does.  The filler word is a hint read
 * without the lock; the rank is bounded before its pid is read.
 */
void kvs_core_log_fill_timeout(struct kvs_cache *c, uint32_t i, uint64_t timeout_ns)
{
	/* relaxed: diagnostics only */
	uint64_t f = atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed);
	uint32_t r = (uint32_t)(f >> 32);

	if (f == KVS_FILLER_NONE || r >= KVS_MAX_RANKS) {
		kvs_log_warn(&c->log, "slot %u: not published within %llu ns (no filler recorded)",
			     i, (unsigned long long)timeout_ns);
		return;
	}
	kvs_log_warn(&c->log, "slot %u: not published within %llu ns: filled by rank entry %u "
			      "(pid %d, alive; stopped?)",
		     i, (unsigned long long)timeout_ns, r,
		     __atomic_load_n(&c->ranks[r].pid, __ATOMIC_RELAXED));
}

KVS_API int kvs_slot_wait(struct kvs_cache *c, struct kvs_slot *slot, uint32_t flags,
			  uint64_t timeout_ns)
{
	struct takeover t = { .c = c, .slot = slot, .flags = flags, .owner = false };
	struct kvs_wait_opts o;
	uint64_t t0;
	uint32_t v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	if (flags & ~KVS_SLOT_WAIT_NO_TAKEOVER)
		return -EINVAL;
	/* acquire: pairs with the owner's publish (the bytes and error code) */
	rc = (int)kvs_core_state_value(c, slot->index, memory_order_acquire);
	if (rc != KVS_SHM_SLOT_LOADING)
		return wait_result(c, slot, rc);
	if (slot_owned(c, slot, v))
		return -EDEADLK;
	memset(&o, 0, sizeof(o));
	o.deadline_ns = kvs_deadline_after(timeout_ns);
	o.check = filler_check;
	o.check_arg = &t;
	o.spin = &c->spin;
	o.mode = c->cfg.wait;
	t0 = kvs_now_ns();
	rc = kvs_wait_while(&c->states[slot->index], KVS_SHM_SLOT_LOADING, &o);
	KVS_COUNT(c, waits, 1);
	KVS_COUNT(c, wait_ns, kvs_now_ns() - t0);
	if (t.owner) {
		slot->flags |= KVS_SLOT_OWNER;
		slot->state = KVS_SHM_SLOT_LOADING;
		return KVS_SLOT_WAIT_OWNER;
	}
	if (rc == -KVS_EOWNERDEAD) /* failed by our own check: read what we published */
		rc = (int)kvs_core_state_value(c, slot->index, memory_order_acquire);
	if (rc == -ETIMEDOUT && timeout_ns) /* a zero timeout is a poll: nothing to say */
		kvs_core_log_fill_timeout(c, slot->index, timeout_ns);
	if (rc < 0)
		return rc;
	return wait_result(c, slot, rc);
}

KVS_API int kvs_slot_data(struct kvs_cache *c, const struct kvs_slot *slot, void **ptr)
{
	uint32_t v;
	int rc;

	if (ptr)
		*ptr = NULL;
	if (!c || !ptr)
		return -EINVAL;
	if (c->cfg.device_id < 0)
		return -EOPNOTSUPP;
	rc = slot_check(c, slot, &v);
	if (rc)
		return rc;
	*ptr = kvs_core_slot_addr(c, slot->index);
	return *ptr ? 0 : -KVS_ECORRUPT;
}

void *kvs_core_slot_addr(const struct kvs_cache *c, uint32_t i)
{
	for (uint32_t s = 0; s < c->seg_count; s++) {
		const struct kvs_core_seg *g = &c->geo[s];
		uint64_t rel = i - g->first_slot;

		if (i < g->first_slot || rel >= g->slot_count)
			continue;
		rel = c->slot_shift >= 0 ? rel << c->slot_shift : rel * c->slot_bytes;
		return (char *)c->segs[s].base + rel;
	}
	return NULL;
}

static int publish(struct kvs_cache *c, struct kvs_slot *slot, uint32_t state, int err)
{
	uint32_t i, v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	if (!slot_owned(c, slot, v))
		return -EPERM;
	i = slot->index;
	if (state == KVS_SHM_SLOT_FAILED) {
		/* relaxed: the publish below (release) orders it for the waiters */
		atomic_store_explicit(&c->slots[i].error, err, memory_order_relaxed);
		KVS_COUNT(c, failures, 1);
	} else {
		KVS_COUNT(c, owner_fills, 1);
	}
	kvs_wait_publish(&c->states[i], state);
	/* The pin owned the fill, not the slot: once published it is a plain pin,
	 * so a later refill of the slot by this process (another handle's pin,
	 * owning the new fill) is never cancelled by this pin's release.  relaxed,
	 * without the bucket lock: our own entry, and every reader of the bit
	 * (release, repair, the reaper) also checks the slot is LOADING by us. */
	atomic_fetch_and_explicit(&c->me->pins[slot->pin], ~KVS_PIN_OWNER, memory_order_relaxed);
	slot->state = state;
	slot->error = err;
	slot->flags &= ~KVS_SLOT_OWNER;
	return 0;
}

KVS_API int kvs_slot_publish_ready(struct kvs_cache *c, struct kvs_slot *slot)
{
	return publish(c, slot, KVS_SHM_SLOT_READY, 0);
}

int kvs_core_slot_publish_dirty(struct kvs_cache *c, struct kvs_slot *slot, uint64_t until_ns)
{
	int rc;

	if (slot->index >= c->slot_count)
		return -EINVAL;
	/* relaxed: ordered for every reader by the publish below (release); the
	 * slot is ours (LOADING, pinned, filled by us) until then */
	atomic_store_explicit(&c->slots[slot->index].dirty_until_ns, until_ns, memory_order_relaxed);
	/* the hint first: it never counts fewer than the DIRTY slots (relaxed: a
	 * count, read by sweeps that look at every state word anyway) */
	atomic_fetch_add_explicit(&c->hdr->dirty_hint, 1, memory_order_relaxed);
	rc = publish(c, slot, KVS_SHM_SLOT_DIRTY, 0);
	if (rc)
		atomic_fetch_sub_explicit(&c->hdr->dirty_hint, 1, memory_order_relaxed);
	return rc;
}

KVS_API int kvs_slot_publish_failed(struct kvs_cache *c, struct kvs_slot *slot, int err)
{
	if (err >= 0)
		return -EINVAL;
	return publish(c, slot, KVS_SHM_SLOT_FAILED, err);
}

void kvs_core_prefetch_release(struct kvs_cache *c, const struct kvs_slot *slot, uint64_t hash)
{
	if (slot->index >= c->slot_count || slot->pin >= KVS_RANK_PINS)
		return;
	__builtin_prefetch(&c->slots[slot->index]);
	/* relaxed: our own entry; a wrong guess costs one prefetch */
	if (!(atomic_load_explicit(&c->me->pins[slot->pin], memory_order_relaxed) & KVS_PIN_READER))
		__builtin_prefetch(&c->buckets[kvs_core_bucket_of(c, hash)], 1);
}

KVS_API int kvs_slot_release(struct kvs_cache *c, struct kvs_slot *slot)
{
	uint32_t b, v;
	int rc = slot_check(c, slot, &v);

	if (rc)
		return rc;
	if (v & KVS_PIN_READER) {
		kvs_core_reader_unpin(c, slot->index, slot->pin);
		goto done;
	}
	if (slot_owned(c, slot, v))
		publish(c, slot, KVS_SHM_SLOT_FAILED, -ECANCELED);
	rc = kvs_core_slot_lock(c, slot->index, &b);
	if (rc)
		return rc;
	atomic_fetch_sub_explicit(&c->slots[slot->index].ref, 1, memory_order_relaxed); /* under lock */
	kvs_core_pin_del(c, slot->pin);
	kvs_core_bucket_unlock(c, b);
done:
	memset(slot, 0, sizeof(*slot));
	slot->pin = UINT32_MAX;
	return 0;
}

/* Is (block, shard) READY (or every shard, KVS_ALL_SHARDS)?  1, 0 or -errno. */
static int resident(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		    bool touch)
{
	uint32_t lo = shard, hi = shard + 1;
	int found = 0;

	if (shard == KVS_ALL_SHARDS) {
		lo = 0;
		hi = c->shards_per_block;
	} else if (shard >= c->shards_per_block) {
		return -EINVAL;
	}
	for (uint32_t s = lo; s < hi; s++) {
		uint32_t b = kvs_core_bucket_of(c, kvs_core_hash(block, s)), i;
		int rc = kvs_core_bucket_lock(c, b);

		if (rc)
			return rc;
		i = kvs_core_find(c, b, block, s);
		if (i != KVS_IDX_NONE && touch) {
			clock_use(c, i);
			found++;
		} else if (i != KVS_IDX_NONE && ready_like(kvs_core_state_value(c, i, memory_order_relaxed))) {
			found++;
		}
		kvs_core_bucket_unlock(c, b);
		if (!touch && found != (int)(s - lo + 1))
			return 0;
	}
	return touch ? found : 1;
}

KVS_API int kvs_cache_exists(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard)
{
	if (!c || !block || shard == KVS_ALL_SHARDS)
		return -EINVAL;
	return resident(c, block, shard, false);
}

KVS_API int kvs_cache_lookup(struct kvs_cache *c, const struct kvs_block_id *blocks, size_t n,
			     uint32_t shard, bool *hits)
{
	int count = 0;

	if (!c || (n && (!blocks || !hits)) || n > INT32_MAX)
		return -EINVAL;
	for (size_t k = 0; k < n; k++) {
		int rc = resident(c, &blocks[k], shard, false);

		if (rc < 0)
			return rc;
		hits[k] = rc == 1;
		count += rc;
	}
	return count;
}

KVS_API int kvs_cache_lookup_prefix(struct kvs_cache *c, const struct kvs_block_id *blocks,
				    size_t n, uint32_t shard)
{
	if (!c || (n && !blocks) || n > INT32_MAX)
		return -EINVAL;
	for (size_t k = 0; k < n; k++) {
		int rc = resident(c, &blocks[k], shard, false);

		if (rc <= 0)
			return rc < 0 ? rc : (int)k;
	}
	return (int)n;
}

KVS_API int kvs_cache_touch(struct kvs_cache *c, const struct kvs_block_id *blocks, size_t n)
{
	int count = 0;

	if (!c || (n && !blocks) || n > INT32_MAX)
		return -EINVAL;
	for (size_t k = 0; k < n; k++) {
		int rc = resident(c, &blocks[k], KVS_ALL_SHARDS, true);

		if (rc < 0)
			return rc;
		count += rc;
	}
	return count;
}

KVS_API int kvs_cache_prealloc(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard)
{
	return kvs_core_prealloc(c, block, shard, 0);
}

int kvs_core_prealloc(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		      uint32_t flags)
{
	uint32_t b, i;
	int rc;

	if (!c || !block || shard >= c->shards_per_block)
		return -EINVAL;
	if (c->cfg.device_id < 0)
		return -EOPNOTSUPP;
	/* One lock section: the slot is keyed LOADING, unpinned, with no filler,
	 * so the next get owns it at once (row "LOADING, ref 0") and no get can
	 * ever find it pinned and wait for a fill nobody makes. */
	b = kvs_core_bucket_of(c, kvs_core_hash(block, shard));
	rc = (flags & KVS_CORE_GET_TRY) ? kvs_core_bucket_trylock(c, b) : kvs_core_bucket_lock(c, b);
	if (rc)
		return rc;
	if (kvs_core_find(c, b, block, shard) != KVS_IDX_NONE) {
		rc = 0; /* resident in any state: nothing to prepare */
	} else {
		rc = kvs_core_clock_victim(c, b, KVS_CORE_POOL_PREALLOC, &i);
		if (rc == 0) {
			kvs_core_key_write(&c->slots[i], block, shard);
			atomic_fetch_add_explicit(&c->slots[i].generation, 1, memory_order_relaxed);
			atomic_store_explicit(&c->slots[i].filler, KVS_FILLER_NONE, memory_order_relaxed);
			atomic_store_explicit(&c->slots[i].error, 0, memory_order_relaxed);
			kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_LOADING);
			kvs_core_readers_open(c, i);
			clock_alloc(c, i);
			rc = 1;
		}
	}
	kvs_core_bucket_unlock(c, b);
	return rc;
}
