/*
 * core/config.c — what a cache is: its config, validated; its key hash; the
 * format word and fingerprint that decide whether two processes may share a
 * segment; and the control segment's region sizes derived from them.
 *
 * Validation names the field and the bad value in the log and returns -EINVAL,
 * so a misconfigured rank says exactly what is wrong before touching shared
 * memory.  The hash must be identical in every build (it places keys in
 * buckets), so it is written out here rather than taken from a library.
 */
#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "numa/numa.h"

KVS_API void kvs_cache_config_init(struct kvs_cache_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->device_id = 0;
	cfg->local_rank_size = 8;
	cfg->shards_per_block = 1;
	cfg->hugetlb = KVS_HUGETLB_AUTO;
	cfg->numa = KVS_NUMA_AUTO;
	cfg->numa_node = -1;
	cfg->wait = KVS_WAIT_AUTO;
	cfg->spin_ns = 10000;
	cfg->file_mode = 0600;
	cfg->gid = -1;
	cfg->attach_timeout_ns = 30ull * 1000000000ull;
	cfg->lock_timeout_ns = 10ull * 1000000000ull;
}

int kvs_core_unique_id_valid(const char *uid)
{
	size_t n = strnlen(uid, KVS_UNIQUE_ID_MAX + 1);

	if (n == 0 || n > KVS_UNIQUE_ID_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char ch = uid[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return 0;
	}
	/* "." and ".." would be path components of the data segment file names. */
	return strcmp(uid, ".") != 0 && strcmp(uid, "..") != 0;
}

#define BAD(field, fmt, val)                                                            \
	do {                                                                            \
		kvs_log_error(log, "cache config: invalid " field " = " fmt, val);     \
		return -EINVAL;                                                         \
	} while (0)

int kvs_core_config_validate(const struct kvs_cache_config *cfg, const struct kvs_log *log)
{
	uint64_t sum = 0;

	if (memchr(cfg->unique_id, '\0', sizeof(cfg->unique_id)) == NULL ||
	    !kvs_core_unique_id_valid(cfg->unique_id))
		BAD("unique_id", "'%.72s' (want [A-Za-z0-9_.-]{1,64})", cfg->unique_id);
	for (size_t i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			BAD("reserved", "%s (must be zero)", "non-zero");
	if (cfg->reserved32)
		BAD("reserved32", "%u (must be zero)", cfg->reserved32);
	if (cfg->prefault_threads > KVS_CACHE_PREFAULT_THREADS_MAX)
		BAD("prefault_threads", "%u (want 0..64; 0 = one per CPU of the node)",
		    cfg->prefault_threads);
	if (cfg->flags & ~(KVS_CACHE_PERSIST | KVS_CACHE_ATTACH | KVS_CACHE_DISCARD_DIRTY))
		BAD("flags", "0x%x", cfg->flags);
	if (cfg->device_id < -1)
		BAD("device_id", "%d", cfg->device_id);
	if (cfg->hugetlb > KVS_HUGETLB_OFF)
		BAD("hugetlb", "%u", cfg->hugetlb);
	if (cfg->numa > KVS_NUMA_REQUIRED)
		BAD("numa", "%u", cfg->numa);
	if (cfg->wait > KVS_WAIT_SPIN)
		BAD("wait", "%u", cfg->wait);
	if (cfg->wait == KVS_WAIT_FUTEX && !KVS_KERNEL) {
		kvs_log_error(log, "cache config: wait=futex needs the kernel build");
		return -EOPNOTSUPP;
	}
	if (cfg->file_mode != 0600 && cfg->file_mode != 0660)
		BAD("file_mode", "0%o (want 0600 or 0660)", cfg->file_mode);
	if (cfg->file_mode == 0660 && cfg->gid < 0)
		BAD("gid", "%lld (0660 needs a group)", (long long)cfg->gid);
	if (cfg->numa_node < -1 || cfg->numa_node >= (int32_t)KVS_NUMA_MAX_NODES)
		BAD("numa_node", "%d", cfg->numa_node);
	if (memchr(cfg->pci_bus_id, '\0', sizeof(cfg->pci_bus_id)) == NULL)
		BAD("pci_bus_id", "%s", "(not NUL-terminated)");
	if (cfg->attach_timeout_ns == 0)
		BAD("attach_timeout_ns", "%d", 0);
	if (cfg->lock_timeout_ns == 0)
		BAD("lock_timeout_ns", "%d", 0);
	if (cfg->hugepage_bytes & (cfg->hugepage_bytes - 1))
		BAD("hugepage_bytes", "%llu (not a power of two)",
		    (unsigned long long)cfg->hugepage_bytes);
	if (cfg->flags & KVS_CACHE_ATTACH)
		return 0; /* geometry comes from the segment */
	if (cfg->local_rank_size == 0 || cfg->local_rank_size > KVS_MAX_RANKS)
		BAD("local_rank_size", "%u", cfg->local_rank_size);
	if (cfg->slot_bytes == 0 || cfg->slot_bytes > KVS_MAX_SLOT_BYTES)
		BAD("slot_bytes", "%llu (want 1 .. 2^40)", (unsigned long long)cfg->slot_bytes);
	if (cfg->slot_count == 0 || cfg->slot_count > KVS_MAX_SLOTS)
		BAD("slot_count", "%llu (want 1 .. 2^31 - 1)", (unsigned long long)cfg->slot_count);
	/* Both are below 2^41 and 2^31: the product cannot overflow. */
	if (cfg->slot_bytes * cfg->slot_count > KVS_MAX_DATA_BYTES)
		BAD("slot_count", "%llu (slot_bytes * slot_count above 2^50 bytes)",
		    (unsigned long long)cfg->slot_count);
	if (cfg->shards_per_block == 0)
		BAD("shards_per_block", "%u", cfg->shards_per_block);
	if (cfg->reserved_slots >= cfg->slot_count)
		BAD("reserved_slots", "%u (must be < slot_count)", cfg->reserved_slots);
	if (cfg->tensor_count > KVS_MAX_TENSORS)
		BAD("tensor_count", "%u", cfg->tensor_count);
	for (uint32_t i = 0; i < cfg->tensor_count; i++) {
		if (cfg->tensor_bytes[i] == 0)
			BAD("tensor_bytes", "[%u] = 0", i);
		sum += cfg->tensor_bytes[i];
	}
	if (cfg->tensor_count && sum != cfg->slot_bytes) {
		kvs_log_error(log, "cache config: tensor_bytes sum to %llu, slot_bytes is %llu",
			      (unsigned long long)sum, (unsigned long long)cfg->slot_bytes);
		return -EINVAL;
	}
	return 0;
}

/* Key hash: the block id is already a content hash, but callers may use small
 * or structured ids, so fold both halves and the shard through two rounds of a
 * 64-bit finaliser (MurmurHash3's fmix64): every input bit reaches every bucket
 * bit. */
static inline uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= UINT64_C(0xff51afd7ed558ccd);
	k ^= k >> 33;
	k *= UINT64_C(0xc4ceb9fe1a85ec53);
	k ^= k >> 33;
	return k;
}

uint64_t kvs_core_hash(const struct kvs_block_id *block, uint32_t shard)
{
	uint64_t a, b;

	memcpy(&a, block->bytes, 8);
	memcpy(&b, block->bytes + 8, 8);
	return fmix64(a ^ fmix64(b ^ (UINT64_C(0x9e3779b97f4a7c15) * ((uint64_t)shard + 1))));
}

static uint64_t fold(uint64_t h, uint64_t v)
{
	return fmix64(h ^ (v + UINT64_C(0x9e3779b97f4a7c15)));
}

/* The build's layout: any difference in struct sizes, cache line, limits or the
 * mutex ABI makes another build refuse the segment instead of misreading it. */
uint64_t kvs_core_format(void)
{
	uint64_t h = KVS_LAYOUT_VERSION;

	h = fold(h, sizeof(struct kvs_shm_header));
	h = fold(h, sizeof(struct kvs_shm_rank));
	h = fold(h, sizeof(struct kvs_shm_bucket));
	h = fold(h, sizeof(struct kvs_shm_slot));
	h = fold(h, sizeof(struct kvs_shm_seg));
	h = fold(h, sizeof(struct kvs_shm_claim));
	h = fold(h, sizeof(struct kvs_shm_stats));
	h = fold(h, sizeof(pthread_mutex_t));
	h = fold(h, KVS_CACHE_LINE);
	h = fold(h, KVS_MAX_RANKS);
	h = fold(h, KVS_RANK_PINS);
	h = fold(h, KVS_MAX_SEGS);
	h = fold(h, KVS_MAX_TENSORS);
	return h;
}

uint64_t kvs_core_tensor_hash(const uint64_t *tensor_bytes, uint32_t n)
{
	uint64_t h = n;

	for (uint32_t i = 0; i < n; i++)
		h = fold(h, tensor_bytes[i]);
	return h;
}

uint64_t kvs_core_bucket_count(uint64_t slot_count)
{
	uint64_t p = 1;

	while (p < slot_count && p < (UINT64_C(1) << 62))
		p <<= 1;
	return p;
}

void kvs_core_fingerprint(const struct kvs_cache_config *cfg, uint32_t seg_count,
			  struct kvs_shm_fingerprint *fp)
{
	uint64_t one = cfg->slot_bytes;

	memset(fp, 0, sizeof(*fp));
	fp->slot_bytes = cfg->slot_bytes;
	fp->slot_count = cfg->slot_count;
	fp->bucket_count = kvs_core_bucket_count(cfg->slot_count);
	fp->shards_per_block = cfg->shards_per_block;
	fp->tensor_count = cfg->tensor_count ? cfg->tensor_count : 1;
	fp->local_rank_size = cfg->local_rank_size;
	fp->seg_count = seg_count;
	fp->reserved_slots = cfg->reserved_slots;
	fp->tensor_hash = cfg->tensor_count ? kvs_core_tensor_hash(cfg->tensor_bytes, cfg->tensor_count)
					    : kvs_core_tensor_hash(&one, 1);
}

/* *out = off + n * size rounded up to align (a power of two); false on overflow. */
static bool region_end(uint64_t off, uint64_t n, uint64_t size, uint64_t align, uint64_t *out)
{
	uint64_t bytes, end;

	if (__builtin_mul_overflow(n, size, &bytes) || __builtin_add_overflow(off, bytes, &end) ||
	    __builtin_add_overflow(end, align - 1, &end))
		return false;
	*out = end & ~(align - 1);
	return true;
}

int kvs_core_regions(const struct kvs_shm_fingerprint *fp, struct kvs_core_regions *r)
{
	/* The fingerprint may come from shared memory: every step is checked. */
	r->ranks_off = KVS_SHM_HEADER_BYTES;
	if (!region_end(r->ranks_off, KVS_MAX_RANKS, sizeof(struct kvs_shm_rank), KVS_CACHE_LINE,
			&r->buckets_off) ||
	    !region_end(r->buckets_off, fp->bucket_count, sizeof(struct kvs_shm_bucket),
			KVS_CACHE_LINE, &r->slots_off) ||
	    !region_end(r->slots_off, fp->slot_count, sizeof(struct kvs_shm_slot), KVS_CACHE_LINE,
			&r->states_off) ||
	    !region_end(r->states_off, fp->slot_count, sizeof(uint32_t), KVS_CACHE_LINE,
			&r->refbits_off) ||
	    !region_end(r->refbits_off, fp->slot_count, 1, KVS_CACHE_LINE, &r->claim_heads_off))
		return -EOVERFLOW;
	r->claim_count = kvs_core_claims_size(fp);
	if (!region_end(r->claim_heads_off, r->claim_count, sizeof(uint32_t), KVS_CACHE_LINE,
			&r->claims_off) ||
	    !region_end(r->claims_off, r->claim_count, sizeof(struct kvs_shm_claim), KVS_SHM_PAGE,
			&r->ctl_bytes))
		return -EOVERFLOW;
	return 0;
}

uint32_t kvs_core_claims_size(const struct kvs_shm_fingerprint *fp)
{
	/* Twice the blocks the cache holds whole (fp may be forged: bounded first). */
	uint64_t blocks = fp->shards_per_block ? fp->slot_count / fp->shards_per_block : 0;
	uint64_t n = KVS_CLAIMS_MIN;

	while (n < 2 * blocks && n < KVS_CLAIMS_MAX)
		n <<= 1;
	return (uint32_t)n;
}
