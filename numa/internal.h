/*
 * numa/internal.h — what the files of numa/ share with each other (not with
 * other modules: they include numa/numa.h).
 *
 *   segment.c  segment files: names, create (with the fallback chain), attach,
 *              detach, unlink, the placement query
 *   hugetlb.c  hugetlbfs mounts and the pool (libhugetlbfs in the kernel build,
 *              /proc/mounts in the plain build; sysfs for the pool)
 *   place.c    nodes, binding (libnuma) and the parallel pre-fault
 *   pci.c      GPU (PCI bus id) -> NUMA node
 *   fit.c      does a new cache fit (memory, /dev/shm, cgroup, hugetlb pool)?
 */
#ifndef KVS_NUMA_INTERNAL_H
#define KVS_NUMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "numa/numa.h"

/* kvs_numa_hugetlb_dir, saying why not at level (KVS_LOG_WARN where /dev/shm
 * is the fallback; KVS_LOG_ERROR for hugetlb=required, with that way out too):
 * no mount (with the mount command) or a mount this user cannot write (naming
 * it), both then -KVS_ENOHUGE; log NULL: quiet.  0, -ENAMETOOLONG otherwise. */
int kvs_numa_hugetlb_mount(uint64_t page_bytes, char *buf, size_t len, const struct kvs_log *log,
			   int level);

/* Can the pool back need pages of page_bytes (on node, or anywhere when node < 0)
 * right now?  Returns 0, or -KVS_ENOHUGE after logging at level (as above)
 * "need N pages of <kB> kB on node X, M free" and how to raise the pool;
 * -errno if sysfs cannot be read. */
int kvs_numa_hugetlb_check(uint64_t page_bytes, int32_t node, uint64_t need,
			   const struct kvs_log *log, int level);

/* May memory be bound to node here (libnuma available, node allowed and with
 * memory)?  Always false in the plain build. */
bool kvs_numa_node_usable(int32_t node);

/* Bind [base, base + bytes) to node (MPOL_BIND).  Returns 0 or -errno;
 * -EOPNOTSUPP in the plain build. */
int kvs_numa_bind(void *base, uint64_t bytes, int32_t node);

/* Fault in every page of [base, base + bytes) for writing, step bytes apart,
 * from up to *threads threads (0: one per CPU of node, at most 16), pinned to the
 * node's CPUs when node >= 0 (kernel build), each over its own contiguous range;
 * *threads becomes the number that ran (never more than the pages).  Returns 0
 * once every page is backed, or the first -errno (-EFAULT: the backing could not
 * supply a page, e.g. the hugetlb pool or /dev/shm ran out). */
int kvs_numa_prefault(void *base, uint64_t bytes, uint64_t step, int32_t node,
		      uint32_t *threads);

#endif
