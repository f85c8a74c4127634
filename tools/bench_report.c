/*
 * tools/bench_report.c — what `kvshare bench` prints: each run's summary
 * (from the ranks' results, the counting backend's counts and the latency
 * samples in the shared block), the ratios against the private run, the
 * table and the --json document.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "tools/bench.h"

/* ------------------------------------------------------------------------ */
/* Sizes for people                                                          */

void b_fmt_size(char *buf, size_t n, uint64_t b)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, n, "%" PRIu64 " %s", (uint64_t)v, unit[u]);
	else
		snprintf(buf, n, "%.1f %s", v, unit[u]);
}

/* ------------------------------------------------------------------------ */
/* Results                                                                   */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Percentile q of the store's log2 histogram: the bucket's upper bound, us. */
static double hist_pct(const uint64_t *h, double q)
{
	uint64_t n = 0, acc = 0;

	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
		n += h[i];
	if (!n)
		return 0;
	for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++) {
		acc += h[i];
		if ((double)acc >= q * (double)n)
			return (double)(2ull << i);
	}
	return 0;
}

void b_summarize(struct b_shm *sh, uint32_t runi, struct b_sum *s)
{
	const struct b_params *p = &sh->p;
	struct b_run *run = &sh->run[runi];
	uint64_t hist[KVS_STORE_LAT_BUCKETS] = { 0 }, n = 0;
	uint32_t fb = 0, ntask = 0, *lat;
	double cpu = 0;

	memset(s, 0, sizeof(*s));
	s->ok = run->rc == 0;
	s->hugetlb = run->hugetlb;
	s->backing = run->rank[0].backing;
	s->wall_s = (double)(run->end_ns - run->t0_ns) / 1e9;
	for (uint32_t r = 0; r < p->ranks; r++) {
		const struct b_rank *k = &run->rank[r];

		s->delivered += k->bytes;
		s->shards += k->shards;
		s->bad += k->bad_shards;
		s->hits += k->cs.hits;
		s->joins += k->cs.joins;
		s->misses += k->cs.misses;
		s->waits += k->cs.waits;
		s->evictions += k->cs.evictions;
		s->owner_reads += k->ss.owner_reads;
		fb |= k->cs.fallbacks;
		cpu += s->wall_s > 0 ? (double)k->cpu_ns / 1e9 / s->wall_s : 0;
		for (int i = 0; i < KVS_STORE_LAT_BUCKETS; i++)
			hist[i] += k->ss.task_lat_us[i];
		ntask += (uint32_t)k->tasks;
		if (k->engine == ENGINE_CUDA)
			snprintf(s->engine, sizeof(s->engine), "cuda");
		if (k->backing != s->backing)
			s->backing = B_BACKING_MIXED;
	}
	if (!s->engine[0])
		snprintf(s->engine, sizeof(s->engine), "host");
	s->gets = s->hits + s->joins + s->misses;
	/* relaxed: every writer has exited */
	s->reads = atomic_load_explicit(&run->count.reads, memory_order_relaxed);
	s->read_bytes = atomic_load_explicit(&run->count.read_bytes, memory_order_relaxed);
	s->writes = atomic_load_explicit(&run->count.writes, memory_order_relaxed);
	s->max_inflight = (uint64_t)atomic_load_explicit(&run->count.max_inflight, memory_order_relaxed);
	s->gbps = s->wall_s > 0 ? (double)s->delivered / s->wall_s / 1e9 : 0;
	s->dedup = s->read_bytes ? (double)s->delivered / (double)s->read_bytes : 0;
	s->hit = s->gets ? (double)s->hits / (double)s->gets : 0;
	s->join = s->gets ? (double)s->joins / (double)s->gets : 0;
	s->cpu_pct = 100.0 * cpu / p->ranks;
	s->hp50_us = hist_pct(hist, 0.50);
	s->hp99_us = hist_pct(hist, 0.99);
	lat = malloc(((size_t)ntask + 1) * sizeof(*lat));
	if (lat) {
		for (uint32_t r = 0; r < p->ranks; r++) {
			const uint32_t *l = sh_lat(sh, runi, r);

			for (uint64_t t = 0; t < run->rank[r].tasks && n < ntask; t++)
				lat[n++] = l[t];
		}
		qsort(lat, n, sizeof(*lat), cmp_u32);
		if (n) {
			s->p50_ms = lat[(n - 1) / 2] / 1e3;
			s->p99_ms = lat[(uint64_t)((double)(n - 1) * 0.99)] / 1e3;
		}
		free(lat);
	}
	s->fallbacks[0] = '\0';
	if (fb & KVS_FALLBACK_HUGETLB)
		strcat(s->fallbacks, "shm,");
	if (fb & KVS_FALLBACK_NUMA)
		strcat(s->fallbacks, "numa,");
	if (atomic_load_explicit(&run->io_fallback, memory_order_relaxed))
		strcat(s->fallbacks, "pool,");
	if (atomic_load_explicit(&run->engine_fallback, memory_order_relaxed))
		strcat(s->fallbacks, "host,");
	size_t fl = strlen(s->fallbacks);
	if (fl)
		s->fallbacks[fl - 1] = '\0';
	else
		snprintf(s->fallbacks, sizeof(s->fallbacks), "-");
}

static const char *backing_name(uint32_t backing)
{
	switch (backing) {
	case KVS_CACHE_BACKING_HUGETLB:
		return "hugetlb";
	case KVS_CACHE_BACKING_SHM:
		return "shm";
	case B_BACKING_MIXED:
		return "mixed";
	default:
		return "-";
	}
}

static const char *hugetlb_name(uint32_t mode)
{
	return mode == KVS_HUGETLB_REQUIRED ? "required" : mode == KVS_HUGETLB_OFF ? "off" : "auto";
}

/* ------------------------------------------------------------------------ */
/* Over a configuration's runs: medians and ranges                           */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median (the mean of the middle two of an even count), min and max. */
static struct b_stat stat_of(double *v, uint32_t n)
{
	struct b_stat st = { 0, 0, 0 };

	if (!n)
		return st;
	qsort(v, n, sizeof(*v), cmp_double);
	st.min = v[0];
	st.max = v[n - 1];
	st.med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return st;
}

/* A double field of struct b_sum (offsetof) over the configuration's runs. */
static struct b_stat conf_stat(const struct b_conf *c, size_t field)
{
	double v[B_REPEAT_MAX];

	for (uint32_t r = 0; r < c->nrep; r++)
		v[r] = *(const double *)((const char *)&c->rep[r] + field);
	return stat_of(v, c->nrep);
}
#define CONF_STAT(c, f) conf_stat((c), offsetof(struct b_sum, f))

/* The comparable pair: a configuration and private, both run and ok. */
static bool comparable(const struct b_report *rp, uint32_t i)
{
	const struct b_conf *c = &rp->conf[i], *v = &rp->conf[RUN_PRIVATE];

	return i != RUN_PRIVATE && c->ran && c->ok && v->ran && v->ok && c->nrep && v->nrep;
}

/* Shared configuration i against private, round by round (run r of each: the
 * configurations alternate, so run r of both saw the same machine): the
 * speedup (private wall / its wall) and the backend bytes (its / private's). */
static bool ratios(const struct b_report *rp, uint32_t i, struct b_stat *speed,
		   struct b_stat *bytes, double *each)
{
	const struct b_conf *c = &rp->conf[i], *v = &rp->conf[RUN_PRIVATE];
	uint32_t n = c->nrep < v->nrep ? c->nrep : v->nrep;
	double sp[B_REPEAT_MAX], by[B_REPEAT_MAX];

	if (!comparable(rp, i))
		return false;
	for (uint32_t r = 0; r < n; r++) {
		const struct b_sum *s = &c->rep[r], *p = &v->rep[r];

		sp[r] = s->wall_s > 0 ? p->wall_s / s->wall_s : 0;
		by[r] = p->read_bytes ? (double)s->read_bytes / (double)p->read_bytes : 0;
		if (each)
			each[r] = sp[r];
	}
	*speed = stat_of(sp, n);
	*bytes = stat_of(by, n);
	return true;
}

/* The target, on the medians: 1/ranks of private's backend bytes, >= 2x faster. */
static bool target_met(const struct b_report *rp, uint32_t i)
{
	struct b_stat sp, by;

	return ratios(rp, i, &sp, &by, NULL) && by.med <= 1.0 / rp->sh->p.ranks + 1e-9 &&
	       sp.med >= 2.0;
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */

static void print_header(const struct b_report *rp)
{
	const struct b_params *p = &rp->sh->p;
	char sb[32], cap[32], uq[32], qdesc[96];

	b_fmt_size(sb, sizeof(sb), p->shard_bytes);
	b_fmt_size(cap, sizeof(cap), p->cap_slots * p->shard_bytes);
	b_fmt_size(uq, sizeof(uq), rp->unique_bytes);
	printf("kvshare bench: %u ranks, %s: %u requests, %u blocks x %u shards x %s = %s unique, "
	       "%u block loads per rank\n",
	       p->ranks, rp->workload_desc, p->nreq, p->nblocks, p->shards, sb, uq, p->naccess);
	if (rp->trace_note[0])
		printf("%s\n", rp->trace_note);
	if (p->qd && p->latency_ns)
		snprintf(qdesc, sizeof(qdesc), "at most %u reads in flight per rank (~%.0f MiB/s per rank)",
			 p->qd, (double)p->qd * (double)p->shard_bytes / ((double)p->latency_ns / 1e9) / (1 << 20));
	else if (p->qd)
		snprintf(qdesc, sizeof(qdesc), "at most %u reads in flight per rank", p->qd);
	else
		snprintf(qdesc, sizeof(qdesc), "reads in flight unbounded");
	if (p->backend == BACKEND_POSIX)
		printf("store: posix %s (%s), %" PRIu64 " shards dumped by one process in %.3f s\n",
		       p->root, rp->o->keep ? "kept" : "removed at exit", rp->unique_shards, rp->fill_s);
	else if (p->backend == BACKEND_REDIS)
		printf("store: redis %s%s, keys %s* (%s), %" PRIu64 " shards dumped by one process "
		       "in %.3f s\n", p->redis_cluster ? "cluster seeded by " : "", p->redis_endpoints,
		       p->redis_prefix,
		       p->redis_ttl_ms ? "expire in 1 h" : "kept", rp->unique_shards, rp->fill_s);
	if (p->backend == BACKEND_LATENCY) {
		printf("backend: latency (synthetic: the dumped pattern, no fill), %" PRIu64
		       " us per read, %s\n", p->latency_ns / 1000, qdesc);
	} else {
		const char *kind = p->backend == BACKEND_REDIS ? "redis" : "posix";

		if (p->latency_ns)
			printf("backend: %s, every read held %" PRIu64 " us longer, %s%s\n", kind,
			       p->latency_ns / 1000, qdesc,
			       rp->o->drop_cache ? "; page cache dropped before each run" : "");
		else
			printf("backend: %s, raw, %s%s\n", kind, qdesc,
			       rp->o->drop_cache ? "; page cache dropped before each run" : "");
	}
	printf("cache: %s per cache (%" PRIu64 " slots); copy engine %s\n", cap, p->cap_slots,
	       rp->engine_note);
	printf("%s\n", rp->backing_note);
	if (rp->repeat == 1)
		printf("runs: each configuration once (--repeat N: medians and ranges of N)\n\n");
	else
		printf("runs: each configuration %u times, alternating; the table shows medians, "
		       "the min-max row the range\n\n", rp->repeat);
}

/* "lo-hi" with prec decimals and a suffix. */
static const char *range(char *buf, size_t n, struct b_stat st, int prec, const char *suffix)
{
	snprintf(buf, n, "%.*f-%.*f%s", prec, st.min, prec, st.max, suffix);
	return buf;
}

static void print_row(const struct b_report *rp, uint32_t i)
{
	const struct b_params *p = &rp->sh->p;
	const struct b_conf *c = &rp->conf[i];
	const struct b_sum *s0 = &c->rep[0];
	struct b_stat wall = CONF_STAT(c, wall_s), gbps = CONF_STAT(c, gbps);
	struct b_stat cpu = CONF_STAT(c, cpu_pct), p50 = CONF_STAT(c, p50_ms);
	struct b_stat p99 = CONF_STAT(c, p99_ms), hit = CONF_STAT(c, hit);
	struct b_stat join = CONF_STAT(c, join), sp, by;
	char spd[24] = "-", a[5][32], e[24];
	bool cmp = ratios(rp, i, &sp, &by, NULL);
	/* dedup = reuse (in a rank: its loads of bytes it already read) x shared
	 * (across ranks: the ranks' unique bytes per backend byte; 1x private) */
	double unique = (double)rp->unique_bytes * p->ranks;
	double reuse = unique > 0 ? (double)s0->delivered / unique : 0;
	double shared = s0->read_bytes ? unique / (double)s0->read_bytes : 0;
	const double gib = (double)(1u << 30) / 1e9;

	if (cmp)
		snprintf(spd, sizeof(spd), "%.2fx", sp.med);
	printf("%-14s %-7s %-7s %11.3f %11.2f %11.1f %7" PRIu64 " %5.1fx %5.1fx %5.1f %5.1f %11.1f "
	       "%11.2f %11.2f %11s  %s\n",
	       rp->sh->run[i].name, c->variant, backing_name(s0->backing), wall.med,
	       gbps.med / gib, (double)s0->read_bytes / (1 << 20), s0->reads, reuse, shared,
	       100.0 * hit.med, 100.0 * join.med, cpu.med, p50.med, p99.med, spd, s0->fallbacks);
	if (rp->repeat == 1)
		return;
	gbps.min /= gib;
	gbps.max /= gib;
	printf("%-30s %11s %11s %11s %7s %6s %6s %5s %5s %11s %11s %11s %11s\n", "  min-max",
	       range(a[0], sizeof(a[0]), wall, 3, ""), range(a[1], sizeof(a[1]), gbps, 2, ""), "",
	       "", "", "", "", "", range(a[2], sizeof(a[2]), cpu, 1, ""),
	       range(a[3], sizeof(a[3]), p50, 2, ""), range(a[4], sizeof(a[4]), p99, 2, ""),
	       cmp ? range(e, sizeof(e), sp, 2, "x") : "");
}

void b_print_table(const struct b_report *rp)
{
	const struct b_params *p = &rp->sh->p;

	print_header(rp);
	printf("%-14s %-7s %-7s %11s %11s %11s %7s %6s %6s %5s %5s %11s %11s %11s %11s  %s\n",
	       "run", "library", "backing", "wall s", "GiB/s", "backend MiB", "reads", "reuse",
	       "shared", "hit%", "join%", "cpu%/rank", "p50 ms", "p99 ms", "speedup", "fallbacks");
	for (uint32_t i = 0; i < B_RUNS; i++) {
		const struct b_conf *c = &rp->conf[i];

		if (!c->ran)
			printf("%-14s %-7s  skipped: %s\n", rp->sh->run[i].name, "-", c->skip);
		else if (!c->ok)
			printf("%-14s %-7s  FAILED (run %u of %u): %s\n", rp->sh->run[i].name,
			       c->variant[0] ? c->variant : "-", c->nrep, rp->repeat, c->err);
		else
			print_row(rp, i);
	}
	printf("\n");
	bool any = false;
	for (uint32_t i = RUN_KERNEL; i <= RUN_PLAIN; i++) {
		struct b_stat sp, by;

		if (!ratios(rp, i, &sp, &by, NULL))
			continue;
		if (!any)
			printf("shared vs private%s:\n", rp->repeat == 1 ? "" : " (medians, range)");
		any = true;
		printf("  %-13s backend bytes %.3f of private (1/%.1f), speedup %.2fx",
		       rp->sh->run[i].name, by.med, by.med > 0 ? 1 / by.med : 0, sp.med);
		if (rp->repeat == 1)
			printf("\n");
		else
			printf(" (%.2f-%.2fx)\n", sp.min, sp.max);
	}
	if (p->ranks == 1) {
		printf("target: none with 1 rank (sharing needs 2 ranks or more; --ranks N)\n");
	} else if (any) {
		const char *met = "not met";
		bool km = target_met(rp, RUN_KERNEL), pm = target_met(rp, RUN_PLAIN);
		bool kr = rp->conf[RUN_KERNEL].ran, pr = rp->conf[RUN_PLAIN].ran;

		if ((!kr || km) && (!pr || pm))
			met = "met";
		else if (km)
			met = "met by kernel shared only";
		else if (pm)
			met = "met by plain shared only";
		printf("target (%u ranks): shared runs read 1/%u of the private run's backend bytes "
		       "and finish >= 2x faster (medians): %s\n", p->ranks, p->ranks, met);
	}
	uint32_t nconf = 0;
	uint64_t shards = 0;
	bool allok = true;
	for (uint32_t i = 0; i < B_RUNS; i++)
		if (rp->conf[i].ran) {
			nconf++;
			shards = rp->conf[i].rep[0].shards / p->ranks;
			allok &= rp->conf[i].ok;
		}
	if (allok)
		printf("verified: every rank's %" PRIu64 " shard loads per run equal the dumped bytes "
		       "(%u configurations x %u runs x %u ranks)\n", shards, nconf, rp->repeat,
		       p->ranks);
	printf("\ncolumns (medians over the runs; min-max: the range):\n"
	       "  backing      the caches' memory: hugetlb (hugetlbfs) or shm (/dev/shm)\n"
	       "  wall s       start to the last rank's finish\n"
	       "  GiB/s        bytes copied into the ranks' tensors / wall\n"
	       "  backend MiB  bytes the backend served (counted at the backend), reads: its reads\n"
	       "  reuse        in a rank: bytes delivered / the ranks' unique bytes (repeated prefixes)\n"
	       "  shared       across ranks: the ranks' unique bytes / backend bytes (1.0x: private)\n"
	       "  hit%%, join%%  gets that found the shard READY / joined a read in flight (the rest:\n"
	       "               misses, one backend read each)\n"
	       "  cpu%%/rank    the rank processes' CPU (all threads) / wall, per rank\n"
	       "  p50/p99 ms   per task (at most %u blocks of a request), submit to kvs_store_wait's "
	       "return\n"
	       "  speedup      private's wall / this one's, run by run (run r of each)\n"
	       "  fallbacks    shm: no hugetlbfs; numa: no binding; pool: io_uring refused; host: no "
	       "CUDA engine\n", p->task_max_blocks);
}

/* ------------------------------------------------------------------------ */
/* --json                                                                    */

static json_t *json_sum(const struct b_report *rp, const struct b_sum *s)
{
	json_t *o = json_object();

	json_object_set_new(o, "ok", json_boolean(s->ok));
	json_object_set_new(o, "wall_s", json_real(s->wall_s));
	json_object_set_new(o, "delivered_bytes", json_integer((json_int_t)s->delivered));
	json_object_set_new(o, "gb_per_s", json_real(s->gbps));
	json_object_set_new(o, "backend_reads", json_integer((json_int_t)s->reads));
	json_object_set_new(o, "backend_read_bytes", json_integer((json_int_t)s->read_bytes));
	json_object_set_new(o, "backend_writes", json_integer((json_int_t)s->writes));
	json_object_set_new(o, "backend_max_inflight", json_integer((json_int_t)s->max_inflight));
	json_object_set_new(o, "owner_reads", json_integer((json_int_t)s->owner_reads));
	json_object_set_new(o, "unique_shards", json_integer((json_int_t)rp->unique_shards));
	json_object_set_new(o, "dedup", json_real(s->dedup));
	json_object_set_new(o, "gets", json_integer((json_int_t)s->gets));
	json_object_set_new(o, "hits", json_integer((json_int_t)s->hits));
	json_object_set_new(o, "joins", json_integer((json_int_t)s->joins));
	json_object_set_new(o, "misses", json_integer((json_int_t)s->misses));
	json_object_set_new(o, "waits", json_integer((json_int_t)s->waits));
	json_object_set_new(o, "evictions", json_integer((json_int_t)s->evictions));
	json_object_set_new(o, "hit_ratio", json_real(s->hit));
	json_object_set_new(o, "join_ratio", json_real(s->join));
	json_object_set_new(o, "cpu_pct_per_rank", json_real(s->cpu_pct));
	json_object_set_new(o, "task_latency_ms",
			    json_pack("{s:f,s:f,s:s}", "p50", s->p50_ms, "p99", s->p99_ms, "source",
				      "per task: submit to kvs_store_wait return, measured by the rank"));
	json_object_set_new(o, "store_task_latency_us",
			    json_pack("{s:f,s:f,s:s}", "p50", s->hp50_us, "p99", s->hp99_us, "source",
				      "kvs_store_stats task_lat_us (log2 buckets: the bucket's upper bound)"));
	json_object_set_new(o, "hugetlb", json_string(hugetlb_name(s->hugetlb)));
	json_object_set_new(o, "backing", json_string(backing_name(s->backing)));
	json_object_set_new(o, "fallbacks", json_string(s->fallbacks));
	json_object_set_new(o, "copy_engine", json_string(s->engine));
	json_object_set_new(o, "verified_shards", json_integer((json_int_t)s->shards));
	json_object_set_new(o, "bad_shards", json_integer((json_int_t)s->bad));
	return o;
}

static json_t *json_stat(struct b_stat st)
{
	return json_pack("{s:f,s:f,s:f}", "median", st.med, "min", st.min, "max", st.max);
}

static json_t *json_conf(const struct b_report *rp, uint32_t i)
{
	const struct b_conf *c = &rp->conf[i];
	json_t *o = json_object(), *runs = json_array(), *st;

	json_object_set_new(o, "name", json_string(rp->sh->run[i].name));
	json_object_set_new(o, "share_buffer", json_boolean(rp->sh->run[i].share));
	json_object_set_new(o, "ran", json_boolean(c->ran));
	if (!c->ran) {
		json_object_set_new(o, "skipped", json_string(c->skip));
		return o;
	}
	json_object_set_new(o, "library", json_string(c->variant));
	json_object_set_new(o, "library_version", json_string(c->version));
	json_object_set_new(o, "ok", json_boolean(c->ok));
	if (!c->ok)
		json_object_set_new(o, "error", json_string(c->err));
	for (uint32_t r = 0; r < c->nrep; r++)
		json_array_append_new(runs, json_sum(rp, &c->rep[r]));
	json_object_set_new(o, "runs", runs);
	st = json_object();
	json_object_set_new(st, "wall_s", json_stat(CONF_STAT(c, wall_s)));
	json_object_set_new(st, "gb_per_s", json_stat(CONF_STAT(c, gbps)));
	json_object_set_new(st, "cpu_pct_per_rank", json_stat(CONF_STAT(c, cpu_pct)));
	json_object_set_new(st, "task_latency_p50_ms", json_stat(CONF_STAT(c, p50_ms)));
	json_object_set_new(st, "task_latency_p99_ms", json_stat(CONF_STAT(c, p99_ms)));
	json_object_set_new(st, "hit_ratio", json_stat(CONF_STAT(c, hit)));
	json_object_set_new(st, "join_ratio", json_stat(CONF_STAT(c, join)));
	json_object_set_new(o, "summary", st);
	return o;
}

void b_print_json(const struct b_report *rp, bool ok)
{
	const struct b_params *p = &rp->sh->p;
	const char *wl[] = { "prefix", "scan", "trace" };
	const char *be[] = { "posix", "latency", "redis" };
	json_t *root = json_object(), *confs = json_array(), *rs = json_object(), *cfg;

	json_object_set_new(root, "kvshare_version", json_string(kvs_version()));
	json_object_set_new(root, "cli_variant", json_string(KVS_CLI_VARIANT));
	cfg = json_pack("{s:i,s:i,s:i,s:I,s:I,s:I,s:s,s:I,s:i,s:s,s:s?,s:I,s:s,s:b,s:b,s:i}",
			"ranks", (int)p->ranks, "blocks", (int)p->nblocks, "shards", (int)p->shards,
			"shard_bytes", (json_int_t)p->shard_bytes,
			"capacity_bytes", (json_int_t)(p->cap_slots * p->shard_bytes),
			"capacity_slots", (json_int_t)p->cap_slots, "backend", be[p->backend],
			"latency_us", (json_int_t)(p->latency_ns / 1000), "qd", (int)p->qd,
			"workload", wl[p->workload], "trace", rp->o->trace,
			"seed", (json_int_t)p->seed, "copy_engine", rp->engine_note,
			"drop_cache", rp->o->drop_cache, "kept", rp->o->keep,
			"repeat", (int)rp->repeat);
	if (p->backend == BACKEND_POSIX)
		json_object_set_new(cfg, "root", json_string(p->root));
	if (p->backend == BACKEND_REDIS)
		json_object_set_new(cfg, "redis", json_pack("{s:s,s:s,s:I,s:b}", "endpoints",
							    p->redis_endpoints, "key_prefix",
							    p->redis_prefix, "ttl_ms",
							    (json_int_t)p->redis_ttl_ms, "cluster",
							    (int)p->redis_cluster));
	json_object_set_new(root, "config", cfg);
	json_object_set_new(root, "workload", json_pack(
		"{s:s,s:i,s:i,s:i,s:I,s:I,s:i,s:I,s:s?}",
		"description", rp->workload_desc, "requests", (int)p->nreq, "tasks_per_rank",
		(int)p->ntasks, "unique_blocks", (int)p->nblocks,
		"unique_shards", (json_int_t)rp->unique_shards,
		"unique_bytes", (json_int_t)rp->unique_bytes,
		"block_loads_per_rank", (int)p->naccess,
		"shard_loads_per_rank", (json_int_t)((uint64_t)p->naccess * p->shards),
		"sized_from_trace", rp->trace_note[0] ? rp->trace_note : NULL));
	json_object_set_new(root, "backing", json_string(rp->backing_note));
	json_object_set_new(root, "fill", json_pack("{s:b,s:f}", "done", rp->filled, "seconds",
						   rp->fill_s));
	for (uint32_t i = 0; i < B_RUNS; i++)
		json_array_append_new(confs, json_conf(rp, i));
	json_object_set_new(root, "configurations", confs);
	for (uint32_t i = RUN_KERNEL; i <= RUN_PLAIN; i++) {
		struct b_stat sp, by;
		double each[B_REPEAT_MAX];
		json_t *arr = json_array();

		if (!ratios(rp, i, &sp, &by, each)) {
			json_decref(arr);
			continue;
		}
		for (uint32_t r = 0; r < rp->conf[i].nrep && r < rp->conf[RUN_PRIVATE].nrep; r++)
			json_array_append_new(arr, json_real(each[r]));
		json_object_set_new(rs, i == RUN_KERNEL ? "kernel_shared" : "plain_shared",
				    json_pack("{s:f,s:o,s:o,s:b}", "backend_bytes_vs_private", by.med,
					      "speedup_vs_private", json_stat(sp), "speedup_per_run",
					      arr, "target_met", target_met(rp, i)));
	}
	json_object_set_new(root, "ratios", rs);
	if (rp->o->check)
		json_object_set_new(root, "check", json_pack("{s:b,s:s?}", "ok", !rp->check_failed,
							     "error", rp->check_failed ? rp->check_err : NULL));
	json_object_set_new(root, "ok", json_boolean(ok));
	json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
	fputc('\n', stdout);
	json_decref(root);
}
