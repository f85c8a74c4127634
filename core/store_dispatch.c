/*
 * core/store_dispatch.c — the dispatcher thread: the store's only backend issuer.
 *
 * It takes tasks in submit order and visits each task's shards in its visiting
 * order (rotated: rank r starts at slice r and strides by local_rank_size, so
 * the ranks of a node own different shards at the same moment and the backend
 * sees N-way concurrency).  For each shard: kvs_cache_get, then
 *   load/prefetch  owner: submit the backend read at once (not after locating the
 *                  whole task); hit or waiter: nothing to do here;
 *   dump           owner: the copier gathers it; READY or filled by a peer: skip
 *                  (deduplicated), unless this rank is the block's writer;
 * and hand the shard to the copier through the ring.  Completions are reaped as
 * they arrive and each owned slot is published READY or FAILED right then, so
 * peers never wait for this rank's copier.
 *
 * Backpressure without holding slots hostage: while a transfer waits for
 * backend capacity (-EAGAIN), no further shard is got, so this rank never owns a
 * slot it cannot start filling beyond that one; and a shard is got only when the
 * ring has room for it.
 *
 * Waiting: with transfers in flight the thread sleeps in the backend's poll, in
 * slices of KVS_DISPATCH_SLICE_NS so that new tasks and hand-offs are picked up
 * within a slice; with nothing in flight it sleeps on its condition variable
 * (an idle rank costs no CPU).  Before sleeping it preallocates the next shard of
 * the block it last read (the reserved pool), so a layer-wise next task owns its
 * slot without a CLOCK search.
 *
 * Dump writers.  The posix backend assembles a block in one handle and renames
 * it when every shard is written, so all of a block's writes must come from one
 * rank: the rank whose dump owned shard 0 (the block's first dumper) claims the
 * block and writes each shard of it it dumps, gathered by itself or found READY
 * (or waited for) from a peer's gather.  A rank that finds shard 0 READY or
 * being filled does not write that block: its first dumper does, or it came from
 * the backend already.  Claims live in a small table until the block's last
 * shard was written.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "core/store.h"

/* How long a poll for completions sleeps before looking at the queues again. */
#define KVS_DISPATCH_SLICE_NS 100000ull
/* Completions reaped per poll. */
#define KVS_DISPATCH_REAP 64u
/* Idle sleep bound (the wake is the condition variable; this only bounds it). */
#define KVS_DISPATCH_IDLE_NS KVS_NSEC_PER_SEC

static bool same_block(const struct kvs_block_id *a, const struct kvs_block_id *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* ---- dump writer claims ---- */

static struct kvs_store_claim *claim_find(struct kvs_store *s, const struct kvs_block_id *b)
{
	for (uint32_t i = 0; i < s->nclaims; i++)
		if (same_block(&s->claims[i].block, b))
			return &s->claims[i];
	return NULL;
}

static void claim_add(struct kvs_store *s, const struct kvs_block_id *b)
{
	if (s->nclaims == KVS_STORE_CLAIMS_MAX) {
		/* Forget the oldest: its remaining shards are then not written by us
		 * (a block dumped that slowly loses its backend copy, logged). */
		if (!s->claims_full_logged)
			kvs_log_warn(&s->log, "store: %u blocks partly dumped at once; the oldest claim "
				     "is dropped and its block not completed in the backend",
				     KVS_STORE_CLAIMS_MAX);
		s->claims_full_logged = true;
		memmove(&s->claims[0], &s->claims[1], (s->nclaims - 1) * sizeof(*s->claims));
		s->nclaims--;
	}
	s->claims[s->nclaims++] = (struct kvs_store_claim){ .block = *b, .written = 0 };
}

/* A write of one of the claimed block's shards was submitted. */
static void claim_written(struct kvs_store *s, const struct kvs_block_id *b)
{
	struct kvs_store_claim *cl = claim_find(s, b);

	if (cl && ++cl->written >= s->spb)
		*cl = s->claims[--s->nclaims];
}

/* ---- prealloc ---- */

static bool prealloc_recent(struct kvs_store *s, const struct kvs_block_id *b, uint32_t shard)
{
	for (uint32_t i = 0; i < KVS_STORE_PREALLOC_RECENT; i++)
		if (s->recent_shard[i] == shard + 1 && same_block(&s->recent_block[i], b))
			return true;
	return false;
}

/* In the idle window: key the next shard of the block last read, from the
 * reserved pool, so its get owns it at once. */
static void prealloc_next(struct kvs_store *s)
{
	int rc;

	s->prealloc_due = false;
	rc = kvs_cache_prealloc(s->cache, &s->prealloc_block, s->prealloc_shard);
	if (rc == 1) {
		KVS_STORE_COUNT(s, prealloc, 1);
		s->recent_block[s->recent_next] = s->prealloc_block;
		s->recent_shard[s->recent_next] = s->prealloc_shard + 1; /* 0 = unused */
		s->recent_next = (s->recent_next + 1) % KVS_STORE_PREALLOC_RECENT;
	} else if (rc < 0 && rc != -ENOSPC) {
		kvs_log_debug(&s->log, "store: prealloc: %s", kvs_strerror(rc));
	}
}

/* ---- transfers ---- */

static void sq_push(struct kvs_store *s, struct kvs_store_sh *sh)
{
	sh->io_next = NULL;
	if (s->sq_tail)
		s->sq_tail->io_next = sh;
	else
		s->sq_head = sh;
	s->sq_tail = sh;
}

/* The owner's read of sh ended with err: publish, then let the copier know. */
static void read_done(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	int rc;

	/* release: the copier acquires it after seeing the slot word change */
	atomic_store_explicit(&sh->io_result, err, memory_order_release);
	if (err) {
		KVS_STORE_COUNT(s, read_errors, 1);
		rc = kvs_slot_publish_failed(s->cache, &sh->slot, err);
	} else {
		rc = kvs_slot_publish_ready(s->cache, &sh->slot);
	}
	if (rc)
		kvs_log_error(&s->log, "store: publishing slot %u: %s", sh->slot.index,
			      kvs_strerror(rc));
	kvs_store_sh_put(s, sh);
}

static void write_done(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	if (err) {
		KVS_STORE_COUNT(s, write_errors, 1);
		kvs_log_error(&s->log, "store: backend write of shard %u: %s", sh->shard,
			      kvs_strerror(err));
	} else {
		KVS_STORE_COUNT(s, backend_writes, 1);
	}
	kvs_store_sh_error(sh, err);
	kvs_store_sh_put(s, sh);
}

static void transfer_done(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	if (sh->io_op == KVS_SH_IO_READ)
		read_done(s, sh, err);
	else
		write_done(s, sh, err);
}

/* Submit queued transfers in order until the backend is full.  Returns whether
 * anything left the queue. */
static bool submit_queued(struct kvs_store *s)
{
	bool progress = false;
	struct kvs_store_sh *sh;

	while ((sh = s->sq_head)) {
		struct kvs_backend_io io = {
			.block = sh->block,
			.shard = sh->shard,
			.buf = sh->data,
			.len = s->slot_bytes,
			.token = (uint64_t)(uintptr_t)sh,
		};
		int rc;

		if (sh->io_op == KVS_SH_IO_READ && kvs_now_ns() >= sh->task->deadline_ns)
			rc = -ETIMEDOUT; /* never started: fail it for every waiter */
		else if (sh->io_op == KVS_SH_IO_READ)
			rc = kvs_backend_submit_read(s->backend, &io);
		else
			rc = kvs_backend_submit_write(s->backend, &io);
		if (rc == -EAGAIN)
			break;
		s->sq_head = sh->io_next;
		if (!s->sq_head)
			s->sq_tail = NULL;
		progress = true;
		if (rc) {
			transfer_done(s, sh, rc);
			continue;
		}
		s->inflight++;
		if (sh->io_op == KVS_SH_IO_READ) {
			KVS_STORE_COUNT(s, owner_reads, 1);
		} else {
			claim_written(s, &sh->block);
		}
	}
	return progress;
}

/* Reap completions, waiting up to timeout_ns for the first.  Returns the count. */
static int reap(struct kvs_store *s, uint64_t timeout_ns)
{
	struct kvs_backend_completion comp[KVS_DISPATCH_REAP];
	int n = kvs_backend_poll(s->backend, comp, KVS_DISPATCH_REAP, timeout_ns);

	if (n < 0) {
		kvs_log_error(&s->log, "store: backend poll: %s", kvs_strerror(n));
		return 0;
	}
	for (int i = 0; i < n; i++) {
		struct kvs_store_sh *sh = (struct kvs_store_sh *)(uintptr_t)comp[i].token;
		int err = comp[i].result == (int64_t)s->slot_bytes ? 0
			  : comp[i].result < 0			 ? (int)comp[i].result
								 : -EIO;

		s->inflight--;
		transfer_done(s, sh, err);
	}
	return n;
}

/* ---- visiting a shard ---- */

/* Hand sh to the copier (the caller checked there is room). */
static void ring_push(struct kvs_store *s, struct kvs_store_sh *sh)
{
	pthread_mutex_lock(&s->mu);
	s->ring[(s->ring_head + s->ring_count) % s->ring_cap] = sh;
	s->ring_count++;
	pthread_cond_signal(&s->copier_cv);
	pthread_mutex_unlock(&s->mu);
	/* wakes a copier asleep on slot words (kvs_wait_any includes the bell) */
	kvs_wait_publish(&s->ring_bell,
			 (atomic_load_explicit(&s->ring_bell, memory_order_relaxed) + 1) &
				 KVS_WAIT_VALUE_MASK);
}

static void visit_load(struct kvs_store *s, struct kvs_store_sh *sh)
{
	if (!(sh->slot.flags & KVS_SLOT_OWNER)) {
		if (sh->slot.state == KVS_SLOT_READY)
			KVS_STORE_COUNT(s, load_hits, 1);
		return;
	}
	if (prealloc_recent(s, &sh->block, sh->shard))
		KVS_STORE_COUNT(s, prealloc_hits, 1);
	sh->flags |= KVS_SH_OWNED;
	atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed); /* ours: the read */
	sh->io_op = KVS_SH_IO_READ;
	sq_push(s, sh);
	if (s->cfg.prealloc && sh->shard + 1 < s->spb) {
		s->prealloc_due = true;
		s->prealloc_block = sh->block;
		s->prealloc_shard = sh->shard + 1;
	}
}

static void visit_dump(struct kvs_store *s, struct kvs_store_sh *sh)
{
	bool owned = sh->slot.flags & KVS_SLOT_OWNER;

	if (owned) {
		sh->flags |= KVS_SH_OWNED;
		if (s->spb == 1) {
			sh->flags |= KVS_SH_WRITE;
		} else if (sh->shard == 0) {
			claim_add(s, &sh->block);
			sh->flags |= KVS_SH_WRITE;
		}
	}
	if (sh->shard > 0 && claim_find(s, &sh->block))
		sh->flags |= KVS_SH_WRITE;
	if (sh->slot.state == KVS_SLOT_FAILED)
		sh->err = -EAGAIN; /* a peer's fill failed and is still pinned: retry later */
	else if (!(sh->flags & (KVS_SH_OWNED | KVS_SH_WRITE)))
		KVS_STORE_COUNT(s, dump_dedup, 1);
}

static void visit(struct kvs_store *s, struct kvs_store_sh *sh)
{
	struct kvs_store_task *t = sh->task;
	int rc;

	if (kvs_now_ns() >= t->deadline_ns) {
		sh->err = -ETIMEDOUT;
	} else if ((rc = kvs_cache_get(s->cache, &sh->block, sh->shard, 0, &sh->slot))) {
		sh->err = rc;
	} else {
		sh->flags |= KVS_SH_GOT;
		rc = kvs_slot_data(s->cache, &sh->slot, &sh->data);
		if (rc)
			sh->err = rc;
		else if (t->op == KVS_STORE_OP_DUMP)
			visit_dump(s, sh);
		else
			visit_load(s, sh);
	}
	ring_push(s, sh);
}

/* ---- the thread ---- */

/* Under mu: move the copier's hand-offs (pushed LIFO) onto the submit queue in
 * the order they were handed off. */
static void take_handoffs(struct kvs_store *s)
{
	struct kvs_store_sh *rev = NULL, *sh = s->handoff;

	s->handoff = NULL;
	while (sh) {
		struct kvs_store_sh *next = sh->io_next;

		sh->io_next = rev;
		rev = sh;
		sh = next;
	}
	while (rev) {
		struct kvs_store_sh *next = rev->io_next;

		sq_push(s, rev);
		rev = next;
	}
}

/* Under mu: is there anything for the dispatcher to do without waiting? */
static bool disp_work(struct kvs_store *s)
{
	return s->handoff || s->sq_head || (!s->cur && s->q_head) ||
	       (s->cur && s->ring_count < s->ring_cap);
}

void *kvs_store_dispatcher(void *arg)
{
	struct kvs_store *s = arg;

	for (;;) {
		bool progress;
		uint32_t room;

		pthread_mutex_lock(&s->mu);
		take_handoffs(s);
		if (!s->cur && s->q_head) {
			s->cur = s->q_head;
			s->q_head = s->cur->next;
			if (!s->q_head)
				s->q_tail = NULL;
		}
		if (s->copier_done && s->inflight == 0 && !s->sq_head) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		room = s->ring_cap - s->ring_count;
		pthread_mutex_unlock(&s->mu);

		progress = submit_queued(s);
		if (s->inflight && reap(s, 0) > 0)
			progress = true;
		/* Get further shards only while the backend takes transfers. */
		while (s->cur && !s->sq_head && room > 0) {
			struct kvs_store_task *t = s->cur;
			struct kvs_store_sh *sh = &t->sh[t->order[t->visited++]];

			/* Decided before the visit: once its last shard is in the ring
			 * the task may finish and be freed. */
			if (t->visited == t->n)
				s->cur = NULL;
			visit(s, sh);
			room--;
			progress = true;
			submit_queued(s);
		}
		if (progress)
			continue;
		if (s->inflight) {
			reap(s, KVS_DISPATCH_SLICE_NS);
			continue;
		}
		if (s->prealloc_due) {
			prealloc_next(s);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		if (!disp_work(s) && !s->copier_done) {
			struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(KVS_DISPATCH_IDLE_NS));

			pthread_cond_timedwait(&s->disp_cv, &s->mu, &ts);
		}
		pthread_mutex_unlock(&s->mu);
	}
	/* The issuing thread closes the backend (io_uring reaps here). */
	kvs_backend_close(s->backend);
	s->backend = NULL;
	return NULL;
}
