/*
 * perf/tp_scaling.c — the store's TP scaling: 1..8 rank processes loading the same
 * blocks from a latency backend, rotated against natural dispatch order
 * (docs/store.md, "Rotated order"; README.md, "Benchmarks").  One line per
 * (order, ranks):
 *
 *   tp_scaling variant=<v> order=<rotated|natural> ranks=<n> tasks_per_s=<..>
 *     backend_reads=<..> unique_shards=<..> max_inflight_reads=<..>
 *     owner_share_max=<..> waiter_cpu_pct=<..> mean_inflight_reads=<..>
 *
 * and, unless --slow-copier-us 0, one line for a slow copier on one rank:
 *
 *   tp_scaling_slow_copier variant=<v> ranks=<n> others_tasks_per_s_base=<..>
 *     others_tasks_per_s_slow=<..> ratio=<..>
 *
 * The workload.  A run forks `ranks` processes (device_id 0..n-1, local_rank_size
 * n), each opening a store on a fresh unique_id (copy_engine host: the "device
 * tensors" are malloc'd host buffers; the cache holds every shard, so nothing is
 * evicted).  Every rank loads every one of `blocks` blocks, one task per block of
 * all 12 shards, in the same block order, keeping `window` tasks in flight.  The
 * ranks open their stores, report ready through a pipe, and start together when
 * the parent closes a second pipe (no sleeps); the parent's clock read just
 * before that close is the start, the last rank's finish (CLOCK_MONOTONIC, the
 * same clock in every process) the end.
 *
 * The backend.  Each rank's store gets the counting backend (tools/count_backend.h)
 * over a latency backend (kvs_backend_open: latency_ns, latency_queue_depth =
 * qd, so each rank has at most qd reads in flight, as an IO engine with a
 * bounded share of the store's bandwidth) and counts, in a MAP_SHARED block
 * the parent maps before forking, every read the latency backend accepted, the
 * reads in flight across all processes (++ at an accepted submit, -- when the
 * completion is reaped; the maximum kept by a CAS loop) and the time each read
 * spent in flight.  So the numbers come from the backend side, not from the
 * store's own counters:
 *
 *   tasks_per_s         all ranks' completed tasks / (last finish - start)
 *   backend_reads       reads accepted by the latency backends, all ranks;
 *                       the target is unique_shards (blocks x 12): each shard read
 *                       once for the node
 *   max_inflight_reads  the most reads in flight at once, node-wide
 *   mean_inflight_reads sum of the reads' times in flight / wall time (the
 *                       time-weighted mean concurrency the backend saw)
 *   owner_share_max     the largest rank's kvs_store_stats owner_reads / the sum
 *                       of all ranks' owner_reads
 *   waiter_cpu_pct      each rank process's CPU (getrusage RUSAGE_SELF, user+sys,
 *                       all threads, from start to its finish) / wall time,
 *                       averaged over the ranks; with more runnable threads than
 *                       CPUs it is bounded by CPUs / ranks
 *
 * Slow copier.  The same rotated run at --slow-ranks ranks twice: as is, and with
 * one rank's (--slow-rank) copy_delay_ns set (a copier that takes that long per
 * shard).  others_tasks_per_s is the other ranks' tasks / (their last finish -
 * start); ratio = slow / base.  Readiness is published when the read completes,
 * so peers should not wait for the slow rank's copier.
 *
 * Verification: each destination buffer is poisoned before its task; after a task
 * the first and last 64 bytes of every shard, and every --verify-every'th task
 * one whole shard (rotating), are compared with kvs_pattern_fill (the latency
 * backend's content).  A failed task, a mismatch, a failed read or a rank that
 * does not finish makes the program exit 1 (after printing what it has).
 *
 * usage: tp_scaling [--ranks 1,2,4,8] [--orders rotated,natural] [--blocks 200]
 *                   [--latency-us 200] [--qd 1] [--window 4] [--shard-kib 64]
 *                   [--slow-copier-us 2000] [--slow-rank 0] [--slow-ranks 4]
 *                   [--verify-every 8] [--verbose]
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "kvshare.h"
#include "tools/count_backend.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define SHARDS 12u                                 /* shards per block (a task) */
#define MAX_RANKS 64u
#define EDGE_BYTES 64u                              /* checked at both ends of each shard */
#define START_TIMEOUT_MS 60000                      /* every rank opened its store */
#define RUN_TIMEOUT_NS (300ull * KVS_NSEC_PER_SEC)  /* a run, start to last exit */
#define TASK_WAIT_NS (60ull * KVS_NSEC_PER_SEC)     /* one kvs_store_wait */
#define POISON 0xa5

/* ---- shared counters (MAP_SHARED | MAP_ANONYMOUS, mapped before fork) ---- */

struct tp_rank_result {
	int32_t rc;              /* 0, or the first failure's code */
	uint32_t verify_fail;    /* shards whose bytes were wrong */
	uint64_t tasks;          /* tasks completed successfully */
	uint64_t finish_ns;      /* CLOCK_MONOTONIC when its last task completed */
	uint64_t cpu_ns;         /* RUSAGE_SELF user+sys, start to finish */
	uint64_t owner_reads;    /* kvs_store_stats */
	uint64_t load_hits;
	uint64_t read_errors;
	uint64_t prealloc_hits;
};

struct tp_shared {
	/* The counting backend, updated by every rank's dispatcher thread
	 * (tools/count_backend.h: relaxed counts, read after waitpid). */
	struct kvs_count count;
	/* Set by the parent before it starts the ranks (closing the go pipe is the
	 * release: a child reads them after its read() returned EOF). */
	uint32_t abort_run;              /* 1: a rank failed to open; do no work */
	uint32_t pad;
	struct tp_rank_result rank[MAX_RANKS];
};

/* ---- parameters ---- */

struct tp_params {
	uint32_t ranks;
	uint32_t order;          /* enum kvs_dispatch_order */
	uint32_t blocks;
	uint32_t qd;
	uint32_t window;
	uint32_t verify_every;
	uint64_t latency_ns;
	uint64_t shard_bytes;
	int32_t slow_rank;       /* -1: none */
	uint64_t slow_delay_ns;
	bool verbose;
};

struct tp_result {
	uint64_t wall_ns, tasks, reads, writes, max_inflight, inflight_ns;
	double owner_share_max, cpu_pct;
	uint64_t others_tasks, others_wall_ns; /* ranks other than slow_rank */
};

/* What the counting backend's open_inner gets: process-local, inherited by the
 * fork (the shared block is at the same address in every rank). */
struct tp_backend_arg {
	uint64_t latency_ns;
	uint32_t qd;
};

static struct tp_backend_arg g_barg;
static struct kvs_count_arg g_count_arg;

/* ---- the counting backend (tools/count_backend.h) over a latency backend ---- */

static int tp_open_inner(const struct kvs_backend_config *cfg, void *arg,
			 struct kvs_backend **inner)
{
	const struct tp_backend_arg *a = arg;
	struct kvs_backend_config in;

	kvs_backend_config_init(&in);
	in.kind = KVS_BACKEND_LATENCY;
	in.shard_bytes = cfg->shard_bytes;
	in.shards_per_block = cfg->shards_per_block;
	in.latency_ns = a->latency_ns;
	in.latency_queue_depth = a->qd;
	in.log = cfg->log;
	in.log_arg = cfg->log_arg;
	return kvs_backend_open(&in, inner);
}

/* ---- one rank ---- */

static bool g_verbose;

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_ERROR || (g_verbose && level <= KVS_LOG_WARN))
		fprintf(stderr, "tp_scaling: rank %d: %s\n", (int)(intptr_t)arg, msg);
}

static struct kvs_block_id block_id(uint32_t i)
{
	struct kvs_block_id b;
	uint64_t lo = kvs_mix64(0x74705f7363616c65ull ^ i), hi = kvs_mix64(lo ^ 0x6b7673ull);

	memcpy(b.bytes, &lo, 8);
	memcpy(b.bytes + 8, &hi, 8);
	return b;
}

static uint64_t rusage_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * KVS_NSEC_PER_SEC +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
}

/* Check a completed task's buffers; the number of bad shards. */
static uint32_t verify_task(const struct tp_params *p, uint32_t blk, uint64_t seq,
			    const unsigned char *buf, unsigned char *scratch)
{
	struct kvs_block_id id = block_id(blk);
	uint64_t sb = p->shard_bytes, edge = sb < EDGE_BYTES ? sb : EDGE_BYTES;
	uint32_t bad = 0;

	for (uint32_t s = 0; s < SHARDS; s++) {
		const unsigned char *d = buf + s * sb;
		bool ok;

		if (p->verify_every && seq % p->verify_every == 0 && s == (seq / p->verify_every) % SHARDS) {
			kvs_pattern_fill(&id, s, 0, scratch, sb);
			ok = memcmp(d, scratch, sb) == 0;
		} else {
			kvs_pattern_fill(&id, s, 0, scratch, edge);
			kvs_pattern_fill(&id, s, sb - edge, scratch + edge, edge);
			ok = memcmp(d, scratch, edge) == 0 && memcmp(d + sb - edge, scratch + edge, edge) == 0;
		}
		if (!ok) {
			if (bad == 0)
				fprintf(stderr, "tp_scaling: block %u shard %u: bytes differ from the "
						"latency backend's pattern\n", blk, s);
			bad++;
		}
	}
	return bad;
}

static void store_config(const struct tp_params *p, const char *uid, uint32_t rank,
			 struct kvs_store_config *cfg)
{
	kvs_store_config_init(cfg);
	snprintf(cfg->cache.unique_id, sizeof(cfg->cache.unique_id), "%s", uid);
	cfg->cache.device_id = (int32_t)rank;
	cfg->cache.local_rank_size = p->ranks;
	cfg->cache.slot_bytes = p->shard_bytes;
	/* every shard of the run, plus room: nothing is evicted */
	cfg->cache.slot_count = (uint64_t)p->blocks * SHARDS + 64;
	cfg->cache.shards_per_block = SHARDS;
	cfg->copy_engine = KVS_COPY_ENGINE_HOST;
	cfg->dispatch_order = p->order;
	cfg->copy_delay_ns = (int32_t)rank == p->slow_rank ? p->slow_delay_ns : 0;
	cfg->backend.kind = KVS_BACKEND_USER;
	cfg->backend.user_ops = &kvs_count_ops;
	cfg->backend.user_arg = &g_count_arg;
	cfg->log = log_cb;
	cfg->log_arg = (void *)(intptr_t)rank;
}

/* Load every block, window tasks in flight; 0 or the first error. */
static int rank_work(const struct tp_params *p, struct kvs_store *st, struct tp_rank_result *r)
{
	size_t task_bytes = SHARDS * p->shard_bytes;
	unsigned char *bufs = malloc(task_bytes * p->window), *scratch = malloc(p->shard_bytes);
	uint64_t *ids = calloc(p->window, sizeof(*ids));
	uint32_t *blk = calloc(p->window, sizeof(*blk));
	struct kvs_store_tensor tens[SHARDS];
	struct kvs_store_shard sh[SHARDS];
	uint32_t next = 0, done = 0;
	int rc = 0;

	if (!bufs || !scratch || !ids || !blk) {
		rc = -ENOMEM;
		goto out;
	}
	while (done < p->blocks) {
		/* Keep the window full; the slot of block i is i % window, so tasks are
		 * waited for in submit order. */
		while (next < p->blocks && next - done < p->window) {
			uint32_t w = next % p->window;
			unsigned char *b = bufs + w * task_bytes;
			struct kvs_block_id id = block_id(next);

			memset(b, POISON, task_bytes);
			for (uint32_t s = 0; s < SHARDS; s++) {
				tens[s] = (struct kvs_store_tensor){ .addr = (uint64_t)(uintptr_t)(b + s * p->shard_bytes) };
				sh[s] = (struct kvs_store_shard){ .block = id, .shard = s,
								  .tensor_count = 1, .tensors = &tens[s] };
			}
			rc = kvs_store_load(st, sh, SHARDS, &ids[w]);
			if (rc < 0) {
				fprintf(stderr, "tp_scaling: kvs_store_load(block %u): %s\n", next,
					kvs_strerror(rc));
				goto out;
			}
			blk[w] = next++;
		}
		uint32_t w = done % p->window;
		rc = kvs_store_wait(st, ids[w], TASK_WAIT_NS);
		if (rc != 0) {
			fprintf(stderr, "tp_scaling: task of block %u: %s\n", blk[w],
				rc == 1 ? "still running after 60 s" : kvs_strerror(rc));
			if (rc == 1)
				rc = -ETIMEDOUT;
			goto out;
		}
		r->verify_fail += verify_task(p, blk[w], done, bufs + w * task_bytes, scratch);
		r->tasks++;
		done++;
	}
out:
	free(bufs);
	free(scratch);
	free(ids);
	free(blk);
	return rc;
}

static int rank_main(const struct tp_params *p, struct tp_shared *sh, const char *uid,
		     uint32_t rank, int ready_fd, int go_fd)
{
	struct tp_rank_result *r = &sh->rank[rank];
	struct kvs_store_config cfg;
	struct kvs_store_stats ss;
	struct kvs_store *st;
	char c;
	int rc;

	store_config(p, uid, rank, &cfg);
	rc = kvs_store_open(&cfg, &st);
	if (rc < 0) {
		fprintf(stderr, "tp_scaling: rank %u: kvs_store_open: %s\n", rank, kvs_strerror(rc));
		r->rc = rc;
		(void)!write(ready_fd, "F", 1);
		return 1;
	}
	(void)!write(ready_fd, "R", 1);
	close(ready_fd);
	while (read(go_fd, &c, 1) < 0 && errno == EINTR)
		; /* EOF: the parent closed the pipe, go */
	if (sh->abort_run) {
		kvs_store_close(st);
		return 1;
	}

	uint64_t cpu0 = rusage_ns();
	rc = rank_work(p, st, r);
	r->finish_ns = kvs_now_ns();
	r->cpu_ns = rusage_ns() - cpu0;
	if (kvs_store_stats(st, kvs_cache_rank(kvs_store_cache(st)), &ss) == 0) {
		r->owner_reads = ss.owner_reads;
		r->load_hits = ss.load_hits;
		r->read_errors = ss.read_errors;
		r->prealloc_hits = ss.prealloc_hits;
	}
	r->rc = rc;
	kvs_store_close(st);
	return rc < 0 || r->verify_fail ? 1 : 0;
}

/* ---- one run (parent) ---- */

/* Reap every child by the deadline, killing the rest; 0 when all exited 0. */
static int reap_all(pid_t *pids, uint32_t n, const sigset_t *chld, uint64_t deadline)
{
	uint32_t left = 0;
	int bad = 0;

	for (uint32_t i = 0; i < n; i++)
		left += pids[i] > 0;
	while (left) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);

		if (pid > 0) {
			for (uint32_t i = 0; i < n; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
						fprintf(stderr, "tp_scaling: rank %u %s %d\n", i,
							WIFEXITED(status) ? "exited" : "killed by signal",
							WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
						bad = 1;
					}
				}
			continue;
		}
		uint64_t now = kvs_now_ns();
		if (now >= deadline) {
			fprintf(stderr, "tp_scaling: %u rank(s) still running at the deadline: killed\n", left);
			for (uint32_t i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			deadline = UINT64_MAX; /* now reap the killed ones */
			bad = 1;
			continue;
		}
		struct timespec ts = kvs_ns_to_timespec(deadline - now > KVS_NSEC_PER_SEC ? KVS_NSEC_PER_SEC : deadline - now);
		sigtimedwait(chld, NULL, &ts); /* SIGCHLD is blocked: wakes at a child's exit */
	}
	return bad;
}

/* Wait for n ready bytes; 0, or -1 (a rank failed, exited, or the deadline). */
static int await_ready(int fd, uint32_t n)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)START_TIMEOUT_MS * 1000000ull);
	uint32_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = kvs_now_ns();
		char buf[MAX_RANKS];
		ssize_t k;

		if (now >= deadline) {
			fprintf(stderr, "tp_scaling: ranks not ready within %d ms\n", START_TIMEOUT_MS);
			return -1;
		}
		if (poll(&pfd, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
			continue;
		k = read(fd, buf, sizeof(buf));
		if (k == 0)
			return -1; /* every rank closed its end: some exited early */
		if (k < 0)
			continue;
		for (ssize_t i = 0; i < k; i++)
			if (buf[i] != 'R')
				return -1;
		got += (uint32_t)k;
	}
	return 0;
}

static int run_once(const struct tp_params *p, struct tp_shared *sh, struct tp_result *res)
{
	static unsigned run_no;
	int ready[2], go[2], bad = 0;
	pid_t pids[MAX_RANKS] = { 0 };
	sigset_t chld, old;
	char uid[KVS_UNIQUE_ID_MAX + 1];
	uint64_t t0;

	memset(sh, 0, sizeof(*sh));
	memset(res, 0, sizeof(*res));
	snprintf(uid, sizeof(uid), "tp_scaling.%d.%u", (int)getpid(), run_no++);
	g_barg = (struct tp_backend_arg){ .latency_ns = p->latency_ns, .qd = p->qd };
	g_count_arg = (struct kvs_count_arg){ .count = &sh->count, .open_inner = tp_open_inner,
					      .arg = &g_barg };
	if (pipe(ready) < 0 || pipe(go) < 0)
		return -errno;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	fflush(NULL);
	for (uint32_t i = 0; i < p->ranks; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			sigprocmask(SIG_SETMASK, &old, NULL);
			close(ready[0]);
			close(go[1]);
			_exit(rank_main(p, sh, uid, i, ready[1], go[0]));
		}
		if (pids[i] < 0) {
			perror("tp_scaling: fork");
			pids[i] = 0;
			bad = 1;
			break;
		}
	}
	close(ready[1]);
	close(go[0]);
	if (bad || await_ready(ready[0], p->ranks) < 0) {
		sh->abort_run = 1;
		bad = 1;
	}
	t0 = kvs_now_ns();
	close(go[1]); /* the start: every rank's read() returns EOF */
	bad |= reap_all(pids, p->ranks, &chld, t0 + RUN_TIMEOUT_NS);
	close(ready[0]);
	sigprocmask(SIG_SETMASK, &old, NULL);

	/* A rank that died holding the cache leaves its segments: remove them. */
	struct kvs_cache_config cc;
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", uid);
	(void)kvs_cache_remove(&cc);
	if (bad)
		return -1;

	uint64_t owner_sum = 0, owner_max = 0, end = t0, oend = t0;
	double cpu = 0;
	for (uint32_t i = 0; i < p->ranks; i++) {
		const struct tp_rank_result *r = &sh->rank[i];

		if (r->rc < 0 || r->verify_fail)
			bad = 1;
		res->tasks += r->tasks;
		owner_sum += r->owner_reads;
		if (r->owner_reads > owner_max)
			owner_max = r->owner_reads;
		if (r->finish_ns > end)
			end = r->finish_ns;
		if ((int32_t)i != p->slow_rank) {
			res->others_tasks += r->tasks;
			if (r->finish_ns > oend)
				oend = r->finish_ns;
		}
	}
	res->wall_ns = end - t0;
	res->others_wall_ns = oend - t0;
	for (uint32_t i = 0; i < p->ranks; i++)
		cpu += res->wall_ns ? (double)sh->rank[i].cpu_ns / (double)res->wall_ns : 0;
	res->cpu_pct = 100.0 * cpu / p->ranks;
	res->owner_share_max = owner_sum ? (double)owner_max / (double)owner_sum : 0;
	/* relaxed: every writer has exited (waitpid). */
	res->reads = atomic_load_explicit(&sh->count.reads, memory_order_relaxed);
	res->writes = atomic_load_explicit(&sh->count.writes, memory_order_relaxed);
	res->max_inflight = (uint64_t)atomic_load_explicit(&sh->count.max_inflight,
							   memory_order_relaxed);
	res->inflight_ns = atomic_load_explicit(&sh->count.read_ns, memory_order_relaxed);
	if (atomic_load_explicit(&sh->count.failures, memory_order_relaxed)) {
		fprintf(stderr, "tp_scaling: %" PRIu64 " backend reads failed\n",
			atomic_load_explicit(&sh->count.failures, memory_order_relaxed));
		bad = 1;
	}
	if (res->writes)
		fprintf(stderr, "tp_scaling: %" PRIu64 " backend writes during a load-only run\n",
			res->writes);
	if (owner_sum != res->reads)
		fprintf(stderr, "tp_scaling: note: owner_reads sum %" PRIu64 " != backend reads %" PRIu64 "\n",
			owner_sum, res->reads);
	if (p->verbose)
		for (uint32_t i = 0; i < p->ranks; i++)
			fprintf(stderr, "tp_scaling:   rank %u tasks=%" PRIu64 " owner_reads=%" PRIu64
					" load_hits=%" PRIu64 " prealloc_hits=%" PRIu64
					" finish_ms=%.1f cpu_ms=%.1f\n",
				i, sh->rank[i].tasks, sh->rank[i].owner_reads, sh->rank[i].load_hits,
				sh->rank[i].prealloc_hits, (double)(sh->rank[i].finish_ns - t0) / 1e6,
				(double)sh->rank[i].cpu_ns / 1e6);
	return bad ? -1 : 0;
}

/* ---- main ---- */

static int parse_list(const char *s, uint32_t *out, uint32_t max, uint32_t *n)
{
	char *end;

	*n = 0;
	for (;;) {
		unsigned long v = strtoul(s, &end, 10);

		if (end == s || v == 0 || v > MAX_RANKS || *n == max)
			return -1;
		out[(*n)++] = (uint32_t)v;
		if (*end == '\0')
			return 0;
		if (*end != ',')
			return -1;
		s = end + 1;
	}
}

static int parse_orders(const char *s, uint32_t *out, uint32_t *n)
{
	char buf[64], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", s);
	*n = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (*n == 2)
			return -1;
		if (strcmp(t, "rotated") == 0)
			out[(*n)++] = KVS_DISPATCH_ROTATED;
		else if (strcmp(t, "natural") == 0)
			out[(*n)++] = KVS_DISPATCH_NATURAL;
		else
			return -1;
	}
	return *n ? 0 : -1;
}

static void usage(void)
{
	fprintf(stderr, "usage: tp_scaling [--ranks 1,2,4,8] [--orders rotated,natural] [--blocks 200]\n"
			"                  [--latency-us 200] [--qd 1] [--window 4] [--shard-kib 64]\n"
			"                  [--slow-copier-us 2000 (0: no slow-copier case)] [--slow-rank 0]\n"
			"                  [--slow-ranks 4] [--verify-every 8 (0: edges only)] [--verbose]\n");
}

int main(int argc, char **argv)
{
	uint32_t ranks[16] = { 1, 2, 4, 8 }, nranks = 4, orders[2] = { KVS_DISPATCH_ROTATED, KVS_DISPATCH_NATURAL };
	uint32_t norders = 2, slow_ranks = 4, slow_rank = 0;
	uint64_t slow_us = 2000;
	struct tp_params p = {
		.blocks = 200, .qd = 1, .window = 4, .verify_every = 8,
		.latency_ns = 200000, .shard_bytes = 64 << 10, .slow_rank = -1,
	};
	struct tp_shared *sh;
	int bad = 0;

	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		unsigned long long x = 0;

		if (strcmp(o, "--verbose") == 0) {
			p.verbose = g_verbose = true;
			continue;
		}
		if (!v) {
			usage();
			return 2;
		}
		i++;
		if (strcmp(o, "--ranks") == 0) {
			if (parse_list(v, ranks, 16, &nranks) < 0)
				goto bad_arg;
			continue;
		}
		if (strcmp(o, "--orders") == 0) {
			if (parse_orders(v, orders, &norders) < 0)
				goto bad_arg;
			continue;
		}
		x = strtoull(v, &end, 10);
		if (end == v || *end)
			goto bad_arg;
		if (strcmp(o, "--blocks") == 0 && x >= 1 && x <= 1000000)
			p.blocks = (uint32_t)x;
		else if (strcmp(o, "--latency-us") == 0 && x <= 1000000)
			p.latency_ns = x * 1000;
		else if (strcmp(o, "--qd") == 0 && x <= 4096)
			p.qd = (uint32_t)x;
		else if (strcmp(o, "--window") == 0 && x >= 1 && x <= 64)
			p.window = (uint32_t)x;
		else if (strcmp(o, "--shard-kib") == 0 && x >= 1 && x <= 65536)
			p.shard_bytes = x << 10;
		else if (strcmp(o, "--slow-copier-us") == 0 && x <= 1000000)
			slow_us = x;
		else if (strcmp(o, "--slow-rank") == 0 && x < MAX_RANKS)
			slow_rank = (uint32_t)x;
		else if (strcmp(o, "--slow-ranks") == 0 && x >= 2 && x <= MAX_RANKS)
			slow_ranks = (uint32_t)x;
		else if (strcmp(o, "--verify-every") == 0 && x <= 1000000)
			p.verify_every = (uint32_t)x;
		else
			goto bad_arg;
		continue;
bad_arg:
		fprintf(stderr, "tp_scaling: bad value for %s: '%s'\n", o, v);
		usage();
		return 2;
	}
	if (slow_us && slow_rank >= slow_ranks) {
		fprintf(stderr, "tp_scaling: --slow-rank %u is not below --slow-ranks %u\n", slow_rank,
			slow_ranks);
		return 2;
	}

	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED) {
		perror("tp_scaling: mmap");
		return 1;
	}
	for (uint32_t o = 0; o < norders; o++) {
		for (uint32_t k = 0; k < nranks; k++) {
			struct tp_result r;

			p.order = orders[o];
			p.ranks = ranks[k];
			if (run_once(&p, sh, &r) < 0) {
				fprintf(stderr, "tp_scaling: order=%s ranks=%u failed\n",
					p.order == KVS_DISPATCH_ROTATED ? "rotated" : "natural", p.ranks);
				bad = 1;
				continue;
			}
			printf("tp_scaling variant=%s order=%s ranks=%u tasks_per_s=%.1f backend_reads=%" PRIu64
			       " unique_shards=%" PRIu64 " max_inflight_reads=%" PRIu64
			       " owner_share_max=%.3f waiter_cpu_pct=%.1f mean_inflight_reads=%.2f\n",
			       KVS_BENCH_VARIANT, p.order == KVS_DISPATCH_ROTATED ? "rotated" : "natural",
			       p.ranks, (double)r.tasks * 1e9 / (double)r.wall_ns, r.reads,
			       (uint64_t)p.blocks * SHARDS, r.max_inflight, r.owner_share_max, r.cpu_pct,
			       (double)r.inflight_ns / (double)r.wall_ns);
			fflush(stdout);
		}
	}
	if (slow_us) {
		struct tp_result base, slow;
		int rb, rs;

		p.order = KVS_DISPATCH_ROTATED;
		p.ranks = slow_ranks;
		p.slow_rank = (int32_t)slow_rank; /* "others" exclude it in both runs */
		p.slow_delay_ns = 0;
		rb = run_once(&p, sh, &base);
		p.slow_delay_ns = slow_us * 1000;
		rs = run_once(&p, sh, &slow);
		if (rb < 0 || rs < 0) {
			fprintf(stderr, "tp_scaling: slow_copier case failed\n");
			bad = 1;
		} else {
			double b = (double)base.others_tasks * 1e9 / (double)base.others_wall_ns;
			double s = (double)slow.others_tasks * 1e9 / (double)slow.others_wall_ns;

			printf("tp_scaling_slow_copier variant=%s ranks=%u others_tasks_per_s_base=%.1f "
			       "others_tasks_per_s_slow=%.1f ratio=%.3f\n",
			       KVS_BENCH_VARIANT, slow_ranks, b, s, s / b);
		}
	}
	munmap(sh, sizeof(*sh));
	return bad;
}
