/*
 * io/redis.c — the `redis` backend: blocks in a Redis-protocol server (Redis,
 * Valkey, a managed service) that several nodes share, through hiredis.
 *
 * Files.  This one is the backend: its ops, the keys and commands it formats,
 * polling and the wait descriptor, lookups, endpoints and the password file.
 * io/redis_conn.c is one socket's life (connect and handshake, writing, reading,
 * failing) and the waits over several sockets; io/redis_reply.c what a reply
 * means to its command; io/redis_impl.h the types they share.
 *
 * Keys.  Shard s of block b is the key <key_prefix><32 hex of b>:<s>, holding a
 * 64-byte header (io/format.c; docs/io.md, "redis": magic and version, the
 * shard index, shard_bytes, shards_per_block, a hash of the tensor table,
 * layout_tag, the block id, a checksum) and then the shard's shard_bytes bytes
 * (binary-safe: sent with their length).  A GET checks the header when its reply
 * is whole (io/redis_reply.c): never a partial slot.  A block is present when
 * every one of its shards' keys exists: one EXISTS naming them all per block,
 * pipelined over the whole lookup (lookup_batch), so a lookup of many blocks is
 * one round trip per endpoint.  EXISTS does not read values: a block stored with
 * another geometry is present to lookup, and its read is what fails
 * (-KVS_ECONFIG).
 * With several endpoints a block lives on endpoint (first 8 bytes of its id) %
 * count, all its shards together (client-side partitioning, as posix roots).
 * With redis_cluster=1 the endpoints are seeds of a Redis Cluster instead, the
 * keys <key_prefix>{<32 hex>}:<s> (the block id their hash tag: one slot per
 * block), and io/redis_cluster.c routes each command to its slot's master.
 *
 * Connections and pipelining.  Each endpoint has `connections` data sockets,
 * used only by the handle's issuer (the store's dispatcher), and one lookup
 * socket that lookups from any thread share under a mutex.  A submit formats the
 * command header into the command (GET: the whole command; SET: everything up to
 * the value), appends it to the least loaded socket of the block's endpoint and
 * writes at once (io/redis_conn.c): commands queue on a socket while earlier
 * replies are outstanding, so many shards in flight cost no round trip each.
 *
 * Polling.  poll() sleeps in ppoll(2) on the sockets that have commands
 * outstanding (POLLIN, plus POLLOUT while output is pending or a connect is in
 * progress), until the caller's deadline or the earliest command or connect
 * deadline: no thread of our own, no spinning (ns-resolution ppoll, so the
 * dispatcher's 100 us slices sleep too; conns_step, io/redis_conn.c).  Replies
 * are parsed by a hiredis reader with our own reply-object functions
 * (io/redis_reply.c), into the destination straight from the reader's buffer.
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
 * Failures.  An error reply fails its own shard only (io/redis_reply.c); a socket
 * that fails fails the commands queued on it, and is reconnected at its next use
 * after a backoff (io/redis_conn.c).  The password is never logged and is wiped
 * from memory at close.
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fd.h"
#include "io/redis_impl.h"

/* ------------------------------------------------------------- commands */

static size_t key_of(const struct redis *r, const struct kvs_block_id *block, uint32_t shard,
		     char *out, size_t len)
{
	char hex[33];

	kvs_io_block_hex(block, hex);
	return (size_t)snprintf(out, len, r->cluster ? "%s{%s}:%u" : "%s%s:%u", r->prefix, hex,
				shard);
}

uint32_t endpoint_count(const struct redis *r)
{
	/* acquire: pairs with the release in node_find_add (io/redis_cluster.c), so the
	 * entries below the count are complete. */
	return __atomic_load_n(&r->nep, __ATOMIC_ACQUIRE);
}

static struct endpoint *endpoint_of(const struct redis *r, const struct kvs_block_id *b)
{
	uint64_t h;

	memcpy(&h, b->bytes, sizeof(h));
	return &r->eps[h % r->nep];
}

/* GET <key>, or SET <key> <value header + shard> [PX <ttl>] (and then, with
 * redis_wait_replicas, WAIT <replicas> <ms> pipelined behind it): header (with
 * the value header) and tail into cmd; the shard's bytes stay in the caller's
 * buffer. */
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
		if (r->wait_replicas) {
			char n[24], ms[24];
			int nl = snprintf(n, sizeof(n), "%u", r->wait_replicas);
			int ml = snprintf(ms, sizeof(ms), "%llu", (unsigned long long)r->wait_ms);

			cmd->tail_len += (uint32_t)snprintf(cmd->tail + cmd->tail_len,
							    sizeof(cmd->tail) - cmd->tail_len,
							    "*3\r\n$4\r\nWAIT\r\n$%d\r\n%s\r\n$%d\r\n"
							    "%s\r\n", nl, n, ml, ms);
		}
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
	cmd->wait_state = write && r->wait_replicas ? WAIT_SET : WAIT_NONE;
	cmd->redirect = REDIR_NONE; /* cluster mode: a fresh command, no redirection yet */
	cmd->asking = cmd->ask_pending = false;
	cmd->redirects = 0;
	cmd->tries = 0;
	cmd->last_err = 0;
}

/* --------------------------------------------------- the wait descriptor */

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
	uint64_t due = kvs_io_fifo_head(&r->done) ? 1 : cluster_parked_due(r);
	uint32_t nep = endpoint_count(r);

	for (uint32_t e = 0; e < nep; e++) {
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

/* Cluster mode: cmd to its slot's master now, or parked while that master is
 * down (backing off).  0, or -errno when no node serves the slot (logged). */
static int cluster_submit(struct redis *r, struct cmd *cmd, const struct kvs_block_id *block)
{
	struct endpoint *ep;
	struct conn *c;
	int err;

	cmd->slot = cluster_slot(block);
	ep = cluster_route(r, cmd, &err);
	if (!ep)
		return err;
	r->inflight++;
	c = conn_pick(r, ep, &err);
	if (c) {
		conn_send(c, cmd);
	} else { /* down: another try after a map refresh, within the deadline */
		cmd->redirect = REDIR_RETRY;
		cmd->last_err = err;
		if (!cluster_park(r, cmd))
			cmd_finish(r, cmd);
	}
	return 0;
}

static int redis_submit(struct redis *r, const struct kvs_backend_io *io, bool write)
{
	struct cmd *cmd;
	struct conn *c = NULL;
	int err;

	if (r->inflight >= r->qd || !r->free_cmds)
		return -EAGAIN;
	if (!r->cluster) {
		c = conn_pick(r, endpoint_of(r, &io->block), &err);
		if (!c)
			return err; /* logged when the socket failed; retried after the backoff */
	}
	cmd = r->free_cmds;
	r->free_cmds = cmd->next;
	cmd_format(r, cmd, io, write);
	cmd->deadline_ns = kvs_now_ns() + r->command_timeout_ns;
	if (c) {
		r->inflight++;
		conn_send(c, cmd);
	} else if ((err = cluster_submit(r, cmd, &io->block)) < 0) {
		cmd->next = r->free_cmds;
		r->free_cmds = cmd;
		return err;
	}
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
	uint32_t n = 0, nep = endpoint_count(r);

	for (uint32_t e = 0; e < nep; e++) {
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
	struct conn *v[SOCKETS_MAX];

	for (;;) {
		const struct kvs_io_fifo_entry *e;
		uint64_t wake = deadline, due;
		uint32_t k = 0, n;

		if (r->parked)
			cluster_resend(r);
		while (k < max && (e = kvs_io_fifo_head(&r->done))) {
			out[k].token = e->token;
			out[k].result = e->result;
			k++;
			kvs_io_fifo_pop(&r->done);
		}
		if (k > 0)
			return k;
		n = busy_conns(r, v);
		due = cluster_parked_due(r);
		if (n == 0 && due == 0)
			return 0; /* nothing in flight: nothing to wait for */
		if (due && due < wake)
			wake = due; /* a parked command is sent again then */
		if (n) {
			conns_step(v, n, wake);
		} else {
			struct timespec ts = kvs_ns_to_timespec(wake);

			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
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

/* The lookup socket that cmd (the EXISTS of block) goes to: its endpoint's,
 * or in cluster mode its slot's master's; NULL and cmd done with an error when
 * there is none (cluster mode: to be tried again, cluster_lookup_again). */
static struct conn *lookup_conn(struct redis *r, struct cmd *cmd,
				const struct kvs_block_id *block)
{
	struct endpoint *ep;
	struct conn *c;
	int err = 0;

	ep = r->cluster ? cluster_route(r, cmd, &err) : endpoint_of(r, block);
	if (!ep) {
		cmd->result = err;
		cmd->done = true;
		return NULL;
	}
	c = &ep->lookup;
	conn_check_idle(c);
	if (c->state == CONN_DOWN && kvs_now_ns() >= c->retry_ns)
		conn_connect(c);
	if (c->state == CONN_DOWN) {
		cmd->result = c->last_err ? c->last_err : -ECONNREFUSED;
		cmd->done = true;
		if (r->cluster) {
			cmd->redirect = REDIR_RETRY; /* down: after a map refresh */
			cmd->last_err = (int)cmd->result;
		}
		return NULL;
	}
	return c;
}

/* One round of a lookup: every command of cmds[0..k) not done yet, pipelined
 * on the lookup sockets, and their replies (until deadline). */
static void lookup_round(struct redis *r, const struct kvs_block_id *blocks, struct cmd *cmds,
			 size_t k, uint64_t deadline)
{
	struct conn *v[CLUSTER_NODES_MAX] = { NULL }; /* >= KVS_REDIS_MAX_ENDPOINTS */
	uint32_t nv = 0;

	for (size_t j = 0; j < k; j++) {
		struct cmd *cmd = &cmds[j];
		struct conn *c;
		uint32_t m = 0;

		if (cmd->done)
			continue;
		c = lookup_conn(r, cmd, &blocks[cmd->token]);
		if (!c)
			continue;
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
}

/* Ask EXISTS for every asked block, pipelined on the lookup sockets, and wait
 * for the replies (command_timeout_ns at most); in cluster mode again for
 * those redirected or retried, while the deadline allows.  Under lookup_mu. */
static int lookup_locked(struct redis *r, const struct kvs_block_id *blocks, size_t n,
			 bool *hits)
{
	uint64_t deadline = kvs_now_ns() + r->command_timeout_ns;
	size_t asked = 0, k = 0;
	struct cmd *cmds;
	char *text = NULL;
	int rc, hit = 0;

	for (size_t i = 0; i < n; i++)
		asked += !hits[i];
	cmds = calloc(asked ? asked : 1, sizeof(*cmds));
	if (!cmds)
		return -ENOMEM;
	rc = lookup_format(r, blocks, n, hits, cmds, &k, &text);
	for (size_t j = 0; j < k && !rc; j++) {
		cmds[j].deadline_ns = deadline;
		if (r->cluster)
			cmds[j].slot = cluster_slot(&blocks[cmds[j].token]);
	}
	for (size_t again = k; again > 0 && !rc;) {
		uint64_t wait_ns = 0;

		lookup_round(r, blocks, cmds, k, deadline);
		again = 0;
		for (size_t j = 0; j < k; j++)
			again += cluster_lookup_again(r, &cmds[j], deadline, &wait_ns);
		if (again && wait_ns) { /* CLUSTERDOWN, TRYAGAIN, a node down: a backoff */
			uint64_t until = kvs_now_ns() + wait_ns;
			struct timespec ts = kvs_ns_to_timespec(until < deadline ? until : deadline);

			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
	}
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
int endpoint_parse(struct redis *r, struct endpoint *ep, const char *s, size_t len)
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

/* The longest password redis_password_file may hold (its first line; docs/io.md,
 * "redis"): Redis passwords are often long random strings. */
#define PASSWORD_FILE_MAX 4096

/*
 * The first line of path (without its line end) into out[PASSWORD_FILE_MAX + 2]:
 * the whole of it, or an error naming the key and the limit; never a password
 * cut short (one cut to 255 bytes was WRONGPASS for a server whose password the
 * file held whole).  A regular file only, opened O_NONBLOCK (common/fd.h: a
 * FIFO there hung the open, and kvs_store_config_check and kvs_store_open with
 * it, for ever), and read no further than the limit (a huge file costs
 * nothing); a symbolic link is followed (a mounted secret is one).  0, -EINVAL
 * (not a regular file, empty, too long, a NUL byte in it) or -errno; the
 * contents are never logged.
 */
static int password_read(struct redis *r, const char *path, char *out)
{
	const size_t cap = PASSWORD_FILE_MAX + 1; /* a full line and its line end */
	struct stat st;
	size_t n = 0, line;
	int fd = kvs_fd_open_regular(path, O_RDONLY, true, &st), rc = 0;

	if (fd == -KVS_ECORRUPT) {
		kvs_log_error(&r->log, "backend: redis_password_file '%s' is a %s, not a regular "
				       "file: name a file whose first line is the password",
			      path, kvs_fd_kind(st.st_mode));
		return -EINVAL;
	}
	if (fd < 0) {
		kvs_log_error(&r->log, "backend: redis_password_file '%s': %s", path, kvs_strerror(fd));
		return fd;
	}
	if (st.st_mode & 0077)
		kvs_log_warn(&r->log, "backend: redis_password_file '%s' is readable by group or "
				      "others (mode %03o): chmod 600 it", path,
			     (unsigned)(st.st_mode & 0777));
	while (n < cap && rc == 0) {
		ssize_t k = read(fd, out + n, cap - n);

		if (k > 0)
			n += (size_t)k;
		else if (k == 0)
			break;
		else if (errno != EINTR)
			rc = -errno;
	}
	close(fd);
	if (rc) {
		kvs_log_error(&r->log, "backend: redis_password_file '%s': %s", path, kvs_strerror(rc));
		return rc;
	}
	for (line = 0; line < n && out[line] != '\n' && out[line] != '\r'; line++)
		if (out[line] == '\0') {
			kvs_log_error(&r->log, "backend: redis_password_file '%s': a NUL byte in its "
					       "first line (the password)", path);
			return -EINVAL;
		}
	if (line > PASSWORD_FILE_MAX) {
		kvs_log_error(&r->log, "backend: redis_password_file '%s': its first line (the "
				       "password) is longer than %d bytes, the most it may hold",
			      path, PASSWORD_FILE_MAX);
		return -EINVAL;
	}
	out[line] = '\0';
	if (!out[0]) {
		kvs_log_error(&r->log, "backend: redis_password_file '%s' is empty", path);
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

int endpoint_init(struct redis *r, struct endpoint *ep)
{
	ep->data = calloc(r->nconn, sizeof(*ep->data));
	if (!ep->data)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->nconn; i++)
		conn_init(&ep->data[i], r, ep);
	conn_init(&ep->lookup, r, ep);
	return 0;
}

/* Connect the lookup socket of ep, run its handshake, a PING and INFO cluster:
 * -EACCES / -EINVAL when the server refuses them (a wrong or missing password,
 * a bad db) or is a Redis Cluster node (redis_cluster=1 is for those); the
 * connect's error when the server does not answer, unless start_degraded
 * (then it is logged, and its transfers fail until it answers); 0 otherwise. */
static int endpoint_check(struct redis *r, struct endpoint *ep)
{
	static const char ping_text[] = "*1\r\n$4\r\nPING\r\n";
	static const char info_text[] = "*2\r\n$4\r\nINFO\r\n$7\r\ncluster\r\n";
	struct cmd ping = { .kind = CMD_PING, .val = ping_text, .val_len = sizeof(ping_text) - 1,
			    .result = -EPROTO };
	struct cmd info = { .kind = CMD_INFO, .val = info_text, .val_len = sizeof(info_text) - 1,
			    .result = -EPROTO };
	struct conn *c = &ep->lookup;
	struct conn *v[1] = { c };
	uint64_t deadline = kvs_now_ns() + r->connect_timeout_ns + r->command_timeout_ns;

	if (conn_connect(c) == 0) {
		ping.deadline_ns = info.deadline_ns = deadline;
		conn_push(c, &ping);
		conn_push(c, &info);
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
		if (info.result == 1) {
			kvs_log_error(&r->log, "backend: redis %s is a Redis Cluster node "
					       "(cluster_enabled:1): set redis_cluster=1 (the endpoints "
					       "are then seeds: any nodes of the cluster)", ep->name);
			return -EINVAL;
		}
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

static void redis_close(void *state);

static int redis_open(const struct kvs_backend_config *cfg, void **state)
{
	const struct kvs_backend_redis_config *rcfg = &cfg->redis;
	char password[PASSWORD_FILE_MAX + 2];
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
	r->cluster = rcfg->cluster;
	r->wait_replicas = (uint32_t)rcfg->wait_replicas;
	/* Half the command timeout: a server notices a WAIT's end in its event loop
	 * (up to 1/hz late), and the reply must come before the socket's deadline. */
	r->wait_ms = rcfg->command_timeout_ns / KVS_NSEC_PER_MSEC / 2;
	if (r->wait_ms == 0)
		r->wait_ms = 1;
	memcpy(r->prefix, rcfg->key_prefix, sizeof(r->prefix));
	r->epfd = -1;
	r->timer.fd = -1;
	pthread_mutex_init(&r->lookup_mu, NULL);
	pthread_mutex_init(&r->map_mu, NULL);
	*state = r;

	memcpy(password, rcfg->password, sizeof(rcfg->password)); /* NUL-terminated: checked */
	if (!password[0] && rcfg->password_file[0])
		rc = password_read(r, rcfg->password_file, password);
	if (!rc)
		rc = handshake_format(r, rcfg, password);
	explicit_bzero(password, sizeof(password));
	if (rc)
		goto fail;

	r->max_nodes = KVS_REDIS_MAX_ENDPOINTS;
	if (r->cluster)
		r->max_nodes = SOCKETS_MAX / r->nconn < CLUSTER_NODES_MAX ? SOCKETS_MAX / r->nconn
									  : CLUSTER_NODES_MAX;
	r->eps = calloc(r->max_nodes, sizeof(*r->eps));
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
		rc = endpoint_init(r, ep);
		if (rc)
			goto fail;
		r->nep++;
		rc = endpoint_parse(r, ep, s, len);
		if (rc)
			goto fail;
		s += len;
		if (!*s)
			break;
	}
	if (r->cluster)
		rc = cluster_open(r);
	for (uint32_t e = 0; e < r->nep && !rc && !r->cluster; e++)
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
	struct conn *v[SOCKETS_MAX];
	uint64_t deadline;
	uint32_t n;

	if (!r)
		return;
	/* Parked commands end, and lost ones are no longer retried; finish what is
	 * in flight (bounded by the command timeout), then drop it. */
	r->closing = true;
	cluster_close(r, -ECANCELED);
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
	pthread_mutex_destroy(&r->map_mu);
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
