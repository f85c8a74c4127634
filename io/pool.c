/*
 * io/pool.c — the thread-pool engine: N worker threads doing pread/pwrite.
 *
 * The plain build's only engine, and the kernel build's fallback when io_uring is
 * refused.  The issuer appends requests to a submission list (bounded: at most
 * qd requests in the engine at once, -EAGAIN beyond) and signals a worker; a
 * worker moves the whole transfer with transfer_sync() (looping on short
 * transfers, EOF before len -> -EIO: the same semantics as the io_uring engine),
 * or makes the fdatasync, close or renameat call, then appends the request to
 * the completion list the issuer reaps, waiting on a
 * condition variable against an absolute CLOCK_MONOTONIC deadline.  One mutex
 * guards both lists: a transfer costs microseconds to milliseconds, so the lock
 * is never the bottleneck, and it keeps the engine obviously correct under TSan.
 *
 * The wait descriptor (made at the first wait_fd) is an eventfd readable exactly
 * while the completion list is not empty: the worker that appends to an empty
 * list signals it, the reap that empties the list drains it, both under the
 * mutex, so the two cannot disagree.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/internal.h"

struct pool {
	struct kvs_io_eng base;
	pthread_mutex_t mu;
	pthread_cond_t work_cv; /* submissions or stop, for workers */
	pthread_cond_t done_cv; /* completions, for the issuer */
	struct kvs_io_req *sub_head, *sub_tail;
	struct kvs_io_req *done_head, *done_tail;
	uint32_t qd;
	uint32_t inflight; /* submitted and not yet reaped */
	int efd;           /* wait descriptor (under mu), -1 until asked for */
	bool stop;
	uint32_t nthreads; /* started workers */
	pthread_t threads[];
};

/* Move one request: loops on short transfers, EINTR/EAGAIN retried, EOF before
 * len -> -EIO.  len or 0, or -errno. */
static int64_t transfer_sync(struct kvs_io_req *req)
{
	switch (req->op) {
	case KVS_IO_OP_FSYNC:
		while (fdatasync(req->fd) < 0)
			if (errno != EINTR)
				return -errno;
		return 0;
	case KVS_IO_OP_CLOSE:
		/* Never retried: Linux releases the descriptor even when close fails
		 * (EINTR included), and its number may be someone else's by now. */
		return close(req->fd) < 0 ? -errno : 0;
	case KVS_IO_OP_RENAME:
		return renameat(req->fd, req->path, req->fd, req->path2) < 0 ? -errno : 0;
	}
	while (req->done < req->len) {
		char *p = req->buf + req->done;
		size_t n = req->len - req->done;
		off_t off = (off_t)(req->off + req->done);
		ssize_t r = req->op == KVS_IO_OP_READ ? pread(req->fd, p, n, off)
						      : pwrite(req->fd, p, n, off);

		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO; /* end of file before len: a truncated block */
		req->done += (uint64_t)r;
	}
	return (int64_t)req->len;
}

static void *worker(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		struct kvs_io_req *req = p->sub_head;

		if (!req) {
			if (p->stop)
				break;
			pthread_cond_wait(&p->work_cv, &p->mu);
			continue;
		}
		p->sub_head = req->next;
		if (!p->sub_head)
			p->sub_tail = NULL;
		pthread_mutex_unlock(&p->mu);

		req->res = transfer_sync(req);
		req->next = NULL;

		pthread_mutex_lock(&p->mu);
		if (p->done_tail) {
			p->done_tail->next = req;
		} else {
			p->done_head = req;
			if (p->efd >= 0)
				kvs_io_event_signal(p->efd);
		}
		p->done_tail = req;
		pthread_cond_signal(&p->done_cv);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

static int pool_submit(struct kvs_io_eng *e, struct kvs_io_req *req)
{
	struct pool *p = (struct pool *)e;

	pthread_mutex_lock(&p->mu);
	if (p->inflight >= p->qd) {
		pthread_mutex_unlock(&p->mu);
		return -EAGAIN;
	}
	p->inflight++;
	req->done = 0;
	req->next = NULL;
	if (p->sub_tail)
		p->sub_tail->next = req;
	else
		p->sub_head = req;
	p->sub_tail = req;
	pthread_cond_signal(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	return 0;
}

static int pool_reap(struct kvs_io_eng *e, struct kvs_io_req **out, uint32_t max,
		     uint64_t deadline_ns)
{
	struct pool *p = (struct pool *)e;
	uint32_t n = 0;

	pthread_mutex_lock(&p->mu);
	while (!p->done_head && p->inflight > 0 && kvs_now_ns() < deadline_ns) {
		struct timespec ts = kvs_ns_to_timespec(deadline_ns);

		if (deadline_ns == KVS_DEADLINE_NONE)
			pthread_cond_wait(&p->done_cv, &p->mu);
		else
			pthread_cond_timedwait(&p->done_cv, &p->mu, &ts);
	}
	while (n < max && p->done_head) {
		out[n++] = p->done_head;
		p->done_head = p->done_head->next;
		p->inflight--;
	}
	if (!p->done_head) {
		p->done_tail = NULL;
		if (n > 0 && p->efd >= 0)
			kvs_io_event_drain(p->efd);
	}
	pthread_mutex_unlock(&p->mu);
	return (int)n;
}

static int pool_wait_fd(struct kvs_io_eng *e)
{
	struct pool *p = (struct pool *)e;
	int fd;

	pthread_mutex_lock(&p->mu);
	fd = p->efd;
	if (fd < 0) {
		fd = kvs_io_event_open(); /* or -errno: efd stays -1, a later call retries */
		if (fd >= 0) {
			p->efd = fd;
			if (p->done_head) /* finished before it was asked for */
				kvs_io_event_signal(fd);
		}
	}
	pthread_mutex_unlock(&p->mu);
	return fd;
}

static void pool_close(struct kvs_io_eng *e)
{
	struct pool *p = (struct pool *)e;

	pthread_mutex_lock(&p->mu);
	p->stop = true; /* workers drain the submission list, then exit */
	pthread_cond_broadcast(&p->work_cv);
	pthread_mutex_unlock(&p->mu);
	for (uint32_t i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_cond_destroy(&p->done_cv);
	pthread_cond_destroy(&p->work_cv);
	pthread_mutex_destroy(&p->mu);
	if (p->efd >= 0)
		close(p->efd);
	free(p);
}

static const struct kvs_io_eng_ops pool_ops = {
	.submit = pool_submit,
	.reap = pool_reap,
	.wait_fd = pool_wait_fd,
	.close = pool_close,
};

int kvs_io_pool_open(uint32_t qd, uint32_t nthreads, const struct kvs_log *log,
		     struct kvs_io_eng **out)
{
	struct pool *p = calloc(1, sizeof(*p) + nthreads * sizeof(pthread_t));
	pthread_condattr_t ca;
	int rc;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->base.ops = &pool_ops;
	p->base.kind = KVS_IO_ENGINE_POOL;
	p->qd = qd;
	p->efd = -1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work_cv, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&p->done_cv, &ca);
	pthread_condattr_destroy(&ca);
	for (uint32_t i = 0; i < nthreads; i++) {
		rc = pthread_create(&p->threads[i], NULL, worker, p);
		if (rc) {
			kvs_log_error(log, "backend: pool worker %u: pthread_create: %d", i, rc);
			pool_close(&p->base);
			return -rc;
		}
		pthread_setname_np(p->threads[i], "kvs-pool");
		p->nthreads++;
	}
	*out = &p->base;
	return 0;
}
