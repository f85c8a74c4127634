/*
 * fuzz/fuzz_ctl.c — libFuzzer target: arbitrary bytes as a cache's control
 * segment, then attach and every read-only call.
 *
 * Every value the library reads from shared memory must be bounded before use:
 * a peer (or a stray writer) can leave anything in /dev/shm/kvshare.<id>.ctl.
 * Each input describes one control file (format: fuzz/ctl_input.h, in short:
 * an 8192-byte header image, a flags byte, then (u32 offset, u16 len, bytes)
 * patches; flag LIVE locks rank entry 0's liveness byte first, flag FIXUP makes
 * the header's derived fields agree with its fingerprint).  Per input the
 * harness:
 *
 *   1. writes /dev/shm/kvshare.fuzz.<pid>.ctl (size: the header's ctl_bytes,
 *      bounded by FUZZ_CTL_MAX_BYTES; see ctl_input.h);
 *   2. with LIVE, takes an OFD write lock on byte 0 from its own fd (a live
 *      rank 0: the attacher must not adopt or repair, only survive);
 *   3. kvs_cache_open(KVS_CACHE_ATTACH, device_id -1: a watcher maps the control
 *      segment only; attach timeout 2 ms, bucket lock timeout 200 us; a log
 *      callback that discards);
 *   4. if that succeeded: kvs_cache_exists, kvs_cache_lookup and
 *      kvs_cache_lookup_prefix (blocks fuzz_ctl_block(0..7), shards 0, 1, 3 and
 *      KVS_ALL_SHARDS), kvs_cache_stats (node, ranks 0, own, 63),
 *      kvs_cache_check, then kvs_cache_close;
 *   5. removes the file and checks that nothing of this cache is left (no
 *      /dev/shm entry, descriptor or mapping), and that the results kept the
 *      API's promises (abort otherwise: libFuzzer records a crash).
 *
 * Nothing may hang: the timeouts bound every wait, and libFuzzer's -timeout
 * turns a slow input into a reported crash.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "ctl_input.h"
#include "kvshare.h"

#define ATTACH_TIMEOUT_NS (2ull * 1000000ull)
#define LOCK_TIMEOUT_NS (200ull * 1000ull)

_Static_assert(FUZZ_CTL_HDR_BYTES == KVS_SHM_HEADER_BYTES, "input header is the segment's");

static char uid[KVS_UNIQUE_ID_MAX + 1]; /* fuzz.<pid> */
static char ctl_shm[128];                /* /kvshare.fuzz.<pid>.ctl */
static char shm_prefix[128];             /* kvshare.fuzz.<pid>. (a /dev/shm entry) */
static _Alignas(4096) uint8_t img[FUZZ_CTL_HDR_BYTES];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_ctl: %s\n", what);
	abort();
}

static volatile size_t log_bytes; /* keeps the strlen below */
static int verbose;                 /* FUZZ_CTL_VERBOSE=1: print the log and results */
static int fix_mutex_kind;          /* FUZZ_CTL_FIX_MUTEX_KIND=1: see fix_mutex_kinds() */

static void discard_log(void *arg, int level, const char *msg)
{
	(void)arg;
	log_bytes += strlen(msg); /* the line must be NUL-terminated (ASan checks the read) */
	if (verbose)
		fprintf(stderr, "fuzz_ctl: [kvs %d] %s\n", level, msg);
}

/* Remove /dev/shm entries of caches named fuzz.<pid> whose process is gone
 * (earlier runs that crashed, or fork-mode children). */
static void remove_stale(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int pid, n = 0;
		char path[512];

		if (sscanf(e->d_name, "kvshare.fuzz.%d.%n", &pid, &n) != 1 || n == 0 || pid <= 0)
			continue;
		if (kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
		unlink(path);
	}
	closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	snprintf(uid, sizeof(uid), "fuzz.%d", (int)getpid());
	snprintf(ctl_shm, sizeof(ctl_shm), "/kvshare.%s.ctl", uid);
	snprintf(shm_prefix, sizeof(shm_prefix), "kvshare.%s.", uid);
	verbose = getenv("FUZZ_CTL_VERBOSE") && atoi(getenv("FUZZ_CTL_VERBOSE")) > 0;
	fix_mutex_kind = getenv("FUZZ_CTL_FIX_MUTEX_KIND") && atoi(getenv("FUZZ_CTL_FIX_MUTEX_KIND")) > 0;
	remove_stale();
	return 0;
}

/* Make the header's derived fields agree with its fingerprint, computed by the
 * library itself where it has a function for it (FUZZ_CTL_F_FIXUP): build
 * words, state READY, region offsets and ctl_bytes; the last tensor size (so
 * the sizes sum to slot_bytes) and the tensor hash; the segment table's
 * first_slot, slot_count and bytes, split as the creator splits slot_count.
 * The rest (bucket_count, the segments' node, backing, page size and reserved
 * count, ...) stays as the input has it. */
static void fixup(struct kvs_shm_header *h)
{
	struct kvs_shm_fingerprint *f = &h->fp;
	struct kvs_core_regions r;
	uint32_t n = f->seg_count;

	h->magic = KVS_SHM_MAGIC;
	h->layout_version = KVS_LAYOUT_VERSION;
	h->format = kvs_core_format();
	atomic_store_explicit(&h->state, KVS_SHM_READY, memory_order_relaxed);
	if (f->tensor_count >= 1 && f->tensor_count <= KVS_MAX_TENSORS) {
		uint64_t sum = 0;

		for (uint32_t t = 0; t + 1 < f->tensor_count; t++)
			sum += h->tensor_bytes[t];
		if (sum < f->slot_bytes)
			h->tensor_bytes[f->tensor_count - 1] = f->slot_bytes - sum;
		f->tensor_hash = kvs_core_tensor_hash(h->tensor_bytes, f->tensor_count);
	}
	if (n >= 1 && n <= KVS_MAX_SEGS && f->slot_count <= UINT32_MAX) {
		uint64_t first = 0;

		for (uint32_t s = 0; s < n; s++) {
			struct kvs_shm_seg *sg = &h->segs[s];
			uint64_t count = f->slot_count / n + (s < f->slot_count % n), bytes, page;

			sg->first_slot = first;
			sg->slot_count = count;
			first += count;
			page = sg->page_bytes;
			if (!__builtin_mul_overflow(count, f->slot_bytes, &bytes) && page >= 4096 &&
			    (page & (page - 1)) == 0 && bytes <= UINT64_MAX - page)
				sg->bytes = (bytes + page - 1) / page * page;
		}
	}
	/* (a validation that refuses the fingerprint may leave r unset: zeros) */
	memset(&r, 0, sizeof(r));
	kvs_core_regions(f, &r);
	h->ranks_off = r.ranks_off;
	h->buckets_off = r.buckets_off;
	h->slots_off = r.slots_off;
	h->states_off = r.states_off;
	h->refbits_off = r.refbits_off;
	h->ctl_bytes = r.ctl_bytes;
}

/* Triage knob (FUZZ_CTL_FIX_MUTEX_KIND=1, never in CI): give every bucket
 * mutex the kind word the creator's pthread_mutex_init wrote (robust,
 * process-shared), leaving its lock, owner and list words as fuzzed.  glibc
 * trusts the kind word of a mutex, and some kinds crash it outright (lock
 * elision executes XABORT, SIGILL on a CPU without RTM), so this lets a run
 * explore the library's own code past that known finding. */
static void fix_mutex_kinds(uint8_t *map, uint64_t file_bytes, const struct kvs_shm_header *h)
{
	pthread_mutex_t ref;
	uint64_t end;

	if (kvs_core_mutex_init(&ref) != 0 || h->buckets_off >= file_bytes)
		return;
	end = file_bytes - h->buckets_off;
	for (uint64_t b = 0; b < h->fp.bucket_count && b < end / sizeof(struct kvs_shm_bucket); b++) {
		struct kvs_shm_bucket *bk = (struct kvs_shm_bucket *)(map + h->buckets_off) + b;

		bk->lock.__data.__kind = ref.__data.__kind;
	}
	pthread_mutex_destroy(&ref);
}

static uint64_t round_page(uint64_t v)
{
	return (v + FUZZ_CTL_PAGE - 1) / FUZZ_CTL_PAGE * FUZZ_CTL_PAGE;
}

/* Write the control file the input describes.  Returns its fd (dies on a
 * failure of the harness's own calls). */
static int write_ctl(const uint8_t *data, size_t size, unsigned *flags)
{
	const uint8_t *pp = data + FUZZ_CTL_HDR_BYTES + 1, *end = data + size;
	struct kvs_shm_header *h = (struct kvs_shm_header *)img;
	struct fuzz_ctl_patch pt;
	uint64_t ctl_bytes, file_bytes;
	uint8_t *map;
	int fd;

	memset(img, 0, sizeof(img));
	memcpy(img, data, size < FUZZ_CTL_HDR_BYTES ? size : FUZZ_CTL_HDR_BYTES);
	*flags = size > FUZZ_CTL_HDR_BYTES ? data[FUZZ_CTL_HDR_BYTES] : 0;
	if (size <= FUZZ_CTL_HDR_BYTES + 1)
		pp = end;
	/* Patches into the header image first: FIXUP sees the final header. */
	for (const uint8_t *p = pp; fuzz_ctl_next_patch(&p, end, &pt);)
		if (pt.off < FUZZ_CTL_HDR_BYTES)
			memcpy(img + pt.off, pt.bytes,
			       pt.len < FUZZ_CTL_HDR_BYTES - pt.off ? pt.len : FUZZ_CTL_HDR_BYTES - pt.off);
	if (*flags & FUZZ_CTL_F_FIXUP)
		fixup(h);
	ctl_bytes = h->ctl_bytes;
	if (ctl_bytes >= FUZZ_CTL_HDR_BYTES && ctl_bytes <= FUZZ_CTL_MAX_BYTES)
		file_bytes = ctl_bytes;
	else
		file_bytes = round_page(size < FUZZ_CTL_HDR_BYTES ? FUZZ_CTL_HDR_BYTES : size);

	fd = shm_open(ctl_shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		shm_unlink(ctl_shm);
		fd = shm_open(ctl_shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		die("shm_open of the control file failed");
	if (ftruncate(fd, (off_t)file_bytes) != 0)
		die("ftruncate of the control file failed (is /dev/shm full?)");
	map = mmap(NULL, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		die("mmap of the control file failed");
	memcpy(map, img, FUZZ_CTL_HDR_BYTES);
	for (const uint8_t *p = pp; fuzz_ctl_next_patch(&p, end, &pt);) {
		uint64_t from = pt.off < FUZZ_CTL_HDR_BYTES ? FUZZ_CTL_HDR_BYTES : pt.off;
		uint64_t to = (uint64_t)pt.off + pt.len;

		if (to > file_bytes)
			to = file_bytes;
		if (from < to)
			memcpy(map + from, pt.bytes + (from - pt.off), to - from);
	}
	if (fix_mutex_kind && h->buckets_off % KVS_CACHE_LINE == 0)
		fix_mutex_kinds(map, file_bytes, h);
	munmap(map, file_bytes);
	return fd;
}

/* Rank entry 0 looks alive: an OFD write lock on its byte from another open
 * file description than the attacher's. */
static int lock_rank0(void)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
	int fd = shm_open(ctl_shm, O_RDWR | O_CLOEXEC, 0);

	if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0)
		die("OFD lock on rank byte 0 failed");
	return fd;
}

static void read_only_calls(struct kvs_cache *c)
{
	static const uint32_t shards[] = { 0, 1, 3, KVS_ALL_SHARDS };
	struct kvs_block_id blocks[FUZZ_CTL_BLOCKS];
	bool hits[FUZZ_CTL_BLOCKS];
	struct kvs_cache_stats st;
	int ranks[] = { KVS_STATS_NODE, 0, kvs_cache_rank(c), (int)KVS_MAX_RANKS - 1 };
	int rc;

	for (uint32_t k = 0; k < FUZZ_CTL_BLOCKS; k++)
		blocks[k] = fuzz_ctl_block(k);
	for (uint32_t k = 0; k < FUZZ_CTL_BLOCKS; k++) {
		rc = kvs_cache_exists(c, &blocks[k], k % 4);
		if (verbose)
			fprintf(stderr, "fuzz_ctl: exists(block %u, shard %u) = %d\n", k, k % 4, rc);
		if (rc > 1)
			die("kvs_cache_exists returned > 1");
	}
	for (size_t s = 0; s < sizeof(shards) / sizeof(shards[0]); s++) {
		int n = 0;

		memset(hits, 0, sizeof(hits));
		rc = kvs_cache_lookup(c, blocks, FUZZ_CTL_BLOCKS, shards[s], hits);
		for (uint32_t k = 0; k < FUZZ_CTL_BLOCKS; k++)
			n += hits[k];
		if (rc > (int)FUZZ_CTL_BLOCKS || (rc >= 0 && rc != n))
			die("kvs_cache_lookup: count and hits[] disagree");
		if (verbose)
			fprintf(stderr, "fuzz_ctl: lookup(shard %u) = %d\n", shards[s], rc);
		rc = kvs_cache_lookup_prefix(c, blocks, FUZZ_CTL_BLOCKS, shards[s]);
		if (verbose)
			fprintf(stderr, "fuzz_ctl: lookup_prefix(shard %u) = %d\n", shards[s], rc);
		if (rc > (int)FUZZ_CTL_BLOCKS)
			die("kvs_cache_lookup_prefix returned more than n");
	}
	for (size_t r = 0; r < sizeof(ranks) / sizeof(ranks[0]); r++) {
		rc = kvs_cache_stats(c, ranks[r], &st);
		if (verbose)
			fprintf(stderr, "fuzz_ctl: stats(rank %d) = %d: %u attached, %llu ready, "
				"%llu loading, %llu failed, %llu pinned\n", ranks[r], rc,
				st.ranks_attached, (unsigned long long)st.slots_ready,
				(unsigned long long)st.slots_loading, (unsigned long long)st.slots_failed,
				(unsigned long long)st.slots_pinned);
		if (rc == 0 && st.ranks_attached > KVS_MAX_RANKS)
			die("kvs_cache_stats: more attached ranks than entries");
	}
	rc = kvs_cache_check(c);
	if (verbose)
		fprintf(stderr, "fuzz_ctl: check = %s\n", kvs_strerror(rc));
}

/* Nothing of cache fuzz.<pid> may remain once it is closed and its control
 * file removed: no /dev/shm entry (a watcher creates no data segment), no open
 * descriptor, no mapping.  (A plain fd count would not do: the sanitizers'
 * symbolizer keeps pipes open once libFuzzer has printed a new function.) */
static void check_nothing_left(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	char line[4096];
	bool left = false;
	FILE *maps;

	if (d) {
		while ((e = readdir(d))) {
			char path[512];

			if (strncmp(e->d_name, shm_prefix, strlen(shm_prefix)) != 0)
				continue;
			fprintf(stderr, "fuzz_ctl: left in /dev/shm: %s\n", e->d_name);
			snprintf(path, sizeof(path), "/dev/shm/%s", e->d_name);
			unlink(path);
			left = true;
		}
		closedir(d);
	}
	d = opendir("/proc/self/fd");
	if (d) {
		while ((e = readdir(d))) {
			char path[512], target[512];
			ssize_t n;

			snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
			n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strstr(target, shm_prefix)) {
				fprintf(stderr, "fuzz_ctl: fd %s still open: %s\n", e->d_name, target);
				left = true;
			}
		}
		closedir(d);
	}
	maps = fopen("/proc/self/maps", "re");
	if (maps) {
		while (fgets(line, sizeof(line), maps))
			if (strstr(line, shm_prefix)) {
				fprintf(stderr, "fuzz_ctl: still mapped: %s", line);
				left = true;
			}
		fclose(maps);
	}
	if (left)
		die("the closed cache left a file, descriptor or mapping behind");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	unsigned flags;
	int fd, lock_fd = -1, rc;

	fd = write_ctl(data, size, &flags);
	close(fd);
	if (flags & FUZZ_CTL_F_LIVE)
		lock_fd = lock_rank0();

	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", uid);
	cfg.device_id = -1;
	cfg.flags = KVS_CACHE_ATTACH;
	cfg.hugetlb = KVS_HUGETLB_OFF;
	cfg.numa = KVS_NUMA_OFF;
	cfg.attach_timeout_ns = ATTACH_TIMEOUT_NS;
	cfg.lock_timeout_ns = LOCK_TIMEOUT_NS;
	cfg.log = discard_log;
	rc = kvs_cache_open(&cfg, &c);
	if (verbose)
		fprintf(stderr, "fuzz_ctl: flags 0x%x, kvs_cache_open: %s\n", flags, kvs_strerror(rc));
	if (rc == 0) {
		if (!c)
			die("kvs_cache_open returned 0 without a cache");
		read_only_calls(c);
		kvs_cache_close(c);
	} else if (c) {
		die("kvs_cache_open failed but returned a cache");
	}

	if (lock_fd >= 0)
		close(lock_fd);
	shm_unlink(ctl_shm);
	check_nothing_left();
	return 0;
}
