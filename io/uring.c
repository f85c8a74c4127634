/*
 * io/uring.c — the io_uring engine of the posix backend (kernel build).
 *
 * One ring per backend handle, and a handle has one issuing thread (the store's
 * dispatcher), so the ring is created IORING_SETUP_SINGLE_ISSUER |
 * IORING_SETUP_DEFER_TASKRUN: no io-wq wakeups of other threads, completions run
 * as task work when the issuer waits.  IORING_SETUP_TASKRUN_FLAG makes the
 * kernel say so (IORING_SQ_TASKRUN) when such work is pending, and liburing's
 * peek then enters the kernel to run it: a reap that finds nothing costs no
 * system call.  The ring is created disabled
 * (IORING_SETUP_R_DISABLED) and enabled on first use, so the issuing thread —
 * not the one that opened the handle — becomes the ring's single issuer and
 * files/buffers can be registered before that.  Kernels without these flags get
 * a plain ring (retried on -EINVAL).
 *
 * Requests go to the kernel at once (io_uring_submit after every submit: a read
 * starts the moment its slot is located; batching only what is already queued).
 * Reads and writes inside a registered region use READ_FIXED/WRITE_FIXED (no
 * per-IO page pinning) once their chunk of it is pinned: registration only
 * plans, and chunks are pinned on first use, one per submit (uring_bufs.c).  Files come from the posix backend's fd cache
 * through a sparse registered-file table (IOSQE_FIXED_FILE).  A short transfer is
 * resubmitted for its remainder; a zero-byte read before len (end of file) is
 * -EIO; any other cqe->res error passes through unchanged.  A dumped block's
 * fdatasync, close and renameat are requests like the writes (IORING_OP_FSYNC;
 * IORING_OP_CLOSE from Linux 5.6 and IORING_OP_RENAMEAT from 5.11, both below
 * the 5.14 the library needs); the kernel runs them on its io-wq workers when
 * they would block.
 *
 * Wait descriptor: an eventfd registered with the ring at open (before the ring
 * is enabled, so no completion can predate it).  The kernel signals it when a
 * completion is queued as deferred task work onto an empty list (the issuer
 * asleep in epoll wakes although no CQE is posted yet) and whenever CQEs are
 * posted, our own reap's included.  Measured on Linux 6.18 (docs/io.md): a
 * reap that drains the eventfd first and then runs the task work leaves it
 * readable after every completion, from the CQE its own flush posts — one
 * spurious wake per real one; IORING_CQ_EVENTFD_DISABLED around the reap avoids
 * that but also swallows the signal of task work queued meanwhile, and nothing
 * repeats it.  So a reap drains last: it peeks (running the task work), and
 * only when it returns fewer than asked for drains the eventfd and looks once
 * more (CQ ready, IORING_SQ_TASKRUN), reaping on if something slipped in
 * between the peek and the drain.  Before the first wait_fd the eventfd is
 * signalled but never drained: nobody sleeps on it, and a reap costs nothing
 * more.  One late wake stays possible and is harmless: the kernel raises the
 * task-work signal after it sets IORING_SQ_TASKRUN, and may defer a signal to an
 * RCU callback, so a reap can take a completion before its signal lands; the
 * next reap finds nothing and drains it (seen under TSan's slower timing, once
 * after 64 transfers).  A kernel that refuses the registration leaves the engine without a
 * descriptor (-EOPNOTSUPP, logged at open).
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/internal.h"
#include "io/uring_bufs.h"

#define SQE_MAX_BYTES (UINT64_C(1) << 30)    /* sqe->len is 32-bit; chunk big transfers */
#define MAX_RETRIES 16                       /* -EAGAIN/-EINTR resubmissions per request */

struct uring {
	struct kvs_io_eng base;
	struct io_uring ring;
	bool disabled; /* created R_DISABLED, not yet enabled by the issuer */
	bool watched;  /* wait_fd was asked for: reap keeps efd exact */
	int efd;       /* eventfd registered with the ring, -1: none */
	uint32_t qd;
	uint32_t inflight;
	struct kvs_uring_bufs bufs; /* fixed buffers, pinned on first use */
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
	idx = kvs_uring_bufs_index(&u->bufs, p, n);
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
	case KVS_IO_OP_FSYNC:
		io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
		break;
	case KVS_IO_OP_CLOSE: /* IORING_OP_CLOSE: Linux 5.6 */
		io_uring_prep_close(sqe, req->fd);
		break;
	default: /* KVS_IO_OP_RENAME; IORING_OP_RENAMEAT: Linux 5.11 */
		io_uring_prep_renameat(sqe, req->fd, req->path, req->fd, req->path2, 0);
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
	kvs_uring_bufs_pin_next(&u->bufs); /* the transfer is on its way first */
	return 0;
}

/* Handle one cqe: true when req is finished (req->res set), false if resubmitted. */
static bool complete(struct uring *u, struct kvs_io_req *req, int res)
{
	if (req->op != KVS_IO_OP_READ && req->op != KVS_IO_OP_WRITE) {
		req->res = res < 0 ? res : 0; /* fsync, close, rename: not retried */
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

/*
 * Reap is about to return fewer requests than asked for: with the eventfd
 * watched, drain it, then look again -- a completion posted, or queued as task
 * work, between the last peek and the drain signalled the eventfd just emptied.
 * Returns true when there is something to reap after all.
 */
static bool settle(struct uring *u)
{
	unsigned sq_flags;

	if (!u->watched)
		return false;
	kvs_io_event_drain(u->efd);
	/* acquire: the kernel sets IORING_SQ_TASKRUN before it signals the eventfd,
	 * and a signal the drain consumed was taken under the eventfd's lock after
	 * that store, so the flag is visible here; acquire keeps the load after the
	 * read.  io_uring_cq_ready loads the CQ tail with acquire likewise. */
	sq_flags = __atomic_load_n(u->ring.sq.kflags, __ATOMIC_ACQUIRE);
	return io_uring_cq_ready(&u->ring) > 0 || (sq_flags & IORING_SQ_TASKRUN);
}

static int uring_reap(struct kvs_io_eng *e, struct kvs_io_req **out, uint32_t max,
		      uint64_t deadline_ns)
{
	struct uring *u = (struct uring *)e;
	uint32_t n = 0;

	if (u->inflight == 0) {
		settle(u); /* a signal left from a reap that returned max */
		return 0;
	}
	if (enable(u) < 0)
		return -EIO;
	for (;;) {
		struct io_uring_cqe *cqe;
		bool resubmitted = false;

		/* Runs task work flagged IORING_SQ_TASKRUN (a system call) first. */
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
		if (n == max)
			return (int)n; /* more may be ready: the eventfd stays readable */
		uint64_t now = kvs_now_ns();
		if (n > 0 || u->inflight == 0 || now >= deadline_ns) {
			if (settle(u))
				continue;
			return (int)n;
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
	return kvs_uring_bufs_plan(&((struct uring *)e)->bufs, bufs, n);
}

static int uring_wait_fd(struct kvs_io_eng *e)
{
	struct uring *u = (struct uring *)e;

	if (u->efd < 0)
		return -EOPNOTSUPP; /* the registration was refused at open */
	if (!u->watched) {
		u->watched = true;
		/* Start exact: signals so far were never drained. */
		if (settle(u))
			kvs_io_event_signal(u->efd);
	}
	return u->efd;
}

static void uring_close(struct kvs_io_eng *e)
{
	struct uring *u = (struct uring *)e;

	io_uring_queue_exit(&u->ring);
	if (u->efd >= 0)
		close(u->efd);
	kvs_uring_bufs_fini(&u->bufs);
	free(u);
}

static const struct kvs_io_eng_ops uring_ops = {
	.submit = uring_submit,
	.reap = uring_reap,
	.set_file = uring_set_file,
	.register_buffers = uring_register_buffers,
	.wait_fd = uring_wait_fd,
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
	kvs_uring_bufs_init(&u->bufs, &u->ring, &u->base, &u->log);
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
		  IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_R_DISABLED;
	rc = io_uring_queue_init_params(qd, &u->ring, &p);
	if (rc == -EINVAL) {
		kvs_log_info(log, "backend: io_uring without SINGLE_ISSUER|DEFER_TASKRUN|"
				  "TASKRUN_FLAG (kernel refused them)");
		memset(&p, 0, sizeof(p));
		rc = io_uring_queue_init_params(qd, &u->ring, &p);
	}
	if (rc < 0) {
		free(u);
		return rc;
	}
	u->disabled = (p.flags & IORING_SETUP_R_DISABLED) != 0;
	u->efd = kvs_io_event_open();
	rc = u->efd < 0 ? u->efd : io_uring_register_eventfd(&u->ring, u->efd);
	if (rc < 0) {
		kvs_log_info(log, "backend: io_uring eventfd: %s; no wait descriptor (the issuer "
				  "sleeps in timed polls)", strerror(-rc));
		if (u->efd >= 0)
			close(u->efd);
		u->efd = -1;
	}
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
