/*
 * store/dump.c — the dump protocol on the copier's side (docs/store.md,
 * "Dumps"): what a dumped shard does once its slot holds valid bytes, how a
 * durable dump learns that its block is in the backend, and the block writes
 * this rank makes as a claim's writer.  The contract it keeps: a dump that
 * returned 0 (durable; or cached, and then written) is in the backend.
 *
 * Settling a shard (settle).  Its slot is DIRTY (gathered by this rank and
 * published DIRTY here, or a peer's dump) or, over a backend whose blocks are
 * not atomic, READY (a shard read from it proves only itself).  It joins its
 * block's claim (core/claim.c) and counts the slot in it.  A claim it starts
 * first counts every shard of the block the cache already holds
 * (kvs_core_claim_recount: dumped under a claim that expired, failed or was
 * freed), so that a block complete in the cache always completes its claim;
 * over an atomic backend a READY shard there means the block is stored.  The
 * count that completes the block makes its designated writer write it (below).
 * Then the shard's pin goes (the claim keeps the slot from eviction), and the
 * shard is finished (dump_wait=cached) or waits (durable) for the claim to end:
 * DURABLE is 0, FAILED is the write's error.  A full claim table parks the
 * shard (its pin kept) until a claim is freed.  A shard found READY over an
 * atomic backend (kvs_store_dump_found) is in the backend: its block's OPEN
 * claim ends DURABLE there, so the dumps of its other shards need not wait for
 * a count that never completes.
 *
 * Who writes.  Every rank that joined a claim watches it (a watch entry, in
 * either dump_wait mode) until it ends.  Once the block is complete, the rank
 * that counted its designated shard (core/claim.c: a hash of the block picks
 * it, so writes spread over the ranks whatever their timing; the completer
 * rings that rank's bell) elects itself and writes; if it has not within
 * WRITER_GRACE_NS, or it died, or nobody counted that shard in this
 * generation, any watcher does.  A writer that died is replaced the same way
 * (found once per slice with `check`): the new writer writes the block from the
 * cache.  A closing rank (kvs_store_dumps_close) watches every complete block
 * nobody may write any more besides those it watched, and writes each as soon as
 * it may -- at once when the designated writer is itself, nobody or dead; after
 * the grace when that writer is alive (it is writing, or about to: a closer that
 * took the block from under it raced it, and failed the durable dumps of the
 * block when its own backend was the failing one) -- before its copier leaves: a
 * clean close never drops a block it can still write, and costs at most the
 * grace more.
 *
 * Waiting (kvs_store_dumps_poll).  Durable waits hold no pin: each names its
 * claim generation.  Waits and watches are looked at when the rank's bell rings
 * (every writer that ends a claim rings its waiters' bells), when a block write
 * of ours finishes or an entry was added, at a deadline, and once per slice.
 * A claim that moved on to another generation (expired, or failed and retried
 * by another dump) sends the shard back to the dispatcher to be visited again:
 * its device bytes are still the caller's until the task ends.  At the deadline
 * a wait ends -KVS_EINCOMPLETE (the block never completed on this node) or the
 * write's last error, or -ETIMEDOUT (its write did not finish).  No backend is
 * asked anything here: a question to a store that stopped answering would hold
 * every other task of this thread.
 *
 * Block writes (kvs_store_job).  Built here once the pins leave room (every
 * shard pinned), written by the dispatcher (one write per shard, from the
 * slots; the posix backend renames the block after the last one), cleaned
 * there (DIRTY -> READY), finished here: pins released, claim ended, which
 * rings every waiter.  A write has no deadline; an attempt that fails with an
 * error another attempt may not have is retried with a doubling backoff for
 * timeout_ms (job_retry_wait), its claim still WRITING with the attempt's error
 * (a durable dump reports it at its deadline); then it is given up, loudly.  A
 * shard that vanished before the write (an expired claim's slot, evicted) ends
 * the claim FAILED with -KVS_EINCOMPLETE; a shard found READY over an atomic
 * backend means the block is stored already (read from it by a load): the
 * claim ends DURABLE without a write.
 *
 * The claim table's lock.  This thread waits for it (and for bucket locks) at
 * most KVS_STORE_LOCK_WAIT_NS at a time (kvs_core_lock_wait_set): a peer
 * stopped while holding it must not stop every load and dump of this rank.
 * What could not take it is parked -- shards on `locked`, claim ends on
 * `ending`, the adoption of a dead rank's blocks -- and tried again after a
 * backoff doubling from LOCK_RETRY_MIN_NS to LOCK_RETRY_MAX_NS; a parked shard
 * past its task's deadline finishes -ETIMEDOUT, said once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/store.h"

/* How long a complete block waits for its designated writer before any watcher
 * writes it. */
#define WRITER_GRACE_NS (100ull * KVS_NSEC_PER_MSEC)
/* A failed block write's next attempt: after a backoff doubling from the first
 * to the last, for timeout_ms after the first failure. */
#define WRITE_RETRY_MIN_NS (50ull * KVS_NSEC_PER_MSEC)
#define WRITE_RETRY_MAX_NS (2ull * KVS_NSEC_PER_SEC)
/* How many blocks found stored a rank remembers, and for how long: a dump of a
 * block's other shards a moment later (the next layer's task, whose slot was
 * evicted meanwhile) is durable by that finding, not by shards that may be gone
 * by then; past the claims' grace it proves nothing (the copy may be gone). */
#define FOUND_RECENT 64u
#define FOUND_FOR_NS KVS_CLAIM_GRACE_NS

/* A claim this rank joined: its election duty, until the claim ends. */
struct watch {
	struct kvs_claim_ref ref;
	struct kvs_block_id block;
	uint64_t deadline_ns;          /* the latest deadline of our dumps of the block */
	uint64_t complete_ns;          /* first seen complete with no writer (0: not yet) */
};

struct kvs_store_dumps {
	struct kvs_store_sh *waiting;  /* durable waits, by sh->next (no pin) */
	struct kvs_store_sh *room;     /* shards (pinned) waiting for a free claim */
	struct kvs_store_sh *locked;   /* shards (pinned) to settle once the table's lock is had */
	struct kvs_store_job *ending;  /* block writes over whose claim is still to end */
	bool adopt_due;                /* the dead ranks' blocks still to be looked for */
	uint64_t lock_retry_ns;        /* when what waits for the lock tries again (0: nothing) */
	struct kvs_store_backoff lock_backoff;
	uint32_t room_bell;            /* the claim table's bell before their last try */
	uint32_t rank_bell;            /* our rank's bell before the last look at waits */
	bool stale;                    /* something to look at without a bell (entries
					  added, a write of ours finished) */
	bool closing;                  /* the store closes: complete blocks written now */
	uint64_t next_ns;              /* the earliest deadline or grace among them */
	struct watch *watch;
	uint32_t nwatch, wcap;
	struct kvs_claim_ref *mine;    /* claims whose block write is ours, in progress */
	uint32_t nmine, cap;
	struct watch *pend;            /* claims we were elected to write, waiting for pin
					  * room (only .ref and .block used), oldest first */
	uint32_t npend, pcap;
	uint32_t job_pins;             /* slots our block writes pin */
	/* Blocks a dump of this rank found stored (a READY shard over an atomic
	 * backend) lately: a ring, each entry proof for FOUND_FOR_NS. */
	struct found {
		struct kvs_block_id block;
		uint64_t at_ns;        /* 0: unused */
	} found[FOUND_RECENT];
	uint32_t found_next;
	/* Block writes retried and given up: a backend down fails every one. */
	struct kvs_log_limit retry_log, given_up_log;
};

int kvs_store_dumps_init(struct kvs_store *s, struct kvs_store_dumps **out)
{
	(void)s;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void kvs_store_dumps_fini(struct kvs_store *s, struct kvs_store_dumps *d)
{
	if (!d)
		return;
	kvs_log_limit_flush(&s->log, &d->retry_log, KVS_LOG_WARN, "block write retries");
	kvs_log_limit_flush(&s->log, &d->given_up_log, KVS_LOG_ERROR,
			    "block writes given up (those blocks are not in the backend)");
	free(d->watch);
	free(d->mine);
	free(d->pend);
	free(d);
}

bool kvs_store_dumps_busy(const struct kvs_store_dumps *d)
{
	return d && (d->waiting || d->room || d->locked || d->ending || d->adopt_due || d->nmine ||
		     d->npend || (d->closing && d->nwatch));
}

static bool same_ref(const struct kvs_claim_ref *a, const struct kvs_claim_ref *b)
{
	return a->idx == b->idx && a->gen == b->gen;
}

static bool is_mine(const struct kvs_store_dumps *d, const struct kvs_claim_ref *ref)
{
	for (uint32_t i = 0; i < d->nmine; i++)
		if (same_ref(&d->mine[i], ref))
			return true;
	return false;
}

static int mine_add(struct kvs_store_dumps *d, const struct kvs_claim_ref *ref)
{
	if (d->nmine == d->cap) {
		uint32_t cap = d->cap ? 2 * d->cap : 16;
		struct kvs_claim_ref *v = realloc(d->mine, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		d->mine = v;
		d->cap = cap;
	}
	d->mine[d->nmine++] = *ref;
	return 0;
}

static void mine_del(struct kvs_store_dumps *d, const struct kvs_claim_ref *ref)
{
	for (uint32_t i = 0; i < d->nmine; i++)
		if (same_ref(&d->mine[i], ref)) {
			d->mine[i] = d->mine[--d->nmine];
			return;
		}
}

/* Watch claim ref of block until deadline (one entry per claim generation). */
static void watch_add(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      const struct kvs_block_id *block, uint64_t deadline_ns)
{
	for (uint32_t i = 0; i < d->nwatch; i++)
		if (same_ref(&d->watch[i].ref, ref)) {
			if (d->watch[i].deadline_ns < deadline_ns)
				d->watch[i].deadline_ns = deadline_ns;
			return;
		}
	if (d->nwatch == d->wcap) {
		uint32_t cap = d->wcap ? 2 * d->wcap : 64;
		struct watch *v = realloc(d->watch, cap * sizeof(*v));

		if (!v) {
			/* no duty of ours, then: the other watchers elect after the grace */
			kvs_log_warn(&s->log, "store: out of memory for a claim watch");
			return;
		}
		d->watch = v;
		d->wcap = cap;
	}
	d->watch[d->nwatch++] = (struct watch){ *ref, *block, deadline_ns, 0 };
	if (deadline_ns < d->next_ns)
		d->next_ns = deadline_ns;
}

static void finish(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	kvs_store_sh_finish(s, sh, err);
}

/* Drop sh's pin, keeping the shard (its wait needs none). */
static void unpin(struct kvs_store *s, struct kvs_store_sh *sh)
{
	if (sh->flags & KVS_SH_GOT) {
		sh->flags &= ~KVS_SH_GOT;
		kvs_store_release(s, &sh->slot, true);
	}
}

/* ---- the claim table's lock, not had ---- */

/* A claim operation did not get the table's lock within this thread's short
 * wait (a peer holds it: busy, or stopped inside).  What waits for it tries
 * again after the backoff. */
static void lock_busy(struct kvs_store_dumps *d, uint64_t now)
{
	d->lock_retry_ns = now + kvs_store_backoff_next(&d->lock_backoff, KVS_STORE_LOCK_RETRY_MIN_NS,
							KVS_STORE_LOCK_RETRY_MAX_NS);
	if (d->lock_retry_ns < d->next_ns)
		d->next_ns = d->lock_retry_ns;
}

/* Park shard sh (pinned) until the lock may be had. */
static void park(struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	sh->next = d->locked;
	d->locked = sh;
	lock_busy(d, kvs_now_ns());
}

/* ---- block writes ---- */

static bool wait_step(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now);

/* A claim of ours ended (our write, or a write we never started): our waits on
 * it end now, without a rescan of every wait (our own bell does not ring). */
static void claim_ended(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref)
{
	uint64_t now = kvs_now_ns();
	struct kvs_store_sh **link, *sh;

	for (link = &d->waiting; (sh = *link);) {
		struct kvs_store_sh *next = sh->next; /* a step may free sh, or hand it on */

		if (same_ref(&sh->claim, ref) && wait_step(s, sh, now))
			*link = next;
		else
			link = &sh->next;
	}
}

/* Our write of ref's block is over with err: end the claim (which rings its
 * waiters) and our part in it.  The table's lock not had: on `ending`, again
 * later.  Frees job (NULL: nothing to free). */
static void job_end_claim(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job,
			  const struct kvs_claim_ref *ref, int err)
{
	if (kvs_core_claim_end(s->cache, ref, err) == -ETIMEDOUT && job) {
		job->err = err;
		job->next = d->ending;
		d->ending = job;
		lock_busy(d, kvs_now_ns());
		return;
	}
	mine_del(d, ref);
	claim_ended(s, d, ref);
	free(job);
}

static void job_unpin(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job,
		      uint32_t pinned)
{
	for (uint32_t i = 0; i < pinned; i++)
		kvs_store_release(s, &job->slots[i], false);
	d->job_pins -= pinned;
}

/*
 * May a block write of n shards pin them now?  The pin table is the process's
 * (KVS_RANK_PINS); the tasks' visits hold at most s->pin_budget of it, and the
 * block writes the rest less an eighth: so the writes never starve the loads
 * (a load of a cached block beside 2048 pinned write shards used to time out),
 * and a step that completes many blocks at once, electing us for all of them,
 * has its writes wait here for room (pend_run) instead of failing on a full
 * table -- which lost every block past the table's room, with dump_wait=cached
 * dumps already reported done.  A write alone may always start.
 */
static bool job_room(const struct kvs_store *s, const struct kvs_store_dumps *d, uint32_t n)
{
	return d->job_pins == 0 ||
	       d->job_pins + n <= KVS_RANK_PINS - KVS_RANK_PINS / 8 - s->pin_budget;
}

static void job_run(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		    const struct kvs_block_id *block);

static int pend_add(struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		    const struct kvs_block_id *block)
{
	if (d->npend == d->pcap) {
		uint32_t cap = d->pcap ? 2 * d->pcap : 64;
		struct watch *v = realloc(d->pend, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		d->pend = v;
		d->pcap = cap;
	}
	d->pend[d->npend++] = (struct watch){ .ref = *ref, .block = *block };
	return 0;
}

/* We are the writer of claim ref (block): write it now, or once there is pin
 * room (in election order).  It is ours from here until its claim ends. */
static void job_start(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      const struct kvs_block_id *block)
{
	if (mine_add(d, ref)) {
		job_end_claim(s, d, NULL, ref, -ENOMEM);
		return;
	}
	if (d->npend == 0 && d->lock_retry_ns == 0 && job_room(s, d, s->spb)) {
		job_run(s, d, ref, block);
		return;
	}
	if (pend_add(d, ref, block))
		job_end_claim(s, d, NULL, ref, -ENOMEM);
}

/* Start the pending writes there is pin room for, oldest first.  True if one
 * started.  (One that meets a busy bucket is pended again, and the lock's
 * backoff stops the loop.) */
static bool pend_run(struct kvs_store *s, struct kvs_store_dumps *d)
{
	bool started = false;

	while (d->npend && d->lock_retry_ns == 0 && job_room(s, d, s->spb)) {
		struct watch w = d->pend[0];

		memmove(d->pend, d->pend + 1, --d->npend * sizeof(*d->pend));
		job_run(s, d, &w.ref, &w.block);
		started = true;
	}
	return started;
}

/* Pin every shard of block and hand its write to the dispatcher, or end the
 * claim at once (a shard missing, or one READY over an atomic backend: the
 * block is in the backend). */
static void job_run(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		    const struct kvs_block_id *block)
{
	struct kvs_cache *c = s->cache;
	struct kvs_store_job *job;
	uint32_t n = s->spb, pinned = 0;
	bool missing = false, clean = false;
	int rc = 0;

	job = calloc(1, sizeof(*job) + n * sizeof(job->xf[0]) + n * sizeof(struct kvs_slot));
	if (!job) {
		job_end_claim(s, d, NULL, ref, -ENOMEM);
		return;
	}
	job->slots = (struct kvs_slot *)&job->xf[n];
	job->claim = *ref;
	job->block = *block;
	job->n = n;
	for (; pinned < n && !missing; pinned++) {
		void *buf = NULL;
		uint32_t st;

		rc = kvs_core_get(c, block, pinned, KVS_CORE_GET_RESIDENT, &job->slots[pinned]);
		if (rc) {
			if (rc != -ENOENT && rc != -ETIMEDOUT)
				kvs_log_warn(&s->log, "store: block write of claim %u: shard %u: %s",
					     ref->idx, pinned, kvs_strerror(rc));
			missing = true;
			break;
		}
		d->job_pins++;
		/* DIRTY, counted in this generation or not: the shard's bytes (a copy
		 * dumped after the counted one was evicted is the same block) */
		st = job->slots[pinned].state;
		if (st == KVS_SHM_SLOT_READY && s->block_atomic)
			clean = true;
		else if (st != KVS_SHM_SLOT_DIRTY && st != KVS_SHM_SLOT_READY)
			missing = true;
		if (kvs_slot_data(c, &job->slots[pinned], &buf))
			missing = true;
		job->xf[pinned] = (struct kvs_store_xfer){
			.op = KVS_XFER_WRITE, .shard = pinned, .block = *block, .buf = buf,
			.owner = job,
		};
	}
	if (rc == -ETIMEDOUT) {
		/* a bucket held by a peer: not missing, just not had; later */
		job_unpin(s, d, job, pinned);
		free(job);
		if (pend_add(d, ref, block))
			job_end_claim(s, d, NULL, ref, -ENOMEM);
		lock_busy(d, kvs_now_ns());
		return;
	}
	if (missing || clean) {
		/* A READY shard: the backend has the block, the DIRTY ones are its bytes. */
		for (uint32_t i = 0; clean && !missing && i < pinned; i++)
			if (job->slots[i].state == KVS_SHM_SLOT_DIRTY)
				kvs_core_slot_clean(c, &job->slots[i]);
		if (missing)
			kvs_log_warn(&s->log, "store: block write of claim %u: shard %u of the block "
					      "is no longer in the cache; the block is not written",
				     ref->idx, pinned);
		job_unpin(s, d, job, pinned);
		job_end_claim(s, d, job, ref, missing ? -KVS_EINCOMPLETE : 0);
		return;
	}
	kvs_store_handoff_job(s, job);
}

/*
 * How long before another attempt of job, whose attempt failed with job->err,
 * or 0: none.  An error another attempt cannot cure is final -- the store
 * refuses this write (read-only, no permission, another geometry, a bad
 * argument, too large) or a shard is missing.  Any other (a timeout, a
 * connection refused or reset, EIO, a full disk) is retried: the block's dumps
 * may have been acknowledged (dump_wait=cached), so it is given up only after
 * timeout_ms of failures, WRITE_RETRY_MIN_NS doubling to WRITE_RETRY_MAX_NS
 * apart.
 */
static uint64_t job_retry_wait(const struct kvs_store *s, struct kvs_store_job *job, uint64_t now)
{
	int e = job->err;
	uint64_t wait;

	if (e == -EROFS || e == -EACCES || e == -EPERM || e == -EINVAL || e == -EFBIG ||
	    e == -EOPNOTSUPP || e == -ENAMETOOLONG || e == -KVS_ECONFIG || e == -KVS_EINCOMPLETE)
		return 0;
	if (job->attempts++ == 0)
		job->first_fail_ns = now;
	wait = kvs_store_backoff_next(&job->backoff, WRITE_RETRY_MIN_NS, WRITE_RETRY_MAX_NS);
	return now + wait < job->first_fail_ns + s->cfg.timeout_ns ? wait : 0;
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
	if (job->err)
		kvs_log_limited(&s->log, &d->given_up_log, KVS_STORE_LOG_INTERVAL_NS, KVS_LOG_ERROR,
				"store: block write of claim %u failed: %s; given up after %u "
				"attempt%s: the block is not in the backend (it stays in the "
				"cache until evicted; a dump_wait=cached dump of it may have "
				"returned 0)",
				job->claim.idx, kvs_strerror(job->err), job->attempts + 1,
				job->attempts ? "s" : "");
	job_unpin(s, d, job, job->n);
	job_end_claim(s, d, job, &job->claim, job->err);
	pend_run(s, d); /* its pins are free */
}

/* Look for the claims of complete blocks a dead rank left unwritten and watch
 * them (the table's lock not had: later). */
void kvs_store_dumps_adopt(struct kvs_store *s, struct kvs_store_dumps *d)
{
	struct kvs_cache *c = s->cache;
	uint32_t max = c->claim_mask + 1;
	struct kvs_claim_ref *refs = calloc(max, sizeof(*refs));
	struct kvs_block_id *blocks = calloc(max, sizeof(*blocks));
	uint64_t deadline = kvs_deadline_after(s->cfg.timeout_ns);
	int n = refs && blocks ? kvs_core_claims_orphaned(c, deadline, refs, blocks, max) : -ENOMEM;

	d->adopt_due = n == -ETIMEDOUT;
	if (d->adopt_due)
		lock_busy(d, kvs_now_ns());
	else if (n < 0)
		kvs_log_warn(&s->log, "store: looking for blocks a dead rank left unwritten: %s",
			     kvs_strerror(n));
	else if (n > 0)
		kvs_log_info(&s->log, "store: %d block%s complete in the cache but not written "
				      "(their writer died): this rank writes them", n, n == 1 ? "" : "s");
	for (int i = 0; i < n; i++)
		watch_add(s, d, &refs[i], &blocks[i], deadline);
	if (n > 0)
		d->stale = true;
	free(refs);
	free(blocks);
}

void kvs_store_dumps_close(struct kvs_store *s, struct kvs_store_dumps *d)
{
	if (!d || d->closing)
		return;
	d->closing = true;
	kvs_store_dumps_adopt(s, d);
	d->stale = true; /* every watch looked at: complete ones are written now */
}

/* Become ref's writer if we may (complete, or its writer died), and write. */
static void try_elect(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      const struct kvs_block_id *block)
{
	int rc;

	if (is_mine(d, ref))
		return;
	rc = kvs_core_claim_elect(s->cache, ref);
	if (rc == 1)
		job_start(s, d, ref, block);
	else if (rc == -ETIMEDOUT)
		lock_busy(d, kvs_now_ns());
}

/* ---- blocks found stored ---- */

/* Was block found stored by this rank within FOUND_FOR_NS? */
static bool found_lately(const struct kvs_store_dumps *d, const struct kvs_block_id *block,
			 uint64_t now)
{
	for (uint32_t i = 0; i < FOUND_RECENT; i++)
		if (d->found[i].at_ns && now < d->found[i].at_ns + FOUND_FOR_NS &&
		    memcmp(&d->found[i].block, block, sizeof(*block)) == 0)
			return true;
	return false;
}

static void found_now(struct kvs_store_dumps *d, const struct kvs_block_id *block, uint64_t now)
{
	d->found[d->found_next] = (struct found){ *block, now };
	d->found_next = (d->found_next + 1) % FOUND_RECENT;
}

/* ---- settling ---- */

/*
 * Is ref's generation being written without our slot?  It completed with an
 * earlier copy of our shard (evicted since: the claim outlived the tasks that
 * protected it, say its writer died); ours is the same bytes.  We watch it, so a
 * dead writer is taken over, and its write uses whatever DIRTY copy is there;
 * if that write fails (another shard's copy is gone too), we start the next
 * attempt rather than report its error.
 */
static bool writing_without(struct kvs_cache *c, const struct kvs_claim_ref *ref)
{
	struct kvs_claim_view v;

	return kvs_core_claim_read(c, ref, &v) == 0 && v.state == KVS_SHM_CLAIM_WRITING;
}

/* After a count of n of sh's shard: the block complete, its designated writer
 * writes it (rung), or we do; then sh waits, or is finished. */
static void settled(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh, int n)
{
	struct kvs_cache *c = s->cache;

	watch_add(s, d, &sh->claim, &sh->block, sh->task->deadline_ns);
	if (n >= (int)s->spb) {
		/* we completed the block: its designated writer writes it */
		struct kvs_claim_view v;

		if (kvs_core_claim_read(c, &sh->claim, &v) == 0 && v.designate &&
		    v.designate != (uint32_t)c->rank_idx + 1)
			kvs_core_claim_ring(c, v.designate - 1);
		else
			try_elect(s, d, &sh->claim, &sh->block);
	}
	unpin(s, sh);
	if (s->cfg.dump_wait == KVS_DUMP_WAIT_CACHED) {
		finish(s, sh, 0);
		return;
	}
	if (wait_step(s, sh, kvs_now_ns()))
		return; /* ended already (a block write that could not start, or nothing to write) */
	sh->flags |= KVS_SH_JOINED;
	sh->next = d->waiting;
	d->waiting = sh;
	if (sh->task->deadline_ns < d->next_ns)
		d->next_ns = sh->task->deadline_ns;
}

/* sh's block is known stored: its bytes are the block's (a DIRTY slot of ours
 * is clean now), the shard durable. */
static void settle_stored(struct kvs_store *s, struct kvs_store_sh *sh)
{
	if (sh->slot.state == KVS_SHM_SLOT_DIRTY)
		kvs_core_slot_clean(s->cache, &sh->slot);
	finish(s, sh, 0);
}

/*
 * sh's slot is pinned and holds valid bytes (DIRTY; READY over a backend whose
 * blocks are not atomic): join, count, maybe write; then wait or finish.  Any
 * step may be done again after a park (the table's or a bucket's lock not had):
 * the join finds the same claim, and a count is idempotent (the slot's tag).
 */
static void settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	struct kvs_cache *c = s->cache;
	bool ready = !s->block_atomic; /* READY shards count (and are rewritten) */
	struct kvs_claim_ref ref;
	bool started;
	int st, n = -ESTALE, reached = 0;

	if (s->block_atomic && found_lately(d, &sh->block, kvs_now_ns())) {
		settle_stored(s, sh); /* a dump of ours found it there a moment ago */
		return;
	}
	for (int tries = 0; tries < 4 && n == -ESTALE; tries++) {
		/* acquire: read before the join, so a claim freed after it rings a
		 * bell value we sleep on */
		d->room_bell = atomic_load_explicit(&c->hdr->claims_bell, memory_order_acquire) &
			       KVS_WAIT_VALUE_MASK;
		st = kvs_core_claim_join(c, &sh->block, sh->task->deadline_ns, &sh->claim, &started);
		if (st == -ENOSPC) {
			sh->next = d->room;
			d->room = sh;
			return;
		}
		if (st == -ETIMEDOUT) {
			park(d, sh);
			return;
		}
		if (st < 0) {
			finish(s, sh, st);
			return;
		}
		if (st == KVS_SHM_CLAIM_DURABLE) {
			settle_stored(s, sh); /* written, or found stored, within the grace */
			return;
		}
		if (started)
			sh->flags |= KVS_SH_RECOUNT;
		if (sh->flags & KVS_SH_RECOUNT) {
			/* a new generation: what the cache holds of the block counts in it */
			bool stored;

			reached = kvs_core_claim_recount(c, &sh->claim, &sh->block, ready, &stored);
			if (reached == -ETIMEDOUT) {
				park(d, sh);
				return;
			}
			if (reached == -ESTALE)
				continue;
			if (stored) {
				/* a READY shard: in the backend already; our new claim
				 * ends DURABLE (its lock not had: all of this again,
				 * later) */
				int rc = kvs_core_claim_found(c, &sh->block, &ref);

				if (rc == -ETIMEDOUT) {
					park(d, sh);
					return;
				}
				sh->flags &= ~KVS_SH_RECOUNT;
				if (rc == 1)
					claim_ended(s, d, &ref);
				found_now(d, &sh->block, kvs_now_ns());
				settle_stored(s, sh);
				return;
			}
			sh->flags &= ~KVS_SH_RECOUNT;
		}
		n = kvs_core_claim_count(c, &sh->slot, &sh->claim, ready);
		if (n == -ETIMEDOUT) {
			park(d, sh);
			return;
		}
		if (n == -ESTALE && writing_without(c, &sh->claim)) {
			n = 0; /* wait for that write as a counted shard does */
			sh->flags |= KVS_SH_ASIDE;
			break;
		}
	}
	if (n == -ENODATA && kvs_core_slot_state(c, &sh->slot) == KVS_SHM_SLOT_READY) {
		finish(s, sh, 0); /* written and cleaned while we joined: durable */
		return;
	}
	if (n < 0) {
		finish(s, sh, n);
		return;
	}
	settled(s, d, sh, n == 0 && reached > 0 ? reached : n);
}

void kvs_store_dump_found(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	struct kvs_claim_ref ref;

	if (!s->block_atomic && d) {
		/* The shard proves only itself: unless the write that cleaned it is
		 * still known, it counts in its block's claim like a dumped one, and
		 * the block is written whole again. */
		if (kvs_core_claim_wrote(s->cache, kvs_core_slot_tag(s->cache, &sh->slot), &sh->block))
			finish(s, sh, 0);
		else
			settle(s, d, sh);
		return;
	}
	/* once per block lately (a task's shards of one block come together, and
	 * the other layers' tasks soon after) */
	if (d && !found_lately(d, &sh->block, kvs_now_ns())) {
		found_now(d, &sh->block, kvs_now_ns());
		if (kvs_core_claim_found(s->cache, &sh->block, &ref) == 1)
			claim_ended(s, d, &ref);
	}
	finish(s, sh, 0);
}

void kvs_store_dump_settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh,
			   bool owned)
{
	if (owned) {
		int rc = kvs_core_slot_publish_dirty(s->cache, &sh->slot);

		if (rc) {
			kvs_log_error(&s->log, "store: publishing dumped slot %u: %s", sh->slot.index,
				      kvs_strerror(rc));
			finish(s, sh, rc);
			return;
		}
	}
	if (!d) {
		finish(s, sh, -ENOMEM);
		return;
	}
	settle(s, d, sh);
}

/* ---- waiting ---- */

/* One durable wait: true when it is over (finished, or handed back to visit). */
static bool wait_step(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_claim_view v;
	int rc = kvs_core_claim_read(s->cache, &sh->claim, &v);

	if (rc == -ESTALE || (rc == 0 && v.state == KVS_SHM_CLAIM_FAILED &&
			      (sh->flags & KVS_SH_ASIDE) && now < sh->task->deadline_ns)) {
		/* the claim moved on, or failed without our bytes (a shard of it
		 * missing): see the shard afresh, to count it in the next attempt */
		sh->flags = 0;
		sh->err = 0;
		kvs_store_handoff_revisit(s, sh);
		return true;
	}
	if (rc) {
		finish(s, sh, rc);
		return true;
	}
	if (v.state == KVS_SHM_CLAIM_DURABLE || v.state == KVS_SHM_CLAIM_FAILED) {
		finish(s, sh, v.state == KVS_SHM_CLAIM_DURABLE ? 0 : v.error ? v.error : -EIO);
		return true;
	}
	if (now >= sh->task->deadline_ns) {
		/* Never complete here (the backend may hold it from another node:
		 * kvs_store_lookup says, on the caller's thread), or its write did
		 * not finish: the last attempt's error, if one failed */
		finish(s, sh, v.state == KVS_SHM_CLAIM_OPEN ? -KVS_EINCOMPLETE
			      : v.error			     ? v.error
							     : -ETIMEDOUT);
		return true;
	}
	return false;
}

/* One watch: elect ourselves when it is our turn.  True when the watch is over
 * (the claim ended or moved on, or our interest in it did).  *next_ns: the
 * earliest time it must be looked at again without a bell.  Closing, a
 * complete block is written as soon as it is our turn -- a live designated
 * writer still has its grace, since its write would otherwise race ours (and
 * ours may be the one that fails: this rank's backend, not the block's) -- and
 * one we cannot write is left. */
static bool watch_step(struct kvs_store *s, struct kvs_store_dumps *d, struct watch *w, uint64_t now,
		       bool check, uint64_t *next_ns)
{
	struct kvs_cache *c = s->cache;
	uint32_t me = (uint32_t)c->rank_idx + 1;
	struct kvs_claim_view v;

	if (kvs_core_claim_read(c, &w->ref, &v) || v.state == KVS_SHM_CLAIM_DURABLE ||
	    v.state == KVS_SHM_CLAIM_FAILED || (now >= w->deadline_ns && !d->closing))
		return true;
	if (v.state == KVS_SHM_CLAIM_OPEN && v.counted < s->spb) {
		if (now < w->deadline_ns && w->deadline_ns < *next_ns)
			*next_ns = w->deadline_ns;
		return d->closing; /* incomplete: nothing a closing rank can write */
	}
	if (v.state == KVS_SHM_CLAIM_OPEN) {
		if (!w->complete_ns)
			w->complete_ns = now;
		/* designated: us, nobody, or a rank that is late or gone */
		if (v.designate == 0 || v.designate == me || now >= w->complete_ns + WRITER_GRACE_NS ||
		    ((check || d->closing) && !kvs_core_rank_alive(c, v.designate - 1,
						   atomic_load_explicit(&c->ranks[v.designate - 1].epoch,
									memory_order_relaxed))))
			try_elect(s, d, &w->ref, &w->block);
		else if (w->complete_ns + WRITER_GRACE_NS < *next_ns)
			*next_ns = w->complete_ns + WRITER_GRACE_NS;
		return false;
	}
	/* WRITING: ours, a live writer's (closing: its duty), or a dead one's */
	if (is_mine(d, &w->ref))
		return false;
	if ((check || d->closing) && !kvs_core_claim_writer_alive(c, &v))
		try_elect(s, d, &w->ref, &w->block);
	else if (d->closing)
		return true;
	return false;
}

/* Retry what waited for the claim table's lock (its backoff is over). */
static void lock_retry(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now)
{
	struct kvs_store_sh *sh, *locked = d->locked;
	struct kvs_store_job *job, *ending = d->ending;
	bool said = false;

	d->lock_retry_ns = 0;
	d->locked = NULL;
	d->ending = NULL;
	while ((job = ending)) {
		ending = job->next;
		job_end_claim(s, d, job, &job->claim, job->err);
	}
	if (d->adopt_due)
		kvs_store_dumps_adopt(s, d);
	while ((sh = locked)) {
		locked = sh->next;
		if (now >= sh->task->deadline_ns) {
			if (!said)
				kvs_log_warn(&s->log, "store: a dump's shards not counted by their "
						      "deadline: the claim table's lock (or a bucket's) "
						      "is held by a peer (stopped?)");
			said = true;
			finish(s, sh, -ETIMEDOUT);
			continue;
		}
		settle(s, d, sh);
	}
	if (!d->lock_retry_ns)
		d->lock_backoff.step_ns = 0; /* everything had the lock */
	pend_run(s, d);
}

bool kvs_store_dumps_poll(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now, bool check)
{
	struct kvs_cache *c = s->cache;
	struct kvs_store_sh **link, *sh, *room;
	uint64_t next_ns = UINT64_MAX;
	bool changed = false;
	uint32_t bell, kept = 0;

	if (!d)
		return false;
	if (d->lock_retry_ns && now >= d->lock_retry_ns) {
		lock_retry(s, d, now);
		changed = true;
	}
	changed |= d->npend && pend_run(s, d); /* pins released since */
	/* acquire: read before the looks below (a ring after them changes it) */
	bell = atomic_load_explicit(&c->me->bell, memory_order_acquire) & KVS_WAIT_VALUE_MASK;
	if (!d->stale && !check && bell == d->rank_bell && now < d->next_ns &&
	    (!d->room || (atomic_load_explicit(&c->hdr->claims_bell, memory_order_acquire) &
			  KVS_WAIT_VALUE_MASK) == d->room_bell))
		return changed; /* nothing rang, nothing due */
	d->rank_bell = bell;
	d->stale = false;
	if (d->room) {
		room = d->room;
		d->room = NULL;
		while ((sh = room)) {
			room = sh->next;
			if (now >= sh->task->deadline_ns) {
				finish(s, sh, -ENOSPC); /* no claim freed in time */
				continue;
			}
			settle(s, d, sh);
		}
		changed = true;
	}
	for (link = &d->waiting; (sh = *link);) {
		struct kvs_store_sh *next = sh->next; /* a step may free sh, or hand it on */

		if (wait_step(s, sh, now)) {
			*link = next;
			changed = true;
			continue;
		}
		if (sh->task->deadline_ns < next_ns)
			next_ns = sh->task->deadline_ns;
		link = &sh->next;
	}
	for (uint32_t i = 0; i < d->nwatch; i++) {
		if (watch_step(s, d, &d->watch[i], now, check, &next_ns))
			changed = true;
		else
			d->watch[kept++] = d->watch[i];
	}
	d->nwatch = kept;
	for (sh = d->room; sh; sh = sh->next)
		if (sh->task->deadline_ns < next_ns)
			next_ns = sh->task->deadline_ns;
	if (d->lock_retry_ns && d->lock_retry_ns < next_ns)
		next_ns = d->lock_retry_ns;
	d->next_ns = next_ns;
	return changed;
}

unsigned kvs_store_dumps_words(struct kvs_store *s, struct kvs_store_dumps *d,
			       _Atomic uint32_t **words, uint32_t *busy, unsigned max,
			       uint64_t *deadline)
{
	struct kvs_cache *c = s->cache;
	bool peers = d && d->nwatch > 0; /* a completer may ring us: designated */
	unsigned n = 0;

	if (!d)
		return 0;
	for (struct kvs_store_sh *sh = d->waiting; sh && !peers; sh = sh->next)
		peers = !is_mine(d, &sh->claim);
	if (d->next_ns < *deadline)
		*deadline = d->next_ns;
	if (peers && n < max) {
		words[n] = &c->me->bell;
		busy[n++] = d->rank_bell;
	}
	if (d->room && n < max) {
		words[n] = &c->hdr->claims_bell;
		busy[n++] = d->room_bell;
	}
	return n;
}
