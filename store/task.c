/*
 * store/task.c — a store's tasks: submit, check and wait; each shard's end
 * (finished once, released once), and the hand-offs between the store's two
 * threads, the dispatcher (store/dispatch.c) and the copier (store/copy.c,
 * store/dump.c).
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
 * Locking: one mutex (s->mu) guards the task table, the hand-off lists, the ring
 * and the counts.  Task waiters and an idle copier sleep on condition variables;
 * the dispatcher sleeps in epoll on its eventfd (wake_fd) and the backend's wait
 * descriptor.  Per-shard and per-task state touched by two threads is atomic,
 * with its order explained where it is used.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "store/store.h"

#define TASK_IDX_BITS 16u
#define TASK_IDX_MASK ((UINT64_C(1) << TASK_IDX_BITS) - 1)
/* Largest task: bounds the one allocation and the 32-bit shard counts. */
#define TASK_SHARDS_MAX (1u << 20)

_Static_assert(KVS_STORE_WAITING_QD_MAX <= TASK_IDX_MASK + 1, "task index fits its bits");

/* ------------------------------------------------------------------------ */
/* Shards and tasks                                                          */

void kvs_store_task_unref(struct kvs_store_task *t)
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
	/* failures: within the task's count (task_submit counted it before the
	 * task could start), and timed out within failed (counted after it) */
	if (err)
		KVS_STORE_COUNT_FAILURE(s, tasks_failed);
	if (err == -ETIMEDOUT)
		KVS_STORE_COUNT_FAILURE(s, tasks_timedout);
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
static bool release_later(struct kvs_store *s, const struct kvs_slot *slot)
{
	if (s->nrel_later == s->rel_later_cap) {
		uint32_t cap = s->rel_later_cap ? 2 * s->rel_later_cap : 16;
		struct kvs_slot *v = realloc(s->rel_later, cap * sizeof(*v));

		if (!v)
			return false;
		s->rel_later = v;
		s->rel_later_cap = cap;
	}
	s->rel_later[s->nrel_later++] = *slot;
	return true;
}

bool kvs_store_release_retry(struct kvs_store *s)
{
	uint32_t n = s->nrel_later;

	s->nrel_later = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct kvs_slot slot = s->rel_later[i];

		kvs_store_release(s, &slot); /* kept again (below i) while not had */
	}
	return s->nrel_later < n;
}

void kvs_store_release(struct kvs_store *s, struct kvs_slot *slot)
{
	int rc = kvs_slot_release(s->cache, slot);

	if (rc == -ETIMEDOUT && release_later(s, slot))
		return; /* still pinned, and in the budget, until had */
	if (rc)
		kvs_log_error(&s->log, "store: releasing a slot: %s", kvs_strerror(rc));
	s->released++; /* out of the budget at the next kvs_store_release_flush */
}

void kvs_store_release_flush(struct kvs_store *s)
{
	bool blocked;

	if (!s->released)
		return;
	/* relaxed: a budget (the dispatcher re-reads it under mu after its wake) */
	atomic_fetch_sub_explicit(&s->pins, s->released, memory_order_relaxed);
	s->released = 0;
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
		kvs_store_release(s, &sh->slot);
	}
	kvs_store_sh_done(s, sh, 0);
	kvs_store_task_unref(t);
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

/*
 * The bell wakes a copier asleep on shared words; one asleep on copier_cv (no
 * shared word to wait for: copy.c, copier_sleep) needs the condition, and only
 * it.  A Dekker pair: the copier sets copier_on_cv, then looks at the bell; a
 * waker bumps the bell, then looks at copier_on_cv.  Both looks go through a
 * seq_cst read-modify-write of copier_on_cv, so the two are ordered and the
 * later one sees what the earlier side wrote before it: the copier sees the
 * bump and stays up, or this sees the copier going to sleep.  (RMWs, not
 * atomic_thread_fence: the same guarantee, and one ThreadSanitizer can see;
 * core.h, kvs_core_dirty_fence.)  A copier that is up -- the common case while
 * work flows -- so costs the hand-off no lock and no futex call.  The signal
 * comes after the unlock: one sent while holding mu woke the copier only to
 * block on mu (two more futex calls and a switch per hand-off, strace of
 * hit_bench --path cold); taking mu first still orders it after the copier's
 * wait began.  A stale 1 costs a signal nobody waits for.
 */
void kvs_store_wake_copier(struct kvs_store *s)
{
	kvs_wait_bump(&s->copier_bell);
	if (!atomic_fetch_add_explicit(&s->copier_on_cv, 0, memory_order_seq_cst))
		return;
	pthread_mutex_lock(&s->mu);
	pthread_mutex_unlock(&s->mu);
	pthread_cond_signal(&s->copier_cv);
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
 * (prefetch); a shard's copies are its stored tensors [first, first + count)
 * (a dump's: every one). */
static int task_build(struct kvs_store *s, uint32_t op, const struct kvs_store_shard *shards,
		      const struct kvs_block_id *blocks, uint32_t n, uint32_t first,
		      uint32_t count, struct kvs_store_task **out)
{
	uint32_t nsh = op == KVS_STORE_OP_PREFETCH ? n * s->spb : n;
	uint32_t nseg = op == KVS_STORE_OP_PREFETCH ? 0 : n * count;
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
		sh->nseg = count;
		for (uint32_t k = first; k < first + count; k++)
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

/* The stored tensors a load copies of each shard (kvs_store_load_tensors). */
struct tensor_range {
	uint32_t first, count;
};

/* Submit a task; range: a load of those tensors only, sequenced (NULL: every
 * tensor, visited round-robin with the others). */
static int task_submit(struct kvs_store *s, uint32_t op, const struct kvs_store_shard *shards,
		       const struct kvs_block_id *blocks, uint32_t n,
		       const struct tensor_range *range, void *event, uint64_t *id)
{
	struct kvs_store_task *t = NULL;
	uint32_t first, count;
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
	first = range ? range->first : 0;
	count = range ? range->count : s->tensor_count;
	if (first >= s->tensor_count || count == 0 || count > s->tensor_count - first)
		return -EINVAL;
	rc = task_build(s, op, shards, blocks, n, first, count, &t);
	if (rc)
		return rc;
	t->in_sequence = range != NULL;
	t->event = event;
	t->submit_ns = kvs_now_ns();
	t->deadline_ns = kvs_deadline_after(s->cfg.timeout_ns);
	pthread_mutex_lock(&s->mu);
	if (s->stop || s->outstanding >= s->cfg.waiting_queue_depth) {
		pthread_mutex_unlock(&s->mu);
		free(t);
		return s->stop ? -ESHUTDOWN : -EAGAIN;
	}
	/* Counted before the task is queued, so before it can fail: tasks_failed
	 * stays within the tasks (the mutex orders it before the threads that
	 * finish the task, whose failure count is a release). */
	if (op == KVS_STORE_OP_LOAD)
		KVS_STORE_COUNT(s, tasks_load, 1);
	else if (op == KVS_STORE_OP_DUMP)
		KVS_STORE_COUNT(s, tasks_dump, 1);
	else
		KVS_STORE_COUNT(s, tasks_prefetch, 1);
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
	return 0;
}

KVS_API int kvs_store_load(struct kvs_store *s, const struct kvs_store_shard *shards, uint32_t n,
			   uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_LOAD, shards, NULL, n, NULL, NULL, task);
}

KVS_API int kvs_store_load_tensors(struct kvs_store *s, const struct kvs_store_shard *shards,
				   uint32_t n, uint32_t first_tensor, uint32_t tensor_count,
				   uint64_t *task)
{
	struct tensor_range range = { first_tensor, tensor_count };

	return task_submit(s, KVS_STORE_OP_LOAD, shards, NULL, n, &range, NULL, task);
}

KVS_API int kvs_store_dump(struct kvs_store *s, const struct kvs_store_shard *shards, uint32_t n,
			   void *cuda_event, uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_DUMP, shards, NULL, n, NULL, cuda_event, task);
}

KVS_API int kvs_store_prefetch(struct kvs_store *s, const struct kvs_block_id *blocks, uint32_t n,
			       uint64_t *task)
{
	return task_submit(s, KVS_STORE_OP_PREFETCH, NULL, blocks, n, NULL, NULL, task);
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
	kvs_store_task_unref(t);
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

