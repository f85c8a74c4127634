/*
 * tests/numa_hugetlb.c — data segments on the hugetlbfs pool (label hugetlb,
 * RUN_SERIAL: the cases measure the machine-wide pool).
 *
 * The kernel build: a shared hugetlbfs mapping reserves its pages at mmap time
 * (the kernel behaviour the design relies on, checked directly); a segment takes
 * exactly its page count from the pool, lands on node 0 and is resident; an
 * exec'd attacher sees the bytes, faults nothing in and reserves nothing; a
 * request larger than the pool is -KVS_ENOHUGE with hugetlb=required and leaves
 * no file and no reservation, and falls back to /dev/shm (logged) with
 * hugetlb=auto; a page size without a mount (1 GiB) takes the same two paths,
 * and a mount another user cannot write is said to be that, not a short pool.
 * The plain build: always /dev/shm, hugetlb=required is -EOPNOTSUPP, and it
 * attaches a hugetlbfs segment made by someone else (a mixed node).
 * Skips (77) when the machine has no 2 MiB hugetlbfs mount or pool.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "numa_util.h"

#define HPAGE (UINT64_C(2) << 20)
#define SEED 0x4a9e7ull

struct pool {
	long long free, rsvd;
};

static struct pool pool_now(void)
{
	return (struct pool){ hugetlb_test_meminfo("HugePages_Free"),
			      hugetlb_test_meminfo("HugePages_Rsvd") };
}

/* Skip unless there is a 2 MiB hugetlbfs mount with at least min_avail pages
 * free and unreserved; mount gets its path. */
#define NEED_POOL(mount, min_avail)                                                     \
	do {                                                                            \
		struct pool p_ = pool_now();                                            \
		if (hugetlb_test_meminfo("Hugepagesize") != 2048)                          \
			KVS_SKIP("default huge page size is not 2 MiB");                \
		if (hugetlb_test_mount(mount, sizeof(mount)) != 0)                 \
			KVS_SKIP("no 2 MiB hugetlbfs mount (mount -t hugetlbfs -o pagesize=2M none /dev/hugepages)"); \
		if (p_.free - p_.rsvd < (min_avail))                                    \
			KVS_SKIP("hugepage pool: %lld free, %lld reserved, want %d "    \
				 "(sysctl vm.nr_hugepages=512)", p_.free, p_.rsvd, (int)(min_avail)); \
	} while (0)

static struct kvs_numa_seg_opts huge_opts(uint32_t mode, const struct kvs_log *log)
{
	struct kvs_numa_seg_opts o;

	kvs_numa_seg_opts_init(&o);
	o.hugetlb = mode;
	o.log = log;
	return o;
}

static kvs_test_rc test_mmap_reserves(void)
{
	char mount[PATH_MAX], path[PATH_MAX + 64], id[64];
	const long long n = 4;

	if (!KVS_KERNEL)
		KVS_SKIP("a kernel property: checked by the kernel variant");
	NEED_POOL(mount, n);
	snprintf(path, sizeof(path), "%s/%s", mount, kvs_test_unique_id(id, sizeof(id), "resv"));
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	KVS_CHECK(fd >= 0);
	unlink(path); /* the open fd keeps it */
	struct pool before = pool_now();
	KVS_CHECK_OK(ftruncate(fd, (off_t)(n * HPAGE)) == 0 ? 0 : -errno);
	struct pool sized = pool_now();
	void *p = mmap(NULL, n * HPAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	struct pool mapped = pool_now();
	if (p != MAP_FAILED)
		munmap(p, n * HPAGE);
	struct pool unmapped = pool_now();
	int trunc = ftruncate(fd, 0);
	struct pool truncated = pool_now();
	close(fd);
	KVS_CHECK(p != MAP_FAILED);
	KVS_CHECK_EQ(trunc, 0);
	KVS_CHECK_EQ(sized.rsvd, before.rsvd);          /* ftruncate reserves nothing */
	KVS_CHECK_EQ(mapped.rsvd, before.rsvd + n);     /* mmap MAP_SHARED reserves all */
	KVS_CHECK_EQ(mapped.free, before.free);         /* ... without allocating */
	KVS_CHECK_EQ(unmapped.rsvd, before.rsvd + n);   /* the file keeps the reservation */
	KVS_CHECK_EQ(truncated.rsvd, before.rsvd);      /* truncating gives it back */
	return KVS_TEST_PASS;
}

/* --child attach <id> <page_bytes> <bytes>: attach the hugetlb segment, check it
 * faulted nothing in and reserved nothing, check the first half, write the second. */
static kvs_test_rc child_attach(int argc, char **argv)
{
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	struct pool before = pool_now();
	uint64_t bytes;

	if (argc != 3)
		KVS_FAILF("usage: --child attach <id> <page_bytes> <bytes>");
	bytes = strtoull(argv[2], NULL, 0);
	KVS_CHECK_OK(kvs_numa_seg_attach(argv[0], 0, KVS_NUMA_BACKING_HUGETLB,
					 strtoull(argv[1], NULL, 0), bytes, NULL, &seg));
	struct pool after = pool_now();
	printf("  child %d: attached at %p\n", (int)getpid(), seg.base);
	KVS_CHECK_EQ(after.rsvd, before.rsvd);
	KVS_CHECK_EQ(after.free, before.free);
	KVS_CHECK_OK(kvs_numa_seg_query(&seg, &info));
	KVS_CHECK_EQ(info.mapped_bytes, 0);
	KVS_CHECK_EQ(info.resident_bytes, bytes);
	KVS_CHECK_EQ(info.page_bytes, HPAGE);
	uint8_t *p = seg.base;
	for (uint64_t off = 0; off < bytes / 2; off += 4099)
		KVS_CHECK_EQ(p[off], numa_test_byte(SEED, off));
	for (uint64_t off = bytes / 2; off < bytes; off += 4099)
		p[off] = numa_test_byte(SEED + 1, off);
	kvs_numa_seg_detach(&seg);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_pool_accounting(void)
{
	char mount[PATH_MAX], id[64], a_page[32], a_bytes[32];
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	const long long n = 8;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	NEED_POOL(mount, n);
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_REQUIRED, &log);
	kvs_test_unique_id(id, sizeof(id), "pool");
	struct pool before = pool_now();
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, n * HPAGE - 12345, &o, &seg));
	struct pool created = pool_now();
	int qrc = kvs_numa_seg_query(&seg, &info);
	uint8_t *p = seg.base;
	for (uint64_t off = 0; off < seg.bytes / 2; off += 4099)
		p[off] = numa_test_byte(SEED, off);

	snprintf(a_page, sizeof(a_page), "%" PRIu64, seg.page_bytes);
	snprintf(a_bytes, sizeof(a_bytes), "%" PRIu64, seg.bytes);
	const char *args[] = { id, a_page, a_bytes, NULL };
	pid_t pid = kvs_test_spawn("attach", args);
	int child = pid > 0 ? kvs_test_reap(pid, 20000) : -1;
	int seen = 1;
	for (uint64_t off = seg.bytes / 2; off < seg.bytes; off += 4099)
		seen &= p[off] == numa_test_byte(SEED + 1, off);
	printf("  segment %s: node %d, %lld -> %lld free, %lld -> %lld reserved\n", seg.path,
	       (int)seg.node, before.free, created.free, before.rsvd, created.rsvd);
	uint64_t bytes = seg.bytes;
	uint32_t backing = seg.backing;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_HUGETLB, 0, NULL));
	struct pool after = pool_now();

	KVS_CHECK_EQ(backing, KVS_NUMA_BACKING_HUGETLB);
	KVS_CHECK_EQ(bytes, n * HPAGE);
	KVS_CHECK_EQ(created.free, before.free - n); /* pages came from the pool */
	KVS_CHECK_EQ(created.rsvd, before.rsvd);     /* all faulted in: none left reserved */
	KVS_CHECK_OK(qrc);
	KVS_CHECK_EQ(info.backing, KVS_NUMA_BACKING_HUGETLB);
	KVS_CHECK_EQ(info.page_bytes, HPAGE);
	KVS_CHECK_EQ(info.resident_bytes, bytes);
	KVS_CHECK_EQ(info.mapped_bytes, bytes);
	KVS_CHECK_EQ(info.node_bytes[0], bytes); /* placed on node 0 */
	KVS_CHECK_EQ(child, 0);
	KVS_CHECK(seen);
	KVS_CHECK_EQ(after.free, before.free); /* all back after the unlink */
	KVS_CHECK_EQ(after.rsvd, before.rsvd);
	return KVS_TEST_PASS;
}

/* More pages than the pool can give, counting the overcommit headroom. */
static uint64_t too_many_bytes(void)
{
	struct kvs_numa_pool pool;
	struct pool p = pool_now();

	long long over = kvs_numa_hugetlb_pool(HPAGE, -1, &pool) == 0 ? (long long)pool.overcommit_pages : 0;
	return (uint64_t)(p.free - p.rsvd + over + 1) * HPAGE;
}

static int file_absent(const char *mount, const char *id)
{
	char path[PATH_MAX + 128];
	struct stat st;

	snprintf(path, sizeof(path), "%s/kvshare.%s.data.0", mount, id);
	return stat(path, &st) != 0 && errno == ENOENT;
}

static kvs_test_rc test_too_big_required(void)
{
	char mount[PATH_MAX], id[64];
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	NEED_POOL(mount, 1);
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_REQUIRED, &log);
	kvs_test_unique_id(id, sizeof(id), "big");
	uint64_t bytes = too_many_bytes();
	struct pool before = pool_now();
	int rc = kvs_numa_seg_create(id, 0, bytes, &o, &seg);
	struct pool after = pool_now();
	if (rc == 0) {
		kvs_numa_seg_detach(&seg);
		kvs_numa_seg_unlink(id, 0, seg.backing, 0, NULL);
	}
	KVS_CHECK_ERR(rc, -KVS_ENOHUGE);
	KVS_CHECK(seg.base == NULL);
	char want[96];
	snprintf(want, sizeof(want), "need %" PRIu64 " pages of 2048 kB on node 0,", bytes / HPAGE);
	KVS_CHECK(numa_test_log_has(&l, want));
	KVS_CHECK(file_absent(mount, id));
	KVS_CHECK_EQ(after.rsvd, before.rsvd);
	KVS_CHECK_EQ(after.free, before.free);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_too_big_auto(void)
{
	char mount[PATH_MAX], id[64];
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	NEED_POOL(mount, 1);
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_AUTO, &log);
	kvs_test_unique_id(id, sizeof(id), "bigauto");
	uint64_t bytes = too_many_bytes();
	struct pool before = pool_now();
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, bytes, &o, &seg));
	struct pool after = pool_now();
	uint32_t backing = seg.backing;
	uint64_t got = seg.bytes;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, backing, 0, NULL));
	KVS_CHECK_EQ(backing, KVS_NUMA_BACKING_SHM);
	KVS_CHECK_EQ(got, bytes);
	KVS_CHECK(numa_test_log_has(&l, "falling back to /dev/shm"));
	KVS_CHECK(file_absent(mount, id)); /* no hugetlbfs file left behind */
	KVS_CHECK_EQ(after.rsvd, before.rsvd);
	KVS_CHECK_EQ(after.free, before.free);
	return KVS_TEST_PASS;
}

/* A page size the kernel knows (or not) but nobody mounted: 1 GiB. */
static kvs_test_rc test_no_mount(void)
{
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;
	char id[64], mnt[PATH_MAX];
	FILE *f = fopen("/proc/self/mounts", "re");
	int has_1g = 0;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	while (f && fgets(mnt, sizeof(mnt), f))
		has_1g |= strstr(mnt, "hugetlbfs") && (strstr(mnt, "pagesize=1024M") ||
						       strstr(mnt, "pagesize=1G"));
	if (f)
		fclose(f);
	if (has_1g)
		KVS_SKIP("a 1 GiB hugetlbfs is mounted: cannot make the machine lack a mount");
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_REQUIRED, &log);
	o.page_bytes = UINT64_C(1) << 30;
	kvs_test_unique_id(id, sizeof(id), "nomount");
	KVS_CHECK_ERR(kvs_numa_seg_create(id, 0, 1, &o, &seg), -KVS_ENOHUGE);
	KVS_CHECK(numa_test_log_has(&l, "no hugetlbfs is mounted for 1048576 kB pages"));
	/* Attaching a hugetlb segment of that size: nothing to find. */
	KVS_CHECK_ERR(kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_HUGETLB, o.page_bytes, o.page_bytes,
					  NULL, &seg), -ENOENT);
	/* auto: the same size from /dev/shm (rounded to the wanted page size), logged. */
	o.hugetlb = KVS_HUGETLB_AUTO;
	o.page_bytes = UINT64_C(64) << 10; /* keeps the fallback small: no such hugetlbfs either */
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, 100000, &o, &seg));
	uint32_t backing = seg.backing;
	uint64_t bytes = seg.bytes;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, backing, 0, NULL));
	KVS_CHECK_EQ(backing, KVS_NUMA_BACKING_SHM);
	KVS_CHECK_EQ(bytes, 2 * (UINT64_C(64) << 10));
	KVS_CHECK(numa_test_log_has(&l, "falling back to /dev/shm"));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_plain_fallback(void)
{
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;
	char id[64];

	if (KVS_KERNEL)
		KVS_SKIP("the kernel build uses hugetlbfs (pool_accounting)");
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_REQUIRED, &log);
	kvs_test_unique_id(id, sizeof(id), "plain");
	KVS_CHECK_ERR(kvs_numa_seg_create(id, 0, HPAGE, &o, &seg), -EOPNOTSUPP);
	KVS_CHECK(numa_test_log_has(&l, "never uses hugetlbfs"));
	o.hugetlb = KVS_HUGETLB_AUTO;
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, HPAGE, &o, &seg));
	uint32_t backing = seg.backing;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, 0, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_EQ(backing, KVS_NUMA_BACKING_SHM);
	return KVS_TEST_PASS;
}

/* A hugetlbfs segment made without this library (as a kernel-build creator
 * would): both builds attach it in the directory its creator recorded (opts.dir),
 * and check that it is on hugetlbfs of the right page size. */
static kvs_test_rc test_attach_foreign(void)
{
	char mount[PATH_MAX], path[PATH_MAX + 128], id[64];
	struct kvs_numa_seg seg;
	const uint64_t bytes = 2 * HPAGE;

	NEED_POOL(mount, 2);
	kvs_test_unique_id(id, sizeof(id), "foreign");
	snprintf(path, sizeof(path), "%s/kvshare.%s.data.0", mount, id);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	KVS_CHECK(fd >= 0);
	int rc = ftruncate(fd, (off_t)bytes) == 0 ? 0 : -errno;
	uint8_t *p = rc == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
	close(fd);
	if (p != MAP_FAILED) {
		p[0] = 0xA5;
		p[bytes - 1] = 0x5A;
	}
	struct kvs_numa_seg_opts o;
	kvs_numa_seg_opts_init(&o);
	o.dir = mount;
	int arc = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_HUGETLB, 0, bytes, &o, &seg);
	int seen = arc == 0 && ((uint8_t *)seg.base)[0] == 0xA5 &&
		   ((uint8_t *)seg.base)[bytes - 1] == 0x5A;
	uint64_t page = seg.page_bytes;
	kvs_numa_seg_detach(&seg);
	int wrong = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_HUGETLB, 0, HPAGE, &o, &seg);
	o.dir = "/dev/shm"; /* not a hugetlbfs: refused whatever the record says */
	int notfs = kvs_numa_seg_attach(id, 0, KVS_NUMA_BACKING_HUGETLB, 0, bytes, &o, &seg);
	if (p != MAP_FAILED)
		munmap(p, bytes);
	unlink(path);
	KVS_CHECK_OK(rc);
	KVS_CHECK(p != MAP_FAILED);
	KVS_CHECK_OK(arc);
	KVS_CHECK(seen);
	KVS_CHECK_EQ(page, HPAGE);
	KVS_CHECK_ERR(wrong, -KVS_ECORRUPT);
	KVS_CHECK(notfs == -ENOENT || notfs == -KVS_ECORRUPT);
	return KVS_TEST_PASS;
}

/* --child unwritable <id>: as a user who cannot write the 2 MiB mount (a fresh
 * image, so libhugetlbfs scanned the mounts as this user): hugetlb=required is
 * -KVS_ENOHUGE saying the mount is not writable, not that the pool is short. */
static kvs_test_rc child_unwritable(int argc, char **argv)
{
	struct numa_test_log l;
	struct kvs_log log;
	struct kvs_numa_seg seg;

	if (argc != 1)
		KVS_FAILF("usage: --child unwritable <id>");
	numa_test_log_init(&l, &log);
	struct kvs_numa_seg_opts o = huge_opts(KVS_HUGETLB_REQUIRED, &log);
	KVS_CHECK_ERR(kvs_numa_seg_create(argv[0], 0, HPAGE, &o, &seg), -KVS_ENOHUGE);
	printf("  as uid %u:\n%s", (unsigned)geteuid(), l.text);
	KVS_CHECK(numa_test_log_has(&l, "is not writable by uid"));
	KVS_CHECK(!numa_test_log_has(&l, "need "));
	KVS_CHECK(!numa_test_log_has(&l, "no hugetlbfs is mounted"));
	return KVS_TEST_PASS;
}

/*
 * A root-owned 2 MiB mount (mode 0755) seen by another user, with the pool
 * full of free pages: "not writable", naming the mount (it said "no hugetlbfs
 * mount ... not enough huge pages", both false).  Needs root, to make the
 * child another user.
 */
static kvs_test_rc test_mount_not_writable(void)
{
	char mount[PATH_MAX], id[64];
	struct stat st;
	pid_t pid;
	int rc;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	NEED_POOL(mount, 1);
	if (geteuid() != 0)
		KVS_SKIP("needs root (to run the child as another user)");
	KVS_CHECK_OK(stat(mount, &st) == 0 ? 0 : -errno);
	if (st.st_mode & S_IWOTH)
		KVS_SKIP("%s is world-writable: no user lacks access", mount);
	kvs_test_unique_id(id, sizeof(id), "unwr");
	fflush(NULL);
	pid = fork();
	KVS_CHECK(pid >= 0);
	if (pid == 0) {
		char *argv[] = { program_invocation_name, (char *)"--child", (char *)"unwritable", id, NULL };

		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	rc = kvs_test_reap(pid, 20000);
	if (rc == 3)
		KVS_SKIP("cannot become uid/gid 65534");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "mmap_reserves", test_mmap_reserves },
	{ "pool_accounting", test_pool_accounting },
	{ "too_big_required", test_too_big_required },
	{ "too_big_auto", test_too_big_auto },
	{ "no_mount", test_no_mount },
	{ "mount_not_writable", test_mount_not_writable },
	{ "plain_fallback", test_plain_fallback },
	{ "attach_foreign", test_attach_foreign },
};

static const struct kvs_test_child children[] = {
	{ "attach", child_attach },
	{ "unwritable", child_unwritable },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
