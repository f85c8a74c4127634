/*
 * perf/open_cost.c — what opening costs the ranks of one node: the creator's
 * open, each attaching rank's open, and the CPU of the whole run (issue 24,
 * item 7: every rank used to register the whole data plane as io_uring fixed
 * buffers inside kvs_store_open).
 *
 * The run.  A posix backend in a fresh directory holds `blocks` blocks of 8
 * shards of 256 KiB, dumped first by a store of their own (durable, then
 * closed).  Then, on a fresh cache of `gib` GiB: rank 0 (a forked process)
 * creates it (open: create and pre-fault the data plane); once it is open,
 * ranks 1..ranks-1 are forked at once and attach (open).  Every rank then loads
 * every shard of every block into its own host buffer (copy_engine host, one
 * task: cold, so each shard is read by one owner and joined or hit by the
 * others), checks every byte and closes.  Prints one line:
 *
 *   open_cost variant=<v> backing=<shm|hugetlb> gib=<g> ranks=<n> blocks=<b>
 *     create_ms=<rank 0's open> attach_ms_mean=<..> attach_ms_max=<..>
 *     load_ms_max=<..> cpu_s=<user+sys of every rank process> wall_s=<..>
 *
 * Exit 1 on any failed call or wrong byte (after saying which).
 *
 * usage: open_cost <root dir> <gib> <ranks> <blocks> <shm|hugetlb>
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvshare.h"

#define SPB 8
#define SHARD (256u << 10)
#define MAX_RANKS 8

struct run {
	const char *root, *backing;
	double gib;
	uint32_t ranks, blocks;
	char uid[64];
};

struct rank_result {
	double open_ms, load_ms;
	int rc;
};

static unsigned char pattern(uint32_t blk, uint32_t shard, uint64_t off)
{
	return (unsigned char)(blk * 131u + shard * 29u + off * 7u + (off >> 12));
}

static struct kvs_block_id block_of(uint32_t i)
{
	struct kvs_block_id id = { { 0 } };

	memcpy(id.bytes, &i, sizeof(i));
	id.bytes[15] = 0x0c;
	return id;
}

static void log_line(void *arg, int level, const char *msg)
{
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "open_cost: rank %d: %s\n", (int)(intptr_t)arg, msg);
}

static int open_rank(const struct run *r, const char *uid, int32_t device, uint32_t ranks,
		     double gib, struct kvs_store **s)
{
	struct kvs_store_config cfg;
	char kv[1024], err[256] = "";
	int rc;

	kvs_store_config_init(&cfg);
	snprintf(kv, sizeof(kv), "unique_id=%s,device_id=%d,local_rank_size=%u,shard_size=256k,"
		 "block_size=2m,cache_buffer_capacity_gb=%g,hugetlb=%s,copy_engine=host,"
		 "backend=posix,io_engine=auto,backend_roots=%s", uid, device, ranks, gib,
		 strcmp(r->backing, "hugetlb") == 0 ? "required" : "off", r->root);
	rc = kvs_store_config_parse(&cfg, kv, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "open_cost: %s: %s\n", kv, err);
		return rc;
	}
	cfg.cache.log = log_line;
	cfg.cache.log_arg = (void *)(intptr_t)device;
	rc = kvs_store_open(&cfg, s);
	if (rc)
		fprintf(stderr, "open_cost: kvs_store_open(%s): %s\n", kv, kvs_strerror(rc));
	return rc;
}

/* Shards [0, n) of the block set, tensors pointing into buf (n x SHARD). */
static void task_of(const struct run *r, unsigned char *buf, struct kvs_store_shard *sh,
		    struct kvs_store_tensor *tv)
{
	for (uint32_t i = 0; i < r->blocks * SPB; i++) {
		tv[i] = (struct kvs_store_tensor){ .addr = (uint64_t)(uintptr_t)(buf + (size_t)i * SHARD) };
		sh[i] = (struct kvs_store_shard){ .block = block_of(i / SPB), .shard = i % SPB,
						  .tensor_count = 1, .tensors = &tv[i] };
	}
}

static int run_task(struct kvs_store *s, const struct kvs_store_shard *sh, uint32_t n, bool dump)
{
	uint64_t task = 0;
	int rc = dump ? kvs_store_dump(s, sh, n, NULL, &task) : kvs_store_load(s, sh, n, &task);

	if (rc == 0)
		rc = kvs_store_wait(s, task, 120 * KVS_NSEC_PER_SEC);
	if (rc)
		fprintf(stderr, "open_cost: %s: %s\n", dump ? "dump" : "load", kvs_strerror(rc));
	return rc;
}

/* The block set into the backend, through a store of its own. */
static int prepare(const struct run *r)
{
	uint32_t n = r->blocks * SPB;
	unsigned char *buf = malloc((size_t)n * SHARD);
	struct kvs_store_shard *sh = calloc(n, sizeof(*sh));
	struct kvs_store_tensor *tv = calloc(n, sizeof(*tv));
	struct kvs_store *s = NULL;
	char uid[80];
	int rc = -ENOMEM;

	if (buf && sh && tv) {
		for (uint32_t i = 0; i < n; i++)
			for (uint64_t o = 0; o < SHARD; o++)
				buf[(size_t)i * SHARD + o] = pattern(i / SPB, i % SPB, o);
		task_of(r, buf, sh, tv);
		snprintf(uid, sizeof(uid), "%s.prep", r->uid);
		rc = open_rank(r, uid, 0, 1, (double)n * SHARD * 2 / (1u << 30), &s);
		if (rc == 0) {
			rc = run_task(s, sh, n, true);
			kvs_store_close(s);
		}
	}
	free(buf);
	free(sh);
	free(tv);
	return rc;
}

/* One rank: open, wait for go (a byte on fd go; -1: none), load, check, close. */
static struct rank_result rank(const struct run *r, int32_t device, int ready, int go)
{
	uint32_t n = r->blocks * SPB;
	struct rank_result res = { 0 };
	unsigned char *buf = malloc((size_t)n * SHARD);
	struct kvs_store_shard *sh = calloc(n, sizeof(*sh));
	struct kvs_store_tensor *tv = calloc(n, sizeof(*tv));
	struct kvs_store *s = NULL;
	uint64_t t0 = kvs_now_ns();
	char c = 0;

	res.rc = buf && sh && tv ? open_rank(r, r->uid, device, r->ranks, r->gib, &s) : -ENOMEM;
	res.open_ms = (double)(kvs_now_ns() - t0) / 1e6;
	if (write(ready, &res, sizeof(res)) != sizeof(res) || res.rc)
		goto out;
	if (go >= 0 && read(go, &c, 1) != 1) {
		res.rc = -EPIPE;
		goto out;
	}
	task_of(r, buf, sh, tv);
	memset(buf, 0, (size_t)n * SHARD);
	t0 = kvs_now_ns();
	res.rc = run_task(s, sh, n, false);
	res.load_ms = (double)(kvs_now_ns() - t0) / 1e6;
	for (uint32_t i = 0; res.rc == 0 && i < n; i++)
		for (uint64_t o = 0; o < SHARD; o++)
			if (buf[(size_t)i * SHARD + o] != pattern(i / SPB, i % SPB, o)) {
				fprintf(stderr, "open_cost: rank %d: block %u shard %u byte %" PRIu64
					" wrong\n", device, i / SPB, i % SPB, o);
				res.rc = -EIO;
				break;
			}
out:
	if (s)
		kvs_store_close(s);
	free(buf);
	free(sh);
	free(tv);
	return res;
}

static pid_t start(const struct run *r, int32_t device, int ready, int go, int result)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct rank_result res = rank(r, device, ready, go);

		_exit(write(result, &res, sizeof(res)) == sizeof(res) && res.rc == 0 ? 0 : 1);
	}
	return pid;
}

int main(int argc, char **argv)
{
	struct run r;
	struct rank_result open_res[MAX_RANKS], done[MAX_RANKS];
	int ready[2], go[2], result[2], bad = 0;
	pid_t pids[MAX_RANKS];
	double att_sum = 0, att_max = 0, load_max = 0;
	struct rusage ru;
	uint64_t t0;

	if (argc != 6) {
		fprintf(stderr, "usage: open_cost <root dir> <gib> <ranks 2..%d> <blocks> <shm|hugetlb>\n",
			MAX_RANKS);
		return 2;
	}
	r = (struct run){ .root = argv[1], .gib = atof(argv[2]), .ranks = (uint32_t)atoi(argv[3]),
			  .blocks = (uint32_t)atoi(argv[4]), .backing = argv[5] };
	if (r.ranks < 2 || r.ranks > MAX_RANKS || r.blocks == 0)
		return 2;
	snprintf(r.uid, sizeof(r.uid), "opencost.%d", (int)getpid());
	if (prepare(&r))
		return 1;
	if (pipe(ready) || pipe(go) || pipe(result))
		return 1;
	t0 = kvs_now_ns();
	/* Rank 0 creates the cache; the others attach once it is open. */
	pids[0] = start(&r, 0, ready[1], go[0], result[1]);
	if (read(ready[0], &open_res[0], sizeof(open_res[0])) != sizeof(open_res[0]) || open_res[0].rc)
		return 1;
	for (uint32_t i = 1; i < r.ranks; i++)
		pids[i] = start(&r, (int32_t)i, ready[1], go[0], result[1]);
	for (uint32_t i = 1; i < r.ranks; i++) {
		if (read(ready[0], &open_res[i], sizeof(open_res[i])) != sizeof(open_res[i]))
			return 1;
		bad |= open_res[i].rc != 0;
		att_sum += open_res[i].open_ms;
		att_max = open_res[i].open_ms > att_max ? open_res[i].open_ms : att_max;
	}
	for (uint32_t i = 0; i < r.ranks; i++) /* every rank open: load at once */
		if (write(go[1], "g", 1) != 1)
			return 1;
	for (uint32_t i = 0; i < r.ranks; i++) {
		int st = 0;

		if (read(result[0], &done[i], sizeof(done[i])) != sizeof(done[i]))
			bad = 1;
		else
			load_max = done[i].load_ms > load_max ? done[i].load_ms : load_max;
		waitpid(pids[i], &st, 0);
		bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	getrusage(RUSAGE_CHILDREN, &ru);
	printf("open_cost variant=%s backing=%s gib=%g ranks=%u blocks=%u create_ms=%.1f "
	       "attach_ms_mean=%.1f attach_ms_max=%.1f load_ms_max=%.1f cpu_s=%.3f wall_s=%.3f\n",
	       KVS_BENCH_VARIANT, r.backing, r.gib, r.ranks, r.blocks, open_res[0].open_ms,
	       att_sum / (r.ranks - 1), att_max, load_max,
	       (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
		       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
	       (double)(kvs_now_ns() - t0) / 1e9);
	return bad;
}
