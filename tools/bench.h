/*
 * tools/bench.h — what the files of `kvshare bench` share: the block every
 * process of a bench maps (struct b_shm: the parameters, one struct b_run per
 * configuration, then the workload arrays, the latency samples and the
 * reference bytes), the workload, options and summaries, and the calls between
 * the files:
 *
 *   bench.c          options and the orchestration (kvs_cli_bench)
 *   bench_work.c     the workload generators: prefix, scan, a Mooncake trace
 *   bench_rank.c     signals and children, one rank, one run of N ranks, the
 *                    plain run by re-execution
 *   bench_dev.c      the ranks' "device" buffers (host, or CUDA through a
 *                    dlopen'ed libcudart) and the copy-engine probe
 *   bench_backend.c  the counting backend every rank's store gets, and the
 *                    store's fill
 *   bench_report.c   summaries, the table and the JSON document
 */
#ifndef KVS_TOOLS_BENCH_H
#define KVS_TOOLS_BENCH_H

#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvshare.h"
#include "tools/count_backend.h"

#ifndef KVS_CLI_VARIANT
#define KVS_CLI_VARIANT "kernel"
#endif
#ifndef KVS_CLI_PLAIN_LIBDIR
#define KVS_CLI_PLAIN_LIBDIR ""
#endif

#define B_MAX_RANKS 64u
#define B_RUNS 3               /* configurations: kernel shared, plain shared, private */
#define B_REPEAT_MAX 20u       /* --repeat: runs of each configuration */
#define B_WINDOW 2u            /* tasks in flight per rank */
#define B_TASK_SHARDS 128u     /* a request is cut into tasks of at most this many shards
				  (whole blocks; at least one block) */
#define B_EDGE 64u             /* bytes poisoned at both ends of every shard before a load */
#define B_POISON 0xa5
#define B_TASK_TIMEOUT_NS (120ull * KVS_NSEC_PER_SEC) /* a task's deadline in the store */
#define B_START_TIMEOUT_NS (120ull * KVS_NSEC_PER_SEC) /* every rank opened its store */
#define B_RUN_TIMEOUT_NS (900ull * KVS_NSEC_PER_SEC)   /* start to the last rank's exit */
#define B_MAGIC 0x68636e6573766b31ull                  /* "1kvsench" */
#define B_ERR 256
#define B_BACKING_MIXED 99u    /* b_sum.backing: the ranks' caches got different ones */

enum { RUN_KERNEL = 0, RUN_PLAIN = 1, RUN_PRIVATE = 2 };
enum { BACKEND_POSIX = 0, BACKEND_LATENCY = 1, BACKEND_REDIS = 2 };
enum { WORK_PREFIX = 0, WORK_SCAN = 1, WORK_TRACE = 2 };
enum { ENGINE_AUTO = 0, ENGINE_HOST = 1, ENGINE_CUDA = 2 };

/* ------------------------------------------------------------------------ */
/* What the processes share (one memfd, MAP_SHARED)                          */

/* One rank's outcome, written by the rank, read by the parent after waitpid. */
struct b_rank {
	int32_t rc;               /* 0, or the first failure's code */
	uint32_t bad_shards;      /* loaded shards whose bytes differ from the dump */
	char err[B_ERR];          /* the first failure, one line */
	char liberr[B_ERR];       /* the library's first error log line */
	char libnuma[B_ERR];      /* its first numa: warning (why hugetlb=auto fell back) */
	uint64_t tasks, shards, bytes; /* loaded and verified */
	uint64_t finish_ns;       /* CLOCK_MONOTONIC at its last task's completion */
	uint64_t cpu_ns;          /* process CPU (all threads), start to finish, minus verify */
	uint32_t engine;          /* copy engine it opened: ENGINE_HOST or ENGINE_CUDA */
	uint32_t backing;         /* its cache's data segment 0: enum kvs_cache_backing */
	struct kvs_cache_stats cs; /* its own rank entry, at the end */
	struct kvs_store_stats ss;
};

struct b_run {
	/* Set by the parent before the run. */
	char name[24];            /* "kernel shared", "plain shared", "private" */
	char want_variant[16];    /* the library this run must load */
	char uid[KVS_UNIQUE_ID_MAX + 1];
	uint32_t share;           /* share_buffer_enable */
	uint32_t hugetlb;         /* the caches' enum kvs_hugetlb_mode (bench.c: the backing rule) */
	/* Set by the process that runs the ranks; zeroed before each run (b_run_reset). */
	uint32_t abort_run;       /* 1: a rank failed to open; the others do no work */
	char variant[16], version[16]; /* kvs_variant(), kvs_version() it loaded */
	int32_t rc;               /* 0 or the run's failure */
	char err[B_ERR];          /* the run's failure, one line */
	uint64_t t0_ns, end_ns;
	struct kvs_count count;       /* the counting backend, every rank's */
	_Atomic uint64_t progress;    /* shards loaded and verified, all ranks */
	_Atomic uint32_t io_engine;   /* kvs_backend_info of the wrapped backend */
	_Atomic uint32_t io_fallback; /* io_uring refused: the pool */
	_Atomic int32_t io_fallback_err;
	_Atomic uint32_t engine_fallback; /* cuda wanted, the library had none: host */
	struct b_rank rank[B_MAX_RANKS];
};

struct b_params {
	uint32_t ranks, shards, backend, workload;
	uint64_t shard_bytes, cap_slots, latency_ns;
	uint32_t qd, engine;      /* engine: resolved, ENGINE_HOST or ENGINE_CUDA */
	uint32_t verbose, task_max_blocks;
	uint32_t nblocks, ntasks, naccess, nreq;
	uint64_t seed;
	char root[PATH_MAX];      /* the posix store */
	char redis_endpoints[KVS_REDIS_ENDPOINTS_LEN]; /* the redis store (--redis-endpoint) */
	char redis_prefix[KVS_REDIS_PREFIX_LEN];       /* this invocation's keys */
	uint64_t redis_ttl_ms;    /* its keys expire (0: never, --keep) */
	uint32_t redis_cluster;   /* the endpoints are Redis Cluster seeds (--redis-cluster) */
	/* Offsets from the start of the mapping. */
	uint64_t off_ids;         /* struct kvs_block_id[nblocks] */
	uint64_t off_task;        /* uint32_t[ntasks + 1]: first access of each task */
	uint64_t off_acc;         /* uint32_t[naccess]: block index of each access */
	uint64_t off_lat;         /* uint32_t[B_RUNS][ranks][ntasks]: task latency, us */
	uint64_t off_ref;         /* nblocks * shards * shard_bytes: what was dumped */
	uint64_t total;
};

struct b_shm {
	uint64_t magic;
	uint64_t layout;          /* sizeof(struct b_shm) */
	struct b_params p;
	struct b_run run[B_RUNS];
};

static inline const struct kvs_block_id *sh_ids(const struct b_shm *sh)
{
	return (const void *)((const char *)sh + sh->p.off_ids);
}
static inline const uint32_t *sh_task(const struct b_shm *sh)
{
	return (const void *)((const char *)sh + sh->p.off_task);
}
static inline const uint32_t *sh_acc(const struct b_shm *sh)
{
	return (const void *)((const char *)sh + sh->p.off_acc);
}
static inline uint32_t *sh_lat(struct b_shm *sh, uint32_t run, uint32_t rank)
{
	return (uint32_t *)((char *)sh + sh->p.off_lat) +
	       ((uint64_t)run * sh->p.ranks + rank) * sh->p.ntasks;
}
static inline const unsigned char *sh_ref(const struct b_shm *sh, uint32_t blk, uint32_t shard)
{
	return (const unsigned char *)sh + sh->p.off_ref +
	       ((uint64_t)blk * sh->p.shards + shard) * sh->p.shard_bytes;
}

/* ------------------------------------------------------------------------ */
/* The workload (bench_work.c), built in the parent's memory, then copied    */

struct b_work {
	uint32_t nblocks, nreq, ntasks, naccess;
	struct kvs_block_id *ids;
	uint32_t *acc, *task; /* task: ntasks + 1 offsets into acc */
	uint32_t acc_cap, task_cap;
	uint32_t trace_total; /* trace: requests in the file */
	uint64_t trace_distinct;
};

struct b_opts {
	uint32_t ranks, blocks, shards, qd, backend, workload, engine, repeat;
	uint64_t shard_bytes, capacity, latency_us, seed;
	bool blocks_set, latency_set, json, keep, check, verbose, drop_cache, redis_cluster;
	const char *trace, *root, *internal, *redis_endpoint;
};

/* One run of one configuration (b_summarize). */
struct b_sum {
	bool ok;
	double wall_s, gbps, dedup, hit, join, cpu_pct, p50_ms, p99_ms, hp50_us, hp99_us;
	uint64_t delivered, reads, read_bytes, writes, max_inflight, hits, joins, misses, gets, waits;
	uint64_t evictions, owner_reads, shards, bad;
	uint32_t hugetlb;         /* the mode its caches were opened with (enum kvs_hugetlb_mode) */
	uint32_t backing;         /* what they got: enum kvs_cache_backing, B_BACKING_MIXED */
	char fallbacks[48], engine[8];
};

/* One configuration: its --repeat runs. */
struct b_conf {
	bool ran, ok;             /* ok: every run of it succeeded */
	const char *skip;         /* why it did not run */
	uint32_t nrep;            /* runs summarized in rep[] (a failed one is the last) */
	char variant[16], version[16]; /* the library it loaded */
	char err[B_ERR];          /* the failed run's error */
	struct b_sum rep[B_REPEAT_MAX];
};

/* A number over a configuration's runs. */
struct b_stat {
	double med, min, max;
};

struct b_report {
	const struct b_opts *o;
	struct b_shm *sh;
	struct b_conf conf[B_RUNS];
	uint32_t repeat;          /* runs per configuration */
	const char *workload_desc;
	char trace_note[B_ERR];   /* --trace without --blocks: how the caches were sized */
	char backing_note[2 * B_ERR]; /* which memory each configuration's caches got, and why */
	char engine_note[B_ERR];
	double fill_s;
	bool filled;
	uint64_t unique_shards, unique_bytes;
	bool check_failed;
	char check_err[B_ERR];
};

/* One process's "device" memory: bytes of host memory, or of device memory
 * (then stage, a host buffer of one shard, receives what is read back). */
struct b_dev {
	bool cuda;
	unsigned char *host;
	void *dptr;
	unsigned char *stage;
	size_t bytes;
};

/* ------------------------------------------------------------------------ */
/* Calls between the files                                                   */

/* bench_rank.c: processes.  The parent (and the re-executed plain run) keep
 * SIGCHLD, SIGINT, SIGTERM and SIGHUP blocked (b_signals_block) and take them in
 * b_reap; an interrupt sets b_interrupted. */
extern volatile sig_atomic_t b_interrupted;
extern bool b_verbose;
typedef void (*b_tick_fn)(void *arg, uint64_t now);
void b_seterr(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void b_signals_block(void);
void b_child_setup(pid_t parent);
uint32_t b_reap(pid_t *pids, int *status, uint32_t n, uint64_t deadline, b_tick_fn tick,
		void *arg);
void b_log_cb(void *arg, int level, const char *msg);
void b_run_reset(struct b_run *run);
int b_run_ranks(struct b_shm *sh, uint32_t runi, bool progress);
int b_run_exec(struct b_shm *sh, int memfd, uint32_t runi, const char *libdir, bool progress);
int b_internal_run(const char *arg);

/* bench_dev.c */
int b_cuda_load(char *why, size_t n);
int b_dev_alloc(struct b_dev *d, bool cuda, int device, size_t bytes, size_t stage, char *err);
void b_dev_free(struct b_dev *d);
uint64_t b_dev_addr(const struct b_dev *d, size_t off);
int b_dev_poison(struct b_dev *d, size_t off, size_t len, size_t shard, char *err);
const unsigned char *b_dev_read(struct b_dev *d, size_t off, size_t len, char *err);
int b_dev_write(struct b_dev *d, size_t off, const void *src, size_t len, char *err);
int b_probe_engine(struct b_shm *sh, uint32_t want, char *note, size_t nn);

/* bench_backend.c */
/* The counting backend over the run's store, counting into run->count: set
 * (process-local) before the ranks fork; wired into a rank's backend config. */
void b_backend_set(struct b_shm *sh, struct b_run *run);
void b_backend_wire(struct kvs_backend_config *c);
void b_redis_setup(struct b_params *p, const char *endpoints, bool cluster, const char *uid,
		   bool keep);
int b_run_fill(struct b_shm *sh, char *err, double *secs);
void b_store_drop_cache(const char *root);
void b_store_remove(const char *root);

/* bench_work.c */
int b_work_prefix(struct b_work *w, uint32_t U, uint64_t seed, uint32_t per);
int b_work_scan(struct b_work *w, uint32_t U, uint32_t per);
int b_work_ids(struct b_work *w, uint64_t seed);
int b_work_trace(struct b_work *w, const char *path, uint32_t cap, uint32_t per, char *err);
int b_work_finish(struct b_work *w);
void b_work_free(struct b_work *w);

/* bench_report.c */
void b_fmt_size(char *buf, size_t n, uint64_t b);
void b_summarize(struct b_shm *sh, uint32_t runi, struct b_sum *s);
void b_print_table(const struct b_report *rp);
void b_print_json(const struct b_report *rp, bool ok);

#endif
