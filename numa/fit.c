/*
 * numa/fit.c — does a new cache fit the machine, before anything is allocated?
 *
 * A creator that maps and pre-faults more than the node can hold is not refused
 * by anything: /dev/shm (tmpfs) is often sized above RAM, so the pre-fault runs
 * into the OOM killer, which may pick any process on the node.  So a creator
 * asks first.  The data segments are placed as segment.c would place them: on
 * hugetlbfs where its mount exists and the pool (per node) has the pages, the
 * rest in /dev/shm (hugetlb=auto falls back; hugetlb=off and the plain build
 * always use it; hugetlb=required refuses a short pool here, with the numbers).
 * What lands in /dev/shm — the control segment always — must fit three limits,
 * each read now and skipped when it cannot be read:
 *
 *   MemAvailable (/proc/meminfo)       the kernel's estimate of what can be had
 *                                      without swapping;
 *   the free space of /dev/shm         tmpfs refuses pages past its size;
 *   the memory cgroup's room           limit - usage: shmem pages are charged
 *                                      to the cgroup of the process that faults
 *                                      them (v2 memory.max, v1 limit_in_bytes).
 *
 * These are estimates taken at one instant (another process may allocate a
 * moment later): they turn a typo into an error, and the pre-fault stays the
 * authoritative test (segment.c: -ENOSPC / -KVS_ENOHUGE after it).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

#include "numa/internal.h"

#define GIB(b) ((double)(b) / (double)(UINT64_C(1) << 30))

/* MemAvailable in bytes, or UINT64_MAX when /proc/meminfo does not say. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	uint64_t kb = UINT64_MAX;

	if (!f)
		return UINT64_MAX;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
			break;
	fclose(f);
	return kb == UINT64_MAX ? kb : kb << 10;
}

/* One number from a file ("max" reads as UINT64_MAX); false when unreadable. */
static bool read_num(const char *path, uint64_t *v)
{
	FILE *f = fopen(path, "re");
	char buf[32];
	bool ok = false;

	if (!f)
		return false;
	if (fgets(buf, sizeof(buf), f)) {
		if (strncmp(buf, "max", 3) == 0) {
			*v = UINT64_MAX;
			ok = true;
		} else {
			ok = sscanf(buf, "%" SCNu64, v) == 1;
		}
	}
	fclose(f);
	return ok;
}

/* limit - usage of this process's memory cgroup, UINT64_MAX when unlimited or
 * unknown.  /proc/self/cgroup names the cgroup: "0::/path" (v2) or
 * "N:memory:/path" (v1, memory controller); the files are under /sys/fs/cgroup. */
static uint64_t cgroup_room(void)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], path[600];
	uint64_t limit = UINT64_MAX, usage = 0;

	if (!f)
		return UINT64_MAX;
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':'), *rel;
		bool v2;

		line[strcspn(line, "\n")] = '\0';
		if (!p)
			continue;
		v2 = strncmp(p, "::", 2) == 0;
		if (!v2 && strncmp(p, ":memory:", 8) != 0)
			continue;
		rel = strchr(p + 1, ':') + 1;
		snprintf(path, sizeof(path), "/sys/fs/cgroup%s%s/%s", v2 ? "" : "/memory", rel,
			 v2 ? "memory.max" : "memory.limit_in_bytes");
		if (!read_num(path, &limit))
			continue;
		snprintf(path, sizeof(path), "/sys/fs/cgroup%s%s/%s", v2 ? "" : "/memory", rel,
			 v2 ? "memory.current" : "memory.usage_in_bytes");
		if (!read_num(path, &usage))
			limit = UINT64_MAX;
		if (!v2)
			break; /* v1's line is the one that counts */
	}
	fclose(f);
	/* v1 writes "unlimited" as a page-rounded LONG_MAX */
	if (limit >= (UINT64_C(1) << 62))
		return UINT64_MAX;
	return limit > usage ? limit - usage : 0;
}

int kvs_numa_room_read(struct kvs_numa_room *r)
{
	struct statvfs vfs;

	if (!r)
		return -EINVAL;
	r->mem_available = mem_available();
	r->shm_free = UINT64_MAX;
	if (statvfs(KVS_NUMA_SHM_DIR, &vfs) == 0 && vfs.f_blocks != 0)
		r->shm_free = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	r->cgroup_room = cgroup_room();
	return 0;
}

/* Would need pages of page_bytes come from the hugetlb pool on node now?
 * Says why not only when log is set (hugetlb=required: an ERROR, the cause of
 * the open's failure, with the fix). */
static bool huge_fits(uint64_t page, int32_t node, uint64_t need, const struct kvs_log *log)
{
	char dir[PATH_MAX];

	return kvs_numa_hugetlb_mount(page, dir, sizeof(dir), log, KVS_LOG_ERROR) == 0 &&
	       kvs_numa_hugetlb_check(page, node, need, log, KVS_LOG_ERROR) == 0;
}

int kvs_numa_fit(uint64_t ctl_bytes, const uint64_t *bytes, const int32_t *nodes, uint32_t n,
		 const struct kvs_numa_seg_opts *opts)
{
	struct kvs_numa_seg_opts o;
	struct kvs_numa_room room;
	uint64_t shm = ctl_bytes, huge = 0, page, limit;
	const char *what;
	int rc;

	if (opts)
		o = *opts;
	else
		kvs_numa_seg_opts_init(&o);
	page = o.page_bytes ? o.page_bytes : KVS_NUMA_DEFAULT_PAGE_BYTES;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t b = (bytes[i] + page - 1) / page * page;
		bool required = o.hugetlb == KVS_HUGETLB_REQUIRED;

		if (KVS_KERNEL && o.hugetlb != KVS_HUGETLB_OFF &&
		    huge_fits(page, nodes[i], b / page, required ? o.log : NULL)) {
			huge += b;
			continue;
		}
		if (KVS_KERNEL && required)
			return -KVS_ENOHUGE;
		shm += b;
	}
	kvs_numa_room_read(&room);
	if (shm > room.mem_available) {
		what = "MemAvailable";
		limit = room.mem_available;
		rc = -ENOMEM;
	} else if (shm > room.cgroup_room) {
		what = "the memory cgroup's limit less its usage";
		limit = room.cgroup_room;
		rc = -ENOMEM;
	} else if (shm > room.shm_free) {
		what = "free space in " KVS_NUMA_SHM_DIR;
		limit = room.shm_free;
		rc = -ENOSPC;
	} else {
		return 0;
	}
	kvs_log_error(o.log, "numa: the cache needs %.2f GiB of memory in " KVS_NUMA_SHM_DIR
		      " (control segment %.2f GiB + data segments %.2f GiB%s), more than the "
		      "%.2f GiB of %s; nothing was allocated",
		      GIB(shm), GIB(ctl_bytes), GIB(shm - ctl_bytes),
		      huge ? ", beside what fits in hugepages" : "", GIB(limit), what);
	return rc;
}
