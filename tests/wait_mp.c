/*
 * tests/wait_mp.c — one publisher process, several waiter processes, lock-step
 * rounds over shared words: the publisher publishes round r on the shared word,
 * each waiter waits for it and acknowledges on its own word, the publisher waits
 * for every acknowledgement before the next round.  Every wait has a 10 s
 * deadline, so a single lost wakeup fails the run (-ETIMEDOUT) instead of hiding
 * as a delay.  The waiters use different modes (spin, adaptive, futex), so
 * spinners and sleepers share the word.
 *
 *  - fork: the words in MAP_SHARED anonymous memory, KVS_MP_ROUNDS rounds (100k);
 *  - exec: the waiters are exec'd (kvs_test_spawn) and map the words from a
 *    /dev/shm file, at another address than the publisher's.
 */
#include <sys/stat.h>

#include "wait_util.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define KVS_MP_ROUNDS 20000u /* instrumented builds are several times slower */
#else
#define KVS_MP_ROUNDS 100000u
#endif
#define KVS_MP_EXEC_ROUNDS (KVS_MP_ROUNDS / 5)
#define MP_WAITERS 3
#define MP_STRIDE 16 /* words per cache line: one line per word */
#define MP_TIMEOUT_NS (10 * KVS_NSEC_PER_SEC)
#define MP_BYTES (sizeof(_Atomic uint32_t) * MP_STRIDE * (MP_WAITERS + 1))

static _Atomic uint32_t *mp_word(void *region, int i) /* 0: round; 1..: acks */
{
	return (_Atomic uint32_t *)region + MP_STRIDE * i;
}

static kvs_test_rc mp_waiter(void *region, int idx, uint32_t rounds, uint32_t mode)
{
	struct kvs_wait_spin spin;

	kvs_wait_spin_init(&spin, KVS_WAIT_SPIN_DEFAULT_NS);
	for (uint32_t r = 1; r <= rounds; r++) {
		struct kvs_wait_opts o = wt_opts(mode, MP_TIMEOUT_NS);
		int rc;

		o.spin = &spin;
		rc = kvs_wait_while(mp_word(region, 0), r - 1, &o);
		if (rc != (int)r)
			KVS_FAILF("waiter %d (%s): round %u: got %d (%s)", idx, wt_mode_name(mode),
				  r, rc, kvs_strerror(rc));
		kvs_wait_publish(mp_word(region, 1 + idx), r);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc mp_publisher(void *region, uint32_t rounds)
{
	struct kvs_wait_spin spin;

	kvs_wait_spin_init(&spin, KVS_WAIT_SPIN_DEFAULT_NS);
	for (uint32_t r = 1; r <= rounds; r++) {
		kvs_wait_publish(mp_word(region, 0), r);
		for (int i = 0; i < MP_WAITERS; i++) {
			struct kvs_wait_opts o = wt_opts(KVS_WAIT_AUTO, MP_TIMEOUT_NS);
			int rc;

			o.spin = &spin;
			rc = kvs_wait_while(mp_word(region, 1 + i), r - 1, &o);
			if (rc != (int)r)
				KVS_FAILF("publisher: ack %d of round %u: got %d (%s)", i, r, rc,
					  kvs_strerror(rc));
		}
	}
	return KVS_TEST_PASS;
}

struct fork_arg {
	void *region;
	int idx;
};

static kvs_test_rc fork_waiter(void *arg)
{
	struct fork_arg *a = arg;

	return mp_waiter(a->region, a->idx, KVS_MP_ROUNDS, wt_modes[a->idx % WT_NMODES]);
}

/* Reap every child (each within the deadline); the number that did not exit 0. */
static int reap_all(const pid_t *pids, int n)
{
	int bad = 0;

	for (int i = 0; i < n; i++) {
		int rc = pids[i] > 0 ? kvs_test_reap(pids[i], 60000) : -ECHILD;

		if (rc != 0) {
			fprintf(stderr, "waiter %d: exit %d\n", i, rc);
			bad++;
		}
	}
	return bad;
}

static kvs_test_rc test_fork_round_trip(void)
{
	void *region = wt_shared(MP_BYTES);
	struct fork_arg args[MP_WAITERS];
	pid_t pids[MP_WAITERS];

	KVS_CHECK(region != NULL);
	printf("%u rounds, %d waiter processes (fork), modes by index:", KVS_MP_ROUNDS, MP_WAITERS);
	for (int i = 0; i < MP_WAITERS; i++)
		printf(" %s", wt_mode_name(wt_modes[i % WT_NMODES]));
	printf("\n");
	for (int i = 0; i < MP_WAITERS; i++) {
		args[i] = (struct fork_arg){ region, i };
		pids[i] = kvs_test_fork(fork_waiter, &args[i]);
	}
	kvs_test_rc pub = mp_publisher(region, KVS_MP_ROUNDS);
	int bad = reap_all(pids, MP_WAITERS);
	munmap(region, MP_BYTES);
	KVS_TRY(pub);
	KVS_CHECK_EQ(bad, 0);
	return KVS_TEST_PASS;
}

/* Exec'd child: <shm name> <index> <rounds> <mode>. */
static kvs_test_rc child_waiter(int argc, char **argv)
{
	int fd;
	void *region;

	if (argc != 4)
		KVS_FAILF("usage: --child waiter <shm name> <index> <rounds> <mode>");
	fd = shm_open(argv[0], O_RDWR, 0);
	if (fd < 0)
		KVS_FAILF("shm_open %s: %s", argv[0], strerror(errno));
	region = mmap(NULL, MP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (region == MAP_FAILED)
		KVS_FAILF("mmap %s: %s", argv[0], strerror(errno));
	kvs_test_rc rc = mp_waiter(region, atoi(argv[1]), (uint32_t)strtoul(argv[2], NULL, 10),
				   (uint32_t)strtoul(argv[3], NULL, 10));
	munmap(region, MP_BYTES);
	return rc;
}

static kvs_test_rc test_exec_round_trip(void)
{
	char name[96], id[80], idx[MP_WAITERS][8], rounds[16], mode[MP_WAITERS][8];
	pid_t pids[MP_WAITERS];
	void *region;
	int fd, rc;

	snprintf(name, sizeof(name), "/%s", kvs_test_unique_id(id, sizeof(id), "wait_mp"));
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	KVS_CHECK_OK(fd < 0 ? -errno : 0);
	if (ftruncate(fd, MP_BYTES) < 0) {
		rc = -errno;
		close(fd);
		shm_unlink(name);
		KVS_CHECK_OK(rc);
	}
	region = mmap(NULL, MP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (region == MAP_FAILED) {
		shm_unlink(name);
		KVS_FAILF("mmap: %s", strerror(errno));
	}
	snprintf(rounds, sizeof(rounds), "%u", KVS_MP_EXEC_ROUNDS);
	printf("%u rounds, %d exec'd waiter processes on %s\n", KVS_MP_EXEC_ROUNDS, MP_WAITERS, name);
	for (int i = 0; i < MP_WAITERS; i++) {
		snprintf(idx[i], sizeof(idx[i]), "%d", i);
		snprintf(mode[i], sizeof(mode[i]), "%u", wt_modes[(i + 1) % WT_NMODES]);
		const char *args[] = { name, idx[i], rounds, mode[i], NULL };
		pids[i] = kvs_test_spawn("waiter", args);
	}
	kvs_test_rc pub = mp_publisher(region, KVS_MP_EXEC_ROUNDS);
	int bad = reap_all(pids, MP_WAITERS);
	munmap(region, MP_BYTES);
	shm_unlink(name);
	KVS_TRY(pub);
	KVS_CHECK_EQ(bad, 0);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "fork_round_trip", test_fork_round_trip },
	{ "exec_round_trip", test_exec_round_trip },
};

static const struct kvs_test_child children[] = {
	{ "waiter", child_waiter },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
