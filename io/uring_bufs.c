/*
 * io/uring_bufs.c — the io_uring engine's fixed buffers, pinned chunk by chunk
 * on first use.
 *
 * Pinning a region as a fixed buffer walks every page-table entry of it in the
 * calling process, and faults in the ones that process has not touched.  The
 * store registers its whole data plane in every rank, and a rank that attaches
 * has touched none of it: with 4 KiB pages that is about 0.3 CPU-s per GiB per
 * rank, and 8 ranks pinning the same pages at once contend on them (measured on
 * a 1 GiB plane: 0.3 s alone, 1.3-1.6 s each of 8; docs/io.md, "Fixed
 * buffers").  Done inside kvs_store_open, as it was, that made the kernel
 * library's 8-rank open cost more than the load it serves, growing with ranks
 * × cache size, for memory most ranks never transfer into.
 *
 * So registration only plans.  The regions are cut into chunks of
 * URING_CHUNK_BYTES (doubled until the kernel's table of URING_MAX_BUFFERS
 * entries holds them, at most its 1 GiB per buffer), a sparse table of that
 * many entries is registered (nothing pinned), and only the first chunk is
 * pinned at once, so a RLIMIT_MEMLOCK too low for any fixed buffer still shows
 * at open.  A transfer into a chunk not yet pinned goes out as a plain
 * READ/WRITE (the kernel pins its pages for that one transfer, and faults them
 * into this process's page table) and queues the chunk; after each submit the
 * issuer pins at most one queued chunk (io_uring_register_buffers_update_tag),
 * so a submit is never held for more than one chunk (about 1 ms at 4 KiB pages,
 * far less on huge pages), and the chunk's later transfers use READ_FIXED /
 * WRITE_FIXED.  A rank thus pins what it transfers into, mostly pages its own
 * plain transfers already mapped.
 *
 * A transfer that straddles two chunks goes out plain (none does when the slot
 * size divides the chunk size: the store's usual shard sizes, powers of two up
 * to 4 MiB).  A pin that fails (RLIMIT_MEMLOCK: the kernel counts pinned pages
 * per user, every rank of that user together) is logged once, as a WARNING,
 * and ends pinning: what is pinned stays in use, the rest is served plain.
 * Kernels without sparse tables (before 5.19) get no fixed buffers (logged).
 *
 * Threads: the issuing thread only (with SINGLE_ISSUER the kernel refuses
 * registration from any other once the ring is enabled); kvs_uring_bufs_plan
 * may also run before the first submit.  fixed_bytes in the engine is read by
 * kvs_backend_info from any thread: relaxed atomics, a statistic.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/uring_bufs.h"

#define URING_CHUNK_BYTES (UINT64_C(4) << 20)
#define URING_BUFFER_MAX_BYTES (UINT64_C(1) << 30) /* the kernel's limit per fixed buffer */
#define URING_MAX_BUFFERS 16384u                   /* IORING_MAX_REG_BUFFERS */

enum { URING_CHUNK_PLAIN, URING_CHUNK_QUEUED, URING_CHUNK_FIXED };

void kvs_uring_bufs_init(struct kvs_uring_bufs *b, struct io_uring *ring,
			 struct kvs_io_eng *eng, const struct kvs_log *log)
{
	memset(b, 0, sizeof(*b));
	b->ring = ring;
	b->eng = eng;
	b->log = log;
}

static void set_fixed(struct kvs_uring_bufs *b, uint64_t bytes)
{
	b->fixed = bytes;
	__atomic_store_n(&b->eng->fixed_bytes, bytes, __ATOMIC_RELAXED);
}

static void drop(struct kvs_uring_bufs *b)
{
	if (b->nchunks)
		io_uring_unregister_buffers(b->ring);
	free(b->regions);
	free(b->state);
	free(b->queue);
	b->regions = NULL;
	b->state = NULL;
	b->queue = NULL;
	b->nregions = b->nchunks = b->qhead = b->qlen = 0;
	b->total = 0;
	b->ended = false;
	b->eng->info_flags &= ~KVS_BACKEND_INFO_FIXED_BUFFERS;
	set_fixed(b, 0);
}

static uint32_t chunks_of(const struct kvs_backend_buffer *bufs, uint32_t n, uint64_t chunk)
{
	uint64_t count = 0;

	for (uint32_t i = 0; i < n; i++)
		count += (bufs[i].len + chunk - 1) / chunk;
	return count > URING_MAX_BUFFERS ? URING_MAX_BUFFERS + 1 : (uint32_t)count;
}

/* Chunk c: its region and bytes. */
static struct iovec chunk_iov(const struct kvs_uring_bufs *b, uint32_t c)
{
	uint32_t r = b->nregions - 1;

	while (r > 0 && b->regions[r].first > c)
		r--;
	uint64_t off = (uint64_t)(c - b->regions[r].first) * b->chunk;
	uint64_t left = b->regions[r].len - off;

	return (struct iovec){ .iov_base = b->regions[r].base + off,
			       .iov_len = left < b->chunk ? left : b->chunk };
}

static int pin(struct kvs_uring_bufs *b, uint32_t c)
{
	struct iovec iov = chunk_iov(b, c);
	__u64 tag = 0;
	int rc = io_uring_register_buffers_update_tag(b->ring, c, &iov, &tag, 1);

	if (rc < 0) {
		b->ended = true;
		kvs_log_warn(b->log, "backend: io_uring fixed buffers stop at %llu of %llu MiB "
			     "(pinning %zu bytes more: %s)%s; transfers into the rest are "
			     "served without them",
			     (unsigned long long)(b->fixed >> 20),
			     (unsigned long long)(b->total >> 20),
			     iov.iov_len, strerror(-rc),
			     rc == -ENOMEM ? " (RLIMIT_MEMLOCK too low: raise it for zero-copy "
					     "transfers)" : "");
		return rc;
	}
	b->state[c] = URING_CHUNK_FIXED;
	set_fixed(b, b->fixed + iov.iov_len);
	return 0;
}

int kvs_uring_bufs_plan(struct kvs_uring_bufs *b, const struct kvs_backend_buffer *bufs,
			uint32_t n)
{
	uint64_t chunk = URING_CHUNK_BYTES;
	uint32_t count, k = 0;
	int rc;

	drop(b);
	if (n == 0)
		return 0;
	while ((count = chunks_of(bufs, n, chunk)) > URING_MAX_BUFFERS &&
	       chunk < URING_BUFFER_MAX_BYTES)
		chunk *= 2;
	if (count > URING_MAX_BUFFERS) {
		kvs_log_warn(b->log, "backend: io_uring fixed buffers: the regions need more than "
			     "%u buffers of 1 GiB; transfers are served without them",
			     URING_MAX_BUFFERS);
		return -E2BIG;
	}
	b->regions = calloc(n, sizeof(*b->regions));
	b->state = calloc(count, sizeof(*b->state));
	b->queue = calloc(count, sizeof(*b->queue));
	if (!b->regions || !b->state || !b->queue) {
		drop(b);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		b->regions[i] = (struct kvs_uring_region){ bufs[i].base, bufs[i].len, k };
		k += (uint32_t)((bufs[i].len + chunk - 1) / chunk);
		b->total += bufs[i].len;
	}
	rc = io_uring_register_buffers_sparse(b->ring, count);
	if (rc < 0) {
		kvs_log_info(b->log, "backend: io_uring_register_buffers_sparse(%u): %s (Linux "
				     "5.19 has it); transfers are served without fixed buffers",
			     count, strerror(-rc));
		drop(b);
		return 0;
	}
	b->nregions = n;
	b->nchunks = count;
	b->chunk = chunk;
	rc = pin(b, 0);
	if (rc < 0) {
		drop(b);
		return rc;
	}
	b->eng->info_flags |= KVS_BACKEND_INFO_FIXED_BUFFERS;
	return 0;
}

int kvs_uring_bufs_index(struct kvs_uring_bufs *b, const char *p, uint64_t len)
{
	for (uint32_t r = 0; r < b->nregions; r++) {
		const struct kvs_uring_region *g = &b->regions[r];

		if (p < g->base || (uint64_t)(p - g->base) >= g->len)
			continue;
		uint64_t off = (uint64_t)(p - g->base);
		uint32_t c = g->first + (uint32_t)(off / b->chunk);

		if (len > g->len - off || (off + len - 1) / b->chunk != off / b->chunk)
			return -1; /* past the region, or across two chunks: plain */
		if (b->state[c] == URING_CHUNK_FIXED)
			return (int)c;
		if (b->state[c] == URING_CHUNK_PLAIN && !b->ended) {
			b->state[c] = URING_CHUNK_QUEUED;
			b->queue[(b->qhead + b->qlen++) % b->nchunks] = c;
		}
		return -1;
	}
	return -1;
}

void kvs_uring_bufs_pin_next(struct kvs_uring_bufs *b)
{
	if (b->qlen == 0)
		return;
	uint32_t c = b->queue[b->qhead];

	b->qhead = (b->qhead + 1) % b->nchunks;
	b->qlen--;
	if (b->ended || pin(b, c) < 0)
		b->state[c] = URING_CHUNK_PLAIN;
}

void kvs_uring_bufs_fini(struct kvs_uring_bufs *b)
{
	free(b->regions);
	free(b->state);
	free(b->queue);
	memset(b, 0, sizeof(*b));
}
