/*
 * perf/copy_bench.c — H2D scatter throughput of the cuda copy engine per
 * strategy, against the bulk pinned ceiling measured in the same run.
 *
 *   copy_bench [--device N] [--streams S] [--seconds T] [--mem auto|hugetlb|normal]
 *
 * For 128 tensors of 4 KiB, 32 KiB and 256 KiB (one shard: the slot holds the
 * tensors back to back; on the device they sit 2 x tensor_bytes apart, so no two
 * neighbours could be merged into one copy), and for each strategy (memcpy, batch,
 * kernel, and auto: what the store gets):
 *
 *   1. a bit-exact round trip through the engine (h2d, each tensor read back with
 *      a plain cudaMemcpy and compared with its slice of the slot; d2h into a
 *      second slot, compared with the first), printed as
 *        copy_bench verify strategy=<s> tensors=128 tensor_bytes=<b> ok=<0|1>
 *   2. throughput: h2d calls queued back to back (the copier's steady state: one
 *      call per shard, sync at the task's end) for about --seconds (0.3 s), timed
 *      on the wall clock from the first call to cudaDeviceSynchronize (exact;
 *      kvs_copy_sync's polling back-off would blur the end), printed as
 *        copy_bench strategy=<s> tensors=128 tensor_bytes=<b> gbps=<..>
 *          ceiling_gbps=<..> ratio=<..> streams=<S> mem=<hugetlb|normal> calls=<n>
 *
 * The ceiling of a size is one cudaMemcpyAsync of the same total bytes (128 x
 * tensor_bytes) per call, queued the same way from the same registered slot,
 * measured before and after the strategies; the higher of the two counts (both
 * printed as `copy_bench bulk ...`).  gbps is 10^9 bytes per second.
 *
 * The slot is hugetlb memory when the pool has pages (--mem auto), else normal
 * pages with MADV_HUGEPAGE; registered through the engine (cudaHostRegister,
 * mapped: the kernel strategy reads it through the device mapping).
 *
 * Exit: 0, 1 when a round trip differs or a call fails, 77 (with a message) when
 * there is no CUDA device or no cuda engine in this build.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "common/clock.h"
#include "io/copy.h"
#include "kvshare.h"

#define NT 128
#define MAX_TB (256u << 10)
#define SLOT_BYTES ((uint64_t)NT * MAX_TB)

static const uint64_t sizes[] = { 4u << 10, 32u << 10, 256u << 10 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static const struct {
	const char *name;
	uint32_t strategy;
} strategies[] = {
	{ "memcpy", KVS_COPY_STRATEGY_MEMCPY },
	{ "batch", KVS_COPY_STRATEGY_BATCH },
	{ "kernel", KVS_COPY_STRATEGY_KERNEL },
	{ "auto", KVS_COPY_STRATEGY_AUTO },
};
#define NSTRAT (sizeof(strategies) / sizeof(strategies[0]))

static int device = 0;
static uint32_t nstreams = 1;
static double seconds = 0.3;

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "copy_bench: kvshare: %s\n", msg);
}

static const struct kvs_log bench_log = { log_cb, NULL };

/* Host memory for a slot: hugetlb if asked or available, else normal + THP. */
static void *slot_alloc(uint64_t bytes, const char *mem, const char **got)
{
	void *p = MAP_FAILED;

	if (strcmp(mem, "normal") != 0) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
		*got = "hugetlb";
		if (p == MAP_FAILED && strcmp(mem, "hugetlb") == 0)
			return NULL;
	}
	if (p == MAP_FAILED) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		madvise(p, bytes, MADV_HUGEPAGE);
		*got = "normal";
	}
	memset(p, 0, bytes); /* fault every page in before registering */
	return p;
}

static void fill_pattern(unsigned char *p, uint64_t n, unsigned seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed + (i >> 9) + (i >> 17) * 7);
}

static void make_segs(struct kvs_copy_seg segs[NT], uint64_t tb, unsigned char *dev)
{
	for (uint32_t i = 0; i < NT; i++) {
		segs[i].host_off = i * tb;
		segs[i].dev = (uint64_t)(uintptr_t)(dev + 2 * i * tb);
		segs[i].len = tb;
	}
}

static int cuda_ok(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 1;
	fprintf(stderr, "copy_bench: %s: %s\n", what, cudaGetErrorString(e));
	return 0;
}

/* Round trip through eng; 1 if bit-exact. */
static int verify(struct kvs_copy_engine *eng, unsigned char *slot, unsigned char *back,
		  unsigned char *dev, uint64_t tb, unsigned seed)
{
	struct kvs_copy_seg segs[NT];
	unsigned char *tmp = malloc(tb);
	int ok = tmp != NULL, rc;

	make_segs(segs, tb, dev);
	fill_pattern(slot, NT * tb, seed);
	memset(back, 0x5a, NT * tb);
	ok = ok && cuda_ok(cudaMemset(dev, 0, 2 * NT * tb), "cudaMemset");
	rc = ok ? kvs_copy_h2d(eng, slot, segs, NT) : 0;
	if (rc == 0 && ok)
		rc = kvs_copy_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC));
	if (rc < 0) {
		fprintf(stderr, "copy_bench: verify h2d: %s\n", kvs_strerror(rc));
		ok = 0;
	}
	for (uint32_t i = 0; i < NT && ok; i++) {
		ok = cuda_ok(cudaMemcpy(tmp, dev + 2 * i * tb, tb, cudaMemcpyDeviceToHost),
			     "cudaMemcpy");
		if (ok && memcmp(tmp, slot + i * tb, tb) != 0) {
			fprintf(stderr, "copy_bench: verify: tensor %u differs from its slice\n", i);
			ok = 0;
		}
	}
	if (ok) {
		rc = kvs_copy_d2h(eng, back, segs, NT);
		if (rc == 0)
			rc = kvs_copy_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC));
		if (rc < 0) {
			fprintf(stderr, "copy_bench: verify d2h: %s\n", kvs_strerror(rc));
			ok = 0;
		} else if (memcmp(back, slot, NT * tb) != 0) {
			fprintf(stderr, "copy_bench: verify: gathered slot differs\n");
			ok = 0;
		}
	}
	free(tmp);
	return ok;
}

/*
 * Queue `calls` h2d scatters (eng) or bulk copies (eng NULL: one cudaMemcpyAsync
 * of NT * tb on stream) and wait for all with cudaDeviceSynchronize.  Returns
 * the wall-clock ns, or 0 on error.
 */
static uint64_t run_calls(struct kvs_copy_engine *eng, cudaStream_t stream, unsigned char *slot,
			  unsigned char *dev, uint64_t tb, uint64_t calls)
{
	struct kvs_copy_seg segs[NT];
	uint64_t t0;

	make_segs(segs, tb, dev);
	t0 = kvs_now_ns();
	for (uint64_t c = 0; c < calls; c++) {
		if (eng) {
			int rc = kvs_copy_h2d(eng, slot, segs, NT);

			if (rc < 0) {
				fprintf(stderr, "copy_bench: h2d: %s\n", kvs_strerror(rc));
				return 0;
			}
		} else if (!cuda_ok(cudaMemcpyAsync(dev, slot, NT * tb, cudaMemcpyHostToDevice, stream),
				    "cudaMemcpyAsync")) {
			return 0;
		}
	}
	if (!cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
		return 0;
	uint64_t ns = kvs_now_ns() - t0;
	if (eng && kvs_copy_sync(eng, kvs_deadline_after(KVS_NSEC_PER_SEC)) < 0)
		return 0;
	return ns ? ns : 1;
}

/* GB/s of about `seconds` of calls (after a warm-up and a calibration). */
static double measure(struct kvs_copy_engine *eng, cudaStream_t stream, unsigned char *slot,
		      unsigned char *dev, uint64_t tb, uint64_t *calls_out)
{
	uint64_t ns, calls;

	if (!run_calls(eng, stream, slot, dev, tb, 3))
		return -1;
	ns = run_calls(eng, stream, slot, dev, tb, 10);
	if (!ns)
		return -1;
	calls = (uint64_t)(seconds * 1e9 / ((double)ns / 10));
	if (calls < 20)
		calls = 20;
	if (calls > 200000)
		calls = 200000;
	ns = run_calls(eng, stream, slot, dev, tb, calls);
	if (!ns)
		return -1;
	*calls_out = calls;
	return (double)(NT * tb) * (double)calls / (double)ns;
}

/* The bulk ceiling of every size, from slot registered here (not by an engine). */
static int measure_bulk(unsigned char *slot, unsigned char *dev, double ceiling[NSIZES],
			const char *when, const char *mem)
{
	cudaStream_t stream;
	int ok = cuda_ok(cudaHostRegister(slot, SLOT_BYTES, cudaHostRegisterPortable),
			 "cudaHostRegister");

	ok = ok && cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
			   "cudaStreamCreate");
	for (size_t s = 0; s < NSIZES && ok; s++) {
		uint64_t calls = 0;
		double g = measure(NULL, stream, slot, dev, sizes[s], &calls);

		if (g < 0) {
			ok = 0;
			break;
		}
		printf("copy_bench bulk when=%s tensors=%d tensor_bytes=%llu gbps=%.2f mem=%s calls=%llu\n",
		       when, NT, (unsigned long long)sizes[s], g, mem, (unsigned long long)calls);
		if (g > ceiling[s])
			ceiling[s] = g;
	}
	if (ok)
		cudaStreamDestroy(stream);
	cudaHostUnregister(slot);
	return ok;
}

static int usage(void)
{
	fprintf(stderr, "usage: copy_bench [--device N] [--streams 1..16] [--seconds T] "
			"[--mem auto|hugetlb|normal]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *mem = "auto", *got = "normal";
	double ceiling[NSIZES] = { 0 }, gbps[NSTRAT][NSIZES];
	uint64_t calls[NSTRAT][NSIZES];
	unsigned char *slot, *back, *dev = NULL;
	struct kvs_copy_engine *eng;
	struct kvs_copy_opts o;
	int count = 0, failed = 0, rc;
	char bus[32] = "?";

	for (int i = 1; i < argc; i++) {
		if (i + 1 >= argc)
			return usage();
		if (strcmp(argv[i], "--device") == 0)
			device = atoi(argv[++i]);
		else if (strcmp(argv[i], "--streams") == 0)
			nstreams = (uint32_t)atoi(argv[++i]);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[++i]);
		else if (strcmp(argv[i], "--mem") == 0)
			mem = argv[++i];
		else
			return usage();
	}
	if (nstreams < 1 || nstreams > KVS_COPY_MAX_STREAMS || seconds <= 0)
		return usage();

	/* No device: say so and skip (77), as the tests do. */
	o = (struct kvs_copy_opts){ .kind = KVS_COPY_CUDA, .device_id = device,
				    .streams = nstreams, .log = &bench_log };
	rc = kvs_copy_open(&o, &eng);
	if (rc == -ENODEV || rc == -EOPNOTSUPP) {
		printf("copy_bench: skipped: %s (%s)\n",
		       rc == -ENODEV ? "no CUDA device or driver" : "no cuda copy engine in this build",
		       kvs_strerror(rc));
		return 77;
	}
	if (rc < 0) {
		fprintf(stderr, "copy_bench: open: %s\n", kvs_strerror(rc));
		return 1;
	}
	kvs_copy_close(eng);
	cudaGetDeviceCount(&count);
	kvs_copy_pci_bus_id(device, bus, sizeof(bus));
	if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice"))
		return 1;
	{
		struct cudaDeviceProp p;

		if (cudaGetDeviceProperties(&p, device) == cudaSuccess)
			printf("copy_bench device=%d name=\"%s\" pci=%s sms=%d devices=%d\n", device,
			       p.name, bus, p.multiProcessorCount, count);
	}

	slot = slot_alloc(SLOT_BYTES, mem, &got);
	back = slot_alloc(SLOT_BYTES, mem, &got);
	if (!slot || !back) {
		fprintf(stderr, "copy_bench: cannot allocate %s host memory\n", mem);
		return 1;
	}
	if (!cuda_ok(cudaMalloc((void **)&dev, 2 * SLOT_BYTES), "cudaMalloc"))
		return 1;

	if (!measure_bulk(slot, dev, ceiling, "before", got))
		return 1;
	for (size_t k = 0; k < NSTRAT; k++) {
		o.strategy = strategies[k].strategy;
		rc = kvs_copy_open(&o, &eng);
		if (rc == -EOPNOTSUPP) {
			printf("copy_bench strategy=%s unavailable (%s)\n", strategies[k].name,
			       kvs_strerror(rc));
			for (size_t s = 0; s < NSIZES; s++)
				gbps[k][s] = -1;
			continue;
		}
		if (rc < 0 || (rc = kvs_copy_register(eng, slot, SLOT_BYTES)) < 0 ||
		    (rc = kvs_copy_register(eng, back, SLOT_BYTES)) < 0) {
			fprintf(stderr, "copy_bench: strategy %s: open/register: %s\n",
				strategies[k].name, kvs_strerror(rc));
			return 1;
		}
		for (size_t s = 0; s < NSIZES; s++) {
			int ok = verify(eng, slot, back, dev, sizes[s], (unsigned)(k * 16 + s));

			printf("copy_bench verify strategy=%s tensors=%d tensor_bytes=%llu ok=%d\n",
			       strategies[k].name, NT, (unsigned long long)sizes[s], ok);
			failed |= !ok;
			gbps[k][s] = ok ? measure(eng, NULL, slot, dev, sizes[s], &calls[k][s]) : -1;
			failed |= gbps[k][s] < 0;
		}
		kvs_copy_close(eng); /* unregisters slot and back */
	}
	if (!measure_bulk(slot, dev, ceiling, "after", got))
		return 1;

	for (size_t k = 0; k < NSTRAT; k++) {
		for (size_t s = 0; s < NSIZES; s++) {
			if (gbps[k][s] < 0)
				continue;
			printf("copy_bench strategy=%s tensors=%d tensor_bytes=%llu gbps=%.2f "
			       "ceiling_gbps=%.2f ratio=%.3f streams=%u mem=%s calls=%llu\n",
			       strategies[k].name, NT, (unsigned long long)sizes[s], gbps[k][s],
			       ceiling[s], gbps[k][s] / ceiling[s], nstreams, got,
			       (unsigned long long)calls[k][s]);
		}
	}
	cudaFree(dev);
	munmap(slot, SLOT_BYTES);
	munmap(back, SLOT_BYTES);
	return failed ? 1 : 0;
}
