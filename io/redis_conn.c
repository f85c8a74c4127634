/*
 * io/redis_conn.c — one socket of the redis backend (io/redis.c says what the
 * backend does with its sockets): its connect and handshake, writing its
 * commands, receiving and parsing their replies (io/redis_reply.c: what a reply
 * means to its command), failing and reconnecting it; and the waits over
 * several sockets (conns_step, conns_drain) that poll, lookups, open and close
 * run.
 *
 * Writing.  Commands are written as soon as they are queued (conn_flush),
 * non-blocking (sendmsg, MSG_NOSIGNAL: a dead server is an error, never
 * SIGPIPE): commands queue on a socket while earlier replies are outstanding.  A
 * SET's value goes to the kernel straight from the caller's buffer (the slot)
 * through the iovec, after the value header, which is formatted into the
 * command's header: no copy into an output buffer.
 *
 * Reading.  Bytes are received directly into the reader's buffer (its sds,
 * grown with sdsMakeRoomFor, in chunks of READ_CHUNK), so the one copy that
 * remains is reader buffer -> slot: hiredis parses only a bulk string that is
 * whole in its buffer (docs/io.md, "redis").  The reader compacts its buffer
 * after each reply (moving what follows it to the front), so a receive stops at
 * the end of a GET's reply, whose length is known: nothing is left to move.
 *
 * Failures.  A socket that fails (EOF, reset, a protocol error, or the oldest
 * command past command_timeout_ns) fails the commands queued on it with that
 * error, is closed, and is reconnected at the next use after a backoff (10 ms
 * doubling to 1 s, reset by a successful handshake); until then a submit to it
 * fails at once with its error.  Only the shards on that socket fail; the store
 * publishes them FAILED, so the cache stays consistent.  Error lines name the
 * endpoint and the server's reply; they are limited to one per socket per second
 * (the rest are counted in the next).  Connects are non-blocking (ppoll with
 * connect_timeout_ns); the handshake (AUTH [user] password, SELECT db) is
 * pipelined ahead of the first commands, and its failure fails the socket
 * (-EACCES for AUTH).
 */
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/clock.h"
#include "io/redis_impl.h"

#define READ_CHUNK (256u << 10)
#define IOV_BATCH 192 /* iovecs per sendmsg: 64 commands of three parts */
#define BACKOFF_MIN_NS (10 * UINT64_C(1000000))
#define BACKOFF_MAX_NS KVS_NSEC_PER_SEC

/* ------------------------------------------------------------- commands */

static uint64_t cmd_bytes(const struct cmd *cmd)
{
	return cmd->hdr_len + cmd->val_len + cmd->tail_len;
}

static bool cmd_is_data(const struct cmd *cmd)
{
	return cmd->kind == CMD_GET || cmd->kind == CMD_SET;
}

void cmd_finish(struct redis *r, struct cmd *cmd)
{
	struct kvs_io_fifo_entry e;

	if (r->cluster && cluster_park(r, cmd))
		return;
	e = (struct kvs_io_fifo_entry){ .token = cmd->token, .result = cmd->result };
	if (kvs_io_fifo_push(&r->done, &e) < 0) {
		/* Cannot happen in practice (the FIFO grows by doubling and holds at most
		 * qd entries); say so rather than lose a completion silently. */
		kvs_log_error(&r->log, "redis: out of memory queueing a completion: the "
				       "transfer's task will time out");
	}
	r->inflight--;
	cmd->next = r->free_cmds;
	r->free_cmds = cmd;
}

/* ----------------------------------------------------------- a socket */

void conn_init(struct conn *c, struct redis *r, const struct endpoint *ep)
{
	memset(c, 0, sizeof(*c));
	c->r = r;
	c->ep = ep;
	c->fd = -1;
}

void conn_push(struct conn *c, struct cmd *cmd)
{
	cmd->next = NULL;
	if (c->tail)
		c->tail->next = cmd;
	else
		c->head = cmd;
	c->tail = cmd;
	if (!c->unsent) {
		c->unsent = cmd;
		c->unsent_off = 0;
	}
}

/* The oldest command is answered: unlink it and finish it. */
static void conn_pop(struct conn *c)
{
	struct cmd *cmd = c->head;

	c->head = cmd->next;
	if (!c->head)
		c->tail = NULL;
	if (cmd_is_data(cmd)) {
		c->inflight--;
		cmd_finish(c->r, cmd);
	} else {
		cmd->done = true;
	}
}

void conn_send(struct conn *c, struct cmd *cmd)
{
	int rc;

	conn_push(c, cmd);
	c->inflight++;
	rc = conn_flush(c);
	if (rc)
		conn_fail(c, rc, "sending"); /* finishes cmd with rc too */
}

/* The socket failed with err (why: for the log line; NULL: quietly, at close):
 * every command on it ends with err, the socket is closed, and reconnecting
 * waits for the backoff. */
void conn_fail(struct conn *c, int err, const char *why)
{
	uint64_t backoff;

	if (why)
		conn_log(c, KVS_LOG_ERROR, "redis %s: connection %s: %s (%s); %u transfers on it "
			 "%s; reconnecting after a backoff", c->ep->name,
			 c->state == CONN_CONNECTING ? "not established" : "lost", why,
			 kvs_strerror(err), c->inflight,
			 c->r->cluster && !c->r->closing
				 ? "are tried again after a slot map refresh, within their deadline"
				 : "failed");
	while (c->head) {
		c->head->result = err;
		if (c->r->cluster && !c->r->closing &&
		    (cmd_is_data(c->head) || c->head->kind == CMD_EXISTS)) {
			c->head->redirect = REDIR_RETRY; /* another try, after a map refresh */
			c->head->last_err = err;
		}
		conn_pop(c);
	}
	c->unsent = NULL;
	if (c->watched) {
		epoll_ctl(c->r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
		c->watched = 0;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	if (c->rd)
		redisReaderFree(c->rd);
	c->rd = NULL;
	c->state = CONN_DOWN;
	c->last_err = err;
	c->was_down = true;
	backoff = c->failures < 7 ? BACKOFF_MIN_NS << c->failures : BACKOFF_MAX_NS;
	c->retry_ns = kvs_now_ns() + (backoff < BACKOFF_MAX_NS ? backoff : BACKOFF_MAX_NS);
	c->failures++;
}

/* An idle socket (nothing outstanding) may have been closed by the server
 * meanwhile (a restart, its idle timeout): look before queueing on it, and drop
 * it for an immediate reconnect if so, so no transfer fails for it. */
void conn_check_idle(struct conn *c)
{
	char byte;
	ssize_t n;

	if (c->state != CONN_UP || c->head)
		return;
	n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		return;
	kvs_log_info(&c->r->log, "redis %s: idle connection %s; reconnecting", c->ep->name,
		     n == 0 ? "closed by the server" : n > 0 ? "got unsolicited bytes" : "failed");
	conn_fail(c, -ECONNRESET, NULL);
	c->retry_ns = 0;
	c->failures = 0;
}

/* Write what is unsent, as far as the socket takes it.  0 or -errno. */
int conn_flush(struct conn *c)
{
	while (c->unsent && c->state == CONN_UP) {
		struct iovec iov[IOV_BATCH];
		struct msghdr msg = { .msg_iov = iov };
		uint64_t skip = c->unsent_off;
		ssize_t w;
		int n = 0;

		for (struct cmd *cmd = c->unsent; cmd && n + 3 <= IOV_BATCH; cmd = cmd->next) {
			const struct {
				const char *p;
				uint64_t len;
			} part[3] = { { cmd->hdr, cmd->hdr_len },
				      { cmd->val, cmd->val_len },
				      { cmd->tail, cmd->tail_len } };

			for (int k = 0; k < 3; k++) {
				if (skip >= part[k].len) {
					skip -= part[k].len;
					continue;
				}
				iov[n].iov_base = (char *)part[k].p + skip;
				iov[n].iov_len = part[k].len - skip;
				n++;
				skip = 0;
			}
		}
		msg.msg_iovlen = (size_t)n;
		w = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		for (uint64_t left = (uint64_t)w; left > 0;) {
			uint64_t rest = cmd_bytes(c->unsent) - c->unsent_off;

			if (left < rest) {
				c->unsent_off += left;
				break;
			}
			left -= rest;
			c->unsent = c->unsent->next;
			c->unsent_off = 0;
		}
	}
	return 0;
}

/* Finish every whole reply in the reader's buffer.  0 or -EPROTO. */
static int conn_replies(struct conn *c)
{
	for (;;) {
		void *reply = NULL;

		if (redisReaderGetReply(c->rd, &reply) != REDIS_OK) {
			conn_log(c, KVS_LOG_ERROR, "redis %s: protocol error: %s", c->ep->name,
				 c->rd->errstr);
			return -EPROTO;
		}
		if (!reply)
			return 0;
		if (!c->head) {
			conn_log(c, KVS_LOG_ERROR, "redis %s: a reply to no command", c->ep->name);
			return -EPROTO;
		}
		struct cmd *cmd = c->head;

		if (cmd->ask_pending) { /* ASKING's +OK: its command's reply comes next */
			cmd->ask_pending = false;
			continue;
		}
		if (cmd->wait_state == WAIT_SET) { /* the SET's reply: WAIT's comes next */
			cmd->wait_state = WAIT_WAIT;
			continue;
		}
		if ((cmd->kind == CMD_AUTH || cmd->kind == CMD_SELECT) && cmd->result < 0) {
			int err = cmd->kind == CMD_SELECT ? -EINVAL : (int)cmd->result;

			conn_pop(c);
			return err; /* the handshake failed: fail the socket */
		}
		conn_pop(c);
		/* The server answers: the backoff starts over at the next failure. */
		if (c->was_down)
			kvs_log_info(&c->r->log, "redis %s: connection re-established", c->ep->name);
		c->was_down = false;
		c->failures = 0;
	}
}

/* How much to receive next: up to the end of the oldest reply when it is a GET's
 * (its length is known: "$<header + shard_bytes>\r\n<value>\r\n"), so the reader's buffer
 * is empty after parsing it and its compaction moves nothing; else READ_CHUNK.
 * Only a hint: a reply of another length is parsed all the same. */
static size_t read_size(const struct conn *c)
{
	const redisReader *rd = c->rd;
	uint64_t total, have = sdslen(rd->buf) - rd->pos;
	char hdr[32];

	if (!c->head || c->head->kind != CMD_GET)
		return READ_CHUNK;
	total = (uint64_t)snprintf(hdr, sizeof(hdr), "$%llu\r\n",
				   (unsigned long long)(KVS_IO_VALUE_HDR + c->r->shard_bytes)) +
		KVS_IO_VALUE_HDR + c->r->shard_bytes + 2;
	return have < total && total - have < READ_CHUNK ? (size_t)(total - have) : READ_CHUNK;
}

/* Receive what has arrived, straight into the reader's buffer, and parse it.
 * 0, or -errno (-ECONNRESET at end of stream). */
static int conn_read(struct conn *c)
{
	redisReader *rd = c->rd;

	for (;;) {
		size_t want = read_size(c);
		ssize_t n;
		int rc;

		if (sdsavail(rd->buf) < READ_CHUNK) {
			sds b = sdsMakeRoomFor(rd->buf, READ_CHUNK);

			if (!b)
				return -ENOMEM;
			rd->buf = b;
		}
		n = recv(c->fd, rd->buf + sdslen(rd->buf), want, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		if (n == 0)
			return -ECONNRESET; /* the server closed it */
		sdsIncrLen(rd->buf, (int)n);
		rd->len = sdslen(rd->buf);
		rc = conn_replies(c);
		if (rc)
			return rc;
		if ((size_t)n < want)
			return 0; /* drained */
	}
}

/* Start a non-blocking connect and queue the handshake.  0 or -errno (the
 * socket is then DOWN with its backoff). */
int conn_connect(struct conn *c)
{
	const struct endpoint *ep = c->ep;
	struct redis *r = c->r;
	int fd, one = 1;

	fd = socket(ep->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = -errno;

		conn_fail(c, err, "socket()");
		return err;
	}
	if (ep->addr.ss_family != AF_UNIX)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->fd = fd;
	c->rd = redisReaderCreateWithFunctions(&redis_reply_fns);
	if (!c->rd) {
		conn_fail(c, -ENOMEM, "creating the reply reader");
		return -ENOMEM;
	}
	c->rd->privdata = c;
	c->rd->maxbuf = 0; /* keep the buffer: values are large, reallocating costs copies */
	c->state = CONN_CONNECTING;
	c->connect_deadline_ns = kvs_now_ns() + r->connect_timeout_ns;
	if (connect(fd, (const struct sockaddr *)&ep->addr, ep->addrlen) == 0) {
		c->state = CONN_UP;
	} else if (errno != EINPROGRESS) { /* unix sockets: EAGAIN is a full backlog */
		int err = -errno;

		conn_fail(c, err, "connect()");
		return err;
	}
	for (int i = 0; i < 2; i++) {
		struct cmd *h = &c->hs[i];

		h->kind = i == 0 ? CMD_AUTH : CMD_SELECT;
		h->val = i == 0 ? r->auth_cmd : r->select_cmd;
		h->val_len = i == 0 ? r->auth_len : r->select_len;
		h->hdr_len = h->tail_len = 0;
		h->deadline_ns = c->connect_deadline_ns + r->command_timeout_ns;
		h->result = -EPROTO;
		h->done = false;
		if (h->val)
			conn_push(c, h);
	}
	return 0;
}

/* A CONNECTING socket became writable (or failed).  0 or -errno. */
static int conn_connected(struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	if (err)
		return -err;
	c->state = CONN_UP;
	return conn_flush(c);
}

/* The data socket of ep for a new command: a live one with the fewest commands,
 * after (re)connecting every socket whose backoff is over.  NULL and *err when
 * every socket is down and backing off. */
struct conn *conn_pick(struct redis *r, const struct endpoint *ep, int *err)
{
	struct conn *best = NULL;
	uint64_t now = kvs_now_ns();

	*err = -ECONNREFUSED;
	for (uint32_t i = 0; i < r->nconn; i++) {
		struct conn *c = &ep->data[i];

		conn_check_idle(c);
		if (c->state == CONN_DOWN && now >= c->retry_ns)
			conn_connect(c);
		if (c->state == CONN_DOWN) {
			*err = c->last_err ? c->last_err : -ECONNREFUSED;
			continue;
		}
		if (!best || c->inflight < best->inflight)
			best = c;
	}
	return best;
}

/* ------------------------------------------------------------- waiting */

/* What the issuer waits for on socket c (POLLIN/POLLOUT, for ppoll and the wait
 * descriptor's epoll set alike): the connect while it is in progress, replies
 * while commands are outstanding (and room to write while some are unsent);
 * nothing while it is down or idle. */
_Static_assert(POLLIN == EPOLLIN && POLLOUT == EPOLLOUT, "poll and epoll event bits differ");
uint32_t conn_events(const struct conn *c)
{
	if (c->state == CONN_CONNECTING)
		return POLLOUT;
	if (c->state == CONN_UP && c->head)
		return c->unsent ? POLLIN | POLLOUT : POLLIN;
	return 0;
}

/* The deadline of a socket with conn_events(): its connect's, or its oldest
 * command's (later commands were submitted later, with the same timeout);
 * in cluster mode the earliest of its commands' (one sent again after a
 * redirection or a retry sits behind later ones). */
uint64_t conn_due(const struct conn *c)
{
	uint64_t due;

	if (c->state == CONN_CONNECTING)
		return c->connect_deadline_ns;
	due = c->head->deadline_ns;
	if (c->r->cluster)
		for (const struct cmd *cmd = c->head->next; cmd; cmd = cmd->next)
			if (cmd->deadline_ns < due)
				due = cmd->deadline_ns;
	return due;
}

/* Why socket c failed its deadline, from what it holds (for the operator): the
 * commands waiting, reply bytes received but not yet a whole reply, and what the
 * kernel holds either way -- replies that arrived since this step read (rare: a
 * reply landing at the deadline) or commands the server has not taken.  "the
 * server sent nothing more" says the server (or the path to it) stalled. */
static void timeout_why(const struct conn *c, char *buf, size_t len)
{
	size_t part = c->rd ? sdslen(c->rd->buf) - c->rd->pos : 0;
	int inq = 0, outq = 0;
	uint32_t waiting = 0;

	if (c->state == CONN_CONNECTING) {
		snprintf(buf, len, "connect timed out");
		return;
	}
	for (const struct cmd *cmd = c->head; cmd; cmd = cmd->next)
		waiting++;
	if (ioctl(c->fd, SIOCINQ, &inq) < 0)
		inq = 0;
	if (ioctl(c->fd, SIOCOUTQ, &outq) < 0)
		outq = 0;
	snprintf(buf, len, "no reply within the command timeout (%u commands waiting; %zu bytes "
		 "of the next reply received, %s%s)", waiting, part,
		 inq ? "more arriving just now" : "the server sent nothing more",
		 c->unsent || outq ? "; some commands not yet taken by the server" : "");
}

/*
 * One wait over the sockets v[0..n): sleep in ppoll until an event or
 * `deadline` (or the next command or connect deadline), connect, write and read
 * as the events say, then fail the sockets past a deadline.  What has arrived
 * is read before a deadline is judged, so a thread that was not scheduled for
 * a while does not fail replies waiting in its sockets.  Returns without
 * sleeping when no socket has anything outstanding.
 */
void conns_step(struct conn *const *v, uint32_t n, uint64_t deadline)
{
	/* data sockets, or lookup sockets (one per node) */
	struct pollfd pfd[SOCKETS_MAX + CLUSTER_NODES_MAX];
	struct conn *who[SOCKETS_MAX + CLUSTER_NODES_MAX];
	uint64_t now = kvs_now_ns(), wake = deadline;
	struct timespec ts;
	nfds_t np = 0;
	int ready;

	for (uint32_t i = 0; i < n; i++) {
		struct conn *c = v[i];
		uint32_t events = conn_events(c);
		uint64_t due;

		if (!events)
			continue;
		due = conn_due(c);
		if (due < wake)
			wake = due;
		pfd[np].fd = c->fd;
		pfd[np].events = (short)events;
		who[np++] = c;
	}
	if (np == 0)
		return;
	ts = kvs_ns_to_timespec(wake > now ? wake - now : 0);
	ready = ppoll(pfd, np, &ts, NULL); /* < 0: EINTR; the caller loops */
	for (nfds_t i = 0; ready > 0 && i < np; i++) {
		struct conn *c = who[i];
		short ev = pfd[i].revents;
		int rc = 0;

		if (!ev)
			continue;
		if (c->state == CONN_CONNECTING) {
			rc = conn_connected(c);
			if (rc) {
				conn_fail(c, rc, "connect()");
				continue;
			}
		}
		if (ev & (POLLIN | POLLERR | POLLHUP))
			rc = conn_read(c);
		if (!rc && (ev & POLLOUT))
			rc = conn_flush(c);
		if (rc)
			conn_fail(c, rc, rc == -ECONNRESET ? "closed by the server" : "I/O");
	}
	now = kvs_now_ns();
	for (nfds_t i = 0; i < np; i++) {
		struct conn *c = who[i];
		char why[192];

		if (!conn_events(c) || now < conn_due(c))
			continue;
		timeout_why(c, why, sizeof(why));
		conn_fail(c, -ETIMEDOUT, why);
	}
}

/* Wait until no socket of v[0..n) has anything outstanding, or the deadline:
 * then the sockets still waiting fail with -ETIMEDOUT (a socket's own earlier
 * deadlines fail it sooner, in conns_step). */
void conns_drain(struct conn *const *v, uint32_t n, uint64_t deadline, const char *why)
{
	for (;;) {
		bool busy = false;

		for (uint32_t i = 0; i < n; i++)
			busy |= conn_events(v[i]) != 0;
		if (!busy)
			return;
		if (kvs_now_ns() >= deadline)
			break;
		conns_step(v, n, deadline);
	}
	for (uint32_t i = 0; i < n; i++)
		if (conn_events(v[i]))
			conn_fail(v[i], -ETIMEDOUT, why);
}
