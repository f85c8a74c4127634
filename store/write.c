/*
 * store/write.c — a block's write or drop under its claim, the copier's half of
 * the dump protocol that touches the backend's record (docs/store.md, "Dumps";
 * store/dump.c decides when, model/dump.pml checks how).
 *
 *   write    the writer takes the block's claim (core/claim.c: the right to
 *            write or drop it, held by a live rank), scans the block again under
 *            it (every shard DIRTY: written; one READY over an atomic backend:
 *            the block is stored already, its DIRTY shards cleaned), hands a job
 *            of one write per shard to the dispatcher -- from the slots, no pin:
 *            nothing evicts or drops a DIRTY slot while the claim is ours -- and
 *            when the attempt is over cleans them (READY) and ends the claim
 *            STORED for a grace.  A failed attempt is retried with a doubling
 *            backoff for timeout_ms after the first failure, then given up: the
 *            shards dropped (FAILED with the error), logged at ERROR.  Errors no
 *            attempt can cure are final at once.  A block found STORED lately is
 *            not written again: its DIRTY copies are cleaned under the STORED
 *            record, held for it (a slot leaves DIRTY only under its block's
 *            claim, so a write's slots are never cleaned -- then evicted, re-keyed
 *            -- under it).
 *   drop     an incomplete block whose every DIRTY shard's protection is over:
 *            the claim taken DROPPING, kvs_core_dirty_fence (the other side of
 *            store/dump.c acknowledge's), the block scanned again (complete by
 *            then: written instead, never dropped), each shard dropped only if
 *            still unprotected under its bucket lock, logged.
 *
 * A claim this rank holds is always ended: one whose end could not take the
 * table's lock is kept on d->ending and ended later (a claim held and
 * forgotten would keep its block from every writer while this rank lives).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/dump.h"

/* A failed block write's next attempt: after a backoff doubling from the first
 * to the last, for timeout_ms after the first failure. */
#define WRITE_RETRY_MIN_NS (50ull * KVS_NSEC_PER_MSEC)
#define WRITE_RETRY_MAX_NS (2ull * KVS_NSEC_PER_SEC)

/* The block's DIRTY slots of d->scan (a full scan) become READY: the block is
 * in the backend.  Returns how many are left (a bucket lock not had). */
static uint32_t clean_scanned(struct kvs_store *s, struct kvs_store_dumps *d)
{
	uint32_t left = 0;

	for (uint32_t i = 0; i < s->spb; i++)
		if (d->scan[i].generation || d->scan[i].index)
			left += kvs_core_dirty_clean(s->cache, d->scan[i].index, d->scan[i].generation) ==
				-ETIMEDOUT;
	return left;
}

/* Our claim ref ends with err.  The table's lock not had: ended later, from
 * `ending` (job, or a job of no shards made for it: a claim we hold and never
 * end would keep its block from every writer while we live).  Frees job when
 * the claim ended. */
static void claim_finish(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job,
			 const struct kvs_claim_ref *ref, int err)
{
	if (kvs_core_claim_end(s->cache, ref, err) != -ETIMEDOUT) {
		free(job);
		return;
	}
	if (!job && (job = calloc(1, sizeof(*job))))
		job->claim = *ref;
	if (!job) {
		kvs_log_error(&s->log, "store: claim %u not ended (no memory): its block waits for "
				       "this rank's exit", ref->idx);
		return;
	}
	job->err = err;
	job->next = d->ending;
	d->ending = job;
	kvs_store_dumps_lock_busy(d, kvs_now_ns());
}

/* Our claim ref ends with err (no job of ours). */
static void claim_end(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      int err)
{
	claim_finish(s, d, NULL, ref, err);
}

/* Scan block (full) into d->scan under our claim ref: clean it if stored, hand
 * its write to the dispatcher if complete, end the claim if there is nothing
 * to write.  *waiting: the table had no room or a lock was not had (the block
 * is looked at again). */
static void write_claimed(struct kvs_store *s, struct kvs_store_dumps *d,
			  const struct kvs_claim_ref *ref, const struct kvs_block_id *block)
{
	struct kvs_cache *c = s->cache;
	struct kvs_dirty_scan sc;
	struct kvs_store_job *job;
	uint32_t n = s->spb;
	int rc;

	memset(d->scan, 0, n * sizeof(*d->scan));
	rc = kvs_core_dirty_scan(c, block, kvs_now_ns(), true, &sc, d->scan);
	if (rc) {
		/* a bucket lock not had: let go, look again later */
		claim_end(s, d, ref, rc);
		kvs_store_blocks_add(&d->look, block, 0);
		kvs_store_dumps_lock_busy(d, kvs_now_ns());
		return;
	}
	if (s->block_atomic && sc.ready && sc.dirty) {
		/* a shard READY: the backend has the block, the DIRTY ones are
		 * its bytes (one left DIRTY is looked at again by a sweep) */
		clean_scanned(s, d);
		claim_end(s, d, ref, 0);
		return;
	}
	if (sc.dirty != n) {
		claim_end(s, d, ref, -KVS_EINCOMPLETE); /* nothing to write (yet) */
		return;
	}
	job = calloc(1, sizeof(*job) + n * sizeof(job->xf[0]) + n * sizeof(*job->shards));
	if (!job) {
		claim_end(s, d, ref, -ENOMEM);
		kvs_store_blocks_add(&d->look, block, kvs_now_ns() + KVS_STORE_LOCK_RETRY_MAX_NS);
		return;
	}
	job->shards = (struct kvs_dirty_shard *)&job->xf[n];
	job->claim = *ref;
	job->block = *block;
	job->n = n;
	memcpy(job->shards, d->scan, n * sizeof(*job->shards));
	for (uint32_t i = 0; i < n; i++)
		job->xf[i] = (struct kvs_store_xfer){
			.op = KVS_XFER_WRITE, .shard = i, .block = *block,
			.buf = kvs_core_slot_addr(c, d->scan[i].index), .owner = job,
		};
	d->jobs++;
	kvs_store_handoff_job(s, job);
}

/* Block is stored lately (a peer's write, or a shard read from the backend):
 * its DIRTY shards are its bytes, cleaned under the STORED record held (a slot
 * leaves DIRTY only under a claim held, so a writer's slots are never cleaned,
 * then evicted, under its write). */
static void clean_stored(struct kvs_store *s, struct kvs_store_dumps *d,
			 const struct kvs_claim_ref *ref, const struct kvs_block_id *block)
{
	struct kvs_dirty_scan sc;
	int rc;

	memset(d->scan, 0, s->spb * sizeof(*d->scan));
	rc = kvs_core_dirty_scan(s->cache, block, kvs_now_ns(), true, &sc, d->scan);
	if (rc == 0 && clean_scanned(s, d) == 0) {
		claim_end(s, d, ref, 0);
		return;
	}
	claim_end(s, d, ref, 0); /* a lock not had: looked at again */
	kvs_store_blocks_add(&d->look, block, 0);
	kvs_store_dumps_lock_busy(d, kvs_now_ns());
}

/* Write block, if nobody does: take its claim and write what it holds. */
void kvs_store_block_write(struct kvs_store *s, struct kvs_store_dumps *d,
			   const struct kvs_block_id *block)
{
	struct kvs_claim_ref ref;
	struct kvs_claim_view v;
	int rc = kvs_core_claim_take(s->cache, block, KVS_SHM_CLAIM_WRITING, &ref, &v);

	if (rc == 1) {
		write_claimed(s, d, &ref, block);
	} else if (rc == 0 && v.state == KVS_SHM_CLAIM_STORED &&
		   kvs_core_claim_take(s->cache, block, KVS_SHM_CLAIM_STORED, &ref, &v) == 1) {
		clean_stored(s, d, &ref, block); /* its DIRTY shards are the stored bytes */
	} else if (rc == -ENOSPC) {
		kvs_store_blocks_add(&d->room, block, 0); /* the claims bell: room */
	} else if (rc < 0) {
		kvs_store_blocks_add(&d->look, block, 0);
		kvs_store_dumps_lock_busy(d, kvs_now_ns());
	}
	/* 0, held: a live rank writes or drops it; if it dies, the next look (a
	 * sweep, a later dump) takes its claim over */
}

/*
 * How long before another attempt of job, whose attempt failed with job->err,
 * or 0: none.  An error another attempt cannot cure is final -- the store
 * refuses this write (read-only, no permission, another geometry, a bad
 * argument, too large).  Any other (a timeout, a connection refused or reset,
 * EIO, a full disk) is retried: the block's dumps may have been acknowledged
 * (dump_wait=cached), so it is given up only after timeout_ms of failures,
 * WRITE_RETRY_MIN_NS doubling to WRITE_RETRY_MAX_NS apart.
 */
static uint64_t job_retry_wait(const struct kvs_store *s, struct kvs_store_job *job, uint64_t now)
{
	int e = job->err;
	uint64_t wait;

	if (e == -EROFS || e == -EACCES || e == -EPERM || e == -EINVAL || e == -EFBIG ||
	    e == -EOPNOTSUPP || e == -ENAMETOOLONG || e == -KVS_ECONFIG)
		return 0;
	if (job->attempts++ == 0)
		job->first_fail_ns = now;
	wait = kvs_store_backoff_next(&job->backoff, WRITE_RETRY_MIN_NS, WRITE_RETRY_MAX_NS);
	return now + wait < job->first_fail_ns + s->cfg.timeout_ns ? wait : 0;
}

/* Clean (or, given up, drop) job's slots from job->cleaned on; end its claim.
 * A bucket lock not had: kept on `ending`, again later. */
void kvs_store_job_settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job)
{
	for (; job->cleaned < job->n; job->cleaned++) {
		const struct kvs_dirty_shard *sl = &job->shards[job->cleaned];
		int rc = job->err ? kvs_core_dirty_drop(s->cache, sl->index, sl->generation, job->err, 0)
				  : kvs_core_dirty_clean(s->cache, sl->index, sl->generation);

		if (rc == -ETIMEDOUT) {
			job->next = d->ending;
			d->ending = job;
			kvs_store_dumps_lock_busy(d, kvs_now_ns());
			return;
		}
	}
	claim_finish(s, d, job, &job->claim, job->err);
}

void kvs_store_job_finish(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job)
{
	uint64_t now = kvs_now_ns(), wait = job->err ? job_retry_wait(s, job, now) : 0;

	if (wait) {
		kvs_log_limited(&s->log, &d->retry_log, KVS_STORE_LOG_INTERVAL_NS, KVS_LOG_WARN,
				"store: block write of claim %u failed: %s; attempt %u in %llu ms",
				job->claim.idx, kvs_strerror(job->err), job->attempts + 1,
				(unsigned long long)(wait / KVS_NSEC_PER_MSEC));
		kvs_core_claim_retry(s->cache, &job->claim, job->err);
		job->err = 0;
		job->next_submit = 0;
		job->retry_ns = now + wait;
		kvs_store_handoff_job(s, job);
		return;
	}
	d->jobs--;
	if (job->err)
		kvs_log_limited(&s->log, &d->given_up_log, KVS_STORE_LOG_INTERVAL_NS, KVS_LOG_ERROR,
				"store: block write of claim %u failed: %s; given up after %u "
				"attempt%s: the block is not in the backend, its %u dumped shards are "
				"dropped (a dump_wait=cached dump of it may have returned 0)",
				job->claim.idx, kvs_strerror(job->err), job->attempts + 1,
				job->attempts ? "s" : "", job->n);
	kvs_store_job_settle(s, d, job);
}

/* ---- dropping a block that never completed ---- */

/* Block looked incomplete, every DIRTY shard past its protection: drop them,
 * under the claim (DROPPING), after scanning it again there. */
void kvs_store_block_drop(struct kvs_store *s, struct kvs_store_dumps *d,
			  const struct kvs_block_id *block)
{
	struct kvs_cache *c = s->cache;
	struct kvs_claim_ref ref;
	struct kvs_claim_view v;
	struct kvs_dirty_scan sc;
	uint64_t now;
	uint32_t dropped = 0;
	int rc = kvs_core_claim_take(c, block, KVS_SHM_CLAIM_DROPPING, &ref, &v);

	if (rc == -ENOSPC) {
		kvs_store_blocks_add(&d->room, block, 0);
		return;
	}
	if (rc < 0) {
		kvs_store_dumps_lock_busy(d, kvs_now_ns());
		return;
	}
	if (rc == 0)
		return; /* a live rank writes or drops it, or it is stored */
	/* the Dekker pair with store/dump.c acknowledge: a dump that made a
	 * shard DIRTY is seen by this scan, or sees this claim and dumps again
	 * after it */
	kvs_core_dirty_fence(c);
	now = kvs_now_ns();
	memset(d->scan, 0, s->spb * sizeof(*d->scan));
	rc = kvs_core_dirty_scan(c, block, now, true, &sc, d->scan);
	if (rc == 0 && sc.dirty == s->spb) {
		/* complete now: written, never dropped (the claim let go if it
		 * cannot become the write's: the block is looked at again) */
		if (kvs_core_claim_convert(c, &ref, KVS_SHM_CLAIM_WRITING) == 0) {
			write_claimed(s, d, &ref, block);
			return;
		}
		kvs_store_blocks_add(&d->look, block, 0);
		kvs_store_dumps_lock_busy(d, now);
	} else if (rc == 0 && !sc.fresh && !(s->block_atomic && sc.ready)) {
		for (uint32_t i = 0; i < s->spb; i++)
			if (d->scan[i].generation || d->scan[i].index)
				/* only if still unprotected, under its bucket lock */
				dropped += kvs_core_dirty_drop(c, d->scan[i].index, d->scan[i].generation,
							       -KVS_EINCOMPLETE, now) == 1;
	}
	claim_end(s, d, &ref, -KVS_EINCOMPLETE);
	if (dropped)
		kvs_log_limited(&s->log, &d->dropped_log, KVS_STORE_LOG_INTERVAL_NS, KVS_LOG_WARN,
				"store: a block never completed: %u of its %u shards were dumped, by "
				"dumps whose deadlines passed %llu ms ago; those %u dumped shards are "
				"dropped, never in the backend (dump every shard of a block, every "
				"layer of every rank, within timeout_ms)",
				sc.dirty, s->spb,
				(unsigned long long)((now - (sc.until_ns - KVS_CLAIM_GRACE_NS)) /
						     KVS_NSEC_PER_MSEC), dropped);
}
