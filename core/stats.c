/*
 * core/stats.c — what the cache can say about itself: counters per rank and for
 * the node (kvs_cache_stats), each rank-table entry (kvs_cache_rank_info) and
 * data segment (kvs_cache_seg_info) as `kvshare stat` shows them, and the
 * invariant checker (kvs_cache_check): the header and segment table, the rank
 * table, then every bucket.
 *
 * Counters are relaxed atomics written by the rank that counts and summed racily
 * here: they are statistics.  The checker verifies each invariant of layout.h
 * bucket by bucket under that bucket's lock (what a lock guards is exact there),
 * using unlocked pre-pass counts only as hints that are recounted under the lock
 * before anything is called broken; it logs every violation it finds.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "numa/numa.h"
#include "wait/wait.h"

void kvs_core_stats_base(struct kvs_shm_rank *e)
{
	_Atomic uint64_t *src = (_Atomic uint64_t *)&e->stats, *dst = (_Atomic uint64_t *)&e->base;

	for (size_t k = 0; k < sizeof(e->stats) / sizeof(uint64_t); k++)
		/* relaxed: statistics; published with the entry's ATTACHED (release) */
		atomic_store_explicit(&dst[k], atomic_load_explicit(&src[k], memory_order_relaxed),
				      memory_order_relaxed);
}

/* Add entry counters s, less base (NULL: none), to o. */
static void add_stats(struct kvs_cache_stats *o, struct kvs_shm_stats *s, struct kvs_shm_stats *base)
{
#define ADD(f) o->f += kvs_core_stat_since(&s->f, base ? &base->f : NULL)
	ADD(hits);
	ADD(misses);
	ADD(owner_fills);
	ADD(waits);
	ADD(wait_ns);
	ADD(failures);
	ADD(evictions);
	ADD(clock_sweeps);
	ADD(takeovers);
	ADD(lock_repairs);
	ADD(enospc);
	ADD(joins);
	ADD(dump_gets);
#undef ADD
}

KVS_API int kvs_cache_stats(struct kvs_cache *c, int rank, struct kvs_cache_stats *o)
{
	if (!c || !o || rank < KVS_STATS_NODE || rank >= (int)KVS_MAX_RANKS)
		return -EINVAL;
	memset(o, 0, sizeof(*o));
	if (rank == KVS_STATS_NODE) {
		/* every entry's, over all its attaches: departed ranks included */
		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
			add_stats(o, &c->ranks[r].stats, NULL);
		/* relaxed: statistics */
		o->ranks_reaped = atomic_load_explicit(&c->hdr->ranks_reaped, memory_order_relaxed);
	} else {
		add_stats(o, &c->ranks[rank].stats, &c->ranks[rank].base);
	}
	/* relaxed: statistics */
	o->lrs_mismatch = atomic_load_explicit(&c->hdr->lrs_mismatch, memory_order_relaxed);
	o->fallbacks = c->hdr->fallbacks;
	o->adoptions = atomic_load_explicit(&c->hdr->adopt_count, memory_order_relaxed);
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		/* Live only: a rank killed and not reaped yet is not attached to
		 * anything.  relaxed: kvs_core_rank_alive rechecks the epoch after
		 * its acquire of the entry's state (device_id with it). */
		if (!kvs_core_rank_alive(c, r, atomic_load_explicit(&c->ranks[r].epoch,
								    memory_order_relaxed)))
			continue;
		o->ranks_attached++;
		if (c->ranks[r].device_id >= 0)
			o->gpu_ranks_attached++;
	}
	o->slot_count = c->slot_count;
	o->slot_bytes = c->slot_bytes;
	/* The creator's pre-fault record: statistics, whatever the bytes say. */
	for (uint32_t s = 0; s < c->seg_count; s++) {
		const struct kvs_shm_seg *sg = &c->hdr->segs[s];

		o->data_bytes += sg->bytes;
		o->prefault_ns += sg->prefault_ns;
		if (sg->prefault_threads > o->prefault_threads)
			o->prefault_threads = sg->prefault_threads;
	}
	if (o->data_bytes)
		o->prefault_ms_per_gib = (double)o->prefault_ns / 1e6 /
					 ((double)o->data_bytes / (double)(UINT64_C(1) << 30));
	for (uint32_t i = 0; i < c->slot_count; i++) {
		/* relaxed: a census, not a snapshot */
		uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;

		o->slots_ready += st == KVS_SHM_SLOT_READY;
		o->slots_dirty += st == KVS_SHM_SLOT_DIRTY;
		o->slots_loading += st == KVS_SHM_SLOT_LOADING;
		o->slots_failed += st == KVS_SHM_SLOT_FAILED;
		/* pinned under the lock (ref) or lock-free (a rank's bit) */
		o->slots_pinned += atomic_load_explicit(&c->slots[i].ref, memory_order_relaxed) != 0 ||
				   (atomic_load_explicit(&c->slots[i].readers, memory_order_relaxed) &
				    ~KVS_READERS_EV) != 0;
	}
	return 0;
}

KVS_API int kvs_cache_rank_info(struct kvs_cache *c, int rank, struct kvs_cache_rank_info *o)
{
	struct kvs_shm_rank *e;
	uint32_t epoch;

	if (!c || !o || rank < 0 || rank >= (int)KVS_MAX_RANKS)
		return -EINVAL;
	memset(o, 0, sizeof(*o));
	e = &c->ranks[rank];
	o->entry = (uint32_t)rank;
	o->device_id = -1;
	/* relaxed: a description read racily, like the counters */
	o->epoch = epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed);
	o->self = rank == c->rank_idx;
	/* acquire: pairs with the release of attach (pid, device_id) */
	o->attached = atomic_load_explicit(&e->state, memory_order_acquire) == KVS_SHM_RANK_ATTACHED;
	if (!o->attached)
		return 0;
	o->pid = e->pid;
	o->device_id = e->device_id < 0 ? -1 : e->device_id;
	o->alive = kvs_core_rank_alive(c, (uint32_t)rank, epoch);
	/* relaxed: a description (layout.h); bounded: any word may be there */
	o->copy_engine = atomic_load_explicit(&e->copy_engine, memory_order_relaxed);
	if (o->copy_engine != KVS_COPY_ENGINE_HOST && o->copy_engine != KVS_COPY_ENGINE_CUDA)
		o->copy_engine = 0;
	for (uint32_t p = 0; p < KVS_RANK_PINS; p++)
		/* relaxed: a count, not a snapshot */
		o->pins += (atomic_load_explicit(&e->pins[p], memory_order_relaxed) &
			    KVS_PIN_SLOT_MASK) != 0;
	return 0;
}

/* Data file of segment sg: "<dir>/kvshare.<uid>.data.<node>" as numa/ names it
 * (node -1 is file 0).  The record is re-read from shared memory: bounded here,
 * "" when it is not usable. */
static void seg_path(const struct kvs_cache *c, const struct kvs_shm_seg *sg, uint32_t backing,
		     char *buf, size_t len)
{
	const char *dir = KVS_NUMA_SHM_DIR;
	char hdir[KVS_SHM_DIR_MAX];
	int32_t node = sg->node;

	buf[0] = '\0';
	if (backing == KVS_NUMA_BACKING_HUGETLB) {
		memcpy(hdir, c->hdr->hugetlb_dir, sizeof(hdir));
		if (memchr(hdir, '\0', sizeof(hdir)) == NULL || hdir[0] != '/')
			return;
		dir = hdir;
	} else if (backing != KVS_NUMA_BACKING_SHM) {
		return;
	}
	if (node < KVS_NUMA_NODE_NONE || node >= (int32_t)KVS_NUMA_MAX_NODES)
		return;
	if (snprintf(buf, len, "%s/kvshare.%s.data.%d", dir, c->cfg.unique_id,
		     node < 0 ? 0 : (int)node) >= (int)len)
		buf[0] = '\0';
}

KVS_API int kvs_cache_seg_info(struct kvs_cache *c, uint32_t seg, struct kvs_cache_seg_info *o)
{
	const struct kvs_shm_seg *sg;

	if (!c || !o)
		return -EINVAL;
	memset(o, 0, sizeof(*o));
	if (seg >= c->seg_count)
		return -ENOENT;
	sg = &c->hdr->segs[seg];
	o->seg = seg;
	o->seg_count = c->seg_count;
	/* The geometry is the handle's validated copy; placement is re-read from
	 * the creator's record (validated at open, bounded again here). */
	o->first_slot = c->geo[seg].first_slot;
	o->slot_count = c->geo[seg].slot_count;
	o->reserved_count = c->geo[seg].reserved_count;
	o->backing = sg->backing == KVS_NUMA_BACKING_HUGETLB || sg->backing == KVS_NUMA_BACKING_SHM
			     ? sg->backing : KVS_CACHE_BACKING_NONE;
	o->node = sg->node >= KVS_NUMA_NODE_NONE && sg->node < (int32_t)KVS_NUMA_MAX_NODES
			  ? sg->node : KVS_NUMA_NODE_NONE;
	o->bound_node = sg->bound_node >= 0 && sg->bound_node < (int32_t)KVS_NUMA_MAX_NODES
				? sg->bound_node : -1;
	o->page_bytes = sg->page_bytes;
	o->bytes = sg->bytes;
	o->prefault_ns = sg->prefault_ns;
	o->prefault_threads = sg->prefault_threads;
	seg_path(c, sg, o->backing, o->path, sizeof(o->path));
	return 0;
}

#define BROKEN(...)                                                                     \
	do {                                                                            \
		kvs_log_error(&c->log, "check: " __VA_ARGS__);                         \
		bad++;                                                                  \
	} while (0)

/* Exact number of locked pin entries naming slot i (its bucket locked:
 * stable); a lock-free pin's (KVS_PIN_READER) holds no ref. */
static uint32_t pins_of(struct kvs_cache *c, uint32_t i)
{
	uint32_t n = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++)
			n += (atomic_load_explicit(&c->ranks[r].pins[p], memory_order_relaxed) &
			      (KVS_PIN_SLOT_MASK | KVS_PIN_READER)) == i + 1;
	return n;
}

/* Exact number of slots whose bucket_idx is b (b locked: stable). */
static uint32_t members_of(struct kvs_cache *c, uint32_t b)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->slot_count; i++)
		n += atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed) == b;
	return n;
}

/* Most broken invariants logged before the checker gives up (a segment full of
 * garbage would otherwise cost a recount per slot). */
#define CHECK_MAX_REPORTS 32

/* Scratch of one kvs_cache_check: unlocked pre-pass counts (hints), and the
 * chain being checked: its slots (marked in seen, cleared after the chain) and
 * its keyed slots. */
struct check_ctx {
	uint32_t *pins;    /* locked pin entries per slot */
	uint32_t *members; /* slots per bucket_idx */
	uint8_t *seen;     /* slot already on the current chain */
	uint32_t *chain;   /* slots of the current chain, in order */
	uint32_t *keys;    /* keyed slots of the current chain */
};

static int key_cmp(const void *x, const void *y, void *arg)
{
	struct kvs_cache *c = arg;
	struct kvs_block_id ka, kb;
	uint32_t sa, sb;
	int d;

	kvs_core_key_read(&c->slots[*(const uint32_t *)x], &ka, &sa);
	kvs_core_key_read(&c->slots[*(const uint32_t *)y], &kb, &sb);
	d = memcmp(ka.bytes, kb.bytes, sizeof(ka.bytes));
	return d ? d : (sa > sb) - (sa < sb);
}

/* Two keyed slots of one chain with the same key: sorted, then neighbours. */
static int check_duplicates(struct kvs_cache *c, uint32_t *chain, uint32_t n)
{
	int bad = 0;

	qsort_r(chain, n, sizeof(*chain), key_cmp, c);
	for (uint32_t k = 1; k < n && bad < CHECK_MAX_REPORTS; k++)
		if (key_cmp(&chain[k], &chain[k - 1], c) == 0)
			BROKEN("slots %u and %u hold the same key", chain[k - 1], chain[k]);
	return bad;
}

/* Slot i's own invariants (on bucket b's chain, b locked).  Collects keyed
 * slots into x->keys[*keyed]. */
static int check_slot(struct kvs_cache *c, uint32_t b, uint32_t i, struct check_ctx *x,
		      uint32_t *keyed)
{
	struct kvs_shm_slot *s = &c->slots[i];
	uint32_t sb = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed);
	uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
	uint32_t ref = atomic_load_explicit(&s->ref, memory_order_relaxed);
	uint64_t readers = atomic_load_explicit(&s->readers, memory_order_relaxed);
	struct kvs_block_id key;
	uint32_t shard;
	int bad = 0;

	if (sb != b)
		BROKEN("slot %u on bucket %u's chain says bucket %u", i, b, sb);
	/* only a holder of b's lock sets the evictor bit, and we hold it */
	if (readers & KVS_READERS_EV)
		BROKEN("slot %u: an evictor's bit with no evictor (readers 0x%llx)", i,
		       (unsigned long long)readers);
	if (ref != x->pins[i]) {
		uint32_t exact = pins_of(c, i);

		if (ref != exact)
			BROKEN("slot %u: ref %u but %u pin entries", i, ref, exact);
	}
	if (st > KVS_SHM_SLOT_DIRTY)
		BROKEN("slot %u: state %u", i, st);
	if (st == KVS_SHM_SLOT_EMPTY || st > KVS_SHM_SLOT_DIRTY)
		return bad;
	kvs_core_key_read(s, &key, &shard);
	if (shard >= c->shards_per_block)
		BROKEN("slot %u: shard %u >= %u", i, shard, c->shards_per_block);
	if (kvs_core_bucket_of(c, kvs_core_hash(&key, shard)) != b)
		BROKEN("slot %u: key hashes to bucket %u, sits on %u", i,
		       kvs_core_bucket_of(c, kvs_core_hash(&key, shard)), b);
	if (st == KVS_SHM_SLOT_FAILED && atomic_load_explicit(&s->error, memory_order_relaxed) >= 0)
		BROKEN("slot %u: FAILED with error %d", i,
		       atomic_load_explicit(&s->error, memory_order_relaxed));
	x->keys[(*keyed)++] = i;
	return bad;
}

/* Bucket b's invariants, b locked.  The pre-pass counts are hints: a mismatch
 * is recounted exactly under the lock before it is called broken, so a busy
 * cache gives no false reports.  A chain is walked until it ends, leaves the
 * slots, or comes back to a slot it passed (x->seen): a cycle costs no more
 * than its length.  (Slots move between chains while other buckets are
 * checked, so seen is per chain.) */
static int check_bucket(struct kvs_cache *c, uint32_t b, struct check_ctx *x)
{
	uint32_t n = 0, keyed = 0;
	int bad = 0;

	for (uint32_t i = c->buckets[b].head; i != KVS_IDX_NONE && bad < CHECK_MAX_REPORTS;
	     i = c->slots[i].next) {
		if (i >= c->slot_count) {
			BROKEN("bucket %u: link to slot %u of %u", b, i, c->slot_count);
			break;
		}
		if (x->seen[i]) {
			BROKEN("bucket %u: chain has a cycle at slot %u", b, i);
			break;
		}
		x->seen[i] = 1;
		x->chain[n++] = i;
		bad += check_slot(c, b, i, x, &keyed);
	}
	for (uint32_t k = 0; k < n; k++)
		x->seen[x->chain[k]] = 0;
	if (bad >= CHECK_MAX_REPORTS)
		return bad;
	bad += check_duplicates(c, x->keys, keyed);
	if (n != x->members[b]) {
		uint32_t exact = members_of(c, b);

		if (n != exact)
			BROKEN("bucket %u: %u slots on its chain, %u say they are on it", b, n, exact);
	}
	return bad;
}

/* The header still says what it said at open: valid, and the geometry this
 * handle copied (a header rewritten under live ranks is corruption). */
static int check_header(struct kvs_cache *c)
{
	const struct kvs_shm_header *h = c->hdr;
	struct stat st;
	int bad = 0;

	if (fstat(c->ctl_fd, &st) != 0)
		return -errno;
	if (kvs_core_header_validate(h, (uint64_t)st.st_size, c->cfg.unique_id, &c->log))
		return 1;
	if (h->fp.slot_count != c->slot_count || h->fp.slot_bytes != c->slot_bytes ||
	    h->fp.bucket_count != c->bucket_mask + 1 || h->fp.shards_per_block != c->shards_per_block ||
	    h->fp.seg_count != c->seg_count)
		BROKEN("header geometry changed since this process attached");
	for (uint32_t s = 0; s < c->seg_count && s < h->fp.seg_count; s++)
		if (h->segs[s].first_slot != c->geo[s].first_slot ||
		    h->segs[s].slot_count != c->geo[s].slot_count ||
		    h->segs[s].reserved_count != c->geo[s].reserved_count)
			BROKEN("header segs[%u] changed since this process attached", s);
	return bad;
}

/* Pre-pass over the rank table, under the lifecycle lock: pins per slot (hints:
 * live ranks pin and release meanwhile), and entries that cannot be right
 * whatever is running (bad state, pins of free entries, pins naming no slot,
 * lock-free pin bits of free entries). */
static int check_ranks(struct kvs_cache *c, uint32_t *pins)
{
	uint64_t free_bits = 0;
	int bad = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];
		uint32_t state = atomic_load_explicit(&e->state, memory_order_acquire);
		uint32_t held = 0;

		if (state > KVS_SHM_RANK_ATTACHED)
			BROKEN("rank %u: state %u", r, state);
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
			uint32_t pv = atomic_load_explicit(&e->pins[p], memory_order_relaxed);
			uint32_t v = pv & KVS_PIN_SLOT_MASK;

			if (v == 0)
				continue;
			held++;
			if (v > c->slot_count)
				BROKEN("rank %u pin %u names slot %u of %u", r, p, v - 1, c->slot_count);
			else if (!(pv & KVS_PIN_READER)) /* a lock-free pin holds no ref */
				pins[v - 1]++;
		}
		/* A free entry's pins would hold refs nobody drops (entries go
		 * free and get taken under the lifecycle lock, which we hold). */
		if (held && state == KVS_SHM_RANK_FREE)
			BROKEN("rank %u is free but holds %u pins", r, held);
		if (state == KVS_SHM_RANK_FREE && r < KVS_READER_RANKS)
			free_bits |= UINT64_C(1) << r;
	}
	/* A free entry's bit in a readers word: no entry of its own names the
	 * slot, so no release or reaper would clear it, and CLOCK would never
	 * take the slot (a bit is set after its entry and cleared before it, and
	 * an entry goes free only once reaped).  Stable here: a free entry is
	 * taken only under the lifecycle lock. */
	for (uint32_t i = 0; i < c->slot_count && bad < CHECK_MAX_REPORTS; i++) {
		uint64_t stray = atomic_load_explicit(&c->slots[i].readers, memory_order_relaxed) &
				 free_bits;

		if (stray)
			BROKEN("slot %u: lock-free pin bits 0x%llx of free rank entries", i,
			       (unsigned long long)stray);
	}
	return bad;
}

KVS_API int kvs_cache_check(struct kvs_cache *c)
{
	struct check_ctx x;
	int rc = 0, bad = 0;

	if (!c)
		return -EINVAL;
	rc = check_header(c);
	if (rc < 0)
		return rc;
	if (rc > 0)
		return -KVS_ECORRUPT; /* nothing below can be trusted */
	x.pins = calloc(c->slot_count, sizeof(*x.pins));
	x.members = calloc(c->bucket_mask + 1, sizeof(*x.members));
	x.seen = calloc(c->slot_count, sizeof(*x.seen));
	x.chain = calloc(c->slot_count, sizeof(*x.chain));
	x.keys = calloc(c->slot_count, sizeof(*x.keys));
	if (!x.pins || !x.members || !x.seen || !x.chain || !x.keys) {
		rc = -ENOMEM;
		goto out;
	}
	/* Pre-pass (relaxed: hints, verified under the bucket locks). */
	rc = kvs_core_lifecycle_enter(c);
	if (rc == 0) {
		bad += check_ranks(c, x.pins);
		kvs_core_lifecycle_exit(c);
	}
	for (uint32_t i = 0; i < c->slot_count; i++) {
		uint32_t b = atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed);

		if (b > c->bucket_mask)
			BROKEN("slot %u: bucket_idx %u of %llu", i, b,
			       (unsigned long long)c->bucket_mask + 1);
		else
			x.members[b]++;
	}
	/* One bucket at a time: what a bucket's lock guards is checked exactly. */
	for (uint64_t b = 0; b <= c->bucket_mask && rc == 0 && bad < CHECK_MAX_REPORTS; b++) {
		rc = kvs_core_bucket_lock(c, (uint32_t)b);
		if (rc == 0) {
			bad += check_bucket(c, (uint32_t)b, &x);
			kvs_core_bucket_unlock(c, (uint32_t)b);
		}
	}
	if (rc == 0 && bad < CHECK_MAX_REPORTS) {
		int n = kvs_core_claims_check(c, CHECK_MAX_REPORTS - bad);

		if (n < 0)
			rc = n;
		else
			bad += n;
	}
	if (bad >= CHECK_MAX_REPORTS)
		kvs_log_error(&c->log, "check: %d problems; further checks skipped", bad);
out:
	free(x.pins);
	free(x.members);
	free(x.seen);
	free(x.chain);
	free(x.keys);
	if (rc)
		return rc;
	return bad ? -KVS_ECORRUPT : 0;
}
