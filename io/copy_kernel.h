/*
 * io/copy_kernel.h — the interface between the cuda copy engine (copy_cuda.c, C)
 * and its gather/scatter kernel (copy_kernel.cu, compiled by nvcc).  Plain C types
 * only, so both compilers see the same struct; private to io/copy*.
 *
 * A launch copies up to KVS_COPY_KERNEL_MAX_SEGS segments, each len bytes from
 * src to dst, both device-visible addresses (device memory, or registered host
 * memory through its device mapping).  The batch is passed by value as the
 * kernel's parameter (128 x 24 + 8 = 3080 bytes, under the 4 KiB limit every
 * architecture and driver accepts), so there is no descriptor buffer whose
 * lifetime would have to outlive the launch: the caller may reuse it at once.
 */
#ifndef KVS_IO_COPY_KERNEL_H
#define KVS_IO_COPY_KERNEL_H

#include <stdint.h>

#define KVS_COPY_KERNEL_MAX_SEGS 128

struct kvs_copy_kseg {
	uint64_t src;
	uint64_t dst;
	uint64_t len; /* > 0 */
};

struct kvs_copy_kbatch {
	struct kvs_copy_kseg seg[KVS_COPY_KERNEL_MAX_SEGS];
	uint32_t n; /* 1..KVS_COPY_KERNEL_MAX_SEGS */
	uint32_t pad;
};

#ifdef __cplusplus
extern "C" {
#endif

/* Queue one launch copying b's segments on stream (a cudaStream_t) of the current
 * device.  Returns a cudaError_t (0 = cudaSuccess: queued). */
int kvs_copy_kernel_launch(const struct kvs_copy_kbatch *b, void *stream);

#ifdef __cplusplus
}
#endif

#endif
