/*
 * io/latency.c — the `latency` backend: a synthetic remote store for benchmarks.
 *
 * Every transfer completes latency_ns after its submit; at most
 * latency_queue_depth are in flight per handle (0 = unbounded; submit returns
 * -EAGAIN when full), modelling a per-rank connection limit.  A read's buffer is
 * filled when it completes with kvs_pattern_fill() content (common/pattern.h:
 * header-only, not an export of the library) — a deterministic function of
 * (block, shard, byte offset) — so a reader can verify every byte it got.
 * Writes are accepted and dropped; lookup says present (the store "has" every
 * block).  Completions wait in a due-ordered FIFO (fifo.c) that poll reaps,
 * sleeping until the head is due: no thread per transfer.  The wait descriptor
 * (made at the first wait_fd) is a timerfd armed for the head's due time,
 * re-armed whenever the head changes (submit into an empty FIFO, poll popping
 * it) and disarmed when the FIFO is empty, so it is readable exactly while a
 * completion is due.  At latency 0 every completion is due at its submit: no
 * clock is read, and the descriptor is an eventfd readable while the FIFO holds
 * any (io/fifo.h: a timer armed for "now" at every submit cost hit_bench's cold
 * path a timer interrupt per poll cycle, 2.6 us each on a VM -- the
 * benchmark's stand-in backend, not the store, in its figures).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "io/fifo.h"
#include "io/internal.h"

struct latency {
	uint64_t latency_ns;
	uint32_t qd; /* 0 = unbounded */
	struct kvs_io_fifo q;
	/* wait descriptor, fd -1 until asked for: the timer, or at latency 0 efd */
	struct kvs_io_timer timer;
	int efd;
};

static int latency_open(const struct kvs_backend_config *cfg, void **state)
{
	struct latency *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->latency_ns = cfg->latency_ns;
	l->qd = cfg->latency_queue_depth;
	l->timer.fd = -1;
	l->efd = -1;
	*state = l;
	return 0;
}

static int latency_lookup(void *state, const struct kvs_block_id *block)
{
	(void)state;
	(void)block;
	return 1;
}

static int latency_submit(struct latency *l, const struct kvs_backend_io *io, bool read)
{
	struct kvs_io_fifo_entry e = {
		.due_ns = l->latency_ns ? kvs_now_ns() + l->latency_ns : 0,
		.token = io->token,
		.result = (int64_t)io->len,
		.buf = read ? io->buf : NULL,
		.block = io->block,
		.shard = io->shard,
		.offset = io->offset,
		.len = io->len,
	};

	int rc;

	if (l->qd && l->q.count >= l->qd)
		return -EAGAIN;
	if (!l->latency_ns)
		return kvs_io_fifo_push_ready(&l->q, &e, l->efd);
	rc = kvs_io_fifo_push(&l->q, &e);
	kvs_io_timer_arm(&l->timer, kvs_io_fifo_due(&l->q)); /* changes only from empty */
	return rc;
}

static int latency_submit_read(void *state, const struct kvs_backend_io *io)
{
	return latency_submit(state, io, true);
}

static int latency_submit_write(void *state, const struct kvs_backend_io *io)
{
	return latency_submit(state, io, false);
}

static int latency_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
			uint64_t timeout_ns)
{
	struct latency *l = state;
	uint64_t deadline = kvs_deadline_after(timeout_ns);
	uint32_t k = 0;

	for (;;) {
		const struct kvs_io_fifo_entry *e;
		uint64_t now = kvs_now_ns();

		while (k < max && (e = kvs_io_fifo_head(&l->q)) && e->due_ns <= now) {
			if (e->buf)
				kvs_pattern_fill(&e->block, e->shard, e->offset, e->buf, e->len);
			out[k].token = e->token;
			out[k].result = e->result;
			k++;
			kvs_io_fifo_pop(&l->q);
		}
		e = kvs_io_fifo_head(&l->q);
		if (k > 0 || !e || now >= deadline) {
			if (l->latency_ns)
				kvs_io_timer_arm(&l->timer, kvs_io_fifo_due(&l->q));
			else
				kvs_io_fifo_ready_drained(&l->q, l->efd);
			return (int)k;
		}
		struct timespec ts = kvs_ns_to_timespec(e->due_ns < deadline ? e->due_ns : deadline);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
}

static int latency_wait_fd(void *state)
{
	struct latency *l = state;

	if (!l->latency_ns)
		return kvs_io_fifo_ready_fd(&l->q, &l->efd);
	if (l->timer.fd < 0) {
		int rc = kvs_io_timer_open(&l->timer);

		if (rc < 0)
			return rc;
		kvs_io_timer_arm(&l->timer, kvs_io_fifo_due(&l->q));
	}
	return l->timer.fd;
}

static void latency_close(void *state)
{
	struct latency *l = state;

	if (!l)
		return;
	kvs_io_fifo_fini(&l->q);
	kvs_io_timer_close(&l->timer);
	if (l->efd >= 0)
		close(l->efd);
	free(l);
}

/* Every block is there, whole (content from its id): reads prove blocks. */
static void latency_info(void *state, struct kvs_backend_info *info)
{
	(void)state;
	info->flags = KVS_BACKEND_INFO_BLOCK_ATOMIC;
}

const struct kvs_backend_ops kvs_io_latency_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = latency_open,
	.lookup = latency_lookup,
	.submit_read = latency_submit_read,
	.submit_write = latency_submit_write,
	.poll = latency_poll,
	.close = latency_close,
	.wait_fd = latency_wait_fd,
	.info = latency_info,
};
