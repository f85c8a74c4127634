/*
 * store/dispatch.h — the dispatcher thread's state, shared by its two files:
 * dispatch.c (visits, the thread's loop and its sleep) and issue.c (the
 * backend's read and write queues, submits, reaping).  Only the dispatcher
 * thread touches a struct disp.
 */
#ifndef KVS_STORE_DISPATCH_H
#define KVS_STORE_DISPATCH_H

#include "store/store.h"

struct disp {
	struct kvs_store *s;
	int epfd;
	bool backend_fd;                 /* the backend's wait descriptor is in epfd */
	struct kvs_store_task *vis_head, *vis_tail; /* tasks with shards to visit */
	/* Sequenced tasks (kvs_store_load_tensors): one at a time in the visiting
	 * list (seq_active), the others waiting their turn here, FIFO. */
	struct kvs_store_task *seq_active, *seq_head, *seq_tail;
	struct kvs_store_sh *revisits;   /* shards to visit again (store/dump.c) */
	/* Load and prefetch misses met while reads waited for backend room: not
	 * owned, no pin; visited again (FIFO) once the read queue is empty. */
	struct kvs_store_sh *def_head, *def_tail;
	uint64_t def_next_ns;            /* the earliest deadline among them (or later) */
	struct kvs_block_id def_hinted;  /* the block of the last deferred miss, hinted to the
					    backend (kvs_backend_hint_read) */
	struct kvs_store_xfer *rq_head, *rq_tail; /* reads waiting for the backend */
	struct kvs_store_job *wq_head, *wq_tail;  /* block writes with shards to submit */
	struct kvs_store_job *retries;   /* block writes waiting out a retry's backoff */
	uint32_t reads_inflight, writes_inflight, write_cap;
	uint32_t read_cap;               /* reads in flight at most (KVS_STORE_OWNED_READS_MAX) */
	uint32_t jobs;                   /* block writes not finished */
	bool blocked;                    /* visits wait for pins or ring room */
	/* The visits of this pass, handed to the copier together (flush_visits):
	 * the shards for the ring, the room left for more (ring places and pins,
	 * taken under mu once per batch), the pins and load hits counted since. */
	struct kvs_store_sh **out;       /* s->visits */
	uint32_t nout, room, pinned, hits;
	bool copier_due;                 /* completions published: wake the copier */
	/* prealloc */
	bool prealloc_due;
	struct kvs_block_id prealloc_block;
	uint32_t prealloc_shard;
	struct kvs_block_id recent_block[KVS_STORE_PREALLOC_RECENT];
	uint32_t recent_shard[KVS_STORE_PREALLOC_RECENT];
	uint32_t recent_next;
	struct kvs_log_limit write_log;  /* backend write errors (a backend down: every write) */
	/* a failing backend poll */
	int poll_err;
	uint64_t poll_retry_ns;
	struct kvs_store_backoff poll_backoff;
};

/* Append an owned read to the read queue (submitted by kvs_store_submit_reads). */
void kvs_store_rq_push(struct disp *d, struct kvs_store_xfer *xf);
/* Append a block write's attempt to the write queue. */
void kvs_store_wq_push(struct disp *d, struct kvs_store_job *job);
/* Hand queued reads (within read_cap) and writes (within write_cap, block by
 * block) to the backend; a refused one ends as its completion would.  Whether
 * anything was taken. */
bool kvs_store_submit_reads(struct disp *d);
bool kvs_store_submit_writes(struct disp *d);
/* Reap what has completed, never waiting, or with timeout_ns > 0 sleeping in
 * the backend's poll up to that long for the first completion (a backend with
 * no wait descriptor).  A failing poll is logged once per run of failures and
 * retried with a doubling backoff.  Whether anything completed. */
bool kvs_store_reap(struct disp *d, uint64_t timeout_ns);

#endif
