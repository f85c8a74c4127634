/*
 * wait/wait.h — waiting for a 32-bit state word in shared memory to change.
 *
 * The interface other modules use (core/ for slots and task completion).  A state
 * word holds a value in its low 31 bits and KVS_WAIT_WAITERS in bit 31, set by a
 * sleeping waiter so that a publisher knows whether a wake is needed.
 *
 * Protocol (DESIGN.md §4):
 *  - publisher: one atomic exchange writes the new value (WAITERS cleared); if the
 *    old word had WAITERS, FUTEX_WAKE all.  One RMW, never a store then a load.
 *  - waiter: bounded (adaptive) spin on the word; then set WAITERS by CAS and
 *    FUTEX_WAIT (process-shared, never FUTEX_PRIVATE_FLAG) on the word with
 *    WAITERS set, in slices up to an absolute deadline; the caller's check hook
 *    runs once per slice (peer liveness).
 *  - plain build: the waiter spins with sched_yield and never sets WAITERS; its
 *    publisher is the same code, so plain and kernel processes can share words.
 *
 * Words may be mapped at different addresses in different processes (futexes
 * key on the backing page, not the address).
 */
#ifndef KVS_WAIT_WAIT_H
#define KVS_WAIT_WAIT_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvshare.h"

#define KVS_WAIT_WAITERS (UINT32_C(1) << 31)
#define KVS_WAIT_VALUE_MASK (~KVS_WAIT_WAITERS)

/*
 * Adaptive spin state, owned by the caller (one per waiting thread, or per rank);
 * private memory, never shared.  kvs_wait_spin_init() sets the budget; the wait
 * calls update the history and spin only while recent waits were shorter than the
 * budget (a spin that never succeeds only burns CPU).
 */
struct kvs_wait_spin {
	uint32_t budget_ns;  /* longest spin before sleeping; 0 = never spin */
	uint32_t recent_ns;  /* running estimate of recent wait lengths */
};

/* Called once per slice while sleeping: 0 = keep waiting; any other value stops
 * the wait, which returns it (e.g. -KVS_EOWNERDEAD after a liveness check). */
typedef int (*kvs_wait_check_fn)(void *arg);

struct kvs_wait_opts {
	uint64_t deadline_ns;      /* absolute CLOCK_MONOTONIC (common/clock.h) */
	uint64_t slice_ns;         /* check period; 0 = default (10 ms) */
	kvs_wait_check_fn check;   /* optional */
	void *check_arg;
	struct kvs_wait_spin *spin; /* optional adaptive spin state; NULL = default budget */
	uint32_t mode;             /* enum kvs_wait_mode */
};

#define KVS_WAIT_SPIN_DEFAULT_NS 10000u

void kvs_wait_spin_init(struct kvs_wait_spin *spin, uint32_t budget_ns);

/* Publish value (< 2^31) into word; wakes all sleepers if any had set WAITERS.
 * Returns the previous word (WAITERS bit included). Release semantics: everything
 * written before is visible to a waiter that sees value. */
uint32_t kvs_wait_publish(_Atomic uint32_t *word, uint32_t value);

/* Wait while (*word & KVS_WAIT_VALUE_MASK) == busy.  Returns the new value (>= 0,
 * WAITERS stripped; acquire: pairs with kvs_wait_publish), -ETIMEDOUT at the
 * deadline, -EOPNOTSUPP for KVS_WAIT_FUTEX in the plain build, or the check
 * hook's non-zero return. Signals never shorten or break the wait. */
int kvs_wait_while(_Atomic uint32_t *word, uint32_t busy, const struct kvs_wait_opts *opts);

/* Maximum words for kvs_wait_any (the futex_waitv limit). */
#define KVS_WAIT_ANY_MAX 128

/* Wait until any words[i] leaves busy[i]; returns the lowest such i, or as
 * kvs_wait_while for errors.  -EINVAL if n is 0 or > KVS_WAIT_ANY_MAX. */
int kvs_wait_any(_Atomic uint32_t *const words[], const uint32_t busy[], unsigned n,
		 const struct kvs_wait_opts *opts);

#endif
