/*
 * tests/abi_dropin.c — the drop-in promise from a user's side.
 *
 * Linked against the plain libkvshare.so.1 with no RUNPATH; CTest runs it with
 * LD_LIBRARY_PATH pointing at the plain and at the kernel library:
 *
 *   abi_dropin <variant loaded> <other variant> <other variant's library dir>
 *
 * Every case must pass with both.  The mixed-node case then execs this same
 * program against the *other* library: one cache shared by a plain and a kernel
 * process, each waiting for a slot the other fills (spin waiter vs futex
 * publisher and the reverse, across the two runs).  Whichever process runs the
 * kernel library is made to sleep in the kernel before the plain process
 * publishes: the publisher polls /proc/<waiter>/syscall until the waiter sits in
 * futex (or futex_waitv), so the cross-variant FUTEX_WAKE is really exercised.
 */
#include <dlfcn.h>
#include <sys/prctl.h>

#include "core_util.h"
#include "harness.h"

static const char *want_variant, *other_variant, *other_libdir;

static kvs_test_rc test_loaded_variant(void)
{
	Dl_info info;

	KVS_CHECK(dladdr((void *)kvs_version, &info) != 0);
	printf("loaded %s (%s %s)\n", info.dli_fname, kvs_variant(), kvs_version());
	KVS_CHECK(strcmp(kvs_variant(), want_variant) == 0);
	KVS_CHECK(strcmp(kvs_version(), "0.1.0") == 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_strerror(void)
{
	KVS_CHECK(strstr(kvs_strerror(-KVS_ECONFIG), "configuration") != NULL);
	KVS_CHECK(strcmp(kvs_strerror(-EINVAL), strerror(EINVAL)) == 0);
	return KVS_TEST_PASS;
}

#define MIX_SLOT_BYTES 8192
#define MIX_TIMEOUT_NS (20ull * KVS_NSEC_PER_SEC)

static void mix_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	core_cfg(cfg, "abi", 16, MIX_SLOT_BYTES, 2);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->hugetlb = KVS_HUGETLB_AUTO; /* kernel creator: hugetlbfs when there is a pool */
}

static kvs_test_rc fill_and_publish(struct kvs_cache *c, struct kvs_slot *s, uint64_t n)
{
	void *p;

	KVS_CHECK_OK(kvs_slot_data(c, s, &p));
	core_fill(p, MIX_SLOT_BYTES, n, 0);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, s));
	return KVS_TEST_PASS;
}

/* Wait (bounded) until process pid sleeps in futex / futex_waitv. */
static kvs_test_rc wait_in_futex(pid_t pid)
{
	KVS_TRY(kvs_test_wait_in_futex(pid, MIX_TIMEOUT_NS / 2));
	printf("pid %d asleep in futex; publishing\n", (int)pid);
	return KVS_TEST_PASS;
}

static kvs_test_rc wait_and_verify(struct kvs_cache *c, struct kvs_slot *s, uint64_t n)
{
	void *p;

	KVS_CHECK_ERR(kvs_slot_wait(c, s, 0, MIX_TIMEOUT_NS), KVS_SLOT_WAIT_READY);
	KVS_CHECK_OK(kvs_slot_data(c, s, &p));
	KVS_CHECK(core_verify(p, MIX_SLOT_BYTES, n, 0));
	return KVS_TEST_PASS;
}

/*
 * Child, on the other library: argv = unique_id, fd to report on.  Block 1 is
 * READY (the parent filled it); block 2 the parent owns and publishes after our
 * report; block 3 we own, and the parent waits for it.
 */
static kvs_test_rc child_mixed(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c;
	struct kvs_block_id b1 = core_block(1), b2 = core_block(2), b3 = core_block(3);
	struct kvs_slot s1, s2, s3;
	int fd;

	if (argc < 2)
		KVS_FAILF("usage: --child mixed <uid> <fd>");
	fd = atoi(argv[1]);
	printf("child on %s\n", kvs_variant());
	mix_cfg(&cfg, argv[0]);
	cfg.flags |= KVS_CACHE_ATTACH;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &b1, 0, 0, &s1));
	KVS_CHECK(!(s1.flags & KVS_SLOT_OWNER));
	KVS_TRY(wait_and_verify(c, &s1, 1));
	KVS_CHECK_OK(kvs_cache_get(c, &b2, 0, 0, &s2));
	KVS_CHECK(!(s2.flags & KVS_SLOT_OWNER));
	KVS_CHECK_OK(kvs_cache_get(c, &b3, 0, 0, &s3));
	KVS_CHECK(s3.flags & KVS_SLOT_OWNER);
	KVS_CHECK(write(fd, "w", 1) == 1); /* parent: publish block 2, wait for block 3 */
	KVS_TRY(wait_and_verify(c, &s2, 2));
	/* The parent runs the kernel library: it must sleep in futex on block 3
	 * before we (plain) publish it.  Publish regardless, so it never hangs. */
	kvs_test_rc slept = KVS_TEST_PASS;
	if (strcmp(kvs_variant(), "plain") == 0)
		slept = wait_in_futex(getppid());
	KVS_TRY(fill_and_publish(c, &s3, 3));
	KVS_CHECK_OK(kvs_slot_release(c, &s1));
	KVS_CHECK_OK(kvs_slot_release(c, &s2));
	KVS_CHECK_OK(kvs_slot_release(c, &s3));
	kvs_cache_close(c);
	return slept;
}

static kvs_test_rc test_mixed_node(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c;
	struct kvs_block_id b1 = core_block(1), b2 = core_block(2), b3 = core_block(3);
	struct kvs_slot s1, s2, s3;
	char uid[72], fdarg[16], buf;
	int pfd[2], rc;
	pid_t pid;

	snprintf(uid, sizeof(uid), "t.abi.%s.%d", want_variant, (int)getpid());
	mix_cfg(&cfg, uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &b1, 0, 0, &s1));
	KVS_CHECK(s1.flags & KVS_SLOT_OWNER);
	KVS_TRY(fill_and_publish(c, &s1, 1));
	KVS_CHECK_OK(kvs_slot_release(c, &s1));
	KVS_CHECK_OK(kvs_cache_get(c, &b2, 0, 0, &s2));
	KVS_CHECK(s2.flags & KVS_SLOT_OWNER);

	KVS_CHECK(pipe(pfd) == 0);
	snprintf(fdarg, sizeof(fdarg), "%d", pfd[1]);
	const char *av[] = { uid, fdarg, NULL };
	setenv("LD_LIBRARY_PATH", other_libdir, 1); /* the child loads the other build */
	pid = kvs_test_spawn("mixed", av);
	close(pfd[1]);
	KVS_CHECK(pid > 0);
	/* Under Yama ptrace_scope 1 a child may not read our /proc/<pid>/syscall
	 * unless we name it (no Yama: EINVAL, nothing to do). */
	(void)prctl(PR_SET_PTRACER, (unsigned long)pid, 0, 0, 0);
	/* The child reports once it waits on block 2 and owns block 3. */
	rc = (int)read(pfd[0], &buf, 1);
	close(pfd[0]);
	/* The child runs the kernel library: it must sleep in futex on block 2
	 * before we (plain) publish it.  Publish regardless, so it never hangs. */
	kvs_test_rc slept = KVS_TEST_PASS;
	if (rc == 1 && strcmp(other_variant, "kernel") == 0)
		slept = wait_in_futex(pid);
	KVS_TRY(fill_and_publish(c, &s2, 2));
	if (rc == 1) {
		KVS_CHECK_OK(kvs_cache_get(c, &b3, 0, 0, &s3));
		KVS_CHECK(!(s3.flags & KVS_SLOT_OWNER));
		KVS_TRY(wait_and_verify(c, &s3, 3));
		KVS_CHECK_OK(kvs_slot_release(c, &s3));
	}
	KVS_CHECK_OK(kvs_slot_release(c, &s2));
	KVS_CHECK_EQ(kvs_test_reap(pid, 30000), 0);
	KVS_CHECK_EQ(rc, 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return slept;
}

static const struct kvs_test_case cases[] = {
	{ "loaded_variant", test_loaded_variant },
	{ "strerror", test_strerror },
	{ "mixed_node", test_mixed_node },
};

static const struct kvs_test_child children[] = {
	{ "mixed", child_mixed },
};

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--child") == 0)
		return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), children,
				    KVS_ARRAY_LEN(children));
	if (argc < 4) {
		fprintf(stderr, "usage: %s <variant> <other variant> <other library dir>\n", argv[0]);
		return 2;
	}
	want_variant = argv[1];
	other_variant = argv[2];
	other_libdir = argv[3];
	return kvs_test_run(1, argv, cases, KVS_ARRAY_LEN(cases), children,
			    KVS_ARRAY_LEN(children));
}
