/*
 * tests/io_posix.c — the posix backend through both engines: dumps and reads
 * round-trip with every byte checked, sub-shard reads, lookup only after the last
 * shard, O_DIRECT (and its alignment errors at open and submit), a missing block
 * (-ENOENT), a truncated block file and fault-injected EIO/short reads (-EIO,
 * never a partial count), the in-flight limit (-EAGAIN), config validation with a
 * log line naming the field, fd-cache eviction and re-dump of a cached block,
 * io_uring's fixed buffers pinned chunk by chunk on first use (fixed_first_use),
 * and kill -9 of an exec'd writer in the middle of a
 * dump (the block stays absent; the next open removes the temp file; temp files
 * of live writers are kept), and two exec'd processes dumping the same blocks at
 * once (with and without fsync).  Writes held or failed by interposing pwrite and
 * fdatasync (slow_writes_pool, header_fails_pool, fsync_fails_pool): starting
 * the dumps of new blocks never waits for storage, and a failed block header,
 * fsync or rename fails the block's dump on one write's completion, leaving no
 * temp file (rename_fails_* on both engines).
 *
 * Two groups of cases, two CTest tests of this binary:
 *   io_posix        (default) the pool engine's cases and the engine-neutral
 *                   ones (io_engine=auto: io_uring in the kernel variant where
 *                   allowed; io_engine=uring must be -EOPNOTSUPP in the plain one);
 *   io_posix_uring  (--uring) the engine cases again on io_uring; each skips
 *                   with the reason in the plain variant or where io_uring is
 *                   refused, and a run where all of them skipped exits 77, so
 *                   CTest shows Skipped, not Passed.
 * Block files say what they hold: a block dumped with another geometry (shard
 * size, shards per block, tensor table, layout_tag) is -KVS_ECONFIG at submit
 * (the reproduction: 4 KiB x 2 read as 8 KiB x 1), another block's file,
 * a cut or flipped header and a file without one are -EIO, and lookup calls
 * them absent (geometry_*, hostile_headers_*; O_DIRECT too).
 * Roots are fresh directories under /tmp (O_DIRECT is skipped with the reason
 * where /tmp's filesystem cannot do it).  Seeds are fixed and printed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "harness.h"

#define SHARD (64 * 1024)
#define SPB 4
#define SEED 0x5eed1234u
/* A block file's header (docs/io.md, "Block file format": 4096 bytes, or the
 * O_DIRECT alignment when larger; 512 or 4096 on the filesystems here). */
#define BLOCK_HDR 4096
/* slow_writes_pool: every pwrite held this long (slow storage), new blocks dumped. */
#define HOLD_MS 50
#define SLOW_BLOCKS 8

static char g_root[256];
static char g_log[4096]; /* last error lines, for "the log names the field" */

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN) {
		size_t n = strlen(g_log);
		snprintf(g_log + n, sizeof(g_log) - n, "%s\n", msg);
	}
}

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

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void root_fini(void)
{
	if (g_root[0])
		nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	g_root[0] = '\0';
}

static int root_init(const char *tag)
{
	char id[128];

	root_fini();
	snprintf(g_root, sizeof(g_root), "/tmp/kvs-%s", kvs_test_unique_id(id, sizeof(id), tag));
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return mkdir(g_root, 0700) == 0 ? 0 : -errno;
}

static void cfg_posix(struct kvs_backend_config *cfg, uint32_t engine)
{
	kvs_backend_config_init(cfg);
	cfg->kind = KVS_BACKEND_POSIX;
	cfg->io_engine = engine;
	cfg->shard_bytes = SHARD;
	cfg->shards_per_block = SPB;
	cfg->queue_depth = 16;
	cfg->nroots = 1;
	cfg->roots[0] = g_root;
	cfg->log = log_cb;
	g_log[0] = '\0';
}

static struct kvs_block_id block_of(uint32_t n)
{
	struct kvs_block_id id;

	for (int i = 0; i < 16; i++)
		id.bytes[i] = (uint8_t)(n * 131u + (uint32_t)i * 7u + SEED);
	return id;
}

static unsigned char pattern(uint32_t blk, uint32_t shard, uint64_t off)
{
	return (unsigned char)((blk * 97u + shard * 31u + off * 13u + (off >> 9) + SEED) & 0xff);
}

static void fill_pattern(unsigned char *p, uint32_t blk, uint32_t shard, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = pattern(blk, shard, off + i);
}

/* Reap exactly one completion (deadline 10 s). */
static int wait_one(struct kvs_backend *b, struct kvs_backend_completion *c)
{
	uint64_t deadline = kvs_deadline_after(10 * KVS_NSEC_PER_SEC);

	while (kvs_now_ns() < deadline) {
		int n = kvs_backend_poll(b, c, 1, 100 * 1000000ull);
		if (n != 0)
			return n;
	}
	return -ETIMEDOUT;
}

/* Submit the write of shard s of block blk from buf; token 100 + s. */
static int submit_shard(struct kvs_backend *b, uint32_t blk, uint32_t s, unsigned char *buf)
{
	struct kvs_backend_io io = { .block = block_of(blk), .shard = s, .buf = buf,
				     .len = SHARD, .token = 100 + s };

	return kvs_backend_submit_write(b, &io);
}

/* Dump block blk (all shards) from an aligned buffer; every completion == SHARD. */
static int dump_block(struct kvs_backend *b, uint32_t blk, unsigned char *buf, uint32_t nshards)
{
	for (uint32_t s = 0; s < nshards; s++) {
		int rc;

		fill_pattern(buf + (size_t)s * SHARD, blk, s, 0, SHARD);
		rc = submit_shard(b, blk, s, buf + (size_t)s * SHARD);
		if (rc < 0)
			return rc;
	}
	for (uint32_t s = 0; s < nshards; s++) {
		struct kvs_backend_completion c;
		int rc = wait_one(b, &c);
		if (rc < 0)
			return rc;
		if (c.result != SHARD || c.token < 100 || c.token >= 100 + nshards)
			return c.result < 0 ? (int)c.result : -EIO;
	}
	return 0;
}

static void *alloc_aligned(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, 4096, len) == 0 ? p : NULL;
}

/* 1: io_uring engine usable; 0: plain build (no engine); -errno: io_uring refused
 * here (seccomp, kernel.io_uring_disabled) -- the uring cases then skip. */
static int uring_state(void)
{
	struct io_uring_params params;
	int fd;

	if (strcmp(KVS_TEST_VARIANT, "kernel") != 0)
		return 0;
	memset(&params, 0, sizeof(params));
	fd = (int)syscall(__NR_io_uring_setup, 1, &params);
	if (fd < 0)
		return -errno;
	close(fd);
	return 1;
}

#define SKIP_WITHOUT_URING()                                                            \
	do {                                                                            \
		int st_ = uring_state();                                                \
		if (st_ == 0)                                                           \
			KVS_SKIP("plain build: no io_uring engine");                    \
		if (st_ < 0)                                                            \
			KVS_SKIP("io_uring refused here: %s", kvs_strerror(st_));        \
	} while (0)

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

/* The path of block id's file under g_root (and its hex, when hex is not NULL). */
static void block_file(const struct kvs_block_id *id, char *path, size_t len, char *hex)
{
	char h[33];

	for (int i = 0; i < 16; i++)
		snprintf(h + 2 * i, 3, "%02x", id->bytes[i]);
	snprintf(path, len, "%s/%.2s/%.2s/%s", g_root, h, h + 2, h);
	if (hex)
		memcpy(hex, h, sizeof(h));
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

/* ------------------------------------------------ what a block file holds */

/* cfg of another geometry: shard_bytes x spb, tcount tensors of tsz (NULL: none
 * given, one of shard_bytes), layout_tag tag. */
static void cfg_geom(struct kvs_backend_config *cfg, uint32_t engine, uint64_t shard_bytes,
		     uint32_t spb, uint32_t tcount, const uint64_t *tsz, uint64_t tag)
{
	cfg_posix(cfg, engine);
	cfg->shard_bytes = shard_bytes;
	cfg->shards_per_block = spb;
	cfg->tensor_count = tcount;
	cfg->tensor_bytes = tsz;
	cfg->layout_tag = tag;
}

/* Submit a read of [0, len) of shard of id into buf: the submit's error, or the
 * completion's result. */
static int64_t read_shard(struct kvs_backend *b, const struct kvs_block_id *id, uint32_t shard,
			  void *buf, uint64_t len)
{
	struct kvs_backend_io io = { .block = *id, .shard = shard, .buf = buf, .len = len,
				     .token = 77 };
	struct kvs_backend_completion c;
	int rc = kvs_backend_submit_read(b, &io);

	if (rc < 0)
		return rc;
	rc = wait_one(b, &c);
	return rc == 1 ? c.result : rc < 0 ? rc : -EPROTO;
}

/* Dump every shard of block blk with the geometry of cfg (content: pattern). */
static int dump_geom(const struct kvs_backend_config *cfg, uint32_t blk)
{
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned(cfg->shard_bytes);
	int rc = buf ? kvs_backend_open(cfg, &b) : -ENOMEM;

	for (uint32_t s = 0; rc == 0 && s < cfg->shards_per_block; s++) {
		struct kvs_backend_io io = { .block = block_of(blk), .shard = s, .buf = buf,
					     .len = cfg->shard_bytes, .token = s };
		struct kvs_backend_completion c;

		fill_pattern(buf, blk, s, 0, cfg->shard_bytes);
		rc = kvs_backend_submit_write(b, &io);
		if (rc == 0)
			rc = wait_one(b, &c) == 1 ? (c.result == (int64_t)cfg->shard_bytes ? 0 : -EIO)
						  : -ETIMEDOUT;
	}
	kvs_backend_close(b);
	free(buf);
	return rc;
}

/* The reproduction, at the backend: a block dumped with 4 KiB shards, 2
 * per block, tensors 2x2048, is refused (-KVS_ECONFIG at submit, never bytes) by
 * a handle of 8 KiB x 1, one of another tensor table, one of another
 * layout_tag and one of 256 tensors (logged as their count and hash), each
 * logging the block, the root and both geometries; lookup
 * calls it absent for them; a handle of the same geometry reads it byte-exact. */
static kvs_test_rc geometry(uint32_t engine, uint32_t flags)
{
	static const uint64_t halves[2] = { 2048, 2048 }, other[2] = { 1024, 3072 };
	static uint64_t many[KVS_MAX_TENSORS]; /* 8, 24, 8, 24, ...: 256 runs */
	struct kvs_backend_config w, r;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = block_of(30);
	unsigned char *buf = alloc_aligned(8192);
	char hex[33], path[400], want[600];
	struct stat st;
	int rc;

	KVS_CHECK(buf);
	for (uint32_t k = 0; k < KVS_MAX_TENSORS; k++)
		many[k] = k % 2 ? 24 : 8;
	KVS_CHECK_OK(root_init("geom"));
	cfg_geom(&w, engine, 4096, 2, 2, halves, 0);
	w.flags = flags;
	rc = dump_geom(&w, 30);
	if (rc == -EOPNOTSUPP && (flags & KVS_BACKEND_F_IO_DIRECT)) {
		free(buf);
		root_fini();
		KVS_SKIP("O_DIRECT not supported under /tmp: %s", g_log);
	}
	KVS_CHECK_OK(rc);
	block_file(&id, path, sizeof(path), hex);

	const struct {
		uint64_t shard_bytes;
		uint32_t spb, tcount;
		const uint64_t *tsz;
		uint64_t tag;
		const char *has;
	} readers[] = {
		{ 8192, 1, 0, NULL, 0, "shard_size 8192 x 1 shards per block, tensors 1x8192, layout_tag 0" },
		{ 4096, 2, 2, other, 0, "shard_size 4096 x 2 shards per block, tensors 1x1024+1x3072, "
					"layout_tag 0" },
		{ 4096, 2, 2, halves, 0x2a, "shard_size 4096 x 2 shards per block, tensors 2x2048, "
					    "layout_tag 0x2a" },
		{ 4096, 2, KVS_MAX_TENSORS, many, 0, "shard_size 4096 x 2 shards per block, "
						     "256 tensors (hash " },
	};
	for (size_t i = 0; i < KVS_ARRAY_LEN(readers); i++) {
		cfg_geom(&r, engine, readers[i].shard_bytes, readers[i].spb, readers[i].tcount,
			 readers[i].tsz, readers[i].tag);
		r.flags = flags;
		KVS_CHECK_OK(kvs_backend_open(&r, &b));
		memset(buf, 0, 8192);
		KVS_CHECK_ERR(read_shard(b, &id, 0, buf, readers[i].shard_bytes), -KVS_ECONFIG);
		snprintf(want, sizeof(want), "backend: block %s in %s: stored with shard_size 4096 x 2 "
			 "shards per block, tensors 2x2048, layout_tag 0; this store has %s", hex,
			 g_root, readers[i].has);
		if (!strstr(g_log, want))
			KVS_FAILF("reader %zu: the log lacks\n  %s\nlog:\n%s", i, want, g_log);
		KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
		for (size_t k = 0; k < 8192; k++) /* nothing was read */
			KVS_CHECK_EQ(buf[k], 0);
		kvs_backend_close(b);
	}

	/* The same geometry (the table spelled out or not) reads every byte. */
	cfg_geom(&r, engine, 4096, 2, 2, halves, 0);
	r.flags = flags;
	KVS_CHECK_OK(kvs_backend_open(&r, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
	for (uint32_t s = 0; s < 2; s++) {
		KVS_CHECK_EQ(read_shard(b, &id, s, buf, 4096), 4096);
		for (uint64_t k = 0; k < 4096; k++)
			if (buf[k] != pattern(30, s, k))
				KVS_FAILF("shard %u byte %llu: 0x%02x, want 0x%02x", s,
					  (unsigned long long)k, buf[k], pattern(30, s, k));
	}
	KVS_CHECK(strstr(g_log, "stored with") == NULL);
	kvs_backend_close(b);
	KVS_CHECK_OK(stat(path, &st));
	KVS_CHECK_EQ(st.st_size, BLOCK_HDR + 2 * 4096); /* the header, then the shards */
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_geometry_pool(void)
{
	return geometry(KVS_IO_ENGINE_POOL, 0);
}

static kvs_test_rc test_geometry_uring(void)
{
	SKIP_WITHOUT_URING();
	return geometry(KVS_IO_ENGINE_URING, 0);
}

static kvs_test_rc test_geometry_direct_pool(void)
{
	return geometry(KVS_IO_ENGINE_POOL, KVS_BACKEND_F_IO_DIRECT);
}

static kvs_test_rc test_geometry_direct_uring(void)
{
	SKIP_WITHOUT_URING();
	return geometry(KVS_IO_ENGINE_URING, KVS_BACKEND_F_IO_DIRECT);
}

/* How often needle occurs in hay. */
static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Every shard of id is refused at submit with -EIO and lookup says 0; the log
 * names the file and says why (once: repeats for a file are rate-limited). */
static kvs_test_rc refused_eio(struct kvs_backend *b, const struct kvs_block_id *id,
			       const char *path, const char *why)
{
	unsigned char *buf = alloc_aligned(SHARD);
	char want[600];

	KVS_CHECK(buf);
	g_log[0] = '\0';
	for (uint32_t s = 0; s < SPB; s++)
		KVS_CHECK_ERR(read_shard(b, id, s, buf, SHARD), -EIO);
	KVS_CHECK_EQ(kvs_backend_lookup(b, id), 0);
	free(buf);
	snprintf(want, sizeof(want), "backend: block file %s: %s", path, why);
	if (!strstr(g_log, want))
		KVS_FAILF("the log lacks\n  %s\nlog:\n%s", want, g_log);
	KVS_CHECK_EQ(count_of(g_log, path), 1);
	return KVS_TEST_PASS;
}

/* Block files that are not this block's: another block's file renamed to its
 * name, a header cut short, a header with one bit flipped, a file without a
 * header (the format before headers) -- each -EIO at submit, absent to lookup. */
static kvs_test_rc hostile_headers(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_block_id x = block_of(40), y = block_of(41), z = block_of(42), v = block_of(43);
	char px[400], py[400], pz[400], pv[400], hy[33], want[100];
	unsigned char byte;
	int fd;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("hdr"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 40; blk <= 43; blk++)
		KVS_CHECK_OK(dump_block(b, blk, buf, SPB));
	block_file(&x, px, sizeof(px), NULL);
	block_file(&y, py, sizeof(py), hy);
	block_file(&z, pz, sizeof(pz), NULL);
	block_file(&v, pv, sizeof(pv), NULL);

	/* y's file under x's name. */
	KVS_CHECK_OK(rename(py, px));
	snprintf(want, sizeof(want), "holds block %s", hy);
	KVS_TRY(refused_eio(b, &x, px, want));

	/* A header cut short: inside the fixed part, and at 100 bytes. */
	KVS_CHECK_OK(truncate(pz, 30));
	KVS_TRY(refused_eio(b, &z, pz, "header cut short (30 of 64 bytes)"));
	kvs_backend_close(b); /* a new handle: nothing of z's cached or rate-limited */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(truncate(pz, 5));
	KVS_TRY(refused_eio(b, &z, pz, "no kvshare block header"));

	/* One bit of the layout_tag flipped: the checksum says so. */
	fd = open(pv, O_RDWR);
	KVS_CHECK(fd >= 0);
	KVS_CHECK_EQ(pread(fd, &byte, 1, 33), 1);
	byte ^= 0x10;
	KVS_CHECK_EQ(pwrite(fd, &byte, 1, 33), 1);
	close(fd);
	KVS_TRY(refused_eio(b, &v, pv, "header checksum mismatch"));

	/* A block file of the format before headers (the shards from offset 0) at
	 * x's path, read by a new handle (x's warning above is rate-limited). */
	kvs_backend_close(b);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(unlink(px));
	fd = open(px, O_CREAT | O_EXCL | O_WRONLY, 0600);
	KVS_CHECK(fd >= 0);
	for (uint32_t s = 0; s < SPB; s++) {
		fill_pattern(buf, 40, s, 0, SHARD);
		KVS_CHECK_EQ(write(fd, buf, SHARD), SHARD);
	}
	close(fd);
	KVS_TRY(refused_eio(b, &x, px, "no kvshare block header"));
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_hostile_headers_pool(void)
{
	return hostile_headers(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_hostile_headers_uring(void)
{
	SKIP_WITHOUT_URING();
	return hostile_headers(KVS_IO_ENGINE_URING);
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

/* ------------------------------------------------------------ crash cleanup */

static int count_temps(const char *root, int *finals)
{
	int temps = 0;
	DIR *d1 = opendir(root);
	struct dirent *e1;

	*finals = 0;
	while (d1 && (e1 = readdir(d1))) {
		char p1[512];
		DIR *d2;
		struct dirent *e2;

		if (e1->d_name[0] == '.')
			continue;
		snprintf(p1, sizeof(p1), "%s/%s", root, e1->d_name);
		d2 = opendir(p1);
		while (d2 && (e2 = readdir(d2))) {
			char p2[800];
			DIR *d3;
			struct dirent *e3;

			if (e2->d_name[0] == '.')
				continue;
			snprintf(p2, sizeof(p2), "%s/%s", p1, e2->d_name);
			d3 = opendir(p2);
			while (d3 && (e3 = readdir(d3))) {
				if (e3->d_name[0] == '.')
					continue;
				if (strstr(e3->d_name, ".tmp."))
					temps++;
				else
					(*finals)++;
			}
			if (d3)
				closedir(d3);
		}
		if (d2)
			closedir(d2);
	}
	if (d1)
		closedir(d1);
	return temps;
}

/* Exec'd writer: dump SPB - 1 shards of block 7, report on fd argv[1], hang. */
static kvs_test_rc child_writer(int argc, char **argv)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	int fd;

	if (argc < 2)
		KVS_FAILF("usage: --child writer <fd> <root>");
	KVS_CHECK(buf != NULL);
	fd = atoi(argv[0]);
	snprintf(g_root, sizeof(g_root), "%s", argv[1]);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 7, buf, SPB - 1));
	KVS_CHECK_EQ(write(fd, "w", 1), 1);
	/* Wait to be killed; bounded so a lost parent cannot leave us forever. */
	for (int i = 0; i < 300; i++)
		poll(NULL, 0, 100);
	KVS_FAILF("writer: not killed within 30 s");
}

static kvs_test_rc test_kill9_mid_dump(void)
{
	int pfd[2];
	char fdarg[16], c;
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = block_of(7);
	int finals;

	KVS_CHECK_OK(root_init("kill9"));
	KVS_CHECK_OK(pipe(pfd));
	snprintf(fdarg, sizeof(fdarg), "%d", pfd[1]);
	const char *args[] = { fdarg, g_root, NULL };
	pid_t pid = kvs_test_spawn("writer", args);
	KVS_CHECK(pid > 0);
	close(pfd[1]);
	struct pollfd p = { .fd = pfd[0], .events = POLLIN };
	KVS_CHECK_EQ(poll(&p, 1, 20000), 1);
	KVS_CHECK_EQ(read(pfd[0], &c, 1), 1);
	close(pfd[0]);

	/* While the writer lives, another open keeps its temp file. */
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	kvs_backend_close(b);

	KVS_CHECK_EQ(kill(pid, SIGKILL), 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	KVS_CHECK_EQ(finals, 0);

	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	{
		char buf[64];
		struct kvs_backend_io io = { .block = id, .shard = 0, .buf = buf, .len = 64 };
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -ENOENT);
	}
	kvs_backend_close(b);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc exit_at_once(void *arg)
{
	(void)arg;
	return KVS_TEST_PASS;
}

/* The cleanup rules on hand-made temp files: this host's dead writer -> removed;
 * another host's (pid meaningless here) -> kept unless older than 24 h; a live
 * writer -> kept. */
static kvs_test_rc test_temp_rules(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	char host[256] = "", tag[9], other[9], dir[400], path[600];
	uint32_t h = 2166136261u;
	struct kvs_block_id id = block_of(9);
	char hex[33];
	int finals;

	gethostname(host, sizeof(host) - 1);
	for (const char *c = host; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	snprintf(tag, sizeof(tag), "%08x", h);
	snprintf(other, sizeof(other), "%08x", h ^ 1u);
	pid_t dead = kvs_test_fork(exit_at_once, NULL);
	KVS_CHECK(dead > 0);
	KVS_CHECK_EQ(kvs_test_reap(dead, 10000), 0);

	KVS_CHECK_OK(root_init("temps"));
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id.bytes[i]);
	snprintf(dir, sizeof(dir), "%s/%.2s", g_root, hex);
	KVS_CHECK_EQ(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/%.2s/%.2s", g_root, hex, hex + 2);
	KVS_CHECK_EQ(mkdir(dir, 0700), 0);
	const struct { int pid; const char *tag; bool old; bool kept; } files[] = {
		{ dead, tag, false, false },
		{ dead, other, false, true },
		{ dead, other, true, false },
		{ getpid(), tag, false, true },
	};
	for (size_t i = 0; i < KVS_ARRAY_LEN(files); i++) {
		snprintf(path, sizeof(path), "%s/%s.tmp.%d.%s%08zx", dir, hex, files[i].pid,
			 files[i].tag, i);
		int fd = open(path, O_CREAT | O_WRONLY, 0600);
		KVS_CHECK(fd >= 0);
		close(fd);
		if (files[i].old) {
			struct timespec ts[2] = { { time(NULL) - 25 * 3600, 0 },
						  { time(NULL) - 25 * 3600, 0 } };
			KVS_CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
		}
	}
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	for (size_t i = 0; i < KVS_ARRAY_LEN(files); i++) {
		snprintf(path, sizeof(path), "%s/%s.tmp.%d.%s%08zx", dir, hex, files[i].pid,
			 files[i].tag, i);
		if ((access(path, F_OK) == 0) != files[i].kept)
			KVS_FAILF("%s: %s, expected %s", path,
				  access(path, F_OK) == 0 ? "kept" : "removed",
				  files[i].kept ? "kept" : "removed");
	}
	KVS_CHECK_EQ(count_temps(g_root, &finals), 2);
	root_fini();
	return KVS_TEST_PASS;
}

/* Closing with a half-written dump discards it (temp file removed, block absent). */
static kvs_test_rc test_close_discards_partial(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_block_id id = block_of(8);
	int finals;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("partial"));
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 8, buf, 2));
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	kvs_backend_close(b);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* Exec'd dumper: blocks 200..209 in full; argv: root, flags. */
static kvs_test_rc child_dumper(int argc, char **argv)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	int rc = 0;

	if (argc < 2)
		KVS_FAILF("usage: --child dumper <root> <flags>");
	KVS_CHECK(buf != NULL);
	snprintf(g_root, sizeof(g_root), "%s", argv[0]);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.flags = (uint32_t)strtoul(argv[1], NULL, 0);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 200; blk < 210 && rc == 0; blk++)
		rc = dump_block(b, blk, buf, SPB);
	kvs_backend_close(b);
	free(buf);
	KVS_CHECK_OK(rc);
	return KVS_TEST_PASS;
}

/* Two processes dump the same blocks at once (two ranks, or two nodes on a shared
 * mount): every block ends complete and correct, no temp file is left. */
static kvs_test_rc test_concurrent_dumps(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned(SHARD);
	char nofsync[16];
	int finals;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("conc"));
	snprintf(nofsync, sizeof(nofsync), "%u", KVS_BACKEND_F_NO_FSYNC);
	const char *a1[] = { g_root, "0", NULL };
	const char *a2[] = { g_root, nofsync, NULL };
	pid_t p1 = kvs_test_spawn("dumper", a1), p2 = kvs_test_spawn("dumper", a2);
	KVS_CHECK(p1 > 0 && p2 > 0);
	KVS_CHECK_EQ(kvs_test_reap(p1, 20000), 0);
	KVS_CHECK_EQ(kvs_test_reap(p2, 20000), 0);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_EQ(finals, 10);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 200; blk < 210; blk++) {
		struct kvs_block_id id = block_of(blk);
		KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
		for (uint32_t s = 0; s < SPB; s++) {
			struct kvs_backend_io io = { .block = id, .shard = s, .buf = buf, .len = SHARD };
			struct kvs_backend_completion c;
			KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
			KVS_CHECK_EQ(wait_one(b, &c), 1);
			KVS_CHECK_EQ(c.result, SHARD);
			for (uint64_t i = 0; i < SHARD; i += 511)
				KVS_CHECK_EQ(buf[i], pattern(blk, s, i));
		}
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
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
	{ "kill9_mid_dump", test_kill9_mid_dump },
	{ "close_discards_partial", test_close_discards_partial },
	{ "temp_rules", test_temp_rules },
	{ "concurrent_dumps", test_concurrent_dumps },
	{ "geometry_pool", test_geometry_pool },
	{ "geometry_direct_pool", test_geometry_direct_pool },
	{ "hostile_headers_pool", test_hostile_headers_pool },
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
	{ "geometry_uring", test_geometry_uring },
	{ "geometry_direct_uring", test_geometry_direct_uring },
	{ "hostile_headers_uring", test_hostile_headers_uring },
	{ "rename_fails_uring", test_rename_fails_uring },
};

static const struct kvs_test_child children[] = {
	{ "writer", child_writer },
	{ "dumper", child_dumper },
};

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--uring") == 0) {
		argv[1] = argv[0];
		return kvs_test_run(argc - 1, argv + 1, uring_cases, KVS_ARRAY_LEN(uring_cases),
				    children, KVS_ARRAY_LEN(children));
	}
	return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), children,
			    KVS_ARRAY_LEN(children));
}
