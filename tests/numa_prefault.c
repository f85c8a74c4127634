/*
 * tests/numa_prefault.c — the creator's multi-threaded pre-fault (numa/place.c):
 * a new data segment is fully backed when create returns, whatever the number
 * of threads, in both backings, and the record of how it was done (threads,
 * time) reaches the cache's stats and every attacher.
 *
 * "Fully backed" is checked three independent ways: the file's allocated blocks
 * (st_blocks: the pages exist, whoever mapped them), mincore(2) on the
 * creator's mapping (every page resident), and move_pages(2) through
 * kvs_numa_seg_query (every page present in the creator's page tables).  A
 * thread that skipped its range, or ranges that do not tile the segment, fail
 * all three.  hugetlb cases need a 2 MiB hugetlbfs pool and skip (77) without.
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "core/core.h"
#include "numa_util.h"

#define MIB (UINT64_C(1) << 20)

/* Every page of seg is backed and mapped here. */
static kvs_test_rc check_backed(const struct kvs_numa_seg *seg)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t n = (size_t)(seg->bytes / (uint64_t)page);
	unsigned char *vec = malloc(n);
	struct kvs_numa_seg_info info;
	struct stat st;
	size_t missing = 0;

	KVS_CHECK(vec != NULL);
	if (mincore(seg->base, seg->bytes, vec) != 0) {
		free(vec);
		KVS_FAILF("mincore: %s", strerror(errno));
	}
	for (size_t i = 0; i < n; i++)
		missing += !(vec[i] & 1);
	free(vec);
	KVS_CHECK_EQ(missing, 0);
	KVS_CHECK_EQ(fstat(seg->fd, &st), 0);
	KVS_CHECK_EQ((uint64_t)st.st_blocks * 512, seg->bytes);
	KVS_CHECK_OK(kvs_numa_seg_query(seg, &info));
	KVS_CHECK_EQ(info.mapped_bytes, seg->bytes);
	KVS_CHECK_EQ(info.resident_bytes, seg->bytes);
	return KVS_TEST_PASS;
}

/* Create bytes (hugetlb: KVS_HUGETLB_OFF or _REQUIRED) with threads pre-fault
 * threads, check it is backed and that the record says how. */
static kvs_test_rc create_checked(uint32_t hugetlb, uint64_t bytes, uint32_t threads)
{
	struct kvs_numa_seg_opts o;
	struct kvs_numa_seg seg;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t pages, ns;
	uint32_t ran, backing;
	char id[64];
	kvs_test_rc rc;

	kvs_numa_seg_opts_init(&o);
	o.hugetlb = hugetlb;
	o.prefault_threads = threads;
	kvs_test_unique_id(id, sizeof(id), "prefault");
	KVS_CHECK_OK(kvs_numa_seg_create(id, 0, bytes, &o, &seg));
	kvs_numa_seg_unlink(id, 0, seg.backing, o.page_bytes, NULL); /* the mapping stays */
	rc = check_backed(&seg);
	pages = seg.bytes / seg.page_bytes;
	ran = seg.prefault_threads;
	ns = seg.prefault_ns;
	backing = seg.backing;
	kvs_numa_seg_detach(&seg);
	printf("  %s %llu pages, threads %u: %u ran, %.2f ms\n", kvs_numa_backing_name(backing),
	       (unsigned long long)pages, threads, ran, (double)ns / 1e6);
	KVS_TRY(rc);
	if (hugetlb == KVS_HUGETLB_REQUIRED)
		KVS_CHECK_EQ(backing, KVS_NUMA_BACKING_HUGETLB);
	if (threads)
		KVS_CHECK_EQ(ran, threads < pages ? threads : pages);
	else /* one per CPU the threads may run on, at most 16 */
		KVS_CHECK(ran >= 1 && ran <= 16 && (long)ran <= cpus);
	KVS_CHECK(ns > 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_threads_shm(void)
{
	static const uint32_t threads[] = { 1, 2, 3, 0, 64 };

	for (size_t i = 0; i < KVS_ARRAY_LEN(threads); i++)
		KVS_TRY(create_checked(KVS_HUGETLB_OFF, 8 * MIB + 4096, threads[i]));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_threads_hugetlb(void)
{
	static const uint32_t threads[] = { 1, 2, 4, 0 };
	char mount[PATH_MAX];
	long long free_pages = hugetlb_test_meminfo("HugePages_Free");
	long long rsvd = hugetlb_test_meminfo("HugePages_Rsvd");

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build never uses hugetlbfs");
	if (hugetlb_test_meminfo("Hugepagesize") != 2048 ||
	    hugetlb_test_mount(mount, sizeof(mount)) != 0)
		KVS_SKIP("no 2 MiB hugetlbfs mount (mount -t hugetlbfs -o pagesize=2M none /dev/hugepages)");
	if (free_pages - rsvd < 16)
		KVS_SKIP("hugepage pool: %lld free, %lld reserved, want 16 (sysctl vm.nr_hugepages=512)",
			 free_pages, rsvd);
	for (size_t i = 0; i < KVS_ARRAY_LEN(threads); i++)
		KVS_TRY(create_checked(KVS_HUGETLB_REQUIRED, 16 * MIB, threads[i]));
	/* More threads than huge pages: one page each. */
	KVS_TRY(create_checked(KVS_HUGETLB_REQUIRED, 3 * 2 * MIB, 8));
	return KVS_TEST_PASS;
}

/* An attacher reads the creator's record: the threads and time its stats show. */
struct attach_want {
	const char *uid;
	struct kvs_cache_stats cs;
};

static kvs_test_rc child_attach(void *arg)
{
	const struct attach_want *w = arg;
	struct kvs_cache_config cfg;
	struct kvs_cache_stats cs;
	struct kvs_cache_seg_info si;
	struct kvs_cache *c;

	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", w->uid);
	cfg.device_id = 1;
	cfg.flags = KVS_CACHE_ATTACH;
	cfg.prefault_threads = 7; /* the creator's choice stands */
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	int rc = kvs_cache_stats(c, KVS_STATS_NODE, &cs);
	int rs = kvs_cache_seg_info(c, 0, &si);
	kvs_cache_close(c);
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(rs);
	KVS_CHECK_EQ(cs.prefault_threads, w->cs.prefault_threads);
	KVS_CHECK_EQ(cs.prefault_ns, w->cs.prefault_ns);
	KVS_CHECK_EQ(cs.data_bytes, w->cs.data_bytes);
	KVS_CHECK_EQ(si.prefault_threads, w->cs.prefault_threads);
	KVS_CHECK_EQ(si.prefault_ns, w->cs.prefault_ns);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_cache_stats(void)
{
	struct kvs_cache_config cfg;
	struct attach_want w;
	struct kvs_cache *c;
	char uid[64];
	int rc;

	kvs_cache_config_init(&cfg);
	kvs_test_unique_id(uid, sizeof(uid), "pfstats");
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", uid);
	cfg.device_id = 0;
	cfg.slot_bytes = MIB;
	cfg.slot_count = 16;
	cfg.hugetlb = KVS_HUGETLB_OFF;
	cfg.prefault_threads = 65;
	KVS_CHECK_ERR(kvs_cache_open(&cfg, &c), -EINVAL);
	cfg.prefault_threads = 2;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	rc = kvs_cache_stats(c, KVS_STATS_NODE, &w.cs);
	w.uid = uid;
	if (rc == 0) {
		printf("  16 MiB shm, 2 threads: %.2f ms, %.1f ms/GiB\n", (double)w.cs.prefault_ns / 1e6,
		       w.cs.prefault_ms_per_gib);
		rc = kvs_test_reap(kvs_test_fork(child_attach, &w), 30000);
	}
	kvs_cache_close(c);
	KVS_CHECK_OK(rc);
	KVS_CHECK_EQ(rc, 0);
	KVS_CHECK_EQ(w.cs.prefault_threads, 2);
	KVS_CHECK_EQ(w.cs.data_bytes, 16 * MIB);
	KVS_CHECK(w.cs.prefault_ns > 0);
	KVS_CHECK(w.cs.prefault_ms_per_gib > 0);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "threads_shm", test_threads_shm },
	{ "threads_hugetlb", test_threads_hugetlb },
	{ "cache_stats", test_cache_stats },
};

KVS_TEST_MAIN(cases)
