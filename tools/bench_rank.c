/*
 * tools/bench_rank.c — the processes of `kvshare bench`: signals and children
 * (reap with a deadline), one rank (open its store, load every task, verify
 * every shard against the reference bytes), one run (fork the ranks, start them
 * together, reap them, name the first failure) and the plain run (this program
 * re-executed against the plain library, running its ranks from the same
 * shared block).
 *
 * Timing.  Ranks open their stores (cache creation included), report ready on a
 * pipe and start together when the parent closes a second pipe; the start is the
 * parent's clock just before that close, the end the last rank's finish
 * (CLOCK_MONOTONIC, the same clock in every process).  Task latency is each
 * task's submit to kvs_store_wait's return, measured by the rank (a rank waits
 * for its tasks in submit order; tasks of one rank complete in order).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "tools/bench.h"
#include "tools/cli.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

void b_seterr(char *dst, const char *fmt, ...)
{
	va_list ap;

	if (dst[0])
		return; /* the first failure is the cause */
	va_start(ap, fmt);
	vsnprintf(dst, B_ERR, fmt, ap);
	va_end(ap);
}

static uint64_t rusage_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * KVS_NSEC_PER_SEC +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * KVS_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static void write_byte(int fd, char c)
{
	while (write(fd, &c, 1) < 0 && errno == EINTR)
		;
}

/* ------------------------------------------------------------------------ */
/* Signals and children                                                      */

/* The parent (and the re-executed plain run) keep these blocked and take them
 * with sigtimedwait: SIGCHLD wakes a reap, the others abort the run cleanly
 * (children killed, segments and the temp store removed). */
static sigset_t g_sigs, g_oldmask;
volatile sig_atomic_t b_interrupted;

void b_signals_block(void)
{
	/* A reader that went away (| head) must not kill us before the cleanup;
	 * the ranks inherit this (a closed stderr does not kill a rank either). */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&g_sigs);
	sigaddset(&g_sigs, SIGCHLD);
	sigaddset(&g_sigs, SIGINT);
	sigaddset(&g_sigs, SIGTERM);
	sigaddset(&g_sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &g_sigs, &g_oldmask);
}

static void signals_wait(uint64_t ns)
{
	struct timespec ts = kvs_ns_to_timespec(ns);
	int s = sigtimedwait(&g_sigs, NULL, &ts);

	if (s == SIGINT || s == SIGTERM || s == SIGHUP)
		b_interrupted = s;
}

/* A forked child: the caller's signal mask back, and death with its parent. */
void b_child_setup(pid_t parent)
{
	sigprocmask(SIG_SETMASK, &g_oldmask, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

/*
 * Reap the n children in pids[] (0 entries are skipped) by the deadline; past it,
 * or on an interrupt, the rest are killed.  status[i] gets each wait status (-1
 * when killed by us).  tick, when set, runs about every 200 ms.  Returns the
 * number of children that did not exit 0.
 */
uint32_t b_reap(pid_t *pids, int *status, uint32_t n, uint64_t deadline, b_tick_fn tick,
		     void *arg)
{
	uint32_t left = 0, bad = 0;
	bool killed = false;

	for (uint32_t i = 0; i < n; i++)
		left += pids[i] > 0;
	while (left) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);

		if (pid > 0) {
			for (uint32_t i = 0; i < n; i++)
				if (pids[i] == pid) {
					pids[i] = 0;
					left--;
					status[i] = killed ? -1 : st;
					if (killed || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
						bad++;
				}
			continue;
		}
		uint64_t now = kvs_now_ns();
		if (!killed && (now >= deadline || b_interrupted)) {
			for (uint32_t i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			killed = true;
			continue;
		}
		if (tick)
			tick(arg, now);
		signals_wait(killed ? 100000000ull
				    : (deadline - now < 200000000ull ? deadline - now : 200000000ull));
	}
	return bad;
}

/* ------------------------------------------------------------------------ */
/* Library log lines                                                         */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
bool b_verbose;

/* arg: the rank's result (its first error line is kept), or NULL. */
void b_log_cb(void *arg, int level, const char *msg)
{
	struct b_rank *r = arg;

	if (r && (level <= KVS_LOG_ERROR || (level == KVS_LOG_WARN && !strncmp(msg, "numa: ", 6)))) {
		char *keep = level <= KVS_LOG_ERROR ? r->liberr : r->libnuma;

		pthread_mutex_lock(&g_log_lock);
		if (!keep[0])
			snprintf(keep, B_ERR, "%s", msg);
		pthread_mutex_unlock(&g_log_lock);
	}
	if (b_verbose && level <= KVS_LOG_WARN)
		fprintf(stderr, "kvshare bench: [%d] %s\n", (int)getpid(), msg);
}

/* ------------------------------------------------------------------------ */
/* One rank                                                                  */

static void store_config(const struct b_shm *sh, const struct b_run *run, uint32_t rank,
			 uint32_t engine, struct b_rank *res, struct kvs_store_config *cfg)
{
	const struct b_params *p = &sh->p;

	kvs_store_config_init(cfg);
	snprintf(cfg->cache.unique_id, sizeof(cfg->cache.unique_id), "%s", run->uid);
	cfg->cache.device_id = (int32_t)rank;
	cfg->cache.local_rank_size = p->ranks;
	cfg->cache.slot_bytes = p->shard_bytes;
	cfg->cache.slot_count = p->cap_slots;
	cfg->cache.shards_per_block = p->shards;
	cfg->cache.hugetlb = run->hugetlb;
	cfg->copy_engine = engine == ENGINE_CUDA ? KVS_COPY_ENGINE_CUDA : KVS_COPY_ENGINE_HOST;
	cfg->share_buffer = run->share;
	cfg->timeout_ns = B_TASK_TIMEOUT_NS;
	b_backend_wire(&cfg->backend);
	cfg->log = b_log_cb;
	cfg->log_arg = res;
}

/* Compare a completed task's shards with the dump; returns 0 or a failure. */
static int verify_task(struct b_shm *sh, struct b_dev *d, size_t base, uint32_t t,
		       struct b_rank *res)
{
	const struct b_params *p = &sh->p;
	const uint32_t *task = sh_task(sh), *acc = sh_acc(sh);

	for (uint32_t a = task[t], j = 0; a < task[t + 1]; a++, j++) {
		for (uint32_t s = 0; s < p->shards; s++) {
			size_t off = base + ((size_t)j * p->shards + s) * p->shard_bytes;
			const unsigned char *got = b_dev_read(d, off, p->shard_bytes, res->err);
			const unsigned char *want = sh_ref(sh, acc[a], s);

			if (!got)
				return -EIO;
			if (memcmp(got, want, p->shard_bytes) == 0)
				continue;
			if (res->bad_shards++ == 0) {
				uint64_t k = 0;

				while (k < p->shard_bytes && got[k] == want[k])
					k++;
				b_seterr(res->err, "block %u shard %u (task %u): loaded bytes differ "
						 "from the dumped ones at offset %" PRIu64,
				       acc[a], s, t, k);
			}
		}
	}
	return 0;
}

/* Load every task, B_WINDOW in flight; 0 or the first failure.  *verify_ns:
 * the CPU time this thread spent verifying (not the store's). */
static int rank_work(struct b_shm *sh, struct b_run *run, uint32_t runi, uint32_t rank,
		     struct kvs_store *st, struct b_dev *d, size_t slot_bytes, struct b_rank *res,
		     uint64_t *verify_ns)
{
	const struct b_params *p = &sh->p;
	const uint32_t *task = sh_task(sh), *acc = sh_acc(sh);
	const struct kvs_block_id *ids = sh_ids(sh);
	uint32_t maxsh = p->task_max_blocks * p->shards;
	struct kvs_store_tensor *tens = calloc(maxsh, sizeof(*tens));
	struct kvs_store_shard *shd = calloc(maxsh, sizeof(*shd));
	uint32_t *lat = sh_lat(sh, runi, rank);
	uint64_t tid[B_WINDOW], t_sub[B_WINDOW];
	uint32_t next = 0, done = 0;
	int rc = 0;

	if (!tens || !shd) {
		b_seterr(res->err, "out of memory");
		rc = -ENOMEM;
		goto out;
	}
	while (done < p->ntasks) {
		while (next < p->ntasks && next - done < B_WINDOW) {
			uint32_t w = next % B_WINDOW, n = 0;
			size_t base = w * slot_bytes;

			for (uint32_t a = task[next], j = 0; a < task[next + 1]; a++, j++)
				for (uint32_t s = 0; s < p->shards; s++, n++) {
					size_t off = base + ((size_t)j * p->shards + s) * p->shard_bytes;

					tens[n] = (struct kvs_store_tensor){ .addr = b_dev_addr(d, off) };
					shd[n] = (struct kvs_store_shard){ .block = ids[acc[a]], .shard = s,
									   .tensor_count = 1,
									   .tensors = &tens[n] };
				}
			rc = b_dev_poison(d, base, (size_t)n * p->shard_bytes, p->shard_bytes, res->err);
			if (rc < 0)
				goto out;
			t_sub[w] = kvs_now_ns();
			rc = kvs_store_load(st, shd, n, &tid[w]);
			if (rc < 0) {
				b_seterr(res->err, "kvs_store_load (task %u, %u shards): %s", next, n,
				       kvs_strerror(rc));
				goto out;
			}
			next++;
		}
		uint32_t w = done % B_WINDOW;
		rc = kvs_store_wait(st, tid[w], B_TASK_TIMEOUT_NS + 10 * KVS_NSEC_PER_SEC);
		uint64_t now = kvs_now_ns();
		if (rc != 0) {
			if (rc == 1)
				rc = -ETIMEDOUT;
			b_seterr(res->err, "task %u failed: %s%s%s%s", done, kvs_strerror(rc),
			       res->liberr[0] ? " (" : "", res->liberr, res->liberr[0] ? ")" : "");
			goto out;
		}
		uint64_t us = (now - t_sub[w]) / 1000;
		lat[done] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
		uint64_t c0 = thread_cpu_ns();
		rc = verify_task(sh, d, w * slot_bytes, done, res);
		*verify_ns += thread_cpu_ns() - c0;
		if (rc < 0)
			goto out;
		uint64_t nsh = (uint64_t)(task[done + 1] - task[done]) * p->shards;
		res->tasks++;
		res->shards += nsh;
		res->bytes += nsh * p->shard_bytes;
		/* relaxed: a progress count */
		atomic_fetch_add_explicit(&run->progress, nsh, memory_order_relaxed);
		done++;
	}
out:
	free(tens);
	free(shd);
	return rc;
}

static int rank_main(struct b_shm *sh, uint32_t runi, uint32_t rank, int ready_fd, int go_fd)
{
	struct b_run *run = &sh->run[runi];
	struct b_rank *res = &run->rank[rank];
	const struct b_params *p = &sh->p;
	uint32_t engine = p->engine;
	size_t slot_bytes = (size_t)p->task_max_blocks * p->shards * p->shard_bytes;
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	struct b_dev d;
	char c;
	int rc;

	memset(&d, 0, sizeof(d));
	store_config(sh, run, rank, engine, res, &cfg);
	rc = kvs_store_open(&cfg, &st);
	if (rc == -ENODEV && engine == ENGINE_CUDA) {
		/* A library without the CUDA engine (the plain build): host copies. */
		engine = ENGINE_HOST;
		res->liberr[0] = '\0';
		atomic_store_explicit(&run->engine_fallback, 1, memory_order_relaxed);
		store_config(sh, run, rank, engine, res, &cfg);
		rc = kvs_store_open(&cfg, &st);
	}
	if (rc < 0) {
		b_seterr(res->err, "kvs_store_open: %s%s%s%s", kvs_strerror(rc),
		       res->liberr[0] ? " (" : "", res->liberr, res->liberr[0] ? ")" : "");
		goto fail;
	}
	res->engine = engine;
	struct kvs_cache_seg_info si;
	if (kvs_cache_seg_info(kvs_store_cache(st), 0, &si) == 0)
		res->backing = si.backing;
	if (engine == ENGINE_CUDA && b_cuda_load(res->err, B_ERR) < 0) {
		rc = -ENOENT;
		goto fail;
	}
	rc = b_dev_alloc(&d, engine == ENGINE_CUDA, (int)rank, B_WINDOW * slot_bytes, p->shard_bytes,
		       res->err);
	if (rc < 0)
		goto fail;
	write_byte(ready_fd, 'R');
	close(ready_fd);
	while (read(go_fd, &c, 1) < 0 && errno == EINTR)
		; /* EOF: the parent closed the pipe: go */
	if (run->abort_run) {
		rc = -ECANCELED;
		b_seterr(res->err, "run aborted: another rank failed to start");
		goto out;
	}

	uint64_t cpu0 = rusage_ns(), verify_ns = 0;
	rc = rank_work(sh, run, runi, rank, st, &d, slot_bytes, res, &verify_ns);
	res->finish_ns = kvs_now_ns();
	uint64_t cpu = rusage_ns() - cpu0;
	res->cpu_ns = cpu > verify_ns ? cpu - verify_ns : 0;
	struct kvs_cache *cache = kvs_store_cache(st);
	int me = kvs_cache_rank(cache);
	if (me >= 0) {
		(void)kvs_store_stats(st, me, &res->ss);
		(void)kvs_cache_stats(cache, me, &res->cs);
	}
	goto out;
fail:
	write_byte(ready_fd, 'F');
	close(ready_fd);
out:
	res->rc = rc;
	kvs_store_close(st);
	b_dev_free(&d);
	return rc < 0 || res->bad_shards ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* One run: fork the ranks, start them together, reap them                   */

struct b_progress {
	struct b_shm *sh;
	struct b_run *run;
	uint64_t t0, last;
	bool on;
};

static void progress_tick(void *arg, uint64_t now)
{
	struct b_progress *pg = arg;
	const struct b_params *p = &pg->sh->p;
	uint64_t total = (uint64_t)p->ranks * p->naccess * p->shards;
	/* relaxed: a progress count */
	uint64_t done = atomic_load_explicit(&pg->run->progress, memory_order_relaxed);

	if (!pg->on || now - pg->last < 200000000ull)
		return;
	pg->last = now;
	fprintf(stderr, "\r  %-14s %3u%%  %6.1f s ", pg->run->name,
		total ? (unsigned)(done * 100 / total) : 0, (double)(now - pg->t0) / 1e9);
	fflush(stderr);
}

static void progress_end(struct b_progress *pg)
{
	if (pg->on && pg->last) {
		fprintf(stderr, "\r%40s\r", "");
		fflush(stderr);
	}
}

/* Remove the run's cache segments (left only if a rank died). */
static void run_remove_segments(const struct b_shm *sh, const struct b_run *run)
{
	struct kvs_cache_config cc;

	kvs_cache_config_init(&cc);
	cc.attach_timeout_ns = 5 * KVS_NSEC_PER_SEC;
	if (run->share) {
		snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", run->uid);
		(void)kvs_cache_remove(&cc);
		return;
	}
	for (uint32_t r = 0; r < sh->p.ranks; r++) {
		snprintf(cc.unique_id, sizeof(cc.unique_id), "%.48s.rank%u", run->uid, r);
		(void)kvs_cache_remove(&cc);
	}
}

/* Wait for n ready bytes; 0, or -1 (a rank failed or exited, the deadline, an
 * interrupt). */
static int await_ready(int fd, uint32_t n)
{
	uint64_t deadline = kvs_deadline_after(B_START_TIMEOUT_NS);
	uint32_t got = 0;

	while (got < n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		uint64_t now = kvs_now_ns();
		char buf[B_MAX_RANKS];
		ssize_t k;

		signals_wait(0);
		if (now >= deadline || b_interrupted)
			return -1;
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		k = read(fd, buf, sizeof(buf));
		if (k == 0)
			return -1; /* every rank closed its end: some exited */
		if (k < 0)
			continue;
		for (ssize_t i = 0; i < k; i++)
			if (buf[i] != 'R')
				return -1;
		got += (uint32_t)k;
	}
	return 0;
}

/* Before each run of a configuration (--repeat): what its processes set, zeroed
 * (everything from abort_run on; what the parent set before stays). */
void b_run_reset(struct b_run *run)
{
	memset(&run->abort_run, 0, sizeof(*run) - offsetof(struct b_run, abort_run));
}

/* Run the ranks of run runi from this process (it has no threads). */
int b_run_ranks(struct b_shm *sh, uint32_t runi, bool progress)
{
	struct b_run *run = &sh->run[runi];
	const struct b_params *p = &sh->p;
	pid_t pids[B_MAX_RANKS] = { 0 }, me = getpid();
	int status[B_MAX_RANKS], ready[2], go[2];
	struct b_progress pg = { .sh = sh, .run = run, .on = progress };
	uint32_t started = 0;
	bool bad = false;

	snprintf(run->variant, sizeof(run->variant), "%s", kvs_variant());
	snprintf(run->version, sizeof(run->version), "%s", kvs_version());
	if (run->want_variant[0] && strcmp(run->variant, run->want_variant) != 0) {
		b_seterr(run->err, "loaded the %s libkvshare.so.1, not the %s one", run->variant,
		       run->want_variant);
		run->rc = -ENOEXEC;
		return -1;
	}
	run_remove_segments(sh, run); /* never adopt a stale cache of the same name */
	if (pipe(ready) < 0 || pipe(go) < 0) {
		b_seterr(run->err, "pipe: %s", strerror(errno));
		run->rc = -errno;
		return -1;
	}
	b_backend_set(sh, run);
	fflush(NULL);
	for (uint32_t i = 0; i < p->ranks; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			b_child_setup(me);
			close(ready[0]);
			close(go[1]);
			_exit(rank_main(sh, runi, i, ready[1], go[0]));
		}
		if (pid < 0) {
			b_seterr(run->err, "fork: %s", strerror(errno));
			bad = true;
			break;
		}
		pids[i] = pid;
		started++;
	}
	close(ready[1]);
	close(go[0]);
	if (bad || await_ready(ready[0], started) < 0) {
		run->abort_run = 1;
		bad = true;
	}
	run->t0_ns = pg.t0 = kvs_now_ns();
	close(go[1]); /* the start: every rank's read() returns EOF */
	uint32_t failed = b_reap(pids, status, started, run->t0_ns + B_RUN_TIMEOUT_NS,
			       progress_tick, &pg);
	close(ready[0]);
	progress_end(&pg);
	run_remove_segments(sh, run);

	run->end_ns = run->t0_ns;
	for (uint32_t i = 0; i < p->ranks; i++)
		if (run->rank[i].finish_ns > run->end_ns)
			run->end_ns = run->rank[i].finish_ns;
	/* The cause first: a rank's own failure, not the others' abort after it. */
	for (uint32_t i = 0; i < p->ranks; i++) {
		const struct b_rank *r = &run->rank[i];

		if ((r->rc < 0 && r->rc != -ECANCELED) || r->bad_shards) {
			b_seterr(run->err, "rank %u: %s", i, r->err[0] ? r->err : kvs_strerror(r->rc));
			bad = true;
		}
	}
	for (uint32_t i = 0; i < p->ranks; i++) {
		const struct b_rank *r = &run->rank[i];

		if (r->rc < 0 || r->bad_shards) {
			b_seterr(run->err, "rank %u: %s", i, r->err[0] ? r->err : kvs_strerror(r->rc));
			bad = true;
		} else if (i < started && status[i] != 0) {
			if (status[i] == -1)
				b_seterr(run->err, "rank %u: %s", i,
				       b_interrupted ? "interrupted" : "still running at the deadline: killed");
			else if (WIFSIGNALED(status[i]))
				b_seterr(run->err, "rank %u: killed by signal %d", i, WTERMSIG(status[i]));
			else
				b_seterr(run->err, "rank %u: exited %d", i, WEXITSTATUS(status[i]));
			bad = true;
		}
	}
	if (b_interrupted) {
		b_seterr(run->err, "interrupted");
		bad = true;
	}
	/* relaxed: every writer has exited */
	if (atomic_load_explicit(&run->count.failures, memory_order_relaxed)) {
		b_seterr(run->err, "%" PRIu64 " backend reads failed",
		       atomic_load_explicit(&run->count.failures, memory_order_relaxed));
		bad = true;
	}
	if (failed && !bad) {
		b_seterr(run->err, "%u rank(s) failed", failed);
		bad = true;
	}
	if (b_verbose)
		for (uint32_t i = 0; i < p->ranks; i++) {
			const struct b_rank *r = &run->rank[i];
			const uint32_t *lat = sh_lat(sh, runi, i);
			uint32_t worst = 0;

			for (uint64_t t = 0; t < r->tasks; t++)
				worst = lat[t] > worst ? lat[t] : worst;
			fprintf(stderr, "kvshare bench: %s: rank %u: tasks %" PRIu64 " finish %.1f ms "
					"cpu %.1f ms worst task %.1f ms owner_reads %" PRIu64
					" hits %" PRIu64 " joins %" PRIu64 " prealloc_hits %" PRIu64 "\n",
				run->name, i, r->tasks,
				r->finish_ns > run->t0_ns ? (double)(r->finish_ns - run->t0_ns) / 1e6 : 0,
				(double)r->cpu_ns / 1e6, worst / 1e3, r->ss.owner_reads, r->cs.hits,
				r->cs.joins, r->ss.prealloc_hits);
		}
	if (bad && run->rc == 0)
		run->rc = -EIO;
	return bad ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* The plain run: this program again, against the plain library              */

int b_run_exec(struct b_shm *sh, int memfd, uint32_t runi, const char *libdir, bool progress)
{
	struct b_run *run = &sh->run[runi];
	struct b_progress pg = { .sh = sh, .run = run, .on = progress, .t0 = kvs_now_ns() };
	pid_t me = getpid(), pid;
	int status = 0;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char arg[64], *const argv[] = { "kvshare", "bench", "--internal-run", arg, NULL };
		const char *old = getenv("LD_LIBRARY_PATH");
		char *env = malloc(strlen(libdir) + (old ? strlen(old) : 0) + 2);

		b_child_setup(me);
		if (env) {
			sprintf(env, "%s%s%s", libdir, old && *old ? ":" : "", old ? old : "");
			setenv("LD_LIBRARY_PATH", env, 1);
		}
		fcntl(memfd, F_SETFD, 0); /* inherited across the exec */
		snprintf(arg, sizeof(arg), "%d:%u", memfd, runi);
		execv("/proc/self/exe", argv);
		b_seterr(run->err, "execv(/proc/self/exe): %s", strerror(errno));
		run->rc = -errno;
		_exit(127);
	}
	if (pid < 0) {
		b_seterr(run->err, "fork: %s", strerror(errno));
		run->rc = -errno;
		return -1;
	}
	/* The child reaps its ranks by B_RUN_TIMEOUT_NS; allow it the start too. */
	uint32_t bad = b_reap(&pid, &status, 1,
			    kvs_now_ns() + B_RUN_TIMEOUT_NS + B_START_TIMEOUT_NS + 60 * KVS_NSEC_PER_SEC,
			    progress_tick, &pg);
	progress_end(&pg);
	if (bad) {
		if (status == -1)
			b_seterr(run->err, "%s", b_interrupted ? "interrupted" : "still running at the deadline: killed");
		else if (WIFSIGNALED(status))
			b_seterr(run->err, "the re-executed bench was killed by signal %d", WTERMSIG(status));
		else if (!run->err[0])
			b_seterr(run->err, "the re-executed bench exited %d", WEXITSTATUS(status));
		if (run->rc == 0)
			run->rc = -EIO;
		/* Its ranks die with it (PR_SET_PDEATHSIG); remove what they left. */
		for (int i = 0; i < 20; i++) {
			run_remove_segments(sh, run);
			usleep(50000);
		}
	}
	return run->rc ? -1 : 0;
}

/* `kvshare bench --internal-run FD:RUN`: the re-executed side of run_exec. */
int b_internal_run(const char *arg)
{
	unsigned fd, runi;
	char tail;
	struct stat stb;
	struct b_shm *sh;

	if (sscanf(arg, "%u:%u%c", &fd, &runi, &tail) != 2 || runi >= B_RUNS ||
	    fstat((int)fd, &stb) < 0 || (uint64_t)stb.st_size < sizeof(struct b_shm)) {
		fprintf(stderr, "kvshare bench: --internal-run is kvshare bench's own re-execution\n");
		return KVS_CLI_USAGE;
	}
	sh = mmap(NULL, (size_t)stb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	if (sh == MAP_FAILED || sh->magic != B_MAGIC || sh->layout != sizeof(struct b_shm) ||
	    sh->p.total != (uint64_t)stb.st_size) {
		fprintf(stderr, "kvshare bench: --internal-run: not a kvshare bench block\n");
		return KVS_CLI_USAGE;
	}
	close((int)fd);
	b_verbose = sh->p.verbose;
	b_signals_block();
	return b_run_ranks(sh, runi, false) < 0 ? KVS_CLI_FAIL : KVS_CLI_OK;
}
