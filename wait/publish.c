/*
 * wait/publish.c — the one publisher of a state word, in both builds.
 *
 * A publish is one atomic exchange: it writes the new value with WAITERS clear and
 * returns the old word in the same RMW, so "did anyone announce a sleep?" is
 * answered by the very operation that made the value visible.  A waiter announces
 * itself by setting WAITERS with a CAS on the same word before it sleeps; the two
 * RMWs are totally ordered on the word, so either the waiter's CAS came first (the
 * exchange sees WAITERS and wakes it) or the exchange came first (the CAS fails on
 * the new value and the waiter never sleeps).  A store followed by a separate load
 * of the word would allow both to miss each other: a lost wakeup.
 *
 * The plain build has no futex sleeper of its own, but it publishes through this
 * same code, so a kernel-build process sleeping on a word a plain-build process
 * publishes is woken too (a mixed node is safe).  The wake is shared
 * (no FUTEX_PRIVATE_FLAG): the word lives in a segment mapped by many processes,
 * at different addresses; the kernel keys the futex on the backing page.
 *
 * kvs_wait_bump is the same publisher for counter words (bells): the new value is
 * the old one plus one, clearing WAITERS in the same RMW.
 */
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "wait/wait_impl.h"

uint32_t kvs_wait_publish(_Atomic uint32_t *word, uint32_t value)
{
	/* release: pairs with the acquire loads of waiters (kvs_wait_scan), so what
	 * was written before the publish is visible to whoever sees the value.  The
	 * RMW also reads the latest WAITERS (see above); no acquire needed, the
	 * publisher reads nothing a waiter wrote. */
	uint32_t old = atomic_exchange_explicit(word, value & KVS_WAIT_VALUE_MASK,
						memory_order_release);

	/* Wake everyone: all sleepers wait for the same change.  The result is
	 * ignored on purpose: FUTEX_WAKE can only fail on a bad address, which the
	 * exchange above would already have faulted on. */
	if (old & KVS_WAIT_WAITERS)
		(void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	return old;
}

uint32_t kvs_wait_bump(_Atomic uint32_t *word)
{
	/* relaxed: only the starting guess of the CAS loop */
	uint32_t old = atomic_load_explicit(word, memory_order_relaxed);

	/* release: as kvs_wait_publish (what the bumper wrote before is visible to a
	 * waiter that sees the new count).  A CAS, not an exchange of a computed
	 * value: two bumpers must both change the word, or a waiter that read the
	 * first bump could sleep through the second. */
	while (!atomic_compare_exchange_weak_explicit(
		word, &old, (old + 1) & KVS_WAIT_VALUE_MASK, memory_order_release,
		memory_order_relaxed))
		;
	if (old & KVS_WAIT_WAITERS)
		(void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
	return old;
}
