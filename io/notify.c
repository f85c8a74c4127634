/*
 * io/notify.c — the pieces the backends build their wait descriptors from
 * (kvs_backend_wait_fd, kvshare.h "Waiting"): an eventfd that is readable while
 * completions wait, a timerfd armed for the next due time, and an epoll set
 * that merges several of them into the one descriptor a backend hands out.
 *
 * All are level-triggered and non-blocking, and nothing here sleeps: the issuer
 * sleeps on them outside the library, and the backend keeps their readiness
 * exact from its submit and poll paths.  A timer remembers what it is armed for,
 * so re-arming it for the same time (the FIFO head did not change) costs no
 * system call; re-arming for another time, or disarming, also clears an
 * expiry already signalled (timerfd_settime resets the count).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "io/internal.h"

int kvs_io_event_open(void)
{
	int fd = kvs_fd_above_stdio(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));

	return fd < 0 ? -errno : fd;
}

void kvs_io_event_signal(int fd)
{
	/* Fails only when the count would overflow 2^64 - 2: it is already readable. */
	eventfd_write(fd, 1);
}

void kvs_io_event_drain(int fd)
{
	eventfd_t v;

	eventfd_read(fd, &v); /* EAGAIN: it was not readable; nothing to do */
}

int kvs_io_timer_open(struct kvs_io_timer *t)
{
	t->fd = kvs_fd_above_stdio(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
	t->armed_ns = 0;
	return t->fd < 0 ? -errno : 0;
}

void kvs_io_timer_close(struct kvs_io_timer *t)
{
	if (t->fd >= 0)
		close(t->fd);
	t->fd = -1;
	t->armed_ns = 0;
}

void kvs_io_timer_arm(struct kvs_io_timer *t, uint64_t due_ns)
{
	struct itimerspec its = { .it_value = kvs_ns_to_timespec(due_ns) };

	if (t->fd < 0 || due_ns == t->armed_ns)
		return;
	/* Absolute CLOCK_MONOTONIC, the clock of every due time (kvs_now_ns); a time
	 * already past expires at once.  it_value 0 disarms.  Cannot fail with a valid
	 * descriptor and value; if it did, armed_ns keeps the old value and the next
	 * call tries again. */
	if (timerfd_settime(t->fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		t->armed_ns = due_ns;
}

int kvs_io_epoll_open(const int *fds, uint32_t n)
{
	int ep = kvs_fd_above_stdio(epoll_create1(EPOLL_CLOEXEC));

	if (ep < 0)
		return -errno;
	for (uint32_t i = 0; i < n; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] };

		if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
			int rc = -errno;

			close(ep);
			return rc;
		}
	}
	return ep;
}
