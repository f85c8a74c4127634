/*
 * tests/redis_cluster_util.h — a Redis Cluster of the test's own (3 masters, 3
 * replicas, loopback TCP ports chosen free, `--save ""`, cluster-node-timeout
 * RCL_NODE_TIMEOUT_MS, full coverage not required so one slot can be taken
 * away), made with `redis-cli --cluster create` and ready once every replica
 * is in sync; the servers die with the test
 * process (PR_SET_PDEATHSIG) and rcl_stop (atexit) removes them and their
 * directory, whatever the cases returned.  The test's own view of it: commands
 * to a node, a slot's master, counters summed over the nodes, a CRC16 oracle
 * (checked against CLUSTER KEYSLOT).  Skips (77) without redis-server or
 * redis-cli, saying so.
 */
#ifndef KVS_TESTS_REDIS_CLUSTER_UTIL_H
#define KVS_TESTS_REDIS_CLUSTER_UTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>

#include "redis_util.h"

#define RCL_NODES 6
#define RCL_NODE_TIMEOUT_MS 1000
#define RCL_NODE_TIMEOUT_TEXT "1000"

struct rcl {
	char dir[96];
	int port[RCL_NODES];
	pid_t pid[RCL_NODES]; /* 0: not running */
	bool up;
};

static struct rcl rcl;

/* May port and its cluster bus port (+10000) be bound on loopback? */
static inline bool rcl_port_free(int port)
{
	for (int k = 0; k < 2; k++) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons((uint16_t)(port + k * 10000)),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

		if (fd >= 0)
			close(fd);
		if (!ok)
			return false;
	}
	return true;
}

/* A command to the node at port (NULL: no connection or no reply). */
static inline redisReply *rcl_cmd(int port, const char *fmt, ...)
{
	struct timeval tv = { 5, 0 };
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *rep = NULL;
	va_list ap;

	if (!c || c->err) {
		redisFree(c);
		return NULL;
	}
	redisSetTimeout(c, tv);
	va_start(ap, fmt);
	rep = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return rep;
}

/* The string reply of a command (a line of CLUSTER INFO, INFO) holds needle. */
static inline bool rcl_says(int port, const char *cmd, const char *needle)
{
	redisReply *rep = rcl_cmd(port, cmd);
	bool yes = rep && (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS) &&
		   strstr(rep->str, needle);

	freeReplyObject(rep);
	return yes;
}

static inline void rcl_stop(void)
{
	DIR *d;
	struct dirent *e;
	char path[400];

	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.pid[i] > 0) {
			kill(rcl.pid[i], SIGKILL);
			kvs_test_reap(rcl.pid[i], 10000);
			rcl.pid[i] = 0;
		}
	d = rcl.dir[0] ? opendir(rcl.dir) : NULL;
	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", rcl.dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	if (rcl.dir[0])
		rmdir(rcl.dir);
	rcl.dir[0] = '\0';
	rcl.up = false;
}

/* Run argv (a program on PATH) to its end, output to dir/<log>; its status. */
static inline int rcl_run(const char *const *argv, const char *log, int timeout_ms)
{
	char path[200];
	pid_t parent = getpid(), pid;

	snprintf(path, sizeof(path), "%s/%s", rcl.dir, log);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);

		kvs_test_child_dies_with(parent);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], (char **)argv);
		_exit(127);
	}
	return pid > 0 ? kvs_test_reap(pid, timeout_ms) : -1;
}

/* Start node i (again: same port, same nodes file). */
static inline kvs_test_rc rcl_node_run(int i)
{
	char port[16], conf[160], logf[160];
	pid_t parent = getpid();

	snprintf(port, sizeof(port), "%d", rcl.port[i]);
	snprintf(conf, sizeof(conf), "nodes-%d.conf", rcl.port[i]);
	snprintf(logf, sizeof(logf), "%s/redis-%d.log", rcl.dir, rcl.port[i]);
	fflush(NULL);
	rcl.pid[i] = fork();
	if (rcl.pid[i] == 0) {
		const char *argv[] = { "redis-server", "--port", port, "--bind", "127.0.0.1",
				       "--cluster-enabled", "yes", "--cluster-config-file", conf,
				       "--cluster-node-timeout", RCL_NODE_TIMEOUT_TEXT,
				       "--cluster-require-full-coverage", "no", "--dir", rcl.dir,
				       "--save", "", "--appendonly", "no", "--daemonize", "no",
				       "--repl-diskless-sync-delay", "0",
				       "--logfile", logf, NULL };

		kvs_test_child_dies_with(parent);
		execvp("redis-server", (char **)argv);
		_exit(127);
	}
	KVS_CHECK(rcl.pid[i] > 0);
	for (uint64_t deadline = kvs_deadline_after(10 * ST_SEC);;) {
		redisReply *rep = rcl_cmd(rcl.port[i], "PING");
		bool ok = rep && rep->type == REDIS_REPLY_STATUS;

		freeReplyObject(rep);
		if (ok)
			return KVS_TEST_PASS;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("redis-server on port %d did not answer within 10 s; see %s",
				  rcl.port[i], logf);
		usleep(10000); /* an external server: wait for its port, bounded */
	}
}

/* Wait until every running node says cluster_state:ok and agrees on who serves
 * every covered slot (the same CLUSTER SLOTS), within ms. */
static inline kvs_test_rc rcl_wait_ok(int ms)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)ms * ST_MS);

	for (;;) {
		bool ok = true;
		char first[4096] = "", mine[4096];

		for (int i = 0; i < RCL_NODES && ok; i++) {
			redisReply *rep;
			size_t n = 0;

			if (rcl.pid[i] <= 0)
				continue;
			ok = rcl_says(rcl.port[i], "CLUSTER INFO", "cluster_state:ok");
			rep = ok ? rcl_cmd(rcl.port[i], "CLUSTER SLOTS") : NULL;
			ok = rep && rep->type == REDIS_REPLY_ARRAY;
			mine[0] = '\0';
			for (size_t e = 0; ok && e < rep->elements; e++) {
				redisReply *r = rep->element[e];

				n += (size_t)snprintf(mine + n, sizeof(mine) - n, "%lld-%lld:%lld,",
						      r->element[0]->integer, r->element[1]->integer,
						      r->element[2]->element[1]->integer);
			}
			freeReplyObject(rep);
			if (ok && first[0] == '\0')
				memcpy(first, mine, sizeof(first));
			/* The same ranges, in any order: compare as sorted is overkill,
			 * CLUSTER SLOTS lists them by slot on every node. */
			ok = ok && strcmp(first, mine) == 0;
		}
		if (ok)
			return KVS_TEST_PASS;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("the cluster did not settle (cluster_state:ok, one slot map on "
				  "every node) within %d ms; logs in %s", ms, rcl.dir);
		usleep(50000); /* gossip among external servers: wait, bounded */
	}
}

/* The running cluster, started on the first call: 6 servers, then
 * redis-cli --cluster create with one replica per master. */
static inline kvs_test_rc rcl_start(void)
{
	const char *cli[4 + RCL_NODES + 4];
	char addr[RCL_NODES][32];
	int n = 0, base;

	if (rcl.up)
		return KVS_TEST_PASS;
	if (!rs_installed())
		KVS_SKIP("redis-server is not installed (Debian: apt-get install redis-server)");
	if (system("redis-cli --version >/dev/null 2>&1") != 0)
		KVS_SKIP("redis-cli is not installed (Debian: apt-get install redis-tools)");
	memset(&rcl, 0, sizeof(rcl));
	snprintf(rcl.dir, sizeof(rcl.dir), "/tmp/kvs-rcl.%s.XXXXXX", KVS_TEST_VARIANT);
	if (!mkdtemp(rcl.dir))
		KVS_FAILF("mkdtemp: %s", strerror(errno));
	atexit(rcl_stop);
	/* Ports from the pid (two variants' tests may run at once), all free, in
	 * 12000-20000: their bus ports (+10000) below the kernel's ephemeral range
	 * (32768 up), where a client connection's local port could take one
	 * between this check and the server's bind, and apart from
	 * perf/redis_cluster.sh's (20000-22700). */
	for (int attempt = 0;; attempt++) {
		bool free_all = true;

		base = 12000 + (int)(((unsigned)getpid() * 7u + (unsigned)attempt * 101u) % 7990u);
		for (int i = 0; i < RCL_NODES && free_all; i++)
			free_all = rcl_port_free(base + i);
		if (free_all)
			break;
		if (attempt == 50)
			KVS_FAILF("no 6 free loopback ports (and bus ports) found");
	}
	for (int i = 0; i < RCL_NODES; i++) {
		rcl.port[i] = base + i;
		KVS_TRY(rcl_node_run(i));
	}
	cli[n++] = "redis-cli";
	cli[n++] = "--cluster";
	cli[n++] = "create";
	for (int i = 0; i < RCL_NODES; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", rcl.port[i]);
		cli[n++] = addr[i];
	}
	cli[n++] = "--cluster-replicas";
	cli[n++] = "1";
	cli[n++] = "--cluster-yes";
	cli[n] = NULL;
	if (rcl_run(cli, "create.log", 60000) != 0)
		KVS_FAILF("redis-cli --cluster create failed; see %s/create.log", rcl.dir);
	KVS_TRY(rcl_wait_ok(30000));
	/* Every master's replica in sync (WAIT counts only those). */
	for (uint64_t deadline = kvs_deadline_after(30 * ST_SEC);;) {
		int online = 0;

		for (int i = 0; i < RCL_NODES; i++)
			online += rcl_says(rcl.port[i], "INFO replication", "state=online");
		if (online == RCL_NODES / 2)
			break;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("%d of %d replicas in sync after 30 s; logs in %s", online,
				  RCL_NODES / 2, rcl.dir);
		usleep(50000); /* the replicas' first sync: wait, bounded */
	}
	rcl.up = true;
	return KVS_TEST_PASS;
}

/* "127.0.0.1:<port>;..." of nodes first..first+count-1 (seeds for the backend). */
static inline void rcl_seeds(char *out, size_t len, int first, int count)
{
	size_t n = 0;

	out[0] = '\0';
	for (int i = 0; i < count; i++)
		n += (size_t)snprintf(out + n, len - n, "%s127.0.0.1:%d", i ? ";" : "",
				      rcl.port[(first + i) % RCL_NODES]);
}

/* The node index (0..5) whose port is port, -1: none. */
static inline int rcl_index(int port)
{
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.port[i] == port)
			return i;
	return -1;
}

/* A running node (to ask about the cluster). */
static inline int rcl_any(void)
{
	for (int i = 0; i < RCL_NODES; i++)
		if (rcl.pid[i] > 0)
			return rcl.port[i];
	return -1;
}

/* The port of the master serving slot, as a running node says; -1: none. */
/* The port of the master serving slot in the slot map of the node at at, -1
 * when that node knows none. */
static inline int rcl_master_at(int at, int slot)
{
	redisReply *rep = rcl_cmd(at, "CLUSTER SLOTS");
	int port = -1;

	for (size_t e = 0; rep && rep->type == REDIS_REPLY_ARRAY && e < rep->elements; e++) {
		redisReply *r = rep->element[e];

		if (r->element[0]->integer <= slot && slot <= r->element[1]->integer)
			port = (int)r->element[2]->element[1]->integer;
	}
	freeReplyObject(rep);
	return port;
}

static inline int rcl_master_of(int slot)
{
	return rcl_master_at(rcl_any(), slot);
}

/* Slot served by no master, in every node's map, within ms.  CLUSTER DELSLOTS
 * on each node is not enough by itself: a node that dropped the slot before
 * its owner did learns it back from a ping the owner sent before its own
 * DELSLOTS, and nothing unlearns it then (seen with the machine loaded: the
 * maps never agreed).  So DELSLOTS goes to the owner first, then to every node
 * whose map still has the slot, again until none has. */
static inline kvs_test_rc rcl_uncover(int slot, int ms)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)ms * 1000000u);
	int owner = rcl_master_of(slot);

	if (owner > 0)
		freeReplyObject(rcl_cmd(owner, "CLUSTER DELSLOTS %d", slot));
	for (;;) {
		bool left = false;

		for (int i = 0; i < RCL_NODES; i++) {
			if (rcl.pid[i] <= 0 || rcl_master_at(rcl.port[i], slot) < 0)
				continue;
			left = true;
			freeReplyObject(rcl_cmd(rcl.port[i], "CLUSTER DELSLOTS %d", slot));
		}
		if (!left)
			return KVS_TEST_PASS;
		if (kvs_now_ns() > deadline)
			KVS_FAILF("slot %d still served in a node's map after %d ms", slot, ms);
		usleep(50000); /* gossip among external servers: wait, bounded */
	}
}

/* The node id (40 hex) of the node at port, into out[41]. */
static inline kvs_test_rc rcl_id(int port, char *out)
{
	redisReply *rep = rcl_cmd(port, "CLUSTER MYID");

	if (!rep || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
		freeReplyObject(rep);
		KVS_FAILF("CLUSTER MYID on port %d: no id", port);
	}
	memcpy(out, rep->str, 41);
	freeReplyObject(rep);
	return KVS_TEST_PASS;
}

/* The sum over the running nodes of the number after `key` in `INFO section`
 * (e.g. "commandstats", "cmdstat_get:calls="; "errorstats",
 * "errorstat_MOVED:count="); absent counts 0. */
static inline long long rcl_sum(const char *section, const char *key)
{
	long long sum = 0;

	for (int i = 0; i < RCL_NODES; i++) {
		redisReply *rep;
		const char *p;

		if (rcl.pid[i] <= 0)
			continue;
		rep = rcl_cmd(rcl.port[i], "INFO %s", section);
		if (rep && rep->type == REDIS_REPLY_STRING && (p = strstr(rep->str, key)))
			sum += strtoll(p + strlen(key), NULL, 10);
		freeReplyObject(rep);
	}
	return sum;
}

/* The test's oracle of a key's slot: CRC16/XMODEM of the hash tag, as the
 * cluster spec gives it (rcl_check_oracle compares it with the server's). */
static inline int rcl_slot_of_tag(const char *tag)
{
	uint16_t crc = 0;

	for (const char *p = tag; *p; p++) {
		crc ^= (uint16_t)((uint8_t)*p << 8);
		for (int k = 0; k < 8; k++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
	}
	return crc & 16383;
}

static inline void rcl_hex(const struct kvs_block_id *b, char *hex)
{
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", b->bytes[i]);
}

/* The slot of block b's keys (its hex is their hash tag). */
static inline int rcl_slot(const struct kvs_block_id *b)
{
	char hex[33];

	rcl_hex(b, hex);
	return rcl_slot_of_tag(hex);
}

/* The cluster-mode key of (b, shard) under the default prefix. */
static inline void rcl_key(const struct kvs_block_id *b, uint32_t shard, char *out, size_t len)
{
	char hex[33];

	rcl_hex(b, hex);
	snprintf(out, len, "kvshare:{%s}:%u", hex, shard);
}

#endif
