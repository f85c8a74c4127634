/*
 * store/dump.c — the dump protocol on the copier's side (docs/store.md,
 * "Dumps"; model/dump.pml is its model, checked by Spin).  The contract: a dump
 * that returned 0 is stored -- durable, in the backend when it returns; cached,
 * in the cache and then written, or an ERROR line says it could not be.
 *
 * One invariant carries it (core/layout.h, "Dumps"): a shard a dump put in the
 * cache is DIRTY until its block is in the backend -- never evicted, never reset
 * by an adoption, never removed with its cache.  The DIRTY slots of a block are
 * its record; nothing else (no count, no table of blocks) says what is to be
 * written, so nothing can overflow or expire into a loss.  Everything below only
 * decides who acts on that record, and when:
 *
 *   settle   a dumped shard's slot becomes DIRTY (published by this rank's
 *            gather, or found DIRTY: its protection extended to this dump's
 *            deadline; or, over a backend whose blocks are not atomic, found
 *            READY and made DIRTY again: the block's write rewrites it).  Unless a
 *            drop of its block is in progress (then it is dumped again once the
 *            drop is over: a dump acknowledged now could see the block's other
 *            shards dropped), it is acknowledged: finished (cached) or waiting
 *            for its slot to leave DIRTY (durable).  Its pin goes: a DIRTY slot
 *            needs none.
 *   look     the shard's block is then looked at (a scan of its slots from the
 *            last shard down: an incomplete block stops it early).  Complete:
 *            its designated writer -- the rank that gathered the shard a hash of
 *            the block picks, so the writes spread over the ranks -- writes it;
 *            the completer rings that rank and writes the block itself if it is
 *            not written within WRITER_GRACE_NS (or at once, when that rank is
 *            itself, nobody or dead).
 *   write    (store/write.c) the block's claim taken, the block scanned again
 *            under it and written from its slots, cleaned, the claim ended
 *            STORED; retried, or given up (its shards dropped, an ERROR line).
 *   sweep    once per SWEEP_NS for the node (the rank whose CAS of the header's
 *            sweep_ns moves it on), while the header's dirty_hint says a slot
 *            may be DIRTY, and at every store's open and close: every DIRTY
 *            slot's block is looked at.  A complete one nobody writes (its writer
 *            died, nobody completed it while watching, its cache was adopted) is
 *            written, as by a look (its designated writer, if alive, first); an
 *            incomplete one whose every DIRTY shard's protection is
 *            over (dirty_until_ns: the latest deadline of its dumps, plus a
 *            grace) is dropped (store/write.c: under the claim, DROPPING, after a
 *            rescan there).  This is what makes the contract hold
 *            whatever dies, closes or is forgotten: the record is in shared
 *            memory, and every rank looks at it.
 *   close    a closing rank sweeps at once; a complete block whose designated
 *            writer lives is left to it (rung: its look, sweep or close writes
 *            it), any other written by the closer; the last one out leaves a
 *            cache that still holds DIRTY slots, for the next open's sweep
 *            (core/segment.c, the removal guard).
 *   flush    kvs_store_flush waits until every block this rank acknowledged has
 *            left DIRTY (the acked list below), writing without graces meanwhile.
 *
 * The drop check of settle and the scan of a drop are the two sides of a
 * Dekker pair (the dump writes its slot then reads the claim; the drop writes
 * the claim then reads the slots): each side has a seq_cst read-modify-write of
 * one shared word between its write and its read (kvs_core_dirty_fence), so at
 * least one of them sees the other.
 *
 * No backend is asked anything here (a question to a store that stopped
 * answering would hold every task of this thread); locks are waited for at most
 * KVS_STORE_LOCK_WAIT_NS (kvs_core_lock_wait_set): what could not take one is
 * kept and tried again after a backoff doubling from KVS_STORE_LOCK_RETRY_MIN_NS
 * to _MAX_NS, and a shard parked so past its task's deadline finishes
 * -ETIMEDOUT, said once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "store/dump.h"

/* How long a complete block waits for its designated writer before the rank
 * that completed it writes it. */
#define WRITER_GRACE_NS (100ull * KVS_NSEC_PER_MSEC)
/* The node's sweep of its DIRTY slots: at most once per this (while any may be
 * DIRTY), this many state words a step (a copier turn). */
#define SWEEP_NS KVS_NSEC_PER_SEC
#define SWEEP_STEP 65536u
/* Dedup window of a block list: a list gets a block's shards together. */
#define BLOCKS_RECENT 64u

/* ---- lists ---- */

static bool same_block(const struct kvs_block_id *a, const struct kvs_block_id *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

bool kvs_store_blocks_add(struct blocks *l, const struct kvs_block_id *block, uint64_t at)
{
	for (uint32_t i = l->n, k = 0; i-- > 0 && k < BLOCKS_RECENT; k++)
		if (same_block(&l->v[i], block)) {
			if (at < l->at[i])
				l->at[i] = at;
			return true;
		}
	if (l->n == l->cap) {
		uint32_t cap = l->cap ? 2 * l->cap : 64;
		struct kvs_block_id *v = realloc(l->v, cap * sizeof(*v));
		uint64_t *t = v ? realloc(l->at, cap * sizeof(*t)) : NULL;

		if (v)
			l->v = v;
		if (!t)
			return false;
		l->at = t;
		l->cap = cap;
	}
	l->v[l->n] = *block;
	l->at[l->n++] = at;
	return true;
}

static void blocks_del(struct blocks *l, uint32_t i)
{
	l->v[i] = l->v[--l->n];
	l->at[i] = l->at[l->n];
}

static void blocks_fini(struct blocks *l)
{
	free(l->v);
	free(l->at);
}

/* The earliest time in l (UINT64_MAX: none). */
static uint64_t blocks_next(const struct blocks *l)
{
	uint64_t next = UINT64_MAX;

	for (uint32_t i = 0; i < l->n; i++)
		if (l->at[i] < next)
			next = l->at[i];
	return next;
}

static void due(struct kvs_store_dumps *d, uint64_t at)
{
	if (at < d->next_ns)
		d->next_ns = at;
}

int kvs_store_dumps_init(struct kvs_store *s, struct kvs_store_dumps **out)
{
	struct kvs_store_dumps *d = calloc(1, sizeof(*d));

	*out = NULL;
	if (!d)
		return -ENOMEM;
	d->scan = calloc(s->spb ? s->spb : 1, sizeof(*d->scan));
	if (!d->scan) {
		free(d);
		return -ENOMEM;
	}
	d->next_ns = 0; /* a first look: a sweep, if the node holds DIRTY slots */
	*out = d;
	return 0;
}

void kvs_store_dumps_fini(struct kvs_store *s, struct kvs_store_dumps *d)
{
	if (!d)
		return;
	kvs_log_limit_flush(&s->log, &d->retry_log, KVS_LOG_WARN, "block write retries");
	kvs_log_limit_flush(&s->log, &d->given_up_log, KVS_LOG_ERROR,
			    "block writes given up (those blocks are not in the backend)");
	kvs_log_limit_flush(&s->log, &d->dropped_log, KVS_LOG_WARN,
			    "incomplete blocks dropped (never in the backend)");
	blocks_fini(&d->look);
	blocks_fini(&d->grace);
	blocks_fini(&d->mine);
	blocks_fini(&d->room);
	blocks_fini(&d->swept);
	free(d->acked);
	free(d->aset);
	free(d->scan);
	free(d);
}

bool kvs_store_dumps_busy(const struct kvs_store_dumps *d)
{
	return d && (d->waiting || d->dropwait || d->locked || d->ending || d->jobs || d->look.n ||
		     d->room.n || (d->closing && (!d->close_swept || d->sweeping || d->grace.n)));
}

/* Drop sh's pin, keeping the shard (what follows needs none). */
static void unpin(struct kvs_store *s, struct kvs_store_sh *sh)
{
	if (sh->flags & KVS_SH_GOT) {
		sh->flags &= ~KVS_SH_GOT;
		kvs_store_release(s, &sh->slot);
	}
}

void kvs_store_dumps_lock_busy(struct kvs_store_dumps *d, uint64_t now)
{
	d->lock_retry_ns = now + kvs_store_backoff_next(&d->lock_backoff, KVS_STORE_LOCK_RETRY_MIN_NS,
							KVS_STORE_LOCK_RETRY_MAX_NS);
	due(d, d->lock_retry_ns);
}

/* ---- blocks found stored ---- */

static bool found_lately(const struct kvs_store_dumps *d, const struct kvs_block_id *block,
			 uint64_t now)
{
	for (uint32_t i = 0; i < FOUND_RECENT; i++)
		if (d->found[i].at_ns && now < d->found[i].at_ns + FOUND_FOR_NS &&
		    same_block(&d->found[i].block, block))
			return true;
	return false;
}

static void found_now(struct kvs_store_dumps *d, const struct kvs_block_id *block, uint64_t now)
{
	d->found[d->found_next] = (struct found){ *block, now };
	d->found_next = (d->found_next + 1) % FOUND_RECENT;
}

/* ---- looking at a block ---- */

/* Look at block now (a shard of it just settled, a bell, a sweep): written if
 * complete and ours to write, dropped if it never completed and may be, a
 * designated writer rung.  From sweep: every shard looked at (else the look
 * stops at the first, from the last, not DIRTY).  Returns whether the block
 * still waits for shards (incomplete, or looked at again later). */
static bool look_at(struct kvs_store *s, struct kvs_store_dumps *d,
		    const struct kvs_block_id *block, uint64_t now, bool from_sweep)
{
	struct kvs_cache *c = s->cache;
	struct kvs_dirty_scan sc;
	uint32_t ds = kvs_core_claim_designated(c, block);
	int rank, rc;

	memset(d->scan, 0, s->spb * sizeof(*d->scan));
	rc = kvs_core_dirty_scan(c, block, now, from_sweep, &sc, d->scan);
	if (rc) {
		kvs_store_blocks_add(&d->look, block, 0);
		kvs_store_dumps_lock_busy(d, now);
		return true;
	}
	if (sc.dirty == 0)
		return false; /* written, dropped, or never dumped here */
	if (s->block_atomic && sc.ready) {
		kvs_store_block_write(s, d, block); /* stored: its claim cleans the DIRTY ones */
		return false;
	}
	if (sc.missing || sc.dirty != s->spb) {
		/* incomplete: dropped once every DIRTY shard's protection is over
		 * (a sweep has every shard's: a look stops at the first missing) */
		if (from_sweep && !sc.fresh)
			kvs_store_block_drop(s, d, block);
		return true;
	}
	rank = kvs_core_slot_filler_rank(c, d->scan[ds].index);
	if (d->urgent || rank < 0 || rank == c->rank_idx ||
	    !kvs_core_rank_alive(c, (uint32_t)rank,
				 atomic_load_explicit(&c->ranks[rank].epoch, memory_order_relaxed))) {
		kvs_store_block_write(s, d, block);
		return false;
	}
	/* its designated writer: rung, and ours after the grace -- unless we close:
	 * that rank lives, and its look, sweep or close writes it */
	kvs_core_claim_ring(c, (uint32_t)rank);
	if (d->closing)
		return false;
	if (kvs_store_blocks_add(&d->grace, block, now + WRITER_GRACE_NS))
		due(d, now + WRITER_GRACE_NS);
	else
		kvs_store_block_write(s, d, block);
	return false;
}

/* ---- settling a dumped shard ---- */

/* The set's slot of block: where it is, or the empty slot it would take. */
static uint32_t aset_find(const struct kvs_store_dumps *d, const struct kvs_block_id *block)
{
	uint32_t i = (uint32_t)kvs_core_hash(block, 0) & d->aset_mask;

	/* an index below acked_head is an entry gone from the head: no match,
	 * probed past (the set is remade before it fills up) */
	while (d->aset[i] && !(d->aset[i] - 1 >= d->acked_head &&
			      same_block(&d->acked[d->aset[i] - 1].block, block)))
		i = (i + 1) & d->aset_mask;
	return i;
}

/* Remake the set from acked[acked_head, nacked), grown to more than twice
 * want entries (never shrunk: a remake that needs no more room cannot fail).
 * false: no memory (the set is left as it was). */
static bool aset_remake(struct kvs_store_dumps *d, uint32_t want)
{
	uint32_t size = d->aset ? d->aset_mask + 1 : 64, *v;

	while (size <= 2 * want)
		size *= 2;
	if (!d->aset || size != d->aset_mask + 1) {
		v = realloc(d->aset, size * sizeof(*v));
		if (!v)
			return false;
		d->aset = v;
		d->aset_mask = size - 1;
	}
	memset(d->aset, 0, size * sizeof(*d->aset));
	for (uint32_t k = d->acked_head; k < d->nacked; k++)
		d->aset[aset_find(d, &d->acked[k].block)] = k + 1;
	return true;
}

/* Remember a cached dump's block until it is known stored (kvs_store_flush):
 * one entry a block, whichever of its shards came first (they leave DIRTY
 * together: written, or dropped). */
static void acked_add(struct kvs_store *s, struct kvs_store_dumps *d, const struct kvs_store_sh *sh)
{
	if (d->aset && d->aset[aset_find(d, &sh->block)])
		return;
	if (d->acked_head > 0 && d->acked_head >= d->nacked / 2) {
		/* the resolved head goes: compact (the set remade below) */
		memmove(d->acked, d->acked + d->acked_head, (d->nacked - d->acked_head) * sizeof(*d->acked));
		d->nacked -= d->acked_head;
		d->acked_head = 0;
		if (!aset_remake(d, d->nacked + 1))
			return; /* a flush then waits only for what it remembers */
	}
	if (d->nacked == d->acap) {
		uint32_t cap = d->acap ? 2 * d->acap : 64;
		struct acked *v = realloc(d->acked, cap * sizeof(*v));

		if (!v)
			return;
		d->acked = v;
		d->acap = cap;
	}
	if ((!d->aset || 2 * (d->nacked + 1) >= d->aset_mask + 1) && !aset_remake(d, d->nacked + 1))
		return;
	d->acked[d->nacked] = (struct acked){ sh->block, sh->shard, sh->dirty };
	d->aset[aset_find(d, &sh->block)] = ++d->nacked;
	pthread_mutex_lock(&s->mu);
	s->unflushed = d->nacked - d->acked_head;
	pthread_mutex_unlock(&s->mu);
}

/* sh's slot is DIRTY for this dump: acknowledge it, unless a drop of its block
 * is in progress.  Its pin goes; its block is looked at. */
static void acknowledge(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	struct kvs_cache *c = s->cache;

	/* the Dekker pair with kvs_store_block_drop (its claim written, then the
	 * slots read; here the slot written, then the claim read) */
	kvs_core_dirty_fence(c);
	if (kvs_core_claim_peek(c, &sh->block, KVS_SHM_CLAIM_DROPPING)) {
		struct kvs_claim_view v;
		int rc = kvs_core_claim_look(c, &sh->block, &v);

		if (rc == -ETIMEDOUT) {
			sh->next = d->locked;
			d->locked = sh;
			kvs_store_dumps_lock_busy(d, kvs_now_ns());
			return;
		}
		if (rc == 0 && v.state == KVS_SHM_CLAIM_DROPPING && v.holder_alive) {
			/* not acknowledged while the block's other shards may still
			 * go: dumped again once the drop is over */
			unpin(s, sh);
			sh->next = d->dropwait;
			d->dropwait = sh;
			return;
		}
	}
	sh->dirty = (struct kvs_dirty_shard){ sh->slot.index, sh->slot.generation };
	unpin(s, sh);
	kvs_store_blocks_add(&d->look, &sh->block, 0);
	if (sh->shard == kvs_core_claim_designated(c, &sh->block))
		kvs_store_blocks_add(&d->mine, &sh->block, sh->task->deadline_ns + KVS_CLAIM_GRACE_NS);
	if (s->cfg.dump_wait == KVS_DUMP_WAIT_CACHED) {
		acked_add(s, d, sh);
		kvs_store_sh_finish(s, sh, 0);
		return;
	}
	sh->flags |= KVS_SH_WAITING;
	sh->next = d->waiting;
	d->waiting = sh;
	due(d, sh->task->deadline_ns);
}


/* Settle sh (pinned, valid bytes): make or keep its slot DIRTY, then
 * acknowledge.  Again after a park: every step is idempotent. */
static void settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	uint64_t until = sh->task->deadline_ns + KVS_CLAIM_GRACE_NS;
	int st;

	if (!(sh->flags & KVS_SH_HELD)) {
		if (s->block_atomic && found_lately(d, &sh->block, kvs_now_ns())) {
			kvs_store_sh_finish(s, sh, 0); /* a dump of ours found it stored a moment ago */
			return;
		}
		st = kvs_core_dirty_hold(s->cache, &sh->slot, until, !s->block_atomic);
		if (st == -ETIMEDOUT) {
			sh->next = d->locked;
			d->locked = sh;
			kvs_store_dumps_lock_busy(d, kvs_now_ns());
			return;
		}
		if (st == KVS_SHM_SLOT_READY) {
			kvs_store_sh_finish(s, sh, 0); /* written and cleaned while we gathered */
			return;
		}
		if (st != KVS_SHM_SLOT_DIRTY) {
			/* dropped under us (a block given up, or one that never
			 * completed): this dump's bytes go in again */
			unpin(s, sh);
			sh->flags = 0;
			sh->err = 0;
			kvs_store_handoff_revisit(s, sh);
			return;
		}
		sh->flags |= KVS_SH_HELD;
	}
	acknowledge(s, d, sh);
}

void kvs_store_dump_settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh,
			   bool owned)
{
	if (!d) {
		kvs_store_sh_finish(s, sh, -ENOMEM);
		return;
	}
	if (owned) {
		int rc = kvs_core_slot_publish_dirty(s->cache, &sh->slot,
						     sh->task->deadline_ns + KVS_CLAIM_GRACE_NS);

		if (rc) {
			kvs_log_error(&s->log, "store: publishing dumped slot %u: %s", sh->slot.index,
				      kvs_strerror(rc));
			kvs_store_sh_finish(s, sh, rc);
			return;
		}
		sh->slot.state = KVS_SHM_SLOT_DIRTY;
		sh->flags |= KVS_SH_HELD;
	}
	settle(s, d, sh);
}

void kvs_store_dump_found(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_sh *sh)
{
	uint64_t now = kvs_now_ns();

	if (!s->block_atomic && d) {
		/* the shard proves only itself: DIRTY again, part of the block's
		 * record, and the block written whole */
		settle(s, d, sh);
		return;
	}
	/* once per block lately (a task's shards of one block come together, and
	 * the other layers' tasks soon after): a STORED record for the others */
	if (d && !found_lately(d, &sh->block, now)) {
		found_now(d, &sh->block, now);
		kvs_core_claim_stored(s->cache, &sh->block);
	}
	kvs_store_sh_finish(s, sh, 0);
}

/* ---- waiting ---- */

/* Does a STORED record say block is in the backend (its DIRTY slots not cleaned
 * yet)?  A lock-free peek first: the claim table's lock only when it says so. */
static bool stored_lately(struct kvs_cache *c, const struct kvs_block_id *block)
{
	struct kvs_claim_view v;

	return kvs_core_claim_peek(c, block, KVS_SHM_CLAIM_STORED) &&
	       kvs_core_claim_look(c, block, &v) == 0 && v.state == KVS_SHM_CLAIM_STORED;
}

/* One durable wait: true when it is over (finished, or handed back to visit). */
static bool wait_step(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_cache *c = s->cache;
	int32_t err = 0;
	int st;

	if (kvs_core_dirty_peek(c, sh->dirty.index, sh->dirty.generation) && now < sh->task->deadline_ns) {
		if (!stored_lately(c, &sh->block))
			return false; /* still DIRTY: not stored yet */
		kvs_store_sh_finish(s, sh, 0);
		return true;
	}
	st = kvs_core_dirty_look(c, &sh->block, sh->shard, sh->dirty.index, sh->dirty.generation, &err);
	if (st == -ETIMEDOUT)
		return false; /* its bucket's lock not had: the next look */
	if (st == KVS_SHM_SLOT_READY) {
		kvs_store_sh_finish(s, sh, 0);
		return true;
	}
	if (st == KVS_SHM_SLOT_FAILED) {
		kvs_store_sh_finish(s, sh, err ? err : -EIO); /* dropped: its write given up, or incomplete */
		return true;
	}
	if (st == KVS_SHM_SLOT_DIRTY && now < sh->task->deadline_ns)
		return false;
	if (st == KVS_SHM_SLOT_DIRTY) {
		/* the deadline: the block never completed here (another node may
		 * hold it: kvs_store_lookup asks), or its write did not finish */
		struct kvs_claim_view v;
		struct kvs_dirty_scan sc;

		if (kvs_core_dirty_scan(c, &sh->block, now, false, &sc, NULL) == 0 && sc.missing)
			err = -KVS_EINCOMPLETE;
		else if (kvs_core_claim_look(c, &sh->block, &v) == 0 &&
			 v.state == KVS_SHM_CLAIM_WRITING && v.error)
			err = v.error; /* the last failed attempt's */
		else
			err = -ETIMEDOUT;
		kvs_store_sh_finish(s, sh, err);
		return true;
	}
	/* its slot recycled: it left DIRTY and was evicted since -- stored, if
	 * a record says so; else this dump's bytes go in again */
	{
		struct kvs_claim_view v;

		if (kvs_core_claim_look(c, &sh->block, &v) == 0 && v.state == KVS_SHM_CLAIM_STORED) {
			kvs_store_sh_finish(s, sh, 0);
			return true;
		}
	}
	if (now >= sh->task->deadline_ns) {
		kvs_store_sh_finish(s, sh, -ETIMEDOUT);
		return true;
	}
	sh->flags = 0;
	sh->err = 0;
	kvs_store_handoff_revisit(s, sh);
	return true;
}

/* Has the block this rank acknowledged a cached dump of left DIRTY?  0: not
 * yet; 1: stored (READY, or a STORED record of it; or its slot recycled: it
 * left DIRTY, and a drop -- which rings every rank, whose copier then looks at
 * all it acknowledged while the slot lingers FAILED -- would have been seen);
 * < 0: dropped, that error. */
static int acked_left(struct kvs_cache *c, const struct acked *a)
{
	int32_t err = 0;
	int st;

	if (kvs_core_dirty_peek(c, a->slot.index, a->slot.generation))
		return stored_lately(c, &a->block);
	st = kvs_core_dirty_look(c, &a->block, a->shard, a->slot.index, a->slot.generation, &err);
	if (st == -ETIMEDOUT || st == KVS_SHM_SLOT_DIRTY)
		return 0;
	return st == KVS_SHM_SLOT_FAILED ? (err ? err : -EIO) : 1;
}

/* The blocks this rank acknowledged that left DIRTY go; their count (and a
 * drop's error) for kvs_store_flush.  Without all, from the oldest up to the
 * first still DIRTY (a peek or two a pass); with all (a flush waits), every
 * one, so the count is exact; with look, those still DIRTY are looked at
 * (written now: once per flush call).  Returns whether any went. */
static bool acked_step(struct kvs_store *s, struct kvs_store_dumps *d, bool all, bool look)
{
	struct kvs_cache *c = s->cache;
	uint32_t before = d->nacked - d->acked_head, kept = d->acked_head;
	int err = 0, left;

	if (!all) {
		for (; d->acked_head < d->nacked; d->acked_head++) {
			left = acked_left(c, &d->acked[d->acked_head]);
			if (left == 0)
				break; /* the oldest still DIRTY: the rest later */
			if (left < 0 && !err)
				err = left;
		}
	} else {
		for (uint32_t i = d->acked_head; i < d->nacked; i++) {
			left = acked_left(c, &d->acked[i]);
			if (left < 0 && !err)
				err = left;
			if (left != 0)
				continue;
			if (look)
				kvs_store_blocks_add(&d->look, &d->acked[i].block, 0);
			d->acked[kept++] = d->acked[i];
		}
		d->nacked = kept;
		if (kept - d->acked_head != before)
			aset_remake(d, kept); /* entries moved: no more room needed, cannot fail */
	}
	if (d->nacked - d->acked_head == before)
		return false;
	pthread_mutex_lock(&s->mu);
	s->unflushed = d->nacked - d->acked_head;
	if (err && !s->flush_err)
		s->flush_err = err;
	pthread_cond_broadcast(&s->flush_cv);
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* ---- the sweep ---- */

/* Is a sweep of the node's DIRTY slots due, and is it ours? */
static bool sweep_turn(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now)
{
	struct kvs_shm_header *h = s->cache->hdr;
	/* relaxed: a count from above, and a turn (see core/layout.h) */
	uint64_t at = atomic_load_explicit(&h->sweep_ns, memory_order_relaxed);

	if (atomic_load_explicit(&h->dirty_hint, memory_order_relaxed) == 0) {
		d->close_swept = d->closing; /* nothing DIRTY: nothing for a close to sweep */
		return false;
	}
	if (d->closing && !d->close_swept)
		return true;
	if (now >= at && atomic_compare_exchange_strong_explicit(&h->sweep_ns, &at, now + SWEEP_NS,
								 memory_order_relaxed,
								 memory_order_relaxed)) {
		due(d, now + SWEEP_NS); /* the next turn, ours or a peer's */
		return true;
	}
	due(d, at > now ? at : now + SWEEP_NS); /* a peer's turn (a failed CAS: it moved on) */
	return false;
}

/* One step of the sweep: SWEEP_STEP state words; at the end, every block found
 * looked at.  true while it goes on. */
static bool sweep_step(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now)
{
	struct kvs_cache *c = s->cache;
	uint32_t end = d->sweep_next + SWEEP_STEP < c->slot_count ? d->sweep_next + SWEEP_STEP
								   : c->slot_count;

	for (uint32_t i = d->sweep_next; i < end; i++) {
		struct kvs_block_id block;
		uint32_t shard;

		/* relaxed: a look; each is checked again under its bucket lock */
		if ((atomic_load_explicit(&c->states[i], memory_order_relaxed) & KVS_WAIT_VALUE_MASK) !=
		    KVS_SHM_SLOT_DIRTY)
			continue;
		if (kvs_core_dirty_key(c, i, &block, &shard) == 1)
			kvs_store_blocks_add(&d->swept, &block, 0);
	}
	d->sweep_next = end;
	if (end < c->slot_count)
		return true;
	for (uint32_t i = 0; i < d->swept.n; i++)
		look_at(s, d, &d->swept.v[i], now, true);
	d->swept.n = 0;
	d->sweep_next = 0;
	return false;
}

/* ---- the copier's turn ---- */

/* Retry what waited for a lock (its backoff is over). */
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
		kvs_store_job_settle(s, d, job);
	}
	while ((sh = locked)) {
		locked = sh->next;
		if (now >= sh->task->deadline_ns) {
			if (!said)
				kvs_log_warn(&s->log, "store: a dump's shards not settled by their "
						      "deadline: a bucket's lock (or the claim table's) is "
						      "held by a peer (stopped?)");
			said = true;
			kvs_store_sh_finish(s, sh, -ETIMEDOUT);
			continue;
		}
		settle(s, d, sh);
	}
	if (!d->lock_retry_ns)
		d->lock_backoff.step_ns = 0; /* everything had its lock */
}

bool kvs_store_dumps_poll(struct kvs_store *s, struct kvs_store_dumps *d, uint64_t now, bool check)
{
	struct kvs_cache *c = s->cache;
	struct kvs_store_sh **link, *sh, *dropwait;
	uint32_t bell, cbell, kept;
	bool changed = false, rung, flush_new, swept;

	if (!d)
		return false;
	if (d->lock_retry_ns && now >= d->lock_retry_ns) {
		lock_retry(s, d, now);
		changed = true;
	}
	pthread_mutex_lock(&s->mu);
	d->urgent = s->flushing;
	flush_new = s->flush_gen != d->flush_gen;
	d->flush_gen = s->flush_gen;
	pthread_mutex_unlock(&s->mu);
	/* acquire: read before the looks below (a ring after them changes it) */
	bell = atomic_load_explicit(&c->me->bell, memory_order_acquire) & KVS_WAIT_VALUE_MASK;
	cbell = atomic_load_explicit(&c->hdr->claims_bell, memory_order_acquire) & KVS_WAIT_VALUE_MASK;
	rung = bell != d->rank_bell || check;
	d->rank_bell = bell;
	if (!d->look.n && !d->sweeping && !rung && now < d->next_ns && cbell == d->claims_bell &&
	    !d->urgent && !d->closing)
		return changed; /* nothing rang, nothing due */
	d->next_ns = UINT64_MAX;
	/* the blocks a drop held back, and those whose claim met a full table */
	if (cbell != d->claims_bell || rung) {
		d->claims_bell = cbell;
		dropwait = d->dropwait;
		d->dropwait = NULL;
		while ((sh = dropwait)) {
			dropwait = sh->next;
			sh->flags = 0;
			sh->err = 0;
			kvs_store_handoff_revisit(s, sh); /* dumped again: a peek first */
			changed = true;
		}
		for (uint32_t i = 0; i < d->room.n; i++)
			kvs_store_blocks_add(&d->look, &d->room.v[i], 0);
		d->room.n = 0;
	}
	/* durable waits */
	for (link = &d->waiting; (sh = *link);) {
		struct kvs_store_sh *next = sh->next; /* a step may free sh, or hand it on */

		if (wait_step(s, sh, now)) {
			*link = next;
			changed = true;
			continue;
		}
		due(d, sh->task->deadline_ns);
		link = &sh->next;
	}
	/* what this rank acknowledged: the head's that left DIRTY go; all of them
	 * when a write or drop ended (the bell), at close and while a flush waits,
	 * looked at (written now) once per flush call */
	if (d->nacked > d->acked_head)
		changed |= acked_step(s, d, d->urgent || d->closing || rung, flush_new);
	/* our designated blocks, when a completer rang us (until their
	 * protection is over; a block done with goes) */
	if (rung) {
		kept = 0;
		for (uint32_t i = 0; i < d->mine.n; i++)
			if (now < d->mine.at[i] && look_at(s, d, &d->mine.v[i], now, false)) {
				d->mine.v[kept] = d->mine.v[i];
				d->mine.at[kept++] = d->mine.at[i];
			}
		d->mine.n = kept;
	}
	for (uint32_t i = 0; i < d->grace.n;) {
		if (d->urgent || now >= d->grace.at[i] || d->closing) {
			struct kvs_block_id block = d->grace.v[i];
			bool early = now < d->grace.at[i];

			blocks_del(&d->grace, i);
			if (d->closing && !d->urgent && early)
				look_at(s, d, &block, now, false); /* its writer's, if it lives */
			else
				kvs_store_block_write(s, d, &block);
			changed = true;
			continue;
		}
		i++;
	}
	due(d, blocks_next(&d->grace));
	/* the blocks to look at (a look may add to the list: taken whole) */
	if (d->look.n && !d->lock_retry_ns) {
		struct blocks look = d->look;

		d->look = (struct blocks){ 0 };
		for (uint32_t i = 0; i < look.n; i++)
			look_at(s, d, &look.v[i], now, false);
		look.n = 0;
		if (!d->look.cap) {
			d->look = look; /* keep the allocation */
		} else {
			for (uint32_t i = 0; i < d->look.n; i++)
				kvs_store_blocks_add(&look, &d->look.v[i], d->look.at[i]);
			blocks_fini(&d->look);
			d->look = look;
		}
		changed = true;
	}
	/* the node's sweep, when it is our turn (or we close: a close with
	 * nothing DIRTY on the node is swept at once, which is a change too) */
	swept = d->close_swept;
	if (!d->sweeping && !d->lock_retry_ns && sweep_turn(s, d, now))
		d->sweeping = true;
	changed |= d->close_swept != swept;
	if (d->sweeping) {
		d->sweeping = sweep_step(s, d, now);
		if (d->closing && !d->sweeping)
			d->close_swept = true; /* one sweep at close; the writes it began follow */
		changed = true;
		if (d->sweeping)
			due(d, now); /* the next step at once */
	}
	if (d->lock_retry_ns)
		due(d, d->lock_retry_ns);
	return changed;
}

void kvs_store_dumps_close(struct kvs_store *s, struct kvs_store_dumps *d)
{
	(void)s;
	if (!d || d->closing)
		return;
	d->closing = true;
	d->next_ns = 0;
}

unsigned kvs_store_dumps_words(struct kvs_store *s, struct kvs_store_dumps *d,
			       _Atomic uint32_t **words, uint32_t *busy, unsigned max,
			       uint64_t *deadline)
{
	struct kvs_cache *c = s->cache;
	unsigned n = 0;

	if (!d)
		return 0;
	if (d->next_ns < *deadline)
		*deadline = d->next_ns;
	/* our bell: a peer ended a write or drop, or completed a block of ours */
	if ((d->waiting || d->dropwait || d->mine.n || d->nacked > d->acked_head) && n < max) {
		words[n] = &c->me->bell;
		busy[n++] = d->rank_bell;
	}
	/* the claims bell: a claim ended or was freed */
	if ((d->room.n || d->dropwait) && n < max) {
		words[n] = &c->hdr->claims_bell;
		busy[n++] = d->claims_bell;
	}
	return n;
}
