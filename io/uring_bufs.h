/*
 * io/uring_bufs.h — the io_uring engine's fixed buffers, pinned chunk by chunk
 * on first use (uring_bufs.c says why and how).  Used by io/uring.c only, from
 * the ring's issuing thread (kvs_uring_bufs_plan also before the first submit).
 */
#ifndef KVS_IO_URING_BUFS_H
#define KVS_IO_URING_BUFS_H

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/internal.h"

struct kvs_uring_region {
	char *base;
	uint64_t len;
	uint32_t first; /* fixed buffer index of the region's first chunk */
};

struct kvs_uring_bufs {
	struct io_uring *ring;
	struct kvs_io_eng *eng; /* info_flags, fixed_bytes */
	const struct kvs_log *log;
	struct kvs_uring_region *regions;
	uint32_t nregions;
	uint64_t total;    /* bytes of the regions */
	uint64_t chunk;    /* bytes per fixed buffer (a region's last one may be shorter) */
	uint32_t nchunks;  /* entries of the kernel's table */
	uint8_t *state;    /* per chunk: URING_CHUNK_* (uring_bufs.c) */
	uint32_t *queue;   /* chunks waiting to be pinned, a FIFO ring of nchunks */
	uint32_t qhead, qlen;
	bool ended;        /* a pin failed: no more are tried */
	uint64_t fixed;    /* bytes pinned */
};

void kvs_uring_bufs_init(struct kvs_uring_bufs *b, struct io_uring *ring,
			 struct kvs_io_eng *eng, const struct kvs_log *log);

/* Replace the plan by bufs[0..n) (n = 0: none).  Registers the sparse table and
 * pins the first chunk.  0, or a negative errno (-ENOMEM: RLIMIT_MEMLOCK, logged
 * as a WARNING); on error no fixed buffer is in use. */
int kvs_uring_bufs_plan(struct kvs_uring_bufs *b, const struct kvs_backend_buffer *bufs,
			uint32_t n);

/* The fixed buffer that holds [p, p + len), or -1: the transfer goes out plain,
 * and a chunk it lies in that is not pinned yet is queued for pinning. */
int kvs_uring_bufs_index(struct kvs_uring_bufs *b, const char *p, uint64_t len);

/* Pin the oldest queued chunk, if any (the issuer calls it after a submit). */
void kvs_uring_bufs_pin_next(struct kvs_uring_bufs *b);

/* Free the plan (the ring's exit unregisters the table). */
void kvs_uring_bufs_fini(struct kvs_uring_bufs *b);

#endif
