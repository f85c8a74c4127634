/*
 * io/copy_cuda.c — the CUDA copy engine (kernel variant, KVS_HAVE_CUDA).
 *
 * Streams.  `streams` (cache_stream_number, 1..16) non-blocking streams, each
 * with a completion event.  A batch or kernel call goes whole onto the next
 * stream, round-robin: it is one submission either way, and cutting it into one
 * submission per stream would multiply exactly the fixed cost those strategies
 * exist to pay once (the store issues one vector call per pass of its copier:
 * the copies of up to hundreds of shards, whose fixed cost is paid once, not
 * per shard).  A memcpy call is one submission per copy anyway, so its copies
 * are dealt over the streams (copy i on stream next + i): large tensors then
 * use several DMA engines at once for free.  A
 * bitmask records which streams got work since the last successful sync; sync
 * records the event of each and polls them all (cudaEventSynchronize cannot
 * time out) with a short exponential back-off up to the caller's deadline.
 * wait_event makes every stream wait (cudaStreamWaitEvent), so whatever stream a
 * later copy lands on, it runs after the caller's work.
 *
 * Strategy per call (KVS_COPY_STRATEGY_AUTO; the opts may force one), by the
 * copy count n and mean copy size m of the vector, from the H200 numbers of docs/io.md,
 * "Strategies (cuda engine)" (128 x 32 KiB: 10.7 GB/s per tensor, 53 GB/s
 * batched, 55 GB/s bulk ceiling):
 *
 *   n < 4 or m >= 1 MiB   memcpy  10.7 GB/s at 32 KiB means ~2.5 us of fixed
 *                                 cost per copy; it is under 10% of a copy from
 *                                 ~1.2 MB up, and a batch of < 4 buys nothing;
 *   m <= 16 KiB           kernel  batched copies left ~3 us of fixed cost on
 *                                 4 MiB (96% of the ceiling at 32 KiB); on
 *                                 16 KiB tensors that is ~7%, on 4 KiB ~25% of a
 *                                 128-tensor shard: a single launch reading through
 *                                 the mapping has no per-copy cost at all.  Only
 *                                 when every copy's host range lies in a region
 *                                 registered here (the store registers its data
 *                                 segments, in chunks), else batch;
 *   otherwise             batch   one cudaMemcpyBatchAsync.
 *
 * The kernel's side and the 16 KiB boundary are estimates until perf/copy_bench
 * has run on an H200 (docs/io.md says what is verified).  If the driver refuses
 * batched copies (cudaErrorNotSupported / cudaErrorCallRequiresNewerDriver) the
 * engine drops to per-segment copies for good and logs it once.
 *
 * Registered regions.  The store registers its data plane in chunks (a few GiB
 * each, so hundreds on a large node) from a background thread while the copier
 * copies, so the region table is a sorted array grown on demand, looked up by
 * binary search, under a mutex that is never held across a CUDA call: the
 * copier's lookup waits at most for an insert, never for a cudaHostRegister.
 * A region enters the table after cudaHostRegister returned and leaves it
 * before cudaHostUnregister, so the kernel strategy never reads through the
 * mapping of memory that is not (or no longer) registered.
 *
 * The runtime is linked statically and loads libcuda.so on first use, so a
 * machine without a driver only sees -ENODEV from open.  cudaSetDevice is per
 * thread; every entry point sets it (cheap when already current) because the
 * engine may be opened on one thread and used on the copier thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "io/copy_impl.h"
#if defined(KVS_HAVE_COPY_KERNEL)
#include "io/copy_kernel.h"
#endif

/* Auto strategy thresholds (see the top comment and docs/io.md). */
#define KVS_CUDA_MANY_SEGS 4u                    /* n below: memcpy */
#define KVS_CUDA_MEMCPY_MIN_MEAN (1ull << 20)    /* mean at or above: memcpy */
#define KVS_CUDA_KERNEL_MAX_MEAN (16ull << 10)   /* mean at or below: kernel */

/* First capacity of the region table (doubled when full). */
#define KVS_CUDA_REGIONS_INIT 16u

struct kvs_cuda_region {
	uintptr_t base;
	uint64_t bytes;
	uintptr_t dev; /* device mapping of base (cudaHostGetDevicePointer); 0 = none */
};

struct kvs_cuda_engine {
	cudaStream_t stream[KVS_COPY_MAX_STREAMS];
	cudaEvent_t done[KVS_COPY_MAX_STREAMS];
	uint32_t nstreams; /* created so far (== eng->streams once open) */
	uint32_t next;     /* stream of the next batch/kernel call, first of a memcpy call */
	uint32_t dirty;    /* bit s: stream s got copies since the last successful sync */
	bool batch_ok;
	pthread_mutex_t regions_mu;    /* guards region, nregions, cap (see the top) */
	struct kvs_cuda_region *region; /* sorted by base, never overlapping */
	uint32_t nregions, cap;
	/* cudaMemcpyBatchAsync's arrays, and the kernel's device addresses of the
	 * host ranges: n <= KVS_COPY_VEC_MAX, so fixed. */
	void *dsts[KVS_COPY_VEC_MAX];
	const void *srcs[KVS_COPY_VEC_MAX];
	size_t sizes[KVS_COPY_VEC_MAX];
	uintptr_t mapped[KVS_COPY_VEC_MAX];
#if defined(KVS_HAVE_COPY_KERNEL)
	struct kvs_copy_kbatch kb; /* a launch's parameter block (copied at launch) */
#endif
};

static const char *const strategy_name[] = { "auto", "memcpy", "batch", "kernel" };

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
	case cudaErrorInvalidResourceHandle:
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

/* Under regions_mu: index of the first region whose base is above addr. */
static uint32_t region_upper(const struct kvs_cuda_engine *c, uintptr_t addr)
{
	uint32_t lo = 0, hi = c->nregions;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (c->region[mid].base <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Under regions_mu: room for one more region, and [base, base + bytes) free.
 * 0, -EINVAL (overlaps a registered region), -ENOMEM. */
static int region_make_room(struct kvs_cuda_engine *c, uintptr_t base, uint64_t bytes)
{
	uint32_t at = region_upper(c, base);

	if ((at > 0 && base - c->region[at - 1].base < c->region[at - 1].bytes) ||
	    (at < c->nregions && c->region[at].base - base < bytes))
		return -EINVAL;
	if (c->nregions == c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : KVS_CUDA_REGIONS_INIT;
		struct kvs_cuda_region *r = c->cap > UINT32_MAX / 2 ? NULL
					    : realloc(c->region, (size_t)cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		c->region = r;
		c->cap = cap;
	}
	return 0;
}

static int cuda_reg(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	void *dev = NULL;
	uint32_t at;
	cudaError_t e;
	int rc;

	/* Room first (only this thread registers: it stays there), then pin. */
	pthread_mutex_lock(&c->regions_mu);
	rc = region_make_room(c, (uintptr_t)base, bytes);
	pthread_mutex_unlock(&c->regions_mu);
	if (rc < 0) {
		kvs_log_error(&eng->log, "cuda device %d: register [%p, +%llu): %s", eng->device_id,
			      base, (unsigned long long)bytes,
			      rc == -EINVAL ? "overlaps a registered region" : "out of memory");
		return rc;
	}
	rc = cuda_use_device(eng);
	if (rc == 0)
		rc = cuda_err(eng, cudaHostRegister(base, bytes, cudaHostRegisterPortable |
						    cudaHostRegisterMapped), "cudaHostRegister");
	if (rc < 0)
		return rc;
	/* The copy kernel reads and writes the region through this mapping.  Without
	 * one (a device that cannot map host memory) the region is still pinned and
	 * the engine simply never picks the kernel for it. */
	e = cudaHostGetDevicePointer(&dev, base, 0);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		kvs_log_warn(&eng->log, "cuda device %d: no device mapping of a registered region "
			     "(%s): copy kernel off for it", eng->device_id, cudaGetErrorString(e));
		dev = NULL;
	}
	pthread_mutex_lock(&c->regions_mu);
	at = region_upper(c, (uintptr_t)base);
	memmove(&c->region[at + 1], &c->region[at], (c->nregions - at) * sizeof(c->region[0]));
	c->region[at] = (struct kvs_cuda_region){ (uintptr_t)base, bytes, (uintptr_t)dev };
	c->nregions++;
	pthread_mutex_unlock(&c->regions_mu);
	return 0;
}

static int cuda_unreg(struct kvs_copy_engine *eng, void *base)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	uint32_t at;
	bool found;
	int rc;

	/* Out of the table first: no copy picks its mapping from now on. */
	pthread_mutex_lock(&c->regions_mu);
	at = region_upper(c, (uintptr_t)base);
	found = at > 0 && c->region[at - 1].base == (uintptr_t)base;
	if (found) {
		memmove(&c->region[at - 1], &c->region[at], (c->nregions - at) * sizeof(c->region[0]));
		c->nregions--;
	}
	pthread_mutex_unlock(&c->regions_mu);
	if (!found) {
		kvs_log_error(&eng->log, "cuda device %d: unregister %p: not a registered region",
			      eng->device_id, base);
		return -EINVAL;
	}
	rc = cuda_use_device(eng);
	if (rc == 0)
		rc = cuda_err(eng, cudaHostUnregister(base), "cudaHostUnregister");
	return rc;
}

static int cuda_host_alloc(struct kvs_copy_engine *eng, uint64_t bytes, void **ptr)
{
	int rc = cuda_use_device(eng);

	if (rc == 0)
		rc = cuda_err(eng, cudaHostAlloc(ptr, bytes, cudaHostAllocDefault), "cudaHostAlloc");
	if (rc < 0)
		*ptr = NULL;
	return rc;
}

static void cuda_host_free(struct kvs_copy_engine *eng, void *ptr)
{
	if (cuda_use_device(eng) == 0)
		cuda_err(eng, cudaFreeHost(ptr), "cudaFreeHost");
}

/*
 * The device address of every copy's host range (c->mapped[i]) when each lies
 * inside a registered region with a device mapping: true; false when one does
 * not.  One look at the table under its lock, per vector.
 */
static bool cuda_map_vec(struct kvs_cuda_engine *c, const struct kvs_copy_vec v[], uint32_t n)
{
	bool ok = true;

	pthread_mutex_lock(&c->regions_mu);
	for (uint32_t i = 0; i < n && ok; i++) {
		uintptr_t lo = (uintptr_t)v[i].host;
		uint32_t at = region_upper(c, lo);
		const struct kvs_cuda_region *r = at > 0 ? &c->region[at - 1] : NULL;

		/* validated by io/copy.c: lo + len does not wrap */
		ok = r && r->dev && lo + v[i].len - r->base <= r->bytes;
		c->mapped[i] = ok ? r->dev + (lo - r->base) : 0;
	}
	pthread_mutex_unlock(&c->regions_mu);
	return ok;
}

static uint32_t cuda_next_stream(struct kvs_cuda_engine *c)
{
	uint32_t s = c->next;

	c->next = (c->next + 1) % c->nstreams;
	return s;
}

static int cuda_copy_memcpy(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
			    bool to_device)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	enum cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
	uint32_t s = cuda_next_stream(c);

	for (uint32_t i = 0; i < n; i++) {
		void *dev = (void *)(uintptr_t)v[i].dev;
		uint32_t si = (s + i) % c->nstreams;
		int rc;

		c->dirty |= 1u << si;
		rc = cuda_err(eng, cudaMemcpyAsync(to_device ? dev : v[i].host,
						   to_device ? (const void *)v[i].host : dev, v[i].len,
						   kind, c->stream[si]),
			      "cudaMemcpyAsync");
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* 1: queued; 0: the driver has no batched copies (fall back); < 0: error. */
static int cuda_copy_batch(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
			   bool to_device)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	struct cudaMemcpyAttributes attr;
	size_t attr_idx = 0;
	uint32_t s;
	cudaError_t e;

	memset(&attr, 0, sizeof(attr));
	attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	attr.srcLocHint.type = to_device ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
	attr.srcLocHint.id = eng->device_id;
	attr.dstLocHint.type = to_device ? cudaMemLocationTypeDevice : cudaMemLocationTypeHost;
	attr.dstLocHint.id = eng->device_id;
	for (uint32_t i = 0; i < n; i++) {
		void *dev = (void *)(uintptr_t)v[i].dev;

		c->dsts[i] = to_device ? dev : v[i].host;
		c->srcs[i] = to_device ? (const void *)v[i].host : (const void *)dev;
		c->sizes[i] = v[i].len;
	}
	s = cuda_next_stream(c);
	c->dirty |= 1u << s;
	e = cudaMemcpyBatchAsync(c->dsts, c->srcs, c->sizes, n, &attr, &attr_idx, 1, c->stream[s]);
	if (e == cudaSuccess)
		return 1;
	if (e != cudaErrorNotSupported && e != cudaErrorCallRequiresNewerDriver)
		return cuda_err(eng, e, "cudaMemcpyBatchAsync");
	(void)cudaGetLastError(); /* clear the (non-sticky) error before falling back */
	c->batch_ok = false;
	kvs_log_warn(&eng->log, "cuda device %d: batched copies unsupported (%s); copying per "
		     "tensor", eng->device_id, cudaGetErrorString(e));
	return 0;
}

#if defined(KVS_HAVE_COPY_KERNEL)
/* One launch per KVS_COPY_KERNEL_MAX_SEGS copies, all on one stream; the host
 * side through c->mapped[] (cuda_map_vec). */
static int cuda_copy_kernel(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
			    bool to_device)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	uint32_t s = cuda_next_stream(c);

	c->dirty |= 1u << s;
	for (uint32_t i = 0; i < n; i += KVS_COPY_KERNEL_MAX_SEGS) {
		uint32_t m = n - i < KVS_COPY_KERNEL_MAX_SEGS ? n - i : KVS_COPY_KERNEL_MAX_SEGS;
		int rc;

		c->kb.n = m;
		for (uint32_t j = 0; j < m; j++) {
			uint64_t h = c->mapped[i + j];

			c->kb.seg[j].src = to_device ? h : v[i + j].dev;
			c->kb.seg[j].dst = to_device ? v[i + j].dev : h;
			c->kb.seg[j].len = v[i + j].len;
		}
		rc = cuda_err(eng, (cudaError_t)kvs_copy_kernel_launch(&c->kb, c->stream[s]),
			      "copy kernel launch");
		if (rc < 0)
			return rc;
	}
	return 0;
}
#endif

/* Queue n copies host<->device with the engine's strategy (or the auto pick). */
static int cuda_copy(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
		     bool to_device)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	uint32_t strategy = eng->strategy;
	uint64_t total = 0, mean;
	bool mapped = false;
	int rc = cuda_use_device(eng);

	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < n; i++)
		total = v[i].len > UINT64_MAX - total ? UINT64_MAX : total + v[i].len;
	mean = total / n;
	if (strategy == KVS_COPY_STRATEGY_AUTO) {
		if (n < KVS_CUDA_MANY_SEGS || mean >= KVS_CUDA_MEMCPY_MIN_MEAN)
			strategy = KVS_COPY_STRATEGY_MEMCPY;
#if defined(KVS_HAVE_COPY_KERNEL)
		else if (mean <= KVS_CUDA_KERNEL_MAX_MEAN && (mapped = cuda_map_vec(c, v, n)))
			strategy = KVS_COPY_STRATEGY_KERNEL;
#endif
		else
			strategy = KVS_COPY_STRATEGY_BATCH;
	}
	if (strategy == KVS_COPY_STRATEGY_KERNEL) {
#if defined(KVS_HAVE_COPY_KERNEL)
		if (!mapped && !cuda_map_vec(c, v, n)) {
			kvs_log_error(&eng->log, "cuda device %d: strategy=kernel: a host range of "
				      "the %u copies is not inside a registered region",
				      eng->device_id, n);
			return -EINVAL;
		}
		return cuda_copy_kernel(eng, v, n, to_device);
#else
		return -EOPNOTSUPP; /* refused at open: never reached */
#endif
	}
	if (strategy == KVS_COPY_STRATEGY_BATCH && c->batch_ok) {
		rc = cuda_copy_batch(eng, v, n, to_device);
		if (rc != 0)
			return rc < 0 ? rc : 0;
		/* 0: the driver refused batches; per copy from now on */
	}
	return cuda_copy_memcpy(eng, v, n, to_device);
}

static int cuda_wait_event(struct kvs_copy_engine *eng, void *event)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	int rc = cuda_use_device(eng);

	for (uint32_t s = 0; s < c->nstreams && rc == 0; s++)
		rc = cuda_err(eng, cudaStreamWaitEvent(c->stream[s], (cudaEvent_t)event, 0),
			      "cudaStreamWaitEvent");
	return rc;
}

static int cuda_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	struct kvs_cuda_engine *c = cuda_of(eng);
	struct timespec pause = { 0, 2000 };
	uint32_t pending = c->dirty;
	int rc = cuda_use_device(eng);

	if (rc < 0)
		return rc;
	for (uint32_t s = 0; s < c->nstreams; s++) {
		if (!(pending & (1u << s)))
			continue;
		rc = cuda_err(eng, cudaEventRecord(c->done[s], c->stream[s]), "cudaEventRecord");
		if (rc < 0)
			return rc;
	}
	for (;;) {
		for (uint32_t s = 0; s < c->nstreams; s++) {
			cudaError_t e;

			if (!(pending & (1u << s)))
				continue;
			e = cudaEventQuery(c->done[s]);
			if (e == cudaErrorNotReady)
				continue;
			if (e != cudaSuccess)
				return cuda_err(eng, e, "cudaEventQuery");
			pending &= ~(1u << s);
		}
		if (!pending)
			break;
		if (kvs_now_ns() >= deadline_ns)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
		if (pause.tv_nsec < 1000000)
			pause.tv_nsec *= 2;
	}
	c->dirty = 0;
	return 0;
}

static void cuda_fini(struct kvs_copy_engine *eng)
{
	struct kvs_cuda_engine *c = cuda_of(eng);

	if (!c)
		return;
	if (cudaSetDevice(eng->device_id) == cudaSuccess) {
		/* Bounded drain: copies still queued after 10 s are abandoned with the
		 * streams (the caller's data is its own problem by then; logged).  Every
		 * stream got its event before nstreams counted it. */
		if (c->dirty &&
		    cuda_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)) == -ETIMEDOUT)
			kvs_log_error(&eng->log, "cuda device %d: copies still queued at close",
				      eng->device_id);
		while (c->nregions > 0) {
			void *base = (void *)c->region[c->nregions - 1].base;

			c->nregions--;
			if (cudaHostUnregister(base) != cudaSuccess)
				(void)cudaGetLastError();
		}
		for (uint32_t s = 0; s < c->nstreams; s++) {
			cudaEventDestroy(c->done[s]);
			cudaStreamDestroy(c->stream[s]);
		}
	}
	free(c->region);
	pthread_mutex_destroy(&c->regions_mu);
	free(c);
	eng->impl = NULL;
}

static const struct kvs_copy_ops cuda_ops = {
	.name = "cuda",
	.reg = cuda_reg,
	.unreg = cuda_unreg,
	.host_alloc = cuda_host_alloc,
	.host_free = cuda_host_free,
	.copy = cuda_copy,
	.wait_event = cuda_wait_event,
	.sync = cuda_sync,
	.fini = cuda_fini,
};

int kvs_copy_cuda_init(struct kvs_copy_engine *eng)
{
	struct kvs_cuda_engine *c;
	int count = 0;
	int rc;

#if !defined(KVS_HAVE_COPY_KERNEL)
	if (eng->strategy == KVS_COPY_STRATEGY_KERNEL) {
		kvs_log_error(&eng->log, "copy engine cuda: strategy=kernel, but this build has no "
			      "copy kernel (nvcc was not found)");
		return -EOPNOTSUPP;
	}
#endif
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
	pthread_mutex_init(&c->regions_mu, NULL);
	eng->impl = c;
	eng->ops = &cuda_ops;
	rc = cuda_use_device(eng);
	while (rc == 0 && c->nstreams < eng->streams) {
		uint32_t s = c->nstreams;

		rc = cuda_err(eng, cudaStreamCreateWithFlags(&c->stream[s], cudaStreamNonBlocking),
			      "cudaStreamCreateWithFlags");
		if (rc < 0)
			break;
		rc = cuda_err(eng, cudaEventCreateWithFlags(&c->done[s], cudaEventDisableTiming),
			      "cudaEventCreateWithFlags");
		if (rc < 0) {
			cudaStreamDestroy(c->stream[s]);
			break;
		}
		c->nstreams++;
	}
	if (rc < 0) {
		cuda_fini(eng);
		return rc;
	}
	kvs_log_debug(&eng->log, "cuda device %d: copy engine, %u stream(s), strategy %s",
		      eng->device_id, c->nstreams, strategy_name[eng->strategy]);
	return 0;
}

int kvs_copy_cuda_pci_bus_id(int32_t device_id, char *buf, uint32_t len)
{
	cudaError_t e = cudaDeviceGetPCIBusId(buf, (int)len, device_id);

	if (e == cudaSuccess)
		return 0;
	return e == cudaErrorInvalidValue ? -EINVAL : -ENODEV;
}
