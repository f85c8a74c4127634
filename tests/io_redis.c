/*
 * tests/io_redis.c — the redis backend (io/redis*.c) against a real redis-server
 * that each case starts itself on a unix socket in a temp dir, and stops.
 *
 * Backend cases (kvs_backend_*): round trip of whole and partial shards, batch
 * lookup, absent keys; pipelining (one socket, many commands in flight, then
 * the server's own counters); a value of the wrong length planted under a key;
 * values stored with another geometry (the 4 KiB x 2 read as 8 KiB x
 * 1, another tensor table, another layout_tag: -KVS_ECONFIG naming both) and
 * values with a garbage, foreign, flipped or cut header planted by raw SETs
 * (-EIO);
 * wrong password (and the right one, and password_file); a server that is not
 * there yet, then started; kill -9 with reads in flight (every transfer fails
 * with a connection error, nothing hangs) and a restart (later transfers pass);
 * a stopped server (SIGSTOP: the command timeout fires) and resumed; OOM and
 * READONLY error replies (-ENOSPC, -EROFS, only on the affected shards); the
 * wait descriptor (kvs_backend_wait_fd): quiet while idle, a GET reaped by
 * "epoll_wait; poll(0)", quiet after, a GET held 1 s by a stopped server (at
 * most 3 wakes), 64 SETs and GETs in flight, a command timeout that only the
 * descriptor's timer can notice, and a restarted server (the new sockets are
 * watched; the dead idle ones wake nobody).
 *
 * The store over the same server: tests/store_redis.c.
 *
 * Skips (77) when redis-server is not installed, saying so.
 */
#include "io_wait_util.h"
#include "redis_util.h"

/* ---- backend helpers ---- */

static void rb_cfg(struct kvs_backend_config *cfg, const struct rs *s)
{
	rb_cfg_at(cfg, s->sock);
	if (s->password[0]) /* the cases' passwords are short; redis_password_file takes long ones */
		snprintf(cfg->redis.password, sizeof(cfg->redis.password), "%.*s",
			 (int)sizeof(cfg->redis.password) - 1, s->password);
}

/* Write (or read and verify) every shard of blocks tag/0..nblocks-1; res[] gets
 * each transfer's result (index block * RS_SPB + shard). */
static kvs_test_rc rb_all(struct kvs_backend *b, uint32_t tag, uint32_t nblocks, bool write,
			  unsigned char *mem, int64_t *res)
{
	uint32_t pending = 0, n = nblocks * RS_SPB;

	for (uint32_t i = 0; i < n; i++) {
		struct kvs_block_id id = st_block(tag, i / RS_SPB);
		struct kvs_backend_io io = { .block = id, .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = i };
		int rc;

		res[i] = INT64_MIN;
		if (write)
			kvs_pattern_fill(&id, io.shard, 0, io.buf, RS_SHARD);
		else
			memset(io.buf, ST_POISON, RS_SHARD);
		rc = rb_submit(b, &io, write, res, &pending);
		if (rc)
			res[i] = rc;
	}
	return rb_reap(b, res, &pending, 20000);
}

static kvs_test_rc rb_verify(uint32_t tag, uint32_t nblocks, const unsigned char *mem,
			     const int64_t *res)
{
	unsigned char want[RS_SHARD];

	for (uint32_t i = 0; i < nblocks * RS_SPB; i++) {
		struct kvs_block_id id = st_block(tag, i / RS_SPB);

		if (res[i] != RS_SHARD)
			KVS_FAILF("transfer %u: %lld (%s); log:\n%s", i, (long long)res[i],
				  kvs_strerror((int)res[i]), rb_logs);
		kvs_pattern_fill(&id, i % RS_SPB, 0, want, RS_SHARD);
		if (memcmp(mem + (size_t)i * RS_SHARD, want, RS_SHARD))
			KVS_FAILF("shard %u of block %u: bytes differ", i % RS_SPB, i / RS_SPB);
	}
	return KVS_TEST_PASS;
}

/* ---- backend cases ---- */

static kvs_test_rc roundtrip_body(struct rs *s)
{
	enum { NB = 16 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id ids[NB + 2];
	bool hits[NB + 2];
	struct kvs_backend_completion c;
	unsigned char part[100], want[100];
	struct kvs_block_id id = st_block(1, 3);
	struct kvs_backend_io io = { .block = id, .shard = 2, .buf = part, .offset = 1000,
				     .len = sizeof(part), .token = 7 };

	rb_cfg(&cfg, s);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 1, NB, true, mem, res));
	for (uint32_t i = 0; i < NB * RS_SPB; i++)
		KVS_CHECK_EQ(res[i], RS_SHARD);
	KVS_TRY(rb_all(b, 1, NB, false, mem, res));
	KVS_TRY(rb_verify(1, NB, mem, res));

	/* A range of a shard. */
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 5 * ST_SEC), 1);
	KVS_CHECK_EQ(c.token, 7);
	KVS_CHECK_EQ(c.result, sizeof(part));
	kvs_pattern_fill(&id, 2, 1000, want, sizeof(want));
	KVS_CHECK(memcmp(part, want, sizeof(part)) == 0);

	/* An absent key: -ENOENT, as a completion. */
	io.block = st_block(99, 0);
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 5 * ST_SEC), 1);
	KVS_CHECK_ERR(c.result, -ENOENT);

	/* Lookups: every block, two absent ones, one of them partly written. */
	for (int i = 0; i < NB; i++)
		ids[i] = st_block(1, (uint64_t)i);
	ids[NB] = st_block(99, 0);
	ids[NB + 1] = st_block(98, 0);
	KVS_TRY(rs_ok(s, "SET kvshare:00:0 x")); /* unrelated key */
	{
		char key[128];
		redisReply *rep;

		rs_key(&ids[NB + 1], 0, key, sizeof(key));
		rep = rs_cmd(s, "SET %s %b", key, mem, (size_t)RS_SHARD);
		KVS_CHECK(rep && rep->type == REDIS_REPLY_STATUS);
		freeReplyObject(rep);
	}
	memset(hits, 0, sizeof(hits));
	long long exists0 = rs_calls(s, "exists");
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, NB + 2, 0, hits), NB);
	KVS_CHECK_EQ(rs_calls(s, "exists") - exists0, NB + 2); /* one EXISTS per block */
	for (int i = 0; i < NB + 2; i++)
		KVS_CHECK_EQ(hits[i], i < NB);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &ids[0]), 1);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &ids[NB + 1]), 0); /* 1 of 4 shards: absent */
	/* Known hits are not asked; PREFIX stops at the first miss. */
	memset(hits, 0, sizeof(hits));
	hits[NB] = true;
	exists0 = rs_calls(s, "exists");
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, NB + 2, 0, hits), NB + 1);
	KVS_CHECK_EQ(rs_calls(s, "exists") - exists0, NB + 1);
	ids[3] = st_block(97, 0);
	memset(hits, 0, sizeof(hits));
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, NB, KVS_BACKEND_LOOKUP_PREFIX, hits), 3);
	for (int i = 3; i < NB; i++)
		KVS_CHECK(!hits[i]);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* One socket, 64 commands in flight: all queued without a reply in between. */
static kvs_test_rc pipeline_body(struct rs *s)
{
	enum { NB = 32 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	uint32_t pending = 0;

	rb_cfg(&cfg, s);
	cfg.redis.connections = 1;
	cfg.queue_depth = 64;
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 2, NB, true, mem, res));
	/* Submit 64 reads back to back: the backend accepts them all (no -EAGAIN
	 * until 64), none needs its own round trip first. */
	for (uint32_t i = 0; i < 64; i++) {
		struct kvs_backend_io io = { .block = st_block(2, i / RS_SPB), .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = i };

		res[i] = INT64_MIN;
		KVS_CHECK_EQ(kvs_backend_submit_read(b, &io), 0);
		pending++;
	}
	struct kvs_backend_io more = { .block = st_block(2, 0), .buf = mem, .len = RS_SHARD };
	KVS_CHECK_ERR(kvs_backend_submit_read(b, &more), -EAGAIN);
	KVS_TRY(rb_reap(b, res, &pending, 10000));
	KVS_TRY(rb_verify(2, 16, mem, res));
	KVS_CHECK_EQ(rs_calls(s, "get"), 64);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* The issuer not scheduled past the command timeout: 16 reads submitted, their
 * replies arrive at once, and nobody polls for twice the timeout (a thread
 * descheduled on a loaded machine).  The first poll reads what waits in the
 * socket before judging deadlines: every read completes with its bytes, none
 * with -ETIMEDOUT for a reply that was there. */
static kvs_test_rc late_poll_body(struct rs *s)
{
	enum { NB = 8, N = NB * RS_SPB };
	static unsigned char mem[N * RS_SHARD];
	int64_t res[N];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	uint32_t pending = 0;

	rb_cfg(&cfg, s);
	cfg.redis.command_timeout_ns = 200 * ST_MS;
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 6, NB, true, mem, res));
	for (uint32_t i = 0; i < N; i++) {
		struct kvs_backend_io io = { .block = st_block(6, i / RS_SPB), .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = i };

		res[i] = INT64_MIN;
		memset(io.buf, ST_POISON, RS_SHARD);
		KVS_CHECK_EQ(kvs_backend_submit_read(b, &io), 0);
		pending++;
	}
	usleep(400 * 1000);
	KVS_TRY(rb_reap(b, res, &pending, 5000));
	KVS_TRY(rb_verify(6, NB, mem, res));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* One read of [0, len) of shard of id into buf: the submit's error or the
 * completion's result. */
static int64_t rb_read(struct kvs_backend *b, const struct kvs_block_id *id, uint32_t shard,
		       void *buf, uint64_t len)
{
	struct kvs_backend_io io = { .block = *id, .shard = shard, .buf = buf, .len = len,
				     .token = 5 };
	struct kvs_backend_completion c;
	int rc = kvs_backend_submit_read(b, &io);

	if (rc < 0)
		return rc;
	rc = kvs_backend_poll(b, &c, 1, 5 * ST_SEC);
	return rc == 1 ? c.result : rc < 0 ? rc : -ETIMEDOUT;
}

/* The reproduction through Redis: shards written by a handle of 4 KiB
 * x 2, tensors 2x2048, then read by a handle of another tensor table, one of
 * another layout_tag and one of 8 KiB x 1: each read completes with
 * -KVS_ECONFIG (never bytes), logging the key and both geometries; the same
 * geometry reads them byte-exact.  Lookups (EXISTS) do not read values: they
 * still say present, and the read is what fails. */
static kvs_test_rc geometry_body(struct rs *s)
{
	static const uint64_t halves[2] = { 2048, 2048 }, other[2] = { 1024, 3072 };
	static unsigned char mem[8192];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = st_block(12, 0);
	char key[128], want[700];
	const struct {
		uint64_t shard_bytes;
		uint32_t spb, tcount;
		const uint64_t *tsz;
		uint64_t tag;
		const char *has;
	} readers[] = {
		{ 4096, 2, 2, other, 0, "shard_size 4096 x 2 shards per block, tensors 1x1024+1x3072 "
					"(hash " },
		{ 4096, 2, 2, halves, 0x2a, "shard_size 4096 x 2 shards per block, tensors 2x2048 (hash " },
		{ 8192, 1, 0, NULL, 0, "shard_size 8192 x 1 shards per block, tensors 1x8192 (hash " },
	};

	rb_cfg(&cfg, s);
	cfg.shards_per_block = 2;
	cfg.tensor_count = 2;
	cfg.tensor_bytes = halves;
	KVS_TRY(rb_open(&cfg, &b));
	for (uint32_t sh = 0; sh < 2; sh++) {
		struct kvs_backend_io io = { .block = id, .shard = sh, .buf = mem, .len = 4096,
					     .token = sh };
		struct kvs_backend_completion c;

		kvs_pattern_fill(&id, sh, 0, mem, 4096);
		KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
		KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 5 * ST_SEC), 1);
		KVS_CHECK_EQ(c.result, 4096);
	}
	kvs_backend_close(b);
	rs_key(&id, 0, key, sizeof(key));

	for (size_t i = 0; i < KVS_ARRAY_LEN(readers); i++) {
		rb_cfg(&cfg, s);
		cfg.shard_bytes = readers[i].shard_bytes;
		cfg.shards_per_block = readers[i].spb;
		cfg.tensor_count = readers[i].tcount;
		cfg.tensor_bytes = readers[i].tsz;
		cfg.layout_tag = readers[i].tag;
		KVS_TRY(rb_open(&cfg, &b));
		memset(mem, ST_POISON, sizeof(mem));
		KVS_CHECK_ERR(rb_read(b, &id, 0, mem, readers[i].shard_bytes), -KVS_ECONFIG);
		snprintf(want, sizeof(want), "redis %s: GET %s: stored with shard_size 4096 x 2 shards "
			 "per block, tensor table hash ", s->sock, key);
		if (!strstr(rb_logs, want) || !strstr(rb_logs, "layout_tag 0; this store has ") ||
		    !strstr(rb_logs, readers[i].has))
			KVS_FAILF("reader %zu: the log lacks\n  %s...layout_tag 0; this store has %s\n"
				  "log:\n%s", i, want, readers[i].has, rb_logs);
		for (size_t k = 0; k < sizeof(mem); k++) /* nothing was copied */
			KVS_CHECK_EQ(mem[k], ST_POISON);
		KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1); /* EXISTS: the read decides */
		kvs_backend_close(b);
	}

	/* The same geometry: every byte. */
	rb_cfg(&cfg, s);
	cfg.shards_per_block = 2;
	cfg.tensor_count = 2;
	cfg.tensor_bytes = halves;
	KVS_TRY(rb_open(&cfg, &b));
	for (uint32_t sh = 0; sh < 2; sh++) {
		unsigned char want_bytes[4096];

		KVS_CHECK_EQ(rb_read(b, &id, sh, mem, 4096), 4096);
		kvs_pattern_fill(&id, sh, 0, want_bytes, 4096);
		KVS_CHECK(memcmp(mem, want_bytes, 4096) == 0);
	}
	KVS_CHECK(strstr(rb_logs, "stored with") == NULL);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* Values planted by hand (raw SET) under a shard's key: the shard's size of
 * garbage, another key's value (a valid header of another block), one with a
 * bit of its header flipped, one cut short by a byte: each read -EIO, logged
 * with the key, nothing copied; the other shards of the block still read. */
static kvs_test_rc garbage_header_body(struct rs *s)
{
	static unsigned char mem[2 * RS_SPB * RS_SHARD];
	int64_t res[2 * RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = st_block(13, 0), other = st_block(13, 1);
	char key[128], okey[128];
	unsigned char *val;
	size_t len;
	const char *why[] = { "no kvshare value header", "holds shard 0 of block ",
			      "value header checksum mismatch", "a shard is 4096" };

	rb_cfg(&cfg, s);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 13, 2, true, mem, res));
	rs_key(&other, 0, okey, sizeof(okey));
	KVS_TRY(rs_get_raw(s, okey, &val, &len));
	KVS_CHECK(len > RS_SHARD); /* a header, then the shard */
	for (uint32_t sh = 0; sh < 4; sh++) {
		rs_key(&id, sh, key, sizeof(key));
		if (sh == 0) {
			memset(mem, 0x5a, RS_SHARD + 64);
			KVS_TRY(rs_set_raw(s, key, mem, RS_SHARD + 64));
		} else if (sh == 1) {
			KVS_TRY(rs_set_raw(s, key, val, len)); /* block 13/1's shard 0 */
		} else if (sh == 2) {
			unsigned char *flip;
			size_t flen;

			KVS_TRY(rs_get_raw(s, key, &flip, &flen));
			flip[20] ^= 0x01;
			KVS_TRY(rs_set_raw(s, key, flip, flen));
			free(flip);
		} else {
			unsigned char *cut;
			size_t clen;

			KVS_TRY(rs_get_raw(s, key, &cut, &clen));
			KVS_TRY(rs_set_raw(s, key, cut, clen - 1));
			free(cut);
		}
	}
	free(val);
	kvs_backend_close(b);

	for (uint32_t sh = 0; sh < 4; sh++) {
		rb_cfg(&cfg, s); /* a handle per shard: one error line per socket per second */
		KVS_TRY(rb_open(&cfg, &b));
		rs_key(&id, sh, key, sizeof(key));
		memset(mem, ST_POISON, RS_SHARD);
		KVS_CHECK_ERR(rb_read(b, &id, sh, mem, RS_SHARD), -EIO);
		if (!strstr(rb_logs, key) || !strstr(rb_logs, why[sh]))
			KVS_FAILF("shard %u: the log lacks the key and '%s':\n%s", sh, why[sh], rb_logs);
		for (uint32_t k = 0; k < RS_SHARD; k++)
			KVS_CHECK_EQ(mem[k], ST_POISON);
		KVS_CHECK_EQ(rb_read(b, &other, sh, mem, RS_SHARD), RS_SHARD); /* unharmed */
		kvs_backend_close(b);
	}
	return KVS_TEST_PASS;
}

/* Values of the wrong length under a shard's key: -EIO, logged, nothing copied. */
static kvs_test_rc wrong_length_body(struct rs *s)
{
	static unsigned char mem[RS_SPB * RS_SHARD], big[RS_SHARD + 1];
	int64_t res[RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = st_block(3, 0);
	char key[128];
	redisReply *rep;

	rb_cfg(&cfg, s);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 3, 1, true, mem, res));
	rs_key(&id, 1, key, sizeof(key));
	rep = rs_cmd(s, "SET %s short", key);
	freeReplyObject(rep);
	rs_key(&id, 2, key, sizeof(key));
	rep = rs_cmd(s, "SET %s %b", key, big, sizeof(big));
	freeReplyObject(rep);
	KVS_TRY(rb_all(b, 3, 1, false, mem, res));
	KVS_CHECK_EQ(res[0], RS_SHARD);
	KVS_CHECK_ERR(res[1], -EIO);
	KVS_CHECK_ERR(res[2], -EIO);
	KVS_CHECK_EQ(res[3], RS_SHARD);
	KVS_CHECK(strstr(rb_logs, "value of 5 bytes") != NULL);
	KVS_CHECK(strstr(rb_logs, s->sock) != NULL); /* names the endpoint */
	for (uint32_t k = 0; k < RS_SHARD; k++) /* the short value did not land */
		KVS_CHECK_EQ(mem[RS_SHARD + k], ST_POISON);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc password_body(struct rs *s)
{
	static unsigned char mem[RS_SPB * RS_SHARD];
	int64_t res[RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	char pwfile[200];
	int fd;

	rb_cfg(&cfg, s);
	snprintf(cfg.redis.password, sizeof(cfg.redis.password), "not-the-password");
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EACCES);
	KVS_CHECK(b == NULL);
	KVS_CHECK(strstr(rb_logs, "AUTH failed") && strstr(rb_logs, "WRONGPASS"));
	KVS_CHECK(strstr(rb_logs, s->sock) != NULL);
	KVS_CHECK(strstr(rb_logs, "not-the-password") == NULL); /* never logged */

	rb_cfg(&cfg, s);
	cfg.redis.password[0] = '\0';
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EACCES); /* NOAUTH at the first use */

	/* The right one, from a file. */
	snprintf(pwfile, sizeof(pwfile), "%s/pw", s->dir);
	fd = open(pwfile, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	KVS_CHECK(fd >= 0);
	KVS_CHECK(write(fd, s->password, strlen(s->password)) == (ssize_t)strlen(s->password));
	KVS_CHECK(write(fd, "\n", 1) == 1);
	close(fd);
	snprintf(cfg.redis.password_file, sizeof(cfg.redis.password_file), "%s", pwfile);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 4, 1, true, mem, res));
	KVS_TRY(rb_all(b, 4, 1, false, mem, res));
	KVS_TRY(rb_verify(4, 1, mem, res));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* Every transfer of res[0..n) failed with a connection error. */
static kvs_test_rc rb_all_failed(const int64_t *res, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (res[i] >= 0 || res[i] == INT64_MIN)
			KVS_FAILF("transfer %u: %lld, want a connection error", i, (long long)res[i]);
	return KVS_TEST_PASS;
}

/* Retry a write+read round trip until it passes (reconnect backoff), bounded. */
static kvs_test_rc rb_until_ok(struct kvs_backend *b, uint32_t tag, unsigned char *mem,
			       int64_t *res)
{
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	for (;;) {
		bool ok = true;

		KVS_TRY(rb_all(b, tag, 1, true, mem, res));
		for (uint32_t i = 0; i < RS_SPB; i++)
			ok &= res[i] == RS_SHARD;
		if (ok)
			break;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("no successful write 10 s after the server came back: %lld (%s)",
				  (long long)res[0], kvs_strerror((int)res[0]));
		usleep(20000); /* the reconnect backoff (<= 1 s) */
	}
	KVS_TRY(rb_all(b, tag, 1, false, mem, res));
	return rb_verify(tag, 1, mem, res);
}

static kvs_test_rc outage_body(struct rs *s)
{
	enum { NB = 64 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	static int64_t res[NB * RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	uint32_t pending = 0;
	uint64_t t0;

	/* Not there at open: the open fails, naming the endpoint and the way out;
	 * with start_degraded it passes, logged, and transfers fail at once. */
	rs_kill(s, SIGKILL);
	rb_cfg(&cfg, s);
	cfg.redis.command_timeout_ns = 2 * ST_SEC;
	t0 = kvs_now_ns();
	int rc = kvs_backend_open(&cfg, &b);
	if (rc >= 0 || b != NULL)
		KVS_FAILF("open with the server down: %d, want a connection error", rc);
	printf("  server down at open: refused in %.1f ms (%s)\n",
	       (double)(kvs_now_ns() - t0) / 1e6, kvs_strerror(rc));
	KVS_CHECK(strstr(rb_logs, "unreachable at open") != NULL);
	KVS_CHECK(strstr(rb_logs, "redis_start_degraded=1") != NULL);
	cfg.redis.start_degraded = 1;
	KVS_TRY(rb_open(&cfg, &b));
	KVS_CHECK(strstr(rb_logs, "opened degraded") != NULL);
	KVS_TRY(rb_all(b, 5, 1, true, mem, res));
	KVS_TRY(rb_all_failed(res, RS_SPB));
	KVS_TRY(rs_run(s));
	KVS_TRY(rb_until_ok(b, 5, mem, res));

	/* kill -9 with reads in flight: each fails with a connection error, fast. */
	KVS_TRY(rb_all(b, 6, NB, true, mem, res));
	for (uint32_t i = 0; i < NB * RS_SPB; i++) {
		struct kvs_backend_io io = { .block = st_block(6, i / RS_SPB), .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = i };

		res[i] = INT64_MIN;
		if (i == 32)
			rs_kill(s, SIGKILL);
		int rc = rb_submit(b, &io, false, res, &pending);
		if (rc)
			res[i] = rc;
	}
	t0 = kvs_now_ns();
	KVS_TRY(rb_reap(b, res, &pending, 5000));
	printf("  killed mid-load: every transfer ended %.1f ms after the last submit\n",
	       (double)(kvs_now_ns() - t0) / 1e6);
	KVS_TRY(rb_all_failed(res + 64, NB * RS_SPB - 64));
	KVS_CHECK(strstr(rb_logs, "connection lost") || strstr(rb_logs, "not established"));

	/* Restarted: later transfers pass. */
	KVS_TRY(rs_run(s));
	KVS_TRY(rb_until_ok(b, 7, mem, res));

	/* Stopped (SIGSTOP): no reply, the command timeout fails the socket's
	 * transfers; resumed: the next ones pass. */
	kill(s->pid, SIGSTOP);
	t0 = kvs_now_ns();
	KVS_TRY(rb_all(b, 8, 1, true, mem, res));
	kill(s->pid, SIGCONT);
	for (uint32_t i = 0; i < RS_SPB; i++)
		KVS_CHECK_ERR(res[i], -ETIMEDOUT);
	KVS_CHECK(kvs_now_ns() - t0 < 10 * ST_SEC);
	KVS_CHECK(strstr(rb_logs, "no reply within the command timeout") != NULL);
	KVS_TRY(rb_until_ok(b, 8, mem, res));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* OOM and READONLY replies fail their own shards only. */
static kvs_test_rc error_reply_body(struct rs *s)
{
	static unsigned char mem[RS_SPB * RS_SHARD];
	int64_t res[RS_SPB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;

	rb_cfg(&cfg, s);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_TRY(rb_all(b, 9, 1, true, mem, res));
	KVS_TRY(rs_ok(s, "CONFIG SET maxmemory-policy noeviction"));
	KVS_TRY(rs_ok(s, "CONFIG SET maxmemory 1"));
	KVS_TRY(rb_all(b, 10, 1, true, mem, res));
	for (uint32_t i = 0; i < RS_SPB; i++)
		KVS_CHECK_ERR(res[i], -ENOSPC);
	KVS_CHECK(strstr(rb_logs, "OOM") != NULL);
	KVS_TRY(rb_all(b, 9, 1, false, mem, res)); /* reads still pass */
	KVS_TRY(rb_verify(9, 1, mem, res));
	KVS_TRY(rs_ok(s, "CONFIG SET maxmemory 0"));

	KVS_TRY(rs_ok(s, "REPLICAOF 127.0.0.1 1")); /* a replica: read-only */
	KVS_TRY(rb_all(b, 11, 1, true, mem, res));
	for (uint32_t i = 0; i < RS_SPB; i++)
		KVS_CHECK_ERR(res[i], -EROFS);
	KVS_TRY(rs_ok(s, "REPLICAOF NO ONE"));
	KVS_TRY(rb_all(b, 11, 1, true, mem, res));
	KVS_TRY(rb_all(b, 11, 1, false, mem, res));
	KVS_TRY(rb_verify(11, 1, mem, res));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* One transfer of block (tag, i / RS_SPB), shard i % RS_SPB, token i. */
static kvs_test_rc wb_submit(struct kvs_backend *b, uint32_t tag, uint32_t i, bool write,
			     unsigned char *mem)
{
	struct kvs_backend_io io = { .block = st_block(tag, i / RS_SPB), .shard = i % RS_SPB,
				     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
				     .token = i };

	if (write)
		kvs_pattern_fill(&io.block, io.shard, 0, io.buf, RS_SHARD);
	else
		memset(io.buf, ST_POISON, RS_SHARD);
	KVS_CHECK_OK(write ? kvs_backend_submit_write(b, &io) : kvs_backend_submit_read(b, &io));
	return KVS_TEST_PASS;
}

/* n transfers of tag in flight at once, reaped by the issuer's loop on w, 7 at a
 * time; res[token] gets each result. */
static kvs_test_rc wb_many(struct wt *w, uint32_t tag, uint32_t n, bool write, unsigned char *mem,
			   int64_t *res)
{
	struct kvs_backend_completion c[64 + 7];

	KVS_CHECK(n <= 64);
	for (uint32_t i = 0; i < n; i++) {
		res[i] = INT64_MIN;
		KVS_TRY(wb_submit(w->b, tag, i, write, mem));
	}
	KVS_TRY(wt_reap(w, c, n, 7, 20 * ST_SEC));
	for (uint32_t k = 0; k < n; k++) {
		KVS_CHECK(c[k].token < n && res[c[k].token] == INT64_MIN);
		res[c[k].token] = c[k].result;
	}
	return KVS_TEST_PASS;
}

/* The wait descriptor over the server s. */
static kvs_test_rc wait_body(struct rs *s)
{
	static unsigned char mem[64 * RS_SHARD];
	int64_t res[64];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL, *b2 = NULL;
	struct kvs_backend_completion c[8];
	struct wt w, w2;
	uint32_t wakes0;
	uint64_t t0;

	rb_cfg(&cfg, s);
	KVS_TRY(rb_open(&cfg, &b));
	/* Before the descriptor exists: sockets connect, a block is written. */
	KVS_TRY(rb_all(b, 12, 1, true, mem, res));
	KVS_TRY(wt_open(&w, b));
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with the sockets connected and idle"));

	/* One GET: reaped by the loop (a reply may come in parts: 3 wakes at most). */
	KVS_TRY(wb_submit(b, 12, 1, false, mem));
	KVS_TRY(wt_reap(&w, c, 1, 8, 10 * ST_SEC));
	KVS_CHECK_EQ(c[0].token, 1);
	KVS_CHECK_EQ(c[0].result, RS_SHARD);
	KVS_CHECK(w.wakes <= 3);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the GET was reaped"));

	/* Held 1 s by a stopped server: nothing wakes the issuer meanwhile. */
	kill(s->pid, SIGSTOP);
	wakes0 = w.wakes;
	t0 = kvs_now_ns();
	KVS_TRY(wb_submit(b, 12, 2, false, mem));
	KVS_TRY(wt_quiet(&w, ST_SEC, "while the server is stopped"));
	kill(s->pid, SIGCONT);
	KVS_TRY(wt_reap(&w, c, 1, 8, 10 * ST_SEC));
	printf("  held %.1f ms: %u wake(s)\n", (double)(kvs_now_ns() - t0) / 1e6, w.wakes - wakes0);
	KVS_CHECK_EQ(c[0].token, 2);
	KVS_CHECK_EQ(c[0].result, RS_SHARD);
	KVS_CHECK(w.wakes - wakes0 <= 3);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after the held GET was reaped"));

	/* 64 SETs, then 64 GETs, in flight at once. */
	wakes0 = w.wakes;
	KVS_TRY(wb_many(&w, 13, 64, true, mem, res));
	for (uint32_t i = 0; i < 64; i++)
		KVS_CHECK_EQ(res[i], RS_SHARD);
	KVS_TRY(wb_many(&w, 13, 64, false, mem, res));
	KVS_TRY(rb_verify(13, 16, mem, res));
	printf("  64 SETs + 64 GETs: %u wakes, %u reaped nothing\n", w.wakes - wakes0, w.empty_wakes);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after 128 transfers were reaped"));

	/* A command timeout: only the timer can end the wait (no byte arrives).  One
	 * socket, so the retry after it goes on its replacement: watched too. */
	cfg.redis.command_timeout_ns = 300 * ST_MS;
	cfg.redis.connections = 1;
	KVS_TRY(rb_open(&cfg, &b2));
	KVS_TRY(wt_open(&w2, b2));
	kill(s->pid, SIGSTOP);
	t0 = kvs_now_ns();
	KVS_TRY(wb_submit(b2, 12, 0, false, mem));
	KVS_TRY(wt_reap(&w2, c, 1, 8, 10 * ST_SEC));
	kill(s->pid, SIGCONT);
	KVS_CHECK_ERR(c[0].result, -ETIMEDOUT);
	KVS_CHECK(kvs_now_ns() - t0 >= cfg.redis.command_timeout_ns);
	KVS_CHECK(w2.wakes <= 3);
	KVS_TRY(wt_quiet(&w2, 100 * ST_MS, "after the timed-out GET was reaped"));
	for (t0 = kvs_now_ns();;) {
		struct kvs_backend_io io = { .block = st_block(12, 0), .buf = mem, .len = RS_SHARD,
					     .token = 9 };
		int rc = kvs_backend_submit_read(b2, &io);

		if (rc == 0) {
			KVS_TRY(wt_reap(&w2, c, 1, 8, 10 * ST_SEC));
			if (c[0].result == RS_SHARD)
				break;
		}
		if (kvs_now_ns() - t0 > 10 * ST_SEC)
			KVS_FAILF("no GET passed 10 s after the timeout: %d / %lld (%s)", rc,
				  (long long)c[0].result, kvs_strerror(rc ? rc : (int)c[0].result));
		usleep(20000); /* the reconnect backoff (10 ms) */
	}
	KVS_TRY(wt_quiet(&w2, 100 * ST_MS, "after a GET on the new socket"));
	wt_close(&w2);
	kvs_backend_close(b2);

	/* The server restarted: the dead idle sockets wake nobody; the next transfers
	 * go on new sockets, which the descriptor watches. */
	rs_kill(s, SIGKILL);
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "with the server dead and the sockets idle"));
	KVS_TRY(rs_run(s));
	KVS_TRY(wb_many(&w, 14, 8, true, mem, res));
	for (uint32_t i = 0; i < 8; i++)
		KVS_CHECK_EQ(res[i], RS_SHARD);
	KVS_TRY(wb_many(&w, 14, 8, false, mem, res));
	KVS_TRY(rb_verify(14, 2, mem, res));
	KVS_TRY(wt_quiet(&w, 100 * ST_MS, "after transfers on the new sockets"));
	wt_close(&w);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_bad_config(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct rs s = { .sock = "/nonexistent/redis.sock" };
	static const char *const bad[] = { "", "localhost", "host:0", "host:70000", ":6379",
					    "[::1:6379", "/a;;/b", "relative/path" };

	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		rb_cfg(&cfg, &s);
		snprintf(cfg.redis.endpoints, sizeof(cfg.redis.endpoints), "%s", bad[i]);
		KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
		KVS_CHECK(b == NULL);
	}
	rb_cfg(&cfg, &s);
	cfg.redis.connections = 0;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	rb_cfg(&cfg, &s);
	cfg.redis.reserved[1] = 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	rb_cfg(&cfg, &s);
	cfg.shard_bytes = (UINT64_C(512) << 20) + 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(rb_logs, "512 MiB") != NULL);
	rb_cfg(&cfg, &s);
	snprintf(cfg.redis.password_file, sizeof(cfg.redis.password_file), "/nonexistent/pw");
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -ENOENT);
	return KVS_TEST_PASS;
}

/* ---- the batch lookup hook (no server: a user backend counting calls) ---- */

static int hook_lookups, hook_batches;

static int hook_open(const struct kvs_backend_config *cfg, void **state)
{
	(void)cfg;
	*state = &hook_lookups;
	return 0;
}

/* Present: blocks whose first byte is even. */
static int hook_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state;
	hook_lookups++;
	return block->bytes[0] % 2 == 0;
}

static int hook_batch(void *state, const struct kvs_block_id *blocks, size_t n, bool *hits)
{
	int hit = 0;

	(void)state;
	hook_batches++;
	for (size_t i = 0; i < n; i++) {
		if (!hits[i])
			hits[i] = blocks[i].bytes[0] % 2 == 0;
		hit += hits[i];
	}
	return hit;
}

static int hook_io(void *state, const struct kvs_backend_io *io)
{
	(void)state;
	(void)io;
	return -ENOENT;
}

static int hook_poll(void *state, struct kvs_backend_completion *out, uint32_t max, uint64_t t)
{
	(void)state;
	(void)out;
	(void)max;
	(void)t;
	return 0;
}

static void hook_close(void *state)
{
	(void)state;
}

/* kvs_store_lookup / lookup_prefix use the backend's batch op once per call (the
 * blocks the cache lacks), and block-by-block lookups for a table whose size
 * predates the op (prefix: stopping at the first miss). */
static kvs_test_rc test_batch_hook(void)
{
	struct kvs_backend_ops ops = {
		.abi = KVS_BACKEND_OPS_ABI, .size = sizeof(ops), .open = hook_open,
		.lookup = hook_lookup, .submit_read = hook_io, .submit_write = hook_io,
		.poll = hook_poll, .close = hook_close, .lookup_batch = hook_batch,
	};
	struct kvs_block_id ids[10];
	struct kvs_store_config cfg;
	struct kvs_store *w = NULL;
	bool hits[10];
	char uid[96];

	for (int i = 0; i < 10; i++) {
		memset(&ids[i], 0, sizeof(ids[i]));
		ids[i].bytes[0] = (uint8_t)(i == 4 || i == 7 ? 1 : 2); /* 4 and 7 absent */
		ids[i].bytes[1] = (uint8_t)i;
	}
	for (int old = 0; old < 2; old++) {
		if (old) /* a provider built before lookup_batch existed */
			ops.size = (uint32_t)offsetof(struct kvs_backend_ops, lookup_batch);
		st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), old ? "hook1" : "hook0"), -1,
		       RS_SHARD, 8, 1);
		cfg.backend.kind = KVS_BACKEND_USER;
		cfg.backend.user_ops = &ops;
		KVS_TRY(st_open(&cfg, &w));
		hook_lookups = hook_batches = 0;
		KVS_CHECK_EQ(kvs_store_lookup(w, ids, 10, hits), 8);
		KVS_CHECK(!hits[4] && !hits[7] && hits[0] && hits[9]);
		KVS_CHECK_EQ(hook_batches, old ? 0 : 1);
		KVS_CHECK_EQ(hook_lookups, old ? 10 : 0);
		hook_lookups = hook_batches = 0;
		KVS_CHECK_EQ(kvs_store_lookup_prefix(w, ids, 10), 4);
		KVS_CHECK_EQ(hook_batches, old ? 0 : 1);
		KVS_CHECK_EQ(hook_lookups, old ? 5 : 0); /* 0..4: stops at the miss */
		kvs_store_close(w);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_roundtrip(void) { return rs_case(NULL, roundtrip_body); }
static kvs_test_rc test_pipeline(void) { return rs_case(NULL, pipeline_body); }
static kvs_test_rc test_late_poll(void) { return rs_case(NULL, late_poll_body); }
static kvs_test_rc test_wrong_length(void) { return rs_case(NULL, wrong_length_body); }
static kvs_test_rc test_geometry(void) { return rs_case(NULL, geometry_body); }
static kvs_test_rc test_garbage_header(void) { return rs_case(NULL, garbage_header_body); }
static kvs_test_rc test_wrong_password(void) { return rs_case("s3cret-pw", password_body); }
static kvs_test_rc test_outage(void) { return rs_case(NULL, outage_body); }
static kvs_test_rc test_error_replies(void) { return rs_case(NULL, error_reply_body); }
static kvs_test_rc test_wait_fd(void) { return rs_case(NULL, wait_body); }

static const struct kvs_test_case cases[] = {
	{ "roundtrip", test_roundtrip },
	{ "pipeline", test_pipeline },
	{ "late_poll", test_late_poll },
	{ "wrong_length", test_wrong_length },
	{ "geometry", test_geometry },
	{ "garbage_header", test_garbage_header },
	{ "wrong_password", test_wrong_password },
	{ "outage", test_outage },
	{ "error_replies", test_error_replies },
	{ "wait_fd", test_wait_fd },
	{ "bad_config", test_bad_config },
	{ "batch_hook", test_batch_hook },
};

KVS_TEST_MAIN(cases)
