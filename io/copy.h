/*
 * io/copy.h — copy engines: move a slot's bytes between host memory and the
 * device tensors of one shard.
 *
 * A shard occupies one slot on the host and up to KVS_MAX_TENSORS tensors on the
 * device (tensor_count and tensor_bytes[]: docs/core.md, "Configuration").  A
 * copy is a list of segments, one per tensor: len bytes at host_off within the
 * slot <-> the device address dev.  Load scatters the slot into the tensors
 * (host-to-device), dump gathers the tensors into the slot (device-to-host).
 * The host side need not be contiguous: with head slices
 * (docs/store.md, "Head slices") each tensor copies a byte range of its stored
 * tensor, so host_off values are not sums of the previous lens, and segments
 * may leave gaps.
 *
 * Copies are queued asynchronously; kvs_copy_sync() waits for everything queued
 * so far, up to a deadline.  The vector calls (kvs_copy_h2dv / d2hv) take the
 * copies of many shards at once, each with its own host address.  The host bytes (and, for d2h, the device bytes) must
 * stay valid and unchanged until the next successful kvs_copy_sync().
 *
 * Engines:
 *   host  device addresses are plain host pointers; memcpy per segment; complete
 *         when the call returns.  Used by CI and CPU-only runs (copy_engine=host).
 *         With streams = N > 1, a vector call of at least 512 KiB is shared
 *         by the calling thread and N - 1 threads of the engine
 *         (io/copy_crew.c), started at the first such call.
 *         Its test mode land_delay_ns queues the copies instead and makes them
 *         land later on a thread of its own (sync waits for them, up to its
 *         deadline), so a timed-out sync is testable without a GPU.
 *   cuda  kernel variant only, built when the CUDA toolkit is found, over the
 *         static runtime: without a driver or GPU, open fails with -ENODEV and
 *         nothing else changes.  `streams` non-blocking CUDA streams; per call one
 *         of three strategies (docs/io.md "Copy engines" has the measurements and
 *         what is verified on hardware):
 *           memcpy  one cudaMemcpyAsync per segment, the segments spread over the
 *                   streams: few (< 4) or large (mean >= 1 MiB) segments, where a
 *                   copy engine already runs at the bulk ceiling;
 *           batch   one cudaMemcpyBatchAsync (CUDA 13 signature) on the next
 *                   stream: many mid-sized segments (mean 16 KiB .. 1 MiB; an H200
 *                   moved 128 x 32 KiB at 53 GB/s batched against 10.7 GB/s per
 *                   tensor and a 55 GB/s bulk ceiling);
 *           kernel  one launch of a gather/scatter kernel (io/copy_kernel.cu) over
 *                   the device mapping of the registered host memory, on the next
 *                   stream: many small segments (mean <= 16 KiB), when the host
 *                   range lies in one region registered through this engine.
 *         KVS_COPY_STRATEGY_AUTO picks by the call's segment count and mean size;
 *         the others force one strategy for every call (benchmarks, tests).
 *
 * Ordering: with streams = 1 the calls run in the order queued.  With more, calls
 * (and, for memcpy, segments) run on different streams concurrently: copies queued
 * between two syncs must not depend on each other (no copy reads what another
 * writes).  kvs_copy_wait_event() orders the copies queued after it behind the
 * caller's work, on every stream.
 *
 * Threads.  The copy calls (h2d, d2h, wait_event, sync, host_alloc/free) are
 * used by one thread at a time (the copier); register and unregister may run on
 * one other thread at the same time (the store registers the data plane in
 * chunks on a background thread while the copier serves).  open/close are not
 * thread-safe with respect to the engine's other calls.
 */
#ifndef KVS_IO_COPY_H
#define KVS_IO_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "kvshare.h" /* KVS_MAX_TENSORS */

enum kvs_copy_kind {
	KVS_COPY_HOST = 1,
	KVS_COPY_CUDA = 2,
};

/* kvs_copy_opts.strategy (cuda engine; the host engine accepts and ignores it). */
enum kvs_copy_strategy {
	KVS_COPY_STRATEGY_AUTO = 0,   /* by segment count and mean size (see above) */
	KVS_COPY_STRATEGY_MEMCPY = 1, /* cudaMemcpyAsync per segment */
	KVS_COPY_STRATEGY_BATCH = 2,  /* cudaMemcpyBatchAsync; per segment where the
					 driver refuses batches (logged once) */
	KVS_COPY_STRATEGY_KERNEL = 3, /* the copy kernel; the host range must lie in one
					 kvs_copy_register()ed region (else -EINVAL) */
};

/* Most CUDA streams of one engine (kvs_store_config.cache_stream_number). */
#define KVS_COPY_MAX_STREAMS 16

/* One tensor of a shard copy: len bytes at host_off within the slot <-> device address dev. */
struct kvs_copy_seg {
	uint64_t host_off;
	uint64_t dev;
	uint64_t len;
};

/* One copy of a vector call (kvs_copy_h2dv, kvs_copy_d2hv): len bytes at host
 * <-> device address dev.  A vector spans any number of slots: the store
 * queues a whole pass of shards in one call. */
struct kvs_copy_vec {
	void *host;
	uint64_t dev;
	uint64_t len;
};

/* Most copies of one vector call (>= KVS_MAX_TENSORS: any shard fits one). */
#define KVS_COPY_VEC_MAX 4096u

struct kvs_copy_opts {
	uint32_t kind;      /* enum kvs_copy_kind */
	int32_t device_id;  /* CUDA device ordinal (cuda engine) */
	uint32_t streams;   /* 1..16; 0 = 1 (cuda engine: CUDA streams; host engine:
			       threads sharing a large copy call) */
	const struct kvs_log *log;
	uint32_t strategy;  /* enum kvs_copy_strategy; 0 = auto.  After the first four
			       fields, so that an initializer of those means auto */
	uint64_t register_delay_ns; /* host engine test mode: every kvs_copy_register
				       takes this long (a stand-in for cudaHostRegister's
				       cost, so tests see registration in progress);
				       <= 1 s; the cuda engine refuses non-zero */
	uint64_t land_delay_ns;     /* host engine test mode: copies are queued and land
				       this long after the call, on a thread of the
				       engine, as a busy or stuck GPU's do: a sync can
				       time out with copies still to land; <= 10 s; the
				       cuda engine refuses non-zero */
};

/* Longest kvs_copy_opts.register_delay_ns and land_delay_ns. */
#define KVS_COPY_REGISTER_DELAY_MAX_NS 1000000000ull
#define KVS_COPY_LAND_DELAY_MAX_NS 10000000000ull

struct kvs_copy_engine;

/* Open an engine.  Returns 0; -EINVAL (kind, streams > 16, strategy,
 * register_delay_ns too long or given to the cuda engine); -EOPNOTSUPP
 * (cuda engine not built into this variant, or KVS_COPY_STRATEGY_KERNEL without
 * the kernel built in); -ENODEV (no driver, no such device); -ENOMEM.
 * Blocks: the cuda engine initialises the device context (first open: seconds).
 * Ownership: *out is the caller's, released by kvs_copy_close; NULL on failure. */
int kvs_copy_open(const struct kvs_copy_opts *opts, struct kvs_copy_engine **out);

/* Close after waiting (bounded, 10 s) for queued copies.  NULL is a no-op.
 * Regions still registered are unregistered. */
void kvs_copy_close(struct kvs_copy_engine *eng);

/* "host" or "cuda". */
const char *kvs_copy_name(const struct kvs_copy_engine *eng);

/* Pin a host region for fast DMA (cudaHostRegister, portable and mapped: the copy
 * kernel reads it through its device mapping); the host engine only waits
 * register_delay_ns.  Regions must not overlap; any number per engine (the
 * store registers its data segments in chunks).  unregister takes a base that
 * register was given.  Both may run concurrently with the copy calls (see
 * Threads).  Returns 0, -EINVAL (overlap, unknown base), -ENOMEM, or -errno.
 * Blocks: proportional to the region size (a host-wide driver lock in CUDA). */
int kvs_copy_register(struct kvs_copy_engine *eng, void *base, uint64_t bytes);
int kvs_copy_unregister(struct kvs_copy_engine *eng, void *base);

/* Page-locked host memory for staging copies of memory not registered yet
 * (cudaHostAlloc; plain memory for the host engine).  Returns 0 and *ptr;
 * -EINVAL; -ENOMEM.  Blocks: allocation (the cuda engine: pinning).
 * Ownership: *ptr until kvs_copy_host_free (before kvs_copy_close; sync first:
 * copies queued from it must have finished). */
int kvs_copy_host_alloc(struct kvs_copy_engine *eng, uint64_t bytes, void **ptr);
void kvs_copy_host_free(struct kvs_copy_engine *eng, void *ptr);

/*
 * Queue host-to-device: for each i, segs[i].len bytes at host + segs[i].host_off
 * go to device address segs[i].dev.  segs[] is read during the call only; host
 * must stay valid until the next successful kvs_copy_sync.  n = 0 is a no-op.
 * Returns 0; -EINVAL (eng or host NULL, segs NULL with n > 0, n > KVS_MAX_TENSORS,
 * a len or dev of 0, host + host_off + len or dev + len overflowing, a forced
 * kernel strategy with the host range outside the registered regions); -ENOMEM;
 * -EIO / -ENODEV from the device.  Arguments are validated before anything is
 * queued; after a device error the cuda engine may have queued a prefix (sync
 * before reusing the buffers).
 * Blocks: the host engine for the copy; the cuda engine for the submissions.
 */
int kvs_copy_h2d(struct kvs_copy_engine *eng, const void *host, const struct kvs_copy_seg segs[],
		 uint32_t n);

/* Queue device-to-host: host + segs[i].host_off receives segs[i].len bytes from
 * device address segs[i].dev (the host ranges of one call must not overlap).  Same
 * arguments, returns and blocking as h2d. */
int kvs_copy_d2h(struct kvs_copy_engine *eng, void *host, const struct kvs_copy_seg segs[],
		 uint32_t n);

/*
 * The same for a vector of copies, each with its own host address: the copies
 * of many shards in one call, so that what a call costs (the cuda engine's
 * submission, a batch or a kernel launch for the lot) is paid once per pass of
 * the copier, not per shard.  n <= KVS_COPY_VEC_MAX; the strategy is picked
 * for the whole vector (count and mean size).  Returns, validation (host not
 * NULL, len and dev > 0, no range wrapping) and blocking as h2d / d2h; d2h's
 * host ranges must not overlap.
 */
int kvs_copy_h2dv(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n);
int kvs_copy_d2hv(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n);

/* Make the copies queued after this call wait for event (a cudaEvent_t recorded by
 * the caller, e.g. after the kernels that produce a dump's tensors); NULL: no-op, 0.
 * Host engine: a non-NULL event is -EINVAL.  The cuda engine waits on every stream
 * (cudaStreamWaitEvent); the event may be re-recorded or destroyed after the call.
 * Returns 0, -EINVAL, or -EIO / -ENODEV from the device.  Blocks: no. */
int kvs_copy_wait_event(struct kvs_copy_engine *eng, void *event);

/* Wait for every copy queued so far on every stream.  Returns 0, -ETIMEDOUT at
 * deadline_ns (absolute CLOCK_MONOTONIC; the copies stay queued), or -EIO / -ENODEV
 * when the device reported an error (logged with CUDA's text).
 * Blocks: until the copies finish or the deadline (event polling, back-off <= 1 ms). */
int kvs_copy_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns);

/* PCI bus id of a CUDA device ("0000:3b:00.0") for NUMA placement (numa/).
 * Returns 0; -EOPNOTSUPP without the cuda engine; -ENODEV. */
int kvs_copy_pci_bus_id(int32_t device_id, char *buf, uint32_t len);

/*
 * The host engine's byte copies (io/copy_nt.c; also the baseline of
 * perf/hit_bench).  kvs_copy_nt_wanted: whether a call whose copies add up to
 * total bytes streams them (non-temporal stores; false where the CPU has none).
 * kvs_copy_bytes: memcpy, or with nt the destination's whole lines written with
 * non-temporal stores.  kvs_copy_nt_fence: after the last streamed copy of a
 * call, before anyone is told it landed (orders those weakly ordered stores).
 */
#define KVS_COPY_NT_MIN_BYTES (256u << 10)
bool kvs_copy_nt_wanted(uint64_t total);
void kvs_copy_bytes(void *dst, const void *src, size_t len, bool nt);
void kvs_copy_nt_fence(void);

#endif
