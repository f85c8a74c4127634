/*
 * tools/stat.h — what the files of `kvshare stat` share: the snapshot of one
 * interval (struct stat_snap, a struct stat_rank per attached entry), what the
 * rate lines of --watch keep of the interval before (struct stat_rates), the
 * helpers more than one output uses, and the calls between the files:
 *
 *   stat.c       the command: options, the look (kvs_cache_inspect), the attach
 *                as a watcher, gather, the --watch loop (kvs_cli_stat); the
 *                helpers below
 *   stat_text.c  the text output: the block, and the rate lines of --watch
 *   stat_json.c  --json (jansson)
 *   stat_prom.c  --prometheus: the node-exporter textfile, published atomically
 *
 * The outputs only read a snapshot and write to a FILE: what touches the cache
 * (look, attach, gather) and what stat decides from it stays in stat.c.
 */
#ifndef KVS_TOOLS_STAT_H
#define KVS_TOOLS_STAT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "kvshare.h"

/* One attached rank-table entry and its counters. */
struct stat_rank {
	struct kvs_cache_rank_info ri;
	struct kvs_cache_stats cs;
	struct kvs_store_stats ss;
	int cpu_node; /* node of the CPU the process last ran on (/proc), -1 unknown */
};

/* Everything one interval shows. */
struct stat_snap {
	int look_rc;                /* kvs_cache_inspect's result at the last look */
	struct kvs_cache_info info; /* the header as inspected before attaching */
	struct kvs_cache_stats node;
	struct kvs_store_stats store;
	struct kvs_cache_seg_info segs[KVS_CACHE_MAX_SEGS];
	uint32_t nsegs;
	struct stat_rank ranks[KVS_CACHE_MAX_RANKS];
	uint32_t nranks;
	int self;          /* our entry */
	bool attached;     /* false: a read-only description (stale cache) */
	struct timespec when;
	/* Entries seen dead (attached, process gone) at the last look or gather,
	 * and those of them gone since: reaped (by stat's attach or a peer's). */
	struct kvs_cache_info_rank dead[KVS_CACHE_MAX_RANKS];
	uint32_t ndead;
	struct kvs_cache_info_rank reaped[KVS_CACHE_MAX_RANKS];
	uint32_t nreaped;
};

/* What the rate lines of --watch keep of the interval before: its counters and
 * time, and how many lines so far (stat_text.c repeats the header). */
struct stat_rates {
	struct kvs_cache_stats node;
	struct kvs_store_stats store;
	struct timespec when;
	unsigned lines;
	bool have;
};

/* ------------------------------------------------------------------------ */
/* The helpers the outputs share (stat.c)                                     */

/* What an entry is: a GPU rank (its store copies with cuda, or it has no
 * store: a device_id names a GPU), a CPU-only rank (its store copies with the
 * host engine: device addresses are host memory), or a watcher. */
enum stat_kind { STAT_KIND_GPU, STAT_KIND_CPU, STAT_KIND_WATCHER };

enum stat_kind stat_rank_kind(const struct kvs_cache_rank_info *ri);
/* "gpu", "cpu" or "watcher": the kind of ri, as every output names it. */
const char *stat_kind_name(const struct kvs_cache_rank_info *ri);
/* Live ranks of a kind (this stat is a watcher: not among them). */
uint32_t stat_live_of_kind(const struct stat_snap *s, enum stat_kind k);

/* "hugetlb", "shm" or "none": a segment's KVS_CACHE_BACKING_*. */
const char *stat_backing_name(uint32_t b);
/* Upper bound (us) of the latency bucket holding quantile q of the tasks, or 0
 * with no task; the number of tasks into *count (when not NULL). */
uint64_t stat_lat_quantile_us(const struct kvs_store_stats *s, double q, uint64_t *count);
/* Copy throughput in GB/s (0 with no copy time). */
double stat_copy_gbps(const struct kvs_store_stats *s);
/* Slots neither READY, loading nor FAILED (the census is racy: never below 0). */
uint64_t stat_slots_empty(const struct kvs_cache_stats *c); /* none of ready, dirty, loading, failed */

/* ------------------------------------------------------------------------ */
/* The outputs                                                                */

/* stat_text.c: the block (a stale cache: its read-only description), and the
 * rate line of the interval since r (r->lines counts them: a header comes
 * first and every so many lines). */
void stat_print_text(FILE *f, const struct stat_snap *s);
void stat_print_rates(FILE *f, const struct stat_snap *s, struct stat_rates *r);

/* stat_json.c: one object, indented, or compact on one line (--watch);
 * 0 or -EIO. */
int stat_print_json(FILE *f, const struct stat_snap *s, bool compact);

/* stat_prom.c: the metrics of an attached cache (kvshare_up 1), or with none
 * to attach to (kvshare_up 0: the look's state); stat_prom_publish writes what
 * emit writes to path atomically: 0 or -errno. */
void stat_prom_write(FILE *f, const struct stat_snap *s);
void stat_prom_write_down(FILE *f, const struct stat_snap *s);
int stat_prom_publish(const char *path, const struct stat_snap *s,
		      void (*emit)(FILE *, const struct stat_snap *));

#endif
