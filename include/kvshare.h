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
	 * values.  Give every rank the same configuration, or another unique_id. */
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
};

/* A static, never-NULL description of a return code (negative errno, -KVS_E*, or 0). */
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

/* Huge pages for the data plane (DESIGN.md §7). */
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

/* [core/ section: declarations of DESIGN.md §8 "cache" land here.] */

/* ------------------------------------------------------------------------ */
/* Backend stores (io/)                                                      */

/* [io/ section: struct kvs_backend_ops and the backend calls land here.] */

#ifdef __cplusplus
}
#endif

#endif /* KVSHARE_H */
