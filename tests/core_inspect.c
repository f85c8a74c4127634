/*
 * tests/core_inspect.c — looking at a cache without disturbing it:
 * kvs_cache_inspect (read-only, never attaches: live, stale, being created,
 * another layout, corrupt; it changes no byte of the control file and never
 * adopts; a stale cache's dead entries listed by pid), kvs_cache_rank_info and
 * kvs_cache_seg_info through a handle (a watcher's view of the ranks, a dead
 * rank not yet reaped, the data segment's record), a watcher store (the way
 * `kvshare stat` reads store counters: device -1, KVS_CACHE_ATTACH, no geometry,
 * backend none; a store rank's copy engine, host: CPU-only), and every error
 * code; a FIFO, a directory, a symbolic link or a socket at a control file's
 * name is not a cache: inspect, remove and open say so at once (-KVS_ECORRUPT,
 * the log naming what is there), never open it, and leave it.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "core/core.h"
#include "core_util.h"
#include "store_util.h"

#define MS 1000000ull

/* A child parked in pause() dies with the test, whatever the test does. */
static void die_with_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

static void ctl_path(char *buf, size_t len, const char *uid)
{
	snprintf(buf, len, "/dev/shm/kvshare.%s.ctl", uid);
}

static void insp_cfg(struct kvs_cache_config *cfg, const char *tag)
{
	core_cfg(cfg, tag, 16, 8192, 1);
	cfg->numa = KVS_NUMA_OFF; /* one data segment on any machine */
}

/* The whole control file's bytes (to prove inspect writes nothing). */
static kvs_test_rc ctl_snapshot(const char *uid, unsigned char **buf, size_t *len)
{
	char path[256];
	struct stat st;
	int fd;

	ctl_path(path, sizeof(path), uid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	KVS_CHECK(fd >= 0);
	KVS_CHECK_OK(fstat(fd, &st));
	*len = (size_t)st.st_size;
	*buf = malloc(*len);
	KVS_CHECK(*buf != NULL);
	KVS_CHECK_EQ(pread(fd, *buf, *len, 0), (ssize_t)*len);
	close(fd);
	return KVS_TEST_PASS;
}

/* Write len bytes at off of the control file (forging a header). */
static kvs_test_rc ctl_poke(const char *uid, uint64_t off, const void *p, size_t len)
{
	char path[256];
	int fd;

	ctl_path(path, sizeof(path), uid);
	fd = open(path, O_RDWR | O_CLOEXEC);
	KVS_CHECK(fd >= 0);
	KVS_CHECK_EQ(pwrite(fd, p, len, (off_t)off), (ssize_t)len);
	close(fd);
	return KVS_TEST_PASS;
}

/* A child that opens the cache as rank `device`, puts blocks 0..nput-1, pins
 * block 0, says so on fd and waits to be killed. */
struct holder {
	struct kvs_cache_config cfg;
	int device, nput, fd;
	pid_t parent;
};

static kvs_test_rc holder_child(void *arg)
{
	struct holder *h = arg;
	struct kvs_cache *c = NULL;
	struct kvs_block_id k0 = core_block(0);
	struct kvs_slot s;

	die_with_parent(h->parent);
	h->cfg.device_id = h->device;
	KVS_CHECK_OK(kvs_cache_open(&h->cfg, &c));
	for (int n = 0; n < h->nput; n++)
		KVS_TRY(core_put(c, (uint64_t)n));
	if (h->nput > 0)
		KVS_CHECK_OK(kvs_cache_get(c, &k0, 0, 0, &s));
	KVS_CHECK_EQ(write(h->fd, "x", 1), 1);
	for (;;)
		pause();
}

/* Fork a holder and wait until it is attached. */
static kvs_test_rc holder_start(const struct kvs_cache_config *cfg, int device, int nput, pid_t *pid)
{
	struct holder h = { .cfg = *cfg, .device = device, .nput = nput, .parent = getpid() };
	int fds[2];
	char ch;

	KVS_CHECK_OK(pipe(fds));
	h.fd = fds[1];
	*pid = kvs_test_fork(holder_child, &h);
	close(fds[1]);
	KVS_CHECK(*pid > 0);
	KVS_CHECK_EQ(read(fds[0], &ch, 1), 1);
	close(fds[0]);
	return KVS_TEST_PASS;
}

static kvs_test_rc holder_kill(pid_t pid)
{
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	return KVS_TEST_PASS;
}

static kvs_test_rc inspect_ok(const char *uid, struct kvs_cache_info *info)
{
	int rc = kvs_cache_inspect(uid, info);

	if (rc)
		KVS_FAILF("kvs_cache_inspect(%s): %d (%s)", uid, rc, kvs_strerror(rc));
	KVS_CHECK(strcmp(info->unique_id, uid) == 0);
	return KVS_TEST_PASS;
}

/* ---- cases ---- */

static kvs_test_rc test_errors(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_info info;
	struct kvs_cache_rank_info ri;
	struct kvs_cache_seg_info si;
	char uid[80], longid[80];

	KVS_CHECK_ERR(kvs_cache_inspect(NULL, &info), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_inspect("x", NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_inspect("", &info), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_inspect("../etc", &info), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_inspect("..", &info), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_inspect("a/b", &info), -EINVAL);
	memset(longid, 'a', 65);
	longid[65] = '\0';
	KVS_CHECK_ERR(kvs_cache_inspect(longid, &info), -EINVAL);
	longid[64] = '\0'; /* 64 characters: valid, absent */
	KVS_CHECK_ERR(kvs_cache_inspect(longid, &info), -ENOENT);
	KVS_CHECK(strcmp(info.unique_id, longid) == 0);
	KVS_CHECK_EQ(info.state, 0);
	KVS_CHECK_ERR(kvs_cache_inspect(kvs_test_unique_id(uid, sizeof(uid), "none"), &info), -ENOENT);

	insp_cfg(&cfg, "ierr");
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_ERR(kvs_cache_rank_info(NULL, 0, &ri), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_rank_info(c, 0, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_rank_info(c, -1, &ri), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_rank_info(c, KVS_CACHE_MAX_RANKS, &ri), -EINVAL);
	KVS_CHECK_OK(kvs_cache_rank_info(c, KVS_CACHE_MAX_RANKS - 1, &ri));
	KVS_CHECK_EQ(ri.attached, 0);
	KVS_CHECK_EQ(ri.alive, 0);
	KVS_CHECK_EQ(ri.device_id, -1);
	KVS_CHECK_ERR(kvs_cache_seg_info(NULL, 0, &si), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_seg_info(c, 0, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_cache_seg_info(c, 1, &si), -ENOENT); /* numa off: one segment */
	KVS_CHECK_ERR(kvs_cache_seg_info(c, KVS_CACHE_MAX_SEGS, &si), -ENOENT);
	KVS_CHECK_ERR(kvs_cache_seg_info(c, UINT32_MAX, &si), -ENOENT);
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* A live cache: READY, its ranks with pid and device; inspecting writes nothing. */
static kvs_test_rc test_live(void)
{
	struct kvs_cache_config cfg, wcfg;
	struct kvs_cache *c = NULL, *w = NULL;
	struct kvs_cache_info info;
	unsigned char *before = NULL, *after = NULL;
	size_t nb = 0, na = 0;
	char path[256];
	struct stat st;

	insp_cfg(&cfg, "ilive");
	cfg.device_id = 3;
	cfg.local_rank_size = 4;
	cfg.shards_per_block = 2;
	cfg.reserved_slots = 2;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 1));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_READY);
	KVS_CHECK_EQ(info.ranks_live, 1);
	KVS_CHECK_EQ(info.gpu_ranks_live, 1);
	KVS_CHECK_EQ(info.live[0].entry, kvs_cache_rank(c));
	KVS_CHECK_EQ(info.live[0].pid, getpid());
	KVS_CHECK_EQ(info.live[0].device_id, 3);
	KVS_CHECK_EQ(info.live[0].recorded, 1);
	KVS_CHECK_EQ(info.layout_version, KVS_LAYOUT_VERSION);
	KVS_CHECK_EQ(info.slot_count, 16);
	KVS_CHECK_EQ(info.slot_bytes, 8192);
	KVS_CHECK_EQ(info.local_rank_size, 4);
	KVS_CHECK_EQ(info.shards_per_block, 2);
	KVS_CHECK_EQ(info.reserved_slots, 2);
	KVS_CHECK_EQ(info.seg_count, 1);
	KVS_CHECK_EQ(info.flags, 0);
	KVS_CHECK_EQ(info.adoptions, 0);
	KVS_CHECK_EQ(info.uid, geteuid());
	KVS_CHECK_EQ(info.creator_uid, geteuid());
	KVS_CHECK_EQ(info.mode, 0600);
	KVS_CHECK(info.detail[0] == '\0');
	KVS_CHECK(info.hugetlb_dir[0] == '\0');
	ctl_path(path, sizeof(path), cfg.unique_id);
	KVS_CHECK_OK(stat(path, &st));
	KVS_CHECK_EQ(info.ctl_bytes, st.st_size);
	KVS_CHECK(info.data_bytes >= 16 * 8192);
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", cfg.unique_id);
	KVS_CHECK_OK(stat(path, &st));
	KVS_CHECK_EQ(info.data_bytes, st.st_size);

	/* A watcher counts as live, not as a GPU rank. */
	wcfg = cfg;
	wcfg.device_id = -1;
	wcfg.flags = KVS_CACHE_ATTACH;
	wcfg.slot_bytes = wcfg.slot_count = 0;
	KVS_CHECK_OK(kvs_cache_open(&wcfg, &w));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.ranks_live, 2);
	KVS_CHECK_EQ(info.gpu_ranks_live, 1);
	KVS_CHECK_EQ(info.live[1].entry, kvs_cache_rank(w));
	KVS_CHECK_EQ(info.live[1].device_id, -1);
	KVS_CHECK_EQ(info.ranks_dead, 0);
	KVS_CHECK_EQ(info.cpu_ranks_live, 0); /* a rank without a store: no copy engine */

	/* Read-only: not one byte of the control file changes (nobody else runs). */
	KVS_TRY(ctl_snapshot(cfg.unique_id, &before, &nb));
	for (int i = 0; i < 8; i++)
		KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_TRY(ctl_snapshot(cfg.unique_id, &after, &na));
	KVS_CHECK_EQ(na, nb);
	KVS_CHECK(memcmp(before, after, nb) == 0);
	free(before);
	free(after);
	kvs_cache_close(w);
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* A stale cache (its only rank killed): ranks_live 0; inspecting it neither
 * adopts nor repairs it (its dead entry and pin stay until a real open). */
static kvs_test_rc test_stale(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_info info;
	struct kvs_cache_stats st;
	unsigned char *before = NULL, *after = NULL;
	size_t nb = 0, na = 0;
	pid_t pid;

	insp_cfg(&cfg, "istale");
	cfg.flags = KVS_CACHE_PERSIST;
	KVS_TRY(holder_start(&cfg, 0, 3, &pid));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.ranks_live, 1);
	KVS_CHECK_EQ(info.live[0].pid, pid);
	KVS_CHECK_EQ(info.flags & KVS_CACHE_INFO_PERSIST, KVS_CACHE_INFO_PERSIST);
	KVS_TRY(holder_kill(pid));
	KVS_TRY(ctl_snapshot(cfg.unique_id, &before, &nb));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_READY);
	KVS_CHECK_EQ(info.ranks_live, 0);
	KVS_CHECK_EQ(info.gpu_ranks_live, 0);
	KVS_CHECK_EQ(info.adoptions, 0);
	/* its dead entry, listed after the (no) live ones: whom an attach reaps */
	KVS_CHECK_EQ(info.ranks_dead, 1);
	KVS_CHECK_EQ(info.live[0].pid, pid);
	KVS_CHECK_EQ(info.live[0].device_id, 0);
	KVS_CHECK_EQ(info.live[0].recorded, 1);
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_TRY(ctl_snapshot(cfg.unique_id, &after, &na));
	KVS_CHECK_EQ(na, nb);
	KVS_CHECK(memcmp(before, after, nb) == 0); /* the dead entry and its pin are still there */
	free(before);
	free(after);

	/* The first real open adopts it (so inspect had not). */
	cfg.flags = 0;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_CHECK_OK(kvs_cache_stats(c, KVS_STATS_NODE, &st));
	KVS_CHECK_EQ(st.adoptions, 1);
	KVS_CHECK_EQ(st.slots_ready, 3);
	KVS_CHECK_EQ(st.slots_pinned, 0);
	kvs_cache_close(c);
	KVS_TRY(inspect_ok(cfg.unique_id, &info)); /* persistent: still there, adopted once */
	KVS_CHECK_EQ(info.adoptions, 1);
	KVS_CHECK_EQ(info.ranks_live, 0);
	KVS_CHECK_EQ(info.ranks_dead, 0); /* closed cleanly: nobody to reap */
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	KVS_CHECK_ERR(kvs_cache_inspect(cfg.unique_id, &info), -ENOENT);
	return KVS_TEST_PASS;
}

/* Another layout, bad magic, an impossible geometry, a truncated file: results,
 * not errors, each naming why; restored and removed afterwards. */
static kvs_test_rc test_layout_and_corrupt(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct kvs_cache_info info;
	uint32_t v = KVS_LAYOUT_VERSION + 7, v0 = KVS_LAYOUT_VERSION;
	uint64_t magic = 0x1234, magic0 = KVS_SHM_MAGIC, off, off_bad;
	char path[256];
	struct stat st;

	insp_cfg(&cfg, "ilayout");
	cfg.flags = KVS_CACHE_PERSIST;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	off = kvs_core_test_header(c)->slots_off;
	kvs_cache_close(c);

	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, layout_version), &v, 4));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_LAYOUT);
	KVS_CHECK_EQ(info.layout_version, KVS_LAYOUT_VERSION + 7);
	KVS_CHECK_EQ(info.ranks_live, 0);
	KVS_CHECK_EQ(info.slot_count, 0); /* another layout's geometry is not interpreted */
	KVS_CHECK(strstr(info.detail, "layout_version") != NULL);
	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, layout_version), &v0, 4));

	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, magic), &magic, 8));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CORRUPT);
	KVS_CHECK_EQ(info.layout_version, 0);
	KVS_CHECK(strstr(info.detail, "magic") != NULL);
	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, magic), &magic0, 8));

	off_bad = off + 64;
	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, slots_off), &off_bad, 8));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CORRUPT);
	KVS_CHECK_EQ(info.layout_version, KVS_LAYOUT_VERSION);
	KVS_CHECK(strstr(info.detail, "slots_off") != NULL);
	KVS_TRY(ctl_poke(cfg.unique_id, offsetof(struct kvs_shm_header, slots_off), &off, 8));

	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_READY);
	KVS_CHECK(info.detail[0] == '\0');

	/* A control file cut inside its header (the data files go first: a
	 * header that short names none). */
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", cfg.unique_id);
	KVS_CHECK_OK(unlink(path));
	ctl_path(path, sizeof(path), cfg.unique_id);
	KVS_CHECK_OK(truncate(path, 100));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CORRUPT);
	KVS_CHECK_EQ(info.ctl_bytes, 100);
	KVS_CHECK(strstr(info.detail, "100 bytes") != NULL);
	KVS_CHECK_OK(stat(path, &st));
	KVS_CHECK_EQ(st.st_size, 100); /* untouched */
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* ---- a cache being created: its creator stalls after naming it ---- */

static int stall_fd = -1;
static pid_t stall_parent;

static void stall_hook(enum kvs_core_test_point point)
{
	if (point != KVS_CORE_TEST_AFTER_LINK)
		return;
	if (write(stall_fd, "x", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

static kvs_test_rc stalled_creator(void *arg)
{
	struct kvs_cache_config *cfg = arg;
	struct kvs_cache *c = NULL;

	die_with_parent(stall_parent);
	kvs_core_test_hook = stall_hook;
	KVS_CHECK_OK(kvs_cache_open(cfg, &c));
	KVS_FAILF("the creator was not stalled");
}

static kvs_test_rc test_creating(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache_info info;
	int fds[2];
	pid_t pid;
	char ch;

	insp_cfg(&cfg, "icreate");
	KVS_CHECK_OK(pipe(fds));
	stall_fd = fds[1];
	stall_parent = getpid();
	pid = kvs_test_fork(stalled_creator, &cfg);
	close(fds[1]);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(read(fds[0], &ch, 1), 1);
	close(fds[0]);
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CREATING);
	KVS_CHECK_EQ(info.ranks_live, 1);
	KVS_CHECK_EQ(info.live[0].recorded, 0); /* no READY rank table to read */
	KVS_CHECK_EQ(info.live[0].pid, 0);
	KVS_CHECK_EQ(info.layout_version, KVS_LAYOUT_VERSION);
	KVS_TRY(holder_kill(pid));
	KVS_TRY(inspect_ok(cfg.unique_id, &info));
	KVS_CHECK_EQ(info.state, KVS_CACHE_INFO_CREATING);
	KVS_CHECK_EQ(info.ranks_live, 0); /* the remains of a dead creator */
	KVS_CHECK_OK(kvs_cache_remove(&cfg));
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* A watcher's view of the ranks and the data segment: pid, device, alive, pins;
 * a killed rank is attached but not alive until someone reaps it. */
static kvs_test_rc test_rank_and_seg_info(void)
{
	struct kvs_cache_config cfg, wcfg;
	struct kvs_cache *c = NULL, *w = NULL;
	struct kvs_cache_rank_info ri;
	struct kvs_cache_seg_info si;
	struct kvs_block_id k = core_block(5);
	struct kvs_slot s;
	struct stat st;
	int me, dead = -1;
	pid_t pid;

	insp_cfg(&cfg, "irank");
	cfg.device_id = 1;
	cfg.reserved_slots = 3;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_TRY(core_put(c, 5));
	KVS_CHECK_OK(kvs_cache_get(c, &k, 0, 0, &s)); /* one pin held */
	wcfg = cfg;
	wcfg.device_id = -1;
	wcfg.flags = KVS_CACHE_ATTACH;
	wcfg.slot_bytes = wcfg.slot_count = 0;
	KVS_CHECK_OK(kvs_cache_open(&wcfg, &w));
	me = kvs_cache_rank(w);

	KVS_CHECK_OK(kvs_cache_rank_info(w, kvs_cache_rank(c), &ri));
	KVS_CHECK_EQ(ri.entry, kvs_cache_rank(c));
	KVS_CHECK_EQ(ri.attached, 1);
	KVS_CHECK_EQ(ri.alive, 1);
	KVS_CHECK_EQ(ri.self, 0);
	KVS_CHECK_EQ(ri.pid, getpid());
	KVS_CHECK_EQ(ri.device_id, 1);
	KVS_CHECK_EQ(ri.pins, 1);
	KVS_CHECK(ri.epoch >= 1);
	KVS_CHECK_EQ(ri.copy_engine, 0); /* no store */
	KVS_CHECK_OK(kvs_cache_rank_info(w, me, &ri));
	KVS_CHECK_EQ(ri.self, 1);
	KVS_CHECK_EQ(ri.alive, 1);
	KVS_CHECK_EQ(ri.device_id, -1);
	KVS_CHECK_EQ(ri.pins, 0);

	/* A rank that dies is attached, not alive, until reaped. */
	KVS_TRY(holder_start(&cfg, 2, 0, &pid));
	for (int r = 0; r < KVS_CACHE_MAX_RANKS; r++) {
		KVS_CHECK_OK(kvs_cache_rank_info(w, r, &ri));
		if (ri.attached && ri.pid == pid)
			dead = r;
	}
	KVS_CHECK(dead >= 0);
	KVS_CHECK_OK(kvs_cache_rank_info(w, dead, &ri));
	KVS_CHECK_EQ(ri.alive, 1);
	KVS_CHECK_EQ(ri.device_id, 2);
	KVS_TRY(holder_kill(pid));
	KVS_CHECK_OK(kvs_cache_rank_info(w, dead, &ri));
	KVS_CHECK_EQ(ri.attached, 1);
	KVS_CHECK_EQ(ri.alive, 0);
	KVS_CHECK_EQ(ri.pid, pid);

	KVS_CHECK_OK(kvs_cache_seg_info(w, 0, &si));
	KVS_CHECK_EQ(si.seg, 0);
	KVS_CHECK_EQ(si.seg_count, 1);
	KVS_CHECK_EQ(si.backing, KVS_CACHE_BACKING_SHM); /* tests keep hugetlb off */
	KVS_CHECK_EQ(si.first_slot, 0);
	KVS_CHECK_EQ(si.slot_count, 16);
	KVS_CHECK_EQ(si.reserved_count, 3);
	KVS_CHECK(si.page_bytes >= 4096);
	KVS_CHECK(si.bytes >= 16 * 8192);
	KVS_CHECK_OK(stat(si.path, &st));
	KVS_CHECK_EQ(st.st_size, si.bytes);
	KVS_CHECK(strstr(si.path, cfg.unique_id) != NULL);
	KVS_CHECK_ERR(kvs_cache_seg_info(w, si.seg_count, &si), -ENOENT);

	KVS_CHECK_OK(kvs_slot_release(c, &s));
	kvs_cache_close(w);
	kvs_cache_close(c);
	KVS_CHECK(!ctl_exists(cfg.unique_id));
	return KVS_TEST_PASS;
}

/* What `kvshare stat` opens: a watcher store with no geometry and backend none,
 * reading a rank store's counters. */
static kvs_test_rc test_watcher_store(void)
{
	struct kvs_store_config cfg, wcfg;
	struct kvs_store *s = NULL, *w = NULL;
	struct kvs_store_stats ss;
	struct kvs_cache_stats cs;
	struct st_task t;
	char uid[80];

	kvs_test_unique_id(uid, sizeof(uid), "iwstore");
	st_cfg(&cfg, uid, 0, 4096, 32, 1);
	st_latency(&cfg, 10000);
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, 4, 1, 4096));
	for (uint32_t i = 0; i < 4; i++) {
		struct kvs_block_id b = st_block(77, i);
		st_task_set(&t, i, &b, 0);
	}
	KVS_TRY(st_load(s, &t, 10000, 0));
	KVS_TRY(st_load(s, &t, 10000, 0)); /* hits */

	kvs_store_config_init(&wcfg);
	memcpy(wcfg.cache.unique_id, uid, strlen(uid) + 1);
	wcfg.cache.device_id = -1;
	wcfg.cache.flags = KVS_CACHE_ATTACH;
	wcfg.backend.kind = KVS_BACKEND_NONE;
	wcfg.log = st_log;
	KVS_TRY(st_open(&wcfg, &w));
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &ss));
	KVS_CHECK_EQ(ss.tasks_load, 2);
	KVS_CHECK_EQ(ss.shards_loaded, 8);
	KVS_CHECK_EQ(ss.owner_reads, 4);
	KVS_CHECK_EQ(ss.load_hits, 4);
	KVS_CHECK(ss.copy_bytes >= 8 * 4096);
	uint64_t lat = 0;
	for (int b = 0; b < KVS_STORE_LAT_BUCKETS; b++)
		lat += ss.task_lat_us[b];
	KVS_CHECK_EQ(lat, 2);
	KVS_TRY(st_stats(w, st_rank(s), &ss));
	KVS_CHECK_EQ(ss.tasks_load, 2);
	KVS_CHECK_OK(kvs_cache_stats(kvs_store_cache(w), KVS_STATS_NODE, &cs));
	KVS_CHECK_EQ(cs.ranks_attached, 2);
	KVS_CHECK_EQ(cs.gpu_ranks_attached, 1);
	KVS_CHECK_EQ(cs.slot_count, 32);
	KVS_CHECK_EQ(cs.slots_ready, 4);
	KVS_CHECK_EQ(cs.hits, 4);
	/* the rank's store copies with the host engine: a CPU-only rank */
	{
		struct kvs_cache_rank_info ri;
		struct kvs_cache_info info;

		KVS_CHECK_OK(kvs_cache_rank_info(kvs_store_cache(w), st_rank(s), &ri));
		KVS_CHECK_EQ(ri.copy_engine, KVS_COPY_ENGINE_HOST);
		KVS_CHECK_OK(kvs_cache_rank_info(kvs_store_cache(w), st_rank(w), &ri));
		KVS_CHECK_EQ(ri.copy_engine, 0); /* a watcher copies nothing */
		KVS_TRY(inspect_ok(uid, &info));
		KVS_CHECK_EQ(info.gpu_ranks_live, 1);
		KVS_CHECK_EQ(info.cpu_ranks_live, 1);
	}
	KVS_CHECK_ERR(kvs_store_load(w, t.shards, t.n, &(uint64_t){ 0 }), -EOPNOTSUPP);
	kvs_store_close(w);
	kvs_store_close(s);
	st_task_free(&t);
	KVS_CHECK(!ctl_exists(uid));
	return KVS_TEST_PASS;
}

/* A cache another user cannot read: -EACCES (the file is 0600), nothing else
 * learned. */
static kvs_test_rc eacces_child(void *arg)
{
	struct kvs_cache_info info;
	const char *uid = arg;

	if (setresgid(65534, 65534, 65534) || setresuid(65534, 65534, 65534))
		KVS_FAILF("setresuid(65534): %s", strerror(errno));
	KVS_CHECK_ERR(kvs_cache_inspect(uid, &info), -EACCES);
	KVS_CHECK(strcmp(info.unique_id, uid) == 0);
	KVS_CHECK_EQ(info.ranks_live, 0);
	KVS_CHECK_EQ(info.ctl_bytes, 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_eacces(void)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	pid_t pid;

	if (geteuid() != 0)
		KVS_SKIP("needs root (to become another user)");
	insp_cfg(&cfg, "iacces");
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	pid = kvs_test_fork(eacces_child, cfg.unique_id);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
	kvs_cache_close(c);
	return KVS_TEST_PASS;
}

/* What sits at a control file's name instead of a cache (made by the test). */
enum not_file { NF_FIFO, NF_DIR, NF_SYMLINK, NF_SOCKET };

static const struct {
	enum not_file kind;
	const char *tag, *word; /* the word the log names it by */
} not_files[] = {
	{ NF_FIFO, "ififo", "FIFO" },
	{ NF_DIR, "idir", "directory" },
	{ NF_SYMLINK, "ilink", "symbolic link" },
	{ NF_SOCKET, "isock", "socket" },
};

static const char *nf_word; /* the case's word, for the child */

/* Child: inspect, remove and open (as a rank and as a watcher) the name: each
 * -KVS_ECORRUPT at once, the log naming what is there.  In a child: before,
 * inspect opened a FIFO with a blocking open and never returned. */
static kvs_test_rc not_file_child(void *arg)
{
	const struct kvs_cache_config *cfg = arg;
	struct kvs_cache_config wcfg = *cfg;
	struct kvs_cache_info info;
	struct kvs_cache *c = NULL;

	core_log_quiet = 1; /* the last line is printed below */
	KVS_CHECK_ERR(kvs_cache_inspect(cfg->unique_id, &info), -KVS_ECORRUPT);
	KVS_CHECK(strcmp(info.unique_id, cfg->unique_id) == 0);
	KVS_CHECK_EQ(info.ranks_live, 0);
	core_last_log[0] = '\0';
	KVS_CHECK_ERR(kvs_cache_remove(cfg), -KVS_ECORRUPT);
	KVS_CHECK(strstr(core_last_log, nf_word) && strstr(core_last_log, "not a regular file"));
	core_last_log[0] = '\0';
	KVS_CHECK_ERR(kvs_cache_open(cfg, &c), -KVS_ECORRUPT);
	KVS_CHECK(c == NULL);
	KVS_CHECK(strstr(core_last_log, "not a regular file: not a kvshare control segment") != NULL);
	wcfg.device_id = -1;
	wcfg.flags = KVS_CACHE_ATTACH;
	KVS_CHECK_ERR(kvs_cache_open(&wcfg, &c), -KVS_ECORRUPT);
	printf("  %s\n", core_last_log);
	return KVS_TEST_PASS;
}

/* A FIFO, a directory, a symbolic link (to a regular file) and a socket at a
 * control file's name: not a cache, never opened, never removed. */
static kvs_test_rc test_not_a_file(void)
{
	for (size_t i = 0; i < KVS_ARRAY_LEN(not_files); i++) {
		struct kvs_cache_config cfg;
		struct sockaddr_un un = { .sun_family = AF_UNIX };
		char path[256], target[300];
		struct stat st;
		int fd = -1, rc = 0;
		pid_t pid;

		insp_cfg(&cfg, not_files[i].tag);
		ctl_path(path, sizeof(path), cfg.unique_id);
		snprintf(target, sizeof(target), "%s.target", path);
		switch (not_files[i].kind) {
		case NF_FIFO: rc = mkfifo(path, 0600); break;
		case NF_DIR: rc = mkdir(path, 0700); break;
		case NF_SYMLINK:
			fd = open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
			KVS_CHECK(fd >= 0);
			close(fd);
			fd = -1;
			rc = symlink(target, path);
			break;
		case NF_SOCKET:
			fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			KVS_CHECK(fd >= 0 && strlen(path) < sizeof(un.sun_path));
			memcpy(un.sun_path, path, strlen(path) + 1);
			rc = bind(fd, (struct sockaddr *)&un, sizeof(un));
			break;
		}
		KVS_CHECK_OK(rc);
		nf_word = not_files[i].word;
		pid = kvs_test_fork(not_file_child, &cfg);
		KVS_CHECK(pid > 0);
		rc = kvs_test_reap(pid, 10000); /* a hang is killed: -ETIMEDOUT */
		KVS_CHECK_OK(lstat(path, &st)); /* left as it was */
		if (fd >= 0)
			close(fd);
		if (not_files[i].kind == NF_DIR)
			rmdir(path);
		else
			unlink(path);
		unlink(target);
		if (rc != 0)
			KVS_FAILF("%s at the control file's name: child exit %d", not_files[i].word, rc);
	}
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "not_a_file", test_not_a_file },
	{ "eacces", test_eacces },
	{ "errors", test_errors },
	{ "live", test_live },
	{ "stale", test_stale },
	{ "layout_and_corrupt", test_layout_and_corrupt },
	{ "creating", test_creating },
	{ "rank_and_seg_info", test_rank_and_seg_info },
	{ "watcher_store", test_watcher_store },
};

KVS_TEST_MAIN(cases)
