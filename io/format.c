/*
 * io/format.c — what a stored block says about itself: the geometry of a
 * backend handle (shard size, shards per block, tensor table, layout tag), the
 * posix block file header and the Redis value header that carry it, and the
 * words that describe a geometry in a log line.
 *
 * Why.  A shard's bytes mean something only with the geometry they were cut
 * with: a store of 8 KiB shards, one per block, reading a block that a store of
 * 4 KiB shards, two per block, wrote gets garbage that looks like success.  So
 * every block file and every Redis value starts with a header naming its block
 * and geometry, and a reader compares it with its own before it trusts a byte.
 *
 * Everything here is read from disk or a server: hostile.  Headers are
 * little-endian whatever the host (a shared mount may serve several), every
 * count and size is bounded before use, and a 64-bit checksum (a splitmix64
 * chain over the header's words, with the checksum word taken as zero) catches
 * a torn or garbage header: it is no defence against a forger, who can write
 * any bytes into the store anyway, only against accidents.  docs/io.md ("Block
 * file format", "redis") has the field tables; the two layouts are pinned by
 * the offsets below and bumping either means a new version byte.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/pattern.h"
#include "io/internal.h"

/* Seeds of the checksum and tensor-table hash chains (ASCII "KVSHCSUM", "KVSHTENS"). */
#define CHECKSUM_SEED UINT64_C(0x4b56534843535553)
#define TENSOR_SEED UINT64_C(0x4b5653485445534e)
/* A table of more runs than this is logged as its count and hash. */
#define DESCRIBE_RUNS_MAX 4

/* Block file header offsets (KVS_IO_BLOCK_HDR_FIXED bytes, then the table). */
enum {
	BH_MAGIC = 0,         /* "KVSHBLK" + version byte */
	BH_HEADER_BYTES = 8,  /* u32 */
	BH_SPB = 12,          /* u32 */
	BH_SHARD_BYTES = 16,  /* u64 */
	BH_TENSOR_COUNT = 24, /* u32 */
	BH_FLAGS = 28,        /* u32, 0 */
	BH_LAYOUT_TAG = 32,   /* u64 */
	BH_BLOCK = 40,        /* 16 bytes */
	BH_CHECKSUM = 56,     /* u64 */
	BH_TENSORS = 64,      /* u64 per tensor */
};
_Static_assert(BH_TENSORS == KVS_IO_BLOCK_HDR_FIXED, "block header fixed part");
_Static_assert(KVS_IO_BLOCK_HDR_MAX <= KVS_IO_BLOCK_HDR_MIN_BYTES,
	       "a full tensor table fits in the smallest header");

/* Redis value header offsets (KVS_IO_VALUE_HDR bytes). */
enum {
	VH_MAGIC = 0,        /* "KVSHVAL" + version byte */
	VH_SHARD = 8,        /* u32 */
	VH_SPB = 12,         /* u32 */
	VH_SHARD_BYTES = 16, /* u64 */
	VH_TENSOR_HASH = 24, /* u64 */
	VH_LAYOUT_TAG = 32,  /* u64 */
	VH_BLOCK = 40,       /* 16 bytes */
	VH_CHECKSUM = 56,    /* u64 */
};
_Static_assert(VH_CHECKSUM + 8 == KVS_IO_VALUE_HDR, "value header size");

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The checksum of len bytes (a multiple of 8) whose word at skip is taken as 0. */
static uint64_t checksum(const unsigned char *p, size_t len, size_t skip)
{
	uint64_t h = kvs_mix64(CHECKSUM_SEED ^ len);

	for (size_t off = 0; off < len; off += 8)
		h = kvs_mix64(h ^ (off == skip ? 0 : get64(p + off)));
	return h;
}

/* A 64-bit hash of a tensor table (its count and sizes). */
static uint64_t tensor_hash(const uint64_t *sizes, uint32_t n)
{
	uint64_t h = kvs_mix64(TENSOR_SEED ^ n);

	for (uint32_t i = 0; i < n; i++)
		h = kvs_mix64(h ^ sizes[i]);
	return h;
}

void kvs_io_geom_init(struct kvs_io_geom *g, const struct kvs_backend_config *cfg)
{
	memset(g, 0, sizeof(*g));
	g->shard_bytes = cfg->shard_bytes;
	g->spb = cfg->shards_per_block;
	g->layout_tag = cfg->layout_tag;
	g->tensor_count = cfg->tensor_count ? cfg->tensor_count : 1;
	if (cfg->tensor_count)
		memcpy(g->tensor_bytes, cfg->tensor_bytes, cfg->tensor_count * sizeof(uint64_t));
	else
		g->tensor_bytes[0] = cfg->shard_bytes;
	g->tensor_hash = tensor_hash(g->tensor_bytes, g->tensor_count);
}

bool kvs_io_geom_same(const struct kvs_io_geom *a, const struct kvs_io_geom *b)
{
	if (a->shard_bytes != b->shard_bytes || a->spb != b->spb ||
	    a->layout_tag != b->layout_tag || a->tensor_hash != b->tensor_hash)
		return false;
	if (!a->tensor_count || !b->tensor_count)
		return true; /* one side knows only the hash */
	return a->tensor_count == b->tensor_count &&
	       !memcmp(a->tensor_bytes, b->tensor_bytes, a->tensor_count * sizeof(uint64_t));
}

/* The tensor table as runs "2x1024+1x2048", or "" when it has too many runs. */
static void tensor_runs(const struct kvs_io_geom *g, char *buf, size_t len)
{
	size_t used = 0;
	uint32_t runs = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < g->tensor_count;) {
		uint32_t j = i;
		int n;

		while (j < g->tensor_count && g->tensor_bytes[j] == g->tensor_bytes[i])
			j++;
		if (++runs > DESCRIBE_RUNS_MAX) {
			buf[0] = '\0';
			return;
		}
		n = snprintf(buf + used, len - used, "%s%ux%llu", i ? "+" : "", j - i,
			     (unsigned long long)g->tensor_bytes[i]);
		if (n < 0 || (size_t)n >= len - used) {
			buf[0] = '\0';
			return;
		}
		used += (size_t)n;
		i = j;
	}
}

void kvs_io_geom_describe(const struct kvs_io_geom *g, bool with_hash, char *buf, size_t len)
{
	char runs[96], tensors[160];

	tensor_runs(g, runs, sizeof(runs));
	if (!g->tensor_count)
		snprintf(tensors, sizeof(tensors), "tensor table hash %016llx",
			 (unsigned long long)g->tensor_hash);
	else if (!runs[0])
		snprintf(tensors, sizeof(tensors), "%u tensors (hash %016llx)", g->tensor_count,
			 (unsigned long long)g->tensor_hash);
	else if (with_hash)
		snprintf(tensors, sizeof(tensors), "tensors %s (hash %016llx)", runs,
			 (unsigned long long)g->tensor_hash);
	else
		snprintf(tensors, sizeof(tensors), "tensors %s", runs);
	snprintf(buf, len, "shard_size %llu x %u shards per block, %s, layout_tag %#llx",
		 (unsigned long long)g->shard_bytes, g->spb, tensors,
		 (unsigned long long)g->layout_tag);
}

/* ------------------------------------------------------------ block files */

size_t kvs_io_block_hdr_encode(const struct kvs_io_block_hdr *h, void *buf)
{
	unsigned char *p = buf;
	uint32_t n = h->geom.tensor_count < KVS_MAX_TENSORS ? h->geom.tensor_count
							    : KVS_MAX_TENSORS;
	size_t used = KVS_IO_BLOCK_HDR_USED(n);

	memset(p, 0, used);
	memcpy(p + BH_MAGIC, KVS_IO_BLOCK_MAGIC, 7);
	p[BH_MAGIC + 7] = KVS_IO_BLOCK_VERSION;
	put32(p + BH_HEADER_BYTES, h->header_bytes);
	put32(p + BH_SPB, h->geom.spb);
	put64(p + BH_SHARD_BYTES, h->geom.shard_bytes);
	put32(p + BH_TENSOR_COUNT, h->geom.tensor_count);
	put32(p + BH_FLAGS, h->flags);
	put64(p + BH_LAYOUT_TAG, h->geom.layout_tag);
	memcpy(p + BH_BLOCK, h->block.bytes, sizeof(h->block.bytes));
	for (uint32_t i = 0; i < n; i++)
		put64(p + BH_TENSORS + 8 * i, h->geom.tensor_bytes[i]);
	put64(p + BH_CHECKSUM, checksum(p, used, BH_CHECKSUM));
	return used;
}

int kvs_io_block_hdr_decode(const void *buf, size_t n, struct kvs_io_block_hdr *h, char *why,
			    size_t whylen)
{
	const unsigned char *p = buf;
	uint32_t count;

	memset(h, 0, sizeof(*h));
	if (n < 8 || memcmp(p + BH_MAGIC, KVS_IO_BLOCK_MAGIC, 7)) {
		snprintf(why, whylen, "no kvshare block header (%s)",
			 n < 8 ? "shorter than its magic" : "written before block headers, or not by kvshare");
		return -EIO;
	}
	if (p[BH_MAGIC + 7] != KVS_IO_BLOCK_VERSION) {
		snprintf(why, whylen, "block header version %u, this kvshare reads %u",
			 p[BH_MAGIC + 7], KVS_IO_BLOCK_VERSION);
		return -EIO;
	}
	if (n < KVS_IO_BLOCK_HDR_FIXED) {
		snprintf(why, whylen, "header cut short (%zu of %d bytes)", n, KVS_IO_BLOCK_HDR_FIXED);
		return -EIO;
	}
	h->header_bytes = get32(p + BH_HEADER_BYTES);
	count = get32(p + BH_TENSOR_COUNT);
	if (h->header_bytes < KVS_IO_BLOCK_HDR_MIN_BYTES || h->header_bytes > KVS_IO_BLOCK_HDR_MAX_BYTES) {
		snprintf(why, whylen, "header size %u out of range %d..%d", h->header_bytes,
			 KVS_IO_BLOCK_HDR_MIN_BYTES, KVS_IO_BLOCK_HDR_MAX_BYTES);
		return -EIO;
	}
	if (count == 0 || count > KVS_MAX_TENSORS) {
		snprintf(why, whylen, "tensor_count %u out of range 1..%d", count, KVS_MAX_TENSORS);
		return -EIO;
	}
	if (n < KVS_IO_BLOCK_HDR_USED(count)) {
		snprintf(why, whylen, "header cut short (%zu of %zu bytes)", n,
			 (size_t)KVS_IO_BLOCK_HDR_USED(count));
		return -EIO;
	}
	if (get64(p + BH_CHECKSUM) != checksum(p, KVS_IO_BLOCK_HDR_USED(count), BH_CHECKSUM)) {
		snprintf(why, whylen, "header checksum mismatch (torn or corrupted)");
		return -EIO;
	}
	h->flags = get32(p + BH_FLAGS);
	if (h->flags) {
		snprintf(why, whylen, "unknown header flags %#x", h->flags);
		return -EIO;
	}
	memcpy(h->block.bytes, p + BH_BLOCK, sizeof(h->block.bytes));
	h->geom.shard_bytes = get64(p + BH_SHARD_BYTES);
	h->geom.spb = get32(p + BH_SPB);
	h->geom.layout_tag = get64(p + BH_LAYOUT_TAG);
	h->geom.tensor_count = count;
	for (uint32_t i = 0; i < count; i++)
		h->geom.tensor_bytes[i] = get64(p + BH_TENSORS + 8 * i);
	h->geom.tensor_hash = tensor_hash(h->geom.tensor_bytes, count);
	return 0;
}

/* ----------------------------------------------------------- Redis values */

void kvs_io_value_hdr_encode(const struct kvs_io_geom *g, const struct kvs_block_id *block,
			     uint32_t shard, void *buf)
{
	unsigned char *p = buf;

	memset(p, 0, KVS_IO_VALUE_HDR);
	memcpy(p + VH_MAGIC, KVS_IO_VALUE_MAGIC, 7);
	p[VH_MAGIC + 7] = KVS_IO_VALUE_VERSION;
	put32(p + VH_SHARD, shard);
	put32(p + VH_SPB, g->spb);
	put64(p + VH_SHARD_BYTES, g->shard_bytes);
	put64(p + VH_TENSOR_HASH, g->tensor_hash);
	put64(p + VH_LAYOUT_TAG, g->layout_tag);
	memcpy(p + VH_BLOCK, block->bytes, sizeof(block->bytes));
	put64(p + VH_CHECKSUM, checksum(p, KVS_IO_VALUE_HDR, VH_CHECKSUM));
}

int kvs_io_value_hdr_decode(const void *buf, size_t n, struct kvs_io_value_hdr *h, char *why,
			    size_t whylen)
{
	const unsigned char *p = buf;

	memset(h, 0, sizeof(*h));
	if (n < KVS_IO_VALUE_HDR || memcmp(p + VH_MAGIC, KVS_IO_VALUE_MAGIC, 7)) {
		snprintf(why, whylen, "no kvshare value header (%s)",
			 n < KVS_IO_VALUE_HDR ? "shorter than one"
					      : "written before value headers, or not by kvshare");
		return -EIO;
	}
	if (p[VH_MAGIC + 7] != KVS_IO_VALUE_VERSION) {
		snprintf(why, whylen, "value header version %u, this kvshare reads %u",
			 p[VH_MAGIC + 7], KVS_IO_VALUE_VERSION);
		return -EIO;
	}
	if (get64(p + VH_CHECKSUM) != checksum(p, KVS_IO_VALUE_HDR, VH_CHECKSUM)) {
		snprintf(why, whylen, "value header checksum mismatch (torn or corrupted)");
		return -EIO;
	}
	h->shard = get32(p + VH_SHARD);
	memcpy(h->block.bytes, p + VH_BLOCK, sizeof(h->block.bytes));
	h->geom.spb = get32(p + VH_SPB);
	h->geom.shard_bytes = get64(p + VH_SHARD_BYTES);
	h->geom.tensor_hash = get64(p + VH_TENSOR_HASH);
	h->geom.layout_tag = get64(p + VH_LAYOUT_TAG);
	return 0; /* geom.tensor_count 0: the table travels as its hash only */
}
