/*
 * numa/hugetlb.c — where hugetlbfs is mounted, and how much of its pool is left.
 *
 * The kernel build asks libhugetlbfs for the mount of a page size
 * (hugetlbfs_find_path_for_size: it scanned the mounts when it was loaded); that
 * is the only mount lookup.  Only a creator needs it: the creator records the
 * directory in the cache's header, and attachers of either build (the plain one
 * attaches a kernel creator's hugetlb segments on a mixed node) open the file
 * where the record says, checking with fstatfs that it is on hugetlbfs.  So
 * ranks never disagree on the mount (libhugetlbfs reads HUGETLB_PATH from each
 * process's environment), and the plain build needs no lookup at all.
 *
 * The pool is read from sysfs, per page size, machine-wide
 * (/sys/kernel/mm/hugepages/hugepages-<kB>kB/) or per node
 * (/sys/devices/system/node/node<N>/hugepages/hugepages-<kB>kB/).  Free pages
 * include those reserved by existing mappings (HugePages_Rsvd), which are
 * spoken for: what a new segment can get is free - reserved, plus the surplus
 * the administrator allows (nr_overcommit_hugepages - surplus_hugepages), and on
 * a bound node no more than that node's free pages (reservations are not
 * tracked per node, so the node figure is an upper bound).  The check only
 * produces a clear error before any file exists; the mmap reservation that
 * follows is the authoritative one (segment.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <mntent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if KVS_KERNEL
#include <stddef.h> /* hugetlbfs.h uses size_t without including it */
#include <hugetlbfs.h>
#endif

#include "numa/internal.h"

#if KVS_KERNEL

/* A size as /proc/mounts writes a hugetlbfs pagesize= ("2M", "1G", "64K"). */
static uint64_t size_of(const char *s)
{
	char *end;
	uint64_t x = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': case 'k': return x << 10;
	case 'M': case 'm': return x << 20;
	case 'G': case 'g': return x << 30;
	default: return x;
	}
}

/* The default huge page size (Hugepagesize in /proc/meminfo), 0 if unknown. */
static uint64_t default_page_bytes(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	uint64_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Hugepagesize: %" SCNu64 " kB", &kb) == 1)
			break;
	fclose(f);
	return kb << 10;
}

/* Any hugetlbfs mount of page_bytes pages in /proc/mounts, usable or not. */
static bool mounted_anywhere(uint64_t page_bytes, char *buf, size_t len)
{
	FILE *f = setmntent("/proc/mounts", "re");
	struct mntent *m;
	bool found = false;

	if (!f)
		return false;
	while (!found && (m = getmntent(f))) {
		const char *ps;

		if (strcmp(m->mnt_type, "hugetlbfs") != 0)
			continue;
		ps = hasmntopt(m, "pagesize");
		if ((ps ? size_of(ps + strlen("pagesize=")) : default_page_bytes()) != page_bytes ||
		    strlen(m->mnt_dir) >= len)
			continue;
		strcpy(buf, m->mnt_dir);
		found = true;
	}
	endmntent(f);
	return found;
}

int kvs_numa_hugetlb_dir(uint64_t page_bytes, char *buf, size_t len)
{
	const char *mount;

	if (page_bytes > (uint64_t)LONG_MAX)
		return -ENOENT;
	/* libhugetlbfs returns its own table entry (filled once at load, of the
	 * mounts this process could use then): copy it, and check it still is. */
	mount = hugetlbfs_find_path_for_size((long)page_bytes);
	if (mount && mount[0]) {
		if (strlen(mount) >= len)
			return -ENAMETOOLONG;
		strcpy(buf, mount);
		return access(buf, W_OK | X_OK) == 0 ? 0 : -EACCES;
	}
	return mounted_anywhere(page_bytes, buf, len) ? -EACCES : -ENOENT;
}

#else

int kvs_numa_hugetlb_dir(uint64_t page_bytes, char *buf, size_t len)
{
	(void)page_bytes;
	(void)buf;
	(void)len;
	return -ENOENT;
}

#endif

/* What hugetlb=required adds to the reason it cannot be had: the way out. */
#define REQUIRED_HINT(level) ((level) == KVS_LOG_ERROR ? "; or hugetlb=auto to fall back to /dev/shm" : "")

int kvs_numa_hugetlb_mount(uint64_t page_bytes, char *buf, size_t len, const struct kvs_log *log,
			   int level)
{
	int rc = kvs_numa_hugetlb_dir(page_bytes, buf, len);

	if (rc == -ENOENT)
		kvs_logf(log, level, "numa: no hugetlbfs is mounted for %" PRIu64 " kB pages (as root: "
				     "mount -t hugetlbfs -o pagesize=%" PRIu64 "k none /dev/hugepages)%s",
			 page_bytes >> 10, page_bytes >> 10, REQUIRED_HINT(level));
	else if (rc == -EACCES)
		kvs_logf(log, level, "numa: the hugetlbfs mount %s (%" PRIu64 " kB pages) is not "
				     "writable by uid %u: mount it with uid=, gid= or mode= for the "
				     "ranks' user (the pool is not the problem)%s",
			 buf, page_bytes >> 10, (unsigned)geteuid(), REQUIRED_HINT(level));
	return rc == -ENOENT || rc == -EACCES ? -KVS_ENOHUGE : rc;
}

static int read_u64(const char *dir, const char *name, uint64_t *out)
{
	char path[256], text[32];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	text[n] = '\0';
	*out = strtoull(text, NULL, 10);
	return 0;
}

int kvs_numa_hugetlb_pool(uint64_t page_bytes, int32_t node, struct kvs_numa_pool *pool)
{
	char dir[160];
	uint64_t resv = 0, surplus = 0, overcommit = 0;
	int rc;

	if (!pool)
		return -EINVAL;
	memset(pool, 0, sizeof(*pool));
	if (page_bytes == 0)
		page_bytes = KVS_NUMA_DEFAULT_PAGE_BYTES;
	if (node >= 0)
		snprintf(dir, sizeof(dir), "/sys/devices/system/node/node%d/hugepages/hugepages-%" PRIu64 "kB",
			 (int)node, page_bytes >> 10);
	else
		snprintf(dir, sizeof(dir), "/sys/kernel/mm/hugepages/hugepages-%" PRIu64 "kB",
			 page_bytes >> 10);
	pool->page_bytes = page_bytes;
	rc = read_u64(dir, "nr_hugepages", &pool->total_pages);
	if (rc == 0)
		rc = read_u64(dir, "free_hugepages", &pool->free_pages);
	if (rc == 0)
		rc = read_u64(dir, "surplus_hugepages", &surplus);
	if (rc == 0 && node < 0)
		rc = read_u64(dir, "resv_hugepages", &resv);
	if (rc == 0 && node < 0)
		rc = read_u64(dir, "nr_overcommit_hugepages", &overcommit);
	if (rc < 0)
		return rc;
	pool->reserved_pages = resv;
	pool->overcommit_pages = overcommit > surplus ? overcommit - surplus : 0;
	return 0;
}

int kvs_numa_hugetlb_check(uint64_t page_bytes, int32_t node, uint64_t need,
			   const struct kvs_log *log, int level)
{
	struct kvs_numa_pool all, on_node;
	uint64_t avail;
	int rc;

	rc = kvs_numa_hugetlb_pool(page_bytes, -1, &all);
	if (rc < 0) {
		kvs_log_warn(log, "numa: cannot read the %" PRIu64 " kB hugepage pool: %s",
			     page_bytes >> 10, strerror(-rc));
		return rc == -ENOENT ? -KVS_ENOHUGE : rc;
	}
	avail = all.free_pages > all.reserved_pages ? all.free_pages - all.reserved_pages : 0;
	avail += all.overcommit_pages;
	if (node >= 0) {
		rc = kvs_numa_hugetlb_pool(page_bytes, node, &on_node);
		if (rc < 0) {
			kvs_log_warn(log, "numa: cannot read the %" PRIu64 " kB hugepage pool of node %d: %s",
				     page_bytes >> 10, (int)node, strerror(-rc));
			return rc == -ENOENT ? -KVS_ENOHUGE : rc;
		}
		if (on_node.free_pages < avail)
			avail = on_node.free_pages;
	}
	if (need <= avail)
		return 0;
	if (node >= 0)
		kvs_logf(log, level, "numa: need %" PRIu64 " pages of %" PRIu64 " kB on node %d, %" PRIu64
				     " free: raise the pool (vm.nr_hugepages, or node%d's "
				     "hugepages-%" PRIu64 "kB/nr_hugepages under /sys/devices/system/node)%s",
			 need, page_bytes >> 10, (int)node, avail, (int)node, page_bytes >> 10,
			 REQUIRED_HINT(level));
	else
		kvs_logf(log, level, "numa: need %" PRIu64 " pages of %" PRIu64 " kB on any node, %" PRIu64
				     " free: raise the pool (sysctl vm.nr_hugepages=%" PRIu64 " or more)%s",
			 need, page_bytes >> 10, avail, all.total_pages + (need - avail),
			 REQUIRED_HINT(level));
	return -KVS_ENOHUGE;
}
