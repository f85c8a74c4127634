/*
 * io/internal.h — private to io/: the built-in backends' ops tables, the engines
 * under the posix backend, and small helpers they share.
 *
 * The posix backend (posix.c, with posix_roots.c, posix_read.c, posix_write.c)
 * owns files and naming; it hands transfers on open file descriptors to an
 * engine: io_uring (uring.c, kernel build) or a pthread pool (pool.c).  An
 * engine moves exactly req->len bytes or fails: it retries short transfers for
 * the remainder itself and reports end of file before len as -EIO, so every
 * layer above sees "all bytes or -errno".  The calls that
 * finish a dumped block (fdatasync, close, renameat) go through the engine too,
 * so that the issuer never waits for storage on a write's behalf.
 */
#ifndef KVS_IO_INTERNAL_H
#define KVS_IO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
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
	KVS_IO_OP_FSYNC = 2,  /* fdatasync(fd) */
	KVS_IO_OP_CLOSE = 3,  /* close(fd): fd is released whatever the result */
	KVS_IO_OP_RENAME = 4, /* renameat(fd, path, fd, path2): fd is a directory */
};

/* One request handed to an engine; owned by the caller until reaped. */
struct kvs_io_req {
	uint32_t op;       /* enum kvs_io_op */
	int fd;            /* file descriptor (always valid) */
	int file_idx;      /* registered file slot, or -1 (always -1 but for READ/WRITE) */
	char *buf;
	uint64_t len;      /* bytes to move (0 but for READ/WRITE) */
	uint64_t off;      /* file offset of buf[0] */
	const char *path;  /* RENAME: the old name, relative to fd */
	const char *path2; /* RENAME: the new name, relative to fd */
	uint64_t done;     /* bytes moved so far (engine) */
	uint32_t retries;  /* -EAGAIN/-EINTR resubmissions so far (engine) */
	int64_t res;       /* on completion: len (READ/WRITE) or 0, or a negative errno */
	void *ctx;         /* the submitter's */
	struct kvs_io_req *next; /* engine-private link */
};

struct kvs_io_eng;

struct kvs_io_eng_ops {
	/* Start req (0) or refuse it (-errno, nothing started): -EAGAIN with qd
	 * requests in the engine (submitted, not yet reaped; io_uring's submission
	 * ring has room for qd); io_uring also fails the first submit when its ring
	 * cannot be enabled.  So a caller that never has more than qd requests in
	 * the engine is refused nothing after its first successful submit. */
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
	/* The descriptor the issuer may sleep on (kvs_backend_wait_fd): readable while
	 * reap(.., 0) may return a request, and not after a reap that returned fewer
	 * than asked for until another one finishes; or -errno (-EOPNOTSUPP: none). */
	int (*wait_fd)(struct kvs_io_eng *e);
	/* Finish everything in flight, free the engine (NULL-tolerant caller). */
	void (*close)(struct kvs_io_eng *e);
};

struct kvs_io_eng {
	const struct kvs_io_eng_ops *ops;
	uint32_t kind;       /* KVS_IO_ENGINE_URING or _POOL */
	uint32_t info_flags; /* KVS_BACKEND_INFO_FIXED_BUFFERS once registered */
	uint32_t nfiles;     /* registered file slots (0: plain fds only) */
	uint64_t fixed_bytes; /* bytes pinned as fixed buffers: written by the issuer,
				 read by kvs_backend_info from any thread (relaxed
				 atomics: a statistic) */
};

/* io_uring engine (kernel build): ring of qd entries, nfiles registered file slots.
 * Returns -EPERM/-ENOSYS/-EACCES when io_uring is refused (caller may fall back). */
int kvs_io_uring_open(uint32_t qd, uint32_t nfiles, const struct kvs_log *log,
		      struct kvs_io_eng **out);
/* pthread pool of nthreads pread/pwrite workers for up to qd requests. */
int kvs_io_pool_open(uint32_t qd, uint32_t nthreads, const struct kvs_log *log,
		     struct kvs_io_eng **out);

/* 32 lowercase hex characters and a NUL. */
void kvs_io_block_hex(const struct kvs_block_id *block, char hex[33]);

/* Wait descriptors (notify.c; kvs_backend_wait_fd).  An eventfd, non-blocking:
 * the descriptor or -errno; signal makes it readable, drain unreadable. */
int kvs_io_event_open(void);
void kvs_io_event_signal(int fd);
void kvs_io_event_drain(int fd);

/* A timerfd on CLOCK_MONOTONIC, readable from the absolute time it is armed for. */
struct kvs_io_timer {
	int fd;            /* -1: none (arm is then a no-op) */
	uint64_t armed_ns; /* the time it is armed for, 0: disarmed */
};

/* 0 or -errno (t->fd is then -1). */
int kvs_io_timer_open(struct kvs_io_timer *t);
/* Close it (fd -1 is fine); t->fd is -1 after. */
void kvs_io_timer_close(struct kvs_io_timer *t);
/* Readable from due_ns on (already past: at once), and not before; 0 disarms.
 * No system call when already armed for due_ns. */
void kvs_io_timer_arm(struct kvs_io_timer *t, uint64_t due_ns);

/* An epoll descriptor watching fds[0..n) for EPOLLIN (readable while any is),
 * or -errno. */
int kvs_io_epoll_open(const int *fds, uint32_t n);

/* ------------------------------------------- stored geometry (format.c) */

/*
 * What a stored block holds: a handle's kvs_backend_config geometry, canonical
 * (a config without a tensor table has one tensor of shard_bytes), or what a
 * stored header says.  Two geometries are the same when every field is.
 */
struct kvs_io_geom {
	uint64_t shard_bytes;
	uint64_t layout_tag;
	uint64_t tensor_hash;  /* a 64-bit hash of the table (its count and sizes) */
	uint32_t spb;
	uint32_t tensor_count; /* 1..KVS_MAX_TENSORS; 0: only tensor_hash is known (Redis) */
	uint64_t tensor_bytes[KVS_MAX_TENSORS];
};

/* cfg's geometry (cfg validated: tensor_count <= KVS_MAX_TENSORS). */
void kvs_io_geom_init(struct kvs_io_geom *g, const struct kvs_backend_config *cfg);
/* Whether a and b describe the same layout (tables compared when both known). */
bool kvs_io_geom_same(const struct kvs_io_geom *a, const struct kvs_io_geom *b);
/* "shard_size 4096 x 2 shards per block, tensors 2x2048, layout_tag 0" into buf: the
 * table as runs of equal sizes, as its count and hash when it has many runs, as
 * its hash when unknown; with_hash adds the hash to a table shown as runs. */
void kvs_io_geom_describe(const struct kvs_io_geom *g, bool with_hash, char *buf, size_t len);
/* A buffer that holds any kvs_io_geom_describe text. */
#define KVS_IO_GEOM_DESCRIBE_MAX 320

/*
 * The header at offset 0 of a posix block file (docs/io.md, "Block file
 * format"): KVS_IO_BLOCK_HDR_FIXED bytes, then the tensor table (8 bytes per
 * tensor), zeros up to header_bytes; shard i at header_bytes + i * shard_bytes.
 */
#define KVS_IO_BLOCK_MAGIC "KVSHBLK" /* 7 bytes, then the version byte */
#define KVS_IO_BLOCK_VERSION 1
#define KVS_IO_BLOCK_HDR_FIXED 64
#define KVS_IO_BLOCK_HDR_USED(n) (KVS_IO_BLOCK_HDR_FIXED + 8 * (size_t)(n))
/* What a reader needs of a file to validate any header: a full table's. */
#define KVS_IO_BLOCK_HDR_MAX KVS_IO_BLOCK_HDR_USED(KVS_MAX_TENSORS)
/* header_bytes: 4096 (or the O_DIRECT alignment when larger), at most 1 MiB. */
#define KVS_IO_BLOCK_HDR_MIN_BYTES 4096
#define KVS_IO_BLOCK_HDR_MAX_BYTES (1 << 20)

struct kvs_io_block_hdr {
	uint32_t header_bytes; /* where shard 0 starts */
	uint32_t flags;        /* 0 (no flag is defined) */
	struct kvs_block_id block;
	struct kvs_io_geom geom; /* tensor_count: the table's entries (1..KVS_MAX_TENSORS) */
};

/* Write h's header into buf: KVS_IO_BLOCK_HDR_USED(min(tensor_count, max))
 * bytes, returned; the caller zeroes the rest of header_bytes.  Any field
 * value is written as given (the fuzzer builds hostile headers with it). */
size_t kvs_io_block_hdr_encode(const struct kvs_io_block_hdr *h, void *buf);
/* Read the header from the n bytes at offset 0 of a file in buf.  Returns 0 and
 * *h (geom.tensor_hash computed), or -EIO: not a block header of this format
 * (no magic, another version, cut short, a size or count out of range, a bad
 * checksum, unknown flags), described in why (NUL-terminated, whylen bytes). */
int kvs_io_block_hdr_decode(const void *buf, size_t n, struct kvs_io_block_hdr *h, char *why,
			    size_t whylen);

/*
 * The header in front of a shard's bytes in a Redis value (docs/io.md,
 * "redis"): KVS_IO_VALUE_HDR bytes; the tensor table travels as its hash.
 */
#define KVS_IO_VALUE_MAGIC "KVSHVAL" /* 7 bytes, then the version byte */
#define KVS_IO_VALUE_VERSION 1
#define KVS_IO_VALUE_HDR 64

struct kvs_io_value_hdr {
	struct kvs_block_id block;
	uint32_t shard;
	struct kvs_io_geom geom; /* decoded: tensor_count 0, only tensor_hash */
};

/* Write the header of shard `shard` of block, stored with geometry g, into buf
 * (KVS_IO_VALUE_HDR bytes). */
void kvs_io_value_hdr_encode(const struct kvs_io_geom *g, const struct kvs_block_id *block,
			     uint32_t shard, void *buf);
/* Read the header from the first n bytes of a value.  Returns 0 and *h, or
 * -EIO (shorter than a header, no magic, another version, a bad checksum),
 * described in why. */
int kvs_io_value_hdr_decode(const void *buf, size_t n, struct kvs_io_value_hdr *h, char *why,
			    size_t whylen);

#endif
