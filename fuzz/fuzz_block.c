/*
 * fuzz/fuzz_block.c — libFuzzer target: a corrupt or truncated block file on
 * disk, read through the posix backend (io/posix.c) and through a store load
 * into a shared cache (core/store*.c).
 *
 * A block store is a directory anyone with the uid (or a careless admin, or a
 * half-copied backup) can leave anything in: files of the wrong length, holes,
 * symlinks, directories, FIFOs, sockets where a block file should be.  What a
 * reader may return is fixed by the backend contract (docs/io.md): a read
 * completes with the full length and the file's bytes, or with a negative
 * errno, never a partial count; a range past the end of the file is -EIO; a
 * path that lookup calls absent is refused at submit (-ENOENT); nothing hangs.
 *
 * Input (fuzz/README.md):
 *
 *   byte 0   geometry: shard_bytes = SHARD_SIZES[b & 7], shards_per_block
 *            1 + (b >> 3 & 7); bits 6 and 7 both set: also load through the
 *            store (step 2; a quarter of random inputs: it costs ten times
 *            the rest of an input, its threads handing the task around)
 *   byte 1   what is at the block's path (b % KIND_COUNT, enum kind below)
 *   byte 2   read range within each shard: 0 = the whole shard, else offset
 *            b % shard_bytes and a length derived from b (1..to the end)
 *   byte 3   bit 7: extend the file with a hole of (b & 0x7f) * 97 bytes
 *            (reads as zeros) after the content
 *   4...     the file's content (regular kinds)
 *
 * Per input the harness gives the block a fresh id (the backends' fd caches
 * never see a path twice), lays out the path, and:
 *
 *   1. with the posix backend of that geometry (opened once per geometry and
 *      kept: pool engine, queue depth 8; every shard's read in flight at
 *      once): kvs_backend_lookup is 1 exactly for
 *      a regular file (through a symlink too), 0 for anything else (-ELOOP
 *      for a symlink loop); for every shard, a read of a non-file is refused
 *      at submit (-ENOENT; a socket -ENXIO, a loop -ELOOP), a read of a file
 *      completes (within 5 s) with the full length and the file's bytes (zeros
 *      in a hole), or with -EIO exactly when the range ends past the file's
 *      end; shard = shards_per_block is -EINVAL;
 *   2. when byte 0 says so, through one store (512-byte shards, 4 per
 *      block, 16 slots, host copy engine, opened at the first input), loads the block's 4 shards into a
 *      host buffer: the task ends 0 with the file's bytes when the file holds
 *      the whole block, -EIO when it is shorter, a non-file's submit error
 *      otherwise; kvs_cache_check is clean (every 64th load: it walks
 *      every pin table);
 *   3. removes whatever is at the path.
 *
 * Files live under /dev/shm/kvshare.fuzz.<pid>.blocks (removed at exit; the
 * remains of a crashed run are removed by fuzz/run.sh).  A broken promise
 * aborts (libFuzzer records a crash).  FUZZ_BLOCK_VERBOSE=1 prints each result
 * and the library's log.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvshare.h"

#define NSEC (1000000000ull)
#define POLL_NS (5 * NSEC)
#define HEADER 4

#define STORE_SHARD 512u
#define STORE_SPB 4u
#define STORE_SLOTS 16u
#define CHECK_EVERY 64u
#define STORE_BITS 0xc0 /* byte 0: a store load too (~10x the cost of the rest) */

static const uint64_t SHARD_SIZES[8] = { 1, 2, 3, 16, 100, 512, 4096, 5000 };

/* What is at the block's path. */
enum kind {
	K_FILE,          /* a regular file: the content */
	K_SYMLINK,       /* a symlink to a regular file holding the content */
	K_DIR,           /* an empty directory */
	K_FIFO,          /* a FIFO nobody writes to (a blocking open would hang) */
	K_DANGLING,      /* a symlink to nothing */
	K_NONE,          /* nothing */
	K_FANOUT_FILE,   /* the second fan-out directory is a regular file (ENOTDIR) */
	K_SOCKET,        /* a socket node (open: ENXIO) */
	K_SELF_LOOP,     /* a symlink to itself (ELOOP) */
	KIND_COUNT
};

/* What lookup and a read's submit (and a store load) must say for each kind
 * (reads of the regular kinds: see check_backend). */
static const struct {
	int lookup, submit;
} expect[KIND_COUNT] = {
	[K_FILE] = { 1, 0 },           [K_SYMLINK] = { 1, 0 },
	[K_DIR] = { 0, -ENOENT },      [K_FIFO] = { 0, -ENOENT },
	[K_DANGLING] = { 0, -ENOENT }, [K_NONE] = { 0, -ENOENT },
	[K_FANOUT_FILE] = { 0, -ENOENT },
	[K_SOCKET] = { 0, -ENXIO },    [K_SELF_LOOP] = { -ELOOP, -ELOOP },
};

static int verbose = -1;
static char root[128];
static char fanout[160];  /* <root>/ab/cd */
static char target[160];  /* <root>/t: symlink targets */
static uint64_t counter;
static struct kvs_backend *backends[64];
static struct kvs_store *store;
static uint64_t store_loads;

static void die(const char *what)
{
	fprintf(stderr, "fuzz_block: %s\n", what);
	abort();
}

static void fuzz_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (verbose)
		fprintf(stderr, "  [log %d] %s\n", level, msg);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	remove(path);
	return 0;
}

static void cleanup(void)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		kvs_backend_close(backends[i]);
	kvs_store_close(store);
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char path[160];

	(void)argc, (void)argv;
	verbose = getenv("FUZZ_BLOCK_VERBOSE") != NULL;
	snprintf(root, sizeof(root), "/dev/shm/kvshare.fuzz.%d.blocks", (int)getpid());
	snprintf(fanout, sizeof(fanout), "%s/ab/cd", root);
	snprintf(target, sizeof(target), "%s/t", root);
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(path, sizeof(path), "%s/ab", root);
	if (mkdir(root, 0700) || mkdir(target, 0700) || mkdir(path, 0700) || mkdir(fanout, 0700))
		die("cannot create the block root in /dev/shm");
	atexit(cleanup);
	return 0;
}

/* Block n: fan-out "ab/cd" always (one directory pair to rebuild), n after it. */
static struct kvs_block_id block_id(uint64_t n)
{
	struct kvs_block_id id;

	memset(&id, 0, sizeof(id));
	id.bytes[0] = 0xab;
	id.bytes[1] = 0xcd;
	memcpy(id.bytes + 8, &n, sizeof(n));
	return id;
}

static void block_paths(const struct kvs_block_id *id, char *path, char *tpath, size_t len)
{
	char hex[33];

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id->bytes[i]);
	snprintf(path, len, "%s/%s", fanout, hex);
	snprintf(tpath, len, "%s/%s", target, hex);
}

static void write_content(const char *path, const uint8_t *c, size_t n, uint64_t size)
{
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);

	if (fd < 0)
		die("cannot create a block file");
	for (size_t done = 0; done < n;) {
		ssize_t w = write(fd, c + done, n - done);

		if (w <= 0)
			die("cannot write a block file");
		done += (size_t)w;
	}
	if (size > n && ftruncate(fd, (off_t)size))
		die("cannot extend a block file");
	close(fd);
}

/* Lay out kind k at path; the fan-out directories exist on entry and exit. */
static void lay_out(enum kind k, const char *path, const char *tpath, const uint8_t *c, size_t n,
		    uint64_t size)
{
	int rc = 0;

	switch (k) {
	case K_FILE:
		write_content(path, c, n, size);
		break;
	case K_SYMLINK:
		write_content(tpath, c, n, size);
		rc = symlink(tpath, path);
		break;
	case K_DIR:
		rc = mkdir(path, 0700);
		break;
	case K_FIFO:
		rc = mkfifo(path, 0600);
		break;
	case K_DANGLING:
		rc = symlink(tpath, path); /* tpath absent */
		break;
	case K_NONE:
		break;
	case K_FANOUT_FILE:
		if (rmdir(fanout))
			die("cannot remove the fan-out directory");
		write_content(fanout, c, n, size);
		break;
	case K_SOCKET:
		rc = mknod(path, S_IFSOCK | 0600, 0);
		break;
	case K_SELF_LOOP:
		rc = symlink(path, path);
		break;
	case KIND_COUNT:
		break;
	}
	if (rc)
		die("cannot lay out the block's path");
}

static void clear_path(enum kind k, const char *path, const char *tpath)
{
	if (k == K_FANOUT_FILE) {
		if (unlink(fanout) || mkdir(fanout, 0700))
			die("cannot restore the fan-out directory");
		return;
	}
	if (k == K_DIR ? rmdir(path) : k != K_NONE ? unlink(path) : 0)
		die("cannot remove the block's path");
	if (k == K_SYMLINK && unlink(tpath))
		die("cannot remove a symlink target");
}

static struct kvs_backend *backend_for(uint32_t g, uint64_t shard_bytes, uint32_t spb)
{
	struct kvs_backend_config cfg;
	int rc;

	if (backends[g])
		return backends[g];
	kvs_backend_config_init(&cfg);
	cfg.kind = KVS_BACKEND_POSIX;
	cfg.io_engine = KVS_IO_ENGINE_POOL;
	cfg.pool_threads = 1;
	cfg.queue_depth = 8;
	cfg.flags = KVS_BACKEND_F_NO_FSYNC;
	cfg.shard_bytes = shard_bytes;
	cfg.shards_per_block = spb;
	cfg.nroots = 1;
	cfg.roots[0] = root;
	cfg.log = fuzz_log;
	rc = kvs_backend_open(&cfg, &backends[g]);
	if (rc)
		die("kvs_backend_open failed");
	return backends[g];
}

/* Whether [off, off + len) of a file of size bytes with content c (n bytes,
 * zeros after) equals buf. */
static bool same_bytes(const uint8_t *buf, uint64_t off, uint64_t len, const uint8_t *c, size_t n)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != (off + i < n ? c[off + i] : 0))
			return false;
	return true;
}

/* 1: the posix backend's reads of every shard. */
static void check_backend(const struct kvs_block_id *id, uint8_t geo, uint8_t range, enum kind k,
			  const uint8_t *c, size_t n, uint64_t size)
{
	uint64_t sb = SHARD_SIZES[geo & 7];
	uint32_t spb = 1 + (geo >> 3 & 7);
	struct kvs_backend *b = backend_for(geo & 0x3f, sb, spb);
	uint64_t off = range ? range % sb : 0;
	uint64_t len = range ? 1 + (uint64_t)range * 7919 % (sb - off) : sb;
	uint8_t *buf = malloc(sb * spb);
	uint32_t inflight = 0, seen = 0;
	int rc = kvs_backend_lookup(b, id);

	if (!buf)
		die("out of memory");
	memset(buf, 0xa5, sb * spb);
	if (verbose)
		fprintf(stderr, "fuzz_block: shard_bytes %llu spb %u range %llu+%llu size %llu: lookup %d\n",
			(unsigned long long)sb, spb, (unsigned long long)off,
			(unsigned long long)len, (unsigned long long)size, rc);
	if (rc != expect[k].lookup)
		die("lookup says something else than the file's kind");
	/* every shard's read in flight at once (queue depth 8 >= spb), then each
	 * completion checked against its shard */
	for (uint32_t s = 0; s < spb; s++) {
		struct kvs_backend_io io = {
			.block = *id, .shard = s, .offset = off, .buf = buf + s * sb, .len = len,
			.token = s,
		};

		rc = kvs_backend_submit_read(b, &io);
		if (verbose)
			fprintf(stderr, "fuzz_block:   shard %u: submit %d\n", s, rc);
		if (rc != expect[k].submit)
			die("a read's submit says something else than the file's kind");
		if (rc == 0)
			inflight++;
	}
	while (inflight > 0) {
		struct kvs_backend_completion done[8];
		int got = kvs_backend_poll(b, done, 8, POLL_NS);

		if (got <= 0)
			die("no completion within 5 s");
		for (int i = 0; i < got; i++) {
			uint64_t s = done[i].token, end = s * sb + off + len;

			if (s >= spb || seen & (1u << s))
				die("a completion with an unknown or repeated token");
			seen |= 1u << s;
			inflight--;
			if (verbose)
				fprintf(stderr, "fuzz_block:   shard %llu: result %lld\n",
					(unsigned long long)s, (long long)done[i].result);
			if (end > size) {
				if (done[i].result != -EIO)
					die("a read past the end of the file is not -EIO");
			} else if (done[i].result != (int64_t)len) {
				die("a read inside the file is not the full length");
			} else if (!same_bytes(buf + s * sb, s * sb + off, len, c, n)) {
				die("a read returned other bytes than the file's");
			}
		}
	}
	{
		struct kvs_backend_io io = { .block = *id, .shard = spb, .buf = buf, .len = sb };

		if (kvs_backend_submit_read(b, &io) != -EINVAL)
			die("shard = shards_per_block is not -EINVAL");
	}
	free(buf);
}

static void open_store(void)
{
	struct kvs_store_config cfg;
	int rc;

	kvs_store_config_init(&cfg);
	snprintf(cfg.cache.unique_id, sizeof(cfg.cache.unique_id), "fuzz.%d.store", (int)getpid());
	cfg.cache.slot_bytes = STORE_SHARD;
	cfg.cache.slot_count = STORE_SLOTS;
	cfg.cache.shards_per_block = STORE_SPB;
	cfg.cache.hugetlb = KVS_HUGETLB_OFF;
	cfg.copy_engine = KVS_COPY_ENGINE_HOST;
	cfg.prealloc = 0;
	cfg.backend.kind = KVS_BACKEND_POSIX;
	cfg.backend.io_engine = KVS_IO_ENGINE_POOL;
	cfg.backend.pool_threads = 1;
	cfg.backend.flags = KVS_BACKEND_F_NO_FSYNC;
	cfg.backend.nroots = 1;
	cfg.backend.roots[0] = root;
	cfg.log = fuzz_log;
	rc = kvs_store_open(&cfg, &store);
	if (rc)
		die("kvs_store_open failed");
}

/* 2: a store load of the whole block. */
static void check_store(const struct kvs_block_id *id, enum kind k, const uint8_t *c, size_t n,
			uint64_t size)
{
	static uint8_t buf[STORE_SHARD * STORE_SPB];
	struct kvs_store_tensor t[STORE_SPB];
	struct kvs_store_shard sh[STORE_SPB];
	uint64_t task;
	int rc;

	if (!store)
		open_store();
	memset(buf, 0xa5, sizeof(buf));
	for (uint32_t s = 0; s < STORE_SPB; s++) {
		t[s] = (struct kvs_store_tensor){ .addr = (uint64_t)(uintptr_t)(buf + s * STORE_SHARD) };
		sh[s] = (struct kvs_store_shard){ .block = *id, .shard = s, .tensor_count = 1,
						  .tensors = &t[s] };
	}
	if (kvs_store_load(store, sh, STORE_SPB, &task))
		die("kvs_store_load refused");
	rc = kvs_store_wait(store, task, 20 * NSEC);
	if (verbose)
		fprintf(stderr, "fuzz_block: store load -> %d\n", rc);
	if (rc == 1)
		die("store load still running after 20 s");
	if (expect[k].submit) {
		if (rc != expect[k].submit)
			die("a store load of a non-file fails with another code than its reads");
	} else if (size < sizeof(buf)) {
		if (rc != -EIO)
			die("a store load of a short block file is not -EIO");
	} else if (rc != 0) {
		die("a store load of a whole block file failed");
	} else if (!same_bytes(buf, 0, sizeof(buf), c, n)) {
		die("a store load returned other bytes than the file's");
	}
	/* kvs_cache_check walks every pin table (64 x 4096 entries): every
	 * CHECK_EVERY loads, or it would cost more than the rest of the input */
	if (++store_loads % CHECK_EVERY == 0 && kvs_cache_check(kvs_store_cache(store)))
		die("kvs_cache_check not clean after a load");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[256], tpath[256];
	struct kvs_block_id id;
	const uint8_t *c = data + HEADER;
	size_t n;
	uint64_t fsize;
	enum kind k;

	if (size < HEADER)
		return 0;
	n = size - HEADER;
	k = (enum kind)(data[1] % KIND_COUNT);
	fsize = n + ((data[3] & 0x80) ? (uint64_t)(data[3] & 0x7f) * 97 : 0);
	id = block_id(++counter);
	block_paths(&id, path, tpath, sizeof(path));
	lay_out(k, path, tpath, c, n, fsize);
	if (verbose)
		fprintf(stderr, "fuzz_block: kind %d, %zu bytes of content, size %llu\n", (int)k, n,
			(unsigned long long)fsize);
	check_backend(&id, data[0], data[2], k, c, n, fsize);
	if ((data[0] & STORE_BITS) == STORE_BITS)
		check_store(&id, k, c, n, fsize);
	clear_path(k, path, tpath);
	return 0;
}
