/*
 * tests/hostile_inputs.c — careless and hostile surroundings: other uids, a
 * group-shared cache, a low RLIMIT_MEMLOCK, a full or read-only backend
 * filesystem.  Each case checks its own clear error (the code and the log line
 * naming the cause) and that nothing changed on disk (a digest of every file
 * involved: name, type, mode, owner, size, mtime and content, taken before and
 * after; directories are not compared: a failed dump may leave the empty
 * fan-out directories it made, which later dumps reuse).
 *
 *   other_uid_segment  a cache made (persist) by uid 12345: a rank open, a
 *                      watcher open and kvs_cache_remove by root are -EACCES,
 *                      the log names uid 12345; the files are untouched
 *   other_uid_watcher  a child as uid 12345 attaching as a watcher (and as a
 *                      rank) to root's 0600 cache: -EACCES naming uid 0;
 *                      kvs_cache_inspect -EACCES; root's cache untouched and clean
 *   group_cache        a 0660 cache of group 4242: a child of uid 12345 in the
 *                      group attaches and reads a slot root filled; a child of
 *                      uid 12346 outside it is refused, as a rank and as a
 *                      watcher: -EACCES naming the owner and the group; a new
 *                      cache of that group it cannot create (-EPERM: it cannot
 *                      make a file of that group; the log says so); nothing
 *                      changed by the refusals
 *   memlock            (kernel variant) a non-root child (no CAP_IPC_LOCK) with
 *                      RLIMIT_MEMLOCK 256 KiB: io_uring fixed buffers refused
 *                      (-ENOMEM, "raise RLIMIT_MEMLOCK"), a store works without
 *                      them; with 0: the ring itself is refused (io_engine=uring
 *                      -ENOMEM naming the limit; auto falls back to the pool)
 *   full_fs            the posix root on a 320 KiB tmpfs holding one 256 KiB
 *                      block: a second dump fails -ENOSPC, no temp file left,
 *                      the first block reads back, the cache checks clean
 *   readonly_fs        the root remounted read-only: a dump fails -EROFS,
 *                      nothing changed, the stored block still loads
 *   not_a_file         a FIFO and a directory at blocks' paths: each load is
 *                      -ENOENT in bounded time (a FIFO's blocking open would
 *                      hang the dispatcher), the log names what is there,
 *                      lookup misses, nothing changed (fuzz/fuzz_block.c
 *                      explores the rest; both engines here)
 *
 * The uid and mount cases need root (CAP_SETUID, CAP_SYS_ADMIN): without it
 * they skip (77) and say so.  No GPU here: CUDA host registration under a low
 * RLIMIT_MEMLOCK is not exercised (the copy engine's kvs_copy_register error is
 * logged by the store as "registering data segment ... with the cuda engine").
 */
#include <glob.h>
#include <pthread.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "store_util.h"

#define OTHER_UID 12345
#define OTHER2_UID 12346
#define SHARED_GID 4242

/* ---- a log that keeps every line (a case looks for one naming the cause) ---- */

/* The store's threads log too: the buffer is behind a mutex. */
static pthread_mutex_t hl_mu = PTHREAD_MUTEX_INITIALIZER;
static char hl_log[16384];
static size_t hl_len;

static void hl_logger(void *arg, int level, const char *msg)
{
	int n;

	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
	pthread_mutex_lock(&hl_mu);
	n = snprintf(hl_log + hl_len, sizeof(hl_log) - hl_len, "%s\n", msg);
	if (n > 0 && (size_t)n < sizeof(hl_log) - hl_len)
		hl_len += (size_t)n;
	pthread_mutex_unlock(&hl_mu);
}

static void hl_log_clear(void)
{
	pthread_mutex_lock(&hl_mu);
	hl_len = 0;
	hl_log[0] = '\0';
	pthread_mutex_unlock(&hl_mu);
}

static kvs_test_rc hl_log_has(const char *what)
{
	static char copy[sizeof(hl_log)];
	bool found;

	pthread_mutex_lock(&hl_mu);
	found = strstr(hl_log, what) != NULL;
	memcpy(copy, hl_log, sizeof(copy));
	pthread_mutex_unlock(&hl_mu);
	if (!found)
		KVS_FAILF("no log line says \"%s\"; log:\n%s", what, copy);
	return KVS_TEST_PASS;
}

/* ---- digests of files (nothing changed on disk) ---- */

static uint64_t dg;

static void dg_mix(const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		dg = (dg ^ b[i]) * 0x100000001b3ull;
}

static int dg_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	uint64_t v[6] = { st->st_mode, st->st_uid, st->st_gid, (uint64_t)st->st_size,
			  (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec };
	unsigned char buf[65536];
	ssize_t n;
	int fd;

	(void)flag, (void)ftw;
	if (S_ISDIR(st->st_mode))
		return 0; /* a fan-out directory made by a failed dump may stay (empty) */
	dg_mix(path, strlen(path) + 1);
	dg_mix(v, sizeof(v));
	if (!S_ISREG(st->st_mode))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOATIME);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		dg_mix(buf, (size_t)n);
	if (fd >= 0)
		close(fd);
	return 0;
}

/* Digest of everything matching pattern (a glob; directories walked). */
static uint64_t digest(const char *pattern)
{
	glob_t g;

	dg = 0xcbf29ce484222325ull;
	if (glob(pattern, 0, NULL, &g) == 0) {
		for (size_t i = 0; i < g.gl_pathc; i++)
			nftw(g.gl_pathv[i], dg_entry, 16, FTW_PHYS);
		globfree(&g);
	}
	return dg;
}

/* The files of cache uid: "/dev/shm/kvshare.<uid>.*". */
static const char *cache_glob(char *buf, size_t len, const char *uid)
{
	snprintf(buf, len, "/dev/shm/kvshare.%s.*", uid);
	return buf;
}

/* ---- other uids ---- */

static kvs_test_rc become(uid_t uid, gid_t gid, size_t ngroups, const gid_t *groups)
{
	if (setgroups(ngroups, groups) || setgid(gid) || setuid(uid))
		KVS_FAILF("cannot become uid %u gid %u: %s", (unsigned)uid, (unsigned)gid,
			  strerror(errno));
	return KVS_TEST_PASS;
}

static void cache_cfg(struct kvs_cache_config *cfg, const char *uid)
{
	kvs_cache_config_init(cfg);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->slot_count = 8;
	cfg->slot_bytes = 4096;
	cfg->hugetlb = KVS_HUGETLB_OFF;
	cfg->attach_timeout_ns = 10 * ST_SEC;
	cfg->log = hl_logger;
}

static kvs_test_rc put_block(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id b = st_block(77, n);
	struct kvs_slot s;
	void *p;

	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, KVS_SLOT_OWNER);
	KVS_CHECK_OK(kvs_slot_data(c, &s, &p));
	kvs_pattern_fill(&b, 0, 0, p, 4096);
	KVS_CHECK_OK(kvs_slot_publish_ready(c, &s));
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	return KVS_TEST_PASS;
}

static kvs_test_rc get_block(struct kvs_cache *c, uint64_t n)
{
	struct kvs_block_id b = st_block(77, n);
	unsigned char want[4096];
	struct kvs_slot s;
	void *p;

	kvs_pattern_fill(&b, 0, 0, want, sizeof(want));
	KVS_CHECK_OK(kvs_cache_get(c, &b, 0, 0, &s));
	KVS_CHECK_EQ(s.flags & KVS_SLOT_OWNER, 0);
	KVS_CHECK_EQ(s.state, KVS_SLOT_READY);
	KVS_CHECK_OK(kvs_slot_data(c, &s, &p));
	KVS_CHECK(memcmp(p, want, sizeof(want)) == 0);
	KVS_CHECK_OK(kvs_slot_release(c, &s));
	return KVS_TEST_PASS;
}

/* Child: as uid 12345, create cache arg persistent with one READY slot. */
static kvs_test_rc create_as_other(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;

	KVS_TRY(become(OTHER_UID, OTHER_UID, 0, NULL));
	cache_cfg(&cfg, arg);
	cfg.flags = KVS_CACHE_PERSIST;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(put_block(c, 1));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* Child: as uid 12345, remove cache arg. */
static kvs_test_rc remove_as_other(void *arg)
{
	struct kvs_cache_config cfg;

	KVS_TRY(become(OTHER_UID, OTHER_UID, 0, NULL));
	cache_cfg(&cfg, arg);
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	return KVS_TEST_PASS;
}

static kvs_test_rc run_child(kvs_test_rc (*fn)(void *), void *arg)
{
	pid_t pid = kvs_test_fork(fn, arg);
	int rc;

	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, 30000);
	if (rc != 0)
		KVS_FAILF("child failed: status %d", rc);
	return KVS_TEST_PASS;
}

static kvs_test_rc expect_refused(struct kvs_cache_config *cfg, const char *owner)
{
	struct kvs_cache *c = NULL;

	hl_log_clear();
	KVS_CHECK_ERR(kvs_cache_open(cfg, &c), -EACCES);
	KVS_CHECK(c == NULL);
	return hl_log_has(owner);
}

static kvs_test_rc test_other_uid_segment(void)
{
	struct kvs_cache_config cfg;
	char uid[60], pat[160];
	uint64_t before;

	if (geteuid() != 0)
		KVS_SKIP("needs root to make a cache as another uid (12345)");
	kvs_test_unique_id(uid, sizeof(uid), "otheruid");
	KVS_TRY(run_child(create_as_other, uid));
	before = digest(cache_glob(pat, sizeof(pat), uid));
	cache_cfg(&cfg, uid);
	KVS_TRY(expect_refused(&cfg, "belongs to uid 12345"));
	cfg.device_id = -1;
	cfg.flags = KVS_CACHE_ATTACH;
	KVS_TRY(expect_refused(&cfg, "belongs to uid 12345"));
	hl_log_clear();
	KVS_CHECK_ERR(kvs_cache_remove(&cfg), -EACCES);
	KVS_TRY(hl_log_has("belongs to uid 12345"));
	KVS_CHECK_EQ(digest(pat), before);
	KVS_TRY(run_child(remove_as_other, uid));
	KVS_CHECK_EQ(digest(pat), digest("/nonexistent")); /* nothing left */
	return KVS_TEST_PASS;
}

/* Child: as uid 12345, try cache arg (root's, 0600) as a watcher and a rank. */
static kvs_test_rc watch_as_other(void *arg)
{
	struct kvs_cache_config cfg;
	struct kvs_cache_info info;

	KVS_TRY(become(OTHER_UID, OTHER_UID, 0, NULL));
	cache_cfg(&cfg, arg);
	cfg.device_id = -1;
	cfg.flags = KVS_CACHE_ATTACH;
	KVS_TRY(expect_refused(&cfg, "belongs to uid 0 (group 0, mode 0600), not to uid 12345"));
	cfg.device_id = 0;
	cfg.flags = 0;
	KVS_TRY(expect_refused(&cfg, "belongs to uid 0"));
	KVS_CHECK_ERR(kvs_cache_inspect(arg, &info), -EACCES);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_other_uid_watcher(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[60], pat[160];
	uint64_t before;

	if (geteuid() != 0)
		KVS_SKIP("needs root to attach as another uid (12345)");
	cache_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "watchuid"));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(put_block(c, 1));
	before = digest(cache_glob(pat, sizeof(pat), uid));
	KVS_TRY(run_child(watch_as_other, uid));
	KVS_CHECK_EQ(digest(pat), before);
	KVS_CHECK_OK(kvs_cache_check(c));
	KVS_TRY(get_block(c, 1));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* Child: as uid 12345 in group 4242, attach the group's cache and read. */
static kvs_test_rc attach_as_member(void *arg)
{
	static const gid_t groups[] = { SHARED_GID };
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;

	KVS_TRY(become(OTHER_UID, OTHER_UID, 1, groups));
	cache_cfg(&cfg, arg);
	cfg.file_mode = 0660;
	cfg.gid = SHARED_GID;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(get_block(c, 1));
	KVS_TRY(put_block(c, 2));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* Child: as uid 12346, not in group 4242 (claiming it in its config). */
static kvs_test_rc attach_as_outsider(void *arg)
{
	struct kvs_cache_config cfg;

	struct kvs_cache *c = NULL;

	static const char *const refused = "belongs to uid 0 (group 4242, mode 0660), not to "
					   "uid 12346 or a member of its group";
	char other[64];

	KVS_TRY(become(OTHER2_UID, OTHER2_UID, 0, NULL));
	/* a cache that does not exist yet: it cannot make a file of a group it is
	 * not in */
	snprintf(other, sizeof(other), "%.55s.new", (const char *)arg);
	cache_cfg(&cfg, other);
	cfg.file_mode = 0660;
	cfg.gid = SHARED_GID;
	hl_log_clear();
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), -EPERM);
	KVS_TRY(hl_log_has("cannot give the control segment to group 4242: Operation not "
			   "permitted (uid not a member of it)"));
	/* the group's cache: refused as a rank and as a watcher, naming its owner */
	cache_cfg(&cfg, arg);
	cfg.file_mode = 0660;
	cfg.gid = SHARED_GID;
	KVS_TRY(expect_refused(&cfg, refused));
	cfg.device_id = -1;
	cfg.flags = KVS_CACHE_ATTACH;
	return expect_refused(&cfg, refused);
}

static kvs_test_rc test_group_cache(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[60], pat[160];
	uint64_t before;

	if (geteuid() != 0)
		KVS_SKIP("needs root to run processes of other uids and groups");
	cache_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "group"));
	cfg.file_mode = 0660;
	cfg.gid = SHARED_GID;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(put_block(c, 1));
	KVS_TRY(run_child(attach_as_member, uid));
	KVS_TRY(get_block(c, 2)); /* what the member filled */
	before = digest(cache_glob(pat, sizeof(pat), uid));
	KVS_TRY(run_child(attach_as_outsider, uid));
	KVS_CHECK_EQ(digest(pat), before);
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* ---- RLIMIT_MEMLOCK ---- */

#define MEMLOCK_SMALL (256u << 10)

static void memlock_backend_cfg(struct kvs_backend_config *bc, const char *root, uint32_t engine)
{
	kvs_backend_config_init(bc);
	bc->io_engine = engine;
	bc->nroots = 1;
	bc->roots[0] = root;
	bc->shard_bytes = 65536;
	bc->shards_per_block = 2;
	bc->queue_depth = 8;
	bc->log = hl_logger;
}

/* A store over root with io_engine engine round-trips a block (dump, then a
 * load through a fresh cache: from the backend); the log has want. */
static kvs_test_rc memlock_store(const char *root, uint32_t engine, const char *want)
{
	struct kvs_block_id blk = { .bytes = { 1, (unsigned char)engine } };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char uid[60];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "memlock"), 0, 65536, 8, 2);
	st_posix(&cfg, root);
	cfg.backend.io_engine = engine;
	cfg.log = hl_logger;
	hl_log_clear();
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(hl_log_has(want));
	KVS_TRY(st_task_whole(&t, 2, 1, 65536));
	st_task_set(&t, 0, &blk, 0);
	st_task_set(&t, 1, &blk, 1);
	KVS_TRY(st_dump(s, &t, 10000));
	kvs_store_close(s);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_load(s, &t, 10000, 0));
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

/*
 * Child: as uid 12345 (no CAP_IPC_LOCK) over root arg.  RLIMIT_MEMLOCK 256 KiB:
 * the ring fits, 1 MiB of fixed buffers does not (-ENOMEM, "raise
 * RLIMIT_MEMLOCK"); a store logs that its segments are not registered and
 * works.  RLIMIT_MEMLOCK 0: not even the ring fits: io_engine=uring is -ENOMEM
 * naming the limit, auto falls back to the pool (fallback_err -ENOMEM) and a
 * store works.
 */
static kvs_test_rc memlock_child(void *arg)
{
	const char *root = arg;
	struct rlimit small = { MEMLOCK_SMALL, MEMLOCK_SMALL }, zero = { 0, 0 };
	struct kvs_backend_config bc;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	void *buf;
	int rc;

	KVS_TRY(become(OTHER_UID, OTHER_UID, 0, NULL));
	if (setrlimit(RLIMIT_MEMLOCK, &small))
		KVS_FAILF("setrlimit(RLIMIT_MEMLOCK, 256 KiB): %s", strerror(errno));
	memlock_backend_cfg(&bc, root, KVS_IO_ENGINE_URING);
	rc = kvs_backend_open(&bc, &b);
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)
		return KVS_TEST_EXIT(77); /* io_uring refused here: the parent says so */
	KVS_CHECK_OK(rc);
	buf = aligned_alloc(4096, 1 << 20);
	KVS_CHECK(buf != NULL);
	memset(buf, 1, 1 << 20);
	hl_log_clear();
	KVS_CHECK_ERR(kvs_backend_register_buffers(b, &(struct kvs_backend_buffer){ buf, 1 << 20 }, 1),
		      -ENOMEM);
	KVS_TRY(hl_log_has("RLIMIT_MEMLOCK too low: raise it"));
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.flags & KVS_BACKEND_INFO_FIXED_BUFFERS, 0);
	kvs_backend_close(b);
	free(buf);
	KVS_TRY(memlock_store(root, KVS_IO_ENGINE_URING, "not registered with the backend"));

	if (setrlimit(RLIMIT_MEMLOCK, &zero))
		KVS_FAILF("setrlimit(RLIMIT_MEMLOCK, 0): %s", strerror(errno));
	hl_log_clear();
	KVS_CHECK_ERR(kvs_backend_open(&bc, &b), -ENOMEM);
	KVS_TRY(hl_log_has("RLIMIT_MEMLOCK too low for its rings"));
	memlock_backend_cfg(&bc, root, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&bc, &b));
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.io_engine, KVS_IO_ENGINE_POOL);
	KVS_CHECK_EQ(info.fallback_err, -ENOMEM);
	kvs_backend_close(b);
	return memlock_store(root, KVS_IO_ENGINE_AUTO, "using the thread pool");
}

static kvs_test_rc test_memlock(void)
{
	char root[128];
	int rc;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build has no io_uring (its pool registers nothing)");
	if (geteuid() != 0)
		KVS_SKIP("needs root to drop CAP_IPC_LOCK by becoming another uid");
	KVS_TRY(st_root_init(root, sizeof(root), "memlock"));
	KVS_CHECK_OK(chown(root, OTHER_UID, OTHER_UID));
	pid_t pid = kvs_test_fork(memlock_child, root);
	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, 60000);
	st_root_fini(root);
	if (rc == 77)
		KVS_SKIP("io_uring refused on this machine (seccomp or kernel.io_uring_disabled)");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/* ---- full and read-only backend filesystems ---- */

#define FS_SHARD 65536u
#define FS_SPB 4u

struct fs_case {
	char mnt[128];
	char uid[60];
	struct kvs_store_config cfg;
	struct kvs_store *s;
	struct st_task a, b; /* block A (fits), block B */
};

/* A tmpfs of size_kib at a fresh directory, a store over it, block A dumped. */
static kvs_test_rc fs_setup(struct fs_case *f, const char *tag, unsigned size_kib)
{
	char opts[64];

	memset(f, 0, sizeof(*f));
	KVS_TRY(st_root_init(f->mnt, sizeof(f->mnt), tag));
	snprintf(opts, sizeof(opts), "size=%uk,mode=0700", size_kib);
	if (mount("kvs-hostile", f->mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts)) {
		int e = errno;

		st_root_fini(f->mnt);
		KVS_SKIP("cannot mount a tmpfs (%s): needs root (CAP_SYS_ADMIN)", strerror(e));
	}
	st_cfg(&f->cfg, kvs_test_unique_id(f->uid, sizeof(f->uid), tag), 0, FS_SHARD, 16, FS_SPB);
	st_posix(&f->cfg, f->mnt);
	f->cfg.log = hl_logger;
	KVS_TRY(st_open(&f->cfg, &f->s));
	KVS_TRY(st_task_whole(&f->a, FS_SPB, 1, FS_SHARD));
	KVS_TRY(st_task_whole(&f->b, FS_SPB, 1, FS_SHARD));
	for (uint32_t i = 0; i < FS_SPB; i++) {
		st_task_set(&f->a, i, &(struct kvs_block_id){ .bytes = { 0xa } }, i);
		st_task_set(&f->b, i, &(struct kvs_block_id){ .bytes = { 0xb } }, i);
	}
	return st_dump(f->s, &f->a, 10000);
}

static void fs_teardown(struct fs_case *f)
{
	kvs_store_close(f->s);
	st_task_free(&f->a);
	st_task_free(&f->b);
	umount2(f->mnt, MNT_DETACH);
	st_root_fini(f->mnt);
}

/* Dump B and expect err; nothing on disk changed; the cache clean; A loads
 * from the backend through a second store (its own cache). */
static kvs_test_rc fs_refused_dump(struct fs_case *f, int err, const char *what)
{
	struct kvs_store_config cfg2 = f->cfg;
	struct kvs_store *s2 = NULL;
	uint64_t before = digest(f->mnt), task = 0;

	hl_log_clear();
	st_task_fill(&f->b);
	KVS_CHECK_OK(kvs_store_dump(f->s, f->b.shards, f->b.n, NULL, &task));
	KVS_TRY(st_wait_expect(f->s, task, 10000, err, "dump"));
	KVS_TRY(hl_log_has(what));
	KVS_CHECK_EQ(digest(f->mnt), before);
	KVS_TRY(st_cache_clean(f->s, true));
	snprintf(cfg2.cache.unique_id, sizeof(cfg2.cache.unique_id), "%s.2", f->uid);
	KVS_TRY(st_open(&cfg2, &s2));
	KVS_TRY(st_load(s2, &f->a, 10000, 0));
	KVS_TRY(st_cache_clean(s2, true));
	kvs_store_close(s2);
	KVS_CHECK_EQ(digest(f->mnt), before);
	return KVS_TEST_PASS;
}

static kvs_test_rc fs_remount_ro(struct fs_case *f)
{
	if (mount(NULL, f->mnt, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL))
		KVS_FAILF("remount %s read-only: %s", f->mnt, strerror(errno));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_full_fs(void)
{
	struct fs_case f;
	kvs_test_rc rc;

	/* 320 KiB: block A (256 KiB) fits, B's third shard does not */
	rc = fs_setup(&f, "fullfs", 320);
	if (rc.code == KVS_TEST_PASS.code)
		rc = fs_refused_dump(&f, -ENOSPC, "No space left on device");
	fs_teardown(&f);
	return rc;
}

static kvs_test_rc test_readonly_fs(void)
{
	struct fs_case f;
	kvs_test_rc rc;

	rc = fs_setup(&f, "rofs", 4096);
	if (rc.code == KVS_TEST_PASS.code)
		rc = fs_remount_ro(&f);
	if (rc.code == KVS_TEST_PASS.code)
		rc = fs_refused_dump(&f, -EROFS, "Read-only file system");
	fs_teardown(&f);
	return rc;
}

/* ---- something else than a block file at a block's path ---- */

/* <root>/aa/bb/<32 hex> of block b, its fan-out directories made. */
static kvs_test_rc block_path(const char *root, const struct kvs_block_id *b, char *path,
			      size_t len)
{
	char hex[33];

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", b->bytes[i]);
	snprintf(path, len, "%s/%.2s", root, hex);
	if (mkdir(path, 0700) && errno != EEXIST)
		KVS_FAILF("mkdir %s: %s", path, strerror(errno));
	snprintf(path, len, "%s/%.2s/%.2s", root, hex, hex + 2);
	if (mkdir(path, 0700) && errno != EEXIST)
		KVS_FAILF("mkdir %s: %s", path, strerror(errno));
	snprintf(path, len, "%s/%.2s/%.2s/%s", root, hex, hex + 2, hex);
	return KVS_TEST_PASS;
}

/* A FIFO (nobody writing: a blocking open would hang the store's dispatcher)
 * and a directory at two blocks' paths: each load is -ENOENT within its
 * bound, the log names what sits there, lookup says miss, nothing changed. */
static kvs_test_rc test_not_a_file(void)
{
	struct kvs_block_id fifo = { .bytes = { 0xf1, 0xf0 } }, dir = { .bytes = { 0xd1, 0x20 } };
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char root[128], path[256], uid[60];
	struct st_task t;
	bool hits[2];
	uint64_t before;

	KVS_TRY(st_root_init(root, sizeof(root), "notafile"));
	KVS_TRY(block_path(root, &fifo, path, sizeof(path)));
	KVS_CHECK_OK(mkfifo(path, 0600));
	KVS_TRY(block_path(root, &dir, path, sizeof(path)));
	KVS_CHECK_OK(mkdir(path, 0700));
	before = digest(root);
	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "notafile"), 0, 4096, 8, 1);
	st_posix(&cfg, root);
	cfg.log = hl_logger;
	cfg.timeout_ns = 5 * ST_SEC;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 1, 1, 4096));
	hl_log_clear();
	st_task_set(&t, 0, &fifo, 0);
	KVS_TRY(st_load(s, &t, 10000, -ENOENT));
	KVS_TRY(hl_log_has("is a FIFO, not a regular file: read as absent"));
	st_task_set(&t, 0, &dir, 0);
	KVS_TRY(st_load(s, &t, 10000, -ENOENT));
	KVS_TRY(hl_log_has("is a directory, not a regular file: read as absent"));
	KVS_CHECK_EQ(kvs_store_lookup(s, (struct kvs_block_id[]){ fifo, dir }, 2, hits), 0);
	KVS_TRY(st_cache_clean(s, true));
	kvs_store_close(s);
	st_task_free(&t);
	KVS_CHECK_EQ(digest(root), before);
	st_root_fini(root);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "other_uid_segment", test_other_uid_segment },
	{ "other_uid_watcher", test_other_uid_watcher },
	{ "group_cache", test_group_cache },
	{ "memlock", test_memlock },
	{ "full_fs", test_full_fs },
	{ "readonly_fs", test_readonly_fs },
	{ "not_a_file", test_not_a_file },
};

KVS_TEST_MAIN(cases)
