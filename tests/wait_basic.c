/*
 * tests/wait_basic.c — kvs_wait_while and kvs_wait_publish in one process, every
 * mode of this build: the publish RMW and its WAITERS bit, the fast path,
 * argument checks, wakes, deadlines, the check hook, signals (EINTR) during a
 * wait, a spinner and a sleeper on one word, a publisher waking a sleeper that is
 * not the library's own (what a plain-build publisher must do for kernel-build
 * sleepers on a mixed node), and the adaptive spin policy.
 */
#include <linux/futex.h>
#include <limits.h>
#include <sys/time.h>

#include "wait_util.h"
#include "wait/wait_impl.h"

#define MS (1000000ull)

static kvs_test_rc test_publish_rmw(void)
{
	_Atomic uint32_t w = 5;

	KVS_CHECK_EQ(kvs_wait_publish(&w, 7), 5);
	KVS_CHECK_EQ(atomic_load(&w), 7);
	atomic_store(&w, 7 | KVS_WAIT_WAITERS);
	KVS_CHECK_EQ(kvs_wait_publish(&w, 8), 7 | KVS_WAIT_WAITERS); /* nobody asleep: harmless wake */
	KVS_CHECK_EQ(atomic_load(&w), 8);                             /* WAITERS cleared */
	KVS_CHECK_EQ(kvs_wait_publish(&w, KVS_WAIT_WAITERS | 9), 8);  /* bit 31 ignored */
	KVS_CHECK_EQ(atomic_load(&w), 9);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_fast_path(void)
{
	_Atomic uint32_t w = 3 | KVS_WAIT_WAITERS;

	for (size_t m = 0; m < WT_NMODES; m++) {
		/* Already past the deadline: a word that has left busy still returns it. */
		struct kvs_wait_opts o = { .deadline_ns = 0, .mode = wt_modes[m] };

		KVS_CHECK_EQ(kvs_wait_while(&w, 2, &o), 3);
		KVS_CHECK_ERR(kvs_wait_while(&w, 3, &o), -ETIMEDOUT);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_invalid_args(void)
{
	_Atomic uint32_t w = 0;
	struct kvs_wait_opts o = wt_opts(KVS_WAIT_AUTO, 0);

	KVS_CHECK_ERR(kvs_wait_while(&w, 1, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_while(NULL, 1, &o), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_while(&w, KVS_WAIT_WAITERS, &o), -EINVAL);
	o.mode = 99;
	KVS_CHECK_ERR(kvs_wait_while(&w, 1, &o), -EINVAL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_futex_mode_by_build(void)
{
	_Atomic uint32_t w = 1;
	struct kvs_wait_opts o = wt_opts(KVS_WAIT_FUTEX, 10 * MS);

#if KVS_KERNEL
	KVS_CHECK_ERR(kvs_wait_while(&w, 1, &o), -ETIMEDOUT);
	KVS_CHECK(atomic_load(&w) & KVS_WAIT_WAITERS); /* it announced its sleep */
#else
	KVS_CHECK_ERR(kvs_wait_while(&w, 1, &o), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_wait_while(&w, 0, &o), -EOPNOTSUPP); /* even when it would not wait */
#endif
	return KVS_TEST_PASS;
}

static kvs_test_rc test_wake_each_mode(void)
{
	for (size_t m = 0; m < WT_NMODES; m++) {
		for (int round = 0; round < 200; round++) {
			_Atomic uint32_t w = 0;
			struct wt_publisher p;
			struct kvs_wait_opts o = wt_opts(wt_modes[m], 10 * KVS_NSEC_PER_SEC);

			KVS_CHECK_OK(wt_publisher_start(&p, &w, 1 + (uint32_t)round, wt_modes[m]));
			int rc = kvs_wait_while(&w, 0, &o);
			KVS_CHECK_OK(wt_publisher_join(&p));
			KVS_CHECK_EQ(rc, 1 + round);
		}
	}
	return KVS_TEST_PASS;
}

/* KVS_DEADLINE_NONE (no deadline, no hook): the sleep has no finite end, and a
 * publish still ends it. */
static kvs_test_rc test_no_deadline_wake(void)
{
	for (size_t m = 0; m < WT_NMODES; m++) {
		_Atomic uint32_t w = 0;
		struct wt_publisher p;
		struct kvs_wait_opts o = { .deadline_ns = KVS_DEADLINE_NONE, .mode = wt_modes[m] };

		KVS_CHECK_OK(wt_publisher_start(&p, &w, 3, wt_modes[m]));
		KVS_CHECK_EQ(kvs_wait_while(&w, 0, &o), 3);
		KVS_CHECK_OK(wt_publisher_join(&p));
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_deadline(void)
{
	const uint64_t timeout = 50 * MS, slack = 2000 * MS; /* a generous bound, not a timing */

	for (size_t m = 0; m < WT_NMODES; m++) {
		_Atomic uint32_t w = 4;
		struct kvs_wait_opts o = wt_opts(wt_modes[m], timeout);
		uint64_t t0 = kvs_now_ns();

		KVS_CHECK_ERR(kvs_wait_while(&w, 4, &o), -ETIMEDOUT);
		uint64_t now = kvs_now_ns();
		if (now < o.deadline_ns || now - t0 > timeout + slack)
			KVS_FAILF("%s: returned %.3f ms after start, deadline %.3f ms",
				  wt_mode_name(wt_modes[m]), (double)(now - t0) / 1e6,
				  (double)(o.deadline_ns - t0) / 1e6);
		KVS_CHECK_EQ(atomic_load(&w) & KVS_WAIT_VALUE_MASK, 4);
	}
	return KVS_TEST_PASS;
}

struct hook_state {
	int calls;
	int stop_at;
	uint64_t first_ns;
};

static int hook(void *arg)
{
	struct hook_state *h = arg;

	if (h->calls++ == 0)
		h->first_ns = kvs_now_ns();
	return h->calls == h->stop_at ? -KVS_EOWNERDEAD : 0;
}

static kvs_test_rc test_check_hook_stops(void)
{
	for (size_t m = 0; m < WT_NMODES; m++) {
		_Atomic uint32_t w = 0;
		struct hook_state h = { .stop_at = 3 };
		struct kvs_wait_opts o = wt_opts(wt_modes[m], 30 * KVS_NSEC_PER_SEC);
		uint64_t t0 = kvs_now_ns();

		o.slice_ns = 2 * MS;
		o.check = hook;
		o.check_arg = &h;
		KVS_CHECK_ERR(kvs_wait_while(&w, 0, &o), -KVS_EOWNERDEAD);
		KVS_CHECK_EQ(h.calls, 3);
		KVS_CHECK(h.first_ns - t0 >= o.slice_ns); /* never before the first slice */
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_check_hook_period(void)
{
	for (size_t m = 0; m < WT_NMODES; m++) {
		_Atomic uint32_t w = 0;
		struct hook_state h = { .stop_at = -1 };
		struct kvs_wait_opts o = wt_opts(wt_modes[m], 100 * MS);

		o.slice_ns = 10 * MS;
		o.check = hook;
		o.check_arg = &h;
		KVS_CHECK_ERR(kvs_wait_while(&w, 0, &o), -ETIMEDOUT);
		/* At most once per slice (the grid is absolute), at least once. */
		if (h.calls < 1 || h.calls > 10)
			KVS_FAILF("%s: %d hook calls over 100 ms at 10 ms slices",
				  wt_mode_name(wt_modes[m]), h.calls);
	}
	return KVS_TEST_PASS;
}

/* A thread that signals the waiting thread every ~200 us until told to stop. */
static _Atomic int sig_count;
static _Atomic int sig_stop;

static void on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add(&sig_count, 1);
}

static void *signaller(void *arg)
{
	pthread_t target = *(pthread_t *)arg;
	struct timespec pace = { 0, 200000 };

	while (!atomic_load(&sig_stop)) {
		pthread_kill(target, SIGUSR1);
		nanosleep(&pace, NULL); /* pacing the storm, not synchronising */
	}
	return NULL;
}

static kvs_test_rc test_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: EINTR */
	pthread_t self = pthread_self(), sig_thread;
	int fail = 0, interrupted = 0;

	sigemptyset(&sa.sa_mask);
	KVS_CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	atomic_store(&sig_stop, 0);
	atomic_store(&sig_count, 0);
	KVS_CHECK_OK(-pthread_create(&sig_thread, NULL, signaller, &self));
	for (size_t m = 0; m < WT_NMODES && !fail; m++) {
		_Atomic uint32_t w = 0;
		struct kvs_wait_opts o = wt_opts(wt_modes[m], 100 * MS);
		int before = atomic_load(&sig_count);
		int rc = kvs_wait_while(&w, 0, &o);

		/* Not shortened: the deadline holds through the signals. */
		if (rc != -ETIMEDOUT || kvs_now_ns() < o.deadline_ns) {
			fprintf(stderr, "%s: rc %d (%s) %s the deadline\n", wt_mode_name(wt_modes[m]),
				rc, kvs_strerror(rc),
				kvs_now_ns() < o.deadline_ns ? "before" : "after");
			fail = 1;
		}
		if (atomic_load(&sig_count) > before)
			interrupted++;
		/* Not broken: a publish during the storm is still seen. */
		struct wt_publisher p;
		o = wt_opts(wt_modes[m], 10 * KVS_NSEC_PER_SEC);
		if (wt_publisher_start(&p, &w, 9, wt_modes[m]) == 0) {
			rc = kvs_wait_while(&w, 0, &o);
			if (wt_publisher_join(&p) < 0 || rc != 9) {
				fprintf(stderr, "%s: wake under signals: rc %d\n",
					wt_mode_name(wt_modes[m]), rc);
				fail = 1;
			}
		}
	}
	atomic_store(&sig_stop, 1);
	pthread_join(sig_thread, NULL);
	signal(SIGUSR1, SIG_DFL);
	printf("%d signals; %d of %zu timed waits were interrupted\n", atomic_load(&sig_count),
	       interrupted, WT_NMODES);
	if (!fail && interrupted == 0)
		KVS_FAILF("no signal arrived during any 100 ms wait");
	return fail ? KVS_TEST_FAIL : KVS_TEST_PASS;
}

/* A spinner (KVS_WAIT_SPIN, which never sets WAITERS, like every plain-build
 * waiter) and a sleeper (KVS_WAIT_FUTEX in the kernel build) on one word: one
 * publish ends both. */
struct waiter_arg {
	_Atomic uint32_t *word;
	uint32_t mode;
	int rc;
};

static void *waiter_main(void *arg)
{
	struct waiter_arg *a = arg;
	struct kvs_wait_opts o = wt_opts(a->mode, 10 * KVS_NSEC_PER_SEC);

	a->rc = kvs_wait_while(a->word, 0, &o);
	return NULL;
}

static kvs_test_rc test_spinner_and_sleeper(void)
{
	for (int round = 0; round < 100; round++) {
		_Atomic uint32_t w = 0;
		struct waiter_arg spinner = { &w, KVS_WAIT_SPIN, 0 };
		struct waiter_arg sleeper = { &w, KVS_KERNEL ? KVS_WAIT_FUTEX : KVS_WAIT_AUTO, 0 };
		pthread_t t1, t2;

		KVS_CHECK_OK(-pthread_create(&t1, NULL, waiter_main, &spinner));
		KVS_CHECK_OK(-pthread_create(&t2, NULL, waiter_main, &sleeper));
		if (KVS_KERNEL)
			KVS_CHECK_OK(wt_await_bits(&w, KVS_WAIT_WAITERS, 10 * KVS_NSEC_PER_SEC));
		uint32_t old = kvs_wait_publish(&w, 42);
		pthread_join(t1, NULL);
		pthread_join(t2, NULL);
		KVS_CHECK_EQ(spinner.rc, 42);
		KVS_CHECK_EQ(sleeper.rc, 42);
		KVS_CHECK_EQ(old, KVS_KERNEL ? (0 | KVS_WAIT_WAITERS) : 0);
	}
	return KVS_TEST_PASS;
}

/* A sleeper written against the protocol alone (CAS WAITERS, raw FUTEX_WAIT,
 * shared): what a kernel-build process does on a word a plain-build process
 * publishes.  This build's publisher must wake it. */
static void *foreign_sleeper(void *arg)
{
	struct waiter_arg *a = arg;
	uint32_t v = 0;
	struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(10 * KVS_NSEC_PER_SEC));

	a->rc = -EAGAIN;
	if (!atomic_compare_exchange_strong(a->word, &v, KVS_WAIT_WAITERS))
		return NULL; /* already published */
	while (atomic_load(a->word) == KVS_WAIT_WAITERS) {
		if (syscall(SYS_futex, (uint32_t *)a->word, FUTEX_WAIT_BITSET, KVS_WAIT_WAITERS, &ts,
			    NULL, FUTEX_BITSET_MATCH_ANY) < 0 && errno == ETIMEDOUT) {
			a->rc = -ETIMEDOUT;
			return NULL;
		}
	}
	a->rc = 0;
	return NULL;
}

static kvs_test_rc test_wakes_foreign_sleeper(void)
{
	for (int round = 0; round < 100; round++) {
		_Atomic uint32_t w = 0;
		struct waiter_arg a = { &w, 0, 0 };
		pthread_t t;

		KVS_CHECK_OK(-pthread_create(&t, NULL, foreign_sleeper, &a));
		KVS_CHECK_OK(wt_await_bits(&w, KVS_WAIT_WAITERS, 10 * KVS_NSEC_PER_SEC));
		KVS_CHECK_EQ(kvs_wait_publish(&w, 1), KVS_WAIT_WAITERS);
		pthread_join(t, NULL);
		KVS_CHECK_OK(a.rc); /* -ETIMEDOUT would be a lost wakeup */
	}
	return KVS_TEST_PASS;
}

#if KVS_KERNEL
/* The adaptive policy (wait_impl.h): spins at first, stops after long waits,
 * probes about one wait in KVS_WAIT_SPIN_PROBE (also for waits at exactly
 * periodic times), and recovers on a good probe.  Times are synthetic. */
static int count_probes(const struct kvs_wait_spin *s, uint64_t t0, uint64_t period, int n)
{
	int probes = 0;

	for (int i = 0; i < n; i++)
		probes += kvs_wait_spin_should(s, t0 + (uint64_t)i * period);
	return probes;
}

static kvs_test_rc test_adaptive_policy(void)
{
	struct kvs_wait_spin s;
	const uint32_t b = 10000;
	const int n = 100 * (int)KVS_WAIT_SPIN_PROBE;

	kvs_wait_spin_init(&s, b);
	KVS_CHECK(kvs_wait_spin_should(&s, 0));
	for (int i = 0; i < 8; i++)
		kvs_wait_spin_learn(&s, 1000 * (uint64_t)b, false); /* long, asleep */
	KVS_CHECK(atomic_load(&s.recent_ns) <= 2 * b);          /* capped */
	static const uint64_t periods[] = { 1, 37, 1000, 1000000, 123456789 };
	for (size_t p = 0; p < KVS_ARRAY_LEN(periods); p++) {
		int probes = count_probes(&s, 987654321, periods[p], n);

		/* Expected 100 (binomial sd ~10). */
		if (probes < 50 || probes > 200)
			KVS_FAILF("period %" PRIu64 " ns: %d probes in %d waits", periods[p], probes, n);
	}
	kvs_wait_spin_learn(&s, b / 2, true); /* a probe that succeeded */
	KVS_CHECK(kvs_wait_spin_should(&s, 1));
	kvs_wait_spin_learn(&s, 30 * (uint64_t)b, false); /* one miss is tolerated */
	KVS_CHECK_EQ(count_probes(&s, 0, 1, n), n);
	for (int i = 0; i < 3; i++)
		kvs_wait_spin_learn(&s, 30 * (uint64_t)b, false);
	KVS_CHECK(count_probes(&s, 0, 1000, n) < n / 2); /* off again: probes only */

	kvs_wait_spin_init(&s, 0); /* budget 0: never spins */
	KVS_CHECK_EQ(count_probes(&s, 0, 1, n), 0);
	return KVS_TEST_PASS;
}

/* Budget 0 in AUTO mode sleeps at once (WAITERS set); the wait still works. */
static kvs_test_rc test_auto_no_spin_sleeps(void)
{
	_Atomic uint32_t w = 0;
	struct kvs_wait_spin s;
	struct wt_publisher p;
	struct kvs_wait_opts o = wt_opts(KVS_WAIT_AUTO, 10 * KVS_NSEC_PER_SEC);

	kvs_wait_spin_init(&s, 0);
	o.spin = &s;
	KVS_CHECK_OK(wt_publisher_start(&p, &w, 5, KVS_WAIT_AUTO));
	KVS_CHECK_EQ(kvs_wait_while(&w, 0, &o), 5);
	KVS_CHECK_OK(wt_publisher_join(&p));
	return KVS_TEST_PASS;
}
#endif

static const struct kvs_test_case cases[] = {
	{ "publish_rmw", test_publish_rmw },
	{ "fast_path", test_fast_path },
	{ "invalid_args", test_invalid_args },
	{ "futex_mode_by_build", test_futex_mode_by_build },
	{ "wake_each_mode", test_wake_each_mode },
	{ "no_deadline_wake", test_no_deadline_wake },
	{ "deadline", test_deadline },
	{ "check_hook_stops", test_check_hook_stops },
	{ "check_hook_period", test_check_hook_period },
	{ "signals", test_signals },
	{ "spinner_and_sleeper", test_spinner_and_sleeper },
	{ "wakes_foreign_sleeper", test_wakes_foreign_sleeper },
#if KVS_KERNEL
	{ "adaptive_policy", test_adaptive_policy },
	{ "auto_no_spin_sleeps", test_auto_no_spin_sleeps },
#endif
};

KVS_TEST_MAIN(cases)
