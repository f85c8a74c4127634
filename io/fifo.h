/*
 * io/fifo.h — due-ordered completion queue of the synthetic backends (fifo.c).
 */
#ifndef KVS_IO_FIFO_H
#define KVS_IO_FIFO_H

#include <stdint.h>

#include "kvshare.h"

struct kvs_io_fifo_entry {
	uint64_t due_ns;   /* CLOCK_MONOTONIC time it may be reaped */
	uint64_t token;
	int64_t result;
	/* latency reads: what to fill when it completes */
	void *buf;
	struct kvs_block_id block;
	uint32_t shard;
	uint64_t offset;
	uint64_t len;
};

struct kvs_io_fifo {
	struct kvs_io_fifo_entry *v;
	uint32_t cap;
	uint32_t head;
	uint32_t count;
};

/* Append (growing the ring); 0 or -ENOMEM. */
int kvs_io_fifo_push(struct kvs_io_fifo *q, const struct kvs_io_fifo_entry *e);
/* The oldest entry, or NULL. */
const struct kvs_io_fifo_entry *kvs_io_fifo_head(const struct kvs_io_fifo *q);
/* The oldest entry's due time, or 0 when the queue is empty (a wait
 * descriptor's timer: kvs_io_timer_arm). */
uint64_t kvs_io_fifo_due(const struct kvs_io_fifo *q);
/* Drop the oldest entry (the queue must not be empty). */
void kvs_io_fifo_pop(struct kvs_io_fifo *q);
void kvs_io_fifo_fini(struct kvs_io_fifo *q);

/*
 * A queue whose entries are due when pushed (none; latency at latency 0) is
 * waited for with an eventfd readable exactly while the queue holds entries,
 * not a timer: arming a timerfd for a time already past costs a timer
 * interrupt each time (about 2.6 us a call in a VM, against 0.2 for an
 * eventfd's write; docs/store.md, "What a hit costs").  *efd is -1 until the
 * descriptor is asked for (ready_fd); push and drained are then no system call
 * at all.
 */
/* kvs_io_fifo_push, signalling *efd when the queue was empty. */
int kvs_io_fifo_push_ready(struct kvs_io_fifo *q, const struct kvs_io_fifo_entry *e, int efd);
/* After pops: *efd unreadable again if the queue is now empty. */
void kvs_io_fifo_ready_drained(const struct kvs_io_fifo *q, int efd);
/* The descriptor (made at the first call, readable at once if entries wait),
 * or -errno. */
int kvs_io_fifo_ready_fd(const struct kvs_io_fifo *q, int *efd);

#endif
