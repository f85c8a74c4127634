/*
 * store/dispatch.c — the dispatcher thread: the store's visits and its only
 * backend issuer.
 *
 * Visits.  Every task being visited gets its turn (round-robin, a few shards at a
 * time), so a task of a thousand shards never holds up a load of one; but the
 * sequenced tasks (kvs_store_load_tensors: a layer-wise load's layer groups)
 * are in the visiting list one at a time, in submit order, the next one taking
 * its turn once the one before visited its last shard, so the first group's
 * copies come first.  Within a
 * task the shards go in the task's visiting order (rotated: rank r starts at
 * slice r and strides by local_rank_size, so the ranks of a node own different
 * shards at the same moment).  A visit pins the shard's slot
 * (kvs_store_visit_get): a load or prefetch that owns it submits its read at
 * once; every visited shard goes to the copier through the ring, a batch at a
 * time (flush_visits: one lock, one wake, the pins and hits counted once --
 * per shard, those were most of a hit's cost).  Visits stop while the store
 * holds its pin budget (s->pin_budget) or the ring is full, and resume when the
 * copier releases pins or takes shards; a task past its deadline finishes its
 * unvisited shards at once (-ETIMEDOUT), without a pin.  A load or prefetch
 * owns a miss only while no read waits for backend room (visit()): otherwise
 * the miss is deferred, unpinned, and the peers with room own it.
 *
 * Gets never block here: the bucket lock is only tried.  A busy bucket (a peer
 * in its critical section, or stopped in it) sends the shard to the copier,
 * which may block on it; meanwhile this thread keeps reaping and publishing, so
 * a stopped peer costs its own shards, never the completions other ranks wait
 * for.  For the same reason the last release of a read's pin goes to the copier.
 *
 * Transfers (issue.c).  Reads and writes have their own queues.  Reads go first and are
 * submitted whatever their task's deadline (a read is useful to every rank
 * waiting on its slot: a task past its deadline reports at the deadline, the
 * read drains into the cache), at most read_cap in flight
 * (KVS_STORE_OWNED_READS_MAX: each holds a place of the copier's working set
 * until it completes; past the cap reads wait in the queue, so the visits own
 * no more misses and the peers own them).  Writes (the blocks this rank writes as their
 * claim's holder, store/dump.c) may take at most write_cap of the backend's
 * queue, so reads always find room.  A block write has no deadline (its dumps
 * may be acknowledged already): it waits in the queue as long as the backend
 * takes, and an attempt ends exactly once, when it is off the queue with
 * nothing in flight.  Completions are reaped as they arrive and each owned slot
 * is published READY or FAILED right then, so peers never wait for this rank's
 * copier; a block write's attempt that is over goes back to the copier, which
 * cleans its slots (DIRTY -> READY) and ends its claim, or hands it back for
 * another attempt after a backoff (the retry list).
 *
 * Sleeping.  In epoll on the wake eventfd (submits, hand-offs, released pins,
 * room in the ring, close) and the backend's wait descriptor
 * (kvs_backend_wait_fd: readable when a completion may be reaped), with a
 * timeout only for what has a time: the earliest deadline of a task still being
 * visited, a block write's retry, a backoff after a failed poll.  A
 * backend without a wait descriptor (a user table without wait_fd) is slept on in
 * its own poll, 1 ms at a time, while it has transfers in flight: completions
 * are reaped as they come, a submit waits 1 ms at most.  Nothing in flight and nothing to visit: it
 * sleeps until woken (1 s bound).  Before sleeping it preallocates the next
 * shard of the block it last read (kvs_cache_prealloc's reserved pool), so a
 * layer-wise next task owns its slot without a CLOCK search.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "store/dispatch.h"

/* Shards of one task visited before the next task's turn. */
#define VISIT_BURST 16u
/* A task's misses deferred at once, at most (visit()): past them its visits
 * wait until reads complete and the deferred ones are visited again.  Without
 * the bound a cold load of thousands of shards looked every one up while the
 * first reads were in flight, and again when their turn came, their bucket and
 * slot lines long evicted by the fills in between; 32 keep the second look
 * within a few completions of the first. */
#define DEFER_AHEAD 32u
/* Idle sleep bound (the wake is the eventfd; this only bounds it). */
#define IDLE_MS 1000
/* Poll slice of a backend with no wait descriptor, transfers in flight. */
#define NOFD_SLICE_MS 1


static bool same_block(const struct kvs_block_id *a, const struct kvs_block_id *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* ---- visits ---- */

/* An owned read of a visit starts at once: the read queue holds only reads the
 * backend had no room for (then the visits own no more misses: visit()). */
static void queue_own_read(struct kvs_store *s, struct kvs_store_sh *sh, void *arg)
{
	struct disp *d = arg;

	kvs_store_rq_push(d, &sh->rd);
	kvs_store_submit_reads(d);
	if (s->cfg.prealloc && sh->shard + 1 < s->spb) {
		d->prealloc_due = true;
		d->prealloc_block = sh->block;
		d->prealloc_shard = sh->shard + 1;
	}
}

static bool prealloc_recent(struct disp *d, const struct kvs_block_id *b, uint32_t shard)
{
	for (uint32_t i = 0; i < KVS_STORE_PREALLOC_RECENT; i++)
		if (d->recent_shard[i] == shard + 1 && same_block(&d->recent_block[i], b))
			return true;
	return false;
}

void kvs_store_read_owned(struct kvs_store *s, struct kvs_store_sh *sh,
			  void (*queue_read)(struct kvs_store *s, struct kvs_store_sh *sh, void *arg),
			  void *arg)
{
	sh->rd = (struct kvs_store_xfer){
		.op = KVS_XFER_READ, .shard = sh->shard, .block = sh->block, .buf = sh->data,
		.owner = sh,
	};
	atomic_init(&sh->rd.result, KVS_XFER_PENDING);
	/* relaxed: the pin's second holder, taken before the read is handed on */
	atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
	queue_read(s, sh, arg);
}

/* sh's key hash: its bucket's prefetches and its get share one computation. */
static uint64_t sh_hash(struct kvs_store_sh *sh)
{
	if (!(sh->flags & KVS_SH_HASHED)) {
		sh->hash = kvs_core_hash(&sh->block, sh->shard);
		sh->flags |= KVS_SH_HASHED;
	}
	return sh->hash;
}

int kvs_store_visit_get(struct kvs_store *s, struct kvs_store_sh *sh, uint32_t flags,
			void (*queue_read)(struct kvs_store *s, struct kvs_store_sh *sh, void *arg),
			void *arg)
{
	uint32_t op = sh->task->op;
	int rc;

	if (op == KVS_STORE_OP_PREFETCH)
		flags |= KVS_GET_ALLOW_RESERVED; /* what the reserved pool is for */
	else if (op == KVS_STORE_OP_DUMP) /* a dump has the bytes a failed fill lacked; its
					      gets are dump_gets, not hits */
		flags |= KVS_CORE_GET_REFILL | KVS_CORE_GET_DUMP;
	rc = kvs_core_get_hashed(s->cache, &sh->block, sh->shard, sh_hash(sh), flags, &sh->slot);
	if (rc)
		return rc;
	sh->flags |= KVS_SH_GOT; /* in the pin budget: the caller counts it (s->pins) */
	sh->data = kvs_core_slot_addr(s->cache, sh->slot.index);
	if (!sh->data) {
		sh->err = -KVS_ECORRUPT;
		return 0;
	}
	if (sh->slot.flags & KVS_SLOT_OWNER) {
		sh->flags |= KVS_SH_OWNED;
		if (op != KVS_STORE_OP_DUMP) /* a dump's the copier gathers */
			kvs_store_read_owned(s, sh, queue_read, arg);
	}
	return 0;
}

bool kvs_store_sh_hit(const struct kvs_store_sh *sh)
{
	return sh->task->op != KVS_STORE_OP_DUMP && !(sh->flags & KVS_SH_OWNED) &&
	       (sh->slot.state == KVS_SLOT_READY || sh->slot.state == KVS_SHM_SLOT_DIRTY);
}

/* Hand this batch's visits to the copier: one lock, one wake, however many
 * shards; the pins and hits they took counted once.  Per shard this was a
 * lock, a futex bump and a condition signal (docs/store.md, "What a hit
 * costs"). */
static void flush_visits(struct disp *d)
{
	struct kvs_store *s = d->s;

	if (d->pinned) {
		/* relaxed: a budget (room() reads it under mu; the copier's
		 * releases subtract) */
		atomic_fetch_add_explicit(&s->pins, d->pinned, memory_order_relaxed);
		d->pinned = 0;
	}
	if (d->hits) {
		KVS_STORE_COUNT(s, load_hits, d->hits);
		d->hits = 0;
	}
	if (d->nout) {
		pthread_mutex_lock(&s->mu);
		for (uint32_t i = 0; i < d->nout; i++)
			s->ring[(s->ring_head + s->ring_count + i) % s->ring_cap] = d->out[i];
		s->ring_count += d->nout;
		pthread_mutex_unlock(&s->mu);
		d->nout = 0;
		d->copier_due = true;
	}
	if (d->copier_due) {
		d->copier_due = false;
		kvs_store_wake_copier(s);
	}
}

/* sh visited: on its way to the copier with this batch (the room was taken). */
static void out_push(struct disp *d, struct kvs_store_sh *sh)
{
	d->out[d->nout++] = sh;
	d->room--;
	if (sh->flags & KVS_SH_GOT)
		d->pinned++;
	if (kvs_store_sh_hit(sh))
		d->hits++;
}

/* A miss met while reads wait for backend room: visited again, in order, once
 * the read queue is empty.  Its block is what this rank will read next, so the
 * backend hears of it now (a posix backend opens its file ahead, on a thread
 * of its own, while the reads in flight run: docs/store.md, "Reads ahead"),
 * once per run of misses of one block. */
static void defer(struct disp *d, struct kvs_store_sh *sh)
{
	if (!d->def_head || !same_block(&d->def_hinted, &sh->block)) {
		d->def_hinted = sh->block;
		(void)kvs_backend_hint_read(d->s->backend, &sh->block, 1);
	}
	sh->task->deferred++;
	sh->next = NULL;
	if (d->def_tail)
		d->def_tail->next = sh;
	else
		d->def_head = sh;
	d->def_tail = sh;
	if (!d->def_next_ns || sh->task->deadline_ns < d->def_next_ns)
		d->def_next_ns = sh->task->deadline_ns;
}

/*
 * A load or prefetch owns a miss only while nothing waits in the read queue:
 * a rank never owns more slots than it can start filling (its reads in flight
 * and one more), so the next misses are owned by the peers with backend room
 * and the node's reads run in parallel.  Hits and waits are pinned whatever
 * the queue (they need no backend room); a miss is deferred, told from the
 * unlocked lookup where that finds no key (KVS_CORE_GET_DEFER: a cold load's
 * misses past the read cap are each visited twice, and the first visit took
 * the bucket lock for nothing).  A dump owns every miss: it fills from the
 * device, not the backend.
 */
static void visit(struct disp *d, struct kvs_store_sh *sh)
{
	struct kvs_store *s = d->s;
	uint32_t flags = KVS_CORE_GET_TRY;
	int rc;

	if (d->rq_head && sh->task->op != KVS_STORE_OP_DUMP)
		flags |= KVS_CORE_GET_NO_OWN | KVS_CORE_GET_DEFER;
	rc = kvs_store_visit_get(s, sh, flags, queue_own_read, d);
	if (rc == -ENOENT && (flags & KVS_CORE_GET_NO_OWN)) {
		defer(d, sh);
		return;
	}
	if (rc == -EBUSY) {
		sh->flags |= KVS_SH_SLOWGET; /* the copier may block on the bucket */
	} else if (rc) {
		/* nothing pinned: finished here (the task may go with it) */
		kvs_store_sh_finish(s, sh, rc);
		return;
	} else if ((sh->flags & KVS_SH_OWNED) && prealloc_recent(d, &sh->block, sh->shard)) {
		KVS_STORE_COUNT(s, prealloc_hits, 1);
	}
	out_push(d, sh);
}

/* Room for one more visit?  The room of a batch is taken once: ring places
 * and pins left (relaxed pins: a budget; under-counting a release only delays
 * a visit until the wake that follows it), less what the batch holds; with
 * none left, the batch goes to the copier first and the room is asked again.
 * None then: the dispatcher is blocked until the copier makes room. */
static bool room(struct disp *d)
{
	struct kvs_store *s = d->s;
	uint32_t pins, ring_free;

	if (d->room)
		return true;
	flush_visits(d);
	pthread_mutex_lock(&s->mu);
	pins = atomic_load_explicit(&s->pins, memory_order_relaxed);
	ring_free = s->ring_cap - s->ring_count;
	d->room = pins < s->pin_budget ? s->pin_budget - pins : 0;
	if (ring_free < d->room)
		d->room = ring_free;
	d->blocked = s->disp_blocked = d->room == 0;
	pthread_mutex_unlock(&s->mu);
	return d->room > 0;
}

/* Task t is past its deadline: every shard not visited yet finishes now. */
static void expire_rest(struct disp *d, struct kvs_store_task *t)
{
	struct kvs_store *s = d->s;

	/* relaxed: our own reference, dropped below (the task may complete, and
	 * be reaped, while we finish its shards) */
	atomic_fetch_add_explicit(&t->live, 1, memory_order_relaxed);
	while (t->visited < t->n) {
		struct kvs_store_sh *sh = &t->sh[t->order[t->visited++]];

		kvs_store_sh_finish(s, sh, -ETIMEDOUT);
	}
	/* acq_rel: as every task reference (store/task.c, kvs_store_task_unref) */
	if (atomic_fetch_sub_explicit(&t->live, 1, memory_order_acq_rel) == 1)
		free(t);
}

/* Append t to the task list *head ... *tail. */
static void task_push(struct kvs_store_task **head, struct kvs_store_task **tail,
		      struct kvs_store_task *t)
{
	t->next = NULL;
	if (*tail)
		(*tail)->next = t;
	else
		*head = t;
	*tail = t;
}

static void vis_push(struct disp *d, struct kvs_store_task *t)
{
	task_push(&d->vis_head, &d->vis_tail, t);
}

/* A task to visit: into the visiting list, unless it is sequenced and another
 * sequenced one is there (then it waits its turn, FIFO). */
static void take_task(struct disp *d, struct kvs_store_task *t)
{
	if (t->in_sequence && d->seq_active) {
		task_push(&d->seq_head, &d->seq_tail, t);
		return;
	}
	if (t->in_sequence)
		d->seq_active = t;
	vis_push(d, t);
}

/* No sequenced task in the visiting list: the next one waiting takes its turn. */
static void seq_next(struct disp *d)
{
	struct kvs_store_task *next = d->seq_head;

	if (d->seq_active || !next)
		return;
	d->seq_head = next->next;
	if (!d->seq_head)
		d->seq_tail = NULL;
	take_task(d, next);
}

/* t's last shard is about to be visited: the next sequenced task takes its turn
 * if t's was it.  Before that visit: t may end, and be freed, after it. */
static void vis_done(struct disp *d, struct kvs_store_task *t)
{
	if (t == d->seq_active) {
		d->seq_active = NULL;
		seq_next(d);
	}
}

/* Drop the tasks past their deadline from *head's list (its tail *tail),
 * finishing the shards they have left.  Returns whether there were any. */
static bool expire_list(struct disp *d, struct kvs_store_task **head,
			struct kvs_store_task **tail, uint64_t now)
{
	struct kvs_store_task **link = head, *t, *last = NULL;
	bool any = false;

	while ((t = *link)) {
		if (now < t->deadline_ns) {
			last = t;
			link = &t->next;
			continue;
		}
		*link = t->next;
		if (t == d->seq_active) /* the visiting list's: its turn ends */
			d->seq_active = NULL;
		expire_rest(d, t);
		any = true;
	}
	*tail = last;
	return any;
}

/* The tasks past their deadline, visited or waiting their turn; then the next
 * sequenced task takes its turn if the one visited has gone. */
static bool expire_tasks(struct disp *d)
{
	uint64_t now = kvs_now_ns();
	bool any = expire_list(d, &d->vis_head, &d->vis_tail, now);

	any |= expire_list(d, &d->seq_head, &d->seq_tail, now);
	seq_next(d);
	return any;
}

/* Deferred shards past their task's deadline finish now (once the earliest
 * deadline among them has passed). */
static bool expire_deferred(struct disp *d)
{
	struct kvs_store_sh **link = &d->def_head, *sh, *last = NULL;
	uint64_t now = kvs_now_ns(), next = 0;
	bool any = false;

	if (!d->def_head || now < d->def_next_ns)
		return false;
	while ((sh = *link)) {
		if (now < sh->task->deadline_ns) {
			if (!next || sh->task->deadline_ns < next)
				next = sh->task->deadline_ns;
			last = sh;
			link = &sh->next;
			continue;
		}
		*link = sh->next;
		sh->task->deferred--; /* before the finish: the task may go with it */
		kvs_store_sh_finish(d->s, sh, -ETIMEDOUT);
		any = true;
	}
	d->def_tail = last;
	d->def_next_ns = next;
	return any;
}

/* Visits ahead of the next one whose lines are brought in: a get's bucket line
 * PREFETCH_FAR visits before it, then (that line at hand) its slot's lines
 * PREFETCH_NEAR visits before it. */
#define PREFETCH_FAR 8u
#define PREFETCH_NEAR 4u

static void prefetch_ahead(struct disp *d, struct kvs_store_task *t)
{
	if (t->visited + PREFETCH_FAR < t->n)
		kvs_core_prefetch(d->s->cache, sh_hash(&t->sh[t->order[t->visited + PREFETCH_FAR]]),
				  false);
	if (t->visited + PREFETCH_NEAR < t->n)
		kvs_core_prefetch(d->s->cache, sh_hash(&t->sh[t->order[t->visited + PREFETCH_NEAR]]),
				  true);
}

static bool visit_some(struct disp *d)
{
	struct kvs_store_task *parked_head = NULL, *parked_tail = NULL;
	struct kvs_store_sh *sh;
	bool progress = expire_tasks(d);

	progress |= expire_deferred(d);
	while ((sh = d->revisits) && room(d)) {
		d->revisits = sh->next;
		visit(d, sh);
		progress = true;
	}
	/* Deferred misses first, in order, while the backend takes reads. */
	while ((sh = d->def_head) && !d->rq_head && room(d)) {
		d->def_head = sh->next;
		if (!d->def_head) {
			d->def_tail = NULL;
			d->def_next_ns = 0;
		}
		sh->task->deferred--; /* before the visit: the task may go with it */
		visit(d, sh);
		progress = true;
	}
	/* Round-robin over the tasks; one with DEFER_AHEAD deferred misses waits
	 * out this pass (parked) and goes back in line after it. */
	while (d->vis_head) {
		struct kvs_store_task *t = d->vis_head;

		/* off the list before its last visit: the task may then end */
		d->vis_head = t->next;
		if (!d->vis_head)
			d->vis_tail = NULL;
		for (uint32_t k = 0; k < VISIT_BURST && t->visited < t->n - 1 &&
				     t->deferred < DEFER_AHEAD && room(d);
		     k++) {
			prefetch_ahead(d, t);
			visit(d, &t->sh[t->order[t->visited++]]);
			progress = true;
		}
		if (t->deferred >= DEFER_AHEAD) {
			task_push(&parked_head, &parked_tail, t);
			continue;
		}
		if (t->visited == t->n - 1 && room(d)) {
			vis_done(d, t);
			visit(d, &t->sh[t->order[t->visited++]]);
			progress = true;
			continue;
		}
		/* back in line, at the end (round-robin) */
		vis_push(d, t);
		if (d->blocked)
			break;
	}
	if (parked_head) {
		if (d->vis_tail)
			d->vis_tail->next = parked_head;
		else
			d->vis_head = parked_head;
		d->vis_tail = parked_tail;
	}
	flush_visits(d);
	return progress;
}

/* In the idle window: key the next shard of the block last read, from the
 * reserved pool, so its get owns it at once. */
static void prealloc_next(struct disp *d)
{
	struct kvs_store *s = d->s;
	int rc;

	d->prealloc_due = false;
	rc = kvs_core_prealloc(s->cache, &d->prealloc_block, d->prealloc_shard, KVS_CORE_GET_TRY);
	if (rc == 1) {
		KVS_STORE_COUNT(s, prealloc, 1);
		d->recent_block[d->recent_next] = d->prealloc_block;
		d->recent_shard[d->recent_next] = d->prealloc_shard + 1; /* 0 = unused */
		d->recent_next = (d->recent_next + 1) % KVS_STORE_PREALLOC_RECENT;
	} else if (rc < 0 && rc != -ENOSPC && rc != -EBUSY) {
		kvs_log_debug(&s->log, "store: prealloc: %s", kvs_strerror(rc));
	}
}

/* ---- the thread ---- */

/* Reverse a LIFO hand-off list into submission order. */
static struct kvs_store_sh *reverse_sh(struct kvs_store_sh *sh)
{
	struct kvs_store_sh *rev = NULL;

	while (sh) {
		struct kvs_store_sh *next = sh->next;

		sh->next = rev;
		rev = sh;
		sh = next;
	}
	return rev;
}

/* Take what was submitted or handed off.  Returns whether the thread may
 * leave: stopping, no task active, nothing queued or in flight. */
static bool take_inputs(struct disp *d)
{
	struct kvs_store *s = d->s;
	struct kvs_store_sh *reads, *revisits;
	struct kvs_store_job *jobs, *rev = NULL;
	bool leave;

	pthread_mutex_lock(&s->mu);
	while (s->q_head) {
		struct kvs_store_task *t = s->q_head;

		s->q_head = t->next;
		take_task(d, t);
	}
	s->q_tail = NULL;
	reads = s->reads_in;
	revisits = s->revisit_in;
	jobs = s->jobs_in;
	s->reads_in = s->revisit_in = NULL;
	s->jobs_in = NULL;
	leave = s->stop && s->active == 0 && s->copier_idle && !reads && !revisits && !jobs;
	pthread_mutex_unlock(&s->mu);

	for (struct kvs_store_sh *sh = reverse_sh(reads); sh;) {
		struct kvs_store_sh *next = sh->next;

		kvs_store_rq_push(d, &sh->rd);
		sh = next;
	}
	if (revisits) {
		struct kvs_store_sh *tail = reverse_sh(revisits), *last = tail;

		while (last->next)
			last = last->next;
		last->next = d->revisits;
		d->revisits = tail;
	}
	while (jobs) { /* LIFO -> FIFO */
		struct kvs_store_job *next = jobs->next;

		jobs->next = rev;
		rev = jobs;
		jobs = next;
	}
	while (rev) { /* new, or an attempt again after its backoff (copier) */
		struct kvs_store_job *next = rev->next;

		if (rev->retry_ns) {
			rev->next = d->retries;
			d->retries = rev;
		} else {
			kvs_store_wq_push(d, rev);
		}
		d->jobs++;
		rev = next;
	}
	return leave && !d->vis_head && !d->seq_head && !d->revisits && !d->def_head &&
	       !d->rq_head && !d->wq_head && d->jobs == 0 &&
	       d->reads_inflight + d->writes_inflight == 0;
}

/* How long epoll may sleep (ms; -1 is never chosen: IDLE_MS bounds it). */
static int sleep_ms(struct disp *d)
{
	uint64_t now = kvs_now_ns(), until = now + (uint64_t)IDLE_MS * KVS_NSEC_PER_MSEC;
	bool inflight = d->reads_inflight + d->writes_inflight > 0;

	for (struct kvs_store_task *t = d->vis_head; t; t = t->next)
		if (t->deadline_ns < until)
			until = t->deadline_ns;
	for (struct kvs_store_task *t = d->seq_head; t; t = t->next)
		if (t->deadline_ns < until)
			until = t->deadline_ns;
	for (struct kvs_store_job *j = d->retries; j; j = j->next)
		if (j->retry_ns < until)
			until = j->retry_ns;
	if (d->def_head && d->def_next_ns < until)
		until = d->def_next_ns;
	if (inflight && d->poll_err && d->poll_retry_ns < until)
		until = d->poll_retry_ns;
	if (until <= now)
		return 0;
	/* round up: waking a little late is fine, early is a wasted wake */
	return (int)((until - now + KVS_NSEC_PER_MSEC - 1) / KVS_NSEC_PER_MSEC);
}

static void disp_sleep(struct disp *d)
{
	struct kvs_store *s = d->s;
	struct epoll_event ev[2];
	uint64_t v;
	int n = epoll_wait(d->epfd, ev, 2, sleep_ms(d));

	for (int i = 0; i < n; i++)
		if (ev[i].data.fd == s->wake_fd && read(s->wake_fd, &v, sizeof(v)) < 0 &&
		    errno != EAGAIN)
			kvs_log_debug(&s->log, "store: wake read: %s", kvs_strerror(-errno));
}

static int disp_init(struct disp *d, struct kvs_store *s)
{
	struct epoll_event ev = { .events = EPOLLIN };
	uint32_t depth;
	int bfd;

	memset(d, 0, sizeof(*d));
	d->s = s;
	d->out = s->visits;
	/* Writes take at most three quarters of the backend's queue (all of a
	 * queue of one): reads always find room. */
	depth = s->cfg.backend.kind == KVS_BACKEND_LATENCY && s->cfg.backend.latency_queue_depth
			? s->cfg.backend.latency_queue_depth
			: s->cfg.backend.queue_depth;
	d->write_cap = depth > 1 ? depth - (depth / 4 ? depth / 4 : 1) : 1;
	d->read_cap = depth < KVS_STORE_OWNED_READS_MAX ? depth : KVS_STORE_OWNED_READS_MAX;
	d->epfd = kvs_fd_above_stdio(epoll_create1(EPOLL_CLOEXEC));
	if (d->epfd < 0)
		return -errno;
	ev.data.fd = s->wake_fd;
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, s->wake_fd, &ev) < 0)
		return -errno;
	bfd = kvs_backend_wait_fd(s->backend);
	if (bfd >= 0) {
		ev.data.fd = bfd;
		if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, bfd, &ev) == 0)
			d->backend_fd = true;
	}
	if (!d->backend_fd)
		kvs_log_info(&s->log, "store: the backend has no wait descriptor (%s): transfers in "
				      "flight are waited for in its poll, %d ms at a time",
			     kvs_strerror(bfd < 0 ? bfd : -errno), NOFD_SLICE_MS);
	return 0;
}

void *kvs_store_dispatcher(void *arg)
{
	struct kvs_store *s = arg;
	struct disp d;
	int rc = disp_init(&d, s);

	if (rc)
		kvs_log_error(&s->log, "store: dispatcher: epoll: %s (tasks will time out)",
			      kvs_strerror(rc));
	for (;;) {
		bool progress;

		if (take_inputs(&d))
			break;
		progress = kvs_store_submit_reads(&d);
		progress |= kvs_store_submit_writes(&d);
		progress |= kvs_store_reap(&d, 0);
		progress |= visit_some(&d); /* ends with flush_visits: the copier woken once */
		if (progress)
			continue;
		if (d.prealloc_due && !d.rq_head) {
			prealloc_next(&d);
			continue;
		}
		if (!d.backend_fd && !d.poll_err && d.reads_inflight + d.writes_inflight)
			/* nothing to sleep on but the backend's own poll: completions
			 * reaped as they come, a submit waits a slice at most */
			kvs_store_reap(&d, NOFD_SLICE_MS * KVS_NSEC_PER_MSEC);
		else if (d.epfd >= 0)
			disp_sleep(&d);
		else
			usleep(NOFD_SLICE_MS * 1000); /* no epoll: a failed open, bounded */
	}
	kvs_log_limit_flush(&s->log, &d.write_log, KVS_LOG_ERROR, "backend write errors");
	if (d.epfd >= 0)
		close(d.epfd);
	/* The issuing thread closes the backend (io_uring reaps here). */
	kvs_backend_close(s->backend);
	s->backend = NULL;
	pthread_mutex_lock(&s->mu);
	s->disp_exited = true;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_copier(s);
	kvs_store_thread_exit(s);
	return NULL;
}
