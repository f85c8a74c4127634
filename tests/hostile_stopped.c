/*
 * tests/hostile_stopped.c — stopped and vanished processes: a rank stopped
 * (SIGSTOP) while it owns slots or holds a bucket lock, and every rank killed
 * at once.
 *
 *   stopped_owner   an exec'd rank owns two slots and stops itself.  A waiter's
 *                   kvs_slot_wait times out (-ETIMEDOUT) and the log line names
 *                   the stopped pid; SIGCONT: the rank publishes and the wait
 *                   returns READY with its bytes.  It stops again on the second
 *                   slot; SIGKILL: the waiter takes the slot over
 *                   (KVS_SLOT_WAIT_OWNER), fills it, and the cache checks clean
 *   stopped_lock    a forked rank takes the bucket lock of a key (core/'s
 *                   kvs_core_bucket_lock: deterministically inside the lock) and
 *                   stops.  kvs_cache_get of that key is -ETIMEDOUT after
 *                   lock_timeout_ns, the log naming the holder's pid; SIGCONT:
 *                   the rank unlocks and the get succeeds.  Locked and stopped
 *                   again: a READY hit on the key is served (it pins without
 *                   the lock), a forced reload times out naming the holder;
 *                   SIGKILL: the next locker repairs the lock (lock_repairs),
 *                   the hit reads the bytes; the cache checks clean
 *   stopped_owner_store  the same through the store: an exec'd rank owns a
 *                   block's slot and stops; a store load of the block ends
 *                   -ETIMEDOUT at the task's deadline and the log names the
 *                   stopped pid; SIGCONT: the rank publishes and the next load
 *                   returns its bytes
 *   all_killed      four ranks fill slots, keep some pinned and one LOADING each,
 *                   and are all SIGKILLed at once.  The restarted rank adopts the
 *                   stale segment (adoptions 1): READY blocks keep their bytes,
 *                   the dead owners' slots are owned afresh (never waited on),
 *                   nothing pinned, the cache checks clean.  Killed all again,
 *                   the stale segment is removed (kvs_cache_remove, as `kvshare
 *                   clean`) and the next open creates a fresh one (all misses)
 *
 * A stopped process is never a dead one: its rank lock is held, so it is not
 * reaped; the others fail their waits in bounded time and say whom they wait
 * for.  Timeouts here are 300 ms; no sleeps synchronise (pipes and waitpid).
 */
#include <poll.h>
#include <sys/wait.h>

#include "core/core.h"
#include "core_util.h"
#include "store_util.h"

#define MS 1000000ull
#define SHORT_NS (300 * MS)
#define SLOT_BYTES 4096u

/* The library's log lines, kept to be searched.  A store logs from its own
 * threads (copier, registration) too: hs_log is guarded by hs_log_mu. */
static char hs_log[16384];
static size_t hs_len;
static pthread_mutex_t hs_log_mu = PTHREAD_MUTEX_INITIALIZER;

static void hs_logger(void *arg, int level, const char *msg)
{
	int n;

	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
	pthread_mutex_lock(&hs_log_mu);
	n = snprintf(hs_log + hs_len, sizeof(hs_log) - hs_len, "%s\n", msg);
	if (n > 0 && (size_t)n < sizeof(hs_log) - hs_len)
		hs_len += (size_t)n;
	pthread_mutex_unlock(&hs_log_mu);
}

static void hs_log_clear(void)
{
	pthread_mutex_lock(&hs_log_mu);
	hs_len = 0;
	hs_log[0] = '\0';
	pthread_mutex_unlock(&hs_log_mu);
}

static kvs_test_rc hs_log_has(const char *what)
{
	bool found;

	pthread_mutex_lock(&hs_log_mu);
	found = strstr(hs_log, what) != NULL;
	if (!found)
		fprintf(stderr, "no log line says \"%s\"; log:\n%s", what, hs_log);
	pthread_mutex_unlock(&hs_log_mu);
	if (!found)
		KVS_FAILF("no log line says \"%s\"", what);
	return KVS_TEST_PASS;
}

static void stop_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	core_cfg(cfg, "stop", 32, SLOT_BYTES, 1);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->local_rank_size = 16;
	cfg->lock_timeout_ns = SHORT_NS;
	cfg->log = hs_logger;
}

static kvs_test_rc say(int fd)
{
	KVS_CHECK_EQ(write(fd, "x", 1), 1);
	return KVS_TEST_PASS;
}

/* Wait for one byte on fd (a child saying "I am where you want me"). */
static kvs_test_rc hear(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char ch;

	if (poll(&p, 1, 20000) != 1 || read(fd, &ch, 1) != 1)
		KVS_FAILF("no word from the child within 20 s");
	return KVS_TEST_PASS;
}

/* Wait (bounded) until pid is stopped. */
static kvs_test_rc until_stopped(pid_t pid)
{
	uint64_t deadline = kvs_deadline_after(20000 * MS);
	int st;

	while (kvs_now_ns() < deadline) {
		pid_t r = waitpid(pid, &st, WUNTRACED | WNOHANG);

		if (r == pid && WIFSTOPPED(st))
			return KVS_TEST_PASS;
		if (r == pid)
			KVS_FAILF("child %d ended (status 0x%x) instead of stopping", (int)pid, st);
		usleep(1000); /* waitpid cannot sleep with a deadline; 1 ms steps */
	}
	kill(pid, SIGKILL);
	KVS_FAILF("child %d did not stop within 20 s", (int)pid);
}

static kvs_test_rc fill_publish(struct kvs_cache *c, struct kvs_slot *s, uint64_t n)
{
	void *p;

	KVS_CHECK_OK(kvs_slot_data(c, s, &p));
	core_fill(p, SLOT_BYTES, n, 0);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, s));
	return KVS_TEST_PASS;
}

static kvs_test_rc read_slot(struct kvs_cache *c, struct kvs_slot *s, uint64_t n)
{
	void *p;

	KVS_CHECK_OK(kvs_slot_data(c, s, &p));
	KVS_CHECK(core_verify(p, SLOT_BYTES, n, 0));
	return KVS_TEST_PASS;
}

/* ---- a stopped owner ---- */

/* exec'd: --child owner <uid> <fd>: own blocks 1 and 2, say so, stop; on
 * SIGCONT publish 1, stop again (the parent kills us). */
static kvs_test_rc owner_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k1 = core_block(1), k2 = core_block(2);
	struct kvs_slot s1, s2;
	int fd;

	if (argc != 2)
		return KVS_TEST_FAIL;
	fd = atoi(argv[1]);
	stop_cfg(&cfg, argv[0]);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &k1, 0, 0, &s1));
	KVS_CHECK_OK(kvs_cache_get(c, &k2, 0, 0, &s2));
	KVS_CHECK_EQ(s1.flags & s2.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_TRY(say(fd));
	raise(SIGSTOP);
	KVS_TRY(fill_publish(c, &s1, 1));
	raise(SIGSTOP);
	return KVS_TEST_FAIL; /* never continued a second time */
}

static kvs_test_rc stopped_owner(struct kvs_cache *c, pid_t pid, int from)
{
	struct kvs_block_id k1 = core_block(1), k2 = core_block(2);
	struct kvs_slot s1, s2;
	char want[96];

	KVS_TRY(hear(from));
	KVS_TRY(until_stopped(pid));
	snprintf(want, sizeof(want), "(pid %d, alive; stopped?)", (int)pid);

	/* stopped owner: a bounded wait that names it */
	KVS_CHECK_OK(kvs_cache_get(c, &k1, 0, 0, &s1));
	KVS_CHECK_EQ(s1.flags & KVS_SLOT_OWNER, 0);
	hs_log_clear();
	KVS_CHECK_ERR(kvs_slot_wait(c, &s1, 0, SHORT_NS), -ETIMEDOUT);
	KVS_TRY(hs_log_has(want));

	/* continued: it publishes, the wait returns its bytes */
	KVS_CHECK_OK(kill(pid, SIGCONT));
	KVS_CHECK_EQ(kvs_slot_wait(c, &s1, 0, 20000 * MS), KVS_SLOT_WAIT_READY);
	KVS_TRY(read_slot(c, &s1, 1));
	KVS_CHECK_OK(kvs_slot_release(c, &s1));

	/* stopped again, then killed: the waiter takes its slot over */
	KVS_TRY(until_stopped(pid));
	KVS_CHECK_OK(kvs_cache_get(c, &k2, 0, 0, &s2));
	hs_log_clear();
	KVS_CHECK_ERR(kvs_slot_wait(c, &s2, 0, SHORT_NS), -ETIMEDOUT);
	KVS_TRY(hs_log_has(want));
	KVS_CHECK_OK(kill(pid, SIGKILL));
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 128 + SIGKILL);
	KVS_CHECK_EQ(kvs_slot_wait(c, &s2, 0, 20000 * MS), KVS_SLOT_WAIT_OWNER);
	KVS_TRY(fill_publish(c, &s2, 2));
	KVS_CHECK_OK(kvs_slot_release(c, &s2));
	KVS_CHECK_OK(kvs_cache_check(c));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_stopped_owner(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[60], fdarg[16];
	kvs_test_rc rc;
	int p[2];

	stop_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "owner"));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(pipe(p));
	snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
	pid_t pid = kvs_test_spawn("owner", (const char *[]){ uid, fdarg, NULL });
	KVS_CHECK(pid > 0);
	close(p[1]);
	rc = stopped_owner(c, pid, p[0]);
	kill(pid, SIGKILL); /* a failed case leaves no stopped child behind */
	kvs_test_reap(pid, 20000);
	close(p[0]);
	kvs_cache_close(c);
	return rc;
}

/* ---- a stopped owner, seen through the store ---- */

#define STORE_TAG 0x57

/* exec'd: --child store_owner <uid> <fd>: attach to the store's cache as rank 1,
 * own shard 0 of block 1, say so, stop; on SIGCONT publish it (the stored
 * bytes) and leave. */
static kvs_test_rc store_owner_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id b = st_block(STORE_TAG, 1);
	struct kvs_slot sl;
	void *p;

	if (argc != 2)
		return KVS_TEST_FAIL;
	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", argv[0]);
	cfg.device_id = 1;
	cfg.flags = KVS_CACHE_ATTACH;
	cfg.log = hs_logger;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &sl));
	KVS_CHECK_EQ(sl.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_TRY(say(atoi(argv[1])));
	raise(SIGSTOP);
	KVS_CHECK_OK(kvs_slot_data(c, &sl, &p));
	kvs_pattern_fill(&b, 0, 0, p, SLOT_BYTES);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &sl));
	KVS_CHECK_OK(kvs_slot_release(c, &sl));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static kvs_test_rc stopped_owner_store(struct kvs_store *s, struct st_task *t, pid_t pid,
				       int from)
{
	char want[96];

	KVS_TRY(hear(from));
	KVS_TRY(until_stopped(pid));
	snprintf(want, sizeof(want), "(pid %d, alive; stopped?)", (int)pid);
	hs_log_clear();
	KVS_TRY(st_load(s, t, 20000, -ETIMEDOUT));
	KVS_TRY(hs_log_has(want));
	KVS_CHECK_OK(kill(pid, SIGCONT));
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 0);
	KVS_TRY(st_load(s, t, 20000, 0));
	KVS_TRY(st_task_verify(t));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_stopped_owner_store(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct kvs_block_id b = st_block(STORE_TAG, 1);
	struct st_task t;
	char uid[60], fdarg[16];
	kvs_test_rc rc;
	int p[2];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "ownst"), 0, SLOT_BYTES, 32, 1);
	cfg.timeout_ns = SHORT_NS;
	cfg.log = hs_logger;
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_OK(pipe(p));
	snprintf(fdarg, sizeof(fdarg), "%d", p[1]);
	pid_t pid = kvs_test_spawn("store_owner", (const char *[]){ uid, fdarg, NULL });
	KVS_CHECK(pid > 0);
	close(p[1]);
	rc = st_task_whole(&t, 1, 1, SLOT_BYTES);
	if (rc.code == KVS_TEST_PASS.code) {
		st_task_set(&t, 0, &b, 0);
		rc = stopped_owner_store(s, &t, pid, p[0]);
		st_task_free(&t);
	}
	kill(pid, SIGKILL); /* a failed case leaves no stopped child behind */
	kvs_test_reap(pid, 20000);
	close(p[0]);
	kvs_store_close(s);
	return rc;
}

/* ---- a stopped bucket-lock holder ---- */

struct lock_child {
	const char *uid;
	int to_parent, from_parent;
};

/* Forked: lock block 3's bucket, say so, stop; on SIGCONT unlock, say so; at
 * the parent's word lock again, say so and stop (the parent kills us). */
static kvs_test_rc lock_child(void *arg)
{
	struct lock_child *a = arg;
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k = core_block(3);
	uint32_t b;

	stop_cfg(&cfg, a->uid);
	cfg.lock_timeout_ns = 20000 * MS;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	b = kvs_core_bucket_of(c, kvs_core_hash(&k, 0));
	KVS_CHECK_OK(kvs_core_bucket_lock(c, b));
	KVS_TRY(say(a->to_parent));
	raise(SIGSTOP);
	kvs_core_bucket_unlock(c, b);
	KVS_TRY(say(a->to_parent));
	KVS_TRY(hear(a->from_parent));
	KVS_CHECK_OK(kvs_core_bucket_lock(c, b));
	KVS_TRY(say(a->to_parent));
	raise(SIGSTOP);
	return KVS_TEST_FAIL;
}

static kvs_test_rc stopped_lock(struct kvs_cache *c, pid_t pid, int from, int to)
{
	struct kvs_block_id k = core_block(3);
	struct kvs_cache_stats st;
	struct kvs_slot s;
	char want[96];

	KVS_TRY(hear(from));
	KVS_TRY(until_stopped(pid));
	snprintf(want, sizeof(want), "(pid %d; stopped?)", (int)pid);

	/* stopped holder: the get fails after lock_timeout_ns, naming it */
	hs_log_clear();
	KVS_CHECK_ERR(kvs_cache_get(c, &k, 0, 0, &s), -ETIMEDOUT);
	KVS_TRY(hs_log_has(want));

	/* continued: it unlocks, the get succeeds */
	KVS_CHECK_OK(kill(pid, SIGCONT));
	KVS_TRY(hear(from));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_TRY(fill_publish(c, &s, 3));
	KVS_CHECK_OK(kvs_slot_release(c, &s));

	/* locked and stopped again: the key is READY now, and a hit needs no
	 * lock (core/pin.c), so it is served; what needs the lock times out */
	KVS_TRY(say(to));
	KVS_TRY(hear(from));
	KVS_TRY(until_stopped(pid));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, 0);
	KVS_TRY(read_slot(c, &s, 3));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	hs_log_clear();
	KVS_CHECK_ERR(kvs_cache_get(c, &k, 0, KVS_GET_BYPASS_HIT, &s), -ETIMEDOUT);
	KVS_TRY(hs_log_has(want));
	/* then killed: the next locker repairs */
	KVS_CHECK_OK(kill(pid, SIGKILL));
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 128 + SIGKILL);
	KVS_CHECK_EQ(kvs_cache_exists(c, &k, 0), 1);
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, 0);
	KVS_TRY(read_slot(c, &s, 3));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK(st.lock_repairs >= 1);
	KVS_CHECK_OK(kvs_cache_check(c));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_stopped_lock(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[60];
	int up[2], down[2];
	kvs_test_rc rc;

	stop_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "lock"));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(pipe(up));
	KVS_CHECK_OK(pipe(down));
	struct lock_child a = { uid, up[1], down[0] };
	pid_t pid = kvs_test_fork(lock_child, &a);
	KVS_CHECK(pid > 0);
	rc = stopped_lock(c, pid, up[0], down[1]);
	kill(pid, SIGKILL); /* a failed case leaves no stopped child behind */
	kvs_test_reap(pid, 20000);
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
	}
	kvs_cache_close(c);
	return rc;
}

/* ---- every rank killed at once ---- */

#define RANKS 4
#define READY_PER_RANK 4

struct rank_child {
	const char *uid;
	int fd;
	uint32_t r;
};

/* Forked rank r: READY blocks r*10 .. r*10+3, block r*10 kept pinned, block
 * 1000+r owned and never published; then say so and wait to be killed. */
static kvs_test_rc rank_child(void *arg)
{
	struct rank_child *a = arg;
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_slot s, pinned, loading;

	stop_cfg(&cfg, a->uid);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	for (uint64_t n = a->r * 10; n < a->r * 10 + READY_PER_RANK; n++) {
		struct kvs_block_id k = core_block(n);

		KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
		KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
		KVS_TRY(fill_publish(c, &s, n));
		KVS_CHECK_OK(kvs_slot_release(c, &s));
	}
	struct kvs_block_id kp = core_block(a->r * 10), kl = core_block(1000 + a->r);
	KVS_CHECK_OK(kvs_cache_get(c, &kp, 0, 0, &pinned));
	KVS_CHECK_OK(kvs_cache_get(c, &kl, 0, 0, &loading));
	KVS_CHECK_EQ(loading.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_TRY(say(a->fd));
	for (;;)
		pause(); /* until killed */
}

/* Start RANKS ranks on cache uid and kill them all at once when they are set. */
static kvs_test_rc kill_all(const char *uid)
{
	struct rank_child a[RANKS];
	pid_t pids[RANKS];
	int p[2];

	KVS_CHECK_OK(pipe(p));
	for (uint32_t r = 0; r < RANKS; r++) {
		a[r] = (struct rank_child){ uid, p[1], r };
		pids[r] = kvs_test_fork(rank_child, &a[r]);
		KVS_CHECK(pids[r] > 0);
	}
	for (uint32_t r = 0; r < RANKS; r++)
		KVS_TRY(hear(p[0]));
	for (uint32_t r = 0; r < RANKS; r++)
		kill(pids[r], SIGKILL);
	for (uint32_t r = 0; r < RANKS; r++)
		KVS_CHECK_EQ(kvs_test_reap(pids[r], 20000), 128 + SIGKILL);
	close(p[0]);
	close(p[1]);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_all_killed(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_stats st;
	struct kvs_slot s;
	char uid[60], path[160];

	stop_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "allkill"));
	KVS_TRY(kill_all(uid));

	/* restart: adopted, READY bytes kept, the dead owners' slots owned afresh */
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 1);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	KVS_CHECK_EQ(st.slots_loading, 0);
	KVS_CHECK_OK(kvs_cache_check(c));
	for (uint32_t r = 0; r < RANKS; r++) {
		struct kvs_block_id kl = core_block(1000 + r);

		for (uint64_t n = r * 10; n < r * 10 + READY_PER_RANK; n++) {
			struct kvs_block_id k = core_block(n);

			KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s));
			KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, 0);
			KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
			KVS_TRY(read_slot(c, &s, n));
			KVS_CHECK_OK(kvs_slot_release(c, &s));
		}
		KVS_CHECK_OK(kvs_cache_get(c, &kl, 0, 0, &s));
		KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
		KVS_TRY(fill_publish(c, &s, 1000 + r));
		KVS_CHECK_OK(kvs_slot_release(c, &s));
	}
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c); /* last one out: removed */

	/* all killed again, then cleaned: the next open starts fresh */
	KVS_TRY(kill_all(uid));
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	KVS_CHECK(access(path, F_OK) != 0);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 0);
	struct kvs_block_id k0 = core_block(0);
	KVS_CHECK_OK(kvs_cache_get(c, &k0, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "stopped_owner", test_stopped_owner },
	{ "stopped_owner_store", test_stopped_owner_store },
	{ "stopped_lock", test_stopped_lock },
	{ "all_killed", test_all_killed },
};

static const struct kvs_test_child children[] = {
	{ "owner", owner_child },
	{ "store_owner", store_owner_child },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
