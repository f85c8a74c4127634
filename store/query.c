/*
 * store/query.c — what a store answers at once, without a task: whether blocks
 * are stored (the shared cache, then the backend), its counters and the node's,
 * its copy engine and its cache.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"

_Static_assert(sizeof(struct kvs_shm_store_stats) ==
		       offsetof(struct kvs_store_stats, register_ms_per_gib),
	       "shared store counters mirror struct kvs_store_stats (up to its derived fields)");

/* ------------------------------------------------------------------------ */
/* Lookups and stats                                                         */

KVS_API int kvs_store_lookup(struct kvs_store *s, const struct kvs_block_id *blocks, size_t n,
			     bool *hits)
{
	int rc;

	if (!s || (n && (!blocks || !hits)))
		return -EINVAL;
	rc = kvs_cache_lookup(s->cache, blocks, n, KVS_ALL_SHARDS, hits);
	if (rc < 0 || rc == (int)n)
		return rc;
	/* The blocks the cache lacks (hits[i] false), in one backend round trip
	 * where the backend batches (redis). */
	return kvs_backend_lookup_batch(s->backend, blocks, n, 0, hits);
}

KVS_API int kvs_store_lookup_prefix(struct kvs_store *s, const struct kvs_block_id *blocks,
				    size_t n)
{
	bool *hits;
	int rc;
	size_t i;

	if (!s || (n && !blocks) || n > INT32_MAX)
		return -EINVAL;
	rc = kvs_cache_lookup_prefix(s->cache, blocks, n, KVS_ALL_SHARDS);
	if (rc < 0 || rc == (int)n)
		return rc;
	/* Past the cache's prefix, a block may be in the cache or the backend, as
	 * for kvs_store_lookup: ask the cache first, the backend for the rest. */
	i = (size_t)rc;
	hits = calloc(n - i, sizeof(*hits));
	if (!hits)
		return -ENOMEM;
	rc = kvs_cache_lookup(s->cache, blocks + i, n - i, KVS_ALL_SHARDS, hits);
	if (rc >= 0)
		rc = kvs_backend_lookup_batch(s->backend, blocks + i, n - i,
					      KVS_BACKEND_LOOKUP_PREFIX, hits);
	free(hits);
	return rc < 0 ? rc : (int)i + rc;
}

/* The failure counters, in the order they are read: each before what it is a
 * subset of (tasks_timedout of tasks_failed, that of the tasks, read_errors of
 * owner_reads, write_errors of backend_writes). */
#define FAIL_IDX(f) (offsetof(struct kvs_shm_store_stats, f) / sizeof(uint64_t))
static const size_t store_failures[] = {
	FAIL_IDX(tasks_timedout), FAIL_IDX(tasks_failed), FAIL_IDX(read_errors),
	FAIL_IDX(write_errors),
};
#undef FAIL_IDX

/* Add entry counters st, less base (NULL: none), to o (the shared counters
 * mirror the public struct up to its derived fields).  The failures first,
 * each an acquire load pairing with KVS_STORE_COUNT_FAILURE's release: the
 * attempts loaded after them hold every attempt whose failure they hold, so
 * the snapshot's failures never exceed its attempts.  The rest relaxed. */
static void add_store_stats(struct kvs_store_stats *o, struct kvs_shm_store_stats *st,
			    struct kvs_shm_store_stats *base)
{
	const size_t nf = sizeof(store_failures) / sizeof(store_failures[0]);
	uint64_t *dst = (uint64_t *)o, fail[sizeof(store_failures) / sizeof(store_failures[0])];
	_Atomic uint64_t *src = (_Atomic uint64_t *)st, *b = (_Atomic uint64_t *)base;

	for (size_t i = 0; i < nf; i++) {
		size_t k = store_failures[i];
		uint64_t v = atomic_load_explicit(&src[k], memory_order_acquire);
		/* relaxed: the base is written at attach, before this rank counted */
		uint64_t v0 = b ? atomic_load_explicit(&b[k], memory_order_relaxed) : 0;

		fail[i] = v > v0 ? v - v0 : 0;
	}
	for (size_t k = 0; k < sizeof(*st) / sizeof(uint64_t); k++) {
		size_t i = 0;

		while (i < nf && store_failures[i] != k)
			i++;
		dst[k] += i < nf ? fail[i] : kvs_core_stat_since(&src[k], b ? &b[k] : NULL);
	}
}

/* Has the rank attached to entry e registered everything it registers?  (Its
 * own counts: the entry's less its base.  Racy, like every counter.) */
static bool rank_registered(struct kvs_shm_rank *e)
{
	struct kvs_store_stats mine;

	memset(&mine, 0, sizeof(mine));
	add_store_stats(&mine, &e->stats.store, &e->base.store);
	return mine.register_total_bytes && mine.registered_bytes >= mine.register_total_bytes;
}

KVS_API int kvs_store_stats(struct kvs_store *s, int rank, struct kvs_store_stats *o)
{
	struct kvs_cache *c;

	if (!s || !o || rank < KVS_STATS_NODE || rank >= (int)KVS_MAX_RANKS)
		return -EINVAL;
	c = s->cache;
	memset(o, 0, sizeof(*o));
	if (rank == KVS_STATS_NODE) {
		uint32_t live = 0, ready = 0;

		for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
			struct kvs_shm_rank *e = &c->ranks[r];

			add_store_stats(o, &e->stats.store, NULL); /* departed ranks' too */
			/* Ready: every live GPU rank (a dead one's registration died with
			 * it).  relaxed: the epoch is rechecked by kvs_core_rank_alive
			 * after its acquire of the entry's state (device_id with it). */
			if (!kvs_core_rank_alive(c, r, atomic_load_explicit(&e->epoch,
									 memory_order_relaxed)) ||
			    e->device_id < 0)
				continue;
			live++;
			ready += rank_registered(e);
		}
		o->ready = ready == live; /* no live GPU rank: nothing left to register */
	} else {
		add_store_stats(o, &c->ranks[rank].stats.store, &c->ranks[rank].base.store);
		o->ready = rank_registered(&c->ranks[rank]);
	}
	if (o->registered_bytes)
		o->register_ms_per_gib = (double)o->register_ns / 1e6 /
					 ((double)o->registered_bytes / (double)(UINT64_C(1) << 30));
	return 0;
}

KVS_API int kvs_store_copy_engine(struct kvs_store *s)
{
	if (!s)
		return -EINVAL;
	return s->copy ? (int)s->copy_kind : -EOPNOTSUPP;
}

KVS_API struct kvs_cache *kvs_store_cache(struct kvs_store *s)
{
	return s ? s->cache : NULL;
}

