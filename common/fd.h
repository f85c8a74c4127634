/*
 * common/fd.h — descriptors a library keeps are never 0, 1 or 2.
 *
 * A process that closed stdin (a daemon, a test runner) hands the next open()
 * descriptor 0; the application then restores or redirects its standard
 * streams with dup2() onto 0..2 and silently replaces a file the library still
 * uses (a control segment whose OFD locks are its liveness).  So every
 * descriptor kvshare keeps is moved above 2 as it is made.
 */
#ifndef KVS_COMMON_FD_H
#define KVS_COMMON_FD_H

#include <fcntl.h>
#include <unistd.h>

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

#endif
