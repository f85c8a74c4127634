/*
 * io/redis.c — the `redis` backend: blocks in a Redis-protocol server (Redis,
 * Valkey, a managed service) that several nodes share, through hiredis.
 *
 * Keys.  Shard s of block b is the key <key_prefix><32 hex of b>:<s>, holding a
 * 64-byte header (io/format.c; docs/io.md, "redis": magic and version, the
 * shard index, shard_bytes, shards_per_block, a hash of the tensor table,
 * layout_tag, the block id, a checksum) and then the shard's shard_bytes bytes
 * (binary-safe: sent with their length).  A GET checks the header when its reply
 * is whole: a value stored with another geometry or layout_tag fails the shard
 * with -KVS_ECONFIG (WARN naming the key and both geometries); one without a
 * valid header (written before headers, planted by hand, torn), of another key
 * (block or shard), or of another length with -EIO (logged with the key): never
 * a partial slot.  A block is present when every one of its shards' keys
 * exists: one EXISTS naming them all per block, pipelined over the whole lookup
 * (lookup_batch), so a lookup of many blocks is one round trip per endpoint.
 * EXISTS does not read values: a block stored with another geometry is
 * present to lookup, and its read is what fails (-KVS_ECONFIG).
 * With several endpoints a block lives on endpoint (first 8 bytes of its id) %
 * count, all its shards together (client-side partitioning, as posix roots).
 *
 * Connections and pipelining.  Each endpoint has `connections` data sockets,
 * used only by the handle's issuer (the store's dispatcher), and one lookup
 * socket that lookups from any thread share under a mutex.  A submit formats the
 * command header into the command (GET: the whole command; SET: everything up to
 * the value), appends it to the least loaded socket of the block's endpoint and
 * writes at once, non-blocking (sendmsg, MSG_NOSIGNAL: a dead server is an
 * error, never SIGPIPE): commands queue on a socket while earlier replies are
 * outstanding, so many shards in flight cost no round trip each.  A SET's value
 * goes to the kernel straight from the caller's buffer (the slot) through the
 * iovec, after the value header, which is formatted into the command's header:
 * no copy into an output buffer.
 *
 * Polling.  poll() sleeps in ppoll(2) on the sockets that have commands
 * outstanding (POLLIN, plus POLLOUT while output is pending or a connect is in
 * progress), until the caller's deadline or the earliest command or connect
 * deadline: no thread of our own, no spinning (ns-resolution ppoll, so the
 * dispatcher's 100 us slices sleep too).  Replies are parsed by a hiredis
 * reader (redisReader) with our own reply-object functions: replies arrive in
 * command order, so the reply being parsed belongs to the socket's oldest
 * command, and a GET's bulk string is checked (its value header, in place in
 * the reader's buffer) and its shard bytes copied by createString straight from
 * the reader's buffer into the destination (the slot) — no reply object, no
 * allocation.  Bytes are received directly into the reader's buffer (its sds,
 * grown with sdsMakeRoomFor, in chunks of READ_CHUNK), so the one copy that
 * remains is reader buffer -> slot: hiredis parses only a bulk string that is
 * whole in its buffer (docs/io.md, "redis").  The reader compacts its buffer
 * after each reply (moving what follows it to the front), so a receive stops at
 * the end of a GET's reply, whose length is known: nothing is left to move.
 *
 * Wait descriptor (made at the first wait_fd): an epoll set that says when
 * poll's ppoll would return -- the same sockets with the same events, kept in
 * step at the end of every submit and poll as sockets connect, go idle, fail
 * and reconnect (an idle or down socket is not in it, so a server closing an
 * idle connection wakes nobody) -- and a timerfd armed for the nearest command
 * or connect deadline, or at once while completions wait to be reaped.  A
 * socket is read until it has nothing more, so a reply half received leaves
 * nothing readable until the rest arrives.  A reconnect's backoff is not in it:
 * reconnects wait for the next submit, the issuer's own doing.
 *
 * Failures.  An error reply fails its own shard only: OOM -ENOSPC, READONLY
 * -EROFS, NOAUTH/WRONGPASS/NOPERM -EACCES, LOADING/BUSY/MASTERDOWN/TRYAGAIN
 * -EBUSY, anything else -EIO; a nil GET is -ENOENT.  A socket that fails (EOF,
 * reset, a protocol error, or the oldest command past command_timeout_ns) fails
 * the commands queued on it with that error, is closed, and is reconnected at
 * the next use after a backoff (10 ms doubling to 1 s, reset by a successful
 * handshake); until then a submit to it fails at once with its error.  Only the
 * shards on that socket fail; the store publishes them FAILED, so the cache
 * stays consistent.  Error lines name the endpoint and the server's reply; they
 * are limited to one per socket per second (the rest are counted in the next).
 * Connects are non-blocking (ppoll with connect_timeout_ns); the handshake (AUTH
 * [user] password, SELECT db) is pipelined ahead of the first commands, and its
 * failure fails the socket (-EACCES for AUTH).  The password is never logged
 * and is wiped from memory at close.
 *
 * Open resolves the endpoints (getaddrinfo, once), reads password_file, and
 * connects each lookup socket once with the handshake and a PING: a refused or
 * missing password (WRONGPASS, NOAUTH) or SELECT fails the open (-EACCES /
 * -EINVAL: a configuration error, reported at startup); an endpoint that is
 * unreachable is logged and retried later (servers may start after us).
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/clock.h"
#include "io/fifo.h"
#include "io/internal.h"

#define READ_CHUNK (256u << 10)
#define IOV_BATCH 192 /* iovecs per sendmsg: 64 commands of three parts */
/* <prefix><32 hex>:<shard up to 65535> */
#define KEY_MAX (KVS_REDIS_PREFIX_LEN + 32 + 1 + 5)
/* The command's framing and key, then (SET) the value header. */
#define HDR_MAX (KEY_MAX + 64 + KVS_IO_VALUE_HDR)
#define TAIL_MAX 64
#define BACKOFF_MIN_NS (10 * UINT64_C(1000000))
#define BACKOFF_MAX_NS KVS_NSEC_PER_SEC
#define LOG_INTERVAL_NS KVS_NSEC_PER_SEC
#define REAP_MAX 64u

enum cmd_kind {
	CMD_GET,    /* a read: the value goes to dst */
	CMD_SET,    /* a write */
	CMD_AUTH,   /* handshake */
	CMD_SELECT, /* handshake */
	CMD_EXISTS, /* lookup: the integer is the result */
	CMD_PING,   /* open: is the endpoint usable with our credentials? */
};

static const char *const cmd_names[] = { "GET", "SET", "AUTH", "SELECT", "EXISTS", "PING" };

/* One command on a socket: bytes hdr[hdr_len] + val[val_len] + tail[tail_len]. */
struct cmd {
	struct cmd *next;
	uint32_t kind;     /* enum cmd_kind */
	uint32_t hdr_len, tail_len;
	uint32_t key_off, key_len; /* the key within hdr (GET, SET): for logs */
	struct kvs_block_id block; /* GET, SET: whose shard */
	uint32_t shard;
	const char *val;   /* SET: the value; AUTH, SELECT, EXISTS: the whole command */
	uint64_t val_len;
	char *dst;         /* GET: where bytes [offset, offset + len) of the value go */
	uint64_t offset, len;
	uint64_t token;
	uint64_t deadline_ns;
	int64_t result;    /* set by the reply functions: bytes, EXISTS count, -errno */
	bool done;         /* EXISTS: its reply arrived (or its socket failed) */
	char hdr[HDR_MAX];
	char tail[TAIL_MAX];
};

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct endpoint;

/* One socket to an endpoint.  Data sockets belong to the issuer thread; a
 * lookup socket is used under redis.lookup_mu. */
struct conn {
	struct redis *r;
	const struct endpoint *ep;
	int fd;                 /* -1 while DOWN */
	uint32_t state;         /* enum conn_state */
	redisReader *rd;
	struct cmd *head, *tail; /* queued and sent, oldest first: replies come in this order */
	struct cmd *unsent;     /* first command not completely written, NULL: none */
	uint64_t unsent_off;    /* bytes of *unsent written */
	uint32_t inflight;      /* data commands queued */
	uint32_t failures;      /* consecutive failures: the backoff's exponent */
	uint64_t connect_deadline_ns;
	uint64_t retry_ns;      /* DOWN: no connect before this */
	int last_err;           /* DOWN after a failure: what a submit gets until retry_ns */
	bool was_down;          /* a failure was logged: log the recovery */
	struct kvs_log_limit log_limit; /* of its error lines */
	uint32_t watched;       /* data socket: its events in redis.epfd, 0: not in it */
	struct cmd hs[2];       /* AUTH, SELECT */
};

struct endpoint {
	char name[KVS_REDIS_ENDPOINTS_LEN]; /* as configured (logs) */
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct conn *data;      /* connections sockets */
	struct conn lookup;
};

struct redis {
	struct kvs_log log;
	uint64_t shard_bytes;
	uint32_t spb;
	struct kvs_io_geom geom; /* stored in every value's header, checked at every GET */
	uint32_t qd;            /* data commands in flight per handle */
	uint32_t nconn;         /* data sockets per endpoint */
	uint32_t nep;
	uint64_t connect_timeout_ns, command_timeout_ns, ttl_ms;
	bool start_degraded; /* open even when an endpoint does not answer */
	char prefix[KVS_REDIS_PREFIX_LEN];
	char *auth_cmd;         /* formatted AUTH (holds the password), or NULL */
	size_t auth_len;
	char *select_cmd;       /* formatted SELECT, or NULL (db 0) */
	size_t select_len;
	struct endpoint *eps;
	struct cmd *cmds;       /* qd data commands */
	struct cmd *free_cmds;
	uint32_t inflight;
	struct kvs_io_fifo done; /* completions for poll */
	int epfd;               /* wait descriptor: busy data sockets + timer, -1 until asked */
	struct kvs_io_timer timer; /* nearest deadline, or at once while done holds any */
	pthread_mutex_t lookup_mu;
};

/* ------------------------------------------------------------------ logs */

/* An error line of socket c, at most one per LOG_INTERVAL_NS (later ones are
 * counted and the count is appended to the next line). */
#define conn_log(c, level, ...) \
	kvs_log_limited(&(c)->r->log, &(c)->log_limit, LOG_INTERVAL_NS, (level), __VA_ARGS__)

/* ------------------------------------------------------------- commands */

static size_t key_of(const struct redis *r, const struct kvs_block_id *block, uint32_t shard,
		     char *out, size_t len)
{
	char hex[33];

	kvs_io_block_hex(block, hex);
	return (size_t)snprintf(out, len, "%s%s:%u", r->prefix, hex, shard);
}

static struct endpoint *endpoint_of(const struct redis *r, const struct kvs_block_id *b)
{
	uint64_t h;

	memcpy(&h, b->bytes, sizeof(h));
	return &r->eps[h % r->nep];
}

/* GET <key>, or SET <key> <value header + shard> [PX <ttl>]: header (with the
 * value header) and tail into cmd; the shard's bytes stay in the caller's buffer. */
static void cmd_format(const struct redis *r, struct cmd *cmd, const struct kvs_backend_io *io,
		       bool write)
{
	char key[KEY_MAX + 1];
	size_t klen = key_of(r, &io->block, io->shard, key, sizeof(key));
	int n;

	cmd->kind = write ? CMD_SET : CMD_GET;
	n = snprintf(cmd->hdr, sizeof(cmd->hdr), "*%d\r\n$3\r\n%s\r\n$%zu\r\n",
		     write ? (r->ttl_ms ? 5 : 3) : 2, write ? "SET" : "GET", klen);
	cmd->key_off = (uint32_t)n;
	cmd->key_len = (uint32_t)klen;
	memcpy(cmd->hdr + n, key, klen);
	n += (int)klen;
	if (write) {
		n += snprintf(cmd->hdr + n, sizeof(cmd->hdr) - (size_t)n, "\r\n$%llu\r\n",
			      (unsigned long long)(KVS_IO_VALUE_HDR + io->len));
		kvs_io_value_hdr_encode(&r->geom, &io->block, io->shard, cmd->hdr + n);
		n += KVS_IO_VALUE_HDR;
	} else {
		n += snprintf(cmd->hdr + n, sizeof(cmd->hdr) - (size_t)n, "\r\n");
	}
	cmd->hdr_len = (uint32_t)n;
	cmd->tail_len = 0;
	if (write) {
		char ttl[24];
		int tl = snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)r->ttl_ms);

		cmd->tail_len = (uint32_t)(r->ttl_ms ? snprintf(cmd->tail, sizeof(cmd->tail),
								"\r\n$2\r\nPX\r\n$%d\r\n%s\r\n", tl, ttl)
						     : snprintf(cmd->tail, sizeof(cmd->tail), "\r\n"));
		cmd->val = io->buf;
		cmd->val_len = io->len;
	} else {
		cmd->val = NULL;
		cmd->val_len = 0;
		cmd->dst = io->buf;
		cmd->offset = io->offset;
		cmd->len = io->len;
	}
	cmd->block = io->block;
	cmd->shard = io->shard;
	cmd->token = io->token;
	cmd->result = -EPROTO; /* until a reply says otherwise */
	cmd->done = false;
}

static uint64_t cmd_bytes(const struct cmd *cmd)
{
	return cmd->hdr_len + cmd->val_len + cmd->tail_len;
}

static bool cmd_is_data(const struct cmd *cmd)
{
	return cmd->kind == CMD_GET || cmd->kind == CMD_SET;
}

/* A data command's end: its completion for poll, its memory back to the pool. */
static void cmd_complete(struct redis *r, struct conn *c, struct cmd *cmd)
{
	struct kvs_io_fifo_entry e = { .token = cmd->token, .result = cmd->result };

	if (kvs_io_fifo_push(&r->done, &e) < 0) {
		/* Cannot happen in practice (the FIFO grows by doubling and holds at most
		 * qd entries); say so rather than lose a completion silently. */
		kvs_log_error(&r->log, "redis %s: out of memory queueing a completion: the "
				       "transfer's task will time out", c->ep->name);
	}
	c->inflight--;
	r->inflight--;
	cmd->next = r->free_cmds;
	r->free_cmds = cmd;
}

/* ------------------------------------------------------- reply functions */

/* The errno of a server error reply, by its first word. */
static int reply_errno(const char *s, size_t n)
{
	static const struct {
		const char *word;
		int err;
	} map[] = {
		{ "OOM", -ENOSPC },	   { "READONLY", -EROFS },  { "NOAUTH", -EACCES },
		{ "WRONGPASS", -EACCES }, { "NOPERM", -EACCES },   { "LOADING", -EBUSY },
		{ "BUSY", -EBUSY },	   { "MASTERDOWN", -EBUSY }, { "TRYAGAIN", -EBUSY },
	};
	size_t w = 0;

	while (w < n && s[w] != ' ')
		w++;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strlen(map[i].word) == w && memcmp(map[i].word, s, w) == 0)
			return map[i].err;
	return -EIO;
}

/*
 * A GET's value, n bytes at s (in the reader's buffer): its header checked
 * against the command's block and shard and this handle's geometry, then bytes
 * [offset, offset + len) of the shard after it copied to the destination.
 */
static void get_value(struct conn *c, struct cmd *cmd, const char *s, size_t n)
{
	const struct redis *r = c->r;
	struct kvs_io_value_hdr h;
	char why[160];
	int rc = kvs_io_value_hdr_decode(s, n, &h, why, sizeof(why));

	if (rc == 0 && (memcmp(&h.block, &cmd->block, sizeof(h.block)) || h.shard != cmd->shard)) {
		char hex[33];

		kvs_io_block_hex(&h.block, hex);
		snprintf(why, sizeof(why), "holds shard %u of block %s (copied from another key)",
			 h.shard, hex);
		rc = -EIO;
	}
	if (rc == 0 && !kvs_io_geom_same(&h.geom, &r->geom)) {
		char stored[KVS_IO_GEOM_DESCRIBE_MAX], ours[KVS_IO_GEOM_DESCRIBE_MAX];

		kvs_io_geom_describe(&h.geom, false, stored, sizeof(stored));
		kvs_io_geom_describe(&r->geom, true, ours, sizeof(ours));
		conn_log(c, KVS_LOG_WARN, "redis %s: GET %.*s: stored with %s; this store has %s",
			 c->ep->name, (int)cmd->key_len, cmd->hdr + cmd->key_off, stored, ours);
		cmd->result = -KVS_ECONFIG;
		return;
	}
	if (rc == 0 && n != KVS_IO_VALUE_HDR + r->shard_bytes) {
		snprintf(why, sizeof(why), "a shard is %llu bytes after a %d-byte header (cut short, "
			 "or extended)", (unsigned long long)r->shard_bytes, KVS_IO_VALUE_HDR);
		rc = -EIO;
	}
	if (rc < 0) {
		conn_log(c, KVS_LOG_ERROR, "redis %s: GET %.*s: value of %zu bytes: %s: read failed",
			 c->ep->name, (int)cmd->key_len, cmd->hdr + cmd->key_off, n, why);
		cmd->result = -EIO;
		return;
	}
	memcpy(cmd->dst, s + KVS_IO_VALUE_HDR + cmd->offset, cmd->len);
	cmd->result = (int64_t)cmd->len;
}

/* The command whose reply is being parsed: the socket's oldest. */
static struct cmd *parsing(const redisReadTask *t)
{
	const struct conn *c = t->privdata;

	return c->head;
}

static void *on_string(const redisReadTask *t, char *s, size_t n)
{
	struct conn *c = t->privdata;
	struct cmd *cmd = parsing(t);
	const char *what;

	if (!cmd || t->parent)
		return c; /* unsolicited or nested: cmd keeps -EPROTO (or there is none) */
	what = cmd_names[cmd->kind];
	if (t->type == REDIS_REPLY_ERROR) {
		cmd->result = cmd->kind == CMD_AUTH ? -EACCES : reply_errno(s, n);
		if (cmd->kind == CMD_GET || cmd->kind == CMD_SET)
			conn_log(c, KVS_LOG_ERROR, "redis %s: %s %.*s: server replied: %.*s",
				 c->ep->name, what, (int)cmd->key_len, cmd->hdr + cmd->key_off,
				 (int)(n < 200 ? n : 200), s);
		else
			conn_log(c, KVS_LOG_ERROR, "redis %s: %s failed: server replied: %.*s",
				 c->ep->name, what, (int)(n < 200 ? n : 200), s);
	} else if (t->type == REDIS_REPLY_STATUS) {
		cmd->result = cmd->kind == CMD_GET || cmd->kind == CMD_EXISTS ? -EPROTO
										 : (int64_t)cmd->val_len;
	} else if (cmd->kind == CMD_GET && t->type == REDIS_REPLY_STRING) {
		get_value(c, cmd, s, n);
	}
	return c;
}

static void *on_integer(const redisReadTask *t, long long v)
{
	struct cmd *cmd = parsing(t);

	if (cmd && !t->parent && cmd->kind == CMD_EXISTS)
		cmd->result = v;
	return t->privdata;
}

static void *on_nil(const redisReadTask *t)
{
	struct cmd *cmd = parsing(t);

	if (cmd && !t->parent && cmd->kind == CMD_GET)
		cmd->result = -ENOENT; /* absent (or expired since the lookup) */
	return t->privdata;
}

static void *on_array(const redisReadTask *t, int n)
{
	(void)n;
	return t->privdata; /* no command of ours gets one: cmd keeps -EPROTO */
}

static void on_free(void *obj)
{
	(void)obj; /* replies are the socket pointer itself: nothing allocated */
}

static redisReplyObjectFunctions reply_fns = {
	.createString = on_string,
	.createArray = on_array,
	.createInteger = on_integer,
	.createNil = on_nil,
	.freeObject = on_free,
};

/* ----------------------------------------------------------- a socket */

static void conn_push(struct conn *c, struct cmd *cmd)
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
	if (cmd_is_data(cmd))
		cmd_complete(c->r, c, cmd);
	else
		cmd->done = true;
}

/* The socket failed with err (why: for the log line; NULL: quietly, at close):
 * every command on it ends with err, the socket is closed, and reconnecting
 * waits for the backoff. */
static void conn_fail(struct conn *c, int err, const char *why)
{
	uint64_t backoff;

	if (why)
		conn_log(c, KVS_LOG_ERROR, "redis %s: connection %s: %s (%s); %u transfers on it "
			 "failed; reconnecting after a backoff", c->ep->name,
			 c->state == CONN_CONNECTING ? "not established" : "lost", why,
			 kvs_strerror(err), c->inflight);
	while (c->head) {
		c->head->result = err;
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
static void conn_check_idle(struct conn *c)
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
static int conn_flush(struct conn *c)
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
static int conn_connect(struct conn *c)
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
	c->rd = redisReaderCreateWithFunctions(&reply_fns);
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
static struct conn *conn_pick(struct redis *r, const struct endpoint *ep, int *err)
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
static uint32_t conn_events(const struct conn *c)
{
	if (c->state == CONN_CONNECTING)
		return POLLOUT;
	if (c->state == CONN_UP && c->head)
		return c->unsent ? POLLIN | POLLOUT : POLLIN;
	return 0;
}

/* The deadline of a socket with conn_events(): its connect's, or its oldest
 * command's (later commands were submitted later, with the same timeout). */
static uint64_t conn_due(const struct conn *c)
{
	return c->state == CONN_CONNECTING ? c->connect_deadline_ns : c->head->deadline_ns;
}

/*
 * One wait over the sockets v[0..n): fail the ones past a deadline, sleep in
 * ppoll until an event or `deadline` (or the next command or connect deadline),
 * then connect, write and read as the events say.  Returns without sleeping
 * when no socket has anything outstanding.
 */
static void conns_step(struct conn *const *v, uint32_t n, uint64_t deadline)
{
	struct pollfd pfd[KVS_REDIS_MAX_ENDPOINTS * (KVS_REDIS_MAX_CONNECTIONS + 1)];
	struct conn *who[KVS_REDIS_MAX_ENDPOINTS * (KVS_REDIS_MAX_CONNECTIONS + 1)];
	uint64_t now = kvs_now_ns(), wake = deadline;
	struct timespec ts;
	nfds_t np = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct conn *c = v[i];
		uint32_t events = conn_events(c);
		uint64_t due;

		if (!events)
			continue;
		due = conn_due(c);
		if (now >= due) {
			conn_fail(c, -ETIMEDOUT, c->state == CONN_CONNECTING
							 ? "connect timed out"
							 : "no reply within the command timeout");
			continue;
		}
		if (due < wake)
			wake = due;
		pfd[np].fd = c->fd;
		pfd[np].events = (short)events;
		who[np++] = c;
	}
	if (np == 0)
		return;
	ts = (struct timespec){ .tv_sec = (time_t)((wake > now ? wake - now : 0) / KVS_NSEC_PER_SEC),
				.tv_nsec = (long)((wake > now ? wake - now : 0) % KVS_NSEC_PER_SEC) };
	if (ppoll(pfd, np, &ts, NULL) <= 0)
		return; /* timeout, or EINTR: the caller loops */
	for (nfds_t i = 0; i < np; i++) {
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
}

/* Wait until no socket of v[0..n) has anything outstanding, or the deadline:
 * then the sockets still waiting fail with -ETIMEDOUT (a socket's own earlier
 * deadlines fail it sooner, in conns_step). */
static void conns_drain(struct conn *const *v, uint32_t n, uint64_t deadline, const char *why)
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

/*
 * Bring the wait descriptor in step with what poll would wait for (the issuer,
 * at the end of submit and poll): every data socket with conn_events() in the
 * epoll set with those events, no other; the timer at the nearest of their
 * deadlines, or at once (1 ns, long past) while completions wait in r->done.
 * A socket that cannot be added (-ENOMEM) is logged and retried at the next
 * call; its deadline still wakes the issuer.
 */
static void wait_sync(struct redis *r)
{
	uint64_t due = kvs_io_fifo_head(&r->done) ? 1 : 0;

	for (uint32_t e = 0; e < r->nep; e++) {
		for (uint32_t i = 0; i < r->nconn; i++) {
			struct conn *c = &r->eps[e].data[i];
			uint32_t events = conn_events(c);

			if (events != c->watched) {
				struct epoll_event ev = { .events = events, .data.fd = c->fd };
				int op = !c->watched ? EPOLL_CTL_ADD
					 : !events   ? EPOLL_CTL_DEL
						     : EPOLL_CTL_MOD;

				if (epoll_ctl(r->epfd, op, c->fd, &ev) == 0)
					c->watched = events;
				else
					conn_log(c, KVS_LOG_ERROR, "redis %s: epoll_ctl of the wait "
						 "descriptor: %s", c->ep->name, strerror(errno));
			}
			if (events && (due == 0 || conn_due(c) < due))
				due = conn_due(c);
		}
	}
	kvs_io_timer_arm(&r->timer, due);
}

/* ------------------------------------------------------------- the ops */

static int redis_submit(struct redis *r, const struct kvs_backend_io *io, bool write)
{
	struct endpoint *ep = endpoint_of(r, &io->block);
	struct cmd *cmd;
	struct conn *c;
	int err, rc;

	if (r->inflight >= r->qd || !r->free_cmds)
		return -EAGAIN;
	c = conn_pick(r, ep, &err);
	if (!c)
		return err; /* logged when the socket failed; retried after the backoff */
	cmd = r->free_cmds;
	r->free_cmds = cmd->next;
	cmd_format(r, cmd, io, write);
	cmd->deadline_ns = kvs_now_ns() + r->command_timeout_ns;
	conn_push(c, cmd);
	c->inflight++;
	r->inflight++;
	rc = conn_flush(c);
	if (rc)
		conn_fail(c, rc, "sending"); /* completes cmd with rc too */
	if (r->epfd >= 0)
		wait_sync(r);
	return 0;
}

static int redis_submit_read(void *state, const struct kvs_backend_io *io)
{
	return redis_submit(state, io, false);
}

static int redis_submit_write(void *state, const struct kvs_backend_io *io)
{
	return redis_submit(state, io, true);
}

/* The data sockets with commands outstanding or a connect in progress, into v.
 * Returns the count. */
static uint32_t busy_conns(struct redis *r, struct conn **v)
{
	uint32_t n = 0;

	for (uint32_t e = 0; e < r->nep; e++) {
		for (uint32_t i = 0; i < r->nconn; i++) {
			struct conn *c = &r->eps[e].data[i];

			if (conn_events(c))
				v[n++] = c;
		}
	}
	return n;
}

/* Completions into out (up to max), waiting until deadline for the first. */
static uint32_t poll_done(struct redis *r, struct kvs_backend_completion *out, uint32_t max,
			  uint64_t deadline)
{
	struct conn *v[KVS_REDIS_MAX_ENDPOINTS * KVS_REDIS_MAX_CONNECTIONS];

	for (;;) {
		const struct kvs_io_fifo_entry *e;
		uint32_t k = 0, n;

		while (k < max && (e = kvs_io_fifo_head(&r->done))) {
			out[k].token = e->token;
			out[k].result = e->result;
			k++;
			kvs_io_fifo_pop(&r->done);
		}
		if (k > 0)
			return k;
		n = busy_conns(r, v);
		if (n == 0)
			return 0; /* nothing in flight: nothing to wait for */
		conns_step(v, n, deadline);
		if (kvs_now_ns() >= deadline && !kvs_io_fifo_head(&r->done))
			return 0;
	}
}

static int redis_poll(void *state, struct kvs_backend_completion *out, uint32_t max,
		      uint64_t timeout_ns)
{
	struct redis *r = state;
	uint32_t k = poll_done(r, out, max, kvs_deadline_after(timeout_ns));

	if (r->epfd >= 0)
		wait_sync(r);
	return (int)k;
}

static int redis_wait_fd(void *state)
{
	struct redis *r = state;
	int rc;

	if (r->epfd >= 0)
		return r->epfd;
	rc = kvs_io_timer_open(&r->timer);
	if (rc < 0)
		return rc;
	rc = kvs_io_epoll_open(&r->timer.fd, 1);
	if (rc < 0) {
		kvs_io_timer_close(&r->timer);
		return rc;
	}
	r->epfd = rc;
	wait_sync(r);
	return r->epfd;
}

/* ---------------------------------------------------------------- lookup */

/* The EXISTS command of every block with hits[i] false, into one text buffer
 * (*text) and cmds[0..*k) pointing into it (token = the block's index).
 * 0 or -ENOMEM. */
static int lookup_format(const struct redis *r, const struct kvs_block_id *blocks, size_t n,
			 const bool *hits, struct cmd *cmds, size_t *k, char **text)
{
	size_t cap = 0, used = 0, need = 32 + (size_t)r->spb * (KEY_MAX + 16);

	*k = 0;
	for (size_t i = 0; i < n; i++) {
		struct cmd *cmd;
		size_t start = used;

		if (hits[i])
			continue;
		if (cap - used < need) {
			size_t ncap = (cap + need) * 2;
			char *t = realloc(*text, ncap);

			if (!t)
				return -ENOMEM;
			*text = t;
			cap = ncap;
		}
		used += (size_t)snprintf(*text + used, cap - used, "*%u\r\n$6\r\nEXISTS\r\n",
					 r->spb + 1);
		for (uint32_t sh = 0; sh < r->spb; sh++) {
			char key[KEY_MAX + 1];
			size_t kl = key_of(r, &blocks[i], sh, key, sizeof(key));

			used += (size_t)snprintf(*text + used, cap - used, "$%zu\r\n", kl);
			memcpy(*text + used, key, kl);
			used += kl;
			memcpy(*text + used, "\r\n", 2);
			used += 2;
		}
		cmd = &cmds[(*k)++];
		cmd->kind = CMD_EXISTS;
		cmd->offset = start; /* the text may still move: pointers are set after */
		cmd->val_len = used - start;
		cmd->token = i;
		cmd->result = -EPROTO;
	}
	for (size_t j = 0; j < *k; j++)
		cmds[j].val = *text + cmds[j].offset;
	return 0;
}

/* Ask EXISTS for every asked block, pipelined on the endpoints' lookup sockets,
 * and wait for the replies (command_timeout_ns at most).  Under lookup_mu. */
static int lookup_locked(struct redis *r, const struct kvs_block_id *blocks, size_t n,
			 bool *hits)
{
	struct conn *v[KVS_REDIS_MAX_ENDPOINTS] = { NULL };
	uint64_t deadline = kvs_now_ns() + r->command_timeout_ns;
	size_t asked = 0, k = 0;
	struct cmd *cmds;
	char *text = NULL;
	uint32_t nv = 0;
	int rc, hit = 0;

	for (size_t i = 0; i < n; i++)
		asked += !hits[i];
	cmds = calloc(asked ? asked : 1, sizeof(*cmds));
	if (!cmds)
		return -ENOMEM;
	rc = lookup_format(r, blocks, n, hits, cmds, &k, &text);
	for (size_t j = 0; j < k && !rc; j++) {
		struct cmd *cmd = &cmds[j];
		struct conn *c = &endpoint_of(r, &blocks[cmd->token])->lookup;
		uint32_t m = 0;

		cmd->deadline_ns = deadline;
		conn_check_idle(c);
		if (c->state == CONN_DOWN && kvs_now_ns() >= c->retry_ns)
			conn_connect(c);
		if (c->state == CONN_DOWN) {
			cmd->result = c->last_err ? c->last_err : -ECONNREFUSED;
			cmd->done = true;
			continue;
		}
		conn_push(c, cmd);
		while (m < nv && v[m] != c)
			m++;
		if (m == nv)
			v[nv++] = c;
	}
	for (uint32_t m = 0; m < nv; m++) {
		int err = v[m]->state == CONN_UP ? conn_flush(v[m]) : 0;

		if (err)
			conn_fail(v[m], err, "sending");
	}
	conns_drain(v, nv, deadline, "no lookup reply within the command timeout");
	for (size_t j = 0; j < k && !rc; j++) {
		if (cmds[j].result < 0)
			rc = (int)cmds[j].result;
		else
			hits[cmds[j].token] = cmds[j].result == (int64_t)r->spb;
	}
	for (size_t i = 0; i < n; i++)
		hit += hits[i];
	free(text);
	free(cmds);
	return rc < 0 ? rc : hit;
}

static int redis_lookup_batch(void *state, const struct kvs_block_id *blocks, size_t n,
			      bool *hits)
{
	struct redis *r = state;
	int rc;

	pthread_mutex_lock(&r->lookup_mu);
	rc = lookup_locked(r, blocks, n, hits);
	pthread_mutex_unlock(&r->lookup_mu);
	return rc;
}

static int redis_lookup(void *state, const struct kvs_block_id *block)
{
	bool hit = false;
	int rc = redis_lookup_batch(state, block, 1, &hit);

	return rc < 0 ? rc : hit;
}

/* ------------------------------------------------------------- open/close */

/* "host:port", "[v6]:port" or "/unix/path" into ep.  0 or -EINVAL (logged). */
static int endpoint_parse(struct redis *r, struct endpoint *ep, const char *s, size_t len)
{
	char host[KVS_REDIS_ENDPOINTS_LEN], *end;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	const char *colon;
	long port;
	int rc;

	memcpy(ep->name, s, len);
	ep->name[len] = '\0';
	if (s[0] == '/') {
		struct sockaddr_un *un = (struct sockaddr_un *)&ep->addr;

		if (len >= sizeof(un->sun_path)) {
			kvs_log_error(&r->log, "backend: redis endpoint '%s': a unix socket path is "
					       "at most %zu characters", ep->name,
				      sizeof(un->sun_path) - 1);
			return -EINVAL;
		}
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, s, len);
		ep->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
		return 0;
	}
	colon = memrchr(s, ':', len);
	if (!colon || colon == s || colon + 1 == s + len)
		goto bad;
	port = strtol(colon + 1, &end, 10);
	if (end != s + len || port <= 0 || port > 65535)
		goto bad;
	if (s[0] == '[') {
		if (colon[-1] != ']' || colon - s < 3)
			goto bad;
		memcpy(host, s + 1, (size_t)(colon - s - 2));
		host[colon - s - 2] = '\0';
	} else {
		memcpy(host, s, (size_t)(colon - s));
		host[colon - s] = '\0';
	}
	rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc) {
		kvs_log_error(&r->log, "backend: redis endpoint '%s': cannot resolve '%s': %s",
			      ep->name, host, gai_strerror(rc));
		return rc == EAI_NONAME ? -ENOENT : -EINVAL;
	}
	memcpy(&ep->addr, res->ai_addr, res->ai_addrlen);
	ep->addrlen = res->ai_addrlen;
	((struct sockaddr_in *)&ep->addr)->sin_port = htons((uint16_t)port); /* same offset in v6 */
	freeaddrinfo(res);
	return 0;
bad:
	kvs_log_error(&r->log, "backend: redis endpoint '%s': want host:port, [v6addr]:port or "
			       "an absolute unix socket path", ep->name);
	return -EINVAL;
}

/* The first line of path (without its newline) into out[len].  0 or -errno;
 * the file's contents are never logged. */
static int password_read(struct redis *r, const char *path, char *out, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t n;

	if (fd < 0) {
		int err = -errno;

		kvs_log_error(&r->log, "backend: redis password_file '%s': %s", path,
			      kvs_strerror(err));
		return err;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 0077))
		kvs_log_warn(&r->log, "backend: redis password_file '%s' is readable by group or "
				      "others (mode %03o): chmod 600 it", path,
			     (unsigned)(st.st_mode & 0777));
	n = read(fd, out, len - 1);
	close(fd);
	if (n < 0) {
		int err = -errno;

		kvs_log_error(&r->log, "backend: redis password_file '%s': %s", path,
			      kvs_strerror(err));
		return err;
	}
	out[n] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	if (!out[0]) {
		kvs_log_error(&r->log, "backend: redis password_file '%s' is empty", path);
		return -EINVAL;
	}
	return 0;
}

/* AUTH and SELECT, formatted once for every socket's handshake. */
static int handshake_format(struct redis *r, const struct kvs_backend_redis_config *rcfg,
			    const char *password)
{
	if (password[0]) {
		const char *argv[3] = { "AUTH", rcfg->user, password };
		size_t argl[3] = { 4, strlen(rcfg->user), strlen(password) };
		int skip = rcfg->user[0] ? 0 : 1; /* AUTH <password> for the default user */
		char *cmd = NULL;
		int len;

		argv[skip] = "AUTH";
		argl[skip] = 4;
		len = redisFormatCommandArgv(&cmd, 3 - skip, argv + skip, argl + skip);
		if (len < 0)
			return -ENOMEM;
		r->auth_cmd = cmd;
		r->auth_len = (size_t)len;
	}
	if (rcfg->db) {
		char db[16];
		const char *argv[2] = { "SELECT", db };
		size_t argl[2] = { 6, (size_t)snprintf(db, sizeof(db), "%u", rcfg->db) };
		char *cmd = NULL;
		int len = redisFormatCommandArgv(&cmd, 2, argv, argl);

		if (len < 0)
			return -ENOMEM;
		r->select_cmd = cmd;
		r->select_len = (size_t)len;
	}
	return 0;
}

/* Connect the lookup socket of ep, run its handshake and a PING: -EACCES /
 * -EINVAL when the server refuses them (a wrong or missing password, a bad db);
 * the connect's error when the server does not answer, unless start_degraded
 * (then it is logged, and its transfers fail until it answers); 0 otherwise. */
static int endpoint_check(struct redis *r, struct endpoint *ep)
{
	static const char ping_text[] = "*1\r\n$4\r\nPING\r\n";
	struct cmd ping = { .kind = CMD_PING, .val = ping_text, .val_len = sizeof(ping_text) - 1,
			    .result = -EPROTO };
	struct conn *c = &ep->lookup;
	struct conn *v[1] = { c };
	uint64_t deadline = kvs_now_ns() + r->connect_timeout_ns + r->command_timeout_ns;

	if (conn_connect(c) == 0) {
		ping.deadline_ns = deadline;
		conn_push(c, &ping);
		if (c->state == CONN_UP) {
			int rc = conn_flush(c);

			if (rc)
				conn_fail(c, rc, "sending");
		}
		conns_drain(v, 1, deadline, "no handshake reply within the timeouts");
		if (c->hs[0].result == -EACCES || ping.result == -EACCES)
			return -EACCES; /* logged with the server's reply */
		if (c->hs[1].val && c->hs[1].done && c->hs[1].result < 0)
			return -EINVAL;
	}
	if (c->state != CONN_DOWN)
		return 0;
	if (!r->start_degraded) {
		kvs_log_error(&r->log, "backend: redis %s unreachable at open (%s): nothing could "
				       "be stored or loaded there; start the server, fix "
				       "redis_endpoints, or set redis_start_degraded=1 to open "
				       "anyway (its transfers fail until it answers)",
			      ep->name, kvs_strerror(c->last_err));
		return c->last_err < 0 ? c->last_err : -ECONNREFUSED;
	}
	kvs_log_warn(&r->log, "backend: redis %s unreachable at open (%s), opened degraded "
			      "(redis_start_degraded=1): its transfers fail until it answers",
		     ep->name, kvs_strerror(c->last_err));
	return 0;
}

static void conn_init(struct conn *c, struct redis *r, const struct endpoint *ep)
{
	memset(c, 0, sizeof(*c));
	c->r = r;
	c->ep = ep;
	c->fd = -1;
}

static void redis_close(void *state);

static int redis_open(const struct kvs_backend_config *cfg, void **state)
{
	const struct kvs_backend_redis_config *rcfg = &cfg->redis;
	char password[KVS_REDIS_PASSWORD_LEN];
	struct redis *r = calloc(1, sizeof(*r));
	int rc = 0;

	if (!r)
		return -ENOMEM;
	r->log.fn = cfg->log;
	r->log.arg = cfg->log_arg;
	r->shard_bytes = cfg->shard_bytes;
	r->spb = cfg->shards_per_block;
	kvs_io_geom_init(&r->geom, cfg);
	r->qd = cfg->queue_depth;
	r->nconn = rcfg->connections;
	r->connect_timeout_ns = rcfg->connect_timeout_ns;
	r->command_timeout_ns = rcfg->command_timeout_ns;
	r->ttl_ms = rcfg->ttl_ms;
	r->start_degraded = rcfg->start_degraded;
	memcpy(r->prefix, rcfg->key_prefix, sizeof(r->prefix));
	r->epfd = -1;
	r->timer.fd = -1;
	pthread_mutex_init(&r->lookup_mu, NULL);
	*state = r;

	memcpy(password, rcfg->password, sizeof(password));
	if (!password[0] && rcfg->password_file[0])
		rc = password_read(r, rcfg->password_file, password, sizeof(password));
	if (!rc)
		rc = handshake_format(r, rcfg, password);
	explicit_bzero(password, sizeof(password));
	if (rc)
		goto fail;

	r->eps = calloc(KVS_REDIS_MAX_ENDPOINTS, sizeof(*r->eps));
	r->cmds = calloc(r->qd, sizeof(*r->cmds));
	if (!r->eps || !r->cmds) {
		rc = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < r->qd; i++) {
		r->cmds[i].next = r->free_cmds;
		r->free_cmds = &r->cmds[i];
	}
	for (const char *s = rcfg->endpoints;; s++) {
		size_t len = strcspn(s, ";");
		struct endpoint *ep;

		if (r->nep == KVS_REDIS_MAX_ENDPOINTS) {
			kvs_log_error(&r->log, "backend: redis endpoints: more than %d",
				      KVS_REDIS_MAX_ENDPOINTS);
			rc = -EINVAL;
			goto fail;
		}
		if (len == 0) {
			kvs_log_error(&r->log, "backend: redis endpoints '%s': an empty entry",
				      rcfg->endpoints);
			rc = -EINVAL;
			goto fail;
		}
		ep = &r->eps[r->nep];
		ep->data = calloc(r->nconn, sizeof(*ep->data));
		if (!ep->data) {
			rc = -ENOMEM;
			goto fail;
		}
		r->nep++;
		for (uint32_t i = 0; i < r->nconn; i++)
			conn_init(&ep->data[i], r, ep);
		conn_init(&ep->lookup, r, ep);
		rc = endpoint_parse(r, ep, s, len);
		if (rc)
			goto fail;
		s += len;
		if (!*s)
			break;
	}
	for (uint32_t e = 0; e < r->nep && !rc; e++)
		rc = endpoint_check(r, &r->eps[e]);
	if (rc)
		goto fail;
	return 0;
fail:
	redis_close(r);
	*state = NULL;
	return rc;
}

static void redis_close(void *state)
{
	struct redis *r = state;
	struct conn *v[KVS_REDIS_MAX_ENDPOINTS * KVS_REDIS_MAX_CONNECTIONS];
	uint64_t deadline;
	uint32_t n;

	if (!r)
		return;
	/* Finish what is in flight (bounded by the command timeout), then drop it. */
	deadline = kvs_now_ns() + r->command_timeout_ns;
	n = r->eps ? busy_conns(r, v) : 0;
	conns_drain(v, n, deadline, "closing: no reply within the command timeout");
	for (uint32_t e = 0; e < r->nep; e++) {
		for (uint32_t i = 0; i < r->nconn; i++) {
			struct conn *c = &r->eps[e].data[i];

			if (c->state != CONN_DOWN || c->head)
				conn_fail(c, -ECANCELED, NULL);
		}
		if (r->eps[e].lookup.state != CONN_DOWN)
			conn_fail(&r->eps[e].lookup, -ECANCELED, NULL);
		free(r->eps[e].data);
	}
	free(r->eps);
	free(r->cmds);
	kvs_io_fifo_fini(&r->done);
	if (r->epfd >= 0)
		close(r->epfd);
	kvs_io_timer_close(&r->timer);
	if (r->auth_cmd) {
		explicit_bzero(r->auth_cmd, r->auth_len);
		redisFreeCommand(r->auth_cmd);
	}
	redisFreeCommand(r->select_cmd);
	pthread_mutex_destroy(&r->lookup_mu);
	free(r);
}

const struct kvs_backend_ops kvs_io_redis_ops = {
	.abi = KVS_BACKEND_OPS_ABI,
	.size = sizeof(struct kvs_backend_ops),
	.open = redis_open,
	.lookup = redis_lookup,
	.submit_read = redis_submit_read,
	.submit_write = redis_submit_write,
	.poll = redis_poll,
	.close = redis_close,
	.lookup_batch = redis_lookup_batch,
	.wait_fd = redis_wait_fd,
};
