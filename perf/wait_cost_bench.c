/*
 * perf/wait_cost_bench.c — what waiting costs: waiter CPU and wake latency of the
 * wait/ module, one process publishing, N processes waiting.  One line per run:
 *
 *   wait_cost variant=<plain|kernel> waiters=<n> hold_us=<t> rounds=<r> cpu_pct=<..> ctx_switches=<n> wake_p50_us=<x> wake_p99_us=<y>
 *
 * This process is the publisher.  It creates a /dev/shm segment holding the
 * state word and a ring of publish timestamps, then starts the waiter group —
 * this same binary with --waiter-group, under
 * `perf stat -e task-clock,context-switches` — which forks N waiter processes.
 * Each waiter waits on the word with kvs_wait_while in KVS_WAIT_AUTO mode (the
 * library default: adaptive spin then futex in the kernel build, spin/yield in the
 * plain build) for whatever value comes next, and on each wake records
 * now - (publish time of the value after the one it waited on), both
 * CLOCK_MONOTONIC.  When all are
 * ready the publisher publishes rounds values, each hold_us after the previous
 * publish (a busy wait on the clock, for precise holds), then a stop value.
 *
 * The publisher runs pinned to the first CPU it may use and the waiter group to
 * all the others (when there are two or more): the publisher stands for the
 * owner rank's dispatcher on its own core, and its busy wait does not share a CPU
 * with the waiters.  Without that split the numbers depend on where the load
 * balancer happens to put the publisher: since Linux 6.6 (EEVDF) every
 * sched_yield pushes the yielder's deadline a slice further, so a spinner sharing
 * a CPU with a task that never yields is starved for scheduler ticks at a time.
 * --no-pin leaves placement to the scheduler.  With 7 waiters on a 2-core
 * machine, all 7 share one CPU: oversubscribed, as meant.
 *
 *   cpu_pct      waiter task-clock / (waiters x publishing wall time) x 100: the
 *                share of its waiting time each waiter spends on a CPU (the group
 *                process itself sleeps; start-up is included, ~1 ms per process)
 *   ctx_switches context switches of the waiter group over the run
 *   wake_p*_us   percentiles of all waiters' wake latencies, over the waits that
 *                found the word still at the value they waited on (a waiter that
 *                fell behind an oversubscribed machine's publisher and finds the
 *                next value already out has no wake to measure)
 *
 * Without a usable perf (missing, or perf_event_paranoid refuses), CPU and
 * context switches come from getrusage(RUSAGE_CHILDREN) of the group and the line
 * ends in src=rusage.
 *
 * usage: wait_cost_bench [--waiters N] [--hold-us T] [--rounds R] [--perf PATH|none]
 *                        [--no-pin]
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "wait/wait.h"

#ifndef KVS_BENCH_VARIANT
#define KVS_BENCH_VARIANT "unknown"
#endif

#define RING 4096u          /* publish timestamps kept (by value % RING) */
#define MAX_WAITERS 64
#define WAIT_TIMEOUT_NS (30 * KVS_NSEC_PER_SEC)
#define START_TIMEOUT_NS (30 * KVS_NSEC_PER_SEC)

struct wc_shm {
	_Atomic uint32_t word;                 /* the state word: the round */
	uint32_t pad0[15];                     /* own cache line */
	_Atomic uint32_t ready;                /* waiters waiting for round 1 */
	_Atomic uint32_t failed;               /* a waiter's wait failed */
	uint32_t waiters, rounds;              /* set before the group starts */
	uint64_t group_cpu_ns;                 /* rusage of the group's children */
	uint64_t group_ctx;
	_Atomic uint64_t stamp[RING];          /* publish time of value v at v % RING */
	_Atomic uint32_t count[MAX_WAITERS];   /* samples recorded per waiter */
	uint32_t lat_ns[];                     /* [waiter][rounds] wake latencies */
};

static size_t wc_bytes(uint32_t waiters, uint32_t rounds)
{
	return sizeof(struct wc_shm) + (size_t)waiters * rounds * sizeof(uint32_t);
}

static struct wc_shm *wc_map(const char *name, size_t bytes, int create)
{
	int fd = shm_open(name, O_RDWR | (create ? O_CREAT | O_EXCL : 0), 0600);
	void *p;

	if (fd < 0)
		return NULL;
	if (create && ftruncate(fd, (off_t)bytes) < 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

/* ---- waiter side ---- */

static int waiter(struct wc_shm *s, uint32_t idx)
{
	uint32_t last = 0, n = 0, stop = s->rounds + 1;
	uint32_t *lat = s->lat_ns + (size_t)idx * s->rounds;

	/* relaxed: a count the publisher polls; nothing is read on its account. */
	atomic_fetch_add_explicit(&s->ready, 1, memory_order_relaxed);
	for (;;) {
		struct kvs_wait_opts o = {
			.deadline_ns = kvs_deadline_after(WAIT_TIMEOUT_NS),
			.mode = KVS_WAIT_AUTO,
		};
		/* Behind (the next value is already out): no wake to measure.  relaxed:
		 * only compared, nothing is read on its account. */
		int behind = (atomic_load_explicit(&s->word, memory_order_relaxed) &
			      KVS_WAIT_VALUE_MASK) != last;
		int v = kvs_wait_while(&s->word, last, &o);
		uint64_t now = kvs_now_ns();

		if (v < 0) {
			fprintf(stderr, "wait_cost: waiter %u: %s\n", idx, kvs_strerror(v));
			atomic_store_explicit(&s->failed, 1, memory_order_relaxed); /* a stop flag */
			return 1;
		}
		if ((uint32_t)v >= stop)
			break;
		/* The wake latency is from the first publish after last (the change the
		 * waiter was waiting for), even if later values are out by now.
		 * relaxed: the stamp was stored before that publish (release), and
		 * kvs_wait_while's acquire makes it visible. */
		uint64_t t = atomic_load_explicit(&s->stamp[(last + 1) % RING], memory_order_relaxed);
		if (!behind && now >= t && n < s->rounds)
			lat[n++] = (uint32_t)(now - t > UINT32_MAX ? UINT32_MAX : now - t);
		last = (uint32_t)v;
	}
	/* relaxed: read after the group has exited (waitpid orders it). */
	atomic_store_explicit(&s->count[idx], n, memory_order_relaxed);
	return 0;
}

static int waiter_group(const char *name, uint32_t waiters, uint32_t rounds)
{
	struct wc_shm *s = wc_map(name, wc_bytes(waiters, rounds), 0);
	struct rusage ru;
	int bad = 0;

	if (!s) {
		perror("wait_cost: waiter group: shm");
		return 1;
	}
	for (uint32_t i = 0; i < waiters; i++) {
		pid_t pid = fork();

		if (pid == 0)
			_exit(waiter(s, i));
		if (pid < 0)
			return 1;
	}
	for (uint32_t i = 0; i < waiters; i++) {
		int st;

		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad = 1;
	}
	getrusage(RUSAGE_CHILDREN, &ru);
	s->group_cpu_ns = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * KVS_NSEC_PER_SEC +
			  ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000;
	s->group_ctx = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
	return bad;
}

/* ---- publisher side ---- */

/* The publisher's CPU (the first allowed) and the waiters' (the other allowed
 * ones); false when fewer than two CPUs are allowed. */
static bool split_cpus(cpu_set_t *pub, cpu_set_t *waiters)
{
	cpu_set_t all;
	int first = -1;

	CPU_ZERO(pub);
	CPU_ZERO(waiters);
	if (sched_getaffinity(0, sizeof(all), &all) < 0 || CPU_COUNT(&all) < 2)
		return false;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &all))
			continue;
		if (first < 0)
			first = c;
		CPU_SET(c, first == c ? pub : waiters);
	}
	return true;
}

static pid_t start_group(const char *perf, const char *perf_out, const char *self,
			 const char *name, uint32_t waiters, uint32_t rounds,
			 const cpu_set_t *cpus)
{
	char nw[16], nr[16];
	pid_t pid;

	snprintf(nw, sizeof(nw), "%u", waiters);
	snprintf(nr, sizeof(nr), "%u", rounds);
	fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid;
	if (cpus && sched_setaffinity(0, sizeof(*cpus), cpus) < 0)
		perror("wait_cost: waiter CPUs");
	if (perf) {
		int null = open("/dev/null", O_WRONLY);

		if (null >= 0)
			dup2(null, STDOUT_FILENO); /* perf's own chatter; results go to -o */
		execlp(perf, perf, "stat", "-x", ",", "-o", perf_out, "-e",
		       "task-clock,context-switches", "--", self, "--waiter-group", name, nw, nr,
		       (char *)NULL);
	} else {
		execl(self, self, "--waiter-group", name, nw, nr, (char *)NULL);
	}
	_exit(127);
}

/* Wait for every waiter to be ready, or the group to exit early; 0, 1 (exited:
 * *status set) or -ETIMEDOUT. */
static int await_ready(struct wc_shm *s, pid_t group, int *status)
{
	uint64_t deadline = kvs_deadline_after(START_TIMEOUT_NS);
	struct timespec pace = { 0, 100000 };

	while (atomic_load_explicit(&s->ready, memory_order_relaxed) < s->waiters) { /* a count */
		if (waitpid(group, status, WNOHANG) == group)
			return 1;
		if (kvs_now_ns() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pace, NULL); /* start-up, not measured */
	}
	return 0;
}

/* task-clock (ms) and context-switches from perf stat -x, output. */
static int parse_perf(const char *path, double *task_ms, uint64_t *ctx)
{
	FILE *f = fopen(path, "r");
	char line[512];
	int got = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *unit = strchr(line, ','), *event;

		if (!unit || line[0] == '#')
			continue;
		event = strchr(unit + 1, ',');
		if (!event)
			continue;
		event++;
		if (strncmp(event, "task-clock", 10) == 0 && line[0] != '<') {
			*task_ms = strtod(line, NULL);
			got |= 1;
		} else if (strncmp(event, "context-switches", 16) == 0 && line[0] != '<') {
			*ctx = strtoull(line, NULL, 10);
			got |= 2;
		}
	}
	fclose(f);
	return got == 3 ? 0 : -ENODATA;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static double pct_us(const uint32_t *v, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return n ? (double)v[i] / 1e3 : 0.0;
}

static int publish_rounds(struct wc_shm *s, uint64_t hold_ns, uint64_t *wall_ns)
{
	uint64_t t0 = kvs_now_ns(), prev = t0;

	for (uint32_t r = 1; r <= s->rounds + 1; r++) { /* rounds + 1 is the stop value */
		uint64_t now;

		do /* busy-wait: a sleep would add its own wake latency to the hold */
			now = kvs_now_ns();
		while (now - prev < hold_ns);
		/* relaxed: ordered before the publish by its release exchange. */
		atomic_store_explicit(&s->stamp[r % RING], now, memory_order_relaxed);
		kvs_wait_publish(&s->word, r);
		prev = now;
		if (r == s->rounds)
			*wall_ns = now - t0;
		if (atomic_load_explicit(&s->failed, memory_order_relaxed)) /* a stop flag */
			return -EIO;
	}
	return 0;
}

/* Reap the group (killing it first when kill_it); 0 when it exited 0. */
static int reap_group(pid_t group, int kill_it)
{
	int status;

	if (kill_it)
		kill(group, SIGKILL);
	while (waitpid(group, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -ECHILD;
}

static int report(struct wc_shm *s, uint32_t hold_us, uint64_t wall_ns, int use_perf,
		  const char *perf_out)
{
	uint64_t ctx = s->group_ctx, cpu_ns = s->group_cpu_ns;
	double task_ms = 0;
	uint32_t *all = malloc(((size_t)s->waiters * s->rounds + 1) * sizeof(*all));
	size_t n = 0;

	if (!all)
		return -ENOMEM;
	if (use_perf) {
		if (parse_perf(perf_out, &task_ms, &ctx) == 0) {
			cpu_ns = (uint64_t)(task_ms * 1e6);
		} else {
			fprintf(stderr, "wait_cost: no perf stat counts; using getrusage\n");
			ctx = s->group_ctx;
			use_perf = 0;
		}
	}
	for (uint32_t i = 0; i < s->waiters; i++) {
		uint32_t c = atomic_load_explicit(&s->count[i], memory_order_relaxed); /* after exit */

		memcpy(all + n, s->lat_ns + (size_t)i * s->rounds, c * sizeof(*all));
		n += c;
	}
	qsort(all, n, sizeof(*all), cmp_u32);
	printf("wait_cost variant=%s waiters=%u hold_us=%u rounds=%u cpu_pct=%.2f "
	       "ctx_switches=%" PRIu64 " wake_p50_us=%.2f wake_p99_us=%.2f%s\n",
	       KVS_BENCH_VARIANT, s->waiters, hold_us, s->rounds,
	       100.0 * (double)cpu_ns / ((double)s->waiters * (double)wall_ns), ctx,
	       pct_us(all, n, 0.50), pct_us(all, n, 0.99), use_perf ? "" : " src=rusage");
	free(all);
	return 0;
}

static int run(uint32_t waiters, uint32_t hold_us, uint32_t rounds, const char *perf,
	       bool pin)
{
	cpu_set_t pub_cpus, waiter_cpus;
	const cpu_set_t *group_cpus = NULL;
	char name[64], perf_out[] = "/tmp/kvs_wait_cost.XXXXXX", self[4096];
	size_t bytes = wc_bytes(waiters, rounds);
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int status, rc, tmp_fd = -1;
	uint64_t wall_ns = 0;
	struct wc_shm *s;
	pid_t group;

	if (len <= 0)
		return -errno;
	self[len] = '\0';
	snprintf(name, sizeof(name), "/kvs.wait_cost.%d", (int)getpid());
	s = wc_map(name, bytes, 1);
	if (!s)
		return -errno;
	s->waiters = waiters;
	s->rounds = rounds;
	if (perf) {
		tmp_fd = mkstemp(perf_out);
		if (tmp_fd < 0)
			perf = NULL;
	}
	if (pin && split_cpus(&pub_cpus, &waiter_cpus)) {
		group_cpus = &waiter_cpus;
		if (sched_setaffinity(0, sizeof(pub_cpus), &pub_cpus) < 0)
			perror("wait_cost: publisher CPU");
	}
	group = start_group(perf, perf_out, self, name, waiters, rounds, group_cpus);
	rc = group < 0 ? -errno : await_ready(s, group, &status);
	if (rc == 1 && perf) {
		/* perf could not run the group (missing, or refused): use rusage. */
		fprintf(stderr, "wait_cost: perf stat failed (exit %d); using getrusage\n",
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		perf = NULL;
		group = start_group(NULL, NULL, self, name, waiters, rounds, group_cpus);
		rc = group < 0 ? -errno : await_ready(s, group, &status);
	}
	if (rc == 1) {
		rc = -ECHILD; /* the group exited before its waiters were ready */
	} else if (group > 0) {
		if (rc == 0)
			rc = publish_rounds(s, (uint64_t)hold_us * 1000, &wall_ns);
		int grc = reap_group(group, rc < 0);
		if (rc == 0)
			rc = grc;
	}
	if (rc == 0)
		rc = report(s, hold_us, wall_ns, perf != NULL, perf_out);
	if (tmp_fd >= 0) {
		close(tmp_fd);
		unlink(perf_out);
	}
	munmap(s, bytes);
	shm_unlink(name);
	return rc;
}

int main(int argc, char **argv)
{
	uint32_t waiters = 1, hold_us = 100, rounds = 2000;
	const char *perf = "perf";
	bool pin = true;
	int rc, bad = 0;

	if (argc == 5 && strcmp(argv[1], "--waiter-group") == 0)
		return waiter_group(argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
				    (uint32_t)strtoul(argv[4], NULL, 10));
	for (int i = 1; i < argc && !bad; i++) {
		const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(opt, "--no-pin") == 0) {
			pin = false;
			continue;
		}
		if (!val) {
			bad = 1;
			break;
		}
		i++;
		if (strcmp(opt, "--waiters") == 0)
			waiters = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--hold-us") == 0)
			hold_us = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--rounds") == 0)
			rounds = (uint32_t)strtoul(val, NULL, 10);
		else if (strcmp(opt, "--perf") == 0)
			perf = strcmp(val, "none") == 0 ? NULL : val;
		else
			bad = 1;
	}
	if (bad || waiters < 1 || waiters > MAX_WAITERS || rounds < 1) {
		fprintf(stderr, "usage: wait_cost_bench [--waiters 1..%d] [--hold-us T] [--rounds R] "
				"[--perf PATH|none] [--no-pin]\n", MAX_WAITERS);
		return 2;
	}
	rc = run(waiters, hold_us, rounds, perf, pin);
	if (rc < 0) {
		fprintf(stderr, "wait_cost: waiters=%u hold_us=%u: %s\n", waiters, hold_us,
			kvs_strerror(rc));
		return 1;
	}
	return 0;
}
