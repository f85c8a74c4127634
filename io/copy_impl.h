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

#include <stdatomic.h>
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
	_Atomic bool populate_failed; /* host engine: its register's madvise failed once
				       * (logged once; relaxed: only the log depends on it) */
	void *impl;        /* engine-private state (host: the delayed copies, or NULL) */
	struct kvs_copy_crew *crew; /* host engine: its copy threads (streams > 1), or NULL */
};

/*
 * io/copy_crew.c: the host engine's copy threads.  open: a crew of streams - 1
 * helpers (none started yet; *out NULL for streams <= 1), 0 or -ENOMEM.  copy:
 * shares a call of at least KVS_COPY_CREW_MIN_BYTES between the caller and the
 * helpers and returns true once every byte has landed; false, having copied
 * nothing, for a smaller call, a NULL crew, or no helper running (the caller
 * copies alone).  One caller at a time.  close: joins the helpers; NULL is a
 * no-op.
 */
#define KVS_COPY_CREW_MIN_BYTES (512u << 10)
int kvs_copy_crew_open(uint32_t streams, const struct kvs_log *log, struct kvs_copy_crew **out);
bool kvs_copy_crew_copy(struct kvs_copy_crew *c, const struct kvs_copy_vec v[], uint32_t n,
			bool h2d);
void kvs_copy_crew_close(struct kvs_copy_crew *c);

#if defined(KVS_HAVE_CUDA)
/* io/copy_cuda.c: fill eng->ops and eng->impl for device eng->device_id. */
int kvs_copy_cuda_init(struct kvs_copy_engine *eng);
int kvs_copy_cuda_pci_bus_id(int32_t device_id, char *buf, uint32_t len);
#endif

#endif
