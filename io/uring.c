/*
 * io/uring.c — the io_uring engine of the posix backend (kernel build).
 *
 * One ring per backend handle, and a handle has one issuing thread (the store's
 * dispatcher), so the ring is created IORING_SETUP_SINGLE_ISSUER |
 * IORING_SETUP_DEFER_TASKRUN: no io-wq wakeups of other threads, completions run
 * as task work when the issuer waits.  The ring is created disabled
 * (IORING_SETUP_R_DISABLED) and enabled on first use, so the issuing thread —
 * not the one that opened the handle — becomes the ring's single issuer and
 * files/buffers can be registered before that.  Kernels without these flags get
 * a plain ring (retried on -EINVAL).
 *
 * Requests go to the kernel at once (io_uring_submit after every submit: a read
 * starts the moment its slot is located; batching only what is already queued).
 * Reads and writes inside a registered region use READ_FIXED/WRITE_FIXED (no
 * per-IO page pinning); regions over 1 GiB are registered as several buffers
 * (the kernel's per-buffer limit).  Files come from the posix backend's fd cache
 * through a sparse registered-file table (IOSQE_FIXED_FILE).  A short transfer is
 * resubmitted for its remainder; a zero-byte read before len (end of file) is
 * -EIO; any other cqe->res error passes through unchanged.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/internal.h"

#define REGION_MAX_BYTES (UINT64_C(1) << 30) /* kernel limit per fixed buffer */
#define SQE_MAX_BYTES (UINT64_C(1) << 30)    /* sqe->len is 32-bit; chunk big transfers */
#define MAX_RETRIES 16                       /* -EAGAIN/-EINTR resubmissions per request */

struct region {
	char *base;
	uint64_t len;
};

struct uring {
	struct kvs_io_eng base;
	struct io_uring ring;
	bool disabled; /* created R_DISABLED, not yet enabled by the issuer */
	uint32_t qd;
	uint32_t inflight;
	struct region *regions; /* fixed buffer i = regions[i] */
	uint32_t nregions;
	struct kvs_log log;
};

static int enable(struct uring *u)
{
	int rc;

	if (!u->disabled)
		return 0;
	/* The caller becomes the single issuer.  Raw syscall: liburing 2.3 declares
	 * io_uring_enable_rings() but does not export it (fixed in 2.4's map). */
	rc = (int)syscall(__NR_io_uring_register, u->ring.ring_fd, IORING_REGISTER_ENABLE_RINGS,
			  NULL, 0);
	if (rc < 0)
		return -errno;
	u->disabled = false;
	return 0;
}

static int region_of(const struct uring *u, const char *p, uint64_t len)
{
	for (uint32_t i = 0; i < u->nregions; i++)
		if (p >= u->regions[i].base && len <= u->regions[i].len &&
		    (uint64_t)(p - u->regions[i].base) <= u->regions[i].len - len)
			return (int)i;
	return -1;
}

/* Queue (the remainder of) req; the caller submits. */
static int prep(struct uring *u, struct kvs_io_req *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	uint64_t n = req->len - req->done;
	char *p = req->buf + req->done;
	int fd = req->file_idx >= 0 ? req->file_idx : req->fd;
	int idx;

	if (!sqe)
		return -EAGAIN;
	if (n > SQE_MAX_BYTES)
		n = SQE_MAX_BYTES;
	idx = region_of(u, p, n);
	switch (req->op) {
	case KVS_IO_OP_READ:
		if (idx >= 0)
			io_uring_prep_read_fixed(sqe, fd, p, (unsigned)n, req->off + req->done, idx);
		else
			io_uring_prep_read(sqe, fd, p, (unsigned)n, req->off + req->done);
		break;
	case KVS_IO_OP_WRITE:
		if (idx >= 0)
			io_uring_prep_write_fixed(sqe, fd, p, (unsigned)n, req->off + req->done,
						  idx);
		else
			io_uring_prep_write(sqe, fd, p, (unsigned)n, req->off + req->done);
		break;
	default:
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		break;
	}
	if (req->file_idx >= 0)
		sqe->flags |= IOSQE_FIXED_FILE;
	io_uring_sqe_set_data(sqe, req);
	return 0;
}

static int uring_submit(struct kvs_io_eng *e, struct kvs_io_req *req)
{
	struct uring *u = (struct uring *)e;
	int rc;

	if (u->inflight >= u->qd)
		return -EAGAIN;
	rc = enable(u);
	if (rc < 0)
		return rc;
	req->done = 0;
	req->retries = 0;
	rc = prep(u, req);
	if (rc < 0)
		return rc;
	u->inflight++;
	/* A failed enter leaves the sqe queued: the next submit or reap sends it. */
	io_uring_submit(&u->ring);
	return 0;
}

/* Handle one cqe: true when req is finished (req->res set), false if resubmitted. */
static bool complete(struct uring *u, struct kvs_io_req *req, int res)
{
	if (req->op == KVS_IO_OP_FSYNC) {
		req->res = res < 0 ? res : 0;
		return true;
	}
	if (res > 0 || ((res == -EAGAIN || res == -EINTR) && req->retries++ < MAX_RETRIES)) {
		if (res > 0)
			req->done += (uint64_t)res;
		if (req->done == req->len) {
			req->res = (int64_t)req->len;
			return true;
		}
		if (prep(u, req) == 0)
			return false; /* short transfer: the remainder goes out again */
		res = -EIO;
	}
	req->res = res == 0 ? -EIO : res; /* 0 = end of file before len: truncated */
	return true;
}

static int uring_reap(struct kvs_io_eng *e, struct kvs_io_req **out, uint32_t max,
		      uint64_t deadline_ns)
{
	struct uring *u = (struct uring *)e;
	uint32_t n = 0;
	bool waited = false;

	if (u->inflight == 0)
		return 0;
	if (enable(u) < 0)
		return -EIO;
	for (;;) {
		struct io_uring_cqe *cqe;
		bool resubmitted = false;

		while (n < max && io_uring_peek_cqe(&u->ring, &cqe) == 0) {
			struct kvs_io_req *req = io_uring_cqe_get_data(cqe);
			int res = cqe->res;

			io_uring_cqe_seen(&u->ring, cqe);
			if (complete(u, req, res)) {
				u->inflight--;
				out[n++] = req;
			} else {
				resubmitted = true;
			}
		}
		if (resubmitted)
			io_uring_submit(&u->ring);
		if (n > 0 || u->inflight == 0)
			return (int)n;
		uint64_t now = kvs_now_ns();
		if (now >= deadline_ns) {
			if (waited)
				return 0;
			/* Run deferred task work once so ready completions show up. */
			io_uring_get_events(&u->ring);
			waited = true;
			continue;
		}
		uint64_t left = deadline_ns - now;
		struct __kernel_timespec ts = {
			.tv_sec = (long long)(left / KVS_NSEC_PER_SEC),
			.tv_nsec = (long long)(left % KVS_NSEC_PER_SEC),
		};
		/* Also flushes sqes left queued by a failed enter. */
		int rc = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1,
							  deadline_ns == KVS_DEADLINE_NONE ? NULL
											    : &ts,
							  NULL);
		if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
			return rc;
	}
}

static int uring_set_file(struct kvs_io_eng *e, int idx, int fd)
{
	struct uring *u = (struct uring *)e;
	int rc;

	if (!u->base.nfiles)
		return 0;
	rc = io_uring_register_files_update(&u->ring, (unsigned)idx, &fd, 1);

	return rc < 0 ? rc : 0;
}

static int uring_register_buffers(struct kvs_io_eng *e, const struct kvs_backend_buffer *bufs,
				  uint32_t n)
{
	struct uring *u = (struct uring *)e;
	uint32_t count = 0, k = 0;
	struct iovec *iov;
	struct region *regs;
	int rc;

	for (uint32_t i = 0; i < n; i++)
		count += (uint32_t)((bufs[i].len + REGION_MAX_BYTES - 1) / REGION_MAX_BYTES);
	if (u->nregions) {
		io_uring_unregister_buffers(&u->ring);
		free(u->regions);
		u->regions = NULL;
		u->nregions = 0;
		u->base.info_flags &= ~KVS_BACKEND_INFO_FIXED_BUFFERS;
	}
	if (count == 0)
		return 0;
	iov = calloc(count, sizeof(*iov));
	regs = calloc(count, sizeof(*regs));
	if (!iov || !regs) {
		free(iov);
		free(regs);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++)
		for (uint64_t off = 0; off < bufs[i].len; off += REGION_MAX_BYTES, k++) {
			uint64_t len = bufs[i].len - off;

			regs[k].base = (char *)bufs[i].base + off;
			regs[k].len = len < REGION_MAX_BYTES ? len : REGION_MAX_BYTES;
			iov[k].iov_base = regs[k].base;
			iov[k].iov_len = regs[k].len;
		}
	rc = io_uring_register_buffers(&u->ring, iov, count);
	free(iov);
	if (rc < 0) {
		kvs_log_error(&u->log, "backend: io_uring_register_buffers (%u buffers): %s%s",
			      count, strerror(-rc),
			      rc == -ENOMEM ? " (raise RLIMIT_MEMLOCK)" : "");
		free(regs);
		return rc;
	}
	u->regions = regs;
	u->nregions = count;
	u->base.info_flags |= KVS_BACKEND_INFO_FIXED_BUFFERS;
	return 0;
}

static void uring_close(struct kvs_io_eng *e)
{
	struct uring *u = (struct uring *)e;

	io_uring_queue_exit(&u->ring);
	free(u->regions);
	free(u);
}

static const struct kvs_io_eng_ops uring_ops = {
	.submit = uring_submit,
	.reap = uring_reap,
	.set_file = uring_set_file,
	.register_buffers = uring_register_buffers,
	.close = uring_close,
};

int kvs_io_uring_open(uint32_t qd, uint32_t nfiles, const struct kvs_log *log,
		      struct kvs_io_eng **out)
{
	struct uring *u = calloc(1, sizeof(*u));
	struct io_uring_params p;
	int rc;

	*out = NULL;
	if (!u)
		return -ENOMEM;
	u->base.ops = &uring_ops;
	u->base.kind = KVS_IO_ENGINE_URING;
	u->qd = qd;
	u->log = *log;
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
	rc = io_uring_queue_init_params(qd, &u->ring, &p);
	if (rc == -EINVAL) {
		kvs_log_info(log, "backend: io_uring without SINGLE_ISSUER|DEFER_TASKRUN "
				  "(kernel refused them)");
		memset(&p, 0, sizeof(p));
		rc = io_uring_queue_init_params(qd, &u->ring, &p);
	}
	if (rc < 0) {
		free(u);
		return rc;
	}
	u->disabled = (p.flags & IORING_SETUP_R_DISABLED) != 0;
	/* Registered files save an fget/fput per transfer; without them (the table
	 * is bounded by RLIMIT_NOFILE) plain descriptors work the same. */
	rc = io_uring_register_files_sparse(&u->ring, nfiles);
	if (rc < 0)
		kvs_log_info(log, "backend: io_uring_register_files_sparse(%u): %s; using plain "
				  "file descriptors", nfiles, strerror(-rc));
	else
		u->base.nfiles = nfiles;
	*out = &u->base;
	return 0;
}
