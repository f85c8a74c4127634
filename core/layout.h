/*
 * core/layout.h — every struct that lives in shared memory, and nothing else.
 *
 * The control segment (POSIX shm /kvshare.<unique_id>.ctl) is one flat file laid
 * out as below.  Offsets are recorded in the header and recomputed by every
 * attacher from the fingerprint (kvs_core_regions, overflow-checked); a mismatch is
 * -KVS_ECORRUPT.  No pointers anywhere: slot, bucket and rank *indices* only, so
 * processes may map the segment at different addresses.
 *
 *  region   offset          size                      align  writer                  sync protocol
 *  -------  --------------  ------------------------  -----  ----------------------  ------------------------------------
 *  header   0               8192                      4096   creator (init, adopt);  state INIT->READY published last
 *                                                            hands: any rank         (release; attachers acquire).  CLOCK
 *                                                                                    hands: fetch_add, relaxed.  Node
 *                                                                                    stats: relaxed counters.
 *  ranks    ranks_off       KVS_MAX_RANKS * 17600     64     the rank itself; its    entry state/epoch changed only under
 *                                                            reaper                  the lifecycle OFD lock; pins written
 *                                                                                    under the pinned slot's bucket lock;
 *                                                                                    stats relaxed (store failures:
 *                                                                                    release), owner-written.
 *  buckets  buckets_off     bucket_count * 64         64     any rank                robust process-shared mutex guards the
 *                                                                                    chain head and its slots' links, refs,
 *                                                                                    keys, generation and filler.
 *  slots    slots_off       slot_count * 64           64     any rank, under the     as buckets; key, generation, links
 *                                                            slot's bucket lock(s);  and bucket_idx also read without the
 *                                                            readers by RMW alone    lock (relaxed) by a lock-free pin and
 *                                                                                    CLOCK, rechecked.  readers: fetch_or /
 *                                                                                    fetch_and / CAS only (core/pin.c,
 *                                                                                    "Lock-free pins").
 *  states   states_off      slot_count * 4            64     owner / reaper / get    32-bit state word (wait/wait.h):
 *                                                                                    publish = one exchange (release),
 *                                                                                    waiters acquire.  Off the slot line.
 *  refbits  refbits_off     slot_count * 1            64     any rank                CLOCK weights, 0..KVS_CLOCK_WEIGHT_MAX
 *                                                                                    (core/clock.c): load-then-store,
 *                                                                                    relaxed (a heuristic; a lost update
 *                                                                                    costs one eviction choice, never
 *                                                                                    correctness).  Any byte is harmless.
 *  cheads   claim_heads_off claim_count * 4           64     any rank, under the     hash chain heads of the claim table
 *                                                            header's claims_lock    (core/claim.c); claim index or NONE.
 *  claims   claims_off      claim_count * 64          64     any rank                key, next, generation, state, holder,
 *                                                                                    error and expiry under claims_lock;
 *                                                                                    state read lock-free as a hint
 *                                                                                    (acquire), rechecked under the lock.
 *  end      ctl_bytes       rounded up to 4096
 *
 * Data segments (numa/): segment s holds slots [first_slot, first_slot +
 * slot_count) contiguously, slot_bytes apart; its backing, page size, size and
 * node are recorded in the header's segment table, and the hugetlbfs directory in
 * hugetlb_dir, by the creator: attachers use the record, never recompute it.
 * The record also says how the creator pre-faulted it (threads, wall time: for
 * stats only, nothing depends on them).  They hold only KV bytes.
 *
 * Nothing here is trusted: every value is bounded before use (core/header.c at
 * open and in kvs_cache_check; indices and links where they are followed).
 *
 * Crash consistency.  Every bucket chain is a cache of the slots' bucket_idx
 * fields, and every refcount is a cache of the rank pin tables' locked entries:
 * whoever gets EOWNERDEAD on a bucket lock rebuilds that bucket's chain from
 * bucket_idx, recounts its slots' refs from the pin tables and clears the
 * evictor bit its dead holder may have left (index.c), so a holder killed at any
 * instruction leaves nothing that cannot be repaired.  A slot being re-keyed is
 * EMPTY while its key is written.  A lock-free pin's bit in a slot's readers
 * word is set only after its pin-table entry and cleared before it, so the
 * reaper of a dead rank clears every bit the rank may hold (core/pin.c).
 *
 * Memory orders.  A field guarded by a bucket lock (key, ref, bucket_idx, next,
 * generation, filler, error, pin entries) is read and written relaxed under that
 * lock: the mutex orders it; it is atomic only because CLOCK, the checker and the
 * statistics also peek at it unlocked, as hints rechecked under the lock, and
 * a lock-free pin reads key, generation and links unlocked, rechecked after its
 * readers bit is set.  Rank-entry fields change under the lifecycle OFD lock
 * (state: release when set, acquire when read).  The lock-free publications are
 * the slot state word (release by kvs_wait_publish, acquire by its readers) and
 * the readers word (core/pin.c, "Lock-free pins").
 *
 * Dumps (core/claim.c, docs/store.md "Dumps").  The invariant: a slot a dump
 * filled (or, over a backend whose blocks are not atomic, a READY one a dump
 * counted) is DIRTY until its block is in the backend: never evicted, never reset
 * by an adoption, never removed with its cache.  The DIRTY slots of a block are
 * its record -- nothing else says what is to be written.  It leaves DIRTY only by
 * its block's writer (cleaned: READY, once the block is in the backend) or
 * dropped (FAILED) by the holder of the block's claim: a write given up, or a
 * block that never completed whose every DIRTY slot is past dirty_until_ns (the
 * latest deadline, plus a grace, of the dumps that made or found it DIRTY).  A
 * block's claim (one entry per block being written or dropped, a STORED record
 * for a grace after) is the right to write or drop it, held by a live rank;
 * the table is bounded, and a full one only makes a writer wait: it records
 * nothing that would be lost.  dirty_hint counts DIRTY slots from above (raised
 * before a slot goes DIRTY, lowered after it left), so a rank killed between
 * the two leaves it too high, never too low: 0 means no slot is DIRTY.
 *
 * Any change to a struct here, to the offsets or to the protocol bumps
 * KVS_LAYOUT_VERSION in the same commit.
 */
#ifndef KVS_CORE_LAYOUT_H
#define KVS_CORE_LAYOUT_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvshare.h"

#define KVS_LAYOUT_VERSION 12u /* 12: READY hits pinned without the bucket lock (the
				* slot's readers word, KVS_PIN_READER entries, the key and
				* the chain links atomic words; slots below 2^30).  11: the DIRTY slots are the dump record (never evicted,
				* dirty_until_ns per slot); claims only hold the right to
				* write or drop a block (no counts, no waiters, a STORED
				* record); dirty_hint, sweep_ns and the backend's identity in
				* the header.  10: a store dump's gets counted in dump_gets, not in
				* hits/joins/misses; the rank entry records its store's copy
				* engine (copy_engine, was pad32); failure counters counted
				* after their attempt (release).  9: counters per entry over
				* all its attaches, a base per
				* attach; no departed total (nothing is folded).  8: claims: a
				* DURABLE one proof only within its grace (and
				* recorded for a block found stored), a new generation counts
				* the cache's shards of its block, READY slots counted (and kept
				* by CLOCK) for backends without atomic blocks, tags cleared at
				* eviction.  7: joins counted per rank; task latency sum.  6: dump claims (claim
				* table, slot tags, DIRTY, rank bells).  5: segment pre-fault record; store
				* registration and staging counters.  4: refbits hold
				* CLOCK weights 0..2 */
#define KVS_SHM_MAGIC UINT64_C(0x4b56534852435431) /* "KVSHRCT1" */
#define KVS_CACHE_LINE 64u
#define KVS_SHM_PAGE 4096u
#define KVS_SHM_HEADER_BYTES 8192u /* header region: two pages */

#define KVS_MAX_RANKS 64u     /* attached processes (ranks and watchers) */
#define KVS_RANK_PINS 4096u   /* slots one process may hold pinned at once */
#define KVS_MAX_SEGS 16u      /* data segments (NUMA nodes in use) */
#define KVS_MAX_SLOTS ((UINT64_C(1) << 30) - 1) /* slots of one cache */
#define KVS_MAX_SLOT_BYTES (UINT64_C(1) << 40)  /* bytes of one slot */
#define KVS_MAX_DATA_BYTES (UINT64_C(1) << 50)  /* slot_bytes * slot_count */

#define KVS_IDX_NONE UINT32_MAX /* empty chain link */
#define KVS_SHM_BACKEND_ID_MAX 256u /* the header's backend identity text, NUL included */
#define KVS_SHM_DIR_MAX 256u    /* hugetlbfs mount recorded by the creator, NUL included */

/* Pin entry: slot index + 1 in the low 30 bits (0 = free entry); KVS_PIN_OWNER
 * marks the one pin that owns the slot's fill (its get made it LOADING, or its
 * wait took it over).  Publishing requires that bit and the slot's filler.
 * KVS_PIN_READER marks a lock-free pin: it holds the rank's bit in the slot's
 * readers word instead of a count in ref (core/pin.c). */
#define KVS_PIN_OWNER (UINT32_C(1) << 31)
#define KVS_PIN_READER (UINT32_C(1) << 30)
#define KVS_PIN_SLOT_MASK (KVS_PIN_READER - 1)
/* The readers word of a slot: bit r for rank entry r < KVS_READER_RANKS holding
 * lock-free pins of it, KVS_READERS_EV for an evictor that owns it (the last
 * rank entry pins under the lock: its bit is EV's). */
#define KVS_READERS_EV (UINT64_C(1) << 63)
#define KVS_READER_RANKS (KVS_MAX_RANKS - 1)
/* Largest CLOCK weight of a slot (refbits[]): allocation gives 1, a new use
 * adds 1, each pass of the hand takes 1; a slot is evicted at 0.  The hand
 * sweeps a pool at most KVS_CLOCK_WEIGHT_MAX + 1 times per search.  Part of the
 * protocol: every process of a cache must agree (KVS_LAYOUT_VERSION). */
#define KVS_CLOCK_WEIGHT_MAX 2u

/* Filler of a slot nobody is filling (a preallocated LOADING slot). */
#define KVS_FILLER_NONE UINT64_MAX

/* Header state word. */
enum kvs_shm_state {
	KVS_SHM_INIT = 0,  /* creator still initialising (or died doing so) */
	KVS_SHM_READY = 1, /* usable */
};

/* Slot state values (low bits of the state word; bit 31 is KVS_WAIT_WAITERS).
 * The public KVS_SLOT_* values of kvshare.h are the same numbers. */
enum kvs_shm_slot_state {
	KVS_SHM_SLOT_EMPTY = 0,   /* no key: free for CLOCK */
	KVS_SHM_SLOT_LOADING = 1, /* keyed; the owner is filling it */
	KVS_SHM_SLOT_READY = 2,   /* keyed; bytes valid */
	KVS_SHM_SLOT_FAILED = 3,  /* keyed; error holds the owner's code */
	KVS_SHM_SLOT_DIRTY = 4,   /* keyed; bytes valid (a dump gathered them), not yet
				   * in the backend: READY to every reader */
};

/* Claim states (kvs_shm_claim.state). */
enum kvs_shm_claim_state {
	KVS_SHM_CLAIM_FREE = 0,     /* on the free list */
	KVS_SHM_CLAIM_WRITING = 1,  /* holder writes the block (error: its last attempt's) */
	KVS_SHM_CLAIM_DROPPING = 2, /* holder drops the DIRTY slots of a block that never
				     * completed (their protection over) */
	KVS_SHM_CLAIM_STORED = 3,   /* the block is in the backend: written, or a shard of it
				     * read from it; proof until expires_ns, then freed */
};

/* Claims of one cache: a claim is held while a block is written or dropped, and
 * kept a grace after (STORED); twice as many as the cache holds blocks whole,
 * within bounds.  A full table makes a writer wait: nothing is lost by it. */
#define KVS_CLAIMS_MIN 64u
#define KVS_CLAIMS_MAX (UINT32_C(1) << 16)

/* Rank entry state (changed only under the lifecycle OFD lock). */
enum kvs_shm_rank_state {
	KVS_SHM_RANK_FREE = 0,
	KVS_SHM_RANK_ATTACHED = 1,
};

/* Counters of one rank's store (kvs_store_stats: the same fields in the same
 * order), written by its dispatcher, copier and task threads.  Relaxed
 * fetch_add, but for the failure counters (tasks_failed, tasks_timedout,
 * read_errors, write_errors): release, after their attempt was counted, and read
 * first (acquire) by kvs_store_stats, so a snapshot never shows more failures
 * than attempts.  Readers sum racily. */
struct kvs_shm_store_stats {
	_Atomic uint64_t tasks_load, tasks_dump, tasks_prefetch, tasks_failed, tasks_timedout;
	_Atomic uint64_t shards_loaded, shards_dumped, dump_dedup, load_hits;
	_Atomic uint64_t owner_reads, read_errors, backend_writes, write_errors;
	_Atomic uint64_t prealloc, prealloc_hits, copy_bytes, copy_ns;
	_Atomic uint64_t task_lat_us[KVS_STORE_LAT_BUCKETS];
	/* Registration of the data plane with the copy engine (store.c): the bytes
	 * this rank registers (added once at open), registered so far, the time the
	 * registration calls took; shard copies made through the staging buffer
	 * because their slot was not registered yet. */
	_Atomic uint64_t register_total_bytes, registered_bytes, register_ns, staged_shards;
	_Atomic uint64_t task_lat_ns_sum; /* the tasks of task_lat_us, their time summed */
};

/* Counters of one rank-table entry, over every attach of it: never reset, never
 * moved (a rank's own are the entry's less the base recorded at its attach), so
 * the node's total (the sum over the entries) only grows and stays true whoever
 * is killed at any instruction.  Relaxed fetch_add by the rank that counts;
 * readers sum racily: statistics, not synchronisation. */
struct kvs_shm_stats {
	_Atomic uint64_t hits;
	_Atomic uint64_t misses;
	_Atomic uint64_t owner_fills;
	_Atomic uint64_t waits;
	_Atomic uint64_t wait_ns;
	_Atomic uint64_t failures;
	_Atomic uint64_t evictions;
	_Atomic uint64_t clock_sweeps;
	_Atomic uint64_t takeovers;
	_Atomic uint64_t lock_repairs;
	_Atomic uint64_t enospc;
	_Atomic uint64_t joins; /* gets that found the slot being filled (LOADING) */
	_Atomic uint64_t dump_gets; /* gets of store dumps (in none of the three above) */
	_Atomic uint64_t reserved[3]; /* (the header counts reaped entries) */
	struct kvs_shm_store_stats store; /* the rank's store pipeline (store/) */
};

/* One data segment: where it is and which slots it holds. */
struct kvs_shm_seg {
	int32_t node;           /* node passed to kvs_numa_seg_create (-1 = unbound) */
	int32_t bound_node;     /* node numa/ reported (-1 = none) */
	uint32_t backing;       /* enum kvs_numa_backing */
	uint32_t prefault_threads; /* threads that pre-faulted it (creator's record) */
	uint64_t page_bytes;
	uint64_t bytes;         /* mapped size */
	uint64_t first_slot;
	uint64_t slot_count;    /* including the reserved ones at the end */
	uint64_t reserved_count;
	uint64_t prefault_ns;   /* wall time of its pre-fault (creator's record) */
	alignas(KVS_CACHE_LINE) _Atomic uint64_t hand;          /* CLOCK hand, main pool */
	alignas(KVS_CACHE_LINE) _Atomic uint64_t reserved_hand; /* CLOCK hand, reserved pool */
};

/* Config fingerprint: what every attacher must agree on. */
struct kvs_shm_fingerprint {
	uint64_t slot_bytes;
	uint64_t slot_count;
	uint64_t bucket_count;
	uint32_t shards_per_block;
	uint32_t tensor_count;
	uint32_t local_rank_size;
	uint32_t seg_count;
	uint32_t reserved_slots;
	uint32_t pad;
	uint64_t tensor_hash;   /* hash of tensor_bytes[0..tensor_count) */
};

struct kvs_shm_header {
	uint64_t magic;
	uint32_t layout_version;
	_Atomic uint32_t state;         /* enum kvs_shm_state; READY published last (release) */
	uint64_t format;                /* kvs_core_format(): struct sizes, cache line */
	uint64_t ctl_bytes;
	struct kvs_shm_fingerprint fp;
	uint64_t ranks_off, buckets_off, slots_off, states_off, refbits_off;
	uint32_t flags;                 /* KVS_CACHE_PERSIST as created */
	uint32_t fallbacks;             /* KVS_FALLBACK_* bits (numa/ decisions) */
	uint32_t creator_uid;
	_Atomic uint32_t adopt_count;   /* times a stale segment was adopted */
	char hugetlb_dir[KVS_SHM_DIR_MAX]; /* mount of the hugetlb data segments, "" if none */
	uint64_t tensor_bytes[KVS_MAX_TENSORS];
	struct kvs_shm_seg segs[KVS_MAX_SEGS];
	_Atomic uint64_t ranks_reaped;  /* dead entries reaped (relaxed: a statistic) */
	_Atomic uint64_t lrs_mismatch;  /* attaches beyond local_rank_size */
	/* The claim table (core/claim.c): regions, its lock (robust, process-shared:
	 * guards chains, free list, keys and every field of the entries), the free
	 * list head and a bell bumped whenever a claim ends or is freed (a writer
	 * waiting for room or for a claim held by another sleeps on it). */
	uint64_t claim_heads_off, claims_off;
	uint32_t claim_count;           /* a power of two, from the fingerprint */
	uint32_t claims_free;           /* free list head (claim index), under claims_lock */
	alignas(KVS_CACHE_LINE) pthread_mutex_t claims_lock;
	_Atomic uint32_t claims_bell;
	/* DIRTY slots, counted from above (see "Dumps" above): raised (relaxed)
	 * before a slot goes DIRTY, lowered (relaxed) after it left; an adoption
	 * counts them anew.  0: no slot is DIRTY, nothing for a sweep to do. */
	alignas(KVS_CACHE_LINE) _Atomic uint64_t dirty_hint;
	/* When the node's next sweep of the DIRTY slots is due (CLOCK_MONOTONIC):
	 * the rank whose CAS moves it on sweeps (store/dump.c), so a node sweeps
	 * once per interval whatever its ranks.  Relaxed: a turn, not a lock. */
	_Atomic uint64_t sweep_ns;
	/* The backend every store of this cache writes to (store/store.c): a hash
	 * of its identity (kind, roots or endpoints, key prefix, layout tag) and its
	 * text for the error of a store that brings another.  The first store
	 * writes the text, then publishes the hash by CAS from 0 (release); the
	 * others read the hash (acquire) and then the text.  0: none bound yet. */
	_Atomic uint64_t backend_hash;
	_Atomic uint64_t backend_id[KVS_SHM_BACKEND_ID_MAX / 8]; /* the text, 8 bytes a word
								 (relaxed: checked against the hash) */
};

struct kvs_shm_rank {
	_Atomic uint32_t state;   /* enum kvs_shm_rank_state; lifecycle lock */
	_Atomic uint32_t epoch;   /* bumped at every attach of this entry */
	int32_t pid;              /* informational only (never used for liveness) */
	int32_t device_id;        /* -1 = watcher */
	/* Bumped (kvs_wait_bump) when a block write or drop ends (every attached
	 * rank's: its durable dumps may wait on that block), and by a rank that
	 * completes a block whose designated writer this rank is: the rank's copier
	 * sleeps on it (wait/ protocol). */
	_Atomic uint32_t bell;
	/* The copy engine of the rank's store (KVS_COPY_ENGINE_HOST: CPU-only, or
	 * _CUDA; 0: none yet, or no store): zeroed by the attach before it
	 * publishes ATTACHED, then set once by the rank's store open.  Relaxed both
	 * ways: a description for kvs_cache_rank_info and inspect, ordering nothing. */
	_Atomic uint32_t copy_engine;
	uint64_t pad[5];
	struct kvs_shm_stats stats;     /* cumulative over the entry's attaches */
	struct kvs_shm_stats base;      /* stats as they were at the current attach (written
					   by the attacher before it publishes ATTACHED) */
	/* One entry per pinned slot: slot index + 1, | KVS_PIN_OWNER for the pin
	 * that owns the fill; 0 = free entry.  Written under the slot's bucket
	 * lock (before ref++ / after ref--); read by repair and the reaper under
	 * that same lock. */
	alignas(KVS_CACHE_LINE) _Atomic uint32_t pins[KVS_RANK_PINS];
};

struct kvs_shm_bucket {
	alignas(KVS_CACHE_LINE) pthread_mutex_t lock;     /* robust, process-shared */
	_Atomic uint32_t head;    /* first slot of the chain, KVS_IDX_NONE if empty */
	_Atomic uint32_t holder;  /* rank index + 1 of the holder (diagnostics) */
};

struct kvs_shm_slot {
	/* The key, valid unless the state is EMPTY: a block id's 16 bytes as two
	 * words (core/core.h: kvs_core_key_*) and the shard.  Written under the
	 * bucket lock, read by a lock-free pin too (relaxed: rechecked). */
	_Atomic uint64_t key[2];
	_Atomic uint32_t shard;
	_Atomic uint32_t ref;            /* == locked pin entries naming this slot */
	_Atomic uint32_t bucket_idx;     /* the chain this slot is on: the truth */
	_Atomic uint32_t next;           /* chain link (cache of bucket_idx) */
	_Atomic uint32_t generation;     /* bumped at every re-key */
	_Atomic int32_t error;           /* FAILED code; stored before the publish */
	_Atomic uint64_t filler;         /* rank index << 32 | rank epoch of the owner,
					  * KVS_FILLER_NONE when nobody fills it */
	/* DIRTY: until when it is kept even if its block never completes
	 * (CLOCK_MONOTONIC; the latest deadline, plus a grace, of the dumps that
	 * made or found it DIRTY); 0 otherwise.  Under the bucket lock. */
	_Atomic uint64_t dirty_until_ns;
	/* Lock-free pins and the evictor (core/pin.c, "Lock-free pins"; model/
	 * pin.pml): bit r, rank entry r holds some; KVS_READERS_EV, an evictor or
	 * a reloading owner, holding the bucket lock, owns the slot's bytes. */
	_Atomic uint64_t readers;
};

/* One block being written or dropped, or just stored (core/claim.c).  Found by
 * block id on a hash chain of the claim table; indices only; every field
 * under claims_lock (state also read lock-free: a hint). */
struct kvs_shm_claim {
	struct kvs_block_id block;       /* key (state != FREE) */
	_Atomic uint64_t gen;            /* bumped whenever a holder takes it */
	_Atomic uint32_t state;          /* enum kvs_shm_claim_state */
	_Atomic int32_t error;           /* WRITING: the last failed attempt's error, 0 */
	_Atomic uint64_t holder;         /* WRITING, DROPPING: rank index << 32 | epoch */
	_Atomic uint64_t expires_ns;     /* STORED: the end of its proof (CLOCK_MONOTONIC) */
	uint32_t next;                   /* chain link, or free list link */
	uint32_t pad32;
	uint64_t pad;
};

/* The layout table, checked. */
_Static_assert(sizeof(struct kvs_shm_header) <= KVS_SHM_HEADER_BYTES, "header fits its region");
_Static_assert(offsetof(struct kvs_shm_header, magic) == 0, "magic first");
_Static_assert(offsetof(struct kvs_shm_header, layout_version) == 8, "version at 8");
_Static_assert(sizeof(struct kvs_shm_rank) == 17600, "rank entry size (table row)");
_Static_assert(sizeof(struct kvs_shm_rank) % KVS_CACHE_LINE == 0, "rank entries line-aligned");
_Static_assert(offsetof(struct kvs_shm_rank, pins) % KVS_CACHE_LINE == 0, "pins line-aligned");
_Static_assert(sizeof(struct kvs_shm_bucket) == KVS_CACHE_LINE, "bucket is one line");
_Static_assert(sizeof(struct kvs_shm_slot) == KVS_CACHE_LINE, "slot meta is one line");
_Static_assert(sizeof(struct kvs_shm_claim) == KVS_CACHE_LINE, "a claim is one line");
_Static_assert((KVS_CLAIMS_MAX & (KVS_CLAIMS_MAX - 1)) == 0 &&
	       (KVS_CLAIMS_MIN & (KVS_CLAIMS_MIN - 1)) == 0, "claim counts are powers of two");
_Static_assert(sizeof(struct kvs_shm_seg) % KVS_CACHE_LINE == 0, "segment hands line-aligned");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "state word is 32 bits (futex)");
_Static_assert(sizeof(_Atomic uint8_t) == 1, "refbits are bytes");
_Static_assert(KVS_CLOCK_WEIGHT_MAX >= 1 && KVS_CLOCK_WEIGHT_MAX < 255, "a CLOCK weight fits its byte");
_Static_assert(KVS_MAX_RANKS < KVS_SHM_PAGE, "rank lock bytes below the lifecycle byte");
_Static_assert((int)KVS_SHM_SLOT_EMPTY == (int)KVS_SLOT_EMPTY &&
	       (int)KVS_SHM_SLOT_LOADING == (int)KVS_SLOT_LOADING &&
	       (int)KVS_SHM_SLOT_READY == (int)KVS_SLOT_READY &&
	       (int)KVS_SHM_SLOT_FAILED == (int)KVS_SLOT_FAILED,
	       "public slot states are the shared state word's values");
_Static_assert(KVS_MAX_RANKS * KVS_RANK_PINS < UINT32_MAX, "pin counts fit a ref");
_Static_assert(KVS_MAX_SLOTS <= KVS_PIN_SLOT_MASK, "every slot index + 1 fits a pin");
_Static_assert(KVS_READER_RANKS <= 63, "reader bits below KVS_READERS_EV");
_Static_assert(offsetof(struct kvs_shm_slot, key) == 0, "key words aligned");

/* OFD lock bytes of the control file: byte i = rank entry i's liveness; the
 * lifecycle byte serialises create/attach/detach/adopt/reap/remove. */
#define KVS_LOCK_LIFECYCLE_BYTE ((off_t)KVS_SHM_PAGE - 1)

#endif
