/*
 * wait/spin.c — spinning: the adaptive spin policy, the spin loop, and the
 * spin-until-deadline waiter (both builds).
 *
 * The spin loop looks at the words, then pauses (the CPU's spin-wait hint) for
 * its first KVS_WAIT_PAUSE_LOOKS looks and calls sched_yield between looks after
 * that, so that on an oversubscribed machine the publisher it is waiting for gets
 * the core.  It reads the clock every few pauses and at every yield.
 *
 * Used three ways: the whole wait of KVS_WAIT_SPIN (and of KVS_WAIT_AUTO in the
 * plain build), with the check hook run between slices; and the bounded spin phase
 * of KVS_WAIT_AUTO in the kernel build before it sleeps on a futex, whose length
 * is the caller's budget and whose use is decided by the adaptive policy below
 * (documented on struct kvs_wait_spin in wait.h).
 *
 * Why adaptive (DESIGN.md §4): measured on a 16-core host, a fixed 20 us spin
 * costs 20% of a core per waiter at 100 us waits and buys nothing, while a futex
 * wake takes 5-13 us at short waits.  So spin only while spins succeed.
 */
#include <sched.h>

#include "wait/wait_impl.h"

/* Looks with a pause in between before the loop starts yielding (~ a microsecond
 * or two: long enough to catch a publish already under way without a syscall). */
#define KVS_WAIT_PAUSE_LOOKS 64u
/* Pauses between clock reads in the pause phase (a clock read costs ~20 ns). */
#define KVS_WAIT_PAUSE_CLOCK_EVERY 8u

/* The CPU's spin-wait hint (x86 PAUSE, Arm YIELD); a compiler barrier elsewhere. */
static inline void kvs_wait_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

void kvs_wait_spin_init(struct kvs_wait_spin *spin, uint32_t budget_ns)
{
	spin->budget_ns = budget_ns;
	/* relaxed: initialisation of a caller-private heuristic, before any wait. */
	atomic_store_explicit(&spin->recent_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&spin->skipped, 0, memory_order_relaxed);
}

int kvs_wait_spin_for(struct kvs_wait_set *s, uint64_t end_ns)
{
	bool ended = false;

	for (unsigned look = 0;; look++) {
		int i = kvs_wait_scan(s);

		if (i >= 0)
			return i;
		if (ended)
			return -ETIMEDOUT;
		if (look < KVS_WAIT_PAUSE_LOOKS) {
			kvs_wait_cpu_relax();
			if (look % KVS_WAIT_PAUSE_CLOCK_EVERY != KVS_WAIT_PAUSE_CLOCK_EVERY - 1)
				continue;
		} else {
			sched_yield();
		}
		ended = kvs_now_ns() >= end_ns;
	}
}

int kvs_wait_spin_run(struct kvs_wait_set *s, struct kvs_wait_ctx *c)
{
	for (;;) {
		int rc = kvs_wait_spin_for(s, kvs_wait_ctx_until(c));

		if (rc != -ETIMEDOUT)
			return rc;
		rc = kvs_wait_ctx_tick(c, kvs_now_ns());
		if (rc)
			return rc;
	}
}

/* All history updates are relaxed: the state is a private heuristic with no
 * data depending on it; threads sharing one may lose an update, which only
 * shifts the estimate. */

bool kvs_wait_spin_should(struct kvs_wait_spin *spin)
{
	uint64_t budget = spin->budget_ns;

	if (budget == 0)
		return false;
	if (atomic_load_explicit(&spin->recent_ns, memory_order_relaxed) < budget * 3 / 2)
		return true;
	if (atomic_fetch_add_explicit(&spin->skipped, 1, memory_order_relaxed) + 1 <
	    KVS_WAIT_SPIN_PROBE)
		return false;
	atomic_store_explicit(&spin->skipped, 0, memory_order_relaxed);
	return true; /* a probe */
}

void kvs_wait_spin_learn(struct kvs_wait_spin *spin, uint64_t wait_ns, bool spun_ok)
{
	uint64_t cap = 2 * (uint64_t)spin->budget_ns;
	int64_t recent = atomic_load_explicit(&spin->recent_ns, memory_order_relaxed);
	int64_t sample = (int64_t)(wait_ns < cap ? wait_ns : cap);

	if (spin->budget_ns == 0)
		return;
	if (spun_ok)
		recent = sample;
	else
		recent += (sample - recent) / 4;
	atomic_store_explicit(&spin->recent_ns, (uint32_t)(recent > UINT32_MAX ? UINT32_MAX : recent),
			      memory_order_relaxed);
}
