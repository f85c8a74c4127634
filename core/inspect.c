/*
 * core/inspect.c — a cache described from outside, without attaching to it
 * (kvs_cache_inspect: `kvshare ls`, `kvshare clean`, and `kvshare stat` before it
 * decides to attach).
 *
 * Attaching is not read-only: an open takes the lifecycle lock, reaps dead rank
 * entries, and adopts (repairs) a stale cache; a tool that only wants to list
 * what is on the node must not do any of that.  So this file opens the control
 * file O_RDONLY -- only a regular file, and O_NONBLOCK (kvs_core_ctl_open):
 * anyone may put a FIFO of that name in /dev/shm, and a plain open waits for
 * a writer for ever; such a name is -KVS_ECORRUPT, not a cache -- and:
 *
 *   - tests each rank entry's liveness byte with F_OFD_GETLK (a lock *test*: a
 *     read-only descriptor suffices, and nothing is locked).  Ranks hold F_WRLCK
 *     on their byte (rank.c); the test asks about F_WRLCK too, so it sees any
 *     lock on the byte.  Liveness comes from these locks only
 *     (docs/core.md, "Lifecycle and liveness");
 *   - reads the header with one pread() into a private copy, then judges the copy:
 *     magic, layout version and format word first (another build's header is
 *     described as such, never interpreted), then READY, then the same validator
 *     open uses (header.c), whose first complaint becomes info->detail.  A header
 *     in shared memory can change under a reader; a private copy cannot, so what is
 *     validated is what is reported;
 *   - for a valid READY header, reads the pid, device and copy engine of each
 *     live entry with pread() at the validated ranks_off, and lists after them
 *     the entries still attached whose liveness byte nobody holds: processes
 *     that died and are not reaped yet (the next attach reaps them; a tool that
 *     attaches can then say whom it reaped).
 *
 * It maps nothing, takes no lock, writes nothing.  The result is a snapshot:
 * liveness is exact when each byte is tested, and a rank may attach or die just
 * after.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

_Static_assert(KVS_CACHE_MAX_RANKS == KVS_MAX_RANKS, "public rank-table size is layout.h's");
_Static_assert(KVS_CACHE_MAX_SEGS == KVS_MAX_SEGS, "public segment count is layout.h's");
_Static_assert(sizeof(((struct kvs_cache_info *)0)->hugetlb_dir) == KVS_SHM_DIR_MAX,
	       "hugetlb_dir holds the header's");
_Static_assert((int)KVS_CACHE_BACKING_HUGETLB == (int)KVS_NUMA_BACKING_HUGETLB &&
	       (int)KVS_CACHE_BACKING_SHM == (int)KVS_NUMA_BACKING_SHM,
	       "public backing values are numa/'s");

/* The validator's first complaint, kept as info->detail (it logs one line per
 * problem and stops at the first). */
static void keep_detail(void *arg, int level, const char *msg)
{
	char *detail = arg;

	(void)level;
	if (!detail[0])
		snprintf(detail, sizeof(((struct kvs_cache_info *)0)->detail), "%s", msg);
}

/* Is byte b of the control file locked by anyone?  -errno if it cannot tell. */
static int byte_locked(int fd, off_t b)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = b, .l_len = 1 };

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return -errno;
	return fl.l_type != F_UNLCK;
}

/* pread exactly len bytes at off: 0, -EIO (short: the file shrank), -errno. */
static int read_at(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

/* What an entry recorded at attach: pid and device, and its store's copy
 * engine (*engine, 0 when none) (READY header only). */
static int read_rank(int fd, const struct kvs_shm_header *h, uint32_t r,
		     struct kvs_cache_info_rank *out, uint32_t *engine)
{
	struct kvs_shm_rank e; /* only its leading fields are read */
	uint64_t off = h->ranks_off + (uint64_t)r * sizeof(struct kvs_shm_rank);
	size_t len = offsetof(struct kvs_shm_rank, pad);
	int rc = read_at(fd, &e, len, off);

	if (rc)
		return rc;
	/* An entry whose lock is held but whose state is not ATTACHED yet is a
	 * process inside kvs_core_rank_attach: its pid is not written yet. */
	if (atomic_load_explicit(&e.state, memory_order_relaxed) != KVS_SHM_RANK_ATTACHED)
		return 0;
	out->pid = e.pid;
	out->device_id = e.device_id < 0 ? -1 : e.device_id;
	out->recorded = 1;
	/* relaxed: a private copy */
	*engine = atomic_load_explicit(&e.copy_engine, memory_order_relaxed);
	return 0;
}

/* Judge the private header copy h (st_size: the file's size); fill what a header
 * in that state may say. */
static void judge_header(const struct kvs_shm_header *h, uint64_t st_size, const char *uid,
			 struct kvs_cache_info *info)
{
	struct kvs_log log = { keep_detail, info->detail };

	if (h->magic != KVS_SHM_MAGIC) {
		info->state = KVS_CACHE_INFO_CORRUPT;
		snprintf(info->detail, sizeof(info->detail), "%s: bad magic 0x%llx", uid,
			 (unsigned long long)h->magic);
		return;
	}
	info->layout_version = h->layout_version;
	if (h->layout_version != KVS_LAYOUT_VERSION || h->format != kvs_core_format()) {
		info->state = KVS_CACHE_INFO_LAYOUT;
		snprintf(info->detail, sizeof(info->detail),
			 "%s: layout_version %u format 0x%llx, this build has %u format 0x%llx", uid,
			 h->layout_version, (unsigned long long)h->format, KVS_LAYOUT_VERSION,
			 (unsigned long long)kvs_core_format());
		return;
	}
	/* relaxed: a private copy; the creator's release publish was what pread copied */
	if (atomic_load_explicit(&h->state, memory_order_relaxed) != KVS_SHM_READY) {
		info->state = KVS_CACHE_INFO_CREATING;
		return;
	}
	if (kvs_core_header_validate(h, st_size, uid, &log)) {
		info->state = KVS_CACHE_INFO_CORRUPT;
		return;
	}
	info->state = KVS_CACHE_INFO_READY;
	info->creator_uid = h->creator_uid;
	info->seg_count = h->fp.seg_count;
	info->local_rank_size = h->fp.local_rank_size;
	info->shards_per_block = h->fp.shards_per_block;
	info->reserved_slots = h->fp.reserved_slots;
	info->slot_count = h->fp.slot_count;
	info->slot_bytes = h->fp.slot_bytes;
	info->fallbacks = h->fallbacks & (KVS_FALLBACK_HUGETLB | KVS_FALLBACK_NUMA);
	info->adoptions = atomic_load_explicit(&h->adopt_count, memory_order_relaxed);
	if (h->flags & KVS_CACHE_PERSIST)
		info->flags |= KVS_CACHE_INFO_PERSIST;
	for (uint32_t s = 0; s < h->fp.seg_count; s++) {
		/* validated: each <= INT64_MAX, at most 16 of them; saturate anyway */
		if (__builtin_add_overflow(info->data_bytes, h->segs[s].bytes, &info->data_bytes))
			info->data_bytes = UINT64_MAX;
		if (h->segs[s].backing == KVS_NUMA_BACKING_HUGETLB)
			info->flags |= KVS_CACHE_INFO_HUGETLB;
	}
	/* validated NUL-terminated and absolute when a segment is on hugetlbfs */
	if (info->flags & KVS_CACHE_INFO_HUGETLB)
		memcpy(info->hugetlb_dir, h->hugetlb_dir, sizeof(info->hugetlb_dir));
}

/* The DIRTY slots of a READY cache (validated header h): its state words read
 * in chunks, when its hint says there may be any. */
static int count_dirty(int fd, const struct kvs_shm_header *h, uint64_t *dirty)
{
	uint32_t words[4096];

	*dirty = 0;
	/* relaxed: a private copy */
	if (atomic_load_explicit(&h->dirty_hint, memory_order_relaxed) == 0)
		return 0;
	for (uint64_t i = 0; i < h->fp.slot_count;) {
		uint64_t n = h->fp.slot_count - i < 4096 ? h->fp.slot_count - i : 4096;
		int rc = read_at(fd, words, n * sizeof(words[0]), h->states_off + i * sizeof(words[0]));

		if (rc)
			return rc;
		for (uint64_t k = 0; k < n; k++)
			*dirty += (words[k] & KVS_WAIT_VALUE_MASK) == KVS_SHM_SLOT_DIRTY;
		i += n;
	}
	return 0;
}

KVS_API int kvs_cache_inspect(const char *uid, struct kvs_cache_info *info)
{
	struct kvs_shm_header *h = NULL;
	struct stat st;
	uint64_t live = 0; /* bit r: entry r's liveness byte was held */
	uint32_t engine;
	int fd, rc;

	if (!uid || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	if (strnlen(uid, KVS_UNIQUE_ID_MAX + 1) > KVS_UNIQUE_ID_MAX || !kvs_core_unique_id_valid(uid))
		return -EINVAL;
	memcpy(info->unique_id, uid, strlen(uid) + 1);
	fd = kvs_core_ctl_open(uid, O_RDONLY, &st);
	if (fd < 0)
		return fd; /* -KVS_ECORRUPT: not a regular file, not opened */
	info->uid = (uint32_t)st.st_uid;
	info->gid = (uint32_t)st.st_gid;
	info->mode = (uint32_t)(st.st_mode & 07777);
	info->ctl_bytes = (uint64_t)st.st_size;

	/* Liveness first: it needs nothing from the file's contents. */
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		rc = byte_locked(fd, (off_t)r);
		if (rc < 0)
			goto out;
		if (rc) {
			struct kvs_cache_info_rank *e = &info->live[info->ranks_live++];

			e->entry = r;
			e->device_id = -1;
			live |= UINT64_C(1) << r;
		}
	}

	if ((uint64_t)st.st_size < KVS_SHM_HEADER_BYTES) {
		info->state = KVS_CACHE_INFO_CORRUPT;
		snprintf(info->detail, sizeof(info->detail),
			 "%s: control file is %llu bytes, less than its %u-byte header", uid,
			 (unsigned long long)st.st_size, KVS_SHM_HEADER_BYTES);
		rc = 0;
		goto out;
	}
	/* The header region, page-aligned like the mapping it mirrors. */
	h = aligned_alloc(KVS_SHM_PAGE, KVS_SHM_HEADER_BYTES);
	if (!h) {
		rc = -ENOMEM;
		goto out;
	}
	/* A header that fails validation is read and judged once more: a copy
	 * taken while its creator published READY may mix old and new bytes (the
	 * copy's loads are not ordered after its load of state).  A header that
	 * is really broken fails twice. */
	for (int tries = 0; tries < 2; tries++) {
		rc = read_at(fd, h, KVS_SHM_HEADER_BYTES, 0);
		if (rc)
			goto out;
		info->state = KVS_CACHE_INFO_READY;
		info->detail[0] = '\0';
		judge_header(h, (uint64_t)st.st_size, uid, info);
		if (info->state != KVS_CACHE_INFO_CORRUPT)
			break;
	}
	if (info->state == KVS_CACHE_INFO_READY) {
		for (uint32_t k = 0; k < info->ranks_live; k++) {
			struct kvs_cache_info_rank *e = &info->live[k];

			engine = 0;
			rc = read_rank(fd, h, e->entry, e, &engine);
			if (rc)
				goto out;
			info->gpu_ranks_live += e->recorded && e->device_id >= 0;
			info->cpu_ranks_live += e->recorded && e->device_id >= 0 &&
						engine == KVS_COPY_ENGINE_HOST;
		}
		/* Dead, not reaped: ATTACHED with its byte free (tested again after
		 * the read: a process attaching meanwhile locks its byte first). */
		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
			struct kvs_cache_info_rank *e = &info->live[info->ranks_live + info->ranks_dead];

			if (live & (UINT64_C(1) << r))
				continue;
			memset(e, 0, sizeof(*e));
			e->entry = r;
			e->device_id = -1;
			rc = read_rank(fd, h, r, e, &engine);
			if (rc)
				goto out;
			rc = e->recorded ? byte_locked(fd, (off_t)r) : 1;
			if (rc < 0)
				goto out;
			if (rc == 0)
				info->ranks_dead++;
			else
				memset(e, 0, sizeof(*e));
		}
		rc = count_dirty(fd, h, &info->slots_dirty);
		if (rc)
			goto out;
	}
	rc = 0;
out:
	free(h);
	close(fd);
	if (rc) {
		memset(info, 0, sizeof(*info));
		memcpy(info->unique_id, uid, strlen(uid) + 1);
	}
	return rc;
}
