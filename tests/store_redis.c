/*
 * tests/store_redis.c — the store (kvs_store_*, host copy engine) over the redis
 * backend, against a real redis-server each case starts on a unix socket
 * (tests/redis_util.h) and stops.
 *
 *   store_two_nodes  two "nodes" (two caches with different unique_ids) share
 *                    the server: node A dumps, node B's two rank processes load
 *                    every shard, bytes verified, and the server saw exactly one
 *                    GET per shard for node B (INFO commandstats) and node B's
 *                    store counted one owner read per shard; lookups through the
 *                    store (one EXISTS per block the cache lacks)
 *   store_kill       kill -9 of the server mid-load (the task fails with a clear
 *                    error, the cache stays consistent) and a restart (the next
 *                    load passes)
 *   store_errors     a wrong password refusing the store's open; a planted
 *                    wrong-length value failing only its shard
 *   ready_shard      a block of which the server holds only shard 0 (its other
 *                    shard's write failed, or its key expired): a load makes
 *                    shard 0 READY in the cache, then a durable dump of the
 *                    whole block returns 0 only with every key of it stored
 *                    (before: 0, key 1 absent -- a READY shard was taken for a
 *                    stored block, as it is over the posix backend)
 *   ready_adopted    as ready_shard, with dump_wait=cached: the dump of X
 *                    returns 0, the server refuses the rank's writes (OOM), the
 *                    rank -- the cache's only process -- is killed -9; the next
 *                    rank adopts the cache and writes all of X, X:0 too (before:
 *                    X:0 was READY, only DIRTY shards were adopted, X looked
 *                    incomplete and was never written: the server kept X:0 alone)
 *   stopped_server   the server stopped (SIGSTOP) under a rank with a 500 ms
 *                    deadline: a durable dump of half a block and a load both
 *                    report by their deadline (before: ~10 s, the copier held
 *                    in a synchronous lookup at the dump's deadline)
 *
 *   password_file    a server whose password is 300 bytes: a redis_password_file
 *                    holding it passes kvs_store_config_check and kvs_store_open
 *                    and a dump goes through (before: cut to 255 bytes,
 *                    WRONGPASS); one of 5000 bytes is refused naming the 4096-byte
 *                    limit; a FIFO is refused at once, naming the key (before:
 *                    both calls hung in open(2) for ever)
 *
 * Skips (77) when redis-server is not installed, saying so.
 */
#include "redis_util.h"


#define SR_SLOTS 256u

#define SR_NB 16u

/* The config of a rank (or watcher, device -1) of the node whose cache is uid,
 * on the server s: the backend through the key=value parser, as an engine would
 * set it, with the items extra (",key=value...", or NULL) after it. */
static kvs_test_rc sr_cfg(struct kvs_store_config *cfg, const char *uid, int32_t device,
			  const struct rs *s, const char *extra)
{
	char kv[800];

	st_cfg(cfg, uid, device, RS_SHARD, SR_SLOTS, RS_SPB);
	cfg->timeout_ns = 30 * ST_SEC; /* a hang would show as -ETIMEDOUT, not a pass */
	snprintf(kv, sizeof(kv), "backend=redis,redis_endpoints=%s,redis_connections=2%s", s->sock,
		 extra ? extra : "");
	KVS_TRY(st_parse(cfg, kv));
	if (device < 0) /* a watcher alone keeps no cache: the caller removes it */
		cfg->cache.flags |= KVS_CACHE_PERSIST;
	return KVS_TEST_PASS;
}

/* Open that rank (password: redis_password, or NULL). */
static kvs_test_rc sr_open(const char *uid, int32_t device, const struct rs *s,
			   const char *password, struct kvs_store **st)
{
	struct kvs_store_config cfg;
	char extra[300] = "";

	if (password)
		snprintf(extra, sizeof(extra), ",redis_password=%s", password);
	KVS_TRY(sr_cfg(&cfg, uid, device, s, extra));
	return st_open(&cfg, st);
}

/* Node A (a cache of its own) dumps blocks tag/0..nb-1 to the server. */
static kvs_test_rc sr_node_dump(const struct rs *s, const char *tag_name, uint32_t tag,
				uint32_t nb)
{
	struct kvs_store *a = NULL;
	struct st_task t;
	char uid[96];
	kvs_test_rc rc;

	KVS_TRY(sr_open(kvs_test_unique_id(uid, sizeof(uid), tag_name), 0, s, NULL, &a));
	rc = rs_task(&t, tag, nb);
	if (rc.code == 0)
		rc = st_dump(a, &t, 20000);
	st_task_free(&t);
	kvs_store_close(a);
	return rc;
}

struct sr_rank {
	const struct rs *s;
	const char *uid;
	int32_t device;
};

/* Child: a rank of node B loads every shard and checks the bytes. */
static kvs_test_rc sr_rank_load(void *arg)
{
	const struct sr_rank *r = arg;
	struct kvs_store *st = NULL;
	struct st_task t;
	kvs_test_rc rc;

	KVS_TRY(sr_open(r->uid, r->device, r->s, NULL, &st));
	rc = rs_task(&t, 20, SR_NB);
	if (rc.code == 0)
		rc = st_load(st, &t, 20000, 0);
	st_task_free(&t);
	kvs_store_close(st);
	return rc;
}

static kvs_test_rc two_nodes_body(struct rs *s)
{
	struct kvs_block_id ids[SR_NB + 2];
	struct kvs_store *w = NULL;
	struct kvs_store_stats node;
	struct sr_rank ranks[2];
	bool hits[SR_NB + 2];
	char uid[96];
	long long gets0, exists0;
	pid_t pid[2];

	KVS_TRY(sr_node_dump(s, "redisA", 20, SR_NB));
	KVS_CHECK_EQ(rs_calls(s, "set"), SR_NB * RS_SPB);
	gets0 = rs_calls(s, "get");

	/* Node B: a watcher holds its cache (persistent) while its two ranks come
	 * and go; without it the first rank's close could remove the cache before
	 * the second attached, which then read everything again. */
	kvs_test_unique_id(uid, sizeof(uid), "redisB");
	KVS_TRY(sr_open(uid, -1, s, NULL, &w));
	for (uint32_t i = 0; i < SR_NB; i++)
		ids[i] = st_block(20, i);
	ids[SR_NB] = st_block(21, 0);
	ids[SR_NB + 1] = st_block(21, 1);
	exists0 = rs_calls(s, "exists");
	KVS_CHECK_EQ(kvs_store_lookup(w, ids, SR_NB + 2, hits), SR_NB);
	for (uint32_t i = 0; i < SR_NB + 2; i++)
		KVS_CHECK_EQ(hits[i], i < SR_NB);
	KVS_CHECK_EQ(rs_calls(s, "exists") - exists0, SR_NB + 2); /* one per block, one batch */
	ids[5] = st_block(21, 2);
	KVS_CHECK_EQ(kvs_store_lookup_prefix(w, ids, SR_NB), 5);
	ids[5] = st_block(20, 5);

	for (int i = 0; i < 2; i++) {
		ranks[i] = (struct sr_rank){ .s = s, .uid = uid, .device = i };
		pid[i] = kvs_test_fork(sr_rank_load, &ranks[i]);
		KVS_CHECK(pid[i] > 0);
	}
	for (int i = 0; i < 2; i++)
		KVS_CHECK_EQ(kvs_test_reap(pid[i], 60000), 0);
	/* Exactly one server read per shard for the node, however many ranks. */
	KVS_CHECK_EQ(rs_calls(s, "get") - gets0, SR_NB * RS_SPB);
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &node));
	st_print("node B", &node);
	KVS_CHECK_EQ(node.owner_reads, SR_NB * RS_SPB);
	KVS_CHECK_EQ(node.read_errors, 0);
	/* Now in node B's cache: its lookups ask the server nothing. */
	exists0 = rs_calls(s, "exists");
	KVS_CHECK_EQ(kvs_store_lookup(w, ids, SR_NB, hits), SR_NB);
	KVS_CHECK_EQ(rs_calls(s, "exists") - exists0, 0);
	return st_close_kept(w, uid);
}

/* The server dies with node B's reads queued on it (stopped first, so they are
 * surely in flight), then comes back empty. */
static kvs_test_rc kill_body(struct rs *s)
{
	struct kvs_store *b = NULL;
	struct st_task t;
	char uid[96];
	uint64_t task = 0, t0;
	int rc;

	KVS_TRY(sr_node_dump(s, "redisK1", 22, SR_NB));
	KVS_TRY(sr_open(kvs_test_unique_id(uid, sizeof(uid), "redisKB"), 0, s, NULL, &b));
	/* The copy engine's registration logs when it ends: let it end first, so
	 * the last line logged below is the backend's. */
	KVS_CHECK_EQ(kvs_store_ready(b, 30 * ST_SEC), 1);
	KVS_TRY(rs_task(&t, 22, SR_NB));
	kill(s->pid, SIGSTOP);
	KVS_CHECK_OK(kvs_store_load(b, t.shards, t.n, &task));
	t0 = kvs_now_ns();
	KVS_CHECK_EQ(kvs_store_check(b, task), 1); /* replies cannot come */
	rs_kill(s, SIGKILL);
	rc = st_wait(b, task, 20000);
	printf("  load with the server killed: %d (%s) after %.1f ms; log: %s\n", rc,
	       kvs_strerror(rc), (double)(kvs_now_ns() - t0) / 1e6, st_last_log);
	KVS_CHECK(rc < 0 && rc != -ETIMEDOUT);
	KVS_CHECK(strstr(st_last_log, "redis") || strstr(st_last_log, "backend"));
	KVS_TRY(st_cache_clean(b, false));

	/* Back, empty: node A dumps again, node B's next load passes. */
	KVS_TRY(rs_run(s));
	KVS_TRY(sr_node_dump(s, "redisK2", 22, SR_NB));
	for (uint64_t deadline = kvs_deadline_after(10 * ST_SEC);;) {
		st_task_poison(&t);
		KVS_CHECK_OK(kvs_store_load(b, t.shards, t.n, &task));
		rc = st_wait(b, task, 20000);
		if (rc == 0 || kvs_now_ns() > deadline)
			break;
		usleep(20000); /* the reconnect backoff */
	}
	KVS_CHECK_EQ(rc, 0);
	KVS_TRY(st_task_verify(&t));
	KVS_TRY(st_cache_clean(b, false));
	st_task_free(&t);
	kvs_store_close(b);
	return KVS_TEST_PASS;
}

/* A wrong-length value under one key fails that shard's load; the rest pass. */
static kvs_test_rc store_errors_body(struct rs *s)
{
	struct kvs_store *b = NULL;
	struct kvs_store_stats st;
	struct st_task one, rest;
	struct kvs_block_id bad = st_block(23, 0);
	char uid[96], key[128];
	redisReply *rep;
	int rc;

	KVS_TRY(sr_node_dump(s, "redisE1", 23, 4));
	rs_key(&bad, 2, key, sizeof(key));
	rep = rs_cmd(s, "SET %s short", key);
	freeReplyObject(rep);
	KVS_TRY(sr_open(kvs_test_unique_id(uid, sizeof(uid), "redisEB"), 0, s, NULL, &b));
	KVS_TRY(rs_task(&one, 23, 1));
	KVS_TRY(st_load(b, &one, 20000, -EIO));
	KVS_CHECK(strstr(st_last_log, "publishing") == NULL);
	KVS_TRY(st_task_whole(&rest, 3 * RS_SPB, 1, RS_SHARD));
	for (uint32_t i = 0; i < 3 * RS_SPB; i++) {
		struct kvs_block_id id = st_block(23, 1 + i / RS_SPB);

		st_task_set(&rest, i, &id, i % RS_SPB);
	}
	{
		/* A lookup from this thread while the dispatcher loads: the lookup
		 * socket and the data sockets are independent (TSan checks it). */
		uint64_t task = 0;
		struct kvs_block_id ids[3] = { st_block(23, 1), st_block(23, 2), st_block(24, 0) };
		bool hits[3];

		st_task_poison(&rest);
		KVS_CHECK_OK(kvs_store_load(b, rest.shards, rest.n, &task));
		KVS_CHECK_EQ(kvs_store_lookup(b, ids, 3, hits), 2);
		KVS_TRY(st_wait_expect(b, task, 20000, 0, "load"));
		KVS_TRY(st_task_verify(&rest));
	}
	KVS_TRY(st_stats(b, st_rank(b), &st));
	KVS_CHECK_EQ(st.read_errors, 1);
	KVS_TRY(st_cache_clean(b, false));
	st_task_free(&one);
	st_task_free(&rest);
	kvs_store_close(b);

	/* A wrong password refuses the store's open, naming the endpoint. */
	rs_kill(s, SIGTERM);
	snprintf(s->password, sizeof(s->password), "right-pw");
	KVS_TRY(rs_run(s));
	struct kvs_store_config cfg;
	char kv[400];

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "redisPW"), 0, RS_SHARD, SR_SLOTS, RS_SPB);
	snprintf(kv, sizeof(kv), "backend=redis,redis_endpoints=%s,redis_password=wrong-pw", s->sock);
	KVS_TRY(st_parse(&cfg, kv));
	cfg.log = rb_log;
	rb_logs[0] = '\0';
	rc = kvs_store_open(&cfg, &b);
	KVS_CHECK_ERR(rc, -EACCES);
	KVS_CHECK(strstr(rb_logs, "AUTH failed") && strstr(rb_logs, s->sock));
	KVS_CHECK(strstr(rb_logs, "wrong-pw") == NULL);
	KVS_TRY(sr_open(uid, 0, s, "right-pw", &b));
	kvs_store_close(b);
	return KVS_TEST_PASS;
}

/* ---- redis_password_file ---- */

static char long_pw[301]; /* 300 bytes: Redis passwords are often long */

/* path holds n bytes of c (then a newline), mode 0600. */
static kvs_test_rc pw_write(const char *path, const char *bytes, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	KVS_CHECK(fd >= 0);
	KVS_CHECK_EQ(write(fd, bytes, n), (ssize_t)n);
	KVS_CHECK_EQ(write(fd, "\n", 1), 1);
	close(fd);
	return KVS_TEST_PASS;
}

/* forked: the check and the open of cfg (its redis_password_file a FIFO nobody
 * writes to) are -EINVAL at once, naming the key and what is there.  Before,
 * both waited in open(2) for a writer for ever (killed by the deadline). */
static kvs_test_rc pw_fifo_child(void *arg)
{
	const struct kvs_store_config *cfg = arg;
	struct kvs_store *st = NULL;

	st_log_quiet = 1;
	KVS_CHECK_ERR(kvs_store_config_check(cfg), -EINVAL);
	KVS_CHECK(strstr(kvs_store_last_error(), "redis_password_file") &&
		  strstr(kvs_store_last_error(), "is a FIFO, not a regular file"));
	KVS_CHECK_ERR(kvs_store_open(cfg, &st), -EINVAL);
	KVS_CHECK(strstr(kvs_store_last_error(), "redis_password_file"));
	return KVS_TEST_PASS;
}

/* A server whose requirepass is 300 bytes: a redis_password_file holding them
 * passes the check and the open, and a dump goes through (before: the file was
 * cut to 255 bytes, WRONGPASS: -EACCES).  A FIFO as the file fails at once, a
 * file of 5000 bytes names the limit; neither is read past it. */
static kvs_test_rc password_files(struct rs *s, const char *dir)
{
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	struct st_task t;
	char path[256], extra[300], uid[96], big[5000];
	pid_t pid;

	kvs_test_unique_id(uid, sizeof(uid), "redisPF");
	snprintf(path, sizeof(path), "%s/pw", dir);
	snprintf(extra, sizeof(extra), ",redis_password_file=%s", path);
	KVS_TRY(sr_cfg(&cfg, uid, 0, s, extra));

	KVS_TRY(pw_write(path, long_pw, strlen(long_pw)));
	KVS_CHECK_OK(kvs_store_config_check(&cfg));
	KVS_TRY(st_open(&cfg, &st));
	KVS_TRY(rs_task(&t, 31, 1));
	KVS_TRY(st_dump(st, &t, 20000));
	st_task_free(&t);
	kvs_store_close(st);
	KVS_CHECK_EQ(rs_calls(s, "set"), RS_SPB);

	memset(big, 'a', sizeof(big));
	KVS_TRY(pw_write(path, big, sizeof(big)));
	KVS_CHECK_ERR(kvs_store_config_check(&cfg), -EINVAL);
	KVS_CHECK(strstr(kvs_store_last_error(), "longer than 4096 bytes"));

	KVS_CHECK_OK(unlink(path));
	KVS_CHECK_OK(mkfifo(path, 0600));
	pid = kvs_test_fork(pw_fifo_child, &cfg);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0); /* a hang is killed: -ETIMEDOUT */
	return KVS_TEST_PASS;
}

static kvs_test_rc password_file_body(struct rs *s)
{
	char dir[128];
	kvs_test_rc rc;

	KVS_TRY(st_root_init(dir, sizeof(dir), "redispw"));
	rc = password_files(s, dir);
	st_root_fini(dir);
	return rc;
}

static kvs_test_rc test_password_file(void)
{
	for (size_t i = 0; i < sizeof(long_pw) - 1; i++)
		long_pw[i] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(i * 7 + 3) % 62];
	return rs_case(long_pw, password_file_body);
}

/* Each case with its own server. */
/* Shard 0 of block X is stored, shard 1 is not (its write failed after X:0
 * landed, or its key expired): written through the backend itself. */
static kvs_test_rc half_stored(const struct rs *s, const struct kvs_block_id *x)
{
	static unsigned char buf[RS_SHARD];
	struct kvs_backend_config bc;
	struct kvs_backend *b = NULL;
	struct kvs_backend_completion comp;
	int n;

	kvs_backend_config_init(&bc);
	bc.kind = KVS_BACKEND_REDIS;
	snprintf(bc.redis.endpoints, sizeof(bc.redis.endpoints), "%s", s->sock);
	bc.shard_bytes = RS_SHARD;
	bc.shards_per_block = RS_SPB;
	KVS_CHECK_OK(kvs_backend_open(&bc, &b));
	kvs_pattern_fill(x, 0, 0, buf, sizeof(buf));
	struct kvs_backend_io io = { .block = *x, .shard = 0, .buf = buf, .len = RS_SHARD, .token = 1 };
	KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
	n = kvs_backend_poll(b, &comp, 1, 5 * ST_SEC);
	KVS_CHECK_EQ(n, 1);
	KVS_CHECK_EQ(comp.result, (int64_t)RS_SHARD);
	KVS_CHECK_EQ(kvs_backend_lookup(b, x), 0); /* the block is not stored */
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc ready_shard_body(struct rs *s)
{
	struct kvs_block_id x = st_block(30, 0);
	struct kvs_store *r = NULL;
	struct st_task one, all;
	char uid[96], key[80];
	redisReply *rep;

	KVS_TRY(half_stored(s, &x));
	KVS_TRY(sr_open(kvs_test_unique_id(uid, sizeof(uid), "redisR"), 0, s, NULL, &r));
	KVS_TRY(st_task_whole(&one, 1, 1, RS_SHARD));
	st_task_set(&one, 0, &x, 0);
	KVS_TRY(st_load(r, &one, 20000, 0)); /* X:0 READY in the cache */
	KVS_TRY(rs_task(&all, 30, 1));
	KVS_TRY(st_dump(r, &all, 20000)); /* durable: every shard of X stored */
	for (uint32_t i = 0; i < RS_SPB; i++) {
		rs_key(&x, i, key, sizeof(key));
		rep = rs_cmd(s, "EXISTS %s", key);
		KVS_CHECK(rep && rep->type == REDIS_REPLY_INTEGER);
		printf("  durable dump of X -> 0; key X:%u after it: %lld\n", i, rep->integer);
		KVS_CHECK_EQ(rep->integer, 1);
		freeReplyObject(rep);
	}
	kvs_store_close(r);
	st_task_free(&one);
	st_task_free(&all);
	return KVS_TEST_PASS;
}

/* The forked rank of ready_adopted: the cache's only process. */
struct ra_arg {
	const struct rs *s;
	const char *uid;
	int up, down; /* to the parent, from it */
};

/* Load X:0 (READY: the server holds it), say 'l'; at 'g' (the server refuses
 * writes now) dump all of X, cached: 0; say 'd' and wait to be killed. */
static kvs_test_rc ra_rank(void *arg)
{
	const struct ra_arg *a = arg;
	struct kvs_block_id x = st_block(32, 0);
	struct kvs_store_config cfg;
	struct kvs_store *r = NULL;
	struct st_task one, all;
	char ch = 'l';

	KVS_TRY(sr_cfg(&cfg, a->uid, 0, a->s, ",dump_wait=cached"));
	KVS_TRY(st_open(&cfg, &r));
	KVS_TRY(st_task_whole(&one, 1, 1, RS_SHARD));
	st_task_set(&one, 0, &x, 0);
	KVS_TRY(st_load(r, &one, 20000, 0));
	KVS_TRY(st_write_full(a->up, &ch, 1));
	KVS_TRY(st_read_full(a->down, &ch, 1, 20000));
	KVS_TRY(rs_task(&all, 32, 1));
	KVS_TRY(st_dump(r, &all, 20000)); /* acknowledged: X:0 counts, 1..3 gathered */
	ch = 'd';
	KVS_TRY(st_write_full(a->up, &ch, 1));
	pause(); /* until killed */
	return KVS_TEST_FAIL;
}

/* How many of X's keys the server holds. */
static int keys_of(const struct rs *s, const struct kvs_block_id *x)
{
	char key[80];
	int have = 0;

	for (uint32_t i = 0; i < RS_SPB; i++) {
		redisReply *rep;

		rs_key(x, i, key, sizeof(key));
		rep = rs_cmd(s, "EXISTS %s", key);
		have += rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1;
		freeReplyObject(rep);
	}
	return have;
}

static kvs_test_rc ready_adopted_body(struct rs *s)
{
	struct kvs_block_id x = st_block(32, 0);
	struct kvs_store *r = NULL;
	struct ra_arg a;
	uint64_t deadline;
	char uid[96], ch = 'g';
	int up[2], down[2], have;
	pid_t pid;

	KVS_TRY(half_stored(s, &x));
	KVS_CHECK(pipe(up) == 0 && pipe(down) == 0);
	a = (struct ra_arg){ s, kvs_test_unique_id(uid, sizeof(uid), "redisA"), up[1], down[0] };
	pid = kvs_test_fork(ra_rank, &a);
	KVS_CHECK(pid > 0);
	kvs_test_rc rc = st_read_full(up[0], &ch, 1, 20000);
	if (rc.code == 0) /* every write refused from here (OOM), reads served */
		rc = rs_ok(s, "CONFIG SET maxmemory-policy noeviction");
	if (rc.code == 0)
		rc = rs_ok(s, "CONFIG SET maxmemory 1");
	ch = 'g';
	if (rc.code == 0)
		rc = st_write_full(down[1], &ch, 1);
	if (rc.code == 0)
		rc = st_read_full(up[0], &ch, 1, 20000);
	if (rc.code == 0)
		usleep(200 * 1000); /* its block write tried, refused, retried */
	kill(pid, SIGKILL); /* the cache's only process: stale, X dumped in it */
	(void)kvs_test_reap(pid, 10000);
	KVS_TRY(rc);
	KVS_TRY(rs_ok(s, "CONFIG SET maxmemory 0"));
	KVS_CHECK_EQ(keys_of(s, &x), 1); /* only X:0: the block is not stored */
	KVS_TRY(sr_open(uid, 0, s, NULL, &r)); /* adopts the cache */
	deadline = kvs_deadline_after(20 * ST_SEC);
	while ((have = keys_of(s, &x)) < (int)RS_SPB && kvs_now_ns() < deadline)
		usleep(10 * 1000);
	printf("  the adopter's open: %d of X's %u keys on the server\n", have, RS_SPB);
	KVS_CHECK_EQ(have, (int)RS_SPB);
	kvs_store_close(r);
	KVS_TRY(st_no_segments(uid));
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc stopped_body(struct rs *s)
{
	struct kvs_block_id x = st_block(31, 0), y = st_block(31, 1);
	struct kvs_store_config cfg;
	struct kvs_store *r = NULL;
	struct st_task half, miss;
	uint64_t dump = 0, load = 0, t0, dump_ms, load_ms;
	char uid[96], kv[300];
	int rc_dump, rc_load;

	st_cfg(&cfg, kvs_test_unique_id(uid, sizeof(uid), "redisS"), 0, RS_SHARD, SR_SLOTS, RS_SPB);
	snprintf(kv, sizeof(kv), "backend=redis,redis_endpoints=%s,timeout_ms=500", s->sock);
	KVS_TRY(st_parse(&cfg, kv));
	KVS_TRY(st_open(&cfg, &r));
	KVS_CHECK_EQ(kvs_store_ready(r, 30 * ST_SEC), 1);
	KVS_TRY(st_task_whole(&half, 2, 1, RS_SHARD)); /* 2 of X's 4 shards: never complete */
	st_task_set(&half, 0, &x, 0);
	st_task_set(&half, 1, &x, 1);
	st_task_fill(&half);
	KVS_TRY(st_task_whole(&miss, 1, 1, RS_SHARD)); /* Y: a read the server never answers */
	st_task_set(&miss, 0, &y, 0);
	kill(s->pid, SIGSTOP);
	t0 = kvs_now_ns();
	KVS_CHECK_OK(kvs_store_dump(r, half.shards, half.n, NULL, &dump));
	KVS_CHECK_OK(kvs_store_load(r, miss.shards, miss.n, &load));
	rc_dump = st_wait(r, dump, 20000);
	dump_ms = (kvs_now_ns() - t0) / ST_MS;
	rc_load = st_wait(r, load, 20000);
	load_ms = (kvs_now_ns() - t0) / ST_MS;
	kill(s->pid, SIGCONT);
	printf("  server stopped, 500 ms deadlines: durable dump of half a block %d (%s) after "
	       "%llu ms, load %d (%s) after %llu ms\n",
	       rc_dump, kvs_strerror(rc_dump), (unsigned long long)dump_ms, rc_load,
	       kvs_strerror(rc_load), (unsigned long long)load_ms);
	KVS_CHECK_ERR(rc_dump, -KVS_EINCOMPLETE);
	KVS_CHECK_ERR(rc_load, -ETIMEDOUT);
	/* by the deadline, give or take this machine's scheduling */
	KVS_CHECK(dump_ms < 2000 && load_ms < 2000);
	/* Close once the held GET is answered, so that the close is clean and its
	 * grace for transfers in flight (timeout_ms) plays no part: the resumed
	 * server answers a PING, then a second load of Y ends only after that GET
	 * (Y's slot stays LOADING until its answer: the load joins it, or owns the
	 * next read).  On a loaded machine the answer may take seconds to be read
	 * (a PING alone was not enough: the close once still found the GET in
	 * flight); each try ends at the task's deadline, 10 s at most. */
	freeReplyObject(rs_cmd(s, "PING"));
	t0 = kvs_now_ns();
	do {
		KVS_CHECK_OK(kvs_store_load(r, miss.shards, miss.n, &load));
		rc_load = st_wait(r, load, 20000);
	} while (rc_load == -ETIMEDOUT && kvs_now_ns() - t0 < 10 * ST_SEC);
	KVS_CHECK(rc_load != -ETIMEDOUT);
	printf("  after the resume: a load of Y %d (%s) after %llu ms\n", rc_load,
	       kvs_strerror(rc_load), (unsigned long long)((kvs_now_ns() - t0) / ST_MS));
	kvs_store_close(r);
	KVS_TRY(st_remove_dirty(uid, 2)); /* half of X, still protected: the cache kept */
	st_task_free(&half);
	st_task_free(&miss);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_store_two_nodes(void) { return rs_case(NULL, two_nodes_body); }
static kvs_test_rc test_store_kill(void) { return rs_case(NULL, kill_body); }
static kvs_test_rc test_store_errors(void) { return rs_case(NULL, store_errors_body); }
static kvs_test_rc test_ready_shard(void) { return rs_case(NULL, ready_shard_body); }
static kvs_test_rc test_stopped_server(void) { return rs_case(NULL, stopped_body); }
static kvs_test_rc test_ready_adopted(void) { return rs_case(NULL, ready_adopted_body); }

static const struct kvs_test_case cases[] = {
	{ "store_two_nodes", test_store_two_nodes },
	{ "store_kill", test_store_kill },
	{ "store_errors", test_store_errors },
	{ "ready_shard", test_ready_shard },
	{ "ready_adopted", test_ready_adopted },
	{ "stopped_server", test_stopped_server },
	{ "password_file", test_password_file },
};

KVS_TEST_MAIN(cases)
