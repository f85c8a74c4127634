/*
 * wait/wait.c — kvs_wait_while and kvs_wait_any: argument checks, the fast path,
 * and the choice of waiter by mode and build.
 *
 * Both calls are waits on a set of words (the single word is a set of one, see
 * wait_impl.h).  A set in which a word has already left its busy value returns at
 * once without reading the clock (the common case for a slot that is READY).
 * Otherwise, by opts->mode:
 *
 *   mode        kernel build                         plain build
 *   AUTO        adaptive spin, then futex sleep      spin until the deadline
 *   FUTEX       futex sleep                          -EOPNOTSUPP
 *   SPIN        spin until the deadline              spin until the deadline
 *
 * The adaptive spin of AUTO uses the caller's struct kvs_wait_spin, or without
 * one a per-thread state with the default budget, and is fed every wait when it
 * ends: a spin that succeeded with the CPU time it took, a wait that slept with
 * its length (from here to its end, so including the sleep).
 */
#include <stddef.h>

#include "wait/wait_impl.h"

#if KVS_KERNEL
/* The state of callers that pass no spin state: one per thread, so that each
 * thread's history is its own; initialised on first use. */
static _Thread_local struct kvs_wait_spin kvs_wait_tls_spin;
static _Thread_local bool kvs_wait_tls_spin_ready;

static struct kvs_wait_spin *kvs_wait_default_spin(void)
{
	if (!kvs_wait_tls_spin_ready) {
		kvs_wait_spin_init(&kvs_wait_tls_spin, KVS_WAIT_SPIN_DEFAULT_NS);
		kvs_wait_tls_spin_ready = true;
	}
	return &kvs_wait_tls_spin;
}

/* KVS_WAIT_AUTO in the kernel build: spin within the budget if the policy says
 * so, then sleep; the wait's length trains the policy. */
static int kvs_wait_auto(struct kvs_wait_set *s, struct kvs_wait_ctx *c,
			 struct kvs_wait_spin *spin)
{
	int rc = -ETIMEDOUT;
	uint64_t spent_ns = 0;

	if (!spin)
		spin = kvs_wait_default_spin();
	if (kvs_wait_spin_should(spin, c->start_ns))
		rc = kvs_wait_spin_bounded(s, c, spin->budget_ns, &spent_ns);
	if (rc >= 0) {
		kvs_wait_spin_learn(spin, spent_ns, true);
		return rc;
	}
	rc = kvs_wait_futex_run(s, c);
	kvs_wait_spin_learn(spin, kvs_now_ns() - c->start_ns, false);
	return rc;
}
#endif

static int kvs_wait_set_run(struct kvs_wait_set *s, const struct kvs_wait_opts *opts)
{
	struct kvs_wait_ctx c;
	int i;

	if (!opts)
		return -EINVAL;
	for (unsigned k = 0; k < s->n; k++)
		if (!s->words[k] || s->busy[k] > KVS_WAIT_VALUE_MASK)
			return -EINVAL;
	switch (opts->mode) {
	case KVS_WAIT_AUTO:
	case KVS_WAIT_SPIN:
		break;
	case KVS_WAIT_FUTEX:
		if (!KVS_KERNEL)
			return -EOPNOTSUPP;
		break;
	default:
		return -EINVAL;
	}

	i = kvs_wait_scan(s);
	if (i >= 0)
		return i;

	c.start_ns = kvs_now_ns();
	c.deadline_ns = opts->deadline_ns;
	c.slice_ns = opts->slice_ns ? opts->slice_ns : KVS_WAIT_SLICE_DEFAULT_NS;
	c.check = opts->check;
	c.check_arg = opts->check_arg;
	c.next_check_ns = KVS_DEADLINE_NONE;
	if (c.check && c.slice_ns < KVS_DEADLINE_NONE - c.start_ns)
		c.next_check_ns = c.start_ns + c.slice_ns;

#if KVS_KERNEL
	if (opts->mode == KVS_WAIT_AUTO)
		return kvs_wait_auto(s, &c, opts->spin);
	if (opts->mode == KVS_WAIT_FUTEX)
		return kvs_wait_futex_run(s, &c);
#endif
	return kvs_wait_spin_run(s, &c);
}

int kvs_wait_while(_Atomic uint32_t *word, uint32_t busy, const struct kvs_wait_opts *opts)
{
	_Atomic uint32_t *const words[1] = { word };
	struct kvs_wait_set s = { .words = words, .busy = &busy, .n = 1 };
	int rc = kvs_wait_set_run(&s, opts);

	return rc < 0 ? rc : (int)s.seen;
}

int kvs_wait_any(_Atomic uint32_t *const words[], const uint32_t busy[], unsigned n,
		 const struct kvs_wait_opts *opts)
{
	struct kvs_wait_set s = { .words = words, .busy = busy, .n = n };

	if (!words || !busy || n == 0 || n > KVS_WAIT_ANY_MAX)
		return -EINVAL;
	return kvs_wait_set_run(&s, opts);
}
