/*
 * tests/io_synthetic.c — the none, latency and fault backends, a user ops table,
 * the latency content (common/pattern.h) and config validation.
 *
 *   none      lookup 0, reads -ENOENT at submit, writes complete with their length;
 *   latency   content equals kvs_pattern_fill() at any offset; nothing
 *             completes before latency_ns; the queue-depth limit gives -EAGAIN;
 *   fault     seeded error rate (count in a band, same seed -> same sequence),
 *             short reads -> -EIO, delay holds completions;
 *   user ops  dispatched through kvs_backend_*; ABI/size checked; optional
 *             members absent -> defaults;
 *   config    every reserved word must be zero ("reserved" logged), as in the
 *             cache config; no size field; the tensor table (tensor_count,
 *             tensor_bytes: each > 0, summing to shard_bytes) and a fault
 *             backend's inner geometry (tensor table, layout_tag) named when bad.
 * Seeds are fixed and printed.
 */
#include "common/pattern.h"
#include "harness.h"

#define SHARD 4096
#define SEED 0xfa17u

static char g_log[2048];

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	(void)level;
	size_t n = strlen(g_log);
	snprintf(g_log + n, sizeof(g_log) - n, "%s\n", msg);
}

static struct kvs_block_id block_of(uint32_t n)
{
	struct kvs_block_id id;

	for (int i = 0; i < 16; i++)
		id.bytes[i] = (uint8_t)(n * 59u + (uint32_t)i * 3u + SEED);
	return id;
}

static void cfg_kind(struct kvs_backend_config *cfg, uint32_t kind)
{
	kvs_backend_config_init(cfg);
	cfg->kind = kind;
	cfg->shard_bytes = SHARD;
	cfg->shards_per_block = 8;
	cfg->log = log_cb;
	g_log[0] = '\0';
}

static kvs_test_rc test_none(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c[2];
	char buf[SHARD];
	struct kvs_backend_io io = { .block = block_of(1), .buf = buf, .len = SHARD, .token = 9 };

	cfg_kind(&cfg, KVS_BACKEND_NONE);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &io.block), 0);
	KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -ENOENT);
	KVS_CHECK_EQ(kvs_backend_poll(b, c, 2, 0), 0);
	KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, c, 2, 0), 1);
	KVS_CHECK_EQ(c[0].token, 9);
	KVS_CHECK_EQ(c[0].result, SHARD);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &io.block), 0);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_latency_fill(void)
{
	static unsigned char whole[3 * 1024 + 5], part[1000], other[64];
	struct kvs_block_id id = block_of(2);

	kvs_pattern_fill(&id, 3, 0, whole, sizeof(whole));
	for (uint64_t off = 0; off < 40; off += 3) {
		kvs_pattern_fill(&id, 3, off + 11, part, sizeof(part));
		KVS_CHECK(memcmp(part, whole + off + 11, sizeof(part)) == 0);
	}
	kvs_pattern_fill(&id, 4, 0, other, sizeof(other));
	KVS_CHECK(memcmp(other, whole, sizeof(other)) != 0);
	id.bytes[15] ^= 1;
	kvs_pattern_fill(&id, 3, 0, other, sizeof(other));
	KVS_CHECK(memcmp(other, whole, sizeof(other)) != 0);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/* The content is frozen (common/pattern.h): bytes the library served before
	 * the function left its ABI (kvs_backend_latency_fill of kvshare 0.1.0). */
	static const unsigned char golden0[16] = {
		0x42, 0x27, 0xe3, 0xb3, 0x8d, 0xeb, 0xf8, 0x99,
		0xd0, 0x47, 0xa1, 0x4f, 0xa0, 0x94, 0x93, 0x72,
	};
	static const unsigned char golden5[16] = { /* shard 5, offset 1 MiB + 3 */
		0xc1, 0x96, 0xd7, 0x71, 0x04, 0x9b, 0x16, 0x31,
		0x4e, 0xe0, 0x76, 0xfc, 0x43, 0x91, 0x76, 0xfe,
	};
	for (int i = 0; i < 16; i++)
		id.bytes[i] = (uint8_t)i;
	kvs_pattern_fill(&id, 0, 0, other, 16);
	KVS_CHECK(memcmp(other, golden0, 16) == 0);
	kvs_pattern_fill(&id, 5, (UINT64_C(1) << 20) + 3, other, 16);
	KVS_CHECK(memcmp(other, golden5, 16) == 0);
#endif
	return KVS_TEST_PASS;
}

static kvs_test_rc test_latency_content(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c[8];
	static unsigned char buf[8][SHARD], want[SHARD];
	uint64_t t0;
	int got = 0;

	cfg_kind(&cfg, KVS_BACKEND_LATENCY);
	cfg.latency_ns = 300 * 1000000ull;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &(struct kvs_block_id){ { 0 } }), 1);
	t0 = kvs_now_ns();
	for (uint32_t s = 0; s < 8; s++) {
		struct kvs_backend_io io = { .block = block_of(s), .shard = s, .buf = buf[s],
					     .offset = s * 100, .len = SHARD - s * 100, .token = s };
		KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	}
	KVS_CHECK_EQ(kvs_backend_poll(b, c, 8, 0), 0); /* due in 300 ms */
	while (got < 8) {
		int n = kvs_backend_poll(b, c + got, (uint32_t)(8 - got), 5 * KVS_NSEC_PER_SEC);
		KVS_CHECK(n > 0);
		got += n;
	}
	KVS_CHECK(kvs_now_ns() - t0 >= cfg.latency_ns);
	for (int i = 0; i < 8; i++) {
		uint32_t s = (uint32_t)c[i].token;
		KVS_CHECK_EQ(c[i].result, SHARD - s * 100);
		struct kvs_block_id id = block_of(s);
		kvs_pattern_fill(&id, s, s * 100, want, SHARD - s * 100);
		KVS_CHECK(memcmp(want, buf[s], SHARD - s * 100) == 0);
	}
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_latency_queue_depth(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c[4];
	char buf[SHARD];
	struct kvs_backend_io io = { .block = block_of(3), .buf = buf, .len = SHARD };
	int got = 0;

	cfg_kind(&cfg, KVS_BACKEND_LATENCY);
	cfg.latency_ns = 1000000;
	cfg.latency_queue_depth = 2;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
	KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -EAGAIN);
	while (got < 1)
		got += kvs_backend_poll(b, c, 1, 5 * KVS_NSEC_PER_SEC);
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	while (got < 3) {
		int n = kvs_backend_poll(b, c, 4, 5 * KVS_NSEC_PER_SEC);
		KVS_CHECK(n > 0);
		got += n;
	}
	KVS_CHECK_EQ(kvs_backend_poll(b, c, 4, 0), 0);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* n reads through fault(latency 0); results into res[]. */
static int fault_run(uint32_t error_ppm, uint32_t short_ppm, uint64_t seed, int n, int64_t *res)
{
	struct kvs_backend_config inner, cfg;
	struct kvs_backend *b = NULL;
	static unsigned char buf[SHARD], want[SHARD];
	int got = 0;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.latency_ns = 0;
	cfg_kind(&cfg, KVS_BACKEND_FAULT);
	cfg.fault_inner = &inner;
	cfg.fault_error_ppm = error_ppm;
	cfg.fault_short_ppm = short_ppm;
	cfg.fault_seed = seed;
	if (kvs_backend_open(&cfg, &b) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		struct kvs_backend_io io = { .block = block_of((uint32_t)i), .shard = 1, .buf = buf,
					     .len = SHARD, .token = (uint64_t)i };
		struct kvs_backend_completion c;

		memset(buf, 0, sizeof(buf));
		if (kvs_backend_submit_read(b, &io) < 0 ||
		    kvs_backend_poll(b, &c, 1, 5 * KVS_NSEC_PER_SEC) != 1 || c.token != (uint64_t)i)
			return -1;
		res[i] = c.result;
		if (c.result == SHARD) {
			kvs_pattern_fill(&io.block, 1, 0, want, SHARD);
			if (memcmp(want, buf, SHARD))
				return -1;
		}
		got++;
	}
	kvs_backend_close(b);
	return got;
}

static kvs_test_rc test_fault_rates(void)
{
	enum { N = 2000 };
	static int64_t a[N], b2[N];
	int errors = 0;

	printf("seed=0x%x\n", SEED);
	KVS_CHECK_EQ(fault_run(250000, 0, SEED, N, a), N);
	KVS_CHECK_EQ(fault_run(250000, 0, SEED, N, b2), N);
	for (int i = 0; i < N; i++) {
		KVS_CHECK(a[i] == SHARD || a[i] == -EIO);
		KVS_CHECK_EQ(a[i], b2[i]);
		errors += a[i] == -EIO;
	}
	printf("errors %d / %d at 25%%\n", errors, N);
	KVS_CHECK(errors > N / 4 - 150 && errors < N / 4 + 150);

	KVS_CHECK_EQ(fault_run(0, 1000000, SEED, 16, a), 16);
	for (int i = 0; i < 16; i++)
		KVS_CHECK_ERR(a[i], -EIO);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_fault_delay(void)
{
	struct kvs_backend_config inner, cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c;
	char buf[SHARD];
	struct kvs_backend_io io = { .block = block_of(4), .buf = buf, .len = SHARD, .token = 5 };
	uint64_t t0;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.latency_ns = 0;
	cfg_kind(&cfg, KVS_BACKEND_FAULT);
	cfg.fault_inner = &inner;
	cfg.fault_delay_ns = 200 * 1000000ull;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 0), 0);
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 5 * KVS_NSEC_PER_SEC), 1);
	KVS_CHECK(kvs_now_ns() - t0 >= cfg.fault_delay_ns);
	KVS_CHECK_EQ(c.token, 5);
	KVS_CHECK_EQ(c.result, SHARD);
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 1000000), 0); /* nothing in flight: no hang */
	kvs_backend_close(b);

	/* Bad fault configs name their field. */
	inner.shard_bytes = SHARD * 2;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "fault_inner") != NULL);
	inner.shard_bytes = SHARD;
	cfg.fault_error_ppm = 1000001;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "fault_error_ppm") != NULL);
	cfg.fault_error_ppm = 0;
	cfg.fault_inner = NULL;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "fault_inner") != NULL);
	return KVS_TEST_PASS;
}

/* A user backend: an in-memory one-shard store with an immediate completion. */
struct mem {
	unsigned char data[SHARD];
	bool have;
	struct kvs_backend_completion done[4];
	uint32_t ndone;
	int opened_arg;
};

static int mem_open(const struct kvs_backend_config *cfg, void **state)
{
	struct mem *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->opened_arg = *(int *)cfg->user_arg;
	*state = m;
	return 0;
}

static int mem_lookup(void *state, const struct kvs_block_id *block)
{
	(void)block;
	return ((struct mem *)state)->have;
}

static int mem_submit(struct mem *m, const struct kvs_backend_io *io, bool read)
{
	if (m->ndone == 4)
		return -EAGAIN;
	if (read && !m->have)
		return -ENOENT;
	if (read)
		memcpy(io->buf, m->data + io->offset, io->len);
	else
		memcpy(m->data, io->buf, io->len), m->have = true;
	m->done[m->ndone++] = (struct kvs_backend_completion){ io->token, (int64_t)io->len };
	return 0;
}

static int mem_read(void *s, const struct kvs_backend_io *io)
{
	return mem_submit(s, io, true);
}

static int mem_write(void *s, const struct kvs_backend_io *io)
{
	return mem_submit(s, io, false);
}

static int mem_poll(void *s, struct kvs_backend_completion *out, uint32_t max, uint64_t t)
{
	struct mem *m = s;
	uint32_t n = m->ndone < max ? m->ndone : max;

	(void)t;
	memcpy(out, m->done, n * sizeof(*out));
	memmove(m->done, m->done + n, (m->ndone - n) * sizeof(*out));
	m->ndone -= n;
	return (int)n;
}

static void mem_close(void *s)
{
	free(s);
}

static kvs_test_rc test_user_ops(void)
{
	/* A table as an older provider would compile it: no optional members. */
	struct kvs_backend_ops ops = {
		.abi = KVS_BACKEND_OPS_ABI,
		.size = offsetof(struct kvs_backend_ops, close) + sizeof(ops.close),
		.open = mem_open, .lookup = mem_lookup, .submit_read = mem_read,
		.submit_write = mem_write, .poll = mem_poll, .close = mem_close,
		.register_buffers = (void *)1, /* beyond size: must never be called */
	};
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	struct kvs_backend_completion c;
	unsigned char w[SHARD], r[SHARD];
	int arg = 77;

	cfg_kind(&cfg, KVS_BACKEND_USER);
	cfg.shards_per_block = 1;
	cfg.user_ops = &ops;
	cfg.user_arg = &arg;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &(struct kvs_block_id){ { 0 } }), 0);
	memset(w, 0xab, sizeof(w));
	struct kvs_backend_io io = { .buf = w, .len = SHARD, .token = 3 };
	KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 0), 1);
	KVS_CHECK_EQ(c.token, 3);
	io.buf = r;
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 0), 1);
	KVS_CHECK(memcmp(w, r, SHARD) == 0);
	struct kvs_backend_buffer reg = { .base = r, .len = sizeof(r) };
	KVS_CHECK_EQ(kvs_backend_register_buffers(b, &reg, 1), 0);
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.kind, KVS_BACKEND_USER);
	KVS_CHECK_EQ(info.io_engine, 0);
	kvs_backend_close(b);

	ops.abi = KVS_BACKEND_OPS_ABI + 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "abi") != NULL);
	ops.abi = KVS_BACKEND_OPS_ABI;
	ops.size = 8;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	ops.size = sizeof(ops);
	ops.register_buffers = NULL;
	ops.poll = NULL;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	cfg.user_ops = NULL;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "user_ops") != NULL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_calls(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c;
	struct kvs_backend_info info;

	KVS_CHECK_ERR(kvs_backend_open(NULL, &b), -EINVAL);
	cfg_kind(&cfg, KVS_BACKEND_NONE);
	KVS_CHECK_ERR(kvs_backend_open(&cfg, NULL), -EINVAL);
	cfg_kind(&cfg, 99);
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "kind") != NULL);
	cfg_kind(&cfg, KVS_BACKEND_NONE);
	cfg.io_engine = 7;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "io_engine") != NULL);
	cfg_kind(&cfg, KVS_BACKEND_NONE);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_ERR(kvs_backend_poll(b, &c, 0, 0), -EINVAL);
	KVS_CHECK_ERR(kvs_backend_poll(b, NULL, 1, 0), -EINVAL);
	KVS_CHECK_ERR(kvs_backend_submit_read(b, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_backend_info(b, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_backend_info(NULL, &info), -EINVAL);
	KVS_CHECK_ERR(kvs_backend_lookup(NULL, &(struct kvs_block_id){ { 0 } }), -EINVAL);
	struct kvs_backend_io io = { .buf = &c, .len = 8, .flags = 1 };
	KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -EINVAL);
	KVS_CHECK(strstr(g_log, "io.flags") != NULL);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* Any non-zero reserved word is -EINVAL with a log line naming "reserved" (the
 * cache config's rule and wording), for every word, in every backend kind's
 * config and in a fault backend's inner config. */
static kvs_test_rc test_reserved(void)
{
	struct kvs_backend_config cfg, inner;
	struct kvs_backend *b = (struct kvs_backend *)&cfg;
	const uint32_t kinds[] = { KVS_BACKEND_NONE, KVS_BACKEND_LATENCY };

	for (size_t k = 0; k < KVS_ARRAY_LEN(kinds); k++)
		for (size_t i = 0; i < KVS_ARRAY_LEN(cfg.reserved); i++) {
			cfg_kind(&cfg, kinds[k]);
			cfg.reserved[i] = UINT64_C(1) << (i * 8);
			KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
			KVS_CHECK(b == NULL);
			KVS_CHECK(strstr(g_log, "invalid reserved = non-zero (must be zero)") != NULL);
		}
	cfg_kind(&cfg, KVS_BACKEND_NONE);
	cfg.reserved32 = 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "invalid reserved32 = 1 (must be zero)") != NULL);
	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.reserved[KVS_ARRAY_LEN(inner.reserved) - 1] = 1;
	cfg_kind(&cfg, KVS_BACKEND_FAULT);
	cfg.fault_inner = &inner;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "reserved") != NULL);
	inner.reserved[KVS_ARRAY_LEN(inner.reserved) - 1] = 0;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* Bad tensor tables are -EINVAL naming the field; a fault backend's inner
 * config must have the wrapper's table and layout_tag (0 tensors = one tensor of
 * shard_bytes, so the two spellings agree). */
static kvs_test_rc test_tensor_table(void)
{
	struct kvs_backend_config cfg, inner;
	struct kvs_backend *b = NULL;
	uint64_t t[KVS_MAX_TENSORS + 1];
	const struct {
		uint32_t count;
		uint64_t first, second;
		const char *log;
	} bad[] = {
		{ KVS_MAX_TENSORS + 1, 16, 16, "tensor_count 257 exceeds KVS_MAX_TENSORS" },
		{ 2, 0, SHARD, "tensor_bytes[0] is 0" },
		{ 2, SHARD / 2, SHARD / 2 + 1, "tensor_bytes sum to 4097 over tensor_count 2, "
					       "shard_bytes is 4096" },
		{ 2, UINT64_MAX, 2, "tensor_bytes[0..1] overflow 64 bits" },
	};

	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		cfg_kind(&cfg, KVS_BACKEND_NONE);
		for (uint32_t k = 0; k < KVS_ARRAY_LEN(t); k++)
			t[k] = 16;
		t[0] = bad[i].first;
		t[1] = bad[i].second;
		cfg.tensor_count = bad[i].count;
		cfg.tensor_bytes = t;
		KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
		if (!strstr(g_log, bad[i].log))
			KVS_FAILF("case %zu: log lacks '%s': %s", i, bad[i].log, g_log);
	}
	cfg_kind(&cfg, KVS_BACKEND_NONE);
	cfg.tensor_count = 2;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "tensor_bytes is NULL with tensor_count 2") != NULL);
	t[0] = 1024;
	t[1] = SHARD - 1024;
	cfg.tensor_bytes = t;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);

	/* fault over latency: same table (spelled two ways), then another one, then
	 * another layout_tag. */
	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	cfg_kind(&cfg, KVS_BACKEND_FAULT);
	cfg.fault_inner = &inner;
	t[0] = SHARD;
	inner.tensor_count = 1;
	inner.tensor_bytes = t;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	t[0] = 1024;
	inner.tensor_count = 2;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "fault_inner has shard_size 4096 x 8 shards per block, tensors "
				"1x1024+1x3072, layout_tag 0; the fault backend has shard_size 4096 x "
				"8 shards per block, tensors 1x4096, layout_tag 0") != NULL);
	inner.tensor_count = 0;
	inner.layout_tag = 0x17;
	g_log[0] = '\0';
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(g_log, "layout_tag 0x17; the fault backend has") != NULL);
	cfg.layout_tag = 0x17;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "none", test_none },
	{ "latency_fill", test_latency_fill },
	{ "latency_content", test_latency_content },
	{ "latency_queue_depth", test_latency_queue_depth },
	{ "fault_rates", test_fault_rates },
	{ "fault_delay", test_fault_delay },
	{ "user_ops", test_user_ops },
	{ "bad_calls", test_bad_calls },
	{ "reserved", test_reserved },
	{ "tensor_table", test_tensor_table },
};

KVS_TEST_MAIN(cases)
