/*
 * core/index.c — the hash index: bucket locks, chains, repair, lookup.
 *
 * Every slot is always on exactly one bucket chain: its bucket_idx field says
 * which (the truth), the chain links are a cache of it.  A keyed slot sits on
 * the bucket of its key's hash; an EMPTY slot may sit anywhere (initially slot i
 * sits on bucket i, buckets >= slots).  Chains, keys, refs and pins of a
 * bucket's slots change only under that bucket's lock -- but for a lock-free
 * pin's entry and bit (pin.c), which is why links and keys are atomic words a
 * lookup may read unlocked (kvs_core_find_unlocked).
 *
 * Locks are robust process-shared mutexes taken with a deadline, in slices
 * (see kvs_core_bucket_lock for why).  EOWNERDEAD means the holder
 * died at some instruction of a chain edit, a re-key or a pin update; the new
 * holder rebuilds the chain from bucket_idx, recounts refs from the pin tables
 * (dead ranks' pins included: the reaper drops them later, one by one) and
 * only then marks the mutex consistent.  Nothing is ever "ignored".
 *
 * CLOCK eviction (clock.c) moves slots between chains with kvs_core_chain_move.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <time.h>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

/*
 * The kind word of a robust process-shared mutex as this glibc makes it.
 * glibc dispatches on a mutex's kind (bits/struct_mutex.h: __data.__kind) to
 * code paths that trust it: a peer that writes another kind there (priority
 * inheritance, or lock elision, whose XABORT is an illegal instruction on CPUs
 * without RTM) could crash every rank that takes the lock.  So the kind is
 * compared before each lock; another one is -KVS_ECORRUPT.  (A peer rewriting
 * it between the check and the lock can still do harm: a hostile group member
 * can always hold a lock; it should not get to crash others by one byte.)
 */
static int good_kind;
static pthread_once_t good_kind_once = PTHREAD_ONCE_INIT;

static void good_kind_init(void)
{
	pthread_mutex_t m;

	if (kvs_core_mutex_init(&m) == 0) {
		good_kind = m.__data.__kind;
		pthread_mutex_destroy(&m);
	}
}

/* Is m (named what and id, KVS_IDX_NONE for none, in the log) a robust
 * process-shared mutex? */
static bool mutex_sane(struct kvs_cache *c, pthread_mutex_t *m, const char *what, uint32_t id)
{
	/* relaxed: glibc writes the kind only when the mutex is initialised */
	int kind = __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED);

	pthread_once(&good_kind_once, good_kind_init);
	if (kind == good_kind)
		return true;
	if (id == KVS_IDX_NONE)
		kvs_log_error(&c->log, "%s: lock kind 0x%x is not a robust process-shared mutex: "
			      "corrupt", what, (unsigned)kind);
	else
		kvs_log_error(&c->log, "%s %u: lock kind 0x%x is not a robust process-shared mutex: "
			      "corrupt", what, id, (unsigned)kind);
	return false;
}

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
		atomic_store_explicit(&s->next, head, memory_order_relaxed);
		head = i;
		atomic_store_explicit(&s->ref, 0, memory_order_relaxed);
		/* A keyed slot whose key does not hash here was mid-re-key: the
		 * re-key sets EMPTY before writing the key, so this is only
		 * defensive; make it EMPTY so it is never found under a wrong key. */
		if (state_of(c, i) != KVS_SHM_SLOT_EMPTY &&
		    kvs_core_bucket_of(c, kvs_core_key_hash(s)) != b)
			kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_EMPTY);
		/* An evictor's bit: only a holder of this lock sets it, and it died
		 * holding it (pin.c, "Lock-free pins").  The slot is whatever its
		 * state says (the old residency, EMPTY mid-re-key, or LOADING
		 * under its new key), which a pin rechecks: open it again.
		 * relaxed load: the bit is ours to clear; release: as
		 * kvs_core_readers_open */
		if (atomic_load_explicit(&s->readers, memory_order_relaxed) & KVS_READERS_EV)
			kvs_core_readers_open(c, i);
	}
	atomic_store_explicit(&bk->head, head, memory_order_relaxed);
	/* Refs: the locked pin entries naming this bucket's slots, over every
	 * rank entry (dead ones too).  Pins of our slots change only under our
	 * lock; a lock-free pin (KVS_PIN_READER) is no ref. */
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
			/* relaxed: written under the bucket lock we hold (or by a
			 * dead process, whose writes the kernel made visible) */
			uint32_t pv = atomic_load_explicit(&c->ranks[r].pins[p], memory_order_relaxed);
			uint32_t v = pv & KVS_PIN_SLOT_MASK;

			if (v == 0 || v > c->slot_count || (pv & KVS_PIN_READER))
				continue;
			if (atomic_load_explicit(&c->slots[v - 1].bucket_idx, memory_order_relaxed) == b)
				atomic_fetch_add_explicit(&c->slots[v - 1].ref, 1, memory_order_relaxed);
		}
	}
}

/*
 * A bucket lock not had in time: name the holder (rank entry and pid) so that
 * the operator can look at that process (stopped: SIGSTOP, a debugger, a
 * frozen cgroup; or stuck in the kernel).  holder is a diagnostic hint written
 * by the holder after it locked; it is bounded before use, and the pid is the
 * entry's (informational: the entry may have been reused since).
 */
static void log_lock_timeout(struct kvs_cache *c, uint32_t b)
{
	/* relaxed: diagnostics only */
	uint32_t h = atomic_load_explicit(&c->buckets[b].holder, memory_order_relaxed);

	if (h == 0 || h > KVS_MAX_RANKS) {
		kvs_log_warn(&c->log, "bucket %u: lock not had within %llu ns (holder unknown: "
				      "it locked before naming itself; stopped?)",
			     b, (unsigned long long)c->cfg.lock_timeout_ns);
		return;
	}
	kvs_log_warn(&c->log, "bucket %u: lock not had within %llu ns: held by rank entry %u "
			      "(pid %d; stopped?)",
		     b, (unsigned long long)c->cfg.lock_timeout_ns, h - 1,
		     __atomic_load_n(&c->ranks[h - 1].pid, __ATOMIC_RELAXED));
}

/*
 * ThreadSanitizer sees this process only, and the shared locks order its
 * threads through other processes too: thread T1 edits slot v under bucket a's
 * lock, a peer process moves v to bucket b (holding both), thread T2 reads v
 * under b's lock -- ordered in truth, unordered to TSan, which reports it (seen
 * in chaos_mixed).  So in a TSan build every shared lock taken acquires, and
 * every one given back releases, one token per cache: each critical section of
 * the process is ordered after all its earlier ones, as a peer may have ordered
 * them.  Accesses outside any lock are still reported; a race between sections
 * of two different locks within one process is hidden.
 */
static void xproc_acquire(struct kvs_cache *c)
{
#if defined(__SANITIZE_THREAD__)
	__tsan_acquire(c);
#else
	(void)c;
#endif
}

void kvs_core_mutex_unlock(struct kvs_cache *c, pthread_mutex_t *m)
{
#if defined(__SANITIZE_THREAD__)
	__tsan_release(c);
#else
	(void)c;
#endif
	pthread_mutex_unlock(m);
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
			kvs_core_mutex_unlock(c, &c->buckets[b].lock);
			return -rc;
		}
	} else if (rc == ENOTRECOVERABLE) {
		/* Only if a repairer died between EOWNERDEAD and consistent and glibc
		 * gave up on the mutex: the segment needs a clean. */
		kvs_log_error(&c->log, "bucket %u: lock not recoverable", b);
		return -KVS_ECORRUPT;
	} else if (rc) {
		if (rc == ETIMEDOUT && !kvs_core_lock_wait_short(c))
			log_lock_timeout(c, b); /* a short wait's caller retries, and says so */
		return -rc;
	}
	/* relaxed: diagnostics only */
	atomic_store_explicit(&c->buckets[b].holder, (uint32_t)(c->rank_idx + 1), memory_order_relaxed);
	return 0;
}

/*
 * One timed attempt on a contended mutex, until `until` (CLOCK_MONOTONIC).
 *
 * pthread_mutex_clocklock keeps the slice on the monotonic clock; under TSan it
 * is pthread_mutex_timedlock (CLOCK_REALTIME) instead, the only one its runtime
 * intercepts (an unintercepted lock makes every access it guards a reported
 * race); there a realtime clock step can stretch one slice, never the deadline.
 */
static int lock_slice(pthread_mutex_t *m, uint64_t until)
{
	struct timespec ts;
	int rc;

#if defined(__SANITIZE_THREAD__)
	uint64_t left = until - kvs_now_ns();

	clock_gettime(CLOCK_REALTIME, &ts);
	ts = kvs_ns_to_timespec((uint64_t)ts.tv_sec * KVS_NSEC_PER_SEC + (uint64_t)ts.tv_nsec + left);
	rc = pthread_mutex_timedlock(m, &ts);
	/* TSan's timedlock interceptor records the lock only for rc 0 (its
	 * trylock one handles EOWNERDEAD): tell it we hold the mutex. */
	if (rc == EOWNERDEAD) {
		__tsan_mutex_pre_lock(m, __tsan_mutex_try_lock);
		__tsan_mutex_post_lock(m, __tsan_mutex_try_lock, 0);
	}
#else
	ts = kvs_ns_to_timespec(until);
	rc = pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
#endif
	return rc;
}

/*
 * Why slices.  glibc's robust mutexes can lose a wake when a waiter is killed:
 * waiters V and W sleep; V is SIGKILLed while still queued; the holder's unlock
 * wakes V (one wake); the holder re-takes the lock with the uncontended CAS,
 * which clears FUTEX_WAITERS; V's exit path re-wakes only if the word is 0, so
 * nobody wakes W, and the holder's next unlock sees no waiters.  W would sleep
 * its whole deadline on a free mutex and glibc returns ETIMEDOUT without looking
 * at the word again.  A fresh attempt every KVS_LOCK_SLICE_NS re-reads the word
 * and re-arms FUTEX_WAITERS, so such a wake costs one slice, not the deadline.
 */
/*
 * How long this thread waits for one shared lock: the cache's lock_timeout_ns,
 * or less for a thread that must not wait on a peer that long (the store's
 * copier: a stopped holder costs it one short wait per attempt, then the
 * operation is retried later while other work goes on).  Thread-local: every
 * lock the thread takes, through whatever call, has the same bound.
 */
static __thread uint64_t lock_wait_ns; /* 0: lock_timeout_ns */

void kvs_core_lock_wait_set(uint64_t ns)
{
	lock_wait_ns = ns;
}

bool kvs_core_lock_wait_short(const struct kvs_cache *c)
{
	return lock_wait_ns && lock_wait_ns < c->cfg.lock_timeout_ns;
}

int kvs_core_mutex_lock(struct kvs_cache *c, pthread_mutex_t *m, const char *what, uint32_t id)
{
	int rc;

	if (!mutex_sane(c, m, what, id))
		return -KVS_ECORRUPT;
	rc = pthread_mutex_trylock(m);
	if (rc == EBUSY) {
		uint64_t deadline = kvs_deadline_after(kvs_core_lock_wait_short(c) ? lock_wait_ns
										   : c->cfg.lock_timeout_ns);

		for (;;) {
			uint64_t now = kvs_now_ns();

			if (now >= deadline) {
				rc = ETIMEDOUT;
				break;
			}
			rc = lock_slice(m, deadline - now > KVS_LOCK_SLICE_NS ? now + KVS_LOCK_SLICE_NS
									 : deadline);
			if (rc != ETIMEDOUT)
				break;
		}
	}
	if (rc == 0 || rc == EOWNERDEAD)
		xproc_acquire(c);
	return rc;
}

int kvs_core_bucket_lock(struct kvs_cache *c, uint32_t b)
{
	int rc = kvs_core_mutex_lock(c, &c->buckets[b].lock, "bucket", b);

	return rc < 0 ? rc : bucket_acquired(c, b, rc);
}

int kvs_core_bucket_trylock(struct kvs_cache *c, uint32_t b)
{
	int rc;

	if (!mutex_sane(c, &c->buckets[b].lock, "bucket", b))
		return -KVS_ECORRUPT;
	rc = pthread_mutex_trylock(&c->buckets[b].lock);
	if (rc == 0 || rc == EOWNERDEAD)
		xproc_acquire(c);
	return rc == EBUSY ? -EBUSY : bucket_acquired(c, b, rc);
}

void kvs_core_bucket_unlock(struct kvs_cache *c, uint32_t b)
{
	atomic_store_explicit(&c->buckets[b].holder, 0, memory_order_relaxed); /* diagnostics */
	kvs_core_mutex_unlock(c, &c->buckets[b].lock);
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

/* Chain links: relaxed, ordered by the bucket lock for its holders; read
 * unlocked only by kvs_core_find_unlocked, whose result is a candidate. */
static inline uint32_t link_get(_Atomic uint32_t *link)
{
	return atomic_load_explicit(link, memory_order_relaxed);
}

static inline void link_set(_Atomic uint32_t *link, uint32_t v)
{
	atomic_store_explicit(link, v, memory_order_relaxed);
}

uint32_t kvs_core_find(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		       uint32_t shard)
{
	uint32_t n = 0;

	for (uint32_t i = link_get(&c->buckets[b].head); i != KVS_IDX_NONE;
	     i = link_get(&c->slots[i].next)) {
		if (i >= c->slot_count || ++n > c->slot_count)
			return KVS_IDX_NONE; /* a corrupt chain: kvs_cache_check reports it */
		if (state_of(c, i) != KVS_SHM_SLOT_EMPTY && kvs_core_key_eq(&c->slots[i], block, shard))
			return i;
	}
	return KVS_IDX_NONE;
}

/* Slots an unlocked lookup visits at most: chains hold about one slot (there
 * are at least as many buckets as slots); a longer walk, or one that a peer's
 * re-link sends round, ends at the locked path. */
#define FIND_UNLOCKED_MAX 16u

uint32_t kvs_core_find_unlocked(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
				uint32_t shard)
{
	uint32_t i = link_get(&c->buckets[b].head);

	for (uint32_t n = 0; i != KVS_IDX_NONE && n < FIND_UNLOCKED_MAX; n++) {
		if (i >= c->slot_count)
			return KVS_IDX_NONE;
		if (kvs_core_key_eq(&c->slots[i], block, shard))
			return i;
		i = link_get(&c->slots[i].next);
	}
	return KVS_IDX_NONE;
}

void kvs_core_prefetch(struct kvs_cache *c, uint64_t hash, bool slot)
{
	uint32_t b = kvs_core_bucket_of(c, hash), i;

	if (!slot) {
		__builtin_prefetch(&c->buckets[b].head);
		return;
	}
	i = link_get(&c->buckets[b].head);
	if (i >= c->slot_count)
		return; /* an empty chain (or a bad link: the get finds out) */
	__builtin_prefetch(&c->slots[i]);
	__builtin_prefetch(&c->states[i]);
	__builtin_prefetch(&c->refbits[i]);
}

/* Unlink v from bucket a's chain (bounded walk: a corrupt chain just ends it). */
static void chain_unlink(struct kvs_cache *c, uint32_t a, uint32_t v)
{
	_Atomic uint32_t *link = &c->buckets[a].head;

	for (uint32_t n = 0, i; (i = link_get(link)) != KVS_IDX_NONE && i < c->slot_count &&
				n <= c->slot_count; n++) {
		if (i == v) {
			link_set(link, link_get(&c->slots[v].next));
			return;
		}
		link = &c->slots[i].next;
	}
}

void kvs_core_chain_move(struct kvs_cache *c, uint32_t v, uint32_t a, uint32_t b)
{
	struct kvs_shm_slot *s = &c->slots[v];

	/* bucket_idx first (the truth), then the chains: a death in between is
	 * repaired from bucket_idx by both buckets' next holders. */
	atomic_store_explicit(&s->bucket_idx, b, memory_order_relaxed);
	chain_unlink(c, a, v);
	link_set(&s->next, link_get(&c->buckets[b].head));
	link_set(&c->buckets[b].head, v);
}

int kvs_core_test_hold_bucket(struct kvs_cache *c, const struct kvs_block_id *block,
			      uint32_t shard)
{
	return kvs_core_bucket_lock(c, kvs_core_bucket_of(c, kvs_core_hash(block, shard)));
}
