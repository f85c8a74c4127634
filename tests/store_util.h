/*
 * tests/store_util.h — helpers shared by the store_* tests: a small store config
 * (host copy engine, no hugetlb, a log that keeps its last line), posix roots
 * under /tmp, block ids per test, task buffers (shards x tensors, whole tensors
 * or head slices) filled with and checked against the stored content, waits
 * with deadlines, pipe barriers for multi-process cases, stats.
 *
 * Content.  The bytes a test stores for (block, shard) are kvs_pattern_fill()'s
 * (common/pattern.h): the latency backend serves exactly those bytes, and dumps
 * write them from their tensors, so every load of every backend is checked
 * against the same function of (block id, shard, byte offset in the shard).
 * Tensor t of a shard holds the shard's bytes [sum of tensor sizes before t,
 * + its size); a head slice (offset, len) of tensor t is those bytes from
 * offset.
 */
#ifndef KVS_TESTS_STORE_UTIL_H
#define KVS_TESTS_STORE_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

#include "common/pattern.h"
#include "harness.h"

#define ST_MS 1000000ull
#define ST_SEC 1000000000ull

static char st_last_log[512];
static int st_log_quiet;
/* The library logs from any of its threads (the store's registration thread
 * too, while the test thread opens another store): st_last_log is written under
 * this lock.  Failure messages read it unlocked, racily: they only matter once a
 * case has failed. */
static pthread_mutex_t st_log_mu = PTHREAD_MUTEX_INITIALIZER;

static inline void st_log(void *arg, int level, const char *msg)
{
	(void)arg;
	pthread_mutex_lock(&st_log_mu);
	snprintf(st_last_log, sizeof(st_last_log), "%s", msg);
	pthread_mutex_unlock(&st_log_mu);
	if (!st_log_quiet && level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}

/* Block n of the test tagged tag (tags keep tests sharing a root apart). */
static inline struct kvs_block_id st_block(uint32_t tag, uint64_t n)
{
	struct kvs_block_id b;
	uint64_t lo = kvs_mix64(((uint64_t)tag << 40) ^ n ^ 0x5707e0000ull);
	uint64_t hi = kvs_mix64(lo ^ tag);

	memcpy(b.bytes, &lo, 8);
	memcpy(b.bytes + 8, &hi, 8);
	return b;
}

/*
 * A rank's store config: unique_id uid, device_id device, shards of shard_bytes,
 * slots slots, spb shards per block, one tensor per shard, backend none, host
 * copy engine, /dev/shm data plane, durable dumps.  The caller changes the rest.
 */
static inline void st_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device,
			  uint64_t shard_bytes, uint64_t slots, uint32_t spb)
{
	size_t n = strnlen(uid, sizeof(cfg->cache.unique_id) - 1);

	kvs_store_config_init(cfg);
	memcpy(cfg->cache.unique_id, uid, n);
	cfg->cache.unique_id[n] = '\0';
	cfg->cache.device_id = device;
	cfg->cache.slot_bytes = shard_bytes;
	cfg->cache.slot_count = slots;
	cfg->cache.shards_per_block = spb;
	cfg->cache.hugetlb = KVS_HUGETLB_OFF; /* keep the machine's pool for the hugetlb tests */
	cfg->cache.attach_timeout_ns = 20 * ST_SEC;
	cfg->copy_engine = KVS_COPY_ENGINE_HOST;
	cfg->backend.kind = KVS_BACKEND_NONE;
	cfg->log = st_log;
}

/* Backend: posix under root (no fsync: /tmp, and the tests never crash the
 * machine), latency (content = kvs_pattern_fill). */
static inline void st_posix(struct kvs_store_config *cfg, const char *root)
{
	cfg->backend.kind = KVS_BACKEND_POSIX;
	cfg->backend.nroots = 1;
	cfg->backend.roots[0] = root;
	cfg->backend.flags |= KVS_BACKEND_F_NO_FSYNC;
}

static inline void st_latency(struct kvs_store_config *cfg, uint64_t latency_ns)
{
	cfg->backend.kind = KVS_BACKEND_LATENCY;
	cfg->backend.latency_ns = latency_ns;
}

/* Open a store, failing with the code and the last log line. */
static inline kvs_test_rc st_open(const struct kvs_store_config *cfg, struct kvs_store **s)
{
	int rc;

	pthread_mutex_lock(&st_log_mu);
	st_last_log[0] = '\0';
	pthread_mutex_unlock(&st_log_mu);
	rc = kvs_store_open(cfg, s);
	if (rc)
		KVS_FAILF("kvs_store_open(%s, device %d): %d (%s); log: %s", cfg->cache.unique_id,
			  cfg->cache.device_id, rc, kvs_strerror(rc), st_last_log);
	return KVS_TEST_PASS;
}

/* Apply a key=value string, failing with the parser's message. */
static inline kvs_test_rc st_parse(struct kvs_store_config *cfg, const char *kv)
{
	char err[256] = "";
	int rc = kvs_store_config_parse(cfg, kv, err, sizeof(err));

	if (rc)
		KVS_FAILF("kvs_store_config_parse(\"%s\"): %d (%s): %s", kv, rc, kvs_strerror(rc), err);
	return KVS_TEST_PASS;
}

/* ---- posix roots ---- */

static inline int st_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static inline void st_root_fini(char *root)
{
	if (root[0])
		nftw(root, st_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	root[0] = '\0';
}

/* A fresh directory /tmp/kvs-<unique id of tag> into root (len >= 128). */
static inline kvs_test_rc st_root_init(char *root, size_t len, const char *tag)
{
	char id[96];

	snprintf(root, len, "/tmp/kvs-%s", kvs_test_unique_id(id, sizeof(id), tag));
	nftw(root, st_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (mkdir(root, 0700))
		KVS_FAILF("mkdir %s: %s", root, strerror(errno));
	return KVS_TEST_PASS;
}

/* ---- task buffers ---- */

/*
 * n shards of tcount tensors.  Stored tensor t has tsz[t] bytes; this rank
 * copies the slice [off[t], off[t] + len[t]) of it (whole: 0, tsz[t]) into its
 * own buffer.  shards[i].tensors = tensors + i * tcount; mem holds every
 * buffer, per_shard bytes per shard.
 */
struct st_task {
	uint32_t n, tcount;
	uint64_t tsz[KVS_MAX_TENSORS];
	uint64_t base[KVS_MAX_TENSORS]; /* tensor t's first byte in the shard */
	uint64_t off[KVS_MAX_TENSORS], len[KVS_MAX_TENSORS];
	uint64_t bufoff[KVS_MAX_TENSORS]; /* tensor t's buffer within a shard's part of mem */
	uint64_t per_shard;
	struct kvs_store_shard *shards;
	struct kvs_store_tensor *tensors;
	unsigned char *mem;
};

static inline void st_task_free(struct st_task *t)
{
	free(t->shards);
	free(t->tensors);
	free(t->mem);
	memset(t, 0, sizeof(*t));
}

#define ST_POISON 0xdb

/* Set up t (slice_off / slice_len NULL: whole tensors; a slice_len of 0 means
 * to the end, as in struct kvs_store_tensor, and is what the tensor entry gets). */
static inline kvs_test_rc st_task_init(struct st_task *t, uint32_t n, uint32_t tcount,
				       const uint64_t *tsz, const uint64_t *slice_off,
				       const uint64_t *slice_len)
{
	uint64_t b = 0;

	memset(t, 0, sizeof(*t));
	KVS_CHECK(n > 0 && tcount > 0 && tcount <= KVS_MAX_TENSORS);
	t->n = n;
	t->tcount = tcount;
	for (uint32_t k = 0; k < tcount; k++) {
		t->tsz[k] = tsz[k];
		t->base[k] = b;
		b += tsz[k];
		t->off[k] = slice_off ? slice_off[k] : 0;
		t->len[k] = slice_len ? slice_len[k] : 0;
		uint64_t copy = t->len[k] ? t->len[k]
					  : (t->off[k] < tsz[k] ? tsz[k] - t->off[k] : 0);
		t->bufoff[k] = t->per_shard;
		t->per_shard += copy ? copy : 1; /* never a zero-size buffer */
	}
	t->shards = calloc(n, sizeof(*t->shards));
	t->tensors = calloc((size_t)n * tcount, sizeof(*t->tensors));
	t->mem = malloc((size_t)n * t->per_shard);
	if (!t->shards || !t->tensors || !t->mem) {
		st_task_free(t);
		KVS_FAILF("out of memory (%u shards x %llu bytes)", n,
			  (unsigned long long)t->per_shard);
	}
	memset(t->mem, ST_POISON, (size_t)n * t->per_shard);
	for (uint32_t i = 0; i < n; i++) {
		t->shards[i].tensor_count = tcount;
		t->shards[i].tensors = t->tensors + (size_t)i * tcount;
		for (uint32_t k = 0; k < tcount; k++) {
			struct kvs_store_tensor *e = &t->tensors[(size_t)i * tcount + k];

			e->addr = (uint64_t)(uintptr_t)(t->mem + (size_t)i * t->per_shard + t->bufoff[k]);
			e->offset = t->off[k];
			e->len = t->len[k];
		}
	}
	return KVS_TEST_PASS;
}

/* Whole tensors of equal size: tcount x (shard_bytes / tcount). */
static inline kvs_test_rc st_task_whole(struct st_task *t, uint32_t n, uint32_t tcount,
					uint64_t shard_bytes)
{
	uint64_t tsz[KVS_MAX_TENSORS];

	for (uint32_t k = 0; k < tcount && k < KVS_MAX_TENSORS; k++)
		tsz[k] = shard_bytes / tcount;
	return st_task_init(t, n, tcount, tsz, NULL, NULL);
}

static inline void st_task_set(struct st_task *t, uint32_t i, const struct kvs_block_id *block,
			       uint32_t shard)
{
	t->shards[i].block = *block;
	t->shards[i].shard = shard;
}

static inline uint64_t st_copy_len(const struct st_task *t, uint32_t k)
{
	return t->len[k] ? t->len[k] : t->tsz[k] - t->off[k];
}

static inline unsigned char *st_buf(const struct st_task *t, uint32_t i, uint32_t k)
{
	return t->mem + (size_t)i * t->per_shard + t->bufoff[k];
}

/* Fill every tensor buffer with the stored content (the source of a dump). */
static inline void st_task_fill(struct st_task *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		for (uint32_t k = 0; k < t->tcount; k++)
			kvs_pattern_fill(&t->shards[i].block, t->shards[i].shard,
					 t->base[k] + t->off[k], st_buf(t, i, k), st_copy_len(t, k));
}

/* Poison every buffer (before a load). */
static inline void st_task_poison(struct st_task *t)
{
	memset(t->mem, ST_POISON, (size_t)t->n * t->per_shard);
}

/* Is shard i's every buffer the stored content?  Names the first bad byte. */
static inline kvs_test_rc st_task_verify_one(const struct st_task *t, uint32_t i)
{
	unsigned char want[4096];

	for (uint32_t k = 0; k < t->tcount; k++) {
		uint64_t len = st_copy_len(t, k);
		const unsigned char *got = st_buf(t, i, k);

		for (uint64_t p = 0; p < len; p += sizeof(want)) {
			uint64_t c = len - p < sizeof(want) ? len - p : sizeof(want);

			kvs_pattern_fill(&t->shards[i].block, t->shards[i].shard,
					 t->base[k] + t->off[k] + p, want, c);
			if (memcmp(got + p, want, c) == 0)
				continue;
			for (uint64_t q = 0; q < c; q++)
				if (got[p + q] != want[q])
					KVS_FAILF("task shard %u (shard %u of block %02x%02x..) tensor %u "
						  "byte %llu (stored byte %llu): got 0x%02x, want 0x%02x",
						  i, t->shards[i].shard, t->shards[i].block.bytes[0],
						  t->shards[i].block.bytes[1], k, (unsigned long long)(p + q),
						  (unsigned long long)(t->base[k] + t->off[k] + p + q),
						  got[p + q], want[q]);
		}
	}
	return KVS_TEST_PASS;
}

static inline kvs_test_rc st_task_verify(const struct st_task *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		KVS_TRY(st_task_verify_one(t, i));
	return KVS_TEST_PASS;
}

/* ---- tasks ---- */

/* Wait for task up to ms; its result (1 = still running at the deadline). */
static inline int st_wait(struct kvs_store *s, uint64_t task, uint64_t ms)
{
	return kvs_store_wait(s, task, ms * ST_MS);
}

/* Wait for task up to ms and expect want (0 or an error). */
static inline kvs_test_rc st_wait_expect(struct kvs_store *s, uint64_t task, uint64_t ms, int want,
					 const char *what)
{
	int rc = st_wait(s, task, ms);

	if (rc == 1)
		KVS_FAILF("%s: task %llu still running after %llu ms", what, (unsigned long long)task,
			  (unsigned long long)ms);
	if (rc != want)
		KVS_FAILF("%s: task %llu: got %d (%s), want %d (%s); log: %s", what,
			  (unsigned long long)task, rc, kvs_strerror(rc), want, kvs_strerror(want),
			  st_last_log);
	return KVS_TEST_PASS;
}

/* Load / dump t and wait up to ms for want. */
static inline kvs_test_rc st_load(struct kvs_store *s, struct st_task *t, uint64_t ms, int want)
{
	uint64_t task = 0;
	int rc;

	st_task_poison(t);
	rc = kvs_store_load(s, t->shards, t->n, &task);
	if (rc)
		KVS_FAILF("kvs_store_load(%u shards): %d (%s); log: %s", t->n, rc, kvs_strerror(rc),
			  st_last_log);
	KVS_TRY(st_wait_expect(s, task, ms, want, "load"));
	if (want == 0)
		KVS_TRY(st_task_verify(t));
	return KVS_TEST_PASS;
}

static inline kvs_test_rc st_dump(struct kvs_store *s, struct st_task *t, uint64_t ms)
{
	uint64_t task = 0;
	int rc;

	st_task_fill(t);
	rc = kvs_store_dump(s, t->shards, t->n, NULL, &task);
	if (rc)
		KVS_FAILF("kvs_store_dump(%u shards): %d (%s); log: %s", t->n, rc, kvs_strerror(rc),
			  st_last_log);
	return st_wait_expect(s, task, ms, 0, "dump");
}

/* ---- stats ---- */

static inline int st_rank(struct kvs_store *s)
{
	return kvs_cache_rank(kvs_store_cache(s));
}

static inline kvs_test_rc st_stats(struct kvs_store *s, int rank, struct kvs_store_stats *st)
{
	int rc = kvs_store_stats(s, rank, st);

	if (rc)
		KVS_FAILF("kvs_store_stats(rank %d): %d (%s)", rank, rc, kvs_strerror(rc));
	return KVS_TEST_PASS;
}

static inline void st_print(const char *who, const struct kvs_store_stats *st)
{
	printf("  %s: load %llu dump %llu prefetch %llu failed %llu timedout %llu | loaded %llu "
	       "dumped %llu dedup %llu hits %llu owner_reads %llu read_errors %llu writes %llu "
	       "write_errors %llu prealloc %llu/%llu\n",
	       who, (unsigned long long)st->tasks_load, (unsigned long long)st->tasks_dump,
	       (unsigned long long)st->tasks_prefetch, (unsigned long long)st->tasks_failed,
	       (unsigned long long)st->tasks_timedout, (unsigned long long)st->shards_loaded,
	       (unsigned long long)st->shards_dumped, (unsigned long long)st->dump_dedup,
	       (unsigned long long)st->load_hits, (unsigned long long)st->owner_reads,
	       (unsigned long long)st->read_errors, (unsigned long long)st->backend_writes,
	       (unsigned long long)st->write_errors, (unsigned long long)st->prealloc_hits,
	       (unsigned long long)st->prealloc);
}

/* Every get the node made was a load's hit, join or miss, or a dump's get:
 * their sum over the node (departed ranks included) is exactly gets, the number
 * the case made, of which dumps were dump_gets. */
static inline kvs_test_rc st_gets_add_up(struct kvs_store *w, uint64_t gets, uint64_t dump_gets)
{
	struct kvs_cache_stats cs;

	KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
	printf("  node gets: %llu hits + %llu joins + %llu misses + %llu of dumps (want %llu, "
	       "%llu of dumps)\n", (unsigned long long)cs.hits, (unsigned long long)cs.joins,
	       (unsigned long long)cs.misses, (unsigned long long)cs.dump_gets,
	       (unsigned long long)gets, (unsigned long long)dump_gets);
	KVS_CHECK_EQ(cs.dump_gets, dump_gets);
	KVS_CHECK_EQ(cs.hits + cs.joins + cs.misses + cs.dump_gets, gets);
	return KVS_TEST_PASS;
}

/* The slot census of s's cache: the cache's invariants hold, nothing pinned
 * and, with no_loading, no slot LOADING (prealloc keys LOADING slots of shards
 * nobody asked for: only for caches of one shard per block or prealloc off). */
static inline kvs_test_rc st_cache_clean(struct kvs_store *s, bool no_loading)
{
	struct kvs_cache *c = kvs_store_cache(s);
	struct kvs_cache_stats cs;
	int rc;

	KVS_CHECK(c != NULL);
	rc = kvs_cache_check(c);
	if (rc)
		KVS_FAILF("kvs_cache_check: %d (%s); log: %s", rc, kvs_strerror(rc), st_last_log);
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &cs));
	/* Pins are checked for leaks here, within a bound (releasing right after a
	 * task reports is store_load's release_before_done case, not this one's). */
	uint64_t deadline = kvs_deadline_after(2 * ST_SEC);
	while (cs.slots_pinned && kvs_now_ns() < deadline) {
		usleep(1000);
		KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &cs));
	}
	KVS_CHECK_EQ(cs.slots_pinned, 0);
	if (no_loading)
		KVS_CHECK_EQ(cs.slots_loading, 0);
	return KVS_TEST_PASS;
}

/* The name of one kvshare thread still alive in this process (the library names
 * every thread it starts "kvs-..."), or "" when none is. */
static inline const char *st_library_thread(char name[static 16])
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	name[0] = 0;
	while (d && !name[0] && (e = readdir(d))) {
		char path[300];
		int fd;

		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		fd = e->d_name[0] != '.' ? open(path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd < 0)
			continue;
		ssize_t n = read(fd, name, 15);

		close(fd);
		name[n > 0 ? n : 0] = 0;
		name[strcspn(name, "\n")] = 0;
		if (strncmp(name, "kvs-", 4) != 0)
			name[0] = 0;
	}
	if (d)
		closedir(d);
	return name;
}

/* Within ms, no kvshare thread is left in this process.  A store closed with a
 * transfer still in flight is torn down by its last thread when that transfer
 * ends; a case that forks next must not inherit those threads (a fork()ed child
 * of a multi-threaded process cannot start threads under TSan). */
static inline kvs_test_rc st_library_threads_gone(int ms)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)ms * ST_MS);
	char name[16];

	while (st_library_thread(name)[0]) {
		if (kvs_now_ns() >= deadline)
			KVS_FAILF("thread %s still alive %d ms after its store closed", name, ms);
		usleep(10 * 1000);
	}
	return KVS_TEST_PASS;
}

/* Close watcher w, the one that kept cache uid (persistent), and remove the
 * cache. */
static inline kvs_test_rc st_close_kept(struct kvs_store *w, const char *uid)
{
	struct kvs_cache_config cc;

	kvs_store_close(w);
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%.64s", uid);
	KVS_CHECK_OK(kvs_cache_remove(&cc));
	return KVS_TEST_PASS;
}

/* The cache "uid" has no segment left in /dev/shm. */
static inline kvs_test_rc st_no_segments(const char *uid)
{
	char path[160];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	if (access(path, F_OK) == 0)
		KVS_FAILF("%s is left: the cache stayed (stale) after its only rank left", path);
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", uid);
	if (access(path, F_OK) == 0)
		KVS_FAILF("%s is left after its only rank left", path);
	return KVS_TEST_PASS;
}

/* The cache uid, no rank attached, was kept for the dirty slots it holds (dumped,
 * not in the backend: core/segment.c, the removal guard): a removal refuses it
 * (-ENOTEMPTY) until asked to discard them, which removes it. */
static inline kvs_test_rc st_remove_dirty(const char *uid, uint64_t dirty)
{
	struct kvs_cache_config cc;
	struct kvs_cache_info in;

	KVS_CHECK_OK(kvs_cache_inspect(uid, &in));
	if (in.slots_dirty != dirty)
		KVS_FAILF("cache %s kept with %llu dirty slots, want %llu", uid,
			  (unsigned long long)in.slots_dirty, (unsigned long long)dirty);
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%.64s", uid);
	KVS_CHECK_ERR(kvs_cache_remove(&cc), -ENOTEMPTY);
	cc.flags |= KVS_CACHE_DISCARD_DIRTY;
	KVS_CHECK_OK(kvs_cache_remove(&cc));
	return st_no_segments(uid);
}

/* ---- pipes between a parent and its children ---- */

/* Read exactly n bytes from fd within timeout_ms. */
static inline kvs_test_rc st_read_full(int fd, void *buf, size_t n, int timeout_ms)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)timeout_ms * ST_MS);
	size_t got = 0;

	while (got < n) {
		uint64_t now = kvs_now_ns();
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (now >= deadline)
			KVS_FAILF("pipe %d: %zu of %zu bytes within %d ms", fd, got, n, timeout_ms);
		int r = poll(&p, 1, (int)((deadline - now) / ST_MS) + 1);
		if (r < 0 && errno != EINTR)
			KVS_FAILF("poll: %s", strerror(errno));
		if (r <= 0)
			continue;
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k == 0)
			KVS_FAILF("pipe %d: EOF after %zu of %zu bytes", fd, got, n);
		if (k < 0 && errno != EINTR && errno != EAGAIN)
			KVS_FAILF("read: %s", strerror(errno));
		if (k > 0)
			got += (size_t)k;
	}
	return KVS_TEST_PASS;
}

static inline kvs_test_rc st_write_full(int fd, const void *buf, size_t n)
{
	size_t put = 0;

	while (put < n) {
		ssize_t k = write(fd, (const char *)buf + put, n - put);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			KVS_FAILF("write to pipe %d: %s", fd, strerror(errno));
		put += (size_t)k;
	}
	return KVS_TEST_PASS;
}

#endif
