/*
 * numa/numa.h — data-plane segments: hugetlbfs or /dev/shm files, one per NUMA
 * node, placed and pre-faulted by their creator; attached by path by everyone else.
 *
 * The interface core/ uses.  A segment is one file
 *     <hugetlbfs mount for page_bytes>/kvshare.<unique_id>.data.<node>   (hugetlb)
 *     /dev/shm/kvshare.<unique_id>.data.<node>                          (shm)
 * (node 0 when unbound), mode 0600 by default (0660 + group when configured).
 * The creator decides backing and page size (the fallback chain of
 * docs/numa.md, "Configuration and fallbacks") and records them in the control
 * header; attachers pass them back to attach.
 *
 * Creation (kvs_numa_seg_create) in the kernel build:
 *   1. hugetlb != off: find the hugetlbfs mount for page_bytes (libhugetlbfs) and
 *      check the pool (free - reserved [+ overcommit headroom], and the node's free
 *      pages when bound).  No mount or a short pool is -KVS_ENOHUGE with a log line
 *      "need N pages of 2048 kB on node X, M free"; hugetlb=auto then falls back to
 *      /dev/shm (logged; seg->backing says which one was used).
 *   2. open O_CREAT|O_EXCL|O_NOFOLLOW, fchmod (umask-independent), fchown to the
 *      group, ftruncate to bytes rounded up to page_bytes.
 *   3. mmap MAP_SHARED.  On hugetlbfs this reserves every page of the file from the
 *      pool (the kernel's shared-mapping reservation, tests/numa_hugetlb.c checks
 *      it): a shortage is ENOMEM here, never a SIGBUS later.
 *   4. mbind(MPOL_BIND) the mapping to the node.  On hugetlbfs the policy belongs
 *      to this mapping only, so placement is decided by the creator's own faults;
 *      on shmem it becomes the file's shared policy.
 *   5. pre-fault with MADV_POPULATE_WRITE (touch one byte per page before 5.14)
 *      from prefault_threads threads pinned to the node's CPUs, each populating
 *      its own contiguous range (seg->prefault_ns / _threads say how it went):
 *      create returns only once every page is backed.
 *   Any failure unlinks the file and truncates it first, so no reservation stays.
 * The plain build always uses /dev/shm, never binds, and pre-faults from unpinned
 * threads; hugetlb=required and numa=required are -EOPNOTSUPP there.
 *
 * Attach (kvs_numa_seg_attach) opens O_RDWR|O_NOFOLLOW, refuses a file owned by
 * another uid, checks the size and maps it without touching a page: its cost does
 * not depend on the segment size.  The plain build attaches hugetlb segments made
 * by a kernel-build creator too (a mixed node): it finds the mount in /proc/mounts.
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

/* Directory of shm-backed segments (and of the control files). */
#define KVS_NUMA_SHM_DIR "/dev/shm"

/* Huge page size used when opts->page_bytes is 0. */
#define KVS_NUMA_DEFAULT_PAGE_BYTES (UINT64_C(2) << 20)

struct kvs_numa_seg_opts {
	uint32_t hugetlb;        /* enum kvs_hugetlb_mode (plain build: always shm) */
	uint32_t numa;           /* enum kvs_numa_mode */
	uint64_t page_bytes;     /* wanted huge page size; 0 = 2 MiB */
	uint32_t file_mode;      /* 0 = 0600 (0660 when gid >= 0); else a subset of 0660 */
	int64_t gid;             /* group for 0660 files; -1 = none (NOT 0: use opts_init) */
	uint32_t prefault_threads; /* 1..64; 0 = one per CPU of the node (of the process
				    * when unbound), at most 16 */
	const char *dir;         /* attach: the directory of the file, as its creator
				  * recorded it; NULL = the backing's default (/dev/shm,
				  * or this build's hugetlbfs mount for page_bytes) */
	const struct kvs_log *log;
};

/* Defaults: hugetlb=auto, numa=auto, 2 MiB pages, mode 0600, gid -1, threads 0, no
 * log.  A zeroed struct is NOT the default (gid 0 would mean group root). */
void kvs_numa_seg_opts_init(struct kvs_numa_seg_opts *opts);

/* A mapped segment (process-local; lives in the caller's memory).  Empty when
 * base is NULL (then fd is -1, or 0 in a zeroed struct: detach ignores it). */
struct kvs_numa_seg {
	void *base;
	uint64_t bytes;
	int fd;
	int32_t node;       /* bound node, or KVS_NUMA_NODE_NONE */
	uint32_t backing;   /* enum kvs_numa_backing */
	uint64_t page_bytes; /* huge page size (hugetlb); the base page size (shm) */
	uint64_t prefault_ns;      /* create: wall time of the pre-fault; attach: 0 */
	uint32_t prefault_threads; /* create: threads that pre-faulted it; attach: 0 */
	char path[PATH_MAX];
};

/* Create, size, place on node and pre-fault a new segment of bytes (rounded up
 * to the wanted huge page size in either backing, so the size does not depend on
 * the fallback; seg->bytes says the result).  node: the node to bind to, or
 * KVS_NUMA_NODE_NONE (file suffix 0, no binding).  opts NULL = defaults.
 * Returns 0; -EEXIST if the file exists; -KVS_ENOHUGE (hugetlb=required and no
 * mount or the pool is short: the log says needed and free pages); -EOPNOTSUPP
 * (numa=required and binding impossible; hugetlb=required or numa=required in the
 * plain build); -EINVAL (bad id, node, size or opts); -ENOSPC (/dev/shm full);
 * -errno.  On failure nothing is left behind (no file, no reservation) and seg is
 * empty.
 * Blocks: for the pre-fault, parallel on the node's CPUs (perf/startup_bench.sh
 * measures ms per GiB by thread count).
 * Ownership: seg is the caller's; kvs_numa_seg_detach unmaps it. */
int kvs_numa_seg_create(const char *unique_id, int32_t node, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg);

/* Map an existing segment made by kvs_numa_seg_create with the recorded node
 * (the one passed to create, which names the file; not the creator's seg->node),
 * backing and page size; bytes must match the file (the creator's seg->bytes).
 * Never touches its pages.  opts: only dir, log and gid are used (NULL =
 * defaults): a file owned by another uid is accepted only when gid >= 0 and the
 * file's group is gid (the 0660 + group configuration); a hugetlb file must be
 * on a hugetlbfs of page_bytes pages, wherever opts->dir says it is.
 * Returns 0; -ENOENT (no file, or no hugetlbfs mount for page_bytes); -EACCES
 * (owned by another uid: refused, not mapped; the log names the owner);
 * -KVS_ECORRUPT (size mismatch, not a regular file, not on hugetlbfs of that page
 * size); -EINVAL; -errno.  seg is empty on failure.
 * Blocks: no (open + mmap). */
int kvs_numa_seg_attach(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg);

/* Unmap and close.  Tolerates a zeroed or half-built seg; idempotent. */
void kvs_numa_seg_detach(struct kvs_numa_seg *seg);

/* Remove the segment file (no-op -ENOENT if absent) from the backing's default
 * directory.  Returns 0, -ENOENT, -EINVAL, -errno.  Mappings stay valid until
 * detached; the pages (and their pool reservation) go back when the last one
 * is. */
int kvs_numa_seg_unlink(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, const struct kvs_log *log);

/* The same, in directory dir (as recorded by the creator). */
int kvs_numa_seg_unlink_at(const char *dir, const char *unique_id, int32_t node,
			   const struct kvs_log *log);

/* Remove every segment file of unique_id, whoever recorded it or not: any node's
 * name in /dev/shm, in every hugetlbfs mount of /proc/mounts and in dir (when not
 * NULL: a directory a creator recorded).  For the remover of a cache, who alone
 * may make files of that name while it does this (core/ holds the lifecycle
 * lock), so that a creator killed before it recorded a segment (during its
 * pre-fault) leaves no file behind.  Returns the number removed, or the first
 * failure but -ENOENT (each logged at WARN naming the path) after trying every
 * one.  Blocks: no (one unlink per node and directory, /proc/mounts). */
int kvs_numa_seg_unlink_all(const char *unique_id, const char *dir, const struct kvs_log *log);

/* This build's hugetlbfs mount for page_bytes pages, copied into buf (kernel
 * build: libhugetlbfs).  Returns 0, -ENOENT (no such mount; always in the plain
 * build, which never creates hugetlb segments), -EACCES (one is mounted, its
 * path in buf, but this process cannot write it), -ENAMETOOLONG. */
int kvs_numa_hugetlb_dir(uint64_t page_bytes, char *buf, size_t len);

/* "hugetlb", "shm" or "none": for logs and stats. */
const char *kvs_numa_backing_name(uint32_t backing);

/* NUMA node of a PCI device ("0000:3b:00.0", as CUDA reports it): >= 0, or
 * KVS_NUMA_NODE_NONE when the machine has one node or sysfs says -1; -ENOENT (no
 * such device), -EINVAL (not a PCI bus id), -errno. */
int kvs_numa_node_of_pci(const char *pci_bus_id);

/* Canonical sysfs form of a PCI bus id: lower case, 4-digit domain ("00000000:3B:00.0"
 * and "3b:00.0" both give "0000:3b:00.0").  Returns 0, -EINVAL (malformed),
 * -ENAMETOOLONG (out too small; 13 bytes are enough for a 4-digit domain). */
int kvs_numa_pci_normalize(const char *pci_bus_id, char *out, size_t out_len);

/* Number of NUMA nodes with memory (1 when libnuma is absent or NUMA is off;
 * always 1 in the plain build). */
int kvs_numa_node_count(void);

/* Test hook (static library only): when > 0, kvs_numa_node_count returns this,
 * so tests can make a creator plan several data segments on a one-node machine. */
extern int kvs_numa_test_node_count;

/* Test hook (static library only): when set, a creator calls it with the new
 * segment file's path once the file is sized and mapped (its hugetlb pages
 * reserved), just before the pre-fault: a test kills the creator there. */
extern void (*kvs_numa_test_prefault_hook)(const char *path);

#define KVS_NUMA_MAX_NODES 64

/* Where a segment's pages are, without faulting any in (move_pages query). */
struct kvs_numa_seg_info {
	uint32_t backing;
	uint64_t page_bytes;
	uint64_t resident_bytes;                      /* all nodes: allocated bytes of the file */
	uint64_t node_bytes[KVS_NUMA_MAX_NODES];      /* resident bytes per node */
	/* Sum of node_bytes: the resident pages present in THIS process's page tables
	 * (move_pages cannot see the others).  The creator maps every page it
	 * pre-faults, so there it equals resident_bytes; an attacher that has not
	 * touched a page sees 0 here and the whole file in resident_bytes. */
	uint64_t mapped_bytes;
};

/* Fill info for seg.  Returns 0; -EINVAL (empty seg); -errno (move_pages: ENOSYS
 * on kernels without NUMA support).  Blocks: no (one syscall per 1024 pages). */
int kvs_numa_seg_query(const struct kvs_numa_seg *seg, struct kvs_numa_seg_info *info);

/* The hugetlb pool of one page size (sysfs), machine-wide or for one node. */
struct kvs_numa_pool {
	uint64_t page_bytes;
	uint64_t total_pages;
	uint64_t free_pages;      /* includes reserved ones */
	uint64_t reserved_pages;  /* machine-wide only (the kernel does not split it by node) */
	uint64_t overcommit_pages; /* machine-wide only: surplus pages still allowed */
};

/* Read the pool for page_bytes (0 = 2 MiB), machine-wide (node < 0) or of one
 * node.  Returns 0; -ENOENT (no such page size / node); -errno. */
int kvs_numa_hugetlb_pool(uint64_t page_bytes, int32_t node, struct kvs_numa_pool *pool);

/* Memory a new /dev/shm segment can have now (numa/fit.c); UINT64_MAX where a
 * limit is absent or cannot be read. */
struct kvs_numa_room {
	uint64_t mem_available; /* /proc/meminfo MemAvailable */
	uint64_t shm_free;      /* statvfs(/dev/shm): bytes still free to an unprivileged user */
	uint64_t cgroup_room;   /* this process's memory cgroup: limit - usage */
};

/* Fill r.  Returns 0, or -EINVAL (r NULL).  Blocks: no (a few small files). */
int kvs_numa_room_read(struct kvs_numa_room *r);

/* Would a new cache fit now: its control segment (ctl_bytes, always in /dev/shm)
 * and n data segments of bytes[i] for nodes[i], placed as kvs_numa_seg_create
 * would place them with opts (hugetlbfs where mounted and the pool has the
 * pages, else /dev/shm; NULL = the defaults)?  Returns 0; -ENOMEM (beyond
 * MemAvailable or the memory cgroup's room); -ENOSPC (beyond /dev/shm's free
 * space); -KVS_ENOHUGE (hugetlb=required, a pool short or no mount).  Logs one
 * ERROR line with the numbers.  Allocates nothing; the numbers are estimates of
 * one instant, so the pre-fault of creation stays the authoritative test. */
int kvs_numa_fit(uint64_t ctl_bytes, const uint64_t *bytes, const int32_t *nodes, uint32_t n,
		 const struct kvs_numa_seg_opts *opts);

#endif
