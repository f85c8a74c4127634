/*
 * core/store.c — a rank's store: open and close, tasks (submit, check, wait),
 * lookups and stats, and the hand-offs between its two threads, the dispatcher
 * (store_dispatch.c) and the copier (store_copy.c, store_dump.c).
 *
 * A task is one allocation: the task, its shards, their copy segments and the
 * visiting order; nothing is allocated per shard.  Its life:
 *
 *   submit   validated and copied; entered in the task table (at most
 *            waiting_queue_depth not yet reaped, else -EAGAIN at once) and queued
 *            for the dispatcher.
 *   shards   each shard is *finished* once (kvs_store_sh_done: its outcome, the
 *            first error becoming the task's) and *released* once (the last
 *            holder of its pin drops it, kvs_store_sh_put).  The task is done
 *            when every shard is finished: a load's shard finishes after the
 *            sync that made its copy land, and normally after its pin is gone;
 *            one that missed its deadline finishes at the deadline, while a read
 *            it owns still drains into the cache (its pin held until then, and
 *            the task's memory with it: task->live).
 *   reap     kvs_store_check / kvs_store_wait report a done task once and drop
 *            the table's reference; the allocation goes with the last reference.
 *
 * Task ids carry their table index in the low 16 bits and a sequence number
 * above, so a stale id is -ENOENT, never another task.
 *
 * Locking: one mutex (mu) guards the task table, the hand-off lists, the ring
 * and the counts.  Task waiters and an idle copier sleep on condition variables;
 * the dispatcher sleeps in epoll on its eventfd (wake_fd) and the backend's wait
 * descriptor.  Per-shard and per-task state touched by two threads is atomic,
 * with its order explained where it is used.
 *
 * Close is bounded: new tasks are refused, running ones end by their deadlines
 * (each reports then, transfers or not), and the threads are given timeout_ns
 * more to drain transfers still in flight.  If one outlives that (a hung mount),
 * close returns anyway: the threads finish draining on their own and the last
 * one tears the store down (kvs_store_thread_exit); the slots of that transfer
 * stay pinned until it ends, and from close's return they log nothing (the
 * caller's callbacks sit behind a gate that close shuts).  A process that exits
 * meanwhile (exit(), a return from main, not _exit) gives such stores up to
 * timeout_ns more before it goes (an atexit handler): a transfer that lands
 * then lets the store detach and, as the node's last rank, remove the cache,
 * instead of leaving it stale.  In a fork()ed child, close frees the child's copy
 * of the memory only (the threads and the backend are the parent's).
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
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
	KVS_STORE_COUNT(s, task_lat_ns_sum, now - t->submit_ns);
	if (err)
		KVS_STORE_COUNT(s, tasks_failed, 1);
	if (err == -ETIMEDOUT)
		KVS_STORE_COUNT(s, tasks_timedout, 1);
	bool stop;

	pthread_mutex_lock(&s->mu);
	t->done = true;
	s->active--;
	stop = s->stop;
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
	if (stop) { /* the threads exit when nothing is left */
		kvs_store_wake_dispatcher(s);
		kvs_store_wake_copier(s);
	}
}

void kvs_store_sh_error(struct kvs_store_sh *sh, int err)
{
	int zero = 0;

	/* release: pairs with task_complete's acquire (after pending reached 0) */
	if (err)
		atomic_compare_exchange_strong_explicit(&sh->task->error, &zero, err,
							memory_order_release, memory_order_relaxed);
}

void kvs_store_sh_done(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	struct kvs_store_task *t = sh->task;

	/* acq_rel: exactly one caller counts a shard */
	if (atomic_exchange_explicit(&sh->finished, 1, memory_order_acq_rel))
		return;
	kvs_store_sh_error(sh, err);
	/* acq_rel: the last shard's counter sees every earlier shard's error */
	if (atomic_fetch_sub_explicit(&t->pending, 1, memory_order_acq_rel) == 1)
		task_complete(s, t);
}

/* A release whose bucket lock was not had within the copier's short wait (a
 * peer holds it, stopped?): kept, and tried again by kvs_store_release_retry.
 * false: no memory (the release is lost: the pin stays until close). */
static bool release_later(struct kvs_store *s, const struct kvs_slot *slot, bool task)
{
	if (s->nrel_later == s->rel_later_cap) {
		uint32_t cap = s->rel_later_cap ? 2 * s->rel_later_cap : 16;
		struct kvs_store_release *v = realloc(s->rel_later, cap * sizeof(*v));

		if (!v)
			return false;
		s->rel_later = v;
		s->rel_later_cap = cap;
	}
	s->rel_later[s->nrel_later++] = (struct kvs_store_release){ *slot, task };
	return true;
}

bool kvs_store_release_retry(struct kvs_store *s)
{
	uint32_t n = s->nrel_later;

	s->nrel_later = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_store_release r = s->rel_later[i];

		kvs_store_release(s, &r.slot, r.task); /* kept again (below i) while not had */
	}
	return s->nrel_later < n;
}

void kvs_store_release(struct kvs_store *s, struct kvs_slot *slot, bool task)
{
	bool blocked;
	int rc = kvs_slot_release(s->cache, slot);

	if (rc == -ETIMEDOUT && release_later(s, slot, task))
		return; /* still pinned (a task's: in the budget too) until had */
	if (rc)
		kvs_log_error(&s->log, "store: releasing a slot: %s", kvs_strerror(rc));
	if (!task)
		return;
	/* relaxed: a budget (the dispatcher re-reads it after its wake) */
	atomic_fetch_sub_explicit(&s->pins, 1, memory_order_relaxed);
	pthread_mutex_lock(&s->mu);
	blocked = s->disp_blocked;
	pthread_mutex_unlock(&s->mu);
	if (blocked)
		kvs_store_wake_dispatcher(s);
}

bool kvs_store_sh_put(struct kvs_store *s, struct kvs_store_sh *sh)
{
	struct kvs_store_task *t = sh->task;

	/* acq_rel: the other holder's use of the slot happens before the release */
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) != 1)
		return false;
	if (sh->flags & KVS_SH_GOT) {
		sh->flags &= ~KVS_SH_GOT;
		kvs_store_release(s, &sh->slot, true);
	}
	kvs_store_sh_done(s, sh, 0);
	task_unref(t);
	return true;
}

void kvs_store_sh_finish(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	/* The error first, then the release, then done: a task reported done has
	 * its slots released, unless a read still drains into one -- then the
	 * shard is done now and the read's holder releases it later (only the
	 * copier runs this, and only it takes such a late release: no race). */
	kvs_store_sh_error(sh, err);
	if (!kvs_store_sh_put(s, sh))
		kvs_store_sh_done(s, sh, err);
}

/* ---- hand-offs between the threads ---- */

void kvs_store_wake_dispatcher(struct kvs_store *s)
{
	uint64_t one = 1;

	/* an eventfd counter: a failed write means it is at its maximum, awake */
	if (write(s->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		kvs_log_debug(&s->log, "store: dispatcher wake: %s", kvs_strerror(-errno));
}

void kvs_store_wake_copier(struct kvs_store *s)
{
	kvs_wait_bump(&s->copier_bell);
	pthread_mutex_lock(&s->mu);
	pthread_cond_signal(&s->copier_cv);
	pthread_mutex_unlock(&s->mu);
}

void kvs_store_handoff_read(struct kvs_store *s, struct kvs_store_sh *sh)
{
	pthread_mutex_lock(&s->mu);
	sh->next = s->reads_in;
	s->reads_in = sh;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_dispatcher(s);
}

void kvs_store_handoff_revisit(struct kvs_store *s, struct kvs_store_sh *sh)
{
	pthread_mutex_lock(&s->mu);
	sh->next = s->revisit_in;
	s->revisit_in = sh;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_dispatcher(s);
}

void kvs_store_handoff_job(struct kvs_store *s, struct kvs_store_job *job)
{
	pthread_mutex_lock(&s->mu);
	job->next = s->jobs_in;
	s->jobs_in = job;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_dispatcher(s);
}

void kvs_store_handoff_release(struct kvs_store *s, struct kvs_store_sh *sh)
{
	pthread_mutex_lock(&s->mu);
	sh->next = s->release_in;
	s->release_in = sh;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_copier(s);
}

void kvs_store_handoff_job_done(struct kvs_store *s, struct kvs_store_job *job)
{
	pthread_mutex_lock(&s->mu);
	job->next = s->jobs_done;
	s->jobs_done = job;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_copier(s);
}

/* The order a rank visits a task's n shards: rotated (rank r starts at slice r
 * and strides by local_rank_size, then the next start) or natural. */
static void visiting_order(const struct kvs_store *s, struct kvs_store_task *t)
{
	uint32_t n = t->n, k = 0, lrs = s->lrs;
	bool natural = s->cfg.dispatch_order == KVS_DISPATCH_NATURAL || lrs <= 1;

	for (uint32_t j = 0; j < (natural ? 1 : lrs); j++) {
		uint32_t first = natural ? 0 : (s->rank_slice + j) % lrs;

		for (uint32_t i = first; i < n; i += natural ? 1 : lrs)
			t->order[k++] = i;
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
		atomic_init(&sh->rd.result, KVS_XFER_PENDING);
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
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_dispatcher(s);
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
	/* Past the cache's prefix, a block may be in the cache or the backend, as
	 * for kvs_store_lookup: ask the cache first, the backend for the rest. */
	i = (size_t)rc;
	hits = calloc(n - i, sizeof(*hits));
	if (!hits)
		return -ENOMEM;
	rc = kvs_cache_lookup(s->cache, blocks + i, n - i, KVS_ALL_SHARDS, hits);
	if (rc >= 0)
		rc = kvs_backend_lookup_batch(s->backend, blocks + i, n - i,
					      KVS_BACKEND_LOOKUP_PREFIX, hits);
	free(hits);
	return rc < 0 ? rc : (int)i + rc;
}

/* Add entry counters st, less base (NULL: none), to o (the shared counters
 * mirror the public struct up to its derived fields). */
static void add_store_stats(struct kvs_store_stats *o, struct kvs_shm_store_stats *st,
			    struct kvs_shm_store_stats *base)
{
	uint64_t *dst = (uint64_t *)o;
	_Atomic uint64_t *src = (_Atomic uint64_t *)st, *b = (_Atomic uint64_t *)base;

	for (size_t k = 0; k < sizeof(*st) / sizeof(uint64_t); k++)
		dst[k] += kvs_core_stat_since(&src[k], b ? &b[k] : NULL);
}

/* Has the rank attached to entry e registered everything it registers?  (Its
 * own counts: the entry's less its base.  Racy, like every counter.) */
static bool rank_registered(struct kvs_shm_rank *e)
{
	struct kvs_store_stats mine;

	memset(&mine, 0, sizeof(mine));
	add_store_stats(&mine, &e->stats.store, &e->base.store);
	return mine.register_total_bytes && mine.registered_bytes >= mine.register_total_bytes;
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

		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
			struct kvs_shm_rank *e = &c->ranks[r];

			add_store_stats(o, &e->stats.store, NULL); /* departed ranks' too */
			/* Ready: every live GPU rank (a dead one's registration died with
			 * it).  relaxed: the epoch is rechecked by kvs_core_rank_alive
			 * after its acquire of the entry's state (device_id with it). */
			if (!kvs_core_rank_alive(c, r, atomic_load_explicit(&e->epoch,
									 memory_order_relaxed)) ||
			    e->device_id < 0)
				continue;
			live++;
			ready += rank_registered(e);
		}
		o->ready = ready == live; /* no live GPU rank: nothing left to register */
	} else {
		add_store_stats(o, &c->ranks[rank].stats.store, &c->ranks[rank].base.store);
		o->ready = rank_registered(&c->ranks[rank]);
	}
	if (o->registered_bytes)
		o->register_ms_per_gib = (double)o->register_ns / 1e6 /
					 ((double)o->registered_bytes / (double)(UINT64_C(1) << 30));
	return 0;
}

KVS_API int kvs_store_copy_engine(struct kvs_store *s)
{
	if (!s)
		return -EINVAL;
	return s->copy ? (int)s->copy_kind : -EOPNOTSUPP;
}

KVS_API struct kvs_cache *kvs_store_cache(struct kvs_store *s)
{
	return s ? s->cache : NULL;
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                            */

/*
 * The copy engine, opened before the cache exists (an engine that cannot work
 * must not cost a pre-fault of the data plane first).  copy_engine=auto takes
 * CUDA when a device is usable and the host engine otherwise, said once at
 * INFO.  The data plane is registered with it later, in the background
 * (store_register.c).
 */
static int copy_open(struct kvs_store *s)
{
	uint32_t want = s->cfg.copy_engine;
	struct kvs_copy_opts o = {
		.kind = want == KVS_COPY_ENGINE_HOST ? KVS_COPY_HOST : KVS_COPY_CUDA,
		.device_id = s->cfg.cache.device_id,
		.streams = s->cfg.cache_stream_number,
		.log = want == KVS_COPY_ENGINE_AUTO ? NULL : &s->log,
		.register_delay_ns = s->cfg.register_delay_ns,
		.land_delay_ns = s->cfg.copy_land_delay_ns,
	};
	int rc = kvs_copy_open(&o, &s->copy);

	if (rc && want == KVS_COPY_ENGINE_AUTO && (rc == -ENODEV || rc == -EOPNOTSUPP)) {
		kvs_log_info(&s->log, "store: copy_engine=auto: no usable CUDA device %d (%s): "
				      "the host engine copies (device addresses are host pointers)",
			     o.device_id, kvs_strerror(rc));
		o.kind = KVS_COPY_HOST;
		o.log = &s->log;
		rc = kvs_copy_open(&o, &s->copy);
	}
	if (rc) {
		kvs_log_error(&s->log, "store: copy_engine=%s on device %d: %s%s",
			      o.kind == KVS_COPY_HOST ? "host" : "cuda", o.device_id, kvs_strerror(rc),
			      o.kind == KVS_COPY_CUDA ? " (no usable CUDA device: set copy_engine=host "
							"or auto)" : "");
		return rc == -EOPNOTSUPP ? -ENODEV : rc;
	}
	s->copy_kind = o.kind == KVS_COPY_HOST ? KVS_COPY_ENGINE_HOST : KVS_COPY_ENGINE_CUDA;
	return 0;
}

/* The geometry the backend stores with every block: the cache's once it is
 * open (an attacher takes the creator's), the configuration's before. */
static void tensor_table(struct kvs_store *s, const struct kvs_cache_config *cc)
{
	uint64_t off = 0;

	s->slot_bytes = cc->slot_bytes;
	s->spb = cc->shards_per_block;
	s->tensor_count = cc->tensor_count ? cc->tensor_count : 1;
	for (uint32_t i = 0; i < s->tensor_count; i++) {
		s->tensor_bytes[i] = cc->tensor_count ? cc->tensor_bytes[i] : s->slot_bytes;
		s->tensor_off[i] = off;
		off += s->tensor_bytes[i];
	}
}

/*
 * Open the backend for the geometry of tensor_table().  Called before the
 * cache exists, so a missing root, a root that is not writable, a Redis that
 * refuses the password are errors before any pre-fault; and once more after
 * the cache opened when it brought another geometry (a watcher that gave none).
 */
static int backend_open(struct kvs_store *s)
{
	struct kvs_backend_info info;
	int rc;

	kvs_backend_close(s->backend);
	s->backend = NULL;
	s->cfg.backend.shard_bytes = s->slot_bytes;
	s->cfg.backend.shards_per_block = s->spb;
	s->cfg.backend.tensor_count = s->tensor_count;
	s->cfg.backend.tensor_bytes = s->tensor_bytes;
	s->fault_inner.shard_bytes = s->slot_bytes;
	s->fault_inner.shards_per_block = s->spb;
	s->fault_inner.tensor_count = s->tensor_count;
	s->fault_inner.tensor_bytes = s->tensor_bytes;
	if (s->cfg.backend.kind == KVS_BACKEND_POSIX && s->cfg.backend.nroots == 0) {
		kvs_log_error(&s->log, "store: backend=posix needs backend_roots, the directories "
				       "its block files go under (backend_roots=/data/kv, or /a:/b); "
				       "none was given (or backend=none: no backend)");
		return -EINVAL;
	}
	rc = kvs_backend_open(&s->cfg.backend, &s->backend);
	if (rc) {
		kvs_log_error(&s->log, "store: opening the backend: %s", kvs_strerror(rc));
		return rc;
	}
	if (kvs_backend_info(s->backend, &info) == 0)
		s->block_atomic = info.flags & KVS_BACKEND_INFO_BLOCK_ATOMIC;
	return 0;
}

/* The cache is open: its geometry is the truth.  Reopen the backend if that is
 * not what it was opened with, then register the data plane with it. */
static int backend_adopt(struct kvs_store *s)
{
	struct kvs_cache *c = s->cache;
	struct kvs_backend_buffer bufs[KVS_MAX_SEGS];
	uint64_t was[KVS_MAX_TENSORS];
	uint32_t n = s->tensor_count;
	int rc;

	memcpy(was, s->tensor_bytes, sizeof(was));
	tensor_table(s, &c->cfg); /* adopted from the header by an attacher */
	if (!s->backend || s->cfg.backend.shard_bytes != s->slot_bytes ||
	    s->cfg.backend.shards_per_block != s->spb || n != s->tensor_count ||
	    memcmp(was, s->tensor_bytes, n * sizeof(was[0])) != 0) {
		rc = backend_open(s);
		if (rc)
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

/*
 * The ERROR lines of this thread's last kvs_store_open (kvs_store_last_error):
 * what a caller without a log callback, or one that keeps only the last line,
 * would otherwise never see.  Collected only while the thread is opening (every
 * line of an open is logged by the opening thread: the store's own threads
 * start last).
 */
static __thread char open_errors[KVS_STORE_ERRORS_MAX];
static __thread bool opening;

static void note_error(int level, const char *msg)
{
	size_t n;

	if (!opening || level != KVS_LOG_ERROR)
		return;
	n = strlen(open_errors);
	if (n + 1 < sizeof(open_errors))
		snprintf(open_errors + n, sizeof(open_errors) - n, "%s%s", n ? "\n" : "", msg);
}

KVS_API const char *kvs_store_last_error(void)
{
	return open_errors;
}

static void gated_log(void *arg, int level, const char *msg)
{
	struct kvs_store_log_gate *g = arg;

	note_error(level, msg);
	if (!g->fn)
		return;
	pthread_rwlock_rdlock(&g->s->log_lock);
	if (!g->s->log_muted)
		g->fn(g->arg, level, msg);
	pthread_rwlock_unlock(&g->s->log_lock);
}

/* The caller's log while the config is resolved (no store to gate with yet). */
static void resolve_log(void *arg, int level, const char *msg)
{
	const struct kvs_log *user = arg;

	note_error(level, msg);
	if (user->fn)
		user->fn(user->arg, level, msg);
}

/* Put the callback *fn, *arg (none too: the open's errors are kept) behind
 * gate i. */
static void log_gate(struct kvs_store *s, unsigned i, kvs_log_fn *fn, void **arg)
{
	s->log_gates[i] = (struct kvs_store_log_gate){ .s = s, .fn = *fn, .arg = *arg };
	*fn = gated_log;
	*arg = &s->log_gates[i];
}

/* After the config is resolved: every callback it names goes through a gate. */
static void log_gates(struct kvs_store *s)
{
	log_gate(s, KVS_STORE_LOG_STORE, &s->log.fn, &s->log.arg);
	log_gate(s, KVS_STORE_LOG_CACHE, &s->cfg.cache.log, &s->cfg.cache.log_arg);
	log_gate(s, KVS_STORE_LOG_BACKEND, &s->cfg.backend.log, &s->cfg.backend.log_arg);
	if (s->cfg.backend.fault_inner == &s->fault_inner)
		log_gate(s, KVS_STORE_LOG_INNER, &s->fault_inner.log, &s->fault_inner.log_arg);
}

static int sync_init(struct kvs_store *s)
{
	pthread_condattr_t ca;
	int rc;

	s->wake_fd = -1;
	rc = pthread_rwlock_init(&s->log_lock, NULL);
	if (rc)
		return -rc;
	rc = pthread_mutex_init(&s->mu, NULL);
	if (rc) {
		pthread_rwlock_destroy(&s->log_lock);
		return -rc;
	}
	pthread_condattr_init(&ca);
	/* kvs_store_wait's deadline is CLOCK_MONOTONIC like every other */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->copier_cv, &ca);
	pthread_cond_init(&s->done_cv, &ca);
	pthread_cond_init(&s->reg_cv, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

/*
 * The pins the dispatcher keeps at most: a share of the cache that every rank
 * of the node (local_rank_size of them) may hold at once with half the cache
 * left evictable, so tasks of any size complete on any cache; within the pin
 * table, with room for the block writes the copier pins beside it.
 */
static uint32_t pin_budget(const struct kvs_store *s)
{
	uint64_t share = s->cache->slot_count / (2 * (uint64_t)s->lrs);
	uint64_t table = KVS_RANK_PINS / 2;

	if (share > table)
		share = table;
	return share ? (uint32_t)share : 1;
}

static int threads_start(struct kvs_store *s)
{
	int rc;

	s->ring_cap = s->cfg.running_queue_depth;
	s->ring = calloc(s->ring_cap, sizeof(*s->ring));
	s->tasks = calloc(s->cfg.waiting_queue_depth, sizeof(*s->tasks));
	if (!s->ring || !s->tasks)
		return -ENOMEM;
	s->wake_fd = kvs_fd_above_stdio(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (s->wake_fd < 0)
		return -errno;
	s->pin_budget = pin_budget(s);
	/* Made here, not by the copier, so that the blocks a dead rank left
	 * unwritten are this rank's to write before the open returns. */
	rc = kvs_store_dumps_init(s, &s->dumps0);
	if (rc)
		kvs_log_error(&s->log, "store: %s (dumps fail)", kvs_strerror(rc));
	else if (s->cache->cfg.device_id >= 0) { /* a watcher writes nothing */
		/* a peer stopped holding the claim table's lock must not hold the
		 * open: the copier looks again, later */
		kvs_core_lock_wait_set(KVS_STORE_LOCK_WAIT_NS);
		kvs_store_dumps_adopt(s, s->dumps0);
		kvs_core_lock_wait_set(0);
	}
	s->threads_alive = 2;
	rc = thread_start(s, &s->disp_thr, kvs_store_dispatcher, "kvs-dispatch");
	if (rc) {
		s->threads_alive = 0;
		kvs_store_dumps_fini(s, s->dumps0);
		s->dumps0 = NULL;
		return rc;
	}
	rc = thread_start(s, &s->copier_thr, kvs_store_copier, "kvs-copier");
	if (rc) {
		kvs_store_dumps_fini(s, s->dumps0);
		s->dumps0 = NULL;
		/* the dispatcher exits at once: stop, and no copier to wait for */
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		s->threads_alive = 1;
		pthread_mutex_unlock(&s->mu);
		kvs_store_wake_dispatcher(s);
		pthread_join(s->disp_thr, NULL);
		return rc;
	}
	s->threads = true;
	return 0;
}

/* A store that may create its cache needs its size in keys it knows (the
 * cache would name its own fields: "invalid slot_count = 0"). */
static int sizes_given(struct kvs_store *s)
{
	const struct kvs_cache_config *c = &s->cfg.cache;

	if (c->flags & KVS_CACHE_ATTACH)
		return 0; /* a watcher takes the creator's */
	if (c->slot_bytes == 0 || c->slot_count == 0) {
		kvs_log_error(&s->log, "store: no %s given: set %s (e.g. shard_size=2m,"
				       "cache_buffer_capacity_gb=64: GiB of shard slots; or "
				       "slot_bytes and slot_count in the C struct)",
			      c->slot_bytes == 0 ? "shard size" : "capacity",
			      c->slot_bytes == 0 ? "shard_size" : "cache_buffer_capacity_gb");
		return -EINVAL;
	}
	return 0;
}

/* A geometry in the store's keys (what the user typed, not the cache's fields). */
static void geometry_words(char *buf, size_t len, uint64_t shard, uint64_t slots, uint32_t spb,
			   uint32_t lrs)
{
	snprintf(buf, len, "shard_size=%llu, block_size=%llu (%u shards), "
			   "cache_buffer_capacity_gb=%.4g (%llu slots), local_rank_size=%u",
		 (unsigned long long)shard, (unsigned long long)(shard * spb), spb,
		 (double)(shard * slots) / (double)(UINT64_C(1) << 30), (unsigned long long)slots,
		 lrs);
}

/* The cache refused this rank's geometry (-KVS_ECONFIG, a field named): say it
 * in keys, both sides, and what to do. */
static void explain_mismatch(struct kvs_store *s)
{
	const struct kvs_cache_config *c = &s->cfg.cache;
	struct kvs_cache_info in;
	char have[192], want[192];

	if (kvs_cache_inspect(c->unique_id, &in) != 0 || in.state != KVS_CACHE_INFO_READY)
		return;
	geometry_words(have, sizeof(have), in.slot_bytes, in.slot_count, in.shards_per_block,
		       in.local_rank_size);
	geometry_words(want, sizeof(want), c->slot_bytes, c->slot_count, c->shards_per_block,
		       c->local_rank_size);
	kvs_log_error(&s->log, "store: the cache '%s' on this node was made with %s; this rank "
			       "asks for %s (or other tensor sizes): give every rank of the node "
			       "the same values, or another unique_id",
		      c->unique_id, have, want);
}

/* Open a store; check: only what kvs_store_config_check checks (no copy
 * engine, no cache: the store is closed again once the backend opened). */
static int store_open(const struct kvs_store_config *cfg, bool check, struct kvs_store **out)
{
	struct kvs_store *s;
	struct kvs_log log, user;
	int rc;

	if (out)
		*out = NULL;
	if (!cfg || !out)
		return -EINVAL;
	user = (struct kvs_log){ .fn = cfg->log, .arg = cfg->log_arg };
	log = (struct kvs_log){ .fn = resolve_log, .arg = &user };
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->log = user;
	s->opener = getpid();
	rc = kvs_store_config_resolve(cfg, &s->cfg, &s->fault_inner, &log);
	if (!rc)
		rc = sync_init(s);
	if (rc) {
		free(s);
		return rc;
	}
	log_gates(s);
	rc = sizes_given(s);
	if (rc)
		goto fail;
	/* What can fail without the data plane fails before it is built. */
	if (s->cfg.cache.device_id >= 0 && !check) {
		rc = copy_open(s);
		if (rc)
			goto fail;
	}
	tensor_table(s, &s->cfg.cache);
	if (s->slot_bytes && s->spb) {
		rc = backend_open(s);
		if (rc)
			goto fail;
	}
	if (check)
		goto fail; /* rc == 0: checked */
	rc = kvs_cache_open(&s->cfg.cache, &s->cache);
	if (rc == -KVS_ECONFIG)
		explain_mismatch(s);
	if (rc)
		goto fail;
	s->st = &s->cache->me->stats.store;
	s->lrs = s->cache->local_rank_size;
	rc = backend_adopt(s);
	if (rc)
		goto fail;
	if (s->cfg.cache.device_id >= 0) {
		s->rank_slice = (uint32_t)s->cfg.cache.device_id % s->lrs;
		rc = kvs_store_register_start(s);
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

KVS_API int kvs_store_open(const struct kvs_store_config *cfg, struct kvs_store **out)
{
	int rc;

	open_errors[0] = '\0';
	opening = true;
	rc = store_open(cfg, false, out);
	opening = false;
	if (rc == 0)
		open_errors[0] = '\0';
	return rc;
}

KVS_API int kvs_store_config_check(const struct kvs_store_config *cfg)
{
	struct kvs_store_config probe;
	struct kvs_store *s;
	int rc;

	if (!cfg)
		return -EINVAL;
	probe = *cfg;
	if (probe.cache.slot_bytes == 0 && probe.block_bytes == 0) {
		/* no geometry yet (the caller derives it later): the backend is
		 * checked with one shard of a page per block */
		probe.cache.slot_bytes = KVS_STORE_CHECK_SHARD_BYTES;
		probe.tensor_bytes = 0;
		probe.cache.tensor_count = 0;
	}
	open_errors[0] = '\0';
	opening = true;
	rc = store_open(&probe, true, &s);
	opening = false;
	if (rc == 0)
		open_errors[0] = '\0';
	return rc;
}

/* Everything the threads are not using any more: the backend (the dispatcher
 * closed its own), the copy engine, the cache, the memory. */
static void teardown(struct kvs_store *s)
{
	if (s->threads)
		for (uint32_t i = 0; i < s->cfg.waiting_queue_depth; i++)
			if (s->tasks[i])
				task_unref(s->tasks[i]);
	if (s->copy) {
		/* Nothing copies any more: unregister (this process only). */
		if (s->cache)
			kvs_store_register_stop(s);
		kvs_copy_close(s->copy);
	}
	kvs_backend_close(s->backend);
	kvs_cache_close(s->cache);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	free(s->tasks);
	free(s->ring);
	free(s->rel_later);
	pthread_cond_destroy(&s->reg_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->copier_cv);
	pthread_mutex_destroy(&s->mu);
	pthread_rwlock_destroy(&s->log_lock);
	free(s);
}

/*
 * Orphans: stores whose close returned with a transfer in flight, in this
 * process.  At exit the process waits for them (orphans_at_exit) up to the
 * longest timeout_ns among them; what has not drained by then stays as a hung
 * transfer leaves it (the cache stale, for `kvshare clean` or the next opener).
 */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t orphans_cv; /* CLOCK_MONOTONIC; an orphan is torn down */
static pthread_once_t orphans_once = PTHREAD_ONCE_INIT;
static uint32_t orphans_live;      /* under orphans_mu */
static uint64_t orphans_wait_ns;   /* under orphans_mu: their longest timeout_ns */
static pid_t orphans_pid;          /* the process they are in (not a fork()ed child) */

static void orphans_at_exit(void)
{
	struct timespec ts;

	pthread_mutex_lock(&orphans_mu);
	ts = kvs_ns_to_timespec(kvs_deadline_after(orphans_wait_ns));
	while (getpid() == orphans_pid && orphans_live &&
	       pthread_cond_timedwait(&orphans_cv, &orphans_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&orphans_mu);
}

static void orphans_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&orphans_cv, &ca);
	pthread_condattr_destroy(&ca);
	atexit(orphans_at_exit);
}

static void orphan_add(const struct kvs_store *s)
{
	pthread_once(&orphans_once, orphans_init);
	pthread_mutex_lock(&orphans_mu);
	orphans_live++;
	orphans_pid = getpid();
	if (s->cfg.timeout_ns > orphans_wait_ns)
		orphans_wait_ns = s->cfg.timeout_ns;
	pthread_mutex_unlock(&orphans_mu);
}

static void orphan_done(void)
{
	pthread_mutex_lock(&orphans_mu);
	orphans_live--;
	pthread_cond_broadcast(&orphans_cv);
	pthread_mutex_unlock(&orphans_mu);
}

void kvs_store_thread_exit(struct kvs_store *s)
{
	bool last;

	pthread_mutex_lock(&s->mu);
	last = --s->threads_alive == 0 && s->orphaned;
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
	if (last) {
		kvs_log_warn(&s->log, "store: the transfers that outlived close have drained; "
				      "its resources are released now");
		teardown(s);
		orphan_done();
	}
}

/* Latest deadline of the tasks still running (under mu), or now. */
static uint64_t latest_deadline(struct kvs_store *s)
{
	uint64_t latest = kvs_now_ns();

	for (uint32_t i = 0; i < s->cfg.waiting_queue_depth; i++)
		if (s->tasks[i] && !s->tasks[i]->done && s->tasks[i]->deadline_ns > latest)
			latest = s->tasks[i]->deadline_ns;
	return latest;
}

KVS_API void kvs_store_close(struct kvs_store *s)
{
	struct timespec ts;
	pthread_t disp, copier;
	bool orphan = false;

	if (!s)
		return;
	if (getpid() != s->opener) {
		/* A fork()ed child's copy: the threads, the backend's rings and pools
		 * and the copy engine are the parent's; the cache handles the child's
		 * copy of itself. */
		kvs_cache_close(s->cache);
		free(s->tasks);
		free(s->ring);
		free(s);
		return;
	}
	/* The registration thread stops before its next chunk. */
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_mutex_unlock(&s->mu);
	if (s->threads) {
		/* Tasks end by their deadlines; transfers then get timeout_ns more. */
		kvs_store_wake_dispatcher(s);
		kvs_store_wake_copier(s);
		pthread_mutex_lock(&s->mu);
		ts = kvs_ns_to_timespec(latest_deadline(s) + s->cfg.timeout_ns);
		while (s->threads_alive &&
		       pthread_cond_timedwait(&s->done_cv, &s->mu, &ts) != ETIMEDOUT)
			;
		if (s->threads_alive) {
			/* the registration thread ends by itself (one chunk at most) */
			pthread_mutex_unlock(&s->mu);
			kvs_store_register_join(s);
			pthread_mutex_lock(&s->mu);
		}
		disp = s->disp_thr;
		copier = s->copier_thr;
		if (s->threads_alive) {
			kvs_log_error(&s->log, "store: close: a backend transfer is still in flight "
					       "after every task's deadline and timeout_ms more (a hung "
					       "mount?); it drains in the background, its slots pinned "
					       "until it ends; nothing more is logged");
			/* the caller may unload its log callback once close returns */
			pthread_rwlock_wrlock(&s->log_lock);
			s->log_muted = true;
			pthread_rwlock_unlock(&s->log_lock);
			/* counted before the unlock of mu, from which the last
			 * thread out may free s (and count it out) */
			orphan_add(s);
			s->orphaned = orphan = true;
		}
		pthread_mutex_unlock(&s->mu);
		if (orphan) {
			pthread_detach(disp);
			pthread_detach(copier);
			return;
		}
		pthread_join(disp, NULL);
		pthread_join(copier, NULL);
	}
	teardown(s);
}
