/*
 * core/segment.c — the life of a cache: create, attach, adopt, close, remove.
 *
 * The control file is POSIX shm /kvshare.<unique_id>.ctl.  Creation is atomic:
 * the creator makes the file anonymous (O_TMPFILE in /dev/shm), takes the
 * lifecycle lock and its rank entry's lock on it, initialises the header, and
 * only then links it under its name (linkat fails with EEXIST if another creator
 * won: this one attaches instead).  So nobody ever sees a named control file
 * without a live owner's locks on it: its creator holds the lifecycle lock until
 * header state READY is published (release, last), and its rank byte for as long
 * as it is attached.  The data segments are created after the link, under the
 * lifecycle lock (their names are the cache's: only the name's owner may make
 * them), and recorded in the header's segment table with their placement
 * (dataseg.c), so attachers read where they are instead of recomputing it.
 *
 * Liveness comes from the rank table only (rank.c): a cache with a locked rank
 * byte is never removed or re-created by an attacher, whatever its header says;
 * if its header is not READY or fails validation, the open fails with
 * -KVS_ECORRUPT and nothing is touched.  A control file nobody locks that is not
 * READY is the remains of a creator that died: it is removed with its data files
 * (the ones its header names, and any other of its names: one made in the
 * pre-fault was never recorded), and the open starts over.
 *
 * Files are unlinked by name, and a name may lead to another file by the time
 * its lifecycle lock is had (the cache removed meanwhile, and made again by a
 * rank): every removal first checks, lock held, that the name still leads to
 * the file it holds (name_is_ours); kvs_cache_remove then judges the new one,
 * a close or an attach unlinks nothing.
 *
 * With no live GPU rank left, the last GPU rank's clean close removes the
 * segments (unless persistent), watchers attached or not: a watcher (a
 * monitor, a scheduler's lookups) never keeps a cache, and a watcher's close
 * removes one only as the last process of a cache that ended cleanly (never
 * the stale remains of ranks killed -9, kept for adoption); kvs_cache_removed
 * tells a watcher its cache is gone; a stale segment is adopted by the next open with the same
 * fingerprint: READY (and DIRTY) slots keep their bytes, everything else is reset
 * (claims included).
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "core/core.h"
#include "wait/wait.h"

void (*kvs_core_test_hook)(enum kvs_core_test_point point);

static void test_point(enum kvs_core_test_point point)
{
	if (kvs_core_test_hook)
		kvs_core_test_hook(point);
}

static void ctl_name(char *buf, size_t len, const char *uid)
{
	snprintf(buf, len, "/kvshare.%s.ctl", uid);
}

/* Its path in the filesystem. */
static void ctl_path(char *buf, size_t len, const char *uid)
{
	snprintf(buf, len, KVS_NUMA_SHM_DIR "/kvshare.%s.ctl", uid);
}

/*
 * open(2) of /dev/shm/kvshare.<uid>.ctl, as shm_open does (O_NOFOLLOW,
 * O_CLOEXEC), through the libc entry point that sanitizers intercept, and never
 * as descriptor 0..2 (common/fd.h): under pytest, with stdin closed, the control
 * file got descriptor 0 and the interpreter's dup2 onto its stdin at exit
 * replaced it (TSan reported our close against that dup2).  Only a regular
 * file is opened, O_NONBLOCK: anyone may make a FIFO of that name in /dev/shm,
 * and a plain open of it waited for a writer for ever (kvshare ls, clean and
 * stat hung on one).
 */
int kvs_core_ctl_open(const char *uid, int flags, struct stat *st)
{
	char path[128];

	ctl_path(path, sizeof(path), uid);
	return kvs_fd_open_regular(path, flags, false, st);
}

void kvs_core_log_not_file(const struct kvs_log *log, const char *uid, const struct stat *st)
{
	kvs_log_error(log, "%s: " KVS_NUMA_SHM_DIR "/kvshare.%s.ctl is a %s, not a regular file: not "
			   "a kvshare control segment; left as it is (remove it by hand once you know "
			   "whose it is)", uid, uid, kvs_fd_kind(st->st_mode));
}

/*
 * Does the control file's name still lead to the file c holds, whose lifecycle
 * lock the caller holds?  A name is unlinked only under the lock of the file it
 * leads to, and data files are made only under it, so while that holds, no one
 * else removes the cache or makes its files.  Once it leads elsewhere (we
 * waited for the lock while the cache was removed and another creator made a
 * new one of the id), every unlink by name would remove that live cache: a
 * remove or a close then unlinks nothing.
 */
static bool name_is_ours(const struct kvs_cache *c)
{
	struct stat mine, named;
	char path[128];

	ctl_path(path, sizeof(path), c->cfg.unique_id);
	return fstat(c->ctl_fd, &mine) == 0 && lstat(path, &named) == 0 &&
	       mine.st_dev == named.st_dev && mine.st_ino == named.st_ino;
}

/* A segment is ours, or shared with us through the configured group (0660 +
 * gid, as numa/ accepts its data files); another uid's is refused. */
static bool owner_ok(const struct kvs_cache_config *cfg, const struct stat *st)
{
	if (st->st_uid == geteuid())
		return true;
	return cfg->gid >= 0 && st->st_gid == (gid_t)cfg->gid && (st->st_mode & 0660) == 0660;
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

/* Local views of the regions and local copies of the geometry, from the
 * validated header: nothing here is re-read from shared memory later. */
static void bind_regions(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	char *base = c->ctl;

	c->ranks = (struct kvs_shm_rank *)(base + h->ranks_off);
	c->buckets = (struct kvs_shm_bucket *)(base + h->buckets_off);
	c->slots = (struct kvs_shm_slot *)(base + h->slots_off);
	c->states = (_Atomic uint32_t *)(base + h->states_off);
	c->refbits = (_Atomic uint8_t *)(base + h->refbits_off);
	c->claim_heads = (uint32_t *)(base + h->claim_heads_off);
	c->claims = (struct kvs_shm_claim *)(base + h->claims_off);
	c->claim_mask = h->claim_count - 1;
	c->bucket_mask = h->fp.bucket_count - 1;
	c->slot_count = (uint32_t)h->fp.slot_count;
	c->slot_bytes = h->fp.slot_bytes;
	c->shards_per_block = h->fp.shards_per_block;
	c->local_rank_size = h->fp.local_rank_size;
	c->slot_shift = -1;
	if ((c->slot_bytes & (c->slot_bytes - 1)) == 0)
		c->slot_shift = __builtin_ctzll(c->slot_bytes);
}

/* Rebuild every chain from bucket_idx (nobody else attached; bucket_idx
 * bounded by the caller). */
static void rebuild_all(struct kvs_cache *c)
{
	/* relaxed: nobody else is attached */
	for (uint64_t b = 0; b <= c->bucket_mask; b++)
		atomic_store_explicit(&c->buckets[b].head, KVS_IDX_NONE, memory_order_relaxed);
	for (uint32_t i = c->slot_count; i-- > 0;) {
		uint32_t b = atomic_load_explicit(&c->slots[i].bucket_idx, memory_order_relaxed);

		atomic_store_explicit(&c->slots[i].next,
				      atomic_load_explicit(&c->buckets[b].head, memory_order_relaxed),
				      memory_order_relaxed);
		atomic_store_explicit(&c->buckets[b].head, i, memory_order_relaxed);
	}
}

/* The header of a new cache (mapped, zeroed by ftruncate). */
static int init_header(struct kvs_cache *c, const struct kvs_shm_fingerprint *fp,
		       const struct kvs_core_regions *r)
{
	struct kvs_shm_header *h = c->hdr;
	int rc;

	h->magic = KVS_SHM_MAGIC;
	h->layout_version = KVS_LAYOUT_VERSION;
	h->format = kvs_core_format();
	h->ctl_bytes = r->ctl_bytes;
	h->fp = *fp;
	h->ranks_off = r->ranks_off;
	h->buckets_off = r->buckets_off;
	h->slots_off = r->slots_off;
	h->states_off = r->states_off;
	h->refbits_off = r->refbits_off;
	h->claim_heads_off = r->claim_heads_off;
	h->claims_off = r->claims_off;
	h->claim_count = r->claim_count;
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
	return kvs_core_claims_init(c);
}

/* An anonymous control file of geometry fp, regions r, locked and initialised,
 * with our rank entry. */
static int create_anon(struct kvs_cache *c, const struct kvs_shm_fingerprint *fp,
		       const struct kvs_core_regions *r)
{
	int rc;

	c->ctl_fd = kvs_fd_above_stdio(open(KVS_NUMA_SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
	if (c->ctl_fd < 0) {
		rc = -errno;
		kvs_log_error(&c->log, "%s: anonymous file in " KVS_NUMA_SHM_DIR ": %s",
			      c->cfg.unique_id, kvs_strerror(rc));
		return rc;
	}
	if (fchmod(c->ctl_fd, c->cfg.file_mode))
		return -errno;
	if (c->cfg.gid >= 0 && fchown(c->ctl_fd, (uid_t)-1, (gid_t)c->cfg.gid)) {
		rc = -errno;
		kvs_log_error(&c->log, "%s: cannot give the control segment to group %d: %s%s",
			      c->cfg.unique_id, (int)c->cfg.gid, strerror(-rc),
			      rc == -EPERM ? " (uid not a member of it)" : "");
		return rc;
	}
	rc = kvs_core_ofd_lock(c->ctl_fd, KVS_LOCK_LIFECYCLE_BYTE, F_WRLCK);
	if (rc)
		return rc;
	if (ftruncate(c->ctl_fd, (off_t)r->ctl_bytes))
		return -errno;
	rc = map_ctl(c, r->ctl_bytes);
	if (rc == 0)
		rc = init_header(c, fp, r);
	if (rc == 0)
		rc = kvs_core_rank_attach(c);
	return rc;
}

/* Give the anonymous file its name: 0, -EEXIST (another cache has it), -errno. */
static int link_ctl(struct kvs_cache *c)
{
	char from[64], to[128];

	snprintf(from, sizeof(from), "/proc/self/fd/%d", c->ctl_fd);
	snprintf(to, sizeof(to), KVS_NUMA_SHM_DIR "/kvshare.%s.ctl", c->cfg.unique_id);
	if (linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) == 0)
		return 0;
	if (errno != EEXIST)
		kvs_log_error(&c->log, "%s: link %s: %s", c->cfg.unique_id, to, strerror(errno));
	return -errno;
}

/* Create the cache: -EEXIST when another creator named it first. */
static int create(struct kvs_cache *c)
{
	struct kvs_shm_fingerprint fp;
	struct kvs_core_regions r;
	char name[128];
	int rc;

	kvs_core_fingerprint(&c->cfg, kvs_core_segs_plan(c), &fp);
	if (kvs_core_regions(&fp, &r))
		return -EINVAL;
	/* A cache that exists is attached, and its memory is in use already: the
	 * fit check would refuse an attacher for the very pages it comes to share.
	 * (One named between here and link_ctl is found there, -EEXIST too.) */
	ctl_path(name, sizeof(name), c->cfg.unique_id);
	if (access(name, F_OK) == 0)
		return -EEXIST;
	rc = kvs_core_segs_check_fit(c, &fp, &r);
	if (rc == 0)
		rc = create_anon(c, &fp, &r);
	if (rc)
		return rc;
	test_point(KVS_CORE_TEST_BEFORE_LINK);
	rc = link_ctl(c);
	if (rc)
		return rc;
	test_point(KVS_CORE_TEST_AFTER_LINK);
	rc = kvs_core_segs_create(c);
	if (rc == 0)
		rc = kvs_core_segs_attach(c); /* geometry and home segment; the creator's maps are kept */
	if (rc == 0) {
		/* release: everything above is visible to attachers that acquire READY */
		atomic_store_explicit(&c->hdr->state, KVS_SHM_READY, memory_order_release);
		return 0;
	}
	/* A failed creation leaves nothing behind; attachers queued on the
	 * lifecycle lock find the file unlinked and start over. */
	kvs_core_segs_unlink(c->hdr, c->cfg.unique_id, &c->log);
	ctl_name(name, sizeof(name), c->cfg.unique_id);
	shm_unlink(name);
	return rc == -EEXIST ? -EIO : rc;
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
	uint32_t kept = 0, dirty = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];

		if (atomic_load_explicit(&e->state, memory_order_relaxed) == KVS_SHM_RANK_ATTACHED)
			atomic_fetch_add_explicit(&c->hdr->ranks_reaped, 1, memory_order_relaxed);
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
		/* no reader is left, and an evictor's bit went with its process */
		atomic_store_explicit(&s->readers, 0, memory_order_relaxed);
		/* a dump's DIRTY bytes are kept too, with their protection: the
		 * record of what is to be written (the adopter's store writes
		 * what is complete) */
		if (st != KVS_SHM_SLOT_DIRTY)
			atomic_store_explicit(&s->dirty_until_ns, 0, memory_order_relaxed);
		if ((st == KVS_SHM_SLOT_READY || st == KVS_SHM_SLOT_DIRTY) &&
		    atomic_load_explicit(&s->shard, memory_order_relaxed) < c->shards_per_block) {
			b = kvs_core_bucket_of(c, kvs_core_key_hash(s));
			kept++;
			dirty += st == KVS_SHM_SLOT_DIRTY;
		} else {
			st = KVS_SHM_SLOT_EMPTY;
			if (b > c->bucket_mask)
				b = i & (uint32_t)c->bucket_mask;
		}
		atomic_store_explicit(&s->bucket_idx, b, memory_order_relaxed);
		atomic_store_explicit(&c->states[i], st, memory_order_relaxed);
	}
	rebuild_all(c);
	kvs_core_claims_init(c); /* every claim died with its ranks */
	atomic_store_explicit(&c->hdr->dirty_hint, dirty, memory_order_relaxed); /* exact, now */
	atomic_store_explicit(&c->hdr->sweep_ns, 0, memory_order_relaxed);       /* due at once */
	/* the DIRTY slots are to be written where they were dumped for: the
	 * backend stays bound while there are any (an adopter with another one is
	 * refused by its store); else the next store binds its own */
	if (dirty == 0)
		atomic_store_explicit(&c->hdr->backend_hash, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->hdr->adopt_count, 1, memory_order_relaxed);
	kvs_log_info(&c->log, "%s: adopted a stale cache; %u slots kept, %u of them dumped but not "
			      "written (a store's sweep writes the complete blocks)", c->cfg.unique_id,
		     kept, dirty);
}

/*
 * Remove a cache nobody is attached to (the caller checked the rank locks under
 * the lifecycle lock, and that the name leads to its file: name_is_ours): the
 * data files its header names, if this build can read it (even when the rest
 * is cut); then every other data file of its name (kvs_numa_seg_unlink_all: a
 * creator killed during its pre-fault has made a file, its pages reserved, that
 * its header never recorded; another build's header is not read at all): while
 * we hold the lock of the named control file nobody else may make one; then
 * the control file.  A data file that cannot be removed keeps the control file
 * (and so the lock that guards its names), so that a later removal finds it
 * again: 0, or that unlink's error (logged).
 */
static int remove_files(struct kvs_cache *c, const struct stat *st)
{
	const char *uid = c->cfg.unique_id;
	char name[128], dir[KVS_SHM_DIR_MAX] = "";
	int rc;

	if ((uint64_t)st->st_size >= KVS_SHM_HEADER_BYTES && map_ctl(c, KVS_SHM_HEADER_BYTES) == 0) {
		if (kvs_core_recorded_dir(c->hdr))
			memcpy(dir, c->hdr->hugetlb_dir, sizeof(dir));
		kvs_core_segs_unlink(c->hdr, uid, &c->log);
		unmap_ctl(c);
	}
	rc = kvs_numa_seg_unlink_all(uid, dir[0] ? dir : NULL, &c->log);
	if (rc < 0) {
		kvs_log_error(&c->log, "%s: a data file of the cache could not be removed (%s; the "
				       "warning before names it): its control file is kept, so that "
				       "kvshare clean removes the cache once that is fixed",
			      uid, kvs_strerror(rc));
		return rc;
	}
	if (rc > 0)
		kvs_log_warn(&c->log, "%s: removed %d data file%s its header did not record (its "
				      "creator died before recording %s, or another build made it)",
			     uid, rc, rc == 1 ? "" : "s", rc == 1 ? "it" : "them");
	ctl_name(name, sizeof(name), uid);
	shm_unlink(name);
	return 0;
}

/* Lifecycle lock held, file mapped to its header and READY: validate, map it
 * whole, reap or adopt, take a rank entry, map the data. */
static int attach_ready(struct kvs_cache *c, const struct stat *st, bool live)
{
	int rc = kvs_core_header_validate(c->hdr, (uint64_t)st->st_size, c->cfg.unique_id, &c->log);

	if (rc == 0 && !(c->cfg.flags & KVS_CACHE_ATTACH))
		rc = kvs_core_header_match(c->hdr, &c->cfg, &c->log);
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
	if (!live)
		adopt(c);
	else
		kvs_core_reap_locked(c);
	rc = kvs_core_rank_attach(c);
	if (rc == 0)
		rc = kvs_core_segs_attach(c);
	return rc;
}

/* A control segment that is not ours to attach: name its owner, group and
 * mode, so the operator sees whose cache it is and what would share it. */
static void log_refused(struct kvs_cache *c, const struct stat *st)
{
	kvs_log_error(&c->log, "%s: control segment belongs to uid %u (group %u, mode 0%o), "
			       "not to uid %u%s: refused",
		      c->cfg.unique_id, (unsigned)st->st_uid, (unsigned)st->st_gid,
		      (unsigned)(st->st_mode & 07777), (unsigned)geteuid(),
		      c->cfg.gid >= 0 ? " or a member of its group" : "");
}

/* Attach through the open control fd (lifecycle lock taken here and held on
 * return).  -EAGAIN: start over (the file went away or was dead remains). */
static int attach(struct kvs_cache *c, uint64_t deadline)
{
	struct stat st;
	bool live;
	int rc;

	if (fstat(c->ctl_fd, &st))
		return -errno;
	if (!owner_ok(&c->cfg, &st)) {
		log_refused(c, &st);
		return -EACCES;
	}
	rc = kvs_core_lifecycle_lock(c->ctl_fd, deadline);
	if (rc)
		return rc;
	if (fstat(c->ctl_fd, &st))
		return -errno;
	if (!name_is_ours(c))
		return -EAGAIN; /* removed by the last detacher or a failed creator (and made again?) */
	live = kvs_core_any_rank_locked(c->ctl_fd);
	if ((uint64_t)st.st_size >= KVS_SHM_HEADER_BYTES) {
		rc = map_ctl(c, KVS_SHM_HEADER_BYTES);
		if (rc)
			return rc;
		/* acquire: pairs with the creator's READY publish */
		if (atomic_load_explicit(&c->hdr->state, memory_order_acquire) == KVS_SHM_READY)
			return attach_ready(c, &st, live);
		unmap_ctl(c);
	}
	if (live) {
		kvs_log_error(&c->log, "%s: control segment has live ranks but no READY header (%lld bytes): "
			      "corrupt; left as it is", c->cfg.unique_id, (long long)st.st_size);
		return -KVS_ECORRUPT;
	}
	kvs_log_warn(&c->log, "%s: creator died during initialisation (no live rank); removing",
		     c->cfg.unique_id);
	rc = remove_files(c, &st);
	return rc ? rc : -EAGAIN;
}

/* Unmap and close everything of this handle (no shared state is changed). */
static void handle_teardown(struct kvs_cache *c)
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

static int open_once(struct kvs_cache *c, uint64_t deadline)
{
	int rc = -EEXIST;

	if (!(c->cfg.flags & KVS_CACHE_ATTACH))
		rc = create(c);
	if (rc == -EEXIST) {
		/* Not ours to create: drop the anonymous file, attach by name. */
		struct stat st;

		handle_teardown(c);
		rc = kvs_core_ctl_open(c->cfg.unique_id, O_RDWR, &st);
		if (rc == -EACCES) {
			/* another uid's, not shared with us: say whose (st: its lstat) */
			if (st.st_mode)
				log_refused(c, &st);
			else
				kvs_log_error(&c->log, "%s: control segment " KVS_NUMA_SHM_DIR
					      "/kvshare.%s.ctl: %s", c->cfg.unique_id,
					      c->cfg.unique_id, strerror(EACCES));
			return -EACCES;
		}
		if (rc == -KVS_ECORRUPT)
			kvs_core_log_not_file(&c->log, c->cfg.unique_id, &st);
		if (rc < 0)
			return rc == -ENOENT && !(c->cfg.flags & KVS_CACHE_ATTACH) ? -EAGAIN : rc;
		c->ctl_fd = rc;
		rc = attach(c, deadline);
	}
	if (rc && c->me)
		kvs_core_rank_detach(c); /* attached, then failed: never leave a live entry */
	if (c->ctl_fd >= 0)
		kvs_core_lifecycle_unlock(c->ctl_fd);
	return rc;
}

static void handle_free(struct kvs_cache *c)
{
	kvs_core_handle_unregister(c);
	handle_teardown(c);
	pthread_mutex_destroy(&c->reap_mu);
	free(c);
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
	if (cfg->flags & KVS_CACHE_DISCARD_DIRTY) {
		kvs_log_error(&log, "%s: flags: KVS_CACHE_DISCARD_DIRTY is kvs_cache_remove's, not "
				    "an open's (an open never drops dumped slots)", cfg->unique_id);
		return -EINVAL;
	}
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
	kvs_core_handle_register(c);
	deadline = kvs_deadline_after(cfg->attach_timeout_ns);
	for (int tries = 0; tries < 100; tries++) {
		rc = open_once(c, deadline);
		if (rc != -EAGAIN)
			break;
		/* Not attached (or only to a file that went away): nothing shared
		 * to undo; our locks go with the descriptor. */
		handle_teardown(c);
	}
	if (rc) {
		handle_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* DIRTY slots of the cache: dumped, not in the backend yet. */
static uint64_t dirty_slots(struct kvs_cache *c)
{
	uint64_t dirty = 0;

	if (atomic_load_explicit(&c->hdr->dirty_hint, memory_order_relaxed) == 0)
		return 0; /* counted from above: none */
	for (uint32_t i = 0; i < c->slot_count; i++)
		/* relaxed: a census under the lifecycle lock (a rank attached
		 * meanwhile would keep the cache anyway) */
		dirty += (atomic_load_explicit(&c->states[i], memory_order_relaxed) &
			  KVS_WAIT_VALUE_MASK) == KVS_SHM_SLOT_DIRTY;
	return dirty;
}

KVS_API void kvs_cache_close(struct kvs_cache *c)
{
	char name[128];

	if (!c)
		return;
	/* A fork()ed child closing the handle it inherited only frees its own
	 * copy: the rank entry, pins and segments are its parent's. */
	if (c->me && c->ctl && c->ctl_fd >= 0 && getpid() == c->opener &&
	    kvs_core_lifecycle_lock(c->ctl_fd, kvs_deadline_after(c->cfg.attach_timeout_ns)) == 0) {
		/* The last GPU rank's clean close removes the cache, whatever
		 * watchers are attached (they notice: kvs_cache_removed).  A
		 * watcher's close removes it only when it was the last process of
		 * a cache that ended cleanly (no entry of a dead rank left): the
		 * remains of ranks killed -9 are kept for adoption. */
		bool detached = kvs_core_rank_detach(c);
		bool last_rank = c->cfg.device_id >= 0 && !kvs_core_rank_locked_besides_watchers(c);
		bool last_clean = !kvs_core_any_rank_locked(c->ctl_fd) && !kvs_core_any_entry_attached(c);

		/* A watcher whose cache was removed under it (kvs_cache_removed)
		 * must not unlink the names: they may be a new cache's now. */
		bool gone = detached && (last_rank || last_clean) && name_is_ours(c) &&
			    !((c->hdr->flags | c->cfg.flags) & KVS_CACHE_PERSIST);
		uint64_t dirty = gone ? dirty_slots(c) : 0;

		if (dirty) {
			/* the record of dumps not in the backend yet: never removed
			 * with the cache (core/layout.h, "Dumps") */
			kvs_log_warn(&c->log, "%s: kept, not removed: %llu slots dumped but not in the "
					       "backend yet; the next store to open it writes the complete "
					       "blocks among them (kvshare clean --discard-dirty %s drops "
					       "them)", c->cfg.unique_id, (unsigned long long)dirty,
				      c->cfg.unique_id);
		} else if (gone) {
			kvs_core_segs_unlink(c->hdr, c->cfg.unique_id, &c->log);
			ctl_name(name, sizeof(name), c->cfg.unique_id);
			shm_unlink(name);
		}
		kvs_core_lifecycle_unlock(c->ctl_fd);
	}
	/* else: our entry looks dead once the descriptor closes; a peer reaps it */
	handle_free(c);
}

/* Is every live entry of cache uid an attached watcher?  Read as
 * kvs_cache_inspect reads it (pread, nothing mapped); anything it cannot tell
 * (a header not READY, an entry not recorded) is a live rank. */
static bool only_watchers(const char *uid)
{
	struct kvs_cache_info in;

	if (kvs_cache_inspect(uid, &in) != 0 || in.state != KVS_CACHE_INFO_READY)
		return false;
	for (uint32_t k = 0; k < in.ranks_live; k++)
		if (!in.live[k].recorded || in.live[k].device_id >= 0)
			return false;
	return true;
}

KVS_API int kvs_cache_removed(struct kvs_cache *c)
{
	struct stat st;

	if (!c)
		return -EINVAL;
	if (fstat(c->ctl_fd, &st))
		return -errno;
	return st.st_nlink == 0;
}

/* A cache nobody keeps: removed, unless it holds the record of dumps not in
 * the backend yet (core/layout.h, "Dumps") and the caller did not ask to
 * discard them. */
static int remove_judged(struct kvs_cache *c, const struct stat *st)
{
	const char *uid = c->cfg.unique_id;
	struct kvs_cache_info in;

	/* A header this build cannot read (another layout, corrupt) cannot be
	 * adopted by it either: removed. */
	if (kvs_cache_inspect(uid, &in) == 0 && in.state == KVS_CACHE_INFO_READY && in.slots_dirty) {
		if (!(c->cfg.flags & KVS_CACHE_DISCARD_DIRTY)) {
			kvs_log_warn(&c->log, "%s: not removed: %llu slots dumped, their blocks not in "
					       "the backend yet; a store opening the cache writes the "
					       "complete ones (or: kvshare clean --discard-dirty %s)",
				      uid, (unsigned long long)in.slots_dirty, uid);
			return -ENOTEMPTY;
		}
		kvs_log_warn(&c->log, "%s: removed with %llu slots dumped but not in the backend "
				      "(discarded as asked)", uid, (unsigned long long)in.slots_dirty);
	}
	return remove_files(c, st);
}

/* One try of kvs_cache_remove: its result, or -EAGAIN when the name led to
 * another file by the time the lifecycle lock was ours (the cache was removed
 * meanwhile, and maybe made again: judge the one the name leads to now). */
static int remove_once(struct kvs_cache *c, uint64_t deadline)
{
	const char *uid = c->cfg.unique_id;
	struct stat st;
	int rc = 0;

	c->ctl_fd = kvs_core_ctl_open(uid, O_RDWR, &st);
	if (c->ctl_fd == -KVS_ECORRUPT)
		kvs_core_log_not_file(&c->log, uid, &st);
	if (c->ctl_fd < 0)
		return c->ctl_fd;
	if (!owner_ok(&c->cfg, &st)) {
		log_refused(c, &st);
		rc = -EACCES;
	}
	if (rc == 0) {
		test_point(KVS_CORE_TEST_REMOVE_OPENED);
		rc = kvs_core_lifecycle_lock(c->ctl_fd, deadline);
	}
	if (rc == 0) {
		/* Liveness needs no mapping: any locked rank byte is a live
		 * attacher, whatever the rest of the file says, unless the file
		 * says every one of them is a watcher (watchers never keep a
		 * cache). */
		if (!name_is_ours(c)) {
			kvs_log_info(&c->log, "%s: the control file was removed (and perhaps made "
					      "again) while this removal waited for it: judging what the "
					      "name holds now", uid);
			rc = -EAGAIN;
		} else if (fstat(c->ctl_fd, &st)) {
			rc = -errno;
		} else if (kvs_core_any_rank_locked(c->ctl_fd) && !only_watchers(uid)) {
			rc = -EBUSY;
		} else {
			rc = remove_judged(c, &st);
		}
		kvs_core_lifecycle_unlock(c->ctl_fd);
	}
	close(c->ctl_fd);
	c->ctl_fd = -1;
	return rc;
}

KVS_API int kvs_cache_remove(const struct kvs_cache_config *cfg)
{
	struct kvs_cache c0, *c = &c0;
	uint64_t deadline;
	int rc = -EAGAIN;

	if (!cfg || memchr(cfg->unique_id, '\0', sizeof(cfg->unique_id)) == NULL ||
	    !kvs_core_unique_id_valid(cfg->unique_id))
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->cfg = *cfg;
	c->log = (struct kvs_log){ cfg->log, cfg->log_arg };
	c->rank_idx = -1;
	deadline = kvs_deadline_after(cfg->attach_timeout_ns ? cfg->attach_timeout_ns : KVS_NSEC_PER_SEC);
	for (int tries = 0; tries < 100 && rc == -EAGAIN; tries++)
		rc = remove_once(c, deadline);
	return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

KVS_API int kvs_cache_rank(const struct kvs_cache *c)
{
	return c ? c->rank_idx : -EINVAL;
}

struct kvs_shm_header *kvs_core_test_header(struct kvs_cache *c)
{
	return c->hdr;
}
