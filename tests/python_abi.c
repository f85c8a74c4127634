/*
 * tests/python_abi.c — the C compiler's answer for the Python binding: prints
 * python/kvshare/_abi.py, the ctypes declarations of every struct the binding
 * passes to libkvshare.so.1 and the constants it uses, from include/kvshare.h.
 *
 * This program is the single source of truth for the binding's layouts.  Each
 * field below names its ctypes element type; the element count of an array, every
 * offset and every struct size come from the compiler (offsetof, sizeof).  Before
 * printing, each struct is checked against the header: every field's size is a
 * whole number of its element type, the fields are listed in declaration order
 * with nothing between them but alignment padding, and nothing follows the last
 * field but tail padding.  So a field added to the header (or a reserved[] word
 * turned into one) that this table does not list is reported here by name,
 * instead of becoming a silently mis-sized ctypes struct.
 *
 * Following a header change: add the field to the table below, then
 *   <build>/kernel/tests/python_abi > python/kvshare/_abi.py
 * The CTest entry <variant>.python (tests/python.cmake) runs this program and
 * fails when its output differs from the committed file (tests/python/
 * test_abi.py), and the package checks at import that ctypes lays each struct
 * out at the offsets printed here.
 *
 * usage: python_abi        prints the module on stdout; exit 1 (and nothing on
 *                          stdout) when the table is out of date with the header
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvshare.h"

/* A ctypes element type and its C size and alignment on this ABI. */
struct ctype {
	const char *name;
	size_t size, align;
};

/* One field: name, ctypes element type, offset and size from the compiler. */
struct field {
	const char *name;
	const char *ctype;
	size_t offset, size;
};

struct layout {
	const char *name;
	size_t size, align;
	const struct field *fields;
	size_t nfields;
};

#define F(S, f, ct) { #f, ct, offsetof(struct S, f), sizeof(((struct S *)0)->f) }

static const struct field block_id[] = {
	F(kvs_block_id, bytes, "c_uint8"),
};

static const struct field cache_config[] = {
	F(kvs_cache_config, unique_id, "c_char"),
	F(kvs_cache_config, device_id, "c_int32"),
	F(kvs_cache_config, local_rank_size, "c_uint32"),
	F(kvs_cache_config, slot_bytes, "c_uint64"),
	F(kvs_cache_config, slot_count, "c_uint64"),
	F(kvs_cache_config, shards_per_block, "c_uint32"),
	F(kvs_cache_config, tensor_count, "c_uint32"),
	F(kvs_cache_config, tensor_bytes, "c_uint64"),
	F(kvs_cache_config, reserved_slots, "c_uint32"),
	F(kvs_cache_config, hugetlb, "c_uint32"),
	F(kvs_cache_config, hugepage_bytes, "c_uint64"),
	F(kvs_cache_config, numa, "c_uint32"),
	F(kvs_cache_config, numa_node, "c_int32"),
	F(kvs_cache_config, pci_bus_id, "c_char"),
	F(kvs_cache_config, wait, "c_uint32"),
	F(kvs_cache_config, spin_ns, "c_uint32"),
	F(kvs_cache_config, file_mode, "c_uint32"),
	F(kvs_cache_config, flags, "c_uint32"),
	F(kvs_cache_config, gid, "c_int64"),
	F(kvs_cache_config, attach_timeout_ns, "c_uint64"),
	F(kvs_cache_config, lock_timeout_ns, "c_uint64"),
	F(kvs_cache_config, log, "c_void_p"),
	F(kvs_cache_config, log_arg, "c_void_p"),
	F(kvs_cache_config, prefault_threads, "c_uint32"),
	F(kvs_cache_config, reserved32, "c_uint32"),
	F(kvs_cache_config, reserved, "c_uint64"),
};

static const struct field backend_redis_config[] = {
	F(kvs_backend_redis_config, endpoints, "c_char"),
	F(kvs_backend_redis_config, user, "c_char"),
	F(kvs_backend_redis_config, password, "c_char"),
	F(kvs_backend_redis_config, password_file, "c_char"),
	F(kvs_backend_redis_config, key_prefix, "c_char"),
	F(kvs_backend_redis_config, db, "c_uint32"),
	F(kvs_backend_redis_config, connections, "c_uint32"),
	F(kvs_backend_redis_config, connect_timeout_ns, "c_uint64"),
	F(kvs_backend_redis_config, command_timeout_ns, "c_uint64"),
	F(kvs_backend_redis_config, ttl_ms, "c_uint64"),
	F(kvs_backend_redis_config, start_degraded, "c_uint32"),
	F(kvs_backend_redis_config, cluster, "c_uint32"),
	F(kvs_backend_redis_config, wait_replicas, "c_uint64"),
	F(kvs_backend_redis_config, reserved, "c_uint64"),
};

static const struct field backend_config[] = {
	F(kvs_backend_config, kind, "c_uint32"),
	F(kvs_backend_config, flags, "c_uint32"),
	F(kvs_backend_config, io_engine, "c_uint32"),
	F(kvs_backend_config, shards_per_block, "c_uint32"),
	F(kvs_backend_config, shard_bytes, "c_uint64"),
	F(kvs_backend_config, queue_depth, "c_uint32"),
	F(kvs_backend_config, pool_threads, "c_uint32"),
	F(kvs_backend_config, nroots, "c_uint32"),
	F(kvs_backend_config, latency_queue_depth, "c_uint32"),
	F(kvs_backend_config, roots, "c_void_p"),
	F(kvs_backend_config, latency_ns, "c_uint64"),
	F(kvs_backend_config, fault_error_ppm, "c_uint32"),
	F(kvs_backend_config, fault_short_ppm, "c_uint32"),
	F(kvs_backend_config, fault_delay_ns, "c_uint64"),
	F(kvs_backend_config, fault_seed, "c_uint64"),
	F(kvs_backend_config, fault_inner, "c_void_p"),
	F(kvs_backend_config, user_ops, "c_void_p"),
	F(kvs_backend_config, user_arg, "c_void_p"),
	F(kvs_backend_config, log, "c_void_p"),
	F(kvs_backend_config, log_arg, "c_void_p"),
	F(kvs_backend_config, redis, "kvs_backend_redis_config"),
	F(kvs_backend_config, tensor_count, "c_uint32"),
	F(kvs_backend_config, reserved32, "c_uint32"),
	F(kvs_backend_config, tensor_bytes, "c_void_p"),
	F(kvs_backend_config, layout_tag, "c_uint64"),
	F(kvs_backend_config, reserved, "c_uint64"),
};

static const struct field store_config[] = {
	F(kvs_store_config, cache, "kvs_cache_config"),
	F(kvs_store_config, backend, "kvs_backend_config"),
	F(kvs_store_config, capacity_bytes, "c_uint64"),
	F(kvs_store_config, block_bytes, "c_uint64"),
	F(kvs_store_config, tensor_bytes, "c_uint64"),
	F(kvs_store_config, timeout_ns, "c_uint64"),
	F(kvs_store_config, copy_delay_ns, "c_uint64"),
	F(kvs_store_config, copy_engine, "c_uint32"),
	F(kvs_store_config, dispatch_order, "c_uint32"),
	F(kvs_store_config, dump_wait, "c_uint32"),
	F(kvs_store_config, prealloc, "c_uint32"),
	F(kvs_store_config, share_buffer, "c_uint32"),
	F(kvs_store_config, waiting_queue_depth, "c_uint32"),
	F(kvs_store_config, running_queue_depth, "c_uint32"),
	F(kvs_store_config, cache_stream_number, "c_uint32"),
	F(kvs_store_config, cpu_affinity, "c_uint64"),
	F(kvs_store_config, backend_roots, "c_char"),
	F(kvs_store_config, log, "c_void_p"),
	F(kvs_store_config, log_arg, "c_void_p"),
	F(kvs_store_config, register_chunk_bytes, "c_uint64"),
	F(kvs_store_config, register_delay_ns, "c_uint64"),
	F(kvs_store_config, copy_land_delay_ns, "c_uint64"),
	F(kvs_store_config, reserved, "c_uint64"),
};

static const struct field store_tensor[] = {
	F(kvs_store_tensor, addr, "c_uint64"),
	F(kvs_store_tensor, offset, "c_uint64"),
	F(kvs_store_tensor, len, "c_uint64"),
};

static const struct field store_shard[] = {
	F(kvs_store_shard, block, "kvs_block_id"),
	F(kvs_store_shard, shard, "c_uint32"),
	F(kvs_store_shard, tensor_count, "c_uint32"),
	F(kvs_store_shard, tensors, "c_void_p"),
};

static const struct field store_stats[] = {
	F(kvs_store_stats, tasks_load, "c_uint64"),
	F(kvs_store_stats, tasks_dump, "c_uint64"),
	F(kvs_store_stats, tasks_prefetch, "c_uint64"),
	F(kvs_store_stats, tasks_failed, "c_uint64"),
	F(kvs_store_stats, tasks_timedout, "c_uint64"),
	F(kvs_store_stats, shards_loaded, "c_uint64"),
	F(kvs_store_stats, shards_dumped, "c_uint64"),
	F(kvs_store_stats, dump_dedup, "c_uint64"),
	F(kvs_store_stats, load_hits, "c_uint64"),
	F(kvs_store_stats, owner_reads, "c_uint64"),
	F(kvs_store_stats, read_errors, "c_uint64"),
	F(kvs_store_stats, backend_writes, "c_uint64"),
	F(kvs_store_stats, write_errors, "c_uint64"),
	F(kvs_store_stats, prealloc, "c_uint64"),
	F(kvs_store_stats, prealloc_hits, "c_uint64"),
	F(kvs_store_stats, copy_bytes, "c_uint64"),
	F(kvs_store_stats, copy_ns, "c_uint64"),
	F(kvs_store_stats, task_lat_us, "c_uint64"),
	F(kvs_store_stats, register_total_bytes, "c_uint64"),
	F(kvs_store_stats, registered_bytes, "c_uint64"),
	F(kvs_store_stats, register_ns, "c_uint64"),
	F(kvs_store_stats, staged_shards, "c_uint64"),
	F(kvs_store_stats, task_lat_ns_sum, "c_uint64"),
	F(kvs_store_stats, register_ms_per_gib, "c_double"),
	F(kvs_store_stats, ready, "c_uint32"),
	F(kvs_store_stats, pad, "c_uint32"),
	F(kvs_store_stats, reserved, "c_uint64"),
};

static const struct field cache_stats[] = {
	F(kvs_cache_stats, hits, "c_uint64"),
	F(kvs_cache_stats, misses, "c_uint64"),
	F(kvs_cache_stats, owner_fills, "c_uint64"),
	F(kvs_cache_stats, waits, "c_uint64"),
	F(kvs_cache_stats, wait_ns, "c_uint64"),
	F(kvs_cache_stats, failures, "c_uint64"),
	F(kvs_cache_stats, evictions, "c_uint64"),
	F(kvs_cache_stats, clock_sweeps, "c_uint64"),
	F(kvs_cache_stats, takeovers, "c_uint64"),
	F(kvs_cache_stats, lock_repairs, "c_uint64"),
	F(kvs_cache_stats, ranks_reaped, "c_uint64"),
	F(kvs_cache_stats, enospc, "c_uint64"),
	F(kvs_cache_stats, lrs_mismatch, "c_uint64"),
	F(kvs_cache_stats, fallbacks, "c_uint32"),
	F(kvs_cache_stats, ranks_attached, "c_uint32"),
	F(kvs_cache_stats, gpu_ranks_attached, "c_uint32"),
	F(kvs_cache_stats, adoptions, "c_uint32"),
	F(kvs_cache_stats, slot_count, "c_uint64"),
	F(kvs_cache_stats, slot_bytes, "c_uint64"),
	F(kvs_cache_stats, slots_ready, "c_uint64"),
	F(kvs_cache_stats, slots_loading, "c_uint64"),
	F(kvs_cache_stats, slots_failed, "c_uint64"),
	F(kvs_cache_stats, slots_pinned, "c_uint64"),
	F(kvs_cache_stats, data_bytes, "c_uint64"),
	F(kvs_cache_stats, prefault_ns, "c_uint64"),
	F(kvs_cache_stats, prefault_ms_per_gib, "c_double"),
	F(kvs_cache_stats, prefault_threads, "c_uint32"),
	F(kvs_cache_stats, pad, "c_uint32"),
	F(kvs_cache_stats, slots_dirty, "c_uint64"),
	F(kvs_cache_stats, joins, "c_uint64"),
	F(kvs_cache_stats, dump_gets, "c_uint64"),
	F(kvs_cache_stats, reserved, "c_uint64"),
};

#define L(S, tab) { #S, sizeof(struct S), alignof(struct S), tab, sizeof(tab) / sizeof(tab[0]) }

/* In dependency order: a struct is printed after the structs it contains. */
static const struct layout layouts[] = {
	L(kvs_block_id, block_id),
	L(kvs_cache_config, cache_config),
	L(kvs_backend_redis_config, backend_redis_config),
	L(kvs_backend_config, backend_config),
	L(kvs_store_config, store_config),
	L(kvs_store_tensor, store_tensor),
	L(kvs_store_shard, store_shard),
	L(kvs_store_stats, store_stats),
	L(kvs_cache_stats, cache_stats),
};

/* The constants the binding uses, by their header names. */
#define C(name) { #name, (long long)(name) }
static const struct {
	const char *name;
	long long value;
} constants[] = {
	C(KVS_E_BASE), C(KVS_ELAYOUT), C(KVS_ECONFIG), C(KVS_EOWNERDEAD), C(KVS_ENOHUGE),
	C(KVS_ECORRUPT), C(KVS_EINCOMPLETE), C(KVS_LOG_ERROR), C(KVS_LOG_WARN), C(KVS_LOG_INFO), C(KVS_LOG_DEBUG),
	C(KVS_MAX_TENSORS), C(KVS_ALL_SHARDS), C(KVS_STATS_NODE), C(KVS_STORE_LAT_BUCKETS),
	C(KVS_COPY_ENGINE_AUTO), C(KVS_COPY_ENGINE_HOST), C(KVS_COPY_ENGINE_CUDA),
};

static const struct ctype *ctype_find(const char *name)
{
	static struct ctype types[] = {
		{ "c_char", 1, 1 },
		{ "c_uint8", 1, 1 },
		{ "c_int32", sizeof(int32_t), alignof(int32_t) },
		{ "c_uint32", sizeof(uint32_t), alignof(uint32_t) },
		{ "c_int64", sizeof(int64_t), alignof(int64_t) },
		{ "c_uint64", sizeof(uint64_t), alignof(uint64_t) },
		{ "c_double", sizeof(double), alignof(double) },
		{ "c_void_p", sizeof(void *), alignof(void *) },
	};
	static struct ctype structs[sizeof(layouts) / sizeof(layouts[0])];

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (!strcmp(types[i].name, name))
			return &types[i];
	for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++)
		if (!strcmp(layouts[i].name, name)) {
			structs[i] = (struct ctype){ layouts[i].name, layouts[i].size, layouts[i].align };
			return &structs[i];
		}
	return NULL;
}

/* The table row matches the header: whole elements, no unlisted bytes. */
static int layout_check(const struct layout *l)
{
	size_t end = 0;

	for (size_t i = 0; i < l->nfields; i++) {
		const struct field *f = &l->fields[i];
		const struct ctype *t = ctype_find(f->ctype);

		if (!t) {
			fprintf(stderr, "python_abi: %s.%s: unknown ctypes type %s\n", l->name,
				f->name, f->ctype);
			return -1;
		}
		if (f->size % t->size) {
			fprintf(stderr, "python_abi: %s.%s: %zu bytes in include/kvshare.h, not a "
				"whole number of %s (%zu bytes): fix its type in tests/python_abi.c\n",
				l->name, f->name, f->size, f->ctype, t->size);
			return -1;
		}
		if (f->offset < end || f->offset - end >= t->align) {
			fprintf(stderr, "python_abi: %s: bytes %zu..%zu before field %s are not "
				"listed (a field added to include/kvshare.h, or the table's order): "
				"add it to tests/python_abi.c\n", l->name, end, f->offset, f->name);
			return -1;
		}
		end = f->offset + f->size;
	}
	if (end > l->size || l->size - end >= l->align) {
		fprintf(stderr, "python_abi: %s: bytes %zu..%zu after the last listed field are "
			"not listed: add the new field to tests/python_abi.c\n", l->name, end, l->size);
		return -1;
	}
	return 0;
}

static void layout_print(const struct layout *l)
{
	printf("\n\nclass %s(ctypes.Structure):\n    _fields_ = [\n", l->name);
	for (size_t i = 0; i < l->nfields; i++) {
		const struct field *f = &l->fields[i];
		const struct ctype *t = ctype_find(f->ctype);
		const char *mod = strncmp(f->ctype, "c_", 2) ? "" : "ctypes.";

		if (f->size == t->size)
			printf("        (\"%s\", %s%s),\n", f->name, mod, f->ctype);
		else
			printf("        (\"%s\", %s%s * %zu),\n", f->name, mod, f->ctype,
			       f->size / t->size);
	}
	printf("    ]\n");
}

int main(void)
{
	size_t nl = sizeof(layouts) / sizeof(layouts[0]);

	for (size_t i = 0; i < nl; i++)
		if (layout_check(&layouts[i]))
			return 1;

	printf("# python/kvshare/_abi.py -- GENERATED by tests/python_abi.c from\n"
	       "# include/kvshare.h; do not edit.  After a header change, add the new\n"
	       "# fields to tests/python_abi.c's table and run\n"
	       "#   <build>/kernel/tests/python_abi > python/kvshare/_abi.py\n"
	       "# (the <variant>.python CTest entry fails until the two agree).\n"
	       "import ctypes\n\n");
	for (size_t i = 0; i < sizeof(constants) / sizeof(constants[0]); i++)
		printf("%s = %lld\n", constants[i].name, constants[i].value);
	for (size_t i = 0; i < nl; i++)
		layout_print(&layouts[i]);

	/* What the compiler said, for the import-time check of ctypes' own layout. */
	printf("\n\n# struct name: (sizeof, {field: offsetof})\nLAYOUT = {\n");
	for (size_t i = 0; i < nl; i++) {
		printf("    \"%s\": (%zu, {", layouts[i].name, layouts[i].size);
		for (size_t j = 0; j < layouts[i].nfields; j++)
			printf("%s\"%s\": %zu", j ? ", " : "", layouts[i].fields[j].name,
			       layouts[i].fields[j].offset);
		printf("}),\n");
	}
	printf("}\n");
	return 0;
}
