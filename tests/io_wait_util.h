/*
 * tests/io_wait_util.h — sleeping on a backend's wait descriptor as an issuer
 * would (kvs_backend_wait_fd, kvshare.h "Waiting"), for tests/io_wait.c and
 * tests/io_redis.c.
 *
 * A waiter is an epoll set holding the backend's descriptor, as the store's
 * dispatcher holds it beside its own eventfd.  wt_reap() is the issuer's loop,
 * "epoll_wait; kvs_backend_poll(.., 0)", until the completions it waits for are
 * in, counting every wake and every wake that reaped nothing: a descriptor that
 * stays readable with nothing to reap makes that loop spin, and wt_reap fails
 * on it (more than w->empty_max empty wakes) instead of burning the deadline.
 * wt_quiet() checks the other half of the contract: with nothing ready or due,
 * the descriptor is not readable (past one late signal, see there).
 */
#ifndef KVS_TESTS_IO_WAIT_UTIL_H
#define KVS_TESTS_IO_WAIT_UTIL_H

#include <sys/epoll.h>

#include "harness.h"

#define WT_MS 1000000ull
/* Wakes that reap nothing, tolerated per wt_reap by default (a reply still half
 * received, the inner completion of a fault delay); a spinning descriptor gives
 * thousands. */
#define WT_EMPTY_MAX 8

struct wt {
	struct kvs_backend *b;
	int fd;               /* the backend's wait descriptor */
	int ep;               /* ours, holding fd */
	uint32_t wakes;       /* epoll_wait returns with fd readable */
	uint32_t empty_wakes; /* ... after which poll(0) reaped nothing */
	uint32_t empty_max;   /* tolerated per wt_reap: WT_EMPTY_MAX, more where the
				 backend's own steps complete (posix dumps) */
};

/* Ask b for its descriptor (twice: the same one) and put it in a fresh epoll set. */
static inline kvs_test_rc wt_open(struct wt *w, struct kvs_backend *b)
{
	struct epoll_event ev = { .events = EPOLLIN };

	memset(w, 0, sizeof(*w));
	w->b = b;
	w->ep = -1;
	w->empty_max = WT_EMPTY_MAX;
	w->fd = kvs_backend_wait_fd(b);
	KVS_CHECK_OK(w->fd);
	KVS_CHECK_EQ(kvs_backend_wait_fd(b), w->fd);
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	KVS_CHECK(w->ep >= 0);
	ev.data.fd = w->fd;
	if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->fd, &ev) < 0)
		KVS_FAILF("epoll_ctl ADD %d: %s", w->fd, strerror(errno));
	return KVS_TEST_PASS;
}

/* Before kvs_backend_close: the descriptor is the backend's. */
static inline void wt_close(struct wt *w)
{
	if (w->ep >= 0)
		close(w->ep);
	w->ep = -1;
}

/* One epoll_wait of at most timeout_ns: 1 when the descriptor is readable, 0 when
 * the time ran out, -errno. */
static inline int wt_sleep(struct wt *w, uint64_t timeout_ns)
{
	struct epoll_event ev;
	int ms = (int)((timeout_ns + WT_MS - 1) / WT_MS);
	int n = epoll_wait(w->ep, &ev, 1, ms);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	return n;
}

/*
 * The descriptor stays unreadable for ns (nothing ready or due; when: what for
 * the message).  One late wake that reaps nothing is allowed, and said: io_uring
 * can signal its eventfd after the completion was reaped (io/uring.c, "Wait
 * descriptor").  The poll that finds nothing resets the descriptor (the
 * contract), so a second wake is a descriptor that stays readable: a fail.
 */
static inline kvs_test_rc wt_quiet(struct wt *w, uint64_t ns, const char *when)
{
	uint64_t deadline = kvs_deadline_after(ns);
	int late = 0;

	for (;;) {
		uint64_t now = kvs_now_ns();
		struct kvs_backend_completion c[4];
		int n, k;

		if (now >= deadline)
			return KVS_TEST_PASS;
		n = wt_sleep(w, deadline - now);
		KVS_CHECK_OK(n);
		if (n == 0)
			continue;
		k = kvs_backend_poll(w->b, c, 4, 0);
		if (k != 0 || late++)
			KVS_FAILF("wait descriptor readable %s (poll(0) then reaped %d%s)", when, k,
				  late > 1 ? ", the second wake" : "");
		printf("  one late wake %s that reaped nothing (a signal after its completion)\n",
		       when);
	}
}

/*
 * The issuer's loop: sleep on the descriptor, reap with poll(.., 0) batch at a
 * time, until n completions are in out[0..n) (room for n + batch) or timeout_ns
 * has passed (fail, naming how many came).  Fails when wakes that reaped nothing exceed
 * w->empty_max (the descriptor spins).  w->wakes and w->empty_wakes count on from
 * their values on entry.
 */
static inline kvs_test_rc wt_reap(struct wt *w, struct kvs_backend_completion *out, uint32_t n,
				  uint32_t batch, uint64_t timeout_ns)
{
	uint64_t deadline = kvs_deadline_after(timeout_ns);
	uint32_t got = 0, empty0 = w->empty_wakes;

	while (got < n) {
		uint64_t now = kvs_now_ns();
		int rc;

		if (now >= deadline)
			KVS_FAILF("%u of %u completions after %llu ms asleep on the wait descriptor "
				  "(%u wakes, %u reaped nothing)", got, n,
				  (unsigned long long)(timeout_ns / WT_MS), w->wakes, w->empty_wakes);
		rc = wt_sleep(w, deadline - now);
		KVS_CHECK_OK(rc);
		if (rc == 0)
			continue;
		w->wakes++;
		/* Ask for batch even past n: a poll that returns fewer than asked for
		 * resets the descriptor (the contract), so the last one does. */
		rc = kvs_backend_poll(w->b, out + got, batch, 0);
		KVS_CHECK_OK(rc);
		KVS_CHECK((uint32_t)rc <= n - got); /* nothing we did not submit */
		if (rc == 0 && ++w->empty_wakes - empty0 > w->empty_max)
			KVS_FAILF("wait descriptor spins: %u wakes reaped nothing (%u of %u "
				  "completions in)", w->empty_wakes - empty0, got, n);
		got += (uint32_t)rc;
	}
	return KVS_TEST_PASS;
}

#endif
