/*
 * perf/backend_bench.c — posix backend read throughput and CPU per GiB.
 *
 *   backend_bench write <root> <nblocks> <block_mib> <shard_kib>
 *       dump nblocks blocks of block_mib MiB in shards of shard_kib KiB through
 *       the posix backend, so the files have the backend's names and layout.
 *       A block file's header records its geometry (docs/io.md, "Block
 *       headers") and a backend of another shard size refuses it
 *       (-KVS_ECONFIG): read with the shard_kib it was written with;
 *   backend_bench read <root> <nblocks> <block_mib> <uring|pool> <shard_kib> <qd> <direct> [lookup|hint]
 *       read every shard of every block (block by block, shard by shard) with qd
 *       transfers in flight into qd registered buffers, and print
 *       backend engine=<e> shard_kib=<k> qd=<q> gbps=<..> cpu_ms_per_gib=<..> variant=<v> direct=<d>
 *       mem=<hugetlb|thp>  (the buffers' pages; see main)
 *       With "lookup", every block is first looked up (kvs_backend_lookup, as
 *       the store's kvs_store_lookup_prefix does before a load: the vLLM
 *       connector's scheduler asks it for every request), outside the timed
 *       phase, and the line ends " lookup=1": the load then finds each file's
 *       header page in the page cache, read by the lookup (docs/io.md,
 *       "Benchmark: perf/backend_bench.sh").  With "hint", the submit of a
 *       block's first shard is preceded by kvs_backend_hint_read of the
 *       HINT_AHEAD blocks after it, as the store's dispatcher hints the blocks
 *       of the misses it defers (the backend opens their files ahead: docs/io.md,
 *       "Open-ahead"), and the line ends " hint=1".
 *   backend_bench redis-write <endpoint> <nblocks> <block_mib> <shard_kib>
 *       store the same block set in a Redis-protocol server (the redis backend,
 *       SET per shard, 32 in flight on 4 connections);
 *   backend_bench redis-read <endpoint> <nblocks> <block_mib> <shard_kib> <qd> <conns> <server_pid>
 *       read it back with qd GETs in flight over conns sockets (qd 1: no
 *       pipelining) and print
 *       backend engine=redis shard_kib=<k> qd=<q> gbps=<..> cpu_ms_per_gib=<..> variant=<v>
 *       direct=0 mem=<..> conns=<c> server_cpu_ms_per_gib=<..> sleeps_per_gib=<..>
 *       (server_cpu: the server process's user + system time over the read phase,
 *       from /proc/<server_pid>/stat; the client's is cpu_ms_per_gib as above;
 *       sleeps: the client's voluntary context switches (getrusage ru_nvcsw), i.e.
 *       the times it waited for the server — about one per GET without
 *       pipelining: the round trips, which a shared machine's wall time hides)
 *   An endpoint "cluster:<seeds>" is a Redis Cluster (redis_cluster=1, the
 *   seeds as redis_endpoints; writes and reads alike), its server_pid a
 *   comma-separated list (server_cpu sums them), and the line says
 *   engine=redis-cluster.
 *
 * gbps is 10^9 bytes per second of wall time over the read phase; CPU is this
 * process's user + system time over the same phase (getrusage(RUSAGE_SELF): every
 * thread, io_uring's io-wq workers and the pool's workers included).  The pool
 * gets one worker per queue slot (up to 64) so both engines keep qd reads in
 * flight.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "kvshare.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

static struct kvs_block_id block_of(uint32_t n)
{
	struct kvs_block_id id;

	memset(&id, 0, sizeof(id));
	memcpy(id.bytes, "kvsbench", 8);
	memcpy(id.bytes + 8, &n, sizeof(n));
	return id;
}

static uint64_t sleeps(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_nvcsw;
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * KVS_NSEC_PER_SEC +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

/* user + system time of process pid (ns), from /proc/<pid>/stat; 0 if unknown. */
static uint64_t proc_cpu_ns(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* comm may hold spaces */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			 &st) != 2)
		return 0;
	return (ut + st) * (KVS_NSEC_PER_SEC / (uint64_t)sysconf(_SC_CLK_TCK));
}

/* User + system time of the processes of a comma-separated pid list. */
static uint64_t procs_cpu_ns(const char *pids)
{
	uint64_t sum = 0;

	for (const char *p = pids; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);

		if (end == p)
			break;
		sum += pid > 0 ? proc_cpu_ns(pid) : 0;
		p = *end == ',' ? end + 1 : end;
	}
	return sum;
}

static int fail(const char *what, int rc)
{
	fprintf(stderr, "backend_bench: %s: %s\n", what, kvs_strerror(rc));
	return 1;
}

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "backend_bench: %s\n", msg);
}

/* Blocks hinted ahead of the one whose first shard is submitted ("hint"). */
#define HINT_AHEAD 4u

/* Hint the HINT_AHEAD blocks after block k (those that exist). */
static void hint_after(struct kvs_backend *b, uint32_t k, uint32_t nblocks)
{
	struct kvs_block_id ids[HINT_AHEAD];
	uint32_t n = 0;

	while (n < HINT_AHEAD && k + 1 + n < nblocks) {
		ids[n] = block_of(k + 1 + n);
		n++;
	}
	(void)kvs_backend_hint_read(b, ids, n);
}

/* Keep qd transfers in flight over every shard; a buffer is reused only after
 * its transfer completed (the token is the buffer index).  hint: reads only. */
static int run(struct kvs_backend *b, bool write, bool hint, uint32_t nblocks, uint32_t spb,
	       uint64_t shard_bytes, uint32_t qd, char *bufs)
{
	uint64_t total = (uint64_t)nblocks * spb, next = 0, done = 0;
	struct kvs_backend_completion *c = calloc(qd, sizeof(*c));
	uint32_t *free_slots = calloc(qd, sizeof(*free_slots));
	uint32_t nfree = qd;
	int rc = 0;

	if (!c || !free_slots) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < qd; i++)
		free_slots[i] = qd - 1 - i;
	while (done < total) {
		while (next < total && nfree > 0) {
			uint32_t slot = free_slots[nfree - 1];
			struct kvs_backend_io io = {
				.block = block_of((uint32_t)(next / spb)),
				.shard = (uint32_t)(next % spb),
				.buf = bufs + (size_t)slot * shard_bytes,
				.len = shard_bytes,
				.token = slot,
			};

			if (write)
				kvs_pattern_fill(&io.block, io.shard, 0, io.buf, shard_bytes);
			else if (hint && io.shard == 0)
				hint_after(b, (uint32_t)(next / spb), nblocks);
			rc = write ? kvs_backend_submit_write(b, &io) : kvs_backend_submit_read(b, &io);
			if (rc == -EAGAIN)
				break;
			if (rc < 0)
				goto out;
			nfree--;
			next++;
		}
		int n = kvs_backend_poll(b, c, qd, 10 * KVS_NSEC_PER_SEC);
		if (n <= 0) {
			rc = n < 0 ? n : -ETIMEDOUT;
			goto out;
		}
		for (int i = 0; i < n; i++) {
			if (c[i].result != (int64_t)shard_bytes) {
				rc = c[i].result < 0 ? (int)c[i].result : -EIO;
				goto out;
			}
			free_slots[nfree++] = (uint32_t)c[i].token;
		}
		done += (uint64_t)n;
	}
	rc = 0;
out:
	free(free_slots);
	free(c);
	return rc;
}

int main(int argc, char **argv)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	bool write, lookup = false, hint = false;
	uint32_t nblocks, qd, direct = 0;
	uint64_t block_bytes, shard_bytes;
	const char *engine = "pool";
	char *bufs = NULL;
	int rc;

	bool redis, cluster = false;
	uint32_t conns = 4;
	const char *server_pids = "", *endpoint;

	/* the writes take 4 arguments, the reads 7 */
	if (argc < 2 ||
	    (strcmp(argv[1], "write") && strcmp(argv[1], "read") &&
	     strcmp(argv[1], "redis-write") && strcmp(argv[1], "redis-read")) ||
	    argc < (strstr(argv[1], "read") ? 9 : 6)) {
		fprintf(stderr, "usage: %s write <root> <nblocks> <block_mib> <shard_kib>\n"
				"       %s read <root> <nblocks> <block_mib> <uring|pool> "
				"<shard_kib> <qd> <direct 0|1> [lookup|hint]\n"
				"       %s redis-write <endpoint> <nblocks> <block_mib> <shard_kib>\n"
				"       %s redis-read <endpoint> <nblocks> <block_mib> <shard_kib> <qd> "
				"<conns> <server_pid>\n",
			argv[0], argv[0], argv[0], argv[0]);
		return 2;
	}
	redis = !strncmp(argv[1], "redis-", 6);
	write = !strcmp(argv[1], "write") || !strcmp(argv[1], "redis-write");
	nblocks = (uint32_t)strtoul(argv[3], NULL, 0);
	block_bytes = strtoull(argv[4], NULL, 0) << 20;
	if (redis) {
		engine = "redis";
		shard_bytes = strtoull(argv[5], NULL, 0) << 10;
		qd = write ? 32 : (uint32_t)strtoul(argv[6], NULL, 0);
		if (!write) {
			conns = (uint32_t)strtoul(argv[7], NULL, 0);
			server_pids = argv[8];
		}
	} else {
		shard_bytes = strtoull(argv[write ? 5 : 6], NULL, 0) << 10;
		qd = write ? 32 : (uint32_t)strtoul(argv[7], NULL, 0);
		if (!write) {
			engine = argv[5];
			direct = (uint32_t)strtoul(argv[8], NULL, 0);
			lookup = argc > 9 && !strcmp(argv[9], "lookup");
			hint = argc > 9 && !strcmp(argv[9], "hint");
			if (argc > 9 && !lookup && !hint)
				return fail("the read's last argument (lookup or hint)", -EINVAL);
		}
	}
	if (!nblocks || !shard_bytes || !qd || !conns || block_bytes % shard_bytes)
		return fail("arguments", -EINVAL);

	kvs_backend_config_init(&cfg);
	if (redis) {
		cfg.kind = KVS_BACKEND_REDIS;
		cluster = strncmp(argv[2], "cluster:", 8) == 0;
		endpoint = cluster ? argv[2] + 8 : argv[2];
		snprintf(cfg.redis.endpoints, sizeof(cfg.redis.endpoints), "%s", endpoint);
		cfg.redis.connections = conns;
		cfg.redis.cluster = cluster;
	} else {
		cfg.nroots = 1;
		cfg.roots[0] = argv[2];
	}
	cfg.shard_bytes = shard_bytes;
	cfg.shards_per_block = (uint32_t)(block_bytes / shard_bytes);
	cfg.queue_depth = qd;
	cfg.pool_threads = qd < 64 ? qd : 64;
	cfg.io_engine = !strcmp(engine, "uring") ? KVS_IO_ENGINE_URING : KVS_IO_ENGINE_POOL;
	cfg.flags = direct ? KVS_BACKEND_F_IO_DIRECT : 0;
	cfg.log = log_cb;
	rc = kvs_backend_open(&cfg, &b);
	if (rc < 0)
		return fail("open", rc);
	/* Buffers in huge pages, as the store's data plane (hugetlbfs) and fio's
	 * --mem=mmaphuge: hugetlb when the pool has room, else THP.  With 4 KiB pages a
	 * 1 MiB O_DIRECT read needs 256 segments, over what a virtio disk takes in one
	 * request, and throughput then measures page size, not the engine. */
	size_t buf_bytes = ((size_t)qd * shard_bytes + (1u << 21) - 1) & ~(size_t)((1u << 21) - 1);
	const char *mem = "hugetlb";
	bufs = mmap(NULL, buf_bytes, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
	if (bufs == MAP_FAILED) {
		mem = "thp";
		bufs = mmap(NULL, buf_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0);
		if (bufs == MAP_FAILED)
			return fail("buffers", -ENOMEM);
		madvise(bufs, buf_bytes, MADV_HUGEPAGE);
	}
	memset(bufs, 0, (size_t)qd * shard_bytes);
	struct kvs_backend_buffer reg = { .base = bufs, .len = (uint64_t)qd * shard_bytes };
	rc = kvs_backend_register_buffers(b, &reg, 1);
	if (rc < 0)
		return fail("register_buffers", rc);
	kvs_backend_info(b, &info);

	for (uint32_t n = 0; lookup && n < nblocks; n++) {
		struct kvs_block_id id = block_of(n);

		rc = kvs_backend_lookup(b, &id);
		if (rc != 1)
			return fail("lookup", rc < 0 ? rc : -ENOENT);
	}

	uint64_t t0 = kvs_now_ns(), c0 = cpu_ns(), s0 = procs_cpu_ns(server_pids);
	uint64_t w0 = sleeps();
	rc = run(b, write, hint, nblocks, cfg.shards_per_block, shard_bytes, qd, bufs);
	uint64_t wall = kvs_now_ns() - t0, cpu = cpu_ns() - c0;
	uint64_t server_cpu = procs_cpu_ns(server_pids) - s0;
	uint64_t waits = sleeps() - w0;
	if (rc < 0)
		return fail(write ? "write" : "read", rc);
	kvs_backend_close(b);
	munmap(bufs, buf_bytes);
	if (!write && redis) {
		double bytes = (double)nblocks * (double)block_bytes, gib = bytes / (double)(1u << 30);

		printf("backend engine=%s shard_kib=%llu qd=%u gbps=%.2f cpu_ms_per_gib=%.1f "
		       "variant=%s direct=0 mem=%s conns=%u server_cpu_ms_per_gib=%.1f "
		       "sleeps_per_gib=%.0f\n", cluster ? "redis-cluster" : "redis",
		       (unsigned long long)(shard_bytes >> 10), qd, bytes / (double)wall,
		       (double)cpu / 1e6 / gib, KVS_BENCH_VARIANT, mem, conns,
		       (double)server_cpu / 1e6 / gib, (double)waits / gib);
	} else if (!write) {
		double bytes = (double)nblocks * (double)block_bytes;
		printf("backend engine=%s shard_kib=%llu qd=%u gbps=%.2f cpu_ms_per_gib=%.1f "
		       "variant=%s direct=%u mem=%s%s\n",
		       info.io_engine == KVS_IO_ENGINE_URING ? "uring" : "pool",
		       (unsigned long long)(shard_bytes >> 10), qd, bytes / (double)wall,
		       (double)cpu / 1e6 / (bytes / (double)(1u << 30)), KVS_BENCH_VARIANT, direct,
		       mem, lookup ? " lookup=1" : hint ? " hint=1" : "");
	}
	return 0;
}
