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
 *   rank.c     rank table, OFD-lock liveness, lifecycle lock, reaping, fork
 *   pin.c      pin tables: add, delete, drop a rank's pins
 *   index.c    bucket locks (robust, timed in slices, repaired on EOWNERDEAD), chains
 *   clock.c    CLOCK eviction
 *   slot.c     the get table, wait/publish/release, lookups, prealloc, touch
 *   stats.c    kvs_cache_stats, kvs_cache_check, rank and segment info
 *   inspect.c  kvs_cache_inspect: a cache described read-only, never attached
 */
#ifndef KVS_CORE_CORE_H
#define KVS_CORE_CORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

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
	_Atomic uint32_t pin_hint;      /* where to start looking for a free pin entry */
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
	uint64_t ranks_off, buckets_off, slots_off, states_off, refbits_off, ctl_bytes;
};
int kvs_core_regions(const struct kvs_shm_fingerprint *fp, struct kvs_core_regions *r);
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

/* ---- rank.c ---- */
int kvs_core_ofd_lock(int fd, off_t byte, short type);
/* Is any rank entry's byte locked: is anyone attached (or creating)? */
bool kvs_core_any_rank_locked(int fd);
int kvs_core_lifecycle_lock(int fd, uint64_t deadline);
void kvs_core_lifecycle_unlock(int fd);
/* The lifecycle lock for an open handle: its OFD lock excludes other open file
 * descriptions only, so the handle's own threads are excluded by reap_mu too.
 * 0 or -ETIMEDOUT (attach_timeout_ns). */
int kvs_core_lifecycle_enter(struct kvs_cache *c);
void kvs_core_lifecycle_exit(struct kvs_cache *c);
/* Is rank entry r alive (its OFD byte locked by someone)?  Own entry: true. */
bool kvs_core_rank_alive(struct kvs_cache *c, uint32_t r, uint32_t epoch);
void kvs_core_fold_stats(struct kvs_shm_stats *dst, struct kvs_shm_stats *src);
/* Reap every dead attached entry (drops its pins).  _locked: the caller holds
 * the lifecycle lock.  Returns the number reaped or -errno.  Must not be called
 * holding a bucket lock. */
int kvs_core_reap_locked(struct kvs_cache *c);
int kvs_core_reap_dead(struct kvs_cache *c);
/* Take a free rank entry and lock its byte (lifecycle lock held): 0, -EBUSY. */
int kvs_core_rank_attach(struct kvs_cache *c);
/* Drop our pins and free our entry (lifecycle lock held).  false: a bucket
 * lock timed out; the entry is kept for a reaper. */
bool kvs_core_rank_detach(struct kvs_cache *c);
/* The list of open handles whose control descriptors a forked child closes. */
void kvs_core_handle_register(struct kvs_cache *c);
void kvs_core_handle_unregister(struct kvs_cache *c);

/* ---- pin.c ---- */
/* Pin-table entry for slot i (under i's bucket lock): 0 or -ENOSPC. */
int kvs_core_pin_add(struct kvs_cache *c, uint32_t i, bool owner, uint32_t *pin);
void kvs_core_pin_set_owner(struct kvs_cache *c, uint32_t pin);
void kvs_core_pin_del(struct kvs_cache *c, uint32_t pin);
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
/* Move slot v from bucket a's chain to b's (both locked). */
void kvs_core_chain_move(struct kvs_cache *c, uint32_t v, uint32_t a, uint32_t b);
/* Rebuild bucket b's chain and its slots' refcounts (b locked by the caller). */
void kvs_core_bucket_repair(struct kvs_cache *c, uint32_t b);
/* Initialise a robust process-shared mutex in shared memory. */
int kvs_core_mutex_init(pthread_mutex_t *m);

/* ---- clock.c ---- */
/* Under b's lock: an unpinned slot re-keyed EMPTY and moved onto b; or -ENOSPC. */
int kvs_core_clock_victim(struct kvs_cache *c, uint32_t b, bool allow_reserved, uint32_t *victim);

/* ---- slot.c ---- */

static inline uint64_t kvs_core_filler(uint32_t rank, uint32_t epoch)
{
	return (uint64_t)rank << 32 | epoch;
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

/* ---- test hooks (static library only, not exported by libkvshare.so.1) ---- */
/* Points of creation where a test may stall the creator (tests/core_attach.c):
 * the anonymous control file is ready but unnamed; named, data not yet made. */
enum kvs_core_test_point {
	KVS_CORE_TEST_BEFORE_LINK,
	KVS_CORE_TEST_AFTER_LINK,
};
extern void (*kvs_core_test_create_hook)(enum kvs_core_test_point point);
/* Take the bucket lock of (block, shard) and never release it (the caller is
 * about to be killed).  Returns 0 or the lock's error. */
int kvs_core_test_hold_bucket(struct kvs_cache *c, const struct kvs_block_id *block,
			      uint32_t shard);
/* The shared header (tests corrupt it to provoke attach errors). */
struct kvs_shm_header *kvs_core_test_header(struct kvs_cache *c);

#endif
