/*
 * tests/store_register.c — the store serves while its data plane is being
 * registered with the copy engine (store/register.c), with the host
 * engine: no GPU needed.
 *
 *   staged_then_direct  registration held at known points (the test hook):
 *                       loads before any chunk is registered all go through the
 *                       staging buffer; after k chunks exactly the slots beyond
 *                       the registered prefix do (computed from the slots the
 *                       cache gave them); dumps during registration land in the
 *                       cache intact; once ready nothing is staged.  Every load
 *                       is checked byte for byte.
 *   staged_pieces       shards larger than the staging buffer (two 5 MiB
 *                       tensors through 8 MiB): a tensor split across two
 *                       fills, both ways (load, dump), bytes intact.
 *   register_fails      the engine refuses a chunk: kvs_store_ready says why,
 *                       the registered prefix is copied directly, the rest
 *                       staged, bytes intact; close unregisters the prefix.
 *                       A watcher has nothing to register (-EOPNOTSUPP).
 *   order_progress      two data segments, the rank's node's second: its
 *                       segment is registered first, each from offset 0 in
 *                       chunk steps; registered_bytes and register_ns only grow
 *                       (sampled while the host engine's test mode delays each
 *                       chunk), ready comes with registered == total.
 *   close_mid_register  close while chunks are still being registered (slow
 *                       test-mode chunks): clean (ASan, TSan), and the segments
 *                       are gone after the last close.
 *   rank_killed         a rank killed -9 in mid-registration: its peer keeps
 *                       loading, is ready, the node counts only live ranks, the
 *                       cache checks clean and nothing is left after close.
 *   attacher_mapped     a rank that attached to a cache another process made
 *                       (exec'd) has the whole data plane in its page tables
 *                       once ready, before any copy: the host engine's
 *                       registration maps it (smaps: Rss, or the hugetlb
 *                       fields), so its first loads take no page faults.
 */
#include <pthread.h>

#include "store/store.h"
#include "numa/numa.h"
#include "store_util.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define SHARD (64 * KIB)
#define SLOTS 256u                     /* 16 MiB of data */
#define CHUNK MIB                      /* 16 chunks */

/* ---- the gate: the registration thread waits before chunk allowed ---- */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t allowed;   /* chunks that may start */
	uint32_t entered;   /* chunks that reached the hook */
	uint32_t fail_at;   /* this chunk is refused with -ENOMEM (UINT32_MAX: none) */
	uint32_t seg[64];   /* (segment, offset) of each, in order */
	uint64_t off[64];
} gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, UINT32_MAX, { 0 }, { 0 } };

static int gate_hook(struct kvs_store *s, uint32_t seg, uint64_t off, uint64_t len)
{
	int rc;

	uint64_t deadline = kvs_deadline_after(60 * ST_SEC);
	struct timespec ts;

	(void)s, (void)len;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 60; /* a forgotten gate fails the test, it never hangs it */
	pthread_mutex_lock(&gate.mu);
	if (gate.entered < 64) {
		gate.seg[gate.entered] = seg;
		gate.off[gate.entered] = off;
	}
	gate.entered++;
	pthread_cond_broadcast(&gate.cv);
	while (gate.entered > gate.allowed && kvs_now_ns() < deadline)
		pthread_cond_timedwait(&gate.cv, &gate.mu, &ts);
	rc = gate.entered - 1 == gate.fail_at ? -ENOMEM : 0;
	pthread_mutex_unlock(&gate.mu);
	return rc;
}

static void gate_reset(uint32_t allowed)
{
	pthread_mutex_lock(&gate.mu);
	gate.allowed = allowed;
	gate.entered = 0;
	gate.fail_at = UINT32_MAX;
	pthread_mutex_unlock(&gate.mu);
}

static void gate_allow(uint32_t allowed)
{
	pthread_mutex_lock(&gate.mu);
	gate.allowed = allowed;
	pthread_cond_broadcast(&gate.cv);
	pthread_mutex_unlock(&gate.mu);
}

/* Wait until n chunks reached the hook (chunk n - 1 is held there, so the
 * chunks before it are registered and published). */
static kvs_test_rc gate_wait_entered(uint32_t n)
{
	struct timespec ts;
	uint32_t got;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	pthread_mutex_lock(&gate.mu);
	while (gate.entered < n && pthread_cond_timedwait(&gate.cv, &gate.mu, &ts) != ETIMEDOUT)
		;
	got = gate.entered;
	pthread_mutex_unlock(&gate.mu);
	if (got < n)
		KVS_FAILF("registration reached %u chunks in 30 s, want %u", got, n);
	return KVS_TEST_PASS;
}

/* ---- helpers ---- */

static void reg_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device)
{
	st_cfg(cfg, uid, device, SHARD, SLOTS, 1);
	st_latency(cfg, 0);
	cfg->register_chunk_bytes = CHUNK;
}

/* n shards: blocks first .. first + n - 1 of tag, shard 0, one tensor. */
static kvs_test_rc blocks_task(struct st_task *t, uint32_t tag, uint32_t first, uint32_t n)
{
	KVS_TRY(st_task_whole(t, n, 1, SHARD));
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_block_id b = st_block(tag, first + i);

		st_task_set(t, i, &b, 0);
	}
	return KVS_TEST_PASS;
}

/* How many of t's shards sit in slots that are not inside the first
 * registered bytes of the (one) data segment: the ones a load stages now. */
static kvs_test_rc count_beyond(struct kvs_store *s, const struct st_task *t, uint64_t registered,
				uint32_t *beyond)
{
	struct kvs_cache *c = kvs_store_cache(s);

	*beyond = 0;
	for (uint32_t i = 0; i < t->n; i++) {
		struct kvs_slot slot;

		KVS_CHECK_OK(kvs_cache_get(c, &t->shards[i].block, 0, 0, &slot));
		KVS_CHECK_EQ(slot.state, KVS_SLOT_READY); /* a hit: loaded before */
		*beyond += (uint64_t)(slot.index + 1) * SHARD > registered;
		KVS_CHECK_OK(kvs_slot_release(c, &slot));
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc stats_of(struct kvs_store *s, struct kvs_store_stats *st)
{
	return st_stats(s, st_rank(s), st);
}

/* ---- cases ---- */

static kvs_test_rc staged_then_direct_run(struct kvs_store *s, struct st_task *loads,
					  struct st_task *dumps)
{
	struct kvs_store_stats a, b;
	uint32_t beyond;

	/* Nothing registered: every copy is staged. */
	KVS_TRY(gate_wait_entered(1));
	KVS_CHECK_EQ(kvs_store_ready(s, 0), 0);
	KVS_TRY(st_load(s, loads, 10000, 0));
	KVS_TRY(stats_of(s, &a));
	KVS_CHECK_EQ(a.register_total_bytes, SLOTS * SHARD);
	KVS_CHECK_EQ(a.registered_bytes, 0);
	KVS_CHECK_EQ(a.ready, 0);
	KVS_CHECK_EQ(a.shards_loaded, loads->n);
	KVS_CHECK_EQ(a.staged_shards, loads->n);

	/* Four chunks in (the fifth held): exactly the slots beyond them are staged. */
	gate_allow(4);
	KVS_TRY(gate_wait_entered(5));
	KVS_CHECK_EQ(kvs_store_ready(s, 0), 0);
	KVS_TRY(count_beyond(s, loads, 4 * CHUNK, &beyond));
	printf("  after 4 chunks: %u of %u loaded slots beyond them\n", beyond, loads->n);
	KVS_CHECK(beyond > 0 && beyond < loads->n); /* both paths in one task */
	KVS_TRY(st_load(s, loads, 10000, 0));
	KVS_TRY(stats_of(s, &b));
	KVS_CHECK_EQ(b.registered_bytes, 4 * CHUNK);
	KVS_CHECK_EQ(b.staged_shards - a.staged_shards, beyond);
	KVS_CHECK_EQ(b.shards_loaded - a.shards_loaded, loads->n);
	/* Dumps while registering: gathered (staged or not) into the cache intact. */
	KVS_TRY(st_dump(s, dumps, 10000));
	KVS_TRY(st_load(s, dumps, 10000, 0));

	/* Everything in: ready, nothing staged any more. */
	gate_allow(UINT32_MAX);
	KVS_CHECK_EQ(kvs_store_ready(s, 30 * ST_SEC), 1);
	KVS_TRY(stats_of(s, &a));
	KVS_CHECK_EQ(a.registered_bytes, a.register_total_bytes);
	KVS_CHECK_EQ(a.ready, 1);
	KVS_TRY(st_load(s, loads, 10000, 0));
	KVS_TRY(st_load(s, dumps, 10000, 0));
	KVS_TRY(stats_of(s, &b));
	KVS_CHECK_EQ(b.staged_shards, a.staged_shards);
	KVS_CHECK_EQ(b.shards_loaded - a.shards_loaded, loads->n + dumps->n);
	KVS_TRY(st_cache_clean(s, true));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_staged_then_direct(void)
{
	struct kvs_store_config cfg;
	struct st_task loads, dumps;
	struct kvs_store *s = NULL;
	char uid[64];
	kvs_test_rc rc;

	KVS_TRY(blocks_task(&loads, 1, 0, 96)); /* 6 MiB of slots: beyond 4 chunks */
	KVS_TRY(blocks_task(&dumps, 2, 0, 16));
	reg_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "staged"), 0);
	gate_reset(0); /* the first chunk held */
	kvs_store_test_register_hook = gate_hook;
	rc = st_open(&cfg, &s);
	if (rc.code == KVS_TEST_PASS.code)
		rc = staged_then_direct_run(s, &loads, &dumps);
	gate_allow(UINT32_MAX);
	kvs_store_close(s);
	kvs_store_test_register_hook = NULL;
	st_task_free(&loads);
	st_task_free(&dumps);
	return rc;
}

static kvs_test_rc staged_pieces_run(struct kvs_store *s, uint64_t shard_bytes)
{
	struct st_task loads, dumps;
	struct kvs_store_stats st;
	kvs_test_rc rc;

	KVS_TRY(gate_wait_entered(1)); /* nothing registered */
	KVS_TRY(st_task_whole(&loads, 2, 2, shard_bytes));
	rc = st_task_whole(&dumps, 2, 2, shard_bytes);
	for (uint32_t i = 0; i < 2 && rc.code == KVS_TEST_PASS.code; i++) {
		struct kvs_block_id lb = st_block(6, i), db = st_block(7, i);

		st_task_set(&loads, i, &lb, 0);
		st_task_set(&dumps, i, &db, 0);
	}
	if (rc.code == KVS_TEST_PASS.code)
		rc = st_load(s, &loads, 10000, 0);
	if (rc.code == KVS_TEST_PASS.code)
		rc = st_dump(s, &dumps, 10000);
	if (rc.code == KVS_TEST_PASS.code)
		rc = st_load(s, &dumps, 10000, 0); /* hits: the gathered bytes */
	if (rc.code == KVS_TEST_PASS.code)
		rc = stats_of(s, &st);
	st_task_free(&loads);
	st_task_free(&dumps);
	KVS_TRY(rc);
	KVS_CHECK_EQ(st.staged_shards, 6);
	KVS_CHECK_EQ(st.registered_bytes, 0);
	return KVS_TEST_PASS;
}

_Static_assert(10 * MIB > KVS_STORE_STAGING_MAX && 5 * MIB < KVS_STORE_STAGING_MAX,
	       "staged_pieces: a tensor fits the staging buffer, a shard does not");

static kvs_test_rc test_staged_pieces(void)
{
	const uint64_t shard = 10 * MIB;
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char uid[64];
	kvs_test_rc rc;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "pieces"), 0, shard, 4, 1);
	st_latency(&cfg, 0);
	cfg.cache.tensor_count = 2;
	cfg.cache.tensor_bytes[0] = cfg.cache.tensor_bytes[1] = shard / 2;
	gate_reset(0);
	kvs_store_test_register_hook = gate_hook;
	rc = st_open(&cfg, &s);
	if (rc.code == KVS_TEST_PASS.code)
		rc = staged_pieces_run(s, shard);
	gate_allow(UINT32_MAX);
	kvs_store_close(s);
	kvs_store_test_register_hook = NULL;
	return rc;
}

static kvs_test_rc register_fails_run(struct kvs_store *s, struct kvs_store_config *cfg,
				      struct st_task *t)
{
	struct kvs_store_stats a, b;
	struct kvs_store *w = NULL;
	uint32_t beyond;

	KVS_CHECK_ERR(kvs_store_ready(s, 30 * ST_SEC), -ENOMEM);
	KVS_TRY(st_load(s, t, 10000, 0));
	KVS_TRY(count_beyond(s, t, 3 * CHUNK, &beyond));
	KVS_CHECK(beyond > 0 && beyond < t->n);
	KVS_TRY(stats_of(s, &a));
	KVS_TRY(st_load(s, t, 10000, 0));
	KVS_TRY(stats_of(s, &b));
	KVS_CHECK_EQ(b.registered_bytes, 3 * CHUNK);
	KVS_CHECK_EQ(b.ready, 0);
	KVS_CHECK_EQ(b.staged_shards - a.staged_shards, beyond);
	KVS_CHECK_ERR(kvs_store_ready(NULL, 0), -EINVAL);
	cfg->cache.device_id = -1;
	KVS_TRY(st_open(cfg, &w));
	int rw = kvs_store_ready(w, 0);
	kvs_store_close(w);
	KVS_CHECK_ERR(rw, -EOPNOTSUPP);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_register_fails(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char uid[64];
	kvs_test_rc rc;

	KVS_TRY(blocks_task(&t, 8, 0, 96));
	reg_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "regfail"), 0);
	gate_reset(UINT32_MAX);
	gate.fail_at = 3; /* chunks 0..2 in, chunk 3 refused */
	kvs_store_test_register_hook = gate_hook;
	st_log_quiet = 1; /* the refusal is logged as an error */
	rc = st_open(&cfg, &s);
	if (rc.code == KVS_TEST_PASS.code)
		rc = register_fails_run(s, &cfg, &t);
	kvs_store_close(s);
	st_log_quiet = 0;
	kvs_store_test_register_hook = NULL;
	st_task_free(&t);
	return rc;
}

/* Sample the stats until ready: everything only grows, in whole chunks. */
static kvs_test_rc watch_progress(struct kvs_store *s, uint64_t chunk, uint32_t *samples)
{
	struct kvs_store_stats prev, cur;
	int r;

	memset(&prev, 0, sizeof(prev));
	*samples = 0;
	do {
		r = kvs_store_ready(s, 2 * ST_MS);
		KVS_CHECK_OK(r);
		KVS_TRY(stats_of(s, &cur));
		KVS_CHECK(cur.registered_bytes >= prev.registered_bytes);
		KVS_CHECK(cur.register_ns >= prev.register_ns);
		KVS_CHECK(cur.registered_bytes <= cur.register_total_bytes);
		KVS_CHECK_EQ(cur.registered_bytes % chunk, 0);
		KVS_CHECK_EQ(cur.ready, cur.registered_bytes == cur.register_total_bytes);
		prev = cur;
		++*samples;
	} while (r == 0 && *samples < 100000);
	KVS_CHECK_EQ(r, 1);
	KVS_CHECK_EQ(cur.registered_bytes, cur.register_total_bytes);
	KVS_CHECK(cur.register_ms_per_gib > 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_order_progress(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	uint32_t samples = 0, n;
	char uid[64];
	kvs_test_rc rc;

	KVS_TRY(blocks_task(&t, 3, 0, 8));
	reg_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "order"), 0);
	cfg.cache.numa_node = 1;            /* its segment is the second */
	cfg.register_delay_ns = 2 * ST_MS;  /* 16 chunks of 2 ms */
	cfg.copy_engine = KVS_COPY_ENGINE_HOST;
	kvs_numa_test_node_count = 2;       /* two data segments of 8 MiB */
	gate_reset(UINT32_MAX);             /* record, never hold */
	kvs_store_test_register_hook = gate_hook;
	rc = st_open(&cfg, &s);
	kvs_numa_test_node_count = 0;
	if (rc.code == KVS_TEST_PASS.code)
		rc = st_load(s, &t, 10000, 0); /* served while registering */
	if (rc.code == KVS_TEST_PASS.code)
		rc = watch_progress(s, CHUNK, &samples);
	kvs_store_close(s);
	kvs_store_test_register_hook = NULL;
	st_task_free(&t);
	KVS_TRY(rc);
	printf("  %u samples of the stats while registering\n", samples);
	pthread_mutex_lock(&gate.mu);
	n = gate.entered;
	pthread_mutex_unlock(&gate.mu);
	KVS_CHECK_EQ(n, 16);
	for (uint32_t i = 0; i < n; i++) {
		KVS_CHECK_EQ(gate.seg[i], i < 8 ? 1 : 0);        /* the rank's node's first */
		KVS_CHECK_EQ(gate.off[i], (uint64_t)(i % 8) * CHUNK); /* each from its start */
	}
	return KVS_TEST_PASS;
}

static bool segs_gone(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	if (access(path, F_OK) == 0)
		return false;
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", uid);
	return access(path, F_OK) != 0;
}

static kvs_test_rc test_close_mid_register(void)
{
	struct kvs_store_config cfg;
	struct kvs_store_stats st;
	struct kvs_store *s = NULL;
	struct st_task t;
	char uid[64];
	kvs_test_rc rc;

	KVS_TRY(blocks_task(&t, 4, 0, 8));
	reg_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "closemid"), 0);
	cfg.register_delay_ns = 50 * ST_MS; /* 16 chunks: 0.8 s in all */
	rc = st_open(&cfg, &s);
	if (rc.code == KVS_TEST_PASS.code)
		rc = st_load(s, &t, 10000, 0);
	if (rc.code == KVS_TEST_PASS.code)
		rc = stats_of(s, &st);
	kvs_store_close(s); /* mid-registration: after the chunk in flight */
	st_task_free(&t);
	KVS_TRY(rc);
	printf("  closed with %llu of %llu bytes registered\n",
	       (unsigned long long)st.registered_bytes, (unsigned long long)st.register_total_bytes);
	KVS_CHECK(segs_gone(uid));
	return KVS_TEST_PASS;
}

/* --child victim <uid> <fd>: the rank that dies (exec'd: its segments at other
 * addresses).  Opens with a slow registration, loads, says so on fd, waits. */
static kvs_test_rc child_victim(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char one = 1;
	int fd;

	KVS_CHECK_EQ(argc, 2);
	fd = atoi(argv[1]);
	reg_cfg(&cfg, argv[0], 1);
	cfg.register_delay_ns = 200 * ST_MS; /* 16 chunks: 3.2 s, killed long before */
	KVS_TRY(blocks_task(&t, 5, 0, 8));
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_load(s, &t, 10000, 0));
	KVS_CHECK_EQ(write(fd, &one, 1), 1);
	kvs_store_ready(s, 60 * ST_SEC); /* killed in here */
	KVS_FAILF("the victim was not killed");
}

/* Bytes of this process's mappings of files whose path contains name that are
 * in its page tables (/proc/self/smaps: Rss, plus the hugetlb fields, which
 * Rss leaves out). */
static uint64_t mapped_bytes(const char *name)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512], field[64];
	unsigned long long kib;
	bool ours = false;
	uint64_t sum = 0;

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%63s %llu kB", field, &kib) == 2 &&
		    field[strlen(field) - 1] == ':') {
			if (ours && (!strcmp(field, "Rss:") || !strcmp(field, "Shared_Hugetlb:") ||
				     !strcmp(field, "Private_Hugetlb:")))
				sum += (uint64_t)kib * KIB;
			continue;
		}
		ours = strstr(line, name) != NULL; /* a mapping's first line */
	}
	if (f)
		fclose(f);
	return sum;
}

/* --child attacher <uid> <fd>: a rank on the cache the test made; once ready,
 * writes how much of the data plane its page tables map to fd. */
static kvs_test_rc child_attacher(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char name[128];
	uint64_t mapped;
	int fd;

	KVS_CHECK_EQ(argc, 2);
	fd = atoi(argv[1]);
	reg_cfg(&cfg, argv[0], 1);
	KVS_TRY(st_open(&cfg, &s));
	KVS_CHECK_EQ(kvs_store_ready(s, 30 * ST_SEC), 1);
	snprintf(name, sizeof(name), "kvshare.%s.data.", argv[0]);
	mapped = mapped_bytes(name);
	kvs_store_close(s);
	KVS_CHECK_EQ(write(fd, &mapped, sizeof(mapped)), (ssize_t)sizeof(mapped));
	return KVS_TEST_PASS;
}

static kvs_test_rc attacher_run(struct kvs_store *s, const char *uid)
{
	uint64_t mapped = 0;
	bool got;
	int rfd;
	pid_t pid;

	(void)s; /* the cache's creator: open while the attacher runs */
	pid = kvs_test_spawn_piped("attacher", uid, &rfd);
	KVS_CHECK(pid > 0);
	got = kvs_test_read_within(rfd, &mapped, sizeof(mapped), 30000);
	close(rfd);
	KVS_CHECK_EQ(kvs_test_reap(pid, 30000), 0);
	KVS_CHECK(got);
	printf("  the attacher maps %llu of the %llu bytes of slots\n",
	       (unsigned long long)mapped, (unsigned long long)(SLOTS * SHARD));
	KVS_CHECK(mapped >= SLOTS * SHARD);
	return KVS_TEST_PASS;
}

static kvs_test_rc killed_run(struct kvs_store *s, const char *uid)
{
	struct kvs_store_stats node;
	struct st_task t;
	char got = 0;
	bool ready;
	int rfd, rc;
	pid_t pid;

	KVS_CHECK_EQ(kvs_store_ready(s, 30 * ST_SEC), 1);
	pid = kvs_test_spawn_piped("victim", uid, &rfd);
	KVS_CHECK(pid > 0);
	ready = kvs_test_read_within(rfd, &got, 1, 30000);
	close(rfd);
	kill(pid, SIGKILL);
	rc = kvs_test_reap(pid, 30000);
	KVS_CHECK(ready);
	KVS_CHECK_EQ(rc, 128 + SIGKILL);
	/* The peer was mid-registration: nothing of it is ours to clean. */
	KVS_TRY(blocks_task(&t, 5, 0, 16));
	kvs_test_rc lr = st_load(s, &t, 10000, 0);
	st_task_free(&t);
	KVS_TRY(lr);
	KVS_TRY(st_stats(s, KVS_STATS_NODE, &node));
	KVS_CHECK_EQ(node.ready, 1); /* the dead rank is not waited for */
	KVS_CHECK(node.registered_bytes < node.register_total_bytes); /* it had not finished */
	KVS_CHECK_EQ(kvs_store_ready(s, 0), 1);
	KVS_TRY(st_cache_clean(s, true));
	return KVS_TEST_PASS;
}

/* run(store, uid) beside an exec'd peer on a fresh cache this process made;
 * its segments gone after the close. */
static kvs_test_rc with_peer(const char *tag, kvs_test_rc (*run)(struct kvs_store *, const char *))
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char uid[64];
	kvs_test_rc rc;

	reg_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), tag), 0);
	KVS_TRY(st_open(&cfg, &s));
	rc = run(s, uid);
	kvs_store_close(s);
	KVS_TRY(rc);
	KVS_CHECK(segs_gone(uid));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_rank_killed(void)
{
	return with_peer("killed", killed_run);
}

static kvs_test_rc test_attacher_mapped(void)
{
	return with_peer("mapped", attacher_run);
}

static const struct kvs_test_case cases[] = {
	{ "staged_then_direct", test_staged_then_direct },
	{ "staged_pieces", test_staged_pieces },
	{ "register_fails", test_register_fails },
	{ "order_progress", test_order_progress },
	{ "close_mid_register", test_close_mid_register },
	{ "rank_killed", test_rank_killed },
	{ "attacher_mapped", test_attacher_mapped },
};

static const struct kvs_test_child children[] = {
	{ "victim", child_victim },
	{ "attacher", child_attacher },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
