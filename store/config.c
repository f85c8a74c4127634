/*
 * store/config.c — what a store is asked to be: its defaults, and the
 * resolution of the sizes the keys give indirectly (capacity, block and tensor
 * sizes) into the cache and backend configs that their own open calls check.
 * The key=value parser that fills a config is store/parse.c.
 *
 * Resolution (kvs_store_config_resolve) turns a config into the one the store
 * opens with.  It checks the store's own fields and what it derives or splits
 * (sizes, the private unique_id, the roots string); the other cache and backend
 * fields are validated, each by name, by kvs_cache_open and kvs_backend_open,
 * and are not checked twice here.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "store/store.h"

KVS_API void kvs_store_config_init(struct kvs_store_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	kvs_cache_config_init(&cfg->cache);
	kvs_backend_config_init(&cfg->backend);
	cfg->timeout_ns = KVS_STORE_TIMEOUT_NS_DEFAULT;
	cfg->copy_engine = KVS_COPY_ENGINE_AUTO;
	cfg->dispatch_order = KVS_DISPATCH_ROTATED;
	cfg->dump_wait = KVS_DUMP_WAIT_DURABLE;
	cfg->prealloc = 1;
	cfg->share_buffer = 1;
	cfg->waiting_queue_depth = KVS_STORE_WAITING_QD_DEFAULT;
	cfg->running_queue_depth = KVS_STORE_RUNNING_QD_DEFAULT;
	cfg->cache_stream_number = 1;
	cfg->register_chunk_bytes = KVS_STORE_REGISTER_CHUNK_DEFAULT;
}

/* ------------------------------------------------------------------------ */
/* Resolution                                                                */

#define RBAD(key, fmt, ...)                                                              \
	do {                                                                             \
		kvs_log_error(log, "store config: invalid " key " = " fmt, __VA_ARGS__); \
		return -EINVAL;                                                          \
	} while (0)

/* The store's own fields (the cache's and backend's are their open calls'). */
static int check_store_fields(const struct kvs_store_config *c, const struct kvs_log *log)
{
	for (size_t i = 0; i < sizeof(c->reserved) / sizeof(c->reserved[0]); i++)
		if (c->reserved[i])
			RBAD("reserved", "%s (must be zero)", "non-zero");
	if (c->timeout_ns == 0 || c->timeout_ns > KVS_STORE_TIMEOUT_MS_MAX * KVS_STORE_NS_PER_MS)
		RBAD("timeout_ms", "%llu ns (want 1 ns .. 24 h)", (unsigned long long)c->timeout_ns);
	if (c->copy_delay_ns > KVS_STORE_COPY_DELAY_US_MAX * KVS_STORE_NS_PER_US)
		RBAD("copy_delay_us", "%llu ns (want <= 1 s)", (unsigned long long)c->copy_delay_ns);
	if (c->copy_engine > KVS_COPY_ENGINE_CUDA)
		RBAD("copy_engine", "%u (want auto|host|cuda)", c->copy_engine);
	if (c->register_chunk_bytes < KVS_STORE_REGISTER_CHUNK_MIN ||
	    c->register_chunk_bytes > KVS_STORE_REGISTER_CHUNK_MAX)
		RBAD("register_chunk_size", "%llu bytes (want 1m .. 32g)",
		     (unsigned long long)c->register_chunk_bytes);
	if (c->register_delay_ns > KVS_COPY_REGISTER_DELAY_MAX_NS)
		RBAD("register_delay_us", "%llu ns (want <= 1 s)",
		     (unsigned long long)c->register_delay_ns);
	if (c->register_delay_ns && c->copy_engine != KVS_COPY_ENGINE_HOST)
		RBAD("register_delay_us", "%llu us (the host copy engine's test mode: set "
		     "copy_engine=host)", (unsigned long long)(c->register_delay_ns / KVS_STORE_NS_PER_US));
	if (c->copy_land_delay_ns > KVS_COPY_LAND_DELAY_MAX_NS)
		RBAD("copy_land_delay_us", "%llu ns (want <= 10 s)",
		     (unsigned long long)c->copy_land_delay_ns);
	if (c->copy_land_delay_ns && c->copy_engine != KVS_COPY_ENGINE_HOST)
		RBAD("copy_land_delay_us", "%llu us (the host copy engine's test mode: set "
		     "copy_engine=host)", (unsigned long long)(c->copy_land_delay_ns / KVS_STORE_NS_PER_US));
	if (c->dispatch_order > KVS_DISPATCH_NATURAL)
		RBAD("dispatch_order", "%u (want rotated|natural)", c->dispatch_order);
	if (c->dump_wait > KVS_DUMP_WAIT_CACHED)
		RBAD("dump_wait", "%u (want durable|cached)", c->dump_wait);
	if (c->prealloc > 1)
		RBAD("prealloc", "%u (want 0 or 1)", c->prealloc);
	if (c->share_buffer > 1)
		RBAD("share_buffer_enable", "%u (want 0 or 1)", c->share_buffer);
	if (c->waiting_queue_depth == 0 || c->waiting_queue_depth > KVS_STORE_WAITING_QD_MAX)
		RBAD("waiting_queue_depth", "%u (want 1..%u)", c->waiting_queue_depth,
		     KVS_STORE_WAITING_QD_MAX);
	if (c->running_queue_depth == 0 || c->running_queue_depth > KVS_STORE_RUNNING_QD_MAX)
		RBAD("running_queue_depth", "%u (want 1..%u)", c->running_queue_depth,
		     KVS_STORE_RUNNING_QD_MAX);
	if (c->cache_stream_number == 0 || c->cache_stream_number > KVS_STORE_STREAMS_MAX)
		RBAD("cache_stream_number", "%u (want 1..%u)", c->cache_stream_number,
		     KVS_STORE_STREAMS_MAX);
	if (memchr(c->backend_roots, '\0', sizeof(c->backend_roots)) == NULL)
		RBAD("backend_roots", "%s", "(not NUL-terminated)");
	return 0;
}

/* slot_bytes, tensor split, slot_count and shards_per_block from the sizes. */
static int resolve_geometry(struct kvs_store_config *out, const struct kvs_log *log)
{
	struct kvs_cache_config *c = &out->cache;
	uint64_t sum = 0;

	if (c->tensor_count > KVS_MAX_TENSORS)
		RBAD("tensor_size_list", "%u entries (want <= %d)", c->tensor_count, KVS_MAX_TENSORS);
	for (uint32_t i = 0; i < c->tensor_count; i++) {
		if (c->tensor_bytes[i] == 0)
			RBAD("tensor_size_list", "entry %u is 0 (want > 0)", i + 1);
		if (__builtin_add_overflow(sum, c->tensor_bytes[i], &sum))
			RBAD("tensor_size_list", "%u entries (their sum overflows 64 bits)",
			     c->tensor_count);
	}
	if (c->tensor_count) {
		if (c->slot_bytes == 0)
			c->slot_bytes = sum;
		else if (sum != c->slot_bytes)
			RBAD("tensor_size_list", "%llu bytes in all (shard_size is %llu)",
			     (unsigned long long)sum, (unsigned long long)c->slot_bytes);
	}

	if (out->tensor_bytes) {
		uint64_t n;

		if (c->slot_bytes == 0)
			RBAD("tensor_size", "%llu (shard_size is not set)",
			     (unsigned long long)out->tensor_bytes);
		if (c->slot_bytes % out->tensor_bytes)
			RBAD("tensor_size", "%llu (does not divide shard_size %llu)",
			     (unsigned long long)out->tensor_bytes, (unsigned long long)c->slot_bytes);
		n = c->slot_bytes / out->tensor_bytes;
		if (n > KVS_MAX_TENSORS)
			RBAD("tensor_size", "%llu (%llu tensors per shard, want <= %d)",
			     (unsigned long long)out->tensor_bytes, (unsigned long long)n,
			     KVS_MAX_TENSORS);
		if (c->tensor_count) {
			/* Set both ways (tensor_size_list too): they must agree. */
			bool same = c->tensor_count == n;

			for (uint32_t i = 0; i < c->tensor_count && same; i++)
				same = c->tensor_bytes[i] == out->tensor_bytes;
			if (!same)
				RBAD("tensor_size", "%llu (tensor_size_list differs)",
				     (unsigned long long)out->tensor_bytes);
		} else {
			c->tensor_count = (uint32_t)n;
			for (uint32_t i = 0; i < n; i++)
				c->tensor_bytes[i] = out->tensor_bytes;
		}
	}

	if ((out->capacity_bytes || out->block_bytes) && c->slot_bytes == 0)
		RBAD("shard_size", "0 (%s needs it)",
		     out->capacity_bytes ? "cache_buffer_capacity_gb" : "block_size");
	if (out->capacity_bytes) {
		uint64_t slots = out->capacity_bytes / c->slot_bytes;

		if (slots == 0)
			RBAD("cache_buffer_capacity_gb", "%llu bytes (less than one shard of %llu)",
			     (unsigned long long)out->capacity_bytes,
			     (unsigned long long)c->slot_bytes);
		if (c->slot_count && c->slot_count != slots)
			RBAD("cache_buffer_capacity_gb", "%llu bytes (%llu slots, slot_count is %llu)",
			     (unsigned long long)out->capacity_bytes, (unsigned long long)slots,
			     (unsigned long long)c->slot_count);
		c->slot_count = slots;
	}
	if (out->block_bytes) {
		uint64_t shards = out->block_bytes / c->slot_bytes;

		if (out->block_bytes % c->slot_bytes)
			RBAD("block_size", "%llu (not a multiple of shard_size %llu)",
			     (unsigned long long)out->block_bytes, (unsigned long long)c->slot_bytes);
		if (shards > KVS_STORE_SHARDS_MAX)
			RBAD("block_size", "%llu (%llu shards per block, want <= %u)",
			     (unsigned long long)out->block_bytes, (unsigned long long)shards,
			     KVS_STORE_SHARDS_MAX);
		/* 1 is also the default, so only another value counts as set. */
		if (c->shards_per_block != 1 && c->shards_per_block != shards)
			RBAD("block_size", "%llu (%llu shards per block, shards_per_block is %u)",
			     (unsigned long long)out->block_bytes, (unsigned long long)shards,
			     c->shards_per_block);
		c->shards_per_block = (uint32_t)shards;
	}
	return 0;
}

/* share_buffer_enable=0: a cache of this rank only, "<unique_id>.rank<device_id>". */
static int resolve_private(struct kvs_store_config *out, const struct kvs_log *log)
{
	struct kvs_cache_config *c = &out->cache;
	char suffix[24];
	size_t n;

	if (memchr(c->unique_id, '\0', sizeof(c->unique_id)) == NULL ||
	    !kvs_core_unique_id_valid(c->unique_id))
		RBAD("unique_id", "'%.72s' (want [A-Za-z0-9_.-]{1,64})", c->unique_id);
	snprintf(suffix, sizeof(suffix), ".rank%d", (int)c->device_id);
	n = strlen(c->unique_id);
	if (n + strlen(suffix) > KVS_UNIQUE_ID_MAX)
		RBAD("unique_id", "'%s' (share_buffer_enable=0 appends '%s': over %d characters)",
		     c->unique_id, suffix, KVS_UNIQUE_ID_MAX);
	memcpy(c->unique_id + n, suffix, strlen(suffix) + 1);
	c->local_rank_size = 1;
	return 0;
}

/* backend_roots "/a:/b" into backend.roots[], pointing into out->backend_roots
 * (split in place: each ':' becomes a NUL). */
static int resolve_roots(struct kvs_store_config *out, const struct kvs_log *log)
{
	char *s = out->backend_roots;
	uint32_t n = 0;

	if (out->backend.nroots || out->backend.kind != KVS_BACKEND_POSIX || !s[0])
		return 0;
	/* Check first, split after: a refused string is logged whole. */
	for (const char *e = s;; e++) {
		if (++n > KVS_BACKEND_MAX_ROOTS)
			RBAD("backend_roots", "'%s' (more than %d roots)", s, KVS_BACKEND_MAX_ROOTS);
		if (*e != '/')
			RBAD("backend_roots", "'%s' (root %u is not an absolute path)", s, n);
		e += strcspn(e, ":");
		if (!*e)
			break;
	}
	n = 0;
	for (char *e = s;; e++) {
		out->backend.roots[n++] = e;
		e += strcspn(e, ":");
		if (!*e)
			break;
		*e = '\0';
	}
	out->backend.nroots = n;
	return 0;
}

/* Any fault_* value (a rate, a delay, a seed other than the default): the
 * configured backend becomes the inner one of a fault backend (the fault_*
 * fields stay with the wrapper). */
static int resolve_fault(struct kvs_store_config *out, struct kvs_backend_config *inner,
			 const struct kvs_log *log)
{
	struct kvs_backend_config *b = &out->backend;

	if (b->kind == KVS_BACKEND_FAULT) {
		/* The caller built the wrapper: give a copy of its inner config the
		 * cache's shard geometry too. */
		if (!b->fault_inner || !inner)
			return 0; /* kvs_backend_open says what is missing */
		*inner = *b->fault_inner;
	} else if (b->fault_error_ppm || b->fault_short_ppm || b->fault_delay_ns ||
		   b->fault_seed != 1 /* kvs_backend_config_init's */) {
		if (!inner) {
			kvs_log_error(log, "store config: fault_* given but no room for the "
					   "fault backend's inner config");
			return -EINVAL;
		}
		*inner = *b;
		inner->fault_error_ppm = 0;
		inner->fault_short_ppm = 0;
		inner->fault_delay_ns = 0;
		inner->fault_seed = 0;
		inner->fault_inner = NULL;
		memset(inner->reserved, 0, sizeof(inner->reserved));
		b->kind = KVS_BACKEND_FAULT;
	} else {
		return 0;
	}
	inner->shard_bytes = b->shard_bytes;
	inner->shards_per_block = b->shards_per_block;
	b->fault_inner = inner;
	return 0;
}

int kvs_store_config_resolve(const struct kvs_store_config *cfg, struct kvs_store_config *out,
			     struct kvs_backend_config *fault_inner, const struct kvs_log *log)
{
	struct kvs_log own;
	int rc;

	if (!cfg || !out)
		return -EINVAL;
	if (!log) {
		own.fn = cfg->log;
		own.arg = cfg->log_arg;
		log = &own;
	}
	if (out != cfg)
		*out = *cfg;
	rc = check_store_fields(out, log);
	if (rc == 0)
		rc = resolve_geometry(out, log);
	if (rc == 0 && !out->share_buffer)
		rc = resolve_private(out, log);
	if (rc == 0)
		rc = resolve_roots(out, log);
	if (rc)
		return rc;
	if (!out->cache.log) {
		out->cache.log = out->log;
		out->cache.log_arg = out->log_arg;
	}
	if (!out->backend.log) {
		out->backend.log = out->log;
		out->backend.log_arg = out->log_arg;
	}
	out->backend.shard_bytes = out->cache.slot_bytes;
	out->backend.shards_per_block = out->cache.shards_per_block;
	return resolve_fault(out, fault_inner, log);
}
