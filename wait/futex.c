/*
 * wait/futex.c — the futex sleeper (kernel build only).
 *
 * A sleeper first announces itself: for every word of the set it sets WAITERS
 * with a CAS (unless already set), so the publisher's exchange, which returns the
 * old word, knows a FUTEX_WAKE is needed (wait/publish.c explains why this pair
 * of RMWs cannot lose a wakeup).  Then it sleeps with the announced value as the
 * expected one, so a publish between the CAS and the sleep makes the kernel
 * refuse the sleep (EAGAIN) instead of missing it.
 *
 *  - one word: FUTEX_WAIT_BITSET with an absolute CLOCK_MONOTONIC timeout (the
 *    bitset form is the one that takes an absolute time), shared (never
 *    FUTEX_PRIVATE_FLAG: the word is in a segment mapped by many processes);
 *  - many words: futex_waitv(2) (Linux 5.16), also absolute CLOCK_MONOTONIC and
 *    shared (no FUTEX2_PRIVATE).  Where it is missing (ENOSYS: an older kernel, or
 *    a seccomp filter that does not know it) the set is slept on one word at a
 *    time, KVS_WAIT_ANY_POLL_NS each, rotating: a bounded poll.  The ENOSYS is
 *    remembered process-wide.
 *
 * Every sleep ends at the next check-hook slot or the deadline, whichever is
 * first (absolute times: EINTR and spurious wakes re-enter with the same end, so
 * neither shortens nor stretches the wait).  After any return the words are
 * looked at again; a word that went back to its busy value with WAITERS cleared
 * (a publish of the same value) is simply announced again.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "wait/wait_impl.h"

/* Process-wide "futex_waitv is missing" (ENOSYS seen).  relaxed: a hint; either
 * value gives a correct wait, the stale one just retries the syscall once. */
static _Atomic bool kvs_wait_no_waitv;

/* 0 when woken (or spuriously), else -errno: -EAGAIN (the word was not expected),
 * -EINTR, -ETIMEDOUT (at until_ns, absolute CLOCK_MONOTONIC). */
static int kvs_futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t until_ns)
{
	struct timespec ts = kvs_ns_to_timespec(until_ns);

	if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, expected, &ts, NULL,
		    FUTEX_BITSET_MATCH_ANY) < 0)
		return -errno;
	return 0;
}

static int kvs_futex_waitv(struct futex_waitv *v, unsigned n, uint64_t until_ns)
{
#ifdef SYS_futex_waitv
	struct timespec ts = kvs_ns_to_timespec(until_ns);

	if (syscall(SYS_futex_waitv, v, n, 0, &ts, CLOCK_MONOTONIC) < 0)
		return -errno;
	return 0;
#else
	(void)v, (void)n, (void)until_ns;
	return -ENOSYS; /* built against headers without futex_waitv */
#endif
}

/*
 * Set WAITERS on word i (if not yet) while it still holds busy[i].  Returns the
 * announced word (value | WAITERS), or -1 when the word has left busy (its value
 * in s->seen).
 */
static int64_t kvs_wait_announce(struct kvs_wait_set *s, unsigned i)
{
	/* acquire: the value may be returned to the caller; pairs with the release
	 * exchange of kvs_wait_publish. */
	uint32_t v = atomic_load_explicit(s->words[i], memory_order_acquire);

	for (;;) {
		if ((v & KVS_WAIT_VALUE_MASK) != s->busy[i]) {
			s->seen = v & KVS_WAIT_VALUE_MASK;
			return -1;
		}
		if (v & KVS_WAIT_WAITERS)
			return v;
		/* acquire on failure: v is looked at again and may be returned, as for
		 * the load above.  (Success needs no ordering — the word still holds
		 * busy and nothing is read on its account; what matters is the RMW
		 * order against the publisher's exchange, publish.c — but C11 forbids
		 * a failure order stronger than the success one.) */
		if (atomic_compare_exchange_weak_explicit(s->words[i], &v, v | KVS_WAIT_WAITERS,
							  memory_order_acquire,
							  memory_order_acquire))
			return v | KVS_WAIT_WAITERS;
	}
}

/* Announce on every word: -1 when all are announced (expected words in ev), else
 * the lowest index seen changed (its value in s->seen). */
static int kvs_wait_announce_all(struct kvs_wait_set *s, struct futex_waitv *ev)
{
	for (unsigned i = 0; i < s->n; i++) {
		int64_t w = kvs_wait_announce(s, i);

		if (w < 0) {
			/* A lower word may have changed since it was announced. */
			int lower = kvs_wait_scan(s);

			return lower >= 0 ? lower : (int)i;
		}
		ev[i] = (struct futex_waitv){
			.val = (uint64_t)w,
			.uaddr = (uintptr_t)s->words[i],
			.flags = FUTEX_32, /* 32-bit word, shared: no FUTEX2_PRIVATE */
		};
	}
	return -1;
}

int kvs_wait_futex_run(struct kvs_wait_set *s, struct kvs_wait_ctx *c)
{
	struct futex_waitv ev[KVS_WAIT_ANY_MAX];
	unsigned turn = 0; /* the fallback's next word */

	for (;;) {
		/* The clock is read before the look, so -ETIMEDOUT means "still busy
		 * after the deadline". */
		uint64_t now = kvs_now_ns();
		int rc = kvs_wait_announce_all(s, ev);

		if (rc >= 0)
			return rc;
		rc = kvs_wait_ctx_tick(c, now);
		if (rc)
			return rc;

		uint64_t until = kvs_wait_ctx_until(c);

		if (s->n == 1) {
			rc = kvs_futex_wait(s->words[0], (uint32_t)ev[0].val, until);
		} else if (!atomic_load_explicit(&kvs_wait_no_waitv, memory_order_relaxed)) {
			rc = kvs_futex_waitv(ev, s->n, until);
			if (rc == -ENOSYS) {
				atomic_store_explicit(&kvs_wait_no_waitv, true, memory_order_relaxed);
				continue;
			}
		} else {
			/* Fallback: one word at a time, a bounded poll. */
			unsigned k = turn++ % s->n;
			uint64_t poll_end = now + KVS_WAIT_ANY_POLL_NS;

			rc = kvs_futex_wait(s->words[k], (uint32_t)ev[k].val,
					    poll_end < until ? poll_end : until);
		}
		/* Woken, refused (the word changed), interrupted or timed out: look
		 * again.  Anything else (EFAULT, EINVAL for a misaligned word) is the
		 * caller's error. */
		if (rc && rc != -EAGAIN && rc != -EINTR && rc != -ETIMEDOUT)
			return rc;
	}
}
