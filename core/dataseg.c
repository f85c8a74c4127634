/*
 * core/dataseg.c — a cache's data segments: how many (one per NUMA node in
 * use), whether they fit the node before any exists, their creation and their
 * record in the header's segment table (node, backing, page size, size, first
 * slot, slot count, the hugetlbfs directory), mapping what that record says,
 * and removing the files it names.  segment.c calls these under the lifecycle
 * lock; numa/ makes, binds and maps each file.
 *
 * Attachers never recompute the placement: they map what the creator
 * recorded, so a plain rank, or a kernel rank with numa=off or another
 * HUGETLB_PATH, joins a cache made on a two-node machine.  Every header value
 * read here is bounded first: the header may have been written by anyone.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

static void seg_opts(struct kvs_cache *c, struct kvs_numa_seg_opts *o)
{
	kvs_numa_seg_opts_init(o);
	o->hugetlb = c->cfg.hugetlb;
	o->numa = c->cfg.numa;
	o->page_bytes = c->cfg.hugepage_bytes;
	o->file_mode = c->cfg.file_mode;
	o->gid = c->cfg.gid;
	o->prefault_threads = c->cfg.prefault_threads;
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

uint32_t kvs_core_segs_plan(struct kvs_cache *c)
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

/* The directory of segment sg's file, as its creator recorded it. */
static const char *seg_dir(const struct kvs_shm_header *h, const struct kvs_shm_seg *sg)
{
	return sg->backing == KVS_NUMA_BACKING_HUGETLB ? h->hugetlb_dir : KVS_NUMA_SHM_DIR;
}

/* Whether this build may read the header's tables at all. */
static bool header_readable(const struct kvs_shm_header *h)
{
	return h->magic == KVS_SHM_MAGIC && h->layout_version == KVS_LAYOUT_VERSION &&
	       h->format == kvs_core_format();
}

/* The hugetlbfs directory a header this build can read records, NUL-terminated
 * and absolute; else NULL. */
const char *kvs_core_recorded_dir(const struct kvs_shm_header *h)
{
	if (!header_readable(h) || !memchr(h->hugetlb_dir, '\0', sizeof(h->hugetlb_dir)) ||
	    h->hugetlb_dir[0] != '/')
		return NULL;
	return h->hugetlb_dir;
}

/* Remove the data files the header names (at most seg_count recorded ones; an
 * entry never filled in has no backing).  The header may be anything: only
 * bounded, NUL-terminated values are used, of a header this build can read. */
void kvs_core_segs_unlink(const struct kvs_shm_header *h, const char *uid,
			  const struct kvs_log *log)
{
	if (!header_readable(h)) {
		kvs_log_info(log, "%s: header unreadable by this build: its data files are looked for "
				  "by name", uid);
		return;
	}
	bool dir_ok = kvs_core_recorded_dir(h) != NULL;

	for (uint32_t s = 0; s < h->fp.seg_count && s < KVS_MAX_SEGS; s++) {
		const struct kvs_shm_seg *sg = &h->segs[s];

		if ((sg->backing == KVS_NUMA_BACKING_SHM ||
		     (sg->backing == KVS_NUMA_BACKING_HUGETLB && dir_ok)) &&
		    sg->node >= KVS_NUMA_NODE_NONE && sg->node < (int32_t)KVS_NUMA_MAX_NODES)
			kvs_numa_seg_unlink_at(seg_dir(h, sg), uid, sg->node, log);
	}
}

/* A data file of our name before we made it: the remains of a creator that died
 * before recording it.  We own the name now; remove it wherever it may be. */
static void unlink_orphan(struct kvs_cache *c, int32_t node, uint64_t page_bytes)
{
	char dir[KVS_SHM_DIR_MAX];

	kvs_log_warn(&c->log, "%s: removing a dead creator's data segment (node %d)",
		     c->cfg.unique_id, node);
	if (kvs_numa_hugetlb_dir(page_bytes, dir, sizeof(dir)) == 0)
		kvs_numa_seg_unlink_at(dir, c->cfg.unique_id, node, &c->log);
	kvs_numa_seg_unlink_at(KVS_NUMA_SHM_DIR, c->cfg.unique_id, node, &c->log);
}

/* Record segment s (created as m) in the header. */
static int record_seg(struct kvs_cache *c, struct kvs_shm_seg *sg, const struct kvs_numa_seg *m)
{
	struct kvs_shm_header *h = c->hdr;

	if (m->backing == KVS_NUMA_BACKING_HUGETLB) {
		const char *slash = strrchr(m->path, '/');
		size_t n = slash ? (size_t)(slash - m->path) : 0;

		if (n == 0 || n >= sizeof(h->hugetlb_dir)) {
			kvs_log_error(&c->log, "%s: hugetlbfs mount path of %s too long to record",
				      c->cfg.unique_id, m->path);
			unlink(m->path); /* unrecorded: nobody else could remove it */
			return -ENAMETOOLONG;
		}
		memcpy(h->hugetlb_dir, m->path, n);
		h->hugetlb_dir[n] = '\0';
	}
	sg->bound_node = m->node;
	sg->backing = m->backing;
	sg->page_bytes = m->page_bytes;
	sg->bytes = m->bytes;
	sg->prefault_ns = m->prefault_ns;
	sg->prefault_threads = m->prefault_threads;
	if (sg->backing != KVS_NUMA_BACKING_HUGETLB && KVS_KERNEL && c->cfg.hugetlb == KVS_HUGETLB_AUTO)
		h->fallbacks |= KVS_FALLBACK_HUGETLB;
	/* A NUMA fallback is a binding that was wanted (the segment is for a
	 * node), possible (the machine has several nodes with memory) and not
	 * had; an unbound segment on a one-node machine, or with no node known,
	 * lost nothing. */
	if (sg->node >= 0 && sg->bound_node < 0 && c->cfg.numa == KVS_NUMA_AUTO &&
	    kvs_numa_node_count() > 1)
		h->fallbacks |= KVS_FALLBACK_NUMA;
	return 0;
}

/* Segment s of fp's seg_count: its slots (count), and the node it is for. */
static uint64_t seg_slots(struct kvs_cache *c, const struct kvs_shm_fingerprint *fp, uint32_t s,
			  int32_t *node)
{
	uint32_t n = fp->seg_count;

	*node = n == 1 ? my_node(c) : (int32_t)s;
	return fp->slot_count / n + (s < fp->slot_count % n);
}

/*
 * Refuse a cache the machine cannot hold before any of it exists (numa/fit.c):
 * a mistyped capacity must be an error naming the key, not an OOM kill of a
 * random process on the node.
 */
int kvs_core_segs_check_fit(struct kvs_cache *c, const struct kvs_shm_fingerprint *fp,
			    const struct kvs_core_regions *r)
{
	uint64_t bytes[KVS_MAX_SEGS], data = 0;
	int32_t nodes[KVS_MAX_SEGS];
	struct kvs_numa_seg_opts o;
	int rc;

	for (uint32_t s = 0; s < fp->seg_count; s++) {
		bytes[s] = seg_slots(c, fp, s, &nodes[s]) * fp->slot_bytes;
		data += bytes[s];
	}
	seg_opts(c, &o);
	rc = kvs_numa_fit(r->ctl_bytes, bytes, nodes, fp->seg_count, &o);
	if (rc && rc != -KVS_ENOHUGE) /* the pool's shortage is said with its fix */
		kvs_log_error(&c->log, "%s: a cache of %llu slots of %llu bytes (%.2f GiB) does not "
			      "fit this node now: ask for fewer slots (slot_count), or free memory "
			      "first",
			      c->cfg.unique_id, (unsigned long long)fp->slot_count,
			      (unsigned long long)fp->slot_bytes, (double)data / (double)(1ull << 30));
	return rc;
}

int kvs_core_segs_create(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	uint32_t n = h->fp.seg_count;
	uint64_t first = 0;
	struct kvs_numa_seg_opts o;
	int rc = 0;

	seg_opts(c, &o);
	for (uint32_t s = 0; s < n && rc == 0; s++) {
		struct kvs_shm_seg *sg = &h->segs[s];
		uint64_t count = seg_slots(c, &h->fp, s, &sg->node);
		uint64_t rsv = h->fp.reserved_slots / n + (s < h->fp.reserved_slots % n);
		uint64_t bytes = count * h->fp.slot_bytes;

		sg->first_slot = first;
		sg->slot_count = count;
		sg->reserved_count = rsv < count ? rsv : count - 1;
		first += count;
		rc = kvs_numa_seg_create(c->cfg.unique_id, sg->node, bytes, &o, &c->segs[s]);
		if (rc == -EEXIST) {
			unlink_orphan(c, sg->node, o.page_bytes ? o.page_bytes : KVS_NUMA_DEFAULT_PAGE_BYTES);
			rc = kvs_numa_seg_create(c->cfg.unique_id, sg->node, bytes, &o, &c->segs[s]);
		}
		if (rc)
			kvs_log_error(&c->log, "data segment %u (node %d, %llu bytes): %s", s, sg->node,
				      (unsigned long long)bytes, kvs_strerror(rc));
		else
			rc = record_seg(c, sg, &c->segs[s]);
	}
	return rc;
}

/* Map the data segments the header records (watchers map none), with the
 * geometry of the validated header copied into the handle. */
int kvs_core_segs_attach(struct kvs_cache *c)
{
	struct kvs_shm_header *h = c->hdr;
	struct kvs_numa_seg_opts o;
	int32_t node = my_node(c);

	seg_opts(c, &o);
	c->seg_count = h->fp.seg_count;
	for (uint32_t s = 0; s < c->seg_count; s++) {
		const struct kvs_shm_seg *sg = &h->segs[s];
		int rc;

		c->geo[s] = (struct kvs_core_seg){ sg->first_slot, sg->slot_count, sg->reserved_count };
		if (sg->node == node && node >= 0)
			c->home_seg = s;
		if (c->cfg.device_id < 0 || c->segs[s].base)
			continue; /* watchers map no data; the creator has its own */
		o.dir = seg_dir(h, sg);
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
