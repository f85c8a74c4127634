/*
 * core/header.c — what the control segment's header says, checked before any of
 * it is used.
 *
 * The header is written by whoever created the segment: another build, a process
 * that crashed, or a hostile member of the group the cache is shared with.  So
 * every value in it is bounded before use: the geometry within this build's
 * limits, the bucket count exactly what a creator computes, every region offset
 * recomputed with overflow-checked arithmetic and compared, the file exactly as
 * large as the header says, the tensor table consistent with its hash and the
 * slot size, the segment table contiguous and covering exactly slot_count slots
 * with sizes that hold them.  Each failure names the field and its value in the
 * log.  The same checks run at open (segment.c) and in kvs_cache_check (stats.c).
 *
 * Only after this do attachers compare the fingerprint with their own config
 * (kvs_core_header_match: -KVS_ECONFIG).  The segment count and placement are the
 * creator's decisions and are read from the header, never recomputed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "numa/numa.h"

#define BAD(err, ...)                                                                   \
	do {                                                                            \
		kvs_log_error(log, __VA_ARGS__);                                       \
		return err;                                                             \
	} while (0)

#define BAD_FIELD(field, want)                                                          \
	BAD(-KVS_ECORRUPT, "%s: header %s = %" PRIu64 " out of range (want %s)", uid, #field, \
	    (uint64_t)f->field, want)

static int check_build(const struct kvs_shm_header *h, const char *uid, const struct kvs_log *log)
{
	if (h->magic != KVS_SHM_MAGIC)
		BAD(-KVS_ECORRUPT, "%s: bad magic 0x%" PRIx64 " (want 0x%" PRIx64 ")", uid, h->magic,
		    KVS_SHM_MAGIC);
	if (h->layout_version != KVS_LAYOUT_VERSION)
		BAD(-KVS_ELAYOUT, "%s: layout_version %u, this build has %u", uid, h->layout_version,
		    KVS_LAYOUT_VERSION);
	if (h->format != kvs_core_format())
		BAD(-KVS_ELAYOUT, "%s: format 0x%" PRIx64 ", this build has 0x%" PRIx64
		    " (struct sizes differ)", uid, h->format, kvs_core_format());
	return 0;
}

static int check_geometry(const struct kvs_shm_fingerprint *f, const char *uid,
			  const struct kvs_log *log)
{
	if (f->slot_count == 0 || f->slot_count > KVS_MAX_SLOTS)
		BAD_FIELD(slot_count, "1 .. 2^31 - 1");
	if (f->slot_bytes == 0 || f->slot_bytes > KVS_MAX_SLOT_BYTES)
		BAD_FIELD(slot_bytes, "1 .. 2^40");
	if (f->slot_bytes * f->slot_count > KVS_MAX_DATA_BYTES) /* both bounded: no overflow */
		BAD_FIELD(slot_count, "slot_bytes * slot_count <= 2^50");
	if (f->bucket_count != kvs_core_bucket_count(f->slot_count))
		BAD_FIELD(bucket_count, "the power of two at or above slot_count");
	if (f->shards_per_block == 0)
		BAD_FIELD(shards_per_block, ">= 1");
	if (f->tensor_count == 0 || f->tensor_count > KVS_MAX_TENSORS)
		BAD_FIELD(tensor_count, "1 .. 256");
	if (f->local_rank_size == 0 || f->local_rank_size > KVS_MAX_RANKS)
		BAD_FIELD(local_rank_size, "1 .. 64");
	if (f->seg_count == 0 || f->seg_count > KVS_MAX_SEGS)
		BAD_FIELD(seg_count, "1 .. 16");
	if (f->reserved_slots >= f->slot_count)
		BAD_FIELD(reserved_slots, "below slot_count");
	return 0;
}

static int check_regions(const struct kvs_shm_header *h, uint64_t st_size, const char *uid,
			 const struct kvs_log *log)
{
	struct kvs_core_regions r;

	if (kvs_core_regions(&h->fp, &r))
		BAD(-KVS_ECORRUPT, "%s: header geometry overflows 64 bits", uid);
#define REGION(field)                                                                   \
	if (h->field != r.field)                                                        \
		BAD(-KVS_ECORRUPT, "%s: header " #field " = %" PRIu64 ", the geometry gives %" PRIu64, \
		    uid, (uint64_t)h->field, (uint64_t)r.field);
	REGION(ranks_off)
	REGION(buckets_off)
	REGION(slots_off)
	REGION(states_off)
	REGION(refbits_off)
	REGION(claim_heads_off)
	REGION(claims_off)
	REGION(claim_count)
	REGION(ctl_bytes)
#undef REGION
	if (st_size != h->ctl_bytes)
		BAD(-KVS_ECORRUPT, "%s: control segment is %" PRIu64 " bytes, its header says %" PRIu64
		    " (truncated?)", uid, st_size, h->ctl_bytes);
	return 0;
}

static int check_tensors(const struct kvs_shm_header *h, const char *uid, const struct kvs_log *log)
{
	uint64_t sum = 0;

	for (uint32_t t = 0; t < h->fp.tensor_count; t++)
		if (h->tensor_bytes[t] == 0 || __builtin_add_overflow(sum, h->tensor_bytes[t], &sum))
			BAD(-KVS_ECORRUPT, "%s: header tensor_bytes[%u] = %" PRIu64 " out of range", uid,
			    t, h->tensor_bytes[t]);
	if (sum != h->fp.slot_bytes)
		BAD(-KVS_ECORRUPT, "%s: header tensor sizes sum to %" PRIu64 ", slot_bytes is %" PRIu64,
		    uid, sum, h->fp.slot_bytes);
	if (kvs_core_tensor_hash(h->tensor_bytes, h->fp.tensor_count) != h->fp.tensor_hash)
		BAD(-KVS_ECORRUPT, "%s: tensor table does not match its hash", uid);
	return 0;
}

static int check_segs(const struct kvs_shm_header *h, const char *uid, const struct kvs_log *log)
{
	uint64_t next = 0;
	bool huge = false;

	for (uint32_t s = 0; s < h->fp.seg_count; s++) {
		const struct kvs_shm_seg *sg = &h->segs[s];
		uint64_t need;

		if (sg->first_slot != next)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].first_slot = %" PRIu64 ", want %" PRIu64
			    " (contiguous)", uid, s, sg->first_slot, next);
		if (sg->slot_count == 0 || sg->slot_count > h->fp.slot_count - next)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].slot_count = %" PRIu64 " (%" PRIu64
			    " slots left)", uid, s, sg->slot_count, h->fp.slot_count - next);
		if (sg->reserved_count >= sg->slot_count)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].reserved_count = %" PRIu64 " of %" PRIu64,
			    uid, s, sg->reserved_count, sg->slot_count);
		if (sg->backing != KVS_NUMA_BACKING_HUGETLB && sg->backing != KVS_NUMA_BACKING_SHM)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].backing = %u", uid, s, sg->backing);
		if (sg->node < KVS_NUMA_NODE_NONE || sg->node >= (int32_t)KVS_NUMA_MAX_NODES)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].node = %d", uid, s, sg->node);
		if (sg->page_bytes < 4096 || (sg->page_bytes & (sg->page_bytes - 1)))
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].page_bytes = %" PRIu64, uid, s,
			    sg->page_bytes);
		need = sg->slot_count * h->fp.slot_bytes; /* <= 2^50: no overflow */
		if (sg->bytes < need || sg->bytes > (uint64_t)INT64_MAX || sg->bytes % sg->page_bytes)
			BAD(-KVS_ECORRUPT, "%s: header segs[%u].bytes = %" PRIu64 " cannot hold %" PRIu64
			    " slots of %" PRIu64 " bytes", uid, s, sg->bytes, sg->slot_count,
			    h->fp.slot_bytes);
		huge |= sg->backing == KVS_NUMA_BACKING_HUGETLB;
		next += sg->slot_count;
	}
	if (next != h->fp.slot_count)
		BAD(-KVS_ECORRUPT, "%s: header segments hold %" PRIu64 " slots, slot_count is %" PRIu64,
		    uid, next, h->fp.slot_count);
	if (huge && (h->hugetlb_dir[0] != '/' ||
		     memchr(h->hugetlb_dir, '\0', sizeof(h->hugetlb_dir)) == NULL))
		BAD(-KVS_ECORRUPT, "%s: header hugetlb_dir is not an absolute path", uid);
	return 0;
}

int kvs_core_header_validate(const struct kvs_shm_header *h, uint64_t st_size, const char *uid,
			     const struct kvs_log *log)
{
	int rc = check_build(h, uid, log);

	if (rc == 0)
		rc = check_geometry(&h->fp, uid, log);
	if (rc == 0)
		rc = check_regions(h, st_size, uid, log);
	if (rc == 0)
		rc = check_tensors(h, uid, log);
	if (rc == 0)
		rc = check_segs(h, uid, log);
	if (rc == 0 && (h->flags & ~KVS_CACHE_PERSIST))
		BAD(-KVS_ECORRUPT, "%s: header flags = 0x%x", uid, h->flags);
	return rc;
}

int kvs_core_header_match(const struct kvs_shm_header *h, const struct kvs_cache_config *cfg,
			  const struct kvs_log *log)
{
	const struct kvs_shm_fingerprint *f = &h->fp;
	struct kvs_shm_fingerprint want;
	const char *uid = cfg->unique_id;

	/* The segment count is the creator's placement decision: not compared. */
	kvs_core_fingerprint(cfg, f->seg_count, &want);
#define FP_FIELD(field)                                                                 \
	if (f->field != want.field)                                                     \
		BAD(-KVS_ECONFIG, "%s: config mismatch: " #field " is %" PRIu64 " in the segment, %" \
		    PRIu64 " here", uid, (uint64_t)f->field, (uint64_t)want.field);
	FP_FIELD(slot_bytes)
	FP_FIELD(slot_count)
	FP_FIELD(shards_per_block)
	FP_FIELD(tensor_count)
	FP_FIELD(local_rank_size)
	FP_FIELD(reserved_slots)
#undef FP_FIELD
	if (f->tensor_hash != want.tensor_hash) {
		for (uint32_t t = 0; t < f->tensor_count; t++) {
			uint64_t mine = cfg->tensor_count ? cfg->tensor_bytes[t] : cfg->slot_bytes;

			if (h->tensor_bytes[t] != mine)
				BAD(-KVS_ECONFIG, "%s: config mismatch: tensor_bytes[%u] is %" PRIu64
				    " in the segment, %" PRIu64 " here", uid, t, h->tensor_bytes[t], mine);
		}
		BAD(-KVS_ECONFIG, "%s: config mismatch: tensor table", uid);
	}
	return 0;
}

/* A hash of an identity text, never 0 (0: none bound). */
static uint64_t text_hash(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * UINT64_C(0x100000001b3);
	return h ? h : 1;
}

int kvs_core_backend_bind(struct kvs_cache *c, const char *id, char *theirs, size_t len)
{
	struct kvs_shm_header *h = c->hdr;
	const uint32_t words = KVS_SHM_BACKEND_ID_MAX / 8;
	char text[KVS_SHM_BACKEND_ID_MAX] = { 0 };
	uint64_t want, have = 0, w;

	snprintf(text, sizeof(text), "%s", id);
	want = text_hash(text);
	/* acq_rel: the winner's text follows its CAS; a reader checks the text
	 * against the hash, so one not written yet (or torn) is said so */
	if (atomic_compare_exchange_strong_explicit(&h->backend_hash, &have, want,
						    memory_order_acq_rel, memory_order_acquire)) {
		for (uint32_t i = 0; i < words; i++) {
			memcpy(&w, text + 8 * i, 8);
			atomic_store_explicit(&h->backend_id[i], w, memory_order_relaxed);
		}
		return 0;
	}
	if (have == want)
		return 0;
	/* written by someone else: believed only if it hashes to what they
	 * published */
	for (uint32_t i = 0; i < words; i++) {
		w = atomic_load_explicit(&h->backend_id[i], memory_order_relaxed);
		memcpy(text + 8 * i, &w, 8);
	}
	text[sizeof(text) - 1] = '\0';
	if (text_hash(text) == have)
		snprintf(theirs, len, "%s", text);
	else
		snprintf(theirs, len, "another backend (identity hash 0x%016" PRIx64
			 ", its description not written yet)", have);
	return -KVS_ECONFIG;
}
