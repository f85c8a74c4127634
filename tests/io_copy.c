/*
 * tests/io_copy.c — copy engines: scatter a slot into tensors and gather it back.
 *
 * Two groups, two CTest tests, so that what could not run shows as Skipped:
 *   io_copy        (default) the host engine, and the cuda engine's open
 *                  contract: it opens where a device is, and fails cleanly
 *                  elsewhere -- -ENODEV (kernel variant with CUDA, no driver or
 *                  device) or -EOPNOTSUPP (plain variant, or built without CUDA);
 *   io_copy_cuda   (--cuda, label gpu) the cuda engine's round trips, batched and
 *                  per tensor: every case skips with the reason, and the binary
 *                  exits 77, where there is no device or no CUDA in the build.
 */
#include "harness.h"
#include "io/copy.h"

#if defined(KVS_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#define NT 37 /* tensors: odd sizes, more than the batching threshold */

static void fill_sizes(uint64_t bytes[NT], uint64_t *total)
{
	*total = 0;
	for (int i = 0; i < NT; i++) {
		bytes[i] = 64 + (uint64_t)i * 1024 + (uint64_t)(i % 7) * 3;
		*total += bytes[i];
	}
}

static void fill_pattern(unsigned char *p, uint64_t n, unsigned seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed + (i >> 9));
}

/* Scatter src into the first n tensors at dst[], gather into back, compare. */
static kvs_test_rc roundtrip(struct kvs_copy_engine *eng, const uint64_t dst[],
			     const uint64_t bytes[], uint32_t n)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < n; i++)
		total += bytes[i];

	unsigned char *src = malloc(total), *back = malloc(total);
	kvs_test_rc rc = KVS_TEST_FAIL;

	if (!src || !back) {
		fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
		goto out;
	}
	fill_pattern(src, total, 7);
	memset(back, 0, total);
	if (kvs_copy_h2d_scatter(eng, src, dst, bytes, n) < 0 ||
	    kvs_copy_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)) < 0 ||
	    kvs_copy_d2h_gather(eng, back, dst, bytes, n) < 0 ||
	    kvs_copy_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)) < 0) {
		fprintf(stderr, "%s:%d: copy failed\n", __FILE__, __LINE__);
		goto out;
	}
	if (memcmp(src, back, total) != 0) {
		fprintf(stderr, "%s:%d: gathered bytes differ from scattered bytes\n", __FILE__, __LINE__);
		goto out;
	}
	rc = KVS_TEST_PASS;
out:
	free(src);
	free(back);
	return rc;
}

static kvs_test_rc test_host_roundtrip(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	struct kvs_copy_engine *eng;
	uint64_t bytes[NT], dst[NT], total;
	unsigned char *tensors[NT];
	kvs_test_rc rc;
	int same = 1;

	fill_sizes(bytes, &total);
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK(strcmp(kvs_copy_name(eng), "host") == 0);
	for (int i = 0; i < NT; i++) {
		tensors[i] = malloc(bytes[i]);
		KVS_CHECK(tensors[i] != NULL);
		dst[i] = (uint64_t)(uintptr_t)tensors[i];
	}
	KVS_CHECK_OK(kvs_copy_register(eng, tensors[0], bytes[0]));
	rc = roundtrip(eng, dst, bytes, NT);
	/* Tensor i holds exactly its slice of the slot. */
	if (rc.code == KVS_TEST_PASS.code) {
		unsigned char *slot = malloc(total);
		uint64_t off = 0;
		KVS_CHECK(slot != NULL);
		fill_pattern(slot, total, 7);
		for (int i = 0; i < NT && same; i++) {
			if (memcmp(tensors[i], slot + off, bytes[i]) != 0) {
				fprintf(stderr, "%s:%d: tensor %d differs from its slice of the slot\n",
					__FILE__, __LINE__, i);
				same = 0;
			}
			off += bytes[i];
		}
		free(slot);
	}
	KVS_CHECK_OK(kvs_copy_unregister(eng, tensors[0]));
	for (int i = 0; i < NT; i++)
		free(tensors[i]);
	kvs_copy_close(eng);
	KVS_TRY(rc);
	KVS_CHECK(same);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_kind(void)
{
	struct kvs_copy_opts o = { .kind = 99 };
	struct kvs_copy_engine *eng = (void *)1;

	KVS_CHECK_ERR(kvs_copy_open(&o, &eng), -EINVAL);
	KVS_CHECK(eng == NULL);
	kvs_copy_close(NULL);
	return KVS_TEST_PASS;
}

/* The cuda engine's open, wherever this runs: a device -> it opens (and names
 * its PCI bus); no device or driver -> -ENODEV; no cuda engine in this build ->
 * -EOPNOTSUPP.  Never a crash, never a half-open engine. */
static kvs_test_rc test_cuda_open(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_CUDA, .device_id = 0 };
	struct kvs_copy_engine *eng = (void *)1;
	char bus[32];
	int rc = kvs_copy_open(&o, &eng);

#if defined(KVS_HAVE_CUDA)
	if (rc == -ENODEV) {
		KVS_CHECK(eng == NULL);
		KVS_CHECK_ERR(kvs_copy_pci_bus_id(0, bus, sizeof(bus)), -ENODEV);
		printf("no CUDA device or driver: open -ENODEV, as documented\n");
		return KVS_TEST_PASS;
	}
	KVS_CHECK_OK(rc);
	KVS_CHECK(strcmp(kvs_copy_name(eng), "cuda") == 0);
	KVS_CHECK_OK(kvs_copy_pci_bus_id(0, bus, sizeof(bus)));
	printf("device 0 at PCI %s\n", bus);
	kvs_copy_close(eng);
#else
	KVS_CHECK_ERR(rc, -EOPNOTSUPP);
	KVS_CHECK(eng == NULL);
	KVS_CHECK_ERR(kvs_copy_pci_bus_id(0, bus, sizeof(bus)), -EOPNOTSUPP);
	printf("no cuda engine in this build: open -EOPNOTSUPP, as documented\n");
#endif
	return KVS_TEST_PASS;
}

/* Opens the cuda engine on device 0, or skips with the reason. */
static kvs_test_rc cuda_engine(struct kvs_copy_engine **eng)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_CUDA, .device_id = 0 };
	int rc = kvs_copy_open(&o, eng);

	if (rc == -EOPNOTSUPP)
		KVS_SKIP("no cuda copy engine in this build (%s variant%s)", KVS_TEST_VARIANT,
			 strcmp(KVS_TEST_VARIANT, "kernel") == 0 ? ", built without CUDA" : "");
	if (rc == -ENODEV)
		KVS_SKIP("no CUDA device or driver on this machine (open: -ENODEV)");
	KVS_CHECK_OK(rc);
	return KVS_TEST_PASS;
}

/* Scatter/gather n of the NT tensors through device memory. */
static kvs_test_rc cuda_roundtrip(uint32_t n)
{
	struct kvs_copy_engine *eng = NULL;

	KVS_TRY(cuda_engine(&eng));
#if defined(KVS_HAVE_CUDA)
	uint64_t bytes[NT], dst[NT], total;
	unsigned char *dev = NULL;
	kvs_test_rc rc;

	fill_sizes(bytes, &total);
	if (cudaMalloc((void **)&dev, total + NT * 256) != cudaSuccess) {
		kvs_copy_close(eng);
		KVS_FAILF("cudaMalloc of %llu bytes failed", (unsigned long long)total);
	}
	for (uint64_t i = 0, off = 0; i < NT; i++) {
		dst[i] = (uint64_t)(uintptr_t)(dev + off);
		off += (bytes[i] + 255) & ~255ull;
	}
	rc = roundtrip(eng, dst, bytes, n);
	cudaFree(dev);
	kvs_copy_close(eng);
	return rc;
#else
	(void)n;
	kvs_copy_close(eng);
	KVS_FAILF("the cuda engine opened in a build without KVS_HAVE_CUDA");
#endif
}

/* NT small tensors: the batched path (cudaMemcpyBatchAsync). */
static kvs_test_rc test_cuda_roundtrip_batched(void)
{
	return cuda_roundtrip(NT);
}

/* Fewer tensors than the batching threshold: one cudaMemcpyAsync per tensor. */
static kvs_test_rc test_cuda_roundtrip_per_tensor(void)
{
	return cuda_roundtrip(3);
}

static const struct kvs_test_case cases[] = {
	{ "host_roundtrip", test_host_roundtrip },
	{ "bad_kind", test_bad_kind },
	{ "cuda_open", test_cuda_open },
};

/* Needs a GPU: run as `io_copy --cuda [case...]` (CTest: io_copy_cuda). */
static const struct kvs_test_case cuda_cases[] = {
	{ "cuda_roundtrip_batched", test_cuda_roundtrip_batched },
	{ "cuda_roundtrip_per_tensor", test_cuda_roundtrip_per_tensor },
};

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "--cuda") == 0) {
		argv[1] = argv[0];
		return kvs_test_run(argc - 1, argv + 1, cuda_cases, KVS_ARRAY_LEN(cuda_cases),
				    NULL, 0);
	}
	return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), NULL, 0);
}
