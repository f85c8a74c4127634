/*
 * perf/segment_bench.c — what a data segment costs to create (place + pre-fault)
 * and to attach, by size and backing.  One line per size:
 *
 *   segment variant=<plain|kernel> backing=<hugetlb|shm> gib=<g> create_ms=<..> attach_ms=<..> ms_per_gib=<..>
 *
 * create_ms is kvs_numa_seg_create (open, size, mmap, bind, parallel pre-fault);
 * attach_ms is the median of 5 kvs_numa_seg_attach calls in this process (a second
 * mapping at another address: open, fstat, mmap, no page touched), which should
 * not grow with the size; ms_per_gib = create_ms / gib.  hugetlb runs with
 * hugetlb=required, so a size the pool cannot hold is skipped (said on stderr),
 * never silently measured on /dev/shm.
 *
 * usage: segment_bench [--backing hugetlb|shm] [--gib 0.25,1,2] [--threads N]
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "numa/numa.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define ATTACH_REPS 5

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int bench_one(uint32_t backing, double gib, uint32_t threads)
{
	struct kvs_numa_seg_opts o;
	struct kvs_numa_seg seg, view;
	double attach_ms[ATTACH_REPS];
	char id[64];
	uint64_t bytes = (uint64_t)(gib * (double)(UINT64_C(1) << 30));
	uint64_t t0;
	int rc;

	kvs_numa_seg_opts_init(&o);
	o.hugetlb = backing == KVS_NUMA_BACKING_HUGETLB ? KVS_HUGETLB_REQUIRED : KVS_HUGETLB_OFF;
	o.prefault_threads = threads;
	if (backing == KVS_NUMA_BACKING_HUGETLB) {
		struct kvs_numa_pool pool;
		uint64_t need = (bytes + o.page_bytes - 1) / o.page_bytes;
		char dir[256];

		if (kvs_numa_hugetlb_dir(o.page_bytes, dir, sizeof(dir)) != 0) {
			fprintf(stderr, "segment_bench: backing=hugetlb gib=%g skipped: no writable "
				"hugetlbfs mount for its pages\n", gib);
			return 0;
		}
		if (kvs_numa_hugetlb_pool(o.page_bytes, -1, &pool) != 0 ||
		    pool.free_pages - pool.reserved_pages + pool.overcommit_pages < need) {
			fprintf(stderr, "segment_bench: backing=hugetlb gib=%g skipped: %" PRIu64
				" pages needed, pool has %" PRIu64 " free\n", gib, need,
				pool.free_pages - pool.reserved_pages);
			return 0;
		}
	}
	snprintf(id, sizeof(id), "bench.%s.%d", KVS_BENCH_VARIANT, (int)getpid());
	t0 = kvs_now_ns();
	rc = kvs_numa_seg_create(id, 0, bytes, &o, &seg);
	double create_ms = (double)(kvs_now_ns() - t0) / 1e6;
	if (rc < 0) {
		fprintf(stderr, "segment_bench: backing=%s gib=%g: create: %s\n",
			kvs_numa_backing_name(backing), gib, kvs_strerror(rc));
		return rc == -EOPNOTSUPP || rc == -KVS_ENOHUGE ? 0 : rc;
	}
	for (int i = 0; i < ATTACH_REPS && rc == 0; i++) {
		t0 = kvs_now_ns();
		rc = kvs_numa_seg_attach(id, 0, seg.backing, seg.page_bytes, seg.bytes, &o, &view);
		attach_ms[i] = (double)(kvs_now_ns() - t0) / 1e6;
		kvs_numa_seg_detach(&view);
	}
	backing = seg.backing;
	kvs_numa_seg_detach(&seg);
	kvs_numa_seg_unlink(id, 0, backing, o.page_bytes, NULL);
	if (rc < 0) {
		fprintf(stderr, "segment_bench: attach: %s\n", kvs_strerror(rc));
		return rc;
	}
	qsort(attach_ms, ATTACH_REPS, sizeof(double), cmp_double);
	printf("segment variant=%s backing=%s gib=%g create_ms=%.1f attach_ms=%.3f ms_per_gib=%.1f\n",
	       KVS_BENCH_VARIANT, kvs_numa_backing_name(backing), gib, create_ms,
	       attach_ms[ATTACH_REPS / 2], create_ms / gib);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	uint32_t backing = KVS_NUMA_BACKING_SHM, threads = 0;
	char sizes[256] = "0.25,0.5,1";

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--backing") == 0 && i + 1 < argc) {
			const char *b = argv[++i];
			backing = strcmp(b, "hugetlb") == 0 ? KVS_NUMA_BACKING_HUGETLB :
				  strcmp(b, "shm") == 0     ? KVS_NUMA_BACKING_SHM : 0;
		} else if (strcmp(argv[i], "--gib") == 0 && i + 1 < argc) {
			snprintf(sizes, sizeof(sizes), "%s", argv[++i]);
		} else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
			threads = (uint32_t)atoi(argv[++i]);
		} else {
			backing = 0;
			break;
		}
	}
	if (backing == 0) {
		fprintf(stderr, "usage: %s [--backing hugetlb|shm] [--gib 0.25,1,2] [--threads N]\n",
			argv[0]);
		return 2;
	}
	for (char *save = NULL, *tok = strtok_r(sizes, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		double gib = strtod(tok, NULL);

		if (gib <= 0)
			continue;
		if (bench_one(backing, gib, threads) < 0)
			return 1;
	}
	return 0;
}
