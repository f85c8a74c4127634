/*
 * tests/core_race.c — races and wakes between processes, each reproduced so
 * that the broken version fails:
 *   prealloc_race     a get racing prealloc on the same keys is always the owner
 *                     (prealloc once left a window where the get waited on a
 *                     slot nobody would fill);
 *   bucket_lost_wake  a bucket-lock sleeper whose wake was lost (the end state
 *                     of a waiter killed while queued, built here directly: the
 *                     lock word freed without a wake) gets the lock within a
 *                     slice, not at its deadline;
 *   slot_wake         a futex sleeper on a slot wakes at the publish, well
 *                     before the 10 ms liveness slice would have found it.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull

/* ---- prealloc_race ---- */

#if defined(__SANITIZE_THREAD__)
#define PREALLOC_GETS 20000
#else
#define PREALLOC_GETS 200000
#endif
#define PREALLOC_KEYS 48

static void race_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	core_cfg(cfg, "race", 32, 256, 1);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->reserved_slots = 4;
}

static const char *prealloc_uid;
static _Atomic int *prealloc_stop; /* shared anonymous page */

/* forked: prealloc random keys until told to stop */
static kvs_test_rc preallocator(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	unsigned seed = 99;
	long n = 0;

	(void)arg;
	race_cfg(&cfg, prealloc_uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	while (!atomic_load(prealloc_stop)) {
		struct kvs_block_id k = core_block(rand_r(&seed) % PREALLOC_KEYS);
		int rc = kvs_cache_prealloc(c, &k, 0);

		if (rc < 0 && rc != -ENOSPC)
			KVS_FAILF("prealloc: %s", kvs_strerror(rc));
		n += rc == 1;
	}
	printf("  %ld slots preallocated\n", n);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_prealloc_race(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[80];
	unsigned seed = 7;
	long waiters = 0, owners = 0;
	pid_t pid;

	prealloc_stop = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	KVS_CHECK(prealloc_stop != MAP_FAILED);
	prealloc_uid = kvs_test_unique_id(uid, sizeof(uid), "prealloc");
	race_cfg(&cfg, uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	pid = kvs_test_fork(preallocator, NULL);
	KVS_CHECK(pid > 0);
	for (int n = 0; n < PREALLOC_GETS; n++) {
		struct kvs_block_id k = core_block(rand_r(&seed) % PREALLOC_KEYS);
		struct kvs_slot s;
		int rc = kvs_cache_get(c, &k, 0, 0, &s);

		if (rc == -ENOSPC)
			continue;
		KVS_CHECK_OK(rc);
		if (s.flags & KVS_SLOT_OWNER) {
			owners++;
			KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
		} else if (s.state != KVS_SLOT_READY) {
			waiters++; /* nobody but us fills: this get would wait in vain */
		}
		KVS_CHECK_OK(kvs_slot_release(c, &s));
	}
	atomic_store(prealloc_stop, 1);
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 0);
	printf("  %d gets: %ld owners, %ld would have waited on a preallocated slot\n",
	       PREALLOC_GETS, owners, waiters);
	KVS_CHECK_EQ(waiters, 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	munmap(prealloc_stop, 4096);
	return KVS_TEST_PASS;
}

/* ---- bucket_lost_wake ---- */

static const char *lw_uid;
static int lw_fd[2]; /* child -> parent: "I hold the lock"; parent -> child: "free it" */
static int lw_back[2];

static void lw_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	core_cfg(cfg, "lostwake", 16, 256, 1);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->lock_timeout_ns = 5000 * MS;
}

/* forked: hold key 1's bucket lock; when told, free the lock word WITHOUT a
 * wake (what a waiter killed while queued leaves behind) and exit. */
static kvs_test_rc lock_holder(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(1);
	char ch = 'x';

	(void)arg;
	lw_cfg(&cfg, lw_uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_core_test_hold_bucket(c, &k, 0));
	KVS_CHECK_EQ(write(lw_fd[1], &ch, 1), 1);
	KVS_CHECK_EQ(read(lw_back[0], &ch, 1), 1);
	uint32_t b = kvs_core_bucket_of(c, kvs_core_hash(&k, 0));
	/* glibc's lock word: owner tid | FUTEX_WAITERS.  Zero it, wake nobody. */
	atomic_store((_Atomic int *)&c->buckets[b].lock.__data.__lock, 0);
	_exit(0); /* the kernel's robust-list walk skips a word we no longer own */
}

/* forked: get key 1 (sleeps on the held bucket lock); exit 0 if it got it */
static kvs_test_rc lock_waiter(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(1);
	struct kvs_slot s;

	(void)arg;
	lw_cfg(&cfg, lw_uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	uint64_t t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	printf("  waiter had the lock after %.1f ms\n", (double)(kvs_now_ns() - t0) / 1e6);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bucket_lost_wake(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[80], ch;
	pid_t holder, waiter;

	lw_uid = kvs_test_unique_id(uid, sizeof(uid), "lostwake");
	lw_cfg(&cfg, uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(pipe(lw_fd));
	KVS_CHECK_OK(pipe(lw_back));
	holder = kvs_test_fork(lock_holder, NULL);
	KVS_CHECK_EQ(read(lw_fd[0], &ch, 1), 1);
	waiter = kvs_test_fork(lock_waiter, NULL);
	/* the waiter must be asleep in the kernel on the lock word */
	KVS_TRY(kvs_test_wait_in_futex(waiter, 10000 * MS));
	KVS_CHECK_EQ(write(lw_back[1], "x", 1), 1);
	KVS_CHECK_EQ(kvs_test_reap(holder, 10000), 0);
	/* Without slices the waiter sleeps its whole lock_timeout_ns (5 s) and
	 * fails with -ETIMEDOUT; with them it gets the lock within a slice. */
	uint64_t t0 = kvs_now_ns();
	KVS_CHECK_EQ(kvs_test_reap(waiter, 10000), 0);
	KVS_CHECK((kvs_now_ns() - t0) < 2500 * MS);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	for (int i = 0; i < 2; i++) {
		close(lw_fd[i]);
		close(lw_back[i]);
	}
	return KVS_TEST_PASS;
}

/* ---- slot_wake ---- */

#define WAKE_TRIALS 9

static const char *wake_uid;
static int wake_pipe[2];

static void wake_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	core_cfg(cfg, "wake", 16, 256, 1);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->wait = KVS_WAIT_FUTEX; /* sleep at once: the publish must wake us */
}

/* forked: wait on key n (owned by the parent); send the wake time */
static kvs_test_rc slot_sleeper(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block((uint64_t)(uintptr_t)arg);
	struct kvs_slot s;
	uint64_t t;

	wake_cfg(&cfg, wake_uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(kvs_slot_wait(c, &s, 0, 20000 * MS), KVS_SLOT_WAIT_READY);
	t = kvs_now_ns();
	KVS_CHECK_EQ(write(wake_pipe[1], &t, sizeof(t)), (ssize_t)sizeof(t));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* Bounded poll until a sleeper announced itself in word (WAITERS). */
static int waiters_announced(_Atomic uint32_t *word)
{
	uint64_t deadline = kvs_deadline_after(10000 * MS);

	while (!(atomic_load(word) & KVS_WAIT_WAITERS)) {
		if (kvs_now_ns() >= deadline)
			return 0;
		usleep(200);
	}
	return 1;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static kvs_test_rc test_slot_wake(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	uint64_t lat[WAKE_TRIALS];
	char uid[80];

	if (!KVS_KERNEL)
		KVS_SKIP("plain waiters spin: there is no futex sleep to lose a wake in");
	wake_uid = kvs_test_unique_id(uid, sizeof(uid), "wake");
	wake_cfg(&cfg, uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(pipe(wake_pipe));
	for (int n = 0; n < WAKE_TRIALS; n++) {
		struct kvs_block_id k = core_block((uint64_t)n);
		struct kvs_slot s;
		uint64_t t_pub, t_wake;
		pid_t pid;

		KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
		KVS_CHECK_EQ(s.flags, KVS_SLOT_OWNER);
		pid = kvs_test_fork(slot_sleeper, (void *)(uintptr_t)n);
		KVS_CHECK(pid > 0);
		/* the sleeper announced itself (WAITERS) and is in the kernel */
		KVS_CHECK(waiters_announced(&c->states[s.index]));
		KVS_TRY(kvs_test_wait_in_futex(pid, 10000 * MS));
		t_pub = kvs_now_ns();
		KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
		KVS_CHECK_EQ(read(wake_pipe[0], &t_wake, sizeof(t_wake)), (ssize_t)sizeof(t_wake));
		KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
		KVS_CHECK_OK(kvs_slot_release(c, &s));
		lat[n] = t_wake > t_pub ? t_wake - t_pub : 0;
	}
	qsort(lat, WAKE_TRIALS, sizeof(lat[0]), cmp_u64);
	printf("  wake after publish: min %.3f ms, median %.3f ms, max %.3f ms (slice 10 ms)\n",
	       (double)lat[0] / 1e6, (double)lat[WAKE_TRIALS / 2] / 1e6,
	       (double)lat[WAKE_TRIALS - 1] / 1e6);
	/* A lost wake is found only at the sleeper's next slice, ~10 ms after it
	 * went to sleep: every trial would take most of a slice. */
	KVS_CHECK(lat[WAKE_TRIALS / 2] < 4 * MS);
	close(wake_pipe[0]);
	close(wake_pipe[1]);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "prealloc_race", test_prealloc_race },
	{ "bucket_lost_wake", test_bucket_lost_wake },
	{ "slot_wake", test_slot_wake },
};

KVS_TEST_MAIN(cases)
