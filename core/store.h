/*
 * core/store.h — the store's private interface between its files (and to its
 * tests).  The store (kvs_store_*) is its own CMake target (kvs_store_<variant>)
 * on top of the shared cache: it uses core/, io/ and wait/; the cache files never
 * include this header.
 *
 *   store_config.c  kvs_store_config_init, the key=value parser, resolution of
 *                   the derived sizes and validation (each error names its key)
 *   store.c         open/close, tasks (submit, check, wait), lookups, stats
 *   store_dispatch.c the dispatcher thread: rotated visiting order, gets, backend
 *                   reads and writes, publish at completion, prealloc
 *   store_copy.c    the copier thread: wait-for-any over slot words, H2D scatter,
 *                   D2H gather, one sync per task; staged copies of slots not
 *                   registered yet
 *   store_register.c the registration thread: the data plane registered with the
 *                   copy engine in chunks, in the background; readiness
 */
#ifndef KVS_CORE_STORE_H
#define KVS_CORE_STORE_H

#include <stdint.h>

#include "common/log.h"
#include "kvshare.h"

/* Defaults of kvs_store_config_init. */
#define KVS_STORE_TIMEOUT_NS_DEFAULT (10ull * 1000000000ull)
#define KVS_STORE_WAITING_QD_DEFAULT 64u
#define KVS_STORE_WAITING_QD_MAX 4096u
#define KVS_STORE_RUNNING_QD_DEFAULT 256u
#define KVS_STORE_RUNNING_QD_MAX 65536u
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


/* ---- what store.c, store_dispatch.c and store_copy.c share ---- */
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

/* kvs_store_sh.flags, set by the dispatcher before it hands the shard to the
 * copier (the ring's mutex orders them), later only by the copier (takeover). */
#define KVS_SH_GOT (1u << 0)   /* a slot is pinned (sh->slot) */
#define KVS_SH_OWNED (1u << 1) /* this rank fills it: backend read (load) or gather (dump) */
#define KVS_SH_WRITE (1u << 2) /* dump: this rank writes it to the backend (block writer) */

/* kvs_store_sh.io_result while the owner's read is in flight. */
#define KVS_SH_IO_PENDING 1

/* Backend transfer queued by kvs_store_sh.io_op. */
enum kvs_sh_io {
	KVS_SH_IO_READ = 0,
	KVS_SH_IO_WRITE = 1,
};

struct kvs_store_task;

/* One shard of a task: private memory, inside its task's allocation. */
struct kvs_store_sh {
	struct kvs_store_task *task;
	struct kvs_block_id block;
	uint32_t shard;
	uint32_t flags;                /* KVS_SH_* */
	const struct kvs_copy_seg *segs; /* nseg tensor copies (host_off within the slot) */
	uint32_t nseg;
	int32_t err;                   /* the dispatcher's failure before the copier (get) */
	struct kvs_slot slot;
	void *data;                    /* the slot's bytes in this process */
	/* The owner's backend read: KVS_SH_IO_PENDING, then 0 or -errno.  Stored
	 * (release) by the dispatcher before it publishes the slot; the copier
	 * loads it (acquire) after the slot word changed. */
	_Atomic int32_t io_result;
	/* Holders of the pin: the copier, plus the dispatcher while a transfer is in
	 * flight or queued.  The last to drop it releases the slot (acq_rel: the
	 * other holder's use of the slot happens before the release). */
	_Atomic uint32_t refs;
	/* The task counted this shard done (once: exchange, acq_rel). */
	_Atomic uint32_t finished;
	uint32_t io_op;                /* enum kvs_sh_io (dispatcher) */
	struct kvs_store_sh *io_next;  /* dispatcher's submit queue / copier's hand-off list */
	bool resolved;                 /* copier: nothing more to wait for */
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
	uint32_t visited;              /* dispatcher: shards got so far (order[] index) */
	uint32_t copier_left;          /* copier: shards not yet resolved */
	bool copied;                   /* copier: copies queued, the task end syncs */
	bool event_waited;             /* copier: wait_event done */
	bool filler_named;             /* copier: a peer's slot timed out, its filler logged */
	uint32_t *order;               /* visiting order (dispatch_order) */
	struct kvs_store_task *next;   /* dispatcher's queue */
	struct kvs_store_sh sh[];
};

/* The dispatcher's memory of preallocated keys and of blocks it writes. */
#define KVS_STORE_PREALLOC_RECENT 16u
#define KVS_STORE_CLAIMS_MAX 1024u

struct kvs_store_claim {
	struct kvs_block_id block;
	uint32_t written;              /* shards submitted for writing so far */
};

struct kvs_store {
	struct kvs_store_config cfg;   /* resolved (backend.roots point into it) */
	struct kvs_backend_config fault_inner;
	struct kvs_log log;
	struct kvs_cache *cache;
	struct kvs_backend *backend;
	struct kvs_copy_engine *copy;
	struct kvs_shm_store_stats *st; /* this rank's counters in shared memory */
	uint32_t spb;                  /* shards per block */
	uint64_t slot_bytes;
	uint32_t rank_slice;           /* device_id % local_rank_size */
	uint32_t lrs;                  /* local_rank_size */
	uint32_t tensor_count;
	uint64_t tensor_bytes[KVS_MAX_TENSORS];
	uint64_t tensor_off[KVS_MAX_TENSORS];
	bool threads;

	/* Registration of the data plane with the copy engine (store_register.c). */
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

	/* Everything below is guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t disp_cv;        /* dispatcher: a task, a hand-off, ring space, stop */
	pthread_cond_t copier_cv;      /* copier: a shard in the ring, stop */
	pthread_cond_t done_cv;        /* kvs_store_wait: a task finished */
	bool stop;
	bool copier_done;              /* the copier has exited: no more hand-offs */
	uint32_t active;               /* tasks submitted and not finished */
	uint32_t outstanding;          /* tasks not yet reaped */
	uint64_t seq;
	struct kvs_store_task **tasks; /* waiting_queue_depth entries */
	struct kvs_store_task *q_head, *q_tail; /* submitted, not yet taken */
	struct kvs_store_sh *handoff;  /* copier -> dispatcher: writes, takeover reads */
	struct kvs_store_sh **ring;    /* dispatcher -> copier, in visiting order */
	uint32_t ring_cap, ring_head, ring_count;
	/* Bumped (kvs_wait_publish) at every ring push, so a copier asleep on slot
	 * words also wakes for new shards. */
	_Atomic uint32_t ring_bell;
	pthread_t disp_thr, copier_thr;

	/* Dispatcher-private. */
	struct kvs_store_task *cur;
	struct kvs_store_sh *sq_head, *sq_tail; /* transfers waiting for the backend */
	uint32_t inflight;
	bool prealloc_due;
	struct kvs_block_id prealloc_block;
	uint32_t prealloc_shard;
	struct kvs_block_id recent_block[KVS_STORE_PREALLOC_RECENT];
	uint32_t recent_shard[KVS_STORE_PREALLOC_RECENT];
	uint32_t recent_next;
	struct kvs_store_claim *claims;
	uint32_t nclaims;
	bool claims_full_logged;
};

/* Count in this rank's store stats.  relaxed: statistics summed racily by readers. */
#define KVS_STORE_COUNT(s, field, n) \
	atomic_fetch_add_explicit(&(s)->st->field, (uint64_t)(n), memory_order_relaxed)

/* ---- store.c ---- */
/* Make err (if non-zero) the task's error unless it has one. */
void kvs_store_sh_error(struct kvs_store_sh *sh, int err);
/* Count the shard done for its task (once; the last one completes the task).
 * kvs_store_sh_put does it at the release; only a cached dump calls it earlier. */
void kvs_store_sh_done(struct kvs_store *s, struct kvs_store_sh *sh);
/* Drop one holder's reference; the last releases the slot, counts the shard done
 * (if not yet) and drops its task reference. */
void kvs_store_sh_put(struct kvs_store *s, struct kvs_store_sh *sh);
/* Copier -> dispatcher: queue a backend transfer (op) for sh, the caller's
 * reference going with it. */
void kvs_store_handoff(struct kvs_store *s, struct kvs_store_sh *sh, uint32_t op);

/* ---- store_dispatch.c, store_copy.c: the threads ---- */
void *kvs_store_dispatcher(void *arg);
void *kvs_store_copier(void *arg);

/* ---- store_register.c ---- */
/* Plan the registration (order, chunk sizes, register_total_bytes), allocate
 * the staging buffer and start the registration thread.  0 or -errno. */
int kvs_store_register_start(struct kvs_store *s);
/* Join the registration thread (s->stop is set: it ends after its current
 * chunk) and unregister every chunk it registered; free the staging buffer. */
void kvs_store_register_stop(struct kvs_store *s);
/* Is sh's slot inside registered memory (copy it directly)? */
bool kvs_store_slot_registered(struct kvs_store *s, const struct kvs_store_sh *sh);

/* Test hook (static library only): called by the registration thread before
 * each chunk; a test blocks in it to hold registration at a known point, or
 * returns an error to have the chunk refused as the engine would (0: go on). */
extern int (*kvs_store_test_register_hook)(struct kvs_store *s, uint32_t seg, uint64_t off,
					   uint64_t len);

#endif
