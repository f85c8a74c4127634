/*
 * core/segment.c — the life of a cache: create, attach, validate, adopt, detach,
 * remove; the rank table and its OFD-lock liveness; reaping dead ranks.
 *
 * The control file is POSIX shm /kvshare.<unique_id>.ctl.  O_CREAT|O_EXCL picks
 * the creator.  Lifecycle transitions (creation, attach, detach, adoption, reaping,
 * removal) are serialised by an OFD write lock on one byte of the control file
 * (KVS_LOCK_LIFECYCLE_BYTE), which the kernel drops if its holder dies.  The
 * creator takes it right after O_EXCL and publishes header state READY (release)
 * last; an attacher that finds the lock free and the header not READY twice, a
 * while apart, concludes that the creator died and removes the remains.
 *
 * Liveness: each attached process holds an OFD write lock on the byte of its
 * rank entry for as long as it is attached (its control fd stays open).  A rank
 * entry marked ATTACHED whose byte nobody locks belongs to a dead process, whatever
 * the pid says (pids are never used: reuse, namespaces, zombies).  Reaping such an
 * entry drops its pins under the bucket locks, folds its stats into the node's
 * and frees it.
 *
 * With no live rank left, the last clean detacher removes the segments (unless
 * persistent); a stale segment is adopted by the next open with the same
 * fingerprint: READY slots keep their bytes, everything else is reset.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "core/core.h"
#include "wait/wait.h"

#define STALE_INIT_NS (200ull * 1000000ull) /* creator silent this long = dead */

static void ctl_name(char *buf, size_t len, const char *uid)
{
	snprintf(buf, len, "/kvshare.%s.ctl", uid);
}

/* A segment is ours, or shared with us through the configured group (0660 +
 * gid, as numa/ accepts its data files); another uid's is refused. */
static bool owner_ok(const struct kvs_cache_config *cfg, const struct stat *st)
{
	if (st->st_uid == geteuid())
		return true;
	return cfg->gid >= 0 && st->st_gid == (gid_t)cfg->gid && (st->st_mode & 0660) == 0660;
}

/* ---- OFD locks ---- */

static int ofd_lock(int fd, off_t byte, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };

	return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

/* Is byte locked by another open file description? */
static bool ofd_locked(int fd, off_t byte)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return true; /* cannot tell: assume alive (never remove a live cache) */
	return fl.l_type != F_UNLCK;
}

/* The lifecycle lock, polled up to deadline (fcntl has no timed wait; the
 * holders keep it for microseconds, or a creator for its pre-fault). */
static int lifecycle_lock(int fd, uint64_t deadline)
{
	uint64_t pause_ns = 100000;

	for (;;) {
		int rc = ofd_lock(fd, KVS_LOCK_LIFECYCLE_BYTE, F_WRLCK);

		if (rc != -EAGAIN && rc != -EACCES)
			return rc;
		if (kvs_now_ns() >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = kvs_ns_to_timespec(pause_ns);
		nanosleep(&ts, NULL);
		if (pause_ns < 5000000)
			pause_ns *= 2;
	}
}

static void lifecycle_unlock(int fd)
{
	ofd_lock(fd, KVS_LOCK_LIFECYCLE_BYTE, F_UNLCK);
}

bool kvs_core_rank_alive(struct kvs_cache *c, uint32_t r, uint32_t epoch)
{
	struct kvs_shm_rank *e;

	if (r >= KVS_MAX_RANKS)
		return false;
	e = &c->ranks[r];
	/* acquire: pairs with the release stores of attach/reap (entry fields) */
	if (atomic_load_explicit(&e->state, memory_order_acquire) != KVS_SHM_RANK_ATTACHED ||
	    /* relaxed: ordered by the acquire of state just before */
	    atomic_load_explicit(&e->epoch, memory_order_relaxed) != epoch)
		return false;
	if ((int)r == c->rank_idx)
		return true; /* our own lock is invisible to F_OFD_GETLK on our fd */
	return ofd_locked(c->ctl_fd, (off_t)r);
}

/* ---- pins and reaping ---- */

static void fold_stats(struct kvs_shm_stats *dst, struct kvs_shm_stats *src)
{
	_Atomic uint64_t *d = (_Atomic uint64_t *)dst, *s = (_Atomic uint64_t *)src;

	for (size_t k = 0; k < sizeof(*src) / sizeof(uint64_t); k++) {
		/* relaxed: statistics */
		uint64_t v = atomic_exchange_explicit(&s[k], 0, memory_order_relaxed);
		atomic_fetch_add_explicit(&d[k], v, memory_order_relaxed);
	}
}

int kvs_core_drop_pins(struct kvs_cache *c, uint32_t r)
{
	struct kvs_shm_rank *e = &c->ranks[r];
	bool self = (int)r == c->rank_idx;
	uint32_t epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed);
	int dropped = 0;

	for (uint32_t p = 0; p < KVS_RANK_PINS; p++) {
		/* relaxed: rechecked under the bucket lock */
		uint32_t v = atomic_load_explicit(&e->pins[p], memory_order_relaxed), b, i;

		if (v == 0)
			continue;
		if (v - 1 >= c->slot_count) {
			atomic_store_explicit(&e->pins[p], 0, memory_order_relaxed);
			continue;
		}
		i = v - 1;
		if (kvs_core_slot_lock(c, i, &b))
			return -ETIMEDOUT;
		if (atomic_load_explicit(&e->pins[p], memory_order_relaxed) == v) {
			uint32_t left = atomic_fetch_sub_explicit(&c->slots[i].ref, 1,
								  memory_order_relaxed) - 1;
			uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) &
				      KVS_WAIT_VALUE_MASK;
			uint64_t f = atomic_load_explicit(&c->slots[i].filler, memory_order_relaxed);

			atomic_store_explicit(&e->pins[p], 0, memory_order_relaxed);
			/* An unfinished fill of r: at close, fail it for everyone;
			 * for a dead rank with waiters, leave it to their takeover. */
			if (st == KVS_SHM_SLOT_LOADING && f == kvs_core_filler(r, epoch) &&
			    (self || left == 0)) {
				atomic_store_explicit(&c->slots[i].error,
						      self ? -ECANCELED : -KVS_EOWNERDEAD,
						      memory_order_relaxed);
				kvs_wait_publish(&c->states[i], KVS_SHM_SLOT_FAILED);
			}
			dropped++;
		}
		kvs_core_bucket_unlock(c, b);
	}
	return dropped;
}

/* Under the lifecycle lock: free dead entry r. */
static void reap_rank(struct kvs_cache *c, uint32_t r)
{
	struct kvs_shm_rank *e = &c->ranks[r];
	int n = kvs_core_drop_pins(c, r);

	kvs_log_warn(&c->log, "rank entry %u (pid %d, device %d) died; %d pins dropped", r, e->pid,
		     e->device_id, n < 0 ? 0 : n);
	fold_stats(&c->hdr->departed, &e->stats);
	atomic_fetch_add_explicit(&c->hdr->departed.ranks_reaped, 1, memory_order_relaxed);
	if (n >= 0) /* else a bucket lock timed out: leave it for the next reaper */
		atomic_store_explicit(&e->state, KVS_SHM_RANK_FREE, memory_order_release);
}

int kvs_core_reap_dead(struct kvs_cache *c)
{
	int rc, n = 0;

	pthread_mutex_lock(&c->reap_mu);
	rc = lifecycle_lock(c->ctl_fd, kvs_deadline_after(c->cfg.attach_timeout_ns));
	if (rc) {
		pthread_mutex_unlock(&c->reap_mu);
		return rc;
	}
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		if ((int)r == c->rank_idx ||
		    atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) != KVS_SHM_RANK_ATTACHED ||
		    ofd_locked(c->ctl_fd, (off_t)r))
			continue;
		reap_rank(c, r);
		n++;
	}
	lifecycle_unlock(c->ctl_fd);
	pthread_mutex_unlock(&c->reap_mu);
	return n;
}

/* Live attached entries other than ours (lifecycle lock held). */
static uint32_t live_ranks(struct kvs_cache *c, uint32_t *gpu)
{
	uint32_t n = 0;

	if (gpu)
		*gpu = 0;
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		if ((int)r == c->rank_idx ||
		    atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) != KVS_SHM_RANK_ATTACHED ||
		    !ofd_locked(c->ctl_fd, (off_t)r))
			continue;
		n++;
		if (gpu && c->ranks[r].device_id >= 0)
			(*gpu)++;
	}
	return n;
}

/* Take a free rank entry and lock its byte (lifecycle lock held). */
static int rank_attach(struct kvs_cache *c)
{
	uint32_t gpu;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];

		if (atomic_load_explicit(&e->state, memory_order_acquire) != KVS_SHM_RANK_FREE)
			continue;
		if (ofd_lock(c->ctl_fd, (off_t)r, F_WRLCK))
			continue;
		c->rank_idx = (int)r;
		c->rank_epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed) + 1;
		e->pid = (int32_t)getpid();
		e->device_id = c->cfg.device_id;
		atomic_store_explicit(&e->epoch, c->rank_epoch, memory_order_relaxed);
		/* release: the fields above are visible to whoever sees ATTACHED */
		atomic_store_explicit(&e->state, KVS_SHM_RANK_ATTACHED, memory_order_release);
		c->me = e;
		live_ranks(c, &gpu);
		if (c->cfg.device_id >= 0 && gpu + 1 > c->hdr->fp.local_rank_size) {
			atomic_fetch_add_explicit(&c->hdr->lrs_mismatch, 1, memory_order_relaxed);
			kvs_log_warn(&c->log, "%u GPU ranks attached, local_rank_size is %u", gpu + 1,
				     c->hdr->fp.local_rank_size);
		}
		return 0;
	}
	kvs_log_error(&c->log, "no free rank entry (%u attached)", KVS_MAX_RANKS);
	return -EBUSY;
}

/* ---- data segments ---- */

static void seg_opts(struct kvs_cache *c, struct kvs_numa_seg_opts *o)
{
	kvs_numa_seg_opts_init(o);
	o->hugetlb = c->cfg.hugetlb;
	o->numa = c->cfg.numa;
	o->page_bytes = c->cfg.hugepage_bytes;
	o->file_mode = c->cfg.file_mode;
	o->gid = c->cfg.gid;
	o->log = &c->log;
}

/* This rank's node: numa_node, else its GPU's, else none. */
static int32_t my_node(struct kvs_cache *c)
{
	if (c->cfg.numa_node >= 0)
		return c->cfg.numa_node;
	if (c->cfg.pci_bus_id[0]) {
		int n = kvs_numa_node_of_pci(c->cfg.pci_bus_id);
		if (n >= 0)
			return n;
	}
	return KVS_NUMA_NODE_NONE;
}

static uint32_t plan_seg_count(struct kvs_cache *c)
{
	int nodes = c->cfg.numa == KVS_NUMA_OFF ? 1 : kvs_numa_node_count();

	if (nodes < 1)
		nodes = 1;
	if ((uint32_t)nodes > KVS_MAX_SEGS)
		nodes = KVS_MAX_SEGS;
	if ((uint64_t)nodes > c->cfg.slot_count)
		nodes = 1;
	return (uint32_t)nodes;
}

static void unlink_segs(struct kvs_cache *c)
{
	for (uint32_t s = 0; s < c->hdr->fp.seg_count && s < KVS_MAX_SEGS; s++) {
		const struct kvs_shm_seg *sg = &c->hdr->segs[s];

		if (sg->backing != KVS_NUMA_BACKING_NONE)
			kvs_numa_seg_unlink(c->cfg.unique_id, sg->node, sg->backing, sg->page_bytes,
					    &c->log);
	}
}

static int create_segs(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	uint32_t n = h->fp.seg_count;
	uint64_t first = 0;
	struct kvs_numa_seg_opts o;
	int rc;

	seg_opts(c, &o);
	for (uint32_t s = 0; s < n; s++) {
		struct kvs_shm_seg *sg = &h->segs[s];
		uint64_t count = h->fp.slot_count / n + (s < h->fp.slot_count % n);
		uint64_t rsv = h->fp.reserved_slots / n + (s < h->fp.reserved_slots % n);

		sg->node = n == 1 ? my_node(c) : (int32_t)s;
		sg->first_slot = first;
		sg->slot_count = count;
		sg->reserved_count = rsv < count ? rsv : count - 1;
		first += count;
		rc = kvs_numa_seg_create(c->cfg.unique_id, sg->node, count * h->fp.slot_bytes, &o,
					 &c->segs[s]);
		if (rc == -EEXIST) {
			/* We won O_EXCL on the control file, so a data file of this name
			 * is the remains of a creator that died: remove, retry once. */
			kvs_log_warn(&c->log, "%s: removing a dead creator's data segment %u",
				     c->cfg.unique_id, s);
			kvs_numa_seg_unlink(c->cfg.unique_id, sg->node, KVS_NUMA_BACKING_HUGETLB,
					    o.page_bytes ? o.page_bytes : KVS_NUMA_DEFAULT_PAGE_BYTES,
					    &c->log);
			kvs_numa_seg_unlink(c->cfg.unique_id, sg->node, KVS_NUMA_BACKING_SHM, 0, &c->log);
			rc = kvs_numa_seg_create(c->cfg.unique_id, sg->node, count * h->fp.slot_bytes,
						 &o, &c->segs[s]);
		}
		if (rc) {
			kvs_log_error(&c->log, "data segment %u (node %d, %llu bytes): %s", s, sg->node,
				      (unsigned long long)(count * h->fp.slot_bytes), kvs_strerror(rc));
			return rc;
		}
		sg->bound_node = c->segs[s].node;
		sg->backing = c->segs[s].backing;
		sg->page_bytes = c->segs[s].page_bytes;
		sg->bytes = c->segs[s].bytes;
		if (sg->backing != KVS_NUMA_BACKING_HUGETLB && KVS_KERNEL &&
		    c->cfg.hugetlb == KVS_HUGETLB_AUTO)
			h->fallbacks |= KVS_FALLBACK_HUGETLB;
		if (sg->bound_node < 0 && c->cfg.numa == KVS_NUMA_AUTO)
			h->fallbacks |= KVS_FALLBACK_NUMA;
	}
	return 0;
}

static int attach_segs(struct kvs_cache *c)
{
	struct kvs_numa_seg_opts o;
	int32_t node = my_node(c);

	seg_opts(c, &o);
	c->seg_count = c->hdr->fp.seg_count;
	for (uint32_t s = 0; s < c->seg_count; s++) {
		const struct kvs_shm_seg *sg = &c->hdr->segs[s];
		int rc;

		if (sg->node == node && node >= 0)
			c->home_seg = s;
		if (c->cfg.device_id < 0 || c->segs[s].base)
			continue; /* watchers map no data; the creator has its own */
		rc = kvs_numa_seg_attach(c->cfg.unique_id, sg->node, sg->backing, sg->page_bytes,
					 sg->bytes, &o, &c->segs[s]);
		if (rc) {
			kvs_log_error(&c->log, "data segment %u (node %d): %s", s, sg->node,
				      kvs_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* ---- control segment ---- */

static int map_ctl(struct kvs_cache *c, uint64_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	c->ctl = p;
	c->ctl_bytes = bytes;
	c->hdr = p;
	return 0;
}

static void unmap_ctl(struct kvs_cache *c)
{
	if (c->ctl)
		munmap(c->ctl, c->ctl_bytes);
	c->ctl = NULL;
	c->hdr = NULL;
}

/* Local views of the regions, from the (validated) header. */
static void bind_regions(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	char *base = c->ctl;

	c->ranks = (struct kvs_shm_rank *)(base + h->ranks_off);
	c->buckets = (struct kvs_shm_bucket *)(base + h->buckets_off);
	c->slots = (struct kvs_shm_slot *)(base + h->slots_off);
	c->states = (_Atomic uint32_t *)(base + h->states_off);
	c->refbits = (_Atomic uint8_t *)(base + h->refbits_off);
	c->bucket_mask = h->fp.bucket_count - 1;
	c->slot_count = (uint32_t)h->fp.slot_count;
	c->slot_bytes = h->fp.slot_bytes;
	c->slot_shift = -1;
	if ((c->slot_bytes & (c->slot_bytes - 1)) == 0)
		c->slot_shift = __builtin_ctzll(c->slot_bytes);
}

/* Rebuild every chain from bucket_idx (nobody else attached). */
static void rebuild_all(struct kvs_cache *c)
{
	for (uint64_t b = 0; b <= c->bucket_mask; b++)
		c->buckets[b].head = KVS_IDX_NONE;
	for (uint32_t i = c->slot_count; i-- > 0;) {
		uint32_t b = atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed);

		c->slots[i].next = c->buckets[b].head;
		c->buckets[b].head = i;
	}
}

static int create_ctl(struct kvs_cache *c, uint64_t deadline)
{
	struct kvs_shm_fingerprint fp;
	struct kvs_core_regions r;
	struct kvs_shm_header *h;
	int rc = lifecycle_lock(c->ctl_fd, deadline);

	if (rc)
		return rc;
	if (fchmod(c->ctl_fd, c->cfg.file_mode) || (c->cfg.gid >= 0 && fchown(c->ctl_fd, (uid_t)-1, (gid_t)c->cfg.gid)))
		return -errno;
	kvs_core_fingerprint(&c->cfg, plan_seg_count(c), &fp);
	kvs_core_regions(&fp, &r);
	if (ftruncate(c->ctl_fd, (off_t)r.ctl_bytes))
		return -errno;
	rc = map_ctl(c, r.ctl_bytes);
	if (rc)
		return rc;
	h = c->hdr;
	h->magic = KVS_SHM_MAGIC;
	h->layout_version = KVS_LAYOUT_VERSION;
	h->format = kvs_core_format();
	h->ctl_bytes = r.ctl_bytes;
	h->fp = fp;
	h->ranks_off = r.ranks_off;
	h->buckets_off = r.buckets_off;
	h->slots_off = r.slots_off;
	h->states_off = r.states_off;
	h->refbits_off = r.refbits_off;
	h->flags = c->cfg.flags & KVS_CACHE_PERSIST;
	h->creator_uid = (uint32_t)geteuid();
	if (c->cfg.tensor_count)
		memcpy(h->tensor_bytes, c->cfg.tensor_bytes, sizeof(uint64_t) * c->cfg.tensor_count);
	else
		h->tensor_bytes[0] = c->cfg.slot_bytes;
	bind_regions(c);
	/* Everything else starts zero (ftruncate): free ranks, EMPTY states,
	 * clear refbits, zero refs.  Slot i sits on bucket i. */
	for (uint64_t b = 0; b <= c->bucket_mask; b++) {
		rc = kvs_core_mutex_init(&c->buckets[b].lock);
		if (rc)
			return rc;
	}
	for (uint32_t i = 0; i < c->slot_count; i++)
		atomic_store_explicit(&c->slots[i].bucket_idx, i, memory_order_relaxed);
	rebuild_all(c);
	rc = create_segs(c);
	if (rc)
		return rc;
	return 0;
}

static int validate_header(struct kvs_cache *c, const struct stat *st)
{
	struct kvs_shm_header *h = c->hdr;
	const struct kvs_shm_fingerprint *f = &h->fp;
	struct kvs_shm_fingerprint want;
	struct kvs_core_regions r;
	const struct kvs_log *log = &c->log;

	if (h->magic != KVS_SHM_MAGIC) {
		kvs_log_error(log, "%s: bad magic 0x%llx (want 0x%llx)", c->cfg.unique_id,
			      (unsigned long long)h->magic, (unsigned long long)KVS_SHM_MAGIC);
		return -KVS_ECORRUPT;
	}
	if (h->layout_version != KVS_LAYOUT_VERSION) {
		kvs_log_error(log, "%s: layout_version %u, this build has %u", c->cfg.unique_id,
			      h->layout_version, KVS_LAYOUT_VERSION);
		return -KVS_ELAYOUT;
	}
	if (h->format != kvs_core_format()) {
		kvs_log_error(log, "%s: format 0x%llx, this build has 0x%llx (struct sizes differ)",
			      c->cfg.unique_id, (unsigned long long)h->format,
			      (unsigned long long)kvs_core_format());
		return -KVS_ELAYOUT;
	}
	if (f->slot_count == 0 || f->slot_count > (UINT64_C(1) << 31) || f->slot_bytes == 0 ||
	    f->bucket_count < f->slot_count || (f->bucket_count & (f->bucket_count - 1)) ||
	    f->seg_count == 0 || f->seg_count > KVS_MAX_SEGS || f->shards_per_block == 0 ||
	    f->tensor_count == 0 || f->tensor_count > KVS_MAX_TENSORS) {
		kvs_log_error(log, "%s: header geometry out of range", c->cfg.unique_id);
		return -KVS_ECORRUPT;
	}
	kvs_core_regions(f, &r);
	if (r.ctl_bytes != h->ctl_bytes || r.ranks_off != h->ranks_off ||
	    r.buckets_off != h->buckets_off || r.slots_off != h->slots_off ||
	    r.states_off != h->states_off || r.refbits_off != h->refbits_off ||
	    (uint64_t)st->st_size < r.ctl_bytes) {
		kvs_log_error(log, "%s: control segment is %lld bytes, its header says %llu (truncated?)",
			      c->cfg.unique_id, (long long)st->st_size, (unsigned long long)h->ctl_bytes);
		return -KVS_ECORRUPT;
	}
	if (kvs_core_tensor_hash(h->tensor_bytes, f->tensor_count) != f->tensor_hash) {
		kvs_log_error(log, "%s: tensor table does not match its hash", c->cfg.unique_id);
		return -KVS_ECORRUPT;
	}
	if (c->cfg.flags & KVS_CACHE_ATTACH)
		return 0;
	kvs_core_fingerprint(&c->cfg, plan_seg_count(c), &want);
#define FP_FIELD(field, name)                                                                 \
	if (f->field != want.field) {                                                         \
		kvs_log_error(log, "%s: config mismatch: " name " is %llu in the segment, %llu here", \
			      c->cfg.unique_id, (unsigned long long)f->field,                 \
			      (unsigned long long)want.field);                                \
		return -KVS_ECONFIG;                                                          \
	}
	FP_FIELD(slot_bytes, "slot_bytes")
	FP_FIELD(slot_count, "slot_count")
	FP_FIELD(bucket_count, "bucket_count")
	FP_FIELD(shards_per_block, "shards_per_block")
	FP_FIELD(tensor_count, "tensor_count")
	FP_FIELD(local_rank_size, "local_rank_size")
	FP_FIELD(seg_count, "data segment count")
	FP_FIELD(reserved_slots, "reserved_slots")
#undef FP_FIELD
	if (f->tensor_hash != want.tensor_hash) {
		for (uint32_t t = 0; t < f->tensor_count; t++) {
			uint64_t mine = c->cfg.tensor_count ? c->cfg.tensor_bytes[t] : c->cfg.slot_bytes;
			if (h->tensor_bytes[t] != mine) {
				kvs_log_error(log, "%s: config mismatch: tensor_bytes[%u] is %llu in the segment, %llu here",
					      c->cfg.unique_id, t, (unsigned long long)h->tensor_bytes[t],
					      (unsigned long long)mine);
				break;
			}
		}
		return -KVS_ECONFIG;
	}
	return 0;
}

/* Take the geometry of an existing cache into our config (KVS_CACHE_ATTACH). */
static void adopt_geometry(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;

	c->cfg.slot_bytes = h->fp.slot_bytes;
	c->cfg.slot_count = h->fp.slot_count;
	c->cfg.shards_per_block = h->fp.shards_per_block;
	c->cfg.local_rank_size = h->fp.local_rank_size;
	c->cfg.reserved_slots = h->fp.reserved_slots;
	c->cfg.tensor_count = h->fp.tensor_count;
	memcpy(c->cfg.tensor_bytes, h->tensor_bytes, sizeof(uint64_t) * h->fp.tensor_count);
}

/* Stale segment, nobody else attached, lifecycle lock held: repair all. */
static void adopt(struct kvs_cache *c)
{
	uint32_t kept = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];

		if (atomic_load_explicit(&e->state, memory_order_relaxed) == KVS_SHM_RANK_ATTACHED) {
			fold_stats(&c->hdr->departed, &e->stats);
			atomic_fetch_add_explicit(&c->hdr->departed.ranks_reaped, 1, memory_order_relaxed);
		}
		for (uint32_t p = 0; p < KVS_RANK_PINS; p++)
			atomic_store_explicit(&e->pins[p], 0, memory_order_relaxed);
		atomic_store_explicit(&e->state, KVS_SHM_RANK_FREE, memory_order_relaxed);
	}
	/* Nobody else is attached (relaxed everywhere below: the lifecycle lock's
	 * release publishes it all), so the mutexes may be re-made from scratch. */
	for (uint64_t b = 0; b <= c->bucket_mask; b++)
		kvs_core_mutex_init(&c->buckets[b].lock);
	for (uint32_t i = 0; i < c->slot_count; i++) {
		struct kvs_shm_slot *s = &c->slots[i];
		uint32_t st = atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK;
		uint32_t b = atomic_load_explicit(&s->bucket_idx, memory_order_relaxed);

		atomic_store_explicit(&s->ref, 0, memory_order_relaxed);
		if (st == KVS_SHM_SLOT_READY) {
			b = kvs_core_bucket_of(c, kvs_core_hash(&s->block, s->shard));
			kept++;
		} else {
			st = KVS_SHM_SLOT_EMPTY;
			if (b > c->bucket_mask)
				b = i & (uint32_t)c->bucket_mask;
		}
		atomic_store_explicit(&s->bucket_idx, b, memory_order_relaxed);
		atomic_store_explicit(&c->states[i], st, memory_order_relaxed);
	}
	rebuild_all(c);
	atomic_fetch_add_explicit(&c->hdr->adopt_count, 1, memory_order_relaxed);
	kvs_log_info(&c->log, "%s: adopted a stale cache; %u READY slots kept", c->cfg.unique_id, kept);
}

/* Attach through an open fd.  -EAGAIN: start over (segment went away). */
static int attach_ctl(struct kvs_cache *c, uint64_t deadline)
{
	uint64_t stale_since = 0;
	struct stat st;
	int rc;

	for (;;) {
		if (fstat(c->ctl_fd, &st))
			return -errno;
		if (!owner_ok(&c->cfg, &st)) {
			kvs_log_error(&c->log, "%s: control segment belongs to uid %u (group %u), not %u: refused",
				      c->cfg.unique_id, (unsigned)st.st_uid, (unsigned)st.st_gid,
				      (unsigned)geteuid());
			return -EACCES;
		}
		rc = lifecycle_lock(c->ctl_fd, deadline);
		if (rc)
			return rc;
		if (fstat(c->ctl_fd, &st))
			return -errno;
		if (st.st_nlink == 0)
			return -EAGAIN; /* removed by the last detacher meanwhile */
		if ((uint64_t)st.st_size >= KVS_SHM_HEADER_BYTES) {
			rc = map_ctl(c, KVS_SHM_HEADER_BYTES);
			if (rc)
				return rc;
			/* acquire: pairs with the creator's READY publish */
			if (atomic_load_explicit(&c->hdr->state, memory_order_acquire) == KVS_SHM_READY)
				break;
			unmap_ctl(c);
		}
		/* Not ready and its creator holds no lock: in the instant between
		 * O_EXCL and its lock, or dead.  Dead if it stays so. */
		uint64_t now = kvs_now_ns();
		if (!stale_since) {
			stale_since = now;
		} else if (now - stale_since > STALE_INIT_NS) {
			char name[128];

			kvs_log_warn(&c->log, "%s: creator died during initialisation; removing",
				     c->cfg.unique_id);
			ctl_name(name, sizeof(name), c->cfg.unique_id);
			shm_unlink(name);
			return -EAGAIN;
		}
		lifecycle_unlock(c->ctl_fd);
		if (now >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = kvs_ns_to_timespec(1000000);
		nanosleep(&ts, NULL);
	}
	/* Header page mapped and READY; lifecycle lock held. */
	rc = validate_header(c, &st);
	if (rc)
		return rc;
	uint64_t bytes = c->hdr->ctl_bytes;
	unmap_ctl(c);
	rc = map_ctl(c, bytes);
	if (rc)
		return rc;
	if (c->cfg.flags & KVS_CACHE_ATTACH)
		adopt_geometry(c);
	bind_regions(c);
	/* Reap the dead; with nobody left alive, adopt. */
	bool any_dead = false;
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		if (atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) == KVS_SHM_RANK_ATTACHED &&
		    !ofd_locked(c->ctl_fd, (off_t)r))
			any_dead = true;
	if (live_ranks(c, NULL) == 0) {
		adopt(c);
	} else if (any_dead) {
		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
			if (atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) == KVS_SHM_RANK_ATTACHED &&
			    !ofd_locked(c->ctl_fd, (off_t)r))
				reap_rank(c, r);
	}
	return attach_segs(c);
}

static int open_once(struct kvs_cache *c, uint64_t deadline)
{
	char name[128];
	bool creator = false;
	int rc;

	ctl_name(name, sizeof(name), c->cfg.unique_id);
	if (!(c->cfg.flags & KVS_CACHE_ATTACH)) {
		c->ctl_fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		creator = c->ctl_fd >= 0;
		if (!creator && errno != EEXIST)
			return -errno;
	}
	if (!creator) {
		c->ctl_fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
		if (c->ctl_fd < 0)
			return errno == ENOENT && !(c->cfg.flags & KVS_CACHE_ATTACH) ? -EAGAIN : -errno;
		rc = attach_ctl(c, deadline);
		if (rc == 0)
			rc = rank_attach(c);
	} else {
		rc = create_ctl(c, deadline);
		if (rc == 0)
			rc = rank_attach(c);
		if (rc == 0) {
			c->seg_count = c->hdr->fp.seg_count;
			rc = attach_segs(c); /* sets home_seg; the creator's maps are kept */
		}
		if (rc == 0) {
			/* release: everything above is visible to attachers that
			 * acquire READY */
			atomic_store_explicit(&c->hdr->state, KVS_SHM_READY, memory_order_release);
		} else {
			/* A failed creation leaves nothing behind; attachers queued on
			 * the lifecycle lock find the file unlinked and start over. */
			if (c->hdr)
				unlink_segs(c);
			shm_unlink(name);
		}
	}
	lifecycle_unlock(c->ctl_fd);
	return rc;
}

static void teardown_local(struct kvs_cache *c)
{
	for (uint32_t s = 0; s < KVS_MAX_SEGS; s++)
		kvs_numa_seg_detach(&c->segs[s]);
	unmap_ctl(c);
	if (c->ctl_fd >= 0)
		close(c->ctl_fd); /* drops our OFD locks */
	c->ctl_fd = -1;
	c->rank_idx = -1;
	c->me = NULL;
}

KVS_API int kvs_cache_open(const struct kvs_cache_config *cfg, struct kvs_cache **out)
{
	struct kvs_log log = { cfg ? cfg->log : NULL, cfg ? cfg->log_arg : NULL };
	struct kvs_cache *c;
	uint64_t deadline;
	int rc;

	if (out)
		*out = NULL;
	if (!cfg || !out)
		return -EINVAL;
	rc = kvs_core_config_validate(cfg, &log);
	if (rc)
		return rc;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->log = log;
	c->ctl_fd = -1;
	c->rank_idx = -1;
	c->opener = getpid();
	kvs_wait_spin_init(&c->spin, cfg->spin_ns);
	pthread_mutex_init(&c->reap_mu, NULL);
	for (uint32_t s = 0; s < KVS_MAX_SEGS; s++)
		c->segs[s].fd = -1;
	deadline = kvs_deadline_after(cfg->attach_timeout_ns);
	for (int tries = 0; tries < 100; tries++) {
		rc = open_once(c, deadline);
		if (rc != -EAGAIN)
			break;
		if (c->me) /* attached, then failed: never leave a live entry */
			atomic_store_explicit(&c->me->state, KVS_SHM_RANK_FREE, memory_order_release);
		teardown_local(c);
	}
	if (rc) {
		if (c->me && c->ctl) {
			int lk = lifecycle_lock(c->ctl_fd, deadline);
			atomic_store_explicit(&c->me->state, KVS_SHM_RANK_FREE, memory_order_release);
			if (lk == 0)
				lifecycle_unlock(c->ctl_fd);
		}
		teardown_local(c);
		pthread_mutex_destroy(&c->reap_mu);
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

KVS_API void kvs_cache_close(struct kvs_cache *c)
{
	char name[128];

	if (!c)
		return;
	/* A fork()ed child closing the handle it inherited only frees its own
	 * copy: the rank entry, pins and segments are its parent's. */
	if (c->me && c->ctl && getpid() == c->opener) {
		kvs_core_drop_pins(c, (uint32_t)c->rank_idx);
		if (lifecycle_lock(c->ctl_fd, kvs_deadline_after(c->cfg.attach_timeout_ns)) == 0) {
			fold_stats(&c->hdr->departed, &c->me->stats);
			atomic_store_explicit(&c->me->state, KVS_SHM_RANK_FREE, memory_order_release);
			ofd_lock(c->ctl_fd, (off_t)c->rank_idx, F_UNLCK);
			if (live_ranks(c, NULL) == 0 &&
			    !((c->hdr->flags | c->cfg.flags) & KVS_CACHE_PERSIST)) {
				unlink_segs(c);
				ctl_name(name, sizeof(name), c->cfg.unique_id);
				shm_unlink(name);
			}
			lifecycle_unlock(c->ctl_fd);
		}
		/* else: our entry looks dead once the fd closes; a peer reaps it */
	}
	teardown_local(c);
	pthread_mutex_destroy(&c->reap_mu);
	free(c);
}

KVS_API int kvs_cache_remove(const struct kvs_cache_config *cfg)
{
	struct kvs_cache c0, *c = &c0;
	char name[128];
	struct stat st;
	int rc;

	if (!cfg || memchr(cfg->unique_id, '\0', sizeof(cfg->unique_id)) == NULL ||
	    !kvs_core_unique_id_valid(cfg->unique_id))
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->cfg = *cfg;
	c->log = (struct kvs_log){ cfg->log, cfg->log_arg };
	c->rank_idx = -1;
	ctl_name(name, sizeof(name), cfg->unique_id);
	c->ctl_fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	if (c->ctl_fd < 0)
		return -errno;
	rc = fstat(c->ctl_fd, &st) ? -errno : 0;
	if (rc == 0 && !owner_ok(cfg, &st))
		rc = -EACCES;
	if (rc == 0)
		rc = lifecycle_lock(c->ctl_fd, kvs_deadline_after(cfg->attach_timeout_ns ?
								   cfg->attach_timeout_ns :
								   KVS_NSEC_PER_SEC));
	if (rc) {
		close(c->ctl_fd);
		return rc;
	}
	/* Liveness needs no mapping: any locked rank byte is a live attacher,
	 * whatever the rest of the file says. */
	for (uint32_t r = 0; r < KVS_MAX_RANKS && rc == 0; r++)
		if (ofd_locked(c->ctl_fd, (off_t)r))
			rc = -EBUSY;
	if (rc == 0) {
		/* The data segments are named by the header's segment table, if the
		 * header is one this build can read (even when the rest is cut). */
		if ((uint64_t)st.st_size >= KVS_SHM_HEADER_BYTES &&
		    map_ctl(c, KVS_SHM_HEADER_BYTES) == 0 && c->hdr->magic == KVS_SHM_MAGIC &&
		    c->hdr->layout_version == KVS_LAYOUT_VERSION && c->hdr->format == kvs_core_format())
			unlink_segs(c);
		else
			kvs_log_warn(&c->log, "%s: header unreadable by this build; data segments (if any) left behind",
				     cfg->unique_id);
		shm_unlink(name);
	}
	lifecycle_unlock(c->ctl_fd);
	unmap_ctl(c);
	close(c->ctl_fd);
	return rc;
}

KVS_API int kvs_cache_rank(const struct kvs_cache *c)
{
	return c ? c->rank_idx : -EINVAL;
}

struct kvs_shm_header *kvs_core_test_header(struct kvs_cache *c)
{
	return c->hdr;
}
