/*
 * core/pin.c — pins: the per-process record of which slots a process holds.
 *
 * A locked pin is two writes under the slot's bucket lock: an entry in the
 * pinning process's pin table (slot index + 1, with KVS_PIN_OWNER on the one
 * pin that owns the slot's fill) and ref++.  Release undoes both under the
 * same lock.  So whoever repairs a bucket can recount refs from the pin tables
 * (index.c), whoever reaps a dead rank knows exactly which refs were its and
 * which fills it left unfinished, and a slot handle can be checked against its
 * pin entry (slot.c) instead of being trusted.
 *
 * Lock-free pins.  A READY or DIRTY hit -- most gets -- pins without the
 * bucket lock (the two robust mutex pairs of a get and its release were
 * about 40% of a hit's instructions: docs/store.md, "What a hit costs").
 * The protocol is model/pin.pml's, checked by Spin with any process killed at
 * any step, and each step below is one of its statements:
 *
 *   pin (rank r):  look the key up without the lock (slot.c: chain, key,
 *                  state, generation); write the pin entry, KVS_PIN_READER;
 *                  fetch_or bit r into the slot's readers word; KVS_READERS_EV
 *                  in the old word, or a state, key or generation no longer
 *                  what the lookup read: undo (the bit, then the entry) and
 *                  take the locked path.  Otherwise the slot cannot be
 *                  re-keyed or refilled until the bit goes.
 *   release:       fetch_and ~bit r, then the entry cleared.
 *   evict:         under the bucket lock with ref 0: CAS(readers, 0, EV) or
 *                  leave the slot; re-key it; fetch_and ~EV once it is LOADING
 *                  under its new key.  An owner that refills a slot in place
 *                  (a forced reload of READY bytes, a retry of FAILED ones)
 *                  does the same.
 *   reap (r dead): every KVS_PIN_READER entry of r: fetch_and ~bit r, then the
 *                  entry cleared -- whether or not r got as far as the bit:
 *                  only r sets it, and it is idempotent.
 *   repair:        whoever repairs a bucket clears EV on its slots: only a
 *                  holder of the slot's bucket lock sets it.
 *
 * Every pin and every eviction is ordered by RMWs on the one readers word, so
 * no fence pairs two words: the pin's fetch_or is acq_rel (release: the entry
 * is written before a reaper could see the bit; acquire: its rechecks read
 * after it, and see a whole re-key whose EV clear, a release, it follows);
 * the release's fetch_and is release (the copy's reads happen before the next
 * residency's writes, whose CAS acquires).  A bit is per rank entry, not per
 * pin: a process whose thread already holds the bit pins under the lock (no
 * private count is shared between threads).  Rank entries 0..62 get bits; the
 * last entry's would be EV's, so it always pins under the lock.  ref counts
 * locked pins only, so a bucket's repair recounts it from the entries without
 * KVS_PIN_READER.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>

#include "core/core.h"
#include "wait/wait.h"

/*
 * The free entry is looked for from pin_hint, one past the last one taken, so
 * entries are taken in table order and a release does not move the hint.  In
 * the store, pins are added by the dispatcher and released by the copier on
 * another core: had a release pointed the hint at the entry it freed (as it
 * once did), every add took that entry back, a line the other core had just
 * written, as did its store of the hint -- a tenth of the dispatcher's time on
 * READY hits (perf, hit_bench --path ready, 8 KiB).  Taken in order, 16
 * entries share a line, freed a while before they come round again; the store
 * pins at most half the table (its pin budget), so the scan meets a free
 * entry within a few looks.
 */
int kvs_core_pin_add(struct kvs_cache *c, uint32_t i, uint32_t kind, uint32_t *pin)
{
	uint32_t v = (i + 1) | kind;
	/* relaxed: only a starting point for the scan */
	uint32_t start = atomic_load_explicit(&c->pin_hint, memory_order_relaxed);

	for (uint32_t n = 0; n < KVS_RANK_PINS; n++) {
		uint32_t p = (start + n) % KVS_RANK_PINS;
		uint32_t zero = 0;

		/* relaxed: the entry is ordered for readers by the bucket lock we
		 * hold (repair, reaper, check all read under it), or, a lock-free
		 * pin's, by its fetch_or (release) after it; the CAS only
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
	/* release: a lock-free pin's entry goes after its bit (a reaper that no
	 * longer sees the entry must not find the bit); a locked pin's is under
	 * the bucket lock anyway. */
	atomic_store_explicit(&c->me->pins[pin], 0, memory_order_release);
}

static inline uint64_t reader_bit(uint32_t r)
{
	return UINT64_C(1) << r;
}

int kvs_core_reader_pin(struct kvs_cache *c, uint32_t i, uint32_t *pin, uint64_t *others)
{
	uint64_t bit = reader_bit((uint32_t)c->rank_idx), old;
	int rc = kvs_core_pin_add(c, i, KVS_PIN_READER, pin);

	if (rc)
		return rc;
	/* acq_rel: release, the entry before the bit; acquire, the caller's
	 * rechecks after it (see the top of this file) */
	old = atomic_fetch_or_explicit(&c->slots[i].readers, bit, memory_order_acq_rel);
	if (old & bit) {
		/* another thread of ours holds it: its entry covers the bit */
		kvs_core_pin_del(c, *pin);
		return -EBUSY;
	}
	if (old & KVS_READERS_EV) {
		kvs_core_reader_unpin(c, i, *pin);
		return -EBUSY;
	}
	*others = old;
	return 0;
}

void kvs_core_reader_unpin(struct kvs_cache *c, uint32_t i, uint32_t pin)
{
	/* release: our reads of the slot happen before a later evictor's CAS
	 * (acquire) lets it rewrite the slot */
	atomic_fetch_and_explicit(&c->slots[i].readers, ~reader_bit((uint32_t)c->rank_idx),
				  memory_order_release);
	kvs_core_pin_del(c, pin);
}

bool kvs_core_readers_close(struct kvs_cache *c, uint32_t i)
{
	uint64_t none = 0;

	/* acquire: pairs with the last reader's release (its copy is over before
	 * our writes).  relaxed on failure: we leave the slot alone. */
	return atomic_compare_exchange_strong_explicit(&c->slots[i].readers, &none, KVS_READERS_EV,
						       memory_order_acquire, memory_order_relaxed);
}

void kvs_core_readers_open(struct kvs_cache *c, uint32_t i)
{
	/* release: the new key, generation and state are written before a pin
	 * whose fetch_or (acquire) follows this can see the slot open */
	atomic_fetch_and_explicit(&c->slots[i].readers, ~KVS_READERS_EV, memory_order_release);
}

/* Drop lock-free pin entry p (value v) of rank r: the bit, then the entry, as
 * a release does, and with no bucket lock (the model's reaper holds none).
 * r's bit may be set or not (r died either side of its fetch_or); only r sets
 * it, so clearing it takes nobody else's pin.  release: as
 * kvs_core_reader_unpin. */
static void drop_reader(struct kvs_cache *c, uint32_t r, uint32_t p, uint32_t v)
{
	uint32_t i = (v & KVS_PIN_SLOT_MASK) - 1;

	if (r < KVS_READER_RANKS)
		atomic_fetch_and_explicit(&c->slots[i].readers, ~reader_bit(r), memory_order_release);
	atomic_store_explicit(&c->ranks[r].pins[p], 0, memory_order_release);
}

/* Under slot i's bucket lock: drop locked pin entry p (value v) of rank r. */
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
		if (v & KVS_PIN_READER) {
			drop_reader(c, r, p, v);
			dropped++;
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
