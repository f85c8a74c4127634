/*
 * tests/io_wait.c — the backends' wait descriptors (kvs_backend_wait_fd,
 * kvshare.h "Waiting"): an issuer sleeps in epoll on the descriptor and reaps
 * with kvs_backend_poll(.., 0), as the store's dispatcher does.
 *
 * For each backend, the cases the contract names:
 *   idle      nothing in flight: the descriptor is not readable for 100 ms;
 *   one       one transfer whose completion is delayed (latency_ns, a write of
 *             none, ...): the issuer asleep in epoll_wait reaps it no sooner
 *             than it is due, token and result, on the wake its completion
 *             gives (a fault delay adds the inner completion's wake);
 *   after     once it is reaped, epoll_wait(100 ms) does not wake again;
 *   hold      one transfer held 1 s: at most 3 wakes in all (no slicing);
 *   many      64 transfers in flight, reaped 7 at a time by "epoll_wait;
 *             poll(0)": every token once, none missed, no timeout, then quiet;
 *   late      transfers submitted before the descriptor was first asked for
 *             are covered by it.
 *   none      an eventfd: writes complete at once.
 *   latency   a timerfd at the FIFO head's due time; at latency 0
 *             (latency_zero) an eventfd, readable while completions wait.
 *   fault     an epoll set over its delay FIFO's timerfd and the inner
 *             backend's descriptor: delays, injected errors, an inner delay
 *             with none of its own (the inner wake reaps it), fault over
 *             fault, fault over a user table (with and without wait_fd).
 *   posix     the engine's eventfd (pool: written by its workers; io_uring,
 *             with --uring: registered with the ring): blocks dumped through
 *             the issuer's loop (writes, and each block's own steps: its
 *             header, fdatasync, close and rename, up to one wake that reaps
 *             nothing each), evicted
 *             from the page cache (POSIX_FADV_DONTNEED) and read back; a read
 *             held 1 s by a fault backend over posix.
 *   user      the table's wait_fd is dispatched when its size covers it;
 *             an older table, or a NULL member, is -EOPNOTSUPP; NULL -EINVAL.
 * Every byte read (latency, fault over latency, posix) is checked against
 * kvs_pattern_fill().  Two CTest tests: io_wait, and io_wait_uring (--uring:
 * the posix cases on io_uring), Skipped with the reason in the plain variant
 * or where io_uring is refused.
 */
#include <sys/eventfd.h>

#include "io_wait_util.h"
#include "store_util.h"

#define SHARD 4096u
#define SPB 4u

#define TAG 0x3a17u
#define MANY 64u
#define BATCH 7u /* MANY = 9 * BATCH + 1: the last poll returns fewer than asked */
#define HOLD_NS ST_SEC
#define HOLD_WAKES_MAX 3
#define LONG_NS (10 * ST_SEC) /* "a generous timeout" */

static void cfg_kind(struct kvs_backend_config *cfg, uint32_t kind)
{
	kvs_backend_config_init(cfg);
	cfg->kind = kind;
	cfg->shard_bytes = SHARD;
	cfg->shards_per_block = SPB;
	cfg->log = st_log;
}

/* Transfer i: shard i % SPB of block i / SPB into (from) mem + i * SHARD. */
static struct kvs_backend_io io_of(uint32_t i, unsigned char *mem)
{
	return (struct kvs_backend_io){ .block = st_block(TAG, i / SPB), .shard = i % SPB,
					.buf = mem + (size_t)i * SHARD, .len = SHARD,
					.token = 1000 + i };
}

static int submit(struct kvs_backend *b, uint32_t i, unsigned char *mem, bool write)
{
	struct kvs_backend_io io = io_of(i, mem);

	if (write)
		kvs_pattern_fill(&io.block, io.shard, 0, io.buf, SHARD);
	return write ? kvs_backend_submit_write(b, &io) : kvs_backend_submit_read(b, &io);
}

/* Transfer i's buffer holds the stored content. */
static kvs_test_rc check_content(uint32_t i, const unsigned char *mem)
{
	static unsigned char want[SHARD];
	struct kvs_backend_io io = io_of(i, (unsigned char *)mem);

	kvs_pattern_fill(&io.block, io.shard, 0, want, SHARD);
	if (memcmp(io.buf, want, SHARD))
		KVS_FAILF("transfer %u (block %u shard %u): bytes differ", i, i / SPB, i % SPB);
	return KVS_TEST_PASS;
}

/*
 * idle, one, after: with nothing in flight the descriptor is quiet; transfer i
 * (due no sooner than min_ns after its submit) is reaped by the issuer's loop no
 * sooner than that, in at most wakes_max wakes (1: the wake its completion gives
 * reaps it; a fault backend's delay adds one, the inner completion's); then
 * quiet.
 */
static kvs_test_rc one(struct wt *w, uint32_t i, unsigned char *mem, bool write, uint64_t min_ns,
		       uint32_t wakes_max)
{
	struct kvs_backend_completion c[BATCH];
	uint32_t wakes0 = w->wakes;
	uint64_t t0, dt;

	KVS_TRY(wt_quiet(w, 100 * ST_MS, "with nothing in flight"));
	t0 = kvs_now_ns();
	KVS_CHECK_OK(submit(w->b, i, mem, write));
	KVS_TRY(wt_reap(w, c, 1, BATCH, LONG_NS));
	dt = kvs_now_ns() - t0;
	printf("  one: reaped %.1f ms after the submit, %u wake(s)\n", (double)dt / 1e6,
	       w->wakes - wakes0);
	if (dt < min_ns)
		KVS_FAILF("reaped %.1f ms after the submit, before the completion was due (%.1f ms)",
			  (double)dt / 1e6, (double)min_ns / 1e6);
	KVS_CHECK(w->wakes - wakes0 <= wakes_max);
	KVS_CHECK_EQ(c[0].token, 1000 + i);
	KVS_CHECK_EQ(c[0].result, SHARD);
	return wt_quiet(w, 100 * ST_MS, "after the completion was reaped");
}

/* hold: transfer i completes hold_ns (or more) after its submit; the issuer asleep
 * on the descriptor wakes at most HOLD_WAKES_MAX times meanwhile. */
static kvs_test_rc hold(struct wt *w, uint32_t i, unsigned char *mem, uint64_t hold_ns)
{
	struct kvs_backend_completion c[BATCH];
	uint64_t t0 = kvs_now_ns(), dt;
	uint32_t wakes0 = w->wakes;

	KVS_CHECK_OK(submit(w->b, i, mem, false));
	KVS_TRY(wt_reap(w, c, 1, BATCH, hold_ns + LONG_NS));
	dt = kvs_now_ns() - t0;
	printf("  hold: %u wake(s) in %.1f ms\n", w->wakes - wakes0, (double)dt / 1e6);
	KVS_CHECK_EQ(c[0].token, 1000 + i);
	KVS_CHECK_EQ(c[0].result, SHARD);
	KVS_CHECK(dt >= hold_ns);
	KVS_CHECK(w->wakes - wakes0 <= HOLD_WAKES_MAX);
	return wt_quiet(w, 100 * ST_MS, "after the held completion was reaped");
}

/* many: transfers first..first+MANY-1 in flight at once,
 * reaped BATCH at a time by the issuer's loop;
 * every token exactly once with its full length; then quiet. */
static kvs_test_rc many(struct wt *w, uint32_t first, unsigned char *mem, bool write)
{
	struct kvs_backend_completion c[MANY + BATCH];
	bool seen[MANY] = { false };
	uint32_t wakes0 = w->wakes;

	for (uint32_t i = first; i < first + MANY; i++)
		KVS_CHECK_OK(submit(w->b, i, mem, write));
	KVS_TRY(wt_reap(w, c, MANY, BATCH, LONG_NS));
	for (uint32_t k = 0; k < MANY; k++) {
		uint64_t i = c[k].token - 1000;

		KVS_CHECK(i >= first && i < first + MANY && !seen[i - first]);
		seen[i - first] = true;
		if (c[k].result != SHARD)
			KVS_FAILF("transfer %llu: %lld (%s)", (unsigned long long)i,
				  (long long)c[k].result, kvs_strerror((int)c[k].result));
	}
	printf("  many: %u transfers in %u wake(s), %u reaped nothing\n", MANY, w->wakes - wakes0,
	       w->empty_wakes);
	return wt_quiet(w, 100 * ST_MS, "after every completion was reaped");
}

/* late: n transfers submitted, and the first of them reaped (poll with a
 * timeout: by then the others are done or due too, mostly), before the
 * descriptor existed: asking for it then gives one that is (or becomes)
 * readable for the rest. */
static kvs_test_rc late(struct kvs_backend *b, uint32_t n, unsigned char *mem, bool write)
{
	struct kvs_backend_completion c[MANY + BATCH];
	struct wt w;
	int k;

	for (uint32_t i = 0; i < n; i++)
		KVS_CHECK_OK(submit(b, i, mem, write));
	k = kvs_backend_poll(b, c, 1, LONG_NS);
	KVS_CHECK_EQ(k, 1);
	KVS_TRY(wt_open(&w, b));
	KVS_TRY(wt_reap(&w, c, n - (uint32_t)k, BATCH, LONG_NS));
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the early transfers were reaped"));
	wt_close(&w);
	return KVS_TEST_PASS;
}

/* What all_cases expects of a backend. */
struct expect {
	bool write;         /* transfers are writes (else reads) */
	bool pattern;       /* reads return kvs_pattern_fill() content */
	uint64_t min_ns;    /* a completion is due no sooner after its submit */
	uint32_t wakes_max; /* wakes until one transfer is reaped */
};

/* Open cfg, run late, one and many on it, close. */
static kvs_test_rc all_cases(const struct kvs_backend_config *cfg, struct expect x)
{
	bool write = x.write;
	static unsigned char mem[(MANY + 2) * SHARD];
	struct kvs_backend *b = NULL;
	struct wt w;

	KVS_CHECK_OK(kvs_backend_open(cfg, &b));
	KVS_TRY(late(b, 3, mem, write));
	KVS_TRY(wt_open(&w, b));
	KVS_TRY(one(&w, MANY, mem, write, x.min_ns, x.wakes_max));
	if (x.pattern)
		KVS_TRY(check_content(MANY, mem));
	KVS_TRY(many(&w, 0, mem, write));
	for (uint32_t i = 0; x.pattern && i < MANY; i++)
		KVS_TRY(check_content(i, mem));
	wt_close(&w);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* hold on a fresh handle of cfg. */
static kvs_test_rc hold_case(const struct kvs_backend_config *cfg)
{
	static unsigned char mem[SHARD];
	struct kvs_backend *b = NULL;
	struct wt w;

	KVS_CHECK_OK(kvs_backend_open(cfg, &b));
	KVS_TRY(wt_open(&w, b));
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with nothing in flight"));
	KVS_TRY(hold(&w, 0, mem, HOLD_NS));
	wt_close(&w);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* ---- built-in backends ---- */

static kvs_test_rc test_none(void)
{
	struct kvs_backend_config cfg;

	cfg_kind(&cfg, KVS_BACKEND_NONE);
	return all_cases(&cfg, (struct expect){ .write = true, .wakes_max = 1 });
}

static kvs_test_rc test_latency(void)
{
	struct kvs_backend_config cfg;

	cfg_kind(&cfg, KVS_BACKEND_LATENCY);
	cfg.latency_ns = 200 * ST_MS;
	return all_cases(&cfg, (struct expect){ .pattern = true, .min_ns = cfg.latency_ns,
						.wakes_max = 1 });
}

/* Due at submit: the eventfd (io/fifo.h), no timer -- the same contract. */
static kvs_test_rc test_latency_zero(void)
{
	struct kvs_backend_config cfg;

	cfg_kind(&cfg, KVS_BACKEND_LATENCY);
	cfg.latency_ns = 0;
	return all_cases(&cfg, (struct expect){ .pattern = true, .wakes_max = 1 });
}

static kvs_test_rc test_latency_hold(void)
{
	struct kvs_backend_config cfg;

	cfg_kind(&cfg, KVS_BACKEND_LATENCY);
	cfg.latency_ns = HOLD_NS;
	return hold_case(&cfg);
}

/* fault over inner with fault_delay_ns delay. */
static void cfg_fault(struct kvs_backend_config *cfg, const struct kvs_backend_config *inner,
		      uint64_t delay_ns)
{
	cfg_kind(cfg, KVS_BACKEND_FAULT);
	cfg->fault_inner = inner;
	cfg->fault_delay_ns = delay_ns;
}

/* The delay FIFO's timer: the inner completion comes at once (a wake that moves
 * it into the FIFO), the one that reaps it when the delay is over. */
static kvs_test_rc test_fault_delay(void)
{
	struct kvs_backend_config inner, cfg;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.latency_ns = 0;
	cfg_fault(&cfg, &inner, 200 * ST_MS);
	return all_cases(&cfg, (struct expect){ .pattern = true, .min_ns = cfg.fault_delay_ns,
						.wakes_max = 2 });
}

static kvs_test_rc test_fault_hold(void)
{
	struct kvs_backend_config inner, cfg;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.latency_ns = 0;
	cfg_fault(&cfg, &inner, HOLD_NS);
	return hold_case(&cfg);
}

/* The inner backend's descriptor, no delay: the wake the inner completion gives
 * reaps it (poll pulls it into the FIFO already due), no second wake. */
static kvs_test_rc test_fault_inner(void)
{
	struct kvs_backend_config inner, cfg, outer;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	inner.latency_ns = 200 * ST_MS;
	cfg_fault(&cfg, &inner, 0);
	KVS_TRY(all_cases(&cfg, (struct expect){ .pattern = true, .min_ns = inner.latency_ns,
						  .wakes_max = 1 }));
	cfg_fault(&outer, &cfg, 100 * ST_MS); /* fault over fault: an epoll set in one */
	return all_cases(&outer, (struct expect){ .pattern = true,
						 .min_ns = inner.latency_ns + outer.fault_delay_ns,
						 .wakes_max = 2 });
}

/* Injected errors wait out the delay in the same FIFO: woken when due, -EIO. */
static kvs_test_rc test_fault_errors(void)
{
	static unsigned char mem[SHARD];
	struct kvs_backend_config inner, cfg;
	struct kvs_backend_completion c[BATCH];
	struct kvs_backend *b = NULL;
	struct wt w;
	uint64_t t0;

	cfg_kind(&inner, KVS_BACKEND_LATENCY);
	cfg_fault(&cfg, &inner, 200 * ST_MS);
	cfg.fault_error_ppm = 1000000;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_TRY(wt_open(&w, b));
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with nothing in flight"));
	t0 = kvs_now_ns();
	KVS_CHECK_OK(submit(b, 0, mem, false));
	KVS_TRY(wt_reap(&w, c, 1, BATCH, LONG_NS));
	KVS_CHECK(kvs_now_ns() - t0 >= cfg.fault_delay_ns);
	KVS_CHECK_EQ(w.wakes, 1);
	KVS_CHECK_EQ(c[0].token, 1000);
	KVS_CHECK_ERR(c[0].result, -EIO);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the failed transfer was reaped"));
	wt_close(&w);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* ---- posix ---- */

static char g_root[128];

static void cfg_posix(struct kvs_backend_config *cfg, uint32_t engine)
{
	cfg_kind(cfg, KVS_BACKEND_POSIX);
	cfg->io_engine = engine;
	cfg->nroots = 1;
	cfg->roots[0] = g_root;
	cfg->pool_threads = 1; /* in order: late's later reads are done when the first is */
}

/* Evict block n's file from the page cache, so a read of it waits for the disk. */
static kvs_test_rc drop_cached(uint32_t n)
{
	struct kvs_block_id id = st_block(TAG, n);
	char hex[33], path[256];
	int fd, rc;

	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id.bytes[i]);
	snprintf(path, sizeof(path), "%s/%.2s/%.2s/%s", g_root, hex, hex + 2, hex);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		KVS_FAILF("open %s: %s", path, strerror(errno));
	rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/*
 * The posix backend on engine: 2 * MANY shards dumped through the issuer's loop
 * (writes, and each block's header, fdatasync, close and rename), their files
 * evicted from the page cache, then read back (late, one, many) with every byte
 * checked, and a read held 1 s by a fault backend over it.
 */
static kvs_test_rc posix_cases(uint32_t engine)
{
	static unsigned char mem[2 * MANY * SHARD];
	struct kvs_backend_config cfg, fault;
	struct kvs_backend *b = NULL;
	struct wt w;
	kvs_test_rc rc;

	KVS_TRY(st_root_init(g_root, sizeof(g_root), "wait"));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_TRY(wt_open(&w, b));
	/* A dump's steps that deliver nothing complete in the engine too: each
	 * block's header (before its first shard) and, after its last, its
	 * fdatasync, close and rename may each wake the loop once. */
	w.empty_max = WT_EMPTY_MAX + 4 * MANY / SPB;
	KVS_TRY(many(&w, 0, mem, true));
	KVS_TRY(many(&w, MANY, mem, true));
	wt_close(&w);
	kvs_backend_close(b);
	for (uint32_t n = 0; n < 2 * MANY / SPB; n++)
		KVS_TRY(drop_cached(n));
	rc = all_cases(&cfg, (struct expect){ .pattern = true, .wakes_max = 1 });
	if (rc.code == KVS_TEST_PASS.code) {
		cfg_fault(&fault, &cfg, HOLD_NS);
		rc = hold_case(&fault);
	}
	st_root_fini(g_root);
	return rc;
}

static kvs_test_rc test_posix_pool(void)
{
	return posix_cases(KVS_IO_ENGINE_POOL);
}

static kvs_test_rc test_posix_uring(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	int rc;

	KVS_TRY(st_root_init(g_root, sizeof(g_root), "wait"));
	cfg_posix(&cfg, KVS_IO_ENGINE_URING);
	st_log_quiet = 1;
	rc = kvs_backend_open(&cfg, &b);
	st_log_quiet = 0;
	kvs_backend_close(b);
	st_root_fini(g_root);
	if (rc == -EOPNOTSUPP && strcmp(KVS_TEST_VARIANT, "plain") == 0)
		KVS_SKIP("plain build: no io_uring engine");
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES || rc == -ENOMEM)
		KVS_SKIP("io_uring refused here: %s", kvs_strerror(rc));
	KVS_CHECK_OK(rc);
	return posix_cases(KVS_IO_ENGINE_URING);
}

/* ---- a user backend with a wait descriptor ---- */

/* Completions are ready at submit; an eventfd is readable while any is queued. */
static int g_ub_efd = -1; /* the last one opened */

struct ub {
	int efd;
	struct kvs_backend_completion q[64];
	uint32_t n;
};

static int ub_open(const struct kvs_backend_config *cfg, void **state)
{
	struct ub *u = calloc(1, sizeof(*u));

	(void)cfg;
	if (!u)
		return -ENOMEM;
	u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (u->efd < 0) {
		free(u);
		return -errno;
	}
	g_ub_efd = u->efd;
	*state = u;
	return 0;
}

static int ub_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state;
	(void)block;
	return 1;
}

static int ub_submit(void *state, const struct kvs_backend_io *io)
{
	struct ub *u = state;

	if (u->n == KVS_ARRAY_LEN(u->q))
		return -EAGAIN;
	u->q[u->n++] = (struct kvs_backend_completion){ io->token, (int64_t)io->len };
	if (u->n == 1 && eventfd_write(u->efd, 1) < 0)
		return -errno;
	return 0;
}

static int ub_poll(void *state, struct kvs_backend_completion *out, uint32_t max, uint64_t t)
{
	struct ub *u = state;
	uint32_t k = u->n < max ? u->n : max;
	eventfd_t v;

	(void)t;
	memcpy(out, u->q, k * sizeof(*out));
	memmove(u->q, u->q + k, (u->n - k) * sizeof(*out));
	u->n -= k;
	if (u->n == 0)
		eventfd_read(u->efd, &v); /* nothing queued: unreadable */
	return (int)k;
}

static void ub_close(void *state)
{
	struct ub *u = state;

	close(u->efd);
	free(u);
}

static int ub_wait_fd(void *state)
{
	return ((struct ub *)state)->efd;
}

static const struct kvs_backend_ops ub_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = ub_open,
	.lookup = ub_lookup,
	.submit_read = ub_submit,
	.submit_write = ub_submit,
	.poll = ub_poll,
	.close = ub_close,
	.wait_fd = ub_wait_fd,
};

static int not_called(void *state)
{
	(void)state;
	abort(); /* beyond the table's size: the library must not call it */
}

static kvs_test_rc test_user(void)
{
	struct kvs_backend_ops ops = ub_ops;
	struct kvs_backend_config cfg, fault;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion c[8];
	char buf[SHARD];
	struct kvs_backend_io io = { .buf = buf, .len = SHARD, .token = 5 };
	struct wt w;

	cfg_kind(&cfg, KVS_BACKEND_USER);
	cfg.user_ops = &ops;
	KVS_CHECK_ERR(kvs_backend_wait_fd(NULL), -EINVAL);

	/* Dispatched: the table's own descriptor, with the table's readiness. */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_TRY(wt_open(&w, b));
	KVS_CHECK_EQ(w.fd, g_ub_efd);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with nothing in flight"));
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_TRY(wt_reap(&w, c, 1, 8, 10 * ST_SEC));
	KVS_CHECK_EQ(c[0].token, 5);
	KVS_CHECK_EQ(w.wakes, 1);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the completion was reaped"));
	wt_close(&w);
	kvs_backend_close(b);

	/* Under a fault backend: its own descriptor over the table's. */
	cfg_fault(&fault, &cfg, 0);
	KVS_CHECK_OK(kvs_backend_open(&fault, &b));
	KVS_TRY(wt_open(&w, b));
	KVS_CHECK(w.fd != g_ub_efd);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with nothing in flight (fault over user)"));
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_TRY(wt_reap(&w, c, 1, 8, 10 * ST_SEC));
	KVS_CHECK_EQ(c[0].token, 5);
	KVS_CHECK_EQ(w.wakes, 1);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the completion was reaped (fault over user)"));
	wt_close(&w);
	kvs_backend_close(b);

	/* A table built before wait_fd existed: its size stops short of it; a fault
	 * backend over it has none either. */
	ops.size = (uint32_t)offsetof(struct kvs_backend_ops, wait_fd);
	ops.wait_fd = not_called;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_ERR(kvs_backend_wait_fd(b), -EOPNOTSUPP);
	kvs_backend_close(b);
	KVS_CHECK_OK(kvs_backend_open(&fault, &b));
	KVS_CHECK_ERR(kvs_backend_wait_fd(b), -EOPNOTSUPP);
	KVS_CHECK_ERR(kvs_backend_wait_fd(b), -EOPNOTSUPP);
	kvs_backend_close(b);

	/* Covered by size but NULL: none. */
	ops.size = sizeof(ops);
	ops.wait_fd = NULL;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_ERR(kvs_backend_wait_fd(b), -EOPNOTSUPP);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* `io_wait --uring [case...]` (CTest: io_wait_uring): skipped, with the reason,
 * in the plain variant and where io_uring is refused. */
static const struct kvs_test_case uring_cases[] = {
	{ "posix_uring", test_posix_uring },
};

static const struct kvs_test_case cases[] = {
	{ "none", test_none },
	{ "latency", test_latency },
	{ "latency_zero", test_latency_zero },
	{ "latency_hold", test_latency_hold },
	{ "fault_delay", test_fault_delay },
	{ "fault_hold", test_fault_hold },
	{ "fault_inner", test_fault_inner },
	{ "fault_errors", test_fault_errors },
	{ "posix_pool", test_posix_pool },
	{ "user", test_user },
};

int main(int argc, char **argv)
{
	return kvs_test_run_groups(argc, argv, "--uring", cases, KVS_ARRAY_LEN(cases), uring_cases,
				   KVS_ARRAY_LEN(uring_cases), NULL, 0);
}
