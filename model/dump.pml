/*
 * model/dump.pml — the dump protocol of docs/store.md ("Dumps"), for Spin.
 *
 * One block of two shards.  Ranks 0 and 1 open the cache and each dumps one
 * shard of it (dump_wait cached or durable: Spin picks), sweeps, and closes;
 * rank 2 opens once they are gone (adopting the cache if it is stale), may dump
 * either shard again (a later engine completing a partial block, or one
 * dumping a shard found DIRTY), sweeps and closes;
 * a watcher attaches (adopting a stale cache too) and closes, which is also
 * what `kvshare clean` does.  Any rank may be killed -9 between two steps (KILLS
 * at most, in all: -DKILLS=n); the expirer ends the protection of a shard once
 * every dump of it has returned (their deadlines passed); a block write may fail
 * (FAILS at most), be retried, or be given up.
 *
 * Each atomic step stands for one critical section (a bucket lock, the claim
 * table's lock, the lifecycle lock) or atomic operation of the C code, named in
 * its comment; a scan that only reads is one step where reading shard by shard
 * changes nothing (said where it is).  Between two steps anything may happen,
 * a kill included.  Properties:
 *
 *   P1  a durable dump returns 0 only once its block is in the backend;
 *   P2  no block reaches the backend with a shard missing: a write copies DIRTY
 *       slots only, the rename needs every shard of the attempt;
 *   P3  (by construction) a drop takes only a block a scan under its claim
 *       found incomplete, and of it only the shards whose protection is over;
 *   P4  at the end, a block whose every shard was DIRTY, acknowledged and still
 *       protected at one instant is in the backend, or in a cache that still
 *       exists with both shards DIRTY (for adoption), or its write was given up
 *       (an ERROR line): such a block is never dropped;
 *   and Spin's own: no deadlock, no invalid end state.
 *
 * make model-check (model/check.sh) runs both configurations below, then each
 * mutant (-DMUTANT_...: one step of the protocol taken out), each of which Spin
 * must refute in the configuration that can (a drop that ignores protection,
 * -DMUTANT_DROP_PROTECTED, is no mutant here: the two checks before it already
 * keep every acknowledged shard, and it stays in the C code as a third):
 *   MUTANT_ACK_IN_DROP     a dump acknowledged while a drop of its block is in
 *                          progress (store/dump.c settle);
 *   MUTANT_DROP_UNCHECKED  a drop that does not scan the block again once it
 *                          holds the claim (store/dump.c drop_block);
 *   MUTANT_NO_VERIFY       a write that does not check every shard is DIRTY
 *                          (store/dump.c write_block);
 *   MUTANT_REMOVE_DIRTY    a close or clean that removes a cache holding DIRTY
 *                          shards (core/segment.c, the removal guard).
 */

#ifndef KILLS
#define KILLS 2
#endif
/* Two runs cover the protocol (make model-check), each exhaustively:
 *   -DLATE -DWATCHING -DKILLS=2   rank 2 opens once ranks 0 and 1 are gone
 *                                 (adoption), a watcher beside them all;
 *   -DKILLS=0                     rank 2 a peer of ranks 0 and 1 from the start
 *                                 (three engines on one block at once: the drops
 *                                 against the dumps); with kills too, its state
 *                                 space (1.2e8 states at KILLS=1) is beyond CI. */
#define FAILS 1
#define NRANK 3    /* ranks 0 and 1 from the start, 2 later */
#define WATCHER 3  /* the watcher's index in alive[] and attached[] */

mtype = { EMPTY, LOADING, DIRTY, READY, FAILED };

/* ---- shared memory (core/layout.h) ---- */
mtype st[2];              /* the shards' slot state words */
byte filler[2];           /* LOADING: rank + 1 of the filler */
bool fresh[2];            /* DIRTY, its dirty_until_ns not passed */
byte busy[2];             /* dumps of the shard not returned yet (the expirer waits) */

#define CL_FREE 0
#define CL_WRITING 1
#define CL_DROPPING 2
byte cl;                  /* the block's claim (kvs_shm_claim.state) */
byte holder;              /* its holder: rank + 1 */

bool alive[4];            /* the OFD liveness lock held */
bool attached[4];
bool cache = true;        /* the cache's files exist */

/* ---- the backend ---- */
bool stored;              /* the block renamed in, whole */

/* ---- what the contract speaks of ---- */
bool acked[2];            /* a dump of the shard's present residency returned 0 */
bool complete_acked;      /* both shards DIRTY, acknowledged and protected at one instant */
bool gave_up;             /* a block write given up: logged at ERROR */
byte kills;
byte fails;
byte ranks_done;
byte done;

#define ALL_DIRTY (st[0] == DIRTY && st[1] == DIRTY)
/* complete, every shard acknowledged and still protected */
#define COMPLETE_ACKED (ALL_DIRTY && acked[0] && acked[1] && fresh[0] && fresh[1])
#define NOTE_COMPLETE if :: COMPLETE_ACKED -> complete_acked = true :: else -> skip fi
/* a claim counts while its holder lives (kvs_core_rank_alive) */
#define HELD (cl != CL_FREE && alive[holder - 1])
#define NOBODY (!attached[0] && !attached[1] && !attached[2] && !attached[WATCHER])
/* another rank attached and alive: a complete block's designated writer may be it */
#define PEER(me) ((me != 0 && attached[0] && alive[0]) || (me != 1 && attached[1] && alive[1]) || \
		  (me != 2 && attached[2] && alive[2]))
/* The removal guard: a cache holding a DIRTY shard is never removed. */
#ifndef MUTANT_REMOVE_DIRTY
#define NO_DIRTY (st[0] != DIRTY && st[1] != DIRTY)
#else
#define NO_DIRTY true
#endif

/* A kill -9 here: the kernel drops the process's OFD locks; a robust mutex it
 * held is released (every step is whole). */
#define STEP if :: kills < KILLS -> kills++; goto dead :: true -> skip fi

/* kvs_cache_open: create, attach, or adopt a stale cache (claims re-made, a
 * dead filler's LOADING slot reset, DIRTY and READY slots kept). */
inline open_cache(me)
{
	atomic {
		if
		:: !cache ->
			cache = true; st[0] = EMPTY; st[1] = EMPTY; fresh[0] = false; fresh[1] = false;
			cl = CL_FREE; holder = 0
		:: cache && NOBODY ->
			cl = CL_FREE; holder = 0;
			if :: st[0] == LOADING -> st[0] = EMPTY :: else -> skip fi;
			if :: st[1] == LOADING -> st[1] = EMPTY :: else -> skip fi
		:: else -> skip
		fi;
		attached[me] = true; alive[me] = true
	}
}

/* kvs_cache_close (the lifecycle lock): the last one out removes the cache,
 * unless it holds a DIRTY shard (kept for adoption, logged). */
inline close_cache(me)
{
	atomic {
		attached[me] = false;
		if :: NOBODY && NO_DIRTY -> cache = false :: else -> skip fi
	}
}

/* store/dump.c write_block: claim, verify, write, rename, clean, end. */
inline write_block(me)
{
	/* kvs_core_claim_take(WRITING): free, or its holder dead */
	atomic { if :: !HELD -> cl = CL_WRITING; holder = me + 1; got = true :: else -> got = false fi };
	if
	:: got ->
		STEP;
		/* kvs_core_dirty_scan under the claim: both DIRTY, or one READY (the
		 * backend has the block).  Read-only and nothing leaves DIRTY while
		 * the claim is held: one step. */
#ifndef MUTANT_NO_VERIFY
		atomic { ready = (st[0] == READY || st[1] == READY); ok = ALL_DIRTY || ready };
#else
		atomic { ready = (st[0] == READY || st[1] == READY); ok = true };
#endif
		do
		:: ok && !ready ->
			/* an attempt: every shard written from its slot (a DIRTY slot is
			 * never evicted or dropped while the claim is held: no pin), then
			 * the rename, whole (P2).  A kill part way leaves a temp file. */
			if
			:: fails < FAILS -> fails++; STEP; if :: skip :: gu = true; break fi /* retry, or give up */
			:: atomic { assert(ALL_DIRTY); stored = true }; STEP; break
			fi
		:: else -> break
		od;
		/* kvs_core_slot_clean (DIRTY -> READY), or on a give-up kvs_core_slot_drop
		 * (FAILED, the error; logged at ERROR), shard by shard */
		i = 0;
		do
		:: ok && i < 2 ->
			atomic {
				if
				:: st[i] == DIRTY && gu -> st[i] = FAILED; fresh[i] = false; acked[i] = false; gave_up = true
				:: st[i] == DIRTY && !gu -> assert(stored); st[i] = READY; fresh[i] = false
				:: else -> skip
				fi;
				i++
			};
			STEP
		:: else -> break
		od;
		/* kvs_core_claim_end */
		atomic { if :: holder == me + 1 -> cl = CL_FREE; holder = 0 :: else -> skip fi }
	:: else -> skip /* a live rank writes or drops it */
	fi
}

/* store/dump.c drop_block: an incomplete block whose DIRTY shards' protection
 * is over; the claim first, then the block scanned again (P3). */
inline drop_block(me)
{
	atomic { if :: !HELD -> cl = CL_DROPPING; holder = me + 1; got = true :: else -> got = false fi };
	if
	:: got ->
		STEP;
#ifndef MUTANT_DROP_UNCHECKED
		/* kvs_core_dirty_scan under the claim: a block complete now is
		 * written, not dropped; a shard a dump protects again is kept */
		atomic { ok = !ALL_DIRTY && !(st[0] == DIRTY && fresh[0]) && !(st[1] == DIRTY && fresh[1]) };
#else
		ok = true;
#endif
		i = 0;
		do
		:: ok && i < 2 ->
			/* kvs_core_dirty_drop: a DIRTY slot whose protection is over
			 * (checked under its bucket lock, where dumps extend it); FAILED
			 * with -KVS_EINCOMPLETE, logged */
			atomic {
				if
#ifndef MUTANT_DROP_PROTECTED
				:: st[i] == DIRTY && !fresh[i] -> st[i] = FAILED; acked[i] = false
#else
				:: st[i] == DIRTY -> st[i] = FAILED; acked[i] = false
#endif
				:: else -> skip
				fi;
				i++
			};
			STEP
		:: else -> break
		od;
		atomic { if :: holder == me + 1 -> cl = CL_FREE; holder = 0 :: else -> skip fi }
	:: else -> skip
	fi
}

/* store/dump.c sweep: a look at the block from its slots (a rank's check after
 * a dump, its periodic sweep, its close, an adopter's open). */
inline sweep(me)
{
	/* a snapshot of the state words (read-only: any later change is looked at
	 * again under the claim) */
	atomic {
		n = (st[0] == DIRTY) + (st[1] == DIRTY);
		any = (st[0] == DIRTY && fresh[0]) || (st[1] == DIRTY && fresh[1]);
		ready = (st[0] == READY || st[1] == READY)
	};
	if
	:: n == 2 || (n > 0 && ready) -> write_block(me)
	:: n == 2 && PEER(me) -> skip /* left to a live designated writer, rung (look_at) */
	:: n == 1 && !any && !ready -> drop_block(me)
	:: else -> skip
	fi;
	d_step { n = 0; any = false; ready = false; got = false; ok = false; gu = false; i = 0 }
}

/* One dump of shard k: the dispatcher's visit, the copier's gather and settle. */
inline dump(me, k, durable)
{
	atomic { busy[k]++ };
again:
	/* kvs_core_get(REFILL | DUMP), under the bucket lock */
	atomic {
		if
		:: st[k] == EMPTY || st[k] == FAILED -> st[k] = LOADING; filler[k] = me + 1; owned = true
		:: st[k] == LOADING && !alive[filler[k] - 1] -> filler[k] = me + 1; owned = true /* its pin reaped */
		:: else -> owned = false
		fi
	};
	STEP;
	if
	:: owned ->
		/* the gather (kvs_copy_d2hv, synced), then kvs_core_slot_publish_dirty:
		 * DIRTY, protected until the task's deadline + grace */
		atomic { st[k] = DIRTY; fresh[k] = true; filler[k] = 0 }
	:: !owned && st[k] == LOADING ->
		/* a peer fills it: wait (kvs_wait_any); kvs_core_slot_recover takes a
		 * dead filler's over; or the deadline */
		if
		:: (st[k] != LOADING) -> goto again
		:: atomic { st[k] == LOADING && !alive[filler[k] - 1] -> filler[k] = me + 1 }; goto again
		:: goto failed /* the task's deadline */
		fi
	:: !owned && st[k] == READY -> goto dedup
	:: !owned && st[k] == DIRTY ->
		/* kvs_core_dirty_hold: its protection extended to this dump's deadline */
		atomic { if :: st[k] == DIRTY -> fresh[k] = true :: else -> skip fi }
	:: !owned && (st[k] == EMPTY || st[k] == FAILED) -> goto again
	fi;
	if :: st[k] != DIRTY -> goto again :: else -> skip fi;
	STEP;
#ifndef MUTANT_ACK_IN_DROP
	/* settle: a drop of the block in progress (kvs_core_claim_peek, then
	 * _look)?  Not acknowledged now: once the drop is over the shard is dumped
	 * again (the caller's bytes are still there), so that no shard is
	 * acknowledged while its block's other shards may still be dropped */
	if
	:: atomic { cl == CL_DROPPING && HELD } -> (!(cl == CL_DROPPING && HELD)); goto again
	:: else -> skip
	fi;
#endif
	if
	:: !durable -> atomic { acked[k] = true; NOTE_COMPLETE } /* dump_wait=cached: 0 */
	:: else -> skip
	fi;
	sweep(me); /* is the block complete now? */
	if
	:: durable ->
		/* the wait: its slot leaves DIRTY (cleaned: 0; dropped: the error), or
		 * the deadline */
		if
		:: atomic { st[k] == READY -> assert(stored); acked[k] = true; NOTE_COMPLETE } /* P1 */
		:: st[k] == FAILED -> skip
		:: skip /* the deadline */
		fi
	:: else -> skip
	fi;
	goto returned;
dedup:
	/* READY: in the backend already */
	atomic { assert(stored); acked[k] = true; NOTE_COMPLETE };
	goto returned;
failed:
	skip;
returned:
	atomic { busy[k]--; owned = false }
}

proctype rank(byte me; byte k; bool late)
{
	byte i, n;
	bool owned, got, ready, any, ok, gu, durable, dumps;

#ifdef LATE
	if
	:: late -> (ranks_done == 2) /* a later engine: it adopts a stale cache */
	:: else -> skip
	fi;
#endif
	open_cache(me);
	STEP;
	if :: durable = true :: durable = false fi;
	if
	:: late -> if :: dumps = false :: dumps = true; k = 0 :: dumps = true; k = 1 fi
	:: else -> dumps = true
	fi;
	if
	:: dumps -> dump(me, k, durable) /* with its look at the block after the settle */
	:: else -> skip
	fi;
	STEP;
	sweep(me); /* the copier's sweep (an adopter's at open, a closer's at close) */
	close_cache(me);
	goto finish;
dead:
	atomic { alive[me] = false; attached[me] = false };
finish:
	atomic { ranks_done++; done++ }
}

/* A watcher (kvshare stat, the exporter) or kvshare clean: attaches (adopting a
 * stale cache), writes nothing, detaches. */
proctype watcher()
{
	open_cache(WATCHER);
	close_cache(WATCHER);
	atomic { alive[WATCHER] = false; done++ }
}

/* A shard's protection ends once every dump of it has returned. */
proctype expirer()
{
	do
	:: done == 4 -> break
	:: atomic { busy[0] == 0 && st[0] == DIRTY && fresh[0] -> fresh[0] = false }
	:: atomic { busy[1] == 0 && st[1] == DIRTY && fresh[1] -> fresh[1] = false }
	od
}

init {
	atomic {
		st[0] = EMPTY; st[1] = EMPTY;
		run rank(0, 0, false);
		run rank(1, 1, false);
		run rank(2, 0, true);
#ifdef WATCHING
		run watcher();
#else
		done++;
#endif
		run expirer()
	}
}

/* P4, once everything is over. */
active proctype judge()
{
	(done == 4) ->
	assert(!complete_acked || stored || gave_up || (cache && ALL_DIRTY))
}
