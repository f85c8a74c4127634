/*
 * fuzz/fuzz_block.c — libFuzzer target: a corrupt or truncated block file on
 * disk, read through the posix backend (io/posix_read.c) and through a store load
 * into a shared cache (store/).
 *
 * A block store is a directory anyone with the uid (or a careless admin, or a
 * half-copied backup, or a store of another geometry) can leave anything in:
 * files of the wrong length, holes, symlinks, directories, FIFOs, sockets
 * where a block file should be; block files whose header (docs/io.md, "Block
 * file format") is missing, cut, flipped, another block's, or valid but of
 * another geometry.  What a reader may return is fixed by the backend contract
 * (docs/io.md): a read completes with the full length and the file's bytes
 * after its header, or with a negative errno, never a partial count; a range
 * past the end of the file is -EIO; a path that lookup calls absent is refused
 * at submit (-ENOENT); a header that is not this block's is -EIO at submit, one
 * of another geometry -KVS_ECONFIG, and lookup calls both absent; nothing hangs.
 *
 * Input (fuzz/README.md):
 *
 *   byte 0   geometry: shard_bytes = SHARD_SIZES[b & 7], shards_per_block
 *            1 + (b >> 3 & 7) (tensor table and layout_tag: geometry());
 *            bits 6 and 7 both set: also load through the store (step 2; a
 *            quarter of random inputs: it costs ten times the rest of an
 *            input, its threads handing the task around)
 *   byte 1   what is at the block's path (b % KIND_COUNT, enum kind below)
 *   byte 2   read range within each shard: 0 = the whole shard, else offset
 *            b % shard_bytes and a length derived from b (1..to the end)
 *   byte 3   bit 7: extend the file with a hole of (b & 0x7f) * 97 bytes
 *            (reads as zeros) after the content (not after a cut header)
 *   byte 4   the file's header (b % HDR_MODES, enum hdr_mode below), made
 *            with the library's encoder for byte 0's geometry and this
 *            input's block: valid, none, one field changed (re-checksummed),
 *            one byte flipped (not), or cut short
 *   5..13    the header mode's parameters
 *   14...    the file's content, after the header (regular kinds)
 *
 * Per input the harness gives the block a fresh id (the backends' fd caches
 * and warning tables never see a path twice), lays out the path, and:
 *
 *   1. with the posix backend of that geometry (opened once per geometry and
 *      kept: pool engine, queue depth 8; every shard's read in flight at
 *      once): for a non-file kvs_backend_lookup is 0 (-ELOOP for a symlink
 *      loop) and every shard's read is refused at submit (-ENOENT; a socket
 *      -ENXIO, a loop -ELOOP); for a regular file (through a symlink too)
 *      whose header a reader must refuse, lookup is 0 and every read is
 *      refused with the header's error (-EIO, -KVS_ECONFIG); else lookup is 1
 *      exactly when the file holds every shard after its header, and a read
 *      completes (within 5 s) with the full length and the file's bytes at
 *      header_bytes + shard * shard_bytes + offset (zeros in a hole), or with
 *      -EIO exactly when the range ends past the file's end; shard =
 *      shards_per_block is -EINVAL;
 *   2. when byte 0 says so, through one store (512-byte shards, 4 per block,
 *      tensors 128 + 384, layout_tag LAYOUT_TAG: byte 0's geometry 0xdd;
 *      16 slots, host copy engine, opened at the first input), loads the
 *      block's 4 shards into host buffers: the task ends 0 with the file's
 *      bytes when the header is valid for the store and the file holds the
 *      whole block, -EIO when it is shorter, the header's error when the store
 *      must refuse it (-KVS_ECONFIG for byte 0's other geometries), a
 *      non-file's submit error otherwise; kvs_cache_check is clean (every
 *      64th load: it walks every pin table);
 *   3. removes whatever is at the path.
 *
 * Expected results come from what the harness put in the header (the decoder's
 * order of checks, docs/io.md's table), never from the library's decoder.
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

#include "io/internal.h"
#include "kvshare.h"

#define NSEC (1000000000ull)
#define POLL_NS (5 * NSEC)
#define INPUT_HEAD 14 /* selector bytes before the content */
#define HDR_REGION KVS_IO_BLOCK_HDR_MIN_BYTES /* what the harness writes a header in */

#define STORE_SHARD 512u
#define STORE_SPB 4u
#define STORE_T0 128u /* the store's tensors: 128 + 384 */
#define STORE_SLOTS 16u
#define CHECK_EVERY 64u
#define STORE_BITS 0xc0 /* byte 0: a store load too (~10x the cost of the rest) */
#define LAYOUT_TAG UINT64_C(0x5107e)

static const uint64_t SHARD_SIZES[8] = { 1, 2, 3, 16, 100, 512, 4096, 5000 };

/* The header at the start of a regular file (byte 4). */
enum hdr_mode {
	H_VALID, /* byte 0's geometry, this block: valid */
	H_NONE,  /* none: the content from offset 0 (the format before headers), its
		    first byte made not 'K' so that it cannot be a header */
	H_FIELD, /* one field (byte 5 & 15, enum hfield; a tensor: index byte 5 >> 4)
		    XORed with bytes 6..13 (LE), re-encoded: a valid checksum */
	H_FLIP,  /* byte (bytes 5..6 LE) % HDR_REGION XORed with byte 7 | 1: the
		    checksum covers only the used part, the rest is padding */
	H_CUT,   /* only the first (bytes 5..6 LE) % HDR_REGION bytes: no content, no hole */
	HDR_MODES
};

/* The fields H_FIELD changes. */
enum hfield {
	F_HEADER_BYTES, F_SPB, F_SHARD_BYTES, F_TENSOR_COUNT, F_TENSOR, F_LAYOUT_TAG,
	F_BLOCK, F_FLAGS, FIELD_COUNT
};

/* The block file's image: what the harness writes at the block's path (regular
 * kinds), and what a reader must make of its header. */
struct image {
	uint8_t *bytes;
	size_t len;
	int err;           /* for the backend's geometry: 0, -EIO or -KVS_ECONFIG */
	int store_err;     /* for the store's */
	uint64_t data_off; /* err 0: the header's header_bytes */
};

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

/* Byte 0's geometry: a table of two tensors (a quarter and the rest) when the
 * shard has 4 bytes or more, one tensor otherwise; layout_tag LAYOUT_TAG.  So
 * 0xdd (512 x 4) is the store's. */
static void geometry(uint8_t geo, struct kvs_io_geom *g)
{
	memset(g, 0, sizeof(*g));
	g->shard_bytes = SHARD_SIZES[geo & 7];
	g->spb = 1 + (geo >> 3 & 7);
	g->layout_tag = LAYOUT_TAG;
	g->tensor_count = g->shard_bytes >= 4 ? 2 : 1;
	g->tensor_bytes[0] = g->tensor_count == 2 ? g->shard_bytes / 4 : g->shard_bytes;
	g->tensor_bytes[1] = g->shard_bytes - g->shard_bytes / 4;
}

static struct kvs_backend *backend_for(uint32_t idx, const struct kvs_io_geom *g)
{
	struct kvs_backend_config cfg;
	int rc;

	if (backends[idx])
		return backends[idx];
	kvs_backend_config_init(&cfg);
	cfg.kind = KVS_BACKEND_POSIX;
	cfg.io_engine = KVS_IO_ENGINE_POOL;
	cfg.pool_threads = 1;
	cfg.queue_depth = 8;
	cfg.flags = KVS_BACKEND_F_NO_FSYNC;
	cfg.shard_bytes = g->shard_bytes;
	cfg.shards_per_block = g->spb;
	cfg.tensor_count = g->tensor_count;
	cfg.tensor_bytes = g->tensor_bytes;
	cfg.layout_tag = g->layout_tag;
	cfg.nroots = 1;
	cfg.roots[0] = root;
	cfg.log = fuzz_log;
	rc = kvs_backend_open(&cfg, &backends[idx]);
	if (rc)
		die("kvs_backend_open failed");
	return backends[idx];
}

/* Whether [off, off + len) of a file holding im (zeros after) equals buf. */
static bool same_bytes(const uint8_t *buf, uint64_t off, uint64_t len, const struct image *im)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != (off + i < im->len ? im->bytes[off + i] : 0))
			return false;
	return true;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Whether a reader of geometry g accepts header h of block id (docs/io.md's
 * checks, in the decoder's order): 0, -EIO or -KVS_ECONFIG. */
static int verdict(const struct kvs_io_block_hdr *h, const struct kvs_block_id *id,
		   const struct kvs_io_geom *g)
{
	if (h->header_bytes < KVS_IO_BLOCK_HDR_MIN_BYTES || h->header_bytes > KVS_IO_BLOCK_HDR_MAX_BYTES ||
	    h->geom.tensor_count == 0 || h->geom.tensor_count > KVS_MAX_TENSORS || h->flags ||
	    memcmp(&h->block, id, sizeof(*id)))
		return -EIO;
	if (h->geom.shard_bytes != g->shard_bytes || h->geom.spb != g->spb ||
	    h->geom.layout_tag != g->layout_tag || h->geom.tensor_count != g->tensor_count ||
	    memcmp(h->geom.tensor_bytes, g->tensor_bytes, g->tensor_count * sizeof(uint64_t)))
		return -KVS_ECONFIG;
	return 0;
}

/* The file's image for input d (head: INPUT_HEAD bytes) and content c[n], block
 * id, byte 0's geometry g; its verdicts for g and the store's geometry st. */
static void build_image(const uint8_t *d, const uint8_t *c, size_t n, const struct kvs_block_id *id,
			const struct kvs_io_geom *g, const struct kvs_io_geom *st, struct image *im)
{
	enum hdr_mode mode = (enum hdr_mode)(d[4] % HDR_MODES);
	struct kvs_io_block_hdr h = { .header_bytes = HDR_REGION, .block = *id, .geom = *g };
	uint64_t mask = le(d + 6, 8), pos = le(d + 5, 2) % HDR_REGION;
	size_t used;

	im->bytes = calloc(1, HDR_REGION + n + 1);
	if (!im->bytes)
		die("out of memory");
	if (mode == H_NONE) {
		memcpy(im->bytes, c, n);
		if (n && im->bytes[0] == 'K')
			im->bytes[0] ^= 0x80;
		im->len = n;
		im->err = im->store_err = -EIO;
		return;
	}
	if (mode == H_FIELD) {
		switch ((enum hfield)((d[5] & 15) % FIELD_COUNT)) {
		case F_HEADER_BYTES: h.header_bytes ^= (uint32_t)mask; break;
		case F_SPB: h.geom.spb ^= (uint32_t)mask; break;
		case F_SHARD_BYTES: h.geom.shard_bytes ^= mask; break;
		case F_TENSOR_COUNT: h.geom.tensor_count ^= (uint32_t)mask; break;
		case F_TENSOR: h.geom.tensor_bytes[(d[5] >> 4) % g->tensor_count] ^= mask; break;
		case F_LAYOUT_TAG: h.geom.layout_tag ^= mask; break;
		case F_BLOCK: {
			uint64_t w;

			memcpy(&w, h.block.bytes, 8);
			w ^= mask;
			memcpy(h.block.bytes, &w, 8);
			break;
		}
		case F_FLAGS: h.flags ^= (uint32_t)mask; break;
		case FIELD_COUNT: break;
		}
	}
	used = kvs_io_block_hdr_encode(&h, im->bytes);
	im->err = verdict(&h, id, g);
	im->store_err = verdict(&h, id, st);
	im->data_off = h.header_bytes;
	im->len = HDR_REGION + n;
	memcpy(im->bytes + HDR_REGION, c, n);
	if (mode == H_FLIP) {
		im->bytes[pos] ^= d[7] | 1;
		if (pos < used)
			im->err = im->store_err = -EIO;
	} else if (mode == H_CUT) {
		im->len = pos;
		if (pos < used)
			im->err = im->store_err = -EIO;
	}
}

/* Whether kind k puts the image at the block's path (through a symlink too). */
static bool regular(enum kind k)
{
	return k == K_FILE || k == K_SYMLINK;
}

/* 1: the posix backend's reads of every shard. */
static void check_backend(const struct kvs_block_id *id, uint8_t geo, const struct kvs_io_geom *g,
			  uint8_t range, enum kind k, const struct image *im, uint64_t size)
{
	uint64_t sb = g->shard_bytes;
	uint32_t spb = g->spb;
	struct kvs_backend *b = backend_for(geo & 0x3f, g);
	uint64_t off = range ? range % sb : 0;
	uint64_t len = range ? 1 + (uint64_t)range * 7919 % (sb - off) : sb;
	uint8_t *buf = malloc(sb * spb);
	uint32_t inflight = 0, seen = 0;
	int rc = kvs_backend_lookup(b, id);
	int want_lookup = expect[k].lookup, want_submit = expect[k].submit;

	if (!buf)
		die("out of memory");
	if (regular(k)) {
		want_submit = im->err;
		want_lookup = !im->err && size >= im->data_off + spb * sb;
	}
	memset(buf, 0xa5, sb * spb);
	if (verbose)
		fprintf(stderr, "fuzz_block: shard_bytes %llu spb %u range %llu+%llu size %llu header %d "
			"data at %llu: lookup %d\n", (unsigned long long)sb, spb,
			(unsigned long long)off, (unsigned long long)len, (unsigned long long)size,
			im->err, (unsigned long long)im->data_off, rc);
	if (rc != want_lookup)
		die("lookup says something else than the file's kind and header");
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
		if (rc != want_submit)
			die("a read's submit says something else than the file's kind and header");
		if (rc == 0)
			inflight++;
	}
	while (inflight > 0) {
		struct kvs_backend_completion done[8];
		int got = kvs_backend_poll(b, done, 8, POLL_NS);

		if (got <= 0)
			die("no completion within 5 s");
		for (int i = 0; i < got; i++) {
			uint64_t s = done[i].token, start = im->data_off + s * sb + off;
			uint64_t end = start + len;

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
			} else if (!same_bytes(buf + s * sb, start, len, im)) {
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
	cfg.cache.tensor_count = 2;
	cfg.cache.tensor_bytes[0] = STORE_T0;
	cfg.cache.tensor_bytes[1] = STORE_SHARD - STORE_T0;
	cfg.backend.layout_tag = LAYOUT_TAG;
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
static void check_store(const struct kvs_block_id *id, enum kind k, const struct image *im,
			uint64_t size)
{
	static uint8_t buf[STORE_SHARD * STORE_SPB];
	struct kvs_store_tensor t[STORE_SPB][2];
	struct kvs_store_shard sh[STORE_SPB];
	int want = regular(k) ? im->store_err : expect[k].submit;
	uint64_t task;
	int rc;

	if (!store)
		open_store();
	memset(buf, 0xa5, sizeof(buf));
	for (uint32_t s = 0; s < STORE_SPB; s++) {
		t[s][0] = (struct kvs_store_tensor){ .addr = (uint64_t)(uintptr_t)(buf + s * STORE_SHARD) };
		t[s][1] = (struct kvs_store_tensor){
			.addr = (uint64_t)(uintptr_t)(buf + s * STORE_SHARD + STORE_T0) };
		sh[s] = (struct kvs_store_shard){ .block = *id, .shard = s, .tensor_count = 2,
						  .tensors = t[s] };
	}
	if (kvs_store_load(store, sh, STORE_SPB, &task))
		die("kvs_store_load refused");
	rc = kvs_store_wait(store, task, 20 * NSEC);
	if (verbose)
		fprintf(stderr, "fuzz_block: store load -> %d\n", rc);
	if (rc == 1)
		die("store load still running after 20 s");
	if (want) {
		if (rc != want)
			die("a store load of a non-file or of a refused header fails with another "
			    "code than its reads");
	} else if (size < im->data_off + sizeof(buf)) {
		if (rc != -EIO)
			die("a store load of a short block file is not -EIO");
	} else if (rc != 0) {
		die("a store load of a whole block file failed");
	} else if (!same_bytes(buf, im->data_off, sizeof(buf), im)) {
		die("a store load returned other bytes than the file's");
	}
	/* kvs_cache_check walks every pin table (64 x 4096 entries): every
	 * CHECK_EVERY loads, or it would cost more than the rest of the input */
	if (++store_loads % CHECK_EVERY == 0 && kvs_cache_check(kvs_store_cache(store)))
		die("kvs_cache_check not clean after a load");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvs_io_geom g, st;
	char path[256], tpath[256];
	struct kvs_block_id id;
	struct image im;
	uint64_t fsize;
	enum kind k;

	if (size < INPUT_HEAD)
		return 0;
	k = (enum kind)(data[1] % KIND_COUNT);
	id = block_id(++counter);
	geometry(data[0], &g);
	geometry(0xdd, &st); /* the store's: 512 x 4, tensors 128 + 384 */
	build_image(data, data + INPUT_HEAD, size - INPUT_HEAD, &id, &g, &st, &im);
	/* A cut header stays cut: a hole after it would read as the missing bytes. */
	fsize = im.len + ((data[3] & 0x80) && data[4] % HDR_MODES != H_CUT
				  ? (uint64_t)(data[3] & 0x7f) * 97 : 0);
	block_paths(&id, path, tpath, sizeof(path));
	lay_out(k, path, tpath, im.bytes, im.len, fsize);
	if (verbose)
		fprintf(stderr, "fuzz_block: kind %d, header mode %d, %zu bytes in the file, size %llu\n",
			(int)k, data[4] % HDR_MODES, im.len, (unsigned long long)fsize);
	check_backend(&id, data[0], &g, data[2], k, &im, fsize);
	if ((data[0] & STORE_BITS) == STORE_BITS)
		check_store(&id, k, &im, fsize);
	clear_path(k, path, tpath);
	free(im.bytes);
	return 0;
}
