/*
 * tests/core_remove.c — removals that could go wrong: a creator killed -9 in
 * its pre-fault leaves a data file its header does not record, which
 * kvs_cache_remove finds by name and removes (one it cannot unlink keeps the
 * control file and fails the removal); a removal (kvs_cache_remove, a
 * watcher's close) whose cache was replaced by a new one of the id while it
 * waited never removes the new one.  The rest of a cache's life is
 * tests/core_attach.c's.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "core/core.h"
#include "core_util.h"

#define MS 1000000ull

/* A cache of 32 slots of 8 KiB named tag; its unique id in uid. */
static void remove_cfg(struct kvs_cache_config *cfg, char *uid, size_t len, const char *tag)
{
	core_cfg(cfg, tag, 32, 8192, 1);
	snprintf(uid, len, "%s", cfg->unique_id);
}

/* ---- a creator killed during its pre-fault ---- */

/* forked: a creator stopped in its pre-fault (its data file made and mapped,
 * not yet recorded in the header), to be killed there. */
static kvs_test_rc prefault_creator(void *arg)
{
	struct kvs_cache *c = NULL;

	kvs_numa_test_prefault_hook = kvs_test_park_hook;
	KVS_CHECK_OK(kvs_cache_open(arg, &c));
	KVS_FAILF("the creator was not stopped in its pre-fault");
}

/* A creator killed -9 in its pre-fault leaves a named control file, not READY,
 * and a 32 MiB data file its header does not record.  kvs_cache_remove
 * (`kvshare clean ID`) removes both and says 0 only then; the next open makes
 * a fresh cache.  Before, it removed the control file alone and said 0: the
 * data file stayed (on hugetlbfs, its 16 pages held). */
static kvs_test_rc test_remove_dead_creator(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache_info info;
	struct kvs_cache *c = NULL;
	int fds[2];
	char uid[80];
	pid_t pid;

	remove_cfg(&cfg, uid, sizeof(uid), "prefault");
	cfg.slot_count = 4096; /* 32 MiB of 8 KiB slots */
	cfg.numa = KVS_NUMA_OFF;
	KVS_CHECK_OK(pipe2(fds, O_CLOEXEC));
	kvs_test_park_fd = fds[1];
	pid = kvs_test_fork(prefault_creator, &cfg);
	KVS_TRY(kvs_test_kill_parked(pid, fds[0], fds[1])); /* in its pre-fault */
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	KVS_CHECK_OK(kvs_cache_inspect(uid, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CREATING);
	KVS_CHECK_EQ(info.ranks_live, 0);
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	KVS_CHECK(!ctl_exists(uid));
	KVS_CHECK(!data_exists(uid));
	KVS_CHECK(strstr(core_last_log, "removed 1 data file its header did not record") != NULL);
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 1));
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	return KVS_TEST_PASS;
}

/* A data file's name that cannot be unlinked (here a directory holds it) keeps
 * the control file: kvs_cache_remove fails with the unlink's error, the log
 * names the path, and a later one removes the cache once the name is free.
 * Never 0 with a file of the cache left. */
static kvs_test_rc test_remove_unremovable(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[80], dir[256];

	remove_cfg(&cfg, uid, sizeof(uid), "unremov");
	cfg.flags = KVS_CACHE_PERSIST;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	kvs_cache_close(c);
	snprintf(dir, sizeof(dir), "/dev/shm/kvshare.%s.data.5", uid);
	KVS_CHECK_OK(mkdir(dir, 0700));
	core_log_quiet = 1;
	KVS_CHECK_ERR(kvs_cache_remove(&cfg), -EISDIR);
	core_log_quiet = 0;
	KVS_CHECK(strstr(core_last_log, "could not be removed") != NULL);
	KVS_CHECK(ctl_exists(uid));
	KVS_CHECK_OK(rmdir(dir));
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	return KVS_TEST_PASS;
}

/* ---- a removal whose cache is replaced while it waits ---- */

static int remove_opened_fd = -1, remove_go_fd = -1, remove_go_wr = -1;

/* In the remover: the control file is open; say so and wait for the go (its
 * EOF) -- once: a retry goes straight on. */
static void remove_hook(enum kvs_core_test_point point)
{
	char ch;

	if (point != KVS_CORE_TEST_REMOVE_OPENED || remove_go_fd < 0)
		return;
	if (write(remove_opened_fd, "o", 1) != 1)
		_exit(3);
	while (read(remove_go_fd, &ch, 1) > 0)
		;
	remove_go_fd = -1;
}

/* forked: kvs_cache_remove of a cache that is replaced while it waits: the new
 * one is live, so -EBUSY. */
static kvs_test_rc remover(void *arg)
{
	const struct kvs_cache_config *cfg = arg;

	close(remove_go_wr); /* the parent's end: its close is the go */
	kvs_core_test_hook = remove_hook;
	KVS_CHECK_ERR(kvs_cache_remove(cfg), -EBUSY);
	return KVS_TEST_PASS;
}

/* `kvshare clean ID` opened a stale cache's control file; before it had the
 * lifecycle lock, that cache was removed and a rank made a new cache of the id.
 * The remover must judge the new cache (live: -EBUSY), and the new cache keeps
 * its files and bytes.  Before, it removed the name and the data files by name
 * once it had the old file's lock: the new cache's. */
static kvs_test_rc test_remove_replaced(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	int opened[2], go[2];
	char uid[80], ch;
	pid_t pid;

	remove_cfg(&cfg, uid, sizeof(uid), "replaced");
	cfg.flags = KVS_CACHE_PERSIST;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 1));
	kvs_cache_close(c); /* stale now */
	cfg.flags = 0;
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	KVS_CHECK_OK(pipe2(opened, O_CLOEXEC));
	KVS_CHECK_OK(pipe2(go, O_CLOEXEC));
	remove_opened_fd = opened[1];
	remove_go_fd = go[0];
	remove_go_wr = go[1];
	pid = kvs_test_fork(remover, &cfg);
	KVS_CHECK(pid > 0);
	close(opened[1]);
	close(go[0]);
	remove_go_fd = -1;
	KVS_CHECK_EQ(read(opened[0], &ch, 1), 1); /* the remover holds the old file */
	close(opened[0]);
	KVS_CHECK_OK(kvs_cache_remove(&cfg));     /* removed meanwhile ... */
	KVS_CHECK(!ctl_exists(uid));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));   /* ... and made again, live */
	KVS_TRY(core_put(c, 2));
	close(go[1]);                             /* the remover goes on */
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 0);
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	KVS_CHECK(core_holds(c, 2) && !core_holds(c, 1));
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	return KVS_TEST_PASS;
}

/* A watcher whose cache was removed under it (the last rank's close) closes
 * after a rank made a new cache of the id: the new cache keeps its files.
 * Before, the watcher's close, the last of the old cache, unlinked the names:
 * the new cache's control and data files. */
static kvs_test_rc test_watcher_close_after_replaced(void)
{
	struct kvs_cache_config cfg, wcfg;
	struct kvs_cache *r = NULL, *w = NULL, *c = NULL;
	char uid[80];

	remove_cfg(&cfg, uid, sizeof(uid), "wreplaced");
	KVS_CHECK_OK(kvs_cache_open(&cfg, &r));
	wcfg = cfg;
	wcfg.device_id = -1;
	wcfg.flags = KVS_CACHE_ATTACH;
	KVS_CHECK_OK(kvs_cache_open(&wcfg, &w));
	kvs_cache_close(r); /* the last rank: removed, the watcher attached */
	KVS_CHECK_EQ(kvs_cache_removed(w), 1);
	KVS_CHECK(!ctl_exists(uid));
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 3));
	kvs_cache_close(w);
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	KVS_CHECK(core_holds(c, 3));
	KVS_CHECK_OK(kvs_cache_check(c));
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "remove_dead_creator", test_remove_dead_creator },
	{ "remove_unremovable", test_remove_unremovable },
	{ "remove_replaced", test_remove_replaced },
	{ "watcher_close_after_replaced", test_watcher_close_after_replaced },
};

KVS_TEST_MAIN(cases)
