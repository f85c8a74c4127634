/*
 * io/internal.h — private to io/: the built-in backends' ops tables, the engines
 * under the posix backend, and small helpers they share.
 *
 * The posix backend (posix.c) owns files and naming; it hands transfers on open
 * file descriptors to an engine: io_uring (uring.c, kernel build) or a pthread
 * pool (pool.c).  An engine moves exactly req->len bytes or fails: it retries
 * short transfers for the remainder itself and reports end of file before len
 * as -EIO, so every layer above sees "all bytes or -errno".
 */
#ifndef KVS_IO_INTERNAL_H
#define KVS_IO_INTERNAL_H

#include <stdint.h>

#include "common/log.h"
#include "kvshare.h"

extern const struct kvs_backend_ops kvs_io_posix_ops;
extern const struct kvs_backend_ops kvs_io_none_ops;
extern const struct kvs_backend_ops kvs_io_latency_ops;
extern const struct kvs_backend_ops kvs_io_fault_ops;
extern const struct kvs_backend_ops kvs_io_redis_ops;

/* Largest value the redis backend stores: a Redis string's limit (512 MiB). */
#define KVS_IO_REDIS_VALUE_MAX (UINT64_C(512) << 20)

enum kvs_io_op {
	KVS_IO_OP_READ = 0,
	KVS_IO_OP_WRITE = 1,
	KVS_IO_OP_FSYNC = 2,
};

/* One transfer handed to an engine; owned by the caller until reaped. */
struct kvs_io_req {
	uint32_t op;       /* enum kvs_io_op */
	int fd;            /* file descriptor (always valid) */
	int file_idx;      /* registered file slot, or -1 */
	char *buf;
	uint64_t len;      /* bytes to move (0 for fsync) */
	uint64_t off;      /* file offset of buf[0] */
	uint64_t done;     /* bytes moved so far (engine) */
	uint32_t retries;  /* -EAGAIN/-EINTR resubmissions so far (engine) */
	int64_t res;       /* on completion: len, or a negative errno */
	void *ctx;         /* the submitter's */
	struct kvs_io_req *next; /* engine-private link */
};

struct kvs_io_eng;

struct kvs_io_eng_ops {
	/* Start req (0) or refuse it (-errno, nothing started). */
	int (*submit)(struct kvs_io_eng *e, struct kvs_io_req *req);
	/* Reap up to max finished requests, waiting until deadline_ns (absolute
	 * CLOCK_MONOTONIC) for the first.  Returns the count or -errno. */
	int (*reap)(struct kvs_io_eng *e, struct kvs_io_req **out, uint32_t max,
		    uint64_t deadline_ns);
	/* Optional: put fd in registered file slot idx (-1 clears it). */
	int (*set_file)(struct kvs_io_eng *e, int idx, int fd);
	/* Optional: register buffers for fixed transfers. */
	int (*register_buffers)(struct kvs_io_eng *e, const struct kvs_backend_buffer *bufs,
				uint32_t n);
	/* Finish everything in flight, free the engine (NULL-tolerant caller). */
	void (*close)(struct kvs_io_eng *e);
};

struct kvs_io_eng {
	const struct kvs_io_eng_ops *ops;
	uint32_t kind;       /* KVS_IO_ENGINE_URING or _POOL */
	uint32_t info_flags; /* KVS_BACKEND_INFO_FIXED_BUFFERS once registered */
	uint32_t nfiles;     /* registered file slots (0: plain fds only) */
};

/* io_uring engine (kernel build): ring of qd entries, nfiles registered file slots.
 * Returns -EPERM/-ENOSYS/-EACCES when io_uring is refused (caller may fall back). */
int kvs_io_uring_open(uint32_t qd, uint32_t nfiles, const struct kvs_log *log,
		      struct kvs_io_eng **out);
/* pthread pool of nthreads pread/pwrite workers for up to qd requests. */
int kvs_io_pool_open(uint32_t qd, uint32_t nthreads, const struct kvs_log *log,
		     struct kvs_io_eng **out);

/* Move one request synchronously (pool workers; also the reference semantics):
 * loops on short transfers, EINTR/EAGAIN retried, EOF before len -> -EIO. */
int64_t kvs_io_transfer_sync(struct kvs_io_req *req);

/* 32 lowercase hex characters and a NUL. */
void kvs_io_block_hex(const struct kvs_block_id *block, char hex[33]);

#endif
