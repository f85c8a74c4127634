/*
 * store/dump.h — what the two halves of the dump protocol share (docs/store.md,
 * "Dumps"): store/dump.c (settling dumped shards, looking at their blocks,
 * durable waits, the node's sweep, the flush's bookkeeping) and store/write.c
 * (a block's write or drop under its claim).  The copier's dump state; nothing
 * here is shared memory.
 */
#ifndef KVS_STORE_DUMP_H
#define KVS_STORE_DUMP_H

#include "store/store.h"

/* How many blocks found stored a rank remembers, and for how long: a dump of a
 * block's other shards a moment later (the next layer's task, whose slot was
 * evicted meanwhile) is stored by that finding, not by shards that may be gone
 * by then; past the claims' grace it proves nothing (the copy may be gone). */
#define FOUND_RECENT 64u
#define FOUND_FOR_NS KVS_CLAIM_GRACE_NS

/* A list of blocks, each with a time (when it is due). */
struct blocks {
	struct kvs_block_id *v;
	uint64_t *at;
	uint32_t n, cap;
};

/* A block this rank acknowledged a cached dump of, not known stored yet
 * (kvs_store_flush): one of its shards' DIRTY slot. */
struct acked {
	struct kvs_block_id block;
	uint32_t shard;
	struct kvs_dirty_shard slot;
};

/* The copier's dump state (store/dump.c says what each part is for). */
struct kvs_store_dumps {
	struct kvs_store_sh *waiting;  /* durable waits, by sh->next (no pin) */
	struct kvs_store_sh *dropwait; /* met a drop of their block: dumped again after it */
	struct kvs_store_sh *locked;   /* shards (pinned) to settle once a lock is had */
	struct kvs_store_job *ending;  /* block writes whose claim is still to end (or its
					  slots to clean) */
	struct blocks look;            /* blocks to look at now */
	struct blocks grace;           /* complete, ringing their designated writer: ours at at */
	struct blocks mine;            /* we gathered their designated shard: looked at when our
					  bell rings, until at (their protection) */
	struct blocks room;            /* their claim met a full table: again at the claims bell */
	struct acked *acked;           /* flush: cached dumps' blocks not known stored, oldest
					  first from acked_head, one entry a block */
	uint32_t acked_head, nacked, acap;
	uint32_t *aset;                /* which blocks acked[] holds: an open-addressing set
					  of entry index + 1 (0: empty), remade whenever
					  entries go or move */
	uint32_t aset_mask;            /* its size - 1 (a power of two > 2 * nacked) */
	uint64_t flush_gen;            /* the last kvs_store_flush call looked at */
	uint32_t jobs;                 /* our block writes not finished */
	struct kvs_dirty_shard *scan;  /* a block's slots (shards per block entries) */
	/* The sweep in progress: the next state word, and the blocks it found. */
	bool sweeping;
	uint32_t sweep_next;
	struct blocks swept;
	bool closing;                  /* the store closes: swept at once, no new grace */
	bool close_swept;              /* closing: the node swept once since */
	bool urgent;                   /* a flush waits: no graces */
	uint64_t lock_retry_ns;        /* when what waits for a lock tries again (0: nothing) */
	struct kvs_store_backoff lock_backoff;
	uint32_t rank_bell;            /* our rank's bell before the last look */
	uint32_t claims_bell;          /* the claims bell before the last look at room/dropwait */
	uint64_t next_ns;              /* the earliest time something is due */
	struct found {
		struct kvs_block_id block;
		uint64_t at_ns;        /* 0: unused */
	} found[FOUND_RECENT];
	uint32_t found_next;
	/* Block writes retried, given up, and blocks dropped: a backend down fails
	 * every write, a dead engine leaves many partial blocks. */
	struct kvs_log_limit retry_log, given_up_log, dropped_log;
};

/* Add block to l, due at at (a block already among the last few: the earlier
 * time kept).  false: no memory (the sweep finds the block later). */
bool kvs_store_blocks_add(struct blocks *l, const struct kvs_block_id *block, uint64_t at);
/* A lock was not had within this thread's short wait (a peer holds it: busy,
 * or stopped inside): what waits for it tries again after the backoff. */
void kvs_store_dumps_lock_busy(struct kvs_store_dumps *d, uint64_t now);

/* ---- store/write.c ---- */
/* Write block, if nobody does: take its claim and write what the cache holds
 * of it (stored already: its DIRTY copies cleaned). */
void kvs_store_block_write(struct kvs_store *s, struct kvs_store_dumps *d,
			   const struct kvs_block_id *block);
/* Block looked incomplete, every DIRTY shard past its protection: drop them,
 * under its claim (DROPPING), after scanning it again there (complete by then:
 * written instead). */
void kvs_store_block_drop(struct kvs_store *s, struct kvs_store_dumps *d,
			  const struct kvs_block_id *block);
/* Clean (or, given up, drop) job's slots from job->cleaned on and end its
 * claim; a bucket or the table's lock not had: kept on d->ending, again from
 * kvs_store_dumps_poll after the backoff. */
void kvs_store_job_settle(struct kvs_store *s, struct kvs_store_dumps *d, struct kvs_store_job *job);

#endif
