/*
 * io/posix_write.c — dumps of the posix backend: a block's temp file, its header
 * and shards, and the fdatasync, close and rename that put it in place (or the
 * removal of a failed one), each a request of the engine (io/posix.c hands them
 * to it and reaps them).
 *
 * Dumps.  The first write of a block creates <hex>.tmp.<pid>.<random> next to the
 * final name (mode 0600: KV contents are users' prompts) and encodes the block's
 * header into a buffer of the dump's own (aligned for O_DIRECT; freed once
 * written).  Every step of a dump after that is a request of the engine, chained
 * on the caller's write request (write_done): that first write writes the header,
 * then its shard, so the header needs no room in the engine of its own, no shard
 * can finish the block before the header is in, and a failed header write is
 * the error of that write's completion.  A bitmap counts the shards written.
 * When the last lands, the same request goes on to fdatasync the temp file
 * (unless KVS_BACKEND_F_NO_FSYNC), close it and rename it over the final name,
 * and only then does that last write complete: a reader never sees a partial
 * block.  Each next step takes the place in the engine that the reap of the
 * last just freed, so no step waits for room and none runs on the issuer.  A
 * failed step discards the dump (temp file removed once its transfers end) and
 * is the error of its write's completion.  The directory itself is not
 * fsync'ed: after a power cut the rename may be lost, leaving an absent block (a
 * miss), never a partial one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/posix_impl.h"

/* ----------------------------------------------------------------- dumps */

static void pending_unlink(struct posix *p, struct pending *pb)
{
	for (struct pending **pp = &p->pending; *pp; pp = &(*pp)->next)
		if (*pp == pb) {
			*pp = pb->next;
			break;
		}
}

static void pending_free(struct pending *pb)
{
	free(pb->hdr_buf);
	free(pb);
}

/* Drop a failed (or abandoned) dump: close and remove its temp file. */
void pending_discard(struct posix *p, struct pending *pb)
{
	pending_unlink(p, pb);
	if (pb->fd >= 0)
		close(pb->fd);
	unlinkat(p->root_fd[pb->root], pb->tmp, 0);
	pending_free(pb);
}

static int mkdir_fanout(int rootfd, const char *rel)
{
	char dir[8];

	snprintf(dir, sizeof(dir), "%.2s", rel);
	if (mkdirat(rootfd, dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(dir, sizeof(dir), "%.5s", rel);
	if (mkdirat(rootfd, dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Create pb's temp file; the descriptor or -errno.  The fan-out directories
 * are made only when the open says one is missing: most dumps find them, and
 * cost the issuer this one openat. */
static int create_temp(struct posix *p, const struct pending *pb)
{
	int flags = O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC |
		    ((p->flags & KVS_BACKEND_F_IO_DIRECT) ? O_DIRECT : 0);
	int fd = openat(p->root_fd[pb->root], pb->tmp, flags, 0600);
	int rc;

	if (fd >= 0 || errno != ENOENT)
		return fd >= 0 ? fd : -errno;
	rc = mkdir_fanout(p->root_fd[pb->root], pb->path);
	if (rc < 0)
		return rc;
	fd = openat(p->root_fd[pb->root], pb->tmp, flags, 0600);
	return fd >= 0 ? fd : -errno;
}

/*
 * The live dump of id, or a new one (*fresh) with its temp file created and
 * its header encoded into pb->hdr_buf, for the caller to write ahead of the
 * shard that starts the dump.
 */
static int pending_get(struct posix *p, const struct kvs_block_id *id, struct pending **out,
		       bool *fresh)
{
	size_t words = (p->spb + 63) / 64;
	struct pending *pb;

	*fresh = false;
	for (pb = p->pending; pb; pb = pb->next)
		if (!pb->err && !pb->finishing && !memcmp(&pb->id, id, sizeof(*id))) {
			*out = pb;
			return 0;
		}
	pb = calloc(1, sizeof(*pb) + words * sizeof(uint64_t));
	if (!pb || !(pb->hdr_buf = hdr_buf_alloc(p))) {
		free(pb);
		return -ENOMEM;
	}
	pb->id = *id;
	pb->root = root_of(p, id);
	rel_path(id, pb->path, sizeof(pb->path));
	snprintf(pb->tmp, sizeof(pb->tmp), "%s.tmp.%d.%s%08x", pb->path, (int)getpid(),
		 p->host_tag, (unsigned)next_rand(p));
	pb->fd = create_temp(p, pb);
	if (pb->fd < 0) {
		int rc = pb->fd;

		kvs_log_error(&p->log, "backend: creating temp file %s in root %s: %s", pb->tmp,
			      p->root_name[pb->root], strerror(-rc));
		pending_free(pb);
		return rc;
	}
	p->hdr.block = *id;
	memset(pb->hdr_buf, 0, p->hdr.header_bytes);
	kvs_io_block_hdr_encode(&p->hdr, pb->hdr_buf);
	pb->next = p->pending;
	p->pending = pb;
	*out = pb;
	*fresh = true;
	return 0;
}

int posix_submit_write(void *state, const struct kvs_backend_io *io)
{
	struct posix *p = state;
	struct preq *r;
	bool fresh;
	int rc = check_dio(p, io);

	if (rc < 0)
		return rc;
	r = preq_get(p);
	if (!r)
		return -EAGAIN; /* before the dump is created: nothing to undo */
	rc = pending_get(p, &io->block, &r->pb, &fresh);
	if (rc < 0) {
		preq_put(p, r);
		return rc;
	}
	preq_fill(r, io, KVS_IO_OP_WRITE, r->pb->fd, -1,
		  p->hdr.header_bytes + io->shard * p->shard_bytes);
	if (fresh) {
		/* This write starts the dump: the header goes first, on this request,
		 * then the shard (next_step).  So the header needs no room in the
		 * engine of its own, the block cannot complete before its header is
		 * written, and a failed header is this write's error. */
		r->buf = r->req.buf;
		r->off = r->req.off;
		r->req.buf = (char *)r->pb->hdr_buf;
		r->req.len = p->hdr.header_bytes;
		r->req.off = 0;
	}
	rc = engine_submit(p, r);
	if (rc < 0) {
		if (fresh)
			pending_discard(p, r->pb); /* nothing of it in flight */
		preq_put(p, r);
		return rc;
	}
	r->pb->inflight++;
	return 0;
}

/*
 * Set write r up for the step of its dump that follows the one that just ended
 * well: the header -> the shard; the block's last shard -> fdatasync (unless
 * KVS_BACKEND_F_NO_FSYNC) -> close -> rename.  Returns true when there is one;
 * false when r is finished: a shard that did not finish its block, or the
 * rename that put the block in place (its dump is freed, r->pb NULL).
 */
static bool next_step(struct posix *p, struct preq *r)
{
	struct pending *pb = r->pb;
	uint32_t op, shard;

	switch (r->req.op) {
	case KVS_IO_OP_WRITE:
		if (r->req.off == 0) { /* the header: shards start at header_bytes */
			free(pb->hdr_buf);
			pb->hdr_buf = NULL;
			r->req.buf = r->buf;
			r->req.len = r->len;
			r->req.off = r->off;
			return true;
		}
		shard = (uint32_t)((r->req.off - p->hdr.header_bytes) / p->shard_bytes);
		if (!(pb->bits[shard / 64] & (UINT64_C(1) << (shard % 64)))) {
			pb->bits[shard / 64] |= UINT64_C(1) << (shard % 64);
			pb->written++;
		}
		if (pb->written < p->spb || pb->err || pb->inflight)
			return false;
		pb->finishing = true;
		/* Closed before the rename, and in the engine: on NFS a close writes
		 * back what is still dirty (everything, with KVS_BACKEND_F_NO_FSYNC)
		 * and reports write-back errors. */
		op = (p->flags & KVS_BACKEND_F_NO_FSYNC) ? KVS_IO_OP_CLOSE : KVS_IO_OP_FSYNC;
		break;
	case KVS_IO_OP_FSYNC:
		op = KVS_IO_OP_CLOSE;
		break;
	case KVS_IO_OP_CLOSE:
		op = KVS_IO_OP_RENAME;
		break;
	default: /* KVS_IO_OP_RENAME: the block is in place */
		fd_invalidate(p, &pb->id);
		pending_unlink(p, pb);
		pending_free(pb);
		r->pb = NULL;
		return false;
	}
	memset(&r->req, 0, sizeof(r->req));
	r->req.op = op;
	r->req.fd = op == KVS_IO_OP_RENAME ? p->root_fd[pb->root] : pb->fd;
	r->req.file_idx = -1;
	r->req.path = pb->tmp;
	r->req.path2 = pb->path;
	r->req.ctx = r;
	return true;
}

/* A failed step of a dump other than a shard's write (which its caller logs),
 * for the log line. */
static const char *step_name(const struct kvs_io_req *req)
{
	switch (req->op) {
	case KVS_IO_OP_FSYNC:
		return "fdatasync of";
	case KVS_IO_OP_CLOSE:
		return "closing";
	case KVS_IO_OP_RENAME:
		return "renaming";
	}
	return req->off == 0 ? "writing the header of" : NULL;
}

/*
 * A step of write r ended.  Returns true when r's completion is to be
 * delivered now with *res (the shard's length, or the error of whichever step
 * failed); false when r went on to its next step.
 *
 * No step runs on the issuer, and none waits for room: the next step takes the
 * place in the engine that r's reap has just freed (every engine request is one
 * of queue_depth preqs, the engine's depth, and the engine has been used: it
 * refuses nothing then, io/internal.h), so a refusal here is an engine failure,
 * and fails the step like any error.
 */
bool write_done(struct posix *p, struct preq *r, int64_t *res)
{
	struct pending *pb = r->pb;
	int rc = r->req.res < 0 ? (int)r->req.res : 0;

	pb->inflight--;
	*res = (int64_t)r->len;
	if (rc == 0 && next_step(p, r)) {
		rc = engine_submit(p, r);
		if (rc == 0) {
			pb->inflight++;
			if (r->req.op == KVS_IO_OP_CLOSE)
				pb->fd = -1; /* the engine's: the number may be reused before
						its completion */
			return false;
		}
	}
	if (!r->pb)
		return true; /* renamed into place */
	if (rc < 0) {
		const char *step = step_name(&r->req);

		if (step)
			kvs_log_error(&p->log, "backend: %s temp file %s in root %s: %s", step,
				      pb->tmp, p->root_name[pb->root], strerror(-rc));
		if (!pb->err)
			pb->err = rc;
		*res = rc;
	}
	if (pb->err && pb->inflight == 0)
		pending_discard(p, pb);
	return true;
}
