/*
 * io/copy_kernel.cu — the cuda copy engine's gather/scatter kernel.
 *
 * One launch copies a whole shard's worth of small tensors: a DMA engine pays a
 * fixed cost per copy, while a kernel reading the slot through the device mapping
 * of the registered (pinned, mapped) host memory pays one launch for all of them
 * and keeps thousands of PCIe reads in flight.  It occupies SMs while it runs,
 * which the model's own kernels would use: the engine picks it only for many
 * small tensors (io/copy_cuda.c, docs/io.md "Copy engines").
 *
 * Grid: x = segment (one column of blocks per segment), y = part: a segment of
 * len bytes is cut into gridDim.y interleaved parts so a few large segments
 * still spread over the SMs; blocks whose part has nothing to do exit at once.
 * Each segment is copied in the widest unit both its ends share an alignment for
 * (16, 8, 4 bytes, else bytes): a byte head up to that alignment, the body in
 * units (4 loads in flight per thread before the stores), a byte tail.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "copy_kernel.h"

#define KVS_COPY_KERNEL_THREADS 256
/* Bytes one block should move: parts per segment = ceil(longest / this). */
#define KVS_COPY_KERNEL_PART_BYTES (32u << 10)
#define KVS_COPY_KERNEL_MAX_PARTS 1024u

template <typename T>
__device__ __forceinline__ void copy_units(unsigned char *__restrict__ dst,
					   const unsigned char *__restrict__ src, uint64_t len)
{
	const uint64_t w = sizeof(T);
	uint64_t head = (uint64_t)(-(uintptr_t)src) & (w - 1);

	if (head > len)
		head = len;

	const uint64_t nunits = (len - head) / w;
	const uint64_t tail = head + nunits * w;
	const uint64_t stride = (uint64_t)gridDim.y * blockDim.x;
	uint64_t i = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;

	if (blockIdx.y == 0) {
		for (uint64_t b = threadIdx.x; b < head; b += blockDim.x)
			dst[b] = src[b];
		for (uint64_t b = tail + threadIdx.x; b < len; b += blockDim.x)
			dst[b] = src[b];
	}

	const T *__restrict__ s = reinterpret_cast<const T *>(src + head);
	T *__restrict__ d = reinterpret_cast<T *>(dst + head);

	/* Four loads issued before the first store: more PCIe reads in flight. */
	for (; i + 3 * stride < nunits; i += 4 * stride) {
		T a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
		d[i] = a;
		d[i + stride] = b;
		d[i + 2 * stride] = c;
		d[i + 3 * stride] = e;
	}
	for (; i < nunits; i += stride)
		d[i] = s[i];
}

__global__ void __launch_bounds__(KVS_COPY_KERNEL_THREADS)
kvs_copy_kernel(const __grid_constant__ kvs_copy_kbatch b)
{
	const kvs_copy_kseg &g = b.seg[blockIdx.x];
	unsigned char *dst = reinterpret_cast<unsigned char *>(g.dst);
	const unsigned char *src = reinterpret_cast<const unsigned char *>(g.src);
	const uint64_t mis = g.src ^ g.dst;

	/* The choice depends only on the segment: uniform across the block. */
	if ((mis & 15) == 0)
		copy_units<uint4>(dst, src, g.len);
	else if ((mis & 7) == 0)
		copy_units<uint2>(dst, src, g.len);
	else if ((mis & 3) == 0)
		copy_units<uint32_t>(dst, src, g.len);
	else
		copy_units<unsigned char>(dst, src, g.len);
}

extern "C" int kvs_copy_kernel_launch(const struct kvs_copy_kbatch *b, void *stream)
{
	uint64_t longest = 0;
	uint64_t parts;

	if (b->n == 0 || b->n > KVS_COPY_KERNEL_MAX_SEGS)
		return (int)cudaErrorInvalidValue;
	for (uint32_t i = 0; i < b->n; i++)
		if (b->seg[i].len > longest)
			longest = b->seg[i].len;
	parts = (longest + KVS_COPY_KERNEL_PART_BYTES - 1) / KVS_COPY_KERNEL_PART_BYTES;
	if (parts < 1)
		parts = 1;
	if (parts > KVS_COPY_KERNEL_MAX_PARTS)
		parts = KVS_COPY_KERNEL_MAX_PARTS;

	dim3 grid(b->n, (unsigned)parts);
	kvs_copy_kernel<<<grid, KVS_COPY_KERNEL_THREADS, 0, (cudaStream_t)stream>>>(*b);
	return (int)cudaGetLastError();
}
