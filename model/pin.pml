/*
 * model/pin.pml — a READY hit pinned without the bucket lock, for Spin.
 *
 * The protocol of core/pin.c ("Lock-free pins"): a pin and its release took
 * the slot's robust bucket mutex, about 40% of a READY hit's instructions
 * (docs/store.md, "What a hit costs").  Checked before any of it was written,
 * as the dump protocol was (model/dump.pml); tests/core_pin.c runs it in real
 * processes.
 *
 * The slot's shared words (core/layout.h):
 *   st        the state word;
 *   gen       bumped at every re-key;
 *   khi, klo  its key, written one half at a time (a key is 20 bytes: a reader
 *             may see half of an old key and half of a new one);
 *   readers   bit r: rank r holds lock-free pins of the slot (its own count of
 *             them is private); bit EV: an evictor owns the slot.  Set and
 *             cleared by fetch_or / fetch_and / CAS only, so the word
 *             serialises every pin against every eviction by itself.
 * Rank r's pin table (shared, written by r and its reaper): entry[r], the slot
 * marked as a lock-free pin, so a reaper knows which bits a dead rank may hold.
 *
 *   pin (rank r, key K):  s = st; g = gen; k = key          (lookup, no lock)
 *                         s not READY/DIRTY or k != K: the locked path
 *                         entry[r] = slot                   (before the bit)
 *                         old = fetch_or(readers, bit r)    (acq_rel)
 *                         old has EV: undo
 *                         s = st; g' = gen; k = key: not READY/DIRTY,
 *                           g' != g or k != K: undo
 *                         else pinned: the slot is not re-keyed until the bit
 *                           goes, so these reads were of one residency
 *                         (undo: fetch_and(~bit r); entry[r] = 0; locked path)
 *   release:              fetch_and(readers, ~bit r) (release: the copy's reads
 *                         happen before the next residency's writes); entry[r] = 0
 *   evict (bucket lock held, no locked pin, st READY or FAILED):
 *                         CAS(readers, 0, EV) (acquire) or leave the slot;
 *                         st = EMPTY; gen++; key = new (half by half);
 *                         st = LOADING; readers = 0 (release); fill; publish
 *                         READY or DIRTY
 *   drop, clean:          DIRTY -> FAILED or READY, no pin looked at: the
 *                         bytes stay (as today, under the bucket lock)
 *   reap (r dead):        entry[r]: fetch_and(readers, ~bit r); entry[r] = 0
 *   repair (an evictor died holding the bucket lock: EOWNERDEAD):
 *                         fetch_and(readers, ~EV), the slot left in whatever
 *                         state the evictor got it to (a pin rechecks it)
 *
 * Spin interleaves whole statements: sequentially consistent, which the single
 * word `readers` gives the C code by itself (its RMWs are totally ordered); the
 * other words need only the acquire/release named above.  Pinners and the
 * evictor may be killed between any two steps (KILLS at most).  Properties:
 *
 *   P1  while a rank holds a pin it validated, the slot keeps the key and the
 *       generation it validated, with its bytes (READY, DIRTY, or FAILED by a
 *       drop): checked at the end of every step (STEP);
 *   P2  at the end, every rank done or killed and reaped, no bit and no entry
 *       is left: a pin never leaks, so the slot stays evictable;
 *   and Spin's own: no invalid end state.
 *
 * model/check.sh runs the configuration below, then each mutant (one step of
 * the protocol changed), each of which Spin must refute:
 *   MUTANT_BIT_FIRST      the bit set before the pin-table entry (a kill
 *                         between leaks the bit: P2);
 *   MUTANT_ENTRY_CLEARED_FIRST  release clears the entry before the bit (P2);
 *   MUTANT_NO_RECHECK     the pin trusts its lookup once the bit is set and no
 *                         EV is seen (a whole re-key between them: P1);
 *   MUTANT_IGNORE_EV      the pin ignores EV in the word it got back (an
 *                         evictor past its CAS: P1);
 *   MUTANT_EVICT_BLIND    the evictor takes the slot without the CAS (P1).
 */

/* Two runs cover it (model/check.sh), each exhaustively:
 *   -DKILLS=1            one pinner, two pins, the evictor twice (a key and
 *                        back: the ABA of a stale lookup), any one process
 *                        killed at any step;
 *   -DNPIN=2 -DKILLS=0   two pinners, one pin each, against one eviction: the
 *                        bits of one word set and cleared side by side (6e6
 *                        states; two evictions make 3e7, a kill as well 6e7:
 *                        beyond a CI run). */
#ifndef KILLS
#define KILLS 1
#endif
#ifndef NPIN
#define NPIN 1         /* ranks pinning lock-free: 1 or 2 */
#endif
#if NPIN == 2
#define ROUNDS 1       /* pins each */
#define EVICTIONS 1    /* attempts of the evictor */
#else
#define ROUNDS 2
#define EVICTIONS 2
#endif

#define EV 128         /* the evictor's bit of readers */
#define BIT(r) (1 << (r))

mtype = { EMPTY, LOADING, READY, DIRTY, FAILED };

/* ---- the slot (core/layout.h) and the pin tables ---- */
mtype st = READY;
byte gen = 0;
byte khi = 1, klo = 1;    /* key 1 resident */
byte readers = 0;
bool entry[NPIN];
bool lock;                /* the bucket lock (robust: released by a kill) */
bool lock_dead;           /* ... by an evictor killed holding it (EOWNERDEAD next) */

/* ---- what the properties speak of ---- */
bool held[NPIN];          /* a validated pin, its copy under way */
byte hkey[NPIN], hgen[NPIN];
bool alive[NPIN + 1];     /* pinners 0..NPIN-1, the evictor NPIN */
byte kills;
byte done;

#define READABLE(s) ((s) == READY || (s) == DIRTY)
#define KEPT(s) ((s) == READY || (s) == DIRTY || (s) == FAILED)
/* P1, for rank r. */
#define HOLD_OK(r) (!held[r] || (khi == hkey[r] && klo == hkey[r] && gen == hgen[r] && KEPT(st)))
/* The end of a step: P1 checked (every write to the slot is followed by one,
 * so a write that breaks it is caught at once), then a kill -9 may come. */
#if NPIN == 2
#define ALL_HOLD_OK (HOLD_OK(0) && HOLD_OK(1))
#define NO_ENTRY (!entry[0] && !entry[1])
#else
#define ALL_HOLD_OK HOLD_OK(0)
#define NO_ENTRY (!entry[0])
#endif
#define STEP(me) \
	assert(ALL_HOLD_OK); \
	if :: kills < KILLS -> kills++; alive[me] = false; goto dead :: true -> skip fi

proctype pinner(byte me)
{
	byte round = 0, want, s, g, kh, kl, old;

	do
	:: round < ROUNDS ->
		round++;
		if :: want = 1 :: want = 2 fi;
		/* lookup, no lock: the state, the generation, the key half by half */
		s = st; STEP(me);
		g = gen; STEP(me);
		kh = khi; STEP(me);
		kl = klo; STEP(me);
		if
		:: !READABLE(s) || kh != want || kl != want -> skip /* the locked path */
		:: else ->
#ifndef MUTANT_BIT_FIRST
			entry[me] = true; STEP(me);
			atomic { old = readers; readers = readers | BIT(me) };
#else
			atomic { old = readers; readers = readers | BIT(me) };
			STEP(me);
			entry[me] = true;
#endif
			STEP(me);
#ifdef MUTANT_IGNORE_EV
			old = old & ~EV;
#endif
			if
			:: old & EV -> goto undo
			:: else -> skip
			fi;
#ifndef MUTANT_NO_RECHECK
			s = st; STEP(me);
			if :: !READABLE(s) -> goto undo :: else -> skip fi;
			kh = khi; STEP(me);
			kl = klo; STEP(me);
			if :: gen != g || kh != want || kl != want -> goto undo :: else -> skip fi;
#endif
			/* pinned: copy the bytes (one or more steps), then release */
			atomic { held[me] = true; hkey[me] = want; hgen[me] = g };
			STEP(me);
			held[me] = false;
#ifndef MUTANT_ENTRY_CLEARED_FIRST
			readers = readers & ~BIT(me); STEP(me);
			entry[me] = false; STEP(me);
#else
			entry[me] = false; STEP(me);
			readers = readers & ~BIT(me); STEP(me);
#endif
			goto next;
undo:
			readers = readers & ~BIT(me); STEP(me);
			entry[me] = false; STEP(me);
next:
			skip
		fi;
		s = 0; g = 0; kh = 0; kl = 0; old = 0; want = 0 /* dead values: fewer states */
	:: else -> break
	od;
	atomic { done++; goto out };
dead:
	/* killed: the kernel ends the process; held pins end with it */
	held[me] = false;
	/* the reaper, some time later (a peer's next attach or sweep, under the
	 * lifecycle lock) */
	atomic {
		if
		:: entry[me] -> readers = readers & ~BIT(me); entry[me] = false
		:: else -> skip
		fi;
		done++
	};
out:
	skip
}

proctype evictor(byte me)
{
	byte n = 0, next, got;

	do
	:: n < EVICTIONS ->
		n++;
		/* the bucket lock; a dead holder's left it EOWNERDEAD: repair */
		atomic {
			!lock ->
			lock = true;
			if
			:: lock_dead -> lock_dead = false
			:: else -> skip
			fi
		};
		STEP(me);
		if
		:: st == READY || st == FAILED ->
			/* no locked pin (ref == 0, not modelled): take the slot from
			 * the lock-free pins */
#ifndef MUTANT_EVICT_BLIND
			atomic { if :: readers == 0 -> readers = EV; got = 1 :: else -> got = 0 fi };
#else
			atomic { readers = readers | EV; got = 1 };
#endif
			STEP(me);
			if
			:: got ->
				st = EMPTY; STEP(me);
				gen++; STEP(me);
				next = 3 - khi;     /* the other key (or back, next time) */
				khi = next; STEP(me);
				klo = next; STEP(me);
				st = LOADING; STEP(me);
				readers = readers & ~EV; STEP(me);
				/* the fill, then the owner's publish */
				if :: st = READY :: st = DIRTY fi;
				next = 0
			:: else -> skip /* pinned: CLOCK moves on */
			fi
		:: st == DIRTY ->
			/* never evicted; its writer or dropper takes it on */
			if :: st = READY :: st = FAILED fi
		:: else -> skip
		fi;
		got = 0;
		lock = false;
		STEP(me)
	:: else -> break
	od;
	atomic { done++; goto out };
dead:
	/* killed: a held bucket lock is left EOWNERDEAD; the next holder repairs
	 * (core/index.c), clearing EV and leaving the state as it is */
	atomic {
		done++;
		if
		:: lock ->
			lock_dead = true;
			readers = readers & ~EV;
			lock = false
		:: else -> skip
		fi
	};
out:
	skip
}

/* P2, once everyone is done (or dead and reaped). */
active proctype end_check()
{
	(done == NPIN + 1);
	assert(readers == 0 && NO_ENTRY)
}

init {
	atomic {
		byte r = 0;
		do
		:: r <= NPIN -> alive[r] = true; r++
		:: else -> break
		od;
		run pinner(0);
#if NPIN == 2
		run pinner(1);
#endif
		run evictor(NPIN)
	}
}
