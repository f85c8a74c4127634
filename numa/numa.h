/*
 * numa/numa.h — data-plane segments: hugetlbfs or /dev/shm files, one per NUMA
 * node, placed and pre-faulted by their creator; attached by path by everyone else.
 *
 * The interface core/ uses.  A segment is one file
 *     <hugetlbfs mount for page_bytes>/kvshare.<unique_id>.data.<node>   (hugetlb)
 *     /dev/shm/kvshare.<unique_id>.data.<node>                          (shm)
 * (node 0 when unbound), mode 0600 by default (0660 + group when configured).
 * The creator decides backing and page size (DESIGN.md §7 fallback chain) and
 * records them in the control header; attachers pass them back to attach.
 */
#ifndef KVS_NUMA_NUMA_H
#define KVS_NUMA_NUMA_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/log.h"
#include "kvshare.h"

enum kvs_numa_backing {
	KVS_NUMA_BACKING_NONE = 0,
	KVS_NUMA_BACKING_HUGETLB = 1, /* hugetlbfs file, pages from the pool */
	KVS_NUMA_BACKING_SHM = 2,     /* /dev/shm file (+ MADV_HUGEPAGE) */
};

#define KVS_NUMA_NODE_NONE (-1)

struct kvs_numa_seg_opts {
	uint32_t hugetlb;        /* enum kvs_hugetlb_mode (plain build: always shm) */
	uint32_t numa;           /* enum kvs_numa_mode */
	uint64_t page_bytes;     /* wanted huge page size; 0 = 2 MiB */
	uint32_t file_mode;      /* 0 = 0600 */
	int64_t gid;             /* group for 0660 files; -1 = none */
	uint32_t prefault_threads; /* 0 = one per CPU of the node, at most 8 */
	const struct kvs_log *log;
};

/* A mapped segment (process-local; lives in the caller's memory). */
struct kvs_numa_seg {
	void *base;
	uint64_t bytes;
	int fd;
	int32_t node;       /* bound node, or KVS_NUMA_NODE_NONE */
	uint32_t backing;   /* enum kvs_numa_backing */
	uint64_t page_bytes;
	char path[PATH_MAX];
};

/* Create, size, place on node and pre-fault a new segment of bytes (rounded up
 * to the page size; seg->bytes says the result).  Returns 0; -EEXIST if the file
 * exists; -KVS_ENOHUGE (hugetlb=required and the pool is short: the log says
 * needed and free pages); -EOPNOTSUPP (numa=required and binding impossible);
 * -errno.  On failure nothing is left behind (no file, no reservation).
 * Blocks: for the pre-fault, parallel on the node's CPUs. */
int kvs_numa_seg_create(const char *unique_id, int32_t node, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg);

/* Map an existing segment made by kvs_numa_seg_create with the recorded node,
 * backing and page size; bytes must match the file.  Never touches its pages.
 * Returns 0; -ENOENT; -EACCES (owned by another uid: refused, not opened);
 * -KVS_ECORRUPT (size mismatch); -errno. */
int kvs_numa_seg_attach(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg);

/* Unmap and close.  Tolerates a zeroed or half-built seg; idempotent. */
void kvs_numa_seg_detach(struct kvs_numa_seg *seg);

/* Remove the segment file (no-op -ENOENT if absent). */
int kvs_numa_seg_unlink(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, const struct kvs_log *log);

/* NUMA node of a PCI device ("0000:3b:00.0", as CUDA reports it): >= 0, or
 * KVS_NUMA_NODE_NONE when the machine has one node or sysfs says -1; -errno. */
int kvs_numa_node_of_pci(const char *pci_bus_id);

/* Number of NUMA nodes with memory (1 when libnuma is absent or NUMA is off). */
int kvs_numa_node_count(void);

#define KVS_NUMA_MAX_NODES 64

/* Where a segment's pages are, without faulting any in (move_pages query). */
struct kvs_numa_seg_info {
	uint32_t backing;
	uint64_t page_bytes;
	uint64_t resident_bytes;                      /* all nodes */
	uint64_t node_bytes[KVS_NUMA_MAX_NODES];      /* resident bytes per node */
};

int kvs_numa_seg_query(const struct kvs_numa_seg *seg, struct kvs_numa_seg_info *info);

#endif
