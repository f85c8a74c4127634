/*
 * numa/segment.c — the data-plane segment files: naming, creation with the
 * fallback chain, attach, detach, unlink and the placement query.
 *
 * A segment is a file so that unrelated processes find it by name and map it
 * wherever their address space has room: nothing in it may be a pointer.  Its
 * name is built only from a checked unique_id and a node number, never from an
 * unchecked string.  The creator owns the whole lifecycle of a new file
 * (O_CREAT|O_EXCL decides who that is): mode and group are set with fchmod /
 * fchown so the umask does not matter, the size is the request rounded up to the
 * huge page size (in either backing, so the slot arithmetic of core/ does not
 * depend on which backing won), then mmap, bind, pre-fault (place.c).  Any
 * failure after the file exists truncates it to zero (giving back a hugetlb
 * reservation even if someone opened the file meanwhile) and unlinks it.
 *
 * Fallback chain (docs/numa.md, "Configuration and fallbacks"), kernel build:
 * hugetlb=off -> shm; otherwise try hugetlbfs; with hugetlb=auto any failure
 * but -EEXIST / -EINVAL (no mount, pool short, reservation or pre-fault
 * refused, mount not writable) is logged and the segment is made in /dev/shm
 * instead; seg->backing tells the caller, who reports it in stats.
 * hugetlb=required returns the hugetlbfs error (-KVS_ENOHUGE for anything about
 * the pool or the mount).
 *
 * Attach checks ownership before mapping (a segment of another uid is refused:
 * KV bytes are users' prompts), then the size (a truncated or foreign file is
 * -KVS_ECORRUPT), and maps without touching a page.
 *
 * The query counts the file's allocated blocks (st_blocks: every page it holds,
 * whoever faulted it) and asks move_pages(2) with a NULL node list where the
 * pages this process has mapped are: that reads page tables and never faults.
 * It is the raw syscall in both builds (libnuma's numa_move_pages is the same
 * call, and the plain build must not link libnuma).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <mntent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "numa/internal.h"

#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6 /* <linux/magic.h> */
#endif


void (*kvs_numa_test_prefault_hook)(const char *path);

#define ID_MAX 64
#define QUERY_BATCH 1024
#define MAX_PAGE_BYTES (UINT64_C(16) << 30)

static void seg_reset(struct kvs_numa_seg *seg)
{
	memset(seg, 0, sizeof(*seg));
	seg->fd = -1;
	seg->node = KVS_NUMA_NODE_NONE;
}

void kvs_numa_seg_opts_init(struct kvs_numa_seg_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->hugetlb = KVS_HUGETLB_AUTO;
	opts->numa = KVS_NUMA_AUTO;
	opts->page_bytes = KVS_NUMA_DEFAULT_PAGE_BYTES;
	opts->gid = -1;
}

const char *kvs_numa_backing_name(uint32_t backing)
{
	switch (backing) {
	case KVS_NUMA_BACKING_HUGETLB: return "hugetlb";
	case KVS_NUMA_BACKING_SHM: return "shm";
	default: return "none";
	}
}

/* Copy opts (or the defaults) into out and check every field. */
static int opts_resolve(const struct kvs_numa_seg_opts *in, struct kvs_numa_seg_opts *out)
{
	if (in)
		*out = *in;
	else
		kvs_numa_seg_opts_init(out);
	if (out->page_bytes == 0)
		out->page_bytes = KVS_NUMA_DEFAULT_PAGE_BYTES;
	if (out->hugetlb > KVS_HUGETLB_OFF || out->numa > KVS_NUMA_REQUIRED)
		return -EINVAL;
	if (out->page_bytes < 4096 || out->page_bytes > MAX_PAGE_BYTES ||
	    (out->page_bytes & (out->page_bytes - 1)) != 0)
		return -EINVAL;
	if (out->gid < -1 || out->gid >= (int64_t)UINT32_MAX)
		return -EINVAL;
	if (out->file_mode == 0)
		out->file_mode = out->gid >= 0 ? 0660 : 0600;
	/* Owner read-write always; group at most read-write; never others. */
	if ((out->file_mode & ~0660u) != 0 || (out->file_mode & 0600u) != 0600u)
		return -EINVAL;
	return 0;
}

/* unique_id is validated by core/; this only makes sure it cannot leave the
 * directory whatever it is. */
static int check_id(const char *id)
{
	size_t n;

	if (!id)
		return -EINVAL;
	n = strnlen(id, ID_MAX + 1);
	if (n == 0 || n > ID_MAX || strchr(id, '/') || strstr(id, ".."))
		return -EINVAL;
	return 0;
}

static int seg_path_in(char *buf, size_t len, const char *dir, const char *id, int32_t node)
{
	int rc = check_id(id), n;

	if (rc < 0)
		return rc;
	if (!dir || dir[0] != '/' || node < KVS_NUMA_NODE_NONE || node >= KVS_NUMA_MAX_NODES)
		return -EINVAL;
	n = snprintf(buf, len, "%s/kvshare.%s.data.%d", dir, id, node < 0 ? 0 : (int)node);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return 0;
}

/* The path in dir, or without one in the backing's default directory. */
static int seg_path(char *buf, size_t len, const char *dir, const char *id, int32_t node,
		    uint32_t backing, uint64_t page_bytes)
{
	char mount[PATH_MAX];

	if (!dir && backing == KVS_NUMA_BACKING_HUGETLB) {
		int rc = kvs_numa_hugetlb_dir(page_bytes ? page_bytes : KVS_NUMA_DEFAULT_PAGE_BYTES,
					      mount, sizeof(mount));
		if (rc < 0)
			return rc;
		dir = mount;
	} else if (!dir && backing == KVS_NUMA_BACKING_SHM) {
		dir = KVS_NUMA_SHM_DIR;
	} else if (backing != KVS_NUMA_BACKING_HUGETLB && backing != KVS_NUMA_BACKING_SHM) {
		return -EINVAL;
	}
	return seg_path_in(buf, len, dir, id, node);
}

static uint64_t base_page_bytes(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (uint64_t)p : 4096;
}

/* The node to bind to: node, KVS_NUMA_NODE_NONE, or -EOPNOTSUPP (numa=required). */
static int32_t decide_node(int32_t node, const struct kvs_numa_seg_opts *o)
{
	if (o->numa == KVS_NUMA_OFF)
		return KVS_NUMA_NODE_NONE;
	if (node >= 0 && kvs_numa_node_usable(node))
		return node;
	if (o->numa == KVS_NUMA_REQUIRED) {
		kvs_log_error(o->log, "numa: numa=required but memory cannot be bound to node %d "
			      "(%s)", (int)node,
			      !KVS_KERNEL ? "the plain build never binds" :
			      node < 0 ? "no node given" : "no libnuma, node absent or not allowed");
		return -EOPNOTSUPP;
	}
	if (node >= 0)
		kvs_log_info(o->log, "numa: cannot bind to node %d (%s): segment left unbound", (int)node,
			     !KVS_KERNEL ? "plain build" : "no libnuma, node absent or not allowed");
	return KVS_NUMA_NODE_NONE;
}

/* The new file: exclusive, group and mode set (umask-independent), sized. */
static int create_file(const char *path, uint64_t bytes, const struct kvs_numa_seg_opts *o, int *fdp)
{
	int fd = kvs_fd_above_stdio(open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)), rc;

	if (fd < 0) {
		rc = -errno;
		if (rc != -EEXIST)
			kvs_log_warn(o->log, "numa: create %s: %s", path, strerror(-rc));
		return rc;
	}
	*fdp = fd;
	if (o->gid >= 0 && fchown(fd, (uid_t)-1, (gid_t)o->gid) != 0) {
		rc = -errno;
		kvs_log_error(o->log, "numa: %s: group %" PRId64 ": %s", path, o->gid, strerror(-rc));
		return rc;
	}
	if (fchmod(fd, (mode_t)o->file_mode) != 0 || ftruncate(fd, (off_t)bytes) != 0) {
		rc = -errno;
		kvs_log_error(o->log, "numa: %s: mode/size: %s", path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* mmap the new file.  On hugetlbfs a shared mapping reserves every page of the
 * range here: a short pool is -KVS_ENOHUGE now, never a SIGBUS later. */
static int map_new(int fd, uint64_t bytes, bool huge, uint64_t page, const char *path,
		   const struct kvs_numa_seg_opts *o, void **basep)
{
	void *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int rc;

	if (base != MAP_FAILED) {
		*basep = base;
		return 0;
	}
	rc = -errno;
	if (huge && rc == -ENOMEM) {
		kvs_log_warn(o->log, "numa: need %" PRIu64 " pages of %" PRIu64 " kB: the pool "
			     "refused the reservation", bytes / page, page >> 10);
		return -KVS_ENOHUGE;
	}
	kvs_log_error(o->log, "numa: mmap %s: %s", path, strerror(-rc));
	return rc;
}

/* Bind the mapping to *node (numa=auto: a failure leaves it unbound, *node
 * becomes KVS_NUMA_NODE_NONE), then pre-fault every page from the node; how
 * long that took and with how many threads goes to seg. */
static int place_new(void *base, uint64_t bytes, bool huge, uint64_t page, const char *path,
		     int32_t *node, const struct kvs_numa_seg_opts *o, struct kvs_numa_seg *seg)
{
	uint32_t threads = o->prefault_threads;
	uint64_t t0;
	int rc;

	if (*node >= 0) {
		rc = kvs_numa_bind(base, bytes, *node);
		if (rc < 0 && o->numa == KVS_NUMA_REQUIRED) {
			kvs_log_error(o->log, "numa: mbind to node %d: %s", (int)*node, strerror(-rc));
			return -EOPNOTSUPP;
		}
		if (rc < 0) {
			kvs_log_info(o->log, "numa: mbind to node %d: %s: segment left unbound",
				     (int)*node, strerror(-rc));
			*node = KVS_NUMA_NODE_NONE;
		}
	}
	/* Transparent huge pages for shmem, where the administrator allows them
	 * (shmem_enabled=advise or above); without THP it is only a hint. */
	if (!huge)
		(void)madvise(base, bytes, MADV_HUGEPAGE);
	if (kvs_numa_test_prefault_hook)
		kvs_numa_test_prefault_hook(path);
	t0 = kvs_now_ns();
	rc = kvs_numa_prefault(base, bytes, page, *node, &threads);
	seg->prefault_ns = kvs_now_ns() - t0;
	seg->prefault_threads = threads;
	if (rc == 0)
		return 0;
	if (huge && (rc == -EFAULT || rc == -ENOMEM)) {
		kvs_log_warn(o->log, "numa: need %" PRIu64 " pages of %" PRIu64 " kB on node %d: "
			     "pre-fault failed (%s)", bytes / page, page >> 10, (int)*node, strerror(-rc));
		return -KVS_ENOHUGE;
	}
	if (rc == -EFAULT) {
		kvs_log_error(o->log, "numa: %s: " KVS_NUMA_SHM_DIR " cannot hold %" PRIu64 " bytes", path, bytes);
		return -ENOSPC;
	}
	kvs_log_error(o->log, "numa: pre-fault %s: %s", path, strerror(-rc));
	return rc;
}

/* Create the segment file in one backing.  bind_node is decided already.  Any
 * failure after the file exists truncates it first (freeing the pages and the
 * hugetlb reservation even if it is open elsewhere), then unlinks it. */
static int create_one(const char *id, int32_t node, int32_t bind_node, uint64_t bytes,
		      uint32_t backing, const struct kvs_numa_seg_opts *o, struct kvs_numa_seg *seg)
{
	const bool huge = backing == KVS_NUMA_BACKING_HUGETLB;
	/* required: the reason is the failure's (ERROR); else /dev/shm follows (WARN) */
	const int level = o->hugetlb == KVS_HUGETLB_REQUIRED ? KVS_LOG_ERROR : KVS_LOG_WARN;
	const uint64_t page = huge ? o->page_bytes : base_page_bytes();
	char path[PATH_MAX];
	void *base = MAP_FAILED;
	int fd = -1, rc;

	/* No mount, or one this user cannot write: said here, not as a short pool. */
	rc = huge ? kvs_numa_hugetlb_mount(o->page_bytes, path, sizeof(path), o->log, level) : 0;
	if (rc == 0)
		rc = seg_path(path, sizeof(path), NULL, id, node, backing, o->page_bytes);
	if (rc == 0 && huge)
		rc = kvs_numa_hugetlb_check(page, bind_node, bytes / page, o->log, level);
	if (rc == 0)
		rc = create_file(path, bytes, o, &fd);
	if (rc == 0)
		rc = map_new(fd, bytes, huge, page, path, o, &base);
	if (rc == 0)
		rc = place_new(base, bytes, huge, page, path, &bind_node, o, seg);
	if (rc == 0) {
		seg->base = base;
		seg->bytes = bytes;
		seg->fd = fd;
		seg->node = bind_node;
		seg->backing = backing;
		seg->page_bytes = page;
		strcpy(seg->path, path);
		kvs_log_info(o->log, "numa: created %s: %" PRIu64 " bytes, %s, %" PRIu64 " kB pages, node %d, "
			     "pre-faulted by %u threads in %.1f ms", path, bytes,
			     kvs_numa_backing_name(backing), page >> 10, (int)bind_node,
			     seg->prefault_threads, (double)seg->prefault_ns / 1e6);
		return 0;
	}
	if (base != MAP_FAILED)
		munmap(base, bytes);
	if (fd >= 0) {
		if (ftruncate(fd, 0) != 0)
			kvs_log_debug(o->log, "numa: truncate %s: %s", path, strerror(errno));
		unlink(path);
		close(fd);
	}
	seg_reset(seg); /* the pre-fault record of a failed try */
	return rc;
}

int kvs_numa_seg_create(const char *unique_id, int32_t node, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg)
{
	struct kvs_numa_seg_opts o;
	int32_t bind_node;
	int rc;

	if (!seg)
		return -EINVAL;
	seg_reset(seg);
	rc = opts_resolve(opts, &o);
	if (rc < 0)
		return rc;
	rc = check_id(unique_id);
	if (rc < 0)
		return rc;
	if (node < KVS_NUMA_NODE_NONE || node >= KVS_NUMA_MAX_NODES || bytes == 0 ||
	    bytes > (uint64_t)INT64_MAX - o.page_bytes || bytes > SIZE_MAX - o.page_bytes)
		return -EINVAL;
	bytes = (bytes + o.page_bytes - 1) & ~(o.page_bytes - 1);
	if (!KVS_KERNEL && o.hugetlb == KVS_HUGETLB_REQUIRED) {
		kvs_log_error(o.log, "numa: hugetlb=required: the plain build never uses hugetlbfs");
		return -EOPNOTSUPP;
	}
	bind_node = decide_node(node, &o);
	if (bind_node < KVS_NUMA_NODE_NONE)
		return bind_node;
	if (KVS_KERNEL && o.hugetlb != KVS_HUGETLB_OFF) {
		rc = create_one(unique_id, node, bind_node, bytes, KVS_NUMA_BACKING_HUGETLB, &o, seg);
		if (rc == 0 || rc == -EEXIST || rc == -EINVAL || o.hugetlb == KVS_HUGETLB_REQUIRED)
			return rc;
		kvs_log_warn(o.log, "numa: hugetlbfs not usable for kvshare.%s.data.%d (%s): falling "
			     "back to " KVS_NUMA_SHM_DIR " + MADV_HUGEPAGE", unique_id, node < 0 ? 0 : (int)node,
			     kvs_strerror(rc));
	}
	return create_one(unique_id, node, bind_node, bytes, KVS_NUMA_BACKING_SHM, &o, seg);
}

/* Open an existing segment file and check it before mapping: a regular file
 * (nothing else is opened, and never blocking: common/fd.h), ours (or the
 * configured group's), exactly bytes long, and for hugetlb on a hugetlbfs of
 * page_bytes pages. */
static int open_checked(const char *path, uint64_t bytes, bool huge, uint64_t page_bytes,
			const struct kvs_numa_seg_opts *o, int *fdp)
{
	struct statfs sfs;
	struct stat st;
	int fd = kvs_fd_open_regular(path, O_RDWR, false, &st), rc = 0;

	if (fd == -KVS_ECORRUPT) {
		kvs_log_error(o->log, "numa: attach %s: a %s, not a regular file", path,
			      kvs_fd_kind(st.st_mode));
		return fd;
	}
	if (fd < 0) {
		if (fd != -ENOENT)
			kvs_log_error(o->log, "numa: attach %s: %s", path, strerror(-fd));
		return fd;
	}
	if (st.st_uid != geteuid() && !(o->gid >= 0 && st.st_gid == (gid_t)o->gid)) {
		kvs_log_error(o->log, "numa: attach %s: owned by uid %u, not by this process (uid %u): "
			      "refused", path, (unsigned)st.st_uid, (unsigned)geteuid());
		rc = -EACCES;
	} else if ((uint64_t)st.st_size != bytes) {
		kvs_log_error(o->log, "numa: attach %s: %" PRIu64 " bytes, expected %" PRIu64, path,
			      (uint64_t)st.st_size, bytes);
		rc = -KVS_ECORRUPT;
	} else if (huge && (fstatfs(fd, &sfs) != 0 || (uint64_t)sfs.f_type != HUGETLBFS_MAGIC ||
			    (uint64_t)sfs.f_bsize != page_bytes)) {
		kvs_log_error(o->log, "numa: attach %s: not on hugetlbfs with %" PRIu64 " kB pages",
			      path, page_bytes >> 10);
		rc = -KVS_ECORRUPT;
	}
	if (rc) {
		close(fd);
		return rc;
	}
	*fdp = fd;
	return 0;
}

int kvs_numa_seg_attach(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, uint64_t bytes,
			const struct kvs_numa_seg_opts *opts, struct kvs_numa_seg *seg)
{
	struct kvs_numa_seg_opts o;
	const bool huge = backing == KVS_NUMA_BACKING_HUGETLB;
	void *base;
	int fd = -1, rc;

	if (!seg)
		return -EINVAL;
	seg_reset(seg);
	rc = opts_resolve(opts, &o);
	if (rc < 0)
		return rc;
	if (page_bytes == 0)
		page_bytes = KVS_NUMA_DEFAULT_PAGE_BYTES;
	if (bytes == 0 || bytes > (uint64_t)INT64_MAX || bytes > SIZE_MAX)
		return -EINVAL;
	rc = seg_path(seg->path, sizeof(seg->path), o.dir, unique_id, node, backing, page_bytes);
	if (rc == -ENOENT && huge)
		kvs_log_error(o.log, "numa: attach kvshare.%s.data.%d: no hugetlbfs mount for %" PRIu64
			      " kB pages known here (give the creator's directory)", unique_id,
			      node < 0 ? 0 : (int)node, page_bytes >> 10);
	if (rc == 0)
		rc = open_checked(seg->path, bytes, huge, page_bytes, &o, &fd);
	if (rc < 0) {
		seg_reset(seg);
		return rc;
	}
	/* No MAP_POPULATE, no touching: attach costs the same at any size.  On
	 * hugetlbfs the creator's pages already back the whole file, so this mapping
	 * reserves nothing more. */
	base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		rc = -errno;
		kvs_log_error(o.log, "numa: attach %s: mmap: %s", seg->path, strerror(-rc));
		close(fd);
		seg_reset(seg);
		return rc;
	}
	if (!huge)
		(void)madvise(base, bytes, MADV_HUGEPAGE);
	seg->base = base;
	seg->bytes = bytes;
	seg->fd = fd;
	seg->node = node;
	seg->backing = backing;
	seg->page_bytes = huge ? page_bytes : base_page_bytes();
	return 0;
}

void kvs_numa_seg_detach(struct kvs_numa_seg *seg)
{
	if (!seg)
		return;
	/* Only a mapped seg owns its fd: a zeroed struct has fd 0, not ours. */
	if (seg->base) {
		munmap(seg->base, seg->bytes);
		if (seg->fd >= 0)
			close(seg->fd);
	}
	seg_reset(seg);
}

static int unlink_path(const char *path, const struct kvs_log *log)
{
	if (unlink(path) != 0) {
		int rc = -errno;

		if (rc != -ENOENT)
			kvs_log_warn(log, "numa: unlink %s: %s", path, strerror(-rc));
		return rc;
	}
	kvs_log_debug(log, "numa: removed %s", path);
	return 0;
}

int kvs_numa_seg_unlink(const char *unique_id, int32_t node, uint32_t backing,
			uint64_t page_bytes, const struct kvs_log *log)
{
	char path[PATH_MAX];
	int rc = seg_path(path, sizeof(path), NULL, unique_id, node, backing, page_bytes);

	return rc < 0 ? rc : unlink_path(path, log);
}

int kvs_numa_seg_unlink_at(const char *dir, const char *unique_id, int32_t node,
			   const struct kvs_log *log)
{
	char path[PATH_MAX];
	int rc = seg_path_in(path, sizeof(path), dir, unique_id, node);

	return rc < 0 ? rc : unlink_path(path, log);
}

/* Unlink every node's name of unique_id in dir: *n counts the files removed,
 * *err keeps the first failure but -ENOENT. */
static void unlink_nodes(const char *dir, const char *unique_id, const struct kvs_log *log, int *n,
			 int *err)
{
	for (int32_t node = 0; node < KVS_NUMA_MAX_NODES; node++) {
		int rc = kvs_numa_seg_unlink_at(dir, unique_id, node, log);

		if (rc == 0)
			(*n)++;
		else if (rc != -ENOENT && !*err)
			*err = rc;
	}
}

int kvs_numa_seg_unlink_all(const char *unique_id, const char *dir, const struct kvs_log *log)
{
	struct mntent ent, *m;
	char line[4096];
	FILE *f;
	int n = 0, err = 0;

	if (check_id(unique_id) < 0)
		return -EINVAL;
	unlink_nodes(KVS_NUMA_SHM_DIR, unique_id, log, &n, &err);
	if (dir && dir[0] == '/')
		unlink_nodes(dir, unique_id, log, &n, &err);
	f = setmntent("/proc/mounts", "re");
	while (f && (m = getmntent_r(f, &ent, line, sizeof(line))))
		if (strcmp(m->mnt_type, "hugetlbfs") == 0)
			unlink_nodes(m->mnt_dir, unique_id, log, &n, &err);
	if (f)
		endmntent(f);
	return err ? err : n;
}

int kvs_numa_seg_query(const struct kvs_numa_seg *seg, struct kvs_numa_seg_info *info)
{
	void *pages[QUERY_BATCH];
	int status[QUERY_BATCH];
	struct stat st;
	uint64_t step, npages;

	if (!seg || !seg->base || !info || seg->page_bytes == 0)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->backing = seg->backing;
	info->page_bytes = seg->page_bytes;
	if (fstat(seg->fd, &st) != 0)
		return -errno;
	info->resident_bytes = (uint64_t)st.st_blocks * 512; /* st_blocks: 512-byte units */
	step = seg->page_bytes;
	npages = seg->bytes / step;
	for (uint64_t first = 0; first < npages; first += QUERY_BATCH) {
		unsigned long n = npages - first < QUERY_BATCH ? (unsigned long)(npages - first) : QUERY_BATCH;

		for (unsigned long i = 0; i < n; i++)
			pages[i] = (char *)seg->base + (first + i) * step;
		/* nodes == NULL: report, do not move; absent pages give -ENOENT. */
		if (syscall(SYS_move_pages, 0, n, pages, NULL, status, 0) != 0)
			return -errno;
		for (unsigned long i = 0; i < n; i++) {
			if (status[i] >= 0 && status[i] < KVS_NUMA_MAX_NODES) {
				info->node_bytes[status[i]] += step;
				info->mapped_bytes += step;
			}
		}
	}
	return 0;
}
