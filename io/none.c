/*
 * io/none.c — the `none` backend: nothing is stored.
 *
 * lookup says absent; a read is refused at submit with -ENOENT (as the posix
 * backend refuses a missing block); a write is accepted and completes with its
 * full length at the next poll, storing nothing (a cache without a backing store
 * still runs its dump path).  Completions queue in a FIFO; nothing waits.
 * The wait descriptor (made at the first wait_fd) is an eventfd, readable
 * exactly while the FIFO holds completions: signalled by the write that finds
 * it empty, drained by the poll that empties it.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "io/fifo.h"
#include "io/internal.h"

struct none {
	struct kvs_io_fifo done;
	int efd; /* wait descriptor, -1 until asked for */
};

static int none_open(const struct kvs_backend_config *cfg, void **state)
{
	struct none *n = calloc(1, sizeof(*n));

	(void)cfg;
	if (!n)
		return -ENOMEM;
	n->efd = -1;
	*state = n;
	return 0;
}

static int none_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state;
	(void)block;
	return 0;
}

static int none_submit_read(void *state, const struct kvs_backend_io *io)
{
	(void)state;
	(void)io;
	return -ENOENT;
}

static int none_submit_write(void *state, const struct kvs_backend_io *io)
{
	struct none *n = state;
	struct kvs_io_fifo_entry e = { .token = io->token, .result = (int64_t)io->len };

	return kvs_io_fifo_push_ready(&n->done, &e, n->efd);
}

static int none_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		     uint64_t timeout_ns)
{
	struct none *n = state;
	const struct kvs_io_fifo_entry *e;
	uint32_t k = 0;

	(void)timeout_ns; /* completions are ready at once; nothing to wait for */
	while (k < max && (e = kvs_io_fifo_head(&n->done))) {
		out[k].token = e->token;
		out[k].result = e->result;
		k++;
		kvs_io_fifo_pop(&n->done);
	}
	if (k > 0)
		kvs_io_fifo_ready_drained(&n->done, n->efd);
	return (int)k;
}

static int none_wait_fd(void *state)
{
	struct none *n = state;

	return kvs_io_fifo_ready_fd(&n->done, &n->efd);
}

static void none_close(void *state)
{
	struct none *n = state;

	if (!n)
		return;
	kvs_io_fifo_fini(&n->done);
	if (n->efd >= 0)
		close(n->efd);
	free(n);
}

const struct kvs_backend_ops kvs_io_none_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = none_open,
	.lookup = none_lookup,
	.submit_read = none_submit_read,
	.submit_write = none_submit_write,
	.poll = none_poll,
	.close = none_close,
	.wait_fd = none_wait_fd,
};
