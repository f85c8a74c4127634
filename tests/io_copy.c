/*
 * tests/io_copy.c — copy engines: scatter a slot into tensors and gather it back.
 *
 * Two groups, two CTest tests, so that what could not run shows as Skipped:
 *   io_copy        (default) the host engine -- contiguous segments, head slices
 *                  (non-contiguous host offsets, partial lengths, any order), odd
 *                  sizes, vector calls of many shards, every alignment of a
 *                  streamed (non-temporal) copy, every -EINVAL of io/copy.h,
 *                  wait_event -- and the cuda
 *                  engine's open contract: it opens where a device is, and fails
 *                  cleanly elsewhere -- -ENODEV (kernel variant with CUDA, no
 *                  driver or device) or -EOPNOTSUPP (plain variant, or built
 *                  without CUDA);
 *   io_copy_cuda   (--cuda, label gpu) the cuda engine: bit-exact round trips for
 *                  each strategy (memcpy, batch, kernel, auto) over 128 tensors of
 *                  4 KiB, 32 KiB and 256 KiB, odd sizes and alignments, head
 *                  slices, several streams with several calls per sync, vector
 *                  calls of many shards (every strategy), a
 *                  wait_event on an event the test records (and sync's deadline),
 *                  kernel-strategy argument errors.  Every case skips with the
 *                  reason, and the binary exits 77, where there is no device or no
 *                  CUDA in the build.
 *
 * One round trip (roundtrip()): fill the slot with a seeded pattern, clear the
 * tensors, h2d + sync, read every tensor back by an independent path (memcpy /
 * plain cudaMemcpy) and compare it with its slice of the slot; then fill a second
 * slot with 0x5a, d2h + sync, and compare it with what is expected: the slices
 * copied, the gaps between them untouched.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "harness.h"
#include "io/copy.h"

#if defined(KVS_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

#define SEED 7u /* pattern seed, printed by the round trips that fail */
#define DEADLINE() kvs_deadline_after(10ull * KVS_NSEC_PER_SEC)

static void fill_pattern(unsigned char *p, uint64_t n, unsigned seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 131 + seed + (i >> 9) + (i >> 17) * 7);
}

/* ---------------------------------------------------------------------------- */
/* Segment layouts                                                              */

enum layout {
	L_CONTIG, /* n tensors of tb bytes, back to back in the slot (a whole shard) */
	L_HEADS,  /* the slot holds n tensors of tb bytes, 8 heads each; copy heads 2..4
		     of each (host_off not a sum of lens, len < tb), segments reversed */
	L_ODD,    /* n tensors of odd sizes (1 .. tb), back to back; device ends at odd
		     alignments (i % 16), so the kernel takes every unit width */
};

static const char *const layout_name[] = { "contiguous", "head slices", "odd sizes" };

/* Segments of layout l over a device area starting at dev_base.  Returns the slot
 * bytes; *dev_span: the device bytes the tensors need. */
static uint64_t make_segs(struct kvs_copy_seg segs[], enum layout l, uint32_t n, uint64_t tb,
			  uint64_t dev_base, uint64_t *dev_span)
{
	uint64_t off = 0, dev = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct kvs_copy_seg *s = l == L_HEADS ? &segs[n - 1 - i] : &segs[i];
		uint64_t len = tb, mis = 0, host_off = off;

		if (l == L_HEADS) {
			uint64_t hb = tb / 8;

			host_off = off + 2 * hb;
			len = 3 * hb;
		} else if (l == L_ODD) {
			len = 1 + ((uint64_t)i * 1031u + 17u) % tb;
			mis = i % 16;
		}
		s->host_off = host_off;
		s->len = len;
		s->dev = dev_base + dev + mis;
		off += l == L_ODD ? len : tb;
		dev += (len + mis + 255) & ~255ull;
	}
	*dev_span = dev;
	return off;
}

/* ---------------------------------------------------------------------------- */
/* Round trips, over either engine                                              */

/* How the test itself reaches "device" memory: plain memory for the host engine,
 * cudaMemcpy / cudaMemset for the cuda engine (never the engine under test). */
struct dev_access {
	int (*read)(void *dst, uint64_t dev, uint64_t len);
	int (*clear)(uint64_t dev, uint64_t len);
};

static int host_read(void *dst, uint64_t dev, uint64_t len)
{
	memcpy(dst, (const void *)(uintptr_t)dev, len);
	return 0;
}

static int host_clear(uint64_t dev, uint64_t len)
{
	memset((void *)(uintptr_t)dev, 0, len);
	return 0;
}

static const struct dev_access host_access = { host_read, host_clear };

/*
 * Queue one direction of nshards shards' copies (shard k's slot at base + k *
 * slot_bytes, its tensors segs[k * n ..]): a call per shard, or (vec) one
 * vector call for them all, as the store's copier makes them.
 */
static int copy_shards(struct kvs_copy_engine *eng, bool h2d, bool vec, unsigned char *base,
		       uint64_t slot_bytes, const struct kvs_copy_seg segs[], uint32_t n,
		       uint32_t nshards)
{
	struct kvs_copy_vec *v;
	int r = 0;

	if (!vec) {
		for (uint32_t k = 0; k < nshards && r == 0; k++)
			r = h2d ? kvs_copy_h2d(eng, base + k * slot_bytes, segs + k * n, n)
				: kvs_copy_d2h(eng, base + k * slot_bytes, segs + k * n, n);
		return r;
	}
	v = calloc((size_t)n * nshards, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (uint32_t k = 0; k < nshards; k++)
		for (uint32_t i = 0; i < n; i++) {
			const struct kvs_copy_seg *g = &segs[k * n + i];

			v[k * n + i] = (struct kvs_copy_vec){ base + k * slot_bytes + g->host_off,
							      g->dev, g->len };
		}
	r = h2d ? kvs_copy_h2dv(eng, v, n * nshards) : kvs_copy_d2hv(eng, v, n * nshards);
	free(v);
	return r;
}

/*
 * nshards shards' copies of each direction between two syncs (per shard, or
 * in one vector call): shard k's slot is at slot + k * slot_bytes, its
 * tensors at segs[k * n ..].  Checks every tensor against its slice, then the
 * gathered slots against the expected bytes.
 */
static kvs_test_rc roundtrip(struct kvs_copy_engine *eng, const struct dev_access *da,
			     unsigned char *slot, unsigned char *back, uint64_t slot_bytes,
			     const struct kvs_copy_seg segs[], uint32_t n, uint32_t nshards,
			     bool vec, const char *what)
{
	uint64_t total = slot_bytes * nshards, maxlen = 0;
	unsigned char *exp = malloc(total), *tmp;
	kvs_test_rc rc = KVS_TEST_FAIL;
	int r;

	for (uint32_t i = 0; i < n * nshards; i++)
		if (segs[i].len > maxlen)
			maxlen = segs[i].len;
	tmp = malloc(maxlen);
	if (!exp || !tmp) {
		fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
		goto out;
	}
	fill_pattern(slot, total, SEED);
	for (uint32_t i = 0; i < n * nshards; i++) {
		if (da->clear(segs[i].dev, segs[i].len) < 0) {
			fprintf(stderr, "%s:%d: %s: clearing tensor %u failed\n", __FILE__, __LINE__,
				what, i);
			goto out;
		}
	}
	r = copy_shards(eng, true, vec, slot, slot_bytes, segs, n, nshards);
	if (r < 0) {
		fprintf(stderr, "%s:%d: %s: h2d: %s\n", __FILE__, __LINE__, what, kvs_strerror(r));
		goto out;
	}
	r = kvs_copy_sync(eng, DEADLINE());
	if (r < 0) {
		fprintf(stderr, "%s:%d: %s: sync after h2d: %s\n", __FILE__, __LINE__, what,
			kvs_strerror(r));
		goto out;
	}
	for (uint32_t k = 0; k < nshards; k++) {
		for (uint32_t i = 0; i < n; i++) {
			const struct kvs_copy_seg *s = &segs[k * n + i];
			const unsigned char *want = slot + k * slot_bytes + s->host_off;

			if (da->read(tmp, s->dev, s->len) < 0) {
				fprintf(stderr, "%s:%d: %s: reading tensor %u back failed\n", __FILE__,
					__LINE__, what, i);
				goto out;
			}
			for (uint64_t b = 0; b < s->len; b++) {
				if (tmp[b] != want[b]) {
					fprintf(stderr, "%s:%d: %s (seed %u): shard %u tensor %u byte %llu "
						"(host_off %llu, len %llu): 0x%02x, want 0x%02x\n",
						__FILE__, __LINE__, what, SEED, k, i,
						(unsigned long long)b, (unsigned long long)s->host_off,
						(unsigned long long)s->len, tmp[b], want[b]);
					goto out;
				}
			}
		}
	}
	memset(back, 0x5a, total);
	memset(exp, 0x5a, total);
	for (uint32_t k = 0; k < nshards; k++) {
		for (uint32_t i = 0; i < n; i++) {
			const struct kvs_copy_seg *s = &segs[k * n + i];
			uint64_t o = k * slot_bytes + s->host_off;

			memcpy(exp + o, slot + o, s->len);
		}
	}
	r = copy_shards(eng, false, vec, back, slot_bytes, segs, n, nshards);
	if (r < 0) {
		fprintf(stderr, "%s:%d: %s: d2h: %s\n", __FILE__, __LINE__, what, kvs_strerror(r));
		goto out;
	}
	r = kvs_copy_sync(eng, DEADLINE());
	if (r < 0) {
		fprintf(stderr, "%s:%d: %s: sync after d2h: %s\n", __FILE__, __LINE__, what,
			kvs_strerror(r));
		goto out;
	}
	for (uint64_t b = 0; b < total; b++) {
		if (back[b] != exp[b]) {
			fprintf(stderr, "%s:%d: %s (seed %u): gathered slot byte %llu: 0x%02x, want "
				"0x%02x (0x5a = a gap that must stay untouched)\n", __FILE__, __LINE__,
				what, SEED, (unsigned long long)b, back[b], exp[b]);
			goto out;
		}
	}
	rc = KVS_TEST_PASS;
out:
	free(exp);
	free(tmp);
	return rc;
}

/* ---------------------------------------------------------------------------- */
/* Host engine                                                                  */

static kvs_test_rc host_layout(enum layout l, uint32_t n, uint64_t tb)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	struct kvs_copy_seg segs[KVS_MAX_TENSORS];
	struct kvs_copy_engine *eng;
	uint64_t span, slot_bytes;
	unsigned char *dev, *slot, *back;
	kvs_test_rc rc;

	slot_bytes = make_segs(segs, l, n, tb, 0, &span);
	dev = malloc(span);
	slot = malloc(slot_bytes);
	back = malloc(slot_bytes);
	KVS_CHECK(dev && slot && back);
	make_segs(segs, l, n, tb, (uint64_t)(uintptr_t)dev, &span);
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK(strcmp(kvs_copy_name(eng), "host") == 0);
	KVS_CHECK_OK(kvs_copy_register(eng, slot, slot_bytes));
	rc = roundtrip(eng, &host_access, slot, back, slot_bytes, segs, n, 1, false, layout_name[l]);
	KVS_CHECK_OK(kvs_copy_unregister(eng, slot));
	kvs_copy_close(eng);
	free(dev);
	free(slot);
	free(back);
	return rc;
}

static kvs_test_rc test_host_contiguous(void)
{
	KVS_TRY(host_layout(L_CONTIG, 128, 4096));
	KVS_TRY(host_layout(L_CONTIG, 1, 1 << 20));
	return host_layout(L_CONTIG, KVS_MAX_TENSORS, 1000);
}

static kvs_test_rc test_host_head_slices(void)
{
	KVS_TRY(host_layout(L_HEADS, 128, 32 << 10));
	return host_layout(L_HEADS, 7, 8 * 3);
}

static kvs_test_rc test_host_odd_sizes(void)
{
	return host_layout(L_ODD, 37, 5000);
}

/* Several calls between syncs, a shard each; n = 0 is a no-op. */
static kvs_test_rc test_host_shards(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST, .streams = 16 };
	struct kvs_copy_seg segs[4 * 16];
	struct kvs_copy_engine *eng;
	unsigned char dev[4 * 16 * 512], slot[4 * 16 * 100], back[sizeof(slot)];
	uint64_t span;
	kvs_test_rc rc;

	for (uint32_t k = 0; k < 4; k++)
		make_segs(segs + k * 16, L_CONTIG, 16, 100,
			  (uint64_t)(uintptr_t)dev + k * 16 * 512, &span);
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK_EQ(kvs_copy_h2d(eng, slot, NULL, 0), 0);
	KVS_CHECK_EQ(kvs_copy_d2h(eng, back, NULL, 0), 0);
	rc = roundtrip(eng, &host_access, slot, back, 16 * 100, segs, 16, 4, false, "4 shards");
	kvs_copy_close(eng);
	return rc;
}

/* The copies of nshards shards of n tensors of tb bytes (each layout), in one
 * vector call each way, on eng. */
static kvs_test_rc vector_roundtrips(struct kvs_copy_engine *eng, uint32_t n, uint32_t nshards,
				     uint64_t tb)
{
	static const enum layout ls[] = { L_CONTIG, L_HEADS, L_ODD };
	struct kvs_copy_seg *segs = calloc((size_t)n * nshards, sizeof(*segs));
	kvs_test_rc rc = KVS_TEST_PASS;

	KVS_CHECK(segs != NULL);
	for (size_t li = 0; li < KVS_ARRAY_LEN(ls) && rc.code == KVS_TEST_PASS.code; li++) {
		uint64_t span, slot_bytes = make_segs(segs, ls[li], n, tb, 0, &span);
		unsigned char *dev = malloc(span * nshards), *slot = malloc(slot_bytes * nshards);
		unsigned char *back = malloc(slot_bytes * nshards);

		KVS_CHECK(dev && slot && back);
		for (uint32_t k = 0; k < nshards; k++)
			make_segs(segs + k * n, ls[li], n, tb, (uint64_t)(uintptr_t)dev + k * span,
				  &span);
		rc = roundtrip(eng, &host_access, slot, back, slot_bytes, segs, n, nshards, true,
			       layout_name[ls[li]]);
		free(dev);
		free(slot);
		free(back);
	}
	free(segs);
	return rc;
}

/* The vector calls: the copies of many shards (head slices, odd sizes) in one
 * call each way, as the store's copier queues a pass; n = 0 is a no-op. */
static kvs_test_rc test_host_vector(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	struct kvs_copy_engine *eng;
	kvs_test_rc rc;

	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK_EQ(kvs_copy_h2dv(eng, NULL, 0), 0);
	KVS_CHECK_EQ(kvs_copy_d2hv(eng, NULL, 0), 0);
	/* 1200 copies: more than a call per shard ever had */
	rc = vector_roundtrips(eng, 4, 300, 512);
	kvs_copy_close(eng);
	return rc;
}

/* This process's threads named name. */
static uint32_t threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	uint32_t n = 0;

	while (d && (e = readdir(d))) {
		char path[300], comm[32] = "";
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f) && !strncmp(comm, name, strlen(name)) &&
		    comm[strlen(name)] == '\n')
			n++;
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return n;
}

/* streams > 1: a vector call of 512 KiB or more is shared with the engine's
 * copy threads, in parts that cut through copies; every byte lands where it
 * should and nothing else is written, each way, as with one thread.  The
 * threads start at the first such call (not at open, not for a small call)
 * and close joins them. */
static kvs_test_rc test_host_threads(void)
{
	static const uint32_t streams[] = { 2, 3, 16 };

	for (size_t si = 0; si < KVS_ARRAY_LEN(streams); si++) {
		struct kvs_copy_opts o = { .kind = KVS_COPY_HOST, .streams = streams[si] };
		struct kvs_copy_engine *eng;
		kvs_test_rc rc;

		KVS_CHECK_OK(kvs_copy_open(&o, &eng));
		KVS_CHECK_EQ(threads_named("kvs-copy"), 0);
		rc = vector_roundtrips(eng, 4, 16, 512); /* 32 KiB a call: one thread */
		if (rc.code == KVS_TEST_PASS.code)
			KVS_CHECK_EQ(threads_named("kvs-copy"), 0);
		/* 300 shards of 4 x 4 KiB (4.7 MiB a call), then 3 shards of one
		 * 1.5 MiB tensor and odd sizes: parts inside one copy */
		if (rc.code == KVS_TEST_PASS.code)
			rc = vector_roundtrips(eng, 4, 300, 4096);
		if (rc.code == KVS_TEST_PASS.code)
			rc = vector_roundtrips(eng, 1, 3, (3u << 19) + 77);
		if (rc.code == KVS_TEST_PASS.code)
			KVS_CHECK_EQ(threads_named("kvs-copy"), streams[si] - 1);
		kvs_copy_close(eng);
		if (rc.code != KVS_TEST_PASS.code) {
			printf("  with streams %u\n", streams[si]);
			return rc;
		}
		KVS_CHECK_EQ(threads_named("kvs-copy"), 0);
	}
	return KVS_TEST_PASS;
}

/* Copies at every destination alignment within a line, odd source
 * alignments and lengths around the 64-byte line and the 256-byte minimum:
 * one call of them small enough for memcpy, one large enough that the host
 * engine streams them (io/copy_nt.c: a call of 256 KiB or more), on one thread
 * and shared with a copy thread.  Each way, every byte lands and nothing
 * around a copy is written. */
#define ALIGN_COPIES 512u
#define ALIGN_STRIDE 8192u /* room for a copy and its guards */
static const uint64_t align_lens[] = { 255, 256, 257, 320, 1000, 4095, 4096, 4163 };

static uint64_t align_len(uint32_t i)
{
	return align_lens[i % KVS_ARRAY_LEN(align_lens)] + i / 64;
}

static kvs_test_rc align_call(struct kvs_copy_engine *eng, bool h2d, uint32_t n,
			      unsigned char *from, unsigned char *to, struct kvs_copy_vec *v)
{
	uint64_t total = 0;

	fill_pattern(from, (uint64_t)ALIGN_COPIES * ALIGN_STRIDE, n + h2d);
	memset(to, 0xa5, (size_t)ALIGN_COPIES * ALIGN_STRIDE);
	for (uint32_t i = 0; i < n; i++) {
		unsigned char *src = from + (size_t)i * ALIGN_STRIDE + 64 + (i * 7) % 16;
		unsigned char *dst = to + (size_t)i * ALIGN_STRIDE + 64 + i % 64;

		v[i] = (struct kvs_copy_vec){ .len = align_len(i) };
		v[i].host = h2d ? src : dst;
		v[i].dev = (uint64_t)(uintptr_t)(h2d ? dst : src);
		total += v[i].len;
	}
	KVS_CHECK_OK(h2d ? kvs_copy_h2dv(eng, v, n) : kvs_copy_d2hv(eng, v, n));
	KVS_CHECK_OK(kvs_copy_sync(eng, kvs_deadline_after(KVS_NSEC_PER_SEC)));
	for (uint32_t i = 0; i < n; i++) {
		const unsigned char *src = from + (size_t)i * ALIGN_STRIDE + 64 + (i * 7) % 16;
		const unsigned char *region = to + (size_t)i * ALIGN_STRIDE;
		uint64_t head = 64 + i % 64, len = align_len(i);

		for (uint64_t b = 0; b < ALIGN_STRIDE; b++) {
			unsigned want = b >= head && b < head + len ? src[b - head] : 0xa5;

			if (region[b] != want)
				KVS_FAILF("%s, %u copies (%llu bytes): copy %u (dst %% 64 = %u, "
					  "len %llu), byte %llu is 0x%02x, want 0x%02x",
					  h2d ? "h2d" : "d2h", n, (unsigned long long)total, i,
					  i % 64, (unsigned long long)len, (unsigned long long)b,
					  region[b], want);
		}
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_host_alignments(void)
{
	unsigned char *a = malloc((size_t)ALIGN_COPIES * ALIGN_STRIDE);
	unsigned char *b = malloc((size_t)ALIGN_COPIES * ALIGN_STRIDE);
	struct kvs_copy_vec *v = calloc(ALIGN_COPIES, sizeof(*v));
	kvs_test_rc rc = KVS_TEST_PASS;
	uint64_t small = 0;

	KVS_CHECK(a && b && v);
	for (uint32_t i = 0; i < 64; i++)
		small += align_len(i);
	KVS_CHECK(small < (128u << 10)); /* the first call stays below streaming */
	for (uint32_t streams = 1; streams <= 2 && rc.code == KVS_TEST_PASS.code; streams++) {
		struct kvs_copy_opts o = { .kind = KVS_COPY_HOST, .streams = streams };
		struct kvs_copy_engine *eng;

		KVS_CHECK_OK(kvs_copy_open(&o, &eng));
		for (int h2d = 0; h2d <= 1 && rc.code == KVS_TEST_PASS.code; h2d++) {
			rc = align_call(eng, h2d, 64, a, b, v);
			if (rc.code == KVS_TEST_PASS.code)
				rc = align_call(eng, h2d, ALIGN_COPIES, a, b, v);
		}
		kvs_copy_close(eng);
		if (rc.code != KVS_TEST_PASS.code)
			printf("  with streams %u\n", streams);
	}
	free(v);
	free(b);
	free(a);
	return rc;
}

/* Every -EINVAL of the vector calls; a refused vector copies nothing. */
static kvs_test_rc test_host_vector_bad_args(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	static struct kvs_copy_vec v[KVS_COPY_VEC_MAX + 1];
	struct kvs_copy_engine *eng;
	unsigned char host[64], dev[64];
	uint64_t d = (uint64_t)(uintptr_t)dev;

	for (uint32_t i = 0; i < KVS_COPY_VEC_MAX + 1; i++)
		v[i] = (struct kvs_copy_vec){ host, d, 1 };
	memset(host, 1, sizeof(host));
	memset(dev, 0, sizeof(dev));
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, v, KVS_COPY_VEC_MAX + 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_d2hv(eng, v, KVS_COPY_VEC_MAX + 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_h2dv(NULL, v, 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, NULL, 1), -EINVAL);
	/* the bad copy is the last of three: the first two must not be made */
	v[0] = (struct kvs_copy_vec){ host, d, 8 };
	v[1] = (struct kvs_copy_vec){ host + 8, d + 8, 8 };
	v[2] = (struct kvs_copy_vec){ NULL, d + 16, 8 }; /* host NULL */
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, v, 3), -EINVAL);
	v[2] = (struct kvs_copy_vec){ host + 16, d + 16, 0 }; /* len 0 */
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, v, 3), -EINVAL);
	v[2] = (struct kvs_copy_vec){ host + 16, 0, 8 }; /* dev 0 */
	KVS_CHECK_ERR(kvs_copy_d2hv(eng, v, 3), -EINVAL);
	v[2] = (struct kvs_copy_vec){ host + 16, UINT64_MAX - 3, 8 }; /* dev + len wraps */
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, v, 3), -EINVAL);
	v[2] = (struct kvs_copy_vec){ (void *)(UINTPTR_MAX - 3), d + 16, 8 }; /* host wraps */
	KVS_CHECK_ERR(kvs_copy_h2dv(eng, v, 3), -EINVAL);
	for (size_t i = 0; i < sizeof(dev); i++)
		KVS_CHECK_EQ(dev[i], 0);
	v[2] = (struct kvs_copy_vec){ host + 16, d + 16, 8 };
	KVS_CHECK_OK(kvs_copy_h2dv(eng, v, 3));
	KVS_CHECK_OK(kvs_copy_sync(eng, DEADLINE()));
	for (size_t i = 0; i < sizeof(dev); i++)
		KVS_CHECK_EQ(dev[i], i < 24 ? 1 : 0);
	kvs_copy_close(eng);
	return KVS_TEST_PASS;
}

/* Every -EINVAL of io/copy.h; a refused list copies nothing, not even its valid
 * prefix. */
static kvs_test_rc test_host_bad_args(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	struct kvs_copy_seg segs[KVS_MAX_TENSORS + 1];
	struct kvs_copy_engine *eng;
	unsigned char slot[64], dev[64];
	uint64_t d = (uint64_t)(uintptr_t)dev;

	for (uint32_t i = 0; i < KVS_MAX_TENSORS + 1; i++)
		segs[i] = (struct kvs_copy_seg){ .host_off = 0, .dev = d, .len = 1 };
	memset(slot, 1, sizeof(slot));
	memset(dev, 0, sizeof(dev));
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));

	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, KVS_MAX_TENSORS + 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_d2h(eng, slot, segs, KVS_MAX_TENSORS + 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_h2d(NULL, slot, segs, 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_h2d(eng, NULL, segs, 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_d2h(eng, NULL, segs, 1), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, NULL, 1), -EINVAL);

	/* The bad segment is the last of three: the first two must not be copied. */
	segs[0] = (struct kvs_copy_seg){ 0, d, 8 };
	segs[1] = (struct kvs_copy_seg){ 8, d + 8, 8 };
	segs[2] = (struct kvs_copy_seg){ 16, d + 16, 0 }; /* len 0 */
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, 3), -EINVAL);
	segs[2] = (struct kvs_copy_seg){ 16, 0, 8 }; /* dev 0 */
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, 3), -EINVAL);
	segs[2] = (struct kvs_copy_seg){ UINT64_MAX - 3, d + 16, 8 }; /* host_off + len wraps */
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, 3), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_d2h(eng, slot, segs, 3), -EINVAL);
	segs[2] = (struct kvs_copy_seg){ UINT64_MAX - (uint64_t)(uintptr_t)slot, d + 16, 8 };
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, 3), -EINVAL); /* host + off wraps */
	segs[2] = (struct kvs_copy_seg){ 16, UINT64_MAX - 3, 8 }; /* dev + len wraps */
	KVS_CHECK_ERR(kvs_copy_h2d(eng, slot, segs, 3), -EINVAL);
	for (size_t i = 0; i < sizeof(dev); i++)
		KVS_CHECK_EQ(dev[i], 0);

	/* The same list with a good third segment goes through. */
	segs[2] = (struct kvs_copy_seg){ 16, d + 16, 8 };
	KVS_CHECK_OK(kvs_copy_h2d(eng, slot, segs, 3));
	KVS_CHECK_OK(kvs_copy_sync(eng, DEADLINE()));
	for (size_t i = 0; i < sizeof(dev); i++)
		KVS_CHECK_EQ(dev[i], i < 24 ? 1 : 0);

	KVS_CHECK_ERR(kvs_copy_register(eng, NULL, 64), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_register(eng, slot, 0), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_unregister(eng, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_sync(NULL, DEADLINE()), -EINVAL);
	kvs_copy_close(eng);
	return KVS_TEST_PASS;
}

/* NULL: a no-op; an event on the host engine: -EINVAL (it has no streams). */
static kvs_test_rc test_host_wait_event(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_HOST };
	struct kvs_copy_engine *eng;
	int not_an_event = 0;

	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	KVS_CHECK_EQ(kvs_copy_wait_event(eng, NULL), 0);
	KVS_CHECK_ERR(kvs_copy_wait_event(eng, &not_an_event), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_wait_event(NULL, NULL), -EINVAL);
	kvs_copy_close(eng);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_opts(void)
{
	struct kvs_copy_opts o = { .kind = 99 };
	struct kvs_copy_engine *eng = (void *)1;

	KVS_CHECK_ERR(kvs_copy_open(&o, &eng), -EINVAL);
	KVS_CHECK(eng == NULL);
	KVS_CHECK_ERR(kvs_copy_open(NULL, &eng), -EINVAL);
	KVS_CHECK_ERR(kvs_copy_open(&o, NULL), -EINVAL);
	o = (struct kvs_copy_opts){ .kind = KVS_COPY_HOST, .streams = KVS_COPY_MAX_STREAMS + 1 };
	eng = (void *)1;
	KVS_CHECK_ERR(kvs_copy_open(&o, &eng), -EINVAL);
	KVS_CHECK(eng == NULL);
	o = (struct kvs_copy_opts){ .kind = KVS_COPY_CUDA, .streams = KVS_COPY_MAX_STREAMS + 1 };
	KVS_CHECK_ERR(kvs_copy_open(&o, &eng), -EINVAL);
	o = (struct kvs_copy_opts){ .kind = KVS_COPY_HOST, .strategy = KVS_COPY_STRATEGY_KERNEL + 1 };
	KVS_CHECK_ERR(kvs_copy_open(&o, &eng), -EINVAL);
	/* The host engine accepts (and ignores) every valid streams and strategy. */
	o = (struct kvs_copy_opts){ .kind = KVS_COPY_HOST, .streams = KVS_COPY_MAX_STREAMS,
				    .strategy = KVS_COPY_STRATEGY_KERNEL };
	KVS_CHECK_OK(kvs_copy_open(&o, &eng));
	kvs_copy_close(eng);
	kvs_copy_close(NULL);
	return KVS_TEST_PASS;
}

/* The cuda engine's open, wherever this runs: a device -> it opens (and names
 * its PCI bus); no device or driver -> -ENODEV; no cuda engine in this build ->
 * -EOPNOTSUPP.  Never a crash, never a half-open engine. */
static kvs_test_rc test_cuda_open(void)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_CUDA, .device_id = 0, .streams = 4 };
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

/* ---------------------------------------------------------------------------- */
/* Cuda engine (--cuda)                                                         */

/* Opens the cuda engine on device 0, or skips with the reason. */
static kvs_test_rc cuda_engine(struct kvs_copy_engine **eng, uint32_t strategy, uint32_t streams)
{
	struct kvs_copy_opts o = { .kind = KVS_COPY_CUDA, .device_id = 0, .streams = streams,
				   .strategy = strategy };
	int rc = kvs_copy_open(&o, eng);

	if (rc == -EOPNOTSUPP && strategy == KVS_COPY_STRATEGY_KERNEL) {
		/* No cuda engine at all, or one without the kernel (no nvcc at build):
		 * the same open with auto tells which. */
		o.strategy = KVS_COPY_STRATEGY_AUTO;
		rc = kvs_copy_open(&o, eng);
		if (rc == 0) {
			kvs_copy_close(*eng);
			*eng = NULL;
			KVS_SKIP("this build's cuda engine has no copy kernel (no nvcc at build)");
		}
	}
	if (rc == -EOPNOTSUPP)
		KVS_SKIP("no cuda copy engine in this build (%s variant%s)", KVS_TEST_VARIANT,
			 strcmp(KVS_TEST_VARIANT, "kernel") == 0 ? ", built without CUDA" : "");
	if (rc == -ENODEV)
		KVS_SKIP("no CUDA device or driver on this machine (open: -ENODEV)");
	KVS_CHECK_OK(rc);
	return KVS_TEST_PASS;
}

#if defined(KVS_HAVE_CUDA)
static const char *const strategy_name[] = { "auto", "memcpy", "batch", "kernel" };

static int cuda_read(void *dst, uint64_t dev, uint64_t len)
{
	return cudaMemcpy(dst, (const void *)(uintptr_t)dev, len, cudaMemcpyDeviceToHost) ==
	       cudaSuccess ? 0 : -EIO;
}

static int cuda_clear(uint64_t dev, uint64_t len)
{
	return cudaMemset((void *)(uintptr_t)dev, 0, len) == cudaSuccess ? 0 : -EIO;
}

static const struct dev_access cuda_access = { cuda_read, cuda_clear };

/* Page-aligned host memory (mmap), as the store's data segments are. */
static void *host_alloc(uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}
#endif

/*
 * A round trip on the cuda engine: nshards shards of layout l (n tensors of tb)
 * with the given strategy and streams, from registered host memory (unregistered
 * when !reg: the kernel is then out of reach).
 */
static kvs_test_rc cuda_layout(uint32_t strategy, uint32_t streams, enum layout l, uint32_t n,
			       uint64_t tb, uint32_t nshards, bool reg, bool vec)
{
	struct kvs_copy_engine *eng = NULL;

	KVS_TRY(cuda_engine(&eng, strategy, streams));
#if defined(KVS_HAVE_CUDA)
	struct kvs_copy_seg *segs = calloc((size_t)n * nshards, sizeof(*segs));
	uint64_t span = 0, slot_bytes = 0;
	unsigned char *dev = NULL, *slot = NULL, *back = NULL;
	char what[160];
	kvs_test_rc rc = KVS_TEST_FAIL;

	if (!segs) {
		kvs_copy_close(eng);
		KVS_FAILF("out of memory");
	}
	slot_bytes = make_segs(segs, l, n, tb, 0, &span);

	snprintf(what, sizeof(what), "strategy %s, %u stream(s), %s, %u x %llu B, %u shard(s)%s%s",
		 strategy_name[strategy], streams, layout_name[l], n, (unsigned long long)tb,
		 nshards, reg ? "" : ", unregistered", vec ? ", one vector call" : "");
	slot = host_alloc(slot_bytes * nshards);
	back = host_alloc(slot_bytes * nshards);
	if (!slot || !back || cudaMalloc((void **)&dev, span * nshards) != cudaSuccess) {
		fprintf(stderr, "%s:%d: %s: allocation failed\n", __FILE__, __LINE__, what);
		goto out;
	}
	for (uint32_t k = 0; k < nshards; k++)
		make_segs(segs + k * n, l, n, tb, (uint64_t)(uintptr_t)dev + k * span, &span);
	if (reg && (kvs_copy_register(eng, slot, slot_bytes * nshards) < 0 ||
		    kvs_copy_register(eng, back, slot_bytes * nshards) < 0)) {
		fprintf(stderr, "%s:%d: %s: kvs_copy_register failed\n", __FILE__, __LINE__, what);
		goto out;
	}
	rc = roundtrip(eng, &cuda_access, slot, back, slot_bytes, segs, n, nshards, vec, what);
	if (rc.code == KVS_TEST_PASS.code)
		printf("  %s: bit-exact\n", what);
out:
	kvs_copy_close(eng); /* unregisters what is still registered */
	if (dev)
		cudaFree(dev);
	if (slot)
		munmap(slot, slot_bytes * nshards);
	if (back)
		munmap(back, slot_bytes * nshards);
	free(segs);
	return rc;
#else
	(void)strategy, (void)streams, (void)l, (void)n, (void)tb, (void)nshards, (void)reg, (void)vec;
	kvs_copy_close(eng);
	KVS_FAILF("the cuda engine opened in a build without KVS_HAVE_CUDA");
#endif
}

/* 128 tensors of 4 KiB, 32 KiB, 256 KiB, then odd sizes and alignments. */
static kvs_test_rc cuda_strategy(uint32_t strategy)
{
	static const uint64_t sizes[] = { 4 << 10, 32 << 10, 256 << 10 };

	for (size_t i = 0; i < KVS_ARRAY_LEN(sizes); i++)
		KVS_TRY(cuda_layout(strategy, 1, L_CONTIG, 128, sizes[i], 1, true, false));
	KVS_TRY(cuda_layout(strategy, 1, L_ODD, 37, 5000, 1, true, false));
	/* More segments than one kernel launch takes (two launches). */
	KVS_TRY(cuda_layout(strategy, 1, L_ODD, KVS_MAX_TENSORS, 3000, 1, true, false));
	return cuda_layout(strategy, 1, L_CONTIG, 2, 3 << 20, 1, true, false);
}

static kvs_test_rc test_cuda_memcpy(void)
{
	return cuda_strategy(KVS_COPY_STRATEGY_MEMCPY);
}

static kvs_test_rc test_cuda_batch(void)
{
	return cuda_strategy(KVS_COPY_STRATEGY_BATCH);
}

static kvs_test_rc test_cuda_kernel(void)
{
	return cuda_strategy(KVS_COPY_STRATEGY_KERNEL);
}

/* Auto: every branch of the pick (few, large, small registered, small unregistered,
 * mid-sized). */
static kvs_test_rc test_cuda_auto(void)
{
	KVS_TRY(cuda_strategy(KVS_COPY_STRATEGY_AUTO));
	return cuda_layout(KVS_COPY_STRATEGY_AUTO, 1, L_CONTIG, 128, 4 << 10, 1, false, false);
}

static kvs_test_rc test_cuda_head_slices(void)
{
	for (uint32_t s = KVS_COPY_STRATEGY_AUTO; s <= KVS_COPY_STRATEGY_KERNEL; s++) {
		KVS_TRY(cuda_layout(s, 1, L_HEADS, 128, 32 << 10, 1, true, false));
		KVS_TRY(cuda_layout(s, 1, L_HEADS, 64, 8 * 24, 1, true, false));
	}
	return KVS_TEST_PASS;
}

/* One vector call for many shards (the store's pass: 256 shards of one 8 KiB
 * tensor, the vLLM connector's shape; head slices; odd sizes), every strategy,
 * one and several streams. */
static kvs_test_rc test_cuda_vector(void)
{
	for (uint32_t s = KVS_COPY_STRATEGY_AUTO; s <= KVS_COPY_STRATEGY_KERNEL; s++) {
		KVS_TRY(cuda_layout(s, 1, L_CONTIG, 1, 8 << 10, 256, true, true));
		KVS_TRY(cuda_layout(s, 4, L_HEADS, 8, 16 << 10, 64, true, true));
		KVS_TRY(cuda_layout(s, 2, L_ODD, 37, 5000, 20, true, true));
	}
	/* auto over unregistered memory: never the kernel */
	return cuda_layout(KVS_COPY_STRATEGY_AUTO, 1, L_CONTIG, 1, 8 << 10, 256, false, true);
}

/* Several calls per sync over 4 and 16 streams. */
static kvs_test_rc test_cuda_streams(void)
{
	for (uint32_t s = KVS_COPY_STRATEGY_AUTO; s <= KVS_COPY_STRATEGY_KERNEL; s++) {
		KVS_TRY(cuda_layout(s, 4, L_CONTIG, 128, 4 << 10, 8, true, false));
		KVS_TRY(cuda_layout(s, 16, L_HEADS, 128, 32 << 10, 5, true, false));
		KVS_TRY(cuda_layout(s, 3, L_ODD, 37, 5000, 7, true, false));
	}
	return KVS_TEST_PASS;
}

#if defined(KVS_HAVE_CUDA)
/* A host function the test's stream runs: holds that stream (and so the event
 * recorded after it) until released, bounded by 10 s. */
static atomic_int gate_open;

static void CUDART_CB hold_stream(void *arg)
{
	uint64_t deadline = kvs_deadline_after(10ull * KVS_NSEC_PER_SEC);

	(void)arg;
	while (!atomic_load_explicit(&gate_open, memory_order_acquire) && kvs_now_ns() < deadline)
		usleep(100);
}
#endif

/*
 * The caller's work (a held stream, then a memset of the tensors to 0xab) ends in
 * an event; the engine waits for it, then gathers the tensors.  While the caller's
 * stream is held, sync must time out (the gather waits on every stream); once
 * released, the gathered slot holds 0xab everywhere: the gather ran after the
 * memset.
 */
static kvs_test_rc wait_event_case(uint32_t strategy, uint32_t streams)
{
	struct kvs_copy_engine *eng = NULL;

	KVS_TRY(cuda_engine(&eng, strategy, streams));
#if defined(KVS_HAVE_CUDA)
	enum { N = 128, TB = 4096 };
	struct kvs_copy_seg segs[N];
	uint64_t span, slot_bytes = make_segs(segs, L_CONTIG, N, TB, 0, &span);
	unsigned char *dev = NULL, *back = host_alloc(slot_bytes);
	cudaStream_t user = NULL;
	cudaEvent_t ev = NULL;
	kvs_test_rc rc = KVS_TEST_FAIL;
	int r;

	if (!back || cudaMalloc((void **)&dev, span) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
		fprintf(stderr, "%s:%d: setup failed\n", __FILE__, __LINE__);
		goto out;
	}
	make_segs(segs, L_CONTIG, N, TB, (uint64_t)(uintptr_t)dev, &span);
	memset(back, 0, slot_bytes);
	if (kvs_copy_register(eng, back, slot_bytes) < 0 || cudaMemset(dev, 0, span) != cudaSuccess)
		goto out;
	atomic_store_explicit(&gate_open, 0, memory_order_release);
	if (cudaLaunchHostFunc(user, hold_stream, NULL) != cudaSuccess ||
	    cudaMemsetAsync(dev, 0xab, span, user) != cudaSuccess ||
	    cudaEventRecord(ev, user) != cudaSuccess) {
		atomic_store_explicit(&gate_open, 1, memory_order_release);
		fprintf(stderr, "%s:%d: queueing the caller's work failed\n", __FILE__, __LINE__);
		goto out;
	}
	r = kvs_copy_wait_event(eng, ev);
	if (r == 0)
		r = kvs_copy_d2h(eng, back, segs, N);
	if (r == 0) {
		r = kvs_copy_sync(eng, kvs_deadline_after(50ull * 1000000ull));
		if (r != -ETIMEDOUT) {
			fprintf(stderr, "%s:%d: sync while the event is pending: %s, want %s\n",
				__FILE__, __LINE__, kvs_strerror(r), kvs_strerror(-ETIMEDOUT));
			r = -1;
		} else {
			r = 0;
		}
	}
	atomic_store_explicit(&gate_open, 1, memory_order_release);
	if (r < 0) {
		fprintf(stderr, "%s:%d: wait_event / d2h failed: %s\n", __FILE__, __LINE__,
			kvs_strerror(r));
		goto out;
	}
	r = kvs_copy_sync(eng, DEADLINE());
	if (r < 0) {
		fprintf(stderr, "%s:%d: sync: %s\n", __FILE__, __LINE__, kvs_strerror(r));
		goto out;
	}
	for (uint64_t b = 0; b < slot_bytes; b++) {
		if (back[b] != 0xab) {
			fprintf(stderr, "%s:%d: strategy %s, %u streams: byte %llu is 0x%02x: the gather "
				"did not wait for the event\n", __FILE__, __LINE__,
				strategy_name[strategy], streams, (unsigned long long)b, back[b]);
			goto out;
		}
	}
	printf("  wait_event: strategy %s, %u streams: ordered\n", strategy_name[strategy], streams);
	rc = KVS_TEST_PASS;
out:
	if (user)
		cudaStreamSynchronize(user);
	kvs_copy_close(eng);
	if (ev)
		cudaEventDestroy(ev);
	if (user)
		cudaStreamDestroy(user);
	if (dev)
		cudaFree(dev);
	if (back)
		munmap(back, slot_bytes);
	return rc;
#else
	(void)strategy, (void)streams;
	kvs_copy_close(eng);
	KVS_FAILF("the cuda engine opened in a build without KVS_HAVE_CUDA");
#endif
}

static kvs_test_rc test_cuda_wait_event(void)
{
	struct kvs_copy_engine *eng = NULL;

	KVS_TRY(cuda_engine(&eng, KVS_COPY_STRATEGY_AUTO, 1));
	KVS_CHECK_EQ(kvs_copy_wait_event(eng, NULL), 0);
	kvs_copy_close(eng);
	KVS_TRY(wait_event_case(KVS_COPY_STRATEGY_MEMCPY, 4));
	KVS_TRY(wait_event_case(KVS_COPY_STRATEGY_BATCH, 4));
	KVS_TRY(wait_event_case(KVS_COPY_STRATEGY_KERNEL, 4));
	return wait_event_case(KVS_COPY_STRATEGY_AUTO, 1);
}

/* strategy=kernel on memory that is not registered, or that straddles the end of
 * a registered region: -EINVAL, nothing queued. */
static kvs_test_rc test_cuda_kernel_unregistered(void)
{
	struct kvs_copy_engine *eng = NULL;

	KVS_TRY(cuda_engine(&eng, KVS_COPY_STRATEGY_KERNEL, 1));
#if defined(KVS_HAVE_CUDA)
	unsigned char *slot = host_alloc(1 << 20), *dev = NULL;
	struct kvs_copy_seg seg = { .host_off = 0, .len = 4096 };
	kvs_test_rc rc = KVS_TEST_FAIL;
	int r1, r2, r3;

	if (!slot || cudaMalloc((void **)&dev, 4096) != cudaSuccess)
		goto out;
	seg.dev = (uint64_t)(uintptr_t)dev;
	r1 = kvs_copy_h2d(eng, slot, &seg, 1);
	r2 = kvs_copy_register(eng, slot, 1 << 19);
	seg.host_off = (1 << 19) - 2048; /* half in, half out */
	r3 = kvs_copy_h2d(eng, slot, &seg, 1);
	if (r1 != -EINVAL || r2 != 0 || r3 != -EINVAL) {
		fprintf(stderr, "%s:%d: unregistered %d, register %d, straddling %d; want %d, 0, %d\n",
			__FILE__, __LINE__, r1, r2, r3, -EINVAL, -EINVAL);
		goto out;
	}
	seg.host_off = 0;
	if (kvs_copy_h2d(eng, slot, &seg, 1) < 0 || kvs_copy_sync(eng, DEADLINE()) < 0 ||
	    kvs_copy_unregister(eng, slot) < 0)
		goto out;
	rc = KVS_TEST_PASS;
out:
	kvs_copy_close(eng);
	if (dev)
		cudaFree(dev);
	if (slot)
		munmap(slot, 1 << 20);
	return rc;
#else
	kvs_copy_close(eng);
	KVS_FAILF("the cuda engine opened in a build without KVS_HAVE_CUDA");
#endif
}

static const struct kvs_test_case cases[] = {
	{ "host_contiguous", test_host_contiguous },
	{ "host_head_slices", test_host_head_slices },
	{ "host_odd_sizes", test_host_odd_sizes },
	{ "host_shards", test_host_shards },
	{ "host_vector", test_host_vector },
	{ "host_threads", test_host_threads },
	{ "host_alignments", test_host_alignments },
	{ "host_vector_bad_args", test_host_vector_bad_args },
	{ "host_bad_args", test_host_bad_args },
	{ "host_wait_event", test_host_wait_event },
	{ "bad_opts", test_bad_opts },
	{ "cuda_open", test_cuda_open },
};

/* Needs a GPU: run as `io_copy --cuda [case...]` (CTest: io_copy_cuda). */
static const struct kvs_test_case cuda_cases[] = {
	{ "cuda_memcpy", test_cuda_memcpy },
	{ "cuda_batch", test_cuda_batch },
	{ "cuda_kernel", test_cuda_kernel },
	{ "cuda_auto", test_cuda_auto },
	{ "cuda_head_slices", test_cuda_head_slices },
	{ "cuda_streams", test_cuda_streams },
	{ "cuda_vector", test_cuda_vector },
	{ "cuda_wait_event", test_cuda_wait_event },
	{ "cuda_kernel_unregistered", test_cuda_kernel_unregistered },
};

int main(int argc, char **argv)
{
	return kvs_test_run_groups(argc, argv, "--cuda", cases, KVS_ARRAY_LEN(cases), cuda_cases,
				   KVS_ARRAY_LEN(cuda_cases), NULL, 0);
}
