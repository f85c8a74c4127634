/*
 * store/store.h — the store's private interface between its files (and to its
 * tests).  The store (kvs_store_*) is its own CMake target (kvs_store_<variant>)
 * on top of the shared cache: it uses common/, wait/, core/ and io/; none of
 * them includes this header.
 *
 *   config.c    kvs_store_config_init, resolution of the derived sizes and
 *               validation (each error names its key); parse.c the key=value
 *               parser
 *   store.c     open (in the order that fails before the data plane exists),
 *               kvs_store_config_check, the log gate, the bounded close
 *   task.c      tasks (submit, check, wait), each shard's end, the hand-offs
 *               between the threads
 *   query.c     lookups, stats, the store's cache and copy engine
 *   dispatch.c  the dispatcher thread: visits (gets) across tasks, backend
 *               reads and writes, publish at completion, prealloc; it sleeps
 *               on the backend's wait descriptor and its own eventfd
 *   copy.c      the copier thread: waits for slots (futex wait-for-any),
 *               H2D scatter, D2H gather, syncs in batches; staged copies of
 *               slots not registered yet
 *   dump.c      the dump protocol on the copier's side: the DIRTY record,
 *               looks, durable waits, the sweep, the flush's bookkeeping
 *               (dump.h: what it shares with write.c)
 *   write.c     a block's write or drop under its claim
 *   register.c  the registration thread: the data plane registered with the
 *               copy engine in chunks, in the background; readiness
 */
#ifndef KVS_STORE_STORE_H
#define KVS_STORE_STORE_H

#include <stdint.h>

#include "common/log.h"
#include "kvshare.h"

/* Defaults of kvs_store_config_init. */
#define KVS_STORE_TIMEOUT_NS_DEFAULT (10ull * 1000000000ull)
#define KVS_STORE_WAITING_QD_DEFAULT 64u
#define KVS_STORE_WAITING_QD_MAX 4096u
#define KVS_STORE_RUNNING_QD_DEFAULT 256u
#define KVS_STORE_RUNNING_QD_MAX 65536u
/* Most owned reads a rank has in flight, whatever the backend's queue depth:
 * each holds a place of the copier's working set (store/copy.c, WORK_MAX: 125)
 * until it completes, so three quarters of it at most, and a dump or a hit
 * queued behind a burst of slow reads still finds room (before: the backend's
 * default 128 filled all 125, and a cached dump waited for a wave of reads:
 * 217 ms behind 100 ms reads).  Half of it cost a 512-shard load of such
 * reads 1.6x its time; three quarters, 1.1x. */
#define KVS_STORE_OWNED_READS_MAX 93u
#define KVS_STORE_STREAMS_MAX 16u
/* Registration chunks (register_chunk_size): a few GiB by default, always far
 * below the single-registration sizes cudaHostRegister is reported to refuse
 * (512 GiB and more; vLLM keeps chunks under 64 GiB). */
#define KVS_STORE_REGISTER_CHUNK_DEFAULT (4ull << 30)
#define KVS_STORE_REGISTER_CHUNK_MIN (1ull << 20)
#define KVS_STORE_REGISTER_CHUNK_MAX (32ull << 30)
/* The staging buffer for copies of slots not registered yet: a shard larger
 * than this goes through it in pieces. */
#define KVS_STORE_STAGING_MAX (8ull << 20)
/* The longest the copier (and the open's look for a dead rank's blocks) waits
 * for one shared lock before it parks what needed it and goes on with other
 * work (store/dump.c): a peer stopped inside a critical section costs this per
 * attempt, never the cache's lock_timeout_ns. */
#define KVS_STORE_LOCK_WAIT_NS (2ull * 1000000ull)
/* The shard size kvs_store_config_check opens the backend with when the
 * configuration has no geometry yet (the backend's own default). */
#define KVS_STORE_CHECK_SHARD_BYTES (1ull << 20)
/* A backend that is down fails every transfer: its error lines (a write's,
 * a retry's, a block given up) pass at most once per this, per kind, each
 * saying how many it stands for; the store's counters (write_errors,
 * read_errors) count every one, at submit as at completion, each within its
 * attempt counter (backend_writes, owner_reads). */
#define KVS_STORE_LOG_INTERVAL_NS (10ull * 1000000000ull)
/* What could not take a shared lock within that tries again after a backoff
 * doubling from the first to the last (kvs_store_backoff). */
#define KVS_STORE_LOCK_RETRY_MIN_NS (2ull * 1000000ull)
#define KVS_STORE_LOCK_RETRY_MAX_NS (100ull * 1000000ull)

/* A doubling backoff (a failing poll, a lock not had, a failed block write):
 * each failure waits twice the last, from a least to a most; a success resets
 * it (step_ns 0). */
struct kvs_store_backoff {
	uint64_t step_ns; /* the last wait, 0: none since the last success */
};

/* The wait after one more failure. */
static inline uint64_t kvs_store_backoff_next(struct kvs_store_backoff *b, uint64_t min_ns,
					      uint64_t max_ns)
{
	b->step_ns = b->step_ns ? 2 * b->step_ns : min_ns;
	if (b->step_ns > max_ns)
		b->step_ns = max_ns;
	return b->step_ns;
}

/*
 * Resolve and validate a store config into *out (a copy of cfg):
 *  - capacity_bytes / block_bytes / tensor_bytes set cache.slot_count /
 *    cache.shards_per_block / cache.tensor_count + tensor_bytes[] (each must
 *    divide evenly; a field set both ways must agree);
 *  - backend.shard_bytes and backend.shards_per_block take the cache's values
 *    (also in a fault backend's inner config, which out then points at: out
 *    must not move after this call);
 *  - backend_roots is split into backend.roots[] (pointing into out) when
 *    backend.nroots is 0 and the backend is posix;
 *  - share_buffer = 0 suffixes cache.unique_id with ".rank<device_id>" and sets
 *    local_rank_size 1;
 *  - log is copied into cache.log / backend.log where those are NULL;
 *  - every store field is range-checked, reserved[] must be zero.
 * The cache and backend fields are validated by their own open calls.
 * Returns 0 or -EINVAL (logged naming the key).
 */
int kvs_store_config_resolve(const struct kvs_store_config *cfg, struct kvs_store_config *out,
			     struct kvs_backend_config *fault_inner, const struct kvs_log *log);


/* ---- what the store's files share ---- */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "core/core.h"
#include "io/copy.h"

enum kvs_store_op {
	KVS_STORE_OP_LOAD = 0,
	KVS_STORE_OP_DUMP = 1,
	KVS_STORE_OP_PREFETCH = 2,
};

/* kvs_store_sh.flags */
#define KVS_SH_GOT (1u << 0)    /* a slot is pinned (sh->slot) */
#define KVS_SH_OWNED (1u << 1)  /* this rank fills it: backend read (load) or gather (dump) */
#define KVS_SH_SLOWGET (1u << 2) /* the dispatcher's trylock found the bucket busy: the
				   copier gets it (it may block) */
#define KVS_SH_HELD (1u << 3)  /* dump: its slot is DIRTY for this dump (published, or
				   found DIRTY and its protection extended) */
#define KVS_SH_WAITING (1u << 4) /* dump: acknowledged to the block's record, waits for it
				    to be in the backend (durable; sh->dirty names its slot) */
#define KVS_SH_HASHED (1u << 5) /* sh->hash is its key's kvs_core_hash */

/* kvs_store_xfer.result while the transfer is queued or in flight. */
#define KVS_XFER_PENDING 1

enum kvs_store_xfer_op {
	KVS_XFER_READ = 0,  /* an owned load shard's read (owner: the kvs_store_sh) */
	KVS_XFER_WRITE = 1, /* one shard of a block write (owner: the kvs_store_job) */
};

/* One backend transfer; its address is the backend token. */
struct kvs_store_xfer {
	struct kvs_store_xfer *next;   /* dispatcher's read or write queue */
	uint32_t op;                   /* enum kvs_store_xfer_op */
	uint32_t shard;
	struct kvs_block_id block;
	void *buf;
	void *owner;                   /* kvs_store_sh (read) or kvs_store_job (write) */
	/* KVS_XFER_PENDING, then 0 or -errno: stored by the dispatcher before it
	 * publishes the slot and drops its pin reference (reads: the copier reads
	 * it once that reference is gone). */
	_Atomic int32_t result;
};

struct kvs_store_task;

/* One shard of a task: private memory, inside its task's allocation. */
struct kvs_store_sh {
	struct kvs_store_task *task;
	struct kvs_block_id block;
	uint32_t shard;
	uint32_t flags;                /* KVS_SH_* */
	uint64_t hash;                 /* KVS_SH_HASHED: computed once for its prefetches and
					  gets (store/dispatch.c, sh_hash) */
	const struct kvs_copy_seg *segs; /* nseg tensor copies (host_off within the slot) */
	uint32_t nseg;
	int32_t err;                   /* the visit's failure, before the copier sees it */
	struct kvs_slot slot;
	void *data;                    /* the slot's bytes in this process */
	struct kvs_store_xfer rd;      /* its owned read (loads, prefetches) */
	struct kvs_dirty_shard dirty;  /* dump: its DIRTY slot (a durable wait holds no pin) */
	/* Holders of the pin: the copier, plus the dispatcher while the read is
	 * queued or in flight.  The last to drop it releases the slot (acq_rel: the
	 * other holder's use of the slot happens before the release). */
	_Atomic uint32_t refs;
	/* The task counted this shard done (once: exchange, acq_rel). */
	_Atomic uint32_t finished;
	struct kvs_store_sh *next;     /* the list it is on (ring hand-off, copier lists,
					  re-visits) */
};

struct kvs_store_task {
	uint64_t id;
	uint32_t op;                   /* enum kvs_store_op */
	uint32_t n;
	uint64_t submit_ns, deadline_ns;
	void *event;                   /* dump: the caller's CUDA event, or NULL */
	_Atomic int32_t error;         /* first error (CAS from 0) */
	_Atomic uint32_t pending;      /* shards not yet finished */
	_Atomic uint32_t live;         /* shards not yet released + 1 until reaped */
	bool done;                     /* under the store's mu */
	uint32_t visited;              /* dispatcher: shards visited so far (order[] index) */
	uint32_t deferred;             /* dispatcher: its shards on the deferred list */
	bool in_sequence;              /* kvs_store_load_tensors: visited after the one before */
	bool event_waited;             /* copier: wait_event done */
	bool filler_named;             /* copier: a peer's slot timed out, its filler logged */
	uint32_t *order;               /* visiting order (visiting_order) */
	struct kvs_store_task *next;   /* the dispatcher's list of tasks being visited */
	struct kvs_store_sh sh[];
};

/* A block this rank writes as its claim's holder (store/dump.c builds it, the
 * dispatcher writes it): one write per shard, from the block's DIRTY slots --
 * no pin, since nothing evicts or drops a DIRTY slot while the claim is ours.
 * A write has no deadline: the dumps of the block may have been acknowledged
 * (dump_wait=cached), so an attempt that fails is retried (store/dump.c
 * decides, with a backoff) until the block is stored or given up. */
struct kvs_store_job {
	struct kvs_claim_ref claim;
	struct kvs_block_id block;
	uint32_t n;                    /* shards (the cache's shards per block) */
	uint32_t next_submit;          /* dispatcher: shards handed to the backend */
	uint32_t inflight;             /* dispatcher: writes not yet completed */
	bool queued;                   /* dispatcher: on its write queue (shards to submit) */
	int32_t err;                   /* this attempt's first failed write */
	uint32_t attempts;             /* copier: attempts that failed so far */
	uint32_t cleaned;              /* copier: shards cleaned (DIRTY -> READY) after it */
	uint64_t first_fail_ns;        /* copier: when the first attempt failed */
	struct kvs_store_backoff backoff; /* copier: the wait before the next attempt */
	uint64_t retry_ns;             /* dispatcher: not submitted before (a retry's backoff) */
	struct kvs_store_job *next;    /* the dispatcher's queues, then the copier's */
	struct kvs_dirty_shard *shards; /* n slots (inside the job's allocation) */
	struct kvs_store_xfer xf[];    /* n writes */
};

/* The dispatcher's memory of preallocated keys. */
#define KVS_STORE_PREALLOC_RECENT 16u

/* One of the caller's log callbacks, behind the store's gate (store/store.c). */
struct kvs_store_log_gate {
	struct kvs_store *s;
	kvs_log_fn fn;
	void *arg;
};

enum { KVS_STORE_LOG_STORE, KVS_STORE_LOG_CACHE, KVS_STORE_LOG_BACKEND,
       KVS_STORE_LOG_INNER, KVS_STORE_LOG_GATES };

struct kvs_store {
	struct kvs_store_config cfg;   /* resolved (backend.roots point into it) */
	struct kvs_backend_config fault_inner;
	struct kvs_log log;
	/* Every log callback the store, its cache and its backends call goes
	 * through a gate: a close that returns with a transfer still in flight
	 * shuts it (log_muted, taken for writing: no call is in progress once it
	 * returns), so a thread that outlives close never calls code the caller
	 * may have unloaded since. */
	struct kvs_store_log_gate log_gates[KVS_STORE_LOG_GATES];
	pthread_rwlock_t log_lock;
	bool log_muted;                /* under log_lock */
	struct kvs_cache *cache;
	struct kvs_backend *backend;
	struct kvs_copy_engine *copy;
	struct kvs_shm_store_stats *st; /* this rank's counters in shared memory */
	struct kvs_store_dumps *dumps0; /* the copier's dump state, made by the open and the
					 * copier's from its start (NULL: none) */
	pid_t opener;                  /* the process that opened the store (fork) */
	uint32_t spb;                  /* shards per block */
	uint32_t copy_kind;            /* the engine copy_open chose: KVS_COPY_ENGINE_HOST/_CUDA */
	bool block_atomic;             /* the backend's blocks are atomic
					  (KVS_BACKEND_INFO_BLOCK_ATOMIC): a READY shard
					  proves its block stored */
	uint64_t slot_bytes;
	uint32_t rank_slice;           /* device_id % local_rank_size */
	uint32_t lrs;                  /* local_rank_size */
	uint32_t tensor_count;
	uint64_t tensor_bytes[KVS_MAX_TENSORS];
	uint64_t tensor_off[KVS_MAX_TENSORS];
	bool threads;
	/* Pins this store's tasks hold (every visit's get +1, every release -1;
	 * relaxed: a budget, not a synchronisation), and the most the dispatcher
	 * keeps (a share of the cache no set of ranks can exhaust, within the pin
	 * table).  Block writes hold no pin (store/dump.c): they never hold up a
	 * visit. */
	_Atomic uint32_t pins;
	uint32_t pin_budget;

	/* Registration of the data plane with the copy engine (store/register.c). */
	pthread_t reg_thr;
	bool reg_started;
	uint32_t reg_order[KVS_MAX_SEGS]; /* data segments, the rank's node's first */
	uint64_t reg_chunk[KVS_MAX_SEGS]; /* chunk size of each segment */
	/* Bytes of segment i registered, from its start (a prefix: chunks go in
	 * order).  Stored (release) by the registration thread after the engine's
	 * register call returned; loaded (acquire) by the copier before it copies a
	 * slot directly, and by close to know what to unregister. */
	_Atomic uint64_t reg_end[KVS_MAX_SEGS];
	/* 1 once every segment is registered (release, after the last reg_end):
	 * the copier's fast path (acquire). */
	_Atomic uint32_t reg_ready;
	bool reg_done;                 /* under mu: the registration thread finished */
	int reg_err;                   /* under mu: why it stopped early (0: it did not) */
	pthread_cond_t reg_cv;         /* kvs_store_ready: reg_done */
	void *staging;                 /* copier: pinned bounce buffer (kvs_copy_host_alloc) */
	uint64_t staging_bytes;

	/* Releases the copier could not make yet (a bucket held by a peer): copier
	 * only. */
	struct kvs_slot *rel_later;
	uint32_t nrel_later, rel_later_cap;
	uint32_t released;             /* task pins released, not yet out of pins */

	/* Everything below is guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t copier_cv;      /* copier: a hand-off, stop (when it sleeps on no
					  shared word) */
	pthread_cond_t done_cv;        /* kvs_store_wait: a task finished; close: threads gone */
	bool stop;
	bool orphaned;                 /* close returned before the threads drained: the
					  last thread out tears the store down */
	uint32_t threads_alive;        /* dispatcher and copier not yet exited */
	uint32_t active;               /* tasks submitted and not finished */
	uint32_t outstanding;          /* tasks not yet reaped */
	uint64_t seq;
	struct kvs_store_task **tasks; /* waiting_queue_depth entries */
	struct kvs_store_task *q_head, *q_tail; /* submitted, not yet taken */
	/* copier -> dispatcher: reads to issue (takeovers, slow gets), shards to
	 * visit again, block writes; dispatcher -> copier: visited shards (the
	 * ring), finished block writes.  Lists are LIFO pushes, taken whole. */
	struct kvs_store_sh *reads_in, *revisit_in;
	struct kvs_store_sh *release_in; /* dispatcher -> copier: pins to drop (a read
					    that outlived its shard's copier) */
	struct kvs_store_job *jobs_in, *jobs_done;
	bool disp_exited;              /* the dispatcher has left (the copier finishes last) */
	bool copier_idle;              /* stopping, the copier has no dump work left: it hands
					  the dispatcher no more block writes */
	struct kvs_store_sh **ring;    /* dispatcher -> copier, in visiting order */
	uint32_t ring_cap, ring_head, ring_count;
	struct kvs_store_sh **visits;  /* not under mu: the dispatcher's batch of visits
					  for the ring (ring_cap entries) */
	struct kvs_copy_vec *copy_vec; /* not under mu: the copier's pass of copies
					  (2 x KVS_COPY_VEC_MAX: d2h, then h2d) */
	bool disp_blocked;             /* the dispatcher waits for ring room or pins */
	/* kvs_store_flush: callers waiting (the copier writes without graces
	 * meanwhile) and a count of the calls (each has the copier look at every
	 * block still to write once), the blocks this rank acknowledged (cached
	 * dumps) not yet in the backend, the first of them dropped since the last
	 * report (its error), and the condition the copier broadcasts when those
	 * change. */
	uint32_t flushing;
	uint64_t flush_gen;
	uint64_t unflushed;
	int flush_err;
	pthread_cond_t flush_cv;
	int wake_fd;                   /* eventfd: the dispatcher's wake (submit, hand-offs,
					  room, stop) */
	/* Bumped (kvs_wait_bump) at every hand-off to the copier, so a copier asleep
	 * on slot words (kvs_wait_any) wakes too. */
	_Atomic uint32_t copier_bell;
	/* 1 while the copier is in, or on its way into, its wait on copier_cv:
	 * written by the copier under mu, read by wakers without it (task.c,
	 * kvs_store_wake_copier), so that a hand-off to a copier that is up costs
	 * no lock and no signal. */
	_Atomic uint32_t copier_on_cv;
	pthread_t disp_thr, copier_thr;
};

/* Count in this rank's store stats.  relaxed: statistics summed racily by readers. */
#define KVS_STORE_COUNT(s, field, n) \
	atomic_fetch_add_explicit(&(s)->st->field, (uint64_t)(n), memory_order_relaxed)
/* Count a failure (tasks_failed, tasks_timedout, read_errors, write_errors),
 * always after the attempt it fails was counted (tasks_*, owner_reads,
 * backend_writes; tasks_failed before tasks_timedout).  release: pairs with
 * the acquire loads of kvs_store_stats, which reads the failures first, so the
 * attempts it reads next include this one's: failures <= attempts in every
 * snapshot (an error ratio never divides by less than its errors). */
#define KVS_STORE_COUNT_FAILURE(s, field) \
	atomic_fetch_add_explicit(&(s)->st->field, 1, memory_order_release)

/* Bytes of the ERROR lines kept for kvs_store_last_error. */
#define KVS_STORE_ERRORS_MAX 4096

/* Limits the parser (store/parse.c) and resolution (store/config.c) share. */
#define KVS_STORE_NS_PER_US UINT64_C(1000)
#define KVS_STORE_NS_PER_MS UINT64_C(1000000)
#define KVS_STORE_TIMEOUT_MS_MAX UINT64_C(86400000) /* a day */
#define KVS_STORE_COPY_DELAY_US_MAX UINT64_C(1000000) /* a second */
#define KVS_STORE_SHARDS_MAX 65536u /* kvs_backend_config.shards_per_block */

/* ---- store/task.c: shards, tasks, the hand-offs ---- */
/* Make err (if non-zero) the task's error unless it has one. */
void kvs_store_sh_error(struct kvs_store_sh *sh, int err);
/* Count the shard done for its task with err (once; the last one completes the
 * task).  The pin may outlive it (a read still in flight). */
void kvs_store_sh_done(struct kvs_store *s, struct kvs_store_sh *sh, int err);
/* Drop one holder's reference; the last releases the slot (if pinned), counts
 * the shard done (if not yet: with no error of its own) and drops its task
 * reference.  Returns whether it was the last. */
bool kvs_store_sh_put(struct kvs_store *s, struct kvs_store_sh *sh);
/* Finish sh with err and drop the caller's reference: released before done
 * when it was the last, done now (the pin left to the other holder) when not. */
void kvs_store_sh_finish(struct kvs_store *s, struct kvs_store_sh *sh, int err);
/* Release a task's pin (out of the budget at the next
 * kvs_store_release_flush); errors logged.  A bucket
 * lock not had within the copier's short wait keeps the release for
 * kvs_store_release_retry.  The copier's only: no other thread drops a pin
 * (the dispatcher hands its last holds over, kvs_store_handoff_release). */
void kvs_store_release(struct kvs_store *s, struct kvs_slot *slot);
/* Copier: take the task pins released since the last flush out of the budget,
 * and wake the dispatcher if it waits for room: once per pass, not per pin. */
void kvs_store_release_flush(struct kvs_store *s);
/* Copier: try the kept releases again.  Returns whether any was made; the ones
 * left are s->nrel_later. */
bool kvs_store_release_retry(struct kvs_store *s);
/* Wake the dispatcher (its eventfd). */
void kvs_store_wake_dispatcher(struct kvs_store *s);
/* Wake the copier: its bell (futex sleepers) and its condition (mu held or not). */
void kvs_store_wake_copier(struct kvs_store *s);
/* Copier -> dispatcher hand-offs (mu taken inside). */
void kvs_store_handoff_read(struct kvs_store *s, struct kvs_store_sh *sh);
void kvs_store_handoff_revisit(struct kvs_store *s, struct kvs_store_sh *sh);
void kvs_store_handoff_job(struct kvs_store *s, struct kvs_store_job *job);
/* Dispatcher -> copier hand-offs (mu taken inside; the copier woken). */
void kvs_store_handoff_release(struct kvs_store *s, struct kvs_store_sh *sh);
void kvs_store_handoff_job_done(struct kvs_store *s, struct kvs_store_job *job);
/* Drop a reference to task t: the last one frees it. */
void kvs_store_task_unref(struct kvs_store_task *t);

/* ---- store/store.c ---- */
/* A thread is leaving: the last one out of an orphaned store tears it down. */
void kvs_store_thread_exit(struct kvs_store *s);

/* ---- store/dispatch.c, store/copy.c: the threads ---- */
void *kvs_store_dispatcher(void *arg);
void *kvs_store_copier(void *arg);
/* Pin shard sh's slot and say what to do with it (the visit): flags
 * KVS_CORE_GET_TRY from the dispatcher (-EBUSY: the copier gets it), none from
 * the copier.  Loads and prefetches that own the slot get their read queued
 * through queue_read (the dispatcher's own queue, or a hand-off).  Returns 0
 * (pinned, sh->flags say how: the caller adds the pin to s->pins) or the
 * get's error. */
int kvs_store_visit_get(struct kvs_store *s, struct kvs_store_sh *sh, uint32_t flags,
			void (*queue_read)(struct kvs_store *s, struct kvs_store_sh *sh, void *arg),
			void *arg);
/* Is sh, just pinned by kvs_store_visit_get, a load's hit (READY or DIRTY, not
 * owned)?  The caller counts it (load_hits), as it counts the pin (pins). */
bool kvs_store_sh_hit(const struct kvs_store_sh *sh);
/* sh (a load or prefetch) owns its slot: its read, with the dispatcher's
 * reference to the pin, goes to queue_read. */
void kvs_store_read_owned(struct kvs_store *s, struct kvs_store_sh *sh,
			  void (*queue_read)(struct kvs_store *s, struct kvs_store_sh *sh, void *arg),
			  void *arg);

/* ---- store/dump.c: the dump protocol on the copier's side ---- */
struct kvs_store_dumps;
int kvs_store_dumps_init(struct kvs_store *s, struct kvs_store_dumps **out);
void kvs_store_dumps_fini(struct kvs_store *s, struct kvs_store_dumps *d);
/* A dump shard whose slot holds valid bytes now: gathered and synced by us
 * (owned: publish it DIRTY), or found DIRTY (its protection extended), or
 * READY over a backend whose blocks are not atomic (DIRTY again).  It joins its
 * block's record: finished (cached) or waiting for the block to be in the
 * backend (durable); its pin released; the block looked at (complete: written,
 * by its designated writer or by this rank). */
void kvs_store_dump_settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh,
			   bool owned);
/* A dump shard found READY over a backend whose blocks are atomic: its block is
 * in the backend (a STORED record of it kept a grace); the shard is finished. */
void kvs_store_dump_found(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh);
/* Everything the protocol has to look at: durable waits, blocks to look at,
 * designated writers' graces, the node's sweep when it is this rank's turn
 * (after a bell, a finished job, or with check set once per slice).  Returns
 * whether anything changed. */
bool kvs_store_dumps_poll(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now, bool check);
/* (store/write.c) A block write's attempt the dispatcher finished: clean its
 * slots and end its claim, or try again, or give up. */
void kvs_store_job_finish(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job);
/* Anything waiting on other processes (a drop or write of a peer, room in the
 * claim table, a peer completing a block this rank writes)?  The words to sleep
 * on, up to max: returns how many were added; *deadline lowered to the next
 * time something is due. */
unsigned kvs_store_dumps_words(struct kvs_store *s, struct kvs_store_dumps *d,
			       _Atomic uint32_t **words, uint32_t *busy, unsigned max,
			       uint64_t *deadline);
/* The store closes and its tasks are done: the node's DIRTY slots are swept now
 * (not at the node's turn) and every complete block among them is written (by
 * its designated writer if that one lives, else by this rank). */
void kvs_store_dumps_close(struct kvs_store *s, struct kvs_store_dumps *d);
/* Durable waits, writes of ours not finished, blocks to look at, work waiting
 * for a lock, or (closing) a sweep not done: the copier may not exit. */
bool kvs_store_dumps_busy(const struct kvs_store_dumps *d);

/* ---- store/register.c ---- */
/* Plan the registration (order, chunk sizes, register_total_bytes), allocate
 * the staging buffer and start the registration thread.  0 or -errno. */
int kvs_store_register_start(struct kvs_store *s);
/* Join the registration thread (s->stop is set: it ends after its current
 * chunk); again is a no-op. */
void kvs_store_register_join(struct kvs_store *s);
/* kvs_store_register_join, then unregister every chunk it registered; free the
 * staging buffer. */
void kvs_store_register_stop(struct kvs_store *s);
/* Is sh's slot inside registered memory (copy it directly)? */
bool kvs_store_slot_registered(struct kvs_store *s, const struct kvs_store_sh *sh);

/* Test hook (static library only): called by the registration thread before
 * each chunk; a test blocks in it to hold registration at a known point, or
 * returns an error to have the chunk refused as the engine would (0: go on). */
extern int (*kvs_store_test_register_hook)(struct kvs_store *s, uint32_t seg, uint64_t off,
					   uint64_t len);

#endif
