/*
 * io/posix.c — the posix backend: one file per block under one or more roots.
 *
 * Naming.  Block id (16 bytes) -> 32 hex characters; the file is
 * <root>/<hex[0:2]>/<hex[2:4]>/<hex> (fan-out keeps directories small on any
 * filesystem), the root chosen by the id's first 8 bytes modulo nroots (ids are
 * content hashes, so that spreads evenly).  The layout works unchanged on a
 * shared mount (NFS, CephFS, Lustre, 3FS).
 *
 * What a file holds.  A block file starts with a header (io/format.c; docs/io.md,
 * "Block file format") naming its block and geometry: shard_bytes,
 * shards_per_block, the tensor table, layout_tag; checksummed.  Shard i lives
 * at header_bytes + i * shard_bytes, header_bytes being 4096, or the O_DIRECT
 * offset alignment when larger, so that O_DIRECT reads of shards stay aligned (a
 * reader takes the size from the file's header).  A dump writes the header
 * through the engine like a shard (see Dumps).  A reader reads and checks it
 * on the issuer when it opens the file (once per fd
 * cache entry, not per shard): a file of another geometry is refused at submit
 * with -KVS_ECONFIG, logging the block, its root and both geometries; one that is
 * not a kvshare block file of this block (cut short, no or a bad magic, a bad
 * checksum, another block's id) with -EIO, logging the path.  Lookup reads the
 * same header and calls absent whatever a read would refuse (and a file too
 * short for every shard).  Such warnings are limited to one per block per
 * minute (a table of the last WARN_SLOTS blocks warned about).
 *
 * Reads.  The block file is opened (O_RDONLY, O_DIRECT if configured) through a
 * bounded fd cache (CLOCK over qd + 16 entries, at most RLIMIT_NOFILE / 4; an
 * entry is pinned while a transfer uses it); with io_uring each cache entry is
 * also a slot of the ring's sparse registered-file table.  A missing file, or
 * anything but a regular file at the block's path (opened O_NONBLOCK: a FIFO
 * cannot hang the issuer), refuses the submit with -ENOENT.
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
 *    entry (a read of header_bytes);
 *  - close and unlink a failed dump's temp file (the failure path, and close).
 *
 * Crash cleanup.  A writer killed mid-dump leaves only its temp file, named
 * <hex>.tmp.<pid>.<host tag><random> (host tag: 8 hex of a hash of the host
 * name).  At open, a temp file is removed when it is this host's and its
 * writer pid has no /proc entry or is a zombie, or when it is older than 24
 * hours (pid reuse, other pid namespaces, other hosts on a shared mount).  Temp
 * files of live writers are kept: kill(pid, 0) is not used because zombies look
 * alive to it.
 *
 * Open.  A probe file is created in each root and removed: a missing root or
 * one this user cannot write is an error at open, not at the first dump; a
 * read-only mount is a WARNING (loads from it work; dumps fail -EROFS).
 *
 * O_DIRECT.  At open, the probe file is opened O_DIRECT (refused:
 * -EOPNOTSUPP) and asked for its alignment with statx(STATX_DIOALIGN) (4096
 * when the kernel does not say); shard_bytes must be a multiple of the offset
 * alignment (-EINVAL at open, with a log line); buffers and read ranges are
 * checked at submit.
 *
 * Single issuer: submit/poll/register_buffers from one thread (the engine's
 * ring); lookup from any thread (it only reads immutable state).  The wait
 * descriptor is the engine's (an eventfd either way).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/pattern.h"
#include "io/internal.h"
#include "io/io.h"

#define FD_CACHE_SLACK 16
#define STALE_TEMP_AGE_S (24 * 3600)
#define CLOSE_DRAIN_NS (30 * KVS_NSEC_PER_SEC)
#define DIO_DEFAULT_ALIGN 4096
#define REAP_BATCH 64
#define WARN_SLOTS 16
#define WARN_INTERVAL_NS (60 * KVS_NSEC_PER_SEC)

struct fd_entry {
	struct kvs_block_id id;
	uint64_t data_off; /* the file's header size: shard i at data_off + i * shard_bytes */
	int fd;          /* -1: empty */
	uint32_t refs;   /* transfers in flight on fd */
	bool ref_bit;    /* CLOCK: used since the hand last passed */
	bool stale;      /* block renamed over: drop when refs reach 0 */
};

/* A block being dumped. */
struct pending {
	struct kvs_block_id id;
	uint32_t root;
	int fd;             /* the temp file; -1 once its close is the engine's */
	int err;            /* first failed step: the dump is discarded */
	bool finishing;     /* every shard written: fsync, close, rename under way */
	uint32_t inflight;  /* this dump's requests in the engine */
	uint32_t written;   /* shards with their bit set */
	unsigned char *hdr_buf; /* its header (header_bytes, aligned for O_DIRECT) until
				   written; NULL after */
	char path[48];      /* the block's name under the root: aa/bb/<hex> */
	char tmp[96];       /* the temp file's: aa/bb/<hex>.tmp.<pid>.<host tag><rand> */
	struct pending *next;
	uint64_t bits[];    /* shards written */
};

/* A caller's transfer.  A write goes through steps on this one request, each
 * handed to the engine as the last completes (write_done): the block's header
 * first when the write starts its dump, then the shard; when the shard is the
 * block's last, fdatasync, close and rename after it. */
struct preq {
	struct kvs_io_req req;
	uint64_t token;
	uint64_t len;          /* the caller's length (a write's, kept across its steps) */
	char *buf;             /* a write's shard bytes and file offset, while its */
	uint64_t off;          /*   block's header is written first */
	struct fd_entry *fe;   /* reads */
	struct pending *pb;    /* writes */
	struct preq *next_free;
};

/* A block warned about (bad header, other geometry), and when. */
struct warned {
	struct kvs_block_id id;
	uint64_t at_ns; /* 0: free */
};

struct posix {
	struct kvs_log log;
	uint64_t shard_bytes;
	uint32_t spb;
	struct kvs_io_block_hdr hdr; /* the header of the files this handle writes (block
					set per dump); its geometry is this handle's */
	unsigned char *hdr_buf; /* hdr.header_bytes, aligned for O_DIRECT: the header of a
				   block file being opened for reading (issuer only) */
	uint32_t qd;
	uint32_t flags;
	uint32_t nroots;
	int root_fd[KVS_BACKEND_MAX_ROOTS];
	struct kvs_io_eng *eng;
	int fallback_err;
	uint32_t dio_mem;
	uint32_t dio_off;
	struct preq *reqs;
	struct preq *free_reqs;
	uint32_t active; /* preqs handed to the engine */
	struct fd_entry *fds;
	uint32_t nfds;
	uint32_t hand;
	struct pending *pending;
	uint64_t rand_state;
	char host_tag[9]; /* 8 hex of a hash of this host's name: our temp files */
	char *root_name[KVS_BACKEND_MAX_ROOTS]; /* as configured, for logs */
	pthread_mutex_t warn_mu; /* lookups warn from any thread */
	struct warned warned[WARN_SLOTS];
	uint32_t warn_next;
};

/* ---------------------------------------------------------------- naming */

static uint32_t root_of(const struct posix *p, const struct kvs_block_id *id)
{
	uint64_t h;

	memcpy(&h, id->bytes, sizeof(h));
	return (uint32_t)(h % p->nroots);
}

/* "aa/bb/<hex>" into path (>= 40 bytes). */
static void rel_path(const struct kvs_block_id *id, char *path, size_t len)
{
	char hex[33];

	kvs_io_block_hex(id, hex);
	snprintf(path, len, "%.2s/%.2s/%s", hex, hex + 2, hex);
}

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* ------------------------------------------------------- stale temp files */

/* True when pid has a /proc entry that is not a zombie (or dead) task. */
static bool pid_alive(long pid)
{
	char path[64], buf[512];
	ssize_t n;
	char *rp;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno != ENOENT && errno != ESRCH; /* unsure: keep the file */
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	rp = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
	if (!rp || rp[1] != ' ')
		return true;
	return rp[2] != 'Z' && rp[2] != 'X';
}

/* Whether name is a temp file of ours that is stale; see the top comment. */
static bool temp_is_stale(const struct posix *p, int dirfd, const char *name)
{
	struct stat st;
	char *end;
	long pid;

	if (strlen(name) < 32 + 5 + 2 || !is_hex(name, 32) || strncmp(name + 32, ".tmp.", 5))
		return false;
	pid = strtol(name + 37, &end, 10);
	if (end == name + 37 || *end != '.' || pid <= 0)
		return false;
	/* The pid means something only on the writer's host (its tag, 8 hex). */
	if (strlen(end + 1) >= 8 && strncmp(end + 1, p->host_tag, 8) == 0 && !pid_alive(pid))
		return true;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return false;
	return time(NULL) - st.st_mtime > STALE_TEMP_AGE_S;
}

static int open_subdir(int dirfd, const char *name)
{
	return openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* Walk <root>/??/??/ and remove stale temp files; returns how many. */
static unsigned clean_root(struct posix *p, int rootfd, const char *root)
{
	unsigned removed = 0;
	int fd1 = dup(rootfd);
	DIR *d1 = fd1 >= 0 ? fdopendir(fd1) : NULL;
	struct dirent *e1;

	if (!d1) {
		if (fd1 >= 0)
			close(fd1);
		return 0;
	}
	while ((e1 = readdir(d1))) {
		int fd2;
		DIR *d2;
		struct dirent *e2;

		if (strlen(e1->d_name) != 2 || !is_hex(e1->d_name, 2))
			continue;
		fd2 = open_subdir(dirfd(d1), e1->d_name);
		d2 = fd2 >= 0 ? fdopendir(fd2) : NULL;
		if (!d2) {
			if (fd2 >= 0)
				close(fd2);
			continue;
		}
		while ((e2 = readdir(d2))) {
			int fd3;
			DIR *d3;
			struct dirent *e3;

			if (strlen(e2->d_name) != 2 || !is_hex(e2->d_name, 2))
				continue;
			fd3 = open_subdir(dirfd(d2), e2->d_name);
			d3 = fd3 >= 0 ? fdopendir(fd3) : NULL;
			if (!d3) {
				if (fd3 >= 0)
					close(fd3);
				continue;
			}
			while ((e3 = readdir(d3)))
				if (temp_is_stale(p, dirfd(d3), e3->d_name) &&
				    unlinkat(dirfd(d3), e3->d_name, 0) == 0) {
					removed++;
					kvs_log_info(&p->log, "backend: removed stale temp file "
							      "%s/%s/%s/%s", root, e1->d_name,
						     e2->d_name, e3->d_name);
				}
			closedir(d3);
		}
		closedir(d2);
	}
	closedir(d1);
	return removed;
}

/* --------------------------------------------------------------- O_DIRECT */

static uint64_t next_rand(struct posix *p)
{
	p->rand_state = kvs_mix64(p->rand_state);
	return p->rand_state;
}

/*
 * Root i can hold block files: a probe file is created in it and removed, at
 * open, so that an unwritable root is an error before the store builds its data
 * plane, not at the first dump.  With io_direct the probe is opened O_DIRECT and
 * gives the root's alignment.
 */
static int probe_root(struct posix *p, uint32_t i, const char *root)
{
	const bool dio = p->flags & KVS_BACKEND_F_IO_DIRECT;
	char name[64];
	uint32_t mem = DIO_DEFAULT_ALIGN, off = DIO_DEFAULT_ALIGN;
	int fd;

	snprintf(name, sizeof(name), ".kvs-probe.%d.%016llx", (int)getpid(),
		 (unsigned long long)next_rand(p));
	fd = openat(p->root_fd[i], name,
		    O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC | (dio ? O_DIRECT : 0), 0600);
	if (fd < 0 && dio && errno == EINVAL) {
		kvs_log_error(&p->log, "backend: io_direct: the filesystem of root %s does not "
				       "support O_DIRECT (tmpfs before Linux 6.6, some FUSE/overlay)",
			      root);
		return -EOPNOTSUPP;
	}
	if (fd < 0 && errno == EROFS && !dio) {
		/* A read-only mount is a deliberate setup (KV shared read-only):
		 * loads work, dumps fail -EROFS each. */
		kvs_log_warn(&p->log, "backend: root %s is on a read-only mount: blocks are "
				      "loaded from it, dumps to it fail", root);
		return 0;
	}
	if (fd < 0) {
		int rc = -errno;

		kvs_log_error(&p->log, "backend: root %s cannot hold block files (creating a probe "
				       "file in it: %s)%s",
			      root, strerror(-rc),
			      rc == -EACCES || rc == -EPERM
				      ? ": give this user write access to it, or pick another root"
				      : "");
		return rc;
	}
	if (!dio) {
		close(fd);
		unlinkat(p->root_fd[i], name, 0);
		return 0;
	}
#ifdef STATX_DIOALIGN
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN)) {
		if (stx.stx_dio_mem_align == 0 || stx.stx_dio_offset_align == 0) {
			close(fd);
			unlinkat(p->root_fd[i], name, 0);
			kvs_log_error(&p->log, "backend: io_direct: root %s reports no O_DIRECT "
					       "support (statx STATX_DIOALIGN)", root);
			return -EOPNOTSUPP;
		}
		mem = stx.stx_dio_mem_align;
		off = stx.stx_dio_offset_align;
	}
#endif
	close(fd);
	unlinkat(p->root_fd[i], name, 0);
	if (mem > p->dio_mem)
		p->dio_mem = mem;
	if (off > p->dio_off)
		p->dio_off = off;
	if (p->shard_bytes % off) {
		kvs_log_error(&p->log, "backend: io_direct: shard_bytes %llu is not a multiple of "
				       "the O_DIRECT alignment %u of root %s",
			      (unsigned long long)p->shard_bytes, off, root);
		return -EINVAL;
	}
	return 0;
}

static int check_dio(const struct posix *p, const struct kvs_backend_io *io)
{
	if (!(p->flags & KVS_BACKEND_F_IO_DIRECT))
		return 0;
	if ((uintptr_t)io->buf % p->dio_mem || io->offset % p->dio_off || io->len % p->dio_off) {
		kvs_log_error(&p->log, "backend: io_direct: buffer %p offset %llu len %llu not "
				       "aligned to %u (memory) / %u (offset, length)",
			      io->buf, (unsigned long long)io->offset,
			      (unsigned long long)io->len, p->dio_mem, p->dio_off);
		return -EINVAL;
	}
	return 0;
}

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

/* A buffer of hdr.header_bytes aligned for O_DIRECT (memory alignment, at least
 * a page), or NULL. */
static unsigned char *hdr_buf_alloc(const struct posix *p)
{
	void *buf = NULL;

	if (posix_memalign(&buf, p->dio_mem > 4096 ? p->dio_mem : 4096, p->hdr.header_bytes))
		return NULL;
	return buf;
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

static void fd_put(struct posix *p, struct fd_entry *fe)
{
	if (--fe->refs == 0 && fe->stale)
		fd_drop(p, fe);
}

/* The block was renamed over: later reads must open the new file. */
static void fd_invalidate(struct posix *p, const struct kvs_block_id *id)
{
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
 * Open block id's file (path: its name under the root) for reading and check
 * its header (*data_off: where its shard 0 starts).  Whatever else sits at a
 * block's path (a directory, a FIFO, a device node, a fan-out directory that is
 * a file) is an absent block, as for lookup: -ENOENT, with a warning for what is
 * not merely missing.  The open is O_NONBLOCK, so that a FIFO nobody writes to
 * cannot hang the issuer; the flag is cleared before any read (io_uring would
 * turn it into -EAGAIN on a cold page).  Other open errors (-EACCES, -ELOOP,
 * -ENXIO, ...) pass through; a bad header is check_header's -EIO or
 * -KVS_ECONFIG.  Returns the descriptor or -errno.
 */
static int open_block_file(struct posix *p, const struct kvs_block_id *id, const char *path,
			   uint64_t *data_off)
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
	} else {
		/* One read per open, into the aligned buffer (O_DIRECT). */
		ssize_t n = read_head(fd, p->hdr_buf, p->hdr.header_bytes);
		int64_t off = n < 0 ? n : check_header(p, id, path, p->hdr_buf, (size_t)n);

		if (off < 0)
			rc = (int)off;
		else
			*data_off = (uint64_t)off;
	}
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* A pinned cache entry for block's file (open it if needed). */
static int fd_get(struct posix *p, const struct kvs_block_id *id, struct fd_entry **out)
{
	char path[48];
	struct fd_entry *victim = NULL;
	uint64_t data_off = 0;
	int fd, rc;

	for (uint32_t i = 0; i < p->nfds; i++) {
		struct fd_entry *fe = &p->fds[i];

		if (fe->fd >= 0 && !fe->stale && !memcmp(&fe->id, id, sizeof(*id))) {
			fe->refs++;
			fe->ref_bit = true;
			*out = fe;
			return 0;
		}
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
	rel_path(id, path, sizeof(path));
	fd = open_block_file(p, id, path, &data_off);
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
static void pending_discard(struct posix *p, struct pending *pb)
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

/* --------------------------------------------------------------- requests */

static struct preq *preq_get(struct posix *p)
{
	struct preq *r = p->free_reqs;

	if (r) {
		p->free_reqs = r->next_free;
		memset(r, 0, sizeof(*r));
	}
	return r;
}

static void preq_put(struct posix *p, struct preq *r)
{
	r->next_free = p->free_reqs;
	p->free_reqs = r;
}

/* The engine request for one caller transfer: op on fd (or registered file
 * file_idx, -1 for none) at byte off. */
static void preq_fill(struct preq *r, const struct kvs_backend_io *io, uint32_t op, int fd,
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

static int engine_submit(struct posix *p, struct preq *r)
{
	int rc = p->eng->ops->submit(p->eng, &r->req);

	if (rc == 0)
		p->active++;
	return rc;
}

static int posix_submit_read(void *state, const struct kvs_backend_io *io)
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

static int posix_submit_write(void *state, const struct kvs_backend_io *io)
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
static bool write_done(struct posix *p, struct preq *r, int64_t *res)
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

/* Present: a regular file at the block's path (stat first: nothing else is
 * opened), with a header a read would accept, long enough for every shard. */
static int posix_lookup(void *state, const struct kvs_block_id *id)
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
	} else if ((n = read_head(fd, buf, sizeof(buf))) < 0) {
		rc = (int)n;
	} else {
		off = check_header(p, id, path, buf, (size_t)n);
		rc = off >= 0 && (uint64_t)st.st_size >= (uint64_t)off + p->spb * p->shard_bytes;
	}
	close(fd);
	return rc;
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

/*
 * queue_depth + slack entries, so an unpinned one always exists; but at most a
 * quarter of RLIMIT_NOFILE (the rest is the application's).  When the limit
 * wins and every entry is pinned by a transfer, submit says -EAGAIN.
 */
static uint32_t fd_cache_size(uint32_t qd)
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

/* FNV-1a of the host name, so temp files say which host's pid they carry. */
static void set_host_tag(struct posix *p)
{
	char host[256] = "";
	uint32_t h = 2166136261u;

	gethostname(host, sizeof(host) - 1);
	for (const char *c = host; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	snprintf(p->host_tag, sizeof(p->host_tag), "%08x", h);
}

static int posix_open(const struct kvs_backend_config *cfg, void **state)
{
	struct posix *p = calloc(1, sizeof(*p));
	int rc = 0;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->warn_mu, NULL);
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
};
