/*
 * tools/count_backend.c — the counting backend (tools/count_backend.h).
 *
 * The store's tokens are kept in a table of this handle's (the wrapped
 * backend gets the table index as its token), with each transfer's submit
 * time and kind, so that a completion is counted as what it was and given back
 * with the store's token.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/clock.h"
#include "tools/count_backend.h"

#define TOK_NONE UINT32_MAX

struct tok {
	uint64_t token;     /* the store's */
	uint64_t submit_ns;
	uint32_t write;     /* 1: a write */
	uint32_t next;      /* free list */
};

struct cb {
	struct kvs_backend *inner;
	struct kvs_count *count;
	uint32_t qd, inflight;
	struct tok *tok;    /* inner tokens are indices into tok[] */
	uint32_t ntok, free_head;
};

static int cb_open(const struct kvs_backend_config *cfg, void **state)
{
	const struct kvs_count_arg *a = cfg->user_arg;
	struct cb *b;
	int rc;

	if (!a || !a->count || !a->open_inner)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	rc = a->open_inner(cfg, a->arg, &b->inner);
	if (rc < 0) {
		free(b);
		return rc;
	}
	b->count = a->count;
	b->qd = a->qd;
	b->free_head = TOK_NONE;
	*state = b;
	return 0;
}

static int cb_lookup(void *state, const struct kvs_block_id *block)
{
	struct cb *b = state;

	return kvs_backend_lookup(b->inner, block);
}

static int tok_get(struct cb *b, uint32_t *idx)
{
	if (b->free_head == TOK_NONE) {
		uint32_t n = b->ntok ? 2 * b->ntok : 64;
		struct tok *t = realloc(b->tok, n * sizeof(*t));

		if (!t)
			return -ENOMEM;
		for (uint32_t i = b->ntok; i < n; i++)
			t[i].next = i + 1 < n ? i + 1 : TOK_NONE;
		b->free_head = b->ntok;
		b->tok = t;
		b->ntok = n;
	}
	*idx = b->free_head;
	b->free_head = b->tok[*idx].next;
	return 0;
}

static void tok_put(struct cb *b, uint32_t idx)
{
	b->tok[idx].next = b->free_head;
	b->free_head = idx;
}

static int cb_submit(struct cb *b, const struct kvs_backend_io *io, bool write)
{
	struct kvs_backend_io in = *io;
	struct kvs_count *c = b->count;
	uint32_t idx;
	int rc;

	if (b->qd && b->inflight >= b->qd)
		return -EAGAIN; /* this handle's share of the store: poll first */
	rc = tok_get(b, &idx);
	if (rc < 0)
		return rc;
	b->tok[idx] = (struct tok){ .token = io->token, .submit_ns = kvs_now_ns(),
				    .write = write, .next = TOK_NONE };
	in.token = idx;
	rc = write ? kvs_backend_submit_write(b->inner, &in) : kvs_backend_submit_read(b->inner, &in);
	if (rc < 0) {
		tok_put(b, idx);
		return rc;
	}
	b->inflight++;
	/* relaxed: counts and a running maximum (struct kvs_count) */
	if (write) {
		atomic_fetch_add_explicit(&c->writes, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&c->reads, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&c->read_bytes, io->len, memory_order_relaxed);
	}
	int64_t now = atomic_fetch_add_explicit(&c->inflight, 1, memory_order_relaxed) + 1;
	int64_t max = atomic_load_explicit(&c->max_inflight, memory_order_relaxed);
	while (now > max && !atomic_compare_exchange_weak_explicit(&c->max_inflight, &max, now,
								    memory_order_relaxed,
								    memory_order_relaxed))
		;
	return 0;
}

static int cb_submit_read(void *state, const struct kvs_backend_io *io)
{
	return cb_submit(state, io, false);
}

static int cb_submit_write(void *state, const struct kvs_backend_io *io)
{
	return cb_submit(state, io, true);
}

static int cb_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		   uint64_t timeout_ns)
{
	struct cb *b = state;
	struct kvs_count *c = b->count;
	int n = kvs_backend_poll(b->inner, out, max, timeout_ns);
	uint64_t now = kvs_now_ns();

	for (int i = 0; i < n; i++) {
		uint32_t idx = (uint32_t)out[i].token;
		const struct tok *t = &b->tok[idx];

		out[i].token = t->token;
		b->inflight--;
		/* relaxed: counts (struct kvs_count) */
		atomic_fetch_sub_explicit(&c->inflight, 1, memory_order_relaxed);
		if (!t->write)
			atomic_fetch_add_explicit(&c->read_ns, now - t->submit_ns,
						  memory_order_relaxed);
		if (out[i].result < 0)
			atomic_fetch_add_explicit(&c->failures, 1, memory_order_relaxed);
		tok_put(b, idx);
	}
	return n;
}

static void cb_close(void *state)
{
	struct cb *b = state;

	if (!b)
		return;
	kvs_backend_close(b->inner);
	free(b->tok);
	free(b);
}

static int cb_register_buffers(void *state, const struct kvs_backend_buffer *bufs, uint32_t n)
{
	struct cb *b = state;

	return kvs_backend_register_buffers(b->inner, bufs, n);
}

static void cb_info(void *state, struct kvs_backend_info *info)
{
	struct cb *b = state;

	kvs_backend_info(b->inner, info);
}

/* The wrapped backend's wait descriptor: cb_poll reaps it, so its readiness is ours. */
static int cb_wait_fd(void *state)
{
	struct cb *b = state;

	return kvs_backend_wait_fd(b->inner);
}

/* Advice passes through to the wrapped backend (posix opens hinted blocks ahead). */
static void cb_hint_read(void *state, const struct kvs_block_id *blocks, size_t n)
{
	struct cb *b = state;

	(void)kvs_backend_hint_read(b->inner, blocks, n);
}

const struct kvs_backend_ops kvs_count_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = cb_open,
	.lookup = cb_lookup,
	.submit_read = cb_submit_read,
	.submit_write = cb_submit_write,
	.poll = cb_poll,
	.close = cb_close,
	.register_buffers = cb_register_buffers,
	.info = cb_info,
	.wait_fd = cb_wait_fd,
	.hint_read = cb_hint_read,
};
