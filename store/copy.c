/*
 * store/copy.c — the copier thread: moves bytes between the cache's slots
 * and the caller's tensors through the copy engine, and settles every shard.
 *
 * It takes shards from the ring in the dispatcher's visiting order into a
 * working set of up to WORK_MAX shards and handles whichever is ready first, so a
 * ready shard is never stuck behind a slow one:
 *
 *   load/prefetch  when the slot is READY (its owner published it: this rank's
 *                  dispatcher at read completion, or a peer), H2D-scatter it
 *                  into the shard's tensors (head slices: each tensor's own byte
 *                  range); FAILED carries the owner's error to the shard.  The
 *                  copies of one pass are queued together, one vector call per
 *                  direction (kvs_copy_h2dv: the engine's fixed cost once per
 *                  pass, not per shard), and synced once; then each shard is
 *                  finished and its slot released: a task of any size needs only
 *                  the pins of the shards in flight (the dispatcher's budget),
 *                  and the released pins leave the budget once per pass.  A
 *                  prefetch needs no copy: finished and released at READY.
 *   dump           an owned shard (a miss, a FAILED slot it refills, a dead
 *                  filler's it took over) is D2H-gathered, after the task's CUDA
 *                  event; the gathers of a pass are synced once and each is then
 *                  settled by store/dump.c (published DIRTY, acknowledged,
 *                  its block looked at; durable waits).  A shard found READY is
 *                  in the backend already (deduplicated; over a backend whose
 *                  blocks are not atomic, made DIRTY again); one found DIRTY is
 *                  settled like a gathered one; one a peer is filling is waited
 *                  for.
 *
 * Staging: a slot the registration thread (store/register.c) has not registered
 * with the copy engine yet is not copied from directly (with CUDA that would be
 * a pageable copy, synchronous and through the driver's own buffers): its tensor
 * ranges go through the store's pinned staging buffer in pieces, each synced
 * before the buffer is reused (memcpy + h2d for a load, d2h + memcpy for a
 * dump).  Slow next to the direct path, and only until the slot's chunk is
 * registered.
 *
 * A sync that times out (the engine is stuck or very slow) poisons the copier:
 * the copies of that pass may still land, so their shards are finished with
 * -ETIMEDOUT but their slots stay pinned (a late D2H never writes into a slot
 * another rank re-keyed, a late H2D never reads one), and no copy is queued
 * until a later sync succeeds; then they are released (a poisoned gather's slot
 * is published FAILED).
 *
 * Sleeping: on the state words of the peers' slots the working set waits for
 * and the words store/dump.c waits on (the rank's bell, the claim table's),
 * plus the copier's own bell (every hand-off bumps it): kvs_wait_any, futex_waitv
 * in the kernel build.  Once per slice the check hook looks at the fillers of
 * those slots (a dead filler's slot is taken over) and has store/dump.c look at
 * what it waits on.  With nothing shared to wait on (only this rank's own
 * reads and writes: the dispatcher hands their completions over), it sleeps on
 * its condition variable instead, in both builds, so the plain build spins only
 * for other processes.  Its idle sleep is bounded (COPIER_IDLE_NS); once a
 * second, awake anyway, it reaps dead ranks (their pins: kvs_core_reap_try).
 *
 * Shared locks: this thread waits for one at most KVS_STORE_LOCK_WAIT_NS
 * (kvs_core_lock_wait_set).  A slow get or a release whose bucket a peer holds
 * past that (stopped inside?) is tried again after a backoff, while every other
 * shard goes on; the dump protocol parks its own work the same way.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "store/store.h"

/* Words kvs_wait_any may get besides slot words: the copier's bell, and what
 * store/dump.c waits on (the rank's bell, the claim table's). */
#define WAIT_EXTRA 3u
#define WORK_MAX (KVS_WAIT_ANY_MAX - WAIT_EXTRA)
_Static_assert(KVS_STORE_OWNED_READS_MAX <= WORK_MAX - WORK_MAX / 4,
	       "owned reads in flight leave a quarter of the working set to other shards");
/* Copies queued between two syncs. */
#define BATCH_MAX 256u
/* Idle sleep bound (the wake is the bell or condition; this only bounds it). */
#define COPIER_IDLE_NS KVS_NSEC_PER_SEC
/* Least wait for the engine to finish a pass's copies (a pass whose earliest
 * deadline is past or near is still given this long before it is poisoned). */
#define COPIER_SYNC_GRACE_NS (100ull * KVS_NSEC_PER_MSEC)
/* How long one look at a poisoned engine waits. */
#define COPIER_POISON_SLICE_NS (10ull * KVS_NSEC_PER_MSEC)
/* How often the copier reaps the entries of dead ranks (their pins), when it
 * is awake anyway (an idle copier's sleep is bounded by COPIER_IDLE_NS). */
#define COPIER_REAP_NS KVS_NSEC_PER_SEC

/* One fill of the staging buffer: its copy segments (host_off within the
 * buffer) and where each piece is in the slot. */
struct staged {
	struct kvs_copy_seg piece[KVS_MAX_TENSORS];
	uint64_t slot_off[KVS_MAX_TENSORS];
	uint32_t n;
	uint64_t fill;
};

struct copier {
	struct kvs_store *s;
	struct kvs_store_dumps *dumps;
	struct kvs_store_sh *work[WORK_MAX];
	uint32_t nwork;
	struct kvs_store_sh *batch[BATCH_MAX]; /* copies queued, not yet synced */
	uint32_t nbatch;
	/* The batch's direct copies, queued together at its end (pass_queue): one
	 * engine call per pass and direction, not one per shard. */
	struct kvs_copy_vec *vec[2];   /* [h2d]: s->copy_vec, KVS_COPY_VEC_MAX each */
	uint32_t nvec[2];
	uint64_t batch_deadline;       /* the earliest task deadline in the batch */
	bool poisoned;                 /* a sync timed out: the batch may still be copied */
	/* A bucket lock not had within KVS_STORE_LOCK_WAIT_NS (a slow get, a
	 * release): when to try again (0: nothing waits), and the backoff. */
	uint64_t lock_retry_ns;
	struct kvs_store_backoff lock_backoff;
	uint64_t reap_ns;              /* the next look for dead ranks */
	/* This pass's copies, counted once at its end (copy_bytes, copy_ns,
	 * shards_loaded): from the first copy queued to the sync. */
	uint64_t pass_t0, pass_bytes;
	uint32_t pass_loaded;
};

/* Copier: a get or a release did not have its bucket's lock: again later. */
static void bucket_busy(struct copier *cp, uint64_t now)
{
	cp->lock_retry_ns = now + kvs_store_backoff_next(&cp->lock_backoff, KVS_STORE_LOCK_RETRY_MIN_NS,
							 KVS_STORE_LOCK_RETRY_MAX_NS);
}

static uint64_t sync_deadline(uint64_t deadline_ns)
{
	uint64_t grace = kvs_deadline_after(COPIER_SYNC_GRACE_NS);

	return deadline_ns > grace ? deadline_ns : grace;
}

/* A copy of sh queued (or staged): in this pass's counts. */
static void copy_count(struct copier *cp, const struct kvs_store_sh *sh)
{
	for (uint32_t k = 0; k < sh->nseg; k++)
		cp->pass_bytes += sh->segs[k].len;
}

/* The pass's copies are over (synced, or failed): count them. */
static void pass_count(struct copier *cp)
{
	struct kvs_store *s = cp->s;

	if (cp->pass_t0) {
		KVS_STORE_COUNT(s, copy_bytes, cp->pass_bytes);
		KVS_STORE_COUNT(s, copy_ns, kvs_now_ns() - cp->pass_t0);
	}
	if (cp->pass_loaded)
		KVS_STORE_COUNT(s, shards_loaded, cp->pass_loaded);
	cp->pass_t0 = 0;
	cp->pass_bytes = 0;
	cp->pass_loaded = 0;
}

static void copy_delay(const struct kvs_store *s)
{
	struct timespec ts;

	if (!s->cfg.copy_delay_ns)
		return;
	ts = kvs_ns_to_timespec(kvs_deadline_after(s->cfg.copy_delay_ns));
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* Finish sh with err and drop the copier's reference (its pin, unless a read
 * of ours still holds it). */
static void finish(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	kvs_store_sh_finish(s, sh, err);
}

/*
 * A pass's shards are finished in a row, most releasing their pins: the
 * slot's line and, for a locked pin (an owner's, a waiter's), its bucket's,
 * both last written by the dispatcher on another core.  On the cold path the
 * first touch of the bucket (the lock's kind check) was a fifth of the
 * copier's own time (perf, hit_bench --path cold, 8 KiB); the lines of the
 * shard RELEASE_AHEAD finishes on are asked for while this one finishes.
 */
#define RELEASE_AHEAD 4

static void prefetch_release(struct kvs_store *s, const struct kvs_store_sh *sh)
{
	if ((sh->flags & (KVS_SH_GOT | KVS_SH_HASHED)) == (KVS_SH_GOT | KVS_SH_HASHED))
		kvs_core_prefetch_release(s->cache, &sh->slot, sh->hash);
}

/* ---- staged copies ---- */

/* Copy the buffer's pieces to (h2d) or from (d2h) the device and wait for it:
 * the buffer is reused next.  A d2h's pieces then go to the slot. */
static int staged_flush(struct kvs_store *s, struct staged *g, unsigned char *slot, bool h2d,
			uint64_t deadline)
{
	int rc = h2d ? kvs_copy_h2d(s->copy, s->staging, g->piece, g->n)
		     : kvs_copy_d2h(s->copy, s->staging, g->piece, g->n);

	if (rc == 0)
		rc = kvs_copy_sync(s->copy, deadline);
	for (uint32_t i = 0; rc == 0 && !h2d && i < g->n; i++)
		memcpy(slot + g->slot_off[i], (unsigned char *)s->staging + g->piece[i].host_off,
		       g->piece[i].len);
	g->n = 0;
	g->fill = 0;
	return rc;
}

/* Copy sh's tensors through the staging buffer (its slot is not registered). */
static int staged_copy(struct kvs_store *s, struct kvs_store_sh *sh, bool h2d)
{
	struct staged stage = { .n = 0 }, *g = &stage;
	unsigned char *slot = sh->data;
	uint64_t deadline = sync_deadline(sh->task->deadline_ns);
	int rc = 0;

	for (uint32_t k = 0; k < sh->nseg && rc == 0; k++) {
		const struct kvs_copy_seg *seg = &sh->segs[k];

		for (uint64_t pos = 0, len; pos < seg->len && rc == 0; pos += len) {
			len = seg->len - pos < s->staging_bytes - g->fill ? seg->len - pos
									  : s->staging_bytes - g->fill;
			g->piece[g->n] = (struct kvs_copy_seg){ g->fill, seg->dev + pos, len };
			g->slot_off[g->n++] = seg->host_off + pos;
			if (h2d)
				memcpy((unsigned char *)s->staging + g->fill, slot + seg->host_off + pos,
				       len);
			g->fill += len;
			if (g->fill == s->staging_bytes || g->n == KVS_MAX_TENSORS)
				rc = staged_flush(s, g, slot, h2d, deadline);
		}
	}
	if (rc == 0 && g->n)
		rc = staged_flush(s, g, slot, h2d, deadline);
	KVS_STORE_COUNT(s, staged_shards, 1);
	return rc;
}

/* One shard's copy, direct (queued) or staged (done).  A staged copy whose sync
 * timed out may still land in the staging buffer: the copier is poisoned. */
static int shard_copy(struct copier *cp, struct kvs_store_sh *sh, bool h2d)
{
	struct kvs_store *s = cp->s;
	int rc;

	copy_delay(s);
	if (!cp->pass_t0)
		cp->pass_t0 = kvs_now_ns();
	if (!kvs_store_slot_registered(s, sh)) {
		rc = staged_copy(s, sh, h2d);
		if (rc == -ETIMEDOUT) {
			kvs_log_error(&s->log, "store: copy engine sync of a staged copy: %s; nothing "
					       "is copied until the engine drains", kvs_strerror(rc));
			cp->poisoned = true;
		}
	} else {
		struct kvs_copy_vec *v = cp->vec[h2d] + cp->nvec[h2d];

		for (uint32_t k = 0; k < sh->nseg; k++)
			v[k] = (struct kvs_copy_vec){ (unsigned char *)sh->data + sh->segs[k].host_off,
						      sh->segs[k].dev, sh->segs[k].len };
		cp->nvec[h2d] += sh->nseg;
		rc = 0;
	}
	copy_count(cp, sh);
	return rc;
}

/* Is there room in this pass for sh's copy (a shard in the batch, its
 * segments in the direction's vector)? */
static bool pass_room(const struct copier *cp, const struct kvs_store_sh *sh, bool h2d)
{
	return !cp->poisoned && cp->nbatch < BATCH_MAX &&
	       cp->nvec[h2d] + sh->nseg <= KVS_COPY_VEC_MAX;
}

/* Queue the pass's direct copies, one vector call per direction: 0 or the
 * engine's error (the batch's shards fail with it). */
static int pass_queue(struct copier *cp)
{
	struct kvs_store *s = cp->s;
	int rc = 0;

	if (cp->nvec[1])
		rc = kvs_copy_h2dv(s->copy, cp->vec[1], cp->nvec[1]);
	if (cp->nvec[0] && rc == 0)
		rc = kvs_copy_d2hv(s->copy, cp->vec[0], cp->nvec[0]);
	cp->nvec[0] = cp->nvec[1] = 0;
	return rc;
}

static void batch_add(struct copier *cp, struct kvs_store_sh *sh)
{
	if (cp->nbatch == 0 || sh->task->deadline_ns < cp->batch_deadline)
		cp->batch_deadline = sh->task->deadline_ns;
	cp->batch[cp->nbatch++] = sh;
}

/* ---- settling a shard ---- */

/* sh waited out its task's deadline on a slot a peer fills: name the peer (rank
 * entry, pid: a stopped process, usually), once per task -- one stopped peer
 * tends to hold many of a task's shards. */
static int filler_timeout(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	if (!sh->task->filler_named) {
		sh->task->filler_named = true;
		kvs_core_log_fill_timeout(s->cache, sh->slot.index, now - sh->task->submit_ns);
	}
	return -ETIMEDOUT;
}

static void queue_handoff(struct kvs_store *s, struct kvs_store_sh *sh, void *arg)
{
	(void)arg;
	kvs_store_handoff_read(s, sh);
}

/* Where sh's slot stands: 0 valid bytes (READY, DIRTY: the raw state in
 * sh->slot.state), 1 still filling, < 0 the fill's error or the deadline. */
static int slot_outcome(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	int st;

	if ((sh->flags & KVS_SH_OWNED) && sh->task->op != KVS_STORE_OP_DUMP) {
		/* Our read is over when the dispatcher dropped its reference (acquire:
		 * pairs with read_done's acq_rel drop, which follows its result). */
		if (atomic_load_explicit(&sh->refs, memory_order_acquire) == 1) {
			sh->slot.state = KVS_SLOT_READY;
			return atomic_load_explicit(&sh->rd.result, memory_order_relaxed);
		}
		return now >= sh->task->deadline_ns ? -ETIMEDOUT : 1;
	}
	st = kvs_core_slot_state(s->cache, &sh->slot);
	if (st < 0)
		return st;
	if (st == KVS_SHM_SLOT_READY || st == KVS_SHM_SLOT_DIRTY)
		return 0;
	if (st == KVS_SHM_SLOT_FAILED)
		return sh->slot.error ? sh->slot.error : -EIO;
	return now >= sh->task->deadline_ns ? filler_timeout(s, sh, now) : 1;
}

/* A load or prefetch shard: returns true when it left the working set. */
static bool load_resolve(struct copier *cp, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_store *s = cp->s;
	/* a hit (READY or DIRTY when pinned) stays valid while pinned: no look */
	int st = sh->err ? sh->err : kvs_store_sh_hit(sh) ? 0 : slot_outcome(s, sh, now);

	if (st == 1)
		return false;
	if (st < 0) {
		finish(s, sh, st);
		return true;
	}
	if (!sh->nseg) { /* prefetch: in the cache is all it needs */
		/* counted now, not at the pass's end: its task may be reported
		 * done before then, and its waiter reads the stats */
		KVS_STORE_COUNT(s, shards_loaded, 1);
		finish(s, sh, 0);
		return true;
	}
	if (!pass_room(cp, sh, true)) {
		if (now < sh->task->deadline_ns)
			return false; /* after the sync */
		finish(s, sh, -ETIMEDOUT);
		return true;
	}
	st = shard_copy(cp, sh, true);
	if (st) {
		finish(s, sh, st);
		return true;
	}
	cp->pass_loaded++;
	batch_add(cp, sh);
	return true;
}

/* Gather an owned dump shard (after its task's CUDA event, once per task). */
static void gather(struct copier *cp, struct kvs_store_sh *sh)
{
	struct kvs_store *s = cp->s;
	struct kvs_store_task *t = sh->task;
	int rc = 0;

	if (t->event && !t->event_waited) {
		rc = kvs_copy_wait_event(s->copy, t->event);
		t->event_waited = rc == 0;
	}
	if (rc == 0)
		rc = shard_copy(cp, sh, false);
	if (rc) {
		kvs_slot_publish_failed(s->cache, &sh->slot, rc);
		finish(s, sh, rc);
		return;
	}
	batch_add(cp, sh);
}

/* A dump shard: returns true when it left the working set. */
static bool dump_resolve(struct copier *cp, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_store *s = cp->s;
	int st;

	if (sh->err) {
		finish(s, sh, sh->err);
		return true;
	}
	if (!(sh->flags & KVS_SH_OWNED)) {
		st = slot_outcome(s, sh, now);
		if (st == 1)
			return false;
		if (st == 0 && sh->slot.state == KVS_SHM_SLOT_READY) {
			KVS_STORE_COUNT(s, dump_dedup, 1); /* in the backend already */
			kvs_store_dump_found(s, cp->dumps, sh);
			return true;
		}
		if (st == 0) { /* DIRTY: a peer's dump, counted with ours */
			KVS_STORE_COUNT(s, dump_dedup, 1);
			kvs_store_dump_settle(s, cp->dumps, sh, false);
			return true;
		}
		if (sh->slot.state != KVS_SHM_SLOT_FAILED) { /* the deadline, a bad handle */
			finish(s, sh, st);
			return true;
		}
		/* FAILED: the fill failed, but a dump holds the bytes */
		st = kvs_core_slot_refill(s->cache, &sh->slot);
		if (st == -ETIMEDOUT && now < sh->task->deadline_ns) {
			bucket_busy(cp, now); /* its bucket held by a peer: again later */
			return false;
		}
		if (st == -EAGAIN)
			return false; /* refilled by another: look again */
		if (st) {
			finish(s, sh, st);
			return true;
		}
		sh->flags |= KVS_SH_OWNED;
	}
	if (!pass_room(cp, sh, false)) {
		if (now < sh->task->deadline_ns)
			return false;
		kvs_slot_publish_failed(s->cache, &sh->slot, -ETIMEDOUT);
		finish(s, sh, -ETIMEDOUT);
		return true;
	}
	gather(cp, sh);
	return true;
}

static bool resolve(struct copier *cp, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_store *s = cp->s;

	if (sh->flags & KVS_SH_SLOWGET) {
		/* the dispatcher found the bucket busy: this thread waits for it, a
		 * little (KVS_STORE_LOCK_WAIT_NS), and tries again later till the
		 * task's deadline (a peer stopped inside holds only its own shards) */
		int rc;

		if (cp->lock_retry_ns && now < cp->lock_retry_ns && now < sh->task->deadline_ns)
			return false;
		rc = kvs_store_visit_get(s, sh, 0, queue_handoff, NULL);
		if (rc == -ETIMEDOUT && now < sh->task->deadline_ns) {
			bucket_busy(cp, now);
			return false;
		}
		sh->flags &= ~KVS_SH_SLOWGET;
		if (rc) {
			sh->err = rc;
		} else {
			/* relaxed: a budget (store/dispatch.c, room) */
			atomic_fetch_add_explicit(&s->pins, 1, memory_order_relaxed);
			if (kvs_store_sh_hit(sh))
				KVS_STORE_COUNT(s, load_hits, 1);
		}
	}
	return sh->task->op == KVS_STORE_OP_DUMP ? dump_resolve(cp, sh, now)
						 : load_resolve(cp, sh, now);
}

/* The copies of this pass: one sync, then each shard settles. */
static void batch_end(struct copier *cp)
{
	struct kvs_store *s = cp->s;
	int qrc, rc;

	if (!cp->nbatch)
		return;
	/* a prefix may be queued even when queueing failed: synced all the same */
	qrc = pass_queue(cp);
	rc = kvs_copy_sync(s->copy, sync_deadline(cp->batch_deadline));
	pass_count(cp);
	if (qrc && rc != -ETIMEDOUT) {
		kvs_log_error(&s->log, "store: copy engine: queueing %u shards' copies: %s",
			      cp->nbatch, kvs_strerror(qrc));
		rc = qrc;
	} else if (rc && rc != -ETIMEDOUT) {
		kvs_log_error(&s->log, "store: copy engine sync: %s", kvs_strerror(rc));
	}
	if (rc == -ETIMEDOUT) {
		/* The copies may still land: finish the shards, keep their pins. */
		kvs_log_error(&s->log, "store: copy engine sync: %s; %u shards' copies may still "
				       "land: their slots stay pinned and nothing is copied until "
				       "the engine drains",
			      kvs_strerror(rc), cp->nbatch);
		cp->poisoned = true;
		for (uint32_t i = 0; i < cp->nbatch; i++)
			kvs_store_sh_done(s, cp->batch[i], rc);
		return;
	}
	for (uint32_t i = 0; i < cp->nbatch; i++) {
		struct kvs_store_sh *sh = cp->batch[i];

		if (i + RELEASE_AHEAD < cp->nbatch)
			prefetch_release(s, cp->batch[i + RELEASE_AHEAD]);
		if (sh->task->op != KVS_STORE_OP_DUMP) {
			finish(s, sh, rc);
		} else if (rc) {
			kvs_slot_publish_failed(s->cache, &sh->slot, rc);
			finish(s, sh, rc);
		} else {
			KVS_STORE_COUNT(s, shards_dumped, 1);
			kvs_store_dump_settle(s, cp->dumps, sh, true);
		}
	}
	cp->nbatch = 0;
}

/* Poisoned: has the engine drained?  Then let the batch's slots go. */
static bool poison_drain(struct copier *cp)
{
	struct kvs_store *s = cp->s;

	if (kvs_copy_sync(s->copy, kvs_deadline_after(COPIER_POISON_SLICE_NS)) == -ETIMEDOUT)
		return false;
	kvs_log_warn(&s->log, "store: copy engine drained; %u slots released", cp->nbatch);
	for (uint32_t i = 0; i < cp->nbatch; i++) {
		struct kvs_store_sh *sh = cp->batch[i];

		if (sh->task->op == KVS_STORE_OP_DUMP)
			kvs_slot_publish_failed(s->cache, &sh->slot, -ETIMEDOUT);
		kvs_store_sh_put(s, sh);
	}
	cp->nbatch = 0;
	cp->poisoned = false;
	return true;
}

/* ---- waiting ---- */

/* Does sh wait on a slot word another process will publish? */
static bool waits_on_peer(const struct kvs_store_sh *sh)
{
	return !sh->err && (sh->flags & KVS_SH_GOT) && !(sh->flags & KVS_SH_OWNED) &&
	       !(sh->flags & KVS_SH_SLOWGET) && sh->slot.state == KVS_SLOT_LOADING;
}

/* Once per slice: take over the slots of dead fillers; store/dump.c looks at
 * what it waits on.  Fillers already seen alive in this pass are not asked
 * again. */
static int recover_dead(void *arg)
{
	struct copier *cp = arg;
	struct kvs_store *s = cp->s;
	struct kvs_cache *c = s->cache;
	uint64_t alive[WORK_MAX];
	uint32_t nalive = 0;
	int woke = kvs_store_dumps_poll(s, cp->dumps, kvs_now_ns(), true);

	for (uint32_t i = 0; i < cp->nwork; i++) {
		struct kvs_store_sh *sh = cp->work[i];
		uint64_t f;
		uint32_t k;
		int rc;

		if (!waits_on_peer(sh))
			continue;
		/* relaxed: a hint (kvs_core_slot_recover rechecks under the lock) */
		f = atomic_load_explicit(&c->slots[sh->slot.index].filler, memory_order_relaxed);
		for (k = 0; k < nalive && alive[k] != f; k++)
			;
		if (k < nalive)
			continue;
		rc = kvs_core_slot_recover(c, &sh->slot, 0);
		if (rc == KVS_SLOT_WAIT_OWNER) {
			sh->flags |= KVS_SH_OWNED;
			if (sh->task->op != KVS_STORE_OP_DUMP) /* a dump's we gather */
				kvs_store_read_owned(s, sh, queue_handoff, NULL);
			woke = 1;
		} else if (rc == 0) {
			alive[nalive++] = f;
		}
	}
	return woke;
}

/* Sleep until a word we wait for changes, a hand-off arrives, a deadline passes
 * or a peer died.  bell: the copier bell's value read before the last look. */
static void copier_sleep(struct copier *cp, uint32_t bell)
{
	struct kvs_store *s = cp->s;
	struct kvs_cache *c = s->cache;
	_Atomic uint32_t *words[KVS_WAIT_ANY_MAX];
	uint32_t busy[KVS_WAIT_ANY_MAX];
	uint64_t deadline = kvs_deadline_after(COPIER_IDLE_NS);
	struct kvs_wait_opts o;
	unsigned n = 0;

	for (uint32_t i = 0; i < cp->nwork; i++) {
		struct kvs_store_sh *sh = cp->work[i];

		if (waits_on_peer(sh)) {
			words[n] = &c->states[sh->slot.index];
			busy[n++] = KVS_SLOT_LOADING;
		}
		if (sh->task->deadline_ns < deadline)
			deadline = sh->task->deadline_ns;
	}
	n += kvs_store_dumps_words(s, cp->dumps, words + n, busy + n, WAIT_EXTRA - 1, &deadline);
	if (cp->lock_retry_ns && cp->lock_retry_ns < deadline)
		deadline = cp->lock_retry_ns;
	if (cp->poisoned) {
		uint64_t look = kvs_deadline_after(COPIER_POISON_SLICE_NS);

		if (look < deadline)
			deadline = look;
	}
	if (n == 0) {
		/* nothing shared: this rank's own hand-offs wake us (condition) */
		struct timespec ts = kvs_ns_to_timespec(deadline);

		pthread_mutex_lock(&s->mu);
		/* seq_cst RMW, then the look at the bell: the Dekker pair of
		 * kvs_store_wake_copier (task.c) */
		atomic_exchange_explicit(&s->copier_on_cv, 1, memory_order_seq_cst);
		/* acquire: pairs with kvs_store_wake_copier's bump (the hand-off) */
		if ((atomic_load_explicit(&s->copier_bell, memory_order_acquire) &
		     KVS_WAIT_VALUE_MASK) == bell)
			pthread_cond_timedwait(&s->copier_cv, &s->mu, &ts);
		/* relaxed: a waker that still reads 1 sends a spare signal */
		atomic_store_explicit(&s->copier_on_cv, 0, memory_order_relaxed);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	words[n] = &s->copier_bell;
	busy[n++] = bell;
	memset(&o, 0, sizeof(o));
	o.deadline_ns = deadline;
	o.check = recover_dead;
	o.check_arg = cp;
	o.spin = &c->spin;
	o.mode = c->cfg.wait;
	kvs_wait_any(words, busy, n, &o);
}

/* Take the hand-offs: shards from the ring into the working set, pins to drop,
 * finished block writes.  Returns false when the copier is to exit. */
static bool copier_take(struct copier *cp)
{
	struct kvs_store *s = cp->s;
	struct kvs_store_sh *rel;
	struct kvs_store_job *done;
	bool exit, stopping, idle, wake;

	pthread_mutex_lock(&s->mu);
	while (cp->nwork < WORK_MAX && s->ring_count) {
		cp->work[cp->nwork++] = s->ring[s->ring_head];
		s->ring_head = (s->ring_head + 1) % s->ring_cap;
		s->ring_count--;
	}
	rel = s->release_in;
	done = s->jobs_done;
	s->release_in = NULL;
	s->jobs_done = NULL;
	stopping = s->stop && s->active == 0;
	exit = stopping && s->disp_exited && s->ring_count == 0 && !rel && !done;
	wake = s->disp_blocked;
	pthread_mutex_unlock(&s->mu);
	if (wake)
		kvs_store_wake_dispatcher(s); /* ring room */
	while (rel) {
		struct kvs_store_sh *next = rel->next;

		kvs_store_sh_put(s, rel);
		rel = next;
	}
	while (done) {
		struct kvs_store_job *next = done->next;

		kvs_store_job_finish(s, cp->dumps, done);
		done = next;
	}
	if (!stopping)
		return true;
	/* Closing, every task done: what is complete in the cache is written now;
	 * once nothing of that is left, the dispatcher may leave. */
	kvs_store_dumps_close(s, cp->dumps);
	idle = cp->nwork == 0 && cp->nbatch == 0 && !cp->poisoned && s->nrel_later == 0 &&
	       !kvs_store_dumps_busy(cp->dumps);
	if (idle) {
		pthread_mutex_lock(&s->mu);
		wake = !s->copier_idle;
		s->copier_idle = true;
		pthread_mutex_unlock(&s->mu);
		if (wake)
			kvs_store_wake_dispatcher(s);
	}
	return !(exit && idle);
}

void *kvs_store_copier(void *arg)
{
	/* the open's dump state: ours from here (pthread_create orders it) */
	struct copier cp = { .s = arg, .dumps = ((struct kvs_store *)arg)->dumps0,
			     .vec = { ((struct kvs_store *)arg)->copy_vec,
				      ((struct kvs_store *)arg)->copy_vec + KVS_COPY_VEC_MAX } };
	struct kvs_store *s = cp.s;

	/* no shared lock holds this thread past a short wait (store/dump.c) */
	kvs_core_lock_wait_set(KVS_STORE_LOCK_WAIT_NS);
	for (;;) {
		/* acquire: pairs with the hand-offs' bump; read before looking, so
		 * that a hand-off after the look changes the word we sleep on */
		uint32_t bell = atomic_load_explicit(&s->copier_bell, memory_order_acquire) &
				KVS_WAIT_VALUE_MASK;
		uint32_t before, kept = 0;
		bool progress;
		uint64_t now;

		if (!copier_take(&cp))
			break;
		if (cp.poisoned)
			poison_drain(&cp);
		now = kvs_now_ns();
		if (now >= cp.reap_ns) {
			/* a dead rank's pins go without waiting for the next attach */
			kvs_core_reap_try(s->cache);
			cp.reap_ns = now + COPIER_REAP_NS;
		}
		if (cp.lock_retry_ns && now >= cp.lock_retry_ns) {
			/* slow gets are tried again below, with the working set; what
			 * still fails sets the next retry (a release: after them) */
			cp.lock_retry_ns = 0;
			if (kvs_store_release_retry(s) && s->nrel_later == 0)
				cp.lock_backoff.step_ns = 0;
		}
		before = cp.nwork;
		for (uint32_t i = 0; i < cp.nwork; i++) {
			struct kvs_store_sh *sh = cp.work[i];

			if (!resolve(&cp, sh, now))
				cp.work[kept++] = sh;
		}
		cp.nwork = kept;
		if (s->nrel_later && !cp.lock_retry_ns)
			bucket_busy(&cp, now); /* a release was kept: its lock, later */
		progress = kept != before;
		progress |= kvs_store_dumps_poll(s, cp.dumps, now, false);
		if (cp.nbatch && !cp.poisoned) {
			batch_end(&cp);
			progress = true;
		} else if (!cp.nbatch) {
			pass_count(&cp); /* copies that failed */
		}
		kvs_store_release_flush(s);
		if (!progress)
			copier_sleep(&cp, bell);
	}
	kvs_store_dumps_fini(s, cp.dumps);
	kvs_store_thread_exit(s);
	return NULL;
}
