/*
 * tests/store_gate.h — a "gated" backend for the store tests: a user backend
 * (KVS_BACKEND_USER) over a real posix backend whose writes are held while a
 * gate file exists.  A writer whose block writes are held looks, from outside,
 * exactly like one stuck in pwrite on a hung mount: its temp file never fills,
 * the block never appears, and when it is killed -9 the writes never happen.
 * Reads and lookups pass through; held writes go to the posix backend, in order,
 * once the gate file is removed.
 *
 * The gate is polled (access(2) at each poll call, sleeping at most 1 ms between
 * looks while writes are held): a test device, not a model of how a backend
 * should wait.  It has no wait descriptor, so the store sleeps in its poll.
 */
#ifndef KVS_TESTS_STORE_GATE_H
#define KVS_TESTS_STORE_GATE_H

#include <time.h>

#include "store_util.h"

/* What the gated backend is opened with (kvs_backend_config.user_arg): must
 * outlive the store. */
struct gate_conf {
	char root[256]; /* the posix root */
	char gate[320]; /* writes are held while this file exists */
};

#define GATE_HELD_MAX 4096

struct gate {
	struct kvs_backend *inner;
	const struct gate_conf *conf;
	struct kvs_backend_io held[GATE_HELD_MAX];
	uint32_t nheld;
	uint32_t inner_inflight;
	struct kvs_backend_completion failed[GATE_HELD_MAX]; /* held writes the posix
								backend refused */
	uint32_t nfailed;
};

static inline int gate_open(const struct kvs_backend_config *cfg, void **state)
{
	struct kvs_backend_config in;
	struct gate *g = calloc(1, sizeof(*g));
	int rc;

	if (!g)
		return -ENOMEM;
	g->conf = cfg->user_arg;
	kvs_backend_config_init(&in);
	in.kind = KVS_BACKEND_POSIX;
	in.flags = KVS_BACKEND_F_NO_FSYNC;
	in.nroots = 1;
	in.roots[0] = g->conf->root;
	in.shard_bytes = cfg->shard_bytes;
	in.shards_per_block = cfg->shards_per_block;
	in.io_engine = KVS_IO_ENGINE_POOL;
	in.log = cfg->log;
	in.log_arg = cfg->log_arg;
	rc = kvs_backend_open(&in, &g->inner);
	if (rc) {
		free(g);
		return rc;
	}
	*state = g;
	return 0;
}

static inline bool gate_closed(const struct gate *g)
{
	return access(g->conf->gate, F_OK) == 0;
}

static inline int gate_lookup(void *state, const struct kvs_block_id *block)
{
	struct gate *g = state;

	return kvs_backend_lookup(g->inner, block);
}

static inline int gate_submit_read(void *state, const struct kvs_backend_io *io)
{
	struct gate *g = state;
	int rc = kvs_backend_submit_read(g->inner, io);

	g->inner_inflight += rc == 0;
	return rc;
}

static inline int gate_submit_write(void *state, const struct kvs_backend_io *io)
{
	struct gate *g = state;
	int rc;

	if (g->nheld || gate_closed(g)) {
		if (g->nheld == GATE_HELD_MAX)
			return -EAGAIN;
		g->held[g->nheld++] = *io;
		return 0;
	}
	rc = kvs_backend_submit_write(g->inner, io);
	g->inner_inflight += rc == 0;
	return rc;
}

/* Move held writes to the posix backend once the gate is open (a refused one
 * completes with its error). */
static inline void gate_release(struct gate *g)
{
	uint32_t k = 0;

	if (!g->nheld || gate_closed(g))
		return;
	for (; k < g->nheld; k++) {
		int rc = kvs_backend_submit_write(g->inner, &g->held[k]);

		if (rc == -EAGAIN)
			break;
		if (rc)
			g->failed[g->nfailed++] =
				(struct kvs_backend_completion){ g->held[k].token, rc };
		else
			g->inner_inflight++;
	}
	memmove(g->held, g->held + k, (g->nheld - k) * sizeof(g->held[0]));
	g->nheld -= k;
}

static inline int gate_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
			    uint64_t timeout_ns)
{
	struct gate *g = state;
	uint64_t deadline = kvs_deadline_after(timeout_ns);

	for (;;) {
		int n = 0;

		gate_release(g);
		if (g->nfailed) {
			while (g->nfailed && (uint32_t)n < max)
				out[n++] = g->failed[--g->nfailed];
			return n;
		}
		if (g->inner_inflight) {
			n = kvs_backend_poll(g->inner, out, max, g->nheld ? 0 : timeout_ns);
			if (n > 0)
				g->inner_inflight -= (uint32_t)n;
		}
		if (n != 0 || kvs_now_ns() >= deadline || (!g->nheld && !g->inner_inflight))
			return n;
		if (g->nheld) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
	}
}

static inline void gate_close(void *state)
{
	struct gate *g = state;

	if (!g)
		return;
	kvs_backend_close(g->inner); /* held writes are dropped, never written */
	free(g);
}

/* What the posix backend underneath says: its blocks are atomic (a held write
 * never makes part of a block readable). */
static inline void gate_info(void *state, struct kvs_backend_info *info)
{
	struct gate *g = state;

	kvs_backend_info(g->inner, info);
}

static const struct kvs_backend_ops gate_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = gate_open,
	.lookup = gate_lookup,
	.submit_read = gate_submit_read,
	.submit_write = gate_submit_write,
	.poll = gate_poll,
	.close = gate_close,
	.info = gate_info,
};

/* Use the gated backend over root with gate file path gate (conf must outlive
 * the store). */
static inline void st_gated(struct kvs_store_config *cfg, struct gate_conf *conf, const char *root,
			    const char *gate)
{
	snprintf(conf->root, sizeof(conf->root), "%s", root);
	snprintf(conf->gate, sizeof(conf->gate), "%s", gate);
	cfg->backend.kind = KVS_BACKEND_USER;
	cfg->backend.user_ops = &gate_ops;
	cfg->backend.user_arg = conf;
}

/* Close (create) or open (remove) the gate file. */
static inline kvs_test_rc gate_set(const char *gate, bool closed)
{
	if (closed) {
		int fd = open(gate, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

		if (fd < 0)
			KVS_FAILF("create gate %s: %s", gate, strerror(errno));
		close(fd);
	} else if (unlink(gate) && errno != ENOENT) {
		KVS_FAILF("remove gate %s: %s", gate, strerror(errno));
	}
	return KVS_TEST_PASS;
}

#endif
