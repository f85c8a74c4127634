/*
 * io/copy.c — copy-engine dispatch, argument validation, and the host engine.
 *
 * Every public call is validated here, once, for both engines (io/copy.h lists
 * the -EINVAL cases): a segment list comes from the store, which builds it from
 * the cache geometry and the caller's task (head slices name arbitrary byte
 * ranges), so a bad one is refused before anything is queued rather than turned
 * into a wild memcpy or a device fault.
 *
 * The host engine treats "device" addresses as host pointers: a scatter is n
 * memcpy calls (non-temporal stores for a large call: io/copy_nt.c) and is
 * complete when it returns, so sync has nothing to wait for
 * and there is no event to wait on (a non-NULL event is a caller bug: -EINVAL).
 * With streams > 1 a large call's memcpys are shared with the engine's copy
 * threads (io/copy_crew.c), still complete when the call returns.
 * Registering pins nothing: it maps the range into the process's page tables
 * ahead of the copies (host_reg); in its test mode (register_delay_ns) each
 * registration sleeps that long, so the store's background registration, its
 * staging of unregistered slots and a close in mid-registration are exercised
 * without a GPU.  It is the engine of CPU-only runs and CI, and the reference
 * the cuda engine's tests compare against.
 *
 * Its other test mode, land_delay_ns, stands in for a busy or stuck GPU: each
 * h2d/d2h is copied (segments and all) into a job queued for a thread of the
 * engine, which does the memcpys land_delay_ns after the call, in order; sync
 * sleeps on a condition until every job queued before it has landed, or its
 * deadline (-ETIMEDOUT, the jobs still queued).  So the store's handling of a
 * sync that times out -- slots kept pinned, nothing copied until the engine
 * drains -- is exercised in CI.  Close waits for the queue (bounded, 10 s).
 *
 * The cuda engine lives in copy_cuda.c (+ the copy kernel
 * in copy_kernel.cu) and exists only in a kernel-variant build with the CUDA
 * toolkit (KVS_HAVE_CUDA).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/clock.h"
#include "io/copy_impl.h"

/* Registering a range maps it into this process's page tables
 * (MADV_POPULATE_WRITE), as cudaHostRegister's pinning does for the cuda
 * engine: the store registers its data segments from a background thread at
 * open, so a rank that attached to a cache someone else made (another TP
 * rank, an engine restarted on a persistent cache) takes those faults there
 * and not in its first loads, one per 64 KiB of 4 KiB pages.  On the 2-core
 * VM an adopter's first load of 1024 READY 256 KiB shards from /dev/shm took
 * 30-34 ms (4150 minor faults) against 15-16 ms for the next ones.  The
 * creator pre-faulted the pages (numa/), so this maps them and allocates
 * nothing.  A kernel without it (before 5.14) or a failure leaves the faults
 * to the copies: logged once, never an error. */
static int host_reg(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	struct timespec ts;

#if defined(MADV_POPULATE_WRITE)
	if (madvise(base, bytes, MADV_POPULATE_WRITE) != 0 &&
	    !atomic_exchange_explicit(&eng->populate_failed, true, memory_order_relaxed))
		kvs_log_info(&eng->log, "copy engine host: mapping the data plane ahead "
			     "(MADV_POPULATE_WRITE): %s; pages are mapped at their first copy",
			     strerror(errno));
#endif
	if (!eng->register_delay_ns)
		return 0;
	ts = kvs_ns_to_timespec(kvs_deadline_after(eng->register_delay_ns));
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	return 0;
}

static int host_unreg(struct kvs_copy_engine *eng, void *base)
{
	(void)eng, (void)base;
	return 0;
}

static int host_alloc(struct kvs_copy_engine *eng, uint64_t bytes, void **ptr)
{
	(void)eng;
	*ptr = malloc(bytes);
	return *ptr ? 0 : -ENOMEM;
}

static void host_free(struct kvs_copy_engine *eng, void *ptr)
{
	(void)eng;
	free(ptr);
}

static void host_copy(bool h2d, const struct kvs_copy_vec v[], uint32_t n)
{
	uint64_t total = 0;
	bool nt;

	for (uint32_t i = 0; i < n; i++)
		total += v[i].len; /* a wrap (no real call) only changes the choice */
	nt = kvs_copy_nt_wanted(total);
	for (uint32_t i = 0; i < n; i++) {
		void *dev = (void *)(uintptr_t)v[i].dev;

		if (h2d)
			kvs_copy_bytes(dev, v[i].host, v[i].len, nt);
		else
			kvs_copy_bytes(v[i].host, dev, v[i].len, nt);
	}
	if (nt)
		kvs_copy_nt_fence();
}

/* ---- the delayed test mode ---- */

struct landing {
	struct landing *next;
	uint64_t due_ns;
	bool h2d;
	uint32_t n;
	struct kvs_copy_vec v[];
};

struct delayed {
	pthread_mutex_t mu;
	pthread_cond_t work_cv;        /* the lander: a job, stop */
	pthread_cond_t done_cv;        /* sync: a job landed */
	struct landing *head, *tail;
	uint64_t queued, landed;       /* jobs so far */
	bool stop;
	pthread_t thr;
};

static void *lander(void *arg)
{
	struct delayed *q = arg;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		struct landing *j = q->head;
		struct timespec ts;

		if (!j) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->work_cv, &q->mu);
			continue;
		}
		if (kvs_now_ns() < j->due_ns && !q->stop) {
			ts = kvs_ns_to_timespec(j->due_ns);
			pthread_cond_timedwait(&q->work_cv, &q->mu, &ts);
			continue;
		}
		q->head = j->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->mu);
		host_copy(j->h2d, j->v, j->n);
		free(j);
		pthread_mutex_lock(&q->mu);
		q->landed++;
		pthread_cond_broadcast(&q->done_cv);
	}
	pthread_mutex_unlock(&q->mu);
	return NULL;
}

static int delayed_start(struct kvs_copy_engine *eng)
{
	struct delayed *q = calloc(1, sizeof(*q));
	pthread_condattr_t ca;
	int rc;

	if (!q)
		return -ENOMEM;
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&q->work_cv, &ca);
	pthread_cond_init(&q->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	rc = pthread_create(&q->thr, NULL, lander, q);
	if (rc) {
		pthread_cond_destroy(&q->done_cv);
		pthread_cond_destroy(&q->work_cv);
		pthread_mutex_destroy(&q->mu);
		free(q);
		return -rc;
	}
	pthread_setname_np(q->thr, "kvs-lander");
	eng->impl = q;
	return 0;
}

static int delayed_queue(struct kvs_copy_engine *eng, bool h2d, const struct kvs_copy_vec v[],
			 uint32_t n)
{
	struct delayed *q = eng->impl;
	struct landing *j = malloc(sizeof(*j) + n * sizeof(j->v[0]));

	if (!j)
		return -ENOMEM;
	j->next = NULL;
	j->due_ns = kvs_deadline_after(eng->land_delay_ns);
	j->h2d = h2d;
	j->n = n;
	memcpy(j->v, v, n * sizeof(v[0]));
	pthread_mutex_lock(&q->mu);
	if (q->tail)
		q->tail->next = j;
	else
		q->head = j;
	q->tail = j;
	q->queued++;
	pthread_cond_signal(&q->work_cv);
	pthread_mutex_unlock(&q->mu);
	return 0;
}

static int delayed_sync(struct delayed *q, uint64_t deadline_ns)
{
	struct timespec ts = kvs_ns_to_timespec(deadline_ns);
	int rc = 0;

	pthread_mutex_lock(&q->mu);
	while (q->landed < q->queued && rc == 0)
		if (pthread_cond_timedwait(&q->done_cv, &q->mu, &ts) == ETIMEDOUT &&
		    q->landed < q->queued)
			rc = -ETIMEDOUT;
	pthread_mutex_unlock(&q->mu);
	return rc;
}

static void delayed_stop(struct delayed *q)
{
	if (!q)
		return;
	/* Up to 10 s for the queue to land, then whatever is left lands at once. */
	(void)delayed_sync(q, kvs_deadline_after(10 * KVS_NSEC_PER_SEC));
	pthread_mutex_lock(&q->mu);
	q->stop = true;
	pthread_cond_signal(&q->work_cv);
	pthread_mutex_unlock(&q->mu);
	pthread_join(q->thr, NULL);
	pthread_cond_destroy(&q->done_cv);
	pthread_cond_destroy(&q->work_cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

static int host_vcopy(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
		      bool h2d)
{
	if (eng->impl)
		return delayed_queue(eng, h2d, v, n);
	if (!kvs_copy_crew_copy(eng->crew, v, n, h2d))
		host_copy(h2d, v, n);
	return 0;
}

/* Only reached with a non-NULL event: the host engine has no CUDA events. */
static int host_wait_event(struct kvs_copy_engine *eng, void *event)
{
	(void)event;
	kvs_log_error(&eng->log, "copy_engine=host: wait_event on a CUDA event "
		      "(the host engine has no streams)");
	return -EINVAL;
}

static int host_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	return eng->impl ? delayed_sync(eng->impl, deadline_ns) : 0;
}

static void host_fini(struct kvs_copy_engine *eng)
{
	delayed_stop(eng->impl);
	kvs_copy_crew_close(eng->crew);
}

static const struct kvs_copy_ops host_ops = {
	.name = "host",
	.reg = host_reg,
	.unreg = host_unreg,
	.host_alloc = host_alloc,
	.host_free = host_free,
	.copy = host_vcopy,
	.wait_event = host_wait_event,
	.sync = host_sync,
	.fini = host_fini,
};

int kvs_copy_open(const struct kvs_copy_opts *opts, struct kvs_copy_engine **out)
{
	struct kvs_copy_engine *eng;
	int rc = 0;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!opts || (opts->kind != KVS_COPY_HOST && opts->kind != KVS_COPY_CUDA) ||
	    opts->streams > KVS_COPY_MAX_STREAMS || opts->strategy > KVS_COPY_STRATEGY_KERNEL ||
	    opts->register_delay_ns > KVS_COPY_REGISTER_DELAY_MAX_NS ||
	    opts->land_delay_ns > KVS_COPY_LAND_DELAY_MAX_NS ||
	    (opts->kind == KVS_COPY_CUDA && (opts->register_delay_ns || opts->land_delay_ns))) {
		if (opts && opts->log)
			kvs_log_error(opts->log, "copy engine: invalid options (kind %u, streams %u "
				      "(1..%u), strategy %u, register_delay_ns %llu (host engine "
				      "only, <= 1 s), land_delay_ns %llu (host engine only, <= 10 s))",
				      opts->kind, opts->streams, KVS_COPY_MAX_STREAMS, opts->strategy,
				      (unsigned long long)opts->register_delay_ns,
				      (unsigned long long)opts->land_delay_ns);
		return -EINVAL;
	}
	eng = calloc(1, sizeof(*eng));
	if (!eng)
		return -ENOMEM;
	if (opts->log)
		eng->log = *opts->log;
	eng->device_id = opts->device_id;
	eng->streams = opts->streams ? opts->streams : 1;
	eng->strategy = opts->strategy;
	eng->register_delay_ns = opts->register_delay_ns;
	eng->land_delay_ns = opts->land_delay_ns;
	if (opts->kind == KVS_COPY_HOST) {
		eng->ops = &host_ops;
		if (eng->land_delay_ns)
			rc = delayed_start(eng);
		else
			rc = kvs_copy_crew_open(eng->streams, &eng->log, &eng->crew);
	} else {
#if defined(KVS_HAVE_CUDA)
		rc = kvs_copy_cuda_init(eng);
#else
		kvs_log_error(&eng->log, "copy_engine=cuda: this %s build has no CUDA copy engine",
			      KVS_KERNEL ? "kernel" : "plain");
		rc = -EOPNOTSUPP;
#endif
	}
	if (rc < 0) {
		free(eng);
		return rc;
	}
	*out = eng;
	return 0;
}

void kvs_copy_close(struct kvs_copy_engine *eng)
{
	if (!eng)
		return;
	eng->ops->fini(eng);
	free(eng);
}

const char *kvs_copy_name(const struct kvs_copy_engine *eng)
{
	return eng->ops->name;
}

int kvs_copy_register(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	if (!eng || !base || bytes == 0 || bytes > UINTPTR_MAX - (uintptr_t)base)
		return -EINVAL;
	return eng->ops->reg(eng, base, bytes);
}

int kvs_copy_unregister(struct kvs_copy_engine *eng, void *base)
{
	if (!eng || !base)
		return -EINVAL;
	return eng->ops->unreg(eng, base);
}

int kvs_copy_host_alloc(struct kvs_copy_engine *eng, uint64_t bytes, void **ptr)
{
	if (ptr)
		*ptr = NULL;
	if (!eng || !ptr || bytes == 0 || bytes > SIZE_MAX)
		return -EINVAL;
	return eng->ops->host_alloc(eng, bytes, ptr);
}

void kvs_copy_host_free(struct kvs_copy_engine *eng, void *ptr)
{
	if (eng && ptr)
		eng->ops->host_free(eng, ptr);
}

/*
 * The checks every copy call shares.  Ranges are checked for 64-bit (and, on the
 * host side, address-space) wrap-around only: whether a host range lies inside
 * the caller's slot is the caller's contract (the engine does not know the slot
 * size), as is the device range.
 */
static bool copy_ok(const void *host, uint64_t dev, uint64_t len)
{
	return host && len != 0 && dev != 0 && dev <= UINT64_MAX - len &&
	       len <= (uint64_t)(UINTPTR_MAX - (uintptr_t)host);
}

static int copy_bad_args(const struct kvs_copy_engine *eng, const char *what, uint32_t n,
			 uint32_t max)
{
	if (eng)
		kvs_log_error(&eng->log, "copy engine %s: %s: invalid copy list (n %u, max %u; "
			      "every host, len and dev non-zero, no range wraps)", eng->ops->name,
			      what, n, max);
	return -EINVAL;
}

/* A shard's segment list, validated and turned into a vector. */
static int copy_segs(struct kvs_copy_engine *eng, const char *what, void *host,
		     const struct kvs_copy_seg segs[], uint32_t n, bool h2d)
{
	struct kvs_copy_vec v[KVS_MAX_TENSORS];

	if (!eng || !host || (n > 0 && !segs) || n > KVS_MAX_TENSORS)
		return copy_bad_args(eng, what, n, KVS_MAX_TENSORS);
	for (uint32_t i = 0; i < n; i++) {
		if (segs[i].host_off > (uint64_t)(UINTPTR_MAX - (uintptr_t)host))
			return copy_bad_args(eng, what, n, KVS_MAX_TENSORS);
		/* integer arithmetic: an offset past the host buffer is the caller's
		 * bad argument, refused below, not a pointer formed out of bounds */
		v[i] = (struct kvs_copy_vec){ (void *)((uintptr_t)host + segs[i].host_off), segs[i].dev,
					      segs[i].len };
		if (!copy_ok(v[i].host, v[i].dev, v[i].len))
			return copy_bad_args(eng, what, n, KVS_MAX_TENSORS);
	}
	return n ? eng->ops->copy(eng, v, n, h2d) : 0;
}

int kvs_copy_h2d(struct kvs_copy_engine *eng, const void *host, const struct kvs_copy_seg segs[],
		 uint32_t n)
{
	/* the engine only reads host memory in this direction */
	return copy_segs(eng, "h2d", (void *)(uintptr_t)host, segs, n, true);
}

int kvs_copy_d2h(struct kvs_copy_engine *eng, void *host, const struct kvs_copy_seg segs[],
		 uint32_t n)
{
	return copy_segs(eng, "d2h", host, segs, n, false);
}

static int copy_vec(struct kvs_copy_engine *eng, const char *what, const struct kvs_copy_vec v[],
		    uint32_t n, bool h2d)
{
	if (!eng || (n > 0 && !v) || n > KVS_COPY_VEC_MAX)
		return copy_bad_args(eng, what, n, KVS_COPY_VEC_MAX);
	for (uint32_t i = 0; i < n; i++)
		if (!copy_ok(v[i].host, v[i].dev, v[i].len))
			return copy_bad_args(eng, what, n, KVS_COPY_VEC_MAX);
	return n ? eng->ops->copy(eng, v, n, h2d) : 0;
}

int kvs_copy_h2dv(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n)
{
	return copy_vec(eng, "h2dv", v, n, true);
}

int kvs_copy_d2hv(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n)
{
	return copy_vec(eng, "d2hv", v, n, false);
}

int kvs_copy_wait_event(struct kvs_copy_engine *eng, void *event)
{
	if (!eng)
		return -EINVAL;
	if (!event)
		return 0;
	return eng->ops->wait_event(eng, event);
}

int kvs_copy_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	if (!eng)
		return -EINVAL;
	return eng->ops->sync(eng, deadline_ns);
}

int kvs_copy_pci_bus_id(int32_t device_id, char *buf, uint32_t len)
{
#if defined(KVS_HAVE_CUDA)
	return kvs_copy_cuda_pci_bus_id(device_id, buf, len);
#else
	(void)device_id, (void)buf, (void)len;
	return -EOPNOTSUPP;
#endif
}
