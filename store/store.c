/*
 * store/store.c — a rank's store opened and closed: the configuration resolved,
 * the copy engine, the backend and the cache opened in that order (what can
 * fail fails before the data plane exists), the threads started; the log gate;
 * and the bounded close.  Tasks are store/task.c, lookups and stats
 * store/query.c.
 *
 * Close is bounded: new tasks are refused, running ones end by their deadlines
 * (each reports then, transfers or not), and the threads are given timeout_ns
 * more to drain transfers still in flight.  If one outlives that (a hung mount),
 * close returns anyway: the threads finish draining on their own and the last
 * one tears the store down (kvs_store_thread_exit); the slots of that transfer
 * stay pinned until it ends, and from close's return they log nothing (the
 * caller's callbacks sit behind a gate that close shuts).  A process that exits
 * meanwhile (exit(), a return from main, not _exit) gives such stores up to
 * timeout_ns more before it goes (an atexit handler): a transfer that lands
 * then lets the store detach and, as the node's last rank, remove the cache,
 * instead of leaving it stale.  In a fork()ed child, close frees the child's copy
 * of the memory only (the threads and the backend are the parent's).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "store/store.h"

/* ------------------------------------------------------------------------ */
/* Open and close                                                            */

/*
 * The copy engine, opened before the cache exists (an engine that cannot work
 * must not cost a pre-fault of the data plane first).  copy_engine=auto takes
 * CUDA when a device is usable and the host engine otherwise, said once at
 * INFO.  The data plane is registered with it later, in the background
 * (store/register.c).
 */
static int copy_open(struct kvs_store *s)
{
	uint32_t want = s->cfg.copy_engine;
	struct kvs_copy_opts o = {
		.kind = want == KVS_COPY_ENGINE_HOST ? KVS_COPY_HOST : KVS_COPY_CUDA,
		.device_id = s->cfg.cache.device_id,
		.streams = s->cfg.cache_stream_number,
		.log = want == KVS_COPY_ENGINE_AUTO ? NULL : &s->log,
		.register_delay_ns = s->cfg.register_delay_ns,
		.land_delay_ns = s->cfg.copy_land_delay_ns,
	};
	int rc = kvs_copy_open(&o, &s->copy);

	if (rc && want == KVS_COPY_ENGINE_AUTO && (rc == -ENODEV || rc == -EOPNOTSUPP)) {
		kvs_log_info(&s->log, "store: copy_engine=auto: no usable CUDA device %d (%s): "
				      "the host engine copies (device addresses are host pointers)",
			     o.device_id, kvs_strerror(rc));
		o.kind = KVS_COPY_HOST;
		o.log = &s->log;
		rc = kvs_copy_open(&o, &s->copy);
	}
	if (rc) {
		kvs_log_error(&s->log, "store: copy_engine=%s on device %d: %s%s",
			      o.kind == KVS_COPY_HOST ? "host" : "cuda", o.device_id, kvs_strerror(rc),
			      o.kind == KVS_COPY_CUDA ? " (no usable CUDA device: set copy_engine=host "
							"or auto)" : "");
		return rc == -EOPNOTSUPP ? -ENODEV : rc;
	}
	s->copy_kind = o.kind == KVS_COPY_HOST ? KVS_COPY_ENGINE_HOST : KVS_COPY_ENGINE_CUDA;
	return 0;
}

/* The geometry the backend stores with every block: the cache's once it is
 * open (an attacher takes the creator's), the configuration's before. */
static void tensor_table(struct kvs_store *s, const struct kvs_cache_config *cc)
{
	uint64_t off = 0;

	s->slot_bytes = cc->slot_bytes;
	s->spb = cc->shards_per_block;
	s->tensor_count = cc->tensor_count ? cc->tensor_count : 1;
	for (uint32_t i = 0; i < s->tensor_count; i++) {
		s->tensor_bytes[i] = cc->tensor_count ? cc->tensor_bytes[i] : s->slot_bytes;
		s->tensor_off[i] = off;
		off += s->tensor_bytes[i];
	}
}

/*
 * Open the backend for the geometry of tensor_table().  Called before the
 * cache exists, so a missing root, a root that is not writable, a Redis that
 * refuses the password are errors before any pre-fault; and once more after
 * the cache opened when it brought another geometry (a watcher that gave none).
 */
static int backend_open(struct kvs_store *s)
{
	struct kvs_backend_info info;
	int rc;

	kvs_backend_close(s->backend);
	s->backend = NULL;
	s->cfg.backend.shard_bytes = s->slot_bytes;
	s->cfg.backend.shards_per_block = s->spb;
	s->cfg.backend.tensor_count = s->tensor_count;
	s->cfg.backend.tensor_bytes = s->tensor_bytes;
	s->fault_inner.shard_bytes = s->slot_bytes;
	s->fault_inner.shards_per_block = s->spb;
	s->fault_inner.tensor_count = s->tensor_count;
	s->fault_inner.tensor_bytes = s->tensor_bytes;
	if (s->cfg.backend.kind == KVS_BACKEND_POSIX && s->cfg.backend.nroots == 0) {
		kvs_log_error(&s->log, "store: backend=posix needs backend_roots, the directories "
				       "its block files go under (backend_roots=/data/kv, or /a:/b); "
				       "none was given (or backend=none: no backend)");
		return -EINVAL;
	}
	rc = kvs_backend_open(&s->cfg.backend, &s->backend);
	if (rc) {
		kvs_log_error(&s->log, "store: opening the backend: %s", kvs_strerror(rc));
		return rc;
	}
	if (kvs_backend_info(s->backend, &info) == 0)
		s->block_atomic = info.flags & KVS_BACKEND_INFO_BLOCK_ATOMIC;
	return 0;
}

/*
 * What a backend is, in the keys that choose it: where a block dumped through
 * it lands (a fault backend's is its inner one's; the layout tag is part of it:
 * blocks stored with another are refused).  false for a user backend: its ops
 * cannot be compared across processes, so its caller keeps the ranks agreed.
 */
static bool backend_identity(const struct kvs_backend_config *b, char *buf, size_t len)
{
	size_t n = 0;

	if (b->kind == KVS_BACKEND_FAULT && b->fault_inner)
		b = b->fault_inner;
	switch (b->kind) {
	case KVS_BACKEND_POSIX:
		n = (size_t)snprintf(buf, len, "backend=posix backend_roots=");
		for (uint32_t i = 0; i < b->nroots && n < len; i++) {
			char real[PATH_MAX];
			const char *r = realpath(b->roots[i], real) ? real : b->roots[i];

			n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ":" : "", r);
		}
		break;
	case KVS_BACKEND_REDIS:
		n = (size_t)snprintf(buf, len, "backend=redis redis_endpoints=%s redis_db=%u "
					       "redis_key_prefix=%s%s",
				     b->redis.endpoints, b->redis.db, b->redis.key_prefix,
				     b->redis.cluster ? " redis_cluster=1" : ""); /* other keys */
		break;
	case KVS_BACKEND_NONE:
		n = (size_t)snprintf(buf, len, "backend=none");
		break;
	case KVS_BACKEND_LATENCY:
		n = (size_t)snprintf(buf, len, "backend=latency");
		break;
	default:
		return false;
	}
	if (n < len)
		snprintf(buf + n, len - n, " layout_tag=%llu", (unsigned long long)b->layout_tag);
	return true;
}

/*
 * A rank's dumps go where the cache's other ranks' go: a block one rank
 * completes is written by another (store/dump.c), and an adopter writes what
 * the dead left.  So the first rank binds the cache to its backend and every
 * other must bring the same (both named when not).
 */
static int backend_bind(struct kvs_store *s)
{
	char mine[KVS_SHM_BACKEND_ID_MAX], theirs[KVS_SHM_BACKEND_ID_MAX + 96];
	int rc;

	if (!backend_identity(&s->cfg.backend, mine, sizeof(mine)))
		return 0;
	rc = kvs_core_backend_bind(s->cache, mine, theirs, sizeof(theirs));
	if (rc)
		kvs_log_error(&s->log, "store: the cache '%s' is bound to another backend: its ranks "
				       "dump to %s; this rank to %s (give every rank of the node the "
				       "same backend, or another unique_id)",
			      s->cfg.cache.unique_id, theirs, mine);
	return rc;
}

/* The cache is open: its geometry is the truth.  Reopen the backend if that is
 * not what it was opened with, then register the data plane with it. */
static int backend_adopt(struct kvs_store *s)
{
	struct kvs_cache *c = s->cache;
	struct kvs_backend_buffer bufs[KVS_MAX_SEGS];
	uint64_t was[KVS_MAX_TENSORS];
	uint32_t n = s->tensor_count;
	int rc;

	memcpy(was, s->tensor_bytes, sizeof(was));
	tensor_table(s, &c->cfg); /* adopted from the header by an attacher */
	if (!s->backend || s->cfg.backend.shard_bytes != s->slot_bytes ||
	    s->cfg.backend.shards_per_block != s->spb || n != s->tensor_count ||
	    memcmp(was, s->tensor_bytes, n * sizeof(was[0])) != 0) {
		rc = backend_open(s);
		if (rc)
			return rc;
	}
	if (c->cfg.device_id < 0)
		return 0; /* a watcher dumps nothing */
	rc = backend_bind(s);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < c->seg_count; i++)
		bufs[i] = (struct kvs_backend_buffer){ .base = c->segs[i].base, .len = c->segs[i].bytes };
	rc = kvs_backend_register_buffers(s->backend, bufs, c->seg_count);
	if (rc)
		kvs_log_warn(&s->log, "store: data segments not registered with the backend "
			     "(transfers are not zero-copy): %s", kvs_strerror(rc));
	return 0;
}

static int thread_start(struct kvs_store *s, pthread_t *thr, void *(*fn)(void *), const char *name)
{
	cpu_set_t set;
	bool pin = false;
	int rc = pthread_create(thr, NULL, fn, s);

	if (rc)
		return -rc;
	pthread_setname_np(*thr, name);
	CPU_ZERO(&set);
	for (uint32_t cpu = 0; cpu < KVS_STORE_MAX_CPUS && cpu < CPU_SETSIZE; cpu++) {
		if (s->cfg.cpu_affinity[cpu / 64] >> (cpu % 64) & 1) {
			CPU_SET(cpu, &set);
			pin = true;
		}
	}
	if (pin && (rc = pthread_setaffinity_np(*thr, sizeof(set), &set)))
		kvs_log_warn(&s->log, "store: %s not pinned to cpu_affinity_cores: %s", name,
			     kvs_strerror(-rc));
	return 0;
}

/*
 * The ERROR lines of this thread's last kvs_store_open (kvs_store_last_error):
 * what a caller without a log callback, or one that keeps only the last line,
 * would otherwise never see.  Collected only while the thread is opening (every
 * line of an open is logged by the opening thread: the store's own threads
 * start last).
 */
static __thread char open_errors[KVS_STORE_ERRORS_MAX];
static __thread bool opening;

static void note_error(int level, const char *msg)
{
	size_t n;

	if (!opening || level != KVS_LOG_ERROR)
		return;
	n = strlen(open_errors);
	if (n + 1 < sizeof(open_errors))
		snprintf(open_errors + n, sizeof(open_errors) - n, "%s%s", n ? "\n" : "", msg);
}

KVS_API const char *kvs_store_last_error(void)
{
	return open_errors;
}

static void gated_log(void *arg, int level, const char *msg)
{
	struct kvs_store_log_gate *g = arg;

	note_error(level, msg);
	if (!g->fn)
		return;
	pthread_rwlock_rdlock(&g->s->log_lock);
	if (!g->s->log_muted)
		g->fn(g->arg, level, msg);
	pthread_rwlock_unlock(&g->s->log_lock);
}

/* The caller's log while the config is resolved (no store to gate with yet). */
static void resolve_log(void *arg, int level, const char *msg)
{
	const struct kvs_log *user = arg;

	note_error(level, msg);
	if (user->fn)
		user->fn(user->arg, level, msg);
}

/* Put the callback *fn, *arg (none too: the open's errors are kept) behind
 * gate i. */
static void log_gate(struct kvs_store *s, unsigned i, kvs_log_fn *fn, void **arg)
{
	s->log_gates[i] = (struct kvs_store_log_gate){ .s = s, .fn = *fn, .arg = *arg };
	*fn = gated_log;
	*arg = &s->log_gates[i];
}

/* After the config is resolved: every callback it names goes through a gate. */
static void log_gates(struct kvs_store *s)
{
	log_gate(s, KVS_STORE_LOG_STORE, &s->log.fn, &s->log.arg);
	log_gate(s, KVS_STORE_LOG_CACHE, &s->cfg.cache.log, &s->cfg.cache.log_arg);
	log_gate(s, KVS_STORE_LOG_BACKEND, &s->cfg.backend.log, &s->cfg.backend.log_arg);
	if (s->cfg.backend.fault_inner == &s->fault_inner)
		log_gate(s, KVS_STORE_LOG_INNER, &s->fault_inner.log, &s->fault_inner.log_arg);
}

static int sync_init(struct kvs_store *s)
{
	pthread_condattr_t ca;
	int rc;

	s->wake_fd = -1;
	rc = pthread_rwlock_init(&s->log_lock, NULL);
	if (rc)
		return -rc;
	rc = pthread_mutex_init(&s->mu, NULL);
	if (rc) {
		pthread_rwlock_destroy(&s->log_lock);
		return -rc;
	}
	pthread_condattr_init(&ca);
	/* kvs_store_wait's deadline is CLOCK_MONOTONIC like every other */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->copier_cv, &ca);
	pthread_cond_init(&s->done_cv, &ca);
	pthread_cond_init(&s->reg_cv, &ca);
	pthread_cond_init(&s->flush_cv, &ca);
	pthread_condattr_destroy(&ca);
	return 0;
}

/*
 * The pins the dispatcher keeps at most: a share of the cache that every rank
 * of the node (local_rank_size of them) may hold at once with half the cache
 * left evictable, so tasks of any size complete on any cache; within half the
 * pin table.
 */
static uint32_t pin_budget(const struct kvs_store *s)
{
	uint64_t share = s->cache->slot_count / (2 * (uint64_t)s->lrs);
	uint64_t table = KVS_RANK_PINS / 2;

	if (share > table)
		share = table;
	return share ? (uint32_t)share : 1;
}

static int threads_start(struct kvs_store *s)
{
	int rc;

	s->ring_cap = s->cfg.running_queue_depth;
	s->ring = calloc(s->ring_cap, sizeof(*s->ring));
	s->visits = calloc(s->ring_cap, sizeof(*s->visits));
	s->copy_vec = calloc(2 * KVS_COPY_VEC_MAX, sizeof(*s->copy_vec));
	s->tasks = calloc(s->cfg.waiting_queue_depth, sizeof(*s->tasks));
	if (!s->ring || !s->visits || !s->copy_vec || !s->tasks)
		return -ENOMEM;
	s->wake_fd = kvs_fd_above_stdio(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
	if (s->wake_fd < 0)
		return -errno;
	s->pin_budget = pin_budget(s);
	/* Made here, so that a failure is said by the open (the copier's first
	 * turn sweeps the node's DIRTY slots, if an adoption left any). */
	rc = kvs_store_dumps_init(s, &s->dumps0);
	if (rc)
		kvs_log_error(&s->log, "store: %s (dumps fail)", kvs_strerror(rc));
	s->threads_alive = 2;
	rc = thread_start(s, &s->disp_thr, kvs_store_dispatcher, "kvs-dispatch");
	if (rc) {
		s->threads_alive = 0;
		kvs_store_dumps_fini(s, s->dumps0);
		s->dumps0 = NULL;
		return rc;
	}
	rc = thread_start(s, &s->copier_thr, kvs_store_copier, "kvs-copier");
	if (rc) {
		kvs_store_dumps_fini(s, s->dumps0);
		s->dumps0 = NULL;
		/* the dispatcher exits at once: stop, and no copier to wait for */
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		s->threads_alive = 1;
		pthread_mutex_unlock(&s->mu);
		kvs_store_wake_dispatcher(s);
		pthread_join(s->disp_thr, NULL);
		return rc;
	}
	s->threads = true;
	return 0;
}

/* A store that may create its cache needs its size in keys it knows (the
 * cache would name its own fields: "invalid slot_count = 0"). */
static int sizes_given(struct kvs_store *s)
{
	const struct kvs_cache_config *c = &s->cfg.cache;

	if (c->flags & KVS_CACHE_ATTACH)
		return 0; /* a watcher takes the creator's */
	if (c->slot_bytes == 0 || c->slot_count == 0) {
		kvs_log_error(&s->log, "store: no %s given: set %s (e.g. shard_size=2m,"
				       "cache_buffer_capacity_gb=64: GiB of shard slots; or "
				       "slot_bytes and slot_count in the C struct)",
			      c->slot_bytes == 0 ? "shard size" : "capacity",
			      c->slot_bytes == 0 ? "shard_size" : "cache_buffer_capacity_gb");
		return -EINVAL;
	}
	return 0;
}

/* A geometry in the store's keys (what the user typed, not the cache's fields). */
static void geometry_words(char *buf, size_t len, uint64_t shard, uint64_t slots, uint32_t spb,
			   uint32_t lrs)
{
	snprintf(buf, len, "shard_size=%llu, block_size=%llu (%u shards), "
			   "cache_buffer_capacity_gb=%.4g (%llu slots), local_rank_size=%u",
		 (unsigned long long)shard, (unsigned long long)(shard * spb), spb,
		 (double)(shard * slots) / (double)(UINT64_C(1) << 30), (unsigned long long)slots,
		 lrs);
}

/* The cache refused this rank's geometry (-KVS_ECONFIG, a field named): say it
 * in keys, both sides, and what to do. */
static void explain_mismatch(struct kvs_store *s)
{
	const struct kvs_cache_config *c = &s->cfg.cache;
	struct kvs_cache_info in;
	char have[192], want[192];

	if (kvs_cache_inspect(c->unique_id, &in) != 0 || in.state != KVS_CACHE_INFO_READY)
		return;
	geometry_words(have, sizeof(have), in.slot_bytes, in.slot_count, in.shards_per_block,
		       in.local_rank_size);
	geometry_words(want, sizeof(want), c->slot_bytes, c->slot_count, c->shards_per_block,
		       c->local_rank_size);
	kvs_log_error(&s->log, "store: the cache '%s' on this node was made with %s; this rank "
			       "asks for %s (or other tensor sizes): give every rank of the node "
			       "the same values, or another unique_id",
		      c->unique_id, have, want);
}

/* Open a store; check: only what kvs_store_config_check checks (no copy
 * engine, no cache: the store is closed again once the backend opened). */
static int store_open(const struct kvs_store_config *cfg, bool check, struct kvs_store **out)
{
	struct kvs_store *s;
	struct kvs_log log, user;
	int rc;

	if (out)
		*out = NULL;
	if (!cfg || !out)
		return -EINVAL;
	user = (struct kvs_log){ .fn = cfg->log, .arg = cfg->log_arg };
	log = (struct kvs_log){ .fn = resolve_log, .arg = &user };
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->log = user;
	s->opener = getpid();
	rc = kvs_store_config_resolve(cfg, &s->cfg, &s->fault_inner, &log);
	if (!rc)
		rc = sync_init(s);
	if (rc) {
		free(s);
		return rc;
	}
	log_gates(s);
	rc = sizes_given(s);
	if (rc)
		goto fail;
	/* What can fail without the data plane fails before it is built. */
	if (s->cfg.cache.device_id >= 0 && !check) {
		rc = copy_open(s);
		if (rc)
			goto fail;
	}
	tensor_table(s, &s->cfg.cache);
	if (s->slot_bytes && s->spb) {
		rc = backend_open(s);
		if (rc)
			goto fail;
	}
	if (check)
		goto fail; /* rc == 0: checked */
	rc = kvs_cache_open(&s->cfg.cache, &s->cache);
	if (rc == -KVS_ECONFIG)
		explain_mismatch(s);
	if ((rc == -ENOMEM || rc == -ENOSPC) && !(s->cfg.cache.flags & KVS_CACHE_ATTACH))
		kvs_log_error(&s->log, "store: lower cache_buffer_capacity_gb (%.4g GiB asked), or "
				       "free memory first",
			      (double)(s->cfg.cache.slot_count * s->slot_bytes) / (double)(1ull << 30));
	if (rc)
		goto fail;
	s->st = &s->cache->me->stats.store;
	if (s->copy) /* a rank: say in its entry whether it copies to a GPU (stat, ls) */
		kvs_core_rank_set_copy_engine(s->cache, (uint32_t)s->copy_kind);
	s->lrs = s->cache->local_rank_size;
	rc = backend_adopt(s);
	if (rc)
		goto fail;
	if (s->cfg.cache.device_id >= 0) {
		s->rank_slice = (uint32_t)s->cfg.cache.device_id % s->lrs;
		rc = kvs_store_register_start(s);
		if (!rc)
			rc = threads_start(s);
		if (rc)
			goto fail;
	}
	*out = s;
	return 0;
fail:
	kvs_store_close(s);
	return rc;
}

KVS_API int kvs_store_open(const struct kvs_store_config *cfg, struct kvs_store **out)
{
	int rc;

	open_errors[0] = '\0';
	opening = true;
	rc = store_open(cfg, false, out);
	opening = false;
	if (rc == 0)
		open_errors[0] = '\0';
	return rc;
}

KVS_API int kvs_store_config_check(const struct kvs_store_config *cfg)
{
	struct kvs_store_config probe;
	struct kvs_store *s;
	int rc;

	if (!cfg)
		return -EINVAL;
	probe = *cfg;
	if (probe.cache.slot_bytes == 0 && probe.block_bytes == 0) {
		/* no geometry yet (the caller derives it later): the backend is
		 * checked with one shard of a page per block */
		probe.cache.slot_bytes = KVS_STORE_CHECK_SHARD_BYTES;
		probe.tensor_bytes = 0;
		probe.cache.tensor_count = 0;
	}
	open_errors[0] = '\0';
	opening = true;
	rc = store_open(&probe, true, &s);
	opening = false;
	if (rc == 0)
		open_errors[0] = '\0';
	return rc;
}

/* Everything the threads are not using any more: the backend (the dispatcher
 * closed its own), the copy engine, the cache, the memory. */
static void teardown(struct kvs_store *s)
{
	if (s->threads)
		for (uint32_t i = 0; i < s->cfg.waiting_queue_depth; i++)
			if (s->tasks[i])
				kvs_store_task_unref(s->tasks[i]);
	if (s->copy) {
		/* Nothing copies any more: unregister (this process only). */
		if (s->cache)
			kvs_store_register_stop(s);
		kvs_copy_close(s->copy);
	}
	kvs_backend_close(s->backend);
	kvs_cache_close(s->cache);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	free(s->tasks);
	free(s->ring);
	free(s->visits);
	free(s->copy_vec);
	free(s->rel_later);
	pthread_cond_destroy(&s->flush_cv);
	pthread_cond_destroy(&s->reg_cv);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->copier_cv);
	pthread_mutex_destroy(&s->mu);
	pthread_rwlock_destroy(&s->log_lock);
	free(s);
}

/*
 * Orphans: stores whose close returned with a transfer in flight, in this
 * process.  At exit the process waits for them (orphans_at_exit) up to the
 * longest timeout_ns among them; what has not drained by then stays as a hung
 * transfer leaves it (the cache stale, for `kvshare clean` or the next opener).
 */
static pthread_mutex_t orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t orphans_cv; /* CLOCK_MONOTONIC; an orphan is torn down */
static pthread_once_t orphans_once = PTHREAD_ONCE_INIT;
static uint32_t orphans_live;      /* under orphans_mu */
static uint64_t orphans_wait_ns;   /* under orphans_mu: their longest timeout_ns */
static pid_t orphans_pid;          /* the process they are in (not a fork()ed child) */

static void orphans_at_exit(void)
{
	struct timespec ts;

	pthread_mutex_lock(&orphans_mu);
	ts = kvs_ns_to_timespec(kvs_deadline_after(orphans_wait_ns));
	while (getpid() == orphans_pid && orphans_live &&
	       pthread_cond_timedwait(&orphans_cv, &orphans_mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&orphans_mu);
}

static void orphans_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&orphans_cv, &ca);
	pthread_condattr_destroy(&ca);
	atexit(orphans_at_exit);
}

static void orphan_add(const struct kvs_store *s)
{
	pthread_once(&orphans_once, orphans_init);
	pthread_mutex_lock(&orphans_mu);
	orphans_live++;
	orphans_pid = getpid();
	if (s->cfg.timeout_ns > orphans_wait_ns)
		orphans_wait_ns = s->cfg.timeout_ns;
	pthread_mutex_unlock(&orphans_mu);
}

static void orphan_done(void)
{
	pthread_mutex_lock(&orphans_mu);
	orphans_live--;
	pthread_cond_broadcast(&orphans_cv);
	pthread_mutex_unlock(&orphans_mu);
}

void kvs_store_thread_exit(struct kvs_store *s)
{
	bool last;

	pthread_mutex_lock(&s->mu);
	last = --s->threads_alive == 0 && s->orphaned;
	pthread_cond_broadcast(&s->done_cv);
	pthread_mutex_unlock(&s->mu);
	if (last) {
		kvs_log_warn(&s->log, "store: the transfers that outlived close have drained; "
				      "its resources are released now");
		teardown(s);
		orphan_done();
	}
}

KVS_API int kvs_store_flush(struct kvs_store *s, uint64_t timeout_ns, uint64_t *pending)
{
	struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(timeout_ns));
	int rc = 0;

	if (pending)
		*pending = 0;
	if (!s)
		return -EINVAL;
	if (!s->threads || getpid() != s->opener)
		return 0; /* a watcher, a fork()ed child's copy: no dump of its own */
	pthread_mutex_lock(&s->mu);
	s->flushing++;
	s->flush_gen++;
	pthread_mutex_unlock(&s->mu);
	kvs_store_wake_copier(s); /* writes without graces, looks at every block */
	pthread_mutex_lock(&s->mu);
	while (s->unflushed)
		if (pthread_cond_timedwait(&s->flush_cv, &s->mu, &ts) == ETIMEDOUT)
			break;
	if (s->flush_err) {
		rc = s->flush_err; /* reported once */
		s->flush_err = 0;
	} else if (s->unflushed) {
		rc = -ETIMEDOUT;
	}
	if (pending)
		*pending = s->unflushed;
	s->flushing--;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* Latest deadline of the tasks still running (under mu), or now. */
static uint64_t latest_deadline(struct kvs_store *s)
{
	uint64_t latest = kvs_now_ns();

	for (uint32_t i = 0; i < s->cfg.waiting_queue_depth; i++)
		if (s->tasks[i] && !s->tasks[i]->done && s->tasks[i]->deadline_ns > latest)
			latest = s->tasks[i]->deadline_ns;
	return latest;
}

KVS_API void kvs_store_close(struct kvs_store *s)
{
	struct timespec ts;
	pthread_t disp, copier;
	bool orphan = false;

	if (!s)
		return;
	if (getpid() != s->opener) {
		/* A fork()ed child's copy: the threads, the backend's rings and pools
		 * and the copy engine are the parent's; the cache handles the child's
		 * copy of itself. */
		kvs_cache_close(s->cache);
		free(s->tasks);
		free(s->ring);
		free(s->visits);
		free(s->copy_vec);
		free(s);
		return;
	}
	/* The registration thread stops before its next chunk. */
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_mutex_unlock(&s->mu);
	if (s->threads) {
		/* Tasks end by their deadlines; transfers then get timeout_ns more. */
		kvs_store_wake_dispatcher(s);
		kvs_store_wake_copier(s);
		pthread_mutex_lock(&s->mu);
		ts = kvs_ns_to_timespec(latest_deadline(s) + s->cfg.timeout_ns);
		while (s->threads_alive &&
		       pthread_cond_timedwait(&s->done_cv, &s->mu, &ts) != ETIMEDOUT)
			;
		if (s->threads_alive) {
			/* the registration thread ends by itself (one chunk at most) */
			pthread_mutex_unlock(&s->mu);
			kvs_store_register_join(s);
			pthread_mutex_lock(&s->mu);
		}
		disp = s->disp_thr;
		copier = s->copier_thr;
		if (s->unflushed)
			kvs_log_warn(&s->log, "store: close: %llu blocks this rank's cached dumps "
					      "acknowledged are not in the backend yet: they stay in the "
					      "cache, which is kept for the node's other ranks or the next "
					      "open to write them (kvs_store_flush before close waits for "
					      "them)", (unsigned long long)s->unflushed);
		if (s->threads_alive) {
			kvs_log_error(&s->log, "store: close: a backend transfer is still in flight "
					       "after every task's deadline and timeout_ms more (a hung "
					       "mount?); it drains in the background, its slots pinned "
					       "until it ends; nothing more is logged");
			/* the caller may unload its log callback once close returns */
			pthread_rwlock_wrlock(&s->log_lock);
			s->log_muted = true;
			pthread_rwlock_unlock(&s->log_lock);
			/* counted before the unlock of mu, from which the last
			 * thread out may free s (and count it out) */
			orphan_add(s);
			s->orphaned = orphan = true;
		}
		pthread_mutex_unlock(&s->mu);
		if (orphan) {
			pthread_detach(disp);
			pthread_detach(copier);
			return;
		}
		pthread_join(disp, NULL);
		pthread_join(copier, NULL);
	}
	teardown(s);
}
