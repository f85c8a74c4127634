/*
 * common/fd.h — descriptors a library keeps are never 0, 1 or 2.
 *
 * A process that closed stdin (a daemon, a test runner) hands the next open()
 * descriptor 0; the application then restores or redirects its standard
 * streams with dup2() onto 0..2 and silently replaces a file the library still
 * uses (a control segment whose OFD locks are its liveness).  So every
 * descriptor kvshare keeps is moved above 2 as it is made.
 *
 * And a file opened by a name anyone may take (a control or data segment in
 * /dev/shm, a password file) is opened only when it is a regular file: a FIFO
 * nobody writes to blocks a plain open(2) for ever, and a device node's open
 * may do anything (kvs_fd_open_regular).
 */
#ifndef KVS_COMMON_FD_H
#define KVS_COMMON_FD_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvshare.h"

/* fd itself when >= 3 or < 0; else a close-on-exec duplicate >= 3 (fd closed),
 * or -1 with errno when that fails (fd closed too). */
static inline int kvs_fd_above_stdio(int fd)
{
	int moved;

	if (fd < 0 || fd > 2)
		return fd;
	moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	close(fd);
	return moved;
}

/* What a file of this mode is, for messages ("a FIFO, not a regular file"). */
static inline const char *kvs_fd_kind(mode_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG: return "regular file";
	case S_IFDIR: return "directory";
	case S_IFIFO: return "FIFO";
	case S_IFSOCK: return "socket";
	case S_IFLNK: return "symbolic link";
	default: return "device node";
	}
}

/*
 * Open path with flags only if it is a regular file, never blocking: looked at
 * first (lstat; stat when follow, for a last component that may be a symbolic
 * link, as a mounted secret is), so that nothing else is opened at all; then
 * opened O_NONBLOCK | O_CLOEXEC (| O_NOFOLLOW unless follow) and checked again
 * on the descriptor (the name may have changed in between), O_NONBLOCK cleared.
 * *st is what was seen, on -KVS_ECORRUPT and an open's -errno too (its st_mode
 * says what is there: kvs_fd_kind; all zero when even the lstat failed).  Returns the descriptor (above 2), -KVS_ECORRUPT (not a regular
 * file: nothing opened, or the descriptor closed again), or -errno.
 */
static inline int kvs_fd_open_regular(const char *path, int flags, bool follow, struct stat *st)
{
	int fd, fl, rc = 0;

	memset(st, 0, sizeof(*st));
	if ((follow ? stat(path, st) : lstat(path, st)) != 0)
		return -errno;
	if (!S_ISREG(st->st_mode))
		return -KVS_ECORRUPT;
	fd = kvs_fd_above_stdio(open(path, flags | O_NONBLOCK | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW)));
	if (fd < 0)
		return -errno;
	if (fstat(fd, st) != 0 || (fl = fcntl(fd, F_GETFL)) < 0 ||
	    (S_ISREG(st->st_mode) && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
		rc = -errno;
	else if (!S_ISREG(st->st_mode))
		rc = -KVS_ECORRUPT;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

#endif
