/*
 * core/store_copy.c — the copier thread: moves bytes between the cache's slots
 * and the caller's tensors through the copy engine.
 *
 * It takes shards from the ring in the dispatcher's visiting order into a
 * working set of up to KVS_WAIT_ANY_MAX - 1 shards and handles whichever is
 * ready first, so a ready shard is never stuck behind a slow one:
 *
 *   load/prefetch  when the slot is READY (its owner published it: this rank's
 *                  dispatcher at read completion, or a peer), H2D-scatter it
 *                  into the shard's tensors (head slices: each tensor's own byte
 *                  range); FAILED carries the owner's error to this task.  When
 *                  the task's last shard is resolved: one sync of the engine,
 *                  then every shard's slot is released (the task is done) — a slot
 *                  stays pinned until the copy that reads it has completed.
 *   dump           an owned shard is D2H-gathered (after the task's CUDA event);
 *                  the gathers of one pass are synced once, published READY and,
 *                  for the block's writer, handed to the dispatcher to write.  A
 *                  writer waits for shards a peer is gathering, then writes them.
 *
 * Staging: a slot the registration thread (store_register.c) has not registered
 * with the copy engine yet is not copied from directly (with CUDA that would be
 * a pageable copy, synchronous and through the driver's own buffers): its
 * tensor ranges go through the store's pinned staging buffer in pieces, each
 * synced before the buffer is reused (memcpy + h2d for a load, d2h + memcpy for
 * a dump).  Slow next to the direct path, and only until the slot's chunk is
 * registered.
 *
 * Sleeping: kvs_wait_any over the state words of the shards still LOADING plus
 * the ring's bell (the dispatcher bumps it at every push), futex_waitv in the
 * kernel build.  Once per slice the check hook looks at the fillers of the
 * slots it waits for: a dead filler's slot is taken over (load: the dispatcher
 * reads it) or failed with -KVS_EOWNERDEAD (dump: nobody else has the bytes).
 * With nothing to wait for, the thread sleeps on its condition variable.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "core/store.h"

#define WORK_MAX (KVS_WAIT_ANY_MAX - 1) /* one word for the ring's bell */
/* Idle sleep bound (the wake is the condition variable; this only bounds it). */
#define COPIER_IDLE_NS KVS_NSEC_PER_SEC
/* Longest wait for the engine to finish a task's copies beyond its deadline. */
#define COPIER_SYNC_GRACE_NS (10ull * KVS_NSEC_PER_SEC)

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
	struct kvs_store_sh *work[WORK_MAX];
	uint32_t nwork;
	struct kvs_store_sh *gathered[WORK_MAX]; /* dump gathers of this pass */
	uint32_t ngathered;
};

static uint64_t sync_deadline(const struct kvs_store_task *t)
{
	uint64_t grace = kvs_deadline_after(COPIER_SYNC_GRACE_NS);

	return t->deadline_ns > grace ? t->deadline_ns : grace;
}

static void copy_count(struct kvs_store *s, const struct kvs_store_sh *sh, uint64_t t0)
{
	uint64_t bytes = 0;

	for (uint32_t k = 0; k < sh->nseg; k++)
		bytes += sh->segs[k].len;
	KVS_STORE_COUNT(s, copy_bytes, bytes);
	KVS_STORE_COUNT(s, copy_ns, kvs_now_ns() - t0);
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
	uint64_t deadline = sync_deadline(sh->task);
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

/* One shard's copy, direct or staged. */
static int shard_copy(struct kvs_store *s, struct kvs_store_sh *sh, bool h2d)
{
	if (!kvs_store_slot_registered(s, sh))
		return staged_copy(s, sh, h2d);
	return h2d ? kvs_copy_h2d(s->copy, sh->data, sh->segs, sh->nseg)
		   : kvs_copy_d2h(s->copy, sh->data, sh->segs, sh->nseg);
}

/* ---- loads ---- */

/* Every shard of a load resolved: sync once, finish, release. */
static void load_end(struct kvs_store *s, struct kvs_store_task *t)
{
	int rc = 0;

	if (t->copied) {
		uint64_t t0 = kvs_now_ns();

		rc = kvs_copy_sync(s->copy, sync_deadline(t));
		KVS_STORE_COUNT(s, copy_ns, kvs_now_ns() - t0);
		if (rc)
			kvs_log_error(&s->log, "store: copy engine sync: %s", kvs_strerror(rc));
	}
	/* n read once: the last put may free the task */
	for (uint32_t i = 0, n = t->n; i < n; i++) {
		kvs_store_sh_error(&t->sh[i], rc);
		kvs_store_sh_put(s, &t->sh[i]);
	}
}

static void load_copy(struct kvs_store *s, struct kvs_store_sh *sh)
{
	uint64_t t0;
	int rc;

	KVS_STORE_COUNT(s, shards_loaded, 1);
	if (!sh->nseg)
		return; /* prefetch: in the cache is all it needs */
	copy_delay(s);
	t0 = kvs_now_ns();
	rc = shard_copy(s, sh, true);
	copy_count(s, sh, t0);
	if (rc)
		kvs_store_sh_error(sh, rc);
	else
		sh->task->copied = true;
}

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

/* Is the slot of sh (a load) settled?  0: READY; < 0: the owner's error or the
 * task's timeout; 1: still filling. */
static int load_state(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	int st;

	if (sh->flags & KVS_SH_OWNED) {
		/* acquire: pairs with read_done's release */
		st = atomic_load_explicit(&sh->io_result, memory_order_acquire);
		if (st != KVS_SH_IO_PENDING)
			return st;
	} else {
		st = kvs_slot_state(s->cache, &sh->slot);
		if (st < 0)
			return st;
		if (st == KVS_SLOT_READY)
			return 0;
		if (st == KVS_SLOT_FAILED)
			return sh->slot.error;
		if (now >= sh->task->deadline_ns)
			return filler_timeout(s, sh, now);
		return 1;
	}
	return now >= sh->task->deadline_ns ? -ETIMEDOUT : 1;
}

static bool load_resolve(struct kvs_store *s, struct kvs_store_sh *sh, uint64_t now)
{
	int st = sh->err ? sh->err : load_state(s, sh, now);

	if (st == 1)
		return false;
	if (st)
		kvs_store_sh_error(sh, st);
	else
		load_copy(s, sh);
	if (--sh->task->copier_left == 0)
		load_end(s, sh->task);
	return true;
}

/* ---- dumps ---- */

static void dump_fail(struct kvs_store *s, struct kvs_store_sh *sh, int err)
{
	if (sh->flags & KVS_SH_OWNED)
		kvs_slot_publish_failed(s->cache, &sh->slot, err);
	kvs_store_sh_error(sh, err);
	kvs_store_sh_put(s, sh);
}

/* The shard is READY in the cache: write it (the block's writer) or be done. */
static void dump_cached(struct kvs_store *s, struct kvs_store_sh *sh)
{
	if (!(sh->flags & KVS_SH_WRITE)) {
		kvs_store_sh_put(s, sh);
		return;
	}
	if (s->cfg.dump_wait == KVS_DUMP_WAIT_CACHED)
		kvs_store_sh_done(s, sh);
	kvs_store_handoff(s, sh, KVS_SH_IO_WRITE); /* our reference goes with it */
}

static bool dump_resolve(struct copier *cp, struct kvs_store_sh *sh, uint64_t now)
{
	struct kvs_store *s = cp->s;
	struct kvs_store_task *t = sh->task;
	uint64_t t0;
	int rc;

	if (sh->err) {
		kvs_store_sh_error(sh, sh->err);
		kvs_store_sh_put(s, sh);
		return true;
	}
	if (sh->flags & KVS_SH_OWNED) {
		if (t->event && !t->event_waited) {
			rc = kvs_copy_wait_event(s->copy, t->event);
			if (rc) {
				dump_fail(s, sh, rc);
				return true;
			}
			t->event_waited = true;
		}
		copy_delay(s);
		t0 = kvs_now_ns();
		rc = shard_copy(s, sh, false);
		copy_count(s, sh, t0);
		if (rc)
			dump_fail(s, sh, rc);
		else
			cp->gathered[cp->ngathered++] = sh;
		return true;
	}
	if (!(sh->flags & KVS_SH_WRITE)) {
		kvs_store_sh_put(s, sh); /* deduplicated: a peer has it or is filling it */
		return true;
	}
	/* The block's writer, a peer gathering this shard: wait for READY. */
	rc = kvs_slot_state(s->cache, &sh->slot);
	if (rc == KVS_SLOT_LOADING && now < t->deadline_ns)
		return false;
	if (rc == KVS_SLOT_READY)
		dump_cached(s, sh);
	else if (rc == KVS_SLOT_FAILED)
		dump_fail(s, sh, sh->slot.error);
	else
		dump_fail(s, sh, rc < 0 ? rc : filler_timeout(s, sh, now));
	return true;
}

/* The gathers of this pass: one sync, then publish each. */
static void dump_publish(struct copier *cp)
{
	struct kvs_store *s = cp->s;
	uint64_t t0 = kvs_now_ns();
	int rc;

	if (!cp->ngathered)
		return;
	rc = kvs_copy_sync(s->copy, sync_deadline(cp->gathered[0]->task));
	KVS_STORE_COUNT(s, copy_ns, kvs_now_ns() - t0);
	for (uint32_t i = 0; i < cp->ngathered; i++) {
		struct kvs_store_sh *sh = cp->gathered[i];

		if (rc) {
			dump_fail(s, sh, rc);
			continue;
		}
		rc = kvs_slot_publish_ready(s->cache, &sh->slot);
		if (rc) {
			kvs_log_error(&s->log, "store: publishing dumped slot %u: %s", sh->slot.index,
				      kvs_strerror(rc));
			kvs_store_sh_error(sh, rc);
			kvs_store_sh_put(s, sh);
			rc = 0;
			continue;
		}
		KVS_STORE_COUNT(s, shards_dumped, 1);
		dump_cached(s, sh);
	}
	cp->ngathered = 0;
}

/* ---- waiting ---- */

/* Once per slice: take over (load) or fail (dump) the slots of dead fillers.
 * Fillers already seen alive in this pass are not asked again. */
static int recover_dead(void *arg)
{
	struct copier *cp = arg;
	struct kvs_store *s = cp->s;
	struct kvs_cache *c = s->cache;
	uint64_t alive[WORK_MAX];
	uint32_t nalive = 0;
	int woke = 0;

	for (uint32_t i = 0; i < cp->nwork; i++) {
		struct kvs_store_sh *sh = cp->work[i];
		bool dump = sh->task->op == KVS_STORE_OP_DUMP;
		uint64_t f;
		uint32_t k;
		int rc;

		if (sh->err || (sh->flags & KVS_SH_OWNED) || !(sh->flags & KVS_SH_GOT))
			continue;
		/* relaxed: a hint (kvs_core_slot_recover rechecks under the lock) */
		f = atomic_load_explicit(&c->slots[sh->slot.index].filler, memory_order_relaxed);
		for (k = 0; k < nalive && alive[k] != f; k++)
			;
		if (k < nalive)
			continue;
		rc = kvs_core_slot_recover(c, &sh->slot, dump ? KVS_SLOT_WAIT_NO_TAKEOVER : 0);
		if (rc == KVS_SLOT_WAIT_OWNER) {
			/* The dispatcher reads it for us now; our reference stays. */
			sh->flags |= KVS_SH_OWNED;
			atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
			kvs_store_handoff(s, sh, KVS_SH_IO_READ);
			woke = 1;
		} else if (rc == 0) {
			alive[nalive++] = f;
		}
	}
	return woke;
}

/* Sleep until a word we wait for changes, a shard arrives, a deadline passes or
 * a filler died.  bell: the ring bell's value read before the ring was looked at. */
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

		words[n] = &c->states[sh->slot.index];
		busy[n++] = KVS_SLOT_LOADING;
		if (sh->task->deadline_ns < deadline)
			deadline = sh->task->deadline_ns;
	}
	if (cp->nwork < WORK_MAX) {
		words[n] = &s->ring_bell;
		busy[n++] = bell;
	}
	memset(&o, 0, sizeof(o));
	o.deadline_ns = deadline;
	o.check = recover_dead;
	o.check_arg = cp;
	o.spin = &c->spin;
	o.mode = c->cfg.wait;
	kvs_wait_any(words, busy, n, &o);
}

/* Take shards from the ring into the working set; sleep on the condition
 * variable when there is nothing at all.  Returns false when the copier is to
 * exit. */
static bool copier_fill(struct copier *cp)
{
	struct kvs_store *s = cp->s;
	bool exit = false;

	pthread_mutex_lock(&s->mu);
	while (cp->nwork < WORK_MAX && s->ring_count) {
		cp->work[cp->nwork++] = s->ring[s->ring_head];
		s->ring_head = (s->ring_head + 1) % s->ring_cap;
		s->ring_count--;
		pthread_cond_signal(&s->disp_cv); /* room in the ring */
	}
	if (cp->nwork == 0) {
		if (s->stop && s->active == 0) {
			s->copier_done = true;
			pthread_cond_signal(&s->disp_cv);
			exit = true;
		} else {
			struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(COPIER_IDLE_NS));

			pthread_cond_timedwait(&s->copier_cv, &s->mu, &ts);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return !exit;
}

void *kvs_store_copier(void *arg)
{
	struct copier cp = { .s = arg };
	struct kvs_store *s = cp.s;

	for (;;) {
		/* acquire: pairs with ring_push's publish; read before the ring is looked
		 * at, so a push after our look changes the word we sleep on */
		uint32_t bell = atomic_load_explicit(&s->ring_bell, memory_order_acquire) &
				KVS_WAIT_VALUE_MASK;
		uint64_t now;
		uint32_t kept = 0;

		if (!copier_fill(&cp))
			break;
		if (cp.nwork == 0)
			continue;
		now = kvs_now_ns();
		for (uint32_t i = 0; i < cp.nwork; i++) {
			struct kvs_store_sh *sh = cp.work[i];
			bool done = sh->task->op == KVS_STORE_OP_DUMP ? dump_resolve(&cp, sh, now)
								     : load_resolve(s, sh, now);

			if (!done)
				cp.work[kept++] = sh;
		}
		dump_publish(&cp);
		if (kept == cp.nwork)
			copier_sleep(&cp, bell);
		cp.nwork = kept;
	}
	return NULL;
}
