/*
 * core/store_dump.c — the dump protocol on the copier's side (docs/store.md,
 * "Dumps"): what a dumped shard does once its slot holds valid bytes, how a
 * durable dump learns that its block is in the backend, and the block writes
 * this rank makes as a claim's writer.
 *
 * Settling a shard (kvs_store_dump_settle).  Its slot is DIRTY: gathered by this
 * rank (published DIRTY here) or found DIRTY (another dump's).  It joins its
 * block's claim (core/claim.c) and counts the slot in it; the count that
 * completes the block makes this rank its writer, and the block write is built
 * at once (every shard's slot pinned: kvs_core_get of resident slots only) and
 * handed to the dispatcher.  Then the shard's pin goes (the claim keeps the
 * slot from eviction), and the shard is finished (dump_wait=cached) or waits
 * (durable) for the claim to end: DURABLE is 0, FAILED is the write's error.
 * A claim found DURABLE already means the block is in the backend: the slot is
 * cleaned and the shard finished.  So does a shard found READY
 * (kvs_store_dump_found): its block's OPEN claim, if any, ends DURABLE there,
 * so the dumps of its other shards need not wait for a count that never
 * completes.  A full claim table parks the shard (its pin
 * kept) until a claim is freed.
 *
 * Who writes.  Every rank that joined a claim watches it (a watch entry, in
 * either dump_wait mode) until it ends.  Once the block is complete, the rank
 * that counted its designated shard (core/claim.c: a hash of the block picks
 * it, so writes spread over the ranks whatever their timing; the completer
 * rings that rank's bell) elects itself and writes; if it has not within
 * WRITER_GRACE_NS, or it died, or nobody counted that shard in this
 * generation, any watcher does.  A writer that died is replaced the same way
 * (found once per slice with `check`): the new writer writes the block from the
 * cache.
 *
 * Waiting (kvs_store_dumps_poll).  Durable waits hold no pin: each names its
 * claim generation.  Waits and watches are looked at when the rank's bell rings
 * (every writer that ends a claim rings its waiters' bells), when a block write
 * of ours finishes or an entry was added, at a deadline, and once per slice.
 * A claim that moved on to another generation (expired, or failed and retried
 * by another dump) sends the shard back to the dispatcher to be visited again:
 * its device bytes are still the caller's until the task ends.  At the deadline
 * a wait ends -KVS_EINCOMPLETE (the block never completed: shards missing; but
 * 0 if the backend turns out to hold the block) or -ETIMEDOUT (its write did
 * not finish).
 *
 * Block writes (kvs_store_job).  Built here, written by the dispatcher (one write
 * per shard, from the slots; the posix backend renames the block after the last
 * one), cleaned there (DIRTY -> READY), finished here: pins released, claim
 * ended, which rings every waiter.  A shard that vanished before the write
 * started (the claim expired and the slot was evicted) ends the claim FAILED
 * with -KVS_EINCOMPLETE; a shard found READY means the block is in the backend
 * already (read from it by a load): the claim ends DURABLE without a write.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "core/store.h"

/* How long a complete block waits for its designated writer before any watcher
 * writes it. */
#define WRITER_GRACE_NS (100ull * KVS_NSEC_PER_MSEC)

/* A claim this rank joined: its election duty, until the claim ends. */
struct watch {
	struct kvs_claim_ref ref;
	struct kvs_block_id block;
	uint64_t deadline_ns;          /* the latest deadline of our dumps of the block */
	uint64_t complete_ns;          /* first seen complete with no writer (0: not yet) */
};

struct kvs_store_dumps {
	struct kvs_store_sh *waiting;  /* durable waits, by sh->next (no pin) */
	struct kvs_store_sh *room;     /* DIRTY shards (pinned) waiting for a free claim */
	uint32_t room_bell;            /* the claim table's bell before their last try */
	uint32_t rank_bell;            /* our rank's bell before the last look at waits */
	bool stale;                    /* something to look at without a bell (entries
					  added, a write of ours finished) */
	uint64_t next_ns;              /* the earliest deadline or grace among them */
	struct watch *watch;
	uint32_t nwatch, wcap;
	struct kvs_claim_ref *mine;    /* claims whose block write is ours, in progress */
	uint32_t nmine, cap;
	struct watch *pend;            /* claims we were elected to write, waiting for pin
					  * room (only .ref and .block used), oldest first */
	uint32_t npend, pcap;
	struct kvs_block_id found;     /* the last block a dump found READY */
	bool found_valid;
};

int kvs_store_dumps_init(struct kvs_store *s, struct kvs_store_dumps **out)
{
	(void)s;
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void kvs_store_dumps_fini(struct kvs_store_dumps *d)
{
	if (!d)
		return;
	free(d->watch);
	free(d->mine);
	free(d->pend);
	free(d);
}

bool kvs_store_dumps_busy(const struct kvs_store_dumps *d)
{
	return d && (d->waiting || d->room || d->nmine || d->npend);
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
		kvs_store_release(s, &sh->slot);
	}
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

static void job_release(struct kvs_store *s, struct kvs_store_job *job, uint32_t pinned)
{
	for (uint32_t i = 0; i < pinned; i++)
		kvs_store_release(s, &job->slots[i]);
}

/*
 * May a block write of n shards pin them now?  The pin table is the process's
 * (KVS_RANK_PINS); tasks hold at most s->pin_budget (half of it at most) and
 * stop taking more while the store's pins are over it.  A step that completes
 * many blocks at once elects us for all of them; their writes wait here for
 * room (pend_run) instead of failing on a full table -- which lost every block
 * past the table's room, with dump_wait=cached dumps already reported done.
 */
static bool job_room(struct kvs_store *s, uint32_t n)
{
	/* relaxed: a budget */
	uint32_t pins = atomic_load_explicit(&s->pins, memory_order_relaxed);

	return pins == 0 || pins + n <= KVS_RANK_PINS - KVS_RANK_PINS / 8;
}

static void job_run(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		    const struct kvs_block_id *block);

/* We are the writer of claim ref (block): write it now, or once there is pin
 * room (in election order). */
static void job_start(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      const struct kvs_block_id *block)
{
	if (d->npend == 0 && job_room(s, s->spb)) {
		job_run(s, d, ref, block);
		return;
	}
	if (d->npend == d->pcap) {
		uint32_t cap = d->pcap ? 2 * d->pcap : 64;
		struct watch *v = realloc(d->pend, cap * sizeof(*v));

		if (!v) {
			kvs_core_claim_end(s->cache, ref, -ENOMEM);
			claim_ended(s, d, ref);
			return;
		}
		d->pend = v;
		d->pcap = cap;
	}
	d->pend[d->npend++] = (struct watch){ .ref = *ref, .block = *block };
}

/* Start the pending writes there is pin room for.  True if one started. */
static bool pend_run(struct kvs_store *s, struct kvs_store_dumps *d)
{
	uint32_t k = 0;

	while (k < d->npend && job_room(s, s->spb)) {
		job_run(s, d, &d->pend[k].ref, &d->pend[k].block);
		k++;
	}
	if (k)
		memmove(d->pend, d->pend + k, (d->npend - k) * sizeof(*d->pend));
	d->npend -= k;
	return k > 0;
}

/* Pin every shard of block and hand its write to the dispatcher, or end the
 * claim at once (a shard missing, or one READY: the block is in the backend). */
static void job_run(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		    const struct kvs_block_id *block)
{
	struct kvs_cache *c = s->cache;
	struct kvs_claim_view v;
	struct kvs_store_job *job;
	uint32_t n = s->spb, pinned = 0;
	bool missing = false, clean = false;
	int rc;

	job = calloc(1, sizeof(*job) + n * sizeof(job->xf[0]) + n * sizeof(struct kvs_slot));
	if (!job) {
		kvs_core_claim_end(c, ref, -ENOMEM);
		return;
	}
	job->slots = (struct kvs_slot *)&job->xf[n];
	job->claim = *ref;
	job->block = *block;
	job->n = n;
	for (; pinned < n && !missing; pinned++) {
		void *buf = NULL;

		rc = kvs_core_get(c, block, pinned, KVS_CORE_GET_RESIDENT, &job->slots[pinned]);
		if (rc) {
			if (rc != -ENOENT)
				kvs_log_warn(&s->log, "store: block write of claim %u: shard %u: %s",
					     ref->idx, pinned, kvs_strerror(rc));
			missing = true;
			break;
		}
		/* relaxed: a budget */
		atomic_fetch_add_explicit(&s->pins, 1, memory_order_relaxed);
		/* DIRTY, counted in this generation or not: the shard's bytes (a copy
		 * dumped after the counted one was evicted is the same block) */
		if (job->slots[pinned].state == KVS_SHM_SLOT_READY)
			clean = true;
		else if (job->slots[pinned].state != KVS_SHM_SLOT_DIRTY)
			missing = true;
		if (kvs_slot_data(c, &job->slots[pinned], &buf))
			missing = true;
		job->xf[pinned] = (struct kvs_store_xfer){
			.op = KVS_XFER_WRITE, .shard = pinned, .block = *block, .buf = buf,
			.owner = job,
		};
	}
	if (missing || clean || kvs_core_claim_read(c, ref, &v) || mine_add(d, ref)) {
		/* A READY shard: the backend has the block, the DIRTY ones are its bytes. */
		for (uint32_t i = 0; clean && !missing && i < pinned; i++)
			if (job->slots[i].state == KVS_SHM_SLOT_DIRTY)
				kvs_core_slot_clean(c, &job->slots[i]);
		if (missing)
			kvs_log_warn(&s->log, "store: block write of claim %u: shard %u of the block "
					      "is no longer in the cache; the block is not written",
				     ref->idx, pinned);
		job_release(s, job, pinned);
		kvs_core_claim_end(c, ref, missing ? -KVS_EINCOMPLETE : clean ? 0 : -ENOMEM);
		claim_ended(s, d, ref);
		free(job);
		return;
	}
	/* a write that waited for pin room may start past the claim's expiry */
	job->deadline_ns = v.expires_ns > kvs_now_ns() ? v.expires_ns
						  : kvs_deadline_after(s->cfg.timeout_ns);
	kvs_store_handoff_job(s, job);
}

void kvs_store_job_finish(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job)
{
	if (job->err)
		kvs_log_warn(&s->log, "store: block write of claim %u failed: %s", job->claim.idx,
			     kvs_strerror(job->err));
	job_release(s, job, job->n);
	kvs_core_claim_end(s->cache, &job->claim, job->err);
	mine_del(d, &job->claim);
	claim_ended(s, d, &job->claim);
	free(job);
	pend_run(s, d); /* its pins are free */
}

void kvs_store_dumps_adopt(struct kvs_store *s, struct kvs_store_dumps *d)
{
	struct kvs_cache *c = s->cache;
	uint32_t max = c->claim_mask + 1;
	struct kvs_claim_ref *refs = calloc(max, sizeof(*refs));
	struct kvs_block_id *blocks = calloc(max, sizeof(*blocks));
	uint64_t deadline = kvs_deadline_after(s->cfg.timeout_ns);
	int n = refs && blocks ? kvs_core_claims_orphaned(c, deadline, refs, blocks, max) : -ENOMEM;

	if (n < 0)
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

/* Become ref's writer if we may (complete, or its writer died), and write. */
static void try_elect(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_claim_ref *ref,
		      const struct kvs_block_id *block)
{
	if (!is_mine(d, ref) && kvs_core_claim_elect(s->cache, ref) == 1)
		job_start(s, d, ref, block);
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

/* sh's slot is DIRTY and pinned: join, count, maybe write; then wait or finish. */
static void settle_dirty(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	struct kvs_cache *c = s->cache;
	struct kvs_claim_ref ref;
	bool started;
	int st, n = -ESTALE;

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
		if (st < 0) {
			finish(s, sh, st);
			return;
		}
		/* A new claim of a block the cache has READY shards of (a load read
		 * them): the backend holds it; nobody would count those shards. */
		if (started && kvs_core_block_read_back(c, &sh->block) == 1 &&
		    kvs_core_claim_found(c, &sh->block, &ref) == 1) {
			claim_ended(s, d, &ref);
			st = KVS_SHM_CLAIM_DURABLE;
		}
		if (st == KVS_SHM_CLAIM_DURABLE) {
			/* in the backend already: these bytes are its bytes */
			kvs_core_slot_clean(c, &sh->slot);
			finish(s, sh, 0);
			return;
		}
		n = kvs_core_claim_count(c, &sh->slot, &sh->claim);
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

void kvs_store_dump_found(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	struct kvs_claim_ref ref;

	/* once per block in a row (a task's shards of one block come together) */
	if (d && !(d->found_valid && memcmp(&d->found, &sh->block, sizeof(sh->block)) == 0)) {
		d->found = sh->block;
		d->found_valid = true;
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
	settle_dirty(s, d, sh);
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
		/* Never complete here; but the block may be in the backend (put there
		 * by another node, or by a dump whose claim is gone): ask it. */
		rc = v.state != KVS_SHM_CLAIM_OPEN ? -ETIMEDOUT
		     : kvs_backend_lookup(s->backend, &sh->block) == 1 ? 0 : -KVS_EINCOMPLETE;
		finish(s, sh, rc);
		return true;
	}
	return false;
}

/* One watch: elect ourselves when it is our turn.  True when the watch is over
 * (the claim ended or moved on, or our interest in it did).  *next_ns: the
 * earliest time it must be looked at again without a bell. */
static bool watch_step(struct kvs_store *s, struct kvs_store_dumps *d, struct watch *w, uint64_t now,
		       bool check, uint64_t *next_ns)
{
	struct kvs_cache *c = s->cache;
	uint32_t me = (uint32_t)c->rank_idx + 1;
	struct kvs_claim_view v;

	if (kvs_core_claim_read(c, &w->ref, &v) || v.state == KVS_SHM_CLAIM_DURABLE ||
	    v.state == KVS_SHM_CLAIM_FAILED || now >= w->deadline_ns)
		return true;
	if (w->deadline_ns < *next_ns)
		*next_ns = w->deadline_ns;
	if (v.state == KVS_SHM_CLAIM_OPEN && v.counted >= s->spb) {
		if (!w->complete_ns)
			w->complete_ns = now;
		/* designated: us, nobody, or a rank that is late or gone */
		if (v.designate == 0 || v.designate == me || now >= w->complete_ns + WRITER_GRACE_NS ||
		    (check && !kvs_core_rank_alive(c, v.designate - 1,
						   atomic_load_explicit(&c->ranks[v.designate - 1].epoch,
									memory_order_relaxed))))
			try_elect(s, d, &w->ref, &w->block);
		else if (w->complete_ns + WRITER_GRACE_NS < *next_ns)
			*next_ns = w->complete_ns + WRITER_GRACE_NS;
	} else if (v.state == KVS_SHM_CLAIM_WRITING && check && !is_mine(d, &w->ref) &&
		   !kvs_core_claim_writer_alive(c, &v)) {
		try_elect(s, d, &w->ref, &w->block);
	}
	return false;
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
	changed = d->npend && pend_run(s, d); /* pins released since */
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
			settle_dirty(s, d, sh);
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
