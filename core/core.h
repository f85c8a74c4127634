/*
 * core/core.h — core/'s private interface between its files (and to its tests).
 *
 * struct kvs_cache is the process-local handle: the mapped control segment, the
 * data segments, this process's rank entry and the copied config.  Nothing here
 * is shared memory (that is core/layout.h only).
 *
 *   config.c   config defaults and validation, hashing, fingerprint, layout sizes
 *   segment.c  control segment create/attach/validate/adopt/unlink, rank table,
 *              OFD-lock liveness, reaping dead ranks, open/close/remove
 *   index.c    bucket locks (robust, timed, repaired on EOWNERDEAD), chains, CLOCK
 *   slot.c     the get table, wait/publish/release, lookups, prealloc, touch
 *   stats.c    kvs_cache_stats, kvs_cache_check
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
	uint32_t seg_count;
	uint32_t home_seg;              /* CLOCK allocates here first */
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
};

/* ---- config.c ---- */
int kvs_core_config_validate(const struct kvs_cache_config *cfg, const struct kvs_log *log);
int kvs_core_unique_id_valid(const char *uid);
uint64_t kvs_core_hash(const struct kvs_block_id *block, uint32_t shard);
uint64_t kvs_core_format(void);
uint64_t kvs_core_tensor_hash(const uint64_t *tensor_bytes, uint32_t n);
void kvs_core_fingerprint(const struct kvs_cache_config *cfg, uint32_t seg_count,
			  struct kvs_shm_fingerprint *fp);
/* Region offsets and total size from a fingerprint. */
struct kvs_core_regions {
	uint64_t ranks_off, buckets_off, slots_off, states_off, refbits_off, ctl_bytes;
};
void kvs_core_regions(const struct kvs_shm_fingerprint *fp, struct kvs_core_regions *r);

/* ---- segment.c ---- */
/* Is rank entry r alive (its OFD byte locked by someone)?  Own entry: true. */
bool kvs_core_rank_alive(struct kvs_cache *c, uint32_t r, uint32_t epoch);
/* Reap every dead attached rank (drops its pins).  Returns the number reaped or
 * -errno (lifecycle lock).  Must not be called holding a bucket lock. */
int kvs_core_reap_dead(struct kvs_cache *c);
/* Drop every pin of rank entry r (dead, or ourselves at close). */
int kvs_core_drop_pins(struct kvs_cache *c, uint32_t r);

/* ---- index.c ---- */
static inline uint32_t kvs_core_bucket_of(const struct kvs_cache *c, uint64_t hash)
{
	return (uint32_t)(hash & c->bucket_mask);
}
/* Timed robust lock; EOWNERDEAD is repaired here.  0, -ETIMEDOUT, -errno. */
int kvs_core_bucket_lock(struct kvs_cache *c, uint32_t b);
void kvs_core_bucket_unlock(struct kvs_cache *c, uint32_t b);
/* Lock the bucket slot i currently sits on; returns it in *b. */
int kvs_core_slot_lock(struct kvs_cache *c, uint32_t i, uint32_t *b);
/* Under b's lock: the keyed slot of (block, shard), or KVS_IDX_NONE. */
uint32_t kvs_core_find(struct kvs_cache *c, uint32_t b, const struct kvs_block_id *block,
		       uint32_t shard);
/* Under b's lock: an unpinned slot re-keyed EMPTY and moved onto b; or -ENOSPC. */
int kvs_core_clock_victim(struct kvs_cache *c, uint32_t b, bool allow_reserved, uint32_t *victim);
/* Rebuild bucket b's chain and its slots' refcounts (b locked by the caller). */
void kvs_core_bucket_repair(struct kvs_cache *c, uint32_t b);
/* Initialise a robust process-shared mutex in shared memory. */
int kvs_core_mutex_init(pthread_mutex_t *m);

/* ---- slot.c ---- */
/* Pin-table entry of slot i for this handle (under i's bucket lock). */
int kvs_core_pin_add(struct kvs_cache *c, uint32_t i, uint32_t *pin);
void kvs_core_pin_del(struct kvs_cache *c, uint32_t pin);

static inline uint64_t kvs_core_filler(uint32_t rank, uint32_t epoch)
{
	return (uint64_t)rank << 32 | epoch;
}

/* Count an event in this rank's stats.  relaxed: a statistic summed racily by
 * readers, ordering nothing. */
#define KVS_COUNT(c, field, n) \
	atomic_fetch_add_explicit(&(c)->me->stats.field, (uint64_t)(n), memory_order_relaxed)

/* ---- test hooks (static library only, not exported by libkvshare.so.1) ---- */
/* Take the bucket lock of (block, shard) and never release it (the caller is
 * about to be killed).  Returns 0 or the lock's error. */
int kvs_core_test_hold_bucket(struct kvs_cache *c, const struct kvs_block_id *block,
			      uint32_t shard);
/* The shared header (tests corrupt it to provoke attach errors). */
struct kvs_shm_header *kvs_core_test_header(struct kvs_cache *c);

#endif
