/*
 * numa/place.c — which nodes exist, binding a mapping to one, and the parallel
 * pre-fault that puts every page of a new segment in place.
 *
 * Placement is the creator's job.  mbind() on a hugetlbfs mapping sets the policy
 * of that mapping only (other processes' mappings of the same file know nothing
 * of it), so the pages land where the creator's own faults put them: the creator
 * binds its mapping and then faults every page in, before anyone attaches.  The
 * pre-fault is MADV_POPULATE_WRITE (kernel >= 5.14), which allocates and maps the
 * pages without touching user memory and reports a page the backing cannot supply
 * as EFAULT instead of a SIGBUS; older kernels get one write per page.  Zeroing
 * huge pages is the cost of creation, so it runs in several threads, each pinned
 * to the CPUs of the target node (the zeroing is then node-local too).
 *
 * The kernel build uses libnuma for the node facts (numa_available,
 * numa_all_nodes_ptr, numa_node_to_cpus) and its mbind() wrapper, which returns
 * -1/errno and never prints (numa_tonode_memory would print through numa_error).
 * The plain build has one node as far as it knows and never binds.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if KVS_KERNEL
#include <numa.h>
#include <numaif.h>
#endif

#include "numa/internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi; older libc headers lack it */
#endif

#define PREFAULT_MAX_THREADS KVS_CACHE_PREFAULT_THREADS_MAX
/* Default cap: zeroing pages is bound by the node's memory bandwidth, which a
 * handful of cores fill (PegaFlow's ~30 ms/GB needs ~35 GB/s); more threads on a
 * big node only contend on it. */
#define PREFAULT_DEFAULT_MAX 16

int kvs_numa_test_node_count;

#if KVS_KERNEL

static int real_node_count(void)
{
	int n;

	if (numa_available() < 0)
		return 1;
	n = numa_num_configured_nodes(); /* nodes with memory */
	return n > 0 ? n : 1;
}

bool kvs_numa_node_usable(int32_t node)
{
	if (node < 0 || node >= KVS_NUMA_MAX_NODES || numa_available() < 0)
		return false;
	if (node > numa_max_node())
		return false;
	/* Nodes this task may allocate on (cpuset), with memory. */
	return numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned int)node);
}

int kvs_numa_bind(void *base, uint64_t bytes, int32_t node)
{
	/* Room for KVS_NUMA_MAX_NODES + 1 bits: mbind reads maxnode - 1 bits. */
	unsigned long mask[KVS_NUMA_MAX_NODES / (8 * sizeof(unsigned long)) + 1] = { 0 };
	const unsigned bits = 8 * sizeof(unsigned long);

	if (node < 0 || node >= KVS_NUMA_MAX_NODES)
		return -EINVAL;
	mask[node / bits] |= 1ul << (node % bits);
	if (mbind(base, bytes, MPOL_BIND, mask, KVS_NUMA_MAX_NODES + 1, 0) != 0)
		return -errno;
	return 0;
}

/* The CPUs of node this process may run on; false if none or unknown. */
static bool node_cpus(int32_t node, cpu_set_t *set)
{
	struct bitmask *bm;
	cpu_set_t allowed;
	bool any = false;

	CPU_ZERO(set);
	if (node < 0 || numa_available() < 0)
		return false;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return false;
	bm = numa_allocate_cpumask();
	if (!bm)
		return false;
	if (numa_node_to_cpus(node, bm) == 0) {
		for (unsigned int cpu = 0; cpu < bm->size && cpu < CPU_SETSIZE; cpu++) {
			if (numa_bitmask_isbitset(bm, cpu) && CPU_ISSET(cpu, &allowed)) {
				CPU_SET(cpu, set);
				any = true;
			}
		}
	}
	numa_free_cpumask(bm);
	return any;
}

#else /* plain */

static int real_node_count(void)
{
	return 1;
}

bool kvs_numa_node_usable(int32_t node)
{
	(void)node;
	return false;
}

int kvs_numa_bind(void *base, uint64_t bytes, int32_t node)
{
	(void)base;
	(void)bytes;
	(void)node;
	return -EOPNOTSUPP;
}

static bool node_cpus(int32_t node, cpu_set_t *set)
{
	(void)node;
	CPU_ZERO(set);
	return false;
}

#endif

struct prefault_job {
	char *start;
	size_t len;
	size_t step;
	int rc;
};

static void *prefault_run(void *arg)
{
	struct prefault_job *job = arg;

	job->rc = 0;
	if (madvise(job->start, job->len, MADV_POPULATE_WRITE) == 0)
		return NULL;
	if (errno != EINVAL) {
		job->rc = -errno;
		return NULL;
	}
	/* EINVAL on an aligned range: a kernel before 5.14.  Write each page once; the
	 * segment is new and nobody else maps it yet, so rewriting the byte read is
	 * safe.  A page the backing cannot supply is a SIGBUS here: the hugetlb pool
	 * was reserved at mmap time, which is why that cannot happen there. */
	for (size_t off = 0; off < job->len; off += job->step) {
		volatile char *p = job->start + off;
		*p = *p;
	}
	return NULL;
}

int kvs_numa_prefault(void *base, uint64_t bytes, uint64_t step, int32_t node,
		      uint32_t *nthreads)
{
	uint32_t threads = *nthreads;
	struct prefault_job jobs[PREFAULT_MAX_THREADS];
	pthread_t tids[PREFAULT_MAX_THREADS];
	bool started[PREFAULT_MAX_THREADS];
	pthread_attr_t attr;
	cpu_set_t cpus;
	bool pin = node_cpus(node, &cpus);
	uint64_t pages = step ? bytes / step : 0;
	uint64_t per, first = 0;
	int rc = 0;

	if (!base || pages == 0 || bytes % step != 0)
		return -EINVAL;
	if (threads == 0) {
		long ncpu = pin ? CPU_COUNT(&cpus) : sysconf(_SC_NPROCESSORS_ONLN);
		threads = ncpu > PREFAULT_DEFAULT_MAX ? PREFAULT_DEFAULT_MAX : ncpu > 0 ? (uint32_t)ncpu : 1;
	}
	if (threads > PREFAULT_MAX_THREADS)
		threads = PREFAULT_MAX_THREADS;
	if (threads > pages)
		threads = (uint32_t)pages;
	per = (pages + threads - 1) / threads;
	threads = (uint32_t)((pages + per - 1) / per); /* no thread without pages */

	if (pthread_attr_init(&attr) != 0)
		return -ENOMEM;
	if (pin && pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus) != 0)
		pin = false; /* run unpinned: placement still follows the mbind policy */
	for (uint32_t i = 0; i < threads; i++) {
		uint64_t n = pages - first < per ? pages - first : per;

		jobs[i] = (struct prefault_job){ (char *)base + first * step, n * step, step, 0 };
		first += n;
		started[i] = pthread_create(&tids[i], &attr, prefault_run, &jobs[i]) == 0;
		if (!started[i])
			prefault_run(&jobs[i]); /* out of threads: do this share here */
	}
	pthread_attr_destroy(&attr);
	for (uint32_t i = 0; i < threads; i++) {
		if (started[i])
			pthread_join(tids[i], NULL);
		if (rc == 0 && jobs[i].rc < 0)
			rc = jobs[i].rc;
	}
	*nthreads = threads;
	return rc;
}

int kvs_numa_node_count(void)
{
	return kvs_numa_test_node_count > 0 ? kvs_numa_test_node_count : real_node_count();
}
