/*
 * tools/stat_text.c — the text output of `kvshare stat`, the default: one block
 * per interval (state, ranks, capacity, slots, each data segment, startup,
 * fallbacks, the gets of loads and of dumps, waits, failures, eviction,
 * recovery, the store counters, a row per rank-table entry), or for a stale
 * cache the read-only description from the look.  With --watch the whole block
 * comes once at each attach, then a line per interval of its rates
 * (stat_print_rates).
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "tools/cli.h"
#include "tools/stat.h"

/* ns for people: "850 ns", "1.5 us", "2.0 ms", "1.25 s" (into buf, returned). */
static const char *human_ns(char *buf, size_t len, double ns)
{
	if (ns < 1e3)
		snprintf(buf, len, "%.0f ns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1f us", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.1f ms", ns / 1e6);
	else
		snprintf(buf, len, "%.2f s", ns / 1e9);
	return buf;
}

/* "  reaped     1 rank: pid 1234 (entry 3, device 0) -- why" (nothing for none). */
static void print_dead(FILE *f, const char *label, const char *why,
		       const struct kvs_cache_info_rank *v, uint32_t n)
{
	if (!n)
		return;
	fprintf(f, "  %-10s %u rank%s:", label, n, n == 1 ? "" : "s");
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%s pid %d (entry %u, %s %d)", i ? "," : "", (int)v[i].pid, v[i].entry,
			v[i].device_id >= 0 ? "device" : "watcher", (int)v[i].device_id);
	fprintf(f, " -- %s\n", why);
}

void stat_print_text(FILE *f, const struct stat_snap *s)
{
	const struct kvs_cache_info *in = &s->info;
	const struct kvs_cache_stats *n = &s->node;
	const struct kvs_store_stats *st = &s->store;
	char b1[32], b2[32], b3[32], b4[32], tbuf[64];
	uint32_t gpu = 0, cpu = 0, watchers = 0, dead = 0;
	char who[96];
	size_t k = 0;
	struct tm tm;

	localtime_r(&s->when.tv_sec, &tm);
	strftime(tbuf, sizeof(tbuf), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(f, "kvshare stat %s   %s   (libkvshare %s, %s)\n", in->unique_id, tbuf,
		kvs_version(), kvs_variant());
	if (!s->attached) {
		fprintf(f, "  state      stale: no live process attached; not attached (attaching would adopt it)\n");
		fprintf(f, "  capacity   %" PRIu64 " slots x %s = %s (%u shard%s/block, %u reserved)\n",
			in->slot_count, kvs_cli_human_bytes(b1, sizeof(b1), in->slot_bytes),
			kvs_cli_human_bytes(b2, sizeof(b2), in->slot_count * in->slot_bytes), in->shards_per_block,
			in->shards_per_block == 1 ? "" : "s",
			in->reserved_slots);
		fprintf(f, "  size       control %s + data %s (%u segment%s on %s)\n",
			kvs_cli_human_bytes(b1, sizeof(b1), in->ctl_bytes), kvs_cli_human_bytes(b2, sizeof(b2), in->data_bytes),
			in->seg_count, in->seg_count == 1 ? "" : "s",
			in->flags & KVS_CACHE_INFO_HUGETLB ? in->hugetlb_dir : "/dev/shm");
		if (in->slots_dirty)
			fprintf(f, "  dirty      %" PRIu64 " slots dumped, their blocks not in the backend yet: "
				"the cache is kept for the next store to open it, which writes them\n",
				in->slots_dirty);
		fprintf(f, "  lifetime   layout %u, persist %s, adopted %u time(s), owner uid %u mode %04o\n",
			in->layout_version, in->flags & KVS_CACHE_INFO_PERSIST ? "on" : "off",
			in->adoptions, in->uid, in->mode);
		print_dead(f, "dead", "died, not reaped (the next attach reaps them)", s->dead, s->ndead);
		return;
	}
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct kvs_cache_rank_info *ri = &s->ranks[i].ri;

		if (!ri->alive)
			dead++;
		else if (stat_rank_kind(ri) == STAT_KIND_GPU)
			gpu++;
		else if (stat_rank_kind(ri) == STAT_KIND_CPU)
			cpu++;
		else
			watchers++;
	}
	/* "2 GPU ranks", "2 CPU-only ranks", "1 GPU rank + 1 CPU-only rank" */
	if (gpu || !cpu)
		k = (size_t)snprintf(who, sizeof(who), "%u GPU rank%s", gpu, gpu == 1 ? "" : "s");
	if (cpu && k < sizeof(who))
		snprintf(who + k, sizeof(who) - k, "%s%u CPU-only rank%s", k ? " + " : "", cpu,
			 cpu == 1 ? "" : "s");
	fprintf(f, "  state      live: %s + %u watcher%s attached (this stat included)%s; "
		"layout %u, persist %s, adopted %u time(s)\n",
		who, watchers, watchers == 1 ? "" : "s",
		dead ? ", dead entries not reaped yet" : "", in->layout_version,
		in->flags & KVS_CACHE_INFO_PERSIST ? "on" : "off", n->adoptions);
	print_dead(f, "reaped", "died; reaped (its pins dropped) since stat looked: by stat's attach "
		   "or a peer's", s->reaped, s->nreaped);
	fprintf(f, "  ranks      local_rank_size %u, ranks seen %u%s%s\n", in->local_rank_size,
		n->gpu_ranks_attached,
		n->gpu_ranks_attached > in->local_rank_size ? " (MORE than local_rank_size)" :
		n->gpu_ranks_attached < in->local_rank_size ? " (fewer than local_rank_size)" : "",
		n->lrs_mismatch ? "; attaches beyond it so far: see lrs_mismatch" : "");
	fprintf(f, "  capacity   %" PRIu64 " slots x %s = %s (%u shard%s/block, %u reserved); control %s\n",
		n->slot_count, kvs_cli_human_bytes(b1, sizeof(b1), n->slot_bytes),
		kvs_cli_human_bytes(b2, sizeof(b2), n->slot_count * n->slot_bytes), in->shards_per_block,
		in->shards_per_block == 1 ? "" : "s",
		in->reserved_slots, kvs_cli_human_bytes(b3, sizeof(b3), in->ctl_bytes));
	fprintf(f, "  slots      ready %" PRIu64 ", dirty %" PRIu64 ", loading %" PRIu64 ", failed %" PRIu64
		", empty %" PRIu64 "; pinned %" PRIu64 "\n",
		n->slots_ready, n->slots_dirty, n->slots_loading, n->slots_failed, stat_slots_empty(n),
		n->slots_pinned);
	for (uint32_t i = 0; i < s->nsegs; i++) {
		const struct kvs_cache_seg_info *g = &s->segs[i];
		char node[16] = "none", bound[24] = "not bound";

		if (g->node >= 0)
			snprintf(node, sizeof(node), "%d", g->node);
		if (g->bound_node >= 0)
			snprintf(bound, sizeof(bound), "bound to %d", g->bound_node);
		fprintf(f, "  %-10s segment %u: %s, %s pages, node %s (%s), %s, slots %" PRIu64 "-%" PRIu64
			", %s\n", i == 0 ? "backing" : "", g->seg, stat_backing_name(g->backing),
			kvs_cli_human_bytes(b1, sizeof(b1), g->page_bytes), node, bound, kvs_cli_human_bytes(b2, sizeof(b2), g->bytes),
			g->first_slot, g->first_slot + g->slot_count - 1, g->path[0] ? g->path : "?");
	}
	fprintf(f, "  startup    pre-fault %s in %s by up to %u threads (%.1f ms/GiB); registered %s of %s"
		" (%.1f ms/GiB), %s; %" PRIu64 " shard copies staged\n",
		kvs_cli_human_bytes(b1, sizeof(b1), n->data_bytes),
		human_ns(b2, sizeof(b2), (double)n->prefault_ns), n->prefault_threads,
		n->prefault_ms_per_gib, kvs_cli_human_bytes(b3, sizeof(b3), st->registered_bytes),
		kvs_cli_human_bytes(b4, sizeof(b4), st->register_total_bytes), st->register_ms_per_gib,
		n->gpu_ranks_attached == 0 ? "no live rank"
		: st->ready ? "every live rank ready"
			    : "NOT ready (a live rank's registration in progress or failed)",
		st->staged_shards);
	fprintf(f, "  fallbacks  %s%s%s\n", n->fallbacks ? "" : "none",
		n->fallbacks & KVS_FALLBACK_HUGETLB ? "hugetlb (data plane on /dev/shm, not hugetlbfs) " : "",
		n->fallbacks & KVS_FALLBACK_NUMA ? "numa (no NUMA binding)" : "");
	uint64_t queries = n->hits + n->joins + n->misses;
	fprintf(f, "  gets       %" PRIu64 " (loads) = %" PRIu64 " hits (READY) + %" PRIu64 " joins (a read "
		"in flight) + %" PRIu64 " misses (owner: read it); served by the tier %.1f%% "
		"(hits + joins), hit ratio %.1f%%; %" PRIu64 " owner fills\n",
		queries, n->hits, n->joins, n->misses,
		queries ? 100.0 * (double)(n->hits + n->joins) / (double)queries : 0.0,
		queries ? 100.0 * (double)n->hits / (double)queries : 0.0, n->owner_fills);
	fprintf(f, "  dumps      %" PRIu64 " gets (not in the loads' above): %" PRIu64 " shards "
		"gathered, %" PRIu64 " dedup (already READY, or a peer's dump)\n", n->dump_gets,
		st->shards_dumped, st->dump_dedup);
	fprintf(f, "  waits      %" PRIu64 " kvs_slot_wait calls, %s in all (mean %s)\n", n->waits,
		human_ns(b1, sizeof(b1), (double)n->wait_ns),
		human_ns(b2, sizeof(b2), n->waits ? (double)n->wait_ns / (double)n->waits : 0.0));
	fprintf(f, "  failures   %" PRIu64 " fills failed; %" PRIu64 " takeovers of dead fillers; %" PRIu64
		" gets refused (every slot pinned)\n", n->failures, n->takeovers, n->enospc);
	fprintf(f, "  eviction   %" PRIu64 " evictions, %" PRIu64 " CLOCK sweeps\n", n->evictions,
		n->clock_sweeps);
	fprintf(f, "  recovery   %" PRIu64 " lock repairs, %" PRIu64 " dead ranks reaped, %" PRIu64
		" attaches beyond local_rank_size\n", n->lock_repairs, n->ranks_reaped, n->lrs_mismatch);
	uint64_t ntasks = 0;
	uint64_t p50 = stat_lat_quantile_us(st, 0.50, &ntasks), p90 = stat_lat_quantile_us(st, 0.90, NULL);
	uint64_t p99 = stat_lat_quantile_us(st, 0.99, NULL), p999 = stat_lat_quantile_us(st, 0.999, NULL);
	fprintf(f, "  store      tasks: %" PRIu64 " load, %" PRIu64 " dump, %" PRIu64 " prefetch; %" PRIu64
		" failed (%" PRIu64 " timed out)\n", st->tasks_load, st->tasks_dump, st->tasks_prefetch,
		st->tasks_failed, st->tasks_timedout);
	fprintf(f, "             shards: %" PRIu64 " loaded (%" PRIu64 " READY at get), %" PRIu64
		" dumped, %" PRIu64 " dump dedup; owner reads %" PRIu64 " (%" PRIu64 " errors), backend "
		"writes %" PRIu64 " (%" PRIu64 " errors); prealloc %" PRIu64 " (%" PRIu64 " hit)\n",
		st->shards_loaded, st->load_hits, st->shards_dumped, st->dump_dedup, st->owner_reads,
		st->read_errors, st->backend_writes, st->write_errors, st->prealloc, st->prealloc_hits);
	if (ntasks)
		fprintf(f, "             latency (%" PRIu64 " tasks, log2 buckets): p50 <= %" PRIu64
			" us, p90 <= %" PRIu64 " us, p99 <= %" PRIu64 " us, p99.9 <= %" PRIu64 " us\n",
			ntasks, p50, p90, p99, p999);
	else
		fprintf(f, "             latency: no task finished yet\n");
	fprintf(f, "             copy %s in %s = %.2f GB/s\n", kvs_cli_human_bytes(b1, sizeof(b1), st->copy_bytes),
		human_ns(b2, sizeof(b2), (double)st->copy_ns), stat_copy_gbps(st));
	fprintf(f, "  per rank   %-5s %-8s %-7s %-7s %-4s %-5s %5s %9s %9s %9s %9s %9s %9s %7s %9s\n",
		"ENTRY", "PID", "DEVICE", "KIND", "NODE", "ALIVE", "PINS", "HITS", "JOINS", "MISSES",
		"DEDUP", "FILLS", "WAITS", "TASKS", "SHARDS");
	for (uint32_t i = 0; i < s->nranks; i++) {
		const struct stat_rank *e = &s->ranks[i];
		char dev[16], node[16] = "-";

		if (e->ri.device_id >= 0)
			snprintf(dev, sizeof(dev), "%d", e->ri.device_id);
		else
			snprintf(dev, sizeof(dev), "-");
		if (e->cpu_node >= 0)
			snprintf(node, sizeof(node), "%d", e->cpu_node);
		fprintf(f, "  %-10s %-5u %-8d %-7s %-7s %-4s %-5s %5u %9" PRIu64 " %9" PRIu64 " %9" PRIu64
			" %9" PRIu64 " %9" PRIu64 " %9" PRIu64 " %7" PRIu64 " %9" PRIu64 "\n", "",
			e->ri.entry, (int)e->ri.pid, dev, stat_kind_name(&e->ri), node,
			e->ri.self ? "self" : e->ri.alive ? "yes" : "DEAD", e->ri.pins, e->cs.hits,
			e->cs.joins, e->cs.misses, e->ss.dump_dedup, e->cs.owner_fills, e->cs.waits,
			e->ss.tasks_load + e->ss.tasks_dump + e->ss.tasks_prefetch, e->ss.shards_loaded);
	}
}

/*
 * --watch in text: the whole block once (at each attach), then one line per
 * interval of what happened in it, as vmstat does: rates per second over the
 * interval and its latency percentile, a header every RATE_HEADER_EVERY lines.
 */
#define RATE_HEADER_EVERY 20

/* now - before of a counter read racily twice: never negative. */
static uint64_t delta(uint64_t now, uint64_t before)
{
	return now > before ? now - before : 0;
}

static double per_s(uint64_t now, uint64_t before, double secs)
{
	return secs > 0 ? (double)delta(now, before) / secs : 0;
}

void stat_print_rates(FILE *f, const struct stat_snap *s, struct stat_rates *r)
{
	const struct kvs_cache_stats *n = &s->node, *p = &r->node;
	const struct kvs_store_stats *st = &s->store, *q = &r->store;
	double secs = (double)(s->when.tv_sec - r->when.tv_sec) +
		      (double)(s->when.tv_nsec - r->when.tv_nsec) / 1e9;
	uint64_t gets = n->hits + n->joins + n->misses, gets0 = p->hits + p->joins + p->misses;
	uint64_t tasks = 0;
	struct kvs_store_stats d = { 0 };
	struct tm tm;
	char when[16];

	if (r->lines++ % RATE_HEADER_EVERY == 0)
		fprintf(f, "%-8s %9s %6s %6s %6s %9s %9s %10s %8s %6s %9s %5s\n", "time", "gets/s",
			"hit%", "join%", "miss%", "reads/s", "writes/s", "loaded/s", "tasks/s",
			"fail/s", "p99<=ms", "ranks");
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		d.task_lat_us[i] = delta(st->task_lat_us[i], q->task_lat_us[i]);
		tasks += d.task_lat_us[i];
	}
	localtime_r(&s->when.tv_sec, &tm);
	strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fprintf(f, "%-8s %9.0f %6.1f %6.1f %6.1f %9.0f %9.0f %10.0f %8.1f %6.1f %9.3f %5u\n", when,
		per_s(gets, gets0, secs),
		gets > gets0 ? 100.0 * (double)delta(n->hits, p->hits) / (double)(gets - gets0) : 0,
		gets > gets0 ? 100.0 * (double)delta(n->joins, p->joins) / (double)(gets - gets0) : 0,
		gets > gets0 ? 100.0 * (double)delta(n->misses, p->misses) / (double)(gets - gets0) : 0,
		per_s(st->owner_reads, q->owner_reads, secs),
		per_s(st->backend_writes, q->backend_writes, secs),
		per_s(st->shards_loaded, q->shards_loaded, secs), (double)tasks / (secs > 0 ? secs : 1),
		per_s(st->tasks_failed, q->tasks_failed, secs),
		tasks ? (double)stat_lat_quantile_us(&d, 0.99, NULL) / 1e3 : 0.0, n->gpu_ranks_attached);
}
