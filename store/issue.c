/*
 * store/issue.c — the dispatcher's transfers (dispatch.c, "Transfers"): the
 * queues of owned reads and block writes, their submits within read_cap and
 * write_cap, the reaping of completions, and what each completion does -- an
 * owned read published READY or FAILED at once, a block write's attempt ended
 * exactly once.  Only the dispatcher thread runs any of it; struct disp is
 * dispatch.h's.
 */
#include <errno.h>

#include "common/clock.h"
#include "store/dispatch.h"

/* Completions reaped per poll call. */
#define DISPATCH_REAP 64u
/* Backoff after a failed poll: doubling from the first to the last. */
#define POLL_BACKOFF_MIN_NS (1 * KVS_NSEC_PER_MSEC)
#define POLL_BACKOFF_MAX_NS KVS_NSEC_PER_SEC

/* Owned reads of this thread's visits go straight to its queue. */
void kvs_store_rq_push(struct disp *d, struct kvs_store_xfer *xf)
{
	xf->next = NULL;
	if (d->rq_tail)
		d->rq_tail->next = xf;
	else
		d->rq_head = xf;
	d->rq_tail = xf;
}

/* The owner's read of xf's shard ended with err: publish, then the copier. */
static void read_done(struct disp *d, struct kvs_store_xfer *xf, int err)
{
	struct kvs_store *s = d->s;
	struct kvs_store_sh *sh = xf->owner;
	int rc;

	/* relaxed: ordered by the reference drop below (the copier reads it after
	 * it saw our reference gone) */
	atomic_store_explicit(&xf->result, err, memory_order_relaxed);
	if (err) {
		KVS_STORE_COUNT_FAILURE(s, read_errors); /* its owner_reads was counted */
		rc = kvs_slot_publish_failed(s->cache, &sh->slot, err);
	} else {
		rc = kvs_slot_publish_ready(s->cache, &sh->slot);
	}
	if (rc)
		kvs_log_error(&s->log, "store: publishing slot %u: %s", sh->slot.index,
			      kvs_strerror(rc));
	/* Our reference, last: after it, sh may be gone.  acq_rel: the result and
	 * the publish happen before the copier sees the reference dropped (its
	 * acquire), so it releases the pin before it finishes the shard; if we are
	 * the last (the copier gave up on the shard at its deadline), the release
	 * takes a bucket lock, which this thread never waits for: the copier's. */
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1) {
		atomic_store_explicit(&sh->refs, 1, memory_order_relaxed); /* the copier's now */
		kvs_store_handoff_release(s, sh);
	} else {
		d->copier_due = true; /* woken once for the completions reaped together */
	}
}

void kvs_store_wq_push(struct disp *d, struct kvs_store_job *job)
{
	job->next = NULL;
	job->queued = true;
	if (d->wq_tail)
		d->wq_tail->next = job;
	else
		d->wq_head = job;
	d->wq_tail = job;
}

static void wq_pop(struct disp *d)
{
	d->wq_head->queued = false;
	d->wq_head = d->wq_head->next;
	if (!d->wq_head)
		d->wq_tail = NULL;
}

/* A block write's attempt is over -- every write back, or a failure and nothing
 * left in flight -- and it is off the write queue: exactly once per attempt.
 * The copier cleans its slots and ends its claim, or retries it. */
static void job_end(struct disp *d, struct kvs_store_job *job)
{
	d->jobs--;
	kvs_store_handoff_job_done(d->s, job);
}

static void write_done(struct disp *d, struct kvs_store_xfer *xf, int err)
{
	struct kvs_store *s = d->s;
	struct kvs_store_job *job = xf->owner;

	if (err) {
		KVS_STORE_COUNT_FAILURE(s, write_errors); /* its backend_writes was counted */
		if (!job->err) { /* the attempt's first: the copier says the rest */
			kvs_log_limited(&s->log, &d->write_log, KVS_STORE_LOG_INTERVAL_NS,
					KVS_LOG_ERROR, "store: backend write of shard %u of claim %u: %s",
					xf->shard, job->claim.idx, kvs_strerror(err));
			job->err = err; /* a job still queued leaves it in submit_writes */
		}
	}
	job->inflight--;
	if (job->inflight == 0 && !job->queued)
		job_end(d, job);
}

bool kvs_store_submit_reads(struct disp *d)
{
	struct kvs_store *s = d->s;
	struct kvs_store_xfer *xf;
	bool progress = false;

	while ((xf = d->rq_head) && d->reads_inflight < d->read_cap) {
		struct kvs_backend_io io = {
			.block = xf->block, .shard = xf->shard, .buf = xf->buf,
			.len = s->slot_bytes, .token = (uint64_t)(uintptr_t)xf,
		};
		int rc = kvs_backend_submit_read(s->backend, &io);

		if (rc == -EAGAIN)
			break;
		d->rq_head = xf->next;
		if (!d->rq_head)
			d->rq_tail = NULL;
		progress = true;
		/* An attempt, taken or refused: counted before read_done can count
		 * its failure, so read_errors stays within owner_reads. */
		KVS_STORE_COUNT(s, owner_reads, 1);
		if (rc) {
			read_done(d, xf, rc);
			continue;
		}
		d->reads_inflight++;
	}
	return progress;
}

/* Retries whose backoff is over join the write queue. */
static bool retries_due(struct disp *d)
{
	struct kvs_store_job **link = &d->retries, *job;
	uint64_t now = kvs_now_ns();
	bool any = false;

	while ((job = *link)) {
		if (now < job->retry_ns) {
			link = &job->next;
			continue;
		}
		*link = job->next;
		kvs_store_wq_push(d, job);
		any = true;
	}
	return any;
}

/* Hand writes to the backend, block by block in queue order, within write_cap.
 * A block whose attempt failed leaves the queue at once (its writes in flight
 * still end it, in write_done). */
bool kvs_store_submit_writes(struct disp *d)
{
	struct kvs_store *s = d->s;
	struct kvs_store_job *job;
	bool progress = retries_due(d);

	while ((job = d->wq_head) && (job->err || d->writes_inflight < d->write_cap)) {
		struct kvs_store_xfer *xf = &job->xf[job->next_submit];
		struct kvs_backend_io io = {
			.block = xf->block, .shard = xf->shard, .buf = xf->buf,
			.len = s->slot_bytes, .token = (uint64_t)(uintptr_t)xf,
		};
		int rc = job->err ? job->err : kvs_backend_submit_write(s->backend, &io);

		if (rc == -EAGAIN)
			break;
		progress = true;
		if (!job->err) {
			/* An attempt, taken or refused (the shards of an attempt that
			 * failed already are not tried): counted before its failure. */
			KVS_STORE_COUNT(s, backend_writes, 1);
			if (rc)
				KVS_STORE_COUNT_FAILURE(s, write_errors);
		}
		if (rc) {
			if (!job->err)
				job->err = rc;
			wq_pop(d);
			if (job->inflight == 0)
				job_end(d, job);
			continue;
		}
		job->next_submit++;
		job->inflight++;
		d->writes_inflight++;
		if (job->next_submit == job->n)
			wq_pop(d); /* its completions end it */
	}
	return progress;
}

bool kvs_store_reap(struct disp *d, uint64_t timeout_ns)
{
	struct kvs_store *s = d->s;
	struct kvs_backend_completion comp[DISPATCH_REAP];
	bool progress = false;
	int n;

	if (d->reads_inflight + d->writes_inflight == 0)
		return false;
	if (d->poll_err && kvs_now_ns() < d->poll_retry_ns)
		return false;
	do {
		n = kvs_backend_poll(s->backend, comp, DISPATCH_REAP, timeout_ns);
		timeout_ns = 0;
		if (n < 0) {
			if (n != d->poll_err)
				kvs_log_error(&s->log, "store: backend poll: %s (retrying with a "
						       "backoff; transfers in flight wait)",
					      kvs_strerror(n));
			d->poll_err = n;
			d->poll_retry_ns = kvs_now_ns() + kvs_store_backoff_next(&d->poll_backoff,
										 POLL_BACKOFF_MIN_NS,
										 POLL_BACKOFF_MAX_NS);
			return progress;
		}
		if (d->poll_err && n > 0)
			kvs_log_info(&s->log, "store: backend poll works again");
		if (n > 0) {
			d->poll_err = 0;
			d->poll_backoff.step_ns = 0;
		}
		for (int i = 0; i < n; i++) {
			struct kvs_store_xfer *xf = (struct kvs_store_xfer *)(uintptr_t)comp[i].token;
			int err = comp[i].result == (int64_t)s->slot_bytes ? 0
				  : comp[i].result < 0			 ? (int)comp[i].result
									 : -EIO;

			progress = true;
			if (xf->op == KVS_XFER_READ) {
				d->reads_inflight--;
				read_done(d, xf, err);
			} else {
				d->writes_inflight--;
				write_done(d, xf, err);
			}
		}
	} while (n == (int)DISPATCH_REAP);
	return progress;
}
