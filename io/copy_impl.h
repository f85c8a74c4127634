/*
 * io/copy_impl.h — what an engine implementation provides to io/copy.c (private
 * to the copy engines; nothing outside io/copy*.c includes it).
 *
 * io/copy.c validates every argument of the public calls (io/copy.h) before it
 * reaches an engine, and turns a shard's segment list into a vector: ops see
 * 1..KVS_COPY_VEC_MAX copies, each with a non-NULL host pointer, len > 0,
 * dev != 0 and no overflowing range.
 */
#ifndef KVS_IO_COPY_IMPL_H
#define KVS_IO_COPY_IMPL_H

#include <stdbool.h>

#include "io/copy.h"

struct kvs_copy_ops {
	const char *name;
	int (*reg)(struct kvs_copy_engine *eng, void *base, uint64_t bytes);
	int (*unreg)(struct kvs_copy_engine *eng, void *base);
	int (*host_alloc)(struct kvs_copy_engine *eng, uint64_t bytes, void **ptr);
	void (*host_free)(struct kvs_copy_engine *eng, void *ptr);
	/* Queue n (1..KVS_COPY_VEC_MAX, validated) copies: host -> dev (h2d), or
	 * dev -> host. */
	int (*copy)(struct kvs_copy_engine *eng, const struct kvs_copy_vec v[], uint32_t n,
		    bool h2d);
	int (*wait_event)(struct kvs_copy_engine *eng, void *event); /* event != NULL */
	int (*sync)(struct kvs_copy_engine *eng, uint64_t deadline_ns);
	void (*fini)(struct kvs_copy_engine *eng);
};

struct kvs_copy_engine {
	const struct kvs_copy_ops *ops;
	struct kvs_log log;
	int32_t device_id;
	uint32_t streams;  /* 1..KVS_COPY_MAX_STREAMS */
	uint32_t strategy; /* enum kvs_copy_strategy */
	uint64_t register_delay_ns; /* host engine test mode */
	uint64_t land_delay_ns;     /* host engine test mode */
	void *impl;        /* engine-private state (host: the delayed copies, or NULL) */
};

#if defined(KVS_HAVE_CUDA)
/* io/copy_cuda.c: fill eng->ops and eng->impl for device eng->device_id. */
int kvs_copy_cuda_init(struct kvs_copy_engine *eng);
int kvs_copy_cuda_pci_bus_id(int32_t device_id, char *buf, uint32_t len);
#endif

#endif
