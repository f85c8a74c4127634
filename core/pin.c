/*
 * core/pin.c — pins: the per-process record of which slots a process holds.
 *
 * A pin is two writes under the slot's bucket lock: an entry in the pinning
 * process's pin table (slot index + 1, with KVS_PIN_OWNER on the one pin that
 * owns the slot's fill) and ref++.  Release undoes both under the same lock.
 * So whoever repairs a bucket can recount refs from the pin tables (index.c),
 * whoever reaps a dead rank knows exactly which refs were its and which fills
 * it left unfinished, and a slot handle can be checked against its pin entry
 * (slot.c) instead of being trusted.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>

#include "core/core.h"
#include "wait/wait.h"

int kvs_core_pin_add(struct kvs_cache *c, uint32_t i, bool owner, uint32_t *pin)
{
	uint32_t v = (i + 1) | (owner ? KVS_PIN_OWNER : 0);
	/* relaxed: only a starting point for the scan */
	uint32_t start = atomic_load_explicit(&c->pin_hint, memory_order_relaxed);

	for (uint32_t n = 0; n < KVS_RANK_PINS; n++) {
		uint32_t p = (start + n) % KVS_RANK_PINS;
		uint32_t zero = 0;

		/* relaxed: the entry is ordered for readers by the bucket lock we
		 * hold (repair, reaper, check all read under it); the CAS only
		 * arbitrates between this process's threads */
		if (atomic_compare_exchange_strong_explicit(&c->me->pins[p], &zero, v,
							    memory_order_relaxed,
							    memory_order_relaxed)) {
			atomic_store_explicit(&c->pin_hint, p + 1, memory_order_relaxed);
			*pin = p;
			return 0;
		}
	}
	kvs_log_warn(&c->log, "pin table full (%u slots pinned by this process)", KVS_RANK_PINS);
	return -ENOSPC;
}

void kvs_core_pin_set_owner(struct kvs_cache *c, uint32_t pin)
{
	/* relaxed: under the slot's bucket lock, like kvs_core_pin_add */
	atomic_fetch_or_explicit(&c->me->pins[pin], KVS_PIN_OWNER, memory_order_relaxed);
}

void kvs_core_pin_del(struct kvs_cache *c, uint32_t pin)
{
	/* relaxed: under the slot's bucket lock, like kvs_core_pin_add */
	atomic_store_explicit(&c->me->pins[pin], 0, memory_order_relaxed);
	atomic_store_explicit(&c->pin_hint, pin, memory_order_relaxed);
}

/* Under slot i's bucket lock: drop pin entry p (value v) of rank r. */
static void drop_one(struct kvs_cache *c, uint32_t r, uint32_t epoch, uint32_t p, uint32_t v)
{
	struct kvs_shm_rank *e = &c->ranks[r];
	uint32_t i = (v & KVS_PIN_SLOT_MASK) - 1;
	bool self = (int)r == c->rank_idx;
	uint32_t ref = atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed);
	uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
	uint64_t f = atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed);

	/* ref is a cache of the pin entries: never let a corrupt count wrap */
	if (ref > 0)
		atomic_store_explicit(&c->slots[i].ref, ref - 1, memory_order_relaxed);
	atomic_store_explicit(&e->pins[p], 0, memory_order_relaxed);
	/* An unfinished fill of r: at close, fail it for everyone; for a dead
	 * rank with waiters left, leave it to their takeover. */
	if ((v & KVS_PIN_OWNER) && st == KVS_SHM_SLOT_LOADING && f == kvs_core_filler(r, epoch) &&
	    (self || ref <= 1)) {
		atomic_store_explicit(&c->slots[i].error, self ? -ECANCELED : -KVS_EOWNERDEAD,
				      memory_order_relaxed);
		kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_FAILED);
	}
}

int kvs_core_drop_pins(struct kvs_cache *c, uint32_t r)
{
	struct kvs_shm_rank *e = &c->ranks[r];
	/* relaxed: the entry's epoch changes only under the lifecycle lock, which
	 * every caller holds or (for its own entry) does not need */
	uint32_t epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed);
	int dropped = 0;

	for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
		/* relaxed: rechecked under the bucket lock */
		uint32_t v = atomic_load_explicit(&e->pins[p], memory_order_relaxed), b;
		int rc;

		if (v == 0)
			continue;
		if ((v & KVS_PIN_SLOT_MASK) == 0 || (v & KVS_PIN_SLOT_MASK) > c->slot_count) {
			/* names no slot: nothing to drop (kvs_cache_check reports it) */
			atomic_store_explicit(&e->pins[p], 0, memory_order_relaxed);
			continue;
		}
		rc = kvs_core_slot_lock(c, (v & KVS_PIN_SLOT_MASK) - 1, &b);
		if (rc)
			return rc;
		if (atomic_load_explicit(&e->pins[p], memory_order_relaxed) == v) {
			drop_one(c, r, epoch, p, v);
			dropped++;
		}
		kvs_core_bucket_unlock(c, b);
	}
	return dropped;
}
