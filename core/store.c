/*
 * core/store.c — a rank's store: open and close, tasks (submit, check, wait),
 * lookups and stats.  The pipeline itself runs in two threads, the dispatcher
 * (store_dispatch.c) and the copier (store_copy.c); this file is what callers'
 * threads run and the bookkeeping all three share.
 *
 * A task is one allocation: the task, its shards, their copy segments and the
 * visiting order; nothing is allocated per shard.  Its life:
 *
 *   submit   validated and copied; entered in the task table (at most
 *            waiting_queue_depth not yet reaped, else -EAGAIN at once) and queued
 *            for the dispatcher.
 *   shards   a shard's failure becomes the task's error if it is the first
 *            (kvs_store_sh_error); a shard is done when the last holder of its pin
 *            released it (kvs_store_sh_put), and the task is done when every shard
 *            is: no copy into the caller's tensors is pending and no slot of the
 *            task is pinned any more.  A timed-out task therefore reports only
 *            after its in-flight reads drained (bounded by the backend), and a
 *            caller that sees a task done sees its slots evictable.  (A dump with
 *            dump_wait=cached is counted done once READY: kvs_store_sh_done.)
 *   reap     kvs_store_check / kvs_store_wait report a done task once and drop
 *            the table's reference; the allocation goes with the last reference
 *            (task->live: one per shard release, one for the reap).
 *
 * Task ids carry their table index in the low 16 bits and a sequence number
 * above, so a stale id is -ENOENT, never another task.
 *
 * Locking: one mutex (mu) guards the task table, the dispatcher's queues, the
 * ring and the counts; three condition variables wake the dispatcher, the copier
 * and task waiters (sleeping, never polling).  Per-shard and per-task state
 * touched by two threads is atomic, with its order explained where it is used.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "core/store.h"

#define TASK_IDX_BITS 16u
#define TASK_IDX_MASK ((UINT64_C(1) << TASK_IDX_BITS) - 1)
/* Largest task: bounds the one allocation and the 32-bit shard counts. */
#define TASK_SHARDS_MAX (1u << 20)

_Static_assert(KVS_STORE_WAITING_QD_MAX <= TASK_IDX_MASK + 1, "task index fits its bits");
_Static_assert(sizeof(struct kvs_shm_store_stats) ==
		       offsetof(struct kvs_store_stats, register_ms_per_gib),
	       "shared store counters mirror struct kvs_store_stats (up to its derived fields)");

/* ------------------------------------------------------------------------ */
/* Shards and tasks                                                          */

static void task_unref(struct kvs_store_task *t)
{
	/* acq_rel: every use of the task by the other holders happens before the free */
	if (atomic_fetch_sub_explicit(&t->live, 1, memory_order_acq_rel) == 1)
		free(t);
}

static uint32_t lat_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	uint32_t b = us < 2 ? 0 : (uint32_t)(63 - __builtin_clzll(us));

	return b < KVS_STORE_LAT_BUCKETS ? b : KVS_STORE_LAT_BUCKETS - 1;
}

static void task_complete(struct kvs_store *s, struct kvs_store_task *t)
{
	uint64_t now = kvs_now_ns();
	/* acquire: pairs with the release CAS of kvs_store_sh_error (the error is
	 * final once pending reached 0) */
	int err = atomic_load_explicit(&t->error, memory_order_acquire);

	KVS_STORE_COUNT(s, task_lat_us[lat_bucket(now - t->submit_ns)], 1);
	if (err)
		KVS_STORE_COUNT(s, tasks_failed, 1);
	if (err == -ETIMEDOUT)
		KVS_STORE_COUNT(s, tasks_timedout, 1);
	pthread_mutex_lock(&s->mu);
	t->done = true;
	s->active--;
	pthread_cond_broadcast(&s->done_cv);
	if (s->stop) { /* the threads exit when nothing is active */
		pthread_cond_signal(&s->disp_cv);
		pthread_cond_signal(&s->copier_cv);
	}
	pthread_mutex_unlock(&s->mu);
}

void kvs_store_sh_error(struct kvs_store_sh *sh, int err)
{
	int zero = 0;

	/* release: pairs with task_complete's acquire (after pending reached 0) */
	if (err)
		atomic_compare_exchange_strong_explicit(&sh->task->error, &zero, err,
							memory_order_release, memory_order_relaxed);
}

void kvs_store_sh_done(struct kvs_store *s, struct kvs_store_sh *sh)
{
	struct kvs_store_task *t = sh->task;

	/* acq_rel: exactly one caller counts a shard */
	if (atomic_exchange_explicit(&sh->finished, 1, memory_order_acq_rel))
		return;
	/* acq_rel: the last shard's counter sees every earlier shard's error */
	if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
		task_complete(s, t);
}

void kvs_store_sh_put(struct kvs_store *s, struct kvs_store_sh *sh)
{
	struct kvs_store_task *t = sh->task;
	int rc;

	/* acq_rel: the other holder's use of the slot happens before the release */
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (sh->flags & KVS_SH_GOT) {
		rc = kvs_slot_release(s->cache, &sh->slot);
		if (rc)
			kvs_log_error(&s->log, "store: releasing slot %u of shard %u: %s",
				      sh->slot.index, sh->shard, kvs_strerror(rc));
	}
	kvs_store_sh_done(s, sh);
	task_unref(t);
}

void kvs_store_handoff(struct kvs_store *s, struct kvs_store_sh *sh, uint32_t op)
{
	sh->io_op = op;
	pthread_mutex_lock(&s->mu);
	sh->io_next = s->handoff;
	s->handoff = sh;
	pthread_cond_signal(&s->disp_cv);
	pthread_mutex_unlock(&s->mu);
}

/* The order a rank visits a task's n shards: rotated (rank r starts at slice r
 * and strides by local_rank_size, then the next start) or natural.  A dump
 * visits every block's shard 0 first (in that order among themselves): who
 * owns shard 0 decides who writes the block, and a later shard of the block
 * must know it (store_dispatch.c, "Dump writers"). */
static void visiting_order(const struct kvs_store *s, struct kvs_store_task *t)
{
	uint32_t n = t->n, k = 0, lrs = s->lrs;
	bool natural = s->cfg.dispatch_order == KVS_DISPATCH_NATURAL || lrs <= 1;

	for (int pass = t->op == KVS_STORE_OP_DUMP ? 0 : 1; pass < 2; pass++) {
		for (uint32_t j = 0; j < (natural ? 1 : lrs); j++) {
			uint32_t first = natural ? 0 : (s->rank_slice + j) % lrs;

			for (uint32_t i = first; i < n; i += natural ? 1 : lrs)
				if (t->op != KVS_STORE_OP_DUMP || (pass == 0) == (t->sh[i].shard == 0))
					t->order[k++] = i;
		}
	}
}

/* A tensor's copy segment, or -EINVAL: [offset, offset + len) of the stored
 * tensor i (len 0: to its end); whole: a dump (no head slices). */
static int tensor_seg(const struct kvs_store *s, uint32_t i, const struct kvs_store_tensor *tn,
		      bool whole, struct kvs_copy_seg *seg)
{
	uint64_t size = s->tensor_bytes[i];
	uint64_t len = tn->len ? tn->len : size - (tn->offset <= size ? tn->offset : size);

	if (tn->offset > size || len == 0 || len > size - tn->offset)
		return -EINVAL;
	if (whole && (tn->offset != 0 || len != size))
		return -EINVAL;
	seg->host_off = s->tensor_off[i] + tn->offset;
	seg->dev = tn->addr;
	seg->len = len;
	return 0;
}

/* Allocate and fill a task: shards (load, dump) or every shard of blocks
 * (prefetch). */
static int task_build(struct kvs_store *s, uint32_t op, const struct kvs_store_shard *shards,
		      const struct kvs_block_id *blocks, uint32_t n, struct kvs_store_task **out)
{
	uint32_t nsh = op == KVS_STORE_OP_PREFETCH ? n * s->spb : n;
	uint32_t nseg = op == KVS_STORE_OP_PREFETCH ? 0 : n * s->tensor_count;
	size_t bytes = sizeof(struct kvs_store_task) + (size_t)nsh * sizeof(struct kvs_store_sh) +
		       (size_t)nseg * sizeof(struct kvs_copy_seg) + (size_t)nsh * sizeof(uint32_t);
	struct kvs_store_task *t;
	struct kvs_copy_seg *seg;

	if (n == 0 || n > TASK_SHARDS_MAX || (op == KVS_STORE_OP_PREFETCH && !blocks) ||
	    (op != KVS_STORE_OP_PREFETCH && !shards) ||
	    (op == KVS_STORE_OP_PREFETCH && (uint64_t)n * s->spb > TASK_SHARDS_MAX))
		return -EINVAL;
	t = calloc(1, bytes);
	if (!t)
		return -ENOMEM;
	seg = (struct kvs_copy_seg *)&t->sh[nsh];
	t->order = (uint32_t *)&seg[nseg];
	t->op = op;
	t->n = nsh;
	for (uint32_t i = 0; i < nsh; i++) {
		struct kvs_store_sh *sh = &t->sh[i];

		sh->task = t;
		atomic_init(&sh->refs, 1);
		atomic_init(&sh->io_result, KVS_SH_IO_PENDING);
		if (op == KVS_STORE_OP_PREFETCH) {
			sh->block = blocks[i / s->spb];
			sh->shard = i % s->spb;
			continue;
		}
		const struct kvs_store_shard *in = &shards[i];

		if (in->shard >= s->spb || in->tensor_count != s->tensor_count || !in->tensors)
			goto inval;
		sh->block = in->block;
		sh->shard = in->shard;
		sh->segs = seg;
		sh->nseg = s->tensor_count;
		for (uint32_t k = 0; k < s->tensor_count; k++)
			if (tensor_seg(s, k, &in->tensors[k], op == KVS_STORE_OP_DUMP, seg++))
				goto inval;
	}
	visiting_order(s, t);
	atomic_init(&t->pending, nsh);
	atomic_init(&t->live, nsh + 1);
	t->copier_left = nsh;
	*out = t;
	return 0;
inval:
	free(t);
	return -EINVAL;
}

static int task_submit(struct kvs_store *s, uint32_t op, const struct kvs_store_shard *shards,
		       const struct kvs_block_id *blocks, uint32_t n, void *event, uint64_t *id)
{
	struct kvs_store_task *t = NULL;
	uint32_t idx;
	int rc;

	if (id)
		*id = 0;
	if (!s || !id)
		return -EINVAL;
	if (!s->threads)
		return -EOPNOTSUPP;
	if (event && op != KVS_STORE_OP_DUMP)
		return -EINVAL;
	rc = task_build(s, op, shards, blocks, n, &t);
	if (rc)
		return rc;
	t->event = event;
	t->submit_ns = kvs_now_ns();
	t->deadline_ns = kvs_deadline_after(s->cfg.timeout_ns);
	pthread_mutex_lock(&s->mu);
	if (s->stop || s->outstanding >= s->cfg.waiting_queue_depth) {
		pthread_mutex_unlock(&s->mu);
		free(t);
		return s->stop ? -ESHUTDOWN : -EAGAIN;
	}
	for (idx = 0; s->tasks[idx]; idx++)
		;
	t->id = ++s->seq << TASK_IDX_BITS | idx;
	s->tasks[idx] = t;
	s->outstanding++;
	s->active++;
	if (s->q_tail)
		s->q_tail->next = t;
	else
		s->q_head = t;
	s->q_tail = t;
	pthread_cond_signal(&s->disp_cv);
	pthread_mutex_unlock(&s->mu);
	*id = t->id;
	if (op == KVS_STORE_OP_LOAD)
		KVS_STORE_COUNT(s, tasks_load, 1);
	else if (op == KVS_STORE_OP_DUMP)
		KVS_STORE_COUNT(s, tasks_dump, 1);
	else
		KVS_STORE_COUNT(s, tasks_prefetch, 1);
	return 0;
}

KVS_API int kvs_store_load(struct kvs_store *s, const struct kvs_store_shard *shards, uint32_t n,
			   uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_LOAD, shards, NULL, n, NULL, task);
}

KVS_API int kvs_store_dump(struct kvs_store *s, const struct kvs_store_shard *shards, uint32_t n,
			   void *cuda_event, uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_DUMP, shards, NULL, n, cuda_event, task);
}

KVS_API int kvs_store_prefetch(struct kvs_store *s, const struct kvs_block_id *blocks, uint32_t n,
			       uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_PREFETCH, NULL, blocks, n, NULL, task);
}

/* Under mu: the task of id, or NULL. */
static struct kvs_store_task *task_find(struct kvs_store *s, uint64_t id)
{
	uint64_t idx = id & TASK_IDX_MASK;

	if (idx >= s->cfg.waiting_queue_depth || !s->tasks[idx] || s->tasks[idx]->id != id)
		return NULL;
	return s->tasks[idx];
}

/* Under mu, t done: report and reap it (mu is dropped). */
static int task_reap(struct kvs_store *s, struct kvs_store_task *t)
{
	/* acquire: pairs with kvs_store_sh_error's release (done was set after) */
	int rc = atomic_load_explicit(&t->error, memory_order_acquire);

	s->tasks[t->id & TASK_IDX_MASK] = NULL;
	s->outstanding--;
	pthread_mutex_unlock(&s->mu);
	task_unref(t);
	return rc;
}

KVS_API int kvs_store_check(struct kvs_store *s, uint64_t id)
{
	struct kvs_store_task *t;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	t = task_find(s, id);
	if (!t || !t->done) {
		pthread_mutex_unlock(&s->mu);
		return t ? 1 : -ENOENT;
	}
	return task_reap(s, t);
}

KVS_API int kvs_store_wait(struct kvs_store *s, uint64_t id, uint64_t timeout_ns)
{
	struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(timeout_ns));
	struct kvs_store_task *t;

	if (!s)
		return -EINVAL;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		t = task_find(s, id);
		if (!t) {
			pthread_mutex_unlock(&s->mu);
			return -ENOENT;
		}
		if (t->done)
			return task_reap(s, t);
		if (pthread_cond_timedwait(&s->done_cv, &s->mu, &ts) == ETIMEDOUT && !t->done) {
			pthread_mutex_unlock(&s->mu);
			return 1;
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Lookups and stats                                                         */

KVS_API int kvs_store_lookup(struct kvs_store *s, const struct kvs_block_id *blocks, size_t n,
			     bool *hits)
{
	int rc;

	if (!s || (n && (!blocks || !hits)))
		return -EINVAL;
	rc = kvs_cache_lookup(s->cache, blocks, n, KVS_ALL_SHARDS, hits);
	if (rc < 0 || rc == (int)n)
		return rc;
	/* The blocks the cache lacks (hits[i] false), in one backend round trip
	 * where the backend batches (redis). */
	return kvs_backend_lookup_batch(s->backend, blocks, n, 0, hits);
}

KVS_API int kvs_store_lookup_prefix(struct kvs_store *s, const struct kvs_block_id *blocks,
				    size_t n)
{
	bool *hits;
	int rc;
	size_t i;

	if (!s || (n && !blocks) || n > INT32_MAX)
		return -EINVAL;
	rc = kvs_cache_lookup_prefix(s->cache, blocks, n, KVS_ALL_SHARDS);
	if (rc < 0 || rc == (int)n)
		return rc;
	i = (size_t)rc;
	hits = calloc(n - i, sizeof(*hits));
	if (!hits)
		return -ENOMEM;
	rc = kvs_backend_lookup_batch(s->backend, blocks + i, n - i, KVS_BACKEND_LOOKUP_PREFIX,
				      hits);
	free(hits);
	return rc < 0 ? rc : (int)i + rc;
}

static void add_store_stats(struct kvs_store_stats *o, struct kvs_shm_store_stats *st)
{
	uint64_t *dst = (uint64_t *)o;
	_Atomic uint64_t *src = (_Atomic uint64_t *)st;

	for (size_t k = 0; k < sizeof(*st) / sizeof(uint64_t); k++)
		/* relaxed: statistics */
		dst[k] += atomic_load_explicit(&src[k], memory_order_relaxed);
}

/* Has the rank of st registered everything it registers?  (Racy, like every
 * counter.) */
static bool rank_registered(struct kvs_shm_store_stats *st)
{
	/* relaxed: statistics */
	uint64_t total = atomic_load_explicit(&st->register_total_bytes, memory_order_relaxed);

	return total && atomic_load_explicit(&st->registered_bytes, memory_order_relaxed) >= total;
}

KVS_API int kvs_store_stats(struct kvs_store *s, int rank, struct kvs_store_stats *o)
{
	struct kvs_cache *c;

	if (!s || !o || rank < KVS_STATS_NODE || rank >= (int)KVS_MAX_RANKS)
		return -EINVAL;
	c = s->cache;
	memset(o, 0, sizeof(*o));
	if (rank == KVS_STATS_NODE) {
		uint32_t live = 0, ready = 0;

		add_store_stats(o, &c->hdr->departed.store);
		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
			struct kvs_shm_rank *e = &c->ranks[r];

			add_store_stats(o, &e->stats.store);
			/* Ready: every live GPU rank (a dead one's registration died with
			 * it).  relaxed: the epoch is rechecked by kvs_core_rank_alive
			 * after its acquire of the entry's state (device_id with it). */
			if (!kvs_core_rank_alive(c, r, atomic_load_explicit(&e->epoch,
									 memory_order_relaxed)) ||
			    e->device_id < 0)
				continue;
			live++;
			ready += rank_registered(&e->stats.store);
		}
		o->ready = live && ready == live;
	} else {
		add_store_stats(o, &c->ranks[rank].stats.store);
		o->ready = rank_registered(&c->ranks[rank].stats.store);
	}
	if (o->registered_bytes)
		o->register_ms_per_gib = (double)o->register_ns / 1e6 /
					 ((double)o->registered_bytes / (double)(UINT64_C(1) << 30));
	return 0;
}

KVS_API struct kvs_cache *kvs_store_cache(struct kvs_store *s)
{
	return s ? s->cache : NULL;
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                            */

/* The copy engine; the data plane is registered with it in the background
 * (store_register.c). */
static int copy_open(struct kvs_store *s)
{
	struct kvs_copy_opts o = {
		.kind = s->cfg.copy_engine == KVS_COPY_ENGINE_HOST ? KVS_COPY_HOST : KVS_COPY_CUDA,
		.device_id = s->cfg.cache.device_id,
		.streams = s->cfg.cache_stream_number,
		.log = &s->log,
		.register_delay_ns = s->cfg.register_delay_ns,
	};
	int rc = kvs_copy_open(&o, &s->copy);

	if (rc) {
		kvs_log_error(&s->log, "store: copy_engine %s on device %d: %s%s",
			      o.kind == KVS_COPY_HOST ? "host" : "cuda", o.device_id, kvs_strerror(rc),
			      o.kind == KVS_COPY_CUDA ? " (no CUDA device: set copy_engine=host)" : "");
		return rc == -EOPNOTSUPP ? -ENODEV : rc;
	}
	return kvs_store_register_start(s);
}

static int backend_open(struct kvs_store *s)
{
	struct kvs_cache *c = s->cache;
	struct kvs_backend_buffer bufs[KVS_MAX_SEGS];
	int rc;

	/* The cache's geometry is the truth (an attacher takes the creator's). */
	s->cfg.backend.shard_bytes = c->slot_bytes;
	s->cfg.backend.shards_per_block = c->shards_per_block;
	s->fault_inner.shard_bytes = c->slot_bytes;
	s->fault_inner.shards_per_block = c->shards_per_block;
	rc = kvs_backend_open(&s->cfg.backend, &s->backend);
	if (rc) {
		kvs_log_error(&s->log, "store: opening the backend: %s", kvs_strerror(rc));
		return rc;
	}
	if (c->cfg.device_id < 0)
		return 0;
	for (uint32_t i = 0; i < c->seg_count; i++)
		bufs[i] = (struct kvs_backend_buffer){ .base = c->segs[i].base, .len = c->segs[i].bytes };
	rc = kvs_backend_register_buffers(s->backend, bufs, c->seg_count);
	if (rc)
		kvs_log_warn(&s->log, "store: data segments not registered with the backend "
			     "(transfers are not zero-copy): %s", kvs_strerror(rc));
	return 0;
}

static void tensor_table(struct kvs_store *s)
{
	const struct kvs_cache_config *cc = &s->cache->cfg;
	uint64_t off = 0;

	s->tensor_count = cc->tensor_count ? cc->tensor_count : 1;
	for (uint32_t i = 0; i < s->tensor_count; i++) {
		s->tensor_bytes[i] = cc->tensor_count ? cc->tensor_bytes[i] : s->slot_bytes;
		s->tensor_off[i] = off;
		off += s->tensor_bytes[i];
	}
}

static int thread_start(struct kvs_store *s, pthread_t *thr, void *(*fn)(void *), const char *name)
{
	cpu_set_t set;
	bool pin = false;
	int rc = pthread_create(thr, NULL, fn, s);

	if (rc)
		return -rc;
	pthread_setname_np(*thr, name);
	CPU_ZERO(&set);
	for (uint32_t cpu = 0; cpu < KVS_STORE_MAX_CPUS && cpu < CPU_SETSIZE; cpu++) {
		if (s->cfg.cpu_affinity[cpu / 64] >> (cpu % 64) & 1) {
			CPU_SET(cpu, &set);
			pin = true;
		}
	}
	if (pin && (rc = pthread_setaffinity_np(*thr, sizeof(set), &set)))
		kvs_log_warn(&s->log, "store: %s not pinned to cpu_affinity_cores: %s", name,
			     kvs_strerror(-rc));
	return 0;
}

static int sync_init(struct kvs_store *s)
{
	pthread_condattr_t ca;
	int rc;

	rc = pthread_mutex_init(&s->mu, NULL);
	if (rc)
		return -rc;
	pthread_condattr_init(&ca);
	/* kvs_store_wait's deadline is CLOCK_MONOTONIC like every other */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->disp_cv, &ca);
	pthread_cond_init(&s->copier_cv, &ca);
	pthread_cond_init(&s->done_cv, &ca);
	pthread_cond_init(&s->reg_cv, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

static int threads_start(struct kvs_store *s)
{
	int rc;

	s->ring_cap = s->cfg.running_queue_depth;
	s->ring = calloc(s->ring_cap, sizeof(*s->ring));
	s->tasks = calloc(s->cfg.waiting_queue_depth, sizeof(*s->tasks));
	s->claims = calloc(KVS_STORE_CLAIMS_MAX, sizeof(*s->claims));
	if (!s->ring || !s->tasks || !s->claims)
		return -ENOMEM;
	rc = thread_start(s, &s->disp_thr, kvs_store_dispatcher, "kvs-dispatch");
	if (rc)
		return rc;
	rc = thread_start(s, &s->copier_thr, kvs_store_copier, "kvs-copier");
	if (rc) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		s->copier_done = true; /* never started: the dispatcher may exit */
		pthread_cond_signal(&s->disp_cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->disp_thr, NULL);
		return rc;
	}
	s->threads = true;
	return 0;
}

KVS_API int kvs_store_open(const struct kvs_store_config *cfg, struct kvs_store **out)
{
	struct kvs_store *s;
	struct kvs_log log;
	int rc;

	if (out)
		*out = NULL;
	if (!cfg || !out)
		return -EINVAL;
	log = (struct kvs_log){ .fn = cfg->log, .arg = cfg->log_arg };
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->log = log;
	rc = kvs_store_config_resolve(cfg, &s->cfg, &s->fault_inner, &log);
	if (!rc)
		rc = sync_init(s);
	if (rc) {
		free(s);
		return rc;
	}
	rc = kvs_cache_open(&s->cfg.cache, &s->cache);
	if (rc)
		goto fail;
	s->st = &s->cache->me->stats.store;
	s->spb = s->cache->shards_per_block;
	s->slot_bytes = s->cache->slot_bytes;
	s->lrs = s->cache->local_rank_size;
	tensor_table(s);
	rc = backend_open(s);
	if (rc)
		goto fail;
	if (s->cfg.cache.device_id >= 0) {
		s->rank_slice = (uint32_t)s->cfg.cache.device_id % s->lrs;
		rc = copy_open(s);
		if (!rc)
			rc = threads_start(s);
		if (rc)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	kvs_store_close(s);
	return rc;
}

KVS_API void kvs_store_close(struct kvs_store *s)
{
	if (!s)
		return;
	/* The registration thread stops before its next chunk. */
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_mutex_unlock(&s->mu);
	if (s->threads) {
		/* Drain: the threads exit once no task is active (each bounded by its
		 * deadline) and no transfer is in flight. */
		pthread_mutex_lock(&s->mu);
		pthread_cond_signal(&s->disp_cv);
		pthread_cond_signal(&s->copier_cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->disp_thr, NULL);
		pthread_join(s->copier_thr, NULL);
		for (uint32_t i = 0; i < s->cfg.waiting_queue_depth; i++)
			if (s->tasks[i])
				task_unref(s->tasks[i]);
	}
	if (s->copy) {
		/* Nothing copies any more: unregister (this process only). */
		kvs_store_register_stop(s);
		kvs_copy_close(s->copy);
	}
	/* The dispatcher closed the backend it issued on; a watcher's is ours. */
	kvs_backend_close(s->backend);
	kvs_cache_close(s->cache);
	free(s->claims);
	free(s->tasks);
	free(s->ring);
	pthread_cond_destroy(&s->reg_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->copier_cv);
	pthread_cond_destroy(&s->disp_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
