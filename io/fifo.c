/*
 * io/fifo.c — the completion queue of the synthetic backends (none, latency,
 * fault): a growable ring of pending completions ordered by due time.
 *
 * Every entry of one queue gets its due time as "now + a fixed delay" when it is
 * pushed, so arrival order is due order and a FIFO is the sorted queue: poll
 * pops from the head while the head is due, and sleeps until the head's due
 * time (or the caller's deadline) otherwise.  No thread per transfer; a wait
 * descriptor's timer, where one is asked for, is armed for the head's due time
 * -- or, where every entry is due at once, an eventfd is signalled while the
 * queue holds any (the _ready functions; fifo.h says why).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/fifo.h"
#include "io/internal.h"

int kvs_io_fifo_push(struct kvs_io_fifo *q, const struct kvs_io_fifo_entry *e)
{
	if (q->count == q->cap) {
		uint32_t cap = q->cap ? 2 * q->cap : 64;
		struct kvs_io_fifo_entry *v = malloc(cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		for (uint32_t i = 0; i < q->count; i++)
			v[i] = q->v[(q->head + i) % q->cap];
		free(q->v);
		q->v = v;
		q->cap = cap;
		q->head = 0;
	}
	q->v[(q->head + q->count) % q->cap] = *e;
	q->count++;
	return 0;
}

const struct kvs_io_fifo_entry *kvs_io_fifo_head(const struct kvs_io_fifo *q)
{
	return q->count ? &q->v[q->head] : NULL;
}

uint64_t kvs_io_fifo_due(const struct kvs_io_fifo *q)
{
	return q->count ? q->v[q->head].due_ns : 0;
}

void kvs_io_fifo_pop(struct kvs_io_fifo *q)
{
	q->head = (q->head + 1) % q->cap;
	q->count--;
}

void kvs_io_fifo_fini(struct kvs_io_fifo *q)
{
	free(q->v);
	memset(q, 0, sizeof(*q));
}

int kvs_io_fifo_push_ready(struct kvs_io_fifo *q, const struct kvs_io_fifo_entry *e, int efd)
{
	bool was_empty = q->count == 0;
	int rc = kvs_io_fifo_push(q, e);

	if (rc == 0 && was_empty && efd >= 0)
		kvs_io_event_signal(efd);
	return rc;
}

void kvs_io_fifo_ready_drained(const struct kvs_io_fifo *q, int efd)
{
	if (q->count == 0 && efd >= 0)
		kvs_io_event_drain(efd);
}

int kvs_io_fifo_ready_fd(const struct kvs_io_fifo *q, int *efd)
{
	if (*efd < 0) {
		int fd = kvs_io_event_open();

		if (fd < 0)
			return fd;
		*efd = fd;
		if (q->count) /* pushed before it was asked for */
			kvs_io_event_signal(fd);
	}
	return *efd;
}
