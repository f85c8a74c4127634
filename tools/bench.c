/*
 * tools/bench.c — `kvshare bench`: one tensor-parallel node, simulated.
 *
 * N rank processes (fork; default 8) load a KV working set through the shared
 * tier, from a real posix store that the bench first fills by dumping (one
 * process, "rank 0", through the store API).  The same workload runs three ways
 * in one invocation and the results are printed side by side:
 *
 *   kernel shared  the kernel-assisted libkvshare.so.1, one shared cache
 *   plain shared   the plain libkvshare.so.1: the bench re-executes itself
 *                  (/proc/self/exe, LD_LIBRARY_PATH = the plain build's lib dir)
 *                  and the child checks kvs_variant() == "plain" before running:
 *                  the drop-in promise, exercised
 *   private        share_buffer_enable=0: a cache per rank, no sharing (the
 *                  baseline: what every rank reading for itself costs)
 *
 * A CLI built for the plain variant only runs plain shared and private (and says
 * so); a missing plain library skips that run (and says so).
 *
 * Process model.  The parent never opens a store and never starts a thread, so
 * it may fork at any time: the copy-engine probe, the fill and every rank run in
 * children.  Everything the processes share lives in one memfd mapped
 * MAP_SHARED (struct b_shm, then the workload arrays and the reference bytes):
 * forked ranks inherit the mapping, and the re-executed plain run maps the same
 * memfd (its number is passed on the hidden --internal-run option).  The
 * reference bytes are exactly what the fill dumped (kvs_pattern_fill of each
 * (block, shard), which is also what the latency backend serves), so every rank
 * verifies every shard it loads with one memcmp against them.
 *
 * The backend is measured where it is: every rank's store gets a user backend
 * (KVS_BACKEND_USER) wrapping the real one, which counts each accepted read and
 * its bytes in the shared block (atomics, across processes) and bounds the
 * reads in flight per rank (--qd; -EAGAIN beyond, as a real store's client
 * does).  By default the wrapped backend is the posix store with every read held
 * --latency-us longer (the library's fault backend, fault_delay_ns): a store
 * reached over a network at a bounded rate per client.  Reads of a freshly
 * written posix store come from the page cache, and on a small machine a run
 * over them is bound by memcpy, not by the store, which would compare CPUs
 * rather than the tier; --latency-us 0 gives the raw store (--drop-cache makes
 * its reads cold).  --backend latency swaps in the synthetic latency backend.
 *
 * Timing.  Ranks open their stores (cache creation included), report ready on a
 * pipe and start together when the parent closes a second pipe; the start is the
 * parent's clock just before that close, the end the last rank's finish
 * (CLOCK_MONOTONIC, the same clock in every process).  Task latency is each
 * task's submit to kvs_store_wait's return, measured by the rank (a rank waits
 * for its tasks in submit order; tasks of one rank complete in order).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
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

#include <jansson.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "kvshare.h"
#include "tools/cli.h"
#include "tools/trace.h"

#ifndef KVS_CLI_VARIANT
#define KVS_CLI_VARIANT "kernel"
#endif
#ifndef KVS_CLI_PLAIN_LIBDIR
#define KVS_CLI_PLAIN_LIBDIR ""
#endif

#define B_MAX_RANKS 64u
#define B_RUNS 3
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

enum { RUN_KERNEL = 0, RUN_PLAIN = 1, RUN_PRIVATE = 2 };
enum { BACKEND_POSIX = 0, BACKEND_LATENCY = 1 };
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
	uint64_t tasks, shards, bytes; /* loaded and verified */
	uint64_t finish_ns;       /* CLOCK_MONOTONIC at its last task's completion */
	uint64_t cpu_ns;          /* process CPU (all threads), start to finish, minus verify */
	uint32_t engine;          /* copy engine it opened: ENGINE_HOST or ENGINE_CUDA */
	uint32_t pad;
	struct kvs_cache_stats cs; /* its own rank entry, at the end */
	struct kvs_store_stats ss;
};

struct b_run {
	/* Set by the parent before the run. */
	char name[24];            /* "kernel shared", "plain shared", "private" */
	char want_variant[16];    /* the library this run must load */
	char uid[KVS_UNIQUE_ID_MAX + 1];
	uint32_t share;           /* share_buffer_enable */
	uint32_t abort_run;       /* 1: a rank failed to open; the others do no work */
	/* Set by the process that runs the ranks. */
	char variant[16], version[16]; /* kvs_variant(), kvs_version() it loaded */
	int32_t rc;               /* 0 or the run's failure */
	char err[B_ERR];          /* the run's failure, one line */
	uint64_t t0_ns, end_ns;
	/* The counting backend, every rank's: relaxed atomics (counts, read by the
	 * parent after waitpid, which orders them; the max is a CAS loop). */
	_Atomic uint64_t reads, read_bytes, writes, failures; /* failures: reads or writes */
	_Atomic int64_t inflight, max_inflight; /* transfers in flight, node-wide */
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
/* Small helpers                                                             */

static void seterr(char *dst, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(char *dst, const char *fmt, ...)
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

static void fmt_size(char *buf, size_t n, uint64_t b)
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
/* Signals and children                                                      */

/* The parent (and the re-executed plain run) keep these blocked and take them
 * with sigtimedwait: SIGCHLD wakes a reap, the others abort the run cleanly
 * (children killed, segments and the temp store removed). */
static sigset_t g_sigs, g_oldmask;
static volatile sig_atomic_t g_interrupted;

static void signals_block(void)
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
		g_interrupted = s;
}

/* A forked child: the caller's signal mask back, and death with its parent. */
static void child_setup(pid_t parent)
{
	sigprocmask(SIG_SETMASK, &g_oldmask, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
}

typedef void (*b_tick_fn)(void *arg, uint64_t now);

/*
 * Reap the n children in pids[] (0 entries are skipped) by the deadline; past it,
 * or on an interrupt, the rest are killed.  status[i] gets each wait status (-1
 * when killed by us).  tick, when set, runs about every 200 ms.  Returns the
 * number of children that did not exit 0.
 */
static uint32_t reap(pid_t *pids, int *status, uint32_t n, uint64_t deadline, b_tick_fn tick,
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
		if (!killed && (now >= deadline || g_interrupted)) {
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
/* Device buffers: host memory, or CUDA memory through a dlopen'ed libcudart  */

/*
 * With the CUDA copy engine the store copies into device memory, so the ranks'
 * tensors (and the fill's dump sources) must be cudaMalloc'ed.  The library's
 * CUDA runtime is linked into it statically and not exported; the bench loads
 * the shared runtime (a different runtime instance over the same driver and the
 * same primary context, so the pointers are valid for both) only in the
 * processes that use it, never in the parent (CUDA does not survive fork).
 */
struct b_cuda {
	void *h;
	int (*get_count)(int *);
	int (*set_device)(int);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	int (*memset_)(void *, int, size_t);
	const char *(*errstr)(int);
};
static struct b_cuda g_cuda;
#define B_CUDA_H2D 1
#define B_CUDA_D2H 2

static int cuda_load(char *why, size_t n)
{
	static const char *const names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
					     "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so" };

	if (g_cuda.h)
		return 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !g_cuda.h; i++)
		g_cuda.h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!g_cuda.h) {
		snprintf(why, n, "no libcudart.so to allocate the ranks' device buffers");
		return -ENOENT;
	}
	g_cuda.get_count = (int (*)(int *))dlsym(g_cuda.h, "cudaGetDeviceCount");
	g_cuda.set_device = (int (*)(int))dlsym(g_cuda.h, "cudaSetDevice");
	g_cuda.malloc_ = (int (*)(void **, size_t))dlsym(g_cuda.h, "cudaMalloc");
	g_cuda.free_ = (int (*)(void *))dlsym(g_cuda.h, "cudaFree");
	g_cuda.memcpy_ = (int (*)(void *, const void *, size_t, int))dlsym(g_cuda.h, "cudaMemcpy");
	g_cuda.memset_ = (int (*)(void *, int, size_t))dlsym(g_cuda.h, "cudaMemset");
	g_cuda.errstr = (const char *(*)(int))dlsym(g_cuda.h, "cudaGetErrorString");
	if (!g_cuda.get_count || !g_cuda.set_device || !g_cuda.malloc_ || !g_cuda.free_ ||
	    !g_cuda.memcpy_ || !g_cuda.memset_ || !g_cuda.errstr) {
		snprintf(why, n, "libcudart.so lacks the runtime calls the bench needs");
		dlclose(g_cuda.h);
		g_cuda.h = NULL;
		return -ENOENT;
	}
	return 0;
}

/* One process's "device" memory: bytes of host memory, or of device memory
 * (then stage, a host buffer of one shard, receives what is read back). */
struct b_dev {
	bool cuda;
	unsigned char *host;
	void *dptr;
	unsigned char *stage;
	size_t bytes;
};

static int dev_alloc(struct b_dev *d, bool cuda, int device, size_t bytes, size_t stage,
		     char *err)
{
	memset(d, 0, sizeof(*d));
	d->cuda = cuda;
	d->bytes = bytes;
	if (!cuda) {
		d->host = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
		if (!d->host) {
			seterr(err, "allocating %zu bytes of rank memory: out of memory", bytes);
			return -ENOMEM;
		}
		memset(d->host, B_POISON, bytes);
		return 0;
	}
	int e = g_cuda.set_device(device);
	if (e == 0)
		e = g_cuda.malloc_(&d->dptr, bytes);
	if (e != 0) {
		seterr(err, "cudaMalloc(%zu) on device %d: %s", bytes, device, g_cuda.errstr(e));
		d->dptr = NULL;
		return -ENOMEM;
	}
	d->stage = malloc(stage);
	if (!d->stage) {
		seterr(err, "allocating a staging buffer: out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void dev_free(struct b_dev *d)
{
	if (d->cuda && d->dptr)
		g_cuda.free_(d->dptr);
	free(d->host);
	free(d->stage);
	memset(d, 0, sizeof(*d));
}

static uint64_t dev_addr(const struct b_dev *d, size_t off)
{
	return d->cuda ? (uint64_t)(uintptr_t)d->dptr + off : (uint64_t)(uintptr_t)(d->host + off);
}

/* Poison [off, off + len) (host: both ends of each shard; cuda: all of it). */
static int dev_poison(struct b_dev *d, size_t off, size_t len, size_t shard, char *err)
{
	if (d->cuda) {
		int e = g_cuda.memset_((char *)d->dptr + off, B_POISON, len);

		if (e) {
			seterr(err, "cudaMemset: %s", g_cuda.errstr(e));
			return -EIO;
		}
		return 0;
	}
	size_t edge = shard < 2 * B_EDGE ? shard : B_EDGE;
	for (size_t o = off; o < off + len; o += shard) {
		memset(d->host + o, B_POISON, edge);
		memset(d->host + o + shard - edge, B_POISON, edge);
	}
	return 0;
}

/* The bytes at [off, off + len) as host memory (len <= the staging size). */
static const unsigned char *dev_read(struct b_dev *d, size_t off, size_t len, char *err)
{
	if (!d->cuda)
		return d->host + off;
	int e = g_cuda.memcpy_(d->stage, (char *)d->dptr + off, len, B_CUDA_D2H);
	if (e) {
		seterr(err, "cudaMemcpy(device to host): %s", g_cuda.errstr(e));
		return NULL;
	}
	return d->stage;
}

static int dev_write(struct b_dev *d, size_t off, const void *src, size_t len, char *err)
{
	if (!d->cuda) {
		memcpy(d->host + off, src, len);
		return 0;
	}
	int e = g_cuda.memcpy_((char *)d->dptr + off, src, len, B_CUDA_H2D);
	if (e) {
		seterr(err, "cudaMemcpy(host to device): %s", g_cuda.errstr(e));
		return -EIO;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The counting backend (KVS_BACKEND_USER over posix, fault(posix) or latency) */

struct b_barg {
	struct b_shm *sh;
	struct b_run *run;
};
static struct b_barg g_barg; /* process-local; set before the ranks fork */

struct b_backend {
	struct kvs_backend *inner;
	struct b_run *run;
	uint32_t qd, inflight;
};

static int cb_open(const struct kvs_backend_config *cfg, void **state)
{
	const struct b_barg *a = cfg->user_arg;
	const struct b_params *p;
	struct kvs_backend_config in, px;
	struct kvs_backend_info info;
	struct b_backend *b;
	int rc;

	if (!a || !a->sh || !a->run)
		return -EINVAL;
	p = &a->sh->p;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	kvs_backend_config_init(&in);
	kvs_backend_config_init(&px);
	px.kind = KVS_BACKEND_POSIX;
	px.flags = KVS_BACKEND_F_NO_FSYNC;
	px.nroots = 1;
	px.roots[0] = p->root;
	px.queue_depth = p->qd ? p->qd : 128;
	px.shard_bytes = cfg->shard_bytes;
	px.shards_per_block = cfg->shards_per_block;
	px.log = cfg->log;
	px.log_arg = cfg->log_arg;
	if (p->backend == BACKEND_LATENCY) {
		in.kind = KVS_BACKEND_LATENCY;
		in.latency_ns = p->latency_ns;
		in.latency_queue_depth = p->qd;
	} else if (p->latency_ns) {
		in.kind = KVS_BACKEND_FAULT;
		in.fault_inner = &px;
		in.fault_delay_ns = p->latency_ns;
	} else {
		in = px;
	}
	in.shard_bytes = cfg->shard_bytes;
	in.shards_per_block = cfg->shards_per_block;
	in.log = cfg->log;
	in.log_arg = cfg->log_arg;
	rc = kvs_backend_open(&in, &b->inner);
	if (rc < 0) {
		free(b);
		return rc;
	}
	if (kvs_backend_info(b->inner, &info) == 0) {
		/* relaxed: a description, the same from every rank */
		atomic_store_explicit(&a->run->io_engine, info.io_engine, memory_order_relaxed);
		if (info.flags & KVS_BACKEND_INFO_FALLBACK) {
			atomic_store_explicit(&a->run->io_fallback, 1, memory_order_relaxed);
			atomic_store_explicit(&a->run->io_fallback_err, info.fallback_err,
					      memory_order_relaxed);
		}
	}
	b->run = a->run;
	b->qd = p->qd;
	*state = b;
	return 0;
}

static int cb_lookup(void *state, const struct kvs_block_id *block)
{
	struct b_backend *b = state;

	return kvs_backend_lookup(b->inner, block);
}

static int cb_submit(struct b_backend *b, const struct kvs_backend_io *io, bool write)
{
	int rc;

	if (b->qd && b->inflight >= b->qd)
		return -EAGAIN; /* this rank's share of the store: poll first */
	rc = write ? kvs_backend_submit_write(b->inner, io) : kvs_backend_submit_read(b->inner, io);
	if (rc < 0)
		return rc;
	b->inflight++;
	/* relaxed: counts and a running maximum (see struct b_run) */
	if (write) {
		atomic_fetch_add_explicit(&b->run->writes, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&b->run->reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->run->read_bytes, io->len, memory_order_relaxed);
	}
	int64_t now = atomic_fetch_add_explicit(&b->run->inflight, 1, memory_order_relaxed) + 1;
	int64_t max = atomic_load_explicit(&b->run->max_inflight, memory_order_relaxed);
	while (now > max && !atomic_compare_exchange_weak_explicit(&b->run->max_inflight, &max, now,
								    memory_order_relaxed,
								    memory_order_relaxed))
		;
	return 0;
}

static int cb_submit_read(void *state, const struct kvs_backend_io *io)
{
	return cb_submit(state, io, false);
}

static int cb_submit_write(void *state, const struct kvs_backend_io *io)
{
	return cb_submit(state, io, true);
}

static int cb_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		   uint64_t timeout_ns)
{
	struct b_backend *b = state;
	int n = kvs_backend_poll(b->inner, out, max, timeout_ns);

	for (int i = 0; i < n; i++) {
		b->inflight--;
		/* relaxed: counts (see struct b_run) */
		atomic_fetch_sub_explicit(&b->run->inflight, 1, memory_order_relaxed);
		if (out[i].result < 0)
			atomic_fetch_add_explicit(&b->run->failures, 1, memory_order_relaxed);
	}
	return n;
}

static void cb_close(void *state)
{
	struct b_backend *b = state;

	if (!b)
		return;
	kvs_backend_close(b->inner);
	free(b);
}

static int cb_register_buffers(void *state, const struct kvs_backend_buffer *bufs, uint32_t n)
{
	struct b_backend *b = state;

	return kvs_backend_register_buffers(b->inner, bufs, n);
}

static void cb_info(void *state, struct kvs_backend_info *info)
{
	struct b_backend *b = state;

	kvs_backend_info(b->inner, info);
}

static const struct kvs_backend_ops b_backend_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = cb_open,
	.lookup = cb_lookup,
	.submit_read = cb_submit_read,
	.submit_write = cb_submit_write,
	.poll = cb_poll,
	.close = cb_close,
	.register_buffers = cb_register_buffers,
	.info = cb_info,
};

/* ------------------------------------------------------------------------ */
/* Library log lines                                                         */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_verbose;

/* arg: the rank's result (its first error line is kept), or NULL. */
static void log_cb(void *arg, int level, const char *msg)
{
	struct b_rank *r = arg;

	if (level <= KVS_LOG_ERROR && r) {
		pthread_mutex_lock(&g_log_lock);
		if (!r->liberr[0])
			snprintf(r->liberr, sizeof(r->liberr), "%s", msg);
		pthread_mutex_unlock(&g_log_lock);
	}
	if (g_verbose && level <= KVS_LOG_WARN)
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
	cfg->copy_engine = engine == ENGINE_CUDA ? KVS_COPY_ENGINE_CUDA : KVS_COPY_ENGINE_HOST;
	cfg->share_buffer = run->share;
	cfg->timeout_ns = B_TASK_TIMEOUT_NS;
	cfg->backend.kind = KVS_BACKEND_USER;
	cfg->backend.user_ops = &b_backend_ops;
	cfg->backend.user_arg = &g_barg;
	cfg->log = log_cb;
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
			const unsigned char *got = dev_read(d, off, p->shard_bytes, res->err);
			const unsigned char *want = sh_ref(sh, acc[a], s);

			if (!got)
				return -EIO;
			if (memcmp(got, want, p->shard_bytes) == 0)
				continue;
			if (res->bad_shards++ == 0) {
				uint64_t k = 0;

				while (k < p->shard_bytes && got[k] == want[k])
					k++;
				seterr(res->err, "block %u shard %u (task %u): loaded bytes differ "
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
		seterr(res->err, "out of memory");
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

					tens[n] = (struct kvs_store_tensor){ .addr = dev_addr(d, off) };
					shd[n] = (struct kvs_store_shard){ .block = ids[acc[a]], .shard = s,
									   .tensor_count = 1,
									   .tensors = &tens[n] };
				}
			rc = dev_poison(d, base, (size_t)n * p->shard_bytes, p->shard_bytes, res->err);
			if (rc < 0)
				goto out;
			t_sub[w] = kvs_now_ns();
			rc = kvs_store_load(st, shd, n, &tid[w]);
			if (rc < 0) {
				seterr(res->err, "kvs_store_load (task %u, %u shards): %s", next, n,
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
			seterr(res->err, "task %u failed: %s%s%s%s", done, kvs_strerror(rc),
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
		seterr(res->err, "kvs_store_open: %s%s%s%s", kvs_strerror(rc),
		       res->liberr[0] ? " (" : "", res->liberr, res->liberr[0] ? ")" : "");
		goto fail;
	}
	res->engine = engine;
	if (engine == ENGINE_CUDA && cuda_load(res->err, B_ERR) < 0) {
		rc = -ENOENT;
		goto fail;
	}
	rc = dev_alloc(&d, engine == ENGINE_CUDA, (int)rank, B_WINDOW * slot_bytes, p->shard_bytes,
		       res->err);
	if (rc < 0)
		goto fail;
	write_byte(ready_fd, 'R');
	close(ready_fd);
	while (read(go_fd, &c, 1) < 0 && errno == EINTR)
		; /* EOF: the parent closed the pipe: go */
	if (run->abort_run) {
		rc = -ECANCELED;
		seterr(res->err, "run aborted: another rank failed to start");
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
	dev_free(&d);
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
		if (now >= deadline || g_interrupted)
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

/* Run the ranks of run runi from this process (it has no threads). */
static int run_ranks(struct b_shm *sh, uint32_t runi, bool progress)
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
		seterr(run->err, "loaded the %s libkvshare.so.1, not the %s one", run->variant,
		       run->want_variant);
		run->rc = -ENOEXEC;
		return -1;
	}
	run_remove_segments(sh, run); /* never adopt a stale cache of the same name */
	if (pipe(ready) < 0 || pipe(go) < 0) {
		seterr(run->err, "pipe: %s", strerror(errno));
		run->rc = -errno;
		return -1;
	}
	g_barg = (struct b_barg){ .sh = sh, .run = run };
	fflush(NULL);
	for (uint32_t i = 0; i < p->ranks; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			child_setup(me);
			close(ready[0]);
			close(go[1]);
			_exit(rank_main(sh, runi, i, ready[1], go[0]));
		}
		if (pid < 0) {
			seterr(run->err, "fork: %s", strerror(errno));
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
	uint32_t failed = reap(pids, status, started, run->t0_ns + B_RUN_TIMEOUT_NS,
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
			seterr(run->err, "rank %u: %s", i, r->err[0] ? r->err : kvs_strerror(r->rc));
			bad = true;
		}
	}
	for (uint32_t i = 0; i < p->ranks; i++) {
		const struct b_rank *r = &run->rank[i];

		if (r->rc < 0 || r->bad_shards) {
			seterr(run->err, "rank %u: %s", i, r->err[0] ? r->err : kvs_strerror(r->rc));
			bad = true;
		} else if (i < started && status[i] != 0) {
			if (status[i] == -1)
				seterr(run->err, "rank %u: %s", i,
				       g_interrupted ? "interrupted" : "still running at the deadline: killed");
			else if (WIFSIGNALED(status[i]))
				seterr(run->err, "rank %u: killed by signal %d", i, WTERMSIG(status[i]));
			else
				seterr(run->err, "rank %u: exited %d", i, WEXITSTATUS(status[i]));
			bad = true;
		}
	}
	if (g_interrupted) {
		seterr(run->err, "interrupted");
		bad = true;
	}
	/* relaxed: every writer has exited */
	if (atomic_load_explicit(&run->failures, memory_order_relaxed)) {
		seterr(run->err, "%" PRIu64 " backend reads failed",
		       atomic_load_explicit(&run->failures, memory_order_relaxed));
		bad = true;
	}
	if (failed && !bad) {
		seterr(run->err, "%u rank(s) failed", failed);
		bad = true;
	}
	if (g_verbose)
		for (uint32_t i = 0; i < p->ranks; i++) {
			const struct b_rank *r = &run->rank[i];
			const uint32_t *lat = sh_lat(sh, runi, i);
			uint32_t worst = 0;

			for (uint64_t t = 0; t < r->tasks; t++)
				worst = lat[t] > worst ? lat[t] : worst;
			fprintf(stderr, "kvshare bench: %s: rank %u: tasks %" PRIu64 " finish %.1f ms "
					"cpu %.1f ms worst task %.1f ms owner_reads %" PRIu64
					" hits %" PRIu64 " waits %" PRIu64 " prealloc_hits %" PRIu64 "\n",
				run->name, i, r->tasks,
				r->finish_ns > run->t0_ns ? (double)(r->finish_ns - run->t0_ns) / 1e6 : 0,
				(double)r->cpu_ns / 1e6, worst / 1e3, r->ss.owner_reads, r->cs.hits,
				r->cs.waits, r->ss.prealloc_hits);
		}
	if (bad && run->rc == 0)
		run->rc = -EIO;
	return bad ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* The plain run: this program again, against the plain library              */

static int run_exec(struct b_shm *sh, int memfd, uint32_t runi, const char *libdir, bool progress)
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

		child_setup(me);
		if (env) {
			sprintf(env, "%s%s%s", libdir, old && *old ? ":" : "", old ? old : "");
			setenv("LD_LIBRARY_PATH", env, 1);
		}
		fcntl(memfd, F_SETFD, 0); /* inherited across the exec */
		snprintf(arg, sizeof(arg), "%d:%u", memfd, runi);
		execv("/proc/self/exe", argv);
		seterr(run->err, "execv(/proc/self/exe): %s", strerror(errno));
		run->rc = -errno;
		_exit(127);
	}
	if (pid < 0) {
		seterr(run->err, "fork: %s", strerror(errno));
		run->rc = -errno;
		return -1;
	}
	/* The child reaps its ranks by B_RUN_TIMEOUT_NS; allow it the start too. */
	uint32_t bad = reap(&pid, &status, 1,
			    kvs_now_ns() + B_RUN_TIMEOUT_NS + B_START_TIMEOUT_NS + 60 * KVS_NSEC_PER_SEC,
			    progress_tick, &pg);
	progress_end(&pg);
	if (bad) {
		if (status == -1)
			seterr(run->err, "%s", g_interrupted ? "interrupted" : "still running at the deadline: killed");
		else if (WIFSIGNALED(status))
			seterr(run->err, "the re-executed bench was killed by signal %d", WTERMSIG(status));
		else if (!run->err[0])
			seterr(run->err, "the re-executed bench exited %d", WEXITSTATUS(status));
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
static int internal_run(const char *arg)
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
	g_verbose = sh->p.verbose;
	signals_block();
	return run_ranks(sh, runi, false) < 0 ? KVS_CLI_FAIL : KVS_CLI_OK;
}

/* ------------------------------------------------------------------------ */
/* Copy engine probe and fill (children: the parent never opens a store)     */

struct b_probe {
	int32_t store_rc;   /* kvs_store_open with copy_engine cuda */
	int32_t devices;    /* cudaGetDeviceCount, -1 unknown */
	char why[B_ERR];
};

static void probe_child(struct b_shm *sh, struct b_probe *pr)
{
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	int n = 0;

	kvs_store_config_init(&cfg);
	snprintf(cfg.cache.unique_id, sizeof(cfg.cache.unique_id), "%s", sh->run[0].uid);
	memcpy(cfg.cache.unique_id + strlen(cfg.cache.unique_id) - 1, "q", 1);
	cfg.cache.device_id = 0;
	cfg.cache.local_rank_size = 1;
	cfg.cache.slot_bytes = 4096;
	cfg.cache.slot_count = 8;
	cfg.cache.hugetlb = KVS_HUGETLB_OFF;
	cfg.backend.kind = KVS_BACKEND_NONE;
	cfg.copy_engine = KVS_COPY_ENGINE_CUDA;
	pr->store_rc = kvs_store_open(&cfg, &st);
	kvs_store_close(st);
	pr->devices = -1;
	if (pr->store_rc < 0 || cuda_load(pr->why, sizeof(pr->why)) < 0)
		return;
	if (g_cuda.get_count(&n) == 0)
		pr->devices = n;
}

/* Resolve --copy-engine: cuda when the library has it, a device exists for each
 * rank, and the runtime is there for the bench's own buffers; else host. */
static int probe_engine(struct b_shm *sh, uint32_t want, char *note, size_t nn)
{
	struct b_probe *pr;
	pid_t pid, me = getpid();
	int status = 0;

	if (want == ENGINE_HOST) {
		sh->p.engine = ENGINE_HOST;
		snprintf(note, nn, "host (--copy-engine host)");
		return 0;
	}
	pr = mmap(NULL, sizeof(*pr), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (pr == MAP_FAILED)
		return -errno;
	memset(pr, 0, sizeof(*pr));
	pr->store_rc = -ENODEV;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		child_setup(me);
		probe_child(sh, pr);
		_exit(0);
	}
	if (pid > 0)
		(void)reap(&pid, &status, 1, kvs_now_ns() + 60 * KVS_NSEC_PER_SEC, NULL, NULL);
	sh->p.engine = ENGINE_HOST;
	if (pr->store_rc < 0)
		snprintf(note, nn, "host (no CUDA device: kvs_store_open with copy_engine=cuda: %s)",
			 kvs_strerror(pr->store_rc));
	else if (pr->devices < 0)
		snprintf(note, nn, "host (%.200s)", pr->why[0] ? pr->why : "cudaGetDeviceCount failed");
	else if ((uint32_t)pr->devices < sh->p.ranks)
		snprintf(note, nn, "host (%d CUDA device(s) for %u ranks: one each is needed)",
			 pr->devices, sh->p.ranks);
	else {
		sh->p.engine = ENGINE_CUDA;
		snprintf(note, nn, "cuda (%d devices)", pr->devices);
	}
	munmap(pr, sizeof(*pr));
	if (want == ENGINE_CUDA && sh->p.engine != ENGINE_CUDA)
		return -ENODEV;
	return 0;
}

/* The fill: one process ("rank 0") dumps every block of the working set into
 * the posix store through the store API.  Returns 0 or a failure (in err). */
static int fill_child(struct b_shm *sh, char *err)
{
	const struct b_params *p = &sh->p;
	const struct kvs_block_id *ids = sh_ids(sh);
	uint32_t per = p->task_max_blocks, nsh = per * p->shards;
	size_t tbytes = (size_t)nsh * p->shard_bytes;
	struct kvs_store_tensor *tens = calloc(nsh, sizeof(*tens));
	struct kvs_store_shard *shd = calloc(nsh, sizeof(*shd));
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	struct b_rank scratch;
	struct b_dev d;
	int rc;

	memset(&d, 0, sizeof(d));
	memset(&scratch, 0, sizeof(scratch));
	if (!tens || !shd) {
		rc = -ENOMEM;
		seterr(err, "out of memory");
		goto out;
	}
	kvs_store_config_init(&cfg);
	snprintf(cfg.cache.unique_id, sizeof(cfg.cache.unique_id), "%s", sh->run[0].uid);
	memcpy(cfg.cache.unique_id + strlen(cfg.cache.unique_id) - 1, "f", 1);
	cfg.cache.device_id = 0;
	cfg.cache.local_rank_size = 1;
	cfg.cache.slot_bytes = p->shard_bytes;
	cfg.cache.slot_count = 2 * (uint64_t)nsh + 64; /* a stream: dumps need no residency */
	cfg.cache.shards_per_block = p->shards;
	cfg.copy_engine = p->engine == ENGINE_CUDA ? KVS_COPY_ENGINE_CUDA : KVS_COPY_ENGINE_HOST;
	cfg.timeout_ns = B_TASK_TIMEOUT_NS;
	cfg.backend.kind = KVS_BACKEND_POSIX;
	cfg.backend.flags = KVS_BACKEND_F_NO_FSYNC; /* the bench measures reads, not durability */
	cfg.backend.nroots = 1;
	cfg.backend.roots[0] = p->root;
	cfg.log = log_cb;
	cfg.log_arg = &scratch;
	rc = kvs_store_open(&cfg, &st);
	if (rc < 0) {
		seterr(err, "fill: kvs_store_open: %s%s%s%s", kvs_strerror(rc),
		       scratch.liberr[0] ? " (" : "", scratch.liberr, scratch.liberr[0] ? ")" : "");
		goto out;
	}
	if (p->engine == ENGINE_CUDA) {
		rc = cuda_load(err, B_ERR);
		if (rc == 0)
			rc = dev_alloc(&d, true, 0, tbytes, 0, err);
		if (rc < 0)
			goto out;
	}
	for (uint32_t b0 = 0; b0 < p->nblocks; b0 += per) {
		uint32_t nb = p->nblocks - b0 < per ? p->nblocks - b0 : per, n = 0;
		uint64_t id;

		for (uint32_t b = 0; b < nb; b++)
			for (uint32_t s = 0; s < p->shards; s++, n++) {
				const unsigned char *src = sh_ref(sh, b0 + b, s);

				if (d.cuda) {
					rc = dev_write(&d, (size_t)n * p->shard_bytes, src, p->shard_bytes, err);
					if (rc < 0)
						goto out;
				}
				tens[n] = (struct kvs_store_tensor){
					.addr = d.cuda ? dev_addr(&d, (size_t)n * p->shard_bytes)
						       : (uint64_t)(uintptr_t)src };
				shd[n] = (struct kvs_store_shard){ .block = ids[b0 + b], .shard = s,
								   .tensor_count = 1, .tensors = &tens[n] };
			}
		rc = kvs_store_dump(st, shd, n, NULL, &id);
		if (rc == 0) {
			rc = kvs_store_wait(st, id, B_TASK_TIMEOUT_NS + 10 * KVS_NSEC_PER_SEC);
			if (rc == 1)
				rc = -ETIMEDOUT;
		}
		if (rc < 0) {
			seterr(err, "fill: dumping blocks %u..%u: %s%s%s%s", b0, b0 + nb - 1,
			       kvs_strerror(rc), scratch.liberr[0] ? " (" : "", scratch.liberr,
			       scratch.liberr[0] ? ")" : "");
			goto out;
		}
	}
out:
	kvs_store_close(st);
	dev_free(&d);
	free(tens);
	free(shd);
	return rc < 0 ? rc : 0;
}

static int run_fill(struct b_shm *sh, char *err, double *secs)
{
	char *e = mmap(NULL, B_ERR, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid, me = getpid();
	int status = 0, rc = 0;
	uint64_t t0 = kvs_now_ns();

	if (e == MAP_FAILED)
		return -errno;
	e[0] = '\0';
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		child_setup(me);
		_exit(fill_child(sh, e) < 0 ? 1 : 0);
	}
	if (pid < 0) {
		rc = -errno;
		seterr(err, "fork: %s", strerror(errno));
	} else if (reap(&pid, &status, 1, kvs_now_ns() + B_RUN_TIMEOUT_NS, NULL, NULL)) {
		rc = -EIO;
		if (e[0])
			seterr(err, "%s", e);
		else if (status == -1)
			seterr(err, "fill: %s", g_interrupted ? "interrupted" : "killed at the deadline");
		else
			seterr(err, "fill: the dumping process failed (status %d)", status);
	}
	*secs = (double)(kvs_now_ns() - t0) / 1e9;
	munmap(e, B_ERR);
	/* The fill's cache is gone with its process unless it died. */
	struct kvs_cache_config cc;
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", sh->run[0].uid);
	memcpy(cc.unique_id + strlen(cc.unique_id) - 1, "f", 1);
	(void)kvs_cache_remove(&cc);
	return rc;
}

/* --drop-cache: write back and drop the store's pages, so reads are cold. */
static int drop_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (type == FTW_F) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			fdatasync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Workloads                                                                 */

struct b_work {
	uint32_t nblocks, nreq, ntasks, naccess;
	struct kvs_block_id *ids;
	uint32_t *acc, *task; /* task: ntasks + 1 offsets into acc */
	uint32_t acc_cap, task_cap;
	uint32_t trace_total; /* trace: requests in the file */
	uint64_t trace_distinct;
};

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return kvs_mix64(*s);
}

static int work_push(uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t x)
{
	if (*n == *cap) {
		uint32_t c = *cap ? 2 * *cap : 1024;
		uint32_t *nv = c > *cap ? realloc(*v, (size_t)c * sizeof(*nv)) : NULL;

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* Close a request: accesses [first, naccess) are cut into tasks. */
static int work_request(struct b_work *w, uint32_t first, uint32_t per)
{
	w->nreq++;
	for (uint32_t a = first; a < w->naccess; a += per)
		if (work_push(&w->task, &w->ntasks, &w->task_cap, a) < 0)
			return -ENOMEM;
	return 0;
}

static int work_finish(struct b_work *w)
{
	if (work_push(&w->task, &w->ntasks, &w->task_cap, w->naccess) < 0)
		return -ENOMEM;
	w->ntasks--; /* the last entry is the end offset */
	return 0;
}

/*
 * The prefix-sharing workload (like chat serving traffic): a system prompt of
 * U/32 blocks (at least 1) starts every request; the other blocks belong to
 * conversations of about 8 blocks each, that grow by 1..4 new blocks per turn.
 * Requests are the turns of randomly interleaved conversations (seeded):
 * system prompt + the conversation so far + this turn's new blocks; every
 * block is first seen as a turn's new block, then reused by its conversation's
 * later turns.  All of it was dumped beforehand, so a request loads all of its
 * blocks from the tier (a rank's cache hits are the reuse).
 */
static int work_prefix(struct b_work *w, uint32_t U, uint64_t seed, uint32_t per)
{
	uint32_t sys = U >= 64 ? U / 32 : (U >= 2 ? 1 : U), rest = U - sys;
	uint32_t nconv = rest ? (rest / 8 ? rest / 8 : 1) : 0;
	uint32_t *len = calloc(nconv + 1, sizeof(*len)), *budget = calloc(nconv + 1, sizeof(*budget));
	uint32_t *active = calloc(nconv + 1, sizeof(*active));
	uint32_t **hist = calloc(nconv + 1, sizeof(*hist)), nactive = nconv, next = sys;
	uint64_t rng = seed ^ 0x707265666978ull;
	int rc = -ENOMEM;

	if (!len || !budget || !active || !hist)
		goto out;
	for (uint32_t c = 0; c < nconv; c++) {
		budget[c] = rest / nconv + (c < rest % nconv);
		hist[c] = calloc(budget[c] ? budget[c] : 1, sizeof(**hist));
		if (!hist[c])
			goto out;
		active[c] = c;
	}
	if (nconv == 0) { /* too few blocks for conversations: one request */
		uint32_t first = w->naccess;

		for (uint32_t b = 0; b < sys; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
				goto out;
		if (work_request(w, first, per) < 0)
			goto out;
	}
	while (nactive) {
		uint32_t k = (uint32_t)(rng_next(&rng) % nactive), c = active[k];
		uint32_t tail = 1 + (uint32_t)(rng_next(&rng) % 4), first = w->naccess;

		if (tail > budget[c] - len[c])
			tail = budget[c] - len[c];
		for (uint32_t b = 0; b < sys; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
				goto out;
		for (uint32_t b = 0; b < len[c]; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, hist[c][b]) < 0)
				goto out;
		for (uint32_t b = 0; b < tail; b++) {
			hist[c][len[c]++] = next;
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, next++) < 0)
				goto out;
		}
		if (work_request(w, first, per) < 0)
			goto out;
		if (len[c] == budget[c])
			active[k] = active[--nactive];
	}
	w->nblocks = U;
	rc = 0;
out:
	for (uint32_t c = 0; hist && c < nconv; c++)
		free(hist[c]);
	free(hist);
	free(len);
	free(budget);
	free(active);
	return rc;
}

/* Every block once, in order, a task at a time: no reuse within a rank (what
 * is left is the sharing across ranks). */
static int work_scan(struct b_work *w, uint32_t U, uint32_t per)
{
	for (uint32_t b = 0; b < U; b++)
		if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
			return -ENOMEM;
	for (uint32_t b = 0; b < U; b += per) {
		w->nreq++;
		if (work_push(&w->task, &w->ntasks, &w->task_cap, b) < 0)
			return -ENOMEM;
	}
	w->nblocks = U;
	return 0;
}

static int work_ids(struct b_work *w, uint64_t seed)
{
	w->ids = calloc(w->nblocks ? w->nblocks : 1, sizeof(*w->ids));
	if (!w->ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nblocks; i++) {
		uint64_t lo = kvs_mix64(seed * 0x100000001b3ull ^ 0x6b7673626e6368ull ^ i);
		uint64_t hi = kvs_mix64(lo ^ seed);

		memcpy(w->ids[i].bytes, &lo, 8);
		memcpy(w->ids[i].bytes + 8, &hi, 8);
	}
	return 0;
}

/* Mooncake trace: requests in timestamp order; each request's hash_ids are its
 * blocks (kvs_trace_block).  Requests are taken while their distinct blocks fit
 * in cap.  Returns 0, or -errno with err set. */
static int work_trace(struct b_work *w, const char *path, uint32_t cap, uint32_t per, char *err)
{
	struct kvs_trace t;
	uint64_t *keys = NULL;
	uint32_t *vals = NULL, mask;
	size_t hsize = 16;
	int rc;

	memset(&t, 0, sizeof(t));
	rc = kvs_trace_load(path, &t, err, B_ERR);
	if (rc < 0) {
		if (!err[0])
			snprintf(err, B_ERR, "%s: %s", path, kvs_strerror(rc));
		kvs_trace_free(&t);
		return rc;
	}
	while (hsize < 2 * (size_t)cap + 2)
		hsize *= 2;
	mask = (uint32_t)(hsize - 1);
	keys = calloc(hsize, sizeof(*keys));
	vals = calloc(hsize, sizeof(*vals));
	w->ids = calloc(cap ? cap : 1, sizeof(*w->ids));
	if (!keys || !vals || !w->ids) {
		rc = -ENOMEM;
		snprintf(err, B_ERR, "out of memory");
		goto out;
	}
	w->trace_total = (uint32_t)t.n;
	w->trace_distinct = t.distinct;
	for (size_t r = 0; r < t.n; r++) {
		const struct kvs_trace_req *q = &t.reqs[r];
		uint32_t fresh = 0, first = w->naccess;

		if (q->nblocks == 0)
			continue;
		/* How many new blocks would this request bring?  (Duplicates within
		 * the request counted once is enough for a bound: over-counting only
		 * stops a little early.) */
		for (uint32_t i = 0; i < q->nblocks; i++) {
			uint32_t h = (uint32_t)kvs_mix64(q->hash_ids[i]) & mask;

			while (vals[h] && keys[h] != q->hash_ids[i])
				h = (h + 1) & mask;
			fresh += vals[h] == 0;
		}
		if ((uint64_t)w->nblocks + fresh > cap)
			break;
		for (uint32_t i = 0; i < q->nblocks; i++) {
			uint32_t h = (uint32_t)kvs_mix64(q->hash_ids[i]) & mask;

			while (vals[h] && keys[h] != q->hash_ids[i])
				h = (h + 1) & mask;
			if (!vals[h]) {
				keys[h] = q->hash_ids[i];
				vals[h] = ++w->nblocks; /* index + 1 (0: empty) */
				w->ids[w->nblocks - 1] = kvs_trace_block(q->hash_ids[i]);
			}
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, vals[h] - 1) < 0) {
				rc = -ENOMEM;
				goto out;
			}
		}
		if (work_request(w, first, per) < 0) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (w->nreq == 0) {
		rc = -EINVAL;
		snprintf(err, B_ERR, "%s: no request fits in %u distinct blocks (raise --blocks)",
			 path, cap);
	}
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, B_ERR, "out of memory");
	free(keys);
	free(vals);
	kvs_trace_free(&t);
	return rc;
}

static void work_free(struct b_work *w)
{
	free(w->ids);
	free(w->acc);
	free(w->task);
	memset(w, 0, sizeof(*w));
}

/* ------------------------------------------------------------------------ */
/* Options                                                                   */

struct b_opts {
	uint32_t ranks, blocks, shards, qd, backend, workload, engine;
	uint64_t shard_bytes, capacity, latency_us, seed;
	bool blocks_set, json, keep, check, verbose, drop_cache;
	const char *trace, *root, *internal;
};

static void usage(FILE *f)
{
	fprintf(f,
"usage: kvshare bench [options]\n"
"\n"
"Simulates one tensor-parallel node: --ranks processes load a KV working set\n"
"through the shared tier from a real posix store that the bench first fills by\n"
"dumping (one process, through the store API).  The same workload runs three\n"
"ways and is printed side by side: the kernel library with one shared cache,\n"
"the plain library with one shared cache (the bench re-executes itself with\n"
"LD_LIBRARY_PATH=" KVS_CLI_PLAIN_LIBDIR "),\n"
"and private per-rank caches (share_buffer_enable=0, no sharing: the baseline).\n"
"Every rank verifies every shard it loads against the dumped bytes.\n"
"\n"
"Workload (--workload):\n"
"  prefix  (default) chat-like prefix sharing: a system prompt of blocks/32\n"
"          blocks starts every request; the rest belong to conversations of\n"
"          about 8 blocks that grow by 1..4 new blocks per turn; requests are\n"
"          the turns of randomly interleaved conversations (--seed): system\n"
"          prompt + the conversation so far + the turn's new blocks.  Every rank\n"
"          loads every request's blocks, as the ranks of a TP group do.\n"
"  scan    every block once, in order (no reuse within a rank)\n"
"  --trace FILE  a Mooncake trace (JSON Lines: timestamp, hash_ids): requests in\n"
"          timestamp order, each request's hash_ids its blocks; requests are\n"
"          taken while their distinct blocks fit in --blocks (default 256 then)\n"
"A request is loaded as tasks of at most %u shards; %u tasks in flight per rank.\n"
"\n"
"Backend (why the default is backend-bound): the posix store's files were just\n"
"written, so its reads come from the page cache; on a small machine such a run\n"
"is bound by memcpy, which compares CPUs, not the tier.  So by default every\n"
"read of the posix store is held --latency-us longer (the fault backend's\n"
"fault_delay) with at most --qd reads in flight per rank: a store reached over a\n"
"network at a bounded rate per client.  --latency-us 0 gives the raw store\n"
"(add --drop-cache for cold reads from the device).  Reads are counted at the\n"
"backend, across processes.\n"
"\n"
"Options (sizes take k/m/g suffixes: KiB, MiB, GiB):\n"
"  --ranks N          rank processes, 1..64 (8)\n"
"  --blocks N         blocks in the working set (128; with --trace: a cap, 256)\n"
"  --shards N         shards per block, 1..4096 (8)\n"
"  --shard-size SIZE  bytes per shard, 1k..1g (32k)\n"
"  --capacity SIZE    bytes of each cache (default: the working set + 25%%)\n"
"  --backend KIND     posix (default) or latency (synthetic content, no fill)\n"
"  --latency-us N     added to every backend read, 0..1000000 (2000)\n"
"  --qd N             backend reads in flight per rank, 0 = unbounded (2)\n"
"  --workload NAME    prefix (default) or scan\n"
"  --trace FILE       replay a Mooncake trace instead of --workload\n"
"  --copy-engine E    auto (cuda when a device per rank exists, else host), host, cuda\n"
"  --drop-cache       write back and drop the store's page cache before each run\n"
"  --root DIR         make the store's temporary directory under DIR (/tmp)\n"
"  --keep             keep the store's directory (it is removed otherwise)\n"
"  --seed N           workload seed (1)\n"
"  --json             one JSON document on stdout instead of the table\n"
"  --check            exit 1 unless each shared run read every unique shard exactly\n"
"                     once from the backend (and private: once per rank); needs a\n"
"                     capacity that holds the working set (the default)\n"
"  --verbose          library warnings and per-rank details on stderr\n"
"  -h, --help         this text\n"
"\n"
"Columns: wall (start to the last rank's finish), GB/s (bytes copied into the\n"
"ranks' tensors / wall), backend MiB and reads (counted at the backend),\n"
"dedup (bytes delivered / backend bytes), hit%% (cache hits / gets, from the\n"
"ranks' kvs_cache_stats; a get that joins a peer's read in flight is neither),\n"
"cpu%%/rank (waiter CPU: the rank processes' CPU, all threads, / wall, per rank,\n"
"without the bench's own verification), p50/p99 (per task: submit to\n"
"kvs_store_wait's return), fallbacks (shm: no hugetlbfs; numa: no binding;\n"
"pool: io_uring refused; host: a library without the CUDA engine copied on the\n"
"host).  Exit 0; 1 when a task fails or a byte differs (one line names it); 2\n"
"for bad options.\n",
		B_TASK_SHARDS, B_WINDOW);
}

static int bad_opt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad_opt(const char *fmt, ...)
{
	va_list ap;

	fputs("kvshare bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (kvshare bench --help)\n", stderr);
	return KVS_CLI_USAGE;
}

/* A decimal number with an optional k/m/g suffix (mult 1024) when size. */
static int parse_num(const char *s, bool size, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0, m = 1;
	const char *p = s;

	if (!*p)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s)
		return -1;
	if (size && *p) {
		switch (*p) {
		case 'k': case 'K': m = 1ull << 10; break;
		case 'm': case 'M': m = 1ull << 20; break;
		case 'g': case 'G': m = 1ull << 30; break;
		default: return -1;
		}
		p++;
	}
	if (*p || (v && m > UINT64_MAX / v))
		return -1;
	v *= m;
	if (v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

enum {
	O_RANKS = 256, O_BLOCKS, O_SHARDS, O_SHARD_SIZE, O_CAPACITY, O_BACKEND, O_LATENCY, O_QD,
	O_WORKLOAD, O_TRACE, O_JSON, O_KEEP, O_ROOT, O_SEED, O_CHECK, O_ENGINE, O_DROP, O_VERBOSE,
	O_INTERNAL,
};

static int parse_opts(int argc, char **argv, struct b_opts *o, bool *help)
{
	static const struct option lo[] = {
		{ "ranks", required_argument, NULL, O_RANKS },
		{ "blocks", required_argument, NULL, O_BLOCKS },
		{ "shards", required_argument, NULL, O_SHARDS },
		{ "shard-size", required_argument, NULL, O_SHARD_SIZE },
		{ "capacity", required_argument, NULL, O_CAPACITY },
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "latency-us", required_argument, NULL, O_LATENCY },
		{ "qd", required_argument, NULL, O_QD },
		{ "workload", required_argument, NULL, O_WORKLOAD },
		{ "trace", required_argument, NULL, O_TRACE },
		{ "json", no_argument, NULL, O_JSON },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "root", required_argument, NULL, O_ROOT },
		{ "seed", required_argument, NULL, O_SEED },
		{ "check", no_argument, NULL, O_CHECK },
		{ "copy-engine", required_argument, NULL, O_ENGINE },
		{ "drop-cache", no_argument, NULL, O_DROP },
		{ "verbose", no_argument, NULL, O_VERBOSE },
		{ "internal-run", required_argument, NULL, O_INTERNAL },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct b_opts){ .ranks = 8, .blocks = 128, .shards = 8, .qd = 2,
			      .shard_bytes = 32 << 10, .latency_us = 2000, .seed = 1 };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
		uint64_t v;
		const char *name = optind > 1 && optind - 1 < argc ? argv[optind - 1] : "?";

		switch (c) {
		case 'h':
			*help = true;
			return 0;
		case ':':
			return bad_opt("option '%s' needs a value", name);
		case '?':
			if (optopt)
				return bad_opt("unknown option '-%c'", optopt);
			return bad_opt("unknown option '%s'", name);
		case O_RANKS:
			if (parse_num(optarg, false, 1, B_MAX_RANKS, &v) < 0)
				return bad_opt("--ranks '%s': want 1..%u", optarg, B_MAX_RANKS);
			o->ranks = (uint32_t)v;
			break;
		case O_BLOCKS:
			if (parse_num(optarg, false, 1, 1u << 24, &v) < 0)
				return bad_opt("--blocks '%s': want 1..16777216", optarg);
			o->blocks = (uint32_t)v;
			o->blocks_set = true;
			break;
		case O_SHARDS:
			if (parse_num(optarg, false, 1, 4096, &v) < 0)
				return bad_opt("--shards '%s': want 1..4096", optarg);
			o->shards = (uint32_t)v;
			break;
		case O_SHARD_SIZE:
			if (parse_num(optarg, true, 1024, 1ull << 30, &v) < 0)
				return bad_opt("--shard-size '%s': want 1k..1g (bytes, k/m/g)", optarg);
			o->shard_bytes = v;
			break;
		case O_CAPACITY:
			if (parse_num(optarg, true, 1, 1ull << 50, &v) < 0)
				return bad_opt("--capacity '%s': want a size (bytes, k/m/g)", optarg);
			o->capacity = v;
			break;
		case O_BACKEND:
			if (!strcmp(optarg, "posix"))
				o->backend = BACKEND_POSIX;
			else if (!strcmp(optarg, "latency"))
				o->backend = BACKEND_LATENCY;
			else
				return bad_opt("--backend '%s': want posix or latency", optarg);
			break;
		case O_LATENCY:
			if (parse_num(optarg, false, 0, 1000000, &v) < 0)
				return bad_opt("--latency-us '%s': want 0..1000000", optarg);
			o->latency_us = v;
			break;
		case O_QD:
			if (parse_num(optarg, false, 0, 4096, &v) < 0)
				return bad_opt("--qd '%s': want 0..4096 (0: unbounded)", optarg);
			o->qd = (uint32_t)v;
			break;
		case O_WORKLOAD:
			if (!strcmp(optarg, "prefix"))
				o->workload = WORK_PREFIX;
			else if (!strcmp(optarg, "scan"))
				o->workload = WORK_SCAN;
			else
				return bad_opt("--workload '%s': want prefix or scan", optarg);
			break;
		case O_TRACE:
			o->trace = optarg;
			break;
		case O_JSON:
			o->json = true;
			break;
		case O_KEEP:
			o->keep = true;
			break;
		case O_ROOT:
			o->root = optarg;
			break;
		case O_SEED:
			if (parse_num(optarg, false, 0, UINT64_MAX, &v) < 0)
				return bad_opt("--seed '%s': want a number", optarg);
			o->seed = v;
			break;
		case O_CHECK:
			o->check = true;
			break;
		case O_ENGINE:
			if (!strcmp(optarg, "auto"))
				o->engine = ENGINE_AUTO;
			else if (!strcmp(optarg, "host"))
				o->engine = ENGINE_HOST;
			else if (!strcmp(optarg, "cuda"))
				o->engine = ENGINE_CUDA;
			else
				return bad_opt("--copy-engine '%s': want auto, host or cuda", optarg);
			break;
		case O_DROP:
			o->drop_cache = true;
			break;
		case O_VERBOSE:
			o->verbose = true;
			break;
		case O_INTERNAL:
			o->internal = optarg;
			break;
		default:
			return bad_opt("unknown option '%s'", name);
		}
	}
	if (optind < argc)
		return bad_opt("unexpected argument '%s'", argv[optind]);
	if (o->trace) {
		o->workload = WORK_TRACE;
		if (!o->blocks_set)
			o->blocks = 256;
	}
	if (o->root) {
		struct stat st;

		if (stat(o->root, &st) < 0 || !S_ISDIR(st.st_mode))
			return bad_opt("--root '%s': not a directory", o->root);
	}
	if (o->backend == BACKEND_LATENCY && o->drop_cache)
		return bad_opt("--drop-cache is for the posix backend");
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Results                                                                   */

struct b_sum {
	bool ran, ok;
	const char *skip;         /* why it did not run */
	double wall_s, gbps, dedup, hit, cpu_pct, p50_ms, p99_ms, hp50_us, hp99_us;
	uint64_t delivered, reads, read_bytes, writes, max_inflight, hits, misses, gets, waits;
	uint64_t evictions, owner_reads, shards, bad;
	char fallbacks[48], engine[8];
};

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

static void summarize(struct b_shm *sh, uint32_t runi, struct b_sum *s)
{
	const struct b_params *p = &sh->p;
	struct b_run *run = &sh->run[runi];
	uint64_t hist[KVS_STORE_LAT_BUCKETS] = { 0 }, n = 0;
	uint32_t fb = 0, ntask = 0, *lat;
	double cpu = 0;

	s->ok = run->rc == 0;
	s->wall_s = (double)(run->end_ns - run->t0_ns) / 1e9;
	for (uint32_t r = 0; r < p->ranks; r++) {
		const struct b_rank *k = &run->rank[r];

		s->delivered += k->bytes;
		s->shards += k->shards;
		s->bad += k->bad_shards;
		s->hits += k->cs.hits;
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
	}
	if (!s->engine[0])
		snprintf(s->engine, sizeof(s->engine), "host");
	s->gets = s->shards;
	/* relaxed: every writer has exited */
	s->reads = atomic_load_explicit(&run->reads, memory_order_relaxed);
	s->read_bytes = atomic_load_explicit(&run->read_bytes, memory_order_relaxed);
	s->writes = atomic_load_explicit(&run->writes, memory_order_relaxed);
	s->max_inflight = (uint64_t)atomic_load_explicit(&run->max_inflight, memory_order_relaxed);
	s->gbps = s->wall_s > 0 ? (double)s->delivered / s->wall_s / 1e9 : 0;
	s->dedup = s->read_bytes ? (double)s->delivered / (double)s->read_bytes : 0;
	s->hit = s->gets ? (double)s->hits / (double)s->gets : 0;
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

struct b_report {
	const struct b_opts *o;
	struct b_shm *sh;
	struct b_sum sum[B_RUNS];
	const char *workload_desc;
	char engine_note[B_ERR];
	double fill_s;
	bool filled;
	uint64_t unique_shards, unique_bytes;
	bool check_failed;
	char check_err[B_ERR];
};

/* shared run vs the private one: backend bytes ratio and speedup. */
static bool ratio(const struct b_report *rp, uint32_t runi, double *bytes, double *speed)
{
	const struct b_sum *s = &rp->sum[runi], *v = &rp->sum[RUN_PRIVATE];

	if (!s->ran || !s->ok || !v->ran || !v->ok || !v->read_bytes || s->wall_s <= 0)
		return false;
	*bytes = (double)s->read_bytes / (double)v->read_bytes;
	*speed = v->wall_s / s->wall_s;
	return true;
}

static bool target_met(const struct b_report *rp, uint32_t runi)
{
	double b, sp;

	return ratio(rp, runi, &b, &sp) && b <= 1.0 / rp->sh->p.ranks + 1e-9 && sp >= 2.0;
}

static void print_table(const struct b_report *rp)
{
	const struct b_params *p = &rp->sh->p;
	char sb[32], cap[32], uq[32];

	fmt_size(sb, sizeof(sb), p->shard_bytes);
	fmt_size(cap, sizeof(cap), p->cap_slots * p->shard_bytes);
	fmt_size(uq, sizeof(uq), rp->unique_bytes);
	printf("kvshare bench: %u ranks, %s: %u requests, %u blocks x %u shards x %s = %s unique, "
	       "%u block loads per rank\n",
	       p->ranks, rp->workload_desc, p->nreq, p->nblocks, p->shards, sb, uq, p->naccess);
	char qdesc[96];
	if (p->qd && p->latency_ns)
		snprintf(qdesc, sizeof(qdesc), "at most %u reads in flight per rank (~%.0f MiB/s per rank)",
			 p->qd, (double)p->qd * (double)p->shard_bytes / ((double)p->latency_ns / 1e9) / (1 << 20));
	else if (p->qd)
		snprintf(qdesc, sizeof(qdesc), "at most %u reads in flight per rank", p->qd);
	else
		snprintf(qdesc, sizeof(qdesc), "reads in flight unbounded");
	if (p->backend == BACKEND_POSIX) {
		printf("store: posix %s (%s), %" PRIu64 " shards dumped by one process in %.3f s\n",
		       p->root, rp->o->keep ? "kept" : "removed at exit", rp->unique_shards, rp->fill_s);
		if (p->latency_ns)
			printf("backend: posix, every read held %" PRIu64 " us longer, %s%s\n",
			       p->latency_ns / 1000, qdesc,
			       rp->o->drop_cache ? "; page cache dropped before each run" : "");
		else
			printf("backend: posix, raw, %s%s\n", qdesc,
			       rp->o->drop_cache ? "; page cache dropped before each run" : "");
	} else {
		printf("backend: latency (synthetic: the dumped pattern, no fill), %" PRIu64
		       " us per read, %s\n", p->latency_ns / 1000, qdesc);
	}
	printf("cache: %s per cache (%" PRIu64 " slots); copy engine %s\n\n", cap, p->cap_slots,
	       rp->engine_note);

	printf("%-14s %-7s %7s %7s %11s %7s %7s %6s %9s %7s %7s  %s\n", "run", "library", "wall s",
	       "GB/s", "backend MiB", "reads", "dedup", "hit%", "cpu%/rank", "p50 ms", "p99 ms",
	       "fallbacks");
	for (uint32_t i = 0; i < B_RUNS; i++) {
		const struct b_run *run = &rp->sh->run[i];
		const struct b_sum *s = &rp->sum[i];

		if (!s->ran) {
			printf("%-14s %-7s  skipped: %s\n", run->name, "-", s->skip);
			continue;
		}
		if (!s->ok) {
			printf("%-14s %-7s  FAILED: %s\n", run->name, run->variant[0] ? run->variant : "-",
			       run->err);
			continue;
		}
		printf("%-14s %-7s %7.3f %7.2f %11.1f %7" PRIu64 " %6.1fx %6.1f %9.1f %7.2f %7.2f  %s\n",
		       run->name, run->variant, s->wall_s, s->gbps, (double)s->read_bytes / (1 << 20),
		       s->reads, s->dedup, 100.0 * s->hit, s->cpu_pct, s->p50_ms, s->p99_ms,
		       s->fallbacks);
	}
	printf("\n");
	bool any = false;
	for (uint32_t i = RUN_KERNEL; i <= RUN_PLAIN; i++) {
		double b, sp;

		if (!ratio(rp, i, &b, &sp))
			continue;
		if (!any)
			printf("shared vs private:\n");
		any = true;
		printf("  %-13s backend bytes %.3f of private (1/%.1f), speedup %.2fx\n",
		       rp->sh->run[i].name, b, b > 0 ? 1 / b : 0, sp);
	}
	if (any) {
		const char *met = "not met";
		bool km = target_met(rp, RUN_KERNEL), pm = target_met(rp, RUN_PLAIN);
		bool kr = rp->sum[RUN_KERNEL].ran, pr = rp->sum[RUN_PLAIN].ran;

		if ((!kr || km) && (!pr || pm))
			met = "met";
		else if (km)
			met = "met by kernel shared only";
		else if (pm)
			met = "met by plain shared only";
		printf("target (%u ranks): shared runs read 1/%u of the private run's backend bytes "
		       "and finish >= 2x faster: %s\n", p->ranks, p->ranks, met);
	}
	uint32_t nrun = 0;
	uint64_t shards = 0;
	bool allok = true;
	for (uint32_t i = 0; i < B_RUNS; i++)
		if (rp->sum[i].ran) {
			nrun++;
			shards = rp->sum[i].shards / p->ranks;
			allok &= rp->sum[i].ok && rp->sum[i].bad == 0;
		}
	if (allok)
		printf("verified: every rank's %" PRIu64 " shard loads per run equal the dumped bytes "
		       "(%u runs x %u ranks)\n", shards, nrun, p->ranks);
	printf("p50/p99: per task (at most %u blocks of a request), submit to kvs_store_wait's "
	       "return, all ranks\n", p->task_max_blocks);
}

static json_t *json_run(const struct b_report *rp, uint32_t i)
{
	const struct b_run *run = &rp->sh->run[i];
	const struct b_sum *s = &rp->sum[i];
	json_t *o = json_object();

	json_object_set_new(o, "name", json_string(run->name));
	json_object_set_new(o, "share_buffer", json_boolean(run->share));
	json_object_set_new(o, "ran", json_boolean(s->ran));
	if (!s->ran) {
		json_object_set_new(o, "skipped", json_string(s->skip));
		return o;
	}
	json_object_set_new(o, "library", json_string(run->variant));
	json_object_set_new(o, "library_version", json_string(run->version));
	json_object_set_new(o, "ok", json_boolean(s->ok));
	if (!s->ok)
		json_object_set_new(o, "error", json_string(run->err));
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
	json_object_set_new(o, "misses", json_integer((json_int_t)s->misses));
	json_object_set_new(o, "waits", json_integer((json_int_t)s->waits));
	json_object_set_new(o, "evictions", json_integer((json_int_t)s->evictions));
	json_object_set_new(o, "hit_ratio", json_real(s->hit));
	json_object_set_new(o, "cpu_pct_per_rank", json_real(s->cpu_pct));
	json_object_set_new(o, "task_latency_ms",
			    json_pack("{s:f,s:f,s:s}", "p50", s->p50_ms, "p99", s->p99_ms, "source",
				      "per task: submit to kvs_store_wait return, measured by the rank"));
	json_object_set_new(o, "store_task_latency_us",
			    json_pack("{s:f,s:f,s:s}", "p50", s->hp50_us, "p99", s->hp99_us, "source",
				      "kvs_store_stats task_lat_us (log2 buckets: the bucket's upper bound)"));
	json_object_set_new(o, "fallbacks", json_string(s->fallbacks));
	json_object_set_new(o, "copy_engine", json_string(s->engine));
	json_object_set_new(o, "verified_shards", json_integer((json_int_t)s->shards));
	json_object_set_new(o, "bad_shards", json_integer((json_int_t)s->bad));
	return o;
}

static void print_json(const struct b_report *rp, bool ok)
{
	const struct b_params *p = &rp->sh->p;
	const char *wl[] = { "prefix", "scan", "trace" };
	json_t *root = json_object(), *runs = json_array(), *ratios = json_object();

	json_object_set_new(root, "kvshare_version", json_string(kvs_version()));
	json_object_set_new(root, "cli_variant", json_string(KVS_CLI_VARIANT));
	json_object_set_new(root, "config", json_pack(
		"{s:i,s:i,s:i,s:I,s:I,s:I,s:s,s:I,s:i,s:s,s:s?,s:I,s:s,s:b,s:b}",
		"ranks", (int)p->ranks, "blocks", (int)p->nblocks, "shards", (int)p->shards,
		"shard_bytes", (json_int_t)p->shard_bytes,
		"capacity_bytes", (json_int_t)(p->cap_slots * p->shard_bytes),
		"capacity_slots", (json_int_t)p->cap_slots,
		"backend", p->backend == BACKEND_POSIX ? "posix" : "latency",
		"latency_us", (json_int_t)(p->latency_ns / 1000), "qd", (int)p->qd,
		"workload", wl[p->workload], "trace", rp->o->trace,
		"seed", (json_int_t)p->seed, "copy_engine", rp->engine_note,
		"drop_cache", rp->o->drop_cache, "kept", rp->o->keep));
	if (p->backend == BACKEND_POSIX)
		json_object_set_new(json_object_get(root, "config"), "root", json_string(p->root));
	json_object_set_new(root, "workload", json_pack(
		"{s:s,s:i,s:i,s:i,s:I,s:I,s:i,s:I}",
		"description", rp->workload_desc, "requests", (int)p->nreq, "tasks_per_rank",
		(int)p->ntasks, "unique_blocks", (int)p->nblocks,
		"unique_shards", (json_int_t)rp->unique_shards,
		"unique_bytes", (json_int_t)rp->unique_bytes,
		"block_loads_per_rank", (int)p->naccess,
		"shard_loads_per_rank", (json_int_t)((uint64_t)p->naccess * p->shards)));
	json_object_set_new(root, "fill", json_pack("{s:b,s:f}", "done", rp->filled, "seconds",
						   rp->fill_s));
	for (uint32_t i = 0; i < B_RUNS; i++)
		json_array_append_new(runs, json_run(rp, i));
	json_object_set_new(root, "runs", runs);
	for (uint32_t i = RUN_KERNEL; i <= RUN_PLAIN; i++) {
		double b, sp;

		if (ratio(rp, i, &b, &sp))
			json_object_set_new(ratios, i == RUN_KERNEL ? "kernel_shared" : "plain_shared",
					    json_pack("{s:f,s:f,s:b}", "backend_bytes_vs_private", b,
						      "speedup_vs_private", sp, "target_met",
						      target_met(rp, i)));
	}
	json_object_set_new(root, "ratios", ratios);
	if (rp->o->check)
		json_object_set_new(root, "check", json_pack("{s:b,s:s?}", "ok", !rp->check_failed,
							     "error", rp->check_failed ? rp->check_err : NULL));
	json_object_set_new(root, "ok", json_boolean(ok));
	json_dumpf(root, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
	fputc('\n', stdout);
	json_decref(root);
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */

int kvs_cli_bench(int argc, char **argv)
{
	struct b_opts o;
	struct b_work w;
	struct b_report rp;
	struct b_shm *sh = MAP_FAILED;
	bool help = false, made_root = false, progress;
	char err[B_ERR] = "", desc[PATH_MAX + 64], root[PATH_MAX];
	int rc, memfd = -1, ret = KVS_CLI_FAIL;
	uint64_t total = 0;

	rc = parse_opts(argc, argv, &o, &help);
	if (rc)
		return rc;
	if (help) {
		usage(stdout);
		return KVS_CLI_OK;
	}
	if (o.internal)
		return internal_run(o.internal);
	g_verbose = o.verbose;
	memset(&w, 0, sizeof(w));
	memset(&rp, 0, sizeof(rp));
	rp.o = &o;

	/* The workload, in this process's memory first. */
	uint32_t per = B_TASK_SHARDS / o.shards ? B_TASK_SHARDS / o.shards : 1;
	if (o.workload == WORK_PREFIX)
		rc = work_prefix(&w, o.blocks, o.seed, per);
	else if (o.workload == WORK_SCAN)
		rc = work_scan(&w, o.blocks, per);
	else
		rc = work_trace(&w, o.trace, o.blocks, per, err);
	if (rc == 0 && o.workload != WORK_TRACE)
		rc = work_ids(&w, o.seed);
	if (rc == 0)
		rc = work_finish(&w);
	if (rc < 0) {
		fprintf(stderr, "kvshare bench: %s\n", err[0] ? err : "out of memory");
		work_free(&w);
		return o.workload == WORK_TRACE && rc == -EINVAL ? KVS_CLI_USAGE : KVS_CLI_FAIL;
	}
	if (o.workload == WORK_PREFIX)
		snprintf(desc, sizeof(desc), "workload prefix (seed %" PRIu64 ")", o.seed);
	else if (o.workload == WORK_SCAN)
		snprintf(desc, sizeof(desc), "workload scan");
	else
		snprintf(desc, sizeof(desc), "trace %s (first %u of %u requests)", o.trace, w.nreq,
			 w.trace_total);
	rp.workload_desc = desc;

	/* Sizes. */
	uint64_t unique_shards = (uint64_t)w.nblocks * o.shards;
	uint32_t maxtb = 1; /* the largest task, in blocks */
	for (uint32_t t = 0; t < w.ntasks; t++)
		if (w.task[t + 1] - w.task[t] > maxtb)
			maxtb = w.task[t + 1] - w.task[t];
	uint64_t maxsh = (uint64_t)maxtb * o.shards;
	uint64_t slots = o.capacity ? o.capacity / o.shard_bytes : unique_shards + unique_shards / 4 + 64;
	if (!o.capacity && slots < 2 * B_WINDOW * maxsh)
		slots = 2 * B_WINDOW * maxsh;
	if (unique_shards > (1ull << 40) / o.shard_bytes ||
	    unique_shards * o.shard_bytes > (1ull << 40)) {
		fprintf(stderr, "kvshare bench: a working set of %" PRIu64 " shards of %" PRIu64
				" bytes is over 1 TiB (kvshare bench --help)\n", unique_shards, o.shard_bytes);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (slots > (1ull << 31) - 1) {
		fprintf(stderr, "kvshare bench: %" PRIu64 " slots per cache is over the cache's "
				"2^31 - 1 (a smaller --capacity or a larger --shard-size)\n", slots);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (slots < 2 * B_WINDOW * maxsh) {
		fprintf(stderr, "kvshare bench: --capacity holds %" PRIu64 " shards; a rank pins up to %"
				PRIu64 " at once: give at least %" PRIu64 " bytes (kvshare bench --help)\n",
			slots, B_WINDOW * maxsh, 2 * B_WINDOW * maxsh * o.shard_bytes);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	if (o.check && slots < unique_shards) {
		fprintf(stderr, "kvshare bench: --check needs a capacity that holds the working set "
				"(%" PRIu64 " shards; --capacity gives %" PRIu64 ")\n", unique_shards, slots);
		ret = KVS_CLI_USAGE;
		goto out;
	}
	rp.unique_shards = unique_shards;
	rp.unique_bytes = unique_shards * o.shard_bytes;

	/* Memory at the peak (the private run: a cache per rank), against the
	 * machine's: refuse what can only end with the OOM killer. */
	long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
	uint64_t cache_bytes = slots * o.shard_bytes;
	uint64_t need = rp.unique_bytes + (uint64_t)o.ranks * cache_bytes +
			(uint64_t)o.ranks * B_WINDOW * maxsh * o.shard_bytes;
	if (pages > 0 && psize > 0 && need > (uint64_t)pages / 10 * 9 * (uint64_t)psize) {
		char a[32], b[32], c[32];

		fmt_size(a, sizeof(a), need);
		fmt_size(b, sizeof(b), cache_bytes);
		fmt_size(c, sizeof(c), (uint64_t)pages * (uint64_t)psize);
		fprintf(stderr, "kvshare bench: this run needs about %s of memory (%u private caches "
				"of %s, the reference bytes, the ranks' buffers); the machine has %s: "
				"lower --capacity, --blocks or --shard-size\n", a, o.ranks, b, c);
		ret = KVS_CLI_USAGE;
		goto out;
	}

	/* The shared block: header, workload, latency samples, reference bytes. */
	uint64_t off = (sizeof(struct b_shm) + 63) & ~63ull, off_ids, off_task, off_acc, off_lat, off_ref;
	off_ids = off;
	off += ((uint64_t)w.nblocks * sizeof(struct kvs_block_id) + 63) & ~63ull;
	off_task = off;
	off += ((uint64_t)(w.ntasks + 1) * 4 + 63) & ~63ull;
	off_acc = off;
	off += ((uint64_t)w.naccess * 4 + 63) & ~63ull;
	off_lat = off;
	off += ((uint64_t)B_RUNS * o.ranks * w.ntasks * 4 + 4095) & ~4095ull;
	off_ref = off;
	total = off + rp.unique_bytes;
	memfd = memfd_create("kvshare-bench", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, (off_t)total) < 0) {
		fprintf(stderr, "kvshare bench: memfd of %" PRIu64 " bytes: %s\n", total, strerror(errno));
		goto out;
	}
	sh = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (sh == MAP_FAILED) {
		fprintf(stderr, "kvshare bench: mmap of %" PRIu64 " bytes: %s\n", total, strerror(errno));
		goto out;
	}
	rp.sh = sh;
	sh->magic = B_MAGIC;
	sh->layout = sizeof(struct b_shm);
	sh->p = (struct b_params){
		.ranks = o.ranks, .shards = o.shards, .backend = o.backend, .workload = o.workload,
		.shard_bytes = o.shard_bytes, .cap_slots = slots, .latency_ns = o.latency_us * 1000,
		.qd = o.qd, .verbose = o.verbose, .task_max_blocks = maxtb, .nblocks = w.nblocks,
		.ntasks = w.ntasks, .naccess = w.naccess, .nreq = w.nreq, .seed = o.seed,
		.off_ids = off_ids, .off_task = off_task, .off_acc = off_acc, .off_lat = off_lat,
		.off_ref = off_ref, .total = total,
	};
	memcpy((char *)sh + off_ids, w.ids, (size_t)w.nblocks * sizeof(struct kvs_block_id));
	memcpy((char *)sh + off_task, w.task, (size_t)(w.ntasks + 1) * 4);
	memcpy((char *)sh + off_acc, w.acc, (size_t)w.naccess * 4);
	for (uint32_t b = 0; b < w.nblocks; b++)
		for (uint32_t s = 0; s < o.shards; s++)
			kvs_pattern_fill(&w.ids[b], s, 0, (void *)sh_ref(sh, b, s), o.shard_bytes);

	/* The runs' names and caches: unique per invocation. */
	static const char *const names[B_RUNS] = { "kernel shared", "plain shared", "private" };
	static const char tags[B_RUNS] = { 'k', 'p', 'v' };
	uint64_t nonce = kvs_mix64(kvs_now_ns() ^ ((uint64_t)getpid() << 32));
	for (uint32_t i = 0; i < B_RUNS; i++) {
		struct b_run *run = &sh->run[i];

		snprintf(run->name, sizeof(run->name), "%s", names[i]);
		snprintf(run->uid, sizeof(run->uid), "kvsbench.%d.%08" PRIx32 ".%c", (int)getpid(),
			 (uint32_t)nonce, tags[i]);
		run->share = i != RUN_PRIVATE;
		snprintf(run->want_variant, sizeof(run->want_variant), "%s",
			 i == RUN_PLAIN ? "plain" : KVS_CLI_VARIANT);
	}

	signals_block();
	progress = isatty(STDERR_FILENO);

	rc = probe_engine(sh, o.engine, rp.engine_note, sizeof(rp.engine_note));
	if (rc < 0) {
		fprintf(stderr, "kvshare bench: --copy-engine cuda: %s\n", rp.engine_note);
		goto out;
	}

	/* The store, filled by one process through the store API. */
	if (o.backend == BACKEND_POSIX) {
		snprintf(root, sizeof(root), "%s/kvshare-bench.XXXXXX", o.root ? o.root : "/tmp");
		if (!mkdtemp(root)) {
			fprintf(stderr, "kvshare bench: creating the store directory %s: %s\n", root,
				strerror(errno));
			goto out;
		}
		made_root = true;
		snprintf(sh->p.root, sizeof(sh->p.root), "%s", root);
		if (progress)
			fprintf(stderr, "  filling the store...");
		rc = run_fill(sh, err, &rp.fill_s);
		if (progress)
			fprintf(stderr, "\r%40s\r", "");
		if (rc < 0) {
			fprintf(stderr, "kvshare bench: %s\n", err[0] ? err : "fill failed");
			goto out;
		}
		rp.filled = true;
	}

	/* The three runs. */
	char plainlib[PATH_MAX];
	snprintf(plainlib, sizeof(plainlib), "%s/libkvshare.so.1", KVS_CLI_PLAIN_LIBDIR);
	bool cli_plain = strcmp(KVS_CLI_VARIANT, "plain") == 0;
	for (uint32_t i = 0; i < B_RUNS; i++) {
		struct b_sum *s = &rp.sum[i];

		if (g_interrupted) {
			s->skip = "interrupted before it started";
			continue;
		}
		if (i == RUN_KERNEL && cli_plain) {
			s->skip = "the CLI was built for the plain variant only (KVS_VARIANT=plain)";
			continue;
		}
		if (i == RUN_PLAIN && !cli_plain && access(plainlib, R_OK) != 0) {
			s->skip = "no plain library next to this build (" KVS_CLI_PLAIN_LIBDIR
				  "/libkvshare.so.1; KVS_VARIANT=both builds it)";
			continue;
		}
		if (o.drop_cache)
			nftw(sh->p.root, drop_one, 16, FTW_PHYS);
		s->ran = true;
		if (i == RUN_PLAIN && !cli_plain)
			rc = run_exec(sh, memfd, i, KVS_CLI_PLAIN_LIBDIR, progress);
		else
			rc = run_ranks(sh, i, progress);
		summarize(sh, i, s);
	}

	/* --check: backend reads are the unique shards (shared), once per rank (private). */
	for (uint32_t i = 0; i < B_RUNS && o.check; i++) {
		const struct b_sum *s = &rp.sum[i];
		uint64_t want = i == RUN_PRIVATE ? unique_shards * o.ranks : unique_shards;

		if (s->ran && s->ok && (s->reads != want || s->read_bytes != want * o.shard_bytes)) {
			rp.check_failed = true;
			snprintf(rp.check_err, sizeof(rp.check_err),
				 "%s: %" PRIu64 " backend reads (%" PRIu64 " bytes), want %" PRIu64
				 " (%s)", sh->run[i].name, s->reads, s->read_bytes, want,
				 i == RUN_PRIVATE ? "every unique shard once per rank"
						  : "every unique shard once for the node");
			break;
		}
	}

	bool ok = !g_interrupted && !rp.check_failed;
	for (uint32_t i = 0; i < B_RUNS; i++)
		if (rp.sum[i].ran && !rp.sum[i].ok)
			ok = false;
	if (o.json)
		print_json(&rp, ok);
	else
		print_table(&rp);
	fflush(stdout);
	ret = ok ? KVS_CLI_OK : KVS_CLI_FAIL;
	/* One line naming the cause. */
	for (uint32_t i = 0; i < B_RUNS && !ok; i++)
		if (rp.sum[i].ran && !rp.sum[i].ok) {
			fprintf(stderr, "kvshare bench: %s: %s\n", sh->run[i].name, sh->run[i].err);
			break;
		}
	if (ok == false && rp.check_failed)
		fprintf(stderr, "kvshare bench: --check: %s\n", rp.check_err);
out:
	if (made_root) {
		if (o.keep)
			fprintf(stderr, "kvshare bench: store kept in %s\n", root);
		else
			nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	}
	if (sh != MAP_FAILED)
		munmap(sh, total);
	if (memfd >= 0)
		close(memfd);
	work_free(&w);
	return ret;
}
