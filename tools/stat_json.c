/*
 * tools/stat_json.c — `kvshare stat --json`: the snapshot as one JSON object
 * (jansson), indented; with --watch one compact object per line, so that a
 * reader takes one line at a time.  A stale cache's object is the description
 * from the look ("state": "stale", its dead ranks, not reaped); a live one's
 * has the census, the segments, the node's cache and store counters, whom an
 * attach reaped since the last look, and an object per rank-table entry.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>

#include "tools/stat.h"

#define JSET(o, k, v) json_object_set_new((o), (k), (v))
#define JU(v) json_integer((json_int_t)(v))

static json_t *json_cache_stats(const struct kvs_cache_stats *c)
{
	json_t *o = json_object();

	JSET(o, "queries", JU(c->hits + c->joins + c->misses));
	JSET(o, "hits", JU(c->hits));
	JSET(o, "joins", JU(c->joins));
	JSET(o, "misses", JU(c->misses));
	JSET(o, "owner_fills", JU(c->owner_fills));
	JSET(o, "dedup_hits", JU(c->hits + c->joins)); /* of loads: dumps' are dump_gets */
	JSET(o, "dump_gets", JU(c->dump_gets));
	JSET(o, "waits", JU(c->waits));
	JSET(o, "wait_ns", JU(c->wait_ns));
	JSET(o, "failures", JU(c->failures));
	JSET(o, "evictions", JU(c->evictions));
	JSET(o, "clock_sweeps", JU(c->clock_sweeps));
	JSET(o, "takeovers", JU(c->takeovers));
	JSET(o, "lock_repairs", JU(c->lock_repairs));
	JSET(o, "ranks_reaped", JU(c->ranks_reaped));
	JSET(o, "enospc", JU(c->enospc));
	JSET(o, "data_bytes", JU(c->data_bytes));
	JSET(o, "prefault_ns", JU(c->prefault_ns));
	JSET(o, "prefault_ms_per_gib", json_real(c->prefault_ms_per_gib));
	JSET(o, "prefault_threads", JU(c->prefault_threads));
	return o;
}

static json_t *json_store_stats(const struct kvs_store_stats *s)
{
	json_t *o = json_object(), *lat = json_object(), *hist = json_array();
	uint64_t n = 0;

	JSET(o, "tasks_load", JU(s->tasks_load));
	JSET(o, "tasks_dump", JU(s->tasks_dump));
	JSET(o, "tasks_prefetch", JU(s->tasks_prefetch));
	JSET(o, "tasks_failed", JU(s->tasks_failed));
	JSET(o, "tasks_timedout", JU(s->tasks_timedout));
	JSET(o, "shards_loaded", JU(s->shards_loaded));
	JSET(o, "shards_dumped", JU(s->shards_dumped));
	JSET(o, "dump_dedup", JU(s->dump_dedup));
	JSET(o, "load_hits", JU(s->load_hits));
	JSET(o, "owner_reads", JU(s->owner_reads));
	JSET(o, "read_errors", JU(s->read_errors));
	JSET(o, "backend_writes", JU(s->backend_writes));
	JSET(o, "write_errors", JU(s->write_errors));
	JSET(o, "prealloc", JU(s->prealloc));
	JSET(o, "prealloc_hits", JU(s->prealloc_hits));
	JSET(o, "copy_bytes", JU(s->copy_bytes));
	JSET(o, "copy_ns", JU(s->copy_ns));
	JSET(o, "copy_gbps", json_real(stat_copy_gbps(s)));
	JSET(o, "register_total_bytes", JU(s->register_total_bytes));
	JSET(o, "registered_bytes", JU(s->registered_bytes));
	JSET(o, "register_ns", JU(s->register_ns));
	JSET(o, "register_ms_per_gib", json_real(s->register_ms_per_gib));
	JSET(o, "staged_shards", JU(s->staged_shards));
	JSET(o, "ready", json_boolean(s->ready));
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
		json_array_append_new(hist, JU(s->task_lat_us[i]));
	JSET(lat, "p50_us_max", JU(stat_lat_quantile_us(s, 0.50, &n)));
	JSET(lat, "p90_us_max", JU(stat_lat_quantile_us(s, 0.90, NULL)));
	JSET(lat, "p99_us_max", JU(stat_lat_quantile_us(s, 0.99, NULL)));
	JSET(lat, "p999_us_max", JU(stat_lat_quantile_us(s, 0.999, NULL)));
	JSET(lat, "tasks", JU(n));
	JSET(lat, "log2_us_buckets", hist);
	JSET(o, "task_latency", lat);
	return o;
}

static json_t *json_dead(const struct kvs_cache_info_rank *v, uint32_t n)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:i, s:i, s:i}", "entry", (int)v[i].entry, "pid",
						   (int)v[i].pid, "device_id", (int)v[i].device_id));
	return a;
}

static json_t *json_snap(const struct stat_snap *s)
{
	const struct kvs_cache_info *in = &s->info;
	const struct kvs_cache_stats *n = &s->node;
	json_t *o = json_object(), *slots, *segs, *ranks, *fb;
	char mode[8];

	JSET(o, "unique_id", json_string(in->unique_id));
	JSET(o, "time", json_real((double)s->when.tv_sec + (double)s->when.tv_nsec / 1e9));
	JSET(o, "library", json_pack("{s:s, s:s}", "version", kvs_version(), "variant", kvs_variant()));
	JSET(o, "state", json_string(s->attached ? "live" : "stale"));
	JSET(o, "attached", json_boolean(s->attached));
	JSET(o, "layout_version", JU(in->layout_version));
	JSET(o, "persist", json_boolean(in->flags & KVS_CACHE_INFO_PERSIST));
	JSET(o, "owner_uid", JU(in->uid));
	snprintf(mode, sizeof(mode), "%04o", in->mode);
	JSET(o, "mode", json_string(mode));
	JSET(o, "local_rank_size", JU(in->local_rank_size));
	JSET(o, "shards_per_block", JU(in->shards_per_block));
	JSET(o, "reserved_slots", JU(in->reserved_slots));
	JSET(o, "ctl_bytes", JU(in->ctl_bytes));
	JSET(o, "data_bytes", JU(in->data_bytes));
	if (!s->attached) {
		JSET(o, "ranks_attached", JU(0));
		JSET(o, "ranks_dead", JU(s->ndead));
		JSET(o, "dead_ranks", json_dead(s->dead, s->ndead)); /* not reaped: not attached */
		JSET(o, "slot_count", JU(in->slot_count));
		JSET(o, "slot_bytes", JU(in->slot_bytes));
		JSET(o, "capacity_bytes", JU(in->slot_count * in->slot_bytes));
		JSET(o, "slots_dirty", JU(in->slots_dirty)); /* what keeps a stale cache */
		JSET(o, "adoptions", JU(in->adoptions));
		return o;
	}
	JSET(o, "ranks_attached", JU(n->ranks_attached));
	/* device_id >= 0, then by copy engine: GPU (cuda, or no store) or CPU-only (host) */
	JSET(o, "device_ranks_attached", JU(n->gpu_ranks_attached));
	JSET(o, "gpu_ranks_attached", JU(stat_live_of_kind(s, STAT_KIND_GPU)));
	JSET(o, "cpu_ranks_attached", JU(stat_live_of_kind(s, STAT_KIND_CPU)));
	JSET(o, "reaped", json_dead(s->reaped, s->nreaped)); /* since the last look or gather */
	JSET(o, "lrs_mismatch", JU(n->lrs_mismatch));
	JSET(o, "adoptions", JU(n->adoptions));
	JSET(o, "slot_count", JU(n->slot_count));
	JSET(o, "slot_bytes", JU(n->slot_bytes));
	JSET(o, "capacity_bytes", JU(n->slot_count * n->slot_bytes));
	slots = json_object();
	JSET(slots, "ready", JU(n->slots_ready));
	JSET(slots, "dirty", JU(n->slots_dirty)); /* dumped, not in the backend yet */
	JSET(slots, "loading", JU(n->slots_loading));
	JSET(slots, "failed", JU(n->slots_failed));
	JSET(slots, "empty", JU(stat_slots_empty(n)));
	JSET(slots, "pinned", JU(n->slots_pinned));
	JSET(o, "slots", slots);
	fb = json_array();
	if (n->fallbacks & KVS_FALLBACK_HUGETLB)
		json_array_append_new(fb, json_string("hugetlb"));
	if (n->fallbacks & KVS_FALLBACK_NUMA)
		json_array_append_new(fb, json_string("numa"));
	JSET(o, "fallbacks", fb);
	segs = json_array();
	for (uint32_t i = 0; i < s->nsegs; i++) {
		const struct kvs_cache_seg_info *g = &s->segs[i];

		json_array_append_new(segs, json_pack("{s:i, s:s, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:s}",
			"segment", (int)g->seg, "backing", stat_backing_name(g->backing),
			"page_bytes", (json_int_t)g->page_bytes, "node", (int)g->node,
			"bound_node", (int)g->bound_node, "bytes", (json_int_t)g->bytes,
			"first_slot", (json_int_t)g->first_slot, "slot_count", (json_int_t)g->slot_count,
			"reserved_count", (json_int_t)g->reserved_count, "path", g->path));
	}
	JSET(o, "segments", segs);
	JSET(o, "cache", json_cache_stats(n));
	JSET(o, "store", json_store_stats(&s->store));
	ranks = json_array();
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		json_t *r = json_object();

		JSET(r, "entry", JU(e->ri.entry));
		JSET(r, "pid", json_integer(e->ri.pid));
		JSET(r, "device_id", json_integer(e->ri.device_id));
		JSET(r, "watcher", json_boolean(e->ri.device_id < 0));
		JSET(r, "kind", json_string(stat_kind_name(&e->ri)));
		JSET(r, "copy_engine", e->ri.copy_engine == KVS_COPY_ENGINE_HOST ? json_string("host")
				       : e->ri.copy_engine == KVS_COPY_ENGINE_CUDA ? json_string("cuda")
										    : json_null());
		JSET(r, "numa_node", e->cpu_node >= 0 ? json_integer(e->cpu_node) : json_null());
		JSET(r, "alive", json_boolean(e->ri.alive));
		JSET(r, "self", json_boolean(e->ri.self));
		JSET(r, "pins", JU(e->ri.pins));
		JSET(r, "cache", json_cache_stats(&e->cs));
		JSET(r, "store", json_store_stats(&e->ss));
		json_array_append_new(ranks, r);
	}
	JSET(o, "ranks", ranks);
	return o;
}

int stat_print_json(FILE *f, const struct stat_snap *s, bool compact)
{
	json_t *o = json_snap(s);
	int rc = json_dumpf(o, f, compact ? JSON_COMPACT : JSON_INDENT(2));

	json_decref(o);
	fputc('\n', f);
	return rc ? -EIO : 0;
}
