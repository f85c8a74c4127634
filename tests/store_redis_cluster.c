/*
 * tests/store_redis_cluster.c — the store (kvs_store_*, host copy engine) over
 * the redis backend on a Redis Cluster (redis_cluster=1) that the test starts
 * (tests/redis_cluster_util.h: 3 masters + 3 replicas on loopback, torn down at
 * exit).
 *
 *   ranks8      node A dumps 16 blocks (their slots on every master); node B's
 *               8 rank processes, exec'd (with --mixed OTHER: every odd rank is
 *               the other variant's build of this program, on the same cache),
 *               each load every shard and check its bytes: the cluster served
 *               exactly one GET per shard for the whole node (INFO
 *               commandstats summed over the nodes) and node B's store counted
 *               one owner read per shard; a lookup through node B's watcher is
 *               one EXISTS per block the cache lacks, summed the same way
 *
 * Skips (77) when redis-server or redis-cli is not installed, saying so.
 */
#include "redis_cluster_util.h"

#define SC_SLOTS 256u
#define SC_NB 16u
#define SC_RANKS 8

static const char *sc_mixed; /* --mixed: the other variant's build of this program */

/* A rank's exit status after a good load: which variant it ran. */
#define SC_EXIT_KERNEL 40
#define SC_EXIT_PLAIN 41
#define SC_EXIT_SELF (strcmp(KVS_TEST_VARIANT, "kernel") == 0 ? SC_EXIT_KERNEL : SC_EXIT_PLAIN)

/* The config of a rank (or watcher, device -1) of the node whose cache is uid. */
static kvs_test_rc sc_open(const char *uid, int32_t device, const char *seeds,
			   struct kvs_store **st)
{
	struct kvs_store_config cfg;
	char kv[300];

	st_cfg(&cfg, uid, device, RS_SHARD, SC_SLOTS, RS_SPB);
	cfg.timeout_ns = 30 * ST_SEC; /* a hang would show as -ETIMEDOUT, not a pass */
	snprintf(kv, sizeof(kv), "backend=redis,redis_cluster=1,redis_endpoints=%s,"
		 "redis_connections=2", seeds);
	KVS_TRY(st_parse(&cfg, kv));
	if (device < 0) /* a watcher alone keeps no cache: the caller removes it */
		cfg.cache.flags |= KVS_CACHE_PERSIST;
	return st_open(&cfg, st);
}

/* Child (exec'd): rank `device` of node uid loads every shard of tag's blocks
 * and checks the bytes, then exits SC_EXIT_SELF (the parent checks which
 * variant ran).  argv: uid device seeds tag. */
static kvs_test_rc sc_rank(int argc, char **argv)
{
	struct kvs_store *st = NULL;
	struct st_task t;
	kvs_test_rc rc;

	KVS_CHECK_EQ(argc, 4);
	KVS_TRY(sc_open(argv[0], atoi(argv[1]), argv[2], &st));
	rc = rs_task(&t, (uint32_t)atoi(argv[3]), SC_NB);
	if (rc.code == 0)
		rc = st_load(st, &t, 30000, 0);
	st_task_free(&t);
	kvs_store_close(st);
	return rc.code == 0 ? KVS_TEST_EXIT(SC_EXIT_SELF) : rc;
}

/* Exec rank `device` from this program, or (odd ranks with --mixed) from the
 * other variant's. */
static pid_t sc_spawn(const char *uid, int device, const char *seeds, const char *tag)
{
	char dev[16];
	const char *path = sc_mixed && device % 2 ? sc_mixed : "/proc/self/exe";
	const char *argv[] = { program_invocation_name, "--child", "rank", uid, dev, seeds, tag, NULL };
	pid_t parent = getpid(), pid;

	snprintf(dev, sizeof(dev), "%d", device);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		kvs_test_child_dies_with(parent);
		execv(path, (char **)argv);
		_exit(127);
	}
	return pid;
}

static kvs_test_rc test_ranks8(void)
{
	struct kvs_block_id ids[SC_NB + 2];
	struct kvs_store *a = NULL, *w = NULL;
	struct kvs_store_stats node;
	bool hits[SC_NB + 2];
	struct st_task t;
	char uid[96], seeds[64];
	long long gets0, exists0;
	pid_t pid[SC_RANKS];
	int masters = 0, per[RCL_NODES] = { 0 };
	kvs_test_rc rc;

	KVS_TRY(rcl_start());
	rcl_seeds(seeds, sizeof(seeds), 0, 2);
	/* Node A dumps. */
	KVS_TRY(sc_open(kvs_test_unique_id(uid, sizeof(uid), "rclA"), 0, seeds, &a));
	rc = rs_task(&t, 50, SC_NB);
	if (rc.code == 0)
		rc = st_dump(a, &t, 30000);
	st_task_free(&t);
	kvs_store_close(a);
	KVS_TRY(rc);
	for (uint32_t i = 0; i < SC_NB; i++) {
		ids[i] = st_block(50, i);
		per[rcl_index(rcl_master_of(rcl_slot(&ids[i])))]++;
	}
	for (int i = 0; i < RCL_NODES; i++)
		masters += per[i] > 0;
	KVS_CHECK_EQ(masters, 3); /* the blocks are on every master */
	ids[SC_NB] = st_block(51, 0);
	ids[SC_NB + 1] = st_block(51, 1);

	/* Node B: a watcher holds its cache while its ranks come and go. */
	kvs_test_unique_id(uid, sizeof(uid), "rclB");
	KVS_TRY(sc_open(uid, -1, seeds, &w));
	exists0 = rcl_sum("commandstats", "cmdstat_exists:calls=");
	KVS_CHECK_EQ(kvs_store_lookup(w, ids, SC_NB + 2, hits), SC_NB);
	for (uint32_t i = 0; i < SC_NB + 2; i++)
		KVS_CHECK_EQ(hits[i], i < SC_NB);
	KVS_CHECK_EQ(rcl_sum("commandstats", "cmdstat_exists:calls=") - exists0, SC_NB + 2);

	gets0 = rcl_sum("commandstats", "cmdstat_get:calls=");
	for (int i = 0; i < SC_RANKS; i++) {
		pid[i] = sc_spawn(uid, i, seeds, "50");
		KVS_CHECK(pid[i] > 0);
	}
	for (int i = 0; i < SC_RANKS; i++) /* each ran the variant it should */
		KVS_CHECK_EQ(kvs_test_reap(pid[i], 90000),
			     sc_mixed && i % 2 ? SC_EXIT_KERNEL + SC_EXIT_PLAIN - SC_EXIT_SELF
					       : SC_EXIT_SELF);
	/* Exactly one cluster read per shard for the node, however many ranks. */
	KVS_CHECK_EQ(rcl_sum("commandstats", "cmdstat_get:calls=") - gets0, SC_NB * RS_SPB);
	KVS_TRY(st_stats(w, KVS_STATS_NODE, &node));
	st_print("node B", &node);
	KVS_CHECK_EQ(node.owner_reads, SC_NB * RS_SPB);
	KVS_CHECK_EQ(node.read_errors, 0);
	return st_close_kept(w, uid);
}

static const struct kvs_test_case cases[] = {
	{ "ranks8", test_ranks8 },
};

static const struct kvs_test_child children[] = {
	{ "rank", sc_rank },
};

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "--mixed") == 0) {
		if (access(argv[2], X_OK) != 0) {
			fprintf(stderr, "--mixed %s: %s\n", argv[2], strerror(errno));
			return 2;
		}
		sc_mixed = argv[2];
		argv[2] = argv[0];
		return kvs_test_run(argc - 2, argv + 2, cases, KVS_ARRAY_LEN(cases), children,
				    KVS_ARRAY_LEN(children));
	}
	return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), children,
			    KVS_ARRAY_LEN(children));
}
