/*
 * io/copy_cuda.c — the CUDA copy engine (kernel variant, KVS_HAVE_CUDA).
 *
 * One non-blocking stream and one completion event per engine.  A scatter of
 * many small tensors goes through cudaMemcpyBatchAsync in a single call (one
 * driver submission instead of n); few or large tensors go per tensor through
 * cudaMemcpyAsync, which already runs at the bulk copy ceiling.  The threshold
 * below follows the H200 measurement in DESIGN.md §5 (32 KiB tensors: 10.7 GB/s
 * per tensor, 53 GB/s batched, 55 GB/s bulk).  If the driver refuses batched
 * copies (older driver: cudaErrorNotSupported / cudaErrorCallRequiresNewerDriver)
 * the engine drops to per-tensor copies for good and logs it once.
 *
 * The runtime is linked statically and loads libcuda.so on first use, so a
 * machine without a driver only sees -ENODEV from open.  cudaSetDevice is per
 * thread; every entry point sets it (cheap when already current) because the
 * engine may be opened on one thread and used on the copier thread.
 *
 * sync is bounded: it records the event and polls it with a short exponential
 * back-off up to the caller's deadline (cudaEventSynchronize cannot time out).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "io/copy_impl.h"

/* Batch when there are at least this many tensors of at most this mean size. */
#define KVS_CUDA_BATCH_MIN_TENSORS 4u
#define KVS_CUDA_BATCH_MAX_MEAN_BYTES (1u << 20)

struct kvs_cuda_engine {
	cudaStream_t stream;
	cudaEvent_t done;
	bool batch_ok;
	/* Scratch for cudaMemcpyBatchAsync, grown on demand (never on the steady path). */
	void **dsts;
	const void **srcs;
	size_t *sizes;
	uint32_t cap;
};

static int cuda_err(struct kvs_copy_engine *eng, cudaError_t e, const char *what)
{
	int rc;

	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
	case cudaErrorInitializationError:
	case cudaErrorDevicesUnavailable:
		rc = -ENODEV;
		break;
	case cudaErrorMemoryAllocation:
		rc = -ENOMEM;
		break;
	case cudaErrorInvalidValue:
	case cudaErrorHostMemoryAlreadyRegistered:
	case cudaErrorHostMemoryNotRegistered:
		rc = -EINVAL;
		break;
	default:
		rc = -EIO;
		break;
	}
	kvs_log_error(&eng->log, "cuda device %d: %s: %s (%d)", eng->device_id, what,
		      cudaGetErrorString(e), (int)e);
	return rc;
}

static struct kvs_cuda_engine *cuda_of(struct kvs_copy_engine *eng)
{
	return eng->impl;
}

static int cuda_use_device(struct kvs_copy_engine *eng)
{
	return cuda_err(eng, cudaSetDevice(eng->device_id), "cudaSetDevice");
}

static int cuda_reg(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	int rc = cuda_use_device(eng);

	if (rc == 0)
		rc = cuda_err(eng, cudaHostRegister(base, bytes, cudaHostRegisterPortable),
			      "cudaHostRegister");
	return rc;
}

static int cuda_unreg(struct kvs_copy_engine *eng, void *base)
{
	int rc = cuda_use_device(eng);

	if (rc == 0)
		rc = cuda_err(eng, cudaHostUnregister(base), "cudaHostUnregister");
	return rc;
}

static int cuda_grow(struct kvs_cuda_engine *c, uint32_t n)
{
	void **d;
	const void **s;
	size_t *z;

	if (n <= c->cap)
		return 0;
	d = realloc(c->dsts, n * sizeof(*d));
	if (d)
		c->dsts = d;
	s = realloc(c->srcs, n * sizeof(*s));
	if (s)
		c->srcs = s;
	z = realloc(c->sizes, n * sizeof(*z));
	if (z)
		c->sizes = z;
	if (!d || !s || !z)
		return -ENOMEM;
	c->cap = n;
	return 0;
}

static bool cuda_want_batch(const struct kvs_cuda_engine *c, const uint64_t bytes[], uint32_t n)
{
	uint64_t total = 0;

	if (!c->batch_ok || n < KVS_CUDA_BATCH_MIN_TENSORS)
		return false;
	for (uint32_t i = 0; i < n; i++)
		total += bytes[i];
	return total / n <= KVS_CUDA_BATCH_MAX_MEAN_BYTES;
}

/*
 * Queue n copies host<->device.  to_device: dev[i] <- host + off(i), else
 * host + off(i) <- dev[i].  Batched when it pays, per tensor otherwise.
 */
static int cuda_copy(struct kvs_copy_engine *eng, unsigned char *host, const uint64_t dev[],
		     const uint64_t bytes[], uint32_t n, bool to_device)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
	int rc = cuda_use_device(eng);

	if (rc < 0)
		return rc;
	if (cuda_want_batch(c, bytes, n) && cuda_grow(c, n) == 0) {
		struct cudaMemcpyAttributes attr;
		size_t attr_idx = 0;
		unsigned char *p = host;
		cudaError_t e;

		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		attr.srcLocHint.type = to_device ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
		attr.srcLocHint.id = eng->device_id;
		attr.dstLocHint.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
		attr.dstLocHint.id = eng->device_id;
		for (uint32_t i = 0; i < n; i++) {
			c->dsts[i] = to_device ? (void *)(uintptr_t)dev[i] : p;
			c->srcs[i] = to_device ? (const void *)p : (const void *)(uintptr_t)dev[i];
			c->sizes[i] = bytes[i];
			p += bytes[i];
		}
		e = cudaMemcpyBatchAsync(c->dsts, c->srcs, c->sizes, n, &attr, &attr_idx, 1,
					 c->stream);
		if (e == cudaSuccess)
			return 0;
		if (e != cudaErrorNotSupported && e != cudaErrorCallRequiresNewerDriver)
			return cuda_err(eng, e, "cudaMemcpyBatchAsync");
		(void)cudaGetLastError(); /* clear the (non-sticky) error before falling back */
		c->batch_ok = false;
		kvs_log_warn(&eng->log, "cuda device %d: batched copies unsupported (%s); "
			     "copying per tensor", eng->device_id, cudaGetErrorString(e));
	}
	for (uint32_t i = 0; i < n; i++) {
		void *d = to_device ? (void *)(uintptr_t)dev[i] : host;
		const void *s = to_device ? (const void *)host : (const void *)(uintptr_t)dev[i];

		rc = cuda_err(eng, cudaMemcpyAsync(d, s, bytes[i], kind, c->stream), "cudaMemcpyAsync");
		if (rc < 0)
			return rc;
		host += bytes[i];
	}
	return 0;
}

static int cuda_h2d(struct kvs_copy_engine *eng, const void *src, const uint64_t dst[],
		    const uint64_t bytes[], uint32_t n)
{
	/* cuda_copy only reads host memory in this direction. */
	return cuda_copy(eng, (unsigned char *)(uintptr_t)src, dst, bytes, n, true);
}

static int cuda_d2h(struct kvs_copy_engine *eng, void *dst, const uint64_t src[],
		    const uint64_t bytes[], uint32_t n)
{
	return cuda_copy(eng, dst, src, bytes, n, false);
}

static int cuda_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	struct timespec pause = { 0, 2000 };
	cudaError_t e;
	int rc = cuda_use_device(eng);

	if (rc < 0)
		return rc;
	rc = cuda_err(eng, cudaEventRecord(c->done, c->stream), "cudaEventRecord");
	if (rc < 0)
		return rc;
	while ((e = cudaEventQuery(c->done)) == cudaErrorNotReady) {
		if (kvs_now_ns() >= deadline_ns)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
		if (pause.tv_nsec < 1000000)
			pause.tv_nsec *= 2;
	}
	return cuda_err(eng, e, "cudaEventQuery");
}

static void cuda_fini(struct kvs_copy_engine *eng)
{
	struct kvs_cuda_engine *c = cuda_of(eng);

	if (!c)
		return;
	if (cudaSetDevice(eng->device_id) == cudaSuccess) {
		if (c->done) {
			/* Bounded drain: copies still queued after 10 s are abandoned with the
			 * stream (the caller's data is its own problem by then; logged). */
			if (cuda_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)) == -ETIMEDOUT)
				kvs_log_error(&eng->log, "cuda device %d: copies still queued at close",
					      eng->device_id);
			cudaEventDestroy(c->done);
		}
		if (c->stream)
			cudaStreamDestroy(c->stream);
	}
	free(c->dsts);
	free(c->srcs);
	free(c->sizes);
	free(c);
	eng->impl = NULL;
}

static const struct kvs_copy_ops cuda_ops = {
	.name = "cuda",
	.reg = cuda_reg,
	.unreg = cuda_unreg,
	.h2d = cuda_h2d,
	.d2h = cuda_d2h,
	.sync = cuda_sync,
	.fini = cuda_fini,
};

int kvs_copy_cuda_init(struct kvs_copy_engine *eng)
{
	struct kvs_cuda_engine *c;
	int count = 0;
	int rc;

	rc = cuda_err(eng, cudaGetDeviceCount(&count), "cudaGetDeviceCount");
	if (rc < 0)
		return rc;
	if (eng->device_id < 0 || eng->device_id >= count) {
		kvs_log_error(&eng->log, "copy_engine=cuda: device_id %d out of range (%d devices)",
			      eng->device_id, count);
		return -ENODEV;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->batch_ok = true;
	eng->impl = c;
	eng->ops = &cuda_ops;
	rc = cuda_use_device(eng);
	if (rc == 0)
		rc = cuda_err(eng, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
			      "cudaStreamCreateWithFlags");
	if (rc == 0)
		rc = cuda_err(eng, cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming),
			      "cudaEventCreateWithFlags");
	if (rc < 0)
		cuda_fini(eng);
	return rc;
}

int kvs_copy_cuda_pci_bus_id(int32_t device_id, char *buf, uint32_t len)
{
	cudaError_t e = cudaDeviceGetPCIBusId(buf, (int)len, device_id);

	if (e == cudaSuccess)
		return 0;
	return e == cudaErrorInvalidValue ? -EINVAL : -ENODEV;
}
