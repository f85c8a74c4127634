/*
 * tests/numa_segment.c — data segment files in /dev/shm (hugetlb=off, so these
 * cases run anywhere and never touch the hugepage pool): create, then attach from
 * an exec'd process (another address) with bytes flowing both ways and no page
 * touched by the attach; file mode 0600 / 0660 + group whatever the umask; a
 * segment of another uid refused; -EEXIST; truncated or wrong-sized files are
 * -KVS_ECORRUPT; bad arguments; the placement query; numa=required without a node.
 * Seed: fixed, printed.
 */
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>

#include "numa_util.h"

#define SEED 0x5e97e11aull
#define STRIDE 4093 /* sample every STRIDE bytes: crosses every 4 KiB page */

static struct kvs_numa_seg_opts shm_opts(void)
{
	struct kvs_numa_seg_opts o;

	kvs_numa_seg_opts_init(&o);
	o.hugetlb = KVS_HUGETLB_OFF;
	return o;
}

static void fill(uint8_t *p, uint64_t from, uint64_t to, uint64_t seed)
{
	for (uint64_t off = from; off < to; off += STRIDE)
		p[off] = numa_test_byte(seed, off);
}

static kvs_test_rc check(const uint8_t *p, uint64_t from, uint64_t to, uint64_t seed)
{
	for (uint64_t off = from; off < to; off += STRIDE)
		if (p[off] != numa_test_byte(seed, off))
			KVS_FAILF("byte %" PRIu64 ": %u != %u", off, p[off], numa_test_byte(seed, off));
	return KVS_TEST_PASS;
}

/* --child attach <id> <backing> <page_bytes> <bytes>: attach, check that the
 * attach faulted nothing in, check the first half, write the second half. */
static kvs_test_rc child_attach(int argc, char **argv)
{
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	uint64_t bytes;

	if (argc != 4)
		KVS_FAILF("usage: --child attach <id> <backing> <page_bytes> <bytes>");
	bytes = strtoull(argv[3], NULL, 0);
	KVS_CHECK_OK(kvs_numa_seg_attach(argv[0], KVS_NUMA_NODE_NONE, (uint32_t)atoi(argv[1]),
					 strtoull(argv[2], NULL, 0), bytes, NULL, &seg));
	printf("  child %d: attached at %p\n", (int)getpid(), seg.base);
	KVS_CHECK_OK(kvs_numa_seg_query(&seg, &info));
	KVS_CHECK_EQ(info.mapped_bytes, 0);       /* attach touched no page */
	KVS_CHECK_EQ(info.resident_bytes, bytes); /* the creator's pages are all there */
	KVS_TRY(check(seg.base, 0, bytes / 2, SEED));
	fill(seg.base, bytes / 2, bytes, SEED + 1);
	kvs_numa_seg_detach(&seg);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_create_attach_exec(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	char id[64], a_backing[16], a_page[32], a_bytes[32];
	const uint64_t want = 8u << 20;

	printf("  seed 0x%llx\n", SEED);
	kvs_test_unique_id(id, sizeof(id), "attach");
	KVS_CHECK_OK(kvs_numa_seg_create(id, KVS_NUMA_NODE_NONE, want, &o, &seg));
	KVS_CHECK_EQ(seg.backing, KVS_NUMA_BACKING_SHM);
	KVS_CHECK_EQ(seg.bytes, want);
	KVS_CHECK(seg.base != NULL);
	printf("  parent: created %s at %p\n", seg.path, seg.base);
	fill(seg.base, 0, seg.bytes / 2, SEED);

	snprintf(a_backing, sizeof(a_backing), "%u", seg.backing);
	snprintf(a_page, sizeof(a_page), "%" PRIu64, seg.page_bytes);
	snprintf(a_bytes, sizeof(a_bytes), "%" PRIu64, seg.bytes);
	const char *args[] = { id, a_backing, a_page, a_bytes, NULL };
	pid_t pid = kvs_test_spawn("attach", args);
	KVS_CHECK(pid > 0);
	int rc = kvs_test_reap(pid, 20000);
	kvs_test_rc seen = KVS_TEST_PASS;
	if (rc == 0)
		seen = check(seg.base, seg.bytes / 2, seg.bytes, SEED + 1);
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, KVS_NUMA_NODE_NONE, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_EQ(rc, 0);
	KVS_TRY(seen);
	return KVS_TEST_PASS;
}

static int file_stat(const char *path, struct stat *st)
{
	return stat(path, st) == 0 ? 0 : -errno;
}

static kvs_test_rc test_mode_0600(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	struct stat st;
	char id[64];
	mode_t old = umask(0);

	kvs_test_unique_id(id, sizeof(id), "m600");
	int rc = kvs_numa_seg_create(id, 0, 1, &o, &seg);
	umask(old);
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(file_stat(seg.path, &st));
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_EQ(st.st_mode & 07777, 0600);
	KVS_CHECK_EQ(st.st_uid, geteuid());
	KVS_CHECK_EQ(st.st_size, KVS_NUMA_DEFAULT_PAGE_BYTES); /* rounded up */
	return KVS_TEST_PASS;
}

static kvs_test_rc test_mode_0660_group(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	struct stat st;
	char id[64];
	mode_t old = umask(077); /* fchmod, not the umask, decides */

	o.gid = getegid();
	kvs_test_unique_id(id, sizeof(id), "m660");
	int rc = kvs_numa_seg_create(id, 0, 1, &o, &seg);
	umask(old);
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(file_stat(seg.path, &st));
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_EQ(st.st_mode & 07777, 0660);
	KVS_CHECK_EQ(st.st_gid, getegid());
	return KVS_TEST_PASS;
}

#define NOBODY 65534

/* Forked: become nobody:nogroup and create the segment with group nogroup. */
static kvs_test_rc create_as_nobody(void *arg)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;

	if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
		KVS_FAILF("cannot become nobody: %s", strerror(errno));
	o.gid = NOBODY;
	KVS_CHECK_ERR(kvs_numa_seg_create(arg, 0, 1, &o, &seg), 0);
	kvs_numa_seg_detach(&seg); /* the file stays */
	return KVS_TEST_PASS;
}

static kvs_test_rc test_other_uid_refused(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;
	char id[64];

	if (geteuid() != 0)
		KVS_SKIP("needs root to create a segment as another uid (nobody)");
	kvs_test_unique_id(id, sizeof(id), "uid");
	numa_test_log_init(&l, &log);
	o.log = &log;
	pid_t pid = kvs_test_fork(create_as_nobody, id);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 20000), 0);

	int refused = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_SHM, 0,
					  KVS_NUMA_DEFAULT_PAGE_BYTES, &o, &seg);
	int base_null = seg.base == NULL;
	/* The 0660 + group configuration admits the group's other uids. */
	o.gid = NOBODY;
	int admitted = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_SHM, 0,
					   KVS_NUMA_DEFAULT_PAGE_BYTES, &o, &seg);
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_ERR(refused, -EACCES);
	KVS_CHECK(base_null);
	KVS_CHECK(numa_test_log_has(&l, "owned by uid 65534"));
	KVS_CHECK_OK(admitted);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_exists(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg, seg2;
	char id[64];

	kvs_test_unique_id(id, sizeof(id), "exists");
	KVS_CHECK_OK(kvs_numa_seg_create(id, 3, 1, &o, &seg));
	int rc = kvs_numa_seg_create(id, 3, 1, &o, &seg2);
	KVS_CHECK(seg2.base == NULL && seg2.fd == -1);
	KVS_CHECK(strstr(seg.path, ".data.3") != NULL); /* the node names the file */
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 3, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_ERR(rc, -EEXIST);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_truncated(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	char id[64], path[PATH_MAX];
	uint64_t bytes;

	kvs_test_unique_id(id, sizeof(id), "trunc");
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, 4u << 20, &o, &seg));
	bytes = seg.bytes;
	strcpy(path, seg.path);
	kvs_numa_seg_detach(&seg);
	int wrong = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_SHM, 0, bytes * 2, NULL, &seg);
	int trunc_rc = truncate(path, (off_t)(bytes / 2)) == 0 ? 0 : -errno;
	int truncated = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_SHM, 0, bytes, NULL, &seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	int gone = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_SHM, 0, bytes, NULL, &seg);
	KVS_CHECK_ERR(wrong, -KVS_ECORRUPT);
	KVS_CHECK_OK(trunc_rc);
	KVS_CHECK_ERR(truncated, -KVS_ECORRUPT);
	KVS_CHECK_ERR(gone, -ENOENT);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_args(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	char long_id[80];
	static const char *const bad_ids[] = { "", "../x", "a/b", "..", "x..y", NULL };

	memset(long_id, 'a', 65);
	long_id[65] = '\0';
	for (int i = 0; bad_ids[i]; i++)
		KVS_CHECK_ERR(kvs_numa_seg_create(bad_ids[i], 0, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create(NULL, 0, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create(long_id, 0, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", KVS_NUMA_MAX_NODES, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", -2, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 0, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, UINT64_MAX, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 1, &o, NULL), -EINVAL);
	o.file_mode = 0644;
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 1, &o, &seg), -EINVAL);
	o = shm_opts();
	o.page_bytes = 3000;
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 1, &o, &seg), -EINVAL);
	o = shm_opts();
	o.hugetlb = 7;
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 1, &o, &seg), -EINVAL);
	o = shm_opts();
	o.gid = -2;
	KVS_CHECK_ERR(kvs_numa_seg_create("ok", 0, 1, &o, &seg), -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_attach("ok", 0, KVS_NUMA_BACKING_NONE, 0, 4096, NULL, &seg),
		      -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_attach("../ok", 0, KVS_NUMA_BACKING_SHM, 0, 4096, NULL, &seg),
		      -EINVAL);
	KVS_CHECK_ERR(kvs_numa_seg_unlink("t.absent.nothing", 0, KVS_NUMA_BACKING_SHM, 0, NULL),
		      -ENOENT);
	KVS_CHECK_ERR(kvs_numa_seg_query(&seg, &(struct kvs_numa_seg_info){ 0 }), -EINVAL);
	/* Teardown tolerates NULL, zeroed and already-detached segs. */
	memset(&seg, 0, sizeof(seg));
	kvs_numa_seg_detach(&seg);
	kvs_numa_seg_detach(&seg);
	kvs_numa_seg_detach(NULL);
	KVS_CHECK_EQ(seg.fd, -1);
	KVS_CHECK(strcmp(kvs_numa_backing_name(KVS_NUMA_BACKING_SHM), "shm") == 0);
	KVS_CHECK(strcmp(kvs_numa_backing_name(KVS_NUMA_BACKING_HUGETLB), "hugetlb") == 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_query_shm(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	char id[64];
	uint64_t sum = 0;

	kvs_test_unique_id(id, sizeof(id), "query");
	KVS_CHECK_OK(kvs_numa_seg_create(id, KVS_NUMA_NODE_NONE, 6u << 20, &o, &seg));
	int rc = kvs_numa_seg_query(&seg, &info);
	uint64_t bytes = seg.bytes;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, KVS_NUMA_NODE_NONE, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_OK(rc);
	for (int n = 0; n < KVS_NUMA_MAX_NODES; n++)
		sum += info.node_bytes[n];
	KVS_CHECK_EQ(info.backing, KVS_NUMA_BACKING_SHM);
	KVS_CHECK_EQ(info.page_bytes, (uint64_t)sysconf(_SC_PAGESIZE));
	KVS_CHECK_EQ(info.resident_bytes, bytes); /* pre-faulted: all there */
	KVS_CHECK_EQ(info.mapped_bytes, bytes);   /* and all mapped by the creator */
	KVS_CHECK_EQ(sum, bytes);
	return KVS_TEST_PASS;
}

/* The pre-fault splits the pages over any number of threads, evenly or not. */
static kvs_test_rc test_prefault_threads(void)
{
	static const uint32_t threads[] = { 1, 3, 7, 64, 0 };
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	char id[64];

	kvs_test_unique_id(id, sizeof(id), "threads");
	for (size_t i = 0; i < KVS_ARRAY_LEN(threads); i++) {
		o.prefault_threads = threads[i];
		KVS_CHECK_OK(kvs_numa_seg_create(id, 0, 3u << 20, &o, &seg));
		int rc = kvs_numa_seg_query(&seg, &info);
		uint64_t bytes = seg.bytes;
		kvs_numa_seg_detach(&seg);
		KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
		KVS_CHECK_OK(rc);
		KVS_CHECK_EQ(info.mapped_bytes, bytes);
		KVS_CHECK_EQ(info.resident_bytes, bytes);
	}
	return KVS_TEST_PASS;
}

/* numa=required needs a node to bind to; the plain build never binds. */
static kvs_test_rc test_numa_required(void)
{
	struct kvs_numa_seg_opts o = shm_opts();
	struct kvs_numa_seg seg;
	char id[64];

	o.numa = KVS_NUMA_REQUIRED;
	kvs_test_unique_id(id, sizeof(id), "numareq");
	KVS_CHECK_ERR(kvs_numa_seg_create(id, KVS_NUMA_NODE_NONE, 1, &o, &seg), -EOPNOTSUPP);
	if (!KVS_KERNEL)
		KVS_CHECK_ERR(kvs_numa_seg_create(id, 0, 1, &o, &seg), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL), -ENOENT);
	/* numa=off: never bound, whatever the node. */
	o.numa = KVS_NUMA_OFF;
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, 1, &o, &seg));
	int32_t node = seg.node;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_EQ(node, KVS_NUMA_NODE_NONE);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "create_attach_exec", test_create_attach_exec },
	{ "mode_0600", test_mode_0600 },
	{ "mode_0660_group", test_mode_0660_group },
	{ "other_uid_refused", test_other_uid_refused },
	{ "exists", test_exists },
	{ "truncated", test_truncated },
	{ "bad_args", test_bad_args },
	{ "query_shm", test_query_shm },
	{ "prefault_threads", test_prefault_threads },
	{ "numa_required", test_numa_required },
};

static const struct kvs_test_child children[] = {
	{ "attach", child_attach },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
