/*
 * wait/spin.c — spinning: the spin loop and the spin-until-deadline waiter (both
 * builds); the bounded spin and its adaptive policy (kernel build).
 *
 * The spin loop looks at the words, then pauses (the CPU's spin-wait hint) for
 * its first KVS_WAIT_PAUSE_LOOKS looks and calls sched_yield between looks after
 * that, so that on an oversubscribed machine the publisher it is waiting for gets
 * the core.  It reads the clock every few pauses and at every yield.
 *
 * A bounded spin (the spin phase of KVS_WAIT_AUTO) counts its budget in time on
 * the CPU, not wall time: a gap between two looks longer than KVS_WAIT_RUN_GAP_NS
 * means the yield gave the CPU away (or the thread was preempted), and counts as
 * that much only.  On an oversubscribed machine a spinner runs a fraction of the
 * wall time, so a wall-clock budget would end its spin before a short wait is
 * over, and every such wait would pay a futex wake; counted on the CPU, the spin
 * costs at most the budget of CPU per wait whatever the load.  Its wall-clock
 * length is capped at KVS_WAIT_SPIN_WALL_BUDGETS budgets: a spinner that cannot
 * get the CPU is better off asleep, woken by the kernel.
 *
 * Used two ways: the whole wait of KVS_WAIT_SPIN (and of KVS_WAIT_AUTO in the
 * plain build), with the check hook run between slices; and the bounded spin phase
 * of KVS_WAIT_AUTO in the kernel build before it sleeps on a futex, whose length
 * is the caller's budget and whose use is decided by the adaptive policy below
 * (documented on struct kvs_wait_spin in wait.h).
 *
 * Why adaptive (docs/wait.md, "Adaptive spin"): measured on a 16-core host, a
 * fixed 20 us spin costs 20% of a core per waiter at 100 us waits and buys
 * nothing, while a futex wake takes 5-13 us at short waits.  So spin only while
 * spins succeed.
 */
#include <sched.h>

#include "wait/wait_impl.h"

/* Looks with a pause in between before the loop starts yielding (~ a microsecond
 * or two: long enough to catch a publish already under way without a syscall). */
#define KVS_WAIT_PAUSE_LOOKS 64u
/* Pauses between clock reads in the pause phase (a clock read costs ~20 ns). */
#define KVS_WAIT_PAUSE_CLOCK_EVERY 8u
/* The longest gap between two looks that counts as spinning (8 pauses or one
 * sched_yield that kept the CPU take well under this). */
#define KVS_WAIT_RUN_GAP_NS 2000u
/* Wall-clock cap of a bounded spin, in budgets. */
#define KVS_WAIT_SPIN_WALL_BUDGETS 4u

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
}

int kvs_wait_spin_for(struct kvs_wait_set *s, uint64_t end_ns, uint64_t budget_ns,
		      uint64_t *spent_ns)
{
	uint64_t prev = kvs_now_ns(), spent = 0;
	bool ended = false;

	for (unsigned look = 0;; look++) {
		int i = kvs_wait_scan(s);

		if (i >= 0 || ended) {
			if (spent_ns)
				*spent_ns = spent;
			return i >= 0 ? i : -ETIMEDOUT;
		}
		if (look < KVS_WAIT_PAUSE_LOOKS) {
			kvs_wait_cpu_relax();
			if (look % KVS_WAIT_PAUSE_CLOCK_EVERY != KVS_WAIT_PAUSE_CLOCK_EVERY - 1)
				continue;
		} else {
			sched_yield();
		}

		uint64_t now = kvs_now_ns();

		spent += now - prev < KVS_WAIT_RUN_GAP_NS ? now - prev : KVS_WAIT_RUN_GAP_NS;
		prev = now;
		ended = now >= end_ns || spent >= budget_ns;
	}
}

int kvs_wait_spin_run(struct kvs_wait_set *s, struct kvs_wait_ctx *c)
{
	for (;;) {
		int rc = kvs_wait_spin_for(s, kvs_wait_ctx_until(c), UINT64_MAX, NULL);

		if (rc != -ETIMEDOUT)
			return rc;
		rc = kvs_wait_ctx_tick(c, kvs_now_ns());
		if (rc)
			return rc;
	}
}

#if KVS_KERNEL
/* The bounded spin and its policy serve KVS_WAIT_AUTO of the kernel build only
 * (the plain build's AUTO is a spin until the deadline). */

int kvs_wait_spin_bounded(struct kvs_wait_set *s, const struct kvs_wait_ctx *c,
			  uint32_t budget_ns, uint64_t *spent_ns)
{
	uint64_t cap = (uint64_t)budget_ns * KVS_WAIT_SPIN_WALL_BUDGETS;
	uint64_t end = c->start_ns + cap;

	return kvs_wait_spin_for(s, end < kvs_wait_ctx_until(c) ? end : kvs_wait_ctx_until(c),
				 budget_ns, spent_ns);
}

/* All history updates are relaxed: the state is a private heuristic with no
 * data depending on it; threads sharing one may lose an update, which only
 * shifts the estimate. */

bool kvs_wait_spin_should(const struct kvs_wait_spin *spin, uint64_t start_ns)
{
	uint64_t budget = spin->budget_ns;

	if (budget == 0)
		return false;
	if (atomic_load_explicit(&spin->recent_ns, memory_order_relaxed) < budget * 3 / 2)
		return true;
	/* A probe for about one wait in KVS_WAIT_SPIN_PROBE: the top half of a
	 * Fibonacci hash of the start time (well spread even for waits that start
	 * at exactly periodic times). */
	return (uint32_t)((start_ns * UINT64_C(0x9E3779B97F4A7C15)) >> 32) % KVS_WAIT_SPIN_PROBE == 0;
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
#endif
