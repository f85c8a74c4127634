/*
 * io/posix_read.c — reading the posix backend's block files (io/posix.c says
 * what a file holds): the check of a file's header, the fd cache that reads go
 * through, submit_read, and lookup.
 *
 * Headers.  A reader reads and checks a file's header on the issuer when it
 * opens the file (once per fd cache entry, not per shard): a file of another
 * geometry is refused at submit with -KVS_ECONFIG, logging the block, its root
 * and both geometries; one that is not a kvshare block file of this block (cut
 * short, no or a bad magic, a bad checksum, another block's id) with -EIO,
 * logging the path.  Lookup reads the same header and calls absent whatever a
 * read would refuse (and a file too short for every shard).  Such warnings are
 * limited to one per block per minute (a table of the last WARN_SLOTS blocks
 * warned about).
 *
 * Reads.  The block file is opened (O_RDONLY, O_DIRECT if configured) through a
 * bounded fd cache (CLOCK over qd + 16 entries, at most RLIMIT_NOFILE / 4; an
 * entry is pinned while a transfer uses it); with io_uring each cache entry is
 * also a slot of the ring's sparse registered-file table.  A missing file, or
 * anything but a regular file at the block's path (opened O_NONBLOCK: a FIFO
 * cannot hang the issuer), refuses the submit with -ENOENT.
 *
 * Readahead.  A buffered header read must leave the kernel's readahead as a
 * sequential reader from shard 0 wants it, so both header reads (open and
 * lookup) are made under POSIX_FADV_RANDOM: the kernel reads the header's page
 * alone, with no readahead window and no readahead marker.  A plain 4 KiB read
 * at offset 0 would start a 4-page window marked at page 1; shard 0's read
 * grows it from there (16, 60, 240... pages), so the later windows and their
 * markers start at pages 4, 20, 80..., not at a shard's first page.  The
 * kernel acts on a marker only when it is the first not-yet-cached page of a
 * read, so with several reads in flight the ones submitted next run past the
 * window before its marker is reached, and the kernel takes them for random
 * reads: each read as is, in 4 KiB folios, nothing ahead (Linux 6.18,
 * readahead tracepoints: 102 of the 1024 1 MiB reads of perf/backend_bench.sh
 * at qd 32, and twice fio's CPU per GiB; docs/io.md, "Benchmark:
 * perf/backend_bench.sh").  After
 * the header's page alone, the fd's last position says "sequential from page
 * 1", and shard 0's read opens a window at its own first page: windows of 2x,
 * 4x... the shard, starting on shard boundaries, as fio's do reading from
 * offset 0.  The open fd goes back to POSIX_FADV_NORMAL before any shard is
 * read; lookup's fd is closed after its read.  Advice only: an error is
 * ignored (a file system without it reads as before); O_DIRECT skips it (no
 * page cache).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/posix_impl.h"

#define FD_CACHE_SLACK 16
#define WARN_INTERVAL_NS (60 * KVS_NSEC_PER_SEC)

/* ------------------------------------------------------------ headers */

/* Whether a warning about block id is due (none in the last WARN_INTERVAL_NS);
 * if so it is recorded.  Any thread. */
static bool warn_due(struct posix *p, const struct kvs_block_id *id)
{
	uint64_t now = kvs_now_ns();
	struct warned *w = NULL;
	bool due = true;

	pthread_mutex_lock(&p->warn_mu);
	for (uint32_t i = 0; i < WARN_SLOTS && !w; i++)
		if (p->warned[i].at_ns && !memcmp(&p->warned[i].id, id, sizeof(*id)))
			w = &p->warned[i];
	if (w && now - w->at_ns < WARN_INTERVAL_NS) {
		due = false;
	} else {
		if (!w) {
			w = &p->warned[p->warn_next];
			p->warn_next = (p->warn_next + 1) % WARN_SLOTS;
			w->id = *id;
		}
		w->at_ns = now;
	}
	pthread_mutex_unlock(&p->warn_mu);
	return due;
}

/* Readahead advice for [0, len) of fd (0: the whole file) around a header
 * read (see "Readahead" above); nothing under O_DIRECT.  Advice only: its
 * result is ignored. */
static void header_advice(const struct posix *p, int fd, int advice, off_t len)
{
	if (!(p->flags & KVS_BACKEND_F_IO_DIRECT))
		(void)posix_fadvise(fd, 0, len, advice);
}

/* pread of up to len bytes at offset 0 (fewer at end of file).  Count or -errno. */
static ssize_t read_head(int fd, void *buf, size_t len)
{
	ssize_t n;

	while ((n = pread(fd, buf, len, 0)) < 0 && errno == EINTR)
		;
	return n < 0 ? -errno : n;
}

/*
 * Check the header of block id's file (path: its name under the root), given
 * the n bytes at its offset 0 in buf.  Returns the file's data offset (its
 * header's size); -EIO when it is not a kvshare block file of this block;
 * -KVS_ECONFIG when it was stored with another geometry (or a header size that
 * O_DIRECT cannot read here).  Failures are logged, once a minute per block.
 * Any thread.
 */
static int64_t check_header(struct posix *p, const struct kvs_block_id *id, const char *path,
			    const void *buf, size_t n)
{
	const char *root = p->root_name[root_of(p, id)];
	struct kvs_io_block_hdr h;
	char why[160];
	int rc = kvs_io_block_hdr_decode(buf, n, &h, why, sizeof(why));

	if (rc == 0 && memcmp(&h.block, id, sizeof(*id))) {
		char other[33];

		kvs_io_block_hex(&h.block, other);
		snprintf(why, sizeof(why), "holds block %s (renamed or copied from another block's "
			 "name)", other);
		rc = -EIO;
	}
	if (rc < 0) {
		if (warn_due(p, id))
			kvs_log_warn(&p->log, "backend: block file %s/%s: %s: not read (-EIO), "
					      "absent to lookup", root, path, why);
		return rc;
	}
	if (!kvs_io_geom_same(&h.geom, &p->hdr.geom)) {
		if (warn_due(p, id)) {
			char hex[33], stored[KVS_IO_GEOM_DESCRIBE_MAX], ours[KVS_IO_GEOM_DESCRIBE_MAX];

			kvs_io_block_hex(id, hex);
			kvs_io_geom_describe(&h.geom, false, stored, sizeof(stored));
			kvs_io_geom_describe(&p->hdr.geom, false, ours, sizeof(ours));
			kvs_log_warn(&p->log, "backend: block %s in %s: stored with %s; this store "
					      "has %s", hex, root, stored, ours);
		}
		return -KVS_ECONFIG;
	}
	if ((p->flags & KVS_BACKEND_F_IO_DIRECT) && h.header_bytes % p->dio_off) {
		if (warn_due(p, id))
			kvs_log_warn(&p->log, "backend: block file %s/%s: its header of %u bytes is "
					      "not a multiple of the O_DIRECT alignment %u here: "
					      "read it without io_direct", root, path,
				     h.header_bytes, p->dio_off);
		return -KVS_ECONFIG;
	}
	return h.header_bytes;
}

/* --------------------------------------------------------------- fd cache */

static void fd_drop(struct posix *p, struct fd_entry *fe)
{
	if (fe->fd < 0)
		return;
	if (p->eng->nfiles)
		p->eng->ops->set_file(p->eng, (int)(fe - p->fds), -1);
	close(fe->fd);
	fe->fd = -1;
	fe->stale = false;
}

void fd_put(struct posix *p, struct fd_entry *fe)
{
	if (--fe->refs == 0 && fe->stale)
		fd_drop(p, fe);
}

/* The block was renamed over: later reads must open the new file. */
void fd_invalidate(struct posix *p, const struct kvs_block_id *id)
{
	ahead_invalidate(p, id);
	for (uint32_t i = 0; i < p->nfds; i++) {
		struct fd_entry *fe = &p->fds[i];

		if (fe->fd >= 0 && !memcmp(&fe->id, id, sizeof(*id))) {
			if (fe->refs)
				fe->stale = true;
			else
				fd_drop(p, fe);
		}
	}
}

/*
 * Open block id's file (path: its name under the root) for reading, its header
 * not read yet.  Whatever else sits at a block's path (a directory, a FIFO, a
 * device node, a fan-out directory that is a file) is an absent block, as for
 * lookup: -ENOENT, with a warning for what is not merely missing.  The open is
 * O_NONBLOCK, so that a FIFO nobody writes to cannot hang the caller; the flag
 * is cleared before any read (io_uring would turn it into -EAGAIN on a cold
 * page).  Other open errors (-EACCES, -ELOOP, -ENXIO, ...) pass through.
 * Returns the descriptor or -errno.  Any thread.
 */
int block_file_open(struct posix *p, const struct kvs_block_id *id, const char *path)
{
	int flags = O_RDONLY | O_CLOEXEC | ((p->flags & KVS_BACKEND_F_IO_DIRECT) ? O_DIRECT : 0);
	int fd = openat(p->root_fd[root_of(p, id)], path, flags | O_NONBLOCK);
	struct stat st;
	int rc = 0;

	if (fd < 0)
		return errno == ENOTDIR ? -ENOENT : -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode)) {
		kvs_log_warn(&p->log, "backend: block file %s of root %u is a %s, not a regular "
				      "file: read as absent",
			     path, root_of(p, id),
			     S_ISDIR(st.st_mode) ? "directory" : S_ISFIFO(st.st_mode) ? "FIFO"
			     : S_ISSOCK(st.st_mode) ? "socket" : "device node");
		rc = -ENOENT;
	} else if (fcntl(fd, F_SETFL, flags) < 0) {
		rc = -errno;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Start the read of fd's header page into the page cache and return at once
 * (POSIX_FADV_WILLNEED of that range alone: no readahead marker, the file's
 * readahead state untouched), so that several files' headers are read
 * together.  Buffered only; advice: its result is ignored. */
void block_file_header_ahead(const struct posix *p, int fd)
{
	header_advice(p, fd, POSIX_FADV_WILLNEED, p->hdr.header_bytes);
}

/* Read and check the header of block id's file, open on fd, into buf (one
 * read of the header's page alone: "Readahead" above).  Returns the file's
 * data offset (where shard 0 starts), or check_header's -EIO or -KVS_ECONFIG,
 * or a read's -errno.  Any thread. */
int64_t block_file_header(struct posix *p, const struct kvs_block_id *id, const char *path,
			  int fd, unsigned char *buf)
{
	ssize_t n;

	header_advice(p, fd, POSIX_FADV_RANDOM, 0);
	n = read_head(fd, buf, p->hdr.header_bytes);
	header_advice(p, fd, POSIX_FADV_NORMAL, 0);
	return n < 0 ? n : check_header(p, id, path, buf, (size_t)n);
}

/* Open block id's file and check its header, read into buf (*data_off: where
 * shard 0 starts): the descriptor or -errno, as the two above. */
static int open_block_file(struct posix *p, const struct kvs_block_id *id, const char *path,
			   unsigned char *buf, uint64_t *data_off)
{
	int fd = block_file_open(p, id, path);
	int64_t off;

	if (fd < 0)
		return fd;
	off = block_file_header(p, id, path, fd, buf);
	if (off < 0) {
		close(fd);
		return (int)off;
	}
	*data_off = (uint64_t)off;
	return fd;
}

/* The live cache entry of block id's file, or NULL. */
static struct fd_entry *fd_find(const struct posix *p, const struct kvs_block_id *id)
{
	for (uint32_t i = 0; i < p->nfds; i++) {
		struct fd_entry *fe = &p->fds[i];

		if (fe->fd >= 0 && !fe->stale && !memcmp(&fe->id, id, sizeof(*id)))
			return fe;
	}
	return NULL;
}

bool fd_cached(const struct posix *p, const struct kvs_block_id *id)
{
	return fd_find(p, id) != NULL;
}

/* A pinned cache entry for block's file: cached, opened ahead
 * (io/posix_ahead.c), or opened now. */
static int fd_get(struct posix *p, const struct kvs_block_id *id, struct fd_entry **out)
{
	char path[48];
	struct fd_entry *cached = fd_find(p, id), *victim = NULL;
	uint64_t data_off = 0;
	int fd, rc;

	if (cached) {
		cached->refs++;
		cached->ref_bit = true;
		*out = cached;
		return 0;
	}
	/* CLOCK: two sweeps at most; an unpinned entry always exists (nfds > qd). */
	for (uint32_t n = 0; n < 2 * p->nfds && !victim; n++) {
		struct fd_entry *fe = &p->fds[p->hand];

		p->hand = (p->hand + 1) % p->nfds;
		if (fe->fd < 0 || (fe->refs == 0 && !fe->ref_bit))
			victim = fe;
		else if (fe->refs == 0)
			fe->ref_bit = false;
	}
	if (!victim)
		return -EAGAIN;
	fd = ahead_take(p, id, &data_off);
	if (fd == -ENOENT) {
		rel_path(id, path, sizeof(path));
		fd = open_block_file(p, id, path, p->hdr_buf, &data_off);
	}
	if (fd < 0)
		return fd;
	fd_drop(p, victim);
	if (p->eng->nfiles) {
		rc = p->eng->ops->set_file(p->eng, (int)(victim - p->fds), fd);
		if (rc < 0) {
			kvs_log_error(&p->log, "backend: registering a file: %s", strerror(-rc));
			close(fd);
			return rc;
		}
	}
	victim->id = *id;
	victim->data_off = data_off;
	victim->fd = fd;
	victim->refs = 1;
	victim->ref_bit = true;
	*out = victim;
	return 0;
}

/*
 * queue_depth + slack entries, so an unpinned one always exists; but at most a
 * quarter of RLIMIT_NOFILE (the rest is the application's).  When the limit
 * wins and every entry is pinned by a transfer, submit says -EAGAIN.
 */
uint32_t fd_cache_size(uint32_t qd)
{
	struct rlimit rl;
	uint64_t n = (uint64_t)qd + FD_CACHE_SLACK;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		uint64_t cap = rl.rlim_cur / 4 > 64 ? rl.rlim_cur / 4 : 64;

		if (n > cap)
			n = cap;
	}
	return (uint32_t)n;
}

int posix_submit_read(void *state, const struct kvs_backend_io *io)
{
	struct posix *p = state;
	struct preq *r;
	int rc = check_dio(p, io);

	if (rc < 0)
		return rc;
	r = preq_get(p);
	if (!r)
		return -EAGAIN;
	rc = fd_get(p, &io->block, &r->fe);
	if (rc < 0) {
		preq_put(p, r);
		return rc;
	}
	preq_fill(r, io, KVS_IO_OP_READ, r->fe->fd, p->eng->nfiles ? (int)(r->fe - p->fds) : -1,
		  r->fe->data_off + io->shard * p->shard_bytes + io->offset);
	rc = engine_submit(p, r);
	if (rc < 0) {
		fd_put(p, r->fe);
		preq_put(p, r);
	}
	return rc;
}

/* Present: a regular file at the block's path (stat first: nothing else is
 * opened), with a header a read would accept, long enough for every shard. */
int posix_lookup(void *state, const struct kvs_block_id *id)
{
	struct posix *p = state;
	unsigned char buf[KVS_IO_BLOCK_HDR_MAX];
	int dirfd = p->root_fd[root_of(p, id)];
	char path[48];
	struct stat st;
	ssize_t n;
	int64_t off;
	int fd, rc;

	rel_path(id, path, sizeof(path));
	if (fstatat(dirfd, path, &st, 0) < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
	if (!S_ISREG(st.st_mode))
		return 0;
	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR || errno == ENXIO ? 0 : -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
	} else if (!S_ISREG(st.st_mode)) {
		rc = 0; /* replaced since the stat */
	} else {
		/* The header's page alone ("Readahead" above); buffered always. */
		(void)posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
		n = read_head(fd, buf, sizeof(buf));
		if (n < 0) {
			rc = (int)n;
		} else {
			off = check_header(p, id, path, buf, (size_t)n);
			rc = off >= 0 &&
			     (uint64_t)st.st_size >= (uint64_t)off + p->spb * p->shard_bytes;
		}
	}
	close(fd);
	return rc;
}
