/*
 * fuzz/seed_ctl.c — writes the seed corpus of fuzz_ctl (fuzz/corpus/ctl) from
 * real caches.
 *
 *   seed_ctl <outdir>        (make fuzz-seeds: build-fuzz/fuzz/seed_ctl fuzz/corpus/ctl)
 *
 * For each geometry below it creates a cache with the public API (plain build:
 * control file and data file in /dev/shm), keys a few slots READY, LOADING (the
 * owner still filling) and FAILED, keeps one READY slot pinned, and then, while
 * the cache is still open (rank entry 0 ATTACHED, its pins in place), encodes
 * the control file in the input format of fuzz/ctl_input.h: the 8192-byte
 * header, a flags byte, and patches covering every non-zero byte after the
 * header.  Each cache gives one seed per flags value (none, LIVE, FIXUP,
 * LIVE|FIXUP): <outdir>/<geometry>-f<flags>.  Every seed is decoded again and
 * compared with the file before it is written.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl_input.h"
#include "kvshare.h"

/* A zero gap shorter than this between non-zero runs is carried inside one
 * patch (a new patch costs FUZZ_CTL_PATCH_HDR bytes). */
#define MERGE_GAP 8u

struct geometry {
	const char *name;
	uint64_t slots;
	uint32_t shards;
	uint32_t reserved;
	uint32_t local_rank_size;
	uint32_t tensors;  /* 0: one tensor of slot_bytes; else equal parts */
	uint32_t ready;    /* blocks with every shard READY (blocks 0..ready-1) */
	uint32_t loading;  /* shard 0 of the next blocks: owner, unpublished, pinned */
	uint32_t failed;   /* shard 0 of the next blocks: FAILED(-EIO), unpinned */
	uint32_t pinned;   /* READY blocks whose shard 0 stays pinned (a hit) */
};

static const struct geometry geometries[] = {
	{ "s4-sh1", 4, 1, 0, 8, 0, 1, 1, 1, 1 },
	{ "s16-sh2", 16, 2, 0, 8, 0, 3, 1, 1, 1 },
	{ "s33-sh3-lrs2", 33, 3, 2, 2, 3, 2, 2, 1, 1 },
	{ "s64-sh4-rsv4", 64, 4, 4, 8, 2, 4, 1, 2, 2 },
	{ "s8-sh1-full", 8, 1, 0, 4, 0, 6, 1, 1, 3 },
};

static const unsigned flag_sets[] = {
	0,
	FUZZ_CTL_F_LIVE,
	FUZZ_CTL_F_FIXUP,
	FUZZ_CTL_F_LIVE | FUZZ_CTL_F_FIXUP,
};

#define MAX_PINS 64

static void fail(const char *what, int rc)
{
	fprintf(stderr, "seed_ctl: %s: %s\n", what, rc ? kvs_strerror(rc) : strerror(errno));
	exit(1);
}

static void quiet_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [kvs %d] %s\n", level, msg);
}

/* Encoded seed: header image, flags, patches of the non-zero bytes. */
struct buf {
	uint8_t *p;
	size_t len, cap;
};

static void put(struct buf *b, const void *src, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			fail("realloc", ENOMEM);
	}
	memcpy(b->p + b->len, src, n);
	b->len += n;
}

static void put_patch(struct buf *b, const uint8_t *file, uint64_t off, uint64_t len)
{
	uint8_t h[FUZZ_CTL_PATCH_HDR] = { (uint8_t)off, (uint8_t)(off >> 8), (uint8_t)(off >> 16),
					  (uint8_t)(off >> 24), (uint8_t)len, (uint8_t)(len >> 8) };

	put(b, h, sizeof(h));
	put(b, file + off, len);
}

static void encode(struct buf *b, const uint8_t *file, uint64_t bytes, unsigned flags)
{
	uint8_t f = (uint8_t)flags;
	uint64_t i = FUZZ_CTL_HDR_BYTES;

	b->len = 0;
	put(b, file, FUZZ_CTL_HDR_BYTES);
	put(b, &f, 1);
	while (i < bytes) {
		uint64_t start, last;

		while (i < bytes && file[i] == 0)
			i++;
		if (i == bytes)
			break;
		start = last = i;
		/* extend over non-zero bytes and short zero gaps */
		while (i < bytes && i - start < FUZZ_CTL_PATCH_MAX && i - last <= MERGE_GAP) {
			if (file[i])
				last = i;
			i++;
		}
		put_patch(b, file, start, last + 1 - start);
		i = last + 1;
	}
}

/* Decode like the harness (without FIXUP) and compare with the file. */
static void verify(const struct buf *b, const uint8_t *file, uint64_t bytes)
{
	uint8_t *img = calloc(1, bytes);
	const uint8_t *p = b->p + FUZZ_CTL_HDR_BYTES + 1, *end = b->p + b->len;
	struct fuzz_ctl_patch pt;

	if (!img)
		fail("calloc", ENOMEM);
	memcpy(img, b->p, FUZZ_CTL_HDR_BYTES);
	while (fuzz_ctl_next_patch(&p, end, &pt)) {
		if ((uint64_t)pt.off + pt.len > bytes)
			fail("verify: patch beyond the file", EINVAL);
		memcpy(img + pt.off, pt.bytes, pt.len);
	}
	if (memcmp(img, file, bytes) != 0)
		fail("verify: decoded seed differs from the control file", EINVAL);
	free(img);
}

static uint8_t *read_ctl(const char *uid, uint64_t *bytes)
{
	char path[256];
	struct stat st;
	uint8_t *p;
	int fd;

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0)
		fail(path, 0);
	p = malloc((size_t)st.st_size);
	if (!p)
		fail("malloc", ENOMEM);
	for (off_t done = 0; done < st.st_size;) {
		ssize_t n = pread(fd, p + done, (size_t)(st.st_size - done), done);
		if (n <= 0)
			fail("read of the control file", 0);
		done += n;
	}
	close(fd);
	*bytes = (uint64_t)st.st_size;
	return p;
}

static void get(struct kvs_cache *c, uint32_t block, uint32_t shard, struct kvs_slot *s)
{
	struct kvs_block_id id = fuzz_ctl_block(block);
	int rc = kvs_cache_get(c, &id, shard, 0, s);

	if (rc)
		fail("kvs_cache_get", rc);
}

static void make_seeds(const struct geometry *g, const char *outdir)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c;
	struct kvs_slot pins[MAX_PINS];
	uint32_t npins = 0, block = 0;
	uint64_t bytes;
	uint8_t *file;
	struct buf b = { 0 };
	int rc;

	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "seedctl.%d.%s", (int)getpid(), g->name);
	cfg.device_id = 0;
	cfg.slot_count = g->slots;
	cfg.slot_bytes = 4096;
	cfg.shards_per_block = g->shards;
	cfg.reserved_slots = g->reserved;
	cfg.local_rank_size = g->local_rank_size;
	cfg.tensor_count = g->tensors;
	for (uint32_t t = 0; t < g->tensors; t++)
		cfg.tensor_bytes[t] = cfg.slot_bytes / g->tensors +
				      (t < cfg.slot_bytes % g->tensors ? 1 : 0);
	cfg.hugetlb = KVS_HUGETLB_OFF;
	cfg.numa = KVS_NUMA_OFF;
	cfg.log = quiet_log;
	rc = kvs_cache_open(&cfg, &c);
	if (rc)
		fail("kvs_cache_open", rc);

	for (uint32_t k = 0; k < g->ready; k++, block++) {
		for (uint32_t s = 0; s < g->shards; s++) {
			struct kvs_slot sl;
			void *data;

			get(c, block, s, &sl);
			if (sl.flags & KVS_SLOT_OWNER) {
				if ((rc = kvs_slot_data(c, &sl, &data)))
					fail("kvs_slot_data", rc);
				memset(data, (int)(block * 16 + s + 1), cfg.slot_bytes);
				if ((rc = kvs_slot_publish_ready(c, &sl)))
					fail("kvs_slot_publish_ready", rc);
			}
			if ((rc = kvs_slot_release(c, &sl)))
				fail("kvs_slot_release", rc);
		}
		if (k < g->pinned && npins < MAX_PINS) /* a hit, kept pinned */
			get(c, block, 0, &pins[npins++]);
	}
	for (uint32_t k = 0; k < g->loading && npins < MAX_PINS; k++, block++)
		get(c, block, 0, &pins[npins++]); /* owner, never published */
	for (uint32_t k = 0; k < g->failed; k++, block++) {
		struct kvs_slot sl;

		get(c, block, 0, &sl);
		if ((rc = kvs_slot_publish_failed(c, &sl, -EIO)))
			fail("kvs_slot_publish_failed", rc);
		if ((rc = kvs_slot_release(c, &sl)))
			fail("kvs_slot_release", rc);
	}
	if ((rc = kvs_cache_check(c)))
		fail("kvs_cache_check of the seed cache", rc);

	/* Snapshot while attached: rank 0 ATTACHED with its pins. */
	file = read_ctl(cfg.unique_id, &bytes);
	for (size_t f = 0; f < sizeof(flag_sets) / sizeof(flag_sets[0]); f++) {
		char path[4096];
		FILE *out;

		encode(&b, file, bytes, flag_sets[f]);
		verify(&b, file, bytes);
		snprintf(path, sizeof(path), "%s/%s-f%u", outdir, g->name, flag_sets[f]);
		out = fopen(path, "wb");
		if (!out || fwrite(b.p, 1, b.len, out) != b.len || fclose(out) != 0)
			fail(path, 0);
		printf("%s: %zu bytes (control file %llu bytes)\n", path, b.len,
		       (unsigned long long)bytes);
	}
	free(b.p);
	free(file);

	for (uint32_t k = 0; k < npins; k++) {
		if (pins[k].flags & KVS_SLOT_OWNER)
			kvs_slot_publish_failed(c, &pins[k], -ECANCELED);
		kvs_slot_release(c, &pins[k]);
	}
	kvs_cache_close(c);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s <outdir>\n", argv[0]);
		return 2;
	}
	for (size_t g = 0; g < sizeof(geometries) / sizeof(geometries[0]); g++)
		make_seeds(&geometries[g], argv[1]);
	return 0;
}
