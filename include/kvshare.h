/*
 * kvshare.h — the public interface of libkvshare.so.1 (the one installed header).
 *
 * kvshare gives every inference rank of one machine a single shared host-memory
 * KV-cache tier.  The first rank that asks for a (block, shard) becomes its owner
 * and fills it from a backend store once; the other ranks wait on the same slot and
 * then copy it to their own GPU.
 *
 * Process model.  A cache is named by a unique_id ([A-Za-z0-9_.-]{1,64}).  The first
 * process to open it creates its segments (O_CREAT|O_EXCL decides); every other
 * process of the node attaches.  Ranks (device_id >= 0) map the control plane
 * (POSIX shm /kvshare.<unique_id>.ctl) and the data plane (one file per NUMA node,
 * <hugetlbfs mount>/kvshare.<unique_id>.data.<node>, or /dev/shm in the plain build
 * and as the fallback); watchers (device_id = -1) map the control plane only.  The
 * last clean detacher removes the segments unless persist is set; a segment with
 * no live attacher is adopted (warm) by the next open with the same configuration.
 *
 * Thread and process safety.  Every kvs_cache_* and kvs_slot_* call is safe from
 * any thread of any attached process, concurrently.  A struct kvs_slot belongs to
 * the thread that got it until it is released.  Config structs are plain data.
 *
 * Conventions.  Functions return >= 0 on success and a negative errno or -KVS_E*
 * on failure; handles come back through out-parameters (NULL on failure).  Nothing
 * waits forever: every blocking call takes a timeout or has a documented bound.
 * The library never prints, exits or reads the environment; it logs through the
 * optional callback in its config.
 *
 * Variants.  The kernel-assisted build (hugetlbfs, NUMA placement, io_uring, futex)
 * and the plain build (/dev/shm, spin-wait, thread-pool pread) export exactly this
 * interface with the same SONAME and speak the same shared-memory protocol.
 */
#ifndef KVSHARE_H
#define KVSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVS_API __attribute__((visibility("default")))
#else
#define KVS_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */

#define KVS_VERSION_MAJOR 0
#define KVS_VERSION_MINOR 1
#define KVS_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the loaded library (not of the header compiled against). */
KVS_API const char *kvs_version(void);

/* "kernel" or "plain": which build of libkvshare.so.1 is loaded. */
KVS_API const char *kvs_variant(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/*
 * kvshare's own error codes, above the errno range.  Functions return them
 * negated, like errno values.
 */
#define KVS_E_BASE 10000
enum kvs_error {
	/* The segment was made by a build with another shared-memory layout (layout
	 * version, struct sizes, cache-line size).  Run the same kvshare build on
	 * every rank, or remove the stale segment with `kvshare clean`. */
	KVS_ELAYOUT = KVS_E_BASE + 1,
	/* The segment exists with another configuration (slot size, slot count, shards,
	 * tensor sizes, local_rank_size, segments); the log names the field and both
	 * values.  Give every rank the same configuration, or another unique_id.
	 * Also a backend block stored with another geometry (shard size, shards per
	 * block, tensor sizes, layout_tag) than the reader's: the read fails instead of
	 * returning bytes laid out for another geometry, and the log names the block,
	 * where it is and both geometries.  Load it with the geometry it was dumped
	 * with, or point this geometry at another store (posix root, Redis prefix). */
	KVS_ECONFIG = KVS_E_BASE + 2,
	/* The rank that was filling a slot died; the slot was failed (or taken over).
	 * Retry the get: a later owner re-reads from the backend. */
	KVS_EOWNERDEAD = KVS_E_BASE + 3,
	/* hugetlb=required and the hugetlbfs pool cannot back the data segment; the
	 * log says how many pages were needed and free.  Raise vm.nr_hugepages (or
	 * the per-node pool) or allow the /dev/shm fallback. */
	KVS_ENOHUGE = KVS_E_BASE + 4,
	/* Shared state failed validation (bad magic, truncated segment, broken
	 * invariant).  Stop the ranks and remove the segment with `kvshare clean`. */
	KVS_ECORRUPT = KVS_E_BASE + 5,
	/* A durable dump (dump_wait=durable) of some shards of a block whose other
	 * shards were not dumped, by any rank of the node, before the task's
	 * deadline: a block is written to the backend only whole, so this one is
	 * not there (its dumped shards stay in the cache).  Dump every shard of a
	 * block (every layer, every rank's slice) within timeout_ms, or use
	 * dump_wait=cached for partial dumps. */
	KVS_EINCOMPLETE = KVS_E_BASE + 6,
};

/*
 * A description of a return code: never NULL, NUL-terminated, not to be modified
 * or freed by the caller.
 *   0, -KVS_E*, and any value that is not a negative errno (> 0, or <= -KVS_E_BASE
 *   and not a kvshare code): a string constant of the library ("success", a
 *   text per kvshare code, "unknown kvshare error code"), valid while the
 *   library is loaded.
 *   -1 .. -(KVS_E_BASE - 1), a negative errno: strerror_r()'s text (GNU form,
 *   in the calling thread's locale).  It may be formatted into a 128-byte buffer
 *   that belongs to the calling thread (thread-local storage of the library, one
 *   per thread; a longer text is truncated), so it is valid only until the same
 *   thread calls kvs_strerror again or exits; copy it to keep it.
 * Thread-safe: any number of threads may call it at once (no buffer is shared
 * between threads).  Not async-signal-safe.  Never blocks.
 */
KVS_API const char *kvs_strerror(int err);

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */

enum kvs_log_level {
	KVS_LOG_ERROR = 0,
	KVS_LOG_WARN = 1,
	KVS_LOG_INFO = 2,
	KVS_LOG_DEBUG = 3,
};

/*
 * Log callback: called from any library thread, possibly concurrently, with a
 * NUL-terminated line without trailing newline.  It must not call back into
 * kvshare.  msg is valid only during the call.
 */
typedef void (*kvs_log_fn)(void *arg, int level, const char *msg);

/* ------------------------------------------------------------------------ */
/* Blocks                                                                    */

/* A block of KV, identified by a 16-byte content hash chosen by the caller. */
struct kvs_block_id {
	uint8_t bytes[16];
};

/* ------------------------------------------------------------------------ */
/* Placement and waiting policies (shared by the cache and store configs)    */

/* Huge pages for the data plane (docs/numa.md, "Configuration and fallbacks"). */
enum kvs_hugetlb_mode {
	KVS_HUGETLB_AUTO = 0,     /* hugetlbfs when a mount and pool suffice, else /dev/shm (logged) */
	KVS_HUGETLB_REQUIRED = 1, /* hugetlbfs or -KVS_ENOHUGE */
	KVS_HUGETLB_OFF = 2,      /* /dev/shm (always so in the plain build) */
};

/* NUMA placement of the data plane. */
enum kvs_numa_mode {
	KVS_NUMA_AUTO = 0,     /* bind where possible (GPU's node, or numa_node), else no binding (logged) */
	KVS_NUMA_OFF = 1,      /* no binding */
	KVS_NUMA_REQUIRED = 2, /* binding or an error */
};

/* How a rank waits for a slot another rank is filling. */
enum kvs_wait_mode {
	KVS_WAIT_AUTO = 0,  /* futex after a short adaptive spin (kernel build); spin (plain build) */
	KVS_WAIT_FUTEX = 1, /* futex; -EOPNOTSUPP in the plain build */
	KVS_WAIT_SPIN = 2,  /* spin with sched_yield until the deadline */
};

/* ------------------------------------------------------------------------ */
/* Cache: the shared index and slots (core/)                                 */

/*
 * A cache is a set of fixed-size slots in shared memory, keyed by (block, shard).
 * kvs_cache_get() pins the slot of a key and says whether the caller is its owner
 * (it must fill the slot and publish READY or FAILED) or a waiter (it waits for
 * the owner's publish).  Pins are dropped with kvs_slot_release(); only unpinned
 * slots are evicted (CLOCK, per data segment).
 */

/* Most tensors one shard is split into (kvs_cache_config.tensor_bytes). */
#define KVS_MAX_TENSORS 256
/* Longest unique_id (without NUL); characters [A-Za-z0-9_.-]. */
#define KVS_UNIQUE_ID_MAX 64
/* Most threads pre-faulting one data segment (kvs_cache_config.prefault_threads). */
#define KVS_CACHE_PREFAULT_THREADS_MAX 64

/* kvs_cache_config.flags */
#define KVS_CACHE_PERSIST (1u << 0) /* keep the segments after the last clean detach */
#define KVS_CACHE_ATTACH  (1u << 1) /* never create: attach to an existing cache and take
				     * its geometry from the segment (slot_bytes etc. ignored) */
#define KVS_CACHE_DISCARD_DIRTY (1u << 2) /* kvs_cache_remove only (an open: -EINVAL):
					   * remove a cache even though it holds dumped
					   * slots not in the backend yet (they are lost;
					   * logged) */

struct kvs_cache_config {
	char unique_id[72];        /* cache name, [A-Za-z0-9_.-]{1,64}; required */
	int32_t device_id;         /* >= 0: a rank (maps the data plane); -1: a watcher */
	uint32_t local_rank_size;  /* ranks per node sharing the cache (default 8) */
	uint64_t slot_bytes;       /* bytes of one shard (required, > 0) */
	uint64_t slot_count;       /* slots in the cache (required, 1 .. 2^30 - 1;
				      slot_bytes * slot_count <= 2^50) */
	uint32_t shards_per_block; /* shards of one block (default 1) */
	uint32_t tensor_count;     /* 0: one tensor of slot_bytes; else entries of tensor_bytes */
	uint64_t tensor_bytes[KVS_MAX_TENSORS]; /* per-tensor sizes, summing to slot_bytes */
	uint32_t reserved_slots;   /* slots only KVS_GET_ALLOW_RESERVED may take (default 0) */
	uint32_t hugetlb;          /* enum kvs_hugetlb_mode (default AUTO) */
	uint64_t hugepage_bytes;   /* huge page size wanted; 0 = 2 MiB */
	uint32_t numa;             /* enum kvs_numa_mode (default AUTO) */
	int32_t numa_node;         /* this rank's node; -1 = from pci_bus_id, else unbound */
	char pci_bus_id[32];       /* the rank's GPU ("0000:3b:00.0"), "" = unknown */
	uint32_t wait;             /* enum kvs_wait_mode (default AUTO) */
	uint32_t spin_ns;          /* waiter spin budget before sleeping (default 10000) */
	uint32_t file_mode;        /* 0600 (default) or 0660 with gid */
	uint32_t flags;            /* KVS_CACHE_* */
	int64_t gid;               /* group of 0660 files; -1 = none (default) */
	uint64_t attach_timeout_ns; /* longest wait for a creator / the lifecycle lock (30 s) */
	uint64_t lock_timeout_ns;  /* longest wait for one bucket lock (10 s) */
	kvs_log_fn log;            /* optional log callback */
	void *log_arg;
	uint32_t prefault_threads; /* creator: threads pre-faulting each data segment,
				      0..KVS_CACHE_PREFAULT_THREADS_MAX (0 = one per CPU
				      of the segment's node, at most 16) */
	uint32_t reserved32;       /* must be zero */
	uint64_t reserved[7];      /* must be zero */
};

/* Fill cfg with defaults (unique_id empty, slot_bytes and slot_count 0: the
 * caller sets them).  Never fails, never blocks; cfg (caller-owned) may be any
 * memory. */
KVS_API void kvs_cache_config_init(struct kvs_cache_config *cfg);

struct kvs_cache;

/*
 * Open (create or attach to) the cache cfg->unique_id.  The first process creates
 * the control and data segments (O_CREAT|O_EXCL decides); the others validate them
 * against their build and cfg.  A segment left by dead processes only (stale) with
 * the same configuration is adopted: READY slots keep their bytes, everything else
 * is reset.  cfg is copied; the log callback must outlive the cache.
 * Returns 0 and *cache; -EINVAL (bad config field, logged by name; flags with
 * KVS_CACHE_DISCARD_DIRTY), -EACCES
 * (segment of another uid), -ENOENT (KVS_CACHE_ATTACH and no cache), -EBUSY (no
 * free rank entry), -ETIMEDOUT (creator or lifecycle lock not ready within
 * attach_timeout_ns), -KVS_ELAYOUT, -KVS_ECONFIG (field and both values logged),
 * -KVS_ECORRUPT (truncated or bad segment, or no regular file at its name),
 * -KVS_ENOHUGE, -EOPNOTSUPP, -errno.
 * Blocks: up to attach_timeout_ns; the creator also for the data segments'
 * pre-fault.  Ownership: *cache until kvs_cache_close(); NULL on failure.
 */
KVS_API int kvs_cache_open(const struct kvs_cache_config *cfg, struct kvs_cache **cache);

/*
 * Detach: releases every slot this handle still pins (an unpublished owned slot
 * is published FAILED(-ECANCELED)), frees the rank entry and, if the cache is not
 * persistent, removes the segments when this was the last live GPU rank
 * (device_id >= 0), whatever watchers are attached: watchers never keep a cache
 * (kvs_cache_removed tells them).  A watcher's close removes them only as the
 * last process of a cache that ended cleanly (none attached, no dead rank's
 * entry left): after ranks killed -9 the cache is kept stale for adoption.
 * NULL is a no-op.  In a fork()ed child that inherited the handle, only the
 * child's copy is freed (the parent stays attached).  Blocks: up to
 * attach_timeout_ns for the lifecycle lock.
 * Ownership: cache is freed; no slot of it may be used afterwards.
 */
KVS_API void kvs_cache_close(struct kvs_cache *cache);

/*
 * Remove the segments of a cache no rank is attached to (`kvshare clean`):
 * watchers attached do not keep it (they see kvs_cache_removed).  Judged under
 * the lifecycle lock of the file the control file's name leads to then (a
 * cache removed and made again while this waited is judged anew).
 * Only cfg->unique_id, attach_timeout_ns, flags (KVS_CACHE_DISCARD_DIRTY) and log
 * are used.
 * Returns 0; -ENOENT (no such cache); -EBUSY (a live GPU rank, or a process the
 * file does not describe as a watcher, is attached: never removed); -ENOTEMPTY
 * (it holds slots dumped whose blocks are not in the backend yet, counted in the
 * log: a store opening it writes the complete ones; KVS_CACHE_DISCARD_DIRTY
 * removes it anyway); -EACCES;
 * -EINVAL (bad unique_id); -KVS_ECORRUPT (no regular file at the control
 * file's name: not a cache, left as it is); an unlink's -errno (a data file
 * named for the cache could not be removed, logged by path: the control file
 * is kept for a later removal).  Every data file named for the cache goes, in
 * /dev/shm and every hugetlbfs mount, recorded in its header or not (a creator
 * killed in its pre-fault).  Blocks: up to attach_timeout_ns.
 */
KVS_API int kvs_cache_remove(const struct kvs_cache_config *cfg);

/*
 * Whether the cache this handle is attached to was removed since (its last GPU
 * rank closed, or `kvshare clean`): 1, 0, or -errno.  A watcher that sees 1
 * closes the handle and opens again to find the next cache of that unique_id.
 * Never blocks (one fstat).
 */
KVS_API int kvs_cache_removed(struct kvs_cache *cache);

/*
 * Inspection without attaching (`kvshare ls`, `kvshare clean`, and `kvshare stat`
 * before it attaches).  kvs_cache_inspect() opens a control file read-only, tests
 * the rank entries' liveness locks (F_OFD_GETLK) and reads a snapshot of the
 * header and rank table with pread(): it takes no lock, maps nothing, writes
 * nothing, and so never adopts, repairs, reaps or removes anything.  Everything
 * it reads is validated as an attacher would (the header validator of open), so
 * a segment of another build or a corrupt one is described, not trusted.
 */

/* Rank-table entries of a cache: the most processes (ranks and watchers)
 * attached at once. */
#define KVS_CACHE_MAX_RANKS 64
/* Data segments of a cache (one per NUMA node in use). */
#define KVS_CACHE_MAX_SEGS 16

/* kvs_cache_info.state: what the control segment's header says. */
enum kvs_cache_info_state {
	KVS_CACHE_INFO_READY = 0,    /* a valid header of this build's layout, READY */
	KVS_CACHE_INFO_CREATING = 1, /* not READY: its creator is initialising it
				      * (ranks_live > 0) or died doing so (ranks_live 0:
				      * the next open, or kvs_cache_remove, removes it) */
	KVS_CACHE_INFO_LAYOUT = 2,   /* made by a build of another layout (layout_version
				      * or struct sizes differ): only layout_version,
				      * liveness and the file's own attributes are known */
	KVS_CACHE_INFO_CORRUPT = 3,  /* fails validation (bad magic, truncated, impossible
				      * geometry); detail names the field */
};

/* kvs_cache_info.flags (READY only) */
#define KVS_CACHE_INFO_PERSIST (1u << 0) /* created with KVS_CACHE_PERSIST */
#define KVS_CACHE_INFO_HUGETLB (1u << 1) /* a data segment is on hugetlbfs */

/* One live rank-table entry, as kvs_cache_inspect() saw it. */
struct kvs_cache_info_rank {
	uint32_t entry;     /* rank-table index (kvs_cache_stats' rank) */
	int32_t pid;        /* as the process recorded it at attach, in its own pid
			       namespace: informational, never liveness; 0 = unknown */
	int32_t device_id;  /* >= 0 a rank, -1 a watcher (recorded only) */
	uint32_t recorded;  /* 1: pid and device_id were read from a READY rank table;
			       0: only the liveness lock is known (pid 0, device_id -1) */
};

/* A read-only description of one cache (kvs_cache_inspect). */
struct kvs_cache_info {
	char unique_id[72];
	uint32_t state;           /* enum kvs_cache_info_state */
	uint32_t flags;           /* KVS_CACHE_INFO_* (READY only) */
	uint32_t ranks_live;      /* entries whose liveness lock is held; 0 = stale */
	uint32_t gpu_ranks_live;  /* of those, recorded with device_id >= 0 */
	uint32_t layout_version;  /* the header's (0 when the magic is wrong) */
	uint32_t creator_uid;     /* the header's record of its creator (READY; see uid) */
	uint32_t uid, gid, mode;  /* owner, group and permission bits of the control
				     file (fstat: the kernel's word, not the header's) */
	uint32_t seg_count;       /* data segments (READY; 0 otherwise) */
	uint32_t local_rank_size; /* the fingerprint (READY) */
	uint32_t shards_per_block;
	uint32_t reserved_slots;
	uint32_t fallbacks;       /* KVS_FALLBACK_* the creator recorded (READY) */
	uint32_t adoptions;       /* times it was adopted after its users died (READY) */
	uint32_t pad;
	uint64_t slot_count, slot_bytes; /* (READY) */
	uint64_t ctl_bytes;       /* size of the control file (fstat) */
	uint64_t data_bytes;      /* sum of the data segments' sizes (READY, header) */
	char hugetlb_dir[256];    /* hugetlbfs mount of its hugetlb data segments, "" */
	char detail[160];         /* LAYOUT, CORRUPT: why, naming the field; else "" */
	/* The first ranks_live are the live entries; the ranks_dead after them
	 * (READY only) are entries still attached whose process died: not reaped
	 * yet (the next attach reaps them, dropping their pins). */
	struct kvs_cache_info_rank live[KVS_CACHE_MAX_RANKS];
	uint32_t ranks_dead;      /* (READY) attached entries whose liveness lock is free */
	uint32_t cpu_ranks_live;  /* (READY) of gpu_ranks_live, ranks whose store copies
				     with the host engine (CPU-only) */
	uint64_t slots_dirty;     /* (READY) slots dumped whose blocks are not in the
				     backend yet: a cache holding any is never removed
				     (kvs_cache_remove: KVS_CACHE_DISCARD_DIRTY) */
	uint64_t reserved[6];
};

/*
 * Describe the cache unique_id without attaching to it (see above).  A cache of
 * another layout, a corrupt one and one being created are results (info->state),
 * not errors.  Liveness is exact at the moment each lock is tested; the rest is a
 * snapshot that may be out of date when the call returns (a rank may attach or
 * die meanwhile).
 * Returns 0 and *info; -EINVAL (NULL, or unique_id not [A-Za-z0-9_.-]{1,64});
 * -ENOENT (no such cache: no control file); -EACCES (not readable by this
 * process); -KVS_ECORRUPT (the control file's name holds no regular file -- a
 * FIFO, a socket, a device node, a directory, a symbolic link --: not a cache,
 * never opened); another -errno (open, fstat, pread, fcntl).
 * Blocks: no (a few system calls; 64 lock tests).  Ownership: *info is the
 * caller's; it is zeroed first, and on failure holds only unique_id (when that
 * was valid).
 */
KVS_API int kvs_cache_inspect(const char *unique_id, struct kvs_cache_info *info);

/* Slot states (kvs_slot.state, kvs_slot_state). */
enum kvs_slot_state {
	KVS_SLOT_EMPTY = 0,
	KVS_SLOT_LOADING = 1, /* the owner is filling it */
	KVS_SLOT_READY = 2,   /* bytes valid */
	KVS_SLOT_FAILED = 3,  /* the owner failed; kvs_slot.error holds its code */
};

/* kvs_slot.flags (output: set by the library, never read from the caller) */
#define KVS_SLOT_OWNER (1u << 0) /* this handle must fill the slot and publish */

/*
 * A pinned slot: the caller's handle, filled by kvs_cache_get().  Plain data
 * owned by the caller; valid until kvs_slot_release().  The library never trusts
 * it: every kvs_slot_* call checks it against the shared state (its pin, the
 * slot's generation, for publishing the slot's recorded owner), so a released,
 * stale or forged handle gets -ESTALE or -EPERM and never reaches another key.
 */
struct kvs_slot {
	uint32_t index;       /* slot index in the cache */
	uint32_t generation;  /* residency of that slot (bumped at every re-key) */
	uint32_t flags;       /* KVS_SLOT_* */
	uint32_t state;       /* enum kvs_slot_state seen by the last call */
	int32_t error;        /* FAILED: the owner's negative code */
	uint32_t pin;         /* internal: pin-table entry */
	uint64_t reserved[2];
};

/* kvs_cache_get() flags */
#define KVS_GET_BYPASS_HIT     (1u << 0) /* READY and unpinned: reload (become owner) */
#define KVS_GET_ALLOW_RESERVED (1u << 1) /* may take a slot of the reserved pool */

/*
 * Pin the slot of (block, shard); what it finds decides the outcome:
 *   absent                      -> a CLOCK victim is keyed, LOADING, caller is OWNER
 *   READY                       -> hit (BYPASS_HIT and unpinned: LOADING, OWNER)
 *   LOADING, pinned             -> waiter (kvs_slot_wait)
 *   LOADING or FAILED, unpinned -> LOADING, OWNER (retry)
 *   FAILED, pinned              -> state FAILED and error set at once
 * Returns 0 and *slot (state, flags, error); -EINVAL (shard >= shards_per_block,
 * bad flags); -EOPNOTSUPP (watcher); -ENOSPC (every candidate slot pinned, or this
 * process's pin table full); -ETIMEDOUT (bucket lock not had within
 * lock_timeout_ns: a stopped peer).  Blocks: only on the bucket lock.
 * Ownership: the pin is the caller's until kvs_slot_release().
 */
KVS_API int kvs_cache_get(struct kvs_cache *cache, const struct kvs_block_id *block,
			  uint32_t shard, uint32_t flags, struct kvs_slot *slot);

/* Current state of a pinned slot: returns enum kvs_slot_state (acquire: a READY
 * slot's bytes are visible), or -EINVAL (malformed handle), -ESTALE (released,
 * or older than the slot's residency); also updates slot->state and
 * slot->error.  Never blocks. */
KVS_API int kvs_slot_state(struct kvs_cache *cache, struct kvs_slot *slot);

/* kvs_slot_wait() results (>= 0).  A negative return is always the wait's own
 * failure, never the owner's error. */
enum kvs_slot_wait_result {
	KVS_SLOT_WAIT_READY = 0,  /* READY: the bytes are valid */
	KVS_SLOT_WAIT_OWNER = 1,  /* the filler died and this caller took the slot over:
				   * fill it and publish (slot->flags has KVS_SLOT_OWNER) */
	KVS_SLOT_WAIT_FAILED = 2, /* the owner published FAILED: its code is in slot->error
				   * (-KVS_EOWNERDEAD when it died and the slot was failed
				   * for it) */
};

/* kvs_slot_wait() flags */
#define KVS_SLOT_WAIT_NO_TAKEOVER (1u << 0) /* if the filler dies, fail the slot with
					     * -KVS_EOWNERDEAD for every waiter instead
					     * of taking it over */

/*
 * Wait until a pinned slot leaves LOADING.  Returns enum kvs_slot_wait_result;
 * or -ETIMEDOUT (this wait's timeout_ns passed), -EDEADLK (the caller is the
 * owner of the unpublished slot), -EINVAL (bad flags or handle), -ESTALE (the
 * handle was released or is older than the slot's residency), -KVS_ECORRUPT.
 * Blocks: up to timeout_ns (spin, then futex or yield per cfg->wait), checking
 * the filler's liveness every 10 ms.
 */
KVS_API int kvs_slot_wait(struct kvs_cache *cache, struct kvs_slot *slot, uint32_t flags,
			  uint64_t timeout_ns);

/* Address of a pinned slot's slot_bytes bytes in this process.  Returns 0 and
 * *ptr; -EINVAL; -ESTALE (not pinned by this handle); -EOPNOTSUPP for a watcher
 * (*ptr NULL on failure).  Never blocks.  Ownership: the bytes are the cache's; the pointer is valid while the
 * slot is pinned, writable by its owner until it publishes. */
KVS_API int kvs_slot_data(struct kvs_cache *cache, const struct kvs_slot *slot, void **ptr);

/* Owner: the bytes are in; publish READY and wake the waiters.  Returns 0;
 * -EPERM (not the owner recorded in shared memory, or already published);
 * -EINVAL, -ESTALE (as kvs_slot_state).  Never blocks. */
KVS_API int kvs_slot_publish_ready(struct kvs_cache *cache, struct kvs_slot *slot);

/* Owner: publish FAILED with err (< 0, e.g. -EIO); every waiter returns err at
 * once.  Returns 0; -EINVAL (err >= 0); -EPERM.  Never blocks. */
KVS_API int kvs_slot_publish_failed(struct kvs_cache *cache, struct kvs_slot *slot, int err);

/* Drop the pin.  An owner that never published publishes FAILED(-ECANCELED).
 * Returns 0; -EINVAL, -ESTALE (as kvs_slot_state: a second release is -ESTALE);
 * -ETIMEDOUT (bucket lock).
 * Blocks: only on the bucket lock.  slot is cleared. */
KVS_API int kvs_slot_release(struct kvs_cache *cache, struct kvs_slot *slot);

/* Is (block, shard) READY?  Returns 1, 0, -EINVAL (shard out of range),
 * -ETIMEDOUT.  Blocks: one bucket lock.  Works for watchers. */
KVS_API int kvs_cache_exists(struct kvs_cache *cache, const struct kvs_block_id *block,
			     uint32_t shard);

/* kvs_cache_lookup() shard value: every shard of the block must be READY. */
#define KVS_ALL_SHARDS UINT32_MAX

/* For each of n blocks, hits[i] = whether shard (or every shard, KVS_ALL_SHARDS)
 * is READY.  Returns the number of hits; -EINVAL; -ETIMEDOUT.  Blocks: one bucket
 * lock at a time.  Ownership: blocks and hits (n entries each) are the caller's. */
KVS_API int kvs_cache_lookup(struct kvs_cache *cache, const struct kvs_block_id *blocks,
			     size_t n, uint32_t shard, bool *hits);

/* Length of the longest prefix of blocks whose shard (or every shard) is READY.
 * Returns 0..n; -EINVAL; -ETIMEDOUT.  Blocks: one bucket lock at a time, stopping
 * at the first miss. */
KVS_API int kvs_cache_lookup_prefix(struct kvs_cache *cache, const struct kvs_block_id *blocks,
				    size_t n, uint32_t shard);

/* Key a slot for (block, shard) (the reserved pool allowed) LOADING, unpinned
 * and with no filler, in one lock section, so the next get owns it at once
 * without a CLOCK search and no get ever waits on it.  Returns 1 if a slot was
 * prepared, 0 if the key was already resident, -EOPNOTSUPP (watcher), or
 * kvs_cache_get's errors.  Blocks: one bucket lock. */
KVS_API int kvs_cache_prealloc(struct kvs_cache *cache, const struct kvs_block_id *block,
			       uint32_t shard);

/* Count a use of every resident shard (any state) of n blocks in its CLOCK weight.
 * Returns the number of shards touched; -EINVAL; -ETIMEDOUT.  Blocks: one bucket
 * lock at a time. */
KVS_API int kvs_cache_touch(struct kvs_cache *cache, const struct kvs_block_id *blocks, size_t n);

/* kvs_cache_stats() rank value for the whole node (every rank, departed ones too). */
#define KVS_STATS_NODE (-1)

/* kvs_cache_stats.fallbacks bits */
#define KVS_FALLBACK_HUGETLB (1u << 0) /* data plane on /dev/shm instead of hugetlbfs */
#define KVS_FALLBACK_NUMA    (1u << 1) /* a segment made for a NUMA node could not be bound
					  to it, on a machine of several nodes (numa=auto);
					  one node, numa=off or no node known is no fallback */

/*
 * Counters of gets.  Every get of a load, a prefetch or kvs_cache_get is one of
 * hits (READY), joins (a fill in flight) or misses (the caller owns the fill);
 * a store dump's gets are counted apart, in dump_gets (hits would otherwise
 * count a dump's dedups as reads served).  owner_fills and failures are how
 * fills ended (READY or FAILED: a load's read, a dump's gather, a takeover's).
 */
struct kvs_cache_stats {
	uint64_t hits, misses, owner_fills, waits, wait_ns, failures, evictions;
	uint64_t clock_sweeps;   /* complete CLOCK passes over a pool */
	uint64_t takeovers;      /* dead fillers' slots taken over */
	uint64_t lock_repairs;   /* bucket locks recovered from a dead holder */
	uint64_t ranks_reaped;   /* dead ranks whose pins were dropped */
	uint64_t enospc;         /* gets refused: every slot pinned */
	uint64_t lrs_mismatch;   /* attaches beyond local_rank_size (node) */
	uint32_t fallbacks;      /* KVS_FALLBACK_* */
	uint32_t ranks_attached; /* live entries now (ranks and watchers whose liveness
				    lock is held: one killed and not reaped yet is not) */
	uint32_t gpu_ranks_attached; /* of those, ranks (device_id >= 0), GPU or CPU-only
					(kvs_cache_rank_info.copy_engine tells them apart) */
	uint32_t adoptions;      /* times this segment was adopted after its users died */
	uint64_t slot_count, slot_bytes;
	uint64_t slots_ready, slots_loading, slots_failed, slots_pinned;
	/* How the creator pre-faulted the data plane (its record in the header). */
	uint64_t data_bytes;         /* size of the data segments together */
	uint64_t prefault_ns;        /* wall time of their pre-faults, summed */
	double prefault_ms_per_gib;  /* prefault_ns per GiB of data_bytes, in ms */
	uint32_t prefault_threads;   /* most threads one segment's pre-fault used */
	uint32_t pad;
	uint64_t slots_dirty;        /* slots a dump filled whose block is not yet in the
				        backend (readers see them READY; not in slots_ready) */
	/* Gets that found the slot being filled by a read in flight (another
	 * rank's, or an earlier get's) and joined it: served without a backend read
	 * of their own.  Every get is one of hits, joins, misses (a get refused,
	 * -ENOSPC or -ENOENT, is none): queries = hits + joins + misses. */
	uint64_t joins;
	/* Gets of store dumps (a dump shard pinned: found filled, being filled, or
	 * owned to gather), in none of hits, joins, misses; a dump's dedups are
	 * kvs_store_stats.dump_dedup. */
	uint64_t dump_gets;
	uint64_t reserved[1];
};

/*
 * Counters of one rank-table entry (rank = entry index, see kvs_cache_rank) or
 * KVS_STATS_NODE, plus the slot census.  Readable by watchers.  Returns 0;
 * -EINVAL (rank out of range).  Never blocks: counters and census are read
 * racily, without locks (the census costs O(slot_count)).
 */
KVS_API int kvs_cache_stats(struct kvs_cache *cache, int rank, struct kvs_cache_stats *stats);

/* This handle's rank-table entry index (>= 0, for kvs_cache_stats), or -EINVAL
 * for NULL.  Never blocks. */
KVS_API int kvs_cache_rank(const struct kvs_cache *cache);

/* One rank-table entry seen through an open handle (kvs_cache_rank_info). */
struct kvs_cache_rank_info {
	uint32_t entry;     /* = rank */
	uint32_t attached;  /* 1: the entry is in use (a process attached and has not
			       detached, nor been reaped since it died) */
	uint32_t alive;     /* 1: attached and its liveness lock is held (or it is
			       this handle's own entry); attached && !alive: died,
			       not reaped yet */
	uint32_t self;      /* 1: this handle's entry */
	int32_t pid;        /* recorded at attach, in the attacher's pid namespace:
			       informational, never liveness (0 for a free entry) */
	int32_t device_id;  /* >= 0 a rank, -1 a watcher (free entry: -1) */
	uint32_t epoch;     /* attaches of this entry so far */
	uint32_t pins;      /* slots it pins now (pin-table entries in use) */
	uint32_t copy_engine; /* the copy engine of the rank's store, as it recorded it:
				 KVS_COPY_ENGINE_HOST (a CPU-only rank: device
				 addresses are host memory) or KVS_COPY_ENGINE_CUDA;
				 0 none (a watcher, a rank without a store, or its
				 store still opening) */
	uint32_t pad;
	uint64_t reserved[3];
};

/*
 * Describe rank-table entry rank (0 .. KVS_CACHE_MAX_RANKS - 1; a free entry is
 * described too, attached 0).  Readable by watchers.  Returns 0 and *info;
 * -EINVAL (NULL, rank out of range).  Never blocks: the entry is read racily
 * (one liveness lock test, and its 4096 pin entries counted).
 * Ownership: *info is the caller's.
 */
KVS_API int kvs_cache_rank_info(struct kvs_cache *cache, int rank, struct kvs_cache_rank_info *info);

/* Data segment backing (kvs_cache_seg_info.backing). */
enum kvs_cache_backing {
	KVS_CACHE_BACKING_NONE = 0,
	KVS_CACHE_BACKING_HUGETLB = 1, /* a hugetlbfs file: pages from the huge page pool */
	KVS_CACHE_BACKING_SHM = 2,     /* a /dev/shm file (MADV_HUGEPAGE where possible) */
};

/* One data segment as its creator recorded it (kvs_cache_seg_info). */
struct kvs_cache_seg_info {
	uint32_t seg;            /* index */
	uint32_t seg_count;      /* data segments of the cache */
	uint32_t backing;        /* enum kvs_cache_backing */
	int32_t node;            /* NUMA node it was made for (-1: none) */
	int32_t bound_node;      /* node its pages were bound to (-1: not bound) */
	uint32_t pad;
	uint64_t page_bytes;     /* page size of its mapping */
	uint64_t bytes;          /* size of its file */
	uint64_t first_slot;     /* it holds slots [first_slot, first_slot + slot_count) */
	uint64_t slot_count;     /* including its reserved ones */
	uint64_t reserved_count; /* of those, the reserved pool's */
	char path[384];          /* its file ("" if the record is unusable) */
	uint64_t prefault_ns;    /* wall time its creator took to pre-fault it */
	uint32_t prefault_threads; /* threads that did it */
	uint32_t pad2;
	uint64_t reserved[2];
};

/*
 * Describe data segment seg (0 .. seg_count - 1) of an open cache: backing, page
 * size, NUMA node, size, slots, file.  Readable by watchers (they map no data;
 * this is the creator's record).  Returns 0 and *info; -EINVAL (NULL);
 * -ENOENT (seg >= the cache's segment count: iterate from 0 until -ENOENT).
 * Never blocks.  Ownership: *info is the caller's.
 */
KVS_API int kvs_cache_seg_info(struct kvs_cache *cache, uint32_t seg, struct kvs_cache_seg_info *info);

/*
 * Verify every shared invariant: chains match bucket_idx, keys hash to their
 * bucket, no duplicate keys, states valid, refcounts equal the pin tables.
 * Each bucket is checked under its own lock, so it may run on a busy cache.
 * Returns 0; -KVS_ECORRUPT (each broken invariant logged); -ETIMEDOUT; -ENOMEM.
 * Blocks: one bucket lock at a time; O(slots) time (more on a busy cache).
 */
KVS_API int kvs_cache_check(struct kvs_cache *cache);

/* ------------------------------------------------------------------------ */
/* Backend stores (io/)                                                      */

/*
 * A backend store holds blocks outside the cache: the owner of a slot reads the
 * shard from it, a dump writes the shard to it.  Backends are completion-based:
 * submit_read / submit_write queue one transfer tagged with a caller token, and
 * poll reaps completions (token + result: the byte count, or a negative errno).
 * Backends never see the cache index; they read into and write from the buffers
 * they are given.
 *
 * Built-in kinds:
 *   posix    one file per block under one or more root directories
 *            (<root>/<hex[0:2]>/<hex[2:4]>/<hex>, root chosen by the block id):
 *            a header (4096 bytes, or the O_DIRECT alignment if larger) saying
 *            what the file holds (block id, shard_bytes, shards_per_block, the
 *            tensor table, layout_tag; checksummed), then shard i at offset
 *            header + i * shard_bytes (docs/io.md, "Block file format").  A read
 *            of a file stored with another geometry is refused at submit with
 *            -KVS_ECONFIG, one that is not a kvshare block file of this block
 *            (no or a corrupt header, another block's) with -EIO; lookup calls
 *            both absent.  A dumped block is written under
 *            <hex>.tmp.<pid>.<host tag><random> and renamed once every shard of
 *            it has been written (fsync first unless KVS_BACKEND_F_NO_FSYNC):
 *            readers never see a partial block.  Stale temp files (this host's
 *            writer process gone or a zombie, or older than 24 h) are removed
 *            at open.  Engines: io_uring (kernel
 *            build; fixed buffers, registered files) or a pthread pool of
 *            pread/pwrite workers (both builds; the kernel build's fallback when
 *            io_uring is refused with EPERM/ENOSYS/EACCES, reported by
 *            kvs_backend_info()).  Optional O_DIRECT (KVS_BACKEND_F_IO_DIRECT).
 *   none     nothing stored: lookup says absent, reads fail -ENOENT at submit,
 *            writes complete successfully and store nothing.
 *   latency  a synthetic remote store for benchmarks: every transfer completes
 *            latency_ns after submit; reads return fixed content, a
 *            deterministic function of (block, shard, byte offset) that is not
 *            part of this interface: kvshare's source tree has it as a
 *            header-only function (common/pattern.h, kvs_pattern_fill) for
 *            programs that verify what they read; writes are accepted and
 *            dropped; lookup says present; at most latency_queue_depth
 *            transfers in flight (0 = unbounded).
 *   fault    wraps another backend (fault_inner) and injects, with a seeded
 *            generator: -EIO completions, short reads (reported as -EIO, the
 *            buffer's tail untouched) and an added delay.
 *   user     any struct kvs_backend_ops (user_ops, user_arg).
 *   redis    a Redis-protocol server (Redis, Valkey, managed services) through
 *            hiredis: the store several nodes share.  One key per (block, shard),
 *            <key_prefix><32 hex of the block id>:<shard>, holding a 64-byte
 *            header (the same facts as a block file's, the tensor table as a
 *            hash) and the shard's bytes (binary-safe).  A value stored with
 *            another geometry fails its read with -KVS_ECONFIG; one without a
 *            valid header, of another key, or of another length with -EIO:
 *            never a partial slot.  A block is present when all its
 *            shards' keys exist (pipelined EXISTS; kvs_backend_lookup_batch asks
 *            for many blocks in one round trip).  Blocks are spread over the
 *            endpoints by id; transfers are pipelined on `connections` sockets per
 *            endpoint (docs/io.md, "redis").  With `cluster` the endpoints are
 *            seeds of a Redis Cluster, the keys <key_prefix>{<32 hex>}:<shard>
 *            (the block id their hash tag), each command routed to its slot's
 *            master, MOVED/ASK followed, TRYAGAIN/CLUSTERDOWN/a lost master
 *            retried within the command timeout; a slot no master serves
 *            -EHOSTUNREACH (docs/io.md, "Redis Cluster").  A server error
 *            reply fails only its shard: OOM -ENOSPC, READONLY -EROFS,
 *            NOAUTH/WRONGPASS/NOPERM -EACCES, LOADING/BUSY/MASTERDOWN/TRYAGAIN
 *            -EBUSY, CLUSTERDOWN -EHOSTDOWN, others -EIO; a lost or
 *            silent connection fails the transfers on it (-ECONNRESET,
 *            -ETIMEDOUT) and is reconnected with a bounded backoff.
 *
 * Threads.  A backend handle is single-issuer: submit_*, poll, wait_fd,
 * hint_read and register_buffers must come from one thread at a time, and with the io_uring
 * engine from one thread for the handle's life (the first that submits; the
 * ring is set up IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN).  A
 * process that issues from several threads opens one handle per thread.
 * lookup and info may be called from any thread.
 *
 * Results.  A read or write completes with exactly the bytes asked for, or a
 * negative errno: a transfer the store cannot finish (a truncated block file,
 * end of file, a short read injected by the fault backend) is -EIO, never a
 * partial count.  After a failed read the buffer's contents are unspecified.
 *
 * Waiting.  An issuer may sleep in poll(timeout), or on the backend's wait
 * descriptor (kvs_backend_wait_fd: poll(2)/epoll(7) for POLLIN, with its own
 * descriptors beside it) and then reap with poll(.., 0).  The descriptor is
 * level-triggered on "a completion is ready or due": it is readable no later
 * than poll(.., 0) would return >= 1, and once a poll has returned fewer
 * completions than asked for it stays unreadable until a new completion may be
 * ready, so a loop "wait; poll(0)" sleeps between completions and never spins
 * (a wake that reaps nothing is rare and is the backend's own progress: posix
 * wakes for the steps of a dump, at most four per block).  Every built-in
 * backend has one: posix an eventfd (registered with the io_uring ring, or
 * signalled by the pool's workers), none an eventfd, latency a timerfd for the
 * next due completion (at latency 0 an eventfd), fault an epoll descriptor over its own timerfd and the
 * inner backend's descriptor (none when the inner has none), redis an epoll
 * descriptor over the sockets with replies outstanding and a timerfd for the
 * nearest command or connect deadline (docs/io.md, "Waiting").
 */

/* struct kvs_backend_ops.abi of this header. */
#define KVS_BACKEND_OPS_ABI 1

enum kvs_backend_kind {
	KVS_BACKEND_POSIX = 0,
	KVS_BACKEND_NONE = 1,
	KVS_BACKEND_LATENCY = 2,
	KVS_BACKEND_FAULT = 3,
	KVS_BACKEND_USER = 4,
	KVS_BACKEND_REDIS = 5,
};

/* The posix backend's engine. */
enum kvs_io_engine {
	KVS_IO_ENGINE_AUTO = 0,  /* io_uring (kernel build) falling back to the pool; pool (plain) */
	KVS_IO_ENGINE_URING = 1, /* io_uring or an error; -EOPNOTSUPP in the plain build */
	KVS_IO_ENGINE_POOL = 2,  /* pread/pwrite worker threads */
};

/* kvs_backend_config.flags */
#define KVS_BACKEND_F_IO_DIRECT (1u << 0) /* posix: O_DIRECT; alignment checked at open */
#define KVS_BACKEND_F_NO_FSYNC (1u << 1)  /* posix: rename a dumped block without fsync */

#define KVS_BACKEND_MAX_ROOTS 8

/* Sizes of the redis backend's strings (with their NUL). */
#define KVS_REDIS_ENDPOINTS_LEN 512
#define KVS_REDIS_USER_LEN 64
#define KVS_REDIS_PASSWORD_LEN 256
#define KVS_REDIS_PATH_LEN 256
#define KVS_REDIS_PREFIX_LEN 64
/* Most endpoints and connections per endpoint. */
#define KVS_REDIS_MAX_ENDPOINTS 16
#define KVS_REDIS_MAX_CONNECTIONS 64
/* Most replicas a write may wait for (kvs_backend_redis_config.wait_replicas). */
#define KVS_REDIS_MAX_WAIT_REPLICAS 16

/* The redis backend's settings (kvs_backend_config.redis; strings NUL-terminated). */
struct kvs_backend_redis_config {
	char endpoints[KVS_REDIS_ENDPOINTS_LEN]; /* ';'-separated "host:port", "[v6addr]:port"
					  or a unix socket path ("/..."); 1..16 of them;
					  required */
	char user[KVS_REDIS_USER_LEN];   /* ACL user; "" = AUTH <password> alone */
	char password[KVS_REDIS_PASSWORD_LEN]; /* "" = none; never logged */
	char password_file[KVS_REDIS_PATH_LEN]; /* when password is "": its first line,
					  up to 4096 bytes, is read at open (never
					  logged); a regular file, else -EINVAL */
	char key_prefix[KVS_REDIS_PREFIX_LEN]; /* prepended to every key (default "kvshare:") */
	uint32_t db;                     /* SELECT db when > 0, 0..2^31 - 1 (default 0) */
	uint32_t connections;            /* sockets per endpoint per handle, 1..64 (default 2) */
	uint64_t connect_timeout_ns;     /* 1 ms .. 1 h (default 2 s) */
	uint64_t command_timeout_ns;     /* a reply's deadline from submit, 1 ms .. 1 h
					    (default 10 s); past it the connection is reset */
	uint64_t ttl_ms;                 /* dumped keys expire after this; 0 = never (default) */
	uint32_t start_degraded;         /* 0: open fails when an endpoint does not answer
					    (default); 1: open anyway, logged, and transfers
					    to it fail until it answers */
	uint32_t cluster;                /* 0: endpoints are independent servers (default);
					    1: a Redis Cluster, endpoints are seed nodes
					    (slots routed, MOVED/ASK followed; docs/io.md,
					    "Redis Cluster"); db must be 0 and key_prefix
					    free of '{' and '}' */
	uint64_t wait_replicas;          /* a write completes once this many replicas have
					    it (WAIT after every SET, within the command
					    timeout; fewer: -EIO), 0..16; 0 = when the
					    master has it (default; docs/io.md,
					    "Redis Cluster") */
	uint64_t reserved[2];            /* must be zero */
};

struct kvs_backend_ops;

/*
 * Backend configuration, filled with defaults by kvs_backend_config_init().  Like
 * struct kvs_cache_config it has no size or version field: its layout is fixed
 * for libkvshare.so.1 from the first release on (`redis` joined before it, while
 * KVSHARE_1 was still growing), and fields added later take the place of
 * reserved[] words (zero = the old behaviour), so every reserved word must be zero
 * (else -EINVAL, logged as "reserved").
 */
struct kvs_backend_config {
	uint32_t kind;             /* enum kvs_backend_kind (default posix) */
	uint32_t flags;            /* KVS_BACKEND_F_* (default 0) */
	uint32_t io_engine;        /* enum kvs_io_engine (default auto) */
	uint32_t shards_per_block; /* 1..65536 (default 1) */
	uint64_t shard_bytes;      /* bytes per shard, 1..2^40 (default 1 MiB) */
	uint32_t queue_depth;      /* posix: transfers in flight per handle, 1..4096 (default 128);
				      submit returns -EAGAIN when full */
	uint32_t pool_threads;     /* pool engine workers, 1..64 (default 4) */
	uint32_t nroots;           /* posix: entries of roots[], 1..KVS_BACKEND_MAX_ROOTS */
	uint32_t latency_queue_depth; /* latency: transfers in flight, 0 = unbounded (default 0) */
	const char *roots[KVS_BACKEND_MAX_ROOTS]; /* posix: existing directories (copied at open) */
	uint64_t latency_ns;       /* latency: per-transfer latency, <= 1 h (default 100 us) */
	uint32_t fault_error_ppm;  /* fault: transfers failed with -EIO, per million (0..1e6) */
	uint32_t fault_short_ppm;  /* fault: reads cut short (-EIO), per million (0..1e6) */
	uint64_t fault_delay_ns;   /* fault: added to every completion, <= 1 h */
	uint64_t fault_seed;       /* fault: generator seed (default 1) */
	const struct kvs_backend_config *fault_inner; /* fault: the wrapped backend's config
							 (same shard_bytes, shards_per_block,
							 tensor table, layout_tag) */
	const struct kvs_backend_ops *user_ops;       /* user: the ops table (must outlive the handle) */
	void *user_arg;            /* user: passed to user_ops->open */
	kvs_log_fn log;            /* optional log callback */
	void *log_arg;
	struct kvs_backend_redis_config redis; /* redis: endpoints, credentials, timeouts; the
						  posix fields queue_depth (transfers in flight
						  per handle) applies too */
	/* What a stored block holds, besides shard_bytes and shards_per_block: posix
	 * and redis store these with every block and refuse to read one stored with
	 * other values (-KVS_ECONFIG).  The store sets the tensor table from its
	 * cache's; layout_tag is the caller's. */
	uint32_t tensor_count;     /* entries of tensor_bytes, 0..KVS_MAX_TENSORS; 0 = one
				      tensor of shard_bytes (default) */
	uint32_t reserved32;       /* must be zero */
	const uint64_t *tensor_bytes; /* how one shard splits into tensors: tensor_count
					 sizes, each > 0, summing to shard_bytes
					 (copied at open) */
	uint64_t layout_tag;       /* opaque: how the bytes are arranged inside a shard
				      (e.g. an engine's KV-layout version); blocks
				      stored with another tag are refused (default 0) */
	uint64_t reserved[5];      /* must be zero */
};

/* One transfer: bytes [offset, offset + len) of shard `shard` of `block`. */
struct kvs_backend_io {
	struct kvs_block_id block;
	uint32_t shard;   /* < shards_per_block */
	uint32_t flags;   /* must be 0 */
	void *buf;        /* len bytes; with O_DIRECT aligned as kvs_backend_info says */
	uint64_t offset;  /* within the shard; writes: 0 */
	uint64_t len;     /* reads: 1..shard_bytes - offset; writes: shard_bytes */
	uint64_t token;   /* returned in the completion */
};

struct kvs_backend_completion {
	uint64_t token;
	int64_t result;   /* bytes transferred (== len), or a negative errno */
};

/* A memory region for fixed-buffer transfers (kvs_backend_register_buffers). */
struct kvs_backend_buffer {
	void *base;
	uint64_t len;
};

/* kvs_backend_info.flags */
#define KVS_BACKEND_INFO_FALLBACK (1u << 0)      /* io_uring refused, the pool is used */
#define KVS_BACKEND_INFO_FIXED_BUFFERS (1u << 1) /* registered buffers in use */
#define KVS_BACKEND_INFO_IO_DIRECT (1u << 2)     /* O_DIRECT in use */
/* A block's shards become readable together, never some without the others
 * (posix: the block file is renamed into place once whole; latency: every block
 * is there), so a shard read from the backend proves its whole block is stored.
 * Without it (redis: a key per shard, each its own TTL; a user backend that
 * does not say) a shard proves only itself, and a dump of a block whose other
 * shards it finds READY writes the whole block again (docs/store.md, "Dumps"). */
#define KVS_BACKEND_INFO_BLOCK_ATOMIC (1u << 3)

struct kvs_backend_info {
	uint32_t kind;          /* enum kvs_backend_kind */
	uint32_t io_engine;     /* posix: engine in use (uring or pool), else 0 */
	uint32_t flags;         /* KVS_BACKEND_INFO_* */
	int32_t fallback_err;   /* why io_uring was refused (-EPERM, -ENOSYS, -EACCES, -ENOMEM), else 0 */
	uint32_t dio_mem_align; /* O_DIRECT: buffer address alignment, else 0 */
	uint32_t dio_offset_align; /* O_DIRECT: offset/length alignment, else 0 */
	uint64_t fixed_bytes;   /* io_uring: bytes of the registered regions pinned as
				   fixed buffers so far (they are pinned on first use) */
	uint64_t reserved[3];
};

/*
 * The ops table of a backend, for users plugging in their own store
 * (kind = KVS_BACKEND_USER).  Every function pointer up to `close` is required;
 * members after it are optional (NULL) and read only when `size` covers them, so
 * a table built against an older header keeps working.  The library calls them
 * with the threading rules above and validates arguments before calling.
 */
struct kvs_backend_ops {
	uint32_t abi;  /* KVS_BACKEND_OPS_ABI */
	uint32_t size; /* sizeof(struct kvs_backend_ops) as compiled by the provider */
	/* Open: *state receives the provider's handle.  cfg is valid only during the
	 * call.  Returns 0 or a negative errno. */
	int (*open)(const struct kvs_backend_config *cfg, void **state);
	/* 1 if every shard of block is stored, 0 if not, or a negative errno. */
	int (*lookup)(void *state, const struct kvs_block_id *block);
	/* Queue one transfer.  0: accepted, exactly one completion will carry
	 * io->token; negative errno: refused, no completion (-EAGAIN: in-flight
	 * limit, poll first).  Must not block on the transfer itself. */
	int (*submit_read)(void *state, const struct kvs_backend_io *io);
	int (*submit_write)(void *state, const struct kvs_backend_io *io);
	/* Reap up to max completions into out; wait up to timeout_ns for the first
	 * when none is ready (0 = do not wait).  Returns the count (0 on timeout) or
	 * a negative errno. */
	int (*poll)(void *state, struct kvs_backend_completion *out, uint32_t max,
		    uint64_t timeout_ns);
	/* Close; transfers still in flight are finished (or cancelled) first. */
	void (*close)(void *state);
	/* Optional: make regions available for zero-copy transfers; replaces any
	 * earlier registration.  Returns 0 or a negative errno. */
	int (*register_buffers)(void *state, const struct kvs_backend_buffer *bufs, uint32_t n);
	/* Optional: fill io_engine, flags, fallback_err, dio_* (kind is set by the library). */
	void (*info)(void *state, struct kvs_backend_info *info);
	/* Optional: as lookup for the blocks whose hits[i] is false (the others are
	 * known present and not asked), setting hits[i]; one round trip for them all
	 * where the store can (redis: pipelined EXISTS).  Returns the number of hits[]
	 * true on return, or a negative errno (hits[] then unspecified).  Without it
	 * the library calls lookup block by block. */
	int (*lookup_batch)(void *state, const struct kvs_block_id *blocks, size_t n, bool *hits);
	/* Optional: a descriptor the issuer may sleep on (poll(2)/epoll(7), POLLIN) instead of
	 * in poll(timeout): readable whenever poll(.., 0) may reap a completion (one was
	 * posted, or a timed one is due), and, once poll has returned fewer completions
	 * than asked for, not readable again until a new completion may be ready (a wake
	 * that reaps nothing must be rare and never repeat without progress of the
	 * provider's own: a caller looping on "wait; poll(.., 0) -> 0" must not spin).  poll resets the provider's
	 * notification itself.  The same descriptor for the handle's life, owned by the
	 * provider (closed by close; the caller only waits on it).  Called from the
	 * issuing thread, after open.  Returns the descriptor or a negative errno
	 * (-EOPNOTSUPP: none; the caller then sleeps in poll(timeout)).  Without it,
	 * kvs_backend_wait_fd says -EOPNOTSUPP. */
	int (*wait_fd)(void *state);
	/* Optional (ABI 1.3): advice that blocks (n of them, nearest first) will be read
	 * soon; the provider may start what precedes their first transfer (posix:
	 * opens each block file and checks its header on a thread of its own).
	 * Called from the issuing thread; must not block on I/O; nothing depends on
	 * it (a read of a block never hinted, or hinted and then dropped, works as
	 * before).  Without it, kvs_backend_hint_read does nothing. */
	void (*hint_read)(void *state, const struct kvs_block_id *blocks, size_t n);
};

struct kvs_backend;

/*
 * Fill *cfg with defaults (kind posix, no roots: set nroots and roots[]).
 * Returns nothing.  Blocks: no.  Ownership: caller's memory.
 */
KVS_API void kvs_backend_config_init(struct kvs_backend_config *cfg);

/*
 * Open a backend.  Every field is validated; a bad one gives -EINVAL and a log line
 * naming it (tensor_count, tensor_bytes: each > 0, summing to shard_bytes).
 * posix: each root must be an existing directory (-ENOENT/-ENOTDIR);
 * stale temp files are removed; with KVS_BACKEND_F_IO_DIRECT, shard_bytes must be a
 * multiple of the filesystem's O_DIRECT offset alignment (-EINVAL) and the
 * filesystem must support O_DIRECT (-EOPNOTSUPP).  io_engine=uring where io_uring
 * is refused returns that error (-EPERM, -ENOSYS, -EACCES).
 * Returns 0 with *out set, or a negative errno with *out = NULL.
 * Blocks: yes, on directory scans and file system probes.
 * Ownership: the handle is the caller's, freed by kvs_backend_close; cfg (and the
 * strings it points to) may be freed after the call, except user_ops.
 */
KVS_API int kvs_backend_open(const struct kvs_backend_config *cfg, struct kvs_backend **out);

/*
 * Close a backend (NULL is a no-op).  Transfers in flight are finished first
 * (call it from the issuing thread: the io_uring engine reaps them there); a
 * partially dumped block is discarded (its temp file removed).
 * Blocks: until in-flight transfers end.  Ownership: frees the handle.
 */
KVS_API void kvs_backend_close(struct kvs_backend *b);

/*
 * Whether the backend holds block (posix: its block file exists, holds all its
 * shards and has a valid header of this block and geometry: a file a read would
 * refuse is absent, with a rate-limited warning; redis: every shard's key
 * exists, values are not read: a mismatched one fails its read instead).
 * Returns 1 present, 0 absent, or a negative errno.  Blocks: an open and a read
 * of the file's header (posix) or a round trip (redis).  Ownership: none.
 */
KVS_API int kvs_backend_lookup(struct kvs_backend *b, const struct kvs_block_id *block);

/* kvs_backend_lookup_batch() flags */
#define KVS_BACKEND_LOOKUP_PREFIX (1u << 0) /* only the leading run of hits matters */

/*
 * kvs_backend_lookup for many blocks: on entry hits[i] true means "known present"
 * (e.g. in the cache: not asked), false "ask the backend"; on return hits[i] says
 * whether block i is present.  A backend with a batch lookup (redis: pipelined
 * EXISTS) answers every asked block in one round trip; the others are asked block
 * by block.  With KVS_BACKEND_LOOKUP_PREFIX every entry after the first miss is
 * false on return (a block-by-block lookup stops asking there).
 * Returns the number of entries true on return (with PREFIX: the length of the
 * leading run), or a negative errno (-EINVAL: NULL, n > INT32_MAX, unknown flags;
 * the backend's: hits[] then unspecified).  Blocks: one round trip (batch) or a
 * lookup per asked block.  Ownership: blocks and hits (n entries) are the caller's.
 */
KVS_API int kvs_backend_lookup_batch(struct kvs_backend *b, const struct kvs_block_id *blocks,
				     size_t n, uint32_t flags, bool *hits);

/*
 * Queue a read of io->len bytes at io->offset of shard io->shard into io->buf.
 * Returns 0 (one completion with io->token follows), -EINVAL (bad shard, range,
 * flags or O_DIRECT alignment), -EAGAIN (queue_depth transfers in flight: poll
 * first), -ENOENT (block absent: no completion follows), posix: -KVS_ECONFIG
 * (the block file was stored with another geometry or layout_tag: logged with
 * both) or -EIO (the file at the block's path has no valid header for this block:
 * logged with its path), or another negative errno.  (redis finds those out
 * from the value: its read completes with -KVS_ECONFIG or -EIO.)
 * Blocks: may open the block file and read its header.  Ownership: buf stays
 * the caller's and must stay valid until the completion is reaped; io itself
 * may be reused at once.
 */
KVS_API int kvs_backend_submit_read(struct kvs_backend *b, const struct kvs_backend_io *io);

/*
 * Advice: blocks (n of them, the nearest first) will be read soon, so the
 * backend may start what must precede their first read while the transfers in
 * flight run.  posix opens each block's file and reads and checks its header on
 * a thread of its own (the nearest 16 blocks not yet read; a hint beyond
 * them is dropped), so the first kvs_backend_submit_read of the block finds the
 * file open instead of waiting for its header behind the reads already queued
 * at the disk (docs/io.md, "Open-ahead").  Its errors stay the submit's: a
 * block found absent or refused ahead is opened again, and judged, by the
 * submit.  Other built-in backends ignore it (fault passes it to its inner one).
 * ABI 1.3.
 * Returns 0, or -EINVAL (b NULL, or blocks NULL with n > 0).  Blocks: no (posix:
 * a mutex shared with its opener thread, started by the first hint).  Call it
 * from the issuing thread.  Ownership: blocks is read during the call only.
 */
KVS_API int kvs_backend_hint_read(struct kvs_backend *b, const struct kvs_block_id *blocks,
				  size_t n);

/*
 * Queue a write of a whole shard (io->offset 0, io->len shard_bytes) of a block
 * being dumped.  The block becomes visible to lookup and reads when every shard of
 * it has been written: the completion of the write that finishes the block arrives
 * after the rename (and fsync).  A failed write discards the block's partial dump.
 * Returns as kvs_backend_submit_read.  Blocks: may create the block's temp
 * file (posix: one openat, once per block; its header, the data and the fsync,
 * close and rename are written through the engine).  Ownership: as
 * kvs_backend_submit_read.
 */
KVS_API int kvs_backend_submit_write(struct kvs_backend *b, const struct kvs_backend_io *io);

/*
 * Reap up to max completions, waiting up to timeout_ns for the first.
 * Returns the number reaped (0 after the timeout), or a negative errno (-EINVAL
 * for max = 0 or out = NULL).  Blocks: up to timeout_ns.  Ownership: out is the
 * caller's.
 */
KVS_API int kvs_backend_poll(struct kvs_backend *b, struct kvs_backend_completion *out,
			     uint32_t max, uint64_t timeout_ns);

/*
 * The backend's wait descriptor (see "Waiting" above): sleep until it is readable
 * (poll(2) for POLLIN, or in an epoll(7) set beside other descriptors), then reap
 * with kvs_backend_poll(b, out, max, 0).  Readable no later than that poll would
 * return >= 1; once a poll has returned fewer completions than asked for, not
 * readable again until a new completion may be ready.  The first call may set the
 * descriptor up (a timerfd, an epoll set); later calls return the same one.
 * Call it from the issuing thread.
 * Returns the descriptor (>= 0), -EOPNOTSUPP (this backend has none: a user table
 * without wait_fd, io_uring refused the eventfd registration (logged at open), a
 * fault backend whose inner one has none; sleep in kvs_backend_poll(timeout)
 * instead), -EINVAL (b is NULL), or another negative errno (-EMFILE, -ENOMEM:
 * setting it up failed; nothing changed, a later call may try again).
 * Blocks: no.  Ownership: the backend's: never read, write or close it; it is
 * closed by kvs_backend_close (remove it from an epoll set before).
 */
KVS_API int kvs_backend_wait_fd(struct kvs_backend *b);

/*
 * Register memory regions (e.g. the data segments) for zero-copy transfers: with
 * io_uring, as fixed buffers, pinned chunk by chunk (4 MiB or more) on the first
 * transfer into each chunk, which goes out plain; later ones use READ_FIXED /
 * WRITE_FIXED.  Only the first chunk is pinned here, so a RLIMIT_MEMLOCK too
 * low for any shows now; one that runs out later is logged once (a WARNING) and
 * the rest is served plain.  kvs_backend_info says how much is pinned.  Call
 * before the first submit (from any thread) or from the issuing thread; a new
 * call replaces the regions.
 * Transfers outside the regions still work.  A backend without the feature returns 0.
 * Returns 0 or a negative errno (-ENOMEM: RLIMIT_MEMLOCK too low).
 * Blocks: while the kernel pins the first chunk.  Ownership: the regions stay the
 * caller's and must outlive the handle (or the next registration).
 */
KVS_API int kvs_backend_register_buffers(struct kvs_backend *b,
					 const struct kvs_backend_buffer *bufs, uint32_t n);

/*
 * Describe the backend in use: kind, posix engine, whether io_uring was refused
 * (fallback) and why, O_DIRECT alignment.  Returns 0 or -EINVAL (NULL argument).
 * Blocks: no.  Ownership: *info is the caller's.
 */
KVS_API int kvs_backend_info(struct kvs_backend *b, struct kvs_backend_info *info);

/* ------------------------------------------------------------------------ */
/* Store: the pipeline an inference engine calls (store/)             */

/*
 * A store is one rank's pipeline over the shared cache, a backend and a copy
 * engine (docs/store.md, "A rank's pipeline").  kvs_store_load() takes a task (a list of shards, each
 * with the device addresses of its tensors) and returns at once with a task id;
 * two threads of the store then run it:
 *
 *   dispatcher  visits the tasks round-robin, a few shards each (so a small task
 *               is never stuck behind a big one), each task's shards in rotated
 *               order (rank r = device_id % local_rank_size starts at slice r and
 *               strides by local_rank_size, so the ranks of a node own different
 *               shards at the same moment); pins each slot and, as its owner,
 *               queues the backend read at once (reads before block writes);
 *               publishes READY/FAILED when the read completes (peers never wait
 *               for this rank's copier) and in idle time preallocates the next
 *               shard of the block.  It is the backend's only issuer, and keeps at
 *               most a pin budget pinned: slot_count / (2 * local_rank_size), at
 *               most 2048, so a task of any size completes on any cache.
 *   copier      waits for any of the visited shards to be READY (futex;
 *               wait-for-any), copies each into its tensors, syncs the copy
 *               engine once per pass of copies, then finishes each shard and
 *               releases its slot.
 *
 * Dumps go the other way (docs/store.md, "Dumps"): a shard READY in the cache is
 * in the backend already and is skipped; one being filled by another rank is
 * waited for (and refilled by this dump if that fill fails: the dump holds the
 * bytes); an owned one is gathered from the device and published DIRTY (valid,
 * not yet durable).  Each block being dumped has a claim in shared memory that
 * counts its distinct dumped shards, from any rank and any number of tasks; when
 * the block is complete one rank of those that dumped it writes it whole to the
 * backend, from the cache, and ends the claim; a writer that dies is replaced by
 * a survivor.  With dump_wait=durable (the default) a dump reports 0 only once
 * its blocks are in the backend.
 *
 * A watcher store (cache.device_id = -1) has no threads: lookups and stats only.
 *
 * Threads.  Every kvs_store_* call is safe from any thread; a task id may be
 * checked or waited on by one thread at a time.  Tasks complete in any order.
 */

/* kvs_store_config.copy_engine */
enum kvs_copy_engine_kind {
	KVS_COPY_ENGINE_AUTO = 0, /* cuda when a device is usable, else host (logged) */
	KVS_COPY_ENGINE_HOST = 1, /* device addresses are host pointers (memcpy) */
	KVS_COPY_ENGINE_CUDA = 2, /* cuda or an error */
};

/* kvs_store_config.dispatch_order */
enum kvs_dispatch_order {
	KVS_DISPATCH_ROTATED = 0, /* rank r starts at slice r (default) */
	KVS_DISPATCH_NATURAL = 1, /* every rank in task order: a benchmark baseline only */
};

/* kvs_store_config.dump_wait: when a dump task completes. */
enum kvs_dump_wait {
	KVS_DUMP_WAIT_DURABLE = 0, /* every block of the task is in the backend (default) */
	KVS_DUMP_WAIT_CACHED = 1,  /* the shards are in the shared cache (DIRTY or READY) */
};

/* Longest backend_roots string (without NUL). */
#define KVS_STORE_ROOTS_MAX 1023
/* CPUs kvs_store_config.cpu_affinity can name. */
#define KVS_STORE_MAX_CPUS 1024

struct kvs_store_config {
	struct kvs_cache_config cache;     /* unique_id, device_id, geometry, placement, waiting */
	struct kvs_backend_config backend; /* kind and its options; shard_bytes,
					      shards_per_block and the tensor table are
					      the cache's (set at open); layout_tag is
					      passed on as given */
	uint64_t capacity_bytes;   /* > 0: cache.slot_count = capacity_bytes / slot_bytes */
	uint64_t block_bytes;      /* > 0: cache.shards_per_block = block_bytes / slot_bytes */
	uint64_t tensor_bytes;     /* > 0: the shard is slot_bytes / tensor_bytes equal tensors */
	uint64_t timeout_ns;       /* a task's deadline, from submit (default 10 s) */
	uint64_t copy_delay_ns;    /* added before every shard copy (benchmarks: a slow copier) */
	uint32_t copy_engine;      /* enum kvs_copy_engine_kind (default auto) */
	uint32_t dispatch_order;   /* enum kvs_dispatch_order (default rotated) */
	uint32_t dump_wait;        /* enum kvs_dump_wait (default durable) */
	uint32_t prealloc;         /* 1: preallocate shard + 1 in idle time (default 1) */
	uint32_t share_buffer;     /* 0: a cache private to this rank (default 1: shared) */
	uint32_t waiting_queue_depth; /* tasks not yet reaped by check/wait, 1..4096 (64) */
	uint32_t running_queue_depth; /* shards between dispatcher and copier, 1..65536 (256) */
	uint32_t cache_stream_number; /* copy streams, 1..16 (1): the cuda engine's CUDA
					 streams; the host engine's threads sharing each
					 copy pass of 512 KiB or more (the copier and
					 n - 1 more, started at the first such pass) */
	uint64_t cpu_affinity[KVS_STORE_MAX_CPUS / 64]; /* CPUs of the store's threads;
							   all zero = not pinned */
	char backend_roots[KVS_STORE_ROOTS_MAX + 1]; /* posix roots, ':'-separated; used when
						        backend.nroots is 0 */
	kvs_log_fn log;            /* optional; also used by the cache and backend when
				      their own log is NULL */
	void *log_arg;
	uint64_t register_chunk_bytes; /* the data plane is registered with the copy engine
					  in chunks of this size, on a background thread
					  (default 4 GiB; 1 MiB .. 32 GiB; rounded up to the
					  segment's page size) */
	uint64_t register_delay_ns; /* host engine test mode: added to every chunk's
				       registration (default 0, <= 1 s; copy_engine=host only) */
	uint64_t copy_land_delay_ns; /* host engine test mode: copies land this long after
				       they are queued, as a busy or stuck GPU's do, so a
				       copy engine sync can time out (default 0, <= 10 s;
				       copy_engine=host only) */
	uint64_t reserved[5];      /* must be zero */
};

/* Fill cfg with defaults (cache and backend defaults included; backend kind
 * posix).  Never fails, never blocks. */
KVS_API void kvs_store_config_init(struct kvs_store_config *cfg);

/*
 * Apply "key=value,key=value" to cfg (over what it holds).  Keys (the names
 * inference engines already pass, plus kvshare's own; docs/store.md,
 * "Configuration"):
 *   unique_id device_id local_rank_size shard_size block_size tensor_size
 *   tensor_size_list(a:b:..) cache_buffer_capacity_gb(decimal GiB) reserved_slots
 *   share_buffer_enable persist hugetlb(auto|required|off) numa(auto|off|required)
 *   numa_node wait(auto|futex|spin) spin_us backend(posix|none|latency|redis)
 *   backend_roots(/a:/b) io_engine(auto|uring|pool) io_direct io_queue_depth
 *   io_threads fsync latency_us latency_queue_depth fault_error_ppm
 *   redis_endpoints(h:p;/sock) redis_db redis_user redis_password
 *   redis_password_file redis_connections redis_connect_timeout_ms
 *   redis_command_timeout_ms redis_key_prefix redis_ttl_s redis_start_degraded
 *   redis_cluster redis_wait_replicas
 *   layout_tag fault_short_ppm fault_delay_us fault_seed copy_engine(auto|host|cuda)
 *   cache_stream_number dispatch_order(rotated|natural) dump_wait(durable|cached)
 *   prealloc waiting_queue_depth running_queue_depth timeout_ms copy_delay_us
 *   cpu_affinity_cores(2:4-7) prefault_threads register_chunk_size
 *   register_delay_us copy_land_delay_us
 * Booleans: 1/0, true/false, on/off, yes/no.  Sizes: bytes, with an optional
 * k/m/g suffix (KiB, MiB, GiB).  Any fault_* value wraps the backend in the
 * fault backend (a rate or delay > 0, or a fault_seed other than its default 1:
 * a seed alone gives a wrapper that injects nothing).  Each key at most once per
 * string.
 * Returns 0; -EINVAL for the first bad item (unknown key, with a "did you mean"
 * where one is close; duplicate key; empty or malformed value; a number out of
 * range or overflowing): logged through cfg->log naming the key, and described
 * in err (NUL-terminated, truncated to errlen; err may be NULL).  On error cfg
 * may hold the items before the bad one.  Blocks: no.
 */
KVS_API int kvs_store_config_parse(struct kvs_store_config *cfg, const char *kv, char *err,
				   size_t errlen);

struct kvs_store;

/*
 * Open a store: resolve the derived sizes; open the copy engine (ranks) and the
 * backend first, so that a missing device, a missing or unwritable root or an
 * unreachable Redis is an error before any memory is allocated; then open the
 * cache (create or attach; a creation the node cannot hold is refused before
 * anything is allocated), register the data segments with the backend, start
 * the dispatcher, the copier and the copy engine's background registration
 * (ranks; a watcher starts nothing; kvs_store_ready says when it is done: the
 * store serves before).  cfg is copied.
 * Returns 0 and *store; -EINVAL (a bad field, logged by name); -ENODEV (no CUDA
 * device for copy_engine=cuda: set auto or host); -ENOMEM / -ENOSPC (the cache
 * does not fit the node now: the log names the limit); kvs_cache_open's and
 * kvs_backend_open's errors.  Blocks: as kvs_cache_open and kvs_backend_open.
 * Ownership: *store until kvs_store_close(); NULL on failure.
 */
KVS_API int kvs_store_open(const struct kvs_store_config *cfg, struct kvs_store **store);

/*
 * Check a store configuration without opening the store: what kvs_store_open
 * checks before it allocates anything -- the fields and derived sizes, and the
 * backend, opened with them and closed again (posix: the roots exist and are
 * writable; redis: every endpoint answers and accepts the credentials, unless
 * redis_start_degraded).  Not the copy engine, no cache (nothing attached,
 * created or allocated, no thread started).  For a caller that wants a bad
 * configuration refused before it does costly work (an engine loading its
 * weights, before it knows its geometry): a cfg without shard_size and
 * block_size is checked with a 1 MiB shard per block.  Its ERROR lines are in
 * kvs_store_last_error, as an open's.
 * Returns 0; kvs_store_open's errors of those steps (-EINVAL a bad field,
 * kvs_backend_open's).  Blocks: as kvs_backend_open (redis: its connect and
 * command timeouts).
 */
KVS_API int kvs_store_config_check(const struct kvs_store_config *cfg);

/*
 * The ERROR lines the calling thread's last kvs_store_open (or
 * kvs_store_config_check) logged, in order,
 * joined by '\n' (at most 4 KiB), whether or not a log callback was set; "" when
 * that open succeeded or none ran.  What a C caller without a log callback
 * reads after a failed open (like dlerror); valid until the thread's next
 * kvs_store_open.  Never NULL; never blocks.
 */
KVS_API const char *kvs_store_last_error(void);

/*
 * Close: new tasks are refused; tasks still running end by their deadlines
 * (each reports then); backend transfers still in flight get timeout_ms more to
 * drain; the threads stop (a registration in progress finishes its current
 * chunk, then everything registered is unregistered: process-local, no other
 * rank waits); the backend, copy engine and cache are closed.  A transfer that
 * outlives that bound (a hung mount) is left to drain in the background: close
 * logs so and returns, the slots of that transfer stay pinned until it ends, and
 * the store's last thread closes the rest then.  No log callback (the store's,
 * the cache's, the backend's) is called once close has returned.  Task ids not
 * yet reaped become invalid.  In a fork()ed child, close frees the child's copy
 * of the store and closes its copy of the cache only (the threads, the backend
 * and the copy engine are the parent's).  NULL is a no-op.
 * Blocks: until the tasks' latest deadline plus timeout_ms, at most.
 *
 * Dumps: close has the complete blocks the node's cache holds dumped written
 * (by the rank a block designates, if alive, else by this one) within that
 * same bound; what it could not write
 * stays DIRTY in the cache, which is then kept (never removed while it holds
 * such shards) for the next rank or adopter to write.  It returns nothing: a
 * caller that must know its cached dumps reached the backend before it goes
 * calls kvs_store_flush first.
 */
KVS_API void kvs_store_close(struct kvs_store *store);

/*
 * Wait until every block this rank acknowledged a dump_wait=cached dump of is
 * in the backend (whoever writes it), writing the complete ones meanwhile
 * without the designated writers' grace.  Returns 0 once none is left;
 * -ETIMEDOUT when timeout_ns passed first (they are still written: the cache
 * keeps them DIRTY); an error of a block that left without reaching the
 * backend since the last call (its write given up: the backend's error;
 * -KVS_EINCOMPLETE: a shard of it was never dumped by any rank, and the
 * dumped ones were dropped at their protection's end), reported once, the
 * others still waited for first; -EINVAL (store NULL).  *pending (if not NULL):
 * how many such blocks are left.  A watcher, or a rank with no cached dump,
 * returns 0 at once.  Durable dumps need no flush: they complete when stored.
 * Blocks: up to timeout_ns (a condition wait, no polling).
 */
KVS_API int kvs_store_flush(struct kvs_store *store, uint64_t timeout_ns, uint64_t *pending);

/* One tensor of a shard on this rank's device. */
struct kvs_store_tensor {
	uint64_t addr;   /* device address (a host address with copy_engine host) */
	uint64_t offset; /* head slice: first byte of the stored tensor this rank copies (0) */
	uint64_t len;    /* bytes copied from offset; 0 = to the end of the stored tensor */
};

/* One shard of a task. */
struct kvs_store_shard {
	struct kvs_block_id block;
	uint32_t shard;          /* < shards_per_block */
	uint32_t tensor_count;   /* entries of tensors: the cache's tensor count (1 when the
				    shard is one tensor) */
	const struct kvs_store_tensor *tensors; /* copied at submit */
};

/*
 * Load n shards into their tensors.  Any n: the pipeline keeps only its pin
 * budget of the task's slots pinned at once (each is released once its copy is
 * synced).  Returns 0 and *task; -EINVAL (n == 0, a shard or tensor range out of
 * bounds, tensor_count not the cache's); -EOPNOTSUPP (watcher); -EAGAIN
 * (waiting_queue_depth tasks outstanding: check or wait first; nothing queued);
 * -ENOMEM.  Blocks: no (one allocation per task, none per shard).
 * Ownership: shards and their tensors are copied.
 */
KVS_API int kvs_store_load(struct kvs_store *store, const struct kvs_store_shard *shards,
			   uint32_t n, uint64_t *task);

/*
 * kvs_store_load of the stored tensors [first_tensor, first_tensor + tensor_count)
 * of each shard only: the others are not copied, and their entries in a shard's
 * tensors[] (still the cache's tensor count of them) are not read.  A shard whose
 * tensors are an engine's layers can so be loaded layer by layer, a task per layer
 * or per group of layers, each waited for before its layers are computed.  A
 * shard missing from the cache is read whole from the backend by its first task;
 * the later ones find it there.  Such tasks are sequenced: a store visits them
 * one after another in submit order (the next one's visits begin once the one
 * before has pinned every shard; its copies may still run), so the first range
 * is not held back by the later ones, while other tasks share the round-robin
 * with them.  Returns as kvs_store_load; -EINVAL also for an empty range or one
 * past the cache's tensor count.  Blocks: no.
 * Ownership: as kvs_store_load.
 */
KVS_API int kvs_store_load_tensors(struct kvs_store *store, const struct kvs_store_shard *shards,
				   uint32_t n, uint32_t first_tensor, uint32_t tensor_count,
				   uint64_t *task);

/*
 * Dump n shards from their tensors into the cache and the backend; cuda_event,
 * when not NULL, is a cudaEvent_t the gathers wait for (the caller's compute);
 * NULL with the host engine.  The shards of a block may come from any ranks and
 * any number of tasks (layer by layer, each rank its slice, duplicates): the
 * block is written once all its shards were dumped.  Completes per
 * cfg->dump_wait: durable (default) once every block of the task is in the
 * backend, whoever wrote it (a writer that died is replaced); cached once its
 * shards are in the cache, and then written: a block complete in the cache is
 * written whatever closes or kills follow, a failed write retried for
 * timeout_ms and then given up with an ERROR line (docs/store.md, "Dumps");
 * kvs_store_flush waits for those.  Every shard of a block must be dumped
 * within timeout_ms of the others: a block incomplete a second past its dumps'
 * deadlines is dropped (a WARN line).  The tensors are read until the task
 * completes (a shard of a block being dropped meanwhile is gathered again).
 * Returns as kvs_store_load.  Head slices are not dumped: every tensor must be
 * whole (offset 0, len 0 or the tensor's size), else -EINVAL.  The task's
 * outcome (kvs_store_check) may also be -KVS_EINCOMPLETE (durable: a block of
 * it was not completed on this node, by any rank, before the deadline, or was
 * dropped; kvs_store_lookup says whether another node stored it), the last
 * failed write attempt's error or -ETIMEDOUT (the block's write did not finish
 * by the deadline; it goes on).
 */
KVS_API int kvs_store_dump(struct kvs_store *store, const struct kvs_store_shard *shards,
			   uint32_t n, void *cuda_event, uint64_t *task);

/* Bring every shard of n blocks into the shared cache (owner reads only, no
 * copy; a slot's pin is dropped at READY).  Its gets may take the reserved pool
 * (reserved_slots).  Returns as kvs_store_load. */
KVS_API int kvs_store_prefetch(struct kvs_store *store, const struct kvs_block_id *blocks,
			       uint32_t n, uint64_t *task);

/*
 * Where task is.  Returns 1 (running), 0 (done, every shard succeeded), or the
 * task's first error (< 0: the backend's; -KVS_EOWNERDEAD; -ETIMEDOUT for a task
 * past its deadline, reported at the deadline whether or not a transfer of it is
 * still in flight (that transfer drains into the cache, its slot pinned until
 * then); -KVS_EINCOMPLETE for a durable dump, see kvs_store_dump; -ENOSPC when
 * no slot could be taken for a shard (every slot of its pool pinned by the
 * node's tasks or held DIRTY by dumps whose blocks are not in the backend
 * yet)).  A finished task is reaped by the call
 * that reports it (its id is then unknown).  -ENOENT: no such task.
 * Blocks: never.
 *
 * The copy engine: a sync that times out (a stuck GPU) fails the shards of that
 * pass -ETIMEDOUT while their copies may still land, so the tensors of a load
 * that failed that way may still be written until the engine drains (logged;
 * their slots stay pinned until then, so no other rank's data is touched).
 */
KVS_API int kvs_store_check(struct kvs_store *store, uint64_t task);

/* As kvs_store_check, but sleeps (futex; no polling) until the task finishes
 * or timeout_ns passes (then 1, the task still running and not reaped). */
KVS_API int kvs_store_wait(struct kvs_store *store, uint64_t task, uint64_t timeout_ns);

/*
 * For each of n blocks, hits[i] = whether every shard of it is in the shared
 * cache (READY) or else in the backend.  Returns the number of hits; -EINVAL;
 * the cache's or backend's errors.  Works from a watcher.  Blocks: one bucket
 * lock at a time, then kvs_backend_lookup_batch for the blocks the cache lacks
 * (one round trip for them all with a batch backend such as redis; else a
 * backend lookup per block).
 */
KVS_API int kvs_store_lookup(struct kvs_store *store, const struct kvs_block_id *blocks,
			     size_t n, bool *hits);

/* Length of the longest prefix of blocks that kvs_store_lookup would hit
 * (each block in the cache or else in the backend; stops at the first miss).
 * Returns 0..n or as kvs_store_lookup. */
KVS_API int kvs_store_lookup_prefix(struct kvs_store *store, const struct kvs_block_id *blocks,
				    size_t n);

/* Buckets of kvs_store_stats.task_lat_us: bucket i counts tasks that took
 * [2^i, 2^(i+1)) microseconds from submit to completion (bucket 0: < 2 us). */
#define KVS_STORE_LAT_BUCKETS 32

/* A rank's store counters (shared memory: readable by watchers). */
struct kvs_store_stats {
	uint64_t tasks_load, tasks_dump, tasks_prefetch; /* submitted */
	uint64_t tasks_failed;    /* finished with an error (timeouts included) */
	uint64_t tasks_timedout;  /* finished past their deadline */
	uint64_t shards_loaded;   /* copied into tensors (or prefetched) */
	uint64_t shards_dumped;   /* gathered into the cache by this rank */
	uint64_t dump_dedup;      /* dump shards not gathered: READY (in the backend) or
				     DIRTY (a peer's dump, counted with ours) */
	uint64_t load_hits;       /* load shards READY at get */
	/* Each failure counter is a subset of an attempt counter, in every
	 * snapshot (failures are counted after their attempt and read before it):
	 * read_errors <= owner_reads, write_errors <= backend_writes,
	 * tasks_timedout <= tasks_failed <= tasks_load + tasks_dump +
	 * tasks_prefetch.  A dump's shard is gathered (shards_dumped) or found
	 * (dump_dedup); a failed one fails its task (tasks_failed). */
	uint64_t owner_reads;     /* backend reads attempted as owner: submitted, or
				     refused at submit */
	uint64_t read_errors;     /* of those, reads that failed, at submit or at
				     completion (slot published FAILED) */
	uint64_t backend_writes;  /* backend writes attempted: submitted, or refused at
				     submit (backend_writes - write_errors succeeded) */
	uint64_t write_errors;    /* of those, writes that failed, at submit or at
				     completion */
	uint64_t prealloc;        /* slots preallocated */
	uint64_t prealloc_hits;   /* owned gets of a key this rank preallocated */
	uint64_t copy_bytes;      /* bytes copied by the copier (both directions) */
	uint64_t copy_ns;         /* time in the copy engine (queue + sync) */
	uint64_t task_lat_us[KVS_STORE_LAT_BUCKETS];
	/* Registration of the data plane with the copy engine (background, in chunks;
	 * see kvs_store_ready). */
	uint64_t register_total_bytes; /* bytes the rank registers: its data segments */
	uint64_t registered_bytes;     /* registered so far */
	uint64_t register_ns;          /* time the registration calls took */
	uint64_t staged_shards;        /* shard copies made through the staging buffer
					  (their slot not registered yet) */
	uint64_t task_lat_ns_sum;      /* the time of the tasks task_lat_us counts, summed */
	double register_ms_per_gib;    /* register_ns per GiB registered, in ms */
	uint32_t ready;                /* 1: everything registered (a rank: its segments;
					  the node: every live GPU rank's; 1 with none) */
	uint32_t pad;
	uint64_t reserved[1];
};

/*
 * Counters of rank-table entry rank (kvs_cache_rank of its store's cache), or
 * KVS_STATS_NODE for the node total (departed ranks included).  Returns 0;
 * -EINVAL.  Never blocks (counters read racily).
 */
KVS_API int kvs_store_stats(struct kvs_store *store, int rank, struct kvs_store_stats *stats);

/*
 * Whether this rank's whole data plane is registered with its copy engine (the
 * tier is pinned: every copy is direct DMA).  Registration runs on a background
 * thread from kvs_store_open on, chunk by chunk (register_chunk_bytes), the
 * segment of the rank's NUMA node first; loads and dumps are served from the
 * first moment: a shard whose slot is not registered yet is copied through a
 * small pinned staging buffer, and directly once its chunk is registered.
 * Waits up to timeout_ns (0: just ask) for registration to finish.
 * Returns 1 ready; 0 not yet (still registering at the timeout); the
 * registration's error (< 0: the engine refused a chunk, e.g. -ENOMEM when
 * RLIMIT_MEMLOCK is too low; the log names it; registration stops there and the
 * rest of the tier keeps being served through the staging buffer); -EINVAL
 * (NULL); -EOPNOTSUPP (a watcher registers nothing).
 * Blocks: up to timeout_ns (condition variable, no polling).
 */
KVS_API int kvs_store_ready(struct kvs_store *store, uint64_t timeout_ns);

/* The copy engine the store copies with: KVS_COPY_ENGINE_HOST or
 * KVS_COPY_ENGINE_CUDA (copy_engine=auto resolved at open); -EOPNOTSUPP for a
 * watcher (it copies nothing); -EINVAL for NULL.  Never blocks. */
KVS_API int kvs_store_copy_engine(struct kvs_store *store);

/* The store's cache (for kvs_cache_stats, kvs_cache_rank, kvs_cache_check).
 * Owned by the store: never close it.  Returns NULL for NULL. */
KVS_API struct kvs_cache *kvs_store_cache(struct kvs_store *store);

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_H */
