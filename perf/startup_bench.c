/*
 * perf/startup_bench.c — how fast a node tier becomes usable: the creator's
 * pre-fault by thread count, the time from open to the first served load, and
 * (with a GPU) registration per chunk size and the full time to ready.  One
 * line per result; perf/startup_bench.sh runs it for both variants.
 *
 *   startup_bench prefault --backing hugetlb|shm --gib G --threads 1,2,4 [--reps R]
 *     startup prefault variant=<v> backing=<b> gib=<g> threads=<t> reps=<r>
 *             prefault_ms=<median> ms_per_gib=<..> speedup=<vs the first count>
 *     kvs_numa_seg_create with prefault_threads = t; prefault_ms is the
 *     segment's own record of its pre-fault (seg.prefault_ns: the threads'
 *     wall time, file creation and mapping excluded).  Thread counts are run
 *     interleaved, rep by rep, so a change of machine load hits them alike.
 *     hugetlb runs with hugetlb=required: a size the pool cannot hold is
 *     skipped (said on stderr), never silently measured on /dev/shm.
 *
 *   startup_bench first_load --backing hugetlb|shm --gib G [--threads T]
 *     startup first_load variant=<v> backing=<b> gib=<g> open_ms=<..>
 *             first_load_ms=<..> ready_ms=<..> staged=<0|1>
 *     A creator's kvs_store_open (pre-fault included) with the host copy
 *     engine and the latency backend (0 latency), then one load of one
 *     shard: open_ms, first_load_ms (submit to done, after open), ready_ms
 *     (open returned to registration finished), and whether the first load
 *     went through the staging buffer.
 *
 *   startup_bench register --backing hugetlb|shm --gib G --chunks 1g,4g
 *     startup register variant=<v> backing=<b> gib=<g> chunk=<bytes>
 *             open_ms=<..> ready_ms=<..> register_ms_per_gib=<..>
 *             full_ms_per_gib=<(open + ready) / gib>
 *     The same with copy_engine=cuda: without a CUDA device (or in a build
 *     without the cuda engine) one line "startup register skipped: <why>".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvshare.h"
#include "numa/numa.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define GIB (UINT64_C(1) << 30)
#define MAX_COUNTS 16
#define SHARD_BYTES (UINT64_C(2) << 20)

struct args {
	const char *mode;
	uint32_t backing;          /* KVS_NUMA_BACKING_* */
	double gib;
	uint32_t threads[MAX_COUNTS];
	uint32_t nthreads;
	uint64_t chunks[MAX_COUNTS];
	uint32_t nchunks;
	uint32_t reps;
};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static const char *backing_word(uint32_t b)
{
	return b == KVS_NUMA_BACKING_HUGETLB ? "hugetlb" : "shm";
}

static uint64_t bytes_of(double gib)
{
	return (uint64_t)(gib * (double)GIB);
}

/* Enough free, unreserved pages for bytes (hugetlb)?  Says why not. */
static int pool_fits(uint64_t bytes)
{
	struct kvs_numa_pool pool;
	uint64_t need = (bytes + KVS_NUMA_DEFAULT_PAGE_BYTES - 1) / KVS_NUMA_DEFAULT_PAGE_BYTES;
	char dir[256];

	if (kvs_numa_hugetlb_dir(KVS_NUMA_DEFAULT_PAGE_BYTES, dir, sizeof(dir)) != 0) {
		/* a pool with no mount to take it from (a machine that set
		 * nr_hugepages and mounted nothing) */
		fprintf(stderr, "startup_bench: backing=hugetlb %" PRIu64 " bytes skipped: no "
			"writable 2 MiB hugetlbfs mount\n", bytes);
		return 0;
	}
	if (kvs_numa_hugetlb_pool(0, -1, &pool) != 0 ||
	    pool.free_pages - pool.reserved_pages + pool.overcommit_pages < need) {
		fprintf(stderr, "startup_bench: backing=hugetlb %" PRIu64 " bytes skipped: %" PRIu64
			" pages needed, the pool has %" PRIu64 " free\n", bytes, need,
			pool.free_pages - pool.reserved_pages);
		return 0;
	}
	return 1;
}

/* One pre-fault of bytes with threads threads: its ms, or < 0 (skip). */
static double prefault_once(const struct args *a, uint32_t threads)
{
	struct kvs_numa_seg_opts o;
	struct kvs_numa_seg seg;
	char id[64];
	double ms;
	int rc;

	kvs_numa_seg_opts_init(&o);
	o.hugetlb = a->backing == KVS_NUMA_BACKING_HUGETLB ? KVS_HUGETLB_REQUIRED : KVS_HUGETLB_OFF;
	o.prefault_threads = threads;
	snprintf(id, sizeof(id), "bench.startup.%s.%d", KVS_BENCH_VARIANT, (int)getpid());
	rc = kvs_numa_seg_create(id, 0, bytes_of(a->gib), &o, &seg);
	if (rc < 0) {
		fprintf(stderr, "startup_bench: prefault backing=%s gib=%g threads=%u: %s\n",
			backing_word(a->backing), a->gib, threads, kvs_strerror(rc));
		return -1;
	}
	ms = (double)seg.prefault_ns / 1e6;
	kvs_numa_seg_unlink(id, 0, seg.backing, seg.page_bytes, NULL);
	kvs_numa_seg_detach(&seg); /* the pages go back with the last mapping */
	return ms;
}

static int run_prefault(const struct args *a)
{
	double ms[MAX_COUNTS][64], first = 0;

	if (a->backing == KVS_NUMA_BACKING_HUGETLB && (!KVS_KERNEL || !pool_fits(bytes_of(a->gib))))
		return 0;
	for (uint32_t r = 0; r < a->reps; r++) {
		for (uint32_t i = 0; i < a->nthreads; i++) {
			ms[i][r] = prefault_once(a, a->threads[i]);
			if (ms[i][r] < 0)
				return 0;
		}
	}
	for (uint32_t i = 0; i < a->nthreads; i++) {
		double med;

		qsort(ms[i], a->reps, sizeof(double), cmp_double);
		med = ms[i][a->reps / 2];
		if (i == 0)
			first = med;
		printf("startup prefault variant=%s backing=%s gib=%g threads=%u reps=%u prefault_ms=%.1f "
		       "ms_per_gib=%.1f speedup=%.2f\n", KVS_BENCH_VARIANT, backing_word(a->backing),
		       a->gib, a->threads[i], a->reps, med, med / a->gib, med > 0 ? first / med : 0.0);
	}
	return 0;
}

/* A creator's store over gib GiB of 2 MiB shards, latency backend. */
static void store_cfg(const struct args *a, struct kvs_store_config *cfg, uint32_t copy_engine,
		      uint32_t threads)
{
	kvs_store_config_init(cfg);
	snprintf(cfg->cache.unique_id, sizeof(cfg->cache.unique_id), "bench.startup.%s.%d",
		 KVS_BENCH_VARIANT, (int)getpid());
	cfg->cache.device_id = 0;
	cfg->cache.slot_bytes = SHARD_BYTES;
	cfg->cache.slot_count = bytes_of(a->gib) / SHARD_BYTES;
	cfg->cache.hugetlb = a->backing == KVS_NUMA_BACKING_HUGETLB ? KVS_HUGETLB_REQUIRED
								    : KVS_HUGETLB_OFF;
	cfg->cache.prefault_threads = threads;
	cfg->backend.kind = KVS_BACKEND_LATENCY;
	cfg->backend.latency_ns = 0;
	cfg->copy_engine = copy_engine;
}

static int run_first_load(const struct args *a)
{
	struct kvs_store_config cfg;
	struct kvs_store_stats st;
	struct kvs_store_tensor tn;
	struct kvs_store_shard sh;
	struct kvs_store *s;
	uint64_t t0, t1, t2, t3, task;
	unsigned char *buf = malloc(SHARD_BYTES);
	int rc;

	if (!buf)
		return -ENOMEM;
	if (a->backing == KVS_NUMA_BACKING_HUGETLB && (!KVS_KERNEL || !pool_fits(bytes_of(a->gib)))) {
		free(buf);
		return 0;
	}
	store_cfg(a, &cfg, KVS_COPY_ENGINE_HOST, a->nthreads ? a->threads[0] : 0);
	t0 = kvs_now_ns();
	rc = kvs_store_open(&cfg, &s);
	t1 = kvs_now_ns();
	if (rc) {
		fprintf(stderr, "startup_bench: first_load: kvs_store_open: %s\n", kvs_strerror(rc));
		free(buf);
		return rc;
	}
	memset(&sh, 0, sizeof(sh));
	sh.block.bytes[0] = 1;
	sh.tensor_count = 1;
	sh.tensors = &tn;
	tn = (struct kvs_store_tensor){ .addr = (uint64_t)(uintptr_t)buf };
	rc = kvs_store_load(s, &sh, 1, &task);
	if (rc == 0)
		rc = kvs_store_wait(s, task, 60ull * KVS_NSEC_PER_SEC);
	t2 = kvs_now_ns();
	if (rc == 0) {
		rc = kvs_store_ready(s, 600ull * KVS_NSEC_PER_SEC);
		rc = rc == 1 ? 0 : rc == 0 ? -ETIMEDOUT : rc;
	}
	t3 = kvs_now_ns();
	if (rc == 0)
		rc = kvs_store_stats(s, kvs_cache_rank(kvs_store_cache(s)), &st);
	kvs_store_close(s);
	free(buf);
	if (rc) {
		fprintf(stderr, "startup_bench: first_load: %s\n", kvs_strerror(rc));
		return rc;
	}
	printf("startup first_load variant=%s backing=%s gib=%g open_ms=%.1f first_load_ms=%.3f "
	       "ready_ms=%.1f staged=%d\n", KVS_BENCH_VARIANT, backing_word(a->backing), a->gib,
	       (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, (double)(t3 - t1) / 1e6,
	       st.staged_shards > 0);
	return 0;
}

static int run_register(const struct args *a)
{
	if (a->backing == KVS_NUMA_BACKING_HUGETLB && (!KVS_KERNEL || !pool_fits(bytes_of(a->gib))))
		return 0;
	for (uint32_t i = 0; i < a->nchunks; i++) {
		struct kvs_store_config cfg;
		struct kvs_store_stats st;
		struct kvs_store *s;
		uint64_t t0, t1, t2;
		int rc;

		store_cfg(a, &cfg, KVS_COPY_ENGINE_CUDA, a->nthreads ? a->threads[0] : 0);
		cfg.register_chunk_bytes = a->chunks[i];
		t0 = kvs_now_ns();
		rc = kvs_store_open(&cfg, &s);
		t1 = kvs_now_ns();
		if (rc == -ENODEV || rc == -EOPNOTSUPP) {
			printf("startup register skipped: no CUDA device or cuda engine in this %s build "
			       "(%s)\n", KVS_BENCH_VARIANT, kvs_strerror(rc));
			return 0;
		}
		if (rc) {
			fprintf(stderr, "startup_bench: register: kvs_store_open: %s\n", kvs_strerror(rc));
			return rc;
		}
		rc = kvs_store_ready(s, 3600ull * KVS_NSEC_PER_SEC);
		t2 = kvs_now_ns();
		rc = rc == 1 ? kvs_store_stats(s, kvs_cache_rank(kvs_store_cache(s)), &st)
			     : rc == 0 ? -ETIMEDOUT : rc;
		kvs_store_close(s);
		if (rc) {
			fprintf(stderr, "startup_bench: register chunk=%" PRIu64 ": %s\n", a->chunks[i],
				kvs_strerror(rc));
			return rc;
		}
		printf("startup register variant=%s backing=%s gib=%g chunk=%" PRIu64 " open_ms=%.1f "
		       "ready_ms=%.1f register_ms_per_gib=%.1f full_ms_per_gib=%.1f\n", KVS_BENCH_VARIANT,
		       backing_word(a->backing), a->gib, a->chunks[i], (double)(t1 - t0) / 1e6,
		       (double)(t2 - t1) / 1e6, st.register_ms_per_gib,
		       (double)(t2 - t0) / 1e6 / a->gib);
	}
	return 0;
}

/* "1,2,4" or "1g,4g" into out[] (sizes: k/m/g suffixes). */
static int parse_list(const char *s, uint64_t *out, uint32_t *n, int sizes)
{
	*n = 0;
	while (*s && *n < MAX_COUNTS) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);

		if (end == s)
			return -EINVAL;
		if (sizes && (*end == 'k' || *end == 'm' || *end == 'g')) {
			v <<= *end == 'k' ? 10 : *end == 'm' ? 20 : 30;
			end++;
		}
		out[(*n)++] = v;
		if (*end == ',')
			end++;
		else if (*end)
			return -EINVAL;
		s = end;
	}
	return *n ? 0 : -EINVAL;
}

static int usage(void)
{
	fprintf(stderr, "usage: startup_bench prefault|first_load|register --backing hugetlb|shm "
			"--gib G [--threads 1,2,4] [--reps R] [--chunks 1g,4g]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct args a = { .backing = KVS_NUMA_BACKING_SHM, .gib = 1, .reps = 3 };
	uint64_t list[MAX_COUNTS];
	int rc = 0;

	if (argc < 2)
		return usage();
	a.mode = argv[1];
	a.chunks[0] = UINT64_C(4) << 30;
	a.nchunks = 1;
	for (int i = 2; i + 1 < argc && rc == 0; i += 2) {
		if (strcmp(argv[i], "--backing") == 0 && strcmp(argv[i + 1], "hugetlb") == 0)
			a.backing = KVS_NUMA_BACKING_HUGETLB;
		else if (strcmp(argv[i], "--backing") == 0 && strcmp(argv[i + 1], "shm") == 0)
			a.backing = KVS_NUMA_BACKING_SHM;
		else if (strcmp(argv[i], "--gib") == 0)
			a.gib = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--reps") == 0)
			a.reps = (uint32_t)atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--threads") == 0 &&
			 (rc = parse_list(argv[i + 1], list, &a.nthreads, 0)) == 0)
			for (uint32_t k = 0; k < a.nthreads; k++)
				a.threads[k] = (uint32_t)list[k];
		else if (strcmp(argv[i], "--chunks") == 0)
			rc = parse_list(argv[i + 1], a.chunks, &a.nchunks, 1);
		else if (rc == 0)
			return usage();
	}
	if (rc || a.gib <= 0 || a.reps < 1 || a.reps > 64 || (argc % 2) != 0)
		return usage();
	if (strcmp(a.mode, "prefault") == 0) {
		if (!a.nthreads)
			return usage();
		rc = run_prefault(&a);
	} else if (strcmp(a.mode, "first_load") == 0) {
		rc = run_first_load(&a);
	} else if (strcmp(a.mode, "register") == 0) {
		rc = run_register(&a);
	} else {
		return usage();
	}
	return rc < 0 ? 1 : 0;
}
