/*
 * tests/io_redis_cluster.c — the redis backend on a Redis Cluster
 * (redis_cluster=1, io/redis_cluster.c) against a real cluster the test starts
 * (tests/redis_cluster_util.h: 3 masters + 3 replicas on loopback, torn down at
 * exit).  The cases share it, in this order (the last one kills a master):
 *
 *   slots       the test's CRC16 oracle agrees with CLUSTER KEYSLOT on the
 *               documented key names <prefix>{<hex>}:<shard>
 *   roundtrip   blocks on every master written, read back and looked up with
 *               no MOVED or ASK at all (the backend's slots are the servers'),
 *               each key on its slot's master under the documented name
 *   conn_lost   the servers drop the backend's connections (CLIENT KILL) while
 *               writes, reads and lookups (the issuer's, and another thread's
 *               on the same handle) are in flight: all sent again, all pass
 *   seed_down   a dead seed before a live one: open warns and serves; only
 *               dead seeds: open fails naming redis_endpoints, or opens
 *               degraded with redis_start_degraded=1; 16 seeds at 64
 *               connections each: one node too many, -ENOSPC naming the limit
 *   detect      a cluster node without redis_cluster=1 and a standalone
 *               server with it are refused at open naming the key; db and
 *               a braced prefix refused by validation
 *   ask         a slot set MIGRATING/IMPORTING by hand: a new block's writes
 *               and reads and its lookup follow -ASK (ASKING), old keys stay
 *               where they are; a block half migrated: its lookup retried
 *               through -TRYAGAIN until the rest moves; the slot handed over:
 *               -MOVED followed once, then the map knows
 *   reshard     `redis-cli --cluster reshard` of 24 slots running while their
 *               blocks are written, read and looked up (by the issuer and by
 *               another thread on the same handle): no error, no wrong
 *               byte, redirections counted on the servers (errorstats)
 *   uncovered   a slot that no master serves: a submit fails -EHOSTUNREACH
 *               naming the slot and the fix, a lookup too; a handle that knew
 *               the old map gets the error as a completion by its deadline
 *   wait_replica  redis_wait_replicas=1: writes complete once the replica has
 *               them; with the replica stopped they fail (-EIO naming the
 *               option, or -ETIMEDOUT behind a WAIT) by their deadline; a
 *               handle without the option reports them written
 *   password    every node wants a password: none or a wrong one refused at
 *               open naming the keys, the right one round-trips on every node
 *   failover    blocks written with redis_wait_replicas=1; a master's replica
 *               held (SIGSTOP), the master killed -9 with reads queued on it:
 *               every read completes by its deadline, its own failed, the
 *               others' with the right bytes; reads in the window (no replica
 *               promoted yet) fail by their deadline naming the slot; the
 *               replica let go: after its promotion every block reads back
 *               whole, and so does every durable write (redis_wait_replicas=1)
 *               that returned 0 while in flight at the kill
 *               (what was durable stayed durable)
 *
 * Skips (77) when redis-server or redis-cli is not installed, saying so.
 */
#include "redis_cluster_util.h"

#define CB_TIMEOUT_MS 500 /* redis_command_timeout_ms of the cases that wait for it */

static void cb_cfg(struct kvs_backend_config *cfg, const char *seeds)
{
	rb_cfg_at(cfg, seeds);
	cfg->redis.cluster = 1;
}

/* A cluster handle seeded with a running node (command_timeout_ms 0: default). */
static kvs_test_rc cb_open(struct kvs_backend **b, uint64_t command_timeout_ms)
{
	struct kvs_backend_config cfg;
	char seeds[64];

	rcl_seeds(seeds, sizeof(seeds), rcl_index(rcl_any()), 1);
	cb_cfg(&cfg, seeds);
	if (command_timeout_ms)
		cfg.redis.command_timeout_ns = command_timeout_ms * ST_MS;
	return rb_open(&cfg, b);
}

/* Write, or read into mem, every shard of ids[0..nb); res[block * RS_SPB + shard]. */
static kvs_test_rc cb_blocks(struct kvs_backend *b, const struct kvs_block_id *ids, uint32_t nb,
			     bool write, unsigned char *mem, int64_t *res, uint64_t ms)
{
	uint32_t pending = 0;

	for (uint32_t i = 0; i < nb * RS_SPB; i++) {
		struct kvs_backend_io io = { .block = ids[i / RS_SPB], .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = i };
		int rc;

		res[i] = INT64_MIN;
		if (write)
			kvs_pattern_fill(&io.block, io.shard, 0, io.buf, RS_SHARD);
		else
			memset(io.buf, ST_POISON, RS_SHARD);
		rc = rb_submit(b, &io, write, res, &pending);
		if (rc)
			res[i] = rc;
	}
	return rb_reap(b, res, &pending, ms);
}

/* Every transfer of ids[0..nb) passed (reads: with the pattern's bytes). */
static kvs_test_rc cb_verify(const struct kvs_block_id *ids, uint32_t nb, bool read,
			     const unsigned char *mem, const int64_t *res)
{
	unsigned char want[RS_SHARD];

	for (uint32_t i = 0; i < nb * RS_SPB; i++) {
		if (res[i] != RS_SHARD)
			KVS_FAILF("transfer %u (block %u shard %u, slot %d): %lld (%s); log:\n%s", i,
				  i / RS_SPB, i % RS_SPB, rcl_slot(&ids[i / RS_SPB]),
				  (long long)res[i], kvs_strerror((int)res[i]), rb_logs);
		kvs_pattern_fill(&ids[i / RS_SPB], i % RS_SPB, 0, want, RS_SHARD);
		if (read && memcmp(mem + (size_t)i * RS_SHARD, want, RS_SHARD))
			KVS_FAILF("shard %u of block %u: bytes differ", i % RS_SPB, i / RS_SPB);
	}
	return KVS_TEST_PASS;
}

/* Write ids, read them back, check every byte. */
static kvs_test_rc cb_write_read(struct kvs_backend *b, const struct kvs_block_id *ids,
				 uint32_t nb, unsigned char *mem, int64_t *res)
{
	KVS_TRY(cb_blocks(b, ids, nb, true, mem, res, 20000));
	KVS_TRY(cb_verify(ids, nb, false, mem, res));
	KVS_TRY(cb_blocks(b, ids, nb, false, mem, res, 20000));
	return cb_verify(ids, nb, true, mem, res);
}

/* ids[i] = st_block(tag, i), i < nb. */
static void cb_ids(struct kvs_block_id *ids, uint32_t nb, uint32_t tag)
{
	for (uint32_t i = 0; i < nb; i++)
		ids[i] = st_block(tag, i);
}

/* nb blocks st_block(tag, n) whose slot is in slots[0..ns) (ascending n). */
static void cb_find(uint32_t tag, const int *slots, int ns, struct kvs_block_id *ids, uint32_t nb)
{
	uint32_t k = 0;

	for (uint64_t n = 0; k < nb; n++) {
		struct kvs_block_id id = st_block(tag, n);
		int slot = rcl_slot(&id);

		for (int j = 0; j < ns; j++)
			if (slots[j] == slot) {
				ids[k++] = id;
				break;
			}
	}
}

static long long cb_redirects(const char *what)
{
	char key[48];

	snprintf(key, sizeof(key), "errorstat_%s:count=", what);
	return rcl_sum("errorstats", key);
}

/* A thread looking ids up on b again and again while the issuer works (the
 * routing's map and nodes are shared between them): every lookup must find
 * every block. */
struct cb_looker {
	struct kvs_backend *b;
	const struct kvs_block_id *ids;
	uint32_t nb;
	int stop;     /* set by the issuer (atomic: the flag between the threads) */
	int lookups;  /* done */
	int bad;      /* lookups that did not find nb blocks; the first's result */
	int first_bad;
};

static void *cb_looker_run(void *arg)
{
	struct cb_looker *l = arg;
	bool *hits = calloc(l->nb, sizeof(*hits));

	/* relaxed: a stop flag, nothing published with it */
	while (hits && !__atomic_load_n(&l->stop, __ATOMIC_RELAXED)) {
		int rc;

		memset(hits, 0, l->nb * sizeof(*hits));
		rc = kvs_backend_lookup_batch(l->b, l->ids, l->nb, 0, hits);
		l->lookups++;
		if (rc != (int)l->nb && !l->bad++)
			l->first_bad = rc;
	}
	free(hits);
	return NULL;
}

/* Write, read back and look up ids round after round until child pid ends,
 * then once more, with another thread looking them up all along; *rounds: how
 * many. */
static kvs_test_rc cb_churn(struct kvs_backend *b, const struct kvs_block_id *ids, uint32_t nb,
			    unsigned char *mem, int64_t *res, pid_t pid, int *rounds)
{
	struct cb_looker l = { .b = b, .ids = ids, .nb = nb };
	bool *hits = calloc(nb, sizeof(*hits));
	kvs_test_rc rc = KVS_TEST_PASS;
	int status = 0;
	pthread_t th;

	KVS_CHECK(hits != NULL);
	KVS_CHECK_EQ(pthread_create(&th, NULL, cb_looker_run, &l), 0);
	*rounds = 0;
	for (bool last = false; rc.code == 0; (*rounds)++) {
		rc = cb_write_read(b, ids, nb, mem, res);
		memset(hits, 0, nb * sizeof(*hits));
		if (rc.code == 0 && kvs_backend_lookup_batch(b, ids, nb, 0, hits) != (int)nb)
			rc = KVS_TEST_FAIL;
		if (last)
			break;
		last = waitpid(pid, &status, WNOHANG) == pid;
	}
	__atomic_store_n(&l.stop, 1, __ATOMIC_RELAXED);
	pthread_join(th, NULL);
	free(hits);
	if (rc.code) {
		kvs_test_reap(pid, 60000);
		KVS_FAILF("round %d failed; log:\n%s", *rounds, rb_logs);
	}
	printf("  %d lookups from another thread meanwhile\n", l.lookups);
	if (l.bad)
		KVS_FAILF("%d of %d lookups from another thread failed, the first %d (%s); log:\n%s",
			  l.bad, l.lookups, l.first_bad, kvs_strerror(l.first_bad), rb_logs);
	KVS_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	return KVS_TEST_PASS;
}

/* ---- cases ---- */

static kvs_test_rc test_slots(void)
{
	KVS_TRY(rcl_start());
	KVS_CHECK_EQ(rcl_slot_of_tag("123456789"), 0x31C3 & 16383); /* the spec's check value */
	for (uint32_t i = 0; i < 8; i++) {
		struct kvs_block_id id = st_block(30, i);
		char key[128];
		redisReply *rep;

		rcl_key(&id, i % RS_SPB, key, sizeof(key));
		rep = rcl_cmd(rcl_any(), "CLUSTER KEYSLOT %s", key);
		KVS_CHECK(rep && rep->type == REDIS_REPLY_INTEGER);
		KVS_CHECK_EQ(rep->integer, rcl_slot(&id));
		freeReplyObject(rep);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_roundtrip(void)
{
	enum { NB = 48 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_block_id ids[NB + 2];
	bool hits[NB + 2] = { false };
	struct kvs_backend *b = NULL;
	long long moved0, ask0, per_master[RCL_NODES] = { 0 };
	int masters = 0;

	KVS_TRY(rcl_start());
	cb_ids(ids, NB + 2, 31);
	moved0 = cb_redirects("MOVED");
	ask0 = cb_redirects("ASK");
	KVS_TRY(cb_open(&b, 0));
	KVS_TRY(cb_write_read(b, ids, NB, mem, res));
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, NB + 2, 0, hits), NB);
	for (uint32_t i = 0; i < NB + 2; i++)
		KVS_CHECK_EQ(hits[i], i < NB);
	/* Every block's keys on its slot's master, by the documented name. */
	for (uint32_t i = 0; i < NB; i++) {
		int port = rcl_master_of(rcl_slot(&ids[i]));
		char key[128];
		redisReply *rep;

		KVS_CHECK(port > 0);
		rcl_key(&ids[i], RS_SPB - 1, key, sizeof(key));
		rep = rcl_cmd(port, "EXISTS %s", key);
		KVS_CHECK(rep && rep->type == REDIS_REPLY_INTEGER);
		KVS_CHECK_EQ(rep->integer, 1);
		freeReplyObject(rep);
		per_master[rcl_index(port)]++;
	}
	for (int i = 0; i < RCL_NODES; i++)
		masters += per_master[i] > 0;
	KVS_CHECK_EQ(masters, 3);
	/* The backend's slots are the servers': never redirected. */
	KVS_CHECK_EQ(cb_redirects("MOVED") - moved0, 0);
	KVS_CHECK_EQ(cb_redirects("ASK") - ask0, 0);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* Child: CLIENT KILL of every normal client of every master, n times. */
static kvs_test_rc cb_killer(void *arg)
{
	const int *n = arg;

	for (int k = 0; k < *n; k++) {
		usleep(30000); /* between kills: the parent reads meanwhile */
		for (int i = 0; i < RCL_NODES; i++) {
			redisReply *rep = rcl_cmd(rcl.port[i], "CLIENT KILL TYPE normal");

			freeReplyObject(rep);
		}
	}
	return KVS_TEST_PASS;
}

/* The servers drop the backend's sockets while reads and lookups are in
 * flight: every one is sent again (lost socket: a retry) and passes.  A kill
 * may find every socket idle (then the backend reconnects before it queues,
 * and nothing is retried); the kills go on, a batch at a time, until one has
 * met transfers in flight, 10 batches at most. */
static kvs_test_rc test_conn_lost(void)
{
	enum { NB = 32, BATCHES = 10 };
	static const char retried[] = "are tried again after a slot map refresh";
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_block_id ids[NB];
	struct kvs_backend *b = NULL;
	int kills = 6, rounds = 0, batch = 0;

	KVS_TRY(rcl_start());
	cb_ids(ids, NB, 38);
	KVS_TRY(cb_open(&b, 0));
	KVS_TRY(cb_write_read(b, ids, NB, mem, res));
	while (batch < BATCHES && !strstr(rb_logs, retried)) {
		pid_t pid = kvs_test_fork(cb_killer, &kills);

		KVS_CHECK(pid > 0);
		KVS_TRY(cb_churn(b, ids, NB, mem, res, pid, &rounds));
		printf("  batch %d: %d rounds of writes, reads and lookups through %d kills of the "
		       "connections\n", ++batch, rounds, kills);
	}
	if (!strstr(rb_logs, retried))
		KVS_FAILF("%d batches of kills and no transfer was in flight at one; log:\n%s",
			  batch, rb_logs);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_seed_down(void)
{
	enum { NB = 8 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_block_id ids[NB];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	char seeds[KVS_REDIS_ENDPOINTS_LEN];
	int dead = 0;

	KVS_TRY(rcl_start());
	for (int p = 16000; !dead && p < 16999; p++) /* a loopback port nobody listens on */
		if (rcl_port_free(p))
			dead = p;
	KVS_CHECK(dead > 0);
	cb_ids(ids, NB, 32);
	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d;127.0.0.1:%d", dead, rcl.port[1]);
	cb_cfg(&cfg, seeds);
	KVS_TRY(rb_open(&cfg, &b));
	KVS_CHECK(strstr(rb_logs, "seed 127.0.0.1:") && strstr(rb_logs, "unreachable at open"));
	KVS_TRY(cb_write_read(b, ids, NB, mem, res));
	kvs_backend_close(b);

	snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", dead);
	cb_cfg(&cfg, seeds);
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -ECONNREFUSED);
	KVS_CHECK(strstr(rb_logs, "redis_endpoints") && strstr(rb_logs, "redis_start_degraded=1"));
	cfg.redis.start_degraded = 1;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK(strstr(rb_logs, "opened degraded"));
	kvs_backend_close(b);

	/* 64 connections per node leave room for 16 nodes: 15 dead seeds, a live
	 * one, and the masters the map names are more. */
	{
		size_t n = 0;

		for (int i = 0, p = dead; i < 15 && p < 16999; p++)
			if (rcl_port_free(p)) {
				n += (size_t)snprintf(seeds + n, sizeof(seeds) - n, "127.0.0.1:%d;", p);
				i++;
			}
		snprintf(seeds + n, sizeof(seeds) - n, "127.0.0.1:%d", rcl.port[1]);
	}
	cb_cfg(&cfg, seeds);
	cfg.redis.connections = KVS_REDIS_MAX_CONNECTIONS;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -ENOSPC);
	KVS_CHECK(strstr(rb_logs, "would be node 17: at most 16 nodes") &&
		  strstr(rb_logs, "lower redis_connections"));
	return KVS_TEST_PASS;
}

static kvs_test_rc standalone_refused(struct rs *s)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;

	cb_cfg(&cfg, s->sock);
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(rb_logs, "cluster support disabled") && strstr(rb_logs, "redis_cluster=0"));
	cfg.redis.cluster = 0; /* as it should be: opens */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_detect(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	char seeds[64];

	KVS_TRY(rcl_start());
	rcl_seeds(seeds, sizeof(seeds), 0, 1);
	cb_cfg(&cfg, seeds);
	cfg.redis.cluster = 0;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(rb_logs, "cluster_enabled:1") && strstr(rb_logs, "set redis_cluster=1"));
	cb_cfg(&cfg, seeds);
	cfg.redis.db = 1;
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(rb_logs, "redis_db=0"));
	cb_cfg(&cfg, seeds);
	snprintf(cfg.redis.key_prefix, sizeof(cfg.redis.key_prefix), "kv{x}:");
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -EINVAL);
	KVS_CHECK(strstr(rb_logs, "redis_key_prefix"));
	return rs_case(NULL, standalone_refused);
}

/* SETSLOT slot <how> on the node at port (how: "IMPORTING <id>", "NODE <id>"...). */
static kvs_test_rc cb_setslot(int port, int slot, const char *how, const char *id)
{
	redisReply *rep = rcl_cmd(port, "CLUSTER SETSLOT %d %s %s", slot, how, id);

	if (!rep || rep->type == REDIS_REPLY_ERROR)
		KVS_FAILF("CLUSTER SETSLOT %d %s on %d: %s", slot, how, port, rep ? rep->str : "-");
	freeReplyObject(rep);
	return KVS_TEST_PASS;
}

/* MIGRATE up to max keys of slot from the node at `from` to the one at `to`. */
static kvs_test_rc cb_migrate_keys(int from, int to, int slot, int max)
{
	redisReply *keys = rcl_cmd(from, "CLUSTER GETKEYSINSLOT %d %d", slot, max);

	KVS_CHECK(keys && keys->type == REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < keys->elements; i++) {
		redisReply *rep = rcl_cmd(from, "MIGRATE 127.0.0.1 %d %s 0 5000", to,
					  keys->element[i]->str);

		if (!rep || rep->type == REDIS_REPLY_ERROR) {
			freeReplyObject(keys);
			KVS_FAILF("MIGRATE: %s", rep ? rep->str : "-");
		}
		freeReplyObject(rep);
	}
	freeReplyObject(keys);
	return KVS_TEST_PASS;
}

/* Child: 300 ms later, the rest of slot's keys from `from` to `to`. */
struct cb_mover {
	int from, to, slot;
};

static kvs_test_rc cb_mover_child(void *arg)
{
	const struct cb_mover *mv = arg;

	usleep(300000); /* the parent's lookup is being retried meanwhile */
	return cb_migrate_keys(mv->from, mv->to, mv->slot, 1000);
}

static kvs_test_rc test_ask(void)
{
	static unsigned char mem[2 * RS_SPB * RS_SHARD];
	int64_t res[2 * RS_SPB];
	struct kvs_block_id ids[2];
	struct kvs_backend *b = NULL;
	char ida[41], idb[41], key[128];
	bool hits[2] = { false };
	long long moved0, ask0;
	int slot, a, bport = -1;
	redisReply *rep;

	KVS_TRY(rcl_start());
	KVS_TRY(rcl_wait_ok(20000));
	ids[0] = st_block(33, 0);
	slot = rcl_slot(&ids[0]);
	cb_find(34, &slot, 1, &ids[1], 1); /* another block of the same slot */
	a = rcl_master_of(slot);
	for (int s = 0; s < 16384 && (bport < 0 || bport == a); s += 1000)
		bport = rcl_master_of(s);
	KVS_CHECK(a > 0 && bport > 0 && a != bport);
	KVS_TRY(rcl_id(a, ida));
	KVS_TRY(rcl_id(bport, idb));
	KVS_TRY(cb_open(&b, 0));
	KVS_TRY(cb_write_read(b, ids, 1, mem, res)); /* block 0 on a */

	KVS_TRY(cb_setslot(bport, slot, "IMPORTING", ida));
	KVS_TRY(cb_setslot(a, slot, "MIGRATING", idb));
	moved0 = cb_redirects("MOVED");
	ask0 = cb_redirects("ASK");
	/* Block 1 is new: a sends its SETs and GETs to b (-ASK); block 0 stays on a. */
	KVS_TRY(cb_write_read(b, &ids[1], 1, mem, res));
	rcl_key(&ids[1], 0, key, sizeof(key));
	rep = rcl_cmd(a, "EXISTS %s", key); /* not there: a sends the asker on */
	KVS_CHECK(rep && rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "ASK ", 4) == 0);
	freeReplyObject(rep);
	KVS_TRY(cb_blocks(b, ids, 1, false, mem, res, 20000));
	KVS_TRY(cb_verify(ids, 1, true, mem, res));
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, 2, 0, hits), 2);
	KVS_CHECK(cb_redirects("ASK") - ask0 >= 2 * RS_SPB + 1); /* SETs, GETs, EXISTS */
	KVS_CHECK_EQ(cb_redirects("MOVED") - moved0, 0);

	/* Block 0 half migrated: its EXISTS gets -TRYAGAIN from a, again and again
	 * (retried after a backoff) until the rest of it moves 300 ms later. */
	KVS_TRY(cb_migrate_keys(a, bport, slot, 2));
	{
		struct cb_mover mv = { .from = a, .to = bport, .slot = slot };
		long long again0 = cb_redirects("TRYAGAIN");
		uint64_t t0 = kvs_now_ns();
		pid_t pid = kvs_test_fork(cb_mover_child, &mv);

		KVS_CHECK(pid > 0);
		KVS_CHECK_EQ(kvs_backend_lookup(b, &ids[0]), 1);
		KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
		KVS_CHECK(kvs_now_ns() - t0 >= 250 * ST_MS);
		KVS_CHECK(cb_redirects("TRYAGAIN") - again0 >= 1);
	}

	/* The slot handed over: the first command finds it moved, the rest know. */
	KVS_TRY(cb_setslot(bport, slot, "NODE", idb));
	KVS_TRY(cb_setslot(a, slot, "NODE", idb));
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.port[i] != a && rcl.port[i] != bport) {
			rep = rcl_cmd(rcl.port[i], "CLUSTER SETSLOT %d NODE %s", slot, idb);
			freeReplyObject(rep); /* a replica refuses it: it follows its master */
		}
	moved0 = cb_redirects("MOVED");
	KVS_TRY(cb_blocks(b, ids, 2, false, mem, res, 20000));
	KVS_TRY(cb_verify(ids, 2, true, mem, res));
	KVS_CHECK(cb_redirects("MOVED") - moved0 >= 1);
	moved0 = cb_redirects("MOVED");
	KVS_TRY(cb_blocks(b, ids, 2, false, mem, res, 20000));
	KVS_TRY(cb_verify(ids, 2, true, mem, res));
	KVS_CHECK_EQ(kvs_backend_lookup_batch(b, ids, 2, 0, (bool[2]){ false }), 2);
	KVS_CHECK_EQ(cb_redirects("MOVED") - moved0, 0);
	kvs_backend_close(b);
	return rcl_wait_ok(20000);
}

/* Child: redis-cli --cluster reshard of n slots from the node of id `from`. */
struct cb_reshard {
	int port, n;
	char from[41], to[41];
};

static kvs_test_rc cb_reshard_child(void *arg)
{
	const struct cb_reshard *a = arg;
	char node[32], n[16];
	const char *argv[] = { "redis-cli", "--cluster", "reshard", node, "--cluster-from", a->from,
			       "--cluster-to", a->to, "--cluster-slots", n, "--cluster-yes",
			       "--cluster-pipeline", "1", NULL };

	snprintf(node, sizeof(node), "127.0.0.1:%d", a->port);
	snprintf(n, sizeof(n), "%d", a->n);
	if (rcl_run(argv, "reshard.log", 60000) != 0) {
		char cmd[200];

		snprintf(cmd, sizeof(cmd), "tail -20 %s/reshard.log >&2", rcl.dir);
		KVS_CHECK_EQ(system(cmd), 0);
		KVS_FAILF("redis-cli --cluster reshard failed (its log above)");
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_reshard(void)
{
	enum { NB = 24, NS = 24 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB];
	struct kvs_block_id ids[NB];
	struct kvs_backend *b = NULL;
	struct cb_reshard arg = { .n = NS };
	int slots[NS], ns = 0, a, to, rounds = 0;
	long long redirects0;
	pid_t pid;

	KVS_TRY(rcl_start());
	KVS_TRY(rcl_wait_ok(20000));
	a = rcl_master_of(0) > 0 ? rcl_master_of(0) : rcl_master_of(100);
	to = rcl_master_of(16383);
	KVS_CHECK(a > 0 && to > 0 && a != to);
	/* redis-cli moves the source's lowest slots: put the blocks there. */
	for (int s = 0; s < 16384 && ns < NS; s++)
		if (rcl_master_of(s) == a)
			slots[ns++] = s;
	KVS_CHECK_EQ(ns, NS);
	cb_find(35, slots, ns, ids, NB);
	KVS_TRY(cb_open(&b, 0));
	KVS_TRY(cb_write_read(b, ids, NB, mem, res));
	redirects0 = cb_redirects("MOVED") + cb_redirects("ASK");

	arg.port = a;
	KVS_TRY(rcl_id(a, arg.from));
	KVS_TRY(rcl_id(to, arg.to));
	pid = kvs_test_fork(cb_reshard_child, &arg);
	KVS_CHECK(pid > 0);
	KVS_TRY(cb_churn(b, ids, NB, mem, res, pid, &rounds)); /* until the reshard is over */
	for (int i = 0; i < ns; i++)
		KVS_CHECK_EQ(rcl_master_of(slots[i]), to);
	printf("  %d rounds during the reshard; %lld MOVED and ASK replies to them\n", rounds,
	       cb_redirects("MOVED") + cb_redirects("ASK") - redirects0);
	KVS_CHECK(cb_redirects("MOVED") + cb_redirects("ASK") - redirects0 > 0);
	kvs_backend_close(b);
	return rcl_wait_ok(20000);
}

static kvs_test_rc test_uncovered(void)
{
	static unsigned char mem[RS_SPB * RS_SHARD];
	int64_t res[RS_SPB];
	struct kvs_block_id id = st_block(36, 0);
	struct kvs_backend *old = NULL, *b = NULL;
	struct kvs_backend_io io = { .block = id, .buf = mem, .len = RS_SHARD };
	int slot = rcl_slot(&id), owner;
	char want[64];

	KVS_TRY(rcl_start());
	KVS_TRY(rcl_wait_ok(20000));
	owner = rcl_master_of(slot);
	KVS_TRY(cb_open(&old, CB_TIMEOUT_MS));
	KVS_TRY(cb_write_read(old, &id, 1, mem, res));
	KVS_TRY(rcl_uncover(slot, 20000));
	KVS_TRY(rcl_wait_ok(20000));
	KVS_CHECK_EQ(rcl_master_of(slot), -1);
	snprintf(want, sizeof(want), "slot %d", slot);

	KVS_TRY(cb_open(&b, CB_TIMEOUT_MS));
	KVS_CHECK(strstr(rb_logs, "1 of 16384 slots are served by no master"));
	KVS_CHECK_ERR(kvs_backend_submit_write(b, &io), -EHOSTUNREACH);
	KVS_CHECK(strstr(rb_logs, want) && strstr(rb_logs, "redis-cli --cluster fix"));
	KVS_CHECK_ERR(kvs_backend_lookup(b, &id), -EHOSTUNREACH);
	kvs_backend_close(b);
	/* The old handle's map says the owner: its reply (CLUSTERDOWN) and a
	 * refresh tell it otherwise, within the command timeout. */
	{
		uint64_t t0 = kvs_now_ns();

		KVS_TRY(cb_blocks(old, &id, 1, false, mem, res, 20000));
		KVS_CHECK(kvs_now_ns() - t0 < CB_TIMEOUT_MS * ST_MS + 2 * ST_SEC);
		for (uint32_t i = 0; i < RS_SPB; i++)
			KVS_CHECK(res[i] == -EHOSTUNREACH || res[i] == -EHOSTDOWN);
	}
	kvs_backend_close(old);

	/* Covered again: served. */
	{
		redisReply *rep = rcl_cmd(owner, "CLUSTER ADDSLOTS %d", slot);

		KVS_CHECK(rep && rep->type == REDIS_REPLY_STATUS);
		freeReplyObject(rep);
	}
	KVS_TRY(rcl_wait_ok(20000));
	KVS_TRY(cb_open(&b, 0));
	KVS_TRY(cb_write_read(b, &id, 1, mem, res));
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

/* A command on a fresh connection to the node at port, after AUTH pw. */
static redisReply *cb_cmd_auth(int port, const char *pw, const char *fmt, const char *arg)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *rep = NULL;

	if (c && !c->err) {
		freeReplyObject(redisCommand(c, "AUTH %s", pw));
		rep = redisCommand(c, fmt, arg);
	}
	redisFree(c);
	return rep;
}

/* Every node wants a password: a handle without it or with a wrong one is
 * refused at open (-EACCES) naming the keys to fix; with it, every node's
 * sockets authenticate and blocks round-trip. */
static kvs_test_rc test_password(void)
{
	static const char pw[] = "cluster-s3cret";
	static unsigned char mem[8 * RS_SPB * RS_SHARD];
	int64_t res[8 * RS_SPB];
	struct kvs_block_id ids[8];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	kvs_test_rc rc = KVS_TEST_PASS;
	char seeds[64];

	KVS_TRY(rcl_start());
	cb_ids(ids, 8, 41);
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.pid[i] > 0) {
			freeReplyObject(rcl_cmd(rcl.port[i], "CONFIG SET masterauth %s", pw));
			freeReplyObject(rcl_cmd(rcl.port[i], "CONFIG SET requirepass %s", pw));
		}
	rcl_seeds(seeds, sizeof(seeds), rcl_index(rcl_any()), 1);
	cb_cfg(&cfg, seeds);
	if (kvs_backend_open(&cfg, &b) != -EACCES || !strstr(rb_logs, "redis_password_file"))
		rc = KVS_TEST_FAIL;
	cb_cfg(&cfg, seeds);
	snprintf(cfg.redis.password, sizeof(cfg.redis.password), "wrong");
	if (rc.code == 0 &&
	    (kvs_backend_open(&cfg, &b) != -EACCES || !strstr(rb_logs, "refused AUTH")))
		rc = KVS_TEST_FAIL;
	if (rc.code)
		printf("  refusals: log:\n%s\n", rb_logs);
	cb_cfg(&cfg, seeds);
	snprintf(cfg.redis.password, sizeof(cfg.redis.password), "%s", pw);
	if (rc.code == 0)
		rc = rb_open(&cfg, &b);
	if (rc.code == 0) {
		rc = cb_write_read(b, ids, 8, mem, res);
		kvs_backend_close(b);
	}
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.pid[i] > 0)
			freeReplyObject(cb_cmd_auth(rcl.port[i], pw, "CONFIG SET requirepass %s", ""));
	return rc;
}

/* The node index of the replica of the master at port, -1: none. */
static int cb_replica_of(int port)
{
	char want[32];

	snprintf(want, sizeof(want), "master_port:%d", port);
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.pid[i] > 0 && rcl_says(rcl.port[i], "INFO replication", want))
			return i;
	return -1;
}

/* A handle seeded with a running node, its writes waiting for n replicas. */
static kvs_test_rc cb_open_wait(struct kvs_backend **b, uint32_t n)
{
	struct kvs_backend_config cfg;
	char seeds[64];

	rcl_seeds(seeds, sizeof(seeds), rcl_index(rcl_any()), 1);
	cb_cfg(&cfg, seeds);
	cfg.redis.command_timeout_ns = CB_TIMEOUT_MS * ST_MS;
	cfg.redis.wait_replicas = n;
	return rb_open(&cfg, b);
}

/* redis_wait_replicas=1: a write completes once the replica has it; with the
 * replica stopped it fails (-EIO, naming the option) by its deadline, where a
 * handle without the option reports it written. */
static kvs_test_rc test_wait_replica(void)
{
	static unsigned char mem[RS_SPB * RS_SHARD];
	int64_t res[RS_SPB];
	struct kvs_block_id ids[2] = { st_block(39, 0), st_block(39, 1) };
	struct kvs_backend *b = NULL, *plain = NULL;
	int replica;
	uint64_t t0;
	kvs_test_rc rc;

	KVS_TRY(rcl_start());
	KVS_TRY(rcl_wait_ok(20000));
	replica = cb_replica_of(rcl_master_of(rcl_slot(&ids[0])));
	KVS_CHECK(replica >= 0);
	KVS_TRY(cb_open_wait(&b, 1));
	KVS_TRY(cb_open(&plain, CB_TIMEOUT_MS));
	KVS_TRY(cb_write_read(b, &ids[0], 1, mem, res));

	kill(rcl.pid[replica], SIGSTOP);
	t0 = kvs_now_ns();
	rc = cb_blocks(b, &ids[0], 1, true, mem, res, 20000);
	if (rc.code == 0) { /* WAITs hold their socket: the later ones may time out */
		for (uint32_t i = 0; i < RS_SPB && rc.code == 0; i++)
			if (res[i] != -EIO && res[i] != -ETIMEDOUT)
				rc = KVS_TEST_FAIL;
		if (res[0] != -EIO)
			rc = KVS_TEST_FAIL;
		if (rc.code || !strstr(rb_logs, "0 of 1 replicas acknowledged it") ||
		    kvs_now_ns() - t0 > CB_TIMEOUT_MS * ST_MS + ST_SEC) {
			printf("  writes with the replica stopped: %lld, %.0f ms; log:\n%s\n",
			       (long long)res[0], (double)(kvs_now_ns() - t0) / 1e6, rb_logs);
			rc = KVS_TEST_FAIL;
		}
	}
	if (rc.code == 0) /* without the option: written, as far as the master knows */
		rc = cb_blocks(plain, &ids[1], 1, true, mem, res, 20000);
	if (rc.code == 0)
		rc = cb_verify(&ids[1], 1, false, mem, res);
	kill(rcl.pid[replica], SIGCONT);
	KVS_TRY(rc);
	kvs_backend_close(b);
	kvs_backend_close(plain);
	return KVS_TEST_PASS;
}

/* The reads of ids[0..n/RS_SPB) in res and mem: each the right bytes or an
 * error, never wrong bytes; at least one of each when both_kinds. */
static kvs_test_rc cb_right_or_failed(const struct kvs_block_id *ids, uint32_t n,
				      const unsigned char *mem, const int64_t *res, bool both_kinds)
{
	unsigned char w[RS_SHARD];
	int failed = 0, passed = 0;

	for (uint32_t i = 0; i < n; i++) {
		if (res[i] < 0) {
			if (!failed++)
				printf("  the first failed read: %s\n", kvs_strerror((int)res[i]));
			continue;
		}
		KVS_CHECK_EQ(res[i], RS_SHARD);
		kvs_pattern_fill(&ids[i / RS_SPB], i % RS_SPB, 0, w, RS_SHARD);
		KVS_CHECK(memcmp(mem + (size_t)i * RS_SHARD, w, RS_SHARD) == 0);
		passed++;
	}
	printf("  %d reads passed, %d failed\n", passed, failed);
	if (both_kinds)
		KVS_CHECK(passed > 0 && failed > 0);
	return KVS_TEST_PASS;
}

/* Submit the reads (or writes) of the first n shards of ids, shard i into
 * mem + i * RS_SHARD with token base + i (res[base + i] unset). */
static kvs_test_rc cb_submit(struct kvs_backend *b, const struct kvs_block_id *ids, uint32_t n,
			     bool write, unsigned char *mem, int64_t *res, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_backend_io io = { .block = ids[i / RS_SPB], .shard = i % RS_SPB,
					     .buf = mem + (size_t)i * RS_SHARD, .len = RS_SHARD,
					     .token = base + i };

		if (write)
			kvs_pattern_fill(&io.block, io.shard, 0, io.buf, RS_SHARD);
		else
			memset(io.buf, ST_POISON, RS_SHARD);
		res[base + i] = INT64_MIN;
		KVS_CHECK_OK(write ? kvs_backend_submit_write(b, &io) : kvs_backend_submit_read(b, &io));
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_failover(void)
{
	/* In flight at the kill: INFLIGHT reads and NW blocks' durable writes. */
	enum { NB = 48, INFLIGHT = 32, NW = 8 };
	static unsigned char mem[NB * RS_SPB * RS_SHARD], wmem[NW * RS_SPB * RS_SHARD];
	int64_t res[NB * RS_SPB], *wres = res + INFLIGHT, wgot[NW * RS_SPB];
	struct kvs_block_id ids[NB], wids[NW];
	struct kvs_backend *b = NULL, *w = NULL;
	uint32_t wok = 0;
	int victim, vslot, replica;
	uint32_t pending = INFLIGHT + NW * RS_SPB;
	uint64_t t0, t_kill;
	char want[32];
	kvs_test_rc rc;

	KVS_TRY(rcl_start());
	KVS_TRY(rcl_wait_ok(20000));
	cb_ids(ids, NB, 37);
	cb_ids(wids, NW, 40);
	/* Durable dumps: every write acknowledged by its master's replica. */
	KVS_TRY(cb_open_wait(&b, 1));
	KVS_TRY(cb_write_read(b, ids, NB, mem, res));
	vslot = rcl_slot(&ids[0]);
	victim = rcl_master_of(vslot);
	replica = cb_replica_of(victim);
	KVS_CHECK(replica >= 0);

	/* The victim's replica held (SIGSTOP: no failover until it goes on), the
	 * victim stopped so reads and durable writes queue on it, then killed -9
	 * under them. */
	kill(rcl.pid[replica], SIGSTOP);
	kill(rcl.pid[rcl_index(victim)], SIGSTOP);
	KVS_TRY(cb_submit(b, ids, INFLIGHT, false, mem, res, 0));
	KVS_TRY(cb_submit(b, wids, NW * RS_SPB, true, wmem, res, INFLIGHT));
	t0 = t_kill = kvs_now_ns();
	kill(rcl.pid[rcl_index(victim)], SIGKILL);
	kvs_test_reap(rcl.pid[rcl_index(victim)], 10000);
	rcl.pid[rcl_index(victim)] = 0;
	rc = rb_reap(b, res, &pending, 20000);
	memcpy(wgot, wres, sizeof(wgot));
	for (uint32_t i = 0; i < NW * RS_SPB; i++)
		wok += wgot[i] == RS_SHARD;
	printf("  durable writes in flight at the kill: %u of %u returned 0\n", wok, NW * RS_SPB);
	if (rc.code == 0 && kvs_now_ns() - t0 > CB_TIMEOUT_MS * ST_MS + ST_SEC)
		rc = KVS_TEST_FAIL; /* every read by its deadline */
	if (rc.code == 0) /* the victim's failed, the others' passed */
		rc = cb_right_or_failed(ids, INFLIGHT, mem, res, true);

	/* The window before a replica takes over: block 0's reads fail by their
	 * deadline, naming its slot (a handle of its own: its log lines are not
	 * held back by the limit of b's). */
	if (rc.code == 0)
		rc = cb_open(&w, CB_TIMEOUT_MS);
	if (rc.code == 0) {
		t0 = kvs_now_ns();
		rc = cb_blocks(w, ids, 1, false, mem, res, 20000);
		snprintf(want, sizeof(want), "(slot %d)", vslot);
		for (uint32_t i = 0; i < RS_SPB && rc.code == 0; i++)
			if (res[i] >= 0)
				rc = KVS_TEST_FAIL;
		if (rc.code == 0 && (kvs_now_ns() - t0 > CB_TIMEOUT_MS * ST_MS + ST_SEC ||
				     !strstr(rb_logs, want) || !strstr(rb_logs, "failing over"))) {
			printf("  window reads: %.0f ms; log:\n%s\n",
			       (double)(kvs_now_ns() - t0) / 1e6, rb_logs);
			rc = KVS_TEST_FAIL;
		}
		kvs_backend_close(w);
	}
	kill(rcl.pid[replica], SIGCONT);
	KVS_TRY(rc);

	/* After the failover (cluster_state stays ok without full coverage
	 * required: wait for the replica's promotion itself): every block whole. */
	for (uint64_t deadline = kvs_deadline_after(30 * ST_SEC);;) {
		int now = rcl_master_of(vslot);

		if (now > 0 && now != victim)
			break;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("slot %d: no replica promoted within 30 s", vslot);
		usleep(50000); /* the cluster's failover: wait, bounded */
	}
	KVS_TRY(rcl_wait_ok(30000));
	printf("  failover %.1f s after the kill\n", (double)(kvs_now_ns() - t_kill) / 1e9);
	KVS_TRY(cb_blocks(b, ids, NB, false, mem, res, 20000));
	KVS_TRY(cb_verify(ids, NB, true, mem, res));
	/* Every durable write that returned 0 mid-kill reads back whole. */
	KVS_TRY(cb_blocks(b, wids, NW, false, wmem, res, 20000));
	for (uint32_t i = 0; i < NW * RS_SPB; i++) {
		unsigned char want[RS_SHARD];

		if (wgot[i] != RS_SHARD)
			continue;
		kvs_pattern_fill(&wids[i / RS_SPB], i % RS_SPB, 0, want, RS_SHARD);
		if (res[i] != RS_SHARD || memcmp(wmem + (size_t)i * RS_SHARD, want, RS_SHARD))
			KVS_FAILF("shard %u of block %u: written durably (0) before the failover, "
				  "read after it: %lld (%s)%s", i % RS_SPB, i / RS_SPB,
				  (long long)res[i], kvs_strerror((int)res[i]),
				  res[i] == RS_SHARD ? ", other bytes" : "");
	}
	KVS_CHECK(wok > 0 && wok < NW * RS_SPB); /* the victim's failed, the others' passed */
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "slots", test_slots },	 { "roundtrip", test_roundtrip }, { "conn_lost", test_conn_lost },
	{ "seed_down", test_seed_down },
	{ "detect", test_detect },	 { "ask", test_ask },		  { "reshard", test_reshard },
	{ "uncovered", test_uncovered }, { "wait_replica", test_wait_replica },
	{ "password", test_password },
	{ "failover", test_failover },
};

KVS_TEST_MAIN(cases)
