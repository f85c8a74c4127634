/*
 * perf/store_sleep_bench.c — what a store's two threads cost while one backend
 * read is held for a long time (issue 22 item 15; docs/store.md, "Sleeping").
 * One line:
 *
 *   store_sleep variant=<v> backend=<latency|pool|uring> waiter=<own|peer>
 *     hold_ms=<..> measure_ms=<..> dispatcher_wakeups_per_s=<..>
 *     dispatcher_cpu_ms=<..> copier_wakeups_per_s=<..> copier_cpu_pct=<..>
 *     src=<perf|schedstat>
 *
 * or, for --backend uring where io_uring is refused (or the plain build, which
 * has none), `store_sleep variant=<v> backend=uring waiter=own
 * skipped=io_uring_unavailable` and exit 77.
 *
 * The workload.  One store (copy_engine host: the "device tensors" are malloc'd
 * host buffers; 64 KiB shards, one shard per block, an 8 MiB cache on /dev/shm)
 * on a fresh unique_id; after kvs_store_ready it submits ONE load of one shard
 * whose backend read takes hold_ms, sleeps 100 ms (the dispatcher has submitted
 * the read and the copier is waiting for it), then measures the store's
 * dispatcher ("kvs-dispatch") and copier ("kvs-copier") threads for measure_ms
 * while the read is still held.  Then it checks the task was still running at
 * the end of the window (else the window did not measure a held read: exit 1),
 * waits for it (must be 0) and compares the loaded bytes with the expected ones.
 *
 *   backend latency  backend=latency, latency_us = hold: the read completes
 *                    hold after submit; the content is kvs_pattern_fill's.
 *   backend pool     a posix backend in a fresh mkdtemp root, io_engine pool
 *   backend uring    (or uring).  A first store, without fault delay, dumps the
 *                    block (pattern-filled tensor, dump_wait durable) and
 *                    closes; the measured store (a new unique_id, same root)
 *                    wraps the posix backend in the fault backend with
 *                    fault_delay_us = hold, so its read completes hold after it
 *                    is reaped from the engine.  The bytes are compared with what
 *                    was dumped.  For uring, a kvs_backend_open probe of the
 *                    root with io_engine uring decides first: refused
 *                    (-EPERM, -ENOSYS, -EACCES, -ENOMEM; -EOPNOTSUPP in the
 *                    plain build) or a backend reporting the pool fallback
 *                    (kvs_backend_info) is the skip.  The root is removed at
 *                    the end.
 *
 * --waiter peer (latency backend only): local_rank_size 2.  A forked child rank
 * (device_id 1, same unique_id; it dies with this process, PR_SET_PDEATHSIG)
 * and this process (device_id 0) open their stores concurrently (the cache's
 * O_CREAT|O_EXCL picks the creator, the other attaches).  Once this process's
 * store is ready it tells the child to go (a pipe); the child loads the block
 * (its read held hold_ms) and writes one byte back once the load is submitted.
 * This process sleeps 50 ms (the child's dispatcher owns the slot, LOADING),
 * then loads the same shard: its copier waits on the PEER's slot word
 * (cross-process: futex in the kernel build, spin/yield in the plain build), and
 * its own threads are measured as above.  Its kvs_store_stats owner_reads must
 * be 0 (it was a waiter, not the owner) and the child's load must succeed too.
 *
 * The threads.  Found by name in /proc/self/task/<tid>/comm once the measured
 * store is open: the newest (largest) tid of each name, since an earlier store
 * of this process (the dump store) may have had threads of the same names.
 *
 * How each number is taken.  With --perf perf (default): `perf stat -x,
 * --per-thread -e task-clock,context-switches -t <dispatcher>,<copier> -o <tmp>
 * -- sleep <measure s>`, spawned with posix_spawnp and waited for (bounded);
 * each thread's line gives task-clock (msec) and context-switches ("<not
 * counted>": the thread never ran, 0).  /proc/self/task/<tid>/schedstat (ns on
 * CPU, ns waiting, timeslices run) is read around the same window, so if perf
 * fails to run or its output lacks a thread, that is said on stderr and the
 * schedstat numbers are used (src=schedstat; timeslices stand for wakeups, and
 * the window is the measured time between the two reads).  --perf none uses
 * schedstat only, over measure_ms.
 *
 *   dispatcher_wakeups_per_s  the dispatcher's context switches / window seconds
 *   dispatcher_cpu_ms         its task-clock over the window, in ms
 *   copier_wakeups_per_s      the copier's context switches / window seconds
 *   copier_cpu_pct            its task-clock / window * 100 (% of one core)
 *
 * Exit 0; 1 on any failure (a message on stderr names it); 2 on bad usage; 77
 * for the uring skip.
 *
 * usage: store_sleep_bench [--backend latency|pool|uring] [--waiter own|peer]
 *                          [--hold-ms 1500] [--measure-ms 1000] [--perf perf|none]
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "kvshare.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define SHARD_BYTES (64u << 10)
#define SETTLE_MS 100u               /* load submitted -> window opens */
#define PEER_LEAD_MS 50u             /* child's load submitted -> ours */
#define READY_TIMEOUT_NS (5 * KVS_NSEC_PER_SEC)
#define PIPE_TIMEOUT_MS 30000        /* a pipe message from the other process */
#define PERF_SLACK_NS (15 * KVS_NSEC_PER_SEC) /* perf start-up and exit, past the window */
#define REAP_SLACK_NS (20 * KVS_NSEC_PER_SEC) /* child exit, past its hold */
#define POISON 0xa5

extern char **environ;

enum { BK_LATENCY, BK_POOL, BK_URING };
static const char *const backend_names[] = { "latency", "pool", "uring" };

struct opts {
	int backend;
	bool peer;
	bool use_perf;
	uint32_t hold_ms, measure_ms;
};

/* One thread's cost over the window. */
struct cost {
	double cpu_ms;
	uint64_t switches;
};

static const char *g_who = "store_sleep_bench"; /* "... child" in the peer child */

static void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "%s: [log %d] %s\n", g_who, level, msg);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = kvs_ns_to_timespec(kvs_now_ns() + ns);

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static struct kvs_block_id block_id(void)
{
	struct kvs_block_id b;
	uint64_t lo = kvs_mix64(0x73746f72655f736cull), hi = kvs_mix64(lo ^ 0x65657000ull);

	memcpy(b.bytes, &lo, 8);
	memcpy(b.bytes + 8, &hi, 8);
	return b;
}

/* ---- store helpers ---- */

/* Open a store from a key=value string; 0 or the error (printed). */
static int store_open(const char *kv, struct kvs_store **s)
{
	struct kvs_store_config cfg;
	char err[256] = "";
	int rc;

	*s = NULL;
	kvs_store_config_init(&cfg);
	cfg.log = log_cb;
	rc = kvs_store_config_parse(&cfg, kv, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "%s: kvs_store_config_parse(\"%s\"): %s: %s\n", g_who, kv,
			kvs_strerror(rc), err);
		return rc;
	}
	rc = kvs_store_open(&cfg, s);
	if (rc < 0) {
		fprintf(stderr, "%s: kvs_store_open(\"%s\"): %d (%s)\n", g_who, kv, rc,
			kvs_strerror(rc));
		return rc;
	}
	rc = kvs_store_ready(*s, READY_TIMEOUT_NS);
	if (rc != 1) {
		fprintf(stderr, "%s: kvs_store_ready: %d (%s)\n", g_who, rc,
			rc < 0 ? kvs_strerror(rc) : "not ready within 5 s");
		kvs_store_close(*s);
		*s = NULL;
		return rc < 0 ? rc : -ETIMEDOUT;
	}
	return 0;
}

/* The common keys of every store here; uid, device and ranks vary. */
/* The store's config string: the common keys, then the backend's (fmt). */
__attribute__((format(printf, 7, 8)))
static void store_kv(char *buf, size_t len, const char *uid, int device, uint32_t ranks,
		     uint32_t hold_ms, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(buf, len,
			 "unique_id=%s,device_id=%d,local_rank_size=%u,copy_engine=host,"
			 "shard_size=64k,cache_buffer_capacity_gb=0.0078125,hugetlb=off,"
			 "prefault_threads=1,timeout_ms=%u",
			 uid, device, ranks, hold_ms + 20000);

	if (n < 0 || (size_t)n >= len)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + n, len - (size_t)n, fmt, ap);
	va_end(ap);
}

/* Submit a load (or dump) of the block's shard 0 into/from buf. */
static int submit(struct kvs_store *s, bool dump, unsigned char *buf, uint64_t *task)
{
	struct kvs_store_tensor t = { .addr = (uint64_t)(uintptr_t)buf, .offset = 0, .len = 0 };
	struct kvs_store_shard sh = { .block = block_id(), .shard = 0, .tensor_count = 1, .tensors = &t };
	int rc = dump ? kvs_store_dump(s, &sh, 1, NULL, task) : kvs_store_load(s, &sh, 1, task);

	if (rc < 0)
		fprintf(stderr, "%s: kvs_store_%s: %d (%s)\n", g_who, dump ? "dump" : "load", rc,
			kvs_strerror(rc));
	return rc;
}

static int wait_task(struct kvs_store *s, uint64_t task, uint64_t timeout_ns, const char *what)
{
	int rc = kvs_store_wait(s, task, timeout_ns);

	if (rc != 0)
		fprintf(stderr, "%s: kvs_store_wait (%s): %d (%s)\n", g_who, what, rc,
			rc == 1 ? "still running at the timeout" : kvs_strerror(rc));
	return rc == 0 ? 0 : -1;
}

static int verify(const unsigned char *got, const unsigned char *want)
{
	for (uint32_t i = 0; i < SHARD_BYTES; i++)
		if (got[i] != want[i]) {
			fprintf(stderr, "%s: loaded bytes differ from the stored ones at byte %u "
					"(0x%02x, expected 0x%02x)\n", g_who, i, got[i], want[i]);
			return -1;
		}
	return 0;
}

static void pattern(unsigned char *buf)
{
	struct kvs_block_id b = block_id();

	kvs_pattern_fill(&b, 0, 0, buf, SHARD_BYTES);
}

/* ---- the threads ---- */

/* The newest (largest) tid of this process whose comm is name; 0 if none. */
static pid_t find_tid(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	pid_t best = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[96], comm[32] = "";
		long tid = strtol(e->d_name, NULL, 10);
		FILE *f;

		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%ld/comm", tid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
		if (strcmp(comm, name) == 0 && tid > best)
			best = (pid_t)tid;
	}
	closedir(d);
	return best;
}

/* /proc/self/task/<tid>/schedstat: ns on CPU, ns waiting, timeslices run. */
static int schedstat(pid_t tid, uint64_t *cpu_ns, uint64_t *slices)
{
	char path[96];
	unsigned long long run = 0, wait = 0, n = 0;
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	ok = fscanf(f, "%llu %llu %llu", &run, &wait, &n) == 3;
	fclose(f);
	if (!ok)
		return -EIO;
	*cpu_ns = run;
	*slices = n;
	return 0;
}

/* waitpid(pid) for at most timeout_ns (5 ms polls); past it SIGKILL and reap.
 * Returns 0 and *status, -ETIMEDOUT (killed), or -errno. */
static int wait_child(pid_t pid, uint64_t timeout_ns, int *status)
{
	uint64_t end = kvs_now_ns() + timeout_ns;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (kvs_now_ns() >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, status, 0); /* SIGKILLed: returns */
			return -ETIMEDOUT;
		}
		sleep_ns(5 * KVS_NSEC_PER_MSEC);
	}
}

/* "kvs-dispatch-12345" -> 12345 */
static pid_t line_tid(const char *field)
{
	const char *dash = strrchr(field, '-');

	return dash ? (pid_t)strtol(dash + 1, NULL, 10) : 0;
}

/* Parse perf stat -x, --per-thread output for the two tids; 0 when both threads'
 * two events were found. */
static int perf_parse(const char *path, const pid_t tid[2], struct cost out[2])
{
	char line[512];
	unsigned found[2] = { 0, 0 };
	FILE *f = fopen(path, "r");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *fld[4] = { 0 }, *p;
		int n = 0, k;

		if (line[0] == '#' || line[0] == '\n')
			continue;
		line[strcspn(line, "\n")] = '\0';
		/* fields may be empty ("17,,context-switches"): split by hand */
		for (p = line; n < 4; n++) {
			fld[n] = p;
			p = strchr(p, ',');
			if (!p) {
				n++;
				break;
			}
			*p++ = '\0';
		}
		if (n < 4)
			continue;
		pid_t t = line_tid(fld[0]);
		for (k = 0; k < 2 && tid[k] != t; k++)
			;
		if (k == 2)
			continue;
		bool counted = fld[1][0] != '<'; /* "<not counted>", "<not supported>": 0 */
		if (strncmp(fld[3], "task-clock", 10) == 0) {
			out[k].cpu_ms = counted ? strtod(fld[1], NULL) : 0;
			found[k] |= 1;
		} else if (strncmp(fld[3], "context-switches", 16) == 0) {
			out[k].switches = counted ? strtoull(fld[1], NULL, 10) : 0;
			found[k] |= 2;
		}
	}
	fclose(f);
	return found[0] == 3 && found[1] == 3 ? 0 : -ENOENT;
}

/* Run perf stat over the two threads for ms; 0 with out[], or < 0 (said why). */
static int perf_window(const pid_t tid[2], uint32_t ms, struct cost out[2])
{
	char opath[] = "/tmp/store_sleep_perf.XXXXXX", epath[] = "/tmp/store_sleep_perr.XXXXXX";
	char tids[64], secs[32];
	char *argv[] = { "perf", "stat", "-x,", "--per-thread", "-e", "task-clock,context-switches",
			 "-t", tids, "-o", opath, "--", "sleep", secs, NULL };
	posix_spawn_file_actions_t fa;
	int ofd = mkstemp(opath), efd = mkstemp(epath), rc = -1, status = 0;
	pid_t pid;

	if (ofd < 0 || efd < 0) {
		fprintf(stderr, "%s: mkstemp for perf's output: %s\n", g_who, strerror(errno));
		goto out;
	}
	snprintf(tids, sizeof(tids), "%d,%d", (int)tid[0], (int)tid[1]);
	snprintf(secs, sizeof(secs), "%.3f", ms / 1000.0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, efd, STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, efd, STDERR_FILENO);
	rc = posix_spawnp(&pid, "perf", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0) {
		fprintf(stderr, "%s: posix_spawnp(perf): %s\n", g_who, strerror(rc));
		rc = -1;
		goto out;
	}
	rc = wait_child(pid, (uint64_t)ms * KVS_NSEC_PER_MSEC + PERF_SLACK_NS, &status);
	if (rc < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char msg[256] = "";
		ssize_t n = pread(efd, msg, sizeof(msg) - 1, 0);

		msg[n > 0 ? n : 0] = '\0';
		msg[strcspn(msg, "\n")] = '\0';
		fprintf(stderr, "%s: perf stat failed (%s, status 0x%x): %s\n", g_who,
			rc == -ETIMEDOUT ? "killed at its deadline" : rc < 0 ? kvs_strerror(rc) : "exit",
			(unsigned)status, msg);
		rc = -1;
		goto out;
	}
	rc = perf_parse(opath, tid, out);
	if (rc < 0)
		fprintf(stderr, "%s: perf stat's output lacks a thread's task-clock or "
				"context-switches (%s)\n", g_who, kvs_strerror(rc));
out:
	if (ofd >= 0) {
		close(ofd);
		unlink(opath);
	}
	if (efd >= 0) {
		close(efd);
		unlink(epath);
	}
	return rc;
}

/* Measure the store's two threads; prints the line.  0 or -1. */
static int measure(const struct opts *o, const pid_t tid[2])
{
	uint64_t c0[2], n0[2], c1[2], n1[2], t0, t1;
	struct cost cost[2] = { { 0, 0 }, { 0, 0 } };
	bool from_perf = false;
	double win_s;

	for (int k = 0; k < 2; k++)
		if (schedstat(tid[k], &c0[k], &n0[k]) < 0) {
			fprintf(stderr, "%s: /proc/self/task/%d/schedstat unreadable\n", g_who,
				(int)tid[k]);
			return -1;
		}
	t0 = kvs_now_ns();
	if (o->use_perf) {
		from_perf = perf_window(tid, o->measure_ms, cost) == 0;
		if (!from_perf)
			fprintf(stderr, "%s: perf unusable: falling back to schedstat for this "
					"window\n", g_who);
	}
	if (!from_perf) {
		/* the rest of the window (all of it with --perf none, or after a perf
		 * that failed early) */
		uint64_t win = (uint64_t)o->measure_ms * KVS_NSEC_PER_MSEC, el = kvs_now_ns() - t0;

		if (el < win)
			sleep_ns(win - el);
	}
	t1 = kvs_now_ns();
	for (int k = 0; k < 2; k++)
		if (schedstat(tid[k], &c1[k], &n1[k]) < 0) {
			fprintf(stderr, "%s: /proc/self/task/%d/schedstat unreadable (thread gone?)\n",
				g_who, (int)tid[k]);
			return -1;
		}
	if (from_perf) {
		win_s = o->measure_ms / 1000.0;
	} else {
		win_s = (double)(t1 - t0) / 1e9;
		for (int k = 0; k < 2; k++) {
			cost[k].cpu_ms = (double)(c1[k] - c0[k]) / 1e6;
			cost[k].switches = n1[k] - n0[k];
		}
	}
	printf("store_sleep variant=%s backend=%s waiter=%s hold_ms=%u measure_ms=%u "
	       "dispatcher_wakeups_per_s=%.1f dispatcher_cpu_ms=%.3f copier_wakeups_per_s=%.1f "
	       "copier_cpu_pct=%.2f src=%s\n",
	       KVS_BENCH_VARIANT, backend_names[o->backend], o->peer ? "peer" : "own", o->hold_ms,
	       o->measure_ms, (double)cost[0].switches / win_s, cost[0].cpu_ms,
	       (double)cost[1].switches / win_s, cost[1].cpu_ms / (win_s * 1000.0) * 100.0,
	       from_perf ? "perf" : "schedstat");
	fflush(stdout);
	return 0;
}

/* The measured store s has one load (task) outstanding, its read held: settle,
 * measure, check it was still held, wait, verify.  0 or -1. */
static int measured_load(const struct opts *o, struct kvs_store *s, const unsigned char *want)
{
	unsigned char *buf = malloc(SHARD_BYTES);
	pid_t tid[2] = { find_tid("kvs-dispatch"), find_tid("kvs-copier") };
	struct kvs_store_stats ss;
	uint64_t task = 0, t_sub;
	int rc = -1, st;

	if (!buf) {
		fprintf(stderr, "%s: out of memory\n", g_who);
		return -1;
	}
	if (!tid[0] || !tid[1]) {
		fprintf(stderr, "%s: the store's threads not found by name (kvs-dispatch %d, "
				"kvs-copier %d)\n", g_who, (int)tid[0], (int)tid[1]);
		goto out;
	}
	memset(buf, POISON, SHARD_BYTES);
	t_sub = kvs_now_ns();
	if (submit(s, false, buf, &task) < 0)
		goto out;
	sleep_ns((uint64_t)SETTLE_MS * KVS_NSEC_PER_MSEC);
	if (measure(o, tid) < 0)
		goto out;
	st = kvs_store_check(s, task);
	if (st != 1) {
		fprintf(stderr, "%s: the load was no longer running when the window closed "
				"(%.0f ms after submit; check %d: %s): the numbers above are not of a "
				"held read\n", g_who, (double)(kvs_now_ns() - t_sub) / 1e6, st,
			st < 0 ? kvs_strerror(st) : "done");
		goto out;
	}
	if (wait_task(s, task, (uint64_t)o->hold_ms * KVS_NSEC_PER_MSEC + 10 * KVS_NSEC_PER_SEC,
		      "measured load") < 0)
		goto out;
	if (verify(buf, want) < 0)
		goto out;
	st = kvs_store_stats(s, kvs_cache_rank(kvs_store_cache(s)), &ss);
	if (st < 0) {
		fprintf(stderr, "%s: kvs_store_stats: %s\n", g_who, kvs_strerror(st));
		goto out;
	}
	if (ss.owner_reads != (o->peer ? 0u : 1u)) {
		fprintf(stderr, "%s: owner_reads %" PRIu64 ", expected %u: this rank %s the "
				"slot's owner\n", g_who, ss.owner_reads, o->peer ? 0u : 1u,
			o->peer ? "was" : "was not");
		goto out;
	}
	rc = 0;
out:
	free(buf);
	return rc;
}

/* ---- own waiter: latency ---- */

static int run_latency_own(const struct opts *o, const char *uid)
{
	char kv[1024];
	unsigned char want[SHARD_BYTES];
	struct kvs_store *s;
	int rc;

	store_kv(kv, sizeof(kv), uid, 0, 1, o->hold_ms,
		 ",backend=latency,latency_us=%u", o->hold_ms * 1000u);
	if (store_open(kv, &s) < 0)
		return -1;
	pattern(want);
	rc = measured_load(o, s, want);
	kvs_store_close(s);
	return rc;
}

/* ---- own waiter: posix (pool, uring) ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* 1: io_uring usable for a posix backend on root; 0: refused (said why). */
static int uring_usable(const char *root)
{
	struct kvs_backend_config bc;
	struct kvs_backend *b;
	struct kvs_backend_info info;
	int rc;

	kvs_backend_config_init(&bc);
	bc.kind = KVS_BACKEND_POSIX;
	bc.io_engine = KVS_IO_ENGINE_URING;
	bc.shard_bytes = SHARD_BYTES;
	bc.nroots = 1;
	bc.roots[0] = root;
	bc.log = log_cb;
	rc = kvs_backend_open(&bc, &b);
	if (rc < 0) {
		fprintf(stderr, "%s: io_uring refused: kvs_backend_open(io_engine uring): %d (%s)\n",
			g_who, rc, kvs_strerror(rc));
		return rc == -EPERM || rc == -ENOSYS || rc == -EACCES || rc == -ENOMEM ||
		       rc == -EOPNOTSUPP ? 0 : rc;
	}
	rc = kvs_backend_info(b, &info);
	kvs_backend_close(b);
	if (rc < 0)
		return rc;
	if ((info.flags & KVS_BACKEND_INFO_FALLBACK) || info.io_engine != KVS_IO_ENGINE_URING) {
		fprintf(stderr, "%s: io_uring refused (%s): the backend fell back to the pool\n",
			g_who, kvs_strerror(info.fallback_err));
		return 0;
	}
	return 1;
}

/* 0, -1 (failure), or 77 (uring unavailable: the skip line printed). */
static int run_posix_own(const struct opts *o, const char *uid)
{
	char root[] = "/tmp/kvs-store-sleep.XXXXXX", kv[2048], duid[72];
	const char *engine = o->backend == BK_URING ? "uring" : "pool";
	unsigned char *want = malloc(SHARD_BYTES);
	struct kvs_store *s = NULL;
	uint64_t task;
	int rc = -1;

	if (!want) {
		fprintf(stderr, "%s: out of memory\n", g_who);
		return -1;
	}
	if (!mkdtemp(root)) {
		fprintf(stderr, "%s: mkdtemp(%s): %s\n", g_who, root, strerror(errno));
		free(want);
		return -1;
	}
	if (o->backend == BK_URING) {
		int u = uring_usable(root);

		if (u == 0) {
			printf("store_sleep variant=%s backend=uring waiter=own "
			       "skipped=io_uring_unavailable\n", KVS_BENCH_VARIANT);
			fflush(stdout);
			rc = 77;
			goto out;
		}
		if (u < 0)
			goto out;
	}

	/* The dump store: no fault delay. */
	snprintf(duid, sizeof(duid), "%s.dump", uid);
	store_kv(kv, sizeof(kv), duid, 0, 1, o->hold_ms,
		 ",backend=posix,backend_roots=%s,io_engine=%s", root, engine);
	if (store_open(kv, &s) < 0)
		goto out;
	pattern(want);
	if (submit(s, true, want, &task) < 0 ||
	    wait_task(s, task, 10 * KVS_NSEC_PER_SEC, "dump") < 0)
		goto out;
	kvs_store_close(s);
	s = NULL;

	/* The measured store: the same root, every completion held hold_ms. */
	store_kv(kv, sizeof(kv), uid, 0, 1, o->hold_ms,
		 ",backend=posix,backend_roots=%s,io_engine=%s,fault_delay_us=%u", root, engine, o->hold_ms * 1000u);
	if (store_open(kv, &s) < 0)
		goto out;
	rc = measured_load(o, s, want);
out:
	kvs_store_close(s);
	nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(want);
	return rc;
}

/* ---- peer waiter: latency, two ranks ---- */

/* Wait up to PIPE_TIMEOUT_MS for one byte (or EOF) on fd; 1 byte, 0 EOF, -1. */
static int pipe_read1(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;
	int n;

	do
		n = poll(&pfd, 1, PIPE_TIMEOUT_MS);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	do
		n = (int)read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 1 : n == 0 ? 0 : -1;
}

/* The child rank: open, wait for go, load (held hold_ms), say so, wait, verify. */
static int peer_child(const struct opts *o, const char *uid, int go_fd, int sub_fd)
{
	char kv[1024];
	unsigned char *buf = malloc(SHARD_BYTES), *want = malloc(SHARD_BYTES);
	struct kvs_store *s = NULL;
	uint64_t task;
	int rc = 1;

	g_who = "store_sleep_bench child";
	if (!buf || !want)
		goto out;
	store_kv(kv, sizeof(kv), uid, 1, 2, o->hold_ms,
		 ",backend=latency,latency_us=%u", o->hold_ms * 1000u);
	if (store_open(kv, &s) < 0)
		goto out;
	if (pipe_read1(go_fd) != 1) {
		fprintf(stderr, "%s: no go from the parent\n", g_who);
		goto out;
	}
	memset(buf, POISON, SHARD_BYTES);
	if (submit(s, false, buf, &task) < 0)
		goto out;
	if (write(sub_fd, "s", 1) != 1) {
		fprintf(stderr, "%s: write to the parent: %s\n", g_who, strerror(errno));
		goto out;
	}
	if (wait_task(s, task, (uint64_t)o->hold_ms * KVS_NSEC_PER_MSEC + 10 * KVS_NSEC_PER_SEC,
		      "child's load") < 0)
		goto out;
	pattern(want);
	if (verify(buf, want) < 0)
		goto out;
	rc = 0;
out:
	kvs_store_close(s);
	free(buf);
	free(want);
	return rc;
}

static int run_latency_peer(const struct opts *o, const char *uid)
{
	int go[2], sub[2], rc = -1, status = 0, w;
	pid_t parent = getpid(), child;
	char kv[1024];
	unsigned char want[SHARD_BYTES];
	struct kvs_store *s = NULL;

	if (pipe(go) < 0 || pipe(sub) < 0) {
		fprintf(stderr, "%s: pipe: %s\n", g_who, strerror(errno));
		return -1;
	}
	fflush(NULL);
	child = fork();
	if (child < 0) {
		fprintf(stderr, "%s: fork: %s\n", g_who, strerror(errno));
		return -1;
	}
	if (child == 0) {
		/* Dies with the parent: nothing of this run outlives it. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(1);
		close(go[1]);
		close(sub[0]);
		_exit(peer_child(o, uid, go[0], sub[1]));
	}
	close(go[0]);
	close(sub[1]);

	store_kv(kv, sizeof(kv), uid, 0, 2, o->hold_ms,
		 ",backend=latency,latency_us=%u", o->hold_ms * 1000u);
	if (store_open(kv, &s) < 0)
		goto out;
	if (write(go[1], "g", 1) != 1) {
		fprintf(stderr, "%s: write to the child: %s\n", g_who, strerror(errno));
		goto out;
	}
	if (pipe_read1(sub[0]) != 1) {
		fprintf(stderr, "%s: the child did not report its load submitted\n", g_who);
		goto out;
	}
	sleep_ns((uint64_t)PEER_LEAD_MS * KVS_NSEC_PER_MSEC); /* its slot is LOADING */
	pattern(want);
	rc = measured_load(o, s, want);
out:
	kvs_store_close(s);
	close(go[1]);
	close(sub[0]);
	w = wait_child(child, (uint64_t)o->hold_ms * KVS_NSEC_PER_MSEC + REAP_SLACK_NS, &status);
	if (w < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: the child rank failed (%s, status 0x%x)\n", g_who,
			w < 0 ? kvs_strerror(w) : "exit", (unsigned)status);
		rc = -1;
	}
	return rc;
}

/* ---- main ---- */

static void usage(void)
{
	fprintf(stderr, "usage: store_sleep_bench [--backend latency|pool|uring] [--waiter own|peer]\n"
			"                         [--hold-ms 1500] [--measure-ms 1000] [--perf perf|none]\n");
}

int main(int argc, char **argv)
{
	struct opts o = { .backend = BK_LATENCY, .use_perf = true, .hold_ms = 1500, .measure_ms = 1000 };
	char uid[48]; /* + ".dump" fits unique_id */
	struct kvs_cache_config cc;
	int rc;

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end = NULL;
		unsigned long x;

		if (!v) {
			usage();
			return 2;
		}
		i++;
		if (strcmp(opt, "--backend") == 0) {
			for (o.backend = 0; o.backend < 3 && strcmp(v, backend_names[o.backend]); o.backend++)
				;
			if (o.backend == 3)
				goto bad_arg;
		} else if (strcmp(opt, "--waiter") == 0) {
			if (strcmp(v, "own") && strcmp(v, "peer"))
				goto bad_arg;
			o.peer = strcmp(v, "peer") == 0;
		} else if (strcmp(opt, "--perf") == 0) {
			if (strcmp(v, "perf") && strcmp(v, "none"))
				goto bad_arg;
			o.use_perf = strcmp(v, "perf") == 0;
		} else if (strcmp(opt, "--hold-ms") == 0 || strcmp(opt, "--measure-ms") == 0) {
			x = strtoul(v, &end, 10);
			if (end == v || *end || x < 1 || x > 600000)
				goto bad_arg;
			if (opt[2] == 'h')
				o.hold_ms = (uint32_t)x;
			else
				o.measure_ms = (uint32_t)x;
		} else {
			goto bad_arg;
		}
		continue;
bad_arg:
		fprintf(stderr, "store_sleep_bench: bad value for %s: '%s'\n", opt, v);
		usage();
		return 2;
	}
	if (o.peer && o.backend != BK_LATENCY) {
		fprintf(stderr, "store_sleep_bench: --waiter peer needs --backend latency\n");
		return 2;
	}
	/* The window must close before the read completes (with a margin). */
	if (o.hold_ms < o.measure_ms + SETTLE_MS + (o.peer ? PEER_LEAD_MS : 0) + 100) {
		fprintf(stderr, "store_sleep_bench: --hold-ms %u too short for --measure-ms %u "
				"(need >= measure + %u)\n", o.hold_ms, o.measure_ms,
			SETTLE_MS + (o.peer ? PEER_LEAD_MS : 0) + 100);
		return 2;
	}

	snprintf(uid, sizeof(uid), "store_sleep.%s.%d", KVS_BENCH_VARIANT, (int)getpid());
	if (o.peer)
		rc = run_latency_peer(&o, uid);
	else if (o.backend == BK_LATENCY)
		rc = run_latency_own(&o, uid);
	else
		rc = run_posix_own(&o, uid);

	/* A store that failed half-way may leave its segments: remove them. */
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", uid);
	(void)kvs_cache_remove(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s.dump", uid);
	(void)kvs_cache_remove(&cc);
	if (rc == 77)
		return 77;
	if (rc < 0) {
		fprintf(stderr, "store_sleep_bench: backend=%s waiter=%s failed\n",
			backend_names[o.backend], o.peer ? "peer" : "own");
		return 1;
	}
	return 0;
}
