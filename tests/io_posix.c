/*
 * tests/io_posix.c — the posix backend through both engines: dumps and reads
 * round-trip with every byte checked, sub-shard reads, lookup only after the last
 * shard, O_DIRECT (and its alignment errors at open and submit), a missing block
 * (-ENOENT), a truncated block file and fault-injected EIO/short reads (-EIO,
 * never a partial count), the in-flight limit (-EAGAIN), config validation with a
 * log line naming the field, fd-cache eviction and re-dump of a cached block,
 * io_uring's fixed buffers pinned chunk by chunk on first use (fixed_first_use).
 * Writes held or failed by interposing pwrite and fdatasync (slow_writes_pool,
 * header_fails_pool, fsync_fails_pool): starting the dumps of new blocks never
 * waits for storage, and a failed block header, fsync or rename fails the
 * block's dump on one write's completion, leaving no temp file (rename_fails_*
 * on both engines).  What a block file holds (another geometry, hostile
 * headers) is tests/io_posix_file.c's, the crash cleanup (writers killed -9,
 * concurrent dumpers) tests/io_posix_crash.c's.
 *
 * Two groups of cases, two CTest tests of this binary:
 *   io_posix        (default) the pool engine's cases and the engine-neutral
 *                   ones (io_engine=auto: io_uring in the kernel variant where
 *                   allowed; io_engine=uring must be -EOPNOTSUPP in the plain one);
 *   io_posix_uring  (--uring) the engine cases again on io_uring; each skips
 *                   with the reason in the plain variant or where io_uring is
 *                   refused, and a run where all of them skipped exits 77, so
 *                   CTest shows Skipped, not Passed.
 * Roots are fresh directories under /tmp (O_DIRECT is skipped with the reason
 * where /tmp's filesystem cannot do it).  Seeds are fixed and printed.
 */
#include <sys/mman.h>

#include "io_posix_util.h"

/* slow_writes_pool: every pwrite held this long (slow storage), new blocks dumped. */
#define HOLD_MS 50
#define SLOW_BLOCKS 8


/*
 * pwrite and fdatasync of this whole process, interposed.  The library is
 * linked into this program statically, so its calls (the pool engine's
 * workers'; the issuer's own, were it to write) bind to these definitions at
 * link time; the sanitizer runtimes' interceptors, in shared libraries, lose to
 * a program's own definitions the same way.  slow_writes_pool checks that its
 * pwrites were held, so a build where they were not fails rather than passing
 * vacuously.  The io_uring engine makes neither call: the kernel writes.
 *
 * Off unless a case sets them: every pwrite sleeps g_hold_ms first; a pwrite at
 * offset 0 (only a block header lives there) fails with g_fail_hdr_errno;
 * fdatasync fails with g_fail_sync_errno.  Relaxed atomics: the test thread sets
 * them before a submit and clears them after the reaps, and the pool's mutex
 * (submission and completion lists) orders both against the worker's calls.
 */
static int g_hold_ms, g_fail_hdr_errno, g_fail_sync_errno;
static unsigned g_held; /* pwrites held so far */

static void hooks_off(void)
{
	__atomic_store_n(&g_hold_ms, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g_fail_hdr_errno, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g_fail_sync_errno, 0, __ATOMIC_RELAXED);
}

static ssize_t hooked_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int hold_ms = __atomic_load_n(&g_hold_ms, __ATOMIC_RELAXED);
	int fail = __atomic_load_n(&g_fail_hdr_errno, __ATOMIC_RELAXED);

	if (hold_ms) {
		struct timespec ts = { 0, hold_ms * 1000000L };

		__atomic_add_fetch(&g_held, 1, __ATOMIC_RELAXED);
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (fail && off == 0) {
		errno = fail;
		return -1;
	}
	return syscall(SYS_pwrite64, fd, buf, n, off);
}

/* Named by their symbols: <unistd.h> may redirect pwrite to pwrite64. */
ssize_t kvs_test_pwrite(int fd, const void *buf, size_t n, off_t off) __asm__("pwrite");
ssize_t kvs_test_pwrite64(int fd, const void *buf, size_t n, off_t off) __asm__("pwrite64");
int kvs_test_fdatasync(int fd) __asm__("fdatasync");

ssize_t kvs_test_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return hooked_pwrite(fd, buf, n, off);
}

ssize_t kvs_test_pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	return hooked_pwrite(fd, buf, n, off);
}

int kvs_test_fdatasync(int fd)
{
	int fail = __atomic_load_n(&g_fail_sync_errno, __ATOMIC_RELAXED);

	if (fail) {
		errno = fail;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}


/* The whole round trip with one engine (and optionally O_DIRECT). */
static kvs_test_rc roundtrip(uint32_t engine, uint32_t flags)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	unsigned char *wbuf = alloc_aligned((size_t)SPB * SHARD);
	unsigned char *rbuf = alloc_aligned((size_t)SPB * SHARD);
	int rc;

	KVS_CHECK(wbuf && rbuf);
	KVS_CHECK_OK(root_init("rt"));
	cfg_posix(&cfg, engine);
	cfg.flags = flags;
	rc = kvs_backend_open(&cfg, &b);
	if (rc == -EOPNOTSUPP && (flags & KVS_BACKEND_F_IO_DIRECT)) {
		free(wbuf);
		free(rbuf);
		root_fini();
		KVS_SKIP("O_DIRECT not supported under /tmp: %s", g_log);
	}
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	printf("engine=%u flags=0x%x dio=%u/%u seed=0x%x\n", info.io_engine, info.flags,
	       info.dio_mem_align, info.dio_offset_align, SEED);
	KVS_CHECK_EQ(info.kind, KVS_BACKEND_POSIX);
	if (engine != KVS_IO_ENGINE_AUTO)
		KVS_CHECK_EQ(info.io_engine, engine);
	KVS_CHECK_EQ(!!(info.flags & KVS_BACKEND_INFO_IO_DIRECT), !!(flags & KVS_BACKEND_F_IO_DIRECT));

	/* The block appears only when its last shard is written. */
	KVS_CHECK_EQ(kvs_backend_lookup(b, &(struct kvs_block_id){ 0 }), 0);
	KVS_CHECK_OK(dump_block(b, 1, wbuf, SPB - 1));
	struct kvs_block_id id1 = block_of(1);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id1), 0);
	{
		struct kvs_backend_io io = { .block = id1, .shard = SPB - 1,
					     .buf = wbuf + (size_t)(SPB - 1) * SHARD, .len = SHARD,
					     .token = 7 };
		struct kvs_backend_completion c;
		fill_pattern(io.buf, 1, SPB - 1, 0, SHARD);
		KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.token, 7);
		KVS_CHECK_EQ(c.result, SHARD);
	}
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id1), 1);
	KVS_CHECK_OK(dump_block(b, 2, wbuf, SPB));

	/* Read every shard of both blocks back, all in flight at once. */
	memset(rbuf, 0, (size_t)SPB * SHARD);
	for (uint32_t blk = 1; blk <= 2; blk++) {
		for (uint32_t s = 0; s < SPB; s++) {
			struct kvs_backend_io io = { .block = block_of(blk), .shard = s,
						     .buf = rbuf + (size_t)s * SHARD, .len = SHARD,
						     .token = s };
			KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
		}
		for (uint32_t s = 0; s < SPB; s++) {
			struct kvs_backend_completion c;
			KVS_CHECK_EQ(wait_one(b, &c), 1);
			KVS_CHECK_EQ(c.result, SHARD);
		}
		for (uint32_t s = 0; s < SPB; s++)
			for (uint64_t i = 0; i < SHARD; i++)
				if (rbuf[(size_t)s * SHARD + i] != pattern(blk, s, i))
					KVS_FAILF("block %u shard %u byte %llu wrong", blk, s,
						  (unsigned long long)i);
	}

	/* A sub-shard read (aligned for O_DIRECT). */
	{
		uint64_t off = 8192, len = 3 * 4096;
		struct kvs_backend_io io = { .block = block_of(2), .shard = 2, .buf = rbuf,
					     .offset = off, .len = len, .token = 42 };
		struct kvs_backend_completion c;
		KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.token, 42);
		KVS_CHECK_EQ(c.result, len);
		for (uint64_t i = 0; i < len; i++)
			KVS_CHECK_EQ(rbuf[i], pattern(2, 2, off + i));
	}

	/* Missing block: refused at submit, no completion. */
	{
		struct kvs_backend_io io = { .block = block_of(99), .shard = 0, .buf = rbuf,
					     .len = SHARD };
		struct kvs_backend_completion c;
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -ENOENT);
		KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 0), 0);
	}

	/* O_DIRECT: a misaligned buffer is -EINVAL at submit, with a log line. */
	if (flags & KVS_BACKEND_F_IO_DIRECT) {
		struct kvs_backend_io io = { .block = block_of(1), .shard = 0, .buf = rbuf + 1,
					     .len = 4096 };
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -EINVAL);
		KVS_CHECK(strstr(g_log, "io_direct") != NULL);
	}
	kvs_backend_close(b);
	free(wbuf);
	free(rbuf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_roundtrip_pool(void)
{
	return roundtrip(KVS_IO_ENGINE_POOL, 0);
}

static kvs_test_rc test_roundtrip_uring(void)
{
	SKIP_WITHOUT_URING();
	return roundtrip(KVS_IO_ENGINE_URING, 0);
}

static kvs_test_rc test_direct_pool(void)
{
	return roundtrip(KVS_IO_ENGINE_POOL, KVS_BACKEND_F_IO_DIRECT);
}

static kvs_test_rc test_direct_uring(void)
{
	SKIP_WITHOUT_URING();
	return roundtrip(KVS_IO_ENGINE_URING, KVS_BACKEND_F_IO_DIRECT);
}

/* Registered buffers: with io_uring, fixed buffers (READ_FIXED/WRITE_FIXED, said
 * by kvs_backend_info); with the pool, registration is accepted and ignored.
 * Either way every byte round-trips through the registered region. */
static kvs_test_rc fixed_buffers(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	size_t len = (size_t)SPB * SHARD;
	unsigned char *buf = alloc_aligned(len);
	struct kvs_backend_buffer reg = { .base = buf, .len = len };

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("fixed"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_register_buffers(b, &reg, 1));
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.io_engine, engine);
	KVS_CHECK_EQ(!!(info.flags & KVS_BACKEND_INFO_FIXED_BUFFERS),
		     engine == KVS_IO_ENGINE_URING);
	KVS_CHECK_OK(dump_block(b, 3, buf, SPB)); /* WRITE_FIXED with io_uring */
	memset(buf, 0, len);
	for (uint32_t s = 0; s < SPB; s++) {
		struct kvs_backend_io io = { .block = block_of(3), .shard = s,
					     .buf = buf + (size_t)s * SHARD, .len = SHARD };
		struct kvs_backend_completion c;
		KVS_CHECK_OK(kvs_backend_submit_read(b, &io)); /* READ_FIXED with io_uring */
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.result, SHARD);
		for (uint64_t i = 0; i < SHARD; i++)
			KVS_CHECK_EQ(buf[(size_t)s * SHARD + i], pattern(3, s, i));
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_fixed_buffers_pool(void)
{
	return fixed_buffers(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_fixed_buffers_uring(void)
{
	SKIP_WITHOUT_URING();
	return fixed_buffers(KVS_IO_ENGINE_URING);
}

/* This process's resident set, in bytes (VmRSS of /proc/self/status), or 0. */
static uint64_t rss_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	unsigned long long kb = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return (uint64_t)kb << 10;
}

/* Read shard s of block blk into dst, check every byte. */
static kvs_test_rc read_check(struct kvs_backend *b, uint32_t blk, uint32_t s, unsigned char *dst)
{
	struct kvs_backend_io io = { .block = block_of(blk), .shard = s, .buf = dst, .len = SHARD };
	struct kvs_backend_completion c;

	memset(dst, 0, SHARD);
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(wait_one(b, &c), 1);
	KVS_CHECK_EQ(c.result, SHARD);
	for (uint64_t i = 0; i < SHARD; i++)
		if (dst[i] != pattern(blk, s, i))
			KVS_FAILF("shard %u byte %llu: %u, want %u", s, (unsigned long long)i,
				  dst[i], pattern(blk, s, i));
	return KVS_TEST_PASS;
}

/*
 * io_uring pins a registered region chunk by chunk (4 MiB) on first use, not at
 * registration: registering 64 MiB that this process never touched pins (and
 * faults in) one chunk, not 64 MiB; a read into chunk 5 goes out plain and pins
 * chunk 5 after it; a read across chunks 1 and 2 pins nothing; every byte is
 * right each way, the second read into chunk 5 through READ_FIXED.
 */
static kvs_test_rc test_fixed_first_use_uring(void)
{
	const uint64_t len = 64 << 20, chunk = 4 << 20;
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	unsigned char *src, *region;
	uint64_t rss0;

	SKIP_WITHOUT_URING();
	src = alloc_aligned((size_t)SPB * SHARD);
	KVS_CHECK(src);
	region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	KVS_CHECK(region != MAP_FAILED);
	KVS_CHECK_OK(root_init("fixedlazy"));
	cfg_posix(&cfg, KVS_IO_ENGINE_URING);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 7, src, SPB)); /* written from outside the region */
	rss0 = rss_bytes();
	KVS_CHECK_OK(kvs_backend_register_buffers(b, &(struct kvs_backend_buffer){ region, len }, 1));
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	printf("  registered 64 MiB: %llu KiB pinned, resident +%lld KiB\n",
	       (unsigned long long)(info.fixed_bytes >> 10),
	       (long long)(rss_bytes() - rss0) / 1024);
	KVS_CHECK(info.flags & KVS_BACKEND_INFO_FIXED_BUFFERS);
	KVS_CHECK_EQ(info.fixed_bytes, chunk);
	KVS_CHECK(rss_bytes() - rss0 < len / 4);
	KVS_TRY(read_check(b, 7, 0, region + 5 * chunk)); /* plain: chunk 5 pinned after it */
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.fixed_bytes, 2 * chunk);
	KVS_TRY(read_check(b, 7, 1, region + 5 * chunk + SHARD)); /* READ_FIXED */
	KVS_TRY(read_check(b, 7, 2, region + 2 * chunk - SHARD / 2)); /* across chunks 1, 2 */
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.fixed_bytes, 2 * chunk);
	kvs_backend_close(b);
	munmap(region, len);
	free(src);
	root_fini();
	return KVS_TEST_PASS;
}


/* A block file cut in the middle of shard 1: shard 0 reads, shard 1..3 -EIO;
 * lookup calls it absent (not every shard is there). */
static kvs_test_rc truncated(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	char path[400];
	struct kvs_block_id id = block_of(4);

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("trunc"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 4, buf, SPB));
	block_file(&id, path, sizeof(path), NULL);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
	KVS_CHECK_OK(truncate(path, BLOCK_HDR + SHARD + SHARD / 2));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	for (uint32_t s = 0; s < SPB; s++) {
		struct kvs_backend_io io = { .block = id, .shard = s, .buf = buf, .len = SHARD,
					     .token = s };
		struct kvs_backend_completion c;
		memset(buf, 0, SHARD);
		KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		if (s == 0) {
			KVS_CHECK_EQ(c.result, SHARD);
			KVS_CHECK_EQ(buf[SHARD - 1], pattern(4, 0, SHARD - 1));
		} else {
			KVS_CHECK_ERR(c.result, -EIO);
		}
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_truncated_pool(void)
{
	return truncated(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_truncated_uring(void)
{
	SKIP_WITHOUT_URING();
	return truncated(KVS_IO_ENGINE_URING);
}

/* Fault wrapper over posix: every read -EIO (error), then every read short (-EIO). */
static kvs_test_rc test_fault_eio_short(void)
{
	struct kvs_backend_config inner, cfg;
	struct kvs_backend *b = NULL, *w = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("fault"));
	cfg_posix(&inner, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&inner, &w));
	KVS_CHECK_OK(dump_block(w, 5, buf, SPB));
	kvs_backend_close(w);
	for (int mode = 0; mode < 2; mode++) {
		kvs_backend_config_init(&cfg);
		cfg.kind = KVS_BACKEND_FAULT;
		cfg.shard_bytes = SHARD;
		cfg.shards_per_block = SPB;
		cfg.fault_inner = &inner;
		cfg.fault_seed = SEED;
		cfg.fault_error_ppm = mode == 0 ? 1000000 : 0;
		cfg.fault_short_ppm = mode == 1 ? 1000000 : 0;
		KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
		KVS_CHECK_EQ(kvs_backend_lookup(b, &(struct kvs_block_id){ 0 }), 0);
		for (uint32_t s = 0; s < SPB; s++) {
			struct kvs_backend_io io = { .block = block_of(5), .shard = s, .buf = buf,
						     .len = SHARD, .token = s };
			struct kvs_backend_completion c;
			KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
			KVS_CHECK_EQ(wait_one(b, &c), 1);
			KVS_CHECK_EQ(c.token, s);
			KVS_CHECK_ERR(c.result, -EIO);
		}
		kvs_backend_close(b);
	}
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* queue_depth transfers in flight: the next submit is -EAGAIN until a poll. */
static kvs_test_rc test_queue_full(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_backend_completion c[4];
	int got = 0;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("qd"));
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 6, buf, SPB));
	kvs_backend_close(b);
	cfg.queue_depth = 2;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t s = 0; s < 3; s++) {
		struct kvs_backend_io io = { .block = block_of(6), .shard = s,
					     .buf = buf + (size_t)s * SHARD, .len = SHARD };
		int rc = kvs_backend_submit_read(b, &io);
		if (s < 2)
			KVS_CHECK_OK(rc);
		else
			KVS_CHECK_ERR(rc, -EAGAIN);
	}
	while (got < 2) {
		int n = wait_one(b, &c[got]);
		KVS_CHECK_EQ(n, 1);
		got++;
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_config(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = (struct kvs_backend *)&cfg;

	KVS_CHECK_OK(root_init("cfg"));
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.reserved[3] = 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(b == NULL);
	KVS_CHECK(strstr(g_log, "reserved") != NULL);

	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.queue_depth = 0;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "queue_depth") != NULL);

	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.nroots = 0;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "nroots") != NULL);

	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.flags = 1u << 20;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "flags") != NULL);

	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.shard_bytes = 0;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "shard_bytes") != NULL);

	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.roots[0] = "/nonexistent/kvs-io-test";
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -ENOENT);
	KVS_CHECK(strstr(g_log, "/nonexistent/kvs-io-test") != NULL);

	/* O_DIRECT with a shard size off the filesystem's alignment: at open. */
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.flags = KVS_BACKEND_F_IO_DIRECT;
	cfg.shard_bytes = 4096 + 512 + 1;
	int rc = kvs_backend_open(&cfg, &b);
	if (rc != -EOPNOTSUPP) {
		KVS_CHECK_ERR(rc, -EINVAL);
		KVS_CHECK(strstr(g_log, "shard_bytes") != NULL);
	}

	cfg_posix(&cfg, KVS_IO_ENGINE_URING);
	rc = kvs_backend_open(&cfg, &b);
	int st = uring_state();
	if (st == 1) {
		KVS_CHECK_OK(rc);
		kvs_backend_close(b);
	} else {
		KVS_CHECK_ERR(rc, st == 0 ? -EOPNOTSUPP : st);
	}

	/* Writes cover whole shards; reads stay inside the shard. */
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	{
		char small[16];
		struct kvs_backend_io io = { .block = block_of(1), .shard = 0, .buf = small,
					     .len = sizeof(small) };
		KVS_CHECK_ERR(kvs_backend_submit_write(b, &io), -EINVAL);
		io.shard = SPB;
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -EINVAL);
		io.shard = 0;
		io.offset = SHARD - 8;
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -EINVAL);
	}
	kvs_backend_close(b);
	kvs_backend_close(NULL);
	root_fini();
	return KVS_TEST_PASS;
}

/* More blocks than fd cache entries (CLOCK eviction), and a block dumped again
 * while its old file is cached: later reads see the new file. */
static kvs_test_rc fd_cache(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	enum { NBLOCKS = 40 };

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("fdc"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 0; blk < NBLOCKS; blk++)
		KVS_CHECK_OK(dump_block(b, 100 + blk, buf, SPB));
	kvs_backend_close(b);
	cfg.queue_depth = 2; /* 18 cache entries */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (int round = 0; round < 2; round++)
		for (uint32_t blk = 0; blk < NBLOCKS; blk++) {
			uint32_t s = (blk + (uint32_t)round) % SPB;
			struct kvs_backend_io io = { .block = block_of(100 + blk), .shard = s,
						     .buf = buf, .len = SHARD };
			struct kvs_backend_completion c;
			KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
			KVS_CHECK_EQ(wait_one(b, &c), 1);
			KVS_CHECK_EQ(c.result, SHARD);
			KVS_CHECK_EQ(buf[SHARD / 2], pattern(100 + blk, s, SHARD / 2));
		}
	/* Block 100+39 is cached now; dump it again with other bytes. */
	for (uint32_t s = 0; s < SPB; s++) {
		struct kvs_backend_io io = { .block = block_of(100 + NBLOCKS - 1), .shard = s,
					     .buf = buf + (size_t)s * SHARD, .len = SHARD };
		struct kvs_backend_completion c;
		memset(io.buf, 0xee, SHARD);
		KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.result, SHARD);
	}
	{
		struct kvs_backend_io io = { .block = block_of(100 + NBLOCKS - 1), .shard = 1,
					     .buf = buf, .len = SHARD };
		struct kvs_backend_completion c;
		memset(buf, 0, SHARD);
		KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.result, SHARD);
		KVS_CHECK_EQ(buf[0], 0xee);
		KVS_CHECK_EQ(buf[SHARD - 1], 0xee);
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_fd_cache_pool(void)
{
	return fd_cache(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_fd_cache_uring(void)
{
	SKIP_WITHOUT_URING();
	return fd_cache(KVS_IO_ENGINE_URING);
}

/* ------------------------------------------------ writes held or failed */

/* Make the directories above path (a block_file name) that g_root lacks. */
static kvs_test_rc mkdir_parents(char *path)
{
	for (char *slash = path + strlen(g_root) + 1; (slash = strchr(slash, '/')); slash++) {
		*slash = '\0';
		if (mkdir(path, 0700) < 0 && errno != EEXIST)
			KVS_FAILF("mkdir %s: %s", path, strerror(errno));
		*slash = '/';
	}
	return KVS_TEST_PASS;
}

/*
 * Issue 29 item 11: with every pwrite held HOLD_MS (slow storage; the pool
 * engine), starting the dumps of SLOW_BLOCKS new blocks must not wait for
 * storage: the block header is written through the engine like the shards, so
 * a submit only creates the temp file.  When the issuer wrote each header
 * itself, every new block's first submit took one held pwrite (>= 400 ms for
 * 8), and the issuer -- the store's dispatcher -- was deaf meanwhile.
 */
static kvs_test_rc slow_writes(struct kvs_backend *b, unsigned char *buf)
{
	const uint32_t n = SLOW_BLOCKS * SPB;
	uint64_t t0, first_ns, rest_ns, done_ns;
	unsigned held;
	int finals;

	/* The fan-out directories exist, as for most dumps of a store in use: the
	 * submits time one openat each, and storage. */
	for (uint32_t blk = 300; blk < 300 + SLOW_BLOCKS; blk++) {
		struct kvs_block_id id = block_of(blk);
		char path[400];

		block_file(&id, path, sizeof(path), NULL);
		KVS_TRY(mkdir_parents(path));
	}
	for (uint32_t i = 0; i < n; i++)
		fill_pattern(buf + (size_t)i * SHARD, 300 + i / SPB, i % SPB, 0, SHARD);
	__atomic_store_n(&g_held, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&g_hold_ms, HOLD_MS, __ATOMIC_RELAXED);
	/* Shard 0 of every block first: each starts its block's dump. */
	t0 = kvs_now_ns();
	for (uint32_t i = 0; i < n; i += SPB)
		KVS_CHECK_OK(submit_shard(b, 300 + i / SPB, 0, buf + (size_t)i * SHARD));
	first_ns = kvs_now_ns() - t0;
	for (uint32_t i = 0; i < n; i++)
		if (i % SPB)
			KVS_CHECK_OK(submit_shard(b, 300 + i / SPB, i % SPB,
						  buf + (size_t)i * SHARD));
	rest_ns = kvs_now_ns() - t0 - first_ns;
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_backend_completion c;

		KVS_CHECK_EQ(wait_one(b, &c), 1);
		KVS_CHECK_EQ(c.result, SHARD);
	}
	done_ns = kvs_now_ns() - t0;
	held = __atomic_load_n(&g_held, __ATOMIC_RELAXED);
	hooks_off();
	printf("slow_writes_pool: every pwrite held %d ms; the first writes of %d new blocks "
	       "submitted in %.2f ms (target < 50 ms in all; the issuer writing each header: "
	       ">= %d ms), the other %u in %.2f ms; all %u complete after %.0f ms, %u pwrites "
	       "held\n",
	       HOLD_MS, SLOW_BLOCKS, (double)first_ns / 1e6, SLOW_BLOCKS * HOLD_MS,
	       n - SLOW_BLOCKS, (double)rest_ns / 1e6, n, (double)done_ns / 1e6, held);
	/* Every shard and every header went through the hook: the hold was real. */
	if (held < n + SLOW_BLOCKS)
		KVS_FAILF("%u of %u pwrites held: the library's pwrite is not this program's",
			  held, n + SLOW_BLOCKS);
	if (first_ns >= 50 * KVS_NSEC_PER_MSEC)
		KVS_FAILF("starting %d dumps took %.2f ms: a submit waited for storage",
			  SLOW_BLOCKS, (double)first_ns / 1e6);
	for (uint32_t blk = 300; blk < 300 + SLOW_BLOCKS; blk++) {
		struct kvs_block_id id = block_of(blk);
		uint32_t s = blk % SPB;

		KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
		KVS_TRY(read_check(b, blk, s, buf));
	}
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_EQ(finals, SLOW_BLOCKS);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_slow_writes_pool(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SLOW_BLOCKS * SPB * SHARD);
	kvs_test_rc rc;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("slow"));
	cfg_posix(&cfg, KVS_IO_ENGINE_POOL);
	cfg.queue_depth = SLOW_BLOCKS * SPB;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	rc = slow_writes(b, buf);
	hooks_off(); /* also when it failed half way */
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return rc;
}

/* Submit every shard of block blk and reap them all: exactly one completes with
 * want (*failed: its shard), the others whole; the dump leaves no temp file and
 * no block. */
static kvs_test_rc dump_fails_once(struct kvs_backend *b, uint32_t blk, unsigned char *buf,
				   int64_t want, uint32_t *failed)
{
	struct kvs_block_id id = block_of(blk);
	int errors = 0, finals;

	for (uint32_t s = 0; s < SPB; s++) {
		fill_pattern(buf + (size_t)s * SHARD, blk, s, 0, SHARD);
		KVS_CHECK_OK(submit_shard(b, blk, s, buf + (size_t)s * SHARD));
	}
	for (uint32_t s = 0; s < SPB; s++) {
		struct kvs_backend_completion c;

		KVS_CHECK_EQ(wait_one(b, &c), 1);
		if (c.result == SHARD)
			continue;
		KVS_CHECK_ERR(c.result, want);
		*failed = (uint32_t)(c.token - 100);
		errors++;
	}
	KVS_CHECK_EQ(errors, 1);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	return KVS_TEST_PASS;
}

/* A failed header write fails the dump on the completion of the write that
 * started it (shard 0 here), like a failed shard write; the block dumps again. */
static kvs_test_rc test_header_fails_pool(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_block_id id = block_of(310);
	uint32_t failed = SPB;
	kvs_test_rc rc;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("hdrfail"));
	cfg_posix(&cfg, KVS_IO_ENGINE_POOL);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	__atomic_store_n(&g_fail_hdr_errno, EIO, __ATOMIC_RELAXED);
	rc = dump_fails_once(b, 310, buf, -EIO, &failed);
	hooks_off();
	KVS_TRY(rc);
	KVS_CHECK_EQ(failed, 0);
	KVS_CHECK(strstr(g_log, "header") != NULL);
	KVS_CHECK_OK(dump_block(b, 310, buf, SPB));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* A failed fdatasync fails the write that finished the block; no temp file. */
static kvs_test_rc test_fsync_fails_pool(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	uint32_t failed = SPB;
	kvs_test_rc rc;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("syncfail"));
	cfg_posix(&cfg, KVS_IO_ENGINE_POOL);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	__atomic_store_n(&g_fail_sync_errno, EIO, __ATOMIC_RELAXED);
	rc = dump_fails_once(b, 311, buf, -EIO, &failed);
	hooks_off();
	KVS_TRY(rc);
	KVS_CHECK(strstr(g_log, "fdatasync") != NULL);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* A directory (not empty) at the block's name: the rename fails (-EISDIR) on the
 * write that finished the block, the temp file goes, the directory stays and
 * reads as an absent block; once it is gone the block dumps. */
static kvs_test_rc rename_fails(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_block_id id = block_of(312);
	char path[400], file[440];
	uint32_t failed = SPB;
	struct stat st;
	int fd, finals;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("renfail"));
	block_file(&id, path, sizeof(path), NULL);
	KVS_TRY(mkdir_parents(path));
	KVS_CHECK_EQ(mkdir(path, 0700), 0);
	snprintf(file, sizeof(file), "%s/x", path);
	fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	KVS_CHECK(fd >= 0);
	close(fd);
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_TRY(dump_fails_once(b, 312, buf, -EISDIR, &failed));
	KVS_CHECK(strstr(g_log, "renam") != NULL);
	KVS_CHECK_EQ(stat(path, &st), 0);
	KVS_CHECK(S_ISDIR(st.st_mode));
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_EQ(finals, 1);
	{
		struct kvs_backend_io io = { .block = id, .buf = buf, .len = SHARD };

		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -ENOENT);
	}
	KVS_CHECK_EQ(unlink(file), 0);
	KVS_CHECK_EQ(rmdir(path), 0);
	KVS_CHECK_OK(dump_block(b, 312, buf, SPB));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_rename_fails_pool(void)
{
	return rename_fails(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_rename_fails_uring(void)
{
	SKIP_WITHOUT_URING();
	return rename_fails(KVS_IO_ENGINE_URING);
}

static const struct kvs_test_case cases[] = {
	{ "roundtrip_pool", test_roundtrip_pool },
	{ "direct_pool", test_direct_pool },
	{ "fixed_buffers_pool", test_fixed_buffers_pool },
	{ "truncated_pool", test_truncated_pool },
	{ "fault_eio_short", test_fault_eio_short },
	{ "queue_full", test_queue_full },
	{ "bad_config", test_bad_config },
	{ "fd_cache_pool", test_fd_cache_pool },
	{ "slow_writes_pool", test_slow_writes_pool },
	{ "header_fails_pool", test_header_fails_pool },
	{ "fsync_fails_pool", test_fsync_fails_pool },
	{ "rename_fails_pool", test_rename_fails_pool },
};

/* `io_posix --uring [case...]` (CTest: io_posix_uring). */
static const struct kvs_test_case uring_cases[] = {
	{ "roundtrip_uring", test_roundtrip_uring },
	{ "direct_uring", test_direct_uring },
	{ "fixed_buffers_uring", test_fixed_buffers_uring },
	{ "fixed_first_use_uring", test_fixed_first_use_uring },
	{ "truncated_uring", test_truncated_uring },
	{ "fd_cache_uring", test_fd_cache_uring },
	{ "rename_fails_uring", test_rename_fails_uring },
};

int main(int argc, char **argv)
{
	return kvs_test_run_groups(argc, argv, "--uring", cases, KVS_ARRAY_LEN(cases), uring_cases,
				   KVS_ARRAY_LEN(uring_cases), NULL, 0);
}
