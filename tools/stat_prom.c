/*
 * tools/stat_prom.c — `kvshare stat --prometheus FILE`: node-exporter textfile
 * metrics (kvshare_*), written to FILE.tmp and renamed over FILE each interval
 * (atomic for the collector).  kvshare_up comes first in every file: 1 attached
 * (stat_prom_write: the node's and the store's counters, and series per live
 * rank by device); with no live cache (absent, being created, stale),
 * stat_prom_write_down still writes kvshare_up 0 and the cache's state, for a
 * stale one its sizes, dead ranks and dirty slots.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/stat.h"

/* Live entries other than ours. */
static uint32_t others_alive(const struct stat_snap *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += s->ranks[i].ri.alive && !s->ranks[i].ri.self;
	return n;
}

/* Entries still attached whose process died (reaped at the next attach). */
static uint32_t dead_entries(const struct stat_snap *s)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->nranks; i++)
		n += !s->ranks[i].ri.alive;
	return n;
}

struct prom {
	FILE *f;
	const char *uid;
};

static void prom_head(struct prom *p, const char *name, const char *type, const char *help)
{
	fprintf(p->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name{unique_id="..."<extra>} value.  extra: "" or ",k=\"v\"...". */
static void prom_val(struct prom *p, const char *name, const char *extra, double v)
{
	fprintf(p->f, "%s{unique_id=\"%s\"%s} %.17g\n", name, p->uid, extra, v);
}

static void prom_one(struct prom *p, const char *name, const char *type, const char *help, double v)
{
	prom_head(p, name, type, help);
	prom_val(p, name, "", v);
}

/* Per-rank series are of live ranks (GPU or CPU-only), labelled by what an
 * operator knows: device (a rank-table entry is reused by whoever attaches
 * next; watchers, this exporter included, have no series). */
static bool prom_rank(const struct stat_rank *e)
{
	return e->ri.alive && e->ri.device_id >= 0;
}

static void prom_rank_counter(struct prom *p, const struct stat_snap *s, const char *name,
			      const char *help, size_t off_cache, size_t off_store, bool seconds)
{
	char lab[64];

	prom_head(p, name, "counter", help);
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		uint64_t v = off_cache != SIZE_MAX ? *(const uint64_t *)((const char *)&e->cs + off_cache)
						   : *(const uint64_t *)((const char *)&e->ss + off_store);

		if (!prom_rank(e))
			continue;
		snprintf(lab, sizeof(lab), ",device=\"%d\"", e->ri.device_id);
		prom_val(p, name, lab, seconds ? (double)v / 1e9 : (double)v);
	}
}

/* An exact le bound: 2^(i+1) microseconds in seconds, every digit. */
static void prom_le(char *buf, size_t len, int i)
{
	uint64_t us = UINT64_C(2) << i;

	snprintf(buf, len, ",le=\"%" PRIu64 ".%06" PRIu64 "\"", us / 1000000, us % 1000000);
}

/* The cache's state, one series per value (1: the current one). */
static const char *const prom_states[] = { "live", "stale", "creating", "absent", "other" };

/* kvshare_up: the first metric of every file, attached (1) or waiting (0);
 * then the state (live when attached). */
static void prom_up(struct prom *p, int up, const char *state)
{
	char lab[48];

	prom_one(p, "kvshare_up", "gauge", "1: the cache is live and this exporter is attached to it.", up);
	prom_head(p, "kvshare_cache_state", "gauge",
		  "1 for the cache's state: live (attached), stale (no live process: its memory "
		  "is held until a rank adopts it or kvshare clean removes it), creating, absent, "
		  "other (another layout, corrupt).");
	for (size_t i = 0; i < sizeof(prom_states) / sizeof(prom_states[0]); i++) {
		snprintf(lab, sizeof(lab), ",state=\"%s\"", prom_states[i]);
		prom_val(p, "kvshare_cache_state", lab, strcmp(state, prom_states[i]) == 0);
	}
}

void stat_prom_write(FILE *f, const struct stat_snap *s)
{
	struct prom p = { f, s->info.unique_id };
	const struct kvs_cache_stats *n = &s->node;
	const struct kvs_store_stats *st = &s->store;
	char lab[160];
	uint64_t cum = 0;

	snprintf(lab, sizeof(lab), ",layout_version=\"%u\",persist=\"%d\",library=\"%s\",variant=\"%s\"",
		 s->info.layout_version, !!(s->info.flags & KVS_CACHE_INFO_PERSIST), kvs_version(),
		 kvs_variant());
	prom_up(&p, 1, "live");
	prom_head(&p, "kvshare_cache_info", "gauge", "The cache is attached and described (value 1).");
	prom_val(&p, "kvshare_cache_info", lab, 1);
	prom_one(&p, "kvshare_ranks_attached", "gauge",
		 "Live processes attached (liveness lock held: GPU ranks and watchers, this exporter "
		 "not counted).", (double)others_alive(s));
	prom_one(&p, "kvshare_gpu_ranks_attached", "gauge",
		 "Live GPU ranks attached (device_id >= 0, copying with cuda, or without a store).",
		 (double)stat_live_of_kind(s, STAT_KIND_GPU));
	prom_one(&p, "kvshare_cpu_ranks_attached", "gauge",
		 "Live CPU-only ranks attached (device_id >= 0, their store copying with the host "
		 "engine).", (double)stat_live_of_kind(s, STAT_KIND_CPU));
	prom_one(&p, "kvshare_ranks_dead", "gauge",
		 "Entries of ranks that died and are not reaped yet (the next attach reaps them).",
		 (double)dead_entries(s));
	prom_one(&p, "kvshare_local_rank_size", "gauge", "Ranks per node the cache was made for.",
		 (double)s->info.local_rank_size);
	prom_one(&p, "kvshare_capacity_bytes", "gauge", "Data plane capacity: slot_count x slot_bytes.",
		 (double)(n->slot_count * n->slot_bytes));
	prom_one(&p, "kvshare_data_bytes", "gauge", "Size of the data segments together.",
		 (double)n->data_bytes);
	prom_one(&p, "kvshare_slot_bytes", "gauge", "Bytes of one slot (one shard).", (double)n->slot_bytes);
	prom_one(&p, "kvshare_control_bytes", "gauge", "Size of the control segment.",
		 (double)s->info.ctl_bytes);
	prom_head(&p, "kvshare_slots", "gauge", "Slots by state (a racy census).");
	prom_val(&p, "kvshare_slots", ",state=\"ready\"", (double)n->slots_ready);
	prom_val(&p, "kvshare_slots", ",state=\"dirty\"", (double)n->slots_dirty);
	prom_val(&p, "kvshare_slots", ",state=\"loading\"", (double)n->slots_loading);
	prom_val(&p, "kvshare_slots", ",state=\"failed\"", (double)n->slots_failed);
	prom_val(&p, "kvshare_slots", ",state=\"empty\"", (double)stat_slots_empty(n));
	prom_one(&p, "kvshare_slots_pinned", "gauge", "Slots pinned by at least one process.",
		 (double)n->slots_pinned);
	prom_head(&p, "kvshare_fallback", "gauge", "1 when the cache runs on a fallback: hugetlb (the "
		  "data plane on /dev/shm, hugetlb=auto), numa (a segment made for a node could "
		  "not be bound to it on a machine of several nodes, numa=auto).");
	prom_val(&p, "kvshare_fallback", ",kind=\"hugetlb\"", !!(n->fallbacks & KVS_FALLBACK_HUGETLB));
	prom_val(&p, "kvshare_fallback", ",kind=\"numa\"", !!(n->fallbacks & KVS_FALLBACK_NUMA));
	prom_head(&p, "kvshare_segment_bytes", "gauge", "Size of each data segment.");
	for (uint32_t i = 0; i < s->nsegs; i++) {
		snprintf(lab, sizeof(lab), ",segment=\"%u\",backing=\"%s\",node=\"%d\",page_bytes=\"%" PRIu64 "\"",
			 s->segs[i].seg, stat_backing_name(s->segs[i].backing), s->segs[i].node,
			 s->segs[i].page_bytes);
		prom_val(&p, "kvshare_segment_bytes", lab, (double)s->segs[i].bytes);
	}
#define NODE_COUNTER(name, field, help) prom_one(&p, name, "counter", help, (double)n->field)
	NODE_COUNTER("kvshare_hits_total", hits, "Gets of loads that found the slot READY (node, departed ranks included; dumps' gets are kvshare_dump_gets_total).");
	NODE_COUNTER("kvshare_joins_total", joins, "Gets of loads that joined a read in flight (served without a backend read of their own).");
	NODE_COUNTER("kvshare_misses_total", misses, "Gets of loads that made the caller the slot's owner.");
	prom_one(&p, "kvshare_queries_total", "counter", "Gets of loads: hits + joins + misses.",
		 (double)(n->hits + n->joins + n->misses));
	NODE_COUNTER("kvshare_dump_gets_total", dump_gets, "Gets of dumps (in no hit ratio): kvshare_store_dump_dedup_total of them found their shard.");
	NODE_COUNTER("kvshare_owner_fills_total", owner_fills, "Slots filled and published READY by their owner.");
	NODE_COUNTER("kvshare_waits_total", waits, "kvs_slot_wait calls for a slot being filled.");
	prom_one(&p, "kvshare_wait_seconds_total", "counter", "Time spent in those waits.",
		 (double)n->wait_ns / 1e9);
	NODE_COUNTER("kvshare_failures_total", failures, "Fills published FAILED.");
	NODE_COUNTER("kvshare_evictions_total", evictions, "Slots taken by CLOCK from another key.");
	NODE_COUNTER("kvshare_clock_sweeps_total", clock_sweeps, "Complete CLOCK passes over a pool.");
	NODE_COUNTER("kvshare_takeovers_total", takeovers, "Slots of dead fillers taken over.");
	NODE_COUNTER("kvshare_lock_repairs_total", lock_repairs, "Bucket locks recovered from a dead holder.");
	NODE_COUNTER("kvshare_ranks_reaped_total", ranks_reaped, "Dead ranks whose pins were dropped.");
	NODE_COUNTER("kvshare_enospc_total", enospc, "Gets refused because every candidate slot was pinned.");
	NODE_COUNTER("kvshare_lrs_mismatch_total", lrs_mismatch, "GPU rank attaches beyond local_rank_size.");
	NODE_COUNTER("kvshare_adoptions_total", adoptions, "Times the cache was adopted after its users died.");
#undef NODE_COUNTER
	prom_head(&p, "kvshare_store_tasks_total", "counter", "Store tasks submitted, by operation.");
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"load\"", (double)st->tasks_load);
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"dump\"", (double)st->tasks_dump);
	prom_val(&p, "kvshare_store_tasks_total", ",op=\"prefetch\"", (double)st->tasks_prefetch);
#define STORE_COUNTER(name, field, help) prom_one(&p, name, "counter", help, (double)st->field)
	STORE_COUNTER("kvshare_store_tasks_failed_total", tasks_failed, "Of the tasks, those finished with an error (timeouts included).");
	STORE_COUNTER("kvshare_store_tasks_timedout_total", tasks_timedout, "Tasks finished past their deadline.");
	STORE_COUNTER("kvshare_store_shards_loaded_total", shards_loaded, "Shards copied into tensors (or prefetched).");
	STORE_COUNTER("kvshare_store_shards_dumped_total", shards_dumped, "Shards gathered into the cache.");
	STORE_COUNTER("kvshare_store_dump_dedup_total", dump_dedup, "Dump shards skipped: already READY.");
	STORE_COUNTER("kvshare_store_load_hits_total", load_hits, "Load shards READY at get.");
	STORE_COUNTER("kvshare_store_owner_reads_total", owner_reads, "Backend reads attempted as owner (submitted, or refused at submit).");
	STORE_COUNTER("kvshare_store_read_errors_total", read_errors, "Of the owner reads, those that failed (at submit or completion): never more than them.");
	STORE_COUNTER("kvshare_store_backend_writes_total", backend_writes, "Backend writes attempted (submitted, or refused at submit).");
	STORE_COUNTER("kvshare_store_write_errors_total", write_errors, "Of the backend writes, those that failed (at submit or completion): never more than them.");
	STORE_COUNTER("kvshare_store_prealloc_total", prealloc, "Slots preallocated.");
	STORE_COUNTER("kvshare_store_prealloc_hits_total", prealloc_hits, "Owned gets of a preallocated key.");
	STORE_COUNTER("kvshare_store_copy_bytes_total", copy_bytes, "Bytes moved by the copy engines.");
	STORE_COUNTER("kvshare_store_staged_shards_total", staged_shards,
		      "Shard copies made through the staging buffer (slot not registered yet).");
#undef STORE_COUNTER
	prom_one(&p, "kvshare_store_register_bytes", "gauge",
		 "Data plane bytes the ranks register with their copy engines (node total).",
		 (double)st->register_total_bytes);
	prom_one(&p, "kvshare_store_registered_bytes", "gauge",
		 "Of those, registered (pinned) so far.", (double)st->registered_bytes);
	prom_one(&p, "kvshare_store_register_seconds_total", "counter",
		 "Time in the copy engines' registration calls.", (double)st->register_ns / 1e9);
	prom_one(&p, "kvshare_store_ready", "gauge",
		 "1 when every live rank's data plane is registered (direct DMA everywhere; 1 "
		 "with no live rank).", st->ready);
	prom_one(&p, "kvshare_prefault_seconds", "gauge",
		 "Time the creator took to pre-fault the data segments.", (double)n->prefault_ns / 1e9);
	prom_one(&p, "kvshare_store_copy_seconds_total", "counter", "Time in the copy engines.",
		 (double)st->copy_ns / 1e9);
	/* log2 microsecond buckets, exact bounds, and the sum of the times. */
	prom_head(&p, "kvshare_store_task_latency_seconds", "histogram",
		  "Task latency, submit to completion (log2 buckets).");
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		cum += st->task_lat_us[i];
		if (i == KVS_STORE_LAT_BUCKETS - 1)
			break; /* the last bucket is open-ended: +Inf below */
		prom_le(lab, sizeof(lab), i);
		prom_val(&p, "kvshare_store_task_latency_seconds_bucket", lab, (double)cum);
	}
	prom_val(&p, "kvshare_store_task_latency_seconds_bucket", ",le=\"+Inf\"", (double)cum);
	prom_val(&p, "kvshare_store_task_latency_seconds_sum", "",
		 (double)st->task_lat_ns_sum / 1e9);
	prom_val(&p, "kvshare_store_task_latency_seconds_count", "", (double)cum);

	/* Per live GPU rank, by device (prom_rank). */
	prom_head(&p, "kvshare_rank_info", "gauge",
		  "A live rank attached (value 1); kind gpu, or cpu (CPU-only: host copies).");
	for (uint32_t i = 0; i < s->nranks; i++)
		if (prom_rank(&s->ranks[i])) {
			snprintf(lab, sizeof(lab), ",device=\"%d\",kind=\"%s\"", s->ranks[i].ri.device_id,
				 stat_kind_name(&s->ranks[i].ri));
			prom_val(&p, "kvshare_rank_info", lab, 1);
		}
	prom_head(&p, "kvshare_rank_pins", "gauge", "Slots the rank pins now.");
	for (uint32_t i = 0; i < s->nranks; i++)
		if (prom_rank(&s->ranks[i])) {
			snprintf(lab, sizeof(lab), ",device=\"%d\"", s->ranks[i].ri.device_id);
			prom_val(&p, "kvshare_rank_pins", lab, s->ranks[i].ri.pins);
		}
#define OC(f) offsetof(struct kvs_cache_stats, f), SIZE_MAX
#define OS(f) SIZE_MAX, offsetof(struct kvs_store_stats, f)
	prom_rank_counter(&p, s, "kvshare_rank_hits_total", "Gets of loads that hit, per rank.", OC(hits), false);
	prom_rank_counter(&p, s, "kvshare_rank_joins_total", "Gets of loads that joined a read in flight, per rank.", OC(joins), false);
	prom_rank_counter(&p, s, "kvshare_rank_misses_total", "Gets of loads that made it owner, per rank.", OC(misses), false);
	prom_rank_counter(&p, s, "kvshare_rank_store_dump_dedup_total", "Dump shards found READY or being dumped (not gathered), per rank.", OS(dump_dedup), false);
	prom_rank_counter(&p, s, "kvshare_rank_owner_fills_total", "Slots it filled, per rank.", OC(owner_fills), false);
	prom_rank_counter(&p, s, "kvshare_rank_waits_total", "kvs_slot_wait calls, per rank.", OC(waits), false);
	prom_rank_counter(&p, s, "kvshare_rank_wait_seconds_total", "Time waiting, per rank.", OC(wait_ns), true);
	prom_rank_counter(&p, s, "kvshare_rank_store_shards_loaded_total", "Shards loaded, per rank.", OS(shards_loaded), false);
	prom_rank_counter(&p, s, "kvshare_rank_store_owner_reads_total", "Backend reads as owner, per rank.", OS(owner_reads), false);
#undef OC
#undef OS
}

/* With no live cache to attach to (--watch waiting, or a stale cache):
 * kvshare_up 0 and the state; a stale cache's memory, which stays held until
 * it is adopted or cleaned, its dead ranks and its dirty slots, from the look
 * (inspect). */
void stat_prom_write_down(FILE *f, const struct stat_snap *s)
{
	struct prom p = { f, s->info.unique_id };
	const struct kvs_cache_info *in = &s->info;
	const char *state = s->look_rc == -ENOENT ? "absent"
			    : s->look_rc ? "other"
			    : in->state == KVS_CACHE_INFO_CREATING ? "creating"
			    : in->state != KVS_CACHE_INFO_READY ? "other"
			    : in->ranks_live == 0 ? "stale" : "absent"; /* live: went meanwhile */

	prom_up(&p, 0, state);
	if (strcmp(state, "stale") != 0)
		return;
	prom_one(&p, "kvshare_control_bytes", "gauge", "Size of the control segment.",
		 (double)in->ctl_bytes);
	prom_one(&p, "kvshare_data_bytes", "gauge", "Size of the data segments together.",
		 (double)in->data_bytes);
	prom_one(&p, "kvshare_capacity_bytes", "gauge", "Data plane capacity: slot_count x slot_bytes.",
		 (double)(in->slot_count * in->slot_bytes));
	prom_one(&p, "kvshare_ranks_dead", "gauge",
		 "Entries of ranks that died and are not reaped yet (the next attach reaps them).",
		 (double)in->ranks_dead);
	prom_one(&p, "kvshare_adoptions_total", "counter",
		 "Times the cache was adopted after its users died.", (double)in->adoptions);
	/* what keeps a stale cache: its dirty slots, written by the next opener */
	prom_head(&p, "kvshare_slots", "gauge", "Slots by state (a racy census).");
	prom_val(&p, "kvshare_slots", ",state=\"dirty\"", (double)in->slots_dirty);
}

/* Write FILE.tmp, then rename it over FILE: the collector sees the old file or
 * the new one, never a half-written one. */
int stat_prom_publish(const char *path, const struct stat_snap *s,
		      void (*emit)(FILE *, const struct stat_snap *))
{
	char tmp[4096];
	FILE *f;
	int fd, rc = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		close(fd);
		unlink(tmp);
		return rc;
	}
	emit(f, s);
	if (ferror(f))
		rc = -EIO;
	if (fclose(f) && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path))
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}
