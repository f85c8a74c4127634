/*
 * io/fault.c — the `fault` backend: wraps another backend and injects faults.
 *
 * For every transfer, a seeded generator (splitmix64 from fault_seed, so a run
 * is reproducible) decides, in this order:
 *   error  (fault_error_ppm)  the transfer completes with -EIO without reaching
 *          the inner backend (a write so failed leaves the inner dump of its
 *          block incomplete: the block never appears, as after a real failure);
 *   short  (fault_short_ppm, reads)  the inner backend is asked for len - 1
 *          bytes (len / 2 for long reads) and the read completes with -EIO:
 *          a store that returned fewer bytes than asked, which every built-in
 *          backend reports as -EIO rather than a partial count;
 *   else   passed through.
 * Every completion (injected or inner) is held fault_delay_ns more.  Inner
 * completions are mapped back to the caller's token through a record table
 * (the inner token is the record index).
 *
 * Wait descriptor (made at the first wait_fd): an epoll set over a timerfd
 * armed for the delay FIFO's head and the inner backend's own descriptor (no
 * inner descriptor, no fault descriptor: -EOPNOTSUPP).  Readable when an inner
 * completion is ready (poll pulls it into the FIFO, and with no delay reaps it
 * in the same call) or the head is due; poll re-arms the timer for the head it
 * leaves, so after a poll that returned fewer than asked for nothing stays
 * readable.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "io/fifo.h"
#include "io/internal.h"

struct record {
	uint64_t token;
	bool in_use;
	bool short_read;
};

struct fault {
	struct kvs_backend *inner;
	uint64_t rng;
	uint32_t error_ppm;
	uint32_t short_ppm;
	uint64_t delay_ns;
	struct record *recs;
	uint32_t nrecs;
	uint32_t free_hint;
	uint32_t inner_inflight; /* transfers submitted to inner, not yet reaped */
	struct kvs_io_fifo q; /* completions waiting out the delay */
	struct kvs_io_timer timer; /* the head's due time, once a wait descriptor was asked */
	int epfd;             /* wait descriptor: timer + inner's, -1 until asked for */
};

static uint32_t draw_ppm(struct fault *f)
{
	f->rng += 0x9e3779b97f4a7c15ull;
	return (uint32_t)(kvs_mix64(f->rng) % 1000000u);
}

static int fault_open(const struct kvs_backend_config *cfg, void **state)
{
	struct fault *f = calloc(1, sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	f->rng = cfg->fault_seed;
	f->error_ppm = cfg->fault_error_ppm;
	f->short_ppm = cfg->fault_short_ppm;
	f->delay_ns = cfg->fault_delay_ns;
	f->timer.fd = -1;
	f->epfd = -1;
	rc = kvs_backend_open(cfg->fault_inner, &f->inner);
	if (rc < 0) {
		free(f);
		return rc;
	}
	*state = f;
	return 0;
}

static int fault_lookup(void *state, const struct kvs_block_id *block)
{
	struct fault *f = state;

	return kvs_backend_lookup(f->inner, block);
}

/* Advice passes through: the faults are the transfers'. */
static void fault_hint_read(void *state, const struct kvs_block_id *blocks, size_t n)
{
	struct fault *f = state;

	(void)kvs_backend_hint_read(f->inner, blocks, n);
}

static int record_get(struct fault *f, uint32_t *idx)
{
	for (uint32_t n = 0; n < f->nrecs; n++) {
		uint32_t i = (f->free_hint + n) % f->nrecs;

		if (!f->recs[i].in_use) {
			f->free_hint = i + 1;
			*idx = i;
			return 0;
		}
	}
	uint32_t cap = f->nrecs ? 2 * f->nrecs : 64;
	struct record *v = realloc(f->recs, cap * sizeof(*v));

	if (!v)
		return -ENOMEM;
	for (uint32_t i = f->nrecs; i < cap; i++)
		v[i].in_use = false;
	*idx = f->nrecs;
	f->recs = v;
	f->nrecs = cap;
	return 0;
}

static int fault_submit(struct fault *f, const struct kvs_backend_io *io, bool read)
{
	struct kvs_backend_io inner = *io;
	bool short_read = false;
	uint32_t idx;
	int rc;

	if (draw_ppm(f) < f->error_ppm) {
		struct kvs_io_fifo_entry e = {
			.due_ns = kvs_now_ns() + f->delay_ns,
			.token = io->token,
			.result = -EIO,
		};

		rc = kvs_io_fifo_push(&f->q, &e);
		kvs_io_timer_arm(&f->timer, kvs_io_fifo_due(&f->q)); /* changes only from empty */
		return rc;
	}
	if (read && draw_ppm(f) < f->short_ppm && io->len > 1) {
		short_read = true;
		inner.len = io->len > 4096 ? io->len / 2 : io->len - 1;
	}
	rc = record_get(f, &idx);
	if (rc < 0)
		return rc;
	inner.token = idx;
	rc = read ? kvs_backend_submit_read(f->inner, &inner)
		  : kvs_backend_submit_write(f->inner, &inner);
	if (rc < 0)
		return rc;
	f->recs[idx] = (struct record){ .token = io->token, .in_use = true,
					.short_read = short_read };
	f->inner_inflight++;
	return 0;
}

static int fault_submit_read(void *state, const struct kvs_backend_io *io)
{
	return fault_submit(state, io, true);
}

static int fault_submit_write(void *state, const struct kvs_backend_io *io)
{
	return fault_submit(state, io, false);
}

/* Move inner completions into the delay queue; waits up to timeout_ns. */
static int pull_inner(struct fault *f, uint64_t timeout_ns)
{
	struct kvs_backend_completion c[32];
	int got = kvs_backend_poll(f->inner, c, 32, timeout_ns);

	for (int i = 0; i < got; i++) {
		struct record *r = &f->recs[c[i].token];
		struct kvs_io_fifo_entry e = {
			.due_ns = kvs_now_ns() + f->delay_ns,
			.token = r->token,
			.result = r->short_read && c[i].result >= 0 ? -EIO : c[i].result,
		};
		int rc = kvs_io_fifo_push(&f->q, &e);

		r->in_use = false;
		f->inner_inflight--;
		if (rc < 0)
			return rc;
	}
	return got;
}

/* Reap due completions (fault_poll); waits up to deadline for the first. */
static int poll_due(struct fault *f, struct kvs_backend_completion *out, uint32_t max,
		    uint64_t deadline)
{
	uint32_t k = 0;

	for (;;) {
		const struct kvs_io_fifo_entry *e;
		int rc = pull_inner(f, 0);
		uint64_t now = kvs_now_ns();

		if (rc < 0)
			return k ? (int)k : rc;
		while (k < max && (e = kvs_io_fifo_head(&f->q)) && e->due_ns <= now) {
			out[k].token = e->token;
			out[k].result = e->result;
			k++;
			kvs_io_fifo_pop(&f->q);
		}
		if (k > 0 || now >= deadline)
			return (int)k;
		/* Wait for the inner backend, but not past the head's due time; with
		 * nothing below, sleep until the head is due (or return: nothing at all). */
		e = kvs_io_fifo_head(&f->q);
		uint64_t until = e && e->due_ns < deadline ? e->due_ns : deadline;
		if (f->inner_inflight) {
			rc = pull_inner(f, until - now);
			if (rc < 0)
				return rc;
		} else if (e) {
			struct timespec ts = kvs_ns_to_timespec(until);

			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		} else {
			return 0;
		}
	}
}

static int fault_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		      uint64_t timeout_ns)
{
	struct fault *f = state;
	int rc = poll_due(f, out, max, kvs_deadline_after(timeout_ns));

	/* The head it leaves: due already when max was reached (readable at once),
	 * else later, or none. */
	kvs_io_timer_arm(&f->timer, kvs_io_fifo_due(&f->q));
	return rc;
}

static int fault_wait_fd(void *state)
{
	struct fault *f = state;
	int fds[2], rc;

	if (f->epfd >= 0)
		return f->epfd;
	fds[1] = kvs_backend_wait_fd(f->inner);
	if (fds[1] < 0)
		return fds[1]; /* -EOPNOTSUPP: nothing to sleep on below */
	rc = kvs_io_timer_open(&f->timer);
	if (rc < 0)
		return rc;
	fds[0] = f->timer.fd;
	rc = kvs_io_epoll_open(fds, 2);
	if (rc < 0) {
		kvs_io_timer_close(&f->timer);
		return rc;
	}
	f->epfd = rc;
	kvs_io_timer_arm(&f->timer, kvs_io_fifo_due(&f->q));
	return f->epfd;
}

static void fault_close(void *state)
{
	struct fault *f = state;

	if (!f)
		return;
	kvs_backend_close(f->inner);
	kvs_io_fifo_fini(&f->q);
	if (f->epfd >= 0)
		close(f->epfd);
	kvs_io_timer_close(&f->timer);
	free(f->recs);
	free(f);
}

static int fault_register_buffers(void *state, const struct kvs_backend_buffer *bufs, uint32_t n)
{
	struct fault *f = state;

	return kvs_backend_register_buffers(f->inner, bufs, n);
}

static void fault_info(void *state, struct kvs_backend_info *info)
{
	struct fault *f = state;
	struct kvs_backend_info in;

	kvs_backend_info(f->inner, &in);
	*info = in; /* the engine and flags of what is underneath */
}

const struct kvs_backend_ops kvs_io_fault_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = fault_open,
	.lookup = fault_lookup,
	.submit_read = fault_submit_read,
	.submit_write = fault_submit_write,
	.poll = fault_poll,
	.close = fault_close,
	.register_buffers = fault_register_buffers,
	.info = fault_info,
	.wait_fd = fault_wait_fd,
	.hint_read = fault_hint_read,
};
