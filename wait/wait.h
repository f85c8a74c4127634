/*
 * wait/wait.h — waiting for a 32-bit state word in shared memory to change.
 *
 * The interface other modules use (core/ for slots and task completion).  A state
 * word holds a value in its low 31 bits and KVS_WAIT_WAITERS in bit 31, set by a
 * sleeping waiter so that a publisher knows whether a wake is needed.
 *
 * Protocol (docs/wait.md, "The protocol"):
 *  - publisher: one atomic exchange writes the new value (WAITERS cleared); if the
 *    old word had WAITERS, FUTEX_WAKE all.  One RMW, never a store then a load
 *    (a store/load reorder would let a waiter set WAITERS after the publisher
 *    looked, and sleep through the publish).
 *  - waiter: bounded (adaptive) spin on the word; then set WAITERS by CAS and
 *    FUTEX_WAIT (process-shared, never FUTEX_PRIVATE_FLAG) on the word with
 *    WAITERS set, in slices up to an absolute deadline; the caller's check hook
 *    runs once per slice (peer liveness).
 *  - plain build: the waiter spins with sched_yield and never sets WAITERS; its
 *    publisher is the same code, so plain and kernel processes can share words.
 *
 * Words may be mapped at different addresses in different processes (futexes
 * key on the backing page, not the address).  Every function here is safe from
 * any thread of any process mapping the word; none allocates.
 *
 * Modes (opts->mode, enum kvs_wait_mode of kvshare.h):
 *  - KVS_WAIT_AUTO: kernel build — adaptive spin (struct kvs_wait_spin), then
 *    futex; plain build — the same as KVS_WAIT_SPIN.
 *  - KVS_WAIT_FUTEX: futex at once, no spin; -EOPNOTSUPP in the plain build.
 *  - KVS_WAIT_SPIN: pause, then sched_yield between looks, until the deadline;
 *    never sets WAITERS.  Both builds.
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
 * private memory, never shared between processes.  kvs_wait_spin_init() sets the
 * budget; the KVS_WAIT_AUTO waits of the kernel build update the history and spin
 * only while recent waits were shorter than the budget (a spin that never
 * succeeds only burns CPU):
 *
 *  - the budget is time spent spinning on the CPU (a spinner that yields its CPU
 *    on an oversubscribed machine is not charged for the time others run; the
 *    spin's wall-clock length is capped at four budgets, wait/spin.c).
 *  - recent_ns estimates recent wait lengths, every wait longer than twice the
 *    budget counting as twice the budget.  A wait that ends during the spin is
 *    direct evidence that spinning pays and resets the estimate to the CPU time
 *    its spin took; a wait that had to sleep pulls the estimate a quarter of the
 *    way towards its (capped) wall-clock length.  The waiter spins while recent_ns < 1.5 x budget_ns: most
 *    recent waits ended within the budget (about three sleeps in a row after a
 *    good spin turn spinning off).
 *  - while spinning is off, about one wait in KVS_WAIT_SPIN_PROBE spins anyway
 *    (a probe), so the estimate recovers when waits get short again; at long
 *    waits probes cost budget_ns / KVS_WAIT_SPIN_PROBE of CPU per wait.  Probes
 *    are picked by a hash of the wait's start time, not by a counter, so the
 *    policy also works for a caller that keeps only recent_ns between waits.
 *
 * The history is a relaxed atomic so that threads may share one state (e.g. per
 * rank): it is a heuristic, a lost update only shifts the estimate.
 */
struct kvs_wait_spin {
	uint32_t budget_ns;          /* most CPU time spun before sleeping; 0 = never spin */
	_Atomic uint32_t recent_ns;  /* running estimate of recent wait lengths */
};

/* Called once per slice while waiting: 0 = keep waiting; any other value stops
 * the wait, which returns it (e.g. -KVS_EOWNERDEAD after a liveness check).  It
 * runs in the waiting thread, never before the first slice has passed. */
typedef int (*kvs_wait_check_fn)(void *arg);

struct kvs_wait_opts {
	uint64_t deadline_ns;      /* absolute CLOCK_MONOTONIC (common/clock.h) */
	uint64_t slice_ns;         /* check period; 0 = default (10 ms) */
	kvs_wait_check_fn check;   /* optional */
	void *check_arg;
	struct kvs_wait_spin *spin; /* optional adaptive spin state; NULL = a per-thread
				     * state with the default budget */
	uint32_t mode;             /* enum kvs_wait_mode */
};

#define KVS_WAIT_SPIN_DEFAULT_NS 10000u
#define KVS_WAIT_SLICE_DEFAULT_NS 10000000ull
/* While the estimate says "do not spin", about one wait in this many spins anyway. */
#define KVS_WAIT_SPIN_PROBE 16u

/* Set budget_ns (0 = never spin) and clear the history (the first waits spin). */
void kvs_wait_spin_init(struct kvs_wait_spin *spin, uint32_t budget_ns);

/* Publish value (< 2^31; bit 31 is ignored) into word; wakes all sleepers if any
 * had set WAITERS.  Returns the previous word (WAITERS bit included). Release
 * semantics: everything written before is visible to a waiter that sees value.
 * Blocks: never (one FUTEX_WAKE syscall when a sleeper had announced itself). */
uint32_t kvs_wait_publish(_Atomic uint32_t *word, uint32_t value);

/* Publish (*word + 1) & KVS_WAIT_VALUE_MASK into a counter word (a bell: a
 * waiter sleeps while it holds the count it last saw): every bump changes the
 * word, whoever bumps at the same time, and wakes the sleepers.  Returns the
 * previous word.  Release semantics as kvs_wait_publish.  Blocks: never. */
uint32_t kvs_wait_bump(_Atomic uint32_t *word);

/* Wait while (*word & KVS_WAIT_VALUE_MASK) == busy.  Returns the new value (>= 0,
 * WAITERS stripped; acquire: pairs with kvs_wait_publish), -ETIMEDOUT at the
 * deadline, -EOPNOTSUPP for KVS_WAIT_FUTEX in the plain build, or the check
 * hook's non-zero return. Signals never shorten or break the wait.  -EINVAL for a
 * NULL word or opts, busy >= 2^31 or an unknown mode.  A word that has already
 * left busy returns at once, even past the deadline.
 * Blocks: until the word leaves busy, the deadline or a non-zero check. */
int kvs_wait_while(_Atomic uint32_t *word, uint32_t busy, const struct kvs_wait_opts *opts);

/* Maximum words for kvs_wait_any (the futex_waitv limit). */
#define KVS_WAIT_ANY_MAX 128

/* Wait until any words[i] leaves busy[i]; returns the lowest such i, or as
 * kvs_wait_while for errors.  -EINVAL if n is 0 or > KVS_WAIT_ANY_MAX (or as
 * kvs_wait_while for a word or busy value).  Kernel build: futex_waitv(2); on a
 * kernel without it (ENOSYS, Linux < 5.16 or a seccomp filter) it sleeps on the
 * words in turn, KVS_WAIT_ANY_POLL_NS at a time, so a publish on a word it is not
 * sleeping on is seen within about that long. */
int kvs_wait_any(_Atomic uint32_t *const words[], const uint32_t busy[], unsigned n,
		 const struct kvs_wait_opts *opts);

/* Sleep period per word of kvs_wait_any's fallback for kernels without futex_waitv. */
#define KVS_WAIT_ANY_POLL_NS 500000ull

#endif
