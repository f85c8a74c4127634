/*
 * core/core.h — core/'s private interface between its files (and to its tests).
 *
 * struct kvs_cache is the process-local handle: the mapped control segment, the
 * data segments, this process's rank entry and the copied config.  Nothing here
 * is shared memory (that is core/layout.h only).
 *
 *   config.c   config defaults and validation, hashing, fingerprint, layout sizes
 *   header.c   validation of everything the header says (open and check)
 *   segment.c  the life of a cache: atomic creation, attach, adopt, close, remove
 *   dataseg.c  its data segments: placement, fit, creation, record, mapping, removal
 *   rank.c     rank table, OFD-lock liveness, lifecycle lock, reaping, fork
 *   pin.c      pin tables: add, delete, drop a rank's pins
 *   index.c    bucket locks (robust, timed in slices, repaired on EOWNERDEAD), chains
 *   clock.c    CLOCK eviction
 *   slot.c     the get table, wait/publish/release, lookups, prealloc, touch
 *   claim.c    dump claims: who writes a block dumped shard by shard, durability
 *   stats.c    kvs_cache_stats, kvs_cache_check, rank and segment info
 *   inspect.c  kvs_cache_inspect: a cache described read-only, never attached
 */
#ifndef KVS_CORE_CORE_H
#define KVS_CORE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "core/layout.h"
#include "kvshare.h"
#include "numa/numa.h"
#include "wait/wait.h"

/* A data segment's slots, as validated at open (never re-read from the header). */
struct kvs_core_seg {
	uint64_t first_slot, slot_count, reserved_count;
};

struct kvs_cache {
	struct kvs_cache_config cfg;
	struct kvs_log log;
	int ctl_fd;
	void *ctl;                      /* mapping of the control segment */
	uint64_t ctl_bytes;
	struct kvs_shm_header *hdr;
	struct kvs_shm_rank *ranks;
	struct kvs_shm_bucket *buckets;
	struct kvs_shm_slot *slots;
	_Atomic uint32_t *states;
	_Atomic uint8_t *refbits;
	uint32_t *claim_heads;
	struct kvs_shm_claim *claims;
	uint32_t claim_mask;            /* claim_count - 1 */
	uint64_t bucket_mask;
	uint32_t slot_count;
	uint64_t slot_bytes;
	int slot_shift;                 /* log2(slot_bytes) when a power of two, else -1 */
	uint32_t shards_per_block;      /* local copies of the validated geometry */
	uint32_t local_rank_size;
	uint32_t seg_count;
	uint32_t home_seg;              /* CLOCK allocates here first */
	struct kvs_core_seg geo[KVS_MAX_SEGS];
	struct kvs_numa_seg segs[KVS_MAX_SEGS];
	pid_t opener;                   /* the process that opened this handle */
	int rank_idx;                   /* own rank entry, -1 before attach */
	uint32_t rank_epoch;
	struct kvs_shm_rank *me;
	_Atomic uint32_t pin_hint;      /* where to look for a free pin entry: one past
					 * the last taken (pin.c) */
	struct kvs_wait_spin spin;      /* adaptive spin history, shared by this handle's threads */
	/* The lifecycle OFD lock excludes other open file descriptions only: this
	 * mutex excludes this handle's own threads (reaping from wait hooks). */
	pthread_mutex_t reap_mu;
	struct kvs_cache *next;         /* list of open handles (rank.c, fork) */
};

/* ---- config.c ---- */
int kvs_core_config_validate(const struct kvs_cache_config *cfg, const struct kvs_log *log);
int kvs_core_unique_id_valid(const char *uid);
uint64_t kvs_core_hash(const struct kvs_block_id *block, uint32_t shard);
uint64_t kvs_core_format(void);
uint64_t kvs_core_tensor_hash(const uint64_t *tensor_bytes, uint32_t n);
void kvs_core_fingerprint(const struct kvs_cache_config *cfg, uint32_t seg_count,
			  struct kvs_shm_fingerprint *fp);
/* Region offsets and total size from a fingerprint.  0, or -EOVERFLOW when the
 * sizes do not fit 64 bits (a forged fingerprint). */
struct kvs_core_regions {
	uint64_t ranks_off, buckets_off, slots_off, states_off, refbits_off;
	uint64_t claim_heads_off, claims_off, ctl_bytes;
	uint32_t claim_count;
};
int kvs_core_regions(const struct kvs_shm_fingerprint *fp, struct kvs_core_regions *r);
/* Entries of the claim table of a cache of this geometry (a power of two). */
uint32_t kvs_core_claims_size(const struct kvs_shm_fingerprint *fp);
/* The bucket count the creator gives slot_count slots: the next power of two. */
uint64_t kvs_core_bucket_count(uint64_t slot_count);

/* ---- header.c ---- */
/* Check every value of the header against this build and itself (bounds, exact
 * region offsets, segment table, tensor table); st_size: the control file's
 * size.  0 or -KVS_ELAYOUT / -KVS_ECORRUPT, each logged naming the field. */
int kvs_core_header_validate(const struct kvs_shm_header *h, uint64_t st_size,
			     const char *uid, const struct kvs_log *log);
/* Compare the header's fingerprint with cfg's: 0 or -KVS_ECONFIG (logged). */
int kvs_core_header_match(const struct kvs_shm_header *h, const struct kvs_cache_config *cfg,
			  const struct kvs_log *log);
/* Bind the cache to the backend a store writes its dumps to, named by id (at
 * most KVS_SHM_BACKEND_ID_MAX - 1 bytes kept): the first store binds it, every
 * other must bring the same.  0, or -KVS_ECONFIG with theirs (len bytes) naming
 * the one bound.  An adoption with no DIRTY slot unbinds it. */
int kvs_core_backend_bind(struct kvs_cache *c, const char *id, char *theirs, size_t len);

/* ---- rank.c ---- */
int kvs_core_ofd_lock(int fd, off_t byte, short type);
/* Open cache uid's control file (/dev/shm/kvshare.<uid>.ctl) with flags, only
 * if it is a regular file, never blocking (common/fd.h: a FIFO of that name
 * would block a plain open for ever).  Returns the descriptor and *st (fstat),
 * -KVS_ECORRUPT (something else has the name, nothing opened: st->st_mode says
 * what; kvs_core_log_not_file), or -errno (-ENOENT: no such cache). */
int kvs_core_ctl_open(const char *uid, int flags, struct stat *st);
/* Log (ERROR) that cache uid's control name holds st, not a regular file. */
void kvs_core_log_not_file(const struct kvs_log *log, const char *uid, const struct stat *st);

/* Data segments (dataseg.c), under the lifecycle lock.  How many a new cache
 * gets (one per NUMA node in use, at most KVS_MAX_SEGS); whether fp's cache fits
 * this node now (0, or the error, logged with the key to change); create them
 * and record them in the header; map what the header records (watchers map
 * none) and take the geometry into the handle; remove the files a header names
 * (any header: bounded first); the hugetlbfs directory a header this build can
 * read records, else NULL. */
uint32_t kvs_core_segs_plan(struct kvs_cache *c);
int kvs_core_segs_check_fit(struct kvs_cache *c, const struct kvs_shm_fingerprint *fp,
			    const struct kvs_core_regions *r);
int kvs_core_segs_create(struct kvs_cache *c);
int kvs_core_segs_attach(struct kvs_cache *c);
void kvs_core_segs_unlink(const struct kvs_shm_header *h, const char *uid,
			  const struct kvs_log *log);
const char *kvs_core_recorded_dir(const struct kvs_shm_header *h);
/* Is any rank entry's byte locked: is anyone attached (or creating)? */
bool kvs_core_any_rank_locked(int fd);
/* Is a process other than ours attached that is not a watcher (a GPU rank, or
 * one still attaching)?  Watchers never keep a cache (lifecycle lock held). */
bool kvs_core_rank_locked_besides_watchers(struct kvs_cache *c);
/* Is any rank entry ATTACHED (a live process's, or a dead one's not reaped)? */
bool kvs_core_any_entry_attached(struct kvs_cache *c);
int kvs_core_lifecycle_lock(int fd, uint64_t deadline);
void kvs_core_lifecycle_unlock(int fd);
/* The lifecycle lock for an open handle: its OFD lock excludes other open file
 * descriptions only, so the handle's own threads are excluded by reap_mu too.
 * 0 or -ETIMEDOUT (attach_timeout_ns). */
int kvs_core_lifecycle_enter(struct kvs_cache *c);
void kvs_core_lifecycle_exit(struct kvs_cache *c);
/* Is rank entry r alive (its OFD byte locked by someone)?  Own entry: true. */
bool kvs_core_rank_alive(struct kvs_cache *c, uint32_t r, uint32_t epoch);
/* A counter of an entry less its base (0 while the base, read first, is ahead:
 * a rank just attached).  relaxed: statistics. */
static inline uint64_t kvs_core_stat_since(_Atomic uint64_t *v, _Atomic uint64_t *base)
{
	uint64_t n = atomic_load_explicit(v, memory_order_relaxed);
	uint64_t b = base ? atomic_load_explicit(base, memory_order_relaxed) : 0;

	return n > b ? n - b : 0;
}
/* Record entry e's counters as the base of its next attach (lifecycle lock
 * held, before ATTACHED is published): a rank's own counts are the entry's
 * less them (stats.c). */
void kvs_core_stats_base(struct kvs_shm_rank *e);

/* Reap every dead attached entry (drops its pins), the caller holding the
 * lifecycle lock.  Returns the number reaped.  Must not be called holding a
 * bucket lock. */
int kvs_core_reap_locked(struct kvs_cache *c);
/* Reap the dead entries if there are any and the lifecycle lock is free right
 * now (never waits for it): the number reaped, 0 (none dead), -EBUSY (the
 * lock is held: try later), or -errno.  The pins' bucket locks are waited for
 * within this thread's bound (kvs_core_lock_wait_set).  Not under a bucket
 * lock. */
int kvs_core_reap_try(struct kvs_cache *c);
/* Take a free rank entry and lock its byte (lifecycle lock held): 0, -EBUSY. */
int kvs_core_rank_attach(struct kvs_cache *c);
/* Record in our rank entry the copy engine our store copies with
 * (KVS_COPY_ENGINE_HOST or _CUDA) for kvs_cache_rank_info and inspect. */
void kvs_core_rank_set_copy_engine(struct kvs_cache *c, uint32_t engine);
/* Drop our pins and free our entry (lifecycle lock held).  false: a bucket
 * lock timed out; the entry is kept for a reaper. */
bool kvs_core_rank_detach(struct kvs_cache *c);
/* The list of open handles whose control descriptors a forked child closes. */
void kvs_core_handle_register(struct kvs_cache *c);
void kvs_core_handle_unregister(struct kvs_cache *c);

/* ---- pin.c ---- */
/* Pin-table entry for slot i, kind 0, KVS_PIN_OWNER (both under i's bucket
 * lock) or KVS_PIN_READER (a lock-free pin's, before its bit): 0 or -ENOSPC. */
int kvs_core_pin_add(struct kvs_cache *c, uint32_t i, uint32_t kind, uint32_t *pin);
void kvs_core_pin_set_owner(struct kvs_cache *c, uint32_t pin);
void kvs_core_pin_del(struct kvs_cache *c, uint32_t pin);
/* A lock-free pin of slot i (pin.c, "Lock-free pins"): its entry, then this
 * rank's bit.  0: set, *others the readers word's other bits before it (the
 * caller rechecks the slot, and undoes with kvs_core_reader_unpin); -EBUSY: an
 * evictor owns the slot, or this process already holds its bit (a locked pin
 * then); -ENOSPC: the pin table is full; nothing is left held but on 0. */
int kvs_core_reader_pin(struct kvs_cache *c, uint32_t i, uint32_t *pin, uint64_t *others);
/* Give back a lock-free pin: the bit, then the entry. */
void kvs_core_reader_unpin(struct kvs_cache *c, uint32_t i, uint32_t pin);
/* Under i's bucket lock, no locked pin on it: take its bytes from the lock-free
 * pins (true), or leave it (false: one holds it); and give them back after the
 * slot is re-keyed or made LOADING. */
bool kvs_core_readers_close(struct kvs_cache *c, uint32_t i);
void kvs_core_readers_open(struct kvs_cache *c, uint32_t i);
/* Drop every pin of rank entry r (dead, or ourselves at close); an unfinished
 * fill of r is failed (-ECANCELED at close, -KVS_EOWNERDEAD for a dead rank
 * nobody waits on).  Returns the number dropped or a bucket lock's error. */
int kvs_core_drop_pins(struct kvs_cache *c, uint32_t r);

/* ---- index.c ---- */
static inline uint32_t kvs_core_bucket_of(const struct kvs_cache *c, uint64_t hash)
{
	return (uint32_t)(hash & c->bucket_mask);
}
/* Slices of a contended bucket lock (index.c says why). */
#define KVS_LOCK_SLICE_NS (10ull * 1000000ull)
/* Bound this thread's waits for shared locks (bucket, claim table) to ns, when
 * that is less than the cache's lock_timeout_ns (0: lock_timeout_ns again).  A
 * wait so bounded that times out is not logged: the caller retries. */
void kvs_core_lock_wait_set(uint64_t ns);
/* Are this thread's lock waits bounded below lock_timeout_ns? */
bool kvs_core_lock_wait_short(const struct kvs_cache *c);
/* Take a robust process-shared mutex of the control segment (named what and id,
 * KVS_IDX_NONE for none, in logs): trylock, then timed slices up to
 * lock_timeout_ns (or this thread's bound).  Returns 0, or the positive
 * EOWNERDEAD / ENOTRECOVERABLE / ETIMEDOUT (the caller repairs or reports), or
 * -KVS_ECORRUPT (not such a mutex: never taken). */
int kvs_core_mutex_lock(struct kvs_cache *c, pthread_mutex_t *m, const char *what, uint32_t id);
/* Give back a mutex kvs_core_mutex_lock took (ordering it for TSan: index.c). */
void kvs_core_mutex_unlock(struct kvs_cache *c, pthread_mutex_t *m);
/* Timed robust lock; EOWNERDEAD is repaired here.  0, -ETIMEDOUT, -errno. */
int kvs_core_bucket_lock(struct kvs_cache *c, uint32_t b);
/* One try: 0, -EBUSY, or as kvs_core_bucket_lock. */
int kvs_core_bucket_trylock(struct kvs_cache *c, uint32_t b);
void kvs_core_bucket_unlock(struct kvs_cache *c, uint32_t b);
/* Lock the bucket slot i currently sits on; returns it in *b. */
int kvs_core_slot_lock(struct kvs_cache *c, uint32_t i, uint32_t *b);
/* Under b's lock: the keyed slot of (block, shard), or KVS_IDX_NONE. */
uint32_t kvs_core_find(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		       uint32_t shard);
/* Without the lock: a slot on b's chain whose key reads (block, shard), or
 * KVS_IDX_NONE -- a candidate that a lock-free pin rechecks (index.c). */
uint32_t kvs_core_find_unlocked(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
				uint32_t shard);

/* A hint that the key of hash (kvs_core_hash) is about to be got: its bucket's
 * line (slot false), or, a few gets later, the line of the slot its chain
 * starts with, its state word and CLOCK weight (slot true).  Reads nothing it
 * trusts. */
void kvs_core_prefetch(struct kvs_cache *c, uint64_t hash, bool slot);
/* A hint that slot, pinned through this handle for the key of hash, is about to
 * be released (kvs_slot_release): its line, whose generation the release checks,
 * and for a locked pin its bucket's, whose lock it takes.  Reads nothing it
 * trusts. */
void kvs_core_prefetch_release(struct kvs_cache *c, const struct kvs_slot *slot, uint64_t hash);

/* A slot's key (layout.h: the block id as two words, and the shard).  Written
 * under the slot's bucket lock; relaxed both ways: read under that lock, or
 * without it by a lock-free pin that rechecks it after its readers bit
 * (pin.c), so no order between the words is relied on. */
static inline void kvs_core_key_write(struct kvs_shm_slot *s, const struct kvs_block_id *block,
				      uint32_t shard)
{
	uint64_t w[2];

	memcpy(w, block->bytes, sizeof(w));
	atomic_store_explicit(&s->key[0], w[0], memory_order_relaxed);
	atomic_store_explicit(&s->key[1], w[1], memory_order_relaxed);
	atomic_store_explicit(&s->shard, shard, memory_order_relaxed);
}

static inline void kvs_core_key_read(struct kvs_shm_slot *s, struct kvs_block_id *block,
				     uint32_t *shard)
{
	uint64_t w[2] = { atomic_load_explicit(&s->key[0], memory_order_relaxed),
			  atomic_load_explicit(&s->key[1], memory_order_relaxed) };

	memcpy(block->bytes, w, sizeof(w));
	*shard = atomic_load_explicit(&s->shard, memory_order_relaxed);
}

static inline bool kvs_core_key_eq(struct kvs_shm_slot *s, const struct kvs_block_id *block,
				   uint32_t shard)
{
	struct kvs_block_id k;
	uint32_t sh;

	kvs_core_key_read(s, &k, &sh);
	return sh == shard && memcmp(k.bytes, block->bytes, sizeof(k.bytes)) == 0;
}

/* The hash of slot s's key (its bucket, once masked). */
static inline uint64_t kvs_core_key_hash(struct kvs_shm_slot *s)
{
	struct kvs_block_id k;
	uint32_t sh;

	kvs_core_key_read(s, &k, &sh);
	return kvs_core_hash(&k, sh);
}
/* Move slot v from bucket a's chain to b's (both locked). */
void kvs_core_chain_move(struct kvs_cache *c, uint32_t v, uint32_t a, uint32_t b);
/* Rebuild bucket b's chain and its slots' refcounts (b locked by the caller). */
void kvs_core_bucket_repair(struct kvs_cache *c, uint32_t b);
/* Initialise a robust process-shared mutex in shared memory. */
int kvs_core_mutex_init(pthread_mutex_t *m);

/* ---- clock.c ---- */
/* Which pools a CLOCK search may take a slot from. */
enum kvs_core_pool {
	KVS_CORE_POOL_MAIN,     /* a get */
	KVS_CORE_POOL_ANY,      /* a get with KVS_GET_ALLOW_RESERVED: main, then reserved */
	KVS_CORE_POOL_PREALLOC, /* reserved only (main only when there is no reserved pool) */
};
/* Under b's lock: an unpinned slot made EMPTY and moved onto b, its readers
 * word closed (the caller re-keys it, then kvs_core_readers_open); or -ENOSPC. */
int kvs_core_clock_victim(struct kvs_cache *c, uint32_t b, enum kvs_core_pool pool, uint32_t *victim);

/* ---- slot.c ---- */

static inline uint64_t kvs_core_filler(uint32_t rank, uint32_t epoch)
{
	return (uint64_t)rank << 32 | epoch;
}


/* Slot i's state word without its WAITERS bit, read with order mo. */
static inline uint32_t kvs_core_state_value(struct kvs_cache *c, uint32_t i, memory_order mo)
{
	return atomic_load_explicit(&c->states[i], mo) & KVS_WAIT_VALUE_MASK;
}

/* Count an event in this rank's stats.  relaxed: a statistic summed racily by
 * readers, ordering nothing. */
#define KVS_COUNT(c, field, n) \
	atomic_fetch_add_explicit(&(c)->me->stats.field, (uint64_t)(n), memory_order_relaxed)

/* For a pinned slot another rank fills: if the filler died, take the slot over
 * (or fail it, KVS_SLOT_WAIT_NO_TAKEOVER in flags) -- what kvs_slot_wait does once
 * per slice, for callers that sleep elsewhere (the store's wait-for-any).
 * Returns KVS_SLOT_WAIT_OWNER (taken over: slot->flags has KVS_SLOT_OWNER), 0
 * (filler alive, slot published, or failed for everyone: read the state), or
 * -EINVAL / -ESTALE.  Blocks: one bucket lock, only when the filler is dead. */
int kvs_core_slot_recover(struct kvs_cache *c, struct kvs_slot *slot, uint32_t flags);

/* Log (WARN) that slot i was not published within timeout_ns, naming its filler's
 * rank entry and pid ("stopped?"): for waits that time out on a live filler. */
void kvs_core_log_fill_timeout(struct kvs_cache *c, uint32_t i, uint64_t timeout_ns);

/* kvs_core_get flags beyond the public KVS_GET_* (the store's). */
#define KVS_CORE_GET_TRY (1u << 16)    /* trylock the bucket: -EBUSY when it is held */
#define KVS_CORE_GET_REFILL (1u << 17) /* a FAILED slot, pinned or not, becomes ours to fill */
#define KVS_CORE_GET_NO_OWN (1u << 18) /* never the owner: -ENOENT, nothing keyed, where the
					  get would own (absent, or unfilled and unpinned) */
#define KVS_CORE_GET_QUIET (1u << 19)  /* not a hit in the stats */
#define KVS_CORE_GET_DUMP (1u << 20)   /* a store dump's get: counted in dump_gets, not as a
					  hit, join or miss (those count reads) */
#define KVS_CORE_GET_DEFER (1u << 21)  /* with NO_OWN: a key the unlocked lookup does not find
					  is -ENOENT at once, no bucket lock (a candidate
					  answer: the caller defers the shard and gets it
					  again later, locked) */
/* A writer's get: pin only what is there, not a use anyone asked for. */
#define KVS_CORE_GET_RESIDENT (KVS_CORE_GET_NO_OWN | KVS_CORE_GET_QUIET)
/* kvs_cache_get without the public flag check and with the raw state (DIRTY). */
int kvs_core_get(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		 uint32_t flags, struct kvs_slot *slot);
/* kvs_core_get given the key's hash, kvs_core_hash(block, shard) (a caller that
 * prefetches the key first computes it once for both). */
int kvs_core_get_hashed(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
			uint64_t hash, uint32_t flags, struct kvs_slot *slot);
/* The bytes of slot i in this process (a slot index a get returned: in a data
 * segment), or NULL for one no segment holds. */
void *kvs_core_slot_addr(const struct kvs_cache *c, uint32_t i);
/* kvs_cache_prealloc; KVS_CORE_GET_TRY in flags: -EBUSY when the bucket is held. */
int kvs_core_prealloc(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
		      uint32_t flags);
/* kvs_slot_state with the raw state (DIRTY is not READY here). */
int kvs_core_slot_state(struct kvs_cache *c, struct kvs_slot *slot);
/* A FAILED slot we pin becomes ours to fill (LOADING, our pin the owner's): 0;
 * -EAGAIN when it is not FAILED any more; the handle's and lock's errors. */
int kvs_core_slot_refill(struct kvs_cache *c, struct kvs_slot *slot);
/* Lock the bucket of a slot we pin (the handle is checked first): 0 and *b. */
int kvs_core_slot_lock_pinned(struct kvs_cache *c, struct kvs_slot *slot, uint32_t *b);
/* Owner: the bytes a dump gathered are in; publish DIRTY, kept even if its
 * block never completes until until_ns.  As kvs_slot_publish_ready. */
int kvs_core_slot_publish_dirty(struct kvs_cache *c, struct kvs_slot *slot, uint64_t until_ns);
/* A dump found the slot it pins DIRTY (a peer's dump): its protection extended to
 * until_ns; or READY, and redirty (a backend whose blocks are not atomic): DIRTY
 * again, part of the block's record.  Returns the state after (DIRTY, or the one
 * found), or the handle's and lock's errors. */
int kvs_core_dirty_hold(struct kvs_cache *c, struct kvs_slot *slot, uint64_t until_ns, bool redirty);
/* The fence of a Dekker pair between a dump and a drop of its block
 * (store/dump.c acknowledge: a slot made DIRTY, then the claim read;
 * store/write.c kvs_store_block_drop: the claim taken, then the slots read): a
 * seq_cst read-modify-write of one word both sides touch (the header's
 * dirty_hint, plus 0), so the two are ordered and the later one sees what the
 * earlier one wrote before it.  (An RMW, not atomic_thread_fence: the same
 * guarantee, and one ThreadSanitizer can see.) */
static inline void kvs_core_dirty_fence(struct kvs_cache *c)
{
	atomic_fetch_add_explicit(&c->hdr->dirty_hint, 0, memory_order_seq_cst);
}
/* One shard of a block, as kvs_core_dirty_scan found its slot. */
struct kvs_dirty_shard {
	uint32_t index, generation;
};
/* What the cache holds of a block. */
struct kvs_dirty_scan {
	uint32_t dirty, ready;  /* shards DIRTY, READY */
	uint32_t missing;       /* shards neither (absent, LOADING, FAILED) */
	bool fresh;             /* a DIRTY one is protected past now_ns */
	uint64_t until_ns;      /* the latest protection of its DIRTY shards */
};
/* Look at every shard of block, each under its bucket lock in turn, from the
 * last down; without full, stop at the first missing one.  shards (NULL, or
 * shards_per_block entries): each slot found.  0, or a lock's error. */
int kvs_core_dirty_scan(struct kvs_cache *c, const struct kvs_block_id *block, uint64_t now_ns,
			bool full, struct kvs_dirty_scan *out, struct kvs_dirty_shard *shards);
/* The block's writer, the block in the backend: slot i, if still residency gen
 * and DIRTY, becomes READY.  1 (cleaned), 0 (not that DIRTY slot), -EINVAL,
 * the lock's errors.  No pin needed: a DIRTY slot is never evicted. */
int kvs_core_dirty_clean(struct kvs_cache *c, uint32_t i, uint32_t gen);
/* The holder of the block's claim: slot i, if still residency gen and DIRTY (and
 * with before_ns, protected only until before it), becomes FAILED(err).  1
 * (dropped), 0 (not), -EINVAL, the lock's errors. */
int kvs_core_dirty_drop(struct kvs_cache *c, uint32_t i, uint32_t gen, int err, uint64_t before_ns);
/* Is slot i still residency gen and DIRTY?  A lock-free hint (a durable wait's
 * look before it takes a lock). */
bool kvs_core_dirty_peek(struct kvs_cache *c, uint32_t i, uint32_t gen);
/* A sweep's look at slot i under its bucket lock: 1 and its key when DIRTY, 0
 * when not, -EINVAL, the lock's errors. */
int kvs_core_dirty_key(struct kvs_cache *c, uint32_t i, struct kvs_block_id *block, uint32_t *shard);
/* The rank entry that filled slot i (a DIRTY slot: its gatherer), or -1.  A
 * hint read without the lock. */
int kvs_core_slot_filler_rank(struct kvs_cache *c, uint32_t i);
/* A durable dump's look at its shard: the state of (block, shard) if its slot is
 * still i in residency gen (and *err, its error when FAILED), -ESTALE when not
 * (evicted, re-keyed: dump it again), or the lock's errors. */
int kvs_core_dirty_look(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t shard,
			uint32_t i, uint32_t gen, int32_t *err);

/* ---- claim.c ---- */
/* A claim we hold: one generation of one entry. */
struct kvs_claim_ref {
	uint32_t idx;
	uint64_t gen;
};
/* What the claim table says of a block (kvs_core_claim_look, _take). */
struct kvs_claim_view {
	uint32_t state;     /* enum kvs_shm_claim_state; FREE: no claim (or a STORED one
			       past its grace, for _look) */
	int32_t error;      /* WRITING: the last failed attempt's error, 0 */
	uint64_t holder;    /* WRITING, DROPPING: rank << 32 | epoch */
	bool holder_alive;  /* WRITING, DROPPING: that rank lives */
};
/* A STORED record's proof lasts this long; a DIRTY slot is protected this much
 * past the deadline of the dump that made or found it DIRTY. */
#define KVS_CLAIM_GRACE_NS KVS_NSEC_PER_SEC
/* Everything free (creator, adoption; nobody else attached). */
int kvs_core_claims_init(struct kvs_cache *c);
/* The hash chain (claim_heads index) of block's claim. */
uint32_t kvs_core_claim_chain(const struct kvs_cache *c, const struct kvs_block_id *block);
/* Take block's claim in state st (WRITING or DROPPING): when it has none, a
 * STORED one past its grace, or one whose holder died (taken over).  1: ours
 * (*ref); 0: a live rank holds it, or it was STORED within its grace (*v says
 * which); -ENOSPC: no entry free (wait for claims_bell: the DIRTY slots keep the
 * block meanwhile); -EINVAL; -ETIMEDOUT / -KVS_ECORRUPT (the lock).  st STORED:
 * only a STORED record within its grace is taken (held WRITING: the stored
 * block's DIRTY slots are cleaned under it, and its end with 0 stores it
 * again); 0 when there is none. */
int kvs_core_claim_take(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t st,
			struct kvs_claim_ref *ref, struct kvs_claim_view *v);
/* block's claim now (*v; FREE when none): 0, or the lock's errors. */
int kvs_core_claim_look(struct kvs_cache *c, const struct kvs_block_id *block,
			struct kvs_claim_view *v);
/* A lock-free hint: does block seem to have a claim in state st?  (Confirm with
 * kvs_core_claim_look.) */
bool kvs_core_claim_peek(struct kvs_cache *c, const struct kvs_block_id *block, uint32_t st);
/* A claim of ours moves to state st (a drop whose block completed meanwhile
 * becomes its write).  0, -ESTALE (not ours any more), the lock's errors. */
int kvs_core_claim_convert(struct kvs_cache *c, const struct kvs_claim_ref *ref, uint32_t st);
/* Our claim ends: a write with err 0 leaves a STORED record for the grace, any
 * other end frees it.  Every attached rank's bell is rung and the claims bell
 * bumped.  0 (also when ref is not ours any more), or the lock's error
 * (-ETIMEDOUT: try again, the claim stays ours). */
int kvs_core_claim_end(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err);
/* An attempt of our write failed with err and will be retried: its error, for
 * the durable dumps that report at their deadline; bells rung. */
void kvs_core_claim_retry(struct kvs_cache *c, const struct kvs_claim_ref *ref, int err);
/* A dump found a shard of block READY over a backend whose blocks are atomic:
 * the block is stored; a STORED record for the grace, unless a live rank holds
 * its claim.  0, or the lock's errors. */
int kvs_core_claim_stored(struct kvs_cache *c, const struct kvs_block_id *block);
/* The shard of block whose gatherer is the block's preferred writer. */
uint32_t kvs_core_claim_designated(const struct kvs_cache *c, const struct kvs_block_id *block);
/* Ring rank entry rank's bell. */
void kvs_core_claim_ring(struct kvs_cache *c, uint32_t rank);
/* kvs_cache_check's part: chains, free list.  Returns the number of broken
 * invariants (logged, at most max_reports) or the lock's error. */
int kvs_core_claims_check(struct kvs_cache *c, int max_reports);

/* ---- test hooks (static library only, not exported by libkvshare.so.1) ---- */
/* Points where a test may stall a creator or a remover (tests/core_attach.c):
 * the anonymous control file is ready but unnamed; named, data not yet made;
 * kvs_cache_remove has opened the control file by its name and is about to
 * wait for its lifecycle lock. */
enum kvs_core_test_point {
	KVS_CORE_TEST_BEFORE_LINK,
	KVS_CORE_TEST_AFTER_LINK,
	KVS_CORE_TEST_REMOVE_OPENED,
};
extern void (*kvs_core_test_hook)(enum kvs_core_test_point point);
/* Take the bucket lock of (block, shard) and never release it (the caller is
 * about to be killed).  Returns 0 or the lock's error. */
int kvs_core_test_hold_bucket(struct kvs_cache *c, const struct kvs_block_id *block,
			      uint32_t shard);
/* Take the claim table's lock and never release it (the caller is about to be
 * stopped or killed).  Returns 0 or the lock's error. */
int kvs_core_test_hold_claims(struct kvs_cache *c);
/* The shared header (tests corrupt it to provoke attach errors). */
struct kvs_shm_header *kvs_core_test_header(struct kvs_cache *c);

#endif
