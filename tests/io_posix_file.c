/*
 * tests/io_posix_file.c — what a posix block file holds, through both engines:
 * a block dumped with another geometry (shard size, shards per block, tensor
 * table, layout_tag) is -KVS_ECONFIG at submit (the reproduction:
 * 4 KiB x 2 read as 8 KiB x 1), another block's file, a cut or flipped header
 * and a file without one are -EIO, and lookup calls them absent (geometry_*,
 * hostile_headers_*; O_DIRECT too); a header is read alone, with no readahead
 * past it, by a lookup, a read and an open ahead (header_readahead_*).  The rest
 * of the backend is tests/io_posix.c's.
 *
 * Two CTest tests of this binary, as io_posix: io_posix_file (the pool engine)
 * and io_posix_file_uring (--uring: io_uring; each case skips with the reason
 * in the plain variant or where io_uring is refused).
 */
#include <sys/mman.h>
#include <unistd.h>

#include "io_posix_util.h"

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

/* Of the pages between the header's last and shard last's first, how many are
 * in the page cache (mincore through a mapping of the file); -errno. */
static int cached_after_header(const char *path, long page, uint32_t last)
{
	size_t lo = (BLOCK_HDR + (size_t)page - 1) / (size_t)page;
	size_t hi = (BLOCK_HDR + (size_t)last * SHARD) / (size_t)page;
	unsigned char vec[64];
	int fd = open(path, O_RDONLY | O_CLOEXEC), n = 0;
	void *map;

	if (fd < 0)
		return -errno;
	if (hi > KVS_ARRAY_LEN(vec))
		hi = KVS_ARRAY_LEN(vec);
	map = mmap(NULL, hi * (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -errno;
	if (mincore(map, hi * (size_t)page, vec) < 0)
		n = -errno;
	for (size_t i = lo; n >= 0 && i < hi; i++)
		n += vec[i] & 1;
	munmap(map, hi * (size_t)page);
	return n;
}

/* Drop the file's pages from the page cache; whether page 0 is still cached
 * (then this file system keeps them: tmpfs), or -errno. */
static int drop_file_cache(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;
	unsigned char v = 0;
	long page = sysconf(_SC_PAGESIZE);
	void *map;

	if (fd < 0)
		return -errno;
	rc = fsync(fd) < 0 ? -errno : -posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	map = rc < 0 ? MAP_FAILED : mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (rc < 0 || map == MAP_FAILED)
		return rc < 0 ? rc : -errno;
	rc = mincore(map, (size_t)page, &v) < 0 ? -errno : v & 1;
	munmap(map, (size_t)page);
	return rc;
}

/*
 * A block file's header is read alone (io/posix_read.c, "Readahead"): after a
 * lookup, after a handle's first read (of the last shard, so that the read
 * itself covers none of them), and after that read of a block opened ahead
 * (kvs_backend_hint_read), none of the pages between the header and that
 * shard is in the page cache.  A plain 4 KiB read at offset 0 reads 4 pages
 * and marks page 1 for readahead, which put the kernel's windows off the shard
 * boundaries and turned shard reads at depth into random ones.  Skips where the
 * file's pages cannot be dropped from the page cache (tmpfs).
 */
static kvs_test_rc header_readahead(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = block_of(40);
	unsigned char *buf = alloc_aligned(SHARD);
	long page = sysconf(_SC_PAGESIZE);
	char path[400];
	int rc, ifd;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("ra"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(dump_geom(&cfg, 40));
	block_file(&id, path, sizeof(path), NULL);

	rc = drop_file_cache(path);
	KVS_CHECK(rc >= 0);
	if (rc == 1) {
		free(buf);
		root_fini();
		KVS_SKIP("the page cache of files under /tmp cannot be dropped (tmpfs?)");
	}
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
	KVS_CHECK_EQ(cached_after_header(path, page, SPB - 1), 0);
	kvs_backend_close(b);

	KVS_CHECK_EQ(drop_file_cache(path), 0);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(read_shard(b, &id, SPB - 1, buf, SHARD), SHARD);
	for (uint32_t k = 0; k < SHARD; k++)
		KVS_CHECK_EQ(buf[k], pattern(40, SPB - 1, k));
	KVS_CHECK_EQ(cached_after_header(path, page, SPB - 1), 0);
	kvs_backend_close(b);

	/* opened ahead (kvs_backend_hint_read): its header's page is asked for
	 * alone too */
	KVS_CHECK_EQ(drop_file_cache(path), 0);
	ifd = watch_reads(40);
	KVS_CHECK_OK(ifd);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_hint_read(b, &id, 1));
	KVS_CHECK_OK(wait_opened(ifd)); /* the opener read the header */
	close(ifd);
	KVS_CHECK_EQ(read_shard(b, &id, SPB - 1, buf, SHARD), SHARD);
	KVS_CHECK_EQ(cached_after_header(path, page, SPB - 1), 0);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc test_header_readahead_pool(void)
{
	return header_readahead(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_header_readahead_uring(void)
{
	SKIP_WITHOUT_URING();
	return header_readahead(KVS_IO_ENGINE_URING);
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

static const struct kvs_test_case cases[] = {
	{ "geometry_pool", test_geometry_pool },
	{ "geometry_direct_pool", test_geometry_direct_pool },
	{ "hostile_headers_pool", test_hostile_headers_pool },
	{ "header_readahead_pool", test_header_readahead_pool },
};

/* `io_posix_file --uring [case...]` (CTest: io_posix_file_uring). */
static const struct kvs_test_case uring_cases[] = {
	{ "geometry_uring", test_geometry_uring },
	{ "geometry_direct_uring", test_geometry_direct_uring },
	{ "hostile_headers_uring", test_hostile_headers_uring },
	{ "header_readahead_uring", test_header_readahead_uring },
};

int main(int argc, char **argv)
{
	return kvs_test_run_groups(argc, argv, "--uring", cases, KVS_ARRAY_LEN(cases), uring_cases,
				   KVS_ARRAY_LEN(uring_cases), NULL, 0);
}
