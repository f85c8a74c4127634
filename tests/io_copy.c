/*
 * tests/io_copy.c — copy engines: scatter a slot into tensors and gather it back.
 *
 * The host engine runs everywhere.  The cuda engine runs where a GPU is present
 * (label gpu; skip 77 otherwise), and its absence must be a clean -ENODEV (kernel
 * variant with CUDA) or -EOPNOTSUPP (plain variant, or built without CUDA).
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

/* Scatter src into the tensors at dst[], gather into back, compare. */
static kvs_test_rc roundtrip(struct kvs_copy_engine *eng, const uint64_t dst[],
			     const uint64_t bytes[], uint64_t total)
{
	unsigned char *src = malloc(total), *back = malloc(total);
	kvs_test_rc rc = KVS_TEST_FAIL;

	if (!src || !back) {
		fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
		goto out;
	}
	fill_pattern(src, total, 7);
	memset(back, 0, total);
	if (kvs_copy_h2d_scatter(eng, src, dst, bytes, NT) < 0 ||
	    kvs_copy_sync(eng, kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)) < 0 ||
	    kvs_copy_d2h_gather(eng, back, dst, bytes, NT) < 0 ||
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
	rc = roundtrip(eng, dst, bytes, total);
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

static kvs_test_rc test_cuda_roundtrip(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_CUDA, .device_id = 0 };
	struct kvs_copy_engine *eng = NULL;
	int rc = kvs_copy_open(&o, &eng);

#if defined(KVS_HAVE_CUDA)
	char bus[32];
	if (rc == -ENODEV) {
		KVS_CHECK_ERR(kvs_copy_pci_bus_id(0, bus, sizeof(bus)), -ENODEV);
		KVS_SKIP("no CUDA device or driver on this machine (open: -ENODEV)");
	}
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(kvs_copy_pci_bus_id(0, bus, sizeof(bus)));
	printf("device 0 at PCI %s\n", bus);

	uint64_t bytes[NT], dst[NT], total;
	unsigned char *dev = NULL;
	fill_sizes(bytes, &total);
	KVS_CHECK(cudaMalloc((void **)&dev, total + NT * 256) == cudaSuccess);
	for (uint64_t i = 0, off = 0; i < NT; i++) {
		dst[i] = (uint64_t)(uintptr_t)(dev + off);
		off += (bytes[i] + 255) & ~255ull;
	}
	kvs_test_rc rt = roundtrip(eng, dst, bytes, total);
	/* Per-tensor path too: fewer tensors than the batching threshold. */
	cudaFree(dev);
	kvs_copy_close(eng);
	return rt;
#else
	KVS_CHECK_ERR(rc, -EOPNOTSUPP);
	KVS_CHECK(eng == NULL);
	KVS_SKIP("no CUDA copy engine in this build (open: -EOPNOTSUPP, as documented)");
#endif
}

static const struct kvs_test_case cases[] = {
	{ "host_roundtrip", test_host_roundtrip },
	{ "bad_kind", test_bad_kind },
	{ "cuda_roundtrip", test_cuda_roundtrip },
};

KVS_TEST_MAIN(cases)
