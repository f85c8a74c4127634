/*
 * io/posix_roots.c — the posix backend's roots on disk: where a block's file
 * lives under them, what open checks of each (that it can hold block files; its
 * O_DIRECT alignment, which each submit's transfer is checked against), and the
 * removal of temp files that killed writers left behind.
 *
 * Naming.  Block id (16 bytes) -> 32 hex characters; the file is
 * <root>/<hex[0:2]>/<hex[2:4]>/<hex> (fan-out keeps directories small on any
 * filesystem), the root chosen by the id's first 8 bytes modulo nroots (ids are
 * content hashes, so that spreads evenly).  The layout works unchanged on a
 * shared mount (NFS, CephFS, Lustre, 3FS).
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
 * Crash cleanup.  A writer killed mid-dump leaves only its temp file, named
 * <hex>.tmp.<pid>.<host tag><random> (host tag: 8 hex of a hash of the host
 * name).  At open, a temp file is removed when it is this host's and its
 * writer pid has no /proc entry or is a zombie, or when it is older than 24
 * hours (pid reuse, other pid namespaces, other hosts on a shared mount).  Temp
 * files of live writers are kept: kill(pid, 0) is not used because zombies look
 * alive to it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/pattern.h"
#include "io/posix_impl.h"

#define STALE_TEMP_AGE_S (24 * 3600)
#define DIO_DEFAULT_ALIGN 4096

/* ---------------------------------------------------------------- naming */

uint32_t root_of(const struct posix *p, const struct kvs_block_id *id)
{
	uint64_t h;

	memcpy(&h, id->bytes, sizeof(h));
	return (uint32_t)(h % p->nroots);
}

/* "aa/bb/<hex>" into path (>= 40 bytes). */
void rel_path(const struct kvs_block_id *id, char *path, size_t len)
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

/* FNV-1a of the host name, so temp files say which host's pid they carry. */
void set_host_tag(struct posix *p)
{
	char host[256] = "";
	uint32_t h = 2166136261u;

	gethostname(host, sizeof(host) - 1);
	for (const char *c = host; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	snprintf(p->host_tag, sizeof(p->host_tag), "%08x", h);
}

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
unsigned clean_root(struct posix *p, int rootfd, const char *root)
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

uint64_t next_rand(struct posix *p)
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
int probe_root(struct posix *p, uint32_t i, const char *root)
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

int check_dio(const struct posix *p, const struct kvs_backend_io *io)
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
