/*
 * tests/wait_any.c — kvs_wait_any: the lowest changed index, argument checks,
 * wakes on the first, a middle and the last of KVS_WAIT_ANY_MAX words, the
 * deadline and the check hook; and, in the kernel build, the same in a child
 * whose futex_waitv(2) is refused with ENOSYS by a seccomp filter (what an older
 * kernel or a container's filter does): the documented poll fallback (x86-64:
 * the filter names the syscall by its x86-64 number).
 */
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

#include "wait_util.h"

#define MS (1000000ull)

static _Atomic uint32_t *wt_words; /* KVS_WAIT_ANY_MAX words, shared */

static int setup_words(void)
{
	if (!wt_words)
		wt_words = wt_shared(KVS_WAIT_ANY_MAX * sizeof(*wt_words));
	if (!wt_words)
		return -ENOMEM;
	for (unsigned i = 0; i < KVS_WAIT_ANY_MAX; i++)
		atomic_store(&wt_words[i], 100 + i);
	return 0;
}

static void set_lists(_Atomic uint32_t *ptrs[], uint32_t busy[], unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		ptrs[i] = &wt_words[i];
		busy[i] = 100 + i;
	}
}

static kvs_test_rc test_any_fast_lowest(void)
{
	_Atomic uint32_t *ptrs[8];
	uint32_t busy[8];

	KVS_CHECK_OK(setup_words());
	set_lists(ptrs, busy, 8);
	for (size_t m = 0; m < WT_NMODES; m++) {
		struct kvs_wait_opts o = { .deadline_ns = 0, .mode = wt_modes[m] };

		KVS_CHECK_OK(setup_words());
		KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 8, &o), -ETIMEDOUT);
		kvs_wait_publish(&wt_words[6], 1);
		KVS_CHECK_EQ(kvs_wait_any(ptrs, busy, 8, &o), 6);
		kvs_wait_publish(&wt_words[2], 1);
		KVS_CHECK_EQ(kvs_wait_any(ptrs, busy, 8, &o), 2);
		kvs_wait_publish(&wt_words[0], 1);
		KVS_CHECK_EQ(kvs_wait_any(ptrs, busy, 8, &o), 0);
		KVS_CHECK_EQ(kvs_wait_any(ptrs + 3, busy + 3, 5, &o), 3); /* index into the call's list */
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_any_invalid(void)
{
	_Atomic uint32_t *ptrs[KVS_WAIT_ANY_MAX + 1];
	uint32_t busy[KVS_WAIT_ANY_MAX + 1] = { 0 };
	struct kvs_wait_opts o = wt_opts(KVS_WAIT_AUTO, 0);

	KVS_CHECK_OK(setup_words());
	set_lists(ptrs, busy, KVS_WAIT_ANY_MAX);
	ptrs[KVS_WAIT_ANY_MAX] = &wt_words[0];
	KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 0, &o), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, KVS_WAIT_ANY_MAX + 1, &o), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_any(NULL, busy, 1, &o), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_any(ptrs, NULL, 1, &o), -EINVAL);
	KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 2, NULL), -EINVAL);
	busy[1] = KVS_WAIT_WAITERS;
	KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 2, &o), -EINVAL);
	busy[1] = 101;
	ptrs[1] = NULL;
	KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 2, &o), -EINVAL);
	return KVS_TEST_PASS;
}

/* Sleeping (or spinning) on all KVS_WAIT_ANY_MAX words, woken by one of them. */
static kvs_test_rc any_wakes(void)
{
	static const unsigned which[] = { 0, 1, 63, KVS_WAIT_ANY_MAX - 1 };
	_Atomic uint32_t *ptrs[KVS_WAIT_ANY_MAX];
	uint32_t busy[KVS_WAIT_ANY_MAX];

	set_lists(ptrs, busy, KVS_WAIT_ANY_MAX);
	for (size_t m = 0; m < WT_NMODES; m++) {
		for (size_t k = 0; k < KVS_ARRAY_LEN(which); k++) {
			struct wt_publisher p;
			struct kvs_wait_opts o = wt_opts(wt_modes[m], 10 * KVS_NSEC_PER_SEC);

			KVS_CHECK_OK(setup_words());
			KVS_CHECK_OK(wt_publisher_start(&p, &wt_words[which[k]], 7, wt_modes[m]));
			int rc = kvs_wait_any(ptrs, busy, KVS_WAIT_ANY_MAX, &o);
			KVS_CHECK_OK(wt_publisher_join(&p));
			if (rc != (int)which[k])
				KVS_FAILF("%s: woken by word %u, got %d (%s)", wt_mode_name(wt_modes[m]),
					  which[k], rc, kvs_strerror(rc));
			KVS_CHECK_EQ(atomic_load(&wt_words[which[k]]), 7);
		}
	}
	return KVS_TEST_PASS;
}

static int objecting_hook(void *arg)
{
	++*(int *)arg;
	return -KVS_EOWNERDEAD;
}

static kvs_test_rc any_deadline_and_hook(void)
{
	_Atomic uint32_t *ptrs[16];
	uint32_t busy[16];

	set_lists(ptrs, busy, 16);
	for (size_t m = 0; m < WT_NMODES; m++) {
		struct kvs_wait_opts o = wt_opts(wt_modes[m], 30 * MS);
		uint64_t t0 = kvs_now_ns();

		KVS_CHECK_OK(setup_words());
		KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 16, &o), -ETIMEDOUT);
		KVS_CHECK(kvs_now_ns() >= o.deadline_ns);
		KVS_CHECK(kvs_now_ns() - t0 < 2000 * MS); /* generous bound */

		int calls = 0;
		o = wt_opts(wt_modes[m], 30 * KVS_NSEC_PER_SEC);
		o.slice_ns = 2 * MS;
		o.check = objecting_hook;
		o.check_arg = &calls;
		KVS_CHECK_ERR(kvs_wait_any(ptrs, busy, 16, &o), -KVS_EOWNERDEAD);
		KVS_CHECK_EQ(calls, 1);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_any_wakes(void)
{
	KVS_CHECK_OK(setup_words());
	return any_wakes();
}

static kvs_test_rc test_any_deadline(void)
{
	KVS_CHECK_OK(setup_words());
	return any_deadline_and_hook();
}

#if KVS_KERNEL && defined(SYS_futex_waitv) && defined(__x86_64__)
/* Refuse futex_waitv with ENOSYS in this process (and its threads). */
static int refuse_futex_waitv(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_futex_waitv, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = KVS_ARRAY_LEN(f), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	if (syscall(SYS_futex_waitv, NULL, 0, 0, NULL, 0) >= 0 || errno != ENOSYS)
		return -EPROTO;
	return 0;
}

/* The fallback child's exit status when it cannot install the filter. */
#define NO_FILTER 3

static kvs_test_rc fallback_child(void *arg)
{
	int rc = refuse_futex_waitv();

	(void)arg;
	if (rc < 0) {
		fprintf(stderr, "seccomp filter: %s\n", kvs_strerror(rc));
		return KVS_TEST_EXIT(NO_FILTER);
	}
	KVS_TRY(any_wakes());
	return any_deadline_and_hook();
}

static kvs_test_rc test_any_fallback_enosys(void)
{
	KVS_CHECK_OK(setup_words());
	int rc = kvs_test_reap(kvs_test_fork(fallback_child, NULL), 60000);
	if (rc == NO_FILTER)
		KVS_SKIP("cannot install a seccomp filter here");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}
#endif

static const struct kvs_test_case cases[] = {
	{ "any_fast_lowest", test_any_fast_lowest },
	{ "any_invalid", test_any_invalid },
	{ "any_wakes", test_any_wakes },
	{ "any_deadline", test_any_deadline },
#if KVS_KERNEL && defined(SYS_futex_waitv) && defined(__x86_64__)
	{ "any_fallback_enosys", test_any_fallback_enosys },
#endif
};

KVS_TEST_MAIN(cases)
