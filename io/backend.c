/*
 * io/backend.c — the backend registry: config defaults and validation, and the
 * exported kvs_backend_* calls that dispatch to an ops table.
 *
 * Built-in backends (posix, none, latency, fault, redis) are ops tables like a user's,
 * so one code path drives them all.  This file validates everything once —
 * every config field with a log line naming it (the tensor table against
 * shard_bytes too), every transfer's shard, range
 * and flags — so the backends themselves only see well-formed requests.  A
 * user's table is checked for its ABI and size; optional members beyond `close`
 * are read only when the provider's `size` covers them.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "io/internal.h"
#include "io/io.h"

struct kvs_backend {
	const struct kvs_backend_ops *ops;
	void *state;
	uint32_t kind;
	uint32_t shards_per_block;
	uint64_t shard_bytes;
	bool has_register; /* ops->register_buffers is present and covered by ops->size */
	bool has_info;
	bool has_lookup_batch;
	bool has_wait_fd;
	bool has_hint_read;
	struct kvs_log log;
};

/* The config has no implicit padding: every byte is a named field, so zeroed
 * reserved words are the only way it grows (kvshare.h).  The sum of the member
 * sizes is the struct's size. */
#define CFG_SIZE(member) sizeof(((struct kvs_backend_config *)0)->member)
_Static_assert(CFG_SIZE(kind) + CFG_SIZE(flags) + CFG_SIZE(io_engine) +
		       CFG_SIZE(shards_per_block) + CFG_SIZE(shard_bytes) +
		       CFG_SIZE(queue_depth) + CFG_SIZE(pool_threads) + CFG_SIZE(nroots) +
		       CFG_SIZE(latency_queue_depth) + CFG_SIZE(roots) + CFG_SIZE(latency_ns) +
		       CFG_SIZE(fault_error_ppm) + CFG_SIZE(fault_short_ppm) +
		       CFG_SIZE(fault_delay_ns) + CFG_SIZE(fault_seed) + CFG_SIZE(fault_inner) +
		       CFG_SIZE(user_ops) + CFG_SIZE(user_arg) + CFG_SIZE(log) +
		       CFG_SIZE(log_arg) + CFG_SIZE(redis) + CFG_SIZE(tensor_count) +
		       CFG_SIZE(reserved32) + CFG_SIZE(tensor_bytes) + CFG_SIZE(layout_tag) +
		       CFG_SIZE(reserved) ==
	       sizeof(struct kvs_backend_config),
	       "struct kvs_backend_config has implicit padding");
#define RCFG_SIZE(member) sizeof(((struct kvs_backend_redis_config *)0)->member)
_Static_assert(RCFG_SIZE(endpoints) + RCFG_SIZE(user) + RCFG_SIZE(password) +
		       RCFG_SIZE(password_file) + RCFG_SIZE(key_prefix) + RCFG_SIZE(db) +
		       RCFG_SIZE(connections) + RCFG_SIZE(connect_timeout_ns) +
		       RCFG_SIZE(command_timeout_ns) + RCFG_SIZE(ttl_ms) +
		       RCFG_SIZE(start_degraded) + RCFG_SIZE(cluster) + RCFG_SIZE(wait_replicas) +
		       RCFG_SIZE(reserved) ==
	       sizeof(struct kvs_backend_redis_config),
	       "struct kvs_backend_redis_config has implicit padding");

#define OPS_HAS(ops, member)                                                             \
	((ops)->size >= offsetof(struct kvs_backend_ops, member) + sizeof((ops)->member) && \
	 (ops)->member != NULL)

const char *kvs_io_kind_name(uint32_t kind)
{
	static const char *const names[] = { "posix", "none", "latency", "fault", "user", "redis" };

	return kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "?";
}

const char *kvs_io_engine_name(uint32_t engine)
{
	static const char *const names[] = { "auto", "uring", "pool" };

	return engine < sizeof(names) / sizeof(names[0]) ? names[engine] : "?";
}

void kvs_io_block_hex(const struct kvs_block_id *block, char hex[33])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < 16; i++) {
		hex[2 * i] = digits[block->bytes[i] >> 4];
		hex[2 * i + 1] = digits[block->bytes[i] & 15];
	}
	hex[32] = '\0';
}

KVS_API void kvs_backend_config_init(struct kvs_backend_config *cfg)
{
	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->kind = KVS_BACKEND_POSIX;
	cfg->io_engine = KVS_IO_ENGINE_AUTO;
	cfg->shard_bytes = 1u << 20;
	cfg->shards_per_block = 1;
	cfg->queue_depth = 128;
	cfg->pool_threads = 4;
	cfg->latency_ns = 100000;
	cfg->fault_seed = 1;
	memcpy(cfg->redis.key_prefix, "kvshare:", sizeof("kvshare:"));
	cfg->redis.connections = 2;
	cfg->redis.connect_timeout_ns = 2 * UINT64_C(1000000000);
	cfg->redis.command_timeout_ns = 10 * UINT64_C(1000000000);
}

#define BAD(log, ...)                                                                    \
	do {                                                                             \
		kvs_log_error(log, __VA_ARGS__);                                         \
		return -EINVAL;                                                          \
	} while (0)

static int validate_ops(const struct kvs_backend_ops *ops, const struct kvs_log *log)
{
	if (!ops)
		BAD(log, "backend: user_ops is NULL for kind=user");
	if (ops->abi != KVS_BACKEND_OPS_ABI)
		BAD(log, "backend: user_ops.abi %u, this library speaks %u", ops->abi,
		    KVS_BACKEND_OPS_ABI);
	if (ops->size < offsetof(struct kvs_backend_ops, close) + sizeof(ops->close))
		BAD(log, "backend: user_ops.size %u is too small", ops->size);
	if (!ops->open || !ops->lookup || !ops->submit_read || !ops->submit_write ||
	    !ops->poll || !ops->close)
		BAD(log, "backend: user_ops lacks a required function (open..close)");
	return 0;
}

/* A char[] field holds a C string (NUL inside), non-empty when required. */
static int check_str(const char *s, size_t size, bool required, const char *name,
		     const struct kvs_log *log)
{
	if (!memchr(s, '\0', size))
		BAD(log, "backend: redis.%s is not NUL-terminated within %zu bytes", name, size);
	if (required && !s[0])
		BAD(log, "backend: redis.%s is empty (required for kind=redis)", name);
	return 0;
}

/* The redis fields' shapes and ranges; the endpoints' syntax is checked (each by
 * name) when redis.c parses them at open. */
static int validate_redis(const struct kvs_backend_config *cfg, const struct kvs_log *log)
{
	const struct kvs_backend_redis_config *r = &cfg->redis;
	const uint64_t hour = 3600 * UINT64_C(1000000000), ms = 1000000;
	int rc;

	if ((rc = check_str(r->endpoints, sizeof(r->endpoints), true, "endpoints", log)) ||
	    (rc = check_str(r->user, sizeof(r->user), false, "user", log)) ||
	    (rc = check_str(r->password, sizeof(r->password), false, "password", log)) ||
	    (rc = check_str(r->password_file, sizeof(r->password_file), false, "password_file",
			    log)) ||
	    (rc = check_str(r->key_prefix, sizeof(r->key_prefix), false, "key_prefix", log)))
		return rc;
	for (size_t i = 0; i < sizeof(r->reserved) / sizeof(r->reserved[0]); i++)
		if (r->reserved[i])
			BAD(log, "backend: invalid redis.reserved = non-zero (must be zero)");
	if (r->wait_replicas > KVS_REDIS_MAX_WAIT_REPLICAS)
		BAD(log, "backend: redis.wait_replicas %llu out of range 0..%d",
		    (unsigned long long)r->wait_replicas, KVS_REDIS_MAX_WAIT_REPLICAS);
	if (r->cluster > 1)
		BAD(log, "backend: redis.cluster %u out of range 0..1", r->cluster);
	if (r->cluster && r->db)
		BAD(log, "backend: redis.db %u with redis.cluster=1: a Redis Cluster has only db 0 "
			 "(set redis_db=0)", r->db);
	if (r->cluster && strpbrk(r->key_prefix, "{}"))
		BAD(log, "backend: redis.key_prefix '%s' with redis.cluster=1 holds '{' or '}': the "
			 "keys' hash tag must be the block id (remove the braces from "
			 "redis_key_prefix)", r->key_prefix);
	if (r->start_degraded > 1)
		BAD(log, "backend: redis.start_degraded %u out of range 0..1", r->start_degraded);
	if (r->db > INT32_MAX)
		BAD(log, "backend: redis.db %u out of range 0..2^31-1", r->db);
	if (r->connections == 0 || r->connections > KVS_REDIS_MAX_CONNECTIONS)
		BAD(log, "backend: redis.connections %u out of range 1..%d", r->connections,
		    KVS_REDIS_MAX_CONNECTIONS);
	if (r->connect_timeout_ns < ms || r->connect_timeout_ns > hour)
		BAD(log, "backend: redis.connect_timeout_ns %llu out of range 1 ms .. 1 h",
		    (unsigned long long)r->connect_timeout_ns);
	if (r->command_timeout_ns < ms || r->command_timeout_ns > hour)
		BAD(log, "backend: redis.command_timeout_ns %llu out of range 1 ms .. 1 h",
		    (unsigned long long)r->command_timeout_ns);
	if (r->ttl_ms > (UINT64_C(1) << 53))
		BAD(log, "backend: redis.ttl_ms %llu exceeds 2^53", (unsigned long long)r->ttl_ms);
	if (cfg->shard_bytes > KVS_IO_REDIS_VALUE_MAX - KVS_IO_VALUE_HDR)
		BAD(log, "backend: shard_bytes %llu exceeds 512 MiB less the %d-byte value header "
			 "(the largest Redis string)", (unsigned long long)cfg->shard_bytes,
		    KVS_IO_VALUE_HDR);
	return 0;
}

/* The tensor table: at most KVS_MAX_TENSORS sizes, each > 0, summing to
 * shard_bytes (none: one tensor of shard_bytes). */
static int validate_tensors(const struct kvs_backend_config *cfg, const struct kvs_log *log)
{
	uint64_t sum = 0;

	if (cfg->tensor_count > KVS_MAX_TENSORS)
		BAD(log, "backend: tensor_count %u exceeds KVS_MAX_TENSORS (%d)", cfg->tensor_count,
		    KVS_MAX_TENSORS);
	if (cfg->tensor_count && !cfg->tensor_bytes)
		BAD(log, "backend: tensor_bytes is NULL with tensor_count %u", cfg->tensor_count);
	for (uint32_t i = 0; i < cfg->tensor_count; i++) {
		if (cfg->tensor_bytes[i] == 0)
			BAD(log, "backend: tensor_bytes[%u] is 0 (want > 0)", i);
		if (__builtin_add_overflow(sum, cfg->tensor_bytes[i], &sum))
			BAD(log, "backend: tensor_bytes[0..%u] overflow 64 bits", i);
	}
	if (cfg->tensor_count && sum != cfg->shard_bytes)
		BAD(log, "backend: tensor_bytes sum to %llu over tensor_count %u, shard_bytes is %llu",
		    (unsigned long long)sum, cfg->tensor_count, (unsigned long long)cfg->shard_bytes);
	return 0;
}

/* A fault backend's inner config stores what the wrapper's callers read: the same
 * geometry (shard size, shards, tensor table, layout_tag), both validated. */
static int validate_fault_inner(const struct kvs_backend_config *cfg, const struct kvs_log *log)
{
	struct kvs_io_geom outer, inner;
	char o[KVS_IO_GEOM_DESCRIBE_MAX], i[KVS_IO_GEOM_DESCRIBE_MAX];

	kvs_io_geom_init(&outer, cfg);
	kvs_io_geom_init(&inner, cfg->fault_inner);
	if (kvs_io_geom_same(&outer, &inner))
		return 0;
	kvs_io_geom_describe(&outer, false, o, sizeof(o));
	kvs_io_geom_describe(&inner, false, i, sizeof(i));
	BAD(log, "backend: fault_inner has %s; the fault backend has %s (shard_bytes, "
		 "shards_per_block, tensor_count/tensor_bytes and layout_tag must be the same)", i, o);
}

/* Checks every field of cfg; depth bounds fault-over-fault nesting. */
static int validate_config(const struct kvs_backend_config *cfg, const struct kvs_log *log,
			   int depth)
{
	const uint32_t known_flags = KVS_BACKEND_F_IO_DIRECT | KVS_BACKEND_F_NO_FSYNC;
	int rc;

	if (cfg->kind > KVS_BACKEND_REDIS)
		BAD(log, "backend: kind %u is not a backend kind", cfg->kind);
	if (cfg->flags & ~known_flags)
		BAD(log, "backend: flags 0x%x has unknown bits 0x%x", cfg->flags,
		    cfg->flags & ~known_flags);
	if (cfg->io_engine > KVS_IO_ENGINE_POOL)
		BAD(log, "backend: io_engine %u is not auto, uring or pool", cfg->io_engine);
	for (size_t i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			BAD(log, "backend: invalid reserved = non-zero (must be zero)");
	if (cfg->reserved32)
		BAD(log, "backend: invalid reserved32 = %u (must be zero)", cfg->reserved32);
	if (cfg->shard_bytes == 0 || cfg->shard_bytes > (UINT64_C(1) << 40))
		BAD(log, "backend: shard_bytes %llu out of range 1..2^40",
		    (unsigned long long)cfg->shard_bytes);
	rc = validate_tensors(cfg, log);
	if (rc < 0)
		return rc;
	if (cfg->shards_per_block == 0 || cfg->shards_per_block > 65536)
		BAD(log, "backend: shards_per_block %u out of range 1..65536",
		    cfg->shards_per_block);
	if (cfg->queue_depth == 0 || cfg->queue_depth > 4096)
		BAD(log, "backend: queue_depth %u out of range 1..4096", cfg->queue_depth);
	if (cfg->pool_threads == 0 || cfg->pool_threads > 64)
		BAD(log, "backend: pool_threads %u out of range 1..64", cfg->pool_threads);
	if (cfg->fault_error_ppm > 1000000)
		BAD(log, "backend: fault_error_ppm %u exceeds 1000000", cfg->fault_error_ppm);
	if (cfg->fault_short_ppm > 1000000)
		BAD(log, "backend: fault_short_ppm %u exceeds 1000000", cfg->fault_short_ppm);
	if (cfg->latency_ns > 3600 * UINT64_C(1000000000))
		BAD(log, "backend: latency_ns %llu exceeds an hour",
		    (unsigned long long)cfg->latency_ns);
	if (cfg->fault_delay_ns > 3600 * UINT64_C(1000000000))
		BAD(log, "backend: fault_delay_ns %llu exceeds an hour",
		    (unsigned long long)cfg->fault_delay_ns);

	switch (cfg->kind) {
	case KVS_BACKEND_POSIX:
		if (cfg->nroots == 0 || cfg->nroots > KVS_BACKEND_MAX_ROOTS)
			BAD(log, "backend: nroots %u out of range 1..%d", cfg->nroots,
			    KVS_BACKEND_MAX_ROOTS);
		for (uint32_t i = 0; i < cfg->nroots; i++)
			if (!cfg->roots[i] || !cfg->roots[i][0])
				BAD(log, "backend: roots[%u] is empty", i);
		if (!KVS_KERNEL && cfg->io_engine == KVS_IO_ENGINE_URING) {
			kvs_log_error(log, "backend: io_engine=uring is not available in the "
					   "plain build");
			return -EOPNOTSUPP;
		}
		break;
	case KVS_BACKEND_FAULT:
		if (!cfg->fault_inner)
			BAD(log, "backend: fault_inner is NULL for kind=fault");
		if (depth > 4)
			BAD(log, "backend: fault_inner nests more than 4 fault backends");
		rc = validate_config(cfg->fault_inner, log, depth + 1);
		return rc < 0 ? rc : validate_fault_inner(cfg, log);
	case KVS_BACKEND_USER:
		return validate_ops(cfg->user_ops, log);
	case KVS_BACKEND_REDIS:
		return validate_redis(cfg, log);
	default:
		break;
	}
	return 0;
}

static const struct kvs_backend_ops *ops_of(const struct kvs_backend_config *cfg)
{
	switch (cfg->kind) {
	case KVS_BACKEND_POSIX:
		return &kvs_io_posix_ops;
	case KVS_BACKEND_NONE:
		return &kvs_io_none_ops;
	case KVS_BACKEND_LATENCY:
		return &kvs_io_latency_ops;
	case KVS_BACKEND_FAULT:
		return &kvs_io_fault_ops;
	case KVS_BACKEND_REDIS:
		return &kvs_io_redis_ops;
	default:
		return cfg->user_ops;
	}
}

KVS_API int kvs_backend_open(const struct kvs_backend_config *cfg, struct kvs_backend **out)
{
	struct kvs_backend *b;
	struct kvs_log log;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!cfg)
		return -EINVAL;
	log.fn = cfg->log;
	log.arg = cfg->log_arg;
	rc = validate_config(cfg, &log, 0);
	if (rc < 0)
		return rc;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->ops = ops_of(cfg);
	b->kind = cfg->kind;
	b->shard_bytes = cfg->shard_bytes;
	b->shards_per_block = cfg->shards_per_block;
	b->has_register = OPS_HAS(b->ops, register_buffers);
	b->has_info = OPS_HAS(b->ops, info);
	b->has_lookup_batch = OPS_HAS(b->ops, lookup_batch);
	b->has_wait_fd = OPS_HAS(b->ops, wait_fd);
	b->has_hint_read = OPS_HAS(b->ops, hint_read);
	b->log = log;
	rc = b->ops->open(cfg, &b->state);
	if (rc < 0) {
		free(b);
		return rc;
	}
	*out = b;
	return 0;
}

KVS_API void kvs_backend_close(struct kvs_backend *b)
{
	if (!b)
		return;
	b->ops->close(b->state);
	free(b);
}

KVS_API int kvs_backend_lookup(struct kvs_backend *b, const struct kvs_block_id *block)
{
	if (!b || !block)
		return -EINVAL;
	return b->ops->lookup(b->state, block);
}

KVS_API int kvs_backend_lookup_batch(struct kvs_backend *b, const struct kvs_block_id *blocks,
				     size_t n, uint32_t flags, bool *hits)
{
	size_t i, hit = 0;
	int rc;

	if (!b || (n && (!blocks || !hits)) || n > INT32_MAX || (flags & ~KVS_BACKEND_LOOKUP_PREFIX))
		return -EINVAL;
	if (b->has_lookup_batch) {
		rc = b->ops->lookup_batch(b->state, blocks, n, hits);
		if (rc < 0)
			return rc;
		if (!(flags & KVS_BACKEND_LOOKUP_PREFIX))
			return rc;
	} else {
		for (i = 0; i < n; i++) {
			if (hits[i])
				continue;
			rc = b->ops->lookup(b->state, &blocks[i]);
			if (rc < 0)
				return rc;
			hits[i] = rc == 1;
			if (!hits[i] && (flags & KVS_BACKEND_LOOKUP_PREFIX))
				break; /* the rest is cleared below, unasked */
		}
	}
	for (i = 0; i < n && hits[i]; i++)
		hit++;
	for (; i < n; i++) {
		if (flags & KVS_BACKEND_LOOKUP_PREFIX)
			hits[i] = false;
		hit += hits[i];
	}
	return (int)hit;
}

static int validate_io(const struct kvs_backend *b, const struct kvs_backend_io *io,
		       bool write)
{
	if (!io || !io->buf)
		return -EINVAL;
	if (io->flags) {
		kvs_log_error(&b->log, "backend: io.flags 0x%x must be 0", io->flags);
		return -EINVAL;
	}
	if (io->shard >= b->shards_per_block) {
		kvs_log_error(&b->log, "backend: io.shard %u >= shards_per_block %u", io->shard,
			      b->shards_per_block);
		return -EINVAL;
	}
	if (write ? io->offset != 0 || io->len != b->shard_bytes
		  : io->len == 0 || io->offset >= b->shard_bytes ||
			    io->len > b->shard_bytes - io->offset) {
		kvs_log_error(&b->log, "backend: io %s offset %llu len %llu outside shard of %llu "
				       "bytes%s",
			      write ? "write" : "read", (unsigned long long)io->offset,
			      (unsigned long long)io->len, (unsigned long long)b->shard_bytes,
			      write ? " (writes cover whole shards)" : "");
		return -EINVAL;
	}
	return 0;
}

KVS_API int kvs_backend_submit_read(struct kvs_backend *b, const struct kvs_backend_io *io)
{
	int rc;

	if (!b)
		return -EINVAL;
	rc = validate_io(b, io, false);
	return rc < 0 ? rc : b->ops->submit_read(b->state, io);
}

KVS_API int kvs_backend_hint_read(struct kvs_backend *b, const struct kvs_block_id *blocks,
				  size_t n)
{
	if (!b || (n && !blocks))
		return -EINVAL;
	if (n && b->has_hint_read)
		b->ops->hint_read(b->state, blocks, n);
	return 0;
}

KVS_API int kvs_backend_submit_write(struct kvs_backend *b, const struct kvs_backend_io *io)
{
	int rc;

	if (!b)
		return -EINVAL;
	rc = validate_io(b, io, true);
	return rc < 0 ? rc : b->ops->submit_write(b->state, io);
}

KVS_API int kvs_backend_poll(struct kvs_backend *b, struct kvs_backend_completion *out,
			     uint32_t max, uint64_t timeout_ns)
{
	if (!b || !out || max == 0)
		return -EINVAL;
	return b->ops->poll(b->state, out, max, timeout_ns);
}

KVS_API int kvs_backend_wait_fd(struct kvs_backend *b)
{
	if (!b)
		return -EINVAL;
	return b->has_wait_fd ? b->ops->wait_fd(b->state) : -EOPNOTSUPP;
}

KVS_API int kvs_backend_register_buffers(struct kvs_backend *b,
					 const struct kvs_backend_buffer *bufs, uint32_t n)
{
	if (!b || (n && !bufs))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!bufs[i].base || !bufs[i].len)
			return -EINVAL;
	return b->has_register ? b->ops->register_buffers(b->state, bufs, n) : 0;
}

KVS_API int kvs_backend_info(struct kvs_backend *b, struct kvs_backend_info *info)
{
	if (!b || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	if (b->has_info)
		b->ops->info(b->state, info);
	info->kind = b->kind;
	return 0;
}
