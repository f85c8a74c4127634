/*
 * io/posix.c — the posix backend: one file per block under one or more roots.
 *
 * Files.  This one is the handle: open (its roots, the engine and the fallback
 * from io_uring to the thread pool, the header of the files it writes), close,
 * info, and the requests it hands to the engine, which poll reaps (a read ends
 * there; a write may go on to the next step of its dump).  io/posix_roots.c is
 * the roots on disk: where a block's file lives (Naming), the probe of each
 * root at open (O_DIRECT included) and the crash cleanup of temp files;
 * io/posix_read.c reads block files (their headers, the fd cache, lookup);
 * io/posix_ahead.c opens the files of hinted blocks ahead of their reads;
 * io/posix_write.c dumps them (temp file, header, shards, fdatasync, close,
 * rename); io/posix_impl.h holds the types they share.
 *
 * What a file holds.  A block file starts with a header (io/format.c; docs/io.md,
 * "Block file format") naming its block and geometry: shard_bytes,
 * shards_per_block, the tensor table, layout_tag; checksummed.  Shard i lives
 * at header_bytes + i * shard_bytes, header_bytes being 4096, or the O_DIRECT
 * offset alignment when larger, so that O_DIRECT reads of shards stay aligned (a
 * reader takes the size from the file's header).  A dump writes the header
 * through the engine like a shard (io/posix_write.c, Dumps).  A reader reads and
 * checks it when it opens the file (io/posix_read.c, Headers).
 *
 * What the issuer still does itself (docs/io.md, "posix details"):
 *  - create a dump's temp file: one openat(O_CREAT), and mkdirat of the fan-out
 *    directories only when that says ENOENT.  Every write of the block is
 *    submitted on the descriptor it returns, so with the create in the engine
 *    the block's other writes (the store submits them right behind the first)
 *    would have to wait inside the backend until it exists, and a failed
 *    create would owe each of them a completion, which only a request of the
 *    engine (a no-op per held write) can deliver without breaking the wait
 *    descriptor's contract.  io_uring has no mkdirat before Linux 5.15, and
 *    the library runs on 5.14.  It is one call per block, not per shard, and
 *    moves no data (its cost: docs/io.md);
 *  - open a block file for reading and read its header, once per fd cache
 *    entry (a read of header_bytes), unless a hint had its opener thread do
 *    that ahead (io/posix_ahead.c);
 *  - close and unlink a failed dump's temp file (the failure path, and close).
 *
 * Single issuer: submit/poll/register_buffers from one thread (the engine's
 * ring); lookup from any thread (it only reads immutable state).  The wait
 * descriptor is the engine's (an eventfd either way).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/io.h"
#include "io/posix_impl.h"

#define CLOSE_DRAIN_NS (30 * KVS_NSEC_PER_SEC)
#define REAP_BATCH 64

/* --------------------------------------------------------------- requests */

struct preq *preq_get(struct posix *p)
{
	struct preq *r = p->free_reqs;

	if (r) {
		p->free_reqs = r->next_free;
		memset(r, 0, sizeof(*r));
	}
	return r;
}

void preq_put(struct posix *p, struct preq *r)
{
	r->next_free = p->free_reqs;
	p->free_reqs = r;
}

/* The engine request for one caller transfer: op on fd (or registered file
 * file_idx, -1 for none) at byte off. */
void preq_fill(struct preq *r, const struct kvs_backend_io *io, uint32_t op, int fd,
	       int file_idx, uint64_t off)
{
	r->token = io->token;
	r->len = io->len;
	r->req.op = op;
	r->req.fd = fd;
	r->req.file_idx = file_idx;
	r->req.buf = io->buf;
	r->req.len = io->len;
	r->req.off = off;
	r->req.ctx = r;
}

int engine_submit(struct posix *p, struct preq *r)
{
	int rc = p->eng->ops->submit(p->eng, &r->req);

	if (rc == 0)
		p->active++;
	return rc;
}

static int posix_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		      uint64_t timeout_ns)
{
	struct posix *p = state;
	uint64_t deadline = kvs_deadline_after(timeout_ns);
	uint32_t n = 0;

	while (n < max) {
		struct kvs_io_req *done[REAP_BATCH];
		uint32_t want = max - n < REAP_BATCH ? max - n : REAP_BATCH;
		int got = p->eng->ops->reap(p->eng, done, want, n ? 0 : deadline);

		if (got < 0)
			return n ? (int)n : got;
		if (got == 0)
			break;
		for (int i = 0; i < got; i++) {
			struct preq *r = done[i]->ctx;
			int64_t res = r->req.res;

			p->active--;
			if (r->req.op == KVS_IO_OP_READ) {
				fd_put(p, r->fe);
			} else if (!write_done(p, r, &res)) {
				continue; /* went on to its next step; completes later */
			}
			out[n].token = r->token;
			out[n].result = res;
			n++;
			preq_put(p, r);
		}
		/* The engine had no more ready: asking again costs a syscall for nothing. */
		if (n > 0 && (uint32_t)got < want)
			break;
	}
	return (int)n;
}

static int posix_wait_fd(void *state)
{
	struct posix *p = state;

	return p->eng->ops->wait_fd(p->eng);
}

static int posix_register_buffers(void *state, const struct kvs_backend_buffer *bufs, uint32_t n)
{
	struct posix *p = state;

	return p->eng->ops->register_buffers ? p->eng->ops->register_buffers(p->eng, bufs, n) : 0;
}

static void posix_info(void *state, struct kvs_backend_info *info)
{
	struct posix *p = state;

	info->io_engine = p->eng->kind;
	info->flags = p->eng->info_flags | (p->fallback_err ? KVS_BACKEND_INFO_FALLBACK : 0) |
		      ((p->flags & KVS_BACKEND_F_IO_DIRECT) ? KVS_BACKEND_INFO_IO_DIRECT : 0) |
		      KVS_BACKEND_INFO_BLOCK_ATOMIC; /* one file, renamed in once whole */
	info->fallback_err = p->fallback_err;
	info->dio_mem_align = p->dio_mem;
	info->dio_offset_align = p->dio_off;
	info->fixed_bytes = __atomic_load_n(&p->eng->fixed_bytes, __ATOMIC_RELAXED);
}

static void posix_close(void *state)
{
	struct posix *p = state;

	if (!p)
		return;
	if (p->eng) {
		uint64_t deadline = kvs_deadline_after(CLOSE_DRAIN_NS);
		struct kvs_backend_completion scratch[REAP_BATCH];

		uint64_t now;

		while (p->active && (now = kvs_now_ns()) < deadline)
			if (posix_poll(p, scratch, REAP_BATCH, deadline - now) < 0)
				break;
		if (p->active)
			kvs_log_error(&p->log, "backend: close: %u transfers still in flight",
				      p->active);
	}
	ahead_fini(p);
	while (p->pending)
		pending_discard(p, p->pending);
	for (uint32_t i = 0; p->fds && i < p->nfds; i++)
		if (p->fds[i].fd >= 0)
			close(p->fds[i].fd);
	if (p->eng)
		p->eng->ops->close(p->eng);
	for (uint32_t i = 0; i < p->nroots; i++) {
		if (p->root_fd[i] >= 0)
			close(p->root_fd[i]);
		free(p->root_name[i]);
	}
	pthread_mutex_destroy(&p->warn_mu);
	free(p->hdr_buf);
	free(p->fds);
	free(p->reqs);
	free(p);
}

/* An io_uring setup error that refuses io_uring but leaves the thread pool
 * working (io_engine=auto falls back): what it usually means, for the log; NULL
 * for any other error.  -ENOMEM: the kernel charges a ring's memory to
 * RLIMIT_MEMLOCK without CAP_IPC_LOCK. */
static const char *uring_refusal(int rc)
{
	if (rc == -ENOMEM)
		return ": RLIMIT_MEMLOCK too low for its rings? raise it, or io_engine=pool";
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES)
		return ": seccomp or kernel.io_uring_disabled?";
	return NULL;
}

static int open_engine(struct posix *p, const struct kvs_backend_config *cfg)
{
	int rc;

	if (KVS_KERNEL && cfg->io_engine != KVS_IO_ENGINE_POOL) {
		const char *why;

		rc = kvs_io_uring_open(p->qd, p->nfds, &p->log, &p->eng);
		if (rc == 0)
			return 0;
		why = uring_refusal(rc);
		if (!why || cfg->io_engine == KVS_IO_ENGINE_URING) {
			kvs_log_error(&p->log, "backend: io_engine=%s: io_uring setup: %s%s",
				      kvs_io_engine_name(cfg->io_engine), strerror(-rc),
				      why ? why : "");
			return rc;
		}
		p->fallback_err = rc;
		kvs_log_warn(&p->log, "backend: io_uring refused (%s%s); using the thread pool",
			     strerror(-rc), why);
	}
	return kvs_io_pool_open(p->qd, cfg->pool_threads, &p->log, &p->eng);
}

/* A buffer of hdr.header_bytes aligned for O_DIRECT (memory alignment, at least
 * a page), or NULL. */
unsigned char *hdr_buf_alloc(const struct posix *p)
{
	void *buf = NULL;

	if (posix_memalign(&buf, p->dio_mem > 4096 ? p->dio_mem : 4096, p->hdr.header_bytes))
		return NULL;
	return buf;
}

/* The header of the files this handle writes (each dump encodes it into a
 * buffer of its own) and the buffer headers are read through: 4096 bytes, or
 * the O_DIRECT offset alignment when larger (a multiple of it). */
static int header_init(struct posix *p, const struct kvs_backend_config *cfg)
{
	uint64_t align = p->dio_off ? p->dio_off : 1;
	uint64_t bytes = (KVS_IO_BLOCK_HDR_MIN_BYTES + align - 1) / align * align;

	if (bytes > KVS_IO_BLOCK_HDR_MAX_BYTES) {
		kvs_log_error(&p->log, "backend: io_direct: an O_DIRECT alignment of %u bytes would "
				       "make block headers larger than %d bytes", p->dio_off,
			      KVS_IO_BLOCK_HDR_MAX_BYTES);
		return -EINVAL;
	}
	p->hdr.header_bytes = (uint32_t)bytes;
	p->hdr_buf = hdr_buf_alloc(p);
	if (!p->hdr_buf)
		return -ENOMEM;
	kvs_io_geom_init(&p->hdr.geom, cfg);
	return 0;
}

static int posix_open(const struct kvs_backend_config *cfg, void **state)
{
	struct posix *p = calloc(1, sizeof(*p));
	int rc = 0;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->warn_mu, NULL);
	ahead_init(p);
	p->log.fn = cfg->log;
	p->log.arg = cfg->log_arg;
	p->shard_bytes = cfg->shard_bytes;
	p->spb = cfg->shards_per_block;
	p->qd = cfg->queue_depth;
	p->flags = cfg->flags;
	p->nfds = fd_cache_size(cfg->queue_depth);
	p->rand_state = kvs_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)p;
	set_host_tag(p);
	for (uint32_t i = 0; i < KVS_BACKEND_MAX_ROOTS; i++)
		p->root_fd[i] = -1;
	for (uint32_t i = 0; i < cfg->nroots && rc == 0; i++) {
		p->root_fd[i] = open(cfg->roots[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		p->root_name[i] = strdup(cfg->roots[i]);
		p->nroots = i + 1;
		if (!p->root_name[i]) {
			rc = -ENOMEM;
		} else if (p->root_fd[i] < 0) {
			rc = -errno;
			kvs_log_error(&p->log, "backend: root %s: %s%s", cfg->roots[i], strerror(-rc),
				      rc == -ENOENT ? " (create it, or fix the roots)" : "");
		} else {
			rc = probe_root(p, i, cfg->roots[i]);
		}
	}
	if (rc == 0)
		rc = header_init(p, cfg);
	p->reqs = calloc(p->qd, sizeof(*p->reqs));
	p->fds = calloc(p->nfds, sizeof(*p->fds));
	/* -1 before anything can fail: posix_close closes every fd >= 0 (a zeroed
	 * cache closed descriptor 0, the process's stdin, nfds times) */
	for (uint32_t i = 0; p->fds && i < p->nfds; i++)
		p->fds[i].fd = -1;
	if (rc == 0 && (!p->reqs || !p->fds))
		rc = -ENOMEM;
	if (rc == 0) {
		for (uint32_t i = p->qd; i-- > 0;)
			preq_put(p, &p->reqs[i]);
		for (uint32_t i = 0; i < p->nroots; i++)
			clean_root(p, p->root_fd[i], cfg->roots[i]);
		rc = open_engine(p, cfg);
	}
	if (rc < 0) {
		posix_close(p);
		return rc;
	}
	kvs_log_info(&p->log, "backend: posix, %u root(s), engine %s%s%s", p->nroots,
		     kvs_io_engine_name(p->eng->kind), p->fallback_err ? " (fallback)" : "",
		     (p->flags & KVS_BACKEND_F_IO_DIRECT) ? ", O_DIRECT" : "");
	*state = p;
	return 0;
}

const struct kvs_backend_ops kvs_io_posix_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = posix_open,
	.lookup = posix_lookup,
	.submit_read = posix_submit_read,
	.submit_write = posix_submit_write,
	.poll = posix_poll,
	.close = posix_close,
	.register_buffers = posix_register_buffers,
	.info = posix_info,
	.wait_fd = posix_wait_fd,
	.hint_read = posix_hint_read,
};
