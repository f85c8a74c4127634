/*
 * io/copy.h — copy engines: move a slot's bytes between host memory and the
 * device tensors of one shard.
 *
 * A shard occupies one contiguous slot on the host and n tensors on the device
 * (DESIGN.md §1 "tensor sizes"): load scatters the slot into the tensors
 * (host-to-device), dump gathers the tensors into the slot (device-to-host).
 * Copies are queued asynchronously on the engine's stream; kvs_copy_sync() waits
 * for everything queued so far, up to a deadline.
 *
 * Engines:
 *   host  device addresses are plain host pointers; memcpy; complete at once.
 *         Used by CI and CPU-only runs (copy_engine=host).
 *   cuda  one CUDA stream per engine; per-tensor cudaMemcpyAsync for few or large
 *         tensors, cudaMemcpyBatchAsync (CUDA 12.8+ / 13 signature) for many small
 *         ones (measured on an H200: 128 x 32 KiB tensors at 10.7 GB/s per tensor
 *         against 53 GB/s batched).  Kernel variant only, built when the CUDA
 *         toolkit is found, over the static runtime: without a driver or GPU,
 *         open fails with -ENODEV and nothing else changes.
 *
 * An engine is used by one thread at a time (the copier); open/close are not
 * thread-safe with respect to the engine's other calls.
 */
#ifndef KVS_IO_COPY_H
#define KVS_IO_COPY_H

#include <stdint.h>

#include "common/log.h"

enum kvs_copy_kind {
	KVS_COPY_HOST = 1,
	KVS_COPY_CUDA = 2,
};

struct kvs_copy_opts {
	uint32_t kind;      /* enum kvs_copy_kind */
	int32_t device_id;  /* CUDA device ordinal (cuda engine) */
	const struct kvs_log *log;
};

struct kvs_copy_engine;

/* Open an engine.  Returns 0; -EOPNOTSUPP (cuda engine not built into this
 * variant); -ENODEV (no driver, no such device); -EINVAL; -ENOMEM.
 * Ownership: *out is the caller's, released by kvs_copy_close. */
int kvs_copy_open(const struct kvs_copy_opts *opts, struct kvs_copy_engine **out);

/* Close after waiting (bounded) for queued copies.  NULL is a no-op. */
void kvs_copy_close(struct kvs_copy_engine *eng);

/* "host" or "cuda". */
const char *kvs_copy_name(const struct kvs_copy_engine *eng);

/* Pin a host region for fast DMA (cudaHostRegister); a no-op for host.
 * Returns 0 or -errno.  Blocks: proportional to the region size. */
int kvs_copy_register(struct kvs_copy_engine *eng, void *base, uint64_t bytes);
int kvs_copy_unregister(struct kvs_copy_engine *eng, void *base);

/* Queue: tensor i (device address dst[i], bytes[i] bytes) receives the bytes of
 * src at offset bytes[0] + ... + bytes[i-1].  src must stay valid until the
 * next successful kvs_copy_sync.  Returns 0 or -errno (nothing queued on error
 * for the host engine; the cuda engine may have queued a prefix — sync first). */
int kvs_copy_h2d_scatter(struct kvs_copy_engine *eng, const void *src, const uint64_t dst[],
			 const uint64_t bytes[], uint32_t n);

/* Queue the reverse: dst at the same offsets receives tensor i (src[i]). */
int kvs_copy_d2h_gather(struct kvs_copy_engine *eng, void *dst, const uint64_t src[],
			const uint64_t bytes[], uint32_t n);

/* Wait for every copy queued so far.  Returns 0, -ETIMEDOUT at deadline_ns
 * (absolute CLOCK_MONOTONIC; the copies stay queued), or -EIO / -ENODEV when the
 * device reported an error (logged with CUDA's text). */
int kvs_copy_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns);

/* PCI bus id of a CUDA device ("0000:3b:00.0") for NUMA placement (numa/).
 * Returns 0; -EOPNOTSUPP without the cuda engine; -ENODEV. */
int kvs_copy_pci_bus_id(int32_t device_id, char *buf, uint32_t len);

#endif
