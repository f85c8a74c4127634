/*
 * perf/get_bench.c — cost of the slot protocol's two paths, 1..N processes.
 *
 *   get_bench <hit|miss> <procs> [seconds]
 *
 * hit:  get + release of a READY slot (a resident working set of 1024 keys,
 *       each process walking it from its own offset): the path every rank but
 *       the owner takes for every shard.
 * miss: get of a fresh key (CLOCK victim, re-key), publish READY, release: the
 *       owner's bookkeeping without the backend read, in a cache kept full so
 *       every miss evicts.
 * Processes are forked after the cache exists, start together (a pipe), run for
 * the given time (default 1 s) and report their operation counts.  One line:
 *   get_bench variant=<v> path=<hit|miss> procs=<n> ops_per_s=<all processes>
 *             ns_per_op=<mean time of one operation in one process>
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvshare.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define HIT_KEYS 1024u
#define SLOTS 4096u
#define BATCH 256u

struct result {
	uint64_t ops;
	uint64_t ns;
};

static struct kvs_block_id key(uint64_t n)
{
	struct kvs_block_id b;

	memset(&b, 0, sizeof(b));
	memcpy(b.bytes, &n, sizeof(n));
	return b;
}

static void config(struct kvs_cache_config *cfg, const char *uid)
{
	kvs_cache_config_init(cfg);
	snprintf(cfg->unique_id, sizeof(cfg->unique_id), "%s", uid);
	cfg->slot_bytes = 4096;
	cfg->slot_count = SLOTS;
	cfg->hugetlb = KVS_HUGETLB_OFF; /* the index is measured, not the data plane */
	cfg->local_rank_size = 64;
}

static int one_op(struct kvs_cache *c, int hit, uint64_t n)
{
	struct kvs_block_id b = key(n);
	struct kvs_slot s;
	int rc = kvs_cache_get(c, &b, 0, 0, &s);

	if (rc)
		return rc;
	if (!hit && (s.flags & KVS_SLOT_OWNER))
		rc = kvs_slot_publish_ready(c, &s);
	if (rc == 0)
		rc = kvs_slot_release(c, &s);
	return rc;
}

/* One process: wait for go, run for dur_ns, write its result to wfd. */
static int worker(const char *uid, int hit, unsigned id, uint64_t dur_ns, int rfd, int wfd)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	struct result r = { 0, 0 };
	uint64_t n = hit ? id * 97u : ((uint64_t)id + 1) << 40, t0, end;
	char go;
	int rc;

	config(&cfg, uid);
	rc = kvs_cache_open(&cfg, &c);
	if (rc) {
		fprintf(stderr, "get_bench: open: %s\n", kvs_strerror(rc));
		return 1;
	}
	if (read(rfd, &go, 1) != 1)
		return 1;
	t0 = kvs_now_ns();
	end = t0 + dur_ns;
	do {
		for (unsigned k = 0; k < BATCH; k++, n++) {
			rc = one_op(c, hit, hit ? HIT_KEYS + n % HIT_KEYS : n);
			if (rc) {
				fprintf(stderr, "get_bench: %s\n", kvs_strerror(rc));
				return 1;
			}
		}
		r.ops += BATCH;
	} while (kvs_now_ns() < end);
	r.ns = kvs_now_ns() - t0;
	kvs_cache_close(c);
	return write(wfd, &r, sizeof(r)) == sizeof(r) ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;
	char uid[64];
	int go[2], res[2], hit, procs, rc;
	double secs = 1.0;
	pid_t pids[256];

	if (argc < 3 || (strcmp(argv[1], "hit") && strcmp(argv[1], "miss")) ||
	    (procs = atoi(argv[2])) < 1 || procs > 256) {
		fprintf(stderr, "usage: get_bench <hit|miss> <procs 1..256> [seconds]\n");
		return 2;
	}
	if (argc > 3)
		secs = atof(argv[3]);
	hit = strcmp(argv[1], "hit") == 0;
	snprintf(uid, sizeof(uid), "bench.get.%s.%d", KVS_BENCH_VARIANT, (int)getpid());
	config(&cfg, uid);
	rc = kvs_cache_open(&cfg, &c);
	if (rc) {
		fprintf(stderr, "get_bench: open: %s\n", kvs_strerror(rc));
		return 1;
	}
	/* Fill: the hit set, and (miss) a full cache so every miss evicts. */
	for (uint64_t n = 0; n < (hit ? HIT_KEYS : SLOTS); n++)
		if ((rc = one_op(c, 0, HIT_KEYS + n)) != 0) {
			fprintf(stderr, "get_bench: fill: %s\n", kvs_strerror(rc));
			return 1;
		}
	if (pipe(go) || pipe(res))
		return 1;
	for (int i = 0; i < procs; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(go[1]);
			_exit(worker(uid, hit, (unsigned)i, (uint64_t)(secs * 1e9), go[0], res[1]));
		}
	}
	close(go[0]);
	close(res[1]);
	for (int i = 0; i < procs; i++)
		if (write(go[1], "g", 1) != 1)
			return 1;
	uint64_t ops = 0, max_ns = 0;
	double ns_sum = 0;
	int got = 0;
	struct result r;
	while (read(res[0], &r, sizeof(r)) == sizeof(r)) {
		ops += r.ops;
		max_ns = r.ns > max_ns ? r.ns : max_ns;
		ns_sum += (double)r.ns / (double)r.ops;
		got++;
	}
	for (int i = 0; i < procs; i++)
		waitpid(pids[i], NULL, 0);
	kvs_cache_close(c);
	if (got != procs || max_ns == 0) {
		fprintf(stderr, "get_bench: %d of %d workers reported\n", got, procs);
		return 1;
	}
	printf("get_bench variant=%s path=%s procs=%d ops_per_s=%.0f ns_per_op=%.1f\n",
	       KVS_BENCH_VARIANT, argv[1], procs, (double)ops * 1e9 / (double)max_ns, ns_sum / got);
	return 0;
}
