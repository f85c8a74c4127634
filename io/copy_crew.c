/*
 * io/copy_crew.c — the host engine's copy threads: one large vector call shared
 * between the calling thread and up to streams - 1 helpers.
 *
 * A CPU-only rank has no DMA engine: a load is memcpy on the store's copier
 * thread, and one core's memcpy caps the rank (on the 2-core dev VM one thread
 * moves about 10 GB/s of 32 KiB copies to scattered destinations, two threads
 * 15.5-16; docs/io.md, "Copy engines").  With streams = N > 1 the host engine
 * cuts a call of at least KVS_COPY_CREW_MIN_BYTES into parts of about
 * PART_BYTES: byte ranges of the vector's copies laid end to end, so one copy
 * larger than a part is split too.  The caller and the helpers take parts until
 * none is left, and the call returns once every part has landed: the host
 * engine's contract (complete when the call returns, nothing for sync to wait
 * for) is unchanged.
 *
 * The caller takes parts as well, so a helper that is slow to wake (no idle
 * core) delays a call by at most the one part it took, never by its wake-up;
 * with every core busy the call costs about what one thread's copy does.
 * Helpers start at the first call large enough to share, on the calling thread
 * (the store's copier), so they inherit its CPU affinity (cpu_affinity_cores);
 * between calls they sleep on a condition variable (no polling), and close joins
 * them.  A helper that cannot be started is logged once and the call goes on
 * with the threads there are.
 *
 * Everything shared is under one mutex: a part is at least PART_BYTES of memcpy
 * (tens of microseconds), next to which taking the lock is noise.  The caller's
 * wait for the last part has no deadline, as its own memcpys have none: it lasts
 * as long as the one part a helper is still copying.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "io/copy_impl.h"

/* About how many bytes one part copies (the call's bytes / parts, rounded). */
#define PART_BYTES (128u << 10)
/* Most parts of one call (more threads than this never help). */
#define PARTS_MAX 64u

struct kvs_copy_crew {
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* helpers: parts to take, stop */
	pthread_cond_t done_cv; /* the caller: the last part landed */
	const struct kvs_log *log;
	/* The call being shared (valid while landed < parts; the caller returns
	 * only after that, so a helper holding a part may read it). */
	const struct kvs_copy_vec *v;
	uint32_t n;
	bool h2d;
	bool nt;                /* streamed (kvs_copy_nt_wanted of total) */
	uint64_t total;         /* <= UINT64_MAX / PARTS_MAX: total * p never wraps */
	uint32_t parts, next, landed;
	bool stop;
	uint32_t want;          /* helpers wanted: streams - 1; those started once
				   one could not be (logged) */
	uint32_t helpers;       /* helpers started */
	pthread_t thr[KVS_COPY_MAX_STREAMS - 1];
	uint64_t ends[KVS_COPY_VEC_MAX]; /* ends[i]: bytes of v[0..i] laid end to end
					    (the caller's, written before it shares) */
};

/* Copy part p of the current call (c->mu not held). */
static void part_copy(const struct kvs_copy_crew *c, uint32_t p)
{
	uint64_t lo = c->total * p / c->parts, hi = c->total * (p + 1) / c->parts;
	uint32_t a = 0, b = c->n - 1;

	while (a < b) { /* the first copy that ends past lo */
		uint32_t m = a + (b - a) / 2;

		if (c->ends[m] > lo)
			b = m;
		else
			a = m + 1;
	}
	for (uint32_t i = a; lo < hi; i++) {
		uint64_t start = c->ends[i] - c->v[i].len; /* copy i's first byte, end to end */
		uint64_t off = lo - start;
		uint64_t len = (c->ends[i] < hi ? c->ends[i] : hi) - lo;
		char *host = (char *)c->v[i].host + off;
		char *dev = (char *)(uintptr_t)c->v[i].dev + off;

		if (c->h2d)
			kvs_copy_bytes(dev, host, len, c->nt);
		else
			kvs_copy_bytes(host, dev, len, c->nt);
		lo += len;
	}
	if (c->nt)
		kvs_copy_nt_fence(); /* before the part is counted landed */
}

/* Take parts of the current call until none is left (c->mu held; dropped
 * around each copy). */
static void parts_take(struct kvs_copy_crew *c)
{
	while (c->next < c->parts) {
		uint32_t p = c->next++;

		pthread_mutex_unlock(&c->mu);
		part_copy(c, p);
		pthread_mutex_lock(&c->mu);
		if (++c->landed == c->parts)
			pthread_cond_signal(&c->done_cv);
	}
}

static void *helper(void *arg)
{
	struct kvs_copy_crew *c = arg;

	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		parts_take(c);
		if (!c->stop)
			pthread_cond_wait(&c->work_cv, &c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int kvs_copy_crew_open(uint32_t streams, const struct kvs_log *log, struct kvs_copy_crew **out)
{
	struct kvs_copy_crew *c;

	*out = NULL;
	if (streams <= 1)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work_cv, NULL);
	pthread_cond_init(&c->done_cv, NULL);
	c->log = log;
	c->want = streams - 1;
	*out = c;
	return 0;
}

/* Start the helpers not started yet (the caller's thread: they inherit its
 * affinity).  Once one fails, no more are tried. */
static void helpers_start(struct kvs_copy_crew *c)
{
	while (c->helpers < c->want) {
		int rc = pthread_create(&c->thr[c->helpers], NULL, helper, c);

		if (rc) {
			kvs_log_warn(c->log, "copy engine host: copy thread %u of %u not started "
				     "(%s): large copies go on with %u thread(s)", c->helpers + 2,
				     c->want + 1, strerror(rc), c->helpers + 1);
			c->want = c->helpers;
			break;
		}
		pthread_setname_np(c->thr[c->helpers], "kvs-copy");
		c->helpers++;
	}
}

bool kvs_copy_crew_copy(struct kvs_copy_crew *c, const struct kvs_copy_vec v[], uint32_t n,
			bool h2d)
{
	uint64_t total = 0;
	uint32_t parts;

	if (!c)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		if (v[i].len > UINT64_MAX / PARTS_MAX - total)
			return false; /* no real call is that large: copied alone */
		total += v[i].len;
		c->ends[i] = total;
	}
	if (total < KVS_COPY_CREW_MIN_BYTES)
		return false;
	helpers_start(c);
	if (!c->helpers)
		return false;
	parts = (uint32_t)((total + PART_BYTES / 2) / PART_BYTES);
	parts = parts > PARTS_MAX ? PARTS_MAX : parts;
	pthread_mutex_lock(&c->mu);
	c->v = v;
	c->n = n;
	c->h2d = h2d;
	c->total = total;
	c->nt = kvs_copy_nt_wanted(total);
	c->parts = parts;
	c->next = 0;
	c->landed = 0;
	pthread_cond_broadcast(&c->work_cv);
	parts_take(c);
	while (c->landed < c->parts)
		pthread_cond_wait(&c->done_cv, &c->mu);
	c->v = NULL;
	pthread_mutex_unlock(&c->mu);
	return true;
}

void kvs_copy_crew_close(struct kvs_copy_crew *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_broadcast(&c->work_cv);
	pthread_mutex_unlock(&c->mu);
	for (uint32_t i = 0; i < c->helpers; i++)
		pthread_join(c->thr[i], NULL);
	pthread_cond_destroy(&c->done_cv);
	pthread_cond_destroy(&c->work_cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
