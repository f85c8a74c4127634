/*
 * store/register.c — the data plane registered with the copy engine in
 * the background, chunk by chunk, while the store already serves.
 *
 * Registering host memory for DMA (cudaHostRegister) costs about 0.1 s per GB,
 * holds a host-wide driver lock, and one call of 512 GiB or more fails outright:
 * a rank that registered its whole tier at open would not serve for minutes on a
 * large node.  So kvs_store_open only plans the registration and starts this
 * thread; it registers each data segment in chunks of register_chunk_size
 * (rounded up to the segment's page size, and down to a multiple of the slot
 * size when that is possible, so no slot straddles two registrations), the
 * segment of the rank's own NUMA node first (the one its CLOCK allocates from),
 * each segment from its start.  What is registered is therefore a prefix of
 * each segment, published in reg_end[] after the engine's call returned.
 *
 * The copier asks kvs_store_slot_registered() for every shard it copies: a slot
 * inside the prefix is copied directly; one beyond it goes through the staging
 * buffer (store/copy.c), a small pinned bounce buffer, so every load and dump is
 * served from the first moment and switches to direct DMA as soon as its chunk
 * is in.  kvs_store_ready() sleeps on reg_cv until the thread is done.
 *
 * Progress is in the rank's store stats (shared memory, so `kvshare stat` shows
 * it): register_total_bytes (added once here), registered_bytes and register_ns
 * per chunk, staged_shards by the copier.  A failed chunk (RLIMIT_MEMLOCK, the
 * driver) stops the registration with its error logged and kept for
 * kvs_store_ready; the unregistered rest is served staged.
 *
 * Closing: the thread checks the store's stop flag before each chunk, so close
 * waits for at most one chunk in flight (a driver call cannot be interrupted),
 * then unregisters every chunk, in this process only: registration is
 * per-process state of the driver, nothing of it is in shared memory, so no
 * other rank waits for it, and a rank that dies mid-registration leaves the
 * kernel to unpin its pages and nothing for its peers to clean.
 */
#include <errno.h>
#include <string.h>

#include "common/clock.h"
#include "store/store.h"

int (*kvs_store_test_register_hook)(struct kvs_store *s, uint32_t seg, uint64_t off,
				    uint64_t len);

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* The chunk size of a segment of page_bytes pages: the configured size rounded
 * up to whole pages and, when a common multiple of the page and slot sizes fits
 * in it, down to one (slots then never straddle a chunk boundary). */
static uint64_t chunk_bytes(const struct kvs_store *s, uint64_t page_bytes)
{
	uint64_t want = s->cfg.register_chunk_bytes;
	uint64_t page = page_bytes ? page_bytes : 1;
	uint64_t unit = page / gcd64(page, s->slot_bytes);

	want = (want + page - 1) / page * page;
	if (unit <= want / s->slot_bytes) {
		unit *= s->slot_bytes; /* lcm(page, slot_bytes) <= want */
		want = want / unit * unit;
	}
	return want;
}

/* Is the store closing (s->stop, read under mu)? */
static bool reg_stopping(struct kvs_store *s)
{
	bool stop;

	pthread_mutex_lock(&s->mu);
	stop = s->stop;
	pthread_mutex_unlock(&s->mu);
	return stop;
}

static void *registrar(void *arg)
{
	struct kvs_store *s = arg;
	struct kvs_cache *c = s->cache;
	bool complete = true;
	int err = 0;

	for (uint32_t k = 0; k < c->seg_count && !err && complete; k++) {
		uint32_t i = s->reg_order[k];
		unsigned char *base = c->segs[i].base;
		uint64_t bytes = c->segs[i].bytes, len;

		for (uint64_t off = 0; off < bytes; off += len) {
			uint64_t t0;

			len = bytes - off < s->reg_chunk[i] ? bytes - off : s->reg_chunk[i];
			if (reg_stopping(s)) {
				complete = false;
				break;
			}
			err = kvs_store_test_register_hook ? kvs_store_test_register_hook(s, i, off, len)
							   : 0;
			t0 = kvs_now_ns();
			if (!err)
				err = kvs_copy_register(s->copy, base + off, len);
			if (err) {
				kvs_log_error(&s->log, "store: registering data segment %u bytes "
					      "[%llu, +%llu) with the %s copy engine: %s; the rest "
					      "of the tier is served through the staging buffer",
					      i, (unsigned long long)off, (unsigned long long)len,
					      kvs_copy_name(s->copy), kvs_strerror(err));
				break;
			}
			KVS_STORE_COUNT(s, register_ns, kvs_now_ns() - t0);
			KVS_STORE_COUNT(s, registered_bytes, len);
			/* release: the engine's registration happens before a copier that
			 * sees this prefix copies from it directly (its acquire) */
			atomic_store_explicit(&s->reg_end[i], off + len, memory_order_release);
		}
	}
	if (!err && complete) {
		/* release: after every reg_end store (the copier's fast path) */
		atomic_store_explicit(&s->reg_ready, 1, memory_order_release);
		kvs_log_info(&s->log, "store: data plane registered with the %s copy engine",
			     kvs_copy_name(s->copy));
	}
	pthread_mutex_lock(&s->mu);
	s->reg_done = true;
	s->reg_err = err;
	pthread_cond_broadcast(&s->reg_cv);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int kvs_store_register_start(struct kvs_store *s)
{
	struct kvs_cache *c = s->cache;
	uint64_t total = 0;
	uint32_t n = 0;
	int rc;

	/* The rank's own node's segment first (where its CLOCK allocates), then the
	 * others in order. */
	s->reg_order[n++] = c->home_seg;
	for (uint32_t i = 0; i < c->seg_count; i++)
		if (i != c->home_seg)
			s->reg_order[n++] = i;
	for (uint32_t i = 0; i < c->seg_count; i++) {
		s->reg_chunk[i] = chunk_bytes(s, c->segs[i].page_bytes);
		total += c->segs[i].bytes;
	}
	KVS_STORE_COUNT(s, register_total_bytes, total);
	s->staging_bytes = s->slot_bytes < KVS_STORE_STAGING_MAX ? s->slot_bytes
								: KVS_STORE_STAGING_MAX;
	rc = kvs_copy_host_alloc(s->copy, s->staging_bytes, &s->staging);
	if (rc) {
		kvs_log_error(&s->log, "store: staging buffer of %llu bytes (%s engine): %s",
			      (unsigned long long)s->staging_bytes, kvs_copy_name(s->copy),
			      kvs_strerror(rc));
		return rc;
	}
	rc = pthread_create(&s->reg_thr, NULL, registrar, s);
	if (rc)
		return -rc;
	pthread_setname_np(s->reg_thr, "kvs-register");
	s->reg_started = true;
	return 0;
}

void kvs_store_register_join(struct kvs_store *s)
{
	if (s->reg_started) {
		pthread_join(s->reg_thr, NULL);
		s->reg_started = false;
	}
}

void kvs_store_register_stop(struct kvs_store *s)
{
	struct kvs_cache *c = s->cache;

	kvs_store_register_join(s);
	for (uint32_t i = 0; s->copy && i < c->seg_count; i++) {
		unsigned char *base = c->segs[i].base;
		/* acquire: pairs with the registrar's release (it has exited anyway) */
		uint64_t end = atomic_load_explicit(&s->reg_end[i], memory_order_acquire);

		for (uint64_t off = 0; off < end; off += s->reg_chunk[i]) {
			int rc = kvs_copy_unregister(s->copy, base + off);

			if (rc)
				kvs_log_warn(&s->log, "store: unregistering data segment %u at %llu: %s",
					     i, (unsigned long long)off, kvs_strerror(rc));
		}
		atomic_store_explicit(&s->reg_end[i], 0, memory_order_relaxed); /* thread gone */
	}
	kvs_copy_host_free(s->copy, s->staging);
	s->staging = NULL;
}

bool kvs_store_slot_registered(struct kvs_store *s, const struct kvs_store_sh *sh)
{
	struct kvs_cache *c = s->cache;
	uint64_t idx = sh->slot.index;

	/* acquire: pairs with the registrar's release of reg_ready */
	if (atomic_load_explicit(&s->reg_ready, memory_order_acquire))
		return true;
	for (uint32_t i = 0; i < c->seg_count; i++) {
		const struct kvs_core_seg *g = &c->geo[i];

		if (idx < g->first_slot || idx - g->first_slot >= g->slot_count)
			continue;
		/* acquire: pairs with the registrar's release of this prefix */
		return (idx - g->first_slot + 1) * s->slot_bytes <=
		       atomic_load_explicit(&s->reg_end[i], memory_order_acquire);
	}
	return false;
}

KVS_API int kvs_store_ready(struct kvs_store *s, uint64_t timeout_ns)
{
	struct timespec ts = kvs_ns_to_timespec(kvs_deadline_after(timeout_ns));
	int rc;

	if (!s)
		return -EINVAL;
	if (!s->copy)
		return -EOPNOTSUPP;
	pthread_mutex_lock(&s->mu);
	while (!s->reg_done && timeout_ns &&
	       pthread_cond_timedwait(&s->reg_cv, &s->mu, &ts) != ETIMEDOUT)
		;
	/* relaxed: reg_ready was stored before reg_done, which mu orders */
	rc = s->reg_err ? s->reg_err
			: (int)atomic_load_explicit(&s->reg_ready, memory_order_relaxed);
	pthread_mutex_unlock(&s->mu);
	return rc;
}
