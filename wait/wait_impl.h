/*
 * wait/wait_impl.h — internals shared by the files of wait/ (never included from
 * outside the module).
 *
 * Every wait of the module, on one word (kvs_wait_while) or on many
 * (kvs_wait_any), is a wait on a set of words: struct kvs_wait_set.  The single
 * word case is a set of one, so the spin loop, the deadline and check-hook
 * bookkeeping (struct kvs_wait_ctx) and the sleepers exist once.  The pieces:
 *
 *   wait.c     argument checks, the fast path, dispatch on the mode, adaptive spin
 *   spin.c     adaptive spin policy, the spin loop, the spin-until-deadline waiter
 *   futex.c    the futex sleeper (kernel build only)
 *   publish.c  kvs_wait_publish (both builds: a plain publisher must wake kernel
 *              sleepers that share its words)
 */
#ifndef KVS_WAIT_WAIT_IMPL_H
#define KVS_WAIT_WAIT_IMPL_H

#include <errno.h>
#include <stdbool.h>

#include "common/clock.h"
#include "wait/wait.h"

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t),
	       "futex words are plain 32-bit words to the kernel");

struct kvs_wait_set {
	_Atomic uint32_t *const *words;
	const uint32_t *busy;
	unsigned n;
	uint32_t seen; /* value of the word kvs_wait_scan found changed (WAITERS stripped) */
};

/*
 * Lowest i whose word has left busy[i] (its value in s->seen), or -1.
 * Acquire loads: pair with the release exchange of kvs_wait_publish, so what the
 * publisher wrote before publishing is visible once the new value is seen.
 */
static inline int kvs_wait_scan(struct kvs_wait_set *s)
{
	for (unsigned i = 0; i < s->n; i++) {
		uint32_t v = atomic_load_explicit(s->words[i], memory_order_acquire) &
			     KVS_WAIT_VALUE_MASK;

		if (v != s->busy[i]) {
			s->seen = v;
			return (int)i;
		}
	}
	return -1;
}

/* Deadline and check-hook bookkeeping of one wait. */
struct kvs_wait_ctx {
	uint64_t start_ns;      /* when the wait began (after the fast path) */
	uint64_t deadline_ns;   /* absolute CLOCK_MONOTONIC */
	uint64_t slice_ns;
	uint64_t next_check_ns; /* KVS_DEADLINE_NONE without a hook */
	kvs_wait_check_fn check;
	void *check_arg;
};

/* When the current sleep or spin must stop: the next check or the deadline. */
static inline uint64_t kvs_wait_ctx_until(const struct kvs_wait_ctx *c)
{
	return c->next_check_ns < c->deadline_ns ? c->next_check_ns : c->deadline_ns;
}

/*
 * Called at the end of a sleep or spin period, with the time: -ETIMEDOUT once the
 * deadline has passed, the hook's non-zero return when it was due and objected,
 * else 0 (keep waiting).  The caller has looked at the words after now was read.
 */
static inline int kvs_wait_ctx_tick(struct kvs_wait_ctx *c, uint64_t now)
{
	if (now >= c->deadline_ns)
		return -ETIMEDOUT;
	if (c->check && now >= c->next_check_ns) {
		int rc = c->check(c->check_arg);

		if (rc)
			return rc;
		/* Keep the slice grid (no drift); skip missed slots after a long stall. */
		c->next_check_ns += c->slice_ns;
		if (c->next_check_ns <= now)
			c->next_check_ns = now + c->slice_ns;
	}
	return 0;
}

/* spin.c */

/* Spin on the set until a word leaves busy (its index), or -ETIMEDOUT (after a
 * last look) at end_ns or once budget_ns of spinning on the CPU is spent (see
 * spin.c).  Pauses first, then sched_yield between looks.  *spent_ns (if not
 * NULL): the CPU time spun. */
int kvs_wait_spin_for(struct kvs_wait_set *s, uint64_t end_ns, uint64_t budget_ns,
		      uint64_t *spent_ns);

/* The spin phase of KVS_WAIT_AUTO: budget_ns on the CPU, a few budgets of wall
 * time at most, never past the next check or the deadline. */
int kvs_wait_spin_bounded(struct kvs_wait_set *s, const struct kvs_wait_ctx *c,
			  uint32_t budget_ns, uint64_t *spent_ns);

/* KVS_WAIT_SPIN: spin until a word changes, the deadline or the hook objects. */
int kvs_wait_spin_run(struct kvs_wait_set *s, struct kvs_wait_ctx *c);

/* Whether the wait that started at start_ns should spin first (or probe). */
bool kvs_wait_spin_should(const struct kvs_wait_spin *spin, uint64_t start_ns);

/* Feed a finished wait (that got past the fast path) to the estimate: spun_ok
 * when it ended during the spin phase, wait_ns then the CPU time spun, else the
 * wait's wall-clock length. */
void kvs_wait_spin_learn(struct kvs_wait_spin *spin, uint64_t wait_ns, bool spun_ok);

/* futex.c (kernel build) */

/* Futex sleeper: set WAITERS on every word, sleep until one changes, the deadline
 * or the hook objects.  Returns the index or an error. */
int kvs_wait_futex_run(struct kvs_wait_set *s, struct kvs_wait_ctx *c);

#endif
